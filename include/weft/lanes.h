/* weft/lanes.h — the lane core (SPEC §4.1): one engine thread per model that serves many streams in shared
 * rounds over the backend vtable (weft/backend.h), plus the per-request mailbox the HTTP threads wait on,
 * and a history-sensitive fake backend for tests.
 *
 * Threads: weft_engine_submit / weft_engine_cancel / weft_request_next_event / weft_request_release /
 * weft_engine_get_stats are safe from any thread. Everything that touches the backend (open, forward, keep,
 * release) and every stream state change happens on the engine thread only; the stop hook and the drafter are
 * called there too.
 *
 * Request lifetime: weft_engine_submit returns a handle owned by two sides, the caller and the engine. The
 * engine side lets go once it has posted FINISHED; the caller lets go with weft_request_release. Memory is
 * freed when both have let go. Releasing before FINISHED cancels the request. */
#ifndef WEFT_LANES_H
#define WEFT_LANES_H

#include "weft/common.h"
#include "weft/sampler.h"
#include "weft/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_engine weft_engine;
typedef struct weft_request_handle weft_request_handle;

/* ---- drafting (SPEC §4.5) ----
 * A drafter proposes tokens to follow a stream's context; the engine feeds them as extra rows of the stream's
 * window and keeps only the longest prefix equal to the target's own draws (plus the target's bonus draw), so
 * a drafter can change speed, never output. Called on the engine thread. */
typedef struct weft_drafter {
    void *ctx;
    /* Proposes up to max_n tokens to follow tokens[0..n_tokens) (prompt, then generated; the last one is the
     * stream's pending token, committed but not yet fed). `slot` identifies the stream while it lives (a
     * stateful drafter may key on it). Writes them to out[0..) and returns how many (0..max_n). Token ids
     * must be in [0, vocab); the engine treats anything else as no draft. */
    int (*propose)(void *ctx, int slot, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *out,
                   int max_n);
    /* Optional (NULL = none): a new stream now owns `slot` (called at admission, before its first round),
     * so a stateful drafter can drop what it kept for the slot's previous stream. */
    void (*reset)(void *ctx, int slot);
    /* Optional (NULL = nothing to free): frees ctx. Called by weft_drafter_free, never by the engine (the
     * engine copies the struct and borrows ctx: free the drafter after weft_engine_free). */
    void (*destroy)(void *ctx);
} weft_drafter;

/* Calls d->destroy(d->ctx) when set and zeroes *d. NULL is fine. */
void weft_drafter_free(weft_drafter *d);

/* Copy drafts (SPEC §4.5 (a)): proposes the continuation of the longest earlier occurrence of the stream's
 * most recent tokens within its own prompt + reply so far (suffix / n-gram match). Each slot keeps an
 * n-gram index over its tokens (hash heads + chains of positions), extended incrementally by the tokens
 * committed since its last call; reset() clears it for a new stream. Nothing is allocated after
 * construction. A proposal is made only when the match is at least min_match tokens long; it is as long as
 * the engine asks (the engine's depth rule, which adapts to measured acceptance) and repeats the matched
 * span cyclically when the match runs into the present (loops). Deterministic: a function of the tokens. */
typedef struct weft_copy_drafter_config {
    int max_slots;      /* slots the engine serves (its `parallel`), >= 1 */
    int capacity;       /* tokens per stream (the engine's `capacity`), >= 2 */
    int min_match;      /* shortest suffix match that proposes, 1..32 (0 = 3) */
    int max_candidates; /* earlier occurrences compared per proposal, 1..64 (0 = 8) */
} weft_copy_drafter_config;

/* Fills *out (ctx, propose, reset, destroy); free with weft_drafter_free. Memory: about 12 bytes per slot
 * and capacity position (stated in the error when it fails). Errors: WEFT_EINVAL (a field, named),
 * WEFT_ENOMEM. Use as the engine's drafter with max_draft > 0 (e.g. 8). */
weft_status weft_copy_drafter_new(const weft_copy_drafter_config *cfg, weft_drafter *out, weft_err *err);

