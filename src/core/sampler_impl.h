/* Internals of weft_sampler shared by sampler.c (object, steps 1-3) and sampler_draw.c (steps 4-8). */
#ifndef WEFT_CORE_SAMPLER_IMPL_H
#define WEFT_CORE_SAMPLER_IMPL_H

#include "weft/sampler.h"

/* Noise-skip table: l0 - l is cut into bins of 1/SKIP_BINS_PER_UNIT; see sampler_draw.c. */
#define WEFT_SKIP_BINS_PER_UNIT 16
#define WEFT_SKIP_BINS          (42 * WEFT_SKIP_BINS_PER_UNIT + 4)

/* The skip table's state: one per thread drawing (the sampler's own, and one per parallel task). */
typedef struct weft_skip_state {
    uint64_t stamp; /* bumps whenever the skip table goes stale (new call or new best) */
    uint64_t skip_stamp[WEFT_SKIP_BINS];
    int64_t skip_max[WEFT_SKIP_BINS];
} weft_skip_state;

/* Candidates below this count are drawn on the calling thread even when a runner is set. */
#define WEFT_SAMPLER_PAR_MIN 16384

struct weft_sampler {
    int64_t vocab;
    float *z;       /* [vocab] the row after bias and penalties (steps 1-2), NaN -> -inf */
    int32_t *count; /* [vocab] generated-token counts; all zero between calls */
    uint8_t *seen;  /* [vocab] repetition marks; all zero between calls */
    uint64_t *cand; /* [vocab] candidates (weft_order_cand) */
    uint64_t *tmp;  /* [vocab] radix scratch; also used as two uint32_t[vocab] halves for the value sort */
    double *p;      /* [vocab] top_p weights exp(l_i - l_0) in sorted order */
    weft_skip_state skip;
    /* weft_sampler_set_parallel: runner, its context, tasks per parallel step (0 = serial), and one skip
     * state per task */
    weft_sampler_run_fn run;
    void *run_ctx;
    int n_tasks;
    weft_skip_state *task_skip;
    uint32_t (*task_hist)[256]; /* [n_tasks][256] bucket counts of the parallel key sort */
    weft_err err;
};

/* Steps 4-8 on s->z (steps 1-2 applied, NaN mapped to -inf, T > 0). best = the first of the sorted order
 * (largest z, lowest id), zb = s->z[best]. Returns the drawn id. Allocates nothing. */
int32_t weft_sampler_draw(weft_sampler *s, const weft_sampling *p, int64_t pos, int32_t best, float zb);

#endif
