/* src/server/internal.h — types shared by the server's files (not public). */
#ifndef WEFT_SERVER_INTERNAL_H
#define WEFT_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <jansson.h>
#include "weft/server.h"

#define SRV_MAX_CHOICES  64   /* prompts x n per request */
#define SRV_MAX_STOPS    16   /* stop strings per request */
#define SRV_MAX_STOP_LEN 512  /* bytes per stop string */
#define SRV_WAKE_S       0.05 /* every wait wakes this often to check the peer and shutdown */

/* ---- growable byte buffer (util.c) ---- */
typedef struct srv_buf {
    char *p;
    size_t len, cap;
} srv_buf;
bool srv_buf_reserve(srv_buf *b, size_t extra);
bool srv_buf_add(srv_buf *b, const char *s, size_t n);
bool srv_buf_adds(srv_buf *b, const char *s);
bool srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);

/* Appends s[0..n) to b with every invalid UTF-8 sequence replaced by U+FFFD (one per maximal invalid
 * subpart, as the Unicode standard recommends). */
bool srv_buf_add_utf8_lossy(srv_buf *b, const char *s, size_t n);
/* Length of a valid UTF-8 sequence starting at s (1..4), 0 when invalid, -k when valid so far but k more
 * bytes are missing at the end of [s, s+n). */
int srv_utf8_seq(const unsigned char *s, size_t n);

/* ---- errors (util.c) ---- */
typedef struct srv_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL or "context_length_exceeded", ... */
    char param[96];   /* "" = null */
    char message[640];
    int retry_after; /* seconds, for 503; 0 = none */
} srv_error;
bool srv_fail(srv_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* {"error":{"message","type","param","code"}} as a malloc'd compact JSON string. */
char *srv_error_json(const srv_error *e);

/* ---- parsed request (request.c, request_chat.c) ---- */
typedef enum srv_kind { SRV_COMPLETIONS = 0, SRV_CHAT = 1 } srv_kind;

typedef struct srv_prompt {
    int32_t *ids; /* [n] malloc'd */
    int n;
    char *text;     /* the prompt as text (string prompts; NULL for id prompts), for echo */
    int max_tokens; /* the reply limit for this prompt (request's, or min(--max-tokens, context - n)) */
} srv_prompt;

typedef struct srv_request {
    srv_kind kind;
    srv_prompt *prompts; /* [n_prompts] */
    int n_prompts;
    int n;                  /* choices per prompt */
    weft_sampling sampling; /* seed unset here; logit_bias -> bias */
    bool seed_given;
    uint64_t seed;
    weft_logit_bias *bias;
    int n_bias;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    bool ignore_eos, stream, include_usage, echo, draft, return_token_ids;
    int logprobs;            /* -1: none; else number of top entries (0..20) */
    bool split_reasoning;    /* chat + template that thinks */
    bool start_in_reasoning; /* the rendered prompt ends inside an open <think> */
} srv_request;

/* Parses and validates body for kind; tokenizes prompts / renders chat. Every failure fills e (400 naming the
 * field, 404 model_not_found, 400 context_length_exceeded) and returns false; out is then freed. */
bool srv_parse_request(const weft_model_service *svc, const weft_server_config *cfg, srv_kind kind,
                       const char *body, size_t len, srv_request *out, srv_error *e);
void srv_request_free(srv_request *r);

/* request.c helpers used by request_chat.c */
bool srv_get_bool(json_t *o, const char *key, bool *out, srv_error *e);
bool srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given,
                 srv_error *e);
/* request_chat.c: messages → rendered prompt ids (one prompt). */
bool srv_parse_chat(const weft_model_service *svc, const weft_server_config *cfg, json_t *root,
                    srv_request *r, srv_error *e);

