/* config.json (+ generation_config.json) → weft_config, for llama, qwen3, qwen3_5, qwen3_5_moe and
 * nemotron_h. Keys, defaults and quirks: docs families-and-formats §1.1 (llama, RoPE spellings), §2 (qwen3),
 * §3.1 (qwen3_5 text_config, layer pattern), §4.1 (nemotron_h pattern and keys), §10 (Infinity, n_groups vs
 * n_group, defaults); SPEC §5.5 (two config generations: rope_parameters vs rope_theta/rope_scaling).
 * Defaults for absent keys are transformers' own (configuration_*.py); counts that do not apply are 0. */
#include "weft/config.h"
#include "weft/safetensors.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *weft_family_name(weft_family f) {
    switch (f) {
    case WEFT_FAMILY_LLAMA:
        return "llama";
    case WEFT_FAMILY_QWEN3:
        return "qwen3";
    case WEFT_FAMILY_QWEN3_5:
        return "qwen3_5";
    case WEFT_FAMILY_QWEN3_5_MOE:
        return "qwen3_5_moe";
    case WEFT_FAMILY_NEMOTRON_H:
        return "nemotron_h";
    case WEFT_FAMILY_UNKNOWN:
        break;
    }
    return "unknown";
}

char *weft_json_nonfinite_dup(const char *text) {
    static const struct {
        const char *tok, *rep;
    } R[] = {{"-Infinity", "{\"__float__\":\"-Infinity\"}"},
             {"Infinity", "{\"__float__\":\"Infinity\"}"},
             {"NaN", "{\"__float__\":\"NaN\"}"}};
    /* two passes: measure, then write */
    char *out = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        bool in_str = false;
        for (const char *p = text; *p; p++) {
            const char *rep = NULL;
            size_t tl = 0;
            if (in_str) {
                if (*p == '\\' && p[1]) {
                    if (pass) out[n] = *p;
                    n++, p++;
                } else if (*p == '"') {
                    in_str = false;
                }
            } else if (*p == '"') {
                in_str = true;
            } else {
                bool word_start = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
                for (size_t i = 0; word_start && !rep && i < sizeof R / sizeof R[0]; i++) {
                    tl = strlen(R[i].tok);
                    if (strncmp(p, R[i].tok, tl) == 0 && !(isalnum((unsigned char)p[tl]) || p[tl] == '_'))
                        rep = R[i].rep;
                }
            }
            if (rep) {
                size_t rl = strlen(rep);
                if (pass) memcpy(out + n, rep, rl);
                n += rl;
                p += tl - 1;
                continue;
            }
            if (pass) out[n] = *p;
            n++;
        }
        if (pass)
            out[n] = 0;
        else if (!(out = malloc(n + 1)))
            return NULL;
    }
    return out;
}

/* Parses JSON text accepting Python's bare Infinity/NaN (see weft_json_nonfinite_dup). */
static json_t *load_json(const char *text, json_error_t *jerr) {
    char *fixed = weft_json_nonfinite_dup(text);
    json_t *j = json_loads(fixed ? fixed : text, 0, jerr);
    free(fixed);
    return j;
}

/* Where keys are looked up: the text config (qwen3_5's nested `text_config`) first, then the top level. */
typedef struct cctx {
    json_t *top, *text;
    const char *file; /* "config.json" for messages */
    weft_err *err;
} cctx;

