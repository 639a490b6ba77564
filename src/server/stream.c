/* src/server/stream.c — Server-Sent Events for streamed replies (SPEC §3).
 *
 * Order per request: chat role deltas (one per choice), then per choice reasoning_content and content deltas
 * as the text pipeline releases them, a final chunk per choice with the last text, finish_reason and the
 * `weft` object, an error event when the server cancelled for shutdown or the engine failed, one usage chunk
 * (choices []) only when stream_options.include_usage is true, then `data: [DONE]`. */
#include <string.h>
#include "internal.h"

bool srv_sse_json(srv_buf *out, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    bool ok = s && srv_buf_adds(out, "data: ") && srv_buf_adds(out, s) && srv_buf_adds(out, "\n\n");
    free(s);
    return ok;
}

bool srv_sse_done(srv_buf *out) {
    return srv_buf_adds(out, "data: [DONE]\n\n");
}

static json_t *chunk_head(const srv_gen *g) {
    bool chat = g->req->kind == SRV_CHAT;
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(g->id));
    json_object_set_new(r, "object", json_string(chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(r, "created", json_integer(g->created));
    json_object_set_new(r, "model", json_string(g->svc->model_id));
    return r;
}

/* One chunk for one choice. delta_key: "content", "reasoning_content" or NULL (role-only / empty delta). */
static bool choice_chunk(srv_gen *g, srv_choice *c, const char *delta_key, const char *text, size_t n,
                         bool role, int lp_from, int lp_to, bool final) {
    bool chat = g->req->kind == SRV_CHAT;
    json_t *r = chunk_head(g);
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(c->index));
    if (chat) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (delta_key && (n || !final)) json_object_set_new(d, delta_key, json_stringn(text, n));
        json_object_set_new(o, "delta", d);
    } else {
        json_object_set_new(o, "text", json_stringn(text ? text : "", n));
    }
    json_object_set_new(o, "logprobs",
                        lp_to > lp_from ? srv_logprobs_json(g, c, lp_from, lp_to, chat) : json_null());
    json_object_set_new(o, "finish_reason", final ? json_string(c->finish) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, o);
    json_object_set_new(r, "choices", choices);
    if (final) json_object_set_new(r, "weft", srv_weft_json(g, c->index));
    return srv_sse_json(&g->out, r);
}

static bool error_event(srv_gen *g, const char *code, const char *msg) {
    srv_error e;
    srv_fail(&e, 500, NULL, code, "%s", msg);
    char *s = srv_error_json(&e);
    bool ok =
        s && srv_buf_adds(&g->out, "data: ") && srv_buf_adds(&g->out, s) && srv_buf_adds(&g->out, "\n\n");
    free(s);
    return ok;
}

static bool emit_choice(srv_gen *g, srv_choice *c) {
    bool chat = g->req->kind == SRV_CHAT;
    if (chat && c->reasoning.len > c->sent_reasoning) {
        if (!choice_chunk(g, c, "reasoning_content", c->reasoning.p + c->sent_reasoning,
                          c->reasoning.len - c->sent_reasoning, false, 0, 0, false))
            return false;
        c->sent_reasoning = c->reasoning.len;
    }
    int lp_to = g->req->logprobs >= 0 ? c->n_counted : c->sent_lp;
    size_t n = c->content.len - c->sent_content;
    if (c->done || n || lp_to > c->sent_lp) {
        if (!choice_chunk(g, c, "content", c->content.p + c->sent_content, n, false, c->sent_lp, lp_to,
                          c->done))
            return false;
        c->sent_content = c->content.len;
        c->sent_lp = lp_to;
        c->sent_final = c->done;
    }
    return true;
}

bool srv_stream_emit(srv_gen *g) {
    if (g->phase == 2) return true;
    if (g->phase == 0) {
        if (g->req->kind == SRV_CHAT)
            for (int i = 0; i < g->n_ch; i++)
                if (!choice_chunk(g, &g->ch[i], NULL, NULL, 0, true, 0, 0, false)) return false;
        g->phase = 1;
    }
    bool all = true;
    for (int i = 0; i < g->n_ch; i++) {
        srv_choice *c = &g->ch[i];
        if (!c->sent_final && !emit_choice(g, c)) return false;
        all &= c->sent_final;
    }
    const char *err = srv_gen_first_error(g);
    if (err && !g->stream_error) {
        /* An engine failure after the stream opened: one error event, then [DONE] (SPEC §3). */
        g->stream_error = true;
        srv_gen_cancel_all(g);
        if (!error_event(g, "engine_error", err) || !srv_sse_done(&g->out)) return false;
        g->phase = 2;
        return true;
    }
    if (!all) return true;
    bool cut = false;
    for (int i = 0; i < g->n_ch; i++) cut |= !strcmp(g->ch[i].finish, "cancelled");
    if (g->cancelled_shutdown && cut &&
        !error_event(g, "shutting_down", "the server is shutting down; the reply was cut short"))
        return false;
    if (g->req->include_usage) {
        json_t *r = chunk_head(g);
        json_object_set_new(r, "choices", json_array());
        json_object_set_new(r, "usage", srv_usage_json(g));
        if (!srv_sse_json(&g->out, r)) return false;
    }
    if (!srv_sse_done(&g->out)) return false;
    g->phase = 2;
    return true;
}
