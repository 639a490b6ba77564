/* nemotron_h: the Nemotron-H hybrid (dense and MoE), families-and-formats §4 and §10.
 *
 *   h = E[token]
 *   per block i (kind from layers_block_type / hybrid_override_pattern):
 *       h += Mixer_i(RMSNorm(h; layers.i.norm))       one plain norm per block
 *       'M' Mamba-2 (nemotron_h_mamba.c)   '*' attention, no positional encoding, GQA (here)
 *       '-' relu² MLP, 'E' MoE (nemotron_h_moe.c)
 *   logits = RMSNorm(h; norm_f)·lm_headᵀ   (untied unless tie_word_embeddings)
 *
 * Stream state (layout in nemotron_h_internal.h): per Mamba layer two buffers of conv state [conv_dim, K−1]
 * and SSM state [Hm, P, N] fp32, per attention layer raw K and V [capacity, Hkv·d] fp32, a header (capacity,
 * length, live buffer, journal window) and the rollback journal.
 *
 * keep() (rollback after a verify window): recurrent states cannot be trimmed. A forward's step for the first
 * journaled row of a stream reads the live buffer and writes the other one (the same arithmetic as in place,
 * so no copy is made): the old buffer keeps the states at the window start for free. The journal also holds
 * each journaled row's raw Mamba inputs (xBC and dt, conv_dim + Hm floats per row and layer). keep(c) replays
 * rows [window start, c) from the old buffer through the same conv and SSM task functions (no matmuls), then
 * zeroes the dropped records and KV rows: the state is bit-identical to one fed the kept tokens directly.
 * Measured against the alternative, a snapshot of every Mamba layer's conv+SSM state at each row of the
 * window (Release build, this 2-core machine): on the fixtures (5.6 KB of state per row) the snapshots cost
 * 0.25 us per 5-row window and the replay of 2 rows 3.2 us — both negligible; at Nemotron 3 Nano's Mamba
 * dimensions (2.07 MiB per layer and row) the snapshots cost 3.2–6.9 ms per layer and 5-row window, the
 * replay 0.8–1.3 ms per layer (and only when a window is rejected, where snapshots are paid on every row
 * fed, decode included). Hence replay. The journal costs one extra recurrent state per stream plus 16
 * records (at Nano: 46 MiB + 9 MiB per stream). */
#include "families/mtp.h"
#include "families/nemotron_h_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state layout (nemotron_h_internal.h) ---- */

static int64_t conv_floats(const nh_model *m) {
    return m->conv_dim * (m->K - 1);
}
static int64_t rstate_floats(const nh_model *m) {
    return conv_floats(m) + m->Hm * m->P * m->N;
}
static int64_t kv_floats(const nh_model *m, int cap) {
    return (int64_t)cap * m->Hkv * m->d;
}
static int64_t rec_floats(const nh_model *m) {
    return m->conv_dim + m->Hm;
}

static size_t nh_state_bytes(const void *fam, int capacity) {
    const nh_model *m = fam;
    return sizeof(nh_hdr) + ((size_t)m->n_mamba * 2 * (size_t)rstate_floats(m) +
                             (size_t)m->n_attn * 2 * (size_t)kv_floats(m, capacity) +
                             (size_t)m->n_mamba * NH_KEEP_WINDOW * (size_t)rec_floats(m)) *
                                sizeof(float);
}

static void nh_state_init(const void *fam, void *state, int capacity) {
    memset(state, 0, nh_state_bytes(fam, capacity));
    ((nh_hdr *)state)->capacity = capacity;
}

static float *body(void *state) {
    return (float *)((nh_hdr *)state + 1);
}

float *weft_nh_conv(const nh_model *m, void *state, int i, int buf) {
    return body(state) + ((int64_t)i * 2 + buf) * rstate_floats(m);
}
float *weft_nh_ssm(const nh_model *m, void *state, int i, int buf) {
    return weft_nh_conv(m, state, i, buf) + conv_floats(m);
}

