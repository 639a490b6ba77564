// Causal GQA attention over fixed key blocks aligned to absolute positions (cuda_kernels.h).
//
// Kernel 1, one block per (row, kv head, span of WEFT_CU_ATTN_SPAN·KB keys): warp w takes key block w of the
// span (lane t = key t of the block) for the G = Hq/Hkv query heads of the kv head:
//   s_t = (q·k_t)·scale (fmaf over the head dims in order), m_b = max_t s_t, p_t = exp(s_t − m_b),
//   l_b = Σ p_t (xor-shuffle tree), o_b = Σ_t p_t·v_t (fmaf over the block's KB slots in order, p = 0 past
//   pos);
// then the span's blocks are folded in ascending order (online-softmax rescale, fold() below) into the span's
// (m, l, o). A row whose keys fit one span writes o / l; otherwise the span partials go to scratch and
// kernel 2 folds them in ascending order, then writes o / l. Folding one span into an empty total returns it
// unchanged, so both paths define the same function. Nothing depends on the other rows or on the grid size.
#include "cuda_kernels.h"
#include "attn_common.cuh"

#include <math.h>

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN, kThreads = 32 * SPAN;
constexpr int kGMax = 8; // query heads of a kv head handled together (registers); more are taken 8 at a time

// Shared memory: q [G·d], block partials ob [SPAN][G·d], mb/lb [SPAN][G].
__global__ void __launch_bounds__(kThreads)
    attn_span_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows, int Hq,
                     int Hkv, int d, int layer, float scale, float *scratch, int max_spans) {
    extern __shared__ float sm[];
    const int r = blockIdx.x, j = blockIdx.y, span = blockIdx.z, t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int G = Hq / Hkv, Gd = G * d, kvd = Hkv * d;
    const weft_cu_row row = rows[r];
    const int nkeys = row.pos + 1, k0 = span * SPAN * KB;
    if (k0 >= nkeys) return;
    float *sq = sm, *ob = sq + Gd, *mb = ob + SPAN * Gd, *lb = mb + SPAN * G;
    const int qoff = r * Hq * d + j * Gd;
    for (int i = t; i < Gd; i += kThreads) sq[i] = Q[qoff + i];
    __syncthreads();
    const float *Kc = row.kv + (size_t)(2 * layer) * (size_t)row.cap * (size_t)kvd + (size_t)j * d;
    const float *Vc = Kc + (size_t)row.cap * (size_t)kvd;
    const int t0 = k0 + w * KB, nv = min(KB, nkeys - t0); // this warp's block: keys t0 .. t0+nv-1
    if (nv > 0) {
        const bool valid = lane < nv;
        const float *krow = Kc + (size_t)(t0 + (valid ? lane : 0)) * kvd;
        for (int g0 = 0; g0 < G; g0 += kGMax) {
            const int gn = min(kGMax, G - g0);
            float acc[kGMax], pv[kGMax];
#pragma unroll
            for (int gg = 0; gg < kGMax; gg++) acc[gg] = 0.0f;
#pragma unroll 4
            for (int c = 0; c < d; c += 4) {
                const float4 k4 = *reinterpret_cast<const float4 *>(krow + c);
#pragma unroll
                for (int gg = 0; gg < kGMax; gg++) {
                    if (gg >= gn) break;
                    const float *qg = sq + (g0 + gg) * d + c;
                    acc[gg] = fmaf(qg[0], k4.x, acc[gg]);
                    acc[gg] = fmaf(qg[1], k4.y, acc[gg]);
                    acc[gg] = fmaf(qg[2], k4.z, acc[gg]);
                    acc[gg] = fmaf(qg[3], k4.w, acc[gg]);
                }
            }
#pragma unroll
            for (int gg = 0; gg < kGMax; gg++) {
                if (gg >= gn) break;
                const float sc = valid ? acc[gg] * scale : -INFINITY;
                const float m = warp_max(sc);
                pv[gg] = valid ? expf(sc - m) : 0.0f;
                const float l = warp_sum(pv[gg]);
                if (lane == 0) {
                    mb[w * G + g0 + gg] = m;
                    lb[w * G + g0 + gg] = l;
                }
            }
            // o_b over all KB key slots in order (slots past nv have p = 0 and read a clamped, written row),
            // so the loop has a fixed trip count and its loads can all be in flight at once; every lane runs
            // every step (the shuffles need the whole warp), lanes past d read a clamped column and store
            // nothing.
            for (int c0 = 0; c0 < d; c0 += 32) {
                const int c = c0 + lane, cc = c < d ? c : d - 1;
                float o[kGMax];
#pragma unroll
                for (int gg = 0; gg < kGMax; gg++) o[gg] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KB; kk++) {
                    const float v = Vc[(size_t)(t0 + min(kk, nv - 1)) * kvd + cc];
#pragma unroll
                    for (int gg = 0; gg < kGMax; gg++) {
                        if (gg >= gn) break;
                        o[gg] = fmaf(__shfl_sync(0xffffffffu, pv[gg], kk), v, o[gg]);
                    }
                }
                if (c < d) {
#pragma unroll
                    for (int gg = 0; gg < kGMax; gg++) {
                        if (gg >= gn) break;
                        ob[w * Gd + (g0 + gg) * d + c] = o[gg];
                    }
                }
            }
        }
    }
    __syncthreads();
    const int nb = min(SPAN, (nkeys - k0 + KB - 1) / KB);
    const bool single = nkeys <= SPAN * KB;
    for (int i = t; i < Gd; i += kThreads) {
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
// order.
__global__ void attn_combine_kernel(float *Out, const weft_cu_row *__restrict__ rows, int Hq, int d,
                                    const float *__restrict__ scratch, int max_spans) {
    const int r = blockIdx.x, h = blockIdx.y;
    const int nkeys = rows[r].pos + 1;
    if (nkeys <= SPAN * KB) return;
    const int ns = (nkeys + SPAN * KB - 1) / (SPAN * KB);
    const float *base = scratch + ((size_t)r * Hq + h) * max_spans * (d + 2);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        Fold f{-INFINITY, 0.0f, 0.0f};
        for (int s = 0; s < ns; s++) {
            const float *p = base + (size_t)s * (d + 2);
            f.add(p[0], p[1], p[2 + c]);
        }
        Out[((size_t)r * Hq + h) * d + c] = f.o / f.l;
    }
}

} // namespace

