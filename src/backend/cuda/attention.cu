// Causal GQA attention over fixed key blocks aligned to absolute positions (cuda_kernels.h).
//
// Kernel 1, one block per (row, kv head, span of WEFT_CU_ATTN_SPAN·KB keys): warp u takes key blocks u,
// u + warps, ... of the span, each for all G = Hq/Hkv query heads of the kv head at once (the heads are the
// rows of one m-tile of 16): attn_block (attn_mma.cuh) gives the block's (m_b, l_b, o_b) per head on bf16
// tensor cores (hi/lo split operands), its K and V fragments read straight from the cache (keys past the
// row's position clamped to its last key: they are masked, p = 0). Then the span's blocks are folded in
// ascending order (online-softmax rescale, Fold) into the span's (m, l, o). A row whose keys fit one span
// writes o / l; otherwise the span partials go to scratch and kernel 2 folds them in ascending order, then
// writes o / l. Folding one span into an empty total returns it unchanged, so both paths define the same
// function. Nothing depends on the other rows or on the grid size. Split mode (calls with few rows and spans,
// i.e. batch-1 decode, where one block per span leaves most SMs idle): kernel 1 runs one block per (row, kv
// head, key block) and writes the key block's partial to scratch unfolded; kernel 2 then does the folds
// kernel 1 would have done — blocks into their span, ascending, then spans into the total — with the same
// operations in the same order, so the bits are the same.
#include "cuda_kernels.h"
#include "attn_mma.cuh"
#include "cp_async.cuh"
#include "pdl.cuh"

#include <math.h>

#include <algorithm>

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN;
// Split mode when a call has at most this many (row, span) pairs and fewer than kSplitBlocks span blocks; the
// scratch (weft_cu_attention_scratch_floats) is sized for kSplitRowSpans · SPAN key-block partials per head.
constexpr int kSplitRowSpans = 16, kSplitBlocks = 128, kSplitWarps = 4;

// K and V fragments straight from one row's cache (keys from t0, clamped to last); Q from shared memory.
// F16: an f16 cache (kv_cache.cuh) whose words are the operands as they are; k2h / v2h give them alone.
template <bool F16> struct CacheSrc : AttnQ {
    const KvElem<F16> *K, *V; // the kv head's column 0 at position 0
    int kvd, t0, last;
    __device__ __forceinline__ void k2(int ks, int np, uint32_t h[4], uint32_t l[4]) const {
        k(ks, 2 * np, h, l);
        k(ks, 2 * np + 1, h + 2, l + 2);
    }
    __device__ __forceinline__ void v2(int nt, uint32_t h[4], uint32_t l[4]) const {
        v(0, nt, h, l);
        v(1, nt, h + 2, l + 2);
    }
    __device__ __forceinline__ void k2h(int ks, int np, uint32_t h[4]) const {
        uint32_t l[4]; // zeros for F16, not used
        k2(ks, np, h, l);
    }
    __device__ __forceinline__ void v2h(int nt, uint32_t h[4]) const {
        uint32_t l[4];
        v2(nt, h, l);
    }
    __device__ __forceinline__ void k(int ks, int nt, uint32_t h[2], uint32_t l[2]) const {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const KvElem<F16> *kr = K + (size_t)min(t0 + 8 * nt + g, last) * kvd + 16 * ks + 2 * t;
        if constexpr (F16) { // dims (2t, 2t + 1) and (2t + 8, 2t + 9): one word each
            h[0] = __ldg(reinterpret_cast<const unsigned *>(kr));
            h[1] = __ldg(reinterpret_cast<const unsigned *>(kr + 8));
            l[0] = l[1] = 0u;
        } else {
            const float2 a = __ldg(reinterpret_cast<const float2 *>(kr)),
                         b = __ldg(reinterpret_cast<const float2 *>(kr + 8));
            attn_split<false>(a.x, a.y, h[0], l[0]);
            attn_split<false>(b.x, b.y, h[1], l[1]);
        }
    }
    __device__ __forceinline__ void v(int kk, int nt, uint32_t h[2], uint32_t l[2]) const {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const int k0 = t0 + 16 * kk + 2 * t;
        const KvElem<F16> *vc = V + 8 * nt + g;
        const KvElem<F16> v0 = __ldg(vc + (size_t)min(k0, last) * kvd),
                          v1 = __ldg(vc + (size_t)min(k0 + 1, last) * kvd),
                          v8 = __ldg(vc + (size_t)min(k0 + 8, last) * kvd),
                          v9 = __ldg(vc + (size_t)min(k0 + 9, last) * kvd);
        if constexpr (F16) {
            h[0] = (uint32_t)v0 | (uint32_t)v1 << 16;
            h[1] = (uint32_t)v8 | (uint32_t)v9 << 16;
            l[0] = l[1] = 0u;
        } else {
            attn_split<false>(v0, v1, h[0], l[0]);
            attn_split<false>(v8, v9, h[1], l[1]);
        }
    }
};

