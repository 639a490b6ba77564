// Causal GQA attention over fixed key blocks aligned to absolute positions (cuda_kernels.h).
//
// Kernel 1, one block per (row, kv head, span of WEFT_CU_ATTN_SPAN·KB keys): warp u takes (key block b, query
// head g) pairs u, u + warps, ... of the span's blocks × the G = Hq/Hkv query heads of the kv head:
//   s_t = (q·k_t)·scale (lane t = key t of the block; fmaf over the head dims in order), m_b = max_t s_t,
//   p_t = exp(s_t − m_b), l_b = Σ p_t (xor-shuffle tree), o_b[c] = Σ_t p_t·v_t[c] (lane = column c, fmaf over
//   the block's KB slots in order, p = 0 past pos);
// then the span's blocks are folded in ascending order (online-softmax rescale, Fold) into the span's
// (m, l, o). A row whose keys fit one span writes o / l; otherwise the span partials go to scratch and
// kernel 2 folds them in ascending order, then writes o / l. Folding one span into an empty total returns it
// unchanged, so both paths define the same function. Nothing depends on the other rows or on the grid size.
// Split mode (calls with few rows and spans, i.e. batch-1 decode, where one block per span leaves most SMs
// idle): kernel 1 runs one block per (row, kv head, key block) and writes the key block's partial to scratch
// unfolded; kernel 2 then does the folds kernel 1 would have done — blocks into their span, ascending, then
// spans into the total — with the same operations in the same order, so the bits are the same.
// One (block, head) pair per warp keeps each warp's dependent chain short and the SM full of warps: a decode
// row has few key blocks, so latency, not bandwidth, sets the time (bench/NOTES.md, session 4).
#include "cuda_kernels.h"
#include "attn_common.cuh"
#include "pdl.cuh"

#include <math.h>

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN, kMaxThreads = 1024;
// Split mode when a call has at most this many (row, span) pairs and fewer than kSplitBlocks span blocks; the
// scratch (weft_cu_attention_scratch_floats) is sized for kSplitRowSpans · SPAN key-block partials per head.
constexpr int kSplitRowSpans = 16, kSplitBlocks = 128;

