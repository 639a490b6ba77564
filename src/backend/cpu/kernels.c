/* Row-invariant fp32 kernels: dot, matmul over any stored weight type, RMSNorm. */
#include "weft/cpu.h"

#include <stdlib.h>
#include <string.h>

float weft_dot(const float *a, const float *b, int64_t n) {
    /* 8 interleaved partial sums (vectorisable without reassociation), then a fixed pairwise tree. */
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

typedef struct matmul_job {
    const weft_tensor *W;
    const float *X;
    int64_t n_rows, in, out, ldy;
    float *Y;
    int64_t rows_per_task;
} matmul_job;

static void matmul_task(void *ctx, int64_t task, float *scratch) {
    const matmul_job *j = ctx;
    int64_t o0 = task * j->rows_per_task, o1 = o0 + j->rows_per_task;
    if (o1 > j->out) o1 = j->out;
    for (int64_t o = o0; o < o1; o++) {
        const float *w;
        if (j->W->dtype == WEFT_DT_F32) {
            w = (const float *)(j->W->data + (size_t)o * (size_t)j->in * 4);
        } else {
            weft_tensor_dequant_row(j->W, o, scratch, NULL);
            w = scratch;
        }
        for (int64_t i = 0; i < j->n_rows; i++) j->Y[i * j->ldy + o] = weft_dot(w, j->X + i * j->in, j->in);
    }
}

void weft_matmul(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y, int64_t ldy) {
    matmul_job j = {W, X, n_rows, weft_tensor_cols(W), weft_tensor_rows(W), ldy, Y, 0};
    /* Task size only changes which thread computes a row, never how: results do not depend on it. */
    int64_t tasks = (int64_t)weft_pool_threads(p) * 8;
    j.rows_per_task = (j.out + tasks - 1) / tasks;
    if (j.rows_per_task < 4) j.rows_per_task = 4;
    weft_pool_run(p, (j.out + j.rows_per_task - 1) / j.rows_per_task, matmul_task, &j);
}

void weft_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * inv);
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv;
}

float *weft_tensor_to_f32(const weft_tensor *t, int64_t n, weft_err *err) {
    if (weft_tensor_numel(t) != n) {
        weft_err_set(err, WEFT_EFORMAT, "tensor %s: expected %lld elements, found %lld", t->name,
                     (long long)n, (long long)weft_tensor_numel(t));
        return NULL;
    }
    float *out = malloc((size_t)n * sizeof(float));
    if (!out) {
        weft_err_set(err, WEFT_ENOMEM, "out of memory decoding %s", t->name);
        return NULL;
    }
    int64_t cols = weft_tensor_cols(t), rows = weft_tensor_rows(t);
    for (int64_t r = 0; r < rows; r++) {
        if (weft_tensor_dequant_row(t, r, out + r * cols, err) != WEFT_OK) {
            free(out);
            return NULL;
        }
    }
    return out;
}
