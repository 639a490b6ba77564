/* AVX-512 register tile (MM_MR weight rows × up to MM_NR input rows on decoded fp32 panels) and dot product,
 * in the canonical order of mm.h. Compiled for AVX-512 with a target pragma and only called after
 * __builtin_cpu_supports said yes. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")
#include "mm_avx512.h"

static inline __attribute__((always_inline)) void tile_nr(const float *const w[MM_MR], const float *x,
                                                          int64_t ldx, const int nr, int64_t kc, float *acc,
                                                          bool init, bool finish, float *y, int64_t ldy,
                                                          int mr) {
    __m512 a[MM_MR][MM_NR];
#pragma GCC unroll 4
    for (int i = 0; i < MM_MR; i++)
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++)
            a[i][r] = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (i * MM_NR + r) * 16);
    const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        const __m512 v0 = _mm512_loadu_ps(w0 + k), v1 = _mm512_loadu_ps(w1 + k), v2 = _mm512_loadu_ps(w2 + k),
                     v3 = _mm512_loadu_ps(w3 + k);
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m512 xv = _mm512_loadu_ps(x + r * ldx + k);
            a[0][r] = _mm512_fmadd_ps(v0, xv, a[0][r]);
            a[1][r] = _mm512_fmadd_ps(v1, xv, a[1][r]);
            a[2][r] = _mm512_fmadd_ps(v2, xv, a[2][r]);
            a[3][r] = _mm512_fmadd_ps(v3, xv, a[3][r]);
        }
    }
    if (k < kc) { /* lanes with no k left keep their value (mask3: unchanged where the mask is clear) */
        const __mmask16 m = (__mmask16)((1u << (kc - k)) - 1);
        const __m512 v0 = _mm512_maskz_loadu_ps(m, w0 + k), v1 = _mm512_maskz_loadu_ps(m, w1 + k),
                     v2 = _mm512_maskz_loadu_ps(m, w2 + k), v3 = _mm512_maskz_loadu_ps(m, w3 + k);
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * ldx + k);
            a[0][r] = _mm512_mask3_fmadd_ps(v0, xv, a[0][r], m);
            a[1][r] = _mm512_mask3_fmadd_ps(v1, xv, a[1][r], m);
            a[2][r] = _mm512_mask3_fmadd_ps(v2, xv, a[2][r], m);
            a[3][r] = _mm512_mask3_fmadd_ps(v3, xv, a[3][r], m);
        }
    }
    if (finish) {
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m128 v = weft_avx512_tree16x4(a[0][r], a[1][r], a[2][r], a[3][r]);
            if (mr == MM_MR)
                _mm_storeu_ps(y + r * ldy, v);
            else
                _mm_mask_storeu_ps(y + r * ldy, (__mmask8)((1u << mr) - 1), v);
        }
    } else {
#pragma GCC unroll 4
        for (int i = 0; i < MM_MR; i++)
#pragma GCC unroll 6
            for (int r = 0; r < nr; r++) _mm512_store_ps(acc + (i * MM_NR + r) * 16, a[i][r]);
    }
}

void weft_avx512_tile(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc,
                      float *acc, bool init, bool finish, float *y, int64_t ldy, int mr) {
    switch (nr) {
    case 1:
        tile_nr(w, x, ldx, 1, kc, acc, init, finish, y, ldy, mr);
        break;
    case 2:
        tile_nr(w, x, ldx, 2, kc, acc, init, finish, y, ldy, mr);
        break;
    case 3:
        tile_nr(w, x, ldx, 3, kc, acc, init, finish, y, ldy, mr);
        break;
    case 4:
        tile_nr(w, x, ldx, 4, kc, acc, init, finish, y, ldy, mr);
        break;
    case 5:
        tile_nr(w, x, ldx, 5, kc, acc, init, finish, y, ldy, mr);
        break;
    default:
        tile_nr(w, x, ldx, 6, kc, acc, init, finish, y, ldy, mr);
        break;
    }
}

float weft_avx512_dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc, m);
    }
    return weft_avx512_tree16(acc);
}

#endif
