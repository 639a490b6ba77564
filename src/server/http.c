/* src/server/http.c — libmicrohttpd plumbing: routing, API keys, body limit, replies, streaming, access log.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION): a request's thread may block while the engine
 * works, waking every SRV_WAKE_S to check whether its client is still there (poll on the socket) and whether
 * the server is shutting down. A streamed reply is a callback response whose reader blocks the same way, so
 * many concurrent streams each get their own thread and never delay each other. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include "internal.h"
#include "weft/console.h"

char *srv_tokenize_reply(const weft_model_service *svc, const char *body, size_t len, srv_error *e);
char *srv_detokenize_reply(const weft_model_service *svc, const char *body, size_t len, srv_error *e);
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);

typedef enum route_id {
    R_NONE = 0,
    R_HEALTH,
    R_MODELS,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_METRICS,
} route_id;

static const struct {
    const char *path;
    route_id id;
    bool post;
} k_routes[] = {
    {"/health", R_HEALTH, false},          {"/models", R_MODELS, false},
    {"/completions", R_COMPLETIONS, true}, {"/chat/completions", R_CHAT, true},
    {"/tokenize", R_TOKENIZE, true},       {"/detokenize", R_DETOKENIZE, true},
    {"/metrics", R_METRICS, false},
};

/* Per-request state (MHD's con_cls), on the connection's thread. */
typedef struct conn_req {
    weft_server *srv;
    route_id route;
    bool too_large, answered, streaming;
    srv_buf body;
    char rid[136];
    char method[8];
    char path[80];
    double t0;
    int status;
    int prompt_tokens, completion_tokens, cached;
} conn_req;

/* A streamed reply: owned by the MHD response, freed by its free callback. */
typedef struct stream_ctx {
    srv_gen g;
    srv_request r;
    conn_req log;     /* a copy for the access line (the con_cls may be gone by then) */
    double last_out;  /* weft_now() of the last bytes handed to MHD */
    double keepalive; /* seconds without output after which an SSE comment is sent */
} stream_ctx;

bool srv_peer_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* Whether code point c (valid UTF-8 of 2..4 bytes) must not reach a terminal or log viewer raw: C1 controls
 * (0x9B is CSI on 8-bit terminals), the line/paragraph separators and the bidirectional controls that
 * reorder what a reader sees (LRM/RLM, ALM, embeddings/overrides U+202A..E, isolates U+2066..9). */
static bool log_unsafe_cp(unsigned c) {
    return (c >= 0x80 && c <= 0x9f) || c == 0x61c || c == 0x200e || c == 0x200f ||
           (c >= 0x2028 && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

/* A request line's field for the text log: bytes below 0x21, 0x7f, backslash and quote become \xNN, so a
 * URL-decoded path (%0A, %20) can neither forge a line nor shift the fields after it; so do the bytes of
 * invalid UTF-8 (%FF: the line stays valid UTF-8 for log shippers) and of the code points above. */
static void log_escaped(srv_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int k = p[i] < 0x80 ? 1 : srv_utf8_seq(p + i, n - i);
        if (k <= 0) { /* invalid or cut short: this byte alone */
            srv_buf_printf(b, "\\x%02x", p[i++]);
            continue;
        }
        unsigned c = k == 1 ? p[i] : k == 2 ? (p[i] & 0x1fu) : k == 3 ? (p[i] & 0x0fu) : (p[i] & 0x07u);
        for (int j = 1; j < k; j++) c = c << 6 | (p[i + j] & 0x3fu);
        if (c <= 0x20 || c == 0x7f || c == '\\' || c == '"' || log_unsafe_cp(c))
            for (int j = 0; j < k; j++) srv_buf_printf(b, "\\x%02x", p[i + j]);
        else
            srv_buf_add(b, (const char *)p + i, (size_t)k);
        i += (size_t)k;
    }
}

/* One access line. JSON lines are built with jansson (the path is escaped, invalid UTF-8 becomes U+FFFD);
 * text lines escape what could break a line. Written with one fwrite so lines never interleave. */
static void access_log(weft_server *srv, const conn_req *q) {
    if (srv->cfg.log_format == WEFT_LOG_NONE) return;
    double ms = (weft_now() - q->t0) * 1e3;
    srv_buf b = {0};
    if (srv->cfg.log_format == WEFT_LOG_JSON) {
        json_t *o = json_object();
        srv_json_string(o, "id", q->rid, strlen(q->rid));
        srv_json_string(o, "method", q->method, strlen(q->method));
        srv_json_string(o, "route", q->path, strlen(q->path));
        json_object_set_new(o, "status", json_integer(q->status));
        json_object_set_new(o, "prompt_tokens", json_integer(q->prompt_tokens));
        json_object_set_new(o, "completion_tokens", json_integer(q->completion_tokens));
        json_object_set_new(o, "cached_tokens", json_integer(q->cached));
        json_object_set_new(o, "ms", json_real((double)(long long)(ms * 10 + 0.5) / 10));
        char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        json_decref(o);
        if (line) srv_buf_adds(&b, line);
        free(line);
    } else {
        srv_buf_printf(&b, "weft: %s ", q->rid);
        log_escaped(&b, q->method);
        srv_buf_adds(&b, " ");
        log_escaped(&b, q->path);
        srv_buf_printf(&b, " %d prompt=%d completion=%d cached=%d %.1fms", q->status, q->prompt_tokens,
                       q->completion_tokens, q->cached, ms);
    }
    if (b.len && srv_buf_add(&b, "\n", 1)) {
        if (!srv->cfg.log && srv->cfg.console) { /* erases the live status line and redraws it under */
            weft_console_write(srv->cfg.console, b.p, b.len);
        } else {
            FILE *f = srv->cfg.log ? srv->cfg.log : stderr;
            fwrite(b.p, 1, b.len, f);
            fflush(f);
        }
    }
    srv_buf_free(&b);
}

static enum MHD_Result respond(conn_req *q, struct MHD_Connection *c, int status, const char *ctype,
                               char *body, int retry_after) {
    if (!body) {
        status = 500;
        ctype = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                      "\"code\":null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Request-Id", q->rid);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405)
        MHD_add_response_header(
            r, "Allow",
            q->route == R_HEALTH || q->route == R_MODELS || q->route == R_METRICS ? "GET, HEAD" : "POST");
    if (atomic_load(&q->srv->stopping) || status == 413) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    q->answered = true;
    srv_metrics_status(&q->srv->metrics, status);
    return ret;
}