static json_t *get(const cctx *c, const char *key) {
    json_t *v = json_object_get(c->text, key);
    if ((!v || json_is_null(v)) && c->text != c->top) v = json_object_get(c->top, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A JSON number, or transformers 5's {"__float__": "Infinity" | "-Infinity" | "NaN"}. */
static bool json_to_f64(json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    json_t *f = json_is_object(v) ? json_object_get(v, "__float__") : NULL;
    const char *s = json_string_value(f);
    if (!s) return false;
    if (strcmp(s, "Infinity") == 0 || strcmp(s, "inf") == 0)
        *out = INFINITY;
    else if (strcmp(s, "-Infinity") == 0 || strcmp(s, "-inf") == 0)
        *out = -INFINITY;
    else if (strcmp(s, "NaN") == 0 || strcmp(s, "nan") == 0)
        *out = NAN;
    else
        return false;
    return true;
}

/* Integer key (an integral real is accepted); absent: def, or WEFT_EFORMAT when required. */
static weft_status get_int(const cctx *c, const char *key, int64_t def, bool required, int64_t min,
                           int64_t *out) {
    json_t *v = get(c, key);
    if (!v) {
        if (required) return weft_err_set(c->err, WEFT_EFORMAT, "%s: missing required key %s", c->file, key);
        *out = def;
        return WEFT_OK;
    }
    double d = json_is_real(v) ? json_real_value(v) : 0;
    if (json_is_integer(v))
        *out = json_integer_value(v);
    else if (json_is_real(v) && d == floor(d) && fabs(d) < 9e15)
        *out = (int64_t)d;
    else
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be an integer", c->file, key);
    if (*out < min)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s = %lld is below %lld", c->file, key,
                            (long long)*out, (long long)min);
    return WEFT_OK;
}

static weft_status get_num(const cctx *c, const char *key, double def, double *out) {
    json_t *v = get(c, key);
    if (!v) {
        *out = def;
        return WEFT_OK;
    }
    if (!json_to_f64(v, out))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be a number", c->file, key);
    return WEFT_OK;
}

static weft_status get_bool(const cctx *c, const char *key, bool def, bool *out) {
    json_t *v = get(c, key);
    if (!v)
        *out = def;
    else if (json_is_boolean(v))
        *out = json_is_true(v);
    else
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be true or false", c->file, key);
    return WEFT_OK;
}

/* Member of an object (rope parameters) as a number; absent leaves *out. */
static weft_status obj_num(const cctx *c, json_t *obj, const char *obj_name, const char *key, bool required,
                           double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s.%s is required for this rope type", c->file,
                                obj_name, key);
        return WEFT_OK;
    }
    if (!json_to_f64(v, out))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s.%s must be a number", c->file, obj_name, key);
    return WEFT_OK;
}

static weft_status token_id(const cctx *c, json_t *v, const char *key, int32_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s must be a token id (non-negative integer)", c->file,
                            key);
    *out = (int32_t)json_integer_value(v);
    return WEFT_OK;
}

/* bos/pad: an id or null (-1). */
static weft_status get_token(const cctx *c, const char *key, int32_t *out) {
    json_t *v = get(c, key);
    *out = -1;
    return v ? token_id(c, v, key, out) : WEFT_OK;
}

/* Appends eos ids (an int or a list) to cfg, skipping ids already there. */
static weft_status add_eos(const cctx *c, json_t *v, weft_config *cfg) {
    if (!v || json_is_null(v)) return WEFT_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = -1;
        weft_status st = token_id(c, json_is_array(v) ? json_array_get(v, i) : v, "eos_token_id", &id);
        if (st) return st;
        bool dup = false;
        for (int k = 0; k < cfg->n_eos; k++) dup |= cfg->eos_token_ids[k] == id;
        if (dup) continue;
        if (cfg->n_eos == WEFT_MAX_EOS)
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: more than %d eos token ids", c->file,
                                WEFT_MAX_EOS);
        cfg->eos_token_ids[cfg->n_eos++] = id;
    }
    return WEFT_OK;
}

/* ---- RoPE ---- */

