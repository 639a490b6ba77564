/* Row-invariant fp32 kernels: RMSNorm, 1-D tensor decoding (matmul and dot live in matmul.c). */
#include "weft/cpu.h"

#include <stdlib.h>
#include <string.h>

void weft_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    /* Σ x² in the canonical dot order (16 fma lanes, fixed tree): vectorised, and the same on every ISA */
    const float ss = weft_dot(x, x, n);
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
