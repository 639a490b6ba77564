/* CPU kernels against the arithmetic src/backend/cpu/mm.h specifies, bit for bit (SPEC §4.3.1):
 *  - every ISA's decoders give weft_tensor_dequant_row's values, whole rows and column segments;
 *  - weft_matmul on every ISA equals a plain re-implementation of the canonical order (decode, 16 fma lanes,
 *    fixed tree) for 1..70 input rows, 1 and 2 threads, K below and above the decoded-panel size, ldy > out;
 *    so a row's result is the same alone or among others, with any thread count, on any ISA;
 *  - weft_dot likewise for lengths 0..100.
 * Weights are random bytes with finite scales, for every dtype weft decodes. */
#include "check.h"
#include "backend/cpu/mm.h"
#include "weft/cpu.h"
#include "weft/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float uniform(void) {
    return (float)next_u32() / 4294967296.0f * 2.0f - 1.0f;
}
static void put_f16(uint8_t *p, float f) {
    uint16_t h = weft_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* offsets of the fp16 scales inside each ggml block (ggml-common.h) */
static void fix_scales(weft_dtype t, uint8_t *b) {
    switch (t) {
    case WEFT_DT_Q4_1:
    case WEFT_DT_Q5_1:
        put_f16(b + 2, uniform() * 0.1f);
        /* fallthrough */
    case WEFT_DT_Q4_0:
    case WEFT_DT_Q5_0:
    case WEFT_DT_Q8_0:
        put_f16(b, uniform() * 0.05f);
        break;
    case WEFT_DT_Q2_K:
        put_f16(b + 80, uniform() * 0.05f);
        put_f16(b + 82, uniform() * 0.05f);
        break;
    case WEFT_DT_Q3_K:
        put_f16(b + 108, uniform() * 0.05f);
        break;
    case WEFT_DT_Q4_K:
    case WEFT_DT_Q5_K:
        put_f16(b, uniform() * 0.05f);
        put_f16(b + 2, uniform() * 0.05f);
        break;
    case WEFT_DT_Q6_K:
        put_f16(b + 208, uniform() * 0.05f);
        break;
    default:
        break;
    }
}

typedef struct wmat {
    weft_tensor t;
    uint8_t *data, *scales, *biases;
} wmat;

static void make_plain(wmat *m, weft_dtype dt, int64_t out, int64_t K) {
    memset(m, 0, sizeof *m);
    const weft_dtype_info *info = weft_dtype_get(dt);
    size_t rb = weft_dtype_row_bytes(dt, K), n = rb * (size_t)out;
    m->data = malloc(n);
    for (size_t i = 0; i < n; i++) m->data[i] = (uint8_t)next_u32();
    if (dt == WEFT_DT_F32)
        for (size_t i = 0; i < n / 4; i++) {
            float f = uniform();
            memcpy(m->data + 4 * i, &f, 4);
        }
    else if (dt == WEFT_DT_F16)
        for (size_t i = 0; i < n / 2; i++) put_f16(m->data + 2 * i, uniform());
    else if (dt == WEFT_DT_BF16)
        for (size_t i = 0; i < n / 2; i++) {
            uint16_t h = weft_f32_to_bf16(uniform());
            m->data[2 * i] = (uint8_t)h, m->data[2 * i + 1] = (uint8_t)(h >> 8);
        }
    else
        for (size_t off = 0; off < n; off += (size_t)info->block_bytes) fix_scales(dt, m->data + off);
    m->t =
        (weft_tensor){.name = "w", .dtype = dt, .ndim = 2, .shape = {out, K}, .data = m->data, .nbytes = n};
}

static void make_mlx(wmat *m, int bits, int gs, weft_dtype sdt, int64_t out, int64_t K) {
    memset(m, 0, sizeof *m);
    m->t = (weft_tensor){.name = "w",
                         .dtype = WEFT_DT_MLX_AFFINE,
                         .ndim = 2,
                         .shape = {out, K},
                         .bits = bits,
                         .group_size = gs,
                         .scale_dtype = sdt};
    size_t n = weft_mlx_row_bytes(&m->t) * (size_t)out, ng = (size_t)(K / gs) * (size_t)out;
    size_t ss = sdt == WEFT_DT_F32 ? 4 : 2;
    m->data = malloc(n);
    m->scales = malloc(ng * ss);
    m->biases = malloc(ng * ss);
    for (size_t i = 0; i < n; i++) m->data[i] = (uint8_t)next_u32();
    for (size_t i = 0; i < ng; i++) {
        float s = uniform() * 0.05f, b = uniform() * 0.1f;
        if (sdt == WEFT_DT_F32) {
            memcpy(m->scales + 4 * i, &s, 4);
            memcpy(m->biases + 4 * i, &b, 4);
        } else if (sdt == WEFT_DT_F16) {
            put_f16(m->scales + 2 * i, s);
            put_f16(m->biases + 2 * i, b);
        } else {
            uint16_t hs = weft_f32_to_bf16(s), hb = weft_f32_to_bf16(b);
            memcpy(m->scales + 2 * i, &hs, 2);
            memcpy(m->biases + 2 * i, &hb, 2);
        }
    }
    m->t.data = m->data;
    m->t.nbytes = n;
    m->t.scales = m->scales;
    m->t.biases = m->biases;
}

static void free_wmat(wmat *m) {
    free(m->data);
    free(m->scales);
    free(m->biases);
}

/* The canonical order, written out plainly (independent of the kernels' code). */
static float canon_dot(const float *w, const float *x, int64_t K) {
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++) acc[k % 16] = fmaf(w[k], x[k], acc[k % 16]);
    float a8[8], a4[4];
    for (int j = 0; j < 8; j++) a8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) a4[j] = a8[j] + a8[j + 4];
    return (a4[0] + a4[2]) + (a4[1] + a4[3]);
}

