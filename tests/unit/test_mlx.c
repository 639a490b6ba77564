/* MLX affine: decoding against numpy vectors (tools/gen_mlx_vectors.py: bits 2,3,4,5,6,8 × gs 32,64,128,
 * F32/F16/BF16 scales, negative scales, constant and zero groups, stacked experts), folding rules and errors,
 * the -mlx fixtures (folding, router overrides, canonical names), and a sanity bound against the HF weights.
 */
#include "test_safetensors_util.h"

#include <math.h>

#define VEC TEST_DATA "mlx/vectors.safetensors"

/* The file's bytes, NUL-terminated (NULL when it cannot be read). */
static char *slurp(const char *path) {
    char *b = NULL;
    weft_err err = {0};
    return weft_read_file(path, &b, NULL, &err) ? NULL : b;
}

static weft_tensor_set *load_vectors(void) {
    weft_tensor_set *set = weft_tensor_set_new();
    weft_err err = {0};
    bool mlx = false;
    weft_status st = weft_safetensors_load_file(VEC, set, &mlx, &err);
    CHECK_MSG(st == WEFT_OK, "%s", err.msg);
    CHECK(mlx);
    return set;
}

static void check_vectors(void) {
    weft_tensor_set *set = load_vectors();
    char *cfg = slurp(TEST_DATA "mlx/config.json");
    CHECK(cfg != NULL);
    weft_err err = {0};
    weft_mlx_summary sum;
    weft_status st = weft_mlx_fold(set, cfg, &sum, &err);
    CHECK_MSG(st == WEFT_OK, "%s", err.msg);
    CHECK(sum.present && sum.bits == 4 && sum.group_size == 64);
    CHECK_EQ_INT(sum.n_folded, 18);
    CHECK_EQ_INT(sum.n_overrides, 17);
    const weft_tensor *plain = weft_tensor_set_get(set, "plain.weight");
    CHECK(plain && plain->dtype == WEFT_DT_F32); /* `false` in the config */

    static const int BITS[] = {2, 3, 4, 5, 6, 8}, GS[] = {32, 64, 128};
    int negative_scales = 0, positive_scales = 0;
    for (int bi = 0; bi < 6; bi++) {
        for (int gi = 0; gi < 3; gi++) {
            char p[64], n[96];
            if (BITS[bi] == 5 && GS[gi] == 32)
                snprintf(p, sizeof p, "experts.switch_mlp.fc1");
            else
                snprintf(p, sizeof p, "b%d_g%d", BITS[bi], GS[gi]);
            snprintf(n, sizeof n, "%s.weight", p);
            const weft_tensor *t = weft_tensor_set_get(set, n);
            snprintf(n, sizeof n, "%s.q", p);
            const weft_tensor *q = weft_tensor_set_get(set, n);
            snprintf(n, sizeof n, "%s.expected", p);
            const weft_tensor *e = weft_tensor_set_get(set, n);
            if (!t || !q || !e) {
                CHECK_MSG(0, "%s: tensors missing", p);
                continue;
            }
            snprintf(n, sizeof n, "%s.scales", p);
            CHECK(!weft_tensor_set_get(set, n));
            snprintf(n, sizeof n, "%s.biases", p);
            CHECK(!weft_tensor_set_get(set, n));
            CHECK_EQ_INT(t->dtype, WEFT_DT_MLX_AFFINE);
            CHECK_EQ_INT(t->bits, BITS[bi]);
            CHECK_EQ_INT(t->group_size, GS[gi]);
            CHECK_EQ_INT(t->ndim, e->ndim);
            CHECK(memcmp(t->shape, e->shape, sizeof t->shape) == 0);
            CHECK_EQ_INT(weft_mlx_row_bytes(t), 256 * BITS[bi] / 8);
            CHECK_EQ_INT(t->nbytes, (size_t)weft_tensor_rows(t) * weft_mlx_row_bytes(t));
            CHECK_EQ_INT(weft_mlx_tensor_bytes(t),
                         (size_t)weft_tensor_rows(t) *
                             (weft_mlx_row_bytes(t) + 2 * weft_mlx_scale_row_bytes(t)));
            int64_t rows = weft_tensor_rows(t), cols = weft_tensor_cols(t);
            float out[256], out2[256];
            int qbad = 0, dbad = 0;
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t c = 0; c < cols; c++)
                    if (weft_mlx_q(t, r, c) != q->data[r * cols + c]) qbad++;
                weft_mlx_dequant_row(t, r, out);
                if (memcmp(out, e->data + r * cols * 4, (size_t)cols * 4) != 0) dbad++;
                CHECK(weft_tensor_dequant_row(t, r, out2, &err) == WEFT_OK);
                CHECK(memcmp(out, out2, sizeof out) == 0);
                for (int64_t g = 0; g < cols / t->group_size; g++) {
                    float s;
                    size_t off = (size_t)(r * (cols / t->group_size) + g);
                    if (t->scale_dtype == WEFT_DT_F32)
                        memcpy(&s, t->scales + 4 * off, 4);
                    else {
                        uint16_t h;
                        memcpy(&h, t->scales + 2 * off, 2);
                        s = t->scale_dtype == WEFT_DT_F16 ? weft_f16_to_f32(h) : weft_bf16_to_f32(h);
                    }
                    negative_scales += s < 0;
                    positive_scales += s > 0;
                }
            }
            CHECK_MSG(qbad == 0, "%s: %d q values differ", p, qbad);
            CHECK_MSG(dbad == 0, "%s: %d rows differ from the numpy reference", p, dbad);
        }
    }
    CHECK(negative_scales > 20 && positive_scales > 20);
    /* the three scale dtypes all occur */
    CHECK_EQ_INT(weft_tensor_set_get(set, "b2_g32.weight")->scale_dtype, WEFT_DT_BF16);
    CHECK_EQ_INT(weft_tensor_set_get(set, "b2_g64.weight")->scale_dtype, WEFT_DT_F16);
    CHECK_EQ_INT(weft_tensor_set_get(set, "b2_g128.weight")->scale_dtype, WEFT_DT_F32);
    const weft_tensor *x = weft_tensor_set_get(set, "experts.switch_mlp.fc1.weight");
    CHECK(x && x->ndim == 3 && x->shape[0] == 2 && x->shape[1] == 3 && x->shape[2] == 256);
    free(cfg);
    weft_tensor_set_free(set);
}

