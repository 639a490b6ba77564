/* Hand-computed unit tests of SPEC §5 (sampler, seeds, token_sha, validation, logprobs). Each expected value
 * says where it comes from: worked out by hand in the comment, or printed by the reference
 * ../shared/tools/sampler_reference.py (functions mix/key/uniform/gumbel/draw/seed_from_prompt/token_sha,
 * called from Python as shown). */
#include "weft/sampler.h"

#include "check.h"

#include <float.h>
#include <stdlib.h>

int32_t test_naive_draw(const float *logits, int64_t vocab, const weft_sampling *p, const int32_t *prompt,
                        size_t n_prompt, const int32_t *gen, size_t n_gen, int64_t pos);

static weft_sampling defaults(void) {
    weft_sampling p;
    weft_sampling_defaults(&p);
    return p;
}

/* Bitmask of the tokens drawn over seeds 0..n-1 at position 7 (the reference's seeds in range(300)). */
static unsigned drawn_set(weft_sampler *s, const float *z, weft_sampling p, int n) {
    unsigned set = 0;
    for (int seed = 0; seed < n; seed++) {
        p.seed = (uint64_t)seed;
        int32_t t = weft_sample(s, z, &p, NULL, 7, 7, NULL);
        if (t >= 0 && t < 32)
            set |= 1u << t;
        else
            set |= 1u << 31;
    }
    return set;
}
#define SET(...) set_of((const int[]){__VA_ARGS__, -1})
static unsigned set_of(const int *ids) {
    unsigned s = 0;
    for (; *ids >= 0; ids++) s |= 1u << *ids;
    return s;
}

static void test_primitives(void) {
    /* mix(0) = 0: every step of the finaliser maps 0 to 0 (hand). */
    CHECK(weft_mix(0) == 0);
    /* reference: mix(1) = 6238072747940578789, key(0, 0, 0) = 3746585686858627171. */
    CHECK(weft_mix(1) == 6238072747940578789ULL);
    CHECK(weft_key(0, 0, 0) == 3746585686858627171ULL);
    /* key(0,0,0) = mix(mix(mix(G)) ^ 0) with G = 0x9E3779B97F4A7C15 since pos * C = 0 (hand). */
    CHECK(weft_key(0, 0, 0) == weft_mix(weft_mix(weft_mix(0x9E3779B97F4A7C15ULL))));
    /* Wrapping: seed + G overflows for seed = 2^64-1 to G - 1 (hand). */
    CHECK(weft_key(UINT64_MAX, 3, 4) ==
          weft_mix(weft_mix(weft_mix(0x9E3779B97F4A7C14ULL) ^ (3 * 0xD1B54A32D192ED03ULL)) ^ 4));
    /* Negative pos is taken mod 2^64 like the reference's "& M64": key(5, -3 & M64, 9) = key(5, -3, 9) =
     * 14444672526276772728 (reference). */
    CHECK(weft_key(5, -3, 9) == 14444672526276772728ULL);
    /* u = ((key >> 12) + 0.5) * 2^-52 (hand): the extremes are 2^-53 and 1 - 2^-53, the low 12 bits are
     * dropped. */
    CHECK(weft_uniform(0) == 0x1p-53);
    CHECK(weft_uniform(UINT64_MAX) == 1.0 - 0x1p-53);
    CHECK(weft_uniform(1ULL << 12) == 1.5 * 0x1p-52);
    CHECK(weft_uniform(0xABC) == weft_uniform(0));
    /* g = -ln(-ln u): u = e^-1 gives 0 and u = exp(-e^-2) gives 2, up to rounding (hand). */
    CHECK(fabs(weft_gumbel(exp(-1.0))) < 1e-15);
    CHECK(fabs(weft_gumbel(exp(-exp(-2.0))) - 2.0) < 1e-14);
    /* Range of the noise (reference: gumbel(2**-53), gumbel(1-2**-53)); the sampler's early exits rely on it.
     */
    CHECK(weft_gumbel(0x1p-53) == -3.6037789929704576);
    CHECK(weft_gumbel(1.0 - 0x1p-53) == 36.7368005696771);
}

