/* parser.c — jinja2's parser (jinja2/parser.py, 3.1): statements and the expression grammar with its
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

#include "tmpl.h"

typedef struct parser {
    tarena *a;
    const ttoken *t;
    size_t n, pos;
    weft_err *err;
    int depth;
    int loops; /* enclosing for-loops (break/continue are legal) */
    bool failed;
} parser;

typedef struct nlist {
    tnode **v;
    size_t n, cap;
} nlist;

static const char *KW_END_FOR_ELSE[] = {"endfor", "else", NULL};
static const char *KW_END_FOR[] = {"endfor", NULL};
static const char *KW_IF[] = {"elif", "else", "endif", NULL};
static const char *KW_ENDIF[] = {"endif", NULL};

static int pfail(parser *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pfail(parser *P, int line, const char *fmt, ...) {
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

static const ttoken *cur(parser *P) { return &P->t[P->pos < P->n ? P->pos : P->n - 1]; }
static const ttoken *peek(parser *P) { return &P->t[P->pos + 1 < P->n ? P->pos + 1 : P->n - 1]; }
static void adv(parser *P) {
    if (P->pos + 1 < P->n) P->pos++;
}
static bool is_op(const ttoken *t, int op) { return t->type == TK_OP && t->op == op; }
static bool is_name(const ttoken *t, const char *s) { return t->type == TK_NAME && strcmp(t->s, s) == 0; }

static const char *describe(const ttoken *t) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_BLOCK_END: return "end of statement block";
    case TK_NAME: return t->s;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: return t->s ? t->s : "operator";
    }
}

static tnode *mk(parser *P, int kind, int line) {
    tnode *nd = ta_alloc(P->a, sizeof *nd);
    if (!nd) {
        pfail(P, line, "out of memory");
        return NULL;
    }
    nd->kind = (uint16_t)kind;
    nd->line = line;
    return nd;
}

static int nl_push(parser *P, nlist *l, tnode *x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tnode **v = ta_alloc(P->a, cap * sizeof *v);
        if (!v) return pfail(P, x ? x->line : 0, "out of memory");
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int expect_op(parser *P, int op, const char *what) {
    if (!is_op(cur(P), op)) return pfail(P, cur(P)->line, "expected '%s', got '%s'", what, describe(cur(P)));
    adv(P);
    return 0;
}

static int expect_type(parser *P, int type, const char *what) {
    if (cur(P)->type != type) {
        if (cur(P)->type == TK_EOF) return pfail(P, cur(P)->line, "unexpected end of template, expected '%s'.", what);
        return pfail(P, cur(P)->line, "expected '%s', got '%s'", what, describe(cur(P)));
    }
    adv(P);
    return 0;
}

static tnode *parse_expression(parser *P, bool with_condexpr);
static tnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_paren,
                          bool with_ns);
static tnode *parse_primary(parser *P, bool with_ns);
static tnode *parse_postfix(parser *P, tnode *node);
static tnode *parse_filter(parser *P, tnode *node, bool start_inline);
static int subparse(parser *P, const char *const *end, nlist *body);

/* ---------------------------------------------------------------- expressions */
static int parse_call_args(parser *P, tnode *call) {
    nlist args = {0}, kw = {0};
    const char **names = NULL;
    size_t nn = 0, ncap = 0;
    int line = cur(P)->line;
    if (expect_op(P, OP_LPAREN, "(")) return -1;
    bool need_comma = false;
    while (!is_op(cur(P), OP_RPAREN)) {
        if (need_comma) {
            if (expect_op(P, OP_COMMA, ",")) return -1;
            if (is_op(cur(P), OP_RPAREN)) break;
        }
        if (is_op(cur(P), OP_MUL) || is_op(cur(P), OP_POW))
            return pfail(P, line, "*args / **kwargs in calls are not supported");
        if (cur(P)->type == TK_NAME && is_op(peek(P), OP_ASSIGN)) {
            if (nn == ncap) {
                ncap = ncap ? ncap * 2 : 4;
                const char **v = ta_alloc(P->a, ncap * sizeof *v);
                if (!v) return pfail(P, line, "out of memory");
                if (nn) memcpy(v, names, nn * sizeof *v);
                names = v;
            }
            names[nn++] = cur(P)->s;
            adv(P);
            adv(P);
            tnode *v = parse_expression(P, true);
            if (!v || nl_push(P, &kw, v)) return -1;
        } else {
            if (kw.n) return pfail(P, line, "invalid syntax for function call expression");
            tnode *v = parse_expression(P, true);
            if (!v || nl_push(P, &args, v)) return -1;
        }
        need_comma = true;
    }
    adv(P);
    call->items = args.v;
    call->n = args.n;
    call->items2 = kw.v;
    call->n2 = kw.n;
    call->knames = names;
    return 0;
}

