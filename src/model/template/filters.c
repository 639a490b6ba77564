/* filters.c — jinja2 3.1 builtin filters (jinja2/filters.py) with transformers' tojson override
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

typedef int (*filter_fn)(trender *r, const tv *in, const targs *a, tv *out);

static int str_out(trender *r, tbuf *b, tv *out) {
    if (b->fail) {
        tb_free(b);
        return tr_oom(r);
    }
    *out = tv_str_copy(r, b->p ? b->p : "", b->n);
    tb_free(b);
    return r->failed ? -1 : 0;
}

static int soft(trender *r, const tv *in, tv *s) {
    *s = tv_stringify(r, in);
    if (in->t == TV_STR) s->flags = in->flags & TVF_SAFE;
    return r->failed ? -1 : 0;
}

static bool arg_bool(const targs *a, size_t i, const char *n, bool d) {
    const tv *v = targ(a, i, n);
    return v ? tv_truthy(v) : d;
}

/* A case-insensitive sort/compare key (jinja2 ignore_case). */
static int ci_key(trender *r, const tv *v, bool cs, tv *out) {
    if (cs || v->t != TV_STR) {
        *out = *v;
        return 0;
    }
    return tmpl_str_case(r, v, CASE_LOWER, out);
}

/* jinja2 make_attrgetter: "a.b.0" walks getitem with integer parts. */
static int attr_path(trender *r, const tv *obj, const tv *path, tv *out) {
    if (!path || path->t == TV_NONE) {
        *out = *obj;
        return 0;
    }
    if (path->t == TV_INT) return tmpl_getitem(r, obj, path, out);
    if (path->t != TV_STR) return tr_fail(r, "attribute must be a string");
    tv cur = *obj;
    const char *p = path->u.s.p, *end = p + path->u.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool num = n > 0;
        for (size_t i = 0; i < n; i++) num = num && p[i] >= '0' && p[i] <= '9';
        tv key = num ? tv_int(strtoll(p, NULL, 10)) : tv_strn(p, n), nx;
        if (tmpl_getitem(r, &cur, &key, &nx)) return -1;
        cur = nx;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* Stable merge sort of l by key (ci: case-insensitive strings); -1 on incomparable values. */
static int sort_list(trender *r, tlist *l, const tv *attr, bool cs, bool rev) {
    size_t n = l->n;
    tv *keys = ta_alloc(&r->ar, (n + 1) * sizeof(tv)), *tmpk = ta_alloc(&r->ar, (n + 1) * sizeof(tv));
    tv *tmpv = ta_alloc(&r->ar, (n + 1) * sizeof(tv));
    if (!keys || !tmpk || !tmpv) return tr_oom(r);
    for (size_t i = 0; i < n; i++) {
        tv k;
        if (attr_path(r, &l->v[i], attr, &k) || ci_key(r, &k, cs, &keys[i])) return -1;
    }
    for (size_t w = 1; w < n; w *= 2)
        for (size_t lo = 0; lo + w < n; lo += 2 * w) {
            size_t mid = lo + w, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = 0;
            while (i < mid || j < hi) {
                bool take_right = false;
                if (i < mid && j < hi) {
                    int c;
                    if (tv_compare(r, &keys[j], &keys[i], &c)) return -1;
                    take_right = rev ? c > 0 : c < 0;
                } else
                    take_right = i >= mid;
                size_t src = take_right ? j++ : i++;
                tmpk[k] = keys[src];
                tmpv[k++] = l->v[src];
            }
            memcpy(keys + lo, tmpk, k * sizeof(tv));
            memcpy(l->v + lo, tmpv, k * sizeof(tv));
        }
    return 0;
}

static int copy_iter(trender *r, const tv *in, tlist **out) {
    tlist *src;
    if (tmpl_iter(r, in, &src)) return -1;
    tlist *l = tl_new(r, src->n);
    if (!l) return -1;
    if (src->n) memcpy(l->v, src->v, src->n * sizeof(tv));
    l->n = src->n;
    *out = l;
    return 0;
}

/* ---------------------------------------------------------------- filters */
static int f_abs(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    if (in->t == TV_FLOAT)
        *out = tv_float(fabs(in->u.f));
    else if (in->t == TV_INT || in->t == TV_BOOL) {
        if (in->u.i == INT64_MIN) return tr_fail(r, "integer overflow in abs");
        *out = tv_int(in->u.i < 0 ? -in->u.i : in->u.i);
    } else
        return tr_fail(r, "bad operand type for abs(): '%s'", tv_typename(in->t, in->flags));
    return 0;
}

static int f_attr(trender *r, const tv *in, const targs *a, tv *out) {
    const tv *n = targ(a, 0, "name");
    if (!n || n->t != TV_STR) return tr_fail(r, "attr filter needs an attribute name");
    if (in->t == TV_DICT && !tmpl_has_method(TV_DICT, n->u.s.p, n->u.s.n)) {
        *out = tv_undef_named(n->u.s.p, n->u.s.n, TV_DICT);
        return 0;
    }
    return tmpl_getattr(r, in, n->u.s.p, n->u.s.n, out);
}

static int f_batch(trender *r, const tv *in, const targs *a, tv *out) {
    const tv *cnt = targ(a, 0, "linecount"), *fill = targ(a, 1, "fill_with");
    tlist *src, *res = tl_new(r, 0), *cur = NULL;
    if (!cnt || cnt->t != TV_INT || cnt->u.i <= 0)
        return tr_fail(r, "batch: linecount must be a positive integer");
    if (!res || tmpl_iter(r, in, &src)) return -1;
    for (size_t i = 0; i < src->n; i++) {
        if (!cur || cur->n == (size_t)cnt->u.i) {
            if (!(cur = tl_new(r, 0)) || tl_push(r, res, tv_list(cur, 0))) return -1;
        }
        if (tl_push(r, cur, src->v[i])) return -1;
    }
    if (cur && fill && fill->t != TV_NONE)
        while (cur->n < (size_t)cnt->u.i)
            if (tl_push(r, cur, *fill)) return -1;
    *out = tv_list(res, TVF_GEN);
    return 0;
}

static int f_capitalize(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    return soft(r, in, &s) ? -1 : tmpl_str_case(r, &s, CASE_CAPITALIZE, out);
}

static int f_center(trender *r, const tv *in, const targs *a, tv *out) {
    tv s;
    const tv *w = targ(a, 0, "width");
    tv dflt = tv_int(80);
    targs b = {.pos = (tv *)(w ? w : &dflt), .npos = 1};
    return soft(r, in, &s) ? -1 : tmpl_str_method(r, &s, "center", &b, out);
}

static int f_default(trender *r, const tv *in, const targs *a, tv *out) {
    static const char *const kw[] = {"default_value", "boolean", NULL};
    if (targs_check(r, a, 2, kw, "default")) return -1;
    const tv *d = targ(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (in->t == TV_UNDEF || (boolean && !tv_truthy(in)))
        *out = d ? *d : tv_strn("", 0);
    else
        *out = *in;
    return 0;
}

static int f_dictsort(trender *r, const tv *in, const targs *a, tv *out) {
    if (in->t != TV_DICT) return tr_fail(r, "dictsort expects a mapping");
    const tv *by = targ(a, 1, "by");
    bool cs = arg_bool(a, 0, "case_sensitive", false), rev = arg_bool(a, 2, "reverse", false);
    tlist *l = tl_new(r, in->u.d->n);
    if (!l) return -1;
    for (size_t i = 0; i < in->u.d->n; i++) {
        tlist *p = tl_new(r, 2);
        if (!p) return -1;
        p->v[0] = in->u.d->k[i];
        p->v[1] = in->u.d->v[i];
        p->n = 2;
        l->v[l->n++] = tv_list(p, TVF_TUPLE);
    }
    tv idx = tv_int(by && by->t == TV_STR && by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5) ? 1 : 0);
    if (sort_list(r, l, &idx, cs, rev)) return -1;
    *out = tv_list(l, 0);
    return 0;
}

static int f_escape(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    if (soft(r, in, &s)) return -1;
    *out = tmpl_html_escape(r, &s);
    return r->failed ? -1 : 0;
}

static int f_forceescape(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    if (soft(r, in, &s)) return -1;
    s.flags = 0;
    *out = tmpl_html_escape(r, &s);
    return r->failed ? -1 : 0;
}

static int f_first(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (in->t == TV_LIST && (in->flags & TVF_GEN)) { /* next(iter(gen)) takes one item */
        if (!in->u.l->n) return tr_fail(r, "No first item, sequence was empty.");
        *out = in->u.l->v[0];
        in->u.l->v++;
        in->u.l->n--;
        return 0;
    }
    if (tmpl_iter(r, in, &l)) return -1;
    *out = l->n ? l->v[0] : tv_undef_named("first", 5, TV_LIST);
    return 0;
}

static int f_last(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (in->t == TV_LIST && (in->flags & TVF_GEN)) return tr_fail(r, "'generator' object is not reversible");
    if (tmpl_iter(r, in, &l)) return -1;
    *out = l->n ? l->v[l->n - 1] : tv_undef_named("last", 4, TV_LIST);
    return 0;
}

/* Python int()/float() of a string: surrounding whitespace allowed, underscores between digits. */
static bool parse_num(const tv *s, int base, bool want_float, tv *out) {
    char buf[128];
    size_t k = 0;
    for (size_t i = 0; i < s->u.s.n && k < sizeof buf - 1; i++)
        if (s->u.s.p[i] != '_') buf[k++] = s->u.s.p[i];
    buf[k] = 0;
    char *e;
    const char *b = buf;
    while (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r') b++;
    if (!*b || (want_float && strpbrk(b, "xXpP"))) return false; /* Python float() has no hex form */
    if (want_float)
        *out = tv_float(strtod(b, &e));
    else
        *out = tv_int(strtoll(b, &e, base));
    while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r') e++;
    return *e == 0 && e != b;
}

static int f_float(trender *r, const tv *in, const targs *a, tv *out) {
    (void)r;
    const tv *d = targ(a, 0, "default");
    if (in->t == TV_FLOAT)
        *out = *in;
    else if (in->t == TV_INT || in->t == TV_BOOL)
        *out = tv_float((double)in->u.i);
    else if (!(in->t == TV_STR && parse_num(in, 10, true, out)))
        *out = d ? *d : tv_float(0.0);
    return 0;
}

static int f_int(trender *r, const tv *in, const targs *a, tv *out) {
    (void)r;
    const tv *d = targ(a, 0, "default"), *b = targ(a, 1, "base");
    int base = b && b->t == TV_INT ? (int)b->u.i : 10;
    tv f;
    if (in->t == TV_INT || in->t == TV_BOOL)
        *out = tv_int(in->u.i);
    else if (in->t == TV_FLOAT && isfinite(in->u.f) && fabs(in->u.f) < 9.2e18)
        *out = tv_int((int64_t)in->u.f);
    else if (in->t == TV_STR && parse_num(in, base, false, out))
        return 0;
    else if (in->t == TV_STR && parse_num(in, 10, true, &f) && isfinite(f.u.f) && fabs(f.u.f) < 9.2e18)
        *out = tv_int((int64_t)f.u.f);
    else
        *out = d ? *d : tv_int(0);
    return 0;
}

static int f_format(trender *r, const tv *in, const targs *a, tv *out) {
    tv s;
    if (soft(r, in, &s)) return -1;
    if (a->npos && a->nkw)
        return tr_fail(r, "can't handle positional and keyword arguments at the same time");
    tv args;
    if (a->nkw) {
        tdict *d = td_new(r, a->nkw);
        if (!d) return -1;
        for (size_t i = 0; i < a->nkw; i++)
            if (td_set(r, d, tv_strn(a->kwn[i], strlen(a->kwn[i])), a->kw[i])) return -1;
        args = (tv){.t = TV_DICT, .u.d = d};
    } else {
        tlist *l = tl_new(r, a->npos);
        if (!l) return -1;
        for (size_t i = 0; i < a->npos; i++) l->v[l->n++] = a->pos[i];
        args = tv_list(l, TVF_TUPLE);
    }
    return tmpl_percent_format(r, &s, &args, out);
}

static int f_indent(trender *r, const tv *in, const targs *a, tv *out) {
    tv s;
    if (soft(r, in, &s)) return -1;
    const tv *w = targ(a, 0, "width");
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    tbuf ind = {0}, b = {.limit = r->opts->max_output};
    if (w && w->t == TV_STR)
        tb_put(&ind, w->u.s.p, w->u.s.n);
    else
        for (int64_t i = 0; i < (w && w->t == TV_INT ? w->u.i : 4); i++) tb_putc(&ind, ' ');
    /* jinja2: s += "\n"; lines = s.splitlines(); ... */
    tv nl = tv_strn("\n", 1), lines, src;
    targs none = {0};
    if (!(src = tv_str_concat(r, s, nl)).u.s.p || tmpl_str_method(r, &src, "splitlines", &none, &lines)) {
        tb_free(&ind);
        return -1;
    }
    const tlist *l = lines.u.l;
    if (first) tb_put(&b, ind.p, ind.n);
    for (size_t i = 0; i < l->n; i++) {
        if (i) tb_putc(&b, '\n');
        if (i && (blank || l->v[i].u.s.n)) tb_put(&b, ind.p, ind.n);
        tb_put(&b, l->v[i].u.s.p, l->v[i].u.s.n);
    }
    tb_free(&ind);
    return str_out(r, &b, out);
}

static int f_items(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    if (in->t == TV_UNDEF) {
        tlist *l = tl_new(r, 0);
        *out = tv_list(l, 0);
        return l ? 0 : -1;
    }
    if (in->t != TV_DICT) return tr_fail(r, "Can only get item pairs from a mapping.");
    tmethod m = {.self = *in, .name = "items"};
    targs none = {0};
    if (tmpl_call_method(r, &m, &none, out)) return -1;
    out->flags = TVF_GEN; /* jinja2's do_items is a generator */
    return 0;
}

static int f_join(trender *r, const tv *in, const targs *a, tv *out) {
    const tv *d = targ(a, 0, "d"), *attr = targ(a, 1, "attribute");
    tlist *l;
    if (tmpl_iter(r, in, &l)) return -1;
    tbuf b = {.limit = r->opts->max_output};
    for (size_t i = 0; i < l->n; i++) {
        tv v;
        if (attr_path(r, &l->v[i], attr, &v)) {
            tb_free(&b);
            return -1;
        }
        if (i && d) tv_to_str(&b, d);
        tv_to_str(&b, &v);
    }
    return str_out(r, &b, out);
}

static int f_length(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    switch (in->t) {
    case TV_STR:
        *out = tv_int((int64_t)u8_len(in->u.s.p, in->u.s.n));
        return 0;
    case TV_LIST:
        if (in->flags & TVF_GEN) return tr_fail(r, "object of type 'generator' has no len()");
        *out = tv_int((int64_t)in->u.l->n);
        return 0;
    case TV_DICT:
        *out = tv_int((int64_t)in->u.d->n);
        return 0;
    case TV_UNDEF:
        *out = tv_int(0);
        return 0;
    case TV_LOOP:
        *out = tv_int((int64_t)in->u.lp->n);
        return 0;
    default:
        return tr_fail(r, "object of type '%s' has no len()", tv_typename(in->t, in->flags));
    }
}

static int f_list(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (copy_iter(r, in, &l)) return -1;
    *out = tv_list(l, 0);
    return 0;
}

static int f_lower(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    return soft(r, in, &s) ? -1 : tmpl_str_case(r, &s, CASE_LOWER, out);
}

static int f_upper(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    return soft(r, in, &s) ? -1 : tmpl_str_case(r, &s, CASE_UPPER, out);
}

static int f_title(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    return soft(r, in, &s) ? -1 : tmpl_str_case(r, &s, CASE_JTITLE, out);
}

/* jinja2's map/select/reject/selectattr/rejectattr start with `if value:`, so None maps to nothing. */
static int iter_truthy(trender *r, const tv *in, tlist **out) {
    if (!tv_truthy(in)) return (*out = tl_new(r, 0)) ? 0 : -1;
    return tmpl_iter(r, in, out);
}

static int f_map(trender *r, const tv *in, const targs *a, tv *out) {
    tlist *src, *res;
    if (iter_truthy(r, in, &src) || !(res = tl_new(r, src->n))) return -1;
    const tv *attr = NULL, *dflt = NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        if (!strcmp(a->kwn[k], "attribute"))
            attr = &a->kw[k];
        else if (!strcmp(a->kwn[k], "default"))
            dflt = &a->kw[k];
    }
    int fid = -1;
    targs rest = {0};
    if (!attr) {
        if (!a->npos || a->pos[0].t != TV_STR) return tr_fail(r, "map requires a filter name or attribute=");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)a->pos[0].u.s.n, a->pos[0].u.s.p);
        if ((fid = tmpl_filter_id(name)) < 0) return tr_fail(r, "No filter named '%s'.", name);
        rest = (targs){.pos = a->pos + 1, .npos = a->npos - 1, .kw = a->kw, .kwn = a->kwn, .nkw = a->nkw};
    }
    for (size_t i = 0; i < src->n; i++) {
        tv v;
        if (attr) {
            if (attr_path(r, &src->v[i], attr, &v)) return -1;
            if (v.t == TV_UNDEF && dflt) v = *dflt;
        } else if (tmpl_apply_filter(r, fid, &src->v[i], &rest, &v))
            return -1;
        res->v[res->n++] = v;
    }
    *out = tv_list(res, TVF_GEN);
    return 0;
}

