/* src/server/service_lanes.c — the model service over the real components: the lane engine (weft/lanes.h),
 * the tokenizer (weft/tokenizer.h) and the chat template (weft/template.h). A thin mapping: the server's
 * job/event/stop-hook shapes are the lane core's own. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include "weft/lanes.h"
#include "weft/server.h"
#include "weft/template.h"
#include "weft/tokenizer.h"

struct weft_service {
    weft_service_config cfg;
    weft_template *tmpl;
    bool thinks;
};

/* ---- tokenizer ---- */

static weft_status s_tokenize(void *ctx, const char *text, size_t len, bool add_special, bool parse_special,
                              int32_t **ids, int *n_ids, weft_err *err) {
    weft_service *s = ctx;
    weft_tok_vec v = {0};
    unsigned flags =
        (add_special ? WEFT_TOK_ADD_SPECIAL : 0u) | (parse_special ? WEFT_TOK_PARSE_SPECIAL : 0u);
    weft_status st = weft_tokenizer_encode(s->cfg.tokenizer, text, len, flags, &v, err);
    if (st) {
        weft_tok_vec_free(&v);
        return st;
    }
    *ids = v.ids; /* realloc'd by the tokenizer: the server free()s it */
    *n_ids = (int)v.n;
    return WEFT_OK;
}

typedef struct s_detok {
    weft_detok d;
    size_t cap;
    char buf[]; /* weft_detok_bound bytes */
} s_detok;

static void *s_detok_new(void *ctx, const int32_t *prompt, int n_prompt) {
    weft_service *s = ctx;
    size_t cap = weft_detok_bound(s->cfg.tokenizer);
    if (cap < 8) cap = 8;
    s_detok *d = malloc(sizeof *d + cap);
    if (!d) return NULL;
    d->cap = cap;
    weft_detok_init(&d->d, s->cfg.tokenizer, 0);
    weft_err err;
    /* The prompt is context: the reply's first piece keeps its leading space (as vLLM's incremental
     * detokenizer does). A prompt id past the tokenizer's vocabulary (padded embeddings) means no context. */
    if (n_prompt > 0 && weft_detok_prime(&d->d, prompt, (size_t)n_prompt, &err))
        weft_detok_init(&d->d, s->cfg.tokenizer, 0);
    return d;
}

static const char *s_detok_feed(void *ctx, void *dt, int32_t id, size_t *len) {
    s_detok *d = dt;
    weft_err err;
    *len = 0;
    if (weft_detok_feed(&d->d, id, d->buf, d->cap, len, &err)) *len = 0; /* an id with no token: no text */
    return d->buf;
}

/* The end of a reply: bytes of a character that max_tokens (or a stop) cut in half are dropped, not shown
 * as U+FFFD: the reply text holds whole characters only (token_ids still carry every token). */
static const char *s_detok_flush(void *ctx, void *dt, size_t *len) {
    (void)dt;
    *len = 0;
    return "";
}

static void s_detok_free(void *ctx, void *dt) {
    free(dt);
}

static const char *s_piece(void *ctx, int32_t id, size_t *len) {
    weft_service *s = ctx;
    const char *p = weft_tokenizer_piece(s->cfg.tokenizer, id, len);
    return p ? p : "";
}

/* ---- chat template ---- */

static weft_status s_render(void *ctx, const char *messages_json, const char *kwargs_json, bool add_gen,
                            char **text, weft_err *err) {
    weft_service *s = ctx;
    json_t *msgs = json_loads(messages_json, 0, NULL), *kw = json_loads(kwargs_json, 0, NULL);
    weft_status st;
    if (!msgs || !kw)
        st = weft_err_set(err, WEFT_EINVAL, "chat template: the messages are not valid JSON");
    else {
        weft_chat_params p = {msgs, NULL, add_gen, s->cfg.bos_text, s->cfg.eos_text, kw};
        st = weft_template_render_chat(s->tmpl, &p, NULL, text, NULL, err);
    }
    json_decref(msgs);
    json_decref(kw);
    return st;
}

/* ---- engine ---- */

static weft_status s_submit(void *ctx, const weft_srv_job *job, void **handle, weft_err *err) {
    weft_service *s = ctx;
    weft_request r = {.prompt = job->prompt,
                      .n_prompt = job->n_prompt,
                      .sampling = job->sampling,
                      .max_tokens = job->max_tokens,
                      .ignore_eos = job->ignore_eos,
                      .draft = job->draft,
                      .stop = job->stop,
                      .stop_ctx = job->stop_ctx};
    weft_request_handle *h = NULL;
    weft_status st = weft_engine_submit(s->cfg.engine, &r, &h, err);
    *handle = h;
    return st;
}