static float *kv(const nh_model *m, void *state, int j, int which) {
    return body(state) + (int64_t)m->n_mamba * 2 * rstate_floats(m) +
           (int64_t)(2 * j + which) * kv_floats(m, ((nh_hdr *)state)->capacity);
}

float *weft_nh_record(const nh_model *m, void *state, int i, int rec) {
    return kv(m, state, m->n_attn, 0) + ((int64_t)i * NH_KEEP_WINDOW + rec) * rec_floats(m);
}

/* Zeroes journal records [from, to) of every Mamba layer (unused records are zero, so that a state's bytes
 * depend only on what was fed and how). */
static void clear_records(const nh_model *m, void *state, int from, int to) {
    if (to <= from) return;
    for (int i = 0; i < m->n_mamba; i++)
        memset(weft_nh_record(m, state, i, from), 0,
               (size_t)(to - from) * (size_t)rec_floats(m) * sizeof(float));
}

/* ---- attention ('*'): q/k/v into proj_buf [n, qd | kvd | kvd], output into y [n, qd] ---- */

static void attn_forward(nh_model *m, weft_pool *pool, const nh_attn *a, void *const *states,
                         const weft_row *rows, int n) {
    const int64_t d = m->d, qd = m->Hq * d, kvd = m->Hkv * d, ld = qd + 2 * kvd;
    float *q = m->proj_buf;
    weft_matmul(pool, a->wq, m->xb, n, q, ld);
    weft_matmul(pool, a->wk, m->xb, n, q + qd, ld);
    weft_matmul(pool, a->wv, m->xb, n, q + qd + kvd, ld);
    for (int r = 0; r < n; r++) {
        float *qr = q + (int64_t)r * ld;
        for (int64_t i = 0; a->bq && i < qd; i++) qr[i] += a->bq[i];
        for (int64_t i = 0; a->bk && i < kvd; i++) qr[qd + i] += a->bk[i];
        for (int64_t i = 0; a->bv && i < kvd; i++) qr[qd + kvd + i] += a->bv[i];
        void *st = states[rows[r].slot];
        float *K = kv(m, st, a->idx, 0), *V = kv(m, st, a->idx, 1);
        memcpy(K + (int64_t)rows[r].pos * kvd, qr + qd, (size_t)kvd * sizeof(float));
        memcpy(V + (int64_t)rows[r].pos * kvd, qr + qd + kvd, (size_t)kvd * sizeof(float));
        m->krow[r] = K;
        m->vrow[r] = V;
        m->pos[r] = rows[r].pos;
    }
    weft_attn_args aa = {n,       (int)m->Hq, (int)m->Hkv, (int)d, 1.0f / sqrtf((float)d), q, ld, m->y, qd,
                         m->krow, m->vrow,    kvd,         m->pos};
    weft_attention(pool, &aa);
    weft_matmul(pool, a->wo, m->y, n, m->xo, m->H);
    weft_nh_add_bias(m->xo, a->bo, n, m->H);
}

/* ---- forward ---- */

/* Checks rows and splits them into per-stream segments (one run of consecutive positions per slot, starting
 * at the stream's length). */
static weft_status plan(nh_model *m, void *const *states, const weft_row *rows, int n, int *n_segs,
                        weft_err *err) {
    int ns = 0;
    for (int r = 0; r < n; r++) {
        const weft_row *w = &rows[r];
        if (w->token < 0 || w->token >= m->V)
            return weft_err_set(err, WEFT_ERANGE, "token id %d outside the vocabulary (%lld)", w->token,
                                (long long)m->V);
        const nh_hdr *h = states[w->slot];
        if (w->pos < 0 || w->pos >= h->capacity || w->pos >= m->max_context)
            return weft_err_set(err, WEFT_ERANGE, "position %d outside the stream capacity %d", w->pos,
                                h->capacity < m->max_context ? h->capacity : m->max_context);
        if (r > 0 && w->slot == rows[r - 1].slot) {
            if (w->pos != rows[r - 1].pos + 1)
                return weft_err_set(err, WEFT_EINVAL,
                                    "forward: slot %d rows at positions %d then %d (not consecutive)",
                                    w->slot, rows[r - 1].pos, w->pos);
            m->segs[ns - 1].b = r + 1;
            continue;
        }
        for (int s = 0; s < ns; s++)
            if (m->segs[s].state == states[w->slot])
                return weft_err_set(err, WEFT_EINVAL, "forward: slot %d appears in two separate runs of rows",
                                    w->slot);
        if (w->pos != h->len)
            return weft_err_set(
                err, WEFT_EINVAL,
                "forward: slot %d starts at position %d but its stream holds %d positions (recurrent "
                "state: keep() first)",
                w->slot, w->pos, h->len);
        m->segs[ns++] = (nh_seg){r, r + 1, r, h->cur, states[w->slot]};
    }
    *n_segs = ns;
    return WEFT_OK;
}

