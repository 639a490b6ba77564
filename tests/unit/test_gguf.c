/* GGUF reader on real and generated files: stories260K (F32/F16/Q8_0/Q4_0), the llama-gguf fixtures, a GGUF
 * v2 qwen3 file with every metadata value type, and a llama file mixing every tensor type whose decoded
 * tensors must hash like gguf's dequantization (tools/gen_gguf_vectors.py writes the generated ones). */
#include "check.h"
#include "weft/gguf.h"

#include <stdint.h>
#include <stdlib.h>

static uint8_t *slurp_aligned(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = aligned_alloc(64, ((size_t)n + 63) / 64 * 64);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static uint64_t fnv64(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Decodes every row of t and hashes the fp32 bytes (FNV-1a 64, as the generator does). */
static uint64_t tensor_hash(const weft_tensor *t) {
    int64_t cols = weft_tensor_cols(t), rows = weft_tensor_rows(t);
    float *row = malloc((size_t)cols * 4);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t r = 0; r < rows; r++) {
        weft_err err = {0};
        if (weft_tensor_dequant_row(t, r, row, &err) != WEFT_OK) {
            fprintf(stderr, "dequant %s: %s\n", t->name, err.msg);
            h = 0;
            break;
        }
        h = fnv64(row, (size_t)cols * 4, h);
    }
    free(row);
    return h;
}

/* Every line "name hash" of an .fnv file must match the set; returns the number of lines checked. */
static int check_hashes(const weft_tensor_set *set, const char *fnv_path) {
    FILE *f = fopen(fnv_path, "r");
    CHECK_MSG(f != NULL, "cannot read %s", fnv_path);
    if (!f) return 0;
    char name[256];
    unsigned long long want;
    int n = 0;
    while (fscanf(f, "%255s %llx", name, &want) == 2) {
        const weft_tensor *t = weft_tensor_set_get(set, name);
        CHECK_MSG(t != NULL, "%s: tensor %s missing", fnv_path, name);
        if (t) CHECK_MSG(tensor_hash(t) == want, "%s: %s decodes differently from gguf", fnv_path, name);
        n++;
    }
    fclose(f);
    return n;
}

static void check_shape(const weft_tensor_set *set, const char *name, weft_dtype dt, int ndim, int64_t d0,
                        int64_t d1) {
    const weft_tensor *t = weft_tensor_set_get(set, name);
    CHECK_MSG(t != NULL, "missing %s", name);
    if (!t) return;
    CHECK_MSG(t->dtype == dt, "%s dtype %d, want %d", name, (int)t->dtype, (int)dt);
    CHECK_EQ_INT(t->ndim, ndim);
    CHECK_EQ_INT(t->shape[0], d0);
    if (ndim > 1) CHECK_EQ_INT(t->shape[1], d1);
    CHECK_EQ_INT(t->nbytes, weft_dtype_row_bytes(dt, t->shape[ndim - 1]) * (size_t)weft_tensor_rows(t));
}

/* stories260K in four storages: dim 64, 5 layers, 8 heads, 4 kv heads, vocab 512, eps 1e-5, tied head. */
static void test_stories(const char *file, weft_dtype mat_dt) {
    char path[256];
    snprintf(path, sizeof path, TEST_DATA "stories260K/%s", file);
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_gguf_open_file(path, &g, &err) == WEFT_OK, "%s: %s", path, err.msg);
    if (!g) return;
    CHECK_EQ_INT(weft_gguf_version(g), 3);
    CHECK_STR(weft_gguf_arch(g), "llama");
    weft_config cfg;
    CHECK_MSG(weft_gguf_config(g, &cfg, &err) == WEFT_OK, "%s", err.msg);
    CHECK(cfg.family == WEFT_FAMILY_LLAMA);
    CHECK_STR(cfg.model_type, "llama");
    CHECK_EQ_INT(cfg.hidden_size, 64);
    CHECK_EQ_INT(cfg.n_layers, 5);
    CHECK_EQ_INT(cfg.n_heads, 8);
    CHECK_EQ_INT(cfg.n_kv_heads, 4);
    CHECK_EQ_INT(cfg.head_dim, 8);
    CHECK_EQ_INT(cfg.intermediate_size, 172);
    CHECK_EQ_INT(cfg.vocab_size, 512);
    CHECK_EQ_INT(cfg.max_position_embeddings, 512);
    CHECK(cfg.rms_norm_eps == (double)1e-5f);
    CHECK(cfg.rope.theta == 10000.0);
    CHECK(cfg.rope.type == WEFT_ROPE_DEFAULT);
    CHECK(cfg.rope.partial_rotary_factor == 1.0);
    CHECK(cfg.rope.adjacent_pairs);
    CHECK(cfg.rope.freq_divisors == NULL);
    CHECK(cfg.tie_word_embeddings);
    CHECK(!cfg.attention_bias && !cfg.mlp_bias);
    CHECK_EQ_INT(cfg.bos_token_id, 1);
    CHECK_EQ_INT(cfg.n_eos, 1);
    CHECK_EQ_INT(cfg.eos_token_ids[0], 2);
    CHECK_EQ_INT(cfg.pad_token_id, -1);
    CHECK(!cfg.has_temperature && !cfg.has_top_k);

    weft_tensor_set *set = weft_tensor_set_new();
    CHECK_MSG(weft_gguf_tensors(g, set, &err) == WEFT_OK, "%s", err.msg);
    /* the set owns the mapping now: the handle can go before the tensors are used */
    weft_gguf_close(g);
    CHECK_EQ_INT(weft_tensor_set_count(set), 2 + 5 * 9);
    check_shape(set, "model.embed_tokens.weight", mat_dt, 2, 512, 64);
    check_shape(set, "model.norm.weight", WEFT_DT_F32, 1, 64, 0);
    CHECK(weft_tensor_set_get(set, "lm_head.weight") == NULL);
    for (int l = 0; l < 5; l++) {
        char n[128];
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 64, 64);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 32, 64);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.v_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 32, 64);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 64, 64);
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 172, 64);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", l);
        check_shape(set, n, mat_dt, 2, 172, 64);
        /* ne0 = 172 is not a multiple of 32: the quantized files keep ffn_down in F16 */
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", l);
        check_shape(set, n, mat_dt == WEFT_DT_F32 ? WEFT_DT_F32 : WEFT_DT_F16, 2, 64, 172);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        check_shape(set, n, WEFT_DT_F32, 1, 64, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        check_shape(set, n, WEFT_DT_F32, 1, 64, 0);
    }
    /* every tensor decodes (the mapping is still there) and is finite */
    for (size_t k = 0; k < weft_tensor_set_count(set); k++) {
        const weft_tensor *t = weft_tensor_set_at(set, k);
        float row[512];
        int finite = 1;
        for (int64_t r = 0; r < weft_tensor_rows(t); r++) {
            CHECK_EQ_INT(weft_tensor_dequant_row(t, r, row, &err), WEFT_OK);
            for (int64_t c = 0; c < weft_tensor_cols(t); c++) finite &= isfinite(row[c]) != 0;
        }
        CHECK_MSG(finite, "%s: %s has non-finite values", file, t->name);
    }
    weft_tensor_set_free(set);
}

