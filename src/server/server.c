/* src/server/server.c — server lifecycle: create, bind, attach the model, graceful shutdown (SPEC §3). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include "internal.h"
#include "weft/console.h"

enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);

void weft_server_config_default(weft_server_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 8080;
    cfg->max_body_bytes = (size_t)32 << 20;
    cfg->max_connections = 1024;
    cfg->idle_timeout_s = 120;
    cfg->max_tokens = 4096;
    cfg->defaults.temperature = 1.0;
    cfg->defaults.top_p = 1.0;
    cfg->defaults.repetition_penalty = 1.0;
    cfg->defaults.logprobs = -1;
    cfg->seed_salt = "0";
    cfg->thinking = -1;
    cfg->drafts = true;
    cfg->log_format = WEFT_LOG_TEXT;
}

weft_status weft_server_create(const weft_server_config *cfg, weft_server **out, weft_err *err) {
    *out = NULL;
    if (!cfg || cfg->port < 0 || cfg->port > 65535)
        return weft_err_set(err, WEFT_EINVAL, "server: port %d is not in 0..65535", cfg ? cfg->port : -1);
    for (int i = 0; i < cfg->n_api_keys; i++)
        if (!cfg->api_keys[i] || !cfg->api_keys[i][0])
            return weft_err_set(err, WEFT_EINVAL, "server: API key %d is empty", i + 1);
    weft_server *s = calloc(1, sizeof *s);
    if (!s) return weft_err_set(err, WEFT_ENOMEM, "server: out of memory");
    s->cfg = *cfg;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (!s->cfg.max_body_bytes) s->cfg.max_body_bytes = (size_t)32 << 20;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 1024;
    if (!s->cfg.seed_salt) s->cfg.seed_salt = "0";
    s->listen_fd = -1;
    if (cfg->n_api_keys) {
        s->key_digests = calloc((size_t)cfg->n_api_keys, sizeof *s->key_digests);
        if (!s->key_digests) {
            free(s);
            return weft_err_set(err, WEFT_ENOMEM, "server: out of memory");
        }
        for (int i = 0; i < cfg->n_api_keys; i++) {
            unsigned int dl = 32;
            EVP_Digest(cfg->api_keys[i], strlen(cfg->api_keys[i]), s->key_digests[i], &dl, EVP_sha256(),
                       NULL);
        }
        s->n_keys = cfg->n_api_keys;
    }
    /* Request ids: a per-process random base plus a counter (no global state). */
    uint64_t base = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &base, sizeof base) != (ssize_t)sizeof base)
        base = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid();
    if (fd >= 0) close(fd);
    s->id_base = base;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    srv_metrics_init(&s->metrics);
    *out = s;
    return WEFT_OK;
}

void srv_log(weft_server *srv, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (srv->cfg.console) {
        weft_console_vprintf(srv->cfg.console, fmt, ap);
    } else {
        /* Callers pass one line without its newline; the lock keeps the two together across threads. */
        flockfile(stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        funlockfile(stderr);
    }
    va_end(ap);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    /* A stream ended because its client left (we return END_WITH_ERROR): already in the access log as 499. */
    if (strstr(line, "application error generating response") ||
        strstr(line, "Application reported internal error"))
        return;
    srv_log(cls, "weft: http: %s", line);
}

static weft_status listen_on(weft_server *s, weft_err *err) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(s->cfg.host, port, &hints, &res);
    if (rc)
        return weft_err_set(err, WEFT_EIO, "server: cannot resolve --host %s: %s", s->cfg.host,
                            gai_strerror(rc));
    int last = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            getsockname(fd, (struct sockaddr *)&ss, &sl);
            s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                               : ntohs(((struct sockaddr_in *)&ss)->sin_port);
            s->listen_fd = fd;
            freeaddrinfo(res);
            return WEFT_OK;
        }
        last = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return weft_err_set(err, WEFT_EIO, "server: cannot listen on %s:%d: %s", s->cfg.host, s->cfg.port,
                        strerror(last));
}

