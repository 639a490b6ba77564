/* src/server/gen.c — one request in flight: one engine job per choice, a mailbox the engine's sink fills,
 * and the consumer that moves tokens through each choice's text pipeline.
 *
 * The mailbox arrays are allocated once at submit (max_tokens entries), so the sink never allocates and the
 * consumer can read entries below the count it saw under the mutex without holding it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

void srv_metrics_gen(srv_metrics *m, const srv_gen *g); /* metrics.c */

static void sink(void *ctx, const weft_srv_event *ev) {
    srv_choice *c = ctx;
    srv_gen *g = c->g;
    pthread_mutex_lock(&g->mu);
    if (c->finished) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    switch (ev->kind) {
    case WEFT_SRV_EV_PREFILLED:
        c->prefilled = true;
        c->cached = ev->cached_tokens;
        break;
    case WEFT_SRV_EV_TOKENS:
        if (!c->t_first && ev->n_ids > 0) c->t_first = weft_now();
        c->prefilled = true;
        for (int i = 0; i < ev->n_ids; i++) {
            if (c->n_recv >= c->cap) {
                c->overflow = true;
                break;
            }
            c->ids[c->n_recv] = ev->ids[i];
            if (c->lps) {
                if (ev->logprobs) c->lps[c->n_recv] = ev->logprobs[i];
                else c->lp_missing = true;
            }
            c->n_recv++;
        }
        break;
    case WEFT_SRV_EV_FINISHED:
        c->finished = true;
        c->end = ev->end;
        c->stats = ev->stats;
        snprintf(c->msg, sizeof c->msg, "%s", ev->message ? ev->message : "");
        break;
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static bool ready_news(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++) {
        const srv_choice *c = &g->ch[i];
        if (c->done) continue;
        if (c->n_recv > c->n_seen || c->finished || (c->prefilled && !c->prefill_seen)) return true;
    }
    return false;
}

static void cond_wait_s(srv_gen *g, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

static void take_token(srv_gen *g, srv_choice *c, int k) {
    if (c->stop_hit) return; /* past the stop string: not part of the reply */
    c->n_counted = k + 1;
    if (c->text_offset) c->text_offset[k] = (int)c->content.len;
    if (!c->detok) return;
    size_t len = 0;
    const char *bytes = g->svc->detok_feed(g->svc->ctx, c->detok, c->ids[k], &len);
    bool oom = false;
    if (bytes && len && srv_textpipe_feed(&c->tp, bytes, len, &c->content, &c->reasoning, &oom)) {
        c->stop_hit = true;
        g->svc->cancel(g->svc->ctx, c->handle); /* the engine stops within a round; later tokens are dropped */
    }
}

static void finalize(srv_choice *c) {
    srv_textpipe_finish(&c->tp, &c->content, &c->reasoning);
    if (c->stop_hit) c->finish = "stop";
    else if (c->overflow) c->finish = "length";
    else
        switch (c->end) {
        case WEFT_SRV_END_EOS: c->finish = "stop"; break;
        case WEFT_SRV_END_LENGTH: c->finish = "length"; break;
        case WEFT_SRV_END_CANCELLED: c->finish = "cancelled"; break;
        default: c->finish = "error"; break;
        }
    c->done = true;
}

bool srv_gen_pump(srv_gen *g, double timeout_s) {
    int n_recv[SRV_MAX_CHOICES];
    bool fin[SRV_MAX_CHOICES], pre[SRV_MAX_CHOICES];
    pthread_mutex_lock(&g->mu);
    if (!ready_news(g) && timeout_s > 0) cond_wait_s(g, timeout_s);
    for (int i = 0; i < g->n_ch; i++) {
        n_recv[i] = g->ch[i].n_recv;
        fin[i] = g->ch[i].finished;
        pre[i] = g->ch[i].prefilled;
    }
    pthread_mutex_unlock(&g->mu);
    bool changed = false;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (c->done) continue;
        if (pre[i] && !c->prefill_seen) c->prefill_seen = changed = true;
        for (; c->n_seen < n_recv[i]; c->n_seen++, changed = true) take_token(g, c, c->n_seen);
        if (fin[i]) {
            finalize(c);
            changed = true;
        }
    }
    return changed;
}

bool srv_gen_all_done(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (!g->ch[i].done) return false;
    return true;
}

bool srv_gen_any_started(srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].prefill_seen || g->ch[i].n_seen) return true;
    return false;
}

