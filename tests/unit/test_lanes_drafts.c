/* test_lanes_drafts.c — copy drafts and the depth rule (SPEC §4.5), and the mixed load of SPEC §4.3:
 * - the copy drafter's proposals on hand-made token streams (match, loop, no match, reset, incremental
 * index);
 * - on a prompt that holds a passage twice and starts it a third time (a fake that continues copies), copy
 *   drafts are accepted and the reply equals its "draft": false run, greedy and seeded;
 * - a drafter whose drafts never pay ends up running plain rounds, with the same reply;
 * - 32 concurrent requests (prompt-cache hits and misses, drafts on and off, greedy and seeded, penalties,
 *   logprobs) each equal their solo serial run without the cache. */
#include "check.h"
#include "test_lanes_util.h"

#include <stdlib.h>

#define VOCAB 64

static const int32_t EOS[] = {3};

static weft_fake_config fake_cfg(double copy_bias) {
    weft_fake_config fc = {
        .max_slots = 8, .max_rows = 64, .vocab_size = VOCAB, .salt = 77, .copy_bias = copy_bias};
    return fc;
}

static weft_engine_config engine_cfg(int parallel, int chunk, int max_draft, const weft_drafter *d) {
    weft_engine_config ec = {.parallel = parallel,
                             .max_queue = 64,
                             .max_rows = 40,
                             .prefill_chunk = chunk,
                             .capacity = 400,
                             .eos_ids = EOS,
                             .n_eos = 1,
                             .max_draft = max_draft,
                             .drafter = d};
    return ec;
}

static weft_request make_req(const int32_t *prompt, int n, int max_tokens, bool seeded) {
    weft_request r = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens, .draft = true};
    r.sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
    if (seeded) r.sampling.temperature = 0.8, r.sampling.top_p = 0.9, r.sampling.seed = 7;
    return r;
}

/* ---- the copy drafter on its own ---- */
static void test_copy_drafter_unit(void) {
    weft_drafter d;
    weft_err err;
    weft_copy_drafter_config cc = {.max_slots = 2, .capacity = 64};
    CHECK_MSG(weft_copy_drafter_new(&cc, &d, &err) == WEFT_OK, "%s", err.msg);
    int32_t out[8];
    /* 1 2 3 4 5 6 | 1 2 3 -> 4 5 6, then the copy repeats the period (1 2 3 4 5 6 ...) */
    int32_t t[32] = {1, 2, 3, 4, 5, 6, 1, 2, 3};
    d.reset(d.ctx, 0);
    CHECK_EQ_INT(d.propose(d.ctx, 0, t, 9, 9, out, 5), 5);
    int32_t want[] = {4, 5, 6, 1, 2};
    CHECK(memcmp(out, want, sizeof want) == 0);
    /* Only two tokens of match (min_match 3): nothing. */
    int32_t u[] = {9, 2, 3, 4, 5, 8, 2, 3};
    d.reset(d.ctx, 1);
    CHECK_EQ_INT(d.propose(d.ctx, 1, u, 8, 8, out, 4), 0);
    /* A loop: 7 7 7 7 -> 7 7 7. */
    int32_t v[] = {5, 7, 7, 7, 7};
    d.reset(d.ctx, 1);
    CHECK_EQ_INT(d.propose(d.ctx, 1, v, 5, 5, out, 3), 3);
    CHECK(out[0] == 7 && out[1] == 7 && out[2] == 7);
    /* Incremental: the stream in slot 0 grows one token at a time; the longest match wins over a later,
     * shorter one: "10 11 12 13 20" and "40 11 12 13 30" both hold "11 12 13"; after "10 11 12 13" the
     * longer match (4 tokens) predicts 20, not the latest one's 30. */
    int32_t w[40] = {10, 11, 12, 13, 20, 21, 40, 11, 12, 13, 30, 31, 50, 10, 11};
    d.reset(d.ctx, 0);
    int n = 15;
    CHECK_EQ_INT(d.propose(d.ctx, 0, w, n, 4, out, 2), 0); /* "50 10 11": no earlier occurrence */
    w[n++] = 12;
    CHECK_EQ_INT(d.propose(d.ctx, 0, w, n, 4, out, 2), 2); /* "10 11 12" matches at 0..2 */
    CHECK(out[0] == 13 && out[1] == 20);
    w[n++] = 13;
    CHECK_EQ_INT(d.propose(d.ctx, 0, w, n, 4, out, 1), 1);
    CHECK_EQ_INT(out[0], 20);
    /* Without a reset, a stream with another prompt length starts the index over. */
    CHECK_EQ_INT(d.propose(d.ctx, 0, t, 9, 5, out, 2), 2);
    CHECK(out[0] == 4 && out[1] == 5);
    /* Slot, length and capacity bounds. */
    CHECK_EQ_INT(d.propose(d.ctx, 2, t, 9, 9, out, 2), 0);
    CHECK_EQ_INT(d.propose(d.ctx, 0, t, 3, 3, out, 2), 0);
    weft_drafter_free(&d);
    CHECK(d.propose == NULL);
    cc.min_match = 40;
    CHECK(weft_copy_drafter_new(&cc, &d, &err) == WEFT_EINVAL);
    CHECK(strstr(err.msg, "min_match") != NULL);
    weft_drafter_free(NULL);
}

