/* weft/sampler.h — keyed sampling exactly as SPEC §5 (bit-exact; reference
 * ../shared/tools/sampler_reference.py). The struct definitions here are shared by the lane core and
 * backends; functions are documented below. */
#ifndef WEFT_SAMPLER_H
#define WEFT_SAMPLER_H

#include "weft/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAX_TOP_LOGPROBS 20

typedef struct weft_logit_bias {
    int32_t id;
    double bias;
} weft_logit_bias;

/* One stream's sampling settings (SPEC §5.1). Defaults: temperature 1, top_p 1, top_k 0, min_p 0, penalties
 * 0/0/1, no bias. */
typedef struct weft_sampling {
    double temperature; /* 0 = greedy (argmax, ties to lowest id) */
    int top_k;          /* 0 = all */
    double top_p;       /* 1 = off */
    double min_p;       /* 0 = off */
    double presence_penalty;
    double frequency_penalty;
    double repetition_penalty;         /* 1 = off */
    const weft_logit_bias *logit_bias; /* [n_logit_bias], owned by the request */
    int n_logit_bias;
    uint64_t seed; /* effective seed (request seed, or derived from the prompt, §5.3) */
    int logprobs;  /* -1: none; 0..20: the drawn token's logprob plus this many top entries */
} weft_sampling;

/* Log-probabilities of one drawn row (log-softmax of the raw logits, fp32, §5.1). */
typedef struct weft_logprobs {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[WEFT_MAX_TOP_LOGPROBS];
    float top_logprobs[WEFT_MAX_TOP_LOGPROBS];
} weft_logprobs;

/* ---- SPEC §5.2 keyed-draw primitives (pure functions, u64 wrapping arithmetic) ---- */

/* splitmix64 finaliser:
 * x ^= x>>30; x *= 0xBF58476D1CE4E5B9; x ^= x>>27; x *= 0x94D049BB133111EB; x ^= x>>31. */
uint64_t weft_mix(uint64_t x);

/* key(seed, pos, id) = mix(mix(mix(seed + 0x9E3779B97F4A7C15) ^ (pos * 0xD1B54A32D192ED03)) ^ id).
 * pos (absolute position of the token being drawn) and id are taken as u64 two's complement. */
uint64_t weft_key(uint64_t seed, int64_t pos, int32_t id);

/* u = ((key >> 12) + 0.5) * 2^-52, fp64, exact, strictly inside (0, 1): [2^-53, 1 - 2^-53]. */
double weft_uniform(uint64_t key);

/* Gumbel noise g = -log(-log(u)) with libm log (fp64). For u from weft_uniform, g lies in [-3.61, 36.74]. */
double weft_gumbel(double u);

/* ---- SPEC §5.3 / §5.4: seeds and token_sha (SHA-256 through OpenSSL) ---- */

/* Seed of a request without "seed": first 8 bytes (little endian) of SHA-256 over the ids in decimal joined
 * by ",", then "|" and salt (NULL = "0"), masked to 63 bits. ids: [n] (NULL allowed when n == 0).
 * Returns 0 if OpenSSL cannot allocate its digest context (out of memory). A real seed is 0 with
 * probability 2^-63; callers that must tell the two apart use weft_sha256_ids, which returns a status. */
uint64_t weft_seed_from_prompt(const int32_t *ids, size_t n, const char *salt);

/* token_sha of a reply: the lowercase hex of the first 6 bytes of SHA-256 over the ids in decimal joined by
 * "," (no spaces, no brackets). out: 12 hex digits + NUL; "" if OpenSSL cannot allocate (out of memory). */
void weft_token_sha(const int32_t *ids, size_t n, char out[13]);

/* SHA-256 of the ids in decimal joined by ",", followed by suffix (NULL = nothing). out: 32 bytes.
 * WEFT_EINVAL for ids NULL with n > 0; WEFT_ENOMEM / WEFT_EINTERNAL (err names the OpenSSL call) on failure.
 * weft_seed_from_prompt(ids, n, salt) is this over suffix "|" + salt; weft_token_sha over no suffix. */
weft_status weft_sha256_ids(const int32_t *ids, size_t n, const char *suffix, uint8_t out[32], weft_err *err);

/* ---- settings ---- */

/* Fills the SPEC defaults: temperature 1, top_k 0, top_p 1, min_p 0, presence/frequency 0, repetition 1, no
 * logit_bias, seed 0, logprobs -1. */
void weft_sampling_defaults(weft_sampling *p);

/* Checks settings against a vocabulary of `vocab` ids. WEFT_EINVAL with err naming the field on: temperature
 * < 0 or not finite; top_p not in (0, 1]; min_p not in [0, 1]; top_k < 0; repetition_penalty <= 0 or not
 * finite; presence/frequency_penalty not finite; logprobs < -1 or > 20; n_logit_bias < 0 or logit_bias NULL
 * with n_logit_bias > 0; a non-finite bias or a duplicate id. WEFT_ERANGE for a logit_bias id outside
 * [0, vocab). */