/* Row z = {1, 3, 3, 0, 2} (ids 0..4). Sorted: ids 1, 2 (tie at 3, by id), 4, 0, 3. With T = 1,
 * p = exp(l - 3) = {1, 1, e^-1, e^-2, e^-3} = {1, 1, .3679, .1353, .0498}, total 2.5530 (hand). */
static const float Z5[5] = {1, 3, 3, 0, 2};

static void test_filters(void) {
    weft_sampler *s = weft_sampler_new(5);
    CHECK(s != NULL);
    if (!s) return;
    weft_sampling p = defaults();
    /* Greedy: argmax 3 at ids 1 and 2, ties to the lowest id (hand). */
    p.temperature = 0;
    CHECK_EQ_INT(weft_sample(s, Z5, &p, NULL, 0, 0, NULL), 1);
    p = defaults();
    /* top_k keeps a prefix of the order (hand; reference draw over seeds 0..299 agrees). */
    p.top_k = 1;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1));
    p.top_k = 2;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    p.top_k = 3;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2, 4));
    p.top_k = 9; /* more than the vocabulary = all */
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(0, 1, 2, 3, 4));
    p = defaults();
    /* top_p: keep i while the p before it sum < top_p * 2.5530 (hand):
     * 0.5 -> 1.2765: after ids 1,2 the sum is 2 >= 1.2765 -> {1,2};
     * 0.8 -> 2.0424 and 0.9 -> 2.2977: 2 < x, then 2.3679 >= x -> {1,2,4};
     * 0.95 -> 2.4254: 2.3679 < x, then 2.5032 >= x -> {1,2,4,0}; 0.99 -> 2.5275: all five. */
    p.top_p = 0.5;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    p.top_p = 0.8;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2, 4));
    p.top_p = 0.9;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2, 4));
    p.top_p = 0.95;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(0, 1, 2, 4));
    p.top_p = 0.99;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(0, 1, 2, 3, 4));
    p.top_p = 1e-9; /* the first candidate always stays */
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1));
    p = defaults();
    /* min_p: keep l >= 3 + ln(min_p) (hand): 0.3 -> 1.796 {1,2,4}; 0.36 -> 1.978 {1,2,4}; 0.37 -> 2.006
     * {1,2}; 0.5 -> 2.307 {1,2}; 1 -> 3 {1,2}. */
    p.min_p = 0.3;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2, 4));
    p.min_p = 0.36;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2, 4));
    p.min_p = 0.37;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    p.min_p = 0.5;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    p.min_p = 1.0;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    p = defaults();
    /* T below 1e-6 is clamped to 1e-6: l = z * 1e6, so only the tied ids 1, 2 are within reach (hand). */
    p.temperature = 1e-9;
    CHECK_EQ_INT(drawn_set(s, Z5, p, 300), SET(1, 2));
    weft_sampler_free(s);
}

/* The top_p total is a sequential fp64 sum over every candidate, far tails included. Row: ids 0 and 1 at 0,
 * then 20000 ids at `tail`; T = 1, top_p = 0.5 (hand): tail -35: each e^-35 = 6.3e-16 exceeds half an ulp of
 * 2 (2.2e-16), so each add moves the sum by one ulp: total = 2 + 8.9e-12, 0.5 * total > 1 = the sum before id
 * 1, so ids 0 and 1 are both kept; tail -40: e^-40 = 4.2e-18 is absorbed by every add: total = 2 exactly, 0.5
 * * total = 1 <= 1, only id 0. The reference (draw(z, seed, 9, top_p=0.5) over seeds 0..39) gives {0, 1} and
 * {0}. A sampler that dropped candidates within 41 of the best would get the first case wrong. */
