/* Encoding pipeline (HF tokenizers TokenizerImpl::encode_single_sequence; llama.cpp llama_tokenize has the
 * same shape): added tokens are split out of the raw text, the rest is normalized, normalized added tokens
 * are split out, pre-tokenizers cut the remainder into words, the model turns each word into ids, and the
 * post-processor adds BOS/EOS around the whole. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define TOK_MAX_PRE 16

typedef struct tok_span {
    size_t a, b;
    bool m; /* a regex match (delimiter) */
} tok_span;

typedef struct enc {
    const weft_tokenizer *t;
    unsigned flags;
    weft_tok_vec *v;
    tok_scratch *sc;
    pcre2_match_data *md;
    weft_err *err;
    tok_buf norm;                 /* normalized text of the current raw piece */
    tok_buf buf[TOK_MAX_PRE][2];  /* per pre-tokenizer step: rewritten input, mapped piece */
    tok_span *spans[TOK_MAX_PRE]; /* per pre-tokenizer step */
    size_t span_cap[TOK_MAX_PRE];
} enc;

static weft_status oom(enc *c) {
    return weft_err_set(c->err, WEFT_ENOMEM, "tokenizer: out of memory");
}

static weft_status span_push(enc *c, int step, size_t *count, size_t a, size_t b, bool m) {
    if (*count == c->span_cap[step]) {
        size_t cap = c->span_cap[step] ? c->span_cap[step] * 2 : 32;
        tok_span *p = realloc(c->spans[step], cap * sizeof *p);
        if (!p) return oom(c);
        c->spans[step] = p;
        c->span_cap[step] = cap;
    }
    c->spans[step][(*count)++] = (tok_span){a, b, m};
    return WEFT_OK;
}

/* HF Pattern::find_matches: the text cut into alternating gaps and matches covering all of it (empty matches
 * included, as split points). A NULL regex means: every occurrence of the literal lit[0..lit_len). */
static weft_status find_matches(enc *c, int step, const pcre2_code *re, const char *lit, size_t lit_len,
                                const char *s, size_t n, size_t *count) {
    *count = 0;
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        size_t ms, me;
        if (re) {
            int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[120];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return weft_err_set(c->err, WEFT_EINTERNAL,
                                    "tokenizer: pre-tokenizer regex failed on %zu bytes: %s", n,
                                    (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
            ms = ov[0];
            me = ov[1];
        } else {
            const char *hit = lit_len && n - pos >= lit_len ? memmem(s + pos, n - pos, lit, lit_len) : NULL;
            if (!hit) break;
            ms = (size_t)(hit - s);
            me = ms + lit_len;
        }
        if (ms > prev && span_push(c, step, count, prev, ms, false)) return WEFT_ENOMEM;
        if (span_push(c, step, count, ms, me, true)) return WEFT_ENOMEM;
        prev = me;
        if (me > ms) {
            pos = me;
        } else { /* empty match: the next search starts one character later */
            if (ms >= n) break;
            pos = ms + 1;
            while (pos < n && ((uint8_t)s[pos] & 0xC0) == 0x80) pos++;
        }
    }
    if (prev < n && span_push(c, step, count, prev, n, false)) return WEFT_ENOMEM;
    return WEFT_OK;
}

/* HF SplitDelimiterBehavior applied in place; afterwards spans[0..*count) are the kept pieces (non-empty). */
static void apply_behavior(tok_span *sp, size_t *count, tok_split_behavior beh, bool invert) {
    size_t n = *count, k = 0;
    if (invert)
        for (size_t i = 0; i < n; i++) sp[i].m = !sp[i].m;
    bool prev_m = false;
    switch (beh) {
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!sp[i].m) sp[k++] = sp[i];
        break;
    case TOK_SPLIT_ISOLATED:
        k = n;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            if (k > 0 && sp[i].m == prev_m) {
                sp[k - 1].b = sp[i].b;
            } else {
                sp[k++] = sp[i];
                prev_m = sp[i].m;
            }
        }
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            if (sp[i].m && !prev_m && k > 0)
                sp[k - 1].b = sp[i].b;
            else
                sp[k++] = sp[i];
            prev_m = sp[i].m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: {
        /* fold from the end: a match joins the piece that follows it */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            if (sp[i].m && !prev_m && w < n)
                sp[w].a = sp[i].a;
            else
                sp[--w] = sp[i];
            prev_m = sp[i].m;
        }
        memmove(sp, sp + w, (n - w) * sizeof *sp);
        k = n - w;
        break;
    }
    }
    size_t j = 0;
    for (size_t i = 0; i < k; i++)
        if (sp[i].b > sp[i].a) sp[j++] = sp[i];
    *count = j;
}

static weft_status pretok(enc *c, int step, const char *s, size_t n, bool first);

