// Pieces of the attention arithmetic shared by the decode kernel (attention.cu) and the prefill kernel
// (attention_flash.cu): both fold the same block partials with the same operations, so they give the same
// bits for a row.
#ifndef WEFT_ATTN_COMMON_CUH
#define WEFT_ATTN_COMMON_CUH

#include <math.h>

// (m, l, o) ⊕ (m2, l2, o2): m' = max(m, m2), ca = 2^(m−m'), cb = 2^(m2−m'), l' = l·ca + l2·cb, o' = o·ca +
// o2·cb (m in base 2: the scores are scaled by log2 e, attn_mma.cuh).
struct Fold {
    float m, l, o;
    __device__ __forceinline__ void add(float m2, float l2, float o2) {
        const float mn = fmaxf(m, m2), ca = exp2f(__fsub_rn(m, mn)), cb = exp2f(__fsub_rn(m2, mn));
        l = __fadd_rn(__fmul_rn(l, ca), __fmul_rn(l2, cb));
        o = __fadd_rn(__fmul_rn(o, ca), __fmul_rn(o2, cb));
        m = mn;
    }
};

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

#endif
