/* Sampling settings: SPEC §5.1 defaults and the checks a request's settings must pass before any draw. */
#include "weft/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void weft_sampling_defaults(weft_sampling *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0;
    p->top_k = 0;
    p->top_p = 1.0;
    p->min_p = 0.0;
    p->presence_penalty = 0.0;
    p->frequency_penalty = 0.0;
    p->repetition_penalty = 1.0;
    p->logit_bias = NULL;
    p->n_logit_bias = 0;
    p->seed = 0;
    p->logprobs = -1;
}

weft_status weft_sampling_validate(const weft_sampling *p, int64_t vocab, weft_err *err) {
    if (!p) return weft_err_set(err, WEFT_EINVAL, "sampling settings are NULL");
    /* Written as !(x ok) so that NaN fails every range check. */
    if (!(p->temperature >= 0.0) || !isfinite(p->temperature))
        return weft_err_set(err, WEFT_EINVAL, "temperature must be a finite number >= 0 (got %g)",
                            p->temperature);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return weft_err_set(err, WEFT_EINVAL, "top_p must be in (0, 1] (got %g)", p->top_p);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        return weft_err_set(err, WEFT_EINVAL, "min_p must be in [0, 1] (got %g)", p->min_p);
    if (p->top_k < 0) return weft_err_set(err, WEFT_EINVAL, "top_k must be >= 0 (got %d)", p->top_k);
    if (!(p->repetition_penalty > 0.0) || !isfinite(p->repetition_penalty))
        return weft_err_set(err, WEFT_EINVAL, "repetition_penalty must be a finite number > 0 (got %g)",
                            p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return weft_err_set(err, WEFT_EINVAL, "presence_penalty must be finite (got %g)",
                            p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return weft_err_set(err, WEFT_EINVAL, "frequency_penalty must be finite (got %g)",
                            p->frequency_penalty);
    if (p->logprobs < -1 || p->logprobs > WEFT_MAX_TOP_LOGPROBS)
        return weft_err_set(err, WEFT_EINVAL, "logprobs (top_logprobs) must be in 0..%d (got %d)",
                            WEFT_MAX_TOP_LOGPROBS, p->logprobs);
    if (p->n_logit_bias < 0)
        return weft_err_set(err, WEFT_EINVAL, "logit_bias: negative entry count %d", p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return weft_err_set(err, WEFT_EINVAL, "logit_bias: %d entries but no array", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const weft_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || (int64_t)b->id >= vocab)
            return weft_err_set(err, WEFT_ERANGE,
                                "logit_bias: token id %d is outside the vocabulary [0, %lld)", (int)b->id,
                                (long long)vocab);
        if (!isfinite(b->bias))
            return weft_err_set(err, WEFT_EINVAL, "logit_bias: bias of token %d must be finite (got %g)",
                                (int)b->id, b->bias);
    }
    /* The reference holds logit_bias as a map, so one id has one bias; a list with repeats has no meaning.
     * Short lists: pairwise; long ones: a bitmap over the vocabulary (this runs once per request, not per
     * token, so the allocation is fine). */
    int dup = -1;
    if (p->n_logit_bias <= 64) {
        for (int i = 1; i < p->n_logit_bias && dup < 0; i++)
            for (int j = 0; j < i; j++)
                if (p->logit_bias[j].id == p->logit_bias[i].id) {
                    dup = p->logit_bias[i].id;
                    break;
                }
    } else {
        uint8_t *seen = calloc((size_t)(vocab / 8 + 1), 1);
        if (!seen)
            return weft_err_set(err, WEFT_ENOMEM,
                                "logit_bias: cannot allocate %lld bytes to check duplicates",
                                (long long)(vocab / 8 + 1));
        for (int i = 0; i < p->n_logit_bias; i++) {
            int32_t id = p->logit_bias[i].id;
            uint8_t bit = (uint8_t)(1u << (id & 7));
            if (seen[id >> 3] & bit) {
                dup = id;
                break;
            }
            seen[id >> 3] |= bit;
        }
        free(seen);
    }
    if (dup >= 0) return weft_err_set(err, WEFT_EINVAL, "logit_bias: token id %d appears twice", (int)dup);
    return WEFT_OK;
}
