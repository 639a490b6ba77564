// The 4-bit tensor-core matmul on prepared activations (weft_cu_matmul_q4x, cuda_kernels.h), and the prep.
//
// Same arithmetic as mma_q4.cu (its header says how a WEFT_CU_Q4F product is defined): the same A fragments,
// the same bf16 hi/lo B columns, the same mma sequence per group, the same fold, the same warps per tile
// (KW from the weight shape) and the same order of the warps' sums — so both kernels give the same bits.
// What differs is only where work happens:
//  - the activations arrive already split into hi/lo bf16 pairs in fragment order, with their 32-element
//    sums (weft_cu_xq, written once per matmul input by the prep or the RMSNorm that makes them), instead of
//    every warp converting fp32 x for every tile;
//  - each warp keeps D K blocks of weight and scale loads in flight (the scales ride with the words instead
//    of being read when a group ends; D = 4 at one activation quad), and loads the next block's activations
//    one step ahead;
//  - epilogues: bias and residual add (as before), split of one matrix's outputs into up to three buffers
//    (Q|K|V fused at upload), and SwiGLU (gate|up fused at upload with rows interleaved by 8, so a lane holds
//    gate row o and up row o of one activation row: out = g / (1 + e^(−g))·u, the swiglu kernel's formula).
#include "cuda_kernels.h"
#include "q4_mma.cuh"
#include "pdl.cuh"

namespace {

// x of one K block for RQ == 1 (activation rows row0 .. row0 + 3): the lane's B words and the sums of row
// row0 + t.
template <int MODE, int SB>
__device__ __forceinline__ void q4x_load_x1(uint4 (&xv)[SB], float (&sv)[SB], const uint32_t *xlane,
                                            const float *__restrict__ XS, int64_t nsub, int M, int kb, int g,
                                            int t, int row0) {
    const int xi = row0 + (g >> 1);
    t += row0;
#pragma unroll
    for (int j = 0; j < SB; j++) {
        const int64_t u = (int64_t)kb * SB + j;
        xv[j] = xi < M ? __ldg(reinterpret_cast<const uint4 *>(xlane + ((int64_t)xi * nsub + u) * 32))
                       : make_uint4(0u, 0u, 0u, 0u);
        sv[j] = (q4_affine<MODE> && t < M) ? __ldg(XS + (int64_t)t * nsub + u) : 0.0f;
    }
}

// Grid: (N / 16 tiles, activation row groups of 4·RQ rows). Block: KW warps (KW from the weight shape, as
// mma_q4.cu); warp w takes the K blocks w, w + KW, ... with D blocks of weight and scale loads in flight and
// (RQ == 1) the next block's activations loaded one step ahead. Lane (g = lane / 4, t = lane % 4), per
// activation quad q: B column g = activation row 4q + g/2, part g % 2; C fragment: tile rows g, g + 8 for
// activation row 4q + t.
// X1S (M == 1, batch-1 decode): each warp copies the activation row's words and sums of its own K blocks
// into shared memory with cp.async right after its weight loads (one memory round trip for both, no block
// barrier), and reads each K block's B words from there when needed — no activation registers carried
// between steps, so the kernel fits 80 registers and three 8-warp blocks per SM (the measured limit was
// latency at 16 warps per SM with 125 registers, bench/NOTES.md session 6). Same words, same mma: same bits.
// (Register bounds: the OFF8 instantiations are held to three 8-warp blocks per SM with X1S and two without;
// the affine ones carry biases too and would spill, so they are left to the compiler.)
template <int MODE, int SDT, int SB, int GPB, int RQ, bool X1S = false>
__global__ void __launch_bounds__(256, q4_affine<MODE> ? 1
                                       : X1S           ? 3
                                       : RQ == 1       ? 2
                                                       : 1)
    q4x_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M,
               weft_cu_epi epi) {
    constexpr int D = RQ == 8 ? 2 : RQ == 4 ? 3 : 4; // K blocks of loads in flight per warp
    extern __shared__ __align__(
        16) float red[]; // [KW − 1][RQ][2][32]: the warps' sums; X1S: then x words [nsub][32], sums
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KW = (int)(blockDim.x >> 5);
    const int g = lane >> 2, t = lane & 3;
    // RQ == 1 with several row groups: the groups of one tile are consecutive blocks (they share its weight
    // loads through L2); otherwise blockIdx.y is the row group.
    const int nrg1 = RQ == 1 ? (M + 3) / 4 : 1;
    const int64_t tile = RQ == 1 ? blockIdx.x / nrg1 : blockIdx.x, nsub = w.cols / 32;
    const int nblk = (int)(w.cols / (32 * SB)),
              row0 = RQ == 1 ? (int)(blockIdx.x % nrg1) * 4 : (int)blockIdx.y * 4 * RQ;
    const int mine = warp < nblk ? (nblk - warp + KW - 1) / KW : 0; // this warp's K blocks
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + lane * SB;
    const uint32_t *xlane = XF + (g & 1) * 16 + 4 * t;

    Stage<MODE, SDT, SB, GPB> st[D];
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < mine) st[s].load(w, qb, tile, nblk, warp + s * KW, g);
    weft_pdl_enter(); // the weights' first loads are in flight (pdl.cuh); activations only after this
    uint32_t *xs = reinterpret_cast<uint32_t *>(red + (KW - 1) * RQ * 64);
    float *xsum = reinterpret_cast<float *>(xs + nsub * 32);
    // X1S: the warp's blocks of the row (and sums) staged in two groups (q4_stage_slot), so a warp with many
    // K blocks starts on its first ones without waiting for all of its row.
    if constexpr (X1S)
        q4_stage_slot<SB, D>(xs, XF, q4_affine<MODE> ? xsum : nullptr, XS, warp, KW, mine, lane);
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
    if (RQ == 1 && !X1S && mine > 0) q4x_load_x1<MODE, SB>(xc, sc, xlane, XS, nsub, M, warp, g, t, row0);
    for (int i0 = 0; i0 < mine; i0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int i = i0 + s;
            if (i < mine) { // warp-uniform
                uint4 xn[SB];
                float sn[SB];
                if constexpr (X1S) { // this block's B words of row 0 (lanes g < 2) and its sums (lane t 0)
                    if (i == D) q4_stage_rest();
                    const int kb = warp + i * KW;
#pragma unroll
                    for (int j = 0; j < SB; j++) {
                        const int64_t u = (int64_t)kb * SB + j;
                        xc[j] = g < 2 ? *reinterpret_cast<const uint4 *>(xs + u * 32 + (g & 1) * 16 + 4 * t)
                                      : make_uint4(0u, 0u, 0u, 0u);
                        sc[j] = (q4_affine<MODE> && t == 0) ? xsum[u] : 0.0f;
                    }
                } else if (RQ == 1) {
                    if (i + 1 < mine) {
                        q4x_load_x1<MODE, SB>(xn, sn, xlane, XS, nsub, M, warp + (i + 1) * KW, g, t, row0);
                    } else {
#pragma unroll
                        for (int j = 0; j < SB; j++) {
                            xn[j] = make_uint4(0u, 0u, 0u, 0u);
                            sn[j] = 0.0f;
                        }
                    }
                }
                q4x_block<MODE, SDT, SB, GPB, RQ>(st[s], xc, sc, xlane, XS, nsub, M, row0, warp + i * KW, g,
                                                  t, acc, C, sxg);
                if (RQ == 1 && !X1S) {
#pragma unroll
                    for (int j = 0; j < SB; j++) {
                        xc[j] = xn[j];
                        sc[j] = sn[j];
                    }
                }
                if (i + D < mine) st[s].load(w, qb, tile, nblk, warp + (i + D) * KW, g);
            }
        }
    }
    // The warps' sums meet in order ((w0 + w1) + w2) + ..., then the epilogue.
    if (warp > 0) q4_put_sums<RQ>(red, warp, acc, lane);
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        float v0 = acc[q][0], v1 = acc[q][1];
        for (int w2 = 1; w2 < KW; w2++) {
            v0 = __fadd_rn(v0, red[((w2 - 1) * RQ + q) * 64 + lane]);
            v1 = __fadd_rn(v1, red[((w2 - 1) * RQ + q) * 64 + 32 + lane]);
        }
        q4_epi_store(epi, tile, row0 + 4 * q + t, M, g, t, v0, v1);
    }
}

