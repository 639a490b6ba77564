/* tokenizer.json pipeline sections: normalizer, pre_tokenizer, post_processor, decoder. The serialized
 * forms are those of HF tokenizers (serde of the normalizers, pre_tokenizers, processors and decoders
 * modules). Every component or option not implemented here fails with WEFT_ENOTSUP naming it. */
#include "tok_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NORM 16

weft_status tok_jfail(const tok_jctx *c, weft_status code, const char *path, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return weft_err_set(c->err, code, "%s: %s: %s", c->src, path, msg);
}

weft_status tok_jbool(const tok_jctx *c, json_t *obj, const char *path, const char *key, bool def,
                      bool *out) {
    json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v || json_is_null(v)) return WEFT_OK;
    if (!json_is_boolean(v)) return tok_jfail(c, WEFT_EFORMAT, path, "\"%s\" must be a boolean", key);
    *out = json_is_true(v);
    return WEFT_OK;
}

weft_status tok_jstr(const tok_jctx *c, json_t *obj, const char *path, const char *key, const char **out,
                     size_t *len) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) return WEFT_OK;
    if (!json_is_string(v)) return tok_jfail(c, WEFT_EFORMAT, path, "\"%s\" must be a string", key);
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return WEFT_OK;
}

static weft_status type_of(const tok_jctx *c, json_t *v, const char *path, const char **type) {
    if (!json_is_object(v)) return tok_jfail(c, WEFT_EFORMAT, path, "must be an object or null");
    const char *ty;
    weft_status st = tok_jstr(c, v, path, "type", &ty, NULL);
    if (st) return st;
    if (!ty) return tok_jfail(c, WEFT_EFORMAT, path, "missing \"type\"");
    *type = ty;
    return WEFT_OK;
}