static void test_top_p_tail(void) {
    enum { V = 20002 };
    float *z = malloc(V * sizeof *z);
    weft_sampler *s = weft_sampler_new(V);
    weft_sampling p = defaults();
    p.top_p = 0.5;
    for (int c = 0; c < 2; c++) {
        z[0] = z[1] = 0.0f;
        for (int i = 2; i < V; i++) z[i] = c == 0 ? -35.0f : -40.0f;
        unsigned set = 0;
        for (uint64_t seed = 0; seed < 40; seed++) {
            p.seed = seed;
            int32_t t = weft_sample(s, z, &p, NULL, 9, 9, NULL);
            set |= t >= 0 && t < 31 ? 1u << t : 1u << 31;
        }
        CHECK_EQ_INT(set, c == 0 ? SET(0, 1) : SET(0));
    }
    weft_sampler_free(s);
    free(z);
}

static void test_draw(void) {
    /* Row {0.5, 0.25, 0, -1}, T = 1, seed 42, pos 7. Noise (reference gumbel(uniform(key(42, 7, i)))):
     * g = {0.5721, 1.1608, 0.4011, 0.5911}; l + g = {1.072, 1.411, 0.401, -0.409} -> id 1 (hand), and the
     * reference draw() agrees. Other cases: reference draw(z, seed, pos, temperature=T). */
    static const float z[4] = {0.5f, 0.25f, 0.0f, -1.0f};
    static const struct {
        uint64_t seed;
        int64_t pos;
        double T;
        int want;
    } cases[] = {
        {42, 7, 1.0, 1}, {42, 8, 1.0, 0}, {43, 7, 1.0, 2}, {1, 0, 0.5, 2}, {UINT64_MAX, 100000, 2.0, 0}};
    weft_sampler *s = weft_sampler_new(4);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(fabs(weft_gumbel(weft_uniform(weft_key(42, 7, 1))) - 1.160757983525804) < 1e-15);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_sampling p = defaults();
        p.seed = cases[i].seed;
        p.temperature = cases[i].T;
        CHECK_MSG(weft_sample(s, z, &p, NULL, cases[i].pos, cases[i].pos, NULL) == cases[i].want, "case %zu",
                  i);
    }
    weft_sampler_free(s);

    /* Ties in the draw go to the earlier candidate: with z = {1, +inf, +inf}, l + g = +inf for ids 1 and 2,
     * and id 1 comes first in the order (hand). */
    static const float zinf[3] = {1.0f, INFINITY, INFINITY};
    s = weft_sampler_new(3);
    weft_sampling p = defaults();
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        CHECK_EQ_INT(weft_sample(s, zinf, &p, NULL, 3, 3, NULL), 1);
    }
    /* NaN counts as -inf; all -inf: the first of the order, id 0 (weft convention, no reference answer). */
    static const float znan[3] = {NAN, 2.0f, NAN};
    CHECK_EQ_INT(weft_sample(s, znan, &p, NULL, 3, 3, NULL), 1);
    static const float zall[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(weft_sample(s, zall, &p, NULL, 3, 3, NULL), 0);
    p.temperature = 0;
    CHECK_EQ_INT(weft_sample(s, znan, &p, NULL, 3, 3, NULL), 1);
    CHECK_EQ_INT(weft_sample(s, zall, &p, NULL, 3, 3, NULL), 0);
    weft_sampler_free(s);

    /* -0.0 and +0.0 are equal values, so they tie and the lower id sorts first (hand): with top_k 1 the only
     * candidate is id 0 for {-0, +0} and for {+0, -0}. A sort on raw float bits would pick +0 first. */
    s = weft_sampler_new(2);
    const float zneg[2] = {-0.0f, 0.0f}, zpos[2] = {0.0f, -0.0f};
    p = defaults();
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        CHECK_EQ_INT(weft_sample(s, zneg, &p, NULL, 0, 0, NULL), 0);
        CHECK_EQ_INT(weft_sample(s, zpos, &p, NULL, 0, 0, NULL), 0);
    }
    weft_sampler_free(s);
}

