# GGUF reader, ggml block decoders, GGUF → config/tensor set (src/model/format/gguf*.c, ggml_quants.c).
# Reference data: tools/gen_gguf_vectors.py (PyPI gguf package) and the copied fixtures in tests/data.
weft_add_test(test_gguf SOURCES test_gguf.c LIBS weft_format)
weft_add_test(test_gguf_quants SOURCES test_gguf_quants.c LIBS weft_format)
weft_add_test(test_gguf_corrupt SOURCES test_gguf_corrupt.c LIBS weft_format)
