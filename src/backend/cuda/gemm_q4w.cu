// The many-row 4-bit GEMM on wgmma (sm_90a): weft_cu_gemm_q4w (cuda_kernels.h). weft_cu_matmul_q4x uses it
// for the many-row Q4_0 products (session 9: 1.35x the mma.sync GEMM at 512 rows; bench/NOTES.md).
//
// Same arithmetic as gemm_q4.cu (mma_q4.cu's header defines it): the probe (bench/cuda/wgmma_probe.cu) showed
// that one wgmma m64nNk16 step with A in registers computes, per warp (rows 16w .. 16w + 15) and per n8
// column block, exactly what mma.sync m16n8k16 computes from the same fragment registers. So each mma.sync
// step s of a sub-block becomes one wgmma step over 64 weight rows x 128 columns (64 activation rows, hi and
// lo), with B in shared memory holding the same element at every k position: core-matrix row n of step
// (sub-block j, s), k half kk = the words (t = 0..3, word 2s + kk) of part n % 2 of activation row n / 2 —
// weft_cu_xq's words transposed 4 x 4 per part while staging. A group's first step has scale-d = 0: D = A·B,
// where the mma.sync kernels compute A·B + (+0.0) — the same value, except that an exactly zero sum could
// differ in its sign. The fold fmaf(s, p, acc) shows that sign only when acc is −0, which an accumulator
// starting at +0.0 reaches only through an fp32 underflow of a negative partial sum (|sum| < 2^−149): a known
// gap in the bit-equality claim for such inputs (bench/NOTES.md session 9 has the fix to measure: −0.0 as the
// mma.sync kernels' zero addend, which is the identity of IEEE addition). Its sums fold on the CUDA cores
// after wgmma.wait_group, and K blocks are walked slot by slot (slot_walk.h) with gemm_q4.cu's acc / tot
// sums.
//
// f16 activations (weft_cu_xq.f16, the H1 instances, modes WEFT_CU_OFF8H / AFFINEH): f16 weights and
// activations, and every lo word is 0, so the lo columns' sums are zeros and hi + lo = hi exactly (an exactly
// zero hi sum may be −0 where hi + lo gives +0: the fold's fmaf(s, ±0, acc) is acc either way, since acc
// starts at +0.0 and an fp32 sum that starts at +0.0 never becomes −0 under round-to-nearest). B then holds
// only the hi words, column n = activation row n, and each step is one m64n64k16 — half the tensor work per
// output — whose accumulators are outputs: the fold is fmaf(s, d, acc) per output, the value q4_fold gives
// the mma.sync kernels (the same .f16 products) from the same buffer. Past 64 rows (not split) the f16 form
// takes 128 activation rows per block: B = 128 columns (as the hi/lo form's), 64 outputs per thread in one
// accumulator set computed as two m64n64k16 halves, one half in flight while the other is folded
// (block_halves), a 2-stage ring (shared memory). Every output sees the same wgmma column sums and folds as
// in the 64-row tiles (bench_cuda_matmul compares them bit for bit); per useful FLOP it decodes A half as
// often.
//
// Split K (weft_cu_gemm_q4w_sk, few rows on small weights, whose 128-row tile blocks alone leave most SMs
// idle): blockIdx.z = r of NZ takes the slots r, r + NZ, ... (slot_walk.h's walk of block r of NZ), writes
// each slot's sums to epi.part instead of adding them to its total, and w_fold_kernel adds the KW slot sums
// of every output in slot order — the additions the whole-K block makes (tot = s0, then tot + s1, ...;
// empty slots as zero sums), so the same bits.
//
// Block: 3 warpgroups. The producer (warpgroup 2) copies each K block's prepared words with cp.async and
// transposes them into a 3-stage ring of B tiles, handing stages over with named barriers (FULL / EMPTY).
// With epi.xb (Q4_0 on an f16 buffer, not split K) a small kernel first writes the activations in the ring's
// order (w_xb_kernel) and the producer moves each stage as one bulk copy that completes on an mbarrier
// (w_producer_bulk): no per-thread copies queueing in the load/store unit, no shared-memory transposes — ncu
// had the tensor pipe 22% busy behind that data path (bench/NOTES.md session 18); measured 1.120 → 0.913 ms
// (64-row tiles, 14336×4096 at 2,048 rows) and model prefill 8k 10,962 → 12,034 tok/s.
// The consumers (warpgroups 0, 1) own weight tiles 4v .. 4v + 3 (warp w: tile 4v + w), keep their weight
// words and scales in registers one K block ahead, and keep a wgmma in flight while they fold: the 64-row
// tiles in two accumulator sets (one group's wgmma runs while the previous group is folded), the 128-row
// tiles in two halves of one set (block_halves). setmaxnreg moves registers from the producer (56) to the
// consumers (224).
#include "cuda_kernels.h"
#include "pdl.cuh"
#include "q4_mma.cuh"
#include "wgmma.cuh"
#include "cp_async.cuh"
#include "slot_walk.h"