static weft_status nh_forward(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                              const int *out_rows, int n_out, float *logits, weft_err *err) {
    nh_model *m = fam;
    if (n < 0 || n > m->max_rows || n_out < 0 || n_out > m->max_rows)
        return weft_err_set(err, WEFT_EINVAL, "forward: %d rows (%d outputs) exceed the row budget %d", n,
                            n_out, m->max_rows);
    for (int o = 0; o < n_out; o++)
        if (out_rows[o] < 0 || out_rows[o] >= n)
            return weft_err_set(err, WEFT_EINVAL, "forward: output row %d outside the %d rows", out_rows[o],
                                n);
    int ns = 0;
    weft_status st = plan(m, states, rows, n, &ns, err);
    if (st) return st;
    for (int r = 0; r < n; r++) {
        st = weft_tensor_dequant_row(m->embed, rows[r].token, m->x + (int64_t)r * m->H, err);
        if (st) return st;
    }
    /* journal window of each stream: its last NH_KEEP_WINDOW rows of this call */
    for (int s = 0; s < ns; s++) {
        nh_seg *sg = &m->segs[s];
        nh_hdr *h = sg->state;
        sg->snap = sg->b - sg->a > NH_KEEP_WINDOW ? sg->b - NH_KEEP_WINDOW : sg->a;
        clear_records(m, sg->state, sg->b - sg->snap, h->n_rec);
        h->win_start = h->len + (sg->snap - sg->a);
        h->n_rec = sg->b - sg->snap;
    }
    const int64_t H = m->H;
    for (int64_t l = 0; l < m->L; l++) {
        const nh_layer *ly = &m->layers[l];
        for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, m->x + r * H, ly->norm, H, m->eps);
        switch (ly->kind) {
        case WEFT_LAYER_LINEAR:
            weft_nh_mamba_forward(m, pool, &ly->mamba, m->segs, ns, n);
            break;
        case WEFT_LAYER_ATTENTION:
            attn_forward(m, pool, &ly->attn, states, rows, n);
            break;
        case WEFT_LAYER_MLP:
            weft_nh_mlp_forward(m, pool, &ly->mlp, n);
            break;
        case WEFT_LAYER_MOE:
            weft_nh_moe_forward(m, pool, &ly->moe, n);
            break;
        }
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->x[i] += m->xo[i];
    }
    for (int s = 0; s < ns; s++) {
        nh_hdr *h = m->segs[s].state;
        h->len = rows[m->segs[s].b - 1].pos + 1;
        h->cur = 1 - m->segs[s].from; /* the other buffer keeps the window start */
    }
    for (int o = 0; o < n_out; o++) weft_rmsnorm(m->xb + o * H, m->x + out_rows[o] * H, m->norm_f, H, m->eps);
    weft_matmul(pool, m->head, m->xb, n_out, logits, m->V);
    return WEFT_OK;
}

