/* src/server/request.c — parse and validate a completions / chat request body (SPEC §3).
 * Every known field with a wrong type or value is a 400 naming the field; unknown fields are ignored. All of
 * it happens before anything is submitted, so a bad request never reaches the engine. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

bool srv_get_bool(json_t *o, const char *key, bool *out, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return srv_fail(e, 400, key, NULL, "`%s` must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

bool srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given,
                 srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) return srv_fail(e, 400, key, NULL, "`%s` must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        if (hi == LLONG_MAX) return srv_fail(e, 400, key, NULL, "`%s` must be >= %lld, got %lld", key, lo, x);
        return srv_fail(e, 400, key, NULL, "`%s` must be between %lld and %lld, got %lld", key, lo, hi, x);
    }
    *out = x;
    if (given) *given = true;
    return true;
}

/* A number (integer or real) in [lo, hi]; excl_lo makes the low end exclusive. */
static bool get_num(json_t *o, const char *key, double lo, double hi, bool excl_lo, double *out,
                    srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return srv_fail(e, 400, key, NULL, "`%s` must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || (excl_lo && x == lo)) {
        if (hi == DBL_MAX)
            return srv_fail(e, 400, key, NULL, "`%s` must be %s %g, got %g", key, excl_lo ? ">" : ">=", lo,
                            x);
        if (excl_lo)
            return srv_fail(e, 400, key, NULL, "`%s` must be > %g and <= %g, got %g", key, lo, hi, x);
        return srv_fail(e, 400, key, NULL, "`%s` must be between %g and %g, got %g", key, lo, hi, x);
    }
    *out = x;
    return true;
}

static bool parse_stop(json_t *root, srv_request *r, srv_error *e) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return true;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SRV_MAX_STOPS)
            return srv_fail(e, 400, "stop", NULL, "`stop` has %zu strings; at most %d are allowed", n,
                            SRV_MAX_STOPS);
        items = NULL;
    } else if (!json_is_string(v)) {
        return srv_fail(e, 400, "stop", NULL, "`stop` must be a string or a list of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s)) return srv_fail(e, 400, "stop", NULL, "`stop[%zu]` must be a string", i);
        size_t len = json_string_length(s);
        if (len == 0) return srv_fail(e, 400, "stop", NULL, "`stop` strings must not be empty");
        if (len > SRV_MAX_STOP_LEN)
            return srv_fail(e, 400, "stop", NULL, "`stop` strings are limited to %d bytes", SRV_MAX_STOP_LEN);
        if (memchr(json_string_value(s), 0, len))
            return srv_fail(e, 400, "stop", NULL, "`stop` strings must not contain NUL");
        r->stops[r->n_stops] = strdup(json_string_value(s));
        if (!r->stops[r->n_stops]) return srv_fail(e, 500, NULL, NULL, "out of memory");
        r->n_stops++;
    }
    return true;
}

static bool parse_bias(json_t *root, const weft_model_service *svc, srv_request *r, srv_error *e) {
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v)) return true;
    if (!json_is_object(v))
        return srv_fail(e, 400, "logit_bias", NULL,
                        "`logit_bias` must be an object mapping token ids to numbers");
    size_t n = json_object_size(v);
    if (!n) return true;
    r->bias = calloc(n, sizeof *r->bias);
    if (!r->bias) return srv_fail(e, 500, NULL, NULL, "out of memory");
    const char *k;
    json_t *b;
    json_object_foreach(v, k, b) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(k, &end, 10);
        if (!*k || *end || errno || id < 0 || id >= svc->vocab_size)
            return srv_fail(e, 400, "logit_bias", NULL,
                            "`logit_bias` key \"%.40s\" is not a token id in 0..%d", k, svc->vocab_size - 1);
        if (!json_is_number(b) || !isfinite(json_number_value(b)) || fabs(json_number_value(b)) > 100)
            return srv_fail(e, 400, "logit_bias", NULL,
                            "`logit_bias[%lld]` must be a number between -100 and 100", id);
        r->bias[r->n_bias].id = (int32_t)id;
        r->bias[r->n_bias].bias = json_number_value(b);
        r->n_bias++;
    }
    r->sampling.logit_bias = r->bias;
    r->sampling.n_logit_bias = r->n_bias;
    return true;
}

