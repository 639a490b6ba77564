// The arithmetic of one key block of the attention on bf16 tensor cores, shared by the decode kernel
// (attention.cu) and the prefill kernel (attention_flash.cu), so a row gets the same bits from either.
//
// For a warp's m-tile of 16 query row-heads and the KB = 32 keys t0 .. t0+31 of one kv head (mma.sync
// m16n8k16, bf16 in, fp32 accumulate; g = lane / 4, t = lane % 4, the PTX ISA's fragment layouts):
//   each fp32 operand x is split into hi = bf16(x) and lo = bf16(x − hi) (x − hi is exact in fp32; hi + lo
//   is x to 2^-17 relative), and a product a·b is taken as hi·hi + (hi·lo + lo·hi): the first term in one
//   accumulator, the two small terms in another, added once at the end (per element error ≈ 2^-16 of |a·b|,
//   the same hi/lo scheme as the 4-bit matmul's activations);
//   s = (big + small)·(scale·log2 e) over the head dims (k steps of 16 in order: scores in base 2, so every
//   exponential is one exp2f), keys past the row's position (or any key, for a padded row) masked to −∞;
//   m_b = max over the block's 32 keys (exact in any order), p = 2^(s − m_b) (0 when masked),
//   l_b = Σ p: the lane's 8 values in order (n-tile 0..3, column 2t then 2t + 1), then the quad's xor tree
//   (1, then 2);
//   o_b = P·V with the same split of p and v, per 8-dim n-tile of the output, keys in k steps of 16 in order.
// F16 (--activations f16): every operand is rounded to f16 instead (q4_f16_clamp, nearest even) and a product
// is the one f16 tensor-core term hi·hi (lo = 0: the small-term mma are skipped, and (big + 0) is big), the
// rest as above; the kernels of one call all take the same F16.
// Every output element of an mma depends only on its own row and column, so a row's (m_b, l_b, o_b) do not
// depend on which slot of the m-tile it sits in or on the other rows (bench_cuda_attention checks the decode
// and prefill kernels against each other bit for bit). The block partials then fold as attn_common.cuh says.
#ifndef WEFT_ATTN_MMA_CUH
#define WEFT_ATTN_MMA_CUH

#include "attn_common.cuh"
#include "kv_cache.cuh"
#include "q4_mma.cuh"

#include <stdint.h>

// hi = bf16x2(RN(a), RN(b)), lo = bf16x2(RN(a − hi_a), RN(b − hi_b)); a in the low half. F16: hi = the f16
// pair of the saturated values (q4_pack_f16x2), lo = 0.
template <bool F16 = false>
__device__ __forceinline__ void attn_split(float a, float b, uint32_t &hi, uint32_t &lo) {
    if constexpr (F16) {
        hi = q4_pack_f16x2(q4_f16_clamp(a), q4_f16_clamp(b));
        lo = 0u;
    } else {
        hi = q4_pack_bf16x2(a, b);
        lo = q4_pack_bf16x2(__fsub_rn(a, __uint_as_float(hi << 16)),
                            __fsub_rn(b, __uint_as_float(hi & 0xffff0000u)));
    }
}

// A key block's per-row results for the lane's two rows of the m-tile (r = 0: row g, r = 1: row g + 8).
struct AttnBlock {
    float m[2], l[2];
};

