/* Incremental detokenizer: only complete UTF-8 ever leaves it (characters split across byte tokens are held),
 * ill-formed bytes become U+FFFD exactly when they are provably ill-formed, the SentencePiece dummy-prefix
 * space is stripped at the start of a text (after a skipped BOS too), and feeding token by token equals
 * decoding the whole sequence. Uses the committed stories260K (SPM, <0xNN> byte tokens) and GPT-2
 * (byte-level) vocabularies. */
#include "check.h"
#include "test_tok_util.h"

#include <stdlib.h>
#include <string.h>

static weft_tokenizer *load_vocab(const char *path) {
    tu_gguf_vocab v;
    if (!tu_gguf_vocab_load(path, &v)) return NULL;
    weft_tokenizer *t = NULL;
    weft_err err = {0};
    if (weft_tokenizer_from_vocab(&v.d, &t, &err)) fprintf(stderr, "%s: %s\n", path, err.msg);
    tu_gguf_vocab_free(&v);
    return t;
}

/* Feeds ids one by one; every chunk must be complete UTF-8; returns the concatenation (+ flush). */
static char *feed_all(const weft_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, size_t *len) {
    size_t bound = weft_detok_bound(t), cap = bound * (n + 1) + 8, o = 0;
    char *out = malloc(cap), *chunk = malloc(bound);
    weft_detok d;
    weft_detok_init(&d, t, flags);
    for (size_t i = 0; i < n; i++) {
        size_t got = 0;
        weft_err err = {0};
        CHECK_EQ_INT(weft_detok_feed(&d, ids[i], chunk, bound, &got, &err), WEFT_OK);
        CHECK_MSG(tu_utf8_complete(chunk, got), "chunk %zu is not complete UTF-8", i);
        memcpy(out + o, chunk, got);
        o += got;
    }
    size_t f = weft_detok_flush(&d, chunk, bound);
    CHECK(tu_utf8_complete(chunk, f));
    memcpy(out + o, chunk, f);
    o += f;
    free(chunk);
    *len = o;
    return out;
}

static void expect_feed(weft_detok *d, int32_t id, const char *want) {
    char buf[256];
    size_t got = 99;
    weft_err err = {0};
    CHECK_EQ_INT(weft_detok_feed(d, id, buf, sizeof buf, &got, &err), WEFT_OK);
    CHECK_MSG(got == strlen(want) && !memcmp(buf, want, got), "feed %d gave \"%.*s\", want \"%s\"", id,
              (int)got, buf, want);
}

static int32_t spm_byte(uint8_t b) {
    return 3 + b;
} /* <0xNN> ids in Llama-style vocabularies */

