/* RoPE frequency tables and rotation (families-and-formats §1.4; HF modeling_rope_utils.py). */
#include "weft/cpu.h"

#include <stdlib.h>

weft_status weft_rope_init(weft_rope_table *t, const weft_rope *cfg, int64_t head_dim, weft_err *err) {
    t->inv_freq = NULL;
    t->attn_factor = 1.0f;
    t->adjacent = cfg->adjacent_pairs;
    double prf = cfg->partial_rotary_factor > 0 ? cfg->partial_rotary_factor : 1.0;
    t->rot = (int)((double)head_dim * prf);
    t->rot &= ~1;
    if (cfg->type == WEFT_ROPE_NONE) {
        t->rot = 0;
        return WEFT_OK;
    }
    if (t->rot <= 0 || t->rot > head_dim)
        return weft_err_set(err, WEFT_EFORMAT, "rope: rotary dimension %d invalid for head_dim %lld", t->rot,
                            (long long)head_dim);
    int half = t->rot / 2;
    t->inv_freq = malloc((size_t)half * sizeof(float));
    if (!t->inv_freq) return weft_err_set(err, WEFT_ENOMEM, "rope: out of memory");
    double theta = cfg->theta > 0 ? cfg->theta : 10000.0, factor = cfg->factor > 0 ? cfg->factor : 1.0;
    for (int i = 0; i < half; i++) {
        /* HF: 1 / base^(arange(0, r, 2) / r) in fp32 */
        float f = (float)(1.0 / pow(theta, (double)(2 * i) / (double)t->rot));
        if (cfg->freq_divisors) f = f / cfg->freq_divisors[i];
        switch (cfg->type) {
        case WEFT_ROPE_DEFAULT:
            break;
        case WEFT_ROPE_LINEAR:
            f = (float)(f / factor);
            break;
        case WEFT_ROPE_LLAMA3: {
            double n0 = (double)cfg->original_max_position_embeddings;
            double lo = cfg->low_freq_factor, hi = cfg->high_freq_factor;
            double lam = 2.0 * M_PI / f;
            if (n0 <= 0 || hi <= lo) {
                free(t->inv_freq);
                t->inv_freq = NULL;
                return weft_err_set(err, WEFT_EFORMAT,
                                    "rope llama3: needs original_max_position_embeddings and "
                                    "high_freq_factor > low_freq_factor");
            }
            if (lam > n0 / lo)
                f = (float)(f / factor);
            else if (lam >= n0 / hi) {
                double s = (n0 / lam - lo) / (hi - lo);
                f = (float)((1.0 - s) * f / factor + s * f);
            }
            break;
        }
        case WEFT_ROPE_YARN:
            break; /* below: needs every frequency */
        default:
            free(t->inv_freq);
            t->inv_freq = NULL;
            return weft_err_set(err, WEFT_ENOTSUP, "rope type %d not supported", (int)cfg->type);
        }
        t->inv_freq[i] = f;
    }
    if (cfg->type == WEFT_ROPE_YARN) {
        double n0 = cfg->original_max_position_embeddings > 0 ? (double)cfg->original_max_position_embeddings
                                                              : 4096.0;
        double bf = cfg->beta_fast > 0 ? cfg->beta_fast : 32.0,
               bs = cfg->beta_slow > 0 ? cfg->beta_slow : 1.0;
        double r = t->rot;
#define YARN_DIM(nrot) (r * log(n0 / ((nrot)*2.0 * M_PI)) / (2.0 * log(theta)))
        double lo = floor(YARN_DIM(bf)), hi = ceil(YARN_DIM(bs));
#undef YARN_DIM
        if (lo < 0) lo = 0;
        if (hi > r - 1) hi = r - 1;
        if (hi == lo) hi += 0.001; /* HF: avoid a zero-width ramp */
        for (int i = 0; i < half; i++) {
            double gamma = ((double)i - lo) / (hi - lo);
            gamma = gamma < 0 ? 0 : gamma > 1 ? 1 : gamma;
            double extra = t->inv_freq[i], inter = extra / factor;
            /* HF: inv_freq = inter·(1 − extrapolation_factor) + extra·extrapolation_factor, with
             * extrapolation_factor = 1 − ramp */
            t->inv_freq[i] = (float)(inter * gamma + extra * (1.0 - gamma));
        }
        t->attn_factor =
            cfg->attention_factor > 0 ? (float)cfg->attention_factor : (float)(0.1 * log(factor) + 1.0);
    }
    return WEFT_OK;
}

void weft_rope_free(weft_rope_table *t) {
    free(t->inv_freq);
    t->inv_freq = NULL;
}

void weft_rope_apply(const weft_rope_table *t, float *x, int n_heads, int head_dim, int pos) {
    int half = t->rot / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * t->inv_freq[i];
        float c = cosf(ang) * t->attn_factor, s = sinf(ang) * t->attn_factor;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int a = t->adjacent ? 2 * i : i, b = t->adjacent ? 2 * i + 1 : i + half;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x1 * c + x0 * s;
        }
    }
}