static tnode *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    tnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), OP_COLON)) {
        adv(P);
    } else {
        tnode *e = parse_expression(P, true);
        if (!e || !is_op(cur(P), OP_COLON)) return e;
        adv(P);
        args[0] = e;
    }
    if (!is_op(cur(P), OP_COLON) && !is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA)) {
        if (!(args[1] = parse_expression(P, true))) return NULL;
    }
    if (is_op(cur(P), OP_COLON)) {
        adv(P);
        if (!is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA))
            if (!(args[2] = parse_expression(P, true))) return NULL;
    }
    tnode *s = mk(P, N_SLICE, line);
    if (!s) return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static tnode *parse_postfix(parser *P, tnode *node) {
    while (node) {
        const ttoken *t = cur(P);
        if (is_op(t, OP_DOT)) {
            adv(P);
            const ttoken *at = cur(P);
            if (at->type == TK_NAME) {
                tnode *g = mk(P, N_GETATTR, t->line);
                if (!g) return NULL;
                g->a = node;
                g->name = at->s;
                adv(P);
                node = g;
            } else if (at->type == TK_INT) {
                tnode *g = mk(P, N_GETITEM, t->line), *k = mk(P, N_CONST, at->line);
                if (!g || !k) return NULL;
                k->val = tv_int(at->i);
                g->a = node;
                g->b = k;
                adv(P);
                node = g;
            } else {
                pfail(P, at->line, "expected name or number");
                return NULL;
            }
        } else if (is_op(t, OP_LBRACKET)) {
            adv(P);
            nlist args = {0};
            while (!is_op(cur(P), OP_RBRACKET)) {
                if (args.n && expect_op(P, OP_COMMA, ",")) return NULL;
                if (cur(P)->type == TK_EOF || cur(P)->type == TK_VAR_END || cur(P)->type == TK_BLOCK_END) {
                    pfail(P, cur(P)->line, "expected ']', got '%s'", describe(cur(P)));
                    return NULL;
                }
                tnode *x = parse_subscribed(P);
                if (!x || nl_push(P, &args, x)) return NULL;
            }
            adv(P);
            if (args.n == 0) {
                pfail(P, t->line, "expected subscript expression");
                return NULL;
            }
            tnode *g = mk(P, N_GETITEM, t->line);
            if (!g) return NULL;
            g->a = node;
            if (args.n == 1) g->b = args.v[0];
            else {
                tnode *tp = mk(P, N_TUPLE, t->line);
                if (!tp) return NULL;
                tp->items = args.v;
                tp->n = args.n;
                g->b = tp;
            }
            node = g;
        } else if (is_op(t, OP_LPAREN)) {
            tnode *c = mk(P, N_CALL, t->line);
            if (!c) return NULL;
            c->a = node;
            if (parse_call_args(P, c)) return NULL;
            node = c;
        } else break;
    }
    return node;
}

static int parse_dotted_name(parser *P, const char **out) {
    if (cur(P)->type != TK_NAME) return pfail(P, cur(P)->line, "expected name, got '%s'", describe(cur(P)));
    char buf[256];
    snprintf(buf, sizeof buf, "%s", cur(P)->s);
    adv(P);
    while (is_op(cur(P), OP_DOT) && peek(P)->type == TK_NAME) {
        adv(P);
        size_t l = strlen(buf);
        snprintf(buf + l, sizeof buf - l, ".%s", cur(P)->s);
        adv(P);
    }
    *out = ta_memdup(P->a, buf, strlen(buf));
    return *out ? 0 : pfail(P, cur(P)->line, "out of memory");
}