// Shared memory: Q hi, lo planes [16][QS] (u32; rows past G zero); in split mode the block's K and Vᵀ planes
// (SmemSrc); then fp32: block partials ob [NBC][G·d], mb/lb [NBC][G] (each padded to a multiple of 4).
// NBC = key blocks per thread block: SPAN (a whole span, folded here; one warp per key block, its K and V
// fragments read from the cache) or 1 (split mode: kSplitWarps warps stage the block in shared memory with
// one memory round trip, then share its n-tiles; the block partials go to scratch, laid out [row][query
// head][key block of the call (nbrow per row)][m, l, o[d]]).
template <int DMAX, bool F16>
__global__ void __launch_bounds__(32 * SPAN)
    attn_span_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows, int Hq,
                     int Hkv, int d, int layer, float scale, float *scratch, int max_spans, int NBC,
                     int nbrow) {
    extern __shared__ __align__(16) uint32_t smw[];
    const int r = blockIdx.x, j = blockIdx.y, span = blockIdx.z, t = threadIdx.x, w = t >> 5;
    const int T = blockDim.x, nw = T >> 5;
    const int G = Hq / Hkv, Gd = G * d, kvd = Hkv * d, QS = d / 2 + 4;
    const weft_cu_row row = rows[r]; // copied in before the forward's first kernel: readable before the wait
    const int nkeys = row.pos + 1, k0 = span * NBC * KB;
    const KvElem<F16> *Kc = kv_rows<F16>(row, layer, 0, kvd) + (size_t)j * d,
                      *Vc = kv_rows<F16>(row, layer, 1, kvd) + (size_t)j * d;
    // Whole-span mode: before the PDL wait, each lane asks L2 for its key row of K in its warp's key block,
    // so the first k steps' loads (one round trip each) find it there. A hint only: nothing is read into
    // registers or shared memory, so nothing the predecessor writes can be stale (bench/NOTES.md session 14:
    // 16 rows x 600 positions 55.8 -> 51.1 us per layer, 16 streams +2.5%, 64 streams +4.6%).
    if (NBC != 1 && k0 + w * KB + (t & 31) < nkeys)
        prefetch_l2(Kc + (size_t)(k0 + w * KB + (t & 31)) * kvd, (uint32_t)(d * sizeof(KvElem<F16>)));
    weft_pdl_enter();
    if (k0 >= nkeys) return;
    const int NG4 = (NBC * G + 3) & ~3;
    uint32_t *qh = smw, *ql = qh + 16 * QS, *kh = ql + 16 * QS, *kl = kh + KB * QS, *vh = kl + KB * QS,
             *vl = vh + d * kAttnVS;
    float *ob = reinterpret_cast<float *>(kh + (NBC == 1 ? attn_kv_words(d) : 0)), *mb = ob + NBC * Gd,
          *lb = mb + NG4;
    const size_t qoff = ((size_t)r * Hq + (size_t)j * G) * d;
    const auto q_row = [&](int g) -> const float * { return g < G ? Q + qoff + g * d : nullptr; };
    const int nb = min(NBC, (nkeys - k0 + KB - 1) / KB);
    const int pos[2] = {row.pos, row.pos}; // padded rows (heads past G) are computed and never stored
    if (NBC == 1) {                        // K, V and Q loads in flight together: one memory round trip
        AttnKV<DMAX, 32 * kSplitWarps, F16> kv;
        kv.load_k(Kc, kvd, k0, row.pos, d);
        kv.load_v(Vc, kvd, k0, row.pos, d);
        attn_stage_q<F16>(qh, ql, QS, 16, d, q_row);
        kv.store_k(kh, kl, QS, d);
        kv.store_v(vh, vl, d);
        __syncthreads();
        const SmemSrc src{{qh, ql, QS}, kh, kl, vh, vl};
        BlockOut bo{mb, lb, ob, G, d, w == 0};
        attn_block<DMAX, SmemSrc, BlockOut, false, F16>(src, pos, k0, d, scale, bo, w, nw);
    } else {
        attn_stage_q<F16>(qh, ql, QS, 16, d, q_row);
        __syncthreads();
        for (int b = w; b < nb; b += nw) {
            const int t0 = k0 + b * KB;
            const CacheSrc<F16> src{{qh, ql, QS}, Kc, Vc, kvd, t0, row.pos};
            BlockOut bo{mb + b * G, lb + b * G, ob + b * Gd, G, d, true};
            attn_block<DMAX, CacheSrc<F16>, BlockOut, false, F16>(src, pos, t0, d, scale, bo);
        }
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
    const int ns = (nkeys + SPAN * KB - 1) / (SPAN * KB);
    const float *base = scratch + ((size_t)r * Hq + h) * (size_t)(nbrow ? nbrow : max_spans) * (d + 2);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        Fold f{-INFINITY, 0.0f, 0.0f};
        if (nbrow == 0) {
            for (int s = 0; s < ns; s++) {
                const float *p = base + (size_t)s * (d + 2);
                f.add(p[0], p[1], p[2 + c]);
            }
        } else {
            const float *const b1[1] = {base};
            const int c1[1] = {c};
            Fold f1[1];
            attn_fold_blocks<1>(b1, nkeys, c1, d, f1);
            f = f1[0];
        }
        Out[((size_t)r * Hq + h) * d + c] = f.o / f.l;
    }
}