static enum MHD_Result respond_error(conn_req *q, struct MHD_Connection *c, const srv_error *e) {
    return respond(q, c, e->status, "application/json", srv_error_json(e), e->retry_after);
}

static enum MHD_Result respond_fail(conn_req *q, struct MHD_Connection *c, int status, const char *code,
                                    int retry_after, const char *msg) {
    srv_error e;
    srv_fail(&e, status, NULL, code, "%s", msg);
    e.retry_after = retry_after;
    return respond_error(q, c, &e);
}

static bool authorized(weft_server *srv, struct MHD_Connection *c, route_id route) {
    if (!srv->n_keys || route == R_HEALTH || (route == R_METRICS && srv->cfg.metrics_open)) return true;
    const char *key = NULL;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        key = h + 7;
        while (*key == ' ') key++;
    }
    if (!key) key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (!key) return false;
    /* Compare SHA-256 digests in constant time: neither the length nor the content of a key leaks. */
    unsigned char d[32];
    unsigned int dl = 32;
    if (!EVP_Digest(key, strlen(key), d, &dl, EVP_sha256(), NULL)) return false;
    int ok = 0;
    for (int i = 0; i < srv->n_keys; i++) ok |= CRYPTO_memcmp(d, srv->key_digests[i], 32) == 0;
    return ok;
}

