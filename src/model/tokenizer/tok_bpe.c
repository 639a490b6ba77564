/* The models: ranked-merge BPE over token ids (HF tokenizers models/bpe Word::merge_all, which llama.cpp's
 * llm_tokenizer_bpe_session matches) and SentencePiece-style score-merge BPE (llama.cpp
 * llm_tokenizer_spm_session). Both keep the symbols of one word in a doubly linked array and candidate
 * merges in a binary heap; stale heap entries are detected and skipped when popped, as both references do. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct tok_sym {
    int32_t id; /* BPE: token id; SPM: unused */
    int32_t prev, next;
    uint32_t start; /* SPM: byte offset in the word */
    uint32_t n;     /* bytes; 0 = merged away */
} tok_sym;

typedef struct tok_cand {
    float score;  /* SPM: higher first */
    int32_t rank; /* BPE: lower first */
    int32_t left, right;
    int32_t id;    /* BPE: the merged token */
    uint32_t size; /* SPM: byte length of the merged text */
} tok_cand;

struct tok_scratch {
    tok_sym *sym;
    size_t sym_cap;
    tok_cand *heap;
    size_t heap_n, heap_cap;
};

tok_scratch *tok_scratch_new(void) {
    return calloc(1, sizeof(tok_scratch));
}

void tok_scratch_free(tok_scratch *sc) {
    if (!sc) return;
    free(sc->sym);
    free(sc->heap);
    free(sc);
}

weft_status tok_vec_push(weft_tok_vec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return WEFT_ENOMEM;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return WEFT_OK;
}

static weft_status sym_reserve(tok_scratch *sc, size_t n) {
    if (n <= sc->sym_cap) return WEFT_OK;
    size_t cap = sc->sym_cap ? sc->sym_cap : 64;
    while (cap < n) cap *= 2;
    tok_sym *p = realloc(sc->sym, cap * sizeof *p);
    if (!p) return WEFT_ENOMEM;
    sc->sym = p;
    sc->sym_cap = cap;
    return WEFT_OK;
}

/* Heap order: true when a must come out before b. */
static bool cand_before(bool spm, const tok_cand *a, const tok_cand *b) {
    if (spm) {
        if (a->score != b->score) return a->score > b->score;
        return a->left < b->left;
    }
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}

static weft_status heap_push(tok_scratch *sc, bool spm, tok_cand c) {
    if (sc->heap_n == sc->heap_cap) {
        size_t cap = sc->heap_cap ? sc->heap_cap * 2 : 64;
        tok_cand *p = realloc(sc->heap, cap * sizeof *p);
        if (!p) return WEFT_ENOMEM;
        sc->heap = p;
        sc->heap_cap = cap;
    }
    size_t i = sc->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(spm, &c, &sc->heap[parent])) break;
        sc->heap[i] = sc->heap[parent];
        i = parent;
    }
    sc->heap[i] = c;
    return WEFT_OK;
}

static tok_cand heap_pop(tok_scratch *sc, bool spm) {
    tok_cand top = sc->heap[0];
    tok_cand last = sc->heap[--sc->heap_n];
    size_t n = sc->heap_n, i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        const tok_cand *bc = &last;
        if (l < n && cand_before(spm, &sc->heap[l], bc)) {
            best = l;
            bc = &sc->heap[l];
        }
        if (r < n && cand_before(spm, &sc->heap[r], bc)) best = r;
        if (best == i) break;
        sc->heap[i] = sc->heap[best];
        i = best;
    }
    if (n) sc->heap[i] = last;
    return top;
}

static weft_status no_token(const char *w, size_t n, size_t at, weft_err *err) {
    uint32_t cp = 0;
    size_t bad;
    tok_utf8_next((const uint8_t *)w + at, n - at, &cp, &bad);
    return weft_err_set(err, WEFT_ENOTSUP,
                        "tokenizer: character U+%04X has no token, no byte-fallback token and no unk token",
                        (unsigned)cp);
}

/* ---- ranked BPE ---- */

/* The model vocabulary (HF: without added tokens); GGUF vocabularies have one table for everything. */
static const tok_map *model_map(const struct weft_tokenizer *t) {
    return t->model.slots ? &t->model : &t->all;
}

static weft_status bpe_add_pair(const struct weft_tokenizer *t, tok_scratch *sc, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return WEFT_OK;
    const tok_pair_slot *m = tok_pairs_get(&t->merges, sc->sym[l].id, sc->sym[r].id);
    if (!m) return WEFT_OK;
    tok_cand c = {.rank = m->rank, .left = l, .right = r, .id = m->id};
    return heap_push(sc, false, c);
}

