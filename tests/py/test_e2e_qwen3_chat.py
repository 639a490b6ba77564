"""Chat end to end on the qwen3-chat fixture (a 1-layer random-weight Qwen3 with the real Qwen3 tokenizer and
chat template, ../shared/fixtures/qwen3-chat, ~30 MB; skipped when absent). Random weights: the replies are
gibberish, so what is checked is the plumbing: the prompt weft builds (its ids are pinned through the
prompt-derived seed of SPEC §5.3 against Python's jinja2 rendering of the same template, tokenized by the
server), chat_template_kwargs.enable_thinking true/false, streaming == non-streaming, and the reasoning split
into `reasoning_content` when the template opens a <think> block (the Qwen3.5 template, in-repo, passed with
--chat-template).

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_e2e_qwen3_chat.py
"""

import json

import openai
import pytest

from e2e_util import GREEDY, QWEN3_CHAT, ROOT, chat_stream, extra, prompt_seed, render_chat, serving, sha_of, weft_of

QWEN35_TEMPLATE = ROOT / "tests" / "data" / "templates" / "qwen3.5-tokenizer-config.jinja"
THINK, END_THINK = 151667, 151668

pytestmark = pytest.mark.skipif(not (QWEN3_CHAT / "model.safetensors").is_file(),
                                reason=f"{QWEN3_CHAT} is absent (a ../shared extra, not in a fresh clone)")

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def srv():
    with serving(QWEN3_CHAT) as s:
        s.oai = s.client()
        s.name = s.model_id()
        s.template = json.loads((QWEN3_CHAT / "tokenizer_config.json").read_text())["chat_template"]
        yield s


@pytest.fixture(scope="module")
def thinking_srv():
    with serving(QWEN3_CHAT, "--chat-template", QWEN35_TEMPLATE) as s:
        s.oai = s.client()
        s.name = s.model_id()
        s.template = QWEN35_TEMPLATE.read_text()
        yield s


def chat(s, messages=HI, **kw):
    kw.setdefault("max_tokens", 3)
    return s.oai.chat.completions.create(model=s.name, messages=messages, **kw)


def test_models_context(srv):
    m = srv.oai.models.list().data[0]
    assert m.id == "qwen3-chat" and extra(m, "context_length") == extra(m, "max_model_len") == 40960


@pytest.mark.parametrize("thinking", [None, True, False])
def test_prompt_matches_template(srv, thinking):
    """The ids weft feeds are the tokenized jinja2 rendering. enable_thinking absent: left undefined, so the
    template's own default applies (Qwen3: thinking)."""
    kw = {} if thinking is None else {"extra_body": {"chat_template_kwargs": {"enable_thinking": thinking}}}
    r = chat(srv, **kw)
    text = render_chat(srv.template, HI, **({} if thinking is None else {"enable_thinking": thinking}))
    assert text.endswith("<think>\n\n</think>\n\n") == (thinking is False)
    ids = srv.tokenize(text)
    assert r.usage.prompt_tokens == len(ids) and weft_of(r)["seed"] == prompt_seed(ids)


def test_chat_shape_and_streaming(srv):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    r = chat(srv, msgs, max_tokens=5, **GREEDY)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("length", "stop")
    u = r.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens and u.prompt_tokens_details is not None
    content, reasoning, chunks = chat_stream(srv.oai, model=srv.name, messages=msgs, max_tokens=5, **GREEDY,
                                             stream_options={"include_usage": True})
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    assert content == (r.choices[0].message.content or "")
    assert reasoning == (extra(r.choices[0].message, "reasoning_content") or "")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == u.completion_tokens
    assert [c for c in chunks[:-1] if c.usage is not None] == []
    again = chat(srv, msgs, max_tokens=5, **GREEDY)
    assert sha_of(again) == sha_of(r)


def test_multi_turn(srv):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."}]
    r = chat(srv, msgs, seed=4)
    ids = srv.tokenize(render_chat(srv.template, msgs))
    assert r.usage.prompt_tokens == len(ids)
    assert weft_of(r)["seed"] == 4


