/* GGUF v2/v3 header parser and validator (layout: docs families-and-formats §6.3, gguf-py constants.py and
 * gguf_reader.py, llama.cpp ggml/src/gguf.cpp). Nothing in the file is trusted: every length is checked
 * against the bytes that remain before it is used, and every count against the smallest size its items
 * could take, so a corrupt or hostile file yields one WEFT_EFORMAT line and never an out-of-bounds read or
 * an absurd allocation. */
#include "gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC_LEN         4
#define GGUF_HEADER_BYTES      24 /* magic, version, n_tensors, n_kv */
#define GGUF_MIN_KV_BYTES      13 /* u64 key length + u32 type + ≥1 value byte (key bytes not counted) */
#define GGUF_MIN_TENSOR_BYTES  32 /* u64 name length + u32 n_dims + 1×u64 ne + u32 type + u64 offset */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT     (1u << 30)
#define ARENA_CHUNK            (1u << 20)

/* ---- string arena: every key and string value is copied here, NUL-terminated ---- */

struct gguf_chunk {
    gguf_chunk *next;
    size_t used, cap;
    char data[];
};

static char *arena_copy(weft_gguf *g, const uint8_t *s, uint64_t len) {
    gguf_chunk *c = g->arena;
    if (!c || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > ARENA_CHUNK ? (size_t)len + 1 : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    char *out = c->data + c->used;
    if (len) memcpy(out, s, (size_t)len);
    out[len] = '\0';
    c->used += (size_t)len + 1;
    return out;
}

/* ---- ggml types ---- */

typedef struct ggml_type_row {
    const char *name;
    int dtype; /* weft_dtype, or -1 when weft cannot decode it */
} ggml_type_row;

static const ggml_type_row GGML_TYPES[] = {
    [0] = {"F32", WEFT_DT_F32},
    [1] = {"F16", WEFT_DT_F16},
    [2] = {"Q4_0", WEFT_DT_Q4_0},
    [3] = {"Q4_1", WEFT_DT_Q4_1},
    [4] = {"Q4_2", -1},
    [5] = {"Q4_3", -1},
    [6] = {"Q5_0", WEFT_DT_Q5_0},
    [7] = {"Q5_1", WEFT_DT_Q5_1},
    [8] = {"Q8_0", WEFT_DT_Q8_0},
    [9] = {"Q8_1", -1},
    [10] = {"Q2_K", WEFT_DT_Q2_K},
    [11] = {"Q3_K", WEFT_DT_Q3_K},
    [12] = {"Q4_K", WEFT_DT_Q4_K},
    [13] = {"Q5_K", WEFT_DT_Q5_K},
    [14] = {"Q6_K", WEFT_DT_Q6_K},
    [15] = {"Q8_K", -1},
    [16] = {"IQ2_XXS", -1},
    [17] = {"IQ2_XS", -1},
    [18] = {"IQ3_XXS", -1},
    [19] = {"IQ1_S", -1},
    [20] = {"IQ4_NL", -1},
    [21] = {"IQ3_S", -1},
    [22] = {"IQ2_S", -1},
    [23] = {"IQ4_XS", -1},
    [24] = {"I8", WEFT_DT_I8},
    [25] = {"I16", WEFT_DT_I16},
    [26] = {"I32", WEFT_DT_I32},
    [27] = {"I64", WEFT_DT_I64},
    [28] = {"F64", WEFT_DT_F64},
    [29] = {"IQ1_M", -1},
    [30] = {"BF16", WEFT_DT_BF16},
    [31] = {"Q4_0_4_4", -1},
    [32] = {"Q4_0_4_8", -1},
    [33] = {"Q4_0_8_8", -1},
    [34] = {"TQ1_0", -1},
    [35] = {"TQ2_0", -1},
    [36] = {"IQ4_NL_4_4", -1},
    [37] = {"IQ4_NL_4_8", -1},
    [38] = {"IQ4_NL_8_8", -1},
    [39] = {"MXFP4", -1},
    [40] = {"NVFP4", -1},
    [41] = {"Q1_0", -1},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

bool weft_gguf_dtype_from_ggml(uint32_t ggml_type, weft_dtype *out) {
    if (ggml_type >= N_GGML_TYPES || GGML_TYPES[ggml_type].dtype < 0) return false;
    if (out) *out = (weft_dtype)GGML_TYPES[ggml_type].dtype;
    return true;
}

const char *weft_gguf_ggml_type_name(uint32_t ggml_type) {
    if (ggml_type >= N_GGML_TYPES || !GGML_TYPES[ggml_type].name) return "unknown";
    return GGML_TYPES[ggml_type].name;
}

static const char *const VALUE_TYPE_NAMES[WEFT_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t VALUE_TYPE_SIZE[WEFT_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *weft_gguf_type_name(weft_gguf_type t) {
    if ((int)t < 0 || t >= WEFT_GGUF_TYPE_COUNT) return "?";
    return VALUE_TYPE_NAMES[t];
}

/* ---- cursor over the header ---- */

typedef struct cursor {
    weft_gguf *g;
    size_t pos;
    weft_err *err;
} cursor;

static uint64_t le_u(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static weft_status truncated(cursor *c, const char *what, uint64_t need) {
    return weft_err_set(c->err, WEFT_EFORMAT, "%s: truncated: %s at offset %zu needs %llu bytes, %zu remain",
                        c->g->source, what, c->pos, (unsigned long long)need, c->g->size - c->pos);
}

static size_t remain(const cursor *c) {
    return c->g->size - c->pos;
}

static weft_status rd_u(cursor *c, int n, uint64_t *v, const char *what) {
    *v = 0; /* always written, so callers never see an indeterminate value */
    if (remain(c) < (size_t)n) return truncated(c, what, (uint64_t)n);
    *v = le_u(c->g->base + c->pos, n);
    c->pos += (size_t)n;
    return WEFT_OK;
}

/* A GGUF string (u64 length + bytes), copied into the arena. */
static weft_status rd_str(cursor *c, const char **out, uint64_t *len_out, const char *what) {
    uint64_t len;
    weft_status st = rd_u(c, 8, &len, what);
    if (st) return st;
    if (len > remain(c))
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: %s at offset %zu: length %llu runs past the end of the file", c->g->source,
                            what, c->pos - 8, (unsigned long long)len);
    char *s = arena_copy(c->g, c->g->base + c->pos, len);
    if (!s) return weft_err_set(c->err, WEFT_ENOMEM, "%s: out of memory copying %s", c->g->source, what);
    c->pos += (size_t)len;
    *out = s;
    if (len_out) *len_out = len;
    return WEFT_OK;
}

static weft_status bad_type(cursor *c, const char *key, uint32_t t, const char *what) {
    return weft_err_set(c->err, WEFT_EFORMAT, "%s: key '%s': unknown %s value type %u", c->g->source, key,
                        what, t);
}

static weft_status rd_scalar(cursor *c, gguf_kv *kv) {
    weft_gguf_type t = kv->type;
    if (t == WEFT_GGUF_STRING) return rd_str(c, &kv->str, &kv->str_len, "string value");
    uint64_t v;
    weft_status st = rd_u(c, VALUE_TYPE_SIZE[t], &v, "value");
    if (st) return st;
    switch (t) {
    case WEFT_GGUF_U8:
    case WEFT_GGUF_U16:
    case WEFT_GGUF_U32:
    case WEFT_GGUF_U64:
        kv->u = v;
        break;
    case WEFT_GGUF_I8:
        kv->i = (int8_t)v;
        break;
    case WEFT_GGUF_I16:
        kv->i = (int16_t)v;
        break;
    case WEFT_GGUF_I32:
        kv->i = (int32_t)v;
        break;
    case WEFT_GGUF_I64:
        kv->i = (int64_t)v;
        break;
    case WEFT_GGUF_BOOL:
        if (v > 1)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: key '%s': bool value byte %llu is not 0 or 1",
                                c->g->source, kv->key, (unsigned long long)v);
        kv->u = v;
        break;
    case WEFT_GGUF_F32: {
        uint32_t b = (uint32_t)v;
        float f;
        memcpy(&f, &b, 4);
        kv->f = f;
        break;
    }
    case WEFT_GGUF_F64:
        memcpy(&kv->f, &v, 8);
        break;
    default:
        break;
    }
    return WEFT_OK;
}

static weft_status rd_array(cursor *c, gguf_kv *kv) {
    uint64_t et, count;
    weft_status st = rd_u(c, 4, &et, "array element type");
    if (!st) st = rd_u(c, 8, &count, "array length");
    if (st) return st;
    if (et >= WEFT_GGUF_TYPE_COUNT) return bad_type(c, kv->key, (uint32_t)et, "array element");
    if (et == WEFT_GGUF_ARRAY)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: key '%s': arrays of arrays are not supported",
                            c->g->source, kv->key);
    weft_gguf_arr *a = &kv->arr;
    a->type = (weft_gguf_type)et;
    a->count = count;
    if (et != WEFT_GGUF_STRING) {
        uint64_t esz = VALUE_TYPE_SIZE[et];
        if (count > remain(c) / esz)
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: key '%s': array of %llu %s runs past the end of the file", c->g->source,
                                kv->key, (unsigned long long)count, VALUE_TYPE_NAMES[et]);
        a->data = c->g->base + c->pos;
        if (et == WEFT_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (a->data[i] > 1)
                    return weft_err_set(c->err, WEFT_EFORMAT,
                                        "%s: key '%s': bool element %llu is %u, not 0 or 1", c->g->source,
                                        kv->key, (unsigned long long)i, a->data[i]);
        c->pos += (size_t)(count * esz);
        return WEFT_OK;
    }
    /* every string takes at least its 8-byte length */
    if (count > remain(c) / 8)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: key '%s': array of %llu strings runs past the end of the file", c->g->source,
                            kv->key, (unsigned long long)count);
    const char **strs = calloc(count ? (size_t)count : 1, sizeof *strs);
    uint64_t *lens = calloc(count ? (size_t)count : 1, sizeof *lens);
    /* owned by the handle from here on (freed at close even on a later error) */
    a->strs = strs;
    a->lens = lens;
    if (!strs || !lens)
        return weft_err_set(c->err, WEFT_ENOMEM, "%s: key '%s': out of memory for %llu strings", c->g->source,
                            kv->key, (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++) {
        st = rd_str(c, &strs[i], &lens[i], "array string");
        if (st) return st;
    }
    return WEFT_OK;
}

static int cmp_kv_key(const void *a, const void *b) {
    return strcmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}
static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const weft_gguf_tensor_info *const *)a)->name,
                  (*(const weft_gguf_tensor_info *const *)b)->name);
}
static int cmp_tensor_offset(const void *a, const void *b) {
    uint64_t x = (*(const weft_gguf_tensor_info *const *)a)->offset;
    uint64_t y = (*(const weft_gguf_tensor_info *const *)b)->offset;
    return x < y ? -1 : x > y;
}

