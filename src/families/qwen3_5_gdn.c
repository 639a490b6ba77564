/* Gated DeltaNet (families-and-formats §3.4, §10): causal depthwise conv + SiLU, per-head L2 norm, and the
 * gated delta-rule token recurrence, with the gated RMSNorm of its output.
 *
 * Exactness (SPEC §4.3.2): prefill runs the very same token recurrence as decode, one row after the other in
 * position order; only heads and channels are spread over threads. A prompt therefore gives the same bits
 * however it is cut into calls, and keep()'s replay (which calls this code on the recorded inputs) gives the
 * bits of a direct feed. No chunked (WY / chunk-64) form: its summation order differs from the recurrence. */
#include "families/qwen3_5_impl.h"

#include <string.h>

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static inline float softplusf(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* Channels per conv task. */
#define CONV_CHUNK 64

/* Pass 1: c_t[ch] = silu(bias[ch] + Σ_{k<K} w[ch,k] · x_{t−K+1+k}[ch]) for the group's rows in position
 * order, where x before the group's first row comes from the stream's conv state (src) and the last K−1
 * inputs become the new conv state (dst). One task = one group × one chunk of channels. */
static void conv_task(void *ctx, int64_t task, float *scratch) {
    (void)scratch;
    const q35_gdn_job *j = ctx;
    const q35 *m = j->m;
    const q35_group *g = &j->groups[task / j->conv_chunks];
    const int64_t C = m->C, K = m->K, gi = j->ly->idx;
    int64_t ch0 = (task % j->conv_chunks) * CONV_CHUNK, ch1 = ch0 + CONV_CHUNK;
    if (ch1 > C) ch1 = C;
    const float *hist = g->src + (size_t)gi * m->layer_floats;
    float *hdst = g->dst + (size_t)gi * m->layer_floats;
    for (int64_t ch = ch0; ch < ch1; ch++) {
        const float *w = j->ly->conv_w + ch * K;
        float bias = j->ly->conv_b ? j->ly->conv_b[ch] : 0.0f;
        for (int64_t t = 0; t < g->n; t++) {
            float acc = bias;
            for (int64_t k = 0; k < K; k++) {
                int64_t s = t - K + 1 + k; /* input index: < 0 reads the conv state */
                float xv = s < 0 ? hist[(K - 1 + s) * C + ch] : j->mq[(g->r0 + s) * j->m_stride + ch];
                acc += w[k] * xv;
            }
            j->c[(g->r0 + t) * C + ch] = acc * sigmoidf(acc);
            if (j->snapshots && t < g->rec) { /* conv state after row t */
                float *snap = g->win + (size_t)t * m->block_floats + (size_t)gi * m->layer_floats;
                for (int64_t i = 0; i < K - 1; i++) {
                    int64_t s = t - K + 2 + i;
                    snap[i * C + ch] =
                        s < 0 ? hist[(K - 1 + s) * C + ch] : j->mq[(g->r0 + s) * j->m_stride + ch];
                }
            }
        }
        for (int64_t i = 0; i < K - 1; i++) {
            int64_t s = g->n - K + 1 + i;
            hdst[i * C + ch] = s < 0 ? hist[(K - 1 + s) * C + ch] : j->mq[(g->r0 + s) * j->m_stride + ch];
        }
    }
}

/* x ← x / sqrt(Σx² + 1e-6) (FLA's l2norm: the eps is added to the sum), then × scale. */
static void l2norm_scale(float *x, int64_t n, float scale) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * inv;
    if (scale != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] = x[i] * scale;
}

/* Pass 2, one row per task: L2-normalise q (then × dk^−1/2) and k per key head; β = σ(b) and the decay
 * exp(g), g = −exp(A_log)·softplus(α + dt_bias), per value head (all fp32, as HF). */
static void prep_task(void *ctx, int64_t r, float *scratch) {
    (void)scratch;
    const q35_gdn_job *j = ctx;
    const q35 *m = j->m;
    const q35_layer *ly = j->ly;
    float *c = j->c + r * m->C;
    const float scale = 1.0f / sqrtf((float)m->dk);
    for (int64_t h = 0; h < m->Hk; h++) {
        l2norm_scale(c + h * m->dk, m->dk, scale);
        l2norm_scale(c + m->key_dim + h * m->dk, m->dk, 1.0f);
    }
    const float *b = j->bq + r * j->ba_stride, *a = j->aq + r * j->ba_stride;
    for (int64_t h = 0; h < m->Hv; h++) {
        j->beta[r * m->Hv + h] = sigmoidf(b[h]);
        float gv = ly->neg_a[h] * softplusf(a[h] + ly->dt_bias[h]);
        j->decay[r * m->Hv + h] = expf(gv);
    }
}