static weft_status bpe_word(const struct weft_tokenizer *t, const char *w, size_t n, weft_tok_vec *v,
                            tok_scratch *sc, weft_err *err) {
    if (t->ignore_merges) {
        int32_t id = tok_map_get(model_map(t), t, w, n);
        if (id >= 0) return tok_vec_push(v, id);
    }
    if (sym_reserve(sc, n + 1)) return WEFT_ENOMEM;
    int32_t ns = 0;
    int32_t unk_sym = -1; /* the open fused-unknown symbol, when fuse_unk */
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad, k = tok_utf8_next((const uint8_t *)w + i, n - i, &cp, &bad);
        if (!k) k = bad ? bad : n - i; /* cannot happen on sanitized text; stay safe */
        int32_t id = tok_map_get(model_map(t), t, w + i, k);
        if (id >= 0) {
            sc->sym[ns] = (tok_sym){.id = id, .prev = ns - 1, .next = ns + 1, .n = (uint32_t)k};
            ns++;
            unk_sym = -1;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < k; b++) all = all && t->byte_tok[(uint8_t)w[i + b]] >= 0;
                if (all) { /* at most one symbol per byte: the n + 1 reserved above suffice */
                    for (size_t b = 0; b < k; b++) {
                        sc->sym[ns] = (tok_sym){
                            .id = t->byte_tok[(uint8_t)w[i + b]], .prev = ns - 1, .next = ns + 1, .n = 1};
                        ns++;
                    }
                    unk_sym = -1;
                    done = true;
                }
            }
            if (!done) {
                if (t->unk_id < 0) return no_token(w, n, i, err);
                if (t->fuse_unk && unk_sym >= 0) {
                    sc->sym[unk_sym].n += (uint32_t)k;
                } else {
                    sc->sym[ns] =
                        (tok_sym){.id = t->unk_id, .prev = ns - 1, .next = ns + 1, .n = (uint32_t)k};
                    unk_sym = ns++;
                }
            }
        }
        i += k;
    }
    if (ns == 0) return WEFT_OK;
    sc->sym[ns - 1].next = -1;
    sc->heap_n = 0;
    for (int32_t s = 0; s + 1 < ns; s++)
        if (bpe_add_pair(t, sc, s, s + 1)) return WEFT_ENOMEM;
    while (sc->heap_n) {
        tok_cand c = heap_pop(sc, false);
        tok_sym *l = &sc->sym[c.left];
        if (l->n == 0 || l->next < 0) continue;
        int32_t ri = l->next;
        tok_sym *r = &sc->sym[ri];
        /* stale when the pair at this position no longer merges into the same token */
        const tok_pair_slot *m = tok_pairs_get(&t->merges, l->id, r->id);
        if (!m || m->id != c.id) continue;
        l->id = c.id;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->sym[r->next].prev = c.left;
        if (bpe_add_pair(t, sc, l->prev, c.left) || bpe_add_pair(t, sc, c.left, l->next)) return WEFT_ENOMEM;
    }
    for (int32_t s = 0; s >= 0; s = sc->sym[s].next)
        if (tok_vec_push(v, sc->sym[s].id)) return WEFT_ENOMEM;
    return WEFT_OK;
}

/* ---- SentencePiece score BPE ---- */

static weft_status spm_add_pair(const struct weft_tokenizer *t, tok_scratch *sc, const char *w, int32_t l,
                                int32_t r) {
    if (l < 0 || r < 0) return WEFT_OK;
    uint32_t size = sc->sym[l].n + sc->sym[r].n;
    int32_t id = tok_map_get(&t->all, t, w + sc->sym[l].start, size);
    if (id < 0) return WEFT_OK;
    tok_cand c = {.score = t->score ? t->score[id] : 0.0f, .left = l, .right = r, .size = size};
    return heap_push(sc, true, c);
}

static weft_status spm_emit(const struct weft_tokenizer *t, const char *s, size_t n, weft_tok_vec *v,
                            weft_err *err) {
    int32_t id = tok_map_get(&t->all, t, s, n);
    if (id >= 0) return tok_vec_push(v, id);
    /* llama.cpp byte_to_token: "<0xNN>", else the one-byte string */
    for (size_t b = 0; b < n; b++) {
        uint8_t byte = (uint8_t)s[b];
        int32_t bt = t->byte_tok[byte];
        if (bt < 0) bt = tok_map_get(&t->all, t, s + b, 1);
        if (bt < 0) bt = t->unk_id;
        if (bt < 0) return no_token(s, n, 0, err);
        if (tok_vec_push(v, bt)) return WEFT_ENOMEM;
    }
    return WEFT_OK;
}

static weft_status spm_word(const struct weft_tokenizer *t, const char *w, size_t n, weft_tok_vec *v,
                            tok_scratch *sc, weft_err *err) {
    if (n > UINT32_MAX) return weft_err_set(err, WEFT_ERANGE, "tokenizer: text too long");
    if (sym_reserve(sc, n + 1)) return WEFT_ENOMEM;
    int32_t ns = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad, k = tok_utf8_next((const uint8_t *)w + i, n - i, &cp, &bad);
        if (!k) k = bad ? bad : n - i;
        sc->sym[ns] = (tok_sym){.prev = ns - 1, .next = ns + 1, .start = (uint32_t)i, .n = (uint32_t)k};
        ns++;
        i += k;
    }
    if (ns == 0) return WEFT_OK;
    sc->sym[ns - 1].next = -1;
    sc->heap_n = 0;
    for (int32_t s = 1; s < ns; s++)
        if (spm_add_pair(t, sc, w, s - 1, s)) return WEFT_ENOMEM;
    while (sc->heap_n) {
        tok_cand c = heap_pop(sc, true);
        tok_sym *l = &sc->sym[c.left], *r = &sc->sym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->sym[r->next].prev = c.left;
        if (spm_add_pair(t, sc, w, l->prev, c.left) || spm_add_pair(t, sc, w, c.left, l->next))
            return WEFT_ENOMEM;
    }
    for (int32_t s = 0; s >= 0; s = sc->sym[s].next) {
        weft_status st = spm_emit(t, w + sc->sym[s].start, sc->sym[s].n, v, err);
        if (st) return st;
    }
    return WEFT_OK;
}

weft_status tok_model_word(const struct weft_tokenizer *t, const char *w, size_t n, weft_tok_vec *v,
                           tok_scratch *sc, weft_err *err) {
    if (n == 0) return WEFT_OK;
    weft_status st =
        t->model_kind == TOK_MODEL_SPM ? spm_word(t, w, n, v, sc, err) : bpe_word(t, w, n, v, sc, err);
    if (st == WEFT_ENOMEM) return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory");
    return st;
}
