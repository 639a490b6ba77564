/* Weights into device layouts (cuda_kernels.h): plain types copied as stored, GGUF Q4_0 repacked into the
 * 4-bit word layout with its fp16 scales, GGUF Q8_0 split into int8 values and fp16 scales, MLX affine
 * 4/8-bit copied as stored; 4-bit weights the tensor-core kernels take (WEFT_CU_Q4F) then have their words
 * permuted (weft_cu_q4f_pack) and their scales and biases put in tile order (weft_cu_q4f_pack_scales).
 * Nothing is re-quantised: the device decodes exactly the values the CPU decoders give. */
#include "cuda_internal.h"

#include "weft/cpu.h"

#include <stdlib.h>
#include <string.h>

weft_status cu_fail(weft_err *err, cudaError_t e, const char *what) {
    return weft_err_set(err, e == cudaErrorMemoryAllocation ? WEFT_ENOMEM : WEFT_EINTERNAL, "cuda: %s: %s",
                        what, cudaGetErrorString(e));
}

weft_status cu_alloc(cu_allocs *a, void **out, size_t bytes, const char *what, weft_err *err) {
    *out = NULL;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        void **p = realloc(a->ptr, cap * sizeof *p);
        if (!p) return weft_err_set(err, WEFT_ENOMEM, "out of host memory recording device allocations");
        a->ptr = p;
        a->cap = cap;
    }
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed cudaMalloc leaves its error as the last error: clear it */
        return weft_err_set(err, WEFT_ENOMEM, "cuda: cannot allocate %zu bytes of device memory for %s: %s",
                            bytes, what, cudaGetErrorString(e));
    }
    a->ptr[a->n++] = *out;
    a->bytes += bytes;
    return WEFT_OK;
}

void cu_free_all(cu_allocs *a) {
    for (size_t i = 0; i < a->n; i++) cudaFree(a->ptr[i]);
    free(a->ptr);
    memset(a, 0, sizeof *a);
}

static weft_cu_sdt sdt_of(weft_dtype t, bool *ok) {
    *ok = true;
    switch (t) {
    case WEFT_DT_F32:
        return WEFT_CU_S_F32;
    case WEFT_DT_F16:
        return WEFT_CU_S_F16;
    case WEFT_DT_BF16:
        return WEFT_CU_S_BF16;
    default:
        *ok = false;
        return WEFT_CU_S_F32;
    }
}

