/* src/server/request_chat.c — chat messages → flattened messages → chat template → prompt ids (SPEC §3).
 * Roles system/developer/user/assistant/tool; content is a string or a list of text parts (concatenated);
 * image/audio parts are a 400 naming the part. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static const char *const k_roles[] = {"system", "developer", "user", "assistant", "tool"};

static bool flatten_content(json_t *m, size_t i, const char *role, srv_buf *text, srv_error *e) {
    char param[64];
    json_t *c = json_object_get(m, "content");
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c || json_is_null(c)) {
        json_t *tc = json_object_get(m, "tool_calls");
        if (!strcmp(role, "assistant") && json_is_array(tc) && json_array_size(tc)) return true;
        return srv_fail(e, 400, param, NULL, "`%s` is required", param);
    }
    if (json_is_string(c)) return srv_buf_add(text, json_string_value(c), json_string_length(c));
    if (!json_is_array(c))
        return srv_fail(e, 400, param, NULL, "`%s` must be a string or a list of content parts", param);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *part = json_array_get(c, j);
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
        json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!json_is_string(type))
            return srv_fail(e, 400, param, NULL, "`%s` must be an object with a string `type`", param);
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
            json_t *s = json_object_get(part, "text");
            if (!json_is_string(s)) return srv_fail(e, 400, param, NULL, "`%s.text` must be a string", param);
            if (!srv_buf_add(text, json_string_value(s), json_string_length(s)))
                return srv_fail(e, 500, NULL, NULL, "out of memory");
        } else if (strstr(t, "image") || strstr(t, "audio") || strstr(t, "video") || !strcmp(t, "file")) {
            return srv_fail(e, 400, param, NULL, "`%s`: %.40s input is not supported by this model", param,
                            t);
        } else {
            return srv_fail(e, 400, param, NULL, "`%s`: unknown content part type \"%.40s\"", param, t);
        }
    }
    return true;
}

/* messages → a JSON array of {"role","content":string, other keys as sent}. */
static json_t *normalize_messages(json_t *root, srv_error *e) {
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        srv_fail(e, 400, "messages", NULL, "`messages` must be a non-empty list");
        return NULL;
    }
    json_t *out = json_array();
    srv_buf text = {0};
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            srv_fail(e, 400, param, NULL, "`%s` must be an object", param);
            goto fail;
        }
        json_t *role = json_object_get(m, "role");
        const char *r = json_is_string(role) ? json_string_value(role) : NULL;
        bool known = false;
        for (size_t k = 0; r && k < sizeof k_roles / sizeof k_roles[0]; k++) known |= !strcmp(r, k_roles[k]);
        if (!known) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            srv_fail(e, 400, param, NULL, "`%s` must be one of system, developer, user, assistant, tool",
                     param);
            goto fail;
        }
        text.len = 0;
        if (!srv_buf_add(&text, "", 0) || !flatten_content(m, i, r, &text, e)) goto fail;
        json_t *nm = json_copy(m);
        if (!nm || json_object_set_new(nm, "content", json_stringn(text.p, text.len)) ||
            json_array_append_new(out, nm)) {
            srv_fail(e, 400, param, NULL, "`%s.content` is not valid UTF-8", param);
            goto fail;
        }
    }
    srv_buf_free(&text);
    return out;
fail:
    srv_buf_free(&text);
    json_decref(out);
    return NULL;
}

/* Template variables: chat_template_kwargs as sent, plus enable_thinking and reasoning_effort. */
static json_t *template_kwargs(const weft_server_config *cfg, json_t *root, srv_error *e) {
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        srv_fail(e, 400, "chat_template_kwargs", NULL, "`chat_template_kwargs` must be an object");
        return NULL;
    }
    json_t *out = kw && json_is_object(kw) ? json_copy(kw) : json_object();
    json_t *et = json_object_get(out, "enable_thinking");
    if (et && !json_is_boolean(et)) {
        json_decref(out);
        srv_fail(e, 400, "chat_template_kwargs.enable_thinking", NULL,
                 "`chat_template_kwargs.enable_thinking` must be a boolean");
        return NULL;
    }
    if (!et && cfg->thinking >= 0) json_object_set_new(out, "enable_thinking", json_boolean(cfg->thinking));
    json_t *re = json_object_get(root, "reasoning_effort");
    if (re && !json_is_null(re)) {
        if (!json_is_string(re)) {
            json_decref(out);
            srv_fail(e, 400, "reasoning_effort", NULL, "`reasoning_effort` must be a string");
            return NULL;
        }
        if (!json_object_get(out, "reasoning_effort")) json_object_set(out, "reasoning_effort", re);
    }
    return out;
}

/* True when the rendered prompt ends inside an open <think> block (the template opened it). */
static bool ends_in_think(const char *s) {
    const char *open = NULL, *close = NULL, *p;
    for (p = s; (p = strstr(p, "<think>")); p++) open = p;
    for (p = s; (p = strstr(p, "</think>")); p++) close = p;
    return open && (!close || close < open);
}

bool srv_parse_chat(const weft_model_service *svc, const weft_server_config *cfg, json_t *root,
                    srv_request *r, srv_error *e) {
    if (!svc->has_tokenizer)
        return srv_fail(e, 400, "messages", NULL,
                        "this model has no tokenizer: use /v1/completions with a token-id prompt");
    if (!svc->has_chat_template) /* text prompts work: only the template is missing */
        return srv_fail(e, 400, "messages", NULL,
                        "this model has no chat template: use /v1/completions with a text prompt, or start "
                        "the server with --chat-template FILE");
    json_t *msgs = normalize_messages(root, e);
    if (!msgs) return false;
    json_t *kw = template_kwargs(cfg, root, e);
    if (!kw) {
        json_decref(msgs);
        return false;
    }
    char *mj = json_dumps(msgs, JSON_COMPACT), *kj = json_dumps(kw, JSON_COMPACT);
    json_decref(msgs);
    json_decref(kw);
    char *text = NULL;
    weft_err err = {0};
    bool ok = false;
    if (!mj || !kj) {
        srv_fail(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    if (svc->render_chat(svc->ctx, mj, kj, true, &text, &err)) {
        /* The template's own messages already say "chat template line N: ..." */
        bool named = !strncmp(err.msg, "chat template", 13);
        srv_fail(e, 400, "messages", NULL, "%s%s", named ? "" : "chat template: ", err.msg);
        goto out;
    }
    r->prompts = calloc(1, sizeof *r->prompts);
    if (!r->prompts) {
        srv_fail(e, 500, NULL, NULL, "out of memory");
        goto out;
    }
    int32_t *ids = NULL;
    int n = 0;
    /* The template writes BOS and special markers as text: parse them, add nothing. */
    if (svc->tokenize(svc->ctx, text, strlen(text), false, true, &ids, &n, &err)) {
        srv_fail(e, 400, "messages", NULL, "the rendered chat could not be tokenized: %s", err.msg);
        goto out;
    }
    r->prompts[0].ids = ids;
    r->prompts[0].n = n;
    r->n_prompts = 1;
    r->split_reasoning = svc->thinks;
    r->start_in_reasoning = svc->thinks && ends_in_think(text);
    ok = true;
out:
    free(mj);
    free(kj);
    free(text);
    return ok;
}
