/* qwen3_5 and qwen3_5_moe (families-and-formats §3, §3.10, §10): tensor resolution and the model object.
 *
 * Storages accepted (names already canonicalised to the hub's by the loaders):
 * - prefix `model.language_model.` (hub, and MLX after renaming) or `model.` (text-only re-exports);
 * - zero-centred norms (input/post-attention, final, q_norm, k_norm): HF stores w and the model applies 1+w,
 *   which is added here at load; MLX stores 1+w already (rounded to the checkpoint dtype), used as is (mlx-lm
 *   shifts only checkpoints whose conv1d is still in HF layout; MLX files are converted). linear_attn.norm is
 *   a plain weight in every storage and never shifted;
 * - conv1d `[C,1,K]` (HF), `[C,K,1]` (MLX) or `[C,K]`: the same bytes, w[c,k] at c·K + k;
 * - MoE experts per expert `mlp.experts.{e}.{gate,up,down}_proj.weight` (transformers 5.17 save), fused
 *   `mlp.experts.gate_up_proj` [E,2I,H] (gate rows first) + `mlp.experts.down_proj` [E,H,I], or MLX stacked
 *   `mlp.switch_mlp.{gate,up,down}_proj.weight` [E,I,H]/[E,H,I] (rows of expert e start at e·out); each
 * expert becomes a 2-D view into the stored bytes (nothing is copied);
 * - weights in any dtype weft_matmul decodes (F32/F16/BF16, ggml blocks, MLX affine incl. 8-bit routers);
 * - GGUF (names mapped by the reader, experts as switch_mlp), where cfg says what llama.cpp's converter
 *   changed: norms stored as 1+w (norms_plus_one), A_log's tensor holding −exp(A_log) (a_is_neg_exp), value
 *   heads tiled (gdn_tiled_heads: kept as stored; the GDN pairs value head h with key head h mod Hk).
 * Ignored: `model.visual.*` (vision tower: text requests only); `mtp.*` (drafting head): qwen3_5_mtp.c. */
#include "families/mtp.h"
#include "families/qwen3_5_impl.h"
#include "weft/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loader {
    const weft_tensor_set *ts;
    const char *prefix;
    weft_err *err;
    bool failed;
    weft_status st; /* the first failure's status */
    size_t decoded; /* bytes of fp32 copies made */
    char name[256];
} loader;

static const char *lname(loader *ld, int64_t layer, const char *suffix) {
    if (layer < 0)
        snprintf(ld->name, sizeof ld->name, "%s%s", ld->prefix, suffix);
    else
        snprintf(ld->name, sizeof ld->name, "%slayers.%lld.%s", ld->prefix, (long long)layer, suffix);
    return ld->name;
}

static bool weight_dtype(weft_dtype t) {
    switch (t) {
    case WEFT_DT_F32:
    case WEFT_DT_F16:
    case WEFT_DT_BF16:
    case WEFT_DT_MLX_AFFINE:
    case WEFT_DT_Q4_0:
    case WEFT_DT_Q4_1:
    case WEFT_DT_Q5_0:
    case WEFT_DT_Q5_1:
    case WEFT_DT_Q8_0:
    case WEFT_DT_Q2_K:
    case WEFT_DT_Q3_K:
    case WEFT_DT_Q4_K:
    case WEFT_DT_Q5_K:
    case WEFT_DT_Q6_K:
        return true;
    default:
        return false;
    }
}