static weft_status read_kvs(cursor *c) {
    weft_gguf *g = c->g;
    for (size_t k = 0; k < g->n_kv; k++) {
        gguf_kv *kv = &g->kvs[k];
        uint64_t klen, t;
        weft_status st = rd_str(c, &kv->key, &klen, "metadata key");
        if (st) return st;
        if (klen == 0 || strlen(kv->key) != klen)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: metadata key %zu is empty or contains a NUL byte",
                                g->source, k);
        st = rd_u(c, 4, &t, "value type");
        if (st) return st;
        if (t >= WEFT_GGUF_TYPE_COUNT) return bad_type(c, kv->key, (uint32_t)t, "metadata");
        kv->type = (weft_gguf_type)t;
        st = kv->type == WEFT_GGUF_ARRAY ? rd_array(c, kv) : rd_scalar(c, kv);
        if (st) return st;
    }
    if (g->n_kv > 1) {
        const gguf_kv **idx = malloc(g->n_kv * sizeof *idx);
        if (!idx) return weft_err_set(c->err, WEFT_ENOMEM, "%s: out of memory", g->source);
        for (size_t k = 0; k < g->n_kv; k++) idx[k] = &g->kvs[k];
        qsort(idx, g->n_kv, sizeof *idx, cmp_kv_key);
        for (size_t k = 1; k < g->n_kv; k++)
            if (strcmp(idx[k - 1]->key, idx[k]->key) == 0) {
                weft_status st = weft_err_set(c->err, WEFT_EFORMAT, "%s: duplicate metadata key '%s'",
                                              g->source, idx[k]->key);
                free(idx);
                return st;
            }
        free(idx);
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = weft_gguf_lookup(g, "general.alignment");
    if (al) {
        uint64_t v;
        switch (al->type) {
        case WEFT_GGUF_U8:
        case WEFT_GGUF_U16:
        case WEFT_GGUF_U32:
        case WEFT_GGUF_U64:
            v = al->u;
            break;
        case WEFT_GGUF_I8:
        case WEFT_GGUF_I16:
        case WEFT_GGUF_I32:
        case WEFT_GGUF_I64:
            v = al->i > 0 ? (uint64_t)al->i : 0;
            break;
        default:
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: general.alignment has type %s, not an integer",
                                g->source, VALUE_TYPE_NAMES[al->type]);
        }
        if (v == 0 || (v & (v - 1)) || v > GGUF_MAX_ALIGNMENT)
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: general.alignment %llu is not a power of two in [1, 2^30]", g->source,
                                (unsigned long long)v);
        g->alignment = (size_t)v;
    }
    return WEFT_OK;
}

