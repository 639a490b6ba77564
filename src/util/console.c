/* console.c — serialized stderr lines with an in-place status line on a TTY (weft/console.h).
 *
 * Terminal control: "\r" returns to column 0 and "\033[K" (ECMA-48 EL, erase in line, parameter 0) erases
 * from the cursor to the end of the row. The status row is always redrawn as "\r" text "\033[K", so a
 * shorter status never leaves the tail of a longer one behind, and a log line is preceded by "\r\033[K" so
 * it starts on an empty row. */
#include "weft/console.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

static const char k_clear[] = "\r\033[K";
static const char k_erase[] = "\033[K";

bool weft_console_live_wanted(int fd) {
    /* TERM=dumb (Emacs shell buffers, some CI consoles) is a TTY without cursor control: "\033[K" would
     * show as text, so it gets plain lines. */
    const char *term = getenv("TERM");
    return isatty(fd) && !getenv("WEFT_NO_LIVE") && !(term && !strcmp(term, "dumb"));
}

void weft_console_init(weft_console *c, FILE *f, bool live) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->f = f;
    c->live = live;
}

void weft_console_destroy(weft_console *c) {
    weft_console_finish(c);
    pthread_mutex_destroy(&c->mu);
}

void weft_console_write(weft_console *c, const char *s, size_t n) {
    pthread_mutex_lock(&c->mu);
    if (c->shown) fwrite(k_clear, 1, sizeof k_clear - 1, c->f);
    if (n) fwrite(s, 1, n, c->f);
    if (!n || s[n - 1] != '\n') fputc('\n', c->f);
    /* The cursor is at column 0 of a fresh row: the status goes back under the line just written. */
    if (c->shown) {
        fwrite(c->status, 1, c->status_len, c->f);
        fwrite(k_erase, 1, sizeof k_erase - 1, c->f);
    }
    fflush(c->f);
    pthread_mutex_unlock(&c->mu);
}

void weft_console_vprintf(weft_console *c, const char *fmt, va_list ap) {
    char line[1024];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    weft_console_write(c, line, len);
}

void weft_console_printf(weft_console *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_console_vprintf(c, fmt, ap);
    va_end(ap);
}

void weft_console_status(weft_console *c, const char *text) {
    pthread_mutex_lock(&c->mu);
    if (!c->live) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    size_t n = strlen(text);
    if (n > sizeof c->status - 1) n = sizeof c->status - 1;
    /* A newline in the text would leave a row behind at every redraw: it ends the status text. */
    const char *nl = memchr(text, '\n', n);
    if (nl) n = (size_t)(nl - text);
    memcpy(c->status, text, n);
    c->status[n] = 0;
    c->status_len = n;
    char buf[sizeof k_clear + WEFT_CONSOLE_STATUS_MAX + sizeof k_erase];
    size_t k = 0;
    buf[k++] = '\r';
    memcpy(buf + k, c->status, n);
    k += n;
    memcpy(buf + k, k_erase, sizeof k_erase - 1);
    k += sizeof k_erase - 1;
    fwrite(buf, 1, k, c->f);
    fflush(c->f);
    c->shown = n > 0;
    pthread_mutex_unlock(&c->mu);
}

void weft_console_finish(weft_console *c) {
    pthread_mutex_lock(&c->mu);
    if (c->live && c->shown) {
        fputc('\n', c->f);
        fflush(c->f);
    }
    c->live = c->shown = false;
    pthread_mutex_unlock(&c->mu);
}

bool weft_console_is_live(weft_console *c) {
    pthread_mutex_lock(&c->mu);
    bool live = c->live;
    pthread_mutex_unlock(&c->mu);
    return live;
}

int weft_console_columns(const weft_console *c) {
    struct winsize ws;
    int fd = fileno(c->f);
    if (fd < 0 || !isatty(fd)) return 0;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    /* A terminal that reports no size (serial consoles, `docker run -t` before its first resize): a status
     * line of unbounded width would wrap, and every redraw would leave a row behind. $COLUMNS, else 80. */
    const char *env = getenv("COLUMNS");
    char *end = NULL;
    long v = env ? strtol(env, &end, 10) : 0;
    return env && *env && !*end && v > 0 && v <= 4096 ? (int)v : 80;
}
