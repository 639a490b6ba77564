/* ggml block decoders against the PyPI gguf package: tests/data/gguf/dq_<TYPE>.bin holds quantized blocks
 * followed by gguf.quants.dequantize's float32 values (tools/gen_gguf_vectors.py). Every float must match bit
 * for bit, decoded whole, block by block, and through weft_tensor_dequant_row. */
#include "check.h"
#include "weft/tensor.h"

#include <stdint.h>
#include <stdlib.h>

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int count_mismatches(const float *got, const float *want, int64_t n, int64_t *first) {
    int bad = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0) {
            if (*first < 0) *first = i;
            bad++;
        }
    return bad;
}

static void check_type(weft_dtype t) {
    const weft_dtype_info *info = weft_dtype_get(t);
    char path[256];
    snprintf(path, sizeof path, TEST_DATA "gguf/dq_%s.bin", info->name);
    size_t len = 0;
    uint8_t *buf = slurp(path, &len);
    CHECK_MSG(buf != NULL, "cannot read %s", path);
    if (!buf) return;
    size_t per_block = (size_t)info->block_bytes + 4 * (size_t)info->block;
    CHECK_MSG(len % per_block == 0 && len > 0, "%s: size %zu", path, len);
    int64_t nblocks = (int64_t)(len / per_block), n = nblocks * info->block;
    const uint8_t *q = buf;
    float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    memcpy(want, buf + (size_t)nblocks * (size_t)info->block_bytes, (size_t)n * 4);

    /* the whole run at once */
    weft_ggml_dequant(t, q, got, n);
    int64_t first;
    int bad = count_mismatches(got, want, n, &first);
    CHECK_MSG(bad == 0, "%s: %d of %lld values differ (first %lld: %.9g vs %.9g)", info->name, bad,
              (long long)n, (long long)first, first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);

    /* block by block from an unaligned copy (decoders must not assume alignment) */
    uint8_t *odd = malloc((size_t)info->block_bytes + 1);
    memset(got, 0xff, (size_t)n * 4);
    for (int64_t b = 0; b < nblocks; b++) {
        memcpy(odd + 1, q + b * info->block_bytes, (size_t)info->block_bytes);
        weft_ggml_dequant(t, odd + 1, got + b * info->block, info->block);
    }
    bad = count_mismatches(got, want, n, &first);
    CHECK_MSG(bad == 0, "%s (per block, unaligned): %d values differ", info->name, bad);

    /* as a tensor of rows of two blocks (when the count allows) through the generic row decoder */
    if (nblocks % 2 == 0) {
        weft_tensor tt = {.name = "t",
                          .dtype = t,
                          .ndim = 2,
                          .shape = {nblocks / 2, 2 * info->block},
                          .data = q,
                          .nbytes = (size_t)nblocks * (size_t)info->block_bytes};
        memset(got, 0xff, (size_t)n * 4);
        for (int64_t r = 0; r < nblocks / 2; r++) {
            weft_err err = {0};
            CHECK_EQ_INT(weft_tensor_dequant_row(&tt, r, got + r * 2 * info->block, &err), WEFT_OK);
        }
        bad = count_mismatches(got, want, n, &first);
        CHECK_MSG(bad == 0, "%s (rows): %d values differ", info->name, bad);
    }
    fprintf(stderr, "  %s: %lld blocks, %lld values bit-identical to gguf\n", info->name, (long long)nblocks,
            (long long)n);
    free(odd);
    free(want);
    free(got);
    free(buf);
}

int main(void) {
    static const weft_dtype types[] = {WEFT_DT_Q4_0, WEFT_DT_Q4_1, WEFT_DT_Q5_0, WEFT_DT_Q5_1, WEFT_DT_Q8_0,
                                       WEFT_DT_Q2_K, WEFT_DT_Q3_K, WEFT_DT_Q4_K, WEFT_DT_Q5_K, WEFT_DT_Q6_K};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) check_type(types[k]);
    return check_report("test_gguf_quants");
}
