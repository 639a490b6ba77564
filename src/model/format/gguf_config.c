/* weft_config from GGUF metadata for archs llama and qwen3, and the hybrids qwen35, qwen35moe, nemotron_h and
 * nemotron_h_moe with the storage conventions of llama.cpp's converter recorded in the config (keys: docs
 * families-and-formats §6.3, gguf-py constants.py; llama.cpp semantics for the defaults: llama-model.cpp /
 * llama-hparams). */
#include "gguf_hybrid.h"
#include "gguf_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    const weft_gguf *g;
    const char *arch;
    weft_err *err;
    char key[128];
} ctx;

static const char *akey(ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

static bool has(ctx *c, const char *key) {
    return weft_gguf_find(c->g, key) >= 0;
}

/* An integer that may be stored as a scalar or (llama.cpp's per-layer form) an array that must be uniform. */
static weft_status get_uniform_int(ctx *c, const char *key, int64_t *out) {
    int64_t i = weft_gguf_find(c->g, key);
    if (i >= 0 && weft_gguf_kv_type(c->g, (size_t)i) == WEFT_GGUF_ARRAY) {
        weft_gguf_arr a;
        weft_status st = weft_gguf_get_arr(c->g, key, &a, c->err);
        if (st) return st;
        if (a.count == 0 || a.type == WEFT_GGUF_STRING || a.type == WEFT_GGUF_F32 ||
            a.type == WEFT_GGUF_F64 || a.type == WEFT_GGUF_BOOL)
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: metadata key '%s' is not an integer or integer array", c->g->source,
                                key);
        int64_t v0 = weft_gguf_arr_int(&a, 0);
        for (uint64_t k = 1; k < a.count; k++)
            if (weft_gguf_arr_int(&a, k) != v0)
                return weft_err_set(c->err, WEFT_ENOTSUP, "%s: per-layer '%s' values differ (layer %llu)",
                                    c->g->source, key, (unsigned long long)k);
        *out = v0;
        return WEFT_OK;
    }
    return weft_gguf_get_int(c->g, key, out, c->err);
}

static weft_status positive(ctx *c, const char *key, int64_t *out) {
    weft_status st = get_uniform_int(c, key, out);
    if (st) return st;
    if (*out <= 0)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: metadata key '%s' = %lld must be positive",
                            c->g->source, key, (long long)*out);
    return WEFT_OK;
}

/* A token id key: absent → -1; present → in [0, vocab). */
static weft_status token_id(ctx *c, const char *key, int64_t vocab, int32_t *out) {
    *out = -1;
    if (!has(c, key)) return WEFT_OK;
    int64_t v;
    weft_status st = weft_gguf_get_int(c->g, key, &v, c->err);
    if (st) return st;
    if (v < 0 || v >= vocab)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s = %lld is outside the vocabulary (%lld)",
                            c->g->source, key, (long long)v, (long long)vocab);
    *out = (int32_t)v;
    return WEFT_OK;
}

static void add_eos(weft_config *cfg, int32_t id) {
    if (id < 0) return;
    for (int k = 0; k < cfg->n_eos; k++)
        if (cfg->eos_token_ids[k] == id) return;
    if (cfg->n_eos < WEFT_MAX_EOS) cfg->eos_token_ids[cfg->n_eos++] = id;
}