static weft_status read_tensor_info(cursor *c, size_t k) {
    weft_gguf *g = c->g;
    weft_gguf_tensor_info *t = &g->tensors[k];
    uint64_t nlen, nd, ty;
    weft_status st = rd_str(c, &t->name, &nlen, "tensor name");
    if (st) return st;
    if (nlen == 0 || strlen(t->name) != nlen)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: tensor %zu has an empty name or one containing a NUL byte", g->source, k);
    if ((st = rd_u(c, 4, &nd, "tensor n_dims"))) return st;
    if (nd < 1 || nd > 4)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: tensor '%s': n_dims %llu is not in 1..4", g->source,
                            t->name, (unsigned long long)nd);
    t->n_dims = (int)nd;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (int d = 0; d < (int)nd; d++) {
        uint64_t ne;
        if ((st = rd_u(c, 8, &ne, "tensor dimension"))) return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: tensor '%s': ne[%d] = %llu is not a positive size",
                                g->source, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if ((st = rd_u(c, 4, &ty, "tensor type"))) return st;
    if ((st = rd_u(c, 8, &t->offset, "tensor offset"))) return st;
    t->ggml_type = (uint32_t)ty;
    if (!weft_gguf_dtype_from_ggml(t->ggml_type, &t->dtype))
        return weft_err_set(c->err, WEFT_ENOTSUP,
                            "%s: tensor '%s' has ggml type %u (%s), which weft cannot decode", g->source,
                            t->name, t->ggml_type, weft_gguf_ggml_type_name(t->ggml_type));
    const weft_dtype_info *di = weft_dtype_get(t->dtype);
    if (t->ne[0] % di->block)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: tensor '%s': ne[0] = %lld is not a multiple of the %s block (%d)", g->source,
                            t->name, (long long)t->ne[0], di->name, di->block);
    uint64_t bytes = (uint64_t)(t->ne[0] / di->block) * (uint64_t)di->block_bytes;
    for (int d = 1; d < 4; d++)
        if (__builtin_mul_overflow(bytes, (uint64_t)t->ne[d], &bytes) || bytes > SIZE_MAX)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: tensor '%s': size overflows", g->source, t->name);
    /* the element count must fit int64 too (weft_tensor_numel) */
    int64_t numel = 1;
    for (int d = 0; d < 4; d++)
        if (__builtin_mul_overflow(numel, t->ne[d], &numel))
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: tensor '%s': element count overflows", g->source,
                                t->name);
    t->nbytes = (size_t)bytes;
    return WEFT_OK;
}

