// The decode step of one layer's attention in one kernel, for rows of distinct streams (a decode round):
// weft_cu_attention_decode (cuda_kernels.h).
//
// At one row the attention stage was four dependent kernels — RoPE + KV store (ops.cu), the split-mode
// attention and its combine (attention.cu), and the o projection's activation prep (mma_q4x.cu) — and at
// batch 1 each kernel boundary costs about as much as the work (≈ 16 µs per layer for ≈ 5 MB of K/V,
// bench/NOTES.md session 10). This kernel does the same arithmetic in one launch, so it gives the same bits:
//  - one block per (kv head j, key block kb, row r) of row r's keys 0..pos, as the split mode (its warps
//  sharing
//    the block's n-tiles, K and V staged as hi/lo planes with one memory round trip);
//  - every block rotates the G query heads of kv head j with weft_rope_rotate (rope.cuh, as rope_store) into
//    shared memory and stages them; the block holding key pos also rotates the new key, stores it and the new
//    value into the cache at pos, and takes key pos from shared memory (AttnKV::set_key) — no block reads
//    cache entries another block of the grid writes;
//  - attn_block and the key block's record [m, l, o[d]] in scratch as the split mode writes them;
//  - the last block of a span to finish (an arrival counter, which that block returns to zero) folds the
//    span's records of its G heads into span totals, and the last span of kv head j folds those, in the split
//    mode's order (attn_fold_blocks); it stores out = o / l and the prepared words of those G·d outputs
//    (q4_prep_chunk, as weft_cu_xq_prep).
// The arrival counters order nothing in the arithmetic: the fold order is fixed by position, whichever block
// arrives last. Rows share nothing: each has its own cache (one row per stream), records and counters, so a
// row's bits do not depend on the other rows of the call. That is the block form. The span form (f16 on
// devices with thread block clusters; attn_decode_span_kernel below) computes the same records and folds
// with one block per span and the folds in shared and distributed shared memory: 8.5 vs 12.8 µs per layer
// at 600 positions, batch-1 decode 496 vs 466 tok/s (bench/NOTES.md session 21). forward.c takes the kernel
// for rounds of at most weft_cu_attention_decode_rows streams (4 in the span form, 1 in the block form: past
// those the separate kernels are faster, sessions 12 and 21), while the harness checks every row count and
// both forms against them.
#include "cuda_kernels.h"
#include "attn_mma.cuh"
#include "cp_async.cuh"
#include "pdl.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"

#include <cooperative_groups.h>

