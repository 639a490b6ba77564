/* Small containers for the tokenizer: a growable byte buffer, a text -> id hash map that keys on the
 * tokenizer's own token texts, and an (id, id) -> (rank, id) map for BPE merges. Open addressing with
 * linear probing at a load factor <= 1/2; sizes are powers of two. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

weft_status tok_buf_reserve(tok_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return WEFT_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra) {
        if (cap > SIZE_MAX / 2) return WEFT_ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return WEFT_ENOMEM;
    b->p = p;
    b->cap = cap;
    return WEFT_OK;
}

weft_status tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (tok_buf_reserve(b, n)) return WEFT_ENOMEM;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return WEFT_OK;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* FNV-1a, 32-bit: token texts are short, and this is enough spread for a half-full table. */
uint32_t tok_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

static uint32_t table_size(size_t expected) {
    uint32_t size = 16;
    while (size < expected * 2 + 1 && size < (1u << 31)) size *= 2;
    return size;
}

weft_status tok_map_init(tok_map *m, size_t expected) {
    uint32_t size = table_size(expected);
    m->slots = calloc(size, sizeof *m->slots);
    if (!m->slots) return WEFT_ENOMEM;
    m->mask = size - 1;
    m->count = 0;
    return WEFT_OK;
}

static bool same_text(const struct weft_tokenizer *t, int32_t id, const char *s, size_t n) {
    return t->len[id] == n && (n == 0 || memcmp(tok_text(t, id), s, n) == 0);
}

static weft_status map_grow(tok_map *m) {
    uint32_t size = (m->mask + 1) * 2;
    uint64_t *slots = calloc(size, sizeof *slots);
    if (!slots) return WEFT_ENOMEM;
    for (uint32_t i = 0; i <= m->mask; i++) {
        uint64_t s = m->slots[i];
        if (!s) continue;
        uint32_t j = (uint32_t)(s >> 32) & (size - 1);
        while (slots[j]) j = (j + 1) & (size - 1);
        slots[j] = s;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = size - 1;
    return WEFT_OK;
}

weft_status tok_map_put(tok_map *m, const struct weft_tokenizer *t, int32_t id, bool replace, int32_t *prev) {
    if (prev) *prev = -1;
    if ((uint64_t)(m->count + 1) * 2 > (uint64_t)m->mask + 1 && map_grow(m)) return WEFT_ENOMEM;
    const char *s = tok_text(t, id);
    size_t n = t->len[id];
    uint32_t h = tok_hash(s, n);
    uint32_t i = h & m->mask;
    while (m->slots[i]) {
        uint64_t e = m->slots[i];
        int32_t other = (int32_t)(uint32_t)(e & 0xffffffffu) - 1;
        if ((uint32_t)(e >> 32) == h && same_text(t, other, s, n)) {
            if (prev) *prev = other;
            if (replace) m->slots[i] = ((uint64_t)h << 32) | (uint32_t)(id + 1);
            return WEFT_OK;
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = ((uint64_t)h << 32) | (uint32_t)(id + 1);
    m->count++;
    return WEFT_OK;
}

int32_t tok_map_get(const tok_map *m, const struct weft_tokenizer *t, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint32_t h = tok_hash(s, n);
    uint32_t i = h & m->mask;
    while (m->slots[i]) {
        uint64_t e = m->slots[i];
        int32_t id = (int32_t)(uint32_t)(e & 0xffffffffu) - 1;
        if ((uint32_t)(e >> 32) == h && same_text(t, id, s, n)) return id;
        i = (i + 1) & m->mask;
    }
    return -1;
}

void tok_map_free(tok_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->mask = m->count = 0;
}

/* splitmix64 finaliser: pair keys are structured (small ids), so they need real mixing. */
static uint32_t pair_hash(uint64_t k) {
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    k ^= k >> 31;
    return (uint32_t)k;
}

weft_status tok_pairs_init(tok_pairs *p, size_t expected) {
    uint32_t size = table_size(expected);
    p->slots = calloc(size, sizeof *p->slots);
    if (!p->slots) return WEFT_ENOMEM;
    p->mask = size - 1;
    p->count = 0;
    return WEFT_OK;
}

void tok_pairs_put(tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = pair_hash(key) & p->mask;
    while (p->slots[i].key) {
        if (p->slots[i].key == key) return; /* first rank wins */
        i = (i + 1) & p->mask;
    }
    p->slots[i].key = key;
    p->slots[i].rank = rank;
    p->slots[i].id = id;
    p->count++;
}

const tok_pair_slot *tok_pairs_get(const tok_pairs *p, int32_t a, int32_t b) {
    if (!p->slots) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = pair_hash(key) & p->mask;
    while (p->slots[i].key) {
        if (p->slots[i].key == key) return &p->slots[i];
        i = (i + 1) & p->mask;
    }
    return NULL;
}

void tok_pairs_free(tok_pairs *p) {
    free(p->slots);
    p->slots = NULL;
    p->mask = p->count = 0;
}