__global__ void xq_prep_kernel(const float *__restrict__ X, int64_t ldx, int M, int64_t K, uint32_t *F,
                               float *S, bool f16) {
    weft_pdl_enter();
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
    const float s = q4_prep_chunk(v, F + (ok ? i * nsub + u : 0) * 32, (int)(c & 3), ok, f16);
    if (ok && (c & 3) == 0) S[i * nsub + u] = s;
}

// X1S for K up to this: measured faster at K = 4096 (q|k|v +23%, gate|up +20%, back to back), slower at
// K = 14336 (down, −15%: each warp's longer row copy comes before its first mma), bench/NOTES.md session 6.
constexpr int64_t kX1SMaxK = 8192;

template <int MODE, int SDT, int SB, int GPB, int RQ, bool X1S = false>
cudaError_t launch_q4x(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                       cudaStream_t st) {
    const unsigned tiles = (unsigned)(d.rows / 16), nrg = (unsigned)((M + 4 * RQ - 1) / (4 * RQ));
    const size_t smem = sizeof(float) * (size_t)(KW - 1) * RQ * 64 +
                        (X1S ? (size_t)(d.cols / 32) * (32 * sizeof(uint32_t) + sizeof(float)) : 0);
    const dim3 grid = RQ == 1 ? dim3(tiles * nrg, 1) : dim3(tiles, nrg);
    auto kernel = q4x_kernel<MODE, SDT, SB, GPB, RQ, X1S>;
    const cudaError_t e = weft_smem_opt_in(kernel, smem); // (K sets smem: never lowered)
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(kernel, grid, dim3(KW * 32), smem, st, d, (const uint32_t *)xq->f,
                           (const float *)xq->s, M, epi);
}

