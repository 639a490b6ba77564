/* The nemotron_h family (dense and MoE, bf16 and MLX q4g64) against the fixtures' HF goldens, and exactness
 * under cutting (SPEC §4.3): chunkings 1/3/7/64 give the same logits and states, two streams in one call
 * equal each alone, 1 and 2 threads agree, and keep() after a verify window leaves the state a direct feed
 * gives.
 *
 * States are compared whole (memcmp of every byte) wherever the calls that built them are the same; across
 * different chunkings the live part (length, live conv/SSM states, KV rows: the snapshot_save bytes) is
 * compared, because the rollback journal describes the stream's last call by definition (nemotron_h.c). */
#include "check.h"
#include "families/mtp.h"
#include "families/nemotron_h_internal.h"
#include "weft/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <time.h>

enum { CAP = 64 };

typedef struct fixture {
    weft_config cfg;
    weft_tensor_set *ts;
    bool mlx;
    int32_t ids[64];
    int n_prompt, n_greedy, T;
    float *ref; /* [T, V] */
} fixture;

static bool load_fixture(const char *dir, fixture *f) {
    memset(f, 0, sizeof *f);
    char path[512];
    weft_err err = {0};
    f->ts = weft_tensor_set_new();
    weft_checkpoint_info info;
    CHECK_MSG(weft_config_load_dir(dir, &f->cfg, &err) == WEFT_OK, "%s: %s", dir, err.msg);
    if (err.code) return false;
    CHECK_MSG(weft_safetensors_load_checkpoint(dir, f->ts, &info, &err) == WEFT_OK, "%s: %s", dir, err.msg);
    if (err.code) return false;
    f->mlx = info.is_mlx;
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    json_t *gj = json_load_file(path, 0, &je);
    CHECK_MSG(gj != NULL, "%s: %s", path, je.text);
    if (!gj) return false;
    json_t *p = json_object_get(gj, "prompt_ids"), *gr = json_object_get(gj, "greedy_ids");
    f->n_prompt = (int)json_array_size(p);
    f->n_greedy = (int)json_array_size(gr);
    f->T = f->n_prompt + f->n_greedy;
    CHECK(f->T > 30 && f->T <= 64);
    for (int i = 0; i < f->n_prompt; i++) f->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; i < f->n_greedy; i++)
        f->ids[f->n_prompt + i] = (int32_t)json_integer_value(json_array_get(gr, i));
    json_decref(gj);
    size_t n = (size_t)f->T * (size_t)f->cfg.vocab_size;
    f->ref = malloc(n * sizeof(float));
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    FILE *lf = fopen(path, "rb");
    CHECK_MSG(lf != NULL, "%s missing", path);
    if (!lf) return false;
    size_t got = fread(f->ref, sizeof(float), n, lf);
    fclose(lf);
    CHECK_EQ_INT(got, n);
    return got == n && f->T > 30 && f->T <= 64;
}

typedef struct ctx {
    weft_family_model fm;
    const nh_model *m;
    weft_pool *pool1, *pool2;
    size_t sb;
    int64_t V;
} ctx;

/* The live part of a state equals another's: same length and same snapshot_save bytes. */
static bool same_live(ctx *c, const void *a, const void *b) {
    const nh_hdr *ha = a, *hb = b;
    if (ha->len != hb->len) return false;
    size_t n = c->fm.ops->snapshot_bytes(c->fm.self, ha->len);
    char *sa = malloc(n), *sb = malloc(n);
    weft_err err = {0};
    bool ok = c->fm.ops->snapshot_save(c->fm.self, a, ha->len, sa, &err) == WEFT_OK &&
              c->fm.ops->snapshot_save(c->fm.self, b, hb->len, sb, &err) == WEFT_OK && !memcmp(sa, sb, n);
    free(sa);
    free(sb);
    return ok;
}

/* Feeds ids[a, b) of one stream (state st) as slot 0 in chunks of `chunk` rows; logits of row r to out[r·V]
 * (out may be NULL). */
