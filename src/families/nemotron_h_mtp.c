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
#include <string.h>

typedef struct nh_head {
    nh_model *m;
    const weft_tensor *eh; /* [H, 2H] */
    float *enorm, *hnorm;  /* [H] */
    float *final_norm;     /* [H] */
    nh_layer attn, moe;    /* mtp.layers.0 (attention sublayer), mtp.layers.1 (MoE sublayer) */
    float *cat;            /* [R, 2H] */
    float *x;              /* [R, H] */
    float *q, *att;        /* [R, Hq·d] */
    float *k, *v;          /* [R, Hkv·d] */
    float *e;              /* [H] */
    int *apos;             /* [R] */
    const float **krow, **vrow;
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
    for (int r = 0; r < n; r++) {
        weft_status st = weft_tensor_dequant_row(m->embed, rows[r].tok, hd->e, err);
        if (st) return st;
        float *c = hd->cat + (int64_t)r * 2 * H;
        weft_rmsnorm(c, hd->e, hd->enorm, H, m->eps);
        weft_rmsnorm(c + H, hid + (int64_t)r * H, hd->hnorm, H, m->eps);
    }
    weft_matmul(pool, hd->eh, hd->cat, n, hd->x, H);
    for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, hd->x + r * H, hd->attn.norm, H, m->eps);
    weft_matmul(pool, a->wk, m->xb, n, hd->k, kvd);
    weft_matmul(pool, a->wv, m->xb, n, hd->v, kvd);
    weft_nh_add_bias(hd->k, a->bk, n, kvd);
    weft_nh_add_bias(hd->v, a->bv, n, kvd);
    for (int r = 0; r < n; r++) {
        mtp_hdr *hs = rows[r].hs;
        memcpy(weft_mtp_kv(mm, hs, 0) + (int64_t)rows[r].pos * kvd, hd->k + r * kvd,
               (size_t)kvd * sizeof(float));
        memcpy(weft_mtp_kv(mm, hs, 1) + (int64_t)rows[r].pos * kvd, hd->v + r * kvd,
               (size_t)kvd * sizeof(float));
    }
    if (!y) return WEFT_OK; /* absorbed rows: only their K/V matter */
    weft_matmul(pool, a->wq, m->xb, n, hd->q, qd);
    weft_nh_add_bias(hd->q, a->bq, n, qd);
    for (int r = 0; r < n; r++) {
        mtp_hdr *hs = rows[r].hs;
        hd->krow[r] = weft_mtp_kv(mm, hs, 0) + (int64_t)hs->head_start * kvd;
        hd->vrow[r] = weft_mtp_kv(mm, hs, 1) + (int64_t)hs->head_start * kvd;
        hd->apos[r] = rows[r].pos - hs->head_start;
    }
    weft_attn_args aa = {.n_rows = n,
                         .n_heads = (int)m->Hq,
                         .n_kv_heads = (int)m->Hkv,
                         .head_dim = (int)d,
                         .scale = 1.0f / sqrtf((float)d),
                         .q = hd->q,
                         .q_stride = qd,
                         .out = hd->att,
                         .out_stride = qd,
                         .k = hd->krow,
                         .v = hd->vrow,
                         .kv_stride = kvd,
                         .pos = hd->apos};
    weft_attention(pool, &aa);
    weft_matmul(pool, a->wo, hd->att, n, m->xo, H);
    weft_nh_add_bias(m->xo, a->bo, n, H);
    for (int64_t i = 0; i < (int64_t)n * H; i++) hd->x[i] += m->xo[i];
    for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, hd->x + r * H, hd->moe.norm, H, m->eps);
    weft_nh_moe_forward(m, pool, &hd->moe.moe, n);
    for (int64_t i = 0; i < (int64_t)n * H; i++) hd->x[i] += m->xo[i];
    for (int r = 0; r < n; r++) weft_rmsnorm(y + r * H, hd->x + r * H, hd->final_norm, H, m->eps);
    return WEFT_OK;
}

static void nhh_logits(mtp_model *mm, weft_pool *pool, const float *y, int n, float *logits) {
    const nh_head *hd = mm->head;
    weft_matmul(pool, hd->m->head, y, n, logits, hd->m->V);
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
    free(hd->enorm);
    free(hd->hnorm);
    free(hd->final_norm);
    free_layer(&hd->attn);
    free_layer(&hd->moe);
    void *bufs[] = {hd->cat, hd->x, hd->q,    hd->att,          hd->k,
                    hd->v,   hd->e, hd->apos, (void *)hd->krow, (void *)hd->vrow};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(hd);
}