static int minmax(trender *r, const tv *in, const targs *a, tv *out, int want) {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const tv *attr = targ(a, 1, "attribute");
    tlist *l;
    if (tmpl_iter(r, in, &l)) return -1;
    if (!l->n) {
        *out = tv_undef_named("min/max", 7, TV_LIST);
        return 0;
    }
    size_t best = 0;
    tv bk;
    if (attr_path(r, &l->v[0], attr, &bk) || ci_key(r, &bk, cs, &bk)) return -1;
    for (size_t i = 1; i < l->n; i++) {
        tv k;
        int c;
        if (attr_path(r, &l->v[i], attr, &k) || ci_key(r, &k, cs, &k) || tv_compare(r, &k, &bk, &c))
            return -1;
        if (c * want > 0) {
            best = i;
            bk = k;
        }
    }
    *out = l->v[best];
    return 0;
}
static int f_max(trender *r, const tv *in, const targs *a, tv *out) {
    return minmax(r, in, a, out, 1);
}
static int f_min(trender *r, const tv *in, const targs *a, tv *out) {
    return minmax(r, in, a, out, -1);
}

/* select/reject/selectattr/rejectattr */
static int select_impl(trender *r, const tv *in, const targs *a, tv *out, bool want, bool by_attr) {
    tlist *src, *res;
    if (iter_truthy(r, in, &src) || !(res = tl_new(r, 0))) return -1;
    size_t k = 0;
    const tv *attr = NULL;
    if (by_attr) {
        if (!a->npos) return tr_fail(r, "Missing parameter for attribute name");
        attr = &a->pos[k++];
    }
    int tid = -1;
    targs rest = {0};
    if (k < a->npos) {
        if (a->pos[k].t != TV_STR) return tr_fail(r, "test name must be a string");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)a->pos[k].u.s.n, a->pos[k].u.s.p);
        if ((tid = tmpl_test_id(name)) < 0) return tr_fail(r, "No test named '%s'.", name);
        rest = (targs){
            .pos = a->pos + k + 1, .npos = a->npos - k - 1, .kw = a->kw, .kwn = a->kwn, .nkw = a->nkw};
    }
    for (size_t i = 0; i < src->n; i++) {
        tv v;
        bool ok;
        if (attr_path(r, &src->v[i], attr, &v)) return -1;
        if (tid < 0)
            ok = tv_truthy(&v);
        else if (tmpl_apply_test(r, tid, &v, &rest, &ok))
            return -1;
        if (ok == want && tl_push(r, res, src->v[i])) return -1;
    }
    *out = tv_list(res, TVF_GEN);
    return 0;
}
static int f_select(trender *r, const tv *in, const targs *a, tv *out) {
    return select_impl(r, in, a, out, true, false);
}
static int f_reject(trender *r, const tv *in, const targs *a, tv *out) {
    return select_impl(r, in, a, out, false, false);
}
static int f_selectattr(trender *r, const tv *in, const targs *a, tv *out) {
    return select_impl(r, in, a, out, true, true);
}
static int f_rejectattr(trender *r, const tv *in, const targs *a, tv *out) {
    return select_impl(r, in, a, out, false, true);
}

