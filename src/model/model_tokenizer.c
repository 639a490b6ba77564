/* The tokenizer side of a model: built from GGUF tokenizer.ggml.* keys or from tokenizer.json in a checkpoint
 * directory; plus the model-level encode/detokenize helpers the CLI and the server use. */
#include "model_internal.h"
#include "weft/gguf.h"
#include "weft/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* bos/eos text (for chat templates) and the template itself, from the tokenizer. */
static void take_specials(weft_model *m) {
    const weft_tokenizer *t = m->tokenizer;
    size_t n;
    const char *s;
    int32_t bos = weft_tokenizer_bos(t), eos = weft_tokenizer_eos(t);
    if (bos >= 0 && (s = weft_tokenizer_token_text(t, bos, &n))) m->bos_text = dup_str(s, n);
    if (eos >= 0 && (s = weft_tokenizer_token_text(t, eos, &n))) m->eos_text = dup_str(s, n);
    const char *tpl = weft_tokenizer_chat_template(t);
    if (tpl) m->chat_template = strdup(tpl);
}

static int32_t gguf_id(const weft_gguf *g, const char *key) {
    int64_t v;
    if (weft_gguf_find(g, key) < 0 || weft_gguf_get_int(g, key, &v, NULL)) return -1;
    return (int32_t)v;
}

static int8_t gguf_flag(const weft_gguf *g, const char *key) {
    bool b;
    if (weft_gguf_find(g, key) < 0 || weft_gguf_get_bool(g, key, &b, NULL)) return -1;
    return b ? 1 : 0;
}

weft_status weft_model_tokenizer_from_gguf(weft_model *m, weft_err *err) {
    const weft_gguf *g = m->gguf;
    if (weft_gguf_find(g, "tokenizer.ggml.model") < 0) return WEFT_OK; /* no tokenizer: token ids only */
    weft_vocab_desc d;
    weft_vocab_desc_init(&d);
    weft_gguf_arr toks, scores, types, merges;
    weft_status st = weft_gguf_get_str(g, "tokenizer.ggml.model", &d.model, NULL, err);
    if (!st) st = weft_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, err);
    if (st) return st;
    bool has_scores = weft_gguf_find(g, "tokenizer.ggml.scores") >= 0 &&
                      !weft_gguf_get_arr(g, "tokenizer.ggml.scores", &scores, NULL);
    bool has_types = weft_gguf_find(g, "tokenizer.ggml.token_type") >= 0 &&
                     !weft_gguf_get_arr(g, "tokenizer.ggml.token_type", &types, NULL);
    bool has_merges = weft_gguf_find(g, "tokenizer.ggml.merges") >= 0 &&
                      !weft_gguf_get_arr(g, "tokenizer.ggml.merges", &merges, NULL);
    if (weft_gguf_find(g, "tokenizer.ggml.pre") >= 0)
        weft_gguf_get_str(g, "tokenizer.ggml.pre", &d.pre, NULL, NULL);
    int64_t n = (int64_t)toks.count, nm = has_merges ? (int64_t)merges.count : 0;
    const char **tv = malloc((size_t)(n ? n : 1) * sizeof *tv);
    size_t *tl = malloc((size_t)(n ? n : 1) * sizeof *tl);
    float *sc = has_scores ? malloc((size_t)(n ? n : 1) * sizeof *sc) : NULL;
    int32_t *ty = has_types ? malloc((size_t)(n ? n : 1) * sizeof *ty) : NULL;
    const char **mv = malloc((size_t)(nm ? nm : 1) * sizeof *mv);
    size_t *ml = malloc((size_t)(nm ? nm : 1) * sizeof *ml);
    if (!tv || !tl || (has_scores && !sc) || (has_types && !ty) || !mv || !ml) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory reading the GGUF vocabulary");
        goto out;
    }
    if ((has_scores && (int64_t)scores.count != n) || (has_types && (int64_t)types.count != n)) {
        st = weft_err_set(err, WEFT_EFORMAT,
                          "%s: tokenizer.ggml.scores/token_type length differs from tokens", m->path);
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t len = 0;
        tv[i] = weft_gguf_arr_str(&toks, (uint64_t)i, &len);
        tl[i] = (size_t)len;
        if (!tv[i]) {
            st = weft_err_set(err, WEFT_EFORMAT, "%s: tokenizer.ggml.tokens is not an array of strings",
                              m->path);
            goto out;
        }
        if (sc) sc[i] = (float)weft_gguf_arr_float(&scores, (uint64_t)i);
        if (ty) ty[i] = (int32_t)weft_gguf_arr_int(&types, (uint64_t)i);
    }
    for (int64_t i = 0; i < nm; i++) {
        uint64_t len = 0;
        mv[i] = weft_gguf_arr_str(&merges, (uint64_t)i, &len);
        ml[i] = (size_t)len;
        if (!mv[i]) {
            st = weft_err_set(err, WEFT_EFORMAT, "%s: tokenizer.ggml.merges is not an array of strings",
                              m->path);
            goto out;
        }
    }
    d.n_tokens = n;
    d.tokens = tv;
    d.token_lens = tl;
    d.scores = sc;
    d.token_types = ty;
    d.n_merges = nm;
    d.merges = mv;
    d.merge_lens = ml;
    d.bos = gguf_id(g, "tokenizer.ggml.bos_token_id");
    d.eos = gguf_id(g, "tokenizer.ggml.eos_token_id");
    d.unk = gguf_id(g, "tokenizer.ggml.unknown_token_id");
    d.pad = gguf_id(g, "tokenizer.ggml.padding_token_id");
    d.add_bos = gguf_flag(g, "tokenizer.ggml.add_bos_token");
    d.add_eos = gguf_flag(g, "tokenizer.ggml.add_eos_token");
    d.add_space_prefix = gguf_flag(g, "tokenizer.ggml.add_space_prefix");
    if (weft_gguf_find(g, "tokenizer.chat_template") >= 0)
        weft_gguf_get_str(g, "tokenizer.chat_template", &d.chat_template, NULL, NULL);
    st = weft_tokenizer_from_vocab(&d, &m->tokenizer, err);
    if (!st) take_specials(m);
