// bench_cuda_persist: would one persistent kernel per batch-1 decode beat a kernel per one-row product?
// (bench/NOTES.md session 22, "What is left": the one-row stream costs ≈ 5.9 µs per launch plus its bytes at
// 3.9 TB/s.) The four products of a Llama-3.1-8B layer — q|k|v 6144x4096, o 4096x4096, gate|up 28672x4096,
// down 4096x14336, Q4_0 on an f16 buffer — repeated for 32 layers (128 products, ≈ 3.9 GB streamed), in five
// forms:
//   dispatch     weft_cu_gemv_q4 per product (the model's kernels), captured in one graph;
//   kernels      this file's kernel, one launch per product (PDL: its first K blocks issued before the wait),
//                captured in one graph;
//   persist      one cooperative launch over all 128 products, a grid barrier (an arrival counter) between
//                products, each warp issuing its first K blocks of the next product before it arrives;
//   persist-late the same with those copies issued after the barrier;
// Then what one kernel boundary costs in the dispatch's chain (time_boundaries). (Forms measured and dropped:
// the dispatch with the L2 prefetch ahead and with the row in tile groups, sessions 23–24:
// bench/cuda/variants/gemv_l2_ahead.patch, gemv_row_groups.patch.)
// Session 22–23: persist 54 and persist-late 61 µs per layer against the dispatch's 43 (bench/NOTES.md
// session 23) — a grid barrier costs more than a PDL launch. Then a probe of each product alone (probe_tail).
// Every form computes gemv_q4.cu's one-row arithmetic (q4x_block per K block, a warp's K blocks in ascending
// order, the warps' sums met in order, q4_epi_store): the outputs must equal the dispatch's bit for bit, and
// only then are the forms timed. No data flows between the products here (each reads its own fixed row):
// the barrier orders them as the model's data would.
#include "matmul_common.cuh"
#include "pdl.cuh"
#include "q4_mma.cuh"

#include <algorithm>
#include <vector>

