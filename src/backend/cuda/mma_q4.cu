// The 4-bit matmul on tensor cores (layout WEFT_CU_Q4F, cuda_kernels.h): bf16 mma.sync m16n8k16 with fp32
// accumulation, one kernel for every number of rows M (decode and prefill), row-invariant by construction.
//
// Operands. A (16 output rows x 16 k) = the 4-bit values q' = q − 8, decoded to bf16 in registers (exact:
// small integers). B (16 k x 8 columns) = the activations split in two bf16 parts, column
// 2i = hi(x_i) = bf16(x_i), column 2i+1 = lo(x_i) = bf16(x_i − hi(x_i)), so one mma serves 4 activation rows
// and hi + lo carries 16 of x's 24 significand bits (relative error <= 2^-16 per element). The scale is
// factored out of each group: per group G and output o, p = C_hi + C_lo (the group's two accumulators, each
// summed by the tensor core over the group's k in a fixed sequence of mma steps starting from 0), then
//   OFF8: acc = fmaf(s, p, acc)      AFFINE: acc = fmaf(s, p, fmaf(fmaf(8, s, b), Σx_G, acc))
// with groups in ascending order within a warp's blocks, Σx_G summed as the device defines it (each lane's 8
// elements in order, then (t0 + t1) + (t2 + t3) by xor shuffles, sub-blocks of a group in order).
//
// Row invariance (SPEC §4.3.1): a block holds one 16-row tile and KW warps; warp w takes the K blocks w, w +
// KW, ... (KW fixed by the weight shape) and the warps' sums meet in a fixed order ((w0 + w1) + w2) + ... .
// An output element depends only on its weight row and its activation row: the tensor core computes each
// C element from its own A row and B column, rows beyond M feed zeros into columns nobody reads, and the
// number of activation quads a block carries (RQ, picked from M) changes only how often the decoded A is
// reused. No atomics, no split chosen from the device.
#include "cuda_kernels.h"
#include "q4_mma.cuh"

namespace {

template <int SB> struct Words { uint32_t v[SB]; };

template <int SB> __device__ __forceinline__ Words<SB> ld_words(const uint32_t *p) {
    Words<SB> r;
    if constexpr (SB == 4) {
        const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
        r.v[0] = u.x;
        r.v[1] = u.y;
        r.v[2] = u.z;
        r.v[3] = u.w;
    } else if constexpr (SB == 2) {
        const uint2 u = __ldg(reinterpret_cast<const uint2 *>(p));
        r.v[0] = u.x;
        r.v[1] = u.y;
    } else {
        r.v[0] = __ldg(p);
    }
    return r;
}

// Grid: (N / 16 tiles, ceil(M / (4·RQ))). Block: KW warps. Lane (g = lane / 4, t = lane % 4) holds the A
// fragments of tile rows g and g + 8 and, per activation quad, the C fragment of rows g, g + 8 for activation
// row 4q + t (columns 2t = hi, 2t + 1 = lo); its B column is g (activation row 4q + g/2, part g % 2).
// Layout of a tile's K block b (32·SB elements, 1024·SB/4 bytes): half h (rows 8h..8h+7), lane 4g + t, word j
// = sub-block j's elements 8t..8t+7 of row 8h + g: word index ((tile·nblk + b)·2 + h)·32·SB + (4g + t)·SB +
// j.
template <int MODE, int SDT, int SB, int RQ, int KW>
__global__ void __launch_bounds__(KW * 32)
    q4f_kernel(WDev w, const float *__restrict__ X, int64_t ldx, int M, float *Y, int64_t ldy,
               const float *__restrict__ bias, int accumulate) {
    __shared__ float red[KW - 1][RQ][2][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t tile = blockIdx.x;
    const int nblk = (int)(w.cols / (32 * SB));
    const int row0 = blockIdx.y * 4 * RQ;
    const int gmask = (1 << w.gshift) - 1;
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + (size_t)tile * nblk * 64 * SB + lane * SB;
    const int64_t og = tile * 16 + g;
    const float pm = (float)(g & 1);
    float acc[RQ][2], C[RQ][4], sxg[RQ];
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        acc[q][0] = acc[q][1] = 0.0f;
        sxg[q] = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) C[q][r] = 0.0f;
    }
    const float *xrow[RQ];
    bool xok[RQ];
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        const int i = row0 + 4 * q + (g >> 1);
        xok[q] = i < M;
        xrow[q] = X + (int64_t)(xok[q] ? i : 0) * ldx + 8 * t;
    }
    Words<SB> cg{}, ch{}, ng1{}, nh1{};
    int b = warp;
    if (b < nblk) {
        cg = ld_words<SB>(qb + (size_t)b * 64 * SB);
        ch = ld_words<SB>(qb + (size_t)b * 64 * SB + 32 * SB);
    }
    if (b + KW < nblk) {
        ng1 = ld_words<SB>(qb + (size_t)(b + KW) * 64 * SB);
        nh1 = ld_words<SB>(qb + (size_t)(b + KW) * 64 * SB + 32 * SB);
    }