static void feed(ctx *c, weft_pool *pool, void *st, const int32_t *ids, int a, int b, int chunk, float *out) {
    void *states[1] = {st};
    weft_row rows[64];
    int outr[64];
    float *buf = malloc((size_t)64 * (size_t)c->V * sizeof(float));
    for (int s = a; s < b; s += chunk) {
        int e = s + chunk < b ? s + chunk : b;
        for (int r = s; r < e; r++) {
            rows[r - s] = (weft_row){0, r, ids[r]};
            outr[r - s] = r - s;
        }
        weft_err err = {0};
        CHECK_MSG(c->fm.ops->forward(c->fm.self, pool, states, rows, e - s, outr, e - s, buf, &err) ==
                      WEFT_OK,
                  "%s", err.msg);
        if (out) memcpy(out + (int64_t)s * c->V, buf, (size_t)(e - s) * (size_t)c->V * sizeof(float));
    }
    free(buf);
}

static void *new_state(ctx *c) {
    void *st = malloc(c->sb);
    c->fm.ops->state_init(c->fm.self, st, CAP);
    return st;
}

static void check_golden(ctx *c, const fixture *f, const char *name, const float *whole) {
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < (int64_t)f->T * c->V; i++) {
        double ref = f->ref[i], d = fabs((double)whole[i] - ref), tol = 1e-3 * fmax(1.0, fabs(ref));
        if (!(d <= tol)) bad++;
        if (d / fmax(1.0, fabs(ref)) > worst) worst = d / fmax(1.0, fabs(ref));
    }
    CHECK_MSG(bad == 0, "%s: %d logits outside 1e-3·max(1,|ref|) (worst relative %.3g)", name, bad, worst);
    fprintf(stderr, "  %-26s max |Δ|/max(1,|ref|) = %.2e\n", name, worst);
    for (int i = 0; i < f->n_greedy; i++) { /* row n_prompt-1+i predicts greedy i (teacher forced) */
        const float *row = whole + (int64_t)(f->n_prompt - 1 + i) * c->V;
        int best = 0;
        for (int64_t v = 1; v < c->V; v++)
            if (row[v] > row[best]) best = (int)v;
        CHECK_MSG(best == f->ids[f->n_prompt + i], "%s: greedy step %d: %d != %d", name, i, best,
                  f->ids[f->n_prompt + i]);
    }
}

/* Chunkings 1/3/7/64, 1 vs 2 threads: same logits, same canonical state; same calls: same whole state. */
static void check_chunks(ctx *c, const fixture *f, const char *name, const float *whole, void *st_whole) {
    const int T = f->T, chunks[4] = {1, 3, 7, 64};
    float *other = malloc((size_t)T * (size_t)c->V * sizeof(float));
    for (int i = 0; i < 4; i++) {
        void *st = new_state(c);
        feed(c, c->pool1, st, f->ids, 0, T, chunks[i], other);
        CHECK_MSG(!memcmp(whole, other, (size_t)T * (size_t)c->V * sizeof(float)),
                  "%s: chunks of %d: logits differ", name, chunks[i]);
        CHECK_MSG(same_live(c, st_whole, st), "%s: chunks of %d: states differ", name, chunks[i]);
        if (chunks[i] >= T)
            CHECK_MSG(!memcmp(st_whole, st, c->sb), "%s: 1 vs 2 threads: whole states differ", name);
        if (chunks[i] == 7) { /* the same chunking with 2 threads: every byte equal */
            void *st2 = new_state(c);
            feed(c, c->pool2, st2, f->ids, 0, T, 7, NULL);
            CHECK_MSG(!memcmp(st2, st, c->sb), "%s: chunks of 7, 1 vs 2 threads: states differ", name);
            free(st2);
        }
        free(st);
    }
    free(other);
}