namespace {

constexpr int MODE = WEFT_CU_OFF8H, SDT = WEFT_CU_S_F16, SB = 4, GPB = 4;
constexpr int kWarps = 8, kThreads = 32 * kWarps, kRing = 4, kProds = 4, kLayers = 32;
constexpr int kRec = 4; // the probe's words per warp: entry, first K block, end (globaltimer, ns), SM
constexpr int kScaleWords = 16 * SRaw<SDT, GPB>::BYTES / 4, kSlotWords = 64 * SB + kScaleWords;
constexpr int kMaxSub = 14336 / 32;    // the staged row: hi words of the largest K
constexpr int kSumFloats = 2 * 7 * 64; // the warps' sums: 2 buffers of (KW − 1) x 64, KW <= 8
constexpr size_t kSmemBytes =
    4 * ((size_t)kSumFloats + (size_t)kWarps * kRing * kSlotWords + (size_t)kMaxSub * 16 + SB * 16);

struct Prod {
    WDev w;
    const uint32_t *xf; // the prepared f16 row: [nsub][32] words, hi words at 0..15
    weft_cu_epi epi;
    int KW; // warps per tile (weft_cu_q4_kw): the product's reduction order
};
struct Prods {
    Prod p[kProds];
};

// One warp's share of one product: groups of KW warps (kWarps / KW per block) take runs of whole tiles.
struct Work {
    int KW, GP, p, ws, tile0, ntl, nblk, mine;
    __device__ explicit Work(const Prod &P) {
        const int warp = (int)(threadIdx.x >> 5);
        KW = P.KW;
        GP = kWarps / KW;
        p = warp / KW;
        ws = warp % KW;
        const int tiles = (int)(P.w.rows / 16), G = (int)gridDim.x * GP, gid = (int)blockIdx.x * GP + p;
        const int run = (tiles + G - 1) / G;
        tile0 = min(gid * run, tiles);
        ntl = min(tile0 + run, tiles) - tile0;
        nblk = (int)(P.w.cols / (32 * SB));
        mine = (nblk - ws + KW - 1) / KW;
    }
};

// gemv_q4.cu's copy cursor: K block ci of tile ct of the warp's run, one commit group per K block.
struct Cursor {
    const uint32_t *qt, *qc;
    const char *st, *sc;
    size_t qtile, qk;
    int64_t stile, sk;
    int ct, ci, ntl, mine;
    __device__ Cursor(const Prod &P, const Work &k) {
        const int lane = (int)(threadIdx.x & 31);
        qtile = (size_t)k.nblk * 64 * SB;
        qk = (size_t)k.KW * 64 * SB;
        stile = (int64_t)k.nblk * 16 * GPB * 2; // (scales in WEFT_CU_Q4F's tile order, as gemv_q4.cu)
        sk = (int64_t)k.KW * 16 * GPB * 2;
        qt = qc = static_cast<const uint32_t *>(P.w.q) + (size_t)k.tile0 * qtile + (size_t)k.ws * 64 * SB;
        st = sc = static_cast<const char *>(P.w.s) +
                  (((int64_t)k.tile0 * k.nblk + k.ws) * 16 + (lane & 15)) * GPB * 2;
        ct = ci = 0;
        ntl = k.ntl;
        mine = k.mine;
    }
    __device__ void issue(uint32_t *s) {
        const int lane = (int)(threadIdx.x & 31);
        if (ct < ntl) {
#pragma unroll
            for (int c = lane; c < 16 * SB; c += 32) cp_async<16>(s + 4 * c, qc + 4 * c, true);
            if (lane < 16) cp_async<SRaw<SDT, GPB>::BYTES>(s + 64 * SB + lane * 2, sc, true);
            q4_cursor_step(ci, ct, mine, ntl, qt, qc, st, sc, qtile, qk, stile, sk);
        }
        cp_commit();
    }
};

__device__ __forceinline__ uint32_t ld_acquire(const unsigned *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Every block arrives (after its writes, fenced) and waits until target blocks have: no sum depends on it.
__device__ void grid_barrier(unsigned *count, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        while (ld_acquire(count) < target) __nanosleep(20);
    }
    __syncthreads();
}

// The row's hi words of this warp's K blocks into xs (one wait).
__device__ void stage_row(const Prod &P, const Work &k, uint32_t *xs) {
    const int lane = (int)(threadIdx.x & 31);
    for (int i = 0; i < k.mine; i++) {
        const int64_t u = (int64_t)(k.ws + i * k.KW) * SB + lane / 4;
        if (lane < 16) cp_async<16>(xs + u * 16 + 4 * (lane % 4), P.xf + u * 32 + 4 * (lane % 4), true);
    }
    cp_commit();
    cp_wait<0>();
    __syncwarp();
}

// One K block from its ring slot (gemv_q4.cu's one-row step): kb is the block's index in the row.
__device__ __forceinline__ void kblock(const uint32_t *slot, const uint32_t *xb, int xstep, int kb,
                                       int64_t nsub, float (&acc)[1][2], float (&C)[1][4], float (&sxg)[1]) {
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    Stage<MODE, SDT, SB, GPB> S;
#pragma unroll
    for (int j = 0; j < SB; j++) {
        S.wg[j] = slot[lane * SB + j];
        S.wh[j] = slot[32 * SB + lane * SB + j];
    }
#pragma unroll
    for (int r = 0; r < SRaw<SDT, GPB>::N; r++) {
        S.sg.r[r] = slot[64 * SB + g * 2 + r];
        S.sh.r[r] = slot[64 * SB + (g + 8) * 2 + r];
    }
    const uint32_t *xk = xb + kb * xstep;
    uint4 x1[SB];
    float s1[SB];
#pragma unroll
    for (int j = 0; j < SB; j++) {
        x1[j] = *reinterpret_cast<const uint4 *>(xk + 16 * j);
        s1[j] = 0.0f;
    }
    q4x_block<MODE, SDT, SB, GPB, 1, true>(S, x1, s1, nullptr, nullptr, nsub, 1, 0, kb, g, t, acc, C, sxg);
}

// A tile's end: the group's warps' sums met in order, its first warp storing the tile.
__device__ __forceinline__ void tile_end(const Prod &P, const Work &k, float *sums, int &buf, int64_t tile,
                                         float (&acc)[1][2]) {
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    float *rb = sums + buf * (k.KW - 1) * 64;
    if (k.ws > 0) q4_put_sums<1>(rb, k.ws, acc, lane);
    if (k.GP == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(k.p + 1), "r"(k.KW * 32) : "memory");
    if (k.ws == 0) {
        float v0 = acc[0][0], v1 = acc[0][1];
        for (int w2 = 1; w2 < k.KW; w2++) {
            v0 = __fadd_rn(v0, rb[(w2 - 1) * 64 + lane]);
            v1 = __fadd_rn(v1, rb[(w2 - 1) * 64 + 32 + lane]);
        }
        q4_epi_store(P.epi, tile, t, 1, g, t, v0, v1);
    }
    acc[0][0] = acc[0][1] = 0.0f;
    buf ^= 1;
}

// A warp's timestamps (globaltimer, ns) for the probe: entry, first K block arrived, last tile stored.
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long v;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
    return v;
}

