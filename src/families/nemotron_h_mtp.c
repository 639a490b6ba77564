/* nemotron_h_mtp.c — the Nemotron-H MTP draft head (families-and-formats §4.7, as TensorFold's cuda_mtp.zig)
 * over the nemotron_h trunk; the stream-state and drafting rules are mtp.c's (mtp.h).
 *
 *   x = eh_proj( [ RMSNorm(E[t_{i+1}]; enorm) | RMSNorm(h_i; hnorm) ] )          mtp.layers.0
 *   x += Attn(RMSNorm(x; layers.0.norm))      q/k/v/o_proj, no positional encoding, own KV cache
 *   x += MoE(RMSNorm(x; layers.1.norm))       the trunk's MoE (sigmoid router + correction bias, relu²)
 *   y = RMSNorm(x; layers.1.final_layernorm);  logits(t_{i+2}) = y·lm_headᵀ   (the trunk's embedding and
 * head) All norms plain, ε = layer_norm_epsilon. Tensors: mtp.layers.0.{enorm, hnorm, eh_proj [H, 2H], norm,
 * mixer.{q,k,v,o}_proj}, mtp.layers.1.{norm, mixer.(MoE as the trunk's, any expert storage it accepts),
 * final_layernorm}. The block pattern is the default mtp_layers_block_type ["attention", "moe"]. */
#include "families/mtp.h"
#include "families/nemotron_h_internal.h"

#include <stdlib.h>

typedef struct nh_head {
    nh_model *m;
    mtp_io io;          /* eh_proj [H, 2H], enorm, hnorm, layers.1.final_layernorm */
    nh_layer attn, moe; /* mtp.layers.0 (attention sublayer), mtp.layers.1 (MoE sublayer) */
    float *q, *att;     /* [R, Hq·d] */
    float *k, *v;       /* [R, Hkv·d] */
} nh_head;

static int nhh_capacity(const void *st) {
    return ((const nh_hdr *)st)->capacity;
}

static int nhh_length(const void *st) {
    return ((const nh_hdr *)st)->len;
}

/* The trunk keeps rows in caller order; m->x holds each row's final residual after its forward. */
static void nhh_hidden(mtp_model *mm, int n, float *out) {
    const nh_head *hd = mm->head;
    const nh_model *m = hd->m;
    for (int r = 0; r < n; r++)
        weft_rmsnorm(out + (int64_t)r * m->H, m->x + (int64_t)r * m->H, m->norm_f, m->H, m->eps);
}

static weft_status nhh_run(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid,
                           float *y, weft_err *err) {
    nh_head *hd = mm->head;
    nh_model *m = hd->m;
    const nh_attn *a = &hd->attn.attn;
    const int64_t H = m->H, d = m->d, qd = m->Hq * d, kvd = m->Hkv * d;
    weft_status st = weft_mtp_head_in(mm, pool, rows, n, hid, hd->attn.norm, m->xb, err);
    if (st) return st;
    weft_matmul(pool, a->wk, m->xb, n, hd->k, kvd);
    weft_matmul(pool, a->wv, m->xb, n, hd->v, kvd);
    weft_nh_add_bias(hd->k, a->bk, n, kvd);
    weft_nh_add_bias(hd->v, a->bv, n, kvd);
    weft_mtp_store_kv(mm, rows, n, hd->k, hd->v); /* no positional encoding */
    if (!y) return WEFT_OK;                       /* absorbed rows: only their K/V matter */
    weft_matmul(pool, a->wq, m->xb, n, hd->q, qd);
    weft_nh_add_bias(hd->q, a->bq, n, qd);
    weft_mtp_attend(mm, pool, rows, n, m->Hq, m->Hkv, d, hd->q, hd->att);
    weft_matmul(pool, a->wo, hd->att, n, m->xo, H);
    weft_nh_add_bias(m->xo, a->bo, n, H);
    weft_mtp_residual(mm, n, m->xo, hd->moe.norm, m->xb);
    weft_nh_moe_forward(m, pool, &hd->moe.moe, n);
    weft_mtp_residual(mm, n, m->xo, hd->io.out_norm, y);
    return WEFT_OK;
}

