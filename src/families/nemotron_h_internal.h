/* Private to src/families/nemotron_h*.c (and its unit test): the nemotron_h model, its per-stream state
 * layout and the block kernels. Math: docs families-and-formats §4 and §10. */
#ifndef WEFT_NEMOTRON_H_INTERNAL_H
#define WEFT_NEMOTRON_H_INTERNAL_H

#include "weft/families.h"

/* Rollback window (rows): a forward journals the last NH_KEEP_WINDOW rows it feeds of each stream (the
 * recurrent states before the first of them stay in the inactive buffer, plus each row's raw Mamba inputs),
 * so keep() can roll back to any position in [len − rows journaled, len]. Verify windows are the pending
 * token plus the drafts (≤ 16). */
#define NH_KEEP_WINDOW 16

typedef struct nh_mamba {
    const weft_tensor *in_proj, *out_proj; /* [proj, H], [H, d_inner] */
    float *in_bias, *out_bias;             /* [proj], [H] or NULL (mamba_proj_bias) */
    float *conv_w;                         /* [conv_dim, K]: w[c,k], tap K−1 multiplies the current token */
    float *conv_b;                         /* [conv_dim] or NULL (use_conv_bias false) */
    float *A;                              /* [Hm] −exp(A_log) */
    float *D, *dt_bias;                    /* [Hm] */
    float *norm;                           /* [d_inner] gated group norm weight */
    int idx;                               /* index among the Mamba layers (state offset) */
} nh_mamba;

typedef struct nh_attn {
    const weft_tensor *wq, *wk, *wv, *wo;
    float *bq, *bk, *bv, *bo; /* attention_bias, else NULL */
    int idx;                  /* index among the attention layers (cache offset) */
} nh_attn;

typedef struct nh_mlp {
    const weft_tensor *up, *down; /* [I, H], [H, I] */
    float *bu, *bd;               /* mlp_bias, else NULL */
} nh_mlp;

typedef struct nh_moe {
    const weft_tensor *router;           /* [E, H], computed in fp32 */
    float *corr;                         /* [E] e_score_correction_bias (selection only) */
    weft_tensor *up, *down;              /* [E] 2-D views: [Ie, Hl] and [Hl, Ie] */
    const weft_tensor *sh_up, *sh_down;  /* [Is, H], [H, Is] or NULL */
    const weft_tensor *lat_in, *lat_out; /* fc1_latent_proj [Hl, H], fc2_latent_proj [H, Hl] or NULL */
    int64_t Is;
} nh_moe;

typedef struct nh_layer {
    weft_layer_kind kind;
    float *norm; /* [H] plain RMSNorm before the mixer */
    nh_mamba mamba;
    nh_attn attn;
    nh_mlp mlp;
    nh_moe moe;
} nh_layer;

/* One stream's rows in a call: rows [a, b) (consecutive positions). Rows before `snap` advance the recurrent
 * buffer `from` in place; row `snap` reads buffer `from` and writes buffer 1 − from, which later rows advance
 * in place, so buffer `from` keeps the states at the window start. */
typedef struct nh_seg {
    int a, b, snap, from;
    void *state;
} nh_seg;

typedef struct nh_model {
    int64_t H, V, L;
    float eps;
    /* Mamba-2 */
    int64_t Hm, P, N, G, K, d_inner, conv_dim, proj;
    float dt_lo, dt_hi;
    /* attention */
    int64_t Hq, Hkv, d;
    /* MLP / MoE */
    int64_t I, E, topk, Ie, Hl, n_group, topk_group, Is_max;
    bool norm_topk;
    float routed_scale;
    int n_mamba, n_attn;
    const weft_tensor *embed, *head;
    float *norm_f;
    nh_layer *layers;
    int max_rows, max_context;
    size_t weights_bytes;
    /* activations for max_rows rows */
    float *x, *xb, *xo;         /* [R, H] */
    float *proj_buf;            /* [R, max(proj, Hq·d + 2·Hkv·d)] */
    float *xbc;                 /* [R, conv_dim] conv + silu output */
    float *y;                   /* [R, max(d_inner, Hq·d)] */
    float *ffn;                 /* [R, max(I, Ie, Is)] */
    float *lat, *acc, *gx, *gy; /* MoE: [R, Hl] each */
    float *score, *sel_w;       /* [R, E], [R, E] (weight of expert e for row r, 0 when not chosen) */
    unsigned char *sel;         /* [R, E] chosen flags */
    int *grows;                 /* [R] rows gathered for one expert */
    const float **krow, **vrow;
    int *pos;
    nh_seg *segs;  /* [R] */
    float *replay; /* [N] keep()'s inline scratch */
} nh_model;

