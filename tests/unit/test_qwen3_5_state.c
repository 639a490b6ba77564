/* qwen3_5 state operations and loader variants:
 * - rollback (keep) after a verify window, in both keep modes (REPLAY, the default, and SNAPSHOT): the live
 *   state equals that of feeding the kept tokens directly, and so do the next logits; window limits; a timing
 *   of both modes (the measurement behind the default, see src/families/qwen3_5_state.c);
 * - prompt-cache snapshots: save at a position, restore into a fresh state, continue == fresh (SPEC §4.3.5);
 * - MoE experts stored fused (`experts.gate_up_proj` / `down_proj`) give the bits of per-expert storage;
 * - refusals with named errors: an unsupported layer kind, a missing tensor, a q_proj that contradicts
 *   attn_output_gate, rows at a wrong position, a token outside the vocabulary. */
#include "check.h"
#include "families/qwen3_5_impl.h"
#include "test_qwen3_5_util.h"

#include <stdlib.h>

#define CAP 64

typedef struct env {
    const q35_fixture *f;
    weft_family_model fm;
    weft_pool *pool;
    size_t sb;
    int64_t V;
} env;

static bool env_new(env *e, const q35_fixture *f, const weft_tensor_set *ts, q35_keep_mode mode) {
    memset(e, 0, sizeof *e);
    e->f = f;
    weft_err err = {0};
    weft_family_opts fo = {64, CAP, f->mlx};
    weft_status st = weft_family_create(&f->cfg, ts ? ts : f->ts, &fo, &e->fm, &err);
    CHECK_MSG(st == WEFT_OK, "%s: %s", f->name, err.msg);
    if (st) return false;
    CHECK(weft_qwen3_5_set_keep_mode(&e->fm, mode, &err) == WEFT_OK);
    e->V = e->fm.vocab_size;
    e->sb = e->fm.ops->state_bytes(e->fm.self, CAP);
    e->pool = weft_pool_new(2, e->fm.scratch_floats);
    return true;
}

static void env_free(env *e) {
    weft_pool_free(e->pool);
    e->fm.ops->destroy(e->fm.self);
}

static void *new_state(env *e) {
    void *s = aligned_alloc(64, (e->sb + 63) & ~(size_t)63);
    e->fm.ops->state_init(e->fm.self, s, CAP);
    return s;
}

static void run(env *e, void *state, const int32_t *ids, int a, int b, float *out) {
    void *states[1] = {state};
    weft_err err = {0};
    weft_status st = q35f_run(&e->fm, e->pool, states, 0, ids, a, b, out, &err);
    CHECK_MSG(st == WEFT_OK, "%s: rows [%d, %d): %s", e->f->name, a, b, err.msg);
}

static bool same_live(env *e, const void *a, const void *b, int len) {
    size_t na, nb;
    void *la = q35f_live(&e->fm, a, len, &na), *lb = q35f_live(&e->fm, b, len, &nb);
    bool same = la && lb && na == nb && !memcmp(la, lb, na);
    free(la);
    free(lb);
    return same;
}

static int hdr_len(const void *state) {
    return ((const q35_hdr *)state)->len;
}

/* Prefix P rows, a verify window of 5 rows, keep P+kept; compare with prefix + kept rows fed directly. */
static void check_rollback(env *e, int P, int kept) {
    const int32_t *ids = e->f->ids;
    float *buf = malloc(64 * (size_t)e->V * sizeof(float)), *next_a = malloc((size_t)e->V * sizeof(float)),
          *next_b = malloc((size_t)e->V * sizeof(float));
    void *rolled = new_state(e), *direct = new_state(e);
    run(e, rolled, ids, 0, P, buf);
    run(e, rolled, ids, P, P + 5, buf);
    weft_err err = {0};
    weft_status st = e->fm.ops->keep(e->fm.self, e->pool, rolled, P + kept, &err);
    CHECK_MSG(st == WEFT_OK, "%s: keep %d: %s", e->f->name, P + kept, err.msg);
    run(e, direct, ids, 0, P, buf);
    if (kept) run(e, direct, ids, P, P + kept, buf);
    CHECK_EQ_INT(hdr_len(rolled), P + kept);
    CHECK_MSG(same_live(e, rolled, direct, P + kept),
              "%s: after keep(%d) the state differs from a direct feed", e->f->name, P + kept);
    run(e, rolled, ids, P + kept, P + kept + 1, next_a);
    run(e, direct, ids, P + kept, P + kept + 1, next_b);
    CHECK_MSG(!memcmp(next_a, next_b, (size_t)e->V * sizeof(float)), "%s: logits after keep(%d) differ",
              e->f->name, P + kept);
    free(rolled);
    free(direct);
    free(buf);
    free(next_a);
    free(next_b);
}

