/* test_break_console.c — regressions found by breaking `weft serve`'s live status line (weft/console.h):
 * a terminal that reports a width of 0 gets $COLUMNS or 80 (an unbounded status line wraps and every redraw
 * leaves a row behind), and TERM=dumb gets no cursor control. The terminal is a pseudo-terminal pair. */
#define _XOPEN_SOURCE 600
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include "check.h"
#include "weft/console.h"

/* Opens a pseudo-terminal: *master and the slave side as a stdio stream (NULL on failure). */
static FILE *open_pty(int *master) {
    *master = posix_openpt(O_RDWR | O_NOCTTY);
    if (*master < 0) return NULL;
    const char *name = grantpt(*master) == 0 && unlockpt(*master) == 0 ? ptsname(*master) : NULL;
    int fd = name ? open(name, O_RDWR | O_NOCTTY) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        close(*master);
    }
    return f;
}

static void set_width(FILE *f, unsigned short cols) {
    struct winsize ws = {.ws_row = 24, .ws_col = cols};
    CHECK(ioctl(fileno(f), TIOCSWINSZ, &ws) == 0);
}

static void test_columns(void) {
    int master = -1;
    FILE *f = open_pty(&master);
    if (!f) {
        printf("test_break_console: no pseudo-terminal here; columns not tested\n");
        return;
    }
    weft_console c;
    weft_console_init(&c, f, true);
    set_width(f, 120);
    CHECK_EQ_INT(weft_console_columns(&c), 120);
    set_width(f, 0); /* a terminal that reports no size */
    unsetenv("COLUMNS");
    CHECK_EQ_INT(weft_console_columns(&c), 80);
    setenv("COLUMNS", "57", 1);
    CHECK_EQ_INT(weft_console_columns(&c), 57);
    setenv("COLUMNS", "wide", 1);
    CHECK_EQ_INT(weft_console_columns(&c), 80);
    setenv("COLUMNS", "-3", 1);
    CHECK_EQ_INT(weft_console_columns(&c), 80);
    set_width(f, 33); /* the terminal's own size wins over $COLUMNS */
    CHECK_EQ_INT(weft_console_columns(&c), 33);
    unsetenv("COLUMNS");

    /* The live rule: a TTY, WEFT_NO_LIVE unset, TERM not dumb. */
    unsetenv("WEFT_NO_LIVE");
    setenv("TERM", "xterm", 1);
    CHECK(weft_console_live_wanted(fileno(f)));
    setenv("TERM", "dumb", 1);
    CHECK(!weft_console_live_wanted(fileno(f)));
    unsetenv("TERM");
    CHECK(weft_console_live_wanted(fileno(f)));
    setenv("WEFT_NO_LIVE", "1", 1);
    CHECK(!weft_console_live_wanted(fileno(f)));
    unsetenv("WEFT_NO_LIVE");
    weft_console_destroy(&c);
    fclose(f);
    close(master);

    FILE *file = tmpfile(); /* not a terminal: no width, never live */
    CHECK(file != NULL);
    if (!file) return;
    weft_console_init(&c, file, false);
    CHECK_EQ_INT(weft_console_columns(&c), 0);
    CHECK(!weft_console_live_wanted(fileno(file)));
    weft_console_destroy(&c);
    fclose(file);
}

int main(void) {
    test_columns();
    return check_report("test_break_console");
}