namespace {

// 8 warps: they share the key block's 16 n-tiles of P·V, and the merge has 2 outputs per thread at the 8B
// shape (4 warps measured slower: the merge is the block's tail, bench/NOTES.md session 11).
constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kMergeNC = 2; // outputs a merging thread folds together
// Key blocks per kv head this kernel takes: 8 spans (positions < 2048). The scratch floor
// (weft_cu_attention_scratch_floats) holds 16 spans, but the last block's fold grows with the key blocks:
// measured back to back at 32/8 heads of 128 (bench_cuda_attention_decode, session 11) it beats the separate
// kernels up to 2048 positions (14.1 vs 16.5 µs at 600, 31.6 vs 40.6 at 2048) and loses at 4000 (58 vs 21:
// the separate path's unsplit mode there).
constexpr int kMaxSpans = 8, kMaxBlocks = kMaxSpans * SPAN;
static_assert(kMaxSpans <= SPAN, "the span totals fold in one attn_fold_span call");
static_assert(kMaxBlocks + SPAN <= 16 * SPAN, "the scratch floor holds 16 spans of records per head");
constexpr int kRopePre = 4; // inv_freq values per thread loaded before the PDL wait

// Shared memory (u32 words / floats): Q hi, lo planes [16][QS]; K, Vᵀ planes (attn_kv_words); xg [G][d] fp32
// (the rotated q, then the block's o_b, then the folded outputs); knew, vnew [d]; mb, lb [G padded to 4]; the
// block's scores sx [16][KB] (attn_block's SHARED_SCORES: 4 warps compute them, all read them); the arrival
// flag (an int, padded to 4).
int smem_bytes(int G, int d) {
    return 4 * (2 * 16 * (d / 2 + 4) + attn_kv_words(d) + G * d + 2 * d + 2 * ((G + 3) & ~3) + 16 * KB + 4);
}

// Row x [d] normed into y as weft_cu_rmsnorm norms a row of d elements (ops.cu's rmsnorm_kernel<T>, T =
// weft_norm_threads(d)), by one warp: lane l plays the virtual threads 32m + l (m < T/32), each summing
// fmaf(x_i, x_i, ·) over i = vt, vt + T, ... in order; virtual warp m's xor tree is the warp's, and its sum
// is its lane 0's; the T/32 sums add in order; y_i = wn_i·(x_i·inv), inv = 1 / sqrtf(tot / d + eps).
__device__ __forceinline__ void head_norm(const float *x, const float *wn, int d, float eps, float *y) {
    const int lane = threadIdx.x & 31, T = weft_norm_threads(d);
    float tot = 0.0f;
    for (int m = 0; m < T / 32; m++) {
        float ss = 0.0f;
        for (int i = 32 * m + lane; i < d; i += T) ss = fmaf(x[i], x[i], ss);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
        ss = __shfl_sync(0xffffffffu, ss, 0);
        tot = m == 0 ? ss : __fadd_rn(tot, ss);
    }
    const float inv = 1.0f / sqrtf(tot / (float)d + eps);
    for (int i = lane; i < d; i += 32) y[i] = wn[i] * (x[i] * inv);
}

// The inv_freq of this thread's first kRopePre pairs (uploaded once, written by no kernel: loaded before the
// PDL wait).
__device__ __forceinline__ void rope_pre(const weft_cu_rope &rope, float (&fpre)[kRopePre]) {
    const int half = rope.rot / 2;
#pragma unroll
    for (int u = 0; u < kRopePre; u++)
        fpre[u] = half > 0 ? rope.inv_freq[(threadIdx.x + u * kThreads) % half] : 0.0f;
}

// Row r's inputs of kv head j, by the block's kThreads threads: q heads j·G .. j·G + G − 1 into xg [G][d]
// and, with newkey, head j of k into knew [d] — first copied into shared memory, or, with per-head norms
// (qwen3), normed into it as weft_cu_rmsnorm norms them in place (head_norm); then rotated there in place at
// pos — and head j of v into vnew [d]. Contains two block barriers.
__device__ __forceinline__ void rotate_heads(const float *q, const float *k, const float *v, int r, int j,
                                             int Hq, int Hkv, int d, int pos, bool newkey,
                                             const weft_cu_rope &rope, const float (&fpre)[kRopePre],
                                             const float *q_norm, const float *k_norm, float eps, float *xg,
                                             float *knew, float *vnew) {
    const int t = threadIdx.x, w = t >> 5, G = Hq / Hkv, Gd = G * d, kvd = Hkv * d, half = rope.rot / 2;
    const float *qj = q + (size_t)r * Hq * d + (size_t)j * Gd, *kj = k + (size_t)r * kvd + (size_t)j * d;
    const int nh = G + (newkey ? 1 : 0), np = half * nh;
    auto row_in = [&](int h) -> const float * { return h < G ? qj + h * d : kj; };
    auto row_out = [&](int h) -> float * { return h < G ? xg + h * d : knew; };
    if (q_norm) {
        for (int h = w; h < nh; h += kWarps)
            head_norm(row_in(h), h < G ? q_norm : k_norm, d, eps, row_out(h));
    } else {
        for (int i = t; i < nh * d; i += kThreads) row_out(i / d)[i % d] = row_in(i / d)[i % d];
    }
    if (newkey)
        for (int c = t; c < d; c += kThreads) vnew[c] = v[(size_t)r * kvd + (size_t)j * d + c];
    __syncthreads();
    auto rotate = [&](int idx, float f) {
        int a, b;
        weft_rope_dims(rope, idx % half, a, b);
        float *y = row_out(idx / half);
        weft_rope_rotate(pos, f, rope.attn_factor, y[a], y[b], y[a], y[b]); // (x0, x1 taken by value)
    };
#pragma unroll
    for (int u = 0; u < kRopePre; u++)
        if (t + u * kThreads < np) rotate(t + u * kThreads, fpre[u]);
    for (int idx = t + kRopePre * kThreads; idx < np; idx += kThreads) rotate(idx, rope.inv_freq[idx % half]);
    __syncthreads();
}

// The prepared words and sums of row r's outputs of kv head j (xg [G·d], the block's shared copy): sub-blocks
// of 32 (G·d % 32 == 0), 8 per warp call, 4 lanes each, as weft_cu_xq_prep; the loop bound is warp-uniform
// (q4_prep_chunk shuffles). Row r's sub-blocks start at r·Hq·d/32.
__device__ __forceinline__ void prep_words(const float *xg, uint32_t *xf, float *xs, bool xf16, int r, int j,
                                           int Hkv, int Gd) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, tt = lane & 3, nsl = Gd / 32;
    const int64_t sub0 = (int64_t)r * Hkv * nsl + (int64_t)j * nsl;
    for (int b0 = 8 * w; b0 < nsl; b0 += 8 * kWarps) {
        const int sl = b0 + (lane >> 2);
        const bool ok = sl < nsl;
        float vv[8];
#pragma unroll
        for (int e = 0; e < 8; e++) vv[e] = ok ? xg[sl * 32 + 8 * tt + e] : 0.0f;
        const float s = q4_prep_chunk(vv, xf + (sub0 + (ok ? sl : 0)) * 32, tt, ok, xf16);
        if (ok && tt == 0) xs[sub0 + sl] = s;
    }
}

