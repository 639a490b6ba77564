/* MLX affine quantization (docs families-and-formats §6.2): folding `X.weight`/`X.scales`/`X.biases` into one
 * WEFT_DT_MLX_AFFINE tensor following mlx_lm's load_model rules, the row decoder (mlx/ops.cpp
 * affine_dequantize, computed in fp32), and the MLX → HF name mapping. */
#include "weft/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- decoding ---- */

static size_t scale_size(weft_dtype t) {
    return t == WEFT_DT_F32 ? 4 : 2;
}

size_t weft_mlx_row_bytes(const weft_tensor *t) {
    return (size_t)weft_tensor_cols(t) * (size_t)t->bits / 8;
}

size_t weft_mlx_scale_row_bytes(const weft_tensor *t) {
    return (size_t)(weft_tensor_cols(t) / t->group_size) * scale_size(t->scale_dtype);
}

size_t weft_mlx_tensor_bytes(const weft_tensor *t) {
    size_t rows = (size_t)weft_tensor_rows(t);
    return rows * (weft_mlx_row_bytes(t) + 2 * weft_mlx_scale_row_bytes(t));
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float load_scale(weft_dtype dt, const uint8_t *base, int64_t i) {
    if (dt == WEFT_DT_F32) {
        float f;
        memcpy(&f, base + 4 * i, 4);
        return f;
    }
    uint16_t h = (uint16_t)(base[2 * i] | base[2 * i + 1] << 8);
    return dt == WEFT_DT_F16 ? weft_f16_to_f32(h) : weft_bf16_to_f32(h);
}

/* Element e of a row's LSB-first bitstream (mlx packs 2/4/8 bits per word and 3/5/6 bits as a bitstream over
 * the row's words; for power-of-two widths the two layouts coincide, so one rule reads both). */
static uint32_t extract(const uint8_t *row, int64_t e, int bits) {
    uint64_t bit = (uint64_t)e * (uint64_t)bits;
    uint64_t word = bit >> 5;
    unsigned off = (unsigned)(bit & 31);
    uint32_t v = load_u32(row + 4 * word) >> off;
    if (off + (unsigned)bits > 32) v |= load_u32(row + 4 * (word + 1)) << (32 - off);
    return v & ((1u << bits) - 1u);
}

uint32_t weft_mlx_q(const weft_tensor *t, int64_t row, int64_t col) {
    return extract(t->data + (size_t)row * weft_mlx_row_bytes(t), col, t->bits);
}

void weft_mlx_dequant_row(const weft_tensor *t, int64_t row, float *out) {
    int64_t cols = weft_tensor_cols(t), gs = t->group_size, ng = cols / gs;
    const uint8_t *w = t->data + (size_t)row * weft_mlx_row_bytes(t);
    size_t srow = weft_mlx_scale_row_bytes(t) * (size_t)row;
    const uint8_t *sp = t->scales + srow, *bp = t->biases + srow;
    for (int64_t g = 0; g < ng; g++) {
        float s = load_scale(t->scale_dtype, sp, g), b = load_scale(t->scale_dtype, bp, g);
        for (int64_t j = g * gs; j < (g + 1) * gs; j++) {
            float q = (float)extract(w, j, t->bits);
            float sq = s * q; /* two roundings, as mlx's multiply then add (no FMA) */
            out[j] = sq + b;
        }
    }
}

/* ---- names ---- */

static const struct {
    const char *from, *to;
} RENAMES[] = {
    {"language_model.model.", "model.language_model."}, /* Qwen3.5 MLX (mlx_lm qwen3_5 sanitize) */
    {"language_model.lm_head.", "lm_head."},
};

const char *weft_canonical_name(const char *name, char *buf, size_t cap) {
    for (size_t i = 0; i < sizeof RENAMES / sizeof RENAMES[0]; i++) {
        size_t n = strlen(RENAMES[i].from);
        if (strncmp(name, RENAMES[i].from, n) == 0) {
            int w = snprintf(buf, cap, "%s%s", RENAMES[i].to, name + n);
            return (w < 0 || (size_t)w >= cap) ? NULL : buf;
        }
    }
    return name;
}

/* The MLX spelling of a canonical module path (inverse of RENAMES), or NULL when it has none. */
static const char *mlx_alias(const char *path, char *buf, size_t cap) {
    for (size_t i = 0; i < sizeof RENAMES / sizeof RENAMES[0]; i++) {
        size_t n = strlen(RENAMES[i].to);
        if (strncmp(path, RENAMES[i].to, n) == 0) {
            int w = snprintf(buf, cap, "%s%s", RENAMES[i].from, path + n);
            return (w < 0 || (size_t)w >= cap) ? NULL : buf;
        }
    }
    /* lm_head itself (no trailing dot after the module path) */
    if (strcmp(path, "lm_head") == 0 && cap > 23) return strcpy(buf, "language_model.lm_head");
    return NULL;
}

static char **snapshot_names(const weft_tensor_set *set, const char *suffix, size_t *n) {
    size_t cnt = weft_tensor_set_count(set), sl = suffix ? strlen(suffix) : 0, k = 0;
    char **v = calloc(cnt + 1, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < cnt; i++) {
        const char *nm = weft_tensor_set_at(set, i)->name;
        size_t l = strlen(nm);
        if (suffix && (l <= sl || strcmp(nm + l - sl, suffix) != 0)) continue;
        if (!(v[k] = strdup(nm))) {
            for (size_t j = 0; j < k; j++) free(v[j]);
            free(v);
            return NULL;
        }
        k++;
    }
    *n = k;
    return v;
}

static void free_names(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

weft_status weft_canonicalize_names(weft_tensor_set *set, weft_err *err) {
    size_t n = 0;
    char **names = snapshot_names(set, NULL, &n);
    if (!names) return weft_err_set(err, WEFT_ENOMEM, "out of memory renaming tensors");
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        size_t cap = strlen(names[i]) + 64;
        char *buf = malloc(cap);
        if (!buf) {
            st = weft_err_set(err, WEFT_ENOMEM, "out of memory renaming tensors");
            break;
        }
        const char *to = weft_canonical_name(names[i], buf, cap);
        if (to && to != names[i]) {
            if (weft_tensor_set_get(set, to)) {
                st = weft_err_set(err, WEFT_EFORMAT, "tensor %s renames to %s, which already exists",
                                  names[i], to);
            } else {
                weft_tensor t = *weft_tensor_set_get(set, names[i]);
                weft_tensor_set_remove(set, names[i]);
                t.name = to;
                st = weft_tensor_set_add(set, &t, err);
            }
        }
        free(buf);
    }
    free_names(names, n);
    return st;
}

/* ---- folding ---- */

typedef struct qparams {
    bool quant;
    bool override;
    int bits, gs;
} qparams;

/* Integer member of a quantization object; absent → def (or an error when required). */
static weft_status get_int(json_t *obj, const char *key, const char *where, int def, bool required, int *out,
                           weft_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required) return weft_err_set(err, WEFT_EFORMAT, "config.json: %s has no %s", where, key);
        *out = def;
        return WEFT_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 4096)
        return weft_err_set(err, WEFT_EFORMAT, "config.json: %s.%s is not a positive integer", where, key);
    *out = (int)json_integer_value(v);
    return WEFT_OK;
}