static void check_window_limits(env *e) {
    const int32_t *ids = e->f->ids;
    float *buf = malloc(64 * (size_t)e->V * sizeof(float));
    void *s = new_state(e), *copy = malloc(e->sb), *direct = new_state(e);
    weft_err err = {0};
    run(e, s, ids, 0, 10, buf);
    run(e, s, ids, 10, 15, buf);
    memcpy(copy, s, e->sb);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 15, &err) ==
          WEFT_OK); /* exactly the current length: no-op */
    CHECK_MSG(!memcmp(copy, s, e->sb), "%s: keep(len) changed the state", e->f->name);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 16, &err) == WEFT_ERANGE); /* past the end */
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 9, &err) == WEFT_ERANGE);  /* before the window */
    CHECK_MSG(strstr(err.msg, "window") != NULL, "%s", err.msg);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 13, &err) == WEFT_OK);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 14, &err) == WEFT_ERANGE); /* rolled back: 14 is gone */
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 11, &err) == WEFT_OK); /* still inside the same window */
    run(e, direct, ids, 0, 11, buf);
    CHECK_MSG(same_live(e, s, direct, 11), "%s: two successive keeps differ from a direct feed", e->f->name);
    /* a forward of more rows than the window: its start and first Q35_WINDOW rows stay reachable */
    void *big = new_state(e), *d2 = new_state(e);
    run(e, big, ids, 0, Q35_WINDOW + 6, buf);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, big, Q35_WINDOW + 1, &err) == WEFT_ERANGE);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, big, Q35_WINDOW, &err) == WEFT_OK);
    run(e, d2, ids, 0, Q35_WINDOW, buf);
    CHECK_MSG(same_live(e, big, d2, Q35_WINDOW), "%s: keep inside a long forward differs", e->f->name);
    CHECK(e->fm.ops->keep(e->fm.self, e->pool, big, 0, &err) == WEFT_OK);
    void *fresh = new_state(e);
    CHECK_MSG(same_live(e, big, fresh, 0), "%s: keep(0) is not the initial state", e->f->name);
    free(fresh);
    free(big);
    free(d2);
    free(s);
    free(copy);
    free(direct);
    free(buf);
}

/* Save at 24 (end of the prompt), restore into a fresh state of another capacity, decode the rest. */
static void check_snapshot_resume(env *e) {
    const int32_t *ids = e->f->ids;
    const int T = e->f->T, P = e->f->n_prompt;
    float *whole = malloc((size_t)T * (size_t)e->V * sizeof(float)),
          *rest = malloc((size_t)T * (size_t)e->V * 4);
    void *s = new_state(e);
    run(e, s, ids, 0, T, whole);
    void *p = new_state(e);
    run(e, p, ids, 0, P, rest);
    size_t nb = e->fm.ops->snapshot_bytes(e->fm.self, P);
    void *snap = malloc(nb);
    weft_err err = {0};
    CHECK(e->fm.ops->snapshot_save(e->fm.self, p, P - 1, snap, &err) == WEFT_ERANGE);
    CHECK(e->fm.ops->snapshot_save(e->fm.self, p, P, snap, &err) == WEFT_OK);
    size_t sb2 = e->fm.ops->state_bytes(e->fm.self, CAP - 8);
    void *r = aligned_alloc(64, (sb2 + 63) & ~(size_t)63);
    e->fm.ops->state_init(e->fm.self, r, CAP - 8);
    CHECK(e->fm.ops->snapshot_restore(e->fm.self, r, P, snap, &err) == WEFT_OK);
    for (int t = P; t < T; t++) run(e, r, ids, t, t + 1, rest + (int64_t)t * e->V);
    CHECK_MSG(
        !memcmp(whole + (int64_t)P * e->V, rest + (int64_t)P * e->V, (size_t)(T - P) * e->V * sizeof(float)),
        "%s: resumed from a snapshot != fresh", e->f->name);
    free(whole);
    free(rest);
    free(s);
    free(p);
    free(snap);
    free(r);
}

