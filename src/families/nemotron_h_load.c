/* nemotron_h: resolving and checking the tensors of every block (families-and-formats §4.2–§4.6, §10).
 *
 * Names: hub `backbone.*` (also `backbone.embedding.weight`; `model.*` as transformers 5 renames it), MLX the
 * same names with quantized tensors folded by the reader. Experts: per expert `mixer.experts.{e}.up_proj` /
 * `down_proj`, stacked `mixer.experts.up_proj` / `down_proj` [E, out, in], or MLX `mixer.switch_mlp.fc1` /
 * `fc2` [E, out, in] (rows of expert e start at e·out); each expert becomes a 2-D view into the stored bytes.
 * `mtp.*` tensors (the drafting head) are not used here. Norm and small vectors are decoded to fp32. GGUF
 * (names mapped by the reader): conv [C, K], A/D [H, 1], norm [G, d_inner/G] flatten alike; A holds
 * −exp(A_log) (cfg->a_is_neg_exp). */
#include "families/nemotron_h_internal.h"
#include "weft/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ld {
    const weft_tensor_set *ts;
    const char *pfx; /* "backbone." or "model." */
    weft_err *err;
    bool failed;
    size_t bytes; /* decoded copies */
    char nm[256];
} ld;

static const char *lname(ld *c, int64_t l, const char *suffix) {
    snprintf(c->nm, sizeof c->nm, "%slayers.%lld.%s", c->pfx, (long long)l, suffix);
    return c->nm;
}

static const weft_tensor *ld_mat(ld *c, const char *name, int64_t rows, int64_t cols) {
    if (c->failed) return NULL;
    const weft_tensor *t = weft_tensor_set_get(c->ts, name);
    if (!t) {
        weft_err_set(c->err, WEFT_EFORMAT, "nemotron_h: missing tensor %s", name);
        c->failed = true;
        return NULL;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        weft_err_set(c->err, WEFT_EFORMAT,
                     "nemotron_h: tensor %s: shape [%lld, %lld] expected, found %d-D [%lld, %lld]", name,
                     (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
                     (long long)(t->ndim > 1 ? t->shape[1] : 0));
        c->failed = true;
        return NULL;
    }
    return t;
}

static float *ld_vec(ld *c, const char *name, int64_t n, bool required) {
    if (c->failed) return NULL;
    const weft_tensor *t = weft_tensor_set_get(c->ts, name);
    if (!t) {
        if (required) {
            weft_err_set(c->err, WEFT_EFORMAT, "nemotron_h: missing tensor %s", name);
            c->failed = true;
        }
        return NULL;
    }
    float *v = weft_tensor_to_f32(t, n, c->err);
    if (!v)
        c->failed = true;
    else
        c->bytes += (size_t)n * sizeof(float);
    return v;
}

/* Expert e of a stacked [E, out, in] tensor as a 2-D [out, in] view of the same bytes. */
static bool expert_view(ld *c, const weft_tensor *t, int64_t e, weft_tensor *v) {
    *v = *t;
    v->ndim = 2;
    v->shape[0] = t->shape[1];
    v->shape[1] = t->shape[2];
    v->shape[2] = v->shape[3] = 0;
    size_t rows = (size_t)t->shape[1];
    if (t->dtype == WEFT_DT_MLX_AFFINE) {
        size_t rb = weft_mlx_row_bytes(v), sb = weft_mlx_scale_row_bytes(v);
        v->data += (size_t)e * rows * rb;
        v->scales += (size_t)e * rows * sb;
        v->biases += (size_t)e * rows * sb;
        v->nbytes = rows * rb;
        return true;
    }
    size_t rb = weft_dtype_row_bytes(t->dtype, t->shape[2]);
    if (rb == 0 || t->nbytes < (size_t)t->shape[0] * rows * rb) {
        weft_err_set(c->err, WEFT_ENOTSUP, "nemotron_h: stacked expert tensor %s of dtype %s cannot be split",
                     t->name, weft_dtype_get(t->dtype) ? weft_dtype_get(t->dtype)->name : "?");
        c->failed = true;
        return false;
    }
    v->data += (size_t)e * rows * rb;
    v->nbytes = rows * rb;
    return true;
}

/* The E experts' `which` projection (0 = up [Ie, Hl], 1 = down [Hl, Ie]) in any of the three layouts. */
static weft_tensor *ld_experts(ld *c, const nh_model *m, int64_t l, int which) {
    if (c->failed) return NULL;
    const int64_t E = m->E, rows = which ? m->Hl : m->Ie, cols = which ? m->Ie : m->Hl;
    const char *proj = which ? "down_proj" : "up_proj";
    weft_tensor *v = calloc((size_t)E, sizeof *v);
    if (!v) {
        weft_err_set(c->err, WEFT_ENOMEM, "out of memory");
        c->failed = true;
        return NULL;
    }
    char one[96];
    snprintf(one, sizeof one, "mixer.experts.0.%s.weight", proj);
    if (weft_tensor_set_get(c->ts, lname(c, l, one))) {
        for (int64_t e = 0; e < E && !c->failed; e++) {
            snprintf(one, sizeof one, "mixer.experts.%lld.%s.weight", (long long)e, proj);
            const weft_tensor *t = ld_mat(c, lname(c, l, one), rows, cols);
            if (t) v[e] = *t;
        }
        if (!c->failed) return v;
        free(v);
        return NULL;
    }
    const char *stacked[3] = {which ? "mixer.switch_mlp.fc2.weight" : "mixer.switch_mlp.fc1.weight",
                              which ? "mixer.experts.down_proj" : "mixer.experts.up_proj",
                              which ? "mixer.experts.down_proj.weight" : "mixer.experts.up_proj.weight"};
    const weft_tensor *t = NULL;
    for (int i = 0; i < 3 && !t; i++) t = weft_tensor_set_get(c->ts, lname(c, l, stacked[i]));
    if (!t) {
        snprintf(one, sizeof one, "mixer.experts.0.%s.weight", proj);
        weft_err_set(c->err, WEFT_EFORMAT, "nemotron_h: missing tensor %s (nor a stacked %s)",
                     lname(c, l, one), stacked[0]);
    } else if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != cols) {
        weft_err_set(c->err, WEFT_EFORMAT, "nemotron_h: tensor %s: shape [%lld, %lld, %lld] expected",
                     t->name, (long long)E, (long long)rows, (long long)cols);
    } else {
        for (int64_t e = 0; e < E; e++)
            if (!expert_view(c, t, e, &v[e])) break;
        if (!c->failed) return v;
    }
    c->failed = true;
    free(v);
    return NULL;
}

