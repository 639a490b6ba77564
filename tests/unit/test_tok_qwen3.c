/* Qwen3's tokenizer.json (../shared/models/qwen3-tokenizer, 11 MB, not copied into tests/data) against the HF
 * `tokenizers` package (tests/data/tokenizer/qwen3_expected.json from tools/gen_tok_vectors.py), the chat
 * goldens shipped with it, and llama.cpp's qwen2 test pairs (the same BPE). The same vocabulary is also
 * loaded as a GGUF-style description (model gpt2, pre qwen2) and checked against those pairs. Skips when
 * ../shared is absent. */
#include "check.h"
#include "test_tok_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define QWEN_DIR "models/qwen3-tokenizer/"

static char g_path[512];

static const char *shared_path(const char *rel) {
    snprintf(g_path, sizeof g_path, "%s%s", check_shared_dir(), rel);
    return g_path;
}

static bool sanitized_build(void) {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#endif
#endif
    return false;
}

static void check_accessors(const weft_tokenizer *t) {
    CHECK_EQ_INT(weft_tokenizer_n_vocab(t), 151669);
    CHECK_EQ_INT(weft_tokenizer_bos(t), -1);
    CHECK_EQ_INT(weft_tokenizer_eos(t), 151645);
    CHECK_EQ_INT(weft_tokenizer_pad(t), 151643);
    CHECK(!weft_tokenizer_add_bos(t) && !weft_tokenizer_add_eos(t));
    CHECK(!weft_tokenizer_strips_leading_space(t));
    CHECK(weft_tokenizer_chat_template(t) && strstr(weft_tokenizer_chat_template(t), "<|im_start|>"));
    CHECK_EQ_INT(weft_tokenizer_lookup(t, "<|im_start|>", 12), 151644);
    CHECK_EQ_INT(weft_tokenizer_lookup(t, "<think>", 7), 151667);
    CHECK(weft_tokenizer_is_special(t, 151644));
    CHECK(!weft_tokenizer_is_special(t, 151667));
    CHECK(weft_tokenizer_token_attr(t, 151667) & WEFT_TOKEN_USER_DEFINED);
    CHECK(weft_tokenizer_token_attr(t, 9707) & WEFT_TOKEN_NORMAL);
    size_t len;
    const char *p = weft_tokenizer_piece(t, 198, &len);
    CHECK(p && len == 1 && p[0] == '\n');
    p = weft_tokenizer_token_text(t, 151645, &len);
    CHECK(p && len == 10 && !memcmp(p, "<|im_end|>", 10));
    CHECK(weft_tokenizer_piece(t, 151669, &len) == NULL && len == 0);
    /* add_special adds nothing for Qwen */
    weft_tok_vec v = {0};
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_encode(t, "Hello", 5, WEFT_TOK_ADD_SPECIAL, &v, &err), WEFT_OK);
    CHECK(v.n == 1 && v.ids[0] == 9707);
    weft_tok_vec_free(&v);
}

static void check_expected(const weft_tokenizer *t, json_t *cases, bool skip_non_nfc, const char *label) {
    json_t *c;
    size_t idx, n_ok = 0, n_run = 0;
    json_array_foreach(cases, idx, c) {
        json_t *text = json_object_get(c, "text"), *dec = json_object_get(c, "decoded");
        const char *s = json_string_value(text);
        size_t sl = json_string_length(text);
        bool nfc_stable = json_string_length(dec) == sl && !memcmp(json_string_value(dec), s, sl);
        if (skip_non_nfc && !nfc_stable) continue; /* llama.cpp does not normalize; HF applies NFC */
        n_run++;
        char what[96];
        snprintf(what, sizeof what, "%s case %zu", label, idx);
        bool ok = tu_check_encode(t, what, s, sl, WEFT_TOK_PARSE_SPECIAL, json_object_get(c, "ids"));
        ok = tu_check_encode(t, what, s, sl, 0, json_object_get(c, "ids_plain")) && ok;
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
        /* decode(encode(x)): HF's decode, which is x itself unless NFC changed it */
        weft_tok_vec v = {0};
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, s, sl, WEFT_TOK_PARSE_SPECIAL, &v, &err), WEFT_OK);
        char *out = NULL;
        size_t ol = 0;
        CHECK_EQ_INT(weft_tokenizer_decode(t, v.ids, v.n, WEFT_DETOK_RENDER_SPECIAL, &out, &ol, &err),
                     WEFT_OK);
        CHECK_MSG(out && ol == json_string_length(dec) && !memcmp(out, json_string_value(dec), ol),
                  "%s: decode", what);
        if (nfc_stable) CHECK_MSG(out && ol == sl && !memcmp(out, s, sl), "%s: round trip", what);
        free(out);
        weft_tok_vec_free(&v);
    }
    fprintf(stderr, "%s: %zu/%zu corpus cases match tokenizers\n", label, n_ok, n_run);
}

