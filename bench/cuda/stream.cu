// bench_cuda_stream: how fast can the one-row products' weight stream reach DRAM when nothing is computed?
// (bench/NOTES.md session 24.) gemv_q4.cu's one-row kernel streams each warp's K blocks (1 KB of 4-bit words
// each, plus scales) through a ring of cp.async copies, and inside a product reaches ≈ 3.9 of the ≈ 4.6 TB/s
// a plain read gets; bench_cuda_persist's probe shows an SM's rate bounded (SMs holding more warps end
// later). This harness takes the arithmetic away and asks which part of that is the copy pattern itself:
//   order   run    each warp reads its own run of chunks (chunk n of warp w at w·steps + n);
//           group  gemv_q4.cu's order: a group of KW warps reads a run, its warps taking adjacent chunks
//                  (chunk n of warp ws of group k at (k·steps + n)·KW + ws);
//           sweep  chunk n of warp w at n·W + w: at any moment the warps read one contiguous region;
//   copy    cp.async (16 bytes per lane, one commit group per chunk, as gemv_q4.cu) or bulk (one
//           cp.async.bulk per chunk by lane 0 on an mbarrier per ring slot: the copy engine);
//   ring    chunks in flight per warp (gemv_q4.cu: 4);
//   blocks  of 4 warps (598 = gemv_q4.cu's gate|up grid; 528 and 792 = 4 and 6 per SM).
// Each chunk is read from shared memory once (an xor into a register, so the copies are consumed) before its
// slot is refilled. `plain` is the reference: a grid-stride loop of 16-byte loads over the same bytes. Each
// figure: 8 launches back to back on 8 buffers (no L2 reuse between launches), L2 flushed before, median of
// repeats — per launch µs and TB/s. Then the boundary between launches (gemv_q4.cu's chain): the same bytes
// per launch in 4x fewer, 4x longer launches (the rate without most boundaries); launches with PDL, each
// warp's first RING chunks issued before griddepcontrol.wait (as gemv_q4.cu); and with PDL plus a tail
// prefetch — a warp that has issued its last chunk asks L2 for the next launch's first 2·RING chunks of the
// same warp (prefetch.global.L2 per 128-byte line, or one cp.async.bulk.prefetch.L2 per chunk), so DRAM
// keeps streaming through the drain and the next launch's first copies hit L2.
#include "common.cuh"
#include "cp_async.cuh"
#include "pdl.cuh"

