/* Tokenizer pipeline features against the HF `tokenizers` package, on small synthetic tokenizer.json files
 * (tests/data/tokenizer/synthetic.json from tools/gen_tok_synthetic.py: byte fallback, Prepend/Replace,
 * Metaspace, NFKC/NFD/Lowercase/Strip, every Split behavior, Punctuation, Digits, WhitespaceSplit,
 * ByteLevel with prefix space, added tokens with lstrip/rstrip/single_word/normalized, Template/Roberta
 * post-processors, ignore_merges), plus malformed inputs that must fail with a named error. */
#include "check.h"
#include "test_tok_util.h"

#include <stdlib.h>
#include <string.h>

static void check_decode(const weft_tokenizer *t, json_t *ids, unsigned flags, json_t *want,
                         const char *what) {
    size_t n = json_array_size(ids);
    int32_t *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    char *out = NULL;
    size_t len = 0;
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_decode(t, v, n, flags, &out, &len, &err), WEFT_OK);
    bool ok = out && len == json_string_length(want) && !memcmp(out, json_string_value(want), len);
    CHECK_MSG(ok, "%s: decode \"%s\" != \"%s\"", what, out ? out : "", json_string_value(want));
    free(out);
    free(v);
}

static void test_synthetic(void) {
    json_t *doc = tu_load_json(TEST_DATA "tokenizer/synthetic.json");
    CHECK(doc != NULL);
    json_t *toks = json_object_get(doc, "tokenizers"), *tj;
    size_t ti;
    json_array_foreach(toks, ti, tj) {
        const char *name = json_string_value(json_object_get(tj, "name"));
        char *js = json_dumps(json_object_get(tj, "tokenizer"), JSON_COMPACT);
        weft_tokenizer *t = NULL;
        weft_err err = {0};
        weft_status st = weft_tokenizer_from_hf_json(js, strlen(js), NULL, 0, name, &t, &err);
        free(js);
        CHECK_MSG(st == WEFT_OK, "%s: %s", name, err.msg);
        if (st) continue;
        json_t *cases = json_object_get(tj, "cases"), *c;
        size_t idx, n_ok = 0;
        json_array_foreach(cases, idx, c) {
            json_t *text = json_object_get(c, "text");
            const char *s = json_string_value(text);
            size_t sl = json_string_length(text);
            char what[96];
            snprintf(what, sizeof what, "%s case %zu", name, idx);
            bool ok = tu_check_encode(t, what, s, sl, WEFT_TOK_PARSE_SPECIAL, json_object_get(c, "ids"));
            ok = tu_check_encode(t, what, s, sl, WEFT_TOK_PARSE_SPECIAL | WEFT_TOK_ADD_SPECIAL,
                                 json_object_get(c, "ids_special")) &&
                 ok;
            ok = tu_check_encode(t, what, s, sl, 0, json_object_get(c, "ids_plain")) && ok;
            CHECK_MSG(ok, "%s", what);
            n_ok += ok;
            check_decode(t, json_object_get(c, "ids_special"), WEFT_DETOK_RENDER_SPECIAL,
                         json_object_get(c, "decoded"), what);
            check_decode(t, json_object_get(c, "ids_special"), 0, json_object_get(c, "decoded_skip"), what);
        }
        fprintf(stderr, "synthetic %s: %zu/%zu cases match tokenizers\n", name, n_ok, json_array_size(cases));
        weft_tokenizer_free(t);
    }
    CHECK(json_array_size(toks) >= 5);
    json_decref(doc);
}

/* A minimal valid tokenizer.json around the given sections (printf-style pieces). */
static char *make_json(const char *model, const char *pre, const char *norm, const char *dec,
                       const char *added) {
    const char *fmt = "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                      "\"post_processor\":null,\"decoder\":%s,\"model\":%s}";
    size_t n = strlen(fmt) + strlen(model) + strlen(pre) + strlen(norm) + strlen(dec) + strlen(added) + 1;
    char *s = malloc(n);
    snprintf(s, n, fmt, added, norm, pre, dec, model);
    return s;
}

