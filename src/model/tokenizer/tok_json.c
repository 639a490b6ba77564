/* A tokenizer from HF tokenizer.json (+ tokenizer_config.json): the model (BPE vocabulary and merges), the
 * added tokens, and the pipeline sections (tok_json_pipe.c). Ids follow HF's rules: added tokens carry
 * their ids; an added token with the text of a model token must have the same id. */
#include "tok_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static weft_status oom(const tok_jctx *c) {
    return weft_err_set(c->err, WEFT_ENOMEM, "%s: out of memory", c->src);
}

/* Ids beyond this are rejected: real vocabularies stay under a million, and the id arrays are dense. */
#define TOK_MAX_ID (1 << 24)

static weft_status id_of(const tok_jctx *c, json_t *v, const char *path, int32_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return tok_jfail(c, WEFT_EFORMAT, path, "token id must be a non-negative integer");
    if (json_integer_value(v) >= TOK_MAX_ID)
        return tok_jfail(c, WEFT_EFORMAT, path, "token id %lld is implausibly large (limit %d)",
                         (long long)json_integer_value(v), TOK_MAX_ID);
    *out = (int32_t)json_integer_value(v);
    return WEFT_OK;
}

static int64_t max_id(const tok_jctx *c, json_t *vocab, json_t *added, weft_status *st) {
    int64_t mx = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        int32_t id = 0;
        if ((*st = id_of(c, v, "model.vocab", &id))) return -1;
        if (id > mx) mx = id;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        int32_t id = 0;
        if ((*st = id_of(c, json_object_get(json_array_get(added, i), "id"), "added_tokens[].id", &id)))
            return -1;
        if (id > mx) mx = id;
    }
    return mx;
}

/* Splits a merge entry ("a b" or ["a", "b"]) into its two token texts. */
static weft_status merge_parts(const tok_jctx *c, json_t *m, size_t i, const char **a, size_t *la,
                               const char **b, size_t *lb) {
    char path[64];
    snprintf(path, sizeof path, "model.merges[%zu]", i);
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = memchr(s, ' ', n);
        /* HF: exactly two parts separated by one space */
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
            return tok_jfail(c, WEFT_EFORMAT, path, "merge \"%.*s\" is not two tokens separated by a space",
                             (int)(n > 64 ? 64 : n), s);
        *a = s;
        *la = (size_t)(sp - s);
        *b = sp + 1;
        *lb = n - *la - 1;
        return WEFT_OK;
    }
    json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(x) || !json_is_string(y))
        return tok_jfail(c, WEFT_EFORMAT, path, "merge must be \"a b\" or [\"a\", \"b\"]");
    *a = json_string_value(x);
    *la = json_string_length(x);
    *b = json_string_value(y);
    *lb = json_string_length(y);
    return WEFT_OK;
}

static weft_status load_merges(const tok_jctx *c, weft_tokenizer *t, json_t *merges) {
    size_t n = json_array_size(merges);
    if (n > INT32_MAX) return tok_jfail(c, WEFT_EFORMAT, "model.merges", "too many merges");
    if (tok_pairs_init(&t->merges, n)) return oom(c);
    tok_buf cat = {0};
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if ((st = merge_parts(c, json_array_get(merges, i), i, &a, &la, &b, &lb))) break;
        int32_t ia = tok_map_get(&t->model, t, a, la), ib = tok_map_get(&t->model, t, b, lb);
        cat.n = 0;
        if (tok_buf_put(&cat, a, la) || tok_buf_put(&cat, b, lb)) {
            st = oom(c);
            break;
        }
        int32_t iab = tok_map_get(&t->model, t, cat.p, cat.n);
        if (ia < 0 || ib < 0 || iab < 0) {
            char path[64];
            snprintf(path, sizeof path, "model.merges[%zu]", i);
            const char *what = ia < 0 ? a : ib < 0 ? b : cat.p;
            size_t wl = ia < 0 ? la : ib < 0 ? lb : cat.n;
            st = tok_jfail(c, WEFT_EFORMAT, path, "merge token \"%.*s\" is not in the vocabulary",
                           (int)(wl > 64 ? 64 : wl), what);
            break;
        }
        tok_pairs_put(&t->merges, ia, ib, (int32_t)i, iab);
    }
    tok_buf_free(&cat);
    return st;
}