namespace {

constexpr int WR = 64; // activation rows per block (N = 128 columns: hi and lo; N = 64 for H1), or 128 for
                       // H1's many-row tiles (N = 128, WShape)
constexpr int NCONS = 256; // consumer threads: 2 warpgroups, warpgroup v computes weight tiles 4v .. 4v + 3
constexpr int NPROD = 128; // producer threads: 1 warpgroup, stages the activations
constexpr int WTHREADS = NCONS + NPROD;
constexpr int WTILES = 8; // weight tiles per block
// Named barriers (bar.sync id, count; 0 is __syncthreads): FULL + s: stage s holds its K block (the producer
// arrives, the consumers wait); EMPTY + s: the consumers are done with stage s.
[[maybe_unused]] constexpr int BAR_FULL = 1; // (EMPTY = FULL + NS)

// The shape of B and of the accumulators for R activation rows per block: hi and lo (H1 false, R = 64: column
// n = part n % 2 of activation row n / 2, n8 column block = an activation quad) or hi only (H1: column n =
// activation row n; R = 64: one m64n64k16 per step; R = 128: one accumulator set — ONE — since 64 outputs per
// thread leave no registers for a second, each step as two m64n64k16 halves of 64 columns, block_halves). (A
// deeper ring for the bulk copies, in the shared memory of their unused copy buffers, measured slower in
// sessions 19–20 and was removed: bench/NOTES.md session 18 item 8, session 19.)
template <bool H1, int R = WR> struct WShape {
    static_assert(R == WR || (H1 && R == 2 * WR), "128-row tiles are the f16 form's");
    static constexpr int NB8 = H1 ? R / 8 : R / 4; // n8 column blocks of B (4 accumulators each)
    static constexpr int NOUT = R / 2;       // outputs per thread: 2 weight rows x R / 4 activation rows
    static constexpr int PW = H1 ? 16 : 32;  // words of a sub-block the producer copies per row
    static constexpr bool ONE = R == 2 * WR; // one accumulator set
    static constexpr int NS = ONE ? 2 : 3;   // stages of B in the ring (shared memory)
    static constexpr int RAW = R;            // rows of the per-thread copy buffers (unused by bulk copies)
};

template <int SB, bool H1, int R = WR> struct alignas(16) WSmem {
    using Sh = WShape<H1, R>;
    uint32_t b[Sh::NS][2 * SB][Sh::NB8][2][8][4]; // the ring: [step 2j + s][n8 block][k half][core row][word]
    float xs[Sh::NS][R][SB];                      // the stage's 32-element sums (AFFINE)
    uint32_t raw[2][Sh::RAW][Sh::PW * SB + 4];    // the producer's copies (weft_cu_xq order; rows padded by
                                                  // 16 bytes: the transpose's loads hit distinct banks)
    float rxs[2][Sh::RAW][SB];                    // and of the sums
    float tot[Sh::NOUT][NCONS];                   // each consumer thread's running total over the slots
    unsigned long long full[Sh::NS];              // bulk copies: stage s holds its K block (mbarrier)
};

// The bulk-copy form (epi.xb: f16 Q4_0, not split K): the activations rewritten by w_xb_kernel in the ring's
// own order, [row block][K block][step][n8 block][k half][core row][word] (WSmem::b's stage), so a K block of
// a row block is one contiguous stage that one thread of the producer moves with cp.async.bulk, completing on
// the stage's mbarrier (the consumers wait on its phase instead of the FULL barrier). The same words land in
// the same places as the per-thread copies and transposes put them: the same bits. (The mbarrier, bulk-copy
// and named-barrier helpers are cp_async.cuh's.)

// A producer thread's share of one K block, fixed for the whole kernel (only the K block's offset, the raw
// buffer and the stage change). Hi and lo: thread p owns part pp = p % 2 of activation row R = p / 2 and
// every sub-block j; H1 at 64 rows: thread p owns the hi part of row R = p % 64 in sub-blocks j = 2·(p / 64)
// and the next; H1 at 128 rows: the hi part of row R = p in every sub-block. Per sub-block it copies the
// part's 16 words (lane t's 4 at 4t; zeros past M), and the 32-element sums of row p (AFFINE, p < 64), then
// transposes them into the wgmma order — 4 core-matrix rows per sub-block (step s, k half kk: words 2s + kk
// of t = 0..3). It reads back only what it copied itself, so waiting for its own copies is enough. Every
// address is a base plus a constant. Banks: 8 consecutive threads' loads and copies cover 8 distinct 16-byte
// bank groups (rows padded by 16 bytes), their stores one 128-byte line.
template <int MODE, int SB, bool H1, int RB = WR> struct WProd {
    static_assert(SB == 4 && (NPROD == 2 * RB || (H1 && NPROD == RB)), "the thread-to-part map above");
    using Sh = WShape<H1, RB>;
    static constexpr int NJ = H1 ? SB * RB / NPROD : SB; // sub-blocks per thread
    const uint32_t *x;                                   // the part's first word at K block 0 (sub-block j0)
    const float *xs;
    uint32_t raw0, rxs0, b0, xs0; // shared addresses: raw[0][R][PW·j0 + 16·pp], rxs[0][p], xs[0][p],
                                  // b[0][2·j0] [n8 block of R][0][core row of R]
    bool ok, xs_ok;
    static constexpr uint32_t RAW_BUF = sizeof(uint32_t) * RB * (Sh::PW * SB + 4),
                              B_STEP = sizeof(uint32_t) * Sh::NB8 * 64, B_STAGE = 2 * SB * B_STEP,
                              XS_BUF = sizeof(float) * RB * SB;
    __device__ __forceinline__ WProd(WSmem<SB, H1, RB> &S, const uint32_t *XF, const float *XS, int M,
                                     int64_t nsub, int row0, int p) {
        const int R = H1 ? p % RB : p >> 1, pp = H1 ? 0 : p & 1, j0 = H1 ? NJ * (p / RB) : 0;
        ok = row0 + R < M;
        x = XF + (ok ? (int64_t)(row0 + R) * nsub * 32 + 32 * j0 + 16 * pp : 0);
        xs_ok = p < RB && row0 + p < M;
        xs = XS + (xs_ok ? (int64_t)(row0 + p) * nsub : 0);
        raw0 = smem_addr(&S.raw[0][R][Sh::PW * j0 + 16 * pp]);
        rxs0 = smem_addr(&S.rxs[0][p < RB ? p : 0][0]);
        b0 = H1 ? smem_addr(&S.b[0][2 * j0][R / 8][0][R % 8][0])
                : smem_addr(&S.b[0][0][R / 4][0][2 * (R % 4) + pp][0]);
        xs0 = smem_addr(&S.xs[0][p < RB ? p : 0][0]);
    }
    __device__ __forceinline__ void copy(int rb, int kb, int p) const {
        const uint32_t *src = x + (ok ? (int64_t)kb * SB * 32 : 0);
        const uint32_t dst = raw0 + rb * RAW_BUF;
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int t = 0; t < 4; t++)
                cp_async16_s(dst + 4 * (Sh::PW * j + 4 * t), src + 32 * j + 4 * t, ok);
        if (q4_affine<MODE> && p < RB) cp_async16_s(rxs0 + rb * XS_BUF, xs + (xs_ok ? kb * SB : 0), xs_ok);
    }
    __device__ __forceinline__ void transpose(int rb, int st, int p) const {
        const uint32_t src = raw0 + rb * RAW_BUF, dst = b0 + st * B_STAGE;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            uint32_t v[4][4];
#pragma unroll
            for (int t = 0; t < 4; t++)
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[t][0]), "=r"(v[t][1]), "=r"(v[t][2]), "=r"(v[t][3])
                             : "r"(src + 4 * (Sh::PW * j + 4 * t)));