#define MODEL_OK "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<x>\":3},\"merges\":[\"a b\"]}"
#define BL       "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static void expect_fail(const char *what, const char *json, weft_status code, const char *needle) {
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    weft_status st = weft_tokenizer_from_hf_json(json, strlen(json), NULL, 0, "bad.json", &t, &err);
    CHECK_MSG(st == code, "%s: got %s (%s), want %s", what, weft_status_name(st), err.msg,
              weft_status_name(code));
    CHECK_MSG(t == NULL, "%s: no tokenizer on failure", what);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
    weft_tokenizer_free(t);
}

static void test_malformed(void) {
    expect_fail("bad JSON", "{\"model\": {", WEFT_EFORMAT, "invalid JSON");
    expect_fail("not an object", "[1,2]", WEFT_EFORMAT, "not a JSON object");
    expect_fail("empty", "", WEFT_EFORMAT, "invalid JSON");
    char *j;
    j = make_json("{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}", "null", "null", BL, "[]");
    expect_fail("unknown model type", j, WEFT_ENOTSUP, "Unigram");
    free(j);
    j = make_json("{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}", "null", "null", BL, "[]");
    expect_fail("WordPiece", j, WEFT_ENOTSUP, "WordPiece");
    free(j);
    j = make_json(MODEL_OK, "{\"type\":\"BertPreTokenizer\"}", "null", BL, "[]");
    expect_fail("unknown pre-tokenizer", j, WEFT_ENOTSUP, "BertPreTokenizer");
    free(j);
    j = make_json(MODEL_OK,
                  "{\"type\":\"Sequence\",\"pretokenizers\":[" BL ",{\"type\":\"UnicodeScripts\"}]}", "null",
                  BL, "[]");
    expect_fail("unknown pre-tokenizer in a Sequence", j, WEFT_ENOTSUP, "pre_tokenizer.pretokenizers[1]");
    free(j);
    j = make_json(MODEL_OK, BL, "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"\"}", BL, "[]");
    expect_fail("unknown normalizer", j, WEFT_ENOTSUP, "Precompiled");
    free(j);
    j = make_json(MODEL_OK, BL, "null", "{\"type\":\"WordPiece\",\"prefix\":\"##\"}", "[]");
    expect_fail("unknown decoder", j, WEFT_ENOTSUP, "WordPiece");
    free(j);
    j = make_json(MODEL_OK, BL, "null", "null", "[]");
    expect_fail("no decoder", j, WEFT_ENOTSUP, "without a decoder");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a c\"]}", BL, "null",
                  BL, "[]");
    expect_fail("merge with an unknown token", j, WEFT_EFORMAT, "\"c\" is not in the vocabulary");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]}", BL, "null", BL,
                  "[]");
    expect_fail("merge result not in the vocabulary", j, WEFT_EFORMAT, "\"ab\" is not in the vocabulary");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"ab\"]}", BL, "null",
                  BL, "[]");
    expect_fail("merge without a space", j, WEFT_EFORMAT, "model.merges[0]");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}", BL, "null", BL, "[]");
    expect_fail("duplicate id", j, WEFT_EFORMAT, "used twice");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}", BL, "null", BL, "[]");
    expect_fail("negative id", j, WEFT_EFORMAT, "non-negative");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}", BL, "null", BL,
                  "[]");
    expect_fail("dropout", j, WEFT_ENOTSUP, "dropout");
    free(j);
    j = make_json(MODEL_OK, BL, "null", BL, "[{\"id\":1,\"content\":\"<y>\",\"special\":true}]");
    expect_fail("added token over a different model token", j, WEFT_EFORMAT, "the model has");
    free(j);
    j = make_json(MODEL_OK,
                  "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\","
                  "\"invert\":false}",
                  "null", BL, "[]");
    expect_fail("bad regex", j, WEFT_ENOTSUP, "regex");
    free(j);
    j = make_json(MODEL_OK, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}",
                  "null", BL, "[]");
    expect_fail("unknown behavior", j, WEFT_ENOTSUP, "Sideways");
    free(j);
    j = make_json(
        MODEL_OK, BL, "null",
        "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
        "\"start\":0,\"stop\":1}]}",
        "[]");
    expect_fail("Strip stop after Fuse", j, WEFT_ENOTSUP, "stop");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":\"oops\",\"merges\":[]}", BL, "null", BL, "[]");
    expect_fail("vocab not an object", j, WEFT_EFORMAT, "model.vocab");
    free(j);
    j = make_json("{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"fuse_unk\":\"yes\"}", BL, "null", BL,
                  "[]");
    expect_fail("mistyped option", j, WEFT_EFORMAT, "fuse_unk");
    free(j);

    /* tokenizer_config.json problems */
    j = make_json(MODEL_OK, BL, "null", BL, "[]");
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    const char *cfg = "{\"eos_token\": \"<nope>\"}";
    CHECK_EQ_INT(weft_tokenizer_from_hf_json(j, strlen(j), cfg, strlen(cfg), NULL, &t, &err), WEFT_EFORMAT);
    CHECK(strstr(err.msg, "<nope>") != NULL);
    cfg = "{\"eos_token\": {\"content\": \"<x>\"}, \"add_eos_token\": true, \"chat_template\": \"{{ x }}\"}";
    CHECK_EQ_INT(weft_tokenizer_from_hf_json(j, strlen(j), cfg, strlen(cfg), NULL, &t, &err), WEFT_OK);
    if (t) {
        CHECK_EQ_INT(weft_tokenizer_eos(t), 3);
        CHECK(weft_tokenizer_add_eos(t));
        CHECK(!strcmp(weft_tokenizer_chat_template(t), "{{ x }}"));
        weft_tok_vec v = {0};
        CHECK_EQ_INT(weft_tokenizer_encode(t, "ab", 2, WEFT_TOK_ADD_SPECIAL, &v, &err), WEFT_OK);
        CHECK(v.n == 2 && v.ids[0] == 2 && v.ids[1] == 3);
        /* a character with no token and no unk/byte fallback is a named error, not a silent drop */
        v.n = 0;
        CHECK_EQ_INT(weft_tokenizer_encode(t, "az", 2, 0, &v, &err), WEFT_ENOTSUP);
        CHECK(strstr(err.msg, "U+007A") != NULL);
        CHECK_EQ_INT(v.n, 0);
        weft_tok_vec_free(&v);
        weft_tokenizer_free(t);
    }
    free(j);
    t = NULL;
    CHECK_EQ_INT(weft_tokenizer_load_hf("tests/data/tokenizer/does-not-exist.json", NULL, &t, &err),
                 WEFT_EIO);
    CHECK(t == NULL && strstr(err.msg, "does-not-exist.json"));
}

