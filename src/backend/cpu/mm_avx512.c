/* AVX-512 pieces of the matmul (mm.h): decoders for the common weight types, the fused few-rows path.
 * Compiled for AVX-512 with a target pragma and only called after __builtin_cpu_supports said yes, so the
 * binary still runs on any x86-64. Every decoder repeats the reference decoder's operations in the same order
 * and precision (int → fp32 conversions are exact, then the same multiplies and adds, never fused), so its
 * values equal weft_tensor_dequant_row's bit for bit. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")
#include "mm_avx512.h"

#include "weft/safetensors.h"

#include <string.h>

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m512i bytes16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

static inline float mlx_scale(weft_dtype dt, const uint8_t *base, int64_t g) {
    if (dt == WEFT_DT_F32) {
        float f;
        memcpy(&f, base + 4 * g, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, base + 2 * g, 2);
    return dt == WEFT_DT_F16 ? _cvtsh_ss(h) : weft_bf16_to_f32(h);
}

/* ---- weight kinds with a fast path ---- */

typedef enum kind {
    K_NONE,
    K_F16,
    K_BF16,
    K_Q4_0,
    K_Q4_1,
    K_Q5_0,
    K_Q5_1,
    K_Q8_0,
    K_Q4_K,
    K_Q5_K,
    K_Q6_K,
    K_MLX4,
    K_MLX8
} kind;

static kind kind_of(const weft_tensor *W) {
    switch (W->dtype) {
    case WEFT_DT_F16:
        return K_F16;
    case WEFT_DT_BF16:
        return K_BF16;
    case WEFT_DT_Q4_0:
        return K_Q4_0;
    case WEFT_DT_Q4_1:
        return K_Q4_1;
    case WEFT_DT_Q5_0:
        return K_Q5_0;
    case WEFT_DT_Q5_1:
        return K_Q5_1;
    case WEFT_DT_Q8_0:
        return K_Q8_0;
    case WEFT_DT_Q4_K:
        return K_Q4_K;
    case WEFT_DT_Q5_K:
        return K_Q5_K;
    case WEFT_DT_Q6_K:
        return K_Q6_K;
    case WEFT_DT_MLX_AFFINE:
        if (W->group_size != 32 && W->group_size != 64 && W->group_size != 128 && W->group_size != 256)
            return K_NONE;
        return W->bits == 4 ? K_MLX4 : W->bits == 8 ? K_MLX8 : K_NONE;
    default:
        return K_NONE;
    }
}

/* Bytes of one stored row, and the offset of column k0 (a multiple of MM_KC, so of every block) in it;
 * computed here from the layouts rather than through weft_dtype_row_bytes, which costs a call and a division
 * per row — as much as the arithmetic of a short decode row. */
static inline size_t row_stride(kind kd, const weft_tensor *W) {
    const size_t K = (size_t)weft_tensor_cols(W);
    switch (kd) {
    case K_F16:
    case K_BF16:
        return 2 * K;
    case K_Q4_0:
        return K / 32 * 18;
    case K_Q4_1:
        return K / 32 * 20;
    case K_Q5_0:
        return K / 32 * 22;
    case K_Q5_1:
        return K / 32 * 24;
    case K_Q8_0:
        return K / 32 * 34;
    case K_Q4_K:
        return K / 256 * 144;
    case K_Q5_K:
        return K / 256 * 176;
    case K_Q6_K:
        return K / 256 * 210;
    default: /* MLX */
        return K * (size_t)W->bits / 8;
    }
}

static inline size_t col_offset(kind kd, const weft_tensor *W, int64_t k0) {
    const size_t k = (size_t)k0;
    switch (kd) {
    case K_Q4_K:
        return k / 256 * 144;
    case K_Q5_K:
        return k / 256 * 176;
    case K_Q6_K:
        return k / 256 * 210;
    case K_MLX4:
    case K_MLX8:
        return k * (size_t)W->bits / 8;
    default: /* plain and 32-blocks: the row stride of k columns */
        switch (kd) {
        case K_F16:
        case K_BF16:
            return 2 * k;
        case K_Q4_0:
            return k / 32 * 18;
        case K_Q4_1:
            return k / 32 * 20;
        case K_Q5_0:
            return k / 32 * 22;
        case K_Q5_1:
            return k / 32 * 24;
        default:
            return k / 32 * 34;
        }
    }
}

