/* test_lanes_cpu.c — resumed == fresh and drafted == serial (SPEC §4.3.4–5) on the real CPU backend, for the
 * llama fixture (tests/data/fixtures/llama, loaded by weft_model_load) and every other family's fixture: the
 * same requests through an engine with the prompt cache and copy drafts, and through one with neither, give
 * the same token ids, greedy and seeded (T 0.8, top-p 0.9, seed 7); cached_tokens equals the resumed length.
 * The random-weight fixture rarely continues a copy, so a second check drafts the serial reply with every
 * third token wrong: windows are accepted in part and rolled back (keep) on the real caches, and the reply
 * stays the serial one. */
#include "check.h"
#include "test_lanes_util.h"
#include "weft/model.h"

#include <stdlib.h>

#define CTX 256

typedef struct rig {
    weft_backend be;
    weft_engine *e;
    weft_drafter d;
} rig;

static int rig_new(rig *g, const weft_model *m, bool cache_and_drafts) {
    weft_err err = {0};
    memset(g, 0, sizeof *g);
    weft_backend_opts bo = {.kind = "cpu", .threads = 2, .max_slots = 2, .max_rows = 64, .max_context = CTX};
    if (weft_model_backend(m, &bo, &g->be, &err) != WEFT_OK) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return -1;
    }
    weft_engine_config ec = {.parallel = 2,
                             .max_queue = 16,
                             .prefill_chunk = 5,
                             .capacity = CTX,
                             .eos_ids = m->cfg.eos_token_ids,
                             .n_eos = m->cfg.n_eos};
    if (cache_and_drafts) {
        /* min_match 1: on random weights longer matches are rare, and proposals are what is tested here */
        weft_copy_drafter_config cc = {.max_slots = 2, .capacity = CTX, .min_match = 1};
        if (weft_copy_drafter_new(&cc, &g->d, &err) != WEFT_OK) return -1;
        ec.prompt_cache_bytes = (size_t)64 << 20;
        ec.prompt_cache_grid = 8;
        ec.max_draft = 4;
        ec.drafter = &g->d;
    }
    if (weft_engine_new(&ec, &g->be, &g->e, &err) != WEFT_OK || weft_engine_start(g->e, &err) != WEFT_OK) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void rig_free(rig *g) {
    weft_engine_free(g->e);
    if (g->be.ops) g->be.ops->destroy(g->be.self);
    weft_drafter_free(&g->d);
}

static void run(rig *g, const weft_request *q, lt_result *res) {
    weft_request_handle *h = NULL;
    weft_err err = {0};
    memset(res, 0, sizeof *res);
    CHECK_MSG(weft_engine_submit(g->e, q, &h, &err) == WEFT_OK, "%s", err.msg);
    if (!h) return;
    lt_collect(h, res);
    weft_request_release(h);
    CHECK_MSG(res->protocol_error[0] == 0, "%s", res->protocol_error);
    CHECK_MSG(res->n >= 1, "no tokens: %s", res->message);
}