static int32_t greedy(weft_sampler *s, const float *z, weft_sampling p, const int32_t *seq, int64_t pos,
                      int64_t n_prompt) {
    p.temperature = 0;
    return weft_sample(s, z, &p, seq, pos, n_prompt, NULL);
}

static void test_adjustments(void) {
    weft_sampler *s = weft_sampler_new(5);
    CHECK(s != NULL);
    if (!s) return;
    weft_sampling p = defaults();
    /* logit_bias: +5 on id 3 makes it 5 > 3 (hand). */
    weft_logit_bias b3 = {3, 5.0};
    p.logit_bias = &b3;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(greedy(s, Z5, p, NULL, 0, 0), 3);
    p = defaults();
    /* frequency 0.3 over generated {1, 2, 2}: z1 = 3 - 0.3 = 2.7, z2 = 3 - 0.6 = 2.4 -> 1; over {1, 1, 2}:
     * z1 = 2.4, z2 = 2.7 -> 2 (hand). */
    p.frequency_penalty = 0.3;
    const int32_t g122[3] = {1, 2, 2}, g112[3] = {1, 1, 2};
    CHECK_EQ_INT(greedy(s, Z5, p, g122, 3, 0), 1);
    CHECK_EQ_INT(greedy(s, Z5, p, g112, 3, 0), 2);
    p = defaults();
    /* presence counts generated ids only: seq {2, 2 | 1}, presence 0.5: z1 = 2.5, z2 stays 3 -> 2. Had the
     * prompt counted, z2 = 2.5 too and id 1 would win the tie (hand). */
    p.presence_penalty = 0.5;
    const int32_t s221[3] = {2, 2, 1};
    CHECK_EQ_INT(greedy(s, Z5, p, s221, 3, 2), 2);
    p = defaults();
    /* repetition 2 over prompt + generated: seq {1 | 2}: z1 = z2 = 1.5 < z4 = 2 -> 4; prompt {1} alone:
     * z1 = 1.5 -> 2 (hand). */
    p.repetition_penalty = 2.0;
    const int32_t s12[2] = {1, 2};
    CHECK_EQ_INT(greedy(s, Z5, p, s12, 2, 1), 4);
    CHECK_EQ_INT(greedy(s, Z5, p, s12, 1, 1), 2);
    /* Negative logits are multiplied: {-1, -1.5} with prompt {0}: z0 = -2 -> 1 (hand). */
    const float zn[5] = {-1.0f, -1.5f, -9.0f, -9.0f, -9.0f};
    const int32_t s0[1] = {0};
    CHECK_EQ_INT(greedy(s, zn, p, s0, 1, 1), 1);
    p = defaults();
    /* Steps 1-2 store fp32: 1 + 1e-9 rounds back to 1.0f, so {1, 1} with bias 1e-9 on id 1 stays a tie -> 0;
     * 1 + 1e-7 rounds to 1 + 2^-23 -> 1. Likewise presence 1e-9 on id 0 leaves 1.0f (tie -> 0) while
     * 1 - 1e-7 rounds to 1 - 2^-23 -> 1 (hand: float spacing is 2^-23 above 1 and 2^-24 below). */
    const float z11[5] = {1.0f, 1.0f, -5.0f, -5.0f, -5.0f};
    weft_logit_bias tiny = {1, 1e-9};
    p.logit_bias = &tiny;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(greedy(s, z11, p, NULL, 0, 0), 0);
    tiny.bias = 1e-7;
    CHECK_EQ_INT(greedy(s, z11, p, NULL, 0, 0), 1);
    p = defaults();
    p.presence_penalty = 1e-9;
    CHECK_EQ_INT(greedy(s, z11, p, s0, 1, 0), 0);
    p.presence_penalty = 1e-7;
    CHECK_EQ_INT(greedy(s, z11, p, s0, 1, 0), 1);
    /* The raw logits are never modified. */
    CHECK(z11[0] == 1.0f && Z5[1] == 3.0f);

    /* Bad input: -1 and a message; the scratch stays clean, so the next draw is unaffected. */
    p = defaults();
    p.frequency_penalty = 1.0;
    const int32_t bad[3] = {1, 7, 2};
    CHECK_EQ_INT(greedy(s, Z5, p, bad, 3, 0), -1);
    CHECK(weft_sampler_error(s)->code == WEFT_ERANGE && strstr(weft_sampler_error(s)->msg, "position 1"));
    CHECK_EQ_INT(greedy(s, Z5, p, g122, 3, 0), 1);
    CHECK(weft_sampler_error(s)->code == WEFT_OK);
    CHECK_EQ_INT(greedy(s, Z5, p, NULL, 3, 0), -1); /* penalties need seq */
    CHECK_EQ_INT(greedy(s, Z5, p, g122, 3, 4), -1); /* n_prompt > pos */
    weft_logit_bias far = {5, 1.0};
    p = defaults();
    p.logit_bias = &far;
    p.n_logit_bias = 1;
    CHECK_EQ_INT(greedy(s, Z5, p, NULL, 0, 0), -1);
    CHECK(strstr(weft_sampler_error(s)->msg, "logit_bias") != NULL);
    p = defaults();
    p.temperature = NAN;
    CHECK_EQ_INT(weft_sample(s, Z5, &p, NULL, 0, 0, NULL), -1);
    CHECK(weft_sample(NULL, Z5, &p, NULL, 0, 0, NULL) == -1);
    weft_sampler_free(s);
    CHECK(weft_sampler_new(0) == NULL && weft_sampler_new(-1) == NULL);
    CHECK(weft_sampler_new((int64_t)INT32_MAX + 1) == NULL);
    weft_sampler_free(NULL);
}

