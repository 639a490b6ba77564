/* weft/tokenizer.h — text <-> token ids: HF tokenizer.json pipelines and GGUF-style vocabularies.
 *
 * Two ways to build a tokenizer, one object:
 *   - weft_tokenizer_load_hf() / weft_tokenizer_from_hf_json(): a Hugging Face `tokenizer.json` (the fast
 *     tokenizer pipeline) plus, optionally, `tokenizer_config.json` (bos/eos/pad/unk token strings,
 *     add_bos_token / add_eos_token, chat_template). Results equal the `tokenizers` library
 *     (Tokenizer.encode(text, add_special_tokens)); the test suite checks this on Qwen3's tokenizer.
 *   - weft_tokenizer_from_vocab(): the vocabulary a GGUF file carries (tokenizer.ggml.*), described by a
 *     weft_vocab_desc. Results equal llama.cpp's llama_tokenize() (src/llama-vocab.cpp): model "llama" is
 *     its SentencePiece-style BPE (llm_tokenizer_spm), model "gpt2" its byte-level BPE with the
 *     pre-tokenizer regexes selected by tokenizer.ggml.pre.
 *
 * Supported tokenizer.json features (anything else fails to load with WEFT_ENOTSUP naming the feature):
 *   model       BPE (vocab + merges as "a b" strings or [a, b] pairs; byte_fallback, unk_token, fuse_unk,
 *               ignore_merges; dropout null/0; empty continuing_subword_prefix / end_of_word_suffix)
 *   normalizer  NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Strip, Prepend, Replace (String or Regex
 *               pattern), Sequence
 *   pre_tok.    Split (String or Regex pattern; behavior Removed / Isolated / MergedWithPrevious /
 *               MergedWithNext / Contiguous; invert), ByteLevel (add_prefix_space, use_regex with the GPT-2
 *               pattern), Metaspace (replacement, prepend_scheme always/first/never or legacy
 *               add_prefix_space, split), Digits (individual_digits), WhitespaceSplit, Punctuation, Sequence
 *   post_proc.  TemplateProcessing (the "single" template), ByteLevel (no-op), RobertaProcessing,
 *               BertProcessing, Sequence
 *   decoder     ByteLevel, Metaspace, Replace (String pattern), ByteFallback, Fuse, Strip (stop = 0 after
 *               Fuse), Sequence
 *   added_tokens with special / lstrip / rstrip / normalized / single_word, split out before normalization
 *               (normalized=false tokens) or after it (normalized=true tokens), leftmost-longest.
 * Regexes run on PCRE2 with UTF and UCP; Unicode normalization is utf8proc's. Both libraries' Unicode
 * versions apply to characters assigned recently (differences from the Rust crates are possible there).
 *
 * Known, deliberate differences from the references (none shows up on ordinary text):
 *   - Added/special tokens are found leftmost-longest in both modes (HF's Aho-Corasick rule); llama.cpp
 *     instead splits on each special token in turn, longest first. Results differ only when two special
 *     tokens overlap in the text. llama.cpp's name-based attribute overrides (e.g. rstrip for "phi-3") are
 *     not applied.
 *   - Without WEFT_TOK_PARSE_SPECIAL, special tokens are left out of the matcher (HF's
 *     encode_special_tokens skips a match after finding it).
 *   - A character that has no token, no byte-fallback token and no unk token is an error (HF drops it).
 *   - Decoding turns ill-formed bytes into U+FFFD per maximal subpart (Rust from_utf8_lossy, which HF's
 *     ByteLevel decoder uses); HF's ByteFallback decoder instead replaces every byte of an ill-formed run
 *     of <0xNN> tokens. Only ill-formed output differs.
 *   - The SentencePiece leading space is stripped at the start of the text after a skipped BOS as well (HF
 *     decode(skip_special_tokens=True)); llama.cpp's detokenize keeps it after a BOS. llama.cpp's
 *     clean_spaces post-pass (" ," -> ",", for a few gpt2 pre types) is not applied.
 *   - GGUF vocabularies get no Unicode normalization, like llama.cpp (HF Qwen applies NFC).
 *
 * Thread safety: a tokenizer is immutable after loading; every function below that takes a const
 * weft_tokenizer may be called from many threads at once. A weft_detok belongs to one thread at a time. */
