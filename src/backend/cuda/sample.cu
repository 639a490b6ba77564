// Greedy draws on the device (SPEC §5.1 step 3): the argmax of a row, NaN as −inf, ties to the lowest id.
// The result is the maximum of the keys (z, −id), a total order over distinct ids, so it does not depend on
// the order in which threads visit or combine elements: exactly what weft_sample's id-order scan returns
// (its strict > keeps the first of equal values, −0 and +0 compare equal in both, and a row of −inf gives
// id 0, the smallest key holder).
#include "cuda_kernels.h"

#include <limits.h>
#include <math.h>

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float *__restrict__ logits, int64_t V, const int *__restrict__ sel, int32_t *ids) {
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    const float *z = logits + (int64_t)sel[blockIdx.x] * V;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        float v = z[i];
        if (isnan(v)) v = -INFINITY;
        if (better(v, (int)i, bv, bi)) {
            bv = v;
            bi = (int)i;
        }
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
    argmax_kernel<<<n, kThreads, 0, stream>>>(logits, V, sel, ids);
    return cudaGetLastError();
}