def test_reasoning_split_when_template_thinks(thinking_srv):
    """The Qwen3.5 template opens <think> in the generation prompt when thinking is on: the reply is reasoning
    until </think>; with thinking off everything is content."""
    s = thinking_srv
    on = chat(s, max_tokens=4, extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **GREEDY)
    m = on.choices[0].message
    assert (m.content or "") == "" and extra(m, "reasoning_content")
    ids = s.tokenize(render_chat(s.template, HI, enable_thinking=True))
    assert ids[-2:] == [THINK, 198] and weft_of(on)["seed"] == prompt_seed(ids)
    content, reasoning, _ = chat_stream(s.oai, model=s.name, messages=HI, max_tokens=4, **GREEDY,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert content == "" and reasoning == extra(m, "reasoning_content")

    off = chat(s, max_tokens=4, extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **GREEDY)
    assert off.choices[0].message.content and not extra(off.choices[0].message, "reasoning_content")
    content, reasoning, _ = chat_stream(s.oai, model=s.name, messages=HI, max_tokens=4, **GREEDY,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert content == off.choices[0].message.content and reasoning == ""


def test_think_tags_never_leak(srv, thinking_srv):
    """A generated </think> closes the reasoning and a generated <think> opens it; neither tag shows up as text."""
    r = chat(thinking_srv, max_tokens=1, logit_bias={str(END_THINK): 100}, **GREEDY,
             extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert weft_of(r)["token_sha"] and r.usage.completion_tokens == 1
    m = r.choices[0].message
    assert (m.content or "") == "" and (extra(m, "reasoning_content") or "") == ""
    r = chat(srv, max_tokens=1, logit_bias={str(THINK): 100}, **GREEDY)
    m = r.choices[0].message
    assert (m.content or "") == "" and (extra(m, "reasoning_content") or "") == ""
    # after the </think> that closed the reasoning, a second one is plain content
    r = chat(thinking_srv, max_tokens=2, logit_bias={str(END_THINK): 100}, **GREEDY,
             extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    m = r.choices[0].message
    assert m.content == "</think>" and (extra(m, "reasoning_content") or "") == ""


def test_template_default_without_kwargs(thinking_srv):
    """Without chat_template_kwargs (and no --thinking/--no-thinking) enable_thinking stays undefined: the
    Qwen3.5 template then does not think, so the reply is content."""
    s = thinking_srv
    r = chat(s, max_tokens=3, **GREEDY)
    ids = s.tokenize(render_chat(s.template, HI))
    assert ids[-4:] == [THINK, 271, END_THINK, 271] and weft_of(r)["seed"] == prompt_seed(ids)
    assert r.choices[0].message.content and not extra(r.choices[0].message, "reasoning_content")


def test_no_thinking_flag(srv):
    """--no-thinking sets enable_thinking false for requests that do not say; a request's kwargs still win."""
    with serving(QWEN3_CHAT, "--no-thinking") as s:
        oai, name = s.client(), s.model_id()
        off = oai.chat.completions.create(model=name, messages=HI, max_tokens=2, **GREEDY)
        on = oai.chat.completions.create(model=name, messages=HI, max_tokens=2, **GREEDY,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    for r, thinking in ((off, False), (on, True)):
        ids = srv.tokenize(render_chat(srv.template, HI, enable_thinking=thinking))
        assert r.usage.prompt_tokens == len(ids) and weft_of(r)["seed"] == prompt_seed(ids)


@pytest.mark.parametrize("msgs,text", [
    ([{"role": "user", "content": "Hi"}, {"role": "system", "content": "late"}],
     "System message must be at the beginning"),
    ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], "No user query found"),
])
def test_template_exception_is_named_400(thinking_srv, msgs, text):
    """A template's raise_exception is a 400 carrying its message (llama.cpp #11402), and the next request works."""
    s = thinking_srv
    with pytest.raises(openai.BadRequestError) as ei:
        chat(s, msgs)
    assert ei.value.param == "messages" and text in ei.value.message
    assert chat(s, max_tokens=2, **GREEDY).choices[0].finish_reason == "length"
