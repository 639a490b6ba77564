/* SentencePiece-style vocabularies (GGUF tokenizer.ggml.model = "llama") against llama.cpp:
 *   - stories260K (tok512): every `tokenization` entry of golden_llamacpp.json (ids without BOS, detok);
 *   - llama.cpp's ggml-vocab-llama-spm.gguf (Llama 2, 32000 tokens) with its test pairs.
 * The vocabularies are read from the GGUF files by the tiny metadata reader in test_tok_util.c. */
#include "check.h"
#include "test_tok_util.h"

#include <stdlib.h>
#include <string.h>

static weft_tokenizer *load_vocab(const char *path) {
    tu_gguf_vocab v;
    if (!tu_gguf_vocab_load(path, &v)) return NULL;
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    weft_status st = weft_tokenizer_from_vocab(&v.d, &t, &err);
    if (st) fprintf(stderr, "%s: %s\n", path, err.msg);
    tu_gguf_vocab_free(&v);
    return t;
}

static void check_decode(const weft_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                         const char *want, size_t want_len) {
    char *out = NULL;
    size_t len = 0;
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_decode(t, ids, n, flags, &out, &len, &err), WEFT_OK);
    CHECK_MSG(out && len == want_len && memcmp(out, want, len) == 0, "decode \"%s\" != \"%.*s\"",
              out ? out : "(null)", (int)want_len, want);
    free(out);
}

static void test_stories(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "stories260K/stories260K.gguf");
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(weft_tokenizer_n_vocab(t), 512);
    CHECK_EQ_INT(weft_tokenizer_bos(t), 1);
    CHECK_EQ_INT(weft_tokenizer_eos(t), 2);
    CHECK_EQ_INT(weft_tokenizer_unk(t), 0);
    CHECK(weft_tokenizer_add_bos(t));
    CHECK(!weft_tokenizer_add_eos(t));
    CHECK(weft_tokenizer_is_special(t, 1) && weft_tokenizer_is_special(t, 0) &&
          !weft_tokenizer_is_special(t, 300));
    CHECK(weft_tokenizer_strips_leading_space(t));
    CHECK_EQ_INT(weft_tokenizer_lookup(t, "\xE2\x96\x81the", 6), 265);
    size_t len;
    const char *p = weft_tokenizer_piece(t, 265, &len);
    CHECK(len == 4 && !memcmp(p, " the", 4));
    p = weft_tokenizer_piece(t, 13, &len); /* <0x0A> */
    CHECK(len == 1 && p[0] == '\n');

    json_t *g = tu_load_json(TEST_DATA "stories260K/golden_llamacpp.json");
    json_t *cases = json_object_get(g, "tokenization");
    CHECK(json_array_size(cases) >= 40);
    size_t idx;
    json_t *c;
    int n_ok = 0;
    json_array_foreach(cases, idx, c) {
        json_t *text = json_object_get(c, "text"), *ids = json_object_get(c, "ids"),
               *detok = json_object_get(c, "detok");
        const char *s = json_string_value(text);
        size_t sl = json_string_length(text);
        char what[64];
        snprintf(what, sizeof what, "stories260K tokenization[%zu]", idx);
        bool ok = tu_check_encode(t, what, s, sl, 0, ids);
        CHECK_MSG(ok, "%s", what);
        n_ok += ok;
        /* llama.cpp's detokenize of the same ids (its first token loses the dummy-prefix space) */
        size_t n = json_array_size(ids);
        int32_t *v = malloc((n + 1) * sizeof *v);
        for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        check_decode(t, v, n, 0, json_string_value(detok), json_string_length(detok));
        free(v);
        /* with add_special: BOS in front, the rest unchanged */
        weft_tok_vec vec = {0};
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, s, sl, WEFT_TOK_ADD_SPECIAL, &vec, &err), WEFT_OK);
        CHECK(vec.n == n + 1 && vec.ids[0] == 1);
        /* decoding with the BOS skips it and strips the dummy prefix, as HF decode(skip_special_tokens) does
         */
        check_decode(t, vec.ids, vec.n, 0, s, sl);
        weft_tok_vec_free(&vec);
    }
    fprintf(stderr, "stories260K: %d/%zu tokenization entries match llama.cpp\n", n_ok,
            json_array_size(cases));
    json_decref(g);

    /* special tokens written in the text: only with PARSE_SPECIAL */
    weft_tok_vec v = {0};
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_encode(t, "<s>Hi", 5, WEFT_TOK_PARSE_SPECIAL, &v, &err), WEFT_OK);
    CHECK(v.n >= 2 && v.ids[0] == 1);
    int32_t first_plain = -1;
    v.n = 0;
    CHECK_EQ_INT(weft_tokenizer_encode(t, "<s>Hi", 5, 0, &v, &err), WEFT_OK);
    if (v.n) first_plain = v.ids[0];
    CHECK(first_plain != 1);
    weft_tok_vec_free(&v);
    weft_tokenizer_free(t);
}

static void test_llama_spm(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "tokenizer/llamacpp/ggml-vocab-llama-spm.gguf");
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(weft_tokenizer_n_vocab(t), 32000);
    tu_cases c;
    CHECK(tu_llamacpp_cases(TEST_DATA "tokenizer/llamacpp/ggml-vocab-llama-spm.gguf.inp",
                            TEST_DATA "tokenizer/llamacpp/ggml-vocab-llama-spm.gguf.out", &c));
    size_t n_ok = 0;
    for (size_t i = 0; i < c.n; i++) {
        weft_tok_vec v = {0};
        weft_err err = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, c.text[i], c.text_len[i], 0, &v, &err), WEFT_OK);
        char what[64];
        snprintf(what, sizeof what, "llama-spm case %zu", i);
        bool ok = tu_ids_match_arr(what, v.ids, v.n, c.ids[i], c.n_ids[i]);
        CHECK_MSG(ok, "%s: \"%s\"", what, c.text[i]);
        n_ok += ok;
        /* round trip: the dummy prefix is stripped again */
        check_decode(t, v.ids, v.n, 0, c.text[i], c.text_len[i]);
        weft_tok_vec_free(&v);
    }
    fprintf(stderr, "llama-spm: %zu/%zu llama.cpp test pairs match\n", n_ok, c.n);
    tu_cases_free(&c);
    weft_tokenizer_free(t);
}

int main(void) {
    test_stories();
    test_llama_spm();
    return check_report("test_tok_spm");
}