static void test_spm(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "stories260K/stories260K.gguf");
    CHECK(t != NULL);
    if (!t) return;
    weft_detok d;
    /* 🦙 = F0 9F A6 99 as four byte tokens: nothing until the last */
    weft_detok_init(&d, t, 0);
    expect_feed(&d, spm_byte(0xF0), "");
    expect_feed(&d, spm_byte(0x9F), "");
    expect_feed(&d, spm_byte(0xA6), "");
    expect_feed(&d, spm_byte(0x99), "\xF0\x9F\xA6\x99");
    /* an incomplete prefix followed by ASCII: U+FFFD only once 'A' proves it ill-formed */
    expect_feed(&d, spm_byte(0xF0), "");
    expect_feed(&d, spm_byte(0x9F), "");
    expect_feed(&d, spm_byte('A'),
                "\xEF\xBF\xBD"
                "A");
    /* bytes that can never start a character are replaced at once */
    expect_feed(&d, spm_byte(0xC0), "\xEF\xBF\xBD");
    expect_feed(&d, spm_byte(0xFF), "\xEF\xBF\xBD");
    /* E0 80: E0 needs A0..BF next, so E0 and 80 are two ill-formed subparts */
    expect_feed(&d, spm_byte(0xE0), "");
    expect_feed(&d, spm_byte(0x80), "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* a lone continuation byte */
    expect_feed(&d, spm_byte(0xA9), "\xEF\xBF\xBD");
    /* flush: a held prefix becomes one U+FFFD */
    expect_feed(&d, spm_byte(0xE2), "");
    expect_feed(&d, spm_byte(0x82), "");
    char buf[16];
    CHECK_EQ_INT(weft_detok_flush(&d, buf, sizeof buf), 3);
    CHECK(!memcmp(buf, "\xEF\xBF\xBD", 3));
    CHECK_EQ_INT(weft_detok_flush(&d, buf, sizeof buf), 0);

    /* the dummy-prefix space: stripped at the start of the text, after a skipped BOS too */
    weft_tok_vec v = {0};
    weft_err err = {0};
    CHECK_EQ_INT(weft_tokenizer_encode(t, "Hello world", 11, WEFT_TOK_ADD_SPECIAL, &v, &err), WEFT_OK);
    CHECK(v.n > 2 && v.ids[0] == 1);
    size_t len;
    char *s = feed_all(t, v.ids, v.n, 0, &len);
    CHECK(len == 11 && !memcmp(s, "Hello world", 11));
    free(s);
    s = feed_all(t, v.ids, v.n, WEFT_DETOK_KEEP_LEADING_SPACE, &len);
    CHECK(len == 12 && !memcmp(s, " Hello world", 12));
    free(s);
    s = feed_all(t, v.ids, v.n, WEFT_DETOK_RENDER_SPECIAL, &len);
    CHECK(len == 15 && !memcmp(s, "<s> Hello world", 15));
    free(s);

    /* a primed detokenizer continues a text: no strip after a prompt with text... */
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, v.ids, v.n, &err), WEFT_OK);
    int32_t there = weft_tokenizer_lookup(t, "\xE2\x96\x81there", 8);
    CHECK(there >= 0);
    expect_feed(&d, there, " there");
    /* ...but after a prompt that is only BOS the text still starts here */
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, v.ids, 1, &err), WEFT_OK);
    expect_feed(&d, there, "there");
    expect_feed(&d, there, " there");

    /* a prompt ending inside a character: the reply that completes it shows the whole character... */
    int32_t cut[3] = {spm_byte(0xF0), spm_byte(0x9F), spm_byte(0x8C)};
    char buf8[64];
    size_t got8 = 0;
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, cut, 3, &err), WEFT_OK);
    expect_feed(&d, spm_byte(0x8D), "\xF0\x9F\x8C\x8D");
    CHECK_EQ_INT((int)weft_detok_flush(&d, buf8, sizeof buf8), 0);
    /* ...one that cannot complete it drops the prompt's bytes (no U+FFFD it did not make)... */
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, cut, 3, &err), WEFT_OK);
    CHECK_EQ_INT(weft_detok_feed(&d, there, buf8, sizeof buf8, &got8, &err), WEFT_OK);
    CHECK(got8 >= 5 && !memcmp(buf8 + got8 - 5, "there", 5) && !memmem(buf8, got8, "\xEF\xBF\xBD", 3));
    /* ...as does the end of the text; the reply's own broken bytes still become U+FFFD */
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, cut, 2, &err), WEFT_OK);
    CHECK_EQ_INT((int)weft_detok_flush(&d, buf8, sizeof buf8), 0);
    weft_detok_init(&d, t, 0);
    CHECK_EQ_INT(weft_detok_prime(&d, cut, 2, &err), WEFT_OK);
    expect_feed(&d, spm_byte(0x8C), "");
    expect_feed(&d, spm_byte(0x8D), "\xF0\x9F\x8C\x8D");
    expect_feed(&d, spm_byte(0xE2), "");
    got8 = weft_detok_flush(&d, buf8, sizeof buf8);
    CHECK(got8 == 3 && !memcmp(buf8, "\xEF\xBF\xBD", 3));

    /* bad arguments */
    size_t got;
    CHECK_EQ_INT(weft_detok_feed(&d, 512, buf, sizeof buf, &got, &err), WEFT_ERANGE);
    CHECK_EQ_INT(weft_detok_feed(&d, -1, buf, sizeof buf, &got, &err), WEFT_ERANGE);
    CHECK_EQ_INT(weft_detok_feed(&d, 5, buf, 1, &got, &err), WEFT_ERANGE);
    CHECK(strstr(err.msg, "bound") != NULL);

    /* random byte-token splits of multi-byte text */
    const char *text = "Ünïcödé 🦙🚀 中文字 العربية e\xCC\x81 ok";
    size_t tl = strlen(text);
    int32_t *ids = malloc(tl * sizeof *ids);
    for (size_t i = 0; i < tl; i++) ids[i] = spm_byte((uint8_t)text[i]);
    s = feed_all(t, ids, tl, 0, &len);
    CHECK(len == tl && !memcmp(s, text, tl));
    free(s);
    free(ids);
    weft_tok_vec_free(&v);
    weft_tokenizer_free(t);
}