/* Each config must fail with the status and a message naming needle. */
static void fold_fails(const char *what, const char *cfg, weft_status want, const char *needle) {
    weft_tensor_set *set = load_vectors();
    weft_err err = {0};
    weft_status st = weft_mlx_fold(set, cfg, NULL, &err);
    if (getenv("WEFT_TEST_VERBOSE")) fprintf(stderr, "%-24s -> %s\n", what, err.msg);
    CHECK_MSG(st == want, "%s: status %d (%s), want %d", what, st, err.msg, want);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: \"%s\" lacks \"%s\"", what, err.msg, needle);
    weft_tensor_set_free(set);
}

/* The generated config with quantization[module] = value (stolen) must fail naming needle. */
static void fold_edit_fails(const char *what, const char *module, json_t *value, weft_status want,
                            const char *needle) {
    json_t *cfg = json_load_file(TEST_DATA "mlx/config.json", 0, NULL);
    json_object_set_new(json_object_get(cfg, "quantization"), module, value);
    char *text = json_dumps(cfg, 0);
    fold_fails(what, text, want, needle);
    free(text);
    json_decref(cfg);
}

static void check_fold_errors(void) {
    /* the generated config with one module's entry changed: only that module is refused */
    fold_edit_fails("override mismatch", "b3_g32", json_pack("{s:i,s:i}", "bits", 5, "group_size", 32),
                    WEFT_EFORMAT, "b3_g32: config.json says bits=5 group_size=32, but 24 words");
    fold_edit_fails("dict defaults", "b4_g64", json_pack("{s:i}", "bits", 8), WEFT_EFORMAT,
                    "b4_g64: config.json says bits=8 group_size=64");
    /* dict entries use mlx's own defaults (gs 64, bits 4), not the global ones: with global gs 128 / bits 2
     * every module still folds right (b2_g64 is {"bits":2}, b4_g32 {"group_size":32}) */
    {
        json_t *cfg = json_load_file(TEST_DATA "mlx/config.json", 0, NULL);
        json_t *q = json_object_get(cfg, "quantization");
        json_object_set_new(q, "group_size", json_integer(128));
        json_object_set_new(q, "bits", json_integer(2));
        json_object_set_new(q, "b4_g64", json_pack("{s:i}", "bits", 4));
        char *text = json_dumps(cfg, 0);
        weft_tensor_set *set = load_vectors();
        weft_err err = {0};
        weft_mlx_summary sum;
        CHECK_MSG(weft_mlx_fold(set, text, &sum, &err) == WEFT_OK, "%s", err.msg);
        CHECK(sum.n_folded == 18 && sum.n_overrides == 18 && sum.bits == 2 && sum.group_size == 128);
        const weft_tensor *t = weft_tensor_set_get(set, "b2_g64.weight");
        CHECK(t && t->group_size == 64 && t->bits == 2);
        t = weft_tensor_set_get(set, "b4_g32.weight");
        CHECK(t && t->group_size == 32 && t->bits == 4);
        weft_tensor_set_free(set);
        free(text);
        json_decref(cfg);
    }
    fold_edit_fails("false but scales", "b4_g64", json_false(), WEFT_EFORMAT, "b4_g64.scales exists");
    fold_edit_fails("empty dict but scales", "b4_g64", json_object(), WEFT_EFORMAT, "b4_g64.scales exists");
    fold_fails("mode", "{\"quantization\":{\"group_size\":32,\"bits\":4,\"mode\":\"mxfp4\"}}", WEFT_ENOTSUP,
               "mxfp4");
    fold_fails("module mode",
               "{\"quantization\":{\"group_size\":64,\"bits\":4,\"b2_g32\":{\"mode\":\"nvfp4\"}}}",
               WEFT_ENOTSUP, "nvfp4");
    fold_fails("awq", "{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128}}",
               WEFT_ENOTSUP, "awq");
    fold_fails("no parameters", "{\"model_type\":\"llama\"}", WEFT_EFORMAT, ".weight");
    fold_fails("bits 7", "{\"quantization\":{\"group_size\":64,\"bits\":7}}", WEFT_ENOTSUP, "7-bit");
    fold_fails("gs 16", "{\"quantization\":{\"group_size\":16,\"bits\":4}}", WEFT_ENOTSUP, "group size 16");
    fold_fails("missing bits", "{\"quantization\":{\"group_size\":64}}", WEFT_EFORMAT, "bits");
    fold_fails("bits string", "{\"quantization\":{\"group_size\":64,\"bits\":\"4\"}}", WEFT_EFORMAT, "bits");
    fold_fails("module not dict", "{\"quantization\":{\"group_size\":64,\"bits\":4,\"b2_g32\":3}}",
               WEFT_EFORMAT, "b2_g32");
    fold_fails("bad json", "{\"quantization\":", WEFT_EFORMAT, "config.json");

    /* a configured module whose scales are missing; quantization_config (no quant_method) read like
     * quantization; a quantized module with mismatched scale and bias dtypes */
    weft_tensor_set *set = weft_tensor_set_new();
    weft_err err = {0};
    uint8_t words[64] = {0}, sc[8] = {0};
    weft_tensor w = {
        .name = "m.weight", .dtype = WEFT_DT_U32, .ndim = 2, .shape = {2, 4}, .data = words, .nbytes = 32};
    weft_tensor s = {
        .name = "m.scales", .dtype = WEFT_DT_BF16, .ndim = 2, .shape = {2, 1}, .data = sc, .nbytes = 4};
    weft_tensor b = {
        .name = "m.biases", .dtype = WEFT_DT_F16, .ndim = 2, .shape = {2, 1}, .data = sc, .nbytes = 4};
    CHECK(weft_tensor_set_add(set, &w, &err) == WEFT_OK);
    CHECK_EQ_INT(
        weft_mlx_fold(set, "{\"quantization_config\":{\"group_size\":32,\"bits\":4,\"m\":true}}", NULL, &err),
        WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "m.scales") != NULL, "%s", err.msg);
    CHECK(weft_tensor_set_add(set, &s, &err) == WEFT_OK);
    CHECK(weft_tensor_set_add(set, &b, &err) == WEFT_OK);
    CHECK_EQ_INT(weft_mlx_fold(set, "{\"quantization_config\":{\"group_size\":32,\"bits\":4}}", NULL, &err),
                 WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "dtype") != NULL, "%s", err.msg);
    weft_tensor_set_remove(set, "m.biases");
    b.dtype = WEFT_DT_BF16;
    CHECK(weft_tensor_set_add(set, &b, &err) == WEFT_OK);
    weft_mlx_summary sum;
    CHECK_EQ_INT(weft_mlx_fold(set,
                               "{\"time_step_limit\":[0.0, Infinity],"
                               "\"text_config\":{\"quantization_config\":{\"group_size\":32,\"bits\":4}}}",
                               &sum, &err),
                 WEFT_OK);
    CHECK(sum.present && sum.n_folded == 1 && weft_tensor_set_count(set) == 1);
    const weft_tensor *m = weft_tensor_set_get(set, "m.weight");
    CHECK(m && m->dtype == WEFT_DT_MLX_AFFINE && m->shape[1] == 32 && m->bits == 4 && m->group_size == 32);
    weft_tensor_set_free(set);
}

