/* GGUF tensor names → canonical HF names (docs families-and-formats §6.5; llama.cpp's tensor naming in
 * gguf-py constants.py / tensor_mapping.py), and the tensor set built from a GGUF file. A tensor this table
 * does not know is an error: a silently skipped weight would run a different model. The hybrid architectures
 * (qwen35, qwen35moe, nemotron_h, nemotron_h_moe) are mapped by gguf_hybrid.c, their NextN (MTP) blocks
 * checked and a separate head file added by gguf_mtp.c. */
#include "gguf_hybrid.h"
#include "gguf_impl.h"

#include <stdio.h>
#include <string.h>

enum { ARCH_LLAMA = 1u, ARCH_QWEN3 = 2u };

typedef struct name_rule {
    const char *gguf; /* stem without the .weight/.bias suffix */
    const char *hf;   /* canonical stem */
    unsigned archs;   /* archs where the stem exists */
    unsigned bias;    /* archs where a .bias tensor may exist */
} name_rule;

#define BOTH (ARCH_LLAMA | ARCH_QWEN3)

static const name_rule GLOBAL_RULES[] = {
    {"token_embd", "model.embed_tokens", BOTH, 0},
    {"output_norm", "model.norm", BOTH, 0},
    {"output", "lm_head", BOTH, 0},
    {"rope_freqs", "rope_freqs", ARCH_LLAMA, 0}, /* llama3 rope scaling divisors (§10) */
};

static const name_rule BLOCK_RULES[] = {
    {"attn_norm", "input_layernorm", BOTH, 0},
    {"attn_q", "self_attn.q_proj", BOTH, ARCH_LLAMA},
    {"attn_k", "self_attn.k_proj", BOTH, ARCH_LLAMA},
    {"attn_v", "self_attn.v_proj", BOTH, ARCH_LLAMA},
    {"attn_output", "self_attn.o_proj", BOTH, ARCH_LLAMA},
    {"attn_q_norm", "self_attn.q_norm", ARCH_QWEN3, 0},
    {"attn_k_norm", "self_attn.k_norm", ARCH_QWEN3, 0},
    {"ffn_norm", "post_attention_layernorm", BOTH, 0},
    {"ffn_gate", "mlp.gate_proj", BOTH, ARCH_LLAMA},
    {"ffn_up", "mlp.up_proj", BOTH, ARCH_LLAMA},
    {"ffn_down", "mlp.down_proj", BOTH, ARCH_LLAMA},
};

static unsigned arch_bit(const char *arch) {
    if (!arch) return 0;
    if (strcmp(arch, "llama") == 0) return ARCH_LLAMA;
    if (strcmp(arch, "qwen3") == 0) return ARCH_QWEN3;
    return 0;
}

static const name_rule *find_rule(const name_rule *rules, size_t n, const char *stem, size_t stem_len) {
    for (size_t k = 0; k < n; k++)
        if (strlen(rules[k].gguf) == stem_len && memcmp(rules[k].gguf, stem, stem_len) == 0) return &rules[k];
    return NULL;
}

/* Maps one name; *layer is the block index or -1. Returns false when the name has no mapping. */
static bool map_name(unsigned arch, const char *name, char *out, size_t cap, long *layer, bool *too_small) {
    *layer = -1;
    *too_small = false;
    const char *rest = name;
    if (strncmp(name, "blk.", 4) == 0) {
        const char *p = name + 4;
        long n = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 7) n = n * 10 + (*p++ - '0'), digits++;
        if (!digits || *p != '.' || (digits > 1 && name[4] == '0')) return false;
        *layer = n;
        rest = p + 1;
    }
    const char *dot = strrchr(rest, '.');
    if (!dot) return false;
    bool is_bias;
    if (strcmp(dot, ".weight") == 0)
        is_bias = false;
    else if (strcmp(dot, ".bias") == 0)
        is_bias = true;
    else
        return false;
    const name_rule *r =
        *layer >= 0
            ? find_rule(BLOCK_RULES, sizeof BLOCK_RULES / sizeof *BLOCK_RULES, rest, (size_t)(dot - rest))
            : find_rule(GLOBAL_RULES, sizeof GLOBAL_RULES / sizeof *GLOBAL_RULES, rest, (size_t)(dot - rest));
    if (!r || !(r->archs & arch) || (is_bias && !(r->bias & arch))) return false;
    int w = *layer >= 0 ? snprintf(out, cap, "model.layers.%ld.%s%s", *layer, r->hf, dot)
                        : snprintf(out, cap, "%s%s", r->hf, dot);
    if (w < 0 || (size_t)w >= cap) {
        *too_small = true;
        return false;
    }
    return true;
}

/* Either naming scheme: llama/qwen3 (bit a) or a hybrid one (h), blocks >= mtp_from being MTP. */
static bool map_any(unsigned a, weft_gguf_hybrid h, const char *name, long mtp_from, char *out, size_t cap,
                    long *layer, bool *too_small) {
    if (h != WEFT_GGUF_NOT_HYBRID) return weft_gguf_hybrid_map(h, name, mtp_from, out, cap, layer, too_small);
    return map_name(a, name, out, cap, layer, too_small);
}

