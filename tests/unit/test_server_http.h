/* test_server_http.h — helpers shared by the in-process HTTP tests (a real server on a loopback port, the
 * fake model service, the tiny C client). */
#ifndef TEST_SERVER_HTTP_H
#define TEST_SERVER_HTTP_H

#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "check.h"
#include "test_server_client.h"
#include "test_server_fake.h"

typedef struct env {
    fake_engine *f;
    weft_server *s;
    int port;
} env;

/* Starts a server on an ephemeral port over a fake engine. cfg NULL = defaults (quiet log). */
static inline void env_start(env *e, const fake_config *fc, const weft_server_config *cfg) {
    fake_config dfc;
    if (!fc) {
        fake_config_default(&dfc);
        fc = &dfc;
    }
    weft_server_config c;
    if (cfg)
        c = *cfg;
    else {
        weft_server_config_default(&c);
        c.log_format = WEFT_LOG_NONE;
    }
    c.port = 0;
    weft_err err = {0};
    e->f = fake_new(fc);
    CHECK(weft_server_create(&c, &e->s, &err) == WEFT_OK);
    CHECK_MSG(weft_server_start(e->s, &err) == WEFT_OK, "%s", err.msg);
    weft_model_service svc = fake_service(e->f);
    CHECK(weft_server_attach(e->s, &svc, &err) == WEFT_OK);
    e->port = weft_server_port(e->s);
}

static inline void env_stop(env *e) {
    weft_server_destroy(e->s);
    fake_free(e->f);
}

static inline json_t *body_json(const http_resp *r) {
    json_t *j = r->body ? json_loads(r->body, JSON_ALLOW_NUL, NULL) : NULL;
    CHECK_MSG(j != NULL, "body is not JSON: %.300s", r->body ? r->body : "(none)");
    return j;
}

/* json path helpers: "a.b.0.c" */
static inline json_t *jget(json_t *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && j; tok = strtok(NULL, ".")) {
        if (json_is_array(j))
            j = json_array_get(j, (size_t)atoi(tok));
        else
            j = json_object_get(j, tok);
    }
    return j;
}
static inline const char *jstr(json_t *j, const char *path) {
    json_t *v = jget(j, path);
    return json_is_string(v) ? json_string_value(v) : "(missing)";
}
static inline long long jint(json_t *j, const char *path) {
    json_t *v = jget(j, path);
    return json_is_integer(v) ? json_integer_value(v) : -12345;
}

/* Checks an OpenAI error body: {"error":{"message","type","param","code"}}. */
static inline void check_error(const http_resp *r, int status, const char *type, const char *code) {
    CHECK_MSG(r->status == status, "status %d, want %d: %.300s", r->status, status, r->body ? r->body : "");
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_string(json_object_get(e, "message")));
    CHECK(json_object_get(e, "param") != NULL && json_object_get(e, "code") != NULL);
    CHECK_STR(jstr(e, "type"), type);
    if (code) CHECK_STR(jstr(e, "code"), code);
    json_decref(j);
}

/* A parsed stream: concatenated text per choice, and what the chunks said. */
typedef struct stream_out {
    char text[8][4096], reasoning[8][4096];
    char finish[8][32];
    int finishes[8]; /* how many chunks carried a finish_reason, per choice */
    int n_usage;     /* chunks carrying usage */
    int usage_last;  /* the usage chunk was the last before [DONE] with choices [] */
    long long completion_tokens, prompt_tokens, total_tokens;
    int n_lp;        /* logprob entries seen (choice 0) */
    bool done_last;  /* [DONE] is the last event */
    bool role_first; /* chat: the first chunk of each choice carried only the role */
    int n_errors;    /* data: {"error":...} events */
    bool bad_index;
    json_t *weft[8]; /* the weft object of each choice's final chunk (owned) */
} stream_out;

static inline void stream_parse(const char *body, bool chat, stream_out *o) {
    memset(o, 0, sizeof *o);
    char **ev;
    int n = sse_events(body, &ev);
    o->done_last = n > 0 && !strcmp(ev[n - 1], "[DONE]");
    o->role_first = chat;
    bool seen[8] = {0};
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i], "[DONE]")) continue;
        json_t *j = json_loads(ev[i], JSON_ALLOW_NUL, NULL);
        CHECK_MSG(j != NULL, "event is not JSON: %s", ev[i]);
        if (!j) continue;
        if (json_object_get(j, "error")) o->n_errors++;
        json_t *u = json_object_get(j, "usage");
        if (u && !json_is_null(u)) {
            o->n_usage++;
            o->usage_last = i == n - 2 && json_array_size(json_object_get(j, "choices")) == 0;
            o->completion_tokens = jint(u, "completion_tokens");
            o->prompt_tokens = jint(u, "prompt_tokens");
            o->total_tokens = jint(u, "total_tokens");
        }
        json_t *cs = json_object_get(j, "choices");
        for (size_t k = 0; k < json_array_size(cs); k++) {
            json_t *c = json_array_get(cs, k);
            long long idx = jint(c, "index");
            if (idx < 0 || idx >= 8) {
                o->bad_index = true;
                continue;
            }
            json_t *d = chat ? json_object_get(c, "delta") : c;
            const char *t = json_string_value(json_object_get(d, chat ? "content" : "text"));
            const char *rs = json_string_value(json_object_get(d, "reasoning_content"));
            if (chat && !seen[idx])
                o->role_first &= json_object_size(d) == 1 && !strcmp(jstr(d, "role"), "assistant");
            seen[idx] = true;
            if (t) strncat(o->text[idx], t, sizeof o->text[idx] - strlen(o->text[idx]) - 1);
            if (rs) strncat(o->reasoning[idx], rs, sizeof o->reasoning[idx] - strlen(o->reasoning[idx]) - 1);
            json_t *lp = json_object_get(c, "logprobs");
            if (idx == 0 && json_is_object(lp))
                o->n_lp += (int)json_array_size(json_object_get(lp, chat ? "content" : "tokens"));
            json_t *fr = json_object_get(c, "finish_reason");
            if (json_is_string(fr)) {
                o->finishes[idx]++;
                snprintf(o->finish[idx], sizeof o->finish[idx], "%s", json_string_value(fr));
                json_t *w = json_object_get(j, "weft");
                if (w && !o->weft[idx]) o->weft[idx] = json_incref(w);
            }
        }
        json_decref(j);
    }
    sse_free(ev, n);
}

static inline void stream_free(stream_out *o) {
    for (int i = 0; i < 8; i++) json_decref(o->weft[i]);
}

#endif