static weft_status parse_rope(const cctx *c, weft_config *cfg) {
    weft_rope *r = &cfg->rope;
    memset(r, 0, sizeof *r);
    r->type = WEFT_ROPE_DEFAULT;
    r->theta = 10000.0;
    r->partial_rotary_factor =
        (cfg->family == WEFT_FAMILY_QWEN3_5 || cfg->family == WEFT_FAMILY_QWEN3_5_MOE) ? 0.25 : 1.0;
    r->factor = 1.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->original_max_position_embeddings = cfg->max_position_embeddings;

    /* transformers 5: rope_parameters (possibly per layer type); older files: rope_theta + rope_scaling */
    json_t *rp = get(c, "rope_parameters");
    const char *rp_name = "rope_parameters";
    if (rp && json_is_object(rp) && !json_object_get(rp, "rope_type") && !json_object_get(rp, "rope_theta") &&
        json_is_object(json_object_get(rp, "full_attention")))
        rp = json_object_get(rp, "full_attention");
    if (!rp) {
        rp = get(c, "rope_scaling");
        rp_name = "rope_scaling";
    }
    if (rp && !json_is_object(rp))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s is not an object", c->file, rp_name);
    weft_status st = get_num(c, "rope_theta", r->theta, &r->theta);
    if (!st) st = get_num(c, "partial_rotary_factor", r->partial_rotary_factor, &r->partial_rotary_factor);
    if (st) return st;
    if (rp) {
        if ((st = obj_num(c, rp, rp_name, "rope_theta", false, &r->theta)) ||
            (st = obj_num(c, rp, rp_name, "partial_rotary_factor", false, &r->partial_rotary_factor)))
            return st;
        json_t *jt = json_object_get(rp, "rope_type");
        if (!jt || json_is_null(jt)) jt = json_object_get(rp, "type"); /* legacy spelling */
        const char *type = "default";
        if (jt && !json_is_null(jt)) {
            if (!json_is_string(jt))
                return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s.rope_type is not a string", c->file,
                                    rp_name);
            type = json_string_value(jt);
        }
        /* "mrope" is Qwen-VL's legacy name for default RoPE over sections; text positions make it plain */
        if (strcmp(type, "default") == 0 || strcmp(type, "mrope") == 0)
            r->type = WEFT_ROPE_DEFAULT;
        else if (strcmp(type, "linear") == 0)
            r->type = WEFT_ROPE_LINEAR;
        else if (strcmp(type, "llama3") == 0)
            r->type = WEFT_ROPE_LLAMA3;
        else if (strcmp(type, "yarn") == 0)
            r->type = WEFT_ROPE_YARN;
        else
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: rope type \"%s\" is not supported", c->file, type);
        bool scaled = r->type != WEFT_ROPE_DEFAULT, l3 = r->type == WEFT_ROPE_LLAMA3;
        double n0 = (double)r->original_max_position_embeddings;
        if ((st = obj_num(c, rp, rp_name, "factor", scaled, &r->factor)) ||
            (st = obj_num(c, rp, rp_name, "low_freq_factor", l3, &r->low_freq_factor)) ||
            (st = obj_num(c, rp, rp_name, "high_freq_factor", l3, &r->high_freq_factor)) ||
            (st = obj_num(c, rp, rp_name, "original_max_position_embeddings", l3, &n0)) ||
            (st = obj_num(c, rp, rp_name, "beta_fast", false, &r->beta_fast)) ||
            (st = obj_num(c, rp, rp_name, "beta_slow", false, &r->beta_slow)) ||
            (st = obj_num(c, rp, rp_name, "attention_factor", false, &r->attention_factor)))
            return st;
        r->original_max_position_embeddings = (int64_t)n0;
        if (scaled && !(r->factor > 0))
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: %s.factor must be positive", c->file, rp_name);
    }
    if (!(r->theta > 0) || !(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: rope_theta or partial_rotary_factor out of range",
                            c->file);
    if (cfg->family == WEFT_FAMILY_NEMOTRON_H) r->type = WEFT_ROPE_NONE; /* attention without positions */
    return WEFT_OK;
}

/* ---- layer patterns ---- */

static weft_status check_layers(const cctx *c, int64_t n) {
    if (n < 1) return weft_err_set(c->err, WEFT_EFORMAT, "%s: the model has no layers", c->file);
    if (n > WEFT_MAX_LAYERS)
        return weft_err_set(c->err, WEFT_ENOTSUP, "%s: %lld layers (at most %d)", c->file, (long long)n,
                            WEFT_MAX_LAYERS);
    return WEFT_OK;
}

static bool nemotron_kind(const char *s, weft_layer_kind *k) {
    if (!strcmp(s, "M") || !strcmp(s, "mamba") || !strcmp(s, "linear_attention"))
        *k = WEFT_LAYER_LINEAR;
    else if (!strcmp(s, "*") || !strcmp(s, "attention") || !strcmp(s, "full_attention"))
        *k = WEFT_LAYER_ATTENTION;
    else if (!strcmp(s, "-") || !strcmp(s, "mlp"))
        *k = WEFT_LAYER_MLP;
    else if (!strcmp(s, "E") || !strcmp(s, "moe"))
        *k = WEFT_LAYER_MOE;
    else
        return false;
    return true;
}