static int f_replace(trender *r, const tv *in, const targs *a, tv *out) {
    tv s;
    const tv *o = targ(a, 0, "old"), *n = targ(a, 1, "new"), *c = targ(a, 2, "count");
    if (!o || !n) return tr_fail(r, "replace filter needs old and new");
    if (soft(r, in, &s)) return -1;
    return tmpl_str_replace(r, &s, o, n, c && c->t == TV_INT ? c->u.i : -1, out);
}

static int f_reverse(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (in->t == TV_STR) {
        if (tmpl_iter(r, in, &l)) return -1;
        tbuf b = {0};
        for (size_t i = l->n; i-- > 0;) tb_put(&b, l->v[i].u.s.p, l->v[i].u.s.n);
        return str_out(r, &b, out);
    }
    /* reversed(seq) is a lazy iterator; a generator is not reversible, so jinja2 falls back to a list */
    bool gen = in->t == TV_LIST && (in->flags & TVF_GEN);
    if (copy_iter(r, in, &l)) return -1;
    for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
        tv t = l->v[i];
        l->v[i] = l->v[j];
        l->v[j] = t;
    }
    *out = tv_list(l, gen ? 0 : TVF_GEN);
    return 0;
}

static int f_round(trender *r, const tv *in, const targs *a, tv *out) {
    const tv *p = targ(a, 0, "precision"), *m = targ(a, 1, "method");
    int64_t prec = p && p->t == TV_INT ? p->u.i : 0;
    if (!tv_is_number(in)) return tr_fail(r, "round expects a number");
    double x = tv_num(in), scale = pow(10.0, (double)prec);
    if (m && m->t == TV_STR && m->u.s.n == 4 && !memcmp(m->u.s.p, "ceil", 4))
        x = ceil(x * scale) / scale;
    else if (m && m->t == TV_STR && m->u.s.n == 5 && !memcmp(m->u.s.p, "floor", 5))
        x = floor(x * scale) / scale;
    else if (m && !(m->t == TV_STR && m->u.s.n == 6 && !memcmp(m->u.s.p, "common", 6)))
        return tr_fail(r, "method must be common, ceil or floor");
    else if (in->t != TV_FLOAT) { /* round(int, n) stays an int: ties to even at 10**-n */
        int64_t v = in->u.i;
        if (prec < 0) {
            int64_t pw = 1;
            for (int64_t k = 0; k < -prec && pw <= INT64_MAX / 10; k++) pw *= 10;
            if (-prec > 18) pw = 0;
            int64_t q = pw ? v / pw : 0, rem = pw ? v % pw : v;
            if (rem < 0) {
                q -= 1;
                rem += pw;
            }
            if (pw && (rem > pw - rem || (rem == pw - rem && (q & 1)))) q += 1;
            if (pw && __builtin_mul_overflow(q, pw, &v)) return tr_fail(r, "integer overflow in round");
            if (!pw) v = 0;
        }
        *out = tv_int(v);
        return 0;
    } else if (prec >= 0 && prec < 300 && isfinite(x)) { /* Python round(): correctly rounded, ties to even */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        x = strtod(buf, NULL);
    } else if (isfinite(x))
        x = nearbyint(x * scale) / scale;
    *out = tv_float(x);
    return 0;
}

