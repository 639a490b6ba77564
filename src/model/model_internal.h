/* Internal: the tokenizer side of model loading (src/model/model_tokenizer.c). */
#ifndef WEFT_MODEL_INTERNAL_H
#define WEFT_MODEL_INTERNAL_H

#include "weft/model.h"

/* Builds m->tokenizer (and template, bos/eos strings) from the GGUF's tokenizer.ggml.* keys, when present. */
weft_status weft_model_tokenizer_from_gguf(weft_model *m, weft_err *err);
/* From tokenizer.json / tokenizer_config.json / chat_template.jinja in the directory, when present. */
weft_status weft_model_tokenizer_from_dir(weft_model *m, weft_err *err);
void weft_model_tokenizer_free(weft_model *m);

#endif
