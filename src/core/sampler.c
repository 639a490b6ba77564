/* weft_sampler: one row's draw exactly as SPEC §5.1–§5.2, without allocating.
 *
 * The reference (../shared/tools/sampler_reference.py, draw) sorts the whole vocabulary. We reach the same
 * token from a prefix of that sorted order, using two facts (both proved below where used):
 *  (a) a candidate with l_i - l_0 < -41 can neither change the top_p sum nor win the draw;
 *  (b) with top_k > 0 only the first k of the order matter, found by radix selection before sorting.
 * Every predicate that picks the prefix is monotone in z, so the kept set is always a prefix of the exact
 * reference order, and every value computed on it (l, p, sums, noise) uses the reference's own operations in
 * the reference's order. */
#include "weft/sampler.h"

#include "core/sampler_order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct weft_sampler {
    int64_t vocab;
    float *z;        /* [vocab] the row after bias and penalties (steps 1-2) */
    int32_t *count;  /* [vocab] generated-token counts; all zero between calls */
    uint8_t *seen;   /* [vocab] repetition marks; all zero between calls */
    uint64_t *cand;  /* [vocab] candidates (weft_order_cand), then sorted */
    uint64_t *tmp;   /* [vocab] radix scratch */
    double *l;       /* [vocab] l_i = z / T of the sorted candidates */
    double *p;       /* [vocab] top_p weights exp(l_i - l_0) */
    weft_err err;
};

/* Candidates further than this below l_0 are dropped before sorting. Why 41 is safe:
 *  - top_p: their p = exp(l_i - l_0) < e^-41 ≈ 1.6e-18 < 2^-53 <= half an ulp of the running sum (which starts
 *    at p_0 = exp(0) = 1 and only grows), and they come after every kept candidate in sorted order, so
 *    the reference adds them without changing a bit of the total. The keep loop stops inside the prefix
 *    because acc reaches total there and top_p * total <= total.
 *  - draw: Gumbel noise from weft_uniform lies in [-3.61, 36.74], so l_i + g_i < l_0 - 41 + 36.74 <
 *    l_0 - 3.61 <= l_0 + g_0, and candidate 0 always survives top_p / min_p: they cannot win (fp rounding
 *    is monotone, so at worst they tie, and ties go to the earlier candidate). */
#define L_CUT (-41.0)
/* An upper bound of every Gumbel value weft_gumbel(weft_uniform(k)) (the max is 36.7368...). */
#define G_MAX 37.0

weft_sampler *weft_sampler_new(int64_t vocab) {
    if (vocab < 1 || vocab > INT32_MAX) return NULL;
    weft_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t n = (size_t)vocab;
    s->vocab = vocab;
    s->z = malloc(n * sizeof *s->z);
    s->count = calloc(n, sizeof *s->count);
    s->seen = calloc(n, sizeof *s->seen);
    s->cand = malloc(n * sizeof *s->cand);
    s->tmp = malloc(n * sizeof *s->tmp);
    s->l = malloc(n * sizeof *s->l);
    s->p = malloc(n * sizeof *s->p);
    if (!s->z || !s->count || !s->seen || !s->cand || !s->tmp || !s->l || !s->p) {
        weft_sampler_free(s);
        return NULL;
    }
    return s;
}

void weft_sampler_free(weft_sampler *s) {
    if (!s) return;
    free(s->z);
    free(s->count);
    free(s->seen);
    free(s->cand);
    free(s->tmp);
    free(s->l);
    free(s->p);
    free(s);
}

int64_t weft_sampler_vocab(const weft_sampler *s) { return s ? s->vocab : 0; }

const weft_err *weft_sampler_error(const weft_sampler *s) { return &s->err; }

/* Steps 1-2 on s->z (already a copy of the raw row). Each adjustment is computed in fp64 and stored as fp32,
 * in the reference's order: bias, then frequency/presence, then repetition. */
