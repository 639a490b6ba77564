/* test_lanes.c — the lane core's exactness invariants over the history-sensitive fake backend (SPEC §4.3):
 * concurrent == solo, drafted == serial, prefill chunk sizes give identical tokens; every reply is also
 * replayed token by token against the fake's serial oracle, and the stop hook ends replies where it says. */
#include "check.h"
#include "test_lanes_util.h"

#include <stdlib.h>

#define VOCAB   64
#define N_CASES 16

static const int32_t EOS[] = {3, 17};

typedef struct cases {
    int32_t prompts[N_CASES][160];
    weft_logit_bias bias[2];
    weft_request req[N_CASES];
} cases;

static weft_fake_config fake_cfg(void) {
    weft_fake_config fc = {.max_slots = 16, .max_rows = 128, .vocab_size = VOCAB, .salt = 42};
    return fc;
}

static weft_engine_config engine_cfg(int parallel, int max_rows, int chunk) {
    weft_engine_config ec = {.parallel = parallel,
                             .max_queue = 32,
                             .max_rows = max_rows,
                             .prefill_chunk = chunk,
                             .capacity = 256,
                             .eos_ids = EOS,
                             .n_eos = 2};
    return ec;
}

/* 16 requests: prompt lengths 1..~150, greedy and seeded, penalties, bias, logprobs, ignore_eos mixed. */
static void make_cases(cases *c) {
    c->bias[0] = (weft_logit_bias){.id = 5, .bias = 2.5};
    c->bias[1] = (weft_logit_bias){.id = 9, .bias = -100};
    for (int i = 0; i < N_CASES; i++) {
        int n_prompt = i == 7 ? 150 : 1 + (i * 13) % 41;
        lt_prompt(c->prompts[i], n_prompt, (uint32_t)i + 1, VOCAB);
        weft_request *r = &c->req[i];
        *r = (weft_request){.prompt = c->prompts[i], .n_prompt = n_prompt, .max_tokens = 10 + (i * 7) % 31};
        r->sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
        if (i % 2) {
            r->sampling.temperature = 0.6 + 0.1 * (i % 5);
            r->sampling.seed = 1000u + (uint64_t)i * 7919u;
        }
        if (i % 4 == 1) r->sampling.frequency_penalty = 0.7;
        if (i % 4 == 2) r->sampling.presence_penalty = 0.5, r->sampling.repetition_penalty = 1.3;
        if (i % 5 == 3) r->sampling.logit_bias = c->bias, r->sampling.n_logit_bias = 2;
        if (i % 3 == 0) r->ignore_eos = true;
        if (i % 6 == 5) r->sampling.logprobs = 3;
        r->draft = true;
    }
}

static void check_all_oracle(const weft_fake_config *fc, const cases *c, const lt_result *res, int n,
                             const char *what) {
    char why[256];
    for (int i = 0; i < n; i++) {
        CHECK_MSG(res[i].protocol_error[0] == 0, "%s #%d: %s", what, i, res[i].protocol_error);
        CHECK_MSG(res[i].n >= 1, "%s #%d: no tokens (%s: %s)", what, i,
                  weft_finish_reason_name(res[i].reason), res[i].message);
        CHECK_MSG(lt_check_oracle(fc, &c->req[i], &res[i], EOS, 2, false, why, sizeof why) == 0, "%s #%d: %s",
                  what, i, why);
    }
}

