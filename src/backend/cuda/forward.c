/* One forward over a round's segments on the device (llama/qwen3, the same math as src/families/llama.c):
 *
 *   x = E[token];  per layer: xb = RMSNorm(x); q,k,v = xb·W{q,k,v}ᵀ (+ bias); qwen3: per-head RMSNorm of q,
 * k; RoPE(q, k), K/V cache[pos] = k, v; att = Attention(q, cache); x += att·Woᵀ; xb = RMSNorm(x); g =
 * silu(xb·Wgᵀ) ⊙ xb·Wuᵀ; x += g·Wdᵀ;   logits = RMSNorm(x[drawn rows])·W_headᵀ
 *
 * Every kernel is row-invariant (cuda_kernels.h), so a row's logits do not depend on the other rows of the
 * round. Greedy draws without bias, penalties or logprobs are made on the device (weft_cu_argmax) and only
 * their ids come back; every other drawn row's logits come back to pinned host memory and are sampled with
 * weft_sample, the CPU backend's sampler (SPEC §5: exact by construction), rows in parallel on a thread pool
 * (each task takes a free sampler; a draw depends only on its row, so the schedule never changes a draw). */
#include "cuda_model.h"

#include <math.h>

static weft_status check_launch(cudaError_t e, const char *what, weft_err *err) {
    if (e != cudaSuccess) return cu_fail(err, e, what);
    return WEFT_OK;
}

#define LAUNCH(call, what)                                                                                   \
    do {                                                                                                     \
        weft_status st_ = check_launch((call), what, err);                                                   \
        if (st_) return st_;                                                                                 \
    } while (0)

/* Builds the row table; returns rows and drawn rows through n / n_out. */
static weft_status gather_rows(cu_backend *b, const weft_segment *segs, int n_segs, int *n, int *n_out,
                               weft_err *err) {
    int rows = 0, outs = 0, tiles = 0;
    b->max_pos = 0;
    for (int s = 0; s < n_segs; s++) {
        const weft_segment *g = &segs[s];
        if (g->slot < 0 || g->slot >= b->max_slots || !b->kv[g->slot])
            return weft_err_set(err, WEFT_EINVAL, "segment %d: slot %d is not open", s, g->slot);
        if (g->n_rows < 1 || g->n_draw < 0 || g->n_draw > g->n_rows || g->start < 0)
            return weft_err_set(err, WEFT_EINVAL, "segment %d: %d rows from %d, %d drawn", s, g->n_rows,
                                g->start, g->n_draw);
        for (int t = 0; t < s; t++)
            if (segs[t].slot == g->slot)
                return weft_err_set(err, WEFT_EINVAL, "segments %d and %d feed the same slot %d", t, s,
                                    g->slot);
        if (rows + g->n_rows > b->max_rows)
            return weft_err_set(err, WEFT_EINVAL, "forward of more than %d rows", b->max_rows);
        if (g->start + g->n_rows > b->cap[g->slot])
            return weft_err_set(err, WEFT_ERANGE, "segment %d: position %d outside the stream capacity %d", s,
                                g->start + g->n_rows - 1, b->cap[g->slot]);
        for (int r = 0; b->tile_rows > 0 && r < g->n_rows; r += b->tile_rows) /* prefill attention tiles */
            b->h_tiles[tiles++] =
                (weft_cu_tile){rows + r, g->n_rows - r < b->tile_rows ? g->n_rows - r : b->tile_rows};
        for (int r = 0; r < g->n_rows; r++) {
            int32_t tok = g->seq[g->start + r];
            if (tok < 0 || tok >= b->V)
                return weft_err_set(err, WEFT_ERANGE, "token id %d outside the vocabulary (%lld)", tok,
                                    (long long)b->V);
            b->h_rows[rows] = (weft_cu_row){b->kv[g->slot], g->start + r, tok, b->cap[g->slot], 0};
            if (g->start + r > b->max_pos) b->max_pos = g->start + r;
            if (r >= g->n_rows - g->n_draw) b->h_outrows[outs++] = rows;
            rows++;
        }
    }
    *n = rows;
    *n_out = outs;
    b->rows_distinct = rows == n_segs; /* every segment one row: the rows are of distinct streams */
    /* Tiles pay off when they hold several rows on average (prefill chunks); decode rounds keep the per-row
     * kernel. Either gives the same bits. */
    b->n_tiles = b->tile_rows > 0 && rows >= 4 * tiles ? tiles : 0;
    return WEFT_OK;
}

