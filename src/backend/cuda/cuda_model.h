/* cuda_model.h — the CUDA backend's state for a llama/qwen3 model (families-and-formats §1–§2), shared by
 * backend.c (creation, slots, memory, snapshots) and forward.c (one forward over a round's segments). */
#ifndef WEFT_CUDA_MODEL_H
#define WEFT_CUDA_MODEL_H

#include "cuda_internal.h"

#include "weft/cpu.h"

#include <pthread.h>

typedef struct cu_layer {
    weft_cu_weight wq, wk, wv, wo, wg, wu, wd;
    /* Fused at upload when all parts are WEFT_CU_Q4F of one format (then the parts hold no device memory):
     * wqkv = rows of q, k, v one after another; wgu = gate and up rows interleaved by 8 (SwiGLU epilogue). */
    weft_cu_weight wqkv, wgu;
    bool qkv, gu;
    float *bq, *bk, *bv;         /* device [Hq·d], [Hkv·d] or NULL */
    float *attn_norm, *ffn_norm; /* device [H] */
    float *q_norm, *k_norm;      /* device [d] (qwen3) or NULL */
} cu_layer;

/* One host draw of a forward: segment, its drawn-row index j, the drawn-row index o in the logits. */
typedef struct cu_task {
    weft_segment *seg;
    int j, o;
    int32_t draw;
    weft_err err;
} cu_task;

typedef struct cu_backend {
    int dev;
    cudaStream_t stream;
    int64_t H, Hq, Hkv, d, I, V, L;
    float eps;
    weft_cu_weight embed, head; /* head.q == embed.q when tied */
    float *final_norm;
    cu_layer *layers;
    weft_cu_rope rope; /* inv_freq on the device */
    int max_slots, max_rows, max_context;
    /* device activations for max_rows rows */
    float *x, *xb, *q, *k, *v, *att, *g, *u, *logits;
    float *attn_scratch;   /* weft_cu_attention_scratch_floats(max_rows, Hq, d, max_context) */
    float *mm_part;        /* the 4-bit matmul's split-K slot sums (weft_cu_epi.part), mm_part_floats; like
                              attn_scratch, one set for the backend's one stream */
    size_t mm_part_floats; /* backend.c's mm_part_floats: the planned Q4_0 weights' largest need (0: none) */
    uint32_t *mm_xb;       /* the wgmma GEMM's activations in its own order (weft_cu_epi.xb), mm_xb_words */
    size_t mm_xb_words;    /* f16 mode past 64 rows: weft_cu_gemm_q4w_xb_words(xq_k, max_rows); else 0 */
    int *attn_counters;    /* weft_cu_attention_decode's arrival counters, zero between launches (these and
                              attn_scratch assume the backend's one stream; a stream per slot would need a set
                              each) */
    /* activations prepared for the 4-bit matmul (weft_cu_xq): two buffers of max_rows rows of up to
     * xq_k = max(H, Hq·d, I) elements (forward.c: xq_of, xq_down) */
    uint32_t *xq_f;
    float *xq_s;
    int64_t xq_k;
    /* query tiles of the prefill attention (weft_cu_attention_tiles), rebuilt per forward */
    weft_cu_tile *d_tiles, *h_tiles;
    int n_tiles;   /* tiles of the current forward; 0 = the per-row attention kernel */
    int tile_rows; /* rows per tile (weft_cu_attention_tile_rows); 0 = tiles not used */
    bool act_f16;  /* --activations f16: the 4-bit products' prepared activations are f16 (weft_cu_xq.f16) */
    bool baseline; /* WEFT_CUDA_BASELINE set at creation: session 2's path (no fusion, fp32 x, per-row
                      attention), the same bits — kept to measure the difference */
    /* WEFT_CUDA_TIMING_TWICE (timing experiments only): a mask of WEFT_CU_T_* stages launched twice per
     * layer, so that a stage's cost inside the real graph = the time difference (bench/NOTES.md). rope and
     * the accumulating matmuls are not idempotent: the logits are wrong when those bits are set (a warning
     * says so at creation). 0 in normal use. */
    unsigned twice;
    /* WEFT_CU_T_EVENTS in `twice`: device time of each forward's kernels (events around them), summed by
     * forward row count 1 / 2-16 / more and printed at destroy beside the wall time of the forwards */
    cudaEvent_t ev0, ev1;
    double ev_ms[3], wall_ms[3];
    long ev_n[3];
    int max_pos;        /* largest position in the current forward */
    bool rows_distinct; /* every row of the current forward is its stream's only row */
    int attn_rows;      /* weft_cu_attention_decode_rows for the model's heads, read once at creation */
    weft_cu_row *d_rows;
    int *d_outrows;
    /* pinned host mirrors */
    weft_cu_row *h_rows;
    int *h_outrows;
    float *h_logits; /* [max_rows, V] */
    int n_last;      /* drawn rows in h_logits after the last forward */
    /* slots: one device KV cache each, [L][2][cap][Hkv·d] of fp32, or f16 with act_f16 (weft_cu_row) */
    void **kv;
    int *cap;
    size_t slots_bytes;
    /* draws: device argmax for plain greedy rows, host weft_sample on a pool for the rest */
    int *d_gsel, *h_gsel;   /* drawn-row indices of the device-greedy rows [max_rows] */
    int32_t *d_ids, *h_ids; /* their ids [max_rows] (h_ pinned) */
    cu_task *tasks;         /* [max_rows] */
    weft_pool *pool;
    weft_sampler **samplers, **free_s; /* [n_samplers] each */
    weft_sampler *solo; /* a round's only host draw runs on the calling thread here, its loops on the pool */
    int n_samplers, n_free;
    pthread_mutex_t smu;
    bool smu_ok;
    /* CUDA graph of the last forward's kernels, replayed while (rows, drawn rows, spans, tiles, distinct
     * streams) repeat */
    bool graphs;
    cudaGraphExec_t exec;
    int exec_n, exec_out, exec_spans, exec_tiles;
    bool exec_distinct;
    cu_allocs allocs; /* weights, norms, activations */
    size_t weights_bytes, act_bytes, reserve;
} cu_backend;

