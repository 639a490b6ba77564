/* ustr.c — UTF-8 and the Python text rules the engine needs: str.isspace(), a case map, isprintable() for
 * repr(), float repr() and json.dumps(). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

/* ---------------------------------------------------------------- UTF-8 */
uint32_t u8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    uint32_t c = p[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > left) {
        *i += 1;
        return c;
    }
    if (k == 1) {
        *i += 1;
        return c;
    }
    uint32_t cp = c & (0x7f >> k);
    for (size_t j = 1; j < k; j++) {
        if ((p[j] & 0xc0) != 0x80) {
            *i += 1;
            return c;
        }
        cp = (cp << 6) | (p[j] & 0x3f);
    }
    *i += k;
    return cp;
}

size_t u8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t u8_len(const char *s, size_t n) {
    size_t i = 0, k = 0;
    while (i < n) {
        u8_next(s, n, &i);
        k++;
    }
    return k;
}

size_t u8_offset(const char *s, size_t n, size_t cp_index) {
    size_t i = 0;
    while (i < n && cp_index > 0) {
        u8_next(s, n, &i);
        cp_index--;
    }
    return i;
}

/* ---------------------------------------------------------------- character classes */
bool u_isspace(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Simple one-to-one case pairs: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic. */
uint32_t u_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if (c == 0xb5) return 0x39c;
    if (c >= 0xe0 && c <= 0xfe && c != 0xf7) return c - 32;
    if (c == 0xff) return 0x178;
    if (c >= 0x100 && c <= 0x17f) {
        if (c == 0x131) return 'I';
        if (c == 0x17f) return 'S';
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c : c - 1;
        if (c == 0x138 || c == 0x149 || c == 0x130 || c == 0x178) return c;
        return (c & 1) ? c - 1 : c;
    }
    if (c >= 0x3b1 && c <= 0x3c9) return c == 0x3c2 ? 0x3a3 : c - 32;
    if (c == 0x3ac) return 0x386;
    if (c >= 0x3ad && c <= 0x3af) return c - 37;
    if (c == 0x3cc) return 0x38c;
    if (c == 0x3cd || c == 0x3ce) return c - 63;
    if (c == 0x3ca || c == 0x3cb) return c - 32;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}

uint32_t u_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
    if (c == 0x178) return 0xff;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c + 1 : c;
        if (c == 0x138 || c == 0x149 || c == 0x130 || c == 0x131 || c == 0x17f) return c;
        return (c & 1) ? c : c + 1;
    }
    if (c >= 0x391 && c <= 0x3ab && c != 0x3a2) return c + 32;
    if (c == 0x386) return 0x3ac;
    if (c >= 0x388 && c <= 0x38a) return c + 37;
    if (c == 0x38c) return 0x3cc;
    if (c == 0x38e || c == 0x38f) return c + 63;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}

bool u_iscased(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    return u_upper(c) != c || u_lower(c) != c || c == 0xdf || c == 0x138 || c == 0x149;
}

bool u_isprintable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
    if (c < 0x600) return true;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x8e2 || c == 0x1680 ||
        c == 0x180e)
        return false;
    if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) ||
        (c >= 0x2066 && c <= 0x206f) || c == 0x3000)
        return false;
    if ((c >= 0xd800 && c <= 0xf8ff) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || c == 0xfffe ||
        c == 0xffff)
        return false;
    if (c == 0x110bd || c == 0x110cd || (c >= 0x1bca0 && c <= 0x1bca3) || (c >= 0x1d173 && c <= 0x1d17a))
        return false;
    if (c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f) || c >= 0xf0000) return false;
    return true;
}

