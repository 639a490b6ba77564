/* src/server/util.c — byte buffers, UTF-8 checks, OpenAI error objects, seed and token_sha (SPEC §5.3-5.4).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

bool srv_buf_reserve(srv_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

bool srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (!srv_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool srv_buf_adds(srv_buf *b, const char *s) {
    return srv_buf_add(b, s, strlen(s));
}

bool srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    bool ok = n >= 0 && srv_buf_reserve(b, (size_t)n);
    if (ok) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return ok;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* UTF-8 per RFC 3629 / Unicode Table 3-7: no overlongs, no surrogates, nothing past U+10FFFF. */
int srv_utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c == 0xE0)
        len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC)
        len = 3;
    else if (c == 0xED)
        len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF)
        len = 3;
    else if (c == 0xF0)
        len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
        len = 4;
    else if (c == 0xF4)
        len = 4, hi = 0x8F;
    else
        return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -(len - i);
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return 0;
    }
    return len;
}

bool srv_buf_add_utf8_lossy(srv_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        int k = srv_utf8_seq(u + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (!srv_buf_add(b, s + run, i - run)) return false;
        /* The maximal invalid subpart: the lead byte plus the continuation bytes that were still valid. */
        size_t skip = 1;
        if (k < 0)
            skip = n - i;
        else {
            while (i + skip < n && skip < 4) {
                int kk = srv_utf8_seq(u + i, skip + 1);
                if (kk < 0)
                    skip++;
                else
                    break;
            }
            /* skip bytes formed a valid-so-far prefix that then broke */
        }
        if (!srv_buf_add(b, "\xEF\xBF\xBD", 3)) return false;
        i += skip;
        run = i;
    }
    return srv_buf_add(b, s + run, n - run);
}

bool srv_fail(srv_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->code = code;
    e->retry_after = 0;
    switch (status) {
    case 401:
        e->type = "authentication_error";
        break;
    case 500:
        e->type = "server_error";
        break;
    case 503:
        e->type = "server_error";
        break;
    default:
        e->type = "invalid_request_error";
        break;
    }
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

bool srv_json_string(json_t *o, const char *key, const char *s, size_t n) {
    srv_buf b = {0};
    if (!srv_buf_add_utf8_lossy(&b, s ? s : "", s ? n : 0)) return false;
    json_t *v = json_stringn(b.p ? b.p : "", b.len);
    srv_buf_free(&b);
    return v && json_object_set_new(o, key, v) == 0;
}

char *srv_error_json(const srv_error *e) {
    json_t *in = json_object();
    srv_json_string(in, "message", e->message, strlen(e->message));
    json_object_set_new(in, "type", json_string(e->type ? e->type : "invalid_request_error"));
    if (e->param[0])
        srv_json_string(in, "param", e->param, strlen(e->param));
    else
        json_object_set_new(in, "param", json_null());
    json_object_set_new(in, "code", e->code ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", in);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}
