/* qwen3_5_mtp.c — the Qwen3.5 MTP draft head (families-and-formats §3.9) over the qwen3_5 / qwen3_5_moe
 * trunk; the stream-state and drafting rules are mtp.c's (mtp.h).
 *
 *   x = fc( [ RMSNorm_1p(E[t_{i+1}]; pre_fc_norm_embedding) | RMSNorm_1p(h_i; pre_fc_norm_hidden) ] )
 *   x += GatedAttn(RMSNorm_1p(x; input_layernorm))       one full-attention layer, own KV cache, partial RoPE
 *   x += FFN(RMSNorm_1p(x; post_attention_layernorm))     SwiGLU, or MoE for qwen3_5_moe (the trunk's code)
 *   y = RMSNorm_1p(x; mtp.norm);  logits(t_{i+2}) = y·W_headᵀ  (the trunk's embed_tokens and lm_head)
 *
 * Tensors (hub names; the MLX sidecar is renamed to them on load): mtp.fc.weight [H, 2H],
 * mtp.pre_fc_norm_{embedding,hidden}.weight, mtp.norm.weight [H], mtp.layers.0.* as a trunk full-attention
 * layer (q_proj with the output gate, k/v/o_proj, q/k_norm, input/post-attention norms, mlp.* dense or
 * MoE in any expert storage the trunk accepts). Zero-centred norms get +1 unless the storage has it baked
 * in (MLX). Only mtp.layers.0 is used when mtp_num_hidden_layers > 1 (its later layers would serve deeper
 * steps; using layer 0 for every step changes only what is proposed). RoPE position of head row i: i. */
#include "families/mtp.h"
#include "families/qwen3_5_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct q35_head {
    q35 *m;
    const weft_tensor *fc;       /* [H, 2H] */
    float *pre_e, *pre_h, *norm; /* [H], as 1+w */
    q35_layer ly;                /* mtp.layers.0 */
    weft_rope_table rope;
    float *cat; /* [R, 2H] */
    float *x;   /* [R, H] residual stream of the head */
    float *e;   /* [H] one embedding row */
    int *apos;  /* [R] attention positions, relative to the stream's head_start */
} q35_head;

static int q35h_capacity(const void *st) {
    return ((const q35_hdr *)st)->capacity;
}

static int q35h_length(const void *st) {
    return ((const q35_hdr *)st)->len;
}

/* The trunk's last forward left each row's final residual in m->x (internal row order, m->inv maps caller
 * rows); the hidden the vocab head reads is its final norm, computed here exactly as the trunk does. */
static void q35h_hidden(mtp_model *mm, int n, float *out) {
    const q35_head *hd = mm->head;
    const q35 *m = hd->m;
    for (int r = 0; r < n; r++)
        weft_rmsnorm(out + (int64_t)r * m->H, m->x + (int64_t)m->inv[r] * m->H, m->final_norm, m->H, m->eps);
}

