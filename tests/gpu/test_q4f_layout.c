/* WEFT_CU_Q4F's host-side layout functions, no GPU needed (run by .ci/run after the CUDA build): the scale
 * packing (weft_cu_q4f_pack_scales, run-wise) must place every value where weft_cu_q4f_sidx — the index every
 * kernel reads (cuda_decode.cuh's q4f_sidx, q4_mma.cuh's Stage::load, the cursors of gemv_q4.cu and
 * gemm_q4.cu) — says, for every shape class weft_cu_q4f_ok takes (SB 1, 2, 4; groups 32, 64, 128; f16 / bf16
 * and f32 scales); and the index must be a permutation of the values. Exits non-zero on any mismatch. */
#include "backend/cuda/cuda_kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    static const int64_t rows_list[] = {16, 48, 256},
                         cols_list[] = {32, 64, 96, 128, 192, 320, 512, 640, 1536, 4096, 4608, 14336};
    static const int groups[] = {32, 64, 128}, sszs[] = {2, 4};
    int shapes = 0, bad = 0;
    for (size_t a = 0; a < sizeof rows_list / sizeof rows_list[0]; a++)
        for (size_t b = 0; b < sizeof cols_list / sizeof cols_list[0]; b++)
            for (size_t c = 0; c < 3; c++)
                for (size_t e = 0; e < 2; e++) {
                    const int64_t rows = rows_list[a], cols = cols_list[b];
                    const int group = groups[c], ssz = sszs[e];
                    if (!weft_cu_q4f_ok(rows, cols, group)) continue;
                    const int64_t ng = cols / group, nv = rows * ng;
                    unsigned char *src = malloc((size_t)(nv * ssz)), *got = malloc((size_t)(nv * ssz));
                    unsigned char *want = malloc((size_t)(nv * ssz)), *seen = calloc((size_t)nv, 1);
                    if (!src || !got || !want || !seen) {
                        fprintf(stderr, "test_q4f_layout: out of memory\n");
                        return 2;
                    }
                    for (int64_t i = 0; i < nv * ssz; i++) src[i] = (unsigned char)(i * 131 + 7);
                    memset(got, 0xee, (size_t)(nv * ssz));
                    weft_cu_q4f_pack_scales(src, rows, cols, group, ssz, got);
                    int perm_ok = 1;
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t g = 0; g < ng; g++) {
                            const int64_t at = weft_cu_q4f_sidx(cols, group, r, g);
                            if (at < 0 || at >= nv || seen[at]++)
                                perm_ok = 0;
                            else
                                memcpy(want + at * ssz, src + (r * ng + g) * ssz, (size_t)ssz);
                        }
                    shapes++;
                    if (!perm_ok || memcmp(got, want, (size_t)(nv * ssz))) {
                        bad++;
                        fprintf(stderr, "FAIL rows %lld cols %lld group %d ssz %d: %s\n", (long long)rows,
                                (long long)cols, group, ssz,
                                perm_ok ? "packing differs from weft_cu_q4f_sidx"
                                        : "index not a permutation");
                    }
                    free(src);
                    free(got);
                    free(want);
                    free(seen);
                }
    printf("test_q4f_layout: %d shapes, %d failed\n", shapes, bad);
    return bad != 0 || shapes == 0;
}
