/* One forward over a round's segments on the device (llama/qwen3, the same math as src/families/llama.c):
 *
 *   x = E[token];  per layer: xb = RMSNorm(x); q,k,v = xb·W{q,k,v}ᵀ (+ bias); qwen3: per-head RMSNorm of q,
 * k; RoPE(q, k), K/V cache[pos] = k, v; att = Attention(q, cache); x += att·Woᵀ; xb = RMSNorm(x); g =
 * silu(xb·Wgᵀ) ⊙ xb·Wuᵀ; x += g·Wdᵀ;   logits = RMSNorm(x[drawn rows])·W_headᵀ
 *
 * Every kernel is row-invariant (cuda_kernels.h), so a row's logits do not depend on the other rows of the
 * round. The drawn rows' logits come back to pinned host memory and are sampled with weft_sample, the CPU
 * backend's sampler (SPEC §5): first step of the "sampling on the device", exact by construction. */
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
    int rows = 0, outs = 0;
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
    return WEFT_OK;
}

static weft_status run_layers(cu_backend *b, int n, weft_err *err) {
    const cudaStream_t st = b->stream;
    const int64_t H = b->H, d = b->d, qd = b->Hq * d, kvd = b->Hkv * d, I = b->I;
    const float scale = 1.0f / sqrtf((float)d);
    LAUNCH(weft_cu_embed(&b->embed, b->d_rows, n, b->x, st), "embedding");
    for (int64_t l = 0; l < b->L; l++) {
        const cu_layer *ly = &b->layers[l];
        LAUNCH(weft_cu_rmsnorm(b->xb, H, b->x, H, NULL, ly->attn_norm, n, (int)H, b->eps, st),
               "attention norm");
        LAUNCH(weft_cu_matmul(&ly->wq, b->xb, H, n, b->q, qd, ly->bq, 0, st), "q projection");
        LAUNCH(weft_cu_matmul(&ly->wk, b->xb, H, n, b->k, kvd, ly->bk, 0, st), "k projection");
        LAUNCH(weft_cu_matmul(&ly->wv, b->xb, H, n, b->v, kvd, ly->bv, 0, st), "v projection");
        if (ly->q_norm) {
            LAUNCH(weft_cu_rmsnorm(b->q, d, b->q, d, NULL, ly->q_norm, n * (int)b->Hq, (int)d, b->eps, st),
                   "q norm");
            LAUNCH(weft_cu_rmsnorm(b->k, d, b->k, d, NULL, ly->k_norm, n * (int)b->Hkv, (int)d, b->eps, st),
                   "k norm");
        }
        LAUNCH(weft_cu_rope_store(b->q, b->k, b->v, b->d_rows, n, (int)b->Hq, (int)b->Hkv, (int)d, (int)l,
                                  &b->rope, st),
               "rope");
        LAUNCH(weft_cu_attention(b->q, b->att, b->d_rows, n, b->max_pos, (int)b->Hq, (int)b->Hkv, (int)d,
                                 (int)l, scale, b->attn_scratch, b->max_context, st),
               "attention");
        LAUNCH(weft_cu_matmul(&ly->wo, b->att, qd, n, b->x, H, NULL, 1, st), "o projection");
        LAUNCH(weft_cu_rmsnorm(b->xb, H, b->x, H, NULL, ly->ffn_norm, n, (int)H, b->eps, st), "ffn norm");
        LAUNCH(weft_cu_matmul(&ly->wg, b->xb, H, n, b->g, I, NULL, 0, st), "gate projection");
        LAUNCH(weft_cu_matmul(&ly->wu, b->xb, H, n, b->u, I, NULL, 0, st), "up projection");
        LAUNCH(weft_cu_swiglu(b->g, b->u, (int64_t)n * I, st), "swiglu");
        LAUNCH(weft_cu_matmul(&ly->wd, b->g, I, n, b->x, H, NULL, 1, st), "down projection");
    }
    return WEFT_OK;
}

static weft_status run_all(cu_backend *b, int n, int n_out, weft_err *err) {
    weft_status st = run_layers(b, n, err);
    if (st || n_out == 0) return st;
    LAUNCH(weft_cu_rmsnorm(b->xb, b->H, b->x, b->H, b->d_outrows, b->final_norm, n_out, (int)b->H, b->eps,
                           b->stream),
           "final norm");
    LAUNCH(weft_cu_matmul(&b->head, b->xb, b->H, n_out, b->logits, b->V, NULL, 0, b->stream), "lm head");
    return WEFT_OK;
}

/* The kernels of a forward, launched directly or through the cached graph. Every kernel argument is fixed by
 * (rows, drawn rows, attention spans) — buffers never move and the row table is read from device memory — so
 * a graph captured for that shape replays any later forward of the same shape. */
static weft_status launch_all(cu_backend *b, int n, int n_out, weft_err *err) {
    if (!b->graphs) return run_all(b, n, n_out, err);
    const int spans = b->max_pos / (WEFT_CU_ATTN_KB * WEFT_CU_ATTN_SPAN) + 1;
    if (!b->exec || b->exec_n != n || b->exec_out != n_out || b->exec_spans != spans) {
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
    }
    CU_TRY(cudaGraphLaunch(b->exec, b->stream), "launching the forward graph");
    return WEFT_OK;
}

weft_status cu_forward(void *self, weft_segment *segs, int n_segs, weft_err *err) {
    cu_backend *b = self;
    int n = 0, n_out = 0;
    b->n_last = 0;
    weft_status st = gather_rows(b, segs, n_segs, &n, &n_out, err);
    if (st || n == 0) return st;
    CU_TRY(cudaSetDevice(b->dev), "selecting the device");
    CU_TRY(cudaMemcpyAsync(b->d_rows, b->h_rows, (size_t)n * sizeof *b->h_rows, cudaMemcpyHostToDevice,
                           b->stream),
           "copying the row table");
    if (n_out > 0)
        CU_TRY(cudaMemcpyAsync(b->d_outrows, b->h_outrows, (size_t)n_out * sizeof(int),
                               cudaMemcpyHostToDevice, b->stream),
               "copying the drawn rows");
    if ((st = launch_all(b, n, n_out, err))) return st;
    if (n_out > 0) {
        CU_TRY(cudaMemcpyAsync(b->h_logits, b->logits, (size_t)n_out * (size_t)b->V * sizeof(float),
                               cudaMemcpyDeviceToHost, b->stream),
               "copying logits back");
    }
    CU_TRY(cudaStreamSynchronize(b->stream), "running the forward");
    b->n_last = n_out;
    int o = 0;
    for (int s = 0; s < n_segs; s++) {
        weft_segment *g = &segs[s];
        for (int j = 0; j < g->n_draw; j++, o++) {
            int r = g->n_rows - g->n_draw + j;
            int64_t pos = (int64_t)g->start + r + 1; /* position of the token being drawn (SPEC §5.2) */
            const float *z = b->h_logits + (size_t)o * (size_t)b->V;
            weft_logprobs *lp = g->logprobs ? &g->logprobs[j] : NULL;
            g->draws[j] = weft_sample(b->sampler, z, g->sampling, g->seq, pos, g->n_prompt, lp);
            if (g->draws[j] < 0) {
                const weft_err *se = weft_sampler_error(b->sampler);
                return weft_err_set(err, se->code ? se->code : WEFT_EINVAL, "segment %d: %s", s, se->msg);
            }
        }
    }
    return WEFT_OK;
}
