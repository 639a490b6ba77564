/* methods.c — bound methods of dicts and lists, the loop object, and the globals transformers exposes to
 * chat templates: range, namespace, dict (jinja2 defaults), raise_exception and strftime_now (transformers).
 * The sandbox's rules apply: methods that would mutate a value are refused, range() is capped at 100000. */
#include <locale.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tmpl.h"

const tv *targ(const targs *a, size_t i, const char *name) {
    if (i < a->npos) return &a->pos[i];
    if (name)
        for (size_t k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], name)) return &a->kw[k];
    return NULL;
}

int targs_check(trender *r, const targs *a, size_t maxpos, const char *const *allowed, const char *what) {
    if (a->npos > maxpos) return tr_fail(r, "%s takes at most %zu positional argument(s)", what, maxpos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (const char *const *p = allowed; p && *p && !ok; p++) ok = !strcmp(*p, a->kwn[k]);
        if (!ok) return tr_fail(r, "%s got an unexpected keyword argument '%s'", what, a->kwn[k]);
    }
    return 0;
}

static const char *const STR_METHODS[] = {
    "upper",      "lower",   "title",   "capitalize", "strip",        "lstrip",       "rstrip",
    "split",      "rsplit",  "replace", "startswith", "endswith",     "find",         "rfind",
    "index",      "rindex",  "count",   "join",       "splitlines",   "isdigit",      "isdecimal",
    "isnumeric",  "isalpha", "isalnum", "isspace",    "islower",      "isupper",      "format",
    "center",     "ljust",   "rjust",   "zfill",      "removeprefix", "removesuffix", "partition",
    "rpartition", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy",
                                           /* refused by the immutable sandbox when called: */
                                           "pop", "popitem", "update", "clear", "setdefault", NULL};
static const char *const LIST_METHODS[] = {"index", "count",  "copy",    "append", "extend", "insert",
                                           "pop",   "remove", "reverse", "sort",   "clear",  NULL};

static bool in_names(const char *const *names, const char *s, size_t n) {
    for (; *names; names++)
        if (strlen(*names) == n && memcmp(*names, s, n) == 0) return true;
    return false;
}

bool tmpl_has_method(int type, const char *name, size_t n) {
    switch (type) {
    case TV_STR:
        return in_names(STR_METHODS, name, n);
    case TV_DICT:
        return in_names(DICT_METHODS, name, n);
    case TV_LIST:
        return in_names(LIST_METHODS, name, n);
    default:
        return false;
    }
}

static int dict_view(trender *r, const tdict *d, int which, tv *out) {
    tlist *l = tl_new(r, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (which == 'k')
            l->v[i] = d->k[i];
        else if (which == 'v')
            l->v[i] = d->v[i];
        else {
            tlist *p = tl_new(r, 2);
            if (!p) return -1;
            p->v[0] = d->k[i];
            p->v[1] = d->v[i];
            p->n = 2;
            l->v[i] = tv_list(p, TVF_TUPLE);
        }
    }
    l->n = d->n;
    *out = tv_list(l, which == 'k' ? TVF_KEYS : which == 'v' ? TVF_VALUES : TVF_ITEMS);
    return 0;
}

