/* Loading the model named on the command line (or the embedded stories260K), with a progress bar on a TTY
 * while the weight pages are read in. */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/console.h"

extern const unsigned char weft_embedded_gguf[];
extern const uint64_t weft_embedded_gguf_len; /* bytes, set by the assembler (embedded_model.S) */

/* Touches every page of every tensor so that the first request does not pay for page faults; shows progress.
 * With a console (serve: its listener already answers, so access lines can arrive meanwhile) the bar is the
 * console's status line, which log lines never share a row with; else it is drawn straight on stderr. */
/* Whether a signal of stop is pending (blocked, not yet taken by sigwait). */
static bool stop_pending(const sigset_t *stop) {
    sigset_t pend;
    if (!stop || sigpending(&pend) != 0) return false;
    return (sigismember(&pend, SIGINT) == 1 && sigismember(stop, SIGINT) == 1) ||
           (sigismember(&pend, SIGTERM) == 1 && sigismember(stop, SIGTERM) == 1);
}

/* Returns false when stopped by a pending signal of stop (checked every 64 MiB). */
static bool prefault(const weft_model *m, weft_console *con, const sigset_t *stop) {
    bool tty = con ? weft_console_is_live(con) : weft_console_live_wanted(STDERR_FILENO);
    size_t total = m->weights_bytes, done = 0, next_draw = 0;
    volatile unsigned char sink = 0;
    bool stopped = false;
    for (size_t i = 0; i < weft_tensor_set_count(m->tensors) && !stopped; i++) {
        const weft_tensor *t = weft_tensor_set_at(m->tensors, i);
        for (size_t off = 0; off < t->nbytes && !stopped; off += 4096) {
            sink ^= t->data[off];
            if ((off & ((64u << 20) - 1)) == 0) stopped = stop_pending(stop);
        }
        done += t->nbytes;
        if (tty && total && (done >= next_draw || done == total)) {
            int pct = (int)(100.0 * (double)done / (double)total), w = pct / 4;
            char bar[64];
            snprintf(bar, sizeof bar, "loading weights [%.*s%*s] %3d%%", w, "#########################",
                     25 - w, "", pct);
            if (con) {
                int cols = weft_console_columns(con); /* a wrapped status cannot be redrawn in place */
                if (cols > 0 && (size_t)cols <= strlen(bar)) bar[cols - 1] = 0;
                weft_console_status(con, bar);
            } else {
                fprintf(stderr, "\r%s", bar);
            }
            next_draw = done + total / 50;
        }
    }
    (void)sink;
    if (tty && con)
        weft_console_status(con, ""); /* erased: the next status or log line starts on a clean row */
    else if (tty)
        fprintf(stderr, "\r\033[K");
    return !stopped && !stop_pending(stop);
}

int cli_load_model(const cli_options *o, weft_model **out) {
    return cli_load_model_on(o, out, NULL, NULL);
}

int cli_load_model_on(const cli_options *o, weft_model **out, weft_console *con, const sigset_t *stop) {
    weft_err err = {0};
    weft_status st;
    if (o->model)
        st = weft_model_load(o->model, out, &err);
    else
        st = weft_model_load_gguf_memory("stories260K", weft_embedded_gguf, (size_t)weft_embedded_gguf_len,
                                         out, &err);
    if (st) {
        fprintf(stderr, "weft: %s\n", err.msg);
        return 2;
    }
    if (!prefault(*out, con, stop)) {
        weft_model_free(*out);
        *out = NULL;
        return CLI_LOAD_STOPPED;
    }
    return 0;
}

int cli_threads(const cli_options *o) {
    if (o->threads > 0) return o->threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void cli_backend_note(const weft_backend_plan *plan) {
    if (plan->fallback[0]) fprintf(stderr, "weft: --backend auto: %s; running on the CPU\n", plan->fallback);
}

int cli_engine_start(weft_engine_config *ec, weft_backend *be, int rows, bool no_drafts,
                     weft_drafter *drafter, weft_engine **eng) {
    if (ec->max_draft > rows - 1) ec->max_draft = rows - 1;
    if (ec->max_model_draft > rows - 1) ec->max_model_draft = rows - 1;
    weft_err err = {0};
    if (!no_drafts) {
        weft_copy_drafter_config dc = {.max_slots = ec->parallel, .capacity = ec->capacity};
        if (weft_copy_drafter_new(&dc, drafter, &err)) {
            fprintf(stderr, "weft: %s\n", err.msg);
            return 2;
        }
        ec->drafter = drafter;
    }
    if (weft_engine_new(ec, be, eng, &err) || weft_engine_start(*eng, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        return 2;
    }
    return 0;
}

void cli_sampling(const cli_options *o, const weft_model *m, weft_sampling *s) {
    weft_sampling_defaults(s);
    const weft_config *c = m ? &m->cfg : NULL;
    if (c && c->has_temperature) s->temperature = c->temperature;
    if (c && c->has_top_p) s->top_p = c->top_p;
    if (c && c->has_top_k) s->top_k = c->top_k;
    if (c && c->has_min_p) s->min_p = c->min_p;
    if (o->has_temperature) s->temperature = o->temperature;
    if (o->has_top_p) s->top_p = o->top_p;
    if (o->has_top_k) s->top_k = o->top_k;
    if (o->has_min_p) s->min_p = o->min_p;
}

int cli_sampling_flags_ok(const cli_options *o) {
    weft_sampling s;
    cli_sampling(o, NULL, &s);
    weft_err err = {0};
    if (weft_sampling_validate(&s, 0, &err) == WEFT_OK) return 0;
    fprintf(stderr, "weft: --temperature / --top-p / --top-k / --min-p: %s\n", err.msg);
    return 2;
}