template <int DMAX, bool F16>
__global__ void __launch_bounds__(kThreads)
    attn_decode_kernel(const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                       float *out, uint32_t *xf, float *xs, bool xf16, const weft_cu_row *__restrict__ rows,
                       int Hq, int Hkv, int d, int layer, float scale, weft_cu_rope rope,
                       const float *__restrict__ q_norm, const float *__restrict__ k_norm, float eps,
                       float *scratch, int nbrow, int *counters) {
    extern __shared__ __align__(16) uint32_t smw[];
    const int j = blockIdx.x, kb = blockIdx.y, r = blockIdx.z, t = threadIdx.x, w = t >> 5;
    const int G = Hq / Hkv, Gd = G * d, kvd = Hkv * d, QS = d / 2 + 4;
    uint32_t *qh = smw, *ql = qh + 16 * QS, *kh = ql + 16 * QS, *kl = kh + KB * QS, *vh = kl + KB * QS,
             *vl = vh + d * kAttnVS;
    float *xg = reinterpret_cast<float *>(smw + 32 * QS + attn_kv_words(d)), *knew = xg + Gd,
          *vnew = knew + d, *mb = vnew + d, *lb = mb + ((G + 3) & ~3), *sx = lb + ((G + 3) & ~3);
    // The arrival flag in dynamic shared memory too: the kernel has no static shared memory, so the
    // launcher's limit (the device maximum) is what dynamic shared memory may take.
    int &arrived_last = *reinterpret_cast<int *>(sx + 16 * KB);
    float fpre[kRopePre];
    rope_pre(rope, fpre);
    // Before the PDL wait (pdl.cuh), besides inv_freq: the row table and the cached keys and values before
    // pos. No kernel of this forward writes them: the row table is copied in before the forward's first
    // kernel, and a row's cache entries before its position were written by earlier forwards, each of which
    // the host waits for (forward.c) — one row per launch (the API), so no other row of the launch writes
    // them either. Their loads then travel while the predecessor (the q|k|v matmul) finishes.
    const weft_cu_row row = rows[r];
    const int t0 = kb * KB, pos = row.pos;
    // A grid that does not cover the row (max_pos below its position: a caller's error) computes nothing, so
    // the arrival counters stay at zero for the launches after it — but its blocks still wait for the
    // predecessor before leaving: a launch none of whose blocks waits could complete before its predecessor,
    // and the next kernel would then be ordered after neither (pdl.cuh). Blocks past the row's position
    // leave at once: the row's block 0 (t0 = 0) waits.
    if (pos < 0 || pos >= nbrow * KB) {
        weft_pdl_enter();
        return;
    }
    if (t0 > pos) return;
    const bool newkey = pos < t0 + KB; // this block's keys include the row's own
    KvElem<F16> *Kc = kv_rows<F16>(row, layer, 0, kvd) + (size_t)j * d,
                *Vc = kv_rows<F16>(row, layer, 1, kvd) + (size_t)j * d;
    AttnKV<DMAX, kThreads, F16> kv;
    kv.load_k(Kc, kvd, t0, pos - 1, d);
    kv.load_v(Vc, kvd, t0, pos - 1, d);
    weft_pdl_enter();
    rotate_heads(q, k, v, r, j, Hq, Hkv, d, pos, newkey, rope, fpre, q_norm, k_norm, eps, xg, knew, vnew);
    if (newkey) {
        kv.set_key(t0, pos, knew, vnew, d);
        for (int c = t; c < d; c += kThreads) {
            Kc[(size_t)pos * kvd + c] = kv_elem<F16>(knew[c]);
            Vc[(size_t)pos * kvd + c] = kv_elem<F16>(vnew[c]);
        }
    }
    attn_stage_q<F16>(qh, ql, QS, 16, d,
                      [&](int g) -> const float * { return g < G ? xg + g * d : nullptr; });
    kv.store_k(kh, kl, QS, d);
    kv.store_v(vh, vl, d);
    __syncthreads(); // the planes are staged; xg (the rotated q) is free for o_b
    {
        const SmemSrc src{{qh, ql, QS}, kh, kl, vh, vl};
        BlockOut bo{mb, lb, xg, G, d, w == 0};
        const int p2[2] = {pos, pos}; // padded rows (heads past G) are computed and never stored
        attn_block<DMAX, SmemSrc, BlockOut, true, F16>(src, p2, t0, d, scale, bo, w, kWarps, sx);
    }
    __syncthreads();
    // Records per head: [head][key block, then span totals][m, l, o[d]]; record(g, b, c, ...) stores output c
    // of head g's record b (m and l once, with c = 0).
    const int stride = nbrow + SPAN;
    scratch += (size_t)r * Hq * stride * (d + 2); // row r's records
    counters += (size_t)r * Hkv * (1 + kMaxSpans);
    auto record = [&](int g, int b, int c, float m, float l, float o) {
        float *p = scratch + ((size_t)(j * G + g) * stride + b) * (d + 2);
        p[2 + c] = o;
        if (c == 0) {
            p[0] = m;
            p[1] = l;
        }
    };
    for (int i = t; i < Gd; i += kThreads) record(i / d, kb, i % d, mb[i / d], lb[i / d], xg[i]);
    // Arrival, in two levels: the last block of a span to finish folds the span's key-block records (in
    // ascending order) into the span's total; the last span of the kv head folds the span totals (ascending)
    // into the outputs — attn_fold_blocks's folds in its order, spread over the blocks that arrive last.
    // Every thread's records are visible device-wide before thread 0 counts the block.
    // arrive(c, n): whether this block is the last of n to count on c (then c is back at zero for the next
    // launch, which starts after this grid completes: pdl.cuh). Block-uniform.
    auto arrive = [&](int *c, int n) {
        __threadfence();
        __syncthreads();
        if (t == 0) arrived_last = atomicAdd(c, 1) == n - 1;
        __syncthreads();
        if (!arrived_last) return false;
        __threadfence();
        if (t == 0) *c = 0;
        return true;
    };
    const int span = kb / SPAN, ns = pos / (SPAN * KB) + 1, nb = min(SPAN, pos / KB + 1 - span * SPAN);
    if (!arrive(counters + Hkv + j * kMaxSpans + span, nb)) return;
    const float *base = scratch + (size_t)j * G * stride * (d + 2);
    for (int level = 0; level < 2; level++) {
        // level 1: the span totals are in scratch; the kv head's last span folds them
        if (level == 1 && !arrive(counters + j, ns)) return;
        // kMergeNC outputs per thread at a time (channels i0 + u·kThreads), their folds interleaved.
        for (int i0 = t; i0 < Gd; i0 += kMergeNC * kThreads) {
            const float *bu[kMergeNC];
            int cu[kMergeNC];
#pragma unroll
            for (int u = 0; u < kMergeNC; u++) {
                const int i = min(i0 + u * kThreads, Gd - 1); // past Gd: a repeat, not stored
                bu[u] = base + (size_t)(i / d) * stride * (d + 2);
                cu[u] = i % d;
            }
            Fold f[kMergeNC];
            if (level == 0)
                attn_fold_span<kMergeNC>(bu, span * SPAN, nb, cu, d, f);
            else
                attn_fold_span<kMergeNC>(bu, nbrow, ns, cu, d, f);
#pragma unroll
            for (int u = 0; u < kMergeNC; u++) {
                const int i = i0 + u * kThreads;
                if (i >= Gd) break;
                if (level == 0 && ns > 1) { // the span's total, for level 1
                    record(i / d, nbrow + span, cu[u], f[u].m, f[u].l, f[u].o);
                    continue;
                }
                const float o = f[u].o / f[u].l;
                out[(size_t)r * Hq * d + (size_t)j * Gd + i] = o;
                xg[i] = o;
            }
        }
        if (ns == 1) break; // one span: its total is the row's
    }
    if (!xf) return;
    __syncthreads();
    prep_words(xg, xf, xs, xf16, r, j, Hkv, Gd);
}

