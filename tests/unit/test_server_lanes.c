/* test_server_lanes.c — the server over the real components through service_lanes.c: the lane engine on its
 * history-sensitive fake backend, a real byte-level BPE tokenizer (tests/data/tokenizer/synthetic.json,
 * "splits") and a real chat template. Checks that reply tokens equal the backend's serial oracle, that
 * streamed and non-streamed text agree (random byte tokens make plenty of broken UTF-8), that stop strings
 * end the reply at the right token through the lane core's stop hook, that a disconnect frees the stream,
 * and that shutdown cancels the running stream and refuses the queued request. */
#include <unistd.h>
#include "test_server_http.h"
#include "weft/lanes.h"
#include "weft/tokenizer.h"

static const char *k_template = "{% for m in messages %}<s>{{ m.role }}: {{ m.content }}\n{% endfor %}"
                                "{% if add_generation_prompt %}assistant:{% endif %}";

typedef struct rig {
    weft_tokenizer *tok;
    weft_backend be;
    weft_engine *e;
    weft_service *svc;
    weft_server *s;
    int port;
    int32_t eos;
} rig;

static weft_tokenizer *load_tokenizer(void) {
    json_t *all = json_load_file(TEST_DATA "tokenizer/synthetic.json", 0, NULL);
    json_t *list = json_object_get(all, "tokenizers");
    weft_tokenizer *tok = NULL;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *t = json_array_get(list, i);
        if (strcmp(json_string_value(json_object_get(t, "name")), "splits")) continue;
        char *s = json_dumps(json_object_get(t, "tokenizer"), JSON_COMPACT);
        weft_err err = {0};
        if (weft_tokenizer_from_hf_json(s, strlen(s), NULL, 0, "splits", &tok, &err))
            fprintf(stderr, "tokenizer: %s\n", err.msg);
        free(s);
    }
    json_decref(all);
    return tok;
}

static bool rig_start(rig *g, int parallel, int max_queue, double delay) {
    memset(g, 0, sizeof *g);
    g->tok = load_tokenizer();
    if (!g->tok) return false;
    g->eos = weft_tokenizer_eos(g->tok);
    weft_err err = {0};
    weft_fake_config fc = {.max_slots = 4,
                           .max_rows = 64,
                           .vocab_size = (int)weft_tokenizer_n_vocab(g->tok),
                           .salt = 3,
                           .forward_delay_s = delay};
    CHECK(weft_fake_backend_new(&fc, &g->be, &err) == WEFT_OK);
    weft_engine_config ec = {.parallel = parallel,
                             .max_queue = max_queue,
                             .max_rows = 64,
                             .capacity = 512,
                             .eos_ids = &g->eos,
                             .n_eos = 1};
    CHECK_MSG(weft_engine_new(&ec, &g->be, &g->e, &err) == WEFT_OK, "%s", err.msg);
    CHECK(weft_engine_start(g->e, &err) == WEFT_OK);
    weft_service_config sc = {.model_id = "synthetic",
                              .context_length = 512,
                              .vocab_size = fc.vocab_size,
                              .tokenizer = g->tok,
                              .chat_template = k_template,
                              .engine = g->e};
    weft_model_service svc;
    CHECK_MSG(weft_service_new(&sc, &g->svc, &svc, &err) == WEFT_OK, "%s", err.msg);
    weft_server_config c;
    weft_server_config_default(&c);
    c.port = 0;
    c.log_format = WEFT_LOG_NONE;
    CHECK(weft_server_create(&c, &g->s, &err) == WEFT_OK);
    CHECK(weft_server_start(g->s, &err) == WEFT_OK);
    CHECK(weft_server_attach(g->s, &svc, &err) == WEFT_OK);
    g->port = weft_server_port(g->s);
    return true;
}

static void rig_stop(rig *g) {
    weft_server_destroy(g->s);
    weft_service_free(g->svc);
    weft_engine_free(g->e);
    g->be.ops->destroy(g->be.self);
    weft_tokenizer_free(g->tok);
}