static weft_status rope_scaling(ctx *c, weft_config *cfg) {
    weft_rope *r = &cfg->rope;
    const char *type = NULL;
    double factor = 0;
    weft_status st;
    if (has(c, akey(c, "rope.scaling.type")) && (st = weft_gguf_get_str(c->g, c->key, &type, NULL, c->err)))
        return st;
    if (has(c, akey(c, "rope.scaling.factor")) && (st = weft_gguf_get_float(c->g, c->key, &factor, c->err)))
        return st;
    /* the older spelling of a linear factor */
    if (factor == 0 && has(c, akey(c, "rope.scale_linear")) &&
        (st = weft_gguf_get_float(c->g, c->key, &factor, c->err)))
        return st;
    /* llama.cpp: type defaults to linear and a factor of 0 or 1 means no scaling */
    if (!type) type = "linear";
    if (strcmp(type, "none") == 0 || (strcmp(type, "linear") == 0 && (factor == 0 || factor == 1)))
        return WEFT_OK;
    if (!(factor > 0))
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: rope scaling '%s' needs a positive %s.rope.scaling.factor", c->g->source,
                            type, c->arch);
    r->factor = factor;
    if (strcmp(type, "linear") == 0) {
        r->type = WEFT_ROPE_LINEAR;
        return WEFT_OK;
    }
    if (strcmp(type, "yarn") != 0)
        return weft_err_set(c->err, WEFT_ENOTSUP, "%s: rope scaling type '%s' is not supported", c->g->source,
                            type);
    r->type = WEFT_ROPE_YARN;
    int64_t n0;
    if ((st = positive(c, akey(c, "rope.scaling.original_context_length"), &n0))) return st;
    r->original_max_position_embeddings = n0;
    if (has(c, akey(c, "rope.scaling.yarn_beta_fast")) &&
        (st = weft_gguf_get_float(c->g, c->key, &r->beta_fast, c->err)))
        return st;
    if (has(c, akey(c, "rope.scaling.yarn_beta_slow")) &&
        (st = weft_gguf_get_float(c->g, c->key, &r->beta_slow, c->err)))
        return st;
    /* llama.cpp's attn_factor multiplies the derived 0.1·ln(factor)+1; HF has no such knob */
    double af = 1;
    if (has(c, akey(c, "rope.scaling.attn_factor")) && (st = weft_gguf_get_float(c->g, c->key, &af, c->err)))
        return st;
    if (af != 1)
        return weft_err_set(c->err, WEFT_ENOTSUP, "%s: %s = %g (≠ 1) is not supported", c->g->source, c->key,
                            af);
    return WEFT_OK;
}

/* rope_freqs.weight: F32 [rope_dim/2] divisors of the inverse frequencies (llama3 scaling in GGUF, §10). */
static weft_status rope_freqs(ctx *c, weft_config *cfg, int64_t rope_dim) {
    const weft_gguf_tensor_info *t = weft_gguf_tensor_find(c->g, "rope_freqs.weight");
    if (!t) return WEFT_OK;
    if (t->dtype != WEFT_DT_F32 || t->n_dims != 1 || t->ne[0] != rope_dim / 2)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: rope_freqs.weight must be F32 [%lld], found %s with ne0 %lld", c->g->source,
                            (long long)(rope_dim / 2), weft_gguf_ggml_type_name(t->ggml_type),
                            (long long)t->ne[0]);
    if ((uintptr_t)t->data % sizeof(float))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: rope_freqs.weight data is not 4-byte aligned",
                            c->g->source);
    cfg->rope.freq_divisors = (const float *)(const void *)t->data;
    return WEFT_OK;
}

static bool has_bias(const weft_gguf *g, const char *const *stems, int n) {
    for (size_t k = 0; k < weft_gguf_tensor_count(g); k++) {
        const char *name = weft_gguf_tensor_at(g, k)->name;
        if (strncmp(name, "blk.", 4) != 0) continue;
        const char *p = strchr(name + 4, '.');
        if (!p) continue;
        for (int s = 0; s < n; s++) {
            size_t l = strlen(stems[s]);
            if (strncmp(p + 1, stems[s], l) == 0 && strcmp(p + 1 + l, ".bias") == 0) return true;
        }
    }
    return false;
}

static weft_status sampling_defaults(ctx *c, weft_config *cfg) {
    weft_status st;
    if (has(c, "general.sampling.temp")) {
        if ((st = weft_gguf_get_float(c->g, "general.sampling.temp", &cfg->temperature, c->err))) return st;
        cfg->has_temperature = true;
    }
    if (has(c, "general.sampling.top_p")) {
        if ((st = weft_gguf_get_float(c->g, "general.sampling.top_p", &cfg->top_p, c->err))) return st;
        cfg->has_top_p = true;
    }
    if (has(c, "general.sampling.min_p")) {
        if ((st = weft_gguf_get_float(c->g, "general.sampling.min_p", &cfg->min_p, c->err))) return st;
        cfg->has_min_p = true;
    }
    if (has(c, "general.sampling.top_k")) {
        int64_t k;
        if ((st = weft_gguf_get_int(c->g, "general.sampling.top_k", &k, c->err))) return st;
        if (k < 0 || k > INT32_MAX)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: general.sampling.top_k = %lld is out of range",
                                c->g->source, (long long)k);
        cfg->top_k = (int)k;
        cfg->has_top_k = true;
    }
    return WEFT_OK;
}

