/* A tokenizer from a GGUF-style vocabulary description, with llama.cpp's semantics (src/llama-vocab.cpp):
 *   "llama": SPM — a space prefix on every text fragment (add_space_prefix), ' ' -> U+2581, score-merge BPE,
 *            byte fallback to <0xNN>; decoding maps U+2581 back and strips the first leading space.
 *   "gpt2":  byte-level BPE with ranked merges; the text is split by the regex list that llama.cpp selects
 *            for tokenizer.ggml.pre (each regex splits every piece further, keeping matches and the text
 *            between them), then mapped through the GPT-2 byte table.
 * Control, unknown and user-defined tokens are matched in the text first (control/unknown only with
 * PARSE_SPECIAL). */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's regexes per pre-tokenizer type (llm_tokenizer_bpe). */
#define RE_GPT2         "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                            \
    RE_CONTRACTIONS                                                                                          \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"               \
    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                             \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"    \
                    "\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                                            \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"    \
                    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_def {
    const char *names[8];
    const char *re[4];
    bool ignore_merges, add_bos;
} pre_def;

static const pre_def PRE_DEFS[] = {
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {{"gpt-2", "phi-2", "mpt", "olmo"}, {RE_GPT2}, false, false},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1"}, {RE_LLAMA3}, true, true},
    {{"dbrx", "smaug-bpe"}, {RE_LLAMA3}, false, false},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {RE_QWEN2}, false, false},
    {{"qwen35"}, {RE_QWEN35}, false, false},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
     {"\\p{N}", RE_GPT2},
     false,
     false},
};

static const pre_def *find_pre(const char *name) {
    if (!name || !*name) name = "default";
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        for (int k = 0; k < 8 && PRE_DEFS[i].names[k]; k++)
            if (!strcmp(PRE_DEFS[i].names[k], name)) return &PRE_DEFS[i];
    return NULL;
}

static size_t slen(const char *const *v, const size_t *lens, int64_t i) {
    return lens ? lens[i] : strlen(v[i]);
}

static uint8_t attr_of(int32_t type) {
    switch (type) {
    case WEFT_VOCAB_TYPE_NORMAL:
        return WEFT_TOKEN_NORMAL;
    case WEFT_VOCAB_TYPE_UNKNOWN:
        return WEFT_TOKEN_UNKNOWN;
    case WEFT_VOCAB_TYPE_CONTROL:
        return WEFT_TOKEN_CONTROL;
    case WEFT_VOCAB_TYPE_USER_DEFINED:
        return WEFT_TOKEN_USER_DEFINED;
    case WEFT_VOCAB_TYPE_UNUSED:
        return WEFT_TOKEN_UNUSED;
    case WEFT_VOCAB_TYPE_BYTE:
        return WEFT_TOKEN_BYTE;
    default:
        return 0; /* llama.cpp: undefined */
    }
}

static weft_status check_id(const char *what, int32_t id, int64_t n, weft_err *err) {
    if (id < -1 || id >= n)
        return weft_err_set(err, WEFT_EFORMAT, "vocab: %s = %d is outside the vocabulary (%lld tokens)", what,
                            id, (long long)n);
    return WEFT_OK;
}

static weft_status load_merges(weft_tokenizer *t, const weft_vocab_desc *d, weft_err *err) {
    if (d->n_merges < 0 || (d->n_merges > 0 && !d->merges))
        return weft_err_set(err, WEFT_EINVAL, "vocab: bad merges (n_merges %lld)", (long long)d->n_merges);
    if (d->n_merges > INT32_MAX) return weft_err_set(err, WEFT_EFORMAT, "vocab: too many merges");
    if (tok_pairs_init(&t->merges, (size_t)d->n_merges))
        return weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory for merges");
    tok_buf cat = {0};
    weft_status st = WEFT_OK;
    for (int64_t i = 0; i < d->n_merges && !st; i++) {
        const char *m = d->merges[i];
        if (!m) {
            st = weft_err_set(err, WEFT_EINVAL, "vocab: merge %lld is NULL", (long long)i);
            break;
        }
        size_t n = slen(d->merges, d->merge_lens, i);
        /* llama.cpp: the split is at the first space after byte 0 */
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) {
            st = weft_err_set(err, WEFT_EFORMAT, "vocab: merge %lld \"%.*s\" has no separating space",
                              (long long)i, (int)(n > 64 ? 64 : n), m);
            break;
        }
        size_t la = (size_t)(sp - m), lb = n - la - 1;
        int32_t a = tok_map_get(&t->all, t, m, la), b = tok_map_get(&t->all, t, sp + 1, lb);
        cat.n = 0;
        if (tok_buf_put(&cat, m, la) || tok_buf_put(&cat, sp + 1, lb)) {
            st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
            break;
        }
        int32_t ab = tok_map_get(&t->all, t, cat.p, cat.n);
        if (a < 0 || b < 0 || ab < 0)
            st = weft_err_set(err, WEFT_EFORMAT, "vocab: merge %lld \"%.*s\": %s is not in the vocabulary",
                              (long long)i, (int)(n > 64 ? 64 : n), m,
                              a < 0   ? "the left token"
                              : b < 0 ? "the right token"
                                      : "the merged token");
        else
            tok_pairs_put(&t->merges, a, b, (int32_t)i, ab);
    }
    tok_buf_free(&cat);
    return st;
}

