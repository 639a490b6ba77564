// The few-row 4-bit matmul (batch-1 decode, and decode rounds of 2..16 streams) as a stream of weight copies:
// weft_cu_gemv_q4 (cuda_kernels.h).
//
// Same arithmetic as mma_q4x.cu's one-row kernel, so the same bits: each tile of 16 weight rows is summed by
// KW warps (KW = weft_cu_q4_kw from the shape), warp w taking the K blocks w, w + KW, ... in ascending order
// with q4x_block_x (the same A fragments, hi/lo B words, mma sequence and folds), and the warps' sums meet in
// order ((w0 + w1) + w2) + ... before the same epilogue (q4_epi_store). What differs is how the weights
// travel. mma_q4x.cu gives every tile its own block, which loads its weights into registers (4 K blocks per
// warp at most), waits one memory round trip, computes, and exits: measured at 1.4–2.5 TB/s back to back
// (bench/NOTES.md session 10), with each block's start, drain and row staging exposed. Here:
//  - a group of KW warps takes a run of consecutive tiles (as many groups as fit on the device at once, the
//    tiles spread over them as evenly as whole tiles allow), and each warp walks its K blocks of every tile
//    of the run as one sequence;
//  - each warp keeps kRing K blocks of that sequence in flight as cp.async copies into its own ring of
//    shared-memory slots (no registers hold data in flight), crossing tile boundaries, so copies of the next
//    tile travel while this one is summed and its epilogue runs;
//  - the activation rows' words are copied into shared memory once per block (not once per tile).
// One row (ONE_ROW: RQ = 1 activation quad, one group per block): only row 0's words are staged, each warp
// copying its own K blocks'; the quad's other three B columns read a zero block. Several rows (the
// multi-row blocks): RQ quads (4·RQ rows, from row 4·RQ·blockIdx.x; zeros past M) staged whole, and P groups
// per block (16 warps) share them — the rows' words fill most of the block's shared memory, so more groups
// per block is how the SM gets its warps. Rows past 4·RQ take more blocks (blockIdx.x); those blocks read the
// same weights at about the same time, the later reads coming from L2 — but each decodes them again, so 16
// rows measured no faster than the split GEMM, and the dispatch sends 9..16 rows to the split-K form instead
// (SK below: every K slot in its own blocks, which decode each weight once).
// The warps' sums of consecutive tiles alternate between two buffers per group, so one group barrier per
// tile orders them (a warp writes a buffer again only after the next barrier, which the group's first warp
// reaches after reading it).
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
                         WORDS = 64 * SB + SCALE_WORDS * (q4_affine<MODE> ? 2 : 1);
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
            if (q4_affine<MODE>) {
                S.bg.r[k] = sc[SCALE_WORDS + g * (Raw::BYTES / 4) + k];
                S.bh.r[k] = sc[SCALE_WORDS + (g + 8) * (Raw::BYTES / 4) + k];
            }
        }
    }
};

// The block's shape: P groups of KW warps (a group sums one tile at a time), RQ activation quads. ONE_ROW:
// the one-row kernel (row 0 staged alone); otherwise 4·RQ rows staged whole. RQ = 8 (the split-K octet form
// of 17..32 rows, 256 threads) is bounded for 256 threads, so its accumulators get the registers they need.
template <int RQ, int P> struct GShape {
    static constexpr bool ONE_ROW = RQ == 1 && P == 1;
    static constexpr int MAX_THREADS = ONE_ROW || RQ == 8 ? 256 : 512, MIN_BLOCKS = ONE_ROW ? 3 : 1;
};

// Barrier of group p's nt threads (P == 1: the whole block).
template <int P> __device__ __forceinline__ void group_sync(int p, int nt) {
    if constexpr (P == 1) {
        __syncthreads();
    } else {
        asm volatile("bar.sync %0, %1;" ::"r"(p + 1), "r"(nt) : "memory");
    }
}