static weft_status nemotron_layers(const cctx *c, weft_config *cfg) {
    json_t *list = get(c, "layers_block_type"), *pat = get(c, "hybrid_override_pattern");
    int64_t n;
    if (list) {
        if (!json_is_array(list))
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: layers_block_type must be a list", c->file);
        n = (int64_t)json_array_size(list);
    } else if (pat) {
        if (!json_is_string(pat))
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: hybrid_override_pattern must be a string",
                                c->file);
        n = (int64_t)strlen(json_string_value(pat));
    } else {
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: missing required key layers_block_type (or "
                            "hybrid_override_pattern)",
                            c->file);
    }
    weft_status st = check_layers(c, n);
    if (st) return st;
    for (int64_t i = 0; i < n; i++) {
        char one[2] = {list ? 0 : json_string_value(pat)[i], 0}; /* one character of the legacy pattern */
        const char *s = list ? json_string_value(json_array_get(list, (size_t)i)) : one;
        if (!s || !nemotron_kind(s, &cfg->layer_kind[i]))
            return weft_err_set(c->err, WEFT_EFORMAT, "%s: layer %lld has unknown block type \"%s\"", c->file,
                                (long long)i, s ? s : "(not a string)");
    }
    /* num_hidden_layers is deprecated for nemotron_h (the pattern's length rules); a disagreeing one is
     * corrupt */
    int64_t nh;
    if ((st = get_int(c, "num_hidden_layers", n, false, 1, &nh))) return st;
    if (nh != n)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: num_hidden_layers %lld disagrees with the %lld-layer pattern", c->file,
                            (long long)nh, (long long)n);
    cfg->n_layers = n;
    return WEFT_OK;
}

/* qwen3_5: layer_types, else every full_attention_interval-th layer is full attention. */
static weft_status qwen35_layers(const cctx *c, weft_config *cfg) {
    weft_status st;
    if ((st = get_int(c, "num_hidden_layers", 0, true, 1, &cfg->n_layers)) ||
        (st = check_layers(c, cfg->n_layers)) ||
        (st = get_int(c, "full_attention_interval", 4, false, 1, &cfg->full_attention_interval)))
        return st;
    json_t *lt = get(c, "layer_types");
    if (lt && (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->n_layers))
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: layer_types must be a list of num_hidden_layers (%lld) names", c->file,
                            (long long)cfg->n_layers);
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        if (!lt) {
            cfg->layer_kind[i] =
                (i + 1) % cfg->full_attention_interval == 0 ? WEFT_LAYER_ATTENTION : WEFT_LAYER_LINEAR;
            continue;
        }
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (s && strcmp(s, "full_attention") == 0)
            cfg->layer_kind[i] = WEFT_LAYER_ATTENTION;
        else if (s && strcmp(s, "linear_attention") == 0)
            cfg->layer_kind[i] = WEFT_LAYER_LINEAR;
        else
            return weft_err_set(c->err, WEFT_EFORMAT,
                                "%s: layer_types[%lld] \"%s\" is not full_attention or "
                                "linear_attention",
                                c->file, (long long)i, s ? s : "(not a string)");
    }
    return WEFT_OK;
}

/* llama/qwen3: all full attention; a sliding-window layer would compute something else, so refuse it. */
static weft_status dense_layers(const cctx *c, weft_config *cfg) {
    weft_status st;
    bool sw = false;
    if ((st = get_int(c, "num_hidden_layers", 0, true, 1, &cfg->n_layers)) ||
        (st = check_layers(c, cfg->n_layers)) || (st = get_bool(c, "use_sliding_window", false, &sw)))
        return st;
    if (sw) return weft_err_set(c->err, WEFT_ENOTSUP, "%s: use_sliding_window is not supported", c->file);
    json_t *lt = get(c, "layer_types");
    for (size_t i = 0; json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (!s || strcmp(s, "full_attention") != 0)
            return weft_err_set(c->err, WEFT_ENOTSUP, "%s: layer_types[%zu] \"%s\" is not supported", c->file,
                                i, s ? s : "(not a string)");
    }
    for (int64_t i = 0; i < cfg->n_layers; i++) cfg->layer_kind[i] = WEFT_LAYER_ATTENTION;
    return WEFT_OK;
}

