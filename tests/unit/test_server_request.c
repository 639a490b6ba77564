/* test_server_request.c — request parsing and validation (SPEC §3): every bad input is a 400 naming the field
 * (404 for an unknown model, context_length_exceeded for an over-long request), before any work. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "test_server_fake.h"
#include "../../src/server/internal.h"

static weft_model_service g_svc;
static weft_server_config g_cfg;

/* Parses body; returns the status (200 = accepted) and leaves the request in *r (caller frees) or e. */
static int parse(srv_kind kind, const char *body, srv_request *r, srv_error *e) {
    memset(e, 0, sizeof *e);
    return srv_parse_request(&g_svc, &g_cfg, kind, body, strlen(body), r, e) ? 200 : e->status;
}

/* Expects a rejection with this status and param ("" = null); code checked when non-NULL. */
static void bad(srv_kind kind, const char *body, int status, const char *param, const char *code) {
    srv_request r;
    srv_error e;
    int st = parse(kind, body, &r, &e);
    CHECK_MSG(st == status, "%s: status %d, want %d (%s)", body, st, status, e.message);
    if (st == 200) {
        srv_request_free(&r);
        return;
    }
    CHECK_MSG(!strcmp(e.param, param), "%s: param \"%s\", want \"%s\"", body, e.param, param);
    if (code)
        CHECK_MSG(e.code && !strcmp(e.code, code), "%s: code %s, want %s", body, e.code ? e.code : "null",
                  code);
    CHECK_MSG(e.message[0] != 0, "%s: empty message", body);
}

static void good(srv_kind kind, const char *body, srv_request *r) {
    srv_error e;
    int st = parse(kind, body, r, &e);
    CHECK_MSG(st == 200, "%s: status %d (%s)", body, st, e.message);
    if (st != 200) memset(r, 0, sizeof *r);
}

