/* weft_sampler: the object, input checks and SPEC §5.1 steps 1-3 (logit_bias, penalties, greedy). Steps 4-8
 * (sort, top_k, top_p, min_p, keyed draw) are in sampler_draw.c. Reference:
 * ../shared/tools/sampler_reference.py (draw). Nothing here allocates after weft_sampler_new. */
#include "core/sampler_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    s->p = malloc(n * sizeof *s->p);
    if (!s->z || !s->count || !s->seen || !s->cand || !s->tmp || !s->p) {
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
    free(s->p);
    free(s->task_skip);
    free(s->task_hist);
    free(s);
}

weft_status weft_sampler_set_parallel(weft_sampler *s, weft_sampler_run_fn run, void *run_ctx, int n_tasks) {
    if (n_tasks < 0 || n_tasks > WEFT_SAMPLER_MAX_TASKS)
        return weft_err_set(&s->err, WEFT_EINVAL, "sampler: %d parallel tasks (1 .. %d)", n_tasks,
                            WEFT_SAMPLER_MAX_TASKS);
    if (!run || n_tasks <= 1) {
        s->run = NULL;
        s->n_tasks = 0;
        return WEFT_OK;
    }
    weft_skip_state *ts = realloc(s->task_skip, (size_t)n_tasks * sizeof *ts);
    if (ts) s->task_skip = ts;
    uint32_t(*th)[256] = realloc(s->task_hist, (size_t)n_tasks * sizeof *th);
    if (th) s->task_hist = th;
    if (!ts || !th) return weft_err_set(&s->err, WEFT_ENOMEM, "sampler: out of memory");
    memset(ts, 0, (size_t)n_tasks * sizeof *ts);
    s->run = run;
    s->run_ctx = run_ctx;
    s->n_tasks = n_tasks;
    return WEFT_OK;
}

int64_t weft_sampler_vocab(const weft_sampler *s) {
    return s ? s->vocab : 0;
}

const weft_err *weft_sampler_error(const weft_sampler *s) {
    return &s->err;
}

/* Steps 1-2 on s->z (already a copy of the raw row). Each adjustment is computed in fp64 and stored as fp32,
 * in the reference's order: bias, then frequency/presence, then repetition. */
static weft_status adjust(weft_sampler *s, const weft_sampling *p, const int32_t *seq, int64_t pos,
                          int64_t n_prompt) {
    float *z = s->z;
    const int64_t V = s->vocab;
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        if (id < 0 || id >= V)
            return weft_err_set(&s->err, WEFT_ERANGE,
                                "logit_bias: token id %d outside the vocabulary [0, %lld)", (int)id,
                                (long long)V);
        z[id] = (float)((double)z[id] + p->logit_bias[i].bias);
    }
    /* With both penalties 0 the reference subtracts 0.0, which leaves every fp32 value as it is (z - 0.0 == z
     * bitwise, -0.0 included), so skipping it is exact. */
    int counting = p->frequency_penalty != 0.0 || p->presence_penalty != 0.0;
    int repeating = p->repetition_penalty != 1.0;
    if (!counting && !repeating) return WEFT_OK;
    if (pos > 0 && !seq)
        return weft_err_set(&s->err, WEFT_EINVAL, "penalties need the token sequence (seq NULL)");
    for (int64_t i = 0; i < pos; i++)
        if (seq[i] < 0 || seq[i] >= V)
            return weft_err_set(&s->err, WEFT_ERANGE,
                                "token %d at position %lld is outside the vocabulary [0, %lld)", (int)seq[i],
                                (long long)i, (long long)V);
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

int32_t weft_sample(weft_sampler *s, const float *logits, const weft_sampling *p, const int32_t *seq,
                    int64_t pos, int64_t n_prompt, weft_logprobs *lp) {
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
    /* Step 3: temperature 0 is the argmax, ties to the lowest id. Otherwise steps 4-8. */
    int32_t tok = p->temperature == 0.0 ? best : weft_sampler_draw(s, p, pos, best, zb);
    if (lp) weft_logprobs_fill(logits, V, tok, p->logprobs, lp);
    return tok;
}