static void test_settings(void) {
    weft_sampling p;
    memset(&p, 0x5a, sizeof p);
    weft_sampling_defaults(&p);
    CHECK(p.temperature == 1.0 && p.top_k == 0 && p.top_p == 1.0 && p.min_p == 0.0);
    CHECK(p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 && p.repetition_penalty == 1.0);
    CHECK(p.logit_bias == NULL && p.n_logit_bias == 0 && p.seed == 0 && p.logprobs == -1);
    weft_err err;
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_OK);

    /* Each bad value is refused with the field named. */
    static const struct {
        const char *field;
        int what;
        double v;
    } bad[] = {
        {"temperature", 0, -0.1},
        {"temperature", 0, NAN},
        {"temperature", 0, INFINITY},
        {"top_p", 1, 0.0},
        {"top_p", 1, 1.5},
        {"top_p", 1, NAN},
        {"min_p", 2, -0.01},
        {"min_p", 2, 1.01},
        {"top_k", 3, -1},
        {"repetition_penalty", 4, 0.0},
        {"repetition_penalty", 4, -1.0},
        {"presence_penalty", 5, NAN},
        {"frequency_penalty", 6, INFINITY},
        {"logprobs", 7, 21},
        {"logprobs", 7, -2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        weft_sampling q;
        weft_sampling_defaults(&q);
        switch (bad[i].what) {
        case 0:
            q.temperature = bad[i].v;
            break;
        case 1:
            q.top_p = bad[i].v;
            break;
        case 2:
            q.min_p = bad[i].v;
            break;
        case 3:
            q.top_k = (int)bad[i].v;
            break;
        case 4:
            q.repetition_penalty = bad[i].v;
            break;
        case 5:
            q.presence_penalty = bad[i].v;
            break;
        case 6:
            q.frequency_penalty = bad[i].v;
            break;
        default:
            q.logprobs = (int)bad[i].v;
            break;
        }
        err.msg[0] = '\0';
        weft_status st = weft_sampling_validate(&q, 10, &err);
        CHECK_MSG(st == WEFT_EINVAL && strstr(err.msg, bad[i].field), "case %zu: %s", i, err.msg);
    }
    /* Edges that are fine: top_p 1, min_p 0 and 1, logprobs 0 and 20, temperature 0. */
    p.top_p = 1.0;
    p.min_p = 1.0;
    p.logprobs = 20;
    p.temperature = 0;
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_OK);
    p.logprobs = 0;
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_OK);

    weft_logit_bias lb[3] = {{0, 1.0}, {9, -2.0}, {10, 1.0}};
    weft_sampling_defaults(&p);
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_OK);
    p.n_logit_bias = 3; /* id 10 is past a vocabulary of 10 */
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_ERANGE);
    CHECK(strstr(err.msg, "logit_bias") && strstr(err.msg, "10"));
    lb[2] = (weft_logit_bias){-1, 1.0};
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_ERANGE);
    lb[2] = (weft_logit_bias){3, NAN};
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_EINVAL);
    lb[2] = (weft_logit_bias){9, 1.0}; /* duplicate id */
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_EINVAL);
    CHECK(strstr(err.msg, "twice") != NULL);
    p.logit_bias = NULL;
    CHECK_EQ_INT(weft_sampling_validate(&p, 10, &err), WEFT_EINVAL);
    /* A long list (bitmap path) with a duplicate at the end, and without. */
    weft_logit_bias *many = malloc(200 * sizeof *many);
    for (int i = 0; i < 200; i++) many[i] = (weft_logit_bias){i * 3, 0.5};
    p.logit_bias = many;
    p.n_logit_bias = 200;
    CHECK_EQ_INT(weft_sampling_validate(&p, 1000, &err), WEFT_OK);
    many[199].id = 3;
    CHECK_EQ_INT(weft_sampling_validate(&p, 1000, &err), WEFT_EINVAL);
    CHECK(strstr(err.msg, "twice") != NULL);
    free(many);
    CHECK_EQ_INT(weft_sampling_validate(NULL, 10, &err), WEFT_EINVAL);
}