static weft_status nh_keep(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err) {
    nh_model *m = fam;
    nh_hdr *h = state;
    if (cache_len == h->len) return WEFT_OK;
    if (cache_len < 0 || cache_len > h->len)
        return weft_err_set(err, WEFT_ERANGE, "keep: %d outside the stream's %d positions", cache_len,
                            h->len);
    if (cache_len < h->win_start)
        return weft_err_set(
            err, WEFT_ERANGE,
            "keep: cannot roll back to %d: the last forward journaled positions from %d on (at most "
            "%d rows)",
            cache_len, h->win_start, NH_KEEP_WINDOW);
    const int n_keep = cache_len - h->win_start;
    if (n_keep == 0) {
        h->cur = 1 - h->cur; /* the window-start buffer becomes live */
    } else {
        /* the replay is the conv and SSM steps only (no matmuls), parallel over heads */
        for (int64_t l = 0; l < m->L; l++)
            if (m->layers[l].kind == WEFT_LAYER_LINEAR)
                weft_nh_mamba_replay(m, pool, &m->layers[l].mamba, state, n_keep);
    }
    clear_records(m, state, n_keep, h->n_rec);
    const int64_t kvd = m->Hkv * m->d;
    for (int a = 0; a < m->n_attn; a++)
        for (int which = 0; which < 2; which++)
            memset(kv(m, state, a, which) + (int64_t)cache_len * kvd, 0,
                   (size_t)(h->len - cache_len) * (size_t)kvd * sizeof(float));
    h->n_rec = n_keep;
    h->len = cache_len;
    return WEFT_OK;
}

/* Snapshot at pos (the stream's length): per Mamba layer its live conv and SSM states, then per attention
 * layer the K rows [0, pos) and the V rows [0, pos). These are the bytes that depend only on the tokens fed.
 * The journal is not part of it: a restored stream can be rolled back only within calls made after it. */
static size_t nh_snapshot_bytes(const void *fam, int pos) {
    const nh_model *m = fam;
    return ((size_t)m->n_mamba * (size_t)rstate_floats(m) +
            (size_t)m->n_attn * 2 * (size_t)kv_floats(m, pos)) *
           sizeof(float);
}

static weft_status nh_snapshot_save(const void *fam, const void *state, int pos, void *dst, weft_err *err) {
    const nh_model *m = fam;
    const nh_hdr *h = state;
    if (pos != h->len)
        return weft_err_set(err, WEFT_ERANGE,
                            "snapshot at %d: the stream holds %d positions (recurrent state)", pos, h->len);
    void *st = (void *)(uintptr_t)state; /* the accessors take a mutable state; nothing is written */
    const size_t rs = (size_t)rstate_floats(m) * sizeof(float),
                 rows = (size_t)kv_floats(m, pos) * sizeof(float);
    char *out = dst;
    for (int i = 0; i < m->n_mamba; i++, out += rs) memcpy(out, weft_nh_conv(m, st, i, h->cur), rs);
    for (int a = 0; a < m->n_attn; a++)
        for (int w = 0; w < 2; w++, out += rows) memcpy(out, kv(m, st, a, w), rows);
    return WEFT_OK;
}

static weft_status nh_snapshot_restore(const void *fam, void *state, int pos, const void *src,
                                       weft_err *err) {
    const nh_model *m = fam;
    nh_hdr *h = state;
    if (pos < 0 || pos > h->capacity)
        return weft_err_set(err, WEFT_ERANGE, "restore at %d outside capacity %d", pos, h->capacity);
    const size_t rs = (size_t)rstate_floats(m) * sizeof(float),
                 rows = (size_t)kv_floats(m, pos) * sizeof(float);
    const char *in = src;
    for (int i = 0; i < m->n_mamba; i++, in += rs) memcpy(weft_nh_conv(m, state, i, h->cur), in, rs);
    for (int a = 0; a < m->n_attn; a++)
        for (int w = 0; w < 2; w++, in += rows) memcpy(kv(m, state, a, w), in, rows);
    clear_records(m, state, 0, h->n_rec);
    h->len = pos;
    h->win_start = pos; /* nothing journaled: keep() only to pos until the next forward */
    h->n_rec = 0;
    return WEFT_OK;
}

/* ---- construction ---- */