#ifndef WEFT_TOKENIZER_H
#define WEFT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_tokenizer weft_tokenizer;

/* ---- loading ---------------------------------------------------------------------------------------- */

/* Loads `tokenizer_json_path` and, when config_path is non-NULL, `tokenizer_config.json` (a missing
 * config file is WEFT_EIO; pass NULL to go without). On success *out owns the tokenizer
 * (weft_tokenizer_free). Errors: WEFT_EIO (cannot read), WEFT_EFORMAT (bad JSON, missing or mistyped field,
 * a merge naming a token that is not in the vocabulary, duplicate ids...), WEFT_ENOTSUP (a pipeline
 * component or option this build does not implement: the message names it), WEFT_ENOMEM. err->msg names the
 * file and the JSON path of the offending field. */
weft_status weft_tokenizer_load_hf(const char *tokenizer_json_path, const char *config_path,
                                   weft_tokenizer **out, weft_err *err);

/* Same from memory: `json` (len bytes) is tokenizer.json's text; `config_json` (config_len bytes) is
 * tokenizer_config.json's text or NULL. `source` names the input in error messages (NULL: "tokenizer.json").
 * The buffers are not retained. */
weft_status weft_tokenizer_from_hf_json(const char *json, size_t len, const char *config_json,
                                        size_t config_len, const char *source, weft_tokenizer **out,
                                        weft_err *err);

/* GGUF token types (tokenizer.ggml.token_type values, llama.cpp's llama_token_type). */
enum {
    WEFT_VOCAB_TYPE_UNDEFINED = 0,
    WEFT_VOCAB_TYPE_NORMAL = 1,
    WEFT_VOCAB_TYPE_UNKNOWN = 2,
    WEFT_VOCAB_TYPE_CONTROL = 3,
    WEFT_VOCAB_TYPE_USER_DEFINED = 4,
    WEFT_VOCAB_TYPE_UNUSED = 5,
    WEFT_VOCAB_TYPE_BYTE = 6,
};

/* A vocabulary as a GGUF file carries it (keys tokenizer.ggml.*). Every pointer is borrowed for the duration
 * of weft_tokenizer_from_vocab() only (the tokenizer copies what it keeps). Initialise with
 * weft_vocab_desc_init(), which sets the "absent" values, then fill what the file has. */
typedef struct weft_vocab_desc {
    const char *model;          /* tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE) */
    const char *pre;            /* tokenizer.ggml.pre (gpt2 only; NULL or "" = llama.cpp's "default").
                                 * Known: default; gpt-2, phi-2, mpt, olmo; llama3, llama-v3, llama-bpe,
                                 * falcon3, falcon-h1; dbrx, smaug-bpe; qwen2, deepseek-r1-qwen,
                                 * stablelm2, megrez; qwen35; smollm, starcoder, refact, command-r,
                                 * codeshell, exaone, minerva-7b. Others: WEFT_ENOTSUP. */
    int64_t n_tokens;           /* tokenizer.ggml.tokens length, >= 1 */
    const char *const *tokens;  /* [n_tokens] token text (UTF-8 bytes as stored) */
    const size_t *token_lens;   /* [n_tokens] byte lengths, or NULL: tokens are NUL-terminated */
    const float *scores;        /* [n_tokens] tokenizer.ggml.scores, or NULL (all 0) */
    const int32_t *token_types; /* [n_tokens] tokenizer.ggml.token_type (WEFT_VOCAB_TYPE_*), or NULL
                                 * (all NORMAL) */
    int64_t n_merges;           /* tokenizer.ggml.merges length (gpt2: required, >= 0) */
    const char *const *merges;  /* [n_merges] "left right", split at the first space after byte 0 */
    const size_t *merge_lens;   /* [n_merges] byte lengths, or NULL: NUL-terminated */
    int32_t bos, eos, unk, pad; /* token ids, -1 = key absent (model "llama" then uses llama.cpp's
                                 * defaults 1, 2, 0; ids outside the vocabulary are WEFT_EFORMAT) */
    int8_t add_bos, add_eos;    /* tokenizer.ggml.add_{bos,eos}_token: 1/0, or -1 = absent (llama.cpp's
                                 * default: llama add_bos; gpt2 add_bos for the llama3 pre names) */
    int8_t add_space_prefix;    /* tokenizer.ggml.add_space_prefix: 1/0, or -1 = absent (llama: 1) */
    const char *chat_template;  /* tokenizer.chat_template, or NULL (copied) */
} weft_vocab_desc;

