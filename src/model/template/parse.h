/* parse.h — shared state of the template parser (parse_expr.c: expressions, parser.c: statements). Internal.
 */
#ifndef WEFT_TMPL_PARSE_H
#define WEFT_TMPL_PARSE_H

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

static inline const ttoken *tp_cur(parser *P) {
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}
static inline const ttoken *tp_peek(parser *P) {
    return &P->t[P->pos + 1 < P->n ? P->pos + 1 : P->n - 1];
}
static inline void tp_adv(parser *P) {
    if (P->pos + 1 < P->n) P->pos++;
}
static inline bool tp_is_op(const ttoken *t, int op) {
    return t->type == TK_OP && t->op == op;
}
static inline bool tp_is_name(const ttoken *t, const char *s) {
    return t->type == TK_NAME && strcmp(t->s, s) == 0;
}

int tp_fail(parser *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *tp_describe(const ttoken *t);
tnode *tp_mk(parser *P, int kind, int line);
int tp_push(parser *P, nlist *l, tnode *x);
int tp_expect_op(parser *P, int op, const char *what);
int tp_expect_type(parser *P, int type, const char *what);
tnode *tp_expression(parser *P, bool with_condexpr);
tnode *tp_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_paren,
                bool with_ns);
tnode *tp_primary(parser *P, bool with_ns);
tnode *tp_filter(parser *P, tnode *node, bool start_inline);
tnode *tp_assign_target(parser *P, const char *extra_end, bool with_ns);

#endif