#pragma unroll 1
    for (; b < nblk; b += KW) {
        Words<SB> ng2{}, nh2{};
        if (b + 2 * KW < nblk) { // two blocks ahead: keep the loads of three blocks in flight
            ng2 = ld_words<SB>(qb + (size_t)(b + 2 * KW) * 64 * SB);
            nh2 = ld_words<SB>(qb + (size_t)(b + 2 * KW) * 64 * SB + 32 * SB);
        }
#pragma unroll
        for (int j = 0; j < SB; j++) {
            const int e0 = (b * SB + j) * 32;
            const bool first = (e0 & gmask) == 0, last = ((e0 + 32) & gmask) == 0;
            uint32_t Pg[4], Ph[4];
            q4_dec_word(cg.v[j], Pg);
            q4_dec_word(ch.v[j], Ph);
            float sg = 0.0f, sh = 0.0f, bg = 0.0f, bh = 0.0f;
            if (last) {
                const int64_t G = e0 >> w.gshift, ig = q4f_sidx(w, og, G), ih = q4f_sidx(w, og + 8, G);
                sg = ld_scale<SDT>(w.s, ig);
                sh = ld_scale<SDT>(w.s, ih);
                if (q4_affine<MODE>) {
                    bg = q4_affine_b(sg, ld_scale<SDT>(w.b, ig));
                    bh = q4_affine_b(sh, ld_scale<SDT>(w.b, ih));
                }
            }
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                float4 xa = make_float4(0.f, 0.f, 0.f, 0.f), xb = xa;
                if (xok[q]) {
                    const float4 *xp = reinterpret_cast<const float4 *>(xrow[q] + e0);
                    xa = xp[0];
                    xb = xp[1];
                }
                const uint4 xv = make_uint4(q4_xfrag(xa.x, xb.x, pm), q4_xfrag(xa.y, xb.y, pm),
                                            q4_xfrag(xa.z, xb.z, pm), q4_xfrag(xa.w, xb.w, pm));
                q4_mma_sub(C[q], Pg, Ph, xv, first);
                if (q4_affine<MODE>) {
                    float ls = __fadd_rn(__fadd_rn(__fadd_rn(xa.x, xa.y), xa.z), xa.w);
                    ls = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(ls, xb.x), xb.y), xb.z), xb.w);
                    ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 1));
                    ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 2));
                    ls = __shfl_sync(0xffffffffu, ls, 8 * t); // column 2t: activation row 4q + t
                    sxg[q] = first ? ls : __fadd_rn(sxg[q], ls);
                }
                if (last) q4_fold<MODE>(acc[q], C[q], sg, sh, bg, bh, sxg[q]);
            }
        }
        cg = ng1;
        ch = nh1;
        ng1 = ng2;
        nh1 = nh2;
    }
    if (warp > 0) {
#pragma unroll
        for (int q = 0; q < RQ; q++) {
            red[warp - 1][q][0][lane] = acc[q][0];
            red[warp - 1][q][1][lane] = acc[q][1];
        }
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        const int i = row0 + 4 * q + t;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float v = acc[q][r];
#pragma unroll
            for (int w2 = 1; w2 < KW; w2++) v = __fadd_rn(v, red[w2 - 1][q][r][lane]);
            if (i >= M) continue;
            const int64_t o = og + 8 * r;
            if (bias) v = __fadd_rn(v, bias[o]);
            float *dst = Y + (int64_t)i * ldy + o;
            *dst = accumulate ? __fadd_rn(*dst, v) : v;
        }
    }
}

template <int MODE, int SDT, int SB, int KW>
cudaError_t launch_rq(const WDev &w, const float *X, int64_t ldx, int M, float *Y, int64_t ldy,
                      const float *bias, int accumulate, cudaStream_t st) {
    const unsigned tiles = (unsigned)(w.rows / 16);
    // RQ only sets how many activation quads share one decode of the weights (see the header comment).
    if (M <= 4) {
        q4f_kernel<MODE, SDT, SB, 1, KW>
            <<<dim3(tiles, 1), KW * 32, 0, st>>>(w, X, ldx, M, Y, ldy, bias, accumulate);
    } else if (M <= 16) {
        q4f_kernel<MODE, SDT, SB, 4, KW><<<dim3(tiles, (unsigned)((M + 15) / 16)), KW * 32, 0, st>>>(
            w, X, ldx, M, Y, ldy, bias, accumulate);
    } else {
        q4f_kernel<MODE, SDT, SB, 8, KW><<<dim3(tiles, (unsigned)((M + 31) / 32)), KW * 32, 0, st>>>(
            w, X, ldx, M, Y, ldy, bias, accumulate);
    }
    return cudaGetLastError();
}