// The middle of a key block's step on the scaled scores p (element i of n-tile nt: row g + 8·(i / 2), key t0
// + 8nt + 2t + i % 2; the accumulator layout of mma.sync's n-tiles and of a wgmma's n8 blocks alike): keys
// past pos[r] masked, the rows' m_b and l_b, p = 2^(s − m_b) in place, and P as A fragments split as
// attn_split (k step kk: keys 16kk .. = n-tiles 2kk (a0, a1) and 2kk + 1 (a2, a3)). attn_block and the wgmma
// form (attn_wgmma.cuh) both call it, so both give these bits.
// FULL: the caller knows that every key of the block is visible to both rows (t0 + KB − 1 <= pos[r]): the
// mask is skipped (it would keep every score), and a score of −∞ (only from infinite operands) gets its p =
// +0 from exp2f(−∞ − m) = +0 (CUDA's exp2f: exp2f(−∞) = +0) rather than from a test per score: with m finite
// that is the +0 the test gave; a row whose scores are all −∞ (m = −∞: −∞ − −∞ would be NaN) subtracts 0
// instead, so its p are +0 as before; NaN and +∞ scores give what they gave (exp2f(NaN) = NaN, exp2f(+∞ − +∞)
// = NaN).
template <bool F16, bool FULL = false>
__device__ __forceinline__ AttnBlock attn_softmax(float (&p)[4][4], const int pos[2], int t0,
                                                  uint32_t (&ph)[2][4], uint32_t (&pl)[2][4]) {
    const int t = threadIdx.x & 3;
    AttnBlock blk;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int i = 2 * r + c;
                if constexpr (!FULL) {
                    const bool valid = t0 + 8 * nt + 2 * t + c <= pos[r];
                    p[nt][i] = valid ? p[nt][i] : -INFINITY;
                }
                mx = fmaxf(mx, p[nt][i]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float l = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int i = 2 * r + c;
                if constexpr (FULL)
                    p[nt][i] = exp2f(__fsub_rn(p[nt][i], mx == -INFINITY ? 0.0f : mx)); // (above)
                else
                    p[nt][i] = p[nt][i] == -INFINITY ? 0.0f : exp2f(__fsub_rn(p[nt][i], mx));
                l = __fadd_rn(l, p[nt][i]);
            }
        l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
        l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
        blk.m[r] = mx;
        blk.l[r] = l;
    }
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        attn_split<F16>(p[2 * kk][0], p[2 * kk][1], ph[kk][0], pl[kk][0]);
        attn_split<F16>(p[2 * kk][2], p[2 * kk][3], ph[kk][1], pl[kk][1]);
        attn_split<F16>(p[2 * kk + 1][0], p[2 * kk + 1][1], ph[kk][2], pl[kk][2]);
        attn_split<F16>(p[2 * kk + 1][2], p[2 * kk + 1][3], ph[kk][3], pl[kk][3]);
    }
    return blk;
}

