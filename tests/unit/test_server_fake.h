/* test_server_fake.h — a fake weft_model_service for the server tests.
 *
 * Tokenizer: id 0 = BOS, 1 = EOS (control: no text), 2..257 = the bytes 0..255, 258 = "<think>",
 * 259 = "</think>", 260..299 = unused (valid, no text). Multi-byte characters are therefore always split
 * across tokens.
 * Chat template: "<|role|>content\n" per message, then "<|assistant|>" (+ "<think>\n" when the template
 * thinks, unless enable_thinking is false). Two assistant messages in a row are a template error.
 * Engine: one thread running rounds every round_s seconds, `parallel` jobs at once, `max_queue` waiting.
 * The reply of a prompt whose text contains "SAY:" is the text after it (up to a newline, or the end), then
 * EOS; with ignore_eos the text repeats. Other prompts get letters drawn from (seed, position), EOS after 16.
 * Prompts containing "SLOW" take 20 ms per token; prompts containing "FAIL" end with an engine error after 3
 * tokens. Drafting (job.draft) commits up to 3 tokens per round. */
#ifndef TEST_SERVER_FAKE_H
#define TEST_SERVER_FAKE_H

#include "weft/server.h"

typedef struct fake_config {
    int parallel;       /* jobs running at once (2) */
    int max_queue;      /* jobs waiting beyond the running ones (8); more are refused with WEFT_EBUSY */
    double round_s;     /* seconds per round (0.001) */
    int context;        /* context_length (256) */
    bool has_tokenizer; /* true */
    bool has_template;  /* true */
    bool thinks;        /* false */
    bool add_bos;       /* true */
    bool honour_stop;   /* call the stop hook (true) */
    bool with_stats;    /* provide the stats op (true) */
    bool with_stop;     /* provide the stop op (true) */
} fake_config;

typedef struct fake_engine fake_engine;

void fake_config_default(fake_config *c);
fake_engine *fake_new(const fake_config *c);
/* Stops the engine thread: running jobs end CANCELLED, queued ones REFUSED. */
void fake_stop(fake_engine *f);
void fake_free(fake_engine *f);
/* The service bound to f. */
weft_model_service fake_service(fake_engine *f);

typedef struct fake_counts {
    int running, waiting, live; /* live: submitted and not yet released */
    int submitted, cancelled, finished, released;
    int max_running;
    int hook_stops;             /* jobs ended by the stop hook */
    double last_cancel_latency; /* seconds from cancel() to the job's FINISHED */
} fake_counts;
void fake_get_counts(fake_engine *f, fake_counts *out);

/* Encode text with the fake tokenizer (no BOS): ids written to out (cap entries), returns the count. */
int fake_encode(const char *text, int32_t *out, int cap);

#endif
