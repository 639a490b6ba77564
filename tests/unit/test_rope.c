/* RoPE scaling tables (families-and-formats §1.4) against HF transformers' formulas for llama3, yarn and
 * linear, computed independently in float64 by tools/gen_rope_vectors.py; and rotation of a known vector. */
#include "check.h"
#include "weft/cpu.h"

#include <jansson.h>

static void check_case(json_t *c) {
    const char *type = json_string_value(json_object_get(c, "type"));
    weft_rope cfg = {0};
    cfg.theta = json_real_value(json_object_get(c, "theta"));
    cfg.factor = json_real_value(json_object_get(c, "factor"));
    cfg.partial_rotary_factor = 1.0;
    if (!strcmp(type, "llama3")) {
        cfg.type = WEFT_ROPE_LLAMA3;
        cfg.low_freq_factor = json_real_value(json_object_get(c, "low_freq_factor"));
        cfg.high_freq_factor = json_real_value(json_object_get(c, "high_freq_factor"));
    } else if (!strcmp(type, "yarn")) {
        cfg.type = WEFT_ROPE_YARN;
    } else {
        cfg.type = WEFT_ROPE_LINEAR;
    }
    cfg.original_max_position_embeddings =
        json_integer_value(json_object_get(c, "original_max_position_embeddings"));
    int64_t d = json_integer_value(json_object_get(c, "head_dim"));
    weft_rope_table t;
    weft_err err = {0};
    CHECK_MSG(weft_rope_init(&t, &cfg, d, &err) == WEFT_OK, "%s: %s", type, err.msg);
    json_t *f = json_object_get(c, "inv_freq");
    CHECK_EQ_INT(json_array_size(f), t.rot / 2);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(f); i++) {
        double ref = json_real_value(json_array_get(f, i));
        if (fabs(t.inv_freq[i] - ref) > 2e-6 * fabs(ref)) bad++;
    }
    CHECK_MSG(bad == 0, "%s: %d inverse frequencies differ from HF's formula", type, bad);
    double af = json_real_value(json_object_get(c, "attention_factor"));
    CHECK_MSG(fabs(t.attn_factor - af) < 1e-6, "%s: attention factor %g != %g", type, t.attn_factor, af);
    weft_rope_free(&t);
}

int main(void) {
    json_error_t je;
    json_t *v = json_load_file(TEST_DATA "rope/vectors.json", 0, &je);
    CHECK_MSG(v != NULL, "%s", je.text);
    for (size_t i = 0; v && i < json_array_size(v); i++) check_case(json_array_get(v, i));
    json_decref(v);
    /* rotate-half at position 1, theta 1e4, d 4: pairs (0,2) at f0 = 1, (1,3) at f1 = 0.01 */
    weft_rope cfg = {.type = WEFT_ROPE_DEFAULT, .theta = 10000.0, .partial_rotary_factor = 1.0};
    weft_rope_table t;
    CHECK(weft_rope_init(&t, &cfg, 4, NULL) == WEFT_OK);
    float x[4] = {1, 2, 3, 4};
    weft_rope_apply(&t, x, 1, 4, 1);
    CHECK(fabsf(x[0] - (1 * cosf(1) - 3 * sinf(1))) < 1e-6f &&
          fabsf(x[2] - (3 * cosf(1) + 1 * sinf(1))) < 1e-6f);
    CHECK(fabsf(x[1] - (2 * cosf(0.01f) - 4 * sinf(0.01f))) < 1e-6f);
    weft_rope_free(&t);
    return check_report("test_rope");
}