/* noise(10) X(30) noise(7) X(30) noise(5) X[0..6) */
static int passage_prompt(int32_t *p, uint32_t seed) {
    int32_t x[30];
    lt_prompt(x, 30, seed, VOCAB);
    int n = 0;
    lt_prompt(p + n, 10, seed + 1, VOCAB), n += 10;
    memcpy(p + n, x, sizeof x), n += 30;
    lt_prompt(p + n, 7, seed + 2, VOCAB), n += 7;
    memcpy(p + n, x, sizeof x), n += 30;
    lt_prompt(p + n, 5, seed + 3, VOCAB), n += 5;
    memcpy(p + n, x, 6 * sizeof *x), n += 6;
    return n;
}

static void test_copy_drafts_accepted(void) {
    char why[256];
    weft_fake_config fc = fake_cfg(8.0);
    weft_drafter d;
    weft_err err;
    weft_copy_drafter_config cc = {.max_slots = 2, .capacity = 400, .min_match = 3};
    CHECK_MSG(weft_copy_drafter_new(&cc, &d, &err) == WEFT_OK, "%s", err.msg);
    int32_t p[100];
    int n = passage_prompt(p, 500);
    for (int seeded = 0; seeded < 2; seeded++) {
        weft_request q = make_req(p, n, 60, seeded);
        q.ignore_eos = true;
        weft_engine_config ec = engine_cfg(2, 16, 6, &d);
        lt_result drafted, serial;
        weft_engine_stats es;
        CHECK_MSG(lt_run(&ec, &fc, &q, 1, &drafted, NULL, &es, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(es.accepted_total > 0, "%s: copy drafts drafted %llu, accepted %llu",
                  seeded ? "seeded" : "greedy", (unsigned long long)es.drafted_total,
                  (unsigned long long)es.accepted_total);
        CHECK_EQ_INT(drafted.stats.drafted, es.drafted_total);
        CHECK_EQ_INT(drafted.stats.accepted, es.accepted_total);
        CHECK(drafted.stats.accepted <= drafted.stats.drafted);
        q.draft = false;
        CHECK_MSG(lt_run(&ec, &fc, &q, 1, &serial, NULL, &es, why, sizeof why) == 0, "%s", why);
        CHECK_EQ_INT(es.drafted_total, 0);
        CHECK_EQ_INT(serial.stats.drafted, 0);
        CHECK_MSG(lt_same(&drafted, &serial, why, sizeof why) == 0, "drafted != serial: %s", why);
        CHECK_MSG(lt_check_oracle(&fc, &q, &drafted, EOS, 1, false, why, sizeof why) == 0, "%s", why);
        /* Accepted drafts save rounds: each kept draft is a token without a round of its own. */
        CHECK_EQ_INT(drafted.stats.rounds + drafted.stats.accepted, serial.stats.rounds);
    }
    weft_drafter_free(&d);
}

/* ---- drafts that do not pay ---- */
typedef struct wrong_ctx {
    weft_backend oracle;
    const weft_request *req;
    int calls;
} wrong_ctx;

/* Proposes the oracle's next token plus one: never accepted. */
static int wrong_propose(void *vctx, int slot, const int32_t *tokens, int n_tokens, int n_prompt,
                         int32_t *out, int max_n) {
    wrong_ctx *w = vctx;
    w->calls++;
    int32_t t = weft_fake_next(&w->oracle, tokens, n_prompt, n_tokens - 1, &w->req->sampling, NULL);
    for (int i = 0; i < max_n; i++) out[i] = (t + 1 + i) % VOCAB;
    return max_n;
}

typedef struct window_count {
    int windows, drafted_windows;
} window_count;

static void count_windows(void *vctx, const weft_segment *segs, int n) {
    window_count *c = vctx;
    for (int i = 0; i < n; i++)
        if (segs[i].start >= segs[i].n_prompt) {
            c->windows++;
            c->drafted_windows += segs[i].n_rows > 1;
        }
}

static void test_unpaid_drafts_go_plain(void) {
    char why[256];
    weft_fake_config fc = fake_cfg(0);
    int32_t p[20];
    lt_prompt(p, 20, 600, VOCAB);
    weft_request q = make_req(p, 20, 250, false);
    q.ignore_eos = true;
    wrong_ctx w = {.req = &q};
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &w.oracle, &err) == WEFT_OK);
    weft_drafter d = {.ctx = &w, .propose = wrong_propose};
    weft_engine_config ec = engine_cfg(1, 0, 6, &d);
    lt_rig g;
    CHECK_MSG(lt_rig_new(&g, &ec, &fc, why, sizeof why) == 0, "%s", why);
    window_count wc = {0};
    weft_fake_set_hook(&g.be, count_windows, &wc);
    lt_result r, serial;
    CHECK_MSG(lt_rig_run(&g, &q, 1, &r, why, sizeof why) == 0, "%s", why);
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    lt_rig_free(&g, NULL);
    CHECK_EQ_INT(es.accepted_total, 0);
    /* About 11 windows before the acceptance estimate gives up, then probes after 8, 16, 32, 64, 128 plain
     * rounds: far fewer drafting windows than tokens. */
    CHECK_MSG(wc.drafted_windows <= 20 && wc.drafted_windows >= 5, "%d of %d windows drafted",
              wc.drafted_windows, wc.windows);
    CHECK_EQ_INT(w.calls, wc.drafted_windows);
    CHECK_MSG(es.drafted_total < 80, "%llu draft rows fed", (unsigned long long)es.drafted_total);
    q.draft = false;
    CHECK_MSG(lt_run(&ec, &fc, &q, 1, &serial, NULL, NULL, why, sizeof why) == 0, "%s", why);
    CHECK_MSG(lt_same(&r, &serial, why, sizeof why) == 0, "%s", why);
    CHECK_EQ_INT(r.n, 250);
    w.oracle.ops->destroy(w.oracle.self);
}