/* Per-segment scales: a (and b) per 32 columns (per 16 for Q6_K), as fp32, computed as the reference does. */
typedef struct prep {
    float a[MM_KC / 16], b[MM_KC / 16];
    int shift; /* MLX: a and b are per group; chunk c uses group c >> shift */
} prep;

/* n MLX group scales (F32, F16 or BF16) from p to fp32, 16 at a time */
static inline void scales_f32(weft_dtype dt, const uint8_t *p, int64_t n, float *out) {
    if (dt == WEFT_DT_F32) {
        memcpy(out, p, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * i);
        const __m512 f = dt == WEFT_DT_F16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_mask_storeu_ps(out + i, m, f);
    }
}

/* fp16 d (and m right after it) of nb consecutive blocks `stride` bytes apart, 16 blocks per gather (a
 * scalar loop into a buffer and a vector load back costs a store-forwarding stall per 16 blocks instead) */
static inline void prep_dm(const uint8_t *p, int stride, int64_t nb, float *a, float *b) {
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(stride));
    for (int64_t c = 0; c < nb; c += 16) {
        const __mmask16 m = nb - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nb - c)) - 1);
        const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, p + c * stride, 1);
        _mm512_storeu_ps(a + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
        if (b) _mm512_storeu_ps(b + c, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))));
    }
}

/* 6-bit scale and min j of a Q4_K/Q5_K block (ggml get_scale_min_k4) */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The 8 scales and mins of a Q4_K/Q5_K block (get_scale_min_k4's 6-bit fields, all at once) times d and dmin:
 * a[j] = d·(float)sc_j, b[j] = dmin·(float)mn_j, the reference's products. Lanes 0-7 are sc_j, 8-15 mn_j:
 *   j < 4: sc = q[j] & 63,  mn = q[j+4] & 63
 *   j ≥ 4: sc = (q[j+4] & 15) | (q[j−4] >> 6) << 4,  mn = (q[j+4] >> 4) | (q[j] >> 6) << 4 */
static inline void scales_k4(const uint8_t *blk, float *a, float *b) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 4)); /* scales[12] and 4 bytes after */
    const __m128i ia = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m128i ib = _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7);
    const __m512i A = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(raw, ia));
    const __m512i B = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(raw, ib));
    const __m512i sa = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i ma = _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m512i mb = _mm512_setr_epi32(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(A, sa), ma);
    const __m512i hi = _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(B, 6), 4), mb);
    const __m512 dm =
        _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(h2f(blk)), _mm512_set1_ps(h2f(blk + 2)));
    const __m512 v = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_or_si512(lo, hi)));
    _mm256_storeu_ps(a, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(b, _mm512_extractf32x8_ps(v, 1));
}

static inline void do_prep(kind kd, const weft_tensor *W, const uint8_t *p, int64_t row, int64_t k0,
                           int64_t kc, prep *pp) {
    const int64_t nc = kc / 32;
    switch (kd) {
    case K_Q4_0:
        prep_dm(p, 18, nc, pp->a, NULL);
        break;
    case K_Q4_1:
        prep_dm(p, 20, nc, pp->a, pp->b);
        break;
    case K_Q5_0:
        prep_dm(p, 22, nc, pp->a, NULL);
        break;
    case K_Q5_1:
        prep_dm(p, 24, nc, pp->a, pp->b);
        break;
    case K_Q8_0:
        prep_dm(p, 34, nc, pp->a, NULL);
        break;
    case K_Q4_K:
    case K_Q5_K: {
        const int bb = kd == K_Q4_K ? 144 : 176;
        for (int64_t sb = 0; sb < nc / 8; sb++) scales_k4(p + sb * bb, pp->a + 8 * sb, pp->b + 8 * sb);
        break;
    }
    case K_Q6_K:
        for (int64_t sb = 0; sb < nc / 8; sb++) {
            const uint8_t *b = p + sb * 210;
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)));
            _mm512_storeu_ps(pp->a + 16 * sb,
                             _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)), _mm512_cvtepi32_ps(sc)));
        }
        break;
    case K_MLX4:
    case K_MLX8: {
        const size_t srow = weft_mlx_scale_row_bytes(W) * (size_t)row;
        const int64_t gs = W->group_size, g0 = k0 / gs, ng = kc / gs;
        const size_t es = W->scale_dtype == WEFT_DT_F32 ? 4 : 2;
        scales_f32(W->scale_dtype, W->scales + srow + (size_t)g0 * es, ng, pp->a);
        scales_f32(W->scale_dtype, W->biases + srow + (size_t)g0 * es, ng, pp->b);
        pp->shift = gs == 32 ? 0 : gs == 64 ? 1 : gs == 128 ? 2 : 3;
        break;
    }
    default:
        break;
    }
}

