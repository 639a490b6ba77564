/* check.h — the unit tests' tiny assertion kit. A failed CHECK prints file:line and the expression, counts a
 * failure and continues; main returns check_report() (non-zero when anything failed). */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H

#include <stdio.h>
#include <string.h>
#include <math.h>

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        check_count_++;                                                                                      \
        if (!(cond)) {                                                                                       \
            check_failures_++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                         \
        }                                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                 \
    do {                                                                                                     \
        check_count_++;                                                                                      \
        if (!(cond)) {                                                                                       \
            check_failures_++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                                   \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_STR(a, b) CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

/* Test data directory: tests/data (tests run from the repository root). */
#define TEST_DATA "tests/data/"
/* ../shared, or NULL when it is absent (extras that skip say why). */
static inline const char *check_shared_dir(void) {
    FILE *f = fopen("../shared/README.md", "r");
    if (!f) return NULL;
    fclose(f);
    return "../shared/";
}

static inline int check_report(const char *name) {
    if (check_failures_)
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, check_failures_, check_count_);
    else
        fprintf(stderr, "%s: all %d checks passed\n", name, check_count_);
    return check_failures_ ? 1 : 0;
}

#endif
