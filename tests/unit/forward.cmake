weft_add_test(test_forward SOURCES test_forward.c LIBS weft_families weft_format PkgConfig::JANSSON)
