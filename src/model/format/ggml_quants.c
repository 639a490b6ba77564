/* ggml block-format decoders: the fp32 values ggml-quants.c dequantize_row_* produce, bit for bit.
 *
 * Layouts (ggml-common.h, little-endian, d/dmin/m are IEEE binary16):
 *   Q4_0  {d; qs[16]}                  Q4_1 {d; m; qs[16]}
 *   Q5_0  {d; qh[4]; qs[16]}           Q5_1 {d; m; qh[4]; qs[16]}         Q8_0 {d; int8 qs[32]}
 *   Q2_K  {scales[16]; qs[64]; d; dmin}                     (256 values)
 *   Q3_K  {hmask[32]; qs[64]; scales[12]; d}
 *   Q4_K  {d; dmin; scales[12]; qs[128]}
 *   Q5_K  {d; dmin; scales[12]; qh[32]; qs[128]}
 *   Q6_K  {ql[128]; qh[64]; int8 scales[16]; d}
 * Every product below is evaluated in the same order and precision as the reference (fp32, left to right,
 * no fused multiply-add: the build uses -ffp-contract=off), which is what makes the results bit-identical to
 * ggml and to gguf-py's numpy decoders. Offsets are read byte-wise, so `src` needs no alignment. */
#include "weft/tensor.h"

#include <string.h>

static float half_at(const uint8_t *p) {
    return weft_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void dq_q4_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void dq_q4_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* Q5_0/Q5_1: bit j of qh is the fifth bit of value j (0..31). */
static void dq_q5_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)(((qs[j] & 0x0F) | h0) - 16) * d;
        y[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
    }
}

static void dq_q5_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)((qs[j] & 0x0F) | h0) * d + m;
        y[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high nibble = min. Value bits: qs byte l of a
 * 32-byte chunk holds four 2-bit values at shifts 0,2,4,6 for consecutive 32-value groups. */
static void dq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *scales = b, *q = b + 16;
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const uint8_t sc = scales[is++];
                const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                const uint8_t *qq = q + 16 * half;
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((qq[l] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

/* Q3_K: 16 six-bit signed scales (offset 32) packed in 12 bytes: low nibble from byte j (j<8) or the high
 * nibble of byte j-8, top two bits from byte 8 + j%4 at shift 2*(j/4). The third value bit lives in hmask;
 * a clear hmask bit subtracts 4. */
static void dq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *q = b + 32, *sp = b + 96;
    const float d_all = half_at(b + 108);
    int sc[16];
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? (sp[j] & 0xF) : (sp[j - 8] >> 4);
        const int hi = (sp[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int)(int8_t)(uint8_t)(lo | (hi << 4)) - 32;
    }
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const float dl = d_all * (float)sc[is++];
                const uint8_t *qq = q + 16 * half, *hh = hm + 16 * half;
                for (int l = 0; l < 16; l++) {
                    const int v = ((qq[l] >> shift) & 3) - ((hh[l] & m) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
            m = (uint8_t)(m << 1);
        }
        q += 32;
    }
}

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K block (ggml get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dq_q4_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, mn;
        scale_min_k4(is, scales, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
    }
}

static void dq_q5_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, mn;
        scale_min_k4(is, scales, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

/* Q6_K: value = (d * scale) * (q - 32), the product taken in that order as the reference does. */
static void dq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = half_at(b + 208);
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void weft_ggml_dequant(weft_dtype t, const void *src, float *out, int64_t n) {
    typedef void (*block_fn)(const uint8_t *, float *);
    block_fn fn = NULL;
    switch (t) {
    case WEFT_DT_Q4_0:
        fn = dq_q4_0;
        break;
    case WEFT_DT_Q4_1:
        fn = dq_q4_1;
        break;
    case WEFT_DT_Q5_0:
        fn = dq_q5_0;
        break;
    case WEFT_DT_Q5_1:
        fn = dq_q5_1;
        break;
    case WEFT_DT_Q8_0:
        fn = dq_q8_0;
        break;
    case WEFT_DT_Q2_K:
        fn = dq_q2_k;
        break;
    case WEFT_DT_Q3_K:
        fn = dq_q3_k;
        break;
    case WEFT_DT_Q4_K:
        fn = dq_q4_k;
        break;
    case WEFT_DT_Q5_K:
        fn = dq_q5_k;
        break;
    case WEFT_DT_Q6_K:
        fn = dq_q6_k;
        break;
    default:
        return; /* not a ggml block type: callers dispatch only the types above */
    }
    const weft_dtype_info *info = weft_dtype_get(t);
    const uint8_t *p = src;
    for (int64_t i = 0; i + info->block <= n; i += info->block) {
        fn(p, out + i);
        p += info->block_bytes;
    }
}
