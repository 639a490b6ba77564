/* The qwen3_5 / qwen3_5_moe forward over rows of many streams (families-and-formats §3.2–§3.4, §3.8):
 *
 *   h = E[token]
 *   per layer:  h += Mixer(RMSNorm_1p(h; input_layernorm))       Mixer = Gated DeltaNet or gated attention
 *               h += FFN(RMSNorm_1p(h; post_attention_layernorm)) FFN = SwiGLU MLP or MoE block
 *   logits = RMSNorm_1p(h; norm)·W_headᵀ
 *
 * Rows are first reordered so that each stream's rows are contiguous and in position order (a "group"); every
 * op is per row, per (row, head), or — for the recurrences — per (group, head) sequentially over the group's
 * rows, so a row's bits never depend on the other rows of the call nor on the thread count (SPEC §4.3.1–2).
 */
#include "families/qwen3_5_impl.h"

#include <stdlib.h>
#include <string.h>

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* Groups rows by slot (first appearance order), checks positions, builds the internal order. */
static weft_status plan_rows(q35 *m, void *const *states, const weft_row *rows, int n, int *n_groups,
                             weft_err *err) {
    int G = 0;
    for (int r = 0; r < n; r++) {
        const weft_row *w = &rows[r];
        if (w->token < 0 || w->token >= m->V)
            return weft_err_set(err, WEFT_ERANGE, "token id %d outside the vocabulary (%lld)", w->token,
                                (long long)m->V);
        int g = 0;
        while (g < G && m->groups[g].slot != w->slot) g++;
        q35_hdr *h = w->slot >= 0 ? states[w->slot] : NULL;
        if (!h) return weft_err_set(err, WEFT_EINVAL, "row %d: slot %d has no state", r, w->slot);
        if (g == G) {
            if (w->pos != h->len)
                return weft_err_set(err, WEFT_EINVAL,
                                    "slot %d: first row at position %d but the stream holds %d positions",
                                    w->slot, w->pos, h->len);
            m->groups[G++] = (q35_group){w->slot, 0, 0, w->pos, 0, h, NULL, NULL, NULL};
        } else if (w->pos != m->groups[g].pos0 + m->groups[g].n) {
            return weft_err_set(err, WEFT_EINVAL, "slot %d: row at position %d does not follow position %d",
                                w->slot, w->pos, m->groups[g].pos0 + m->groups[g].n - 1);
        }
        if (w->pos >= h->capacity || w->pos >= m->max_context)
            return weft_err_set(err, WEFT_ERANGE,
                                "position %d outside the stream capacity %d (max context %d)", w->pos,
                                h->capacity, m->max_context);
        m->groups[g].n++;
        m->row_group[r] = g;
    }
    int r0 = 0;
    for (int g = 0; g < G; g++) {
        q35_group *gr = &m->groups[g];
        gr->r0 = r0;
        r0 += gr->n;
        gr->rec = gr->n < Q35_WINDOW ? gr->n : Q35_WINDOW;
        gr->src = q35_block(m, gr->hdr, gr->hdr->cur);
        gr->dst = q35_block(m, gr->hdr, 1 - gr->hdr->cur);
        gr->win = q35_window(m, gr->hdr);
        gr->n = 0; /* refilled below as rows are placed */
    }
    for (int r = 0; r < n; r++) {
        q35_group *gr = &m->groups[m->row_group[r]];
        int ir = gr->r0 + gr->n++;
        m->perm[ir] = r;
        m->inv[r] = ir;
        m->pos[ir] = rows[r].pos;
    }
    *n_groups = G;
    return WEFT_OK;
}

/* Gated DeltaNet mixer: a = xb rows; output into xo. */
static void gdn_layer(q35 *m, weft_pool *pool, const q35_layer *ly, int n, int G) {
    const int64_t C = m->C, Hv = m->Hv;
    weft_matmul(pool, ly->w_qkv, m->xb, n, m->mqkv, C);
    weft_matmul(pool, ly->w_z, m->xb, n, m->z, m->value_dim);
    weft_matmul(pool, ly->w_b, m->xb, n, m->bb, Hv);
    weft_matmul(pool, ly->w_a, m->xb, n, m->aa, Hv);
    if (m->keep_mode == Q35_KEEP_REPLAY) { /* record the recurrence inputs of the window rows */
        for (int g = 0; g < G; g++) {
            const q35_group *gr = &m->groups[g];
            for (int t = 0; t < gr->rec; t++) {
                float *rec = gr->win + (size_t)t * m->rec_floats + (size_t)ly->idx * (size_t)(C + 2 * Hv);
                int64_t r = gr->r0 + t;
                memcpy(rec, m->mqkv + r * C, (size_t)C * sizeof(float));
                memcpy(rec + C, m->bb + r * Hv, (size_t)Hv * sizeof(float));
                memcpy(rec + C + Hv, m->aa + r * Hv, (size_t)Hv * sizeof(float));
            }
        }
    }
    q35_gdn_job job = {.m = m,
                       .ly = ly,
                       .groups = m->groups,
                       .n_groups = G,
                       .mq = m->mqkv,
                       .bq = m->bb,
                       .aq = m->aa,
                       .m_stride = C,
                       .ba_stride = Hv,
                       .c = m->cbuf,
                       .beta = m->beta,
                       .decay = m->decay,
                       .z = m->z,
                       .o = m->o,
                       .snapshots = m->keep_mode == Q35_KEEP_SNAPSHOT};
    q35_gdn_run(pool, &job, n, NULL);
    weft_matmul(pool, ly->w_out, m->o, n, m->xo, m->H);
}

