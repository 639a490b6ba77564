/* The tokenizer object: id arrays, added-token matchers, regex compilation, per-token pieces, accessors. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

weft_status tok_alloc_ids(struct weft_tokenizer *t, int64_t n, weft_err *err) {
    if (n <= 0 || n > INT32_MAX - 1)
        return weft_err_set(err, WEFT_EFORMAT, "tokenizer: vocabulary size %lld is out of range",
                            (long long)n);
    t->n_vocab = n;
    t->off = calloc((size_t)n, sizeof *t->off);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->attr = calloc((size_t)n, sizeof *t->attr);
    t->poff = calloc((size_t)n, sizeof *t->poff);
    t->plen = calloc((size_t)n, sizeof *t->plen);
    if (!t->off || !t->len || !t->attr || !t->poff || !t->plen)
        return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory for %lld tokens", (long long)n);
    return WEFT_OK;
}

weft_status tok_set_text(struct weft_tokenizer *t, tok_buf *ab, int32_t id, const char *s, size_t n) {
    if (n > UINT32_MAX) return WEFT_EFORMAT;
    t->off[id] = ab->n;
    t->len[id] = (uint32_t)n;
    return tok_buf_put(ab, s, n);
}

void tok_finish_arena(struct weft_tokenizer *t, tok_buf *ab) {
    /* never leave a NULL arena: empty texts point at offset 0 of a 1-byte buffer */
    if (!ab->p) tok_buf_put(ab, "", 1);
    t->arena = ab->p;
    ab->p = NULL;
    ab->n = ab->cap = 0;
}

