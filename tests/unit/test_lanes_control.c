/* test_lanes_control.c — the lane core's control paths over the fake backend: cancel mid-prefill and
 * mid-decode, refusals at submit (over capacity, queue full, bad fields), backend failures (open, forward)
 * failing only their streams, shutdown (running cancelled, queued refused), release before finish. Every
 * surviving reply is checked token by token against the fake's oracle; the suite runs under ASan/LSan. */
#include "check.h"
#include "test_lanes_util.h"

#include <stdlib.h>
#include <time.h>

#define VOCAB 64

static const int32_t EOS[] = {3};

static weft_fake_config fake_cfg(void) {
    weft_fake_config fc = {.max_slots = 8, .max_rows = 64, .vocab_size = VOCAB, .salt = 9};
    return fc;
}

static weft_engine_config engine_cfg(int parallel, int max_queue, int chunk) {
    weft_engine_config ec = {.parallel = parallel,
                             .max_queue = max_queue,
                             .max_rows = 32,
                             .prefill_chunk = chunk,
                             .capacity = 300,
                             .eos_ids = EOS,
                             .n_eos = 1};
    return ec;
}

static weft_request make_req(const int32_t *prompt, int n_prompt, int max_tokens, int i) {
    weft_request r = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .ignore_eos = true};
    r.sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
    if (i % 2) r.sampling.temperature = 0.8, r.sampling.seed = 77u + (uint64_t)i;
    return r;
}

typedef struct rig {
    weft_fake_config fc;
    weft_backend be;
    weft_engine *e;
} rig;

static int rig_new(rig *g, const weft_engine_config *ec, double delay) {
    weft_err err;
    g->fc = fake_cfg();
    g->fc.forward_delay_s = delay;
    if (weft_fake_backend_new(&g->fc, &g->be, &err) != WEFT_OK) return -1;
    if (weft_engine_new(ec, &g->be, &g->e, &err) != WEFT_OK) {
        fprintf(stderr, "engine: %s\n", err.msg);
        g->be.ops->destroy(g->be.self);
        return -1;
    }
    return 0;
}

static void rig_free(rig *g) {
    weft_engine_free(g->e);
    weft_fake_stats fs;
    weft_fake_get_stats(&g->be, &fs);
    CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
    CHECK_EQ_INT(fs.open_slots, 0);
    CHECK_EQ_INT(fs.opens, fs.releases);
    g->be.ops->destroy(g->be.self);
}

static void check_oracle(const rig *g, const weft_request *req, const lt_result *res, bool early,
                         const char *what) {
    char why[256];
    CHECK_MSG(res->protocol_error[0] == 0, "%s: %s", what, res->protocol_error);
    CHECK_MSG(lt_check_oracle(&g->fc, req, res, EOS, 1, early, why, sizeof why) == 0, "%s: %s", what, why);
}

/* ---- cancel mid-prefill ---- */
typedef struct cancel_ctx {
    weft_request_handle *target;
    int target_prompt;
    int chunks_seen;
    int cancel_after;
} cancel_ctx;

static void cancel_hook(void *vctx, const weft_segment *segs, int n) {
    cancel_ctx *c = vctx;
    for (int i = 0; i < n; i++)
        if (segs[i].n_prompt == c->target_prompt && segs[i].n_draw == 0 &&
            ++c->chunks_seen == c->cancel_after)
            weft_engine_cancel(c->target);
}

