/* src/server/stopstr.c — the reply text pipeline shared by streamed and non-streamed replies:
 *   detokenized bytes → whole UTF-8 characters → stop strings → reasoning split → content / reasoning text.
 * Both reply kinds run the same pipeline, so concatenated stream deltas equal the non-streamed text.
 *
 * Stop strings are matched on the text of the reply (reasoning included). Text is held back while its end
 * could still be the start of a stop string (vLLM #3574: a streamed prefix of the stop string); when a stop
 * string completes, the reply ends right before it. The splitter holds back a possible "<think>"/"</think>"
 * prefix the same way. */
#include <string.h>
#include "internal.h"

static const char k_open[] = "<think>";
static const char k_close[] = "</think>";

void srv_textpipe_init(srv_textpipe *tp, const char *const *stops, int n_stops, bool split,
                       bool start_in_reasoning) {
    memset(tp, 0, sizeof *tp);
    tp->stops = stops;
    tp->n_stops = n_stops;
    tp->split = split;
    tp->mode = split ? (start_in_reasoning ? 1 : 0) : 2;
    tp->trim_ws = split && start_in_reasoning;
}

void srv_textpipe_free(srv_textpipe *tp) {
    srv_buf_free(&tp->held);
    srv_buf_free(&tp->held2);
    srv_buf_free(&tp->scratch);
    srv_buf_free(&tp->clean);
}

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of m (m_len bytes). */
static size_t suffix_prefix(const char *s, size_t n, const char *m, size_t m_len) {
    size_t k = n < m_len - 1 ? n : m_len - 1;
    for (; k > 0; k--)
        if (memcmp(s + n - k, m, k) == 0) return k;
    return 0;
}

/* Adds s to dst, dropping leading whitespace while *trim is set. */
static bool add_trim(srv_buf *dst, const char *s, size_t n, bool *trim) {
    if (*trim) {
        while (n && is_ws(*s)) s++, n--;
        if (!n) return true;
        *trim = false;
    }
    return srv_buf_add(dst, s, n);
}

/* The reasoning splitter: text released by the stop stage goes to content or reasoning. */
static bool split_feed(srv_textpipe *tp, const char *s, size_t n, srv_buf *content, srv_buf *reasoning) {
    if (tp->mode == 2) return add_trim(content, s, n, &tp->trim_ws);
    if (!srv_buf_add(&tp->held2, s, n)) return false;
    for (;;) {
        srv_buf *h = &tp->held2;
        if (tp->mode == 0) {
            size_t i = 0;
            while (i < h->len && is_ws(h->p[i])) i++;
            size_t rest = h->len - i, ol = sizeof k_open - 1;
            if (rest >= ol && memcmp(h->p + i, k_open, ol) == 0) {
                memmove(h->p, h->p + i + ol, rest - ol);
                h->len = rest - ol;
                tp->mode = 1;
                tp->trim_ws = true;
                continue;
            }
            if (rest < ol && memcmp(h->p + i, k_open, rest) == 0) return true; /* maybe "<think>" */
            tp->mode = 2;
            bool ok = srv_buf_add(content, h->p, h->len);
            h->len = 0;
            return ok;
        }
        if (tp->mode == 1) {
            const char *hit = h->len ? memmem(h->p, h->len, k_close, sizeof k_close - 1) : NULL;
            if (hit) {
                size_t pos = (size_t)(hit - h->p), after = pos + sizeof k_close - 1;
                if (!add_trim(reasoning, h->p, pos, &tp->trim_ws)) return false;
                size_t rest = h->len - after;
                tp->mode = 2;
                tp->trim_ws = true;
                bool ok = add_trim(content, h->p + after, rest, &tp->trim_ws);
                h->len = 0;
                return ok;
            }
            size_t keep = suffix_prefix(h->p, h->len, k_close, sizeof k_close - 1);
            if (!add_trim(reasoning, h->p, h->len - keep, &tp->trim_ws)) return false;
            memmove(h->p, h->p + h->len - keep, keep);
            h->len = keep;
            return true;
        }
        return true;
    }
}