static weft_status check_mode(json_t *obj, const char *where, weft_err *err) {
    json_t *m = json_object_get(obj, "mode");
    if (!m || json_is_null(m)) return WEFT_OK;
    if (!json_is_string(m))
        return weft_err_set(err, WEFT_EFORMAT, "config.json: %s.mode is not a string", where);
    if (strcmp(json_string_value(m), "affine") != 0)
        return weft_err_set(err, WEFT_ENOTSUP, "config.json: %s.mode \"%s\" is not supported (only affine)",
                            where, json_string_value(m));
    return WEFT_OK;
}

/* The quantization object of config.json (mlx_lm order), or NULL; *legacy tells which key it came from. */
static json_t *find_quant(json_t *root, bool *legacy) {
    json_t *q = json_object_get(root, "quantization");
    *legacy = false;
    if (q && !json_is_null(q)) return q;
    *legacy = true;
    q = json_object_get(root, "quantization_config");
    if (q && !json_is_null(q)) return q;
    json_t *tc = json_object_get(root, "text_config");
    q = tc ? json_object_get(tc, "quantization_config") : NULL;
    return q && !json_is_null(q) ? q : NULL;
}

static bool has_suffix_tensor(const weft_tensor_set *set, const char *path, const char *suffix) {
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *b = malloc(n);
    if (!b) return false;
    snprintf(b, n, "%s%s", path, suffix);
    bool r = weft_tensor_set_get(set, b) != NULL;
    free(b);
    return r;
}