/* ---- engine ---- */
typedef struct weft_engine_config {
    int parallel;  /* streams served at once (backend slots open), 1..backend->max_slots */
    int max_queue; /* requests waiting beyond the `parallel` running ones; more are refused (WEFT_EBUSY) */
    int max_rows;  /* row budget of one round (rows fed to one forward); 0 = backend->max_rows;
                      must be <= backend->max_rows */
    int prefill_chunk; /* most prompt rows of one stream in one round; 0 = max_rows */
    int capacity;      /* positions per stream (context length): prompt + max_tokens must fit; each slot is
                          opened with open(slot, capacity) */
    const int32_t *eos_ids; /* [n_eos] ids that end a reply (copied); drawn EOS is committed, reason stop */
    int n_eos;
    int max_draft;               /* most draft rows per window (0 = never draft); max_draft + 1 <= max_rows */
    const weft_drafter *drafter; /* copied; NULL = no drafting */
    /* Prompt cache (SPEC §4.4). States are saved as backend snapshots (snapshot_bytes/save/restore) into host
     * memory at positions that depend only on the tokens: every prompt_cache_grid tokens from position 0,
     * at prompt_len - 1 (the last prompt row must still be fed to draw the first token, so a full-prompt hit
     * resumes there), and at the end of a finished reply (prompt + reply minus its last, unfed token), each
     * keyed by its exact token prefix. With the cache on, prefill chunks also end at those positions.
     * Admission restores the longest cached prefix of the prompt (at most prompt_len - 1 tokens) and
     * prefills the rest. Eviction is LRU, entries that a newer one extends and that were never resumed
     * going first; the entry being resumed is never evicted (pinned until the prompt is in). A failed save
     * drops the entry, a failed restore prefills from 0; both log one line to stderr. A backend without
     * snapshot ops (or whose snapshot_bytes(1) is 0) runs without the cache. */
    size_t prompt_cache_bytes; /* budget in bytes (snapshots + keys + entry headers); 0 = no cache */
    int prompt_cache_grid;     /* tokens between grid saves, >= 1 (0 = 512) */
    /* Depth rule (SPEC §4.5): per stream, an EMA (weight 0.15) of the acceptance of each draft position
     * picks the depth d maximising E(d) / (1 + draft_row_cost * d), E(d) = 1 + a + ... + a^d; depth 0
     * (plain rounds) must lose by 5% for drafting to go on. A stream whose drafts do not pay runs plain
     * rounds and probes 2 drafts after 8, 16, ... 128 plain rounds. */
    double draft_row_cost; /* cost of one draft row relative to a one-row round, >= 0 (0 = 0.1) */
    /* Model drafts (SPEC §4.5 (b)): when the backend has a draft head (backend ops `draft`, e.g. an MTP
     * head) a window's drafts come from it — greedy proposals, depth from the same rule — and the drafter
     * above is the fallback (used when the backend has no head, or its head has nothing for the stream this
     * round, or failed for the stream: logged once). max_model_draft: most head drafts per window, capped by
     * max_draft (0 = max_draft); -1 = never use the head (drafter only). */
    int max_model_draft;
} weft_engine_config;

/* Validates cfg against the backend (messages name the field), copies it and allocates every per-engine
 * buffer. The backend is borrowed: it must outlive the engine, and the caller destroys it after
 * weft_engine_free. Errors: WEFT_EINVAL (a config field), WEFT_ENOMEM. */
weft_status weft_engine_new(const weft_engine_config *cfg, weft_backend *backend, weft_engine **out,
                            weft_err *err);

/* Starts the engine thread. Requests submitted before start wait in the queue (admitted in submission order
 * at the first round). WEFT_EINVAL if already started or stopped, WEFT_EINTERNAL if the thread fails. */
weft_status weft_engine_start(weft_engine *e, weft_err *err);

/* Shutdown, blocking until the engine thread has exited: new submissions are refused (WEFT_EBUSY); running
 * streams finish with WEFT_FINISH_CANCELLED after their current round (message "server shutting down");
 * queued requests finish with WEFT_FINISH_REFUSED, status WEFT_EBUSY. Every slot is released. Idempotent;
 * also valid on an engine never started (its queued requests are refused). A grace period, if any, is the
 * caller's: wait for requests to finish before calling this. */
