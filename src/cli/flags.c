/* The flag table (SPEC §2.1–§2.3) and its parser. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(cli_options, f)
#define SRV    CMD_SERVE
#define RUN    CMD_RUN
#define SAMPLE (CMD_SERVE | CMD_RUN | CMD_BENCH)

const cli_flag weft_cli_flags[] = {
    {"--host", FLAG_STRING, SRV, OFF(host), 0, "127.0.0.1", "address to listen on"},
    {"--port", FLAG_INT, SRV, OFF(port), 0, "8080", "TCP port"},
    {"--name", FLAG_STRING, SRV, OFF(name), 0, "last path component", "model id served"},
    {"--alias", FLAG_LIST, SRV, OFF(aliases), OFF(n_aliases), "", "another accepted model id (repeatable)"},
    {"--api-key", FLAG_LIST, SRV, OFF(api_keys), OFF(n_api_keys), "",
     "accepted API key (repeatable; also WEFT_API_KEY)"},
    {"--api-key-file", FLAG_STRING, SRV, OFF(api_key_file), 0, "",
     "file of API keys, one per line (mode 0600)"},
    {"--backend", FLAG_STRING, SRV | RUN | CMD_BENCH, OFF(backend), 0, "auto", "auto|cpu|cuda"},
    {"--activations", FLAG_STRING, SRV | RUN | CMD_BENCH, OFF(activations), 0, "fp32",
     "fp32|f16: CUDA 4-bit products and attention on fp32 operands (bf16 hi/lo pairs) or on f16-rounded "
     "ones and an f16 KV cache (faster many-row products, half the KV bytes per stream; replies within SPEC "
     "5.5's bf16-path tolerance, exactness kept)"},
    {"--device", FLAG_INT, SRV | RUN | CMD_BENCH, OFF(device), 0, "0", "GPU index"},
    {"--threads", FLAG_INT, SRV | RUN | CMD_BENCH, OFF(threads), 0, "all cores", "CPU threads"},
    {"--context", FLAG_INT, SRV | RUN | CMD_BENCH, OFF(context), 0, "model's trained context",
     "positions per stream (prompt + reply)"},
    {"--parallel", FLAG_STRING, SRV, OFF(parallel), 0, "auto", "streams sharing rounds (N or auto)"},
    {"--max-queue", FLAG_INT, SRV, OFF(max_queue), 0, "256", "waiting requests beyond this get 503"},
    {"--max-tokens", FLAG_INT, SRV | RUN, OFF(max_tokens), 0, "4096, capped by the context",
     "reply token limit"},
    {"--temperature", FLAG_DOUBLE, SAMPLE, OFF(temperature), OFF(has_temperature), "generation_config or 1.0",
     "sampling temperature (0 = greedy)"},
    {"--top-p", FLAG_DOUBLE, SAMPLE, OFF(top_p), OFF(has_top_p), "generation_config or 1.0",
     "nucleus sampling mass"},
    {"--top-k", FLAG_INT, SAMPLE, OFF(top_k), OFF(has_top_k), "generation_config or 0",
     "keep the k most likely (0 = all)"},
    {"--min-p", FLAG_DOUBLE, SAMPLE, OFF(min_p), OFF(has_min_p), "generation_config or 0", "min-p filter"},
    {"--seed-salt", FLAG_STRING, SRV | RUN, OFF(seed_salt), 0, "0", "salt of prompt-derived seeds"},
    {"--no-drafts", FLAG_BOOL, SRV | RUN, OFF(no_drafts), 0, "", "never draft (serial reference)"},
    {"--mtp-drafts", FLAG_INT, SRV, OFF(mtp_drafts), 0, "auto", "MTP draft depth"},
    {"--prompt-cache-gib", FLAG_DOUBLE, SRV, OFF(prompt_cache_gib), OFF(has_prompt_cache_gib),
     "1/4 of free memory, <= 16", "prompt cache budget (0 disables)"},
    {"--thinking", FLAG_BOOL, SRV | RUN, OFF(thinking), 0, "", "enable thinking in chat templates"},
    {"--no-thinking", FLAG_BOOL, SRV | RUN, OFF(no_thinking), 0, "", "disable thinking in chat templates"},
    {"--chat-template", FLAG_STRING, SRV | RUN, OFF(chat_template), 0, "", "Jinja chat template file"},
    {"--metrics-open", FLAG_BOOL, SRV, OFF(metrics_open), 0, "", "serve /metrics without an API key"},
    {"--shutdown-grace", FLAG_DOUBLE, SRV, OFF(shutdown_grace), 0, "0",
     "seconds running requests get at shutdown"},
    {"--log-format", FLAG_STRING, SRV, OFF(log_format), 0, "text", "access log: text|json"},
    {"--prompt", FLAG_STRING, RUN, OFF(prompt), 0, "", "prompt text"},
    {"--tokens", FLAG_STRING, RUN, OFF(tokens), 0, "", "prompt token ids, comma separated"},
    {"--chat", FLAG_STRING, RUN, OFF(chat), 0, "",
     "one user chat message (rendered with the model's template)"},
    {"--seed", FLAG_STRING, RUN, OFF(seed), OFF(has_seed), "from the prompt", "sampling seed (int64)"},
    {"--ignore-eos", FLAG_BOOL, RUN, OFF(ignore_eos), 0, "", "do not stop at EOS"},
    {"--report", FLAG_STRING, RUN, OFF(report), 0, "", "write a JSON report to this path"},
    {"--prompt-len", FLAG_INT, CMD_BENCH, OFF(prompt_len), 0, "128", "prefill benchmark prompt tokens"},
    {"--gen-len", FLAG_INT, CMD_BENCH, OFF(gen_len), 0, "64", "decode benchmark tokens"},
    {"--repeat", FLAG_INT, CMD_BENCH, OFF(repeat), 0, "3", "repetitions (best is reported)"},
    {"--streams", FLAG_INT, CMD_BENCH, OFF(streams), 0, "1",
     "also decode this many streams in shared rounds"},
    {"--chunk", FLAG_INT, CMD_BENCH | SRV | RUN, OFF(chunk), 0, "256",
     "prefill rows per forward (a round's row budget, at most the context; 0 = the default; replies do not "
     "depend on it)"},
    {"--json", FLAG_BOOL, CMD_CAPS, OFF(json), 0, "", "JSON output"},
};
const int weft_cli_n_flags = (int)(sizeof weft_cli_flags / sizeof weft_cli_flags[0]);

void cli_defaults(cli_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->backend = "auto";
    o->activations = "fp32";
    o->parallel = "auto";
    o->max_queue = 256;
    o->seed_salt = "0";
    o->log_format = "text";
    o->prompt_len = 128;
    o->gen_len = 64;
    o->repeat = 3;
    o->streams = 1;
    o->chunk = 256;
    o->mtp_drafts = -1;
}

/* Counts and indices that cannot be negative (for counts 0 keeps the default); each has a sane upper bound.
 */