static void test_seeds(void) {
    char sha[13];
    /* token_sha of no tokens is SHA-256 of "" = e3b0c44298fc1c14... (the well-known empty digest). */
    weft_token_sha(NULL, 0, sha);
    CHECK_STR(sha, "e3b0c44298fc");
    /* "1,2,3": hashlib.sha256(b"1,2,3") = 8a6ae1512200... (reference token_sha([1,2,3])). */
    const int32_t ids[3] = {1, 2, 3};
    weft_token_sha(ids, 3, sha);
    CHECK_STR(sha, "8a6ae1512200");
    /* Negative and extreme ids print like Python str(): reference token_sha([-5, 2147483647, -2147483648])
     * and seed_from_prompt of the same. */
    const int32_t odd[3] = {-5, INT32_MAX, INT32_MIN};
    weft_token_sha(odd, 3, sha);
    CHECK_STR(sha, "a125c4e87f59");
    CHECK(weft_seed_from_prompt(odd, 3, "0") == 5770019659449640461ULL);
    /* Salt: reference seed_from_prompt([]) = 6024232415158801135 (NULL salt = "0"), seed_from_prompt([],
     * "abc") = 963880638791158615, seed_from_prompt([1,2,3], "x"*300) = 4000365365701075576. */
    CHECK(weft_seed_from_prompt(NULL, 0, NULL) == 6024232415158801135ULL);
    CHECK(weft_seed_from_prompt(NULL, 0, "0") == 6024232415158801135ULL);
    CHECK(weft_seed_from_prompt(NULL, 0, "abc") == 963880638791158615ULL);
    char salt[301];
    memset(salt, 'x', 300);
    salt[300] = '\0';
    CHECK(weft_seed_from_prompt(ids, 3, salt) == 4000365365701075576ULL);
    /* A long prompt crosses the 4 KiB text buffer many times: reference seed_from_prompt(list(range(10000)))
     * = 5132638880420917123 and token_sha = 1899ec16689e. */
    int32_t *seq = malloc(10000 * sizeof *seq);
    for (int i = 0; i < 10000; i++) seq[i] = i;
    CHECK(weft_seed_from_prompt(seq, 10000, "0") == 5132638880420917123ULL);
    weft_token_sha(seq, 10000, sha);
    CHECK_STR(sha, "1899ec16689e");
    uint8_t md[32];
    weft_err err;
    CHECK_EQ_INT(weft_sha256_ids(seq, 3, NULL, md, &err), WEFT_OK);
    CHECK(md[0] == 0xc0 && md[1] == 0xbe); /* hashlib.sha256(b"0,1,2") starts c0be */
    CHECK_EQ_INT(weft_sha256_ids(NULL, 2, NULL, md, &err), WEFT_EINVAL);
    free(seq);
    /* The seed is masked to 63 bits. */
    CHECK((weft_seed_from_prompt(ids, 3, "7") >> 63) == 0);
}

