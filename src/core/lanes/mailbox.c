/* mailbox.c — a request's memory and its mailbox: the engine thread posts progress (PREFILLED, a new count of
 * committed tokens, FINISHED) under the request's mutex; the HTTP thread turns them into events in order.
 * Tokens are not copied per event: they live in the request's own buffer, written once by the engine before
 * it raises the published count, so posting costs one lock per stream per round and no allocation. */
#include "lanes_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *weft_finish_reason_name(weft_finish_reason r) {
    switch (r) {
    case WEFT_FINISH_NONE:
        return "none";
    case WEFT_FINISH_STOP:
        return "stop";
    case WEFT_FINISH_LENGTH:
        return "length";
    case WEFT_FINISH_CANCELLED:
        return "cancelled";
    case WEFT_FINISH_ERROR:
        return "error";
    case WEFT_FINISH_REFUSED:
        return "refused";
    }
    return "unknown";
}

static void request_free(weft_request_handle *r) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->seq);
    free(r->lp);
    free(r->bias);
    free(r);
}

weft_request_handle *lanes_request_alloc(weft_engine *e, const weft_request *req, weft_err *err) {
    weft_request_handle *r = calloc(1, sizeof *r);
    if (!r) {
        weft_err_set(err, WEFT_ENOMEM, "request: out of memory");
        return NULL;
    }
    size_t n_seq = (size_t)req->n_prompt + (size_t)req->max_tokens;
    r->seq = malloc(n_seq * sizeof *r->seq);
    if (req->sampling.logprobs >= 0) r->lp = calloc((size_t)req->max_tokens, sizeof *r->lp);
    if (req->sampling.n_logit_bias > 0)
        r->bias = malloc((size_t)req->sampling.n_logit_bias * sizeof *r->bias);
    if (!r->seq || (req->sampling.logprobs >= 0 && !r->lp) || (req->sampling.n_logit_bias > 0 && !r->bias)) {
        free(r->seq);
        free(r->lp);
        free(r->bias);
        free(r);
        weft_err_set(err, WEFT_ENOMEM, "request: out of memory for %zu tokens", n_seq);
        return NULL;
    }
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->seq);
        free(r->lp);
        free(r->bias);
        free(r);
        weft_err_set(err, WEFT_EINTERNAL, "request: pthread_mutex_init failed");
        return NULL;
    }
    /* Waits time out on the monotonic clock, so a wall-clock step cannot stretch or cut them. */
    pthread_condattr_t ca;
    bool ca_ok = pthread_condattr_init(&ca) == 0;
    if (ca_ok) pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int cv_rc = pthread_cond_init(&r->cv, ca_ok ? &ca : NULL);
    if (ca_ok) pthread_condattr_destroy(&ca);
    if (cv_rc != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r->seq);
        free(r->lp);
        free(r->bias);
        free(r);
        weft_err_set(err, WEFT_EINTERNAL, "request: pthread_cond_init failed");
        return NULL;
    }
    r->engine = e;
    r->n_prompt = req->n_prompt;
    r->max_tokens = req->max_tokens;
    r->ignore_eos = req->ignore_eos;
    r->draft = req->draft;
    r->sampling = req->sampling;
    if (req->sampling.n_logit_bias > 0) {
        memcpy(r->bias, req->sampling.logit_bias, (size_t)req->sampling.n_logit_bias * sizeof *r->bias);
        r->sampling.logit_bias = r->bias;
    } else {
        r->sampling.logit_bias = NULL;
        r->sampling.n_logit_bias = 0;
    }
    r->stop = req->stop;
    r->stop_ctx = req->stop_ctx;
    memcpy(r->seq, req->prompt, (size_t)req->n_prompt * sizeof *r->seq);
    r->t_submit = weft_now();
    atomic_init(&r->cancel, false);
    r->refs = 2;
    r->message[0] = '\0';
    r->stats.prompt_tokens = req->n_prompt;
    return r;
}

void lanes_request_unref(weft_request_handle *r) {
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left == 0) request_free(r);
}

void lanes_post_progress(weft_request_handle *r, bool prefilled, int cached, int n_gen) {
    pthread_mutex_lock(&r->mu);
    if (prefilled && !r->prefilled) {
        r->prefilled = true;
        r->cached = cached;
    }
    if (n_gen > r->published) r->published = n_gen;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void lanes_post_finished(weft_request_handle *r, weft_finish_reason reason, weft_status status,
                         const char *message, const weft_request_stats *stats) {
    pthread_mutex_lock(&r->mu);
    if (!r->finished) {
        r->finished = true;
        r->reason = reason;
        r->status = status;
        snprintf(r->message, sizeof r->message, "%s", message ? message : "");
        if (stats) r->stats = *stats;
        r->stats.prompt_tokens = r->n_prompt;
        r->stats.completion_tokens = r->published;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    lanes_request_unref(r);
}

/* Fills ev from the mailbox if something is due; r->mu held. */
static bool take_event(weft_request_handle *r, weft_event *ev) {
    if (r->prefilled && !r->prefilled_seen) {
        r->prefilled_seen = true;
        ev->kind = WEFT_EVENT_PREFILLED;
        ev->prompt_tokens = r->n_prompt;
        ev->cached_tokens = r->cached;
        return true;
    }
    if (r->consumed < r->published) {
        ev->kind = WEFT_EVENT_TOKENS;
        ev->offset = r->consumed;
        ev->n_tokens = r->published - r->consumed;
        ev->tokens = r->seq + r->n_prompt + r->consumed;
        ev->logprobs = r->lp ? r->lp + r->consumed : NULL;
        r->consumed = r->published;
        return true;
    }
    if (r->finished) {
        ev->kind = WEFT_EVENT_FINISHED;
        ev->reason = r->reason;
        ev->status = r->status;
        ev->message = r->message;
        ev->stats = r->stats;
        ev->prompt_tokens = r->n_prompt;
        return true;
    }
    return false;
}

bool weft_request_next_event(weft_request_handle *h, weft_event *ev, double timeout_s) {
    memset(ev, 0, sizeof *ev);
    ev->message = "";
    if (!h) return false;
    struct timespec deadline;
    if (timeout_s > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        double whole = floor(timeout_s);
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec += 1;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&h->mu);
    bool got = false;
    for (;;) {
        got = take_event(h, ev);
        if (got || timeout_s == 0) break;
        if (timeout_s < 0) {
            pthread_cond_wait(&h->cv, &h->mu);
        } else if (pthread_cond_timedwait(&h->cv, &h->mu, &deadline) == ETIMEDOUT) {
            got = take_event(h, ev);
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (!got) ev->kind = WEFT_EVENT_NONE;
    return got;
}

void weft_request_release(weft_request_handle *h) {
    if (!h) return;
    weft_engine_cancel(h);
    lanes_request_unref(h);
}
