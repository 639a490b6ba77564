/* template.c — the public API of weft/template.h: compile (normalise, lex, parse), render (JSON context ->
 * values, execute), the transformers-style chat context, and the thinking probe. */
#include <stdlib.h>
#include <string.h>

#include "tmpl.h"

#define DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)512 << 20)
#define DEFAULT_MAX_STEPS  ((size_t)10 * 1000 * 1000)

struct weft_template {
    tarena ar;
    tnode **body;
    size_t nbody;
    bool mentions_think;
};

static bool valid_utf8(const char *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + k > n || (k == 2 && c < 0xc2)) return *bad = i, false;
        uint32_t cp = c & (0x7fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return *bad = i, false;
            cp = (cp << 6) | (p[i + j] & 0x3f);
        }
        if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return *bad = i, false;
        i += k;
    }
    return true;
}

weft_status weft_template_compile(const char *src, size_t len, weft_template **out, weft_err *err) {
    if (!out || (!src && len)) return weft_err_set(err, WEFT_EINVAL, "weft_template_compile: NULL argument");
    *out = NULL;
    size_t bad;
    if (!valid_utf8(src, len, &bad))
        return weft_err_set(err, WEFT_EFORMAT, "chat template: invalid UTF-8 at byte %zu", bad);
    weft_template *t = calloc(1, sizeof *t);
    if (!t) return weft_err_set(err, WEFT_ENOMEM, "chat template: out of memory");
    /* jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False). */
    char *s = ta_alloc(&t->ar, len + 1);
    if (!s) {
        free(t);
        return weft_err_set(err, WEFT_ENOMEM, "chat template: out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    t->mentions_think = strstr(s, "<think>") != NULL;
    ttokens toks = {0};
    weft_err local = {0};
    weft_err *e = err ? err : &local;
    if (tmpl_lex(&t->ar, s, n, &toks, e) || tmpl_parse(&t->ar, &toks, &t->body, &t->nbody, e)) {
        weft_status st = e->code;
        weft_template_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

void weft_template_free(weft_template *t) {
    if (!t) return;
    ta_free_all(&t->ar);
    free(t);
}

weft_status weft_template_render(const weft_template *t, const json_t *ctx, const weft_template_opts *opts,
                                 char **out, size_t *out_len, weft_err *err) {
    if (!t || !out) return weft_err_set(err, WEFT_EINVAL, "weft_template_render: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (ctx && !json_is_object(ctx))
        return weft_err_set(err, WEFT_EINVAL, "chat template: the render context must be a JSON object");
    weft_template_opts o = opts ? *opts : (weft_template_opts){0};
    if (!o.max_output) o.max_output = DEFAULT_MAX_OUTPUT;
    if (!o.max_memory) o.max_memory = DEFAULT_MAX_MEMORY;
    if (!o.max_steps) o.max_steps = DEFAULT_MAX_STEPS;
    weft_err local = {0};
    trender r = {.err = err ? err : &local, .opts = &o, .line = 1};
    r.ar.limit = o.max_memory;
    tbuf buf = {.limit = o.max_output};
    r.out = &buf;
    tframe globals, root;
    tf_init(&globals, NULL);
    tf_init(&root, &globals);
    r.frame = r.root = &root;
    int rc = 0;
    if (ctx) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)ctx, k, v) {
            tv val;
            if ((rc = tv_from_json(&r, v, &val)) || (rc = tf_set(&r, &globals, k, strlen(k), val))) break;
        }
    }
    if (!rc) rc = tmpl_exec_body(&r, t->body, t->nbody);
    if (rc >= 0 && !r.failed) { /* a stray break/continue result (1/2) cannot escape the parser's checks */
        *out = buf.p ? buf.p : strdup("");
        if (!*out)
            rc = tr_oom(&r);
        else {
            if (out_len) *out_len = buf.n;
            buf.p = NULL;
        }
    }
    weft_status st = r.failed ? r.err->code : WEFT_OK;
    tb_free(&buf);
    tf_drop(&root);
    tf_drop(&globals);
    ta_free_all(&r.ar);
    return st;
}

weft_status weft_template_render_chat(const weft_template *t, const weft_chat_params *p,
                                      const weft_template_opts *opts, char **out, size_t *out_len,
                                      weft_err *err) {
    if (!t || !p || !out) return weft_err_set(err, WEFT_EINVAL, "weft_template_render_chat: NULL argument");
    *out = NULL;
    if (!json_is_array(p->messages))
        return weft_err_set(err, WEFT_EINVAL, "chat template: messages must be an array");
    if (p->tools && !json_is_array(p->tools) && !json_is_null(p->tools))
        return weft_err_set(err, WEFT_EINVAL, "chat template: tools must be an array");
    if (p->kwargs && !json_is_object(p->kwargs))
        return weft_err_set(err, WEFT_EINVAL, "chat template: template kwargs must be a JSON object");
    json_t *ctx = json_object();
    if (!ctx) return weft_err_set(err, WEFT_ENOMEM, "chat template: out of memory");
    int bad = 0;
    bad |= json_object_set(ctx, "messages", (json_t *)p->messages);
    bad |= json_object_set_new(ctx, "tools", p->tools ? json_incref((json_t *)p->tools) : json_null());
    bad |= json_object_set_new(ctx, "documents", json_null());
    bad |= json_object_set_new(ctx, "add_generation_prompt", json_boolean(p->add_generation_prompt));
    if (p->bos_token) bad |= json_object_set_new(ctx, "bos_token", json_string(p->bos_token));
    if (p->eos_token) bad |= json_object_set_new(ctx, "eos_token", json_string(p->eos_token));
    if (p->kwargs) {
        bad |= json_object_update(ctx, (json_t *)p->kwargs);
        bad |= json_object_set(ctx, "messages", (json_t *)p->messages);
    }
    weft_status st =
        bad ? weft_err_set(err, WEFT_ENOMEM, "chat template: cannot build the context (bad token string?)")
            : weft_template_render(t, ctx, opts, out, out_len, err);
    json_decref(ctx);
    return st;
}

/* 1 = the text ends inside an open <think> block, 2 = ends with a closed one, 0 = neither. */
static int think_state(const char *s) {
    const char *open = NULL;
    for (const char *p = strstr(s, "<think>"); p; p = strstr(p + 1, "<think>")) open = p;
    if (!open) return 0;
    const char *close = strstr(open, "</think>");
    if (!close) return 1;
    for (const char *q = close + 8; *q; q++)
        if (*q != '\n' && *q != ' ') return 0;
    return 2;
}

weft_status weft_template_probe_thinking(const weft_template *t, weft_template_thinking *out, weft_err *err) {
    if (!t || !out) return weft_err_set(err, WEFT_EINVAL, "weft_template_probe_thinking: NULL argument");
    memset(out, 0, sizeof *out);
    out->mentions_think = t->mentions_think;
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "ping");
    json_t *on = json_pack("{s:b}", "enable_thinking", 1), *off = json_pack("{s:b}", "enable_thinking", 0);
    if (!msgs || !on || !off) {
        json_decref(msgs);
        json_decref(on);
        json_decref(off);
        return weft_err_set(err, WEFT_ENOMEM, "chat template: out of memory");
    }
    const json_t *kw[3] = {NULL, on, off};
    weft_template_opts o = {.now_set = true};
    for (int i = 0; i < 3; i++) {
        weft_chat_params p = {.messages = msgs, .add_generation_prompt = true, .kwargs = kw[i]};
        char *s = NULL;
        if (weft_template_render_chat(t, &p, &o, &s, NULL, NULL) != WEFT_OK) continue;
        int st = think_state(s);
        free(s);
        if (i == 0) out->opens_by_default = st == 1;
        if (i == 1) out->opens_when_enabled = st == 1;
        if (i == 2) out->closed_when_disabled = st == 2;
    }
    json_decref(msgs);
    json_decref(on);
    json_decref(off);
    return WEFT_OK;
}
