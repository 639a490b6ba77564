/* test_lanes_fake.c — the fake backend itself: history sensitivity, chunk invariance, agreement with its
 * serial oracle, and that it catches the host-side contract violations the lane core tests rely on. */
#include "check.h"
#include "weft/lanes.h"

#include <stdlib.h>

#define VOCAB 50

static weft_sampling greedy(void) {
    return (weft_sampling){.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};
}

static weft_segment seg(int slot, int start, int n_rows, const int32_t *seq, int n_prompt, int n_draw,
                        const weft_sampling *s, int32_t *draws) {
    return (weft_segment){.slot = slot,
                          .start = start,
                          .n_rows = n_rows,
                          .seq = seq,
                          .n_prompt = n_prompt,
                          .n_draw = n_draw,
                          .sampling = s,
                          .draws = draws};
}

static void test_history_and_chunks(void) {
    weft_fake_config fc = {.max_slots = 3, .max_rows = 64, .vocab_size = VOCAB, .salt = 7};
    weft_backend b;
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &b, &err) == WEFT_OK);
    int32_t seq[40];
    for (int i = 0; i < 40; i++) seq[i] = (i * 11 + 3) % VOCAB;
    weft_sampling s = greedy();
    /* Slot 0: the 30-token prompt in one segment; slot 1: in chunks 1, 4, 25 beside slot 0 in one call. */
    for (int slot = 0; slot < 2; slot++) CHECK(b.ops->open(b.self, slot, 40, &err) == WEFT_OK);
    int32_t d0 = -1, d1 = -1;
    weft_segment a[2] = {seg(0, 0, 30, seq, 30, 1, &s, &d0), seg(1, 0, 1, seq, 30, 0, &s, NULL)};
    CHECK(b.ops->forward(b.self, a, 2, &err) == WEFT_OK);
    weft_segment c1 = seg(1, 1, 4, seq, 30, 0, &s, NULL);
    CHECK(b.ops->forward(b.self, &c1, 1, &err) == WEFT_OK);
    weft_segment c2 = seg(1, 5, 25, seq, 30, 1, &s, &d1);
    CHECK(b.ops->forward(b.self, &c2, 1, &err) == WEFT_OK);
    CHECK(d0 >= 0 && d0 < VOCAB);
    CHECK_EQ_INT(d0, d1);
    CHECK_EQ_INT(d0, weft_fake_next(&b, seq, 30, 29, &s, NULL));
    /* A different history gives different draws (over several positions at least one differs). */
    int32_t other[40];
    memcpy(other, seq, sizeof other);
    other[0] = (other[0] + 1) % VOCAB;
    int differ = 0;
    /* (n_prompt 1 so that every position is a valid draw position for the sampler) */
    for (int p = 5; p < 30; p++)
        differ += weft_fake_next(&b, seq, 1, p, &s, NULL) != weft_fake_next(&b, other, 1, p, &s, NULL);
    CHECK(differ > 5);
    /* Seeded draws differ from greedy ones somewhere and depend on the seed. */
    weft_sampling t1 = s, t2 = s;
    t1.temperature = t2.temperature = 1.0;
    t1.seed = 1;
    t2.seed = 2;
    int dg = 0, ds = 0;
    for (int p = 0; p < 30; p++) {
        dg += weft_fake_next(&b, seq, 1, p, &s, NULL) != weft_fake_next(&b, seq, 1, p, &t1, NULL);
        ds += weft_fake_next(&b, seq, 1, p, &t1, NULL) != weft_fake_next(&b, seq, 1, p, &t2, NULL);
    }
    CHECK(dg > 0 && ds > 0);
    /* Decode window with drafts on slot 0: rows 30..32, draws must equal the oracle at each position. */
    int32_t w[3];
    seq[30] = d0;
    weft_segment win = seg(0, 30, 3, seq, 30, 3, &s, w);
    CHECK(b.ops->forward(b.self, &win, 1, &err) == WEFT_OK);
    for (int d = 0; d < 3; d++) CHECK_EQ_INT(w[d], weft_fake_next(&b, seq, 30, 30 + d, &s, NULL));
    /* Roll back to 31 rows, then feed a different token at 31: no complaint, and the draw follows it. */
    CHECK(b.ops->keep(b.self, 0, 31, &err) == WEFT_OK);
    seq[31] = (seq[31] + 5) % VOCAB;
    int32_t w2;
    weft_segment win2 = seg(0, 31, 1, seq, 30, 1, &s, &w2);
    CHECK(b.ops->forward(b.self, &win2, 1, &err) == WEFT_OK);
    CHECK_EQ_INT(w2, weft_fake_next(&b, seq, 30, 31, &s, NULL));
    /* Logprobs: the drawn token's entry and the top list are sorted. */
    weft_sampling sl = s;
    sl.logprobs = 5;
    weft_logprobs lp;
    int32_t t = weft_fake_next(&b, seq, 10, 10, &sl, &lp);
    CHECK_EQ_INT(lp.token, t);
    CHECK_EQ_INT(lp.n_top, 5);
    CHECK_EQ_INT(lp.top_ids[0], t); /* greedy: the drawn token is the top one */
    for (int k = 1; k < 5; k++) CHECK(lp.top_logprobs[k] <= lp.top_logprobs[k - 1]);
    weft_fake_stats st;
    weft_fake_get_stats(&b, &st);
    CHECK_EQ_INT(st.violations, 0);
    CHECK_EQ_INT(st.max_segments, 2);
    CHECK_EQ_INT(st.keeps, 1);
    size_t used = 0, fr = 0;
    b.ops->memory(b.self, &used, &fr);
    CHECK(used > 0 && fr > 0);
    b.ops->release(b.self, 0);
    b.ops->release(b.self, 1);
    b.ops->destroy(b.self);
}

