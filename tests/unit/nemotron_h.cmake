weft_add_test(test_nemotron_h SOURCES test_nemotron_h.c LIBS weft_families weft_format PkgConfig::JANSSON)
weft_add_test(test_nemotron_h_synth SOURCES test_nemotron_h_synth.c LIBS weft_families weft_format)