// The block step. src supplies the operand fragments as hi/lo words (see SmemSrc / the decode kernel; F16:
// the hi words alone, from src.q1, src.k2h, src.v2h):
//   src.q(ks, qh[4], ql[4])    A of Q for head dims 16ks .. 16ks+15 (a0..a3 of m16n8k16);
//   src.k2(ks, np, kh[4], kl[4])  B of Kᵀ for those dims and the keys of n-tiles 2np, 2np + 1 (t0 + 16np ..
//                                 t0 + 16np + 15): b0, b1 of the first, then of the second;
//   src.v2(nt, vh[4], vl[4])   B of V for dims 8nt .. 8nt+7: b0, b1 for keys t0 .. t0+15, then t0+16 .. +31.
// pos[r]: the last key position row r may see (−1: a padded row, every key masked). d: head dims (a multiple
// of 16, ≤ DMAX). Calls out.begin(blk) with the rows' m_b and l_b, then out.tile(nt, o) for each 8-dim n-tile
// of o_b (o[0], o[1]: row g, dims 8nt + 2t, +1; o[2], o[3]: row g + 8). A row without a visible key gets
// m = −∞ and l = 0 (its o is meaningless; callers skip it).
// FULL (attn_softmax's): only when every row of the warp sees all KB keys (t0 + KB − 1 <= pos[r] for both
// rows of every lane): the mask is then skipped. nw_share warps may compute the same block together: each
// computes the scores (the same bits) and the n-tiles nt ≡ w_share (mod nw_share) of o_b. With SHARED_SCORES
// (nw_share >= 4 warps that are the whole thread block; sx: shared memory [16][32] floats), warp w_share < 4
// computes only the scores of n-tile w_share and every warp reads all of them back: each score is the same
// mma sequence on the same operands whichever warp computes it, so the bits are those of the redundant form.
// The SHARED_SCORES form contains two block barriers; the other form none (warps may compute different key
// blocks).
template <int DMAX, class Src, class Out, bool SHARED_SCORES = false, bool F16 = false, bool FULL = false>
__device__ __forceinline__ void attn_block(const Src &src, const int pos[2], int t0, int d, float scale,
                                           Out &out, int w_share = 0, int nw_share = 1, float *sx = nullptr) {
    const int lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2;
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); // scale·log2 e
    // The unmasked scores s = (big + small)·(scale·log2 e) (element i of n-tile nt: row g + 8·(i / 2), key
    // 8nt + 2t + i % 2).
    float p[4][4];
    if (!SHARED_SCORES) {
        // sb starts at +0.0 in registers (q4_mma0 at ks = 0 computes the same, but raised the f16 decode span
        // kernel from 80 to 96 registers: 2 blocks per SM instead of 3, 16-row attention 0.026 -> 0.035 ms).
        // ss (fp32 mode) is written first by q4_mma0 at ks = 0 (d >= 16), so its zeroing looks dead, but it
        // stays: without it ptxas gives the fp32 kernels more registers (span kernels <64> 97 -> 117, <32> 95
        // -> 118) and the 4-warp fp32 tile kernel a 64-byte spill (session 20 review, /work/review-s20.md).
        float sb[4][4], ss[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) sb[nt][i] = ss[nt][i] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < DMAX / 16; ks++) {
            if (ks * 16 >= d) break;
            uint32_t qh[4], ql[4];
            if constexpr (F16)
                src.q1(ks, qh);
            else
                src.q(ks, qh, ql);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t kh[4], kl[4];
                if constexpr (F16)
                    src.k2h(ks, np, kh);
                else
                    src.k2(ks, np, kh, kl);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int nt = 2 * np + h;
                    q4_mma<F16>(sb[nt], qh[0], qh[1], qh[2], qh[3], kh[2 * h], kh[2 * h + 1]);
                    if constexpr (!F16) {
                        if (ks == 0)
                            q4_mma0(ss[nt], qh[0], qh[1], qh[2], qh[3], kl[2 * h], kl[2 * h + 1]);
                        else
                            q4_mma(ss[nt], qh[0], qh[1], qh[2], qh[3], kl[2 * h], kl[2 * h + 1]);
                        q4_mma(ss[nt], ql[0], ql[1], ql[2], ql[3], kh[2 * h], kh[2 * h + 1]);
                    }
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                p[nt][i] = __fmul_rn(F16 ? sb[nt][i] : __fadd_rn(sb[nt][i], ss[nt][i]), sl2);
    } else {
        // Warp w_share < 4: n-tile w_share only (the same three mma per k step as above), into sx.
        __syncthreads(); // the previous key block's readers are done with sx
        if (w_share < 4) {
            const int np = w_share >> 1, h = w_share & 1;
            float sb[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ks = 0; ks < DMAX / 16; ks++) {
                if (ks * 16 >= d) break;
                uint32_t qh[4], ql[4], kh[4], kl[4];
                if constexpr (F16) {
                    src.q1(ks, qh);
                    src.k2h(ks, np, kh);
                } else {
                    src.q(ks, qh, ql);
                    src.k2(ks, np, kh, kl);
                }
                const uint32_t bh0 = h ? kh[2] : kh[0], bh1 = h ? kh[3] : kh[1];
                q4_mma<F16>(sb, qh[0], qh[1], qh[2], qh[3], bh0, bh1);
                if constexpr (!F16) {
                    const uint32_t bl0 = h ? kl[2] : kl[0], bl1 = h ? kl[3] : kl[1];
                    q4_mma(ss, qh[0], qh[1], qh[2], qh[3], bl0, bl1);
                    q4_mma(ss, ql[0], ql[1], ql[2], ql[3], bh0, bh1);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                sx[(g + 8 * (i / 2)) * 32 + 8 * w_share + 2 * t + i % 2] =
                    __fmul_rn(F16 ? sb[i] : __fadd_rn(sb[i], ss[i]), sl2);
        }
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) p[nt][i] = sx[(g + 8 * (i / 2)) * 32 + 8 * nt + 2 * t + i % 2];
    }
    uint32_t ph[2][4], pl[2][4];
    const AttnBlock blk = attn_softmax<F16, FULL>(p, pos, t0, ph, pl);
    out.begin(blk);
#pragma unroll
    for (int nt = 0; nt < DMAX / 8; nt++) {
        if (nt * 8 >= d) break;
        if (nw_share > 1 && nt % nw_share != w_share) continue;
        float ob[4], os[4]; // from +0.0 (q4_mma0 at kk = 0)
        uint32_t vh[4], vl[4];
        if constexpr (F16)
            src.v2h(nt, vh);
        else
            src.v2(nt, vh, vl);
        q4_mma0<F16>(ob, ph[0][0], ph[0][1], ph[0][2], ph[0][3], vh[0], vh[1]);
        q4_mma<F16>(ob, ph[1][0], ph[1][1], ph[1][2], ph[1][3], vh[2], vh[3]);
        if constexpr (!F16) {
            q4_mma0(os, ph[0][0], ph[0][1], ph[0][2], ph[0][3], vl[0], vl[1]);
            q4_mma(os, pl[0][0], pl[0][1], pl[0][2], pl[0][3], vh[0], vh[1]);
            q4_mma(os, ph[1][0], ph[1][1], ph[1][2], ph[1][3], vl[2], vl[3]);
            q4_mma(os, pl[1][0], pl[1][1], pl[1][2], pl[1][3], vh[2], vh[3]);
        }
        float o[4];
#pragma unroll
        for (int i = 0; i < 4; i++) o[i] = F16 ? ob[i] : __fadd_rn(ob[i], os[i]);
        out.tile(nt, o);
    }
}