/* log-softmax computed directly in long double, as the check for weft_logprobs_fill. */
static long double direct_logprob(const float *z, int64_t V, int64_t i) {
    if (V < 1) return NAN;
    long double m = -INFINITY;
    for (int64_t j = 0; j < V; j++)
        if (z[j] > m) m = z[j];
    long double sum = expl((long double)z[0] - m);
    for (int64_t j = 1; j < V; j++) sum += expl((long double)z[j] - m);
    return (long double)z[i] - m - logl(sum);
}

static void test_logprobs(void) {
    enum { V = 1000 };
    float *z = malloc(V * sizeof *z);
    uint64_t r = 12345;
    for (int i = 0; i < V; i++) {
        r = weft_mix(r + 1);
        z[i] = (float)((double)(r >> 11) * 0x1p-53 * 20.0 - 10.0);
    }
    z[17] = z[400] = z[999] = 12.5f; /* a three-way tie at the top */
    z[3] = 11.0f;
    weft_logprobs lp;
    weft_logprobs_fill(z, V, 3, 5, &lp);
    CHECK_EQ_INT(lp.token, 3);
    CHECK_EQ_INT(lp.n_top, 5);
    CHECK(fabsl(lp.logprob - direct_logprob(z, V, 3)) < 1e-6L);
    /* The three tied ids by id, then id 3, then the next best. */
    CHECK(lp.top_ids[0] == 17 && lp.top_ids[1] == 400 && lp.top_ids[2] == 999 && lp.top_ids[3] == 3);
    CHECK(lp.top_logprobs[0] == lp.top_logprobs[1] && lp.top_logprobs[1] == lp.top_logprobs[2]);
    int next = -1;
    for (int i = 0; i < V; i++)
        if (z[i] < 11.0f && (next < 0 || z[i] > z[next])) next = i;
    CHECK_EQ_INT(lp.top_ids[4], next);
    for (int k = 0; k < 5; k++)
        CHECK(fabsl(lp.top_logprobs[k] - direct_logprob(z, V, lp.top_ids[k])) < 1e-6L);
    /* Every id against the direct log-softmax, and the probabilities sum to 1. */
    double psum = 0;
    long double m = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
        if (z[j] > m) m = z[j];
    for (int j = 0; j < V; j++) sum += expl((long double)z[j] - m);
    for (int i = 0; i < V; i++) {
        weft_logprobs one;
        weft_logprobs_fill(z, V, i, 0, &one);
        long double want = (long double)z[i] - m - logl(sum);
        CHECK_MSG(fabsl(one.logprob - want) <= 1e-6L * (fabsl(want) > 1 ? fabsl(want) : 1), "id %d", i);
        psum += exp((double)one.logprob);
    }
    CHECK(fabs(psum - 1.0) < 1e-5);
    /* n_top is clamped to 20 and to the vocabulary. */
    weft_logprobs_fill(z, V, 0, 50, &lp);
    CHECK_EQ_INT(lp.n_top, 20);
    weft_logprobs_fill(z, 4, 0, 20, &lp);
    CHECK_EQ_INT(lp.n_top, 4);
    weft_logprobs_fill(z, V, 0, -1, &lp);
    CHECK_EQ_INT(lp.n_top, 0);

    /* Through weft_sample: logprobs of the raw row (before bias), for the drawn token. */
    weft_sampler *s = weft_sampler_new(V);
    weft_sampling p;
    weft_sampling_defaults(&p);
    p.logprobs = 3;
    weft_logit_bias b = {5, 100.0};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    p.temperature = 0;
    int32_t t = weft_sample(s, z, &p, NULL, 0, 0, &lp);
    CHECK_EQ_INT(t, 5);
    CHECK_EQ_INT(lp.token, 5);
    CHECK(fabsl(lp.logprob - direct_logprob(z, V, 5)) < 1e-6L);
    CHECK(lp.n_top == 3 && lp.top_ids[0] == 17);
    weft_sampler_free(s);
    free(z);
}

