// The RMSNorm's thread count and row, shared by the norm kernel (ops.cu) and the kernels that reproduce its
// reduction (attention_decode.cu's per-head norms, gemv_q4.cu's one-row stream), so they sum a row in the
// same order.
#ifndef WEFT_RMSNORM_CUH
#define WEFT_RMSNORM_CUH

#include "q4_mma.cuh"

// Threads of the reduction for a row of n elements: a function of n alone, so a row's sum order never depends
// on anything else.
__host__ __device__ inline int weft_norm_threads(int n) {
    return n >= 1024 ? 256 : n >= 128 ? 128 : 32;
}

// One row's RMSNorm in rmsnorm_kernel's order (ops.cu: weft_cu_rmsnorm, weft_cu_rmsnorm_xq), by the block's
// first T threads (T = weft_norm_threads(n); each of them calls it, and the block barriers take all of the
// block's threads, so the block has exactly T): thread t sums fmaf(x_i, x_i, ·) over i = t, t + T, ... in
// order, each warp's sums meet in its xor tree, thread 0 adds the T/32 warp sums in order, inv = 1 /
// sqrtf(tot / n + eps), and y_i = w_i·(x_i·inv) (x_i·inv without w). With Fr: only the chunks [c0, c1) of 8
// elements (a multiple of 4 each), y and the prepared words (Fr, sums Sr: q4_prep_chunk, weft_cu_xq's layout;
// f16: an f16 buffer's), with the chunks' norm weights preloaded in wv when wpre (chunks c0 + t and c0 + t +
// T); without Fr, y whole. ld(i) loads x_i (plain, or through L2 where other blocks of the grid wrote x).
// part: shared memory of T / 32 + 1 floats. Source of the formula: families-and-formats.md (RMSNorm),
// src/families/llama.c.
template <int T, class LD>
__device__ __forceinline__ void weft_rmsnorm_row(LD &&ld, float *y, const float *__restrict__ w, int n,
                                                 float eps, uint32_t *Fr, float *Sr, bool f16, int c0, int c1,
                                                 bool wpre, const float4 (&wv)[4], float *part) {
    const int t = threadIdx.x;
    float ss = 0.0f;
    for (int i = t; i < n; i += T) {
        const float xi = ld(i);
        ss = fmaf(xi, xi, ss);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
    if ((t & 31) == 0) part[t >> 5] = ss;
    __syncthreads();
    if (t == 0) {
        float tot = part[0];
        for (int i = 1; i < T / 32; i++) tot = __fadd_rn(tot, part[i]);
        part[T / 32] = 1.0f / sqrtf(tot / (float)n + eps);
    }
    __syncthreads();
    const float inv = part[T / 32];
    if (Fr) { // the prepared copy for the 4-bit matmul (weft_cu_xq): chunks of 8 elements, warp-uniform loop;
              // each chunk's y values are stored here too (the same expression as the loop below)
        const int lane = t & 31;
        for (int base = c0 + t - lane, j = 0; base < c1; base += T, j++) {
            const int c = base + lane;
            const bool ok = c < c1;
            float v[8], wk[8];
            if (wpre) {
                const float4 a = j == 0 ? wv[0] : wv[2], b = j == 0 ? wv[1] : wv[3];
                wk[0] = a.x, wk[1] = a.y, wk[2] = a.z, wk[3] = a.w, wk[4] = b.x, wk[5] = b.y, wk[6] = b.z,
                wk[7] = b.w;
            }
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int k = 8 * (ok ? c : 0) + e; // the same expression as y[i] below
                const float wke = wpre ? wk[e] : w ? w[k] : 1.0f;
                v[e] = w ? wke * (ld(k) * inv) : ld(k) * inv;
                if (ok) y[k] = v[e];
            }
            const float s = q4_prep_chunk(v, Fr + (ok ? c >> 2 : 0) * 32, c & 3, ok, f16);
            if (ok && (c & 3) == 0) Sr[c >> 2] = s;
        }
        return;
    }
    for (int i = t; i < n; i += T) y[i] = w ? w[i] * (ld(i) * inv) : ld(i) * inv;
}

#endif