/* An epilogue with the matmul-path timing knobs (WEFT_CUDA_TIMING_TWICE bits RQ4, NO_X1S, NO_SPLIT, NO_GEMV,
 * NO_GEMM, NO_WGMMA, WGMMA_R64, NO_BULK; the same bits whichever path they pick). */
static weft_cu_epi cu_epi_knobs(const cu_backend *b, weft_cu_epi e) {
    e.quads4 = (b->twice & WEFT_CU_T_RQ4) != 0;
    e.no_x1s = (b->twice & WEFT_CU_T_NO_X1S) != 0;
    e.no_split = (b->twice & WEFT_CU_T_NO_SPLIT) != 0;
    e.no_gemv = (b->twice & WEFT_CU_T_NO_GEMV) != 0;
    e.gemm = (b->twice & WEFT_CU_T_NO_GEMM) ? -1 : (b->twice & WEFT_CU_T_NO_WGMMA) ? 1 : 0;
    e.wgmma_rows = (b->twice & WEFT_CU_T_WGMMA_R64) ? 64 : 0;
    /* the split-K slot sums (9..32 rows; 17..64 on small weights) */
    e.part = b->mm_part_floats ? b->mm_part : NULL;
    e.part_floats = b->mm_part_floats;
    /* the wgmma GEMM's bulk copies (f16 mode, past 64 rows) */
    e.xb = b->mm_xb_words && !(b->twice & WEFT_CU_T_NO_BULK) ? b->mm_xb : NULL;
    e.xb_words = b->mm_xb_words;
    return e;
}

/* The prepared-activation buffers for inputs of K elements: buffer 1 for the down projection (written by the
 * gate/up epilogue while that matmul still reads buffer 0), buffer 0 for every other matmul. */
static weft_cu_xq xq_of(const cu_backend *b, int64_t K) {
    return (weft_cu_xq){b->xq_f, b->xq_s, K, b->act_f16};
}
static weft_cu_xq xq_down(const cu_backend *b) {
    return (weft_cu_xq){b->xq_f + (size_t)b->max_rows * (size_t)b->xq_k,
                        b->xq_s + (size_t)b->max_rows * (size_t)(b->xq_k / 32), b->I, b->act_f16};
}

/* Does a matmul on this weight read prepared activations (weft_cu_matmul_q4x)? */
static bool wants_xq(const cu_backend *b, const weft_cu_weight *w) {
    return !b->baseline && w->kind == WEFT_CU_Q4F;
}

/* Y = X·Wᵀ (+ bias) (+= with accumulate): on prepared activations when the weight reads them (the caller
 * prepared X into the xq buffer), else on fp32 X. Both give the same bits (cuda_kernels.h). */
static weft_status mm(cu_backend *b, const weft_cu_weight *w, const float *X, int64_t ldx, int n, float *Y,
                      int64_t ldy, const float *bias, int accumulate, const char *what, weft_err *err) {
    if (wants_xq(b, w)) {
        const weft_cu_xq xq = X == b->g ? xq_down(b) : xq_of(b, w->cols);
        const weft_cu_epi e = cu_epi_knobs(b, weft_cu_epi_store(Y, ldy, bias, accumulate, w->rows));
        LAUNCH(weft_cu_matmul_q4x(w, &xq, n, &e, b->stream), what);
        return WEFT_OK;
    }
    LAUNCH(weft_cu_matmul(w, X, ldx, n, Y, ldy, bias, accumulate, b->stream), what);
    return WEFT_OK;
}

/* Y = RMSNorm(X), also into the xq buffer when a consumer reads prepared activations; xq_only: every
 * consumer does, so Y is not written. */
