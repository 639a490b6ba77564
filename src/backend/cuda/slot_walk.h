/* The order in which the CUDA backend's 4-bit matmuls walk the K blocks of one output (part of the defined
 * arithmetic, mma_q4.cu's header): the nblk K blocks are dealt to KW slots — slot s = the blocks s, s + KW,
 * s + 2·KW, ... in ascending order, so slots s < nblk % KW hold nblk / KW + 1 blocks and the others nblk / KW
 * — each slot's sum starts from 0, and the slot sums are added in slot order. Kernels that give each slot to
 * its own warp (mma_q4x.cu) need nothing here; kernels that walk several slots in one warp or block
 * (gemm_q4.cu, gemm_q4w.cu) use these cursors. Plain C usable from CUDA (WEFT_HD);
 * tests/unit/test_slot_walk.c checks the walks against the definition on the CPU. */
#ifndef WEFT_SLOT_WALK_H
#define WEFT_SLOT_WALK_H

#include <stdbool.h>

#ifdef __CUDACC__
#define WEFT_SW_HD __host__ __device__ __forceinline__
#else
#define WEFT_SW_HD static inline
#endif

/* The i-th K block (of nblk) with all KW slots walked in slot order; *slot_end: it is its slot's last block.
 * i in [0, nblk), KW >= 1. */
WEFT_SW_HD int weft_slot_block(int i, int nblk, int KW, bool *slot_end) {
    const int nq = nblk / KW, nr = nblk % KW;
    int s, k, len;
    if (i < nr * (nq + 1)) {
        s = i / (nq + 1), k = i % (nq + 1), len = nq + 1;
    } else {
        const int j = i - nr * (nq + 1);
        s = nr + j / nq, k = j % nq, len = nq;
    }
    *slot_end = k == len - 1;
    return s + k * KW;
}

/* The SPC slots r, r + C, r + 2·C, ... (C = KW / SPC, r < C) that block r of a cluster walks, slot after slot
 * (gemm_q4.cu): a cursor (j, k) is K block k of local slot j (slot r + C·j), advanced one step at a time
 * without a division. Local slots of nq + 1 blocks come first (A of them); n = the steps in all. With r = 0,
 * C = 1, SPC = KW it is the walk of weft_slot_block. */
typedef struct weft_slot_walk {
    int r, C, KW, nq, A, n;
} weft_slot_walk;

WEFT_SW_HD weft_slot_walk weft_slot_walk_make(int r, int C, int KW, int nblk, int SPC) {
    weft_slot_walk w;
    const int nr = nblk % KW;
    w.r = r, w.C = C, w.KW = KW, w.nq = nblk / KW;
    const int a = (nr - r + C - 1) / C;
    w.A = nr > r ? (a < SPC ? a : SPC) : 0;
    w.n = w.A * (w.nq + 1) + (SPC - w.A) * w.nq;
    return w;
}
/* Blocks in local slot j. */
WEFT_SW_HD int weft_slot_walk_len(const weft_slot_walk *w, int j) {
    return j < w->A ? w->nq + 1 : w->nq;
}
/* The K block at cursor (j, k). */
WEFT_SW_HD int weft_slot_walk_kb(const weft_slot_walk *w, int j, int k) {
    return w->r + w->C * j + k * w->KW;
}
/* The cursor one step on. */
WEFT_SW_HD void weft_slot_walk_next(const weft_slot_walk *w, int *j, int *k) {
    if (++*k == weft_slot_walk_len(w, *j)) ++*j, *k = 0;
}

#endif
