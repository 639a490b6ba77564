/* UTF-8 decoding with maximal-subpart error reporting (Unicode §3.9, Table 3-7), Unicode character classes
 * the added-token matcher needs, the GPT-2 byte <-> code point map, and the normalizer chain. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad) {
    *bad = 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        *bad = 1; /* 80..C1, F5..FF never start a character */
        return 0;
    }
    for (size_t k = 1; k < need; k++) {
        if (k >= n) return 0; /* valid so far, cut by the end: incomplete, *bad = 0 */
        uint8_t b = s[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *bad = k;
            return 0;
        }
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need;
}

size_t tok_utf8_put(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

weft_status tok_utf8_sanitize(const char *s, size_t n, tok_buf *out, bool *changed) {
    *changed = false;
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t bad;
        size_t k = tok_utf8_next(u + i, n - i, &cp, &bad);
        if (k) {
            i += k;
            continue;
        }
        if (!bad) bad = n - i; /* an incomplete character at the very end is ill-formed here */
        if (tok_buf_put(out, s + run, i - run) || tok_buf_put(out, REPLACEMENT, 3)) return WEFT_ENOMEM;
        *changed = true;
        i += bad;
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

bool tok_is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool tok_is_word_char(uint32_t c) {
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D) return true; /* Join_Control */
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py): printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
 * 0xAE..0xFF) map to themselves; the other 68 bytes map to U+0100.. in byte order. */
uint32_t tok_byte_to_cp(uint8_t b) {
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 289u + (b - 0x7Fu);
    if (b == 0xAD) return 323;
    return b;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) ? -1 : (int)cp;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 0x7F);
    if (cp == 323) return 0xAD;
    return -1;
}

/* ---- normalizers ---- */

static weft_status norm_utf8proc(const char *s, size_t n, int options, tok_buf *out, weft_err *err) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | options));
    if (r < 0) {
        free(dst);
        return weft_err_set(err, r == UTF8PROC_ERROR_NOMEM ? WEFT_ENOMEM : WEFT_EINTERNAL,
                            "tokenizer: unicode normalization failed: %s", utf8proc_errmsg(r));
    }
    weft_status st = tok_buf_put(out, dst, (size_t)r);
    free(dst);
    return st ? weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory normalizing") : WEFT_OK;
}

/* Rust char::to_lowercase: the simple mapping, except U+0130 which lowercases to "i\u0307". */
static weft_status norm_lower(const char *s, size_t n, tok_buf *out, weft_err *err) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad, k = tok_utf8_next(u + i, n - i, &cp, &bad);
        if (!k) return weft_err_set(err, WEFT_EINTERNAL, "tokenizer: Lowercase got ill-formed UTF-8");
        char tmp[8];
        size_t m;
        if (cp == 0x130) {
            tmp[0] = 'i';
            m = 1 + tok_utf8_put(0x307, tmp + 1);
        } else {
            m = tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), tmp);
        }
        if (tok_buf_put(out, tmp, m)) return WEFT_ENOMEM;
        i += k;
    }
    return WEFT_OK;
}

static weft_status norm_strip(const tok_norm *nm, const char *s, size_t n, tok_buf *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t a = 0, b = n;
    if (nm->left) {
        while (a < b) {
            uint32_t cp;
            size_t bad, k = tok_utf8_next(u + a, b - a, &cp, &bad);
            if (!k || !tok_is_white_space(cp)) break;
            a += k;
        }
    }
    if (nm->right) {
        while (b > a) {
            size_t st = b - 1;
            while (st > a && (u[st] & 0xC0) == 0x80) st--;
            uint32_t cp;
            size_t bad, k = tok_utf8_next(u + st, b - st, &cp, &bad);
            if (!k || !tok_is_white_space(cp)) break;
            b = st;
        }
    }
    return tok_buf_put(out, s + a, b - a);
}

