/* The CPU backend: stream slots (family state memory), one forward per round over every segment's rows, then
 * each drawn row is sampled with its stream's settings at its own position (SPEC §4.2, §5). */
#include "weft/cpu_backend.h"

#include <stdlib.h>
#include <string.h>

typedef struct cpu_backend {
    weft_backend_ops ops; /* CPU_OPS, with draft only when the family has a draft head */
    weft_family_model fam;
    weft_pool *pool;
    int max_slots, max_rows;
    void **states;         /* [max_slots] family state, NULL when closed */
    void **spare;          /* [max_slots] the slot's allocation, kept across streams */
    size_t *spare_size;    /* [max_slots] its bytes */
    size_t *state_size;    /* [max_slots] */
    weft_row *rows;        /* [max_rows] */
    int *out_rows;         /* [max_rows] */
    float *logits;         /* [max_rows, vocab] */
    weft_sampler *sampler; /* draws are made one by one on the calling thread */
    size_t used_bytes;     /* stream states currently allocated */
    weft_family_draft *dq; /* [max_slots] a draft_many call's requests, as the family takes them */
} cpu_backend;

static weft_status cpu_open(void *self, int slot, int capacity, weft_err *err) {
    cpu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots) return weft_err_set(err, WEFT_EINVAL, "slot %d out of range", slot);
    if (b->states[slot]) return weft_err_set(err, WEFT_EINVAL, "slot %d is already open", slot);
    if (capacity < 1) return weft_err_set(err, WEFT_EINVAL, "capacity %d < 1", capacity);
    size_t bytes = b->fam.ops->state_bytes(b->fam.self, capacity);
    /* A slot keeps its memory between streams: allocating (and faulting in) a full-context state per request
     * cost more than the prefill. Only a larger capacity reallocates. */
    void *st = b->spare[slot];
    if (!st || b->spare_size[slot] < bytes) {
        free(st);
        b->spare[slot] = NULL;
        st = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!st)
            return weft_err_set(err, WEFT_ENOMEM, "cannot allocate %zu bytes of stream state (capacity %d)",
                                bytes, capacity);
        b->spare[slot] = st;
        b->spare_size[slot] = bytes;
    }
    b->fam.ops->state_init(b->fam.self, st, capacity);
    b->states[slot] = st;
    b->state_size[slot] = bytes;
    b->used_bytes += bytes;
    return WEFT_OK;
}

static void cpu_release(void *self, int slot) {
    cpu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots || !b->states[slot]) return;
    b->states[slot] = NULL; /* the memory stays in spare[slot] for the slot's next stream */
    b->used_bytes -= b->state_size[slot];
    b->state_size[slot] = 0;
}

static weft_status cpu_forward(void *self, weft_segment *segs, int n_segs, weft_err *err) {
    cpu_backend *b = self;
    int n = 0, n_out = 0;
    for (int s = 0; s < n_segs; s++) {
        const weft_segment *g = &segs[s];
        if (g->slot < 0 || g->slot >= b->max_slots || !b->states[g->slot])
            return weft_err_set(err, WEFT_EINVAL, "segment %d: slot %d is not open", s, g->slot);
        if (g->n_rows < 1 || g->n_draw < 0 || g->n_draw > g->n_rows)
            return weft_err_set(err, WEFT_EINVAL, "segment %d: %d rows, %d drawn", s, g->n_rows, g->n_draw);
        if (n + g->n_rows > b->max_rows)
            return weft_err_set(err, WEFT_EINVAL, "forward of more than %d rows", b->max_rows);
        for (int r = 0; r < g->n_rows; r++) {
            b->rows[n] = (weft_row){g->slot, g->start + r, g->seq[g->start + r]};
            if (r >= g->n_rows - g->n_draw) b->out_rows[n_out++] = n;
            n++;
        }
    }
    weft_status st =
        b->fam.ops->forward(b->fam.self, b->pool, b->states, b->rows, n, b->out_rows, n_out, b->logits, err);
    if (st) return st;
    int o = 0;
    for (int s = 0; s < n_segs; s++) {
        weft_segment *g = &segs[s];
        for (int j = 0; j < g->n_draw; j++, o++) {
            int r = g->n_rows - g->n_draw + j;
            int64_t pos = (int64_t)g->start + r + 1; /* position of the token being drawn */
            const float *z = b->logits + (size_t)o * (size_t)b->fam.vocab_size;
            weft_logprobs *lp = g->logprobs ? &g->logprobs[j] : NULL;
            g->draws[j] = weft_sample(b->sampler, z, g->sampling, g->seq, pos, g->n_prompt, lp);
        }
    }
    return WEFT_OK;
}