static weft_status load_model(const tok_jctx *c, weft_tokenizer *t, json_t *model, json_t *added,
                              uint8_t **in_model, json_t **merges_out) {
    if (!json_is_object(model)) return tok_jfail(c, WEFT_EFORMAT, "model", "missing or not an object");
    const char *ty, *unk, *pfx, *sfx;
    weft_status st;
    if ((st = tok_jstr(c, model, "model", "type", &ty, NULL))) return st;
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!ty && merges) ty = "BPE"; /* older files omit the type */
    if (!ty) return tok_jfail(c, WEFT_EFORMAT, "model", "missing \"type\"");
    if (strcmp(ty, "BPE") != 0)
        return tok_jfail(c, WEFT_ENOTSUP, "model.type", "model type \"%s\" is not supported", ty);
    if (!json_is_object(vocab)) return tok_jfail(c, WEFT_EFORMAT, "model.vocab", "must be an object");
    if (!json_is_array(merges)) return tok_jfail(c, WEFT_EFORMAT, "model.merges", "must be an array");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        return tok_jfail(c, WEFT_ENOTSUP, "model.dropout", "BPE dropout is not supported");
    if ((st = tok_jstr(c, model, "model", "unk_token", &unk, NULL)) ||
        (st = tok_jstr(c, model, "model", "continuing_subword_prefix", &pfx, NULL)) ||
        (st = tok_jstr(c, model, "model", "end_of_word_suffix", &sfx, NULL)) ||
        (st = tok_jbool(c, model, "model", "fuse_unk", false, &t->fuse_unk)) ||
        (st = tok_jbool(c, model, "model", "byte_fallback", false, &t->byte_fallback)) ||
        (st = tok_jbool(c, model, "model", "ignore_merges", false, &t->ignore_merges)))
        return st;
    if ((pfx && *pfx) || (sfx && *sfx))
        return tok_jfail(c, WEFT_ENOTSUP, "model",
                         "continuing_subword_prefix / end_of_word_suffix are not supported");
    int64_t mx = max_id(c, vocab, added, &st);
    if (st) return st;
    if ((st = tok_alloc_ids(t, mx + 1, c->err))) return st;
    *in_model = calloc((size_t)t->n_vocab, 1);
    if (!*in_model) return oom(c);
    tok_buf ab = {0};
    const char *k;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach(vocab, k, kl, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if ((*in_model)[id]) {
            tok_buf_free(&ab);
            return tok_jfail(c, WEFT_EFORMAT, "model.vocab", "id %d is used twice", id);
        }
        (*in_model)[id] = 1;
        t->attr[id] = WEFT_TOKEN_NORMAL;
        if (tok_set_text(t, &ab, id, k, kl)) {
            tok_buf_free(&ab);
            return oom(c);
        }
    }
    /* added tokens: their own text where the model has none */
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *content = json_object_get(a, "content");
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        if (!json_is_string(content)) {
            tok_buf_free(&ab);
            return tok_jfail(c, WEFT_EFORMAT, "added_tokens", "entry %zu has no \"content\" string", i);
        }
        if ((*in_model)[id]) continue; /* compared once the arena is final */
        if (t->attr[id]) {
            tok_buf_free(&ab);
            return tok_jfail(c, WEFT_EFORMAT, "added_tokens", "id %d is used twice", id);
        }
        t->attr[id] = WEFT_TOKEN_USER_DEFINED; /* refined below */
        if (tok_set_text(t, &ab, id, json_string_value(content), json_string_length(content))) {
            tok_buf_free(&ab);
            return oom(c);
        }
    }
    tok_finish_arena(t, &ab);
    if (tok_map_init(&t->model, json_object_size(vocab)) || tok_map_init(&t->all, (size_t)t->n_vocab))
        return oom(c);
    for (int64_t id = 0; id < t->n_vocab; id++) {
        if (!(*in_model)[id]) continue;
        if (tok_map_put(&t->model, t, (int32_t)id, false, NULL) ||
            tok_map_put(&t->all, t, (int32_t)id, false, NULL))
            return oom(c);
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = tok_map_get(&t->model, t, unk, strlen(unk));
        if (t->unk_id < 0)
            return tok_jfail(c, WEFT_EFORMAT, "model.unk_token", "\"%s\" is not in the vocabulary", unk);
    }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_tok[b] = t->byte_fallback ? tok_map_get(&t->model, t, hex, 6) : -1;
        if (t->byte_tok[b] >= 0) t->attr[t->byte_tok[b]] |= WEFT_TOKEN_BYTE;
    }
    *merges_out = merges;
    return WEFT_OK;
}

