/* lexer.c — jinja2's lexer (jinja2/lexer.py, 3.1) for the default delimiters with trim_blocks=True and
 * lstrip_blocks=True, as transformers configures it.
 *
 * Whitespace rules reproduced here:
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` strip all after it.
 *  - trim_blocks: one newline right after `%}` or `#}` is dropped (not after `}}`, nor after `+%}`).
 *  - lstrip_blocks: spaces/tabs between the start of a line and `{%` / `{#` are dropped, unless the tag
 *    opens with `{%+`. A tag counts as at line start when its text has a newline before it, or when the
 *    previous match ended with a newline (jinja2's `line_starting`).
 * "Whitespace" is Python's str.isspace() set (the `\s` of jinja2's regexes). */
#include <stdio.h>
#include <string.h>

#include "tmpl.h"

typedef struct lexer {
    tarena *a;
    const char *s;
    size_t n, pos;
    int line;
    ttokens *out;
    weft_err *err;
} lexer;

static int lx_fail(lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lx_fail(lexer *L, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    weft_err_set(L->err, WEFT_EFORMAT, "chat template line %d: %s", L->line, msg);
    return -1;
}

static ttoken *lx_push(lexer *L, int type, int line) {
    ttokens *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        ttoken *v = ta_alloc(L->a, cap * sizeof *v);
        if (!v) return NULL;
        if (t->n) memcpy(v, t->v, t->n * sizeof *v);
        t->v = v;
        t->cap = cap;
    }
    ttoken *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->type = (uint8_t)type;
    k->line = line;
    return k;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Length of the whitespace run at s[i..n). */
static size_t ws_run(const char *s, size_t n, size_t i) {
    size_t st = i;
    while (i < n) {
        size_t j = i;
        if (!u_isspace(u8_next(s, n, &j))) break;
        i = j;
    }
    return i - st;
}

/* Byte length of s[0..n) without its trailing whitespace (Python str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        uint32_t c = u8_next(s, n, &i);
        if (!u_isspace(c)) keep = i;
    }
    return keep;
}

static int emit_data(lexer *L, const char *p, size_t n, int line) {
    if (n == 0) return 0;
    ttoken *t = lx_push(L, TK_DATA, line);
    if (!t) return lx_fail(L, "out of memory");
    t->s = p;
    t->n = n;
    return 0;
}

/* Applies the before-tag whitespace rule to text s[0..*n) for a tag with strip sign `sign`. */
static void strip_before(const char *s, size_t *n, char sign, bool is_var, bool line_starting) {
    if (sign == '-') {
        *n = rstrip_len(s, *n);
        return;
    }
    if (sign == '+' || is_var) return;
    size_t l = *n;
    while (l > 0 && s[l - 1] != '\n') l--;
    if (l == 0 && !line_starting) return;
    if (l < *n && ws_run(s, *n, l) == *n - l) *n = l;
}

/* Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at i; returns the end offset or 0. */
static size_t match_raw_begin(const char *s, size_t n, size_t i) {
    size_t p = i + 2;
    if (p < n && (s[p] == '-' || s[p] == '+')) p++;
    p += ws_run(s, n, p);
    if (p + 3 > n || memcmp(s + p, "raw", 3) != 0) return 0;
    p += 3;
    p += ws_run(s, n, p);
    if (p + 3 <= n && memcmp(s + p, "-%}", 3) == 0) return p + 3 + ws_run(s, n, p + 3);
    if (p + 2 <= n && memcmp(s + p, "%}", 2) == 0) return p + 2;
    return 0;
}

/* Raw body: finds `{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)`. Sets *tag (start of `{%`) and returns the end
 * offset, or 0 when absent. */
static size_t match_endraw(const char *s, size_t n, size_t from, size_t *tag, char *sign) {
    for (size_t i = from; i + 1 < n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t p = i + 2;
        char sg = 0;
        if (p < n && (s[p] == '-' || s[p] == '+')) sg = s[p++];
        p += ws_run(s, n, p);
        if (p + 6 > n || memcmp(s + p, "endraw", 6) != 0) continue;
        p += 6;
        p += ws_run(s, n, p);
        size_t end = 0;
        if (p + 3 <= n && memcmp(s + p, "+%}", 3) == 0)
            end = p + 3;
        else if (p + 3 <= n && memcmp(s + p, "-%}", 3) == 0)
            end = p + 3 + ws_run(s, n, p + 3);
        else if (p + 2 <= n && memcmp(s + p, "%}", 2) == 0)
            end = p + 2 + (p + 2 < n && s[p + 2] == '\n');
        if (!end) continue;
        *tag = i;
        *sign = sg;
        return end;
    }
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python "unicode-escape" decoding of a string literal body. */
static int unescape(lexer *L, const char *s, size_t n, ttoken *t) {
    char *o = ta_alloc(L->a, n + 1);
    if (!o) return lx_fail(L, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i++];
            continue;
        }
        char c = s[i + 1];
        i += 2;
        uint32_t cp;
        int digits = 0;
        switch (c) {
        case '\n':
            continue;
        case '\\':
            o[k++] = '\\';
            continue;
        case '\'':
            o[k++] = '\'';
            continue;
        case '"':
            o[k++] = '"';
            continue;
        case 'a':
            o[k++] = '\a';
            continue;
        case 'b':
            o[k++] = '\b';
            continue;
        case 'f':
            o[k++] = '\f';
            continue;
        case 'n':
            o[k++] = '\n';
            continue;
        case 'r':
            o[k++] = '\r';
            continue;
        case 't':
            o[k++] = '\t';
            continue;
        case 'v':
            o[k++] = '\v';
            continue;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        case 'N':
            return lx_fail(L, "\\N{...} escapes are not supported");
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                char enc[4];
                size_t m = u8_encode(cp, enc);
                memcpy(o + k, enc, m); /* an octal escape (<= 3 bytes) is never longer than its source */
                k += m;
                continue;
            }
            o[k++] = '\\'; /* unknown escapes stay as written */
            o[k++] = c;
            continue;
        }
        cp = 0;
        for (int d = 0; d < digits; d++) {
            int h = i < n ? hexval(s[i]) : -1;
            if (h < 0) return lx_fail(L, "truncated \\%cXX escape in string literal", c);
            cp = cp * 16 + (uint32_t)h;
            i++;
        }
        if (cp > 0x10ffff) return lx_fail(L, "illegal Unicode character in string literal");
        char enc[4];
        size_t m = u8_encode(cp, enc);
        memcpy(o + k, enc, m); /* \xHH (4 bytes of source) -> at most 2 bytes, \u -> 3, \U -> 4 */
        k += m;
    }
    o[k] = 0;
    t->s = o;
    t->n = k;
    return 0;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_name0(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* `(\d+_)*\d+` at i: returns the end or i when absent. */
static size_t digits_us(const char *s, size_t n, size_t i) {
    size_t p = i, end = i;
    while (p < n && is_digit(s[p])) {
        while (p < n && is_digit(s[p])) p++;
        end = p;
        if (p + 1 < n && s[p] == '_' && is_digit(s[p + 1]))
            p++;
        else
            break;
    }
    return end;
}

/* Number token (float_re is tried before integer_re, as in jinja2). Returns 0 if none matched. */
static int lex_number(lexer *L, size_t *len) {
    const char *s = L->s;
    size_t n = L->n, i = L->pos;
    *len = 0;
    if (!is_digit(s[i])) return 0;
    size_t ip = digits_us(s, n, i);
    if (!(i > 0 && s[i - 1] == '.')) { /* float: (?<!\.) digits ( (.digits)? e[+-]?digits | .digits ) */
        size_t p = ip, fe = 0;
        if (p < n && s[p] == '.' && p + 1 < n && is_digit(s[p + 1])) {
            size_t q = digits_us(s, n, p + 1);
            fe = q;
            p = q;
        }
        if (p < n && (s[p] == 'e' || s[p] == 'E')) {
            size_t q = p + 1;
            if (q < n && (s[q] == '+' || s[q] == '-')) q++;
            if (q < n && is_digit(s[q])) fe = digits_us(s, n, q);
        }
        if (fe) {
            char buf[128];
            size_t k = 0;
            for (size_t j = i; j < fe && k < sizeof buf - 1; j++)
                if (s[j] != '_') buf[k++] = s[j];
            buf[k] = 0;
            ttoken *t = lx_push(L, TK_FLOAT, L->line);
            if (!t) return lx_fail(L, "out of memory");
            t->f = strtod(buf, NULL);
            *len = fe - i;
            return 1;
        }
    }
    int base = 10;
    size_t p = i, st;
    if (s[i] == '0' && i + 1 < n &&
        (s[i + 1] == 'x' || s[i + 1] == 'X' || s[i + 1] == 'o' || s[i + 1] == 'O' || s[i + 1] == 'b' ||
         s[i + 1] == 'B')) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        p = i + 2;
    }
    st = p;
    uint64_t v = 0;
    bool any = false, ovf = false;
    while (p < n) {
        if (s[p] == '_' && p + 1 < n && any) {
            p++;
            continue;
        }
        int d = hexval(s[p]);
        if (d < 0 || d >= base) break;
        if (base == 10 && s[i] == '0' && d != 0) break; /* 0(_?0)* */
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) ovf = true;
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
        p++;
    }
    if (base != 10 && p == st) { /* "0x" with no digits: the integer is just "0" */
        p = i + 1;
        v = 0;
    }
    if (ovf || v > (uint64_t)INT64_MAX) return lx_fail(L, "integer literal too large");
    ttoken *t = lx_push(L, TK_INT, L->line);
    if (!t) return lx_fail(L, "out of memory");
    t->i = (int64_t)v;
    *len = p - i;
    return 1;
}

