/* exec.c — statement execution: output, if, for (jinja2 loop semantics: a fresh scope per iteration that
 * reads through to the enclosing one, so a plain `set` inside a loop never leaks out; only namespace
 * attributes carry state across iterations), set, macros, with, filter blocks, break/continue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

enum { EX_BREAK = 1, EX_CONTINUE = 2 };

static int out_check(trender *r) {
    if (!r->out->fail) return 0;
    if (r->opts->max_output && r->out->n + 4096 >= r->opts->max_output)
        return tr_fail(r, "output exceeds the limit of %zu bytes", r->opts->max_output);
    return tr_oom(r);
}

static int assign(trender *r, tframe *f, const tnode *t, tv v) {
    if (t->kind == N_NAME) return tf_set(r, f, t->name, strlen(t->name), v);
    if (t->kind == N_NSREF) {
        const tv *ns = tf_lookup(r->frame, t->name, strlen(t->name));
        if (!ns || ns->t != TV_NS) return tr_fail(r, "cannot assign attribute on non-namespace object");
        return td_set(r, ns->u.d, tv_strn(t->name2, strlen(t->name2)), v);
    }
    /* tuple unpacking */
    tlist *items;
    if (v.t == TV_UNDEF) return tr_undef_error(r, &v);
    if (tmpl_iter(r, &v, &items)) return -1;
    if (items->n < t->n)
        return tr_fail(r, "not enough values to unpack (expected %zu, got %zu)", t->n, items->n);
    if (items->n > t->n) return tr_fail(r, "too many values to unpack (expected %zu)", t->n);
    for (size_t i = 0; i < t->n; i++)
        if (assign(r, f, t->items[i], items->v[i])) return -1;
    return 0;
}

/* Runs body with output captured into a string value. */
static int capture(trender *r, tnode *const *body, size_t n, tv *out) {
    tbuf b = {.limit = r->opts->max_output};
    tbuf *saved = r->out;
    r->out = &b;
    int rc = tmpl_exec_body(r, body, n);
    r->out = saved;
    if (rc < 0) {
        tb_free(&b);
        return -1;
    }
    if (b.fail) {
        tb_free(&b);
        return tr_fail(r, "output exceeds the limit of %zu bytes", r->opts->max_output);
    }
    *out = tv_str_copy(r, b.p ? b.p : "", b.n);
    tb_free(&b);
    return r->failed ? -1 : rc;
}

int tmpl_call_macro(trender *r, const tnode *m, const targs *a, tv *out) {
    if (a->npos > m->n3) return tr_fail(r, "macro '%s' takes not more than %zu argument(s)", m->name, m->n3);
    if (r->depth > TMPL_MAX_DEPTH) return tr_fail(r, "macro recursion too deep");
    tv *vals = ta_alloc(&r->ar, (m->n3 + 1) * sizeof(tv));
    bool *set = ta_alloc(&r->ar, m->n3 + 1);
    if (!vals || !set) return tr_oom(r);
    for (size_t i = 0; i < a->npos; i++) {
        vals[i] = a->pos[i];
        set[i] = true;
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < m->n3 && strcmp(m->knames[i], a->kwn[k])) i++;
        if (i == m->n3) return tr_fail(r, "macro '%s' takes no keyword argument '%s'", m->name, a->kwn[k]);
        if (set[i]) return tr_fail(r, "macro '%s' got multiple values for argument '%s'", m->name, a->kwn[k]);
        vals[i] = a->kw[k];
        set[i] = true;
    }
    tframe f;
    tf_init(&f, r->root);
    tframe *saved = r->frame;
    r->frame = &f;
    r->depth++;
    int rc = 0;
    for (size_t i = 0; i < m->n3 && !rc; i++) {
        size_t first_default = m->n3 - m->n2;
        if (!set[i]) {
            if (i >= first_default)
                rc = tmpl_eval(r, m->items2[i - first_default], &vals[i]);
            else
                vals[i] = tv_undef_named(m->knames[i], strlen(m->knames[i]), TV_UNDEF);
        }
        if (!rc) rc = tf_set(r, &f, m->knames[i], strlen(m->knames[i]), vals[i]);
    }
    if (!rc) rc = capture(r, m->items, m->n, out);
    r->depth--;
    r->frame = saved;
    tf_drop(&f);
    return rc < 0 ? -1 : 0;
}

