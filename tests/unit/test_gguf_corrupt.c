/* Corrupt GGUF inputs: each mutation of a valid file (made in memory, opened with weft_gguf_open_memory) must
 * give its named error and never crash or read out of bounds (run under ASan/UBSan). The test locates header
 * fields with its own minimal walker, independent of the reader. */
#include "check.h"
#include "weft/gguf.h"

#include <stdint.h>
#include <stdlib.h>

#define MAX_ITEMS 64

typedef struct layout {
    size_t kv_key[MAX_ITEMS], kv_type[MAX_ITEMS], kv_val[MAX_ITEMS]; /* offsets of key length, type, value */
    char kv_name[MAX_ITEMS][64];
    size_t n_kv;
    size_t t_name[MAX_ITEMS], t_ndims[MAX_ITEMS], t_ne[MAX_ITEMS], t_type[MAX_ITEMS], t_off[MAX_ITEMS];
    char t_names[MAX_ITEMS][64];
    size_t n_t;
    size_t header_end; /* end of the tensor infos */
    size_t data_end;   /* data offset + end of the last tensor's bytes */
} layout;

static uint64_t rd(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}
static void wr(uint8_t *p, int n, uint64_t v) {
    for (int k = 0; k < n; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static size_t skip_value(const uint8_t *b, size_t p, uint32_t t) {
    static const int sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == 8) return p + 8 + (size_t)rd(b + p, 8);
    if (t == 9) {
        uint32_t et = (uint32_t)rd(b + p, 4);
        uint64_t n = rd(b + p + 4, 8);
        p += 12;
        for (uint64_t i = 0; i < n; i++) p = skip_value(b, p, et);
        return p;
    }
    return p + (size_t)sz[t];
}

static void walk(const uint8_t *b, layout *L) {
    memset(L, 0, sizeof *L);
    L->n_t = (size_t)rd(b + 8, 8);
    L->n_kv = (size_t)rd(b + 16, 8);
    size_t p = 24, align = 32;
    for (size_t k = 0; k < L->n_kv; k++) {
        L->kv_key[k] = p;
        size_t kl = (size_t)rd(b + p, 8);
        snprintf(L->kv_name[k], 64, "%.*s", (int)kl, (const char *)b + p + 8);
        p += 8 + kl;
        L->kv_type[k] = p;
        uint32_t t = (uint32_t)rd(b + p, 4);
        L->kv_val[k] = p + 4;
        if (strcmp(L->kv_name[k], "general.alignment") == 0) align = (size_t)rd(b + p + 4, 4);
        p = skip_value(b, p + 4, t);
    }
    uint64_t end = 0;
    for (size_t k = 0; k < L->n_t; k++) {
        L->t_name[k] = p;
        size_t nl = (size_t)rd(b + p, 8);
        snprintf(L->t_names[k], 64, "%.*s", (int)nl, (const char *)b + p + 8);
        p += 8 + nl;
        L->t_ndims[k] = p;
        uint32_t nd = (uint32_t)rd(b + p, 4);
        L->t_ne[k] = p + 4;
        p += 4 + 8 * (size_t)nd;
        L->t_type[k] = p;
        L->t_off[k] = p + 4;
        p += 12;
    }
    L->header_end = p;
    size_t data = (p + align - 1) / align * align;
    /* the last tensor's end: from the reader-independent sizes is complex; use the largest offset + its bytes
     * as the reader reports them (checked separately for every tensor in test_gguf) */
    (void)end;
    L->data_end = data;
}

static size_t find_kv(const layout *L, const char *key) {
    for (size_t k = 0; k < L->n_kv; k++)
        if (strcmp(L->kv_name[k], key) == 0) return k;
    fprintf(stderr, "test setup: key %s not found\n", key);
    abort();
}
static size_t find_t(const layout *L, const char *name) {
    for (size_t k = 0; k < L->n_t; k++)
        if (strcmp(L->t_names[k], name) == 0) return k;
    fprintf(stderr, "test setup: tensor %s not found\n", name);
    abort();
}

typedef struct base {
    uint8_t *bytes;
    size_t len;
    layout L;
} base;

static uint8_t *scratch; /* 64-aligned copy that mutations are applied to */

static uint8_t *fresh(const base *b) {
    memcpy(scratch, b->bytes, b->len);
    return scratch;
}

/* Opens scratch[0..len) and checks the status and that the message contains `needle` and "<memory>". */
static void expect(const char *what, size_t len, weft_status want, const char *needle) {
    weft_gguf *g = NULL;
    weft_err err = {0};
    weft_status st = weft_gguf_open_memory(scratch, len, &g, &err);
    CHECK_MSG(st == want, "%s: got %s (%s), want %s", what, weft_status_name(st), err.msg,
              weft_status_name(want));
    if (st != WEFT_OK) {
        CHECK_MSG(g == NULL, "%s: handle returned on error", what);
        CHECK_MSG(strstr(err.msg, "<memory>") != NULL, "%s: message does not name the source: %s", what,
                  err.msg);
        if (needle)
            CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
        CHECK_EQ_INT(err.code, st);
    }
    weft_gguf_close(g);
}

static base load(const char *path) {
    base b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    b.len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b.bytes = malloc(b.len);
    if (fread(b.bytes, 1, b.len, f) != b.len) abort();
    fclose(f);
    walk(b.bytes, &b.L);
    /* the end of the data actually used, from the reader itself on the intact file */
    memcpy(scratch, b.bytes, b.len);
    weft_gguf *g = NULL;
    weft_err err = {0};
    if (weft_gguf_open_memory(scratch, b.len, &g, &err) != WEFT_OK) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        abort();
    }
    size_t end = 0;
    for (size_t k = 0; k < weft_gguf_tensor_count(g); k++) {
        const weft_gguf_tensor_info *t = weft_gguf_tensor_at(g, k);
        size_t e = (size_t)(t->data - scratch) + t->nbytes;
        if (e > end) end = e;
    }
    b.L.data_end = end;
    weft_gguf_close(g);
    return b;
}

