/* Tensor sets: lookups stay right through many adds and removes (backward-shift deletion, swap-remove). */
#include "check.h"
#include "weft/tensor.h"

#include <stdlib.h>

int main(void) {
    enum { N = 20000 };
    weft_tensor_set *s = weft_tensor_set_new();
    char name[64];
    weft_err err = {0};
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", i / 100, i % 100);
        weft_tensor t = {.name = name, .dtype = WEFT_DT_F32, .ndim = 1, .shape = {i + 1}};
        CHECK(weft_tensor_set_add(s, &t, &err) == WEFT_OK);
    }
    CHECK(weft_tensor_set_add(s, &(weft_tensor){.name = name, .ndim = 1, .shape = {1}}, &err) ==
          WEFT_EFORMAT);
    /* remove every third, in a scrambled order */
    for (int k = 0; k < N; k++) {
        int i = (int)(((long long)k * 7919) % N);
        if (i % 3) continue;
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", i / 100, i % 100);
        weft_tensor_set_remove(s, name);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", i / 100, i % 100);
        const weft_tensor *t = weft_tensor_set_get(s, name);
        if (i % 3 == 0 ? t != NULL : (!t || t->shape[0] != i + 1)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(weft_tensor_set_count(s), N - (N + 2) / 3);
    size_t seen = 0;
    for (size_t i = 0; i < weft_tensor_set_count(s); i++) seen += weft_tensor_set_at(s, i) != NULL;
    CHECK_EQ_INT(seen, weft_tensor_set_count(s));
    weft_tensor_set_free(s);
    return check_report("test_tensor_set");
}
