/* test_template_errors.c — the renderer under bad input: malformed templates fail to compile with a named,
 * line-numbered WEFT_EFORMAT; render failures (raise_exception, type errors, limits) return WEFT_EINVAL or
 * WEFT_ENOMEM and leave the compiled template usable; truncated and mutated real templates never crash
 * (run under ASan/UBSan); one compiled template renders from several threads at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/template.h"
#include "check.h"

#define DIR TEST_DATA "templates/"

/* The file's bytes, NUL-terminated (NULL when it cannot be read). */
static char *read_file(const char *path, size_t *n) {
    char *s = NULL;
    weft_err err = {0};
    return weft_read_file(path, &s, n, &err) ? NULL : s;
}

static weft_status compile(const char *src, weft_template **t, weft_err *e) {
    return weft_template_compile(src, strlen(src), t, e);
}

/* Renders src with ctx (JSON text); returns the status and fills e / *out. */
static weft_status render(const char *src, const char *ctx, const weft_template_opts *o, char **out,
                          weft_err *e) {
    weft_template *t = NULL;
    *out = NULL;
    weft_status st = compile(src, &t, e);
    if (st) return st;
    json_t *c = json_loads(ctx, 0, NULL);
    st = weft_template_render(t, c, o, out, NULL, e);
    json_decref(c);
    weft_template_free(t);
    return st;
}