/* the llama-gguf fixtures: untied head, GQA 2:1, head_dim 16 */
static void test_fixture(const char *dir, weft_dtype mat_dt) {
    char path[256];
    snprintf(path, sizeof path, TEST_DATA "fixtures/%s/model.gguf", dir);
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_gguf_open_file(path, &g, &err) == WEFT_OK, "%s: %s", path, err.msg);
    if (!g) return;
    weft_config cfg;
    CHECK_MSG(weft_gguf_config(g, &cfg, &err) == WEFT_OK, "%s", err.msg);
    CHECK_EQ_INT(cfg.hidden_size, 64);
    CHECK_EQ_INT(cfg.n_layers, 2);
    CHECK_EQ_INT(cfg.n_heads, 4);
    CHECK_EQ_INT(cfg.n_kv_heads, 2);
    CHECK_EQ_INT(cfg.head_dim, 16);
    CHECK_EQ_INT(cfg.intermediate_size, 128);
    CHECK_EQ_INT(cfg.vocab_size, 512);
    CHECK_EQ_INT(cfg.max_position_embeddings, 2048);
    CHECK(!cfg.tie_word_embeddings);
    CHECK(cfg.rope.adjacent_pairs);
    CHECK_EQ_INT(weft_gguf_alignment(g), 32);
    const weft_gguf_tensor_info *q = weft_gguf_tensor_find(g, "blk.1.attn_q.weight");
    CHECK(q && q->ne[0] == 64 && q->ne[1] == 64 && q->n_dims == 2);
    const uint8_t *q_bytes = q ? q->data : NULL;
    weft_tensor_set *set = weft_tensor_set_new();
    CHECK_MSG(weft_gguf_tensors(g, set, &err) == WEFT_OK, "%s", err.msg);
    /* a file-backed handle hands its mapping over once */
    weft_tensor_set *again = weft_tensor_set_new();
    CHECK_EQ_INT(weft_gguf_tensors(g, again, &err), WEFT_EINVAL);
    weft_tensor_set_free(again);
    weft_gguf_close(g);
    CHECK_EQ_INT(weft_tensor_set_count(set), 21);
    check_shape(set, "lm_head.weight", mat_dt, 2, 512, 64);
    check_shape(set, "model.embed_tokens.weight", mat_dt, 2, 512, 64);
    check_shape(set, "model.layers.1.self_attn.q_proj.weight", mat_dt, 2, 64, 64);
    check_shape(set, "model.layers.1.self_attn.k_proj.weight", mat_dt, 2, 32, 64);
    check_shape(set, "model.layers.1.mlp.down_proj.weight", mat_dt, 2, 64, 128);
    check_shape(set, "model.layers.0.post_attention_layernorm.weight", WEFT_DT_F32, 1, 64, 0);
    /* Q rows are kept exactly as stored (adjacent-pair order; the model rotates pairs) */
    const weft_tensor *tq = weft_tensor_set_get(set, "model.layers.1.self_attn.q_proj.weight");
    CHECK(tq && tq->data == q_bytes);
    weft_tensor_set_free(set);
}

