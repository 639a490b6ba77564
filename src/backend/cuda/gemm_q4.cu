// The 4-bit tensor-core matmul for many activation rows (prefill chunks): weft_cu_gemm_q4x (cuda_kernels.h).
//
// Same arithmetic as mma_q4x.cu — the product of a WEFT_CU_Q4F weight and prepared activations is defined
// there (mma_q4.cu's header): per output, K blocks are taken slot by slot (slot w = the blocks w, w + KW,
// w + 2·KW, ... in ascending order, KW from the weight shape), each slot's groups summed from 0 with the same
// mma sequence and fold, and the slot sums added in slot order ((s0 + s1) + s2) + ... . mma_q4x.cu gives
// each slot to its own warp and adds the warps' sums at the end; this kernel walks the slots one after the
// other in one warp, keeping the slot's sum (acc) and the running total (tot) — the same additions in the
// same order, so both kernels give the same bits (bench_cuda_matmul checks it for every layout).
//
// What changes is the data flow. A block owns 128 weight rows (8 tiles of 16) x 64 activation rows. Each K
// block's weight words, scales and prepared activations are copied to shared memory once (cp.async, NST
// stages in flight) and then read by every warp that needs them: 8 warps, warp (wm, wn) computes tiles
// 2·wm, 2·wm + 1 against activation rows 32·wn .. 32·wn + 31 (8 quads), so each decoded A fragment feeds
// 16 mma and each activation fragment 4. mma_q4x.cu's many-row kernel instead re-reads the activations from
// L2 for every 16-row tile and decodes each weight once per 32 rows.
#include "cuda_kernels.h"
#include "pdl.cuh"
#include "q4_mma.cuh"
#include "cp_async.cuh"