/* Sets every id to -1, every tri-state to -1, every pointer to NULL and every count to 0. */
void weft_vocab_desc_init(weft_vocab_desc *d);

/* Builds a tokenizer from a vocabulary description. Errors: WEFT_EINVAL (NULL or inconsistent arguments),
 * WEFT_EFORMAT (duplicate token text, a merge without a space or naming a token that is not in the vocabulary
 * or whose result is not, an id outside the vocabulary, add_bos without a bos id), WEFT_ENOTSUP (unknown
 * model or pre name), WEFT_ENOMEM. */
weft_status weft_tokenizer_from_vocab(const weft_vocab_desc *d, weft_tokenizer **out, weft_err *err);

/* Frees a tokenizer; NULL is a no-op. */
void weft_tokenizer_free(weft_tokenizer *tok);

/* ---- encoding --------------------------------------------------------------------------------------- */

enum {
    /* Add what the post-processor adds around one sequence: BOS (and EOS) per the tokenizer's rule
     * (tokenizer.json post_processor, overridden by tokenizer_config add_bos_token/add_eos_token when those
     * keys are present; GGUF add_bos/add_eos). */
    WEFT_TOK_ADD_SPECIAL = 1u << 0,
    /* Match special (control) tokens written in the text, e.g. "<|im_end|>", as their ids. Without it they
     * are tokenized as plain text. Non-special added tokens (HF special=false, GGUF USER_DEFINED, e.g.
     * Qwen's "<think>") are always matched, as both reference libraries do. */
    WEFT_TOK_PARSE_SPECIAL = 1u << 1,
};

/* A growable id array. Zero-initialise; weft_tok_vec_free releases it. */
typedef struct weft_tok_vec {
    int32_t *ids;
    size_t n, cap;
} weft_tok_vec;

void weft_tok_vec_free(weft_tok_vec *v);

/* Tokenizes `len` bytes of `text` (UTF-8; need not be NUL-terminated; NULL allowed when len is 0) and
 * APPENDS the ids to v (v->n grows; v->ids is realloc'd as needed). flags: WEFT_TOK_*. Byte sequences that
 * are not valid UTF-8 are replaced by U+FFFD first (one per maximal ill-formed subpart, as Python's and
 * Rust's lossy decoders do). Errors: WEFT_EINVAL (NULL tok/v, or NULL text with len > 0), WEFT_ENOMEM,
 * WEFT_ENOTSUP (a character with no token, no byte-fallback token and no unk token: the message names the
 * code point); on error v->n is restored to its value at entry. */
weft_status weft_tokenizer_encode(const weft_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                  weft_tok_vec *v, weft_err *err);

/* Same into a caller array of `capacity` ids: *n_out receives the number of ids. When capacity is too small
 * the result is WEFT_ERANGE and *n_out holds the count needed (nothing useful is in out). */
weft_status weft_tokenizer_encode_to(const weft_tokenizer *tok, const char *text, size_t len, unsigned flags,
                                     int32_t *out, size_t capacity, size_t *n_out, weft_err *err);