static void test_v2_qwen3(void) {
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_gguf_open_file(TEST_DATA "gguf/v2_qwen3.gguf", &g, &err) == WEFT_OK, "%s", err.msg);
    if (!g) return;
    CHECK_EQ_INT(weft_gguf_version(g), 2);
    CHECK_EQ_INT(weft_gguf_alignment(g), 64);
    CHECK_EQ_INT(weft_gguf_data_offset(g) % 64, 0);
    CHECK_STR(weft_gguf_source(g), TEST_DATA "gguf/v2_qwen3.gguf");

    /* getters, one key of every type */
    int64_t i = 0;
    double d = 0;
    bool b = false;
    const char *s = NULL;
    size_t slen = 0;
    CHECK(weft_gguf_get_int(g, "weft.u8", &i, &err) == WEFT_OK && i == 200);
    CHECK(weft_gguf_get_int(g, "weft.i8", &i, &err) == WEFT_OK && i == -100);
    CHECK(weft_gguf_get_int(g, "weft.u16", &i, &err) == WEFT_OK && i == 60000);
    CHECK(weft_gguf_get_int(g, "weft.i16", &i, &err) == WEFT_OK && i == -30000);
    CHECK(weft_gguf_get_int(g, "weft.u32", &i, &err) == WEFT_OK && i == 4000000000LL);
    CHECK(weft_gguf_get_int(g, "weft.i32", &i, &err) == WEFT_OK && i == -2000000000LL);
    CHECK(weft_gguf_get_int(g, "weft.i64", &i, &err) == WEFT_OK && i == -(1LL << 62));
    CHECK_EQ_INT(weft_gguf_get_int(g, "weft.u64", &i, &err), WEFT_ERANGE);
    CHECK(weft_gguf_get_float(g, "weft.u64", &d, &err) == WEFT_OK && d == 9223372036854775813.0);
    CHECK(weft_gguf_get_float(g, "weft.f32", &d, &err) == WEFT_OK && d == (double)0.1f);
    CHECK(weft_gguf_get_float(g, "weft.f64", &d, &err) == WEFT_OK && d == 0.1);
    CHECK(weft_gguf_get_float(g, "weft.i16", &d, &err) == WEFT_OK && d == -30000.0);
    CHECK(weft_gguf_get_bool(g, "weft.bool", &b, &err) == WEFT_OK && b);
    CHECK(weft_gguf_get_int(g, "weft.bool", &i, &err) == WEFT_OK && i == 1);
    CHECK(weft_gguf_get_str(g, "weft.str", &s, &slen, &err) == WEFT_OK && strcmp(s, "h\xc3\xa9llo") == 0 &&
          slen == 6);
    CHECK_EQ_INT(weft_gguf_get_str(g, "weft.u8", &s, NULL, &err), WEFT_EFORMAT);
    CHECK(strstr(err.msg, "weft.u8") && strstr(err.msg, "v2_qwen3.gguf"));
    CHECK_EQ_INT(weft_gguf_get_bool(g, "weft.u8", &b, &err), WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_get_float(g, "weft.str", &d, &err), WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_get_int(g, "weft.f32", &i, &err), WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_get_int(g, "no.such.key", &i, &err), WEFT_EFORMAT);
    CHECK(strstr(err.msg, "no.such.key") != NULL);
    CHECK_EQ_INT(weft_gguf_find(g, "no.such.key"), -1);
    int64_t ki = weft_gguf_find(g, "weft.f64");
    CHECK(ki >= 0 && strcmp(weft_gguf_kv_key(g, (size_t)ki), "weft.f64") == 0 &&
          weft_gguf_kv_type(g, (size_t)ki) == WEFT_GGUF_F64);
    CHECK_STR(weft_gguf_type_name(WEFT_GGUF_F64), "f64");

    weft_gguf_arr a;
    CHECK(weft_gguf_get_arr(g, "weft.arr_i16", &a, &err) == WEFT_OK && a.type == WEFT_GGUF_I16 &&
          a.count == 3);
    CHECK(weft_gguf_arr_int(&a, 0) == -1 && weft_gguf_arr_int(&a, 1) == 2 && weft_gguf_arr_int(&a, 2) == -3);
    CHECK(weft_gguf_arr_float(&a, 2) == -3.0);
    CHECK(weft_gguf_arr_int(&a, 3) == 0 && weft_gguf_arr_str(&a, 0, NULL) == NULL);
    CHECK(weft_gguf_get_arr(g, "weft.arr_f64", &a, &err) == WEFT_OK && a.count == 2);
    CHECK(weft_gguf_arr_float(&a, 0) == 0.5 && weft_gguf_arr_float(&a, 1) == -2.25);
    CHECK(weft_gguf_get_arr(g, "weft.arr_bool", &a, &err) == WEFT_OK && a.type == WEFT_GGUF_BOOL);
    CHECK(weft_gguf_arr_int(&a, 0) == 1 && weft_gguf_arr_int(&a, 1) == 0);
    CHECK(weft_gguf_get_arr(g, "weft.arr_u64", &a, &err) == WEFT_OK);
    CHECK(weft_gguf_arr_int(&a, 0) == 7 && weft_gguf_arr_int(&a, 1) == INT64_MAX);
    CHECK(weft_gguf_get_arr(g, "tokenizer.ggml.tokens", &a, &err) == WEFT_OK && a.type == WEFT_GGUF_STRING);
    uint64_t tl = 0;
    CHECK(a.count == 16 && strcmp(weft_gguf_arr_str(&a, 11, &tl), "t11") == 0 && tl == 3);
    CHECK(weft_gguf_get_arr(g, "tokenizer.ggml.scores", &a, &err) == WEFT_OK &&
          weft_gguf_arr_float(&a, 3) == -3.0);
    CHECK_EQ_INT(weft_gguf_get_arr(g, "weft.u8", &a, &err), WEFT_EFORMAT);

    weft_config cfg;
    CHECK_MSG(weft_gguf_config(g, &cfg, &err) == WEFT_OK, "%s", err.msg);
    CHECK(cfg.family == WEFT_FAMILY_QWEN3);
    CHECK_EQ_INT(cfg.hidden_size, 32);
    CHECK_EQ_INT(cfg.n_heads, 4);
    CHECK_EQ_INT(cfg.n_kv_heads, 1);
    CHECK_EQ_INT(cfg.head_dim, 16); /* key_length, not hidden/heads = 8 */
    CHECK_EQ_INT(cfg.intermediate_size, 64);
    CHECK_EQ_INT(cfg.vocab_size, 16); /* no qwen3.vocab_size: the token list length */
    CHECK(cfg.rms_norm_eps == (double)1e-6f);
    CHECK(cfg.rope.theta == 1e6);
    CHECK(!cfg.rope.adjacent_pairs);
    CHECK(cfg.tie_word_embeddings);
    CHECK_EQ_INT(cfg.bos_token_id, 5);
    CHECK_EQ_INT(cfg.pad_token_id, 0);
    CHECK_EQ_INT(cfg.n_eos, 1); /* eos 3 and eot 3: one id */
    CHECK_EQ_INT(cfg.eos_token_ids[0], 3);
    CHECK(cfg.has_temperature && cfg.temperature == (double)0.6f);
    CHECK(cfg.has_top_k && cfg.top_k == 20);
    CHECK(!cfg.has_top_p && !cfg.has_min_p);

    weft_tensor_set *set = weft_tensor_set_new();
    CHECK_MSG(weft_gguf_tensors(g, set, &err) == WEFT_OK, "%s", err.msg);
    check_shape(set, "model.layers.0.self_attn.q_norm.weight", WEFT_DT_F32, 1, 16, 0);
    check_shape(set, "model.layers.0.self_attn.k_proj.weight", WEFT_DT_BF16, 2, 16, 32);
    check_shape(set, "model.layers.0.self_attn.o_proj.weight", WEFT_DT_Q8_0, 2, 32, 64);
    CHECK_EQ_INT(check_hashes(set, TEST_DATA "gguf/v2_qwen3.fnv"), 13);
    /* metadata outlives the mapping handed to the set */
    weft_tensor_set_free(set);
    CHECK(weft_gguf_get_str(g, "weft.str", &s, NULL, &err) == WEFT_OK && s[0] == 'h');
    weft_gguf_close(g);
}