int tmpl_call_method(trender *r, const tmethod *m, const targs *a, tv *out) {
    const tv *s = &m->self;
    const char *nm = m->name;
    if (s->t == TV_STR) return tmpl_str_method(r, s, nm, a, out);
    if (s->t == TV_LOOP && !strcmp(nm, "cycle")) {
        if (a->npos == 0) return tr_fail(r, "no items for cycling given");
        *out = a->pos[s->u.lp->i % a->npos];
        return 0;
    }
    if (s->t == TV_DICT) {
        const tdict *d = s->u.d;
        if (!strcmp(nm, "get")) {
            const tv *k = targ(a, 0, "key"), *dflt = targ(a, 1, "default");
            if (!k) return tr_fail(r, "get expected at least 1 argument, got 0");
            const tv *v = td_get(d, *k);
            *out = v ? *v : dflt ? *dflt : tv_none();
            return 0;
        }
        if (!strcmp(nm, "items")) return dict_view(r, d, 'i', out);
        if (!strcmp(nm, "keys")) return dict_view(r, d, 'k', out);
        if (!strcmp(nm, "values")) return dict_view(r, d, 'v', out);
        if (!strcmp(nm, "copy")) {
            tdict *c = td_new(r, d->n);
            if (!c) return -1;
            for (size_t i = 0; i < d->n; i++) {
                c->k[i] = d->k[i];
                c->v[i] = d->v[i];
            }
            c->n = d->n;
            *out = (tv){.t = TV_DICT, .u.d = c};
            return 0;
        }
    }
    if (s->t == TV_LIST) {
        const tlist *l = s->u.l;
        if (!strcmp(nm, "index") || !strcmp(nm, "count")) {
            const tv *x = targ(a, 0, "value");
            if (!x) return tr_fail(r, "%s() takes exactly one argument", nm);
            int64_t k = 0;
            for (size_t i = 0; i < l->n; i++) {
                if (!tv_equal(&l->v[i], x)) continue;
                if (nm[0] == 'i') {
                    *out = tv_int((int64_t)i);
                    return 0;
                }
                k++;
            }
            if (nm[0] == 'i') return tr_fail(r, "value is not in list");
            *out = tv_int(k);
            return 0;
        }
        if (!strcmp(nm, "copy")) {
            *out = *s;
            return 0;
        }
    }
    return tr_fail(r, "access to attribute '%s' of '%s' object is unsafe.", nm, tv_typename(s->t, s->flags));
}

/* ---------------------------------------------------------------- loop */
int tmpl_loop_attr(trender *r, const tv *obj, const char *name, size_t n, tv *out) {
    if (obj->t != TV_LOOP) return 0;
    const tloop *lp = obj->u.lp;
    int64_t i = (int64_t)lp->i, len = (int64_t)lp->n;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index"))
        *out = tv_int(i + 1);
    else if (IS("index0"))
        *out = tv_int(i);
    else if (IS("revindex"))
        *out = tv_int(len - i);
    else if (IS("revindex0"))
        *out = tv_int(len - i - 1);
    else if (IS("first"))
        *out = tv_bool(i == 0);
    else if (IS("last"))
        *out = tv_bool(i == len - 1);
    else if (IS("length"))
        *out = tv_int(len);
    else if (IS("depth"))
        *out = tv_int(lp->depth);
    else if (IS("depth0"))
        *out = tv_int(lp->depth - 1);
    else if (IS("previtem"))
        *out = i > 0 ? lp->items[i - 1] : tv_undef_named("previtem", 8, TV_LOOP);
    else if (IS("nextitem"))
        *out = i + 1 < len ? lp->items[i + 1] : tv_undef_named("nextitem", 8, TV_LOOP);
    else if (IS("cycle")) {
        tmethod *m = ta_alloc(&r->ar, sizeof *m);
        if (!m) return tr_oom(r);
        m->self = *obj;
        m->name = "cycle";
        *out = (tv){.t = TV_METHOD, .u.m = m};
    } else
        return 0;
#undef IS
    return 1;
}