/* Columns [32c, 32c+32) of a segment as two vectors (lanes 0-15, 16-31). 4-bit codes go through a 16-entry
 * table T[i] = the reference's value for code i, computed with the reference's operations; vpermps then
 * picks T[code] per lane (it reads only the index's low 4 bits, so the high nibble needs no mask). */
static inline __attribute__((always_inline)) void chunk(kind kd, const uint8_t *p, const prep *pp, int64_t c,
                                                        __m512 *lo, __m512 *hi) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    switch (kd) {
    case K_F16:
        *lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 64 * c)));
        *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 64 * c + 32)));
        break;
    case K_BF16:
        *lo = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 64 * c))), 16));
        *hi = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 64 * c + 32))), 16));
        break;
    case K_Q4_0:
    case K_Q4_1: {
        /* Q4_0: (float)(q − 8)·d;  Q4_1: (float)q·d + m */
        __m512 T;
        if (kd == K_Q4_0)
            T = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0f)), _mm512_set1_ps(pp->a[c]));
        else
            T = _mm512_add_ps(_mm512_mul_ps(iota, _mm512_set1_ps(pp->a[c])), _mm512_set1_ps(pp->b[c]));
        const __m512i v = bytes16(p + c * (kd == K_Q4_0 ? 18 : 20) + (kd == K_Q4_0 ? 2 : 4));
        *lo = _mm512_permutexvar_ps(v, T);
        *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T);
        break;
    }
    case K_Q5_0:
    case K_Q5_1: {
        /* 5-bit codes: two tables (codes 0-15, 16-31) and vpermt2ps on index = nibble | fifth bit << 4;
         * Q5_0: (float)(q − 16)·d;  Q5_1: (float)q·d + m */
        const bool m = kd == K_Q5_1;
        const uint8_t *b = p + c * (m ? 24 : 22);
        const __m512 d = _mm512_set1_ps(pp->a[c]), i16 = _mm512_add_ps(iota, _mm512_set1_ps(16.0f));
        __m512 T0, T1;
        if (m) {
            const __m512 mm = _mm512_set1_ps(pp->b[c]);
            T0 = _mm512_add_ps(_mm512_mul_ps(iota, d), mm);
            T1 = _mm512_add_ps(_mm512_mul_ps(i16, d), mm);
        } else {
            T0 = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(16.0f)), d);
            T1 = _mm512_mul_ps(iota, d);
        }
        const uint32_t qh = u32_at(b + (m ? 4 : 2));
        const __m512i v = bytes16(b + (m ? 8 : 6)), c16 = _mm512_set1_epi32(16);
        __m512i il = _mm512_and_si512(v, _mm512_set1_epi32(0xF)), ih = _mm512_srli_epi32(v, 4);
        il = _mm512_mask_or_epi32(il, (__mmask16)(qh & 0xFFFF), il, c16);
        ih = _mm512_mask_or_epi32(ih, (__mmask16)(qh >> 16), ih, c16);
        *lo = _mm512_permutex2var_ps(T0, il, T1);
        *hi = _mm512_permutex2var_ps(T0, ih, T1);
        break;
    }
    case K_Q8_0: {
        const uint8_t *b = p + c * 34 + 2;
        const __m512 d = _mm512_set1_ps(pp->a[c]);
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b))), d);
        *hi = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 16)))), d);
        break;
    }
    case K_Q4_K: {
        /* sub-block j of a 256-block: nibble j&1 of bytes 32·(j/2) …; value d1·(float)q − m1 */
        const int64_t s = c / 8, j = c % 8;
        const uint8_t *q = p + s * 144 + 16 + 32 * (j / 2);
        const __m512 T =
            _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(pp->a[c]), iota), _mm512_set1_ps(pp->b[c]));
        __m512i v0 = bytes16(q), v1 = bytes16(q + 16);
        if (j & 1) v0 = _mm512_srli_epi32(v0, 4), v1 = _mm512_srli_epi32(v1, 4);
        *lo = _mm512_permutexvar_ps(v0, T);
        *hi = _mm512_permutexvar_ps(v1, T);
        break;
    }
    case K_Q5_K: {
        /* as Q4_K plus bit j of qh[l] as the fifth bit: d1·(float)(q + 16h) − m1 */
        const int64_t s = c / 8, j = c % 8;
        const uint8_t *b = p + s * 176, *q = b + 48 + 32 * (j / 2);
        const __m512 d1 = _mm512_set1_ps(pp->a[c]), m1 = _mm512_set1_ps(pp->b[c]);
        const __m512 T0 = _mm512_sub_ps(_mm512_mul_ps(d1, iota), m1);
        const __m512 T1 = _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_add_ps(iota, _mm512_set1_ps(16.0f))), m1);
        __m512i v0 = bytes16(q), v1 = bytes16(q + 16);
        if (j & 1) v0 = _mm512_srli_epi32(v0, 4), v1 = _mm512_srli_epi32(v1, 4);
        const __m512i m4 = _mm512_set1_epi32(0xF), c16 = _mm512_set1_epi32(16),
                      bit = _mm512_set1_epi32(1 << j);
        v0 = _mm512_and_si512(v0, m4);
        v1 = _mm512_and_si512(v1, m4);
        v0 = _mm512_mask_or_epi32(v0, _mm512_test_epi32_mask(bytes16(b + 16), bit), v0, c16);
        v1 = _mm512_mask_or_epi32(v1, _mm512_test_epi32_mask(bytes16(b + 32), bit), v1, c16);
        *lo = _mm512_permutex2var_ps(T0, v0, T1);
        *hi = _mm512_permutex2var_ps(T0, v1, T1);
        break;
    }
    case K_Q6_K: {
        /* columns 128n + 32g + l: low (g < 2) or high nibble of ql[64n + 32(g&1) + l], bits 2g.. of
         * qh[32n + l]; value (d·sc)·(float)(q − 32), one scale per 16 columns */
        const int64_t s = c / 8, n = (c / 4) % 2, g = c % 4;
        const uint8_t *ql = p + s * 210 + 64 * n + 32 * (g & 1), *qh = p + s * 210 + 128 + 32 * n;
        const __m512i m4 = _mm512_set1_epi32(0xF), m30 = _mm512_set1_epi32(0x30), c32 = _mm512_set1_epi32(32);
        const __m128i sh = _mm_cvtsi32_si128((int)(g >> 1) * 4), shh = _mm_cvtsi32_si128((int)(4 - 2 * g));
        __m512i q0 = _mm512_and_si512(_mm512_srl_epi32(bytes16(ql), sh), m4);
        __m512i q1 = _mm512_and_si512(_mm512_srl_epi32(bytes16(ql + 16), sh), m4);
        __m512i h0 = bytes16(qh), h1 = bytes16(qh + 16);
        /* (qh >> 2g & 3) << 4 == (qh << (4 − 2g) or >> (2g − 4)) & 0x30 */
        if (g < 2)
            h0 = _mm512_sll_epi32(h0, shh), h1 = _mm512_sll_epi32(h1, shh);
        else
            h0 = _mm512_srl_epi32(h0, _mm_cvtsi32_si128((int)(2 * g - 4))),
            h1 = _mm512_srl_epi32(h1, _mm_cvtsi32_si128((int)(2 * g - 4)));
        q0 = _mm512_sub_epi32(_mm512_ternarylogic_epi32(q0, h0, m30, 0xF8), c32); /* q0 | (h0 & 0x30) */
        q1 = _mm512_sub_epi32(_mm512_ternarylogic_epi32(q1, h1, m30, 0xF8), c32);
        *lo = _mm512_mul_ps(_mm512_set1_ps(pp->a[2 * c]), _mm512_cvtepi32_ps(q0));
        *hi = _mm512_mul_ps(_mm512_set1_ps(pp->a[2 * c + 1]), _mm512_cvtepi32_ps(q1));
        break;
    }
    case K_MLX4: {
        /* 8 codes per uint32, LSB first: byte i holds columns 2i (low nibble) and 2i+1; value s·q + b */
        const int64_t g = c >> pp->shift;
        const __m512 T =
            _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(pp->a[g]), iota), _mm512_set1_ps(pp->b[g]));
        /* even columns from the low nibbles, odd from the high ones, then interleaved */
        const __m512i v = bytes16(p + 16 * c);
        const __m512 ev = _mm512_permutexvar_ps(v, T), od = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), T);
        *lo = _mm512_permutex2var_ps(
            ev, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), od);
        *hi = _mm512_permutex2var_ps(
            ev, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), od);
        break;
    }
    case K_MLX8: {
        const __m512 sc = _mm512_set1_ps(pp->a[c >> pp->shift]), bi = _mm512_set1_ps(pp->b[c >> pp->shift]);
        *lo = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(bytes16(p + 32 * c))), bi);
        *hi = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(bytes16(p + 32 * c + 16))), bi);
        break;
    }
    default:
        *lo = *hi = _mm512_setzero_ps();
        break;
    }
}

