/* strmethods.c — Python str methods on template strings (indices and lengths count code points, as Python
 * does): case mapping, strip, split/rsplit, replace, find/index/count, startswith/endswith, join, format...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

static int finish(trender *r, tbuf *b, unsigned flags, tv *out) {
    if (b->fail) {
        tb_free(b);
        return tr_oom(r);
    }
    *out = tv_str_copy(r, b->p ? b->p : "", b->n);
    tb_free(b);
    out->flags = (uint8_t)flags;
    return r->failed ? -1 : 0;
}

static void put_cp(tbuf *b, uint32_t cp) {
    char enc[4];
    tb_put(b, enc, u8_encode(cp, enc));
}

int tmpl_str_case(trender *r, const tv *s, int mode, tv *out) {
    tbuf b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    bool prev_cased = false, first = true, word_start = true;
    while (i < n) {
        uint32_t c = u8_next(p, n, &i);
        bool up;
        switch (mode) {
        case CASE_UPPER:
            up = true;
            break;
        case CASE_LOWER:
            up = false;
            break;
        case CASE_TITLE:
            up = !prev_cased;
            break;
        case CASE_CAPITALIZE:
            up = first;
            break;
        default:
            up = word_start;
            break; /* jinja2 |title: words start after [-\s({\[<] */
        }
        if (up && c == 0xdf)
            tb_puts(&b, mode == CASE_UPPER ? "SS" : "Ss");
        else
            put_cp(&b, up ? u_upper(c) : u_lower(c));
        prev_cased = u_iscased(c);
        first = false;
        word_start = u_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    }
    return finish(r, &b, s->flags & TVF_SAFE, out);
}

static bool in_chars(uint32_t c, const tv *chars) {
    if (!chars) return u_isspace(c);
    size_t i = 0;
    while (i < chars->u.s.n)
        if (u8_next(chars->u.s.p, chars->u.s.n, &i) == c) return true;
    return false;
}

int tmpl_str_strip(trender *r, const tv *s, const tv *chars, int which, tv *out) {
    if (chars && (chars->t == TV_NONE || chars->t == TV_UNDEF)) chars = NULL;
    if (chars && chars->t != TV_STR) return tr_fail(r, "strip arg must be None or str");
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, first = n, last_end = 0, i = 0;
    while (i < n) {
        size_t st = i;
        if (in_chars(u8_next(p, n, &i), chars)) continue;
        if (first == n) first = st;
        last_end = i;
    }
    size_t b = 0, e = 0; /* all strippable: the result is empty whichever side is stripped */
    if (first < n) {
        b = (which & 1) ? first : 0;
        e = (which & 2) ? last_end : n;
    }
    *out = tv_strn(p + b, e - b);
    out->flags = s->flags & TVF_SAFE;
    return 0;
}

int tmpl_str_replace(trender *r, const tv *s, const tv *old, const tv *rep, int64_t count, tv *out) {
    if (old->t != TV_STR || rep->t != TV_STR) return tr_fail(r, "replace() arguments must be str");
    tbuf b = {.limit = r->opts->max_output};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int64_t done = 0;
    if (old->u.s.n == 0) { /* Python inserts `rep` around every code point */
        while (i <= n) {
            if (count < 0 || done < count) {
                tb_put(&b, rep->u.s.p, rep->u.s.n);
                done++;
            }
            if (i == n) break;
            size_t st = i;
            u8_next(p, n, &i);
            tb_put(&b, p + st, i - st);
        }
        return finish(r, &b, 0, out);
    }
    while (i < n && (count < 0 || done < count)) {
        const char *hit = memmem(p + i, n - i, old->u.s.p, old->u.s.n);
        if (!hit) break;
        size_t at = (size_t)(hit - p);
        tb_put(&b, p + i, at - i);
        tb_put(&b, rep->u.s.p, rep->u.s.n);
        i = at + old->u.s.n;
        done++;
    }
    tb_put(&b, p + i, n - i);
    return finish(r, &b, 0, out);
}