// One product for this warp: its K blocks from the ring (its first kRing already issued), the row's hi words
// staged, gemv_q4.cu's one-row loop and tile ends.
__device__ void run_prod(const Prod &P, const Work &k, Cursor &cur, float *red, uint32_t *ring, uint32_t *xs,
                         const uint32_t *zeros, unsigned long long *probe) {
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    const int64_t nsub = P.w.cols / 32;
    stage_row(P, k, xs);
    const uint32_t *xb = g == 0 ? xs + 4 * t : zeros;
    const int xstep = g == 0 ? SB * 16 : 0;
    float *sums = red + k.p * 2 * (k.KW - 1) * 64;
    float acc[1][2] = {{0.0f, 0.0f}}, C[1][4] = {}, sxg[1] = {0.0f};
    uint32_t *cur_slot = ring;
    int i = 0, buf = 0;
    int64_t tile = k.tile0;
    const int total = k.ntl * k.mine;
    for (int n = 0; n < total; n++) {
        cp_wait<kRing - 1>();
        __syncwarp();
        if (probe && n == 0 && lane == 0) probe[1] = gtime();
        kblock(cur_slot, xb, xstep, k.ws + i * k.KW, nsub, acc, C, sxg);
        __syncwarp();
        cur.issue(cur_slot);
        cur_slot = cur_slot + kSlotWords == ring + kRing * kSlotWords ? ring : cur_slot + kSlotWords;
        if (++i < k.mine) continue;
        i = 0;
        tile_end(P, k, sums, buf, tile, acc);
        tile++;
    }
}

