/* qwen3_5_impl.h — internals shared by the qwen3_5 / qwen3_5_moe family files (src/families/qwen3_5*.c).
 *
 * Files: qwen3_5.c (tensor resolution, create/destroy), qwen3_5_forward.c (the forward: skeleton, gated
 * attention, MLP/MoE), qwen3_5_gdn.c (Gated DeltaNet kernels: conv, prep, token recurrence), qwen3_5_state.c
 * (per-stream state layout, keep/rollback, prompt-cache snapshots).
 *
 * Stream state (one contiguous allocation, 64-byte header first):
 *   q35_hdr
 *   block[2]      two recurrent blocks; each holds, per GDN layer, the conv state [K-1][C] (the last K-1 raw
 *                 conv inputs, oldest first) then the recurrent state S [Hv][dk][dv] fp32. hdr.cur is the one
 *                 holding the state at hdr.len; hdr.start the one holding it at hdr.win_start.
 *   window        what rolls the last forward back (Q35_WINDOW rows): REPLAY mode: per recorded row and GDN
 *                 layer the raw inputs of the recurrence, m [C] | b [Hv] | α [Hv]; SNAPSHOT mode: per
 * recorded row a whole recurrent block (the state after that row). kv            per attention layer K
 * [capacity][Hkv·d] then V [capacity][Hkv·d] fp32 (keys after norm+RoPE).
 *
 * Double buffering: a forward reads a stream's recurrent state from block[cur] and writes the new state into
 * block[1-cur] (its first row's step is computed out of place, the next ones in place), so the state at the
 * start of the forward survives untouched in the other block without any copy. Rolling back to a position
 * inside that forward starts from it. */
#ifndef WEFT_QWEN3_5_IMPL_H
#define WEFT_QWEN3_5_IMPL_H

#include "weft/families.h"

/* Rows of a stream's last forward that can be rolled back to (a verify window). A forward that feeds a stream
 * more rows is still fine: keep() can then go back to the forward's start, to any of its first Q35_WINDOW
 * rows, or stay at its end. */
#define Q35_WINDOW 16

/* How keep() rebuilds the recurrent state inside the window (measured in tests/unit/test_qwen3_5_state.c):
 * REPLAY (default): the forward records the recurrence inputs of the first Q35_WINDOW rows; keep re-runs the
 * conv + recurrence of the kept rows from the window start (same code, same bits).
 * SNAPSHOT: the forward copies the whole recurrent state after each of its first Q35_WINDOW rows; keep copies
 * one back. */
typedef enum q35_keep_mode { Q35_KEEP_REPLAY = 0, Q35_KEEP_SNAPSHOT = 1 } q35_keep_mode;

typedef struct q35_hdr {
    int capacity;
    int len;       /* positions held: the next row of this stream is at position len */
    int cur;       /* recurrent block (0/1) holding the state at len */
    int start;     /* recurrent block holding the state at win_start */
    int win_start; /* position of the first row of the last forward that fed this stream */
    int win_rec;   /* rows of that forward recorded in the window (<= Q35_WINDOW): keep(p) works for
                      win_start <= p <= win_start + win_rec, and for p == len */
    int pad[10];   /* 64 bytes: keeps the float areas 64-byte aligned */
} q35_hdr;

typedef struct q35_layer {
    bool linear;                /* Gated DeltaNet (else gated full attention) */
    int idx;                    /* index among the GDN layers, or among the attention layers */
    float *in_norm, *post_norm; /* [H], zero-centred weights already as 1+w */
    /* Gated DeltaNet */
    const weft_tensor *w_qkv, *w_z, *w_b, *w_a, *w_out;
    float *conv_w;  /* [C][K] */
    float *conv_b;  /* [C] or NULL */
    float *neg_a;   /* [Hv] −exp(A_log) */
    float *dt_bias; /* [Hv] */
    float *gnorm;   /* [dv] plain gated-norm weight */
    /* gated attention */
    const weft_tensor *wq, *wk, *wv, *wo;
    float *q_norm, *k_norm; /* [d], as 1+w */
    /* dense MLP */
    const weft_tensor *wg, *wu, *wd;
    /* MoE */
    const weft_tensor *router, *sh_g, *sh_u, *sh_d, *sh_gate;
    weft_tensor *ex; /* [3E] per-expert 2-D views: gate e at 3e, up at 3e+1, down at 3e+2 */
} q35_layer;

/* The rows of one stream in a call, contiguous in the family's internal row order. */
typedef struct q35_group {
    int slot, r0, n; /* internal rows [r0, r0+n) */
    int pos0;        /* position of the first row (= the stream's len) */
    int rec;         /* rows recorded in the window: min(n, Q35_WINDOW) */
    q35_hdr *hdr;
    float *src, *dst; /* recurrent blocks: state before the call, state written by it */
    float *win;       /* the stream's window area */
} q35_group;

