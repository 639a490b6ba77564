/* value.c — arena, byte buffer and the template value model (Python semantics: truthiness, ==, ordering,
 * str() and repr()). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

/* ---------------------------------------------------------------- arena */
struct ta_blk {
    ta_blk *next;
    size_t used, cap;
    max_align_t data[];
};

void *ta_alloc(tarena *a, size_t n) {
    n = (n + 15u) & ~(size_t)15u;
    if (n == 0) n = 16;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 60000 ? n : 65536 - sizeof(ta_blk);
        if (a->limit && a->total + cap > a->limit) return NULL;
        ta_blk *b = malloc(sizeof(ta_blk) + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        a->total += cap;
        if (a->head && n > 60000) { /* big one-off: keep filling the current block afterwards */
            b->next = a->head->next;
            a->head->next = b;
            b->used = n;
            memset(b->data, 0, n);
            return b->data;
        }
        b->next = a->head;
        a->head = b;
    }
    char *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

void ta_free_all(tarena *a) {
    ta_blk *b = a->head;
    while (b) {
        ta_blk *nx = b->next;
        free(b);
        b = nx;
    }
    a->head = NULL;
    a->total = 0;
}

char *ta_memdup(tarena *a, const char *s, size_t n) {
    char *p = ta_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---------------------------------------------------------------- tbuf */
void tb_put(tbuf *b, const char *s, size_t n) {
    if (b->fail || n == 0) return;
    if (b->limit && b->n + n > b->limit) {
        b->fail = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->fail = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void tb_puts(tbuf *b, const char *s) {
    tb_put(b, s, strlen(s));
}
void tb_putc(tbuf *b, char c) {
    tb_put(b, &c, 1);
}
void tb_printf(tbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        tb_put(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->fail = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    tb_put(b, big, (size_t)k);
    free(big);
}
void tb_free(tbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---------------------------------------------------------------- errors */
int tr_fail(trender *r, const char *fmt, ...) {
    if (r->failed) return -1;
    r->failed = true;
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    weft_err_set(r->err, WEFT_EINVAL, "chat template line %d: %s", r->line, msg);
    return -1;
}

int tr_oom(trender *r) {
    if (r->failed) return -1;
    r->failed = true;
    weft_err_set(r->err, WEFT_ENOMEM, "chat template line %d: out of memory (render limit %zu bytes)",
                 r->line, r->ar.limit);
    return -1;
}

tv tv_undef_named(const char *name, size_t n, int objtype) {
    tv v = {.t = TV_UNDEF, .utype = (uint8_t)objtype};
    v.u.s.p = name;
    v.u.s.n = n;
    return v;
}

int tr_undef_error(trender *r, const tv *u) {
    if (u->utype == TV_UNDEF)
        return tr_fail(r, "'%.*s' is undefined", (int)u->u.s.n, u->u.s.p ? u->u.s.p : "");
    return tr_fail(r, "'%s object' has no attribute '%.*s'", tv_typename(u->utype, 0), (int)u->u.s.n,
                   u->u.s.p ? u->u.s.p : "");
}

/* ---------------------------------------------------------------- containers */
tlist *tl_new(trender *r, size_t cap) {
    tlist *l = ta_alloc(&r->ar, sizeof *l);
    if (!l) return tr_oom(r), NULL;
    if (cap) {
        l->v = ta_alloc(&r->ar, cap * sizeof(tv));
        if (!l->v) return tr_oom(r), NULL;
        l->cap = cap;
    }
    return l;
}

int tl_push(trender *r, tlist *l, tv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        tv *nv = ta_alloc(&r->ar, cap * sizeof(tv));
        if (!nv) return tr_oom(r);
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

tv tv_list(tlist *l, unsigned flags) {
    tv v = {.t = TV_LIST, .flags = (uint8_t)flags};
    v.u.l = l;
    return v;
}

tdict *td_new(trender *r, size_t cap) {
    tdict *d = ta_alloc(&r->ar, sizeof *d);
    if (!d) return tr_oom(r), NULL;
    if (cap) {
        d->k = ta_alloc(&r->ar, cap * sizeof(tv));
        d->v = ta_alloc(&r->ar, cap * sizeof(tv));
        if (!d->k || !d->v) return tr_oom(r), NULL;
        d->cap = cap;
    }
    return d;
}

const tv *td_get(const tdict *d, tv k) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(&d->k[i], &k)) return &d->v[i];
    return NULL;
}

const tv *td_gets(const tdict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0) return &d->v[i];
    return NULL;
}

int td_set(trender *r, tdict *d, tv k, tv v) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(&d->k[i], &k)) {
            d->v[i] = v;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        tv *nk = ta_alloc(&r->ar, cap * sizeof(tv)), *nv = ta_alloc(&r->ar, cap * sizeof(tv));
        if (!nk || !nv) return tr_oom(r);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(tv));
            memcpy(nv, d->v, d->n * sizeof(tv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

/* ---------------------------------------------------------------- strings */
tv tv_str_copy(trender *r, const char *p, size_t n) {
    char *c = ta_memdup(&r->ar, p, n);
    if (!c) {
        tr_oom(r);
        return tv_undef();
    }
    return tv_strn(c, n);
}

tv tv_str_concat(trender *r, tv a, tv b) {
    char *c = ta_alloc(&r->ar, a.u.s.n + b.u.s.n + 1);
    if (!c) {
        tr_oom(r);
        return tv_undef();
    }
    if (a.u.s.n) memcpy(c, a.u.s.p, a.u.s.n);
    if (b.u.s.n) memcpy(c + a.u.s.n, b.u.s.p, b.u.s.n);
    return tv_strn(c, a.u.s.n + b.u.s.n);
}

/* ---------------------------------------------------------------- semantics */
bool tv_truthy(const tv *v) {
    switch (v->t) {
    case TV_UNDEF:
    case TV_NONE:
        return false;
    case TV_BOOL:
    case TV_INT:
        return v->u.i != 0;
    case TV_FLOAT:
        return v->u.f != 0.0;
    case TV_STR:
        return v->u.s.n != 0;
    case TV_LIST:
        return (v->flags & TVF_GEN) || v->u.l->n != 0; /* a generator object is always true */
    case TV_DICT:
        return v->u.d->n != 0;
    default:
        return true;
    }
}

bool tv_is_number(const tv *v) {
    return v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL;
}
double tv_num(const tv *v) {
    return v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
}

bool tv_equal(const tv *a, const tv *b) {
    if (tv_is_number(a) && tv_is_number(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT) return a->u.i == b->u.i;
        return tv_num(a) == tv_num(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_STR:
        return a->u.s.n == b->u.s.n && (a->u.s.n == 0 || memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0);
    case TV_LIST:
        if ((a->flags & TVF_KIND) != (b->flags & TVF_KIND)) return false;
        if (a->flags & (TVF_GEN | TVF_VALUES)) return a->u.l == b->u.l; /* compared by identity */
        if (a->u.l->n != b->u.l->n) return false;
        if (a->flags & (TVF_ITEMS | TVF_KEYS)) { /* set-like views */
            for (size_t i = 0; i < a->u.l->n; i++) {
                bool found = false;
                for (size_t j = 0; j < b->u.l->n && !found; j++)
                    found = tv_equal(&a->u.l->v[i], &b->u.l->v[j]);
                if (!found) return false;
            }
            return true;
        }
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!tv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case TV_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const tv *o = td_get(b->u.d, a->u.d->k[i]);
            if (!o || !tv_equal(&a->u.d->v[i], o)) return false;
        }
        return true;
    case TV_NS:
        return a->u.d == b->u.d;
    case TV_MACRO:
        return a->u.mc == b->u.mc;
    case TV_FUNC:
        return a->u.i == b->u.i;
    default:
        return false;
    }
}

static int bytecmp(const char *a, size_t na, const char *b, size_t nb) {
    size_t m = na < nb ? na : nb;
    int c = m ? memcmp(a, b, m) : 0;
    if (c) return c < 0 ? -1 : 1;
    return na < nb ? -1 : na > nb ? 1 : 0;
}

int tv_compare(trender *r, const tv *a, const tv *b, int *cmp) {
    if (a->t == TV_UNDEF) return tr_undef_error(r, a);
    if (b->t == TV_UNDEF) return tr_undef_error(r, b);
    if (tv_is_number(a) && tv_is_number(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT)
            *cmp = a->u.i < b->u.i ? -1 : a->u.i > b->u.i;
        else {
            double x = tv_num(a), y = tv_num(b);
            *cmp = x < y   ? -1
                   : x > y ? 1
                           : 0; /* NaN compares equal here; Python says False for both < and > */
        }
        return 0;
    }
    if (a->t == TV_STR && b->t == TV_STR) {
        /* UTF-8 byte order equals code point order. */
        *cmp = bytecmp(a->u.s.p, a->u.s.n, b->u.s.p, b->u.s.n);
        return 0;
    }
    if (a->t == TV_LIST && b->t == TV_LIST && (a->flags & TVF_KIND) == (b->flags & TVF_KIND) &&
        !(a->flags & TVF_LAZY)) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tv_equal(&a->u.l->v[i], &b->u.l->v[i])) continue;
            return tv_compare(r, &a->u.l->v[i], &b->u.l->v[i], cmp);
        }
        *cmp = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
        return 0;
    }
    return tr_fail(r, "ordering not supported between instances of '%s' and '%s'",
                   tv_typename(a->t, a->flags), tv_typename(b->t, b->flags));
}

const char *tv_typename(int t, unsigned flags) {
    switch (t) {
    case TV_UNDEF:
        return "Undefined";
    case TV_NONE:
        return "NoneType";
    case TV_BOOL:
        return "bool";
    case TV_INT:
        return "int";
    case TV_FLOAT:
        return "float";
    case TV_STR:
        return "str";
    case TV_LIST:
        return (flags & TVF_TUPLE)    ? "tuple"
               : (flags & TVF_GEN)    ? "generator"
               : (flags & TVF_ITEMS)  ? "dict_items"
               : (flags & TVF_KEYS)   ? "dict_keys"
               : (flags & TVF_VALUES) ? "dict_values"
                                      : "list";
    case TV_DICT:
        return "dict";
    case TV_NS:
        return "Namespace";
    case TV_MACRO:
        return "Macro";
    case TV_LOOP:
        return "LoopContext";
    case TV_CYCLER:
        return "Cycler";
    default:
        return "function";
    }
}

/* ---------------------------------------------------------------- str() / repr() */
static void repr_str(tbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    tb_putc(b, q);
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t c = u8_next(s, n, &i);
        if (c == (uint32_t)q || c == '\\') {
            tb_putc(b, '\\');
            tb_putc(b, (char)c);
        } else if (c == '\t')
            tb_puts(b, "\\t");
        else if (c == '\n')
            tb_puts(b, "\\n");
        else if (c == '\r')
            tb_puts(b, "\\r");
        else if (c < 0x20 || c == 0x7f)
            tb_printf(b, "\\x%02x", c);
        else if (c < 0x7f || u_isprintable(c))
            tb_put(b, s + st, i - st);
        else if (c <= 0xff)
            tb_printf(b, "\\x%02x", c);
        else if (c <= 0xffff)
            tb_printf(b, "\\u%04x", c);
        else
            tb_printf(b, "\\U%08x", c);
    }
    tb_putc(b, q);
}

static void repr_impl(tbuf *b, const tv *v, int depth) {
    if (depth > 64) {
        tb_puts(b, "...");
        return;
    }
    switch (v->t) {
    case TV_STR:
        repr_str(b, v->u.s.p, v->u.s.n);
        return;
    case TV_LIST: {
        bool tup = v->flags & TVF_TUPLE;
        if (v->flags & TVF_GEN) { /* Python prints an address here; there is nothing stable to match */
            tb_puts(b, "<generator object>");
            return;
        }
        if (v->flags & TVF_LAZY) {
            tb_puts(b, tv_typename(TV_LIST, v->flags));
            tb_putc(b, '(');
        }
        tb_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) tb_puts(b, ", ");
            repr_impl(b, &v->u.l->v[i], depth + 1);
        }
        if (tup && v->u.l->n == 1) tb_putc(b, ',');
        tb_putc(b, tup ? ')' : ']');
        if (v->flags & TVF_LAZY) tb_putc(b, ')');
        return;
    }
    case TV_DICT:
    case TV_NS:
        if (v->t == TV_NS) tb_puts(b, "<Namespace ");
        tb_putc(b, '{');
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) tb_puts(b, ", ");
            repr_impl(b, &v->u.d->k[i], depth + 1);
            tb_puts(b, ": ");
            repr_impl(b, &v->u.d->v[i], depth + 1);
        }
        tb_putc(b, '}');
        if (v->t == TV_NS) tb_putc(b, '>');
        return;
    case TV_UNDEF:
        tb_puts(b, "Undefined");
        return;
    default:
        tv_to_str(b, v);
        return;
    }
}