// One warp's (key block, query head) partial: mb/lb [G] and ob [G·d] of block w in shared memory.
// DJ = ceil(d / 32) output columns per lane.
// K rows come from kb (key t0 + i at kb + i·ks): the span's K tile in shared memory (KSM) or the cache; V
// rows from vb (vb + i·vs): the block's V tile in shared memory (VSM) or the cache.
template <int DJ, bool KSM, bool VSM>
__device__ __forceinline__ void block_head(const float *__restrict__ qg, const float *__restrict__ kb, int ks,
                                           const float *__restrict__ vb, int vs, int nv, int d, float scale,
                                           int lane, float *mb, float *lb, float *ob) {
    const bool valid = lane < nv;
    const float *krow = kb + (size_t)(valid ? lane : 0) * ks;
    float acc = 0.0f;
#pragma unroll 8
    for (int c = 0; c < d; c += 4) {
        const float4 k4 = KSM ? *reinterpret_cast<const float4 *>(krow + c)
                              : __ldg(reinterpret_cast<const float4 *>(krow + c));
        const float4 q4 = *reinterpret_cast<const float4 *>(qg + c);
        acc = fmaf(q4.x, k4.x, acc);
        acc = fmaf(q4.y, k4.y, acc);
        acc = fmaf(q4.z, k4.z, acc);
        acc = fmaf(q4.w, k4.w, acc);
    }
    const float sc = valid ? acc * scale : -INFINITY;
    const float m = warp_max(sc);
    const float pv = valid ? expf(sc - m) : 0.0f;
    const float l = warp_sum(pv);
    if (lane == 0) {
        *mb = m;
        *lb = l;
    }
    // o_b over all KB key slots in order (slots past nv have p = 0 and read a clamped, written row), so the
    // loop has a fixed trip count and its loads can be in flight together; lanes past d read a clamped
    // column and store nothing.
    float o[DJ];
#pragma unroll
    for (int j = 0; j < DJ; j++) o[j] = 0.0f;
#pragma unroll 8
    for (int kk = 0; kk < KB; kk++) {
        const float p = __shfl_sync(0xffffffffu, pv, kk);
        const float *vrow = vb + (size_t)min(kk, nv - 1) * vs;
#pragma unroll
        for (int j = 0; j < DJ; j++) {
            const int c = min(lane + 32 * j, d - 1);
            o[j] = fmaf(p, VSM ? vrow[c] : __ldg(vrow + c), o[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < DJ; j++)
        if (lane + 32 * j < d) ob[lane + 32 * j] = o[j];
}

// Shared memory: q [G·d], block partials ob [NBC][G·d], mb/lb [NBC][G] (each padded to a multiple of 4),
// then with KSM the block's K rows [NBC·KB][d + 4] (16-byte rows; lane l reading row l then hits distinct
// banks per 8-lane phase), then with VSM its V rows [NBC·KB][d]. NBC = key blocks per thread block: SPAN (a
// whole span, folded here) or 1 (split mode: block partials to scratch, laid out [row][query head][key block
// of the call (nbrow per row)][m, l, o[d]]).
template <int DJ, bool KSM, bool VSM>
__global__ void __launch_bounds__(kMaxThreads)
    attn_span_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows, int Hq,
                     int Hkv, int d, int layer, float scale, float *scratch, int max_spans, int NBC,
                     int nbrow) {
    extern __shared__ __align__(16) float sm[];
    weft_pdl_enter();
    const int r = blockIdx.x, j = blockIdx.y, span = blockIdx.z, t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int T = blockDim.x, nw = T >> 5;
    const int G = Hq / Hkv, Gd = G * d, kvd = Hkv * d;
    const weft_cu_row row = rows[r];
    const int nkeys = row.pos + 1, k0 = span * NBC * KB;
    if (k0 >= nkeys) return;
    const int NG4 = (NBC * G + 3) & ~3;
    float *sq = sm, *ob = sq + Gd, *mb = ob + NBC * Gd, *lb = mb + NG4;
    const int qoff = r * Hq * d + j * Gd;
    const float *Kc = row.kv + (size_t)(2 * layer) * (size_t)row.cap * (size_t)kvd + (size_t)j * d;
    const float *Vc = Kc + (size_t)row.cap * (size_t)kvd;
    // KSM: the span's K rows copied once, coalesced, into shared memory, where each warp's lanes read one key
    // row each. Read straight from the cache, those per-lane rows cost the L1 one line per lane per load
    // (measured: ~30 of ~40 µs stalled on L1TEX at ctx 600). The copy changes no value.
    const int nk = min(NBC * KB, nkeys - k0), DP = d + 4;
    float *sk = lb + NG4, *sv = sk + NBC * KB * DP;
    if (KSM) { // (VSM: the V rows in the same pass, so both tiles cost one memory round trip)
        const int d4 = d / 4;
        for (int i = t; i < nk * d4; i += T) {
            const int key = i / d4, c4 = i % d4;
            const size_t gi = (size_t)(k0 + key) * kvd + 4 * c4;
            const float4 kv4 = __ldg(reinterpret_cast<const float4 *>(Kc + gi));
            if (VSM)
                *reinterpret_cast<float4 *>(sv + key * d + 4 * c4) =
                    __ldg(reinterpret_cast<const float4 *>(Vc + gi));
            *reinterpret_cast<float4 *>(sk + key * DP + 4 * c4) = kv4;
        }
    }
    for (int i = t; i < Gd; i += T) sq[i] = Q[qoff + i];
    __syncthreads();
    const int nb = min(NBC, (nkeys - k0 + KB - 1) / KB);
    for (int u = w; u < nb * G; u += nw) {
        const int b = u / G, g = u % G, t0 = k0 + b * KB;
        const float *kb = KSM ? sk + b * KB * DP : Kc + (size_t)t0 * kvd;
        const float *vb = VSM ? sv + b * KB * d : Vc + (size_t)t0 * kvd;
        block_head<DJ, KSM, VSM>(sq + g * d, kb, KSM ? DP : kvd, vb, VSM ? d : kvd, min(KB, nkeys - t0), d,
                                 scale, lane, &mb[b * G + g], &lb[b * G + g], ob + b * Gd + g * d);
    }
    __syncthreads();
    if (NBC != SPAN) { // split mode: the block partials as they are, for kernel 2
        for (int i = t; i < nb * Gd; i += T) {
            const int b = i / Gd, g = (i / d) % G, c = i % d;
            float *p = scratch + (((size_t)r * Hq + (size_t)j * G + g) * nbrow + span * NBC + b) * (d + 2);
            p[2 + c] = ob[i];
            if (c == 0) {
                p[0] = mb[b * G + g];
                p[1] = lb[b * G + g];
            }
        }
        return;
    }
    const bool single = nkeys <= SPAN * KB;
    for (int i = t; i < Gd; i += T) {
        const int g = i / d;
        Fold f{-INFINITY, 0.0f, 0.0f};
        for (int b = 0; b < nb; b++) f.add(mb[b * G + g], lb[b * G + g], ob[b * Gd + i]);
        if (single) {
            Out[qoff + i] = f.o / f.l;
        } else {
            float *p = scratch + (((size_t)r * Hq + (size_t)j * G + g) * max_spans + span) * (d + 2);
            p[2 + i % d] = f.o;
            if (i % d == 0) {
                p[0] = f.m;
                p[1] = f.l;
            }
        }
    }
}

// One block per (row, query head) of rows whose keys span more than one span: folds the span partials in
// order. Split mode (nbrow > 0): every row, from the block partials — each span's blocks folded in order as
// kernel 1 folds them, then the spans as above.
__global__ void attn_combine_kernel(float *Out, const weft_cu_row *__restrict__ rows, int Hq, int d,
                                    const float *__restrict__ scratch, int max_spans, int nbrow) {
    weft_pdl_enter();
    const int r = blockIdx.x, h = blockIdx.y;
    const int nkeys = rows[r].pos + 1;
    const bool single = nkeys <= SPAN * KB;
    if (single && nbrow == 0) return;
    const int ns = (nkeys + SPAN * KB - 1) / (SPAN * KB), nblk = (nkeys + KB - 1) / KB;
    const float *base = scratch + ((size_t)r * Hq + h) * (size_t)(nbrow ? nbrow : max_spans) * (d + 2);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        Fold f{-INFINITY, 0.0f, 0.0f};
        for (int s = 0; s < ns; s++) {
            if (nbrow == 0) {
                const float *p = base + (size_t)s * (d + 2);
                f.add(p[0], p[1], p[2 + c]);
                continue;
            }
            // The span's block partials loaded together, then folded in order.
            const int b0 = s * SPAN, nbs = min(nblk - b0, SPAN);
            float pm[SPAN], pl[SPAN], po[SPAN];
#pragma unroll
            for (int i = 0; i < SPAN; i++) {
                const float *p = base + (size_t)(b0 + min(i, nbs - 1)) * (d + 2);
                pm[i] = p[0];
                pl[i] = p[1];
                po[i] = p[2 + c];
            }
            Fold fs{-INFINITY, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < SPAN; i++)
                if (i < nbs) fs.add(pm[i], pl[i], po[i]);
            if (single) {
                f = fs; // kernel 1 writes a one-span row's o / l straight from its span
            } else {
                f.add(fs.m, fs.l, fs.o);
            }
        }
        Out[((size_t)r * Hq + h) * d + c] = f.o / f.l;
    }
}

template <int DJ>
cudaError_t span_launch(dim3 grid, int threads, int G, cudaStream_t stream, const float *q, float *out,
                        const weft_cu_row *rows, int Hq, int Hkv, int d, int layer, float scale,
                        float *scratch, int max_spans, int NBC, int nbrow) {
    // The K tile in shared memory when it fits (d <= 128: at most ~173 KB with G·d <= 1024); split mode
    // (NBC = 1) also its V tile.
    const size_t base = (size_t)G * d * (1 + NBC) + 2 * (size_t)((NBC * G + 3) & ~3);
    const size_t ksm = sizeof(float) * (base + (size_t)NBC * KB * (size_t)(d + 4));
    const bool use_ksm = d <= 128, use_vsm = use_ksm && NBC == 1;
    const size_t smem = use_vsm   ? ksm + sizeof(float) * (size_t)KB * (size_t)d
                        : use_ksm ? ksm
                                  : sizeof(float) * base;
    auto kernel = use_vsm   ? attn_span_kernel<DJ, true, true>
                  : use_ksm ? attn_span_kernel<DJ, true, false>
                            : attn_span_kernel<DJ, false, false>;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return weft_pdl_launch(kernel, grid, dim3(threads), smem, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                           scratch, max_spans, NBC, nbrow);
}

} // namespace