static void load_mamba(ld *c, const nh_model *m, const weft_config *cfg, int64_t l, nh_mamba *mb) {
    mb->in_proj = ld_mat(c, lname(c, l, "mixer.in_proj.weight"), m->proj, m->H);
    mb->out_proj = ld_mat(c, lname(c, l, "mixer.out_proj.weight"), m->H, m->d_inner);
    mb->in_bias = ld_vec(c, lname(c, l, "mixer.in_proj.bias"), m->proj, false);
    mb->out_bias = ld_vec(c, lname(c, l, "mixer.out_proj.bias"), m->H, false);
    if (c->failed) return;
    /* HF [conv_dim, 1, K] and MLX [conv_dim, K, 1] both flatten to w[c·K + k] (§10). */
    const weft_tensor *cw = weft_tensor_set_get(c->ts, lname(c, l, "mixer.conv1d.weight"));
    if (cw && (cw->shape[0] != m->conv_dim || weft_tensor_numel(cw) != m->conv_dim * m->K ||
               (cw->ndim == 3 && cw->shape[1] != 1 && cw->shape[2] != 1))) {
        weft_err_set(c->err, WEFT_EFORMAT,
                     "nemotron_h: tensor %s: [%lld, 1, %lld] (or MLX [%lld, %lld, 1]) expected", cw->name,
                     (long long)m->conv_dim, (long long)m->K, (long long)m->conv_dim, (long long)m->K);
        c->failed = true;
        return;
    }
    mb->conv_w = ld_vec(c, lname(c, l, "mixer.conv1d.weight"), m->conv_dim * m->K, true);
    mb->conv_b = ld_vec(c, lname(c, l, "mixer.conv1d.bias"), m->conv_dim, cfg->use_conv_bias);
    mb->dt_bias = ld_vec(c, lname(c, l, "mixer.dt_bias"), m->Hm, true);
    mb->D = ld_vec(c, lname(c, l, "mixer.D"), m->Hm, true);
    mb->norm = ld_vec(c, lname(c, l, "mixer.norm.weight"), m->d_inner, true);
    mb->A = ld_vec(c, lname(c, l, "mixer.A_log"), m->Hm, true);
    /* A = −exp(A_log) in fp32, as HF computes it from the upcast A_log (GGUF's ssm_a holds it already) */
    for (int64_t h = 0; mb->A && !cfg->a_is_neg_exp && h < m->Hm; h++) mb->A[h] = -expf(mb->A[h]);
}