// Grid: (row blocks, B); block (x, y) takes activation rows 4·RQ·x .. + 4·RQ − 1 and its P groups are the
// tile workers y·P .. y·P + P − 1 of W = B·P: with run > 0, worker k takes tiles [k·run, min((k + 1)·run,
// tiles)); with run == 0, tiles [k·tiles / W, (k + 1)·tiles / W) (runs of ⌊tiles / W⌋ or one more).
// Needs nblk >= KW (every warp has a K block). Shared memory: the warps' sums [P][2][KW − 1][RQ][64], the
// rings [P·KW][kRing][Slot::WORDS], then ONE_ROW: the row's words [nsub][32], sums [nsub] and a zero block
// [SB·32]; else the rows' words [4·RQ][nsub][32] and sums [4·RQ][nsub].
// SK (split K, several rows with epi.part): block (x, y) takes slot x of the KW for all 4·RQ rows and its P
// warps are the tile workers y·P .. y·P + P − 1 (groups of one warp); it stages only the K blocks of slot x
// (x, x + KW, ...: [4·RQ][mine][SB·32] words) and writes each tile's slot sums to epi.part
// [tile][slot][RQ][64] (lane-major), which gemv_fold_kernel adds in slot order. On an f16 buffer (OCT: the
// Q4_0 f16 instance) it stages the rows' hi words only ([4·RQ][mine][SB·16]: the lo words are zero) and
// computes in octets (q4x_block_o: half the mma and folds); its sums (q, h) then hold activation row 8·(q /
// 2) + 2t + q % 2 (gemv_fold_kernel's OCT).
template <int MODE, int SDT, int SB, int GPB, int RQ, int P, bool SK = false>
__global__ void __launch_bounds__(GShape<RQ, P>::MAX_THREADS, GShape<RQ, P>::MIN_BLOCKS)
    gemv_q4_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, int run,
                   int slots, weft_cu_epi epi) {
    using Sl = Slot<MODE, SDT, SB, GPB>;
    constexpr bool ONE_ROW = GShape<RQ, P>::ONE_ROW;
    static_assert(!SK || (!q4_affine<MODE> && !ONE_ROW), "split K: Q4_0 rows only (no sums)");
    constexpr bool OCT = SK && q4_f16<MODE>;
    constexpr int XW = OCT ? 16 : 32; // staged words per row and sub-block
    extern __shared__ __align__(16) float red[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int KW = SK ? slots : (int)(blockDim.x >> 5) / P, GW = SK ? 1 : KW; // slots, warps per group
    // group, the warp's slot
    const int p = SK ? warp : P == 1 ? 0 : warp / KW, ws = SK ? (int)blockIdx.x : P == 1 ? warp : warp % KW;
    const int g = lane >> 2, t = lane & 3, row0 = SK ? 0 : 4 * RQ * (int)blockIdx.x;
    // (32-bit: tiles·W < 2^31 for any weight the launcher takes; ONE_ROW always has run > 0)
    const int tiles = (int)(w.rows / 16), W = (int)gridDim.y * P, wk = (int)blockIdx.y * P + p;
    const int tile0 = ONE_ROW || run > 0 ? std::min(wk * run, tiles) : (int)((unsigned)(wk * tiles) / W),
              tile1 =
                  ONE_ROW || run > 0 ? std::min(tile0 + run, tiles) : (int)((unsigned)((wk + 1) * tiles) / W);
    const int64_t nsub = w.cols / 32;
    const int nblk = (int)(w.cols / (32 * SB)), mine = (nblk - ws + KW - 1) / KW;
    const int ntl = tile1 - tile0; // tiles of this group (>= 0)
    const int total = ntl * mine;  // K blocks this warp sums
    float *sums = red + (size_t)p * 2 * (GW - 1) * RQ * 64;
    uint32_t *rings = reinterpret_cast<uint32_t *>(red + (size_t)P * 2 * (GW - 1) * RQ * 64);
    uint32_t *ring = rings + warp * kRing * Sl::WORDS;
    uint32_t *xs = rings + P * GW * kRing * Sl::WORDS;
    const int64_t xrow = SK ? (int64_t)mine * SB * XW : nsub * 32; // staged words per row
    float *xsum = reinterpret_cast<float *>(xs + (ONE_ROW ? 1 : 4 * RQ) * xrow);
    // B words. ONE_ROW: lanes g < 2 read the row's words (column g = part g of the row); the other lanes'
    // columns are zero, read from a zero block of one K block's size, so no lane's loads are predicated.
    // Otherwise lane (g, t) reads part g % 2 of row 4q + g / 2 (quad q); OCT: the hi words of row 8o + g
    // (octet o).
    const uint32_t *xb;
    int xstep;
    if constexpr (ONE_ROW) {
        uint32_t *zeros = reinterpret_cast<uint32_t *>(xsum + nsub);
        for (int k = threadIdx.x; k < SB * 32; k += blockDim.x) zeros[k] = 0u;
        __syncthreads();
        xb = g < 2 ? xs + (g & 1) * 16 + 4 * t : zeros; // + kb·xstep: K block kb's words
        xstep = g < 2 ? SB * 32 : 0;
    } else if constexpr (OCT) {
        xb = xs + (size_t)g * xrow + 4 * t; // + o·8·xrow + i·SB·16
        xstep = SB * 16;
    } else {
        xb = xs + (size_t)(g >> 1) * xrow + (g & 1) * 16 + 4 * t; // + q·4·xrow + kb·SB·32 (SK: i·SB·32)
        xstep = SB * 32;
    }

    // The copy cursor: the next K block to copy is block index ci (of mine) of tile ct (of ntl); qc points
    // at its words and sc at the lane's scale row (lanes 16..31: bias row, AFFINE) — both advanced by
    // additions only. One commit group per K block, empty past the end, so the wait below counts K blocks.
    using Raw = typename Sl::Raw;
    const size_t qtile = (size_t)nblk * 64 * SB, qk = (size_t)KW * 64 * SB;
    // (the scales as the words: a tile's K block's 16 x GPB values together, weft_cu_q4f_sidx)
    const int64_t stile = (int64_t)nblk * 16 * GPB * Raw::SSZ, sk = (int64_t)KW * 16 * GPB * Raw::SSZ;
    const uint32_t *qt = static_cast<const uint32_t *>(w.q) + (size_t)tile0 * qtile + (size_t)ws * 64 * SB;
    const char *st = static_cast<const char *>(lane >= 16 && q4_affine<MODE> ? w.b : w.s) +
                     (((int64_t)tile0 * nblk + ws) * 16 + (lane & 15)) * GPB * Raw::SSZ;
    const uint32_t *qc = qt;
    const char *sc = st;
    const bool scopy = lane < 16 || q4_affine<MODE>;
    const int soff = 64 * SB + (lane < 16 ? 0 : Sl::SCALE_WORDS) + (lane & 15) * (Raw::BYTES / 4);
    int ct = 0, ci = 0;
    auto issue = [&](uint32_t *s) {
        if (ct < ntl) {
#pragma unroll
            for (int c = lane; c < 16 * SB; c += 32) cp_async<16>(s + 4 * c, qc + 4 * c, true);
            if (scopy) cp_async<Raw::BYTES>(s + soff, sc, true);
            q4_cursor_step(ci, ct, mine, ntl, qt, qc, st, sc, qtile, qk, stile, sk);
        }
        cp_commit();
    };
#pragma unroll 1
    for (int s = 0; s < kRing; s++)
        issue(ring + s * Sl::WORDS); // weights and scales only: no kernel writes them (pdl.cuh)
    weft_pdl_enter();
    if constexpr (ONE_ROW) {
        // The row's words (and sums) of this warp's K blocks, the same for every tile.
        for (int i = 0; i < mine; i++) {
            const int64_t o = (int64_t)(ws + i * KW) * SB;
            if (lane < SB * 8) cp_async<16>(xs + o * 32 + 4 * lane, XF + o * 32 + 4 * lane, true);
            if (q4_affine<MODE> && lane == 0) cp_async<4 * SB>(xsum + o, XS + o, true);
        }
        cp_commit();
    } else if constexpr (SK) {
        // The slot's K blocks of every row (16-byte pieces; rows past M as zeros; OCT: the first 4 pieces of
        // each sub-block, its hi words), by all the block's threads.
        constexpr int PB = SB * XW / 4;             // pieces per row and K block
        const int rw = mine * PB, nx = 4 * RQ * rw; // pieces per row, in all
        for (int c = threadIdx.x; c < nx; c += blockDim.x) {
            const int r = c / rw, i = c % rw / PB, o = c % PB;
            const bool ok = row0 + r < M;
            const int64_t src = (int64_t)(row0 + r) * nsub * 32 + (int64_t)(ws + i * KW) * SB * 32 +
                                (OCT ? (o / 4) * 32 + 4 * (o % 4) : 4 * o);
            cp_async<16>(xs + 4 * c, XF + (ok ? src : 0), ok);
        }
        cp_commit();
        cp_wait<0>();
        __syncthreads(); // every thread's pieces have landed
    } else {
        // The block's rows, whole (16-byte pieces; rows past M as zeros), by all its threads.
        const int64_t rw = nsub * 8, nx = 4 * RQ * rw; // pieces per row, in all
        for (int64_t c = threadIdx.x; c < nx; c += blockDim.x) {
            const int r = (int)(c / rw);
            const bool ok = row0 + r < M;
            cp_async<16>(xs + 4 * c, XF + (ok ? (int64_t)(row0 + r) * nsub * 32 + 4 * (c % rw) : 0), ok);
        }
        if (q4_affine<MODE>) {
            const int64_t sw = nsub / 4; // nsub % 4 == 0 (K blocks of 4 sub-blocks)
            for (int64_t c = threadIdx.x; c < 4 * RQ * sw; c += blockDim.x) {
                const int r = (int)(c / sw);
                const bool ok = row0 + r < M;
                cp_async<16>(xsum + 4 * c, XS + (ok ? (int64_t)(row0 + r) * nsub + 4 * (c % sw) : 0), ok);
            }
        }
        cp_commit();
        cp_wait<0>();
        __syncthreads(); // every thread's pieces have landed
    }

    float acc[RQ][2], C[RQ][4], sxg[RQ];
#pragma unroll
    for (int q = 0; q < RQ; q++) {
        acc[q][0] = acc[q][1] = sxg[q] = 0.0f;
        C[q][0] = C[q][1] = C[q][2] = C[q][3] = 0.0f;
    }
    uint32_t *cur = ring; // the ring slot of K block n
    int i = 0, buf = 0;
    int64_t tile = tile0;
    if constexpr (ONE_ROW) cp_wait<0>(); // the row's words too (before the loop: no branch per K block)
#pragma unroll 1
    for (int n = 0; n < total; n++) {
        cp_wait<kRing - 1>();
        __syncwarp(); // other lanes' copies (scales, row words) are visible
        Stage<MODE, SDT, SB, GPB> S;
        Sl::read(S, cur, lane, g);
        const int kb = ws + i * KW;
        const uint32_t *xk = xb + (SK ? i : kb) * xstep;
        if constexpr (ONE_ROW) {
            uint4 x1[SB];
            float s1[SB];
#pragma unroll
            for (int j = 0; j < SB; j++) {
                x1[j] = *reinterpret_cast<const uint4 *>(xk + 32 * j);
                s1[j] = (q4_affine<MODE> && t == 0) ? xsum[kb * SB + j] : 0.0f;
            }
            // (f16 buffers: folded hi-only, q4_fold's HI — the same bits, 8 additions fewer per K block)
            q4x_block<MODE, SDT, SB, GPB, 1, q4_f16<MODE>>(S, x1, s1, nullptr, nullptr, nsub, 1, 0, kb, g, t,
                                                           acc, C, sxg);
        } else if constexpr (OCT) {
            q4x_block_o<MODE, SDT, SB, GPB, RQ>(
                S,
                [&](int o, int j, uint4 &xv) {
                    xv = *reinterpret_cast<const uint4 *>(xk + (size_t)o * 8 * xrow + 16 * j);
                },
                acc, C);
        } else {
            const float *xsk = xsum + (size_t)t * nsub + kb * SB;
            q4x_block_x<MODE, SDT, SB, GPB, RQ>(
                S,
                [&](int q, int j, uint4 &xv, float &ls) {
                    xv = *reinterpret_cast<const uint4 *>(xk + (size_t)q * 4 * xrow + 32 * j);
                    ls = q4_affine<MODE> ? xsk[(size_t)q * 4 * nsub + j] : 0.0f;
                },
                acc, C, sxg);
        }
        __syncwarp(); // every lane has read the slot before any lane's copy refills it
        issue(cur);
        cur = cur + Sl::WORDS == ring + kRing * Sl::WORDS ? ring : cur + Sl::WORDS;
        if (++i < mine) continue;
        // The tile's last K block: the group's warps' sums meet in order, then the epilogue (its warp 0); SK:
        // the slot's sums to epi.part.
        i = 0;
        if constexpr (SK) {
            // (q, h): weight row g + 8h of activation row 4q + t; OCT: of row 8·(q / 2) + 2t + q % 2, from
            // acc[2·(q / 2) + h][q % 2] (q4x_block_o)
            float *pp = epi.part + ((size_t)tile * KW + ws) * RQ * 64 + lane;
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                pp[q * 64] = OCT ? acc[q & ~1][q & 1] : acc[q][0];
                pp[q * 64 + 32] = OCT ? acc[q | 1][q & 1] : acc[q][1];
            }
#pragma unroll
            for (int q = 0; q < RQ; q++) acc[q][0] = acc[q][1] = 0.0f;
            tile++;
            continue;
        }
        float *rb = sums + buf * (KW - 1) * RQ * 64;
        if (ws > 0) q4_put_sums<RQ>(rb, ws, acc, lane);
        group_sync<P>(p, KW * 32);
        if (ws == 0) {
#pragma unroll
            for (int q = 0; q < RQ; q++) {
                float v0 = acc[q][0], v1 = acc[q][1];
                for (int w2 = 1; w2 < KW; w2++) {
                    v0 = __fadd_rn(v0, rb[((w2 - 1) * RQ + q) * 64 + lane]);
                    v1 = __fadd_rn(v1, rb[((w2 - 1) * RQ + q) * 64 + 32 + lane]);
                }
                if constexpr (ONE_ROW)
                    q4_epi_store(epi, tile, t, 1, g, t, v0, v1); // (constants: the one-row kernel's epilogue)
                else
                    q4_epi_store(epi, tile, row0 + 4 * q + t, M, g, t, v0, v1);
            }
        }
#pragma unroll
        for (int q = 0; q < RQ; q++) acc[q][0] = acc[q][1] = 0.0f;
        buf ^= 1;
        tile++;
    }
}

