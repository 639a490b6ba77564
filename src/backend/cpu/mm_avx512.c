/* AVX-512 pieces of the matmul (mm.h): decoders for the common weight types and the MM_MR × nr register tile.
 * Compiled for AVX-512 with a target pragma and only called after __builtin_cpu_supports said yes, so the
 * binary still runs on any x86-64. Every decoder repeats the reference decoder's operations in the same order
 * and precision (int → fp32 conversions are exact, then the same multiplies and adds, never fused), so its
 * values equal weft_tensor_dequant_row's bit for bit. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")
#include "mm.h"

#include "weft/safetensors.h"

#include <immintrin.h>
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

/* ---- ggml blocks (layouts in src/model/format/ggml_quants.c) ---- */

static void d_q4_0(const uint8_t *p, int64_t nb, float *y) {
    const __m512i m4 = _mm512_set1_epi32(0xF), c8 = _mm512_set1_epi32(8);
    for (int64_t b = 0; b < nb; b++, p += 18, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(p));
        const __m512i v = bytes16(p + 2);
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(v, m4), c8);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(v, 4), c8);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
}

static void d_q4_1(const uint8_t *p, int64_t nb, float *y) {
    const __m512i m4 = _mm512_set1_epi32(0xF);
    for (int64_t b = 0; b < nb; b++, p += 20, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(p)), m = _mm512_set1_ps(h2f(p + 2));
        const __m512i v = bytes16(p + 4);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, m4));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        _mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(lo, d), m));
        _mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_mul_ps(hi, d), m));
    }
}

/* bit j of qh (j < 32) shifted to bit 4, for lanes j = base .. base+15 */
static inline __m512i fifth_bit(uint32_t qh, const __m512i shifts) {
    const __m512i v = _mm512_srlv_epi32(_mm512_set1_epi32((int)qh), shifts);
    return _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(1)), 4);
}

static void d_q5(const uint8_t *p, int64_t nb, float *y, bool has_min) {
    const __m512i m4 = _mm512_set1_epi32(0xF), c16 = _mm512_set1_epi32(16);
    const __m512i s0 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i s1 = _mm512_add_epi32(s0, c16);
    const int bytes = has_min ? 24 : 22, qh_at = has_min ? 4 : 2;
    for (int64_t b = 0; b < nb; b++, p += bytes, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(p));
        const uint32_t qh = u32_at(p + qh_at);
        const __m512i v = bytes16(p + qh_at + 4);
        __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), fifth_bit(qh, s0));
        __m512i hi = _mm512_or_si512(_mm512_srli_epi32(v, 4), fifth_bit(qh, s1));
        if (has_min) {
            const __m512 m = _mm512_set1_ps(h2f(p + 2));
            _mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), m));
            _mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), m));
        } else {
            lo = _mm512_sub_epi32(lo, c16);
            hi = _mm512_sub_epi32(hi, c16);
            _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
            _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
        }
    }
}

static void d_q8_0(const uint8_t *p, int64_t nb, float *y) {
    for (int64_t b = 0; b < nb; b++, p += 34, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(p));
        const __m512i lo = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 2)));
        const __m512i hi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 18)));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
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

/* d·q − m on 16 lanes of q, as the reference: (dl · (float)q) − ml */
static inline void put_dm(float *y, __m512i q, float dl, float ml) {
    _mm512_storeu_ps(
        y, _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl), _mm512_cvtepi32_ps(q)), _mm512_set1_ps(ml)));
}

