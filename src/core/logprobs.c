/* Logprobs of a drawn row (SPEC §5.1): log-softmax of the raw fp32 logits, reported in fp32, with the top
 * entries ranked by logprob (ties by id). The softmax sum runs in fp64 in id order so that it is accurate and
 * has one fixed reduction order. */
#include "weft/sampler.h"

#include <math.h>

static inline double raw(float z) {
    return isnan(z) ? -INFINITY : (double)z;
}

void weft_logprobs_fill(const float *logits, int64_t vocab, int32_t token, int n_top, weft_logprobs *out) {
    out->token = token;
    out->logprob = -INFINITY;
    out->n_top = 0;
    if (vocab < 1) return;
    double m = -INFINITY;
    for (int64_t i = 0; i < vocab; i++) {
        double v = raw(logits[i]);
        if (v > m) m = v;
    }
    double sum = exp(raw(logits[0]) - m); /* = 0.0 + that: the same sequential sum, from id 0 up */
    for (int64_t i = 1; i < vocab; i++) sum += exp(raw(logits[i]) - m);
    double lse = m + log(sum);

    if (n_top < 0) n_top = 0;
    if (n_top > WEFT_MAX_TOP_LOGPROBS) n_top = WEFT_MAX_TOP_LOGPROBS;
    if ((int64_t)n_top > vocab) n_top = (int)vocab;
    out->logprob = (token >= 0 && (int64_t)token < vocab) ? (float)(raw(logits[token]) - lse) : -INFINITY;
    out->n_top = n_top;
    if (n_top == 0) return;

    /* Keep the best n_top in a sorted list: scanning ids upward, a newcomer goes after every entry it does
     * not beat strictly, so equal logprobs stay in id order. */
    int filled = 0;
    for (int64_t i = 0; i < vocab; i++) {
        float v = (float)(raw(logits[i]) - lse);
        if (filled == n_top && !(v > out->top_logprobs[n_top - 1])) continue;
        int j = filled < n_top ? filled++ : n_top - 1;
        while (j > 0 && v > out->top_logprobs[j - 1]) {
            out->top_logprobs[j] = out->top_logprobs[j - 1];
            out->top_ids[j] = out->top_ids[j - 1];
            j--;
        }
        out->top_logprobs[j] = v;
        out->top_ids[j] = (int32_t)i;
    }
}
