// The 4-bit tensor-core matmul on prepared activations (weft_cu_matmul_q4x, cuda_kernels.h), and the prep.
//
// Same arithmetic as mma_q4.cu (its header says how a WEFT_CU_Q4F product is defined): the same A fragments,
// the same bf16 hi/lo B columns, the same mma sequence per group, the same fold, the same warps per tile
// (KW from the weight shape) and the same order of the warps' sums — so both kernels give the same bits.
// What differs is only where work happens:
//  - the activations arrive already split into hi/lo bf16 pairs in fragment order, with their 32-element
//    sums (weft_cu_xq, written once per matmul input by the prep or the RMSNorm that makes them), instead of
//    every warp converting fp32 x for every tile;
//  - a block is persistent: it takes work units (one 16-row tile x one group of activation rows)
//    blockIdx.x, blockIdx.x + gridDim.x, ..., and each warp streams its K blocks of one unit after another
//    with D blocks of weight and scale loads in flight across unit boundaries (the scales ride with the
//    words instead of being read when a group ends), and the next block's activations loaded one step
//    ahead. Which block computes a unit never changes the unit's arithmetic, so the grid may follow the
//    device's SM count;
//  - epilogues: bias and residual add (as before), split of one matrix's outputs into up to three buffers
//    (Q|K|V fused at upload), and SwiGLU (gate|up fused at upload with rows interleaved by 8, so a lane holds
//    gate row o and up row o of one activation row: out = g / (1 + e^(−g))·u, the swiglu kernel's formula).
#include "cuda_kernels.h"
#include "q4_mma.cuh"

namespace {

// One weight row's scales (or biases) of one K block: GPB consecutive values, aligned to their total size
// (the row's values for block kb start at element row·ng + kb·GPB, and ng is a multiple of GPB).
template <int SDT, int GPB> struct SRaw {
    static constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2, BYTES = GPB * SSZ, N = BYTES >= 4 ? BYTES / 4 : 1;
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

// The loads of one K block of one tile for one lane: its words of rows g and g + 8 (SB sub-blocks each) and
// the two rows' scales (and biases).
template <int MODE, int SDT, int SB, int GPB> struct Stage {
    uint32_t wg[SB], wh[SB];
    SRaw<SDT, GPB> sg, sh, bg, bh;
    __device__ __forceinline__ void load(const WDev &w, const uint32_t *qb, int64_t tile, int nblk, int kb,
                                         int64_t ng, int g) {
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
        const int64_t row = tile * 16 + g, s0 = row * ng + (int64_t)kb * GPB, s1 = s0 + 8 * ng;
        sg.load(w.s, s0);
        sh.load(w.s, s1);
        if (MODE == WEFT_CU_AFFINE) {
            bg.load(w.b, s0);
            bh.load(w.b, s1);
        }
    }
};

__device__ __forceinline__ float *seg_ptr(const weft_cu_epi &e, int s) {
    return s == 0 ? e.y[0] : s == 1 ? e.y[1] : e.y[2];
}

// Grid: persistent blocks (<= work units). Block: KW warps (KW from the weight shape, as mma_q4.cu).
// Work unit wu: tile wu % ntiles, activation rows [rg·4·RQ, rg·4·RQ + 4·RQ) with rg = wu / ntiles.
// Lane (g = lane / 4, t = lane % 4), per activation quad q: B column g = activation row 4q + g/2, part g % 2;
// C fragment: rows g, g + 8 of the tile for activation row 4q + t.
template <int MODE, int SDT, int SB, int GPB, int RQ>
__global__ void __launch_bounds__(256)
    q4x_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, weft_cu_epi epi,
               int nwork) {
    constexpr int D = RQ == 1 ? 4 : 2; // K blocks of loads in flight per warp
    constexpr int SPB = SB / GPB;      // sub-blocks per scale group
    extern __shared__ float red[];     // [2][KW − 1][RQ][2][32]: the warps' sums, double-buffered by unit
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KW = (int)(blockDim.x >> 5);
    const int g = lane >> 2, t = lane & 3;
    const int nblk = (int)(w.cols / (32 * SB)), per = (nblk + KW - 1) / KW;
    const int64_t ntiles = w.rows / 16, ng = w.cols >> w.gshift, nsub = w.cols / 32;
    const int nk = (nwork - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x, total = nk * per;
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + lane * SB;
    const uint32_t *xlane = XF + (g & 1) * 16 + 4 * t;

    // x of one K block for RQ == 1 (rows 0..3: a single row group)
    auto load_x1 = [&](uint4 *xv, float *sv, int kb) {
        const int xi = g >> 1;
#pragma unroll
        for (int j = 0; j < SB; j++) {
            const int64_t u = (int64_t)kb * SB + j;
            xv[j] = xi < M ? __ldg(reinterpret_cast<const uint4 *>(xlane + ((int64_t)xi * nsub + u) * 32))
                           : make_uint4(0u, 0u, 0u, 0u);
            sv[j] = (MODE == WEFT_CU_AFFINE && t < M) ? __ldg(XS + (int64_t)t * nsub + u) : 0.0f;
        }
    };

    Stage<MODE, SDT, SB, GPB> st[D];
    int l_n = 0, l_i = 0, l_wu = (int)blockIdx.x;
    auto load_next = [&](Stage<MODE, SDT, SB, GPB> &s) {
        if (l_n < total) {
            const int kb = warp + l_i * KW;
            if (kb < nblk) s.load(w, qb, l_wu % ntiles, nblk, kb, ng, g);
        }
        l_n++;
        if (++l_i == per) {
            l_i = 0;
            l_wu += (int)gridDim.x;
        }
    };
#pragma unroll
    for (int s = 0; s < D; s++) load_next(st[s]);

    float acc[RQ][2], C[RQ][4], sxg[RQ];
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        acc[q][0] = acc[q][1] = 0.0f;
        sxg[q] = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) C[q][r] = 0.0f;
    }
    uint4 xc[SB];
    float sc[SB];
#pragma unroll
    for (int j = 0; j < SB; j++) {
        xc[j] = make_uint4(0u, 0u, 0u, 0u);
        sc[j] = 0.0f;
    }
    if (RQ == 1 && warp < nblk) load_x1(xc, sc, warp);