// Products first .. first + count − 1 (cycling through P's four). prefetch: a warp issues its first K blocks
// of the next product before the grid barrier, else after it. count == 1 is the kernel-per-product form.
// probe (count == 1): per warp {entry, first K block, end} times and its SM, [gridDim.x][kWarps][kRec].
__global__ void __launch_bounds__(kThreads, 3)
    persist_kernel(Prods P, int first, int count, int prefetch, unsigned *bar, unsigned long long *probe) {
    extern __shared__ __align__(16) float red[];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    unsigned long long *pw = probe ? probe + ((size_t)blockIdx.x * kWarps + warp) * kRec : nullptr;
    if (pw && lane == 0) { // (before the PDL wait: the probe's own buffer, which no kernel reads)
        pw[0] = gtime();
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        pw[3] = sm;
    }
    uint32_t *rings = reinterpret_cast<uint32_t *>(red + kSumFloats);
    uint32_t *ring = rings + warp * kRing * kSlotWords, *xs = rings + kWarps * kRing * kSlotWords,
             *zeros = xs + kMaxSub * 16;
    for (int c = (int)threadIdx.x; c < SB * 16; c += kThreads) zeros[c] = 0u;
    __syncthreads();
    Work k(P.p[first % kProds]);
    Cursor cur(P.p[first % kProds], k);
    for (int s = 0; s < kRing; s++) cur.issue(ring + s * kSlotWords); // weights only (pdl.cuh)
    weft_pdl_enter();
    for (int i = 0; i < count; i++) {
        run_prod(P.p[(first + i) % kProds], k, cur, red, ring, xs, zeros, count == 1 ? pw : nullptr);
        if (i + 1 == count) break;
        const Prod &next = P.p[(first + i + 1) % kProds];
        k = Work(next);
        cur = Cursor(next, k);
        if (prefetch)
            for (int s = 0; s < kRing; s++) cur.issue(ring + s * kSlotWords);
        grid_barrier(bar, (unsigned)(i + 1) * gridDim.x);
        if (!prefetch)
            for (int s = 0; s < kRing; s++) cur.issue(ring + s * kSlotWords);
    }
    if (pw && lane == 0) pw[2] = gtime();
}

cudaError_t launch(const Prods &P, int grid, int first, int count, int prefetch, unsigned *bar, bool coop,
                   cudaStream_t st, unsigned long long *probe = nullptr) {
    cudaLaunchAttribute attr[1];
    if (coop) {
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
    } else {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = weft_pdl_on() ? 1 : 0;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, persist_kernel, P, first, count, prefetch, bar, probe);
}

