/* Helpers for the tokenizer tests (see test_tok_util.h). */
#include "test_tok_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = n;
    }
    return buf;
}

json_t *tu_load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) fprintf(stderr, "%s: JSON error line %d: %s\n", path, je.line, je.text);
    return j;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    if (n > 40) fprintf(stderr, " ...");
    fputc('\n', stderr);
}

bool tu_ids_match_arr(const char *what, const int32_t *ids, size_t n, const int32_t *want, size_t n_want) {
    bool ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "ids differ: %s\n", what);
        print_ids("got ", ids, n);
        print_ids("want", want, n_want);
    }
    return ok;
}

bool tu_ids_match(const char *what, const int32_t *ids, size_t n, json_t *want) {
    size_t nw = json_array_size(want);
    int32_t *w = malloc((nw + 1) * sizeof *w);
    if (!w) return false;
    for (size_t i = 0; i < nw; i++) w[i] = (int32_t)json_integer_value(json_array_get(want, i));
    bool ok = tu_ids_match_arr(what, ids, n, w, nw);
    free(w);
    return ok;
}

bool tu_utf8_complete(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80)
            k = 1;
        else if (c >= 0xC2 && c <= 0xDF)
            k = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            k = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return false;
        if (i + k > n) return false;
        for (size_t j = 1; j < k; j++) {
            unsigned b = u[i + j];
            if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) return false;
        }
        i += k;
    }
    return true;
}

bool tu_check_encode(const weft_tokenizer *t, const char *what, const char *text, size_t len, unsigned flags,
                     json_t *want) {
    weft_tok_vec v = {0};
    weft_err err = {0};
    weft_status st = weft_tokenizer_encode(t, text, len, flags, &v, &err);
    bool ok = st == WEFT_OK;
    if (!ok)
        fprintf(stderr, "encode failed (%s): %s: %s\n", what, weft_status_name(st), err.msg);
    else
        ok = tu_ids_match(what, v.ids, v.n, want);
    if (!ok) fprintf(stderr, "  text: \"%.*s\"\n", (int)(len > 120 ? 120 : len), text);
    weft_tok_vec_free(&v);
    return ok;
}

/* ---- llama.cpp .inp / .out ---- */

bool tu_llamacpp_cases(const char *inp_path, const char *out_path, tu_cases *c) {
    memset(c, 0, sizeof *c);
    size_t ilen, olen;
    char *inp = tu_read_file(inp_path, &ilen), *out = tu_read_file(out_path, &olen);
    if (!inp || !out) {
        fprintf(stderr, "cannot read %s / %s\n", inp_path, out_path);
        free(inp);
        free(out);
        return false;
    }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    size_t cap = 64;
    c->text = calloc(cap, sizeof *c->text);
    c->text_len = calloc(cap, sizeof *c->text_len);
    c->ids = calloc(cap, sizeof *c->ids);
    c->n_ids = calloc(cap, sizeof *c->n_ids);
    size_t pos = 0;
    char *line = out;
    bool ok = c->text && c->text_len && c->ids && c->n_ids;
    while (ok && pos < ilen) {
        char *hit = memmem(inp + pos, ilen - pos, SEP, sizeof SEP - 1);
        if (!hit) break;
        if (c->n == cap) {
            ok = false;
            break;
        }
        size_t tl = (size_t)(hit - (inp + pos));
        c->text[c->n] = malloc(tl + 1);
        memcpy(c->text[c->n], inp + pos, tl);
        c->text[c->n][tl] = 0;
        c->text_len[c->n] = tl;
        pos = (size_t)(hit - inp) + sizeof SEP - 1;
        /* the matching line of ids */
        char *eol = strchr(line, '\n');
        if (!eol) {
            ok = false;
            break;
        }
        *eol = 0;
        size_t nid = 0, icap = 16;
        int32_t *ids = malloc(icap * sizeof *ids);
        for (char *p = line; ids;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (nid == icap) {
                int32_t *grown = realloc(ids, (icap *= 2) * sizeof *ids);
                if (!grown) {
                    free(ids);
                    ids = NULL;
                    break;
                }
                ids = grown;
            }
            ids[nid++] = (int32_t)v;
            p = end;
        }
        c->ids[c->n] = ids;
        c->n_ids[c->n] = nid;
        c->n++;
        line = eol + 1;
    }
    free(inp);
    free(out);
    if (!ok || c->n == 0) {
        fprintf(stderr, "malformed test pairs %s / %s\n", inp_path, out_path);
        tu_cases_free(c);
        return false;
    }
    return true;
}

void tu_cases_free(tu_cases *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->text[i]);
        free(c->ids[i]);
    }
    free(c->text);
    free(c->text_len);
    free(c->ids);
    free(c->n_ids);
    memset(c, 0, sizeof *c);
}

/* ---- GGUF metadata ---- */

typedef struct rd {
    FILE *f;
    bool bad;
} rd;

