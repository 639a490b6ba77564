# The live status line of `weft serve` (SPEC §2.1): the console (src/util/console.c), the status formatter and
# its thread (src/server/live.c). weft_server_core is defined in server.cmake.
weft_add_test(test_live SOURCES test_live.c LIBS weft_server_core)
