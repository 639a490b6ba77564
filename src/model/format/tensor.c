/* Tensor sets (name → tensor, open addressing) and the per-dtype row decoder dispatch. */
#include "weft/tensor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const weft_dtype_info DTYPES[WEFT_DT_COUNT] = {
    [WEFT_DT_F32] = {"F32", 1, 4},
    [WEFT_DT_F16] = {"F16", 1, 2},
    [WEFT_DT_BF16] = {"BF16", 1, 2},
    [WEFT_DT_F64] = {"F64", 1, 8},
    [WEFT_DT_I64] = {"I64", 1, 8},
    [WEFT_DT_I32] = {"I32", 1, 4},
    [WEFT_DT_I16] = {"I16", 1, 2},
    [WEFT_DT_I8] = {"I8", 1, 1},
    [WEFT_DT_U32] = {"U32", 1, 4},
    [WEFT_DT_U16] = {"U16", 1, 2},
    [WEFT_DT_U8] = {"U8", 1, 1},
    [WEFT_DT_BOOL] = {"BOOL", 1, 1},
    [WEFT_DT_Q4_0] = {"Q4_0", 32, 18},
    [WEFT_DT_Q4_1] = {"Q4_1", 32, 20},
    [WEFT_DT_Q5_0] = {"Q5_0", 32, 22},
    [WEFT_DT_Q5_1] = {"Q5_1", 32, 24},
    [WEFT_DT_Q8_0] = {"Q8_0", 32, 34},
    [WEFT_DT_Q2_K] = {"Q2_K", 256, 84},
    [WEFT_DT_Q3_K] = {"Q3_K", 256, 110},
    [WEFT_DT_Q4_K] = {"Q4_K", 256, 144},
    [WEFT_DT_Q5_K] = {"Q5_K", 256, 176},
    [WEFT_DT_Q6_K] = {"Q6_K", 256, 210},
    [WEFT_DT_MLX_AFFINE] = {"MLX_AFFINE", 0, 0},
};

const weft_dtype_info *weft_dtype_get(weft_dtype t) {
    if ((int)t < 0 || t >= WEFT_DT_COUNT) return NULL;
    return &DTYPES[t];
}

int64_t weft_tensor_numel(const weft_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t weft_dtype_row_bytes(weft_dtype t, int64_t cols) {
    const weft_dtype_info *d = weft_dtype_get(t);
    if (!d || d->block == 0 || cols < 0 || cols % d->block) return 0;
    return (size_t)(cols / d->block) * (size_t)d->block_bytes;
}

weft_status weft_tensor_dequant_row(const weft_tensor *t, int64_t row, float *out, weft_err *err) {
    int64_t cols = weft_tensor_cols(t);
    if (row < 0 || row >= weft_tensor_rows(t))
        return weft_err_set(err, WEFT_ERANGE, "tensor %s: row %lld out of range", t->name, (long long)row);
    if (t->dtype == WEFT_DT_MLX_AFFINE) {
        weft_mlx_dequant_row(t, row, out);
        return WEFT_OK;
    }
    size_t rb = weft_dtype_row_bytes(t->dtype, cols);
    const uint8_t *src = t->data + (size_t)row * rb;
    switch (t->dtype) {
    case WEFT_DT_F32:
        memcpy(out, src, (size_t)cols * 4);
        return WEFT_OK;
    case WEFT_DT_F16:
        for (int64_t i = 0; i < cols; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = weft_f16_to_f32(h);
        }
        return WEFT_OK;
    case WEFT_DT_BF16:
        for (int64_t i = 0; i < cols; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = weft_bf16_to_f32(h);
        }
        return WEFT_OK;
    case WEFT_DT_Q4_0:
    case WEFT_DT_Q4_1:
    case WEFT_DT_Q5_0:
    case WEFT_DT_Q5_1:
    case WEFT_DT_Q8_0:
    case WEFT_DT_Q2_K:
    case WEFT_DT_Q3_K:
    case WEFT_DT_Q4_K:
    case WEFT_DT_Q5_K:
    case WEFT_DT_Q6_K:
        weft_ggml_dequant(t->dtype, src, out, cols);
        return WEFT_OK;
    default:
        break;
    }
    return weft_err_set(err, WEFT_ENOTSUP, "tensor %s: dtype %s cannot be decoded as weights", t->name,
                        weft_dtype_get(t->dtype) ? weft_dtype_get(t->dtype)->name : "?");
}

/* ---- tensor sets ---- */

typedef struct owned {
    void *addr;
    size_t len; /* 0 = heap memory */
} owned;

struct weft_tensor_set {
    weft_tensor *items; /* [count] */
    size_t count, cap;
    int64_t *slots; /* [nslots] index into items, -1 empty */
    size_t nslots;
    owned *own;
    size_t nown, capown;
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

weft_tensor_set *weft_tensor_set_new(void) {
    return calloc(1, sizeof(weft_tensor_set));
}

void weft_tensor_set_free(weft_tensor_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->count; i++) free((void *)s->items[i].name);
    for (size_t i = 0; i < s->nown; i++) {
        if (s->own[i].len)
            munmap(s->own[i].addr, s->own[i].len);
        else
            free(s->own[i].addr);
    }
    free(s->items);
    free(s->slots);
    free(s->own);
    free(s);
}

static int64_t find_slot(const weft_tensor_set *s, const char *name) {
    if (!s->nslots) return -1;
    size_t m = s->nslots - 1, i = (size_t)hash_name(name) & m;
    for (;;) {
        int64_t k = s->slots[i];
        if (k < 0) return -(int64_t)i - 2; /* empty slot i */
        if (strcmp(s->items[k].name, name) == 0) return (int64_t)i;
        i = (i + 1) & m;
    }
}

static int rehash(weft_tensor_set *s, size_t nslots) {
    int64_t *slots = malloc(nslots * sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < nslots; i++) slots[i] = -1;
    free(s->slots);
    s->slots = slots;
    s->nslots = nslots;
    for (size_t k = 0; k < s->count; k++) {
        size_t i = (size_t)hash_name(s->items[k].name) & (nslots - 1);
        while (slots[i] >= 0) i = (i + 1) & (nslots - 1);
        slots[i] = (int64_t)k;
    }
    return 0;
}

weft_status weft_tensor_set_add(weft_tensor_set *s, const weft_tensor *t, weft_err *err) {
    if (!t->name) return weft_err_set(err, WEFT_EINVAL, "tensor without a name");
    if (weft_tensor_set_get(s, t->name))
        return weft_err_set(err, WEFT_EFORMAT, "duplicate tensor name %s", t->name);
    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        weft_tensor *items = realloc(s->items, cap * sizeof *items);
        if (!items) return weft_err_set(err, WEFT_ENOMEM, "out of memory adding tensor %s", t->name);
        s->items = items;
        s->cap = cap;
    }
    char *name = strdup(t->name);
    if (!name) return weft_err_set(err, WEFT_ENOMEM, "out of memory adding tensor %s", t->name);
    s->items[s->count] = *t;
    s->items[s->count].name = name;
    s->count++;
    if (s->count * 2 > s->nslots) {
        if (rehash(s, s->nslots ? s->nslots * 2 : 128)) {
            s->count--;
            free(name);
            return weft_err_set(err, WEFT_ENOMEM, "out of memory indexing tensor %s", t->name);
        }
    } else {
        int64_t slot = find_slot(s, name);
        s->slots[-slot - 2] = (int64_t)(s->count - 1);
    }
    return WEFT_OK;
}