static void d_q4_k(const uint8_t *p, int64_t nb, float *y) {
    const __m512i m4 = _mm512_set1_epi32(0xF);
    for (int64_t b = 0; b < nb; b++, p += 144) {
        const float d = h2f(p), dmin = h2f(p + 2);
        const uint8_t *q = p + 16;
        for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
            int sc, mn;
            scale_min_k4(is, p + 4, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            scale_min_k4(is + 1, p + 4, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            const __m512i v0 = bytes16(q), v1 = bytes16(q + 16);
            put_dm(y, _mm512_and_si512(v0, m4), d1, m1);
            put_dm(y + 16, _mm512_and_si512(v1, m4), d1, m1);
            put_dm(y + 32, _mm512_srli_epi32(v0, 4), d2, m2);
            put_dm(y + 48, _mm512_srli_epi32(v1, 4), d2, m2);
        }
    }
}

static void d_q5_k(const uint8_t *p, int64_t nb, float *y) {
    const __m512i m4 = _mm512_set1_epi32(0xF), one = _mm512_set1_epi32(1);
    for (int64_t b = 0; b < nb; b++, p += 176) {
        const float d = h2f(p), dmin = h2f(p + 2);
        const __m512i h0 = bytes16(p + 16), h1 = bytes16(p + 32);
        const uint8_t *ql = p + 48;
        for (int is = 0; is < 8; is += 2, ql += 32, y += 64) {
            int sc, mn;
            scale_min_k4(is, p + 4, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            scale_min_k4(is + 1, p + 4, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            const __m128i sh1 = _mm_cvtsi32_si128(is), sh2 = _mm_cvtsi32_si128(is + 1);
            const __m512i v0 = bytes16(ql), v1 = bytes16(ql + 16);
#define HB(h, s) _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(h, s), one), 4)
            put_dm(y, _mm512_add_epi32(_mm512_and_si512(v0, m4), HB(h0, sh1)), d1, m1);
            put_dm(y + 16, _mm512_add_epi32(_mm512_and_si512(v1, m4), HB(h1, sh1)), d1, m1);
            put_dm(y + 32, _mm512_add_epi32(_mm512_srli_epi32(v0, 4), HB(h0, sh2)), d2, m2);
            put_dm(y + 48, _mm512_add_epi32(_mm512_srli_epi32(v1, 4), HB(h1, sh2)), d2, m2);
#undef HB
        }
    }
}

static void d_q6_k(const uint8_t *p, int64_t nb, float *y) {
    const __m512i m4 = _mm512_set1_epi32(0xF), m3 = _mm512_set1_epi32(3), c32 = _mm512_set1_epi32(32);
    for (int64_t b = 0; b < nb; b++, p += 210) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        const float d = h2f(p + 208);
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int h = 0; h < 2; h++) {
                const int L = 16 * h;
                const __m512i a = bytes16(ql + L), c = bytes16(ql + 32 + L), hq = bytes16(qh + L);
#define Q6(lowbits, shift)                                                                                   \
    _mm512_sub_epi32(                                                                                        \
        _mm512_or_si512(lowbits, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hq, shift), m3), 4)),  \
        c32)
                const __m512i q1 = Q6(_mm512_and_si512(a, m4), 0), q2 = Q6(_mm512_and_si512(c, m4), 2);
                const __m512i q3 = Q6(_mm512_srli_epi32(a, 4), 4), q4 = Q6(_mm512_srli_epi32(c, 4), 6);
#undef Q6
                _mm512_storeu_ps(y + L,
                                 _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[h]), _mm512_cvtepi32_ps(q1)));
                _mm512_storeu_ps(y + 32 + L,
                                 _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[h + 2]), _mm512_cvtepi32_ps(q2)));
                _mm512_storeu_ps(y + 64 + L,
                                 _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[h + 4]), _mm512_cvtepi32_ps(q3)));
                _mm512_storeu_ps(y + 96 + L,
                                 _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[h + 6]), _mm512_cvtepi32_ps(q4)));
            }
        }
    }
}

/* ---- plain and MLX ---- */

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

/* 4- and 8-bit MLX affine: value = s·q + b (multiply, then add), q LSB-first within each uint32 word. */
static bool d_mlx(const weft_tensor *t, int64_t row, int64_t k0, int64_t kc, float *y) {
    if ((t->bits != 4 && t->bits != 8) || t->group_size % 16) return false;
    const uint8_t *w = t->data + (size_t)row * weft_mlx_row_bytes(t);
    const size_t srow = weft_mlx_scale_row_bytes(t) * (size_t)row;
    const uint8_t *sp = t->scales + srow, *bp = t->biases + srow;
    const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i m4 = _mm512_set1_epi32(0xF);
    const int gs = t->group_size;
    for (int64_t k = k0; k < k0 + kc; k += gs) {
        const int64_t g = k / gs;
        const __m512 s = _mm512_set1_ps(mlx_scale(t->scale_dtype, sp, g));
        const __m512 b = _mm512_set1_ps(mlx_scale(t->scale_dtype, bp, g));
        for (int j = 0; j < gs; j += 16) {
            __m512i q;
            if (t->bits == 4) {
                __m128i x = _mm_loadl_epi64((const __m128i *)(w + (k + j) / 2));
                x = _mm_unpacklo_epi8(x, x); /* byte i twice: elements 2i (low nibble), 2i+1 (high) */
                q = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(x), shifts), m4);
            } else {
                q = bytes16(w + k + j);
            }
            _mm512_storeu_ps(y + (k - k0) + j, _mm512_add_ps(_mm512_mul_ps(s, _mm512_cvtepi32_ps(q)), b));
        }
    }
    return true;
}

