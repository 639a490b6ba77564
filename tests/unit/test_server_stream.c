/* test_server_stream.c — the reply text pipeline (UTF-8 reassembly, stop-string holdback, reasoning split),
 * SSE framing and OpenAI error objects. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "../../src/server/internal.h"

static uint64_t rng_state = 88172645463325252ULL;
static int rnd(int n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int k = srv_utf8_seq((const unsigned char *)s + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

typedef struct run_result {
    srv_buf content, reasoning;
    bool stopped;
    int stop_chunk; /* index of the chunk that completed the stop, -1 */
    bool bad_delta; /* a delta was not valid UTF-8 or contained U+FFFD */
    bool leaked;    /* content was at some point not a prefix of want */
} run_result;

/* Feeds text cut at random into pieces of 1..maxpiece bytes; checks every delta as it comes. */
static void run(const char *text, const char *const *stops, int n_stops, bool split, bool start_in,
                int maxpiece, const char *want_content, run_result *r) {
    srv_textpipe tp;
    srv_textpipe_init(&tp, stops, n_stops, split, start_in);
    memset(r, 0, sizeof *r);
    r->stop_chunk = -1;
    size_t n = strlen(text), i = 0;
    int chunk = 0;
    while (i < n) {
        size_t k = 1 + (size_t)rnd(maxpiece);
        if (k > n - i) k = n - i;
        size_t c0 = r->content.len, r0 = r->reasoning.len;
        bool oom = false;
        bool hit = srv_textpipe_feed(&tp, text + i, k, &r->content, &r->reasoning, &oom);
        CHECK(!oom);
        const char *dc = r->content.p ? r->content.p + c0 : "";
        const char *dr = r->reasoning.p ? r->reasoning.p + r0 : "";
        if (!valid_utf8(dc, r->content.len - c0) || !valid_utf8(dr, r->reasoning.len - r0) ||
            memmem(dc, r->content.len - c0, "\xEF\xBF\xBD", 3))
            r->bad_delta = true;
        if (want_content && (r->content.len > strlen(want_content) ||
                             memcmp(r->content.p ? r->content.p : "", want_content, r->content.len)))
            r->leaked = true;
        if (hit && r->stop_chunk < 0) r->stop_chunk = chunk;
        i += k;
        chunk++;
    }
    CHECK(srv_textpipe_finish(&tp, &r->content, &r->reasoning));
    srv_buf_add(&r->content, "", 0);
    srv_buf_add(&r->reasoning, "", 0);
    r->stopped = tp.stopped;
    srv_textpipe_free(&tp);
}

static void run_free(run_result *r) {
    srv_buf_free(&r->content);
    srv_buf_free(&r->reasoning);
}

static void test_utf8_random_splits(void) {
    const char *text = "Reply: \xF0\x9F\xA6\x99 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xC3\xA9 na\xC3\xAFve "
                       "\xE2\x80\x94 \xF0\x9D\x84\x9E \xE4\xB8\xAD\xE6\x96\x87\xF0\x9F\x98\x80!";
    for (int it = 0; it < 2000; it++) {
        run_result r;
        run(text, NULL, 0, false, false, 1 + it % 6, text, &r);
        CHECK(!r.bad_delta);
        CHECK(!r.leaked);
        CHECK_STR(r.content.p, text);
        run_free(&r);
    }
}

static void test_stop_holdback(void) {
    const char *stops[] = {"DEFGHIJ"};
    for (int it = 0; it < 500; it++) {
        run_result r;
        run("Here is the English alphabet: ABCDEFGHIJKLMNOP", stops, 1, false, false, 1 + it % 5,
            "Here is the English alphabet: ABC", &r);
        CHECK(!r.leaked); /* never showed "D", "DE", ... */
        CHECK(r.stopped);
        CHECK_STR(r.content.p, "Here is the English alphabet: ABC");
        run_free(&r);
    }
    /* byte by byte: the stop completes exactly at the byte of "J" */
    run_result r;
    run("xxDEFGHIJyy", stops, 1, false, false, 1, "xx", &r);
    CHECK_EQ_INT(r.stop_chunk, 8);
    run_free(&r);
    /* a prefix that is ruled out later is released; one that never completes is released at the end */
    run("ABCDEFX and DEF", stops, 1, false, false, 1, "ABCDEFX and DEF", &r);
    CHECK(!r.stopped);
    CHECK(!r.leaked);
    CHECK_STR(r.content.p, "ABCDEFX and DEF");
    run_free(&r);
    /* tail before a newline stop (llama.cpp PR #9867) */
    const char *nl[] = {"\n"};
    run("Bob: It is red.\nAlice:", nl, 1, false, false, 3, "Bob: It is red.", &r);
    CHECK_STR(r.content.p, "Bob: It is red.");
    run_free(&r);
    /* the earliest of several stops wins; a stop with multi-byte characters */
    const char *two[] = {"STOP2", "STOP1"};
    run("xx STOP1 yy STOP2", two, 2, false, false, 2, "xx ", &r);
    CHECK_STR(r.content.p, "xx ");
    run_free(&r);
    const char *cjk[] = {"\xE6\x97\xA5\xE6\x9C\xAC"};
    for (int it = 0; it < 200; it++) {
        run("abc\xE6\x97\xA5\xE8\xAA\x9E \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", cjk, 1, false, false,
            1 + it % 4, "abc\xE6\x97\xA5\xE8\xAA\x9E ", &r);
        CHECK(!r.bad_delta && !r.leaked);
        CHECK_STR(r.content.p, "abc\xE6\x97\xA5\xE8\xAA\x9E ");
        run_free(&r);
    }
}