/* Two streams in one call (chunks of 7 each, the other stream's rows first) == each alone. */
static void check_interleaved(ctx *c, const fixture *f, const char *name) {
    const int T = f->T;
    int32_t ids2[64];
    for (int r = 0; r < T; r++) ids2[r] = f->ids[(r + 5) % T];
    size_t lb = (size_t)T * (size_t)c->V * sizeof(float);
    float *alone0 = malloc(lb), *alone1 = malloc(lb), *mix0 = malloc(lb), *mix1 = malloc(lb);
    float *buf = malloc((size_t)64 * (size_t)c->V * sizeof(float));
    void *a0 = new_state(c), *a1 = new_state(c), *m0 = new_state(c), *m1 = new_state(c);
    feed(c, c->pool2, a0, f->ids, 0, T, 7, alone0);
    feed(c, c->pool2, a1, ids2, 0, T, 7, alone1);
    void *states[2] = {m0, m1};
    for (int a = 0; a < T; a += 7) {
        int b = a + 7 < T ? a + 7 : T, n = 0;
        weft_row rows[64];
        int outr[64];
        for (int r = a; r < b; r++) rows[n++] = (weft_row){1, r, ids2[r]};
        for (int r = a; r < b; r++) rows[n++] = (weft_row){0, r, f->ids[r]};
        for (int i = 0; i < n; i++) outr[i] = i;
        weft_err err = {0};
        CHECK_MSG(c->fm.ops->forward(c->fm.self, c->pool2, states, rows, n, outr, n, buf, &err) == WEFT_OK,
                  "%s", err.msg);
        size_t k = (size_t)(b - a) * (size_t)c->V;
        memcpy(mix1 + (int64_t)a * c->V, buf, k * sizeof(float));
        memcpy(mix0 + (int64_t)a * c->V, buf + k, k * sizeof(float));
    }
    CHECK_MSG(!memcmp(alone0, mix0, lb) && !memcmp(alone1, mix1, lb),
              "%s: interleaved logits differ from alone", name);
    CHECK_MSG(!memcmp(a0, m0, c->sb) && !memcmp(a1, m1, c->sb), "%s: interleaved states differ from alone",
              name);
    free(alone0), free(alone1), free(mix0), free(mix1), free(buf);
    free(a0), free(a1), free(m0), free(m1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rollback: prefix, a 5-row window, keep 2 == prefix then those 2 rows; then the next row's logits agree. */
static void check_rollback(ctx *c, const fixture *f, const char *name, bool measure) {
    const int P = 20;
    weft_err err = {0};
    void *R = new_state(c), *D = new_state(c), *copy = malloc(c->sb);
    feed(c, c->pool2, R, f->ids, 0, P, 64, NULL);
    feed(c, c->pool2, D, f->ids, 0, P, 64, NULL);
    feed(c, c->pool2, R, f->ids, P, P + 5, 64, NULL);
    memcpy(copy, R, c->sb);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, R, P + 5, &err) == WEFT_OK); /* keep everything: no-op */
    CHECK_MSG(!memcmp(copy, R, c->sb), "%s: keep(len) changed the state", name);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, R, P + 6, &err) == WEFT_ERANGE);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, R, P - 1, &err) == WEFT_ERANGE); /* before the window */
    CHECK_MSG(strstr(err.msg, "roll back") != NULL, "%s", err.msg);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, R, P + 2, &err) == WEFT_OK);
    feed(c, c->pool2, D, f->ids, P, P + 2, 64, NULL);
    CHECK_MSG(!memcmp(R, D, c->sb), "%s: rolled-back state differs from the direct feed", name);
    /* the next row's logits (feed writes row r at out[r·V]) and the states after it agree */
    const size_t ob = (size_t)(P + 3) * (size_t)c->V * sizeof(float);
    float *o1 = malloc(ob), *o2 = malloc(ob);
    feed(c, c->pool1, R, f->ids, P + 2, P + 3, 64, o1);
    feed(c, c->pool1, D, f->ids, P + 2, P + 3, 64, o2);
    CHECK_MSG(
        !memcmp(o1 + (int64_t)(P + 2) * c->V, o2 + (int64_t)(P + 2) * c->V, (size_t)c->V * sizeof(float)),
        "%s: logits after rollback differ", name);
    CHECK_MSG(!memcmp(R, D, c->sb), "%s: states after rollback + 1 row differ", name);
    free(o1), free(o2);
    /* a long call journals only its last NH_KEEP_WINDOW rows; rolling back inside them (several times, each
     * replaying from the window start) matches a direct feed */
    const int ws = 30 - NH_KEEP_WINDOW, keeps[3] = {ws + 5, ws + 2, ws};
    void *L = new_state(c), *S = new_state(c);
    feed(c, c->pool2, L, f->ids, 0, 30, 64, NULL);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, L, ws - 1, &err) == WEFT_ERANGE);
    for (int i = 0; i < 3; i++) {
        CHECK(c->fm.ops->keep(c->fm.self, c->pool2, L, keeps[i], &err) == WEFT_OK);
        c->fm.ops->state_init(c->fm.self, S, CAP);
        feed(c, c->pool2, S, f->ids, 0, keeps[i], 64, NULL);
        CHECK_MSG(same_live(c, L, S), "%s: keep(%d) inside a long call's window differs from direct", name,
                  keeps[i]);
    }
    /* dropping the whole window makes the window-start buffer live again */
    void *W0 = new_state(c), *D0 = new_state(c);
    feed(c, c->pool2, W0, f->ids, 0, P, 64, NULL);
    feed(c, c->pool2, D0, f->ids, 0, P, 64, NULL);
    feed(c, c->pool2, W0, f->ids, P, P + 5, 64, NULL);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, W0, P, &err) == WEFT_OK);
    CHECK_MSG(same_live(c, W0, D0), "%s: keep(window start) differs from the prefix alone", name);
    free(W0), free(D0);
    if (measure) {
        /* keep's replay (2 of 5 rows, conv + SSM steps only) vs the alternative, a snapshot of every Mamba
         * layer's conv+SSM state at each of the 5 rows plus one restore */
        const int iters = 2000;
        size_t mamba_bytes = (size_t)c->m->n_mamba *
                             (size_t)(c->m->conv_dim * (c->m->K - 1) + c->m->Hm * c->m->P * c->m->N) *
                             sizeof(float);
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            memcpy(R, copy, c->sb);
            c->fm.ops->keep(c->fm.self, c->pool2, R, P + 2, &err);
        }
        double t1 = now_s();
        for (int i = 0; i < iters; i++) memcpy(R, copy, c->sb);
        double t2 = now_s();
        char *snaps = malloc(6 * mamba_bytes);
        for (int i = 0; i < iters; i++) {
            for (int r = 0; r < 5; r++) memcpy(snaps + (size_t)r * mamba_bytes, copy, mamba_bytes);
            memcpy(snaps + 5 * mamba_bytes, snaps + 2 * mamba_bytes, mamba_bytes);
        }
        double t3 = now_s();
        fprintf(
            stderr,
            "  %-26s keep cost: replay of 2 rows %.2f us per rejected window; per-row snapshots %.2f us per "
            "5-row window (%zu B per row)\n",
            name, ((t1 - t0) - (t2 - t1)) / iters * 1e6, (t3 - t2) / iters * 1e6, mamba_bytes);
        free(snaps);
    }
    free(R), free(D), free(copy), free(L), free(S);
}