static tnode *parse_filter(parser *P, tnode *node, bool start_inline) {
    while (is_op(cur(P), OP_PIPE) || start_inline) {
        if (!start_inline) adv(P);
        start_inline = false;
        int line = cur(P)->line;
        tnode *f = mk(P, N_FILTER, line);
        if (!f || parse_dotted_name(P, &f->name)) return NULL;
        int id = tmpl_filter_id(f->name);
        if (id < 0) {
            pfail(P, line, "No filter named '%s'.", f->name);
            return NULL;
        }
        f->op = (uint16_t)id;
        f->a = node;
        if (is_op(cur(P), OP_LPAREN) && parse_call_args(P, f)) return NULL;
        node = f;
    }
    return node;
}

static tnode *parse_test(parser *P, tnode *node) {
    int line = cur(P)->line;
    adv(P); /* 'is' */
    bool neg = false;
    if (is_name(cur(P), "not")) {
        neg = true;
        adv(P);
    }
    tnode *t = mk(P, N_TEST, line);
    if (!t || parse_dotted_name(P, &t->name)) return NULL;
    int id = tmpl_test_id(t->name);
    if (id < 0) {
        pfail(P, line, "No test named '%s'.", t->name);
        return NULL;
    }
    t->op = (uint16_t)id;
    t->a = node;
    const ttoken *c = cur(P);
    if (is_op(c, OP_LPAREN)) {
        if (parse_call_args(P, t)) return NULL;
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                is_op(c, OP_LBRACKET) || is_op(c, OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            pfail(P, c->line, "You cannot chain multiple tests with is");
            return NULL;
        }
        tnode *arg = parse_postfix(P, parse_primary(P, false));
        if (!arg) return NULL;
        t->items = ta_alloc(P->a, sizeof(tnode *));
        if (!t->items) return NULL;
        t->items[0] = arg;
        t->n = 1;
    }
    if (!neg) return t;
    tnode *nt = mk(P, N_NOT, line);
    if (nt) nt->a = t;
    return nt;
}

static tnode *parse_unary(parser *P, bool with_filter) {
    if (++P->depth > TMPL_MAX_DEPTH) {
        pfail(P, cur(P)->line, "expression nested too deeply");
        return NULL;
    }
    const ttoken *t = cur(P);
    tnode *node;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        adv(P);
        tnode *x = parse_unary(P, false);
        if (!x) return NULL;
        node = mk(P, is_op(t, OP_SUB) ? N_NEG : N_POS, t->line);
        if (node) node->a = x;
    } else node = parse_primary(P, false);
    node = parse_postfix(P, node);
    while (with_filter && node) {
        if (is_op(cur(P), OP_PIPE)) node = parse_filter(P, node, false);
        else if (is_name(cur(P), "is")) node = parse_test(P, node);
        else if (is_op(cur(P), OP_LPAREN)) node = parse_postfix(P, node);
        else break;
    }
    P->depth--;
    return node;
}

static tnode *binop(parser *P, int kind, int op, tnode *l, tnode *r, int line) {
    if (!l || !r) return NULL;
    tnode *b = mk(P, kind, line);
    if (!b) return NULL;
    b->op = (uint16_t)op;
    b->a = l;
    b->b = r;
    return b;
}

static tnode *parse_pow(parser *P) {
    tnode *l = parse_unary(P, true);
    while (l && is_op(cur(P), OP_POW)) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static tnode *parse_math2(parser *P) {
    tnode *l = parse_pow(P);
    while (l && cur(P)->type == TK_OP &&
           (cur(P)->op == OP_MUL || cur(P)->op == OP_DIV || cur(P)->op == OP_FLOORDIV || cur(P)->op == OP_MOD)) {
        int op = cur(P)->op, line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, op, l, parse_pow(P), line);
    }
    return l;
}

static tnode *parse_concat(parser *P) {
    tnode *first = parse_math2(P);
    if (!first || !is_op(cur(P), OP_TILDE)) return first;
    nlist args = {0};
    if (nl_push(P, &args, first)) return NULL;
    int line = cur(P)->line;
    while (is_op(cur(P), OP_TILDE)) {
        adv(P);
        tnode *x = parse_math2(P);
        if (!x || nl_push(P, &args, x)) return NULL;
    }
    tnode *c = mk(P, N_CONCAT, line);
    if (!c) return NULL;
    c->items = args.v;
    c->n = args.n;
    return c;
}