/* Records the first error (one line) and returns false. */
__attribute__((format(printf, 3, 4))) static bool fail(loader *ld, weft_status code, const char *fmt, ...) {
    if (!ld->failed) {
        char msg[sizeof ld->err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        weft_err_set(ld->err, code, "%s", msg);
        ld->st = code;
    }
    ld->failed = true;
    return false;
}

static bool check_dtype(loader *ld, const weft_tensor *t) {
    if (weight_dtype(t->dtype)) return true;
    return fail(ld, WEFT_ENOTSUP, "tensor %s: dtype %s cannot be used as a weight", t->name,
                weft_dtype_get(t->dtype) ? weft_dtype_get(t->dtype)->name : "?");
}

/* A 2-D weight [rows, cols] named prefix + (layers.L.)suffix. */
static const weft_tensor *mat(loader *ld, int64_t layer, const char *suffix, int64_t rows, int64_t cols) {
    if (ld->failed) return NULL;
    const char *name = lname(ld, layer, suffix);
    const weft_tensor *t = weft_tensor_set_get(ld->ts, name);
    if (!t) {
        fail(ld, WEFT_EFORMAT, "missing tensor %s", name);
        return NULL;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        fail(ld, WEFT_EFORMAT, "tensor %s: shape [%lld, %lld] expected, found %d-D [%lld, %lld]", name,
             (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
             (long long)(t->ndim > 1 ? t->shape[1] : 0));
        return NULL;
    }
    return check_dtype(ld, t) ? t : NULL;
}

/* A vector of n elements decoded to fp32; shift adds 1 (zero-centred norm stored as w). */
static float *vec(loader *ld, int64_t layer, const char *suffix, int64_t n, bool required, bool shift) {
    if (ld->failed) return NULL;
    const char *name = lname(ld, layer, suffix);
    const weft_tensor *t = weft_tensor_set_get(ld->ts, name);
    if (!t) {
        if (required) fail(ld, WEFT_EFORMAT, "missing tensor %s", name);
        return NULL;
    }
    float *v = weft_tensor_to_f32(t, n, ld->err);
    if (!v) {
        ld->failed = true;
        ld->st = ld->err ? ld->err->code : WEFT_EFORMAT;
        return NULL;
    }
    if (shift)
        for (int64_t i = 0; i < n; i++) v[i] = 1.0f + v[i];
    ld->decoded += (size_t)n * sizeof(float);
    return v;
}

/* Rows [row0, row0 + rows) of a (possibly 3-D, stacked) weight as a 2-D tensor over the same bytes. */
static void row_view(const weft_tensor *t, int64_t row0, int64_t rows, weft_tensor *v) {
    *v = *t;
    int64_t cols = weft_tensor_cols(t);
    size_t rb;
    if (t->dtype == WEFT_DT_MLX_AFFINE) {
        rb = weft_mlx_row_bytes(t);
        size_t sb = weft_mlx_scale_row_bytes(t);
        v->scales = t->scales + (size_t)row0 * sb;
        v->biases = t->biases + (size_t)row0 * sb;
    } else {
        rb = weft_dtype_row_bytes(t->dtype, cols);
    }
    v->ndim = 2;
    v->shape[0] = rows;
    v->shape[1] = cols;
    v->shape[2] = v->shape[3] = 0;
    v->data = t->data + (size_t)row0 * rb;
    v->nbytes = (size_t)rows * rb;
}

/* A stacked 3-D expert tensor [E, rows, cols] (first of the names that exists), or NULL. */
static const weft_tensor *stacked(loader *ld, int64_t layer, const char *s1, const char *s2, int64_t E,
                                  int64_t rows, int64_t cols) {
    const weft_tensor *t = weft_tensor_set_get(ld->ts, lname(ld, layer, s1));
    if (!t && s2) t = weft_tensor_set_get(ld->ts, lname(ld, layer, s2));
    if (!t || ld->failed) return NULL;
    if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != cols) {
        fail(ld, WEFT_EFORMAT, "tensor %s: shape [%lld, %lld, %lld] expected", t->name, (long long)E,
             (long long)rows, (long long)cols);
        return NULL;
    }
    if (t->dtype != WEFT_DT_MLX_AFFINE && weft_dtype_row_bytes(t->dtype, cols) == 0) {
        fail(ld, WEFT_EFORMAT, "tensor %s: rows of %lld elements do not fit its block size", t->name,
             (long long)cols);
        return NULL;
    }
    return check_dtype(ld, t) ? t : NULL;
}

static bool load_experts(loader *ld, q35 *m, q35_layer *ly, int64_t l) {
    const int64_t E = m->E, H = m->H, MI = m->MI;
    ly->ex = calloc((size_t)(3 * E), sizeof *ly->ex);
    if (!ly->ex) return fail(ld, WEFT_ENOMEM, "out of memory for the experts of layer %lld", (long long)l);
    if (weft_tensor_set_get(ld->ts, lname(ld, l, "mlp.experts.0.gate_proj.weight"))) {
        static const char *const parts[3] = {"gate_proj", "up_proj", "down_proj"};
        char sfx[96];
        for (int64_t e = 0; e < E && !ld->failed; e++)
            for (int p = 0; p < 3; p++) {
                snprintf(sfx, sizeof sfx, "mlp.experts.%lld.%s.weight", (long long)e, parts[p]);
                const weft_tensor *t = mat(ld, l, sfx, p == 2 ? H : MI, p == 2 ? MI : H);
                if (t) ly->ex[3 * e + p] = *t;
            }
        return !ld->failed;
    }
    const weft_tensor *gu =
        stacked(ld, l, "mlp.experts.gate_up_proj", "mlp.experts.gate_up_proj.weight", E, 2 * MI, H);
    if (gu) {
        const weft_tensor *dn =
            stacked(ld, l, "mlp.experts.down_proj", "mlp.experts.down_proj.weight", E, H, MI);
        if (!dn)
            return ld->failed
                       ? false
                       : fail(ld, WEFT_EFORMAT, "missing tensor %s", lname(ld, l, "mlp.experts.down_proj"));
        for (int64_t e = 0; e < E; e++) {
            row_view(gu, e * 2 * MI, MI, &ly->ex[3 * e]);
            row_view(gu, e * 2 * MI + MI, MI, &ly->ex[3 * e + 1]);
            row_view(dn, e * H, H, &ly->ex[3 * e + 2]);
        }
        return true;
    }
    const weft_tensor *sg = stacked(ld, l, "mlp.switch_mlp.gate_proj.weight", NULL, E, MI, H);
    const weft_tensor *su = stacked(ld, l, "mlp.switch_mlp.up_proj.weight", NULL, E, MI, H);
    const weft_tensor *sd = stacked(ld, l, "mlp.switch_mlp.down_proj.weight", NULL, E, H, MI);
    if (ld->failed) return false;
    if (!sg || !su || !sd)
        return fail(ld, WEFT_EFORMAT,
                    "missing experts %s (neither mlp.experts.{e}.*, mlp.experts.gate_up_proj nor "
                    "mlp.switch_mlp.*)",
                    lname(ld, l, "mlp.experts"));
    for (int64_t e = 0; e < E; e++) {
        row_view(sg, e * MI, MI, &ly->ex[3 * e]);
        row_view(su, e * MI, MI, &ly->ex[3 * e + 1]);
        row_view(sd, e * H, H, &ly->ex[3 * e + 2]);
    }
    return true;
}

static bool load_gdn(loader *ld, q35 *m, q35_layer *ly, int64_t l) {
    const int64_t H = m->H, C = m->C, K = m->K, Hv = m->Hv;
    ly->w_qkv = mat(ld, l, "linear_attn.in_proj_qkv.weight", C, H);
    ly->w_z = mat(ld, l, "linear_attn.in_proj_z.weight", m->value_dim, H);
    ly->w_b = mat(ld, l, "linear_attn.in_proj_b.weight", Hv, H);
    ly->w_a = mat(ld, l, "linear_attn.in_proj_a.weight", Hv, H);
    ly->w_out = mat(ld, l, "linear_attn.out_proj.weight", H, m->value_dim);
    if (ld->failed) return false;
    const char *cn = lname(ld, l, "linear_attn.conv1d.weight");
    const weft_tensor *cw = weft_tensor_set_get(ld->ts, cn);
    if (!cw) return fail(ld, WEFT_EFORMAT, "missing tensor %s", cn);
    bool hf = cw->ndim == 3 && cw->shape[0] == C && cw->shape[1] == 1 && cw->shape[2] == K;
    bool mlx = cw->ndim == 3 && cw->shape[0] == C && cw->shape[1] == K && cw->shape[2] == 1;
    bool flat = cw->ndim == 2 && cw->shape[0] == C && cw->shape[1] == K;
    if (!hf && !mlx && !flat)
        return fail(ld, WEFT_EFORMAT, "tensor %s: shape [%lld, 1, %lld] (or [C, K, 1]) expected", cn,
                    (long long)C, (long long)K);
    ly->conv_w = vec(ld, l, "linear_attn.conv1d.weight", C * K, true, false);
    ly->conv_b = vec(ld, l, "linear_attn.conv1d.bias", C, false, false);
    ly->neg_a = vec(ld, l, "linear_attn.A_log", Hv, true, false);
    ly->dt_bias = vec(ld, l, "linear_attn.dt_bias", Hv, true, false);
    ly->gnorm = vec(ld, l, "linear_attn.norm.weight", m->dv, true, false); /* plain: never shifted */
    if (ld->failed) return false;
    if (!m->a_neg_exp)
        for (int64_t h = 0; h < Hv; h++)
            ly->neg_a[h] = -expf(ly->neg_a[h]); /* fp32, as HF's −A_log.float().exp() */
    return true;
}

static bool load_attn(loader *ld, q35 *m, q35_layer *ly, int64_t l, bool shift) {
    const int64_t H = m->H, d = m->d;
    const char *qn = lname(ld, l, "self_attn.q_proj.weight");
    const weft_tensor *q = weft_tensor_set_get(ld->ts, qn);
    if (q && q->ndim == 2 && q->shape[1] == H && q->shape[0] != m->qrows &&
        q->shape[0] == (m->out_gate ? 1 : 2) * m->Hq * d)
        return fail(ld, WEFT_EFORMAT,
                    "tensor %s: %lld rows disagree with attn_output_gate (%lld rows expected)", qn,
                    (long long)q->shape[0], (long long)m->qrows);
    ly->wq = mat(ld, l, "self_attn.q_proj.weight", m->qrows, H);
    ly->wk = mat(ld, l, "self_attn.k_proj.weight", m->Hkv * d, H);
    ly->wv = mat(ld, l, "self_attn.v_proj.weight", m->Hkv * d, H);
    ly->wo = mat(ld, l, "self_attn.o_proj.weight", H, m->Hq * d);
    ly->q_norm = vec(ld, l, "self_attn.q_norm.weight", d, true, shift);
    ly->k_norm = vec(ld, l, "self_attn.k_norm.weight", d, true, shift);
    return !ld->failed;
}

static bool load_ffn(loader *ld, q35 *m, q35_layer *ly, int64_t l) {
    const int64_t H = m->H;
    if (!m->moe) {
        ly->wg = mat(ld, l, "mlp.gate_proj.weight", m->I, H);
        ly->wu = mat(ld, l, "mlp.up_proj.weight", m->I, H);
        ly->wd = mat(ld, l, "mlp.down_proj.weight", H, m->I);
        return !ld->failed;
    }
    ly->router = mat(ld, l, "mlp.gate.weight", m->E, H);
    if (m->SI > 0) {
        ly->sh_g = mat(ld, l, "mlp.shared_expert.gate_proj.weight", m->SI, H);
        ly->sh_u = mat(ld, l, "mlp.shared_expert.up_proj.weight", m->SI, H);
        ly->sh_d = mat(ld, l, "mlp.shared_expert.down_proj.weight", H, m->SI);
        ly->sh_gate = mat(ld, l, "mlp.shared_expert_gate.weight", 1, H);
    }
    return !ld->failed && load_experts(ld, m, ly, l);
}

static void q35_destroy(void *self) {
    q35 *m = self;
    if (!m) return;
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        q35_layer *ly = &m->layers[l];
        free(ly->in_norm);
        free(ly->post_norm);
        free(ly->conv_w);
        free(ly->conv_b);
        free(ly->neg_a);
        free(ly->dt_bias);
        free(ly->gnorm);
        free(ly->q_norm);
        free(ly->k_norm);
        free(ly->ex);
    }
    free(m->layers);
    free(m->final_norm);
    weft_rope_free(&m->rope);
    void *bufs[] = {
        m->perm,         m->inv,     m->row_group, m->groups, m->pos, m->x,  m->xb,      m->xo,
        m->mqkv,         m->cbuf,    m->z,         m->o,      m->bb,  m->aa, m->beta,    m->decay,
        m->uq,           m->q,       m->att,       m->k,      m->v,   m->g,  m->u,       m->ey,
        m->ex_x,         m->ex_y,    m->rl,        m->sg,     m->sel, m->sw, m->ex_rows, (void *)m->krow,
        (void *)m->vrow, m->kscratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(m);
}

static const weft_family_ops Q35_OPS = {
    .name = "qwen3_5",
    .state_bytes = q35_state_bytes,
    .state_init = q35_state_init,
    .forward = q35_forward,
    .keep = q35_keep,
    .destroy = q35_destroy,
    .snapshot_bytes = q35_snapshot_bytes,
    .snapshot_save = q35_snapshot_save,
    .snapshot_restore = q35_snapshot_restore,
};

static weft_status check_shape(const weft_config *cfg, q35 *m, weft_err *err) {
    if (m->H <= 0 || m->V <= 0 || m->L <= 0 || m->Hq <= 0 || m->Hkv <= 0 || m->d <= 0 || m->Hq % m->Hkv)
        return weft_err_set(
            err, WEFT_EFORMAT,
            "qwen3_5 config: invalid shape (hidden %lld, vocab %lld, layers %lld, heads %lld/%lld, "
            "head_dim %lld)",
            (long long)m->H, (long long)m->V, (long long)m->L, (long long)m->Hq, (long long)m->Hkv,
            (long long)m->d);
    for (int64_t l = 0; l < m->L; l++) {
        weft_layer_kind k = cfg->layer_kind[l];
        if (k == WEFT_LAYER_LINEAR)
            m->n_gdn++;
        else if (k == WEFT_LAYER_ATTENTION)
            m->n_attn++;
        else
            return weft_err_set(err, WEFT_ENOTSUP,
                                "qwen3_5: layer %lld is of kind %d; only linear_attention and full_attention "
                                "layers can be run",
                                (long long)l, (int)k);
    }
    if (m->n_gdn && (m->K < 1 || m->dk <= 0 || m->dv <= 0 || m->Hk <= 0 || m->Hv <= 0 || m->Hv % m->Hk))
        return weft_err_set(
            err, WEFT_EFORMAT,
            "qwen3_5 config: invalid linear attention shape (kernel %lld, key heads %lld × %lld, "
            "value heads %lld × %lld)",
            (long long)m->K, (long long)m->Hk, (long long)m->dk, (long long)m->Hv, (long long)m->dv);
    if (!m->moe && m->I <= 0)
        return weft_err_set(err, WEFT_EFORMAT, "qwen3_5 config: intermediate_size missing");
    if (m->moe && (m->E <= 0 || m->topk <= 0 || m->topk > m->E || m->MI <= 0 || m->SI < 0))
        return weft_err_set(
            err, WEFT_EFORMAT,
            "qwen3_5_moe config: invalid MoE shape (experts %lld, top-k %lld, expert size %lld)",
            (long long)m->E, (long long)m->topk, (long long)m->MI);
    return WEFT_OK;
}

#define MAX3(a, b, c) ((a) > (b) ? ((a) > (c) ? (a) : (c)) : ((b) > (c) ? (b) : (c)))

static float *F(size_t n) {
    return calloc(n > 0 ? n : 1, sizeof(float));
}

static weft_status alloc_acts(q35 *m, weft_err *err) {
    size_t R = (size_t)m->act_rows, H = (size_t)m->H, k = (size_t)(m->topk > 0 ? m->topk : 1);
    size_t ff = (size_t)MAX3(m->I, m->MI, m->SI), qd = (size_t)(m->Hq * m->d), kvd = (size_t)(m->Hkv * m->d);
    size_t C = (size_t)m->C, Vd = (size_t)m->value_dim, Hv = (size_t)m->Hv, E = (size_t)(m->E > 0 ? m->E : 1);
    m->x = F(R * H), m->xb = F(R * H), m->xo = F(R * H);
    m->mqkv = F(R * C), m->cbuf = F(R * C), m->z = F(R * Vd), m->o = F(R * Vd);
    m->bb = F(R * Hv), m->aa = F(R * Hv), m->beta = F(R * Hv), m->decay = F(R * Hv);
    m->uq = F(R * (size_t)m->qrows), m->q = F(R * qd), m->att = F(R * qd), m->k = F(R * kvd),
    m->v = F(R * kvd);
    m->g = F(R * ff), m->u = F(R * ff);
    m->ey = F(R * k * H), m->ex_x = F(R * H), m->ex_y = F(R * H), m->rl = F(R * E), m->sg = F(R),
    m->sw = F(R * k);
    m->kscratch = F(m->scratch_floats);
    m->sel = calloc(R * k, sizeof(int));
    m->ex_rows = calloc(R * k, sizeof(int));
    m->perm = calloc(R, sizeof(int));
    m->inv = calloc(R, sizeof(int));
    m->row_group = calloc(R, sizeof(int));
    m->pos = calloc(R, sizeof(int));
    m->groups = calloc(R, sizeof(q35_group));
    m->krow = calloc(R, sizeof(float *));
    m->vrow = calloc(R, sizeof(float *));
    void *bufs[] = {m->x,   m->xb,        m->xo,   m->mqkv,     m->cbuf,         m->z,           m->o,
                    m->bb,  m->aa,        m->beta, m->decay,    m->uq,           m->q,           m->att,
                    m->k,   m->v,         m->g,    m->u,        m->ey,           m->ex_x,        m->ex_y,
                    m->rl,  m->sg,        m->sw,   m->kscratch, m->sel,          m->ex_rows,     m->perm,
                    m->inv, m->row_group, m->pos,  m->groups,   (void *)m->krow, (void *)m->vrow};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!bufs[i])
            return weft_err_set(err, WEFT_ENOMEM, "qwen3_5: out of memory for %d activation rows",
                                m->act_rows);
    return WEFT_OK;
}