static weft_status norm(cu_backend *b, float *Y, const float *X, const int *rowmap, const float *w, int n,
                        bool xq, bool xq_only, const char *what, weft_err *err) {
    if (xq) {
        const weft_cu_xq q = xq_of(b, b->H);
        LAUNCH(weft_cu_rmsnorm_xq(xq_only ? NULL : Y, b->H, X, b->H, rowmap, w, n, (int)b->H, b->eps, &q,
                                  b->stream),
               what);
    } else {
        LAUNCH(weft_cu_rmsnorm(Y, b->H, X, b->H, rowmap, w, n, (int)b->H, b->eps, b->stream), what);
    }
    return WEFT_OK;
}

/* X [n, K] into the xq buffer when w reads prepared activations. */
static weft_status prep(cu_backend *b, const weft_cu_weight *w, const float *X, int n, weft_err *err) {
    if (!wants_xq(b, w)) return WEFT_OK;
    const weft_cu_xq q = X == b->g ? xq_down(b) : xq_of(b, w->cols);
    LAUNCH(weft_cu_xq_prep(X, w->cols, n, &q, b->stream), "preparing activations");
    return WEFT_OK;
}

/* A decode round's attention stage in one kernel (weft_cu_attention_decode: the per-head q/k norms (qwen3),
 * RoPE + KV store, attention and the o projection's prepared words, the same bits as the separate kernels)
 * for rounds of at most b->attn_rows (weft_cu_attention_decode_rows) rows, each its stream's only row (4 in
 * its span form, 1 otherwise: past those the separate kernels are faster, bench/NOTES.md sessions 12 and 21),
 * unless WEFT_CU_T_NO_FUSED_ATTN (timing) is set. *done: it ran (*prepped: the prepared words too); else the
 * separate kernels must run (not applicable, or refused as cudaErrorNotSupported). The stage's WEFT_CU_T_ATTN
 * twice-bit launches it twice (it is idempotent: the same cache entries, counters at zero). */
static weft_status attn_fused(cu_backend *b, const cu_layer *ly, int n, int l, float scale, bool *done,
                              bool *prepped, weft_err *err) {
    *done = *prepped = false;
    if (n > b->attn_rows || !b->rows_distinct || b->baseline || b->n_tiles > 0 ||
        (b->twice & WEFT_CU_T_NO_FUSED_ATTN))
        return WEFT_OK;
    const bool xq = wants_xq(b, &ly->wo);
    const weft_cu_xq q = xq_of(b, ly->wo.cols);
    for (int rep = 0; rep < 1 + ((b->twice & WEFT_CU_T_ATTN) != 0); rep++) {
        const cudaError_t e = weft_cu_attention_decode(
            b->q, b->k, b->v, b->att, xq ? &q : NULL, b->d_rows, n, b->max_pos, (int)b->Hq, (int)b->Hkv,
            (int)b->d, l, scale, &b->rope, ly->q_norm, ly->k_norm, b->eps, b->attn_scratch, b->max_context,
            b->attn_counters, b->act_f16, b->stream);
        if (e == cudaErrorNotSupported && rep == 0) return WEFT_OK;
        if (e != cudaSuccess) return cu_fail(err, e, "attention (one kernel)");
    }
    *done = true;
    *prepped = xq;
    return WEFT_OK;
}

#define STEP(call)                                                                                           \
    do {                                                                                                     \
        weft_status s_ = (call);                                                                             \
        if (s_) return s_;                                                                                   \
    } while (0)

/* `call` once, or twice when the stage's WEFT_CU_T_* bit is in b->twice (timing experiments, cuda_model.h).
 */
#define STAGE(bit, call)                                                                                     \
    do {                                                                                                     \
        for (int rep_ = 0; rep_ < 1 + ((b->twice & (bit)) != 0); rep_++) call;                               \
    } while (0)

/* The attention stage as separate kernels: RoPE + KV store, then the attention over tiles (prefill chunks) or
 * per row. */
