# Regressions from breaking the live status line's console (src/util/console.c): terminal width fallbacks and
# the TERM=dumb rule.
weft_add_test(test_break_console SOURCES test_break_console.c LIBS weft_util)
