// Pieces shared by the 4-bit tensor-core matmuls (mma_q4.cu: fp32 activations converted per warp;
// mma_q4x.cu: activations converted once per matmul) and the kernels that prepare activations for them
// (ops.cu's RMSNorm, mma_q4x.cu's prep). Every function here is part of the arithmetic the device defines for
// WEFT_CU_Q4F weights, so both matmuls give the same bits from the same inputs.
#ifndef WEFT_Q4_MMA_CUH
#define WEFT_Q4_MMA_CUH

#include "cuda_decode.cuh"
#include "cp_async.cuh"
#include "slot_walk.h"

#include <string.h>

#include <type_traits>

__device__ __forceinline__ uint32_t q4_pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// B fragment register for the pair (a, b): pm = 0 gives bf16(a), bf16(b) (the hi part); pm = 1 gives the lo
// part bf16(a − hi(a)), bf16(b − hi(b)) (the differences are exact in fp32).
__device__ __forceinline__ uint32_t q4_xfrag(float a, float b, float pm) {
    const uint32_t h = q4_pack_bf16x2(a, b);
    const float ra = fmaf(-pm, __uint_as_float(h << 16), a);
    const float rb = fmaf(-pm, __uint_as_float(h & 0xffff0000u), b);
    return q4_pack_bf16x2(ra, rb);
}

// Kernel instances only, never a weight's mode: Q4_0 (WEFT_CU_OFF8H) and MLX affine (WEFT_CU_AFFINEH) weights
// on f16 activations (weft_cu_xq.f16, --activations f16): the weights decode to f16 (q − 8 is exact in either
// type), the products run as .f16.f16 tensor-core operations, everything else is the weight mode's.
constexpr int WEFT_CU_OFF8H = 3, WEFT_CU_AFFINEH = 4;
template <int MODE> constexpr bool q4_f16 = MODE == WEFT_CU_OFF8H || MODE == WEFT_CU_AFFINEH;
template <int MODE> constexpr bool q4_affine = MODE == WEFT_CU_AFFINE || MODE == WEFT_CU_AFFINEH;
// The f16 instance of a weight mode (WEFT_CU_OFF8 or WEFT_CU_AFFINE).
template <int MODE> constexpr int q4_mode_f16 = MODE == WEFT_CU_AFFINE ? WEFT_CU_AFFINEH : WEFT_CU_OFF8H;

// v·m + c on two bf16 (F16: f16) lanes in one rounding (exact for the small integers and powers of two here).
template <bool F16 = false>
__device__ __forceinline__ uint32_t q4_x2_fma(uint32_t v, uint32_t m, uint32_t c) {
    uint32_t r;
    if constexpr (F16)
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(m), "r"(c));
    else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(m), "r"(c));
    return r;
}

// (a & m) | c in one LOP3 (LUT 0xEA), both constants in registers: the compiler splits (a & 0x000F000F) |
// 0x43004300 into two LOP3 when both are immediates (one immediate operand per LOP3).
__device__ __forceinline__ uint32_t q4_and_or(uint32_t a, uint32_t m, uint32_t c) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(m), "r"(c));
    return r;
}

