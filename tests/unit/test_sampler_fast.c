/* weft_sample (prefix selection, radix select/sort, early exits) against the literal full-sort port of the
 * reference (test_sampler_naive.c) over many random rows and settings, vocabularies 1 .. 151,936, including
 * ties, signed zeros, infinities, NaN, huge and tiny ranges; then the timing of a 151,936-entry draw
 * (printed, never a failure: sanitizer builds are slow). */
#include "weft/sampler.h"

#include "core/sampler_order.h"

#include "check.h"

#include <pthread.h>
#include <stdlib.h>

int32_t test_naive_draw(const float *logits, int64_t vocab, const weft_sampling *p, const int32_t *prompt,
                        size_t n_prompt, const int32_t *gen, size_t n_gen, int64_t pos);

typedef struct {
    uint64_t s;
} rng;
static uint64_t next(rng *r) {
    return weft_mix(r->s += 0x9E3779B97F4A7C15ULL);
}
static double unit(rng *r) {
    return ((double)(next(r) >> 11) + 0.5) * 0x1p-53;
}
static double gauss(rng *r) {
    return sqrt(-2.0 * log(unit(r))) * cos(6.283185307179586 * unit(r));
}
static int pick(rng *r, int n) {
    return (int)(next(r) % (uint64_t)n);
}

enum { KINDS = 9 };
static const char *kind_name[KINDS] = {"gauss", "ties",   "peaked", "flat", "-inf/nan",
                                       "+inf",  "narrow", "huge",   "llm"};

static void fill_row(float *z, int64_t V, int kind, rng *r) {
    for (int64_t i = 0; i < V; i++) {
        double g = gauss(r);
        float v;
        switch (kind) {
        case 0:
            v = (float)(3.0 * g);
            break;
        case 1:
            v = (float)(nearbyint(2.0 * g) / 2.0);
            if (v == 0.0f && (next(r) & 1)) v = -0.0f;
            break;
        case 2:
            v = (float)(2.0 * g);
            break;
        case 3:
            v = 0.25f;
            break;
        case 4:
            v = (next(r) % 10 < 3) ? -INFINITY : (next(r) % 50 == 0 ? NAN : (float)(3.0 * g));
            break;
        case 5:
            v = (float)(3.0 * g);
            break;
        case 6:
            v = (float)(1.0 + 1e-3 * g);
            break;
        case 7:
            v = (float)(1e30 * g);
            break;
        default:
            v = (float)(2.5 * g - 4.0);
            break;
        }
        z[i] = v;
    }
    if (kind == 2 || kind == 8) /* a few strong candidates well above the bulk */
        for (int j = 0; j < 4 && j < V; j++) z[pick(r, (int)V)] = (float)(12.0 + 6.0 * unit(r));
    if (kind == 5)
        for (int j = 0; j < 2; j++) z[pick(r, (int)V)] = INFINITY;
}