static weft_status build(weft_tokenizer *t, const weft_vocab_desc *d, bool spm, weft_err *err) {
    weft_status st = tok_alloc_ids(t, d->n_tokens, err);
    if (st) return st;
    tok_buf ab = {0};
    for (int64_t i = 0; i < d->n_tokens; i++) {
        if (!d->tokens[i]) {
            tok_buf_free(&ab);
            return weft_err_set(err, WEFT_EINVAL, "vocab: token %lld is NULL", (long long)i);
        }
        const char *text = d->tokens[i];
        size_t tl = slen(d->tokens, d->token_lens, i);
        char empty[40];
        if (tl == 0) { /* llama.cpp renames empty tokens so they stay distinct */
            tl = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%lld]", (long long)i);
            text = empty;
        }
        if (tok_set_text(t, &ab, (int32_t)i, text, tl)) {
            tok_buf_free(&ab);
            return weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
        }
        t->attr[i] = d->token_types ? attr_of(d->token_types[i]) : WEFT_TOKEN_NORMAL;
    }
    tok_finish_arena(t, &ab);
    if (tok_map_init(&t->all, (size_t)d->n_tokens))
        return weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
    for (int64_t i = 0; i < d->n_tokens; i++) {
        int32_t prev;
        if (tok_map_put(&t->all, t, (int32_t)i, false, &prev))
            return weft_err_set(err, WEFT_ENOMEM, "vocab: oom");
        if (prev >= 0)
            return weft_err_set(err, WEFT_EFORMAT, "vocab: duplicate token \"%.*s\" has ids %d and %lld",
                                (int)(t->len[i] > 64 ? 64 : t->len[i]), tok_text(t, (int32_t)i), prev,
                                (long long)i);
    }
    /* t->model stays empty: BPE lookups then use `all`, as llama.cpp's text_to_token does */

    /* special tokens split out of the text: llama.cpp's cache_special_tokens */
    tok_added *add = NULL;
    int32_t na = 0;
    for (int64_t i = 0; i < d->n_tokens; i++)
        if (t->attr[i] & (WEFT_TOKEN_CONTROL | WEFT_TOKEN_USER_DEFINED | WEFT_TOKEN_UNKNOWN)) na++;
    if (na) {
        add = malloc((size_t)na * sizeof *add);
        if (!add) return weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
        na = 0;
        for (int64_t i = 0; i < d->n_tokens; i++) {
            uint8_t a = t->attr[i];
            if (!(a & (WEFT_TOKEN_CONTROL | WEFT_TOKEN_USER_DEFINED | WEFT_TOKEN_UNKNOWN))) continue;
            add[na++] = (tok_added){.id = (int32_t)i,
                                    .flags = (a & WEFT_TOKEN_USER_DEFINED) ? 0 : TOK_ADD_SPECIAL,
                                    .text = tok_text(t, (int32_t)i),
                                    .len = t->len[i]};
        }
    }
    st = tok_matcher_build(&t->raw, add, na, err);
    free(add);
    if (st) return st;
    if ((st = tok_matcher_build(&t->normalized, NULL, 0, err))) return st;

    for (int b = 0; b < 256; b++) {
        char hex[7];
        static const char H[] = "0123456789ABCDEF";
        hex[0] = '<', hex[1] = '0', hex[2] = 'x', hex[3] = H[b >> 4], hex[4] = H[b & 15], hex[5] = '>';
        t->byte_tok[b] = spm ? tok_map_get(&t->all, t, hex, 6) : -1;
    }
    return WEFT_OK;
}

