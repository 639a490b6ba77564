/* engine.c — the engine's lifetime, its thread loop, the submission queue, cancel and metrics.
 *
 * Loop (one thread per model; only it touches the backend): take the queue and the shutdown flag under the
 * engine mutex, then outside it end cancelled streams, admit queued requests into free slots, and run one
 * round (rounds.c). Cancels and new work wake the thread through the condition variable; with nothing to do
 * it sleeps there. */
#include "lanes_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SHUTDOWN_MSG = "server shutting down";

static void engine_free_buffers(weft_engine *e) {
    lanes_cache_free(e);
    if (e->lanes) {
        for (int i = 0; i < e->parallel; i++) {
            free(e->lanes[i].draws);
            free(e->lanes[i].lp);
        }
    }
    free(e->lanes);
    free(e->order);
    free(e->segs);
    free(e->dreq);
    free(e->dseg);
    free(e->eos);
}

weft_status weft_engine_new(const weft_engine_config *cfg, weft_backend *backend, weft_engine **out,
                            weft_err *err) {
    *out = NULL;
    if (!cfg || !backend || !backend->ops)
        return weft_err_set(err, WEFT_EINVAL, "engine: config and backend are required");
    const weft_backend_ops *ops = backend->ops;
    if (!ops->open || !ops->forward || !ops->keep || !ops->release || !ops->memory)
        return weft_err_set(err, WEFT_EINVAL, "engine: backend '%s' lacks open/forward/keep/release/memory",
                            ops->name ? ops->name : "?");
    if (backend->max_slots < 1 || backend->max_rows < 1 || backend->vocab_size < 1)
        return weft_err_set(err, WEFT_EINVAL, "engine: backend reports max_slots %d, max_rows %d, vocab %lld",
                            backend->max_slots, backend->max_rows, (long long)backend->vocab_size);
    if (cfg->parallel < 1 || cfg->parallel > backend->max_slots)
        return weft_err_set(err, WEFT_EINVAL, "engine: parallel %d must be in 1..%d (backend slots)",
                            cfg->parallel, backend->max_slots);
    if (cfg->max_queue < 0)
        return weft_err_set(err, WEFT_EINVAL, "engine: max_queue %d must be >= 0", cfg->max_queue);
    int max_rows = cfg->max_rows ? cfg->max_rows : backend->max_rows;
    if (max_rows < 1 || max_rows > backend->max_rows)
        return weft_err_set(err, WEFT_EINVAL, "engine: max_rows %d must be in 1..%d (backend max_rows)",
                            cfg->max_rows, backend->max_rows);
    int chunk = cfg->prefill_chunk ? cfg->prefill_chunk : max_rows;
    if (chunk < 1 || chunk > max_rows)
        return weft_err_set(err, WEFT_EINVAL, "engine: prefill_chunk %d must be in 1..%d (max_rows)",
                            cfg->prefill_chunk, max_rows);
    if (cfg->capacity < 2)
        return weft_err_set(err, WEFT_EINVAL, "engine: capacity %d must be >= 2", cfg->capacity);
    if (cfg->n_eos < 0 || (cfg->n_eos > 0 && !cfg->eos_ids))
        return weft_err_set(err, WEFT_EINVAL, "engine: n_eos %d without eos_ids", cfg->n_eos);
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] < 0 || cfg->eos_ids[i] >= backend->vocab_size)
            return weft_err_set(err, WEFT_EINVAL, "engine: eos_ids[%d] = %d outside the vocab (%lld)", i,
                                cfg->eos_ids[i], (long long)backend->vocab_size);
    if (cfg->max_draft < 0 || cfg->max_draft + 1 > max_rows)
        return weft_err_set(err, WEFT_EINVAL, "engine: max_draft %d must be in 0..%d (max_rows - 1)",
                            cfg->max_draft, max_rows - 1);
    if (cfg->prompt_cache_grid < 0)
        return weft_err_set(err, WEFT_EINVAL, "engine: prompt_cache_grid %d must be >= 1 (0 = 512)",
                            cfg->prompt_cache_grid);
    if (cfg->max_model_draft < -1)
        return weft_err_set(err, WEFT_EINVAL, "engine: max_model_draft %d must be >= -1 (-1 = never)",
                            cfg->max_model_draft);
    if (!(cfg->draft_row_cost >= 0) || cfg->draft_row_cost > 1e6)
        return weft_err_set(err, WEFT_EINVAL, "engine: draft_row_cost %g must be in 0..1e6 (0 = 0.1)",
                            cfg->draft_row_cost);

    weft_engine *e = calloc(1, sizeof *e);
    if (!e) return weft_err_set(err, WEFT_ENOMEM, "engine: out of memory");
    e->be = backend;
    e->parallel = cfg->parallel;
    e->max_queue = cfg->max_queue;
    e->max_rows = max_rows;
    e->prefill_chunk = chunk;
    e->capacity = cfg->capacity;
    e->max_draft = cfg->max_draft;
    e->row_cost = cfg->draft_row_cost > 0 ? cfg->draft_row_cost : 0.1;
    e->n_eos = cfg->n_eos;
    if (cfg->drafter && cfg->drafter->propose) {
        e->drafter = *cfg->drafter;
        e->has_drafter = true;
    }
    if (ops->draft && cfg->max_model_draft >= 0) /* the model's own draft head (MTP) */
        e->max_model_draft = cfg->max_model_draft > 0 && cfg->max_model_draft < cfg->max_draft
                                 ? cfg->max_model_draft
                                 : cfg->max_draft;
    e->eos = malloc((size_t)(cfg->n_eos > 0 ? cfg->n_eos : 1) * sizeof *e->eos);
    e->lanes = calloc((size_t)e->parallel, sizeof *e->lanes);
    e->order = calloc((size_t)e->parallel, sizeof *e->order);
    e->segs = calloc((size_t)e->parallel, sizeof *e->segs);
    e->dreq = calloc((size_t)e->parallel, sizeof *e->dreq);
    e->dseg = calloc((size_t)e->parallel, sizeof *e->dseg);
    bool ok = e->eos && e->lanes && e->order && e->segs && e->dreq && e->dseg;
    for (int i = 0; ok && i < e->parallel; i++) {
        e->lanes[i].draws = calloc((size_t)e->max_draft + 1, sizeof *e->lanes[i].draws);
        e->lanes[i].lp = calloc((size_t)e->max_draft + 1, sizeof *e->lanes[i].lp);
        ok = e->lanes[i].draws && e->lanes[i].lp;
    }
    if (!ok) {
        engine_free_buffers(e);
        free(e);
        return weft_err_set(err, WEFT_ENOMEM, "engine: out of memory for %d streams", cfg->parallel);
    }
    if (cfg->n_eos > 0) memcpy(e->eos, cfg->eos_ids, (size_t)cfg->n_eos * sizeof *e->eos);
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        engine_free_buffers(e);
        free(e);
        return weft_err_set(err, WEFT_EINTERNAL, "engine: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&e->cv, NULL) != 0) {
        pthread_mutex_destroy(&e->mu);
        engine_free_buffers(e);
        free(e);
        return weft_err_set(err, WEFT_EINTERNAL, "engine: pthread_cond_init failed");
    }
    weft_status st = lanes_cache_new(e, cfg->prompt_cache_bytes,
                                     cfg->prompt_cache_grid > 0 ? cfg->prompt_cache_grid : 512, err);
    if (st != WEFT_OK) {
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
        engine_free_buffers(e);
        free(e);
        return st;
    }
    *out = e;
    return WEFT_OK;
}