void tv_repr(tbuf *b, const tv *v) {
    repr_impl(b, v, 0);
}

void tv_to_str(tbuf *b, const tv *v) {
    switch (v->t) {
    case TV_UNDEF:
        return;
    case TV_NONE:
        tb_puts(b, "None");
        return;
    case TV_BOOL:
        tb_puts(b, v->u.i ? "True" : "False");
        return;
    case TV_INT:
        tb_printf(b, "%" PRId64, v->u.i);
        return;
    case TV_FLOAT:
        py_float_repr(b, v->u.f);
        return;
    case TV_STR:
        tb_put(b, v->u.s.p, v->u.s.n);
        return;
    case TV_LIST:
    case TV_DICT:
    case TV_NS:
        repr_impl(b, v, 0);
        return;
    case TV_MACRO:
        tb_printf(b, "<Macro '%s'>", v->u.mc->name);
        return;
    case TV_LOOP:
        tb_printf(b, "<LoopContext %zu/%zu>", v->u.lp->i + 1, v->u.lp->n);
        return;
    case TV_METHOD:
        tb_printf(b, "<built-in method %s>", v->u.m->name);
        return;
    default:
        tb_puts(b, "<function>");
        return;
    }
}

tv tv_stringify(trender *r, const tv *v) {
    if (v->t == TV_STR) return *v;
    if (v->t == TV_UNDEF) return tv_strn("", 0);
    tbuf b = {0};
    tv_to_str(&b, v);
    if (b.fail) {
        tb_free(&b);
        tr_oom(r);
        return tv_undef();
    }
    tv out = tv_str_copy(r, b.p ? b.p : "", b.n);
    tb_free(&b);
    return out;
}