// For a launch of `kernel` with `threads` threads and smem bytes of dynamic shared memory: the kernel's limit
// raised as weft_smem_opt_in (pdl.cuh) raises it, and in *slots the blocks resident on the device at once.
// cudaErrorNotSupported when smem exceeds the device's maximum.
template <class Kernel> cudaError_t resident_blocks(Kernel kernel, int threads, size_t smem, int64_t *slots) {
    cudaError_t e = weft_smem_opt_in(kernel, smem);
    if (e != cudaSuccess) return e;
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
    if (e != cudaSuccess) return e;
    *slots = (int64_t)(per_sm > 0 ? per_sm : 1) * (weft_sm_count() > 0 ? weft_sm_count() : 1);
    return cudaSuccess;
}

// The grid's y extent from the tiles per worker: with run > 0 (equal runs, clamped to the weight), the blocks
// of P workers that cover the tiles; with run == 0 (balanced ranges), `blocks` as chosen. False when the grid
// (y at most 65,535) or the kernel's 32-bit tile arithmetic (tiles · workers < 2^31) cannot take it.
static inline bool grid_blocks(int64_t tiles, int P, int64_t &run, int64_t &blocks) {
    if (run > tiles) run = tiles;
    if (run > 0) blocks = (tiles + run * P - 1) / (run * P);
    return blocks <= 65535 && tiles * (blocks * P + 1) < ((int64_t)1 << 31);
}

