/* weft bench: in-process prefill and decode throughput on one stream, straight on the backend (no HTTP, no
 * lane core), best of --repeat runs. Tokens are drawn from the model itself (greedy), the prompt is a fixed
 * pseudo-random id sequence. */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>

int cmd_bench(const cli_options *o) {
    weft_model *m = NULL;
    int rc = cli_load_model(o, &m);
    if (rc) return rc;
    int ctx = weft_model_context(m);
    int np = o->prompt_len > 0 ? o->prompt_len : 128, ng = o->gen_len > 0 ? o->gen_len : 64;
    if (np + ng > ctx) {
        fprintf(stderr, "weft bench: prompt %d + gen %d exceed the context %d\n", np, ng, ctx);
        weft_model_free(m);
        return 2;
    }
    weft_err err = {0};
    weft_backend be = {0};
    int chunk = 256;
    weft_backend_opts bo = {o->backend, cli_threads(o), 1, chunk, np + ng};
    if (weft_model_backend(m, &bo, &be, &err)) {
        fprintf(stderr, "weft: %s\n", err.msg);
        weft_model_free(m);
        return 2;
    }
    int32_t *seq = malloc((size_t)(np + ng + 1) * sizeof *seq);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < np; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        seq[i] = (int32_t)((x * 0x2545F4914F6CDD1Dull) % (uint64_t)m->cfg.vocab_size);
    }
    if (m->cfg.bos_token_id >= 0) seq[0] = m->cfg.bos_token_id;
    weft_sampling s;
    weft_sampling_defaults(&s);
    s.temperature = 0;
    double best_pf = 0, best_dc = 0;
    int reps = o->repeat > 0 ? o->repeat : 3;
    for (int rep = 0; rep < reps && !rc; rep++) {
        if (be.ops->open(be.self, 0, np + ng, &err)) break;
        double t0 = weft_now();
        int32_t draw = 0;
        for (int a = 0; a < np && !rc; a += chunk) {
            int n = np - a < chunk ? np - a : chunk;
            weft_segment g = {0, a, n, seq, np, a + n == np ? 1 : 0, &s, &draw, NULL};
            if (be.ops->forward(be.self, &g, 1, &err)) rc = 1;
        }
        double t1 = weft_now();
        seq[np] = draw;
        for (int i = 0; i < ng - 1 && !rc; i++) {
            weft_segment g = {0, np + i, 1, seq, np, 1, &s, &draw, NULL};
            if (be.ops->forward(be.self, &g, 1, &err)) rc = 1;
            seq[np + i + 1] = draw;
        }
        double t2 = weft_now();
        be.ops->release(be.self, 0);
        if (np / (t1 - t0) > best_pf) best_pf = np / (t1 - t0);
        if (ng > 1 && (ng - 1) / (t2 - t1) > best_dc) best_dc = (ng - 1) / (t2 - t1);
    }
    if (rc)
        fprintf(stderr, "weft: %s\n", err.msg);
    else {
        printf("| model | weights | threads | prefill tok/s (%d) | decode tok/s (%d) |\n", np, ng);
        printf("|---|---|---|---|---|\n");
        printf("| %s | %s | %d | %.1f | %.1f |\n", m->id, m->quant, cli_threads(o), best_pf, best_dc);
    }
    free(seq);
    be.ops->destroy(be.self);
    weft_model_free(m);
    return rc;
}