static void test_compile_errors(void) {
    static const struct {
        const char *src, *needle;
    } bad[] = {
        {"hello\n{{ x", "line 2"},
        {"{% if x %}\nunclosed if", "'endif'"},
        {"a\nb\n{{ x | nofilter }}", "No filter named 'nofilter'"},
        {"{{ x is notest }}", "No test named 'notest'"},
        {"{{ 1 + }}", "unexpected"},
        {"{{ (1, 2 }}", "unexpected '}'"},
        {"{% frobnicate %}", "unknown tag 'frobnicate'"},
        {"{% endif %}", "unknown tag 'endif'"},
        {"{{ 'unterminated }}", "unterminated string"},
        {"{# comment", "Missing end of comment tag"},
        {"{% raw %}x", "Missing end of raw directive"},
        {"{% macro m(a=1, b) %}{% endmacro %}", "non-default argument"},
        {"{% set 1 = 2 %}", "can't assign"},
        {"{% include 'x.j2' %}", "not supported"},
        {"{% for x in y recursive %}{% endfor %}", "recursive"},
        {"{% continue %}", "outside of a for loop"},
        {"{{ x is defined is defined }}", "cannot chain"},
        {"{{ '\\N{BULLET}' }}", "not supported"},
        {"{{ 99999999999999999999 }}", "too large"},
        {"{{ f(*args) }}", "not supported"},
        {"{{ ✓ }}", "unexpected character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        weft_template *t = (weft_template *)1;
        weft_err e = {0};
        weft_status st = compile(bad[i].src, &t, &e);
        CHECK_MSG(st == WEFT_EFORMAT && t == NULL, "%s: status %d", bad[i].src, st);
        CHECK_MSG(strstr(e.msg, bad[i].needle) != NULL, "%s: message \"%s\" lacks \"%s\"", bad[i].src, e.msg,
                  bad[i].needle);
        CHECK_MSG(strncmp(e.msg, "chat template line ", 19) == 0, "%s: message \"%s\" has no line",
                  bad[i].src, e.msg);
    }
    /* invalid UTF-8, NULL arguments, a non-object context */
    weft_template *t = NULL;
    weft_err e = {0};
    CHECK(weft_template_compile("a\xff", 2, &t, &e) == WEFT_EFORMAT && strstr(e.msg, "UTF-8"));
    CHECK(weft_template_compile("a\xed\xa0\x80", 4, &t, &e) == WEFT_EFORMAT); /* an encoded surrogate */
    CHECK(weft_template_compile(NULL, 3, &t, &e) == WEFT_EINVAL);
    CHECK(weft_template_compile("x", 1, NULL, &e) == WEFT_EINVAL);
    CHECK(weft_template_compile("", 0, &t, NULL) == WEFT_OK);
    char *out = NULL;
    json_t *arr = json_array();
    CHECK(weft_template_render(t, arr, NULL, &out, NULL, &e) == WEFT_EINVAL && out == NULL);
    CHECK(weft_template_render(t, NULL, NULL, &out, NULL, &e) == WEFT_OK && out && out[0] == 0);
    free(out);
    weft_chat_params p = {.messages = arr};
    json_t *obj = json_object();
    p.messages = obj;
    CHECK(weft_template_render_chat(t, &p, NULL, &out, NULL, &e) == WEFT_EINVAL);
    p.messages = arr;
    p.kwargs = arr;
    CHECK(weft_template_render_chat(t, &p, NULL, &out, NULL, &e) == WEFT_EINVAL);
    json_decref(arr);
    json_decref(obj);
    weft_template_free(t);
    weft_template_free(NULL);
}

static void test_render_errors(void) {
    static const struct {
        const char *src, *ctx, *needle;
    } bad[] = {
        {"a\n{{ raise_exception('Only user and assistant roles are supported!') }}", "{}",
         "line 2: Only user and assistant roles are supported!"},
        {"{{ 'a' + 1 }}", "{}", "can only concatenate str"},
        {"{{ x.y }}", "{}", "'x' is undefined"},
        {"{{ m.content.strip() }}", "{\"m\": {}}", "'dict object' has no attribute 'content'"},
        {"{{ m['role'] + '\\n' }}", "{\"m\": {\"role\": null}}", "unsupported operand"},
        {"{{ 1 // 0 }}", "{}", "division or modulo by zero"},
        {"{% for x in 3 %}{% endfor %}", "{}", "not iterable"},
        {"{% for k, v in [1] %}{% endfor %}", "{}", "not iterable"},
        {"{{ range(10**6) }}", "{}", "Range too big"},
        {"{{ [].append(1) }}", "{}", "unsafe"},
        {"{{ x | tojson }}", "{}", "not JSON serializable"},
        {"{{ 2 ** 64 }}", "{}", "overflow"},
        {"{{ 'x' * 10**12 }}", "{}", "too large"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}", "too deep"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "{}", "out of memory"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        weft_err e = {0};
        weft_template_opts o = {.max_memory = 64u << 20};
        weft_status st = render(bad[i].src, bad[i].ctx, &o, &out, &e);
        CHECK_MSG((st == WEFT_EINVAL || st == WEFT_ENOMEM) && out == NULL, "%s: status %d", bad[i].src, st);
        CHECK_MSG(strstr(e.msg, bad[i].needle) != NULL, "%s: message \"%s\" lacks \"%s\"", bad[i].src, e.msg,
                  bad[i].needle);
        free(out);
    }
}

static void test_limits(void) {
    char *out = NULL;
    weft_err e = {0};
    weft_template_opts o = {.max_output = 1000};
    CHECK(render("{% for i in range(1000) %}xxxx{% endfor %}", "{}", &o, &out, &e) == WEFT_EINVAL &&
          strstr(e.msg, "output exceeds"));
    CHECK(render("{% set x %}{% for i in range(1000) %}xxxx{% endfor %}{% endset %}", "{}", &o, &out, &e) ==
              WEFT_EINVAL &&
          strstr(e.msg, "output exceeds"));
    weft_template_opts s = {.max_steps = 5000};
    CHECK(render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "{}", &s, &out,
                 &e) == WEFT_EINVAL &&
          strstr(e.msg, "too many loop iterations"));
    CHECK(render("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}ok", "{}", &s, &out,
                 &e) == WEFT_OK &&
          !strcmp(out, "ok"));
    free(out);
    /* nesting that would exhaust the C stack is refused at compile time */
    size_t n = 20000;
    char *deep = malloc(2 * n + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) deep[3 + i] = '(';
    deep[3 + n] = '1';
    for (size_t i = 0; i < n; i++) deep[4 + n + i] = ')';
    strcpy(deep + 4 + 2 * n, " }}");
    weft_template *t = NULL;
    CHECK(compile(deep, &t, &e) == WEFT_EFORMAT && t == NULL);
    for (size_t i = 0; i < n; i++) deep[3 + i] = '-'; /* -(-(-...1 */
    deep[3 + n] = '1';
    deep[4 + n] = 0;
    strcat(deep, " }}");
    CHECK(compile(deep, &t, &e) == WEFT_EFORMAT);
    free(deep);
    char *nest = malloc(n * 24 + 16), *p = nest;
    for (size_t i = 0; i < 2000; i++) p += sprintf(p, "{%% if true %%}");
    CHECK(compile(nest, &t, &e) == WEFT_EFORMAT);
    free(nest);
    /* strftime_now without an injected time uses the clock */
    CHECK(render("{{ strftime_now('%Y') | length }}", "{}", NULL, &out, &e) == WEFT_OK && !strcmp(out, "4"));
    free(out);
}

/* peers.md: a template error must not poison the template; the next valid request renders. */
static void test_not_poisoned(void) {
    size_t n;
    char *src = read_file(DIR "llamacpp-mistralai-Mistral-Nemo-Instruct-2407.jinja", &n);
    CHECK(src != NULL);
    if (!src) return;
    weft_template *t = NULL;
    weft_err e = {0};
    CHECK(weft_template_compile(src, n, &t, &e) == WEFT_OK);
    free(src);
    json_t *bad =
        json_loads("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":\"a\"},"
                   "{\"role\":\"assistant\",\"content\":\"b\"}]",
                   0, NULL);
    json_t *good = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    char *out = NULL;
    weft_chat_params p = {.messages = bad, .bos_token = "<s>", .eos_token = "</s>"};
    CHECK(weft_template_render_chat(t, &p, NULL, &out, NULL, &e) == WEFT_EINVAL);
    CHECK_MSG(strstr(e.msg, "conversation roles must alternate user/assistant/user/assistant/...") != NULL,
              "%s", e.msg);
    p.messages = good;
    CHECK(weft_template_render_chat(t, &p, NULL, &out, NULL, &e) == WEFT_OK &&
          !strcmp(out, "<s>[INST]hi[/INST]"));
    free(out);
    json_decref(bad);
    json_decref(good);
    weft_template_free(t);
}