static void test_mixed(void) {
    size_t len = 0;
    uint8_t *buf = slurp_aligned(TEST_DATA "gguf/mixed.gguf", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_gguf_open_memory(buf, len, &g, &err) == WEFT_OK, "%s", err.msg);
    if (g) {
        CHECK_STR(weft_gguf_source(g), "<memory>");
        weft_config cfg;
        CHECK_MSG(weft_gguf_config(g, &cfg, &err) == WEFT_OK, "%s", err.msg);
        CHECK_EQ_INT(cfg.hidden_size, 256);
        CHECK_EQ_INT(cfg.head_dim, 8);
        CHECK(cfg.rope.theta == 500000.0);
        CHECK(!cfg.tie_word_embeddings);
        const weft_gguf_tensor_info *rf = weft_gguf_tensor_find(g, "rope_freqs.weight");
        CHECK(rf && cfg.rope.freq_divisors == (const float *)(const void *)rf->data);
        weft_tensor_set *set = weft_tensor_set_new();
        CHECK_MSG(weft_gguf_tensors(g, set, &err) == WEFT_OK, "%s", err.msg);
        static const struct {
            const char *name;
            weft_dtype dt;
        } types[] = {
            {"model.embed_tokens.weight", WEFT_DT_Q4_K},
            {"lm_head.weight", WEFT_DT_Q6_K},
            {"model.layers.0.self_attn.q_proj.weight", WEFT_DT_Q4_K},
            {"model.layers.0.self_attn.k_proj.weight", WEFT_DT_Q5_K},
            {"model.layers.0.self_attn.v_proj.weight", WEFT_DT_Q6_K},
            {"model.layers.0.self_attn.o_proj.weight", WEFT_DT_Q4_0},
            {"model.layers.0.post_attention_layernorm.weight", WEFT_DT_F16},
            {"model.layers.0.mlp.gate_proj.weight", WEFT_DT_Q2_K},
            {"model.layers.0.mlp.up_proj.weight", WEFT_DT_Q3_K},
            {"model.layers.0.mlp.down_proj.weight", WEFT_DT_Q4_1},
            {"model.layers.1.input_layernorm.weight", WEFT_DT_BF16},
            {"model.layers.1.self_attn.q_proj.weight", WEFT_DT_Q8_0},
            {"model.layers.1.self_attn.k_proj.weight", WEFT_DT_Q5_0},
            {"model.layers.1.self_attn.v_proj.weight", WEFT_DT_Q5_1},
            {"rope_freqs.weight", WEFT_DT_F32},
        };
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
            const weft_tensor *t = weft_tensor_set_get(set, types[k].name);
            CHECK_MSG(t && t->dtype == types[k].dt, "%s", types[k].name);
        }
        CHECK_EQ_INT(check_hashes(set, TEST_DATA "gguf/mixed.fnv"), 22);
        weft_tensor_set_free(set);
        /* a memory handle never hands anything over: a second set is fine */
        set = weft_tensor_set_new();
        CHECK_EQ_INT(weft_gguf_tensors(g, set, &err), WEFT_OK);
        weft_tensor_set_free(set);
        weft_gguf_close(g);
    }
    /* the buffer must be 8-byte aligned */
    uint8_t *odd = malloc(len + 8);
    memcpy(odd + 4, buf, len);
    CHECK_EQ_INT(weft_gguf_open_memory(odd + 4, len, &g, &err), WEFT_EINVAL);
    CHECK(g == NULL);
    free(odd);
    free(buf);
}

