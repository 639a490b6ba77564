// The many-row 4-bit GEMM on wgmma (sm_90a): weft_cu_gemm_q4w (cuda_kernels.h).
//
// STATUS: verified on the H200 in session 6 (bench_cuda_matmul: the same bits as the mma.sync GEMM on every
// layout) but measured slower than it (0.8x at 512 rows), so it is reachable only through weft_cu_gemm_q4w
// (the harness's check and timing) and the WEFT_CU_T_WGMMA timing knob; weft_cu_matmul_q4x never picks it on
// its own. bench/NOTES.md (sessions 5, 6) has the plan and the measurements.
//
// Same arithmetic as gemm_q4.cu (mma_q4.cu's header defines it): the probe (bench/cuda/wgmma_probe.cu) showed
// that one wgmma m64nNk16 step with A in registers computes, per warp (rows 16w .. 16w + 15) and per n8
// column block, exactly what mma.sync m16n8k16 computes from the same fragment registers. So each mma.sync
// step s of a sub-block becomes one wgmma step over 64 weight rows x 128 columns (64 activation rows, hi and
// lo), with B in shared memory holding the same element at every k position: core-matrix row n of step
// (sub-block j, s), k half kk = the words (t = 0..3, word 2s + kk) of part n % 2 of activation row n / 2 —
// weft_cu_xq's words transposed 4 x 4 per part while staging. Groups start from +0.0 accumulators (zeroed
// registers, scale-d = 1), fold on the CUDA cores after wgmma.wait_group, and K blocks are walked slot by
// slot (q4_slot_block) with gemm_q4.cu's acc / tot sums.
//
// Block: 2 warpgroups (256 threads), warpgroup v owns weight tiles 4v .. 4v + 3 (warp w of it: tile 4v + w),
// both read the same 64 activation rows. Per K block: cp.async copies the raw prepared words (32·SB·64
// words) and sums, all threads transpose them into the wgmma layout, then each warpgroup runs its groups.
#include "cuda_kernels.h"
#include "pdl.cuh"
#include "q4_mma.cuh"
#include "wgmma.cuh"
#include "cp_async.cuh"

