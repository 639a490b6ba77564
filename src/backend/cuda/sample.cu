// Greedy draws on the device (SPEC §5.1 step 3): the argmax of a row, NaN as −inf, ties to the lowest id.
// The result is the maximum of the keys (z, −id), a total order over distinct ids, so it does not depend on
// the order in which threads visit or combine elements: exactly what weft_sample's id-order scan returns
// (its strict > keeps the first of equal values, −0 and +0 compare equal in both, and a row of −inf gives
// id 0, the smallest key holder).
#include "cuda_kernels.h"
#include "pdl.cuh"

#include <limits.h>
#include <stdint.h>
#include <math.h>

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll =
    4; // float4 loads a thread has in flight at once (the scan is latency-bound otherwise)

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void take(float v, int i, float &bv, int &bi) {
    if (isnan(v)) v = -INFINITY;
    if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
    }
}

// One block per row. With vec (V % 4 == 0 and logits 16-byte aligned, so every row is), each thread keeps
// kUnroll float4 loads in flight per step; the keys' total order makes the visiting order irrelevant
// (header).
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float *__restrict__ logits, int64_t V, const int *__restrict__ sel, int32_t *ids,
                  bool vec) {
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    weft_pdl_enter(); // the logits come from an earlier kernel (the lm head)
    const float *z = logits + (int64_t)sel[blockIdx.x] * V;
    float bv = -INFINITY;
    int bi = INT_MAX;
    if (vec) {
        const float4 *z4 = reinterpret_cast<const float4 *>(z);
        const int64_t V4 = V / 4;
        for (int64_t i0 = threadIdx.x; i0 < V4; i0 += (int64_t)kThreads * kUnroll) {
            float4 q[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                const int64_t i = i0 + (int64_t)u * kThreads;
                q[u] = i < V4 ? __ldg(z4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            }
#pragma unroll
            for (int u = 0; u < kUnroll; u++) {
                const int i = (int)(4 * (i0 + (int64_t)u * kThreads));
                take(q[u].x, i, bv, bi);
                take(q[u].y, i + 1, bv, bi);
                take(q[u].z, i + 2, bv, bi);
                take(q[u].w, i + 3, bv, bi);
            }
        }
    } else {
        for (int64_t i = threadIdx.x; i < V; i += kThreads) take(z[i], (int)i, bv, bi);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; w++)
            if (better(sv[w], si[w], bv, bi)) {
                bv = sv[w];
                bi = si[w];
            }
        ids[blockIdx.x] = bi == INT_MAX ? 0 : bi;
    }
}

} // namespace

extern "C" cudaError_t weft_cu_argmax(const float *logits, int64_t V, const int *sel, int n, int32_t *ids,
                                      cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    return weft_pdl_launch(argmax_kernel, dim3((unsigned)n), dim3(kThreads), 0, stream, logits, V, sel, ids,
                           V % 4 == 0 && ((uintptr_t)logits & 15) == 0);
}
