/* weft/backend.h — the backend vtable (SPEC §4.2). All policy (admission, rounds, drafts, prompt cache)
 * lives above it in the lane core; a backend only runs forwards over stream slots and draws tokens.
 *
 * Positions: a stream's token at absolute position p is seq[p]. A segment feeds rows at positions
 * start .. start+n_rows-1 (start = the stream's cache_len: rows already in its caches). The draw made from
 * row r predicts the token at position start+r+1 and is keyed at that position (SPEC §5.2).
 * Row invariance (SPEC §4.3.1): a row's logits must not depend on the other rows or segments of the call. */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include "weft/common.h"
#include "weft/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_segment {
    int slot;           /* stream slot, 0 <= slot < max_slots, opened with open() */
    int start;          /* position of row 0 = rows already in the slot's caches */
    int n_rows;         /* rows fed in this call (>= 1) */
    const int32_t *seq; /* [start + n_rows] every token of the stream up to the last row: prompt, then
                           generated, then this window's draft rows. Rows fed are seq[start..]. */
    int n_prompt;       /* seq[0..n_prompt) is the prompt; later positions count as generated */
    int n_draw;         /* draw from the last n_draw rows (prefill chunk: 0, or 1 on the last chunk;
                           decode window: n_rows) */
    const weft_sampling *sampling; /* used when n_draw > 0 */
    int32_t *draws;                /* out [n_draw] */
    weft_logprobs *logprobs;       /* out [n_draw] or NULL (sampling->logprobs says how many top entries) */
} weft_segment;

/* One stream's request in a batched draft call (draft_many): the arguments of `draft`, one per slot. */
typedef struct weft_draft_req {
    int slot;
    const int32_t *seq; /* [n_tokens] the stream's context, the last token its pending one */
    int n_tokens;
    int max_n;    /* drafts wanted (may differ per stream: adaptive depth) */
    int32_t *out; /* out [max_n] */
    int *n_out;   /* out: drafts written, 0..max_n */
} weft_draft_req;

typedef struct weft_backend_ops {
    const char *name; /* "cpu", "cuda", "fake" */
    /* Prepares slot for a new stream of at most `capacity` positions (prompt + reply). Allocation happens
     * here, never in forward. WEFT_ENOMEM with the numbers when it cannot. */
    weft_status (*open)(void *self, int slot, int capacity, weft_err *err);
    /* One forward over every segment (each a different slot), then the draws. */
    weft_status (*forward)(void *self, weft_segment *segs, int n_segs, weft_err *err);
    /* After a verify window: keep only the first cache_len positions of the slot's caches and states. */
    weft_status (*keep)(void *self, int slot, int cache_len, weft_err *err);
    /* Frees the slot's caches. Always succeeds. */
    void (*release)(void *self, int slot);
    /* Bytes used by weights + states, and bytes still free for new streams. Safe from any thread. */
    void (*memory)(void *self, size_t *used, size_t *free_bytes);
    /* Optional (NULL = WEFT_ENOTSUP): prompt-cache snapshots (SPEC §4.4). snapshot_bytes(pos): bytes of a
     * snapshot of a stream at position pos. save: copies the slot's state at pos (pos must equal the slot's
     * cache_len: KV rows [0, pos) and every recurrent state) into dst[bytes]. restore: into a freshly opened
     * slot, makes its caches what they were at pos (its cache_len becomes pos). Restoring and then feeding
     * the rest of a prompt gives the same bits as prefilling it whole (resumed == fresh). */
    size_t (*snapshot_bytes)(void *self, int pos);
    weft_status (*save)(void *self, int slot, int pos, void *dst, size_t bytes, weft_err *err);
    weft_status (*restore)(void *self, int slot, int pos, const void *src, size_t bytes, weft_err *err);
    void (*destroy)(void *self);
    /* Optional (NULL = the model has no draft head; the lane core then uses copy drafts): up to max_n greedy
     * draft tokens from the model's draft head (SPEC §4.5 (b), MTP) to follow the slot's pending token
     * seq[n_tokens - 1]; seq[0..n_tokens) is the stream's context and the slot must hold n_tokens - 1
     * positions (call it between rounds, after keep). Writes out[0..*n_out), *n_out <= max_n (0 = nothing
     * to propose). The head's state follows keep()/restore() with the target's, so proposals are a function
     * of the tokens only. Drafts are proposals: the lane core keeps one only if it equals the target's draw.
     * Errors: WEFT_EINVAL (slot not open, n_tokens - 1 not its length). */
    weft_status (*draft)(void *self, int slot, const int32_t *seq, int n_tokens, int max_n, int32_t *out,
                         int *n_out, weft_err *err);
    /* Optional (NULL = call draft per stream): draft for reqs[0..n) at once, each request's slot distinct,
     * so that every chain step runs the head once over all streams still drafting (a stream whose max_n is
     * reached drops out of later steps). Each stream's drafts and head state are bit-identical to what
     * `draft` gives it alone (row invariance). Errors: those of draft for the first bad request (then
     * nothing ran), WEFT_EINVAL for a slot given twice or n > max_slots; an error while running leaves
     * every request's *n_out meaningless (drafts are proposals: the caller may retry one by one). */
    weft_status (*draft_many)(void *self, const weft_draft_req *reqs, int n, weft_err *err);
} weft_backend_ops;

typedef struct weft_backend {
    const weft_backend_ops *ops;
    void *self;
    int max_slots; /* slots available (streams that can be open at once) */
    int max_rows;  /* most rows one forward accepts (row budget of a round) */
    int64_t vocab_size;
} weft_backend;

#ifdef __cplusplus
}
#endif
#endif