extern "C" size_t weft_cu_attention_scratch_floats(int n_rows, int Hq, int d, int max_context) {
    const int spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    return (size_t)n_rows * (size_t)Hq * (size_t)spans * (size_t)(d + 2);
}

extern "C" cudaError_t weft_cu_attention(const float *q, float *out, const weft_cu_row *rows, int n,
                                         int max_pos, int Hq, int Hkv, int d, int layer, float scale,
                                         float *scratch, int max_context, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (Hkv <= 0 || Hq % Hkv || d <= 0 || d > 256 || d % 4 || (Hq / Hkv) * d > 1024 || max_pos >= max_context)
        return cudaErrorInvalidValue;
    const int G = Hq / Hkv, spans = max_pos / (SPAN * KB) + 1,
              max_spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    const size_t smem = sizeof(float) * ((size_t)G * d * (1 + SPAN) + (size_t)2 * SPAN * G);
    if (smem > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute(attn_span_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    attn_span_kernel<<<dim3((unsigned)n, (unsigned)Hkv, (unsigned)spans), kThreads, smem, stream>>>(
        q, out, rows, Hq, Hkv, d, layer, scale, scratch, max_spans);
    if (spans > 1) {
        const int threads = d < 128 ? 32 : 128;
        attn_combine_kernel<<<dim3((unsigned)n, (unsigned)Hq), threads, 0, stream>>>(out, rows, Hq, d,
                                                                                     scratch, max_spans);
    }
    return cudaGetLastError();
}