static int f_safe(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    if (soft(r, in, out)) return -1;
    out->flags |= TVF_SAFE;
    return 0;
}

static int f_sort(trender *r, const tv *in, const targs *a, tv *out) {
    tlist *l;
    if (copy_iter(r, in, &l)) return -1;
    if (sort_list(r, l, targ(a, 2, "attribute"), arg_bool(a, 1, "case_sensitive", false),
                  arg_bool(a, 0, "reverse", false)))
        return -1;
    *out = tv_list(l, 0);
    return 0;
}

static int f_string(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    return soft(r, in, out);
}

static int f_sum(trender *r, const tv *in, const targs *a, tv *out) {
    const tv *attr = targ(a, 0, "attribute"), *start = targ(a, 1, "start");
    tlist *l;
    if (tmpl_iter(r, in, &l)) return -1;
    tv acc = start ? *start : tv_int(0);
    for (size_t i = 0; i < l->n; i++) {
        tv v, s;
        if (attr_path(r, &l->v[i], attr, &v) || tmpl_binop(r, OP_ADD, &acc, &v, &s)) return -1;
        acc = s;
    }
    *out = acc;
    return 0;
}

static int f_tojson(trender *r, const tv *in, const targs *a, tv *out) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (targs_check(r, a, 4, kw, "tojson")) return -1;
    const tv *ind = targ(a, 1, "indent"), *sep = targ(a, 2, "separators");
    tjson_opts o = {.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false),
                    .sort_keys = arg_bool(a, 3, "sort_keys", false)};
    char spaces[64];
    if (ind && ind->t != TV_NONE) {
        o.has_indent = true;
        if (ind->t == TV_STR) {
            o.indent = ind->u.s.p;
            o.indent_n = ind->u.s.n;
        } else if (ind->t == TV_INT || ind->t == TV_BOOL) {
            int64_t k = ind->u.i < 0 ? 0 : ind->u.i > 63 ? 63 : ind->u.i;
            memset(spaces, ' ', (size_t)k);
            o.indent = spaces;
            o.indent_n = (size_t)k;
        } else
            return tr_fail(r, "tojson: indent must be an int or a string");
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.item_sep_n = o.has_indent ? 1 : 2;
    o.key_sep = ": ";
    o.key_sep_n = 2;
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR || sep->u.l->v[1].t != TV_STR)
            return tr_fail(r, "tojson: separators must be a pair of strings");
        o.item_sep = sep->u.l->v[0].u.s.p;
        o.item_sep_n = sep->u.l->v[0].u.s.n;
        o.key_sep = sep->u.l->v[1].u.s.p;
        o.key_sep_n = sep->u.l->v[1].u.s.n;
    }
    tbuf b = {.limit = r->opts->max_output};
    if (tv_to_json(r, &b, in, &o)) {
        tb_free(&b);
        return -1;
    }
    return str_out(r, &b, out);
}

