/* weft serve: the OpenAI-compatible server (SPEC §2.1, §3). The listener starts first (so /health answers 503
 * while the weights load), then the model, backend, lane engine and service are attached. SIGINT/SIGTERM are
 * taken by sigwait on the main thread: stop accepting, let running requests finish for --shutdown-grace
 * seconds, cancel the rest, free everything, exit 0. */
#include "load.h"
#include "weft/console.h"
#include "weft/lanes.h"
#include "weft/safetensors.h"
#include "weft/server.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEYS        64
#define LIVE_INTERVAL_S 0.5 /* redraw period of the live status line */

typedef struct keyring {
    const char *keys[MAX_KEYS]; /* trimmed views into owned[] */
    int n;
    char *owned[MAX_KEYS + 1]; /* allocations (one per key, plus the WEFT_API_KEY copy) */
    int n_owned;
    bool asked; /* some option or WEFT_API_KEY asked for keys: then an empty set is an error, never "open" */
} keyring;

/* Adds the trimmed key held in s (inside an allocation already owned by k). */
static int add_key(keyring *k, char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) s[--n] = 0;
    if (!n) return 0;
    if (k->n >= MAX_KEYS) {
        fprintf(stderr, "weft: more than %d API keys\n", MAX_KEYS);
        return 2;
    }
    k->keys[k->n++] = s;
    return 0;
}

static char *own(keyring *k, const char *s) {
    if (k->n_owned >= MAX_KEYS + 1) return NULL;
    char *d = strdup(s);
    if (d) k->owned[k->n_owned++] = d;
    return d;
}

/* --api-key (repeatable), WEFT_API_KEY (comma separated), --api-key-file (one per line, mode 0600). Asking
 * for keys and ending up with none (empty strings, blank lines) is refused: it must never open the server. */
static int collect_keys(const cli_options *o, keyring *k) {
    for (int i = 0; i < o->n_api_keys; i++) {
        k->asked = true;
        char *c = own(k, o->api_keys[i]);
        if (!c || add_key(k, c)) return 2;
    }
    const char *env = getenv("WEFT_API_KEY");
    if (env && *env) {
        k->asked = true;
        char *copy = own(k, env), *save = NULL;
        if (!copy) return 2;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (add_key(k, t)) return 2;
    }
    if (o->api_key_file) {
        k->asked = true;
        struct stat sb;
        if (stat(o->api_key_file, &sb) != 0) {
            fprintf(stderr, "weft: --api-key-file %s: %s\n", o->api_key_file, strerror(errno));
            return 2;
        }
        if (!S_ISREG(sb.st_mode)) {
            fprintf(stderr, "weft: --api-key-file %s is not a regular file\n", o->api_key_file);
            return 2;
        }
        if (sb.st_mode & 077) {
            fprintf(stderr, "weft: --api-key-file %s is readable by others (mode %03o); chmod 600 it\n",
                    o->api_key_file, (unsigned)(sb.st_mode & 0777));
            return 2;
        }
        FILE *f = fopen(o->api_key_file, "r");
        if (!f) {
            fprintf(stderr, "weft: --api-key-file %s: %s\n", o->api_key_file, strerror(errno));
            return 2;
        }
        char line[4096];
        int rc = 0;
        while (!rc && fgets(line, sizeof line, f)) {
            char *t = line;
            while (*t == ' ' || *t == '\t') t++;
            if (*t == '#' || *t == '\n' || *t == '\r' || !*t) continue; /* comments and blank lines */
            char *c = own(k, t);
            if (!c) {
                fprintf(stderr, "weft: --api-key-file %s: more than %d keys\n", o->api_key_file, MAX_KEYS);
                rc = 2;
            } else {
                rc = add_key(k, c);
            }
        }
        fclose(f);
        if (rc) return rc;
    }
    if (k->asked && k->n == 0) {
        fprintf(stderr,
                "weft: API keys were asked for (--api-key, WEFT_API_KEY or --api-key-file) but all are "
                "empty: refusing to serve without authentication\n");
        return 2;
    }
    return 0;
}