/* Places every tensor inside the data section and checks alignment, bounds, overlaps and duplicate names. */
static weft_status place_tensors(cursor *c) {
    weft_gguf *g = c->g;
    size_t a = g->alignment;
    size_t data = c->pos + (a - c->pos % a) % a;
    g->data_offset = data;
    if (!g->n_tensors) return WEFT_OK;
    if (data > g->size)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: tensor data section starts at %zu, past the end of the file (%zu)",
                            g->source, data, g->size);
    size_t avail = g->size - data;
    for (size_t k = 0; k < g->n_tensors; k++) {
        weft_gguf_tensor_info *t = &g->tensors[k];
        if (t->offset % a)
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: tensor '%s': offset %llu is not a multiple of the alignment %zu",
                                g->source, t->name, (unsigned long long)t->offset, a);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: tensor '%s': data [%llu, +%zu) runs past the end of the file (data "
                                "section holds %zu bytes)",
                                g->source, t->name, (unsigned long long)t->offset, t->nbytes, avail);
        t->data = g->base + data + t->offset;
    }
    const weft_gguf_tensor_info **idx = malloc(g->n_tensors * sizeof *idx);
    if (!idx) return weft_err_set(c->err, WEFT_ENOMEM, "%s: out of memory", g->source);
    for (size_t k = 0; k < g->n_tensors; k++) idx[k] = &g->tensors[k];
    weft_status st = WEFT_OK;
    qsort(idx, g->n_tensors, sizeof *idx, cmp_tensor_offset);
    for (size_t k = 1; k < g->n_tensors && !st; k++)
        if (idx[k - 1]->offset + idx[k - 1]->nbytes > idx[k]->offset)
            st = weft_err_set(c->err, WEFT_EFORMAT,
                              "%s: tensors '%s' and '%s' overlap (offsets %llu+%zu and %llu)", g->source,
                              idx[k - 1]->name, idx[k]->name, (unsigned long long)idx[k - 1]->offset,
                              idx[k - 1]->nbytes, (unsigned long long)idx[k]->offset);
    if (!st) {
        qsort(idx, g->n_tensors, sizeof *idx, cmp_tensor_name);
        for (size_t k = 1; k < g->n_tensors && !st; k++)
            if (strcmp(idx[k - 1]->name, idx[k]->name) == 0)
                st = weft_err_set(c->err, WEFT_EFORMAT, "%s: duplicate tensor name '%s'", g->source,
                                  idx[k]->name);
    }
    free(idx);
    return st;
}