static const char *memrmem_(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

int tmpl_str_split(trender *r, const tv *s, const tv *sep, int64_t maxsplit, bool right, tv *out) {
    tlist *l = tl_new(r, 0);
    if (!l) return -1;
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    int64_t left = maxsplit < 0 ? INT64_MAX : maxsplit;
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_STR)
            return tr_fail(r, "must be str or None, not %s", tv_typename(sep->t, sep->flags));
        if (sep->u.s.n == 0) return tr_fail(r, "empty separator");
        const char *q = sep->u.s.p;
        size_t qn = sep->u.s.n;
        if (!right) {
            size_t i = 0;
            while (left-- > 0) {
                const char *hit = i <= n ? memmem(p + i, n - i, q, qn) : NULL;
                if (!hit) break;
                if (tl_push(r, l, tv_strn(p + i, (size_t)(hit - p) - i))) return -1;
                i = (size_t)(hit - p) + qn;
            }
            if (tl_push(r, l, tv_strn(p + i, n - i))) return -1;
        } else {
            size_t e = n;
            while (left-- > 0) {
                const char *hit = memrmem_(p, e, q, qn);
                if (!hit) break;
                size_t at = (size_t)(hit - p);
                if (tl_push(r, l, tv_strn(p + at + qn, e - at - qn))) return -1;
                e = at;
            }
            if (tl_push(r, l, tv_strn(p, e))) return -1;
            for (size_t a = 0, z = l->n ? l->n - 1 : 0; a < z; a++, z--) {
                tv t = l->v[a];
                l->v[a] = l->v[z];
                l->v[z] = t;
            }
        }
        *out = tv_list(l, 0);
        return 0;
    }
    /* whitespace split over code points (Objects/stringlib/split.h) */
    size_t ncp = 0, i = 0;
    size_t *off = malloc((n + 1) * sizeof *off);
    bool *sp = malloc(n + 1);
    if (!off || !sp) {
        free(off);
        free(sp);
        return tr_oom(r);
    }
    while (i < n) {
        off[ncp] = i;
        sp[ncp] = u_isspace(u8_next(p, n, &i));
        ncp++;
    }
    off[ncp] = n;
    int rc = 0;
    if (!right) {
        size_t k = 0;
        while (left-- > 0 && !rc) {
            while (k < ncp && sp[k]) k++;
            if (k == ncp) break;
            size_t j = k++;
            while (k < ncp && !sp[k]) k++;
            rc = tl_push(r, l, tv_strn(p + off[j], off[k] - off[j]));
        }
        if (!rc && k < ncp) {
            while (k < ncp && sp[k]) k++;
            if (k != ncp) rc = tl_push(r, l, tv_strn(p + off[k], n - off[k]));
        }
    } else {
        int64_t k = (int64_t)ncp - 1;
        while (left-- > 0 && !rc) {
            while (k >= 0 && sp[k]) k--;
            if (k < 0) break;
            int64_t j = k--;
            while (k >= 0 && !sp[k]) k--;
            rc = tl_push(r, l, tv_strn(p + off[k + 1], off[j + 1] - off[k + 1]));
        }
        if (!rc && k >= 0) {
            while (k >= 0 && sp[k]) k--;
            if (k >= 0) rc = tl_push(r, l, tv_strn(p, off[k + 1]));
        }
        for (size_t a = 0, z = l->n ? l->n - 1 : 0; !rc && a < z; a++, z--) {
            tv t = l->v[a];
            l->v[a] = l->v[z];
            l->v[z] = t;
        }
    }
    free(off);
    free(sp);
    if (rc) return -1;
    *out = tv_list(l, 0);
    return 0;
}

/* ---------------------------------------------------------------- method dispatch */
static const tv *arg_str(trender *r, const targs *a, size_t i, const char *name, const char *m, bool opt) {
    const tv *v = targ(a, i, name);
    if (!v) {
        if (!opt) tr_fail(r, "%s() missing required argument '%s'", m, name);
        return NULL;
    }
    if (v->t != TV_STR) {
        tr_fail(r, "%s() argument must be str, not %s", m, tv_typename(v->t, v->flags));
        return NULL;
    }
    return v;
}