/* Mean microseconds of a 5-row verify forward and of keep(2 of them), over `iters` windows, on one thread. */
static void time_keep(env *e, int iters, double *fwd_us, double *keep_us) {
    const int32_t *ids = e->f->ids;
    weft_pool *two = e->pool;
    e->pool = weft_pool_new(1, e->fm.scratch_floats);
    float *buf = malloc(16 * (size_t)e->V * sizeof(float));
    void *s = new_state(e);
    run(e, s, ids, 0, 10, buf);
    weft_err err = {0};
    double tf = 0, tk = 0;
    for (int i = 0; i < iters; i++) {
        double t0 = weft_now();
        run(e, s, ids, 10, 15, buf);
        double t1 = weft_now();
        CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 12, &err) == WEFT_OK);
        double t2 = weft_now();
        CHECK(e->fm.ops->keep(e->fm.self, e->pool, s, 10, &err) == WEFT_OK);
        tf += t1 - t0;
        tk += t2 - t1;
    }
    *fwd_us = 1e6 * tf / iters;
    *keep_us = 1e6 * tk / iters;
    weft_pool_free(e->pool);
    e->pool = two;
    free(s);
    free(buf);
}

static void test_state(const q35_fixture *f) {
    double t[2][2];
    for (int mode = 0; mode < 2; mode++) {
        env e;
        if (!env_new(&e, f, NULL, (q35_keep_mode)mode)) return;
        for (int kept = 0; kept <= 5; kept++) check_rollback(&e, 10, kept);
        check_rollback(&e, 0, 2);
        check_window_limits(&e);
        check_snapshot_resume(&e);
        time_keep(&e, 40, &t[mode][0], &t[mode][1]);
        fprintf(stderr, "  %-22s %-8s state %7zu B  5-row verify forward %8.1f us  keep(2 of 5) %6.2f us\n",
                f->name, mode ? "snapshot" : "replay", e.sb, t[mode][0], t[mode][1]);
        env_free(&e);
    }
}

/* The per-expert HF layout rewritten as fused `mlp.experts.gate_up_proj` [E,2I,H] + `down_proj` [E,H,I]. */
static void test_fused_experts(const q35_fixture *f) {
    const weft_config *c = &f->cfg;
    const int64_t E = c->num_experts, MI = c->moe_intermediate_size, H = c->hidden_size;
    weft_tensor_set *ts = weft_tensor_set_new();
    weft_err err = {0};
    for (size_t i = 0; i < weft_tensor_set_count(f->ts); i++) {
        const weft_tensor *t = weft_tensor_set_at(f->ts, i);
        if (strncmp(t->name, "model.language_model.layers.", 28) == 0 && strstr(t->name, ".mlp.experts."))
            continue;
        CHECK(weft_tensor_set_add(ts, t, &err) == WEFT_OK);
    }
    char nm[160];
    for (int64_t l = 0; l < c->n_layers; l++) {
        size_t mat = (size_t)(MI * H) * 2;
        uint8_t *gu = calloc((size_t)E * 2, mat), *dn = calloc((size_t)E, mat);
        for (int64_t e = 0; e < E; e++) {
            const char *parts[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int p = 0; p < 3; p++) {
                snprintf(nm, sizeof nm, "model.language_model.layers.%lld.mlp.experts.%lld.%s.weight",
                         (long long)l, (long long)e, parts[p]);
                const weft_tensor *t = weft_tensor_set_get(f->ts, nm);
                CHECK(t && t->dtype == WEFT_DT_BF16 && t->nbytes == mat);
                if (!t) continue;
                memcpy(p == 2 ? dn + (size_t)e * mat : gu + ((size_t)e * 2 + (size_t)p) * mat, t->data, mat);
            }
        }
        weft_tensor_set_own_memory(ts, gu);
        weft_tensor_set_own_memory(ts, dn);
        weft_tensor g = {.dtype = WEFT_DT_BF16,
                         .ndim = 3,
                         .shape = {E, 2 * MI, H},
                         .data = gu,
                         .nbytes = (size_t)E * 2 * mat};
        snprintf(nm, sizeof nm, "model.language_model.layers.%lld.mlp.experts.gate_up_proj", (long long)l);
        g.name = nm;
        CHECK(weft_tensor_set_add(ts, &g, &err) == WEFT_OK);
        weft_tensor d = {
            .dtype = WEFT_DT_BF16, .ndim = 3, .shape = {E, H, MI}, .data = dn, .nbytes = (size_t)E * mat};
        snprintf(nm, sizeof nm, "model.language_model.layers.%lld.mlp.experts.down_proj", (long long)l);
        d.name = nm;
        CHECK(weft_tensor_set_add(ts, &d, &err) == WEFT_OK);
    }
    env a, b;
    if (env_new(&a, f, NULL, Q35_KEEP_REPLAY) && env_new(&b, f, ts, Q35_KEEP_REPLAY)) {
        size_t n = (size_t)f->T * (size_t)a.V;
        float *la = malloc(n * sizeof(float)), *lb = malloc(n * sizeof(float));
        void *sa = new_state(&a), *sb = new_state(&b);
        run(&a, sa, f->ids, 0, f->T, la);
        run(&b, sb, f->ids, 0, f->T, lb);
        CHECK_MSG(!memcmp(la, lb, n * sizeof(float)), "%s: fused experts differ from per-expert tensors",
                  f->name);
        free(la);
        free(lb);
        free(sa);
        free(sb);
        env_free(&a);
        env_free(&b);
    }
    weft_tensor_set_free(ts);
}