static bool avx512_decode(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {
    if (W->dtype == WEFT_DT_MLX_AFFINE) return d_mlx(W, row, k0, kc, out);
    const int64_t K = weft_tensor_cols(W);
    const uint8_t *src = W->data + (size_t)row * weft_dtype_row_bytes(W->dtype, K);
    const weft_dtype_info *info = weft_dtype_get(W->dtype);
    const uint8_t *p = src + (size_t)(k0 / info->block) * (size_t)info->block_bytes;
    const int64_t nb = kc / info->block;
    switch (W->dtype) {
    case WEFT_DT_F32:
        memcpy(out, p, (size_t)kc * 4);
        return true;
    case WEFT_DT_F16:
        d_f16(p, kc, out);
        return true;
    case WEFT_DT_BF16:
        d_bf16(p, kc, out);
        return true;
    case WEFT_DT_Q4_0:
        d_q4_0(p, nb, out);
        return true;
    case WEFT_DT_Q4_1:
        d_q4_1(p, nb, out);
        return true;
    case WEFT_DT_Q5_0:
        d_q5(p, nb, out, false);
        return true;
    case WEFT_DT_Q5_1:
        d_q5(p, nb, out, true);
        return true;
    case WEFT_DT_Q8_0:
        d_q8_0(p, nb, out);
        return true;
    case WEFT_DT_Q4_K:
        d_q4_k(p, nb, out);
        return true;
    case WEFT_DT_Q5_K:
        d_q5_k(p, nb, out);
        return true;
    case WEFT_DT_Q6_K:
        d_q6_k(p, nb, out);
        return true;
    default:
        return false; /* Q2_K, Q3_K: the portable decoder */
    }
}

/* ---- the register tile and the reduction ---- */

/* mm.h step 3: lanes (j, j+8), then (j, j+4), then (0,2)+(1,3) */
static inline float tree16(__m512 v) {
    const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

static inline __attribute__((always_inline)) void tile_nr(const float *const w[MM_MR], const float *x,
                                                          int64_t ldx, const int nr, int64_t kc, float *acc,
                                                          bool init, bool finish, float *y, int64_t ldy,
                                                          int mr) {
    __m512 a[MM_MR][MM_NR];
#pragma GCC unroll 4
    for (int i = 0; i < MM_MR; i++)
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++)
            a[i][r] = init ? _mm512_setzero_ps() : _mm512_load_ps(acc + (i * MM_NR + r) * 16);
    const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        const __m512 v0 = _mm512_loadu_ps(w0 + k), v1 = _mm512_loadu_ps(w1 + k), v2 = _mm512_loadu_ps(w2 + k),
                     v3 = _mm512_loadu_ps(w3 + k);
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m512 xv = _mm512_loadu_ps(x + r * ldx + k);
            a[0][r] = _mm512_fmadd_ps(v0, xv, a[0][r]);
            a[1][r] = _mm512_fmadd_ps(v1, xv, a[1][r]);
            a[2][r] = _mm512_fmadd_ps(v2, xv, a[2][r]);
            a[3][r] = _mm512_fmadd_ps(v3, xv, a[3][r]);
        }
    }
    if (k < kc) { /* lanes with no k left keep their value (mask3: unchanged where the mask is clear) */
        const __mmask16 m = (__mmask16)((1u << (kc - k)) - 1);
        const __m512 v0 = _mm512_maskz_loadu_ps(m, w0 + k), v1 = _mm512_maskz_loadu_ps(m, w1 + k),
                     v2 = _mm512_maskz_loadu_ps(m, w2 + k), v3 = _mm512_maskz_loadu_ps(m, w3 + k);
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * ldx + k);
            a[0][r] = _mm512_mask3_fmadd_ps(v0, xv, a[0][r], m);
            a[1][r] = _mm512_mask3_fmadd_ps(v1, xv, a[1][r], m);
            a[2][r] = _mm512_mask3_fmadd_ps(v2, xv, a[2][r], m);
            a[3][r] = _mm512_mask3_fmadd_ps(v3, xv, a[3][r], m);
        }
    }
    if (finish) {
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
            for (int i = 0; i < MM_MR; i++)
                if (i < mr) y[r * ldy + i] = tree16(a[i][r]);
    } else {
#pragma GCC unroll 4
        for (int i = 0; i < MM_MR; i++)
#pragma GCC unroll 6
            for (int r = 0; r < nr; r++) _mm512_store_ps(acc + (i * MM_NR + r) * 16, a[i][r]);
    }
}

static void avx512_tile(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc,
                        float *acc, bool init, bool finish, float *y, int64_t ldy, int mr) {
    switch (nr) {
    case 1:
        tile_nr(w, x, ldx, 1, kc, acc, init, finish, y, ldy, mr);
        break;
    case 2:
        tile_nr(w, x, ldx, 2, kc, acc, init, finish, y, ldy, mr);
        break;
    case 3:
        tile_nr(w, x, ldx, 3, kc, acc, init, finish, y, ldy, mr);
        break;
    case 4:
        tile_nr(w, x, ldx, 4, kc, acc, init, finish, y, ldy, mr);
        break;
    case 5:
        tile_nr(w, x, ldx, 5, kc, acc, init, finish, y, ldy, mr);
        break;
    default:
        tile_nr(w, x, ldx, 6, kc, acc, init, finish, y, ldy, mr);
        break;
    }
}

static float avx512_dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc, m);
    }
    return tree16(acc);
}

const weft_mm_isa weft_mm_avx512 = {"avx512", avx512_decode, avx512_tile, avx512_dot};

#endif