// The G·d channels of records 0 .. n − 1 (base(b): record b, [m [G4], l [G4], o [G][d]]) folded in ascending
// order (attn_fold_recs), kMergeNC channels per thread at a time; put(i, fold) takes channel i's.
template <class Base, class Put>
__device__ __forceinline__ void fold_channels(Base base, int n, int G4, int d, int Gd, Put put) {
    for (int i0 = threadIdx.x; i0 < Gd; i0 += kMergeNC * kThreads) {
        int iu[kMergeNC];
#pragma unroll
        for (int u = 0; u < kMergeNC; u++) iu[u] = min(i0 + u * kThreads, Gd - 1); // past Gd: not stored
        Fold f[kMergeNC];
        attn_fold_recs<kMergeNC>(
            [&](int u, int b, float &m, float &l, float &o) {
                const float *p = base(b);
                m = p[iu[u] / d];
                l = p[G4 + iu[u] / d];
                o = p[2 * G4 + iu[u]];
            },
            n, f);
#pragma unroll
        for (int u = 0; u < kMergeNC; u++)
            if (i0 + u * kThreads < Gd) put(i0 + u * kThreads, f[u]);
    }
}

// The span form (f16 only, thread block clusters: sm_90). One block per (span s, kv head j, row r), the
// spans of (j, r) one cluster (cluster dims = the launch's spans, along x): block s stages the cached K and V
// rows of its span's key blocks into shared memory as the cache holds them (cp.async before the PDL wait;
// keys past pos as zeros), warp w computes key block 8s + w alone — attn_block's redundant form, the same
// bits as the shared-scores form the block form takes (attn_mma.cuh) — into its record in shared memory,
// the block folds its records in ascending order into the span total (attn_fold_recs), and block 0 folds
// the cluster's span totals, read through distributed shared memory, in ascending order: the split mode's
// folds in its order, with two cluster barriers instead of two arrival levels through global memory. The
// new key: block pos / 256 rotates it, stores it and the value into the cache and into its staged rows (the
// f16 words attn_split<true> gives, what the cache holds). Records: [SPAN][m [G4], l [G4], o [G][d]] and the
// span total in the same layout. Shared memory (words): Q [16][QS], K and V rows [SPAN·KB][QS] each, xg
// [G][d], knew, vnew [d], the records, the total.
int span_smem_bytes(int G, int d) {
    const int QS = d / 2 + 4, rec = 2 * ((G + 3) & ~3) + G * d;
    return 4 * (16 * QS + 2 * SPAN * KB * QS + G * d + 2 * d + (SPAN + 1) * rec);
}

