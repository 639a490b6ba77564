// Weight decoders for the device layouts of cuda_kernels.h: D::unit(w, row, u, out) decodes unit u (U
// consecutive elements, one 16-byte load) of a weight row into fp32, with the CPU decoders' exact arithmetic.
#ifndef WEFT_CUDA_DECODE_CUH
#define WEFT_CUDA_DECODE_CUH

#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// The weight as kernels take it (by value).
struct WDev {
    const void *q, *s, *b;
    int64_t cols;
    int gshift; // log2(group)
};

static inline WDev wdev(const weft_cu_weight *w) {
    WDev d{w->q, w->s, w->b, w->cols, 0};
    while (w->group > 0 && (1 << d.gshift) < w->group) d.gshift++;
    return d;
}

__device__ __forceinline__ uint4 ld16(const void *p) { return __ldg(reinterpret_cast<const uint4 *>(p)); }

__device__ __forceinline__ float bf16_bits(uint32_t h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ float f16_bits(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

template <int SDT> __device__ __forceinline__ float ld_scale(const void *p, int64_t i) {
    if (SDT == WEFT_CU_S_F32) return __ldg(reinterpret_cast<const float *>(p) + i);
    const uint32_t h = __ldg(reinterpret_cast<const unsigned short *>(p) + i);
    return SDT == WEFT_CU_S_F16 ? f16_bits(h) : bf16_bits(h);
}

struct DecF32 {
    static constexpr int U = 4;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(w.q) + o * (w.cols / 4) + u);
        out[0] = v.x;
        out[1] = v.y;
        out[2] = v.z;
        out[3] = v.w;
    }
};

struct DecF16 {
    static constexpr int U = 8;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const uint4 v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 8) + u);
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            out[2 * j] = f16_bits(x[j] & 0xffffu);
            out[2 * j + 1] = f16_bits(x[j] >> 16);
        }
    }
};

struct DecBF16 {
    static constexpr int U = 8;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const uint4 v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 8) + u);
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            out[2 * j] = bf16_bits(x[j] & 0xffffu);
            out[2 * j + 1] = __uint_as_float(x[j] & 0xffff0000u);
        }
    }
};

// 4-bit: 32 elements = 4 words; element e at bits 4(e%8) of word e/8. One group holds whole units (group >= 32).
template <int MODE, int SDT> struct DecQ4 {
    static constexpr int U = 32;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const uint4 v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 32) + u);
        const int64_t ng = w.cols >> w.gshift, g = o * ng + ((u * 32) >> w.gshift);
        const float s = ld_scale<SDT>(w.s, g);
        const float b = MODE == WEFT_CU_AFFINE ? ld_scale<SDT>(w.b, g) : 0.0f;
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const int q = (int)((x[j] >> (4 * n)) & 15u);
                out[8 * j + n] = MODE == WEFT_CU_AFFINE ? __fadd_rn(__fmul_rn(s, (float)q), b)
                                                        : __fmul_rn((float)(q - 8), s);
            }
    }
};

// 8-bit: 16 bytes = 16 elements in order; int8 for SYM, uint8 for AFFINE. group >= 16.
template <int MODE, int SDT> struct DecQ8 {
    static constexpr int U = 16;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const uint4 v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 16) + u);
        const int64_t ng = w.cols >> w.gshift, g = o * ng + ((u * 16) >> w.gshift);
        const float s = ld_scale<SDT>(w.s, g);
        const float b = MODE == WEFT_CU_AFFINE ? ld_scale<SDT>(w.b, g) : 0.0f;
        const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int n = 0; n < 4; n++) {
                const uint32_t byte = (x[j] >> (8 * n)) & 255u;
                if (MODE == WEFT_CU_AFFINE)
                    out[4 * j + n] = __fadd_rn(__fmul_rn(s, (float)byte), b);
                else
                    out[4 * j + n] = __fmul_rn((float)(int)(int8_t)byte, s);
            }
    }
};

#endif