void weft_engine_stop(weft_engine *e);

/* Stops (if needed) and frees the engine. Handles not yet released stay valid (they are all FINISHED after
 * stop) and must still be released; weft_engine_cancel on them is then a no-op. No other thread may be inside
 * an engine call while it is freed. NULL is fine. */
void weft_engine_free(weft_engine *e);

/* ---- requests ---- */

/* Called on the engine thread after each committed token, generated[0..n_generated) being every generated
 * token so far (the newest last, EOS included). Return 1 to finish the reply at this token with reason stop
 * (the server's stop strings), 0 to go on. Must not block or call into the engine. */
typedef int (*weft_stop_fn)(void *ctx, const int32_t *generated, int n_generated);

typedef struct weft_request {
    const int32_t *prompt; /* [n_prompt] token ids in [0, vocab), copied; n_prompt >= 1 */
    int n_prompt;
    weft_sampling sampling; /* copied, logit_bias array included; sampling.logprobs >= 0 asks for logprobs */
    int max_tokens;         /* >= 1; prompt + max_tokens <= capacity */
    bool ignore_eos;        /* true: EOS ids do not end the reply */
    bool draft;             /* false = serial reference (no draft rows); ignored without a drafter or head */
    weft_stop_fn stop;      /* optional stop hook */
    void *stop_ctx;         /* passed to stop; must live until FINISHED */
} weft_request;

/* Queues a request. Refusals happen here, before any work, and touch no other request:
 * WEFT_EINVAL (empty prompt, token id past vocab, max_tokens < 1, sampling settings refused by
 * weft_sampling_validate: the message names the field),
 * WEFT_ERANGE (prompt + max_tokens exceeds capacity: the message starts "context_length_exceeded" and states
 * the window and the tokens asked; or a logit_bias id outside the vocab),
 * WEFT_EBUSY (running + waiting would pass parallel + max_queue, or the engine is stopping),
 * WEFT_ENOMEM. On success *out is a handle the caller must weft_request_release. */
weft_status weft_engine_submit(weft_engine *e, const weft_request *req, weft_request_handle **out,
                               weft_err *err);

/* Asks the engine to end the request (client gone). From any thread, any number of times; a no-op once
 * FINISHED. Takes effect between rounds (and so between prefill chunks): the stream's slot is released and
 * the request finishes with WEFT_FINISH_CANCELLED; a queued request finishes without running. Does not touch
 * the engine once the request has finished, so it is safe after weft_engine_stop. */
void weft_engine_cancel(weft_request_handle *h);

typedef enum weft_event_kind {
    WEFT_EVENT_NONE = 0,  /* timeout: nothing new */
    WEFT_EVENT_PREFILLED, /* the prompt is in the caches */
    WEFT_EVENT_TOKENS,    /* newly committed tokens */
    WEFT_EVENT_FINISHED,  /* last event of a request */
} weft_event_kind;

typedef enum weft_finish_reason {
    WEFT_FINISH_NONE = 0,
    WEFT_FINISH_STOP,      /* EOS (unless ignore_eos) or the stop hook said so */
    WEFT_FINISH_LENGTH,    /* max_tokens generated */
    WEFT_FINISH_CANCELLED, /* weft_engine_cancel / release, or shutdown of a running stream */
    WEFT_FINISH_ERROR,     /* the backend failed during a round (status and message say how) */
    WEFT_FINISH_REFUSED,   /* never ran: queued at shutdown (WEFT_EBUSY) or the backend could not open a
                              slot for it (its status, e.g. WEFT_ENOMEM); no token was produced */
} weft_finish_reason;

/* "none", "stop", "length", "cancelled", "error", "refused" (static strings). */
const char *weft_finish_reason_name(weft_finish_reason r);

