/* src/server/response.c — OpenAI JSON shapes: non-streamed completions and chat replies, usage, logprobs,
 * the `weft` object (token_sha, seed, token ids, rounds, drafts, timings), /v1/models. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

json_t *srv_usage_json(const srv_gen *g) {
    int p, c, k;
    srv_gen_usage(g, &p, &c, &k);
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(p));
    json_object_set_new(u, "completion_tokens", json_integer(c));
    json_object_set_new(u, "total_tokens", json_integer(p + c));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(k));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static bool want_ids(const srv_gen *g) {
    return g->req->return_token_ids || !g->svc->has_tokenizer;
}

static json_t *ids_json(const srv_choice *c) {
    json_t *a = json_array();
    for (int i = 0; i < c->n_counted; i++) json_array_append_new(a, json_integer(c->ids[i]));
    return a;
}

/* Per-choice fields: token_sha, seed, token_ids, engine statistics, ttft. */
static void choice_fields(const srv_gen *g, const srv_choice *c, json_t *o, bool stats) {
    char sha[13];
    weft_token_sha(c->ids, (size_t)c->n_counted, sha);
    json_object_set_new(o, "token_sha", json_string(sha));
    json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
    if (want_ids(g)) json_object_set_new(o, "token_ids", ids_json(c));
    if (!stats) return;
    if (c->stats.rounds >= 0) json_object_set_new(o, "rounds", json_integer(c->stats.rounds));
    if (c->stats.drafted >= 0) json_object_set_new(o, "drafted", json_integer(c->stats.drafted));
    if (c->stats.accepted >= 0) json_object_set_new(o, "accepted", json_integer(c->stats.accepted));
    if (c->stats.prefill_s >= 0) json_object_set_new(o, "prefill_seconds", json_real(c->stats.prefill_s));
    if (c->stats.decode_s >= 0) json_object_set_new(o, "decode_seconds", json_real(c->stats.decode_s));
    if (c->t_first > 0) json_object_set_new(o, "ttft_seconds", json_real(c->t_first - g->t0));
}

json_t *srv_weft_json(const srv_gen *g, int only_choice) {
    json_t *w = json_object();
    if (only_choice >= 0) {
        json_object_set_new(w, "index", json_integer(only_choice));
        choice_fields(g, &g->ch[only_choice], w, true);
        return w;
    }
    choice_fields(g, &g->ch[0], w, true);
    if (g->n_ch > 1) {
        json_t *a = json_array();
        for (int i = 0; i < g->n_ch; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "index", json_integer(i));
            choice_fields(g, &g->ch[i], o, true); /* each choice its own rounds, drafts, times */
            json_array_append_new(a, o);
        }
        json_object_set_new(w, "choices", a);
    }
    return w;
}

/* The piece of one token as raw bytes. */
static const char *piece(const srv_gen *g, int32_t id, size_t *len, srv_buf *tmp) {
    const weft_model_service *s = g->svc;
    *len = 0;
    if (!s->has_tokenizer) { /* no text for ids: name them as vLLM does, so alternatives stay distinct */
        char name[32];
        int n = snprintf(name, sizeof name, "token_id:%d", (int)id);
        tmp->len = 0;
        srv_buf_add(tmp, name, n > 0 ? (size_t)n : 0);
        *len = tmp->len;
        return tmp->p ? tmp->p : "";
    }
    if (s->token_piece) {
        const char *p = s->token_piece(s->ctx, id, len);
        return p ? p : "";
    }
    void *dt = s->detok_new(s->ctx, NULL, 0);
    tmp->len = 0;
    if (dt) {
        size_t n = 0;
        const char *b = s->detok_feed(s->ctx, dt, id, &n);
        if (b && n) srv_buf_add(tmp, b, n);
        s->detok_free(s->ctx, dt);
    }
    *len = tmp->len;
    return tmp->p ? tmp->p : "";
}

static json_t *lp_value(float v) {
    return json_real(isfinite(v) ? (double)v : -9999.0);
}

