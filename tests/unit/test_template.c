/* test_template.c — the chat-template renderer against Python jinja2 (configured as transformers renders chat
 * templates): every template of tests/data/templates on every conversation/option case of goldens.json, the
 * feature snippets, the golden_chat files copied from ../shared/models, and the thinking probe.
 * Regenerate the data with tools/gen_template_goldens.py. */
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

static weft_template *load_template(const char *file) {
    char path[512];
    snprintf(path, sizeof path, DIR "%s", file);
    size_t n;
    char *src = read_file(path, &n);
    CHECK_MSG(src != NULL, "cannot read %s", path);
    if (!src) return NULL;
    weft_template *t = NULL;
    weft_err e = {0};
    weft_status st = weft_template_compile(src, n, &t, &e);
    CHECK_MSG(st == WEFT_OK, "%s: %s", file, e.msg);
    free(src);
    return t;
}

/* Prints where two renderings part. */
static void show_diff(const char *what, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu\n    want: \"%.80s\"\n    got:  \"%.80s\"\n", what, i,
            want + from, got + from);
}

static int g_cases, g_ok;

static void check_case(const weft_template *t, const json_t *c, const json_t *outputs, int64_t now) {
    const char *name = json_string_value(json_object_get(c, "template"));
    const char *conv = json_string_value(json_object_get(c, "conversation"));
    json_t *tools = json_object_get(c, "tools");
    weft_chat_params p = {
        .messages = json_object_get(c, "messages"),
        .tools = json_is_null(tools) ? NULL : tools,
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .bos_token = json_string_value(json_object_get(c, "bos_token")),
        .eos_token = json_string_value(json_object_get(c, "eos_token")),
        .kwargs = json_object_get(c, "kwargs"),
    };
    weft_template_opts o = {.now_set = true, .now_unix = now};
    char *out = NULL;
    size_t len = 0;
    weft_err e = {0};
    weft_status st = weft_template_render_chat(t, &p, &o, &out, &len, &e);
    char label[256];
    char *kw = json_dumps(p.kwargs, JSON_COMPACT);
    snprintf(label, sizeof label, "%s / %s / agp=%d / %s", name, conv, p.add_generation_prompt, kw ? kw : "");
    free(kw);
    g_cases++;
    json_t *ref = json_object_get(c, "output_ref"); /* identical renderings are stored once */
    const char *want =
        ref ? json_string_value(json_array_get(outputs, (size_t)json_integer_value(ref))) : NULL;
    if (ref) {
        CHECK_MSG(want != NULL, "%s: bad output_ref", label);
        if (!want) want = "";
        bool same = st == WEFT_OK && len == strlen(want) && memcmp(out, want, len) == 0;
        CHECK_MSG(same, "%s: %s", label, st == WEFT_OK ? "output differs" : e.msg);
        if (st == WEFT_OK && !same) show_diff(label, want, out);
        g_ok += same;
    } else {
        const char *msg = json_string_value(json_object_get(c, "error"));
        bool raised = json_is_true(json_object_get(c, "raised"));
        bool ok = st == WEFT_EINVAL && (!raised || strstr(e.msg, msg) != NULL);
        CHECK_MSG(ok, "%s: want error \"%s\", got status %d \"%s\"", label, msg, st, st ? e.msg : out);
        g_ok += ok;
    }
    free(out);
}

static void test_goldens(void) {
    json_error_t je;
    json_t *doc = json_load_file(DIR "goldens.json", 0, &je);
    CHECK_MSG(doc != NULL, "goldens.json: %s", je.text);
    if (!doc) return;
    int64_t now = json_integer_value(json_object_get(json_object_get(doc, "_about"), "now_unix"));
    json_t *templates = json_object_get(doc, "templates"), *cases = json_object_get(doc, "cases");
    size_t i, j;
    json_t *tj, *c;
    int ntemplates = 0;
    json_array_foreach(templates, i, tj) {
        const char *name = json_string_value(json_object_get(tj, "name"));
        weft_template *t = load_template(json_string_value(json_object_get(tj, "file")));
        if (!t) continue;
        ntemplates++;
        int before = g_cases, ok_before = g_ok;
        json_array_foreach(cases, j, c) {
            if (strcmp(json_string_value(json_object_get(c, "template")), name) == 0)
                check_case(t, c, json_object_get(doc, "outputs"), now);
        }
        fprintf(stderr, "  %-50s %d/%d cases match jinja2\n", name, g_ok - ok_before, g_cases - before);
        weft_template_free(t);
    }
    CHECK(ntemplates >= 30);
    CHECK(g_cases >= 1300);
    json_decref(doc);
}