static uint64_t rd_u(rd *r, int bytes) {
    unsigned char b[8] = {0};
    if (r->bad || fread(b, 1, (size_t)bytes, r->f) != (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static char *rd_str(rd *r, size_t *len) {
    uint64_t n = rd_u(r, 8);
    if (r->bad || n > (1u << 28)) {
        r->bad = true;
        return NULL;
    }
    char *s = malloc(n + 1);
    if (!s || fread(s, 1, n, r->f) != n) {
        free(s);
        r->bad = true;
        return NULL;
    }
    s[n] = 0;
    if (len) *len = n;
    return s;
}

static int type_size(uint32_t t) {
    switch (t) {
    case 0:
    case 1:
    case 7:
        return 1;
    case 2:
    case 3:
        return 2;
    case 4:
    case 5:
    case 6:
        return 4;
    case 10:
    case 11:
    case 12:
        return 8;
    default:
        return 0;
    }
}

static void rd_skip(rd *r, uint32_t t) {
    if (t == 8) {
        free(rd_str(r, NULL));
    } else if (t == 9) {
        uint32_t at = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        for (uint64_t i = 0; i < n && !r->bad; i++) rd_skip(r, at);
    } else if (type_size(t)) {
        rd_u(r, type_size(t));
    } else {
        r->bad = true;
    }
}

bool tu_gguf_vocab_load(const char *path, tu_gguf_vocab *v) {
    memset(v, 0, sizeof *v);
    weft_vocab_desc_init(&v->d);
    rd r = {fopen(path, "rb"), false};
    if (!r.f) return false;
    char magic[4];
    if (fread(magic, 1, 4, r.f) != 4 || memcmp(magic, "GGUF", 4) != 0) r.bad = true;
    rd_u(&r, 4); /* version */
    rd_u(&r, 8); /* tensors */
    uint64_t nkv = rd_u(&r, 8);
    for (uint64_t k = 0; k < nkv && !r.bad; k++) {
        char *key = rd_str(&r, NULL);
        uint32_t t = (uint32_t)rd_u(&r, 4);
        if (!key) break;
        if (t == 8 && (!strcmp(key, "tokenizer.ggml.model") || !strcmp(key, "tokenizer.ggml.pre") ||
                       !strcmp(key, "tokenizer.chat_template"))) {
            char *s = rd_str(&r, NULL);
            if (key[10] == 'g' && key[15] == 'm')
                v->model = s;
            else if (key[10] == 'g')
                v->pre = s;
            else
                v->chat_template = s;
        } else if (t == 9 &&
                   (!strcmp(key, "tokenizer.ggml.tokens") || !strcmp(key, "tokenizer.ggml.merges"))) {
            bool toks = !strcmp(key, "tokenizer.ggml.tokens");
            uint32_t at = (uint32_t)rd_u(&r, 4);
            uint64_t n = rd_u(&r, 8);
            if (at != 8 || n > (1u << 24)) r.bad = true;
            char **a = r.bad ? NULL : calloc(n + 1, sizeof *a);
            size_t *l = r.bad ? NULL : calloc(n + 1, sizeof *l);
            for (uint64_t i = 0; a && l && i < n && !r.bad; i++) a[i] = rd_str(&r, &l[i]);
            if (toks)
                v->tokens = a, v->token_lens = l, v->d.n_tokens = (int64_t)n;
            else
                v->merges = a, v->merge_lens = l, v->d.n_merges = (int64_t)n;
        } else if (t == 9 &&
                   (!strcmp(key, "tokenizer.ggml.scores") || !strcmp(key, "tokenizer.ggml.token_type"))) {
            uint32_t at = (uint32_t)rd_u(&r, 4);
            uint64_t n = rd_u(&r, 8);
            if ((at != 6 && at != 5) || n > (1u << 24)) r.bad = true;
            bool scores = key[15] == 's';
            float *fa = r.bad || !scores ? NULL : calloc(n + 1, sizeof *fa);
            int32_t *ia = r.bad || scores ? NULL : calloc(n + 1, sizeof *ia);
            for (uint64_t i = 0; (fa || ia) && i < n && !r.bad; i++) {
                uint32_t bits = (uint32_t)rd_u(&r, 4);
                if (fa)
                    memcpy(&fa[i], &bits, 4);
                else
                    ia[i] = (int32_t)bits;
            }
            if (scores)
                v->scores = fa;
            else
                v->types = ia;
        } else if ((t == 4 || t == 5) && !strncmp(key, "tokenizer.ggml.", 15) && strstr(key, "_token_id")) {
            int32_t id = (int32_t)rd_u(&r, 4);
            if (!strcmp(key, "tokenizer.ggml.bos_token_id"))
                v->d.bos = id;
            else if (!strcmp(key, "tokenizer.ggml.eos_token_id"))
                v->d.eos = id;
            else if (!strcmp(key, "tokenizer.ggml.unknown_token_id"))
                v->d.unk = id;
            else if (!strcmp(key, "tokenizer.ggml.padding_token_id"))
                v->d.pad = id;
        } else if (t == 7 && !strncmp(key, "tokenizer.ggml.add_", 19)) {
            int8_t b = (int8_t)rd_u(&r, 1);
            if (!strcmp(key, "tokenizer.ggml.add_bos_token"))
                v->d.add_bos = b;
            else if (!strcmp(key, "tokenizer.ggml.add_eos_token"))
                v->d.add_eos = b;
            else if (!strcmp(key, "tokenizer.ggml.add_space_prefix"))
                v->d.add_space_prefix = b;
        } else {
            rd_skip(&r, t);
        }
        free(key);
    }
    fclose(r.f);
    if (r.bad || !v->model || !v->tokens) {
        fprintf(stderr, "%s: cannot read the GGUF tokenizer metadata\n", path);
        tu_gguf_vocab_free(v);
        return false;
    }
    v->d.model = v->model;
    v->d.pre = v->pre;
    v->d.tokens = (const char *const *)v->tokens;
    v->d.token_lens = v->token_lens;
    v->d.scores = v->scores;
    v->d.token_types = v->types;
    v->d.merges = (const char *const *)v->merges;
    v->d.merge_lens = v->merge_lens;
    v->d.chat_template = v->chat_template;
    return true;
}

void tu_gguf_vocab_free(tu_gguf_vocab *v) {
    for (int64_t i = 0; v->tokens && i < v->d.n_tokens; i++) free(v->tokens[i]);
    for (int64_t i = 0; v->merges && i < v->d.n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->token_lens);
    free(v->merges);
    free(v->merge_lens);
    free(v->scores);
    free(v->types);
    free(v->model);
    free(v->pre);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}
