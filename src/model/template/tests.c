/* tests.c — jinja2 3.1 builtin tests (jinja2/tests.py and the operator aliases in jinja2/defaults.py). */
#include <math.h>
#include <string.h>

#include "tmpl.h"

enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_BOOLEAN,
    T_FALSE,
    T_TRUE,
    T_INTEGER,
    T_FLOAT,
    T_NUMBER,
    T_STRING,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_CALLABLE,
    T_SAMEAS,
    T_ESCAPED,
    T_IN,
    T_EQ,
    T_NE,
    T_LT,
    T_LE,
    T_GT,
    T_GE,
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_LOWER,
    T_UPPER,
    T_FILTER,
    T_TEST,
};

static const struct {
    const char *name;
    int id;
} TESTS[] = {
    {"defined", T_DEFINED},
    {"undefined", T_UNDEFINED},
    {"none", T_NONE},
    {"boolean", T_BOOLEAN},
    {"false", T_FALSE},
    {"true", T_TRUE},
    {"integer", T_INTEGER},
    {"float", T_FLOAT},
    {"number", T_NUMBER},
    {"string", T_STRING},
    {"mapping", T_MAPPING},
    {"iterable", T_ITERABLE},
    {"sequence", T_SEQUENCE},
    {"callable", T_CALLABLE},
    {"sameas", T_SAMEAS},
    {"escaped", T_ESCAPED},
    {"in", T_IN},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"==", T_EQ},
    {"ne", T_NE},
    {"!=", T_NE},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<", T_LT},
    {"le", T_LE},
    {"<=", T_LE},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">", T_GT},
    {"ge", T_GE},
    {">=", T_GE},
    {"odd", T_ODD},
    {"even", T_EVEN},
    {"divisibleby", T_DIVISIBLEBY},
    {"lower", T_LOWER},
    {"upper", T_UPPER},
    {"filter", T_FILTER},
    {"test", T_TEST},
};
#define NTESTS (sizeof TESTS / sizeof TESTS[0])

int tmpl_test_id(const char *name) {
    for (size_t i = 0; i < NTESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return (int)i;
    return -1;
}

static int need_arg(trender *r, const targs *a, const char *name, const tv **out) {
    *out = targ(a, 0, NULL);
    if (!*out) return tr_fail(r, "test '%s' needs an argument", name);
    return 0;
}

static bool case_test(const tv *v, bool want_lower) {
    bool cased = false;
    size_t i = 0;
    while (i < v->u.s.n) {
        uint32_t c = u8_next(v->u.s.p, v->u.s.n, &i);
        if (!u_iscased(c)) continue;
        cased = true;
        if (want_lower ? u_lower(c) != c : u_upper(c) != c) return false;
    }
    return cased;
}

int tmpl_apply_test(trender *r, int idx, const tv *v, const targs *a, bool *out) {
    if (idx < 0 || (size_t)idx >= NTESTS) return tr_fail(r, "internal: bad test id");
    const tv *x = NULL;
    int c = 0;
    switch (TESTS[idx].id) {
    case T_DEFINED:
        *out = v->t != TV_UNDEF;
        return 0;
    case T_UNDEFINED:
        *out = v->t == TV_UNDEF;
        return 0;
    case T_NONE:
        *out = v->t == TV_NONE;
        return 0;
    case T_BOOLEAN:
        *out = v->t == TV_BOOL;
        return 0;
    case T_FALSE:
        *out = v->t == TV_BOOL && !v->u.i;
        return 0;
    case T_TRUE:
        *out = v->t == TV_BOOL && v->u.i;
        return 0;
    case T_INTEGER:
        *out = v->t == TV_INT;
        return 0;
    case T_FLOAT:
        *out = v->t == TV_FLOAT;
        return 0;
    case T_NUMBER:
        *out = tv_is_number(v);
        return 0;
    case T_STRING:
        *out = v->t == TV_STR;
        return 0;
    case T_MAPPING:
        *out = v->t == TV_DICT;
        return 0;
    /* Undefined defines __iter__, __len__ and __getitem__, so jinja2 calls it iterable and a sequence. */
    case T_ITERABLE:
        *out = v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_UNDEF || v->t == TV_LOOP;
        return 0;
    case T_SEQUENCE:
        *out = v->t == TV_STR || (v->t == TV_LIST && !(v->flags & TVF_LAZY)) || v->t == TV_DICT ||
               v->t == TV_UNDEF;
        return 0;
    case T_CALLABLE: /* Undefined defines __call__ (it raises), so jinja2 calls it callable */
        *out = v->t == TV_MACRO || v->t == TV_FUNC || v->t == TV_METHOD || v->t == TV_UNDEF;
        return 0;
    case T_ESCAPED:
        *out = v->t == TV_STR && (v->flags & TVF_SAFE);
        return 0;
    case T_SAMEAS:
        if (need_arg(r, a, "sameas", &x)) return -1;
        /* `is` identity: None/True/False and small ints are singletons; containers compare by address */
        if (v->t != x->t)
            *out = false;
        else if (v->t == TV_LIST)
            *out = v->u.l == x->u.l;
        else if (v->t == TV_DICT || v->t == TV_NS)
            *out = v->u.d == x->u.d;
        else if (v->t == TV_STR)
            *out = v->u.s.p == x->u.s.p && v->u.s.n == x->u.s.n;
        else
            *out = tv_equal(v, x);
        return 0;
    case T_IN:
        if (need_arg(r, a, "in", &x)) return -1;
        return tmpl_contains(r, x, v, out);
    case T_EQ:
    case T_NE:
        if (need_arg(r, a, TESTS[idx].name, &x)) return -1;
        *out = tv_equal(v, x) == (TESTS[idx].id == T_EQ);
        return 0;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE:
        if (need_arg(r, a, TESTS[idx].name, &x) || tv_compare(r, v, x, &c)) return -1;
        switch (TESTS[idx].id) {
        case T_LT:
            *out = c < 0;
            break;
        case T_LE:
            *out = c <= 0;
            break;
        case T_GT:
            *out = c > 0;
            break;
        default:
            *out = c >= 0;
            break;
        }
        return 0;
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        tv m, two = tv_int(2), res;
        if (TESTS[idx].id == T_DIVISIBLEBY) {
            if (need_arg(r, a, "divisibleby", &x)) return -1;
        } else
            x = &two;
        if (tmpl_binop(r, OP_MOD, v, x, &res)) return -1;
        m = tv_int(TESTS[idx].id == T_ODD ? 1 : 0);
        *out = tv_equal(&res, &m);
        return 0;
    }
    case T_LOWER:
    case T_UPPER: {
        tv s = tv_stringify(r, v);
        if (r->failed) return -1;
        *out = case_test(&s, TESTS[idx].id == T_LOWER);
        return 0;
    }
    case T_FILTER:
    case T_TEST: { /* `'name' is filter`: the tested value is the name */
        char name[64] = "";
        if (v->t == TV_STR) memcpy(name, v->u.s.p, v->u.s.n < 63 ? v->u.s.n : 63);
        *out = TESTS[idx].id == T_FILTER ? tmpl_filter_id(name) >= 0 : tmpl_test_id(name) >= 0;
        return 0;
    }
    default:
        return tr_fail(r, "internal: unknown test");
    }
}