#pragma unroll
            for (int w = 0; w < 4; w++) // word w = 2s + kk -> step 2j + s, k half kk
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + (2 * j + w / 2) * B_STEP +
                                                                              (w % 2) * 128),
                             "r"(v[0][w]), "r"(v[1][w]), "r"(v[2][w]), "r"(v[3][w])
                             : "memory");
        }
        if (q4_affine<MODE> && p < RB) {
            float4 v;
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                         : "r"(rxs0 + rb * XS_BUF));
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(xs0 + st * XS_BUF), "f"(v.x),
                         "f"(v.y), "f"(v.z), "f"(v.w)
                         : "memory");
        }
    }
};

// A scale group whose wgmma is in flight: what its fold needs once the accumulators have landed (the 64-row
// tiles' two sets; block_halves folds each group itself).
struct WPend {
    float s0, s1, b0, b1; // the two rows' scales (and affine offsets b + 8s) of the group
    int st, gi;           // its stage (sums xs[st]) and group index
    bool slot_end;        // the last group of its slot: the slot sum joins the total after the fold
};

// The producer warpgroup: K block i of the walk sw (the consumers' walk) is copied (cp.async, one block
// ahead), transposed into stage i % NS once the consumers have released it, and handed over (FULL).
template <int MODE, int SB, bool H1, int R>
__device__ __forceinline__ void w_producer(WSmem<SB, H1, R> &S, const uint32_t *XF, const float *XS, int M,
                                           const weft_slot_walk &sw, int row0, int64_t nsub, int p) {
    constexpr int NS = WShape<H1, R>::NS, BAR_EMPTY = BAR_FULL + NS;
    const int nblk = sw.n; // K blocks of the walk
    if (nblk == 0) return; // (split K: this block's slots hold no K block)
    int lj = 0, lk = 0;
    auto load_kb = [&]() {
        const int kb = weft_slot_walk_kb(&sw, lj, lk);
        weft_slot_walk_next(&sw, &lj, &lk);
        return kb;
    };
    const WProd<MODE, SB, H1, R> pr(S, XF, XS, M, nsub, row0, p);
    pr.copy(0, load_kb(), p);
    cp_commit();
#pragma unroll 1
    for (int i = 0; i < nblk; i++) {
        const int st = i % NS;
        if (i + 1 < nblk) { // raw[(i + 1) & 1] was read by this thread only (its own part), at block i − 1
            pr.copy((i + 1) & 1, load_kb(), p);
            cp_commit();
            cp_wait<1>(); // block i's copies landed (this thread's: it reads only what it copied)
        } else {
            cp_wait<0>();
        }
        if (i >= NS) bar_sync(BAR_EMPTY + st, WTHREADS); // the consumers are done with block i − NS
        pr.transpose(i & 1, st, p);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); // st.shared -> wgmma's reads
        bar_arrive(BAR_FULL + st, WTHREADS);
    }
}

// The producer warpgroup with bulk copies: stage i % NS takes K block i of the walk in one copy by thread 0
// once the consumers have released it (the whole warpgroup keeps the EMPTY barrier's count).
template <int SB, bool H1, int R>
__device__ __forceinline__ void w_producer_bulk(WSmem<SB, H1, R> &S, const uint32_t *xb,
                                                const weft_slot_walk &sw, int p) {
    constexpr int NS = WShape<H1, R>::NS, BAR_EMPTY = BAR_FULL + NS;
    constexpr uint32_t STAGE = sizeof(S.b[0]);
    int lj = 0, lk = 0;
#pragma unroll 1
    // (it may exit with copies in flight: the consumers wait for each on its mbarrier before they read or
    // exit; the mbarriers are never invalidated, which needs no care without thread block clusters)
    for (int i = 0; i < sw.n; i++) {
        const int st = i % NS, kb = weft_slot_walk_kb(&sw, lj, lk);
        weft_slot_walk_next(&sw, &lj, &lk);
        if (i >= NS) bar_sync(BAR_EMPTY + st, WTHREADS); // the consumers are done with block i − NS
        if (p == 0)
            bulk_g2s(smem_addr(&S.b[st][0][0][0][0][0]), xb + (size_t)kb * (STAGE / 4), STAGE, &S.full[st]);
    }
}

// w_xb_kernel: thread (row, sub-block) of the padded rows moves the row's 16 hi words of the sub-block from
// weft_cu_xq order (word 4t + w = lane t's pair w) to the four core rows of steps 2j + w / 2, k half w % 2 —
// WProd::transpose's map, for every row block of R rows and K block at once (rows past M: zeros). Block
// (x, y) takes sub-blocks 32x .. 32x + 31 of rows 8y .. 8y + 7 (the rows a multiple of 8): the 8 rows of a
// core row group are consecutive threads, so each of the four 16-byte stores of 8 threads is one contiguous
// 128-byte run (a whole line where xb is 128-byte aligned, as cudaMalloc's; session 25: with the sub-block
// fastest, every store was a lone half sector and the kernel took 11.5% of a 2k prefill, ≈ 6x its bytes'
// time), and no thread divides (session 27: a linear index split by 64-bit divisions made the kernel ≈ 240
// SASS instructions for 64 bytes moved, ≈ 4x its bytes' time).
template <int R>
__global__ void __launch_bounds__(256)
    w_xb_kernel(const uint32_t *__restrict__ XF, int M, int nsub, uint32_t *xb) {
    constexpr int SB = 4, NB8 = R / 8, STAGE_WORDS = 2 * SB * NB8 * 64;
    weft_pdl_enter();
    const int sub = (int)blockIdx.x * 32 + (int)(threadIdx.x >> 3), r8 = (int)(threadIdx.x & 7);
    const int row = (int)blockIdx.y * 8 + r8;
    if (sub >= nsub) return;
    uint4 v[4] = {};
    if (row < M)
#pragma unroll
        for (int t = 0; t < 4; t++)
            v[t] = *reinterpret_cast<const uint4 *>(XF + ((int64_t)row * nsub + sub) * 32 + 4 * t);
    const int rb = row / R, kb = sub / SB, j = sub % SB, n8 = (row % R) / 8; // (R, SB: powers of two)
    uint32_t *dst = xb + ((int64_t)rb * (nsub / SB) + kb) * STAGE_WORDS;
    auto wv = [&](const uint4 &u, int w) { return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w; };
#pragma unroll
    for (int w = 0; w < 4; w++)
        *reinterpret_cast<uint4 *>(dst + (((2 * j + w / 2) * NB8 + n8) * 2 + w % 2) * 32 + r8 * 4) =
            make_uint4(wv(v[0], w), wv(v[1], w), wv(v[2], w), wv(v[3], w));
}

