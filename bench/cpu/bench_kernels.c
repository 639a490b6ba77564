/* CPU kernel harness: each kernel against a plain reference (bitwise), then timed.
 *
 *   bench_cpu_kernels [--threads N] [--reps R] [--cold MiB] [--only NAME] [--rows 1|128]
 *                     [--isa scalar|avx2|avx512]
 *
 * matmul: for each weight type, SmolLM2-135M's shapes (q/o [576, 576], gate/up [1536, 576], down [576, 1536])
 * and its lm_head [49152, 576] (Q8_0), at 1 input row (decode) and 128 rows (prefill). The reference is the
 * canonical order written plainly (decode with weft_tensor_dequant_row, 16 fma lanes, fixed tree); the check
 * is bit equality. Times are the median and the best of R repetitions (the machine is shared: medians are the
 * honest number, best shows the kernel without interference). --cold N cycles through copies of the weights
 * totalling N MiB so each call reads them from memory, not from cache (decode's real situation on big
 * models). attention: n rows × context positions, 9 heads / 3 kv heads, head_dim 64 (SmolLM2), against a
 * plain loop.
 *
 * Build: cmake --build BUILD --target bench_cpu_kernels (registered by tests/unit/cpu.cmake). */
#include "weft/cpu.h"
#include "weft/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x243F6A8885A308D3ull;
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

typedef struct opts {
    int threads, reps;
    double cold_mib;
    const char *only;
    weft_cpu_isa isa;
    int rows; /* 0: both 1 and 128 */
} opts;

/* random weights with finite scales (offsets of the fp16 fields per ggml-common.h) */
static uint8_t *random_weights(weft_tensor *t, weft_dtype dt, int64_t out, int64_t K, uint8_t **sc,
                               uint8_t **bi) {
    memset(t, 0, sizeof *t);
    *sc = *bi = NULL;
    t->name = "w";
    t->ndim = 2;
    t->shape[0] = out;
    t->shape[1] = K;
    t->dtype = dt;
    size_t n;
    if (dt == WEFT_DT_MLX_AFFINE) {
        t->bits = 4;
        t->group_size = 64;
        t->scale_dtype = WEFT_DT_BF16;
        n = weft_mlx_row_bytes(t) * (size_t)out;
        size_t ng = (size_t)(K / 64) * (size_t)out;
        *sc = malloc(2 * ng);
        *bi = malloc(2 * ng);
        for (size_t i = 0; i < ng; i++) {
            uint16_t s = weft_f32_to_bf16(uniform() * 0.05f), b = weft_f32_to_bf16(uniform() * 0.1f);
            memcpy(*sc + 2 * i, &s, 2);
            memcpy(*bi + 2 * i, &b, 2);
        }
        t->scales = *sc;
        t->biases = *bi;
    } else {
        n = weft_dtype_row_bytes(dt, K) * (size_t)out;
    }
    uint8_t *d = malloc(n);
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)next_u32();
    const weft_dtype_info *info = weft_dtype_get(dt);
    if (dt == WEFT_DT_F32)
        for (size_t i = 0; i < n / 4; i++) {
            float f = uniform();
            memcpy(d + 4 * i, &f, 4);
        }
    else if (dt == WEFT_DT_F16)
        for (size_t i = 0; i < n / 2; i++) put_f16(d + 2 * i, uniform());
    else if (dt == WEFT_DT_BF16)
        for (size_t i = 0; i < n / 2; i++) {
            uint16_t h = weft_f32_to_bf16(uniform());
            memcpy(d + 2 * i, &h, 2);
        }
    else if (dt != WEFT_DT_MLX_AFFINE)
        for (size_t off = 0; off < n; off += (size_t)info->block_bytes) {
            uint8_t *b = d + off;
            switch (dt) {
            case WEFT_DT_Q4_1:
                put_f16(b + 2, uniform() * 0.1f);
                put_f16(b, uniform() * 0.05f);
                break;
            case WEFT_DT_Q4_0:
            case WEFT_DT_Q8_0:
                put_f16(b, uniform() * 0.05f);
                break;
            case WEFT_DT_Q4_K:
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
    t->data = d;
    t->nbytes = n;
    return d;
}

static float canon_dot(const float *w, const float *x, int64_t K) {
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++) acc[k % 16] = fmaf(w[k], x[k], acc[k % 16]);
    float a8[8], a4[4];
    for (int j = 0; j < 8; j++) a8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) a4[j] = a8[j] + a8[j + 4];
    return (a4[0] + a4[2]) + (a4[1] + a4[3]);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t weight_bytes(const weft_tensor *t) {
    if (t->dtype != WEFT_DT_MLX_AFFINE) return t->nbytes;
    return t->nbytes + 2 * weft_mlx_scale_row_bytes(t) * (size_t)weft_tensor_rows(t);
}