    auto compute = [&](const Stage<MODE, SDT, SB, GPB> &S, int kb, int rg) {
#pragma unroll
        for (int j = 0; j < SB; j++) {
            const bool first = j % SPB == 0, last = (j + 1) % SPB == 0;
            uint32_t Pg[4], Ph[4];
            q4_dec_word(S.wg[j], Pg);
            q4_dec_word(S.wh[j], Ph);
            float sg = 0.0f, sh = 0.0f, bg = 0.0f, bh = 0.0f;
            if (last) {
                sg = S.sg.get(j / SPB);
                sh = S.sh.get(j / SPB);
                if (MODE == WEFT_CU_AFFINE) { // b + 8s, one rounding
                    bg = fmaf(8.0f, sg, S.bg.get(j / SPB));
                    bh = fmaf(8.0f, sh, S.bh.get(j / SPB));
                }
            }
            const int64_t u = (int64_t)kb * SB + j;
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                uint4 xv;
                float ls;
                if (RQ == 1) {
                    xv = xc[j];
                    ls = sc[j];
                } else {
                    const int xi = rg * 4 * RQ + 4 * q + (g >> 1), si = rg * 4 * RQ + 4 * q + t;
                    xv = xi < M ? __ldg(reinterpret_cast<const uint4 *>(xlane + ((int64_t)xi * nsub + u) * 32))
                                : make_uint4(0u, 0u, 0u, 0u);
                    ls = (MODE == WEFT_CU_AFFINE && si < M) ? __ldg(XS + (int64_t)si * nsub + u) : 0.0f;
                }
                if (first) C[q][0] = C[q][1] = C[q][2] = C[q][3] = 0.0f;
                q4_mma(C[q], Pg[0], Ph[0], Pg[1], Ph[1], xv.x, xv.y);
                q4_mma(C[q], Pg[2], Ph[2], Pg[3], Ph[3], xv.z, xv.w);
                if (MODE == WEFT_CU_AFFINE) sxg[q] = first ? ls : __fadd_rn(sxg[q], ls);
                if (last) {
                    const float pg = __fadd_rn(C[q][0], C[q][1]), ph = __fadd_rn(C[q][2], C[q][3]);
                    if (MODE == WEFT_CU_AFFINE) {
                        acc[q][0] = fmaf(sg, pg, fmaf(bg, sxg[q], acc[q][0]));
                        acc[q][1] = fmaf(sh, ph, fmaf(bh, sxg[q], acc[q][1]));
                    } else {
                        acc[q][0] = fmaf(sg, pg, acc[q][0]);
                        acc[q][1] = fmaf(sh, ph, acc[q][1]);
                    }
                }
            }
        }
    };

    // End of a work unit: the warps' sums meet in order ((w0 + w1) + w2) + ..., then the epilogue.
    auto finish = [&](int wu, int k) {
        float *rb = red + (size_t)(k & 1) * (size_t)(KW - 1) * RQ * 64;
        if (warp > 0) {
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                rb[((warp - 1) * RQ + q) * 64 + lane] = acc[q][0];
                rb[((warp - 1) * RQ + q) * 64 + 32 + lane] = acc[q][1];
            }
        }
        __syncthreads();
        if (warp == 0) {
            const int64_t tile = wu % ntiles;
            const int rg = (int)(wu / ntiles);
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                float v[2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    v[r] = acc[q][r];
                    for (int w2 = 1; w2 < KW; w2++) v[r] = __fadd_rn(v[r], rb[((w2 - 1) * RQ + q) * 64 + r * 32 + lane]);
                }
                const int i = rg * 4 * RQ + 4 * q + t;
                if (i >= M) continue;
                if (epi.mode == WEFT_CU_EPI_SWIGLU) {
                    const float x = v[0];
                    epi.y[0][(int64_t)i * epi.ld[0] + tile * 8 + g] = x / (1.0f + expf(-x)) * v[1];
                    continue;
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int64_t o = tile * 16 + g + 8 * r;
                    const int s = o < epi.end[0] ? 0 : o < epi.end[1] ? 1 : 2;
                    const int64_t oo = s == 0 ? o : o - epi.end[s - 1];
                    const float *bias = s == 0 ? epi.bias[0] : s == 1 ? epi.bias[1] : epi.bias[2];
                    const int64_t ld = s == 0 ? epi.ld[0] : s == 1 ? epi.ld[1] : epi.ld[2];
                    float val = v[r];
                    if (bias) val = __fadd_rn(val, bias[oo]);
                    float *dst = seg_ptr(epi, s) + (int64_t)i * ld + oo;
                    *dst = epi.accumulate ? __fadd_rn(*dst, val) : val;
                }
            }
        }