static void test_cancel_mid_prefill(void) {
    rig g;
    weft_engine_config ec = engine_cfg(3, 4, 4);
    if (rig_new(&g, &ec, 0) != 0) {
        CHECK(0);
        return;
    }
    int32_t prompts[4][250];
    int n_prompt[4] = {240, 12, 30, 5};
    weft_request reqs[4];
    weft_request_handle *h[4] = {0};
    weft_err err;
    for (int i = 0; i < 4; i++) {
        lt_prompt(prompts[i], n_prompt[i], 100u + (uint32_t)i, VOCAB);
        reqs[i] = make_req(prompts[i], n_prompt[i], 20 + i, i);
        CHECK(weft_engine_submit(g.e, &reqs[i], &h[i], &err) == WEFT_OK);
    }
    /* The long prompt takes 60 chunks of 4; cancel it during its 3rd. Request 3 waits in the queue for a slot
     * and gets the one the cancel frees. */
    cancel_ctx cc = {.target = h[0], .target_prompt = 240, .cancel_after = 3};
    weft_fake_set_hook(&g.be, cancel_hook, &cc);
    CHECK(weft_engine_start(g.e, &err) == WEFT_OK);
    lt_result *res = calloc(4, sizeof *res);
    for (int i = 0; i < 4; i++) lt_collect(h[i], &res[i]);
    CHECK_EQ_INT(res[0].reason, WEFT_FINISH_CANCELLED);
    CHECK_EQ_INT(res[0].status, WEFT_ECANCELLED);
    CHECK_EQ_INT(res[0].n, 0);
    CHECK(!res[0].prefilled);
    CHECK_EQ_INT(res[0].stats.rounds, 3); /* the chunk in flight completes, no further chunk runs */
    CHECK_EQ_INT(cc.chunks_seen, 3);
    for (int i = 1; i < 4; i++) {
        CHECK_EQ_INT(res[i].reason, WEFT_FINISH_LENGTH);
        CHECK_EQ_INT(res[i].n, reqs[i].max_tokens);
        check_oracle(&g, &reqs[i], &res[i], false, "beside a cancelled prefill");
    }
    weft_engine_cancel(h[0]); /* after FINISHED: a no-op */
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    CHECK_EQ_INT(es.running, 0);
    CHECK_EQ_INT(es.requests_finished_total, 4);
    for (int i = 0; i < 4; i++) weft_request_release(h[i]);
    rig_free(&g);
    free(res);
}

/* ---- cancel mid-decode, and release before finish ---- */
static void test_cancel_mid_decode(void) {
    rig g;
    weft_engine_config ec = engine_cfg(2, 4, 0);
    if (rig_new(&g, &ec, 0.005) != 0) {
        CHECK(0);
        return;
    }
    CHECK(weft_engine_start(g.e, NULL) == WEFT_OK);
    int32_t prompts[3][20];
    weft_request reqs[3];
    weft_request_handle *h[3] = {0};
    weft_err err;
    for (int i = 0; i < 3; i++) {
        lt_prompt(prompts[i], 20, 200u + (uint32_t)i, VOCAB);
        reqs[i] = make_req(prompts[i], 20, i == 1 ? 30 : 250, i);
        CHECK(weft_engine_submit(g.e, &reqs[i], &h[i], &err) == WEFT_OK);
    }
    /* Request 0: read until 5 tokens arrived, then cancel. */
    lt_result *res = calloc(3, sizeof *res);
    lt_collect_more(h[0], &res[0], 5);
    CHECK(res[0].n >= 5);
    /* Occupancy (kv_cache_usage): request 0 alone holds its 20 prompt rows and 4+ reply rows of 2 x 300. */
    weft_engine_stats es;
    double until = weft_now() + 10;
    do weft_engine_get_stats(g.e, &es);
    while (es.kv_rows_used < 24 && weft_now() < until);
    CHECK(es.kv_rows_used >= 24 && es.kv_rows_used <= 2 * 300);
    CHECK(es.kv_rows_capacity == 2 * 300 && es.parallel == 2 && es.max_queue == 4);
    weft_engine_cancel(h[0]);
    weft_engine_cancel(h[0]); /* twice is fine */
    /* Request 2: released without reading anything: that cancels it, and its memory goes when the engine
     * lets go (LSan checks). */
    weft_request_release(h[2]);
    h[2] = NULL;
    lt_collect_more(h[0], &res[0], 0);
    lt_collect(h[1], &res[1]);
    CHECK_EQ_INT(res[0].reason, WEFT_FINISH_CANCELLED);
    CHECK(res[0].n >= 5 && res[0].n < 250);
    CHECK_EQ_INT(res[0].stats.completion_tokens, res[0].n);
    CHECK_STR(res[0].message, "cancelled");
    CHECK_EQ_INT(res[1].reason, WEFT_FINISH_LENGTH);
    check_oracle(&g, &reqs[1], &res[1], false, "beside a cancelled decode");
    /* Tokens delivered up to the cancel are a prefix of the oracle's reply. */
    check_oracle(&g, &reqs[0], &res[0], true, "cancelled decode");
    /* The engine goes idle with both slots free, and no rows held. */
    double deadline = weft_now() + 10;
    do {
        weft_engine_get_stats(g.e, &es);
        if (es.running == 0 && es.kv_rows_used == 0) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    } while (weft_now() < deadline);
    CHECK_EQ_INT(es.running, 0);
    CHECK(es.kv_rows_used == 0);
    CHECK_EQ_INT(es.requests_finished_total, 3);
    for (int i = 0; i < 3; i++) weft_request_release(h[i]);
    rig_free(&g);
    free(res);
}