static void test_names(void) {
    char out[128];
    weft_err err = {0};
    CHECK(weft_gguf_canonical_name("llama", "blk.12.attn_output.weight", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "model.layers.12.self_attn.o_proj.weight") == 0);
    CHECK(weft_gguf_canonical_name("llama", "blk.0.ffn_norm.weight", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "model.layers.0.post_attention_layernorm.weight") == 0);
    CHECK(weft_gguf_canonical_name("llama", "blk.3.attn_v.bias", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "model.layers.3.self_attn.v_proj.bias") == 0);
    CHECK(weft_gguf_canonical_name("llama", "rope_freqs.weight", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "rope_freqs.weight") == 0);
    CHECK(weft_gguf_canonical_name("qwen3", "blk.2.attn_k_norm.weight", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "model.layers.2.self_attn.k_norm.weight") == 0);
    CHECK(weft_gguf_canonical_name("qwen3", "output.weight", out, sizeof out, &err) == WEFT_OK &&
          strcmp(out, "lm_head.weight") == 0);
    /* unknown names are errors, never skipped */
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk.0.attn_q_norm.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK(strstr(err.msg, "blk.0.attn_q_norm.weight") != NULL);
    CHECK_EQ_INT(weft_gguf_canonical_name("qwen3", "blk.0.attn_q.bias", out, sizeof out, &err), WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk.01.attn_q.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk..attn_q.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk.0.attn_q.scale", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "token_embd", out, sizeof out, &err), WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk.0.ffn_gate_exps.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("qwen3next", "token_embd.weight", out, sizeof out, &err),
                 WEFT_ENOTSUP);
    CHECK_EQ_INT(weft_gguf_canonical_name("llama", "blk.0.attn_q.weight", out, 8, &err), WEFT_EINVAL);
    weft_dtype dt;
    CHECK(weft_gguf_dtype_from_ggml(12, &dt) && dt == WEFT_DT_Q4_K);
    CHECK(weft_gguf_dtype_from_ggml(30, &dt) && dt == WEFT_DT_BF16);
    CHECK(!weft_gguf_dtype_from_ggml(16, &dt) && !weft_gguf_dtype_from_ggml(9999, &dt));
    CHECK_STR(weft_gguf_ggml_type_name(16), "IQ2_XXS");
    CHECK_STR(weft_gguf_ggml_type_name(9999), "unknown");
}

