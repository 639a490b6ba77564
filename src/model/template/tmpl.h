/* tmpl.h — internals of the chat-template engine (weft_template). Not a public header.
 *
 * Memory: a compiled template keeps its AST and literals in one arena; each render allocates every value in a
 * per-render arena that is dropped at the end, so values are plain structs that may share (immutable)
 * substrings and lists without reference counting. Only namespace objects and loop records are mutated. */
#ifndef WEFT_TMPL_H
#define WEFT_TMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/template.h"

/* ---------------------------------------------------------------- arena + byte buffer (value.c) */
typedef struct ta_blk ta_blk;
typedef struct tarena {
    ta_blk *head;
    size_t total; /* bytes reserved so far */
    size_t limit; /* 0 = none */
} tarena;
void *ta_alloc(tarena *a, size_t n); /* zeroed; NULL past the limit or on OOM */
void ta_free_all(tarena *a);
char *ta_memdup(tarena *a, const char *s, size_t n); /* NUL-terminated copy */

typedef struct tbuf {
    char *p;
    size_t n, cap, limit; /* limit 0 = none */
    bool fail;            /* an append ran out of memory or past the limit */
} tbuf;
void tb_put(tbuf *b, const char *s, size_t n);
void tb_puts(tbuf *b, const char *s);
void tb_putc(tbuf *b, char c);
void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_free(tbuf *b);

/* ---------------------------------------------------------------- values (value.c) */
enum {
    TV_UNDEF,
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST,
    TV_DICT,
    TV_NS,
    TV_MACRO,
    TV_FUNC,
    TV_METHOD,
    TV_LOOP,
    TV_CYCLER,
};
#define TVF_TUPLE 1u /* TV_LIST: a tuple (repr and == differ from a list) */
#define TVF_SAFE  2u /* TV_STR: Markup (from |safe or |escape) */
#define TVF_GEN                                                                                              \
    4u                /* TV_LIST: a Python generator/iterator (map, select...): always truthy, no len(), not \
                         subscriptable, not JSON-serialisable, consumed by iteration */
#define TVF_ITEMS  8u /* TV_LIST: a dict_items view (dict.items()) */
#define TVF_KEYS   16u                                           /* TV_LIST: a dict_keys view */
#define TVF_VALUES 32u                                           /* TV_LIST: a dict_values view */
#define TVF_LAZY   (TVF_GEN | TVF_ITEMS | TVF_KEYS | TVF_VALUES) /* iterable, but not a sequence */
#define TVF_KIND   (TVF_TUPLE | TVF_LAZY)

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tmethod tmethod;
typedef struct tloop tloop;
typedef struct tnode tnode;

typedef struct tv {
    uint8_t t, flags;
    uint8_t utype; /* TV_UNDEF: the type of the object whose attribute/item was missing (TV_UNDEF = a name) */
    union {
        int64_t i; /* TV_BOOL (0/1), TV_INT, TV_FUNC (builtin id) */
        double f;
        struct {
            const char *p;
            size_t n;
        } s;             /* TV_STR; TV_UNDEF: the missing name (may be empty) */
        tlist *l;        /* TV_LIST, TV_CYCLER */
        tdict *d;        /* TV_DICT, TV_NS */
        const tnode *mc; /* TV_MACRO */
        tmethod *m;      /* TV_METHOD */
        tloop *lp;       /* TV_LOOP */
    } u;
} tv;

struct tlist {
    tv *v;
    size_t n, cap;
    size_t pos; /* cycler position */
};
struct tdict {
    tv *k, *v;
    size_t n, cap;
};
struct tmethod {
    tv self;
    const char *name;
};
struct tloop {
    tv *items;
    size_t n, i;
    int depth;
};

/* The state shared by every evaluation step of one render. */
typedef struct trender {
    tarena ar;
    tbuf *out;            /* current output sink */
    struct tframe *frame; /* innermost scope */
    struct tframe *root;  /* template-level scope (macro bodies resolve names here) */
    weft_err *err;
    const weft_template_opts *opts;
    int line;     /* line of the node being evaluated, for messages */
    int depth;    /* recursion depth (macros, nested expressions) */
    size_t steps; /* loop iterations so far */
    bool failed;  /* an error has been recorded in err */
} trender;

static inline tv tv_undef(void) {
    return (tv){.t = TV_UNDEF};
}
static inline tv tv_none(void) {
    return (tv){.t = TV_NONE};
}
static inline tv tv_bool(bool b) {
    return (tv){.t = TV_BOOL, .u.i = b ? 1 : 0};
}
static inline tv tv_int(int64_t i) {
    return (tv){.t = TV_INT, .u.i = i};
}
static inline tv tv_float(double f) {
    return (tv){.t = TV_FLOAT, .u.f = f};
}
static inline tv tv_strn(const char *p, size_t n) {
    return (tv){.t = TV_STR, .u.s = {p, n}};
}
tv tv_undef_named(const char *name, size_t n, int objtype);