static weft_status cpu_keep(void *self, int slot, int cache_len, weft_err *err) {
    cpu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots || !b->states[slot])
        return weft_err_set(err, WEFT_EINVAL, "keep: slot %d is not open", slot);
    return b->fam.ops->keep(b->fam.self, b->pool, b->states[slot], cache_len, err);
}

static size_t cpu_snapshot_bytes(void *self, int pos) {
    cpu_backend *b = self;
    return b->fam.ops->snapshot_bytes ? b->fam.ops->snapshot_bytes(b->fam.self, pos) : 0;
}

static weft_status cpu_save(void *self, int slot, int pos, void *dst, size_t bytes, weft_err *err) {
    cpu_backend *b = self;
    if (!b->fam.ops->snapshot_save)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: no snapshots", b->fam.ops->name);
    if (slot < 0 || slot >= b->max_slots || !b->states[slot])
        return weft_err_set(err, WEFT_EINVAL, "save: slot %d is not open", slot);
    if (bytes != b->fam.ops->snapshot_bytes(b->fam.self, pos))
        return weft_err_set(err, WEFT_EINVAL, "save: %zu bytes given for a snapshot at %d", bytes, pos);
    return b->fam.ops->snapshot_save(b->fam.self, b->states[slot], pos, dst, err);
}

static weft_status cpu_restore(void *self, int slot, int pos, const void *src, size_t bytes, weft_err *err) {
    cpu_backend *b = self;
    if (!b->fam.ops->snapshot_restore)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: no snapshots", b->fam.ops->name);
    if (slot < 0 || slot >= b->max_slots || !b->states[slot])
        return weft_err_set(err, WEFT_EINVAL, "restore: slot %d is not open", slot);
    if (bytes != b->fam.ops->snapshot_bytes(b->fam.self, pos))
        return weft_err_set(err, WEFT_EINVAL, "restore: %zu bytes given for a snapshot at %d", bytes, pos);
    return b->fam.ops->snapshot_restore(b->fam.self, b->states[slot], pos, src, err);
}

static weft_status cpu_draft(void *self, int slot, const int32_t *seq, int n_tokens, int max_n, int32_t *out,
                             int *n_out, weft_err *err) {
    cpu_backend *b = self;
    *n_out = 0;
    if (slot < 0 || slot >= b->max_slots || !b->states[slot])
        return weft_err_set(err, WEFT_EINVAL, "draft: slot %d is not open", slot);
    if (max_n < 1) return WEFT_OK;
    return b->fam.ops->draft(b->fam.self, b->pool, b->states[slot], seq, n_tokens, max_n, out, n_out, err);
}

static weft_status cpu_draft_many(void *self, const weft_draft_req *reqs, int n, weft_err *err) {
    cpu_backend *b = self;
    if (n < 0 || n > b->max_slots)
        return weft_err_set(err, WEFT_EINVAL, "draft: %d requests for %d slots", n, b->max_slots);
    for (int i = 0; i < n; i++) {
        const weft_draft_req *q = &reqs[i];
        *q->n_out = 0;
        if (q->slot < 0 || q->slot >= b->max_slots || !b->states[q->slot])
            return weft_err_set(err, WEFT_EINVAL, "draft: slot %d (request %d) is not open", q->slot, i);
        b->dq[i] = (weft_family_draft){b->states[q->slot], q->seq, q->n_tokens, q->max_n, q->out, q->n_out};
    }
    if (n == 0) return WEFT_OK;
    if (b->fam.ops->draft_many) return b->fam.ops->draft_many(b->fam.self, b->pool, b->dq, n, err);
    for (int i = 0; i < n; i++) { /* a family without a batched head: one by one */
        const weft_family_draft *q = &b->dq[i];
        if (q->max_n < 1) continue;
        weft_status st = b->fam.ops->draft(b->fam.self, b->pool, q->state, q->seq, q->n_tokens, q->max_n,
                                           q->out, q->n_out, err);
        if (st) return st;
    }
    return WEFT_OK;
}