/* Finishes a request that never got a slot (engine mutex not held). */
static void finish_unadmitted(weft_engine *e, weft_request_handle *r, weft_finish_reason reason,
                              weft_status status, const char *msg) {
    weft_request_stats st = {0};
    st.queue_seconds = weft_now() - r->t_submit;
    pthread_mutex_lock(&e->mu);
    e->totals.requests_finished_total++;
    pthread_mutex_unlock(&e->mu);
    lanes_post_finished(r, reason, status, msg, &st);
}

/* Unlinks queued requests that asked to cancel; e->mu held. Returns them as a list. */
static weft_request_handle *take_cancelled_queued(weft_engine *e) {
    weft_request_handle *out = NULL, **pp = &e->q_head, *prev = NULL;
    while (*pp) {
        weft_request_handle *r = *pp;
        if (atomic_load(&r->cancel)) {
            *pp = r->next;
            if (e->q_tail == r) e->q_tail = prev;
            r->next = out;
            out = r;
            e->n_waiting--;
        } else {
            prev = r;
            pp = &r->next;
        }
    }
    return out;
}

static void *engine_main(void *arg) {
    weft_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        for (;;) {
            int active = lanes_active(e);
            bool admissible = e->q_head && active < e->parallel;
            if (e->closing || e->wake || admissible || active > 0) break;
            pthread_cond_wait(&e->cv, &e->mu);
        }
        e->wake = false;
        bool closing = e->closing;
        weft_request_handle *cancelled = take_cancelled_queued(e);
        weft_request_handle *refused = NULL, *admit = NULL, **admit_tail = &admit;
        if (closing) {
            refused = e->q_head;
            e->q_head = e->q_tail = NULL;
            e->n_waiting = 0;
        } else {
            int room = e->parallel - lanes_active(e);
            while (room > 0 && e->q_head) {
                weft_request_handle *r = e->q_head;
                e->q_head = r->next;
                if (!e->q_head) e->q_tail = NULL;
                r->next = NULL;
                *admit_tail = r;
                admit_tail = &r->next;
                e->n_waiting--;
                e->n_running++;
                room--;
            }
        }
        pthread_mutex_unlock(&e->mu);

        while (cancelled) {
            weft_request_handle *r = cancelled;
            cancelled = r->next;
            finish_unadmitted(e, r, WEFT_FINISH_CANCELLED, WEFT_ECANCELLED, "cancelled before it started");
        }
        if (closing) {
            while (refused) {
                weft_request_handle *r = refused;
                refused = r->next;
                finish_unadmitted(e, r, WEFT_FINISH_REFUSED, WEFT_EBUSY, SHUTDOWN_MSG);
            }
            lanes_reap_cancelled(e, true, SHUTDOWN_MSG);
            break;
        }
        lanes_reap_cancelled(e, false, NULL);
        while (admit) {
            weft_request_handle *r = admit;
            admit = r->next;
            r->next = NULL;
            lanes_admit(e, r);
        }
        if (lanes_active(e) > 0) lanes_round(e);
        lanes_publish_occupancy(e);
    }
    lanes_publish_occupancy(e);
    return NULL;
}

