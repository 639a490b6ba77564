/* copy_drafter.c — copy drafts (SPEC §4.5 (a); weft/lanes.h, weft_copy_drafter_new).
 *
 * Each slot keeps an n-gram index over its stream's tokens: the n-gram of min_match tokens ending at
 * position p is hashed into a bucket; head[bucket] is the latest such p and prev[p] the one before it in the
 * same bucket (a chain, newest first). A proposal looks up the n-gram ending at the stream's last token,
 * walks the chain (comparing tokens, since buckets are shared), measures how far back each true occurrence
 * agrees with the present (up to MAX_EXTEND tokens), and copies what followed the longest one (ties: the
 * latest). When the copy runs into the present (a loop: the occurrence is the recent past), it repeats the
 * matched period. Tokens are committed for good, so the index only grows: each call indexes the tokens that
 * came since the last one. Nothing is allocated after construction; reset() clears a slot's heads.
 *
 * Why this pays: a reply that quotes, copies code or repeats a list continues text it already holds; a match
 * of min_match tokens or more predicts the next tokens often enough, and the engine's depth rule turns
 * drafting off for streams where it does not. */
#include "weft/lanes.h"

#include <stdlib.h>
#include <string.h>

#define MAX_EXTEND 64 /* longest match measured */

typedef struct cd_slot {
    int32_t *head; /* [table] latest n-gram end in the bucket, -1 = none */
    int32_t *prev; /* [capacity] previous n-gram end in the same bucket */
    int n_indexed; /* positions [0, n_indexed) have been indexed */
    int n_prompt;  /* n_prompt of the stream indexed, -1 after reset */
} cd_slot;

typedef struct copy_drafter {
    int max_slots, capacity, min_match, max_candidates;
    uint32_t mask; /* table - 1 */
    cd_slot *slots;
    int32_t *mem;
} copy_drafter;

void weft_drafter_free(weft_drafter *d) {
    if (!d) return;
    if (d->destroy) d->destroy(d->ctx);
    memset(d, 0, sizeof *d);
}

/* Hash of the k tokens ending at p (p >= k - 1). */
static uint32_t gram_hash(const int32_t *t, int p, int k) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int i = p - k + 1; i <= p; i++) {
        h ^= (uint64_t)(uint32_t)t[i] + 1;
        h *= 0x100000001B3ULL;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static void slot_clear(const copy_drafter *c, cd_slot *s) {
    memset(s->head, 0xFF, ((size_t)c->mask + 1) * sizeof *s->head); /* -1 everywhere */
    s->n_indexed = 0;
    s->n_prompt = -1;
}

static void cd_reset(void *ctx, int slot) {
    copy_drafter *c = ctx;
    if (slot >= 0 && slot < c->max_slots) slot_clear(c, &c->slots[slot]);
}

static int cd_propose(void *ctx, int slot, const int32_t *tokens, int n, int n_prompt, int32_t *out,
                      int max_n) {
    copy_drafter *c = ctx;
    int k = c->min_match;
    if (slot < 0 || slot >= c->max_slots || max_n < 1 || n < k + 1 || n > c->capacity) return 0;
    cd_slot *s = &c->slots[slot];
    /* A different stream in the slot without a reset, or tokens taken back: start over. */
    if (s->n_prompt != n_prompt || s->n_indexed > n - 1) {
        slot_clear(c, s);
        s->n_prompt = n_prompt;
    }
    /* Index every n-gram end but the last position, which is the query. */
    for (int p = s->n_indexed > k - 1 ? s->n_indexed : k - 1; p < n - 1; p++) {
        uint32_t b = gram_hash(tokens, p, k) & c->mask;
        s->prev[p] = s->head[b];
        s->head[b] = p;
    }
    if (n - 1 > s->n_indexed) s->n_indexed = n - 1;

    int q = n - 1, best = -1, best_len = 0, seen = 0;
    for (int p = s->head[gram_hash(tokens, q, k) & c->mask], steps = 0;
         p >= 0 && seen < c->max_candidates && steps < 4 * c->max_candidates; p = s->prev[p], steps++) {
        int len = 0;
        while (len < MAX_EXTEND && p - len >= 0 && tokens[p - len] == tokens[q - len]) len++;
        if (len < k) continue; /* another n-gram in the same bucket */
        seen++;
        if (len > best_len) {
            best_len = len;
            best = p;
        }
    }
    if (best < 0) return 0;
    /* Copy what followed; past the present, repeat the period q - best. */
    for (int j = 0; j < max_n; j++) {
        int src = best + 1 + j;
        out[j] = src < n ? tokens[src] : out[src - n];
    }
    return max_n;
}

static void cd_destroy(void *ctx) {
    copy_drafter *c = ctx;
    if (!c) return;
    free(c->mem);
    free(c->slots);
    free(c);
}

weft_status weft_copy_drafter_new(const weft_copy_drafter_config *cfg, weft_drafter *out, weft_err *err) {
    memset(out, 0, sizeof *out);
    if (!cfg) return weft_err_set(err, WEFT_EINVAL, "copy drafter: config is required");
    if (cfg->max_slots < 1 || cfg->max_slots > 65536)
        return weft_err_set(err, WEFT_EINVAL, "copy drafter: max_slots %d must be in 1..65536",
                            cfg->max_slots);
    if (cfg->capacity < 2 || cfg->capacity > (1 << 28))
        return weft_err_set(err, WEFT_EINVAL, "copy drafter: capacity %d must be in 2..2^28", cfg->capacity);
    int min_match = cfg->min_match ? cfg->min_match : 3;
    if (min_match < 1 || min_match > 32)
        return weft_err_set(err, WEFT_EINVAL, "copy drafter: min_match %d must be in 1..32", cfg->min_match);
    int max_cand = cfg->max_candidates ? cfg->max_candidates : 8;
    if (max_cand < 1 || max_cand > 64)
        return weft_err_set(err, WEFT_EINVAL, "copy drafter: max_candidates %d must be in 1..64",
                            cfg->max_candidates);
    size_t table = 1;
    while (table < (size_t)cfg->capacity) table <<= 1;
    size_t per_slot = table + (size_t)cfg->capacity;
    copy_drafter *c = calloc(1, sizeof *c);
    if (c) {
        c->slots = calloc((size_t)cfg->max_slots, sizeof *c->slots);
        c->mem = malloc(per_slot * (size_t)cfg->max_slots * sizeof *c->mem);
    }
    if (!c || !c->slots || !c->mem) {
        cd_destroy(c);
        return weft_err_set(err, WEFT_ENOMEM, "copy drafter: out of memory for %d slots x %zu bytes",
                            cfg->max_slots, per_slot * sizeof(int32_t));
    }
    c->max_slots = cfg->max_slots;
    c->capacity = cfg->capacity;
    c->min_match = min_match;
    c->max_candidates = max_cand;
    c->mask = (uint32_t)(table - 1);
    for (int i = 0; i < cfg->max_slots; i++) {
        cd_slot *s = &c->slots[i];
        s->head = c->mem + (size_t)i * per_slot;
        s->prev = s->head + table;
        slot_clear(c, s);
    }
    out->ctx = c;
    out->propose = cd_propose;
    out->reset = cd_reset;
    out->destroy = cd_destroy;
    return WEFT_OK;
}