/* ---- state layout (nemotron_h.c) ----
 * [hdr | per Mamba layer: 2 buffers of (conv [conv_dim, K−1], ssm [Hm, P, N]) | per attention layer: K, V
 *  [cap, Hkv·d] | per Mamba layer: NH_KEEP_WINDOW journal records of (raw xBC [conv_dim], raw dt [Hm])].
 * hdr.cur names the live buffer; the other holds the states at hdr.win_start (the journal's first position);
 * records [0, n_rec) are positions win_start.. len − 1, the rest are zero. The live buffers and KV rows
 * [0, len) (= snapshot_save's bytes) depend only on the tokens fed; the rest describes the last call. */
typedef struct nh_hdr {
    int32_t capacity, len, cur, win_start, n_rec;
    int32_t pad[11];
} nh_hdr;

float *weft_nh_conv(const nh_model *m, void *state, int mamba_idx, int buf);
float *weft_nh_ssm(const nh_model *m, void *state, int mamba_idx, int buf);
float *weft_nh_record(const nh_model *m, void *state, int mamba_idx, int rec);

/* ---- Mamba-2 (nemotron_h_mamba.c) ---- */
/* The mixer over every segment: out[r] = Mamba(xb[r]) into m->xo, advancing each stream's conv/SSM states
 * row by row (the decode step's arithmetic for every row) and journaling rows from seg.snap on. */
void weft_nh_mamba_forward(nh_model *m, weft_pool *pool, const nh_mamba *ly, const nh_seg *segs, int n_segs,
                           int n);
/* Replays the first n_keep journaled rows of Mamba layer ly from the window-start buffer into the live one
 * (keep()). The same task functions as the forward, run inline (pool NULL) or on a pool: the bits are those
 * of a direct feed. */
void weft_nh_mamba_replay(nh_model *m, weft_pool *pool, const nh_mamba *ly, void *state, int n_keep);

/* ---- FFN blocks (nemotron_h_moe.c): out into m->xo for rows [0, n) of m->xb ---- */
void weft_nh_mlp_forward(nh_model *m, weft_pool *pool, const nh_mlp *ly, int n);
void weft_nh_moe_forward(nh_model *m, weft_pool *pool, const nh_moe *ly, int n);
/* Routing of one row (§4.6): chosen[e] set for the top-k experts of the (group-masked) corrected scores,
 * w[e] their weights (uncorrected sigmoid, normalised, scaled; 0 for the others). logits [E]: the fp32 router
 * outputs, overwritten with the selection scores. */
void weft_nh_route(const nh_model *m, const float *corr, float *logits, float *w, unsigned char *chosen);

/* y[i] += b[i] for n_rows rows of n (stride n) when b is non-NULL. */
void weft_nh_add_bias(float *y, const float *b, int64_t n_rows, int64_t n);

/* ---- loading (nemotron_h_load.c) ---- */
weft_status weft_nh_load(nh_model *m, const weft_config *cfg, const weft_tensor_set *ts,
                         const weft_family_opts *opts, weft_err *err);
void weft_nh_free_weights(nh_model *m);
/* Resolves one block named prefix + "layers.L." of kind ly->kind (ATTENTION, MLP or MOE: its `norm` and
 * `mixer.*`), e.g. the MTP block's sublayers (prefix "mtp.", nemotron_h_mtp.c); *bytes += decoded bytes.
 * The caller frees what it allocated (norm, biases, corr, up, down) even on failure. */
weft_status weft_nh_load_block(nh_model *m, const weft_config *cfg, const weft_tensor_set *ts,
                               const char *prefix, int64_t l, nh_layer *ly, size_t *bytes, weft_err *err);

#endif