/* Runs the next step on each kept piece of s. */
static weft_status run_pieces(enc *c, int step, const char *s, size_t count, bool first) {
    for (size_t i = 0; i < count; i++) {
        tok_span p = c->spans[step][i];
        weft_status st = pretok(c, step + 1, s + p.a, p.b - p.a, first && p.a == 0);
        if (st) return st;
    }
    return WEFT_OK;
}

static weft_status byte_map(enc *c, tok_buf *out, const char *s, size_t n) {
    out->n = 0;
    if (tok_buf_reserve(out, n * 2)) return oom(c);
    for (size_t i = 0; i < n; i++) out->n += tok_utf8_put(tok_byte_to_cp((uint8_t)s[i]), out->p + out->n);
    return WEFT_OK;
}

static weft_status pretok(enc *c, int step, const char *s, size_t n, bool first) {
    const weft_tokenizer *t = c->t;
    if (n == 0) return WEFT_OK;
    if (step == t->n_pre) return tok_model_word(t, s, n, c->v, c->sc, c->err);
    const tok_pre *p = &t->pre[step];
    tok_buf *in = &c->buf[step][0], *mapped = &c->buf[step][1];
    size_t count = 0;
    weft_status st;
    switch (p->kind) {
    case TOK_PRE_SPLIT:
        if ((st = find_matches(c, step, p->re, NULL, 0, s, n, &count))) return st;
        apply_behavior(c->spans[step], &count, p->behavior, p->invert);
        return run_pieces(c, step, s, count, first);
    case TOK_PRE_BYTELEVEL:
        if (p->add_prefix_space && s[0] != ' ') {
            in->n = 0;
            if (tok_buf_put(in, " ", 1) || tok_buf_put(in, s, n)) return oom(c);
            s = in->p;
            n = in->n;
        }
        if (p->re) {
            if ((st = find_matches(c, step, p->re, NULL, 0, s, n, &count))) return st;
            apply_behavior(c->spans[step], &count, TOK_SPLIT_ISOLATED, false);
        } else {
            count = 0;
            if ((st = span_push(c, step, &count, 0, n, false))) return st;
        }
        for (size_t i = 0; i < count; i++) {
            tok_span sp = c->spans[step][i];
            if ((st = byte_map(c, mapped, s + sp.a, sp.b - sp.a))) return st;
            if ((st = pretok(c, step + 1, mapped->p, mapped->n, first && sp.a == 0))) return st;
        }
        return WEFT_OK;
    case TOK_PRE_METASPACE: {
        in->n = 0;
        bool starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
        bool prepend =
            (p->prepend_scheme == TOK_PREPEND_ALWAYS || (p->prepend_scheme == TOK_PREPEND_FIRST && first));
        /* the check runs after the space replacement: a leading ' ' becomes the replacement too */
        if (prepend && !starts && s[0] != ' ' && tok_buf_put(in, p->repl, p->repl_len)) return oom(c);
        for (size_t i = 0; i < n; i++) {
            st = s[i] == ' ' ? tok_buf_put(in, p->repl, p->repl_len) : tok_buf_put(in, s + i, 1);
            if (st) return oom(c);
        }
        if (p->split) {
            if ((st = find_matches(c, step, NULL, p->repl, p->repl_len, in->p, in->n, &count))) return st;
            apply_behavior(c->spans[step], &count, TOK_SPLIT_MERGED_NEXT, false);
        } else {
            count = 0;
            if ((st = span_push(c, step, &count, 0, in->n, false))) return st;
        }
        return run_pieces(c, step, in->p, count, first);
    }
    }
    return weft_err_set(c->err, WEFT_EINTERNAL, "tokenizer: bad pre-tokenizer kind");
}

typedef weft_status (*gap_fn)(enc *c, const char *s, size_t n, bool first);

static size_t char_before(const char *s, size_t at, size_t floor, uint32_t *cp) {
    size_t st = at - 1;
    while (st > floor && ((uint8_t)s[st] & 0xC0) == 0x80) st--;
    size_t bad;
    return tok_utf8_next((const uint8_t *)s + st, at - st, cp, &bad) ? at - st : 0;
}

/* HF AddedVocabulary::find_matches over one text: leftmost-longest added tokens (special ones only with
 * PARSE_SPECIAL), single_word / lstrip / rstrip applied; gaps go to `gap`. */