static void check_pairs(const weft_tokenizer *t, const char *label) {
    tu_cases c;
    CHECK(tu_llamacpp_cases(TEST_DATA "tokenizer/llamacpp/ggml-vocab-qwen2.gguf.inp",
                            TEST_DATA "tokenizer/llamacpp/ggml-vocab-qwen2.gguf.out", &c));
    size_t n_ok = 0;
    for (size_t i = 0; i < c.n; i++) {
        weft_tok_vec v = {0};
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, c.text[i], c.text_len[i], 0, &v, &err), WEFT_OK);
        char what[96];
        snprintf(what, sizeof what, "%s qwen2 pair %zu", label, i);
        bool ok = tu_ids_match_arr(what, v.ids, v.n, c.ids[i], c.n_ids[i]);
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
        weft_tok_vec_free(&v);
    }
    fprintf(stderr, "%s: %zu/%zu llama.cpp qwen2 pairs match\n", label, n_ok, c.n);
    tu_cases_free(&c);
}

static void check_golden_chat(const weft_tokenizer *t) {
    json_t *g = tu_load_json(shared_path(QWEN_DIR "golden_chat.json"));
    json_t *cases = json_object_get(g, "cases"), *c;
    size_t idx, n_ok = 0;
    json_array_foreach(cases, idx, c) {
        json_t *text = json_object_get(c, "text");
        char what[64];
        snprintf(what, sizeof what, "golden_chat case %zu", idx);
        bool ok = tu_check_encode(t, what, json_string_value(text), json_string_length(text),
                                  WEFT_TOK_PARSE_SPECIAL, json_object_get(c, "ids"));
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
    }
    CHECK(json_array_size(cases) > 0);
    fprintf(stderr, "golden_chat.json: %zu/%zu chat renderings tokenize identically\n", n_ok,
            json_array_size(cases));
    json_decref(g);
}

/* The same vocabulary as a GGUF would carry it. */
static weft_tokenizer *vocab_from_json(void) {
    json_t *root = tu_load_json(shared_path(QWEN_DIR "tokenizer.json"));
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    size_t n = json_object_size(vocab) + json_array_size(added);
    const char **toks = calloc(n, sizeof *toks);
    int32_t *types = calloc(n, sizeof *types);
    size_t nm = json_array_size(merges);
    char **ms = calloc(nm, sizeof *ms);
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        toks[json_integer_value(v)] = k;
        types[json_integer_value(v)] = WEFT_VOCAB_TYPE_NORMAL;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        toks[id] = json_string_value(json_object_get(v, "content"));
        types[id] = json_is_true(json_object_get(v, "special")) ? WEFT_VOCAB_TYPE_CONTROL
                                                                : WEFT_VOCAB_TYPE_USER_DEFINED;
    }
    json_array_foreach(merges, i, v) {
        const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
        ms[i] = malloc(strlen(a) + strlen(b) + 2);
        sprintf(ms[i], "%s %s", a, b);
    }
    weft_vocab_desc d;
    weft_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "qwen2";
    d.n_tokens = (int64_t)n;
    d.tokens = toks;
    d.token_types = types;
    d.n_merges = (int64_t)nm;
    d.merges = (const char *const *)ms;
    d.eos = 151645;
    d.pad = 151643;
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    double t0 = weft_now();
    if (weft_tokenizer_from_vocab(&d, &t, &err)) fprintf(stderr, "vocab desc: %s\n", err.msg);
    fprintf(stderr, "qwen3 as a vocab description: built in %.3f s\n", weft_now() - t0);
    for (i = 0; i < nm; i++) free(ms[i]);
    free(ms);
    free(toks);
    free(types);
    json_decref(root);
    return t;
}