static const weft_mm_isa *isa_pieces(weft_cpu_isa isa) {
#if defined(__x86_64__)
    if (isa == WEFT_CPU_ISA_AVX512) return &weft_mm_avx512;
    if (isa == WEFT_CPU_ISA_AVX2) return &weft_mm_avx2;
#endif
    return &weft_mm_scalar;
}

static const weft_cpu_isa ISAS[] = {WEFT_CPU_ISA_SCALAR, WEFT_CPU_ISA_AVX2, WEFT_CPU_ISA_AVX512};

static void check_matrix(const char *what, const weft_tensor *W, weft_pool *p1, weft_pool *p2) {
    const int64_t out = weft_tensor_rows(W), K = weft_tensor_cols(W);
    float *ref_w = malloc((size_t)(out * K) * sizeof(float));
    for (int64_t o = 0; o < out; o++) CHECK(weft_tensor_dequant_row(W, o, ref_w + o * K, NULL) == WEFT_OK);
    /* 1. decoders: whole rows and MM_KC segments */
    _Alignas(64) static float seg[MM_KC];
    for (size_t ii = 0; ii < sizeof ISAS / sizeof ISAS[0]; ii++) {
        if (!weft_cpu_isa_supported(ISAS[ii])) continue;
        const weft_mm_isa *isa = isa_pieces(ISAS[ii]);
        int bad = 0;
        for (int64_t o = 0; o < out; o++)
            for (int64_t k0 = 0; k0 < K; k0 += MM_KC) {
                int64_t kc = K - k0 < MM_KC ? K - k0 : MM_KC;
                if (!isa->decode(W, o, k0, kc, seg)) weft_mm_decode_ref(W, o, k0, kc, seg);
                bad += memcmp(seg, ref_w + o * K + k0, (size_t)kc * 4) != 0;
            }
        CHECK_MSG(bad == 0, "%s: %s decoder differs from weft_tensor_dequant_row in %d segments", what,
                  isa->name, bad);
    }
    /* 2. matmul */
    const int64_t NMAX = 70, ldy = out + 3;
    float *X = malloc((size_t)(NMAX * K) * sizeof(float));
    float *want = malloc((size_t)(NMAX * ldy) * sizeof(float)),
          *got = malloc((size_t)(NMAX * ldy) * sizeof(float));
    for (int64_t i = 0; i < NMAX * K; i++) X[i] = uniform();
    for (int64_t r = 0; r < NMAX; r++)
        for (int64_t o = 0; o < out; o++) want[r * ldy + o] = canon_dot(ref_w + o * K, X + r * K, K);
    const int64_t ns[] = {1, 2, 3, 5, 7, 13, 64, 70};
    for (size_t ii = 0; ii < sizeof ISAS / sizeof ISAS[0]; ii++) {
        if (!weft_cpu_isa_supported(ISAS[ii])) continue;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int th = 1; th <= 2; th++) {
                const int64_t n = ns[ni];
                /* rows starting at an offset: a row's bits must not depend on where it sits in the call */
                const int64_t off = n < NMAX ? (n * 7) % (NMAX - n + 1) : 0;
                for (int64_t i = 0; i < NMAX * ldy; i++) got[i] = NAN;
                weft_matmul_isa(th == 1 ? p1 : p2, W, X + off * K, n, got + off * ldy, ldy, ISAS[ii]);
                int bad = 0, pad = 0;
                for (int64_t r = off; r < off + n; r++) {
                    bad += memcmp(got + r * ldy, want + r * ldy, (size_t)out * 4) != 0;
                    for (int64_t o = out; o < ldy; o++) pad += !isnan(got[r * ldy + o]);
                }
                CHECK_MSG(bad == 0 && pad == 0,
                          "%s: %s, %lld rows, %d threads: %d rows differ, %d padding writes", what,
                          weft_cpu_isa_name(ISAS[ii]), (long long)n, th, bad, pad);
            }
    }
    free(X);
    free(want);
    free(got);
    free(ref_w);
}

