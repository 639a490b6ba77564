/* weft/console.h — one terminal line discipline for stderr: whole log lines plus, on a TTY, one status line
 * that is redrawn in place (SPEC §2.1: "a live one-line throughput status on a TTY").
 *
 * Every writer of the stream goes through one weft_console, whose mutex orders them: a log line first clears
 * the status line (carriage return + erase to end of line), is written whole, and the status is redrawn
 * under it, so log lines are never cut by the status text. The status line is drawn only when the console
 * was made live (the caller decides: a TTY and no WEFT_NO_LIVE, see weft_console_live_wanted); otherwise it
 * is a plain serialized line writer and writes exactly the bytes it is given.
 *
 * Threads: every function may be called from any thread once weft_console_init returned. Nothing here
 * allocates: the status text lives in a fixed buffer inside the struct. Writers that bypass the console
 * (a library printing straight to stderr) can still land after the status text on the same row; the next
 * redraw starts a fresh row only after a line written through the console. */
#ifndef WEFT_CONSOLE_H
#define WEFT_CONSOLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CONSOLE_STATUS_MAX 512 /* bytes of status text kept (longer text is cut) */

typedef struct weft_console {
    pthread_mutex_t mu;
    FILE *f;    /* the stream written (borrowed) */
    bool live;  /* the status line may be drawn (cleared by weft_console_finish) */
    bool shown; /* status text is on screen, the cursor at its end */
    size_t status_len;
    char status[WEFT_CONSOLE_STATUS_MAX];
} weft_console;

/* Whether a live status line belongs on file descriptor fd: isatty(fd), WEFT_NO_LIVE unset and TERM not
 * "dumb" (the same rule as the weight-loading progress bar). */
bool weft_console_live_wanted(int fd);

/* Initializes c over f (borrowed, must outlive c). live: draw the status line (only pass true for a TTY). */
void weft_console_init(weft_console *c, FILE *f, bool live);

/* Ends the status line (weft_console_finish) and destroys the mutex. */
void weft_console_destroy(weft_console *c);

/* Writes s[0..n): one or more whole lines (a missing final '\n' is added). When the status line is shown it
 * is erased first and redrawn after. Flushes. */
void weft_console_write(weft_console *c, const char *s, size_t n);

/* weft_console_write of a formatted line (cut at 1024 bytes). */
void weft_console_printf(weft_console *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void weft_console_vprintf(weft_console *c, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Replaces the status text (ASCII, no newline; cut at WEFT_CONSOLE_STATUS_MAX - 1 bytes) and redraws it in
 * place: "\r" text "\033[K". A no-op unless the console is live. The caller keeps the text narrower than
 * the terminal (weft_console_columns): a wrapped line cannot be redrawn in place. */
void weft_console_status(weft_console *c, const char *text);

/* Stops the status line for good: when one is shown, it stays as drawn and gets its final '\n' (so what
 * follows, the shell prompt included, starts on a clean row). Later weft_console_status calls do nothing.
 * Idempotent. */
void weft_console_finish(weft_console *c);

/* Whether the status line is still enabled (live and not finished). */
bool weft_console_is_live(weft_console *c);

/* Columns of the terminal behind the stream; 0 when it is not a TTY. A TTY that reports a width of 0 gets
 * $COLUMNS (a positive integer up to 4096), else 80. */
int weft_console_columns(const weft_console *c);

#ifdef __cplusplus
}
#endif
#endif