typedef struct q35 {
    int64_t H, V, L, I;
    int64_t Hq, Hkv, d, qrows; /* qrows: q_proj rows (2·Hq·d with the output gate, else Hq·d) */
    bool out_gate;
    int64_t K, dk, dv, Hk, Hv, C, key_dim, value_dim;
    int64_t E, topk, MI, SI;
    float eps;
    bool moe, mlx;
    bool tiled;     /* GDN value head h pairs with key head h mod Hk (GGUF), else h / (Hv/Hk) (HF, MLX) */
    bool a_neg_exp; /* the stored A_log tensor already holds −exp(A_log) (GGUF ssm_a) */
    int n_gdn, n_attn;
    q35_keep_mode keep_mode;
    const weft_tensor *embed, *head;
    float *final_norm;
    q35_layer *layers;
    weft_rope_table rope;
    int max_rows, max_context, act_rows;
    size_t conv_floats;  /* (K-1)·C */
    size_t layer_floats; /* conv_floats + Hv·dk·dv: one GDN layer's part of a recurrent block */
    size_t block_floats; /* n_gdn · layer_floats */
    size_t rec_floats;   /* one replay row: n_gdn · (C + 2·Hv) */
    size_t scratch_floats;
    size_t weights_bytes;
    /* activations, act_rows rows (internal row order) */
    int *perm;           /* internal row -> caller row */
    int *inv;            /* caller row -> internal row */
    int *row_group;      /* caller row -> group */
    q35_group *groups;   /* [act_rows] */
    int *pos;            /* internal row -> position */
    float *x, *xb, *xo;  /* [R, H] */
    float *mqkv;         /* [R, C] raw conv inputs (GDN) */
    float *cbuf;         /* [R, C] conv outputs (GDN) */
    float *z, *o;        /* [R, value_dim] */
    float *bb, *aa;      /* [R, Hv] */
    float *beta, *decay; /* [R, Hv] */
    float *uq;           /* [R, qrows] q_proj output */
    float *q, *att;      /* [R, Hq·d] */
    float *k, *v;        /* [R, Hkv·d] */
    float *g, *u;        /* [R, max(I, MI, SI)] */
    float *ey;           /* [R·topk, H] routed expert outputs (MoE) */
    float *ex_x, *ex_y;  /* [R, H] rows gathered for one expert / its output */
    float *rl;           /* [R, E] router logits */
    float *sg;           /* [R] shared-expert gate logits */
    int *sel;            /* [R·topk] selected experts */
    float *sw;           /* [R·topk] their weights */
    int *ex_rows;        /* [R·topk] (row·topk + slot) entries routed to the current expert */
    const float **krow, **vrow;
    float *kscratch; /* scratch_floats: keep() runs the recurrence on the calling thread */
} q35;

/* ---- state (qwen3_5_state.c) ---- */
size_t q35_state_bytes(const void *fam, int capacity);
void q35_state_init(const void *fam, void *state, int capacity);
float *q35_block(const q35 *m, q35_hdr *h, int which);
float *q35_window(const q35 *m, q35_hdr *h);
float *q35_kv(const q35 *m, q35_hdr *h, int attn_idx, int which);
weft_status q35_keep(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err);
size_t q35_snapshot_bytes(const void *fam, int pos);
weft_status q35_snapshot_save(const void *fam, const void *state, int pos, void *dst, weft_err *err);
weft_status q35_snapshot_restore(const void *fam, void *state, int pos, const void *src, weft_err *err);

/* ---- Gated DeltaNet (qwen3_5_gdn.c) ---- */

/* One GDN layer's recurrence over the rows of some groups. The inputs of internal row r are m at
 * mq + r·m_stride (C raw conv inputs), b and α at bq/aq + r·ba_stride (Hv each). */
typedef struct q35_gdn_job {
    const q35 *m;
    const q35_layer *ly;
    const q35_group *groups;
    int n_groups;
    const float *mq, *bq, *aq;
    int64_t m_stride, ba_stride;
    float *c;            /* [rows, C] conv outputs; q and k normalised in place by the prep pass */
    float *beta, *decay; /* [rows, Hv] */
    const float *z;      /* [rows, value_dim] gate of the gated norm, or NULL (replay: output unused) */
    float *o;            /* [rows, value_dim] recurrence output (gated-normed when z) */
    int64_t conv_chunks; /* channel chunks per group */
    bool snapshots;      /* SNAPSHOT keep mode: copy the state after each recorded row into the window */
} q35_gdn_job;

/* Runs the three passes (conv, prep, recurrence) of a job: over the pool when pool is non-NULL, else on the
 * calling thread with `scratch` (2·dv floats). The arithmetic of every output is the same either way. */
void q35_gdn_run(weft_pool *pool, q35_gdn_job *job, int n_rows, float *scratch);

/* ---- forward (qwen3_5_forward.c) ---- */
weft_status q35_forward(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                        const int *out_rows, int n_out, float *logits, weft_err *err);

/* ---- for the MTP head (qwen3_5_mtp.c) ---- */
/* The FFN of ly (SwiGLU, or MoE when m->moe) over rows [0, n) of m->xb into m->xo, as the trunk runs it. */
void q35_ffn(q35 *m, weft_pool *pool, const q35_layer *ly, int n);
/* Resolves a full-attention decoder layer prefix + "layers.L." (input/post norms, self_attn, mlp) with the
 * trunk's rules (shift: +1 on zero-centred norms); *decoded += bytes of fp32 copies. Errors as create. */
weft_status q35_load_attn_layer(q35 *m, const weft_tensor_set *ts, const char *prefix, int64_t l, bool shift,
                                q35_layer *ly, size_t *decoded, weft_err *err);

/* Internal, for tests: selects the keep mode of a model created by weft_qwen3_5_create. Call before any
 * state is sized or initialised (state_bytes depends on it). WEFT_EINVAL for an unknown mode. */
weft_status weft_qwen3_5_set_keep_mode(weft_family_model *fm, q35_keep_mode mode, weft_err *err);

#endif
