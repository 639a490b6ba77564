/* Every vector of tests/data/sampler/sampler_vectors.json (a copy of ../shared/fixtures/sampler_vectors.json,
 * written by ../shared/tools/sampler_reference.py) reproduced bit for bit: splitmix64 mix, keys, uniforms,
 * Gumbel noise, prompt-derived seeds, token_sha and all 24 full draws (through weft_sample and through the
 * literal full-sort port in test_sampler_naive.c); then 40 more reference draws over larger vocabularies. */
#include "weft/sampler.h"

#include "check.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int32_t test_naive_draw(const float *logits, int64_t vocab, const weft_sampling *p, const int32_t *prompt,
                        size_t n_prompt, const int32_t *gen, size_t n_gen, int64_t pos);

static uint64_t u64_of(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strtoull(s, NULL, 10) : 0;
}

/* Python repr() of a float round-trips, and strtod is correctly rounded: the exact double comes back. */
static double f64_of(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strtod(s, NULL) : NAN;
}

static size_t ids_of(json_t *arr, int32_t *ids, size_t cap) {
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n && i < cap; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

static void test_primitives(json_t *root) {
    json_t *e;
    size_t i;
    size_t n_mix = 0, n_key = 0, n_uni = 0;
    json_array_foreach(json_object_get(root, "mix"), i, e) {
        CHECK_MSG(weft_mix(u64_of(e, "x")) == u64_of(e, "mix"), "mix vector %zu", i);
        n_mix++;
    }
    json_array_foreach(json_object_get(root, "key"), i, e) {
        uint64_t k = weft_key(u64_of(e, "seed"), (int64_t)json_integer_value(json_object_get(e, "pos")),
                              (int32_t)json_integer_value(json_object_get(e, "id")));
        CHECK_MSG(k == u64_of(e, "key"), "key vector %zu: %llu", i, (unsigned long long)k);
        n_key++;
    }
    json_array_foreach(json_object_get(root, "uniform"), i, e) {
        double u = weft_uniform(u64_of(e, "key"));
        double g = weft_gumbel(u);
        CHECK_MSG(memcmp(&u, &(double){f64_of(e, "u")}, 8) == 0, "uniform vector %zu: %.17g", i, u);
        CHECK_MSG(memcmp(&g, &(double){f64_of(e, "gumbel")}, 8) == 0, "gumbel vector %zu: %.17g", i, g);
        n_uni++;
    }
    CHECK_EQ_INT(n_mix, 5);
    CHECK_EQ_INT(n_key, 4);
    CHECK_EQ_INT(n_uni, 4);
}

static void test_hashes(json_t *root) {
    json_t *e;
    size_t i, n_seed = 0, n_sha = 0;
    int32_t ids[64];
    json_array_foreach(json_object_get(root, "seed_from_prompt"), i, e) {
        size_t n = ids_of(json_object_get(e, "ids"), ids, 64);
        const char *salt = json_string_value(json_object_get(e, "salt"));
        uint64_t seed = weft_seed_from_prompt(ids, n, salt);
        CHECK_MSG(seed == u64_of(e, "seed"), "seed_from_prompt vector %zu: %llu", i,
                  (unsigned long long)seed);
        n_seed++;
    }
    json_array_foreach(json_object_get(root, "token_sha"), i, e) {
        size_t n = ids_of(json_object_get(e, "ids"), ids, 64);
        char sha[13];
        weft_token_sha(ids, n, sha);
        CHECK_STR(sha, json_string_value(json_object_get(e, "token_sha")));
        n_sha++;
    }
    CHECK_EQ_INT(n_seed, 3);
    CHECK_EQ_INT(n_sha, 3);
}

/* One draw vector: settings from e, the row in logits[V]; checks weft_sample and the naive port against
 * e["token"]. Returns 1 when the vector was usable. */
static int check_draw(json_t *e, const float *logits, int64_t V, weft_sampler *s, const char *what,
                      size_t i) {
    weft_sampling p;
    weft_sampling_defaults(&p);
    p.seed = u64_of(e, "seed");
    p.temperature = json_number_value(json_object_get(e, "temperature"));
    p.top_k = (int)json_integer_value(json_object_get(e, "top_k"));
    p.top_p = json_number_value(json_object_get(e, "top_p"));
    p.min_p = json_number_value(json_object_get(e, "min_p"));
    int64_t pos = json_integer_value(json_object_get(e, "pos"));
    weft_logit_bias bias[8];
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(e, "logit_bias"), k, v) {
        if (p.n_logit_bias < 8) bias[p.n_logit_bias++] = (weft_logit_bias){atoi(k), json_number_value(v)};
    }
    p.logit_bias = bias;
    if (json_object_get(e, "presence"))
        p.presence_penalty = json_number_value(json_object_get(e, "presence"));
    if (json_object_get(e, "frequency"))
        p.frequency_penalty = json_number_value(json_object_get(e, "frequency"));
    if (json_object_get(e, "repetition"))
        p.repetition_penalty = json_number_value(json_object_get(e, "repetition"));
    weft_err err;
    CHECK_MSG(weft_sampling_validate(&p, V, &err) == WEFT_OK, "%s %zu settings: %s", what, i, err.msg);

    /* The vector gives prompt and generated lists plus a key position; weft_sample reads them from one
     * sequence of length pos. Repeating the last prompt id to fill the gap changes nothing: repetition
     * works on the set of prompt ids and frequency/presence only count generated ids. */
    int32_t prompt[16], gen[16];
    size_t n_prompt = ids_of(json_object_get(e, "prompt"), prompt, 16);
    size_t n_gen = ids_of(json_object_get(e, "generated"), gen, 16);
    int32_t *seq = NULL;
    int64_t seq_prompt = pos;
    if (n_prompt + n_gen > 0) {
        CHECK(n_prompt <= 16 && n_gen <= 16 && (int64_t)(n_prompt + n_gen) <= pos && n_prompt > 0);
        if (!(n_prompt <= 16 && n_gen <= 16 && (int64_t)(n_prompt + n_gen) <= pos && n_prompt > 0)) return 0;
        seq = malloc((size_t)pos * sizeof *seq);
        seq_prompt = pos - (int64_t)n_gen;
        for (int64_t j = 0; j < seq_prompt; j++)
            seq[j] = prompt[(size_t)j < n_prompt ? (size_t)j : n_prompt - 1];
        for (size_t j = 0; j < n_gen; j++) seq[seq_prompt + (int64_t)j] = gen[j];
    }
    int64_t want = json_integer_value(json_object_get(e, "token"));
    int32_t got = weft_sample(s, logits, &p, seq, pos, seq_prompt, NULL);
    CHECK_MSG(got == want, "%s %zu: weft_sample %d, reference %lld (%s)", what, i, got, (long long)want,
              weft_sampler_error(s)->msg);
    int32_t naive = test_naive_draw(logits, V, &p, prompt, n_prompt, gen, n_gen, pos);
    CHECK_MSG(naive == want, "%s %zu: naive port %d, reference %lld", what, i, naive, (long long)want);
    free(seq);
    return 1;
}

