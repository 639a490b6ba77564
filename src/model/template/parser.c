/* parser.c — jinja2's statement parser (jinja2/parser.py, 3.1): the template body,
 * if/for/set/macro/with/filter blocks, loop controls and the {% generation %} tag; expressions are in
 * parse_expr.c. */
#include <stdio.h>
#include <string.h>

#include "parse.h"

static const char *KW_END_FOR_ELSE[] = {"endfor", "else", NULL};
static const char *KW_END_FOR[] = {"endfor", NULL};
static const char *KW_IF[] = {"elif", "else", "endif", NULL};
static const char *KW_ENDIF[] = {"endif", NULL};

static int subparse(parser *P, const char *const *end, nlist *body);
/* ---------------------------------------------------------------- statements */
/* Expects the tag end, parses a body up to one of `end` (left as the current token). */
static int parse_statements(parser *P, const char *const *end, nlist *body, bool drop_needle) {
    if (tp_is_op(tp_cur(P), OP_COLON)) tp_adv(P);
    if (tp_expect_type(P, TK_BLOCK_END, "end of statement block")) return -1;
    if (subparse(P, end, body)) return -1;
    if (tp_cur(P)->type == TK_EOF) {
        char want[128] = "";
        for (const char *const *e = end; *e; e++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", l ? " or " : "", *e);
        }
        return tp_fail(P, tp_cur(P)->line,
                       "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
    }
    if (drop_needle) tp_adv(P);
    return 0;
}

static tnode *parse_for(parser *P, int line) {
    tnode *f = tp_mk(P, N_FOR, line);
    if (!f || !(f->a = tp_assign_target(P, "in", false))) return NULL;
    if (!tp_is_name(tp_cur(P), "in")) {
        tp_fail(P, tp_cur(P)->line, "expected 'in', got '%s'", tp_describe(tp_cur(P)));
        return NULL;
    }
    tp_adv(P);
    if (!(f->b = tp_tuple(P, false, false, "recursive", false, false))) return NULL;
    if (tp_is_name(tp_cur(P), "if")) {
        tp_adv(P);
        if (!(f->c = tp_expression(P, true))) return NULL;
    }
    if (tp_is_name(tp_cur(P), "recursive")) {
        tp_fail(P, line, "recursive for loops are not supported");
        return NULL;
    }
    nlist body = {0}, els = {0};
    P->loops++;
    int rc = parse_statements(P, KW_END_FOR_ELSE, &body, false);
    P->loops--;
    if (rc) return NULL;
    bool has_else = tp_is_name(tp_cur(P), "else");
    tp_adv(P);
    if (has_else && parse_statements(P, KW_END_FOR, &els, true)) return NULL;
    f->items = body.v;
    f->n = body.n;
    f->items2 = els.v;
    f->n2 = els.n;
    return f;
}

static tnode *parse_if(parser *P, int line) {
    tnode *top = tp_mk(P, N_IF, line), *node = top;
    if (!top) return NULL;
    for (;;) {
        if (!(node->a = tp_tuple(P, false, false, NULL, false, false))) return NULL;
        nlist body = {0};
        if (parse_statements(P, KW_IF, &body, false)) return NULL;
        node->items = body.v;
        node->n = body.n;
        const ttoken *t = tp_cur(P);
        tp_adv(P);
        if (tp_is_name(t, "elif")) {
            tnode *nx = tp_mk(P, N_IF, t->line);
            if (!nx || !(node->items2 = ta_alloc(P->a, sizeof(tnode *)))) return NULL;
            node->items2[0] = nx;
            node->n2 = 1;
            node = nx;
            continue;
        }
        if (tp_is_name(t, "else")) {
            nlist els = {0};
            if (parse_statements(P, KW_ENDIF, &els, true)) return NULL;
            node->items2 = els.v;
            node->n2 = els.n;
        }
        return top;
    }
}

static tnode *parse_set(parser *P, int line) {
    tnode *target = tp_assign_target(P, NULL, true);
    if (!target) return NULL;
    if (tp_is_op(tp_cur(P), OP_ASSIGN)) {
        tp_adv(P);
        tnode *s = tp_mk(P, N_SET, line);
        if (!s || !(s->b = tp_tuple(P, false, true, NULL, false, false))) return NULL;
        s->a = target;
        return s;
    }
    tnode *s = tp_mk(P, N_SETBLOCK, line);
    if (!s) return NULL;
    s->a = target;
    if (tp_is_op(tp_cur(P), OP_PIPE) && !(s->b = tp_filter(P, NULL, false))) return NULL;
    static const char *const end[] = {"endset", NULL};
    nlist body = {0};
    if (parse_statements(P, end, &body, true)) return NULL;
    s->items = body.v;
    s->n = body.n;
    return s;
}

static tnode *parse_macro(parser *P, int line) {
    tnode *m = tp_mk(P, N_MACRO, line);
    if (!m) return NULL;
    if (tp_cur(P)->type != TK_NAME) {
        tp_fail(P, line, "expected macro name");
        return NULL;
    }
    m->name = tp_cur(P)->s;
    tp_adv(P);
    if (tp_expect_op(P, OP_LPAREN, "(")) return NULL;
    const char *names[64];
    nlist defs = {0};
    size_t np = 0;
    while (!tp_is_op(tp_cur(P), OP_RPAREN)) {
        if (np && tp_expect_op(P, OP_COMMA, ",")) return NULL;
        if (tp_cur(P)->type != TK_NAME || np >= 64) {
            tp_fail(P, tp_cur(P)->line, "expected parameter name, got '%s'", tp_describe(tp_cur(P)));
            return NULL;
        }
        names[np++] = tp_cur(P)->s;
        tp_adv(P);
        if (tp_is_op(tp_cur(P), OP_ASSIGN)) {
            tp_adv(P);
            tnode *d = tp_expression(P, true);
            if (!d || tp_push(P, &defs, d)) return NULL;
        } else if (defs.n) {
            tp_fail(P, line, "non-default argument follows default argument");
            return NULL;
        }
    }
    tp_adv(P);
    if (np && !(m->knames = ta_alloc(P->a, np * sizeof(char *)))) return NULL;
    if (np) memcpy(m->knames, names, np * sizeof(char *));
    m->n3 = np;
    m->items2 = defs.v;
    m->n2 = defs.n;
    static const char *const end[] = {"endmacro", NULL};
    nlist body = {0};
    int saved = P->loops;
    P->loops = 0;
    int rc = parse_statements(P, end, &body, true);
    P->loops = saved;
    if (rc) return NULL;
    m->items = body.v;
    m->n = body.n;
    return m;
}

static tnode *parse_with(parser *P, int line) {
    tnode *w = tp_mk(P, N_WITH, line), *targets = tp_mk(P, N_TUPLE, line);
    if (!w || !targets) return NULL;
    nlist tg = {0}, vals = {0};
    while (tp_cur(P)->type != TK_BLOCK_END) {
        if (tg.n && tp_expect_op(P, OP_COMMA, ",")) return NULL;
        tnode *t = tp_assign_target(P, NULL, false);
        if (!t || tp_push(P, &tg, t) || tp_expect_op(P, OP_ASSIGN, "=")) return NULL;
        tnode *v = tp_expression(P, true);
        if (!v || tp_push(P, &vals, v)) return NULL;
    }
    targets->items = tg.v;
    targets->n = tg.n;
    w->a = targets;
    w->items2 = vals.v;
    w->n2 = vals.n;
    static const char *const end[] = {"endwith", NULL};
    nlist body = {0};
    if (parse_statements(P, end, &body, true)) return NULL;
    w->items = body.v;
    w->n = body.n;
    return w;
}

static tnode *parse_body_block(parser *P, int kind, const char *endname, int line) {
    tnode *b = tp_mk(P, kind, line);
    if (!b) return NULL;
    if (kind == N_FILTERBLOCK && !(b->b = tp_filter(P, NULL, true))) return NULL;
    const char *end[] = {endname, NULL};
    nlist body = {0};
    if (parse_statements(P, end, &body, true)) return NULL;
    b->items = body.v;
    b->n = body.n;
    return b;
}

static tnode *parse_statement(parser *P) {
    const ttoken *t = tp_cur(P);
    if (t->type != TK_NAME) {
        tp_fail(P, t->line, "tag name expected");
        return NULL;
    }
    const char *s = t->s;
    int line = t->line;
    tp_adv(P);
    if (!strcmp(s, "for")) return parse_for(P, line);
    if (!strcmp(s, "if")) return parse_if(P, line);
    if (!strcmp(s, "set")) return parse_set(P, line);
    if (!strcmp(s, "macro")) return parse_macro(P, line);
    if (!strcmp(s, "with")) return parse_with(P, line);
    if (!strcmp(s, "filter")) return parse_body_block(P, N_FILTERBLOCK, "endfilter", line);
    if (!strcmp(s, "generation")) return parse_body_block(P, N_BLOCK, "endgeneration", line);
    if (!strcmp(s, "print")) {
        tnode *p = tp_mk(P, N_PRINT, line);
        if (p && !(p->a = tp_tuple(P, false, true, NULL, false, false))) return NULL;
        return p;
    }
    if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        if (!P->loops) {
            tp_fail(P, line, "'%s' outside of a for loop", s);
            return NULL;
        }
        return tp_mk(P, s[0] == 'b' ? N_BREAK : N_CONTINUE, line);
    }
    static const char *const unsupported[] = {"extends", "block", "include",    "import",
                                              "from",    "call",  "autoescape", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (!strcmp(s, *u)) {
            tp_fail(P, line, "the '%s' tag is not supported in chat templates", s);
            return NULL;
        }
    tp_fail(P, line, "Encountered unknown tag '%s'.", s);
    return NULL;
}

static int subparse(parser *P, const char *const *end, nlist *body) {
    for (;;) {
        const ttoken *t = tp_cur(P);
        if (P->failed) return -1;
        if (t->type == TK_EOF) return 0;
        if (t->type == TK_DATA) {
            tnode *d = tp_mk(P, N_DATA, t->line);
            if (!d) return -1;
            d->val = tv_strn(t->s, t->n);
            if (tp_push(P, body, d)) return -1;
            tp_adv(P);
        } else if (t->type == TK_VAR_BEGIN) {
            tp_adv(P);
            tnode *p = tp_mk(P, N_PRINT, t->line);
            if (!p || !(p->a = tp_tuple(P, false, true, NULL, false, false))) return -1;
            if (tp_expect_type(P, TK_VAR_END, "end of print statement") || tp_push(P, body, p)) return -1;
        } else if (t->type == TK_BLOCK_BEGIN) {
            tp_adv(P);
            if (end && tp_cur(P)->type == TK_NAME)
                for (const char *const *e = end; *e; e++)
                    if (!strcmp(tp_cur(P)->s, *e)) return 0;
            if (++P->depth > TMPL_MAX_DEPTH) return tp_fail(P, t->line, "blocks nested too deeply");
            tnode *st = parse_statement(P);
            P->depth--;
            if (!st || tp_push(P, body, st)) return -1;
            if (tp_expect_type(P, TK_BLOCK_END, "end of statement block")) return -1;
        } else {
            return tp_fail(P, t->line, "unexpected '%s'", tp_describe(t));
        }
    }
}

int tmpl_parse(tarena *a, const ttokens *toks, tnode ***body, size_t *nbody, weft_err *err) {
    parser P = {.a = a, .t = toks->v, .n = toks->n, .err = err};
    nlist b = {0};
    if (subparse(&P, NULL, &b)) return -1;
    *body = b.v;
    *nbody = b.n;
    return 0;
}