/* Stop stage on whole characters. Returns true when a stop string matched. */
static bool stop_feed(srv_textpipe *tp, const char *s, size_t n, srv_buf *content, srv_buf *reasoning,
                      bool *oom) {
    if (!tp->n_stops) {
        if (!split_feed(tp, s, n, content, reasoning)) *oom = true;
        return false;
    }
    srv_buf *h = &tp->held;
    if (!srv_buf_add(h, s, n)) {
        *oom = true;
        return false;
    }
    size_t best = (size_t)-1;
    for (int i = 0; i < tp->n_stops; i++) {
        size_t sl = strlen(tp->stops[i]);
        const char *hit = h->len >= sl ? memmem(h->p, h->len, tp->stops[i], sl) : NULL;
        if (hit && (size_t)(hit - h->p) < best) best = (size_t)(hit - h->p);
    }
    if (best != (size_t)-1) {
        tp->stopped = true;
        if (!split_feed(tp, h->p, best, content, reasoning)) *oom = true;
        h->len = 0;
        return true;
    }
    size_t keep = 0;
    for (int i = 0; i < tp->n_stops; i++) {
        size_t k = suffix_prefix(h->p, h->len, tp->stops[i], strlen(tp->stops[i]));
        if (k > keep) keep = k;
    }
    if (!split_feed(tp, h->p, h->len - keep, content, reasoning)) *oom = true;
    memmove(h->p, h->p + h->len - keep, keep);
    h->len = keep;
    return false;
}

bool srv_textpipe_feed(srv_textpipe *tp, const char *s, size_t n, srv_buf *content, srv_buf *reasoning,
                       bool *oom) {
    *oom = false;
    if (tp->stopped || !n) return false;
    /* tail + s, then cut before a trailing sequence that is valid so far but incomplete */
    srv_buf *w = &tp->scratch;
    w->len = 0;
    if (!srv_buf_add(w, (const char *)tp->tail, (size_t)tp->n_tail) || !srv_buf_add(w, s, n)) {
        *oom = true;
        return false;
    }
    size_t cut = w->len;
    const unsigned char *u = (const unsigned char *)w->p;
    for (size_t back = 1; back <= 3 && back <= w->len; back++) {
        size_t p = w->len - back;
        if ((u[p] & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        if (srv_utf8_seq(u + p, back) < 0) cut = p;
        break;
    }
    tp->n_tail = (int)(w->len - cut);
    memcpy(tp->tail, w->p + cut, (size_t)tp->n_tail);
    /* Invalid bytes become U+FFFD so every delta is valid UTF-8 (JSON requires it). */
    srv_buf *clean = &tp->clean;
    clean->len = 0;
    if (!srv_buf_add_utf8_lossy(clean, w->p, cut)) {
        *oom = true;
        return false;
    }
    return clean->len ? stop_feed(tp, clean->p, clean->len, content, reasoning, oom) : false;
}

bool srv_textpipe_finish(srv_textpipe *tp, srv_buf *content, srv_buf *reasoning) {
    bool oom = false;
    if (!tp->stopped) {
        if (tp->n_tail) {
            tp->n_tail = 0;
            stop_feed(tp, "\xEF\xBF\xBD", 3, content, reasoning, &oom);
        }
        if (!tp->stopped && tp->held.len) {
            if (!split_feed(tp, tp->held.p, tp->held.len, content, reasoning)) oom = true;
            tp->held.len = 0;
        }
    }
    srv_buf *h = &tp->held2;
    if (h->len) {
        bool ok = true;
        if (tp->mode == 1)
            ok = add_trim(reasoning, h->p, h->len, &tp->trim_ws);
        else if (tp->mode == 0)
            ok = srv_buf_add(content, h->p, h->len);
        if (!ok) oom = true;
        h->len = 0;
    }
    return !oom;
}