// One word of 8 nibbles (element n at bits 4n) -> P[n] = bf16x2 (q[n] − 8, q[n + 4] − 8) for n < 4: the
// magic number 0x4300 (bf16 128.0, ulp 1) or'ed with the nibble is 128 + q, and adding −136 leaves q − 8.
// F16: f16x2, with 0x6400 (f16 1024.0, ulp 1) and −1032 (0xE408): the same integers — and f16's 10 mantissa
// bits let nibbles 1 and 5 stay where they are: or'ed into 0x6400 at bits 4..7 they give 1024 + 16q, and
// fma(v, 1/16, −72) is q − 8 exactly, so one shift by 8 serves nibbles 2, 3, 6 and 7 (3 shifts → 1 on the
// half-rate integer pipe; bf16's 7 mantissa bits leave no room for 16q). Measured (bench/NOTES.md session 18,
// same call): batch-1 decode in f16 mode 442.9 → 466.9 tok/s.
// ONE_LOP3: the mask and the or in one instruction (q4_and_or) — the same integers. Measured (bench/NOTES.md
// session 10): faster in the one-row kernels (their K-block loop 243 → 211 instructions), the mma.sync GEMM
// (512 rows 0.555 → 0.520 ms) and the split GEMM (16 rows 0.0372 → 0.0359 ms); slower in the wgmma GEMM (its
// consumers rematerialise the constants: more MOVs, 0.413 → 0.438 ms at 512 rows), which keeps the two-LOP3
// form.
template <bool ONE_LOP3 = false, bool F16 = false>
__device__ __forceinline__ void q4_dec_word(uint32_t w, uint32_t P[4]) {
    auto nib = [](uint32_t v, uint32_t m, uint32_t c) { return ONE_LOP3 ? q4_and_or(v, m, c) : (v & m) | c; };
    if constexpr (F16) {
        constexpr uint32_t magic = 0x64006400u, one = 0x3C003C00u, off = 0xE408E408u, // 1.0, −1032
            sixteenth = 0x2C002C00u, off16 = 0xD480D480u;                             // 1/16, −72
        const uint32_t w8 = w >> 8;
        P[0] = q4_x2_fma<true>(nib(w, 0x000F000Fu, magic), one, off);
        P[1] = q4_x2_fma<true>(nib(w, 0x00F000F0u, magic), sixteenth, off16);
        P[2] = q4_x2_fma<true>(nib(w8, 0x000F000Fu, magic), one, off);
        P[3] = q4_x2_fma<true>(nib(w8, 0x00F000F0u, magic), sixteenth, off16);
    } else {
#pragma unroll
        for (int n = 0; n < 4; n++)
            P[n] = q4_x2_fma(nib(w >> (4 * n), 0x000F000Fu, 0x43004300u), 0x3F803F80u, 0xC308C308u);
    }
}

