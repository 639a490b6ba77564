# qwen3_5 / qwen3_5_moe family (src/families/qwen3_5*.c): goldens, chunk/row/thread invariance, rollback.
weft_add_test(test_qwen3_5 SOURCES test_qwen3_5.c test_qwen3_5_util.c
              LIBS weft_families weft_format PkgConfig::JANSSON)
weft_add_test(test_qwen3_5_state SOURCES test_qwen3_5_state.c test_qwen3_5_util.c
              LIBS weft_families weft_format PkgConfig::JANSSON)