namespace {

constexpr int GT = 8;  // weight tiles (16 rows) per block
constexpr int GR = 64; // activation rows per block
constexpr int NST = 3; // K blocks of copies in flight
constexpr int WQ = 8;  // activation quads per warp: 8 warps of 2 tiles x 32 rows
constexpr int NTHR = 32 * 4 * (GR / (4 * WQ));

// One pipeline stage: K block kb of the block's 8 tiles and 64 activation rows.
template <int MODE, int SDT, int SB, int GPB> struct alignas(16) GStage {
    static constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2, SBYTES = GPB * SSZ;
    uint32_t a[GT][64 * SB];          // q4f words of the block (tile-major, as in global memory)
    uint32_t x[GR][32 * SB];          // prepared activations, sub-blocks kb·SB .. kb·SB + SB − 1
    float xs[GR][SB];                 // their 32-element sums (AFFINE)
    unsigned char s[GT * 16][SBYTES]; // each weight row's GPB scales of the block
    unsigned char b[MODE == WEFT_CU_AFFINE ? GT * 16 : 1][SBYTES]; // and biases (AFFINE)

    __device__ __forceinline__ float scale(const unsigned char *p, int gi) const {
        if constexpr (SSZ == 4) return reinterpret_cast<const float *>(p)[gi];
        const uint32_t h = reinterpret_cast<const unsigned short *>(p)[gi];
        return SDT == WEFT_CU_S_F16 ? f16_bits(h) : bf16_bits(h);
    }
};

// A thread's share of the copies of one K block, fixed for the whole kernel (only the K block's offset
// changes): 16-byte chunks o of the weight tiles T0, T0 + TPI, ..., chunks o of activation rows r0, r0 + RPI,
// ..., the 32-element sums of row tid (AFFINE), the scales (biases) of weight row tid % 128.
template <int MODE, int SDT, int SB, int GPB> struct GLoad {
    using St = GStage<MODE, SDT, SB, GPB>;
    static constexpr int CPT = 16 * SB, TPI = NTHR / CPT; // chunks per tile, tiles per pass
    static constexpr int CPR = 8 * SB, RPI = NTHR / CPR;  // chunks per activation row, rows per pass
    const uint32_t *a, *x;
    const float *xs;
    const char *sc;
    int64_t a_step, x_step; // words between passes
    int t0, oa, r0, ox, nta, nrx, sr;
    bool sc_ok, xs_ok;

    __device__ __forceinline__ GLoad(const WDev &w, const uint32_t *XF, const float *XS, int M, int64_t tile0,
                                     int64_t ntiles, int row0, int nblk, int tid) {
        const int64_t nsub = w.cols / 32, ng = w.cols >> w.gshift;
        t0 = tid / CPT, oa = tid % CPT, r0 = tid / CPR, ox = tid % CPR;
        // passes whose tile / row exists (the rest copy zeros): counts, not per-pass tests
        nta = 0;
        for (int k = 0; k * TPI + t0 < GT && tile0 + k * TPI + t0 < ntiles; k++) nta++;
        nrx = 0;
        for (int k = 0; k < GR / RPI && row0 + r0 + k * RPI < M; k++) nrx++;
        // a zero-filling copy still names a source: the first pass's, or the array's start when that is past
        // the end too
        a = static_cast<const uint32_t *>(w.q) + (nta ? (tile0 + t0) * nblk * 64 * SB + 4 * oa : 0);
        a_step = (int64_t)TPI * nblk * 64 * SB;
        x = XF + (nrx ? ((int64_t)(row0 + r0) * nsub) * 32 + 4 * ox : 0);
        x_step = (int64_t)RPI * nsub * 32;
        xs_ok = tid < GR && row0 + tid < M;
        xs = XS + (int64_t)(xs_ok ? row0 + tid : 0) * nsub;
        sr = tid % (GT * 16);
        sc_ok = tid < GT * 16 * (MODE == WEFT_CU_AFFINE ? 2 : 1) && tile0 + sr / 16 < ntiles;
        const char *base = static_cast<const char *>(tid >= GT * 16 ? w.b : w.s);
        sc = base + (sc_ok ? (tile0 * 16 + sr) * ng : 0) * St::SSZ;
        if (!xs_ok) xs = XS;
    }

    __device__ __forceinline__ void load(St &S, int kb, int tid) const {
#pragma unroll
        for (int k = 0; k < (GT + TPI - 1) / TPI; k++) {
            const int T = t0 + k * TPI;
            if (T < GT) {
                const bool ok = k < nta;
                cp_async<16>(&S.a[T][4 * oa], ok ? a + k * a_step + (int64_t)kb * 64 * SB : a, ok);
            }
        }
#pragma unroll
        for (int k = 0; k < GR / RPI; k++) {
            const bool ok = k < nrx;
            cp_async<16>(&S.x[r0 + k * RPI][4 * ox], ok ? x + k * x_step + (int64_t)kb * SB * 32 : x, ok);
        }
        if (MODE == WEFT_CU_AFFINE && tid < GR) cp_async<4 * SB>(&S.xs[tid][0], xs + (int64_t)kb * SB, xs_ok);
        if (tid < GT * 16 * (MODE == WEFT_CU_AFFINE ? 2 : 1))
            cp_async<St::SBYTES>(tid >= GT * 16 ? &S.b[sr][0] : &S.s[sr][0],
                                 sc_ok ? sc + (int64_t)kb * GPB * St::SSZ : sc, sc_ok);
    }
};

// Grid: (ceil(tiles / 8), ceil(M / 64)); 256 threads. Lane (g = lane / 4, t = lane % 4) of warp (wm, wn), as
// in mma_q4x.cu per tile and quad: B column g = activation row 4q + g/2, part g % 2; C: tile rows g, g + 8
// for activation row 4q + t.
template <int MODE, int SDT, int SB, int GPB>
__global__ void __launch_bounds__(NTHR, 1)
    gemm_q4_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, int KW,
                   weft_cu_epi epi) {
    using St = GStage<MODE, SDT, SB, GPB>;
    constexpr int SPB = SB / GPB; // sub-blocks per scale group
    extern __shared__ __align__(16) unsigned char smem[];
    St *stage = reinterpret_cast<St *>(smem);
    weft_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    const int64_t ntiles = w.rows / 16, tile0 = (int64_t)blockIdx.x * GT;
    const int row0 = blockIdx.y * GR, nblk = (int)(w.cols / (32 * SB));
    const bool mt[2] = {tile0 + 2 * wm < ntiles, tile0 + 2 * wm + 1 < ntiles};
    auto kb_of = [&](int i, bool &slot_end) { return q4_slot_block(i, nblk, KW, slot_end); };

    float acc[2][WQ][2], tot[2][WQ][2], C[2][WQ][4], sxg[WQ];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int q = 0; q < WQ; q++) {
            acc[m][q][0] = acc[m][q][1] = 0.0f;
            tot[m][q][0] = tot[m][q][1] = 0.0f;
#pragma unroll
            for (int r = 0; r < 4; r++) C[m][q][r] = 0.0f;
        }