static inline float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static weft_status q35h_run(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid,
                            float *y, weft_err *err) {
    q35_head *hd = mm->head;
    q35 *m = hd->m;
    const q35_layer *ly = &hd->ly;
    const int64_t H = m->H, d = m->d, qd = m->Hq * d, kvd = m->Hkv * d;
    for (int r = 0; r < n; r++) {
        weft_status st = weft_tensor_dequant_row(m->embed, rows[r].tok, hd->e, err);
        if (st) return st;
        float *c = hd->cat + (int64_t)r * 2 * H;
        weft_rmsnorm(c, hd->e, hd->pre_e, H, m->eps); /* embedding first (§3.9) */
        weft_rmsnorm(c + H, hid + (int64_t)r * H, hd->pre_h, H, m->eps);
    }
    weft_matmul(pool, hd->fc, hd->cat, n, hd->x, H);
    for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, hd->x + r * H, ly->in_norm, H, m->eps);
    weft_matmul(pool, ly->wk, m->xb, n, m->k, kvd);
    weft_matmul(pool, ly->wv, m->xb, n, m->v, kvd);
    for (int r = 0; r < n; r++) {
        float *k = m->k + r * kvd;
        for (int64_t h = 0; h < m->Hkv; h++) weft_rmsnorm(k + h * d, k + h * d, ly->k_norm, d, m->eps);
        weft_rope_apply(&hd->rope, k, (int)m->Hkv, (int)d, rows[r].pos);
        mtp_hdr *hs = rows[r].hs;
        memcpy(weft_mtp_kv(mm, hs, 0) + (int64_t)rows[r].pos * kvd, k, (size_t)kvd * sizeof(float));
        memcpy(weft_mtp_kv(mm, hs, 1) + (int64_t)rows[r].pos * kvd, m->v + r * kvd,
               (size_t)kvd * sizeof(float));
    }
    if (!y) return WEFT_OK; /* absorbed rows: only their K/V matter */
    weft_matmul(pool, ly->wq, m->xb, n, m->uq, m->qrows);
    for (int r = 0; r < n; r++) {
        const float *u = m->uq + r * m->qrows;
        float *q = m->q + r * qd;
        for (int64_t h = 0; h < m->Hq; h++)
            weft_rmsnorm(q + h * d, u + h * (m->out_gate ? 2 * d : d), ly->q_norm, d, m->eps);
        weft_rope_apply(&hd->rope, q, (int)m->Hq, (int)d, rows[r].pos);
        mtp_hdr *hs = rows[r].hs;
        m->krow[r] = weft_mtp_kv(mm, hs, 0) + (int64_t)hs->head_start * kvd;
        m->vrow[r] = weft_mtp_kv(mm, hs, 1) + (int64_t)hs->head_start * kvd;
        hd->apos[r] = rows[r].pos - hs->head_start;
    }
    weft_attn_args aa = {.n_rows = n,
                         .n_heads = (int)m->Hq,
                         .n_kv_heads = (int)m->Hkv,
                         .head_dim = (int)d,
                         .scale = 1.0f / sqrtf((float)d),
                         .q = m->q,
                         .q_stride = qd,
                         .out = m->att,
                         .out_stride = qd,
                         .k = m->krow,
                         .v = m->vrow,
                         .kv_stride = kvd,
                         .pos = hd->apos};
    weft_attention(pool, &aa);
    if (m->out_gate)
        for (int r = 0; r < n; r++)
            for (int64_t h = 0; h < m->Hq; h++) {
                const float *g = m->uq + r * m->qrows + h * 2 * d + d;
                float *o = m->att + r * qd + h * d;
                for (int64_t i = 0; i < d; i++) o[i] = o[i] * sigm(g[i]);
            }
    weft_matmul(pool, ly->wo, m->att, n, m->xo, H);
    for (int64_t i = 0; i < (int64_t)n * H; i++) hd->x[i] += m->xo[i];
    for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, hd->x + r * H, ly->post_norm, H, m->eps);
    q35_ffn(m, pool, ly, n);
    for (int64_t i = 0; i < (int64_t)n * H; i++) hd->x[i] += m->xo[i];
    for (int r = 0; r < n; r++) weft_rmsnorm(y + r * H, hd->x + r * H, hd->norm, H, m->eps);
    return WEFT_OK;
}

static void q35h_logits(mtp_model *mm, weft_pool *pool, const float *y, int n, float *logits) {
    const q35_head *hd = mm->head;
    weft_matmul(pool, hd->m->head, y, n, logits, hd->m->V);
}

static void q35h_destroy(void *head) {
    q35_head *hd = head;
    if (!hd) return;
    free(hd->pre_e);
    free(hd->pre_h);
    free(hd->norm);
    free(hd->ly.in_norm);
    free(hd->ly.post_norm);
    free(hd->ly.q_norm);
    free(hd->ly.k_norm);
    free(hd->ly.ex);
    weft_rope_free(&hd->rope);
    free(hd->cat);
    free(hd->x);
    free(hd->e);
    free(hd->apos);
    free(hd);
}