static const struct {
    const char *s;
    uint8_t op;
} OPS[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {">=", OP_GE},
    {"<=", OP_LE},       {"+", OP_ADD},    {"-", OP_SUB},      {"/", OP_DIV},      {"*", OP_MUL},
    {"%", OP_MOD},       {"~", OP_TILDE},  {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN},
    {")", OP_RPAREN},    {"{", OP_LBRACE}, {"}", OP_RBRACE},   {">", OP_GT},       {"<", OP_LT},
    {"=", OP_ASSIGN},    {".", OP_DOT},    {":", OP_COLON},    {"|", OP_PIPE},     {",", OP_COMMA},
    {";", OP_SEMICOLON},
};

/* Tokens inside {{ }} or {% %} up to the closing delimiter. Returns 0 and sets *line_starting. */
static int lex_tag(lexer *L, bool is_block, bool *line_starting) {
    char stack[256];
    int sp = 0;
    const char *s = L->s;
    size_t n = L->n;
    while (L->pos < n) {
        size_t i = L->pos;
        if (sp == 0) {
            size_t end = 0;
            bool trim = false;
            if (is_block) {
                if (i + 3 <= n && memcmp(s + i, "+%}", 3) == 0)
                    end = i + 3;
                else if (i + 3 <= n && memcmp(s + i, "-%}", 3) == 0)
                    end = i + 3 + ws_run(s, n, i + 3);
                else if (i + 2 <= n && memcmp(s + i, "%}", 2) == 0) {
                    end = i + 2;
                    trim = true;
                }
            } else {
                if (i + 3 <= n && memcmp(s + i, "-}}", 3) == 0)
                    end = i + 3 + ws_run(s, n, i + 3);
                else if (i + 2 <= n && memcmp(s + i, "}}", 2) == 0)
                    end = i + 2;
            }
            if (end) {
                if (trim && end < n && s[end] == '\n') end++; /* trim_blocks */
                if (!lx_push(L, is_block ? TK_BLOCK_END : TK_VAR_END, L->line))
                    return lx_fail(L, "out of memory");
                L->line += count_nl(s + i, end - i);
                L->pos = end;
                *line_starting = s[end - 1] == '\n';
                return 0;
            }
        }
        size_t w = ws_run(s, n, i);
        if (w) {
            L->line += count_nl(s + i, w);
            L->pos += w;
            continue;
        }
        size_t len;
        int r = lex_number(L, &len);
        if (r < 0) return -1;
        if (r > 0) {
            L->pos += len;
            continue;
        }
        if (is_name0(s[i])) {
            size_t p = i;
            while (p < n && (is_name0(s[p]) || is_digit(s[p]))) p++;
            ttoken *t = lx_push(L, TK_NAME, L->line);
            if (!t || !(t->s = ta_memdup(L->a, s + i, p - i))) return lx_fail(L, "out of memory");
            t->n = p - i;
            L->pos = p;
            continue;
        }
        if (s[i] == '\'' || s[i] == '"') {
            char q = s[i];
            size_t p = i + 1;
            while (p < n && s[p] != q) p += (s[p] == '\\' && p + 1 < n) ? 2 : 1;
            if (p >= n) return lx_fail(L, "unexpected char '%c' (unterminated string literal)", q);
            ttoken *t = lx_push(L, TK_STRING, L->line);
            if (!t) return lx_fail(L, "out of memory");
            if (unescape(L, s + i + 1, p - i - 1, t)) return -1;
            L->line += count_nl(s + i, p + 1 - i);
            L->pos = p + 1;
            continue;
        }
        bool found = false;
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
            size_t m = strlen(OPS[k].s);
            if (i + m > n || memcmp(s + i, OPS[k].s, m) != 0) continue;
            char c = OPS[k].s[0];
            if (m == 1 && (c == '{' || c == '(' || c == '[')) {
                if (sp >= (int)sizeof stack) return lx_fail(L, "brackets nested too deeply");
                stack[sp++] = c == '{' ? '}' : c == '(' ? ')' : ']';
            } else if (m == 1 && (c == '}' || c == ')' || c == ']')) {
                if (sp == 0) return lx_fail(L, "unexpected '%c'", c);
                if (stack[sp - 1] != c) return lx_fail(L, "unexpected '%c', expected '%c'", c, stack[sp - 1]);
                sp--;
            }
            ttoken *t = lx_push(L, TK_OP, L->line);
            if (!t) return lx_fail(L, "out of memory");
            t->op = OPS[k].op;
            t->s = OPS[k].s;
            t->n = m;
            L->pos += m;
            found = true;
            break;
        }
        if (!found) {
            if ((unsigned char)s[i] >= 0x80)
                return lx_fail(L, "unexpected character in expression (non-ASCII)");
            return lx_fail(L, "unexpected char '%c' at %zu", s[i], i);
        }
    }
    return 0; /* end of input inside a tag: the parser reports the missing delimiter */
}