static int added_cmp(const void *pa, const void *pb) {
    const tok_added *a = pa, *b = pb;
    uint8_t ca = (uint8_t)a->text[0], cb = (uint8_t)b->text[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

weft_status tok_matcher_build(tok_matcher *m, const tok_added *v, int32_t n, weft_err *err) {
    memset(m, 0, sizeof *m);
    int32_t k = 0;
    if (n > 0) {
        m->v = malloc((size_t)n * sizeof *m->v);
        if (!m->v) return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory");
        for (int32_t i = 0; i < n; i++)
            if (v[i].len > 0) m->v[k++] = v[i]; /* an empty added token never matches (HF skips it) */
        qsort(m->v, (size_t)k, sizeof *m->v, added_cmp);
    }
    m->n = k;
    int32_t j = 0;
    for (int c = 0; c < 256; c++) {
        m->start[c] = j;
        while (j < k && (uint8_t)m->v[j].text[0] == c) j++;
    }
    m->start[256] = k;
    return WEFT_OK;
}

void tok_matcher_free(tok_matcher *m) {
    free(m->v);
    memset(m, 0, sizeof *m);
}

const char TOK_GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

weft_status tok_regex_compile(const char *pat, size_t len, const char *what, pcre2_code **out,
                              weft_err *err) {
    int ec = 0;
    PCRE2_SIZE eo = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return weft_err_set(err, WEFT_ENOTSUP, "%s: regex not supported at offset %zu: %s", what, (size_t)eo,
                            (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is absent */
    *out = re;
    return WEFT_OK;
}

/* ---- pieces ---- */

static bool parse_byte_token(const char *s, size_t n, uint8_t *b) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *b = (uint8_t)v;
    return true;
}

/* Byte-level reverse map of one token; false when a character is outside the table (HF then keeps the
 * token's own text). */
static bool byte_level_decode(const char *s, size_t n, tok_buf *out) {
    size_t i = 0, start = out->n;
    while (i < n) {
        uint32_t cp;
        size_t bad, k = tok_utf8_next((const uint8_t *)s + i, n - i, &cp, &bad);
        int b = k ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            out->n = start;
            return false;
        }
        char c = (char)b;
        if (tok_buf_put(out, &c, 1)) return false;
        i += k;
    }
    return true;
}

static weft_status replace_all(tok_buf *dst, const char *s, size_t n, const char *from, size_t fl,
                               const char *to, size_t tl) {
    size_t i = 0, run = 0;
    while (fl && i + fl <= n) {
        if (memcmp(s + i, from, fl) == 0) {
            if (tok_buf_put(dst, s + run, i - run) || tok_buf_put(dst, to, tl)) return WEFT_ENOMEM;
            i += fl;
            run = i;
        } else {
            i++;
        }
    }
    return tok_buf_put(dst, s + run, n - run);
}

static weft_status strip_token(tok_buf *a, const tok_dec_step *st) {
    size_t cl = st->from_len, lo = 0, hi = a->n;
    if (!cl) return WEFT_OK;
    for (uint32_t k = 0; k < st->start && hi - lo >= cl && !memcmp(a->p + lo, st->from, cl); k++) lo += cl;
    for (uint32_t k = 0; k < st->stop && hi - lo >= cl && !memcmp(a->p + hi - cl, st->from, cl); k++)
        hi -= cl;
    if (lo) memmove(a->p, a->p + lo, hi - lo);
    a->n = hi - lo;
    return WEFT_OK;
}

/* One token through the per-token decoder steps; a and b are scratch buffers, the result is left in a. */
static weft_status piece_of(const struct weft_tokenizer *t, const tok_dec_desc *dd, int32_t id, bool first,
                            const int32_t *norm_idx, tok_buf *a, tok_buf *b) {
    const char *s = tok_text(t, id);
    size_t n = t->len[id];
    if (norm_idx && norm_idx[id]) { /* HF decodes a normalized added token by its normalized spelling */
        const tok_added *e = &t->normalized.v[norm_idx[id] - 1];
        s = e->text;
        n = e->len;
    }
    uint8_t attr = t->attr[id];
    uint8_t byte;
    a->n = 0;
    if (dd->gguf_types) {
        /* llama.cpp token_to_piece */
        if (attr & (WEFT_TOKEN_CONTROL | WEFT_TOKEN_UNKNOWN | WEFT_TOKEN_USER_DEFINED))
            return tok_buf_put(a, s, n);
        if (attr & WEFT_TOKEN_BYTE) {
            if (parse_byte_token(s, n, &byte)) return tok_buf_put(a, &byte, 1);
            return tok_buf_put(a, s, n);
        }
        if (!(attr & WEFT_TOKEN_NORMAL)) return WEFT_OK;
    }
    if (tok_buf_put(a, s, n)) return WEFT_ENOMEM;
    for (int i = 0; i < dd->n; i++) {
        const tok_dec_step *st = &dd->step[i];
        b->n = 0;
        switch (st->kind) {
        case TOK_DEC_REPLACE:
            if (replace_all(b, a->p, a->n, st->from, st->from_len,
                            first && st->first_differs ? st->first_to : st->to,
                            first && st->first_differs ? st->first_to_len : st->to_len))
                return WEFT_ENOMEM;
            break;
        case TOK_DEC_BYTE_FALLBACK:
            if (parse_byte_token(a->p, a->n, &byte)) {
                if (tok_buf_put(b, &byte, 1)) return WEFT_ENOMEM;
            } else if (tok_buf_put(b, a->p, a->n)) {
                return WEFT_ENOMEM;
            }
            break;
        case TOK_DEC_BYTE_LEVEL:
            if (!byte_level_decode(a->p, a->n, b)) {
                b->n = 0;
                if (tok_buf_put(b, a->p, a->n)) return WEFT_ENOMEM;
            }
            break;
        case TOK_DEC_STRIP:
            if (tok_buf_put(b, a->p, a->n)) return WEFT_ENOMEM;
            strip_token(b, st);
            break;
        }
        tok_buf tmp = *a;
        *a = *b;
        *b = tmp;
    }
    return WEFT_OK;
}

static weft_status build_arena(struct weft_tokenizer *t, const tok_dec_desc *dd, bool first,
                               const int32_t *norm_idx, char **arena_out, uint64_t *off, uint32_t *len) {
    tok_buf arena = {0}, a = {0}, b = {0};
    weft_status st = WEFT_OK;
    for (int64_t id = 0; id < t->n_vocab && !st; id++) {
        st = piece_of(t, dd, (int32_t)id, first, norm_idx, &a, &b);
        if (st) break;
        off[id] = arena.n;
        len[id] = (uint32_t)a.n;
        if (a.n > t->max_piece) t->max_piece = a.n;
        st = tok_buf_put(&arena, a.p, a.n);
    }
    tok_buf_free(&a);
    tok_buf_free(&b);
    if (!st && !arena.p) st = tok_buf_put(&arena, "", 1);
    if (st) {
        tok_buf_free(&arena);
        return st;
    }
    *arena_out = arena.p;
    return WEFT_OK;
}

weft_status tok_build_pieces(struct weft_tokenizer *t, const tok_dec_desc *dd, weft_err *err) {
    t->max_piece = 0;
    int32_t *norm_idx = NULL; /* id -> 1 + index in the normalized added-token matcher */
    if (t->normalized.n > 0) {
        norm_idx = calloc((size_t)t->n_vocab, sizeof *norm_idx);
        if (!norm_idx)
            return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory building token pieces");
        for (int32_t i = 0; i < t->normalized.n; i++) norm_idx[t->normalized.v[i].id] = i + 1;
    }
    weft_status st = build_arena(t, dd, false, norm_idx, &t->parena, t->poff, t->plen);
    bool first_differs = false;
    for (int i = 0; i < dd->n; i++) first_differs = first_differs || dd->step[i].first_differs;
    if (!st && first_differs) {
        t->p1off = calloc((size_t)t->n_vocab, sizeof *t->p1off);
        t->p1len = calloc((size_t)t->n_vocab, sizeof *t->p1len);
        st = (!t->p1off || !t->p1len) ? WEFT_ENOMEM
                                      : build_arena(t, dd, true, norm_idx, &t->p1arena, t->p1off, t->p1len);
    }
    free(norm_idx);
    if (st) return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory building token pieces");
    return WEFT_OK;
}

/* ---- lifetime and accessors ---- */

void weft_tokenizer_free(weft_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->attr);
    free(t->score);
    free(t->parena);
    free(t->poff);
    free(t->plen);
    free(t->p1arena);
    free(t->p1off);
    free(t->p1len);
    tok_map_free(&t->all);
    tok_map_free(&t->model);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
        pcre2_code_free(t->norm[i].re);
    }
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    free(t->pre);
    tok_matcher_free(&t->raw);
    tok_matcher_free(&t->normalized);
    free(t->norm_arena);
    tok_pairs_free(&t->merges);
    free(t->prefix);
    free(t->suffix);
    free(t->chat_template);
    free(t);
}