static const struct {
    const char *name;
    size_t offset; /* an int of cli_options */
    int max;
} kCounts[] = {{"--threads", OFF(threads), 1024},
               {"--context", OFF(context), 1 << 30},
               {"--max-tokens", OFF(max_tokens), 1 << 30},
               {"--max-queue", OFF(max_queue), 1 << 20},
               {"--prompt-len", OFF(prompt_len), 1 << 30},
               {"--gen-len", OFF(gen_len), 1 << 30},
               {"--repeat", OFF(repeat), 1 << 20},
               {"--port", OFF(port), 65535},
               {"--streams", OFF(streams), 256},
               {"--chunk", OFF(chunk), 1 << 16},
               {"--device", OFF(device), 1023}};

/* An integer too large for the flag: the flag's range when it has one (kCounts), else int's. */
static int int_out_of_range(const char *name, const char *val) {
    for (size_t i = 0; i < sizeof kCounts / sizeof kCounts[0]; i++) {
        if (!strcmp(kCounts[i].name, name)) {
            fprintf(stderr, "weft: %s must be between 0 and %d, got %s\n", name, kCounts[i].max, val);
            return 2;
        }
    }
    fprintf(stderr, "weft: %s must be between %d and %d, got %s\n", name, INT_MIN + 1, INT_MAX, val);
    return 2;
}