/* Decode units of the fused path: columns [32c, 32c + 32·unit_chunks) as 2·unit_chunks vectors in column
 * order, so bytes shared by neighbouring sub-blocks are loaded and widened once. Same values as chunk(). */
static inline int unit_chunks(kind kd) {
    return kd == K_Q4_K || kd == K_Q5_K ? 2 : kd == K_Q6_K ? 4 : 1;
}

static inline __attribute__((always_inline)) void unit(kind kd, const uint8_t *p, const prep *pp, int64_t c,
                                                       __m512 *v) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (kd == K_Q4_K) { /* sub-blocks c, c+1: low, then high nibbles of the same 32 bytes */
        const uint8_t *q = p + (c / 8) * 144 + 16 + 32 * ((c % 8) / 2);
        const __m512 T0 =
            _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(pp->a[c]), iota), _mm512_set1_ps(pp->b[c]));
        const __m512 T1 =
            _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(pp->a[c + 1]), iota), _mm512_set1_ps(pp->b[c + 1]));
        const __m512i v0 = bytes16(q), v1 = bytes16(q + 16);
        v[0] = _mm512_permutexvar_ps(v0, T0);
        v[1] = _mm512_permutexvar_ps(v1, T0);
        v[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), T1);
        v[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), T1);
    } else if (kd == K_Q6_K) { /* a 128-column half: ql bytes serve two column groups, qh bytes four */
        const uint8_t *b = p + (c / 8) * 210;
        const int64_t n = (c / 4) % 2;
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        const __m512i m4 = _mm512_set1_epi32(0xF), m30 = _mm512_set1_epi32(0x30), c32 = _mm512_set1_epi32(32);
        const __m512i l0 = bytes16(ql), l1 = bytes16(ql + 16), l2 = bytes16(ql + 32), l3 = bytes16(ql + 48);
        const __m512i h0 = bytes16(qh), h1 = bytes16(qh + 16);
        /* group g: nibble (g < 2 low, else high) of ql[32(g&1) + l] | ((qh[l] >> 2g) & 3) << 4, minus 32 */
#define Q6V(nib, hq) _mm512_sub_epi32(_mm512_ternarylogic_epi32(nib, hq, m30, 0xF8), c32)
        const __m512i q[8] = {Q6V(_mm512_and_si512(l0, m4), _mm512_slli_epi32(h0, 4)),
                              Q6V(_mm512_and_si512(l1, m4), _mm512_slli_epi32(h1, 4)),
                              Q6V(_mm512_and_si512(l2, m4), _mm512_slli_epi32(h0, 2)),
                              Q6V(_mm512_and_si512(l3, m4), _mm512_slli_epi32(h1, 2)),
                              Q6V(_mm512_srli_epi32(l0, 4), h0),
                              Q6V(_mm512_srli_epi32(l1, 4), h1),
                              Q6V(_mm512_srli_epi32(l2, 4), _mm512_srli_epi32(h0, 2)),
                              Q6V(_mm512_srli_epi32(l3, 4), _mm512_srli_epi32(h1, 2))};
#undef Q6V
        for (int u = 0; u < 8; u++)
            v[u] = _mm512_mul_ps(_mm512_set1_ps(pp->a[2 * c + u]), _mm512_cvtepi32_ps(q[u]));
    } else {
        chunk(kd, p, pp, c, &v[0], &v[1]);
        if (kd == K_Q5_K) chunk(kd, p, pp, c + 1, &v[2], &v[3]);
    }
}