/* Gated full attention (§3.3): q_proj rows interleave query and output gate per head; zero-centred q/k norms;
 * partial RoPE; causal GQA over the stream's cache; o ⊙ σ(gate); o_proj. Output into xo. */
static void attn_layer(q35 *m, weft_pool *pool, const q35_layer *ly, int n) {
    const int64_t d = m->d, qd = m->Hq * d, kvd = m->Hkv * d;
    weft_matmul(pool, ly->wq, m->xb, n, m->uq, m->qrows);
    weft_matmul(pool, ly->wk, m->xb, n, m->k, kvd);
    weft_matmul(pool, ly->wv, m->xb, n, m->v, kvd);
    for (int r = 0; r < n; r++) {
        const float *u = m->uq + r * m->qrows;
        float *q = m->q + r * qd, *k = m->k + r * kvd;
        for (int64_t h = 0; h < m->Hq; h++) {
            const float *src = u + h * (m->out_gate ? 2 * d : d);
            weft_rmsnorm(q + h * d, src, ly->q_norm, d, m->eps);
        }
        for (int64_t h = 0; h < m->Hkv; h++) weft_rmsnorm(k + h * d, k + h * d, ly->k_norm, d, m->eps);
        weft_rope_apply(&m->rope, q, (int)m->Hq, (int)d, m->pos[r]);
        weft_rope_apply(&m->rope, k, (int)m->Hkv, (int)d, m->pos[r]);
        q35_hdr *hd = m->groups[m->row_group[m->perm[r]]].hdr;
        float *K = q35_kv(m, hd, ly->idx, 0), *V = q35_kv(m, hd, ly->idx, 1);
        memcpy(K + (int64_t)m->pos[r] * kvd, k, (size_t)kvd * sizeof(float));
        memcpy(V + (int64_t)m->pos[r] * kvd, m->v + r * kvd, (size_t)kvd * sizeof(float));
        m->krow[r] = K;
        m->vrow[r] = V;
    }
    weft_attn_args aa = {n,       (int)m->Hq, (int)m->Hkv, (int)d, 1.0f / sqrtf((float)d),
                         m->q,    qd,         m->att,      qd,     m->krow,
                         m->vrow, kvd,        m->pos};
    weft_attention(pool, &aa);
    if (m->out_gate)
        for (int r = 0; r < n; r++)
            for (int64_t h = 0; h < m->Hq; h++) {
                const float *gt = m->uq + r * m->qrows + h * 2 * d + d;
                float *o = m->att + r * qd + h * d;
                for (int64_t i = 0; i < d; i++) o[i] = o[i] * sigmoidf(gt[i]);
            }
    weft_matmul(pool, ly->wo, m->att, n, m->xo, m->H);
}

/* SwiGLU: y = (silu(x·Wgᵀ) ⊙ x·Wuᵀ)·Wdᵀ over n rows of x (stride H) into y (stride H). */
static void swiglu(q35 *m, weft_pool *pool, const weft_tensor *wg, const weft_tensor *wu,
                   const weft_tensor *wd, const float *x, int n, float *y) {
    int64_t I = weft_tensor_rows(wg);
    weft_matmul(pool, wg, x, n, m->g, I);
    weft_matmul(pool, wu, x, n, m->u, I);
    for (int64_t i = 0; i < (int64_t)n * I; i++) m->g[i] = weft_silu(m->g[i]) * m->u[i];
    weft_matmul(pool, wd, m->g, n, y, m->H);
}

/* MoE block (§3.8): p = softmax(x·W_rᵀ) in fp32; top-k with ties to the lower expert id; weights renormalised
 * over the k; routed sum in ascending expert id (as HF's loop over experts); plus σ(x·w_sg)·shared(x).
 * Output into xo. */