/* ---- refusals at submit ---- */
static void test_refusals(void) {
    rig g;
    weft_engine_config ec = engine_cfg(2, 1, 8);
    if (rig_new(&g, &ec, 0) != 0) {
        CHECK(0);
        return;
    }
    int32_t prompt[290];
    lt_prompt(prompt, 290, 5, VOCAB);
    weft_request_handle *h[4] = {0}, *x = NULL;
    weft_err err = {0};
    weft_request over = make_req(prompt, 280, 21, 0); /* 301 > capacity 300 */
    CHECK(weft_engine_submit(g.e, &over, &x, &err) == WEFT_ERANGE);
    CHECK(x == NULL);
    CHECK(strstr(err.msg, "300") != NULL && strstr(err.msg, "301") != NULL);
    weft_request fits = make_req(prompt, 280, 20, 0); /* exactly the capacity */
    weft_request bad = make_req(prompt, 10, 5, 0);
    int32_t bad_prompt[2] = {1, VOCAB};
    bad.prompt = bad_prompt;
    bad.n_prompt = 2;
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_EINVAL);
    bad = make_req(prompt, 0, 5, 0);
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_EINVAL);
    bad = make_req(prompt, 5, 0, 0);
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_EINVAL);
    bad = make_req(prompt, 5, 5, 0);
    bad.sampling.logprobs = 21;
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_EINVAL);
    weft_logit_bias lb = {.id = VOCAB + 3, .bias = 1};
    bad.sampling.logprobs = -1;
    bad.sampling.logit_bias = &lb;
    bad.sampling.n_logit_bias = 1;
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_ERANGE);
    CHECK(strstr(err.msg, "logit_bias") != NULL);
    bad.sampling.n_logit_bias = 0;
    bad.sampling.top_p = 0;
    CHECK(weft_engine_submit(g.e, &bad, &x, &err) == WEFT_EINVAL);
    CHECK(strstr(err.msg, "top_p") != NULL);
    /* parallel 2 + max_queue 1: the 4th is refused busy. */
    weft_request reqs[4];
    for (int i = 0; i < 4; i++) {
        reqs[i] = i == 0 ? fits : make_req(prompt + i, 9 + i, 12, i);
        weft_status st = weft_engine_submit(g.e, &reqs[i], &h[i], &err);
        CHECK_EQ_INT(st, i < 3 ? WEFT_OK : WEFT_EBUSY);
    }
    CHECK(strstr(err.msg, "busy") != NULL);
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    CHECK_EQ_INT(es.waiting, 3);
    CHECK(weft_engine_start(g.e, &err) == WEFT_OK);
    CHECK(weft_engine_start(g.e, &err) == WEFT_EINVAL);
    lt_result *res = calloc(3, sizeof *res);
    for (int i = 0; i < 3; i++) {
        lt_collect(h[i], &res[i]);
        CHECK_EQ_INT(res[i].reason, WEFT_FINISH_LENGTH);
        check_oracle(&g, &reqs[i], &res[i], false, "beside refusals");
    }
    CHECK_EQ_INT(res[0].n, 20);
    /* Room again: a new submission is accepted. */
    CHECK(weft_engine_submit(g.e, &reqs[3], &h[3], &err) == WEFT_OK);
    lt_result r3;
    lt_collect(h[3], &r3);
    check_oracle(&g, &reqs[3], &r3, false, "after refusals");
    for (int i = 0; i < 4; i++) weft_request_release(h[i]);
    rig_free(&g);
    free(res);
}

