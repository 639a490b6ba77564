/* test_server_client.h — a tiny blocking HTTP/1.1 client over loopback for the server tests. */
#ifndef TEST_SERVER_CLIENT_H
#define TEST_SERVER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct http_resp {
    int status;
    char *head; /* status line + headers, NUL-terminated */
    char *body; /* de-chunked, NUL-terminated */
    size_t body_len;
} http_resp;

/* One request on a fresh connection (Connection: close), reading until the server closes. extra: more header
 * lines, each ending in "\r\n" (or NULL). chunked: send the body with chunked transfer encoding. Returns
 * false when the connection failed. */
bool http_do(int port, const char *method, const char *path, const char *extra, const char *body,
             bool chunked, http_resp *out);
/* POST JSON shortcut. */
bool http_post(int port, const char *path, const char *json, http_resp *out);
void http_resp_free(http_resp *r);
/* A header's value (copied into buf), or NULL. Case-insensitive name. */
const char *http_header(const http_resp *r, const char *name, char *buf, size_t cap);

/* Server-Sent Events of a body: each "data: X" payload, in order. Returns the count; *out malloc'd array of
 * malloc'd strings. */
int sse_events(const char *body, char ***out);
void sse_free(char **ev, int n);

/* Opens a connection and sends a request; returns the socket (or -1). */
int http_send(int port, const char *method, const char *path, const char *extra, const char *body);
/* Reads everything until the server closes or timeout_s passes (raw, not de-chunked); malloc'd. */
char *http_read_all(int fd, double timeout_s);
/* Reads until `needle` appears in what was read or timeout_s passes; returns true when it appeared. */
bool http_read_until(int fd, const char *needle, double timeout_s);

#endif