static void load_attn(ld *c, const nh_model *m, const weft_config *cfg, int64_t l, nh_attn *a) {
    const int64_t qd = m->Hq * m->d, kvd = m->Hkv * m->d;
    a->wq = ld_mat(c, lname(c, l, "mixer.q_proj.weight"), qd, m->H);
    a->wk = ld_mat(c, lname(c, l, "mixer.k_proj.weight"), kvd, m->H);
    a->wv = ld_mat(c, lname(c, l, "mixer.v_proj.weight"), kvd, m->H);
    a->wo = ld_mat(c, lname(c, l, "mixer.o_proj.weight"), m->H, qd);
    if (!cfg->attention_bias) return;
    a->bq = ld_vec(c, lname(c, l, "mixer.q_proj.bias"), qd, true);
    a->bk = ld_vec(c, lname(c, l, "mixer.k_proj.bias"), kvd, true);
    a->bv = ld_vec(c, lname(c, l, "mixer.v_proj.bias"), kvd, true);
    a->bo = ld_vec(c, lname(c, l, "mixer.o_proj.bias"), m->H, true);
}

static void load_mlp(ld *c, const nh_model *m, const weft_config *cfg, int64_t l, nh_mlp *p) {
    p->up = ld_mat(c, lname(c, l, "mixer.up_proj.weight"), m->I, m->H);
    p->down = ld_mat(c, lname(c, l, "mixer.down_proj.weight"), m->H, m->I);
    if (!cfg->mlp_bias) return;
    p->bu = ld_vec(c, lname(c, l, "mixer.up_proj.bias"), m->I, true);
    p->bd = ld_vec(c, lname(c, l, "mixer.down_proj.bias"), m->H, true);
}

static void load_moe(ld *c, const nh_model *m, const weft_config *cfg, int64_t l, nh_moe *e) {
    e->router = ld_mat(c, lname(c, l, "mixer.gate.weight"), m->E, m->H);
    e->corr = ld_vec(c, lname(c, l, "mixer.gate.e_score_correction_bias"), m->E, false);
    if (!c->failed && !e->corr) {
        e->corr = calloc((size_t)m->E, sizeof(float)); /* absent = no correction */
        if (!e->corr) {
            weft_err_set(c->err, WEFT_ENOMEM, "out of memory");
            c->failed = true;
        }
    }
    e->up = ld_experts(c, m, l, 0);
    e->down = ld_experts(c, m, l, 1);
    if (cfg->moe_latent_size > 0) {
        e->lat_in = ld_mat(c, lname(c, l, "mixer.fc1_latent_proj.weight"), m->Hl, m->H);
        e->lat_out = ld_mat(c, lname(c, l, "mixer.fc2_latent_proj.weight"), m->H, m->Hl);
    }
    e->Is = cfg->n_shared_experts > 0 ? cfg->shared_expert_intermediate_size : 0;
    if (e->Is > 0) {
        e->sh_up = ld_mat(c, lname(c, l, "mixer.shared_experts.up_proj.weight"), e->Is, m->H);
        e->sh_down = ld_mat(c, lname(c, l, "mixer.shared_experts.down_proj.weight"), m->H, e->Is);
    }
}

