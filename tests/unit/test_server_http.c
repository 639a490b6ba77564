/* test_server_http.c — the server end to end over loopback with the fake service: routes, completions and
 * chat (streamed and not), usage rules, stop strings, UTF-8, logprobs, n > 1, reasoning, tokenize, metrics.
 */
#include "test_server_http.h"

static const char *k_emoji = "Hello \xF0\x9F\xA6\x99 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xC3\xA9!";

static void test_routes(env *e) {
    http_resp r;
    const char *health[] = {"/health", "/v1/health"};
    for (int i = 0; i < 2; i++) {
        CHECK(http_do(e->port, "GET", health[i], NULL, NULL, false, &r));
        CHECK_EQ_INT(r.status, 200);
        CHECK(r.body && strstr(r.body, "\"ok\""));
        char id[160];
        CHECK(http_header(&r, "X-Request-Id", id, sizeof id) && strlen(id) > 8);
        http_resp_free(&r);
    }
    const char *models[] = {"/v1/models", "/models"};
    for (int i = 0; i < 2; i++) {
        CHECK(http_do(e->port, "GET", models[i], NULL, NULL, false, &r));
        CHECK_EQ_INT(r.status, 200);
        json_t *j = body_json(&r);
        CHECK_STR(jstr(j, "data.0.id"), "fake-model");
        CHECK_STR(jstr(j, "data.1.id"), "fake-alias");
        CHECK_EQ_INT(jint(j, "data.0.context_length"), 256);
        CHECK_EQ_INT(jint(j, "data.0.max_model_len"), 256);
        json_decref(j);
        http_resp_free(&r);
    }
    /* the client's X-Request-Id comes back */
    CHECK(http_do(e->port, "GET", "/health", "X-Request-Id: my-id-42\r\n", NULL, false, &r));
    char id[160];
    CHECK(http_header(&r, "X-Request-Id", id, sizeof id) && !strcmp(id, "my-id-42"));
    http_resp_free(&r);
    CHECK(http_do(e->port, "GET", "/v1/nothing", NULL, NULL, false, &r));
    check_error(&r, 404, "invalid_request_error", "not_found");
    http_resp_free(&r);
    CHECK(http_do(e->port, "GET", "/v1/completions", NULL, NULL, false, &r));
    check_error(&r, 405, "invalid_request_error", NULL);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":", &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"x\",\"model\":\"nope\"}", &r));
    check_error(&r, 404, "invalid_request_error", "model_not_found");
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1000}", &r));
    check_error(&r, 400, "invalid_request_error", "context_length_exceeded");
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"x\",\"top_p\":2}", &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    CHECK(strstr(r.body, "\"param\":\"top_p\"") != NULL);
    http_resp_free(&r);
    /* a chunked upload is read like any other */
    CHECK(http_do(e->port, "POST", "/tokenize", NULL, "{\"content\":\"hi\"}", true, &r));
    CHECK_EQ_INT(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_EQ_INT(jint(j, "count"), 3);
    CHECK_EQ_INT(jint(j, "tokens.0"), 0);
    CHECK_EQ_INT(jint(j, "tokens.1"), 2 + 'h');
    json_decref(j);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/tokenize", "{\"prompt\":\"hi\",\"add_special_tokens\":false}", &r));
    j = body_json(&r);
    CHECK_EQ_INT(jint(j, "count"), 2);
    json_decref(j);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/detokenize", "{\"tokens\":[0,106,107,1,232,153,167]}", &r));
    j = body_json(&r);
    CHECK_STR(jstr(j, "content"), "hi\xE6\x97\xA5"); /* BOS/EOS give no text; 3 byte tokens make one char */
    json_decref(j);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/detokenize", "{\"tokens\":[5000]}", &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    http_resp_free(&r);
}

