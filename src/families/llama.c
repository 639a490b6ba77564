/* llama and qwen3: dense decoder-only transformers (families-and-formats §1–§2).
 *
 *   h = E[token]
 *   per layer:  a = RMSNorm(h; input_layernorm)
 *               q, k, v = a·Wqᵀ, a·Wkᵀ, a·Wvᵀ      (qwen3: per-head RMSNorm of q and k before RoPE)
 *               q, k = RoPE(q, k; pos);  K/V cache[pos] = k, v
 *               h += Attention(q, K[0..pos], V[0..pos])·Woᵀ        (GQA: q head h reads kv head h/(Hq/Hkv))
 *               m = RMSNorm(h; post_attention_layernorm)
 *               h += (silu(m·Wgᵀ) ⊙ m·Wuᵀ)·Wdᵀ
 *   logits = RMSNorm(h; norm)·W_headᵀ      (W_head = E when tied)
 *
 * Stream state: per layer K and V [capacity, Hkv·d] fp32, keys stored after RoPE (as HF's cache does).
 * Every op is per row or per (row, head), so a row's bits never depend on the rest of the call. */
#include "weft/families.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct llama_layer {
    const weft_tensor *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    float *bq, *bk, *bv;         /* [Hq·d], [Hkv·d] or NULL (attention_bias) */
    float *attn_norm, *ffn_norm; /* [H] */
    float *q_norm, *k_norm;      /* [d] (qwen3) or NULL */
} llama_layer;

typedef struct llama {
    int64_t H, Hq, Hkv, d, I, V, L;
    float eps;
    const weft_tensor *embed, *head;
    float *final_norm;   /* [H] */
    llama_layer *layers; /* [L] */
    weft_rope_table rope;
    int max_rows;
    /* activations for max_rows rows */
    float *x;                   /* [R, H] residual stream */
    float *xb;                  /* [R, H] normed input */
    float *q;                   /* [R, Hq·d] */
    float *k, *v;               /* [R, Hkv·d] */
    float *att;                 /* [R, Hq·d] attention output */
    float *g, *u;               /* [R, I] */
    float *xo;                  /* [R, H] projection outputs */
    const float **krow, **vrow; /* [R] per-row cache bases for the current layer */
    int *pos;                   /* [R] */
} llama;

static float *take_vec(const weft_tensor_set *ts, const char *name, int64_t n, bool required, weft_err *err,
                       bool *failed) {
    const weft_tensor *t = weft_tensor_set_get(ts, name);
    if (!t) {
        if (required) {
            weft_err_set(err, WEFT_EFORMAT, "missing tensor %s", name);
            *failed = true;
        }
        return NULL;
    }
    float *v = weft_tensor_to_f32(t, n, err);
    if (!v) *failed = true;
    return v;
}

static const weft_tensor *take_mat(const weft_tensor_set *ts, const char *name, int64_t rows, int64_t cols,
                                   weft_err *err, bool *failed) {
    const weft_tensor *t = weft_tensor_set_get(ts, name);
    if (*failed) return t;
    if (!t) {
        weft_err_set(err, WEFT_EFORMAT, "missing tensor %s", name);
        *failed = true;
        return NULL;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        weft_err_set(err, WEFT_EFORMAT, "tensor %s: shape [%lld, %lld] expected, found %d-D [%lld, %lld]",
                     name, (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
                     (long long)(t->ndim > 1 ? t->shape[1] : 0));
        *failed = true;
    }
    return t;
}

static void llama_destroy(void *self) {
    llama *m = self;
    if (!m) return;
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        llama_layer *ly = &m->layers[l];
        free(ly->attn_norm);
        free(ly->ffn_norm);
        free(ly->q_norm);
        free(ly->k_norm);
        free(ly->bq);
        free(ly->bk);
        free(ly->bv);
    }
    free(m->layers);
    free(m->final_norm);
    weft_rope_free(&m->rope);
    free(m->x);
    free(m->xb);
    free(m->q);
    free(m->k);
    free(m->v);
    free(m->att);
    free(m->g);
    free(m->u);
    free(m->xo);
    free(m->krow);
    free(m->vrow);
    free(m->pos);
    free(m);
}

static size_t llama_state_bytes(const void *fam, int capacity) {
    const llama *m = fam;
    return (size_t)m->L * 2 * (size_t)capacity * (size_t)(m->Hkv * m->d) * sizeof(float);
}

/* Layer l's K (or V when which = 1) cache in a state of `cap` positions. */
static float *cache_at(const llama *m, void *state, int cap, int64_t l, int which) {
    return (float *)state + ((size_t)l * 2 + (size_t)which) * (size_t)cap * (size_t)(m->Hkv * m->d);
}

