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

    /* queue link (engine mu) */
    struct weft_request_handle *next;
};

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
} lane;

struct weft_engine {
    weft_backend *be;
    /* copied config */
    int parallel, max_queue, max_rows, prefill_chunk, capacity, max_draft;
    int32_t *eos;
    int n_eos;
    weft_drafter drafter;
    bool has_drafter;

    /* engine thread only */
    lane *lanes;        /* [parallel] */
    int *order;         /* [parallel] lanes of a round, least recently served first */
    weft_segment *segs; /* [parallel] */
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
/* Makes committed tokens [0, n_gen) visible, optionally with PREFILLED. */
void lanes_post_progress(weft_request_handle *r, bool prefilled, int n_gen);
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

#endif