static void expect_vocab_fail(const char *what, weft_vocab_desc *d, weft_status code, const char *needle) {
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    weft_status st = weft_tokenizer_from_vocab(d, &t, &err);
    CHECK_MSG(st == code, "%s: got %s (%s)", what, weft_status_name(st), err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
    weft_tokenizer_free(t);
}

static void test_vocab_desc(void) {
    const char *toks[] = {"a", "b", "ab", "<|end|>", "\xC4\xA0", "c"};
    const char *merges[] = {"a b"};
    int32_t types[] = {1, 1, 1, 3, 1, 1};
    weft_vocab_desc d;
    weft_vocab_desc_init(&d);
    d.model = "gpt2";
    d.pre = "qwen2";
    d.n_tokens = 6;
    d.tokens = toks;
    d.token_types = types;
    d.n_merges = 1;
    d.merges = merges;
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_from_vocab(&d, &t, &err), WEFT_OK);
    if (t) {
        int32_t out[8];
        size_t n = 0;
        CHECK_EQ_INT(weft_tokenizer_encode_to(t, "ab<|end|>c", 10, WEFT_TOK_PARSE_SPECIAL, out, 8, &n, &err),
                     WEFT_OK);
        CHECK(n == 3 && out[0] == 2 && out[1] == 3 && out[2] == 5);
        CHECK_EQ_INT(weft_tokenizer_encode_to(t, "ab<|end|>c", 10, WEFT_TOK_PARSE_SPECIAL, out, 2, &n, &err),
                     WEFT_ERANGE);
        CHECK_EQ_INT(n, 3);
        weft_tokenizer_free(t);
    }
    d.pre = "no-such-pre";
    expect_vocab_fail("unknown pre", &d, WEFT_ENOTSUP, "no-such-pre");
    d.pre = "gpt-2";
    d.model = "bert";
    expect_vocab_fail("unknown model", &d, WEFT_ENOTSUP, "bert");
    d.model = "gpt2";
    const char *bad_merges[] = {"ab"};
    d.merges = bad_merges;
    expect_vocab_fail("merge without a space", &d, WEFT_EFORMAT, "no separating space");
    const char *unk_merges[] = {"a z"};
    d.merges = unk_merges;
    expect_vocab_fail("merge with an unknown token", &d, WEFT_EFORMAT, "right token");
    d.merges = merges;
    const char *dup[] = {"a", "b", "ab", "a", "\xC4\xA0", "c"};
    d.tokens = dup;
    expect_vocab_fail("duplicate token", &d, WEFT_EFORMAT, "duplicate token");
    d.tokens = toks;
    d.bos = 99;
    expect_vocab_fail("bos out of range", &d, WEFT_EFORMAT, "bos");
    d.bos = -1;
    d.add_bos = 1;
    expect_vocab_fail("add_bos without bos", &d, WEFT_EFORMAT, "bos_token_id");
    d.add_bos = -1;
    d.pre = "llama-bpe"; /* llama.cpp adds BOS for llama3 vocabularies by default */
    expect_vocab_fail("llama3 default add_bos without bos", &d, WEFT_EFORMAT, "bos_token_id");
    d.tokens = NULL;
    expect_vocab_fail("no tokens", &d, WEFT_EINVAL, "missing");

    /* SPM: empty tokens get llama.cpp's "[EMPTY_i]" name; add_space_prefix decides the dummy prefix */
    const char *spm[] = {"<unk>",
                         "<s>",
                         "</s>",
                         "",
                         "a",
                         ("\xE2\x96\x81"
                          "a")};
    int32_t spm_types[] = {2, 3, 3, 1, 1, 1};
    weft_vocab_desc_init(&d);
    d.model = "llama";
    d.n_tokens = 6;
    d.tokens = spm;
    d.token_types = spm_types;
    for (int prefix = 0; prefix < 2; prefix++) {
        d.add_space_prefix = (int8_t)(prefix ? -1 : 0);
        t = NULL;
        CHECK_EQ_INT(weft_tokenizer_from_vocab(&d, &t, &err), WEFT_OK);
        if (!t) continue;
        CHECK_EQ_INT(weft_tokenizer_lookup(t, "[EMPTY_3]", 9), 3);
        int32_t out[4];
        size_t n = 0;
        CHECK_EQ_INT(weft_tokenizer_encode_to(t, "a", 1, WEFT_TOK_ADD_SPECIAL, out, 4, &n, &err), WEFT_OK);
        CHECK(n == 2 && out[0] == 1 && out[1] == (prefix ? 5 : 4));
        CHECK(weft_tokenizer_strips_leading_space(t) == (prefix == 1));
        weft_tokenizer_free(t);
    }
}