/* Decides how module `path` is stored (mlx_lm class_predicate). */
static weft_status module_params(const weft_tensor_set *set, json_t *q, const char *qname, const char *path,
                                 const qparams *global, qparams *p, weft_err *err) {
    static const char *const reserved[] = {"bits", "group_size", "mode", "quant_method"};
    json_t *v = NULL;
    bool is_reserved = false;
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(path, reserved[i]) == 0) is_reserved = true;
    if (!is_reserved) {
        v = json_object_get(q, path);
        char alias[1024];
        const char *a = v ? NULL : mlx_alias(path, alias, sizeof alias);
        if (a) v = json_object_get(q, a);
    }
    *p = *global;
    p->override = false;
    if (!v) {
        p->quant = has_suffix_tensor(set, path, ".scales");
        return WEFT_OK;
    }
    if (json_is_boolean(v)) {
        p->quant = json_is_true(v);
    } else if (json_is_object(v)) {
        p->quant = json_object_size(v) > 0; /* an empty dict is falsy in mlx's predicate */
        p->override = p->quant;
        if (p->quant) {
            char where[1200];
            snprintf(where, sizeof where, "%s[\"%s\"]", qname, path);
            weft_status st = check_mode(v, where, err);
            if (!st) st = get_int(v, "bits", where, 4, false, &p->bits, err);
            if (!st) st = get_int(v, "group_size", where, 64, false, &p->gs, err);
            if (st) return st;
        }
    } else {
        return weft_err_set(err, WEFT_EFORMAT, "config.json: %s[\"%s\"] is neither a bool nor an object",
                            qname, path);
    }
    if (!p->quant && has_suffix_tensor(set, path, ".scales"))
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s: config.json says it is not quantized, but %s.scales exists", path, path);
    return WEFT_OK;
}

static bool float_dtype(weft_dtype t) {
    return t == WEFT_DT_F32 || t == WEFT_DT_F16 || t == WEFT_DT_BF16;
}

/* Folds P.weight + P.scales + P.biases with parameters p. */
static weft_status fold_one(weft_tensor_set *set, const char *path, const qparams *p, char *nbuf, size_t ncap,
                            weft_err *err) {
    if (p->bits < 2 || p->bits > 8 || p->bits == 7)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: %d-bit MLX quantization is not supported (2,3,4,5,6,8)",
                            path, p->bits);
    if (p->gs != 32 && p->gs != 64 && p->gs != 128)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: MLX group size %d is not supported (32, 64, 128)", path,
                            p->gs);
    snprintf(nbuf, ncap, "%s.weight", path);
    const weft_tensor *w = weft_tensor_set_get(set, nbuf);
    snprintf(nbuf, ncap, "%s.scales", path);
    const weft_tensor *s = weft_tensor_set_get(set, nbuf);
    snprintf(nbuf, ncap, "%s.biases", path);
    const weft_tensor *b = weft_tensor_set_get(set, nbuf);
    if (!s || !b)
        return weft_err_set(err, WEFT_EFORMAT, "%s: quantized per config.json but %s.%s is missing", path,
                            path, s ? "biases" : "scales");
    if (w->dtype != WEFT_DT_U32)
        return weft_err_set(err, WEFT_EFORMAT, "%s.weight: quantized weights must be U32 words, found %s",
                            path, weft_dtype_get(w->dtype)->name);
    if (!float_dtype(s->dtype) || s->dtype != b->dtype)
        return weft_err_set(err, WEFT_EFORMAT, "%s: scales (%s) and biases (%s) must share one float dtype",
                            path, weft_dtype_get(s->dtype)->name, weft_dtype_get(b->dtype)->name);
    bool same = w->ndim >= 2 && s->ndim == w->ndim && b->ndim == w->ndim;
    for (int i = 0; same && i < w->ndim; i++) {
        if (s->shape[i] != b->shape[i]) same = false;
        if (i < w->ndim - 1 && s->shape[i] != w->shape[i]) same = false;
    }
    if (!same)
        return weft_err_set(err, WEFT_EFORMAT, "%s: shapes of weight, scales and biases do not match", path);
    int64_t words = weft_tensor_cols(w), scols = weft_tensor_cols(s), in = scols * p->gs;
    if (words <= 0 || scols <= 0 || words * 32 != (int64_t)p->bits * in)
        return weft_err_set(
            err, WEFT_EFORMAT,
            "%s: config.json says bits=%d group_size=%d, but %lld words and %lld groups per row "
            "imply %.3g bits",
            path, p->bits, p->gs, (long long)words, (long long)scols,
            in > 0 ? 32.0 * (double)words / (double)in : 0.0);
    weft_tensor f = *w;
    f.dtype = WEFT_DT_MLX_AFFINE;
    f.shape[f.ndim - 1] = in;
    f.bits = p->bits;
    f.group_size = p->gs;
    f.scale_dtype = s->dtype;
    f.scales = s->data;
    f.biases = b->data;
    snprintf(nbuf, ncap, "%s.scales", path);
    weft_tensor_set_remove(set, nbuf);
    snprintf(nbuf, ncap, "%s.biases", path);
    weft_tensor_set_remove(set, nbuf);
    snprintf(nbuf, ncap, "%s.weight", path);
    weft_tensor *m = weft_tensor_set_get_mut(set, nbuf);
    f.name = m->name;
    *m = f;
    return WEFT_OK;
}