static bool has_kind(const weft_config *cfg, weft_layer_kind k) {
    for (int64_t i = 0; i < cfg->n_layers; i++)
        if (cfg->layer_kind[i] == k) return true;
    return false;
}

/* ---- per family ---- */

static weft_status parse_qwen35(const cctx *c, weft_config *cfg) {
    bool moe = cfg->family == WEFT_FAMILY_QWEN3_5_MOE, lin = has_kind(cfg, WEFT_LAYER_LINEAR);
    weft_status st;
    if ((st = get_bool(c, "attn_output_gate", true, &cfg->attn_output_gate)) ||
        (st = get_int(c, "linear_conv_kernel_dim", 4, false, 1, &cfg->linear_conv_kernel_dim)) ||
        (st = get_int(c, "linear_key_head_dim", 128, false, 1, &cfg->linear_key_head_dim)) ||
        (st = get_int(c, "linear_value_head_dim", 128, false, 1, &cfg->linear_value_head_dim)) ||
        (st = get_int(c, "linear_num_key_heads", 0, lin, 1, &cfg->linear_num_key_heads)) ||
        (st = get_int(c, "linear_num_value_heads", 0, lin, 1, &cfg->linear_num_value_heads)) ||
        (st = get_int(c, "mtp_num_hidden_layers", 0, false, 0, &cfg->mtp_num_hidden_layers)))
        return st;
    if (!moe) return WEFT_OK;
    if ((st = get_int(c, "num_experts", 0, true, 1, &cfg->num_experts)) ||
        (st = get_int(c, "num_experts_per_tok", 0, true, 1, &cfg->num_experts_per_tok)) ||
        (st = get_int(c, "moe_intermediate_size", 0, true, 1, &cfg->moe_intermediate_size)) ||
        (st = get_int(c, "shared_expert_intermediate_size", 0, false, 0,
                      &cfg->shared_expert_intermediate_size)) ||
        (st = get_bool(c, "norm_topk_prob", true, &cfg->norm_topk_prob)))
        return st;
    cfg->n_shared_experts = cfg->shared_expert_intermediate_size > 0 ? 1 : 0;
    cfg->routed_scaling_factor = 1.0;
    cfg->n_group = cfg->topk_group = 1;
    if (cfg->num_experts_per_tok > cfg->num_experts)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: num_experts_per_tok exceeds num_experts", c->file);
    return WEFT_OK;
}

