/* parse_expr.c — jinja2's expression parser (jinja2/parser.py, 3.1) and the shared parser helpers. Grammar
 * precedence (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary, with filters, tests,
 * calls, attribute and item access binding tightest).
 *
 * Node field use (see tmpl.h): GETATTR a.name; GETITEM a[b]; SLICE a:b:c; CALL a(items, knames=items2);
 * FILTER/TEST a|name(items, knames=items2) with op = builtin id; COMPARE a (ops[i] items[i])...;
 * COND b if a else c; DICT {items[i]: items2[i]}; IF a: items else items2; FOR a in b if c: items else
 * items2; SET a = b; SETBLOCK a (filter b) = items; MACRO name(knames[n3], defaults items2 for the last
 * n2 params): items; WITH targets a (tuple) = items2: items; FILTERBLOCK b: items; BLOCK items. */
#include <stdio.h>
#include <string.h>

#include "parse.h"

int tp_fail(parser *P, int line, const char *fmt, ...) {
    if (P->failed) return -1;
    P->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    weft_err_set(P->err, WEFT_EFORMAT, "chat template line %d: %s", line, msg);
    return -1;
}

const char *tp_describe(const ttoken *t) {
    switch (t->type) {
    case TK_EOF:
        return "end of template";
    case TK_DATA:
        return "template data";
    case TK_VAR_BEGIN:
        return "begin of print statement";
    case TK_VAR_END:
        return "end of print statement";
    case TK_BLOCK_BEGIN:
        return "begin of statement block";
    case TK_BLOCK_END:
        return "end of statement block";
    case TK_NAME:
        return t->s;
    case TK_STRING:
        return "string";
    case TK_INT:
        return "integer";
    case TK_FLOAT:
        return "float";
    default:
        return t->s ? t->s : "operator";
    }
}

tnode *tp_mk(parser *P, int kind, int line) {
    tnode *nd = ta_alloc(P->a, sizeof *nd);
    if (!nd) {
        tp_fail(P, line, "out of memory");
        return NULL;
    }
    nd->kind = (uint16_t)kind;
    nd->line = line;
    return nd;
}