weft_status weft_engine_start(weft_engine *e, weft_err *err) {
    if (!e) return weft_err_set(err, WEFT_EINVAL, "engine: NULL");
    pthread_mutex_lock(&e->mu);
    if (e->started || e->closing) {
        pthread_mutex_unlock(&e->mu);
        return weft_err_set(err, WEFT_EINVAL, "engine: already started or stopped");
    }
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc != 0) {
        pthread_mutex_unlock(&e->mu);
        return weft_err_set(err, WEFT_EINTERNAL, "engine: pthread_create failed (%d)", rc);
    }
    e->started = true;
    e->thread_live = true;
    pthread_mutex_unlock(&e->mu);
    return WEFT_OK;
}

void weft_engine_stop(weft_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->closing = true;
    bool join = e->thread_live;
    e->thread_live = false;
    weft_request_handle *refused = NULL;
    if (!e->started) {
        /* Never started: nothing runs, the queue is refused here. */
        refused = e->q_head;
        e->q_head = e->q_tail = NULL;
        e->n_waiting = 0;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (join) pthread_join(e->thread, NULL);
    while (refused) {
        weft_request_handle *r = refused;
        refused = r->next;
        finish_unadmitted(e, r, WEFT_FINISH_REFUSED, WEFT_EBUSY, SHUTDOWN_MSG);
    }
}

void weft_engine_free(weft_engine *e) {
    if (!e) return;
    weft_engine_stop(e);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    engine_free_buffers(e);
    free(e);
}

static weft_status check_request(const weft_engine *e, const weft_request *req, weft_err *err) {
    int64_t vocab = e->be->vocab_size;
    if (!req->prompt || req->n_prompt < 1)
        return weft_err_set(err, WEFT_EINVAL, "prompt: at least one token is required");
    for (int i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || req->prompt[i] >= vocab)
            return weft_err_set(err, WEFT_EINVAL, "prompt: token %d at index %d is outside the vocab (%lld)",
                                req->prompt[i], i, (long long)vocab);
    if (req->max_tokens < 1)
        return weft_err_set(err, WEFT_EINVAL, "max_tokens: %d must be >= 1", req->max_tokens);
    if ((int64_t)req->n_prompt + req->max_tokens > e->capacity)
        return weft_err_set(err, WEFT_ERANGE,
                            "context_length_exceeded: the context window is %d tokens; the request asks for "
                            "%d (%d prompt + %d max_tokens)",
                            e->capacity, req->n_prompt + req->max_tokens, req->n_prompt, req->max_tokens);
    /* Sampling settings (SPEC §5.1): the sampler's own checks, so nothing a forward draws with can fail. */
    return weft_sampling_validate(&req->sampling, vocab, err);
}

weft_status weft_engine_submit(weft_engine *e, const weft_request *req, weft_request_handle **out,
                               weft_err *err) {
    *out = NULL;
    if (!e || !req) return weft_err_set(err, WEFT_EINVAL, "submit: engine and request are required");
    weft_status st = check_request(e, req, err);
    if (st != WEFT_OK) return st;
    pthread_mutex_lock(&e->mu);
    bool closing = e->closing;
    int occupied = e->n_running + e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    if (closing) return weft_err_set(err, WEFT_EBUSY, "server shutting down");
    if (occupied >= e->parallel + e->max_queue)
        return weft_err_set(err, WEFT_EBUSY, "server busy: %d requests running or queued (limit %d)",
                            occupied, e->parallel + e->max_queue);
    weft_request_handle *r = lanes_request_alloc(e, req, err);
    if (!r) return err ? err->code : WEFT_ENOMEM;
    pthread_mutex_lock(&e->mu);
    /* Checked again: another thread may have taken the room while this one allocated. */
    occupied = e->n_running + e->n_waiting;
    if (e->closing || occupied >= e->parallel + e->max_queue) {
        bool was_closing = e->closing;
        pthread_mutex_unlock(&e->mu);
        r->refs = 1;
        lanes_request_unref(r);
        if (was_closing) return weft_err_set(err, WEFT_EBUSY, "server shutting down");
        return weft_err_set(err, WEFT_EBUSY, "server busy: %d requests running or queued (limit %d)",
                            occupied, e->parallel + e->max_queue);
    }
    if (e->q_tail)
        e->q_tail->next = r;
    else
        e->q_head = r;
    e->q_tail = r;
    e->n_waiting++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return WEFT_OK;
}

void weft_engine_cancel(weft_request_handle *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    bool finished = h->finished;
    pthread_mutex_unlock(&h->mu);
    if (finished) return;
    atomic_store(&h->cancel, true);
    weft_engine *e = h->engine;
    pthread_mutex_lock(&e->mu);
    e->wake = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void weft_engine_get_stats(weft_engine *e, weft_engine_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    *out = e->totals;
    out->running = e->n_running;
    out->waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    out->kv_rows_capacity = (uint64_t)e->parallel * (uint64_t)e->capacity;
    out->parallel = e->parallel;
    out->max_queue = e->max_queue;
    e->be->ops->memory(e->be->self, &out->memory_used, &out->memory_free);
}