/* ---- 32 mixed concurrent requests ---- */
#define N_MIXED 32

typedef struct mixed {
    int32_t base[4][100];
    int n_base[4];
    int32_t prompts[N_MIXED][160];
    weft_request req[N_MIXED];
} mixed;

static void make_mixed(mixed *m) {
    for (int b = 0; b < 4; b++) m->n_base[b] = passage_prompt(m->base[b], 700u + 10u * (uint32_t)b) - 10 * b;
    for (int i = 0; i < N_MIXED; i++) {
        int b = (i / 4) % 4, kind = i % 4, n = 0;
        int32_t *p = m->prompts[i];
        switch (kind) {
        case 0: /* the base itself (a resend once it ran) */
            memcpy(p, m->base[b], (size_t)m->n_base[b] * sizeof *p);
            n = m->n_base[b];
            break;
        case 1: /* the base's first 20 + i tokens, then a new tail */
            n = 20 + i;
            memcpy(p, m->base[b], (size_t)n * sizeof *p);
            lt_prompt(p + n, 12, 800u + (uint32_t)i, VOCAB);
            n += 12;
            break;
        case 2: /* the base and a tail (a later turn) */
            memcpy(p, m->base[b], (size_t)m->n_base[b] * sizeof *p);
            n = m->n_base[b];
            lt_prompt(p + n, 9, 900u + (uint32_t)i, VOCAB);
            n += 9;
            break;
        default: /* unrelated */
            n = 15 + i;
            lt_prompt(p, n, 1000u + (uint32_t)i, VOCAB);
        }
        weft_request *r = &m->req[i];
        *r = make_req(p, n, 10 + (i * 7) % 25, i % 2);
        r->draft = i % 3 != 0;
        r->ignore_eos = i % 5 == 0;
        if (i % 5 == 2) r->sampling.frequency_penalty = 0.5;
        if (i % 8 == 5) r->sampling.logprobs = 2;
    }
}