template <int MODE, int SDT, int SB, int GPB>
cudaError_t launch_rq(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, cudaStream_t st) {
    const bool rq4 = epi.quads4 != 0;
    // Warps per tile: the weight shape alone, exactly as mma_q4.cu picks them (the order of the warps' sums).
    const int KW = weft_cu_q4_kw(d.rows, d.cols);
    // Up to 16 rows: one quad per block, the quads of a tile in consecutive blocks (its weights come from L2
    // after the first); measured faster than 4 quads per block (RQ 4: register-bound, x re-read per tile).
    // quads4 (WEFT_CU_T_RQ4, timing only) keeps the RQ 4 kernel for 5..16 rows. Same bits either way.
    if (M == 1 && d.cols <= kX1SMaxK && !epi.no_x1s)
        return launch_q4x<MODE, SDT, SB, GPB, 1, true>(d, xq, M, epi, KW, st);
    if (M <= 4 || (M <= 16 && !rq4)) return launch_q4x<MODE, SDT, SB, GPB, 1>(d, xq, M, epi, KW, st);
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
    if constexpr (q4_affine<MODE>) {
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
    return weft_pdl_launch(xq_prep_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, X, ldx, M, xq->K,
                           xq->f, xq->s, xq->f16 != 0);
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
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue; // (Q4F rows are multiples of 16)
    // Many rows (prefill chunks): the shared-memory GEMM (gemm_q4.cu), same bits; it refuses the layouts it
    // does not take (cudaErrorNotSupported) and the kernels here run them.
    const int64_t gemm_blocks = (w->rows / 16 + 7) / 8 * (((int64_t)M + 63) / 64);
    // Few rows: the GEMM with the K slots in separate blocks of one cluster (same bits) — for 5..16 rows, and
    // for 33..64 where the plain GEMM's grid would be too small (bench/NOTES.md session 8).
    const bool split = (M >= WEFT_CU_SPLIT_MIN_ROWS && M <= WEFT_CU_SPLIT_MAX_ROWS) ||
                       (M > 32 && M <= 64 && gemm_blocks < WEFT_CU_GEMM_MIN_BLOCKS);
    // 2..WEFT_CU_GEMV_MAX_ROWS rows of Q4_0 (decode rounds of few streams): the streaming kernel with the
    // rows staged whole (gemv_q4.cu), same bits, where the rows fit its shared memory (K up to about 4,500).
    // With epi->part, 9..16 rows too: its split-K form (every K slot in its own blocks, the slot sums added
    // by a second kernel), and on f16 buffers 17..32 (the split-K octet form of 32 rows).
    if (M >= 2 && (M <= WEFT_CU_GEMV_MAX_ROWS || (M <= (xq->f16 ? 32 : 16) && epi->part)) &&
        w->mode == WEFT_CU_OFF8 && epi->gemm == 0 && !epi->no_split && !epi->quads4 && !epi->no_gemv) {
        const cudaError_t e = weft_cu_gemv_q4(w, xq, M, epi, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    // 17..64 rows on small Q4_0 weights with the scratch: the wgmma GEMM with its K slots split over blocks
    // (then the kernels below where it refuses; bench/NOTES.md session 16: 64 rows on 4096×14336 0.0926 →
    // 0.0465 ms on f16 buffers, 0.1005 → 0.0689 on hi/lo ones, against the cluster-split GEMM)
    if (M > 16 && M <= 64 && gemm_blocks < WEFT_CU_GEMM_MIN_BLOCKS && epi->part && w->mode == WEFT_CU_OFF8 &&
        epi->gemm == 0 && !epi->no_split && !epi->quads4) {
        const cudaError_t e = weft_cu_gemm_q4w_sk(w, xq, M, epi, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    if (split && epi->gemm == 0 && !epi->no_split && !epi->quads4) {
        const cudaError_t e = weft_cu_gemm_q4s(w, xq, M, epi, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    if (M >= WEFT_CU_GEMM_MIN_ROWS && gemm_blocks >= WEFT_CU_GEMM_MIN_BLOCKS && epi->gemm >= 0) {
        cudaError_t e = cudaErrorNotSupported;
        if (epi->gemm == 0 && w->mode == WEFT_CU_OFF8) e = weft_cu_gemm_q4w(w, xq, M, epi, stream);
        if (e == cudaErrorNotSupported) e = weft_cu_gemm_q4x(w, xq, M, epi, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    // One row of Q4_0: the streaming kernel (gemv_q4.cu), same bits. It takes the MLX layouts too (checked by
    // bench_cuda_matmul) but was measured slower than the kernel here on them (group 64: 0.0204 vs 0.0174 ms
    // on 14336x4096, bench/NOTES.md session 10), so they stay here.
    if (M == 1 && w->mode == WEFT_CU_OFF8 && !epi->no_gemv) {
        const cudaError_t e = weft_cu_gemv_q4(w, xq, 1, epi, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    const WDev d = wdev(w);
    return q4_dispatch(w, xq, [&](auto mode, auto sdt) {
        return launch_g<decltype(mode)::value, decltype(sdt)::value>(d, w->group, xq, M, *epi, stream);
    });
}