static void random_settings(weft_sampling *p, int64_t V, rng *r, weft_logit_bias *bias) {
    static const double Ts[] = {0, 1e-9, 0.05, 0.3, 0.8, 1.0, 1.0, 1.7, 50, 1e6};
    static const double tps[] = {1, 1, 1, 0.999, 0.95, 0.9, 0.5, 0.1, 1e-9};
    static const double mps[] = {0, 0, 0, 0.01, 0.05, 0.5, 1.0};
    const int64_t tks[] = {0, 0, 0, 1, 2, 5, 40, 1000, V - 1, V, V + 3};
    weft_sampling_defaults(p);
    p->temperature = Ts[pick(r, 10)];
    p->top_p = tps[pick(r, 9)];
    p->min_p = mps[pick(r, 7)];
    int64_t k = tks[pick(r, 11)];
    p->top_k = k < 0 ? 0 : (int)k;
    p->seed = next(r);
    if (pick(r, 3) == 0) {
        p->presence_penalty = 2.0 * unit(r) - 0.5;
        p->frequency_penalty = unit(r);
        p->repetition_penalty = pick(r, 2) ? 1.0 + unit(r) : 0.7;
    }
    if (pick(r, 3) == 0) {
        int n = 1 + pick(r, 4);
        for (int i = 0; i < n; i++) bias[i] = (weft_logit_bias){pick(r, (int)V), 10.0 * gauss(r)};
        p->logit_bias = bias;
        p->n_logit_bias = n;
        weft_err err;
        if (weft_sampling_validate(p, V, &err) != WEFT_OK) p->n_logit_bias = 0; /* a duplicate id: drop */
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}
static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The ordering helpers against qsort: order keys follow float order (-0 == +0), the u64 and u32 radix sorts
 * and the radix selection agree with a comparison sort, sizes around the insertion-sort switch included. */
static void order_helpers(void) {
    static const float vals[] = {-INFINITY, -3e38f, -2.5f,  -1.0f, -1e-30f, -1e-45f, -0.0f,
                                 0.0f,      1e-45f, 1e-30f, 1.0f,  2.5f,    3e38f,   INFINITY};
    int ok = 1;
    for (size_t i = 0; i + 1 < sizeof vals / sizeof vals[0]; i++) {
        uint32_t a = weft_order_key(vals[i]), b = weft_order_key(vals[i + 1]);
        ok &= vals[i] == vals[i + 1] ? a == b : a > b; /* larger z, smaller key */
        ok &= weft_order_value(a) == vals[i];
    }
    CHECK(ok);
    rng r = {3};
    static const size_t sizes[] = {1, 2, 63, 64, 65, 1000, 70000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        uint64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *t = malloc(n * sizeof *t);
        uint32_t *k = malloc(n * sizeof *k), *k2 = malloc(n * sizeof *k2), *kt = malloc(n * sizeof *kt);
        for (size_t i = 0; i < n; i++) {
            float z = (float)(nearbyint(gauss(&r) * 8.0) / 4.0); /* many equal keys */
            a[i] = weft_order_cand(z, (int32_t)i);               /* ids ascending, as the sort requires */
            k[i] = (uint32_t)(next(&r) >> (si % 2 ? 40 : 32));   /* narrow and full ranges */
        }
        memcpy(b, a, n * sizeof *a);
        memcpy(k2, k, n * sizeof *k);
        qsort(b, n, sizeof *b, cmp_u64);
        qsort(k2, n, sizeof *k2, cmp_u32);
        for (size_t q = 1; q <= n; q = q * 3 + 1) CHECK(weft_order_kth(a, n, q, t) == b[q - 1]);
        CHECK(weft_order_kth(a, n, n, t) == b[n - 1]);
        weft_order_sort(a, t, n);
        weft_order_sort_u32(k, kt, n);
        CHECK(memcmp(a, b, n * sizeof *a) == 0);
        CHECK(memcmp(k, k2, n * sizeof *k) == 0);
        free(a);
        free(b);
        free(t);
        free(k);
        free(k2);
        free(kt);
    }
}

static void cross_check(void) {
    static const int64_t vocabs[] = {1, 2, 3, 7, 64, 300, 4096, 151936};
    /* WEFT_SAMPLER_CROSS_SCALE=N runs N times as many draws (longer soak runs at dev time). */
    const char *scale_env = getenv("WEFT_SAMPLER_CROSS_SCALE");
    int scale = scale_env ? atoi(scale_env) : 1;
    if (scale < 1) scale = 1;
    rng r = {scale_env ? (uint64_t)scale * 7919u : 20260101u};
    int cases = 0, mismatches = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int64_t V = vocabs[vi];
        int rounds = scale * (V >= 100000 ? 60 : V >= 4096 ? 300 : 600);
        float *z = malloc((size_t)V * sizeof *z);
        int32_t *seq = malloc(600 * sizeof *seq);
        weft_sampler *s = weft_sampler_new(V);
        CHECK(s != NULL);
        for (int c = 0; c < rounds && s; c++) {
            int kind = c % KINDS;
            fill_row(z, V, kind, &r);
            weft_sampling p;
            weft_logit_bias bias[4];
            random_settings(&p, V, &r, bias);
            int64_t pos = pick(&r, 600), n_prompt = pos ? pick(&r, (int)pos + 1) : 0;
            for (int64_t i = 0; i < pos; i++) seq[i] = pick(&r, V < 40 ? (int)V : 40); /* repeats */
            int32_t got = weft_sample(s, z, &p, seq, pos, n_prompt, NULL);
            int32_t want = test_naive_draw(z, V, &p, seq, (size_t)n_prompt, seq + n_prompt,
                                           (size_t)(pos - n_prompt), pos);
            cases++;
            if (got != want) {
                mismatches++;
                CHECK_MSG(got == want, "V %lld kind %s T %g top_k %d top_p %g min_p %g: got %d, want %d",
                          (long long)V, kind_name[kind], p.temperature, p.top_k, p.top_p, p.min_p, got, want);
            }
        }
        weft_sampler_free(s);
        free(z);
        free(seq);
    }
    fprintf(stderr, "cross-check: %d random draws, %d mismatches against the full-sort definition\n", cases,
            mismatches);
}

