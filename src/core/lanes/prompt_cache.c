/* prompt_cache.c — the prompt cache (SPEC §4.4) on the engine thread.
 *
 * An entry is the backend's snapshot of one stream at position len (KV rows [0, len) and every recurrent
 * state), copied into host memory and keyed by the stream's exact tokens [0, len): a 64-bit prefix hash
 * finds candidates, a full compare decides. States are saved only where the position depends on the tokens
 * alone: every `grid` tokens from 0, at prompt_len - 1, and at the end of a finished reply. prompt_len - 1
 * and not prompt_len because the first reply token is drawn from the last prompt row, which must be fed in
 * the request's own forward: a full-prompt hit restores prompt_len - 1 rows and feeds the last one. Prefill
 * chunks end at every save point (lanes_cache_cut), so the stream's caches stand exactly there when saved.
 *
 * Why resumed == fresh (SPEC §4.3.5): the backend promises chunk invariance (a prompt's caches are the same
 * bits however it is cut) and that restore + feeding the rest equals feeding it all; the key is the exact
 * token prefix; and every draw is still keyed by its absolute position. So a restored prefix only saves the
 * work of computing rows the stream would compute identically.
 *
 * Budget: every entry is charged its snapshot bytes, its key and its header; a save evicts until it fits or
 * gives up (never going over the budget). Victims: unpinned entries that a newer entry extends and that were
 * never resumed (one stream's intermediate grid points), least recently used first; then any unpinned entry,
 * least recently used first. Pinned entries (a stream resuming from them, until its prompt is in) stay. */
#include "lanes_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

/* ph[i] = hash of toks[0..i), i = 0..n. */
static void prefix_hashes(uint64_t *ph, const int32_t *toks, int n) {
    ph[0] = 0x243F6A8885A308D3ULL;
    for (int i = 0; i < n; i++)
        ph[i + 1] = mix64(ph[i] ^ ((uint64_t)(uint32_t)toks[i] + 1) * 0x9E3779B97F4A7C15ULL);
}

static void publish(weft_engine *e) {
    const lanes_pcache *pc = e->pc;
    pthread_mutex_lock(&e->mu);
    weft_engine_stats *t = &e->totals;
    t->prompt_tokens_cached_total = pc->cached_tokens;
    t->prefix_cache_queries = pc->queries;
    t->prefix_cache_hits = pc->cached_tokens;
    t->prompt_cache_lookups = pc->lookups;
    t->prompt_cache_hit_requests = pc->hit_requests;
    t->prompt_cache_saves = pc->saves;
    t->prompt_cache_evictions = pc->evictions;
    t->prompt_cache_failures = pc->failures;
    t->prompt_cache_bytes = pc->used;
    t->prompt_cache_budget = pc->budget;
    t->prompt_cache_entries = pc->n_entries;
    pthread_mutex_unlock(&e->mu);
}

static void entry_free(pc_entry *x) {
    if (!x) return;
    free(x->toks);
    free(x->data);
    free(x);
}

/* Unlinks x and frees it. */
static void remove_entry(lanes_pcache *pc, pc_entry *x) {
    for (pc_entry **pp = &pc->head; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            pc->used -= x->charged;
            pc->n_entries--;
            entry_free(x);
            return;
        }
}

/* Evicts one unpinned entry (see the header comment for the order). False when every entry is pinned. */
static bool evict_one(lanes_pcache *pc) {
    pc_entry *victim = NULL;
    bool victim_first = false;
    for (pc_entry *x = pc->head; x; x = x->next) {
        if (x->pins > 0) continue;
        bool first = x->extended && x->hits == 0;
        if (!victim || (first && !victim_first) || (first == victim_first && x->used < victim->used)) {
            victim = x;
            victim_first = first;
        }
    }
    if (!victim) return false;
    remove_entry(pc, victim);
    pc->evictions++;
    return true;
}

weft_status lanes_cache_new(weft_engine *e, size_t budget, int grid, weft_err *err) {
    e->pc = NULL;
    const weft_backend_ops *ops = e->be->ops;
    if (budget == 0) return WEFT_OK;
    /* A backend without snapshots serves without the cache (SPEC §4.2: the host adapts). */
    if (!ops->snapshot_bytes || !ops->save || !ops->restore || ops->snapshot_bytes(e->be->self, 1) == 0)
        return WEFT_OK;
    lanes_pcache *pc = calloc(1, sizeof *pc);
    uint64_t *ph = malloc(((size_t)e->capacity + 1) * sizeof *ph);
    if (!pc || !ph) {
        free(pc);
        free(ph);
        return weft_err_set(err, WEFT_ENOMEM, "engine: out of memory for the prompt cache");
    }
    pc->budget = budget;
    pc->grid = grid;
    pc->ph = ph;
    e->pc = pc;
    publish(e);
    return WEFT_OK;
}

void lanes_cache_free(weft_engine *e) {
    lanes_pcache *pc = e->pc;
    if (!pc) return;
    while (pc->head) {
        pc_entry *x = pc->head;
        pc->head = x->next;
        entry_free(x);
    }
    free(pc->ph);
    free(pc);
    e->pc = NULL;
}