weft_status weft_tokenizer_from_vocab(const weft_vocab_desc *d, weft_tokenizer **out, weft_err *err) {
    if (!d || !out || !d->model || !d->tokens || d->n_tokens <= 0)
        return weft_err_set(err, WEFT_EINVAL, "vocab: missing model, tokens or token count");
    *out = NULL;
    bool spm = !strcmp(d->model, "llama");
    const pre_def *pre = NULL;
    if (!spm) {
        if (strcmp(d->model, "gpt2") != 0)
            return weft_err_set(err, WEFT_ENOTSUP,
                                "vocab: tokenizer model \"%s\" is not supported (llama, gpt2)", d->model);
        pre = find_pre(d->pre);
        if (!pre)
            return weft_err_set(err, WEFT_ENOTSUP, "vocab: pre-tokenizer \"%s\" is not supported", d->pre);
    }
    weft_status st;
    if ((st = check_id("bos", d->bos, d->n_tokens, err)) ||
        (st = check_id("eos", d->eos, d->n_tokens, err)) ||
        (st = check_id("unk", d->unk, d->n_tokens, err)) || (st = check_id("pad", d->pad, d->n_tokens, err)))
        return st;
    weft_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
    t->unk_id = -1;
    if ((st = build(t, d, spm, err))) goto fail;

    t->bos = d->bos, t->eos = d->eos, t->unk = d->unk, t->pad = d->pad;
    bool add_bos, add_eos = d->add_eos == 1;
    tok_dec_desc dd = {.gguf_types = true};
    if (spm) {
        /* llama.cpp defaults for SPM vocabularies, kept only when inside the vocabulary */
        if (t->bos < 0 && d->n_tokens > 1) t->bos = 1;
        if (t->eos < 0 && d->n_tokens > 2) t->eos = 2;
        if (t->unk < 0) t->unk = 0;
        t->unk_id = t->unk;
        add_bos = d->add_bos != 0;
        bool space_prefix = d->add_space_prefix != 0;
        t->model_kind = TOK_MODEL_SPM;
        t->score = malloc((size_t)d->n_tokens * sizeof *t->score);
        t->norm = calloc(2, sizeof *t->norm);
        if (!t->score || !t->norm) {
            st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
            goto fail;
        }
        for (int64_t i = 0; i < d->n_tokens; i++) t->score[i] = d->scores ? d->scores[i] : 0.0f;
        if (space_prefix) {
            t->norm[t->n_norm].kind = TOK_NORM_PREPEND;
            t->norm[t->n_norm].a = strdup(" ");
            t->norm[t->n_norm++].alen = 1;
        }
        tok_norm *r = &t->norm[t->n_norm++];
        r->kind = TOK_NORM_REPLACE;
        r->a = strdup(" ");
        r->alen = 1;
        r->b = strdup("\xE2\x96\x81");
        r->blen = 3;
        if (!r->a || !r->b || (space_prefix && !t->norm[0].a)) {
            st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
            goto fail;
        }
        tok_dec_step *ds = &dd.step[dd.n++];
        ds->kind = TOK_DEC_REPLACE;
        memcpy(ds->from, "\xE2\x96\x81", 3);
        ds->from_len = 3;
        ds->to[0] = ' ';
        ds->to_len = 1;
        if (space_prefix) {
            t->strip_char[0] = ' ';
            t->strip_char_len = 1;
            t->strip_count = 1;
        }
    } else {
        add_bos = d->add_bos == 1 || (d->add_bos == -1 && pre->add_bos);
        t->model_kind = TOK_MODEL_BPE;
        t->ignore_merges = pre->ignore_merges;
        int nre = 0;
        while (nre < 4 && pre->re[nre]) nre++;
        t->pre = calloc((size_t)nre + 1, sizeof *t->pre);
        if (!t->pre) {
            st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
            goto fail;
        }
        for (int i = 0; i < nre; i++) {
            tok_pre *p = &t->pre[t->n_pre++];
            p->kind = TOK_PRE_SPLIT;
            p->behavior = TOK_SPLIT_ISOLATED;
            if ((st = tok_regex_compile(pre->re[i], strlen(pre->re[i]), "vocab pre-tokenizer", &p->re, err)))
                goto fail;
        }
        t->pre[t->n_pre++].kind = TOK_PRE_BYTELEVEL;
        dd.step[dd.n++].kind = TOK_DEC_BYTE_LEVEL;
        if ((st = load_merges(t, d, err))) goto fail;
    }
    if (add_bos && t->bos < 0) {
        st = weft_err_set(err, WEFT_EFORMAT, "vocab: add_bos_token is set but there is no bos_token_id");
        goto fail;
    }
    if (add_eos && t->eos < 0) {
        st = weft_err_set(err, WEFT_EFORMAT, "vocab: add_eos_token is set but there is no eos_token_id");
        goto fail;
    }
    t->prefix = malloc(sizeof(int32_t));
    t->suffix = malloc(sizeof(int32_t));
    if (!t->prefix || !t->suffix) {
        st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
        goto fail;
    }
    if (add_bos) t->prefix[t->n_prefix++] = t->bos;
    if (add_eos) t->suffix[t->n_suffix++] = t->eos;
    if (d->chat_template && !(t->chat_template = strdup(d->chat_template))) {
        st = weft_err_set(err, WEFT_ENOMEM, "vocab: out of memory");
        goto fail;
    }
    if ((st = tok_build_pieces(t, &dd, err))) goto fail;
    *out = t;
    return WEFT_OK;
fail:
    weft_tokenizer_free(t);
    return st;
}