static const mtp_head_vt NH_HEAD = {
    .capacity = nhh_capacity,
    .length = nhh_length,
    .trunk_hidden = nhh_hidden,
    .run = nhh_run,
    .logits = nhh_logits,
    .destroy = nhh_destroy,
};

static weft_status load_head(nh_head *hd, const weft_config *cfg, const weft_tensor_set *ts, size_t *bytes,
                             weft_err *err) {
    nh_model *m = hd->m;
    const int64_t H = m->H;
    if (m->Hq <= 0 || m->Hkv <= 0 || m->d <= 0 || m->Hq % m->Hkv || m->E <= 0 || m->topk <= 0)
        return weft_err_set(err, WEFT_EFORMAT,
                            "nemotron_h: the MTP head needs attention heads and MoE experts in the config "
                            "(heads %lld/%lld, head_dim %lld, experts %lld, top-k %lld)",
                            (long long)m->Hq, (long long)m->Hkv, (long long)m->d, (long long)m->E,
                            (long long)m->topk);
    hd->eh = weft_mtp_mat(ts, "nemotron_h", "mtp.layers.0.eh_proj.weight", H, 2 * H, err);
    if (!hd->eh) return err ? err->code : WEFT_EFORMAT;
    static const char *const norms[3] = {"mtp.layers.0.enorm.weight", "mtp.layers.0.hnorm.weight",
                                         "mtp.layers.1.final_layernorm.weight"};
    float **dst[3] = {&hd->enorm, &hd->hnorm, &hd->final_norm};
    for (int i = 0; i < 3; i++)
        if (!(*dst[i] = weft_mtp_vec(ts, "nemotron_h", norms[i], H, false, bytes, err)))
            return err ? err->code : WEFT_EFORMAT;
    hd->attn.kind = WEFT_LAYER_ATTENTION;
    hd->moe.kind = WEFT_LAYER_MOE;
    weft_status st = weft_nh_load_block(m, cfg, ts, "mtp.", 0, &hd->attn, bytes, err);
    if (!st) st = weft_nh_load_block(m, cfg, ts, "mtp.", 1, &hd->moe, bytes, err);
    if (st) return st;
    const size_t R = (size_t)m->max_rows, F = sizeof(float), qd = (size_t)(m->Hq * m->d),
                 kvd = (size_t)(m->Hkv * m->d);
    hd->cat = malloc(R * 2 * (size_t)H * F);
    hd->x = malloc(R * (size_t)H * F);
    hd->q = malloc(R * qd * F);
    hd->att = malloc(R * qd * F);
    hd->k = malloc(R * kvd * F);
    hd->v = malloc(R * kvd * F);
    hd->e = malloc((size_t)H * F);
    hd->apos = malloc(R * sizeof(int));
    hd->krow = malloc(R * sizeof(float *));
    hd->vrow = malloc(R * sizeof(float *));
    if (!hd->cat || !hd->x || !hd->q || !hd->att || !hd->k || !hd->v || !hd->e || !hd->apos || !hd->krow ||
        !hd->vrow)
        return weft_err_set(err, WEFT_ENOMEM, "nemotron_h: out of memory for the MTP head (%zu rows)", R);
    return WEFT_OK;
}

weft_status weft_nemotron_h_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                       const weft_family_opts *opts, weft_family_model *fm, weft_err *err) {
    /* MLX conversions drop the head (and may drop its config key): a sidecar's tensors are the sign there */
    if ((cfg->num_nextn_predict_layers < 1 && !opts->mlx) || !weft_mtp_present(ts)) return WEFT_OK;
    nh_model *m = fm->self;
    nh_head *hd = calloc(1, sizeof *hd);
    weft_status st = WEFT_ENOMEM;
    size_t bytes = 0;
    if (!hd)
        weft_err_set(err, WEFT_ENOMEM, "out of memory");
    else {
        hd->m = m;
        st = load_head(hd, cfg, ts, &bytes, err);
    }
    if (st) {
        nhh_destroy(hd);
        fm->ops->destroy(fm->self);
        memset(fm, 0, sizeof *fm);
        return st;
    }
    size_t scratch = (size_t)(2 * m->H); /* eh_proj rows are 2H wide */
    return weft_mtp_wrap(fm, &NH_HEAD, hd, m->H, m->Hkv * m->d, m->max_context, scratch, bytes, err);
}