static weft_status adjust(weft_sampler *s, const weft_sampling *p, const int32_t *seq, int64_t pos,
                          int64_t n_prompt) {
    float *z = s->z;
    const int64_t V = s->vocab;
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        if (id < 0 || id >= V)
            return weft_err_set(&s->err, WEFT_ERANGE, "logit_bias: token id %d outside the vocabulary [0, %lld)",
                                (int)id, (long long)V);
        z[id] = (float)((double)z[id] + p->logit_bias[i].bias);
    }
    /* With both penalties 0 the reference subtracts 0.0, which leaves every fp32 value as it is (z - 0.0 == z
     * bitwise, -0.0 included), so skipping it is exact. */
    int counting = p->frequency_penalty != 0.0 || p->presence_penalty != 0.0;
    int repeating = p->repetition_penalty != 1.0;
    if (!counting && !repeating) return WEFT_OK;
    if (pos > 0 && !seq) return weft_err_set(&s->err, WEFT_EINVAL, "penalties need the token sequence (seq NULL)");
    for (int64_t i = 0; i < pos; i++)
        if (seq[i] < 0 || seq[i] >= V)
            return weft_err_set(&s->err, WEFT_ERANGE, "token %d at position %lld is outside the vocabulary [0, %lld)",
                                (int)seq[i], (long long)i, (long long)V);
    if (counting) {
        /* Count generated tokens (seq[n_prompt..pos)), apply once per distinct id, and zero the touched
         * counts again on the way so the scratch is clean for the next call. */
        for (int64_t i = n_prompt; i < pos; i++) s->count[seq[i]]++;
        for (int64_t i = n_prompt; i < pos; i++) {
            int32_t t = seq[i];
            int32_t c = s->count[t];
            if (!c) continue;
            z[t] = (float)((double)z[t] - (p->frequency_penalty * (double)c + p->presence_penalty));
            s->count[t] = 0;
        }
    }
    if (repeating) {
        const double r = p->repetition_penalty;
        for (int64_t i = 0; i < pos; i++) {
            int32_t t = seq[i];
            if (s->seen[t]) continue;
            s->seen[t] = 1;
            z[t] = z[t] > 0 ? (float)((double)z[t] / r) : (float)((double)z[t] * r);
        }
        for (int64_t i = 0; i < pos; i++) s->seen[seq[i]] = 0;
    }
    return WEFT_OK;
}

/* Fills s->cand with the candidates that can matter and sorts them into reference order; returns their
 * count. l0 = l of the best candidate (index best). */
static size_t candidates(weft_sampler *s, const weft_sampling *p, double T, double l0) {
    const float *z = s->z;
    const int64_t V = s->vocab;
    size_t n = 0;
    if (!isfinite(l0)) {
        /* An infinite best logit makes l_i - l_0 meaningless: keep everything, as the reference does. */
        for (int64_t i = 0; i < V; i++) s->cand[n++] = weft_order_cand(z[i], (int32_t)i);
    } else {
        /* Without top_p, min_p's cut (step 7) can be applied now: it keeps l_i >= l_0 + ln(min_p), the same
         * prefix whether taken before or after top_k. With top_p it must wait, since p's total spans it. */
        double lmin = -INFINITY;
        if (!(p->top_p < 1.0) && p->min_p > 0) lmin = l0 + log(p->min_p);
        for (int64_t i = 0; i < V; i++) {
            double li = (double)z[i] / T;
            if (li - l0 >= L_CUT && li >= lmin) s->cand[n++] = weft_order_cand(z[i], (int32_t)i);
        }
    }
    if (p->top_k > 0 && n > (size_t)p->top_k) {
        /* Step 4's top_k without sorting everything: the k-th smallest candidate bounds the first k, and the
         * filter keeps them in id order, which the stable radix sort needs. */
        uint64_t kth = weft_order_kth(s->cand, n, (size_t)p->top_k, s->tmp);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (s->cand[i] <= kth) s->cand[m++] = s->cand[i];
        n = m;
    }
    weft_order_sort(s->cand, s->tmp, n);
    return n;
}