/* Every state starts with its capacity, which fixes where each layer's cache lies. */
typedef struct state_hdr {
    int capacity;
    int pad[15]; /* keeps the cache 64-byte aligned */
} state_hdr;

static size_t llama_state_bytes_hdr(const void *fam, int capacity) {
    return sizeof(state_hdr) + llama_state_bytes(fam, capacity);
}

static void llama_state_init_hdr(const void *fam, void *state, int capacity) {
    state_hdr *h = state;
    memset(h, 0, sizeof *h);
    h->capacity = capacity;
    /* The KV rows are not cleared: a row is always written (at its position) before any attention reads it,
     * and snapshots copy only rows below cache_len. Clearing gigabytes per request cost more than prefill. */
}

static void add_bias(float *y, const float *b, int64_t n_rows, int64_t n, int64_t stride) {
    if (!b) return;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * stride + i] += b[i];
}

static weft_status llama_forward(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                                 const int *out_rows, int n_out, float *logits, weft_err *err) {
    llama *m = fam;
    if (n > m->max_rows || n_out > m->max_rows)
        return weft_err_set(err, WEFT_EINVAL, "forward: %d rows exceed the row budget %d", n, m->max_rows);
    const int64_t H = m->H, d = m->d, qd = m->Hq * d, kvd = m->Hkv * d, I = m->I;
    for (int r = 0; r < n; r++) {
        const state_hdr *h = states[rows[r].slot];
        if (rows[r].token < 0 || rows[r].token >= m->V)
            return weft_err_set(err, WEFT_ERANGE, "token id %d outside the vocabulary (%lld)", rows[r].token,
                                (long long)m->V);
        if (rows[r].pos < 0 || rows[r].pos >= h->capacity)
            return weft_err_set(err, WEFT_ERANGE, "position %d outside the stream capacity %d", rows[r].pos,
                                h->capacity);
        weft_status st = weft_tensor_dequant_row(m->embed, rows[r].token, m->x + r * H, err);
        if (st) return st;
        m->pos[r] = rows[r].pos;
    }
    for (int64_t l = 0; l < m->L; l++) {
        const llama_layer *ly = &m->layers[l];
        for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, m->x + r * H, ly->attn_norm, H, m->eps);
        weft_matmul(pool, ly->wq, m->xb, n, m->q, qd);
        weft_matmul(pool, ly->wk, m->xb, n, m->k, kvd);
        weft_matmul(pool, ly->wv, m->xb, n, m->v, kvd);
        add_bias(m->q, ly->bq, n, qd, qd);
        add_bias(m->k, ly->bk, n, kvd, kvd);
        add_bias(m->v, ly->bv, n, kvd, kvd);
        for (int r = 0; r < n; r++) {
            float *q = m->q + r * qd, *k = m->k + r * kvd;
            if (ly->q_norm) {
                for (int64_t h = 0; h < m->Hq; h++) weft_rmsnorm(q + h * d, q + h * d, ly->q_norm, d, m->eps);
                for (int64_t h = 0; h < m->Hkv; h++)
                    weft_rmsnorm(k + h * d, k + h * d, ly->k_norm, d, m->eps);
            }
            weft_rope_apply(&m->rope, q, (int)m->Hq, (int)d, rows[r].pos);
            weft_rope_apply(&m->rope, k, (int)m->Hkv, (int)d, rows[r].pos);
            state_hdr *hd = states[rows[r].slot];
            float *K = cache_at(m, hd + 1, hd->capacity, l, 0), *V = cache_at(m, hd + 1, hd->capacity, l, 1);
            memcpy(K + (int64_t)rows[r].pos * kvd, k, (size_t)kvd * sizeof(float));
            memcpy(V + (int64_t)rows[r].pos * kvd, m->v + r * kvd, (size_t)kvd * sizeof(float));
            m->krow[r] = K;
            m->vrow[r] = V;
        }
        weft_attn_args aa = {n,       (int)m->Hq, (int)m->Hkv, (int)d, 1.0f / sqrtf((float)d),
                             m->q,    qd,         m->att,      qd,     m->krow,
                             m->vrow, kvd,        m->pos};
        weft_attention(pool, &aa);
        weft_matmul(pool, ly->wo, m->att, n, m->xo, H);
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->x[i] += m->xo[i];

        for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, m->x + r * H, ly->ffn_norm, H, m->eps);
        weft_matmul(pool, ly->wg, m->xb, n, m->g, I);
        weft_matmul(pool, ly->wu, m->xb, n, m->u, I);
        weft_swiglu(pool, m->g, m->u, (int64_t)n * I); /* silu(g) · u, vectorized over the pool */
        weft_matmul(pool, ly->wd, m->g, n, m->xo, H);
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->x[i] += m->xo[i];
    }
    for (int o = 0; o < n_out; o++)
        weft_rmsnorm(m->xb + o * H, m->x + out_rows[o] * H, m->final_norm, H, m->eps);
    weft_matmul(pool, m->head, m->xb, n_out, logits, m->V);
    return WEFT_OK;
}