template <int MODE, int SDT>
cudaError_t launch_sb(const WDev &w, const float *X, int64_t ldx, int M, float *Y, int64_t ldy,
                      const float *bias, int accumulate, cudaStream_t st) {
    // Warps per tile: a function of the weight shape alone (fewer tiles -> more warps share each tile's K).
    switch (w.sb) {
    case 4:
        if (w.rows / 16 < 528) return launch_rq<MODE, SDT, 4, 8>(w, X, ldx, M, Y, ldy, bias, accumulate, st);
        return launch_rq<MODE, SDT, 4, 4>(w, X, ldx, M, Y, ldy, bias, accumulate, st);
    case 2:
        return launch_rq<MODE, SDT, 2, 4>(w, X, ldx, M, Y, ldy, bias, accumulate, st);
    case 1:
        return launch_rq<MODE, SDT, 1, 4>(w, X, ldx, M, Y, ldy, bias, accumulate, st);
    }
    return cudaErrorInvalidValue;
}

} // namespace

extern "C" cudaError_t weft_cu_matmul_q4f(const weft_cu_weight *w, const float *X, int64_t ldx, int M,
                                          float *Y, int64_t ldy, const float *bias, int accumulate,
                                          cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!weft_cu_q4f_ok(w->rows, w->cols, w->group) || ldx % 4) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
        return launch_sb<WEFT_CU_OFF8, WEFT_CU_S_F16>(d, X, ldx, M, Y, ldy, bias, accumulate, stream);
    if (w->mode == WEFT_CU_AFFINE) {
        if (w->sdt == WEFT_CU_S_F32)
            return launch_sb<WEFT_CU_AFFINE, WEFT_CU_S_F32>(d, X, ldx, M, Y, ldy, bias, accumulate, stream);
        if (w->sdt == WEFT_CU_S_F16)
            return launch_sb<WEFT_CU_AFFINE, WEFT_CU_S_F16>(d, X, ldx, M, Y, ldy, bias, accumulate, stream);
        if (w->sdt == WEFT_CU_S_BF16)
            return launch_sb<WEFT_CU_AFFINE, WEFT_CU_S_BF16>(d, X, ldx, M, Y, ldy, bias, accumulate, stream);
    }
    return cudaErrorNotSupported;
}

extern "C" int weft_cu_q4f_sb(int64_t cols) {
    const int64_t u = cols / 32;
    return u % 4 == 0 ? 4 : u % 2 == 0 ? 2 : 1;
}

extern "C" int weft_cu_q4f_ok(int64_t rows, int64_t cols, int group) {
    return rows > 0 && rows % 16 == 0 && cols > 0 && cols % 32 == 0 &&
           (group == 32 || group == 64 || group == 128) && cols % group == 0;
}

extern "C" int64_t weft_cu_q4f_word(int64_t rows, int64_t cols, int64_t r, int64_t w8) {
    (void)rows;
    const int64_t sb = weft_cu_q4f_sb(cols), nblk = cols / (32 * sb);
    const int64_t tile = r / 16, rr = r % 16, h = rr / 8, g = rr % 8;
    const int64_t sub = w8 / 4, t = w8 % 4, b = sub / sb, j = sub % sb;
    return ((tile * nblk + b) * 2 + h) * 32 * sb + (4 * g + t) * sb + j;
}

extern "C" int64_t weft_cu_q4f_sidx(int64_t cols, int group, int64_t r, int64_t gi) {
    const int64_t sb = weft_cu_q4f_sb(cols);
    return q4f_sidx_at(cols / (32 * sb), 32 * sb / group, r, gi);
}

extern "C" void weft_cu_q4f_pack_scales(const void *src, int64_t rows, int64_t cols, int group, int ssz,
                                        void *dst) {
    // row r's values of K block kb (GPB of them, one run) go to weft_cu_q4f_sidx(cols, group, r, kb·GPB):
    // the run of row r % 16 in tile r / 16's block kb
    const int64_t sb = weft_cu_q4f_sb(cols), nblk = cols / (32 * sb), run = 32 * sb / group * ssz;
    const unsigned char *p = static_cast<const unsigned char *>(src);
    unsigned char *d = static_cast<unsigned char *>(dst);
    for (int64_t r = 0; r < rows; r++) {
        unsigned char *out = d + (r / 16 * nblk * 16 + r % 16) * run; // block 0 of the row's tile
        for (int64_t kb = 0; kb < nblk; kb++)
            memcpy(out + kb * 16 * run, p + (r * nblk + kb) * run, (size_t)run);
    }
}

extern "C" void weft_cu_q4f_pack(const void *src, int64_t rows, int64_t cols, uint32_t *dst) {
    const int64_t wpr = cols / 8, nsub = cols / 32, sb = weft_cu_q4f_sb(cols), nblk = nsub / sb;
    const unsigned char *p = static_cast<const unsigned char *>(src); // any alignment (mapped files)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t tile = r / 16, h = (r % 16) / 8, g = r % 8;
        for (int64_t sub = 0; sub < nsub; sub++) {
            // = weft_cu_q4f_word(rows, cols, r, 4·sub + t) for t < 4
            const int64_t base = ((tile * nblk + sub / sb) * 2 + h) * 32 * sb + 4 * g * sb + sub % sb;
            uint32_t v[4];
            memcpy(v, p + 4 * (r * wpr + 4 * sub), 16);
            for (int t = 0; t < 4; t++) dst[base + t * sb] = v[t];
        }
    }
}