/* Records a render error "chat template line N: ..." (first one wins) and returns -1. */
int tr_fail(trender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tr_oom(trender *r);
/* Records the jinja2 error for using an undefined value. */
int tr_undef_error(trender *r, const tv *u);

tlist *tl_new(trender *r, size_t cap);
int tl_push(trender *r, tlist *l, tv v);
tv tv_list(tlist *l, unsigned flags);
tdict *td_new(trender *r, size_t cap);
int td_set(trender *r, tdict *d, tv k, tv v); /* insert or replace, keeps first-insertion order */
const tv *td_get(const tdict *d, tv k);
const tv *td_gets(const tdict *d, const char *k, size_t n);

tv tv_str_copy(trender *r, const char *p, size_t n); /* arena copy; .t = TV_UNDEF on failure (r->failed) */
tv tv_str_concat(trender *r, tv a, tv b);

bool tv_truthy(const tv *v);
bool tv_equal(const tv *a, const tv *b);
/* Python ordering of a and b (numbers, strings, lists): sets *cmp to -1/0/1; -1 return = TypeError. */
int tv_compare(trender *r, const tv *a, const tv *b, int *cmp);
const char *tv_typename(int t, unsigned flags); /* Python type name for messages ("str", "dict"...) */
bool tv_is_number(const tv *v);                 /* int, float or bool */
double tv_num(const tv *v);

/* Python str() (soft_str) and repr() of a value, appended to b. */
void tv_to_str(tbuf *b, const tv *v);
void tv_repr(tbuf *b, const tv *v);
/* str() as a value (no copy for strings). */
tv tv_stringify(trender *r, const tv *v);

/* Converts a jansson value into a template value (in r's arena). */
int tv_from_json(trender *r, const json_t *j, tv *out);

/* ---------------------------------------------------------------- unicode helpers (ustr.c) */
/* Decodes one code point at s[*i] (advancing *i); invalid bytes decode as themselves (one byte). */
uint32_t u8_next(const char *s, size_t n, size_t *i);
size_t u8_encode(uint32_t cp, char out[4]);
size_t u8_len(const char *s, size_t n);                     /* code points */
size_t u8_offset(const char *s, size_t n, size_t cp_index); /* byte offset of a code point index */
bool u_isspace(uint32_t cp);                                /* Python str.isspace() */
uint32_t u_upper(uint32_t cp);
uint32_t u_lower(uint32_t cp);
bool u_iscased(uint32_t cp);
bool u_isprintable(uint32_t cp); /* Python str.isprintable() (approximation, see template.h) */

/* Python float repr (shortest round-trip), e.g. 1.0 -> "1.0", 1e16 -> "1e+16". */
void py_float_repr(tbuf *b, double f);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python does it. indent: NULL = none.
 * Returns -1 (with r's error set) for values JSON cannot hold. */
typedef struct tjson_opts {
    bool ensure_ascii;
    bool sort_keys;
    bool has_indent;
    const char *indent; /* the indent unit */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} tjson_opts;
int tv_to_json(trender *r, tbuf *b, const tv *v, const tjson_opts *o);

/* ---------------------------------------------------------------- lexer (lexer.c) */
enum {
    TK_EOF,
    TK_DATA,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
};
/* Operators (tk.op) */
enum {
    OP_NONE,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GE,
    OP_LT,
    OP_LE,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
};
typedef struct ttoken {
    uint8_t type, op;
    int line;
    const char *s; /* text (NAME, DATA, decoded STRING); NUL-terminated, in the template arena */
    size_t n;
    int64_t i;
    double f;
} ttoken;
typedef struct ttokens {
    ttoken *v;
    size_t n, cap;
} ttokens;
/* Tokenises normalised source (\n newlines, one trailing newline removed). -1 on error (err set). */
int tmpl_lex(tarena *a, const char *src, size_t n, ttokens *out, weft_err *err);

/* ---------------------------------------------------------------- AST (parser.c) */
enum {
    /* expressions */
    N_CONST,
    N_NAME,
    N_GETATTR,
    N_GETITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NOT,
    N_NEG,
    N_POS,
    N_BINOP,
    N_AND,
    N_OR,
    N_CONCAT,
    N_COMPARE,
    N_COND,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_NSREF,
    /* statements */
    N_DATA,
    N_PRINT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_BREAK,
    N_CONTINUE,
    N_WITH,
    N_FILTERBLOCK,
    N_BLOCK, /* a plain nested body ({% generation %}) */
};
/* N_COMPARE operators are stored per operand in ops[] using these codes (plus OP_EQ..OP_LE). */
enum { CMP_IN = 100, CMP_NOTIN = 101 };

struct tnode {
    uint16_t kind;
    uint16_t op; /* N_BINOP: OP_*; N_FILTER/N_TEST: builtin id */
    int line;
    tv val;            /* N_CONST; N_DATA text */
    const char *name;  /* NAME, GETATTR, FILTER, TEST, NSREF (namespace), MACRO */
    const char *name2; /* NSREF attribute */
    tnode *a, *b, *c;  /* children (meaning per kind, see parser.c) */
    tnode **items;     /* args, list items, body */
    size_t n;
    tnode **items2; /* kwarg values, else-body, dict values */
    size_t n2;
    const char **knames; /* kwarg names (n2) or macro parameter names (n3) */
    size_t n3;
    uint16_t *ops; /* N_COMPARE: operator per operand in items */
};

/* Parses tokens into a statement list (the template body). -1 on error (err set). */
int tmpl_parse(tarena *a, const ttokens *toks, tnode ***body, size_t *nbody, weft_err *err);

/* ---------------------------------------------------------------- builtins (filters.c, methods.c) */
int tmpl_filter_id(const char *name); /* -1 if unknown */
int tmpl_test_id(const char *name);   /* -1 if unknown */
typedef struct targs {
    tv *pos;
    size_t npos;
    tv *kw;
    const char **kwn;
    size_t nkw;
} targs;
int tmpl_apply_filter(trender *r, int id, const tv *in, const targs *a, tv *out);
int tmpl_apply_test(trender *r, int id, const tv *in, const targs *a, bool *out);
/* Calls a bound method (str/dict/list) or a global function value. */
int tmpl_call_method(trender *r, const tmethod *m, const targs *a, tv *out);
int tmpl_call_func(trender *r, int fn, const targs *a, tv *out);
int tmpl_global_id(const char *name, size_t n); /* builtin global function id or -1 */
bool tmpl_has_method(int type, const char *name, size_t n);
/* String helpers with Python str semantics (code-point based). */
enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE /* jinja2's |title */ };
int tmpl_str_case(trender *r, const tv *s, int mode, tv *out);
/* which: 1 = lstrip, 2 = rstrip, 3 = strip; chars NULL/None = whitespace */
int tmpl_str_strip(trender *r, const tv *s, const tv *chars, int which, tv *out);
int tmpl_str_replace(trender *r, const tv *s, const tv *old, const tv *rep, int64_t count, tv *out);
int tmpl_str_split(trender *r, const tv *s, const tv *sep, int64_t maxsplit, bool right, tv *out);
int tmpl_str_method(trender *r, const tv *self, const char *name, const targs *a, tv *out);
/* Attribute of a loop / cycler object. */
int tmpl_loop_attr(trender *r, const tv *obj, const char *name, size_t n, tv *out);
/* Argument helper: positional i or keyword `name`; NULL when absent. */
const tv *targ(const targs *a, size_t i, const char *name);
int targs_check(trender *r, const targs *a, size_t maxpos, const char *const *allowed, const char *what);

/* ---------------------------------------------------------------- evaluation (eval.c, exec.c) */
int tmpl_eval(trender *r, const tnode *e, tv *out);
/* Applies a filter chain whose innermost input is `base` (set blocks, filter blocks). */
int tmpl_eval_filter_chain(trender *r, const tnode *chain, const tv *base, tv *out);
/* Python printf-style formatting: fmt % args (args: a tuple, a dict for %(name)s, or one value). */
int tmpl_percent_format(trender *r, const tv *fmt, const tv *args, tv *out);
/* markupsafe.escape: & < > " ' -> entities; the result is Markup (TVF_SAFE). Safe input is returned as is. */
tv tmpl_html_escape(trender *r, const tv *s);
/* jinja2 environment.getattr / getitem. */
int tmpl_getattr(trender *r, const tv *obj, const char *name, size_t n, tv *out);
int tmpl_getitem(trender *r, const tv *obj, const tv *key, tv *out);
/* Iterates a value into a fresh list (strings by code point, dicts by key, Undefined as empty). */
int tmpl_iter(trender *r, const tv *v, tlist **out);
int tmpl_call_macro(trender *r, const tnode *m, const targs *a, tv *out);
int tmpl_exec_body(trender *r, tnode *const *body, size_t n);
int tmpl_binop(trender *r, int op, const tv *a, const tv *b, tv *out);
int tmpl_contains(trender *r, const tv *hay, const tv *needle, bool *out);

/* Scopes: a name -> value map chained to its parent. */
typedef struct tvar {
    const char *name;
    size_t n;
    tv v;
} tvar;
typedef struct tframe {
    struct tframe *parent;
    tvar inl[8];
    tvar *heap;
    size_t nv, cap;
} tframe;
void tf_init(tframe *f, tframe *parent);
void tf_drop(tframe *f);
int tf_set(trender *r, tframe *f, const char *name, size_t n, tv v);
const tv *tf_lookup(const tframe *f, const char *name, size_t n);

#define TMPL_MAX_DEPTH 200

#endif