weft_status weft_gguf_canonical_name(const char *arch, const char *gguf_name, char *out, size_t cap,
                                     weft_err *err) {
    unsigned a = arch_bit(arch);
    weft_gguf_hybrid h = weft_gguf_hybrid_of(arch);
    if (!a && h == WEFT_GGUF_NOT_HYBRID)
        return weft_err_set(err, WEFT_ENOTSUP, "GGUF tensor names of architecture '%s' are not supported",
                            arch ? arch : "(none)");
    long layer;
    bool small;
    /* without the file's nextn_predict_layers every block maps to layers.N */
    if (map_any(a, h, gguf_name, -1, out, cap, &layer, &small)) return WEFT_OK;
    if (small)
        return weft_err_set(err, WEFT_EINVAL, "tensor '%s': name buffer of %zu bytes too small", gguf_name,
                            cap);
    return weft_err_set(err, WEFT_EFORMAT, "unknown tensor '%s' for architecture %s", gguf_name, arch);
}

weft_status weft_gguf_add_tensor(const weft_gguf *g, const weft_gguf_tensor_info *ti, const char *name,
                                 bool qwen35, weft_tensor_set *set, weft_err *err) {
    weft_tensor t = {0};
    t.name = name;
    t.dtype = ti->dtype;
    t.ndim = ti->n_dims;
    for (int d = 0; d < ti->n_dims; d++) t.shape[d] = ti->ne[ti->n_dims - 1 - d];
    if (qwen35 && t.ndim == 1 && strstr(name, "shared_expert_gate.weight")) {
        t.ndim = 2; /* a converter that squeezed the [1, H] shared-expert gate: the hub shape */
        t.shape[1] = t.shape[0];
        t.shape[0] = 1;
    }
    t.data = ti->data;
    t.nbytes = ti->nbytes;
    weft_status st = weft_tensor_set_add(set, &t, err);
    if (st && err) {
        char msg[sizeof err->msg];
        memcpy(msg, err->msg, sizeof msg);
        weft_err_set(err, st, "%s: %s", g->source, msg);
    }
    return st;
}

weft_status weft_gguf_tensors(weft_gguf *g, weft_tensor_set *set, weft_err *err) {
    if (g->mapping_given)
        return weft_err_set(err, WEFT_EINVAL, "%s: the file mapping was already handed to a tensor set",
                            g->source);
    const char *arch = weft_gguf_arch(g);
    if (!arch)
        return weft_err_set(err, WEFT_EFORMAT, "%s: missing string key 'general.architecture'", g->source);
    unsigned a = arch_bit(arch);
    weft_gguf_hybrid h = weft_gguf_hybrid_of(arch);
    if (!a && h == WEFT_GGUF_NOT_HYBRID)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: GGUF tensor names of architecture '%s' are not supported",
                            g->source, arch);
    int64_t n_layers = -1, n_mtp = 0;
    char key[96], mkey[96];
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (weft_gguf_find(g, key) >= 0) {
        weft_status st = weft_gguf_get_int(g, key, &n_layers, err);
        if (st) return st;
    }
    /* the trailing nextn_predict_layers blocks are the MTP head (counted in block_count, §6.5) */
    snprintf(mkey, sizeof mkey, "%s.nextn_predict_layers", arch);
    if (h != WEFT_GGUF_NOT_HYBRID && weft_gguf_find(g, mkey) >= 0) {
        weft_status st = weft_gguf_get_int(g, mkey, &n_mtp, err);
        if (st) return st;
        if (n_mtp < 0 || n_layers < 0 || n_mtp >= n_layers)
            return weft_err_set(err, WEFT_EFORMAT, "%s: %s = %lld does not fit %s", g->source, mkey,
                                (long long)n_mtp, key);
    }
    long mtp_from = n_mtp > 0 ? (long)(n_layers - n_mtp) : -1;
    if (n_mtp > 0 && h == WEFT_GGUF_NEMOTRON_H) /* §4.7: conversion/nemotron.py drops the head */
        return weft_err_set(err, WEFT_ENOTSUP,
                            "%s: %s = %lld: Nemotron-H NextN blocks in GGUF are not supported (llama.cpp's "
                            "converter does not export the Nemotron-H MTP head, so no layout is known)",
                            g->source, mkey, (long long)n_mtp);
    if (n_mtp > 0) {
        weft_status st = weft_gguf_nextn_check(g, mtp_from, (long)n_mtp, err);
        if (st) return st;
    }
    for (size_t k = 0; k < g->n_tensors; k++) {
        const weft_gguf_tensor_info *ti = &g->tensors[k];
        char name[256];
        long layer;
        bool small;
        if (!map_any(a, h, ti->name, mtp_from, name, sizeof name, &layer, &small))
            return weft_err_set(err, WEFT_EFORMAT, "%s: unknown tensor '%s' for architecture %s", g->source,
                                ti->name, arch);
        if (layer >= 0 && n_layers >= 0 && layer >= n_layers)
            return weft_err_set(err, WEFT_EFORMAT, "%s: tensor '%s' is past %s = %lld", g->source, ti->name,
                                key, (long long)n_layers);
        weft_status st = weft_gguf_add_tensor(g, ti, name, h == WEFT_GGUF_QWEN35, set, err);
        if (st) return st;
    }
    if (g->map) {
        weft_tensor_set_own_mapping(set, g->map, g->map_len);
        g->map = NULL;
    }
    if (g->file_backed) g->mapping_given = true;
    return WEFT_OK;
}