static void check_names(void) {
    char buf[128];
    const char *n = "language_model.model.layers.3.mlp.gate.weight";
    CHECK_STR(weft_canonical_name(n, buf, sizeof buf), "model.language_model.layers.3.mlp.gate.weight");
    CHECK_STR(weft_canonical_name("language_model.lm_head.weight", buf, sizeof buf), "lm_head.weight");
    n = "backbone.layers.0.mixer.in_proj.weight";
    CHECK(weft_canonical_name(n, buf, sizeof buf) == n);
    n = "model.layers.0.self_attn.q_proj.weight";
    CHECK(weft_canonical_name(n, buf, sizeof buf) == n);
    CHECK(weft_canonical_name("language_model.model.x", buf, 8) == NULL);

    weft_tensor_set *set = weft_tensor_set_new();
    weft_err err = {0};
    float v[2] = {1, 2};
    weft_tensor a = {.name = "language_model.model.norm.weight",
                     .dtype = WEFT_DT_F32,
                     .ndim = 1,
                     .shape = {2},
                     .data = (const uint8_t *)v,
                     .nbytes = 8};
    CHECK(weft_tensor_set_add(set, &a, &err) == WEFT_OK);
    CHECK(weft_canonicalize_names(set, &err) == WEFT_OK);
    const weft_tensor *t = weft_tensor_set_get(set, "model.language_model.norm.weight");
    CHECK(t && t->data == (const uint8_t *)v && weft_tensor_set_count(set) == 1);
    CHECK(weft_tensor_set_add(set, &a, &err) == WEFT_OK);
    CHECK_EQ_INT(weft_canonicalize_names(set, &err), WEFT_EFORMAT);
    CHECK(strstr(err.msg, "language_model.model.norm.weight") != NULL);
    weft_tensor_set_free(set);
}