static bool parse_logprobs(json_t *root, srv_request *r, srv_error *e) {
    json_t *v = json_object_get(root, "logprobs");
    long long top = 0;
    bool top_given = false;
    if (r->kind == SRV_CHAT) {
        bool want = false;
        if (!srv_get_bool(root, "logprobs", &want, e)) return false;
        if (!srv_get_int(root, "top_logprobs", 0, WEFT_MAX_TOP_LOGPROBS, &top, &top_given, e)) return false;
        if (top_given && !want && top > 0)
            return srv_fail(e, 400, "top_logprobs", NULL, "`top_logprobs` needs `logprobs: true`");
        r->logprobs = want ? (int)top : -1;
        return true;
    }
    /* completions: the legacy integer (number of top entries); a boolean is accepted as 0 / none */
    if (!v || json_is_null(v)) return true;
    if (json_is_boolean(v)) {
        r->logprobs = json_is_true(v) ? 0 : -1;
        return true;
    }
    if (!srv_get_int(root, "logprobs", 0, WEFT_MAX_TOP_LOGPROBS, &top, NULL, e)) return false;
    r->logprobs = (int)top;
    return true;
}

static bool check_model(json_t *root, const weft_model_service *svc, srv_error *e) {
    json_t *v = json_object_get(root, "model");
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) return srv_fail(e, 400, "model", NULL, "`model` must be a string");
    const char *m = json_string_value(v);
    if (!strcmp(m, svc->model_id)) return true;
    for (int i = 0; i < svc->n_aliases; i++)
        if (!strcmp(m, svc->aliases[i])) return true;
    return srv_fail(e, 404, "model", "model_not_found",
                    "The model `%.200s` does not exist; this server serves `%.200s`", m, svc->model_id);
}

/* Takes ownership of ids (also on failure). */
static bool add_prompt(srv_request *r, int32_t *ids, int n, const char *text, size_t text_len, srv_error *e) {
    srv_prompt *p = &r->prompts[r->n_prompts++];
    p->ids = ids;
    p->n = n;
    if (text) {
        p->text = malloc(text_len + 1);
        if (!p->text) return srv_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(p->text, text, text_len);
        p->text[text_len] = 0;
    }
    return true;
}

static bool text_prompt(const weft_model_service *svc, srv_request *r, json_t *s, srv_error *e) {
    if (!svc->has_tokenizer)
        return srv_fail(e, 400, "prompt", NULL, "this model has no tokenizer: send `prompt` as token ids");
    int32_t *ids = NULL;
    int n = 0;
    weft_err err = {0};
    if (svc->tokenize(svc->ctx, json_string_value(s), json_string_length(s), true, true, &ids, &n, &err))
        return srv_fail(e, 400, "prompt", NULL, "`prompt` could not be tokenized: %s", err.msg);
    return add_prompt(r, ids, n, json_string_value(s), json_string_length(s), e);
}

static bool id_prompt(const weft_model_service *svc, srv_request *r, json_t *a, srv_error *e) {
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(a, i);
        long long id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || id >= svc->vocab_size) {
            free(ids);
            if (!json_is_integer(t))
                return srv_fail(e, 400, "prompt", NULL, "`prompt` token ids must be integers");
            return srv_fail(e, 400, "prompt", NULL,
                            "`prompt` token id %lld is outside the vocabulary (0..%d)", id,
                            svc->vocab_size - 1);
        }
        ids[i] = (int32_t)id;
    }
    return add_prompt(r, ids, (int)n, NULL, 0, e);
}

static bool parse_prompt(const weft_model_service *svc, json_t *root, srv_request *r, srv_error *e) {
    json_t *v = json_object_get(root, "prompt");
    const char *shape =
        "`prompt` must be a string, a list of token ids, or a list of strings or of token-id lists";
    if (!v || json_is_null(v)) return srv_fail(e, 400, "prompt", NULL, "`prompt` is required");
    size_t n = 1;
    bool all_int = true, all_str = true;
    if (json_is_array(v)) {
        bool all_arr = true;
        n = json_array_size(v);
        if (!n) return srv_fail(e, 400, "prompt", NULL, "`prompt` must not be an empty list");
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(v, i);
            all_int &= json_is_integer(x);
            all_str &= json_is_string(x);
            all_arr &= json_is_array(x);
        }
        if (all_int)
            n = 1;
        else if (!all_str && !all_arr)
            return srv_fail(e, 400, "prompt", NULL, "%s", shape);
    } else if (!json_is_string(v)) {
        return srv_fail(e, 400, "prompt", NULL, "%s", shape);
    }
    if (n * (size_t)r->n > SRV_MAX_CHOICES)
        return srv_fail(e, 400, "prompt", NULL, "%zu prompts x n=%d choices is more than the %d allowed", n,
                        r->n, SRV_MAX_CHOICES);
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts) return srv_fail(e, 500, NULL, NULL, "out of memory");
    if (json_is_string(v)) return text_prompt(svc, r, v, e);
    if (all_int) return id_prompt(svc, r, v, e);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!(all_str ? text_prompt(svc, r, x, e) : id_prompt(svc, r, x, e))) return false;
    }
    return true;
}