static weft_status attn_separate(cu_backend *b, int n, int l, float scale, weft_err *err) {
    const cudaStream_t st = b->stream;
    const int Hq = (int)b->Hq, Hkv = (int)b->Hkv, d = (int)b->d;
    STAGE(WEFT_CU_T_ROPE,
          LAUNCH(weft_cu_rope_store(b->q, b->k, b->v, b->d_rows, n, Hq, Hkv, d, l, &b->rope, b->act_f16, st),
                 "rope"));
    if (b->n_tiles > 0) {
        if (b->twice & (WEFT_CU_T_ATTN_WG | WEFT_CU_T_ATTN_WG2)) /* timing: the wgmma tiles */
            STAGE(WEFT_CU_T_ATTN, LAUNCH(weft_cu_attention_tiles_shaped(
                                             b->q, b->att, b->d_rows, n, b->max_pos, b->d_tiles, b->n_tiles,
                                             Hq, Hkv, d, l, scale, b->attn_scratch, b->max_context,
                                             b->act_f16, (b->twice & WEFT_CU_T_ATTN_WG2) ? -7 : -8, 0, st),
                                         "attention"));
        else
            STAGE(WEFT_CU_T_ATTN,
                  LAUNCH(weft_cu_attention_tiles(b->q, b->att, b->d_rows, n, b->max_pos, b->d_tiles,
                                                 b->n_tiles, Hq, Hkv, d, l, scale, b->attn_scratch,
                                                 b->max_context, b->act_f16, st),
                         "attention"));
    } else {
        STAGE(WEFT_CU_T_ATTN,
              LAUNCH(weft_cu_attention(b->q, b->att, b->d_rows, n, b->max_pos, Hq, Hkv, d, l, scale,
                                       b->attn_scratch, b->max_context, b->act_f16, st),
                     "attention"));
    }
    return WEFT_OK;
}

static weft_status run_layers(cu_backend *b, int n, weft_err *err) {
    const cudaStream_t st = b->stream;
    const int64_t H = b->H, d = b->d, qd = b->Hq * d, kvd = b->Hkv * d, I = b->I;
    const float scale = 1.0f / sqrtf((float)d);
    LAUNCH(weft_cu_embed(&b->embed, b->d_rows, n, b->x, st), "embedding");
    for (int64_t l = 0; l < b->L; l++) {
        const cu_layer *ly = &b->layers[l];
        const bool xq_qkv = ly->qkv || wants_xq(b, &ly->wq) || wants_xq(b, &ly->wk) || wants_xq(b, &ly->wv),
                   xq_qkv_only =
                       ly->qkv || (wants_xq(b, &ly->wq) && wants_xq(b, &ly->wk) && wants_xq(b, &ly->wv));
        STAGE(WEFT_CU_T_NORM,
              STEP(norm(b, b->xb, b->x, NULL, ly->attn_norm, n, xq_qkv, xq_qkv_only, "attention norm", err)));
        if (ly->qkv) { /* one matrix, outputs split into q, k, v */
            const weft_cu_xq xq = xq_of(b, H);
            const weft_cu_epi e = cu_epi_knobs(b, (weft_cu_epi){.mode = WEFT_CU_EPI_STORE,
                                                                .y = {b->q, b->k, b->v},
                                                                .ld = {qd, kvd, kvd},
                                                                .end = {qd, qd + kvd, qd + 2 * kvd},
                                                                .bias = {ly->bq, ly->bk, ly->bv}});
            STAGE(WEFT_CU_T_QKV, LAUNCH(weft_cu_matmul_q4x(&ly->wqkv, &xq, n, &e, st), "qkv projection"));
        } else {
            STEP(mm(b, &ly->wq, b->xb, H, n, b->q, qd, ly->bq, 0, "q projection", err));
            STEP(mm(b, &ly->wk, b->xb, H, n, b->k, kvd, ly->bk, 0, "k projection", err));
            STEP(mm(b, &ly->wv, b->xb, H, n, b->v, kvd, ly->bv, 0, "v projection", err));
        }
        bool fused, prepped; /* q/k norms, RoPE, KV store and attention done in one kernel; the o prep too */
        STEP(attn_fused(b, ly, n, (int)l, scale, &fused, &prepped, err));
        if (!fused && ly->q_norm) {
            LAUNCH(weft_cu_rmsnorm(b->q, d, b->q, d, NULL, ly->q_norm, n * (int)b->Hq, (int)d, b->eps, st),
                   "q norm");
            LAUNCH(weft_cu_rmsnorm(b->k, d, b->k, d, NULL, ly->k_norm, n * (int)b->Hkv, (int)d, b->eps, st),
                   "k norm");
        }
        if (!fused) STEP(attn_separate(b, n, (int)l, scale, err));
        if (!prepped) STAGE(WEFT_CU_T_PREP, STEP(prep(b, &ly->wo, b->att, n, err)));
        STAGE(WEFT_CU_T_O, STEP(mm(b, &ly->wo, b->att, qd, n, b->x, H, NULL, 1, "o projection", err)));
        STAGE(WEFT_CU_T_NORM,
              STEP(norm(b, b->xb, b->x, NULL, ly->ffn_norm, n,
                        ly->gu || wants_xq(b, &ly->wg) || wants_xq(b, &ly->wu),
                        ly->gu || (wants_xq(b, &ly->wg) && wants_xq(b, &ly->wu)), "ffn norm", err)));
        /* The down projection's prepared words come from the SwiGLU epilogue when it needs no sums. */
        const bool down_words = ly->gu && wants_xq(b, &ly->wd) && ly->wd.mode != WEFT_CU_AFFINE;
        if (ly->gu) { /* gate|up interleaved by 8: SwiGLU in the epilogue, into g */
            const weft_cu_xq xq = xq_of(b, H);
            const weft_cu_epi e = cu_epi_knobs(b, (weft_cu_epi){.mode = WEFT_CU_EPI_SWIGLU,
                                                                .y = {b->g, b->g, b->g},
                                                                .ld = {I, I, I},
                                                                .xf = down_words ? xq_down(b).f : NULL,
                                                                .xf_nsub = I / 32,
                                                                .xf_f16 = b->act_f16});
            STAGE(WEFT_CU_T_GU, LAUNCH(weft_cu_matmul_q4x(&ly->wgu, &xq, n, &e, st), "gate/up projection"));
        } else {
            STEP(mm(b, &ly->wg, b->xb, H, n, b->g, I, NULL, 0, "gate projection", err));
            STEP(mm(b, &ly->wu, b->xb, H, n, b->u, I, NULL, 0, "up projection", err));
            LAUNCH(weft_cu_swiglu(b->g, b->u, (int64_t)n * I, st), "swiglu");
        }
        if (!down_words) STAGE(WEFT_CU_T_PREP, STEP(prep(b, &ly->wd, b->g, n, err)));
        STAGE(WEFT_CU_T_DOWN, STEP(mm(b, &ly->wd, b->g, I, n, b->x, H, NULL, 1, "down projection", err)));
    }
    return WEFT_OK;
}

