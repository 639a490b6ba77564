/* weft bench: in-process prefill and decode throughput straight on the backend (no HTTP, no lane core), best
 * of
 * --repeat runs. One stream: a --prompt-len prompt prefilled in --chunk-row forwards, then --gen-len greedy
 * decode steps. With --streams N > 1, also N streams (each its own prompt) prefilled one by one, then decoded
 * together, one shared forward per round: aggregate tok/s = N·(gen-len − 1) / decode time. Prompts are fixed
 * pseudo-random id sequences; tokens are drawn from the model itself (greedy unless --temperature etc. are
 * given). --chunk is capped at the prompt length; --context, when given, is the limit of prompt + gen. */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_run {
    weft_backend *be;
    int np, ng, chunk, vocab, bos;
    const weft_sampling *s;
} bench_run;

/* The prompt of stream `k`: np pseudo-random ids (xorshift), BOS first when the model has one. */
static void bench_prompt(const bench_run *b, int k, int32_t *seq) {
    uint64_t x = 0x9E3779B97F4A7C15ull + (uint64_t)k * 0xD1B54A32D192ED03ull;
    for (int i = 0; i < b->np; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        seq[i] = (int32_t)((x * 0x2545F4914F6CDD1Dull) % (uint64_t)b->vocab);
    }
    if (b->bos >= 0) seq[0] = b->bos;
}

/* Prefills slot `slot` with seq[0..np) and draws seq[np]. */
static int bench_prefill(const bench_run *b, int slot, int32_t *seq, weft_err *err) {
    int32_t draw = 0;
    for (int a = 0; a < b->np; a += b->chunk) {
        int n = b->np - a < b->chunk ? b->np - a : b->chunk;
        weft_segment g = {slot, a, n, seq, b->np, a + n == b->np ? 1 : 0, b->s, &draw, NULL};
        if (b->be->ops->forward(b->be->self, &g, 1, err)) return 1;
    }
    seq[b->np] = draw;
    return 0;
}

/* N streams (slots 0..N-1, seqs[k] of np + ng ids each) decoded ng − 1 rounds together. */
static int bench_decode(const bench_run *b, int N, int32_t **seqs, weft_segment *segs, int32_t *draws,
                        weft_err *err) {
    for (int i = 0; i < b->ng - 1; i++) {
        for (int k = 0; k < N; k++)
            segs[k] = (weft_segment){k, b->np + i, 1, seqs[k], b->np, 1, b->s, &draws[k], NULL};
        if (b->be->ops->forward(b->be->self, segs, N, err)) return 1;
        for (int k = 0; k < N; k++) seqs[k][b->np + i + 1] = draws[k];
    }
    return 0;
}

/* Best prefill tok/s of stream 0 alone, best decode tok/s at 1 stream and at N streams. */
static int bench_measure(const bench_run *b, int N, int reps, double best[3], weft_err *err) {
    int32_t **seqs = calloc((size_t)N, sizeof *seqs), *draws = calloc((size_t)N, sizeof *draws);
    weft_segment *segs = calloc((size_t)N, sizeof *segs);
    int rc = !seqs || !draws || !segs;
    for (int k = 0; k < N && !rc; k++) {
        seqs[k] = malloc((size_t)(b->np + b->ng + 1) * sizeof **seqs);
        if (!seqs[k]) rc = 1;
    }
    if (rc) weft_err_set(err, WEFT_ENOMEM, "weft bench: out of memory");
    for (int rep = 0; rep < reps && !rc; rep++) {
        bench_prompt(b, 0, seqs[0]);
        if (b->be->ops->open(b->be->self, 0, b->np + b->ng, err)) {
            rc = 1;
            break;
        }
        double t0 = weft_now();
        rc = bench_prefill(b, 0, seqs[0], err);
        double t1 = weft_now();
        if (!rc) rc = bench_decode(b, 1, seqs, segs, draws, err);
        double t2 = weft_now();
        b->be->ops->release(b->be->self, 0);
        if (rc) break;
        if (b->np / (t1 - t0) > best[0]) best[0] = b->np / (t1 - t0);
        if (b->ng > 1 && (b->ng - 1) / (t2 - t1) > best[1]) best[1] = (b->ng - 1) / (t2 - t1);
        if (N < 2) continue;
        int opened = 0; /* slots 0..opened-1 are open (a slot whose open failed is not released) */
        for (; opened < N && !rc; opened++) {
            bench_prompt(b, opened, seqs[opened]);
            if (b->be->ops->open(b->be->self, opened, b->np + b->ng, err)) {
                rc = 1;
                break;
            }
            rc = bench_prefill(b, opened, seqs[opened], err);
        }
        double t3 = weft_now();
        if (!rc) rc = bench_decode(b, N, seqs, segs, draws, err);
        double t4 = weft_now();
        for (int k = 0; k < opened; k++) b->be->ops->release(b->be->self, k);
        if (!rc && b->ng > 1 && N * (b->ng - 1) / (t4 - t3) > best[2]) best[2] = N * (b->ng - 1) / (t4 - t3);
    }
    for (int k = 0; k < N && seqs; k++) free(seqs[k]);
    free(seqs);
    free(draws);
    free(segs);
    return rc;
}

