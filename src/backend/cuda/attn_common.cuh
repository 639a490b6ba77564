// Pieces of the attention arithmetic shared by the decode kernel (attention.cu) and the prefill kernel
// (attention_flash.cu): both fold the same block partials with the same operations, so they give the same
// bits for a row.
#ifndef WEFT_ATTN_COMMON_CUH
#define WEFT_ATTN_COMMON_CUH

#include "cuda_kernels.h"

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

// Records 0 .. nb − 1 (1 <= nb <= WEFT_CU_ATTN_SPAN) of NC channels folded in ascending order from an empty
// fold into f; rec(u, i, m, l, o) gives channel u's record i. The records are loaded together first; the NC
// channels' folds are independent (interleaved for latency, each in its own order).
template <int NC, class Rec> __device__ __forceinline__ void attn_fold_recs(Rec rec, int nb, Fold (&f)[NC]) {
    constexpr int SPAN = WEFT_CU_ATTN_SPAN;
    float pm[NC][SPAN], pl[NC][SPAN], po[NC][SPAN];
#pragma unroll
    for (int u = 0; u < NC; u++)
#pragma unroll
        for (int i = 0; i < SPAN; i++) rec(u, min(i, nb - 1), pm[u][i], pl[u][i], po[u][i]);
#pragma unroll
    for (int u = 0; u < NC; u++) {
        f[u] = Fold{-INFINITY, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < SPAN; i++)
            if (i < nb) f[u].add(pm[u][i], pl[u][i], po[u][i]);
    }
}

// Records [b0, b0 + nb) (1 <= nb <= WEFT_CU_ATTN_SPAN; each [m, l, o[d]], stride d + 2, at base[u] for
// channel u of NC, head dim c[u]) folded as attn_fold_recs: one span's key blocks, or a row's span totals.
// The loads bypass L1 (__ldcg): the fused decode kernel reads records other blocks of its own grid wrote.
template <int NC>
__device__ __forceinline__ void attn_fold_span(const float *const (&base)[NC], int b0, int nb,
                                               const int (&c)[NC], int d, Fold (&f)[NC]) {
    attn_fold_recs<NC>(
        [&](int u, int i, float &m, float &l, float &o) {
            const float *p = base[u] + (size_t)(b0 + i) * (d + 2);
            m = __ldcg(p);
            l = __ldcg(p + 1);
            o = __ldcg(p + 2 + c[u]);
        },
        nb, f);
}

// The split-mode fold of NC (row, query head, head dim) channels over their key-block records (base[u]: one
// record per key block of channel u's row and head), nkeys the row's keys: each span's blocks fold in
// ascending order into the span (attn_fold_span), then the spans in ascending order into the total (a row of
// one span: that span's fold) — the folds the span kernel and the combine make in the unsplit mode, so either
// mode gives the same bits.
template <int NC>
__device__ __forceinline__ void attn_fold_blocks(const float *const (&base)[NC], int nkeys,
                                                 const int (&c)[NC], int d, Fold (&f)[NC]) {
    constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN;
    const int ns = (nkeys + SPAN * KB - 1) / (SPAN * KB), nblk = (nkeys + KB - 1) / KB;
#pragma unroll
    for (int u = 0; u < NC; u++) f[u] = Fold{-INFINITY, 0.0f, 0.0f};
    for (int s = 0; s < ns; s++) {
        Fold fs[NC];
        attn_fold_span<NC>(base, s * SPAN, min(nblk - s * SPAN, SPAN), c, d, fs);
#pragma unroll
        for (int u = 0; u < NC; u++) {
            if (ns == 1) {
                f[u] = fs[u];
            } else {
                f[u].add(fs[u].m, fs[u].l, fs[u].o);
            }
        }
    }
}

#endif