static void test_truncation(const base *b) {
    /* every cut inside the header, and a spread of cuts inside the data: all must fail cleanly */
    int failures_before = check_failures_;
    for (size_t cut = 0; cut < b->L.header_end + 64 && cut < b->L.data_end; cut++) {
        fresh(b);
        weft_gguf *g = NULL;
        weft_err err = {0};
        weft_status st = weft_gguf_open_memory(scratch, cut, &g, &err);
        CHECK_MSG(st == WEFT_EFORMAT && g == NULL, "cut at %zu: %s (%s)", cut, weft_status_name(st), err.msg);
        weft_gguf_close(g);
        if (check_failures_ - failures_before > 5) return;
    }
    for (size_t cut = b->L.header_end + 64; cut < b->L.data_end; cut += 97) {
        fresh(b);
        expect("cut in data", cut, WEFT_EFORMAT, "past the end");
    }
    fresh(b);
    expect("cut one byte short", b->L.data_end - 1, WEFT_EFORMAT, "past the end");
    fresh(b);
    expect("intact", b->len, WEFT_OK, NULL);
}

static void test_header(const base *b) {
    fresh(b)[0] = 'X';
    expect("bad magic", b->len, WEFT_EFORMAT, "magic");
    wr(fresh(b) + 4, 4, 0);
    expect("version 0", b->len, WEFT_EFORMAT, "version");
    wr(fresh(b) + 4, 4, 1);
    expect("version 1", b->len, WEFT_ENOTSUP, "version 1");
    wr(fresh(b) + 4, 4, 4);
    expect("version 4", b->len, WEFT_ENOTSUP, "version 4");
    wr(fresh(b) + 4, 4, 0x03000000u);
    expect("big-endian", b->len, WEFT_ENOTSUP, "big-endian");
    wr(fresh(b) + 16, 8, UINT64_MAX);
    expect("n_kv huge", b->len, WEFT_EFORMAT, "n_kv");
    wr(fresh(b) + 16, 8, (uint64_t)b->len);
    expect("n_kv = file size", b->len, WEFT_EFORMAT, "n_kv");
    wr(fresh(b) + 8, 8, UINT64_MAX / 2);
    expect("n_tensors huge", b->len, WEFT_EFORMAT, "n_tensors");
    wr(fresh(b) + 8, 8, (uint64_t)b->len / 40);
    expect("n_tensors too many", b->len, WEFT_EFORMAT, NULL);
    wr(fresh(b) + 16, 8, b->L.n_kv + 1);
    expect("n_kv one too many", b->len, WEFT_EFORMAT, NULL);
    wr(fresh(b) + 8, 8, b->L.n_t + 1);
    expect("n_tensors one too many", b->len, WEFT_EFORMAT, NULL);
}