weft_status cu_weight_plan(const weft_tensor *t, int64_t rows, int64_t cols, weft_cu_weight *w,
                           weft_err *err) {
    memset(w, 0, sizeof *w);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return weft_err_set(err, WEFT_EFORMAT,
                            "tensor %s: shape [%lld, %lld] expected, found %d-D [%lld, %lld]", t->name,
                            (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
                            (long long)(t->ndim > 1 ? t->shape[1] : 0));
    if (cols % 32)
        return weft_err_set(err, WEFT_ENOTSUP,
                            "cuda backend: tensor %s has %lld columns, not a multiple of 32", t->name,
                            (long long)cols);
    w->rows = rows;
    w->cols = cols;
    bool ok = true;
    switch (t->dtype) {
    case WEFT_DT_F32:
        w->kind = WEFT_CU_F32;
        break;
    case WEFT_DT_F16:
        w->kind = WEFT_CU_F16;
        break;
    case WEFT_DT_BF16:
        w->kind = WEFT_CU_BF16;
        break;
    case WEFT_DT_Q4_0:
        w->kind = WEFT_CU_Q4;
        w->mode = WEFT_CU_OFF8;
        w->sdt = WEFT_CU_S_F16;
        w->group = 32;
        break;
    case WEFT_DT_Q8_0:
        w->kind = WEFT_CU_Q8;
        w->mode = WEFT_CU_SYM;
        w->sdt = WEFT_CU_S_F16;
        w->group = 32;
        break;
    case WEFT_DT_MLX_AFFINE:
        if (t->bits != 4 && t->bits != 8)
            return weft_err_set(err, WEFT_ENOTSUP,
                                "cuda backend: tensor %s is MLX %d-bit (4 and 8 are supported)", t->name,
                                t->bits);
        if (t->group_size < 32 || (t->group_size & (t->group_size - 1)) || cols % t->group_size)
            return weft_err_set(err, WEFT_ENOTSUP, "cuda backend: tensor %s has MLX group size %d", t->name,
                                t->group_size);
        w->kind = t->bits == 4 ? WEFT_CU_Q4 : WEFT_CU_Q8;
        w->mode = WEFT_CU_AFFINE;
        w->sdt = sdt_of(t->scale_dtype, &ok);
        w->group = t->group_size;
        if (!ok)
            return weft_err_set(err, WEFT_ENOTSUP, "cuda backend: tensor %s has MLX scales of dtype %s",
                                t->name, weft_dtype_get(t->scale_dtype)->name);
        break;
    default:
        return weft_err_set(err, WEFT_ENOTSUP,
                            "cuda backend: tensor %s has dtype %s, which the CUDA kernels do not read "
                            "yet (F32, F16, BF16, Q4_0, Q8_0, MLX affine 4/8-bit)",
                            t->name, weft_dtype_get(t->dtype)->name);
    }
    /* 4-bit weights whose shape the tensor-core kernel takes go to its fragment order (WEFT_CU_Q4F). */
    if (w->kind == WEFT_CU_Q4 && weft_cu_q4f_ok(rows, cols, w->group)) w->kind = WEFT_CU_Q4F;
    w->bytes = weft_cu_weight_bytes(w->kind, w->mode, w->sdt, w->group, rows, cols);
    return WEFT_OK;
}

/* Q4_0 block {fp16 d; qs[16]}: qs[j] low nibble = element j, high nibble = element j + 16. Device: 4 words
 * per block, element e at bits 4(e%8) of word e/8; scales separate. */
static void repack_q4_0(const uint8_t *src, int64_t n_blocks, uint32_t *q, uint16_t *s) {
    for (int64_t bi = 0; bi < n_blocks; bi++) {
        const uint8_t *b = src + bi * 18;
        s[bi] = (uint16_t)(b[0] | b[1] << 8);
        uint8_t v[32];
        for (int j = 0; j < 16; j++) {
            v[j] = b[2 + j] & 15;
            v[j + 16] = b[2 + j] >> 4;
        }
        for (int w = 0; w < 4; w++) {
            uint32_t word = 0;
            for (int nib = 0; nib < 8; nib++) word |= (uint32_t)v[8 * w + nib] << (4 * nib);
            q[bi * 4 + w] = word;
        }
    }
}

/* Q8_0 block {fp16 d; int8 qs[32]}. */
static void repack_q8_0(const uint8_t *src, int64_t n_blocks, int8_t *q, uint16_t *s) {
    for (int64_t bi = 0; bi < n_blocks; bi++) {
        const uint8_t *b = src + bi * 34;
        s[bi] = (uint16_t)(b[0] | b[1] << 8);
        memcpy(q + bi * 32, b + 2, 32);
    }
}

static weft_status copy_up(void *dst, const void *src, size_t bytes, weft_err *err) {
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copying weights to the device");
    return WEFT_OK;
}

/* A 4-bit weight's scales (or biases) [rows, cols/group], sbytes in all, to dst: in WEFT_CU_Q4F's tile order
 * (weft_cu_q4f_pack_scales) for that layout, else as they are. */
static weft_status copy_up_scales(const weft_cu_weight *w, void *dst, const void *src, size_t sbytes,
                                  const char *name, weft_err *err) {
    if (w->kind != WEFT_CU_Q4F) return copy_up(dst, src, sbytes, err);
    void *perm = malloc(sbytes);
    if (!perm)
        return weft_err_set(err, WEFT_ENOMEM, "out of host memory repacking %s's scales (%zu bytes)", name,
                            sbytes);
    weft_cu_q4f_pack_scales(src, w->rows, w->cols, w->group, w->sdt == WEFT_CU_S_F32 ? 4 : 2, perm);
    const weft_status st = copy_up(dst, perm, sbytes, err);
    free(perm);
    return st;
}

weft_status cu_weight_upload(const weft_tensor *t, weft_cu_weight *w, cu_allocs *a, weft_err *err) {
    const size_t n = (size_t)w->rows * (size_t)w->cols;
    weft_status st;
    if (w->kind == WEFT_CU_F32 || w->kind == WEFT_CU_F16 || w->kind == WEFT_CU_BF16) {
        if (t->nbytes < w->bytes)
            return weft_err_set(err, WEFT_EFORMAT, "tensor %s: %zu bytes stored, %zu expected", t->name,
                                t->nbytes, w->bytes);
        if ((st = cu_alloc(a, &w->q, w->bytes, t->name, err))) return st;
        return copy_up(w->q, t->data, w->bytes, err);
    }
    const size_t ng = n / (size_t)w->group, ssz = w->sdt == WEFT_CU_S_F32 ? 4 : 2;
    const size_t qbytes = w->kind == WEFT_CU_Q8 ? n : n / 2, sbytes = ng * ssz;
    if ((st = cu_alloc(a, &w->q, qbytes, t->name, err))) return st;
    if ((st = cu_alloc(a, &w->s, sbytes, t->name, err))) return st;
    if (t->dtype == WEFT_DT_MLX_AFFINE) {
        if ((st = cu_alloc(a, &w->b, sbytes, t->name, err))) return st;
        if (w->kind == WEFT_CU_Q4F) {
            uint32_t *perm = malloc(qbytes);
            if (!perm)
                return weft_err_set(err, WEFT_ENOMEM, "out of host memory repacking %s (%zu bytes)", t->name,
                                    qbytes);
            weft_cu_q4f_pack(t->data, w->rows, w->cols, perm);
            st = copy_up(w->q, perm, qbytes, err);
            free(perm);
        } else {
            st = copy_up(w->q, t->data, qbytes, err);
        }
        if (st) return st;
        if ((st = copy_up_scales(w, w->s, t->scales, sbytes, t->name, err))) return st;
        return copy_up_scales(w, w->b, t->biases, sbytes, t->name, err);
    }
    const size_t block_bytes = t->dtype == WEFT_DT_Q4_0 ? 18 : 34;
    if (t->nbytes < ng * block_bytes)
        return weft_err_set(err, WEFT_EFORMAT, "tensor %s: %zu bytes stored, %zu expected", t->name,
                            t->nbytes, ng * block_bytes);
    const bool q4f = w->kind == WEFT_CU_Q4F;
    uint8_t *tmp = malloc(qbytes + sbytes + (q4f ? qbytes : 0));
    if (!tmp)
        return weft_err_set(err, WEFT_ENOMEM, "out of host memory repacking %s (%zu bytes)", t->name, qbytes);
    if (t->dtype == WEFT_DT_Q4_0)
        repack_q4_0(t->data, (int64_t)ng, (uint32_t *)(void *)tmp, (uint16_t *)(void *)(tmp + qbytes));
    else
        repack_q8_0(t->data, (int64_t)ng, (int8_t *)tmp, (uint16_t *)(void *)(tmp + qbytes));
    const uint8_t *q = tmp;
    if (q4f) {
        uint32_t *perm = (uint32_t *)(void *)(tmp + qbytes + sbytes);
        weft_cu_q4f_pack(tmp, w->rows, w->cols, perm);
        q = (const uint8_t *)perm;
    }
    st = copy_up(w->q, q, qbytes, err);
    if (!st) st = copy_up_scales(w, w->s, tmp + qbytes, sbytes, t->name, err);
    free(tmp);
    return st;
}

/* One 4-bit tensor's rows on the host in the WEFT_CU_Q4 word order [rows, cols/8] with its scales (and
 * biases) [rows, cols/group]: GGUF Q4_0 repacked into `own`, MLX affine read where it is stored. */
typedef struct q4_rows {
    const uint8_t *q, *s, *b;
    void *own;
} q4_rows;

static weft_status q4_rows_of(const weft_tensor *t, const weft_cu_weight *w, q4_rows *h, weft_err *err) {
    memset(h, 0, sizeof *h);
    const size_t n = (size_t)t->shape[0] * (size_t)w->cols, ng = n / (size_t)w->group;
    if (t->dtype == WEFT_DT_MLX_AFFINE) {
        h->q = t->data;
        h->s = t->scales;
        h->b = t->biases;
        return WEFT_OK;
    }
    if (t->nbytes < ng * 18)
        return weft_err_set(err, WEFT_EFORMAT, "tensor %s: %zu bytes stored, %zu expected", t->name,
                            t->nbytes, ng * 18);
    uint8_t *own = malloc(n / 2 + ng * 2);
    if (!own) return weft_err_set(err, WEFT_ENOMEM, "out of host memory repacking %s", t->name);
    repack_q4_0(t->data, (int64_t)ng, (uint32_t *)(void *)own, (uint16_t *)(void *)(own + n / 2));
    h->own = own;
    h->q = own;
    h->s = own + n / 2;
    return WEFT_OK;
}

weft_status cu_weight_upload_cat(const weft_tensor *const *parts, int n_parts, bool interleave8,
                                 weft_cu_weight *w, cu_allocs *a, weft_err *err) {
    const size_t R = (size_t)w->rows, rowb = (size_t)w->cols / 2, ssz = w->sdt == WEFT_CU_S_F32 ? 4 : 2;
    const size_t sb = (size_t)w->cols / (size_t)w->group * ssz;
    const bool affine = w->mode == WEFT_CU_AFFINE;
    q4_rows h[3] = {{0}};
    uint8_t *words = malloc(R * rowb), *perm = malloc(R * rowb), *sc = malloc(R * sb);
    uint8_t *bi = affine ? malloc(R * sb) : NULL;
    weft_status st = WEFT_OK;
    if (!words || !perm || !sc || (affine && !bi) || n_parts < 1 || n_parts > 3)
        st = weft_err_set(err, WEFT_ENOMEM, "out of host memory fusing %s (%zu rows)", parts[0]->name, R);
    for (int p = 0; p < n_parts && !st; p++) st = q4_rows_of(parts[p], w, &h[p], err);
    for (size_t r = 0; r < R && !st; r++) {
        /* fused row r <- (part p, its row pr): rows one part after another, or gate/up interleaved by 8 */
        int p = 0;
        size_t pr = r;
        if (interleave8) {
            p = (r % 16) < 8 ? 0 : 1;
            pr = 8 * (r / 16) + r % 8;
        } else {
            while (p < n_parts - 1 && pr >= (size_t)parts[p]->shape[0]) pr -= (size_t)parts[p++]->shape[0];
        }
        memcpy(words + r * rowb, h[p].q + pr * rowb, rowb);
        memcpy(sc + r * sb, h[p].s + pr * sb, sb);
        if (affine) memcpy(bi + r * sb, h[p].b + pr * sb, sb);
    }
    if (!st) {
        weft_cu_q4f_pack(words, w->rows, w->cols, (uint32_t *)(void *)perm);
        st = cu_alloc(a, &w->q, R * rowb, parts[0]->name, err);
        if (!st) st = cu_alloc(a, &w->s, R * sb, parts[0]->name, err);
        if (!st && affine) st = cu_alloc(a, &w->b, R * sb, parts[0]->name, err);
        if (!st) st = copy_up(w->q, perm, R * rowb, err);
        if (!st) st = copy_up_scales(w, w->s, sc, R * sb, parts[0]->name, err);
        if (!st && affine) st = copy_up_scales(w, w->b, bi, R * sb, parts[0]->name, err);
    }
    for (int p = 0; p < 3; p++) free(h[p].own);
    free(words);
    free(perm);
    free(sc);
    free(bi);
    return st;
}

weft_status cu_vec_upload(const weft_tensor *t, int64_t n, float **out, cu_allocs *a, weft_err *err) {
    *out = NULL;
    if (!t) return WEFT_OK;
    float *h = weft_tensor_to_f32(t, n, err);
    if (!h) return err ? err->code : WEFT_EFORMAT;
    weft_status st = cu_alloc(a, (void **)out, (size_t)n * sizeof(float), t->name, err);
    if (!st) st = copy_up(*out, h, (size_t)n * sizeof(float), err);
    free(h);
    return st;
}
