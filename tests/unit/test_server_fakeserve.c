/* test_server_fakeserve.c — `weft serve` over the fake model service, for running the pytest HTTP suite
 * (tests/py) before the real binary exists, and as the reference for how serve drives the server: start,
 * attach once the model is loaded, wait for SIGINT/SIGTERM with sigwait, graceful shutdown, exit 0.
 *
 *   test_server_fakeserve serve [MODEL] [--host H] [--port N] [--api-key K]... [--metrics-open]
 *                               [--shutdown-grace S] [--max-tokens N] [--context N] [--parallel N]
 * Other options are accepted and ignored. Not a ctest test (it serves until signalled). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_server_fake.h"

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "serve")) {
        fprintf(stderr, "usage: %s serve [MODEL] [--port N] [--api-key K] ...\n", argv[0]);
        return 2;
    }
    weft_server_config cfg;
    weft_server_config_default(&cfg);
    fake_config fc;
    fake_config_default(&fc);
    fc.round_s = 0.002;
    fc.parallel = 4;
    fc.context = 2048;
    const char *keys[16];
    int n_keys = 0;
    double grace = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = v && strncmp(v, "--", 2) != 0;
        if (!strcmp(a, "--host") && v)
            cfg.host = v;
        else if (!strcmp(a, "--port") && v)
            cfg.port = atoi(v);
        else if (!strcmp(a, "--api-key") && v && n_keys < 16)
            keys[n_keys++] = v;
        else if (!strcmp(a, "--metrics-open"))
            takes = false, cfg.metrics_open = true;
        else if (!strcmp(a, "--shutdown-grace") && v)
            grace = atof(v);
        else if (!strcmp(a, "--max-tokens") && v)
            cfg.max_tokens = atoi(v);
        else if (!strcmp(a, "--context") && v)
            fc.context = atoi(v);
        else if (!strcmp(a, "--parallel") && v)
            fc.parallel = atoi(v);
        else if (strncmp(a, "--", 2))
            takes = false; /* MODEL: ignored */
        if (takes && !strncmp(a, "--", 2) && strcmp(a, "--metrics-open")) i++;
    }
    cfg.api_keys = keys;
    cfg.n_api_keys = n_keys;
    /* Signals are taken by sigwait below, in the main thread; every other thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    weft_err err = {0};
    weft_server *srv = NULL;
    if (weft_server_create(&cfg, &srv, &err) || weft_server_start(srv, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        weft_server_destroy(srv);
        return 2;
    }
    fake_engine *f = fake_new(&fc); /* "loading the model" */
    weft_model_service svc = fake_service(f);
    if (weft_server_attach(srv, &svc, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "weft: serving fake-model on http://%s:%d\n", cfg.host, weft_server_port(srv));
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "weft: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    weft_server_shutdown(srv, grace);
    weft_server_destroy(srv);
    fake_free(f);
    return 0;
}