#pragma unroll
    for (int q = 0; q < WQ; q++) sxg[q] = 0.0f;

    bool dummy;
    const GLoad<MODE, SDT, SB, GPB> ld(w, XF, XS, M, tile0, ntiles, row0, nblk, tid);
#pragma unroll
    for (int p = 0; p < NST - 1; p++) {
        if (p < nblk) ld.load(stage[p], kb_of(p, dummy), tid);
        cp_commit();
    }
    int slot = 0;
#pragma unroll 1
    for (int i = 0; i < nblk; i++) {
        {
            cp_wait<NST - 2>();
            __syncthreads(); // block i has landed for all threads; block i − 1's stage is free again
            if (i + NST - 1 < nblk) ld.load(stage[(i + NST - 1) % NST], kb_of(i + NST - 1, dummy), tid);
            cp_commit();
            bool slot_end;
            (void)kb_of(i, slot_end);
            const St &S = stage[i % NST];
            // Scale groups two at a time (the compiler hoists a step's activation loads: all of a block's
            // groups at once would run out of registers; two at once measured 3-4% faster than one), each
            // group's SPB sub-blocks unrolled. Tiles past the weight's end compute on zero-filled copies and
            // store nothing.
#pragma unroll 2
            for (int gi = 0; gi < GPB; gi++) {
#pragma unroll
                for (int js = 0; js < SPB; js++) {
                    const int j = gi * SPB + js;
                    const bool first = js == 0, last = js == SPB - 1;
                    uint32_t P[2][2][4];
                    float sc[2][2], bc[2][2];
#pragma unroll
                    for (int m = 0; m < 2; m++) {
                        // the lane's words of rows g and g + 8 of tile 2·wm + m for sub-block j
                        q4_dec_word(S.a[2 * wm + m][lane * SB + j], P[m][0]);
                        q4_dec_word(S.a[2 * wm + m][32 * SB + lane * SB + j], P[m][1]);
                        sc[m][0] = sc[m][1] = bc[m][0] = bc[m][1] = 0.0f;
                        if (last) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const int r = (2 * wm + m) * 16 + g + 8 * h;
                                sc[m][h] = S.scale(S.s[r], gi);
                                if (MODE == WEFT_CU_AFFINE)
                                    bc[m][h] = q4_affine_b(sc[m][h], S.scale(S.b[r], gi));
                            }
                        }
                    }
#pragma unroll
                    for (int q = 0; q < WQ; q++) {
                        const int xr = 4 * WQ * wn + 4 * q;
                        const uint4 xv = *reinterpret_cast<const uint4 *>(
                            &S.x[xr + (g >> 1)][32 * j + (g & 1) * 16 + 4 * t]);
                        if (MODE == WEFT_CU_AFFINE) {
                            const float ls = S.xs[xr + t][j];
                            sxg[q] = first ? ls : __fadd_rn(sxg[q], ls);
                        }
#pragma unroll
                        for (int m = 0; m < 2; m++) {
                            q4_mma_sub(C[m][q], P[m][0], P[m][1], xv, first);
                            if (last)
                                q4_fold<MODE>(acc[m][q], C[m][q], sc[m][0], sc[m][1], bc[m][0], bc[m][1],
                                              sxg[q]);
                        }
                    }
                }
            }
            if (slot_end) { // the slot's sum joins the total (the first slot's sum is the total)
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int q = 0; q < WQ; q++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            tot[m][q][h] = slot == 0 ? acc[m][q][h] : __fadd_rn(tot[m][q][h], acc[m][q][h]);
                            acc[m][q][h] = 0.0f;
                        }
                slot++;
            }
        }
    }
    cp_wait<0>();
    // slots without blocks (K shorter than KW blocks) add their zero sums, as mma_q4x.cu's idle warps do
    for (; slot < KW; slot++)
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int q = 0; q < WQ; q++) {
                tot[m][q][0] = __fadd_rn(tot[m][q][0], 0.0f);
                tot[m][q][1] = __fadd_rn(tot[m][q][1], 0.0f);
            }
