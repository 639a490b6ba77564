/* weft — entry point: dispatches the commands of SPEC §2. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#define WEFT_VERSION_STRING "0.1.0"

static const struct {
    const char *name;
    unsigned cmd;
    const char *synopsis;
    int (*fn)(const cli_options *);
} COMMANDS[] = {
    {"serve", CMD_SERVE, "[MODEL] [options]    OpenAI-compatible server", cmd_serve},
    {"run", CMD_RUN, "[MODEL] (--prompt TEXT | --tokens 1,2,3 | --chat TEXT) [options]", cmd_run},
    {"info", CMD_INFO, "MODEL", cmd_info},
    {"capabilities", CMD_CAPS, "--json", cmd_capabilities},
    {"bench", CMD_BENCH, "[MODEL] [options]    in-process prefill/decode benchmark", cmd_bench},
};

static void usage(FILE *f) {
    fprintf(f, "weft %s — exact LLM inference\n\nusage:\n", WEFT_VERSION_STRING);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  weft %-12s %s\n", COMMANDS[i].name, COMMANDS[i].synopsis);
    fprintf(
        f,
        "  weft --version | -h | COMMAND -h\n\n"
        "MODEL is a checkpoint directory (config.json + *.safetensors) or a .gguf file; without it, run and\n"
        "serve use the built-in stories260K model.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("weft %s\n", WEFT_VERSION_STRING);
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        if (strcmp(argv[1], COMMANDS[i].name)) continue;
        cli_options o;
        cli_defaults(&o);
        int rc = cli_parse(COMMANDS[i].cmd, argc - 2, argv + 2, &o);
        if (rc) return rc;
        if (o.help) {
            cli_usage(stdout, COMMANDS[i].cmd, COMMANDS[i].name, COMMANDS[i].synopsis);
            return 0;
        }
        return COMMANDS[i].fn(&o);
    }
    fprintf(stderr, "weft: unknown command '%s' (see weft --help)\n", argv[1]);
    return 2;
}