static weft_status sizes(ctx *c, weft_config *cfg) {
    weft_status st;
    if ((st = positive(c, akey(c, "embedding_length"), &cfg->hidden_size))) return st;
    if ((st = positive(c, akey(c, "block_count"), &cfg->n_layers))) return st;
    if (cfg->n_layers > WEFT_MAX_LAYERS)
        return weft_err_set(c->err, WEFT_ENOTSUP, "%s: %s = %lld exceeds the %d layers weft supports",
                            c->g->source, c->key, (long long)cfg->n_layers, WEFT_MAX_LAYERS);
    if ((st = positive(c, akey(c, "feed_forward_length"), &cfg->intermediate_size))) return st;
    if ((st = positive(c, akey(c, "context_length"), &cfg->max_position_embeddings))) return st;
    if ((st = positive(c, akey(c, "attention.head_count"), &cfg->n_heads))) return st;
    cfg->n_kv_heads = cfg->n_heads;
    if (has(c, akey(c, "attention.head_count_kv")) && (st = positive(c, c->key, &cfg->n_kv_heads))) return st;
    if (cfg->n_heads % cfg->n_kv_heads)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: head_count %lld is not a multiple of head_count_kv %lld", c->g->source,
                            (long long)cfg->n_heads, (long long)cfg->n_kv_heads);
    if (has(c, akey(c, "attention.key_length"))) {
        if ((st = positive(c, c->key, &cfg->head_dim))) return st;
    } else {
        if (cfg->hidden_size % cfg->n_heads)
            return weft_err_set(
                c->err, WEFT_EFORMAT,
                "%s: embedding_length %lld is not a multiple of head_count %lld (and no key_length)",
                c->g->source, (long long)cfg->hidden_size, (long long)cfg->n_heads);
        cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    }
    if (has(c, akey(c, "attention.value_length"))) {
        int64_t vl;
        if ((st = positive(c, c->key, &vl))) return st;
        if (vl != cfg->head_dim)
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: value_length %lld differs from key_length %lld",
                                c->g->source, (long long)vl, (long long)cfg->head_dim);
    }
    if ((st = weft_gguf_get_float(c->g, akey(c, "attention.layer_norm_rms_epsilon"), &cfg->rms_norm_eps,
                                  c->err)))
        return st;
    if (!(cfg->rms_norm_eps > 0))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be positive", c->g->source, c->key);
    return WEFT_OK;
}

static weft_status vocab(ctx *c, weft_config *cfg) {
    weft_status st;
    if (has(c, akey(c, "vocab_size"))) return positive(c, c->key, &cfg->vocab_size);
    const weft_gguf_tensor_info *emb = weft_gguf_tensor_find(c->g, "token_embd.weight");
    if (!has(c, "tokenizer.ggml.tokens") && emb && emb->n_dims == 2) { /* a file without a vocabulary */
        cfg->vocab_size = emb->ne[1];
        return WEFT_OK;
    }
    weft_gguf_arr toks;
    if ((st = weft_gguf_get_arr(c->g, "tokenizer.ggml.tokens", &toks, c->err))) return st;
    if (toks.count == 0 || toks.count > INT32_MAX)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries", c->g->source,
                            (unsigned long long)toks.count);
    cfg->vocab_size = (int64_t)toks.count;
    return WEFT_OK;
}