static weft_status llama_keep(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err) {
    (void)fam;
    (void)pool;
    const state_hdr *h = state;
    if (cache_len < 0 || cache_len > h->capacity)
        return weft_err_set(err, WEFT_ERANGE, "keep: %d outside capacity %d", cache_len, h->capacity);
    return WEFT_OK; /* rows past cache_len are simply overwritten by the next forward */
}

/* Snapshot at pos: per layer the K rows [0, pos) then the V rows [0, pos). */
static size_t llama_snapshot_bytes(const void *fam, int pos) {
    const llama *m = fam;
    return (size_t)m->L * 2 * (size_t)pos * (size_t)(m->Hkv * m->d) * sizeof(float);
}

static weft_status llama_snapshot_save(const void *fam, const void *state, int pos, void *dst,
                                       weft_err *err) {
    const llama *m = fam;
    const state_hdr *h = state;
    if (pos < 0 || pos > h->capacity)
        return weft_err_set(err, WEFT_ERANGE, "snapshot at %d outside capacity %d", pos, h->capacity);
    size_t rows = (size_t)pos * (size_t)(m->Hkv * m->d) * sizeof(float);
    char *out = dst;
    for (int64_t l = 0; l < m->L; l++)
        for (int w = 0; w < 2; w++, out += rows)
            memcpy(out, cache_at(m, (void *)(h + 1), h->capacity, l, w), rows);
    return WEFT_OK;
}

static weft_status llama_snapshot_restore(const void *fam, void *state, int pos, const void *src,
                                          weft_err *err) {
    const llama *m = fam;
    state_hdr *h = state;
    if (pos < 0 || pos > h->capacity)
        return weft_err_set(err, WEFT_ERANGE, "restore at %d outside capacity %d", pos, h->capacity);
    size_t rows = (size_t)pos * (size_t)(m->Hkv * m->d) * sizeof(float);
    const char *in = src;
    for (int64_t l = 0; l < m->L; l++)
        for (int w = 0; w < 2; w++, in += rows) memcpy(cache_at(m, h + 1, h->capacity, l, w), in, rows);
    return WEFT_OK;
}

static const weft_family_ops LLAMA_OPS = {
    .name = "llama",
    .state_bytes = llama_state_bytes_hdr,
    .state_init = llama_state_init_hdr,
    .forward = llama_forward,
    .keep = llama_keep,
    .destroy = llama_destroy,
    .snapshot_bytes = llama_snapshot_bytes,
    .snapshot_save = llama_snapshot_save,
    .snapshot_restore = llama_snapshot_restore,
};

