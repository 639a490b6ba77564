# MTP draft heads from GGUF files written by llama.cpp's converter (NextN blocks, in the model's file or in a
# separate mtp-*.gguf head file: src/model/format/gguf_mtp.c, src/model/model_mtp.c; data tests/data/mtp and
# tests/data/gguf_hybrid, made by tools/make_mtp_gguf.py and tools/make_hybrid_gguf.py): drafts equal to the
# safetensors fixtures' heads, head-file discovery, no head without NextN blocks, corrupt NextN tensors named.
weft_add_test(test_mtp_gguf SOURCES test_mtp_gguf.c LIBS weft_model)