extern "C" size_t weft_cu_attention_scratch_floats(int n_rows, int Hq, int d, int max_context) {
    const int spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    const size_t span_parts = (size_t)n_rows * (size_t)spans, split_parts = (size_t)kSplitRowSpans * SPAN;
    return (span_parts > split_parts ? span_parts : split_parts) * (size_t)Hq * (size_t)(d + 2);
}

extern "C" cudaError_t weft_cu_attention(const float *q, float *out, const weft_cu_row *rows, int n,
                                         int max_pos, int Hq, int Hkv, int d, int layer, float scale,
                                         float *scratch, int max_context, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (Hkv <= 0 || Hq % Hkv || d <= 0 || d > 256 || d % 4 || (Hq / Hkv) * d > 1024 || max_pos >= max_context)
        return cudaErrorInvalidValue;
    const int G = Hq / Hkv, spans = max_pos / (SPAN * KB) + 1,
              max_spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    // Split mode (the header) when one block per span would leave most of the GPU idle; the choice changes
    // where the folds run, never their order.
    const bool split = (int64_t)n * spans <= kSplitRowSpans && (int64_t)n * Hkv * spans < kSplitBlocks;
    const int NBC = split ? 1 : SPAN, nbrow = split ? spans * SPAN : 0;
    // One warp per (key block, query head) of the thread block, at most kMaxThreads threads.
    const int threads = min(kMaxThreads, 32 * NBC * G);
    const dim3 grid((unsigned)n, (unsigned)Hkv, (unsigned)(spans * (SPAN / NBC)));
    cudaError_t e = cudaSuccess;
    switch ((d + 31) / 32) {
    case 1:
        e = span_launch<1>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale, scratch,
                           max_spans, NBC, nbrow);
        break;
    case 2:
        e = span_launch<2>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale, scratch,
                           max_spans, NBC, nbrow);
        break;
    case 3:
    case 4:
        e = span_launch<4>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale, scratch,
                           max_spans, NBC, nbrow);
        break;
    default:
        e = span_launch<8>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale, scratch,
                           max_spans, NBC, nbrow);
        break;
    }
    if (e != cudaSuccess) return e;
    if (spans > 1 || split) {
        const int cthreads = d < 128 ? 32 : 128;
        return weft_pdl_launch(attn_combine_kernel, dim3((unsigned)n, (unsigned)Hq), dim3(cthreads), 0,
                               stream, out, rows, Hq, d, (const float *)scratch, max_spans, nbrow);
    }
    return cudaGetLastError();
}