// c += A·B, m16n8k16, bf16 (F16: f16) inputs, fp32 accumulators.
template <bool F16 = false>
__device__ __forceinline__ void q4_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
    if constexpr (F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// q4_mma on a zero accumulator: c = A·B + 0 (what q4_mma computes after c is set to +0.0, without the moves).
template <bool F16 = false>
__device__ __forceinline__ void q4_mma0(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    if constexpr (F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};"
            : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%10,%10,%10};"
            : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// The two mma of one 32-element sub-block for one activation quad (mma_q4.cu's header): A = the decoded words
// of rows g (Pg) and g + 8 (Ph), B = the quad's hi/lo words x; k (2t, 2t+1) <-> elements (8t + 2s, 8t + 2s +
// 4) and k (2t+8, 2t+9) <-> (8t + 2s + 1, 8t + 2s + 5) for mma s. first: the scale group's sums start from
// +0.0.
template <bool F16 = false>
__device__ __forceinline__ void q4_mma_sub(float C[4], const uint32_t Pg[4], const uint32_t Ph[4], uint4 x,
                                           bool first) {
    if (first)
        q4_mma0<F16>(C, Pg[0], Ph[0], Pg[1], Ph[1], x.x, x.y);
    else
        q4_mma<F16>(C, Pg[0], Ph[0], Pg[1], Ph[1], x.x, x.y);
    q4_mma<F16>(C, Pg[2], Ph[2], Pg[3], Ph[3], x.z, x.w);
}

// One output's fold of a scale group's sum p: OFF8: acc = fmaf(s, p, acc); AFFINE: acc = fmaf(s, p, fmaf(b',
// Σx_G, acc)) with b' = b + 8s (q4_affine_b) and sx = Σx_G (mma_q4.cu's header). The f16 kernels' hi-only
// forms (gemm_q4w.cu's H1, gemm_q4.cu's octets) fold each accumulator with it directly (p = hi + 0 = hi).
template <int MODE>
__device__ __forceinline__ void q4_fold1(float &acc, float s, float b, float sx, float p) {
    acc = q4_affine<MODE> ? fmaf(s, p, fmaf(b, sx, acc)) : fmaf(s, p, acc);
}

// The end of a scale group: its hi + lo sums (C[0] + C[1] for row g, C[2] + C[3] for row g + 8) into the
// lane's two outputs, q4_fold1's expressions. (Written out rather than through q4_fold1: with the helper,
// ptxas schedules gemv_q4.cu / mma_q4x.cu / gemm_q4.cu differently — not re-timed, so not taken.)
// HI: an f16 buffer's product (zero lo words: C[1], C[3] are +0 sums, p = hi + 0 = hi), folded without the
// additions, as q4_fold1's hi-only callers do.
template <int MODE, bool HI = false>
__device__ __forceinline__ void q4_fold(float acc[2], const float C[4], float sg, float sh, float bg,
                                        float bh, float sx) {
    const float pg = HI ? C[0] : __fadd_rn(C[0], C[1]), ph = HI ? C[2] : __fadd_rn(C[2], C[3]);
    if (q4_affine<MODE>) {
        acc[0] = fmaf(sg, pg, fmaf(bg, sx, acc[0]));
        acc[1] = fmaf(sh, ph, fmaf(bh, sx, acc[1]));
    } else {
        acc[0] = fmaf(sg, pg, acc[0]);
        acc[1] = fmaf(sh, ph, acc[1]);
    }
}

// b + 8s in one rounding: the affine group's offset once the nibble's −8 is folded into the weights.
__device__ __forceinline__ float q4_affine_b(float s, float b) {
    return fmaf(8.0f, s, b);
}

// The i-th K block (of nblk) in slot order (slot_walk.h's weft_slot_block); slot_end: the last of its slot.
__device__ __forceinline__ int q4_slot_block(int i, int nblk, int KW, bool &slot_end) {
    return weft_slot_block(i, nblk, KW, &slot_end);
}

// Host: the arguments every WEFT_CU_Q4F product on prepared activations needs (cuda_kernels.h): a Q4F weight
// of a supported shape, activations prepared for its K, and a SwiGLU epilogue without bias or accumulate.
static inline bool q4x_args_ok(const weft_cu_weight *w, const weft_cu_xq *xq, const weft_cu_epi *epi) {
    return w->kind == WEFT_CU_Q4F && weft_cu_q4f_ok(w->rows, w->cols, w->group) && xq->K == w->cols &&
           !(epi->mode == WEFT_CU_EPI_SWIGLU && (epi->accumulate || epi->bias[0]));
}

// Calls f(mode, sdt) — std::integral_constant values of the kernel instance's mode (q4_mode_f16 of the
// weight's on an f16 buffer) and scale type — for the WEFT_CU_Q4F layouts with kernels (Q4_0 with f16 scales,
// MLX affine with f32 / f16 / bf16 scales); cudaErrorNotSupported for any other.
template <class F> cudaError_t q4_dispatch(const weft_cu_weight *w, const weft_cu_xq *xq, F &&f) {
    auto run = [&](auto mode, auto sdt) {
        using S = decltype(sdt);
        constexpr int M = decltype(mode)::value;
        return xq->f16 ? f(std::integral_constant<int, q4_mode_f16<M>>(), S())
                       : f(std::integral_constant<int, M>(), S());
    };
    using A = std::integral_constant<int, WEFT_CU_AFFINE>;
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
        return run(std::integral_constant<int, WEFT_CU_OFF8>(), std::integral_constant<int, WEFT_CU_S_F16>());
    if (w->mode != WEFT_CU_AFFINE) return cudaErrorNotSupported;
    if (w->sdt == WEFT_CU_S_F32) return run(A(), std::integral_constant<int, WEFT_CU_S_F32>());
    if (w->sdt == WEFT_CU_S_F16) return run(A(), std::integral_constant<int, WEFT_CU_S_F16>());
    if (w->sdt == WEFT_CU_S_BF16) return run(A(), std::integral_constant<int, WEFT_CU_S_BF16>());
    return cudaErrorNotSupported;
}

// x as an f16 activation buffer holds it (weft_cu_xq.f16): rounded to nearest even, magnitudes past the
// largest finite f16 (65504) saturated to it (NaN stays NaN).
__device__ __forceinline__ float q4_f16_clamp(float x) {
    return fabsf(x) > 65504.0f ? copysignf(65504.0f, x) : x;
}
__device__ __forceinline__ float q4_f16_round(float x) {
    return __half2float(__float2half_rn(q4_f16_clamp(x)));
}
// The f16 word of the pair (a, b) (a in the low half), both already q4_f16_round'ed or clamped.
__device__ __forceinline__ uint32_t q4_pack_f16x2(float a, float b) {
    const __half2 v = __floats2half2_rn(a, b);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// One lane's share of a 32-element sub-block for the prepared-activation layout (weft_cu_xq): v = elements
// 8t .. 8t+7 of the sub-block (t = lane % 4; the sub-block's four lanes are consecutive). Writes the lane's
// hi and lo words (word j = the pair (v[j], v[j + 4])) to F (16 u32 per part: hi at F[4t..4t+3], lo at
// F[16 + 4t ..]) when ok, and returns the sub-block's sum ((a0 + a1) + (a2 + a3)), a_t = v[0] + ... + v[7]
// left to right — the same value in all four lanes. f16 (an f16 buffer): the values are q4_f16_round(v),
// part 0 their f16 words, part 1 zero, the sums over the rounded values. All 32 lanes of the warp must call
// it (shuffles).
__device__ __forceinline__ float q4_prep_chunk(const float vin[8], uint32_t *F, int t, bool ok, bool f16) {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = f16 ? q4_f16_round(vin[e]) : vin[e];
    uint4 hi, lo;
    if (f16) {
        hi = make_uint4(q4_pack_f16x2(v[0], v[4]), q4_pack_f16x2(v[1], v[5]), q4_pack_f16x2(v[2], v[6]),
                        q4_pack_f16x2(v[3], v[7]));
        lo = make_uint4(0u, 0u, 0u, 0u);
    } else {
        hi.x = q4_xfrag(v[0], v[4], 0.0f);
        hi.y = q4_xfrag(v[1], v[5], 0.0f);
        hi.z = q4_xfrag(v[2], v[6], 0.0f);
        hi.w = q4_xfrag(v[3], v[7], 0.0f);
        lo.x = q4_xfrag(v[0], v[4], 1.0f);
        lo.y = q4_xfrag(v[1], v[5], 1.0f);
        lo.z = q4_xfrag(v[2], v[6], 1.0f);
        lo.w = q4_xfrag(v[3], v[7], 1.0f);
    }
    if (ok) {
        reinterpret_cast<uint4 *>(F)[t] = hi;
        reinterpret_cast<uint4 *>(F)[4 + t] = lo;
    }
    float a = __fadd_rn(__fadd_rn(__fadd_rn(v[0], v[1]), v[2]), v[3]);
    a = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(a, v[4]), v[5]), v[6]), v[7]);
    a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 1));
    a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, 2));
    return a;
}