/* ---------------------------------------------------------------- globals */
enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const GLOBALS[G_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

int tmpl_global_id(const char *name, size_t n) {
    for (int i = 0; i < G_COUNT; i++)
        if (strlen(GLOBALS[i]) == n && memcmp(GLOBALS[i], name, n) == 0) return i;
    return -1;
}

static int kw_dict(trender *r, const targs *a, tdict **out) {
    tdict *d = td_new(r, 0);
    if (!d) return -1;
    if (a->npos > 1) return tr_fail(r, "expected at most 1 positional argument, got %zu", a->npos);
    if (a->npos == 1) {
        const tv *src = &a->pos[0];
        if (src->t == TV_DICT || src->t == TV_NS) {
            for (size_t i = 0; i < src->u.d->n; i++)
                if (td_set(r, d, src->u.d->k[i], src->u.d->v[i])) return -1;
        } else {
            tlist *l;
            if (tmpl_iter(r, src, &l)) return -1;
            for (size_t i = 0; i < l->n; i++) {
                const tv *p = &l->v[i];
                if (p->t != TV_LIST || p->u.l->n != 2)
                    return tr_fail(r, "dictionary update sequence element has wrong length");
                if (td_set(r, d, p->u.l->v[0], p->u.l->v[1])) return -1;
            }
        }
    }
    for (size_t k = 0; k < a->nkw; k++)
        if (td_set(r, d, tv_strn(a->kwn[k], strlen(a->kwn[k])), a->kw[k])) return -1;
    *out = d;
    return 0;
}

static int g_strftime(trender *r, const targs *a, tv *out) {
    const tv *f = targ(a, 0, "format");
    if (!f || f->t != TV_STR) return tr_fail(r, "strftime_now() takes a format string");
    time_t t = r->opts->now_set ? (time_t)r->opts->now_unix : time(NULL);
    struct tm tm;
    if (!(r->opts->now_set ? gmtime_r(&t, &tm) : localtime_r(&t, &tm)))
        return tr_fail(r, "strftime_now: bad time");
    char *fmt = ta_memdup(&r->ar, f->u.s.p, f->u.s.n);
    char buf[512];
    if (!fmt) return tr_oom(r);
    /* Python formats with the C library under the "C" LC_TIME unless the program set a locale; pin it. */
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c) return tr_oom(r);
    size_t k = f->u.s.n ? strftime_l(buf, sizeof buf, fmt, &tm, c) : 0;
    freelocale(c);
    if (f->u.s.n && k == 0) return tr_fail(r, "strftime_now: result too long or empty");
    *out = tv_str_copy(r, buf, k);
    return r->failed ? -1 : 0;
}

int tmpl_call_func(trender *r, int fn, const targs *a, tv *out) {
    switch (fn) {
    case G_RANGE: {
        if (a->nkw) return tr_fail(r, "range() takes no keyword arguments");
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3)
            return tr_fail(r, "range expected 1 to 3 arguments, got %zu", a->npos);
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].t != TV_INT && a->pos[i].t != TV_BOOL)
                return tr_fail(r, "'%s' object cannot be interpreted as an integer",
                               tv_typename(a->pos[i].t, a->pos[i].flags));
            v[a->npos == 1 ? 1 : i] = a->pos[i].u.i;
        }
        if (v[2] == 0) return tr_fail(r, "range() arg 3 must not be zero");
        int64_t cnt = 0;
        if (v[2] > 0 && v[0] < v[1]) cnt = (v[1] - v[0] - 1) / v[2] + 1;
        if (v[2] < 0 && v[0] > v[1]) cnt = (v[0] - v[1] - 1) / (-v[2]) + 1;
        if (cnt > 100000)
            return tr_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        tlist *l = tl_new(r, (size_t)cnt);
        if (!l) return -1;
        for (int64_t i = 0; i < cnt; i++) l->v[l->n++] = tv_int(v[0] + i * v[2]);
        *out = tv_list(l, 0);
        return 0;
    }
    case G_NAMESPACE:
    case G_DICT: {
        tdict *d = NULL;
        if (kw_dict(r, a, &d)) return -1;
        *out = (tv){.t = fn == G_DICT ? TV_DICT : TV_NS, .u.d = d};
        return 0;
    }
    case G_RAISE: {
        const tv *m = targ(a, 0, "message");
        tbuf b = {0};
        if (m) tv_to_str(&b, m);
        tr_fail(r, "%.*s", (int)b.n, b.p ? b.p : "");
        tb_free(&b);
        return -1;
    }
    case G_STRFTIME:
        return g_strftime(r, a, out);
    default:
        return tr_fail(r, "internal: unknown function %d", fn);
    }
}