/* Non-streamed and streamed completions of the same request agree; usage only where asked. */
static void test_completions(env *e) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"SAY:%s\",\"max_tokens\":50,\"temperature\":0}", k_emoji);
    http_resp r;
    CHECK(http_post(e->port, "/v1/completions", body, &r));
    CHECK_EQ_INT(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_STR(jstr(j, "object"), "text_completion");
    CHECK_STR(jstr(j, "choices.0.text"), k_emoji);
    CHECK_STR(jstr(j, "choices.0.finish_reason"), "stop");
    long long nb = (long long)strlen(k_emoji);
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), nb + 1); /* every byte token + the EOS */
    CHECK_EQ_INT(jint(j, "usage.prompt_tokens"), 1 + 4 + nb);
    CHECK_EQ_INT(jint(j, "usage.total_tokens"), 1 + 4 + nb + nb + 1);
    CHECK_EQ_INT(jint(j, "usage.prompt_tokens_details.cached_tokens"), 0);
    /* weft.token_sha over the counted tokens; the seed derived from the prompt (SPEC §5.3) */
    int32_t ids[128], pids[128];
    int n = fake_encode(k_emoji, ids, 127);
    ids[n++] = 1;
    char sha[13];
    weft_token_sha(ids, (size_t)n, sha);
    CHECK_STR(jstr(j, "weft.token_sha"), sha);
    pids[0] = 0;
    char ptext[256];
    snprintf(ptext, sizeof ptext, "SAY:%s", k_emoji);
    int pn = 1 + fake_encode(ptext, pids + 1, 127);
    CHECK(jint(j, "weft.seed") == (long long)weft_seed_from_prompt(pids, (size_t)pn, "0"));
    CHECK(jget(j, "weft.token_ids") == NULL); /* only with return_token_ids */
    CHECK(jget(j, "weft.rounds") != NULL && jget(j, "weft.ttft_seconds") != NULL);
    json_decref(j);
    http_resp_free(&r);
    /* the same prompt again: the fake's prompt cache resumes all of it */
    snprintf(body, sizeof body, "{\"prompt\":\"SAY:%s\",\"max_tokens\":50,\"return_token_ids\":true}",
             k_emoji);
    CHECK(http_post(e->port, "/v1/completions", body, &r));
    j = body_json(&r);
    CHECK_EQ_INT(jint(j, "usage.prompt_tokens_details.cached_tokens"), pn);
    CHECK_EQ_INT((long long)json_array_size(jget(j, "weft.token_ids")), n);
    json_decref(j);
    http_resp_free(&r);

    /* streamed: include_usage absent / {} / false → no usage anywhere; true → exactly one usage chunk, last
     */
    const char *opts[] = {"", ",\"stream_options\":{}", ",\"stream_options\":{\"include_usage\":false}",
                          ",\"stream_options\":{\"include_usage\":true}"};
    for (int i = 0; i < 4; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"SAY:%s\",\"max_tokens\":50,\"stream\":true%s}", k_emoji,
                 opts[i]);
        CHECK(http_post(e->port, "/v1/completions", body, &r));
        CHECK_EQ_INT(r.status, 200);
        char ct[64];
        CHECK(http_header(&r, "Content-Type", ct, sizeof ct) && !strcmp(ct, "text/event-stream"));
        stream_out o;
        stream_parse(r.body, false, &o);
        CHECK_STR(o.text[0], k_emoji);
        CHECK(strstr(r.body, "\\ufffd") == NULL && strstr(o.text[0], "\xEF\xBF\xBD") == NULL);
        CHECK(o.done_last);
        CHECK_EQ_INT(o.finishes[0], 1);
        CHECK_STR(o.finish[0], "stop");
        CHECK(o.weft[0] != NULL && !strcmp(jstr(o.weft[0], "token_sha"), sha));
        CHECK_EQ_INT(o.n_usage, i == 3 ? 1 : 0);
        if (i == 3) {
            CHECK(o.usage_last);
            CHECK_EQ_INT(o.completion_tokens, nb + 1);
            CHECK_EQ_INT(o.total_tokens, o.prompt_tokens + o.completion_tokens);
        }
        stream_free(&o);
        http_resp_free(&r);
    }
    /* echo with max_tokens 0: the prompt back, nothing generated (vLLM #6521) */
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":0,\"echo\":true}", &r));
    j = body_json(&r);
    CHECK_STR(jstr(j, "choices.0.text"), "Hi");
    CHECK_STR(jstr(j, "choices.0.finish_reason"), "length");
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), 0);
    json_decref(j);
    http_resp_free(&r);
    /* an empty prompt is BOS only (vLLM #7283); the server stays healthy */
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":[\"\"],\"max_tokens\":5}", &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
    CHECK(http_do(e->port, "GET", "/health", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, 200);
    http_resp_free(&r);
}

