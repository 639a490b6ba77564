/* weft/server.h — the OpenAI-compatible HTTP server (SPEC §3) and the "model service" it calls.
 *
 * The server knows nothing of lanes, tokenizers or templates: it calls a weft_model_service, a struct of
 * function pointers plus a context that the binary wires to the real components (src/server/service_*.c).
 * Tests wire it to a fake.
 *
 * Threading: libmicrohttpd, one thread per connection. A request's thread parses, validates, submits one
 * engine job per choice and then reads each job's events (next_event, the engine's per-request mailbox).
 * Streaming writes SSE from the same thread. Every wait wakes at least every 50 ms to notice a client that
 * went away (then it cancels its jobs) or a shutdown.
 *
 * Lifetimes: weft_server_create → weft_server_start → weft_server_attach (ready; /health 200) →
 * weft_server_shutdown (blocks until every request ended) → weft_server_destroy. */
#ifndef WEFT_SERVER_H
#define WEFT_SERVER_H

#include <stdio.h>
#include "weft/common.h"
#include "weft/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- engine events (read by the request thread with next_event) ------------------------------------- */

typedef enum weft_srv_event_kind {
    WEFT_SRV_EV_NONE = 0,      /* timeout: nothing new */
    WEFT_SRV_EV_PREFILLED = 1, /* the prompt is in the caches; cached_tokens set. At most once, first. */
    WEFT_SRV_EV_TOKENS = 2,    /* committed tokens, in order (the EOS token included when one ends it) */
    WEFT_SRV_EV_FINISHED = 3,  /* last event; later next_event calls may return FINISHED again */
} weft_srv_event_kind;

typedef enum weft_srv_end {
    WEFT_SRV_END_NONE = 0,
    WEFT_SRV_END_STOP = 1,      /* an EOS token (sent in TOKENS) or the stop hook ended it */
    WEFT_SRV_END_LENGTH = 2,    /* max_tokens reached */
    WEFT_SRV_END_CANCELLED = 3, /* cancel was called, or the engine stopped a running job */
    WEFT_SRV_END_ERROR = 4,     /* the job failed; message says why */
    WEFT_SRV_END_REFUSED = 5,   /* never ran (queued when the engine stopped, or no slot): 503 */
} weft_srv_end;

/* Per-job statistics, reported with FINISHED. Unknown values are -1. */
typedef struct weft_srv_gen_stats {
    int64_t rounds;   /* forward rounds this job took part in (prefill chunks + decode rounds) */
    int64_t drafted;  /* draft tokens proposed for this job */
    int64_t accepted; /* draft tokens kept */
    double prefill_s; /* seconds spent prefilling this job's prompt */
    double decode_s;  /* seconds from the first generated token to the end */
} weft_srv_gen_stats;

typedef struct weft_srv_event {
    weft_srv_event_kind kind;
    int cached_tokens;             /* PREFILLED: prompt tokens resumed from the prompt cache */
    const int32_t *ids;            /* TOKENS: [n_ids] token ids */
    int n_ids;                     /* TOKENS: >= 1 */
    const weft_logprobs *logprobs; /* TOKENS: [n_ids] when the job asked for logprobs (>= 0), else NULL */
    weft_srv_end end;              /* FINISHED */
    const char *message;           /* FINISHED with ERROR/REFUSED/CANCELLED: one line, or NULL */
    weft_srv_gen_stats stats;      /* FINISHED */
} weft_srv_event;

/* The server's stop-string hook (same shape as weft_stop_fn in weft/lanes.h): called by the engine on its
 * thread after each committed token, generated[0..n_generated) being every generated token so far (newest
 * last). Returns 1 to end the job at this token with WEFT_SRV_END_STOP, else 0. Never blocks. */
typedef int (*weft_srv_stop_fn)(void *ctx, const int32_t *generated, int n_generated);

/* One engine job = one choice of one request. Every pointer stays valid until release(handle). */
typedef struct weft_srv_job {
    const int32_t *prompt;  /* [n_prompt] token ids, each in [0, vocab_size) */
    int n_prompt;           /* >= 1; n_prompt + max_tokens <= context_length (the server checked) */
    weft_sampling sampling; /* seed is the effective seed (SPEC §5.3; + choice index for n > 1);
                               logit_bias points into the request */
    int max_tokens;         /* >= 1: the engine ends the job with LENGTH after this many tokens */
    bool ignore_eos;        /* true: an EOS draw does not end the job */
    bool draft;             /* false: serial reference decoding (no drafts) */
    weft_srv_stop_fn stop;  /* NULL, or the stop-string hook; a service may ignore it (the server then
                               cancels the job itself when a stop string completes, one round later) */
    void *stop_ctx;         /* for stop; valid until release */
    int choice;             /* choice index within the request (logs only) */
    const char *request_id; /* X-Request-Id (logs only) */
} weft_srv_job;