/* ---------------------------------------------------------------- float repr */
void py_float_repr(tbuf *b, double f) {
    if (isnan(f)) {
        tb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        tb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0.0) {
        tb_puts(b, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    /* Shortest correctly rounded digit string that reads back as f (Python's repr, float_repr_style 'short').
     */
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    const char *p = buf;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char dig[24];
    size_t nd = 0;
    while (*p && *p != 'e') {
        if (*p >= '0' && *p <= '9' && nd < sizeof dig - 1) dig[nd++] = *p;
        p++;
    }
    int e = (*p == 'e') ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    if (neg) tb_putc(b, '-');
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int k = 0; k <= e; k++) tb_putc(b, (size_t)k < nd ? dig[k] : '0');
            tb_putc(b, '.');
            if ((size_t)(e + 1) < nd)
                tb_put(b, dig + e + 1, nd - (size_t)(e + 1));
            else
                tb_putc(b, '0');
        } else {
            tb_puts(b, "0.");
            for (int k = 0; k < -e - 1; k++) tb_putc(b, '0');
            tb_put(b, dig, nd);
        }
    } else {
        tb_putc(b, dig[0]);
        if (nd > 1) {
            tb_putc(b, '.');
            tb_put(b, dig + 1, nd - 1);
        }
        tb_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

/* ---------------------------------------------------------------- json.dumps */
static void json_str(tbuf *b, const char *s, size_t n, bool ascii) {
    tb_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t c = u8_next(s, n, &i);
        switch (c) {
        case '"':
            tb_puts(b, "\\\"");
            continue;
        case '\\':
            tb_puts(b, "\\\\");
            continue;
        case '\n':
            tb_puts(b, "\\n");
            continue;
        case '\r':
            tb_puts(b, "\\r");
            continue;
        case '\t':
            tb_puts(b, "\\t");
            continue;
        case '\b':
            tb_puts(b, "\\b");
            continue;
        case '\f':
            tb_puts(b, "\\f");
            continue;
        default:
            break;
        }
        if (c < 0x20 || (ascii && c >= 0x7f)) {
            if (c >= 0x10000) {
                uint32_t v = c - 0x10000;
                tb_printf(b, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else
                tb_printf(b, "\\u%04x", c);
        } else
            tb_put(b, s + st, i - st);
    }
    tb_putc(b, '"');
}

static void json_newline(tbuf *b, const tjson_opts *o, int level) {
    tb_putc(b, '\n');
    for (int k = 0; k < level; k++) tb_put(b, o->indent, o->indent_n);
}

/* Python converts non-string keys: True -> "true", None -> "null", numbers by repr. */
static int json_key(trender *r, const tv *k, tv *out) {
    switch (k->t) {
    case TV_STR:
        *out = *k;
        return 0;
    case TV_BOOL:
        *out = tv_strn(k->u.i ? "true" : "false", k->u.i ? 4 : 5);
        return 0;
    case TV_NONE:
        *out = tv_strn("null", 4);
        return 0;
    case TV_INT:
    case TV_FLOAT:
        *out = tv_stringify(r, k);
        return r->failed ? -1 : 0;
    default:
        return tr_fail(r, "keys must be str, int, float, bool or None, not %s", tv_typename(k->t, k->flags));
    }
}

static int json_impl(trender *r, tbuf *b, const tv *v, const tjson_opts *o, int level) {
    if (level > 256) return tr_fail(r, "tojson: nesting too deep");
    switch (v->t) {
    case TV_NONE:
        tb_puts(b, "null");
        return 0;
    case TV_BOOL:
        tb_puts(b, v->u.i ? "true" : "false");
        return 0;
    case TV_INT:
        tb_printf(b, "%" PRId64, v->u.i);
        return 0;
    case TV_FLOAT:
        if (isnan(v->u.f))
            tb_puts(b, "NaN");
        else if (isinf(v->u.f))
            tb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else
            py_float_repr(b, v->u.f);
        return 0;
    case TV_STR:
        json_str(b, v->u.s.p, v->u.s.n, o->ensure_ascii);
        return 0;
    case TV_LIST: {
        const tlist *l = v->u.l;
        if (v->flags & TVF_LAZY)
            return tr_fail(r, "Object of type %s is not JSON serializable", tv_typename(v->t, v->flags));
        if (l->n == 0) {
            tb_puts(b, "[]");
            return 0;
        }
        tb_putc(b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) tb_put(b, o->item_sep, o->item_sep_n);
            if (o->has_indent) json_newline(b, o, level + 1);
            if (json_impl(r, b, &l->v[i], o, level + 1)) return -1;
        }
        if (o->has_indent) json_newline(b, o, level);
        tb_putc(b, ']');
        return 0;
    }
    case TV_DICT: {
        const tdict *d = v->u.d;
        if (d->n == 0) {
            tb_puts(b, "{}");
            return 0;
        }
        size_t *ord = malloc(d->n * sizeof *ord);
        if (!ord) return tr_oom(r);
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        if (o->sort_keys) { /* insertion sort by key (str keys; mixed types fail as in Python) */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0) {
                    int c = 0;
                    if (tv_compare(r, &d->k[ord[j - 1]], &d->k[x], &c)) {
                        free(ord);
                        return -1;
                    }
                    if (c <= 0) break;
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = x;
            }
        }
        tb_putc(b, '{');
        for (size_t i = 0; i < d->n; i++) {
            tv key = tv_strn("", 0);
            if (json_key(r, &d->k[ord[i]], &key)) {
                free(ord);
                return -1;
            }
            if (i) tb_put(b, o->item_sep, o->item_sep_n);
            if (o->has_indent) json_newline(b, o, level + 1);
            json_str(b, key.u.s.p, key.u.s.n, o->ensure_ascii);
            tb_put(b, o->key_sep, o->key_sep_n);
            if (json_impl(r, b, &d->v[ord[i]], o, level + 1)) {
                free(ord);
                return -1;
            }
        }
        free(ord);
        if (o->has_indent) json_newline(b, o, level);
        tb_putc(b, '}');
        return 0;
    }
    default:
        return tr_fail(r, "Object of type %s is not JSON serializable", tv_typename(v->t, v->flags));
    }
}

int tv_to_json(trender *r, tbuf *b, const tv *v, const tjson_opts *o) {
    if (json_impl(r, b, v, o, 0)) return -1;
    if (b->fail) return tr_oom(r);
    return 0;
}