// Where one launch's time goes: each product alone (after a synchronize), every warp's entry / first K block
// / end times relative to the earliest entry (µs, quantiles over the warps that had tiles), L2 evicted before
// each launch (a 256 MB store) so the weights come from DRAM as in the chain; this file's kernel, not
// gemv_q4.cu's (whose blocks hold one group). Session 23 (L2 not yet evicted: the q|k|v, o and down figures
// were partly L2 hits): the gate|up product's warps ended between 15 and 27 µs; tiles claimed from a counter
// instead of fixed runs were slower in the model all the same (bench/NOTES.md session 23). The globaltimer's
// tick (its smallest nonzero step seen) is printed beside the times.
// Per SM (session 24): the SMs grouped by how many warps with tiles they held, each group's mean of its SMs'
// last end — if an SM's stream rate is bounded, SMs holding more warps (more tiles) end later.
void probe_tail(const Prods &P, int grid, unsigned *bar, cudaStream_t st) {
    constexpr int kReps = 5, kWarm = 2;
    const size_t n = (size_t)grid * kWarps * kRec;
    unsigned long long *d = nullptr;
    void *evict = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned long long)));
    CK(cudaMalloc(&evict, kFlushBytes));
    unsigned long long tick = ~0ull;
    const char *pname[kProds] = {"q|k|v", "o", "gate|up", "down"};
    for (int p = 0; p < kProds; p++) {
        std::vector<double> entry, first, end;
        std::vector<std::vector<double>> by_warps; // [busy warps on an SM]: its last end, per repetition
        for (int rep = 0; rep < kReps; rep++) {
            CK(cudaMemsetAsync(d, 0, n * sizeof(unsigned long long), st));
            CK(cudaMemsetAsync(evict, rep & 0x7f, kFlushBytes, st));
            CK(launch(P, grid, p, 1, 0, bar, false, st, d));
            CK(cudaStreamSynchronize(st));
            std::vector<unsigned long long> h(n);
            std::vector<int> rep_warps;  // per SM: its warps with tiles
            std::vector<double> rep_end; // per SM: its last warp's end (µs)
            CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
            unsigned long long t0 = ~0ull;
            for (size_t w = 0; w < n / kRec; w++) t0 = std::min(t0, h[kRec * w]);
            if (rep < kWarm) continue;
            for (size_t w = 0; w < n / kRec; w++) {
                const unsigned long long *r = &h[kRec * w];
                if (!r[1]) continue; // a warp without tiles
                for (int k = 1; k < 3; k++)
                    if (r[k] > r[k - 1]) tick = std::min(tick, r[k] - r[k - 1]);
                entry.push_back((double)(r[0] - t0) * 1e-3);
                first.push_back((double)(r[1] - t0) * 1e-3);
                end.push_back((double)(r[2] - t0) * 1e-3);
                const size_t sm = (size_t)r[3];
                if (sm >= rep_warps.size()) {
                    rep_warps.resize(sm + 1, 0);
                    rep_end.resize(sm + 1, 0.0);
                }
                rep_warps[sm]++;
                rep_end[sm] = std::max(rep_end[sm], (double)(r[2] - t0) * 1e-3);
            }
            for (size_t sm = 0; sm < rep_warps.size(); sm++) {
                if (!rep_warps[sm]) continue;
                const size_t c = (size_t)rep_warps[sm];
                if (c >= by_warps.size()) by_warps.resize(c + 1);
                by_warps[c].push_back(rep_end[sm]);
            }
        }
        auto q = [](std::vector<double> v, double f) {
            if (v.empty()) return 0.0;
            std::sort(v.begin(), v.end());
            return v[(size_t)(f * (double)(v.size() - 1))];
        };
        printf(
            "probe %-8s %-6s warps %5zu  entry p50 %5.2f max %5.2f  first p50 %5.2f max %5.2f  end min %5.2f "
            "p10 %5.2f p50 %5.2f p90 %5.2f max %5.2f us (tick <= %llu ns)\n",
            pname[p], "static", entry.size() / (kReps - kWarm), q(entry, 0.5), q(entry, 1), q(first, 0.5),
            q(first, 1), q(end, 0), q(end, 0.1), q(end, 0.5), q(end, 0.9), q(end, 1), tick);
        printf("probe %-8s per SM:", pname[p]);
        for (size_t c = 0; c < by_warps.size(); c++) {
            if (by_warps[c].empty()) continue;
            double m = 0;
            for (double v : by_warps[c]) m += v;
            printf("  %zu warps: %zu SMs, last end mean %.2f p50 %.2f us", c,
                   by_warps[c].size() / (kReps - kWarm), m / (double)by_warps[c].size(), q(by_warps[c], 0.5));
        }
        printf("\n");
    }
    cudaFree(d);
    cudaFree(evict);
}

// body's launches on st captured into one instantiated graph.
template <class F> cudaGraphExec_t capture_graph(cudaStream_t st, F body) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    body();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
}

// time_ms of f's launches on st, each run waited for.
template <class F> double time_sync(cudaStream_t st, F f) {
    return time_ms([&] {
        f();
        CK(cudaStreamSynchronize(st));
    });
}

