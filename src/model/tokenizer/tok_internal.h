/* Internal layout of weft_tokenizer, shared by the loaders (tok_json.c, tok_vocab.c), the encoder
 * (tok_encode.c, tok_bpe.c), the decoder (tok_decode.c) and the helpers (tok_map.c, tok_text.c). */
#ifndef WEFT_TOK_INTERNAL_H
#define WEFT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "weft/tokenizer.h"

/* ---- growable byte buffer ---- */
typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

weft_status tok_buf_reserve(tok_buf *b, size_t extra);
weft_status tok_buf_put(tok_buf *b, const void *s, size_t n);
void tok_buf_free(tok_buf *b);

/* ---- hash maps ---- */

/* Token text -> id, over the tokenizer's own text arrays (keys are not copied). Open addressing; a slot holds
 * id + 1 (0 = empty) and the 32-bit hash. */
typedef struct tok_map {
    uint64_t *slots;
    uint32_t mask;
    uint32_t count;
} tok_map;

struct weft_tokenizer;
uint32_t tok_hash(const char *s, size_t n);
weft_status tok_map_init(tok_map *m, size_t expected);
/* Inserts id under its text; when the text is already present, keeps the old id unless `replace`, and sets
 * *prev (when non-NULL) to the id that was there (-1 if none). */
weft_status tok_map_put(tok_map *m, const struct weft_tokenizer *t, int32_t id, bool replace, int32_t *prev);
int32_t tok_map_get(const tok_map *m, const struct weft_tokenizer *t, const char *s, size_t n);
void tok_map_free(tok_map *m);

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_pair_slot {
    uint64_t key; /* ((uint64)left << 32 | right) + 1; 0 = empty */
    int32_t rank, id;
} tok_pair_slot;
typedef struct tok_pairs {
    tok_pair_slot *slots;
    uint32_t mask, count;
} tok_pairs;

weft_status tok_pairs_init(tok_pairs *p, size_t expected);
/* Keeps the first (lowest) rank when a pair repeats, as HF does for its merge map. */
void tok_pairs_put(tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t id);
const tok_pair_slot *tok_pairs_get(const tok_pairs *p, int32_t a, int32_t b);
void tok_pairs_free(tok_pairs *p);

/* ---- UTF-8 and Unicode helpers (tok_text.c) ---- */

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when the bytes there are ill-formed; *bad then
 * receives the length of the maximal ill-formed subpart (>= 1), or 0 when the bytes are a valid but
 * incomplete prefix cut by the end of the buffer. */
size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);
size_t tok_utf8_put(uint32_t cp, char *out);
/* Copies s replacing ill-formed subparts by U+FFFD (the whole input is checked; trailing incomplete bytes
 * count as ill-formed). *changed tells whether anything was replaced. */
weft_status tok_utf8_sanitize(const char *s, size_t n, tok_buf *out, bool *changed);
bool tok_is_white_space(uint32_t cp); /* Unicode White_Space */
bool tok_is_word_char(uint32_t cp);   /* regex \w (letters, marks, decimal digits, connector punctuation) */

/* GPT-2 bytes_to_unicode: byte -> code point, and the inverse (-1 for code points not in the table). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* ---- pipeline pieces ---- */

typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWER,
    TOK_NORM_STRIP,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE, /* literal (re == NULL) or regex */
} tok_norm_kind;

typedef struct tok_norm {
    tok_norm_kind kind;
    char *a, *b; /* PREPEND: a; REPLACE: pattern a -> content b */
    size_t alen, blen;
    pcre2_code *re;
    bool left, right; /* STRIP */
} tok_norm;

typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT,     /* regex (or literal compiled as regex) with a behavior */
    TOK_PRE_BYTELEVEL, /* optional prefix space, optional GPT-2 regex split, then the byte map */
    TOK_PRE_METASPACE, /* ' ' -> replacement, prepend, optional split before each replacement */
} tok_pre_kind;

enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

typedef struct tok_pre {
    tok_pre_kind kind;
    pcre2_code *re; /* SPLIT; BYTELEVEL with use_regex */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* BYTELEVEL */
    char repl[8];          /* METASPACE replacement (UTF-8) */
    size_t repl_len;
    int prepend_scheme; /* METASPACE */
    bool split;         /* METASPACE */
} tok_pre;

/* Added tokens matched in text before the model runs. */
enum { TOK_ADD_SPECIAL = 1, TOK_ADD_LSTRIP = 2, TOK_ADD_RSTRIP = 4, TOK_ADD_SINGLE_WORD = 8 };
typedef struct tok_added {
    int32_t id;
    uint8_t flags;
    const char *text; /* points into the tokenizer arena (normalized-trie entries: into norm_arena) */
    uint32_t len;
} tok_added;

typedef struct tok_matcher {
    tok_added *v; /* sorted by first byte, then length descending */
    int32_t n;
    int32_t start[257]; /* v[start[c] .. start[c+1]) begin with byte c */
} tok_matcher;