/* ---- plain types with any length (the decode-to-buffer path) ---- */

static void d_f16(const uint8_t *p, int64_t n, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i)));
    }
}

static void d_bf16(const uint8_t *p, int64_t n, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
}

static inline __attribute__((always_inline)) void decode_kind(kind kd, const weft_tensor *W, int64_t row,
                                                              int64_t k0, int64_t kc, float *out) {
    const uint8_t *p = W->data + (size_t)row * row_stride(kd, W) + col_offset(kd, W, k0);
    prep pp;
    do_prep(kd, W, p, row, k0, kc, &pp);
    for (int64_t c = 0; c < kc / 32; c++) {
        __m512 lo, hi;
        chunk(kd, p, &pp, c, &lo, &hi);
        _mm512_storeu_ps(out + 32 * c, lo);
        _mm512_storeu_ps(out + 32 * c + 16, hi);
    }
}

#define KIND_FN(NAME, KD)                                                                                    \
    static void NAME(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {                \
        decode_kind(KD, W, row, k0, kc, out);                                                                \
    }
KIND_FN(dec_q4_0, K_Q4_0)
KIND_FN(dec_q4_1, K_Q4_1)
KIND_FN(dec_q5_0, K_Q5_0)
KIND_FN(dec_q5_1, K_Q5_1)
KIND_FN(dec_q8_0, K_Q8_0)
KIND_FN(dec_q4_k, K_Q4_K)
KIND_FN(dec_q5_k, K_Q5_K)
KIND_FN(dec_q6_k, K_Q6_K)
KIND_FN(dec_mlx4, K_MLX4)
KIND_FN(dec_mlx8, K_MLX8)
#undef KIND_FN

static bool avx512_decode(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {
    switch (kind_of(W)) {
    case K_F16:
        d_f16(W->data + (size_t)row * 2 * (size_t)weft_tensor_cols(W) + 2 * k0, kc, out);
        return true;
    case K_BF16:
        d_bf16(W->data + (size_t)row * 2 * (size_t)weft_tensor_cols(W) + 2 * k0, kc, out);
        return true;
    case K_Q4_0:
        dec_q4_0(W, row, k0, kc, out);
        return true;
    case K_Q4_1:
        dec_q4_1(W, row, k0, kc, out);
        return true;
    case K_Q5_0:
        dec_q5_0(W, row, k0, kc, out);
        return true;
    case K_Q5_1:
        dec_q5_1(W, row, k0, kc, out);
        return true;
    case K_Q8_0:
        dec_q8_0(W, row, k0, kc, out);
        return true;
    case K_Q4_K:
        dec_q4_k(W, row, k0, kc, out);
        return true;
    case K_Q5_K:
        dec_q5_k(W, row, k0, kc, out);
        return true;
    case K_Q6_K:
        dec_q6_k(W, row, k0, kc, out);
        return true;
    case K_MLX4:
        dec_mlx4(W, row, k0, kc, out);
        return true;
    case K_MLX8:
        dec_mlx8(W, row, k0, kc, out);
        return true;
    default:
        return false; /* F32 (used in place), Q2_K, Q3_K, MLX 2/3/5/6-bit: the portable decoder */
    }
}

/* ---- fused: decode in registers, multiply at once (few input rows) ---- */

static inline __attribute__((always_inline)) void fused_body(kind kd, const weft_tensor *W, int64_t o, int mr,
                                                             const float *x, int64_t ldx, const int nr,
                                                             float *y, int64_t ldy) {
    const int64_t K = weft_tensor_cols(W);
    const size_t rs = row_stride(kd, W);
    __m512 acc[MM_MR][MM_NF];
    for (int i = 0; i < MM_MR; i++)
        for (int r = 0; r < nr; r++) acc[i][r] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < K; k0 += MM_KC) {
        const int64_t kc = K - k0 < MM_KC ? K - k0 : MM_KC;
        prep pp[MM_MR];
        const uint8_t *rp[MM_MR];
        for (int i = 0; i < MM_MR; i++) {
            const int64_t row = o + (i < mr ? i : mr - 1); /* padding rows repeat the last, never written */
            rp[i] = W->data + (size_t)row * rs + col_offset(kd, W, k0);
            do_prep(kd, W, rp[i], row, k0, kc, &pp[i]);
        }
        const float *xk = x + k0;
        /* the panel after next (its rows follow these in memory) is fetched while this one computes, spread
         * over the chunks: decode rows are short streams the hardware prefetcher barely ramps up on */
        const uint8_t *next = rp[0] + (size_t)(2 * MM_MR) * rs;
        const size_t per_chunk = ((size_t)MM_MR * rs + (size_t)(kc / 32) - 1) / (size_t)(kc / 32);
        const int uc = unit_chunks(kd);
        for (int64_t c = 0; c < kc / 32; c += uc) {
            for (size_t off = (size_t)c * per_chunk; off < (size_t)(c + uc) * per_chunk; off += 64)
                _mm_prefetch((const char *)next + off, _MM_HINT_T0);
#pragma GCC unroll 4
            for (int i = 0; i < MM_MR; i++) {
                __m512 v[8];
                unit(kd, rp[i], &pp[i], c, v);
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
                    for (int u = 0; u < 2 * uc; u++)
                        acc[i][r] =
                            _mm512_fmadd_ps(v[u], _mm512_loadu_ps(xk + r * ldx + 32 * c + 16 * u), acc[i][r]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < mr; i++) y[r * ldy + i] = weft_avx512_tree16(acc[i][r]);
}

#define FUSED_FN(NAME, KD)                                                                                   \
    static void NAME(const weft_tensor *W, int64_t o, int mr, const float *x, int64_t ldx, int nr, float *y, \
                     int64_t ldy) {                                                                          \
        switch (nr) {                                                                                        \
        case 1:                                                                                              \
            fused_body(KD, W, o, mr, x, ldx, 1, y, ldy);                                                     \
            break;                                                                                           \
        case 2:                                                                                              \
            fused_body(KD, W, o, mr, x, ldx, 2, y, ldy);                                                     \
            break;                                                                                           \
        case 3:                                                                                              \
            fused_body(KD, W, o, mr, x, ldx, 3, y, ldy);                                                     \
            break;                                                                                           \
        default:                                                                                             \
            fused_body(KD, W, o, mr, x, ldx, 4, y, ldy);                                                     \
            break;                                                                                           \
        }                                                                                                    \
    }
FUSED_FN(fu_f16, K_F16)
FUSED_FN(fu_bf16, K_BF16)
FUSED_FN(fu_q4_0, K_Q4_0)
FUSED_FN(fu_q4_1, K_Q4_1)
FUSED_FN(fu_q5_0, K_Q5_0)
FUSED_FN(fu_q5_1, K_Q5_1)
FUSED_FN(fu_q8_0, K_Q8_0)
FUSED_FN(fu_q4_k, K_Q4_K)
FUSED_FN(fu_q5_k, K_Q5_K)
FUSED_FN(fu_q6_k, K_Q6_K)
FUSED_FN(fu_mlx4, K_MLX4)
FUSED_FN(fu_mlx8, K_MLX8)
#undef FUSED_FN

static bool avx512_fused(const weft_tensor *W, int64_t o, int mr, const float *x, int64_t ldx, int nr,
                         float *y, int64_t ldy) {
    if (nr < 1 || nr > MM_NF || weft_tensor_cols(W) % 32) return false;
    switch (kind_of(W)) {
    case K_F16:
        fu_f16(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_BF16:
        fu_bf16(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q4_0:
        fu_q4_0(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q4_1:
        fu_q4_1(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q5_0:
        fu_q5_0(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q5_1:
        fu_q5_1(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q8_0:
        fu_q8_0(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q4_K:
        fu_q4_k(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q5_K:
        fu_q5_k(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_Q6_K:
        fu_q6_k(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_MLX4:
        fu_mlx4(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    case K_MLX8:
        fu_mlx8(W, o, mr, x, ldx, nr, y, ldy);
        return true;
    default:
        return false;
    }
}

const weft_mm_isa weft_mm_avx512 = {"avx512", avx512_decode, weft_avx512_tile, avx512_fused, weft_avx512_dot};

#endif