#pragma unroll
    for (int m = 0; m < 2; m++) {
        if (!mt[m]) continue;
#pragma unroll
        for (int q = 0; q < WQ; q++)
            q4_epi_store(epi, tile0 + 2 * wm + m, row0 + 4 * WQ * wn + 4 * q + t, M, g, t, tot[m][q][0],
                         tot[m][q][1]);
    }
}

template <int MODE, int SDT, int SB, int GPB>
cudaError_t launch(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                   cudaStream_t st) {
    auto kernel = gemm_q4_kernel<MODE, SDT, SB, GPB>;
    const size_t smem = sizeof(GStage<MODE, SDT, SB, GPB>) * NST;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int64_t ntiles = d.rows / 16;
    const dim3 grid((unsigned)((ntiles + GT - 1) / GT), (unsigned)((M + GR - 1) / GR));
    return weft_pdl_launch(kernel, grid, dim3(NTHR), smem, st, d, (const uint32_t *)xq->f,
                           (const float *)xq->s, M, KW, epi);
}

template <int MODE, int SDT>
cudaError_t launch_g(const WDev &d, int group, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                     cudaStream_t st) {
    constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2;
    const int sb = d.sb, gpb = 32 * sb / group;
    // Scales copied in pieces of 4, 8 or 16 bytes: GPB·SSZ >= 4 (one 2-byte scale per block is refused).
    if (sb == 4 && gpb == 4) return launch<MODE, SDT, 4, 4>(d, xq, M, epi, KW, st);
    if (sb == 2 && gpb == 2) return launch<MODE, SDT, 2, 2>(d, xq, M, epi, KW, st);
    if constexpr (SSZ == 4) {
        if (sb == 1 && gpb == 1) return launch<MODE, SDT, 1, 1>(d, xq, M, epi, KW, st);
    }
    if constexpr (MODE == WEFT_CU_AFFINE) {
        if (sb == 4 && gpb == 2) return launch<MODE, SDT, 4, 2>(d, xq, M, epi, KW, st);
        if constexpr (SSZ == 4) {
            if (sb == 2 && gpb == 1) return launch<MODE, SDT, 2, 1>(d, xq, M, epi, KW, st);
            if (sb == 4 && gpb == 1) return launch<MODE, SDT, 4, 1>(d, xq, M, epi, KW, st);
        }
    }
    return cudaErrorNotSupported;
}

} // namespace

extern "C" int weft_cu_q4_kw(int64_t rows, int64_t cols) {
    return weft_cu_q4f_sb(cols) == 4 && rows / 16 < 528 ? 8 : 4;
}

extern "C" cudaError_t weft_cu_gemm_q4x(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                        const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    const int KW = weft_cu_q4_kw(w->rows, w->cols);
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
        return launch_g<WEFT_CU_OFF8, WEFT_CU_S_F16>(d, w->group, xq, M, *epi, KW, stream);
    if (w->mode == WEFT_CU_AFFINE) {
        if (w->sdt == WEFT_CU_S_F32)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_F32>(d, w->group, xq, M, *epi, KW, stream);
        if (w->sdt == WEFT_CU_S_F16)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_F16>(d, w->group, xq, M, *epi, KW, stream);
        if (w->sdt == WEFT_CU_S_BF16)
            return launch_g<WEFT_CU_AFFINE, WEFT_CU_S_BF16>(d, w->group, xq, M, *epi, KW, stream);
    }
    return cudaErrorNotSupported;
}
