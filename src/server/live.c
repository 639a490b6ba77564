/* src/server/live.c — the live one-line throughput status of `weft serve` on a TTY (SPEC §2.1).
 *
 * A thread wakes every interval (0.5 s), reads the service's stats (the same numbers /metrics publishes,
 * plus the engine's running token totals) and the server's requests in flight, formats one line and hands
 * it to the console, which redraws it in place and keeps access-log lines whole (weft/console.h). Rates are
 * differences of the engine's running totals over the last interval. Nothing is allocated per tick: the
 * line is built in a fixed buffer and the samples live on the thread's stack. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "weft/console.h"

/* ---- formatting (pure) ---- */

typedef struct line_buf {
    char *p;
    size_t cap, len;
} line_buf;

static void put(line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line_buf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    b->len += (size_t)n < b->cap - b->len ? (size_t)n : b->cap - b->len - 1;
}

/* A count: exact below 10000, else 12.3k / 4.5M. */
static void put_count(line_buf *b, int64_t v) {
    if (v < 10000)
        put(b, "%lld", (long long)v);
    else if (v < 10000000)
        put(b, "%.1fk", (double)v / 1e3);
    else
        put(b, "%.1fM", (double)v / 1e6);
}

/* A rate in tokens per second: one decimal, k / M from 1000 up. */
static void put_rate(line_buf *b, double v) {
    if (v < 1000)
        put(b, "%.1f", v);
    else if (v < 1e6)
        put(b, "%.1fk", v / 1e3);
    else
        put(b, "%.1fM", v / 1e6);
}

/* Tokens per second of a running total between two samples; false when it cannot be said. */
static bool rate(const weft_live_sample *prev, const weft_live_sample *cur, int64_t a, int64_t b,
                 double *out) {
    if (!prev || a < 0 || b < 0) return false;
    double dt = cur->t - prev->t;
    if (!(dt > 0)) return false;
    *out = b > a ? (double)(b - a) / dt : 0.0;
    return true;
}

/* Field k of the line (0-based) into b; false when it has nothing to show. */
static bool field(line_buf *b, int k, const weft_live_sample *prev, const weft_live_sample *cur) {
    const weft_srv_engine_stats *es = &cur->es;
    double r = 0;
    switch (k) {
    case 0:
        if (cur->requests < 0 && es->requests_waiting < 0) return false;
        if (cur->requests >= 0) {
            put(b, "req ");
            put_count(b, cur->requests);
        }
        if (es->requests_waiting >= 0) {
            put(b, cur->requests >= 0 ? " queued " : "queued ");
            put_count(b, es->requests_waiting);
        }
        return true;
    case 1:
        if (es->requests_running < 0 || es->parallel < 0) return false;
        put(b, "streams %lld/%lld", (long long)es->requests_running, (long long)es->parallel);
        return true;
    case 2:
    case 3: {
        bool decode = k == 2;
        int64_t now = decode ? es->generation_tokens_total : es->prompt_tokens_total;
        if (now < 0) return false;
        int64_t before = !prev    ? -1
                         : decode ? prev->es.generation_tokens_total
                                  : prev->es.prompt_tokens_total;
        put(b, "%s ", decode ? "decode" : "prefill");
        if (rate(prev, cur, before, now, &r))
            put_rate(b, r);
        else
            put(b, "-");
        put(b, " tok/s");
        return true;
    }
    case 4:
        if (es->kv_cache_usage < 0) return false;
        put(b, "KV %.1f%%", es->kv_cache_usage * 100.0);
        return true;
    case 5:
        /* Shown while the prompt cache is on (an unknown budget counts as on when hits are known). */
        if (es->prefix_cache_hits < 0 || es->prefix_cache_queries < 0 || es->prompt_cache_budget == 0)
            return false;
        put(b, "cache hit ");
        put_count(b, es->prefix_cache_hits);
        put(b, "/");
        put_count(b, es->prefix_cache_queries);
        put(b, " tok");
        return true;
    case 6:
        if (es->drafted_total < 0 || es->accepted_total < 0) return false;
        put(b, "drafts ");
        put_count(b, es->accepted_total);
        put(b, "/");
        put_count(b, es->drafted_total);
        if (es->drafted_total > 0)
            put(b, " %.0f%%", 100.0 * (double)es->accepted_total / (double)es->drafted_total);
        return true;
    default:
        return false;
    }
}