/* Truncations and byte mutations of the real templates: any status is fine, crashing is not. */
static void test_fuzz(void) {
    static const char *files[] = {"llamacpp-Qwen-Qwen3-0.6B.jinja",
                                  "ollama-nemotron3nano_chat_template.jinja2",
                                  "llamacpp-meta-llama-Llama-3.1-8B-Instruct.jinja",
                                  "ollama-qwen38_chat_template.jinja",
                                  "llamacpp-NVIDIA-Nemotron-Nano-v2.jinja",
                                  "llamacpp-mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                  "qwen3.5-tokenizer-config.jinja",
                                  "extra/openai-gpt-oss-120b.jinja",
                                  "extra/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
                                  "extra/meetkai-functionary-medium-v3.2.jinja"};
    json_t *ctx =
        json_loads("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
                   "\"u /think\"},{\"role\":\"assistant\",\"content\":\"<think>r</think>a\",\"tool_calls\":"
                   "[{\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\","
                   "\"content\":\"t\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                   "\"add_generation_prompt\":true}",
                   0, NULL);
    CHECK(ctx != NULL);
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int compiled = 0, rendered = 0, total = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[256];
        snprintf(path, sizeof path, DIR "%s", files[f]);
        size_t n;
        char *src = read_file(path, &n);
        if (!src) continue;
        char *buf = malloc(n + 1);
        for (int iter = 0; iter < 600; iter++) {
            size_t len = n;
            memcpy(buf, src, n);
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            if (iter % 3 == 0)
                len = (size_t)(seed >> 33) % (n + 1); /* truncate */
            else if (iter % 3 == 1) {                 /* cut out a span */
                size_t at = (size_t)(seed >> 33) % n, span = 1 + (size_t)(seed >> 13) % 24;
                if (at + span > n) span = n - at;
                memmove(buf + at, buf + at + span, n - at - span);
                len = n - span;
            } else
                for (int k = 0; k < 3; k++) { /* mutate three bytes into template syntax characters */
                    seed = seed * 6364136223846793005u + 1442695040888963407u;
                    static const char sym[] = "{}%#-+()[]|.'\",=~ \nxi";
                    buf[(seed >> 33) % n] = sym[(seed >> 20) % (sizeof sym - 1)];
                }
            weft_template *t = NULL;
            weft_err e = {0};
            weft_status st = weft_template_compile(buf, len, &t, &e);
            total++;
            CHECK_MSG(st == WEFT_OK || (st == WEFT_EFORMAT && e.msg[0]), "%s iter %d: status %d", files[f],
                      iter, st);
            if (st) continue;
            compiled++;
            char *out = NULL;
            weft_template_opts o = {.now_set = true, .max_steps = 100000, .max_output = 1 << 20};
            st = weft_template_render(t, ctx, &o, &out, NULL, &e);
            CHECK_MSG(st == WEFT_OK || st == WEFT_EINVAL || st == WEFT_ENOMEM, "%s iter %d: render status %d",
                      files[f], iter, st);
            rendered += st == WEFT_OK;
            free(out);
            weft_template_free(t);
        }
        free(buf);
        free(src);
    }
    fprintf(stderr, "  fuzz: %d variants, %d compiled, %d rendered\n", total, compiled, rendered);
    CHECK(total == 6000 && compiled > 0 && rendered > 0);
    json_decref(ctx);
}

typedef struct {
    const weft_template *t;
    const json_t *ctx;
    char *out;
} job;

static void *render_job(void *arg) {
    job *j = arg;
    weft_template_opts o = {.now_set = true};
    for (int i = 0; i < 20; i++) {
        free(j->out);
        j->out = NULL;
        if (weft_template_render(j->t, j->ctx, &o, &j->out, NULL, NULL) != WEFT_OK) break;
    }
    return NULL;
}

static void test_threads(void) {
    size_t n;
    char *src = read_file(DIR "ollama-qwen38_chat_template.jinja", &n);
    weft_template *t = NULL;
    CHECK(src && weft_template_compile(src, n, &t, NULL) == WEFT_OK);
    free(src);
    if (!t) return;
    json_t *ctx = json_loads(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"add_generation_prompt\":true}", 0, NULL);
    job jobs[4] = {{t, ctx, NULL}, {t, ctx, NULL}, {t, ctx, NULL}, {t, ctx, NULL}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, render_job, &jobs[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(jobs[i].out && !strcmp(jobs[i].out, jobs[0].out));
    CHECK(jobs[0].out && strstr(jobs[0].out, "<|im_start|>assistant\n<think>\n"));
    for (int i = 0; i < 4; i++) free(jobs[i].out);
    json_decref(ctx);
    weft_template_free(t);
}

int main(void) {
    test_compile_errors();
    test_render_errors();
    test_limits();
    test_not_poisoned();
    test_fuzz();
    test_threads();
    return check_report("test_template_errors");
}
