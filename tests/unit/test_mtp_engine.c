/* test_mtp_engine.c — MTP drafts through the lane engine on the CPU backend (SPEC §4.3.4–5, §4.5 (b)), for
 * the fixtures with a head (qwen3_5, qwen3_5_moe, nemotron_h_moe), greedy and seeded (T 0.8, top-p 0.9,
 * seed 7):
 * - drafted == serial: each reply equals its "draft": false run, with drafts proposed by the head (> 0; the
 *   random heads are mostly wrong, so most windows are rolled back);
 * - resumed == fresh with the head on: a resend and a second turn resume from the prompt cache, reply the
 *   same, and — since snapshots carry the head's state — propose exactly the drafts of a run without the
 *   cache (same drafted and accepted counts);
 * - max_model_draft = -1 turns the head off (no drafter: no drafts at all). */
#include "check.h"
#include "test_lanes_util.h"
#include "weft/model.h"

#include <stdlib.h>

#define CTX 192

/* Every proposal the head made for the request being run: (pending position, tokens), in order. */
#define LOG_MAX 4096
typedef struct draft_log {
    int n;
    int32_t rec[LOG_MAX]; /* per call: position c, count k, then k tokens */
} draft_log;

typedef struct rig {
    weft_backend be;    /* what the engine drives: the CPU backend's ops with draft recorded */
    weft_backend inner; /* the CPU backend */
    weft_backend_ops ops;
    draft_log log;
    weft_engine *e;
} rig;

static weft_status logged_draft(void *self, int slot, const int32_t *seq, int n_tokens, int max_n,
                                int32_t *out, int *n_out, weft_err *err) {
    rig *g = self;
    weft_status st = g->inner.ops->draft(g->inner.self, slot, seq, n_tokens, max_n, out, n_out, err);
    draft_log *l = &g->log;
    if (st == WEFT_OK && l->n + 2 + *n_out <= LOG_MAX) {
        l->rec[l->n++] = n_tokens - 1;
        l->rec[l->n++] = *n_out;
        for (int i = 0; i < *n_out; i++) l->rec[l->n++] = out[i];
    }
    return st;
}

/* The other ops go straight to the CPU backend (self is the rig: forward its inner self). */
static weft_status w_open(void *self, int slot, int cap, weft_err *err) {
    rig *g = self;
    return g->inner.ops->open(g->inner.self, slot, cap, err);
}
static weft_status w_forward(void *self, weft_segment *segs, int n, weft_err *err) {
    rig *g = self;
    return g->inner.ops->forward(g->inner.self, segs, n, err);
}
static weft_status w_keep(void *self, int slot, int len, weft_err *err) {
    rig *g = self;
    return g->inner.ops->keep(g->inner.self, slot, len, err);
}
static void w_release(void *self, int slot) {
    rig *g = self;
    g->inner.ops->release(g->inner.self, slot);
}
static void w_memory(void *self, size_t *used, size_t *free_bytes) {
    rig *g = self;
    g->inner.ops->memory(g->inner.self, used, free_bytes);
}
static size_t w_snapshot_bytes(void *self, int pos) {
    rig *g = self;
    return g->inner.ops->snapshot_bytes(g->inner.self, pos);
}
static weft_status w_save(void *self, int slot, int pos, void *dst, size_t bytes, weft_err *err) {
    rig *g = self;
    return g->inner.ops->save(g->inner.self, slot, pos, dst, bytes, err);
}
static weft_status w_restore(void *self, int slot, int pos, const void *src, size_t bytes, weft_err *err) {
    rig *g = self;
    return g->inner.ops->restore(g->inner.self, slot, pos, src, bytes, err);
}

/* head: drafts from the model's head; cache: prompt cache on (grid 8). */
static int rig_new(rig *g, const weft_model *m, bool head, bool cache) {
    weft_err err = {0};
    memset(g, 0, sizeof *g);
    weft_backend_opts bo = {.kind = "cpu", .threads = 2, .max_slots = 2, .max_rows = 64, .max_context = CTX};
    if (weft_model_backend(m, &bo, &g->inner, &err) != WEFT_OK) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return -1;
    }
    g->ops = (weft_backend_ops){.name = "logged-cpu",
                                .open = w_open,
                                .forward = w_forward,
                                .keep = w_keep,
                                .release = w_release,
                                .memory = w_memory,
                                .snapshot_bytes = w_snapshot_bytes,
                                .save = w_save,
                                .restore = w_restore,
                                .draft = g->inner.ops->draft ? logged_draft : NULL};
    g->be = g->inner;
    g->be.ops = &g->ops;
    g->be.self = g;
    weft_engine_config ec = {.parallel = 2,
                             .max_queue = 16,
                             .prefill_chunk = 5,
                             .capacity = CTX,
                             .eos_ids = m->cfg.eos_token_ids,
                             .n_eos = m->cfg.n_eos,
                             .max_draft = 4,
                             .max_model_draft = head ? 0 : -1};
    if (cache) {
        ec.prompt_cache_bytes = (size_t)64 << 20;
        ec.prompt_cache_grid = 8;
    }
    if (weft_engine_new(&ec, &g->be, &g->e, &err) != WEFT_OK || weft_engine_start(g->e, &err) != WEFT_OK) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void rig_free(rig *g) {
    weft_engine_free(g->e);
    if (g->inner.ops) g->inner.ops->destroy(g->inner.self);
}

static void run(rig *g, const weft_request *q, lt_result *res) {
    weft_request_handle *h = NULL;
    weft_err err = {0};
    memset(res, 0, sizeof *res);
    g->log.n = 0;
    CHECK_MSG(weft_engine_submit(g->e, q, &h, &err) == WEFT_OK, "%s", err.msg);
    if (!h) return;
    lt_collect(h, res);
    weft_request_release(h);
    CHECK_MSG(res->protocol_error[0] == 0, "%s", res->protocol_error);
    CHECK_MSG(res->n >= 1, "no tokens: %s", res->message);
}