template <int MODE, int SDT, int SB, int GPB, int RQ, int P>
cudaError_t launch_gemv(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, cudaStream_t st) {
    using Sl = Slot<MODE, SDT, SB, GPB>;
    constexpr bool ONE_ROW = GShape<RQ, P>::ONE_ROW;
    const int KW = weft_cu_q4_kw(d.rows, d.cols), nblk = (int)(d.cols / (32 * SB));
    if (nblk < KW || KW * P * 32 > GShape<RQ, P>::MAX_THREADS) return cudaErrorNotSupported;
    const int64_t tiles = d.rows / 16, nsub = d.cols / 32;
    const int rblocks = ONE_ROW ? 1 : (M + 4 * RQ - 1) / (4 * RQ);
    const size_t rows_smem =
        ONE_ROW ? (size_t)nsub * (32 * sizeof(uint32_t) + sizeof(float)) + SB * 32 * sizeof(uint32_t)
                : (size_t)4 * RQ * nsub * (32 * sizeof(uint32_t) + sizeof(float));
    const size_t smem = sizeof(float) * (size_t)P * 2 * (KW - 1) * RQ * 64 +
                        sizeof(uint32_t) * (size_t)P * KW * kRing * Sl::WORDS + rows_smem;
    auto kernel = gemv_q4_kernel<MODE, SDT, SB, GPB, RQ, P>;
    int64_t slots = 0;
    const cudaError_t e = resident_blocks(kernel, KW * P * 32, smem, &slots);
    if (e != cudaSuccess) return e;
    // Tiles per group (the assignment of whole outputs to groups; no output's reduction depends on it): as
    // many blocks as fit on the device at once (shared by the row blocks). One row: equal runs of ⌈tiles /
    // slots⌉ (measured faster than ranges balanced over every slot, bench/NOTES.md session 13); several rows:
    // the kernel's balanced ranges (run 0). epi.gemv_run overrides both with equal runs (tests).
    int64_t run = epi.gemv_run, blocks = 1;
    if (run <= 0) {
        if (ONE_ROW) {
            run = (tiles + slots - 1) / slots;
        } else {
            blocks = std::max<int64_t>(1, std::min<int64_t>(slots / rblocks, (tiles + P - 1) / P));
            run = 0;
        }
    }
    if (!grid_blocks(tiles, P, run, blocks)) return cudaErrorNotSupported;
    return weft_pdl_launch(kernel, dim3((unsigned)rblocks, (unsigned)blocks), dim3(KW * P * 32), smem, st, d,
                           (const uint32_t *)xq->f, (const float *)xq->s, M, (int)run, KW, epi);
}

