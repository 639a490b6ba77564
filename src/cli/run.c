/* weft run: one completion without a server (SPEC §2.3). The request goes through the same lane core and
 * backend as the server, so `run` and `serve` give the same tokens for the same request. */
#include "load.h"
#include "weft/lanes.h"
#include "weft/template.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parses "1,2,3" into ids (malloc'd). */
static int parse_ids(const char *s, int64_t vocab, int32_t **ids, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    const char *p = s;
    if (!v) return 2;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x >= vocab) {
            fprintf(stderr, "weft: --tokens: '%s' is not a token id in [0, %lld)\n", p, (long long)vocab);
            free(v);
            return 2;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return 2;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') { /* one separator, then an id: "1,,2" and "1,2," name the empty element */
            p++;
            while (*p == ' ') p++;
            if (!*p || *p == ',') {
                fprintf(stderr, "weft: --tokens: empty token id in '%s'\n", s);
                free(v);
                return 2;
            }
        }
    }
    *ids = v;
    *n = k;
    return 0;
}

/* Renders a single user message with the model's chat template (or --chat-template). */
static int render_chat(const cli_options *o, const weft_model *m, char **text, size_t *len) {
    char *src = NULL;
    size_t slen = 0;
    if (o->chat_template) {
        weft_err rerr = {0};
        if (weft_read_file(o->chat_template, &src, &slen, &rerr)) {
            fprintf(stderr, "weft: --chat-template %s\n", rerr.msg);
            return 2;
        }
    } else if (m->chat_template) {
        src = strdup(m->chat_template);
        slen = strlen(src);
    } else {
        fprintf(stderr, "weft: %s has no chat template (use --prompt, or give --chat-template FILE)\n",
                m->path);
        return 2;
    }
    weft_err err = {0};
    weft_template *t = NULL;
    int rc = 0;
    if (weft_template_compile(src, slen, &t, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        free(src);
        return 2;
    }
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", o->chat);
    json_t *kw = json_object();
    if (o->thinking) json_object_set_new(kw, "enable_thinking", json_true());
    if (o->no_thinking) json_object_set_new(kw, "enable_thinking", json_false());
    weft_chat_params cp = {msgs, NULL, true, m->bos_text, m->eos_text, kw};
    if (weft_template_render_chat(t, &cp, NULL, text, len, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
    }
    json_decref(msgs);
    json_decref(kw);
    weft_template_free(t);
    free(src);
    return rc;
}

static int prompt_ids(const cli_options *o, const weft_model *m, int32_t **ids, int *n) {
    int given = (o->prompt != NULL) + (o->tokens != NULL) + (o->chat != NULL);
    if (given != 1) {
        fprintf(stderr, "weft run: give exactly one of --prompt, --tokens, --chat\n");
        return 2;
    }
    if (o->tokens) return parse_ids(o->tokens, m->cfg.vocab_size, ids, n);
    weft_err err = {0};
    if (o->prompt) {
        if (weft_model_encode(m, o->prompt, strlen(o->prompt), true, false, ids, n, &err)) {
            fprintf(stderr, "weft: %s\n", err.msg);
            return 2;
        }
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = render_chat(o, m, &text, &len);
    if (rc) return rc;
    if (weft_model_encode(m, text, len, false, true, ids, n, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
    }
    free(text);
    return rc;
}

static int write_report(const cli_options *o, const int32_t *prompt, int n_prompt, const int32_t *gen,
                        int n_gen, const double *margins, const char *sha, const char *text,
                        const char *reason, double load_s, const weft_request_stats *rs,
                        const weft_sampling *s) {
    json_t *r = json_object(), *pi = json_array(), *ti = json_array();
    for (int i = 0; i < n_prompt; i++) json_array_append_new(pi, json_integer(prompt[i]));
    for (int i = 0; i < n_gen; i++) json_array_append_new(ti, json_integer(gen[i]));
    json_object_set_new(r, "prompt_ids", pi);
    json_object_set_new(r, "token_ids", ti);
    if (margins) {
        json_t *mg = json_array();
        for (int i = 0; i < n_gen; i++) json_array_append_new(mg, json_real(margins[i]));
        json_object_set_new(r, "top2_margins", mg);
    }
    json_object_set_new(r, "token_sha", json_string(sha));
    json_object_set_new(r, "text", json_stringn(text, strlen(text)));
    json_object_set_new(r, "finish_reason", json_string(reason));
    json_object_set_new(r, "drafted", json_integer(rs->drafted));
    json_object_set_new(r, "accepted", json_integer(rs->accepted));
    json_object_set_new(r, "rounds", json_integer(rs->rounds));
    json_object_set_new(r, "timings",
                        json_pack("{s:f, s:f, s:f}", "load_s", load_s, "prefill_s", rs->prefill_seconds,
                                  "decode_s", rs->decode_seconds));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    json_object_set_new(r, "sampling",
                        json_pack("{s:f, s:f, s:i, s:f, s:s}", "temperature", s->temperature, "top_p",
                                  s->top_p, "top_k", s->top_k, "min_p", s->min_p, "seed", seed));
    int rc = 0;
    if (json_dump_file(r, o->report, JSON_INDENT(1))) {
        fprintf(stderr, "weft: cannot write report %s: %s\n", o->report, strerror(errno));
        rc = 2;
    }
    json_decref(r);
    return rc;
}

/* --report PATH must be writable before anything runs: not a directory, its directory writable (or the file
 * itself when it exists). 0, or 2 after one line naming the path and the reason. */
static int report_path_ok(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "weft: --report %s: is a directory\n", path);
            return 2;
        }
        if (access(path, W_OK) != 0) {
            fprintf(stderr, "weft: --report %s: %s\n", path, strerror(errno));
            return 2;
        }
        return 0;
    }
    char *dir = strdup(path);
    if (!dir) return 2;
    char *slash = strrchr(dir, '/');
    const char *d = "."; /* the directory the file would be created in */
    if (slash == dir) {
        d = "/";
    } else if (slash) {
        *slash = 0;
        d = dir;
    }
    const int ok = access(d, W_OK) == 0;
    if (!ok) fprintf(stderr, "weft: --report %s: directory %s: %s\n", path, d, strerror(errno));
    free(dir);
    return ok ? 0 : 2;
}

int cmd_run(const cli_options *o) {
    if (cli_sampling_flags_ok(o) || (o->report && report_path_ok(o->report))) return 2;
    double t0 = weft_now();
    weft_model *m = NULL;
    int rc = cli_load_model(o, &m);
    if (rc) return rc;
    double load_s = weft_now() - t0;
    int32_t *prompt = NULL, *gen = NULL;
    double *margins = NULL;
    int n_prompt = 0, n_gen = 0;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    weft_backend be = {0};
    weft_drafter drafter = {0};
    weft_engine *eng = NULL;
    weft_request_handle *h = NULL;
    weft_model_detok *dt = NULL;
    weft_err err = {0};
    rc = prompt_ids(o, m, &prompt, &n_prompt);
    if (rc) goto out;
    if (n_prompt == 0) {
        fprintf(stderr, "weft: the prompt has no tokens\n");
        rc = 2;
        goto out;
    }
    int ctx = o->context > 0 ? o->context : weft_model_context(m);
    if (n_prompt >= ctx) {
        fprintf(stderr, "weft: the prompt has %d tokens but the context is %d\n", n_prompt, ctx);
        rc = 2;
        goto out;
    }
    int max_tokens = o->max_tokens > 0 ? o->max_tokens : 4096;
    if (max_tokens > ctx - n_prompt) {
        if (o->max_tokens > 0) {
            fprintf(stderr, "weft: %d prompt tokens + --max-tokens %d exceed the context %d\n", n_prompt,
                    o->max_tokens, ctx);
            rc = 2;
            goto out;
        }
        max_tokens = ctx - n_prompt;
    }
    int rows = o->chunk > 0 ? o->chunk : 256; /* prefill rows per forward, at most the context */
    if (rows > ctx) rows = ctx;
    weft_backend_opts bo = {o->backend, cli_threads(o), 1, rows, ctx, o->activations, o->device};
    weft_backend_plan plan;
    if (weft_model_backend_plan(m, &bo, &be, &plan, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    cli_backend_note(&plan);
    weft_engine_config ec = {.parallel = 1,
                             .capacity = ctx,
                             .eos_ids = m->cfg.eos_token_ids,
                             .n_eos = m->cfg.n_eos,
                             .max_draft = o->no_drafts ? 0 : 8};
    rc = cli_engine_start(&ec, &be, rows, o->no_drafts, &drafter, &eng);
    if (rc) goto out;
    weft_request req = {0};
    req.prompt = prompt;
    req.n_prompt = n_prompt;
    cli_sampling(o, m, &req.sampling);
    req.sampling.seed =
        o->has_seed ? (uint64_t)o->seed : weft_seed_from_prompt(prompt, (size_t)n_prompt, o->seed_salt);
    req.max_tokens = max_tokens;
    req.ignore_eos = o->ignore_eos;
    req.draft = !o->no_drafts;
    /* The report records each step's top-2 margin (difference of log-probabilities = of logits), which tests
     * use to compare greedy ids with peers only where rounding cannot flip them. */
    if (o->report) req.sampling.logprobs = 2;
    if (weft_sampling_validate(&req.sampling, m->cfg.vocab_size, &err) ||
        weft_engine_submit(eng, &req, &h, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        rc = 2;
        goto out;
    }
    dt = m->tokenizer ? weft_model_detok_new(m) : NULL;
    weft_event ev;
    const char *reason = "error";
    weft_request_stats rs = {0};
    char buf[4096];
    for (;;) {
        if (!weft_request_next_event(h, &ev, -1)) continue;
        if (ev.kind == WEFT_EVENT_TOKENS) {
            int32_t *ng = realloc(gen, (size_t)(n_gen + ev.n_tokens) * sizeof *gen);
            if (!ng) break;
            gen = ng;
            memcpy(gen + n_gen, ev.tokens, (size_t)ev.n_tokens * sizeof *gen);
            if (ev.logprobs) {
                double *nm = realloc(margins, (size_t)(n_gen + ev.n_tokens) * sizeof *margins);
                if (!nm) break;
                margins = nm;
                for (int i = 0; i < ev.n_tokens; i++) {
                    const weft_logprobs *lp = &ev.logprobs[i];
                    margins[n_gen + i] =
                        lp->n_top >= 2 ? (double)lp->top_logprobs[0] - lp->top_logprobs[1] : 0;
                }
            }
            n_gen += ev.n_tokens;
            for (int i = 0; i < ev.n_tokens; i++) {
                if (dt) {
                    size_t k = weft_model_detok_feed(dt, ev.tokens[i], true, buf, sizeof buf);
                    if (k > sizeof buf) k = 0;
                    fwrite(buf, 1, k, stdout);
                    if (text_len + k + 1 > text_cap) {
                        char *nt = realloc(text, (text_len + k + 1) * 2);
                        if (!nt) break;
                        text = nt;
                        text_cap = (text_len + k + 1) * 2;
                    }
                    memcpy(text + text_len, buf, k);
                    text_len += k;
                    text[text_len] = 0;
                }
                fflush(stdout);
            }
        } else if (ev.kind == WEFT_EVENT_FINISHED) {
            reason = weft_finish_reason_name(ev.reason);
            rs = ev.stats;
            if (ev.reason == WEFT_FINISH_ERROR || ev.reason == WEFT_FINISH_REFUSED) {
                fprintf(stderr, "weft: %s\n", ev.message);
                rc = 1;
            }
            break;
        }
    }
    if (dt) {
        size_t k = weft_model_detok_flush(dt, buf, sizeof buf);
        if (k <= sizeof buf) fwrite(buf, 1, k, stdout);
    }
    if (dt) putchar('\n');
    fflush(stdout);
    char sha[13];
    weft_token_sha(gen, (size_t)n_gen, sha);
    double pf = rs.prefill_seconds > 0 ? n_prompt / rs.prefill_seconds : 0;
    double dc = rs.decode_seconds > 0 && n_gen > 1 ? (n_gen - 1) / rs.decode_seconds : 0;
    fprintf(
        stderr,
        "weft: %d prompt tokens, %d generated (%s), prefill %.1f tok/s, decode %.1f tok/s, token_sha %s\n",
        n_prompt, n_gen, reason, pf, dc, sha);
    if (!dt) {
        for (int i = 0; i < n_gen; i++) printf(i ? ",%d" : "%d", gen[i]);
        printf("\n");
    }
    if (o->report && write_report(o, prompt, n_prompt, gen, n_gen, margins, sha, text ? text : "", reason,
                                  load_s, &rs, &req.sampling))
        rc = 1;
out:
    weft_model_detok_free(dt);
    weft_request_release(h);
    weft_engine_free(eng);
    weft_drafter_free(&drafter);
    if (be.ops) be.ops->destroy(be.self);
    weft_model_free(m);
    free(prompt);
    free(gen);
    free(margins);
    free(text);
    return rc;
}