static void test_snippets(void) {
    json_error_t je;
    json_t *doc = json_load_file(DIR "goldens.json", 0, &je);
    if (!doc) return;
    int64_t now = json_integer_value(json_object_get(json_object_get(doc, "_about"), "now_unix"));
    size_t i;
    json_t *s;
    int n = 0, ok = 0, early = 0;
    json_array_foreach(json_object_get(doc, "snippets"), i, s) {
        const char *src = json_string_value(json_object_get(s, "source"));
        const char *want = json_string_value(json_object_get(s, "output"));
        const char *phase = json_string_value(json_object_get(s, "phase"));
        const char *msg = json_string_value(json_object_get(s, "error"));
        bool raised = json_is_true(json_object_get(s, "raised"));
        weft_template *t = NULL;
        weft_err e = {0};
        n++;
        weft_status st = weft_template_compile(src, strlen(src), &t, &e);
        if (phase && !strcmp(phase, "compile")) {
            CHECK_MSG(st == WEFT_EFORMAT, "snippet %zu should not compile (jinja2: %s): %s", i, msg, src);
            CHECK_MSG(st != WEFT_EFORMAT || strstr(e.msg, "line ") != NULL, "snippet %zu: no line in \"%s\"",
                      i, e.msg);
            ok += st == WEFT_EFORMAT;
            weft_template_free(t);
            continue;
        }
        if (st != WEFT_OK && phase) { /* jinja2 fails later, at render time; weft refuses at compile */
            early++;
            ok++;
            continue;
        }
        CHECK_MSG(st == WEFT_OK, "snippet %zu: %s\n  %s", i, e.msg, src);
        if (st != WEFT_OK) continue;
        weft_template_opts o = {.now_set = true, .now_unix = now};
        char *out = NULL;
        size_t len = 0;
        st = weft_template_render(t, json_object_get(s, "context"), &o, &out, &len, &e);
        if (want) {
            bool same = st == WEFT_OK && len == strlen(want) && memcmp(out, want, len) == 0;
            CHECK_MSG(same, "snippet %zu: %s\n  %s", i, st == WEFT_OK ? "output differs" : e.msg, src);
            if (st == WEFT_OK && !same) show_diff("snippet", want, out);
            ok += same;
        } else {
            bool good = st == WEFT_EINVAL && (!raised || strstr(e.msg, msg) != NULL);
            CHECK_MSG(good, "snippet %zu: want error \"%s\", got %d \"%s\"\n  %s", i, msg, st,
                      st ? e.msg : out, src);
            ok += good;
        }
        free(out);
        weft_template_free(t);
    }
    fprintf(stderr,
            "  snippets: %d/%d agree with jinja2 (%d refused at compile where jinja2 fails at render)\n", ok,
            n, early);
    CHECK(n >= 100);
    json_decref(doc);
}

/* The golden_chat files in ../shared/models were rendered by @huggingface/jinja; copies live in tests/data.
 */
static void test_golden_chat(const char *golden, const char *template_file) {
    json_error_t je;
    char path[256];
    snprintf(path, sizeof path, DIR "%s", golden);
    json_t *doc = json_load_file(path, 0, &je);
    CHECK_MSG(doc != NULL, "%s: %s", golden, je.text);
    weft_template *t = load_template(template_file);
    if (!doc || !t) {
        json_decref(doc);
        weft_template_free(t);
        return;
    }
    size_t i;
    json_t *c;
    int n = 0;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        json_t *opt = json_object_get(c, "options"), *kw = json_object();
        json_t *et = json_object_get(opt, "enable_thinking");
        if (et) json_object_set(kw, "enable_thinking", et);
        weft_chat_params p = {.messages = json_object_get(c, "messages"),
                              .add_generation_prompt =
                                  json_is_true(json_object_get(opt, "add_generation_prompt")),
                              .eos_token = "<|im_end|>",
                              .kwargs = kw};
        char *out = NULL;
        weft_err e = {0};
        weft_status st = weft_template_render_chat(t, &p, NULL, &out, NULL, &e);
        const char *want = json_string_value(json_object_get(c, "text"));
        CHECK_MSG(st == WEFT_OK && !strcmp(out, want), "%s case %zu (%s): %s", golden, i,
                  json_string_value(json_object_get(c, "conversation")), st ? e.msg : "text differs");
        n++;
        free(out);
        json_decref(kw);
    }
    fprintf(stderr, "  %s: %d cases checked\n", golden, n);
    CHECK(n >= 10);
    json_decref(doc);
    weft_template_free(t);
}