static void test_invalid_utf8(void) {
    run_result r;
    run("a\xFF"
        "b",
        NULL, 0, false, false, 1, NULL, &r);
    CHECK_STR(r.content.p, "a\xEF\xBF\xBD"
                           "b");
    run_free(&r);
    run("ok\xE6\x97", NULL, 0, false, false, 1, NULL, &r); /* cut mid-character at the end */
    CHECK_STR(r.content.p, "ok\xEF\xBF\xBD");
    run_free(&r);
    run("\xE6\x97"
        "A",
        NULL, 0, false, false, 3, NULL, &r); /* broken sequence: one U+FFFD, then A */
    CHECK_STR(r.content.p, "\xEF\xBF\xBD"
                           "A");
    run_free(&r);
    srv_buf b = {0};
    srv_buf_add_utf8_lossy(&b, "\xED\xA0\x80x\xC0\xAF", 6); /* surrogate and overlong are invalid */
    CHECK(valid_utf8(b.p, b.len));
    CHECK(memmem(b.p, b.len, "x", 1) != NULL);
    srv_buf_free(&b);
}

static void test_reasoning(void) {
    for (int it = 0; it < 300; it++) {
        run_result r;
        run("<think>\nLet me think: 2+2.\n</think>\n\nIt is 4 \xF0\x9F\xA6\x99.", NULL, 0, true, false,
            1 + it % 7, NULL, &r);
        CHECK(!r.bad_delta);
        CHECK_STR(r.reasoning.p, "Let me think: 2+2.\n");
        CHECK_STR(r.content.p, "It is 4 \xF0\x9F\xA6\x99.");
        run_free(&r);
        /* the template opened <think>: the reply starts inside it */
        run("step one</think>answer", NULL, 0, true, true, 1 + it % 5, NULL, &r);
        CHECK_STR(r.reasoning.p, "step one");
        CHECK_STR(r.content.p, "answer");
        run_free(&r);
        /* no think block: everything is content, including a "<" that is not a marker */
        run("  <b>plain</b>", NULL, 0, true, false, 1 + it % 3, NULL, &r);
        CHECK_STR(r.content.p, "  <b>plain</b>");
        CHECK_STR(r.reasoning.p, "");
        run_free(&r);
    }
    run_result r;
    run("<think>cut short", NULL, 0, true, false, 2, NULL, &r); /* ends inside reasoning */
    CHECK_STR(r.reasoning.p, "cut short");
    CHECK_STR(r.content.p, "");
    run_free(&r);
    run("<thi", NULL, 0, true, false, 1, NULL, &r); /* a marker prefix at the very end is text */
    CHECK_STR(r.content.p, "<thi");
    run_free(&r);
    const char *stops[] = {"END"};
    run("<think>a</think>bEND c", stops, 1, true, false, 1, NULL, &r); /* stop applies after the split */
    CHECK_STR(r.reasoning.p, "a");
    CHECK_STR(r.content.p, "b");
    run_free(&r);
}

static void test_sse_and_errors(void) {
    srv_buf b = {0};
    json_t *j = json_object();
    json_object_set_new(j, "a", json_string("\xE6\x97\xA5\n"));
    CHECK(srv_sse_json(&b, j));
    CHECK(srv_sse_done(&b));
    CHECK_STR(b.p, "data: {\"a\":\"\xE6\x97\xA5\\n\"}\n\ndata: [DONE]\n\n");
    srv_buf_free(&b);
    srv_error e;
    srv_fail(&e, 400, "top_p", NULL, "`top_p` must be between 0 and 1, got %g", 2.0);
    char *s = srv_error_json(&e);
    CHECK_STR(s, "{\"error\":{\"message\":\"`top_p` must be between 0 and 1, got 2\",\"type\":"
                 "\"invalid_request_error\",\"param\":\"top_p\",\"code\":null}}");
    free(s);
}

int main(void) {
    test_utf8_random_splits();
    test_stop_holdback();
    test_invalid_utf8();
    test_reasoning();
    test_sse_and_errors();
    return check_report("test_server_stream");
}