static void test_json_and_model(void) {
    bad(SRV_COMPLETIONS, "{", 400, "", NULL);
    bad(SRV_COMPLETIONS, "", 400, "", NULL);
    bad(SRV_COMPLETIONS, "[1,2]", 400, "", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model", "model_not_found");
    bad(SRV_COMPLETIONS, "{\"prompt\":\"x\",\"model\":5}", 400, "model", NULL);
    srv_request r;
    good(SRV_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"fake-alias\",\"unknown\":{\"a\":[1]}}", &r);
    srv_request_free(&r);
    good(SRV_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"fake-model\"}", &r);
    srv_request_free(&r);
}

static void test_prompts(void) {
    bad(SRV_COMPLETIONS, "{}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":5}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[1,\"a\"]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[1.5]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[300]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[-1]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[[1],[2,\"x\"]]}", 400, "prompt", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[[]]}", 400, "prompt", NULL); /* no tokens at all */
    srv_request r;
    good(SRV_COMPLETIONS, "{\"prompt\":[[5,6],[7]],\"n\":2}", &r);
    CHECK_EQ_INT(r.n_prompts, 2);
    CHECK_EQ_INT(r.prompts[0].n, 2);
    CHECK_EQ_INT(r.prompts[1].ids[0], 7);
    CHECK_EQ_INT(r.n, 2);
    srv_request_free(&r);
    good(SRV_COMPLETIONS, "{\"prompt\":[\"ab\",\"c\"]}", &r);
    CHECK_EQ_INT(r.n_prompts, 2);
    CHECK_EQ_INT(r.prompts[0].n, 3); /* BOS a b */
    CHECK_EQ_INT(r.prompts[0].ids[0], 0);
    CHECK_STR(r.prompts[1].text, "c");
    srv_request_free(&r);
    /* empty prompt: just BOS when the model adds one (vLLM #7283) */
    good(SRV_COMPLETIONS, "{\"prompt\":[\"\"],\"max_tokens\":5}", &r);
    CHECK_EQ_INT(r.prompts[0].n, 1);
    srv_request_free(&r);
    /* an empty token-id prompt: the message must not claim the model adds no BOS (this one does) */
    srv_error e;
    CHECK(parse(SRV_COMPLETIONS, "{\"prompt\":[[]]}", &r, &e) == 400 && !strstr(e.message, "no BOS"));
    /* more choices than the engine can ever hold (running + queued) is a 400 naming n, not a 503 */
    g_svc.max_streams = 3;
    bad(SRV_COMPLETIONS, "{\"prompt\":\"a\",\"n\":4}", 400, "n", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"],\"n\":2}", 400, "n", NULL);
    bad(SRV_COMPLETIONS, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\"]}", 400, "prompt", NULL);
    good(SRV_COMPLETIONS, "{\"prompt\":\"a\",\"n\":3}", &r);
    srv_request_free(&r);
    g_svc.max_streams = 0;
    /* list of 9 prompts x n=8 is over the 64 choices allowed */
    bad(SRV_COMPLETIONS, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":8}", 400,
        "prompt", NULL);
}

static void test_numbers(void) {
    const char *cases[][2] = {
        {"{\"prompt\":\"x\",\"n\":0}", "n"},
        {"{\"prompt\":\"x\",\"n\":9}", "n"},
        {"{\"prompt\":\"x\",\"n\":\"2\"}", "n"},
        {"{\"prompt\":\"x\",\"n\":1.5}", "n"},
        {"{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
        {"{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature"},
        {"{\"prompt\":\"x\",\"top_p\":2}", "top_p"},
        {"{\"prompt\":\"x\",\"top_p\":-0.1}", "top_p"},
        {"{\"prompt\":\"x\",\"top_p\":0}", "top_p"}, /* keeps no candidate: (0, 1] as the sampler */
        {"{\"prompt\":\"x\",\"seed\":18446744073709551615}", "seed"}, /* beyond int64: not "malformed" */
        {"{\"prompt\":\"x\",\"seed\":-9223372036854775809}", "seed"},
        {"{\"prompt\":\"x\", \"max_tokens\" : 99999999999999999999999}", "max_tokens"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"5\":1e999}}", "logit_bias"},
        {"{\"prompt\":[1,2,99999999999999999999]}", "prompt"},
        {"{\"stop\":[\"a,\\\"seed\\\":\"],\"prompt\":[[1],[99999999999999999999]]}", "prompt"},
        {"{\"prompt\":\"x\",\"top_k\":-2}", "top_k"},
        {"{\"prompt\":\"x\",\"top_k\":1.5}", "top_k"},
        {"{\"prompt\":\"x\",\"min_p\":1.5}", "min_p"},
        {"{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty"},
        {"{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", "frequency_penalty"},
        {"{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty"},
        {"{\"prompt\":\"x\",\"seed\":1.5}", "seed"},
        {"{\"prompt\":\"x\",\"seed\":\"1\"}", "seed"},
        {"{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens"},
        {"{\"prompt\":\"x\",\"max_tokens\":\"5\"}", "max_tokens"},
        {"{\"prompt\":\"x\",\"max_completion_tokens\":true}", "max_completion_tokens"},
        {"{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
        {"{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs"},
        {"{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", "ignore_eos"},
        {"{\"prompt\":\"x\",\"stream\":1}", "stream"},
        {"{\"prompt\":\"x\",\"echo\":\"x\"}", "echo"},
        {"{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", "echo"},
        {"{\"prompt\":\"x\",\"draft\":0}", "draft"},
        {"{\"prompt\":\"x\",\"return_token_ids\":\"y\"}", "return_token_ids"},
        {"{\"prompt\":\"x\",\"stream_options\":5}", "stream_options"},
        {"{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":\"y\"}}", "stream_options.include_usage"},
        {"{\"prompt\":\"x\",\"stop\":5}", "stop"},
        {"{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop"},
        {"{\"prompt\":\"x\",\"stop\":[1]}", "stop"},
        {"{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\","
         "\"l\",\"m\","
         "\"n\",\"o\",\"p\",\"q\"]}",
         "stop"},
        {"{\"prompt\":\"x\",\"logit_bias\":[]}", "logit_bias"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"300\":1}}", "logit_bias"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"5\":200}}", "logit_bias"},
        {"{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"x\"}}", "logit_bias"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        bad(SRV_COMPLETIONS, cases[i][0], 400, cases[i][1], NULL);

    srv_request r;
    good(SRV_COMPLETIONS,
         "{\"prompt\":\"x\",\"n\":8,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,\"seed\":-1,"
         "\"presence_penalty\":1,\"frequency_penalty\":-1,\"repetition_penalty\":1.1,\"stop\":[\"a\",\"bb\"],"
         "\"logit_bias\":{\"5\":-100,\"7\":2.5},\"logprobs\":3,\"stream\":true,\"stream_options\":{\"include_"
         "usage\":"
         "true},\"ignore_eos\":true,\"draft\":false,\"return_token_ids\":true,\"max_tokens\":10}",
         &r);
    CHECK_EQ_INT(r.n, 8);
    CHECK(r.sampling.temperature == 0.5 && r.sampling.top_p == 0.9 && r.sampling.top_k == 0);
    CHECK(r.sampling.min_p == 0.1 && r.sampling.repetition_penalty == 1.1);
    CHECK(r.seed_given && r.seed == UINT64_MAX);
    CHECK_EQ_INT(r.n_stops, 2);
    CHECK_EQ_INT(r.sampling.n_logit_bias, 2);
    CHECK_EQ_INT(r.sampling.logprobs, 3);
    CHECK(r.stream && r.include_usage && r.ignore_eos && !r.draft && r.return_token_ids);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 10);
    srv_request_free(&r);
    /* defaults: temperature etc. from the config; max_tokens = min(--max-tokens, context - prompt) */
    good(SRV_COMPLETIONS, "{\"prompt\":\"abc\",\"stream_options\":{}}", &r);
    CHECK(r.sampling.temperature == 0.7 && r.sampling.top_k == 40);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 100);
    CHECK(!r.include_usage && !r.seed_given && r.draft && r.logprobs == -1);
    srv_request_free(&r);
    g_cfg.max_tokens = 4096;
    good(SRV_COMPLETIONS, "{\"prompt\":\"abc\"}", &r);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 256 - 4);
    srv_request_free(&r);
    g_cfg.max_tokens = 100;
    good(SRV_COMPLETIONS, "{\"prompt\":\"abc\",\"max_completion_tokens\":7,\"max_tokens\":9}", &r);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 7);
    srv_request_free(&r);
    good(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":0,\"echo\":true}", &r);
    CHECK(r.echo);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 0);
    srv_request_free(&r);
}