static int64_t arg_int(const targs *a, size_t i, const char *name, int64_t dflt) {
    const tv *v = targ(a, i, name);
    return (v && (v->t == TV_INT || v->t == TV_BOOL)) ? v->u.i : dflt;
}

static bool affix(const tv *s, const tv *x, bool end) {
    if (x->u.s.n > s->u.s.n) return false;
    return memcmp(s->u.s.p + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.p, x->u.s.n) == 0;
}

static int str_format(trender *r, const tv *self, const targs *a, tv *out) {
    tbuf b = {0};
    const char *p = self->u.s.p;
    size_t n = self->u.s.n, autoi = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            tb_putc(&b, c);
            i++;
            continue;
        }
        if (c == '}') return tb_free(&b), tr_fail(r, "Single '}' encountered in format string");
        if (c != '{') {
            tb_putc(&b, c);
            continue;
        }
        size_t e = i + 1;
        while (e < n && p[e] != '}') e++;
        if (e >= n) return tb_free(&b), tr_fail(r, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fn = e - i - 1, nm = 0;
        while (nm < fn && f[nm] != '!' && f[nm] != ':') nm++;
        bool rep = nm + 1 < fn && f[nm] == '!' && f[nm + 1] == 'r';
        if (nm < fn && f[nm] == ':')
            return tb_free(&b), tr_fail(r, "format specs in str.format are not supported");
        const tv *v = NULL;
        if (nm == 0)
            v = autoi < a->npos ? &a->pos[autoi++] : NULL;
        else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = (size_t)strtoul(f, NULL, 10);
            v = k < a->npos ? &a->pos[k] : NULL;
        } else
            for (size_t k = 0; k < a->nkw; k++)
                if (strlen(a->kwn[k]) == nm && memcmp(a->kwn[k], f, nm) == 0) v = &a->kw[k];
        if (!v) return tb_free(&b), tr_fail(r, "str.format: no argument for '{%.*s}'", (int)fn, f);
        if (rep)
            tv_repr(&b, v);
        else
            tv_to_str(&b, v);
        i = e;
    }
    return finish(r, &b, 0, out);
}

static int find_cp(trender *r, const tv *s, const targs *a, const char *m, bool rev, int64_t *idx) {
    const tv *sub = arg_str(r, a, 0, "sub", m, false);
    if (!sub) return -1;
    const char *hit = rev ? memrmem_(s->u.s.p, s->u.s.n, sub->u.s.p, sub->u.s.n)
                          : memmem(s->u.s.p, s->u.s.n, sub->u.s.p, sub->u.s.n);
    if (sub->u.s.n == 0) hit = s->u.s.p + (rev ? s->u.s.n : 0);
    *idx = hit ? (int64_t)u8_len(s->u.s.p, (size_t)(hit - s->u.s.p)) : -1;
    return 0;
}

static bool all_cp(const tv *s, int cls) {
    if (s->u.s.n == 0) return false;
    size_t i = 0;
    bool cased = false, lower = true, upper = true;
    while (i < s->u.s.n) {
        uint32_t c = u8_next(s->u.s.p, s->u.s.n, &i);
        bool dig = c >= '0' && c <= '9', alpha = u_iscased(c) || (c >= 0x3040 && c <= 0x9fff);
        if (u_iscased(c)) {
            cased = true;
            if (u_lower(c) != c) lower = false;
            if (u_upper(c) != c) upper = false;
        }
        if ((cls == 'd' && !dig) || (cls == 'a' && !alpha) || (cls == 'n' && !dig && !alpha) ||
            (cls == 's' && !u_isspace(c)))
            return false;
    }
    if (cls == 'l') return cased && lower;
    if (cls == 'u') return cased && upper;
    return true;
}

