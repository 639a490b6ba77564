/* Internal to weft_kernels: the matmul's canonical arithmetic and the per-ISA pieces that implement it.
 *
 * Canonical arithmetic of one output element y = Σ_k w[k]·x[k], k < K (the only one weft computes, on every
 * ISA, for any number of rows and threads):
 *   1. w[k] is the reference decoder's fp32 value (weft_tensor_dequant_row), bit for bit;
 *   2. 16 lanes: acc[k mod 16] = fma(w[k], x[k], acc[k mod 16]) for k = 0, 1, …, K−1 in order, acc = +0 at
 *      the start (a lane with no k left keeps its value);
 *   3. a fixed tree: a8[j] = acc[j] + acc[j+8] (j < 8), a4[j] = a8[j] + a8[j+4], a2[j] = a4[j] + a4[j+2],
 *      y = a2[0] + a2[1].
 * fma is the correctly rounded fused multiply-add (vfmadd on x86, fmaf in the scalar path), so the AVX-512,
 * AVX2 and scalar kernels give the same bits, and the choice of ISA never changes a result. weft_dot is the
 * same formula over two fp32 vectors.
 *
 * Kernels work on decoded fp32 panels: a task decodes up to MM_MR weight rows (a segment of MM_KC columns at
 * a time when K is larger) into a stack buffer, then runs MM_MR × nr register tiles over the input rows. The
 * decode is amortised over all rows of the call. With at most MM_NF input rows (decode steps) the weights are
 * instead decoded in registers and used at once (`fused`). The per-element arithmetic above depends on
 * neither: not on the path, the tiling, the number of rows or the thread. */
#ifndef WEFT_CPU_MM_H
#define WEFT_CPU_MM_H

#include "weft/cpu.h"

#define MM_MR       4    /* weight rows per register tile */
#define MM_NR       6    /* input rows per register tile (at most) */
#define MM_KC       2048 /* columns per decode segment on the few-rows path (a multiple of 256) */
#define MM_OB       32   /* weight rows decoded together for many input rows (an L2-resident block) */
#define MM_KB1      1024 /* K up to which a weight block holds whole rows */
#define MM_KB       512  /* columns per weight block when K > MM_KB1 (a multiple of 256: every block size) */
#define MM_RB       64   /* input rows whose partial sums wait in scratch between column blocks */
#define MM_NF       4    /* input rows up to which the fused (decode in registers) path is used */
#define MM_RB_TILES ((MM_RB + MM_NR - 1) / MM_NR)

/* One ISA's pieces. */
typedef struct weft_mm_isa {
    const char *name;
    /* Decodes columns [k0, k0+kc) of row `row` of W into out (fp32, 64-byte aligned), the reference decoder's
     * values bit for bit. k0 is a multiple of 256 (so of every block and group); 0 < kc <= MM_KC.
     * Returns false for dtypes it has no fast path for (the caller then uses weft_mm_decode_ref). */
    bool (*decode)(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out);
    /* The register tile: for i < MM_MR, r < nr (1..MM_NR), lanes acc[i][r][16] += w[i][k]·x[r·ldx + k] over
     * k < kc, as in the canonical step 2. init: start from zero, else from acc. finish: reduce (step 3) and
     * write y[r·ldy + i] for i < mr, else store the lanes back to acc. */
    void (*tile)(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc, float *acc,
                 bool init, bool finish, float *y, int64_t ldy, int mr);
    /* Few input rows (nr <= MM_NF): rows [o, o+mr) of W decoded in registers and multiplied straight away,
     * y[r·ldy + i] for i < mr, r < nr — the same values and fma order as decode + tile, without the buffer.
     * Returns false (computing nothing) for dtypes it has no such path for. May be NULL. */
    bool (*fused)(const weft_tensor *W, int64_t o, int mr, const float *x, int64_t ldx, int nr, float *y,
                  int64_t ldy);
    float (*dot)(const float *a, const float *b, int64_t n);
} weft_mm_isa;

extern const weft_mm_isa weft_mm_scalar;
#if defined(__x86_64__)
extern const weft_mm_isa weft_mm_avx2;
extern const weft_mm_isa weft_mm_avx512;
#endif

/* The portable decoder (any dtype weft_tensor_dequant_row supports), same contract as weft_mm_isa.decode. */
void weft_mm_decode_ref(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out);

/* Canonical step 3 on 16 lanes. */
static inline float weft_mm_tree16(const float *acc) {
    float a8[8], a4[4];
    for (int j = 0; j < 8; j++) a8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) a4[j] = a8[j] + a8[j + 4];
    return (a4[0] + a4[2]) + (a4[1] + a4[3]);
}

/* Scratch a task uses (within the pool's per-thread minimum): few rows, MM_MR decoded segments and one tile's
 * lanes; many rows, a weight block of MM_OB × MM_KB1, or MM_OB × MM_KB plus the lanes of MM_RB rows. */
#define MM_ACC_FLOATS ((MM_OB / MM_MR) * MM_RB_TILES * MM_MR * MM_NR * 16)
_Static_assert(MM_OB *MM_KB1 <= WEFT_POOL_MIN_SCRATCH_FLOATS, "matmul scratch");
_Static_assert(MM_OB *MM_KB + MM_ACC_FLOATS <= WEFT_POOL_MIN_SCRATCH_FLOATS, "matmul scratch");
_Static_assert(MM_MR *MM_KC + MM_MR * MM_NR * 16 <= WEFT_POOL_MIN_SCRATCH_FLOATS, "matmul scratch");

#endif
