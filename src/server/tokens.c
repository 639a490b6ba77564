/* src/server/tokens.c — POST /tokenize and /detokenize (SPEC §3). */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static json_t *load_object(const char *body, size_t len, srv_error *e) {
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        srv_fail(e, 400, NULL, NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        srv_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static char *dump(json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* {"content"|"prompt": string, "add_special_tokens": bool = true} → {"tokens","count","max_model_len"} */
char *srv_tokenize_reply(const weft_model_service *svc, const char *body, size_t len, srv_error *e) {
    json_t *root = load_object(body, len, e);
    if (!root) return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    int n = 0;
    bool add = true;
    const char *key = json_object_get(root, "content") ? "content" : "prompt";
    json_t *t = json_object_get(root, key);
    if (!srv_get_bool(root, "add_special_tokens", &add, e)) goto done;
    if (!json_is_string(t)) {
        srv_fail(e, 400, key, NULL, "`%s` must be a string", key);
        goto done;
    }
    if (!svc->has_tokenizer) {
        srv_fail(e, 400, key, NULL, "this model has no tokenizer");
        goto done;
    }
    weft_err err = {0};
    if (svc->tokenize(svc->ctx, json_string_value(t), json_string_length(t), add, true, &ids, &n, &err)) {
        srv_fail(e, 400, key, NULL, "`%s` could not be tokenized: %s", key, err.msg);
        goto done;
    }
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    json_t *r = json_object();
    json_object_set_new(r, "tokens", a);
    json_object_set_new(r, "count", json_integer(n));
    json_object_set_new(r, "max_model_len", json_integer(svc->context_length));
    out = dump(r);
    if (!out) srv_fail(e, 500, NULL, NULL, "out of memory");
done:
    free(ids);
    json_decref(root);
    return out;
}

/* {"tokens": [ids]} → {"content": text} */
char *srv_detokenize_reply(const weft_model_service *svc, const char *body, size_t len, srv_error *e) {
    json_t *root = load_object(body, len, e);
    if (!root) return NULL;
    json_t *t = json_object_get(root, "tokens");
    char *out = NULL;
    srv_buf raw = {0}, text = {0};
    void *dt = NULL;
    if (!json_is_array(t)) {
        srv_fail(e, 400, "tokens", NULL, "`tokens` must be a list of token ids");
        goto done;
    }
    if (!svc->has_tokenizer) {
        srv_fail(e, 400, "tokens", NULL, "this model has no tokenizer");
        goto done;
    }
    for (size_t i = 0; i < json_array_size(t); i++) {
        json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= svc->vocab_size) {
            srv_fail(e, 400, "tokens", NULL, "`tokens[%zu]` is not a token id in 0..%d", i,
                     svc->vocab_size - 1);
            goto done;
        }
    }
    dt = svc->detok_new(svc->ctx, NULL, 0);
    if (!dt) {
        srv_fail(e, 500, NULL, NULL, "could not create a detokenizer");
        goto done;
    }
    bool ok = srv_buf_add(&raw, "", 0);
    for (size_t i = 0; i < json_array_size(t) && ok; i++) {
        size_t n = 0;
        const char *b = svc->detok_feed(svc->ctx, dt, (int32_t)json_integer_value(json_array_get(t, i)), &n);
        if (b && n) ok = srv_buf_add(&raw, b, n);
    }
    ok = ok && srv_buf_add_utf8_lossy(&text, raw.p, raw.len) && srv_buf_add(&text, "", 0);
    json_t *r = json_object();
    if (ok) json_object_set_new(r, "content", json_stringn(text.p, text.len));
    out = ok ? dump(r) : (json_decref(r), NULL);
    if (!out) srv_fail(e, 500, NULL, NULL, "out of memory");
done:
    if (dt) svc->detok_free(svc->ctx, dt);
    srv_buf_free(&raw);
    srv_buf_free(&text);
    json_decref(root);
    return out;
}