static void test_mixed_concurrent(void) {
    char why[256];
    mixed *m = calloc(1, sizeof *m);
    make_mixed(m);
    weft_fake_config fc = fake_cfg(6.0);
    weft_drafter d;
    weft_err err;
    weft_copy_drafter_config cc = {.max_slots = 6, .capacity = 400};
    CHECK_MSG(weft_copy_drafter_new(&cc, &d, &err) == WEFT_OK, "%s", err.msg);
    weft_engine_config ec = engine_cfg(6, 6, 6, &d);
    ec.prompt_cache_bytes = 48 * 1024;
    ec.prompt_cache_grid = 8;
    lt_rig g;
    CHECK_MSG(lt_rig_new(&g, &ec, &fc, why, sizeof why) == 0, "%s", why);
    lt_result *res = calloc(N_MIXED, sizeof *res), *solo = calloc(N_MIXED, sizeof *solo);
    CHECK_MSG(lt_rig_run(&g, m->req, N_MIXED, res, why, sizeof why) == 0, "%s", why);
    weft_engine_stats es;
    weft_engine_get_stats(g.e, &es);
    weft_fake_stats fs;
    lt_rig_free(&g, &fs);
    CHECK_MSG(fs.violations == 0, "%s", fs.first_violation);
    CHECK(fs.max_segments > 1);
    CHECK_MSG(es.prompt_cache_hit_requests > 0 && es.prompt_cache_hit_requests < es.prompt_cache_lookups,
              "%llu hits of %llu lookups", (unsigned long long)es.prompt_cache_hit_requests,
              (unsigned long long)es.prompt_cache_lookups);
    CHECK(es.prompt_cache_bytes <= ec.prompt_cache_bytes);
    CHECK_MSG(es.accepted_total > 0, "no draft accepted (%llu drafted)",
              (unsigned long long)es.drafted_total);
    uint64_t cached = 0, drafted = 0, accepted = 0;
    for (int i = 0; i < N_MIXED; i++) {
        cached += (uint64_t)res[i].cached;
        drafted += (uint64_t)res[i].stats.drafted;
        accepted += (uint64_t)res[i].stats.accepted;
        CHECK_MSG(res[i].protocol_error[0] == 0, "#%d: %s", i, res[i].protocol_error);
        if (!m->req[i].draft) CHECK_EQ_INT(res[i].stats.drafted, 0);
    }
    CHECK_EQ_INT(cached, es.prompt_tokens_cached_total);
    CHECK_EQ_INT(drafted, es.drafted_total);
    CHECK_EQ_INT(accepted, es.accepted_total);

    /* Solo serial: each alone, no cache, no drafts. */
    weft_engine_config e1 = engine_cfg(1, 0, 0, NULL);
    for (int i = 0; i < N_MIXED; i++) {
        weft_request q = m->req[i];
        q.draft = false;
        CHECK_MSG(lt_run(&e1, &fc, &q, 1, &solo[i], NULL, NULL, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(lt_same(&res[i], &solo[i], why, sizeof why) == 0, "mixed #%d != solo serial: %s", i, why);
        CHECK_MSG(lt_check_oracle(&fc, &q, &res[i], EOS, 1, false, why, sizeof why) == 0, "#%d: %s", i, why);
    }
    weft_drafter_free(&d);
    free(res);
    free(solo);
    free(m);
}

int main(void) {
    test_copy_drafter_unit();
    test_copy_drafts_accepted();
    test_unpaid_drafts_go_plain();
    test_mixed_concurrent();
    return check_report("test_lanes_drafts");
}
