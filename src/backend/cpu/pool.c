/* A fixed pthread pool. One job at a time: the caller publishes (fn, ctx, n_tasks), workers and the caller
 * take task indices from a shared counter until none are left. Which thread runs which task does not matter
 * for the results, because tasks write disjoint outputs and never split a reduction. */
#include "weft/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct weft_pool {
    int n_threads;
    pthread_t *threads; /* [n_threads - 1] workers */
    float **scratch;    /* [n_threads] each scratch_floats */
    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    uint64_t generation; /* bumped per job */
    int running;         /* workers still inside the current job */
    int quit;
    weft_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next;
};

typedef struct worker_arg {
    weft_pool *p;
    int index;
} worker_arg;

static void drain(weft_pool *p, float *scratch) {
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, scratch);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    weft_pool *p = wa->p;
    float *scratch = p->scratch[wa->index];
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, scratch);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

weft_pool *weft_pool_new(int n_threads, size_t scratch_floats) {
    if (n_threads < 1) n_threads = 1;
    weft_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    p->scratch = calloc((size_t)n_threads, sizeof *p->scratch);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->scratch || !p->threads) goto fail;
    for (int i = 0; i < n_threads; i++) {
        p->scratch[i] = malloc((scratch_floats ? scratch_floats : 1) * sizeof(float));
        if (!p->scratch[i]) goto fail;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n_threads = i;
            break;
        }
        wa->p = p;
        wa->index = i;
        if (pthread_create(&p->threads[i - 1], NULL, worker, wa)) {
            free(wa);
            p->n_threads = i;
            break;
        }
    }
    return p;
fail:
    if (p->scratch)
        for (int i = 0; i < n_threads; i++) free(p->scratch[i]);
    free(p->scratch);
    free(p->threads);
    free(p);
    return NULL;
}

void weft_pool_free(weft_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    for (int i = 0; i < p->n_threads; i++) free(p->scratch[i]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->scratch);
    free(p->threads);
    free(p);
}

int weft_pool_threads(const weft_pool *p) {
    return p->n_threads;
}

void weft_pool_run(weft_pool *p, int64_t n_tasks, weft_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, p->scratch[0]);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->running = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    drain(p, p->scratch[0]);
    pthread_mutex_lock(&p->mu);
    while (p->running > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