namespace {

constexpr int WR = 64;        // activation rows per block (N = 128 columns)
constexpr int NQ = WR / 4;    // n8 column blocks = activation quads
constexpr int WTHREADS = 256; // 2 warpgroups
constexpr int WTILES = 8;     // weight tiles per block

template <int SB> struct alignas(16) WSmem {
    uint32_t b[2][2 * SB][NQ][2][8][4]; // double-buffered: [step 2j + s][quad][k half][core row][word t]
    uint32_t raw[WR][32 * SB];          // the K block's prepared words as copied (weft_cu_xq order)
    float xs[2][WR][SB];                // their 32-element sums, double-buffered with b
    float tot[2 * NQ][WTHREADS];        // each thread's running total over the slots (registers are short)
};

// The raw copy of K block kb: activation rows row0 .. row0 + 63 (zeros past M), their sums (AFFINE).
template <int MODE, int SB>
__device__ __forceinline__ void w_copy(WSmem<SB> &S, int buf, const uint32_t *XF, const float *XS, int M,
                                       int64_t nsub, int row0, int kb, int tid) {
    for (int c = tid; c < WR * 8 * SB; c += WTHREADS) {
        const int r = c / (8 * SB), o = c % (8 * SB);
        const bool ok = row0 + r < M;
        cp_async<16>(&S.raw[r][4 * o],
                     XF + ((ok ? (int64_t)(row0 + r) : 0) * nsub + (int64_t)kb * SB) * 32 + 4 * o, ok);
    }
    if (MODE == WEFT_CU_AFFINE && SB == 4 && tid < WR) {
        const bool ok = row0 + tid < M;
        cp_async<16>(&S.xs[buf][tid][0], XS + (ok ? (int64_t)(row0 + tid) : 0) * nsub + (int64_t)kb * SB, ok);
    }
}

// raw -> b[buf] (the wgmma order). Lane (t, p, i) of warp-chunk (quad, sub-block): 16 bytes in, 4 words out
// to one 128-byte core-matrix row set (no bank conflicts).
template <int SB> __device__ __forceinline__ void w_transpose(WSmem<SB> &S, int buf, int tid) {
    const int lane = tid & 31, warp = tid >> 5, t = lane & 3, p = (lane >> 2) & 1, i = lane >> 3;
    for (int c = warp; c < NQ * SB; c += WTHREADS / 32) {
        const int qd = c % NQ, j = c / NQ;
        const uint4 v = *reinterpret_cast<const uint4 *>(&S.raw[4 * qd + i][32 * j + 16 * p + 4 * t]);
        const int r = 2 * i + p;
        S.b[buf][2 * j][qd][0][r][t] = v.x;     // word 0: step s = 0, k half 0
        S.b[buf][2 * j][qd][1][r][t] = v.y;     // word 1: s = 0, k half 1
        S.b[buf][2 * j + 1][qd][0][r][t] = v.z; // word 2: s = 1, k half 0
        S.b[buf][2 * j + 1][qd][1][r][t] = v.w; // word 3: s = 1, k half 1
    }
}

// a[i] for a run-time i without indexing a register array (which would put it in local memory): the group
// loop below stays rolled so that the compiler does not hoist every group's decoded A into registers at once.
template <int N> __device__ __forceinline__ uint32_t w_pick(const uint32_t (&a)[N], int i) {
    uint32_t v = a[0];
#pragma unroll
    for (int k = 1; k < N; k++) v = i == k ? a[k] : v;
    return v;
}
template <typename R> __device__ __forceinline__ float w_pick_scale(const R &r, int i, int n) {
    float v = r.get(0);
#pragma unroll
    for (int k = 1; k < 4; k++)
        if (k < n) v = i == k ? r.get(k) : v;
    return v;
}

template <int MODE, int SDT, int SB, int GPB>
__global__ void __launch_bounds__(WTHREADS, 1)
    gemm_q4w_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, int KW,
                    weft_cu_epi epi) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int SPB = SB / GPB;
    extern __shared__ __align__(16) unsigned char wsm[];
    WSmem<SB> &S = *reinterpret_cast<WSmem<SB> *>(wsm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t ntiles = w.rows / 16, tile = (int64_t)blockIdx.x * WTILES + warp, nsub = w.cols / 32,
                  ng = w.cols >> w.gshift;
    const int row0 = blockIdx.y * WR, nblk = (int)(w.cols / (32 * SB));
    const bool live = tile < ntiles; // dead tiles multiply placeholder weights (wgmma is warpgroup-wide) and
                                     // store nothing
    // This warp's weight words and scales of a K block ride in registers one K block ahead (Stage,
    // q4_mma.cuh): session 6 measured the GEMM 0.8x the mma.sync one with each group's words and scales read
    // from global memory right before its decode (one exposed memory latency per group at 8 warps per SM).
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + lane * SB;
    const int64_t wtile = live ? tile : 0;
    Stage<MODE, SDT, SB, GPB> cur, nxt;

    float acc[NQ][2], sxg[NQ], D[4 * NQ];
#pragma unroll
    for (int e = 0; e < 4 * NQ; e++) D[e] = 0.0f;
#pragma unroll
    for (int q = 0; q < NQ; q++) acc[q][0] = acc[q][1] = sxg[q] = 0.0f;

    bool slot_end = false;
    cur.load(w, qb, wtile, nblk, q4_slot_block(0, nblk, KW, slot_end), ng, g);
    weft_pdl_enter(); // the first weights are in flight (pdl.cuh); activations only after this
    w_copy<MODE, SB>(S, 0, XF, XS, M, nsub, row0, q4_slot_block(0, nblk, KW, slot_end), tid);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    w_transpose<SB>(S, 0, tid);
    int slot = 0;
#pragma unroll 1
    for (int i = 0; i < nblk; i++) {
        const int buf = i & 1;
        q4_slot_block(i, nblk, KW, slot_end); // block i's words (cur) and B (b[buf]) are staged: its slot end
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); // st.shared -> wgmma's reads
        __syncthreads();                                             // b[buf] complete; raw free again
        if (i + 1 < nblk) {
            bool unused;
            const int kn = q4_slot_block(i + 1, nblk, KW, unused);
            nxt.load(w, qb, wtile, nblk, kn, ng, g);
            w_copy<MODE, SB>(S, buf ^ 1, XF, XS, M, nsub, row0, kn, tid);
        }
        cp_commit();
        // this warp's words of rows g, g + 8 and their scales (cur), one group at a time
#pragma unroll 1
        for (int gi = 0; gi < GPB; gi++) {
            uint32_t P[SPB][2][4];
#pragma unroll
            for (int js = 0; js < SPB; js++) {
                q4_dec_word(live ? w_pick(cur.wg, gi * SPB + js) : 0u, P[js][0]);
                q4_dec_word(live ? w_pick(cur.wh, gi * SPB + js) : 0u, P[js][1]);
            }
            // The group starts from +0.0 accumulators (q4_mma0's input, scale-d = 1). The empty asm pins
            // every register write (zeros, decoded A) before wgmma.fence: the compiler may not sink them past
            // it (PTX ISA: registers of an in-flight wgmma must be written before the fence) nor fold the
            // zeros into scale-d = 0, which the probe has not compared.
#pragma unroll
            for (int e = 0; e < 4 * NQ; e++) {
                D[e] = 0.0f;
                wgmma_pin(D[e]);
            }
#pragma unroll
            for (int js = 0; js < SPB; js++)
#pragma unroll
                for (int e = 0; e < 8; e++) wgmma_pin(P[js][e / 4][e % 4]);
            wgmma_fence();
#pragma unroll
            for (int js = 0; js < SPB; js++) {
                const int j = gi * SPB + js;
#pragma unroll
                for (int s = 0; s < 2; s++)
                    wgmma_m64n128k16(D, P[js][0][2 * s], P[js][1][2 * s], P[js][0][2 * s + 1],
                                     P[js][1][2 * s + 1],
                                     wgmma_desc(&S.b[buf][2 * j + s][0][0][0][0], 128, 256));
            }
            wgmma_commit_wait0();
#pragma unroll
            for (int e = 0; e < 4 * NQ; e++) wgmma_pin(D[e]); // no read of D before the wait
            const float s0 = w_pick_scale(cur.sg, gi, GPB), s1 = w_pick_scale(cur.sh, gi, GPB);
            const float b0 = MODE == WEFT_CU_AFFINE ? q4_affine_b(s0, w_pick_scale(cur.bg, gi, GPB)) : 0.0f,
                        b1 = MODE == WEFT_CU_AFFINE ? q4_affine_b(s1, w_pick_scale(cur.bh, gi, GPB)) : 0.0f;
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                if (MODE == WEFT_CU_AFFINE) {
#pragma unroll
                    for (int js = 0; js < SPB; js++) {
                        const float ls = S.xs[buf][4 * q + t][gi * SPB + js];
                        sxg[q] = js == 0 ? ls : __fadd_rn(sxg[q], ls);
                    }
                }
                q4_fold<MODE>(acc[q], &D[4 * q], s0, s1, b0, b1, sxg[q]);
            }
        }
        if (slot_end) { // the slot's sum joins the total (the first slot's sum is the total)
#pragma unroll
            for (int q = 0; q < NQ; q++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float &tq = S.tot[2 * q + h][tid];
                    tq = slot == 0 ? acc[q][h] : __fadd_rn(tq, acc[q][h]);
                    acc[q][h] = 0.0f;
                }
            slot++;
        }
        if (i + 1 < nblk) {
            cp_wait<0>();
            __syncthreads(); // raw(i + 1) landed for everyone
            w_transpose<SB>(S, buf ^ 1, tid);
            cur = nxt;
        }
    }
    for (; slot < KW; slot++) // slots without blocks add their zero sums (mma_q4x.cu's idle warps)