static tnode *parse_math1(parser *P) {
    tnode *l = parse_concat(P);
    while (l && (is_op(cur(P), OP_ADD) || is_op(cur(P), OP_SUB))) {
        int op = cur(P)->op, line = cur(P)->line;
        adv(P);
        l = binop(P, N_BINOP, op, l, parse_concat(P), line);
    }
    return l;
}

static tnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    tnode *e = parse_math1(P);
    if (!e) return NULL;
    nlist ops = {0};
    uint16_t codes[64];
    for (;;) {
        const ttoken *t = cur(P);
        int code = 0;
        if (t->type == TK_OP && t->op >= OP_EQ && t->op <= OP_LE) {
            code = t->op;
            adv(P);
        } else if (is_name(t, "in")) {
            code = CMP_IN;
            adv(P);
        } else if (is_name(t, "not") && is_name(peek(P), "in")) {
            code = CMP_NOTIN;
            adv(P);
            adv(P);
        } else break;
        if (ops.n >= 64) {
            pfail(P, line, "comparison chain too long");
            return NULL;
        }
        tnode *x = parse_math1(P);
        if (!x) return NULL;
        codes[ops.n] = (uint16_t)code;
        if (nl_push(P, &ops, x)) return NULL;
    }
    if (!ops.n) return e;
    tnode *c = mk(P, N_COMPARE, line);
    if (!c || !(c->ops = ta_alloc(P->a, ops.n * sizeof(uint16_t)))) return NULL;
    memcpy(c->ops, codes, ops.n * sizeof(uint16_t));
    c->a = e;
    c->items = ops.v;
    c->n = ops.n;
    return c;
}

static tnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        adv(P);
        if (++P->depth > TMPL_MAX_DEPTH) {
            pfail(P, line, "expression nested too deeply");
            return NULL;
        }
        tnode *x = parse_not(P);
        P->depth--;
        if (!x) return NULL;
        tnode *n = mk(P, N_NOT, line);
        if (n) n->a = x;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    tnode *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, N_AND, 0, l, parse_not(P), line);
    }
    return l;
}

static tnode *parse_or(parser *P) {
    tnode *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        adv(P);
        l = binop(P, N_OR, 0, l, parse_and(P), line);
    }
    return l;
}

static tnode *parse_condexpr(parser *P) {
    int line = cur(P)->line;
    tnode *e1 = parse_or(P);
    while (e1 && is_name(cur(P), "if")) {
        adv(P);
        tnode *e2 = parse_or(P), *e3 = NULL;
        if (!e2) return NULL;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (++P->depth > TMPL_MAX_DEPTH) {
                pfail(P, line, "expression nested too deeply");
                return NULL;
            }
            e3 = parse_condexpr(P);
            P->depth--;
            if (!e3) return NULL;
        }
        tnode *c = mk(P, N_COND, line);
        if (!c) return NULL;
        c->a = e2;
        c->b = e1;
        c->c = e3;
        e1 = c;
    }
    return e1;
}

static tnode *parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static tnode *parse_seq(parser *P, int kind, int close, const char *closes) {
    int line = cur(P)->line;
    adv(P);
    nlist keys = {0}, vals = {0};
    while (!is_op(cur(P), close)) {
        if (keys.n && expect_op(P, OP_COMMA, ",")) return NULL;
        if (is_op(cur(P), close)) break;
        if (++P->depth > TMPL_MAX_DEPTH) {
            pfail(P, line, "expression nested too deeply");
            return NULL;
        }
        tnode *k = parse_expression(P, true);
        P->depth--;
        if (!k || nl_push(P, &keys, k)) return NULL;
        if (kind == N_DICT) {
            if (expect_op(P, OP_COLON, ":")) return NULL;
            tnode *v = parse_expression(P, true);
            if (!v || nl_push(P, &vals, v)) return NULL;
        }
    }
    if (expect_op(P, close, closes)) return NULL;
    tnode *nd = mk(P, kind, line);
    if (!nd) return NULL;
    nd->items = keys.v;
    nd->n = keys.n;
    nd->items2 = vals.v;
    nd->n2 = vals.n;
    return nd;
}

