/* fake_backend.c — a history-sensitive backend for the lane core's tests (weft/lanes.h, "fake backend").
 *
 * Model: slot state is a rolling hash over every token fed, h[p + 1] = step(h[p], seq[p]); the logits of the
 * row at position p are a function of h[p + 1] only, so of the whole history seq[0..p]. A batching, ordering,
 * chunking or rollback bug therefore changes the tokens, while a correct host gets the same tokens however it
 * cuts and mixes rows (rows are independent by construction, as SPEC §4.3.1 asks of real backends). It keeps
 * its own copy of every token fed, so it can check that the host's seq agrees with it, and that each segment
 * starts exactly at the slot's cache_len. Its prompt-cache snapshot of a slot is that copy and the hashes; a
 * restore checks that they agree, and is only allowed into a freshly opened slot. */
#include "weft/lanes.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fake_slot {
    bool open;
    int capacity;
    int cache_len;
    int n_prompt;  /* as first seen in a segment; -1 before */
    int32_t *toks; /* [capacity] fed tokens */
    uint64_t *h;   /* [capacity + 1] h[p] = hash of toks[0..p) */
} fake_slot;

typedef struct fake {
    weft_fake_config cfg;
    pthread_mutex_t mu;
    fake_slot *slots; /* [max_slots] */
    int *call_mark;   /* [max_slots] forward number that last used the slot */
    float *raw;       /* [vocab] work */
    weft_sampler *sampler;
    weft_fake_stats st;
    void (*hook)(void *, const weft_segment *, int);
    void *hook_ctx;
    int fail_open_after, fail_forward_after;
    int fail_save_after, fail_restore_after;
} fake;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

static uint64_t hash_init(uint64_t salt) {
    return mix64(salt ^ 0x5EEDF00DCAFEULL);
}
static uint64_t hash_step(uint64_t h, int32_t t) {
    return mix64(h ^ ((uint64_t)(uint32_t)t + 1) * 0x9E3779B97F4A7C15ULL);
}

/* Raw logits of a row whose history hashes to h: 24-bit values spread over [-4, 4). */
static void row_logits(uint64_t h, uint64_t salt, int vocab, float *z) {
    for (int i = 0; i < vocab; i++) {
        uint64_t x = mix64(h ^ salt ^ ((uint64_t)i + 1) * 0xD1B54A32D192ED03ULL);
        z[i] = (float)((double)(x >> 40) * (8.0 / 16777216.0) - 4.0);
    }
}

/* The "induction head" of a fake with copy_bias > 0: when the last two tokens of seq[0..p] occurred before,
 * the token that followed their latest earlier occurrence gets copy_bias added, so the fake continues text it
 * has seen (as real models do) and copy drafts get accepted. Still a function of seq[0..p] only. */
static void copy_boost(const int32_t *seq, int p, double bias, float *z) {
    if (bias <= 0 || p < 2) return;
    for (int j = p - 1; j >= 1; j--)
        if (seq[j] == seq[p] && seq[j - 1] == seq[p - 1]) {
            z[seq[j + 1]] = (float)((double)z[seq[j + 1]] + bias);
            return;
        }
}