// The slot sums of epi.part ([tile][KW][RQ][64], lane-major) added in slot order ((s0 + s1) + s2) + ... —
// the additions the group's warps make in gemv_q4_kernel — and stored by the epilogue: one warp per (tile,
// quad q), its KW slot sums loaded together (q4_slot_sum). OCT: the sums of the octet form (activation row
// 8·(q / 2) + 2t + q % 2 for q, not 4q + t).
template <int RQ, bool OCT>
__global__ void __launch_bounds__(256) gemv_fold_kernel(int64_t tiles, int KW, int M, weft_cu_epi epi) {
    weft_pdl_enter();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t wq = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5), tile = wq / RQ;
    const int q = (int)(wq % RQ);
    if (tile >= tiles) return; // (warp-uniform: the epilogue's shuffles stay within the warp)
    const float *pp = epi.part + (size_t)tile * KW * RQ * 64 + (size_t)q * 64 + lane;
    const float v0 = q4_slot_sum(pp, (size_t)RQ * 64, KW), v1 = q4_slot_sum(pp + 32, (size_t)RQ * 64, KW);
    q4_epi_store(epi, tile, OCT ? 8 * (q >> 1) + 2 * t + (q & 1) : 4 * q + t, M, g, t, v0, v1);
}

// Split K (9..16 rows with epi.part; RQ = 8: 17..32 rows of f16 buffers, in octets): KW slot blocks per tile
// range, each staging its slot's K blocks of all 4·RQ rows (so K = 14,336 fits too), then the fold.
// kSkWarps warps (tile workers) per block.
constexpr int kSkWarps = 8;
template <int MODE, int SDT, int SB, int GPB, int RQ = 4>
cudaError_t launch_gemv_sk(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi,
                           cudaStream_t st) {
    static_assert(RQ == 4 || (RQ == 8 && q4_f16<MODE>), "32 rows: the octet form only");
    using Sl = Slot<MODE, SDT, SB, GPB>;
    constexpr int P = kSkWarps;
    const int KW = weft_cu_q4_kw(d.rows, d.cols), nblk = (int)(d.cols / (32 * SB));
    const int64_t tiles = d.rows / 16;
    if (nblk < KW || KW > 8 || epi.part_floats < (size_t)tiles * KW * RQ * 64) // (q4_slot_sum: 8 slots)
        return cudaErrorNotSupported;
    const int mine = (nblk + KW - 1) / KW;     // slot 0's K blocks (the most)
    constexpr int XW = q4_f16<MODE> ? 16 : 32; // the kernel's staged words per row and sub-block (OCT)
    const size_t smem = sizeof(uint32_t) * ((size_t)P * kRing * Sl::WORDS + (size_t)4 * RQ * mine * SB * XW);
    auto kernel = gemv_q4_kernel<MODE, SDT, SB, GPB, RQ, P, true>;
    int64_t slots = 0;
    cudaError_t e = resident_blocks(kernel, P * 32, smem, &slots);
    if (e != cudaSuccess) return e;
    int64_t run = epi.gemv_run, blocks = 1;
    if (run <= 0) {
        blocks = std::max<int64_t>(1, std::min<int64_t>(slots / KW, (tiles + P - 1) / P));
        run = 0;
    }
    if (!grid_blocks(tiles, P, run, blocks)) return cudaErrorNotSupported;
    e = weft_pdl_launch(kernel, dim3((unsigned)KW, (unsigned)blocks), dim3(P * 32), smem, st, d,
                        (const uint32_t *)xq->f, (const float *)xq->s, M, (int)run, KW, epi);
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(gemv_fold_kernel<RQ, q4_f16<MODE>>, dim3((unsigned)((tiles * RQ + 7) / 8)),
                           dim3(256), 0, st, tiles, KW, M, epi);
}