/* ---- backend failures fail only their streams ---- */
static void test_backend_failures(void) {
    rig g;
    weft_engine_config ec = engine_cfg(3, 8, 8);
    if (rig_new(&g, &ec, 0) != 0) {
        CHECK(0);
        return;
    }
    int32_t prompts[3][16];
    weft_request reqs[3];
    weft_request_handle *h[3] = {0};
    weft_err err;
    for (int i = 0; i < 3; i++) {
        lt_prompt(prompts[i], 16, 300u + (uint32_t)i, VOCAB);
        reqs[i] = make_req(prompts[i], 16, 10, i);
        CHECK(weft_engine_submit(g.e, &reqs[i], &h[i], &err) == WEFT_OK);
    }
    weft_fake_set_faults(&g.be, 2, 0); /* the second open fails */
    CHECK(weft_engine_start(g.e, &err) == WEFT_OK);
    lt_result *res = calloc(3, sizeof *res);
    for (int i = 0; i < 3; i++) lt_collect(h[i], &res[i]);
    CHECK_EQ_INT(res[1].reason, WEFT_FINISH_REFUSED);
    CHECK_EQ_INT(res[1].status, WEFT_ENOMEM);
    CHECK(strstr(res[1].message, "injected") != NULL);
    CHECK_EQ_INT(res[1].n, 0);
    CHECK(!res[1].prefilled);
    check_oracle(&g, &reqs[0], &res[0], false, "beside a refused open");
    check_oracle(&g, &reqs[2], &res[2], false, "beside a refused open");
    for (int i = 0; i < 3; i++) weft_request_release(h[i]);

    rig_free(&g);

    /* A failing forward ends the streams in it with the backend's words; the engine serves the next ones.
     * Both are queued before start so that they share rounds from the first. */
    if (rig_new(&g, &ec, 0) != 0) {
        CHECK(0);
        free(res);
        return;
    }
    weft_fake_set_faults(&g.be, 0, 4);
    for (int i = 0; i < 2; i++) CHECK(weft_engine_submit(g.e, &reqs[i], &h[i], &err) == WEFT_OK);
    CHECK(weft_engine_start(g.e, &err) == WEFT_OK);
    for (int i = 0; i < 2; i++) {
        lt_collect(h[i], &res[i]);
        CHECK_MSG(res[i].reason == WEFT_FINISH_ERROR, "#%d: %s %d tokens, %d rounds", i,
                  weft_finish_reason_name(res[i].reason), res[i].n, res[i].stats.rounds);
        CHECK_EQ_INT(res[i].status, WEFT_EIO);
        CHECK(strstr(res[i].message, "injected forward failure") != NULL);
        check_oracle(&g, &reqs[i], &res[i], true, "before the failed forward");
        weft_request_release(h[i]);
    }
    CHECK(weft_engine_submit(g.e, &reqs[2], &h[2], &err) == WEFT_OK);
    lt_collect(h[2], &res[2]);
    CHECK_EQ_INT(res[2].reason, WEFT_FINISH_LENGTH);
    check_oracle(&g, &reqs[2], &res[2], false, "after the failed forward");
    weft_request_release(h[2]);
    rig_free(&g);
    free(res);
}

