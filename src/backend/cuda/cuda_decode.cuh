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
    int64_t rows, cols;
    int gshift; // log2(group)
    int sb;     // WEFT_CU_Q4F: 32-element sub-blocks per K block (weft_cu_q4f_sb)
};

static inline WDev wdev(const weft_cu_weight *w) {
    WDev d{w->q, w->s, w->b, w->rows, w->cols, 0, w->kind == WEFT_CU_Q4F ? weft_cu_q4f_sb(w->cols) : 0};
    while (w->group > 0 && (1 << d.gshift) < w->group) d.gshift++;
    return d;
}

__device__ __forceinline__ uint4 ld16(const void *p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

__device__ __forceinline__ float bf16_bits(uint32_t h) {
    return __uint_as_float(h << 16);
}

__device__ __forceinline__ float f16_bits(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// WEFT_CU_Q4F: where scale (or bias) gi of row o lies, for nblk K blocks per row of gpb = 32·SB / group
// values each — [tile][K block][16 rows][GPB] (cuda_kernels.h). The one definition: weft_cu_q4f_sidx (host)
// and q4f_sidx (device) call it.
__host__ __device__ __forceinline__ int64_t q4f_sidx_at(int64_t nblk, int64_t gpb, int64_t o, int64_t gi) {
    return ((o / 16 * nblk + gi / gpb) * 16 + o % 16) * gpb + gi % gpb;
}
__device__ __forceinline__ int64_t q4f_sidx(const WDev &w, int64_t o, int64_t gi) {
    return q4f_sidx_at(w.cols / (32 * w.sb), (int64_t)(32 * w.sb) >> w.gshift, o, gi);
}

template <int SDT> __device__ __forceinline__ float ld_scale(const void *p, int64_t i) {
    if (SDT == WEFT_CU_S_F32) return __ldg(reinterpret_cast<const float *>(p) + i);
    const uint32_t h = __ldg(reinterpret_cast<const unsigned short *>(p) + i);
    return SDT == WEFT_CU_S_F16 ? f16_bits(h) : bf16_bits(h);
}

struct F32Unit {
    static constexpr int U = 4;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(w.q) + o * (w.cols / 4) + u);
        out[0] = v.x;
        out[1] = v.y;
        out[2] = v.z;
        out[3] = v.w;
    }
};

struct F16Unit {
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

struct BF16Unit {
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

// Plain types: dot() adds the unit's products to the running sum one by one with fmaf, in element order.
template <class Base> struct Plain : Base {
    static constexpr int OR = 2;
    static constexpr bool kSumX = false;
    struct Raw {
        float w[Base::U];
    };
    __device__ __forceinline__ static Raw load(const WDev &w, int64_t o, int64_t u) {
        Raw r;
        Base::unit(w, o, u, r.w);
        return r;
    }
    __device__ __forceinline__ static float dot(const Raw &r, const float *x, float, float acc) {
#pragma unroll
        for (int j = 0; j < Base::U; j++) acc = fmaf(r.w[j], x[j], acc);
        return acc;
    }
};
using DecF32 = Plain<F32Unit>;
using DecF16 = Plain<F16Unit>;
using DecBF16 = Plain<BF16Unit>;

// Magic-number conversion of a small unsigned integer q (< 2^23) held in the low mantissa bits: the float
// with bits 0x4B000000 | q is exactly 2^23 + q, so subtracting 2^23 (+ an offset) gives q (− offset) exactly.
// One byte-permute or logic op and one fp32 add per element instead of an int-to-float conversion (quarter
// rate).
__device__ __forceinline__ float magic_byte(uint32_t word, int i) {
    return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u + (unsigned)i));
}

// 4-bit: 32 elements = 4 words; element e at bits 4(e%8) of word e/8. One group holds whole units (group >=
// 32). unit(): decoded values (the embedding; exactly the CPU decoder's arithmetic). dot(): the unit's
// contribution to a dot product, factored as the device defines it (fixed order):
//   p = Σ q'·x over the unit's elements in the order (word 0: nibbles 0,2,4,6,1,3,5,7; word 1: ...), q' = q −
//   8 (OFF8) or q (AFFINE), accumulated with fmaf from 0; contribution = s·p (OFF8), fmaf(s, p, b·Σx)
//   (AFFINE), with Σx the unit's x summed in element order (computed once per X row by the caller).
template <int MODE, int SDT> struct DecQ4 {
    static constexpr int U = 32, OR = 4;
    static constexpr bool kSumX = MODE == WEFT_CU_AFFINE;
    struct Raw {
        uint4 v;
        float s, b;
    };
    __device__ __forceinline__ static Raw load(const WDev &w, int64_t o, int64_t u) {
        Raw r;
        r.v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 32) + u);
        const int64_t ng = w.cols >> w.gshift, g = o * ng + ((u * 32) >> w.gshift);
        r.s = ld_scale<SDT>(w.s, g);
        r.b = MODE == WEFT_CU_AFFINE ? ld_scale<SDT>(w.b, g) : 0.0f;
        return r;
    }
    __device__ __forceinline__ static float dot(const Raw &r, const float *x, float sx, float acc) {
        const uint32_t words[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
        const float off = MODE == WEFT_CU_AFFINE ? 8388608.0f : 8388616.0f;
        float p = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t lo = words[j] & 0x0F0F0F0Fu, hi = (words[j] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int i = 0; i < 4; i++) p = fmaf(__fsub_rn(magic_byte(lo, i), off), x[8 * j + 2 * i], p);
#pragma unroll
            for (int i = 0; i < 4; i++) p = fmaf(__fsub_rn(magic_byte(hi, i), off), x[8 * j + 2 * i + 1], p);
        }
        const float c = MODE == WEFT_CU_AFFINE ? fmaf(r.s, p, __fmul_rn(r.b, sx)) : __fmul_rn(r.s, p);
        return __fadd_rn(acc, c);
    }
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        decode(load(w, o, u), out);
    }
    // The CPU decoder's arithmetic on one unit's 4 words.
    __device__ __forceinline__ static void decode(const Raw &r, float *out) {
        const uint32_t x[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const int q = (int)((x[j] >> (4 * n)) & 15u);
                out[8 * j + n] = MODE == WEFT_CU_AFFINE ? __fadd_rn(__fmul_rn(r.s, (float)q), r.b)
                                                        : __fmul_rn((float)(q - 8), r.s);
            }
    }
};

