/* test_server_client.c — see test_server_client.h. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "test_server_client.h"
#include "weft/common.h"

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static bool send_request(int fd, const char *method, const char *path, const char *extra, const char *body,
                         bool chunked) {
    char head[4096];
    size_t blen = body ? strlen(body) : 0;
    int n;
    if (chunked)
        n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                     method, path, extra ? extra : "");
    else if (body)
        n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, extra ? extra : "", blen);
    else
        n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
                     method, path, extra ? extra : "");
    if (!send_all(fd, head, (size_t)n)) return false;
    if (!body) return true;
    if (!chunked) return send_all(fd, body, blen) || true; /* the server may close early (413) */
    for (size_t off = 0; off < blen;) {
        size_t k = blen - off < 4000 ? blen - off : 4000;
        char sz[32];
        int m = snprintf(sz, sizeof sz, "%zx\r\n", k);
        if (!send_all(fd, sz, (size_t)m) || !send_all(fd, body + off, k) || !send_all(fd, "\r\n", 2))
            return true;
        off += k;
    }
    send_all(fd, "0\r\n\r\n", 5);
    return true;
}

static bool dechunk(const char *p, size_t n, http_resp *out) {
    out->body = malloc(n + 1);
    out->body_len = 0;
    size_t i = 0;
    while (i < n) {
        size_t sz = strtoul(p + i, NULL, 16);
        const char *nl = memchr(p + i, '\n', n - i);
        if (!nl) return false;
        i = (size_t)(nl - p) + 1;
        if (sz == 0) break;
        if (i + sz > n) return false;
        memcpy(out->body + out->body_len, p + i, sz);
        out->body_len += sz;
        i += sz + 2;
    }
    out->body[out->body_len] = 0;
    return true;
}

bool http_do(int port, const char *method, const char *path, const char *extra, const char *body,
             bool chunked, http_resp *out) {
    memset(out, 0, sizeof *out);
    int fd = connect_to(port);
    if (fd < 0) return false;
    send_request(fd, method, path, extra, body, chunked);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1) {
        free(buf);
        return false;
    }
    out->head = strndup(buf, (size_t)(end - buf));
    const char *b = end + 4;
    size_t blen = len - (size_t)(b - buf);
    char te[64];
    bool ok = true;
    if (http_header(out, "Transfer-Encoding", te, sizeof te) && !strcasecmp(te, "chunked"))
        ok = dechunk(b, blen, out);
    else {
        out->body = malloc(blen + 1);
        memcpy(out->body, b, blen);
        out->body[blen] = 0;
        out->body_len = blen;
    }
    free(buf);
    return ok;
}

bool http_post(int port, const char *path, const char *json, http_resp *out) {
    return http_do(port, "POST", path, NULL, json, false, out);
}

void http_resp_free(http_resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

const char *http_header(const http_resp *r, const char *name, char *buf, size_t cap) {
    size_t nl = strlen(name);
    for (const char *p = r->head; p && (p = strstr(p, "\r\n")); p += 2) {
        const char *h = p + 2;
        if (!strncasecmp(h, name, nl) && h[nl] == ':') {
            h += nl + 1;
            while (*h == ' ') h++;
            const char *e = strstr(h, "\r\n");
            size_t n = e ? (size_t)(e - h) : strlen(h);
            if (n >= cap) n = cap - 1;
            memcpy(buf, h, n);
            buf[n] = 0;
            return buf;
        }
    }
    return NULL;
}

int sse_events(const char *body, char ***out) {
    int n = 0, cap = 16;
    char **ev = malloc(sizeof *ev * (size_t)cap);
    for (const char *p = body; (p = strstr(p, "data: "));) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        if (n == cap) {
            char **ne = realloc(ev, sizeof *ev * (size_t)(cap *= 2));
            if (!ne) break;
            ev = ne;
        }
        ev[n++] = strndup(p, (size_t)(e - p));
        p = e + 2;
    }
    *out = ev;
    return n;
}

void sse_free(char **ev, int n) {
    for (int i = 0; i < n; i++) free(ev[i]);
    free(ev);
}

int http_send(int port, const char *method, const char *path, const char *extra, const char *body) {
    int fd = connect_to(port);
    if (fd < 0) return -1;
    if (!send_request(fd, method, path, extra, body, false)) {
        close(fd);
        return -1;
    }
    return fd;
}

bool http_read_until(int fd, const char *needle, double timeout_s) {
    char buf[65536];
    size_t len = 0;
    double end = weft_now() + timeout_s;
    while (weft_now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        if (len + 1 >= sizeof buf) len = 0;
        ssize_t k = recv(fd, buf + len, sizeof buf - len - 1, 0);
        if (k <= 0) return false;
        len += (size_t)k;
        buf[len] = 0;
        if (strstr(buf, needle)) return true;
    }
    return false;
}

char *http_read_all(int fd, double timeout_s) {
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    double end = weft_now() + timeout_s;
    while (weft_now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) break;
            buf = nb;
        }
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    buf[len] = 0;
    return buf;
}