int tp_push(parser *P, nlist *l, tnode *x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tnode **v = ta_alloc(P->a, cap * sizeof *v);
        if (!v) return tp_fail(P, x ? x->line : 0, "out of memory");
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

int tp_expect_op(parser *P, int op, const char *what) {
    if (!tp_is_op(tp_cur(P), op))
        return tp_fail(P, tp_cur(P)->line, "expected '%s', got '%s'", what, tp_describe(tp_cur(P)));
    tp_adv(P);
    return 0;
}

int tp_expect_type(parser *P, int type, const char *what) {
    if (tp_cur(P)->type != type) {
        if (tp_cur(P)->type == TK_EOF)
            return tp_fail(P, tp_cur(P)->line, "unexpected end of template, expected '%s'.", what);
        return tp_fail(P, tp_cur(P)->line, "expected '%s', got '%s'", what, tp_describe(tp_cur(P)));
    }
    tp_adv(P);
    return 0;
}

static tnode *parse_postfix(parser *P, tnode *node);

static int parse_call_args(parser *P, tnode *call) {
    nlist args = {0}, kw = {0};
    const char **names = NULL;
    size_t nn = 0, ncap = 0;
    int line = tp_cur(P)->line;
    if (tp_expect_op(P, OP_LPAREN, "(")) return -1;
    bool need_comma = false;
    while (!tp_is_op(tp_cur(P), OP_RPAREN)) {
        if (need_comma) {
            if (tp_expect_op(P, OP_COMMA, ",")) return -1;
            if (tp_is_op(tp_cur(P), OP_RPAREN)) break;
        }
        if (tp_is_op(tp_cur(P), OP_MUL) || tp_is_op(tp_cur(P), OP_POW))
            return tp_fail(P, line, "*args / **kwargs in calls are not supported");
        if (tp_cur(P)->type == TK_NAME && tp_is_op(tp_peek(P), OP_ASSIGN)) {
            if (nn == ncap) {
                ncap = ncap ? ncap * 2 : 4;
                const char **v = ta_alloc(P->a, ncap * sizeof *v);
                if (!v) return tp_fail(P, line, "out of memory");
                if (nn) memcpy(v, names, nn * sizeof *v);
                names = v;
            }
            names[nn++] = tp_cur(P)->s;
            tp_adv(P);
            tp_adv(P);
            tnode *v = tp_expression(P, true);
            if (!v || tp_push(P, &kw, v)) return -1;
        } else {
            if (kw.n) return tp_fail(P, line, "invalid syntax for function call expression");
            tnode *v = tp_expression(P, true);
            if (!v || tp_push(P, &args, v)) return -1;
        }
        need_comma = true;
    }
    tp_adv(P);
    call->items = args.v;
    call->n = args.n;
    call->items2 = kw.v;
    call->n2 = kw.n;
    call->knames = names;
    return 0;
}

static tnode *parse_subscribed(parser *P) {
    int line = tp_cur(P)->line;
    tnode *args[3] = {NULL, NULL, NULL};
    if (tp_is_op(tp_cur(P), OP_COLON)) {
        tp_adv(P);
    } else {
        tnode *e = tp_expression(P, true);
        if (!e || !tp_is_op(tp_cur(P), OP_COLON)) return e;
        tp_adv(P);
        args[0] = e;
    }
    if (!tp_is_op(tp_cur(P), OP_COLON) && !tp_is_op(tp_cur(P), OP_RBRACKET) &&
        !tp_is_op(tp_cur(P), OP_COMMA)) {
        if (!(args[1] = tp_expression(P, true))) return NULL;
    }
    if (tp_is_op(tp_cur(P), OP_COLON)) {
        tp_adv(P);
        if (!tp_is_op(tp_cur(P), OP_RBRACKET) && !tp_is_op(tp_cur(P), OP_COMMA))
            if (!(args[2] = tp_expression(P, true))) return NULL;
    }
    tnode *s = tp_mk(P, N_SLICE, line);
    if (!s) return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static tnode *parse_postfix(parser *P, tnode *node) {
    while (node) {
        const ttoken *t = tp_cur(P);
        if (tp_is_op(t, OP_DOT)) {
            tp_adv(P);
            const ttoken *at = tp_cur(P);
            if (at->type == TK_NAME) {
                tnode *g = tp_mk(P, N_GETATTR, t->line);
                if (!g) return NULL;
                g->a = node;
                g->name = at->s;
                tp_adv(P);
                node = g;
            } else if (at->type == TK_INT) {
                tnode *g = tp_mk(P, N_GETITEM, t->line), *k = tp_mk(P, N_CONST, at->line);
                if (!g || !k) return NULL;
                k->val = tv_int(at->i);
                g->a = node;
                g->b = k;
                tp_adv(P);
                node = g;
            } else {
                tp_fail(P, at->line, "expected name or number");
                return NULL;
            }
        } else if (tp_is_op(t, OP_LBRACKET)) {
            tp_adv(P);
            nlist args = {0};
            while (!tp_is_op(tp_cur(P), OP_RBRACKET)) {
                if (args.n && tp_expect_op(P, OP_COMMA, ",")) return NULL;
                if (tp_cur(P)->type == TK_EOF || tp_cur(P)->type == TK_VAR_END ||
                    tp_cur(P)->type == TK_BLOCK_END) {
                    tp_fail(P, tp_cur(P)->line, "expected ']', got '%s'", tp_describe(tp_cur(P)));
                    return NULL;
                }
                tnode *x = parse_subscribed(P);
                if (!x || tp_push(P, &args, x)) return NULL;
            }
            tp_adv(P);
            if (args.n == 0) {
                tp_fail(P, t->line, "expected subscript expression");
                return NULL;
            }
            tnode *g = tp_mk(P, N_GETITEM, t->line);
            if (!g) return NULL;
            g->a = node;
            if (args.n == 1)
                g->b = args.v[0];
            else {
                tnode *tp = tp_mk(P, N_TUPLE, t->line);
                if (!tp) return NULL;
                tp->items = args.v;
                tp->n = args.n;
                g->b = tp;
            }
            node = g;
        } else if (tp_is_op(t, OP_LPAREN)) {
            tnode *c = tp_mk(P, N_CALL, t->line);
            if (!c) return NULL;
            c->a = node;
            if (parse_call_args(P, c)) return NULL;
            node = c;
        } else
            break;
    }
    return node;
}

static int parse_dotted_name(parser *P, const char **out) {
    if (tp_cur(P)->type != TK_NAME)
        return tp_fail(P, tp_cur(P)->line, "expected name, got '%s'", tp_describe(tp_cur(P)));
    char buf[256];
    snprintf(buf, sizeof buf, "%s", tp_cur(P)->s);
    tp_adv(P);
    while (tp_is_op(tp_cur(P), OP_DOT) && tp_peek(P)->type == TK_NAME) {
        tp_adv(P);
        size_t l = strlen(buf);
        snprintf(buf + l, sizeof buf - l, ".%s", tp_cur(P)->s);
        tp_adv(P);
    }
    *out = ta_memdup(P->a, buf, strlen(buf));
    return *out ? 0 : tp_fail(P, tp_cur(P)->line, "out of memory");
}

tnode *tp_filter(parser *P, tnode *node, bool start_inline) {
    while (tp_is_op(tp_cur(P), OP_PIPE) || start_inline) {
        if (!start_inline) tp_adv(P);
        start_inline = false;
        int line = tp_cur(P)->line;
        tnode *f = tp_mk(P, N_FILTER, line);
        if (!f || parse_dotted_name(P, &f->name)) return NULL;
        int id = tmpl_filter_id(f->name);
        if (id < 0) {
            tp_fail(P, line, "No filter named '%s'.", f->name);
            return NULL;
        }
        f->op = (uint16_t)id;
        f->a = node;
        if (tp_is_op(tp_cur(P), OP_LPAREN) && parse_call_args(P, f)) return NULL;
        node = f;
    }
    return node;
}

static tnode *parse_test(parser *P, tnode *node) {
    int line = tp_cur(P)->line;
    tp_adv(P); /* 'is' */
    bool neg = false;
    if (tp_is_name(tp_cur(P), "not")) {
        neg = true;
        tp_adv(P);
    }
    tnode *t = tp_mk(P, N_TEST, line);
    if (!t || parse_dotted_name(P, &t->name)) return NULL;
    int id = tmpl_test_id(t->name);
    if (id < 0) {
        tp_fail(P, line, "No test named '%s'.", t->name);
        return NULL;
    }
    t->op = (uint16_t)id;
    t->a = node;
    const ttoken *c = tp_cur(P);
    if (tp_is_op(c, OP_LPAREN)) {
        if (parse_call_args(P, t)) return NULL;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                tp_is_op(c, OP_LBRACKET) || tp_is_op(c, OP_LBRACE)) &&
               !tp_is_name(c, "else") && !tp_is_name(c, "or") && !tp_is_name(c, "and")) {
        if (tp_is_name(c, "is")) {
            tp_fail(P, c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        tnode *arg = parse_postfix(P, tp_primary(P, false));
        if (!arg) return NULL;
        t->items = ta_alloc(P->a, sizeof(tnode *));
        if (!t->items) return NULL;
        t->items[0] = arg;
        t->n = 1;
    }
    if (!neg) return t;
    tnode *nt = tp_mk(P, N_NOT, line);
    if (nt) nt->a = t;
    return nt;
}

static tnode *parse_unary(parser *P, bool with_filter) {
    if (++P->depth > TMPL_MAX_DEPTH) {
        tp_fail(P, tp_cur(P)->line, "expression nested too deeply");
        return NULL;
    }
    const ttoken *t = tp_cur(P);
    tnode *node;
    if (tp_is_op(t, OP_SUB) || tp_is_op(t, OP_ADD)) {
        tp_adv(P);
        tnode *x = parse_unary(P, false);
        if (!x) return NULL;
        node = tp_mk(P, tp_is_op(t, OP_SUB) ? N_NEG : N_POS, t->line);
        if (node) node->a = x;
    } else
        node = tp_primary(P, false);
    node = parse_postfix(P, node);
    while (with_filter && node) {
        if (tp_is_op(tp_cur(P), OP_PIPE))
            node = tp_filter(P, node, false);
        else if (tp_is_name(tp_cur(P), "is"))
            node = parse_test(P, node);
        else if (tp_is_op(tp_cur(P), OP_LPAREN))
            node = parse_postfix(P, node);
        else
            break;
    }
    P->depth--;
    return node;
}

static tnode *binop(parser *P, int kind, int op, tnode *l, tnode *r, int line) {
    if (!l || !r) return NULL;
    tnode *b = tp_mk(P, kind, line);
    if (!b) return NULL;
    b->op = (uint16_t)op;
    b->a = l;
    b->b = r;
    return b;
}

static tnode *parse_pow(parser *P) {
    tnode *l = parse_unary(P, true);
    while (l && tp_is_op(tp_cur(P), OP_POW)) {
        int line = tp_cur(P)->line;
        tp_adv(P);
        l = binop(P, N_BINOP, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static tnode *parse_math2(parser *P) {
    tnode *l = parse_pow(P);
    while (l && tp_cur(P)->type == TK_OP &&
           (tp_cur(P)->op == OP_MUL || tp_cur(P)->op == OP_DIV || tp_cur(P)->op == OP_FLOORDIV ||
            tp_cur(P)->op == OP_MOD)) {
        int op = tp_cur(P)->op, line = tp_cur(P)->line;
        tp_adv(P);
        l = binop(P, N_BINOP, op, l, parse_pow(P), line);
    }
    return l;
}

static tnode *parse_concat(parser *P) {
    tnode *first = parse_math2(P);
    if (!first || !tp_is_op(tp_cur(P), OP_TILDE)) return first;
    nlist args = {0};
    if (tp_push(P, &args, first)) return NULL;
    int line = tp_cur(P)->line;
    while (tp_is_op(tp_cur(P), OP_TILDE)) {
        tp_adv(P);
        tnode *x = parse_math2(P);
        if (!x || tp_push(P, &args, x)) return NULL;
    }
    tnode *c = tp_mk(P, N_CONCAT, line);
    if (!c) return NULL;
    c->items = args.v;
    c->n = args.n;
    return c;
}

static tnode *parse_math1(parser *P) {
    tnode *l = parse_concat(P);
    while (l && (tp_is_op(tp_cur(P), OP_ADD) || tp_is_op(tp_cur(P), OP_SUB))) {
        int op = tp_cur(P)->op, line = tp_cur(P)->line;
        tp_adv(P);
        l = binop(P, N_BINOP, op, l, parse_concat(P), line);
    }
    return l;
}

static tnode *parse_compare(parser *P) {
    int line = tp_cur(P)->line;
    tnode *e = parse_math1(P);
    if (!e) return NULL;
    nlist ops = {0};
    uint16_t codes[64];
    for (;;) {
        const ttoken *t = tp_cur(P);
        int code = 0;
        if (t->type == TK_OP && t->op >= OP_EQ && t->op <= OP_LE) {
            code = t->op;
            tp_adv(P);
        } else if (tp_is_name(t, "in")) {
            code = CMP_IN;
            tp_adv(P);
        } else if (tp_is_name(t, "not") && tp_is_name(tp_peek(P), "in")) {
            code = CMP_NOTIN;
            tp_adv(P);
            tp_adv(P);
        } else
            break;
        if (ops.n >= 64) {
            tp_fail(P, line, "comparison chain too long");
            return NULL;
        }
        tnode *x = parse_math1(P);
        if (!x) return NULL;
        codes[ops.n] = (uint16_t)code;
        if (tp_push(P, &ops, x)) return NULL;
    }
    if (!ops.n) return e;
    tnode *c = tp_mk(P, N_COMPARE, line);
    if (!c || !(c->ops = ta_alloc(P->a, ops.n * sizeof(uint16_t)))) return NULL;
    memcpy(c->ops, codes, ops.n * sizeof(uint16_t));
    c->a = e;
    c->items = ops.v;
    c->n = ops.n;
    return c;
}

static tnode *parse_not(parser *P) {
    if (tp_is_name(tp_cur(P), "not")) {
        int line = tp_cur(P)->line;
        tp_adv(P);
        if (++P->depth > TMPL_MAX_DEPTH) {
            tp_fail(P, line, "expression nested too deeply");
            return NULL;
        }
        tnode *x = parse_not(P);
        P->depth--;
        if (!x) return NULL;
        tnode *n = tp_mk(P, N_NOT, line);
        if (n) n->a = x;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    tnode *l = parse_not(P);
    while (l && tp_is_name(tp_cur(P), "and")) {
        int line = tp_cur(P)->line;
        tp_adv(P);
        l = binop(P, N_AND, 0, l, parse_not(P), line);
    }
    return l;
}

static tnode *parse_or(parser *P) {
    tnode *l = parse_and(P);
    while (l && tp_is_name(tp_cur(P), "or")) {
        int line = tp_cur(P)->line;
        tp_adv(P);
        l = binop(P, N_OR, 0, l, parse_and(P), line);
    }
    return l;
}

static tnode *parse_condexpr(parser *P) {
    int line = tp_cur(P)->line;
    tnode *e1 = parse_or(P);
    while (e1 && tp_is_name(tp_cur(P), "if")) {
        tp_adv(P);
        tnode *e2 = parse_or(P), *e3 = NULL;
        if (!e2) return NULL;
        if (tp_is_name(tp_cur(P), "else")) {
            tp_adv(P);
            if (++P->depth > TMPL_MAX_DEPTH) {
                tp_fail(P, line, "expression nested too deeply");
                return NULL;
            }
            e3 = parse_condexpr(P);
            P->depth--;
            if (!e3) return NULL;
        }
        tnode *c = tp_mk(P, N_COND, line);
        if (!c) return NULL;
        c->a = e2;
        c->b = e1;
        c->c = e3;
        e1 = c;
    }
    return e1;
}

tnode *tp_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static tnode *parse_seq(parser *P, int kind, int close, const char *closes) {
    int line = tp_cur(P)->line;
    tp_adv(P);
    nlist keys = {0}, vals = {0};
    while (!tp_is_op(tp_cur(P), close)) {
        if (keys.n && tp_expect_op(P, OP_COMMA, ",")) return NULL;
        if (tp_is_op(tp_cur(P), close)) break;
        if (++P->depth > TMPL_MAX_DEPTH) {
            tp_fail(P, line, "expression nested too deeply");
            return NULL;
        }
        tnode *k = tp_expression(P, true);
        P->depth--;
        if (!k || tp_push(P, &keys, k)) return NULL;
        if (kind == N_DICT) {
            if (tp_expect_op(P, OP_COLON, ":")) return NULL;
            tnode *v = tp_expression(P, true);
            if (!v || tp_push(P, &vals, v)) return NULL;
        }
    }
    if (tp_expect_op(P, close, closes)) return NULL;
    tnode *nd = tp_mk(P, kind, line);
    if (!nd) return NULL;
    nd->items = keys.v;
    nd->n = keys.n;
    nd->items2 = vals.v;
    nd->n2 = vals.n;
    return nd;
}

tnode *tp_primary(parser *P, bool with_ns) {
    const ttoken *t = tp_cur(P);
    tnode *nd;
    if (P->failed) return NULL;
    if (t->type == TK_NAME) {
        tp_adv(P);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            if ((nd = tp_mk(P, N_CONST, t->line))) nd->val = tv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            if ((nd = tp_mk(P, N_CONST, t->line))) nd->val = tv_none();
        } else if (with_ns && tp_is_op(tp_cur(P), OP_DOT)) {
            tp_adv(P);
            if (tp_cur(P)->type != TK_NAME) {
                tp_fail(P, tp_cur(P)->line, "expected name, got '%s'", tp_describe(tp_cur(P)));
                return NULL;
            }
            if ((nd = tp_mk(P, N_NSREF, t->line))) {
                nd->name = t->s;
                nd->name2 = tp_cur(P)->s;
            }
            tp_adv(P);
        } else if ((nd = tp_mk(P, N_NAME, t->line)))
            nd->name = t->s;
        return nd;
    }
    if (t->type == TK_STRING) { /* adjacent literals concatenate */
        size_t len = 0, k = P->pos;
        while (k < P->n && P->t[k].type == TK_STRING) len += P->t[k++].n;
        char *s = ta_alloc(P->a, len + 1);
        if (!s || !(nd = tp_mk(P, N_CONST, t->line))) return NULL;
        size_t o = 0;
        while (tp_cur(P)->type == TK_STRING) {
            memcpy(s + o, tp_cur(P)->s, tp_cur(P)->n);
            o += tp_cur(P)->n;
            tp_adv(P);
        }
        nd->val = tv_strn(s, len);
        return nd;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        tp_adv(P);
        if ((nd = tp_mk(P, N_CONST, t->line))) nd->val = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        return nd;
    }
    if (tp_is_op(t, OP_LPAREN)) {
        tp_adv(P);
        if (++P->depth > TMPL_MAX_DEPTH) {
            tp_fail(P, t->line, "expression nested too deeply");
            return NULL;
        }
        nd = tp_tuple(P, false, true, NULL, true, false);
        P->depth--;
        if (!nd || tp_expect_op(P, OP_RPAREN, ")")) return NULL;
        return nd;
    }
    if (tp_is_op(t, OP_LBRACKET)) return parse_seq(P, N_LIST, OP_RBRACKET, "]");
    if (tp_is_op(t, OP_LBRACE)) return parse_seq(P, N_DICT, OP_RBRACE, "}");
    if (t->type == TK_EOF)
        tp_fail(P, t->line, "unexpected end of template");
    else
        tp_fail(P, t->line, "unexpected '%s'", tp_describe(t));
    return NULL;
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const ttoken *t = tp_cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF || tp_is_op(t, OP_RPAREN))
        return true;
    return extra_end && tp_is_name(t, extra_end);
}

tnode *tp_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_paren,
                bool with_ns) {
    int line = tp_cur(P)->line;
    nlist args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && tp_expect_op(P, OP_COMMA, ",")) return NULL;
        if (is_tuple_end(P, extra_end)) break;
        tnode *x = simplified ? tp_primary(P, with_ns) : tp_expression(P, with_condexpr);
        if (!x || tp_push(P, &args, x)) return NULL;
        if (tp_is_op(tp_cur(P), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_paren) {
            tp_fail(P, line, "Expected an expression, got '%s'", tp_describe(tp_cur(P)));
            return NULL;
        }
    }
    tnode *tp = tp_mk(P, N_TUPLE, line);
    if (!tp) return NULL;
    tp->items = args.v;
    tp->n = args.n;
    return tp;
}

static bool can_assign(const tnode *t) {
    if (t->kind == N_NAME) {
        const char *s = t->name;
        return strcmp(s, "true") && strcmp(s, "false") && strcmp(s, "none") && strcmp(s, "True") &&
               strcmp(s, "False") && strcmp(s, "None");
    }
    if (t->kind == N_NSREF) return true;
    if (t->kind == N_TUPLE) {
        for (size_t i = 0; i < t->n; i++)
            if (t->items[i]->kind != N_NAME) return false;
        return true;
    }
    return false;
}

tnode *tp_assign_target(parser *P, const char *extra_end, bool with_ns) {
    int line = tp_cur(P)->line;
    tnode *t = tp_tuple(P, true, true, extra_end, false, with_ns);
    if (!t) return NULL;
    if (!can_assign(t)) {
        tp_fail(P, line, "can't assign to this expression");
        return NULL;
    }
    return t;
}