static const mtp_head_vt Q35_HEAD = {
    .capacity = q35h_capacity,
    .length = q35h_length,
    .trunk_hidden = q35h_hidden,
    .run = q35h_run,
    .logits = q35h_logits,
    .destroy = q35h_destroy,
};

/* hub: zero-centred norms are stored as w (+1 here); MLX sidecars differ by producer (§6.2): a head whose
 * three outer norms average above 0.5 has the +1 baked in (trained zero-centred weights sit near 0). */
static weft_status load_head(q35_head *hd, const weft_config *cfg, const weft_tensor_set *ts, bool mlx,
                             size_t *bytes, weft_err *err) {
    q35 *m = hd->m;
    const int64_t H = m->H;
    hd->fc = weft_mtp_mat(ts, "qwen3_5", "mtp.fc.weight", H, 2 * H, err);
    if (!hd->fc) return err ? err->code : WEFT_EFORMAT;
    static const char *const norms[3] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                                         "mtp.norm.weight"};
    float **dst[3] = {&hd->pre_e, &hd->pre_h, &hd->norm};
    double sum = 0;
    for (int i = 0; i < 3; i++) {
        if (!(*dst[i] = weft_mtp_vec(ts, "qwen3_5", norms[i], H, false, bytes, err)))
            return err ? err->code : WEFT_EFORMAT;
        for (int64_t j = 0; j < H; j++) sum += (*dst[i])[j];
    }
    const bool shift = !mlx || sum / (double)(3 * H) < 0.5;
    for (int i = 0; i < 3 && shift; i++)
        for (int64_t j = 0; j < H; j++) (*dst[i])[j] += 1.0f;
    weft_status st = q35_load_attn_layer(m, ts, "mtp.", 0, shift, &hd->ly, bytes, err);
    if (st) return st;
    if ((st = weft_rope_init(&hd->rope, &cfg->rope, m->d, err))) return st;
    const size_t R = (size_t)m->max_rows;
    hd->cat = malloc(R * 2 * (size_t)H * sizeof(float));
    hd->x = malloc(R * (size_t)H * sizeof(float));
    hd->e = malloc((size_t)H * sizeof(float));
    hd->apos = malloc(R * sizeof(int));
    if (!hd->cat || !hd->x || !hd->e || !hd->apos)
        return weft_err_set(err, WEFT_ENOMEM, "qwen3_5: out of memory for the MTP head (%zu rows)", R);
    return WEFT_OK;
}

weft_status weft_qwen3_5_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                    const weft_family_opts *opts, weft_family_model *fm, weft_err *err) {
    /* MLX conversions drop mtp_num_hidden_layers with the head: a sidecar's tensors are the sign there */
    if ((cfg->mtp_num_hidden_layers < 1 && !opts->mlx) || !weft_mtp_present(ts)) return WEFT_OK;
    q35 *m = fm->self;
    q35_head *hd = calloc(1, sizeof *hd);
    weft_status st = WEFT_ENOMEM;
    size_t bytes = 0;
    if (!hd)
        weft_err_set(err, WEFT_ENOMEM, "out of memory");
    else {
        hd->m = m;
        st = load_head(hd, cfg, ts, opts->mlx, &bytes, err);
    }
    if (st) {
        q35h_destroy(hd);
        fm->ops->destroy(fm->self);
        memset(fm, 0, sizeof *fm);
        return st;
    }
    size_t scratch = (size_t)(2 * m->H); /* fc rows are 2H wide */
    return weft_mtp_wrap(fm, &Q35_HEAD, hd, m->H, m->Hkv * m->d, m->max_context, scratch, bytes, err);
}

const float *weft_qwen3_5_mtp_norm(const weft_family_model *fm) {
    if (!fm->ops || !fm->ops->draft) return NULL;
    const mtp_model *mm = fm->self;
    return mm->vt == &Q35_HEAD ? ((const q35_head *)mm->head)->norm : NULL;
}