static void test_kv(const base *b) {
    const layout *L = &b->L;
    wr(fresh(b) + L->kv_key[0], 8, UINT64_MAX);
    expect("key length huge", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->kv_key[0], 8, (uint64_t)b->len);
    expect("key length = file size", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->kv_key[0], 8, 0);
    expect("empty key", b->len, WEFT_EFORMAT, "empty");
    size_t arch = find_kv(L, "general.architecture");
    wr(fresh(b) + L->kv_val[arch], 8, (uint64_t)b->len - 10);
    expect("string value past EOF", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->kv_type[arch], 4, 13);
    expect("unknown value type", b->len, WEFT_EFORMAT, "general.architecture");
    wr(fresh(b) + L->kv_type[arch], 4, 0xFFFFFFFFu);
    expect("value type -1", b->len, WEFT_EFORMAT, "unknown");
    size_t tok = find_kv(L, "tokenizer.ggml.tokens");
    wr(fresh(b) + L->kv_val[tok] + 4, 8, 1ull << 60);
    expect("string array count huge", b->len, WEFT_EFORMAT, "tokenizer.ggml.tokens");
    wr(fresh(b) + L->kv_val[tok] + 12, 8, (uint64_t)b->len);
    expect("array string length past EOF", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->kv_val[tok], 4, 99);
    expect("unknown array element type", b->len, WEFT_EFORMAT, "tokenizer.ggml.tokens");
    wr(fresh(b) + L->kv_val[tok], 4, 9);
    expect("array of arrays", b->len, WEFT_EFORMAT, "arrays of arrays");
    size_t sc = find_kv(L, "tokenizer.ggml.scores");
    wr(fresh(b) + L->kv_val[sc] + 4, 8, (uint64_t)b->len / 4);
    expect("f32 array count past EOF", b->len, WEFT_EFORMAT, "tokenizer.ggml.scores");
    size_t bo = find_kv(L, "weft.bool");
    fresh(b)[L->kv_val[bo]] = 2;
    expect("bool 2", b->len, WEFT_EFORMAT, "weft.bool");
    size_t ab = find_kv(L, "weft.arr_bool");
    fresh(b)[L->kv_val[ab] + 12] = 7;
    expect("bool array element 7", b->len, WEFT_EFORMAT, "weft.arr_bool");
    /* duplicate key: rename weft.i8 to weft.u8 (same length) */
    size_t i8 = find_kv(L, "weft.i8");
    memcpy(fresh(b) + L->kv_key[i8] + 8, "weft.u8", 7);
    expect("duplicate key", b->len, WEFT_EFORMAT, "duplicate metadata key 'weft.u8'");
    size_t al = find_kv(L, "general.alignment");
    wr(fresh(b) + L->kv_val[al], 4, 48);
    expect("alignment 48", b->len, WEFT_EFORMAT, "alignment");
    wr(fresh(b) + L->kv_val[al], 4, 0);
    expect("alignment 0", b->len, WEFT_EFORMAT, "alignment");
    wr(fresh(b) + L->kv_type[al], 4, 6); /* f32 */
    expect("alignment as f32", b->len, WEFT_EFORMAT, "general.alignment");
}

