/* ops.c — Python binary operators on template values (+ - * / // % **), printf-style `%` formatting and
 * markupsafe escaping (Markup + str escapes the plain operand, as markupsafe.Markup.__add__ does). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

#define MAX_REPEAT ((size_t)64 << 20)

tv tmpl_html_escape(trender *r, const tv *s) {
    if (s->flags & TVF_SAFE) return *s;
    tbuf b = {0};
    for (size_t i = 0; i < s->u.s.n; i++) {
        char c = s->u.s.p[i];
        switch (c) {
        case '&':
            tb_puts(&b, "&amp;");
            break;
        case '<':
            tb_puts(&b, "&lt;");
            break;
        case '>':
            tb_puts(&b, "&gt;");
            break;
        case '"':
            tb_puts(&b, "&#34;");
            break;
        case '\'':
            tb_puts(&b, "&#39;");
            break;
        default:
            tb_putc(&b, c);
        }
    }
    tv out = tv_undef();
    if (b.fail)
        tr_oom(r);
    else
        out = tv_str_copy(r, b.p ? b.p : "", b.n);
    tb_free(&b);
    out.flags |= TVF_SAFE;
    return out;
}

static int bad_operands(trender *r, const char *op, const tv *a, const tv *b) {
    if (a->t == TV_STR && !strcmp(op, "+"))
        return tr_fail(r, "can only concatenate str (not \"%s\") to str", tv_typename(b->t, b->flags));
    if (a->t == TV_LIST && !strcmp(op, "+"))
        return tr_fail(r, "can only concatenate %s (not \"%s\") to %s", tv_typename(a->t, a->flags),
                       tv_typename(b->t, b->flags), tv_typename(a->t, a->flags));
    return tr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, tv_typename(a->t, a->flags),
                   tv_typename(b->t, b->flags));
}

static bool is_intlike(const tv *v) {
    return v->t == TV_INT || v->t == TV_BOOL;
}

static int repeat(trender *r, const tv *seq, int64_t k, tv *out) {
    if (k < 0) k = 0;
    if (seq->t == TV_STR) {
        if (seq->u.s.n && (uint64_t)k > MAX_REPEAT / seq->u.s.n)
            return tr_fail(r, "string repetition too large");
        size_t tot = seq->u.s.n * (size_t)k;
        char *p = ta_alloc(&r->ar, tot + 1);
        if (!p) return tr_oom(r);
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * seq->u.s.n, seq->u.s.p, seq->u.s.n);
        *out = tv_strn(p, tot);
        out->flags = seq->flags & TVF_SAFE;
        return 0;
    }
    size_t n = seq->u.l->n;
    if (n && (uint64_t)k > (MAX_REPEAT / sizeof(tv)) / n) return tr_fail(r, "list repetition too large");
    tlist *l = tl_new(r, n * (size_t)k);
    if (!l) return -1;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++) l->v[l->n++] = seq->u.l->v[j];
    *out = tv_list(l, seq->flags & TVF_TUPLE);
    return 0;
}

/* Python float divmod (Objects/floatobject.c float_divmod). */
static void float_divmod(double vx, double wx, double *fdiv, double *fmodv) {
    double mod = fmod(vx, wx), div = (vx - mod) / wx, floordiv;
    if (mod != 0.0) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else
        mod = copysign(0.0, wx);
    if (div != 0.0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else
        floordiv = copysign(0.0, vx / wx);
    *fdiv = floordiv;
    *fmodv = mod;
}

static int int_pow(trender *r, int64_t base, int64_t e, tv *out) {
    int64_t acc = 1;
    while (e > 0) {
        if (e & 1) {
            if (__builtin_mul_overflow(acc, base, &acc)) return tr_fail(r, "integer overflow in **");
        }
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) return tr_fail(r, "integer overflow in **");
    }
    *out = tv_int(acc);
    return 0;
}