static int pad(trender *r, const tv *s, const targs *a, int how, tv *out) {
    int64_t width = arg_int(a, 0, "width", 0);
    const tv *fc = targ(a, 1, "fillchar");
    char fill[4] = {' '};
    size_t fl = 1;
    if (fc && fc->t == TV_STR && u8_len(fc->u.s.p, fc->u.s.n) == 1) {
        memcpy(fill, fc->u.s.p, fc->u.s.n);
        fl = fc->u.s.n;
    }
    if (how == 'z') fill[0] = '0';
    int64_t len = (int64_t)u8_len(s->u.s.p, s->u.s.n), marg = width - len;
    if (marg <= 0) {
        *out = *s;
        return 0;
    }
    int64_t left = how == 'c' ? marg / 2 + (marg & width & 1) : how == 'l' ? 0 : marg;
    tbuf b = {.limit = r->opts->max_output};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    if (how == 'z' && n && (p[0] == '-' || p[0] == '+')) {
        tb_putc(&b, p[0]);
        p++;
        n--;
    }
    for (int64_t k = 0; k < left; k++) tb_put(&b, fill, fl);
    tb_put(&b, p, n);
    for (int64_t k = 0; k < marg - left; k++) tb_put(&b, fill, fl);
    return finish(r, &b, 0, out);
}