static void request_id(weft_server *srv, struct MHD_Connection *c, char out[136]) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    bool ok = h && *h && strlen(h) <= 128;
    for (const char *p = h; ok && *p; p++) ok = *p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
    if (ok) {
        snprintf(out, 136, "%s", h);
        return;
    }
    unsigned long long n = atomic_fetch_add(&srv->next_id, 1);
    snprintf(out, 136, "%012llx%08llx", (unsigned long long)(srv->id_base & 0xffffffffffffULL), n);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- streaming ---- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    srv_gen *g = &s->g;
    for (;;) {
        if (g->out_off < g->out.len) {
            size_t n = g->out.len - g->out_off;
            if (n > max) n = max;
            memcpy(buf, g->out.p + g->out_off, n);
            g->out_off += n;
            if (g->out_off == g->out.len) g->out_off = g->out.len = 0;
            s->last_out = weft_now();
            return (ssize_t)n;
        }
        if (g->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (srv_gen_watch(g)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!srv_stream_emit(g)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (g->out.len || g->phase == 2) continue;
        /* A long gap (a huge prefill beside this stream): an SSE comment keeps the connection and any proxy
         * from timing it out. Clients ignore comment lines. */
        if (weft_now() - s->last_out >= s->keepalive && !srv_buf_adds(&g->out, ": keep-alive\n\n"))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (g->out.len) continue;
        srv_gen_pump(g, SRV_WAKE_S);
    }
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    srv_gen_usage(&s->g, &s->log.prompt_tokens, &s->log.completion_tokens, &s->log.cached);
    if (!s->g.client_gone && s->g.phase != 2) { /* MHD gave up on the socket (a write failed) */
        s->g.client_gone = true;
        srv_metrics_disconnect(&s->g.srv->metrics);
    }
    if (s->g.client_gone) s->log.status = 499; /* logged as nginx does: the client closed the request */
    weft_server *srv = s->g.srv;
    srv_gen_end(&s->g);
    atomic_fetch_sub(&srv->generating, 1);
    access_log(srv, &s->log);
    srv_request_free(&s->r);
    free(s);
}

/* ---- completions / chat ---- */

static enum MHD_Result generate(conn_req *q, struct MHD_Connection *c, srv_kind kind) {
    weft_server *srv = q->srv;
    stream_ctx *s = calloc(1, sizeof *s);
    if (!s) return respond_fail(q, c, 500, NULL, 0, "out of memory");
    srv_error e;
    if (!srv_parse_request(&srv->svc, &srv->cfg, kind, q->body.p ? q->body.p : "", q->body.len, &s->r, &e)) {
        free(s);
        return respond_error(q, c, &e);
    }
    srv_gen *g = &s->g;
    atomic_fetch_add(&srv->generating, 1); /* until srv_gen_end (here, or stream_free for a stream) */
    bool ok = srv_gen_start(g, srv, &s->r, q->rid, conn_fd(c), &e);
    /* Wait: non-streamed replies until the end; streamed ones until the engine admitted the job, so a queued
     * request cancelled by shutdown still gets a real 503 and every check happens before the stream opens. */
    while (ok && !srv_gen_all_done(g) && (!s->r.stream || !srv_gen_any_started(g))) {
        srv_gen_pump(g, SRV_WAKE_S);
        if (srv_gen_watch(g)) break;
    }
    const char *err = ok ? srv_gen_first_error(g) : NULL;
    enum MHD_Result ret;
    if (!ok)
        ret = respond_error(q, c, &e);
    else if (g->client_gone)
        q->status = 499, ret = MHD_NO; /* nobody to answer; MHD closes the socket */
    else if (srv_gen_refused(g))       /* queued and never ran: shutdown, or the engine had no room */
        ret = g->cancelled_shutdown || atomic_load(&srv->stopping)
                  ? respond_fail(q, c, 503, "shutting_down", 5, "the server is shutting down")
                  : respond_fail(q, c, 503, "server_busy", 1,
                                 g->ch[0].msg[0] ? g->ch[0].msg : "the server is busy");
    else if (err && (!s->r.stream || !srv_gen_any_started(g)))
        ret = respond_fail(q, c, 500, "engine_error", 0, err);
    else if (!s->r.stream) {
        srv_gen_usage(g, &q->prompt_tokens, &q->completion_tokens, &q->cached);
        ret = respond(q, c, 200, "application/json", srv_reply_json(g), 0);
    } else {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
        if (!r) {
            ret = respond_fail(q, c, 500, NULL, 0, "out of memory");
        } else {
            MHD_add_response_header(r, "Content-Type", "text/event-stream");
            MHD_add_response_header(r, "Cache-Control", "no-cache");
            MHD_add_response_header(r, "X-Accel-Buffering", "no");
            MHD_add_response_header(r, "X-Request-Id", q->rid);
            q->streaming = q->answered = true;
            q->status = 200;
            s->log = *q;
            s->last_out = weft_now();
            int idle = srv->cfg.idle_timeout_s;
            s->keepalive = idle > 0 && idle < 30 ? idle / 2.0 : 15.0;
            s->log.body = (srv_buf){0};
            srv_metrics_status(&srv->metrics, 200);
            ret = MHD_queue_response(c, 200, r);
            MHD_destroy_response(r); /* s now belongs to the response (stream_free) */
            return ret;
        }
    }
    srv_gen_end(g);
    atomic_fetch_sub(&srv->generating, 1);
    srv_request_free(&s->r);
    free(s);
    return ret;
}

static enum MHD_Result dispatch(conn_req *q, struct MHD_Connection *c) {
    weft_server *srv = q->srv;
    bool ready = atomic_load(&srv->ready), stopping = atomic_load(&srv->stopping);
    const char *body = q->body.p ? q->body.p : "";
    srv_error e;
    char *out;
    if (q->route == R_HEALTH) {
        if (stopping)
            return respond(q, c, 503, "application/json", strdup("{\"status\":\"shutting_down\"}"), 5);
        if (!ready) return respond(q, c, 503, "application/json", strdup("{\"status\":\"loading\"}"), 5);
        return respond(q, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), 0);
    }
    if (q->route == R_METRICS) {
        srv_buf b = {0};
        if (!srv_metrics_render(&srv->metrics, ready ? &srv->svc : NULL, &b)) srv_buf_free(&b);
        return respond(q, c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, 0);
    }
    if (stopping) return respond_fail(q, c, 503, "shutting_down", 5, "the server is shutting down");
    if (!ready) return respond_fail(q, c, 503, "model_loading", 5, "the model is still loading");
    switch (q->route) {
    case R_MODELS:
        return respond(q, c, 200, "application/json", srv_models_json(&srv->svc), 0);
    case R_COMPLETIONS:
        return generate(q, c, SRV_COMPLETIONS);
    case R_CHAT:
        return generate(q, c, SRV_CHAT);
    case R_TOKENIZE:
        out = srv_tokenize_reply(&srv->svc, body, q->body.len, &e);
        return out ? respond(q, c, 200, "application/json", out, 0) : respond_error(q, c, &e);
    case R_DETOKENIZE:
        out = srv_detokenize_reply(&srv->svc, body, q->body.len, &e);
        return out ? respond(q, c, 200, "application/json", out, 0) : respond_error(q, c, &e);
    default:
        return respond_fail(q, c, 404, "not_found", 0, "unknown route");
    }
}