#pragma unroll
        for (int q = 0; q < RQ; q++) acc[q][0] = acc[q][1] = 0.0f;
    };

    int c_i = 0, c_wu = (int)blockIdx.x, c_k = 0;
    for (int n0 = 0; n0 < total; n0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            if (n0 + s >= total) break; // uniform across the block
            const int kb = warp + c_i * KW;
            uint4 xn[SB];
            float sn[SB];
            if (RQ == 1) { // the next item's activations, one step ahead
                const int nkb = warp + (c_i + 1 == per ? 0 : c_i + 1) * KW;
                if (n0 + s + 1 < total && nkb < nblk) {
                    load_x1(xn, sn, nkb);
                } else {
#pragma unroll
                    for (int j = 0; j < SB; j++) {
                        xn[j] = make_uint4(0u, 0u, 0u, 0u);
                        sn[j] = 0.0f;
                    }
                }
            }
            if (kb < nblk) compute(st[s], kb, (int)(c_wu / ntiles));
            if (RQ == 1) {
#pragma unroll
                for (int j = 0; j < SB; j++) {
                    xc[j] = xn[j];
                    sc[j] = sn[j];
                }
            }
            if (c_i == per - 1) {
                finish(c_wu, c_k);
                c_k++;
                c_wu += (int)gridDim.x;
                c_i = 0;
            } else {
                c_i++;
            }
            load_next(st[s]);
        }
    }
}

__global__ void xq_prep_kernel(const float *__restrict__ X, int64_t ldx, int M, int64_t K, uint32_t *F,
                               float *S) {
    const int64_t nch = K / 8, nsub = K / 32;
    const int64_t gc = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = gc / nch, c = gc % nch;
    const bool ok = i < M;
    float v[8];
    if (ok) {
        const float4 *xp = reinterpret_cast<const float4 *>(X + i * ldx + 8 * c);
        const float4 a = xp[0], b = xp[1];
        v[0] = a.x;
        v[1] = a.y;
        v[2] = a.z;
        v[3] = a.w;
        v[4] = b.x;
        v[5] = b.y;
        v[6] = b.z;
        v[7] = b.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = 0.0f;
    }
    const int64_t u = c >> 2;
    const float s = q4_prep_chunk(v, F + (ok ? i * nsub + u : 0) * 32, (int)(c & 3), ok);
    if (ok && (c & 3) == 0) S[i * nsub + u] = s;
}