/* Keys every architecture shares: special token ids, tied head, biases, sampling defaults. */
static weft_status finish(ctx *c, weft_config *cfg) {
    weft_status st;
    if ((st = token_id(c, "tokenizer.ggml.bos_token_id", cfg->vocab_size, &cfg->bos_token_id))) return st;
    if ((st = token_id(c, "tokenizer.ggml.padding_token_id", cfg->vocab_size, &cfg->pad_token_id))) return st;
    /* llama.cpp ends generation on EOS, EOT and EOM alike (llama_vocab_is_eog) */
    static const char *const EOG_KEYS[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                           "tokenizer.ggml.eom_token_id"};
    for (int k = 0; k < 3; k++) {
        int32_t id;
        if ((st = token_id(c, EOG_KEYS[k], cfg->vocab_size, &id))) return st;
        add_eos(cfg, id);
    }
    cfg->tie_word_embeddings = weft_gguf_tensor_find(c->g, "output.weight") == NULL;
    static const char *const ATTN[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    static const char *const MLP[] = {"ffn_gate", "ffn_up", "ffn_down"};
    cfg->attention_bias = has_bias(c->g, ATTN, 4);
    cfg->mlp_bias = has_bias(c->g, MLP, 3);
    return sampling_defaults(c, cfg);
}

/* ---- hybrid architectures (docs families-and-formats §6.5; keys as llama.cpp's converter writes them) ----
 */

/* A scalar or per-layer array key as n per-layer values (absent: def everywhere). */
static weft_status layer_values(ctx *c, const char *suffix, int64_t n, int64_t def, int64_t *vals) {
    const char *key = akey(c, suffix);
    int64_t i = weft_gguf_find(c->g, key);
    for (int64_t l = 0; l < n; l++) vals[l] = def;
    if (i < 0) return WEFT_OK;
    if (weft_gguf_kv_type(c->g, (size_t)i) != WEFT_GGUF_ARRAY) {
        int64_t v;
        weft_status st = weft_gguf_get_int(c->g, key, &v, c->err);
        for (int64_t l = 0; !st && l < n; l++) vals[l] = v;
        return st;
    }
    weft_gguf_arr a;
    weft_status st = weft_gguf_get_arr(c->g, key, &a, c->err);
    if (st) return st;
    if (a.type == WEFT_GGUF_STRING || a.type == WEFT_GGUF_F32 || a.type == WEFT_GGUF_F64 ||
        a.count < (uint64_t)n)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: '%s' must be an integer array of %lld layers",
                            c->g->source, key, (long long)n);
    for (int64_t l = 0; l < n; l++) vals[l] = weft_gguf_arr_int(&a, (uint64_t)l);
    return WEFT_OK;
}

/* The one non-zero value of vals over the layers where `where` holds (0 if none); differing values: ENOTSUP.
 */
static weft_status common_value(ctx *c, const char *suffix, const int64_t *vals, const weft_config *cfg,
                                weft_layer_kind where, int64_t *out) {
    *out = 0;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_kind[l] != where || vals[l] == 0) continue;
        if (*out && vals[l] != *out)
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: per-layer '%s.%s' values differ (layer %lld)",
                                c->g->source, c->arch, suffix, (long long)l);
        *out = vals[l];
    }
    return WEFT_OK;
}

static bool has_tensor(const weft_gguf *g, int64_t layer, const char *stem) {
    char name[128];
    snprintf(name, sizeof name, "blk.%lld.%s", (long long)layer, stem);
    return weft_gguf_tensor_find(g, name) != NULL;
}

static weft_status opt_int(ctx *c, const char *suffix, int64_t def, int64_t *out) {
    *out = def;
    return has(c, akey(c, suffix)) ? weft_gguf_get_int(c->g, c->key, out, c->err) : WEFT_OK;
}