static weft_status parse_nemotron(const cctx *c, weft_config *cfg) {
    bool lin = has_kind(cfg, WEFT_LAYER_LINEAR), moe = has_kind(cfg, WEFT_LAYER_MOE);
    weft_status st;
    /* legacy names: mamba_n_groups, mamba_d_conv */
    int64_t g_legacy, k_legacy;
    if ((st = get_int(c, "mamba_num_heads", 0, lin, 1, &cfg->mamba_num_heads)) ||
        (st = get_int(c, "mamba_head_dim", 0, lin, 1, &cfg->mamba_head_dim)) ||
        (st = get_int(c, "ssm_state_size", 0, lin, 1, &cfg->ssm_state_size)) ||
        (st = get_int(c, "mamba_n_groups", 8, false, 1, &g_legacy)) ||
        (st = get_int(c, "n_groups", g_legacy, false, 1, &cfg->n_groups)) ||
        (st = get_int(c, "mamba_d_conv", 4, false, 1, &k_legacy)) ||
        (st = get_int(c, "conv_kernel", k_legacy, false, 1, &cfg->conv_kernel)) ||
        (st = get_bool(c, "use_conv_bias", true, &cfg->use_conv_bias)) ||
        (st = get_int(c, "num_nextn_predict_layers", 0, false, 0, &cfg->num_nextn_predict_layers)))
        return st;
    cfg->time_step_limit_min = 0.0;
    cfg->time_step_limit_max = INFINITY;
    json_t *tl = get(c, "time_step_limit");
    if (tl && (!json_is_array(tl) || json_array_size(tl) != 2 ||
               !json_to_f64(json_array_get(tl, 0), &cfg->time_step_limit_min) ||
               !json_to_f64(json_array_get(tl, 1), &cfg->time_step_limit_max)))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: time_step_limit must be a [min, max] pair of numbers",
                            c->file);
    if (lin && cfg->mamba_num_heads % cfg->n_groups != 0)
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: mamba_num_heads is not a multiple of n_groups",
                            c->file);
    int64_t latent = 0;
    json_t *jl = get(c, "moe_latent_size");
    if ((st = get_int(c, "n_routed_experts", 0, moe, 1, &cfg->num_experts)) ||
        (st = get_int(c, "num_experts_per_tok", 0, moe, 1, &cfg->num_experts_per_tok)) ||
        (st = get_int(c, "moe_intermediate_size", 0, moe, 1, &cfg->moe_intermediate_size)) ||
        (st = get_int(c, "moe_shared_expert_intermediate_size", 0, false, 0,
                      &cfg->shared_expert_intermediate_size)) ||
        (st = get_int(c, "n_shared_experts", 1, false, 0, &cfg->n_shared_experts)) ||
        (st = get_num(c, "routed_scaling_factor", 1.0, &cfg->routed_scaling_factor)) ||
        (st = get_int(c, "n_group", 1, false, 1, &cfg->n_group)) ||
        (st = get_int(c, "topk_group", 1, false, 1, &cfg->topk_group)) ||
        (st = get_bool(c, "norm_topk_prob", true, &cfg->norm_topk_prob)) ||
        (jl && (st = get_int(c, "moe_latent_size", 0, false, 1, &latent))))
        return st;
    cfg->moe_latent_size = latent;
    if (moe && (cfg->num_experts % cfg->n_group != 0 || cfg->num_experts_per_tok > cfg->num_experts ||
                cfg->topk_group > cfg->n_group))
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: inconsistent MoE sizes (n_routed_experts, num_experts_per_tok, "
                            "n_group, topk_group)",
                            c->file);
    return WEFT_OK;
}

static weft_family family_of(const char *mt) {
    static const struct {
        const char *name;
        weft_family f;
    } map[] = {
        {"llama", WEFT_FAMILY_LLAMA},
        {"qwen3", WEFT_FAMILY_QWEN3},
        {"qwen3_5", WEFT_FAMILY_QWEN3_5},
        {"qwen3_5_text", WEFT_FAMILY_QWEN3_5},
        {"qwen3_5_moe", WEFT_FAMILY_QWEN3_5_MOE},
        {"qwen3_5_moe_text", WEFT_FAMILY_QWEN3_5_MOE},
        {"nemotron_h", WEFT_FAMILY_NEMOTRON_H},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(mt, map[i].name) == 0) return map[i].f;
    return WEFT_FAMILY_UNKNOWN;
}

/* An activation key of the text model (text_config for nested configs, else the top level; never a vision
 * tower's) must name what the family computes: anything else would silently run the wrong function.
 * "swish" is transformers' other name for SiLU (ACT2FN). Absent = the family's own. */
static weft_status check_act(const cctx *c, weft_family f, const char *key, const char *want) {
    json_t *v = json_object_get(c->text, key);
    if (!v || json_is_null(v)) return WEFT_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    bool silu = !strcmp(want, "silu");
    if (s && (!strcmp(s, want) || (silu && !strcmp(s, "swish")))) return WEFT_OK;
    return weft_err_set(c->err, WEFT_ENOTSUP, "%s: %s \"%.40s\" is not supported for %s (it computes %s)",
                        c->file, key, s ? s : "(not a string)", weft_family_name(f), want);
}

static weft_status check_activations(const cctx *c, weft_family f) {
    weft_status st;
    if (f == WEFT_FAMILY_NEMOTRON_H) {
        if ((st = check_act(c, f, "mlp_hidden_act", "relu2"))) return st;
        return check_act(c, f, "mamba_hidden_act", "silu");
    }
    return check_act(c, f, "hidden_act", "silu"); /* llama, qwen3, qwen3_5(_moe): SwiGLU MLPs and experts */
}

