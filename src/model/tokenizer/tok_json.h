/* Internal: tokenizer.json parsing shared by tok_json.c (model, added tokens, config) and tok_json_pipe.c
 * (normalizer, pre-tokenizer, post-processor, decoder). */
#ifndef WEFT_TOK_JSON_H
#define WEFT_TOK_JSON_H

#include <jansson.h>

#include "tok_internal.h"

typedef struct tok_jctx {
    const char *src; /* file name for messages */
    weft_err *err;
} tok_jctx;

/* Sets err to "<src>: <path>: <message>" and returns code. */
weft_status tok_jfail(const tok_jctx *c, weft_status code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Optional typed fields: absent or null gives the default; a present field of the wrong type is
 * WEFT_EFORMAT naming path.key. */
weft_status tok_jbool(const tok_jctx *c, json_t *obj, const char *path, const char *key, bool def, bool *out);
weft_status tok_jstr(const tok_jctx *c, json_t *obj, const char *path, const char *key, const char **out,
                     size_t *len);

/* The pipeline sections. Each fills the tokenizer (norm / pre arrays, prefix / suffix) or the decoder
 * description; `v` may be null (absent component). */
weft_status tok_json_normalizer(const tok_jctx *c, weft_tokenizer *t, json_t *v);
weft_status tok_json_pre_tokenizer(const tok_jctx *c, weft_tokenizer *t, json_t *v);
weft_status tok_json_post_processor(const tok_jctx *c, weft_tokenizer *t, json_t *v);
weft_status tok_json_decoder(const tok_jctx *c, weft_tokenizer *t, json_t *v, tok_dec_desc *dd);

#endif