static void test_concurrent_equals_solo(void) {
    cases *c = calloc(1, sizeof *c);
    make_cases(c);
    weft_fake_config fc = fake_cfg();
    lt_result *together = calloc(N_CASES, sizeof *together), *solo = calloc(N_CASES, sizeof *solo);
    char why[256];
    /* Together: 6 at a time, small chunks and a tight row budget so prefills and decodes share rounds and
     * streams wait in the queue. */
    weft_engine_config ec = engine_cfg(6, 24, 5);
    weft_fake_stats fs;
    weft_engine_stats es;
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, together, &fs, &es, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(fs.max_segments > 1, "rounds were never shared (max %d segments)", fs.max_segments);
    CHECK_EQ_INT(fs.violations, 0);
    CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
    CHECK_EQ_INT(fs.open_slots, 0);
    CHECK_EQ_INT(fs.opens, N_CASES);
    CHECK_EQ_INT(fs.releases, N_CASES);
    CHECK(fs.max_call_rows <= 24);
    uint64_t gen = 0, prompt = 0;
    for (int i = 0; i < N_CASES; i++) gen += (uint64_t)together[i].n, prompt += (uint64_t)c->req[i].n_prompt;
    CHECK_EQ_INT(es.generation_tokens_total, gen);
    CHECK_EQ_INT(es.prompt_tokens_total, prompt);
    CHECK_EQ_INT(es.requests_finished_total, N_CASES);
    CHECK_EQ_INT(es.running, 0);
    CHECK_EQ_INT(es.waiting, 0);
    CHECK_EQ_INT(es.rounds_total, fs.forwards);
    check_all_oracle(&fc, c, together, N_CASES, "together");

    /* Solo: each request alone, whole-prompt prefill. */
    weft_engine_config ec1 = engine_cfg(1, 128, 0);
    for (int i = 0; i < N_CASES; i++) {
        CHECK_MSG(lt_run(&ec1, &fc, &c->req[i], 1, &solo[i], &fs, NULL, why, sizeof why) == 0, "%s", why);
        CHECK_EQ_INT(fs.violations, 0);
        CHECK_MSG(lt_same(&together[i], &solo[i], why, sizeof why) == 0, "concurrent != solo #%d: %s", i,
                  why);
        CHECK_EQ_INT(together[i].stats.prompt_tokens, c->req[i].n_prompt);
        CHECK(together[i].stats.rounds >= together[i].n);
        CHECK(together[i].stats.ttft_seconds >= 0 && together[i].stats.decode_seconds >= 0);
    }
    /* The mix must exercise both finish reasons and logprobs. */
    int stops = 0, lengths = 0, lps = 0;
    for (int i = 0; i < N_CASES; i++) {
        stops += together[i].reason == WEFT_FINISH_STOP;
        lengths += together[i].reason == WEFT_FINISH_LENGTH;
        lps += together[i].has_lp;
    }
    CHECK_MSG(stops > 0 && lengths > 0, "stops %d lengths %d", stops, lengths);
    CHECK(lps > 0);
    free(together);
    free(solo);
    free(c);
}

/* ---- drafting ---- */

/* A drafter that knows the requests (found by their prompt): it proposes the oracle's tokens, except that
 * about one in three positions is deliberately wrong, so windows accept some drafts and reject others. */
typedef struct drafter_ctx {
    const cases *c;
    weft_backend oracle;
    int calls;
    int resets;
    int bad; /* when > 0, every call returns out-of-vocab ids (must be ignored) */
} drafter_ctx;

static int fake_propose(void *vctx, int slot, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *out,
                        int max_n) {
    drafter_ctx *d = vctx;
    d->calls++;
    if (d->bad) {
        for (int i = 0; i < max_n; i++) out[i] = VOCAB + i;
        return max_n;
    }
    const weft_request *req = NULL;
    for (int i = 0; i < N_CASES && !req; i++)
        if (d->c->req[i].n_prompt == n_prompt &&
            memcmp(d->c->req[i].prompt, tokens, (size_t)n_prompt * sizeof *tokens) == 0)
            req = &d->c->req[i];
    if (!req) return 0;
    int32_t seq[512];
    memcpy(seq, tokens, (size_t)n_tokens * sizeof *seq);
    int n = max_n < 4 ? max_n : 4;
    for (int i = 0; i < n; i++) {
        int32_t t = weft_fake_next(&d->oracle, seq, n_prompt, n_tokens - 1 + i, &req->sampling, NULL);
        if ((uint32_t)(n_tokens * 31 + i * 17 + slot) % 3 == 0) t = (t + 1) % VOCAB;
        seq[n_tokens + i] = t;
        out[i] = t;
    }
    return n;
}

