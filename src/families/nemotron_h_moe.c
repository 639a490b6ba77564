/* nemotron_h FFN blocks (families-and-formats §4.5, §4.6, §10).
 *
 * MLP '-':  out = down(relu²(up x))                     (no gate projection)
 * MoE 'E':  s = σ(x·W_rᵀ) (fp32);  c = s + e_score_correction_bias   (the bias only selects)
 *           groups: c viewed as [n_group, E/n_group]; group score = sum of its top-2 c; the top topk_group
 *           groups stay, c of every other expert is set to 0.0 (not excluded: a masked expert can still win)
 *           top-k of c (ties: lower id);  w_e = s_e / (Σ s + 1e-20) if norm_topk_prob;  w_e ·= routed_scaling
 *           out = fc2_latent(Σ_e w_e·down_e(relu²(up_e(fc1_latent x)))) + down_s(relu²(up_s x))
 * Experts are accumulated in ascending expert id (as HF's expert loop does), each row on its own: the rows
 * routed to one expert are gathered into one matmul, whose per-row results do not depend on the others. */
#include "families/nemotron_h_internal.h"

#include <string.h>

void weft_nh_add_bias(float *y, const float *b, int64_t n_rows, int64_t n) {
    if (!b) return;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * n + i] += b[i];
}

static void relu2(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float t = v[i] > 0.0f ? v[i] : 0.0f;
        v[i] = t * t;
    }
}

void weft_nh_mlp_forward(nh_model *m, weft_pool *pool, const nh_mlp *ly, int n) {
    weft_matmul(pool, ly->up, m->xb, n, m->ffn, m->I);
    weft_nh_add_bias(m->ffn, ly->bu, n, m->I);
    relu2(m->ffn, (int64_t)n * m->I);
    weft_matmul(pool, ly->down, m->ffn, n, m->xo, m->H);
    weft_nh_add_bias(m->xo, ly->bd, n, m->H);
}

/* Sum of the (up to) two largest of v[0..n). */
static float top2_sum(const float *v, int64_t n) {
    int64_t b0 = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b0]) b0 = i;
    if (n < 2) return v[b0];
    int64_t b1 = b0 == 0 ? 1 : 0;
    for (int64_t i = 0; i < n; i++)
        if (i != b0 && v[i] > v[b1]) b1 = i;
    return v[b0] + v[b1];
}

void weft_nh_route(const nh_model *m, const float *corr, float *logits, float *w, unsigned char *chosen) {
    const int64_t E = m->E;
    float *c = logits; /* becomes the selection scores */
    for (int64_t e = 0; e < E; e++) {
        w[e] = 1.0f / (1.0f + expf(-logits[e])); /* s, uncorrected */
        c[e] = w[e] + corr[e];
        chosen[e] = 0;
    }
    if (m->n_group > 1) {
        const int64_t gsz = E / m->n_group;
        /* mark the kept groups' experts with 2, pick groups best-first (ties: lower group) */
        for (int64_t t = 0; t < m->topk_group; t++) {
            int64_t best = -1;
            float best_score = 0.0f;
            for (int64_t g = 0; g < m->n_group; g++) {
                if (chosen[g * gsz] == 2) continue;
                float sc = top2_sum(c + g * gsz, gsz);
                if (best < 0 || sc > best_score) best = g, best_score = sc;
            }
            for (int64_t e = best * gsz; e < (best + 1) * gsz; e++) chosen[e] = 2;
        }
        for (int64_t e = 0; e < E; e++) {
            if (chosen[e] != 2) c[e] = 0.0f; /* transformers 5 and MLX fill with 0.0 (§4.6) */
            chosen[e] = 0;
        }
    }
    float sum = 0.0f;
    for (int64_t t = 0; t < m->topk; t++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++)
            if (!chosen[e] && (best < 0 || c[e] > c[best])) best = e;
        chosen[best] = 1;
        sum += w[best];
    }
    const float denom = sum + 1e-20f;
    for (int64_t e = 0; e < E; e++) {
        if (!chosen[e])
            w[e] = 0.0f;
        else
            w[e] = (m->norm_topk ? w[e] / denom : w[e]) * m->routed_scale;
    }
}

void weft_nh_moe_forward(nh_model *m, weft_pool *pool, const nh_moe *ly, int n) {
    const int64_t E = m->E, Hl = m->Hl, H = m->H, Ie = m->Ie;
    weft_matmul(pool, ly->router, m->xb, n, m->score, E);
    for (int r = 0; r < n; r++)
        weft_nh_route(m, ly->corr, m->score + (int64_t)r * E, m->sel_w + (int64_t)r * E,
                      m->sel + (int64_t)r * E);
    const float *xin = m->xb;
    if (ly->lat_in) {
        weft_matmul(pool, ly->lat_in, m->xb, n, m->lat, Hl);
        xin = m->lat;
    }
    memset(m->acc, 0, (size_t)n * (size_t)Hl * sizeof(float));
    for (int64_t e = 0; e < E; e++) {
        int cnt = 0;
        for (int r = 0; r < n; r++)
            if (m->sel[(int64_t)r * E + e]) m->grows[cnt++] = r;
        if (!cnt) continue;
        for (int i = 0; i < cnt; i++)
            memcpy(m->gx + (int64_t)i * Hl, xin + (int64_t)m->grows[i] * Hl, (size_t)Hl * sizeof(float));
        weft_matmul(pool, &ly->up[e], m->gx, cnt, m->ffn, Ie);
        relu2(m->ffn, (int64_t)cnt * Ie);
        weft_matmul(pool, &ly->down[e], m->ffn, cnt, m->gy, Hl);
        for (int i = 0; i < cnt; i++) {
            const int r = m->grows[i];
            const float wr = m->sel_w[(int64_t)r * E + e];
            float *a = m->acc + (int64_t)r * Hl;
            const float *g = m->gy + (int64_t)i * Hl;
            for (int64_t k = 0; k < Hl; k++) a[k] += wr * g[k];
        }
    }
    if (ly->lat_out)
        weft_matmul(pool, ly->lat_out, m->acc, n, m->xo, H);
    else
        memcpy(m->xo, m->acc, (size_t)n * (size_t)H * sizeof(float));
    if (ly->sh_up) {
        weft_matmul(pool, ly->sh_up, m->xb, n, m->ffn, ly->Is);
        relu2(m->ffn, (int64_t)n * ly->Is);
        weft_matmul(pool, ly->sh_down, m->ffn, n, m->gy, H);
        for (int64_t i = 0; i < (int64_t)n * H; i++) m->xo[i] += m->gy[i];
    }
}
