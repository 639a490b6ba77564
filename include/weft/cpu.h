/* weft/cpu.h — the CPU backend's building blocks: a fixed thread pool and row-invariant fp32 kernels.
 *
 * Exactness (SPEC §4.3.1): every output element is computed by exactly one thread, with a reduction order
 * that depends only on the weight shape — never on the number of rows in the call, on the other rows, or on
 * the thread count. Work is split across output elements (rows of W, heads), never across a reduction. */
#ifndef WEFT_CPU_H
#define WEFT_CPU_H

#include "weft/config.h"
#include "weft/tensor.h"

#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_pool weft_pool;

/* n_threads >= 1 (including the caller). scratch_floats: per-thread scratch (fp32 elements) for kernels
 * (the largest weight row decoded at once). NULL on failure. */
weft_pool *weft_pool_new(int n_threads, size_t scratch_floats);
void weft_pool_free(weft_pool *p);
int weft_pool_threads(const weft_pool *p);

/* Runs fn(ctx, task, scratch) for task in [0, n_tasks) across the pool; returns when all are done.
 * scratch is the calling thread's scratch buffer (scratch_floats floats). Tasks must be independent. */
typedef void (*weft_task_fn)(void *ctx, int64_t task, float *scratch);
void weft_pool_run(weft_pool *p, int64_t n_tasks, weft_task_fn fn, void *ctx);

/* Fixed-order dot product of n floats (8 interleaved partial sums, combined in a fixed tree). */
float weft_dot(const float *a, const float *b, int64_t n);

/* Y[i, o] = Σ_k W[o, k] · X[i, k] for i < n_rows, o < out (W's rows), k < in (W's cols).
 * W: any weight dtype weft_tensor_dequant_row decodes; 2-D [out, in] (or the first `out` rows of an
 * embedding-like matrix). X: [n_rows, in] fp32, row stride in. Y: [n_rows, out] fp32, row stride ldy.
 * Each Y element is weft_dot over the decoded W row — bit-identical for any n_rows and thread count. */
void weft_matmul(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y, int64_t ldy);

/* y = x / sqrt(mean(x²) + eps) ⊙ w over n elements (sum in fixed order, fp32 as HF does). w may be NULL (=1).
 */
void weft_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* Decodes a 1-D tensor (norm weights, biases) to a new fp32 array of n elements (malloc'd, caller frees). */
float *weft_tensor_to_f32(const weft_tensor *t, int64_t n, weft_err *err);

static inline float weft_silu(float x) {
    return x / (1.0f + expf(-x));
}

/* ---- causal attention over a KV cache (src/backend/cpu/attention.c) ----
 * For each row r and query head h (kv head j = h / (n_heads / n_kv_heads), GQA):
 *   s_τ = (q[r,h] · K_r[τ, j]) · scale for τ = 0..pos[r];  α = softmax(s);  out[r,h] = Σ_τ α_τ V_r[τ, j]
 * Keys are reduced in position order 0..pos, one (row, head) per task: a row's output depends only on its own
 * query and its stream's cache, never on the other rows (SPEC §4.3.1). Per-thread scratch must hold pos+1
 * floats. */
typedef struct weft_attn_args {
    int n_rows;
    int n_heads, n_kv_heads, head_dim;
    float scale;
    const float *q; /* [n_rows, q_stride], head h at q + h*head_dim */
    int64_t q_stride;
    float *out; /* [n_rows, out_stride], head h at out + h*head_dim */
    int64_t out_stride;
    const float *const *k; /* [n_rows] per row: its stream's K cache for this layer [cap, kv_stride] */
    const float *const *v; /* [n_rows] same for V */
    int64_t kv_stride;     /* floats per cached position (n_kv_heads*head_dim) */
    const int *pos;        /* [n_rows] absolute position of each row */
} weft_attn_args;

void weft_attention(weft_pool *p, const weft_attn_args *a);

/* ---- RoPE (src/backend/cpu/rope.c; families-and-formats §1.4, HF modeling_rope_utils.py) ---- */
typedef struct weft_rope_table {
    int rot;           /* rotated dimensions r = int(head_dim · partial_rotary_factor), even */
    float *inv_freq;   /* [rot/2] fp32 inverse frequencies after scaling (owned) */
    float attn_factor; /* multiplies cos and sin (yarn), else 1 */
    bool adjacent;     /* rotate pairs (2i, 2i+1) instead of (i, i + rot/2) */
} weft_rope_table;

/* Builds the table for cfg (default, linear, llama3, yarn; GGUF frequency divisors). WEFT_ENOTSUP otherwise.
 */
weft_status weft_rope_init(weft_rope_table *t, const weft_rope *cfg, int64_t head_dim, weft_err *err);
void weft_rope_free(weft_rope_table *t);
/* Rotates x [n_heads, head_dim] in place for position pos: angle_i = (float)pos · inv_freq[i] in fp32, as HF.
 */
void weft_rope_apply(const weft_rope_table *t, float *x, int n_heads, int head_dim, int pos);

#ifdef __cplusplus
}
#endif
#endif