#define LIVE_FIELDS 7

size_t weft_live_format(char *buf, size_t cap, const weft_live_sample *prev, const weft_live_sample *cur,
                        int columns) {
    if (!cap) return 0;
    buf[0] = 0;
    /* Fields are laid out one by one; one that would pass the width is taken back and the line ends there. */
    size_t limit = cap - 1;
    if (columns > 0 && (size_t)(columns - 1) < limit) limit = (size_t)(columns - 1);
    char scratch[WEFT_CONSOLE_STATUS_MAX];
    line_buf b = {buf, cap, 0};
    bool first = true;
    for (int k = 0; k < LIVE_FIELDS; k++) {
        line_buf f = {scratch, sizeof scratch, 0};
        scratch[0] = 0;
        if (!field(&f, k, prev, cur)) continue;
        size_t sep = first ? 0 : 3;
        if (b.len + sep + f.len > limit) {
            if (first) { /* even the first field does not fit: cut it */
                size_t n = f.len < limit ? f.len : limit;
                memcpy(buf, scratch, n);
                buf[n] = 0;
                return n;
            }
            break;
        }
        if (!first) put(&b, " | ");
        put(&b, "%s", scratch);
        first = false;
    }
    return b.len;
}

/* ---- the thread ---- */

static void take_sample(weft_server *s, weft_live_sample *out) {
    out->t = weft_now();
    out->requests = atomic_load(&s->generating);
    srv_engine_stats_unknown(&out->es);
    if (atomic_load(&s->ready) && s->svc.stats) s->svc.stats(s->svc.ctx, &out->es);
}

static void deadline_after(double s, struct timespec *ts) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = (long long)(s * 1e9);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec += (long)(ns % 1000000000LL);
    if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

static void *live_main(void *arg) {
    weft_server *s = arg;
    weft_console *con = s->cfg.console;
    weft_live_sample a, b, *prev = &a, *cur = &b;
    char line[WEFT_CONSOLE_STATUS_MAX];
    take_sample(s, prev);
    weft_live_format(line, sizeof line, NULL, prev, weft_console_columns(con));
    weft_console_status(con, line);
    pthread_mutex_lock(&s->mu);
    while (!s->live_quit) {
        struct timespec ts;
        deadline_after(s->live_interval, &ts);
        int rc = 0;
        while (!s->live_quit && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->live_cv, &s->mu, &ts);
        if (s->live_quit) break;
        pthread_mutex_unlock(&s->mu);
        take_sample(s, cur);
        weft_live_format(line, sizeof line, prev, cur, weft_console_columns(con));
        weft_console_status(con, line);
        weft_live_sample *t = prev;
        prev = cur;
        cur = t;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    /* The final line: the state at shutdown (weft_server_live_stop then ends it with its newline). */
    take_sample(s, cur);
    weft_live_format(line, sizeof line, prev, cur, weft_console_columns(con));
    weft_console_status(con, line);
    return NULL;
}

weft_status weft_server_live_start(weft_server *s, double interval_s, weft_err *err) {
    if (!(interval_s > 0 && interval_s < 3600))
        return weft_err_set(err, WEFT_EINVAL, "live status: interval %g s must be in (0, 3600)", interval_s);
    if (!s->cfg.console || !weft_console_is_live(s->cfg.console) || s->live_running) return WEFT_OK;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&s->live_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc) return weft_err_set(err, WEFT_EINTERNAL, "live status: pthread_cond_init failed (%d)", rc);
    s->live_interval = interval_s;
    s->live_quit = false;
    rc = pthread_create(&s->live_thread, NULL, live_main, s);
    if (rc) {
        pthread_cond_destroy(&s->live_cv);
        return weft_err_set(err, WEFT_EINTERNAL, "live status: pthread_create failed (%d)", rc);
    }
    s->live_running = true;
    return WEFT_OK;
}

void weft_server_live_stop(weft_server *s) {
    if (!s || !s->live_running) return;
    pthread_mutex_lock(&s->mu);
    s->live_quit = true;
    pthread_cond_broadcast(&s->live_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->live_thread, NULL);
    pthread_cond_destroy(&s->live_cv);
    s->live_running = false;
    weft_console_finish(s->cfg.console); /* the final status stays, ended by its newline */
}