static void test_context(void) {
    srv_request r;
    srv_error e;
    /* prompt (BOS + 10) + max_tokens over the 256-token window: a clean 400 naming both numbers */
    int st = parse(SRV_COMPLETIONS, "{\"prompt\":\"0123456789\",\"max_tokens\":256}", &r, &e);
    CHECK_EQ_INT(st, 400);
    CHECK(e.code && !strcmp(e.code, "context_length_exceeded"));
    CHECK_STR(e.param, "max_tokens");
    CHECK(strstr(e.message, "256") && strstr(e.message, "267") && strstr(e.message, "11"));
    good(SRV_COMPLETIONS, "{\"prompt\":\"0123456789\",\"max_tokens\":245}", &r);
    srv_request_free(&r);
    /* a prompt that fills the window leaves no room */
    char big[400];
    memset(big, 'a', 300);
    big[300] = 0;
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", big);
    bad(SRV_COMPLETIONS, body, 400, "prompt", "context_length_exceeded");
}

static void test_chat(void) {
    bad(SRV_CHAT, "{}", 400, "messages", NULL);
    bad(SRV_CHAT, "{\"messages\":[]}", 400, "messages", NULL);
    bad(SRV_CHAT, "{\"messages\":{}}", 400, "messages", NULL);
    bad(SRV_CHAT, "{\"messages\":[5]}", 400, "messages[0]", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", NULL);
    bad(SRV_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_"
        "url\","
        "\"image_url\":{\"url\":\"http://x/y.png\"}}]}]}",
        400, "messages[0].content[1]", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", 400,
        "messages[0].content[0]", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", 400,
        "messages[0].content[0]", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":5}", 400, "logprobs",
        NULL);
    bad(SRV_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", 400,
        "top_logprobs", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", 400,
        "top_logprobs", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":5}", 400,
        "chat_template_kwargs", NULL);
    bad(SRV_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":"
        "\"y\"}}",
        400, "chat_template_kwargs.enable_thinking", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":5}", 400,
        "reasoning_effort", NULL);
    /* the template's own error is a 400 carrying its message (llama.cpp #11402) */
    srv_request r;
    srv_error e;
    int st = parse(
        SRV_CHAT,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":\"a\"},"
        "{\"role\":\"assistant\",\"content\":\"b\"}]}",
        &r, &e);
    CHECK_EQ_INT(st, 400);
    CHECK(strstr(e.message, "alternate") != NULL);
    /* text parts are concatenated; an assistant turn with tool_calls may have no content */
    good(SRV_CHAT,
         "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"user\",\"content\":[{"
         "\"type\":\"text\","
         "\"text\":\"he\"},{\"type\":\"text\",\"text\":\"llo\"}]},{\"role\":\"assistant\",\"content\":null,"
         "\"tool_calls\":[{\"id\":\"1\"}]},{\"role\":\"tool\",\"content\":\"t\"}],\"logprobs\":true,\"top_"
         "logprobs\":2}",
         &r);
    CHECK_EQ_INT(r.sampling.logprobs, 2);
    const char *want = "<|developer|>d\n<|user|>hello\n<|assistant|>\n<|tool|>t\n<|assistant|>";
    int32_t ids[128];
    int n = fake_encode(want, ids, 128);
    CHECK_EQ_INT(r.prompts[0].n, n);
    CHECK(r.prompts[0].n == n && !memcmp(r.prompts[0].ids, ids, sizeof(int32_t) * (size_t)n));
    CHECK(!r.split_reasoning);
    srv_request_free(&r);
}

static void test_variants(fake_engine *f) {
    /* a template that thinks: the split is on, and starts inside <think> when the template opened it */
    fake_config c;
    fake_config_default(&c);
    c.thinks = true;
    fake_engine *t = fake_new(&c);
    g_svc = fake_service(t);
    srv_request r;
    good(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
    CHECK(r.split_reasoning && r.start_in_reasoning);
    srv_request_free(&r);
    good(SRV_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{"
         "\"enable_thinking\":false}}",
         &r);
    CHECK(r.split_reasoning && !r.start_in_reasoning);
    srv_request_free(&r);
    g_cfg.thinking = 0; /* --no-thinking: the default a request can still override */
    good(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
    CHECK(r.split_reasoning && !r.start_in_reasoning);
    srv_request_free(&r);
    good(SRV_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{"
         "\"enable_thinking\":true}}",
         &r);
    CHECK(r.start_in_reasoning);
    srv_request_free(&r);
    g_cfg.thinking = -1;
    fake_free(t);
    /* no BOS: an empty prompt has no token → 400 */
    c.thinks = false;
    c.add_bos = false;
    t = fake_new(&c);
    g_svc = fake_service(t);
    bad(SRV_COMPLETIONS, "{\"prompt\":\"\"}", 400, "prompt", NULL);
    fake_free(t);
    /* no tokenizer: token-id prompts only */
    c.add_bos = true;
    c.has_tokenizer = false;
    c.has_template = false;
    t = fake_new(&c);
    g_svc = fake_service(t);
    bad(SRV_COMPLETIONS, "{\"prompt\":\"text\"}", 400, "prompt", NULL);
    bad(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "messages", NULL);
    good(SRV_COMPLETIONS, "{\"prompt\":[1,2,3]}", &r);
    srv_request_free(&r);
    fake_free(t);
    /* --no-drafts wins over a request's draft:true */
    g_svc = fake_service(f);
    g_cfg.drafts = false;
    good(SRV_COMPLETIONS, "{\"prompt\":\"x\",\"draft\":true}", &r);
    CHECK(!r.draft);
    srv_request_free(&r);
    g_cfg.drafts = true;
}

int main(void) {
    fake_config c;
    fake_config_default(&c);
    fake_engine *f = fake_new(&c);
    g_svc = fake_service(f);
    weft_server_config_default(&g_cfg);
    g_cfg.max_tokens = 100;
    g_cfg.defaults.temperature = 0.7;
    g_cfg.defaults.top_k = 40;
    test_json_and_model();
    test_prompts();
    test_numbers();
    test_context();
    test_chat();
    test_variants(f);
    fake_free(f);
    return check_report("test_server_request");
}