cudaError_t combine_launch(float *out, const weft_cu_row *rows, int n, int Hq, int d, const float *scratch,
                           int max_spans, int nbrow, cudaStream_t stream) {
    return weft_pdl_launch(attn_combine_kernel, dim3((unsigned)n, (unsigned)Hq), dim3(d < 128 ? 32 : 128), 0,
                           stream, out, rows, Hq, d, scratch, max_spans, nbrow);
}

// Dynamic shared memory of kernel 1 with NBC key blocks per thread block (the layout above its definition).
size_t span_smem(int G, int d, int NBC) {
    return 4 * ((size_t)2 * 16 * (size_t)(d / 2 + 4) + (NBC == 1 ? (size_t)attn_kv_words(d) : 0) +
                (size_t)NBC * G * d + 2 * (size_t)((NBC * G + 3) & ~3));
}

template <int DMAX, bool F16>
cudaError_t span_launch_f(dim3 grid, int threads, int G, cudaStream_t stream, const float *q, float *out,
                          const weft_cu_row *rows, int Hq, int Hkv, int d, int layer, float scale,
                          float *scratch, int max_spans, int NBC, int nbrow) {
    const size_t smem = span_smem(G, d, NBC);
    // (weft_smem_opt_in: the limit raised, never lowered — split and non-split launches of the same
    // instance may sit in different cached graphs)
    const cudaError_t e = weft_smem_opt_in(attn_span_kernel<DMAX, F16>, smem);
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(attn_span_kernel<DMAX, F16>, grid, dim3(threads), smem, stream, q, out, rows, Hq,
                           Hkv, d, layer, scale, scratch, max_spans, NBC, nbrow);
}