int tmpl_binop(trender *r, int op, const tv *a, const tv *b, tv *out) {
    static const char *const sym[] = {[OP_ADD] = "+",       [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/",
                                      [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**"};
    if (a->t == TV_UNDEF) return tr_undef_error(r, a);
    if (b->t == TV_UNDEF) return tr_undef_error(r, b);
    bool nums = tv_is_number(a) && tv_is_number(b), ints = is_intlike(a) && is_intlike(b);
    int64_t x = a->u.i, y = b->u.i, z;
    double fx = nums ? tv_num(a) : 0, fy = nums ? tv_num(b) : 0;
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) return tr_fail(r, "integer overflow in +");
            *out = tv_int(z);
            return 0;
        }
        if (nums) {
            *out = tv_float(fx + fy);
            return 0;
        }
        if (a->t == TV_STR && b->t == TV_STR) {
            tv l = *a, rr = *b;
            bool safe = (a->flags | b->flags) & TVF_SAFE;
            if (safe) {
                l = tmpl_html_escape(r, a);
                rr = tmpl_html_escape(r, b);
                if (r->failed) return -1;
            }
            *out = tv_str_concat(r, l, rr);
            if (safe) out->flags |= TVF_SAFE;
            return r->failed ? -1 : 0;
        }
        if (a->t == TV_LIST && b->t == TV_LIST && (a->flags & TVF_KIND) == (b->flags & TVF_KIND) &&
            !(a->flags & TVF_LAZY)) {
            tlist *l = tl_new(r, a->u.l->n + b->u.l->n);
            if (!l) return -1;
            for (size_t i = 0; i < a->u.l->n; i++) l->v[l->n++] = a->u.l->v[i];
            for (size_t i = 0; i < b->u.l->n; i++) l->v[l->n++] = b->u.l->v[i];
            *out = tv_list(l, a->flags & TVF_TUPLE);
            return 0;
        }
        return bad_operands(r, "+", a, b);
    case OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z)) return tr_fail(r, "integer overflow in -");
            *out = tv_int(z);
            return 0;
        }
        if (nums) {
            *out = tv_float(fx - fy);
            return 0;
        }
        return bad_operands(r, "-", a, b);
    case OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z)) return tr_fail(r, "integer overflow in *");
            *out = tv_int(z);
            return 0;
        }
        if (nums) {
            *out = tv_float(fx * fy);
            return 0;
        }
        if ((a->t == TV_STR || (a->t == TV_LIST && !(a->flags & TVF_LAZY))) && is_intlike(b))
            return repeat(r, a, b->u.i, out);
        if ((b->t == TV_STR || (b->t == TV_LIST && !(b->flags & TVF_LAZY))) && is_intlike(a))
            return repeat(r, b, a->u.i, out);
        return bad_operands(r, "*", a, b);
    case OP_DIV:
        if (!nums) return bad_operands(r, "/", a, b);
        if (fy == 0.0) return tr_fail(r, "division by zero");
        *out = tv_float(fx / fy);
        return 0;
    case OP_FLOORDIV:
    case OP_MOD:
        if (op == OP_MOD && a->t == TV_STR) return tmpl_percent_format(r, a, b, out);
        if (!nums) return bad_operands(r, sym[op], a, b);
        if (ints) {
            if (y == 0) return tr_fail(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return tr_fail(r, "integer overflow in //");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            *out = tv_int(op == OP_MOD ? m : q);
            return 0;
        }
        if (fy == 0.0) return tr_fail(r, op == OP_MOD ? "float modulo" : "float floor division by zero");
        {
            double d, m;
            float_divmod(fx, fy, &d, &m);
            *out = tv_float(op == OP_MOD ? m : d);
        }
        return 0;
    case OP_POW:
        if (!nums) return bad_operands(r, "**", a, b);
        if (ints && y >= 0) return int_pow(r, x, y, out);
        if (fx == 0.0 && fy < 0) return tr_fail(r, "0.0 cannot be raised to a negative power");
        if (fx < 0 && fy != floor(fy))
            return tr_fail(r, "negative number cannot be raised to a fractional power");
        *out = tv_float(pow(fx, fy));
        return 0;
    default:
        return tr_fail(r, "internal: unknown operator %d", op);
    }
}