static void cpu_memory(void *self, size_t *used, size_t *free_bytes) {
    cpu_backend *b = self;
    if (used) *used = b->used_bytes + b->fam.weights_bytes;
    if (free_bytes) *free_bytes = 0; /* host memory: admission reads it from the OS (see weft_check_memory) */
}

static void cpu_destroy(void *self) {
    cpu_backend *b = self;
    if (!b) return;
    for (int s = 0; b->states && s < b->max_slots; s++) cpu_release(b, s);
    for (int s = 0; b->spare && s < b->max_slots; s++) free(b->spare[s]);
    free(b->spare);
    free(b->spare_size);
    if (b->fam.ops) b->fam.ops->destroy(b->fam.self);
    weft_pool_free(b->pool);
    weft_sampler_free(b->sampler);
    free(b->states);
    free(b->state_size);
    free(b->rows);
    free(b->out_rows);
    free(b->logits);
    free(b->dq);
    free(b);
}

static const weft_backend_ops CPU_OPS = {
    .name = "cpu",
    .open = cpu_open,
    .forward = cpu_forward,
    .keep = cpu_keep,
    .release = cpu_release,
    .memory = cpu_memory,
    .snapshot_bytes = cpu_snapshot_bytes,
    .save = cpu_save,
    .restore = cpu_restore,
    .destroy = cpu_destroy,
};

weft_status weft_cpu_backend_new(weft_family_model fam, const weft_cpu_backend_opts *opts, weft_backend *out,
                                 weft_err *err) {
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) {
        fam.ops->destroy(fam.self);
        return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    }
    b->fam = fam;
    b->max_slots = opts->max_slots > 0 ? opts->max_slots : 1;
    b->max_rows = fam.max_rows;
    size_t logit_bytes = (size_t)b->max_rows * (size_t)fam.vocab_size * sizeof(float);
    b->pool = weft_pool_new(opts->threads > 0 ? opts->threads : 1, fam.scratch_floats);
    b->states = calloc((size_t)b->max_slots, sizeof *b->states);
    b->state_size = calloc((size_t)b->max_slots, sizeof *b->state_size);
    b->spare = calloc((size_t)b->max_slots, sizeof *b->spare);
    b->spare_size = calloc((size_t)b->max_slots, sizeof *b->spare_size);
    b->rows = malloc((size_t)b->max_rows * sizeof *b->rows);
    b->out_rows = malloc((size_t)b->max_rows * sizeof *b->out_rows);
    b->logits = malloc(logit_bytes);
    b->dq = malloc((size_t)b->max_slots * sizeof *b->dq);
    b->sampler = weft_sampler_new(fam.vocab_size);
    /* Draws run after the forward, when the pool is idle: a draw over a large vocabulary splits its exp and
     * noise loops across it (same bits, weft/sampler.h). */
    int nth = b->pool ? weft_pool_threads(b->pool) : 1;
    if (b->sampler && nth > 1 &&
        weft_sampler_set_parallel(b->sampler, weft_pool_run_plain, b->pool,
                                  nth < WEFT_SAMPLER_MAX_TASKS ? nth : WEFT_SAMPLER_MAX_TASKS) != WEFT_OK) {
        weft_sampler_free(b->sampler);
        b->sampler = NULL;
    }
    if (!b->pool || !b->states || !b->state_size || !b->spare || !b->spare_size || !b->rows || !b->out_rows ||
        !b->logits || !b->dq || !b->sampler) {
        cpu_destroy(b);
        return weft_err_set(err, WEFT_ENOMEM,
                            "cannot allocate the CPU backend (%zu bytes of logits for %d rows)", logit_bytes,
                            fam.max_rows);
    }
    b->ops = CPU_OPS;
    b->ops.draft = fam.ops->draft ? cpu_draft : NULL;
    b->ops.draft_many = fam.ops->draft ? cpu_draft_many : NULL;
    out->ops = &b->ops;
    out->self = b;
    out->max_slots = b->max_slots;
    out->max_rows = b->max_rows;
    out->vocab_size = fam.vocab_size;
    return WEFT_OK;
}