/* Empty prompts, context window and the reply limit of each prompt (SPEC §3, §4.6). */
static bool size_prompts(const weft_model_service *svc, const weft_server_config *cfg, srv_request *r,
                         bool given, long long max_tokens, srv_error *e) {
    int ctx = svc->context_length;
    for (int i = 0; i < r->n_prompts; i++) {
        srv_prompt *p = &r->prompts[i];
        if (p->n == 0) {
            if (r->kind == SRV_CHAT)
                return srv_fail(e, 400, "messages", NULL,
                                "the chat template rendered no tokens: nothing to continue");
            if (!p->text) /* a token-id prompt gets no BOS added: it is exactly the ids sent */
                return srv_fail(e, 400, "prompt", NULL,
                                "the token-id prompt is empty: send at least one token id%s",
                                svc->add_bos ? " (an empty text prompt is just the BOS token)" : "");
            return srv_fail(e, 400, "prompt", NULL,
                            "the prompt is empty and this model adds no BOS token: nothing to continue");
        }
        long long need = (long long)p->n + (given ? max_tokens : 1);
        if (need > ctx) {
            if (given)
                return srv_fail(
                    e, 400, "max_tokens", "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, you requested %lld "
                    "tokens (%d in the prompt, %lld for the completion). Reduce the prompt or "
                    "max_tokens.",
                    ctx, need, p->n, max_tokens);
            return srv_fail(
                e, 400, r->kind == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                "This model's maximum context length is %d tokens. However, the prompt has %d tokens, "
                "which leaves no room for a completion.",
                ctx, p->n);
        }
        if (given)
            p->max_tokens = (int)max_tokens;
        else {
            long long room = ctx - p->n, lim = cfg->max_tokens > 0 ? cfg->max_tokens : room;
            p->max_tokens = (int)(lim < room ? lim : room);
        }
    }
    return true;
}

static bool parse_fields(const weft_model_service *svc, json_t *root, srv_request *r, srv_error *e) {
    long long x = 0;
    bool given = false;
    if (!srv_get_int(root, "n", 1, 8, &x, &given, e)) return false;
    if (given) r->n = (int)x;
    weft_sampling *s = &r->sampling;
    if (!get_num(root, "temperature", 0, DBL_MAX, false, &s->temperature, e)) return false;
    /* top_p = 0 would keep no candidate: the sampler takes (0, 1] (SPEC §5.1 step 6), as vLLM does */
    if (!get_num(root, "top_p", 0, 1, true, &s->top_p, e)) return false;
    if (!srv_get_int(root, "top_k", -1, INT_MAX, &x, &given, e)) return false;
    if (given) s->top_k = x < 0 ? 0 : (int)x; /* -1 = all, as vLLM */
    if (!get_num(root, "min_p", 0, 1, false, &s->min_p, e)) return false;
    if (!get_num(root, "presence_penalty", -2, 2, false, &s->presence_penalty, e)) return false;
    if (!get_num(root, "frequency_penalty", -2, 2, false, &s->frequency_penalty, e)) return false;
    if (!get_num(root, "repetition_penalty", 0, DBL_MAX, true, &s->repetition_penalty, e)) return false;
    if (!srv_get_int(root, "seed", LLONG_MIN, LLONG_MAX, &x, &r->seed_given, e)) return false;
    if (r->seed_given) r->seed = (uint64_t)x; /* two's complement (SPEC §5.3) */
    if (!parse_stop(root, r, e)) return false;
    if (!srv_get_bool(root, "ignore_eos", &r->ignore_eos, e)) return false;
    if (!srv_get_bool(root, "stream", &r->stream, e)) return false;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return srv_fail(e, 400, "stream_options", NULL, "`stream_options` must be an object");
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return srv_fail(e, 400, "stream_options.include_usage", NULL,
                            "`stream_options.include_usage` must be a boolean");
        r->include_usage = iu && json_is_true(iu);
    }
    if (!parse_bias(root, svc, r, e) || !parse_logprobs(root, r, e)) return false;
    bool draft = true;
    if (!srv_get_bool(root, "draft", &draft, e)) return false;
    r->draft = r->draft && draft;
    if (!srv_get_bool(root, "return_token_ids", &r->return_token_ids, e)) return false;
    if (r->kind == SRV_COMPLETIONS) {
        if (!srv_get_bool(root, "echo", &r->echo, e)) return false;
        if (r->echo && r->logprobs >= 0)
            return srv_fail(
                e, 400, "echo", NULL,
                "`echo` together with `logprobs` is not supported (prompt logprobs are not computed)");
    }
    return true;
}