weft_status lanes_cache_resume(weft_engine *e, int slot, weft_err *err) {
    lanes_pcache *pc = e->pc;
    if (!pc) return WEFT_OK;
    lane *l = &e->lanes[slot];
    const weft_request_handle *r = l->req;
    int max_len = r->n_prompt - 1; /* the last prompt row is fed by the request itself */
    pc->lookups++;
    pc->queries += (uint64_t)r->n_prompt;
    pc_entry *best = NULL;
    if (max_len >= 1) {
        prefix_hashes(pc->ph, r->seq, max_len);
        for (pc_entry *x = pc->head; x; x = x->next)
            if (x->len <= max_len && (!best || x->len > best->len) && x->hash == pc->ph[x->len] &&
                memcmp(x->toks, r->seq, (size_t)x->len * sizeof *x->toks) == 0)
                best = x;
    }
    if (!best) {
        publish(e);
        return WEFT_OK;
    }
    weft_err rerr = {0};
    best->pins++;
    weft_status st = e->be->ops->restore(e->be->self, slot, best->len, best->data, best->snap_bytes, &rerr);
    if (st == WEFT_OK) {
        best->used = ++pc->clock;
        best->hits++;
        l->cache_len = best->len;
        l->cached = best->len;
        l->pin = best;
        pc->hit_requests++;
        pc->cached_tokens += (uint64_t)best->len;
        publish(e);
        return WEFT_OK;
    }
    /* The slot may hold half a copy: drop the entry, reopen the slot and prefill from 0. */
    best->pins--;
    fprintf(stderr, "weft: prompt cache: restoring %d tokens into slot %d failed (%s); prefilling from 0\n",
            best->len, slot, rerr.msg);
    pc->failures++;
    remove_entry(pc, best);
    publish(e);
    e->be->ops->release(e->be->self, slot);
    return e->be->ops->open(e->be->self, slot, e->capacity, err);
}

int lanes_cache_cut(const weft_engine *e, const lane *l, int rows) {
    if (!e->pc) return rows;
    int c = l->cache_len;
    int64_t grid = e->pc->grid;
    int64_t g = ((int64_t)c / grid + 1) * grid; /* next grid point after c */
    if (g - c < rows) rows = (int)(g - c);
    int end = l->req->n_prompt - 1;
    if (end > c && end - c < rows) rows = end - c;
    return rows;
}

/* Saves the slot's state at len = its cache_len under the key toks[0..len). */
static void cache_save(weft_engine *e, int slot, const int32_t *toks, int len) {
    lanes_pcache *pc = e->pc;
    if (len < 1) return;
    prefix_hashes(pc->ph, toks, len);
    uint64_t h = pc->ph[len];
    for (pc_entry *x = pc->head; x; x = x->next)
        if (x->len == len && x->hash == h && memcmp(x->toks, toks, (size_t)len * sizeof *toks) == 0) {
            x->used = ++pc->clock; /* already held: refresh it */
            return;
        }
    size_t sb = e->be->ops->snapshot_bytes(e->be->self, len);
    size_t charged = sb + (size_t)len * sizeof *toks + sizeof(pc_entry);
    if (sb == 0 || charged > pc->budget) return;
    while (pc->used + charged > pc->budget)
        if (!evict_one(pc)) {
            publish(e);
            return;
        }
    pc_entry *x = calloc(1, sizeof *x);
    if (x) {
        x->toks = malloc((size_t)len * sizeof *toks);
        x->data = malloc(sb);
    }
    weft_err err = {0};
    weft_status st =
        x && x->toks && x->data ? WEFT_OK : weft_err_set(&err, WEFT_ENOMEM, "out of host memory");
    if (st == WEFT_OK) st = e->be->ops->save(e->be->self, slot, len, x->data, sb, &err);
    if (st != WEFT_OK) {
        fprintf(stderr,
                "weft: prompt cache: saving %d tokens of slot %d (%zu bytes) failed (%s); not cached\n", len,
                slot, sb, err.msg);
        pc->failures++;
        entry_free(x);
        publish(e);
        return;
    }
    memcpy(x->toks, toks, (size_t)len * sizeof *toks);
    x->hash = h;
    x->len = len;
    x->snap_bytes = sb;
    x->charged = charged;
    x->used = ++pc->clock;
    /* Mark extension both ways (eviction prefers extended, never-resumed entries). */
    for (pc_entry *y = pc->head; y; y = y->next) {
        if (y->len < len && y->hash == pc->ph[y->len] &&
            memcmp(y->toks, toks, (size_t)y->len * sizeof *toks) == 0)
            y->extended = true;
        else if (y->len > len && memcmp(y->toks, toks, (size_t)len * sizeof *toks) == 0)
            x->extended = true;
    }
    x->next = pc->head;
    pc->head = x;
    pc->used += charged;
    pc->n_entries++;
    pc->saves++;
    publish(e);
}

void lanes_cache_after_prefill(weft_engine *e, int slot) {
    lanes_pcache *pc = e->pc;
    if (!pc) return;
    lane *l = &e->lanes[slot];
    const weft_request_handle *r = l->req;
    int c = l->cache_len;
    if (c > l->cached && (c % pc->grid == 0 || c == r->n_prompt - 1)) cache_save(e, slot, r->seq, c);
    if (l->n_gen > 0) lanes_cache_unpin(l);
}

void lanes_cache_after_reply(weft_engine *e, int slot) {
    if (!e->pc) return;
    lane *l = &e->lanes[slot];
    const weft_request_handle *r = l->req;
    /* The reply's last token is committed but was never fed: the state covers the tokens before it. A
     * window that ended early (EOS or the stop hook before its last kept draft) fed rows past that point:
     * roll back first. */
    int pos = r->n_prompt + l->n_gen - 1;
    if (pos < 1 || pos > l->cache_len) return;
    if (pos < l->cache_len) {
        weft_err err = {0};
        if (e->be->ops->keep(e->be->self, slot, pos, &err) != WEFT_OK) return;
        l->cache_len = pos;
    }
    cache_save(e, slot, r->seq, pos);
}

void lanes_cache_unpin(lane *l) {
    if (l->pin) {
        l->pin->pins--;
        l->pin = NULL;
    }
}