static weft_status run_all(cu_backend *b, int n, int n_out, weft_err *err) {
    weft_status st = run_layers(b, n, err);
    if (st || n_out == 0) return st;
    STEP(norm(b, b->xb, b->x, b->d_outrows, b->final_norm, n_out, wants_xq(b, &b->head),
              wants_xq(b, &b->head), "final norm", err));
    return mm(b, &b->head, b->xb, b->H, n_out, b->logits, b->V, NULL, 0, "lm head", err);
}

/* The kernels of a forward, launched directly or through the cached graph. Every kernel argument is fixed by
 * (rows, drawn rows, attention spans, attention tiles, rows of distinct streams or not) — buffers never move
 * and the row table is read from device memory — so a graph captured for that shape replays any later forward
 * of the same shape. (The last: a round of 2..4 rows of distinct streams takes the one-kernel attention,
 * which must never run a window of several rows of one stream — a drafted window or a short prompt chunk of
 * the same row count: each row would read cache entries another row of the launch writes.) */
static weft_status launch_all(cu_backend *b, int n, int n_out, weft_err *err) {
    if (!b->graphs) return run_all(b, n, n_out, err);
    const int spans = b->max_pos / (WEFT_CU_ATTN_KB * WEFT_CU_ATTN_SPAN) + 1;
    if (!b->exec || b->exec_n != n || b->exec_out != n_out || b->exec_spans != spans ||
        b->exec_tiles != b->n_tiles || b->exec_distinct != b->rows_distinct) {
        if (b->exec) {
            cudaGraphExecDestroy(b->exec);
            b->exec = NULL;
        }
        cudaGraph_t graph = NULL;
        CU_TRY(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal),
               "starting a graph capture");
        weft_status st = run_all(b, n, n_out, err);
        cudaError_t e = cudaStreamEndCapture(b->stream, &graph);
        if (st) {
            if (graph) cudaGraphDestroy(graph);
            return st;
        }
        if (e != cudaSuccess) return cu_fail(err, e, "capturing the forward");
        e = cudaGraphInstantiate(&b->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            b->exec = NULL;
            return cu_fail(err, e, "instantiating the forward graph");
        }
        b->exec_n = n;
        b->exec_out = n_out;
        b->exec_spans = spans;
        b->exec_tiles = b->n_tiles;
        b->exec_distinct = b->rows_distinct;
    }
    CU_TRY(cudaGraphLaunch(b->exec, b->stream), "launching the forward graph");
    return WEFT_OK;
}

