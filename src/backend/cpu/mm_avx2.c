/* AVX2 pieces of the matmul (mm.h), for x86-64 CPUs without AVX-512: the 16 canonical lanes are two ymm
 * registers (lanes 0-7 and 8-15), so the results equal the AVX-512 and scalar kernels' bit for bit. Decoders
 * for the common legacy blocks and F16/BF16; other types use the portable decoder (same values). */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#include "mm.h"

#include <immintrin.h>
#include <string.h>

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 8 bytes → 8 int32 lanes (zero- or sign-extended) */
static inline __m256i u8x8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
static inline __m256i i8x8(const uint8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

static void d_q4(const uint8_t *p, int64_t nb, float *y, bool has_min) {
    const __m256i m4 = _mm256_set1_epi32(0xF), c8 = _mm256_set1_epi32(has_min ? 0 : 8);
    const int bytes = has_min ? 20 : 18, qs = has_min ? 4 : 2;
    for (int64_t b = 0; b < nb; b++, p += bytes, y += 32) {
        const __m256 d = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(has_min ? h2f(p + 2) : 0.0f);
        for (int h = 0; h < 2; h++) {
            const __m256i v = u8x8(p + qs + 8 * h);
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, m4), c8));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), c8));
            if (has_min) {
                _mm256_storeu_ps(y + 8 * h, _mm256_add_ps(_mm256_mul_ps(lo, d), m));
                _mm256_storeu_ps(y + 16 + 8 * h, _mm256_add_ps(_mm256_mul_ps(hi, d), m));
            } else {
                _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(lo, d));
                _mm256_storeu_ps(y + 16 + 8 * h, _mm256_mul_ps(hi, d));
            }
        }
    }
}

static void d_q8_0(const uint8_t *p, int64_t nb, float *y) {
    for (int64_t b = 0; b < nb; b++, p += 34, y += 32) {
        const __m256 d = _mm256_set1_ps(h2f(p));
        for (int h = 0; h < 4; h++)
            _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(i8x8(p + 2 + 8 * h)), d));
    }
}

static void d_f16(const uint8_t *p, int64_t n, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
    for (; i < n; i++) y[i] = h2f(p + 2 * i);
}

static void d_bf16(const uint8_t *p, int64_t n, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        y[i] = weft_bf16_to_f32(h);
    }
}

static bool avx2_decode(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {
    if (W->dtype == WEFT_DT_MLX_AFFINE) return false;
    const int64_t K = weft_tensor_cols(W);
    const weft_dtype_info *info = weft_dtype_get(W->dtype);
    const uint8_t *p = W->data + (size_t)row * weft_dtype_row_bytes(W->dtype, K) +
                       (size_t)(k0 / info->block) * (size_t)info->block_bytes;
    const int64_t nb = kc / info->block;
    switch (W->dtype) {
    case WEFT_DT_F32:
        memcpy(out, p, (size_t)kc * 4);
        return true;
    case WEFT_DT_F16:
        d_f16(p, kc, out);
        return true;
    case WEFT_DT_BF16:
        d_bf16(p, kc, out);
        return true;
    case WEFT_DT_Q4_0:
        d_q4(p, nb, out, false);
        return true;
    case WEFT_DT_Q4_1:
        d_q4(p, nb, out, true);
        return true;
    case WEFT_DT_Q8_0:
        d_q8_0(p, nb, out);
        return true;
    default:
        return false;
    }
}

/* mm.h step 3 with lanes 0-7 in lo and 8-15 in hi */
static inline float tree16(__m256 lo, __m256 hi) {
    const __m256 a8 = _mm256_add_ps(lo, hi);
    const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

/* masks for a tail of t < 16 elements: lanes [0, t) of the 16 */
static inline void tail_masks(int t, __m256i *mlo, __m256i *mhi) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    *mlo = _mm256_cmpgt_epi32(_mm256_set1_epi32(t), idx);
    *mhi = _mm256_cmpgt_epi32(_mm256_set1_epi32(t - 8), idx);
}

/* one input row against the MM_MR weight rows */
static void tile_row(const float *const w[MM_MR], const float *x, int64_t kc, float *acc, bool init,
                     bool finish, float *y, int mr) {
    __m256 lo[MM_MR], hi[MM_MR];
    for (int i = 0; i < MM_MR; i++) {
        lo[i] = init ? _mm256_setzero_ps() : _mm256_load_ps(acc + i * MM_NR * 16);
        hi[i] = init ? _mm256_setzero_ps() : _mm256_load_ps(acc + i * MM_NR * 16 + 8);
    }
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
        for (int i = 0; i < MM_MR; i++) {
            lo[i] = _mm256_fmadd_ps(_mm256_loadu_ps(w[i] + k), x0, lo[i]);
            hi[i] = _mm256_fmadd_ps(_mm256_loadu_ps(w[i] + k + 8), x1, hi[i]);
        }
    }
    if (k < kc) {
        __m256i mlo, mhi;
        tail_masks((int)(kc - k), &mlo, &mhi);
        const __m256 x0 = _mm256_maskload_ps(x + k, mlo), x1 = _mm256_maskload_ps(x + k + 8, mhi);
        for (int i = 0; i < MM_MR; i++) {
            const __m256 f0 = _mm256_fmadd_ps(_mm256_maskload_ps(w[i] + k, mlo), x0, lo[i]);
            const __m256 f1 = _mm256_fmadd_ps(_mm256_maskload_ps(w[i] + k + 8, mhi), x1, hi[i]);
            lo[i] = _mm256_blendv_ps(lo[i], f0, _mm256_castsi256_ps(mlo));
            hi[i] = _mm256_blendv_ps(hi[i], f1, _mm256_castsi256_ps(mhi));
        }
    }
    for (int i = 0; i < MM_MR; i++) {
        if (finish) {
            if (i < mr) y[i] = tree16(lo[i], hi[i]);
        } else {
            _mm256_store_ps(acc + i * MM_NR * 16, lo[i]);
            _mm256_store_ps(acc + i * MM_NR * 16 + 8, hi[i]);
        }
    }
}

static void avx2_tile(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc,
                      float *acc, bool init, bool finish, float *y, int64_t ldy, int mr) {
    for (int r = 0; r < nr; r++) tile_row(w, x + r * ldx, kc, acc + r * 16, init, finish, y + r * ldy, mr);
}

static float avx2_dot(const float *a, const float *b, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), hi);
    }
    if (k < n) {
        __m256i mlo, mhi;
        tail_masks((int)(n - k), &mlo, &mhi);
        const __m256 f0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + k, mlo), _mm256_maskload_ps(b + k, mlo), lo);
        const __m256 f1 =
            _mm256_fmadd_ps(_mm256_maskload_ps(a + k + 8, mhi), _mm256_maskload_ps(b + k + 8, mhi), hi);
        lo = _mm256_blendv_ps(lo, f0, _mm256_castsi256_ps(mlo));
        hi = _mm256_blendv_ps(hi, f1, _mm256_castsi256_ps(mhi));
    }
    return tree16(lo, hi);
}

const weft_mm_isa weft_mm_avx2 = {"avx2", avx2_decode, avx2_tile, NULL, avx2_dot};

#endif
