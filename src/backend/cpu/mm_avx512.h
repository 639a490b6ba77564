/* Internal to the AVX-512 kernels (include after the target pragma): helpers both files use. */
#ifndef WEFT_CPU_MM_AVX512_H
#define WEFT_CPU_MM_AVX512_H

#include "att.h"
#include "mm.h"

#include <immintrin.h>

/* mm.h step 3: lanes (j, j+8), then (j, j+4), then (0,2)+(1,3) */
static inline float weft_avx512_tree16(__m512 v) {
    const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

/* step 3 on four accumulators at once, the same additions as four weft_avx512_tree16 calls: the sums of a,
 * b, c, d in lanes 0-3 */
static inline __m128 weft_avx512_tree16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
    /* (j, j+8): 256-bit halves */
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    /* (j, j+4): 128-bit quarters; a4 of a, b, c, d in quarters 0..3 */
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    /* (0,2), (1,3), then the two */
    const __m512 r2 = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
    const __m512 r1 = _mm512_add_ps(r2, _mm512_permute_ps(r2, 0xB1));
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r1));
}

/* att.h's exp_c on 16 lanes, the same operations in the same order (needs att.h's constants) */
static inline __m512 weft_avx512_exp_c(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-86.5f), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXPC_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-EXPC_C1), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-EXPC_C2), r);
    __m512 p = _mm512_set1_ps(EXPC_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXPC_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXPC_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXPC_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXPC_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXPC_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(e));
}

void weft_avx512_tile(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc,
                      float *acc, bool init, bool finish, float *y, int64_t ldy, int mr);
float weft_avx512_dot(const float *a, const float *b, int64_t n);

#endif
