/* test_lanes_util.h — helpers shared by the lane core's tests: run requests through an engine over the fake
 * backend, collect every event of a request while checking the mailbox protocol, and replay a reply with the
 * fake's serial oracle. */
#ifndef WEFT_TEST_LANES_UTIL_H
#define WEFT_TEST_LANES_UTIL_H

#include "weft/lanes.h"

#define LT_MAX_GEN 512

typedef struct lt_result {
    int32_t tokens[LT_MAX_GEN];
    weft_logprobs lp[LT_MAX_GEN];
    int n;
    bool has_lp;
    bool prefilled;
    int n_events;
    weft_finish_reason reason;
    weft_status status;
    char message[256];
    weft_request_stats stats;
    int cached;               /* PREFILLED's cached_tokens */
    char protocol_error[160]; /* "" when the events came in a valid order */
} lt_result;

/* Fills out[0..n) with ids in [0, vocab) from a small generator keyed by seed. */
void lt_prompt(int32_t *out, int n, uint32_t seed, int vocab);

/* Reads events from h until FINISHED (or 30 s pass: protocol_error says so) and checks their order. */
void lt_collect(weft_request_handle *h, lt_result *out);
/* Goes on collecting into out (already holding earlier events); returns early once out->n >= until_tokens
 * when that is > 0. */
void lt_collect_more(weft_request_handle *h, lt_result *out, int until_tokens);

/* A fresh fake backend + engine; every request submitted before start, then collected. Returns 0, or -1
 * with why (setup failure or a refused submission). fs/es (optional) get the backend's and engine's stats
 * after the engine stopped. */
int lt_run(const weft_engine_config *ec, const weft_fake_config *fc, const weft_request *reqs, int n,
           lt_result *res, weft_fake_stats *fs, weft_engine_stats *es, char *why, size_t why_len);

/* Replays res against the fake's oracle: every token must be the oracle's draw after the tokens before it
 * (and its logprobs equal bit for bit when asked); the reason must follow from the tokens (EOS, max_tokens)
 * unless allow_early (cancelled/stop hook). Returns 0, or -1 with why. */
int lt_check_oracle(const weft_fake_config *fc, const weft_request *req, const lt_result *res,
                    const int32_t *eos, int n_eos, bool allow_early, char *why, size_t why_len);

/* A fake backend and an engine that live across requests (prompt-cache tests). */
typedef struct lt_rig {
    weft_fake_config fc;
    weft_backend be;
    weft_engine *e;
} lt_rig;

/* Creates and starts them. Returns 0, or -1 with why. */
int lt_rig_new(lt_rig *g, const weft_engine_config *ec, const weft_fake_config *fc, char *why,
               size_t why_len);
/* Submits reqs[0..n) together, then collects each into res[i]. Returns 0, or -1 with why (a refusal). */
int lt_rig_run(lt_rig *g, const weft_request *reqs, int n, lt_result *res, char *why, size_t why_len);
/* Stops and frees the engine, then the backend; fs (optional) gets the backend's final stats. */
void lt_rig_free(lt_rig *g, weft_fake_stats *fs);

/* Same tokens, reasons and logprobs (bitwise)? Returns 0, or -1 with why. */
int lt_same(const lt_result *a, const lt_result *b, char *why, size_t why_len);

#endif
