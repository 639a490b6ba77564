/* weft_attention and weft_swiglu (SPEC §4.3.1): close to plain softmax attention in double precision, and
 * bit-identical for a row whether it runs alone or among other rows of other streams, with 1 or 2 threads
 * (which changes the task split: per row and kv head, per query head, or super-blocks of a long context
 * merged afterwards), and on every ISA. Head sizes with and without a 16-lane tail, GQA groups of 1, 3 and 8,
 * contexts past one super-block. */
#include "check.h"
#include "weft/cpu.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x853C49E6748FEA9Bull;
static float uniform(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f * 2.0f - 1.0f;
}

typedef struct shape {
    int hq, hkv, d;
} shape;

static void reference(const float *q, const float *K, const float *V, int kvd, int d, int j, int pos,
                      float scale, double *out) {
    double mx = -1e300, sum = 0;
    double *s = malloc((size_t)(pos + 1) * sizeof(double));
    for (int t = 0; t <= pos; t++) {
        double acc = 0;
        for (int i = 0; i < d; i++) acc += (double)q[i] * K[(int64_t)t * kvd + j * d + i];
        s[t] = acc * scale;
        if (s[t] > mx) mx = s[t];
    }
    for (int t = 0; t <= pos; t++) sum += exp(s[t] - mx);
    for (int i = 0; i < d; i++) {
        double acc = 0;
        for (int t = 0; t <= pos; t++) acc += exp(s[t] - mx) / sum * V[(int64_t)t * kvd + j * d + i];
        out[i] = acc;
    }
    free(s);
}

static void run_shape(shape sh, weft_pool *p1, weft_pool *p2) {
    const int cap = 2600, kvd = sh.hkv * sh.d, qd = sh.hq * sh.d, G = sh.hq / sh.hkv;
    const int pos[] = {0, 1, 15, 16, 63, 64, 65, 200, 1023, 1024, 1025, 2599};
    const int R = (int)(sizeof pos / sizeof pos[0]);
    float *K[2], *V[2];
    for (int s = 0; s < 2; s++) {
        K[s] = malloc((size_t)cap * kvd * sizeof(float));
        V[s] = malloc((size_t)cap * kvd * sizeof(float));
        for (int64_t i = 0; i < (int64_t)cap * kvd; i++) K[s][i] = uniform() * 2.0f, V[s][i] = uniform();
    }
    float *q = malloc((size_t)R * qd * sizeof(float)), *all = malloc((size_t)R * qd * sizeof(float));
    float *one = malloc((size_t)qd * sizeof(float));
    for (int i = 0; i < R * qd; i++) q[i] = uniform();
    const float *kr[16], *vr[16];
    for (int r = 0; r < R; r++) kr[r] = K[r % 2], vr[r] = V[r % 2];
    const float scale = 1.0f / sqrtf((float)sh.d);
    weft_attn_args a = {R, sh.hq, sh.hkv, sh.d, scale, q, qd, all, qd, kr, vr, kvd, pos};
    weft_attention_isa(p2, &a, WEFT_CPU_ISA_SCALAR);
    /* accuracy */
    double *ref = malloc((size_t)sh.d * sizeof(double)), worst = 0;
    for (int r = 0; r < R; r++)
        for (int h = 0; h < sh.hq; h++) {
            reference(q + r * qd + h * sh.d, K[r % 2], V[r % 2], kvd, sh.d, h / G, pos[r], scale, ref);
            for (int i = 0; i < sh.d; i++) {
                double e = fabs(ref[i] - all[r * qd + h * sh.d + i]);
                if (e > worst) worst = e;
            }
        }
    CHECK_MSG(worst < 2e-5, "attention hq %d hkv %d d %d: max |error| %.3g vs double softmax", sh.hq, sh.hkv,
              sh.d, worst);
    /* bit identity: alone vs together, 1 vs 2 threads, each ISA */
    const weft_cpu_isa isas[] = {WEFT_CPU_ISA_SCALAR, WEFT_CPU_ISA_AVX2, WEFT_CPU_ISA_AVX512};
    for (int ii = 0; ii < 3; ii++) {
        if (!weft_cpu_isa_supported(isas[ii])) continue;
        int bad = 0;
        for (int th = 1; th <= 2; th++) {
            float *got = malloc((size_t)R * qd * sizeof(float));
            weft_attn_args b = a;
            b.out = got;
            weft_attention_isa(th == 1 ? p1 : p2, &b, isas[ii]);
            bad += memcmp(got, all, (size_t)R * qd * sizeof(float)) != 0;
            for (int r = 0; r < R; r++) {
                weft_attn_args c = a;
                c.n_rows = 1;
                c.q = q + r * qd;
                c.out = one;
                c.k = &kr[r];
                c.v = &vr[r];
                c.pos = &pos[r];
                weft_attention_isa(th == 1 ? p1 : p2, &c, isas[ii]);
                bad += memcmp(one, all + r * qd, (size_t)qd * sizeof(float)) != 0;
            }
            free(got);
        }
        CHECK_MSG(bad == 0, "attention hq %d hkv %d d %d, %s: %d results differ from the scalar batch", sh.hq,
                  sh.hkv, sh.d, weft_cpu_isa_name(isas[ii]), bad);
    }
    fprintf(stderr,
            "  attention hq %2d hkv %d d %3d: max |error| %.2e, bit-identical across splits and ISAs\n",
            sh.hq, sh.hkv, sh.d, worst);
    for (int s = 0; s < 2; s++) free(K[s]), free(V[s]);
    free(q);
    free(all);
    free(one);
    free(ref);
}