void srv_gen_cancel_all(srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].handle && !g->ch[i].done) g->svc->cancel(g->svc->ctx, g->ch[i].handle);
}

bool srv_gen_watch(srv_gen *g) {
    if (!g->client_gone && g->fd >= 0 && srv_peer_gone(g->fd)) {
        g->client_gone = true;
        srv_metrics_disconnect(&g->srv->metrics);
        srv_gen_cancel_all(g);
    }
    if (!g->cancelled_shutdown && atomic_load(&g->srv->cancelling)) {
        g->cancelled_shutdown = true;
        srv_gen_cancel_all(g);
    }
    return g->client_gone;
}

const char *srv_gen_first_error(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].done && !strcmp(g->ch[i].finish, "error"))
            return g->ch[i].msg[0] ? g->ch[i].msg : "the engine failed on this request";
    return NULL;
}

void srv_gen_usage(const srv_gen *g, int *prompt, int *completion, int *cached) {
    const srv_request *r = g->req;
    *prompt = *completion = *cached = 0;
    for (int p = 0; p < r->n_prompts; p++) {
        *prompt += r->prompts[p].n;
        *cached += g->ch[p * r->n].cached;
    }
    for (int i = 0; i < g->n_ch; i++) *completion += g->ch[i].n_counted;
}

/* The prompt as text, for echo: the request's string, else the detokenized ids. */
static bool echo_text(srv_gen *g, const srv_prompt *p, srv_buf *out) {
    if (p->text) return srv_buf_add(out, p->text, strlen(p->text));
    const weft_model_service *s = g->svc;
    if (!s->has_tokenizer) return true;
    void *dt = s->detok_new(s->ctx, NULL, 0);
    if (!dt) return false;
    srv_buf raw = {0};
    bool ok = true;
    for (int i = 0; i < p->n && ok; i++) {
        size_t len = 0;
        const char *b = s->detok_feed(s->ctx, dt, p->ids[i], &len);
        if (b && len) ok = srv_buf_add(&raw, b, len);
    }
    s->detok_free(s->ctx, dt);
    ok = ok && srv_buf_add_utf8_lossy(out, raw.p ? raw.p : "", raw.len);
    srv_buf_free(&raw);
    return ok;
}

static bool init_choice(srv_gen *g, srv_choice *c, int p, int j, srv_error *e) {
    const srv_request *r = g->req;
    const srv_prompt *pr = &r->prompts[p];
    c->g = g;
    c->prompt_index = p;
    c->index = p * r->n + j;
    uint64_t base = r->seed_given ? r->seed : weft_server_seed_from_prompt(pr->ids, pr->n, g->srv->cfg.seed_salt);
    c->seed = base + (uint64_t)j;
    c->cap = pr->max_tokens;
    c->ids = malloc(sizeof *c->ids * (size_t)(c->cap ? c->cap : 1));
    if (r->logprobs >= 0) {
        c->lps = malloc(sizeof *c->lps * (size_t)(c->cap ? c->cap : 1));
        c->text_offset = malloc(sizeof *c->text_offset * (size_t)(c->cap ? c->cap : 1));
    }
    if (!c->ids || (r->logprobs >= 0 && (!c->lps || !c->text_offset)))
        return srv_fail(e, 500, NULL, NULL, "out of memory for %d tokens", c->cap);
    if (g->svc->has_tokenizer) {
        c->detok = g->svc->detok_new(g->svc->ctx, pr->ids, pr->n);
        if (!c->detok) return srv_fail(e, 500, NULL, NULL, "could not create a detokenizer");
    }
    srv_textpipe_init(&c->tp, (const char *const *)r->stops, r->n_stops, r->split_reasoning,
                      r->start_in_reasoning);
    if (r->echo && !echo_text(g, pr, &c->content)) return srv_fail(e, 500, NULL, NULL, "out of memory");
    if (!srv_buf_add(&c->content, "", 0) || !srv_buf_add(&c->reasoning, "", 0))
        return srv_fail(e, 500, NULL, NULL, "out of memory");
    return true;
}