template <int MODE, int SDT>
cudaError_t launch_s(const WDev &d, int group, const weft_cu_xq *xq, int M, const weft_cu_epi &epi,
                     cudaStream_t st) {
    if (d.sb != 4) return cudaErrorNotSupported;
    const int gpb = 128 / group;
    if (M > 1) { // several rows: Q4_0 only (the layout weft_cu_matmul_q4x hands here)
        if constexpr (!q4_affine<MODE> && SDT == WEFT_CU_S_F16) {
            if (gpb != 4 || M > (q4_f16<MODE> ? 32 : 16)) return cudaErrorNotSupported;
            if constexpr (q4_f16<MODE>)
                if (M > 16)
                    return epi.part ? launch_gemv_sk<MODE, SDT, 4, 4, 8>(d, xq, M, epi, st)
                                    : cudaErrorNotSupported;
            const bool kw4 = weft_cu_q4_kw(d.rows, d.cols) == 4;
            if (M <= 4)
                return kw4 ? launch_gemv<MODE, SDT, 4, 4, 1, 4>(d, xq, M, epi, st)
                           : launch_gemv<MODE, SDT, 4, 4, 1, 2>(d, xq, M, epi, st);
            // with the scratch, the split-K form or nothing (the caller then takes the split GEMM: the two
            // row blocks below measured no faster than it, bench/NOTES.md session 13)
            if (M > 8 && epi.part) return launch_gemv_sk<MODE, SDT, 4, 4>(d, xq, M, epi, st);
            return kw4 ? launch_gemv<MODE, SDT, 4, 4, 2, 4>(d, xq, M, epi, st)
                       : launch_gemv<MODE, SDT, 4, 4, 2, 2>(d, xq, M, epi, st);
        }
        return cudaErrorNotSupported;
    }
    if (gpb == 4) return launch_gemv<MODE, SDT, 4, 4, 1, 1>(d, xq, 1, epi, st);
    if (gpb == 2) return launch_gemv<MODE, SDT, 4, 2, 1, 1>(d, xq, 1, epi, st);
    if constexpr (SDT == WEFT_CU_S_F32)
        if (gpb == 1) return launch_gemv<MODE, SDT, 4, 1, 1, 1>(d, xq, 1, epi, st);
    return cudaErrorNotSupported;
}

} // namespace

extern "C" cudaError_t weft_cu_gemv_q4(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                       const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    return q4_dispatch(w, xq, [&](auto mode, auto sdt) {
        return launch_s<decltype(mode)::value, decltype(sdt)::value>(d, w->group, xq, M, *epi, stream);
    });
}

extern "C" size_t weft_cu_gemv_part_floats(int64_t rows, int64_t cols) {
    return (size_t)rows * (size_t)weft_cu_q4_kw(rows, cols) * 32;
}