/* Rows engineered around the cut-offs: a bulk of candidates exactly 41 below the best in l (where the sampler
 * stops looking) and dense ties near the top_p boundary. */
static void edge_rows(void) {
    enum { V = 20000 };
    float *z = malloc(V * sizeof *z);
    weft_sampler *s = weft_sampler_new(V);
    rng r = {7};
    int checked = 0;
    for (int c = 0; c < 40; c++) {
        double T = c % 2 ? 1.0 : 0.5;
        for (int i = 0; i < V; i++) z[i] = (float)(-41.0 * T + (double)pick(&r, 5) * 1e-5 - 2e-5);
        z[pick(&r, V)] = 0.0f;
        z[pick(&r, V)] = -1.0f;
        weft_sampling p;
        weft_sampling_defaults(&p);
        p.temperature = T;
        p.top_p = c % 4 < 2 ? 1.0 : 1.0 - 1e-12;
        p.seed = (uint64_t)c;
        for (int64_t pos = 0; pos < 5; pos++) {
            int32_t got = weft_sample(s, z, &p, NULL, pos, pos, NULL);
            int32_t want = test_naive_draw(z, V, &p, NULL, 0, NULL, 0, pos);
            CHECK_MSG(got == want, "edge row %d pos %lld: %d != %d", c, (long long)pos, got, want);
            checked++;
        }
    }
    /* Many equal logits right at the top_p boundary (flat row): keep = ceil(top_p * V) exactly. */
    for (int i = 0; i < V; i++) z[i] = 1.5f;
    weft_sampling p;
    weft_sampling_defaults(&p);
    for (int c = 0; c < 10; c++) {
        p.top_p = 0.1 * (c + 1) - 0.05;
        p.seed = (uint64_t)c;
        int32_t got = weft_sample(s, z, &p, NULL, 3, 3, NULL);
        CHECK_EQ_INT(got, test_naive_draw(z, V, &p, NULL, 0, NULL, 0, 3));
        checked++;
    }
    weft_sampler_free(s);
    free(z);
    fprintf(stderr, "edge rows: %d draws checked\n", checked);
}

static void timing(void) {
    enum { V = 151936, REPS = 40 };
    float *z = malloc(V * sizeof *z);
    rng r = {5};
    fill_row(z, V, 8, &r);
    const char *src = "synthetic LLM-like row";
    const char *shared = check_shared_dir();
    char path[512];
    if (shared) {
        snprintf(path, sizeof path, "%sfixtures/qwen3-chat/logits_last_prompt_row.f32", shared);
        FILE *f = fopen(path, "rb");
        if (f) {
            if (fread(z, sizeof *z, V, f) == V)
                src = "qwen3-chat fixture row";
            else
                fill_row(z, V, 8, &r);
            fclose(f);
        }
    }
    weft_sampler *s = weft_sampler_new(V);
    static const struct {
        const char *name;
        double T, top_p, min_p;
        int top_k, logprobs;
    } cfg[] = {
        {"T=0.8 top_p=0.9", 0.8, 0.9, 0, 0, -1}, {"T=1 (no filters)", 1.0, 1.0, 0, 0, -1},
        {"T=0.7 top_k=40", 0.7, 1.0, 0, 40, -1}, {"T=0.8 min_p=0.05", 0.8, 1.0, 0.05, 0, -1},
        {"greedy", 0.0, 1.0, 0, 0, -1},          {"T=0.8 top_p=0.9 +logprobs 5", 0.8, 0.9, 0, 0, 5},
    };
    int32_t seq[1];
    weft_logprobs lp;
    fprintf(stderr, "timing over %s, vocab %d (%s build):\n", src, V,
#if defined(__SANITIZE_ADDRESS__)
            "sanitizer"
#else
            "plain"
#endif
    );
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        weft_sampling p;
        weft_sampling_defaults(&p);
        p.temperature = cfg[c].T;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        p.logprobs = cfg[c].logprobs;
        p.seed = 1234;
        double worst = 0, sum = 0;
        int ok = 1;
        for (int i = 0; i < REPS; i++) {
            double t0 = weft_now();
            int32_t t = weft_sample(s, z, &p, seq, 100 + i, 100 + i, cfg[c].logprobs >= 0 ? &lp : NULL);
            double dt = weft_now() - t0;
            ok &= t >= 0;
            sum += dt;
            if (dt > worst) worst = dt;
        }
        CHECK(ok);
        fprintf(stderr, "  %-28s mean %.3f ms, max %.3f ms%s\n", cfg[c].name, 1e3 * sum / REPS, 1e3 * worst,
                c == 0 ? (sum / REPS < 5e-3 ? "  (target < 5 ms: met)" : "  (target < 5 ms: NOT met)") : "");
    }
    weft_sampler_free(s);
    free(z);
}