/* Without quantization parameters, packed weights cannot be decoded: name the first one. */
static weft_status refuse_unparameterised(const weft_tensor_set *set, weft_err *err) {
    for (size_t i = 0; i < weft_tensor_set_count(set); i++) {
        const weft_tensor *t = weft_tensor_set_at(set, i);
        size_t l = strlen(t->name);
        if (t->dtype != WEFT_DT_U32 || l <= 7 || strcmp(t->name + l - 7, ".weight") != 0) continue;
        char *path = strndup(t->name, l - 7);
        if (!path) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
        bool q = has_suffix_tensor(set, path, ".scales");
        free(path);
        if (q)
            return weft_err_set(err, WEFT_EFORMAT,
                                "%s: MLX-quantized weights but config.json has no quantization parameters",
                                t->name);
    }
    return WEFT_OK;
}

weft_status weft_mlx_fold(weft_tensor_set *set, const char *config_json, weft_mlx_summary *summary,
                          weft_err *err) {
    weft_mlx_summary local;
    if (!summary) summary = &local;
    memset(summary, 0, sizeof *summary);
    json_error_t jerr;
    char *fixed = weft_json_nonfinite_dup(config_json); /* Nemotron-H configs may carry bare Infinity */
    json_t *root = json_loads(fixed ? fixed : config_json, 0, &jerr);
    free(fixed);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return weft_err_set(err, WEFT_EFORMAT, "config.json: not a valid JSON object: %s (line %d)",
                            root ? "top level is not an object" : jerr.text, jerr.line);
    }
    bool legacy;
    json_t *q = find_quant(root, &legacy);
    const char *qname = legacy ? "quantization_config" : "quantization";
    weft_status st = WEFT_OK;
    char **names = NULL;
    size_t n = 0;
    qparams global = {true, false, 0, 0};
    if (!q) {
        st = refuse_unparameterised(set, err);
        goto done;
    }
    if (!json_is_object(q)) {
        st = weft_err_set(err, WEFT_EFORMAT, "config.json: %s is not an object", qname);
        goto done;
    }
    json_t *qm = json_object_get(q, "quant_method");
    if (legacy && qm) {
        st = weft_err_set(err, WEFT_ENOTSUP,
                          "config.json: quantization_config.quant_method \"%s\" is not supported",
                          json_is_string(qm) ? json_string_value(qm) : "?");
        goto done;
    }
    if ((st = check_mode(q, qname, err)) || (st = get_int(q, "bits", qname, 0, true, &global.bits, err)) ||
        (st = get_int(q, "group_size", qname, 0, true, &global.gs, err)))
        goto done;
    summary->present = true;
    summary->bits = global.bits;
    summary->group_size = global.gs;

    names = snapshot_names(set, ".weight", &n);
    if (!names) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory folding MLX tensors");
        goto done;
    }
    for (size_t i = 0; i < n && !st; i++) {
        size_t l = strlen(names[i]);
        names[i][l - 7] = 0; /* module path */
        qparams p;
        st = module_params(set, q, qname, names[i], &global, &p, err);
        if (st || !p.quant) continue;
        size_t cap = l + 16;
        char *nbuf = malloc(cap);
        if (!nbuf) {
            st = weft_err_set(err, WEFT_ENOMEM, "out of memory folding MLX tensors");
            break;
        }
        st = fold_one(set, names[i], &p, nbuf, cap, err);
        free(nbuf);
        if (!st) {
            summary->n_folded++;
            if (p.override) summary->n_overrides++;
        }
    }
done:
    if (names) free_names(names, n);
    json_decref(root);
    return st;
}
