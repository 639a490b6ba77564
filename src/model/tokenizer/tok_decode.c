/* Incremental detokenization: per-token pieces are concatenated, the sequence-start strip is applied, and
 * only complete UTF-8 characters leave; ill-formed bytes become U+FFFD once they are provably ill-formed
 * (maximal subparts, as Rust's String::from_utf8_lossy that HF's decoders end with). */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

void weft_detok_init(weft_detok *d, const weft_tokenizer *tok, unsigned flags) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->flags = flags;
    d->at_start = true;
    d->first_tok = true;
    d->strip_left = (tok && !(flags & WEFT_DETOK_KEEP_LEADING_SPACE)) ? tok->strip_count : 0;
}

size_t weft_detok_bound(const weft_tokenizer *tok) {
    /* worst case: every byte (held ones included) becomes a 3-byte U+FFFD */
    return 3 * ((tok ? tok->max_piece : 0) + sizeof(((weft_detok *)0)->pending)) + 4;
}

/* The piece of id as this detokenizer renders it. */
static const char *render(weft_detok *d, int32_t id, size_t *len) {
    const weft_tokenizer *t = d->tok;
    if ((t->attr[id] & (WEFT_TOKEN_CONTROL | WEFT_TOKEN_UNKNOWN)) &&
        !(d->flags & WEFT_DETOK_RENDER_SPECIAL)) {
        *len = 0;
        return "";
    }
    if (d->first_tok) {
        d->first_tok = false;
        if (t->p1arena && !(d->flags & WEFT_DETOK_KEEP_LEADING_SPACE)) {
            *len = t->p1len[id];
            return t->p1arena + t->p1off[id];
        }
    }
    *len = t->plen[id];
    return t->parena + t->poff[id];
}

