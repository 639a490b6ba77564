weft_add_test(test_forward SOURCES test_forward.c LIBS weft_families weft_format PkgConfig::JANSSON)
weft_add_test(test_tensor_set SOURCES test_tensor_set.c LIBS weft_format)
weft_add_test(test_rope SOURCES test_rope.c LIBS weft_kernels PkgConfig::JANSSON)
