/* A literal C port of the reference draw() in ../shared/tools/sampler_reference.py: full sort of the whole
 * vocabulary, no shortcuts. The tests hold weft_sample (which draws from a sorted prefix, with radix
 * selection and early exits) to this definition bit for bit. Where the reference is undefined weft's
 * documented conventions are used: a NaN logit (after steps 1-2) is -inf, and when no candidate beats -inf
 * (or none survives) the first of the order is returned. Test code: allocates freely. */
#include "weft/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t test_naive_draw(const float *logits, int64_t vocab, const weft_sampling *p, const int32_t *prompt,
                        size_t n_prompt, const int32_t *gen, size_t n_gen, int64_t pos);

static const float *sort_z; /* qsort has no context argument; test-only */

static int cmp_order(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float zi = sort_z[i], zj = sort_z[j];
    if (zi > zj) return -1; /* z descending (value comparison: -0.0 == 0.0) */
    if (zi < zj) return 1;
    return (i > j) - (i < j); /* ties: id ascending */
}

int32_t test_naive_draw(const float *logits, int64_t vocab, const weft_sampling *p, const int32_t *prompt,
                        size_t n_prompt, const int32_t *gen, size_t n_gen, int64_t pos) {
    size_t V = (size_t)vocab;
    float *z = malloc(V * sizeof *z);
    int32_t *counts = calloc(V, sizeof *counts);
    unsigned char *inset = calloc(V, 1);
    int32_t *order = malloc(V * sizeof *order);
    double *l = malloc(V * sizeof *l), *pp = malloc(V * sizeof *pp);
    memcpy(z, logits, V * sizeof *z);
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].id;
        z[t] = (float)((double)z[t] + p->logit_bias[i].bias);
    }
    for (size_t i = 0; i < n_gen; i++) counts[gen[i]]++;
    for (size_t t = 0; t < V; t++)
        if (counts[t])
            z[t] = (float)((double)z[t] - (p->frequency_penalty * counts[t] + p->presence_penalty));
    if (p->repetition_penalty != 1.0) {
        for (size_t i = 0; i < n_prompt; i++) inset[prompt[i]] = 1;
        for (size_t i = 0; i < n_gen; i++) inset[gen[i]] = 1;
        for (size_t t = 0; t < V; t++)
            if (inset[t])
                z[t] = z[t] > 0 ? (float)((double)z[t] / p->repetition_penalty)
                                : (float)((double)z[t] * p->repetition_penalty);
    }
    for (size_t t = 0; t < V; t++)
        if (isnan(z[t])) z[t] = -INFINITY;
    int32_t result;
    if (p->temperature == 0) {
        size_t best = 0;
        for (size_t i = 1; i < V; i++)
            if (z[i] > z[best]) best = i;
        result = (int32_t)best;
        goto done;
    }
    for (size_t i = 0; i < V; i++) order[i] = (int32_t)i;
    sort_z = z;
    qsort(order, V, sizeof *order, cmp_order);
    size_t n = V;
    if (p->top_k > 0 && (size_t)p->top_k < n) n = (size_t)p->top_k;
    double T = p->temperature > 1e-6 ? p->temperature : 1e-6;
    for (size_t i = 0; i < n; i++) l[i] = (double)z[order[i]] / T;
    size_t keep = n;
    if (p->top_p < 1.0) {
        for (size_t i = 0; i < n; i++) pp[i] = exp(l[i] - l[0]);
        double total = 0.0;
        for (size_t i = 0; i < n; i++) total += pp[i];
        double acc = 0.0;
        keep = 0;
        for (size_t i = 0; i < n; i++) {
            if (keep > 0 && acc >= p->top_p * total) break;
            acc += pp[i];
            keep++;
        }
    }
    double thr = p->min_p > 0 ? l[0] + log(p->min_p) : -INFINITY;
    size_t best = 0;
    double bestv = -INFINITY;
    for (size_t i = 0; i < keep; i++) {
        if (p->min_p > 0 && !(l[i] >= thr)) continue;
        double v = l[i] + weft_gumbel(weft_uniform(weft_key(p->seed, pos, order[i])));
        if (v > bestv) {
            best = i;
            bestv = v;
        }
    }
    result = order[best];
done:
    free(z);
    free(counts);
    free(inset);
    free(order);
    free(l);
    free(pp);
    return result;
}
