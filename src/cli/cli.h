/* cli.h — the command line: one flag table drives parsing, --help and `capabilities --json` (SPEC §2). */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include "weft/common.h"

#include <stdio.h>

enum { CMD_SERVE = 1, CMD_RUN = 2, CMD_INFO = 4, CMD_BENCH = 8, CMD_CAPS = 16 };

typedef enum flag_kind { FLAG_BOOL, FLAG_INT, FLAG_DOUBLE, FLAG_STRING, FLAG_LIST } flag_kind;

typedef struct cli_options {
    const char *model; /* positional MODEL or NULL (embedded stories260K) */
    /* serve */
    const char *host;
    int port;
    const char *name;
    const char *aliases[16];
    int n_aliases;
    const char *api_keys[16];
    int n_api_keys;
    const char *api_key_file;
    const char *backend;
    const char *activations;
    int device;
    int threads;
    int context;
    const char *parallel;
    int max_queue;
    int max_tokens;
    double temperature, top_p, min_p;
    int top_k;
    bool has_temperature, has_top_p, has_top_k, has_min_p;
    const char *seed_salt;
    bool no_drafts;
    int mtp_drafts;
    double prompt_cache_gib;
    bool has_prompt_cache_gib;
    bool thinking, no_thinking;
    const char *chat_template;
    bool metrics_open;
    double shutdown_grace;
    const char *log_format;
    /* run */
    const char *prompt;
    const char *tokens;
    const char *chat;
    long long seed;
    bool has_seed;
    bool ignore_eos;
    const char *report;
    /* bench */
    int prompt_len;
    int gen_len;
    int repeat;
    int streams; /* aggregate decode over this many streams in shared rounds (1 = off) */
    int chunk;   /* prefill rows per forward */
    /* capabilities */
    bool json;
    bool help;
} cli_options;

typedef struct cli_flag {
    const char *name; /* "--port" */
    flag_kind kind;
    unsigned commands; /* CMD_* bitmask */
    size_t offset;     /* into cli_options */
    size_t has_offset; /* offset of a bool "given" marker, or 0 */
    const char *def;   /* default, as text (help) */
    const char *help;
} cli_flag;

extern const cli_flag weft_cli_flags[];
extern const int weft_cli_n_flags;

void cli_defaults(cli_options *o);
/* Parses argv for one command; on error prints a one-line message and returns 2. */
int cli_parse(unsigned cmd, int argc, char **argv, cli_options *o);
void cli_usage(FILE *f, unsigned cmd, const char *cmd_name, const char *synopsis);

int cmd_run(const cli_options *o);
int cmd_info(const cli_options *o);
int cmd_bench(const cli_options *o);
int cmd_capabilities(const cli_options *o);
int cmd_serve(const cli_options *o);

#endif