int tmpl_str_method(trender *r, const tv *s, const char *m, const targs *a, tv *out) {
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize"))
        return tmpl_str_case(r, s,
                             m[0] == 'u'   ? CASE_UPPER
                             : m[0] == 'l' ? CASE_LOWER
                             : m[0] == 't' ? CASE_TITLE
                                           : CASE_CAPITALIZE,
                             out);
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip"))
        return tmpl_str_strip(r, s, targ(a, 0, "chars"), m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3, out);
    if (!strcmp(m, "split") || !strcmp(m, "rsplit"))
        return tmpl_str_split(r, s, targ(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1), m[0] == 'r', out);
    if (!strcmp(m, "replace")) {
        const tv *o = targ(a, 0, "old"), *nw = targ(a, 1, "new");
        if (!o || !nw) return tr_fail(r, "replace() takes at least 2 arguments");
        return tmpl_str_replace(r, s, o, nw, arg_int(a, 2, "count", -1), out);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        const tv *x = targ(a, 0, "prefix");
        bool end = m[0] == 'e', res = false;
        if (x && x->t == TV_LIST && (x->flags & TVF_TUPLE)) {
            for (size_t i = 0; i < x->u.l->n; i++) {
                if (x->u.l->v[i].t != TV_STR) return tr_fail(r, "%s: tuple items must be str", m);
                res = res || affix(s, &x->u.l->v[i], end);
            }
        } else if (x && x->t == TV_STR)
            res = affix(s, x, end);
        else
            return tr_fail(r, "%s first arg must be str or a tuple of str", m);
        *out = tv_bool(res);
        return 0;
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        int64_t idx;
        if (find_cp(r, s, a, m, m[0] == 'r', &idx)) return -1;
        if (idx < 0 && strstr(m, "index")) return tr_fail(r, "substring not found");
        *out = tv_int(idx);
        return 0;
    }
    if (!strcmp(m, "count")) {
        const tv *sub = arg_str(r, a, 0, "sub", m, false);
        if (!sub) return -1;
        int64_t k = 0;
        if (sub->u.s.n == 0)
            k = (int64_t)u8_len(s->u.s.p, s->u.s.n) + 1;
        else
            for (size_t i = 0; i + sub->u.s.n <= s->u.s.n;) {
                const char *h = memmem(s->u.s.p + i, s->u.s.n - i, sub->u.s.p, sub->u.s.n);
                if (!h) break;
                k++;
                i = (size_t)(h - s->u.s.p) + sub->u.s.n;
            }
        *out = tv_int(k);
        return 0;
    }
    if (!strcmp(m, "join")) {
        const tv *it = targ(a, 0, "iterable");
        tlist *l;
        if (!it) return tr_fail(r, "join() takes exactly one argument");
        if (tmpl_iter(r, it, &l)) return -1;
        tbuf b = {.limit = r->opts->max_output};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != TV_STR) {
                tb_free(&b);
                return tr_fail(r, "sequence item %zu: expected str instance, %s found", i,
                               tv_typename(l->v[i].t, l->v[i].flags));
            }
            if (i) tb_put(&b, s->u.s.p, s->u.s.n);
            tb_put(&b, l->v[i].u.s.p, l->v[i].u.s.n);
        }
        return finish(r, &b, 0, out);
    }
    if (!strcmp(m, "splitlines")) {
        tlist *l = tl_new(r, 0);
        if (!l) return -1;
        bool keep = tv_truthy(targ(a, 0, "keepends") ? targ(a, 0, "keepends") : &(tv){.t = TV_NONE});
        const char *p = s->u.s.p;
        size_t n = s->u.s.n, i = 0, st = 0;
        while (i < n) {
            size_t cs = i;
            uint32_t c = u8_next(p, n, &i);
            bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
                       c == 0x85 || c == 0x2028 || c == 0x2029;
            if (!brk) continue;
            if (c == '\r' && i < n && p[i] == '\n') i++;
            if (tl_push(r, l, tv_strn(p + st, (keep ? i : cs) - st))) return -1;
            st = i;
        }
        if (st < n && tl_push(r, l, tv_strn(p + st, n - st))) return -1;
        *out = tv_list(l, 0);
        return 0;
    }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal") || !strcmp(m, "isnumeric"))
        return *out = tv_bool(all_cp(s, 'd')), 0;
    if (!strcmp(m, "isalpha")) return *out = tv_bool(all_cp(s, 'a')), 0;
    if (!strcmp(m, "isalnum")) return *out = tv_bool(all_cp(s, 'n')), 0;
    if (!strcmp(m, "isspace")) return *out = tv_bool(all_cp(s, 's')), 0;
    if (!strcmp(m, "islower")) return *out = tv_bool(all_cp(s, 'l')), 0;
    if (!strcmp(m, "isupper")) return *out = tv_bool(all_cp(s, 'u')), 0;
    if (!strcmp(m, "format")) return str_format(r, s, a, out);
    if (!strcmp(m, "center")) return pad(r, s, a, 'c', out);
    if (!strcmp(m, "ljust")) return pad(r, s, a, 'l', out);
    if (!strcmp(m, "rjust")) return pad(r, s, a, 'r', out);
    if (!strcmp(m, "zfill")) return pad(r, s, a, 'z', out);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        const tv *x = arg_str(r, a, 0, "prefix", m, false);
        if (!x) return -1;
        bool end = m[6] == 's';
        *out = *s;
        if (affix(s, x, end)) {
            out->u.s.n -= x->u.s.n;
            if (!end) out->u.s.p += x->u.s.n;
        }
        return 0;
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        const tv *x = arg_str(r, a, 0, "sep", m, false);
        if (!x) return -1;
        if (x->u.s.n == 0) return tr_fail(r, "empty separator");
        bool rev = m[0] == 'r';
        const char *h = rev ? memrmem_(s->u.s.p, s->u.s.n, x->u.s.p, x->u.s.n)
                            : memmem(s->u.s.p, s->u.s.n, x->u.s.p, x->u.s.n);
        tlist *l = tl_new(r, 3);
        if (!l) return -1;
        tv empty = tv_strn("", 0);
        if (!h) {
            l->v[0] = rev ? empty : *s;
            l->v[1] = empty;
            l->v[2] = rev ? *s : empty;
        } else {
            size_t at = (size_t)(h - s->u.s.p);
            l->v[0] = tv_strn(s->u.s.p, at);
            l->v[1] = *x;
            l->v[2] = tv_strn(s->u.s.p + at + x->u.s.n, s->u.s.n - at - x->u.s.n);
        }
        l->n = 3;
        *out = tv_list(l, TVF_TUPLE);
        return 0;
    }
    return tr_fail(r, "'str' object has no method '%s'", m);
}
