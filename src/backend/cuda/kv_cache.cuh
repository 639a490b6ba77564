// The KV cache's elements (weft_cu_row): fp32, or with F16 (--activations f16) the f16 word of each value as
// the f16 attention rounds its operands (q4_f16_clamp, then nearest even: attn_split<true>). The attention
// only ever uses those words, so an f16 cache gives the bits an fp32 cache gives, in half the bytes (half the
// loads of every attention kernel, twice the streams per byte of device memory). Writers: rope_store
// (ops.cu) and the fused decode kernel (attention_decode.cu); readers: attention.cu, attention_decode.cu,
// attention_flash.cu (through AttnKV and CacheSrc, attn_mma.cuh / attention.cu).
#ifndef WEFT_KV_CACHE_CUH
#define WEFT_KV_CACHE_CUH

#include "cuda_kernels.h"
#include "q4_mma.cuh"

#include <stdint.h>

#include <type_traits>

template <bool F16> using KvElem = typename std::conditional<F16, uint16_t, float>::type;

// The cache element of x.
template <bool F16> __device__ __forceinline__ KvElem<F16> kv_elem(float x) {
    if constexpr (F16)
        return __half_as_ushort(__float2half_rn(q4_f16_clamp(x)));
    else
        return x;
}

// Layer `layer`'s K rows (w = 0) or V rows (w = 1) of a row's cache: position 0, column 0.
template <bool F16>
__device__ __forceinline__ KvElem<F16> *kv_rows(const weft_cu_row &row, int layer, int w, int kvd) {
    return static_cast<KvElem<F16> *>(row.kv) + (size_t)(2 * layer + w) * (size_t)row.cap * (size_t)kvd;
}

#endif