/* Added tokens: attributes, the `all` map (added wins), and the raw / normalized matchers. */
static weft_status load_added(const tok_jctx *c, weft_tokenizer *t, json_t *added, const uint8_t *in_model) {
    size_t n = json_array_size(added);
    tok_added *raw = calloc(n + 1, sizeof *raw), *nrm = calloc(n + 1, sizeof *nrm);
    int32_t nraw = 0, nnrm = 0;
    weft_status st = WEFT_OK;
    tok_buf narena = {0};
    size_t *noff = calloc(n + 1, sizeof *noff);
    tok_buf tmp = {0};
    if (!raw || !nrm || !noff) st = oom(c);
    for (size_t i = 0; i < n && !st; i++) {
        json_t *a = json_array_get(added, i), *content = json_object_get(a, "content");
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        const char *s = json_string_value(content);
        size_t len = json_string_length(content);
        if (in_model[id] && (t->len[id] != len || memcmp(tok_text(t, id), s, len) != 0)) {
            st = tok_jfail(
                c, WEFT_EFORMAT, "added_tokens", "id %d is \"%.*s\" but the model has \"%.*s\" there", id,
                (int)(len > 48 ? 48 : len), s, (int)(t->len[id] > 48 ? 48 : t->len[id]), tok_text(t, id));
            break;
        }
        bool special, lstrip, rstrip, normalized, single;
        if ((st = tok_jbool(c, a, "added_tokens[]", "special", false, &special)) ||
            (st = tok_jbool(c, a, "added_tokens[]", "lstrip", false, &lstrip)) ||
            (st = tok_jbool(c, a, "added_tokens[]", "rstrip", false, &rstrip)) ||
            (st = tok_jbool(c, a, "added_tokens[]", "normalized", !special, &normalized)) ||
            (st = tok_jbool(c, a, "added_tokens[]", "single_word", false, &single)))
            break;
        t->attr[id] = (uint8_t)((t->attr[id] & WEFT_TOKEN_BYTE) |
                                (special ? WEFT_TOKEN_CONTROL : WEFT_TOKEN_USER_DEFINED));
        if (tok_map_put(&t->all, t, id, true, NULL)) {
            st = oom(c);
            break;
        }
        tok_added e = {.id = id,
                       .flags = (uint8_t)((special ? TOK_ADD_SPECIAL : 0) | (lstrip ? TOK_ADD_LSTRIP : 0) |
                                          (rstrip ? TOK_ADD_RSTRIP : 0) | (single ? TOK_ADD_SINGLE_WORD : 0)),
                       .text = tok_text(t, id),
                       .len = (uint32_t)len};
        if (!normalized) {
            raw[nraw++] = e;
            continue;
        }
        /* HF matches normalized=true tokens against the normalized text, by their normalized spelling */
        if ((st = tok_normalize(t, s, len, &tmp, c->err))) break;
        noff[nnrm] = narena.n;
        e.len = (uint32_t)tmp.n;
        nrm[nnrm++] = e;
        if (tok_buf_put(&narena, tmp.p, tmp.n)) st = oom(c);
    }
    if (!st) {
        if (!narena.p && tok_buf_put(&narena, "", 1)) st = oom(c);
        t->norm_arena = narena.p;
        narena.p = NULL;
        for (int32_t i = 0; i < nnrm; i++) nrm[i].text = t->norm_arena + noff[i];
    }
    if (!st) st = tok_matcher_build(&t->raw, raw, nraw, c->err);
    if (!st) st = tok_matcher_build(&t->normalized, nrm, nnrm, c->err);
    free(raw);
    free(nrm);
    free(noff);
    tok_buf_free(&narena);
    tok_buf_free(&tmp);
    return st;
}

/* tokenizer_config.json: special token strings, add_bos_token / add_eos_token, chat_template. */
static weft_status special_of(const tok_jctx *c, weft_tokenizer *t, json_t *cfg, const char *key,
                              int32_t *id) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return WEFT_OK;
    if (json_is_object(v)) v = json_object_get(v, "content"); /* serialized AddedToken */
    if (!json_is_string(v)) return tok_jfail(c, WEFT_EFORMAT, key, "must be a string or {\"content\": ...}");
    int32_t x = tok_map_get(&t->all, t, json_string_value(v), json_string_length(v));
    if (x < 0)
        return tok_jfail(c, WEFT_EFORMAT, key, "\"%s\" is not in the vocabulary", json_string_value(v));
    *id = x;
    return WEFT_OK;
}