static weft_status parse(weft_gguf *g, weft_err *err) {
    cursor c = {g, 0, err};
    if (g->size < GGUF_HEADER_BYTES)
        return weft_err_set(err, WEFT_EFORMAT, "%s: %zu bytes is too short for a GGUF header (24)", g->source,
                            g->size);
    if (memcmp(g->base, "GGUF", GGUF_MAGIC_LEN) != 0)
        return weft_err_set(err, WEFT_EFORMAT, "%s: bad magic (not a GGUF file)", g->source);
    c.pos = 4;
    uint64_t v, nt, nkv;
    rd_u(&c, 4, &v, "version");
    rd_u(&c, 8, &nt, "n_tensors");
    rd_u(&c, 8, &nkv, "n_kv");
    g->version = (uint32_t)v;
    if (v == 1)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: GGUF version 1 is not supported (2 and 3 are)",
                            g->source);
    if ((v & 0xffffu) == 0 && (v >> 24) >= 1 && (v >> 24) <= 3)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: big-endian GGUF is not supported", g->source);
    if (v == 0 || v > 0xffff)
        return weft_err_set(err, WEFT_EFORMAT, "%s: bad GGUF version %llu", g->source, (unsigned long long)v);
    if (v > 3)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: GGUF version %llu is newer than this reader (2, 3)",
                            g->source, (unsigned long long)v);
    size_t rest = g->size - GGUF_HEADER_BYTES;
    if (nkv > rest / GGUF_MIN_KV_BYTES)
        return weft_err_set(err, WEFT_EFORMAT, "%s: n_kv %llu cannot fit in %zu bytes", g->source,
                            (unsigned long long)nkv, g->size);
    if (nt > rest / GGUF_MIN_TENSOR_BYTES || nkv * GGUF_MIN_KV_BYTES + nt * GGUF_MIN_TENSOR_BYTES > rest)
        return weft_err_set(err, WEFT_EFORMAT, "%s: n_tensors %llu and n_kv %llu cannot fit in %zu bytes",
                            g->source, (unsigned long long)nt, (unsigned long long)nkv, g->size);
    g->kvs = calloc(nkv ? (size_t)nkv : 1, sizeof *g->kvs);
    g->tensors = calloc(nt ? (size_t)nt : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors) return weft_err_set(err, WEFT_ENOMEM, "%s: out of memory", g->source);
    g->n_kv = (size_t)nkv;
    weft_status st = read_kvs(&c);
    if (st) return st;
    g->n_tensors = (size_t)nt;
    for (size_t k = 0; k < g->n_tensors; k++)
        if ((st = read_tensor_info(&c, k))) return st;
    return place_tensors(&c);
}