static bool submit_choice(srv_gen *g, srv_choice *c, srv_error *e) {
    const srv_request *r = g->req;
    const srv_prompt *pr = &r->prompts[c->prompt_index];
    if (c->cap == 0) { /* max_tokens 0: nothing to generate */
        c->finished = c->prefilled = true;
        c->end = WEFT_SRV_END_LENGTH;
        c->stats = (weft_srv_gen_stats){-1, -1, -1, -1, -1};
        return true;
    }
    weft_srv_job job = {0};
    job.prompt = pr->ids;
    job.n_prompt = pr->n;
    job.sampling = r->sampling;
    job.sampling.seed = c->seed;
    job.max_tokens = c->cap;
    job.ignore_eos = r->ignore_eos;
    job.draft = r->draft;
    job.choice = c->index;
    job.request_id = g->rid;
    weft_err err = {0};
    weft_status st = g->svc->submit(g->svc->ctx, &job, sink, c, &c->handle, &err);
    if (st == WEFT_OK) return true;
    c->handle = NULL;
    if (st == WEFT_EBUSY) {
        srv_fail(e, 503, NULL, "server_busy", "the server is busy (request queue full): %s", err.msg);
        e->retry_after = 1;
        return false;
    }
    if (st == WEFT_ECANCELLED) {
        srv_fail(e, 503, NULL, "shutting_down", "the server is shutting down");
        e->retry_after = 5;
        return false;
    }
    if (st == WEFT_EINVAL || st == WEFT_ERANGE) return srv_fail(e, 400, NULL, NULL, "%s", err.msg);
    return srv_fail(e, 500, NULL, NULL, "the engine refused the request: %s", err.msg);
}

bool srv_gen_start(srv_gen *g, weft_server *srv, srv_request *r, const char *rid, int fd, srv_error *e) {
    memset(g, 0, sizeof *g);
    g->srv = srv;
    g->svc = &srv->svc;
    g->req = r;
    g->fd = fd;
    g->t0 = weft_now();
    g->created = (int64_t)time(NULL);
    snprintf(g->rid, sizeof g->rid, "%s", rid);
    snprintf(g->id, sizeof g->id, "%s-%s", r->kind == SRV_CHAT ? "chatcmpl" : "cmpl", rid);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    atomic_fetch_add(&srv->active, 1);
    g->n_ch = r->n_prompts * r->n;
    g->ch = calloc((size_t)g->n_ch, sizeof *g->ch);
    if (!g->ch) {
        g->n_ch = 0;
        return srv_fail(e, 500, NULL, NULL, "out of memory");
    }
    for (int p = 0; p < r->n_prompts; p++)
        for (int j = 0; j < r->n; j++)
            if (!init_choice(g, &g->ch[p * r->n + j], p, j, e)) return false;
    for (int i = 0; i < g->n_ch; i++)
        if (!submit_choice(g, &g->ch[i], e)) return false;
    g->started = true;
    return true;
}

void srv_gen_end(srv_gen *g) {
    if (!g->srv) return;
    const weft_model_service *s = g->svc;
    bool fin[SRV_MAX_CHOICES];
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_ch; i++) fin[i] = g->ch[i].finished;
    pthread_mutex_unlock(&g->mu);
    /* cancel may deliver FINISHED synchronously through the sink, so it is called without g->mu */
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].handle && !fin[i]) s->cancel(s->ctx, g->ch[i].handle);
    pthread_mutex_lock(&g->mu);
    /* Every handle must see FINISHED before release: the engine stops a cancelled job within a round. */
    double t_warn = weft_now() + 30;
    for (;;) {
        bool all = true;
        for (int i = 0; i < g->n_ch; i++) all &= !g->ch[i].handle || g->ch[i].finished;
        if (all) break;
        cond_wait_s(g, SRV_WAKE_S);
        if (weft_now() > t_warn) {
            fprintf(stderr, "weft: request %s: still waiting for the engine to end a cancelled job\n", g->rid);
            t_warn = weft_now() + 30;
        }
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].handle) s->release(s->ctx, g->ch[i].handle);
    srv_gen_pump(g, 0); /* take what arrived last, for the metrics */
    srv_metrics_gen(&g->srv->metrics, g);
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (c->detok) s->detok_free(s->ctx, c->detok);
        srv_textpipe_free(&c->tp);
        srv_buf_free(&c->content);
        srv_buf_free(&c->reasoning);
        free(c->ids);
        free(c->lps);
        free(c->text_offset);
    }
    free(g->ch);
    srv_buf_free(&g->out);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    weft_server *srv = g->srv;
    g->srv = NULL;
    pthread_mutex_lock(&srv->mu);
    atomic_fetch_sub(&srv->active, 1);
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}
