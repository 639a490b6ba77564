/* Typed access to GGUF metadata (values were decoded and validated at open, see gguf.c). */
#include "gguf_impl.h"

#include <string.h>

const gguf_kv *weft_gguf_lookup(const weft_gguf *g, const char *key) {
    for (size_t k = 0; k < g->n_kv; k++)
        if (g->kvs[k].key && strcmp(g->kvs[k].key, key) == 0) return &g->kvs[k];
    return NULL;
}

size_t weft_gguf_kv_count(const weft_gguf *g) {
    return g->n_kv;
}
const char *weft_gguf_kv_key(const weft_gguf *g, size_t i) {
    return i < g->n_kv ? g->kvs[i].key : NULL;
}
weft_gguf_type weft_gguf_kv_type(const weft_gguf *g, size_t i) {
    return i < g->n_kv ? g->kvs[i].type : WEFT_GGUF_TYPE_COUNT;
}

int64_t weft_gguf_find(const weft_gguf *g, const char *key) {
    const gguf_kv *kv = weft_gguf_lookup(g, key);
    return kv ? (int64_t)(kv - g->kvs) : -1;
}

const char *weft_gguf_arch(const weft_gguf *g) {
    const gguf_kv *kv = weft_gguf_lookup(g, "general.architecture");
    return kv && kv->type == WEFT_GGUF_STRING ? kv->str : NULL;
}

static bool is_unsigned(weft_gguf_type t) {
    return t == WEFT_GGUF_U8 || t == WEFT_GGUF_U16 || t == WEFT_GGUF_U32 || t == WEFT_GGUF_U64 ||
           t == WEFT_GGUF_BOOL;
}
static bool is_signed(weft_gguf_type t) {
    return t == WEFT_GGUF_I8 || t == WEFT_GGUF_I16 || t == WEFT_GGUF_I32 || t == WEFT_GGUF_I64;
}

static weft_status find_kv(const weft_gguf *g, const char *key, const gguf_kv **out, weft_err *err) {
    *out = weft_gguf_lookup(g, key);
    if (!*out) return weft_err_set(err, WEFT_EFORMAT, "%s: missing metadata key '%s'", g->source, key);
    return WEFT_OK;
}

static weft_status mistyped(const weft_gguf *g, const gguf_kv *kv, const char *want, weft_err *err) {
    return weft_err_set(err, WEFT_EFORMAT, "%s: metadata key '%s' has type %s, expected %s", g->source,
                        kv->key, weft_gguf_type_name(kv->type), want);
}

weft_status weft_gguf_get_int(const weft_gguf *g, const char *key, int64_t *out, weft_err *err) {
    const gguf_kv *kv;
    weft_status st = find_kv(g, key, &kv, err);
    if (st) return st;
    if (is_signed(kv->type)) {
        *out = kv->i;
        return WEFT_OK;
    }
    if (!is_unsigned(kv->type)) return mistyped(g, kv, "an integer", err);
    if (kv->u > (uint64_t)INT64_MAX)
        return weft_err_set(err, WEFT_ERANGE, "%s: metadata key '%s' = %llu is out of range", g->source, key,
                            (unsigned long long)kv->u);
    *out = (int64_t)kv->u;
    return WEFT_OK;
}

weft_status weft_gguf_get_float(const weft_gguf *g, const char *key, double *out, weft_err *err) {
    const gguf_kv *kv;
    weft_status st = find_kv(g, key, &kv, err);
    if (st) return st;
    if (kv->type == WEFT_GGUF_F32 || kv->type == WEFT_GGUF_F64)
        *out = kv->f;
    else if (is_signed(kv->type))
        *out = (double)kv->i;
    else if (is_unsigned(kv->type) && kv->type != WEFT_GGUF_BOOL)
        *out = (double)kv->u;
    else
        return mistyped(g, kv, "a number", err);
    return WEFT_OK;
}

weft_status weft_gguf_get_bool(const weft_gguf *g, const char *key, bool *out, weft_err *err) {
    const gguf_kv *kv;
    weft_status st = find_kv(g, key, &kv, err);
    if (st) return st;
    if (kv->type != WEFT_GGUF_BOOL) return mistyped(g, kv, "bool", err);
    *out = kv->u != 0;
    return WEFT_OK;
}

weft_status weft_gguf_get_str(const weft_gguf *g, const char *key, const char **out, size_t *len,
                              weft_err *err) {
    const gguf_kv *kv;
    weft_status st = find_kv(g, key, &kv, err);
    if (st) return st;
    if (kv->type != WEFT_GGUF_STRING) return mistyped(g, kv, "string", err);
    *out = kv->str;
    if (len) *len = (size_t)kv->str_len;
    return WEFT_OK;
}

weft_status weft_gguf_get_arr(const weft_gguf *g, const char *key, weft_gguf_arr *out, weft_err *err) {
    const gguf_kv *kv;
    weft_status st = find_kv(g, key, &kv, err);
    if (st) return st;
    if (kv->type != WEFT_GGUF_ARRAY) return mistyped(g, kv, "array", err);
    *out = kv->arr;
    return WEFT_OK;
}

static uint64_t elem_bits(const weft_gguf_arr *a, uint64_t i, int n) {
    const uint8_t *p = a->data + i * (uint64_t)n;
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

int64_t weft_gguf_arr_int(const weft_gguf_arr *a, uint64_t i) {
    if (i >= a->count || !a->data) return 0;
    switch (a->type) {
    case WEFT_GGUF_U8:
    case WEFT_GGUF_BOOL:
        return (int64_t)elem_bits(a, i, 1);
    case WEFT_GGUF_I8:
        return (int8_t)elem_bits(a, i, 1);
    case WEFT_GGUF_U16:
        return (int64_t)elem_bits(a, i, 2);
    case WEFT_GGUF_I16:
        return (int16_t)elem_bits(a, i, 2);
    case WEFT_GGUF_U32:
        return (int64_t)elem_bits(a, i, 4);
    case WEFT_GGUF_I32:
        return (int32_t)elem_bits(a, i, 4);
    case WEFT_GGUF_U64: {
        uint64_t v = elem_bits(a, i, 8);
        return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
    }
    case WEFT_GGUF_I64:
        return (int64_t)elem_bits(a, i, 8);
    default:
        return 0;
    }
}

double weft_gguf_arr_float(const weft_gguf_arr *a, uint64_t i) {
    if (i >= a->count || !a->data) return 0.0;
    if (a->type == WEFT_GGUF_F32) {
        uint32_t b = (uint32_t)elem_bits(a, i, 4);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (a->type == WEFT_GGUF_F64) {
        uint64_t b = elem_bits(a, i, 8);
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    if (a->type == WEFT_GGUF_U64) return (double)elem_bits(a, i, 8);
    if (a->type == WEFT_GGUF_BOOL) return 0.0;
    return (double)weft_gguf_arr_int(a, i);
}

const char *weft_gguf_arr_str(const weft_gguf_arr *a, uint64_t i, uint64_t *len) {
    if (a->type != WEFT_GGUF_STRING || i >= a->count || !a->strs) return NULL;
    if (len) *len = a->lens[i];
    return a->strs[i];
}