/* ---- vocabulary ------------------------------------------------------------------------------------- */

/* Token attribute bits (weft_tokenizer_token_attr). tokenizer.json tokens: model vocabulary entries are
 * NORMAL (BYTE when the model has byte_fallback and the text is "<0xNN>"), added tokens are CONTROL
 * (special: true) or USER_DEFINED (special: false). */
enum {
    WEFT_TOKEN_NORMAL = 1u << 0,
    WEFT_TOKEN_UNKNOWN = 1u << 1,
    WEFT_TOKEN_CONTROL = 1u << 2,
    WEFT_TOKEN_USER_DEFINED = 1u << 3,
    WEFT_TOKEN_UNUSED = 1u << 4,
    WEFT_TOKEN_BYTE = 1u << 5,
};

/* Number of token ids: every id in [0, n_vocab) is valid (an id with no token, a hole in a tokenizer.json,
 * has empty text and piece). */
int64_t weft_tokenizer_n_vocab(const weft_tokenizer *tok);

/* Special ids, -1 when the tokenizer has none. */
int32_t weft_tokenizer_bos(const weft_tokenizer *tok);
int32_t weft_tokenizer_eos(const weft_tokenizer *tok);
int32_t weft_tokenizer_unk(const weft_tokenizer *tok);
int32_t weft_tokenizer_pad(const weft_tokenizer *tok);

/* Whether WEFT_TOK_ADD_SPECIAL prepends a BOS / appends an EOS (any id the post-processor adds counts). */
bool weft_tokenizer_add_bos(const weft_tokenizer *tok);
bool weft_tokenizer_add_eos(const weft_tokenizer *tok);

/* WEFT_TOKEN_* bits of id (0 for ids out of range). */
unsigned weft_tokenizer_token_attr(const weft_tokenizer *tok, int32_t id);

/* True for control/unknown tokens (HF special added tokens, GGUF CONTROL/UNKNOWN): the detokenizer skips
 * them unless asked to render them. False for ids out of range. */
bool weft_tokenizer_is_special(const weft_tokenizer *tok, int32_t id);

/* The id whose token text (the vocabulary's spelling, e.g. "Ġhello", "▁the", "<|im_end|>") is exactly the
 * `len` bytes at s; -1 when none. Added tokens win over model tokens with the same text (HF token_to_id). */
int32_t weft_tokenizer_lookup(const weft_tokenizer *tok, const char *s, size_t len);

/* The vocabulary spelling of id (not NUL-terminated; *len bytes; an empty GGUF token reads "[EMPTY_<id>]" as
 * in llama.cpp). Returns NULL with *len = 0 for ids out of range. Owned by the tokenizer. */
const char *weft_tokenizer_token_text(const weft_tokenizer *tok, int32_t id, size_t *len);

/* The bytes id contributes to decoded text (the decoder applied to this token alone): byte-level symbols
 * mapped back to bytes, "<0xNN>" byte tokens to one raw byte, "▁" to a space; special tokens give their text,
 * HF normalized=true added tokens their normalized text (as HF decodes them), GGUF unused/undefined tokens
 * nothing. May be an incomplete UTF-8 sequence. The sequence-start strip
 * (weft_tokenizer_strips_leading_space) is not applied. NULL with *len = 0 for ids out of range. Owned by the
 * tokenizer. */
const char *weft_tokenizer_piece(const weft_tokenizer *tok, int32_t id, size_t *len);

/* Longest piece in bytes (sizes detokenizer buffers, see weft_detok_bound). */
size_t weft_tokenizer_max_piece_len(const weft_tokenizer *tok);

/* Whether decoding treats the start of a text specially (SentencePiece's dummy prefix): HF decoder Strip
 * after Fuse and GGUF "llama" with add_space_prefix strip the leading space(s) of the text; the HF Metaspace
 * decoder with a prepend scheme drops every replacement character of the first token. */
bool weft_tokenizer_strips_leading_space(const weft_tokenizer *tok);