// What one kernel boundary costs in the model's chain (the dispatch's kernels, the same bytes per layer):
// gate|up as two launches of 14,336 rows (one boundary more per layer) and o merged into gate|up as one
// launch of 32,768 rows (one fewer), 32 layers each, alternated with the dispatch's four products
// (`dispatch`, a graph launch). All at 4 warps per tile, as gate|up. Timing only: a merged or split weight
// has its own outputs, so there are no bits to compare.
template <class F>
void time_boundaries(const Weight *W, const weft_cu_xq *xq, cudaStream_t st, F dispatch, double bytes) {
    const Layout &L = kLayouts[8]; // Q4_0-mma
    Weight ga = make_weight(L, 14336, 4096, 91), gb = make_weight(L, 14336, 4096, 92),
           gm = make_weight(L, 32768, 4096, 93);
    float *y = nullptr;
    CK(cudaMalloc(&y, (size_t)32768 * sizeof(float)));
    auto mm = [&](const Weight &w, const weft_cu_xq &x) {
        const weft_cu_epi e = weft_cu_epi_store(y, w.w.rows, nullptr, 0, w.w.rows);
        CK(weft_cu_gemv_q4(&w.w, &x, 1, &e, st));
    };
    auto graph = [&](auto layer) { // kLayers layers of it
        return capture_graph(st, [&] {
            for (int l = 0; l < kLayers; l++) layer();
        });
    };
    cudaGraphExec_t split = graph([&] {
        mm(W[0], xq[0]);
        mm(W[1], xq[1]);
        mm(ga, xq[2]);
        mm(gb, xq[2]);
        mm(W[3], xq[3]);
    });
    cudaGraphExec_t merged = graph([&] {
        mm(W[0], xq[0]);
        mm(gm, xq[2]);
        mm(W[3], xq[3]);
    });
    auto t_ms = [&](auto f) { return time_sync(st, f); };
    for (int r = 0; r < 2; r++) {
        const double d = t_ms(dispatch), sp = t_ms([&] { CK(cudaGraphLaunch(split, st)); }),
                     me = t_ms([&] { CK(cudaGraphLaunch(merged, st)); });
        printf("boundaries: dispatch (4 launches per layer) %.2f, gate|up split (5) %.2f, o + gate|up merged "
               "(3) "
               "%.2f us per layer (%.2f / %.2f / %.2f TB/s): one boundary more %+.2f, one fewer %+.2f us\n",
               1e3 * d / kLayers, 1e3 * sp / kLayers, 1e3 * me / kLayers, bytes / (d * 1e-3) / 1e12,
               bytes / (sp * 1e-3) / 1e12, bytes / (me * 1e-3) / 1e12, 1e3 * (sp - d) / kLayers,
               1e3 * (me - d) / kLayers);
    }
    CK(cudaGraphExecDestroy(split));
    CK(cudaGraphExecDestroy(merged));
    ga.release();
    gb.release();
    gm.release();
    cudaFree(y);
}

} // namespace

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!sm_at_least(9, "bench_cuda_persist")) return report("bench_cuda_persist");
    const int64_t shape[kProds][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    const char *pname[kProds] = {"q|k|v", "o", "gate|up", "down"};
    const Layout &L = kLayouts[8]; // Q4_0-mma
    Weight W[kProds];
    weft_cu_xq xq[kProds];
    float *dy[kProds];
    Prods P{};
    for (int p = 0; p < kProds; p++) {
        const int64_t N = shape[p][0], K = shape[p][1];
        W[p] = make_weight(L, N, K, 31 + (uint64_t)p);
        xq[p] = weft_cu_xq{nullptr, nullptr, K, 1};
        CK(cudaMalloc(&xq[p].f, (size_t)K * sizeof(uint32_t)));
        CK(cudaMalloc(&xq[p].s, (size_t)(K / 32) * sizeof(float)));
        Rng rng(77 + (uint64_t)p);
        std::vector<float> x((size_t)K);
        for (auto &v : x) v = rng.uniform();
        float *dx = dev_upload(x);
        CK(weft_cu_xq_prep(dx, K, 1, &xq[p], 0));
        CK(cudaDeviceSynchronize());
        cudaFree(dx);
        CK(cudaMalloc(&dy[p], (size_t)N * sizeof(float)));
        P.p[p] =
            Prod{wdev(&W[p].w), xq[p].f, weft_cu_epi_store(dy[p], N, nullptr, 0, N), weft_cu_q4_kw(N, K)};
        if (P.p[p].KW != 4 && P.p[p].KW != 8) {
            fprintf(stderr, "bench_cuda_persist: KW %d for %s\n", P.p[p].KW, pname[p]);
            return 1;
        }
    }
    CK(cudaFuncSetAttribute(persist_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes));
    int per_sm = 0, dev = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_kernel, kThreads, kSmemBytes));
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int grid = per_sm * sms;
    printf("persistent grid: %d blocks (%d per SM) of %d threads, %zu bytes of shared memory\n", grid, per_sm,
           kThreads, kSmemBytes);
    unsigned *bar = nullptr;
    CK(cudaMalloc(&bar, sizeof(unsigned)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int nprod = kLayers * kProds;

    auto poison = [&] {
        for (int p = 0; p < kProds; p++) CK(cudaMemsetAsync(dy[p], 0xff, (size_t)shape[p][0] * 4, st));
    };
    auto capture = [&](auto body) { return capture_graph(st, body); };
    cudaGraphExec_t g_dispatch = capture([&] {
        for (int i = 0; i < nprod; i++) {
            const int p = i % kProds;
            CK(weft_cu_gemv_q4(&W[p].w, &xq[p], 1, &P.p[p].epi, st));
        }
    });
    cudaGraphExec_t g_kernels = capture([&] {
        for (int i = 0; i < nprod; i++) CK(launch(P, grid, i % kProds, 1, 0, bar, false, st));
    });
    auto persist = [&](int prefetch) {
        CK(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
        CK(launch(P, grid, 0, nprod, prefetch, bar, true, st));
    };
    // the dispatch's outputs, then every form's against them
    poison();
    CK(cudaGraphLaunch(g_dispatch, st));
    CK(cudaStreamSynchronize(st));
    std::vector<std::vector<float>> want(kProds);
    for (int p = 0; p < kProds; p++) want[p] = dev_download(dy[p], (size_t)shape[p][0]);
    const char *fname[3] = {"kernels", "persist", "persist-late"};
    for (int f = 0; f < 3; f++) {
        poison();
        if (f == 0)
            CK(cudaGraphLaunch(g_kernels, st));
        else
            persist(f == 1);
        CK(cudaStreamSynchronize(st));
        for (int p = 0; p < kProds; p++) {
            const std::vector<float> got = dev_download(dy[p], (size_t)shape[p][0]);
            const bool eq = !memcmp(got.data(), want[p].data(), got.size() * sizeof(float));
            EXPECT(eq, "%s: %s differs from the dispatch", fname[f], pname[p]);
        }
    }
    if (g_failures) return report("bench_cuda_persist");
    auto t_ms = [&](auto f) { return time_sync(st, f); };
    // each form twice, alternated (the spread between the two is the noise)
    double ms[2][4];
    for (int r = 0; r < 2; r++) {
        ms[r][0] = t_ms([&] { CK(cudaGraphLaunch(g_dispatch, st)); });
        ms[r][1] = t_ms([&] { CK(cudaGraphLaunch(g_kernels, st)); });
        ms[r][2] = t_ms([&] { persist(1); });
        ms[r][3] = t_ms([&] { persist(0); });
    }
    double bytes = 0;
    for (int p = 0; p < kProds; p++) bytes += (double)shape[p][0] * (double)shape[p][1] * (0.5 + 2.0 / 32);
    bytes *= kLayers;
    const char *all[4] = {"dispatch", "kernels", "persist", "persist-late"};
    for (int r = 0; r < 2; r++)
        for (int f = 0; f < 4; f++)
            printf("%-12s %d products (%d layers): %.3f ms, %.2f us per layer, %.2f TB/s\n", all[f], nprod,
                   kLayers, ms[r][f], 1e3 * ms[r][f] / kLayers, bytes / (ms[r][f] * 1e-3) / 1e12);
    time_boundaries(
        W, xq, st, [&] { CK(cudaGraphLaunch(g_dispatch, st)); }, bytes);
    probe_tail(P, grid, bar, st);
    CK(cudaGraphExecDestroy(g_dispatch));
    CK(cudaGraphExecDestroy(g_kernels));
    for (int p = 0; p < kProds; p++) {
        W[p].release();
        cudaFree(xq[p].f);
        cudaFree(xq[p].s);
        cudaFree(dy[p]);
    }
    cudaFree(bar);
    return report("bench_cuda_persist");
}