// One weight row's scales (or biases) of one K block: GPB consecutive values, aligned to their total size
// (WEFT_CU_Q4F's order, weft_cu_q4f_sidx: row r16 of tile T's values for block kb start at element
// ((T·nblk + kb)·16 + r16)·GPB).
template <int SDT, int GPB> struct SRaw {
    static constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2, BYTES = GPB * SSZ,
                         N = BYTES >= 4 ? BYTES / 4 : 1;
    uint32_t r[N];
    __device__ __forceinline__ void load(const void *base, int64_t idx) {
        const char *p = static_cast<const char *>(base) + idx * SSZ;
        if constexpr (BYTES == 2) {
            r[0] = __ldg(reinterpret_cast<const unsigned short *>(p));
        } else if constexpr (BYTES == 4) {
            r[0] = __ldg(reinterpret_cast<const unsigned int *>(p));
        } else if constexpr (BYTES == 8) {
            const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
            r[0] = v.x;
            r[1] = v.y;
        } else {
            const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
            r[0] = v.x;
            r[1] = v.y;
            r[2] = v.z;
            r[3] = v.w;
        }
    }
    // Value gi of the block (the same conversion as ld_scale).
    __device__ __forceinline__ float get(int gi) const {
        if constexpr (SSZ == 4) {
            return __uint_as_float(r[gi]);
        } else {
            const uint32_t h = (r[gi >> 1] >> (16 * (gi & 1))) & 0xffffu;
            return SDT == WEFT_CU_S_F16 ? f16_bits(h) : bf16_bits(h);
        }
    }
};