static void test_violations(void) {
    weft_fake_config fc = {.max_slots = 2, .max_rows = 8, .vocab_size = VOCAB, .salt = 1};
    weft_backend b;
    weft_err err;
    CHECK(weft_fake_backend_new(&fc, &b, &err) == WEFT_OK);
    int32_t seq[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    weft_sampling s = greedy();
    int32_t d;
    weft_fake_stats st;
    /* Forward on a slot never opened. */
    weft_segment g = seg(0, 0, 2, seq, 2, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EINTERNAL);
    weft_fake_get_stats(&b, &st);
    CHECK_EQ_INT(st.violations, 1);
    CHECK(strstr(st.first_violation, "not open") != NULL);
    CHECK(b.ops->open(b.self, 0, 16, &err) == WEFT_OK);
    CHECK(b.ops->open(b.self, 0, 16, &err) == WEFT_EINTERNAL); /* opened twice */
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_OK);
    /* Wrong start (rows already cached: 2). */
    g = seg(0, 3, 1, seq, 2, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EINTERNAL);
    /* seq disagreeing with what was fed. */
    int32_t bad[16];
    memcpy(bad, seq, sizeof bad);
    bad[1] = 40;
    g = seg(0, 2, 1, bad, 2, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EINTERNAL);
    CHECK(strstr(err.msg, "seq[1]") != NULL);
    /* Same slot twice in one call; too many rows; past capacity; keep past cache_len. */
    weft_segment two[2] = {seg(0, 2, 1, seq, 2, 1, &s, &d), seg(0, 2, 1, seq, 2, 1, &s, &d)};
    CHECK(b.ops->forward(b.self, two, 2, &err) == WEFT_EINTERNAL);
    g = seg(0, 2, 9, seq, 2, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EINTERNAL);
    CHECK(b.ops->keep(b.self, 0, 5, &err) == WEFT_EINTERNAL);
    /* n_prompt changing under a slot. */
    g = seg(0, 2, 1, seq, 3, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EINTERNAL);
    /* The state was not disturbed by the refused calls: a correct segment still works. */
    g = seg(0, 2, 1, seq, 2, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_OK);
    CHECK_EQ_INT(d, weft_fake_next(&b, seq, 2, 2, &s, NULL));
    b.ops->release(b.self, 0);
    b.ops->release(b.self, 0); /* released twice */
    weft_fake_get_stats(&b, &st);
    CHECK_EQ_INT(st.violations, 9);
    CHECK_EQ_INT(st.opens, 1);
    CHECK_EQ_INT(st.releases, 1);
    CHECK_EQ_INT(st.open_slots, 0);
    /* Injected faults. */
    weft_fake_set_faults(&b, 2, 0);
    CHECK(b.ops->open(b.self, 0, 8, &err) == WEFT_OK);
    CHECK(b.ops->open(b.self, 1, 8, &err) == WEFT_ENOMEM);
    weft_fake_set_faults(&b, 0, 1);
    g = seg(0, 0, 1, seq, 1, 1, &s, &d);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_EIO);
    CHECK(b.ops->forward(b.self, &g, 1, &err) == WEFT_OK);
    b.ops->release(b.self, 0);
    b.ops->destroy(b.self);
    weft_backend b2;
    fc.vocab_size = 1;
    CHECK(weft_fake_backend_new(&fc, &b2, &err) == WEFT_EINVAL);
}

int main(void) {
    test_history_and_chunks();
    test_violations();
    return check_report("test_lanes_fake");
}