static weft_gguf *new_handle(const char *source) {
    weft_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->source = strdup(source);
    if (!g->source) {
        free(g);
        return NULL;
    }
    return g;
}

void weft_gguf_close(weft_gguf *g) {
    if (!g) return;
    for (size_t k = 0; k < g->n_kv; k++) {
        free((void *)g->kvs[k].arr.strs);
        free((void *)g->kvs[k].arr.lens);
    }
    free(g->kvs);
    free(g->tensors);
    while (g->arena) {
        gguf_chunk *n = g->arena->next;
        free(g->arena);
        g->arena = n;
    }
    if (g->map) munmap(g->map, g->map_len);
    free(g->source);
    free(g);
}

weft_status weft_gguf_open_memory(const void *data, size_t len, weft_gguf **out, weft_err *err) {
    *out = NULL;
    if (!data && len) return weft_err_set(err, WEFT_EINVAL, "<memory>: NULL buffer");
    if ((uintptr_t)data % 8)
        return weft_err_set(err, WEFT_EINVAL, "<memory>: GGUF buffer must be 8-byte aligned");
    weft_gguf *g = new_handle("<memory>");
    if (!g) return weft_err_set(err, WEFT_ENOMEM, "<memory>: out of memory");
    g->base = data;
    g->size = len;
    weft_status st = parse(g, err);
    if (st) {
        weft_gguf_close(g);
        return st;
    }
    *out = g;
    return WEFT_OK;
}

weft_status weft_gguf_open_file(const char *path, weft_gguf **out, weft_err *err) {
    *out = NULL;
    /* O_NONBLOCK: a FIFO under this name would block open() until a writer came; it is refused below as
     * not a regular file (no effect on regular files) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return weft_err_set(err, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        weft_status st = weft_err_set(err, WEFT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return weft_err_set(err, WEFT_EIO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < GGUF_HEADER_BYTES) {
        close(fd);
        return weft_err_set(err, WEFT_EFORMAT, "%s: %zu bytes is too short for a GGUF header (24)", path,
                            size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return weft_err_set(err, WEFT_EIO, "%s: mmap failed: %s", path, strerror(map_errno));
    weft_gguf *g = new_handle(path);
    if (!g) {
        munmap(map, size);
        return weft_err_set(err, WEFT_ENOMEM, "%s: out of memory", path);
    }
    g->base = map;
    g->size = size;
    g->map = map;
    g->map_len = size;
    g->file_backed = true;
    weft_status st = parse(g, err);
    if (st) {
        weft_gguf_close(g);
        return st;
    }
    *out = g;
    return WEFT_OK;
}

uint32_t weft_gguf_version(const weft_gguf *g) {
    return g->version;
}
const char *weft_gguf_source(const weft_gguf *g) {
    return g->source;
}
size_t weft_gguf_alignment(const weft_gguf *g) {
    return g->alignment;
}
size_t weft_gguf_data_offset(const weft_gguf *g) {
    return g->data_offset;
}

size_t weft_gguf_tensor_count(const weft_gguf *g) {
    return g->n_tensors;
}

const weft_gguf_tensor_info *weft_gguf_tensor_at(const weft_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const weft_gguf_tensor_info *weft_gguf_tensor_find(const weft_gguf *g, const char *name) {
    for (size_t k = 0; k < g->n_tensors; k++)
        if (strcmp(g->tensors[k].name, name) == 0) return &g->tensors[k];
    return NULL;
}