static bool s_next(void *ctx, void *handle, weft_srv_event *out, double timeout_s) {
    weft_event ev;
    memset(out, 0, sizeof *out);
    if (!weft_request_next_event(handle, &ev, timeout_s)) return false;
    switch (ev.kind) {
    case WEFT_EVENT_PREFILLED:
        out->kind = WEFT_SRV_EV_PREFILLED;
        out->cached_tokens = ev.cached_tokens;
        return true;
    case WEFT_EVENT_TOKENS:
        out->kind = WEFT_SRV_EV_TOKENS;
        out->ids = ev.tokens;
        out->n_ids = ev.n_tokens;
        out->logprobs = ev.logprobs;
        return true;
    case WEFT_EVENT_FINISHED:
        out->kind = WEFT_SRV_EV_FINISHED;
        switch (ev.reason) {
        case WEFT_FINISH_STOP:
            out->end = WEFT_SRV_END_STOP;
            break;
        case WEFT_FINISH_LENGTH:
            out->end = WEFT_SRV_END_LENGTH;
            break;
        case WEFT_FINISH_CANCELLED:
            out->end = WEFT_SRV_END_CANCELLED;
            break;
        case WEFT_FINISH_REFUSED:
            out->end = WEFT_SRV_END_REFUSED;
            break;
        default:
            out->end = WEFT_SRV_END_ERROR;
            break;
        }
        out->message = ev.message;
        out->stats = (weft_srv_gen_stats){ev.stats.rounds, ev.stats.drafted, ev.stats.accepted,
                                          ev.stats.prefill_seconds, ev.stats.decode_seconds};
        return true;
    default:
        return false;
    }
}

static void s_cancel(void *ctx, void *handle) {
    weft_engine_cancel(handle);
}
static void s_release(void *ctx, void *handle) {
    weft_request_release(handle);
}
static void s_stop(void *ctx) {
    weft_engine_stop(((weft_service *)ctx)->cfg.engine);
}

static void s_stats(void *ctx, weft_srv_engine_stats *out) {
    weft_service *s = ctx;
    weft_engine_stats es;
    weft_engine_get_stats(s->cfg.engine, &es);
    out->requests_running = es.running;
    out->requests_waiting = es.waiting;
    /* positions held in the streams' caches over every slot's positions (KV is reserved per slot at open) */
    out->kv_cache_usage =
        es.kv_rows_capacity > 0 ? (double)es.kv_rows_used / (double)es.kv_rows_capacity : -1;
    out->device_memory_bytes = es.memory_used + es.memory_free > 0 ? (int64_t)es.memory_used : -1;
    out->prefix_cache_queries = (int64_t)es.prefix_cache_queries;
    out->prefix_cache_hits = (int64_t)es.prefix_cache_hits;
    out->prompt_cache_bytes = (int64_t)es.prompt_cache_bytes;
    out->prompt_cache_budget = (int64_t)es.prompt_cache_budget;
    out->parallel = es.parallel;
    out->prompt_tokens_total = (int64_t)es.prompt_tokens_total;
    out->generation_tokens_total = (int64_t)es.generation_tokens_total;
    out->drafted_total = (int64_t)es.drafted_total;
    out->accepted_total = (int64_t)es.accepted_total;
}

weft_status weft_service_new(const weft_service_config *cfg, weft_service **out, weft_model_service *svc,
                             weft_err *err) {
    *out = NULL;
    if (!cfg->engine || !cfg->model_id || cfg->context_length <= 0 || cfg->vocab_size <= 0)
        return weft_err_set(err, WEFT_EINVAL,
                            "service: engine, model_id, context_length and vocab_size are needed");
    weft_service *s = calloc(1, sizeof *s);
    if (!s) return weft_err_set(err, WEFT_ENOMEM, "service: out of memory");
    s->cfg = *cfg;
    if (cfg->chat_template && cfg->tokenizer) {
        weft_status st = weft_template_compile(cfg->chat_template, strlen(cfg->chat_template), &s->tmpl, err);
        if (st) {
            free(s);
            return st;
        }
        weft_template_thinking th;
        if (weft_template_probe_thinking(s->tmpl, &th, err) == WEFT_OK) s->thinks = th.mentions_think;
    }
    memset(svc, 0, sizeof *svc);
    svc->ctx = s;
    svc->model_id = cfg->model_id;
    svc->aliases = cfg->aliases;
    svc->n_aliases = cfg->n_aliases;
    svc->created = cfg->created ? cfg->created : (int64_t)time(NULL);
    svc->context_length = cfg->context_length;
    svc->vocab_size = cfg->vocab_size;
    svc->has_tokenizer = cfg->tokenizer != NULL;
    svc->has_chat_template = s->tmpl != NULL;
    svc->thinks = s->thinks;
    weft_engine_stats es;
    weft_engine_get_stats(cfg->engine, &es);
    svc->max_streams = es.parallel + es.max_queue;
    if (cfg->tokenizer) {
        svc->add_bos = weft_tokenizer_add_bos(cfg->tokenizer);
        svc->tokenize = s_tokenize;
        svc->detok_new = s_detok_new;
        svc->detok_feed = s_detok_feed;
        svc->detok_flush = s_detok_flush;
        svc->detok_free = s_detok_free;
        svc->token_piece = s_piece;
    }
    if (s->tmpl) svc->render_chat = s_render;
    svc->submit = s_submit;
    svc->next_event = s_next;
    svc->cancel = s_cancel;
    svc->release = s_release;
    svc->stop = s_stop;
    svc->stats = s_stats;
    *out = s;
    return WEFT_OK;
}

void weft_service_free(weft_service *s) {
    if (!s) return;
    weft_template_free(s->tmpl);
    free(s);
}