// The loads of one K block of one tile for one lane (mma_q4x.cu's kernel, gemm_q4w.cu's GEMM): its words of
// rows g and g + 8 (SB sub-blocks each) and the two rows' scales (and biases).
template <int MODE, int SDT, int SB, int GPB> struct Stage {
    uint32_t wg[SB], wh[SB];
    SRaw<SDT, GPB> sg, sh, bg, bh;
    __device__ __forceinline__ void load(const WDev &w, const uint32_t *qb, int64_t tile, int nblk, int kb,
                                         int g) {
        const uint32_t *p = qb + ((size_t)tile * (size_t)nblk + (size_t)kb) * 64 * SB;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t *dst = h ? wh : wg;
            const uint32_t *src = p + h * 32 * SB;
            if constexpr (SB == 4) {
                const uint4 u = __ldg(reinterpret_cast<const uint4 *>(src));
                dst[0] = u.x;
                dst[1] = u.y;
                dst[2] = u.z;
                dst[3] = u.w;
            } else if constexpr (SB == 2) {
                const uint2 u = __ldg(reinterpret_cast<const uint2 *>(src));
                dst[0] = u.x;
                dst[1] = u.y;
            } else {
                dst[0] = __ldg(src);
            }
        }
        // rows g and g + 8 of the tile's 16 x GPB scales of block kb (weft_cu_q4f_sidx)
        const int64_t s0 = (((size_t)tile * (size_t)nblk + (size_t)kb) * 16 + g) * GPB, s1 = s0 + 8 * GPB;
        sg.load(w.s, s0);
        sh.load(w.s, s1);
        if (q4_affine<MODE>) {
            bg.load(w.b, s0);
            bh.load(w.b, s1);
        }
    }
};

// One K block of one tile (the lane's loads in S) into the running sums: per sub-block, the two mma of each
// activation quad, and at the end of a scale group the fold into acc (mma_q4.cu's arithmetic). xq(q, j, xv,
// ls) gives quad q's B words of sub-block j of the K block (xv) and, AFFINE, the 32-element sum of the lane's
// activation row t of that quad (ls; 0 for rows past M): where the activations come from (registers, L2,
// shared memory) is the caller's, the arithmetic is this function's.
template <int MODE, int SDT, int SB, int GPB, int RQ, class XQ, bool HI = false>
__device__ __forceinline__ void q4x_block_x(const Stage<MODE, SDT, SB, GPB> &S, XQ &&xq, float (&acc)[RQ][2],
                                            float (&C)[RQ][4], float (&sxg)[RQ]) {
    constexpr int SPB = SB / GPB; // sub-blocks per scale group
#pragma unroll
    for (int j = 0; j < SB; j++) {
        const bool first = j % SPB == 0, last = (j + 1) % SPB == 0;
        uint32_t Pg[4], Ph[4];
        q4_dec_word<true, q4_f16<MODE>>(S.wg[j], Pg);
        q4_dec_word<true, q4_f16<MODE>>(S.wh[j], Ph);
        float sg = 0.0f, sh = 0.0f, bg = 0.0f, bh = 0.0f;
        if (last) {
            sg = S.sg.get(j / SPB);
            sh = S.sh.get(j / SPB);
            if (q4_affine<MODE>) {
                bg = q4_affine_b(sg, S.bg.get(j / SPB));
                bh = q4_affine_b(sh, S.bh.get(j / SPB));
            }
        }
#pragma unroll
        for (int q = 0; q < RQ; q++) {
            uint4 xv;
            float ls;
            xq(q, j, xv, ls);
            q4_mma_sub<q4_f16<MODE>>(C[q], Pg, Ph, xv, first);
            if (q4_affine<MODE>) sxg[q] = first ? ls : __fadd_rn(sxg[q], ls);
            if (last) q4_fold<MODE, HI>(acc[q], C[q], sg, sh, bg, bh, sxg[q]);
        }
    }
}

