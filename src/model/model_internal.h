/* Internal: the tokenizer side of model loading (src/model/model_tokenizer.c) and a GGUF model's separate MTP
 * head file (src/model/model_mtp.c). */
#ifndef WEFT_MODEL_INTERNAL_H
#define WEFT_MODEL_INTERNAL_H

#include "weft/gguf.h"
#include "weft/model.h"

/* Builds m->tokenizer (and template, bos/eos strings) from the GGUF's tokenizer.ggml.* keys, when present. */
weft_status weft_model_tokenizer_from_gguf(weft_model *m, weft_err *err);
/* From tokenizer.json / tokenizer_config.json / chat_template.jinja in the directory, when present. */
weft_status weft_model_tokenizer_from_dir(weft_model *m, weft_err *err);
void weft_model_tokenizer_free(weft_model *m);

/* A GGUF model file's MTP head (model_mtp.c): for a qwen35 / qwen35moe model without NextN blocks of its own,
 * loads the head file found beside it (mtp-<file name>, else the first fitting mtp-*.gguf) into m->tensors
 * and sets m->cfg.mtp_num_hidden_layers. No head file: WEFT_OK, nothing changes. Errors: WEFT_EFORMAT for an
 * mtp-<file name> that does not fit; those of weft_gguf_mtp_head (naming the head file and tensor) and of the
 * memory check. */
weft_status weft_model_gguf_mtp(weft_model *m, weft_err *err);
/* WEFT_EFORMAT naming path when g is a head-only file (qwen35 / qwen35moe with nextn_predict_layers and no
 * blk.0.attn_norm.weight: llama.cpp's own test), which cannot be loaded as a model; else WEFT_OK. */
weft_status weft_model_gguf_not_head(const weft_gguf *g, const char *path, weft_err *err);

#endif
