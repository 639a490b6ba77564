/* Internal to weft_kernels: attention's canonical arithmetic and the per-ISA pieces that implement it.
 *
 * For one query row (position P) and one query head (q, d floats), keys t = 0..P of its kv head:
 *   blocks of ATT_BLOCK keys aligned to absolute positions: block b = [64b, min(64b+63, P)];
 *   per block:  s_t = dot(q, K_t) · scale       (dot: the matmul's 16-lane fma order and tree, mm.h)
 *               m_b = max_t s_t;  p_t = exp_c(s_t − m_b)
 *               l_b = tree16 of 16 lanes, lane u = Σ p_t over t ≡ u (mod 16) in t order (plain adds from +0)
 *               o_b[i] = Σ_t p_t·V_t[i] in t order (o = fma(p_t, V_t[i], o) from +0)
 *   blocks merge in order into super-blocks of ATT_SUPER keys (also aligned to absolute positions), and the
 *   super-blocks merge in order: the first part is taken as is, then (M, L, O) ⊕ (m, l, o):
 *               M' = max(M, m);  a = exp_c(M − M');  c = exp_c(m − M')
 *               L = fma(L, a, l·c);  O[i] = fma(O[i], a, o[i]·c);  M = M'
 *   out[i] = O[i] / L.
 * exp_c is the polynomial below (not libm's expf), so that vector and scalar code compute the same bits.
 * Nothing depends on the other rows, on how many there are, on how a prompt is cut into chunks (the blocks
 * are fixed by absolute positions) or on which thread computes which part (SPEC §4.3.1). Super-blocks are
 * what a long context's keys split into across threads when there are few rows. */
#ifndef WEFT_CPU_ATT_H
#define WEFT_CPU_ATT_H

#include "weft/cpu.h"

#include <string.h>

#define ATT_BLOCK 64
#define ATT_SUPER 1024
#define ATT_GC    4 /* query heads of one kv head processed together (K and V rows loaded once) */

typedef struct weft_att_isa {
    /* The partial of super-block [t0, t1) (t0 a multiple of ATT_SUPER, 0 < t1 − t0 <= ATT_SUPER) for g <=
     * ATT_GC query heads q[0..g) against one kv head (K_t at K + t·kvs, V_t likewise): per head M[h], L[h],
     * O[h·d..]. ws: 2·ATT_BLOCK·ATT_GC floats of scratch. */
    void (*sblock)(const float *const *q, int g, const float *K, const float *V, int64_t kvs, int d,
                   float scale, int t0, int t1, float *M, float *L, float *O, float *ws);
    /* (M, L, O[d]) ⊕= (m, l, o[d]) as above */
    void (*merge)(float *M, float *L, float *O, float m, float l, const float *o, int d);
} weft_att_isa;

extern const weft_att_isa weft_att_scalar;
#if defined(__x86_64__)
extern const weft_att_isa weft_att_avx512;
#endif

/* exp_c(x): 0 below −86.5 (so results stay normal) and for NaN; x clamped to 88; n = nearest-even(x·log2e),
 * r = x − n·ln2 in two fma steps (Cephes constants), degree-6 polynomial by fma (Cephes expf), times 2^n. */
#define EXPC_LOG2E 1.44269504088896341f
#define EXPC_C1    0.693359375f
#define EXPC_C2    -2.12194440e-4f
#define EXPC_P0    1.9875691500e-4f
#define EXPC_P1    1.3981999507e-3f
#define EXPC_P2    8.3334519073e-3f
#define EXPC_P3    4.1665795894e-2f
#define EXPC_P4    1.6666665459e-1f
#define EXPC_P5    5.0000001201e-1f

static inline float weft_exp_c(float x) {
    if (!(x >= -86.5f)) return 0.0f;
    if (x > 88.0f) x = 88.0f;
    const float n = nearbyintf(x * EXPC_LOG2E);
    float r = fmaf(n, -EXPC_C1, x);
    r = fmaf(n, -EXPC_C2, r);
    float p = EXPC_P0;
    p = fmaf(p, r, EXPC_P1);
    p = fmaf(p, r, EXPC_P2);
    p = fmaf(p, r, EXPC_P3);
    p = fmaf(p, r, EXPC_P4);
    p = fmaf(p, r, EXPC_P5);
    p = fmaf(p, r * r, r);
    p = p + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, 4);
    return p * s;
}

/* the merge step's scalars: (M, L) and the factors a, c for O */
static inline void weft_att_merge_scalars(float *M, float *L, float m, float l, float *a, float *c) {
    const float Mn = *M > m ? *M : m;
    *a = weft_exp_c(*M - Mn);
    *c = weft_exp_c(m - Mn);
    *L = fmaf(*L, *a, l * *c);
    *M = Mn;
}

#endif