/* ---------------------------------------------------------------- JSON in */
int tv_from_json(trender *r, const json_t *j, tv *out) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tdict *d = td_new(r, json_object_size(j));
        if (!d) return -1;
        const char *k;
        json_t *val;
        /* jansson >= 2.13 iterates in insertion order, matching Python's dict from json.loads. */
        json_object_foreach((json_t *)j, k, val) {
            tv kv = tv_strn(k, strlen(k)), vv;
            if (tv_from_json(r, val, &vv)) return -1;
            d->k[d->n] = kv; /* keys of a JSON object are unique: append without the lookup */
            d->v[d->n] = vv;
            d->n++;
        }
        *out = (tv){.t = TV_DICT, .u.d = d};
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tlist *l = tl_new(r, n);
        if (!l) return -1;
        for (size_t i = 0; i < n; i++)
            if (tv_from_json(r, json_array_get(j, i), &l->v[l->n++])) return -1;
        *out = tv_list(l, 0);
        return 0;
    }
    case JSON_STRING:
        *out = tv_strn(json_string_value(j), json_string_length(j));
        return 0;
    case JSON_INTEGER:
        *out = tv_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = tv_float(json_real_value(j));
        return 0;
    case JSON_TRUE:
        *out = tv_bool(true);
        return 0;
    case JSON_FALSE:
        *out = tv_bool(false);
        return 0;
    default:
        *out = tv_none();
        return 0;
    }
}