// Operands staged in shared memory as hi and lo planes of bf16 pairs (u32 words):
//   Q [16 rows of the warp][QS words]: row-major, head dims in pairs; QS = d/2 + 4 (≡ 4 mod 8 for d % 16 ==
//   0: the 32 lanes of a fragment load hit 32 banks); K [KB keys][QS words]: the same layout (B of Kᵀ is K
//   row-major); Vt [d][VS words]: V transposed, keys in pairs, VS = KB/2 + 4 = 20 (conflict-free likewise).
constexpr int kAttnVS = WEFT_CU_ATTN_KB / 2 + 4;

// u32 words of one key block's K and Vᵀ hi/lo planes in shared memory (SmemSrc, AttnKV) for d head dims.
__host__ __device__ constexpr int attn_kv_words(int d) {
    return 2 * WEFT_CU_ATTN_KB * (d / 2 + 4) + 2 * d * kAttnVS;
}

// ldmatrix .x4 of b16 8×8 matrices: lane l gives the address of row l % 8 of matrix l / 8; lane (g, t) gets
// elements (g, 2t), (g, 2t + 1) of each matrix, i.e. the m16n8k16 fragments when the rows are A's rows or B's
// columns (PTX ISA, "Matrix fragments for mma.m16n8k16").
__device__ __forceinline__ void attn_ldm4(const uint32_t *p, uint32_t r[4]) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// ldmatrix .x4 .trans: lane (g, t) gets elements (2t, g), (2t + 1, g) of each matrix — from row-major V
// [keys][dims], the B fragments of V that attn_ldm4 gives from Vᵀ.
__device__ __forceinline__ void attn_ldm4t(const uint32_t *p, uint32_t r[4]) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// The Q planes (both kernels stage Q in shared memory), offset to the warp's first row. Row addresses are
// 16-byte aligned (qs % 4 == 0) and 8 rows hit 32 distinct banks (qs ≡ 4 mod 8).
struct AttnQ {
    const uint32_t *qh, *ql;
    int qs; // QS (words per Q and K row)
    __device__ __forceinline__ void q(int ks, uint32_t a[4], uint32_t b[4]) const {
        const int lane = threadIdx.x & 31, o = (lane & 15) * qs + 8 * ks + 4 * (lane >> 4);
        attn_ldm4(qh + o, a); // matrices: rows 0-7 / 8-15 of dims 0-7, then of dims 8-15 = a0, a1, a2, a3
        attn_ldm4(ql + o, b);
    }
    __device__ __forceinline__ void q1(int ks, uint32_t a[4]) const { // the hi plane alone (F16)
        const int lane = threadIdx.x & 31;
        attn_ldm4(qh + (lane & 15) * qs + 8 * ks + 4 * (lane >> 4), a);
    }
};