/* Stop strings: the streamed text never shows a prefix of the stop string and equals the non-streamed text;
 * completion_tokens counts the token that completed the stop (vLLM #3574, llama.cpp PR #9867). */
static void test_stop(env *e) {
    const char *want = "Here is the English alphabet: ABC";
    for (int draft = 0; draft < 2; draft++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"prompt\":\"SAY:%sDEFGHIJKLMNOP\",\"stop\":[\"DEFGHIJ\"],\"draft\":%s,"
                 "\"max_tokens\":60,\"stream\":%%s}",
                 want, draft ? "true" : "false");
        char b1[600], b2[600];
        snprintf(b1, sizeof b1, body, "false");
        snprintf(b2, sizeof b2, body, "true");
        http_resp r;
        CHECK(http_post(e->port, "/v1/completions", b1, &r));
        json_t *j = body_json(&r);
        CHECK_STR(jstr(j, "choices.0.text"), want);
        CHECK_STR(jstr(j, "choices.0.finish_reason"), "stop");
        CHECK_EQ_INT(jint(j, "usage.completion_tokens"), (long long)strlen(want) + 7); /* through the "J" */
        json_decref(j);
        http_resp_free(&r);
        CHECK(http_post(e->port, "/v1/completions", b2, &r));
        stream_out o;
        stream_parse(r.body, false, &o);
        CHECK_STR(o.text[0], want);
        CHECK_STR(o.finish[0], "stop");
        /* no delta ever carried "D": each event's text is a piece of want */
        char **ev;
        int n = sse_events(r.body, &ev);
        for (int i = 0; i < n; i++)
            CHECK(strstr(ev[i], "\"text\":\"D") == NULL && strstr(ev[i], "DE") == NULL);
        sse_free(ev, n);
        stream_free(&o);
        http_resp_free(&r);
    }
    /* a newline stop keeps the tail */
    http_resp r;
    CHECK(http_post(e->port, "/v1/completions",
                    "{\"prompt\":\"SAY:It is red.\\\\nBob\",\"stop\":[\"\\\\\"],\"stream\":true}", &r));
    stream_out o;
    stream_parse(r.body, false, &o);
    CHECK_STR(o.text[0], "It is red.");
    stream_free(&o);
    http_resp_free(&r);
}

