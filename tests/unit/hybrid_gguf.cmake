# GGUF files of the hybrid families made by llama.cpp's converter (tests/data/gguf_hybrid/, written by
# tools/make_hybrid_gguf.py) through the GGUF reader and the CPU families, against the HF fixtures' goldens.
weft_add_test(test_hybrid_gguf SOURCES test_hybrid_gguf.c
              LIBS weft_model weft_families weft_format PkgConfig::JANSSON)