template <int DMAX>
cudaError_t span_launch(bool f16, dim3 grid, int threads, int G, cudaStream_t stream, const float *q,
                        float *out, const weft_cu_row *rows, int Hq, int Hkv, int d, int layer, float scale,
                        float *scratch, int max_spans, int NBC, int nbrow) {
    return f16 ? span_launch_f<DMAX, true>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                                           scratch, max_spans, NBC, nbrow)
               : span_launch_f<DMAX, false>(grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                                            scratch, max_spans, NBC, nbrow);
}

} // namespace

extern "C" int weft_cu_attention_ok(int Hq, int Hkv, int d) {
    return Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= 16 && d > 0 && d <= 256 && d % 16 == 0;
}

extern "C" size_t weft_cu_attention_smem(int Hq, int Hkv, int d) {
    if (!weft_cu_attention_ok(Hq, Hkv, d)) return 0;
    const int G = Hq / Hkv;
    const size_t span = std::max(span_smem(G, d, 1), span_smem(G, d, SPAN)),
                 tiles = weft_cu_attention_tiles_ok(Hq, Hkv, d) ? weft_cu_attention_tiles_smem(d) : 0;
    return std::max(span, tiles);
}

extern "C" size_t weft_cu_attention_scratch_floats(int n_rows, int Hq, int d, int max_context) {
    const int spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    const size_t span_parts = (size_t)n_rows * (size_t)spans, split_parts = (size_t)kSplitRowSpans * SPAN;
    return (span_parts > split_parts ? span_parts : split_parts) * (size_t)Hq * (size_t)(d + 2);
}

extern "C" cudaError_t weft_cu_attention(const float *q, float *out, const weft_cu_row *rows, int n,
                                         int max_pos, int Hq, int Hkv, int d, int layer, float scale,
                                         float *scratch, int max_context, int f16, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!weft_cu_attention_ok(Hq, Hkv, d) || max_pos >= max_context) return cudaErrorInvalidValue;
    const int G = Hq / Hkv, spans = max_pos / (SPAN * KB) + 1,
              max_spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    // Split mode (the header) when one block per span would leave most of the GPU idle; the choice changes
    // where the folds run, never their order.
    const bool split = (int64_t)n * spans <= kSplitRowSpans && (int64_t)n * Hkv * spans < kSplitBlocks;
    const int NBC = split ? 1 : SPAN, nbrow = split ? spans * SPAN : 0;
    const int threads = split ? 32 * kSplitWarps : 32 * NBC; // non-split: one warp per key block
    const dim3 grid((unsigned)n, (unsigned)Hkv, (unsigned)(spans * (SPAN / NBC)));
    cudaError_t e;
    if (d <= 32)
        e = span_launch<32>(f16 != 0, grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                            scratch, max_spans, NBC, nbrow);
    else if (d <= 64)
        e = span_launch<64>(f16 != 0, grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                            scratch, max_spans, NBC, nbrow);
    else if (d <= 128)
        e = span_launch<128>(f16 != 0, grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                             scratch, max_spans, NBC, nbrow);
    else
        e = span_launch<256>(f16 != 0, grid, threads, G, stream, q, out, rows, Hq, Hkv, d, layer, scale,
                             scratch, max_spans, NBC, nbrow);
    if (e != cudaSuccess) return e;
    if (spans > 1 || split) return combine_launch(out, rows, n, Hq, d, scratch, max_spans, nbrow, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_attention_combine(float *out, const weft_cu_row *rows, int n, int Hq, int d,
                                                 const float *scratch, int max_context, cudaStream_t stream) {
    return combine_launch(out, rows, n, Hq, d, scratch, (max_context + SPAN * KB - 1) / (SPAN * KB), 0,
                          stream);
}