int tmpl_lex(tarena *a, const char *src, size_t n, ttokens *out, weft_err *err) {
    lexer L = {.a = a, .s = src, .n = n, .pos = 0, .line = 1, .out = out, .err = err};
    bool line_starting = true;
    while (L.pos < n) {
        size_t q = L.pos;
        while (q + 1 < n && !(src[q] == '{' && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')))
            q++;
        if (q + 1 >= n) {
            if (emit_data(&L, src + L.pos, n - L.pos, L.line)) return -1;
            break;
        }
        char kind = src[q + 1];
        char sign = (q + 2 < n && (src[q + 2] == '-' || src[q + 2] == '+')) ? src[q + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw_begin(src, n, q) : 0;
        size_t tlen = q - L.pos;
        int text_line = L.line;
        strip_before(src + L.pos, &tlen, sign, kind == '{', line_starting);
        if (emit_data(&L, src + L.pos, tlen, text_line)) return -1;
        L.line += count_nl(src + L.pos, q - L.pos);
        line_starting = false;
        if (raw_end) {
            size_t tag;
            char rs;
            L.line += count_nl(src + q, raw_end - q);
            size_t end = match_endraw(src, n, raw_end, &tag, &rs);
            if (!end) return lx_fail(&L, "Missing end of raw directive");
            size_t rl = tag - raw_end;
            strip_before(src + raw_end, &rl, rs, false, src[raw_end - 1] == '\n');
            if (emit_data(&L, src + raw_end, rl, L.line)) return -1;
            L.line += count_nl(src + raw_end, end - raw_end);
            L.pos = end;
            line_starting = src[end - 1] == '\n';
            continue;
        }
        L.pos = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t p = L.pos, end = 0;
            for (; p < n; p++) {
                if (p + 3 <= n && memcmp(src + p, "+#}", 3) == 0)
                    end = p + 3;
                else if (p + 3 <= n && memcmp(src + p, "-#}", 3) == 0)
                    end = p + 3 + ws_run(src, n, p + 3);
                else if (p + 2 <= n && memcmp(src + p, "#}", 2) == 0)
                    end = p + 2 + (p + 2 < n && src[p + 2] == '\n');
                if (end) break;
            }
            if (!end) return lx_fail(&L, "Missing end of comment tag");
            L.line += count_nl(src + L.pos, end - L.pos);
            L.pos = end;
            line_starting = src[end - 1] == '\n';
            continue;
        }
        bool is_block = kind == '%';
        if (!lx_push(&L, is_block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, L.line))
            return lx_fail(&L, "out of memory");
        if (lex_tag(&L, is_block, &line_starting)) return -1;
    }
    if (!lx_push(&L, TK_EOF, L.line)) return lx_fail(&L, "out of memory");
    return 0;
}
