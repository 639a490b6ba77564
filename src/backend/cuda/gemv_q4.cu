// The one-row 4-bit matmul (batch-1 decode) as a stream of weight copies: weft_cu_gemv_q4 (cuda_kernels.h).
//
// Same arithmetic as mma_q4x.cu's one-row kernel, so the same bits: each tile of 16 weight rows is summed by
// KW warps (KW = weft_cu_q4_kw from the shape), warp w taking the K blocks w, w + KW, ... in ascending order
// with q4x_block (the same A fragments, hi/lo B words, mma sequence and folds), and the warps' sums meet in
// order ((w0 + w1) + w2) + ... before the same epilogue (q4_epi_store). What differs is how the weights
// travel. mma_q4x.cu gives every tile its own block, which loads its weights into registers (4 K blocks per
// warp at most), waits one memory round trip, computes, and exits: measured at 1.4–2.5 TB/s back to back
// (bench/NOTES.md session 10), with each block's start, drain and row staging exposed. Here:
//  - a block takes a run of consecutive tiles (as many blocks as fit on the device at once, each with an
//    equal run), and each warp walks its K blocks of every tile of the run as one sequence;
//  - each warp keeps kRing K blocks of that sequence in flight as cp.async copies into its own ring of
//    shared-memory slots (no registers hold data in flight), crossing tile boundaries, so copies of the next
//    tile travel while this one is summed and its epilogue runs;
//  - the activation row's words of the warp's K blocks are copied into shared memory once per block (not
//    once per tile).
// The warps' sums of consecutive tiles alternate between two buffers, so one block barrier per tile orders
// them (a warp writes a buffer again only after the next barrier, which warp 0 reaches after reading it).
#include "cuda_kernels.h"
#include "q4_mma.cuh"
#include "pdl.cuh"

