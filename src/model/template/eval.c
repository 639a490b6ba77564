/* eval.c — expression evaluation with Python/jinja2 semantics: names and scopes, attribute and item access
 * (jinja2 SandboxedEnvironment.getattr/getitem), slicing, arithmetic, comparisons, `in`, calls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

/* ---------------------------------------------------------------- scopes */
void tf_init(tframe *f, tframe *parent) {
    memset(f, 0, sizeof *f);
    f->parent = parent;
}

void tf_drop(tframe *f) {
    free(f->heap);
}

static tvar *tf_slot(tframe *f, size_t i) {
    return i < 8 ? &f->inl[i] : &f->heap[i - 8];
}

int tf_set(trender *r, tframe *f, const char *name, size_t n, tv v) {
    for (size_t i = 0; i < f->nv; i++) {
        tvar *s = tf_slot(f, i);
        if (s->n == n && memcmp(s->name, name, n) == 0) {
            s->v = v;
            return 0;
        }
    }
    if (f->nv >= 8 && f->nv - 8 == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        tvar *h = realloc(f->heap, cap * sizeof *h);
        if (!h) return tr_oom(r);
        f->heap = h;
        f->cap = cap;
    }
    tvar *s = tf_slot(f, f->nv++);
    s->name = name;
    s->n = n;
    s->v = v;
    return 0;
}

const tv *tf_lookup(const tframe *f, const char *name, size_t n) {
    for (; f; f = f->parent)
        for (size_t i = 0; i < f->nv; i++) {
            const tvar *s = i < 8 ? &f->inl[i] : &f->heap[i - 8];
            if (s->n == n && memcmp(s->name, name, n) == 0) return &s->v;
        }
    return NULL;
}

/* ---------------------------------------------------------------- access */
static tv method_value(trender *r, const tv *obj, const char *name) {
    tmethod *m = ta_alloc(&r->ar, sizeof *m);
    if (!m) {
        tr_oom(r);
        return tv_undef();
    }
    m->self = *obj;
    m->name = name;
    return (tv){.t = TV_METHOD, .u.m = m};
}

static const char *name_copy(trender *r, const char *s, size_t n) {
    char *c = ta_memdup(&r->ar, s, n);
    if (!c) tr_oom(r);
    return c;
}

/* Python attribute lookup only: methods of str/dict/list, namespace attributes, loop fields. 1 = found. */
static int attr_only(trender *r, const tv *obj, const char *name, size_t n, tv *out) {
    if (obj->t == TV_LOOP || obj->t == TV_CYCLER) return tmpl_loop_attr(r, obj, name, n, out);
    if (obj->t == TV_NS) {
        const tv *v = td_gets(obj->u.d, name, n);
        if (!v) return 0;
        *out = *v;
        return 1;
    }
    if (obj->t == TV_LIST && (obj->flags & TVF_LAZY)) return 0; /* generators and views: no list methods */
    if (tmpl_has_method(obj->t, name, n)) {
        const char *nm = name_copy(r, name, n);
        if (!nm) return -1;
        *out = method_value(r, obj, nm);
        return r->failed ? -1 : 1;
    }
    return 0;
}

static int item_only(trender *r, const tv *obj, const tv *key, tv *out);

