/* GGUF tensor names of the hybrid architectures → hub names (docs families-and-formats §6.5; llama.cpp's
 * gguf-py tensor_mapping.py and conversion/{qwen,nemotron}.py, checked against files its converter wrote:
 * tools/make_hybrid_gguf.py). Names only: the converter's value transforms (1+w norms, ssm_a = −exp(A_log),
 * tiled value heads, squeezed/reshaped small tensors) are described by the config (weft_gguf_config) and
 * honoured by the families. A name this table does not know is an error (see gguf_tensors.c). */
#include "gguf_hybrid.h"

#include <stdio.h>
#include <string.h>

/* How the suffix after the stem may look. */
enum {
    SFX_W = 1,    /* .weight */
    SFX_WB = 3,   /* .weight or .bias (a Linear with an optional bias) */
    SFX_NONE = 4, /* no suffix (ssm_a, ssm_d), or .weight; the hub name has none either */
    SFX_BIAS = 8  /* exactly .bias; the hub name is `hub` with no suffix (dt_bias, correction bias) */
};

typedef struct hyb_rule {
    const char *gguf; /* stem after "blk.N." (or the whole name for globals) */
    const char *hub;
    unsigned sfx;
} hyb_rule;

static const hyb_rule QWEN35_BLOCK[] = {
    {"attn_norm", "input_layernorm", SFX_W},
    {"post_attention_norm", "post_attention_layernorm", SFX_W},
    {"attn_qkv", "linear_attn.in_proj_qkv", SFX_W},
    {"attn_gate", "linear_attn.in_proj_z", SFX_W},
    {"ssm_beta", "linear_attn.in_proj_b", SFX_W},
    {"ssm_alpha", "linear_attn.in_proj_a", SFX_W},
    {"ssm_conv1d", "linear_attn.conv1d", SFX_WB},
    {"ssm_dt", "linear_attn.dt_bias", SFX_BIAS},
    {"ssm_a", "linear_attn.A_log", SFX_NONE}, /* holds −exp(A_log) */
    {"ssm_norm", "linear_attn.norm", SFX_W},
    {"ssm_out", "linear_attn.out_proj", SFX_W},
    {"attn_q", "self_attn.q_proj", SFX_W},
    {"attn_k", "self_attn.k_proj", SFX_W},
    {"attn_v", "self_attn.v_proj", SFX_W},
    {"attn_output", "self_attn.o_proj", SFX_W},
    {"attn_q_norm", "self_attn.q_norm", SFX_W},
    {"attn_k_norm", "self_attn.k_norm", SFX_W},
    {"ffn_gate", "mlp.gate_proj", SFX_W},
    {"ffn_up", "mlp.up_proj", SFX_W},
    {"ffn_down", "mlp.down_proj", SFX_W},
    {"ffn_gate_inp", "mlp.gate", SFX_W},
    {"ffn_gate_exps", "mlp.switch_mlp.gate_proj", SFX_W}, /* stacked [E, I, H] */
    {"ffn_up_exps", "mlp.switch_mlp.up_proj", SFX_W},
    {"ffn_down_exps", "mlp.switch_mlp.down_proj", SFX_W},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj", SFX_W},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj", SFX_W},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj", SFX_W},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate", SFX_W},
};

static const hyb_rule NEMOTRON_BLOCK[] = {
    {"attn_norm", "norm", SFX_W},
    {"ssm_in", "mixer.in_proj", SFX_WB},
    {"ssm_out", "mixer.out_proj", SFX_WB},
    {"ssm_conv1d", "mixer.conv1d", SFX_WB},
    {"ssm_dt", "mixer.dt_bias", SFX_BIAS},
    {"ssm_a", "mixer.A_log", SFX_NONE}, /* holds −exp(A_log), [H, 1] */
    {"ssm_d", "mixer.D", SFX_NONE},     /* [H, 1] */
    {"ssm_norm", "mixer.norm", SFX_W},  /* [G, d_inner/G] */
    {"attn_q", "mixer.q_proj", SFX_WB},
    {"attn_k", "mixer.k_proj", SFX_WB},
    {"attn_v", "mixer.v_proj", SFX_WB},
    {"attn_output", "mixer.o_proj", SFX_WB},
    {"ffn_up", "mixer.up_proj", SFX_WB},
    {"ffn_down", "mixer.down_proj", SFX_WB},
    {"ffn_gate_inp", "mixer.gate", SFX_W},
    {"exp_probs_b", "mixer.gate.e_score_correction_bias", SFX_BIAS},
    {"ffn_up_exps", "mixer.experts.up_proj", SFX_W}, /* stacked [E, I, H] */
    {"ffn_down_exps", "mixer.experts.down_proj", SFX_W},
    {"ffn_up_shexp", "mixer.shared_experts.up_proj", SFX_W},
    {"ffn_down_shexp", "mixer.shared_experts.down_proj", SFX_W},
    {"ffn_latent_down", "mixer.fc1_latent_proj", SFX_W},
    {"ffn_latent_up", "mixer.fc2_latent_proj", SFX_W},
};

