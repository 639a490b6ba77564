/* test_server_http2.c — the server's edges over loopback: loading, API keys, body limit, a full queue, client
 * disconnects (streamed and not), concurrent requests, the access log and graceful shutdown. */
#include <pthread.h>
#include <unistd.h>
#include "test_server_http.h"

static bool wait_counts(fake_engine *f, int running, int live, double timeout_s) {
    double end = weft_now() + timeout_s;
    fake_counts c;
    do {
        fake_get_counts(f, &c);
        if (c.running == running && (live < 0 || c.live == live)) return true;
        usleep(2000);
    } while (weft_now() < end);
    return false;
}

static void test_loading(void) {
    weft_server_config c;
    weft_server_config_default(&c);
    c.port = 0;
    c.log_format = WEFT_LOG_NONE;
    weft_server *s;
    weft_err err = {0};
    CHECK(weft_server_create(&c, &s, &err) == WEFT_OK);
    CHECK(weft_server_start(s, &err) == WEFT_OK);
    int port = weft_server_port(s);
    http_resp r;
    CHECK(http_do(port, "GET", "/health", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, 503);
    CHECK(strstr(r.body, "loading") != NULL);
    http_resp_free(&r);
    CHECK(http_post(port, "/v1/completions", "{\"prompt\":\"x\"}", &r));
    check_error(&r, 503, "server_error", "model_loading");
    char ra[16];
    CHECK(http_header(&r, "Retry-After", ra, sizeof ra) != NULL);
    http_resp_free(&r);
    fake_config fc;
    fake_config_default(&fc);
    fake_engine *f = fake_new(&fc);
    weft_model_service svc = fake_service(f);
    svc.submit = NULL;
    CHECK(weft_server_attach(s, &svc, &err) == WEFT_EINVAL); /* incomplete service refused */
    svc = fake_service(f);
    CHECK(weft_server_attach(s, &svc, &err) == WEFT_OK);
    CHECK(http_do(port, "GET", "/health", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    weft_server_destroy(s);
    fake_free(f);
}

static void test_auth(bool metrics_open) {
    const char *keys[] = {"sekrit", "other-key"};
    weft_server_config c;
    weft_server_config_default(&c);
    c.api_keys = keys;
    c.n_api_keys = 2;
    c.metrics_open = metrics_open;
    c.log_format = WEFT_LOG_NONE;
    env e;
    env_start(&e, NULL, &c);
    http_resp r;
    CHECK(http_do(e.port, "GET", "/v1/models", NULL, NULL, false, &r));
    check_error(&r, 401, "authentication_error", "invalid_api_key");
    http_resp_free(&r);
    CHECK(http_do(e.port, "GET", "/v1/models", "Authorization: Bearer sekri\r\n", NULL, false, &r));
    CHECK_EQ_INT(r.status, 401);
    http_resp_free(&r);
    CHECK(http_do(e.port, "POST", "/v1/completions", "Authorization: Bearer nope\r\n", "{\"prompt\":\"x\"}",
                  false, &r));
    CHECK_EQ_INT(r.status, 401);
    http_resp_free(&r);
    CHECK(http_do(e.port, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n", NULL, false, &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    CHECK(http_do(e.port, "POST", "/v1/completions", "x-api-key: other-key\r\n", "{\"prompt\":\"SAY:k\"}",
                  false, &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    CHECK(http_do(e.port, "GET", "/health", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    CHECK(http_do(e.port, "GET", "/metrics", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, metrics_open ? 200 : 401);
    http_resp_free(&r);
    env_stop(&e);
}

static void test_body_limit(void) {
    weft_server_config c;
    weft_server_config_default(&c);
    c.max_body_bytes = 1024;
    c.log_format = WEFT_LOG_NONE;
    env e;
    env_start(&e, NULL, &c);
    char big[3000];
    snprintf(big, sizeof big, "{\"prompt\":\"%2000d\"}", 1);
    http_resp r;
    CHECK(http_post(e.port, "/v1/completions", big, &r));
    check_error(&r, 413, "invalid_request_error", "request_too_large");
    http_resp_free(&r);
    CHECK(http_do(e.port, "POST", "/v1/completions", NULL, big, true, &r)); /* chunked: no length up front */
    check_error(&r, 413, "invalid_request_error", "request_too_large");
    http_resp_free(&r);
    CHECK(http_post(e.port, "/v1/completions", "{\"prompt\":\"SAY:small\"}", &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    env_stop(&e);
}

/* Client disconnect cancels the job within a round and frees it (llama.cpp #13262, vLLM #10806). */
static void test_disconnect(void) {
    env e;
    env_start(&e, NULL, NULL);
    const char *stream = "{\"prompt\":\"SLOW count\",\"max_tokens\":200,\"ignore_eos\":true,\"stream\":true}";
    int fd = http_send(e.port, "POST", "/v1/completions", NULL, stream);
    CHECK(fd >= 0 && http_read_until(fd, "\"text\"", 5));
    close(fd);
    double t0 = weft_now();
    CHECK(wait_counts(e.f, 0, 0, 2));
    CHECK_MSG(weft_now() - t0 < 1.0, "stream cancel took %.3fs", weft_now() - t0);
    fake_counts c;
    fake_get_counts(e.f, &c);
    CHECK_EQ_INT(c.cancelled, 1);
    /* non-streamed: the thread waiting for the engine notices the socket closed */
    fd = http_send(e.port, "POST", "/v1/completions", NULL,
                   "{\"prompt\":\"SLOW count\",\"max_tokens\":200,\"ignore_eos\":true}");
    CHECK(wait_counts(e.f, 1, 1, 2));
    close(fd);
    t0 = weft_now();
    CHECK(wait_counts(e.f, 0, 0, 2));
    CHECK_MSG(weft_now() - t0 < 1.0, "cancel took %.3fs", weft_now() - t0);
    fake_get_counts(e.f, &c);
    CHECK_EQ_INT(c.cancelled, 2);
    http_resp r;
    CHECK(http_do(e.port, "GET", "/metrics", NULL, NULL, false, &r));
    CHECK(strstr(r.body, "weft:client_disconnections_total 2\n") != NULL);
    CHECK(strstr(r.body, "vllm:num_requests_running{model_name=\"fake-model\"} 0\n") != NULL);
    http_resp_free(&r);
    /* the server still answers */
    CHECK(http_post(e.port, "/v1/completions", "{\"prompt\":\"SAY:alive\"}", &r));
    CHECK(r.status == 200 && strstr(r.body, "\"alive\""));
    http_resp_free(&r);
    env_stop(&e);
}

static void test_busy(void) {
    fake_config fc;
    fake_config_default(&fc);
    fc.parallel = 1;
    fc.max_queue = 0;
    env e;
    env_start(&e, &fc, NULL);
    int fd = http_send(e.port, "POST", "/v1/completions", NULL,
                       "{\"prompt\":\"SLOW\",\"max_tokens\":100,\"ignore_eos\":true,\"stream\":true}");
    CHECK(http_read_until(fd, "\"text\"", 5));
    http_resp r;
    CHECK(http_post(e.port, "/v1/completions", "{\"prompt\":\"x\"}", &r));
    check_error(&r, 503, "server_error", "server_busy");
    char ra[16];
    CHECK(http_header(&r, "Retry-After", ra, sizeof ra) != NULL);
    http_resp_free(&r);
    close(fd);
    CHECK(wait_counts(e.f, 0, 0, 2));
    env_stop(&e);
}

typedef struct job_arg {
    int port;
    char body[256];
    http_resp r;
} job_arg;

static void *post_thread(void *p) {
    job_arg *a = p;
    http_post(a->port, "/v1/completions", a->body, &a->r);
    return NULL;
}

/* Concurrent requests each get their own reply (llama.cpp #6681): n clients, half of them streaming, over
 * an engine running `parallel` at once. */
static void test_concurrent(int n, int parallel) {
    fake_config fc;
    fake_config_default(&fc);
    fc.parallel = parallel;
    fc.max_queue = n;
    env e;
    env_start(&e, &fc, NULL);
    job_arg *a = calloc((size_t)n, sizeof *a);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) {
        a[i].port = e.port;
        snprintf(a[i].body, sizeof a[i].body, "{\"prompt\":\"SAY:apple_%d apple_%d apple_%d\",\"stream\":%s}",
                 i, i, i, i % 2 ? "true" : "false");
        pthread_create(&t[i], NULL, post_thread, &a[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        char want[64];
        snprintf(want, sizeof want, "apple_%d apple_%d apple_%d", i, i, i);
        CHECK_EQ_INT(a[i].r.status, 200);
        if (i % 2) {
            stream_out o;
            stream_parse(a[i].r.body, false, &o);
            CHECK_STR(o.text[0], want);
            CHECK(o.done_last);
            stream_free(&o);
        } else {
            json_t *j = body_json(&a[i].r);
            CHECK_STR(jstr(j, "choices.0.text"), want);
            json_decref(j);
        }
        http_resp_free(&a[i].r);
    }
    fake_counts c;
    fake_get_counts(e.f, &c);
    CHECK(c.max_running > 1 && c.max_running <= parallel && c.live == 0);
    free(a);
    free(t);
    env_stop(&e);
}

static void test_access_log(void) {
    FILE *log = tmpfile();
    weft_server_config c;
    weft_server_config_default(&c);
    c.log_format = WEFT_LOG_JSON;
    c.log = log;
    env e;
    env_start(&e, NULL, &c);
    http_resp r;
    CHECK(http_do(e.port, "POST", "/v1/completions", "X-Request-Id: log-me\r\n", "{\"prompt\":\"SAY:abc\"}",
                  false, &r));
    http_resp_free(&r);
    CHECK(http_do(e.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"SAY:abc\",\"stream\":true}", false,
                  &r));
    http_resp_free(&r);
    env_stop(&e);
    rewind(log);
    char line[512];
    int n = 0, ok = 0;
    while (fgets(line, sizeof line, log)) {
        n++;
        json_t *j = json_loads(line, 0, NULL);
        CHECK_MSG(j != NULL, "not JSON: %s", line);
        if (j && jint(j, "status") == 200 && jint(j, "completion_tokens") == 4 &&
            !strcmp(jstr(j, "route"), "/v1/completions"))
            ok++;
        if (n == 1) CHECK_STR(jstr(j, "id"), "log-me");
        json_decref(j);
    }
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ok, 2);
    fclose(log);
}

/* SPEC §3 shutdown: a running stream ends with finish_reason cancelled, an error event and [DONE]; a running
 * non-streamed request returns 200 with the text so far; a queued one gets 503; then nothing listens. */
static void test_shutdown(bool engine_stop) {
    fake_config fc;
    fake_config_default(&fc); /* parallel 2 */
    fc.with_stop = engine_stop;
    env e;
    env_start(&e, &fc, NULL);
    int fd = http_send(e.port, "POST", "/v1/completions", NULL,
                       "{\"prompt\":\"SLOW\",\"max_tokens\":200,\"ignore_eos\":true,\"stream\":true}");
    CHECK(http_read_until(fd, "\"text\"", 5));
    job_arg run = {.port = e.port}, queued = {.port = e.port};
    snprintf(run.body, sizeof run.body, "{\"prompt\":\"SLOW a\",\"max_tokens\":200,\"ignore_eos\":true}");
    snprintf(queued.body, sizeof queued.body,
             "{\"prompt\":\"SLOW b\",\"max_tokens\":200,\"ignore_eos\":true}");
    pthread_t t1, t2;
    pthread_create(&t1, NULL, post_thread, &run);
    CHECK(wait_counts(e.f, 2, -1, 5));
    usleep(100000); /* let the running one produce some text */
    pthread_create(&t2, NULL, post_thread, &queued);
    fake_counts c;
    double end = weft_now() + 5;
    do fake_get_counts(e.f, &c);
    while (c.waiting < 1 && weft_now() < end && !usleep(2000));
    CHECK_EQ_INT(c.waiting, 1);
    weft_server_shutdown(e.s, 0);
    char *rest = http_read_all(fd, 5);
    close(fd);
    CHECK(strstr(rest, "\"finish_reason\":\"cancelled\"") != NULL);
    CHECK(strstr(rest, "\"code\":\"shutting_down\"") != NULL);
    CHECK(strstr(rest, "data: [DONE]") != NULL);
    CHECK(strstr(rest, "shutting_down") < strstr(rest, "[DONE]"));
    free(rest);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK_EQ_INT(run.r.status, 200);
    json_t *j = body_json(&run.r);
    CHECK_STR(jstr(j, "choices.0.finish_reason"), "cancelled");
    CHECK(strlen(jstr(j, "choices.0.text")) > 0);
    json_decref(j);
    if (engine_stop)
        check_error(&queued.r, 503, "server_error", "shutting_down");
    else /* without the engine's stop the queued job may start before its cancel lands: then 200, cancelled */
        CHECK(queued.r.status == 503 || (queued.r.status == 200 && strstr(queued.r.body, "\"cancelled\"")));
    http_resp_free(&run.r);
    http_resp_free(&queued.r);
    http_resp r;
    CHECK(!http_do(e.port, "GET", "/health", NULL, NULL, false, &r)); /* nothing listens */
    fake_get_counts(e.f, &c);
    CHECK_EQ_INT(c.live, 0);
    env_stop(&e);
}

int main(void) {
    test_loading();
    test_auth(false);
    test_auth(true);
    test_body_limit();
    test_disconnect();
    test_busy();
    test_concurrent(8, 2);
    test_concurrent(64, 16);
    test_access_log();
    test_shutdown(true);
    test_shutdown(false);
    return check_report("test_server_http2");
}