// A thread's outputs of weight tile `tile` from the rows' block at row0, n8 block q of the accumulators (q <
// WShape<H1>::NB8): value(e) the total of the thread's output e (hi and lo: weight row g + 8·(e % 2) x
// activation row 4·(e / 2) + t; H1: g + 8·((e / 2) % 2) x 8·(e / 4) + 2t + e % 2). w_row gives row k <
// kRowsPerQ of block q: its activation row (returned) and its two outputs (weight rows g, g + 8); w_store_q
// puts block q into the epilogue row by row.
template <bool H1> constexpr int kRowsPerQ = H1 ? 2 : 1;
template <bool H1, class V>
__device__ __forceinline__ int w_row(int row0, int t, int q, int k, V &&value, float &v0, float &v1) {
    v0 = H1 ? value(4 * q + k) : value(2 * q);
    v1 = H1 ? value(4 * q + 2 + k) : value(2 * q + 1);
    return H1 ? row0 + 8 * q + 2 * t + k : row0 + 4 * q + t;
}
template <bool H1, class V>
__device__ __forceinline__ void w_store_q(const weft_cu_epi &epi, int64_t tile, int row0, int M, int g, int t,
                                          int q, V &&value) {
#pragma unroll
    for (int k = 0; k < kRowsPerQ<H1>; k++) {
        float v0, v1;
        const int i = w_row<H1>(row0, t, q, k, value, v0, v1);
        q4_epi_store(epi, tile, i, M, g, t, v0, v1);
    }
}

// STORE's outputs of n8 blocks q0 .. q0 + QC − 1 (w_store_q's map) in one q4_epi_store_rows: with accumulate,
// every old value loaded before the first store (the stores cannot pass a load that might alias them, so
// element by element each output waits a full memory round trip: session 25 measured the o and down
// products +12–27% slower that way).
template <bool H1, int QC, class V>
__device__ __forceinline__ void w_store_rows(const weft_cu_epi &epi, int64_t tile, int row0, int M, int g,
                                             int t, int q0, V &&value) {
    constexpr int PER = kRowsPerQ<H1>, N = PER * QC; // activation rows
    int i[N];
    float v0[N], v1[N];
#pragma unroll
    for (int u = 0; u < QC; u++)
#pragma unroll
        for (int k = 0; k < PER; k++)
            i[PER * u + k] = w_row<H1>(row0, t, q0 + u, k, value, v0[PER * u + k], v1[PER * u + k]);
    q4_epi_store_rows<N>(epi, tile, i, M, g, v0, v1);
}

// Split K's slot sums: [row block][tile (of the grid's padded tiles)][slot][output e][lane].
__device__ __forceinline__ size_t w_part_index(int rowblock, int64_t tiles_p, int64_t tile, int KW, int slot,
                                               int e, int lane) {
    return ((((size_t)rowblock * (size_t)tiles_p + (size_t)tile) * KW + slot) * WShape<true>::NOUT + e) * 32 +
           lane;
}