static void test_tensors(const base *b) {
    const layout *L = &b->L;
    size_t q = find_t(L, "blk.0.attn_q.weight"), k = find_t(L, "blk.0.attn_k.weight");
    size_t o = find_t(L, "blk.0.attn_output.weight"); /* Q8_0 */
    wr(fresh(b) + L->t_name[q], 8, (uint64_t)b->len);
    expect("tensor name past EOF", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->t_ndims[q], 4, 0);
    expect("n_dims 0", b->len, WEFT_EFORMAT, "n_dims");
    wr(fresh(b) + L->t_ndims[q], 4, 5);
    expect("n_dims 5", b->len, WEFT_EFORMAT, "n_dims");
    wr(fresh(b) + L->t_ndims[q], 4, 0x7FFFFFFF);
    expect("n_dims huge", b->len, WEFT_EFORMAT, "n_dims");
    wr(fresh(b) + L->t_ne[q], 8, 0);
    expect("ne 0", b->len, WEFT_EFORMAT, "blk.0.attn_q.weight");
    wr(fresh(b) + L->t_ne[q] + 8, 8, UINT64_MAX);
    expect("ne negative", b->len, WEFT_EFORMAT, "blk.0.attn_q.weight");
    wr(fresh(b) + L->t_ne[q] + 8, 8, 1ull << 62);
    expect("ne overflow", b->len, WEFT_EFORMAT, "blk.0.attn_q.weight");
    wr(fresh(b) + L->t_ne[q] + 8, 8, 1ull << 40);
    expect("tensor larger than file", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->t_ne[o], 8, 33);
    expect("ne0 not a block multiple", b->len, WEFT_EFORMAT, "multiple of the Q8_0 block");
    wr(fresh(b) + L->t_type[q], 4, 16);
    expect("IQ2_XXS", b->len, WEFT_ENOTSUP, "blk.0.attn_q.weight' has ggml type 16 (IQ2_XXS)");
    wr(fresh(b) + L->t_type[q], 4, 9);
    expect("Q8_1", b->len, WEFT_ENOTSUP, "ggml type 9");
    wr(fresh(b) + L->t_type[q], 4, 777);
    expect("unknown ggml type", b->len, WEFT_ENOTSUP, "ggml type 777 (unknown)");
    wr(fresh(b) + L->t_off[q], 8, UINT64_MAX - 63);
    expect("offset huge", b->len, WEFT_EFORMAT, "past the end");
    wr(fresh(b) + L->t_off[q], 8, ((uint64_t)b->len + 63) / 64 * 64);
    expect("offset past EOF", b->len, WEFT_EFORMAT, "past the end");
    uint8_t *p = fresh(b);
    wr(p + L->t_off[q], 8, rd(p + L->t_off[q], 8) + 1);
    expect("misaligned offset", b->len, WEFT_EFORMAT, "not a multiple of the alignment 64");
    p = fresh(b);
    wr(p + L->t_off[q], 8, rd(p + L->t_off[q], 8) + 32);
    expect("offset aligned to 32 only", b->len, WEFT_EFORMAT, "alignment");
    p = fresh(b);
    wr(p + L->t_off[k], 8, rd(p + L->t_off[q], 8));
    expect("overlap (same offset)", b->len, WEFT_EFORMAT, "overlap");
    p = fresh(b);
    wr(p + L->t_off[k], 8, rd(p + L->t_off[q], 8) + 64);
    expect("overlap (inside)", b->len, WEFT_EFORMAT, "overlap");
    memcpy(fresh(b) + L->t_name[k] + 8, "blk.0.attn_q.weight", 19);
    expect("duplicate tensor name", b->len, WEFT_EFORMAT, "duplicate tensor name 'blk.0.attn_q.weight'");
}

/* Files that parse but describe something weft must refuse when turning them into a model. */
static void test_semantics(const base *b) {
    const layout *L = &b->L;
    weft_err err = {0};
    weft_config cfg;
#define OPEN_OR_SKIP(label)                                                                                  \
    weft_gguf *g = NULL;                                                                                     \
    if (weft_gguf_open_memory(scratch, b->len, &g, &err) != WEFT_OK) {                                       \
        CHECK_MSG(0, "%s: %s", label, err.msg);                                                              \
        return;                                                                                              \
    }
    {
        memcpy(fresh(b) + L->kv_key[find_kv(L, "qwen3.embedding_length")] + 8 + 21, "X", 1);
        OPEN_OR_SKIP("missing key");
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "'qwen3.embedding_length'") != NULL);
        weft_gguf_close(g);
    }
    {
        memcpy(fresh(b) + L->kv_val[find_kv(L, "general.architecture")] + 8, "qwen9", 5);
        OPEN_OR_SKIP("unknown arch");
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_ENOTSUP);
        CHECK(strstr(err.msg, "qwen9") != NULL);
        weft_tensor_set *set = weft_tensor_set_new();
        CHECK_EQ_INT(weft_gguf_tensors(g, set, &err), WEFT_ENOTSUP);
        weft_tensor_set_free(set);
        weft_gguf_close(g);
    }
    {
        memcpy(fresh(b) + L->t_name[find_t(L, "blk.0.ffn_up.weight")] + 8, "blk.0.ffn_uq.weight", 19);
        OPEN_OR_SKIP("unknown tensor");
        weft_tensor_set *set = weft_tensor_set_new();
        CHECK_EQ_INT(weft_gguf_tensors(g, set, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "unknown tensor 'blk.0.ffn_uq.weight'") != NULL);
        weft_tensor_set_free(set);
        weft_gguf_close(g);
    }
    {
        memcpy(fresh(b) + L->t_name[find_t(L, "blk.0.ffn_up.weight")] + 8, "blk.7", 5);
        OPEN_OR_SKIP("layer past block_count");
        weft_tensor_set *set = weft_tensor_set_new();
        CHECK_EQ_INT(weft_gguf_tensors(g, set, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "blk.7.ffn_up.weight") != NULL);
        weft_tensor_set_free(set);
        weft_gguf_close(g);
    }
    {
        wr(fresh(b) + L->kv_val[find_kv(L, "tokenizer.ggml.bos_token_id")], 4, 16);
        OPEN_OR_SKIP("bos past vocab");
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "bos_token_id") != NULL);
        weft_gguf_close(g);
    }
    {
        wr(fresh(b) + L->kv_val[find_kv(L, "qwen3.attention.head_count_kv")], 4, 3);
        OPEN_OR_SKIP("heads not a multiple of kv heads");
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_EFORMAT);
        weft_gguf_close(g);
    }
    {
        /* a mistyped required key: embedding_length stored as f32 */
        wr(fresh(b) + L->kv_type[find_kv(L, "qwen3.embedding_length")], 4, 6);
        OPEN_OR_SKIP("mistyped key");
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "qwen3.embedding_length") != NULL && strstr(err.msg, "f32") != NULL);
        weft_gguf_close(g);
    }