static void nh_destroy(void *self) {
    nh_model *m = self;
    if (!m) return;
    weft_nh_free_weights(m);
    void *bufs[] = {m->x,     m->xb,   m->xo,   m->proj_buf, m->xbc,   m->y,     m->ffn,
                    m->lat,   m->acc,  m->gx,   m->gy,       m->score, m->sel_w, m->sel,
                    m->grows, m->krow, m->vrow, m->pos,      m->segs,  m->replay};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(m);
}

static const weft_family_ops NH_OPS = {
    .name = "nemotron_h",
    .state_bytes = nh_state_bytes,
    .state_init = nh_state_init,
    .forward = nh_forward,
    .keep = nh_keep,
    .destroy = nh_destroy,
    .snapshot_bytes = nh_snapshot_bytes,
    .snapshot_save = nh_snapshot_save,
    .snapshot_restore = nh_snapshot_restore,
};

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static weft_status check_config(nh_model *m, const weft_config *cfg, weft_err *err) {
    for (int64_t l = 0; l < m->L; l++) {
        switch (cfg->layer_kind[l]) {
        case WEFT_LAYER_LINEAR:
            m->n_mamba++;
            break;
        case WEFT_LAYER_ATTENTION:
            m->n_attn++;
            break;
        case WEFT_LAYER_MLP:
        case WEFT_LAYER_MOE:
            break;
        default:
            return weft_err_set(err, WEFT_ENOTSUP,
                                "nemotron_h: layer %lld has a block type (%d) this build cannot run",
                                (long long)l, (int)cfg->layer_kind[l]);
        }
    }
    if (m->H <= 0 || m->V <= 0 || m->L <= 0)
        return weft_err_set(err, WEFT_EFORMAT, "nemotron_h config: invalid hidden_size/vocab_size/layers");
    if (m->n_mamba && (m->Hm <= 0 || m->P <= 0 || m->N <= 0 || m->G <= 0 || m->K < 1 || m->Hm % m->G))
        return weft_err_set(
            err, WEFT_EFORMAT,
            "nemotron_h config: invalid Mamba shape (mamba_num_heads %lld, mamba_head_dim %lld, "
            "ssm_state_size %lld, n_groups %lld, conv_kernel %lld)",
            (long long)m->Hm, (long long)m->P, (long long)m->N, (long long)m->G, (long long)m->K);
    if (m->n_attn && (m->Hq <= 0 || m->Hkv <= 0 || m->d <= 0 || m->Hq % m->Hkv))
        return weft_err_set(err, WEFT_EFORMAT,
                            "nemotron_h config: invalid attention heads %lld/%lld, head_dim %lld",
                            (long long)m->Hq, (long long)m->Hkv, (long long)m->d);
    if (!(m->dt_lo <= m->dt_hi))
        return weft_err_set(err, WEFT_EFORMAT, "nemotron_h config: time_step_limit [%g, %g] is empty",
                            (double)m->dt_lo, (double)m->dt_hi);
    return WEFT_OK;
}

