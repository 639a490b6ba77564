/* The K-block walks of the CUDA 4-bit matmuls (src/backend/cuda/slot_walk.h) against their definition: slot
 * s = the blocks s, s + KW, s + 2·KW, ... < nblk in ascending order, slots added in slot order. Checked on
 * the CPU for every nblk up to 600, KW 4 and 8 (weft_cu_q4_kw), every slots-per-block SPC of the
 * cluster-split GEMM and every rank: each block visited once, each slot's blocks in order, slot ends on the
 * last block, empty slots only at the end of a block's walk, and the all-slots walk equal to weft_slot_block.
 */
#include "check.h"

#include "backend/cuda/slot_walk.h"

#include <stdbool.h>
#include <stdlib.h>

/* The definition: block k of slot s (or -1 past its end). */
static int def_block(int s, int k, int nblk, int KW) {
    const int b = s + k * KW;
    return b < nblk ? b : -1;
}
static int def_len(int s, int nblk, int KW) {
    return s < nblk ? (nblk - s + KW - 1) / KW : 0;
}

/* Walks the SPC slots of rank r and checks them; marks the blocks seen in seen[]. */
static void check_rank(int r, int C, int KW, int nblk, int SPC, int *seen) {
    const weft_slot_walk w = weft_slot_walk_make(r, C, KW, nblk, SPC);
    int want_n = 0;
    for (int j = 0; j < SPC; j++) want_n += def_len(r + C * j, nblk, KW);
    CHECK_MSG(w.n == want_n, "nblk %d KW %d SPC %d r %d: %d steps, want %d", nblk, KW, SPC, r, w.n, want_n);
    bool tail_empty = false; /* once a local slot is empty, every later one is */
    for (int j = 0; j < SPC; j++) {
        const int s = r + C * j, len = weft_slot_walk_len(&w, j);
        CHECK_MSG(len == def_len(s, nblk, KW), "nblk %d KW %d slot %d: length %d", nblk, KW, s, len);
        if (tail_empty)
            CHECK_MSG(len == 0, "nblk %d KW %d SPC %d r %d: empty slot before a full one", nblk, KW, SPC, r);
        if (len == 0) tail_empty = true;
    }
    int j = 0, k = 0;
    for (int i = 0; i < w.n; i++) {
        const int s = r + C * j, kb = weft_slot_walk_kb(&w, j, k), len = weft_slot_walk_len(&w, j);
        const bool slot_end = k == len - 1;
        CHECK_MSG(j < SPC && k < len, "nblk %d KW %d SPC %d r %d: cursor (%d, %d) out of its slot", nblk, KW,
                  SPC, r, j, k);
        CHECK_MSG(kb == def_block(s, k, nblk, KW), "nblk %d KW %d slot %d: block %d is %d", nblk, KW, s, k,
                  kb);
        if (kb >= 0 && kb < nblk) seen[kb]++;
        CHECK(slot_end == (def_block(s, k + 1, nblk, KW) < 0));
        weft_slot_walk_next(&w, &j, &k);
    }
}

int main(void) {
    int seen[600];
    for (int KW = 4; KW <= 8; KW += 4)
        for (int nblk = 1; nblk <= 600; nblk++) {
            /* the all-slots walk (one warp or block walks every slot) == weft_slot_block, step by step */
            const weft_slot_walk all = weft_slot_walk_make(0, 1, KW, nblk, KW);
            CHECK_EQ_INT(all.n, nblk);
            int j = 0, k = 0, prev_slot = -1, ends = 0;
            for (int i = 0; i < nblk; i++) {
                bool end = false;
                const int kb = weft_slot_block(i, nblk, KW, &end);
                const bool wend = k == weft_slot_walk_len(&all, j) - 1;
                CHECK_MSG(kb == weft_slot_walk_kb(&all, j, k) && end == wend,
                          "nblk %d KW %d step %d: weft_slot_block %d/%d, cursor %d/%d", nblk, KW, i, kb, end,
                          weft_slot_walk_kb(&all, j, k), wend);
                CHECK(kb % KW >= prev_slot); /* slots in order */
                prev_slot = kb % KW;
                ends += end;
                weft_slot_walk_next(&all, &j, &k);
            }
            CHECK_EQ_INT(ends, nblk < KW ? nblk : KW);
            /* the cluster split: C = KW / SPC blocks, each its SPC slots; together every block exactly once
             */
            for (int SPC = 1; SPC <= 4 && SPC <= KW; SPC *= 2) {
                const int C = KW / SPC;
                memset(seen, 0, sizeof seen);
                for (int r = 0; r < C; r++) check_rank(r, C, KW, nblk, SPC, seen);
                bool once = true;
                for (int b = 0; b < nblk; b++) once &= seen[b] == 1;
                CHECK_MSG(once, "nblk %d KW %d SPC %d: a block not visited exactly once", nblk, KW, SPC);
            }
        }
    return check_report("test_slot_walk");
}