/* hidden, layers (block_count less the trailing MTP blocks), context, vocab, heads, head_dim. */
static weft_status hybrid_sizes(ctx *c, weft_config *cfg, int64_t *nextn) {
    weft_status st;
    int64_t blocks;
    if ((st = positive(c, akey(c, "embedding_length"), &cfg->hidden_size)) ||
        (st = positive(c, akey(c, "block_count"), &blocks)) ||
        (st = opt_int(c, "nextn_predict_layers", 0, nextn)))
        return st;
    if (*nextn < 0 || *nextn >= blocks)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: %s.nextn_predict_layers = %lld does not fit block_count %lld", c->g->source,
                            c->arch, (long long)*nextn, (long long)blocks);
    cfg->n_layers = blocks - *nextn;
    if (cfg->n_layers > WEFT_MAX_LAYERS)
        return weft_err_set(c->err, WEFT_ENOTSUP, "%s: %lld layers exceed the %d layers weft supports",
                            c->g->source, (long long)cfg->n_layers, WEFT_MAX_LAYERS);
    if ((st = positive(c, akey(c, "context_length"), &cfg->max_position_embeddings)) ||
        (st = positive(c, akey(c, "attention.head_count"), &cfg->n_heads)) || (st = vocab(c, cfg)))
        return st;
    cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    if (has(c, akey(c, "attention.key_length")) && (st = positive(c, c->key, &cfg->head_dim))) return st;
    if (has(c, akey(c, "attention.value_length"))) {
        int64_t vl;
        if ((st = positive(c, c->key, &vl))) return st;
        if (vl != cfg->head_dim)
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: value_length %lld differs from key_length %lld",
                                c->g->source, (long long)vl, (long long)cfg->head_dim);
    }
    const char *eps = has(c, akey(c, "attention.layer_norm_rms_epsilon")) ? "attention.layer_norm_rms_epsilon"
                                                                          : "attention.layer_norm_epsilon";
    if ((st = weft_gguf_get_float(c->g, akey(c, eps), &cfg->rms_norm_eps, c->err))) return st;
    if (!(cfg->rms_norm_eps > 0) || cfg->head_dim < 1)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be positive (and head_dim %lld)", c->g->source,
                            c->key, (long long)cfg->head_dim);
    return WEFT_OK;
}

/* qwen35 / qwen35moe: the ssm.* keys carry Qwen meanings (state_size = dk, group_count = Hk,
 * time_step_rank = Hv, inner_size = Hv·dv); layer kinds from the tensors each block has. */