static void free_layer(nh_layer *ly) {
    free(ly->norm);
    free(ly->attn.bq);
    free(ly->attn.bk);
    free(ly->attn.bv);
    free(ly->attn.bo);
    free(ly->moe.corr);
    free(ly->moe.up);
    free(ly->moe.down);
}

static void nhh_destroy(void *head) {
    nh_head *hd = head;
    if (!hd) return;
    weft_mtp_io_free(&hd->io);
    free_layer(&hd->attn);
    free_layer(&hd->moe);
    free(hd->q);
    free(hd->att);
    free(hd->k);
    free(hd->v);
    free(hd);
}

static const mtp_head_vt NH_HEAD = {
    .capacity = nhh_capacity,
    .length = nhh_length,
    .trunk_hidden = nhh_hidden,
    .run = nhh_run,
    .destroy = nhh_destroy,
};

static weft_status load_head(nh_head *hd, const weft_config *cfg, const weft_tensor_set *ts, size_t *bytes,
                             weft_err *err) {
    nh_model *m = hd->m;
    if (m->Hq <= 0 || m->Hkv <= 0 || m->d <= 0 || m->Hq % m->Hkv || m->E <= 0 || m->topk <= 0)
        return weft_err_set(err, WEFT_EFORMAT,
                            "nemotron_h: the MTP head needs attention heads and MoE experts in the config "
                            "(heads %lld/%lld, head_dim %lld, experts %lld, top-k %lld)",
                            (long long)m->Hq, (long long)m->Hkv, (long long)m->d, (long long)m->E,
                            (long long)m->topk);
    static const char *const norms[3] = {"mtp.layers.0.enorm.weight", "mtp.layers.0.hnorm.weight",
                                         "mtp.layers.1.final_layernorm.weight"};
    hd->io = (mtp_io){.embed = m->embed, .lm_head = m->head, .eps = m->eps};
    weft_status st =
        weft_mtp_io_load(&hd->io, ts, "nemotron_h", "mtp.layers.0.eh_proj.weight", norms, m->H, bytes, err);
    if (st) return st;
    hd->attn.kind = WEFT_LAYER_ATTENTION;
    hd->moe.kind = WEFT_LAYER_MOE;
    if ((st = weft_nh_load_block(m, cfg, ts, "mtp.", 0, &hd->attn, bytes, err)) ||
        (st = weft_nh_load_block(m, cfg, ts, "mtp.", 1, &hd->moe, bytes, err)))
        return st;
    const size_t R = (size_t)m->max_rows, F = sizeof(float), qd = (size_t)(m->Hq * m->d),
                 kvd = (size_t)(m->Hkv * m->d);
    hd->q = malloc(R * qd * F);
    hd->att = malloc(R * qd * F);
    hd->k = malloc(R * kvd * F);
    hd->v = malloc(R * kvd * F);
    if (!hd->q || !hd->att || !hd->k || !hd->v)
        return weft_err_set(err, WEFT_ENOMEM, "nemotron_h: out of memory for the MTP head (%zu rows)", R);
    return WEFT_OK;
}

weft_status weft_nemotron_h_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                       const weft_family_opts *opts, weft_family_model *fm, weft_err *err) {
    /* MLX conversions drop the head (and may drop its config key): a sidecar's tensors are the sign there */
    if ((cfg->num_nextn_predict_layers < 1 && !opts->mlx) || !weft_mtp_present(ts)) return WEFT_OK;
    nh_model *m = fm->self;
    nh_head *hd = calloc(1, sizeof *hd);
    if (!hd) return weft_mtp_discard(fm, &NH_HEAD, NULL, weft_err_set(err, WEFT_ENOMEM, "out of memory"));
    hd->m = m;
    size_t bytes = 0;
    weft_status st = load_head(hd, cfg, ts, &bytes, err);
    if (st) return weft_mtp_discard(fm, &NH_HEAD, hd, st);
    return weft_mtp_wrap(fm, &NH_HEAD, hd, &hd->io, m->H, m->Hkv * m->d, m->max_context, bytes, err);
}
