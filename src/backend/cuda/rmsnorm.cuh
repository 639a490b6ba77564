// The RMSNorm's thread count, shared by the norm kernel (ops.cu) and the kernels that reproduce its
// reduction (attention_decode.cu's per-head norms), so they sum a row in the same order.
#ifndef WEFT_RMSNORM_CUH
#define WEFT_RMSNORM_CUH

// Threads of the reduction for a row of n elements: a function of n alone, so a row's sum order never depends
// on anything else.
__host__ __device__ inline int weft_norm_threads(int n) {
    return n >= 1024 ? 256 : n >= 128 ? 128 : 32;
}

#endif