static weft_status qwen35_config(ctx *c, weft_config *cfg) {
    const bool moe = strcmp(c->arch, "qwen35moe") == 0;
    cfg->family = moe ? WEFT_FAMILY_QWEN3_5_MOE : WEFT_FAMILY_QWEN3_5;
    int64_t nextn, inner = 0;
    weft_status st = hybrid_sizes(c, cfg, &nextn);
    if (st) return st;
    cfg->mtp_num_hidden_layers = nextn;
    if ((st = positive(c, akey(c, "attention.head_count_kv"), &cfg->n_kv_heads))) return st;
    if (cfg->n_heads % cfg->n_kv_heads)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: head_count %lld is not a multiple of head_count_kv %lld", c->g->source,
                            (long long)cfg->n_heads, (long long)cfg->n_kv_heads);
    if ((st = opt_int(c, "full_attention_interval", 4, &cfg->full_attention_interval))) return st;
    bool interval_key = has(c, akey(c, "full_attention_interval")), lin = false;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        if (has_tensor(c->g, l, "attn_qkv.weight"))
            cfg->layer_kind[l] = WEFT_LAYER_LINEAR, lin = true;
        else if (has_tensor(c->g, l, "attn_q.weight"))
            cfg->layer_kind[l] = WEFT_LAYER_ATTENTION;
        else
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: block %lld has neither attn_qkv nor attn_q",
                                c->g->source, (long long)l);
        bool full = cfg->full_attention_interval > 0 && (l + 1) % cfg->full_attention_interval == 0;
        if (interval_key && full != (cfg->layer_kind[l] == WEFT_LAYER_ATTENTION))
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: block %lld's tensors disagree with %s.full_attention_interval",
                                c->g->source, (long long)l, c->arch);
    }
    if (lin && ((st = positive(c, akey(c, "ssm.conv_kernel"), &cfg->linear_conv_kernel_dim)) ||
                (st = positive(c, akey(c, "ssm.state_size"), &cfg->linear_key_head_dim)) ||
                (st = positive(c, akey(c, "ssm.group_count"), &cfg->linear_num_key_heads)) ||
                (st = positive(c, akey(c, "ssm.time_step_rank"), &cfg->linear_num_value_heads)) ||
                (st = positive(c, akey(c, "ssm.inner_size"), &inner))))
        return st;
    if (lin &&
        (inner % cfg->linear_num_value_heads || cfg->linear_num_value_heads % cfg->linear_num_key_heads))
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: ssm.inner_size %lld / time_step_rank %lld / group_count %lld disagree",
                            c->g->source, (long long)inner, (long long)cfg->linear_num_value_heads,
                            (long long)cfg->linear_num_key_heads);
    if (lin) cfg->linear_value_head_dim = inner / cfg->linear_num_value_heads;
    /* attn_output_gate: q_proj rows interleave query and gate per head (2·Hq·d rows) or hold the query alone
     */
    cfg->attn_output_gate = true;
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        if (cfg->layer_kind[l] != WEFT_LAYER_ATTENTION) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%lld.attn_q.weight", (long long)l);
        int64_t rows = weft_gguf_tensor_find(c->g, name)->ne[1], hd = cfg->n_heads * cfg->head_dim;
        if (rows != hd && rows != 2 * hd)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s has %lld rows (%lld or %lld expected)",
                                c->g->source, name, (long long)rows, (long long)hd, (long long)(2 * hd));
        cfg->attn_output_gate = rows == 2 * hd;
        break;
    }
    if (!moe && (st = get_uniform_int(c, akey(c, "feed_forward_length"), &cfg->intermediate_size))) return st;
    if (moe) {
        int64_t norm = 1;
        if ((st = positive(c, akey(c, "expert_count"), &cfg->num_experts)) ||
            (st = positive(c, akey(c, "expert_used_count"), &cfg->num_experts_per_tok)) ||
            (st = positive(c, akey(c, "expert_feed_forward_length"), &cfg->moe_intermediate_size)) ||
            (st =
                 opt_int(c, "expert_shared_feed_forward_length", 0, &cfg->shared_expert_intermediate_size)) ||
            (st = opt_int(c, "expert_weights_norm", 1, &norm)))
            return st;
        if (cfg->num_experts_per_tok > cfg->num_experts)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: expert_used_count exceeds expert_count",
                                c->g->source);
        cfg->norm_topk_prob =
            norm != 0; /* llama.cpp's qwen35moe always renormalises; so does HF by default */
        cfg->n_shared_experts = cfg->shared_expert_intermediate_size > 0;
        cfg->routed_scaling_factor = 1.0;
        cfg->n_group = cfg->topk_group = 1;
    }
    weft_rope *r = &cfg->rope;
    r->type = WEFT_ROPE_DEFAULT;
    r->theta = 10000.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    int64_t rope_dim = cfg->head_dim / 4; /* HF's partial_rotary_factor 0.25 */
    if (has(c, akey(c, "rope.freq_base")) && (st = weft_gguf_get_float(c->g, c->key, &r->theta, c->err)))
        return st;
    if (has(c, akey(c, "rope.dimension_count")) && (st = positive(c, c->key, &rope_dim))) return st;
    if (!(r->theta > 0) || rope_dim > cfg->head_dim || rope_dim % 2 || rope_dim < 2)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: rope.freq_base / rope.dimension_count %lld out of range", c->g->source,
                            (long long)rope_dim);
    /* rope.dimension_sections (M-RoPE) only matter for image positions: text rows give every section the
     * same position, which is plain partial RoPE */
    r->partial_rotary_factor = (double)rope_dim / (double)cfg->head_dim;
    if ((st = rope_scaling(c, cfg))) return st;
    cfg->norms_plus_one = cfg->a_is_neg_exp = cfg->gdn_tiled_heads = true; /* converter transforms 1, 2, 5 */
    return finish(c, cfg);
}

/* nemotron_h / nemotron_h_moe: Mamba-2 keys with their usual meanings (time_step_rank = heads,
 * inner_size = heads·head_dim); layer kinds from the tensors (cross-checked with head_count_kv). */