static void bench_matmul(const opts *o, weft_pool *p, weft_dtype dt, const char *shape, int64_t out,
                         int64_t K) {
    const char *name = dt == WEFT_DT_MLX_AFFINE ? "MLX4g64" : weft_dtype_get(dt)->name;
    if (o->only && !strstr(name, o->only) && !strstr(shape, o->only)) return;
    uint8_t *sc, *bi;
    weft_tensor W;
    uint8_t *data = random_weights(&W, dt, out, K, &sc, &bi);
    /* cold: copies of the weights, used round robin */
    size_t wb = weight_bytes(&W);
    int copies = o->cold_mib > 0 ? (int)(o->cold_mib * 1048576.0 / (double)wb) + 1 : 1;
    weft_tensor *Ws = malloc((size_t)copies * sizeof *Ws);
    Ws[0] = W;
    for (int c = 1; c < copies; c++) {
        Ws[c] = W;
        uint8_t *d = malloc(W.nbytes);
        memcpy(d, W.data, W.nbytes);
        Ws[c].data = d;
    }
    const int64_t N = 128;
    float *X = malloc((size_t)(N * K) * sizeof(float)), *Y = malloc((size_t)(N * out) * sizeof(float));
    float *wrow = malloc((size_t)K * sizeof(float));
    for (int64_t i = 0; i < N * K; i++) X[i] = uniform();
    /* check: every output of rows 0 and N-1 at n = N, and row 0 at n = 1 */
    int bad = 0;
    weft_matmul_isa(p, &W, X, N, Y, out, o->isa);
    float *Y1 = malloc((size_t)out * sizeof(float));
    weft_matmul_isa(p, &W, X, 1, Y1, out, o->isa);
    for (int64_t r = 0; r < out; r++) {
        weft_tensor_dequant_row(&W, r, wrow, NULL);
        float a = canon_dot(wrow, X, K), b = canon_dot(wrow, X + (N - 1) * K, K);
        bad += memcmp(&a, &Y[r], 4) != 0;
        bad += memcmp(&b, &Y[(N - 1) * out + r], 4) != 0;
        bad += memcmp(&a, &Y1[r], 4) != 0;
    }
    for (int pass = 0; pass < 2; pass++) {
        const int64_t n = pass == 0 ? 1 : N;
        if (o->rows && o->rows != n) continue;
        double *ts = malloc((size_t)o->reps * sizeof(double));
        int inner = n == 1 ? 8 : 1;
        for (int rep = 0; rep < o->reps; rep++) {
            double t0 = weft_now();
            for (int i = 0; i < inner; i++)
                weft_matmul_isa(p, &Ws[(rep * inner + i) % copies], X, n, Y, out, o->isa);
            ts[rep] = (weft_now() - t0) / inner;
        }
        qsort(ts, (size_t)o->reps, sizeof *ts, cmp_d);
        double med = ts[o->reps / 2], best = ts[0];
        double flops = 2.0 * (double)out * (double)K * (double)n;
        printf("| matmul %-7s | %-13s | %3lld | %9.1f | %9.1f | %7.1f | %6.2f | %s |\n", name, shape,
               (long long)n, med * 1e6, best * 1e6, flops / med * 1e-9, (double)wb / med * 1e-9,
               bad ? "MISMATCH" : "exact");
        free(ts);
    }
    for (int c = 1; c < copies; c++) free((void *)Ws[c].data);
    free(Ws);
    free(data);
    free(sc);
    free(bi);
    free(X);
    free(Y);
    free(Y1);
    free(wrow);
}