// K and V staged in shared memory too (the prefill kernel and split-mode decode: warps share them).
struct SmemSrc : AttnQ {
    const uint32_t *kh, *kl, *vh, *vl;
    __device__ __forceinline__ void k2(int ks, int np, uint32_t h[4], uint32_t l[4]) const {
        // matrices: keys 16np + 0-7 at dims 0-7, 8-15, then keys 16np + 8-15 at dims 0-7, 8-15
        const int lane = threadIdx.x & 31,
                  o = (16 * np + 8 * (lane >> 4) + (lane & 7)) * qs + 8 * ks + 4 * ((lane >> 3) & 1);
        attn_ldm4(kh + o, h);
        attn_ldm4(kl + o, l);
    }
    __device__ __forceinline__ void v2(int nt, uint32_t h[4], uint32_t l[4]) const {
        // matrices: dims 8nt + 0-7 (rows of Vᵀ) at keys 0-7, 8-15, 16-23, 24-31
        const int lane = threadIdx.x & 31, o = (8 * nt + (lane & 7)) * kAttnVS + 4 * (lane >> 3);
        attn_ldm4(vh + o, h);
        attn_ldm4(vl + o, l);
    }
    // the hi planes alone (F16: the lo planes are not staged)
    __device__ __forceinline__ void k2h(int ks, int np, uint32_t h[4]) const {
        const int lane = threadIdx.x & 31;
        attn_ldm4(kh + (16 * np + 8 * (lane >> 4) + (lane & 7)) * qs + 8 * ks + 4 * ((lane >> 3) & 1), h);
    }
    __device__ __forceinline__ void v2h(int nt, uint32_t h[4]) const {
        const int lane = threadIdx.x & 31;
        attn_ldm4(vh + (8 * nt + (lane & 7)) * kAttnVS + 4 * (lane >> 3), h);
    }
};

// F16 operands with V staged as the cache holds it (row-major [KB keys][QS words], like K) instead of as the
// Vᵀ plane: v2h reads the same B fragments with ldmatrix .trans (the same f16 values in the same fragment
// slots, so the same bits). The decode kernel's span form copies K and V rows from the cache into shared
// memory with cp.async, untouched.
struct SmemSrcVRows : SmemSrc {
    __device__ __forceinline__ void v2h(int nt, uint32_t h[4]) const {
        // matrices: keys 0-7, 8-15, 16-23, 24-31 (lane l: key l) at dims 8nt .. 8nt + 7 (words 4nt ..)
        attn_ldm4t(vh + (threadIdx.x & 31) * qs + 4 * nt, h);
    }
};

// A key block's partials for the G heads into shared memory: mb, lb [G], ob [G][d].
struct BlockOut {
    float *mb, *lb, *ob;
    int G, d;
    bool ml; // this warp stores mb, lb (warps sharing a block compute the same values)
    __device__ __forceinline__ void begin(const AttnBlock &b) {
        const int lane = threadIdx.x & 31, g = lane >> 2;
        if ((lane & 3) != 0 || !ml) return;
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (g + 8 * r < G) {
                mb[g + 8 * r] = b.m[r];
                lb[g + 8 * r] = b.l[r];
            }
    }
    __device__ __forceinline__ void tile(int nt, const float o[4]) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (g + 8 * r < G)
                *reinterpret_cast<float2 *>(ob + (g + 8 * r) * d + 8 * nt + 2 * t) =
                    make_float2(o[2 * r], o[2 * r + 1]);
    }
};

// Stages 8 consecutive fp32 values (two float4) as hi and lo words at word offset w of the two planes (F16:
// the f16 words into the hi plane; the lo plane is not read).
template <bool F16 = false>
__device__ __forceinline__ void attn_stage8(uint32_t *hi, uint32_t *lo, int w, float4 a, float4 b) {
    uint4 h, l;
    attn_split<F16>(a.x, a.y, h.x, l.x);
    attn_split<F16>(a.z, a.w, h.y, l.y);
    attn_split<F16>(b.x, b.y, h.z, l.z);
    attn_split<F16>(b.z, b.w, h.w, l.w);
    *reinterpret_cast<uint4 *>(hi + w) = h;
    if constexpr (!F16) *reinterpret_cast<uint4 *>(lo + w) = l;
}