weft_status weft_qwen3_5_create(const weft_config *cfg, const weft_tensor_set *ts,
                                const weft_family_opts *opts, weft_family_model *out, weft_err *err) {
    q35 *m = calloc(1, sizeof *m);
    if (!m) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    m->H = cfg->hidden_size, m->V = cfg->vocab_size, m->L = cfg->n_layers, m->I = cfg->intermediate_size;
    m->Hq = cfg->n_heads, m->Hkv = cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads, m->d = cfg->head_dim;
    m->out_gate = cfg->attn_output_gate;
    m->qrows = (m->out_gate ? 2 : 1) * m->Hq * m->d;
    m->K = cfg->linear_conv_kernel_dim, m->dk = cfg->linear_key_head_dim, m->dv = cfg->linear_value_head_dim;
    m->Hk = cfg->linear_num_key_heads, m->Hv = cfg->linear_num_value_heads;
    m->moe = cfg->family == WEFT_FAMILY_QWEN3_5_MOE;
    m->E = cfg->num_experts, m->topk = cfg->num_experts_per_tok, m->MI = cfg->moe_intermediate_size;
    m->SI = cfg->shared_expert_intermediate_size;
    m->eps = (float)cfg->rms_norm_eps;
    m->mlx = opts->mlx;
    m->tiled = cfg->gdn_tiled_heads;
    m->a_neg_exp = cfg->a_is_neg_exp;
    m->max_rows = opts->max_rows > 0 ? opts->max_rows : 1;
    m->act_rows = m->max_rows;
    m->max_context = opts->max_context > 0 ? opts->max_context : (int)cfg->max_position_embeddings;
    weft_status st = check_shape(cfg, m, err);
    if (st) goto fail;
    if (!m->n_gdn) m->K = 1, m->dk = m->dv = m->Hk = m->Hv = 0;
    m->key_dim = m->Hk * m->dk, m->value_dim = m->Hv * m->dv, m->C = 2 * m->key_dim + m->value_dim;
    m->conv_floats = (size_t)((m->K - 1) * m->C);
    m->layer_floats = m->conv_floats + (size_t)(m->Hv * m->dk * m->dv);
    m->block_floats = (size_t)m->n_gdn * m->layer_floats;
    m->rec_floats = (size_t)m->n_gdn * (size_t)(m->C + 2 * m->Hv);

    const char *prefix = "model.language_model.";
    if (!weft_tensor_set_get(ts, "model.language_model.embed_tokens.weight") &&
        weft_tensor_set_get(ts, "model.embed_tokens.weight"))
        prefix = "model.";
    loader ld = {ts, prefix, err, false, WEFT_OK, 0, {0}};
    /* zero-centred norms: HF stores w, MLX and GGUF store 1+w */
    const bool shift = !opts->mlx && !cfg->norms_plus_one;
    m->embed = mat(&ld, -1, "embed_tokens.weight", m->V, m->H);
    if (cfg->tie_word_embeddings) {
        m->head = m->embed;
    } else {
        ld.prefix = ""; /* lm_head sits at the top level in every storage */
        m->head = mat(&ld, -1, "lm_head.weight", m->V, m->H);
        ld.prefix = prefix;
    }
    m->final_norm = vec(&ld, -1, "norm.weight", m->H, true, shift);
    m->layers = calloc((size_t)m->L, sizeof *m->layers);
    if (!m->layers) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
        goto fail;
    }
    int gi = 0, ai = 0;
    for (int64_t l = 0; l < m->L && !ld.failed; l++) {
        q35_layer *ly = &m->layers[l];
        ly->linear = cfg->layer_kind[l] == WEFT_LAYER_LINEAR;
        ly->idx = ly->linear ? gi++ : ai++;
        ly->in_norm = vec(&ld, l, "input_layernorm.weight", m->H, true, shift);
        ly->post_norm = vec(&ld, l, "post_attention_layernorm.weight", m->H, true, shift);
        if (ld.failed) break;
        if (ly->linear ? !load_gdn(&ld, m, ly, l) : !load_attn(&ld, m, ly, l, shift)) break;
        load_ffn(&ld, m, ly, l);
    }
    if (ld.failed) {
        st = ld.st;
        goto fail;
    }
    if (m->n_attn && (st = weft_rope_init(&m->rope, &cfg->rope, m->d, err))) goto fail;
    {
        int64_t sc = MAX3(m->H, m->I, m->MI);
        sc = MAX3(sc, m->SI, m->Hq * m->d);
        sc = MAX3(sc, m->value_dim, (int64_t)m->max_context);
        sc = MAX3(sc, 2 * m->dv, 1);
        m->scratch_floats = (size_t)sc;
    }
    if ((st = alloc_acts(m, err))) goto fail;
    m->weights_bytes = ld.decoded;
    out->ops = &Q35_OPS;
    out->self = m;
    out->max_rows = m->max_rows;
    out->vocab_size = m->V;
    out->scratch_floats = m->scratch_floats;
    out->weights_bytes = m->weights_bytes;
    return weft_qwen3_5_mtp_attach(cfg, ts, opts, out, err); /* the MTP draft head, if any (qwen3_5_mtp.c) */
fail:
    q35_destroy(m);
    return st;
}

weft_status q35_load_attn_layer(q35 *m, const weft_tensor_set *ts, const char *prefix, int64_t l, bool shift,
                                q35_layer *ly, size_t *decoded, weft_err *err) {
    loader ld = {ts, prefix, err, false, WEFT_OK, 0, {0}};
    ly->in_norm = vec(&ld, l, "input_layernorm.weight", m->H, true, shift);
    ly->post_norm = vec(&ld, l, "post_attention_layernorm.weight", m->H, true, shift);
    if (!ld.failed && load_attn(&ld, m, ly, l, shift)) load_ffn(&ld, m, ly, l);
    *decoded += ld.decoded;
    return ld.failed ? ld.st : WEFT_OK;
}
