/* test_lanes_util.c — see test_lanes_util.h. */
#include "test_lanes_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bitwise equality of the meaningful part of two logprob rows (entries past n_top are unspecified). */
static bool lp_equal(const weft_logprobs *a, const weft_logprobs *b) {
    return a->token == b->token && memcmp(&a->logprob, &b->logprob, sizeof a->logprob) == 0 &&
           a->n_top == b->n_top && a->n_top >= 0 && a->n_top <= WEFT_MAX_TOP_LOGPROBS &&
           memcmp(a->top_ids, b->top_ids, (size_t)a->n_top * sizeof a->top_ids[0]) == 0 &&
           memcmp(a->top_logprobs, b->top_logprobs, (size_t)a->n_top * sizeof a->top_logprobs[0]) == 0;
}

void lt_prompt(int32_t *out, int n, uint32_t seed, int vocab) {
    uint32_t x = seed * 2654435761u + 12345u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        out[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
    }
}

void lt_collect(weft_request_handle *h, lt_result *out) {
    memset(out, 0, sizeof *out);
    lt_collect_more(h, out, 0);
}

void lt_collect_more(weft_request_handle *h, lt_result *out, int until_tokens) {
    double deadline = weft_now() + 30.0;
    bool finished = false;
    while (!finished) {
        if (until_tokens > 0 && out->n >= until_tokens) return;
        weft_event ev;
        if (!weft_request_next_event(h, &ev, 0.5)) {
            if (weft_now() > deadline) {
                snprintf(out->protocol_error, sizeof out->protocol_error, "no FINISHED within 30 s");
                return;
            }
            continue;
        }
        out->n_events++;
        switch (ev.kind) {
        case WEFT_EVENT_PREFILLED:
            if (out->prefilled || out->n > 0)
                snprintf(out->protocol_error, sizeof out->protocol_error, "PREFILLED twice or after TOKENS");
            out->prefilled = true;
            out->cached = ev.cached_tokens;
            if (ev.prompt_tokens < 1 || ev.cached_tokens < 0 || ev.cached_tokens >= ev.prompt_tokens)
                snprintf(out->protocol_error, sizeof out->protocol_error, "PREFILLED %d/%d", ev.prompt_tokens,
                         ev.cached_tokens);
            break;
        case WEFT_EVENT_TOKENS:
            if (!out->prefilled)
                snprintf(out->protocol_error, sizeof out->protocol_error, "TOKENS before PREFILLED");
            if (ev.offset != out->n || ev.n_tokens < 1 || out->n + ev.n_tokens > LT_MAX_GEN) {
                snprintf(out->protocol_error, sizeof out->protocol_error, "TOKENS offset %d n %d after %d",
                         ev.offset, ev.n_tokens, out->n);
                return;
            }
            memcpy(out->tokens + out->n, ev.tokens, (size_t)ev.n_tokens * sizeof(int32_t));
            if (ev.logprobs) {
                out->has_lp = true;
                memcpy(out->lp + out->n, ev.logprobs, (size_t)ev.n_tokens * sizeof(weft_logprobs));
            }
            out->n += ev.n_tokens;
            break;
        case WEFT_EVENT_FINISHED:
            finished = true;
            out->reason = ev.reason;
            out->status = ev.status;
            snprintf(out->message, sizeof out->message, "%s", ev.message ? ev.message : "(null)");
            out->stats = ev.stats;
            if (ev.stats.completion_tokens != out->n)
                snprintf(out->protocol_error, sizeof out->protocol_error, "completion_tokens %d but %d seen",
                         ev.stats.completion_tokens, out->n);
            if (ev.stats.cached_tokens != out->cached)
                snprintf(out->protocol_error, sizeof out->protocol_error,
                         "stats cached_tokens %d, PREFILLED %d", ev.stats.cached_tokens, out->cached);
            break;
        default:
            snprintf(out->protocol_error, sizeof out->protocol_error, "event kind %d", (int)ev.kind);
        }
    }
    /* FINISHED repeats and nothing else comes. */
    weft_event ev;
    if (!weft_request_next_event(h, &ev, 0) || ev.kind != WEFT_EVENT_FINISHED)
        snprintf(out->protocol_error, sizeof out->protocol_error, "FINISHED does not repeat");
}

int lt_run(const weft_engine_config *ec, const weft_fake_config *fc, const weft_request *reqs, int n,
           lt_result *res, weft_fake_stats *fs, weft_engine_stats *es, char *why, size_t why_len) {
    weft_err err = {0};
    weft_backend be;
    if (weft_fake_backend_new(fc, &be, &err) != WEFT_OK) {
        snprintf(why, why_len, "fake: %s", err.msg);
        return -1;
    }
    weft_engine *e = NULL;
    if (weft_engine_new(ec, &be, &e, &err) != WEFT_OK) {
        snprintf(why, why_len, "engine: %s", err.msg);
        be.ops->destroy(be.self);
        return -1;
    }
    weft_request_handle **hs = calloc((size_t)n, sizeof *hs);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (weft_engine_submit(e, &reqs[i], &hs[i], &err) != WEFT_OK) {
            snprintf(why, why_len, "submit %d: %s", i, err.msg);
            rc = -1;
        }
    }
    if (rc == 0 && weft_engine_start(e, &err) != WEFT_OK) {
        snprintf(why, why_len, "start: %s", err.msg);
        rc = -1;
    }
    for (int i = 0; i < n; i++)
        if (hs[i] && rc == 0) lt_collect(hs[i], &res[i]);
    weft_engine_stop(e);
    if (es) weft_engine_get_stats(e, es);
    for (int i = 0; i < n; i++) weft_request_release(hs[i]);
    weft_engine_free(e);
    if (fs) weft_fake_get_stats(&be, fs);
    be.ops->destroy(be.self);
    free(hs);
    return rc;
}