/* Replays a reply with the backend's oracle: the tokens the engine must have drawn. */
static int oracle(rig *g, const int32_t *prompt, int n_prompt, const weft_sampling *s, int max_tokens,
                  bool ignore_eos, int32_t *out) {
    int32_t seq[1024];
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n = 0;
    while (n < max_tokens) {
        int32_t t = weft_fake_next(&g->be, seq, n_prompt, n_prompt + n - 1, s, NULL);
        seq[n_prompt + n] = out[n] = t;
        n++;
        if (t == g->eos && !ignore_eos) break;
    }
    return n;
}

static void test_exact_and_stream(rig *g) {
    http_resp r;
    CHECK(http_post(g->port, "/tokenize", "{\"content\":\"Hello world\"}", &r));
    json_t *j = body_json(&r);
    int32_t prompt[64];
    int np = (int)json_array_size(json_object_get(j, "tokens"));
    for (int i = 0; i < np; i++)
        prompt[i] = (int32_t)json_integer_value(json_array_get(json_object_get(j, "tokens"), (size_t)i));
    json_decref(j);
    http_resp_free(&r);
    const char *body = "{\"prompt\":\"Hello world\",\"max_tokens\":60,\"temperature\":0.8,\"seed\":5,"
                       "\"ignore_eos\":true,\"return_token_ids\":true%s}";
    char b[512];
    snprintf(b, sizeof b, body, "");
    CHECK(http_post(g->port, "/v1/completions", b, &r));
    CHECK_EQ_INT(r.status, 200);
    j = body_json(&r);
    weft_sampling s = {.temperature = 0.8, .top_p = 1, .repetition_penalty = 1, .seed = 5, .logprobs = -1};
    int32_t want[128];
    int nw = oracle(g, prompt, np, &s, 60, true, want);
    json_t *ids = jget(j, "weft.token_ids");
    CHECK_EQ_INT((long long)json_array_size(ids), nw);
    bool same = (int)json_array_size(ids) == nw;
    for (int i = 0; same && i < nw; i++) same = json_integer_value(json_array_get(ids, (size_t)i)) == want[i];
    CHECK(same);
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), nw);
    char text[4096];
    snprintf(text, sizeof text, "%s", jstr(j, "choices.0.text"));
    json_decref(j);
    http_resp_free(&r);
    snprintf(b, sizeof b, body, ",\"stream\":true");
    CHECK(http_post(g->port, "/v1/completions", b, &r));
    stream_out o;
    stream_parse(r.body, false, &o);
    CHECK_STR(o.text[0], text);
    stream_free(&o);
    http_resp_free(&r);
    /* a stop string: the first printable ASCII letter after a few characters */
    const char *stop = NULL;
    for (const char *p = text + 8; *p && !stop; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) stop = p;
    CHECK(stop != NULL);
    if (!stop) return;
    char st[2] = {*stop, 0};
    size_t cut = (size_t)(strchr(text, *stop) - text);
    char expect[4096];
    snprintf(expect, sizeof expect, "%.*s", (int)cut, text);
    for (int stream = 0; stream < 2; stream++) {
        snprintf(b, sizeof b,
                 "{\"prompt\":\"Hello "
                 "world\",\"max_tokens\":60,\"temperature\":0.8,\"seed\":5,\"ignore_eos\":true,"
                 "\"stop\":\"%s\",\"stream\":%s,\"stream_options\":{\"include_usage\":true}}",
                 st, stream ? "true" : "false");
        CHECK(http_post(g->port, "/v1/completions", b, &r));
        if (stream) {
            stream_parse(r.body, false, &o);
            CHECK_STR(o.text[0], expect);
            CHECK_STR(o.finish[0], "stop");
            CHECK(o.completion_tokens > 0 && o.completion_tokens < nw);
            stream_free(&o);
        } else {
            j = body_json(&r);
            CHECK_STR(jstr(j, "choices.0.text"), expect);
            CHECK_STR(jstr(j, "choices.0.finish_reason"), "stop");
            json_decref(j);
        }
        http_resp_free(&r);
    }
}