/* Engine gauges read by /metrics. Unknown values are -1: the metric is then omitted, never a fake 0. */
typedef struct weft_srv_engine_stats {
    int64_t requests_running;     /* jobs admitted to rounds */
    int64_t requests_waiting;     /* jobs queued */
    double kv_cache_usage;        /* fraction 0..1 of KV capacity in use */
    int64_t device_memory_bytes;  /* bytes used on the device (or host for CPU) by weights + caches */
    int64_t prefix_cache_queries; /* prompt tokens looked up in the prompt cache, total */
    int64_t prefix_cache_hits;    /* of those, tokens resumed from it, total */
    int64_t prompt_cache_bytes;   /* bytes the prompt cache holds now (never above its budget) */
    int64_t prompt_cache_budget;  /* its budget (--prompt-cache-gib); 0 when off */
    int64_t parallel;             /* streams served at once (--parallel) */
    /* Running totals since start, advanced after every round (not only when a request ends), so that a
     * difference over a few hundred milliseconds is a throughput. */
    int64_t prompt_tokens_total; /* prompt tokens prefilled (tokens resumed from the prompt cache excluded) */
    int64_t generation_tokens_total; /* generated tokens committed */
    int64_t drafted_total;           /* draft tokens proposed */
    int64_t accepted_total;          /* of those, kept */
} weft_srv_engine_stats;

/* ---- the model service ----------------------------------------------------------------------------- */

/* Everything the server needs from a loaded model. Fields are read-only after weft_server_attach. Every
 * function may be called from many request threads at once (they must be thread-safe); ctx is passed back
 * as the first argument. Strings are UTF-8. Memory returned through `**out` is malloc'd; the server free()s.
 */
typedef struct weft_model_service {
    void *ctx;
    const char *model_id;       /* served id (--name) */
    const char *const *aliases; /* [n_aliases] extra ids accepted in "model" (--alias) */
    int n_aliases;
    int64_t created;        /* unix seconds, shown in /v1/models */
    int context_length;     /* tokens per stream (prompt + reply), --context */
    int vocab_size;         /* token ids are in [0, vocab_size) */
    bool has_tokenizer;     /* false: token-id prompts only; replies carry weft.token_ids, empty text */
    bool has_chat_template; /* false: /v1/chat/completions answers 400 */
    bool add_bos;           /* the tokenizer prepends BOS with add_special (an empty prompt is then valid) */
    bool thinks;            /* the chat template uses <think>...</think>: split reasoning_content */
    int max_streams;        /* jobs the engine can ever hold at once, running + queued (--parallel +
                               --max-queue): a request needing more choices gets 400 naming `n`; 0 = unknown */

    /* Text → ids. add_special: BOS/EOS as the tokenizer's post-processor adds them; parse_special: special
     * token text ("<|im_end|>") becomes its id. *ids malloc'd ([*n_ids], may be 0 long). WEFT_EINVAL with a
     * message on failure. Required when has_tokenizer. */
    weft_status (*tokenize)(void *ctx, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t **ids, int *n_ids, weft_err *err);

    /* Incremental detokenizer. detok_new gets the prompt (context for decoders that strip or merge at the
     * start, e.g. SentencePiece's leading space); detok_feed returns the bytes token `id` adds to the text
     * (possibly 0 bytes, possibly an incomplete UTF-8 sequence that a later token completes — the server
     * reassembles characters) in a buffer owned by the detokenizer, valid until the next call. Control tokens
     * (BOS, EOS, pad) give 0 bytes; <think> and </think> give their text. Required when has_tokenizer. */
    void *(*detok_new)(void *ctx, const int32_t *prompt, int n_prompt);
    const char *(*detok_feed)(void *ctx, void *detok, int32_t id, size_t *len);
    void (*detok_free)(void *ctx, void *detok);
    /* End of the reply: bytes the detokenizer still held (an incomplete character as U+FFFD). Optional. */
    const char *(*detok_flush)(void *ctx, void *detok, size_t *len);

    /* The raw bytes of one token's piece, for logprobs ("token", "bytes"). Buffer owned by the service,
     * valid until the service is destroyed. Optional (NULL: the server uses a fresh detokenizer). */
    const char *(*token_piece)(void *ctx, int32_t id, size_t *len);

    /* Chat template. messages_json: a JSON array of {"role","content":string,...} (content already
     * flattened); kwargs_json: a JSON object of template variables (enable_thinking, reasoning_effort, ...).
     * *text malloc'd. A template error (raise_exception, unsupported role order) is WEFT_EINVAL with the
     * template's message: the server answers 400 with it. Required when has_chat_template. */
    weft_status (*render_chat)(void *ctx, const char *messages_json, const char *kwargs_json,
                               bool add_generation_prompt, char **text, weft_err *err);

    /* Submit one job. On WEFT_OK, *handle identifies it; next_event then yields PREFILLED?, TOKENS*,
     * FINISHED. Errors: WEFT_EBUSY (queue full: 503 server_busy), WEFT_ECANCELLED (engine stopping: 503),
     * WEFT_EINVAL or WEFT_ERANGE (400 with the message), anything else 500. */
    weft_status (*submit)(void *ctx, const weft_srv_job *job, void **handle, weft_err *err);
    /* Waits up to timeout_s seconds (0: poll) for the job's next event. Returns false on timeout (ev->kind
     * NONE). Pointers in ev stay valid until the next next_event call on this handle or release. Only the
     * request's own thread reads a handle. */
    bool (*next_event)(void *ctx, void *handle, weft_srv_event *ev, double timeout_s);
    /* Ask the job to end (between rounds / prefill chunks): FINISHED follows (CANCELLED, or the job's own end
     * if it finished first). Idempotent; a no-op once finished; safe until release. */
    void (*cancel)(void *ctx, void *handle);
    /* Free the job. Called once per handle, only after its FINISHED event was delivered. */
    void (*release)(void *ctx, void *handle);
    /* Stop the engine for shutdown (weft_engine_stop): running jobs end CANCELLED after their current round,
     * queued ones REFUSED, later submits fail. Blocks until that is done; next_event keeps working on live
     * handles. Optional (NULL: the server cancels every job itself, and a queued job may then start before
     * its cancel lands). */
    void (*stop)(void *ctx);
    /* Fill the engine gauges (unknown = -1). Optional (NULL: those metrics are omitted). */
    void (*stats)(void *ctx, weft_srv_engine_stats *out);
} weft_model_service;