template <int MODE, int SDT, int SB, int GPB, bool H1, bool SK, int R = WR>
__global__ void __launch_bounds__(WTHREADS, 1)
    gemm_q4w_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, int KW,
                    weft_cu_epi epi) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(H1 == q4_f16<MODE>, "the hi-only form is the f16 one");
    constexpr int SPB = SB / GPB;
    static_assert(GPB % 2 == 0, "groups alternate between two accumulator sets");
    extern __shared__ __align__(16) unsigned char wsm[];
    using Sh = WShape<H1, R>;
    constexpr int ND = 4 * Sh::NB8, NOUT = Sh::NOUT; // accumulators per thread and set; outputs
    constexpr int NS = Sh::NS, BAR_EMPTY = BAR_FULL + NS;
    static_assert(!SK || (R == WR && Sh::NOUT == WShape<true>::NOUT),
                  "w_part_index: 64-row blocks, the same outputs per thread either way");
    using Smem = WSmem<SB, H1, R>;
    Smem &S = *reinterpret_cast<Smem *>(wsm);
    const int64_t nsub = w.cols / 32;
    const int row0 = blockIdx.y * R, nblk_all = (int)(w.cols / (32 * SB));
    // K blocks in slot order (slot_walk.h): all KW slots, or (SK) the slots rz, rz + NZ, ...
    const int NZ = SK ? (int)gridDim.z : 1, rz = SK ? (int)blockIdx.z : 0, SPC = KW / NZ;
    const weft_slot_walk sw = weft_slot_walk_make(rz, NZ, KW, nblk_all, SPC);
    const int nblk = SK ? sw.n : nblk_all; // (the same value without SK: one register fewer)
    // bulk copies: Q4_0 on an f16 buffer, not split K, with the rewritten activations (epi.xb)
    constexpr bool BULK_OK = H1 && !q4_affine<MODE> && !SK;
    const bool bulk = BULK_OK && epi.xb != nullptr;
    if (bulk) {
        if (threadIdx.x == 0)
            for (int st = 0; st < NS; st++) mbar_init(&S.full[st], 1);
        mbar_init_fence();
        __syncthreads();
    }
    if (threadIdx.x >= NCONS) { // the producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        weft_pdl_enter();
        if constexpr (BULK_OK) {
            if (bulk) {
                w_producer_bulk<SB, H1, R>(S, epi.xb + (size_t)blockIdx.y * nblk_all * (sizeof(S.b[0]) / 4),
                                           sw, threadIdx.x - NCONS);
                return;
            }
        }
        w_producer<MODE, SB, H1, R>(S, XF, XS, M, sw, row0, nsub, threadIdx.x - NCONS);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t ntiles = w.rows / 16, tile = (int64_t)blockIdx.x * WTILES + warp;
    // SK: this thread's slot sums of local slot j at part_j + j·NZ·NOUT·32 (w_part_index: slot rz + NZ·j)
    float *const part_j =
        SK ? epi.part + w_part_index(blockIdx.y, (int64_t)gridDim.x * WTILES, tile, KW, rz, 0, lane)
           : nullptr;
    const bool live = tile < ntiles; // dead tiles multiply placeholder weights (wgmma is warpgroup-wide) and
                                     // store nothing
    // This warp's weight words and scales of a K block ride in registers one K block ahead (Stage,
    // q4_mma.cuh): session 6 measured the GEMM 0.8x the mma.sync one with each group's words and scales read
    // from global memory right before its decode (one exposed memory latency per group at 8 warps per SM).
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + lane * SB;
    const int64_t wtile = live ? tile : 0;
    Stage<MODE, SDT, SB, GPB> cur, nxt;

    // Two accumulator sets (64-row tiles): group G's wgmma runs in set G % 2 while group G − 1's sums (the
    // other set) are folded on the CUDA cores (session 9: one set waited for every group's wgmma before its
    // fold). The 128-row tiles (ONE) use DH below instead.
    // acc: hi and lo: acc[2q + h] = weight row g + 8h x activation row 4q + t; H1: acc[4q + 2h + c] = weight
    // row g + 8h x activation row 8q + 2t + c (the accumulator's own place).
    float D0[ND], D1[ND], acc[NOUT];
#pragma unroll
    for (int e = 0; e < NOUT; e++) acc[e] = 0.0f;
    WPend pend = {0.0f, 0.0f, 0.0f, 0.0f, 0, 0, false};
    bool pending = false;
    int slot = 0;

    // The slot's sum joins the total (the first slot's sum is the total); SK: it goes to epi.part (local slot
    // `slot` is slot rz + NZ·slot). At the slot's last group, after its fold.
    const auto slot_done = [&]() {
#pragma unroll
        for (int e = 0; e < NOUT; e++) {
            if constexpr (SK) {
                if (live) part_j[((size_t)slot * NZ * NOUT + e) * 32] = acc[e];
            } else {
                float &tq = S.tot[e][tid];
                tq = slot == 0 ? acc[e] : __fadd_rn(tq, acc[e]);
            }
            acc[e] = 0.0f;
        }
        slot++;
    };
    // The fold of the pending group from its accumulators D (landed: the caller waited).
    // The 32-element sums of activation row a in group gi of stage st (AFFINE).
    auto group_sx = [&](int a, int st, int gi) {
        float sx = 0.0f;
        if (q4_affine<MODE>) {
#pragma unroll
            for (int js = 0; js < SPB; js++) {
                const float ls = S.xs[st][a][gi * SPB + js];
                sx = js == 0 ? ls : __fadd_rn(sx, ls);
            }
        }
        return sx;
    };
    auto fold = [&](float(&D)[ND]) {
#pragma unroll
        for (int e = 0; e < ND; e++) wgmma_pin(D[e]); // no read of D before the wait
#pragma unroll
        for (int q = 0; q < Sh::NB8; q++) {
            if constexpr (H1) { // q4_fold's expressions with hi + lo = d (the header)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float sx = group_sx(8 * q + 2 * t + c, pend.st, pend.gi);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        q4_fold1<MODE>(acc[4 * q + 2 * h + c], h ? pend.s1 : pend.s0, h ? pend.b1 : pend.b0,
                                       sx, D[4 * q + 2 * h + c]);
                    }
                }
            } else {
                q4_fold<MODE>(&acc[2 * q], &D[4 * q], pend.s0, pend.s1, pend.b0, pend.b1,
                              group_sx(4 * q + t, pend.st, pend.gi));
            }
        }
        if (pend.slot_end) slot_done();
    };
    // Group gi's A (the decoded weights of its sub-blocks) into P.
    const auto decode_a = [&](int gi, uint32_t(&P)[SPB][2][4]) {
#pragma unroll
        for (int js = 0; js < SPB; js++) {
            // pinned: the decode stays here (hoisting every group's decoded A runs out of registers)
            uint32_t wg = live ? cur.wg[gi * SPB + js] : 0u, wh = live ? cur.wh[gi * SPB + js] : 0u;
            wgmma_pin(wg);
            wgmma_pin(wh);
            q4_dec_word<false, H1>(wg, P[js][0]);
            q4_dec_word<false, H1>(wh, P[js][1]);
        }
        // The empty asm pins every register write (decoded A) before wgmma.fence: the compiler may not sink
        // them past it (PTX ISA: registers of an in-flight wgmma must be written before the fence).
#pragma unroll
        for (int js = 0; js < SPB; js++)
#pragma unroll
            for (int e = 0; e < 8; e++) wgmma_pin(P[js][e / 4][e % 4]);
    };
    // Group gi of the K block in stage st: decode its A, issue its wgmma into D, then fold the pending group
    // from Dp once it has landed; the group becomes the pending one.
    auto group = [&](int gi, int st, bool blk_slot_end, float(&D)[ND], float(&Dp)[ND]) {
        uint32_t P[SPB][2][4];
        decode_a(gi, P);
        wgmma_fence();
#pragma unroll
        for (int js = 0; js < SPB; js++) {
            const int j = gi * SPB + js;
#pragma unroll
            for (int s = 0; s < 2; s++) { // the group's first step starts from zero (scale-d = 0)
                const uint64_t desc = wgmma_desc(&S.b[st][2 * j + s][0][0][0][0], 128, 256);
                if constexpr (H1 && !Sh::ONE) // (ONE: block_halves; this lambda is not called)
                    wgmma_m64n64k16_f16(D, P[js][0][2 * s], P[js][1][2 * s], P[js][0][2 * s + 1],
                                        P[js][1][2 * s + 1], desc, js + s > 0);
                else if constexpr (!H1)
                    wgmma_m64n128k16(D, P[js][0][2 * s], P[js][1][2 * s], P[js][0][2 * s + 1],
                                     P[js][1][2 * s + 1], desc, js + s > 0);
            }
        }
        wgmma_commit();
        wgmma_wait<1>(); // the pending group (the other set) has landed
        if (pending) fold(Dp);
        pend.s0 = cur.sg.get(gi);
        pend.s1 = cur.sh.get(gi);
        pend.b0 = q4_affine<MODE> ? q4_affine_b(pend.s0, cur.bg.get(gi)) : 0.0f;
        pend.b1 = q4_affine<MODE> ? q4_affine_b(pend.s1, cur.bh.get(gi)) : 0.0f;
        pend.st = st;
        pend.gi = gi;
        pend.slot_end = blk_slot_end && gi == GPB - 1;
        pending = true;
    };

    // The 128-row tiles' K block (ONE) in halves: each group's 128 columns as two m64n64k16 chains, A
    // (n8 blocks 0..7, DH[0]) and B (8..15, DH[1]), so that one half is always in flight while the other is
    // folded — B of group gi while A of gi is folded, A of gi + 1 while B of gi is. Every output is folded
    // group after group in the same order with the same operands, its column sums from the same
    // m64n64k16.f16 steps as the 64-row tiles' (bench_cuda_matmul compares the two heights bit for bit, and
    // session 27 checked the halves against the single m64n128k16 on the H200: matmul quick, replies): the
    // same bits. The decoded A of consecutive groups alternates between two register sets (B of gi still
    // reads P[gi % 2] while gi + 1 is decoded). Session 27: the single m64n128k16 per step, its fold waiting
    // for it, had the tensor pipe 39% busy and the consumers 23% of their samples on the wgmma wait; in
    // halves 42% and 3% — 14336x4096 at 2,048 rows 0.233 -> 0.220 ms, model prefill 2k +4.7%, 8k +3.7%
    // (bench/NOTES.md session 27). (The helpers' bodies exist for the 128-row instances only: half_fold's
    // indices assume 64 outputs.)
    float DH[2][32];
    // (d0: the descriptor of the stage's step 0, n8 block 0; each step's half at a constant offset from it)
    const auto half_issue = [&](uint64_t d0, int gi, int hf, const uint32_t(&P)[SPB][2][4]) {
        if constexpr (Sh::ONE) {
            constexpr uint32_t STEP = sizeof(S.b[0][0]), N8 = sizeof(S.b[0][0][0]); // (multiples of 16)
            wgmma_fence();
#pragma unroll
            for (int js = 0; js < SPB; js++)
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    const uint64_t desc = wgmma_desc_add(d0, (2 * (gi * SPB + js) + s) * STEP + 8 * hf * N8);
                    wgmma_m64n64k16_f16(DH[hf], P[js][0][2 * s], P[js][1][2 * s], P[js][0][2 * s + 1],
                                        P[js][1][2 * s + 1], desc, js + s > 0);
                }
            wgmma_commit();
        }
    };
    const auto half_fold = [&](int st, int gi, int hf) {
        if constexpr (Sh::ONE) {
#pragma unroll
            for (int e = 0; e < 32; e++) wgmma_pin(DH[hf][e]); // no read of DH before the wait
            const float s0 = cur.sg.get(gi), s1 = cur.sh.get(gi);
            const float b0 = q4_affine<MODE> ? q4_affine_b(s0, cur.bg.get(gi)) : 0.0f;
            const float b1 = q4_affine<MODE> ? q4_affine_b(s1, cur.bh.get(gi)) : 0.0f;
#pragma unroll
            for (int qq = 0; qq < 8; qq++) {
                const int q = 8 * hf + qq;
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float sx = group_sx(8 * q + 2 * t + c, st, gi);
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        q4_fold1<MODE>(acc[4 * q + 2 * h + c], h ? s1 : s0, h ? b1 : b0, sx,
                                       DH[hf][4 * qq + 2 * h + c]);
                }
            }
        }
    };
    const auto block_halves = [&](int st, bool blk_slot_end) {
        const uint64_t d0 = wgmma_desc(&S.b[st][0][0][0][0][0], 128, 256);
        uint32_t P[2][SPB][2][4];
        decode_a(0, P[0]);
        half_issue(d0, 0, 0, P[0]);
        half_issue(d0, 0, 1, P[0]);
#pragma unroll
        for (int gi = 0; gi < GPB; gi++) {
            wgmma_wait<1>(); // A of gi has landed (B of gi in flight)
            half_fold(st, gi, 0);
            if (gi + 1 < GPB) {
                decode_a(gi + 1, P[(gi + 1) % 2]);
                half_issue(d0, gi + 1, 0, P[(gi + 1) % 2]);
                wgmma_wait<1>(); // B of gi has landed (A of gi + 1 in flight)
            } else {
                wgmma_wait<0>();
            }
            half_fold(st, gi, 1);
            if (gi + 1 < GPB) half_issue(d0, gi + 1, 1, P[(gi + 1) % 2]);
        }
        if (blk_slot_end) slot_done();
    };

    // cursors of the walk's next block to load and of the block computed
    int lj = 0, lk = 0, cj = 0, ck = 0;
    auto load_kb = [&]() {
        const int kb = weft_slot_walk_kb(&sw, lj, lk);
        weft_slot_walk_next(&sw, &lj, &lk);
        return kb;
    };
    if (!SK || nblk > 0) cur.load(w, qb, wtile, nblk_all, load_kb(), g);
    weft_pdl_enter(); // the first weights are in flight (pdl.cuh); nothing read or stored before this