template <int DMAX>
__global__ void __launch_bounds__(kThreads, 1)
    attn_decode_span_kernel(const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, float *out, uint32_t *xf, float *xs, bool xf16,
                            const weft_cu_row *__restrict__ rows, int Hq, int Hkv, int d, int layer,
                            float scale, weft_cu_rope rope, const float *__restrict__ q_norm,
                            const float *__restrict__ k_norm, float eps, int nspans) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) uint32_t smw[];
    const int s = blockIdx.x, j = blockIdx.y, r = blockIdx.z, t = threadIdx.x, w = t >> 5;
    const int G = Hq / Hkv, G4 = (G + 3) & ~3, Gd = G * d, kvd = Hkv * d, QS = d / 2 + 4, rec = 2 * G4 + Gd;
    uint32_t *qh = smw, *kr = qh + 16 * QS, *vr = kr + SPAN * KB * QS;
    float *xg = reinterpret_cast<float *>(vr + SPAN * KB * QS), *knew = xg + Gd, *vnew = knew + d,
          *recs = vnew + d, *tot = recs + SPAN * rec;
    float fpre[kRopePre];
    rope_pre(rope, fpre);
    // Before the PDL wait, as the block form: the row table and the cached rows before pos.
    const weft_cu_row row = rows[r];
    const int pos = row.pos, t0 = s * SPAN * KB, ns = pos / (SPAN * KB) + 1; // ns: the row's spans
    // A grid that does not cover the row (max_pos below its position: a caller's error) computes nothing:
    // every block of the cluster (one row) leaves here, before any cluster barrier, after the PDL wait (as
    // the block form's).
    if (pos < 0 || ns > nspans) {
        weft_pdl_enter();
        return;
    }
    const bool act = s < ns, newkey = act && pos < t0 + SPAN * KB;
    const int nb = act ? min(SPAN, pos / KB + 1 - s * SPAN) : 0; // this span's key blocks
    KvElem<true> *Kc = kv_rows<true>(row, layer, 0, kvd) + (size_t)j * d,
                 *Vc = kv_rows<true>(row, layer, 1, kvd) + (size_t)j * d;
    {
        // keys t0 .. t0 + nb·KB − 1: those before pos copied, pos left for its rows below, the rest zeros
        const int d8 = d / 8, n8 = nb * KB * d8;
        for (int i = t; i < n8; i += kThreads) {
            const int key = i / d8, c = i % d8, a = t0 + key;
            if (a == pos) continue;
            const bool ok = a < pos;
            const size_t src = (size_t)(ok ? a : 0) * kvd + 8 * c;
            cp_async<16>(kr + key * QS + 4 * c, Kc + src, ok);
            cp_async<16>(vr + key * QS + 4 * c, Vc + src, ok);
        }
        cp_commit();
    }
    weft_pdl_enter();
    auto put_out = [&](int i, const Fold &f) { // the row's output i from its total fold
        const float o = f.o / f.l;
        out[(size_t)r * Hq * d + (size_t)j * Gd + i] = o;
        xg[i] = o;
    };
    if (act) {
        rotate_heads(q, k, v, r, j, Hq, Hkv, d, pos, newkey, rope, fpre, q_norm, k_norm, eps, xg, knew, vnew);
        if (newkey) {
            const int key = pos - t0;
            for (int c = t; c < d / 2; c += kThreads) {
                uint32_t lo;
                attn_split<true>(knew[2 * c], knew[2 * c + 1], kr[key * QS + c], lo);
                attn_split<true>(vnew[2 * c], vnew[2 * c + 1], vr[key * QS + c], lo);
            }
            for (int c = t; c < d; c += kThreads) {
                Kc[(size_t)pos * kvd + c] = kv_elem<true>(knew[c]);
                Vc[(size_t)pos * kvd + c] = kv_elem<true>(vnew[c]);
            }
        }
        attn_stage_q<true>(qh, qh, QS, 16, d,
                           [&](int g) -> const float * { return g < G ? xg + g * d : nullptr; });
        cp_wait<0>();
        __syncthreads(); // Q, K and V rows staged
        if (w < nb) {
            const SmemSrcVRows src{{{qh, qh, QS}, kr + w * KB * QS, nullptr, vr + w * KB * QS, nullptr}};
            float *rw = recs + w * rec;
            BlockOut bo{rw, rw + G4, rw + 2 * G4, G, d, true};
            const int p2[2] = {pos, pos}; // padded rows (heads past G) are computed and never stored
            attn_block<DMAX, SmemSrcVRows, BlockOut, false, true>(src, p2, t0 + w * KB, d, scale, bo);
        }
        __syncthreads(); // the records are in
        // The span's records folded in ascending order: the row's outputs (one span) or the span total.
        fold_channels([&](int b) -> const float * { return recs + b * rec; }, nb, G4, d, Gd,
                      [&](int i, const Fold &f) {
                          if (ns == 1) return put_out(i, f);
                          if (i % d == 0) {
                              tot[i / d] = f.m;
                              tot[G4 + i / d] = f.l;
                          }
                          tot[2 * G4 + i] = f.o;
                      });
    }
    if (ns > 1) { // (uniform over the cluster)
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); // every span total is in its block's shared memory
        if (s == 0)
            fold_channels([&](int b) -> const float * { return cl.map_shared_rank(tot, b); }, ns, G4, d, Gd,
                          put_out);
        cl.sync(); // block 0 has read the others' totals: they may leave
    }
    if (s != 0 || !xf) return;
    __syncthreads();
    prep_words(xg, xf, xs, xf16, r, j, Hkv, Gd);
