/* The int8-limb form of fp32 activations, and the value of a 4-bit weight row times one block of it: a
 * proposed integer definition of the CUDA backend's 4-bit matmuls (bench/NOTES.md session 6, "A proposal for
 * the 4-bit arithmetic"). Defined here ahead of the kernels that would use it; today it is read by
 * tests/unit/test_i8limb.c (the definition's properties on the CPU), bench/cuda/imma_probe.cu (whether
 * mma.sync m16n8k32 .u8.s8 computes it on the GPU, bit for bit: it does, on the H200, session 7) and the
 * experimental one-row kernel mma_i8.cu. Plain C usable from CUDA (WEFT_HD).
 *
 * A block is WEFT_I8L_N = 32 consecutive elements x_i of one activation row. With m = max |x_i| and e =
 * max(ilogb(m), WEFT_I8L_EMIN) (e = WEFT_I8L_EMIN for an all-zero block), y_i = x_i·2^(5−e) (exact, |y_i| <
 * 64), and three signed limbs: d0 = rint(y), y' = 128·(y − d0), d1 = rint(y'), y'' = 128·(y' − d1), d2 =
 * rint(y'') (rint: to nearest, ties to even; every subtraction is exact; every limb is in [−64, 64]). With
 * the integer c_i = (d0·128 + d1)·128 + d2 (|c_i| ≤ 1,056,832), x_i = 2^(e−19)·c_i + err_i,  |err_i| ≤
 * 2^(e−20) ≤ 2^−20·m   (bf16 hi + lo: ≤ 2^−17·|x_i|). A weight row's 4-bit values q_i meet a block in one
 * exact integer, whatever the order of its parts: P = Σ q_i·c_i − 8·Σ c_i   (Q4_0's q − 8; |P| ≤
 * 8·32·1,056,832 = 270,548,992, and the joined Σ q_i·c_i before the −8·Σc ≤ 507,279,360 < 2^31) computed on
 * tensor cores as three int8 dot products P_l = Σ q_i·d_l,i (mma .u8.s8, int32 accumulate) joined as (P0·128
 * + P1)·128 + P2, less 8·sum (sum = Σ c_i, kept with the block). The block's value is v = (float)P · 2^(e−19)
 * — one rounding (the conversion); 2^(e−19) is a normal float for e in [EMIN, 127] and the product of a
 * nonzero integer and it stays normal, so the multiplication is exact. Summation over blocks and the scales'
 * fold stay in fp32 in a fixed order (the kernels' business). A block holding an inf or NaN has zero limbs
 * and the value NaN.
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
#define WEFT_I8L_EMIN  -100 /* smallest block exponent: 2^(EMIN − 19) is a normal float */

typedef struct weft_i8l_block {
    int8_t d[WEFT_I8L_LIMBS][WEFT_I8L_N]; /* limb l of element i, each in [−64, 64] */
    int32_t sum;                          /* Σ_i c_i, c_i = (d0·128 + d1)·128 + d2 */
    int32_t e;                            /* the block's exponent, in [WEFT_I8L_EMIN, 127] */
    int32_t nonfinite;                    /* 1: an element was inf or NaN (limbs zero, values NaN) */
} weft_i8l_block;

/* (P0·128 + P1)·128 + P2: three limb quantities (dot products or sums) joined into one integer. */
WEFT_HD static inline int32_t weft_i8l_join(int32_t p0, int32_t p1, int32_t p2) {
    return (p0 * 128 + p1) * 128 + p2;
}

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
    int e = WEFT_I8L_EMIN;
    if (m > 0.0f && !bad && ilogbf(m) > e) e = ilogbf(m);
    b->nonfinite = bad;
    b->e = e;
    b->sum = 0;
    for (int i = 0; i < WEFT_I8L_N; i++) {
        float y = bad ? 0.0f : ldexpf(x[i], 5 - e);
        int32_t c[WEFT_I8L_LIMBS];
        for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
            const float dl = rintf(y);
            b->d[l][i] = (int8_t)dl;
            c[l] = (int32_t)dl;
            y = (y - dl) * 128.0f;
        }
        b->sum += weft_i8l_join(c[0], c[1], c[2]);
    }
}

#if defined(__CUDACC__)
/* c += A·B on int8 tensor cores (sm_80+): mma.sync m16n8k32 .s32.u8.s8, A = unsigned 4-bit values (a0..a3 in
 * the PTX ISA's m16n8k32 8-bit A layout), B = limb bytes, c exact int32 (the kernels' and the probe's step).
 */
__device__ __forceinline__ void weft_i8l_mma(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

/* The value of a block product P (the header's P: limbs joined, 8·sum taken off for Q4_0). */
WEFT_HD static inline float weft_i8l_value(int32_t P, int32_t e, int32_t nonfinite) {
    if (nonfinite) return nanf("");
    return (float)P * ldexpf(1.0f, e - 19);
}

#endif