static void bench_attention(const opts *o, weft_pool *p, int n_rows, int ctx) {
    if (o->only && !strstr("attention", o->only)) return;
    const int Hq = 9, Hkv = 3, d = 64, kvd = Hkv * d, qd = Hq * d;
    float *q = malloc((size_t)n_rows * qd * sizeof(float)),
          *out = malloc((size_t)n_rows * qd * sizeof(float));
    float *K = malloc((size_t)ctx * kvd * sizeof(float)), *V = malloc((size_t)ctx * kvd * sizeof(float));
    float *sc = malloc((size_t)ctx * sizeof(float));
    for (int i = 0; i < n_rows * qd; i++) q[i] = uniform();
    for (int i = 0; i < ctx * kvd; i++) K[i] = uniform(), V[i] = uniform();
    const float **kr = malloc((size_t)n_rows * sizeof *kr), **vr = malloc((size_t)n_rows * sizeof *vr);
    int *pos = malloc((size_t)n_rows * sizeof(int));
    for (int r = 0; r < n_rows; r++) kr[r] = K, vr[r] = V, pos[r] = ctx - n_rows + r;
    weft_attn_args a = {n_rows, Hq, Hkv, d, 0.125f, q, qd, out, qd, kr, vr, kvd, pos};
    weft_attention_isa(p, &a, o->isa);
    /* the last row alone must give the same bits as inside the call */
    float *solo = malloc((size_t)qd * sizeof(float));
    weft_attn_args a1 = a;
    a1.n_rows = 1;
    a1.q = q + (int64_t)(n_rows - 1) * qd;
    a1.out = solo;
    a1.pos = pos + n_rows - 1;
    weft_attention_isa(p, &a1, o->isa);
    int bad = memcmp(solo, out + (int64_t)(n_rows - 1) * qd, (size_t)qd * 4) != 0;
    /* plain softmax attention for the last row: agreement to rounding (the kernel's order is blocked) */
    double worst = 0;
    for (int h = 0; h < Hq; h++) {
        const float *qh = q + (int64_t)(n_rows - 1) * qd + h * d;
        int j = h / (Hq / Hkv), n = pos[n_rows - 1] + 1;
        double mx = -1e30, sum = 0;
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += (double)qh[i] * K[(int64_t)t * kvd + j * d + i];
            sc[t] = (float)(s * 0.125);
            if (sc[t] > mx) mx = sc[t];
        }
        for (int t = 0; t < n; t++) sum += exp(sc[t] - mx);
        for (int i = 0; i < d; i++) {
            double acc = 0;
            for (int t = 0; t < n; t++) acc += exp(sc[t] - mx) / sum * V[(int64_t)t * kvd + j * d + i];
            double e = fabs(acc - out[(int64_t)(n_rows - 1) * qd + h * d + i]);
            if (e > worst) worst = e;
        }
    }
    double *ts = malloc((size_t)o->reps * sizeof(double));
    for (int rep = 0; rep < o->reps; rep++) {
        double t0 = weft_now();
        weft_attention_isa(p, &a, o->isa);
        ts[rep] = weft_now() - t0;
    }
    qsort(ts, (size_t)o->reps, sizeof *ts, cmp_d);
    double keys = 0;
    for (int r = 0; r < n_rows; r++) keys += pos[r] + 1;
    double flops = keys * Hq * d * 4.0;
    char shape[32];
    snprintf(shape, sizeof shape, "ctx %d", ctx);
    printf("| attention       | %-13s | %3d | %9.1f | %9.1f | %7.1f | %6s | %s (max |err| %.1e) |\n", shape,
           n_rows, ts[o->reps / 2] * 1e6, ts[0] * 1e6, flops / ts[o->reps / 2] * 1e-9, "-",
           bad ? "ROW-DEPENDENT" : "exact", worst);
    free(ts);
    free(q);
    free(out);
    free(K);
    free(V);
    free(sc);
    free(kr);
    free(vr);
    free(pos);
    free(solo);
}

int main(int argc, char **argv) {
    opts o = {1, 15, 0, NULL, WEFT_CPU_ISA_AUTO, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cold") && i + 1 < argc)
            o.cold_mib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            o.rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            o.only = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            o.isa = !strcmp(s, "scalar") ? WEFT_CPU_ISA_SCALAR
                    : !strcmp(s, "avx2") ? WEFT_CPU_ISA_AVX2
                                         : WEFT_CPU_ISA_AVX512;
        } else {
            fprintf(
                stderr,
                "usage: %s [--threads N] [--reps R] [--cold MiB] [--only NAME] [--rows 1|128] [--isa I]\n",
                argv[0]);
            return 2;
        }
    }
    if (o.reps < 1) o.reps = 1;
    weft_pool *p = weft_pool_new(o.threads, 8192); /* attention scratch: a context's scores */
    weft_cpu_isa isa = o.isa == WEFT_CPU_ISA_AUTO ? weft_cpu_isa_best() : o.isa;
    printf("threads %d, isa %s, reps %d, cold %.0f MiB\n\n", o.threads, weft_cpu_isa_name(isa), o.reps,
           o.cold_mib);
    printf("| kernel | shape [out, in] | rows | median µs | best µs | GFLOP/s (median) | weight GB/s | check "
           "|\n");
    printf("|---|---|---:|---:|---:|---:|---:|---|\n");
    const weft_dtype types[] = {WEFT_DT_Q4_1, WEFT_DT_Q4_0, WEFT_DT_Q8_0, WEFT_DT_Q4_K,      WEFT_DT_Q6_K,
                                WEFT_DT_F16,  WEFT_DT_BF16, WEFT_DT_F32,  WEFT_DT_MLX_AFFINE};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        /* k-quants need rows of whole 256-blocks: 512 stands in for 576 */
        const int64_t H = types[t] == WEFT_DT_Q4_K || types[t] == WEFT_DT_Q6_K ? 512 : 576;
        char s1[32], s2[32], s3[32];
        snprintf(s1, sizeof s1, "%lldx%lld", (long long)H, (long long)H);
        snprintf(s2, sizeof s2, "1536x%lld", (long long)H);
        snprintf(s3, sizeof s3, "%lldx1536", (long long)H);
        bench_matmul(&o, p, types[t], s1, H, H);
        bench_matmul(&o, p, types[t], s2, 1536, H);
        bench_matmul(&o, p, types[t], s3, H, 1536);
    }
    bench_matmul(&o, p, WEFT_DT_Q8_0, "head49152x576", 49152, 576);
    bench_attention(&o, p, 1, 192);
    bench_attention(&o, p, 1, 4096);
    bench_attention(&o, p, 128, 128);
    bench_attention(&o, p, 128, 2048);
    weft_pool_free(p);
    return 0;
}