// WEFT_CU_Q4F (the tensor-core layout, mma_q4.cu): only unit() (the embedding) is read through here; the
// matmul has its own kernel. Unit u of row o is sub-block u: its 4 words sit SB words apart.
template <int MODE, int SDT> struct DecQ4F {
    static constexpr int U = 32, OR = 4;
    static constexpr bool kMma = true;
    using Base = DecQ4<MODE, SDT>;
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const int64_t sb = w.sb, nblk = w.cols / (32 * sb), tile = o / 16, rr = o % 16;
        const int64_t base = ((tile * nblk + u / sb) * 2 + rr / 8) * 32 * sb + 4 * (rr % 8) * sb + u % sb;
        const uint32_t *q = static_cast<const uint32_t *>(w.q) + base;
        typename Base::Raw r;
        r.v = make_uint4(__ldg(q), __ldg(q + sb), __ldg(q + 2 * sb), __ldg(q + 3 * sb));
        const int64_t g = q4f_sidx(w, o, (u * 32) >> w.gshift);
        r.s = ld_scale<SDT>(w.s, g);
        r.b = MODE == WEFT_CU_AFFINE ? ld_scale<SDT>(w.b, g) : 0.0f;
        Base::decode(r, out);
    }
};

// 8-bit: 16 bytes = 16 elements in order; int8 for SYM, uint8 for AFFINE. group >= 16. dot() as DecQ4's, over
// the elements in order, q' = q (int8 SYM: the byte xor 0x80 is q + 128, taken off with the magic offset).
template <int MODE, int SDT> struct DecQ8 {
    static constexpr int U = 16, OR = 4;
    static constexpr bool kSumX = MODE == WEFT_CU_AFFINE;
    struct Raw {
        uint4 v;
        float s, b;
    };
    __device__ __forceinline__ static Raw load(const WDev &w, int64_t o, int64_t u) {
        Raw r;
        r.v = ld16(reinterpret_cast<const uint4 *>(w.q) + o * (w.cols / 16) + u);
        const int64_t ng = w.cols >> w.gshift, g = o * ng + ((u * 16) >> w.gshift);
        r.s = ld_scale<SDT>(w.s, g);
        r.b = MODE == WEFT_CU_AFFINE ? ld_scale<SDT>(w.b, g) : 0.0f;
        return r;
    }
    __device__ __forceinline__ static float dot(const Raw &r, const float *x, float sx, float acc) {
        const uint32_t flip = MODE == WEFT_CU_AFFINE ? 0u : 0x80808080u;
        const uint32_t words[4] = {r.v.x ^ flip, r.v.y ^ flip, r.v.z ^ flip, r.v.w ^ flip};
        const float off = MODE == WEFT_CU_AFFINE ? 8388608.0f : 8388736.0f;
        float p = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) p = fmaf(__fsub_rn(magic_byte(words[j], i), off), x[4 * j + i], p);
        const float c = MODE == WEFT_CU_AFFINE ? fmaf(r.s, p, __fmul_rn(r.b, sx)) : __fmul_rn(r.s, p);
        return __fadd_rn(acc, c);
    }
    __device__ __forceinline__ static void unit(const WDev &w, int64_t o, int64_t u, float *out) {
        const Raw r = load(w, o, u);
        const uint32_t x[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int n = 0; n < 4; n++) {
                const uint32_t byte = (x[j] >> (8 * n)) & 255u;
                if (MODE == WEFT_CU_AFFINE)
                    out[4 * j + n] = __fadd_rn(__fmul_rn(r.s, (float)byte), r.b);
                else
                    out[4 * j + n] = __fmul_rn((float)(int)(int8_t)byte, r.s);
            }
    }
};

#endif
