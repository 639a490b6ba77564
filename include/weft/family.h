/* weft/family.h — what a model family gives the CPU backend: per-stream state and one forward over rows.
 *
 * The backend (src/backend/cpu/backend.c) owns slots, the thread pool and sampling; the family owns the math
 * (src/families/<family>.c). Rows of one call may come from many streams; a row's result must not depend on
 * the others (SPEC §4.3.1). */
#ifndef WEFT_FAMILY_H
#define WEFT_FAMILY_H

#include "weft/config.h"
#include "weft/cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of a forward: token `token` of the stream in `slot` at absolute position `pos`. */
typedef struct weft_row {
    int slot;
    int pos;
    int32_t token;
} weft_row;

/* One stream's request in a batched draft (draft_many): the arguments of `draft`. */
typedef struct weft_family_draft {
    void *state; /* the stream's state (distinct per request) */
    const int32_t *seq;
    int n_tokens;
    int max_n;
    int32_t *out; /* out [max_n] */
    int *n_out;
} weft_family_draft;

typedef struct weft_family_ops {
    const char *name;
    /* Bytes of one stream's state (KV cache, recurrent states) for `capacity` positions. */
    size_t (*state_bytes)(const void *fam, int capacity);
    /* Prepares zeroed state memory (state_bytes(capacity) bytes, owned by the backend) for a new stream. */
    void (*state_init)(const void *fam, void *state, int capacity);
    /* Runs rows[0..n) (grouped by slot, positions ascending within a slot, each slot's first row at its
     * cache_len) through the model, writing their caches; writes fp32 logits [n_out, vocab] of rows
     * out_rows[0..n_out). states[slot] is the slot's state. n <= max_rows given at creation. */
    weft_status (*forward)(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                           const int *out_rows, int n_out, float *logits, weft_err *err);
    /* Rolls a stream's state back so that only positions < cache_len remain (after a verify window). */
    weft_status (*keep)(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err);
    void (*destroy)(void *fam);
    /* Optional (NULL = WEFT_ENOTSUP), for the prompt cache (SPEC §4.4): a copy of everything a stream's state
     * holds at position pos (pos = the stream's cache_len: KV rows [0, pos) and every recurrent state), and
     * its restore into a freshly initialised state of any capacity >= pos. Restoring then feeding the rest of
     * a prompt gives the same bits as prefilling it all (resumed == fresh). */
    size_t (*snapshot_bytes)(const void *fam, int pos);
    weft_status (*snapshot_save)(const void *fam, const void *state, int pos, void *dst, weft_err *err);
    weft_status (*snapshot_restore)(const void *fam, void *state, int pos, const void *src, weft_err *err);
    /* Optional (NULL = the model has no draft head): greedy drafts from the model's own draft head (SPEC §4.5
     * (b), the MTP head; families-and-formats §3.9, §4.7). seq[0..n_tokens) are the stream's tokens, the
     * last one its pending token (committed, not yet fed: the state holds n_tokens - 1 positions). Writes up
     * to max_n proposed tokens (ids in [0, vocab)) to follow it into out and their count to *n_out (0 when
     * the head has nothing to go on, e.g. right after a restore without head state). The head's own caches
     * are advanced to the committed tokens; the proposals are not committed anywhere; fewer than max_n when
     * the chain would pass the stream's capacity. Errors: WEFT_EINVAL (n_tokens - 1 is not the stream's
     * length), WEFT_ERANGE (the pending token is outside the vocabulary). */
    weft_status (*draft)(void *fam, weft_pool *pool, void *state, const int32_t *seq, int n_tokens, int max_n,
                         int32_t *out, int *n_out, weft_err *err);
    /* Optional (NULL = draft per stream): `draft` for reqs[0..n) at once, each chain step one head forward
     * over the streams still drafting; every stream's proposals and state are bit-identical to a `draft` of
     * it alone (the head's kernels are row-invariant). Errors: those of draft (request index named; checked
     * for all before anything runs), WEFT_EINVAL for a state given twice. */
    weft_status (*draft_many)(void *fam, weft_pool *pool, const weft_family_draft *reqs, int n,
                              weft_err *err);
} weft_family_ops;

typedef struct weft_family_model {
    const weft_family_ops *ops;
    void *self;
    int max_rows; /* most rows one forward takes */
    int64_t vocab_size;
    size_t scratch_floats; /* per-thread scratch the family's kernels need (pool size) */
    size_t weights_bytes;  /* resident bytes of the family's own decoded copies (norms etc.) */
} weft_family_model;

#ifdef __cplusplus
}
#endif
#endif