/* Deterministic LCG for the random splits. */
static uint32_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static void test_byte_level_splits(void) {
    weft_tokenizer *t = load_vocab(TEST_DATA "tokenizer/llamacpp/ggml-vocab-gpt-2.gguf");
    CHECK(t != NULL);
    if (!t) return;
    /* the token of each single byte (byte-level symbols) */
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = b <= 0x20                  ? 256u + (uint32_t)b
                      : (b >= 0x7F && b <= 0xA0) ? 289u + (uint32_t)(b - 0x7F)
                      : b == 0xAD                ? 323u
                                                 : (uint32_t)b;
        char u[4];
        size_t n = cp < 0x80 ? (u[0] = (char)cp, 1)
                             : (u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), 2);
        byte_id[b] = weft_tokenizer_lookup(t, u, n);
        CHECK(byte_id[b] >= 0);
    }
    const char *texts[] = {
        "Ünïcödé 🦙🚀👨‍👩‍👧 中文字 日本語 한국어 العربية e\xCC\x81 ok",
        "plain ascii text with numbers 12345",
        "\xF0\x9F\x98\x80\xF0\x9F\x98\x81\xF0\x9F\x98\x82",
        "∀x∈ℝ: x² ≥ 0 — “quotes” ‘and’ …",
    };
    uint64_t seed = 42;
    int trials = 0;
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const char *text = texts[k];
        size_t tl = strlen(text);
        for (int trial = 0; trial < 60; trial++) {
            weft_tok_vec v = {0};
            size_t pos = 0;
            while (pos < tl) {
                size_t seg = 1 + rnd(&seed) % 7;
                if (seg > tl - pos) seg = tl - pos;
                if (tu_utf8_complete(text + pos, seg) && rnd(&seed) % 2) {
                    weft_err err = {0};
                    CHECK_EQ_INT(weft_tokenizer_encode(t, text + pos, seg, 0, &v, &err), WEFT_OK);
                } else {
                    for (size_t i = 0; i < seg; i++) {
                        if (v.n == v.cap) {
                            size_t cap = v.cap ? v.cap * 2 : 64;
                            int32_t *grown = realloc(v.ids, cap * sizeof *v.ids);
                            if (!grown) break;
                            v.ids = grown;
                            v.cap = cap;
                        }
                        v.ids[v.n++] = byte_id[(uint8_t)text[pos + i]];
                    }
                }
                pos += seg;
            }
            size_t len;
            char *s = feed_all(t, v.ids, v.n, 0, &len);
            CHECK_MSG(len == tl && !memcmp(s, text, tl), "text %zu trial %d", k, trial);
            char *whole = NULL;
            size_t wl = 0;
            weft_err err = {0};
            CHECK_EQ_INT(weft_tokenizer_decode(t, v.ids, v.n, 0, &whole, &wl, &err), WEFT_OK);
            CHECK(whole && wl == len && !memcmp(whole, s, len));
            free(whole);
            free(s);
            weft_tok_vec_free(&v);
            trials++;
        }
    }
    fprintf(stderr, "byte-level: %d random splits decoded to complete characters\n", trials);
    weft_tokenizer_free(t);
}

int main(void) {
    test_spm();
    test_byte_level_splits();
    return check_report("test_tok_detok");
}