/* ---------------------------------------------------------------- printf-style formatting */
int tmpl_percent_format(trender *r, const tv *fmt, const tv *args, tv *out) {
    const char *s = fmt->u.s.p;
    size_t n = fmt->u.s.n, argi = 0;
    bool tuple = args->t == TV_LIST && (args->flags & TVF_TUPLE);
    size_t nargs = tuple ? args->u.l->n : 1;
    tbuf b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (s[i] != '%') {
            tb_putc(&b, s[i]);
            continue;
        }
        if (++i >= n) {
            rc = tr_fail(r, "incomplete format");
            break;
        }
        const tv *arg = NULL;
        if (s[i] == '(') {
            size_t e = i + 1;
            while (e < n && s[e] != ')') e++;
            if (e >= n || args->t != TV_DICT) {
                rc = tr_fail(r, "format requires a mapping");
                break;
            }
            arg = td_gets(args->u.d, s + i + 1, e - i - 1);
            if (!arg) {
                rc = tr_fail(r, "KeyError: '%.*s'", (int)(e - i - 1), s + i + 1);
                break;
            }
            i = e + 1;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (i < n && strchr("-+ 0#", s[i]) && k < 8) spec[k++] = s[i++];
        while (i < n && s[i] >= '0' && s[i] <= '9' && k < 16) spec[k++] = s[i++];
        if (i < n && s[i] == '.') {
            spec[k++] = s[i++];
            while (i < n && s[i] >= '0' && s[i] <= '9' && k < 24) spec[k++] = s[i++];
        }
        if (i >= n) {
            rc = tr_fail(r, "incomplete format");
            break;
        }
        char conv = s[i];
        if (conv == '%') {
            tb_putc(&b, '%');
            continue;
        }
        if (!arg) {
            if (argi >= nargs) {
                rc = tr_fail(r, "not enough arguments for format string");
                break;
            }
            arg = tuple ? &args->u.l->v[argi] : args;
            argi++;
        }
        if (conv == 's' || conv == 'r') {
            tbuf t = {0};
            if (conv == 's')
                tv_to_str(&t, arg);
            else
                tv_repr(&t, arg);
            spec[k++] = '.';
            spec[k++] = '*';
            spec[k++] = 's';
            spec[k] = 0;
            /* width/precision count code points in Python; these templates use plain %s */
            tb_printf(&b, spec, (int)t.n, t.p ? t.p : "");
            tb_free(&t);
        } else if (strchr("dixXo", conv) && tv_is_number(arg)) {
            int64_t v = arg->t == TV_FLOAT ? (int64_t)arg->u.f : arg->u.i;
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'i' ? 'd' : conv;
            spec[k] = 0;
            tb_printf(&b, spec, (long long)v);
        } else if (strchr("feEgG", conv) && tv_is_number(arg)) {
            spec[k++] = conv;
            spec[k] = 0;
            tb_printf(&b, spec, tv_num(arg));
        } else
            rc = tr_fail(r, "unsupported format character '%c' or argument type", conv);
    }
    /* a lone non-mapping argument must be consumed, like every item of a tuple */
    if (!rc && argi < nargs && (tuple || args->t != TV_DICT))
        rc = tr_fail(r, "not all arguments converted during string formatting");
    if (!rc) {
        if (b.fail)
            rc = tr_oom(r);
        else {
            *out = tv_str_copy(r, b.p ? b.p : "", b.n);
            rc = r->failed ? -1 : 0;
        }
    }
    tb_free(&b);
    return rc;
}