/* ---- text pipeline: UTF-8 reassembly, stop strings, reasoning split (stopstr.c) ---- */
typedef struct srv_textpipe {
    unsigned char tail[4]; /* incomplete UTF-8 sequence awaiting its next bytes */
    int n_tail;
    const char *const *stops;
    int n_stops;
    srv_buf held;           /* text held back because its end may begin a stop string */
    bool stopped;           /* a stop string matched: nothing more is released */
    bool split;             /* reasoning split on */
    int mode;               /* 0 start (may open <think>), 1 reasoning, 2 content */
    bool trim_ws;           /* drop leading whitespace of the current section */
    srv_buf held2;          /* text held back by the splitter (a possible marker prefix) */
    srv_buf scratch, clean; /* reused per feed (no allocation per token once warm) */
} srv_textpipe;

void srv_textpipe_init(srv_textpipe *tp, const char *const *stops, int n_stops, bool split,
                       bool start_in_reasoning);
/* Feeds bytes; appends released text to content / reasoning. Returns true when a stop string completed with
 * these bytes (the text ends right before it). After that, feeding does nothing. false on OOM too: check
 * *oom. */
bool srv_textpipe_feed(srv_textpipe *tp, const char *s, size_t n, srv_buf *content, srv_buf *reasoning,
                       bool *oom);
/* End of the reply: releases everything held (an incomplete UTF-8 tail becomes U+FFFD). */
bool srv_textpipe_finish(srv_textpipe *tp, srv_buf *content, srv_buf *reasoning);
void srv_textpipe_free(srv_textpipe *tp);

/* ---- metrics (metrics.c) ---- */
#define SRV_TTFT_BUCKETS 22
#define SRV_E2E_BUCKETS  21
typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests_by_status[9]; /* see k_codes in metrics.c */
    uint64_t finished[4];           /* stop length cancelled error */
    uint64_t prompt_tokens, generation_tokens, cached_tokens, disconnections;
    uint64_t drafted, accepted;
    bool drafts_counted;
    uint64_t ttft_counts[SRV_TTFT_BUCKETS + 1];
    double ttft_sum;
    uint64_t ttft_n;
    uint64_t e2e_counts[SRV_E2E_BUCKETS + 1];
    double e2e_sum;
    uint64_t e2e_n;
} srv_metrics;
void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_status(srv_metrics *m, int status);
void srv_metrics_disconnect(srv_metrics *m);
/* Sets every field of es to -1 (unknown), before svc->stats fills what it knows. */
void srv_engine_stats_unknown(weft_srv_engine_stats *es);
/* Prometheus text exposition into b. svc may be NULL (loading). */
bool srv_metrics_render(srv_metrics *m, const weft_model_service *svc, srv_buf *b);

/* ---- server ---- */
struct weft_server {
    weft_server_config cfg;
    unsigned char (*key_digests)[32]; /* SHA-256 of each API key */
    int n_keys;
    struct MHD_Daemon *daemon;
    int listen_fd;
    int port;
    weft_model_service svc;
    atomic_bool ready;
    atomic_bool stopping;   /* no new requests */
    atomic_bool cancelling; /* running requests must end now */
    atomic_int active;      /* requests from their headers until their reply was sent (or failed) */
    atomic_ullong next_id;
    uint64_t id_base;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when active drops */
    bool shut;
    srv_metrics metrics;
    atomic_int generating; /* completion/chat requests from their parse until their reply ended (live.c) */
    /* live status line (live.c): the thread waits on live_cv (monotonic clock) under mu */
    pthread_t live_thread;
    pthread_cond_t live_cv;
    bool live_running, live_quit;
    double live_interval;
};