/* KV bytes of one slot of `capacity` positions. */
size_t cu_kv_bytes(const cu_backend *b, int capacity);

/* The forward of backend.h over segs (validated here), then host sampling of the drawn rows. */
weft_status cu_forward(void *self, weft_segment *segs, int n_segs, weft_err *err);

enum {
    WEFT_CU_T_ATTN = 1,
    WEFT_CU_T_ROPE = 2,
    WEFT_CU_T_NORM = 4,
    WEFT_CU_T_PREP = 8,
    WEFT_CU_T_QKV = 16,
    WEFT_CU_T_O = 32,
    WEFT_CU_T_GU = 64,
    WEFT_CU_T_DOWN = 128,
    WEFT_CU_T_EVENTS = 256,
    WEFT_CU_T_RQ4 = 512,       /* not a stage: 5..16-row 4-bit matmuls with 4 quads per block (weft_cu_epi) */
    WEFT_CU_T_NO_GEMM = 1024,  /* not a stage: 64+-row 4-bit matmuls without the GEMM (weft_cu_epi) */
    WEFT_CU_T_NO_WGMMA = 4096, /* not a stage: many-row Q4_0 matmuls on the mma.sync GEMM, not wgmma */
    WEFT_CU_T_NO_X1S =
        8192, /* not a stage: 1-row 4-bit matmuls without the shared-memory row (weft_cu_epi) */
    WEFT_CU_T_NO_SPLIT = 16384, /* not a stage: few-row 4-bit matmuls without the cluster-split GEMM */
    WEFT_CU_T_NO_GEMV =
        32768, /* not a stage: one-row 4-bit matmuls on mma_q4x.cu's kernels, not gemv_q4.cu */
    WEFT_CU_T_NO_FUSED_ATTN = 65536, /* not a stage: batch-1 attention as separate kernels (rope, attention,
                                       prep), not weft_cu_attention_decode */
    WEFT_CU_T_WGMMA_R64 = 131072,    /* not a stage: the f16 wgmma GEMM in 64-row tiles at any row count */
    WEFT_CU_T_NO_BULK = 262144,      /* not a stage: the f16 wgmma GEMM with per-thread copies (no epi.xb) */
    WEFT_CU_T_ATTN_WG = 1048576,     /* not a stage: the f16 prefill attention tiles on wgmma (warps -8) */
    WEFT_CU_T_ATTN_WG2 = 2097152     /* not a stage: the same with P·V in two accumulator sets (warps -7) */
};

#endif