/* The same draw whatever the sampler did before: sample a row, then other rows with other settings and
 * penalties (which dirty and clean the count scratch), then the first row again, and in a fresh sampler. */
static void test_scratch_reuse(void) {
    enum { V = 5000 };
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    uint64_t r = 99;
    for (int i = 0; i < V; i++) {
        r = weft_mix(r + 1);
        a[i] = (float)((double)(r >> 11) * 0x1p-53 * 8.0);
        b[i] = (float)((double)(r & 0xffff) / 4096.0);
    }
    int32_t seq[64];
    for (int i = 0; i < 64; i++) seq[i] = (int32_t)((i * 37) % 50);
    weft_sampling pa;
    weft_sampling_defaults(&pa);
    pa.seed = 77;
    pa.top_p = 0.95;
    pa.frequency_penalty = 0.5;
    pa.repetition_penalty = 1.3;
    weft_sampler *s = weft_sampler_new(V), *fresh = weft_sampler_new(V);
    int32_t first[8];
    for (int pos = 40; pos < 48; pos++) first[pos - 40] = weft_sample(s, a, &pa, seq, pos, 20, NULL);
    for (int k = 0; k < 30; k++) {
        weft_sampling pb;
        weft_sampling_defaults(&pb);
        pb.seed = (uint64_t)k;
        pb.top_k = k % 3 ? 40 : 0;
        pb.min_p = k % 2 ? 0.05 : 0.0;
        pb.presence_penalty = 0.7;
        pb.repetition_penalty = k % 4 ? 1.0 : 0.8;
        (void)weft_sample(s, b, &pb, seq, 10 + k, 5, NULL);
    }
    for (int pos = 40; pos < 48; pos++) {
        int32_t again = weft_sample(s, a, &pa, seq, pos, 20, NULL);
        int32_t other = weft_sample(fresh, a, &pa, seq, pos, 20, NULL);
        int32_t naive = test_naive_draw(a, V, &pa, seq, 20, seq + 20, (size_t)pos - 20, pos);
        CHECK(again == first[pos - 40] && other == again && naive == again);
    }
    weft_sampler_free(s);
    weft_sampler_free(fresh);
    free(a);
    free(b);
}

int main(void) {
    test_primitives();
    test_filters();
    test_top_p_tail();
    test_draw();
    test_adjustments();
    test_settings();
    test_seeds();
    test_logprobs();
    test_scratch_reuse();
    return check_report("test_sampler_unit");
}