static int f_trim(trender *r, const tv *in, const targs *a, tv *out) {
    tv s;
    return soft(r, in, &s) ? -1 : tmpl_str_strip(r, &s, targ(a, 0, "chars"), 3, out);
}

static int f_unique(trender *r, const tv *in, const targs *a, tv *out) {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const tv *attr = targ(a, 1, "attribute");
    tlist *l, *res, *seen;
    if (tmpl_iter(r, in, &l) || !(res = tl_new(r, 0)) || !(seen = tl_new(r, 0))) return -1;
    for (size_t i = 0; i < l->n; i++) {
        tv k;
        bool dup = false;
        if (attr_path(r, &l->v[i], attr, &k) || ci_key(r, &k, cs, &k)) return -1;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = tv_equal(&seen->v[j], &k);
        if (!dup && (tl_push(r, seen, k) || tl_push(r, res, l->v[i]))) return -1;
    }
    *out = tv_list(res, TVF_GEN);
    return 0;
}

static int f_wordcount(trender *r, const tv *in, const targs *a, tv *out) {
    (void)a;
    tv s;
    if (soft(r, in, &s)) return -1;
    int64_t words = 0;
    bool inw = false;
    size_t i = 0;
    while (i < s.u.s.n) {
        uint32_t c = u8_next(s.u.s.p, s.u.s.n, &i);
        bool w = (c >= '0' && c <= '9') || c == '_' || u_iscased(c) ||
                 (c >= 0x80 && !u_isspace(c) && u_isprintable(c));
        if (w && !inw) words++;
        inw = w;
    }
    *out = tv_int(words);
    return 0;
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

int tmpl_filter_id(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (!strcmp(FILTERS[i].name, name)) return (int)i;
    return -1;
}

int tmpl_apply_filter(trender *r, int id, const tv *in, const targs *a, tv *out) {
    if (id < 0 || (size_t)id >= sizeof FILTERS / sizeof FILTERS[0])
        return tr_fail(r, "internal: bad filter id");
    return FILTERS[id].fn(r, in, a, out);
}