/* The top-level key whose value holds byte offset pos of body (jansson's error position), into key. Only
 * the bytes before pos are scanned; jansson parsed them as JSON, so strings and nesting are well formed. */
static bool key_at(const char *body, size_t len, size_t pos, char *key, size_t cap) {
    int depth = 0;
    bool in_str = false, esc = false, is_key = false, want_key = false, have = false;
    size_t start = 0;
    for (size_t i = 0; i < pos && i < len; i++) {
        char ch = body[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (ch == '\\')
                esc = true;
            else if (ch == '"') {
                in_str = false;
                if (is_key) {
                    snprintf(key, cap, "%.*s", (int)(i - start), body + start);
                    have = true;
                }
            }
            continue;
        }
        if (ch == '"') {
            in_str = true;
            is_key = depth == 1 && want_key;
            want_key = false;
            start = i + 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
            want_key = ch == '{' && depth == 1;
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',' && depth == 1) {
            want_key = true;
        }
    }
    return have && depth >= 1;
}

/* A body jansson refused. A number it cannot hold (an integer beyond int64, a real beyond double) is a bad
 * value of a field, not malformed JSON: the 400 names the field. */
static void json_refused(const char *body, size_t len, const json_error_t *je, srv_error *e) {
    char key[64];
    if (json_error_code(je) == json_error_numeric_overflow && je->position > 0 &&
        key_at(body, len, (size_t)je->position, key, sizeof key)) {
        bool integer = strstr(je->text, "integer") != NULL;
        srv_fail(e, 400, key, NULL, "`%s` is out of range: %s (%s)", key, je->text,
                 integer ? "integers must fit in 64 bits" : "numbers must fit in a double");
        return;
    }
    srv_fail(e, 400, NULL, NULL, "malformed JSON body: %s (line %d, column %d)", je->text, je->line,
             je->column);
}

/* Choices run as one engine job each, all submitted at once: more than the engine can ever hold (running +
 * queued) would be refused with 503 even on an idle server, so it is a 400 naming `n` with the numbers. */
static bool check_streams(const weft_model_service *svc, const srv_request *r, srv_error *e) {
    long long need = (long long)r->n_prompts * r->n;
    if (svc->max_streams <= 0 || need <= svc->max_streams) return true;
    return srv_fail(e, 400, r->n > 1 || r->n_prompts == 1 ? "n" : "prompt", NULL,
                    "`n` = %d choices for each of %d prompts needs %lld streams at once; this server holds "
                    "at most %d (--parallel + --max-queue)",
                    r->n, r->n_prompts, need, svc->max_streams);
}

bool srv_parse_request(const weft_model_service *svc, const weft_server_config *cfg, srv_kind kind,
                       const char *body, size_t len, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n = 1;
    r->logprobs = -1;
    r->draft = cfg->drafts;
    r->sampling = cfg->defaults;
    r->sampling.logit_bias = NULL;
    r->sampling.n_logit_bias = 0;
    r->sampling.logprobs = -1;
    r->sampling.seed = 0;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    bool ok = false;
    if (!root) {
        json_refused(body, len, &je, e);
        goto out;
    }
    if (!json_is_object(root)) {
        srv_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
        goto out;
    }
    if (!check_model(root, svc, e) || !parse_fields(svc, root, r, e)) goto out;
    long long mt = 0, mct = 0;
    bool mt_given = false, mct_given = false;
    if (!srv_get_int(root, "max_tokens", 0, INT_MAX, &mt, &mt_given, e)) goto out;
    if (!srv_get_int(root, "max_completion_tokens", 0, INT_MAX, &mct, &mct_given, e)) goto out;
    if (mct_given) mt = mct;
    if (kind == SRV_CHAT ? !srv_parse_chat(svc, cfg, root, r, e) : !parse_prompt(svc, root, r, e)) goto out;
    if (!check_streams(svc, r, e)) goto out;
    if (!size_prompts(svc, cfg, r, mt_given || mct_given, mt, e)) goto out;
    r->sampling.logprobs = r->logprobs;
    ok = true;
out:
    json_decref(root);
    if (!ok) srv_request_free(r);
    return ok;
}

void srv_request_free(srv_request *r) {
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    free(r->bias);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    memset(r, 0, sizeof *r);
}