static int set_flag(const cli_flag *f, const char *val, cli_options *o) {
    char *base = (char *)o, *end = NULL;
    errno = 0;
    switch (f->kind) {
    case FLAG_BOOL:
        *(bool *)(base + f->offset) = true;
        break;
    case FLAG_INT: {
        long v = strtol(val, &end, 10);
        if ((errno && errno != ERANGE) || !*val || *end) {
            fprintf(stderr, "weft: %s expects an integer, got '%s'\n", f->name, val);
            return 2;
        }
        if (errno == ERANGE || v < -2147483647L || v > 2147483647L) return int_out_of_range(f->name, val);
        int iv = (int)v;
        memcpy(base + f->offset, &iv, sizeof iv); /* the field is an int (FLAG_INT) */
        break;
    }
    case FLAG_DOUBLE: {
        double v = strtod(val, &end);
        if (errno || !*val || *end) {
            fprintf(stderr, "weft: %s expects a number, got '%s'\n", f->name, val);
            return 2;
        }
        memcpy(base + f->offset, &v, sizeof v); /* the field is a double (FLAG_DOUBLE) */
        break;
    }
    case FLAG_STRING:
        if (f->offset == OFF(seed)) {
            long long v = strtoll(val, &end, 10);
            if (errno || !*val || *end) {
                fprintf(stderr, "weft: --seed expects an int64, got '%s'\n", val);
                return 2;
            }
            o->seed = v;
        } else {
            *(const char **)(base + f->offset) = val;
        }
        break;
    case FLAG_LIST: {
        int *n = (int *)(base + f->has_offset);
        if (*n >= 16) {
            fprintf(stderr, "weft: too many %s values (16 at most)\n", f->name);
            return 2;
        }
        ((const char **)(base + f->offset))[(*n)++] = val;
        return 0;
    }
    }
    if (f->has_offset) *(bool *)(base + f->has_offset) = true;
    return 0;
}

static int cli_parse_args(unsigned cmd, int argc, char **argv, cli_options *o);

static int check_counts(const cli_options *o) {
    /* --activations before any model loads or port opens (weft_model_backend_plan checks it again for
     * library callers, and refuses f16 on the CPU backend) */
    if (o->activations && strcmp(o->activations, "fp32") && strcmp(o->activations, "f16")) {
        fprintf(stderr, "weft: --activations '%s': expected fp32 or f16\n", o->activations);
        return 2;
    }
#ifndef WEFT_HAVE_CUDA
    if (o->activations && !strcmp(o->activations, "f16")) {
        fprintf(stderr, "weft: --activations f16 needs the CUDA backend; this build is CPU only\n");
        return 2;
    }
#endif
    if (o->context == 1) { /* a prompt token and one generated need two positions */
        fprintf(stderr, "weft: --context must be 0 (the model's) or at least 2, got 1\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof kCounts / sizeof kCounts[0]; i++) {
        int v;
        memcpy(&v, (const char *)o + kCounts[i].offset, sizeof v);
        if (v < 0 || v > kCounts[i].max) {
            fprintf(stderr, "weft: %s must be between 0 and %d, got %d\n", kCounts[i].name, kCounts[i].max,
                    v);
            return 2;
        }
    }
    return 0;
}

int cli_parse(unsigned cmd, int argc, char **argv, cli_options *o) {
    int rc = cli_parse_args(cmd, argc, argv, o);
    return rc ? rc : check_counts(o);
}

static int cli_parse_args(unsigned cmd, int argc, char **argv, cli_options *o) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = true;
            continue;
        }
        if (a[0] != '-' || a[1] == 0) {
            if (o->model) {
                fprintf(stderr, "weft: unexpected argument '%s' (the model is already '%s')\n", a, o->model);
                return 2;
            }
            o->model = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_flag *f = NULL;
        for (int k = 0; k < weft_cli_n_flags; k++)
            if ((weft_cli_flags[k].commands & cmd) && strlen(weft_cli_flags[k].name) == len &&
                !strncmp(weft_cli_flags[k].name, a, len))
                f = &weft_cli_flags[k];
        if (!f) {
            fprintf(stderr, "weft: unknown option '%.*s' (see --help)\n", (int)len, a);
            return 2;
        }
        const char *val = NULL;
        if (f->kind != FLAG_BOOL) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else {
                fprintf(stderr, "weft: %s needs a value\n", f->name);
                return 2;
            }
        } else if (eq) {
            fprintf(stderr, "weft: %s takes no value\n", f->name);
            return 2;
        }
        int rc = set_flag(f, val, o);
        if (rc) return rc;
    }
    return 0;
}

void cli_usage(FILE *f, unsigned cmd, const char *cmd_name, const char *synopsis) {
    fprintf(f, "usage: weft %s %s\n\noptions:\n", cmd_name, synopsis);
    for (int k = 0; k < weft_cli_n_flags; k++) {
        const cli_flag *fl = &weft_cli_flags[k];
        if (!(fl->commands & cmd)) continue;
        const char *arg = fl->kind == FLAG_BOOL     ? ""
                          : fl->kind == FLAG_INT    ? " N"
                          : fl->kind == FLAG_DOUBLE ? " X"
                                                    : " S";
        char left[64];
        snprintf(left, sizeof left, "%s%s", fl->name, arg);
        fprintf(f, "  %-22s %s", left, fl->help);
        if (fl->def && *fl->def) fprintf(f, " (default: %s)", fl->def);
        fputc('\n', f);
    }
    fprintf(f, "  %-22s %s\n", "-h, --help", "this help");
}