/* ---- shutdown ---- */
static void test_shutdown(void) {
    rig g;
    weft_engine_config ec = engine_cfg(2, 4, 8);
    if (rig_new(&g, &ec, 0.005) != 0) {
        CHECK(0);
        return;
    }
    int32_t prompts[5][24];
    weft_request reqs[5];
    weft_request_handle *h[5] = {0};
    weft_err err;
    for (int i = 0; i < 5; i++) {
        lt_prompt(prompts[i], 24, 400u + (uint32_t)i, VOCAB);
        reqs[i] = make_req(prompts[i], 24, 250, i);
        CHECK(weft_engine_submit(g.e, &reqs[i], &h[i], &err) == WEFT_OK);
    }
    CHECK(weft_engine_start(g.e, &err) == WEFT_OK);
    lt_result *res = calloc(5, sizeof *res);
    lt_collect_more(h[1], &res[1], 1);
    CHECK(res[1].n >= 1);
    weft_engine_stop(g.e);
    weft_engine_stop(g.e); /* idempotent */
    weft_request_handle *late = NULL;
    CHECK(weft_engine_submit(g.e, &reqs[0], &late, &err) == WEFT_EBUSY);
    CHECK(strstr(err.msg, "shutting down") != NULL);
    for (int i = 0; i < 5; i++) {
        if (i == 1)
            lt_collect_more(h[i], &res[i], 0);
        else
            lt_collect(h[i], &res[i]);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(res[i].reason, WEFT_FINISH_CANCELLED);
        CHECK_STR(res[i].message, "server shutting down");
        CHECK(res[i].stats.completion_tokens < 250);
        check_oracle(&g, &reqs[i], &res[i], true, "cancelled by shutdown");
    }
    CHECK(res[0].n > 0);
    for (int i = 2; i < 5; i++) {
        CHECK_EQ_INT(res[i].reason, WEFT_FINISH_REFUSED);
        CHECK_EQ_INT(res[i].status, WEFT_EBUSY);
        CHECK_EQ_INT(res[i].n, 0);
        CHECK(!res[i].prefilled);
    }
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    CHECK_EQ_INT(es.running, 0);
    CHECK_EQ_INT(es.waiting, 0);
    CHECK_EQ_INT(es.requests_finished_total, 5);
    for (int i = 0; i < 5; i++) weft_engine_cancel(h[i]); /* after stop: no-ops */
    /* Handles may outlive the engine (they are all finished); release afterwards. */
    rig_free(&g);
    for (int i = 0; i < 5; i++) weft_request_release(h[i]);
    free(res);

    /* An engine stopped before it ever started refuses its queue. */
    if (rig_new(&g, &ec, 0) != 0) {
        CHECK(0);
        return;
    }
    CHECK(weft_engine_submit(g.e, &reqs[0], &h[0], &err) == WEFT_OK);
    weft_engine_stop(g.e);
    lt_result r0;
    lt_collect(h[0], &r0);
    CHECK_EQ_INT(r0.reason, WEFT_FINISH_REFUSED);
    CHECK(weft_engine_start(g.e, &err) == WEFT_EINVAL);
    weft_request_release(h[0]);
    rig_free(&g);
}

static void test_config_errors(void) {
    weft_fake_config fc = fake_cfg();
    weft_backend be;
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &be, &err) == WEFT_OK);
    weft_engine *e = NULL;
    weft_engine_config ec = engine_cfg(9, 0, 0); /* 9 > 8 slots */
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_EINVAL && e == NULL);
    CHECK(strstr(err.msg, "parallel") != NULL);
    ec = engine_cfg(2, 0, 40); /* chunk past max_rows 32 */
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_EINVAL);
    ec = engine_cfg(2, 0, 0);
    ec.max_draft = 32;
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_EINVAL);
    ec = engine_cfg(2, 0, 0);
    ec.max_rows = 65;
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_EINVAL);
    int32_t bad_eos = VOCAB;
    ec = engine_cfg(2, 0, 0);
    ec.eos_ids = &bad_eos;
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_EINVAL);
    ec = engine_cfg(2, 0, 0);
    CHECK(weft_engine_new(&ec, &be, &e, &err) == WEFT_OK);
    weft_engine_free(e); /* never started, nothing queued */
    weft_engine_free(NULL);
    weft_request_release(NULL);
    CHECK_STR(weft_finish_reason_name(WEFT_FINISH_REFUSED), "refused");
    be.ops->destroy(be.self);
}

int main(void) {
    test_cancel_mid_prefill();
    test_cancel_mid_decode();
    test_refusals();
    test_backend_failures();
    test_shutdown();
    test_config_errors();
    return check_report("test_lanes_control");
}
