/* Fixture helpers for the qwen3_5 tests (see test_qwen3_5_util.h). */
#include "test_qwen3_5_util.h"

#include "weft/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool q35f_load(const char *name, q35_fixture *f, char *msg, size_t cap) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "tests/data/fixtures/%s", name);
    weft_err err = {0};
    f->ts = weft_tensor_set_new();
    weft_checkpoint_info info;
    if (weft_config_load_dir(dir, &f->cfg, &err) ||
        weft_safetensors_load_checkpoint(dir, f->ts, &info, &err)) {
        snprintf(msg, cap, "%s: %s", dir, err.msg);
        return false;
    }
    f->mlx = info.is_mlx;
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    json_t *gj = json_load_file(path, 0, &je);
    if (!gj) {
        snprintf(msg, cap, "%s: %s", path, je.text);
        return false;
    }
    json_t *p = json_object_get(gj, "prompt_ids"), *gr = json_object_get(gj, "greedy_ids");
    f->n_prompt = (int)json_array_size(p);
    f->n_greedy = (int)json_array_size(gr);
    f->T = f->n_prompt + f->n_greedy;
    if (f->T > 64 || f->T < 2) {
        json_decref(gj);
        snprintf(msg, cap, "%s: %d ids (2..64 expected)", path, f->T);
        return false;
    }
    for (int i = 0; i < f->n_prompt; i++) f->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; i < f->n_greedy; i++)
        f->ids[f->n_prompt + i] = (int32_t)json_integer_value(json_array_get(gr, i));
    json_decref(gj);
    size_t n = (size_t)f->T * (size_t)f->cfg.vocab_size;
    f->ref = malloc(n * sizeof(float));
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    FILE *lf = fopen(path, "rb");
    if (!f->ref || !lf) {
        if (lf) fclose(lf);
        snprintf(msg, cap, "%s: cannot read", path);
        return false;
    }
    size_t got = fread(f->ref, sizeof(float), n, lf);
    fclose(lf);
    if (got != n) {
        snprintf(msg, cap, "%s: %zu of %zu floats", path, got, n);
        return false;
    }
    return true;
}

void q35f_free(q35_fixture *f) {
    weft_tensor_set_free(f->ts);
    free(f->ref);
    f->ts = NULL;
    f->ref = NULL;
}

weft_status q35f_run(const weft_family_model *fm, weft_pool *pool, void **states, int slot,
                     const int32_t *ids, int a, int b, float *out, weft_err *err) {
    weft_row rows[64];
    int outr[64];
    if (b - a > 64) return weft_err_set(err, WEFT_EINVAL, "q35f_run: more than 64 rows");
    for (int r = a; r < b; r++) {
        rows[r - a] = (weft_row){slot, r, ids[r]};
        outr[r - a] = r - a;
    }
    return fm->ops->forward(fm->self, pool, states, rows, b - a, outr, b - a, out, err);
}

void *q35f_live(const weft_family_model *fm, const void *state, int len, size_t *bytes) {
    *bytes = fm->ops->snapshot_bytes(fm->self, len);
    void *buf = malloc(*bytes ? *bytes : 1);
    weft_err err = {0};
    if (buf && fm->ops->snapshot_save(fm->self, state, len, buf, &err) != WEFT_OK) {
        fprintf(stderr, "snapshot_save: %s\n", err.msg);
        free(buf);
        return NULL;
    }
    return buf;
}