static weft_status split_added(enc *c, const tok_matcher *m, const char *s, size_t n, bool first,
                               gap_fn gap) {
    bool parse_special = c->flags & WEFT_TOK_PARSE_SPECIAL;
    size_t start_offset = 0, pos = 0;
    weft_status st;
    while (m->n && pos < n) {
        uint8_t b = (uint8_t)s[pos];
        const tok_added *hit = NULL;
        for (int32_t j = m->start[b]; j < m->start[b + 1]; j++) {
            const tok_added *a = &m->v[j];
            if (a->len > n - pos || memcmp(s + pos, a->text, a->len) != 0) continue;
            if ((a->flags & TOK_ADD_SPECIAL) && !parse_special) continue;
            hit = a;
            break;
        }
        if (!hit) {
            pos++;
            continue;
        }
        size_t ms = pos, me = pos + hit->len;
        uint32_t cp;
        size_t bad, k;
        if (hit->flags & TOK_ADD_SINGLE_WORD) {
            bool left_ok = ms == 0 || !char_before(s, ms, 0, &cp) || !tok_is_word_char(cp);
            k = me < n ? tok_utf8_next((const uint8_t *)s + me, n - me, &cp, &bad) : 0;
            bool right_ok = me == n || !k || !tok_is_word_char(cp);
            if (!left_ok || !right_ok) {
                pos = me;
                continue;
            }
        }
        if (hit->flags & TOK_ADD_LSTRIP) {
            while (ms > start_offset && (k = char_before(s, ms, start_offset, &cp)) && tok_is_white_space(cp))
                ms -= k;
        }
        if (hit->flags & TOK_ADD_RSTRIP) {
            while (me < n && (k = tok_utf8_next((const uint8_t *)s + me, n - me, &cp, &bad)) &&
                   tok_is_white_space(cp))
                me += k;
        }
        if (ms > start_offset &&
            (st = gap(c, s + start_offset, ms - start_offset, first && start_offset == 0)))
            return st;
        if (tok_vec_push(c->v, hit->id)) return oom(c);
        start_offset = pos = me;
    }
    if (n > start_offset) return gap(c, s + start_offset, n - start_offset, first && start_offset == 0);
    return WEFT_OK;
}

static weft_status normalized_gap(enc *c, const char *s, size_t n, bool first) {
    return pretok(c, 0, s, n, first);
}

static weft_status raw_gap(enc *c, const char *s, size_t n, bool first) {
    const weft_tokenizer *t = c->t;
    if (t->n_norm == 0) return split_added(c, &t->normalized, s, n, first, normalized_gap);
    weft_status st = tok_normalize(t, s, n, &c->norm, c->err);
    if (st) return st;
    /* the buffer is reused by the next raw gap only, after this one is fully tokenized */
    return split_added(c, &t->normalized, c->norm.p, c->norm.n, first, normalized_gap);
}

weft_status weft_tokenizer_encode(const weft_tokenizer *t, const char *text, size_t len, unsigned flags,
                                  weft_tok_vec *v, weft_err *err) {
    if (!t || !v || (!text && len)) return weft_err_set(err, WEFT_EINVAL, "tokenizer: encode: NULL argument");
    size_t n0 = v->n;
    enc c = {.t = t, .flags = flags, .v = v, .err = err};
    tok_buf clean = {0};
    weft_status st = WEFT_OK;
    bool changed = false;
    if (len && tok_utf8_sanitize(text, len, &clean, &changed)) st = oom(&c);
    if (changed) text = clean.p, len = clean.n;
    c.sc = tok_scratch_new();
    c.md = pcre2_match_data_create(1, NULL);
    if (!st && (!c.sc || !c.md)) st = oom(&c);
    if (!st && (flags & WEFT_TOK_ADD_SPECIAL))
        for (int i = 0; i < t->n_prefix && !st; i++)
            if (tok_vec_push(v, t->prefix[i])) st = oom(&c);
    if (!st && len) st = split_added(&c, &t->raw, text, len, true, raw_gap);
    if (!st && (flags & WEFT_TOK_ADD_SPECIAL))
        for (int i = 0; i < t->n_suffix && !st; i++)
            if (tok_vec_push(v, t->suffix[i])) st = oom(&c);
    if (st) v->n = n0;
    tok_buf_free(&clean);
    tok_buf_free(&c.norm);
    for (int i = 0; i < TOK_MAX_PRE; i++) {
        tok_buf_free(&c.buf[i][0]);
        tok_buf_free(&c.buf[i][1]);
        free(c.spans[i]);
    }
    tok_scratch_free(c.sc);
    pcre2_match_data_free(c.md);
    return st;
}

weft_status weft_tokenizer_encode_to(const weft_tokenizer *t, const char *text, size_t len, unsigned flags,
                                     int32_t *out, size_t capacity, size_t *n_out, weft_err *err) {
    if (!n_out || (!out && capacity))
        return weft_err_set(err, WEFT_EINVAL, "tokenizer: encode: NULL argument");
    weft_tok_vec v = {0};
    weft_status st = weft_tokenizer_encode(t, text, len, flags, &v, err);
    *n_out = v.n;
    if (!st && v.n > capacity)
        st = weft_err_set(err, WEFT_ERANGE, "tokenizer: %zu ids do not fit in %zu", v.n, capacity);
    if (!st && v.n) memcpy(out, v.ids, v.n * sizeof *out);
    weft_tok_vec_free(&v);
    return st;
}