static void moe_layer(q35 *m, weft_pool *pool, const q35_layer *ly, int n) {
    const int64_t E = m->E, k = m->topk, H = m->H;
    weft_matmul(pool, ly->router, m->xb, n, m->rl, E);
    for (int r = 0; r < n; r++) {
        float *p = m->rl + r * E, mx = -INFINITY, sum = 0.0f;
        for (int64_t e = 0; e < E; e++)
            if (p[e] > mx) mx = p[e];
        for (int64_t e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        for (int64_t e = 0; e < E; e++) p[e] = p[e] / sum;
        int *sel = m->sel + r * k;
        float *sw = m->sw + r * k, tot = 0.0f;
        for (int64_t i = 0; i < k; i++) { /* i-th largest; strict > keeps the lower id on ties */
            int best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t j = 0; j < i; j++) taken |= sel[j] == (int)e;
                if (!taken && (best < 0 || p[e] > p[best])) best = (int)e;
            }
            sel[i] = best;
            sw[i] = p[best];
            tot += sw[i];
        }
        for (int64_t i = 0; i < k; i++) sw[i] = sw[i] / tot;
    }
    for (int64_t e = 0; e < E; e++) {
        int ne = 0;
        for (int r = 0; r < n; r++)
            for (int64_t i = 0; i < k; i++)
                if (m->sel[r * k + i] == (int)e) {
                    m->ex_rows[ne] = (int)(r * k + i);
                    memcpy(m->ex_x + (int64_t)ne * H, m->xb + r * H, (size_t)H * sizeof(float));
                    ne++;
                }
        if (!ne) continue;
        swiglu(m, pool, &ly->ex[3 * e], &ly->ex[3 * e + 1], &ly->ex[3 * e + 2], m->ex_x, ne, m->ex_y);
        for (int j = 0; j < ne; j++)
            memcpy(m->ey + (int64_t)m->ex_rows[j] * H, m->ex_y + (int64_t)j * H, (size_t)H * sizeof(float));
    }
    if (ly->sh_g) {
        swiglu(m, pool, ly->sh_g, ly->sh_u, ly->sh_d, m->xb, n, m->xo);
        weft_matmul(pool, ly->sh_gate, m->xb, n, m->sg, 1);
    }
    for (int r = 0; r < n; r++) {
        const int *sel = m->sel + r * k;
        float *y = m->xo + r * H, gate = ly->sh_g ? sigmoidf(m->sg[r]) : 0.0f;
        float *acc = m->ex_y; /* free again: one row's routed sum */
        for (int64_t c = 0; c < H; c++) acc[c] = 0.0f;
        for (int64_t e = 0; e < E; e++) /* ascending expert id */
            for (int64_t i = 0; i < k; i++)
                if (sel[i] == (int)e) {
                    const float *ye = m->ey + (r * k + i) * H;
                    for (int64_t c = 0; c < H; c++) acc[c] += ye[c] * m->sw[r * k + i];
                }
        if (ly->sh_g)
            for (int64_t c = 0; c < H; c++) y[c] = acc[c] + gate * y[c];
        else
            memcpy(y, acc, (size_t)H * sizeof(float));
    }
}

weft_status q35_forward(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                        const int *out_rows, int n_out, float *logits, weft_err *err) {
    q35 *m = fam;
    if (n < 0 || n > m->max_rows || n_out < 0 || n_out > m->max_rows)
        return weft_err_set(err, WEFT_EINVAL, "forward: %d rows (%d drawn) exceed the row budget %d", n,
                            n_out, m->max_rows);
    for (int o = 0; o < n_out; o++)
        if (out_rows[o] < 0 || out_rows[o] >= n)
            return weft_err_set(err, WEFT_EINVAL, "forward: out row %d outside the %d rows", out_rows[o], n);
    if (n == 0) return WEFT_OK;
    int G = 0;
    weft_status st = plan_rows(m, states, rows, n, &G, err);
    if (st) return st;
    const int64_t H = m->H;
    for (int r = 0; r < n; r++) {
        st = weft_tensor_dequant_row(m->embed, rows[m->perm[r]].token, m->x + r * H, err);
        if (st) return st;
    }
    for (int64_t l = 0; l < m->L; l++) {
        const q35_layer *ly = &m->layers[l];
        for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, m->x + r * H, ly->in_norm, H, m->eps);
        if (ly->linear)
            gdn_layer(m, pool, ly, n, G);
        else
            attn_layer(m, pool, ly, n);
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->x[i] += m->xo[i];
        for (int r = 0; r < n; r++) weft_rmsnorm(m->xb + r * H, m->x + r * H, ly->post_norm, H, m->eps);
        if (m->moe)
            moe_layer(m, pool, ly, n);
        else
            swiglu(m, pool, ly->wg, ly->wu, ly->wd, m->xb, n, m->xo);
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->x[i] += m->xo[i];
    }
    for (int o = 0; o < n_out; o++)
        weft_rmsnorm(m->xb + o * H, m->x + (int64_t)m->inv[out_rows[o]] * H, m->final_norm, H, m->eps);
    weft_matmul(pool, m->head, m->xb, n_out, logits, m->V);
    for (int g = 0; g < G; g++) { /* the new state is in dst; the old one stays for rollback */
        const q35_group *gr = &m->groups[g];
        q35_hdr *h = gr->hdr;
        h->start = h->cur;
        h->cur = 1 - h->cur;
        h->win_start = gr->pos0;
        h->win_rec = gr->rec;
        h->len = gr->pos0 + gr->n;
    }
    return WEFT_OK;
}

void q35_ffn(q35 *m, weft_pool *pool, const q35_layer *ly, int n) {
    if (m->moe)
        moe_layer(m, pool, ly, n);
    else
        swiglu(m, pool, ly->wg, ly->wu, ly->wd, m->xb, n, m->xo);
}