typedef enum tok_model_kind { TOK_MODEL_BPE, TOK_MODEL_SPM } tok_model_kind;

struct weft_tokenizer {
    int64_t n_vocab;
    /* token text by id */
    char *arena;
    uint64_t *off;
    uint32_t *len;
    uint8_t *attr; /* WEFT_TOKEN_* */
    float *score;  /* SPM scores (NULL for BPE) */
    /* decoded piece by id */
    char *parena;
    uint64_t *poff;
    uint32_t *plen;
    size_t max_piece;
    /* the piece of a token when it is the first of a text (NULL: same as above) */
    char *p1arena;
    uint64_t *p1off;
    uint32_t *p1len;

    tok_map all;   /* every token (added tokens win) */
    tok_map model; /* model vocabulary only (BPE lookups); for GGUF vocabularies the same set as `all` */

    /* pipeline */
    tok_norm *norm;
    int n_norm;
    tok_pre *pre;
    int n_pre;
    tok_matcher raw, normalized; /* added tokens matched on the raw / the normalized text */
    char *norm_arena;            /* normalized spellings of normalized=true added tokens */

    tok_model_kind model_kind;
    tok_pairs merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;        /* the model's unknown token, -1 none */
    int32_t byte_tok[256]; /* <0xNN> ids for byte fallback, -1 absent */

    /* post-processor */
    int32_t *prefix, *suffix;
    int n_prefix, n_suffix;

    /* decoder: leading characters stripped at the start of a text */
    char strip_char[8];
    size_t strip_char_len;
    uint32_t strip_count;

    int32_t bos, eos, unk, pad;
    char *chat_template;
};

/* ---- shared internals ---- */

/* Allocates the per-id arrays for n ids (zeroed; attr 0, text empty). */
weft_status tok_alloc_ids(struct weft_tokenizer *t, int64_t n, weft_err *err);
/* Sets the token text of id (copied into the arena being built in ab). */
weft_status tok_set_text(struct weft_tokenizer *t, tok_buf *ab, int32_t id, const char *s, size_t n);
/* Finalises the text arena (ab is consumed) so token texts can be read. */
void tok_finish_arena(struct weft_tokenizer *t, tok_buf *ab);
static inline const char *tok_text(const struct weft_tokenizer *t, int32_t id) {
    return t->arena + t->off[id];
}

/* Builds a matcher from an array of added tokens (the array is copied and sorted). */
weft_status tok_matcher_build(tok_matcher *m, const tok_added *v, int32_t n, weft_err *err);
void tok_matcher_free(tok_matcher *m);

/* Compiles a regex (UTF + UCP); JIT when available. Error messages name `what`. */
weft_status tok_regex_compile(const char *pat, size_t len, const char *what, pcre2_code **out, weft_err *err);
/* The GPT-2 pre-tokenizer pattern (HF ByteLevel use_regex). */
extern const char TOK_GPT2_PATTERN[];

/* Per-token decoder steps (HF decoders applied to one token), in order. */
typedef enum tok_dec_kind {
    TOK_DEC_REPLACE,
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_BYTE_LEVEL,
    TOK_DEC_STRIP
} tok_dec_kind;
typedef struct tok_dec_step {
    tok_dec_kind kind;
    char from[16], to[16]; /* REPLACE: literal from -> to; STRIP: from = the stripped character */
    size_t from_len, to_len;
    /* REPLACE only: the first token of a text gets first_to instead (HF Metaspace decoder: every replacement
     * character of token 0 vanishes when a prefix is prepended) */
    bool first_differs;
    char first_to[16];
    size_t first_to_len;
    uint32_t start, stop; /* STRIP: leading / trailing occurrences removed */
} tok_dec_step;
#define TOK_MAX_DEC 16
typedef struct tok_dec_desc {
    tok_dec_step step[TOK_MAX_DEC];
    int n;
    /* GGUF: control/unknown/user-defined tokens are copied verbatim, byte tokens give their byte, unused and
     * undefined ones give nothing; only normal tokens go through the steps */
    bool gguf_types;
} tok_dec_desc;
/* Computes every token's piece from its text. */
weft_status tok_build_pieces(struct weft_tokenizer *t, const tok_dec_desc *dd, weft_err *err);

/* Encoder pieces (tok_encode.c / tok_bpe.c). */
typedef struct tok_scratch tok_scratch;
weft_status tok_model_word(const struct weft_tokenizer *t, const char *w, size_t n, weft_tok_vec *v,
                           tok_scratch *sc, weft_err *err);
tok_scratch *tok_scratch_new(void);
void tok_scratch_free(tok_scratch *sc);
weft_status tok_vec_push(weft_tok_vec *v, int32_t id);

/* Applies the normalizer chain (NULL chain: copies). */
weft_status tok_normalize(const struct weft_tokenizer *t, const char *s, size_t n, tok_buf *out,
                          weft_err *err);

#endif