/* One token of the gated delta rule for one value head (HF torch_recurrent_gated_delta_rule):
 *   S ← decay·S;  u = Sᵀk;  δ = β(v − u);  S ← S + k δᵀ;  o = Sᵀq        (S is [dk][dv])
 * Sin is the state before the token (may equal S: every element is read before it is written). u: dv floats.
 * Each u[j] and o[j] is summed over i = 0..dk−1 in order; the 8-wide blocks over j only let the compiler use
 * vector lanes across independent j (no reassociation, so the same bits as the plain loop). */
static void gdn_step(const float *Sin, float *S, const float *q, const float *k, const float *v, float beta,
                     float decay, float *o, float *u, int64_t dk, int64_t dv) {
    for (int64_t jv = 0; jv < dv; jv++) u[jv] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        const float *si = Sin + i * dv;
        float *so = S + i * dv, ki = k[i];
        int64_t jv = 0;
        for (; jv + 8 <= dv; jv += 8) {
            float s[8];
            for (int t = 0; t < 8; t++) s[t] = si[jv + t] * decay;
            for (int t = 0; t < 8; t++) {
                so[jv + t] = s[t];
                u[jv + t] += s[t] * ki;
            }
        }
        for (; jv < dv; jv++) {
            float s = si[jv] * decay;
            so[jv] = s;
            u[jv] += s * ki;
        }
    }
    for (int64_t jv = 0; jv < dv; jv++) u[jv] = (v[jv] - u[jv]) * beta;
    for (int64_t jv = 0; jv < dv; jv++) o[jv] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *so = S + i * dv, ki = k[i], qi = q[i];
        int64_t jv = 0;
        for (; jv + 8 <= dv; jv += 8) {
            float s[8];
            for (int t = 0; t < 8; t++) s[t] = so[jv + t] + ki * u[jv + t];
            for (int t = 0; t < 8; t++) {
                so[jv + t] = s[t];
                o[jv + t] += s[t] * qi;
            }
        }
        for (; jv < dv; jv++) {
            float s = so[jv] + ki * u[jv];
            so[jv] = s;
            o[jv] += s * qi;
        }
    }
}

/* Pass 3: one task = one group × one value head, rows in position order. Value head h reads key head
 * h / (Hv/Hk) (HF repeat_interleave: consecutive value heads share a key head), or h mod Hk when the weights
 * store value heads tiled (GGUF: llama.cpp's converter reorders them so ggml can broadcast, §6.5; every
 * value-head-indexed tensor of the layer is in that order, so only this pairing changes). With z, the output
 * is gated-normed: y = w ⊙ o/sqrt(mean(o²)+ε) ⊙ silu(z) (norm before gate; plain weight). */
static void rec_task(void *ctx, int64_t task, float *scratch) {
    const q35_gdn_job *j = ctx;
    const q35 *m = j->m;
    const q35_group *g = &j->groups[task / m->Hv];
    const int64_t h = task % m->Hv, kh = m->tiled ? h % m->Hk : h / (m->Hv / m->Hk), dk = m->dk, dv = m->dv,
                  C = m->C;
    const size_t off = (size_t)j->ly->idx * m->layer_floats + m->conv_floats + (size_t)(h * dk * dv);
    const float *Ssrc = g->src + off;
    float *S = g->dst + off;
    for (int64_t t = 0; t < g->n; t++) {
        int64_t r = g->r0 + t;
        const float *c = j->c + r * C;
        float *o = j->o + r * m->value_dim + h * dv;
        gdn_step(t == 0 ? Ssrc : S, S, c + kh * dk, c + m->key_dim + kh * dk, c + 2 * m->key_dim + h * dv,
                 j->beta[r * m->Hv + h], j->decay[r * m->Hv + h], o, scratch, dk, dv);
        if (j->snapshots && t < g->rec)
            memcpy(g->win + (size_t)t * m->block_floats + off, S, (size_t)(dk * dv) * sizeof(float));
        if (j->z) {
            const float *z = j->z + r * m->value_dim + h * dv;
            weft_rmsnorm(o, o, j->ly->gnorm, dv, m->eps);
            for (int64_t i = 0; i < dv; i++) o[i] = o[i] * weft_silu(z[i]);
        }
    }
}

static void run_serial(int64_t n, weft_task_fn fn, void *ctx, float *scratch) {
    for (int64_t t = 0; t < n; t++) fn(ctx, t, scratch);
}

void q35_gdn_run(weft_pool *pool, q35_gdn_job *job, int n_rows, float *scratch) {
    job->conv_chunks = (job->m->C + CONV_CHUNK - 1) / CONV_CHUNK;
    int64_t n_conv = job->conv_chunks * job->n_groups, n_rec = job->m->Hv * job->n_groups;
    if (pool) {
        weft_pool_run(pool, n_conv, conv_task, job);
        weft_pool_run(pool, n_rows, prep_task, job);
        weft_pool_run(pool, n_rec, rec_task, job);
    } else {
        run_serial(n_conv, conv_task, job, scratch);
        run_serial(n_rows, prep_task, job, scratch);
        run_serial(n_rec, rec_task, job, scratch);
    }
}
