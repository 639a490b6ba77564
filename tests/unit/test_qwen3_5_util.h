/* Helpers shared by the qwen3_5 family tests: fixture loading (tests/data/fixtures/<name>: config.json,
 * model.safetensors, golden.json, logits.f32) and running rows. They report failures through their return
 * values (check.h's counters are per translation unit). */
#ifndef WEFT_TEST_QWEN3_5_UTIL_H
#define WEFT_TEST_QWEN3_5_UTIL_H

#include "weft/families.h"

typedef struct q35_fixture {
    char name[64];
    weft_config cfg;
    weft_tensor_set *ts;
    bool mlx;
    int32_t ids[64]; /* prompt then greedy ids */
    int n_prompt, n_greedy, T;
    float *ref; /* [T, vocab] HF logits */
} q35_fixture;

/* Loads fixture `name`; false (with the reason in msg) when anything is missing or malformed. */
bool q35f_load(const char *name, q35_fixture *f, char *msg, size_t cap);
void q35f_free(q35_fixture *f);

/* Feeds ids[a, b) at positions [a, b) to `slot` in one call; logits of every row into out[(r - a)·V]. */
weft_status q35f_run(const weft_family_model *fm, weft_pool *pool, void **states, int slot,
                     const int32_t *ids, int a, int b, float *out, weft_err *err);

/* The live state of a stream at its length len (snapshot_save): every byte a later forward can read.
 * malloc'd (caller frees); NULL on failure. */
void *q35f_live(const weft_family_model *fm, const void *state, int len, size_t *bytes);

#endif