/* ---- server ---------------------------------------------------------------------------------------- */

typedef enum weft_log_format { WEFT_LOG_NONE = 0, WEFT_LOG_TEXT = 1, WEFT_LOG_JSON = 2 } weft_log_format;

struct weft_console; /* weft/console.h */

/* Server settings (SPEC §2.1). Strings and arrays are borrowed; they must outlive the server. */
typedef struct weft_server_config {
    const char *host;            /* "127.0.0.1"; "0.0.0.0" / "::" for all interfaces */
    int port;                    /* 8080; 0 = an ephemeral port (see weft_server_port) */
    const char *const *api_keys; /* [n_api_keys]; none = every route open */
    int n_api_keys;
    bool metrics_open;            /* --metrics-open: /metrics without a key */
    size_t max_body_bytes;        /* request body limit, 32 MiB; larger → 413 */
    int max_connections;          /* concurrent connections accepted (threads), 1024 */
    int idle_timeout_s;           /* a keep-alive connection idle this long is closed, 120 (0 = never) */
    int max_tokens;               /* --max-tokens 4096: reply limit when a request omits max_tokens */
    weft_sampling defaults;       /* --temperature/--top-p/--top-k/--min-p defaults; seed/logprobs ignored */
    const char *seed_salt;        /* --seed-salt, "0" */
    int thinking;                 /* enable_thinking when a request omits it: 1 --thinking, 0 --no-thinking,
                                     -1 (default) the template's own default (not passed) */
    bool drafts;                  /* false with --no-drafts */
    weft_log_format log_format;   /* access log: one line per request */
    FILE *log;                    /* where access lines go (NULL = stderr, or `console` when set) */
    struct weft_console *console; /* NULL, or the console every stderr line of the server goes through (access
                                     lines when `log` is NULL, libmicrohttpd and shutdown messages); it
                                     carries the live status line (weft_server_live_start). Borrowed: it
                                     must outlive the server. */
} weft_server_config;

typedef struct weft_server weft_server;

/* Fills cfg with the defaults above. */
void weft_server_config_default(weft_server_config *cfg);

/* Allocates a server (nothing listens yet). Errors: WEFT_EINVAL (bad config), WEFT_ENOMEM. */
weft_status weft_server_create(const weft_server_config *cfg, weft_server **out, weft_err *err);

/* Binds host:port and starts serving. Until weft_server_attach, /health answers 503 {"status":"loading"}
 * and model routes 503. Errors: WEFT_EIO (bind/listen failed, message names host:port and errno). */
weft_status weft_server_start(weft_server *srv, weft_err *err);

/* The bound TCP port (useful with port 0), or 0 before start. */
int weft_server_port(const weft_server *srv);

/* Makes svc the served model (copied; svc->ctx and its strings must outlive the server) and marks the
 * server ready. Call once, after loading. Errors: WEFT_EINVAL (a required function missing). */
weft_status weft_server_attach(weft_server *srv, const weft_model_service *svc, weft_err *err);

/* Replaces the sampling defaults (cfg.defaults) once the model's generation_config.json is known. Call before
 * weft_server_attach (attach publishes it to the request threads). */