int lt_rig_new(lt_rig *g, const weft_engine_config *ec, const weft_fake_config *fc, char *why,
               size_t why_len) {
    weft_err err = {0};
    memset(g, 0, sizeof *g);
    g->fc = *fc;
    if (weft_fake_backend_new(fc, &g->be, &err) != WEFT_OK) {
        snprintf(why, why_len, "fake: %s", err.msg);
        return -1;
    }
    if (weft_engine_new(ec, &g->be, &g->e, &err) != WEFT_OK || weft_engine_start(g->e, &err) != WEFT_OK) {
        snprintf(why, why_len, "engine: %s", err.msg);
        weft_engine_free(g->e);
        g->e = NULL;
        g->be.ops->destroy(g->be.self);
        g->be.ops = NULL;
        return -1;
    }
    return 0;
}

int lt_rig_run(lt_rig *g, const weft_request *reqs, int n, lt_result *res, char *why, size_t why_len) {
    weft_request_handle **hs = calloc((size_t)n, sizeof *hs);
    weft_err err = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (weft_engine_submit(g->e, &reqs[i], &hs[i], &err) != WEFT_OK) {
            snprintf(why, why_len, "submit %d: %s", i, err.msg);
            rc = -1;
        }
    for (int i = 0; i < n; i++) {
        if (hs[i] && rc == 0) lt_collect(hs[i], &res[i]);
        weft_request_release(hs[i]);
    }
    free(hs);
    return rc;
}

void lt_rig_free(lt_rig *g, weft_fake_stats *fs) {
    weft_engine_free(g->e);
    g->e = NULL;
    if (!g->be.ops) return;
    if (fs) weft_fake_get_stats(&g->be, fs);
    g->be.ops->destroy(g->be.self);
    g->be.ops = NULL;
}

int lt_check_oracle(const weft_fake_config *fc, const weft_request *req, const lt_result *res,
                    const int32_t *eos, int n_eos, bool allow_early, char *why, size_t why_len) {
    weft_err err = {0};
    weft_backend be;
    if (weft_fake_backend_new(fc, &be, &err) != WEFT_OK) {
        snprintf(why, why_len, "fake: %s", err.msg);
        return -1;
    }
    int rc = 0;
    int32_t *seq = malloc(((size_t)req->n_prompt + LT_MAX_GEN) * sizeof *seq);
    memcpy(seq, req->prompt, (size_t)req->n_prompt * sizeof *seq);
    for (int i = 0; i < res->n && rc == 0; i++) {
        weft_logprobs lp;
        int pos = req->n_prompt + i - 1;
        int32_t t = weft_fake_next(&be, seq, req->n_prompt, pos, &req->sampling, &lp);
        if (t != res->tokens[i]) {
            snprintf(why, why_len, "token %d is %d, oracle says %d", i, res->tokens[i], t);
            rc = -1;
        } else if (res->has_lp && !lp_equal(&lp, &res->lp[i])) {
            snprintf(why, why_len, "logprobs of token %d differ from the oracle", i);
            rc = -1;
        }
        seq[pos + 1] = t;
        bool is_eos = false;
        for (int k = 0; k < n_eos; k++) is_eos |= eos[k] == t;
        if (rc == 0 && is_eos && !req->ignore_eos && i + 1 < res->n) {
            snprintf(why, why_len, "EOS %d at token %d but the reply goes on", t, i);
            rc = -1;
        }
        if (rc == 0 && i + 1 == res->n && !allow_early) {
            weft_finish_reason want = is_eos && !req->ignore_eos  ? WEFT_FINISH_STOP
                                      : res->n == req->max_tokens ? WEFT_FINISH_LENGTH
                                                                  : WEFT_FINISH_NONE;
            if (res->reason != want) {
                snprintf(why, why_len, "reason %s after %d tokens (max %d), expected %s",
                         weft_finish_reason_name(res->reason), res->n, req->max_tokens,
                         weft_finish_reason_name(want));
                rc = -1;
            }
        }
    }
    if (rc == 0 && res->has_lp != (req->sampling.logprobs >= 0) && res->n > 0) {
        snprintf(why, why_len, "logprobs present %d, asked %d", res->has_lp, req->sampling.logprobs);
        rc = -1;
    }
    free(seq);
    be.ops->destroy(be.self);
    return rc;
}

int lt_same(const lt_result *a, const lt_result *b, char *why, size_t why_len) {
    if (a->n != b->n) {
        snprintf(why, why_len, "%d tokens vs %d", a->n, b->n);
        return -1;
    }
    for (int i = 0; i < a->n; i++)
        if (a->tokens[i] != b->tokens[i]) {
            snprintf(why, why_len, "token %d: %d vs %d", i, a->tokens[i], b->tokens[i]);
            return -1;
        }
    if (a->reason != b->reason) {
        snprintf(why, why_len, "reason %s vs %s", weft_finish_reason_name(a->reason),
                 weft_finish_reason_name(b->reason));
        return -1;
    }
    bool same_lp = a->has_lp == b->has_lp;
    for (int i = 0; same_lp && a->has_lp && i < a->n; i++) same_lp = lp_equal(&a->lp[i], &b->lp[i]);
    if (!same_lp) {
        snprintf(why, why_len, "logprobs differ");
        return -1;
    }
    return 0;
}