#else
    __trap(); // unreachable: the host launches the span form only where clusters exist
#endif
}

// The kernel instance for head dims up to DMAX.
template <int DMAX, bool F16> constexpr auto kernel_for = attn_decode_kernel<DMAX, F16>;
template <bool F16> auto kernel_d(int d) {
    return d <= 32    ? kernel_for<32, F16>
           : d <= 64  ? kernel_for<64, F16>
           : d <= 128 ? kernel_for<128, F16>
                      : kernel_for<256, F16>;
}

// Whether a cluster of kMaxSpans blocks of the span kernel for head dim d with smem bytes each can be
// resident at all (a MIG or MPS partition may hold too few SMs per GPC, and a refused cluster launch would
// fail the forward): the occupancy query, after opting into the shared memory. False on any error (cleared:
// the query's error is not a failed launch).
bool span_cluster_fits(int d, int smem) {
    const auto kernel = d <= 32   ? attn_decode_span_kernel<32>
                        : d <= 64 ? attn_decode_span_kernel<64>
                                  : attn_decode_span_kernel<128>;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kMaxSpans;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kMaxSpans, 1, 1);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    cudaError_t e = weft_smem_opt_in(kernel, (size_t)smem);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && clusters > 0;
}

// Whether the span form runs for this shape: f16, clusters, d <= 128, its shared memory on the device, and a
// cluster of the most spans resident.
bool span_form_ok(int Hq, int Hkv, int d, int f16) {
    const int smem = span_smem_bytes(Hq / Hkv, d);
    return f16 && weft_cluster_on() && d <= 128 &&
           smem <= weft_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) && span_cluster_fits(d, smem);
}

} // namespace