static tnode *parse_primary(parser *P, bool with_ns) {
    const ttoken *t = cur(P);
    tnode *nd;
    if (P->failed) return NULL;
    if (t->type == TK_NAME) {
        adv(P);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            if ((nd = mk(P, N_CONST, t->line))) nd->val = tv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            if ((nd = mk(P, N_CONST, t->line))) nd->val = tv_none();
        } else if (with_ns && is_op(cur(P), OP_DOT)) {
            adv(P);
            if (cur(P)->type != TK_NAME) {
                pfail(P, cur(P)->line, "expected name, got '%s'", describe(cur(P)));
                return NULL;
            }
            if ((nd = mk(P, N_NSREF, t->line))) {
                nd->name = t->s;
                nd->name2 = cur(P)->s;
            }
            adv(P);
        } else if ((nd = mk(P, N_NAME, t->line))) nd->name = t->s;
        return nd;
    }
    if (t->type == TK_STRING) { /* adjacent literals concatenate */
        size_t len = 0, k = P->pos;
        while (k < P->n && P->t[k].type == TK_STRING) len += P->t[k++].n;
        char *s = ta_alloc(P->a, len + 1);
        if (!s || !(nd = mk(P, N_CONST, t->line))) return NULL;
        size_t o = 0;
        while (cur(P)->type == TK_STRING) {
            memcpy(s + o, cur(P)->s, cur(P)->n);
            o += cur(P)->n;
            adv(P);
        }
        nd->val = tv_strn(s, len);
        return nd;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        adv(P);
        if ((nd = mk(P, N_CONST, t->line))) nd->val = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        return nd;
    }
    if (is_op(t, OP_LPAREN)) {
        adv(P);
        if (++P->depth > TMPL_MAX_DEPTH) {
            pfail(P, t->line, "expression nested too deeply");
            return NULL;
        }
        nd = parse_tuple(P, false, true, NULL, true, false);
        P->depth--;
        if (!nd || expect_op(P, OP_RPAREN, ")")) return NULL;
        return nd;
    }
    if (is_op(t, OP_LBRACKET)) return parse_seq(P, N_LIST, OP_RBRACKET, "]");
    if (is_op(t, OP_LBRACE)) return parse_seq(P, N_DICT, OP_RBRACE, "}");
    if (t->type == TK_EOF) pfail(P, t->line, "unexpected end of template");
    else pfail(P, t->line, "unexpected '%s'", describe(t));
    return NULL;
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const ttoken *t = cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || t->type == TK_EOF || is_op(t, OP_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

static tnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_paren,
                          bool with_ns) {
    int line = cur(P)->line;
    nlist args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && expect_op(P, OP_COMMA, ",")) return NULL;
        if (is_tuple_end(P, extra_end)) break;
        tnode *x = simplified ? parse_primary(P, with_ns) : parse_expression(P, with_condexpr);
        if (!x || nl_push(P, &args, x)) return NULL;
        if (is_op(cur(P), OP_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_paren) {
            pfail(P, line, "Expected an expression, got '%s'", describe(cur(P)));
            return NULL;
        }
    }
    tnode *tp = mk(P, N_TUPLE, line);
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