static weft_status oom(const tok_jctx *c) {
    return weft_err_set(c->err, WEFT_ENOMEM, "%s: out of memory", c->src);
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        if (n) memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* {"String": s} or {"Regex": r}: *is_regex tells which. */
static weft_status pattern_of(const tok_jctx *c, json_t *obj, const char *path, const char **pat, size_t *len,
                              bool *is_regex) {
    json_t *p = json_object_get(obj, "pattern");
    if (!json_is_object(p))
        return tok_jfail(c, WEFT_EFORMAT, path, "\"pattern\" must be {\"String\"|\"Regex\": ...}");
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    json_t *v = s ? s : r;
    if (!json_is_string(v))
        return tok_jfail(c, WEFT_EFORMAT, path, "\"pattern\" must hold a String or a Regex");
    *pat = json_string_value(v);
    *len = json_string_length(v);
    *is_regex = !s;
    return WEFT_OK;
}

/* The Replace component (normalizer and decoder): a pattern and its "content" (NULL when absent; each
 * section has its own rules on what it accepts). */
typedef struct replace_spec {
    const char *pat, *content;
    size_t pl, cl;
    bool is_re;
} replace_spec;

static weft_status replace_of(const tok_jctx *c, json_t *v, const char *path, replace_spec *r) {
    weft_status st = pattern_of(c, v, path, &r->pat, &r->pl, &r->is_re);
    return st ? st : tok_jstr(c, v, path, "content", &r->content, &r->cl);
}

/* ---- the walk every section shares ----
 * A section is one component or a {"type": "Sequence", <key>: [...]} of them, nested at most 4 deep (a
 * bound on the recursion that HF's serde does not have). What differs between sections is the array's
 * key, whether a null component is skipped, and what one component adds (add, with the section's ctx). */

typedef weft_status (*component_fn)(const tok_jctx *c, void *ctx, json_t *v, const char *ty,
                                    const char *path);

typedef struct section {
    const char *key;  /* the Sequence's array, also named in its sub-paths */
    const char *what; /* plural noun for messages */
    bool skip_null;   /* false: a null component fails in type_of ("must be an object or null") */
    component_fn add; /* one non-Sequence component of type ty */
} section;

static weft_status walk(const tok_jctx *c, const section *s, void *ctx, json_t *v, const char *path,
                        int depth) {
    if (s->skip_null && (!v || json_is_null(v))) return WEFT_OK;
    if (depth > 4) return tok_jfail(c, WEFT_ENOTSUP, path, "%s nested too deeply", s->what);
    const char *ty = NULL;
    weft_status st = type_of(c, v, path, &ty);
    if (st) return st;
    if (strcmp(ty, "Sequence") != 0) return s->add(c, ctx, v, ty, path);
    json_t *list = json_object_get(v, s->key);
    if (!json_is_array(list))
        return tok_jfail(c, WEFT_EFORMAT, path, "Sequence needs a \"%s\" array", s->key);
    for (size_t i = 0; i < json_array_size(list); i++) {
        char sub[128];
        int w = snprintf(sub, sizeof sub, "%s.%s[%zu]", path, s->key, i);
        if (w < 0 || (size_t)w >= sizeof sub)
            return tok_jfail(c, WEFT_ENOTSUP, path, "%s nested too deeply", s->what);
        if ((st = walk(c, s, ctx, json_array_get(list, i), sub, depth + 1))) return st;
    }
    return WEFT_OK;
}

/* ---- normalizer ---- */

static weft_status add_norm(const tok_jctx *c, void *ctx, json_t *v, const char *ty, const char *path) {
    weft_tokenizer *t = ctx;
    weft_status st;
    if (t->n_norm == MAX_NORM) return tok_jfail(c, WEFT_ENOTSUP, path, "more than %d normalizers", MAX_NORM);
    tok_norm *nm = &t->norm[t->n_norm];
    memset(nm, 0, sizeof *nm);
    if (!strcmp(ty, "NFC"))
        nm->kind = TOK_NORM_NFC;
    else if (!strcmp(ty, "NFD"))
        nm->kind = TOK_NORM_NFD;
    else if (!strcmp(ty, "NFKC"))
        nm->kind = TOK_NORM_NFKC;
    else if (!strcmp(ty, "NFKD"))
        nm->kind = TOK_NORM_NFKD;
    else if (!strcmp(ty, "Lowercase"))
        nm->kind = TOK_NORM_LOWER;
    else if (!strcmp(ty, "Strip")) {
        nm->kind = TOK_NORM_STRIP;
        if ((st = tok_jbool(c, v, path, "strip_left", true, &nm->left)) ||
            (st = tok_jbool(c, v, path, "strip_right", true, &nm->right)))
            return st;
    } else if (!strcmp(ty, "Prepend")) {
        const char *s;
        size_t n;
        if ((st = tok_jstr(c, v, path, "prepend", &s, &n))) return st;
        if (!s) return tok_jfail(c, WEFT_EFORMAT, path, "Prepend needs \"prepend\"");
        nm->kind = TOK_NORM_PREPEND;
        if (!(nm->a = dupn(s, n))) return oom(c);
        nm->alen = n;
    } else if (!strcmp(ty, "Replace")) {
        replace_spec r;
        if ((st = replace_of(c, v, path, &r))) return st;
        if (!r.content) return tok_jfail(c, WEFT_EFORMAT, path, "Replace needs \"content\"");
        nm->kind = TOK_NORM_REPLACE;
        if (!(nm->a = dupn(r.pat, r.pl)) || !(nm->b = dupn(r.content, r.cl))) return oom(c);
        nm->alen = r.pl;
        nm->blen = r.cl;
        t->n_norm++; /* owned from here on, so a failure below frees it */
        if (r.is_re) return tok_regex_compile(r.pat, r.pl, "normalizer Replace", &nm->re, c->err);
        return WEFT_OK;
    } else {
        return tok_jfail(c, WEFT_ENOTSUP, path, "normalizer type \"%s\" is not supported", ty);
    }
    t->n_norm++;
    return WEFT_OK;
}

weft_status tok_json_normalizer(const tok_jctx *c, weft_tokenizer *t, json_t *v) {
    t->norm = calloc(MAX_NORM, sizeof *t->norm);
    if (!t->norm) return oom(c);
    static const section NORM = {"normalizers", "normalizers", true, add_norm};
    return walk(c, &NORM, t, v, "normalizer", 0);
}

/* ---- pre-tokenizer ---- */

#define MAX_PRE 16
static const char RE_PUNCT[] = "[\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}]";

static weft_status behavior_of(const tok_jctx *c, json_t *v, const char *path, tok_split_behavior def,
                               tok_split_behavior *out) {
    const char *b;
    weft_status st = tok_jstr(c, v, path, "behavior", &b, NULL);
    if (st) return st;
    *out = def;
    if (!b) return WEFT_OK;
    static const struct {
        const char *name;
        tok_split_behavior b;
    } NAMES[] = {{"Removed", TOK_SPLIT_REMOVED},
                 {"Isolated", TOK_SPLIT_ISOLATED},
                 {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV},
                 {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
                 {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (!strcmp(b, NAMES[i].name)) {
            *out = NAMES[i].b;
            return WEFT_OK;
        }
    return tok_jfail(c, WEFT_ENOTSUP, path, "split behavior \"%s\" is not supported", b);
}

static weft_status new_pre(const tok_jctx *c, weft_tokenizer *t, const char *path, tok_pre **out) {
    if (t->n_pre == MAX_PRE) return tok_jfail(c, WEFT_ENOTSUP, path, "more than %d pre-tokenizers", MAX_PRE);
    *out = &t->pre[t->n_pre++];
    memset(*out, 0, sizeof **out);
    return WEFT_OK;
}

static weft_status split_re(const tok_jctx *c, weft_tokenizer *t, const char *path, const char *re,
                            tok_split_behavior beh) {
    tok_pre *p = NULL;
    weft_status st = new_pre(c, t, path, &p);
    if (st) return st;
    p->kind = TOK_PRE_SPLIT;
    p->behavior = beh;
    return tok_regex_compile(re, strlen(re), path, &p->re, c->err);
}

/* Metaspace replacement and prepend scheme, shared with the decoder. */
static weft_status metaspace_opts(const tok_jctx *c, json_t *v, const char *path, char repl[8],
                                  size_t *repl_len, int *scheme) {
    const char *r, *ps;
    size_t rl;
    weft_status st;
    if ((st = tok_jstr(c, v, path, "replacement", &r, &rl)) ||
        (st = tok_jstr(c, v, path, "prepend_scheme", &ps, NULL)))
        return st;
    if (!r || rl == 0 || rl > 4)
        return tok_jfail(c, WEFT_EFORMAT, path, "Metaspace needs a one-character \"replacement\"");
    memcpy(repl, r, rl);
    *repl_len = rl;
    if (ps) {
        if (!strcmp(ps, "always"))
            *scheme = TOK_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first"))
            *scheme = TOK_PREPEND_FIRST;
        else if (!strcmp(ps, "never"))
            *scheme = TOK_PREPEND_NEVER;
        else
            return tok_jfail(c, WEFT_ENOTSUP, path, "prepend_scheme \"%s\" is not supported", ps);
    } else {
        bool aps;
        if ((st = tok_jbool(c, v, path, "add_prefix_space", true, &aps))) return st;
        *scheme = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    }
    return WEFT_OK;
}

static weft_status add_pre(const tok_jctx *c, void *ctx, json_t *v, const char *ty, const char *path) {
    weft_tokenizer *t = ctx;
    weft_status st;
    tok_pre *p = NULL;
    if (!strcmp(ty, "Split")) {
        const char *pat;
        size_t pl;
        bool is_re, invert;
        tok_split_behavior beh;
        if ((st = pattern_of(c, v, path, &pat, &pl, &is_re)) ||
            (st = behavior_of(c, v, path, TOK_SPLIT_REMOVED, &beh)) ||
            (st = tok_jbool(c, v, path, "invert", false, &invert)))
            return st;
        if (!json_object_get(v, "behavior"))
            return tok_jfail(c, WEFT_EFORMAT, path, "Split needs \"behavior\"");
        if (!is_re && pl == 0)
            return tok_jfail(c, WEFT_ENOTSUP, path, "an empty String pattern is not supported");
        if ((st = new_pre(c, t, path, &p))) return st;
        p->kind = TOK_PRE_SPLIT;
        p->behavior = beh;
        p->invert = invert;
        if (is_re) return tok_regex_compile(pat, pl, path, &p->re, c->err);
        /* a String pattern is a literal: compile it quoted */
        int ec;
        PCRE2_SIZE eo;
        p->re = pcre2_compile((PCRE2_SPTR)pat, pl, PCRE2_UTF | PCRE2_LITERAL, &ec, &eo, NULL);
        if (!p->re) return tok_jfail(c, WEFT_ENOTSUP, path, "cannot compile the String pattern");
        return WEFT_OK;
    }
    if (!strcmp(ty, "ByteLevel")) {
        bool aps, use_re;
        if ((st = tok_jbool(c, v, path, "add_prefix_space", true, &aps)) ||
            (st = tok_jbool(c, v, path, "use_regex", true, &use_re)))
            return st;
        if ((st = new_pre(c, t, path, &p))) return st;
        p->kind = TOK_PRE_BYTELEVEL;
        p->add_prefix_space = aps;
        if (use_re)
            return tok_regex_compile(TOK_GPT2_PATTERN, strlen(TOK_GPT2_PATTERN), path, &p->re, c->err);
        return WEFT_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        bool split;
        if ((st = new_pre(c, t, path, &p))) return st;
        p->kind = TOK_PRE_METASPACE;
        if ((st = metaspace_opts(c, v, path, p->repl, &p->repl_len, &p->prepend_scheme)) ||
            (st = tok_jbool(c, v, path, "split", true, &split)))
            return st;
        p->split = split;
        return WEFT_OK;
    }
    if (!strcmp(ty, "Digits")) {
        bool individual;
        if ((st = tok_jbool(c, v, path, "individual_digits", false, &individual))) return st;
        /* HF: split on char::is_numeric (Nd, Nl, No), Isolated per digit or Contiguous runs */
        return split_re(c, t, path, "\\p{N}", individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS);
    }
    if (!strcmp(ty, "WhitespaceSplit")) return split_re(c, t, path, "\\s", TOK_SPLIT_REMOVED);
    if (!strcmp(ty, "Punctuation")) {
        tok_split_behavior beh;
        if ((st = behavior_of(c, v, path, TOK_SPLIT_ISOLATED, &beh))) return st;
        return split_re(c, t, path, RE_PUNCT, beh);
    }
    return tok_jfail(c, WEFT_ENOTSUP, path, "pre-tokenizer type \"%s\" is not supported", ty);
}

weft_status tok_json_pre_tokenizer(const tok_jctx *c, weft_tokenizer *t, json_t *v) {
    t->pre = calloc(MAX_PRE, sizeof *t->pre);
    if (!t->pre) return oom(c);
    static const section PRE = {"pretokenizers", "pre-tokenizers", true, add_pre};
    return walk(c, &PRE, t, v, "pre_tokenizer", 0);
}

/* ---- post-processor ---- */

typedef struct ids_list {
    int32_t v[64];
    int n;
} ids_list;

static weft_status ids_add(const tok_jctx *c, ids_list *l, int32_t id, const char *path) {
    if (l->n == 64) return tok_jfail(c, WEFT_ENOTSUP, path, "more than 64 template ids");
    l->v[l->n++] = id;
    return WEFT_OK;
}

static weft_status token_id_of(const tok_jctx *c, weft_tokenizer *t, json_t *pair, const char *path,
                               int32_t *id) {
    /* RobertaProcessing / BertProcessing: ["<s>", 0] */
    json_t *n = json_array_get(pair, 1);
    if (!json_is_array(pair) || !json_is_integer(n) || json_integer_value(n) < 0 ||
        json_integer_value(n) >= t->n_vocab)
        return tok_jfail(c, WEFT_EFORMAT, path, "must be [\"token\", id] with an id in the vocabulary");
    *id = (int32_t)json_integer_value(n);
    return WEFT_OK;
}

static weft_status template_ids(const tok_jctx *c, weft_tokenizer *t, json_t *v, const char *path,
                                ids_list *pre, ids_list *post) {
    json_t *single = json_object_get(v, "single"), *specials = json_object_get(v, "special_tokens");
    if (!json_is_array(single))
        return tok_jfail(c, WEFT_EFORMAT, path, "TemplateProcessing needs a \"single\" array");
    bool seen_a = false;
    weft_status st;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *it = json_array_get(single, i);
        json_t *sp = json_object_get(it, "SpecialToken"), *sq = json_object_get(it, "Sequence");
        if (sq) {
            json_t *sid = json_object_get(sq, "id");
            if (seen_a || !json_is_string(sid) || strcmp(json_string_value(sid), "A") != 0)
                return tok_jfail(c, WEFT_ENOTSUP, path,
                                 "the single template must hold the sequence $A exactly once");
            seen_a = true;
            continue;
        }
        json_t *name = json_object_get(sp, "id");
        if (!json_is_string(name))
            return tok_jfail(c, WEFT_EFORMAT, path, "template item %zu is malformed", i);
        json_t *def = json_object_get(specials, json_string_value(name));
        json_t *ids = json_object_get(def, "ids");
        if (!json_is_array(ids))
            return tok_jfail(c, WEFT_EFORMAT, path, "special token \"%s\" is not in \"special_tokens\"",
                             json_string_value(name));
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *x = json_array_get(ids, k);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= t->n_vocab)
                return tok_jfail(c, WEFT_EFORMAT, path,
                                 "special token \"%s\" has an id outside the vocabulary",
                                 json_string_value(name));
            if ((st = ids_add(c, seen_a ? post : pre, (int32_t)json_integer_value(x), path))) return st;
        }
    }
    if (!seen_a) return tok_jfail(c, WEFT_EFORMAT, path, "the single template has no $A");
    return WEFT_OK;
}

/* The ids the processors so far put before and after the sequence. */
typedef struct post_ctx {
    weft_tokenizer *t;
    ids_list pre, post;
} post_ctx;

static weft_status add_post(const tok_jctx *c, void *ctx, json_t *v, const char *ty, const char *path) {
    post_ctx *pc = ctx;
    weft_tokenizer *t = pc->t;
    ids_list *pre = &pc->pre, *post = &pc->post;
    weft_status st;
    if (!strcmp(ty, "ByteLevel")) return WEFT_OK; /* offsets only */
    ids_list p = {.n = 0}, s = {.n = 0};
    if (!strcmp(ty, "TemplateProcessing")) {
        if ((st = template_ids(c, t, v, path, &p, &s))) return st;
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        int32_t cls = 0, sep = 0;
        if ((st = token_id_of(c, t, json_object_get(v, "cls"), path, &cls)) ||
            (st = token_id_of(c, t, json_object_get(v, "sep"), path, &sep)))
            return st;
        p.v[p.n++] = cls;
        s.v[s.n++] = sep;
    } else {
        return tok_jfail(c, WEFT_ENOTSUP, path, "post-processor type \"%s\" is not supported", ty);
    }
    /* a later processor wraps the result of the earlier ones */
    if (pre->n + p.n > 64 || post->n + s.n > 64)
        return tok_jfail(c, WEFT_ENOTSUP, path, "more than 64 template ids");
    memmove(pre->v + p.n, pre->v, (size_t)pre->n * sizeof(int32_t));
    memcpy(pre->v, p.v, (size_t)p.n * sizeof(int32_t));
    pre->n += p.n;
    memcpy(post->v + post->n, s.v, (size_t)s.n * sizeof(int32_t));
    post->n += s.n;
    return WEFT_OK;
}

weft_status tok_json_post_processor(const tok_jctx *c, weft_tokenizer *t, json_t *v) {
    static const section POST = {"processors", "post-processors", true, add_post};
    post_ctx pc = {.t = t, .pre = {.n = 0}, .post = {.n = 0}};
    weft_status st = walk(c, &POST, &pc, v, "post_processor", 0);
    if (st) return st;
    t->prefix = malloc(sizeof(int32_t) * (size_t)(pc.pre.n + 1));
    t->suffix = malloc(sizeof(int32_t) * (size_t)(pc.post.n + 1));
    if (!t->prefix || !t->suffix) return oom(c);
    memcpy(t->prefix, pc.pre.v, sizeof(int32_t) * (size_t)pc.pre.n);
    memcpy(t->suffix, pc.post.v, sizeof(int32_t) * (size_t)pc.post.n);
    t->n_prefix = pc.pre.n;
    t->n_suffix = pc.post.n;
    return WEFT_OK;
}

/* ---- decoder ---- */

static weft_status dec_step(const tok_jctx *c, tok_dec_desc *dd, const char *path, tok_dec_step **out) {
    if (dd->n == TOK_MAX_DEC) return tok_jfail(c, WEFT_ENOTSUP, path, "more than %d decoders", TOK_MAX_DEC);
    *out = &dd->step[dd->n++];
    memset(*out, 0, sizeof **out);
    return WEFT_OK;
}

/* fused: a Fuse came earlier, so the text is one token from there on (a later Strip changes meaning) */
typedef struct dec_ctx {
    weft_tokenizer *t;
    tok_dec_desc *dd;
    bool fused;
} dec_ctx;

static weft_status add_dec(const tok_jctx *c, void *ctx, json_t *v, const char *ty, const char *path) {
    dec_ctx *dc = ctx;
    weft_tokenizer *t = dc->t;
    tok_dec_desc *dd = dc->dd;
    weft_status st;
    if (!strcmp(ty, "Fuse")) {
        dc->fused = true;
        return WEFT_OK;
    }
    if (!strcmp(ty, "Strip")) {
        const char *content;
        size_t cl;
        json_t *start = json_object_get(v, "start"), *stop = json_object_get(v, "stop");
        if ((st = tok_jstr(c, v, path, "content", &content, &cl))) return st;
        if (!content || cl == 0 || cl > 4 || !json_is_integer(start) || !json_is_integer(stop) ||
            json_integer_value(start) < 0 || json_integer_value(stop) < 0 || json_integer_value(start) > 64 ||
            json_integer_value(stop) > 64)
            return tok_jfail(c, WEFT_EFORMAT, path,
                             "Strip needs a one-character \"content\" and small \"start\"/\"stop\"");
        if (dc->fused) {
            /* after Fuse the whole text is one token: the strip applies at the start of the text */
            if (json_integer_value(stop) != 0)
                return tok_jfail(c, WEFT_ENOTSUP, path, "Strip with stop > 0 after Fuse cannot be streamed");
            memcpy(t->strip_char, content, cl);
            t->strip_char_len = cl;
            t->strip_count = (uint32_t)json_integer_value(start);
            return WEFT_OK;
        }
        tok_dec_step *s = NULL;
        if ((st = dec_step(c, dd, path, &s))) return st;
        s->kind = TOK_DEC_STRIP;
        memcpy(s->from, content, cl);
        s->from_len = cl;
        s->start = (uint32_t)json_integer_value(start);
        s->stop = (uint32_t)json_integer_value(stop);
        return WEFT_OK;
    }
    if (dc->fused) return tok_jfail(c, WEFT_ENOTSUP, path, "decoder \"%s\" after Fuse is not supported", ty);
    tok_dec_step *s = NULL;
    if (!strcmp(ty, "ByteLevel") || !strcmp(ty, "ByteFallback")) {
        if ((st = dec_step(c, dd, path, &s))) return st;
        s->kind = ty[4] == 'L' ? TOK_DEC_BYTE_LEVEL : TOK_DEC_BYTE_FALLBACK;
        return WEFT_OK;
    }
    if (!strcmp(ty, "Replace")) {
        replace_spec r;
        if ((st = replace_of(c, v, path, &r))) return st;
        if (r.is_re)
            return tok_jfail(c, WEFT_ENOTSUP, path,
                             "a Regex pattern in the Replace decoder is not supported");
        if (!r.content || r.pl == 0 || r.pl >= 16 || r.cl >= 16)
            return tok_jfail(c, WEFT_ENOTSUP, path, "Replace decoder patterns must be 1..15 bytes");
        if ((st = dec_step(c, dd, path, &s))) return st;
        s->kind = TOK_DEC_REPLACE;
        memcpy(s->from, r.pat, r.pl);
        s->from_len = r.pl;
        memcpy(s->to, r.content, r.cl);
        s->to_len = r.cl;
        return WEFT_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        char repl[8];
        size_t rl;
        int scheme;
        if ((st = metaspace_opts(c, v, path, repl, &rl, &scheme)) || (st = dec_step(c, dd, path, &s)))
            return st;
        s->kind = TOK_DEC_REPLACE;
        memcpy(s->from, repl, rl);
        s->from_len = rl;
        s->to[0] = ' ';
        s->to_len = 1;
        /* HF Metaspace decoder: with a prepend scheme, token 0 loses every replacement character */
        s->first_differs = scheme != TOK_PREPEND_NEVER;
        s->first_to_len = 0;
        return WEFT_OK;
    }
    return tok_jfail(c, WEFT_ENOTSUP, path, "decoder type \"%s\" is not supported", ty);
}

weft_status tok_json_decoder(const tok_jctx *c, weft_tokenizer *t, json_t *v, tok_dec_desc *dd) {
    memset(dd, 0, sizeof *dd);
    if (!v || json_is_null(v))
        return tok_jfail(c, WEFT_ENOTSUP, "decoder",
                         "a tokenizer without a decoder (tokens joined by spaces) is not "
                         "supported");
    static const section DEC = {"decoders", "decoders", false, add_dec};
    dec_ctx dc = {.t = t, .dd = dd, .fused = false};
    return walk(c, &DEC, &dc, v, "decoder", 0);
}