weft_status weft_nh_load(nh_model *m, const weft_config *cfg, const weft_tensor_set *ts,
                         const weft_family_opts *opts, weft_err *err) {
    (void)
        opts; /* MLX Nemotron-H needs no special casing: norms unshifted, conv layouts flatten alike (§10) */
    ld c = {ts, "backbone.", err, false, 0, {0}};
    if (!weft_tensor_set_get(ts, "backbone.norm_f.weight") && weft_tensor_set_get(ts, "model.norm_f.weight"))
        c.pfx = "model.";
    char nm[64];
    snprintf(nm, sizeof nm, "%sembeddings.weight", c.pfx);
    if (!weft_tensor_set_get(ts, nm)) snprintf(nm, sizeof nm, "%sembedding.weight", c.pfx);
    m->embed = ld_mat(&c, nm, m->V, m->H);
    if (cfg->tie_word_embeddings)
        m->head = m->embed;
    else
        m->head = ld_mat(&c, "lm_head.weight", m->V, m->H);
    snprintf(nm, sizeof nm, "%snorm_f.weight", c.pfx);
    m->norm_f = ld_vec(&c, nm, m->H, true);
    m->layers = calloc((size_t)m->L, sizeof *m->layers);
    if (!m->layers) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    int im = 0, ia = 0;
    for (int64_t l = 0; l < m->L && !c.failed; l++) {
        nh_layer *ly = &m->layers[l];
        ly->kind = cfg->layer_kind[l];
        ly->norm = ld_vec(&c, lname(&c, l, "norm.weight"), m->H, true);
        switch (ly->kind) {
        case WEFT_LAYER_LINEAR:
            ly->mamba.idx = im++;
            load_mamba(&c, m, cfg, l, &ly->mamba);
            break;
        case WEFT_LAYER_ATTENTION:
            ly->attn.idx = ia++;
            load_attn(&c, m, cfg, l, &ly->attn);
            break;
        case WEFT_LAYER_MLP:
            load_mlp(&c, m, cfg, l, &ly->mlp);
            break;
        case WEFT_LAYER_MOE:
            load_moe(&c, m, cfg, l, &ly->moe);
            break;
        default:
            return weft_err_set(err, WEFT_ENOTSUP,
                                "nemotron_h: layer %lld has a block type (%d) this build cannot run",
                                (long long)l, (int)ly->kind);
        }
    }
    m->weights_bytes = c.bytes;
    return c.failed ? (err ? err->code : WEFT_EFORMAT) : WEFT_OK;
}

void weft_nh_free_weights(nh_model *m) {
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        nh_layer *ly = &m->layers[l];
        free(ly->norm);
        free(ly->mamba.in_bias);
        free(ly->mamba.out_bias);
        free(ly->mamba.conv_w);
        free(ly->mamba.conv_b);
        free(ly->mamba.A);
        free(ly->mamba.D);
        free(ly->mamba.dt_bias);
        free(ly->mamba.norm);
        free(ly->attn.bq);
        free(ly->attn.bk);
        free(ly->attn.bv);
        free(ly->attn.bo);
        free(ly->mlp.bu);
        free(ly->mlp.bd);
        free(ly->moe.corr);
        free(ly->moe.up);
        free(ly->moe.down);
    }
    free(m->layers);
    m->layers = NULL;
    free(m->norm_f);
    m->norm_f = NULL;
}

weft_status weft_nh_load_block(nh_model *m, const weft_config *cfg, const weft_tensor_set *ts,
                               const char *prefix, int64_t l, nh_layer *ly, size_t *bytes, weft_err *err) {
    ld c = {ts, prefix, err, false, 0, {0}};
    ly->norm = ld_vec(&c, lname(&c, l, "norm.weight"), m->H, true);
    if (ly->kind == WEFT_LAYER_ATTENTION)
        load_attn(&c, m, cfg, l, &ly->attn);
    else if (ly->kind == WEFT_LAYER_MLP)
        load_mlp(&c, m, cfg, l, &ly->mlp);
    else if (ly->kind == WEFT_LAYER_MOE)
        load_moe(&c, m, cfg, l, &ly->moe);
    else
        return weft_err_set(err, WEFT_ENOTSUP, "nemotron_h: %slayers.%lld: block type %d not supported here",
                            prefix, (long long)l, (int)ly->kind);
    *bytes += c.bytes;
    return c.failed ? (err ? err->code : WEFT_EFORMAT) : WEFT_OK;
}
