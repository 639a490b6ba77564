/* weft/template.h — chat templates: a Jinja2-subset renderer (no third-party template engine).
 *
 * A model's chat template (tokenizer_config.json "chat_template", GGUF "tokenizer.chat_template", or a
 * --chat-template FILE) is compiled once with weft_template_compile() and rendered per request.
 *
 * Semantics follow Python jinja2 3.1 configured the way HF transformers renders chat templates
 * (transformers utils/chat_template_utils.py, _compile_jinja_template):
 *   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
 *   keep_trailing_newline=False, autoescape off, default Undefined (prints as "", errors on attribute
 *   access), filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 *   sort_keys=False), globals raise_exception(msg) and strftime_now(fmt), and the {% generation %} tag
 *   (rendered as a plain block).
 * Supported: {{ }}, {% %}, {# #}, whitespace control (- and +), if/elif/else, for (tuple targets, inline
 * `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle,
 * break/continue), set (names, tuples, ns.attr, {% set x %}..{% endset %}), namespace(), macro (positional
 * and keyword arguments, defaults), with, filter blocks, raw; Python-valued expressions (None/True/False,
 * int, float, str, list, tuple, dict; + - * / // % ** ~, comparisons, and/or/not, in/not in, is tests,
 * conditional expressions, slicing [a:b:c]); the usual filters, tests and str/dict/list methods.
 * Not supported (compile error): extends/block/include/import, call blocks, recursive loops.
 * Known differences: str.upper/lower/title cover ASCII, Latin-1, Greek and Cyrillic only; Python repr()
 * escapes an approximation of the non-printable Unicode set; integers are 64-bit (overflow is an error).
 *
 * Errors: syntax errors, unknown filters/tests and unsupported tags fail at compile time with
 * WEFT_EFORMAT; anything that fails while rendering (raise_exception, undefined attribute access,
 * `'a' + 1`, division by zero, exceeding the resource limits) fails with WEFT_EINVAL. In both cases
 * err->msg reads "chat template line N: <message>" (for raise_exception, <message> is the template's own
 * text). Nothing a template or a context can contain crashes the process. */
#ifndef WEFT_TEMPLATE_H
#define WEFT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "weft/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled template. Immutable after compilation: one template may be rendered from several threads at
 * once (each render has its own state). */
typedef struct weft_template weft_template;

/* Compiles template text (UTF-8, `len` bytes; the text need not be NUL-terminated and is copied).
 * On success *out owns the template (free with weft_template_free).
 * Errors: WEFT_EINVAL (NULL arguments), WEFT_EFORMAT (syntax error, unknown filter/test/tag: message names
 * the line), WEFT_ENOMEM. */
weft_status weft_template_compile(const char *src, size_t len, weft_template **out, weft_err *err);

/* Frees a template; NULL is a no-op. */
void weft_template_free(weft_template *t);

/* Per-render options. Zero-initialise; all fields are optional. */
typedef struct weft_template_opts {
    /* strftime_now(fmt) formats this instant (Unix seconds, rendered in UTC) when now_set is true;
     * otherwise it formats the wall clock in local time, as transformers does (datetime.now()). Formatting
     * uses the C locale (%b = "Jan".."Dec"). */
    bool now_set;
    int64_t now_unix;
    /* Limits (0 = default): output bytes (default 64 MiB), working memory bytes (default 512 MiB), loop
     * iterations over the whole render (default 10 million). Exceeding one is a render error. */
    size_t max_output;
    size_t max_memory;
    size_t max_steps;
} weft_template_opts;

/* Renders the template with `ctx`, a JSON object whose members become the template's variables
 * (objects -> dicts with their key order, arrays -> lists, strings, integers, reals, true/false, null ->
 * None). A name absent from ctx is undefined (`x is defined` is false). opts may be NULL.
 * On success *out is a malloc'd NUL-terminated UTF-8 string (caller frees) and *out_len (when non-NULL) its
 * length in bytes. Errors: WEFT_EINVAL (ctx not an object; any render error, see above), WEFT_ENOMEM. */
weft_status weft_template_render(const weft_template *t, const json_t *ctx, const weft_template_opts *opts,
                                 char **out, size_t *out_len, weft_err *err);

/* A chat request, as transformers' apply_chat_template passes it to the template. */
typedef struct weft_chat_params {
    /* Array of message objects: role, content (string, null, or an array of parts such as
     * {"type":"text","text":...}), and optionally reasoning_content, tool_calls, tool_call_id, name. Passed
     * through unchanged. Required. */
    const json_t *messages;
    /* Array of tool schemas, or NULL: then the template sees `tools` = None (defined, `is none`), exactly
     * as transformers passes tools=None. */
    const json_t *tools;
    bool add_generation_prompt;
    /* Special-token strings; NULL leaves the variable undefined (transformers omits unset tokens). */
    const char *bos_token;
    const char *eos_token;
    /* Object of extra template variables, or NULL: enable_thinking, reasoning_effort, the request's
     * chat_template_kwargs... Members override the fields above of the same name (as **kwargs do in
     * transformers), except `messages`. */
    const json_t *kwargs;
} weft_chat_params;

/* Builds the context {messages, tools, documents: None, add_generation_prompt, bos_token, eos_token,
 * ...kwargs} and renders it (see weft_template_render). Errors as weft_template_render; WEFT_EINVAL when
 * messages is not an array or kwargs/tools have the wrong JSON type. */
weft_status weft_template_render_chat(const weft_template *t, const weft_chat_params *p,
                                      const weft_template_opts *opts, char **out, size_t *out_len,
                                      weft_err *err);

/* How a template handles reasoning blocks, found by rendering probe conversations
 * ([{"role":"user","content":"ping"}] with add_generation_prompt=true). */
typedef struct weft_template_thinking {
    bool mentions_think;       /* the template source contains "<think>" */
    bool opens_by_default;     /* with no kwargs the generation prompt ends inside an open <think> block
                                  (the model's first tokens are reasoning, e.g. Qwen3.5, QwQ) */
    bool opens_when_enabled;   /* same, with enable_thinking=true */
    bool closed_when_disabled; /* with enable_thinking=false the prompt ends with a closed, empty
                                  reasoning block ("</think>" after the last "<think>") */
} weft_template_thinking;

/* Fills *out by rendering the probes above (each probe that fails to render counts as false).
 * Errors: WEFT_EINVAL (NULL arguments), WEFT_ENOMEM. */
weft_status weft_template_probe_thinking(const weft_template *t, weft_template_thinking *out, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