/* stories260K opened from memory (how the binary loads its embedded copy) */
static void test_memory_stories(void) {
    size_t len = 0;
    uint8_t *buf = slurp_aligned(TEST_DATA "stories260K/stories260K.gguf", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    weft_gguf *g = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_gguf_open_memory(buf, len, &g, &err) == WEFT_OK, "%s", err.msg);
    if (g) {
        weft_tensor_set *set = weft_tensor_set_new();
        CHECK_EQ_INT(weft_gguf_tensors(g, set, &err), WEFT_OK);
        weft_gguf_close(g);
        const weft_tensor *e = weft_tensor_set_get(set, "model.embed_tokens.weight");
        CHECK(e && e->data >= buf && e->data + e->nbytes <= buf + len);
        weft_tensor_set_free(set);
    }
    free(buf);
}

static void test_open_errors(void) {
    weft_gguf *g = (weft_gguf *)1;
    weft_err err = {0};
    CHECK_EQ_INT(weft_gguf_open_file(TEST_DATA "gguf/no-such-file.gguf", &g, &err), WEFT_EIO);
    CHECK(g == NULL && strstr(err.msg, "no-such-file.gguf") != NULL);
    CHECK_EQ_INT(weft_gguf_open_file(TEST_DATA "gguf/mixed.fnv", &g, &err), WEFT_EFORMAT);
    CHECK(strstr(err.msg, "magic") != NULL);
    CHECK_EQ_INT(weft_gguf_open_file(TEST_DATA "gguf", &g, &err), WEFT_EIO);
}

int main(void) {
    test_stories("stories260K.gguf", WEFT_DT_F32);
    test_stories("stories260K-f16.gguf", WEFT_DT_F16);
    test_stories("stories260K-q8_0.gguf", WEFT_DT_Q8_0);
    test_stories("stories260K-q4_0.gguf", WEFT_DT_Q4_0);
    test_fixture("llama-gguf-f16", WEFT_DT_F16);
    test_fixture("llama-gguf-q8_0", WEFT_DT_Q8_0);
    test_fixture("llama-gguf-q4_0", WEFT_DT_Q4_0);
    test_v2_qwen3();
    test_mixed();
    test_names();
    test_memory_stories();
    test_open_errors();
    return check_report("test_gguf");
}