/* The chat template (tokenizer_config.json "chat_template", the "default" entry of a list, or the GGUF
 * string), or NULL. Owned by the tokenizer, NUL-terminated. */
const char *weft_tokenizer_chat_template(const weft_tokenizer *tok);

/* ---- decoding --------------------------------------------------------------------------------------- */

enum {
    /* Render special tokens' text (HF decode(skip_special_tokens=False)). Default: they give nothing. */
    WEFT_DETOK_RENDER_SPECIAL = 1u << 0,
    /* No sequence-start handling: every token gives its plain piece (llama.cpp's streaming token_to_piece).
     * Default: the start of the text is decoded as the tokenizer's decoder does for a whole sequence (HF
     * decode), see weft_tokenizer_strips_leading_space. */
    WEFT_DETOK_KEEP_LEADING_SPACE = 1u << 1,
};

/* Incremental detokenizer: feed ids one at a time and receive text that only ever contains complete UTF-8
 * characters. A character split across tokens (byte tokens, byte-level symbols) is held back until it
 * completes; bytes that can no longer start or continue a valid character become U+FFFD (one per maximal
 * ill-formed subpart), only once that is certain. Concatenating every output of feed and the final flush
 * equals weft_tokenizer_decode() of the same ids.
 * The struct is public so it can live on the stack or inside another struct (no allocation); its fields are
 * private. */
typedef struct weft_detok {
    const weft_tokenizer *tok;
    unsigned flags;
    uint32_t strip_left; /* leading strip characters still to remove at the text start */
    bool at_start;       /* nothing emitted yet */
    bool first_tok;      /* no token rendered yet */
    uint8_t n_pending;
    uint8_t pending[4];  /* an incomplete UTF-8 prefix */
    bool prompt_pending; /* pending came from weft_detok_prime: dropped, not U+FFFD, if it cannot complete */
} weft_detok;

/* Starts a detokenizer at the start of a text. flags: WEFT_DETOK_*. tok must outlive d. */
void weft_detok_init(weft_detok *d, const weft_tokenizer *tok, unsigned flags);

/* Feeds ids whose text is context only (a prompt): updates the state (the sequence-start handling, see
 * weft_tokenizer_strips_leading_space, and any incomplete character) without producing output. A prompt
 * that renders nothing (only a skipped BOS) leaves the detokenizer at the start of the text. The bytes of a
 * character left incomplete by the prompt are kept: when the following tokens complete it, the whole
 * character is output (its prompt bytes included, so a reply never starts with U+FFFD for it); when they
 * cannot, or the text ends first (flush), those prompt bytes are dropped without a U+FFFD. Errors:
 * WEFT_ERANGE (an id out of range). */
weft_status weft_detok_prime(weft_detok *d, const int32_t *ids, size_t n, weft_err *err);

/* Output bound of one weft_detok_feed call, in bytes. */
size_t weft_detok_bound(const weft_tokenizer *tok);

/* Feeds one id; writes the newly completed text to out (capacity bytes, at least weft_detok_bound()) and
 * its length to *n_out (possibly 0). Errors: WEFT_ERANGE (id out of range, or capacity below the bound),
 * WEFT_EINVAL (NULL arguments). */
weft_status weft_detok_feed(weft_detok *d, int32_t id, char *out, size_t capacity, size_t *n_out,
                            weft_err *err);

/* Ends the text: an incomplete character still held becomes one U+FFFD. Writes at most 3 bytes to out
 * (capacity >= 3; less writes nothing) and returns the count. */
size_t weft_detok_flush(weft_detok *d, char *out, size_t capacity);

/* Decodes a whole sequence (weft_detok_init + feed every id + flush) into a malloc'd NUL-terminated string
 * (*out, *out_len bytes before the NUL; free with free()). Errors: WEFT_ERANGE (an id out of range),
 * WEFT_ENOMEM, WEFT_EINVAL. */
weft_status weft_tokenizer_decode(const weft_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                                  char **out, size_t *out_len, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