#pragma unroll 1
    for (int i = 0; i < nblk; i++) {
        const int st = i % NS;
        const bool slot_end = ck == weft_slot_walk_len(&sw, cj) - 1; // block i is its slot's last
        weft_slot_walk_next(&sw, &cj, &ck);
        if (i + 1 < nblk) nxt.load(w, qb, wtile, nblk_all, load_kb(), g);
        if (BULK_OK && bulk) // the producer has staged block i
            mbar_wait(&S.full[st], (uint32_t)(i / NS) & 1u);
        else
            bar_sync(BAR_FULL + st, WTHREADS);
        if constexpr (Sh::ONE) {
            block_halves(st, slot_end);
        } else {
#pragma unroll
            for (int gp = 0; gp < GPB; gp += 2) {
                group(gp, st, slot_end, D0, D1);
                group(gp + 1, st, slot_end, D1, D0);
            }
            // The block's last group is folded here: ptxas serializes every wgmma (C7514) when one stays in
            // flight across the loop's back edge.
            wgmma_wait<0>();
            fold(D1);
            pending = false;
        }
        if (i + NS < nblk) bar_arrive(BAR_EMPTY + st, WTHREADS); // stage st may take block i + NS
        cur = nxt;
    }
    if constexpr (SK) { // slots without blocks: zero sums (mma_q4x.cu's idle warps); the fold adds them
        if (live)
            for (; slot < SPC; slot++)
#pragma unroll
                for (int e = 0; e < NOUT; e++) part_j[((size_t)slot * NZ * NOUT + e) * 32] = 0.0f;
    } else {
        for (; slot < KW; slot++) // slots without blocks add their zero sums (mma_q4x.cu's idle warps)
#pragma unroll
            for (int e = 0; e < NOUT; e++) S.tot[e][tid] = __fadd_rn(S.tot[e][tid], 0.0f);
        // Rolled loops (the totals are in shared memory, any index): unrolled, the epilogue was ≈ 6,000 of
        // the 128-row kernel's 9,200 SASS instructions, run once per tile, and ncu sampled the consumers
        // ≈ 30% of their time there (bench/NOTES.md session 24 item 5; session 25: rolled, 14336x4096 at
        // 2,048 rows 0.94 -> 0.76 ms). STORE takes 32 outputs per step (w_store_rows).
        const auto tot = [&](int e) { return S.tot[e][tid]; };
        constexpr int QC = H1 ? 8 : 16; // n8 blocks per step of w_store_rows (a divisor of every NB8)
        static_assert(Sh::NB8 % QC == 0, "whole steps");
        if (live && epi.mode == WEFT_CU_EPI_SWIGLU) {
#pragma unroll 1
            for (int q = 0; q < Sh::NB8; q++) w_store_q<H1>(epi, tile, row0, M, g, t, q, tot);
        } else if (live) {
#pragma unroll 1
            for (int q0 = 0; q0 < Sh::NB8; q0 += QC) w_store_rows<H1, QC>(epi, tile, row0, M, g, t, q0, tot);
        }
    }