static route_id find_route(const char *url, bool *post) {
    if (!strncmp(url, "/v1/", 4)) url += 3;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
        if (!strcmp(url, k_routes[i].path)) {
            *post = k_routes[i].post;
            return k_routes[i].id;
        }
    return R_NONE;
}

/* First call for a request: headers only. Answers at once what needs no body (404, 405, 401, 413). */
static enum MHD_Result on_headers(conn_req *q, struct MHD_Connection *c, const char *url,
                                  const char *method) {
    weft_server *srv = q->srv;
    bool post = false;
    q->route = find_route(url, &post);
    if (q->route == R_NONE) {
        char msg[200];
        snprintf(msg, sizeof msg, "unknown route %s %.120s", method, url);
        return respond_fail(q, c, 404, "not_found", 0, msg);
    }
    bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (post ? !is_post : !is_get) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s is not allowed on %.120s (use %s)", method, url, post ? "POST" : "GET");
        return respond_fail(q, c, 405, "method_not_allowed", 0, msg);
    }
    if (!authorized(srv, c, q->route)) {
        srv_error e;
        srv_fail(&e, 401, NULL, "invalid_api_key",
                 "a valid API key is required (Authorization: Bearer KEY or "
                 "x-api-key: KEY)");
        return respond_error(q, c, &e);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > srv->cfg.max_body_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is %.20s bytes; the limit is %zu", cl,
                 srv->cfg.max_body_bytes);
        return respond_fail(q, c, 413, "request_too_large", 0, msg);
    }
    return MHD_YES;
}

enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size,
                                    void **con_cls) {
    weft_server *srv = cls;
    conn_req *q = *con_cls;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        *con_cls = q;
        q->srv = srv;
        atomic_fetch_add(&srv->active, 1); /* until on_completed: shutdown waits for the reply to be sent */
        q->t0 = weft_now();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        request_id(srv, c, q->rid);
        return on_headers(q, c, url, method);
    }
    if (q->answered) { /* answered from the headers; drop the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_large && q->body.len + *upload_size > srv->cfg.max_body_bytes) {
            q->too_large = true;
            srv_buf_free(&q->body);
        }
        if (!q->too_large && !srv_buf_add(&q->body, upload, *upload_size))
            return respond_fail(q, c, 500, NULL, 0, "out of memory");
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_large) {
        char msg[120];
        snprintf(msg, sizeof msg, "the request body is over the limit of %zu bytes", srv->cfg.max_body_bytes);
        return respond_fail(q, c, 413, "request_too_large", 0, msg);
    }
    return dispatch(q, c);
}

void srv_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode toe) {
    conn_req *q = *con_cls;
    if (!q) return;
    if (!q->streaming && q->status) access_log(q->srv, q);
    weft_server *srv = q->srv;
    srv_buf_free(&q->body);
    free(q);
    *con_cls = NULL;
    pthread_mutex_lock(&srv->mu);
    atomic_fetch_sub(&srv->active, 1);
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}