static weft_request make_req(const int32_t *p, int n, int max_tokens, int mode, bool draft) {
    weft_request r = {
        .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = true, .draft = draft};
    r.sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
    if (mode) r.sampling.temperature = 0.8, r.sampling.top_p = 0.9, r.sampling.seed = 7;
    return r;
}

typedef struct rigs {
    rig cached;   /* head + prompt cache */
    rig fresh;    /* head, no cache */
    rig serial;   /* no drafts, no cache: the reference */
    rig headless; /* max_model_draft -1, no drafter */
} rigs;

/* q through every rig: same tokens everywhere; the cached run's drafts equal the fresh run's. Returns the
 * cached run's cached_tokens. */
static int all(rigs *r, const weft_request *q, lt_result *res, const char *what) {
    lt_result fresh, plain, off;
    char why[256];
    run(&r->cached, q, res);
    run(&r->fresh, q, &fresh);
    weft_request s = *q;
    s.draft = false;
    run(&r->serial, &s, &plain);
    run(&r->headless, q, &off);
    CHECK_MSG(lt_same(res, &plain, why, sizeof why) == 0, "%s: drafted + cached != serial: %s", what, why);
    CHECK_MSG(lt_same(&fresh, &plain, why, sizeof why) == 0, "%s: drafted != serial: %s", what, why);
    CHECK_MSG(lt_same(&off, &plain, why, sizeof why) == 0, "%s: head off != serial: %s", what, why);
    CHECK_MSG(res->stats.drafted == fresh.stats.drafted && res->stats.accepted == fresh.stats.accepted,
              "%s: resumed run drafted %d / accepted %d, fresh run %d / %d", what, res->stats.drafted,
              res->stats.accepted, fresh.stats.drafted, fresh.stats.accepted);
    /* the head's every proposal, position by position, is the same with and without the cache */
    CHECK_MSG(r->cached.log.n == r->fresh.log.n &&
                  !memcmp(r->cached.log.rec, r->fresh.log.rec, (size_t)r->fresh.log.n * sizeof(int32_t)),
              "%s: the resumed stream's proposals differ from the fresh one's (%d vs %d log entries)", what,
              r->cached.log.n, r->fresh.log.n);
    CHECK(r->fresh.log.n > 0 && r->fresh.log.n < LOG_MAX);
    CHECK_MSG(fresh.stats.drafted > 0, "%s: the head proposed nothing", what);
    CHECK_EQ_INT(plain.stats.drafted, 0);
    CHECK_EQ_INT(off.stats.drafted, 0);
    CHECK_EQ_INT(fresh.cached, 0);
    return res->cached;
}

static void test_fixture(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "%sfixtures/%s", TEST_DATA, name);
    weft_model *m = NULL;
    weft_err err = {0};
    if (weft_model_load(dir, &m, &err) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", dir, err.msg);
        return;
    }
    int vocab = (int)m->cfg.vocab_size;
    for (int mode = 0; mode < 2; mode++) {
        rigs r;
        bool ok = rig_new(&r.cached, m, true, true) == 0 && rig_new(&r.fresh, m, true, false) == 0 &&
                  rig_new(&r.serial, m, false, false) == 0 && rig_new(&r.headless, m, false, false) == 0;
        CHECK_MSG(ok, "%s: rigs", name);
        if (!ok) break;
        CHECK_MSG(r.cached.be.ops->draft != NULL, "%s: the backend has no draft head", name);
        int32_t p1[40], p2[160];
        lt_prompt(p1, 30, 131u + (uint32_t)mode, vocab);
        lt_result a, b, c;
        weft_request q = make_req(p1, 30, 40, mode, true);
        CHECK_EQ_INT(all(&r, &q, &a, "first"), 0);
        CHECK_EQ_INT(all(&r, &q, &b, "resend"), 29);
        memcpy(p2, p1, 30 * sizeof *p1);
        memcpy(p2 + 30, a.tokens, (size_t)a.n * sizeof *p2);
        lt_prompt(p2 + 30 + a.n, 9, 140u + (uint32_t)mode, vocab);
        q = make_req(p2, 30 + a.n + 9, 40, mode, true);
        CHECK_EQ_INT(all(&r, &q, &c, "second turn"), 30 + a.n - 1);
        weft_engine_stats es;
        weft_engine_get_stats(r.fresh.e, &es);
        CHECK_MSG(es.drafted_total > es.accepted_total * 2, "%s: %llu drafted, %llu accepted", name,
                  (unsigned long long)es.drafted_total, (unsigned long long)es.accepted_total);
        fprintf(stderr, "test_mtp_engine: %s, %s: %llu drafted, %llu accepted, %llu rounds for %llu tokens\n",
                name, mode ? "seeded" : "greedy", (unsigned long long)es.drafted_total,
                (unsigned long long)es.accepted_total, (unsigned long long)es.rounds_total,
                (unsigned long long)es.generation_tokens_total);
        weft_engine_get_stats(r.cached.e, &es);
        CHECK_EQ_INT(es.prompt_cache_failures, 0);
        CHECK_EQ_INT(es.prompt_cache_hit_requests, 2);
        rig_free(&r.cached);
        rig_free(&r.fresh);
        rig_free(&r.serial);
        rig_free(&r.headless);
    }
    weft_model_free(m);
}

int main(void) {
    test_fixture("qwen3_5");
    test_fixture("qwen3_5_moe");
    test_fixture("nemotron_h_moe");
    return check_report("test_mtp_engine");
}
