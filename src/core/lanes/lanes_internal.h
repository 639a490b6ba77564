/* lanes_internal.h — the engine's and the requests' private state, shared by engine.c (thread, queue,
 * submit), rounds.c (admission, one round, commit) and mailbox.c (events, request lifetime). */
#ifndef WEFT_LANES_INTERNAL_H
#define WEFT_LANES_INTERNAL_H

#include "weft/lanes.h"

#include <pthread.h>
#include <stdatomic.h>

#define LANES_MSG_LEN 256

/* One request. The first block is immutable after submit; `mu` guards the mailbox block; the stream block is
 * touched by the engine thread only. */
struct weft_request_handle {
    weft_engine *engine;
    int n_prompt;
    int max_tokens;
    bool ignore_eos;
    bool draft;
    weft_sampling sampling; /* logit_bias points at `bias` */
    weft_logit_bias *bias;
    weft_stop_fn stop;
    void *stop_ctx;
    /* [n_prompt + max_tokens]: prompt, committed tokens, then the current window's drafts. The reader reads
     * the committed range [n_prompt, n_prompt + published), which the engine never rewrites. */
    int32_t *seq;
    weft_logprobs *lp; /* [max_tokens] or NULL */
    double t_submit;
    atomic_bool cancel;

    /* mailbox (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;            /* caller + engine; freed at 0 */
    bool prefilled;      /* PREFILLED happened */
    bool prefilled_seen; /* ... and was delivered */
    int published;       /* generated tokens visible to the reader */
    int consumed;        /* generated tokens delivered */
    bool finished;
    weft_finish_reason reason;
    weft_status status;
    char message[LANES_MSG_LEN];
    weft_request_stats stats;
    int cached; /* prompt tokens resumed from the prompt cache (set with PREFILLED) */

    /* queue link (engine mu) */
    struct weft_request_handle *next;
};

/* Per-stream draft depth rule (depth.c, SPEC §4.5). */
typedef struct lane_depth {
    double rate;    /* EMA of the acceptance of one draft position, given the ones before it were kept */
    int plain_left; /* plain rounds left before the next probe */
    int wait;       /* plain rounds before the next probe after a failed one (8 .. 128) */
    bool probing;   /* drafts did not pay: the next drafting round is a probe */
} lane_depth;

/* One prompt-cache entry (prompt_cache.c): the backend's snapshot of a stream at position len, keyed by the
 * stream's tokens [0, len). */
typedef struct pc_entry {
    struct pc_entry *next;
    uint64_t hash;     /* lanes_prefix_hash of toks[0..len) */
    int len;           /* tokens of the key = the position the snapshot was taken at */
    int32_t *toks;     /* [len] */
    void *data;        /* [snap_bytes] backend snapshot */
    size_t snap_bytes; /* backend->snapshot_bytes(len) */
    size_t charged;    /* snap_bytes + key + header: what counts against the budget */
    uint64_t used;     /* LRU clock of the last save, hit or touch */
    int pins;          /* streams resuming from it: never evicted while > 0 */
    int hits;          /* times resumed */
    bool extended;     /* a newer entry's key extends this one's */
} pc_entry;

typedef struct lanes_pcache {
    size_t budget, used;
    int grid;
    int n_entries;
    pc_entry *head;
    uint64_t clock;
    uint64_t *ph; /* [capacity + 1] prefix hashes scratch */
    /* counters, published into the engine's totals under its mutex */
    uint64_t cached_tokens, queries, lookups, hit_requests, saves, evictions, failures;
} lanes_pcache;

/* One admitted stream; lane i owns backend slot i. Engine thread only. */
typedef struct lane {
    weft_request_handle *req; /* NULL = free */
    int cache_len;            /* rows in the slot's caches */
    int n_gen;                /* committed generated tokens */
    uint64_t last_served;     /* round number of the last round that fed this stream */
    uint64_t admit_seq;       /* admission order, ties in least-recently-served order */
    int seg_rows;             /* rows in the current round (0 = not in it) */
    int n_draft;              /* draft rows in the current window */
    int32_t *draws;           /* [max_draft + 1] */
    weft_logprobs *lp;        /* [max_draft + 1] */
    /* set when the stream ends in this round */
    bool done;
    weft_finish_reason reason;
    weft_status status;
    char message[LANES_MSG_LEN];
    bool prefilled_now; /* PREFILLED to post this round */
    /* stats */
    int rounds, drafted, accepted;
    double t_admit, t_first;
    /* prompt cache and drafts */
    int cached;    /* prompt tokens resumed from the cache */
    pc_entry *pin; /* the entry it resumed from, pinned until its prompt is in */
    lane_depth depth;
    bool head_failed; /* the backend's draft head failed for this stream: drafter only from then on */
    int head_depth;   /* this round: the depth it asked the head for (rows reserved), 0 = none */
    int head_n;       /* the head's drafts for it this round */
} lane;