/* Prompt-cache snapshot: save after a prefix, restore into a fresh state, feed the rest == the whole run. */
static void check_snapshot(ctx *c, const fixture *f, const char *name, const float *whole,
                           const void *st_whole) {
    const int P = 17, T = f->T;
    weft_err err = {0};
    void *A = new_state(c), *B = new_state(c);
    feed(c, c->pool2, A, f->ids, 0, P, 7, NULL);
    size_t n = c->fm.ops->snapshot_bytes(c->fm.self, P);
    char *snap = malloc(n);
    CHECK(c->fm.ops->snapshot_save(c->fm.self, A, P - 1, snap, &err) == WEFT_ERANGE);
    CHECK(c->fm.ops->snapshot_save(c->fm.self, A, P, snap, &err) == WEFT_OK);
    CHECK(c->fm.ops->snapshot_restore(c->fm.self, B, P, snap, &err) == WEFT_OK);
    CHECK(c->fm.ops->keep(c->fm.self, c->pool2, B, P - 1, &err) == WEFT_ERANGE); /* nothing journaled yet */
    float *out = malloc((size_t)T * (size_t)c->V * sizeof(float));
    feed(c, c->pool1, B, f->ids, P, T, 5, out);
    CHECK_MSG(!memcmp(out + (int64_t)P * c->V, whole + (int64_t)P * c->V,
                      (size_t)(T - P) * (size_t)c->V * sizeof(float)),
              "%s: resumed logits differ from fresh", name);
    CHECK_MSG(same_live(c, B, st_whole), "%s: resumed state differs from fresh", name);
    free(out), free(snap), free(A), free(B);
}