// The K rows and Vᵀ columns of the key block t0 .. t0 + KB − 1 of one kv head (K, V: its column 0 at position
// 0, rows kvd elements apart; F16: an f16 cache, kv_cache.cuh) staged as hi/lo planes (SmemSrc's layout),
// keys past `last` as zeros, by the block's NT threads: load_k / load_v put every load of the thread in
// flight (32-byte reads of fp32, 16-byte of f16), store_k / store_v split and store them (an f16 cache's
// words are already the hi words attn_split<true> makes: they are stored as loaded, V's interleaved by key
// pair). A caller with registers to spare loads both before storing either (one memory round trip). set_key
// replaces one key's loaded values (the fused decode kernel's new key, which it stores into the cache in the
// same launch and so must not read back from there).
template <int DMAX, int NT, bool F16 = false> struct AttnKV {
    using E = KvElem<F16>;
    static constexpr int KB = WEFT_CU_ATTN_KB, KI = (KB * (DMAX / 8) + NT - 1) / NT,
                         VI = (KB / 2 * (DMAX / 8) + NT - 1) / NT;
    static constexpr int NW = F16 ? 1 : 2; // 16-byte words per 8 values of a key row
    uint4 k[KI][NW], v[VI][2][NW];         // cache words as loaded: v[u][kk] = key 2kp + kk
    __device__ __forceinline__ static void load8(uint4 (&dst)[NW], const E *s) {
#pragma unroll
        for (int h = 0; h < NW; h++) dst[h] = reinterpret_cast<const uint4 *>(s)[h];
    }
    __device__ __forceinline__ void load_k(const E *K, int kvd, int t0, int last, int d) {
        const int d8 = d / 8;
#pragma unroll
        for (int u = 0; u < KI; u++) {
            const int i = threadIdx.x + u * NT, key = i / d8, c = i % d8;
#pragma unroll
            for (int h = 0; h < NW; h++) k[u][h] = make_uint4(0u, 0u, 0u, 0u);
            if (i < KB * d8 && t0 + key <= last) load8(k[u], K + (size_t)(t0 + key) * kvd + 8 * c);
        }
    }
    __device__ __forceinline__ void store_k(uint32_t *kh, uint32_t *kl, int qs, int d) const {
        const int d8 = d / 8;
#pragma unroll
        for (int u = 0; u < KI; u++) {
            const int i = threadIdx.x + u * NT, w = (i / d8) * qs + 4 * (i % d8);
            if (i >= KB * d8) continue;
            if constexpr (F16)
                *reinterpret_cast<uint4 *>(kh + w) = k[u][0];
            else
                attn_stage8<false>(kh, kl, w, as_float4(k[u][0]), as_float4(k[u][1]));
        }
    }
    // V: a thread takes a key pair and 8 dims: word (dim, pair) of Vᵀ = (v[key 2kp][dim], v[2kp + 1][dim])
    __device__ __forceinline__ void load_v(const E *V, int kvd, int t0, int last, int d) {
        const int d8 = d / 8;
#pragma unroll
        for (int u = 0; u < VI; u++) {
            const int i = threadIdx.x + u * NT, kp = i % (KB / 2), c = i / (KB / 2), k0 = t0 + 2 * kp;
#pragma unroll
            for (int e = 0; e < 2 * NW; e++) v[u][e / NW][e % NW] = make_uint4(0u, 0u, 0u, 0u);
            if (i >= KB / 2 * d8) continue;
            const E *s = V + (size_t)k0 * kvd + 8 * c;
            if (k0 <= last) load8(v[u][0], s);
            if (k0 + 1 <= last) load8(v[u][1], s + kvd);
        }
    }
    // Key `key` (t0 <= key < t0 + KB, past the `last` of the loads, so loaded as zeros) from knew and vnew
    // (d fp32 values each, 16-byte aligned): what the loads give when that key is in the cache.
    __device__ __forceinline__ void set_key(int t0, int key, const float *knew, const float *vnew, int d) {
        const int d8 = d / 8;
#pragma unroll
        for (int u = 0; u < KI; u++) {
            const int i = threadIdx.x + u * NT, c = i % d8;
            if (i < KB * d8 && t0 + i / d8 == key) words8(k[u], knew + 8 * c);
        }
#pragma unroll
        for (int u = 0; u < VI; u++) {
            const int i = threadIdx.x + u * NT, kp = i % (KB / 2), c = i / (KB / 2), k0 = t0 + 2 * kp;
            if (i >= KB / 2 * d8) continue;
            if (k0 == key) words8(v[u][0], vnew + 8 * c);
            if (k0 + 1 == key) words8(v[u][1], vnew + 8 * c);
        }
    }
    __device__ __forceinline__ void store_v(uint32_t *vh, uint32_t *vl, int d) const {
        const int d8 = d / 8;
#pragma unroll
        for (int u = 0; u < VI; u++) {
            const int i = threadIdx.x + u * NT, kp = i % (KB / 2), c = i / (KB / 2);
            if (i >= KB / 2 * d8) continue;
            if constexpr (F16) {
                const uint32_t *a = reinterpret_cast<const uint32_t *>(&v[u][0][0]),
                               *b = reinterpret_cast<const uint32_t *>(&v[u][1][0]);
#pragma unroll
                for (int e = 0; e < 8; e++) // the low or high halves of keys 2kp and 2kp + 1
                    vh[(8 * c + e) * kAttnVS + kp] = __byte_perm(a[e / 2], b[e / 2], e % 2 ? 0x7632 : 0x5410);
            } else {
                const float *v0 = reinterpret_cast<const float *>(&v[u][0][0]),
                            *v1 = reinterpret_cast<const float *>(&v[u][1][0]);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    uint32_t h, l;
                    attn_split<false>(v0[e], v1[e], h, l);
                    vh[(8 * c + e) * kAttnVS + kp] = h;
                    vl[(8 * c + e) * kAttnVS + kp] = l;
                }
            }
        }
    }

  private:
    __device__ __forceinline__ static float4 as_float4(uint4 w) {
        return make_float4(__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z),
                           __uint_as_float(w.w));
    }
    // the cache words of 8 fp32 values (what rope_store writes for them, kv_elem)
    __device__ __forceinline__ static void words8(uint4 (&dst)[NW], const float *x) {
        const float4 a = reinterpret_cast<const float4 *>(x)[0], b = reinterpret_cast<const float4 *>(x)[1];
        if constexpr (F16) {
            uint32_t lo;
            attn_split<true>(a.x, a.y, dst[0].x, lo);
            attn_split<true>(a.z, a.w, dst[0].y, lo);
            attn_split<true>(b.x, b.y, dst[0].z, lo);
            attn_split<true>(b.z, b.w, dst[0].w, lo);
        } else {
            dst[0] = make_uint4(__float_as_uint(a.x), __float_as_uint(a.y), __float_as_uint(a.z),
                                __float_as_uint(a.w));
            dst[NW - 1] = make_uint4(__float_as_uint(b.x), __float_as_uint(b.y), __float_as_uint(b.z),
                                     __float_as_uint(b.w));
        }
    }
};

// Stages a Q tile of nrows rows of d values (row rh from row_of(rh), a pointer to d fp32 values, or nullptr
// for a padded row of zeros) into the planes, with all the block's threads.
template <bool F16 = false, class RowOf>
__device__ __forceinline__ void attn_stage_q(uint32_t *qh, uint32_t *ql, int qs, int nrows, int d,
                                             RowOf row_of) {
    const int d8 = d / 8;
    for (int i = threadIdx.x; i < nrows * d8; i += blockDim.x) {
        const int rh = i / d8, c = i % d8;
        const float *src = row_of(rh);
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
        if (src) {
            a = *reinterpret_cast<const float4 *>(src + 8 * c);
            b = *reinterpret_cast<const float4 *>(src + 8 * c + 4);
        }
        attn_stage8<F16>(qh, ql, rh * qs + 4 * c, a, b);
    }
}

#endif