/* Appends src to the output, removing the sequence-start strip characters while they lead the text. */
static size_t emit(weft_detok *d, char *out, size_t o, const char *src, size_t n) {
    const weft_tokenizer *t = d->tok;
    size_t cl = t->strip_char_len;
    while (d->at_start && n) {
        if (d->strip_left && cl && n >= cl && memcmp(src, t->strip_char, cl) == 0) {
            src += cl;
            n -= cl;
            d->strip_left--;
            continue;
        }
        d->at_start = false;
    }
    memcpy(out + o, src, n);
    return o + n;
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Consumes pending + piece; complete characters go to out, an incomplete tail stays pending. */
static size_t feed_bytes(weft_detok *d, const char *piece, size_t n, char *out) {
    size_t o = 0;
    /* join the held prefix with as much of the piece as it can take, then continue on the piece itself */
    while (d->n_pending && n) {
        uint8_t tmp[4];
        size_t np = d->n_pending, take = n < 4 - np ? n : 4 - np;
        memcpy(tmp, d->pending, np);
        memcpy(tmp + np, piece, take);
        uint32_t cp;
        size_t bad, k = tok_utf8_next(tmp, np + take, &cp, &bad);
        if (k) { /* completed: k > np since the pending bytes alone were incomplete */
            o = emit(d, out, o, (const char *)tmp, k);
            piece += k - np;
            n -= k - np;
            d->n_pending = 0;
            d->prompt_pending = false;
        } else if (bad) {
            /* a prompt's unfinished character that cannot complete is the prompt's, not this text's */
            if (!d->prompt_pending) o = emit(d, out, o, FFFD, 3);
            if (bad >= np) { /* the subpart ends inside the piece */
                piece += bad - np;
                n -= bad - np;
                d->n_pending = 0;
                d->prompt_pending = false;
            } else { /* it ends inside the held bytes: keep the rest of them */
                memmove(d->pending, d->pending + bad, np - bad);
                d->n_pending = (uint8_t)(np - bad);
            }
        } else { /* still incomplete: everything fits in the 4-byte buffer */
            memcpy(d->pending + np, piece, take);
            d->n_pending = (uint8_t)(np + take);
            return o;
        }
    }
    size_t i = 0, run = 0;
    while (i < n) {
        if ((uint8_t)piece[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t bad, k = tok_utf8_next((const uint8_t *)piece + i, n - i, &cp, &bad);
        if (k) {
            i += k;
            continue;
        }
        o = emit(d, out, o, piece + run, i - run);
        if (!bad) { /* a valid prefix cut by the end of the piece: hold it */
            memcpy(d->pending, piece + i, n - i);
            d->n_pending = (uint8_t)(n - i);
            return o;
        }
        o = emit(d, out, o, FFFD, 3);
        i += bad;
        run = i;
    }
    return emit(d, out, o, piece + run, n - run);
}

weft_status weft_detok_feed(weft_detok *d, int32_t id, char *out, size_t capacity, size_t *n_out,
                            weft_err *err) {
    if (n_out) *n_out = 0;
    if (!d || !d->tok || !out || !n_out) return weft_err_set(err, WEFT_EINVAL, "detokenizer: NULL argument");
    if (id < 0 || id >= d->tok->n_vocab)
        return weft_err_set(err, WEFT_ERANGE, "detokenizer: token id %d is outside the vocabulary (%lld)", id,
                            (long long)d->tok->n_vocab);
    if (capacity < weft_detok_bound(d->tok))
        return weft_err_set(err, WEFT_ERANGE,
                            "detokenizer: output buffer of %zu bytes is below the bound %zu", capacity,
                            weft_detok_bound(d->tok));
    size_t n;
    const char *p = render(d, id, &n);
    *n_out = feed_bytes(d, p, n, out);
    return WEFT_OK;
}

size_t weft_detok_flush(weft_detok *d, char *out, size_t capacity) {
    if (!d || !d->n_pending || capacity < 3) return 0;
    d->n_pending = 0;        /* a held prefix is one maximal subpart */
    if (d->prompt_pending) { /* the prompt's bytes, never completed: not part of this text */
        d->prompt_pending = false;
        return 0;
    }
    return emit(d, out, 0, FFFD, 3);
}

weft_status weft_detok_prime(weft_detok *d, const int32_t *ids, size_t n, weft_err *err) {
    if (!d || !d->tok || (!ids && n)) return weft_err_set(err, WEFT_EINVAL, "detokenizer: NULL argument");
    size_t cap = weft_detok_bound(d->tok);
    char *scratch = malloc(cap);
    if (!scratch) return weft_err_set(err, WEFT_ENOMEM, "detokenizer: out of memory");
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        size_t got;
        st = weft_detok_feed(d, ids[i], scratch, cap, &got, err);
    }
    free(scratch);
    /* The prompt's unfinished character stays pending: the text that follows may complete it. */
    d->prompt_pending = d->n_pending > 0;
    return st;
}

weft_status weft_tokenizer_decode(const weft_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                                  char **out, size_t *out_len, weft_err *err) {
    if (!t || !out || (!ids && n)) return weft_err_set(err, WEFT_EINVAL, "detokenizer: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    weft_detok d;
    weft_detok_init(&d, t, flags);
    tok_buf b = {0};
    size_t bound = weft_detok_bound(t);
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        if (tok_buf_reserve(&b, bound)) {
            st = weft_err_set(err, WEFT_ENOMEM, "detokenizer: out of memory");
            break;
        }
        size_t got;
        st = weft_detok_feed(&d, ids[i], b.p + b.n, bound, &got, err);
        b.n += got;
    }
    if (!st && tok_buf_reserve(&b, 8)) st = weft_err_set(err, WEFT_ENOMEM, "detokenizer: out of memory");
    if (st) {
        tok_buf_free(&b);
        return st;
    }
    b.n += weft_detok_flush(&d, b.p + b.n, 8);
    b.p[b.n] = 0;
    *out = b.p;
    if (out_len) *out_len = b.n;
    return WEFT_OK;
}