typedef struct thread_arg {
    const weft_tokenizer *t;
    json_t *cases;
    int failures;
} thread_arg;

static void *encode_all(void *p) {
    thread_arg *a = p;
    for (int rep = 0; rep < 3; rep++) {
        json_t *c;
        size_t idx;
        json_array_foreach(a->cases, idx, c) {
            json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
            weft_tok_vec v = {0};
            weft_err err = {0};
            if (weft_tokenizer_encode(a->t, json_string_value(text), json_string_length(text),
                                      WEFT_TOK_PARSE_SPECIAL, &v, &err) ||
                v.n != json_array_size(want))
                a->failures++;
            for (size_t i = 0; i < v.n && i < json_array_size(want); i++)
                if (v.ids[i] != json_integer_value(json_array_get(want, i))) a->failures++;
            weft_tok_vec_free(&v);
        }
    }
    return NULL;
}

static void check_threads(const weft_tokenizer *t, json_t *cases) {
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){t, cases, 0};
        CHECK(pthread_create(&th[i], NULL, encode_all, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].failures, 0);
    }
}

static void check_speed(const weft_tokenizer *t, json_t *cases) {
    char *big = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&big, &n);
    for (int rep = 0; rep < 40; rep++) {
        json_t *c;
        size_t idx;
        json_array_foreach(cases, idx, c) {
            fputs(json_string_value(json_object_get(c, "text")), m);
        }
    }
    fclose(m);
    weft_tok_vec v = {0};
    weft_err err = {0};
    double t0 = weft_now();
    CHECK_EQ_INT(weft_tokenizer_encode(t, big, n, WEFT_TOK_PARSE_SPECIAL, &v, &err), WEFT_OK);
    double dt = weft_now() - t0;
    fprintf(stderr, "encode: %zu bytes -> %zu ids in %.3f s (%.1f MB/s)\n", n, v.n, dt, n / dt / 1e6);
    weft_tok_vec_free(&v);
    free(big);
}

int main(void) {
    if (!check_shared_dir()) {
        fprintf(stderr,
                "SKIP test_tok_qwen3: ../shared is absent (needs ../shared/" QWEN_DIR "tokenizer.json)\n");
        return 0;
    }
    char cfg_path[512];
    snprintf(cfg_path, sizeof cfg_path, "%s" QWEN_DIR "tokenizer_config.json", check_shared_dir());
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    double t0 = weft_now();
    weft_status st = weft_tokenizer_load_hf(shared_path(QWEN_DIR "tokenizer.json"), cfg_path, &t, &err);
    double dt = weft_now() - t0;
    if (st == WEFT_EIO) {
        fprintf(stderr, "SKIP test_tok_qwen3: %s\n", err.msg);
        return 0;
    }
    CHECK_MSG(st == WEFT_OK, "%s", err.msg);
    if (!t) return check_report("test_tok_qwen3");
    fprintf(stderr, "qwen3 tokenizer.json loaded in %.3f s%s\n", dt,
            sanitized_build() ? " (sanitized build)" : "");
    /* Not a benchmark (timings on a shared machine vary several-fold): a bound that only a pathological load
     * (quadratic merges, per-token reallocation) exceeds. */
    CHECK_MSG(dt < (sanitized_build() ? 30.0 : 10.0), "load took %.3f s", dt);

    check_accessors(t);
    json_t *exp = tu_load_json(TEST_DATA "tokenizer/qwen3_expected.json");
    json_t *cases = json_object_get(exp, "cases");
    CHECK(json_array_size(cases) > 50);
    check_expected(t, cases, false, "qwen3 tokenizer.json");
    check_golden_chat(t);
    check_pairs(t, "qwen3 tokenizer.json");
    check_threads(t, cases);
    check_speed(t, cases);

    weft_tokenizer *tv = vocab_from_json();
    CHECK(tv != NULL);
    if (tv) {
        CHECK_EQ_INT(weft_tokenizer_n_vocab(tv), 151669);
        check_pairs(tv, "qwen3 vocab desc (qwen2)");
        check_expected(tv, cases, true, "qwen3 vocab desc (qwen2)");
        weft_tokenizer_free(tv);
    }
    json_decref(exp);
    weft_tokenizer_free(t);
    return check_report("test_tok_qwen3");
}