weft_status weft_nemotron_h_create(const weft_config *cfg, const weft_tensor_set *ts,
                                   const weft_family_opts *opts, weft_family_model *out, weft_err *err) {
    nh_model *m = calloc(1, sizeof *m);
    if (!m) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    m->H = cfg->hidden_size;
    m->V = cfg->vocab_size;
    m->L = cfg->n_layers;
    m->eps = (float)cfg->rms_norm_eps;
    m->Hm = cfg->mamba_num_heads;
    m->P = cfg->mamba_head_dim;
    m->N = cfg->ssm_state_size;
    m->G = cfg->n_groups;
    m->K = cfg->conv_kernel;
    m->d_inner = m->Hm * m->P; /* not expand·H (§4.3) */
    m->conv_dim = m->d_inner + 2 * m->G * m->N;
    m->proj = m->d_inner + m->conv_dim + m->Hm;
    m->dt_lo = (float)cfg->time_step_limit_min;
    m->dt_hi = (float)cfg->time_step_limit_max;
    m->Hq = cfg->n_heads;
    m->Hkv = cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads;
    m->d = cfg->head_dim;
    m->I = cfg->intermediate_size;
    m->E = cfg->num_experts;
    m->topk = cfg->num_experts_per_tok;
    m->Ie = cfg->moe_intermediate_size;
    m->Hl = cfg->moe_latent_size > 0 ? cfg->moe_latent_size : m->H;
    m->n_group = cfg->n_group > 0 ? cfg->n_group : 1;
    m->topk_group = cfg->topk_group > 0 ? cfg->topk_group : 1;
    m->norm_topk = cfg->norm_topk_prob;
    m->routed_scale = (float)cfg->routed_scaling_factor;
    m->Is_max = cfg->n_shared_experts > 0 ? cfg->shared_expert_intermediate_size : 0;
    m->max_rows = opts->max_rows > 0 ? opts->max_rows : 1;
    m->max_context = opts->max_context > 0 ? opts->max_context : 1;
    weft_status st = check_config(m, cfg, err);
    if (!st) st = weft_nh_load(m, cfg, ts, opts, err);
    if (st) {
        nh_destroy(m);
        return st;
    }
    const size_t R = (size_t)m->max_rows, F = sizeof(float);
    const int64_t qd = m->Hq * m->d, kvd = m->Hkv * m->d;
    const size_t projw = (size_t)max64(m->n_mamba ? m->proj : 0, m->n_attn ? qd + 2 * kvd : 0);
    const size_t yw = (size_t)max64(m->n_mamba ? m->d_inner : 0, m->n_attn ? qd : 0);
    const size_t ffw = (size_t)max64(max64(m->I, m->E ? m->Ie : 0), m->Is_max);
    const size_t Hl = (size_t)m->Hl, E = (size_t)m->E;
    m->x = malloc(R * (size_t)m->H * F);
    m->xb = malloc(R * (size_t)m->H * F);
    m->xo = malloc(R * (size_t)m->H * F);
    m->proj_buf = malloc(R * (projw ? projw : 1) * F);
    m->xbc = malloc(R * (size_t)(m->conv_dim > 0 ? m->conv_dim : 1) * F);
    m->y = malloc(R * (yw ? yw : 1) * F);
    m->ffn = malloc(R * (ffw ? ffw : 1) * F);
    m->lat = malloc(R * Hl * F);
    m->acc = malloc(R * Hl * F);
    m->gx = malloc(R * Hl * F);
    m->gy = malloc(R * (size_t)max64(m->Hl, m->H) * F);
    m->score = malloc(R * (E ? E : 1) * F);
    m->sel_w = malloc(R * (E ? E : 1) * F);
    m->sel = malloc(R * (E ? E : 1));
    m->grows = malloc(R * sizeof(int));
    m->krow = malloc(R * sizeof(float *));
    m->vrow = malloc(R * sizeof(float *));
    m->pos = malloc(R * sizeof(int));
    m->segs = malloc(R * sizeof(nh_seg));
    m->replay = malloc((size_t)(m->N + 1) * F);
    if (!m->x || !m->xb || !m->xo || !m->proj_buf || !m->xbc || !m->y || !m->ffn || !m->lat || !m->acc ||
        !m->gx || !m->gy || !m->score || !m->sel_w || !m->sel || !m->grows || !m->krow || !m->vrow ||
        !m->pos || !m->segs || !m->replay) {
        nh_destroy(m);
        return weft_err_set(err, WEFT_ENOMEM, "out of memory for %d activation rows", m->max_rows);
    }
    out->ops = &NH_OPS;
    out->self = m;
    out->max_rows = m->max_rows;
    out->vocab_size = m->V;
    /* per-thread scratch: the longest weight row a matmul decodes, attention scores, the SSM step's Δ·B */
    int64_t sc = max64(max64(m->H, m->d_inner), max64(qd, ffw));
    sc = max64(sc, max64(m->Hl, m->max_context));
    sc = max64(sc, m->N);
    out->scratch_floats = (size_t)sc;
    out->weights_bytes = m->weights_bytes;
    return weft_nemotron_h_mtp_attach(cfg, ts, opts, out, err); /* the MTP head, if any (nemotron_h_mtp.c) */
}