static void test_draws(json_t *root) {
    json_t *e;
    size_t i, n_draws = 0;
    weft_sampler *s = weft_sampler_new(64);
    CHECK(s != NULL);
    if (!s) return;
    json_array_foreach(json_object_get(root, "draws"), i, e) {
        json_t *jl = json_object_get(e, "logits_f32");
        size_t V = json_array_size(jl);
        CHECK_EQ_INT(V, 64);
        if (V != 64) continue;
        float logits[64];
        /* Python wrote each fp32 value as a double repr; jansson's strtod gives it back exactly. */
        for (size_t j = 0; j < V; j++) logits[j] = (float)json_number_value(json_array_get(jl, j));
        n_draws += (size_t)check_draw(e, logits, 64, s, "draw", i);
    }
    CHECK_EQ_INT(n_draws, 24);
    weft_sampler_free(s);
}

/* The rows of tools/sampler_extra_vectors.py (gen_row): integer splitmix64 and exact fp64 steps, then fp32.
 */
static void gen_row(int kind, uint64_t row_seed, int64_t V, float *z) {
    for (int64_t i = 0; i < V; i++) {
        uint64_t x = weft_mix(row_seed + (uint64_t)i);
        double v;
        if (kind == 0) {
            v = (double)((int64_t)((x >> 40) % 41) - 20) * 0.25;
            if (v == 0 && (x & 1)) v = -0.0;
        } else {
            v = ((double)(x >> 11) * 0x1p-53 * 2.0 - 1.0) * 6.0;
            if (kind == 2 && (x >> 58) == 0) v += 20.0;
        }
        z[i] = (float)v;
    }
}

/* tests/data/sampler/extra_vectors.json: 40 reference draws at vocabularies 1000, 5000 and 151,936 (ties,
 * signed zeros, peaked rows, penalties), written by tools/sampler_extra_vectors.py. */
static void test_extra_draws(void) {
    json_error_t jerr;
    json_t *root = json_load_file(TEST_DATA "sampler/extra_vectors.json", 0, &jerr);
    CHECK_MSG(root != NULL, "cannot read %ssampler/extra_vectors.json: %s", TEST_DATA, jerr.text);
    if (!root) return;
    json_t *e;
    size_t i, n_draws = 0;
    json_array_foreach(json_object_get(root, "draws"), i, e) {
        int64_t V = json_integer_value(json_object_get(e, "vocab"));
        float *z = malloc((size_t)V * sizeof *z);
        weft_sampler *s = weft_sampler_new(V);
        gen_row((int)json_integer_value(json_object_get(e, "kind")), u64_of(e, "row_seed"), V, z);
        n_draws += (size_t)check_draw(e, z, V, s, "extra draw", i);
        weft_sampler_free(s);
        free(z);
    }
    CHECK_EQ_INT(n_draws, 40);
    json_decref(root);
}

int main(void) {
    json_error_t jerr;
    json_t *root = json_load_file(TEST_DATA "sampler/sampler_vectors.json", 0, &jerr);
    CHECK_MSG(root != NULL, "cannot read %ssampler/sampler_vectors.json: %s", TEST_DATA, jerr.text);
    if (root) {
        test_primitives(root);
        test_hashes(root);
        test_draws(root);
        json_decref(root);
    }
    test_extra_draws();
    return check_report("test_sampler_vectors");
}
