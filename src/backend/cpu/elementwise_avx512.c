/* AVX-512 elementwise pieces (ew.h), the scalar code's operations on 16 lanes. Compiled for AVX-512 with a
 * target pragma and only called after __builtin_cpu_supports said yes. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")
#include "ew.h"
#include "mm_avx512.h"

void weft_swiglu_avx512(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 e = weft_avx512_exp_c(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f))); /* −x */
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

#endif