/* One line to stderr, through cfg.console when set (so it never cuts the live status line). */
void srv_log(weft_server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- generation (gen.c) ---- */
typedef struct srv_gen srv_gen;

/* The stop-string hook's state: its own detokenizer and matcher, used only on the engine thread. */
typedef struct srv_stophook {
    const weft_model_service *svc;
    void *detok;
    srv_textpipe tp;
    srv_buf sink_c, sink_r; /* released text is not needed here */
    int n_fed;
    bool hit;
} srv_stophook;

typedef struct srv_choice {
    srv_gen *g;
    int index, prompt_index;
    uint64_t seed;
    void *handle;
    srv_stophook *hook;
    /* what the engine sent (request thread only) */
    int32_t *ids;       /* [cap] every token received */
    weft_logprobs *lps; /* [cap] when logprobs asked */
    int cap, n_recv;
    bool overflow;
    bool lp_missing; /* logprobs were asked but the engine sent none */
    bool prefilled, finished;
    int cached;
    weft_srv_end end;
    char msg[256];
    weft_srv_gen_stats stats;
    double t_first; /* weft_now() when the first token arrived, 0 before */
    /* consumer side */
    int n_seen; /* tokens moved through the text pipeline */
    bool prefill_seen;
    int n_counted;    /* tokens that count (up to and including the one completing a stop) */
    int *text_offset; /* [cap] characters (code points) of text before each counted token (logprobs) */
    size_t chars_at;  /* content bytes already counted in chars */
    int chars;        /* code points in content[0..chars_at) */
    void *detok;
    srv_textpipe tp;
    srv_buf content, reasoning;
    bool stop_hit;      /* a stop string matched */
    bool done;          /* finish_reason decided, text final */
    const char *finish; /* "stop" "length" "cancelled" "error" */
    /* streaming cursors */
    size_t sent_content, sent_reasoning;
    int sent_lp;
    bool sent_final;
} srv_choice;

struct srv_gen {
    weft_server *srv;
    const weft_model_service *svc;
    srv_request *req;
    srv_choice *ch;
    int n_ch;
    int rr; /* round-robin cursor: which job a blocking wait goes to */
    double t0;
    char rid[136];
    char id[160];
    int64_t created;
    bool started;            /* every choice was submitted */
    bool cancelled_shutdown; /* the server cancelled it for shutdown */
    bool client_gone;
    int fd; /* the client's socket, for peer checks */
    /* streaming */
    srv_buf out;
    size_t out_off;
    int phase; /* 0 role chunks due, 1 content, 2 tail written ([DONE] queued) */
    bool stream_error;
};

/* Builds the gen for r (takes no ownership of r; r must outlive the gen) and submits every choice. On failure
 * e says why (503/400/500). Either way the caller ends it with srv_gen_end. */
bool srv_gen_start(srv_gen *g, weft_server *srv, srv_request *r, const char *rid, int fd, srv_error *e);
/* Takes the engine's events (waiting up to timeout_s when there are none) and moves new tokens through each
 * choice's text pipeline. Returns true when something changed. */
bool srv_gen_pump(srv_gen *g, double timeout_s);
bool srv_gen_all_done(const srv_gen *g);
bool srv_gen_any_started(const srv_gen *g); /* any choice prefilled or produced tokens */
bool srv_gen_refused(const srv_gen *g);     /* every choice ended without running (REFUSED/CANCELLED) */
/* Checks the peer and shutdown; cancels jobs when needed. Returns true when the client is gone. */
bool srv_gen_watch(srv_gen *g);
void srv_gen_cancel_all(srv_gen *g);
/* Cancels what is still running, waits for every FINISHED, releases jobs, records metrics, frees. */
void srv_gen_end(srv_gen *g);
/* Usage numbers. */
void srv_gen_usage(const srv_gen *g, int *prompt, int *completion, int *cached);
const char *srv_gen_first_error(const srv_gen *g);

/* ---- JSON replies (response.c) ---- */
json_t *srv_usage_json(const srv_gen *g);
json_t *srv_weft_json(const srv_gen *g, int only_choice); /* only_choice < 0: whole request */
json_t *srv_logprobs_json(const srv_gen *g, const srv_choice *c, int from, int to, bool chat);
/* The non-streamed reply body (malloc'd). */
char *srv_reply_json(const srv_gen *g);
char *srv_models_json(const weft_model_service *svc);

/* ---- SSE (stream.c) ---- */
/* Appends every chunk that is due to g->out; sets phase 2 when [DONE] was written. */
bool srv_stream_emit(srv_gen *g);
/* Appends `data: <json>\n\n` (takes the json reference). */
bool srv_sse_json(srv_buf *out, json_t *j);
bool srv_sse_done(srv_buf *out);

/* ---- misc (http.c / util.c) ---- */
bool srv_peer_gone(int fd);
bool srv_json_string(json_t *o, const char *key, const char *s, size_t n); /* lossy UTF-8 */

#endif