static weft_status violation(fake *f, weft_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static weft_status violation(fake *f, weft_err *err, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (f->st.violations++ == 0) snprintf(f->st.first_violation, sizeof f->st.first_violation, "%s", msg);
    return weft_err_set(err, WEFT_EINTERNAL, "fake backend: %s", msg);
}

static weft_status fake_open(void *self, int slot, int capacity, weft_err *err) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    weft_status st = WEFT_OK;
    if (slot < 0 || slot >= f->cfg.max_slots) {
        st = violation(f, err, "open: slot %d outside 0..%d", slot, f->cfg.max_slots - 1);
    } else if (f->slots[slot].open) {
        st = violation(f, err, "open: slot %d is already open", slot);
    } else if (capacity < 1) {
        st = violation(f, err, "open: capacity %d", capacity);
    } else if (f->fail_open_after > 0 && --f->fail_open_after == 0) {
        st = weft_err_set(err, WEFT_ENOMEM, "fake backend: injected: no memory for a stream of %d positions",
                          capacity);
    } else {
        fake_slot *s = &f->slots[slot];
        s->toks = malloc((size_t)capacity * sizeof *s->toks);
        s->h = malloc(((size_t)capacity + 1) * sizeof *s->h);
        if (!s->toks || !s->h) {
            free(s->toks);
            free(s->h);
            s->toks = NULL;
            s->h = NULL;
            st = weft_err_set(err, WEFT_ENOMEM, "fake backend: out of memory for %d positions", capacity);
        } else {
            s->open = true;
            s->capacity = capacity;
            s->cache_len = 0;
            s->n_prompt = -1;
            s->h[0] = hash_init(f->cfg.salt);
            f->st.opens++;
            f->st.open_slots++;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

/* Checks one segment against the slot's state and the call; f->mu held. */
static weft_status check_segment(fake *f, const weft_segment *g, int call, weft_err *err) {
    if (g->slot < 0 || g->slot >= f->cfg.max_slots) return violation(f, err, "forward: slot %d", g->slot);
    fake_slot *s = &f->slots[g->slot];
    if (!s->open) return violation(f, err, "forward: slot %d is not open", g->slot);
    if (f->call_mark[g->slot] == call)
        return violation(f, err, "forward: slot %d twice in one call", g->slot);
    f->call_mark[g->slot] = call;
    if (g->start != s->cache_len)
        return violation(f, err, "forward: slot %d segment starts at %d but %d rows are cached", g->slot,
                         g->start, s->cache_len);
    if (g->n_rows < 1 || g->start + g->n_rows > s->capacity)
        return violation(f, err, "forward: slot %d rows %d..%d past capacity %d", g->slot, g->start,
                         g->start + g->n_rows, s->capacity);
    if (g->n_draw < 0 || g->n_draw > g->n_rows || (g->n_draw > 0 && (!g->draws || !g->sampling)))
        return violation(f, err, "forward: slot %d n_draw %d of %d rows", g->slot, g->n_draw, g->n_rows);
    if (g->n_prompt < 1 || (s->n_prompt >= 0 && g->n_prompt != s->n_prompt))
        return violation(f, err, "forward: slot %d n_prompt %d (was %d)", g->slot, g->n_prompt, s->n_prompt);
    if (!g->seq) return violation(f, err, "forward: slot %d without seq", g->slot);
    weft_err serr;
    if (g->n_draw > 0 && weft_sampling_validate(g->sampling, f->cfg.vocab_size, &serr) != WEFT_OK)
        return violation(f, err, "forward: slot %d sampling: %.200s", g->slot, serr.msg);
    for (int p = 0; p < g->start; p++)
        if (g->seq[p] != s->toks[p])
            return violation(f, err, "forward: slot %d seq[%d] = %d but %d was fed there", g->slot, p,
                             g->seq[p], s->toks[p]);
    for (int p = g->start; p < g->start + g->n_rows; p++)
        if (g->seq[p] < 0 || g->seq[p] >= f->cfg.vocab_size)
            return violation(f, err, "forward: slot %d seq[%d] = %d outside the vocab", g->slot, p,
                             g->seq[p]);
    return WEFT_OK;
}

static weft_status fake_forward(void *self, weft_segment *segs, int n_segs, weft_err *err) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    void (*hook)(void *, const weft_segment *, int) = f->hook;
    void *hook_ctx = f->hook_ctx;
    pthread_mutex_unlock(&f->mu);
    if (hook) hook(hook_ctx, segs, n_segs);
    if (f->cfg.forward_delay_s > 0) {
        struct timespec ts = {(time_t)f->cfg.forward_delay_s,
                              (long)((f->cfg.forward_delay_s - floor(f->cfg.forward_delay_s)) * 1e9)};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&f->mu);
    weft_status st = WEFT_OK;
    int call = f->st.forwards + 1, rows = 0;
    if (n_segs < 1 || n_segs > f->cfg.max_slots) st = violation(f, err, "forward: %d segments", n_segs);
    for (int k = 0; st == WEFT_OK && k < n_segs; k++) {
        st = check_segment(f, &segs[k], call, err);
        rows += segs[k].n_rows;
    }
    if (st == WEFT_OK && rows > f->cfg.max_rows)
        st = violation(f, err, "forward: %d rows past max_rows %d", rows, f->cfg.max_rows);
    if (st == WEFT_OK && f->fail_forward_after > 0 && --f->fail_forward_after == 0)
        st = weft_err_set(err, WEFT_EIO, "fake backend: injected forward failure");
    if (st != WEFT_OK) {
        /* Mark the call as used so a retry does not trip the "twice in one call" check spuriously. */
        f->st.forwards++;
        pthread_mutex_unlock(&f->mu);
        return st;
    }
    f->st.forwards++;
    f->st.rows += rows;
    if (n_segs > f->st.max_segments) f->st.max_segments = n_segs;
    if (rows > f->st.max_call_rows) f->st.max_call_rows = rows;
    int vocab = f->cfg.vocab_size;
    for (int k = 0; k < n_segs; k++) {
        const weft_segment *g = &segs[k];
        fake_slot *s = &f->slots[g->slot];
        s->n_prompt = g->n_prompt;
        for (int r = 0; r < g->n_rows; r++) {
            int p = g->start + r;
            s->toks[p] = g->seq[p];
            s->h[p + 1] = hash_step(s->h[p], g->seq[p]);
            int d = r - (g->n_rows - g->n_draw);
            if (d < 0) continue;
            row_logits(s->h[p + 1], f->cfg.salt, vocab, f->raw);
            copy_boost(s->toks, p, f->cfg.copy_bias, f->raw);
            int32_t t = weft_sample(f->sampler, f->raw, g->sampling, g->seq, p + 1, g->n_prompt,
                                    g->logprobs ? &g->logprobs[d] : NULL);
            if (t < 0) {
                /* Bad settings are the host's to refuse before a forward: count it as a violation. */
                st = violation(f, err, "forward: slot %d draw at %d: %s", g->slot, p + 1,
                               weft_sampler_error(f->sampler)->msg);
                pthread_mutex_unlock(&f->mu);
                return st;
            }
            g->draws[d] = t;
        }
        s->cache_len = g->start + g->n_rows;
    }
    pthread_mutex_unlock(&f->mu);
    return WEFT_OK;
}

static weft_status fake_keep(void *self, int slot, int cache_len, weft_err *err) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    weft_status st = WEFT_OK;
    if (slot < 0 || slot >= f->cfg.max_slots || !f->slots[slot].open)
        st = violation(f, err, "keep: slot %d is not open", slot);
    else if (cache_len < 0 || cache_len > f->slots[slot].cache_len)
        st = violation(f, err, "keep: slot %d keep %d of %d rows", slot, cache_len, f->slots[slot].cache_len);
    else {
        if (cache_len < f->slots[slot].cache_len) f->st.keeps++;
        f->slots[slot].cache_len = cache_len;
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static void fake_release(void *self, int slot) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    if (slot < 0 || slot >= f->cfg.max_slots || !f->slots[slot].open) {
        violation(f, NULL, "release: slot %d is not open", slot);
    } else {
        fake_slot *s = &f->slots[slot];
        free(s->toks);
        free(s->h);
        memset(s, 0, sizeof *s);
        f->st.releases++;
        f->st.open_slots--;
    }
    pthread_mutex_unlock(&f->mu);
}

/* ---- snapshots: a header, the tokens fed [0, pos) and the history hashes h[0..pos] ---- */
#define SNAP_MAGIC 0x50414E53454B4146ULL /* "FAKESNAP" */
#define SNAP_HDR   24                    /* magic, pos, salt (u64 each) */

static size_t fake_snapshot_bytes(void *self, int pos) {
    (void)self;
    if (pos < 0) return 0;
    return SNAP_HDR + (size_t)pos * sizeof(int32_t) + ((size_t)pos + 1) * sizeof(uint64_t);
}

static weft_status fake_save(void *self, int slot, int pos, void *dst, size_t bytes, weft_err *err) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    weft_status st = WEFT_OK;
    if (slot < 0 || slot >= f->cfg.max_slots || !f->slots[slot].open)
        st = violation(f, err, "save: slot %d is not open", slot);
    else if (pos != f->slots[slot].cache_len)
        st = violation(f, err, "save: slot %d at %d but %d rows are cached", slot, pos,
                       f->slots[slot].cache_len);
    else if (!dst || bytes != fake_snapshot_bytes(f, pos))
        st = violation(f, err, "save: slot %d: %zu bytes for a snapshot at %d", slot, bytes, pos);
    else if (f->fail_save_after > 0 && --f->fail_save_after == 0) {
        f->st.snapshot_faults++;
        st = weft_err_set(err, WEFT_EIO, "fake backend: injected save failure");
    } else {
        const fake_slot *s = &f->slots[slot];
        uint64_t hdr[3] = {SNAP_MAGIC, (uint64_t)pos, f->cfg.salt};
        char *out = dst;
        memcpy(out, hdr, SNAP_HDR);
        memcpy(out + SNAP_HDR, s->toks, (size_t)pos * sizeof(int32_t));
        memcpy(out + SNAP_HDR + (size_t)pos * sizeof(int32_t), s->h, ((size_t)pos + 1) * sizeof(uint64_t));
        if (f->st.n_save_log < 64) f->st.save_log[f->st.n_save_log++] = pos;
        f->st.saves++;
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static weft_status fake_restore(void *self, int slot, int pos, const void *src, size_t bytes, weft_err *err) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    weft_status st = WEFT_OK;
    fake_slot *s = slot >= 0 && slot < f->cfg.max_slots ? &f->slots[slot] : NULL;
    if (!s || !s->open) {
        st = violation(f, err, "restore: slot %d is not open", slot);
    } else if (s->cache_len != 0 || s->n_prompt != -1) {
        st = violation(f, err, "restore: slot %d is not freshly opened (%d rows cached)", slot, s->cache_len);
    } else if (pos < 0 || pos > s->capacity || !src || bytes != fake_snapshot_bytes(f, pos)) {
        st = violation(f, err, "restore: slot %d: %zu bytes at %d (capacity %d)", slot, bytes, pos,
                       s->capacity);
    } else {
        const char *in = src;
        uint64_t hdr[3];
        memcpy(hdr, in, SNAP_HDR);
        memcpy(s->toks, in + SNAP_HDR, (size_t)pos * sizeof(int32_t));
        memcpy(s->h, in + SNAP_HDR + (size_t)pos * sizeof(int32_t), ((size_t)pos + 1) * sizeof(uint64_t));
        /* The hashes must follow from the tokens: a corrupt snapshot is refused, not used. */
        bool consistent = hdr[0] == SNAP_MAGIC && hdr[1] == (uint64_t)pos && hdr[2] == f->cfg.salt &&
                          s->h[0] == hash_init(f->cfg.salt);
        for (int p = 0; consistent && p < pos; p++)
            consistent = s->toks[p] >= 0 && s->toks[p] < f->cfg.vocab_size &&
                         s->h[p + 1] == hash_step(s->h[p], s->toks[p]);
        if (f->fail_restore_after > 0 && --f->fail_restore_after == 0) {
            /* Half a copy: wrong tokens stand in the slot. */
            for (int p = 0; p < pos; p++) {
                s->toks[p] = (s->toks[p] + 1) % f->cfg.vocab_size;
                s->h[p + 1] = hash_step(s->h[p], s->toks[p]);
            }
            s->cache_len = pos;
            f->st.snapshot_faults++;
            st = weft_err_set(err, WEFT_EIO, "fake backend: injected restore failure");
        } else if (!consistent) {
            s->h[0] = hash_init(f->cfg.salt);
            st = weft_err_set(err, WEFT_EFORMAT, "fake backend: restore: slot %d: corrupt snapshot at %d",
                              slot, pos);
        } else {
            s->cache_len = pos;
            f->st.restores++;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

static void fake_memory(void *self, size_t *used, size_t *free_bytes) {
    fake *f = self;
    pthread_mutex_lock(&f->mu);
    size_t u = 1u << 20;
    for (int i = 0; i < f->cfg.max_slots; i++)
        if (f->slots[i].open) u += (size_t)f->slots[i].capacity * (sizeof(int32_t) + sizeof(uint64_t));
    pthread_mutex_unlock(&f->mu);
    *used = u;
    *free_bytes = (size_t)64 << 20;
}

static void fake_destroy(void *self) {
    fake *f = self;
    if (!f) return;
    for (int i = 0; i < f->cfg.max_slots; i++) {
        free(f->slots[i].toks);
        free(f->slots[i].h);
    }
    pthread_mutex_destroy(&f->mu);
    free(f->slots);
    free(f->call_mark);
    free(f->raw);
    weft_sampler_free(f->sampler);
    free(f);
}

static const weft_backend_ops FAKE_OPS = {
    .name = "fake",
    .open = fake_open,
    .forward = fake_forward,
    .keep = fake_keep,
    .release = fake_release,
    .memory = fake_memory,
    .snapshot_bytes = fake_snapshot_bytes,
    .save = fake_save,
    .restore = fake_restore,
    .destroy = fake_destroy,
};

weft_status weft_fake_backend_new(const weft_fake_config *cfg, weft_backend *out, weft_err *err) {
    memset(out, 0, sizeof *out);
    if (!cfg || cfg->max_slots < 1 || cfg->max_rows < 1 || cfg->vocab_size < 2 || cfg->vocab_size > 4096 ||
        cfg->forward_delay_s < 0 || !(cfg->copy_bias >= 0))
        return weft_err_set(err, WEFT_EINVAL, "fake backend: max_slots >= 1, max_rows >= 1, vocab 2..4096");
    fake *f = calloc(1, sizeof *f);
    if (!f) return weft_err_set(err, WEFT_ENOMEM, "fake backend: out of memory");
    f->cfg = *cfg;
    f->slots = calloc((size_t)cfg->max_slots, sizeof *f->slots);
    f->call_mark = calloc((size_t)cfg->max_slots, sizeof *f->call_mark);
    f->raw = calloc((size_t)cfg->vocab_size, sizeof *f->raw);
    f->sampler = weft_sampler_new(cfg->vocab_size);
    if (!f->slots || !f->call_mark || !f->raw || !f->sampler || pthread_mutex_init(&f->mu, NULL) != 0) {
        free(f->slots);
        free(f->raw);
        free(f->call_mark);
        weft_sampler_free(f->sampler);
        free(f);
        return weft_err_set(err, WEFT_ENOMEM, "fake backend: out of memory");
    }
    out->ops = &FAKE_OPS;
    out->self = f;
    out->max_slots = cfg->max_slots;
    out->max_rows = cfg->max_rows;
    out->vocab_size = cfg->vocab_size;
    return WEFT_OK;
}

void weft_fake_get_stats(const weft_backend *b, weft_fake_stats *out) {
    fake *f = b->self;
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    pthread_mutex_unlock(&f->mu);
}

void weft_fake_set_hook(weft_backend *b, void (*on_forward)(void *ctx, const weft_segment *segs, int n),
                        void *ctx) {
    fake *f = b->self;
    pthread_mutex_lock(&f->mu);
    f->hook = on_forward;
    f->hook_ctx = ctx;
    pthread_mutex_unlock(&f->mu);
}

void weft_fake_set_faults(weft_backend *b, int fail_open_after, int fail_forward_after) {
    fake *f = b->self;
    pthread_mutex_lock(&f->mu);
    f->fail_open_after = fail_open_after;
    f->fail_forward_after = fail_forward_after;
    pthread_mutex_unlock(&f->mu);
}

void weft_fake_set_snapshot_faults(weft_backend *b, int fail_save_after, int fail_restore_after) {
    fake *f = b->self;
    pthread_mutex_lock(&f->mu);
    f->fail_save_after = fail_save_after;
    f->fail_restore_after = fail_restore_after;
    pthread_mutex_unlock(&f->mu);
}

int32_t weft_fake_next(const weft_backend *b, const int32_t *seq, int n_prompt, int pos,
                       const weft_sampling *sampling, weft_logprobs *lp) {
    const fake *f = b->self;
    int vocab = f->cfg.vocab_size;
    if (!seq || !sampling || pos < 0 || n_prompt < 1) return -1;
    uint64_t h = hash_init(f->cfg.salt);
    for (int p = 0; p <= pos; p++) {
        if (seq[p] < 0 || seq[p] >= vocab) return -1;
        h = hash_step(h, seq[p]);
    }
    float raw[4096];
    row_logits(h, f->cfg.salt, vocab, raw);
    copy_boost(seq, pos, f->cfg.copy_bias, raw);
    /* A sampler of its own: the oracle may run on any thread, beside the engine's forwards. */
    weft_sampler *smp = weft_sampler_new(vocab);
    if (!smp) return -1;
    int32_t t = weft_sample(smp, raw, sampling, seq, pos + 1, n_prompt, lp);
    weft_sampler_free(smp);
    return t;
}