/* A NextN block's own tensors → Qwen3.5 mtp.* names (gguf_mtp.c checks them; Nemotron-H NextN blocks are
 * refused in gguf_tensors.c: llama.cpp's converter drops that head). */
static const hyb_rule NEXTN[] = {
    {"nextn.eh_proj", "fc", SFX_W},
    {"nextn.enorm", "pre_fc_norm_embedding", SFX_W},
    {"nextn.hnorm", "pre_fc_norm_hidden", SFX_W},
    {"nextn.shared_head_norm", "norm", SFX_W},
    {"nextn.embed_tokens", "embed_tokens", SFX_W},
    {"nextn.shared_head_head", "shared_head_head", SFX_W},
};

weft_gguf_hybrid weft_gguf_hybrid_of(const char *arch) {
    if (!arch) return WEFT_GGUF_NOT_HYBRID;
    if (!strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe")) return WEFT_GGUF_QWEN35;
    if (!strcmp(arch, "nemotron_h") || !strcmp(arch, "nemotron_h_moe")) return WEFT_GGUF_NEMOTRON_H;
    return WEFT_GGUF_NOT_HYBRID;
}

/* Matches rest = stem + allowed suffix against one rule; *sfx gets the suffix to append ("" for none). */
static bool match(const hyb_rule *r, const char *rest, const char **sfx) {
    size_t n = strlen(r->gguf);
    if (strncmp(rest, r->gguf, n) != 0) return false;
    const char *s = rest + n;
    if (r->sfx == SFX_BIAS) {
        *sfx = "";
        return strcmp(s, ".bias") == 0;
    }
    if (r->sfx == SFX_NONE) {
        *sfx = "";
        return *s == 0 || strcmp(s, ".weight") == 0;
    }
    *sfx = s;
    return strcmp(s, ".weight") == 0 || (r->sfx == SFX_WB && strcmp(s, ".bias") == 0);
}

static const hyb_rule *find(const hyb_rule *rules, size_t n, const char *rest, const char **sfx) {
    for (size_t k = 0; k < n; k++)
        if (match(&rules[k], rest, sfx)) return &rules[k];
    return NULL;
}

/* snprintf's result: true when it fitted. */
static bool fits(int w, size_t cap, bool *too_small) {
    if (w >= 0 && (size_t)w < cap) return true;
    *too_small = true;
    return false;
}

bool weft_gguf_hybrid_map(weft_gguf_hybrid h, const char *name, long mtp_from, char *out, size_t cap,
                          long *layer, bool *too_small) {
    *layer = -1;
    *too_small = false;
    if (h == WEFT_GGUF_NOT_HYBRID) return false;
    const bool qwen = h == WEFT_GGUF_QWEN35;
    const char *pfx = qwen ? "model." : "backbone.";
    if (strncmp(name, "blk.", 4) != 0) {
        const char *hub = NULL;
        if (!strcmp(name, "token_embd.weight"))
            hub = qwen ? "embed_tokens.weight" : "embeddings.weight";
        else if (!strcmp(name, "output_norm.weight"))
            hub = qwen ? "norm.weight" : "norm_f.weight";
        else if (!strcmp(name, "output.weight"))
            return fits(snprintf(out, cap, "lm_head.weight"), cap, too_small);
        if (!hub) return false;
        return fits(snprintf(out, cap, "%s%s", pfx, hub), cap, too_small);
    }
    const char *p = name + 4;
    long n = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) n = n * 10 + (*p++ - '0'), digits++;
    if (!digits || *p != '.' || (digits > 1 && name[4] == '0')) return false;
    *layer = n;
    const char *rest = p + 1, *sfx = "";
    const bool mtp = mtp_from >= 0 && n >= mtp_from;
    if (mtp) {
        const hyb_rule *r = find(NEXTN, sizeof NEXTN / sizeof *NEXTN, rest, &sfx);
        if (r) return fits(snprintf(out, cap, "mtp.%s%s", r->hub, sfx), cap, too_small);
    }
    const hyb_rule *r =
        qwen ? find(QWEN35_BLOCK, sizeof QWEN35_BLOCK / sizeof *QWEN35_BLOCK, rest, &sfx)
             : find(NEMOTRON_BLOCK, sizeof NEMOTRON_BLOCK / sizeof *NEMOTRON_BLOCK, rest, &sfx);
    if (!r) return false;
    if (mtp)
        return fits(snprintf(out, cap, "mtp.layers.%ld.%s%s", n - mtp_from, r->hub, sfx), cap, too_small);
    return fits(snprintf(out, cap, "%slayers.%ld.%s%s", pfx, n, r->hub, sfx), cap, too_small);
}