static weft_status nemotron_config(ctx *c, weft_config *cfg) {
    cfg->family = WEFT_FAMILY_NEMOTRON_H;
    int64_t nextn, inner = 0;
    weft_status st = hybrid_sizes(c, cfg, &nextn);
    if (st) return st;
    cfg->num_nextn_predict_layers = nextn;
    int64_t *kv = calloc((size_t)cfg->n_layers, sizeof *kv), *ff = calloc((size_t)cfg->n_layers, sizeof *ff);
    if (!kv || !ff) {
        free(kv);
        free(ff);
        return weft_err_set(c->err, WEFT_ENOMEM, "out of memory");
    }
    bool kv_key = has(c, akey(c, "attention.head_count_kv")), lin = false, moe = false;
    if ((st = layer_values(c, "attention.head_count_kv", cfg->n_layers, 0, kv)) ||
        (st = layer_values(c, "feed_forward_length", cfg->n_layers, 0, ff)))
        goto out;
    for (int64_t l = 0; l < cfg->n_layers && !st; l++) {
        weft_layer_kind k = WEFT_LAYER_MLP;
        if (has_tensor(c->g, l, "ssm_in.weight"))
            k = WEFT_LAYER_LINEAR, lin = true;
        else if (has_tensor(c->g, l, "attn_q.weight"))
            k = WEFT_LAYER_ATTENTION;
        else if (has_tensor(c->g, l, "ffn_up_exps.weight"))
            k = WEFT_LAYER_MOE, moe = true;
        else if (has_tensor(c->g, l, "ffn_up.weight"))
            k = WEFT_LAYER_MLP;
        else
            st =
                weft_err_set(c->err, WEFT_EFORMAT, "%s: block %lld has none of ssm_in, attn_q, ffn_up(_exps)",
                             c->g->source, (long long)l);
        if (!st && kv_key && (kv[l] > 0) != (k == WEFT_LAYER_ATTENTION))
            st = weft_err_set(c->err, WEFT_EFORMAT,
                              "%s: block %lld's tensors disagree with head_count_kv = %lld", c->g->source,
                              (long long)l, (long long)kv[l]);
        cfg->layer_kind[l] = k;
    }
    if (st ||
        (st = common_value(c, "attention.head_count_kv", kv, cfg, WEFT_LAYER_ATTENTION, &cfg->n_kv_heads)) ||
        (st = common_value(c, "feed_forward_length", ff, cfg, WEFT_LAYER_MLP, &cfg->intermediate_size)))
        goto out;
    if (!cfg->n_kv_heads) cfg->n_kv_heads = cfg->n_heads;
    if (cfg->n_heads % cfg->n_kv_heads) {
        st = weft_err_set(c->err, WEFT_EFORMAT, "%s: head_count is not a multiple of head_count_kv",
                          c->g->source);
        goto out;
    }
    if (lin && ((st = positive(c, akey(c, "ssm.time_step_rank"), &cfg->mamba_num_heads)) ||
                (st = positive(c, akey(c, "ssm.inner_size"), &inner)) ||
                (st = positive(c, akey(c, "ssm.state_size"), &cfg->ssm_state_size)) ||
                (st = positive(c, akey(c, "ssm.group_count"), &cfg->n_groups)) ||
                (st = positive(c, akey(c, "ssm.conv_kernel"), &cfg->conv_kernel))))
        goto out;
    if (lin && (inner % cfg->mamba_num_heads || cfg->mamba_num_heads % cfg->n_groups)) {
        st = weft_err_set(c->err, WEFT_EFORMAT, "%s: ssm.inner_size / time_step_rank / group_count disagree",
                          c->g->source);
        goto out;
    }
    if (lin) cfg->mamba_head_dim = inner / cfg->mamba_num_heads;
    static const char *const CONV[] = {"ssm_conv1d"};
    cfg->use_conv_bias = has_bias(c->g, CONV, 1);
    cfg->time_step_limit_min = 0.0; /* HF's default (0, inf); GGUF has no key and llama.cpp never clamps */
    cfg->time_step_limit_max = INFINITY;
    if (moe) {
        int64_t norm = 1;
        double scale = 1.0;
        if ((st = positive(c, akey(c, "expert_count"), &cfg->num_experts)) ||
            (st = positive(c, akey(c, "expert_used_count"), &cfg->num_experts_per_tok)) ||
            (st = common_value(c, "feed_forward_length", ff, cfg, WEFT_LAYER_MOE,
                               &cfg->moe_intermediate_size)) ||
            (st = opt_int(c, "expert_feed_forward_length", cfg->moe_intermediate_size,
                          &cfg->moe_intermediate_size)) ||
            (st =
                 opt_int(c, "expert_shared_feed_forward_length", 0, &cfg->shared_expert_intermediate_size)) ||
            (st = opt_int(c, "expert_shared_count", cfg->shared_expert_intermediate_size > 0,
                          &cfg->n_shared_experts)) ||
            (st = opt_int(c, "expert_weights_norm", 1, &norm)) ||
            (st = opt_int(c, "expert_group_count", 1, &cfg->n_group)) ||
            (st = opt_int(c, "expert_group_used_count", 1, &cfg->topk_group)) ||
            (st = opt_int(c, "moe_latent_size", 0, &cfg->moe_latent_size)) ||
            (has(c, akey(c, "expert_weights_scale")) &&
             (st = weft_gguf_get_float(c->g, c->key, &scale, c->err))))
            goto out;
        cfg->norm_topk_prob = norm != 0;
        cfg->routed_scaling_factor = scale;
        if (cfg->moe_intermediate_size < 1 || cfg->n_group < 1 || cfg->topk_group < 1 ||
            cfg->num_experts % cfg->n_group || cfg->num_experts_per_tok > cfg->num_experts ||
            cfg->topk_group > cfg->n_group) {
            st = weft_err_set(c->err, WEFT_EFORMAT, "%s: inconsistent expert keys", c->g->source);
            goto out;
        }
    }
    cfg->rope.type = WEFT_ROPE_NONE; /* attention without positions (§4) */
    cfg->rope.theta = 10000.0;
    cfg->rope.partial_rotary_factor = 1.0;
    cfg->a_is_neg_exp = true; /* ssm_a = −exp(A_log); norms are plain in Nemotron-H */
    st = finish(c, cfg);
out:
    free(kv);
    free(ff);
    return st;
}