void weft_vocab_desc_init(weft_vocab_desc *d) {
    memset(d, 0, sizeof *d);
    d->bos = d->eos = d->unk = d->pad = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

void weft_tok_vec_free(weft_tok_vec *v) {
    if (!v) return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

int64_t weft_tokenizer_n_vocab(const weft_tokenizer *t) {
    return t ? t->n_vocab : 0;
}
int32_t weft_tokenizer_bos(const weft_tokenizer *t) {
    return t ? t->bos : -1;
}
int32_t weft_tokenizer_eos(const weft_tokenizer *t) {
    return t ? t->eos : -1;
}
int32_t weft_tokenizer_unk(const weft_tokenizer *t) {
    return t ? t->unk : -1;
}
int32_t weft_tokenizer_pad(const weft_tokenizer *t) {
    return t ? t->pad : -1;
}
bool weft_tokenizer_add_bos(const weft_tokenizer *t) {
    return t && t->n_prefix > 0;
}
bool weft_tokenizer_add_eos(const weft_tokenizer *t) {
    return t && t->n_suffix > 0;
}

static bool in_range(const weft_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab;
}

unsigned weft_tokenizer_token_attr(const weft_tokenizer *t, int32_t id) {
    return in_range(t, id) ? t->attr[id] : 0;
}

bool weft_tokenizer_is_special(const weft_tokenizer *t, int32_t id) {
    return in_range(t, id) && (t->attr[id] & (WEFT_TOKEN_CONTROL | WEFT_TOKEN_UNKNOWN));
}

int32_t weft_tokenizer_lookup(const weft_tokenizer *t, const char *s, size_t len) {
    if (!t || (!s && len)) return -1;
    return tok_map_get(&t->all, t, s ? s : "", len);
}

const char *weft_tokenizer_token_text(const weft_tokenizer *t, int32_t id, size_t *len) {
    if (!in_range(t, id)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return tok_text(t, id);
}

const char *weft_tokenizer_piece(const weft_tokenizer *t, int32_t id, size_t *len) {
    if (!in_range(t, id)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->plen[id];
    return t->parena + t->poff[id];
}

size_t weft_tokenizer_max_piece_len(const weft_tokenizer *t) {
    return t ? t->max_piece : 0;
}
bool weft_tokenizer_strips_leading_space(const weft_tokenizer *t) {
    return t && (t->strip_count > 0 || t->p1arena);
}
const char *weft_tokenizer_chat_template(const weft_tokenizer *t) {
    return t ? t->chat_template : NULL;
}