static int exec_for(trender *r, const tnode *s) {
    tv itv;
    tlist *items;
    if (tmpl_eval(r, s->b, &itv)) return -1;
    r->line = s->line;
    if (tmpl_iter(r, &itv, &items)) return -1;
    if (s->c) { /* `for x in xs if cond`: filter first, so loop.length/last see the filtered sequence */
        tlist *kept = tl_new(r, 0);
        if (!kept) return -1;
        for (size_t i = 0; i < items->n; i++) {
            if (++r->steps > r->opts->max_steps)
                return tr_fail(r, "too many loop iterations (limit %zu)", r->opts->max_steps);
            tframe f;
            tf_init(&f, r->frame);
            tv c;
            int rc = assign(r, &f, s->a, items->v[i]);
            if (!rc) {
                r->frame = &f;
                rc = tmpl_eval(r, s->c, &c);
                r->frame = f.parent;
            }
            tf_drop(&f);
            if (rc) return -1;
            if (tv_truthy(&c) && tl_push(r, kept, items->v[i])) return -1;
        }
        items = kept;
    }
    if (items->n == 0) return tmpl_exec_body(r, s->items2, s->n2);
    tloop *lp = ta_alloc(&r->ar, sizeof *lp);
    if (!lp) return tr_oom(r);
    lp->items = items->v;
    lp->n = items->n;
    lp->depth = 1; /* jinja2 counts depth only through recursive loops, which are not supported */
    for (size_t i = 0; i < items->n; i++) {
        if (++r->steps > r->opts->max_steps)
            return tr_fail(r, "too many loop iterations (limit %zu)", r->opts->max_steps);
        lp->i = i;
        tframe f;
        tf_init(&f, r->frame);
        int rc = assign(r, &f, s->a, items->v[i]);
        if (!rc) rc = tf_set(r, &f, "loop", 4, (tv){.t = TV_LOOP, .u.lp = lp});
        if (!rc) {
            r->frame = &f;
            rc = tmpl_exec_body(r, s->items, s->n);
            r->frame = f.parent;
        }
        tf_drop(&f);
        if (rc < 0) return -1;
        if (rc == EX_BREAK) break;
    }
    return 0;
}

static int exec_stmt(trender *r, const tnode *s) {
    r->line = s->line;
    tv v;
    switch (s->kind) {
    case N_DATA:
        tb_put(r->out, s->val.u.s.p, s->val.u.s.n);
        return out_check(r);
    case N_PRINT:
        if (tmpl_eval(r, s->a, &v)) return -1;
        tv_to_str(r->out, &v);
        return out_check(r);
    case N_IF:
        if (tmpl_eval(r, s->a, &v)) return -1;
        return tv_truthy(&v) ? tmpl_exec_body(r, s->items, s->n) : tmpl_exec_body(r, s->items2, s->n2);
    case N_FOR:
        return exec_for(r, s);
    case N_SET:
        if (tmpl_eval(r, s->b, &v)) return -1;
        r->line = s->line;
        return assign(r, r->frame, s->a, v);
    case N_SETBLOCK:
        if (capture(r, s->items, s->n, &v) < 0) return -1;
        if (s->b) {
            tv f;
            if (tmpl_eval_filter_chain(r, s->b, &v, &f)) return -1;
            v = f;
        }
        r->line = s->line;
        return assign(r, r->frame, s->a, v);
    case N_MACRO:
        return tf_set(r, r->frame, s->name, strlen(s->name), (tv){.t = TV_MACRO, .u.mc = s});
    case N_BREAK:
        return EX_BREAK;
    case N_CONTINUE:
        return EX_CONTINUE;
    case N_WITH: {
        tv *vals = s->n2 ? ta_alloc(&r->ar, s->n2 * sizeof(tv)) : NULL;
        if (s->n2 && !vals) return tr_oom(r);
        for (size_t i = 0; i < s->n2; i++)
            if (tmpl_eval(r, s->items2[i], &vals[i])) return -1;
        tframe f;
        tf_init(&f, r->frame);
        int rc = 0;
        for (size_t i = 0; i < s->n2 && !rc; i++) rc = assign(r, &f, s->a->items[i], vals[i]);
        if (!rc) {
            r->frame = &f;
            rc = tmpl_exec_body(r, s->items, s->n);
            r->frame = f.parent;
        }
        tf_drop(&f);
        return rc;
    }
    case N_FILTERBLOCK: {
        tv f;
        int rc = capture(r, s->items, s->n, &v);
        if (rc < 0 || tmpl_eval_filter_chain(r, s->b, &v, &f)) return -1;
        tv_to_str(r->out, &f);
        if (out_check(r)) return -1;
        return rc;
    }
    case N_BLOCK:
        return tmpl_exec_body(r, s->items, s->n);
    default:
        return tr_fail(r, "internal: unexpected node %d in statement", s->kind);
    }
}

int tmpl_exec_body(trender *r, tnode *const *body, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int rc = exec_stmt(r, body[i]);
        if (rc) return rc;
        if (r->failed) return -1;
    }
    return 0;
}