weft_status weft_server_start(weft_server *s, weft_err *err) {
    if (s->daemon) return weft_err_set(err, WEFT_EINVAL, "server: already started");
    weft_status st = listen_on(s, err);
    if (st) return st;
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, srv_http_on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_LISTEN_SOCKET, s->listen_fd, MHD_OPTION_NOTIFY_COMPLETED, srv_http_on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(s->cfg.idle_timeout_s > 0 ? s->cfg.idle_timeout_s : 0), MHD_OPTION_END);
    if (!s->daemon) {
        close(s->listen_fd);
        s->listen_fd = -1;
        return weft_err_set(err, WEFT_EIO, "server: libmicrohttpd failed to start on %s:%d", s->cfg.host,
                            s->port);
    }
    return WEFT_OK;
}

int weft_server_port(const weft_server *s) {
    return s && s->daemon ? s->port : 0;
}

void weft_server_set_defaults(weft_server *s, const weft_sampling *defaults) {
    if (!atomic_load(&s->ready)) s->cfg.defaults = *defaults;
}

weft_status weft_server_attach(weft_server *s, const weft_model_service *svc, weft_err *err) {
    if (atomic_load(&s->ready)) return weft_err_set(err, WEFT_EINVAL, "server: a model is already attached");
    const char *missing = NULL;
    if (!svc->model_id || !svc->model_id[0])
        missing = "model_id";
    else if (svc->context_length <= 0)
        missing = "context_length";
    else if (svc->vocab_size <= 0)
        missing = "vocab_size";
    else if (!svc->submit || !svc->cancel || !svc->release)
        missing = "submit/cancel/release";
    else if (svc->has_tokenizer &&
             (!svc->tokenize || !svc->detok_new || !svc->detok_feed || !svc->detok_free))
        missing = "tokenize/detok_new/detok_feed/detok_free";
    else if (svc->has_chat_template && !svc->render_chat)
        missing = "render_chat";
    if (missing) return weft_err_set(err, WEFT_EINVAL, "server: the model service lacks %s", missing);
    s->svc = *svc;
    atomic_store(&s->ready, true); /* publishes s->svc to the request threads */
    return WEFT_OK;
}

/* Waits until no request is active or until deadline (weft_now() seconds; <0 = no deadline). */
static bool wait_idle(weft_server *s, double deadline) {
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->active) > 0) {
        double now = weft_now();
        if (deadline >= 0 && now >= deadline) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    bool idle = atomic_load(&s->active) == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void weft_server_shutdown(weft_server *s, double grace_s) {
    if (!s || s->shut) return;
    s->shut = true;
    atomic_store(&s->stopping, true);
    if (!s->daemon) return;
    int lfd = MHD_quiesce_daemon(s->daemon); /* stop accepting; the listen socket is ours to close */
    if (lfd >= 0) close(lfd);
    s->listen_fd = -1;
    if (grace_s > 0) wait_idle(s, weft_now() + grace_s);
    atomic_store(&s->cancelling,
                 true); /* request threads mark (or cancel) their jobs at their next wake-up */
    if (atomic_load(&s->ready) && s->svc.stop) s->svc.stop(s->svc.ctx);
    /* Cancelled jobs end within a round; what is left after that is a client not reading its reply. */
    if (!wait_idle(s, weft_now() + 30))
        srv_log(s, "weft: shutdown: closing %d connections that did not finish", atomic_load(&s->active));
    MHD_stop_daemon(s->daemon); /* closes idle keep-alive connections and joins their threads */
    s->daemon = NULL;
}

void weft_server_destroy(weft_server *s) {
    if (!s) return;
    weft_server_live_stop(s);
    weft_server_shutdown(s, 0);
    if (s->listen_fd >= 0) close(s->listen_fd);
    free(s->key_digests);
    srv_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
