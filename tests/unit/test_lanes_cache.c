/* test_lanes_cache.c — the prompt cache (SPEC §4.4) over the history-sensitive fake backend:
 * resumed == fresh (resend, second turn, shared prefix; greedy and seeded) with cached_tokens equal to the
 * resumed length; saves only at grid points and the prompt end, whatever the prefill chunk; eviction under a
 * small budget (bytes never above it, replies still right); the resumed entry is never evicted; failed
 * restores and saves fall back; a backend without snapshots runs without the cache. Every reply is also
 * checked against the fake's serial oracle and against an engine without the cache. */
#include "check.h"
#include "test_lanes_util.h"

#include <stdlib.h>

#define VOCAB 64
#define GRID  8

static const int32_t EOS[] = {3};

static weft_fake_config fake_cfg(void) {
    weft_fake_config fc = {.max_slots = 8, .max_rows = 64, .vocab_size = VOCAB, .salt = 5};
    return fc;
}

static weft_engine_config engine_cfg(int parallel, int chunk, size_t budget) {
    weft_engine_config ec = {.parallel = parallel,
                             .max_queue = 64,
                             .max_rows = 32,
                             .prefill_chunk = chunk,
                             .capacity = 512,
                             .eos_ids = EOS,
                             .n_eos = 1,
                             .prompt_cache_bytes = budget,
                             .prompt_cache_grid = GRID};
    return ec;
}

/* mode 0: greedy; mode 1: seeded (T 0.8, top-p 0.9, seed 7). */
static weft_request make_req(const int32_t *prompt, int n, int max_tokens, int mode) {
    weft_request r = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = mode == 0};
    r.sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
    if (mode == 1) r.sampling.temperature = 0.8, r.sampling.top_p = 0.9, r.sampling.seed = 7;
    return r;
}

/* Runs req on the cached rig and on the uncached one; both must agree with each other and the oracle. */
static void run_both(lt_rig *on, lt_rig *off, const weft_request *req, lt_result *res, const char *what) {
    char why[256];
    lt_result plain;
    CHECK_MSG(lt_rig_run(on, req, 1, res, why, sizeof why) == 0, "%s: %s", what, why);
    CHECK_MSG(lt_rig_run(off, req, 1, &plain, why, sizeof why) == 0, "%s: %s", what, why);
    CHECK_MSG(res->protocol_error[0] == 0, "%s: %s", what, res->protocol_error);
    CHECK_MSG(res->n >= 1, "%s: no tokens (%s)", what, res->message);
    CHECK_MSG(lt_same(res, &plain, why, sizeof why) == 0, "%s: cache on != off: %s", what, why);
    CHECK_MSG(lt_check_oracle(&on->fc, req, res, EOS, 1, false, why, sizeof why) == 0, "%s: %s", what, why);
    CHECK_EQ_INT(plain.cached, 0);
    CHECK_EQ_INT(res->stats.cached_tokens, res->cached);
}

static void check_fake_clean(lt_rig *g) {
    weft_fake_stats fs;
    lt_rig_free(g, &fs);
    CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
    CHECK_EQ_INT(fs.open_slots, 0);
}