// q4x_block_x on an f16 buffer (zero lo words) in octets, for RQ quads (RQ even) of Q4_0 rows: B column g is
// the hi words of activation row 8o + g (xo(o, j, xv): octet o's words of sub-block j), so a sub-block takes
// RQ / 2 mma pairs instead of RQ; C[2o] is octet o's accumulator, and at a scale group's end each of its
// elements folds into acc[2o + h][c] — weight row g + 8h, activation row 8o + 2t + c — with q4_fold1 (p = hi
// + 0 = hi: the bits of the quads' form, as gemm_q4.cu's octets; bench_cuda_matmul checks them).
template <int MODE, int SDT, int SB, int GPB, int RQ, class XO>
__device__ __forceinline__ void q4x_block_o(const Stage<MODE, SDT, SB, GPB> &S, XO &&xo, float (&acc)[RQ][2],
                                            float (&C)[RQ][4]) {
    static_assert(q4_f16<MODE> && !q4_affine<MODE> && RQ % 2 == 0, "octets: Q4_0 rows on f16 buffers");
    constexpr int SPB = SB / GPB; // sub-blocks per scale group
#pragma unroll
    for (int j = 0; j < SB; j++) {
        const bool first = j % SPB == 0, last = (j + 1) % SPB == 0;
        uint32_t Pg[4], Ph[4];
        q4_dec_word<true, true>(S.wg[j], Pg);
        q4_dec_word<true, true>(S.wh[j], Ph);
        float sc[2] = {0.0f, 0.0f};
        if (last) {
            sc[0] = S.sg.get(j / SPB);
            sc[1] = S.sh.get(j / SPB);
        }
#pragma unroll
        for (int o = 0; o < RQ / 2; o++) {
            uint4 xv;
            xo(o, j, xv);
            q4_mma_sub<true>(C[2 * o], Pg, Ph, xv, first);
            if (last)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    q4_fold1<MODE>(acc[2 * o + (e >> 1)][e & 1], sc[e >> 1], 0.0f, 0.0f, C[2 * o][e]);
        }
    }
}

// q4x_block_x with the activations of mma_q4x.cu's and gemv_q4.cu's one-row kernels: RQ == 1, x1 / s1 (the
// lane's words and sums of the K block, in registers); RQ > 1, quads of rows row0 + 4q + .. read from L2
// (xlane: the lane's word offset in the prepared rows, XS their sums; zeros past row M). HI: q4_fold's (an
// f16 buffer's zero lo words).
template <int MODE, int SDT, int SB, int GPB, int RQ, bool HI = false>
__device__ __forceinline__ void
q4x_block(const Stage<MODE, SDT, SB, GPB> &S, const uint4 (&x1)[SB], const float (&s1)[SB],
          const uint32_t *xlane, const float *__restrict__ XS, int64_t nsub, int M, int row0, int kb, int g,
          int t, float (&acc)[RQ][2], float (&C)[RQ][4], float (&sxg)[RQ]) {
    auto xq = [&](int q, int j, uint4 &xv, float &ls) {
        const int64_t u = (int64_t)kb * SB + j;
        if (RQ == 1) {
            xv = x1[j];
            ls = s1[j];
        } else {
            const int xi = row0 + 4 * q + (g >> 1), si = row0 + 4 * q + t;
            xv = xi < M ? __ldg(reinterpret_cast<const uint4 *>(xlane + ((int64_t)xi * nsub + u) * 32))
                        : make_uint4(0u, 0u, 0u, 0u);
            ls = (q4_affine<MODE> && si < M) ? __ldg(XS + (int64_t)si * nsub + u) : 0.0f;
        }
    };
    q4x_block_x<MODE, SDT, SB, GPB, RQ, decltype(xq) &, HI>(S, xq, acc, C, sxg);
}

