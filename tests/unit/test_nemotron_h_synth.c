/* nemotron_h MoE paths no fixture covers, against an independent fp64 reference written from
 * families-and-formats §4.6: latent projections (fc1/fc2_latent_proj), router groups (n_group 2, topk_group
 * 1) with the 0.0 fill of masked experts (a masked expert outranks a kept one whose corrected score is
 * negative, and ties go to the lower id), HF's stacked `mixer.experts.up_proj` [E, out, in] layout, and the
 * shared expert. One 'E' block, random fp32 weights. */
#include "check.h"
#include "weft/families.h"

#include <stdlib.h>

enum { V = 16, H = 8, E = 4, IE = 6, HL = 4, IS = 5, TOPK = 2 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

typedef struct weights {
    float emb[V * H], head[V * H], norm_f[H], norm[H], gate[E * H], corr[E];
    float up[E * IE * HL], down[E * HL * IE], lat_in[HL * H], lat_out[H * HL], sh_up[IS * H], sh_down[H * IS];
} weights;

static void add(weft_tensor_set *ts, const char *name, const float *data, int ndim, int64_t a, int64_t b,
                int64_t c) {
    weft_tensor t = {0};
    t.name = name;
    t.dtype = WEFT_DT_F32;
    t.ndim = ndim;
    t.shape[0] = a;
    t.shape[1] = b;
    t.shape[2] = c;
    t.data = (const uint8_t *)data;
    t.nbytes = (size_t)(a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1)) * sizeof(float);
    weft_err err = {0};
    CHECK_MSG(weft_tensor_set_add(ts, &t, &err) == WEFT_OK, "%s", err.msg);
}

/* y[o] = Σ_i W[o, i]·x[i] in fp64 */
static void mv(const float *W, const double *x, int out, int in, double *y) {
    for (int o = 0; o < out; o++) {
        y[o] = 0;
        for (int i = 0; i < in; i++) y[o] += (double)W[o * in + i] * x[i];
    }
}

static void rms(const double *x, const float *w, int n, double *y) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

static double relu2(double v) {
    return v > 0 ? v * v : 0;
}

/* The reference logits of one token (the model is one MoE block, so rows are independent). */
static void reference(const weights *w, int tok, double *logits, int *chosen_out) {
    double x[H], xn[H], r[E], s[E], c[E], lat[HL], acc[HL] = {0}, out[H], sh[IS], shd[H], hn[H];
    for (int i = 0; i < H; i++) x[i] = w->emb[tok * H + i];
    rms(x, w->norm, H, xn);
    mv(w->gate, xn, E, H, r);
    for (int e = 0; e < E; e++) {
        s[e] = 1.0 / (1.0 + exp(-r[e]));
        c[e] = s[e] + w->corr[e];
    }
    /* two groups of two: group score = sum of both; keep the better one, fill the other's c with 0.0 */
    int keep = (c[2] + c[3]) > (c[0] + c[1]) ? 1 : 0;
    for (int e = 0; e < E; e++)
        if (e / 2 != keep) c[e] = 0.0;
    int idx[TOPK];
    bool used[E] = {false};
    double sum = 0;
    for (int k = 0; k < TOPK; k++) {
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (b < 0 || c[e] > c[b])) b = e;
        used[b] = true;
        idx[k] = b;
        sum += s[b];
    }
    mv(w->lat_in, xn, HL, H, lat);
    for (int k = 0; k < TOPK; k++) {
        int e = idx[k];
        double u[IE], d[HL], wt = s[e] / (sum + 1e-20) * 2.5;
        mv(w->up + e * IE * HL, lat, IE, HL, u);
        for (int i = 0; i < IE; i++) u[i] = relu2(u[i]);
        mv(w->down + e * HL * IE, u, HL, IE, d);
        for (int i = 0; i < HL; i++) acc[i] += wt * d[i];
        chosen_out[k] = e;
    }
    mv(w->lat_out, acc, H, HL, out);
    mv(w->sh_up, xn, IS, H, sh);
    for (int i = 0; i < IS; i++) sh[i] = relu2(sh[i]);
    mv(w->sh_down, sh, H, IS, shd);
    for (int i = 0; i < H; i++) x[i] += out[i] + shd[i];
    rms(x, w->norm_f, H, hn);
    mv(w->head, hn, V, H, logits);
}