#else
    (void)w, (void)XF, (void)XS, (void)M, (void)KW, (void)epi;
    __trap(); // launched only after the host checked for compute capability 9.0
#endif
}

// Split K's second kernel: the KW slot sums of every output added in slot order ((s0 + s1) + s2) + ... and
// stored by the epilogue (w_store_q), one warp per (tile, n8 block q, row block), its slot sums loaded
// together (q4_slot_sum).
template <bool H1>
__global__ void __launch_bounds__(256)
    w_fold_kernel(int64_t ntiles, int64_t tiles_p, int KW, int M, weft_cu_epi epi) {
    weft_pdl_enter();
    constexpr int NB8 = WShape<H1>::NB8, PER = WShape<H1>::NOUT / NB8; // outputs per n8 block
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t wq = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5), tile = wq / NB8;
    const int q = (int)(wq % NB8);
    if (tile >= ntiles) return; // (warp-uniform: the epilogue's shuffles stay within the warp)
    const float *pp = epi.part + w_part_index(blockIdx.y, tiles_p, tile, KW, 0, 0, lane);
    const size_t stride = (size_t)WShape<true>::NOUT * 32; // one slot's sums
    float v[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) v[u] = q4_slot_sum(pp + (size_t)(PER * q + u) * 32, stride, KW);
    w_store_q<H1>(epi, tile, blockIdx.y * WR, M, g, t, q, [&](int e) { return v[e - PER * q]; });
}

// NZ > 1: split K over NZ blocks per tile block (then the fold kernel).
template <int MODE, int SDT, int SB, int GPB, bool H1, int R = WR>
cudaError_t w_launch_v(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW, int NZ,
                       cudaStream_t st) {
    const size_t smem = sizeof(WSmem<SB, H1, R>);
    const int64_t ntiles = d.rows / 16, tblocks = (ntiles + WTILES - 1) / WTILES;
    const dim3 grid((unsigned)tblocks, (unsigned)((M + R - 1) / R), (unsigned)NZ);
    if (NZ == 1) {
        auto kernel = gemm_q4w_kernel<MODE, SDT, SB, GPB, H1, false, R>;
        cudaError_t e = weft_smem_opt_in(kernel, smem);
        if (e != cudaSuccess) return e;
        weft_cu_epi ek = epi;
        const int64_t nsub = d.cols / 32, rows_p = (int64_t)grid.y * R;
        // bulk copies (Q4_0 on an f16 buffer past 64 rows, with room in a 16-byte aligned epi.xb): the
        // activations rewritten first (at 64 rows and fewer the extra launch is not measured to pay)
        if (!(H1 && !q4_affine<MODE> && M > WR && ek.xb && ek.xb_words >= (size_t)(rows_p * nsub * 16) &&
              ((uintptr_t)ek.xb & 15) == 0))
            ek.xb = nullptr;
        if (ek.xb) {
            e = weft_pdl_launch(w_xb_kernel<R>, dim3((unsigned)((nsub + 31) / 32), (unsigned)(rows_p / 8)),
                                dim3(256), 0, st, (const uint32_t *)xq->f, M, (int)nsub, ek.xb);
            if (e != cudaSuccess) return e;
        }
        return weft_pdl_launch(kernel, grid, dim3(WTHREADS), smem, st, d, (const uint32_t *)xq->f,
                               (const float *)xq->s, M, KW, ek);
    }
    if constexpr (R != WR) return cudaErrorNotSupported; // split K: 64-row blocks only
    auto kernel = gemm_q4w_kernel<MODE, SDT, SB, GPB, H1, true>;
    cudaError_t e = weft_smem_opt_in(kernel, smem);
    if (e != cudaSuccess) return e;
    e = weft_pdl_launch(kernel, grid, dim3(WTHREADS), smem, st, d, (const uint32_t *)xq->f,
                        (const float *)xq->s, M, KW, epi);
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(w_fold_kernel<H1>, dim3((unsigned)((ntiles * WShape<H1>::NB8 + 7) / 8), grid.y),
                           dim3(256), 0, st, ntiles, tblocks * WTILES, KW, M, epi);
}