/* Per-request statistics (seconds from weft_now()). */
typedef struct weft_request_stats {
    int prompt_tokens;
    int cached_tokens; /* prompt tokens restored from the prompt cache (the resumed length), 0 on a miss */
    int completion_tokens;  /* every generated token, the EOS or stop-completing token included */
    int rounds;             /* forwards this stream took part in (prefill chunks included) */
    int drafted;            /* draft rows fed */
    int accepted;           /* draft rows kept */
    double queue_seconds;   /* submit -> admission */
    double prefill_seconds; /* admission -> first token drawn */
    double decode_seconds;  /* first token -> finish */
    double ttft_seconds;    /* submit -> first token (0 if none) */
} weft_request_stats;

typedef struct weft_event {
    weft_event_kind kind;
    /* PREFILLED (cached_tokens: prompt tokens resumed from the prompt cache, 0..prompt_tokens - 1) */
    int prompt_tokens, cached_tokens;
    /* TOKENS: generated[offset .. offset + n_tokens). Pointers stay valid until weft_request_release. Tokens
     * of several rounds may come as one event when the reader is slower than the engine. */
    int offset;
    int n_tokens;
    const int32_t *tokens;
    const weft_logprobs *logprobs; /* [n_tokens] or NULL when the request asked for none */
    /* FINISHED */
    weft_finish_reason reason;
    weft_status status;  /* WEFT_OK for stop/length, WEFT_ECANCELLED, WEFT_EBUSY, the backend's status... */
    const char *message; /* one line for cancelled/error/refused ("" otherwise); valid until release */
    weft_request_stats stats;
} weft_event;

/* Waits up to timeout_s seconds (< 0: forever, 0: poll) for the next event. Events come in order: PREFILLED
 * (once, unless the request never ran), TOKENS (zero or more), FINISHED (once; later calls return FINISHED
 * again). Returns true with *ev filled, false on timeout (ev->kind = WEFT_EVENT_NONE). One reader per handle.
 */
bool weft_request_next_event(weft_request_handle *h, weft_event *ev, double timeout_s);

/* The caller is done with the handle (cancels it first if not finished). NULL is fine. */
void weft_request_release(weft_request_handle *h);

/* ---- metrics ---- */
typedef struct weft_engine_stats {
    int running;                      /* admitted streams (slots open) */
    int waiting;                      /* queued, not admitted */
    uint64_t requests_finished_total; /* requests that posted FINISHED (any reason) */
    uint64_t prompt_tokens_total;     /* prompt rows prefilled (tokens resumed from the cache excluded) */
    uint64_t generation_tokens_total; /* tokens committed */
    uint64_t drafted_total;           /* draft rows fed */
    uint64_t accepted_total;          /* draft rows kept */
    uint64_t rounds_total;            /* forwards run */
    size_t memory_used, memory_free;  /* backend->ops->memory */
    /* prompt cache (all 0 while it is off) */
    uint64_t prompt_tokens_cached_total; /* prompt tokens resumed from the cache (cached_tokens summed) */
    uint64_t prefix_cache_queries;       /* prompt tokens looked up: every admitted prompt's length */
    uint64_t prefix_cache_hits;          /* of those, tokens resumed (= prompt_tokens_cached_total) */
    uint64_t prompt_cache_lookups;       /* admissions that looked the prompt up */
    uint64_t prompt_cache_hit_requests;  /* ... and resumed from an entry */
    uint64_t prompt_cache_saves;         /* snapshots stored */
    uint64_t prompt_cache_evictions;     /* entries evicted for room */
    uint64_t prompt_cache_failures;      /* failed saves and restores (each logged) */
    size_t prompt_cache_bytes;           /* bytes held now; never above prompt_cache_budget */
    size_t prompt_cache_budget;          /* the configured budget, 0 when the cache is off */
    int prompt_cache_entries;            /* entries held now */
    /* occupancy: positions held in the streams' caches (KV rows; recurrent states are per stream) */
    uint64_t kv_rows_used;     /* sum of the admitted streams' cache_len after the latest round */
    uint64_t kv_rows_capacity; /* parallel x capacity: every slot's positions */
    int parallel, max_queue;   /* the engine's limits (config): at most parallel + max_queue jobs at once */
} weft_engine_stats;