int main(void) {
    weights *w = malloc(sizeof *w);
    float *all = (float *)w;
    for (size_t i = 0; i < sizeof *w / sizeof(float); i++) all[i] = rnd();
    for (int i = 0; i < H; i++) w->norm[i] = w->norm_f[i] = 1.0f + 0.1f * rnd();
    /* group 0 far below: masked to 0.0; in group 1, expert 2 positive, expert 3 negative → top-2 = {2, 0}:
     * a kept expert and a masked one (0.0 beats a negative score; 0 and 1 tie, the lower id wins) */
    const float corr[E] = {-3.0f, -3.0f, 0.0f, -2.0f};
    memcpy(w->corr, corr, sizeof corr);

    weft_tensor_set *ts = weft_tensor_set_new();
    add(ts, "backbone.embeddings.weight", w->emb, 2, V, H, 0);
    add(ts, "lm_head.weight", w->head, 2, V, H, 0);
    add(ts, "backbone.norm_f.weight", w->norm_f, 1, H, 0, 0);
    add(ts, "backbone.layers.0.norm.weight", w->norm, 1, H, 0, 0);
    add(ts, "backbone.layers.0.mixer.gate.weight", w->gate, 2, E, H, 0);
    add(ts, "backbone.layers.0.mixer.gate.e_score_correction_bias", w->corr, 1, E, 0, 0);
    add(ts, "backbone.layers.0.mixer.experts.up_proj", w->up, 3, E, IE, HL);
    add(ts, "backbone.layers.0.mixer.experts.down_proj", w->down, 3, E, HL, IE);
    add(ts, "backbone.layers.0.mixer.fc1_latent_proj.weight", w->lat_in, 2, HL, H, 0);
    add(ts, "backbone.layers.0.mixer.fc2_latent_proj.weight", w->lat_out, 2, H, HL, 0);
    add(ts, "backbone.layers.0.mixer.shared_experts.up_proj.weight", w->sh_up, 2, IS, H, 0);
    add(ts, "backbone.layers.0.mixer.shared_experts.down_proj.weight", w->sh_down, 2, H, IS, 0);

    weft_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.family = WEFT_FAMILY_NEMOTRON_H;
    cfg.vocab_size = V;
    cfg.hidden_size = H;
    cfg.n_layers = 1;
    cfg.layer_kind[0] = WEFT_LAYER_MOE;
    cfg.rms_norm_eps = 1e-5;
    cfg.n_heads = cfg.n_kv_heads = 1;
    cfg.head_dim = H;
    cfg.num_experts = E;
    cfg.num_experts_per_tok = TOPK;
    cfg.moe_intermediate_size = IE;
    cfg.moe_latent_size = HL;
    cfg.n_shared_experts = 1;
    cfg.shared_expert_intermediate_size = IS;
    cfg.n_group = 2;
    cfg.topk_group = 1;
    cfg.norm_topk_prob = true;
    cfg.routed_scaling_factor = 2.5;
    cfg.time_step_limit_max = INFINITY;

    weft_family_opts fo = {V, 32, false};
    weft_family_model fm;
    weft_err err = {0};
    CHECK_MSG(weft_family_create(&cfg, ts, &fo, &fm, &err) == WEFT_OK, "%s", err.msg);
    if (err.code) return check_report("test_nemotron_h_synth");
    weft_pool *pool = weft_pool_new(2, fm.scratch_floats);
    void *st = malloc(fm.ops->state_bytes(fm.self, 32));
    fm.ops->state_init(fm.self, st, 32);
    void *states[1] = {st};
    weft_row rows[V];
    int outr[V];
    for (int t = 0; t < V; t++) rows[t] = (weft_row){0, t, t}, outr[t] = t;
    float *logits = malloc((size_t)V * V * sizeof(float));
    CHECK_MSG(fm.ops->forward(fm.self, pool, states, rows, V, outr, V, logits, &err) == WEFT_OK, "%s",
              err.msg);
    double worst = 0;
    int masked_wins = 0;
    for (int t = 0; t < V; t++) {
        double ref[V];
        int chosen[TOPK];
        reference(w, t, ref, chosen);
        masked_wins += chosen[0] < 2 || chosen[1] < 2;
        for (int v = 0; v < V; v++)
            worst = fmax(worst, fabs(ref[v] - logits[t * V + v]) / fmax(1.0, fabs(ref[v])));
    }
    CHECK_MSG(worst < 1e-5, "MoE logits differ from the fp64 reference by %.3g", worst);
    CHECK_MSG(masked_wins > 0, "no row selected a masked expert: the 0.0-fill case is not exercised");
    fprintf(stderr,
            "  synthetic MoE (latent, groups, stacked experts): max rel |Δ| = %.2e, %d/%d rows pick a "
            "masked expert\n",
            worst, masked_wins, V);

    free(logits);
    free(st);
    weft_pool_free(pool);
    fm.ops->destroy(fm.self);
    weft_tensor_set_free(ts);
    free(w);
    return check_report("test_nemotron_h_synth");
}