static weft_status norm_replace(const tok_norm *nm, const char *s, size_t n, tok_buf *out, weft_err *err) {
    if (!nm->re) {
        size_t i = 0, run = 0;
        if (nm->alen == 0) return tok_buf_put(out, s, n);
        while (i + nm->alen <= n) {
            if (memcmp(s + i, nm->a, nm->alen) == 0) {
                if (tok_buf_put(out, s + run, i - run) || tok_buf_put(out, nm->b, nm->blen))
                    return WEFT_ENOMEM;
                i += nm->alen;
                run = i;
            } else {
                i++;
            }
        }
        return tok_buf_put(out, s + run, n - run);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(nm->re, NULL);
    if (!md) return WEFT_ENOMEM;
    size_t pos = 0, run = 0;
    weft_status st = WEFT_OK;
    while (pos <= n) {
        int rc = pcre2_match(nm->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            st = weft_err_set(err, WEFT_EINTERNAL, "tokenizer: Replace normalizer regex failed (%d)", rc);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (tok_buf_put(out, s + run, ov[0] - run) || tok_buf_put(out, nm->b, nm->blen)) {
            st = WEFT_ENOMEM;
            break;
        }
        run = ov[1];
        if (ov[1] > ov[0]) {
            pos = ov[1];
        } else { /* empty match: step over one character */
            if (ov[0] >= n) break;
            pos = ov[0] + 1;
            while (pos < n && ((uint8_t)s[pos] & 0xC0) == 0x80) pos++;
            if (tok_buf_put(out, s + run, pos - run)) {
                st = WEFT_ENOMEM;
                break;
            }
            run = pos;
        }
    }
    pcre2_match_data_free(md);
    if (st) return st;
    return tok_buf_put(out, s + run, n - run);
}

weft_status tok_normalize(const struct weft_tokenizer *t, const char *s, size_t n, tok_buf *out,
                          weft_err *err) {
    out->n = 0;
    if (t->n_norm == 0)
        return tok_buf_put(out, s, n) ? weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory") : WEFT_OK;
    tok_buf a = {0}, b = {0};
    weft_status st = tok_buf_put(&a, s, n);
    /* normalizers map empty text to empty text (Prepend included; a Replace regex that matches the empty
     * string aside), so stop there */
    for (int i = 0; i < t->n_norm && !st && a.n > 0; i++) {
        const tok_norm *nm = &t->norm[i];
        b.n = 0;
        switch (nm->kind) {
        case TOK_NORM_NFC:
            st = norm_utf8proc(a.p, a.n, UTF8PROC_COMPOSE, &b, err);
            break;
        case TOK_NORM_NFD:
            st = norm_utf8proc(a.p, a.n, UTF8PROC_DECOMPOSE, &b, err);
            break;
        case TOK_NORM_NFKC:
            st = norm_utf8proc(a.p, a.n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, &b, err);
            break;
        case TOK_NORM_NFKD:
            st = norm_utf8proc(a.p, a.n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, &b, err);
            break;
        case TOK_NORM_LOWER:
            st = norm_lower(a.p, a.n, &b, err);
            break;
        case TOK_NORM_STRIP:
            st = norm_strip(nm, a.p, a.n, &b);
            break;
        case TOK_NORM_PREPEND:
            /* HF Prepend: only non-empty text gets the prefix */
            if (a.n) st = tok_buf_put(&b, nm->a, nm->alen);
            if (!st) st = tok_buf_put(&b, a.p, a.n);
            break;
        case TOK_NORM_REPLACE:
            st = norm_replace(nm, a.p, a.n, &b, err);
            break;
        }
        tok_buf tmp = a;
        a = b;
        b = tmp;
    }
    if (!st) st = tok_buf_put(out, a.p, a.n);
    tok_buf_free(&a);
    tok_buf_free(&b);
    /* the helpers name every failure except running out of memory */
    if (st == WEFT_ENOMEM) return weft_err_set(err, WEFT_ENOMEM, "tokenizer: out of memory normalizing");
    return st;
}