/* One decode cell of the table. */
static void print_rate(int ng, double v) {
    if (ng > 1)
        printf(" %.1f |", v);
    else
        printf(" - |");
}

int cmd_bench(const cli_options *o) {
    weft_model *m = NULL;
    int rc = cli_load_model(o, &m);
    if (rc) return rc;
    int ctx = o->context > 0 ? o->context : weft_model_context(m); /* --context as in `weft run` */
    int np = o->prompt_len > 0 ? o->prompt_len : 128, ng = o->gen_len > 0 ? o->gen_len : 64;
    int N = o->streams > 0 ? o->streams : 1, chunk = o->chunk > 0 ? o->chunk : 256;
    if (np + ng > ctx) {
        fprintf(stderr, "weft bench: prompt %d + gen %d exceed the context %d\n", np, ng, ctx);
        weft_model_free(m);
        return 2;
    }
    /* A chunk longer than the prompt is one forward of the whole prompt: the row budget (activation
     * memory, sized per row) is what the run uses, not the --chunk asked for. */
    if (chunk > np) chunk = np;
    weft_err err = {0};
    weft_backend be = {0};
    weft_backend_opts bo = {o->backend, cli_threads(o), N,        chunk > N ? chunk : N,
                            np + ng,    o->activations, o->device};
    weft_backend_plan plan;
    weft_status bst = weft_model_backend_plan(m, &bo, &be, &plan, &err);
    if (bst) {
        fprintf(stderr, "weft: %s\n", err.msg);
        if (bst == WEFT_ENOMEM) /* the message names serve's flags; bench sizes its streams by these */
            fprintf(stderr, "weft bench: lower --streams, --prompt-len or --gen-len\n");
        weft_model_free(m);
        return 2;
    }
    cli_backend_note(&plan);
    /* Greedy unless a sampling flag asks otherwise (generation_config is not applied: runs compare). */
    weft_sampling s;
    weft_sampling_defaults(&s);
    s.temperature = o->has_temperature ? o->temperature : 0;
    if (o->has_top_p) s.top_p = o->top_p;
    if (o->has_top_k) s.top_k = o->top_k;
    if (o->has_min_p) s.min_p = o->min_p;
    bench_run b = {&be, np, ng, chunk, m->cfg.vocab_size, m->cfg.bos_token_id, &s};
    double best[3] = {0, 0, 0};
    rc = bench_measure(&b, N, o->repeat > 0 ? o->repeat : 3, best, &err);
    if (rc)
        fprintf(stderr, "weft: %s\n", err.msg);
    else {
        printf("| model | weights | backend | prefill tok/s (%d, chunks of %d) | decode tok/s (%d) |", np,
               chunk, ng);
        if (N > 1) printf(" %d streams, aggregate decode tok/s |", N);
        printf("\n|---|---|---|---|---|%s\n", N > 1 ? "---|" : "");
        /* With --gen-len 1 there is no decode step to time: "-", not a rate of 0. */
        const bool f16 = o->activations && !strcmp(o->activations, "f16"); /* (only cuda takes it) */
        printf("| %s | %s | %s%s | %.1f |", m->id, m->quant, be.ops->name, f16 ? " (f16 activations)" : "",
               best[0]);
        print_rate(ng, best[1]);
        if (N > 1) print_rate(ng, best[2]);
        printf("\n");
    }
    be.ops->destroy(be.self);
    weft_model_free(m);
    return rc;
}
