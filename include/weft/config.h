/* weft/config.h — a model's hyperparameters, read from config.json (+ generation_config.json) or from GGUF
 * metadata into one struct. Field meanings and defaults: docs families-and-formats §1.1, §2, §3.1, §4.1, §10.
 * Sizes are element counts; -1 means "absent" where noted. */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include "weft/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_family {
    WEFT_FAMILY_UNKNOWN = 0,
    WEFT_FAMILY_LLAMA,
    WEFT_FAMILY_QWEN3,
    WEFT_FAMILY_QWEN3_5, /* dense Gated DeltaNet hybrid */
    WEFT_FAMILY_QWEN3_5_MOE,
    WEFT_FAMILY_NEMOTRON_H, /* dense or MoE (layer pattern says which) */
} weft_family;

const char *weft_family_name(weft_family f);

typedef enum weft_rope_type {
    WEFT_ROPE_DEFAULT = 0,
    WEFT_ROPE_LINEAR,
    WEFT_ROPE_LLAMA3,
    WEFT_ROPE_YARN,
    WEFT_ROPE_NONE, /* nemotron_h attention: no positional encoding */
} weft_rope_type;

typedef struct weft_rope {
    weft_rope_type type;
    double theta;                             /* rope_theta (default 10000) */
    double partial_rotary_factor;             /* fraction of head_dim rotated (1.0; Qwen3.5 0.25) */
    double factor;                            /* linear/llama3/yarn factor */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int64_t original_max_position_embeddings; /* llama3/yarn N0 */
    double beta_fast, beta_slow;              /* yarn (32, 1) */
    double attention_factor;                  /* yarn: 0 = derive 0.1·ln(factor)+1 */
    bool adjacent_pairs;        /* rotate pairs (2i,2i+1) (GGUF llama, llama2.c) instead of (i, i+r/2) */
    const float *freq_divisors; /* GGUF rope_freqs.weight [r/2] or NULL (then 1) */
} weft_rope;

#define WEFT_MAX_EOS    8
#define WEFT_MAX_LAYERS 1024

typedef enum weft_layer_kind {
    WEFT_LAYER_ATTENTION = 0, /* full attention (+ MLP for llama/qwen) */
    WEFT_LAYER_LINEAR,        /* qwen3_5 Gated DeltaNet / nemotron_h Mamba-2 */
    WEFT_LAYER_MLP,           /* nemotron_h '-' block */
    WEFT_LAYER_MOE,           /* nemotron_h 'E' block */
} weft_layer_kind;

typedef struct weft_config {
    weft_family family;
    char model_type[48]; /* as written in the file */
    int64_t vocab_size;
    int64_t hidden_size;       /* H */
    int64_t intermediate_size; /* I (dense MLP) */
    int64_t n_layers;          /* L */
    int64_t n_heads;           /* Hq */
    int64_t n_kv_heads;        /* Hkv (defaults to Hq) */
    int64_t head_dim;          /* d (llama default H/Hq; qwen3 default 128) */
    double rms_norm_eps;
    bool tie_word_embeddings;
    bool attention_bias, mlp_bias;
    int64_t max_position_embeddings;
    int32_t bos_token_id;                /* -1 none */
    int32_t pad_token_id;                /* -1 none */
    int32_t eos_token_ids[WEFT_MAX_EOS]; /* config ∪ generation_config, in order, no duplicates */
    int n_eos;
    weft_rope rope;

    /* generation_config.json defaults (has_* false when absent) */
    bool has_temperature, has_top_p, has_top_k, has_min_p;
    double temperature, top_p, min_p;
    int top_k;

    /* per-layer kind (all WEFT_LAYER_ATTENTION for llama/qwen3) */
    weft_layer_kind layer_kind[WEFT_MAX_LAYERS];

    /* qwen3_5 (text_config) */
    bool attn_output_gate;
    int64_t linear_conv_kernel_dim, linear_key_head_dim, linear_value_head_dim;
    int64_t linear_num_key_heads, linear_num_value_heads;
    int64_t full_attention_interval;
    int64_t mtp_num_hidden_layers;
    /* MoE (qwen3_5_moe and nemotron_h) */
    int64_t num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size;
    bool norm_topk_prob;
    double routed_scaling_factor;
    int64_t n_group, topk_group, n_shared_experts, moe_latent_size;
    /* nemotron_h mamba */
    int64_t mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel;
    bool use_conv_bias;
    double time_step_limit_min, time_step_limit_max;
    int64_t num_nextn_predict_layers;

    /* How the stored tensors encode what HF computes at load: GGUF conventions (families-and-formats §6.5),
     * set by weft_gguf_config; all false for HF and MLX checkpoints. */
    bool norms_plus_one;  /* qwen3_5 zero-centred norms are stored as 1+w (the family must not add 1 again) */
    bool a_is_neg_exp;    /* the A_log tensor holds A = −exp(A_log) (GGUF ssm_a of qwen35 and nemotron_h) */
    bool gdn_tiled_heads; /* qwen3_5 Gated DeltaNet: value head j (in the stored order of in_proj_qkv's V
                             rows, in_proj_z, in_proj_b/a, A, dt_bias, conv V channels and out_proj's columns)
                             pairs with key head j mod Hk (GGUF's tiled order), not ⌊j/(Hv/Hk)⌋ (HF's grouped
                             order) */
} weft_config;

/* Reads dir/config.json (flat or nested `text_config`) and, when present, dir/generation_config.json.
 * Errors: WEFT_EIO (missing/unreadable), WEFT_EFORMAT (bad JSON, missing or mistyped required key, naming
 * it), WEFT_ENOTSUP (unknown model_type, unsupported rope_type). */
weft_status weft_config_load_dir(const char *dir, weft_config *cfg, weft_err *err);

/* Same from JSON text already in memory (generation_json may be NULL). */
weft_status weft_config_parse(const char *config_json, const char *generation_json, weft_config *cfg,
                              weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