weft_status weft_sampling_validate(const weft_sampling *p, int64_t vocab, weft_err *err);

/* ---- the sampler ---- */

/* Per stream slot (or per engine thread) sampling state: scratch sized by the vocabulary (33 bytes per id
 * plus 11 KB: 5.0 MB at 151,936) so that weft_sample allocates nothing. Not thread-safe: one sampler per
 * thread. A draw never depends on what the sampler drew before (the scratch is rewritten or reset every
 * call). */
typedef struct weft_sampler weft_sampler;

/* A runner for parallel steps inside one draw: must call task(tctx, i) exactly once for every i in
 * [0, n_tasks), on any threads in any order, and return when all have finished. */
typedef void (*weft_sampler_task_fn)(void *tctx, int64_t i);
typedef void (*weft_sampler_run_fn)(void *run_ctx, int64_t n_tasks, weft_sampler_task_fn task, void *tctx);

/* vocab: 1 .. INT32_MAX. Returns NULL if vocab is out of range or memory is short. */
weft_sampler *weft_sampler_new(int64_t vocab);
void weft_sampler_free(weft_sampler *s); /* NULL is fine */
int64_t weft_sampler_vocab(const weft_sampler *s);

/* Draws the token at absolute position pos from one row of logits, exactly as SPEC §5.1–§5.2:
 * logit_bias, penalties, temperature 0 = argmax (ties to lowest id), sort (z desc, id asc), top_k,
 * l = z / max(T, 1e-6), top_p (libm exp, sequential sums), min_p, then the keyed Gumbel draw.
 *   logits  [vocab] raw fp32 logits of the row; not modified.
 *   p       settings (check them once per request with weft_sampling_validate).
 *   seq     [pos] the stream's tokens at positions 0 .. pos-1: seq[0 .. n_prompt) the prompt, the rest
 *           generated (drafts before this row included). Read only when a penalty is active (presence or
 *           frequency != 0: generated ids; repetition != 1: all ids); may be NULL otherwise.
 *   pos     position of the token being drawn (the key position, §5.2), >= n_prompt.
 *   lp      NULL, or filled with the drawn token's logprob and min(max(p->logprobs, 0), 20, vocab) top
 *           entries (see weft_logprobs_fill).
 *
 * A NaN logit (after bias and penalties) counts as -inf; the reference leaves NaN undefined.
 * Returns the token id (>= 0), or -1 on bad input (NULL arguments, pos/n_prompt out of order, a seq or
 * logit_bias id outside the vocabulary, NaN temperature); then weft_sampler_error says what.
 *
 * Cost: O(vocab + pos) passes, plus with top_p < 1 a radix sort of the candidates within 41 (in l units) of
 * the best and one libm exp each; top_k > 0 uses radix selection. The draw visits candidates in id order and
 * skips the logs of those whose noise provably cannot win. Results equal the full-sort definition bit for bit
 * (src/core/sampler_draw.c gives the argument; tests/unit/test_sampler_fast.c checks it). */
int32_t weft_sample(weft_sampler *s, const float *logits, const weft_sampling *p, const int32_t *seq,
                    int64_t pos, int64_t n_prompt, weft_logprobs *lp);

/* The error of the last weft_sample that returned -1 (code WEFT_OK when none). Owned by s. */
const weft_err *weft_sampler_error(const weft_sampler *s);

/* Lets a draw over many candidates (>= 16384 after the prefix cut) split its two costly loops — the top_p
 * weights exp(l_i - l_0) and the keyed draw's Gumbel noise — into n_tasks (1 .. WEFT_SAMPLER_MAX_TASKS) parts
 * run by `run`. The draw is unchanged bit for bit: each weight is computed alone and the total is still
 * added sequentially in sorted order; each part keeps its own best (l + g, then the earlier candidate) and
 * the parts' bests are merged by that same total order (tests/unit/test_sampler_fast.c compares both paths).
 * run = NULL or n_tasks <= 1 makes s serial again. The runner must be free while weft_sample runs (do not
 * call weft_sample from one of its own tasks). Allocates n_tasks skip tables (~11 KB each) here, never in
 * weft_sample; returns WEFT_ENOMEM or WEFT_EINVAL (n_tasks out of range). */
#define WEFT_SAMPLER_MAX_TASKS 64
weft_status weft_sampler_set_parallel(weft_sampler *s, weft_sampler_run_fn run, void *run_ctx, int n_tasks);

/* Log-softmax of raw logits (SPEC §5.1): lse = m + log(sum_i exp(z_i - m)) with m the max and the sum in fp64
 * in id order; logprob_i = (float)(z_i - lse). NaN logits count as -inf; a row whose max is not finite gives
 * non-finite values. out->token = token and its logprob (token must be in [0, vocab)); out->n_top =
 * min(max(n_top, 0), 20, vocab) entries, highest logprob first, ties by id ascending. Allocates nothing. */
void weft_logprobs_fill(const float *logits, int64_t vocab, int32_t token, int n_top, weft_logprobs *out);

#ifdef __cplusplus
}
#endif
#endif
