/* Causal attention, one (row, query head) per task, keys reduced in position order. */
#include "weft/cpu.h"

static void attn_task(void *ctx, int64_t task, float *scores) {
    const weft_attn_args *a = ctx;
    int r = (int)(task / a->n_heads), h = (int)(task % a->n_heads);
    int j = h / (a->n_heads / a->n_kv_heads), d = a->head_dim, n = a->pos[r] + 1;
    const float *q = a->q + r * a->q_stride + (int64_t)h * d;
    const float *K = a->k[r] + (int64_t)j * d, *V = a->v[r] + (int64_t)j * d;
    float mx = -INFINITY;
    for (int t = 0; t < n; t++) {
        float s = weft_dot(q, K + t * a->kv_stride, d) * a->scale;
        scores[t] = s;
        if (s > mx) mx = s;
    }
    float sum = 0.0f;
    for (int t = 0; t < n; t++) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    float inv = 1.0f / sum;
    float *o = a->out + r * a->out_stride + (int64_t)h * d;
    for (int i = 0; i < d; i++) o[i] = 0.0f;
    for (int t = 0; t < n; t++) {
        float w = scores[t] * inv;
        const float *vt = V + t * a->kv_stride;
        for (int i = 0; i < d; i++) o[i] += w * vt[i];
    }
}

void weft_attention(weft_pool *p, const weft_attn_args *a) {
    weft_pool_run(p, (int64_t)a->n_rows * a->n_heads, attn_task, (void *)a);
}