int tmpl_getattr(trender *r, const tv *obj, const char *name, size_t n, tv *out) {
    if (obj->t == TV_UNDEF) return tr_undef_error(r, obj);
    int k = attr_only(r, obj, name, n, out);
    if (k) return k < 0 ? -1 : 0;
    if (obj->t == TV_DICT) {
        const tv *v = td_gets(obj->u.d, name, n);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = tv_undef_named(name, n, obj->t);
    return 0;
}

static int index_of(trender *r, const tv *key, size_t len, size_t *idx, bool *ok) {
    (void)r;
    *ok = false;
    if (key->t != TV_INT && key->t != TV_BOOL) return 0;
    int64_t i = key->u.i;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return 0;
    *idx = (size_t)i;
    *ok = true;
    return 0;
}

/* obj[key] without the attribute fallback: 1 = found, 0 = missing/TypeError, -1 = error. */
static int item_only(trender *r, const tv *obj, const tv *key, tv *out) {
    size_t idx;
    bool ok;
    switch (obj->t) {
    case TV_DICT: {
        const tv *v = td_get(obj->u.d, *key);
        if (!v) return 0;
        *out = *v;
        return 1;
    }
    case TV_LIST:
        if (obj->flags & TVF_LAZY) return 0; /* not subscriptable */
        index_of(r, key, obj->u.l->n, &idx, &ok);
        if (!ok) return 0;
        *out = obj->u.l->v[idx];
        return 1;
    case TV_STR: {
        if (key->t != TV_INT && key->t != TV_BOOL) return 0;
        size_t len = u8_len(obj->u.s.p, obj->u.s.n);
        index_of(r, key, len, &idx, &ok);
        if (!ok) return 0;
        size_t b = u8_offset(obj->u.s.p, obj->u.s.n, idx), e = b;
        u8_next(obj->u.s.p, obj->u.s.n, &e);
        *out = tv_strn(obj->u.s.p + b, e - b);
        return 1;
    }
    default:
        return 0;
    }
}

int tmpl_getitem(trender *r, const tv *obj, const tv *key, tv *out) {
    if (obj->t == TV_UNDEF) return tr_undef_error(r, obj);
    int k = item_only(r, obj, key, out);
    if (k) return k < 0 ? -1 : 0;
    if (key->t == TV_STR) {
        k = attr_only(r, obj, key->u.s.p, key->u.s.n, out);
        if (k) return k < 0 ? -1 : 0;
        *out = tv_undef_named(key->u.s.p, key->u.s.n, obj->t);
        return 0;
    }
    tv ks = tv_stringify(r, key);
    if (r->failed) return -1;
    *out = tv_undef_named(ks.u.s.p, ks.u.s.n, obj->t);
    return 0;
}

/* Python slice index normalisation (PySlice_AdjustIndices). */
static int slice_bound(trender *r, const tnode *e, int64_t *v, bool *given) {
    *given = false;
    if (!e) return 0;
    tv x;
    if (tmpl_eval(r, e, &x)) return -1;
    if (x.t == TV_NONE) return 0;
    if (x.t != TV_INT && x.t != TV_BOOL) return tr_fail(r, "slice indices must be integers or None");
    *v = x.u.i;
    *given = true;
    return 0;
}

static int do_slice(trender *r, const tv *obj, const tnode *s, tv *out) {
    if (obj->t == TV_UNDEF) return tr_undef_error(r, obj);
    int64_t start = 0, stop = 0, step = 1;
    bool hs, he, hst;
    if (slice_bound(r, s->a, &start, &hs) || slice_bound(r, s->b, &stop, &he) ||
        slice_bound(r, s->c, &step, &hst))
        return -1;
    if (!hst) step = 1;
    if (step == 0) return tr_fail(r, "slice step cannot be zero");
    int64_t len;
    if (obj->t == TV_LIST && !(obj->flags & TVF_LAZY))
        len = (int64_t)obj->u.l->n;
    else if (obj->t == TV_STR)
        len = (int64_t)u8_len(obj->u.s.p, obj->u.s.n);
    else {
        *out = tv_undef_named("slice", 5, obj->t);
        return 0;
    }
    if (!hs)
        start = step < 0 ? len - 1 : 0;
    else if (start < 0) {
        start += len;
        if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= len)
        start = step < 0 ? len - 1 : len;
    if (!he)
        stop = step < 0 ? -1 : len;
    else if (stop < 0) {
        stop += len;
        if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= len)
        stop = step < 0 ? len - 1 : len;
    if (obj->t == TV_LIST) {
        tlist *l = tl_new(r, 0);
        if (!l) return -1;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (tl_push(r, l, obj->u.l->v[i])) return -1;
        *out = tv_list(l, obj->flags & TVF_TUPLE);
        return 0;
    }
    const char *p = obj->u.s.p;
    size_t n = obj->u.s.n;
    if (step == 1) { /* contiguous: share the bytes */
        if (stop <= start) {
            *out = tv_strn("", 0);
            return 0;
        }
        size_t b = u8_offset(p, n, (size_t)start), e = u8_offset(p, n, (size_t)stop);
        *out = tv_strn(p + b, e - b);
        return 0;
    }
    size_t *offs = malloc(((size_t)len + 1) * sizeof *offs);
    if (!offs) return tr_oom(r);
    size_t i = 0, k = 0;
    while (i < n) {
        offs[k++] = i;
        u8_next(p, n, &i);
    }
    offs[k] = n;
    tbuf b = {0};
    for (int64_t j = start; step > 0 ? j < stop : j > stop; j += step)
        tb_put(&b, p + offs[j], offs[j + 1] - offs[j]);
    free(offs);
    if (b.fail) {
        tb_free(&b);
        return tr_oom(r);
    }
    *out = tv_str_copy(r, b.p ? b.p : "", b.n);
    tb_free(&b);
    return r->failed ? -1 : 0;
}

/* ---------------------------------------------------------------- iteration and `in` */
int tmpl_iter(trender *r, const tv *v, tlist **out) {
    switch (v->t) {
    case TV_LIST:
        if (v->flags & TVF_GEN) { /* iterating a generator exhausts it */
            tlist *l = tl_new(r, v->u.l->n);
            if (!l) return -1;
            if (v->u.l->n) memcpy(l->v, v->u.l->v, v->u.l->n * sizeof(tv));
            l->n = v->u.l->n;
            v->u.l->n = 0;
            *out = l;
            return 0;
        }
        *out = v->u.l;
        return 0;
    case TV_UNDEF:
        return (*out = tl_new(r, 0)) ? 0 : -1;
    case TV_DICT: {
        tlist *l = tl_new(r, v->u.d->n);
        if (!l) return -1;
        for (size_t i = 0; i < v->u.d->n; i++) l->v[l->n++] = v->u.d->k[i];
        *out = l;
        return 0;
    }
    case TV_STR: {
        tlist *l = tl_new(r, 0);
        if (!l) return -1;
        size_t i = 0;
        while (i < v->u.s.n) {
            size_t st = i;
            u8_next(v->u.s.p, v->u.s.n, &i);
            if (tl_push(r, l, tv_strn(v->u.s.p + st, i - st))) return -1;
        }
        *out = l;
        return 0;
    }
    case TV_LOOP: {
        tlist *l = tl_new(r, 0);
        if (!l) return -1;
        for (size_t i = 0; i < v->u.lp->n; i++)
            if (tl_push(r, l, v->u.lp->items[i])) return -1;
        *out = l;
        return 0;
    }
    default:
        return tr_fail(r, "'%s' object is not iterable", tv_typename(v->t, v->flags));
    }
}

int tmpl_contains(trender *r, const tv *hay, const tv *needle, bool *out) {
    *out = false;
    switch (hay->t) {
    case TV_STR:
        if (needle->t != TV_STR)
            return tr_fail(r, "'in <string>' requires string as left operand, not %s",
                           tv_typename(needle->t, needle->flags));
        if (needle->u.s.n == 0)
            *out = true;
        else if (needle->u.s.n <= hay->u.s.n)
            *out = memmem(hay->u.s.p, hay->u.s.n, needle->u.s.p, needle->u.s.n) != NULL;
        return 0;
    case TV_LIST:
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (tv_equal(&hay->u.l->v[i], needle)) {
                *out = true;
                if (hay->flags & TVF_GEN) { /* `in` consumes a generator up to the match */
                    hay->u.l->v += i + 1;
                    hay->u.l->n -= i + 1;
                }
                return 0;
            }
        if (hay->flags & TVF_GEN) hay->u.l->n = 0;
        return 0;
    case TV_DICT:
        if ((needle->t == TV_LIST && !(needle->flags & TVF_TUPLE)) || needle->t == TV_DICT)
            return tr_fail(r, "unhashable type: '%s'", tv_typename(needle->t, needle->flags));
        *out = td_get(hay->u.d, *needle) != NULL;
        return 0;
    case TV_UNDEF:
        return 0;
    default:
        return tr_fail(r, "argument of type '%s' is not iterable", tv_typename(hay->t, hay->flags));
    }
}

/* ---------------------------------------------------------------- expressions */
static int eval_args(trender *r, const tnode *e, targs *a) {
    memset(a, 0, sizeof *a);
    if (e->n) {
        if (!(a->pos = ta_alloc(&r->ar, e->n * sizeof(tv)))) return tr_oom(r);
        for (size_t i = 0; i < e->n; i++)
            if (tmpl_eval(r, e->items[i], &a->pos[i])) return -1;
        a->npos = e->n;
    }
    if (e->n2) {
        if (!(a->kw = ta_alloc(&r->ar, e->n2 * sizeof(tv)))) return tr_oom(r);
        for (size_t i = 0; i < e->n2; i++)
            if (tmpl_eval(r, e->items2[i], &a->kw[i])) return -1;
        a->kwn = e->knames;
        a->nkw = e->n2;
    }
    return 0;
}

/* Evaluates a filter chain; the innermost N_FILTER with a NULL input takes `base` (set/filter blocks). */
static int eval_filter(trender *r, const tnode *e, const tv *base, tv *out) {
    tv in;
    if (!e->a)
        in = *base;
    else if (e->a->kind == N_FILTER && base) {
        if (eval_filter(r, e->a, base, &in)) return -1;
    } else if (tmpl_eval(r, e->a, &in))
        return -1;
    targs a;
    if (eval_args(r, e, &a)) return -1;
    r->line = e->line;
    return tmpl_apply_filter(r, e->op, &in, &a, out);
}

int tmpl_eval_filter_chain(trender *r, const tnode *chain, const tv *base, tv *out) {
    return eval_filter(r, chain, base, out);
}

static int eval_call(trender *r, const tnode *e, tv *out) {
    tv fn;
    if (tmpl_eval(r, e->a, &fn)) return -1;
    targs a;
    if (eval_args(r, e, &a)) return -1;
    r->line = e->line;
    switch (fn.t) {
    case TV_MACRO:
        return tmpl_call_macro(r, fn.u.mc, &a, out);
    case TV_FUNC:
        return tmpl_call_func(r, (int)fn.u.i, &a, out);
    case TV_METHOD:
        return tmpl_call_method(r, fn.u.m, &a, out);
    case TV_UNDEF:
        return tr_undef_error(r, &fn);
    default:
        return tr_fail(r, "'%s' object is not callable", tv_typename(fn.t, fn.flags));
    }
}

static int eval_compare(trender *r, const tnode *e, tv *out) {
    tv left;
    if (tmpl_eval(r, e->a, &left)) return -1;
    for (size_t i = 0; i < e->n; i++) {
        tv right;
        if (tmpl_eval(r, e->items[i], &right)) return -1;
        r->line = e->line;
        bool res = false;
        int op = e->ops[i], c = 0;
        if (op == OP_EQ)
            res = tv_equal(&left, &right);
        else if (op == OP_NE)
            res = !tv_equal(&left, &right);
        else if (op == CMP_IN || op == CMP_NOTIN) {
            if (tmpl_contains(r, &right, &left, &res)) return -1;
            if (op == CMP_NOTIN) res = !res;
        } else {
            if (tv_compare(r, &left, &right, &c)) return -1;
            bool nan = (left.t == TV_FLOAT && isnan(left.u.f)) || (right.t == TV_FLOAT && isnan(right.u.f));
            res = !nan && (op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0);
        }
        if (!res) {
            *out = tv_bool(false);
            return 0;
        }
        left = right;
    }
    *out = tv_bool(true);
    return 0;
}

static int eval_seq(trender *r, const tnode *e, tv *out) {
    if (e->kind == N_DICT) {
        tdict *d = td_new(r, e->n);
        if (!d) return -1;
        for (size_t i = 0; i < e->n; i++) {
            tv k, v;
            if (tmpl_eval(r, e->items[i], &k) || tmpl_eval(r, e->items2[i], &v)) return -1;
            if (k.t == TV_LIST && !(k.flags & TVF_TUPLE)) return tr_fail(r, "unhashable type: 'list'");
            if (k.t == TV_DICT) return tr_fail(r, "unhashable type: 'dict'");
            if (td_set(r, d, k, v)) return -1;
        }
        *out = (tv){.t = TV_DICT, .u.d = d};
        return 0;
    }
    tlist *l = tl_new(r, e->n);
    if (!l) return -1;
    for (size_t i = 0; i < e->n; i++)
        if (tmpl_eval(r, e->items[i], &l->v[l->n++])) return -1;
    *out = tv_list(l, e->kind == N_TUPLE ? TVF_TUPLE : 0);
    return 0;
}

int tmpl_eval(trender *r, const tnode *e, tv *out) {
    if (r->failed) return -1;
    if (++r->depth > TMPL_MAX_DEPTH) return tr_fail(r, "expression or macro recursion too deep");
    r->line = e->line;
    int rc = 0;
    tv a;
    switch (e->kind) {
    case N_CONST:
        *out = e->val;
        break;
    case N_NAME: {
        size_t n = strlen(e->name);
        const tv *v = tf_lookup(r->frame, e->name, n);
        if (v)
            *out = *v;
        else {
            int g = tmpl_global_id(e->name, n);
            *out = g >= 0 ? (tv){.t = TV_FUNC, .u.i = g} : tv_undef_named(e->name, n, TV_UNDEF);
        }
        break;
    }
    case N_GETATTR:
        if (!(rc = tmpl_eval(r, e->a, &a))) {
            r->line = e->line;
            rc = tmpl_getattr(r, &a, e->name, strlen(e->name), out);
        }
        break;
    case N_GETITEM:
        if ((rc = tmpl_eval(r, e->a, &a))) break;
        if (e->b->kind == N_SLICE)
            rc = do_slice(r, &a, e->b, out);
        else {
            tv k;
            if (!(rc = tmpl_eval(r, e->b, &k))) {
                r->line = e->line;
                rc = tmpl_getitem(r, &a, &k, out);
            }
        }
        break;
    case N_CALL:
        rc = eval_call(r, e, out);
        break;
    case N_FILTER:
        rc = eval_filter(r, e, NULL, out);
        break;
    case N_TEST: {
        targs ta;
        bool b = false;
        if ((rc = tmpl_eval(r, e->a, &a)) || (rc = eval_args(r, e, &ta))) break;
        r->line = e->line;
        if (!(rc = tmpl_apply_test(r, e->op, &a, &ta, &b))) *out = tv_bool(b);
        break;
    }
    case N_NOT:
        if (!(rc = tmpl_eval(r, e->a, &a))) *out = tv_bool(!tv_truthy(&a));
        break;
    case N_NEG:
    case N_POS:
        if ((rc = tmpl_eval(r, e->a, &a))) break;
        r->line = e->line;
        if (a.t == TV_UNDEF)
            rc = tr_undef_error(r, &a);
        else if (!tv_is_number(&a))
            rc = tr_fail(r, "bad operand type for unary %c: '%s'", e->kind == N_NEG ? '-' : '+',
                         tv_typename(a.t, a.flags));
        else if (e->kind == N_POS)
            *out = a.t == TV_BOOL ? tv_int(a.u.i) : a;
        else if (a.t == TV_FLOAT)
            *out = tv_float(-a.u.f);
        else if (a.u.i == INT64_MIN)
            rc = tr_fail(r, "integer overflow");
        else
            *out = tv_int(-a.u.i);
        break;
    case N_BINOP: {
        tv b;
        if ((rc = tmpl_eval(r, e->a, &a)) || (rc = tmpl_eval(r, e->b, &b))) break;
        r->line = e->line;
        rc = tmpl_binop(r, e->op, &a, &b, out);
        break;
    }
    case N_AND:
    case N_OR:
        if ((rc = tmpl_eval(r, e->a, &a))) break;
        if (tv_truthy(&a) == (e->kind == N_OR))
            *out = a;
        else
            rc = tmpl_eval(r, e->b, out);
        break;
    case N_CONCAT: {
        tbuf b = {.limit = r->opts->max_output};
        for (size_t i = 0; i < e->n && !rc; i++) {
            if (!(rc = tmpl_eval(r, e->items[i], &a))) tv_to_str(&b, &a);
        }
        if (!rc) {
            if (b.fail)
                rc = tr_oom(r);
            else {
                *out = tv_str_copy(r, b.p ? b.p : "", b.n);
                rc = r->failed ? -1 : 0;
            }
        }
        tb_free(&b);
        break;
    }
    case N_COMPARE:
        rc = eval_compare(r, e, out);
        break;
    case N_COND:
        if ((rc = tmpl_eval(r, e->a, &a))) break;
        if (tv_truthy(&a))
            rc = tmpl_eval(r, e->b, out);
        else if (e->c)
            rc = tmpl_eval(r, e->c, out);
        else
            *out = tv_undef_named("", 0, TV_UNDEF);
        break;
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
        rc = eval_seq(r, e, out);
        break;
    default:
        rc = tr_fail(r, "internal: unexpected node %d in expression", e->kind);
    }
    r->depth--;
    return rc;
}
