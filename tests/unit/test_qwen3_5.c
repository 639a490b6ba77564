/* qwen3_5 / qwen3_5_moe forward against the fixtures' HF goldens (bf16 and MLX q4g64), and the exactness
 * invariants of SPEC §4.3.1–2: chunk-cut invariance of logits and of the whole live state (conv, recurrent
 * and KV), rows of two streams interleaved in one call == each alone, 1 thread == 2 threads. */
#include "check.h"
#include "test_qwen3_5_util.h"

#include <stdlib.h>

#define CAP 64

typedef struct env {
    q35_fixture f;
    weft_family_model fm;
    weft_pool *pool1, *pool2;
    size_t sb;
    int64_t V;
} env;

static void *new_state(env *e) {
    void *s = aligned_alloc(64, (e->sb + 63) & ~(size_t)63);
    e->fm.ops->state_init(e->fm.self, s, CAP);
    return s;
}

/* Feeds ids[0, T) to a fresh state in chunks of `chunk` rows; logits into out [T, V]; returns the state. */
static void *feed_chunks(env *e, weft_pool *pool, const int32_t *ids, int T, int chunk, float *out) {
    void *states[1] = {new_state(e)};
    weft_err err = {0};
    for (int a = 0; a < T; a += chunk) {
        int b = a + chunk < T ? a + chunk : T;
        weft_status st = q35f_run(&e->fm, pool, states, 0, ids, a, b, out + (int64_t)a * e->V, &err);
        CHECK_MSG(st == WEFT_OK, "%s chunk %d: %s", e->f.name, chunk, err.msg);
    }
    return states[0];
}

static bool same_live(env *e, const void *a, const void *b, int len) {
    size_t na, nb;
    void *la = q35f_live(&e->fm, a, len, &na), *lb = q35f_live(&e->fm, b, len, &nb);
    bool same = la && lb && na == nb && !memcmp(la, lb, na);
    free(la);
    free(lb);
    return same;
}

static void check_golden(env *e, const float *whole) {
    const q35_fixture *f = &e->f;
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < (int64_t)f->T * e->V; i++) {
        double ref = f->ref[i], d = fabs((double)whole[i] - ref), rel = d / fmax(1.0, fabs(ref));
        if (!(rel <= 1e-3)) bad++;
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(bad == 0, "%s: %d logits outside 1e-3·max(1,|ref|) (worst %.3g)", f->name, bad, worst);
    fprintf(stderr, "  %-24s max |Δ|/max(1,|ref|) = %.2e\n", f->name, worst);
    for (int i = 0; i < f->n_greedy; i++) { /* row n_prompt-1+i predicts greedy token i */
        const float *row = whole + (int64_t)(f->n_prompt - 1 + i) * e->V;
        int best = 0;
        for (int64_t v = 1; v < e->V; v++)
            if (row[v] > row[best]) best = (int)v;
        CHECK_MSG(best == f->ids[f->n_prompt + i], "%s: greedy step %d: %d != %d", f->name, i, best,
                  f->ids[f->n_prompt + i]);
    }
}