static tnode *parse_assign_target(parser *P, const char *extra_end, bool with_ns) {
    int line = cur(P)->line;
    tnode *t = parse_tuple(P, true, true, extra_end, false, with_ns);
    if (!t) return NULL;
    if (!can_assign(t)) {
        pfail(P, line, "can't assign to this expression");
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- statements */
/* Expects the tag end, parses a body up to one of `end` (left as the current token). */
static int parse_statements(parser *P, const char *const *end, nlist *body, bool drop_needle) {
    if (is_op(cur(P), OP_COLON)) adv(P);
    if (expect_type(P, TK_BLOCK_END, "end of statement block")) return -1;
    if (subparse(P, end, body)) return -1;
    if (cur(P)->type == TK_EOF) {
        char want[128] = "";
        for (const char *const *e = end; *e; e++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", l ? " or " : "", *e);
        }
        return pfail(P, cur(P)->line, "Unexpected end of template. Jinja was looking for the following tags: %s.",
                     want);
    }
    if (drop_needle) adv(P);
    return 0;
}

static tnode *parse_for(parser *P, int line) {
    tnode *f = mk(P, N_FOR, line);
    if (!f || !(f->a = parse_assign_target(P, "in", false))) return NULL;
    if (!is_name(cur(P), "in")) {
        pfail(P, cur(P)->line, "expected 'in', got '%s'", describe(cur(P)));
        return NULL;
    }
    adv(P);
    if (!(f->b = parse_tuple(P, false, false, "recursive", false, false))) return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(f->c = parse_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        pfail(P, line, "recursive for loops are not supported");
        return NULL;
    }
    nlist body = {0}, els = {0};
    P->loops++;
    int rc = parse_statements(P, KW_END_FOR_ELSE, &body, false);
    P->loops--;
    if (rc) return NULL;
    bool has_else = is_name(cur(P), "else");
    adv(P);
    if (has_else && parse_statements(P, KW_END_FOR, &els, true)) return NULL;
    f->items = body.v;
    f->n = body.n;
    f->items2 = els.v;
    f->n2 = els.n;
    return f;
}

static tnode *parse_if(parser *P, int line) {
    tnode *top = mk(P, N_IF, line), *node = top;
    if (!top) return NULL;
    for (;;) {
        if (!(node->a = parse_tuple(P, false, false, NULL, false, false))) return NULL;
        nlist body = {0};
        if (parse_statements(P, KW_IF, &body, false)) return NULL;
        node->items = body.v;
        node->n = body.n;
        const ttoken *t = cur(P);
        adv(P);
        if (is_name(t, "elif")) {
            tnode *nx = mk(P, N_IF, t->line);
            if (!nx || !(node->items2 = ta_alloc(P->a, sizeof(tnode *)))) return NULL;
            node->items2[0] = nx;
            node->n2 = 1;
            node = nx;
            continue;
        }
        if (is_name(t, "else")) {
            nlist els = {0};
            if (parse_statements(P, KW_ENDIF, &els, true)) return NULL;
            node->items2 = els.v;
            node->n2 = els.n;
        }
        return top;
    }
}

static tnode *parse_set(parser *P, int line) {
    tnode *target = parse_assign_target(P, NULL, true);
    if (!target) return NULL;
    if (is_op(cur(P), OP_ASSIGN)) {
        adv(P);
        tnode *s = mk(P, N_SET, line);
        if (!s || !(s->b = parse_tuple(P, false, true, NULL, false, false))) return NULL;
        s->a = target;
        return s;
    }
    tnode *s = mk(P, N_SETBLOCK, line);
    if (!s) return NULL;
    s->a = target;
    if (is_op(cur(P), OP_PIPE) && !(s->b = parse_filter(P, NULL, false))) return NULL;
    static const char *const end[] = {"endset", NULL};
    nlist body = {0};
    if (parse_statements(P, end, &body, true)) return NULL;
    s->items = body.v;
    s->n = body.n;
    return s;
}

static tnode *parse_macro(parser *P, int line) {
    tnode *m = mk(P, N_MACRO, line);
    if (!m) return NULL;
    if (cur(P)->type != TK_NAME) {
        pfail(P, line, "expected macro name");
        return NULL;
    }
    m->name = cur(P)->s;
    adv(P);
    if (expect_op(P, OP_LPAREN, "(")) return NULL;
    const char *names[64];
    nlist defs = {0};
    size_t np = 0;
    while (!is_op(cur(P), OP_RPAREN)) {
        if (np && expect_op(P, OP_COMMA, ",")) return NULL;
        if (cur(P)->type != TK_NAME || np >= 64) {
            pfail(P, cur(P)->line, "expected parameter name, got '%s'", describe(cur(P)));
            return NULL;
        }
        names[np++] = cur(P)->s;
        adv(P);
        if (is_op(cur(P), OP_ASSIGN)) {
            adv(P);
            tnode *d = parse_expression(P, true);
            if (!d || nl_push(P, &defs, d)) return NULL;
        } else if (defs.n) {
            pfail(P, line, "non-default argument follows default argument");
            return NULL;
        }
    }
    adv(P);
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
    tnode *w = mk(P, N_WITH, line), *targets = mk(P, N_TUPLE, line);
    if (!w || !targets) return NULL;
    nlist tg = {0}, vals = {0};
    while (cur(P)->type != TK_BLOCK_END) {
        if (tg.n && expect_op(P, OP_COMMA, ",")) return NULL;
        tnode *t = parse_assign_target(P, NULL, false);
        if (!t || nl_push(P, &tg, t) || expect_op(P, OP_ASSIGN, "=")) return NULL;
        tnode *v = parse_expression(P, true);
        if (!v || nl_push(P, &vals, v)) return NULL;
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
    tnode *b = mk(P, kind, line);
    if (!b) return NULL;
    if (kind == N_FILTERBLOCK && !(b->b = parse_filter(P, NULL, true))) return NULL;
    const char *end[] = {endname, NULL};
    nlist body = {0};
    if (parse_statements(P, end, &body, true)) return NULL;
    b->items = body.v;
    b->n = body.n;
    return b;
}

static tnode *parse_statement(parser *P) {
    const ttoken *t = cur(P);
    if (t->type != TK_NAME) {
        pfail(P, t->line, "tag name expected");
        return NULL;
    }
    const char *s = t->s;
    int line = t->line;
    adv(P);
    if (!strcmp(s, "for")) return parse_for(P, line);
    if (!strcmp(s, "if")) return parse_if(P, line);
    if (!strcmp(s, "set")) return parse_set(P, line);
    if (!strcmp(s, "macro")) return parse_macro(P, line);
    if (!strcmp(s, "with")) return parse_with(P, line);
    if (!strcmp(s, "filter")) return parse_body_block(P, N_FILTERBLOCK, "endfilter", line);
    if (!strcmp(s, "generation")) return parse_body_block(P, N_BLOCK, "endgeneration", line);
    if (!strcmp(s, "print")) {
        tnode *p = mk(P, N_PRINT, line);
        if (p && !(p->a = parse_tuple(P, false, true, NULL, false, false))) return NULL;
        return p;
    }
    if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        if (!P->loops) {
            pfail(P, line, "'%s' outside of a for loop", s);
            return NULL;
        }
        return mk(P, s[0] == 'b' ? N_BREAK : N_CONTINUE, line);
    }
    static const char *const unsupported[] = {"extends", "block", "include", "import", "from", "call",
                                              "autoescape", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (!strcmp(s, *u)) {
            pfail(P, line, "the '%s' tag is not supported in chat templates", s);
            return NULL;
        }
    pfail(P, line, "Encountered unknown tag '%s'.", s);
    return NULL;
}

static int subparse(parser *P, const char *const *end, nlist *body) {
    for (;;) {
        const ttoken *t = cur(P);
        if (P->failed) return -1;
        if (t->type == TK_EOF) return 0;
        if (t->type == TK_DATA) {
            tnode *d = mk(P, N_DATA, t->line);
            if (!d) return -1;
            d->val = tv_strn(t->s, t->n);
            if (nl_push(P, body, d)) return -1;
            adv(P);
        } else if (t->type == TK_VAR_BEGIN) {
            adv(P);
            tnode *p = mk(P, N_PRINT, t->line);
            if (!p || !(p->a = parse_tuple(P, false, true, NULL, false, false))) return -1;
            if (expect_type(P, TK_VAR_END, "end of print statement") || nl_push(P, body, p)) return -1;
        } else if (t->type == TK_BLOCK_BEGIN) {
            adv(P);
            if (end && cur(P)->type == TK_NAME)
                for (const char *const *e = end; *e; e++)
                    if (!strcmp(cur(P)->s, *e)) return 0;
            if (++P->depth > TMPL_MAX_DEPTH) return pfail(P, t->line, "blocks nested too deeply");
            tnode *st = parse_statement(P);
            P->depth--;
            if (!st || nl_push(P, body, st)) return -1;
            if (expect_type(P, TK_BLOCK_END, "end of statement block")) return -1;
        } else {
            return pfail(P, t->line, "unexpected '%s'", describe(t));
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