#pragma unroll
        for (int e = 0; e < 2 * NQ; e++) S.tot[e][tid] = __fadd_rn(S.tot[e][tid], 0.0f);
    if (!live) return;
#pragma unroll
    for (int q = 0; q < NQ; q++)
        q4_epi_store(epi, tile, row0 + 4 * q + t, M, g, t, S.tot[2 * q][tid], S.tot[2 * q + 1][tid]);
#else
    (void)w, (void)XF, (void)XS, (void)M, (void)KW, (void)epi;
    __trap(); // launched only after the host checked for compute capability 9.0
#endif
}

template <int MODE, int SDT, int SB, int GPB>
cudaError_t w_launch(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                     cudaStream_t st) {
    auto kernel = gemm_q4w_kernel<MODE, SDT, SB, GPB>;
    const size_t smem = sizeof(WSmem<SB>);
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((d.rows / 16 + WTILES - 1) / WTILES), (unsigned)((M + WR - 1) / WR));
    return weft_pdl_launch(kernel, grid, dim3(WTHREADS), smem, st, d, (const uint32_t *)xq->f,
                           (const float *)xq->s, M, KW, epi);
}

} // namespace

extern "C" cudaError_t weft_cu_gemm_q4w(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                        const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return cudaGetLastError();
    const WDev d = wdev(w);
    // sm_90a code only, K blocks of 4 sub-blocks, group 32 (Q4_0) or 64 / 128 (MLX)
    if (major != 9 || minor != 0 || d.sb != 4) return cudaErrorNotSupported;
    const int KW = weft_cu_q4_kw(w->rows, w->cols), gpb = 128 / w->group;
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16 && gpb == 4)
        return w_launch<WEFT_CU_OFF8, WEFT_CU_S_F16, 4, 4>(d, xq, M, *epi, KW, stream);
    if (w->mode == WEFT_CU_AFFINE && w->sdt == WEFT_CU_S_BF16 && gpb == 2)
        return w_launch<WEFT_CU_AFFINE, WEFT_CU_S_BF16, 4, 2>(d, xq, M, *epi, KW, stream);
    if (w->mode == WEFT_CU_AFFINE && w->sdt == WEFT_CU_S_F16 && gpb == 4)
        return w_launch<WEFT_CU_AFFINE, WEFT_CU_S_F16, 4, 4>(d, xq, M, *epi, KW, stream);
    return cudaErrorNotSupported;
}