static weft_status parse_common(const cctx *c, weft_config *cfg) {
    weft_family f = cfg->family;
    bool nemo = f == WEFT_FAMILY_NEMOTRON_H, q35 = f == WEFT_FAMILY_QWEN3_5 || f == WEFT_FAMILY_QWEN3_5_MOE;
    weft_status st;
    if (nemo)
        st = nemotron_layers(c, cfg);
    else if (q35)
        st = qwen35_layers(c, cfg);
    else
        st = dense_layers(c, cfg);
    if (!st) st = check_activations(c, f);
    if (st) return st;
    /* a dense MLP size is needed where a dense MLP exists */
    bool need_i = f == WEFT_FAMILY_LLAMA || f == WEFT_FAMILY_QWEN3 || f == WEFT_FAMILY_QWEN3_5 ||
                  (nemo && has_kind(cfg, WEFT_LAYER_MLP));
    int64_t max_pos_def = f == WEFT_FAMILY_LLAMA ? 2048 : nemo ? 4096 : 32768;
    if ((st = get_int(c, "vocab_size", 0, true, 1, &cfg->vocab_size)) ||
        (st = get_int(c, "hidden_size", 0, true, 1, &cfg->hidden_size)) ||
        (st = get_int(c, "intermediate_size", 0, need_i, 1, &cfg->intermediate_size)) ||
        (st = get_int(c, "num_attention_heads", 0, true, 1, &cfg->n_heads)) ||
        (st = get_int(c, "num_key_value_heads", cfg->n_heads, false, 1, &cfg->n_kv_heads)) ||
        (st = get_num(c, nemo ? "layer_norm_epsilon" : "rms_norm_eps", nemo ? 1e-5 : 1e-6,
                      &cfg->rms_norm_eps)) ||
        (st = get_bool(c, "tie_word_embeddings", false, &cfg->tie_word_embeddings)) ||
        (st = get_bool(c, "attention_bias", false, &cfg->attention_bias)) ||
        (st = get_bool(c, "mlp_bias", false, &cfg->mlp_bias)) ||
        (st = get_int(c, "max_position_embeddings", max_pos_def, false, 1, &cfg->max_position_embeddings)) ||
        (st = get_token(c, "bos_token_id", &cfg->bos_token_id)) ||
        (st = get_token(c, "pad_token_id", &cfg->pad_token_id)))
        return st;
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: num_attention_heads %lld is not a multiple of "
                            "num_key_value_heads %lld",
                            c->file, (long long)cfg->n_heads, (long long)cfg->n_kv_heads);
    /* head_dim: explicit, else llama/nemotron H/Hq, qwen3 128, qwen3_5 256 (transformers defaults) */
    int64_t hd_def = f == WEFT_FAMILY_QWEN3 ? 128 : q35 ? 256 : cfg->hidden_size / cfg->n_heads;
    if (nemo && get(c, "attention_head_dim") && !get(c, "head_dim"))
        st = get_int(c, "attention_head_dim", hd_def, false, 1, &cfg->head_dim);
    else
        st = get_int(c, "head_dim", hd_def, false, 1, &cfg->head_dim);
    if (st) return st;
    if (cfg->head_dim < 1)
        return weft_err_set(c->err, WEFT_EFORMAT,
                            "%s: head_dim cannot be derived (hidden_size < num_attention_heads)", c->file);
    if (!(cfg->rms_norm_eps > 0))
        return weft_err_set(c->err, WEFT_EFORMAT, "%s: the norm epsilon must be positive", c->file);
    if ((st = parse_rope(c, cfg))) return st;
    return add_eos(c, get(c, "eos_token_id"), cfg);
}

