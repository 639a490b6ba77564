/* A fixed pthread pool. One job at a time: the caller publishes (fn, ctx, n_tasks), workers and the caller
 * take task indices from a shared counter until none are left. Which thread runs which task does not matter
 * for the results, because tasks write disjoint outputs and never split a reduction.
 *
 * Why it spins: a forward runs a few hundred jobs per token (7 matmuls and an attention per layer), each a
 * few microseconds to a millisecond long. Waking a sleeping worker through a condition variable costs tens
 * to hundreds of microseconds (more on a loaded machine), which alone capped decode at ~20 tok/s on
 * SmolLM2-135M. So workers poll for the next job for a while (SPIN_SECONDS) before sleeping, and the caller
 * waits for the job's last task, not for every worker to check in: a worker that was descheduled during a
 * short job simply finds no task left when it runs again.
 *
 * The claim counter packs (job generation << 32 | next task index), so a late worker holding an old job can
 * never take a task of the next job: its compare-and-swap fails once the generation has moved on. */
#include "weft/cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long an idle worker polls for the next job before sleeping on the condition variable: longer than the
 * gaps between jobs inside a forward (norms, RoPE, sampling), short enough not to burn a core between
 * requests. */
#define SPIN_SECONDS 0.002

struct weft_pool {
    int n_threads;
    pthread_t *threads; /* [n_threads - 1] workers */
    float **scratch;    /* [n_threads] each scratch_floats */
    float *shared;      /* WEFT_POOL_SHARED_FLOATS */
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    /* the published job; fn/ctx/n_tasks are read only after seeing `generation`, and validated by `claim` */
    _Atomic(weft_task_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n_tasks;
    _Atomic uint64_t generation; /* bumped per job (low 32 bits are what `claim` carries) */
    _Atomic int sleepers;        /* workers blocked on start_cv */
    _Atomic int quit;
    /* the two counters every task touches, each on its own cache line (not next to what idle workers poll) */
    _Alignas(64) _Atomic uint64_t claim; /* generation << 32 | next task index */
    _Alignas(64) _Atomic int64_t done;   /* tasks of the current job finished */
    char pad_[64 - sizeof(int64_t)];
};

typedef struct worker_arg {
    weft_pool *p;
    int index;
} worker_arg;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Takes and runs tasks of job `gen` until none are left (or the job is over). The job's fields are read
 * after a claim value carrying this generation; the caller changes `claim` before it rewrites them, so a
 * successful compare-and-swap proves they belonged to this job. */
static void drain(weft_pool *p, uint64_t gen, float *scratch) {
    const uint64_t tag = (gen & 0xFFFFFFFFu) << 32;
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    if ((c & 0xFFFFFFFF00000000u) != tag) return;
    weft_task_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
    const int64_t n = atomic_load_explicit(&p->n_tasks, memory_order_acquire);
    for (;;) {
        if ((c & 0xFFFFFFFF00000000u) != tag || (int64_t)(c & 0xFFFFFFFFu) >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* c was reloaded */
        fn(ctx, (int64_t)(c & 0xFFFFFFFFu), scratch);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    weft_pool *p = wa->p;
    float *scratch = p->scratch[wa->index];
    free(wa);
    uint64_t seen = atomic_load(&p->generation);
    for (;;) {
        /* poll, then sleep */
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g == seen && !atomic_load(&p->quit)) {
            double t0 = now_s();
            for (int spins = 1; g == seen && !atomic_load_explicit(&p->quit, memory_order_relaxed); spins++) {
                CPU_RELAX();
                g = atomic_load_explicit(&p->generation, memory_order_acquire);
                if ((spins & 63) == 0 && now_s() - t0 > SPIN_SECONDS) break;
            }
        }
        if (g == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->start_cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) break;
        seen = g;
        drain(p, g, scratch);
    }
    return NULL;
}

weft_pool *weft_pool_new(int n_threads, size_t scratch_floats) {
    if (n_threads < 1) n_threads = 1;
    weft_pool *p = aligned_alloc(64, sizeof *p); /* sizeof is a multiple of 64 (the aligned members) */
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    p->scratch = calloc((size_t)n_threads, sizeof *p->scratch);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->shared = aligned_alloc(64, WEFT_POOL_SHARED_FLOATS * sizeof(float));
    if (!p->scratch || !p->threads || !p->shared) goto fail;
    if (scratch_floats < WEFT_POOL_MIN_SCRATCH_FLOATS) scratch_floats = WEFT_POOL_MIN_SCRATCH_FLOATS;
    scratch_floats = (scratch_floats + 15) / 16 * 16; /* aligned_alloc: a multiple of the alignment */
    for (int i = 0; i < n_threads; i++) {
        p->scratch[i] = aligned_alloc(64, scratch_floats * sizeof(float));
        if (!p->scratch[i]) goto fail;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
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
    free(p->shared);
    free(p);
    return NULL;
}

void weft_pool_free(weft_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    for (int i = 0; i < p->n_threads; i++) free(p->scratch[i]);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    free(p->scratch);
    free(p->threads);
    free(p->shared);
    free(p);
}

int weft_pool_threads(const weft_pool *p) {
    return p->n_threads;
}

float *weft_pool_shared(weft_pool *p) {
    return p->shared;
}

typedef struct plain_job {
    void (*task)(void *tctx, int64_t i);
    void *tctx;
} plain_job;

static void plain_task(void *ctx, int64_t t, float *scratch) {
    (void)scratch;
    const plain_job *j = ctx;
    j->task(j->tctx, t);
}

void weft_pool_run_plain(void *pool, int64_t n_tasks, void (*task)(void *tctx, int64_t i), void *tctx) {
    plain_job j = {task, tctx};
    weft_pool_run(pool, n_tasks, plain_task, &j);
}

void weft_pool_run(weft_pool *p, int64_t n_tasks, weft_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks >= 0xFFFFFFFF) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, p->scratch[0]);
        return;
    }
    /* Every task of the previous job has finished (we waited for them). `claim` is closed (index all ones)
     * before the job's fields change, so a late worker still holding the previous generation fails its
     * compare-and-swap instead of running a mix of two jobs. */
    uint64_t gen = atomic_load(&p->generation) + 1, tag = (gen & 0xFFFFFFFFu) << 32;
    atomic_store(&p->claim, tag | 0xFFFFFFFFu);
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_release);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->claim, tag, memory_order_release);
    atomic_store(&p->generation, gen); /* seq_cst: ordered before the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
    }
    drain(p, gen, p->scratch[0]);
    /* wait for tasks other threads are still running */
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks; spins++) {
        if (spins < 4096)
            CPU_RELAX();
        else
            sched_yield(); /* a worker holding a task may be waiting for this core */
    }
}