/* A drawn row whose draw is the plain argmax (temperature 0, no bias, no penalties, no logprobs) is drawn on
 * the device (weft_cu_argmax: exactly weft_sample's greedy step) and only its id comes back. */
static bool device_greedy(const weft_sampling *p, const weft_logprobs *lp, int64_t pos, int64_t n_prompt) {
    return p && !lp && p->temperature == 0.0 && p->n_logit_bias == 0 && p->frequency_penalty == 0.0 &&
           p->presence_penalty == 0.0 && p->repetition_penalty == 1.0 && n_prompt >= 0 && n_prompt <= pos;
}

/* The samplers not in use, a stack under smu (one per pool thread, so a task always finds one). */
static weft_sampler *sampler_take(cu_backend *b) {
    pthread_mutex_lock(&b->smu);
    weft_sampler *s = b->n_free > 0 ? b->free_s[--b->n_free] : NULL;
    pthread_mutex_unlock(&b->smu);
    return s;
}

static void sampler_put(cu_backend *b, weft_sampler *s) {
    pthread_mutex_lock(&b->smu);
    b->free_s[b->n_free++] = s;
    pthread_mutex_unlock(&b->smu);
}

/* One host draw with sampler s: the row's logits are in h_logits at its drawn-row index. */
static void sample_one(cu_backend *b, cu_task *k, weft_sampler *s) {
    const weft_segment *g = k->seg;
    const int r = g->n_rows - g->n_draw + k->j;
    const int64_t pos = (int64_t)g->start + r + 1; /* position of the token being drawn (SPEC §5.2) */
    weft_logprobs *lp = g->logprobs ? &g->logprobs[k->j] : NULL;
    k->draw =
        weft_sample(s, b->h_logits + (size_t)k->o * (size_t)b->V, g->sampling, g->seq, pos, g->n_prompt, lp);
    if (k->draw < 0) {
        const weft_err *se = weft_sampler_error(s);
        k->err = *se;
        if (!k->err.code) k->err.code = WEFT_EINVAL;
    }
}

/* One host draw as a pool task (several in the round), with a sampler of the free stack. */
static void sample_task(void *ctx, int64_t i, float *scratch) {
    (void)scratch;
    cu_backend *b = ctx;
    cu_task *k = &b->tasks[i];
    weft_sampler *s = sampler_take(b);
    if (!s) { /* cannot happen: the pool never runs more tasks at once than there are samplers */
        k->draw = -1;
        weft_err_set(&k->err, WEFT_EINTERNAL, "cuda: no free sampler");
        return;
    }
    sample_one(b, k, s);
    sampler_put(b, s);
}