void weft_server_set_defaults(weft_server *srv, const weft_sampling *defaults);

/* Graceful shutdown (SPEC §3): stop accepting; requests get up to grace_s seconds to finish; then running
 * streams end after their current round with finish_reason "cancelled", an error event and [DONE]; running
 * non-streamed requests return 200 with the text so far and "cancelled"; queued ones get 503. Returns when
 * every request has ended and the listener is closed. Safe to call once, from any non-request thread
 * (e.g. main after SIGTERM). The engine is still needed during the call; stop it afterwards. */
void weft_server_shutdown(weft_server *srv, double grace_s);

/* Frees the server (calls weft_server_live_stop and weft_server_shutdown(srv, 0) first if needed). NULL is a
 * no-op. */
void weft_server_destroy(weft_server *srv);

/* ---- live status line (SPEC §2.1) ------------------------------------------------------------------ */

/* One reading for the status line. */
typedef struct weft_live_sample {
    double t;         /* weft_now() seconds when it was taken */
    int64_t requests; /* completion/chat requests in flight (parsed, reply not yet ended); -1 unknown */
    weft_srv_engine_stats es; /* the engine's gauges and totals then (unknown = -1) */
} weft_live_sample;

/* Formats the status line from the reading `cur` and the one before it (`prev`, NULL for none), e.g.
 *   req 3 queued 1 | streams 2/4 | decode 812.3 tok/s | prefill 4.1k tok/s | KV 12.5% | cache hit 1.2k/3.4k
 *   tok | drafts 96/120 80%
 * req: requests in flight, queued: engine jobs waiting for a stream; streams: jobs running / --parallel;
 * decode / prefill: generated / prefilled tokens per second between prev and cur ("-" without prev or time
 * between them); KV: kv_cache_usage in percent; cache hit: prompt tokens resumed from the prompt cache /
 * prompt tokens looked up, since start (shown while the cache is on); drafts: draft tokens accepted /
 * proposed since start, with the acceptance rate. A field whose value is unknown (-1) is left out. Counts of
 * 10000 and more and rates of 1000 and more are written with a k or M suffix (one decimal).
 * columns > 0: the line is kept to columns - 1 characters (a wrapped line cannot be redrawn in place) by
 * leaving out whole fields from the end; the first field is cut if even it does not fit. Plain ASCII, no
 * control characters. Writes at most cap - 1 bytes and a NUL (cap >= 1); returns the length written. */
size_t weft_live_format(char *buf, size_t cap, const weft_live_sample *prev, const weft_live_sample *cur,
                        int columns);

/* Starts the live status line: when cfg.console is set and live (weft_console_live_wanted), a thread
 * redraws it every interval_s seconds (> 0; 0.5 in `weft serve`) from the service's stats (svc->stats) and
 * the server's requests in flight; log lines written through the console meanwhile stay whole. Call after
 * weft_server_attach. Returns WEFT_OK without starting anything when there is no live console or it already
 * runs. Errors: WEFT_EINVAL (interval_s), WEFT_EINTERNAL (the thread could not be created). */
weft_status weft_server_live_start(weft_server *srv, double interval_s, weft_err *err);

/* Stops the status thread (within a few milliseconds) and finishes the console's status line: the last
 * status drawn stays and gets its newline. Idempotent; a no-op when it never started. */
void weft_server_live_stop(weft_server *srv);

/* ---- the real service: lane engine + tokenizer + chat template (src/server/service_lanes.c) ------------ */

struct weft_engine;
struct weft_tokenizer;

typedef struct weft_service_config {
    const char *model_id;       /* --name */
    const char *const *aliases; /* --alias (borrowed) */
    int n_aliases;
    int64_t created;    /* unix seconds (0: now) */
    int context_length; /* --context: positions per stream (the engine's capacity) */
    int vocab_size;     /* the model's token ids are [0, vocab_size) (config vocab_size) */
    const struct weft_tokenizer *tokenizer; /* NULL: token-id prompts only */
    const char *chat_template;       /* Jinja source (--chat-template file or the model's); NULL: no chat */
    const char *bos_text, *eos_text; /* special-token strings the template may print, or NULL */
    struct weft_engine *engine;      /* a started lane engine (weft/lanes.h); borrowed */
} weft_service_config;

typedef struct weft_service weft_service;

/* Builds the service over a lane engine: compiles the chat template (once; WEFT_EFORMAT with its line on a
 * syntax error), probes whether it thinks, and fills *svc with functions bound to *out. Everything in cfg
 * must outlive the service. weft_service_free after weft_server_destroy; the engine is freed after that. */
weft_status weft_service_new(const weft_service_config *cfg, weft_service **out, weft_model_service *svc,
                             weft_err *err);
void weft_service_free(weft_service *s);

#ifdef __cplusplus
}
#endif
#endif