static void test_dtypes(weft_pool *p1, weft_pool *p2) {
    const weft_dtype blocks[] = {WEFT_DT_Q4_0, WEFT_DT_Q4_1, WEFT_DT_Q5_0, WEFT_DT_Q5_1, WEFT_DT_Q8_0,
                                 WEFT_DT_Q2_K, WEFT_DT_Q3_K, WEFT_DT_Q4_K, WEFT_DT_Q5_K, WEFT_DT_Q6_K};
    const int64_t bK[] = {256, 768, MM_KC + 512}, outs[] = {1, 6, 37};
    char what[128];
    for (size_t t = 0; t < sizeof blocks / sizeof blocks[0]; t++)
        for (size_t k = 0; k < 3; k++) {
            wmat m;
            make_plain(&m, blocks[t], outs[k], bK[k]);
            snprintf(what, sizeof what, "%s [%lld, %lld]", weft_dtype_get(blocks[t])->name,
                     (long long)outs[k], (long long)bK[k]);
            check_matrix(what, &m.t, p1, p2);
            free_wmat(&m);
        }
    const weft_dtype plain[] = {WEFT_DT_F32, WEFT_DT_F16, WEFT_DT_BF16};
    const int64_t pK[] = {1, 15, 17, 100, MM_KC + 35};
    for (size_t t = 0; t < 3; t++)
        for (size_t k = 0; k < 5; k++) {
            wmat m;
            make_plain(&m, plain[t], 9, pK[k]);
            snprintf(what, sizeof what, "%s [9, %lld]", weft_dtype_get(plain[t])->name, (long long)pK[k]);
            check_matrix(what, &m.t, p1, p2);
            free_wmat(&m);
        }
    const int bits[] = {2, 3, 4, 5, 6, 8}, gss[] = {32, 64, 128};
    const weft_dtype sdts[] = {WEFT_DT_F16, WEFT_DT_BF16, WEFT_DT_F32};
    for (size_t b = 0; b < 6; b++)
        for (size_t g = 0; g < 3; g++) {
            int64_t K = (b + g) % 2 ? MM_KC + 256 : 384;
            wmat m;
            make_mlx(&m, bits[b], gss[g], sdts[(b + g) % 3], 5, K);
            snprintf(what, sizeof what, "MLX %d-bit g%d [5, %lld]", bits[b], gss[g], (long long)K);
            check_matrix(what, &m.t, p1, p2);
            free_wmat(&m);
        }
}

static void test_dot(void) {
    float a[100], b[100];
    for (int i = 0; i < 100; i++) a[i] = uniform(), b[i] = uniform();
    for (size_t ii = 0; ii < sizeof ISAS / sizeof ISAS[0]; ii++) {
        int bad = 0;
        for (int n = 0; n <= 100; n++) {
            float want = canon_dot(a, b, n), got = weft_dot_isa(a, b, n, ISAS[ii]);
            bad += memcmp(&want, &got, 4) != 0;
        }
        CHECK_MSG(bad == 0, "weft_dot %s: %d lengths differ", weft_cpu_isa_name(ISAS[ii]), bad);
    }
    float want = canon_dot(a, b, 77), got = weft_dot(a, b, 77);
    CHECK(memcmp(&want, &got, 4) == 0);
}

int main(void) {
    fprintf(stderr, "best ISA here: %s (avx2 %s, avx512 %s)\n", weft_cpu_isa_name(weft_cpu_isa_best()),
            weft_cpu_isa_supported(WEFT_CPU_ISA_AVX2) ? "yes" : "no",
            weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512) ? "yes" : "no");
    weft_pool *p1 = weft_pool_new(1, 16), *p2 = weft_pool_new(2, 16);
    test_dot();
    test_dtypes(p1, p2);
    weft_pool_free(p1);
    weft_pool_free(p2);
    return check_report("test_cpu_kernels");
}