weft_status cu_forward(void *self, weft_segment *segs, int n_segs, weft_err *err) {
    cu_backend *b = self;
    int n = 0, n_out = 0;
    b->n_last = 0;
    weft_status st = gather_rows(b, segs, n_segs, &n, &n_out, err);
    if (st || n == 0) return st;
    /* Which drawn rows are greedy on the device, which are sampled on the host. */
    int n_dev = 0, n_host = 0;
    for (int s = 0, o = 0; s < n_segs; s++) {
        weft_segment *g = &segs[s];
        for (int j = 0; j < g->n_draw; j++, o++) {
            const int64_t pos = (int64_t)g->start + g->n_rows - g->n_draw + j + 1;
            if (device_greedy(g->sampling, g->logprobs ? &g->logprobs[j] : NULL, pos, g->n_prompt)) {
                b->h_gsel[n_dev++] = o;
            } else {
                b->tasks[n_host++] = (cu_task){g, j, o, 0, {0}};
            }
        }
    }
    CU_TRY(cudaSetDevice(b->dev), "selecting the device");
    CU_TRY(cudaMemcpyAsync(b->d_rows, b->h_rows, (size_t)n * sizeof *b->h_rows, cudaMemcpyHostToDevice,
                           b->stream),
           "copying the row table");
    if (n_out > 0)
        CU_TRY(cudaMemcpyAsync(b->d_outrows, b->h_outrows, (size_t)n_out * sizeof(int),
                               cudaMemcpyHostToDevice, b->stream),
               "copying the drawn rows");
    if (b->n_tiles > 0)
        CU_TRY(cudaMemcpyAsync(b->d_tiles, b->h_tiles, (size_t)b->n_tiles * sizeof(weft_cu_tile),
                               cudaMemcpyHostToDevice, b->stream),
               "copying the tile table");
    /* (before the forward, so the greedy draw follows the lm head directly: its PDL launch) */
    if (n_dev > 0)
        CU_TRY(cudaMemcpyAsync(b->d_gsel, b->h_gsel, (size_t)n_dev * sizeof(int), cudaMemcpyHostToDevice,
                               b->stream),
               "copying the greedy rows");
    const bool timed = (b->twice & WEFT_CU_T_EVENTS) != 0;
    const double t0 = timed ? weft_now() : 0;
    if (timed) CU_TRY(cudaEventRecord(b->ev0, b->stream), "timing event");
    if ((st = launch_all(b, n, n_out, err))) return st;
    if (timed) CU_TRY(cudaEventRecord(b->ev1, b->stream), "timing event");
    if (n_dev > 0) {
        LAUNCH(weft_cu_argmax(b->logits, b->V, b->d_gsel, n_dev, b->d_ids, b->stream), "greedy draw");
        CU_TRY(cudaMemcpyAsync(b->h_ids, b->d_ids, (size_t)n_dev * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               b->stream),
               "copying greedy ids back");
    }
    /* Logits of host-sampled rows only, in runs of consecutive drawn rows. */
    for (int i = 0; i < n_host;) {
        int e = i + 1;
        while (e < n_host && b->tasks[e].o == b->tasks[e - 1].o + 1) e++;
        const size_t row = (size_t)b->V * sizeof(float);
        CU_TRY(cudaMemcpyAsync(b->h_logits + (size_t)b->tasks[i].o * (size_t)b->V,
                               b->logits + (size_t)b->tasks[i].o * (size_t)b->V, (size_t)(e - i) * row,
                               cudaMemcpyDeviceToHost, b->stream),
               "copying logits back");
        i = e;
    }
    CU_TRY(cudaStreamSynchronize(b->stream), "running the forward");
    if (timed) {
        float ms = 0;
        const int k = n == 1 ? 0 : n <= 16 ? 1 : 2;
        if (cudaEventElapsedTime(&ms, b->ev0, b->ev1) == cudaSuccess) b->ev_ms[k] += ms;
        b->wall_ms[k] += (weft_now() - t0) * 1e3;
        b->ev_n[k]++;
    }
    b->n_last = n_out;
    for (int s = 0, o = 0, d = 0; s < n_segs; s++) {
        weft_segment *g = &segs[s];
        for (int j = 0; j < g->n_draw; j++, o++)
            if (d < n_dev && b->h_gsel[d] == o) g->draws[j] = b->h_ids[d++];
    }
    if (n_host == 1) /* alone: the draw's own loops use the idle pool (weft_sampler_set_parallel) */
        sample_one(b, &b->tasks[0], b->solo);
    else
        weft_pool_run(b->pool, n_host, sample_task, b);
    for (int i = 0; i < n_host; i++) {
        const cu_task *k = &b->tasks[i];
        if (k->draw < 0) {
            int s = (int)(k->seg - segs);
            return weft_err_set(err, k->err.code, "segment %d: %s", s, k->err.msg);
        }
        k->seg->draws[k->j] = k->draw;
    }
    return WEFT_OK;
}