// The f16 hi-only instance for an f16 buffer (the header; 128-row tiles past 64 rows unless split K or too
// few blocks), else the hi/lo one.
template <int MODE, int SDT, int SB, int GPB>
cudaError_t w_launch(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW, int NZ,
                     cudaStream_t st) {
    // 128-row tiles where their grid still gives 3/4 of the SMs a block (bench/NOTES.md session 17: on the
    // 4,096-row weights at 128 / 256 rows the 64-row tiles' twice-as-many blocks take half the time)
    const int64_t tblocks = (d.rows / 16 + WTILES - 1) / WTILES,
                  r128 = tblocks * ((M + 2 * WR - 1) / (2 * WR));
    const bool big =
        epi.wgmma_rows == 128 || (epi.wgmma_rows == 0 && 4 * r128 >= 3 * (int64_t)weft_sm_count());
    if (xq->f16 && NZ == 1 && M > WR && big)
        return w_launch_v<q4_mode_f16<MODE>, SDT, SB, GPB, true, 2 * WR>(d, xq, M, epi, KW, NZ, st);
    if (xq->f16) return w_launch_v<q4_mode_f16<MODE>, SDT, SB, GPB, true>(d, xq, M, epi, KW, NZ, st);
    return w_launch_v<MODE, SDT, SB, GPB, false>(d, xq, M, epi, KW, NZ, st);
}

// weft_cu_gemm_q4w (NZ = 1) and weft_cu_gemm_q4w_sk (NZ > 1, a divisor of KW).
cudaError_t q4w_entry(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi, int NZ,
                      cudaStream_t stream) {
    const WDev d = wdev(w);
    // sm_90a code only (a compute capability 9.0 device and a build that holds the sm_90a image: any other
    // image of this kernel traps), K blocks of 4 sub-blocks, group 32 (Q4_0) or 64 / 128 (MLX)
#ifdef WEFT_CUDA_SM90A
    constexpr bool has_sm90a = true;
#else
    constexpr bool has_sm90a = false;
#endif
    if (!has_sm90a || !weft_wgmma_on() || d.sb != 4) return cudaErrorNotSupported;
    const int KW = weft_cu_q4_kw(w->rows, w->cols), gpb = 128 / w->group;
    if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16 && gpb == 4)
        return w_launch<WEFT_CU_OFF8, WEFT_CU_S_F16, 4, 4>(d, xq, M, *epi, KW, NZ, stream);
    if (w->mode == WEFT_CU_AFFINE && w->sdt == WEFT_CU_S_BF16 && gpb == 2)
        return w_launch<WEFT_CU_AFFINE, WEFT_CU_S_BF16, 4, 2>(d, xq, M, *epi, KW, NZ, stream);
    if (w->mode == WEFT_CU_AFFINE && w->sdt == WEFT_CU_S_F16 && gpb == 4)
        return w_launch<WEFT_CU_AFFINE, WEFT_CU_S_F16, 4, 4>(d, xq, M, *epi, KW, NZ, stream);
    return cudaErrorNotSupported;
}

} // namespace

extern "C" cudaError_t weft_cu_gemm_q4w(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                        const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    return q4w_entry(w, xq, M, epi, 1, stream);
}

extern "C" size_t weft_cu_gemm_q4w_part_floats(int64_t rows, int64_t cols, int M) {
    const int64_t tiles_p = (rows / 16 + WTILES - 1) / WTILES * WTILES;
    return (size_t)((M + WR - 1) / WR) * (size_t)tiles_p * (size_t)weft_cu_q4_kw(rows, cols) *
           (size_t)WShape<true>::NOUT * 32;
}

extern "C" size_t weft_cu_gemm_q4w_xb_words(int64_t K, int M) {
    return (size_t)((M + 2 * WR - 1) / (2 * WR)) * (size_t)(2 * WR) * (size_t)(K / 32) * 16;
}

extern "C" cudaError_t weft_cu_gemm_q4w_sk(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                           const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    if (!epi->part || epi->part_floats < weft_cu_gemm_q4w_part_floats(w->rows, w->cols, M) ||
        weft_cu_q4_kw(w->rows, w->cols) > 8) // (q4_slot_sum folds at most 8 slots)
        return cudaErrorNotSupported;
    // The most blocks per tile block (a divisor of KW) that still fit the device in one wave (one block per
    // SM: the ring and the producer's copies take most of its shared memory); none: not worth splitting.
    const int KW = weft_cu_q4_kw(w->rows, w->cols), sms = weft_sm_count();
    const int64_t blocks = (w->rows / 16 + WTILES - 1) / WTILES * ((M + WR - 1) / WR);
    int NZ = 0;
    for (int z = 2; z <= KW; z *= 2)
        if (KW % z == 0 && blocks * z <= sms) NZ = z;
    if (epi->wgmma_nz > 0) NZ = KW % epi->wgmma_nz == 0 ? epi->wgmma_nz : 0; // tests: any divisor of KW
    if (NZ == 0) return cudaErrorNotSupported;
    return q4w_entry(w, xq, M, epi, NZ, stream);
}
