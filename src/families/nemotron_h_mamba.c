/* nemotron_h Mamba-2 mixer (families-and-formats §4.3, §10), run as the token recurrence for every row.
 *
 * Per row t of a stream (in position order):
 *   [z | xBC | dt] = a_t·W_inᵀ
 *   xBC ← silu(Σ_k w[c,k]·xBC_{t−K+1+k}[c] + bias[c])        causal depthwise conv over the conv state
 *   x [Hm,P], B [G,N], C [G,N] = split(xBC);  head h uses group g = h / (Hm/G)
 *   Δ = clamp(softplus(dt_h + dt_bias_h), time_step_limit);  A_h = −exp(A_log_h)
 *   S_h ← exp(Δ·A_h)·S_h + (Δ·B_g) ⊗ x_h;   y_h = S_h·C_g + D_h·x_h
 *   v = y ⊙ silu(z); RMSNorm over each of G groups of d_inner/G (gate before norm), × norm.weight
 *   out = v·W_outᵀ
 *
 * SPEC §4.3.2: prefill runs exactly the decode step for each row, sequentially over time and in parallel over
 * conv channels (one task per stream × channel block) and over SSM heads (one task per stream × head). No
 * chunked SSD form: a prompt gives the same bits however it is cut, and keep()'s replay reuses the same two
 * step functions, so a rolled-back state equals a directly fed one bit for bit.
 *
 * conv_step and ssm_step are the shared helpers a later merge may hoist for qwen3_5's GDN conv as well. */
#include "families/nemotron_h_internal.h"

#include <string.h>

enum { CONV_BLOCK = 64 }; /* channels per conv task */

/* One causal depthwise conv step of one channel: in holds the last K−1 inputs (oldest first), w[K] the taps
 * (tap K−1 multiplies the current input x). Returns silu(conv + bias) and writes the shifted window to out
 * (out may equal in). */
static inline float conv_step(const float *w, const float *bias, const float *in, float *out, int64_t K,
                              float x) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K - 1; k++) acc += w[k] * in[k];
    acc += w[K - 1] * x;
    if (bias) acc += *bias;
    for (int64_t k = 0; k + 2 < K; k++) out[k] = in[k + 1];
    if (K > 1) out[K - 2] = x;
    return weft_silu(acc);
}

/* softplus as torch computes it (threshold 20: linear above). */
static inline float softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* One SSM step of head h: S_out [P, N] = exp(Δ·A)·S_in + (Δ·B) ⊗ x for a token whose conv output row is
 * xbc [conv_dim] and raw dt dt_raw (S_out may equal S_in); y [P] = S_out·C + D·x. dB: scratch [N]. */
static void ssm_step(const nh_model *m, const nh_mamba *ly, int64_t h, const float *xbc, float dt_raw,
                     const float *S_in, float *S_out, float *y, float *dB) {
    const int64_t P = m->P, N = m->N, g = h / (m->Hm / m->G);
    float dt = softplus(dt_raw + ly->dt_bias[h]);
    dt = fminf(fmaxf(dt, m->dt_lo), m->dt_hi);
    const float dA = expf(dt * ly->A[h]), D = ly->D[h];
    const float *x = xbc + h * P, *B = xbc + m->d_inner + g * N, *C = xbc + m->d_inner + m->G * N + g * N;
    for (int64_t i = 0; i < N; i++) dB[i] = dt * B[i];
    for (int64_t p = 0; p < P; p++) {
        const float *si = S_in + p * N;
        float *so = S_out + p * N;
        const float xp = x[p];
        for (int64_t i = 0; i < N; i++) so[i] = si[i] * dA + dB[i] * xp;
        y[p] = weft_dot(so, C, N) + D * xp;
    }
}

typedef struct mamba_job {
    const nh_model *m;
    const nh_mamba *ly;
    const nh_seg *segs;
    int64_t n_cblk;
} mamba_job;

/* Buffers row r of a segment reads and writes (see nh_seg). */
static int src_buf(const nh_seg *sg, int r) {
    return r <= sg->snap ? sg->from : 1 - sg->from;
}
static int dst_buf(const nh_seg *sg, int r) {
    return r < sg->snap ? sg->from : 1 - sg->from;
}

/* Conv over the rows of one stream for one block of channels, in position order. Input: raw xBC in
 * proj_buf[r, d_inner ..]; output: m->xbc[r]. */