struct weft_engine {
    weft_backend *be;
    /* copied config */
    int parallel, max_queue, max_rows, prefill_chunk, capacity, max_draft;
    int32_t *eos;
    int n_eos;
    weft_drafter drafter;
    bool has_drafter;
    int max_model_draft; /* > 0: the backend's draft head proposes up to this many per window; 0 = unused */
    double row_cost;     /* depth rule's relative cost of a draft row */
    lanes_pcache *pc;    /* NULL = prompt cache off */

    /* engine thread only */
    lane *lanes;          /* [parallel] */
    int *order;           /* [parallel] lanes of a round, least recently served first */
    weft_segment *segs;   /* [parallel] */
    weft_draft_req *dreq; /* [parallel] this round's head draft requests (one batched call) */
    int *dseg;            /* [parallel] the segment of each */
    uint64_t round_no;
    uint64_t admit_no;

    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, thread_live, closing;
    bool wake; /* a cancel arrived */
    weft_request_handle *q_head, *q_tail;
    int n_waiting, n_running;
    weft_engine_stats totals; /* running/waiting/memory filled at read time */
};

/* mailbox.c */
weft_request_handle *lanes_request_alloc(weft_engine *e, const weft_request *req, weft_err *err);
/* Drops one reference; frees at zero. */
void lanes_request_unref(weft_request_handle *r);
/* Makes committed tokens [0, n_gen) visible, optionally with PREFILLED (and its cached tokens). */
void lanes_post_progress(weft_request_handle *r, bool prefilled, int cached, int n_gen);
/* Posts FINISHED (once) and drops the engine's reference. */
void lanes_post_finished(weft_request_handle *r, weft_finish_reason reason, weft_status status,
                         const char *message, const weft_request_stats *stats);

/* rounds.c (engine thread) */
/* Opens a slot for r in a free lane; on failure finishes r as refused. */
void lanes_admit(weft_engine *e, weft_request_handle *r);
/* Ends every admitted stream whose request asked to cancel (or all of them when `all`, with `why`). */
void lanes_reap_cancelled(weft_engine *e, bool all, const char *why);
/* One round over the admitted streams. Returns the number of admitted streams left. */
int lanes_round(weft_engine *e);
int lanes_active(const weft_engine *e);
/* Publishes the admitted streams' cache rows (totals.kv_rows_used) for weft_engine_get_stats. */
void lanes_publish_occupancy(weft_engine *e);

/* depth.c (engine thread) */
void lanes_depth_init(lane_depth *d);
/* Draft rows to ask for this round (0 = a plain round), at most max_n. */
int lanes_depth_choose(lane_depth *d, int max_n, double row_cost);
/* After a window of n_draft > 0 drafts, of which the first n_accepted equalled the target's draws. */
void lanes_depth_observe(lane_depth *d, int n_draft, int n_accepted, int max_draft, double row_cost);

/* prompt_cache.c (engine thread; stats published under e->mu) */
/* Sets e->pc when budget > 0 and the backend has snapshot ops; the cache stays off otherwise. */
weft_status lanes_cache_new(weft_engine *e, size_t budget, int grid, weft_err *err);
void lanes_cache_free(weft_engine *e);
/* At admission, right after open: restores the longest cached prefix of the prompt into the slot (sets
 * cache_len, cached, pin). A failed restore is logged, drops the entry and reopens the slot to prefill from
 * 0; only a failed reopen returns an error (the slot is then closed). */
weft_status lanes_cache_resume(weft_engine *e, int slot, weft_err *err);
/* Trims a prefill chunk of `rows` rows so that it ends at the next save point, if one lies inside it. */
int lanes_cache_cut(const weft_engine *e, const lane *l, int rows);
/* After a prefill chunk: saves when the stream stands at a save point; unpins once the prompt is in. */
void lanes_cache_after_prefill(weft_engine *e, int slot);
/* A reply finished (stop or length): saves prompt + reply up to its last, unfed token. */
void lanes_cache_after_reply(weft_engine *e, int slot);
/* Drops the lane's pin (finish, cancel). */
void lanes_cache_unpin(lane *l);

#endif
