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

/* Per-thread scratch every pool provides at least (fp32 elements, 64-byte aligned): weft_matmul decodes
 * blocks of weight rows and keeps partial sums there. */
#define WEFT_POOL_MIN_SCRATCH_FLOATS ((size_t)64 * 1024)

/* n_threads >= 1 (including the caller). scratch_floats: per-thread scratch (fp32 elements) the caller's
 * tasks need (e.g. attention scores for a context); the pool allocates max(scratch_floats,
 * WEFT_POOL_MIN_SCRATCH_FLOATS), 64-byte aligned. Idle workers poll for ~2 ms before sleeping. NULL on
 * failure. */
weft_pool *weft_pool_new(int n_threads, size_t scratch_floats);
void weft_pool_free(weft_pool *p);
int weft_pool_threads(const weft_pool *p);

/* A workspace of WEFT_POOL_SHARED_FLOATS fp32 elements (64-byte aligned) that the tasks of one job share, for
 * kernels that split one output's work into parts merged afterwards (attention over a long context). It
 * belongs to the thread that calls weft_pool_run: a kernel uses it across the jobs it runs, and must not call
 * another kernel that uses it in between. */
#define WEFT_POOL_SHARED_FLOATS ((size_t)256 * 1024)
float *weft_pool_shared(weft_pool *p);

/* Runs fn(ctx, task, scratch) for task in [0, n_tasks) across the pool; returns when all are done.
 * scratch is the calling thread's scratch buffer (scratch_floats floats). Tasks must be independent. */
typedef void (*weft_task_fn)(void *ctx, int64_t task, float *scratch);
void weft_pool_run(weft_pool *p, int64_t n_tasks, weft_task_fn fn, void *ctx);

/* weft_pool_run for tasks without scratch, in the shape of weft_sampler_run_fn (weft/sampler.h): pool is a
 * weft_pool *, task(tctx, i) runs once for every i in [0, n_tasks). */
void weft_pool_run_plain(void *pool, int64_t n_tasks, void (*task)(void *tctx, int64_t i), void *tctx);

/* ---- matmul and dot (src/backend/cpu/matmul*.c; the arithmetic is specified in src/backend/cpu/mm.h) ----
 * One reduction order for every output: weights decoded to the reference decoder's fp32 values, 16 lanes
 * acc[k mod 16] = fma(w[k], x[k], acc[k mod 16]) in k order, then a fixed pairwise tree over the lanes.
 * The AVX-512, AVX2 and scalar kernels all compute exactly this (correctly rounded fma everywhere), so the
 * ISA picked at run time never changes a bit; it is fixed per process anyway (the best the CPU has). */
typedef enum weft_cpu_isa {
    WEFT_CPU_ISA_AUTO = 0, /* the best supported one */
    WEFT_CPU_ISA_SCALAR,
    WEFT_CPU_ISA_AVX2,  /* AVX2 + FMA + F16C */
    WEFT_CPU_ISA_AVX512 /* AVX-512 F/BW/VL/DQ + F16C */
} weft_cpu_isa;

bool weft_cpu_isa_supported(weft_cpu_isa isa);
weft_cpu_isa weft_cpu_isa_best(void);
const char *weft_cpu_isa_name(weft_cpu_isa isa);

/* Fixed-order dot product of n floats (the canonical 16-lane fma order above). */
float weft_dot(const float *a, const float *b, int64_t n);
/* Same with an explicit ISA (tests and benchmarks; an unsupported one means the best supported). */
float weft_dot_isa(const float *a, const float *b, int64_t n, weft_cpu_isa isa);

/* Y[i, o] = Σ_k W[o, k] · X[i, k] for i < n_rows, o < out (W's rows), k < in (W's cols).
 * W: any weight dtype weft_tensor_dequant_row decodes; 2-D [out, in] (or the first `out` rows of an
 * embedding-like matrix). X: [n_rows, in] fp32, row stride in. Y: [n_rows, out] fp32, row stride ldy.
 * Each Y element is the canonical dot of the decoded W row and the X row — bit-identical for any n_rows,
 * any thread count and any ISA. Work is split across output elements and input rows, never across k.
 * Uses about 50 KiB of stack per thread (decoded weight panel + partial sums); allocates nothing. */
void weft_matmul(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y, int64_t ldy);
/* Same with an explicit ISA (tests and benchmarks). */
void weft_matmul_isa(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y,
                     int64_t ldy, weft_cpu_isa isa);

/* y = x / sqrt(mean(x²) + eps) ⊙ w over n elements, fp32 as HF does; Σx² is weft_dot(x, x, n) (a fixed
 * order). w may be NULL (=1). y may alias x. */
void weft_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* Decodes a 1-D tensor (norm weights, biases) to a new fp32 array of n elements (malloc'd, caller frees). */
float *weft_tensor_to_f32(const weft_tensor *t, int64_t n, weft_err *err);

/* SwiGLU gate over the pool: g[i] = silu(g[i]) · u[i] for i < n, silu(x) = x / (1 + exp_c(−x)) with the fixed
 * polynomial exp of attention (not libm's expf: identical bits on every ISA). Elementwise, so an element's
 * bits depend only on g[i] and u[i]. */
void weft_swiglu(weft_pool *p, float *g, const float *u, int64_t n);
void weft_swiglu_isa(weft_pool *p, float *g, const float *u, int64_t n, weft_cpu_isa isa);

static inline float weft_silu(float x) {
    return x / (1.0f + expf(-x));
}

/* ---- causal attention over a KV cache (src/backend/cpu/attention*.c; the order is specified in att.h) ----
 * For each row r and query head h (kv head j = h / (n_heads / n_kv_heads), GQA):
 *   s_τ = (q[r,h] · K_r[τ, j]) · scale for τ = 0..pos[r];  α = softmax(s);  out[r,h] = Σ_τ α_τ V_r[τ, j]
 * computed flash-style over key blocks of 64 aligned to absolute positions, merged in position order (in
 * super-blocks of 1024, also aligned), with a fixed polynomial exp: a row's output depends only on its own
 * query, position and stream's cache — never on the other rows, the chunking of a prompt, the thread count or
 * the ISA (SPEC §4.3.1). Long contexts with few rows split into super-blocks across threads (partials in the
 * pool's shared workspace, merged in order). Uses per-thread pool scratch of 4·(2·head_dim + 64) floats
 * (within the pool's minimum for head_dim <= 8000); allocates nothing. */
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
/* Same with an explicit ISA (tests and benchmarks): identical results. */
void weft_attention_isa(weft_pool *p, const weft_attn_args *a, weft_cpu_isa isa);

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