namespace {

// K blocks of weight copies in flight per warp: 4 measured faster than 8 in the model (batch-1 decode 420
// vs 390 tok/s, bench/NOTES.md session 10) — the smaller ring leaves room for more warps per SM.
constexpr int kRing = 4;

// One ring slot: a K block of one tile as it lies in global memory (64·SB words: lane l's SB words of rows
// g and g + 8 at l·SB and 32·SB + l·SB), then the 16 rows' scales of the block ([16][GPB] values) and, for
// AFFINE, their biases.
template <int MODE, int SDT, int SB, int GPB> struct Slot {
    using Raw = SRaw<SDT, GPB>;
    static constexpr int SCALE_WORDS = 16 * Raw::BYTES / 4,
                         WORDS = 64 * SB + SCALE_WORDS * (MODE == WEFT_CU_AFFINE ? 2 : 1);
    static_assert(Raw::BYTES % 4 == 0 && Raw::BYTES <= 16, "cp.async copies 4, 8 or 16 bytes");
    static_assert(WORDS % 4 == 0, "slots stay 16-byte aligned");

    // The lane's Stage (q4_mma.cuh) from the slot: what Stage::load reads from global memory.
    static __device__ __forceinline__ void read(Stage<MODE, SDT, SB, GPB> &S, const uint32_t *s, int lane,
                                                int g) {
#pragma unroll
        for (int j = 0; j < SB; j++) {
            S.wg[j] = s[lane * SB + j];
            S.wh[j] = s[32 * SB + lane * SB + j];
        }
        const uint32_t *sc = s + 64 * SB;
#pragma unroll
        for (int k = 0; k < Raw::N; k++) {
            S.sg.r[k] = sc[g * (Raw::BYTES / 4) + k];
            S.sh.r[k] = sc[(g + 8) * (Raw::BYTES / 4) + k];
            if (MODE == WEFT_CU_AFFINE) {
                S.bg.r[k] = sc[SCALE_WORDS + g * (Raw::BYTES / 4) + k];
                S.bh.r[k] = sc[SCALE_WORDS + (g + 8) * (Raw::BYTES / 4) + k];
            }
        }
    }
};

// Grid: ceil(tiles / run) blocks of KW warps; block b takes tiles [b·run, min((b + 1)·run, tiles)). Needs
// nblk >= KW (every warp has a K block). Shared memory: the warps' sums [2][KW − 1][64], the rings
// [KW][kRing][Slot::WORDS], the row's words [nsub][32] and sums [nsub], a zero block [SB·32].
template <int MODE, int SDT, int SB, int GPB>
__global__ void __launch_bounds__(256, 3)
    gemv_q4_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int run,
                   weft_cu_epi epi) {
    using Sl = Slot<MODE, SDT, SB, GPB>;
    extern __shared__ __align__(16) float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KW = (int)(blockDim.x >> 5);
    const int g = lane >> 2, t = lane & 3;
    const int64_t ng = w.cols >> w.gshift, nsub = w.cols / 32, tile0 = (int64_t)blockIdx.x * run;
    const int nblk = (int)(w.cols / (32 * SB)), mine = (nblk - warp + KW - 1) / KW;
    const int ntl =
        (int)(w.rows / 16 - tile0 < run ? w.rows / 16 - tile0 : run); // tiles of this block (>= 1)
    const int total = ntl * mine;                                     // K blocks this warp sums
    uint32_t *ring = reinterpret_cast<uint32_t *>(red + 2 * (KW - 1) * 64) + warp * kRing * Sl::WORDS;
    uint32_t *xs = reinterpret_cast<uint32_t *>(red + 2 * (KW - 1) * 64) + KW * kRing * Sl::WORDS;
    float *xsum = reinterpret_cast<float *>(xs + nsub * 32);
    // B words: lanes g < 2 read the row's words (column g = part g of the row); the other lanes' columns are
    // zero, read from a zero block of one K block's size, so no lane's loads are predicated.
    uint32_t *zeros = reinterpret_cast<uint32_t *>(xsum + nsub);
    for (int k = threadIdx.x; k < SB * 32; k += blockDim.x) zeros[k] = 0u;
    __syncthreads();
    const uint32_t *xb = g < 2 ? xs + (g & 1) * 16 + 4 * t : zeros; // + kb·xstep: K block kb's words
    const int xstep = g < 2 ? SB * 32 : 0;

    // The copy cursor: the next K block to copy is block index ci (of mine) of tile ct (of ntl); qc points
    // at its words and sc at the lane's scale row (lanes 16..31: bias row, AFFINE) — both advanced by
    // additions only. One commit group per K block, empty past the end, so the wait below counts K blocks.
    using Raw = typename Sl::Raw;
    const size_t qtile = (size_t)nblk * 64 * SB, qk = (size_t)KW * 64 * SB;
    const int64_t stile = 16 * ng * Raw::SSZ, sk = (int64_t)KW * GPB * Raw::SSZ;
    const uint32_t *qt = static_cast<const uint32_t *>(w.q) + (size_t)tile0 * qtile + (size_t)warp * 64 * SB;
    const char *st = static_cast<const char *>(lane >= 16 && MODE == WEFT_CU_AFFINE ? w.b : w.s) +
                     ((tile0 * 16 + (lane & 15)) * ng + (int64_t)warp * GPB) * Raw::SSZ;
    const uint32_t *qc = qt;
    const char *sc = st;
    const bool scopy = lane < 16 || MODE == WEFT_CU_AFFINE;
    const int soff = 64 * SB + (lane < 16 ? 0 : Sl::SCALE_WORDS) + (lane & 15) * (Raw::BYTES / 4);
    int ct = 0, ci = 0;
    auto issue = [&](uint32_t *s) {
        if (ct < ntl) {
#pragma unroll
            for (int c = lane; c < 16 * SB; c += 32) cp_async<16>(s + 4 * c, qc + 4 * c, true);
            if (scopy) cp_async<Raw::BYTES>(s + soff, sc, true);
            if (++ci == mine) { // the next tile's first K block (the cursors stay inside the arrays)
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
        cp_commit();
    };
#pragma unroll 1
    for (int s = 0; s < kRing; s++)
        issue(ring + s * Sl::WORDS); // weights and scales only: no kernel writes them (pdl.cuh)
    weft_pdl_enter();
    // The row's words (and sums) of this warp's K blocks, the same for every tile.
    for (int i = 0; i < mine; i++) {
        const int64_t o = (int64_t)(warp + i * KW) * SB;
        if (lane < SB * 8) cp_async<16>(xs + o * 32 + 4 * lane, XF + o * 32 + 4 * lane, true);
        if (MODE == WEFT_CU_AFFINE && lane == 0) cp_async<4 * SB>(xsum + o, XS + o, true);
    }
    cp_commit();

    float acc[1][2] = {{0.0f, 0.0f}}, C[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}}, sxg[1] = {0.0f};
    uint32_t *cur = ring; // the ring slot of K block n
    int i = 0, buf = 0;
    int64_t tile = tile0;
#pragma unroll 1
    for (int n = 0; n < total; n++) {
        if (n == 0)
            cp_wait<0>(); // the row too
        else
            cp_wait<kRing - 1>();
        __syncwarp(); // other lanes' copies (scales, row words) are visible
        Stage<MODE, SDT, SB, GPB> S;
        Sl::read(S, cur, lane, g);
        const int kb = warp + i * KW;
        uint4 x1[SB];
        float s1[SB];
        const uint32_t *xk = xb + kb * xstep;
#pragma unroll
        for (int j = 0; j < SB; j++) {
            x1[j] = *reinterpret_cast<const uint4 *>(xk + 32 * j);
            s1[j] = (MODE == WEFT_CU_AFFINE && t == 0) ? xsum[kb * SB + j] : 0.0f;
        }
        q4x_block<MODE, SDT, SB, GPB, 1>(S, x1, s1, nullptr, nullptr, nsub, 1, 0, kb, g, t, acc, C, sxg);
        __syncwarp(); // every lane has read the slot before any lane's copy refills it
        issue(cur);
        cur = cur + Sl::WORDS == ring + kRing * Sl::WORDS ? ring : cur + Sl::WORDS;
        if (++i < mine) continue;
        // The tile's last K block: the warps' sums meet in order, then the epilogue (warp 0).
        i = 0;
        float *rb = red + buf * (KW - 1) * 64;
        if (warp > 0) {
            rb[(warp - 1) * 64 + lane] = acc[0][0];
            rb[(warp - 1) * 64 + 32 + lane] = acc[0][1];
        }
        __syncthreads();
        if (warp == 0) {
            float v0 = acc[0][0], v1 = acc[0][1];
            for (int w2 = 1; w2 < KW; w2++) {
                v0 = __fadd_rn(v0, rb[(w2 - 1) * 64 + lane]);
                v1 = __fadd_rn(v1, rb[(w2 - 1) * 64 + 32 + lane]);
            }
            q4_epi_store(epi, tile, t, 1, g, t, v0, v1);
        }
        acc[0][0] = acc[0][1] = 0.0f;
        buf ^= 1;
        tile++;
    }
}

template <int MODE, int SDT, int SB, int GPB>
cudaError_t launch_gemv(const WDev &d, const weft_cu_xq *xq, const weft_cu_epi &epi, cudaStream_t st) {
    using Sl = Slot<MODE, SDT, SB, GPB>;
    const int KW = weft_cu_q4_kw(d.rows, d.cols), nblk = (int)(d.cols / (32 * SB));
    if (nblk < KW) return cudaErrorNotSupported;
    const int64_t tiles = d.rows / 16, nsub = d.cols / 32;
    const size_t smem = sizeof(float) * 2 * (size_t)(KW - 1) * 64 +
                        sizeof(uint32_t) * (size_t)KW * kRing * Sl::WORDS +
                        (size_t)nsub * (32 * sizeof(uint32_t) + sizeof(float)) + SB * 32 * sizeof(uint32_t);
    auto kernel = gemv_q4_kernel<MODE, SDT, SB, GPB>;
    // The limit is raised to the current device's maximum at every launch that needs more than the default,
    // never lowered: launches of different K (different shared memory) share the kernel and may sit in
    // different cached graphs, and a process may drive more than one device.
    const int max_smem = weft_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (max_smem <= 0 || smem > (size_t)max_smem) return cudaErrorNotSupported;
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
        if (e != cudaSuccess) return e;
    }
    // Tiles per block: as many blocks as fit on the device at once, equal runs (the assignment of whole
    // outputs to blocks; no output's reduction depends on it). epi.gemv_run overrides it (tests).
    int64_t run = epi.gemv_run;
    if (run <= 0) {
        int per_sm = 0;
        const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, KW * 32, smem);
        if (e != cudaSuccess) return e;
        const int64_t slots =
            (int64_t)(per_sm > 0 ? per_sm : 1) * (weft_sm_count() > 0 ? weft_sm_count() : 1);
        run = (tiles + slots - 1) / slots;
    }
    if (run > tiles) run = tiles;
    const int64_t blocks = (tiles + run - 1) / run;
    return weft_pdl_launch(kernel, dim3((unsigned)blocks), dim3(KW * 32), smem, st, d,
                           (const uint32_t *)xq->f, (const float *)xq->s, (int)run, epi);
}