/* Two streams in one call with their rows alternating (A0 B0 A1 B1 ...), 7 positions per call. */
static void check_interleaved(env *e, const float *whole_a, const void *state_a) {
    const int T = e->f.T;
    int32_t ids_b[64];
    for (int r = 0; r < T; r++) ids_b[r] = e->f.ids[(r + 5) % T];
    size_t n = (size_t)T * (size_t)e->V;
    float *whole_b = malloc(n * sizeof(float)), *la = malloc(n * sizeof(float)),
          *lb = malloc(n * sizeof(float));
    float *buf = malloc(14 * (size_t)e->V * sizeof(float));
    void *alone_b = feed_chunks(e, e->pool2, ids_b, T, T, whole_b);
    void *states[2] = {new_state(e), new_state(e)};
    weft_err err = {0};
    for (int a = 0; a < T; a += 7) {
        int b = a + 7 < T ? a + 7 : T, k = 0;
        weft_row rows[14];
        int outr[14];
        for (int r = a; r < b; r++) {
            rows[k++] = (weft_row){0, r, e->f.ids[r]};
            rows[k++] = (weft_row){1, r, ids_b[r]};
        }
        for (int i = 0; i < k; i++) outr[i] = i;
        weft_status st = e->fm.ops->forward(e->fm.self, e->pool2, states, rows, k, outr, k, buf, &err);
        CHECK_MSG(st == WEFT_OK, "%s interleaved: %s", e->f.name, err.msg);
        for (int r = a; r < b; r++) {
            memcpy(la + (int64_t)r * e->V, buf + (int64_t)(2 * (r - a)) * e->V, (size_t)e->V * sizeof(float));
            memcpy(lb + (int64_t)r * e->V, buf + (int64_t)(2 * (r - a) + 1) * e->V,
                   (size_t)e->V * sizeof(float));
        }
    }
    CHECK_MSG(!memcmp(la, whole_a, n * sizeof(float)), "%s: interleaved stream A logits differ from alone",
              e->f.name);
    CHECK_MSG(!memcmp(lb, whole_b, n * sizeof(float)), "%s: interleaved stream B logits differ from alone",
              e->f.name);
    CHECK_MSG(same_live(e, states[0], state_a, T), "%s: interleaved stream A state differs", e->f.name);
    CHECK_MSG(same_live(e, states[1], alone_b, T), "%s: interleaved stream B state differs", e->f.name);
    free(states[0]);
    free(states[1]);
    free(alone_b);
    free(whole_b);
    free(la);
    free(lb);
    free(buf);
}

static void test_fixture(const char *name) {
    env e;
    char msg[600];
    memset(&e, 0, sizeof e);
    bool ok = q35f_load(name, &e.f, msg, sizeof msg);
    CHECK_MSG(ok, "%s", msg);
    weft_err err = {0};
    weft_family_opts fo = {64, CAP, e.f.mlx};
    if (!ok || weft_family_create(&e.f.cfg, e.f.ts, &fo, &e.fm, &err) != WEFT_OK) {
        CHECK_MSG(!ok, "%s: %s", name, err.msg);
        q35f_free(&e.f);
        return;
    }
    CHECK_STR(e.fm.ops->name, "qwen3_5");
    e.V = e.fm.vocab_size;
    e.sb = e.fm.ops->state_bytes(e.fm.self, CAP);
    e.pool1 = weft_pool_new(1, e.fm.scratch_floats);
    e.pool2 = weft_pool_new(2, e.fm.scratch_floats);
    const int T = e.f.T;
    size_t n = (size_t)T * (size_t)e.V;
    float *whole = malloc(n * sizeof(float)), *other = malloc(n * sizeof(float));

    /* 1. the whole sequence in one call vs HF */
    void *s_whole = feed_chunks(&e, e.pool2, e.f.ids, T, T, whole);
    check_golden(&e, whole);

    /* 2. chunk cuts (1 row = decode steps, 3, 7, 64 = whole) and threads: same logits, same live state */
    const int chunks[] = {1, 3, 7, 64};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        for (int th = 1; th <= 2; th++) {
            memset(other, 0, n * sizeof(float));
            void *s = feed_chunks(&e, th == 1 ? e.pool1 : e.pool2, e.f.ids, T, chunks[c], other);
            CHECK_MSG(!memcmp(whole, other, n * sizeof(float)),
                      "%s: chunks of %d (%d threads): logits differ", name, chunks[c], th);
            CHECK_MSG(same_live(&e, s, s_whole, T), "%s: chunks of %d (%d threads): state differs", name,
                      chunks[c], th);
            if (chunks[c] == 64 || chunks[c] == T) /* same cut: the raw state memory is identical too */
                CHECK_MSG(!memcmp(s, s_whole, e.sb), "%s: whole prefill with %d threads: raw state differs",
                          name, th);
            free(s);
        }
    }

    /* 3. two streams interleaved in one call == each alone */
    check_interleaved(&e, whole, s_whole);

    free(s_whole);
    free(whole);
    free(other);
    weft_pool_free(e.pool1);
    weft_pool_free(e.pool2);
    e.fm.ops->destroy(e.fm.self);
    q35f_free(&e.f);
}

int main(void) {
    const char *names[] = {"qwen3_5", "qwen3_5-mlx-q4g64", "qwen3_5_moe", "qwen3_5_moe-mlx-q4g64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) test_fixture(names[i]);
    return check_report("test_qwen3_5");
}