static void test_resumed_equals_fresh(void) {
    char why[256];
    for (int mode = 0; mode < 2; mode++) {
        weft_fake_config fc = fake_cfg();
        weft_engine_config eon = engine_cfg(2, 5, (size_t)1 << 20), eoff = engine_cfg(2, 5, 0);
        lt_rig on, off;
        CHECK_MSG(lt_rig_new(&on, &eon, &fc, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(lt_rig_new(&off, &eoff, &fc, why, sizeof why) == 0, "%s", why);
        int32_t p1[40], p2[200], p3[40], p4[300];
        lt_prompt(p1, 37, 11, VOCAB);
        lt_result a, b, c, d, t3;
        weft_request q = make_req(p1, 37, 20, mode);
        run_both(&on, &off, &q, &a, "first");
        CHECK_EQ_INT(a.cached, 0);
        /* A resend resumes from the prompt-end state: everything but the last prompt row. */
        run_both(&on, &off, &q, &b, "resend");
        CHECK_EQ_INT(b.cached, 36);
        /* Second turn: the first prompt, its reply, new tokens: resumes from the reply-end state. */
        memcpy(p2, p1, 37 * sizeof *p1);
        memcpy(p2 + 37, a.tokens, (size_t)a.n * sizeof *p2);
        lt_prompt(p2 + 37 + a.n, 11, 12, VOCAB);
        int n2 = 37 + a.n + 11;
        q = make_req(p2, n2, 24, mode);
        run_both(&on, &off, &q, &c, "second turn");
        CHECK_MSG(c.cached == 37 + a.n - 1, "second turn cached %d, expected %d", c.cached, 37 + a.n - 1);
        /* A prompt sharing the first 21 tokens resumes from the grid point at 16. */
        memcpy(p3, p1, 21 * sizeof *p1);
        lt_prompt(p3 + 21, 15, 13, VOCAB);
        p3[21] = (p1[21] + 1) % VOCAB;
        q = make_req(p3, 36, 12, mode);
        run_both(&on, &off, &q, &d, "shared prefix");
        CHECK_EQ_INT(d.cached, 16);
        /* Third turn on top of the second. */
        memcpy(p4, p2, (size_t)n2 * sizeof *p2);
        memcpy(p4 + n2, c.tokens, (size_t)c.n * sizeof *p4);
        lt_prompt(p4 + n2 + c.n, 4, 14, VOCAB);
        int n4 = n2 + c.n + 4;
        q = make_req(p4, n4, 16, mode);
        run_both(&on, &off, &q, &t3, "third turn");
        CHECK_EQ_INT(t3.cached, n2 + c.n - 1);

        weft_engine_stats es;
        weft_engine_get_stats(on.e, &es);
        uint64_t cached = (uint64_t)(b.cached + c.cached + d.cached + t3.cached);
        CHECK_EQ_INT(es.prompt_tokens_cached_total, cached);
        CHECK_EQ_INT(es.prefix_cache_hits, cached);
        CHECK_EQ_INT(es.prefix_cache_queries, (uint64_t)(37 * 2 + n2 + 36 + n4));
        CHECK_EQ_INT(es.prompt_cache_lookups, 5);
        CHECK_EQ_INT(es.prompt_cache_hit_requests, 4);
        CHECK_EQ_INT(es.prompt_cache_failures, 0);
        CHECK(es.prompt_cache_entries > 0 && es.prompt_cache_bytes > 0);
        CHECK(es.prompt_cache_bytes <= es.prompt_cache_budget);
        /* Prefilled rows: only those not resumed. */
        uint64_t prompt_all = (uint64_t)(37 * 2 + n2 + 36 + n4);
        CHECK_EQ_INT(es.prompt_tokens_total, prompt_all - cached);
        weft_engine_get_stats(off.e, &es);
        CHECK_EQ_INT(es.prompt_cache_budget, 0);
        CHECK_EQ_INT(es.prompt_cache_lookups, 0);
        CHECK_EQ_INT(es.prompt_tokens_total, prompt_all);
        check_fake_clean(&on);
        check_fake_clean(&off);
    }
}

/* ---- saves at grid points only, whatever the chunking ---- */
typedef struct grid_ctx {
    int prefill_segments;
    int crossing; /* prefill segments with a save point strictly inside */
} grid_ctx;

static void grid_hook(void *vctx, const weft_segment *segs, int n) {
    grid_ctx *g = vctx;
    for (int i = 0; i < n; i++) {
        const weft_segment *s = &segs[i];
        if (s->start >= s->n_prompt) continue; /* decode window */
        g->prefill_segments++;
        for (int p = s->start + 1; p < s->start + s->n_rows; p++)
            if (p % GRID == 0 || p == s->n_prompt - 1) g->crossing++;
    }
}

static void test_grid_saves(void) {
    char why[256];
    int32_t prompt[100], other[30];
    lt_prompt(prompt, 100, 21, VOCAB);
    lt_prompt(other, 30, 22, VOCAB);
    const int chunks[] = {1, 3, 5, 7, 0};
    lt_result ref[2];
    for (int k = 0; k < 5; k++) {
        for (int mode = 0; mode < 2; mode++) {
            weft_fake_config fc = fake_cfg();
            weft_engine_config ec = engine_cfg(2, chunks[k], (size_t)1 << 20);
            lt_rig g;
            CHECK_MSG(lt_rig_new(&g, &ec, &fc, why, sizeof why) == 0, "%s", why);
            grid_ctx gc = {0};
            weft_fake_set_hook(&g.be, grid_hook, &gc);
            weft_request q = make_req(prompt, 100, 10, 0);
            q.ignore_eos = true;
            lt_result res[2];
            if (mode == 0) {
                CHECK_MSG(lt_rig_run(&g, &q, 1, res, why, sizeof why) == 0, "%s", why);
            } else {
                /* beside another stream, sharing rounds */
                weft_request two[2] = {q, make_req(other, 30, 12, 1)};
                CHECK_MSG(lt_rig_run(&g, two, 2, res, why, sizeof why) == 0, "%s", why);
            }
            CHECK_MSG(gc.crossing == 0, "chunk %d: %d prefill segments cross a save point", chunks[k],
                      gc.crossing);
            CHECK(gc.prefill_segments >= 13);
            if (k == 0 && mode == 0) ref[0] = res[0];
            CHECK_MSG(lt_same(&res[0], &ref[0], why, sizeof why) == 0, "chunk %d: %s", chunks[k], why);
            CHECK_MSG(lt_check_oracle(&fc, &q, &res[0], EOS, 1, false, why, sizeof why) == 0, "%s", why);
            weft_fake_stats fs;
            lt_rig_free(&g, &fs);
            CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
            if (mode == 1) continue;
            /* Alone: 8, 16, ..., 96, the prompt end 99, the reply end 100 + 10 - 1. */
            CHECK_EQ_INT(fs.saves, 14);
            CHECK_EQ_INT(fs.n_save_log, 14);
            for (int i = 0; i < 12 && i < fs.n_save_log; i++) CHECK_EQ_INT(fs.save_log[i], 8 * (i + 1));
            CHECK_EQ_INT(fs.save_log[12], 99);
            CHECK_EQ_INT(fs.save_log[13], 109);
        }
    }
}

/* ---- budget and eviction ---- */

/* Bytes one entry of len tokens is charged: base + per_token * len, measured through the stats. */
typedef struct charge {
    long base, per_token;
} charge;

static long bytes_after(int n_prompt, int max_tokens) {
    char why[256];
    weft_fake_config fc = fake_cfg();
    weft_engine_config ec = engine_cfg(1, 0, (size_t)1 << 20);
    ec.prompt_cache_grid = 1000;
    lt_rig g;
    int32_t p[8];
    lt_prompt(p, n_prompt, 3, VOCAB);
    if (lt_rig_new(&g, &ec, &fc, why, sizeof why) != 0) return -1;
    weft_request q = make_req(p, n_prompt, max_tokens, 0);
    lt_result r;
    lt_rig_run(&g, &q, 1, &r, why, sizeof why);
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    lt_rig_free(&g, NULL);
    return (long)es.prompt_cache_bytes;
}

static charge measure_charge(void) {
    /* Prompt of 2, one token: entries at 1 (prompt end) and 2 (reply end); prompt of 3: at 2 and 3. */
    long a = bytes_after(2, 1), b = bytes_after(3, 1);
    charge c = {.per_token = (b - a) / 2};
    c.base = (a - 3 * c.per_token) / 2;
    CHECK(c.per_token > 0 && c.base > 0);
    return c;
}

static void test_eviction(void) {
    char why[256];
    charge ch = measure_charge();
    /* Room for about two 40-token entries. */
    size_t budget = (size_t)(2 * (ch.base + 40 * ch.per_token) + ch.per_token);
    weft_fake_config fc = fake_cfg();
    weft_engine_config eon = engine_cfg(2, 6, budget), eoff = engine_cfg(2, 6, 0);
    lt_rig on, off;
    CHECK_MSG(lt_rig_new(&on, &eon, &fc, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(lt_rig_new(&off, &eoff, &fc, why, sizeof why) == 0, "%s", why);
    int32_t base[4][48], prompt[300];
    for (int b = 0; b < 4; b++) lt_prompt(base[b], 30 + 5 * b, 40u + (uint32_t)b, VOCAB);
    int hits = 0;
    for (int i = 0; i < 20; i++) {
        int b = (i * 3) % 4, nb = 30 + 5 * b, n;
        lt_result prev;
        weft_request q = make_req(base[b], nb, 8 + i % 5, i % 2);
        if (i % 3 == 1) {
            /* a second turn on top of this base's first turn */
            run_both(&on, &off, &q, &prev, "turn 1");
            memcpy(prompt, base[b], (size_t)nb * sizeof *prompt);
            memcpy(prompt + nb, prev.tokens, (size_t)prev.n * sizeof *prompt);
            lt_prompt(prompt + nb + prev.n, 6, 50u + (uint32_t)i, VOCAB);
            n = nb + prev.n + 6;
            q = make_req(prompt, n, 10, i % 2);
        } else if (i % 3 == 2) {
            /* the base's first 20 tokens and a new tail */
            memcpy(prompt, base[b], 20 * sizeof *prompt);
            lt_prompt(prompt + 20, 25, 60u + (uint32_t)i, VOCAB);
            n = 45;
            q = make_req(prompt, n, 9, i % 2);
        }
        lt_result r;
        run_both(&on, &off, &q, &r, "under a small budget");
        hits += r.cached > 0;
        weft_engine_stats es;
        weft_engine_get_stats(on.e, &es);
        CHECK_MSG(es.prompt_cache_bytes <= budget, "request %d: %zu bytes held, budget %zu", i,
                  es.prompt_cache_bytes, budget);
        CHECK_EQ_INT(es.prompt_cache_budget, budget);
    }
    weft_engine_stats es;
    weft_engine_get_stats(on.e, &es);
    CHECK_MSG(es.prompt_cache_evictions > 0, "no eviction under a budget of %zu", budget);
    CHECK(hits > 0);
    CHECK_EQ_INT(es.prompt_cache_failures, 0);
    check_fake_clean(&on);
    check_fake_clean(&off);
}

/* The entry a stream resumes from stays while its prompt goes in, even when a save would need its room. */
static void test_resumed_entry_pinned(void) {
    char why[256];
    charge ch = measure_charge();
    size_t budget = (size_t)(ch.base + 53 * ch.per_token + ch.per_token / 2);
    weft_fake_config fc = fake_cfg();
    weft_engine_config ec = engine_cfg(1, 0, budget), eoff = engine_cfg(1, 0, 0);
    lt_rig on, off;
    CHECK_MSG(lt_rig_new(&on, &ec, &fc, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(lt_rig_new(&off, &eoff, &fc, why, sizeof why) == 0, "%s", why);
    int32_t p1[40], p2[60];
    lt_prompt(p1, 39, 70, VOCAB);
    weft_request q = make_req(p1, 39, 10, 0);
    lt_result a, b, c;
    run_both(&on, &off, &q, &a, "pin: first");
    weft_engine_stats es;
    weft_engine_get_stats(on.e, &es);
    CHECK_EQ_INT(es.prompt_cache_entries, 1); /* only the reply end (48 tokens) fits */
    memcpy(p2, p1, 39 * sizeof *p1);
    memcpy(p2 + 39, a.tokens, 10 * sizeof *p2);
    lt_prompt(p2 + 49, 5, 71, VOCAB);
    q = make_req(p2, 54, 40, 0);
    run_both(&on, &off, &q, &b, "pin: second turn");
    CHECK_EQ_INT(b.cached, 48);
    /* Its prompt-end save (53) would have needed the resumed entry's room: skipped, so a resend still
     * resumes from 48. */
    run_both(&on, &off, &q, &c, "pin: resend");
    CHECK_EQ_INT(c.cached, 48);
    weft_engine_get_stats(on.e, &es);
    CHECK(es.prompt_cache_bytes <= budget);
    check_fake_clean(&on);
    check_fake_clean(&off);
}

/* ---- failures ---- */
static void test_failed_restore_and_save(void) {
    char why[256];
    weft_fake_config fc = fake_cfg();
    weft_engine_config eon = engine_cfg(2, 5, (size_t)1 << 20), eoff = engine_cfg(2, 5, 0);
    for (int mode = 0; mode < 2; mode++) {
        lt_rig on, off;
        CHECK_MSG(lt_rig_new(&on, &eon, &fc, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(lt_rig_new(&off, &eoff, &fc, why, sizeof why) == 0, "%s", why);
        int32_t p[45];
        lt_prompt(p, 45, 80u + (uint32_t)mode, VOCAB);
        weft_request q = make_req(p, 45, 12, mode);
        lt_result a, b, c, d;
        run_both(&on, &off, &q, &a, "before the fault");
        /* The next restore fails after scribbling over the slot: the request prefills from 0. */
        weft_fake_set_snapshot_faults(&on.be, 0, 1);
        run_both(&on, &off, &q, &b, "failed restore");
        CHECK_EQ_INT(b.cached, 0);
        weft_engine_stats es;
        weft_engine_get_stats(on.e, &es);
        CHECK_EQ_INT(es.prompt_cache_failures, 1);
        /* Its own prefill saved the prompt end again: the next resend resumes. */
        run_both(&on, &off, &q, &c, "after the failed restore");
        CHECK_EQ_INT(c.cached, 44);
        /* A failed save: the first save of a new prompt (its grid point 8) is lost, nothing else. */
        int32_t p2[45];
        memcpy(p2, p, 8 * sizeof *p);
        p2[0] = (p[0] + 1) % VOCAB;
        lt_prompt(p2 + 1, 44, 90u + (uint32_t)mode, VOCAB);
        weft_fake_set_snapshot_faults(&on.be, 1, 0);
        q = make_req(p2, 45, 12, mode);
        run_both(&on, &off, &q, &d, "failed save");
        CHECK_EQ_INT(d.cached, 0);
        weft_engine_get_stats(on.e, &es);
        CHECK_EQ_INT(es.prompt_cache_failures, 2);
        /* A prompt sharing only 10 tokens with p2: 8 was never saved, so nothing resumes. */
        int32_t p3[30];
        memcpy(p3, p2, 10 * sizeof *p2);
        lt_prompt(p3 + 10, 20, 95u + (uint32_t)mode, VOCAB);
        p3[10] = (p2[10] + 1) % VOCAB;
        q = make_req(p3, 30, 6, mode);
        run_both(&on, &off, &q, &d, "after the failed save");
        CHECK_EQ_INT(d.cached, 0);
        q = make_req(p2, 45, 12, mode);
        run_both(&on, &off, &q, &d, "resend after the failed save");
        CHECK_EQ_INT(d.cached, 44);
        weft_fake_stats fs;
        lt_rig_free(&on, &fs);
        CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
        CHECK_EQ_INT(fs.snapshot_faults, 2);
        CHECK_EQ_INT(fs.open_slots, 0);
        check_fake_clean(&off);
    }
}

/* ---- a backend without snapshots ---- */
static void test_no_snapshot_backend(void) {
    char why[256];
    weft_fake_config fc = fake_cfg();
    weft_backend fake;
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &fake, &err) == WEFT_OK);
    weft_backend_ops ops = *fake.ops;
    ops.snapshot_bytes = NULL;
    ops.save = NULL;
    ops.restore = NULL;
    weft_backend be = fake;
    be.ops = &ops;
    weft_engine_config ec = engine_cfg(1, 0, (size_t)1 << 20);
    weft_engine *e = NULL;
    CHECK_MSG(weft_engine_new(&ec, &be, &e, &err) == WEFT_OK, "%s", err.msg);
    CHECK(weft_engine_start(e, &err) == WEFT_OK);
    int32_t p[20];
    lt_prompt(p, 20, 99, VOCAB);
    weft_request q = make_req(p, 20, 8, 0);
    for (int i = 0; i < 2; i++) {
        weft_request_handle *h = NULL;
        CHECK(weft_engine_submit(e, &q, &h, &err) == WEFT_OK);
        lt_result r;
        lt_collect(h, &r);
        weft_request_release(h);
        CHECK_EQ_INT(r.cached, 0);
        CHECK_MSG(lt_check_oracle(&fc, &q, &r, EOS, 1, false, why, sizeof why) == 0, "%s", why);
    }
    weft_engine_stats es;
    weft_engine_get_stats(e, &es);
    CHECK_EQ_INT(es.prompt_cache_budget, 0);
    CHECK_EQ_INT(es.prompt_cache_lookups, 0);
    weft_engine_free(e);
    fake.ops->destroy(fake.self);
    /* A bad grid is refused. */
    CHECK(weft_fake_backend_new(&fc, &fake, &err) == WEFT_OK);
    ec.prompt_cache_grid = -1;
    CHECK(weft_engine_new(&ec, &fake, &e, &err) == WEFT_EINVAL);
    CHECK(strstr(err.msg, "prompt_cache_grid") != NULL);
    fake.ops->destroy(fake.self);
}

int main(void) {
    test_resumed_equals_fresh();
    test_grid_saves();
    test_eviction();
    test_resumed_entry_pinned();
    test_failed_restore_and_save();
    test_no_snapshot_backend();
    return check_report("test_lanes_cache");
}