/* ---- structural mutations: every field of a tokenizer.json replaced by values of other types ---- */

typedef struct walk {
    int target, count;
    json_t *replacement;
    bool done;
} walk;

/* Visits nodes in a fixed order; the big model.vocab / model.merges containers count as one node each plus
 * their first elements. Replaces node number w->target by w->replacement. */
static void visit(json_t *node, walk *w, int depth, bool big) {
    if (w->done || depth > 8) return;
    if (json_is_object(node)) {
        const char *k;
        json_t *v;
        void *tmp;
        int i = 0;
        json_object_foreach_safe(node, tmp, k, v) {
            if (big && i++ >= 2) break;
            if (w->count++ == w->target) {
                json_object_set(node, k, w->replacement);
                w->done = true;
                return;
            }
            visit(v, w, depth + 1, !strcmp(k, "vocab") || !strcmp(k, "merges"));
            if (w->done) return;
        }
    } else if (json_is_array(node)) {
        for (size_t i = 0; i < json_array_size(node) && (!big || i < 2); i++) {
            if (w->count++ == w->target) {
                json_array_set(node, i, w->replacement);
                w->done = true;
                return;
            }
            visit(json_array_get(node, i), w, depth + 1, false);
            if (w->done) return;
        }
    }
}

static void test_mutations(void) {
    json_t *doc = tu_load_json(TEST_DATA "tokenizer/synthetic.json");
    json_t *toks = json_object_get(doc, "tokenizers"), *tj;
    size_t ti;
    int loaded = 0, rejected = 0;
    json_array_foreach(toks, ti, tj) {
        const char *name = json_string_value(json_object_get(tj, "name"));
        if (strcmp(name, "llama_legacy") && strcmp(name, "splits") && strcmp(name, "added_flags")) continue;
        json_t *base = json_object_get(tj, "tokenizer");
        for (int target = 0;; target++) {
            bool any = false;
            for (int r = 0; r < 7; r++) {
                json_t *rep = r == 0   ? json_null()
                              : r == 1 ? json_true()
                              : r == 2 ? json_integer(-1)
                              : r == 3 ? json_integer(1000000000)
                              : r == 4 ? json_string("x")
                              : r == 5 ? json_array()
                                       : json_object();
                json_t *copy = json_deep_copy(base);
                walk w = {target, 0, rep, false};
                visit(copy, &w, 0, false);
                json_decref(rep);
                if (!w.done) {
                    json_decref(copy);
                    break;
                }
                any = true;
                char *js = json_dumps(copy, JSON_COMPACT);
                json_decref(copy);
                weft_tokenizer *t = NULL;
                weft_err err = {0};
                weft_status st = weft_tokenizer_from_hf_json(js, strlen(js), NULL, 0, "mutant", &t, &err);
                free(js);
                CHECK_MSG(st == WEFT_OK || (err.msg[0] && t == NULL),
                          "mutant %d/%d: status %d without a message", target, r, st);
                if (st) {
                    rejected++;
                    continue;
                }
                loaded++;
                static const char TEXT[] = "Hello <s> world [MASK] 123 \xF0\x9F\xA6\x99 caf\xC3\xA9\n";
                weft_tok_vec v = {0};
                st = weft_tokenizer_encode(t, TEXT, sizeof TEXT - 1,
                                           WEFT_TOK_PARSE_SPECIAL | WEFT_TOK_ADD_SPECIAL, &v, &err);
                CHECK_MSG(st == WEFT_OK || err.msg[0], "mutant %d/%d: encode failed silently", target, r);
                char *out = NULL;
                if (!st)
                    CHECK_EQ_INT(
                        weft_tokenizer_decode(t, v.ids, v.n, WEFT_DETOK_RENDER_SPECIAL, &out, NULL, &err),
                        WEFT_OK);
                free(out);
                weft_tok_vec_free(&v);
                weft_tokenizer_free(t);
            }
            if (!any) break;
        }
    }
    fprintf(stderr, "mutations: %d loaded, %d rejected with a message, none crashed\n", loaded, rejected);
    CHECK(rejected > 100);
    json_decref(doc);
}

int main(void) {
    test_synthetic();
    test_mutations();
    test_malformed();
    test_vocab_desc();
    return check_report("test_tokenizer");
}