/* keys.json of an -mlx fixture: how many modules are quantized (name.scales entries). */
static int count_scales(const char *fixture) {
    char path[512];
    st_fixture_path(path, sizeof path, fixture, "keys.json");
    json_t *keys = json_load_file(path, 0, NULL);
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(keys, k, v) {
        size_t l = strlen(k);
        n += l > 7 && strcmp(k + l - 7, ".scales") == 0;
    }
    json_decref(keys);
    return n;
}

static const weft_tensor *get_checked(const weft_tensor_set *set, const char *name) {
    const weft_tensor *t = weft_tensor_set_get(set, name);
    CHECK_MSG(t != NULL, "%s missing", name);
    return t;
}

static void check_fixtures(void) {
    for (size_t i = 0; i < ST_N_FIXTURES; i++) {
        const char *fx = ST_FIXTURES[i];
        bool is_mlx = strstr(fx, "-mlx-") != NULL;
        char dir[512];
        st_fixture_path(dir, sizeof dir, fx, NULL);
        weft_tensor_set *set = weft_tensor_set_new();
        weft_checkpoint_info info;
        weft_err err = {0};
        weft_status st = weft_safetensors_load_checkpoint(dir, set, &info, &err);
        CHECK_MSG(st == WEFT_OK, "%s: %s", fx, err.msg);
        CHECK_EQ_INT(info.is_mlx, is_mlx);
        CHECK_EQ_INT(info.mlx.present, is_mlx);
        CHECK(info.weight_bytes == weft_tensor_set_bytes(set) && info.weight_bytes > 0);
        int folded = 0, stray = 0, prefixed = 0;
        for (size_t k = 0; k < weft_tensor_set_count(set); k++) {
            const weft_tensor *t = weft_tensor_set_at(set, k);
            size_t l = strlen(t->name);
            if (t->dtype == WEFT_DT_MLX_AFFINE) {
                folded++;
                CHECK(t->scale_dtype == WEFT_DT_BF16 && t->group_size == 64 &&
                      (t->bits == 4 || t->bits == 8));
                CHECK(weft_tensor_cols(t) * t->bits / 8 == (int64_t)weft_mlx_row_bytes(t));
            }
            stray += l > 7 && (!strcmp(t->name + l - 7, ".scales") || !strcmp(t->name + l - 7, ".biases"));
            prefixed += strncmp(t->name, "language_model.", 15) == 0;
        }
        CHECK_EQ_INT(folded, is_mlx ? count_scales(fx) : 0);
        CHECK_MSG(folded == info.mlx.n_folded, "%s: %d folded, summary %d", fx, folded, info.mlx.n_folded);
        CHECK_EQ_INT(stray, 0);
        CHECK_EQ_INT(prefixed, 0);
        if (is_mlx) CHECK(info.mlx.bits == 4 && info.mlx.group_size == 64 && folded > 10);
        weft_tensor_set_free(set);
    }

    /* qwen3_5_moe: routers at 8 bits through per-module overrides, experts stacked at 4 bits, names canonical
     */
    weft_tensor_set *set = weft_tensor_set_new();
    weft_checkpoint_info info;
    weft_err err = {0};
    CHECK(weft_safetensors_load_checkpoint(TEST_DATA "fixtures/qwen3_5_moe-mlx-q4g64", set, &info, &err) ==
          WEFT_OK);
    CHECK_EQ_INT(info.mlx.n_overrides, 8);
    for (int l = 0; l < 4; l++) {
        char n[128];
        snprintf(n, sizeof n, "model.language_model.layers.%d.mlp.gate.weight", l);
        const weft_tensor *g = get_checked(set, n);
        if (g)
            CHECK(g->dtype == WEFT_DT_MLX_AFFINE && g->bits == 8 && g->group_size == 64 && g->shape[0] == 8 &&
                  g->shape[1] == 64);
        snprintf(n, sizeof n, "model.language_model.layers.%d.mlp.shared_expert_gate.weight", l);
        g = get_checked(set, n);
        if (g) CHECK(g->bits == 8 && g->shape[0] == 1 && g->shape[1] == 64);
        snprintf(n, sizeof n, "model.language_model.layers.%d.mlp.switch_mlp.down_proj.weight", l);
        g = get_checked(set, n);
        if (g)
            CHECK(g->bits == 4 && g->ndim == 3 && g->shape[0] == 8 && g->shape[1] == 64 && g->shape[2] == 64);
    }
    const weft_tensor *t = get_checked(set, "lm_head.weight");
    if (t) CHECK(t->dtype == WEFT_DT_MLX_AFFINE && t->shape[0] == 1024 && t->shape[1] == 64);
    t = get_checked(set, "model.language_model.layers.0.linear_attn.A_log");
    if (t) CHECK(t->dtype == WEFT_DT_F32);
    t = get_checked(set, "model.language_model.layers.0.linear_attn.conv1d.weight");
    if (t) CHECK(t->dtype == WEFT_DT_BF16 && t->ndim == 3 && t->shape[1] == 4 && t->shape[2] == 1);
    weft_tensor_set_free(set);

    /* nemotron_h_moe: embeddings and head quantized, router and correction bias left as stored */
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_checkpoint(TEST_DATA "fixtures/nemotron_h_moe-mlx-q4g64", set, &info, &err) ==
          WEFT_OK);
    t = get_checked(set, "backbone.embeddings.weight");
    if (t) CHECK(t->dtype == WEFT_DT_MLX_AFFINE && t->shape[1] == 64);
    t = get_checked(set, "backbone.layers.1.mixer.gate.weight");
    if (t) CHECK(t->dtype == WEFT_DT_BF16);
    t = get_checked(set, "backbone.layers.1.mixer.gate.e_score_correction_bias");
    if (t) CHECK(t->dtype == WEFT_DT_F32);
    t = get_checked(set, "backbone.layers.1.mixer.switch_mlp.fc1.weight");
    if (t) CHECK(t->dtype == WEFT_DT_MLX_AFFINE && t->ndim == 3 && t->shape[2] == 64);
    weft_tensor_set_free(set);
}