static void test_chat(env *e) {
    char body[512];
    snprintf(
        body, sizeof body,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"SAY:%s\"}],\"logprobs\":true,\"top_logprobs\":2,"
        "\"stream\":%%s,\"stream_options\":{\"include_usage\":true}}",
        k_emoji);
    char b1[600], b2[600];
    snprintf(b1, sizeof b1, body, "false");
    snprintf(b2, sizeof b2, body, "true");
    http_resp r;
    CHECK(http_post(e->port, "/v1/chat/completions", b1, &r));
    CHECK_EQ_INT(r.status, 200);
    json_t *j = body_json(&r);
    CHECK_STR(jstr(j, "object"), "chat.completion");
    CHECK_STR(jstr(j, "choices.0.message.role"), "assistant");
    CHECK_STR(jstr(j, "choices.0.message.content"), k_emoji);
    long long ct = jint(j, "usage.completion_tokens");
    json_t *lp = jget(j, "choices.0.logprobs.content");
    CHECK_EQ_INT((long long)json_array_size(lp), ct);
    json_t *e0 = json_array_get(lp, 0);
    CHECK_STR(jstr(e0, "token"), "H");
    CHECK(json_is_real(json_object_get(e0, "logprob")));
    CHECK_EQ_INT(jint(e0, "bytes.0"), 'H');
    CHECK_EQ_INT((long long)json_array_size(json_object_get(e0, "top_logprobs")), 2);
    /* the bytes of the entries concatenate to the content */
    char cat[256] = {0};
    size_t cl = 0;
    for (size_t i = 0; i < json_array_size(lp); i++) {
        json_t *b = json_object_get(json_array_get(lp, i), "bytes");
        for (size_t k = 0; k < json_array_size(b) && cl < 255; k++)
            cat[cl++] = (char)json_integer_value(json_array_get(b, k));
    }
    CHECK_STR(cat, k_emoji);
    json_decref(j);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/chat/completions", b2, &r));
    stream_out o;
    stream_parse(r.body, true, &o);
    CHECK(o.role_first);
    CHECK_STR(o.text[0], k_emoji);
    CHECK_EQ_INT(o.n_usage, 1);
    CHECK(o.usage_last);
    CHECK_EQ_INT(o.completion_tokens, ct);
    CHECK_EQ_INT(o.n_lp, ct); /* one logprob entry per counted token (vLLM #8625) */
    CHECK(o.done_last);
    stream_free(&o);
    http_resp_free(&r);
    /* a template error is a 400 with its message, and the next request works */
    CHECK(http_post(e->port, "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\","
                    "\"content\":\"b\"}]}",
                    &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    CHECK(strstr(r.body, "alternate") != NULL);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                    "\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                    &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    CHECK(strstr(r.body, "messages[0].content[0]") != NULL);
    http_resp_free(&r);
}

/* n > 1 and list prompts: every choice indexed, counted and seeded (llama.cpp PR #27318, vLLM PR #16863). */
static void test_choices(env *e) {
    const char *body = "{\"prompt\":\"x\",\"n\":3,\"max_tokens\":8,\"ignore_eos\":true,\"temperature\":1,"
                       "\"seed\":7%s}";
    char b[256];
    snprintf(b, sizeof b, body, "");
    http_resp r;
    CHECK(http_post(e->port, "/v1/completions", b, &r));
    json_t *j = body_json(&r);
    CHECK_EQ_INT((long long)json_array_size(jget(j, "choices")), 3);
    for (int i = 0; i < 3; i++) {
        char p[64];
        snprintf(p, sizeof p, "choices.%d.index", i);
        CHECK_EQ_INT(jint(j, p), i);
        snprintf(p, sizeof p, "weft.choices.%d.seed", i);
        CHECK_EQ_INT(jint(j, p), 7 + i);
    }
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), 24);
    CHECK(strcmp(jstr(j, "choices.0.text"), jstr(j, "choices.1.text")) != 0); /* seeds differ */
    char t0[64];
    snprintf(t0, sizeof t0, "%s", jstr(j, "choices.1.text"));
    json_decref(j);
    http_resp_free(&r);
    snprintf(b, sizeof b, body, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    CHECK(http_post(e->port, "/v1/completions", b, &r));
    stream_out o;
    stream_parse(r.body, false, &o);
    CHECK(!o.bad_index);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(o.finishes[i], 1);
    CHECK_STR(o.text[1], t0);
    CHECK_EQ_INT(o.completion_tokens, 24);
    stream_free(&o);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions",
                    "{\"prompt\":[\"SAY:first\",\"SAY:second\"],\"max_tokens\":20}", &r));
    j = body_json(&r);
    CHECK_STR(jstr(j, "choices.0.text"), "first");
    CHECK_STR(jstr(j, "choices.1.text"), "second");
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), 6 + 7);
    json_decref(j);
    http_resp_free(&r);
}

static void test_reasoning(void) {
    fake_config fc;
    fake_config_default(&fc);
    fc.thinks = true;
    env e;
    env_start(&e, &fc, NULL);
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"SAY:Let me see.</think>  It is 4.\"}],"
        "\"stream\":%s}";
    char b[256];
    http_resp r;
    snprintf(b, sizeof b, body, "false");
    CHECK(http_post(e.port, "/v1/chat/completions", b, &r));
    json_t *j = body_json(&r);
    CHECK_STR(jstr(j, "choices.0.message.reasoning_content"), "Let me see.");
    CHECK_STR(jstr(j, "choices.0.message.content"), "It is 4.");
    json_decref(j);
    http_resp_free(&r);
    snprintf(b, sizeof b, body, "true");
    CHECK(http_post(e.port, "/v1/chat/completions", b, &r));
    stream_out o;
    stream_parse(r.body, true, &o);
    CHECK_STR(o.reasoning[0], "Let me see.");
    CHECK_STR(o.text[0], "It is 4.");
    CHECK(strstr(r.body, "think>") == NULL);
    stream_free(&o);
    http_resp_free(&r);
    env_stop(&e);
}