/* Runners for weft_sampler_set_parallel: tasks in reverse order on this thread, and one thread per task. */
static void run_reverse(void *ctx, int64_t n, weft_sampler_task_fn task, void *tctx) {
    (void)ctx;
    for (int64_t i = n; i-- > 0;) task(tctx, i);
}
typedef struct {
    weft_sampler_task_fn task;
    void *tctx;
    int64_t i;
} thread_job;
static void *thread_main(void *arg) {
    thread_job *j = arg;
    j->task(j->tctx, j->i);
    return NULL;
}
static void run_threads(void *ctx, int64_t n, weft_sampler_task_fn task, void *tctx) {
    (void)ctx;
    pthread_t th[WEFT_SAMPLER_MAX_TASKS];
    thread_job jobs[WEFT_SAMPLER_MAX_TASKS];
    int started[WEFT_SAMPLER_MAX_TASKS] = {0};
    for (int64_t i = 0; i < n; i++) {
        jobs[i] = (thread_job){task, tctx, i};
        started[i] = pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0;
        if (!started[i]) task(tctx, i); /* no thread: run it here, still exactly once */
    }
    for (int64_t i = 0; i < n; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

/* The parallel draw (weft_sampler_set_parallel) == the serial draw == the full-sort definition, on rows large
 * enough to split (>= WEFT_SAMPLER_PAR_MIN candidates after the cut), every kind and random settings. */
static void parallel_draws(void) {
    static const int64_t vocabs[] = {20000, 151936};
    rng r = {777};
    int cases = 0, mismatches = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int64_t V = vocabs[vi];
        float *z = malloc((size_t)V * sizeof *z);
        int32_t seq[64];
        weft_sampler *serial = weft_sampler_new(V), *rev = weft_sampler_new(V), *thr = weft_sampler_new(V);
        CHECK(serial && rev && thr);
        if (!serial || !rev || !thr) break;
        CHECK(weft_sampler_set_parallel(rev, run_reverse, NULL, 7) == WEFT_OK);
        CHECK(weft_sampler_set_parallel(thr, run_threads, NULL, 4) == WEFT_OK);
        CHECK(weft_sampler_set_parallel(thr, run_threads, NULL, WEFT_SAMPLER_MAX_TASKS + 1) == WEFT_EINVAL);
        for (int c = 0; c < (V > 100000 ? 36 : 90); c++) {
            int kind = c % KINDS;
            fill_row(z, V, kind, &r);
            weft_sampling p;
            weft_logit_bias bias[4];
            random_settings(&p, V, &r, bias);
            if (c % 3 == 0) p.temperature = 0.7 + unit(&r); /* mostly sampled rows: the parallel path */
            int64_t pos = 10 + pick(&r, 50);
            for (int64_t i = 0; i < pos; i++) seq[i] = pick(&r, 40);
            int32_t a = weft_sample(serial, z, &p, seq, pos, 5, NULL);
            int32_t b = weft_sample(rev, z, &p, seq, pos, 5, NULL);
            int32_t t = weft_sample(thr, z, &p, seq, pos, 5, NULL);
            int32_t want =
                c % 4 == 0 ? test_naive_draw(z, V, &p, seq, 5, seq + 5, (size_t)(pos - 5), pos) : a;
            cases++;
            if (a != want || b != a || t != a) {
                mismatches++;
                CHECK_MSG(0,
                          "parallel draw V %lld kind %s T %g top_k %d top_p %g min_p %g: serial %d, "
                          "reverse %d, threads %d, definition %d",
                          (long long)V, kind_name[kind], p.temperature, p.top_k, p.top_p, p.min_p, a, b, t,
                          want);
            }
        }
        weft_sampler_free(serial);
        weft_sampler_free(rev);
        weft_sampler_free(thr);
        free(z);
    }
    fprintf(stderr, "parallel draws: %d rows, %d mismatches (serial, reverse-order parts, threads)\n", cases,
            mismatches);
}

int main(void) {
    order_helpers();
    parallel_draws();
    cross_check();
    edge_rows();
    timing();
    return check_report("test_sampler_fast");
}