/* When ../shared is present, the originals must still equal the copies under tests/data. */
static void test_shared_sources(void) {
    const char *shared = check_shared_dir();
    if (!shared) {
        fprintf(stderr, "  ../shared absent: skipping the comparison with the original template files\n");
        return;
    }
    const char *pairs[][2] = {
        {"models/chat-templates/llamacpp-Qwen-Qwen3-0.6B.jinja", "llamacpp-Qwen-Qwen3-0.6B.jinja"},
        {"models/qwen3.5-tokenizer-config/qwen35_chat_template.jinja", "qwen3.5-tokenizer-config.jinja"},
        {"models/chat-templates/ollama-qwen38_chat_template.jinja", "ollama-qwen38_chat_template.jinja"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s%s", shared, pairs[k][0]);
        snprintf(b, sizeof b, DIR "%s", pairs[k][1]);
        size_t na, nb;
        char *sa = read_file(a, &na), *sb = read_file(b, &nb);
        CHECK_MSG(sa && sb && na == nb && !memcmp(sa, sb, na), "%s differs from its copy %s", a, b);
        free(sa);
        free(sb);
    }
    /* the chat_template strings of the tokenizer configs (the path a server takes), compiled straight from
     * JSON */
    const char *configs[][2] = {
        {"models/qwen3-tokenizer/tokenizer_config.json", "llamacpp-Qwen-Qwen3-0.6B.jinja"},
        {"models/qwen3.5-tokenizer-config/tokenizer_config.json", "qwen3.5-tokenizer-config.jinja"},
    };
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s%s", shared, configs[k][0]);
        snprintf(b, sizeof b, DIR "%s", configs[k][1]);
        json_t *cfg = json_load_file(a, 0, NULL);
        const char *ct = json_string_value(json_object_get(cfg, "chat_template"));
        size_t nb;
        char *copy = read_file(b, &nb);
        CHECK_MSG(ct && copy && strlen(ct) == nb && !memcmp(ct, copy, nb),
                  "%s: chat_template differs from %s", a, b);
        weft_template *t = NULL;
        weft_err e = {0};
        CHECK_MSG(ct && weft_template_compile(ct, strlen(ct), &t, &e) == WEFT_OK, "%s: %s", a, e.msg);
        json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "Hello");
        json_t *kw = json_pack("{s:b}", "enable_thinking", 0);
        weft_chat_params p = {.messages = msgs, .add_generation_prompt = true, .kwargs = kw};
        char *out = NULL;
        /* families-and-formats.md §7.5: [user: "Hello"] with thinking off */
        CHECK(t && weft_template_render_chat(t, &p, NULL, &out, NULL, &e) == WEFT_OK &&
              !strcmp(out,
                      "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        free(out);
        json_decref(msgs);
        json_decref(kw);
        json_decref(cfg);
        free(copy);
        weft_template_free(t);
    }
}

static void test_probe(void) {
    struct {
        const char *file;
        bool mentions, by_default, enabled, disabled;
    } want[] = {
        {"llamacpp-Qwen-Qwen3-0.6B.jinja", true, false, false, true},
        {"llamacpp-Qwen-QwQ-32B.jinja", true, true, true, false},
        {"qwen3.5-tokenizer-config.jinja", true, false, true, true},
        {"ollama-qwen38_chat_template.jinja", true, true, true, true},
        {"ollama-nemotron3nano_chat_template.jinja2", true, true, true, true},
        {"smollm2-135m-instruct.jinja", false, false, false, false},
        {"llamacpp-meta-llama-Llama-3.1-8B-Instruct.jinja", false, false, false, false},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        weft_template *t = load_template(want[k].file);
        if (!t) continue;
        weft_template_thinking th;
        weft_err e = {0};
        CHECK(weft_template_probe_thinking(t, &th, &e) == WEFT_OK);
        CHECK_MSG(th.mentions_think == want[k].mentions && th.opens_by_default == want[k].by_default &&
                      th.opens_when_enabled == want[k].enabled && th.closed_when_disabled == want[k].disabled,
                  "%s: probe %d%d%d%d, want %d%d%d%d", want[k].file, th.mentions_think, th.opens_by_default,
                  th.opens_when_enabled, th.closed_when_disabled, want[k].mentions, want[k].by_default,
                  want[k].enabled, want[k].disabled);
        weft_template_free(t);
    }
}

int main(void) {
    test_goldens();
    fprintf(stderr, "  template cases: %d/%d agree with jinja2\n", g_ok, g_cases);
    test_snippets();
    test_golden_chat("golden_chat_qwen3.json", "llamacpp-Qwen-Qwen3-0.6B.jinja");
    test_golden_chat("golden_chat_qwen35.json", "qwen3.5-tokenizer-config.jinja");
    test_shared_sources();
    test_probe();
    return check_report("test_template");
}