static void conv_task(void *ctx, int64_t task, float *scratch) {
    (void)scratch;
    const mamba_job *j = ctx;
    const nh_model *m = j->m;
    const nh_mamba *ly = j->ly;
    const nh_seg *sg = &j->segs[task / j->n_cblk];
    const int64_t K = m->K, c0 = (task % j->n_cblk) * CONV_BLOCK;
    const int64_t c1 = c0 + CONV_BLOCK < m->conv_dim ? c0 + CONV_BLOCK : m->conv_dim;
    for (int r = sg->a; r < sg->b; r++) {
        const float *cin = weft_nh_conv(m, sg->state, ly->idx, src_buf(sg, r));
        float *cout = weft_nh_conv(m, sg->state, ly->idx, dst_buf(sg, r));
        const float *in = m->proj_buf + (int64_t)r * m->proj + m->d_inner;
        float *out = m->xbc + (int64_t)r * m->conv_dim;
        for (int64_t c = c0; c < c1; c++)
            out[c] = conv_step(ly->conv_w + c * K, ly->conv_b ? ly->conv_b + c : NULL, cin + c * (K - 1),
                               cout + c * (K - 1), K, in[c]);
    }
}

/* The SSM recurrence of one head over the rows of one stream, in position order; y into m->y[r]. */
static void ssm_task(void *ctx, int64_t task, float *scratch) {
    const mamba_job *j = ctx;
    const nh_model *m = j->m;
    const nh_mamba *ly = j->ly;
    const nh_seg *sg = &j->segs[task / m->Hm];
    const int64_t h = task % m->Hm, PN = m->P * m->N;
    for (int r = sg->a; r < sg->b; r++) {
        const float dt_raw = m->proj_buf[(int64_t)r * m->proj + m->d_inner + m->conv_dim + h];
        ssm_step(m, ly, h, m->xbc + (int64_t)r * m->conv_dim, dt_raw,
                 weft_nh_ssm(m, sg->state, ly->idx, src_buf(sg, r)) + h * PN,
                 weft_nh_ssm(m, sg->state, ly->idx, dst_buf(sg, r)) + h * PN,
                 m->y + (int64_t)r * m->d_inner + h * m->P, scratch);
    }
}

static void run(weft_pool *pool, int64_t n, weft_task_fn fn, void *ctx, float *scratch) {
    if (pool)
        weft_pool_run(pool, n, fn, ctx);
    else
        for (int64_t t = 0; t < n; t++) fn(ctx, t, scratch);
}

/* Conv then SSM over every segment: parallel over streams × channels / heads, sequential over time. */
static void recurrence(nh_model *m, weft_pool *pool, const nh_mamba *ly, const nh_seg *segs, int n_segs) {
    mamba_job j = {m, ly, segs, (m->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK};
    run(pool, n_segs * j.n_cblk, conv_task, &j, m->replay);
    run(pool, n_segs * m->Hm, ssm_task, &j, m->replay);
}

void weft_nh_mamba_forward(nh_model *m, weft_pool *pool, const nh_mamba *ly, const nh_seg *segs, int n_segs,
                           int n) {
    const int64_t proj = m->proj, rec = m->conv_dim + m->Hm;
    weft_matmul(pool, ly->in_proj, m->xb, n, m->proj_buf, proj);
    weft_nh_add_bias(m->proj_buf, ly->in_bias, n, proj);
    /* journal: raw xBC and dt (contiguous in the projection) of the rows from snap on */
    for (int s = 0; s < n_segs; s++)
        for (int r = segs[s].snap; r < segs[s].b; r++)
            memcpy(weft_nh_record(m, segs[s].state, ly->idx, r - segs[s].snap),
                   m->proj_buf + (int64_t)r * proj + m->d_inner, (size_t)rec * sizeof(float));
    recurrence(m, pool, ly, segs, n_segs);
    /* gate before norm: v = y ⊙ silu(z), then RMSNorm over each group of d_inner/G */
    const int64_t gs = m->d_inner / m->G;
    for (int r = 0; r < n; r++) {
        float *v = m->y + (int64_t)r * m->d_inner;
        const float *z = m->proj_buf + (int64_t)r * proj;
        for (int64_t i = 0; i < m->d_inner; i++) v[i] = v[i] * weft_silu(z[i]);
        for (int64_t g = 0; g < m->G; g++)
            weft_rmsnorm(v + g * gs, v + g * gs, ly->norm + g * gs, gs, m->eps);
    }
    weft_matmul(pool, ly->out_proj, m->y, n, m->xo, m->H);
    weft_nh_add_bias(m->xo, ly->out_bias, n, m->H);
}

void weft_nh_mamba_replay(nh_model *m, weft_pool *pool, const nh_mamba *ly, void *state, int n_keep) {
    const int64_t rec = m->conv_dim + m->Hm;
    const nh_hdr *h = state;
    for (int r = 0; r < n_keep; r++)
        memcpy(m->proj_buf + (int64_t)r * m->proj + m->d_inner, weft_nh_record(m, state, ly->idx, r),
               (size_t)rec * sizeof(float));
    nh_seg sg = {0, n_keep, 0, 1 - h->cur, state};
    recurrence(m, pool, ly, &sg, 1);
}
