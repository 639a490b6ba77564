/* qwen3_5_mtp.c — the Qwen3.5 MTP draft head (families-and-formats §3.9) over the qwen3_5 / qwen3_5_moe
 * trunk; the stream-state and drafting rules are mtp.c's (mtp.h).
 *
 *   x = fc( [ RMSNorm_1p(E[t_{i+1}]; pre_fc_norm_embedding) | RMSNorm_1p(h_i; pre_fc_norm_hidden) ] )
 *   x += GatedAttn(RMSNorm_1p(x; input_layernorm))       one full-attention layer, own KV cache, partial RoPE
 *   x += FFN(RMSNorm_1p(x; post_attention_layernorm))     SwiGLU, or MoE for qwen3_5_moe (the trunk's code)
 *   y = RMSNorm_1p(x; mtp.norm);  logits(t_{i+2}) = y·W_headᵀ  (the trunk's embed_tokens and lm_head)
 *
 * Tensors (hub names; the MLX sidecar and GGUF NextN blocks are renamed to them on load): mtp.fc.weight [H,
 * 2H], mtp.pre_fc_norm_{embedding,hidden}.weight, mtp.norm.weight [H], mtp.layers.0.* as a trunk
 * full-attention layer (q_proj with the output gate, k/v/o_proj, q/k_norm, input/post-attention norms, mlp.*
 * dense or MoE in any expert storage the trunk accepts). Zero-centred norms get +1 unless the storage has it
 * baked in (MLX, GGUF). Only mtp.layers.0 is used when mtp_num_hidden_layers > 1 (its later layers would
 * serve deeper steps; using layer 0 for every step changes only what is proposed). RoPE position of head row
 * i: i. */
#include "families/mtp.h"
#include "families/qwen3_5_impl.h"

#include <stdlib.h>

typedef struct q35_head {
    q35 *m;
    mtp_io io;    /* fc [H, 2H], pre_fc_norm_embedding, pre_fc_norm_hidden, mtp.norm (norms as 1+w) */
    q35_layer ly; /* mtp.layers.0 */
    weft_rope_table rope;
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
    weft_status st = weft_mtp_head_in(mm, pool, rows, n, hid, ly->in_norm, m->xb, err);
    if (st) return st;
    weft_matmul(pool, ly->wk, m->xb, n, m->k, kvd);
    weft_matmul(pool, ly->wv, m->xb, n, m->v, kvd);
    for (int r = 0; r < n; r++) {
        float *k = m->k + r * kvd;
        for (int64_t h = 0; h < m->Hkv; h++) weft_rmsnorm(k + h * d, k + h * d, ly->k_norm, d, m->eps);
        weft_rope_apply(&hd->rope, k, (int)m->Hkv, (int)d, rows[r].pos);
    }
    weft_mtp_store_kv(mm, rows, n, m->k, m->v);
    if (!y) return WEFT_OK; /* absorbed rows: only their K/V matter */
    weft_matmul(pool, ly->wq, m->xb, n, m->uq, m->qrows);
    for (int r = 0; r < n; r++) {
        const float *u = m->uq + r * m->qrows;
        float *q = m->q + r * qd;
        for (int64_t h = 0; h < m->Hq; h++)
            weft_rmsnorm(q + h * d, u + h * (m->out_gate ? 2 * d : d), ly->q_norm, d, m->eps);
        weft_rope_apply(&hd->rope, q, (int)m->Hq, (int)d, rows[r].pos);
    }
    weft_mtp_attend(mm, pool, rows, n, m->Hq, m->Hkv, d, m->q, m->att);
    if (m->out_gate)
        for (int r = 0; r < n; r++)
            for (int64_t h = 0; h < m->Hq; h++) {
                const float *g = m->uq + r * m->qrows + h * 2 * d + d;
                float *o = m->att + r * qd + h * d;
                for (int64_t i = 0; i < d; i++) o[i] = o[i] * sigm(g[i]);
            }
    weft_matmul(pool, ly->wo, m->att, n, m->xo, H);
    weft_mtp_residual(mm, n, m->xo, ly->post_norm, m->xb);
    q35_ffn(m, pool, ly, n);
    weft_mtp_residual(mm, n, m->xo, hd->io.out_norm, y);
    return WEFT_OK;
}