static void test_no_tokenizer(void) {
    fake_config fc;
    fake_config_default(&fc);
    fc.has_tokenizer = fc.has_template = false;
    env e;
    env_start(&e, &fc, NULL);
    int32_t ids[16];
    int n = fake_encode("SAY:ok", ids, 16);
    char b[256] = "{\"prompt\":[";
    for (int i = 0; i < n; i++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%d", i ? "," : "", ids[i]);
    strcat(b, "],\"max_tokens\":10}");
    http_resp r;
    CHECK(http_post(e.port, "/v1/completions", b, &r));
    json_t *j = body_json(&r);
    CHECK_STR(jstr(j, "choices.0.text"), "");
    CHECK_EQ_INT((long long)json_array_size(jget(j, "weft.token_ids")), 3);
    CHECK_EQ_INT(jint(j, "weft.token_ids.0"), 2 + 'o');
    json_decref(j);
    http_resp_free(&r);
    CHECK(http_post(e.port, "/v1/completions", "{\"prompt\":\"text\"}", &r));
    check_error(&r, 400, "invalid_request_error", NULL);
    http_resp_free(&r);
    env_stop(&e);
}

/* An engine failure: 500 before any reply, or one error event then [DONE] in a stream; others unaffected. */
static void test_engine_error(env *e) {
    http_resp r;
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"FAIL\",\"max_tokens\":10}", &r));
    check_error(&r, 500, "server_error", "engine_error");
    CHECK(strstr(r.body, "fake backend failure") != NULL);
    http_resp_free(&r);
    CHECK(http_post(
        e->port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"FAIL\"}],\"stream\":true,\"max_tokens\":10}", &r));
    CHECK_EQ_INT(r.status, 200);
    stream_out o;
    stream_parse(r.body, true, &o);
    CHECK_EQ_INT(o.n_errors, 1);
    CHECK(o.done_last);
    CHECK_EQ_INT(o.n_usage, 0);
    stream_free(&o);
    http_resp_free(&r);
    CHECK(http_post(e->port, "/v1/completions", "{\"prompt\":\"SAY:fine\"}", &r));
    CHECK(r.status == 200 && strstr(r.body, "\"fine\""));
    http_resp_free(&r);
}

static void test_metrics(env *e) {
    http_resp r;
    CHECK(http_do(e->port, "GET", "/metrics", NULL, NULL, false, &r));
    CHECK_EQ_INT(r.status, 200);
    const char *must[] = {"weft:prompt_tokens_total ",
                          "vllm:prompt_tokens_total{model_name=\"fake-model\"} ",
                          "vllm:generation_tokens_total{",
                          "vllm:num_requests_running{",
                          "vllm:num_requests_waiting{",
                          "vllm:kv_cache_usage_perc{",
                          "vllm:time_to_first_token_seconds_bucket{",
                          "vllm:e2e_request_latency_seconds_count{",
                          "weft:client_disconnections_total ",
                          "weft:prompt_tokens_cached_total ",
                          "vllm:spec_decode_num_draft_tokens_total{",
                          "weft:requests_total{code=\"400\"} ",
                          "le=\"+Inf\"}"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        CHECK_MSG(strstr(r.body, must[i]), "%s", must[i]);
    /* the fake cannot count device memory or prompt-cache lookups: those are left out, not zero */
    CHECK(strstr(r.body, "device_memory_bytes") == NULL && strstr(r.body, "prefix_cache") == NULL);
    CHECK(strstr(r.body, "weft:generation_tokens_total 0\n") == NULL);
    http_resp_free(&r);
}

int main(void) {
    env e;
    env_start(&e, NULL, NULL);
    test_routes(&e);
    test_completions(&e);
    test_stop(&e);
    test_chat(&e);
    test_choices(&e);
    test_engine_error(&e);
    test_metrics(&e);
    env_stop(&e);
    test_reasoning();
    test_no_tokenizer();
    return check_report("test_server_http");
}