/* A consistent snapshot; any thread. */
void weft_engine_get_stats(weft_engine *e, weft_engine_stats *out);

/* ---- fake backend (tests) ----
 * A backend whose logits for a row are a function of the stream's whole history seq[0..pos] (a rolling hash
 * mixed per vocab id), so any batching, ordering, chunking or rollback bug changes the tokens. It checks the
 * host's side of the contract and records the first violation (slot not open or opened twice, segment start
 * != its cache_len, seq disagreeing with what it fed before, two segments on one slot, rows past capacity or
 * max_rows, keep past cache_len, release of a slot not open): forward/keep then fail with WEFT_EINTERNAL.
 * Rows are drawn with the real sampler (weft_sample, SPEC §5) from the row's fake logits, at the row's
 * position, with the segment's seq and n_prompt, so penalties see drafts before the row as generated. */
typedef struct weft_fake_config {
    int max_slots;          /* >= 1 */
    int max_rows;           /* >= 1 */
    int vocab_size;         /* 2..4096 */
    uint64_t salt;          /* mixed into every logit (different salt = different "model") */
    double forward_delay_s; /* sleep per forward (server tests that need time to disconnect) */
    double copy_bias;       /* >= 0; > 0: when the row's last two tokens occurred before, the token that
                               followed their latest occurrence gets this added to its logit (the fake
                               continues copies, so copy drafts can be accepted); 0 = off */
} weft_fake_config;

/* Fills *out (ops, self, max_slots, max_rows, vocab_size); out->ops->destroy(out->self) frees it. */
weft_status weft_fake_backend_new(const weft_fake_config *cfg, weft_backend *out, weft_err *err);

typedef struct weft_fake_stats {
    int forwards;        /* forward calls */
    long rows;           /* rows fed */
    int max_segments;    /* most segments in one forward */
    int max_call_rows;   /* most rows in one forward */
    int opens, releases; /* open/release calls that succeeded */
    int open_slots;      /* slots open now */
    int keeps;           /* keep calls that dropped rows */
    int violations;      /* contract violations seen */
    char first_violation[256];
    int saves, restores; /* snapshot saves / restores that succeeded */
    int snapshot_faults; /* injected save/restore failures */
    int n_save_log;      /* saves recorded in save_log (the first 64) */
    int save_log[64];    /* position of each of the first 64 successful saves */
} weft_fake_stats;

void weft_fake_get_stats(const weft_backend *b, weft_fake_stats *out);

/* Test hooks. on_forward runs at the start of each forward (on the engine thread) with the call's segments;
 * fail_open_after: the n-th open from now (1 = next) fails with WEFT_ENOMEM (0 = never);
 * fail_forward_after: the n-th forward from now fails with WEFT_EIO (0 = never). */
void weft_fake_set_hook(weft_backend *b, void (*on_forward)(void *ctx, const weft_segment *segs, int n),
                        void *ctx);
void weft_fake_set_faults(weft_backend *b, int fail_open_after, int fail_forward_after);

/* Snapshot faults: the n-th save / restore from now (1 = next) fails with WEFT_EIO (0 = never). A failed
 * restore first scribbles over the slot (wrong tokens, cache_len = pos), as a half-done copy would, so a
 * host that went on using the slot would be caught. The fake's snapshot of a slot at pos is the tokens it
 * was fed [0, pos) and its history hash. */
void weft_fake_set_snapshot_faults(weft_backend *b, int fail_save_after, int fail_restore_after);

/* The fake's serial oracle: the token drawn from the row at position pos (seq[0..pos] known), i.e. the token
 * at position pos + 1, with n_prompt and sampling as in a segment; lp (optional) gets that row's logprobs
 * (sampling->logprobs top entries). Lets a test replay a reply token by token without the engine. Returns -1
 * on bad arguments. Any thread. */
int32_t weft_fake_next(const weft_backend *b, const int32_t *seq, int n_prompt, int pos,
                       const weft_sampling *sampling, weft_logprobs *lp);

#ifdef __cplusplus
}
#endif
#endif