out:
    free(tv);
    free(tl);
    free(sc);
    free(ty);
    free(mv);
    free(ml);
    return st;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

weft_status weft_model_tokenizer_from_dir(weft_model *m, weft_err *err) {
    char tj[4096], tc[4096], jj[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", m->path);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", m->path);
    snprintf(jj, sizeof jj, "%s/chat_template.jinja", m->path);
    if (!exists(tj)) return WEFT_OK; /* no tokenizer: token ids only */
    weft_status st = weft_tokenizer_load_hf(tj, exists(tc) ? tc : NULL, &m->tokenizer, err);
    if (st) return st;
    take_specials(m);
    if (exists(jj)) { /* transformers prefers chat_template.jinja over the config's field */
        free(m->chat_template);
        m->chat_template = NULL;
        st = weft_read_file(jj, &m->chat_template, NULL, err);
        if (st) return st;
    }
    return WEFT_OK;
}

void weft_model_tokenizer_free(weft_model *m) {
    weft_tokenizer_free(m->tokenizer);
}

weft_status weft_model_encode(const weft_model *m, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t **ids, int *n, weft_err *err) {
    if (!m->tokenizer) return weft_err_set(err, WEFT_ENOTSUP, "this model has no tokenizer: send token ids");
    weft_tok_vec v = {0};
    unsigned flags = (add_special ? WEFT_TOK_ADD_SPECIAL : 0) | (parse_special ? WEFT_TOK_PARSE_SPECIAL : 0);
    weft_status st = weft_tokenizer_encode(m->tokenizer, text, len, flags, &v, err);
    if (st) {
        weft_tok_vec_free(&v);
        return st;
    }
    *ids = v.ids ? v.ids : malloc(sizeof(int32_t));
    *n = (int)v.n;
    return WEFT_OK;
}

struct weft_model_detok {
    weft_detok d;
    bool render_special;
    char *buf; /* [bound] */
    size_t bound;
};

weft_model_detok *weft_model_detok_new(const weft_model *m) {
    if (!m->tokenizer) return NULL;
    weft_model_detok *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    /* A completion continues a prompt: never strip a leading space at its start. */
    weft_detok_init(&t->d, m->tokenizer, WEFT_DETOK_KEEP_LEADING_SPACE);
    t->bound = weft_detok_bound(m->tokenizer);
    return t;
}

size_t weft_model_detok_feed(weft_model_detok *t, int32_t id, bool skip_special, char *out, size_t cap) {
    size_t n = 0;
    t->d.flags = WEFT_DETOK_KEEP_LEADING_SPACE | (skip_special ? 0 : WEFT_DETOK_RENDER_SPECIAL);
    if (cap < t->bound) return t->bound;
    if (weft_detok_feed(&t->d, id, out, cap, &n, NULL)) return 0;
    return n;
}

size_t weft_model_detok_flush(weft_model_detok *t, char *out, size_t cap) {
    return weft_detok_flush(&t->d, out, cap);
}

void weft_model_detok_free(weft_model_detok *t) {
    free(t);
}