weft_tensor *weft_tensor_set_get_mut(weft_tensor_set *s, const char *name) {
    int64_t slot = find_slot(s, name);
    return slot >= 0 ? &s->items[s->slots[slot]] : NULL;
}

const weft_tensor *weft_tensor_set_get(const weft_tensor_set *s, const char *name) {
    return weft_tensor_set_get_mut((weft_tensor_set *)s, name);
}

size_t weft_tensor_set_count(const weft_tensor_set *s) {
    return s->count;
}
const weft_tensor *weft_tensor_set_at(const weft_tensor_set *s, size_t i) {
    return i < s->count ? &s->items[i] : NULL;
}

/* O(1): the last item moves into the hole (order is not part of the contract), and the hash slot is freed by
 * backward-shift deletion so that linear probing stays correct without tombstones. */
void weft_tensor_set_remove(weft_tensor_set *s, const char *name) {
    int64_t slot = find_slot(s, name);
    if (slot < 0) return;
    size_t k = (size_t)s->slots[slot], last = s->count - 1, m = s->nslots - 1;
    free((void *)s->items[k].name);
    size_t i = (size_t)slot;
    s->slots[i] = -1;
    for (size_t j = (i + 1) & m; s->slots[j] >= 0; j = (j + 1) & m) {
        size_t home = (size_t)hash_name(s->items[s->slots[j]].name) & m;
        /* can the entry at j move back to the hole at i? only if its home is not in (i, j] cyclically */
        bool in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (in_range) continue;
        s->slots[i] = s->slots[j];
        s->slots[j] = -1;
        i = j;
    }
    if (k != last) {
        s->items[k] = s->items[last];
        int64_t moved = find_slot(s, s->items[k].name);
        s->slots[moved] = (int64_t)k;
    }
    s->count--;
}

static void own_push(weft_tensor_set *s, void *addr, size_t len) {
    if (s->nown == s->capown) {
        size_t cap = s->capown ? s->capown * 2 : 8;
        owned *o = realloc(s->own, cap * sizeof *o);
        if (!o) return; /* leak rather than crash; only on OOM */
        s->own = o;
        s->capown = cap;
    }
    s->own[s->nown++] = (owned){addr, len};
}

void weft_tensor_set_own_mapping(weft_tensor_set *s, void *addr, size_t len) {
    own_push(s, addr, len);
}
void weft_tensor_set_own_memory(weft_tensor_set *s, void *p) {
    if (p) own_push(s, p, 0);
}

size_t weft_tensor_set_bytes(const weft_tensor_set *s) {
    size_t n = 0;
    for (size_t i = 0; i < s->count; i++) {
        const weft_tensor *t = &s->items[i];
        n += t->nbytes;
        if (t->dtype == WEFT_DT_MLX_AFFINE) {
            size_t groups = (size_t)(weft_tensor_numel(t) / t->group_size);
            size_t es = (size_t)weft_dtype_get(t->scale_dtype)->block_bytes;
            n += 2 * groups * es;
        }
    }
    return n;
}