extern "C" int weft_cu_attention_decode_rows(int Hq, int Hkv, int d, int f16) {
    if (!weft_cu_attention_ok(Hq, Hkv, d)) return 0;
#if defined(WEFT_CU_ATTN_DECODE_FORM) && WEFT_CU_ATTN_DECODE_FORM == 1
    (void)f16;
    return 1; // (the variant build that forces the block form: one row, as before the span form)
#else
    return span_form_ok(Hq, Hkv, d, f16) ? WEFT_CU_ATTN_DECODE_MAX_ROWS : 1;
#endif
}

extern "C" int weft_cu_attention_decode_counters(int n_rows, int Hkv) {
    return n_rows * Hkv * (1 + kMaxSpans);
}

extern "C" size_t weft_cu_attention_decode_scratch_floats(int n_rows, int Hq, int d) {
    return (size_t)n_rows * (size_t)Hq * (size_t)(kMaxBlocks + SPAN) * (size_t)(d + 2);
}

extern "C" cudaError_t
weft_cu_attention_decode_shaped(const float *q, const float *k, const float *v, float *out,
                                const weft_cu_xq *xq, const weft_cu_row *rows, int n, int max_pos, int Hq,
                                int Hkv, int d, int layer, float scale, const weft_cu_rope *rope,
                                const float *q_norm, const float *k_norm, float eps, float *scratch,
                                int max_context, int *counters, int f16, int form, cudaStream_t stream) {
    if (!weft_cu_attention_ok(Hq, Hkv, d) || n < 1 || n > 65535 || max_pos < 0 || max_pos >= max_context ||
        !counters || rope->rot < 0 || rope->rot % 2 || rope->rot > d || (rope->rot > 0 && !rope->inv_freq) ||
        !q_norm != !k_norm || form < 0 || form > 2)
        return cudaErrorInvalidValue;
    const int G = Hq / Hkv, spans = max_pos / (SPAN * KB) + 1,
              nkb = spans * SPAN;                       // key blocks of the spans, as the split mode
    if (nkb > kMaxBlocks) return cudaErrorNotSupported; // long contexts: weft_cu_attention
    if (xq && (xq->K != (int64_t)Hq * d || (G * d) % 32)) return cudaErrorNotSupported;
    uint32_t *xf = xq ? xq->f : nullptr;
    float *xs = xq ? xq->s : nullptr;
    // The span form where it runs, else the block form; each form's shared memory opted into
    // (weft_smem_opt_in: a shape past the device's maximum is refused, and the caller takes the separate
    // kernels, which need less).
    const int span_smem = span_smem_bytes(G, d);
    if (form != 1 && span_form_ok(Hq, Hkv, d, f16)) {
        const auto kernel = d <= 32   ? attn_decode_span_kernel<32>
                            : d <= 64 ? attn_decode_span_kernel<64>
                                      : attn_decode_span_kernel<128>;
        const cudaError_t e = weft_smem_opt_in(kernel, (size_t)span_smem);
        if (e != cudaSuccess) return e;
        return weft_pdl_launch_cluster(kernel, dim3((unsigned)spans, (unsigned)Hkv, (unsigned)n),
                                       dim3(kThreads), (size_t)span_smem, stream, spans > 1 ? spans : 0, q, k,
                                       v, out, xf, xs, xq && xq->f16, rows, Hq, Hkv, d, layer, scale, *rope,
                                       q_norm, k_norm, eps, spans);
    }
    if (form == 2) return cudaErrorNotSupported;
    const auto kernel = f16 ? kernel_d<true>(d) : kernel_d<false>(d);
    const int smem = smem_bytes(G, d);
    const cudaError_t e = weft_smem_opt_in(kernel, (size_t)smem);
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(kernel, dim3((unsigned)Hkv, (unsigned)nkb, (unsigned)n), dim3(kThreads),
                           (size_t)smem, stream, q, k, v, out, xf, xs, xq && xq->f16, rows, Hq, Hkv, d, layer,
                           scale, *rope, q_norm, k_norm, eps, scratch, nkb, counters);
}

extern "C" cudaError_t weft_cu_attention_decode(const float *q, const float *k, const float *v, float *out,
                                                const weft_cu_xq *xq, const weft_cu_row *rows, int n,
                                                int max_pos, int Hq, int Hkv, int d, int layer, float scale,
                                                const weft_cu_rope *rope, const float *q_norm,
                                                const float *k_norm, float eps, float *scratch,
                                                int max_context, int *counters, int f16,
                                                cudaStream_t stream) {
#ifdef WEFT_CU_ATTN_DECODE_FORM // (variant builds for A/B runs: 1 = the block form)
    const int form = WEFT_CU_ATTN_DECODE_FORM;
#else
    const int form = 0;
#endif
    return weft_cu_attention_decode_shaped(q, k, v, out, xq, rows, n, max_pos, Hq, Hkv, d, layer, scale, rope,
                                           q_norm, k_norm, eps, scratch, max_context, counters, f16, form,
                                           stream);
}
