/* test_live.c — the live status line of `weft serve`: the console's line discipline (weft/console.h), the
 * status formatter weft_live_format, and the status thread over a stub service (weft/server.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "weft/console.h"
#include "weft/server.h"

/* Everything written to f so far, NUL-terminated, in buf. */
static size_t slurp(FILE *f, char *buf, size_t cap) {
    fflush(f);
    long end = ftell(f);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fseek(f, end, SEEK_SET);
    return n;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_console_live(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    weft_console c;
    weft_console_init(&c, f, true);
    CHECK(weft_console_is_live(&c));
    weft_console_write(&c, "before\n", 7); /* nothing shown yet: written as is */
    weft_console_status(&c, "abc");
    weft_console_write(&c, "line", 4); /* the newline is added */
    weft_console_status(&c, "de\nignored");
    weft_console_printf(&c, "n=%d", 7);
    weft_console_finish(&c);
    weft_console_status(&c, "late"); /* finished: not drawn */
    weft_console_write(&c, "after\n", 6);
    weft_console_finish(&c); /* idempotent */
    char got[512];
    slurp(f, got, sizeof got);
    CHECK_STR(got, "before\n"
                   "\rabc\033[K"
                   "\r\033[Kline\nabc\033[K"
                   "\rde\033[K"
                   "\r\033[Kn=7\nde\033[K"
                   "\n"
                   "after\n");
    CHECK(!weft_console_is_live(&c));
    CHECK_EQ_INT(weft_console_columns(&c), 0); /* a file has no width */
    weft_console_destroy(&c);
    fclose(f);
}

static void test_console_not_live(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    weft_console c;
    weft_console_init(&c, f, false);
    weft_console_status(&c, "status");
    weft_console_write(&c, "a\nb\n", 4);
    weft_console_write(&c, "", 0);
    weft_console_destroy(&c);
    char got[128];
    slurp(f, got, sizeof got);
    CHECK_STR(got, "a\nb\n\n"); /* exactly the lines, no control bytes */
    fclose(f);
}

/* Many writers and a status redrawer at once: every line stays whole on its own row. */
typedef struct race_ctx {
    weft_console *c;
    int id;
} race_ctx;

static void *race_writer(void *arg) {
    race_ctx *r = arg;
    char line[64];
    for (int i = 0; i < 200; i++) {
        int n = snprintf(line, sizeof line, "writer %d line %03d end\n", r->id, i);
        weft_console_write(r->c, line, (size_t)n);
    }
    return NULL;
}

static void *race_status(void *arg) {
    race_ctx *r = arg;
    char s[64];
    for (int i = 0; i < 400; i++) {
        snprintf(s, sizeof s, "status %d", i);
        weft_console_status(r->c, s);
    }
    return NULL;
}

static void test_console_race(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    weft_console c;
    weft_console_init(&c, f, true);
    pthread_t t[4];
    race_ctx rc[4];
    for (int i = 0; i < 4; i++) {
        rc[i] = (race_ctx){&c, i};
        pthread_create(&t[i], NULL, i == 3 ? race_status : race_writer, &rc[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    weft_console_finish(&c);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    if (buf) {
        slurp(f, buf, cap);
        /* Each row is: status redraws, then (after the last "\r\033[K") the log line, or only a status. */
        int lines = 0, bad = 0;
        for (char *row = buf, *nl; (nl = strchr(row, '\n')); row = nl + 1) {
            *nl = 0;
            char *last = row, *p;
            while ((p = strstr(last, "\r\033[K"))) last = p + 4;
            int w, i;
            char tail[8];
            if (sscanf(last, "writer %d line %d %3s", &w, &i, tail) == 3 && !strcmp(tail, "end")) {
                lines++;
                /* what precedes the clear is status text only */
                bad += last != row && strncmp(row, "status", 6) && strncmp(row, "\rstatus", 7);
            } else {
                bad += strstr(last, "writer") != NULL;
            }
        }
        CHECK_EQ_INT(lines, 600);
        CHECK_EQ_INT(bad, 0);
        free(buf);
    }
    weft_console_destroy(&c);
    fclose(f);
}

static weft_live_sample sample(double t, int64_t req) {
    weft_live_sample s = {.t = t, .requests = req};
    s.es = (weft_srv_engine_stats){.requests_running = 2,
                                   .requests_waiting = 1,
                                   .kv_cache_usage = 0.125,
                                   .device_memory_bytes = -1,
                                   .prefix_cache_queries = 3400,
                                   .prefix_cache_hits = 1200,
                                   .prompt_cache_bytes = 10,
                                   .prompt_cache_budget = 100,
                                   .parallel = 4,
                                   .prompt_tokens_total = 1000,
                                   .generation_tokens_total = 500,
                                   .drafted_total = 120,
                                   .accepted_total = 96};
    return s;
}

static void test_format(void) {
    char buf[512];
    weft_live_sample a = sample(10.0, 3), b = sample(10.5, 3);
    b.es.generation_tokens_total = 500 + 406; /* 812 tok/s over 0.5 s */
    b.es.prompt_tokens_total = 1000 + 2050;   /* 4100 tok/s */
    b.es.prefix_cache_queries = 34000;        /* 34.0k */
    size_t n = weft_live_format(buf, sizeof buf, &a, &b, 0);
    CHECK_STR(buf,
              "req 3 queued 1 | streams 2/4 | decode 812.0 tok/s | prefill 4.1k tok/s | KV 12.5% | cache "
              "hit 1200/34.0k tok | drafts 96/120 80%");
    CHECK_EQ_INT(n, strlen(buf));

    /* No previous sample (the first tick) or no time between: rates are "-". */
    weft_live_format(buf, sizeof buf, NULL, &a, 0);
    CHECK(strstr(buf, "decode - tok/s | prefill - tok/s") != NULL);
    weft_live_format(buf, sizeof buf, &a, &a, 0);
    CHECK(strstr(buf, "decode - tok/s") != NULL);

    /* A total that went down (never expected) reads as 0, not negative. */
    weft_live_sample c = b;
    c.t = 11.0;
    c.es.generation_tokens_total = 10;
    weft_live_format(buf, sizeof buf, &b, &c, 0);
    CHECK(strstr(buf, "decode 0.0 tok/s") != NULL);

    /* Unknown values leave their field out; the cache field goes with the cache off; no drafts: no rate. */
    weft_live_sample u = a;
    u.requests = -1;
    u.es.kv_cache_usage = -1;
    u.es.parallel = -1;
    u.es.prompt_cache_budget = 0;
    u.es.drafted_total = u.es.accepted_total = 0;
    weft_live_format(buf, sizeof buf, NULL, &u, 0);
    CHECK_STR(buf, "queued 1 | decode - tok/s | prefill - tok/s | drafts 0/0");
    weft_live_sample none = {.t = 1, .requests = -1};
    none.es = (weft_srv_engine_stats){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    CHECK_EQ_INT(weft_live_format(buf, sizeof buf, NULL, &none, 0), 0);
    CHECK_STR(buf, "");

    /* Big numbers. */
    weft_live_sample big = b;
    big.es.generation_tokens_total = 500 + 2500000; /* 5.0M tok/s */
    big.es.prefix_cache_hits = 12345678;
    weft_live_format(buf, sizeof buf, &a, &big, 0);
    CHECK(strstr(buf, "decode 5.0M tok/s") != NULL);
    CHECK(strstr(buf, "cache hit 12.3M/34.0k tok") != NULL);

    /* A narrow terminal: whole fields are dropped from the end, the line stays under the width. */
    weft_live_format(buf, sizeof buf, &a, &b, 60);
    CHECK_STR(buf, "req 3 queued 1 | streams 2/4 | decode 812.0 tok/s");
    CHECK(strlen(buf) <= 59);
    weft_live_format(buf, sizeof buf, &a, &b, 50); /* 49 characters: fits exactly */
    CHECK_STR(buf, "req 3 queued 1 | streams 2/4 | decode 812.0 tok/s");
    weft_live_format(buf, sizeof buf, &a, &b, 49);
    CHECK_STR(buf, "req 3 queued 1 | streams 2/4");
    weft_live_format(buf, sizeof buf, &a, &b, 8); /* even the first field is too wide: cut */
    CHECK_STR(buf, "req 3 q");

    /* A small buffer: cut, NUL-terminated, never past cap. */
    char small[12];
    memset(small, 'x', sizeof small);
    size_t k = weft_live_format(small, sizeof small, &a, &b, 0);
    CHECK_EQ_INT(k, 11);
    CHECK_STR(small, "req 3 queue");
    CHECK_EQ_INT(weft_live_format(small, 1, &a, &b, 0), 0);
    CHECK_STR(small, "");
}

/* ---- the thread, over a stub service ---- */

typedef struct stub {
    pthread_mutex_t mu;
    int64_t gen;
    int calls;
} stub;

static void stub_stats(void *ctx, weft_srv_engine_stats *out) {
    stub *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->gen += 100;
    s->calls++;
    out->requests_running = 1;
    out->requests_waiting = 0;
    out->kv_cache_usage = 0.5;
    out->parallel = 2;
    out->generation_tokens_total = s->gen;
    out->prompt_tokens_total = 7;
    pthread_mutex_unlock(&s->mu);
}
static weft_status stub_submit(void *ctx, const weft_srv_job *job, void **h, weft_err *err) {
    return weft_err_set(err, WEFT_EINTERNAL, "unused");
}
static void stub_cancel(void *ctx, void *h) {}
static void stub_release(void *ctx, void *h) {}

static void test_thread(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    weft_console con;
    weft_console_init(&con, f, true);
    weft_server_config cfg;
    weft_server_config_default(&cfg);
    cfg.console = &con;
    weft_server *srv = NULL;
    weft_err err = {0};
    CHECK(weft_server_create(&cfg, &srv, &err) == WEFT_OK);
    if (!srv) return;
    stub st = {.gen = 0};
    pthread_mutex_init(&st.mu, NULL);
    weft_model_service svc = {.ctx = &st,
                              .model_id = "stub",
                              .context_length = 16,
                              .vocab_size = 8,
                              .submit = stub_submit,
                              .cancel = stub_cancel,
                              .release = stub_release,
                              .stats = stub_stats};
    CHECK(weft_server_attach(srv, &svc, &err) == WEFT_OK);
    CHECK(weft_server_live_start(srv, 0, &err) == WEFT_EINVAL);
    CHECK(weft_server_live_start(srv, 0.02, &err) == WEFT_OK);
    CHECK(weft_server_live_start(srv, 0.02, &err) == WEFT_OK); /* already running: nothing more */
    sleep_s(0.15);
    weft_console_write(&con, "a log line\n", 11);
    sleep_s(0.05);
    weft_server_live_stop(srv);
    weft_server_live_stop(srv); /* idempotent */
    pthread_mutex_lock(&st.mu);
    int calls = st.calls;
    pthread_mutex_unlock(&st.mu);
    CHECK_MSG(calls >= 4, "%d stats calls in 0.2 s at 0.02 s", calls);
    char got[16384];
    size_t n = slurp(f, got, sizeof got);
    CHECK(n > 0 && got[n - 1] == '\n'); /* finished with its newline */
    CHECK(strstr(got, "\rreq 0 queued 0 | streams 1/2 | decode ") != NULL);
    CHECK(strstr(got, "tok/s | prefill 0.0 tok/s | KV 50.0%\033[K") != NULL);
    CHECK(strstr(got, "\r\033[Ka log line\nreq 0") != NULL);
    CHECK(!weft_console_is_live(&con));
    weft_server_destroy(srv);
    slurp(f, got, sizeof got);
    CHECK_EQ_INT(strlen(got), n); /* nothing drawn after the stop */

    /* A console that is not live: the thread does not start and nothing is drawn. */
    FILE *g = tmpfile();
    weft_console quiet;
    weft_console_init(&quiet, g, false);
    cfg.console = &quiet;
    CHECK(weft_server_create(&cfg, &srv, &err) == WEFT_OK);
    CHECK(weft_server_attach(srv, &svc, &err) == WEFT_OK);
    CHECK(weft_server_live_start(srv, 0.01, &err) == WEFT_OK);
    sleep_s(0.05);
    weft_server_destroy(srv);
    CHECK_EQ_INT(slurp(g, got, sizeof got), 0);
    weft_console_destroy(&quiet);
    fclose(g);
    weft_console_destroy(&con);
    fclose(f);
    pthread_mutex_destroy(&st.mu);
}

int main(void) {
    test_console_live();
    test_console_not_live();
    test_console_race();
    test_format();
    test_thread();
    return check_report("test_live");
}