static void fake_reset(void *vctx, int slot) {
    drafter_ctx *d = vctx;
    if (slot >= 0) d->resets++;
}

static void test_drafted_equals_serial(void) {
    cases *c = calloc(1, sizeof *c);
    make_cases(c);
    weft_fake_config fc = fake_cfg();
    drafter_ctx dctx = {.c = c};
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &dctx.oracle, &err) == WEFT_OK);
    weft_drafter drafter = {.ctx = &dctx, .propose = fake_propose, .reset = fake_reset};
    lt_result *drafted = calloc(N_CASES, sizeof *drafted), *serial = calloc(N_CASES, sizeof *serial);
    char why[256];
    weft_engine_config ec = engine_cfg(5, 20, 6);
    ec.max_draft = 4;
    ec.drafter = &drafter;
    weft_fake_stats fs;
    weft_engine_stats es;
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, drafted, &fs, &es, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
    CHECK_EQ_INT(fs.open_slots, 0);
    CHECK(fs.keeps > 0);
    CHECK(dctx.calls > 0);
    CHECK_EQ_INT(dctx.resets, N_CASES); /* once per admission */
    CHECK_MSG(es.drafted_total > 0 && es.accepted_total > 0 && es.accepted_total < es.drafted_total,
              "drafted %llu accepted %llu", (unsigned long long)es.drafted_total,
              (unsigned long long)es.accepted_total);
    uint64_t d_sum = 0, a_sum = 0;
    for (int i = 0; i < N_CASES; i++)
        d_sum += (uint64_t)drafted[i].stats.drafted, a_sum += (uint64_t)drafted[i].stats.accepted;
    CHECK_EQ_INT(d_sum, es.drafted_total);
    CHECK_EQ_INT(a_sum, es.accepted_total);
    check_all_oracle(&fc, c, drafted, N_CASES, "drafted");

    for (int i = 0; i < N_CASES; i++) c->req[i].draft = false;
    int calls_before = dctx.calls;
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, serial, &fs, &es, why, sizeof why) == 0, "%s", why);
    CHECK_EQ_INT(dctx.calls, calls_before); /* draft: false never asks the drafter */
    CHECK_EQ_INT(es.drafted_total, 0);
    int fewer_rounds = 0;
    for (int i = 0; i < N_CASES; i++) {
        CHECK_MSG(lt_same(&drafted[i], &serial[i], why, sizeof why) == 0, "drafted != serial #%d: %s", i,
                  why);
        fewer_rounds += drafted[i].stats.rounds < serial[i].stats.rounds;
    }
    CHECK_MSG(fewer_rounds > 0, "drafting never saved a round");

    /* A drafter proposing out-of-vocab ids is ignored: same tokens, no draft rows fed. */
    for (int i = 0; i < N_CASES; i++) c->req[i].draft = true;
    dctx.bad = 1;
    lt_result *bad = calloc(N_CASES, sizeof *bad);
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, bad, &fs, &es, why, sizeof why) == 0, "%s", why);
    CHECK_EQ_INT(es.drafted_total, 0);
    for (int i = 0; i < N_CASES; i++)
        CHECK_MSG(lt_same(&bad[i], &serial[i], why, sizeof why) == 0, "bad drafter #%d: %s", i, why);
    free(bad);
    dctx.oracle.ops->destroy(dctx.oracle.self);
    free(drafted);
    free(serial);
    free(c);
}

