/* The int8-limb form of fp32 activations, and the value of a 4-bit weight row times one block of it: a
 * proposed integer definition of the CUDA backend's 4-bit matmuls (bench/NOTES.md session 6, "A proposal for
 * the 4-bit arithmetic"). Defined here ahead of the kernels that would use it; today it is read by
 * tests/unit/test_i8limb.c (the definition's properties on the CPU) and bench/cuda/imma_probe.cu (whether
 * mma.sync m16n8k32 .u8.s8 computes it on the GPU, bit for bit). Plain C usable from CUDA (WEFT_HD).
 *
 * A block is WEFT_I8L_N = 32 consecutive elements x_i of one activation row. With m = max |x_i| and e =
 * ilogb(m) (e = 0 for an all-zero block), y_i = x_i·2^(5−e) (exact: |y_i| < 64), and three signed limbs:
 *   d0 = rint(y), y' = 128·(y − d0), d1 = rint(y'), y'' = 128·(y' − d1), d2 = rint(y'')
 * (rint: to nearest, ties to even; every subtraction is exact, every limb is in [−64, 64]), so that
 *   x_i = 2^(e−5)·(d0 + d1·2^−7 + d2·2^−14) + err_i,  |err_i| ≤ 2^(e−20) ≤ 2^−20·m.
 * A weight row's integer values a_i (4-bit q_i, Q4_0 and MLX alike: the −8 is applied through the limb sums)
 * meet the limbs in exact integer dot products P_l = Σ q_i·d_l,i − 8·Σ d_l,i (|P_l| ≤ 32·15·64 + 8·32·64),
 * and the block's value is v = 2^(e−5)·f with f = (float)P0 + ((float)P1 + (float)P2·2^−7)·2^−7: two
 * roundings, in this order (the multiplications by powers of two are exact, so contraction into fma cannot
 * change f). A block holding an inf or NaN has no limbs (all zero) and the value NaN.
 */
#ifndef WEFT_I8LIMB_H
#define WEFT_I8LIMB_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define WEFT_HD __host__ __device__
#else
#define WEFT_HD
#endif

#define WEFT_I8L_N     32 /* elements per block */
#define WEFT_I8L_LIMBS 3

typedef struct weft_i8l_block {
    int8_t d[WEFT_I8L_LIMBS][WEFT_I8L_N]; /* limb l of element i, each in [−64, 64] */
    int32_t sum[WEFT_I8L_LIMBS];          /* Σ_i d[l][i] */
    int32_t e;                            /* the block's exponent (the header's e) */
    int32_t nonfinite;                    /* 1: an element was inf or NaN (limbs zero, values NaN) */
} weft_i8l_block;

/* Splits x [WEFT_I8L_N] (fp32, any values) into b. */
WEFT_HD static inline void weft_i8l_split(const float *x, weft_i8l_block *b) {
    float m = 0.0f;
    int bad = 0;
    for (int i = 0; i < WEFT_I8L_N; i++) {
        const float a = fabsf(x[i]);
        if (!(a <= 3.40282346638528859812e+38f))
            bad = 1; /* inf or NaN */
        else if (a > m)
            m = a;
    }
    b->nonfinite = bad;
    b->e = (m > 0.0f && !bad) ? ilogbf(m) : 0;
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) b->sum[l] = 0;
    for (int i = 0; i < WEFT_I8L_N; i++) {
        float y = bad ? 0.0f : ldexpf(x[i], 5 - b->e);
        for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
            const float dl = rintf(y);
            b->d[l][i] = (int8_t)dl;
            b->sum[l] += (int32_t)dl;
            y = (y - dl) * 128.0f;
        }
    }
}

/* The value of a block product from its limb dot products P [WEFT_I8L_LIMBS] (the −8 already applied). */
WEFT_HD static inline float weft_i8l_value(const int32_t *P, int32_t e, int32_t nonfinite) {
    if (nonfinite) return nanf("");
    float f = (float)P[1] + (float)P[2] * 0x1p-7f;
    f = (float)P[0] + f * 0x1p-7f;
    return ldexpf(f, e - 5);
}

#endif