static weft_status parse_generation(const char *text, weft_config *cfg, weft_err *err) {
    json_error_t jerr;
    json_t *g = load_json(text, &jerr);
    if (!g || !json_is_object(g)) {
        json_decref(g);
        return weft_err_set(err, WEFT_EFORMAT, "generation_config.json: not a JSON object: %s (line %d)",
                            g ? "wrong type" : jerr.text, jerr.line);
    }
    cctx c = {g, g, "generation_config.json", err};
    int64_t k = 0;
    weft_status st = add_eos(&c, get(&c, "eos_token_id"), cfg);
    if (!st && cfg->bos_token_id < 0) st = get_token(&c, "bos_token_id", &cfg->bos_token_id);
    if (!st && cfg->pad_token_id < 0) st = get_token(&c, "pad_token_id", &cfg->pad_token_id);
    cfg->has_temperature = get(&c, "temperature") != NULL;
    cfg->has_top_p = get(&c, "top_p") != NULL;
    cfg->has_top_k = get(&c, "top_k") != NULL;
    cfg->has_min_p = get(&c, "min_p") != NULL;
    if (!st) st = get_num(&c, "temperature", 1.0, &cfg->temperature);
    if (!st) st = get_num(&c, "top_p", 1.0, &cfg->top_p);
    if (!st) st = get_int(&c, "top_k", 0, false, 0, &k);
    if (!st) st = get_num(&c, "min_p", 0.0, &cfg->min_p);
    if (!st && k > INT32_MAX) st = weft_err_set(err, WEFT_EFORMAT, "generation_config.json: top_k too large");
    cfg->top_k = (int)k;
    json_decref(g);
    return st;
}

weft_status weft_config_parse(const char *config_json, const char *generation_json, weft_config *cfg,
                              weft_err *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->bos_token_id = cfg->pad_token_id = -1;
    cfg->temperature = 1.0;
    cfg->top_p = 1.0;
    json_error_t jerr;
    json_t *root = load_json(config_json, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return weft_err_set(err, WEFT_EFORMAT, "config.json: not a JSON object: %s (line %d)",
                            root ? "wrong type" : jerr.text, jerr.line);
    }
    weft_status st;
    json_t *mt = json_object_get(root, "model_type");
    json_t *tc = json_object_get(root, "text_config");
    cctx c = {root, json_is_object(tc) ? tc : root, "config.json", err};
    if (!mt || json_is_null(mt)) {
        st = weft_err_set(err, WEFT_EFORMAT, "config.json: missing required key model_type");
    } else if (!json_is_string(mt)) {
        st = weft_err_set(err, WEFT_EFORMAT, "config.json: model_type must be a string");
    } else if ((cfg->family = family_of(json_string_value(mt))) == WEFT_FAMILY_UNKNOWN) {
        st = weft_err_set(
            err, WEFT_ENOTSUP,
            "config.json: model_type \"%.64s\" is not supported (llama, qwen3, qwen3_5, qwen3_5_moe, "
            "nemotron_h)",
            json_string_value(mt));
    } else {
        snprintf(cfg->model_type, sizeof cfg->model_type, "%s", json_string_value(mt));
        st = parse_common(&c, cfg);
        if (!st && (cfg->family == WEFT_FAMILY_QWEN3_5 || cfg->family == WEFT_FAMILY_QWEN3_5_MOE))
            st = parse_qwen35(&c, cfg);
        if (!st && cfg->family == WEFT_FAMILY_NEMOTRON_H) st = parse_nemotron(&c, cfg);
    }
    json_decref(root);
    if (!st && generation_json) st = parse_generation(generation_json, cfg, err);
    return st;
}

/* Whole file as a NUL-terminated string; *out NULL and WEFT_OK when absent and optional. */
static weft_status slurp(const char *dir, const char *name, bool optional, char **out, weft_err *err) {
    char path[4096];
    *out = NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return weft_err_set(err, WEFT_EINVAL, "%s: path too long", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (optional && errno == ENOENT) return WEFT_OK;
        return weft_err_set(err, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf) return weft_err_set(err, WEFT_ENOMEM, "%s: out of memory reading", path);
    if (bad) {
        free(buf);
        return weft_err_set(err, WEFT_EIO, "%s: read error", path);
    }
    buf[len] = 0;
    *out = buf;
    return WEFT_OK;
}

weft_status weft_config_load_dir(const char *dir, weft_config *cfg, weft_err *err) {
    char *cj = NULL, *gj = NULL;
    weft_status st = slurp(dir, "config.json", false, &cj, err);
    if (!st) st = slurp(dir, "generation_config.json", true, &gj, err);
    if (!st) st = weft_config_parse(cj, gj, cfg, err);
    free(cj);
    free(gj);
    return st;
}