static void test_chat(rig *g) {
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
        "\"hi \xE6\x97\xA5\"}],\"max_tokens\":30,\"seed\":1,\"n\":2,\"logprobs\":true,"
        "\"stream\":%s,\"stream_options\":{\"include_usage\":true}}";
    char b[512];
    http_resp r;
    snprintf(b, sizeof b, body, "false");
    CHECK(http_post(g->port, "/v1/chat/completions", b, &r));
    CHECK_EQ_INT(r.status, 200);
    json_t *j = body_json(&r);
    char c0[4096], c1[4096];
    snprintf(c0, sizeof c0, "%s", jstr(j, "choices.0.message.content"));
    snprintf(c1, sizeof c1, "%s", jstr(j, "choices.1.message.content"));
    long long ct = jint(j, "usage.completion_tokens");
    CHECK_EQ_INT((long long)json_array_size(jget(j, "choices.0.logprobs.content")) +
                     (long long)json_array_size(jget(j, "choices.1.logprobs.content")),
                 ct);
    json_decref(j);
    http_resp_free(&r);
    snprintf(b, sizeof b, body, "true");
    CHECK(http_post(g->port, "/v1/chat/completions", b, &r));
    stream_out o;
    stream_parse(r.body, true, &o);
    CHECK(o.role_first && o.done_last && !o.bad_index);
    CHECK_STR(o.text[0], c0);
    CHECK_STR(o.text[1], c1);
    CHECK_EQ_INT(o.completion_tokens, ct);
    stream_free(&o);
    http_resp_free(&r);
}

static void test_disconnect_and_shutdown(void) {
    rig g;
    if (!rig_start(&g, 1, 2, 0.01)) return;
    int fd = http_send(g.port, "POST", "/v1/completions", NULL,
                       "{\"prompt\":\"count\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true}");
    CHECK(http_read_until(fd, "\"text\"", 5));
    close(fd);
    double t0 = weft_now();
    weft_engine_stats es;
    do {
        usleep(2000);
        weft_engine_get_stats(g.e, &es);
    } while (es.running && weft_now() - t0 < 2);
    CHECK_MSG(es.running == 0 && weft_now() - t0 < 1.0, "running %d after %.3fs", es.running,
              weft_now() - t0);
    /* shutdown: one running stream, one queued request */
    fd = http_send(g.port, "POST", "/v1/completions", NULL,
                   "{\"prompt\":\"count\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true}");
    CHECK(http_read_until(fd, "\"text\"", 5));
    int fd2 = http_send(g.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"queued\",\"max_tokens\":10}");
    do {
        usleep(2000);
        weft_engine_get_stats(g.e, &es);
    } while (es.waiting < 1 && weft_now() - t0 < 5);
    CHECK_EQ_INT(es.waiting, 1);
    weft_server_shutdown(g.s, 0);
    char *a = http_read_all(fd, 5), *q = http_read_all(fd2, 5);
    CHECK(strstr(a, "\"finish_reason\":\"cancelled\"") && strstr(a, "shutting_down") && strstr(a, "[DONE]"));
    CHECK(strncmp(q, "HTTP/1.1 503", 12) == 0 && strstr(q, "shutting_down"));
    free(a);
    free(q);
    close(fd);
    close(fd2);
    rig_stop(&g);
}

int main(void) {
    FILE *f = fopen(TEST_DATA "tokenizer/synthetic.json", "r");
    if (!f) {
        fprintf(stderr, "test_server_lanes: %stokenizer/synthetic.json is absent; skipped\n", TEST_DATA);
        return 0;
    }
    fclose(f);
    rig g;
    if (rig_start(&g, 2, 4, 0)) {
        test_exact_and_stream(&g);
        test_chat(&g);
        rig_stop(&g);
    }
    test_disconnect_and_shutdown();
    return check_report("test_server_lanes");
}