weft_status weft_llama_create(const weft_config *cfg, const weft_tensor_set *ts, const weft_family_opts *opts,
                              weft_family_model *out, weft_err *err) {
    llama *m = calloc(1, sizeof *m);
    if (!m) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    m->H = cfg->hidden_size;
    m->Hq = cfg->n_heads;
    m->Hkv = cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads;
    m->d = cfg->head_dim > 0 ? cfg->head_dim : (cfg->n_heads > 0 ? cfg->hidden_size / cfg->n_heads : 0);
    m->I = cfg->intermediate_size;
    m->V = cfg->vocab_size;
    m->L = cfg->n_layers;
    m->eps = (float)cfg->rms_norm_eps;
    m->max_rows = opts->max_rows > 0 ? opts->max_rows : 1;
    weft_status st = WEFT_OK;
    bool failed = false;
    if (m->H <= 0 || m->Hq <= 0 || m->Hkv <= 0 || m->d <= 0 || m->I <= 0 || m->V <= 0 || m->L <= 0 ||
        m->Hq % m->Hkv) {
        st = weft_err_set(
            err, WEFT_EFORMAT,
            "config: invalid shape (hidden %lld, heads %lld/%lld, head_dim %lld, ffn %lld, vocab "
            "%lld, layers %lld)",
            (long long)m->H, (long long)m->Hq, (long long)m->Hkv, (long long)m->d, (long long)m->I,
            (long long)m->V, (long long)m->L);
        goto fail;
    }
    if (cfg->mlp_bias) {
        st = weft_err_set(err, WEFT_ENOTSUP, "config: mlp_bias is not supported for %s",
                          weft_family_name(cfg->family));
        goto fail;
    }
    m->embed = take_mat(ts, "model.embed_tokens.weight", m->V, m->H, err, &failed);
    if (cfg->tie_word_embeddings || !weft_tensor_set_get(ts, "lm_head.weight"))
        m->head = m->embed;
    else
        m->head = take_mat(ts, "lm_head.weight", m->V, m->H, err, &failed);
    if (failed) goto fail_fmt;
    m->final_norm = take_vec(ts, "model.norm.weight", m->H, true, err, &failed);
    m->layers = calloc((size_t)m->L, sizeof *m->layers);
    if (!m->layers) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
        goto fail;
    }
    const bool qk_norm = cfg->family == WEFT_FAMILY_QWEN3;
    for (int64_t l = 0; l < m->L && !failed; l++) {
        llama_layer *ly = &m->layers[l];
        char nm[160];
#define NAME(suffix) (snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix), nm)
        ly->attn_norm = take_vec(ts, NAME("input_layernorm.weight"), m->H, true, err, &failed);
        ly->ffn_norm = take_vec(ts, NAME("post_attention_layernorm.weight"), m->H, true, err, &failed);
        if (failed) break;
        ly->wq = take_mat(ts, NAME("self_attn.q_proj.weight"), m->Hq * m->d, m->H, err, &failed);
        ly->wk = take_mat(ts, NAME("self_attn.k_proj.weight"), m->Hkv * m->d, m->H, err, &failed);
        ly->wv = take_mat(ts, NAME("self_attn.v_proj.weight"), m->Hkv * m->d, m->H, err, &failed);
        ly->wo = take_mat(ts, NAME("self_attn.o_proj.weight"), m->H, m->Hq * m->d, err, &failed);
        ly->wg = take_mat(ts, NAME("mlp.gate_proj.weight"), m->I, m->H, err, &failed);
        ly->wu = take_mat(ts, NAME("mlp.up_proj.weight"), m->I, m->H, err, &failed);
        ly->wd = take_mat(ts, NAME("mlp.down_proj.weight"), m->H, m->I, err, &failed);
        if (failed) break;
        ly->bq = take_vec(ts, NAME("self_attn.q_proj.bias"), m->Hq * m->d, cfg->attention_bias, err, &failed);
        ly->bk =
            take_vec(ts, NAME("self_attn.k_proj.bias"), m->Hkv * m->d, cfg->attention_bias, err, &failed);
        ly->bv =
            take_vec(ts, NAME("self_attn.v_proj.bias"), m->Hkv * m->d, cfg->attention_bias, err, &failed);
        if (qk_norm) {
            ly->q_norm = take_vec(ts, NAME("self_attn.q_norm.weight"), m->d, true, err, &failed);
            ly->k_norm = take_vec(ts, NAME("self_attn.k_norm.weight"), m->d, true, err, &failed);
        }
#undef NAME
    }
    if (failed) goto fail_fmt;
    st = weft_rope_init(&m->rope, &cfg->rope, m->d, err);
    if (st) goto fail;
    {
        size_t R = (size_t)m->max_rows, H = (size_t)m->H, qd = (size_t)(m->Hq * m->d),
               kvd = (size_t)(m->Hkv * m->d), I = (size_t)m->I;
        m->x = malloc(R * H * sizeof(float));
        m->xb = malloc(R * H * sizeof(float));
        m->q = malloc(R * qd * sizeof(float));
        m->k = malloc(R * kvd * sizeof(float));
        m->v = malloc(R * kvd * sizeof(float));
        m->att = malloc(R * qd * sizeof(float));
        m->g = malloc(R * I * sizeof(float));
        m->u = malloc(R * I * sizeof(float));
        m->xo = malloc(R * H * sizeof(float));
        m->krow = malloc(R * sizeof(float *));
        m->vrow = malloc(R * sizeof(float *));
        m->pos = malloc(R * sizeof(int));
        if (!m->x || !m->xb || !m->q || !m->k || !m->v || !m->att || !m->g || !m->u || !m->xo || !m->krow ||
            !m->vrow || !m->pos) {
            st = weft_err_set(err, WEFT_ENOMEM, "out of memory for %d activation rows", m->max_rows);
            goto fail;
        }
    }
    out->ops = &LLAMA_OPS;
    out->self = m;
    out->max_rows = m->max_rows;
    out->vocab_size = m->V;
    {
        size_t sc = (size_t)(m->I > m->H ? m->I : m->H);
        if ((size_t)(m->Hq * m->d) > sc) sc = (size_t)(m->Hq * m->d);
        if ((size_t)opts->max_context > sc) sc = (size_t)opts->max_context;
        out->scratch_floats = sc;
    }
    out->weights_bytes = 0;
    return WEFT_OK;
fail_fmt:
    st = err ? err->code : WEFT_EFORMAT;
fail:
    llama_destroy(m);
    return st;
}
