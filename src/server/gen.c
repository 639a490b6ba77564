/* src/server/gen.c — one request in flight: one engine job per choice; the request thread reads each job's
 * events (next_event), keeps its tokens (arrays sized max_tokens at submit, so nothing grows per token) and
 * moves them through the choice's text pipeline.
 *
 * Stop strings are matched twice, by the same code on the same tokens: on the engine thread by the stop hook
 * (so the engine ends the job exactly at the token that completed one, without a wasted round), and here
 * (which decides the text and the counted tokens whether or not the service honours the hook). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"

void srv_metrics_gen(srv_metrics *m, const srv_gen *g); /* metrics.c */

/* Engine thread: feeds the newest generated tokens to the hook's own pipeline. */
static int stop_hook(void *ctx, const int32_t *generated, int n_generated) {
    srv_stophook *h = ctx;
    for (; !h->hit && h->n_fed < n_generated; h->n_fed++) {
        size_t len = 0;
        const char *b = h->svc->detok_feed(h->svc->ctx, h->detok, generated[h->n_fed], &len);
        bool oom = false;
        h->sink_c.len = h->sink_r.len = 0;
        if (b && len && srv_textpipe_feed(&h->tp, b, len, &h->sink_c, &h->sink_r, &oom)) h->hit = true;
    }
    return h->hit;
}

static void hook_free(const weft_model_service *s, srv_stophook *h) {
    if (!h) return;
    if (h->detok) s->detok_free(s->ctx, h->detok);
    srv_textpipe_free(&h->tp);
    srv_buf_free(&h->sink_c);
    srv_buf_free(&h->sink_r);
    free(h);
}

/* Stores one event of choice c. */
static void apply(srv_choice *c, const weft_srv_event *ev) {
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
                if (ev->logprobs)
                    c->lps[c->n_recv] = ev->logprobs[i];
                else
                    c->lp_missing = true;
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
    default:
        break;
    }
}

/* Takes every event already waiting; returns how many. */
static int drain(srv_gen *g) {
    int n = 0;
    weft_srv_event ev;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        while (c->handle && !c->finished && g->svc->next_event(g->svc->ctx, c->handle, &ev, 0)) {
            apply(c, &ev);
            n++;
        }
    }
    return n;
}

/* Blocks up to timeout_s on one unfinished job (round robin; short slices when there are several, so no
 * choice waits long behind another). */
static void wait_one(srv_gen *g, double timeout_s) {
    int live = 0;
    for (int i = 0; i < g->n_ch; i++) live += g->ch[i].handle && !g->ch[i].finished;
    if (!live) return;
    double slice = live > 1 ? 0.005 : timeout_s;
    double end = weft_now() + timeout_s;
    weft_srv_event ev;
    do {
        srv_choice *c;
        do c = &g->ch[g->rr++ % g->n_ch];
        while (!c->handle || c->finished);
        if (g->svc->next_event(g->svc->ctx, c->handle, &ev, slice)) {
            apply(c, &ev);
            return;
        }
        if (drain(g)) return;
    } while (weft_now() < end);
}

/* Code points in valid UTF-8 s[0..n): every byte that is not a continuation byte starts one. */
static int utf8_chars(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Where the next token's text starts, in characters as OpenAI and vLLM count text_offset (Python str
 * offsets): the released text plus what the stop stage holds back (its text precedes this token too). */
static int text_offset_now(srv_choice *c) {
    c->chars += utf8_chars(c->content.p + c->chars_at, c->content.len - c->chars_at);
    c->chars_at = c->content.len;
    return c->chars + utf8_chars(c->tp.held.p, c->tp.held.len);
}

static void take_token(srv_gen *g, srv_choice *c, int k) {
    if (c->stop_hit) return; /* past the stop string: not part of the reply */
    c->n_counted = k + 1;
    if (c->text_offset) c->text_offset[k] = text_offset_now(c);
    if (!c->detok) return;
    size_t len = 0;
    const char *bytes = g->svc->detok_feed(g->svc->ctx, c->detok, c->ids[k], &len);
    bool oom = false;
    if (bytes && len && srv_textpipe_feed(&c->tp, bytes, len, &c->content, &c->reasoning, &oom)) {
        c->stop_hit = true;
        /* Without the stop hook the engine stops within a round; the tokens after this one are dropped. */
        g->svc->cancel(g->svc->ctx, c->handle);
    }
}