/* weft_swiglu: close to x·σ(x)·u in double, the same bits on every ISA and for any split of the array */
static void test_swiglu(weft_pool *p1, weft_pool *p2) {
    const int64_t n = 10007;
    float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float));
    float *want = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) g[i] = uniform() * (i % 7 == 0 ? 120.0f : 12.0f), u[i] = uniform();
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 88.5f, g[3] = -100.0f;
    memcpy(want, g, (size_t)n * sizeof(float));
    weft_swiglu_isa(p1, want, u, n, WEFT_CPU_ISA_SCALAR);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = g[i], r = x / (1.0 + exp(-x)) * u[i], e = fabs(r - want[i]) / fmax(1e-30, fabs(r) + 1e-6);
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst < 1e-5, "swiglu: worst relative error %.3g", worst);
    const weft_cpu_isa isas[] = {WEFT_CPU_ISA_SCALAR, WEFT_CPU_ISA_AVX2, WEFT_CPU_ISA_AVX512};
    for (int ii = 0; ii < 3; ii++)
        for (int th = 1; th <= 2; th++) {
            memcpy(got, g, (size_t)n * sizeof(float));
            weft_swiglu_isa(th == 1 ? p1 : p2, got, u, n, isas[ii]);
            CHECK_MSG(!memcmp(got, want, (size_t)n * sizeof(float)), "swiglu %s, %d threads differs",
                      weft_cpu_isa_name(isas[ii]), th);
            memcpy(got + 5, g + 5, 3 * sizeof(float)); /* a 3-element call gives the same bits as inside */
            weft_swiglu_isa(p2, got + 5, u + 5, 3, isas[ii]);
            CHECK(!memcmp(got + 5, want + 5, 3 * sizeof(float)));
        }
    free(g);
    free(u);
    free(want);
    free(got);
}

int main(void) {
    weft_pool *p1 = weft_pool_new(1, 0), *p2 = weft_pool_new(2, 0);
    test_swiglu(p1, p2);
    const shape shapes[] = {{9, 3, 64}, {4, 4, 80}, {8, 1, 128}, {6, 2, 24}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(shapes[i], p1, p2);
    weft_pool_free(p1);
    weft_pool_free(p2);
    return check_report("test_cpu_attention");
}