#undef OPEN_OR_SKIP
}

/* rope_freqs.weight of the wrong size in the llama file */
static void test_rope_freqs(const base *m) {
    const layout *L = &m->L;
    wr(fresh(m) + L->kv_val[find_kv(L, "llama.rope.dimension_count")], 4, 6);
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_EQ_INT(weft_gguf_open_memory(scratch, m->len, &g, &err), WEFT_OK);
    weft_config cfg;
    if (g) {
        CHECK_EQ_INT(weft_gguf_config(g, &cfg, &err), WEFT_EFORMAT);
        CHECK(strstr(err.msg, "rope_freqs.weight") != NULL);
        weft_gguf_close(g);
    }
}

/* Seeded random mutations of the header (a few bytes each, sometimes a whole 8-byte field): whatever the
 * status, nothing may crash or read outside the buffer, and an accepted file must keep every tensor inside.
 */
static void test_fuzz(const base *b, int iters) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int accepted = 0;
    for (int it = 0; it < iters; it++) {
        uint8_t *p = fresh(b);
        int n = 1 + (int)(s % 4);
        for (int k = 0; k < n; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t at = (size_t)(s % (b->L.header_end + 16));
            if (s >> 62 == 0 && at + 8 <= b->len)
                wr(p + at, 8, s * 0x2545F4914F6CDD1Dull);
            else
                p[at] = (uint8_t)(s >> 32);
        }
        weft_gguf *g = NULL;
        weft_err err = {0};
        weft_status st = weft_gguf_open_memory(p, b->len, &g, &err);
        if (st != WEFT_OK) {
            CHECK_MSG(g == NULL && err.msg[0] != '\0' && err.code == st, "fuzz %d: bad error record", it);
            continue;
        }
        accepted++;
        for (size_t k = 0; k < weft_gguf_tensor_count(g); k++) {
            const weft_gguf_tensor_info *t = weft_gguf_tensor_at(g, k);
            CHECK_MSG(t->data >= p && t->nbytes <= b->len && t->data + t->nbytes <= p + b->len,
                      "fuzz %d: tensor %s outside the buffer", it, t->name);
        }
        weft_config cfg;
        (void)weft_gguf_config(g, &cfg, &err);
        weft_tensor_set *set = weft_tensor_set_new();
        (void)weft_gguf_tensors(g, set, &err);
        weft_tensor_set_free(set);
        weft_gguf_close(g);
    }
    fprintf(stderr, "  fuzz: %d of %d mutated files accepted, none crashed\n", accepted, iters);
}

int main(void) {
    scratch = aligned_alloc(64, 1 << 20);
    base v2 = load(TEST_DATA "gguf/v2_qwen3.gguf");
    base mixed = load(TEST_DATA "gguf/mixed.gguf");
    test_truncation(&v2);
    test_truncation(&mixed);
    test_header(&v2);
    test_kv(&v2);
    test_tensors(&v2);
    test_semantics(&v2);
    test_rope_freqs(&mixed);
    test_fuzz(&v2, 4000);
    test_fuzz(&mixed, 2000);
    free(v2.bytes);
    free(mixed.bytes);
    free(scratch);
    return check_report("test_gguf_corrupt");
}