// The one-row kernels' staging of a warp's prepared row (mma_q4x.cu's X1S, mma_i8.cu): copies the 32·SB-word
// blocks of the warp's K blocks w, w + KW, ... (mine of them) from src to the same word offsets of dst with
// cp.async — and, with sdst, their SB sums each — in two commit groups (the first D blocks, then the rest),
// and waits for the first; the caller calls q4_stage_rest() before it reads block D. Each warp reads only
// what it copied, so no block barrier is needed.
template <int SB, int D>
__device__ __forceinline__ void q4_stage_slot(uint32_t *dst, const uint32_t *src, float *sdst,
                                              const float *ssrc, int warp, int KW, int mine, int lane) {
    for (int i = 0; i < mine; i++) {
        const int64_t o = (int64_t)(warp + i * KW) * SB;
        if (lane < SB * 8) cp_async<16>(dst + o * 32 + 4 * lane, src + o * 32 + 4 * lane, true);
        if (sdst && lane == 0) cp_async<4 * SB>(sdst + o, ssrc + o, true);
        if (i == D - 1) cp_commit();
    }
    if (mine < D) cp_commit();
    cp_commit();
    cp_wait<1>();
    __syncwarp();
}
__device__ __forceinline__ void q4_stage_rest() {
    cp_wait<0>();
    __syncwarp();
}

// A one-row stream's copy cursor moved past the K block it just copied (gemv_q4.cu; bench_cuda_persist): the
// warp's next K block of tile ct (ci of mine, qc / sc advanced by qk / sk), or after a tile's last, the next
// tile's first (qt / st advanced by qtile / stile) — none past the run's last tile, so the cursors stay
// inside the arrays.
template <class Q, class S>
__device__ __forceinline__ void q4_cursor_step(int &ci, int &ct, int mine, int ntl, const Q *&qt,
                                               const Q *&qc, const S *&st, const S *&sc, size_t qtile,
                                               size_t qk, int64_t stile, int64_t sk) {
    if (++ci == mine) {
        ci = 0;
        if (++ct < ntl) {
            qc = qt += qtile;
            sc = st += stile;
        }
    } else {
        qc += qk;
        sc += sk;
    }
}

// The warps' sums of a tile meet in order ((w0 + w1) + w2) + ...: warp ws > 0 of the KW warps that split the
// tile's K blocks stores its RQ quads' two sums per lane in buf ([KW − 1][RQ][64], lane-major); after a
// barrier warp 0 adds buf[((w − 1)·RQ + q)·64 + lane (+ 32)] to its own for w = 1 .. KW − 1 in turn (written
// at each caller: as a helper, that loop changed ptxas's schedule of gemv_q4.cu's several-row kernels, which
// could not be re-timed).
template <int RQ>
__device__ __forceinline__ void q4_put_sums(float *buf, int ws, const float (&acc)[RQ][2], int lane) {
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        buf[((ws - 1) * RQ + q) * 64 + lane] = acc[q][0];
        buf[((ws - 1) * RQ + q) * 64 + 32 + lane] = acc[q][1];
    }
}

// The split-K folds' sum of one output over its KW <= 8 slot sums p[s·stride], added in slot order ((p0 + p1)
// + p2) + ... (the additions of the kernels that keep every slot in one block), with every load issued first.
__device__ __forceinline__ float q4_slot_sum(const float *p, size_t stride, int KW) {
    float v[8];
#pragma unroll
    for (int s = 0; s < 8; s++) v[s] = s < KW ? p[s * stride] : 0.0f;
    float a = v[0];
#pragma unroll
    for (int s = 1; s < 8; s++)
        if (s < KW) a = __fadd_rn(a, v[s]);
    return a;
}

