# safetensors reader, MLX affine folding/decoding, config.json reader (src/model/format).
weft_add_test(test_safetensors SOURCES test_safetensors.c LIBS weft_format)
weft_add_test(test_mlx SOURCES test_mlx.c LIBS weft_format)
weft_add_test(test_config SOURCES test_config.c LIBS weft_format)