/* The decoded MLX weights sit within half a quantization step (plus bf16 rounding of scale and bias) of the
 * HF weights they were made from: a decoder with a wrong bit order or group would be far off. */
static void check_against_hf(const char *hf, const char *mlx) {
    weft_tensor_set *a = weft_tensor_set_new(), *b = weft_tensor_set_new();
    weft_err err = {0};
    CHECK(weft_safetensors_load_checkpoint(hf, a, NULL, &err) == WEFT_OK);
    CHECK(weft_safetensors_load_checkpoint(mlx, b, NULL, &err) == WEFT_OK);
    int compared = 0, bad = 0;
    float *x = malloc(4096 * sizeof *x), *y = malloc(4096 * sizeof *y);
    for (size_t i = 0; i < weft_tensor_set_count(b); i++) {
        const weft_tensor *q = weft_tensor_set_at(b, i), *r = weft_tensor_set_get(a, q->name);
        if (q->dtype != WEFT_DT_MLX_AFFINE || !r || weft_tensor_numel(r) != weft_tensor_numel(q)) continue;
        int64_t cols = weft_tensor_cols(q), ng = cols / q->group_size;
        for (int64_t row = 0; row < weft_tensor_rows(q); row++) {
            weft_mlx_dequant_row(q, row, x);
            CHECK(weft_tensor_dequant_row(r, row, y, &err) == WEFT_OK);
            for (int64_t g = 0; g < ng; g++) {
                uint16_t hs, hb;
                memcpy(&hs, q->scales + 2 * (row * ng + g), 2);
                memcpy(&hb, q->biases + 2 * (row * ng + g), 2);
                float s = fabsf(weft_bf16_to_f32(hs)), bb = fabsf(weft_bf16_to_f32(hb));
                float tol = 0.5f * s + (bb + s * (float)((1 << q->bits) - 1)) / 128.0f + 1e-6f;
                for (int64_t j = g * q->group_size; j < (g + 1) * q->group_size; j++)
                    bad += fabsf(x[j] - y[j]) > tol;
            }
        }
        compared++;
    }
    CHECK_MSG(compared > 10, "%s: only %d tensors compared", mlx, compared);
    CHECK_MSG(bad == 0, "%s: %d weights off by more than half a step", mlx, bad);
    free(x);
    free(y);
    weft_tensor_set_free(a);
    weft_tensor_set_free(b);
}

int main(void) {
    check_vectors();
    check_fold_errors();
    check_names();
    check_fixtures();
    check_against_hf(TEST_DATA "fixtures/llama", TEST_DATA "fixtures/llama-mlx-q4g64");
    check_against_hf(TEST_DATA "fixtures/nemotron_h", TEST_DATA "fixtures/nemotron_h-mlx-q4g64");
    return check_report("test_mlx");
}