// Where STORE puts output o (cuda_kernels.h's weft_cu_epi): its segment's y, bias (or NULL) and ld, and oo =
// o counted from the segment's start (row i's output at y[i·ld + oo], its bias at bias[oo]).
struct Q4EpiCol {
    float *y;
    const float *bias;
    int64_t ld, oo;
};
__device__ __forceinline__ Q4EpiCol q4_epi_col(const weft_cu_epi &epi, int64_t o) {
    // (selects, not epi.y[s]: a runtime index into the kernel's parameter struct would copy it to local
    // memory)
    float *y;
    const float *bias;
    int64_t ld, oo;
    if (o < epi.end[0]) {
        y = epi.y[0], bias = epi.bias[0], ld = epi.ld[0], oo = o;
    } else if (o < epi.end[1]) {
        y = epi.y[1], bias = epi.bias[1], ld = epi.ld[1], oo = o - epi.end[0];
    } else {
        y = epi.y[2], bias = epi.bias[2], ld = epi.ld[2], oo = o - epi.end[1];
    }
    return {y, bias, ld, oo};
}

// Output of one lane after the warps' sums: v0, v1 = the dot products of weight rows 16·tile + g and 16·tile
// + g + 8 with activation row i, into epi (cuda_kernels.h's weft_cu_epi). All 32 lanes of the warp call it
// with the same tile (SwiGLU's prepared words are gathered by shuffles); rows i >= M write nothing.
__device__ __forceinline__ void q4_epi_store(const weft_cu_epi &epi, int64_t tile, int i, int M, int g, int t,
                                             float v0, float v1) {
    if (epi.mode == WEFT_CU_EPI_SWIGLU) {
        const float out = v0 / (1.0f + expf(-v0)) * v1;
        if (i < M) epi.y[0][(int64_t)i * epi.ld[0] + tile * 8 + g] = out;
        if (epi.xf) { // outputs 8·tile .. 8·tile+7 of row i are chunk t' = tile % 4 of sub-block tile / 4
            const int jw = g & 3, p = g >> 2;
            const float a = __shfl_sync(0xffffffffu, out, 4 * jw + t);
            const float b = __shfl_sync(0xffffffffu, out, 4 * (jw + 4) + t);
            // an f16 buffer holds q4_f16_round(out) (part 0) and zero words (part 1)
            const uint32_t word = !epi.xf_f16 ? q4_xfrag(a, b, (float)p)
                                  : p         ? 0u
                                              : q4_pack_f16x2(q4_f16_clamp(a), q4_f16_clamp(b));
            if (i < M)
                epi.xf[((int64_t)i * epi.xf_nsub + tile / 4) * 32 + p * 16 + 4 * (tile % 4) + jw] = word;
        }
        return;
    }
    if (i >= M) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const Q4EpiCol c = q4_epi_col(epi, tile * 16 + g + 8 * r);
        float val = r ? v1 : v0;
        if (c.bias) val = __fadd_rn(val, c.bias[c.oo]);
        float *dst = c.y + (int64_t)i * c.ld + c.oo;
        *dst = epi.accumulate ? __fadd_rn(*dst, val) : val;
    }
}

// STORE only: the outputs of N activation rows i[k] at once, v0[k] / v1[k] as in q4_epi_store (the same
// additions: bias, then the residual). The two output columns are routed once, and with accumulate every
// row's old value is loaded before any is stored — one load latency per call instead of one per element
// (the stores cannot be moved past a later load that might alias them; the outputs of one product never
// overlap, so loading first reads the same values).
template <int N>
__device__ __forceinline__ void q4_epi_store_rows(const weft_cu_epi &epi, int64_t tile, const int (&i)[N],
                                                  int M, int g, const float (&v0)[N], const float (&v1)[N]) {
    Q4EpiCol c[2];
    float b[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        c[r] = q4_epi_col(epi, tile * 16 + g + 8 * r);
        b[r] = c[r].bias ? c[r].bias[c[r].oo] : 0.0f;
    }
    float old[N][2];
#pragma unroll
    for (int k = 0; k < N; k++)
#pragma unroll
        for (int r = 0; r < 2; r++)
            old[k][r] = epi.accumulate && i[k] < M ? c[r].y[(int64_t)i[k] * c[r].ld + c[r].oo] : 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        if (i[k] >= M) continue;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float val = r ? v1[k] : v0[k];
            if (c[r].bias) val = __fadd_rn(val, b[r]);
            c[r].y[(int64_t)i[k] * c[r].ld + c[r].oo] = epi.accumulate ? __fadd_rn(old[k][r], val) : val;
        }
    }
}

#endif