static void check_errors(ctx *c, fixture *f, const char *name) {
    weft_err err = {0};
    void *st = new_state(c);
    void *states[1] = {st};
    weft_row row = {0, 3, f->ids[0]};
    int outr = 0;
    float *buf = malloc((size_t)c->V * sizeof(float));
    CHECK(c->fm.ops->forward(c->fm.self, c->pool1, states, &row, 1, &outr, 1, buf, &err) == WEFT_EINVAL);
    row = (weft_row){0, 0, (int32_t)c->V};
    CHECK(c->fm.ops->forward(c->fm.self, c->pool1, states, &row, 1, &outr, 1, buf, &err) == WEFT_ERANGE);
    free(buf);
    free(st);
    weft_family_opts fo = {64, CAP, f->mlx};
    weft_family_model fm;
    weft_config bad = f->cfg;
    bad.layer_kind[1] = (weft_layer_kind)17;
    CHECK(weft_family_create(&bad, f->ts, &fo, &fm, &err) == WEFT_ENOTSUP);
    CHECK_MSG(strstr(err.msg, "layer 1") != NULL, "%s: %s", name, err.msg);
    weft_tensor_set_remove(f->ts, "backbone.layers.0.mixer.A_log");
    CHECK(weft_family_create(&f->cfg, f->ts, &fo, &fm, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "backbone.layers.0.mixer.A_log") != NULL, "%s: %s", name, err.msg);
}

static void test_fixture(const char *name, bool measure) {
    char dir[256];
    snprintf(dir, sizeof dir, TEST_DATA "fixtures/%s", name);
    fixture f;
    if (!load_fixture(dir, &f)) {
        weft_tensor_set_free(f.ts);
        free(f.ref);
        return;
    }
    ctx c = {0};
    weft_family_opts fo = {64, CAP, f.mlx};
    weft_err err = {0};
    if (weft_family_create(&f.cfg, f.ts, &fo, &c.fm, &err) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        weft_tensor_set_free(f.ts);
        free(f.ref);
        return;
    }
    CHECK_STR(c.fm.ops->name, "nemotron_h");
    c.m = weft_mtp_trunk(&c.fm); /* the trunk, also under an MTP head's wrapper */
    c.V = f.cfg.vocab_size;
    c.pool1 = weft_pool_new(1, c.fm.scratch_floats);
    c.pool2 = weft_pool_new(2, c.fm.scratch_floats);
    c.sb = c.fm.ops->state_bytes(c.fm.self, CAP);
    float *whole = malloc((size_t)f.T * (size_t)c.V * sizeof(float));
    void *st = new_state(&c);
    feed(&c, c.pool2, st, f.ids, 0, f.T, 64, whole);
    check_golden(&c, &f, name, whole);
    check_chunks(&c, &f, name, whole, st);
    check_interleaved(&c, &f, name);
    check_rollback(&c, &f, name, measure);
    check_snapshot(&c, &f, name, whole, st);
    check_errors(&c, &f, name);
    free(st);
    free(whole);
    weft_pool_free(c.pool1);
    weft_pool_free(c.pool2);
    c.fm.ops->destroy(c.fm.self);
    weft_tensor_set_free(f.ts);
    free(f.ref);
}

int main(void) {
    test_fixture("nemotron_h", true);
    test_fixture("nemotron_h-mlx-q4g64", false);
    test_fixture("nemotron_h_moe", true);
    test_fixture("nemotron_h_moe-mlx-q4g64", false);
    return check_report("test_nemotron_h");
}