template <int MODE, int SDT>
cudaError_t launch_s(const WDev &d, int group, const weft_cu_xq *xq, const weft_cu_epi &epi,
                     cudaStream_t st) {
    if (d.sb != 4) return cudaErrorNotSupported;
    const int gpb = 128 / group;
    if (gpb == 4) return launch_gemv<MODE, SDT, 4, 4>(d, xq, epi, st);
    if (gpb == 2) return launch_gemv<MODE, SDT, 4, 2>(d, xq, epi, st);
    if constexpr (SDT == WEFT_CU_S_F32)
        if (gpb == 1) return launch_gemv<MODE, SDT, 4, 1>(d, xq, epi, st);
    return cudaErrorNotSupported;
}

} // namespace

extern "C" cudaError_t weft_cu_gemv_q4(const weft_cu_weight *w, const weft_cu_xq *xq, const weft_cu_epi *epi,
                                       cudaStream_t stream) {
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
        return launch_s<WEFT_CU_OFF8, WEFT_CU_S_F16>(d, w->group, xq, *epi, stream);
    if (w->mode == WEFT_CU_AFFINE) {
        if (w->sdt == WEFT_CU_S_F32)
            return launch_s<WEFT_CU_AFFINE, WEFT_CU_S_F32>(d, w->group, xq, *epi, stream);
        if (w->sdt == WEFT_CU_S_F16)
            return launch_s<WEFT_CU_AFFINE, WEFT_CU_S_F16>(d, w->group, xq, *epi, stream);
        if (w->sdt == WEFT_CU_S_BF16)
            return launch_s<WEFT_CU_AFFINE, WEFT_CU_S_BF16>(d, w->group, xq, *epi, stream);
    }
    return cudaErrorNotSupported;
}