static void q35h_destroy(void *head) {
    q35_head *hd = head;
    if (!hd) return;
    weft_mtp_io_free(&hd->io);
    free(hd->ly.in_norm);
    free(hd->ly.post_norm);
    free(hd->ly.q_norm);
    free(hd->ly.k_norm);
    free(hd->ly.ex);
    weft_rope_free(&hd->rope);
    free(hd);
}

static const mtp_head_vt Q35_HEAD = {
    .capacity = q35h_capacity,
    .length = q35h_length,
    .trunk_hidden = q35h_hidden,
    .run = q35h_run,
    .destroy = q35h_destroy,
};

/* hub: zero-centred norms are stored as w (+1 here); GGUF stores 1 + w (cfg->norms_plus_one, the converter's
 * transform, trunk and NextN block alike); MLX sidecars differ by producer (§6.2): a head whose three outer
 * norms average above 0.5 has the +1 baked in (trained zero-centred weights sit near 0). A GGUF NextN block
 * may carry its own embedding and vocab head (nextn.embed_tokens / nextn.shared_head_head → mtp.embed_tokens
 * / mtp.shared_head_head, [V, H]): used instead of the trunk's when present, as llama.cpp's graph_mtp does.
 */
static weft_status load_head(q35_head *hd, const weft_config *cfg, const weft_tensor_set *ts, bool mlx,
                             size_t *bytes, weft_err *err) {
    q35 *m = hd->m;
    const int64_t H = m->H;
    static const char *const norms[3] = {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                                         "mtp.norm.weight"};
    hd->io = (mtp_io){.embed = m->embed, .lm_head = m->head, .eps = m->eps};
    if (weft_tensor_set_get(ts, "mtp.embed_tokens.weight") &&
        !(hd->io.embed = weft_mtp_mat(ts, "qwen3_5", "mtp.embed_tokens.weight", m->V, H, err)))
        return err ? err->code : WEFT_EFORMAT;
    if (weft_tensor_set_get(ts, "mtp.shared_head_head.weight") &&
        !(hd->io.lm_head = weft_mtp_mat(ts, "qwen3_5", "mtp.shared_head_head.weight", m->V, H, err)))
        return err ? err->code : WEFT_EFORMAT;
    weft_status st = weft_mtp_io_load(&hd->io, ts, "qwen3_5", "mtp.fc.weight", norms, H, bytes, err);
    if (st) return st;
    float *const outer[3] = {hd->io.enorm, hd->io.hnorm, hd->io.out_norm};
    double sum = 0;
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < H; j++) sum += outer[i][j];
    const bool shift = !cfg->norms_plus_one && (!mlx || sum / (double)(3 * H) < 0.5);
    for (int i = 0; i < 3 && shift; i++)
        for (int64_t j = 0; j < H; j++) outer[i][j] += 1.0f;
    if ((st = q35_load_attn_layer(m, ts, "mtp.", 0, shift, &hd->ly, bytes, err))) return st;
    return weft_rope_init(&hd->rope, &cfg->rope, m->d, err);
}

weft_status weft_qwen3_5_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                    const weft_family_opts *opts, weft_family_model *fm, weft_err *err) {
    /* MLX conversions drop mtp_num_hidden_layers with the head: a sidecar's tensors are the sign there */
    if ((cfg->mtp_num_hidden_layers < 1 && !opts->mlx) || !weft_mtp_present(ts)) return WEFT_OK;
    q35 *m = fm->self;
    q35_head *hd = calloc(1, sizeof *hd);
    if (!hd) return weft_mtp_discard(fm, &Q35_HEAD, NULL, weft_err_set(err, WEFT_ENOMEM, "out of memory"));
    hd->m = m;
    size_t bytes = 0;
    weft_status st = load_head(hd, cfg, ts, opts->mlx, &bytes, err);
    if (st) return weft_mtp_discard(fm, &Q35_HEAD, hd, st);
    return weft_mtp_wrap(fm, &Q35_HEAD, hd, &hd->io, m->H, m->Hkv * m->d, m->max_context, bytes, err);
}

const float *weft_qwen3_5_mtp_norm(const weft_family_model *fm) {
    if (!fm->ops || !fm->ops->draft) return NULL;
    const mtp_model *mm = fm->self;
    return mm->vt == &Q35_HEAD ? ((const q35_head *)mm->head)->io.out_norm : NULL;
}