namespace {

constexpr int kChunk = 1024, kChunkV = kChunk / 16; // bytes, uint4 per chunk
constexpr int kSlotV = kChunkV + 8; // a ring slot: the chunk, then 16 scales of 8 bytes (with scales)
constexpr int kWarpsPerBlock = 4, kBufs = 8;
constexpr size_t kBytes = (size_t)28672 * 4096 / 2; // gate|up's 4-bit words (58.7 MB)
constexpr size_t kFlush = (size_t)256 << 20;

// tail: 0 none, 1 line prefetches, 2 bulk prefetches of next's first 2·RING chunks of this warp.
template <int RING, bool BULK>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    stream_kernel(const uint4 *__restrict__ base, int order, int KW, int steps, unsigned *sink, int pdl,
                  const uint4 *next, int tail, const uint2 *scales, int smode) {
    extern __shared__ __align__(16) uint4 sm[];
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int W = (int)gridDim.x * kWarpsPerBlock, gw = (int)blockIdx.x * kWarpsPerBlock + warp;
    uint4 *ring = sm + (size_t)warp * RING * kSlotV;
    unsigned long long *mb =
        reinterpret_cast<unsigned long long *>(sm + (size_t)kWarpsPerBlock * RING * kSlotV) + warp * RING;
    auto chunk_in = [&](const uint4 *b, int n) -> const uint4 * {
        const size_t c = order == 0   ? (size_t)gw * steps + n
                         : order == 1 ? ((size_t)(gw / KW) * steps + n) * KW + gw % KW
                                      : (size_t)n * W + gw;
        return b + c * kChunkV;
    };
    auto chunk = [&](int n) { return chunk_in(base, n); };
    if constexpr (BULK) {
        if (lane == 0)
            for (int s = 0; s < RING; s++) mbar_init(&mb[s], 1);
        mbar_init_fence();
        __syncwarp();
    }
    auto issue = [&](int n, int slot) {
        uint4 *dst = ring + (size_t)slot * kSlotV;
        if constexpr (BULK) {
            if (n < steps && lane == 0) bulk_g2s(smem_addr(dst), chunk(n), kChunk, &mb[slot]);
        } else {
            if (n < steps) {
                const uint4 *src = chunk(n);
#pragma unroll
                for (int c = lane; c < kChunkV; c += 32) cp_async<16>(dst + c, src + c, true);
                // smode 1 (order group): row `lane` of the group's 16, 8 bytes per warp and step
                // (gemv_q4.cu); smode 2: the warp's 128 bytes of the step contiguous (a layout with each K
                // block's scales together), 16 bytes by each of lanes 0..7
                if (scales && smode == 1 && lane < 16)
                    cp_async<8>(reinterpret_cast<uint2 *>(dst + kChunkV) + lane,
                                scales + ((size_t)(gw / KW) * 16 + lane) * steps * KW + (size_t)n * KW +
                                    gw % KW,
                                true);
                if (scales && smode == 2 && lane < 8)
                    cp_async<16>(dst + kChunkV + lane, scales + ((size_t)gw * steps + n) * 16 + 2 * lane,
                                 true);
            }
            cp_commit();
        }
    };
    for (int s = 0; s < RING; s++) issue(s, s);
    if (pdl) weft_pdl_enter(); // (only the sink is written, after it)
    unsigned acc = 0;
#pragma unroll 1
    for (int n = 0; n < steps; n++) {
        const int slot = n % RING;
        if constexpr (BULK)
            mbar_wait(&mb[slot], (uint32_t)(n / RING) & 1u);
        else
            cp_wait<RING - 1>();
        __syncwarp();
        const uint4 a = ring[(size_t)slot * kSlotV + lane], b = ring[(size_t)slot * kSlotV + 32 + lane];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        if (scales && lane < 16)
            acc ^= reinterpret_cast<const uint2 *>(ring + (size_t)slot * kSlotV + kChunkV)[lane].x;
        __syncwarp();
        issue(n + RING, slot);
        if (tail && next && n + RING == steps - 1) { // this warp's last chunk is in flight
            const int nc = 2 * RING < steps ? 2 * RING : steps;
            if (tail == 1) {
                for (int c = 0; c < nc; c++) // 8 lines of 128 bytes per chunk: lanes 0..7
                    if (lane < kChunk / 128)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"(chunk_in(next, c) + lane * 8));
            } else if (lane < nc) {
                prefetch_l2(chunk_in(next, lane), kChunk);
            }
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = (unsigned)gw; // (keeps the reads; never true for the data below)
}

__global__ void plain_kernel(const uint4 *__restrict__ base, size_t nv, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < nv; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = __ldcs(base + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < nv; i += stride) {
        const uint4 v = __ldcs(base + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = 1;
}

struct Bufs {
    uint4 *b[kBufs], *big[2]; // big: 4 x kBytes each
    uint2 *s[kBufs];          // scales: kBytes / 8 each
    cudaStream_t st;          // a blocking stream: the default stream's timing events order with it
    void *flush;
    unsigned *sink;
};

// Median µs per launch of kBufs launches of f(buffer) back to back, L2 flushed before each timed set.
template <class F> double per_launch_us(const Bufs &B, F f) {
    const double ms = time_ms(
        [&] {
            for (int i = 0; i < kBufs; i++) f(B.b[i]);
        },
        2, 7, [&] { CK(cudaMemsetAsync(B.flush, 1, kFlush)); });
    return 1e3 * ms / kBufs;
}

// One configuration: kBufs launches on the buffers in turn (steps4: 4x the chunks per warp, on two 4x
// buffers, kBufs / 4 launches — the same bytes in all); pdl and tail as stream_kernel's.
template <int RING, bool BULK>
void run_case(const Bufs &B, int order, int blocks, int pdl = 0, int tail = 0, bool steps4 = false,
              int smode = 0) {
    const int W = blocks * kWarpsPerBlock, KW = 4,
              steps = (int)(kBytes / kChunk / (size_t)W) * (steps4 ? 4 : 1);
    const size_t smem = (size_t)kWarpsPerBlock * RING * (kSlotV * 16 + (BULK ? 8 : 0));
    auto k = stream_kernel<RING, BULK>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int nl = steps4 ? kBufs / 4 : kBufs;
    auto buf = [&](int i) { return steps4 ? B.big[i % 2] : B.b[i % kBufs]; };
    const double ms = time_ms(
        [&] {
            for (int i = 0; i < nl; i++) {
                const uint4 *b = buf(i), *nx = buf(i + 1);
                const uint2 *sc = smode ? B.s[i % kBufs] : nullptr;
                if (pdl) {
                    CK(weft_pdl_launch(k, dim3(blocks), dim3(32 * kWarpsPerBlock), smem, B.st, b, order, KW,
                                       steps, B.sink, pdl, nx, tail, sc, smode));
                } else {
                    k<<<blocks, 32 * kWarpsPerBlock, smem, B.st>>>(b, order, KW, steps, B.sink, pdl, nx, tail,
                                                                   sc, smode);
                    CK(cudaGetLastError());
                }
            }
        },
        2, 7, [&] { CK(cudaMemsetAsync(B.flush, 1, kFlush)); });
    const double us = 1e3 * ms / nl, bytes = (double)steps * W * (kChunk + (smode ? 128 : 0));
    static const char *oname[3] = {"run", "group", "sweep"},
                      *tname[3] = {"", " + tail lines", " + tail bulk"};
    printf("stream %-5s %-8s ring %d  %4d blocks (%5d warps, %3d chunks each)%s%s%s: %7.2f us  %.2f TB/s\n",
           oname[order], BULK ? "bulk" : "cp.async", RING, blocks, W, steps, pdl ? " PDL" : "", tname[tail],
           smode == 1   ? " + scales (16 x 8 bytes per chunk from 16 rows, gemv_q4.cu's old pattern)"
           : smode == 2 ? " + scales (128 contiguous bytes per chunk)"
                        : "",
           us, bytes / (us * 1e-6) / 1e12);
}

} // namespace

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!sm_at_least(9, "bench_cuda_stream")) return report("bench_cuda_stream");
    Bufs B{};
    for (auto &b : B.b) {
        CK(cudaMalloc(&b, kBytes));
        CK(cudaMemset(b, 0x5a, kBytes));
    }
    for (auto &b : B.s) {
        CK(cudaMalloc(&b, kBytes / 8));
        CK(cudaMemset(b, 0x3c, kBytes / 8));
    }
    for (auto &b : B.big) {
        CK(cudaMalloc(&b, 4 * kBytes));
        CK(cudaMemset(b, 0x5a, 4 * kBytes));
    }
    CK(cudaMalloc(&B.flush, kFlush));
    CK(cudaMalloc(&B.sink, sizeof(unsigned)));
    CK(cudaStreamCreate(&B.st));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const double pus = per_launch_us(B, [&](const uint4 *b) {
        plain_kernel<<<sms * 8, 256, 0, B.st>>>(b, kBytes / 16, B.sink);
        CK(cudaGetLastError());
    });
    printf("plain  16-byte loads, %d blocks of 256: %7.2f us  %.2f TB/s\n", sms * 8, pus,
           (double)kBytes / (pus * 1e-6) / 1e12);
    for (int order = 0; order < 3; order++) {
        run_case<4, false>(B, order, 598);
        run_case<4, true>(B, order, 598);
    }
    for (const int blocks : {528, 792}) {
        run_case<4, false>(B, 1, blocks);
        run_case<4, true>(B, 1, blocks);
    }
    run_case<8, false>(B, 1, 598);
    run_case<8, true>(B, 1, 598);
    run_case<2, true>(B, 1, 598);
    run_case<8, false>(B, 2, 598);
    // the boundary: 4x longer launches; PDL with the first ring before the wait; PDL + tail prefetches
    run_case<4, false>(B, 1, 598, 0, 0, true);
    run_case<4, false>(B, 1, 598, 1);
    run_case<4, false>(B, 1, 598, 1, 1);
    run_case<4, false>(B, 1, 598, 1, 2);
    run_case<4, false>(B, 1, 598, 0, 1);
    run_case<4, false>(B, 1, 598, 1, 0, true);
    // the scales beside each chunk, PDL: gemv_q4.cu's old pattern (16 lanes copy 8 bytes each, rows 736 bytes
    // apart) and 128 contiguous bytes per chunk; then without scales again
    run_case<4, false>(B, 1, 598, 1, 0, false, 1);
    run_case<4, false>(B, 1, 598, 1, 0, false, 2);
    run_case<4, false>(B, 1, 598, 1, 0, false, 0);
    run_case<4, false>(B, 1, 598, 1, 0, false, 1);
    run_case<4, false>(B, 1, 598, 1, 0, false, 2);
    for (auto &b : B.b) cudaFree(b);
    for (auto &b : B.big) cudaFree(b);
    for (auto &b : B.s) cudaFree(b);
    cudaFree(B.flush);
    cudaFree(B.sink);
    return report("bench_cuda_stream");
}
