/* Helpers for the tokenizer tests: files, JSON expectations, llama.cpp .inp/.out pairs, and a tiny GGUF
 * metadata reader that turns tokenizer.ggml.* keys into a weft_vocab_desc (so these tests do not depend on
 * the GGUF reader). */
#ifndef WEFT_TEST_TOK_UTIL_H
#define WEFT_TEST_TOK_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/tokenizer.h"

/* Whole file, NUL-terminated (*len bytes before the NUL); NULL when it cannot be read. free() it. */
char *tu_read_file(const char *path, size_t *len);
/* Parsed JSON document, or NULL (prints why). */
json_t *tu_load_json(const char *path);

/* True when ids[0..n) equals the JSON integer array `want`; otherwise prints both (prefixed by what). */
bool tu_ids_match(const char *what, const int32_t *ids, size_t n, json_t *want);
/* Same against a plain array. */
bool tu_ids_match_arr(const char *what, const int32_t *ids, size_t n, const int32_t *want, size_t n_want);
/* True when s[0..n) is valid UTF-8 made of complete characters. */
bool tu_utf8_complete(const char *s, size_t n);

/* Encodes text (flags) and compares with want; returns true on a match. */
bool tu_check_encode(const weft_tokenizer *t, const char *what, const char *text, size_t len, unsigned flags,
                     json_t *want);

/* llama.cpp test pairs: inputs split on "\n__ggml_vocab_test__\n", one line of ids per input. */
typedef struct tu_cases {
    size_t n;
    char **text;
    size_t *text_len;
    int32_t **ids;
    size_t *n_ids;
} tu_cases;
bool tu_llamacpp_cases(const char *inp_path, const char *out_path, tu_cases *c);
void tu_cases_free(tu_cases *c);

/* Tokenizer metadata of a GGUF file, owned. */
typedef struct tu_gguf_vocab {
    weft_vocab_desc d;
    char *model, *pre, *chat_template;
    char **tokens;
    size_t *token_lens;
    float *scores;
    int32_t *types;
    char **merges;
    size_t *merge_lens;
} tu_gguf_vocab;
/* Reads the metadata section only. false (and a message on stderr) on any problem. */
bool tu_gguf_vocab_load(const char *path, tu_gguf_vocab *v);
void tu_gguf_vocab_free(tu_gguf_vocab *v);

#endif