static void finalize(srv_gen *g, srv_choice *c) {
    const weft_model_service *s = g->svc;
    size_t len = 0;
    const char *tail =
        !c->stop_hit && c->detok && s->detok_flush ? s->detok_flush(s->ctx, c->detok, &len) : NULL;
    bool oom = false;
    if (tail && len && srv_textpipe_feed(&c->tp, tail, len, &c->content, &c->reasoning, &oom))
        c->stop_hit = true;
    srv_textpipe_finish(&c->tp, &c->content, &c->reasoning);
    if (c->stop_hit)
        c->finish = "stop";
    else if (c->overflow)
        c->finish = "length";
    else
        switch (c->end) {
        case WEFT_SRV_END_STOP:
            c->finish = "stop";
            break;
        case WEFT_SRV_END_LENGTH:
            c->finish = "length";
            break;
        case WEFT_SRV_END_CANCELLED:
        case WEFT_SRV_END_REFUSED:
            c->finish = "cancelled";
            break;
        default:
            c->finish = "error";
            break;
        }
    c->done = true;
}

bool srv_gen_pump(srv_gen *g, double timeout_s) {
    if (!drain(g) && timeout_s > 0) wait_one(g, timeout_s);
    bool changed = false;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (c->done) continue;
        if (c->prefilled && !c->prefill_seen) c->prefill_seen = changed = true;
        for (; c->n_seen < c->n_recv; c->n_seen++, changed = true) take_token(g, c, c->n_seen);
        if (c->finished) {
            finalize(g, c);
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

bool srv_gen_any_started(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].prefill_seen || g->ch[i].n_seen) return true;
    return false;
}

bool srv_gen_refused(const srv_gen *g) {
    for (int i = 0; i < g->n_ch; i++) {
        const srv_choice *c = &g->ch[i];
        if (!c->done || c->prefill_seen || c->n_seen) return false;
        if (c->end != WEFT_SRV_END_REFUSED && c->end != WEFT_SRV_END_CANCELLED) return false;
    }
    return g->n_ch > 0;
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
        if (!g->svc->stop) srv_gen_cancel_all(g); /* else the engine's stop ends every job in order */
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
    uint64_t base =
        r->seed_given ? r->seed : weft_seed_from_prompt(pr->ids, (size_t)pr->n, g->srv->cfg.seed_salt);
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
    if (r->n_stops && g->svc->has_tokenizer) {
        c->hook = calloc(1, sizeof *c->hook);
        if (!c->hook) return srv_fail(e, 500, NULL, NULL, "out of memory");
        c->hook->svc = g->svc;
        c->hook->detok = g->svc->detok_new(g->svc->ctx, pr->ids, pr->n);
        if (!c->hook->detok) return srv_fail(e, 500, NULL, NULL, "could not create a detokenizer");
        srv_textpipe_init(&c->hook->tp, (const char *const *)r->stops, r->n_stops, false, false);
    }
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
    job.stop = c->hook ? stop_hook : NULL;
    job.stop_ctx = c->hook;
    job.choice = c->index;
    job.request_id = g->rid;
    weft_err err = {0};
    weft_status st = g->svc->submit(g->svc->ctx, &job, &c->handle, &err);
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
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].handle && !g->ch[i].finished) s->cancel(s->ctx, g->ch[i].handle);
    /* Every handle must see FINISHED before release: the engine stops a cancelled job within a round. */
    double t_warn = weft_now() + 30;
    for (;;) {
        bool all = true;
        for (int i = 0; i < g->n_ch; i++) all &= !g->ch[i].handle || g->ch[i].finished;
        if (all) break;
        srv_gen_pump(g, SRV_WAKE_S);
        if (weft_now() > t_warn) {
            srv_log(g->srv, "weft: request %s: still waiting for the engine to end a cancelled job", g->rid);
            t_warn = weft_now() + 30;
        }
    }
    srv_gen_pump(g, 0); /* what arrived last counts in the metrics */
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].handle) s->release(s->ctx, g->ch[i].handle);
    srv_metrics_gen(&g->srv->metrics, g);
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (c->detok) s->detok_free(s->ctx, c->detok);
        hook_free(s, c->hook);
        srv_textpipe_free(&c->tp);
        srv_buf_free(&c->content);
        srv_buf_free(&c->reasoning);
        free(c->ids);
        free(c->lps);
        free(c->text_offset);
    }
    free(g->ch);
    srv_buf_free(&g->out);
    g->srv = NULL;
}