static void test_prefill_chunking(void) {
    cases *c = calloc(1, sizeof *c);
    make_cases(c);
    weft_fake_config fc = fake_cfg();
    /* Three streams: the 150-token prompt and two short ones, served together. */
    weft_request reqs[3] = {c->req[7], c->req[2], c->req[5]};
    const int chunks[] = {1, 3, 7, 64, 0};
    lt_result *res = calloc(5 * 3, sizeof *res);
    char why[256];
    for (int k = 0; k < 5; k++) {
        weft_engine_config ec = engine_cfg(3, 128, chunks[k]);
        weft_fake_stats fs;
        CHECK_MSG(lt_run(&ec, &fc, reqs, 3, &res[k * 3], &fs, NULL, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
        int chunk = chunks[k] ? chunks[k] : 128;
        int want_rounds = (150 + chunk - 1) / chunk + res[k * 3].n - 1; /* chunks, then one round per token */
        CHECK_MSG(res[k * 3].stats.rounds == want_rounds, "chunk %d: %d rounds, expected %d", chunks[k],
                  res[k * 3].stats.rounds, want_rounds);
        for (int i = 0; i < 3; i++) {
            CHECK_MSG(lt_same(&res[k * 3 + i], &res[i], why, sizeof why) == 0, "chunk %d stream %d: %s",
                      chunks[k], i, why);
            CHECK_MSG(lt_check_oracle(&fc, &reqs[i], &res[k * 3 + i], EOS, 2, false, why, sizeof why) == 0,
                      "chunk %d stream %d: %s", chunks[k], i, why);
        }
    }
    free(res);
    free(c);
}

/* Stop hook: end the reply at the first generated token that is a multiple of 7 after at least 3 tokens. */
static int stop_at_mult7(void *ctx, const int32_t *gen, int n) {
    int *calls = ctx;
    (*calls)++;
    return n >= 3 && gen[n - 1] % 7 == 0;
}

static void test_stop_hook(void) {
    cases *c = calloc(1, sizeof *c);
    make_cases(c);
    weft_fake_config fc = fake_cfg();
    drafter_ctx dctx = {.c = c};
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &dctx.oracle, &err) == WEFT_OK);
    weft_drafter drafter = {.ctx = &dctx, .propose = fake_propose};
    int calls[N_CASES] = {0};
    for (int i = 0; i < N_CASES; i++) {
        c->req[i].stop = stop_at_mult7;
        c->req[i].stop_ctx = &calls[i];
        c->req[i].ignore_eos = true;
        c->req[i].max_tokens = 40;
    }
    lt_result *res = calloc(N_CASES, sizeof *res), *serial = calloc(N_CASES, sizeof *serial);
    char why[256];
    weft_engine_config ec = engine_cfg(8, 40, 8);
    ec.max_draft = 4;
    ec.drafter = &drafter;
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, res, NULL, NULL, why, sizeof why) == 0, "%s", why);
    int stopped = 0;
    for (int i = 0; i < N_CASES; i++) {
        CHECK_MSG(lt_check_oracle(&fc, &c->req[i], &res[i], EOS, 2, true, why, sizeof why) == 0, "#%d: %s", i,
                  why);
        int first = -1;
        for (int k = 2; k < res[i].n && first < 0; k++)
            if (res[i].tokens[k] % 7 == 0) first = k;
        if (first >= 0) {
            stopped++;
            CHECK_EQ_INT(res[i].n, first + 1);
            CHECK_EQ_INT(res[i].reason, WEFT_FINISH_STOP);
        } else {
            CHECK_EQ_INT(res[i].n, 40);
            CHECK_EQ_INT(res[i].reason, WEFT_FINISH_LENGTH);
        }
        CHECK_EQ_INT(calls[i], res[i].n); /* once per committed token, never for uncommitted drafts */
        calls[i] = 0;
        c->req[i].draft = false;
    }
    CHECK(stopped > 0);
    CHECK_MSG(lt_run(&ec, &fc, c->req, N_CASES, serial, NULL, NULL, why, sizeof why) == 0, "%s", why);
    for (int i = 0; i < N_CASES; i++)
        CHECK_MSG(lt_same(&res[i], &serial[i], why, sizeof why) == 0, "stop hook drafted != serial #%d: %s",
                  i, why);
    dctx.oracle.ops->destroy(dctx.oracle.self);
    free(res);
    free(serial);
    free(c);
}

int main(void) {
    test_concurrent_equals_solo();
    test_drafted_equals_serial();
    test_prefill_chunking();
    test_stop_hook();
    return check_report("test_lanes");
}
