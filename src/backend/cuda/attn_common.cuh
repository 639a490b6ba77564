// Pieces of the attention arithmetic shared by the decode kernel (attention.cu) and the prefill kernel
// (attention_flash.cu): both fold the same block partials with the same operations, so they give the same
// bits for a row.
#ifndef WEFT_ATTN_COMMON_CUH
#define WEFT_ATTN_COMMON_CUH

#include <math.h>

// (m, l, o) ⊕ (m2, l2, o2): m' = max(m, m2), ca = 2^(m−m'), cb = 2^(m2−m'), l' = l·ca + l2·cb, o' = o·ca +
// o2·cb (m in base 2: the scores are scaled by log2 e, attn_mma.cuh). FoldScale is the (m', ca, cb) step, for
// callers that fold many o with one (m, l) (the prefill kernel's rows).
struct FoldScale {
    float mn, ca, cb;
    __device__ __forceinline__ float mix(float a, float b) const {
        return __fadd_rn(__fmul_rn(a, ca), __fmul_rn(b, cb));
    }
};

__device__ __forceinline__ FoldScale fold_scale(float m, float m2) {
    const float mn = fmaxf(m, m2);
    return FoldScale{mn, exp2f(__fsub_rn(m, mn)), exp2f(__fsub_rn(m2, mn))};
}

struct Fold {
    float m, l, o;
    __device__ __forceinline__ void add(float m2, float l2, float o2) {
        const FoldScale f = fold_scale(m, m2);
        l = f.mix(l, l2);
        o = f.mix(o, o2);
        m = f.mn;
    }
};

#endif