int cmd_serve(const cli_options *o) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread started from here on inherits the mask */
    signal(SIGPIPE, SIG_IGN);

    if (o->has_prompt_cache_gib && !(o->prompt_cache_gib >= 0 && o->prompt_cache_gib < 1e6)) {
        fprintf(stderr, "weft: --prompt-cache-gib must be in [0, 1000000), got %g\n", o->prompt_cache_gib);
        return 2;
    }
    if (!(o->shutdown_grace >= 0 && o->shutdown_grace < 1e6)) {
        fprintf(stderr, "weft: --shutdown-grace must be in [0, 1000000) seconds, got %g\n",
                o->shutdown_grace);
        return 2;
    }
    if (strcmp(o->log_format, "text") && strcmp(o->log_format, "json")) {
        fprintf(stderr, "weft: --log-format must be text or json, got '%s'\n", o->log_format);
        return 2;
    }
    if (cli_sampling_flags_ok(o)) return 2; /* before anything is loaded: a bad default fails every request */
    if (o->name && !*o->name) {
        fprintf(stderr, "weft: --name must not be empty\n");
        return 2;
    }
    for (int i = 0; i < o->n_aliases; i++)
        if (!*o->aliases[i]) {
            fprintf(stderr, "weft: --alias must not be empty\n");
            return 2;
        }
    int rc = 0;
    keyring keys = {0};
    weft_server *srv = NULL;
    weft_model *m = NULL;
    weft_backend be = {0};
    weft_drafter drafter = {0};
    weft_engine *eng = NULL;
    weft_service *svc = NULL;
    char *template_src = NULL;
    weft_err err = {0};
    /* Every stderr line of the running server goes through one console: on a TTY (and without
     * WEFT_NO_LIVE) it also carries the live status line, which log lines never cut. */
    weft_console con;
    weft_console_init(&con, stderr, weft_console_live_wanted(STDERR_FILENO));
    if (collect_keys(o, &keys)) {
        rc = 2;
        goto out;
    }

    weft_server_config sc;
    weft_server_config_default(&sc);
    sc.host = o->host;
    sc.port = o->port;
    sc.api_keys = keys.keys;
    sc.n_api_keys = keys.n;
    sc.metrics_open = o->metrics_open;
    if (o->max_tokens > 0) sc.max_tokens = o->max_tokens;
    sc.seed_salt = o->seed_salt;
    sc.thinking = o->thinking ? 1 : o->no_thinking ? 0 : -1;
    sc.drafts = !o->no_drafts;
    sc.log_format = !strcmp(o->log_format, "json") ? WEFT_LOG_JSON : WEFT_LOG_TEXT;
    sc.console = &con;
    if (weft_server_create(&sc, &srv, &err) || weft_server_start(srv, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    rc = cli_load_model_on(o, &m, &con, &sigs); /* the bar shares the console with access lines */
    if (rc == CLI_LOAD_STOPPED) { /* SIGINT/SIGTERM while the weights were read in: stop there */
        int sig = 0;
        sigwait(&sigs, &sig);
        weft_console_printf(&con, "weft: %s received while loading, shutting down",
                            sig == SIGINT ? "SIGINT" : "SIGTERM");
        rc = 0;
        goto out;
    }
    if (rc) goto out;
    cli_sampling(o, m, &sc.defaults); /* generation_config.json, then the flags */
    if (weft_sampling_validate(&sc.defaults, m->cfg.vocab_size, &err)) {
        fprintf(stderr, "weft: the model's sampling defaults (generation_config.json) are invalid: %s\n",
                err.msg);
        rc = 2;
        goto out;
    }
    weft_server_set_defaults(srv, &sc.defaults);

    int parallel = 0;
    if (o->parallel && strcmp(o->parallel, "auto")) {
        char *end;
        long v = strtol(o->parallel, &end, 10);
        if (*end || v < 1 || v > 1024) {
            fprintf(stderr, "weft: --parallel expects a count of streams or auto, got '%s'\n", o->parallel);
            rc = 2;
            goto out;
        }
        parallel = (int)v;
    }
    /* a round's row budget (prefill chunks, decode rows, drafted windows): --chunk, at most the context */
    const int ctx_cap = o->context > 0 ? o->context : weft_model_context(m);
    int rows = o->chunk > 0 ? o->chunk : 256;
    if (ctx_cap > 0 && rows > ctx_cap) rows = ctx_cap;
    weft_backend_opts bo = {o->backend, cli_threads(o), parallel, rows,
                            o->context, o->activations, o->device};
    weft_backend_plan plan;
    if (weft_model_backend_plan(m, &bo, &be, &plan, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    cli_backend_note(&plan);
    /* Prompt cache: --prompt-cache-gib, default a quarter of what is left after weights and streams, <= 16
     * GiB */
    size_t left = plan.available_bytes > (size_t)plan.slots * plan.stream_bytes
                      ? plan.available_bytes - (size_t)plan.slots * plan.stream_bytes
                      : 0;
    size_t cache_bytes = o->has_prompt_cache_gib ? (size_t)(o->prompt_cache_gib * 1073741824.0) : left / 4;
    if (!o->has_prompt_cache_gib && cache_bytes > ((size_t)16 << 30)) cache_bytes = (size_t)16 << 30;
    if (o->has_prompt_cache_gib &&
        cache_bytes > left) { /* the budget would only ever fail later, mid-serving */
        fprintf(
            stderr,
            "weft: --prompt-cache-gib %g is more than the %.2f GiB left after the weights and %d streams' "
            "caches\n",
            o->prompt_cache_gib, (double)left / 1073741824.0, plan.slots);
        rc = 2;
        goto out;
    }
    weft_engine_config ec = {.parallel = plan.slots,
                             .max_queue = o->max_queue,
                             .capacity = plan.context,
                             .eos_ids = m->cfg.eos_token_ids,
                             .n_eos = m->cfg.n_eos,
                             .max_draft = o->no_drafts ? 0 : 8,
                             .prompt_cache_bytes = cache_bytes,
                             /* --mtp-drafts: auto = the head's own depth, 0 = never use the head, N = cap */
                             .max_model_draft = o->mtp_drafts < 0    ? 0
                                                : o->mtp_drafts == 0 ? -1
                                                                     : o->mtp_drafts};
    if (ec.max_model_draft > ec.max_draft && !o->no_drafts) ec.max_draft = ec.max_model_draft;
    rc = cli_engine_start(&ec, &be, rows, o->no_drafts, &drafter, &eng);
    if (rc) goto out;
    if (o->chat_template) {
        if (weft_read_file(o->chat_template, &template_src, NULL, &err)) {
            fprintf(stderr, "weft: --chat-template %s\n", err.msg);
            rc = 2;
            goto out;
        }
    }
    weft_service_config vc = {.model_id = o->name ? o->name : m->id,
                              .aliases = o->aliases,
                              .n_aliases = o->n_aliases,
                              .created = (int64_t)time(NULL),
                              .context_length = plan.context,
                              .vocab_size = (int)m->cfg.vocab_size,
                              .tokenizer = m->tokenizer,
                              .chat_template = template_src ? template_src : m->chat_template,
                              .bos_text = m->bos_text,
                              .eos_text = m->eos_text,
                              .engine = eng};
    weft_model_service ms;
    if (weft_service_new(&vc, &svc, &ms, &err) || weft_server_attach(srv, &ms, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    /* The draft source the engine really uses: the model's MTP head when the backend has one and
     * --mtp-drafts allows it (the copy drafter then fills in when the head has nothing), else copy. */
    const bool drafting = !o->no_drafts && ec.max_draft > 0; /* --chunk 1 leaves no room for a draft */
    bool mtp = drafting && be.ops->draft && ec.max_model_draft >= 0;
    const char *drafts = !drafting ? "off" : mtp ? "mtp head + copy" : "copy";
    weft_console_printf(
        &con,
        "weft: serving %s on http://%s:%d (%s, %d streams x %d positions, %.1f MiB state each, "
        "prompt cache %.1f MiB, drafts %s)",
        vc.model_id, o->host, weft_server_port(srv), be.ops->name ? be.ops->name : "?", plan.slots,
        plan.context, (double)plan.stream_bytes / 1048576.0, (double)cache_bytes / 1048576.0, drafts);
    if (weft_server_live_start(srv, LIVE_INTERVAL_S, &err)) /* the server runs without it */
        weft_console_printf(&con, "weft: %s", err.msg);
    int sig = 0;
    sigwait(&sigs, &sig);
    weft_console_printf(&con, "weft: %s received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    weft_server_shutdown(srv, o->shutdown_grace);
    weft_server_live_stop(srv); /* the final status line, then its newline */
out:
    if (eng) weft_engine_stop(eng);
    weft_server_destroy(srv);
    weft_service_free(svc);
    weft_engine_free(eng);
    weft_drafter_free(&drafter);
    if (be.ops) be.ops->destroy(be.self);
    weft_model_free(m);
    free(template_src);
    for (int i = 0; i < keys.n_owned; i++) free(keys.owned[i]);
    weft_console_destroy(&con);
    return rc;
}