weft_status weft_gguf_config(const weft_gguf *g, weft_config *cfg, weft_err *err) {
    memset(cfg, 0, sizeof *cfg);
    ctx c = {.g = g, .err = err};
    weft_status st = weft_gguf_get_str(g, "general.architecture", &c.arch, NULL, err);
    if (st) return st;
    if (strcmp(c.arch, "llama") == 0)
        cfg->family = WEFT_FAMILY_LLAMA;
    else if (strcmp(c.arch, "qwen3") == 0)
        cfg->family = WEFT_FAMILY_QWEN3;
    else if (weft_gguf_hybrid_of(c.arch) == WEFT_GGUF_NOT_HYBRID)
        return weft_err_set(err, WEFT_ENOTSUP,
                            "%s: GGUF architecture '%s' is not supported (llama, qwen3, qwen35, qwen35moe, "
                            "nemotron_h, nemotron_h_moe)",
                            g->source, c.arch);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", c.arch);
    if (weft_gguf_hybrid_of(c.arch) == WEFT_GGUF_QWEN35) return qwen35_config(&c, cfg);
    if (weft_gguf_hybrid_of(c.arch) == WEFT_GGUF_NEMOTRON_H) return nemotron_config(&c, cfg);
    if ((st = sizes(&c, cfg))) return st;
    if ((st = vocab(&c, cfg))) return st;

    weft_rope *r = &cfg->rope;
    r->type = WEFT_ROPE_DEFAULT;
    r->theta = 10000.0;
    r->partial_rotary_factor = 1.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->adjacent_pairs =
        cfg->family == WEFT_FAMILY_LLAMA; /* GGUF llama Q/K rows are in pair order (§1.4, §10) */
    if (has(&c, akey(&c, "rope.freq_base")) && (st = weft_gguf_get_float(g, c.key, &r->theta, err)))
        return st;
    if (!(r->theta > 0)) return weft_err_set(err, WEFT_EFORMAT, "%s: %s must be positive", g->source, c.key);
    int64_t rope_dim = cfg->head_dim;
    if (has(&c, akey(&c, "rope.dimension_count")) && (st = positive(&c, c.key, &rope_dim))) return st;
    if (rope_dim > cfg->head_dim || rope_dim % 2)
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s: rope.dimension_count %lld must be even and at most head_dim %lld", g->source,
                            (long long)rope_dim, (long long)cfg->head_dim);
    r->partial_rotary_factor = (double)rope_dim / (double)cfg->head_dim;
    if ((st = rope_scaling(&c, cfg))) return st;
    if ((st = rope_freqs(&c, cfg, rope_dim))) return st;

    for (int64_t l = 0; l < cfg->n_layers; l++) cfg->layer_kind[l] = WEFT_LAYER_ATTENTION;
    return finish(&c, cfg);
}