static weft_status try_create(const weft_config *cfg, const weft_tensor_set *ts, bool mlx, weft_err *err) {
    weft_family_opts fo = {8, CAP, mlx};
    weft_family_model fm;
    weft_status st = weft_family_create(cfg, ts, &fo, &fm, err);
    if (!st) fm.ops->destroy(fm.self);
    return st;
}

static void test_refusals(const q35_fixture *f) {
    weft_err err = {0};
    weft_config cfg = f->cfg;
    cfg.layer_kind[1] = WEFT_LAYER_MOE;
    CHECK(try_create(&cfg, f->ts, f->mlx, &err) == WEFT_ENOTSUP);
    CHECK_MSG(strstr(err.msg, "layer 1") != NULL, "%s", err.msg);
    cfg = f->cfg;
    cfg.attn_output_gate = false;
    CHECK(try_create(&cfg, f->ts, f->mlx, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "attn_output_gate") != NULL, "%s", err.msg);
    /* a checkpoint without one tensor */
    weft_tensor_set *ts = weft_tensor_set_new();
    const char *drop = "model.language_model.layers.2.linear_attn.in_proj_z.weight";
    for (size_t i = 0; i < weft_tensor_set_count(f->ts); i++) {
        const weft_tensor *t = weft_tensor_set_at(f->ts, i);
        if (strcmp(t->name, drop) != 0) CHECK(weft_tensor_set_add(ts, t, &err) == WEFT_OK);
    }
    CHECK(try_create(&f->cfg, ts, f->mlx, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, drop) != NULL, "%s", err.msg);
    weft_tensor_set_free(ts);
    /* rows the stream cannot take */
    env e;
    if (!env_new(&e, f, NULL, Q35_KEEP_REPLAY)) return;
    void *s = new_state(&e);
    void *states[1] = {s};
    float *buf = malloc(4 * (size_t)e.V * sizeof(float));
    weft_row rows[2] = {{0, 1, 5}, {0, 2, 6}};
    int outr[2] = {0, 1};
    CHECK(e.fm.ops->forward(e.fm.self, e.pool, states, rows, 2, outr, 2, buf, &err) == WEFT_EINVAL);
    rows[0].pos = 0;
    rows[1].pos = 3;
    CHECK(e.fm.ops->forward(e.fm.self, e.pool, states, rows, 2, outr, 2, buf, &err) == WEFT_EINVAL);
    rows[1] = (weft_row){0, 1, (int32_t)e.V};
    CHECK(e.fm.ops->forward(e.fm.self, e.pool, states, rows, 2, outr, 2, buf, &err) == WEFT_ERANGE);
    CHECK_EQ_INT(hdr_len(s), 0); /* refused calls leave the state alone */
    free(buf);
    free(s);
    env_free(&e);
}

int main(void) {
    const char *names[] = {"qwen3_5", "qwen3_5-mlx-q4g64", "qwen3_5_moe", "qwen3_5_moe-mlx-q4g64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        q35_fixture f;
        char msg[600];
        bool ok = q35f_load(names[i], &f, msg, sizeof msg);
        CHECK_MSG(ok, "%s", msg);
        if (ok) {
            test_state(&f);
            test_refusals(&f);
            if (!strcmp(names[i], "qwen3_5_moe")) test_fused_experts(&f);
        }
        q35f_free(&f);
    }
    return check_report("test_qwen3_5_state");
}
