/* Helpers shared by the safetensors/MLX tests: temp directories, a tiny safetensors writer, keys.json. */
#ifndef WEFT_TEST_SAFETENSORS_UTIL_H
#define WEFT_TEST_SAFETENSORS_UTIL_H

#include "check.h"
#include "weft/safetensors.h"

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fixture directories copied from ../shared/fixtures (see tests/data/fixtures). */
static const char *const ST_FIXTURES[] = {
    "llama",      "llama-mlx-q4g64",      "qwen3",          "qwen3-mlx-q4g64",
    "qwen3_5",    "qwen3_5-mlx-q4g64",    "qwen3_5_moe",    "qwen3_5_moe-mlx-q4g64",
    "nemotron_h", "nemotron_h-mlx-q4g64", "nemotron_h_moe", "nemotron_h_moe-mlx-q4g64",
};
#define ST_N_FIXTURES (sizeof ST_FIXTURES / sizeof ST_FIXTURES[0])

static inline void st_fixture_path(char *buf, size_t cap, const char *fixture, const char *file) {
    if (file)
        snprintf(buf, cap, TEST_DATA "fixtures/%s/%s", fixture, file);
    else
        snprintf(buf, cap, TEST_DATA "fixtures/%s", fixture);
}

static int st_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static inline void st_rmtree(const char *dir) {
    nftw(dir, st_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes a safetensors file: u64 header length (hlen_override when non-zero), header text, data. */
static inline void st_write(const char *path, const char *header, const void *data, size_t len,
                            uint64_t hlen_override) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    uint64_t h = hlen_override ? hlen_override : strlen(header);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(h >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

/* Writes a subset of set's tensors (those where (index % nsplit) == part) as a safetensors file with the
 * stored dtypes/shapes and bytes. Only plain dtypes. Returns the number written. */
static inline size_t st_write_subset(const char *path, const weft_tensor_set *set, size_t nsplit, size_t part,
                                     json_t *weight_map, const char *shard_name) {
    json_t *hdr = json_object();
    size_t n = weft_tensor_set_count(set), off = 0, cnt = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % nsplit != part) continue;
        const weft_tensor *t = weft_tensor_set_at(set, i);
        json_t *sh = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer(t->shape[d]));
        json_object_set_new(hdr, t->name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", weft_dtype_get(t->dtype)->name, "shape",
                                      sh, "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes)));
        if (weight_map) json_object_set_new(weight_map, t->name, json_string(shard_name));
        off += t->nbytes;
        cnt++;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    uint8_t *data = malloc(off ? off : 1);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % nsplit != part) continue;
        const weft_tensor *t = weft_tensor_set_at(set, i);
        memcpy(data + off, t->data, t->nbytes);
        off += t->nbytes;
    }
    st_write(path, text, data, off, 0);
    free(data);
    free(text);
    json_decref(hdr);
    return cnt;
}

#endif