static weft_request make_req(const int32_t *p, int n, int max_tokens, int mode) {
    weft_request r = {
        .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = true, .draft = true};
    r.sampling = (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
    if (mode) r.sampling.temperature = 0.8, r.sampling.top_p = 0.9, r.sampling.seed = 7;
    return r;
}

/* Runs q through both rigs: same tokens; returns the cached run's cached_tokens. */
static int both(rig *on, rig *off, const weft_request *q, lt_result *res, const char *what) {
    lt_result plain;
    char why[256];
    run(on, q, res);
    weft_request serial = *q;
    serial.draft = false;
    run(off, &serial, &plain);
    CHECK_MSG(lt_same(res, &plain, why, sizeof why) == 0, "%s: cache + drafts != fresh serial: %s", what,
              why);
    CHECK_EQ_INT(plain.cached, 0);
    return res->cached;
}

/* Proposes the known serial reply, every third position deliberately wrong. */
typedef struct ref_drafter {
    const int32_t *reply;
    int n_reply, vocab, calls;
} ref_drafter;

static int ref_propose(void *vctx, int slot, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *out,
                       int max_n) {
    ref_drafter *r = vctx;
    r->calls++;
    int at = n_tokens - n_prompt, n = 0; /* reply tokens already committed */
    for (; n < max_n && at + n < r->n_reply; n++) {
        int32_t t = r->reply[at + n];
        out[n] = (n_tokens + n) % 3 == 0 ? (t + 1) % r->vocab : t;
    }
    return n;
}

static void test_drafted_equals_serial(const weft_model *m) {
    int vocab = (int)m->cfg.vocab_size;
    for (int mode = 0; mode < 2; mode++) {
        rig off;
        CHECK(rig_new(&off, m, false) == 0);
        if (!off.e) return;
        int32_t p[20];
        lt_prompt(p, 20, 70u + (uint32_t)mode, vocab);
        weft_request q = make_req(p, 20, 40, mode);
        q.draft = false;
        lt_result serial, drafted;
        run(&off, &q, &serial);
        weft_engine_free(off.e);
        /* the same backend, now under an engine that drafts */
        ref_drafter rd = {.reply = serial.tokens, .n_reply = serial.n, .vocab = vocab};
        weft_drafter d = {.ctx = &rd, .propose = ref_propose};
        weft_engine_config ec = {.parallel = 2,
                                 .capacity = CTX,
                                 .max_draft = 4,
                                 .drafter = &d,
                                 .max_model_draft = -1 /* this drafter's proposals, not an MTP head's */};
        weft_err err = {0};
        CHECK_MSG(weft_engine_new(&ec, &off.be, &off.e, &err) == WEFT_OK, "%s", err.msg);
        CHECK(weft_engine_start(off.e, &err) == WEFT_OK);
        q.draft = true;
        run(&off, &q, &drafted);
        char why[256];
        CHECK_MSG(lt_same(&drafted, &serial, why, sizeof why) == 0, "drafted != serial on the CPU: %s", why);
        CHECK_MSG(drafted.stats.accepted > 0 && drafted.stats.accepted < drafted.stats.drafted,
                  "drafted %d accepted %d", drafted.stats.drafted, drafted.stats.accepted);
        CHECK(drafted.stats.rounds < serial.stats.rounds);
        rig_free(&off);
    }
}

static void test_fixture(const char *dir) {
    weft_model *m = NULL;
    weft_err err = {0};
    if (weft_model_load(dir, &m, &err) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", dir, err.msg);
        return;
    }
    int vocab = (int)m->cfg.vocab_size;
    for (int mode = 0; mode < 2; mode++) {
        rig on, off;
        CHECK(rig_new(&on, m, true) == 0);
        CHECK(rig_new(&off, m, false) == 0);
        if (!on.e || !off.e) {
            rig_free(&on);
            rig_free(&off);
            break;
        }
        int32_t p1[40], p2[120], p3[40], p4[40];
        lt_prompt(p1, 30, 31u + (uint32_t)mode, vocab);
        lt_result a, b, c, d, e;
        weft_request q = make_req(p1, 30, 16, mode);
        CHECK_EQ_INT(both(&on, &off, &q, &a, "first"), 0);
        CHECK_EQ_INT(both(&on, &off, &q, &b, "resend"), 29);
        /* second turn: prompt + reply + new tokens resumes from the reply end */
        memcpy(p2, p1, 30 * sizeof *p1);
        memcpy(p2 + 30, a.tokens, (size_t)a.n * sizeof *p2);
        lt_prompt(p2 + 30 + a.n, 9, 40u + (uint32_t)mode, vocab);
        q = make_req(p2, 30 + a.n + 9, 20, mode);
        CHECK_EQ_INT(both(&on, &off, &q, &c, "second turn"), 30 + a.n - 1);
        /* shared prefix of 19 tokens: resumes from the grid point at 16 */
        memcpy(p3, p1, 19 * sizeof *p1);
        lt_prompt(p3 + 19, 12, 50u + (uint32_t)mode, vocab);
        p3[19] = (p1[19] + 1) % vocab;
        q = make_req(p3, 31, 12, mode);
        CHECK_EQ_INT(both(&on, &off, &q, &d, "shared prefix"), 16);
        /* a passage twice and started a third time: copy drafts are proposed, the reply is unchanged */
        int32_t x[12];
        lt_prompt(x, 12, 60u + (uint32_t)mode, vocab);
        memcpy(p4, x, sizeof x);
        memcpy(p4 + 12, x, sizeof x);
        memcpy(p4 + 24, x, 4 * sizeof *x);
        q = make_req(p4, 28, 24, mode);
        both(&on, &off, &q, &e, "copy");
        weft_engine_stats es;
        weft_engine_get_stats(on.e, &es);
        CHECK_EQ_INT(es.prompt_cache_failures, 0);
        CHECK_EQ_INT(es.prompt_cache_hit_requests, 3);
        CHECK(es.prompt_cache_bytes <= es.prompt_cache_budget);
        CHECK_MSG(es.drafted_total > 0, "no copy draft proposed on the real backend");
        fprintf(stderr, "test_lanes_cpu: %s, %s: %llu tokens resumed, %llu drafted, %llu accepted\n", dir,
                mode ? "seeded" : "greedy", (unsigned long long)es.prompt_tokens_cached_total,
                (unsigned long long)es.drafted_total, (unsigned long long)es.accepted_total);
        rig_free(&on);
        rig_free(&off);
    }
    test_drafted_equals_serial(m);
    weft_model_free(m);
}

int main(void) {
    /* Every family, and a quantized GGUF and an MLX checkpoint (LT_FIXTURE=path runs one). */
    static const char *const fixtures[] = {"llama",
                                           "qwen3",
                                           "qwen3_5",
                                           "qwen3_5_moe",
                                           "nemotron_h",
                                           "nemotron_h_moe",
                                           "llama-gguf-q8_0/model.gguf",
                                           "qwen3-mlx-q4g64"};
    const char *one = getenv("LT_FIXTURE");
    if (one) {
        test_fixture(one);
    } else {
        for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
            char dir[256];
            snprintf(dir, sizeof dir, "%sfixtures/%s", TEST_DATA, fixtures[i]);
            test_fixture(dir);
        }
    }
    return check_report("test_lanes_cpu");
}