static weft_status load_config(const tok_jctx *c, weft_tokenizer *t, json_t *cfg) {
    weft_status st;
    if ((st = special_of(c, t, cfg, "bos_token", &t->bos)) ||
        (st = special_of(c, t, cfg, "eos_token", &t->eos)) ||
        (st = special_of(c, t, cfg, "pad_token", &t->pad)) ||
        (st = special_of(c, t, cfg, "unk_token", &t->unk)))
        return st;
    /* transformers (LlamaTokenizerFast.update_post_processor) rebuilds the template from these flags */
    json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
    if (json_is_boolean(ab)) {
        if (json_is_true(ab) && t->bos < 0)
            return tok_jfail(c, WEFT_EFORMAT, "add_bos_token", "true without a bos_token");
        t->n_prefix = 0;
        if (json_is_true(ab)) t->prefix[t->n_prefix++] = t->bos;
    }
    if (json_is_boolean(ae)) {
        if (json_is_true(ae) && t->eos < 0)
            return tok_jfail(c, WEFT_EFORMAT, "add_eos_token", "true without an eos_token");
        t->n_suffix = 0;
        if (json_is_true(ae)) t->suffix[t->n_suffix++] = t->eos;
    }
    json_t *tpl = json_object_get(cfg, "chat_template");
    if (json_is_array(tpl)) { /* [{"name": ..., "template": ...}]: the default one */
        json_t *found = NULL;
        for (size_t i = 0; i < json_array_size(tpl); i++) {
            json_t *e = json_array_get(tpl, i), *name = json_object_get(e, "name");
            if (json_is_string(name) && !strcmp(json_string_value(name), "default"))
                found = json_object_get(e, "template");
        }
        if (!json_is_string(found))
            return tok_jfail(c, WEFT_EFORMAT, "chat_template", "the list has no \"default\" entry");
        tpl = found;
    }
    if (tpl && !json_is_null(tpl)) {
        if (!json_is_string(tpl)) return tok_jfail(c, WEFT_EFORMAT, "chat_template", "must be a string");
        if (!(t->chat_template = strdup(json_string_value(tpl)))) return oom(c);
    }
    return WEFT_OK;
}

static weft_status parse_doc(const tok_jctx *c, const char *text, size_t len, json_t **out) {
    json_error_t je;
    *out = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!*out)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: invalid JSON at line %d column %d: %s", c->src,
                            je.line, je.column, je.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: the top level is not a JSON object", c->src);
    }
    return WEFT_OK;
}

weft_status weft_tokenizer_from_hf_json(const char *json, size_t len, const char *config_json,
                                        size_t config_len, const char *source, weft_tokenizer **out,
                                        weft_err *err) {
    if (!json || !out) return weft_err_set(err, WEFT_EINVAL, "tokenizer: NULL argument");
    *out = NULL;
    tok_jctx c = {.src = source ? source : "tokenizer.json", .err = err};
    json_t *root = NULL, *cfg = NULL;
    uint8_t *in_model = NULL;
    weft_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return oom(&c);
    t->bos = t->eos = t->unk = t->pad = t->unk_id = -1;
    weft_status st = parse_doc(&c, json, len, &root);
    json_t *added = json_object_get(root, "added_tokens"), *merges = NULL;
    if (!st && added && !json_is_null(added) && !json_is_array(added))
        st = tok_jfail(&c, WEFT_EFORMAT, "added_tokens", "must be an array");
    if (!st) st = load_model(&c, t, json_object_get(root, "model"), added, &in_model, &merges);
    if (!st) st = load_merges(&c, t, merges);
    if (!st) st = tok_json_normalizer(&c, t, json_object_get(root, "normalizer"));
    if (!st) st = load_added(&c, t, added, in_model);
    if (!st) st = tok_json_pre_tokenizer(&c, t, json_object_get(root, "pre_tokenizer"));
    if (!st) st = tok_json_post_processor(&c, t, json_object_get(root, "post_processor"));
    tok_dec_desc dd;
    if (!st) st = tok_json_decoder(&c, t, json_object_get(root, "decoder"), &dd);
    if (!st && t->n_prefix > 0) t->bos = t->prefix[0];
    if (!st && t->n_suffix > 0) t->eos = t->suffix[t->n_suffix - 1];
    if (!st && config_json) {
        tok_jctx cc = {.src = "tokenizer_config.json", .err = err};
        st = parse_doc(&cc, config_json, config_len, &cfg);
        if (!st) st = load_config(&cc, t, cfg);
    }
    if (!st) st = tok_build_pieces(t, &dd, err);
    json_decref(root);
    json_decref(cfg);
    free(in_model);
    if (st) {
        weft_tokenizer_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

weft_status weft_tokenizer_load_hf(const char *tokenizer_json_path, const char *config_path,
                                   weft_tokenizer **out, weft_err *err) {
    if (!tokenizer_json_path || !out) return weft_err_set(err, WEFT_EINVAL, "tokenizer: NULL argument");
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    weft_status st = weft_read_file(tokenizer_json_path, &json, &len, err);
    if (!st && config_path) st = weft_read_file(config_path, &cfg, &cfg_len, err);
    if (!st) st = weft_tokenizer_from_hf_json(json, len, cfg, cfg_len, tokenizer_json_path, out, err);
    free(json);
    free(cfg);
    return st;
}