int32_t weft_sample(weft_sampler *s, const float *logits, const weft_sampling *p, const int32_t *seq, int64_t pos,
                    int64_t n_prompt, weft_logprobs *lp) {
    if (!s) return -1;
    s->err.code = WEFT_OK;
    s->err.msg[0] = '\0';
    if (!logits || !p) {
        weft_err_set(&s->err, WEFT_EINVAL, "weft_sample: logits or settings are NULL");
        return -1;
    }
    if (pos < 0 || n_prompt < 0 || n_prompt > pos) {
        weft_err_set(&s->err, WEFT_EINVAL, "weft_sample: need 0 <= n_prompt <= pos (n_prompt %lld, pos %lld)",
                     (long long)n_prompt, (long long)pos);
        return -1;
    }
    if (!(p->temperature >= 0.0)) {
        weft_err_set(&s->err, WEFT_EINVAL, "temperature must be >= 0 (got %g)", p->temperature);
        return -1;
    }
    if (p->n_logit_bias > 0 && !p->logit_bias) {
        weft_err_set(&s->err, WEFT_EINVAL, "logit_bias: %d entries but no array", p->n_logit_bias);
        return -1;
    }
    const int64_t V = s->vocab;
    memcpy(s->z, logits, (size_t)V * sizeof *s->z);
    if (adjust(s, p, seq, pos, n_prompt) != WEFT_OK) return -1;

    /* NaN -> -inf, and the best candidate (= sorted order's first: largest z, lowest id). */
    float *z = s->z;
    int32_t best = 0;
    float zb = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        float v = z[i];
        if (isnan(v)) z[i] = v = -INFINITY;
        if (v > zb) {
            zb = v;
            best = (int32_t)i;
        }
    }
    int32_t tok;
    if (p->temperature == 0.0) {
        tok = best; /* step 3 */
        goto out;
    }
    const double T = p->temperature > 1e-6 ? p->temperature : 1e-6; /* step 5 */
    size_t n = candidates(s, p, T, (double)zb / T);                   /* step 4 */
    if (n == 0) {
        /* Only when min_p > 1 (rejected by weft_sampling_validate) empties the set; the reference has no
         * answer there. */
        tok = best;
        goto out;
    }
    double *l = s->l;
    for (size_t i = 0; i < n; i++) l[i] = (double)z[(int32_t)(s->cand[i] & 0xffffffffu)] / T;

    size_t keep = n;
    if (p->top_p < 1.0) { /* step 6 */
        double total = 0.0, acc = 0.0;
        for (size_t i = 0; i < n; i++) {
            s->p[i] = exp(l[i] - l[0]);
            total += s->p[i];
        }
        keep = 0;
        for (size_t i = 0; i < n; i++) {
            if (keep > 0 && acc >= p->top_p * total) break;
            acc += s->p[i];
            keep++;
        }
    }
    const int use_min_p = p->min_p > 0; /* step 7 */
    const double thr = use_min_p ? l[0] + log(p->min_p) : 0.0;

    /* Step 8. l is non-increasing along the order, so once l_i + G_MAX < bestv no later candidate can reach
     * bestv (rounding is monotone): stop there. */
    size_t win = 0; /* stays 0 when no candidate beats -inf (all logits -inf): the reference has no answer */
    double bestv = -INFINITY;
    for (size_t i = 0; i < keep; i++) {
        if (use_min_p && !(l[i] >= thr)) continue;
        if (l[i] + G_MAX < bestv) break;
        int32_t id = (int32_t)(s->cand[i] & 0xffffffffu);
        double v = l[i] + weft_gumbel(weft_uniform(weft_key(p->seed, pos, id)));
        if (v > bestv) {
            bestv = v;
            win = i;
        }
    }
    tok = (int32_t)(s->cand[win] & 0xffffffffu);
out:
    if (lp) weft_logprobs_fill(logits, V, tok, p->logprobs, lp);
    return tok;
}