static json_t *bytes_json(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* {"token","logprob","bytes"} (chat) */
static json_t *chat_entry(const srv_gen *g, int32_t id, float lp, srv_buf *tmp) {
    size_t n;
    const char *p = piece(g, id, &n, tmp);
    json_t *o = json_object();
    srv_json_string(o, "token", p, n);
    json_object_set_new(o, "logprob", lp_value(lp));
    json_object_set_new(o, "bytes", bytes_json(p, n));
    return o;
}

json_t *srv_logprobs_json(const srv_gen *g, const srv_choice *c, int from, int to, bool chat) {
    if (!c->lps || c->lp_missing) return json_null();
    srv_buf tmp = {0};
    json_t *out = json_object();
    if (chat) {
        json_t *content = json_array();
        for (int i = from; i < to; i++) {
            const weft_logprobs *l = &c->lps[i];
            json_t *e = chat_entry(g, c->ids[i], l->logprob, &tmp);
            json_t *tops = json_array();
            for (int k = 0; k < l->n_top && k < g->req->logprobs; k++)
                json_array_append_new(tops, chat_entry(g, l->top_ids[k], l->top_logprobs[k], &tmp));
            json_object_set_new(e, "top_logprobs", tops);
            json_array_append_new(content, e);
        }
        json_object_set_new(out, "content", content);
    } else {
        json_t *toks = json_array(), *tlp = json_array(), *tops = json_array(), *offs = json_array();
        for (int i = from; i < to; i++) {
            const weft_logprobs *l = &c->lps[i];
            size_t n;
            const char *p = piece(g, c->ids[i], &n, &tmp);
            srv_buf s = {0};
            srv_buf_add_utf8_lossy(&s, p, n);
            json_array_append_new(toks, json_stringn(s.p ? s.p : "", s.len));
            json_array_append_new(tlp, lp_value(l->logprob));
            json_t *d = json_object();
            for (int k = 0; k < l->n_top && k < g->req->logprobs; k++) {
                s.len = 0;
                p = piece(g, l->top_ids[k], &n, &tmp);
                srv_buf_add_utf8_lossy(&s, p, n);
                if (!json_object_get(d, s.p ? s.p : ""))
                    json_object_set_new(d, s.p ? s.p : "", lp_value(l->top_logprobs[k]));
            }
            s.len = 0;
            p = piece(g, c->ids[i], &n, &tmp);
            srv_buf_add_utf8_lossy(&s, p, n);
            if (!json_object_get(d, s.p ? s.p : ""))
                json_object_set_new(d, s.p ? s.p : "", lp_value(l->logprob));
            srv_buf_free(&s);
            json_array_append_new(tops, d);
            json_array_append_new(offs, json_integer(c->text_offset[i]));
        }
        json_object_set_new(out, "tokens", toks);
        json_object_set_new(out, "token_logprobs", tlp);
        json_object_set_new(out, "top_logprobs", tops);
        json_object_set_new(out, "text_offset", offs);
    }
    srv_buf_free(&tmp);
    return out;
}

static json_t *reply_head(const srv_gen *g, const char *object) {
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(g->id));
    json_object_set_new(r, "object", json_string(object));
    json_object_set_new(r, "created", json_integer(g->created));
    json_object_set_new(r, "model", json_string(g->svc->model_id));
    return r;
}

char *srv_reply_json(const srv_gen *g) {
    bool chat = g->req->kind == SRV_CHAT;
    json_t *r = reply_head(g, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < g->n_ch; i++) {
        const srv_choice *c = &g->ch[i];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(i));
        if (chat) {
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("assistant"));
            json_object_set_new(m, "content", json_stringn(c->content.p, c->content.len));
            if (c->reasoning.len)
                json_object_set_new(m, "reasoning_content", json_stringn(c->reasoning.p, c->reasoning.len));
            json_object_set_new(o, "message", m);
        } else {
            json_object_set_new(o, "text", json_stringn(c->content.p, c->content.len));
        }
        json_object_set_new(o, "logprobs",
                            g->req->logprobs >= 0 ? srv_logprobs_json(g, c, 0, c->n_counted, chat)
                                                  : json_null());
        json_object_set_new(o, "finish_reason", json_string(c->finish ? c->finish : "error"));
        json_array_append_new(choices, o);
    }
    json_object_set_new(r, "choices", choices);
    json_object_set_new(r, "usage", srv_usage_json(g));
    json_object_set_new(r, "weft", srv_weft_json(g, -1));
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}

char *srv_models_json(const weft_model_service *svc) {
    json_t *data = json_array();
    for (int i = -1; i < svc->n_aliases; i++) {
        json_t *m = json_object();
        json_object_set_new(m, "id", json_string(i < 0 ? svc->model_id : svc->aliases[i]));
        json_object_set_new(m, "object", json_string("model"));
        json_object_set_new(m, "created", json_integer(svc->created));
        json_object_set_new(m, "owned_by", json_string("weft"));
        json_object_set_new(m, "root", json_string(svc->model_id));
        json_object_set_new(m, "context_length", json_integer(svc->context_length));
        json_object_set_new(m, "max_model_len", json_integer(svc->context_length));
        json_array_append_new(data, m);
    }
    json_t *r = json_object();
    json_object_set_new(r, "object", json_string("list"));
    json_object_set_new(r, "data", data);
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}