template <int MODE, int SDT, int SB, int GPB, int RQ>
cudaError_t launch_q4x(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                       cudaStream_t st) {
    auto kern = q4x_kernel<MODE, SDT, SB, GPB, RQ>;
    const int tiles = (int)(d.rows / 16), nrg = (M + 4 * RQ - 1) / (4 * RQ), nwork = tiles * nrg;
    const size_t smem = sizeof(float) * 2 * (size_t)(KW - 1) * RQ * 64;
    int dev = 0, sms = 0, occ = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, KW * 32, smem);
    if (e != cudaSuccess) return e;
    const int64_t cap = (int64_t)(occ > 0 ? occ : 1) * (sms > 0 ? sms : 1);
    const int grid = (int)(nwork < cap ? nwork : cap);
    kern<<<grid, KW * 32, smem, st>>>(d, xq->f, xq->s, M, epi, nwork);
    return cudaGetLastError();
}

template <int MODE, int SDT, int SB, int GPB>
cudaError_t launch_rq(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, cudaStream_t st) {
    // Warps per tile: the weight shape alone, exactly as mma_q4.cu picks them (the order of the warps' sums).
    const int KW = SB == 4 && d.rows / 16 < 528 ? 8 : 4;
    if (M <= 4) return launch_q4x<MODE, SDT, SB, GPB, 1>(d, xq, M, epi, KW, st);
    if (M <= 16) return launch_q4x<MODE, SDT, SB, GPB, 4>(d, xq, M, epi, KW, st);
    return launch_q4x<MODE, SDT, SB, GPB, 8>(d, xq, M, epi, KW, st);
}

template <int MODE, int SDT>
cudaError_t launch_g(const WDev &d, int group, const weft_cu_xq *xq, int M, const weft_cu_epi &epi,
                     cudaStream_t st) {
    const int sb = d.sb, gpb = 32 * sb / group;
    if (sb == 4 && gpb == 4) return launch_rq<MODE, SDT, 4, 4>(d, xq, M, epi, st);
    if (sb == 2 && gpb == 2) return launch_rq<MODE, SDT, 2, 2>(d, xq, M, epi, st);
    if (sb == 1 && gpb == 1) return launch_rq<MODE, SDT, 1, 1>(d, xq, M, epi, st);
    if constexpr (MODE == WEFT_CU_AFFINE) {
        if (sb == 4 && gpb == 2) return launch_rq<MODE, SDT, 4, 2>(d, xq, M, epi, st);
        if (sb == 2 && gpb == 1) return launch_rq<MODE, SDT, 2, 1>(d, xq, M, epi, st);
        if (sb == 4 && gpb == 1) return launch_rq<MODE, SDT, 4, 1>(d, xq, M, epi, st);
    }
    return cudaErrorInvalidValue;
}

} // namespace

extern "C" cudaError_t weft_cu_xq_prep(const float *X, int64_t ldx, int M, const weft_cu_xq *xq,
                                       cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (xq->K <= 0 || xq->K % 32 || ldx % 4) return cudaErrorInvalidValue;
    const int64_t threads = (int64_t)M * (xq->K / 8), blocks = (threads + 255) / 256;
    xq_prep_kernel<<<(unsigned)blocks, 256, 0, stream>>>(X, ldx, M, xq->K, xq->f, xq->s);
    return cudaGetLastError();
}

extern "C" weft_cu_epi weft_cu_epi_store(float *Y, int64_t ldy, const float *bias, int accumulate,
                                         int64_t rows) {
    weft_cu_epi e;
    memset(&e, 0, sizeof e);
    e.mode = WEFT_CU_EPI_STORE;
    e.y[0] = e.y[1] = e.y[2] = Y;
    e.ld[0] = e.ld[1] = e.ld[2] = ldy;
    e.end[0] = e.end[1] = e.end[2] = rows;
    e.bias[0] = bias;
    e.accumulate = accumulate;
    return e;
}

extern "C" cudaError_t weft_cu_matmul_q4x(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                          const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (w->kind != WEFT_CU_Q4F || !weft_cu_q4f_ok(w->rows, w->cols, w->group) || xq->K != w->cols)
        return cudaErrorInvalidValue;
    if (epi->mode == WEFT_CU_EPI_SWIGLU && (w->rows % 16 || epi->accumulate || epi->bias[0]))
        return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
        return launch_g<WEFT_CU_OFF8, WEFT_CU_S_F16>(d, w->group, xq, M, *epi, stream);
    if (w->mode == WEFT_CU_AFFINE) {
        if (w->sdt == WEFT_CU_S_F32)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_F32>(d, w->group, xq, M, *epi, stream);
        if (w->sdt == WEFT_CU_S_F16)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_F16>(d, w->group, xq, M, *epi, stream);
        if (w->sdt == WEFT_CU_S_BF16)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_BF16>(d, w->group, xq, M, *epi, stream);
    }
    return cudaErrorNotSupported;
}
