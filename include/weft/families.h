/* weft/families.h — constructors of the model families (src/families/<family>.c). */
#ifndef WEFT_FAMILIES_H
#define WEFT_FAMILIES_H

#include "weft/family.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options every family constructor takes. */
typedef struct weft_family_opts {
    int max_rows;    /* most rows per forward (row budget of a round) */
    int max_context; /* most positions per stream (attention scratch is sized by it) */
    bool mlx;        /* tensors come from an MLX checkpoint (conventions differ: norms, conv layout) */
} weft_family_opts;

/* llama and qwen3 (dense decoders, families-and-formats §1–§2). Resolves and checks every tensor of cfg's
 * shape in ts (canonical HF names), decodes norm vectors to fp32; weights stay as stored.
 * Errors: WEFT_EFORMAT naming a missing tensor or a wrong shape; WEFT_ENOTSUP for an option it cannot run. */
weft_status weft_llama_create(const weft_config *cfg, const weft_tensor_set *ts, const weft_family_opts *opts,
                              weft_family_model *out, weft_err *err);

/* nemotron_h, dense and MoE (families-and-formats §4, §10): Mamba-2 'M', attention without positional
 * encoding '*', relu² MLP '-', sigmoid-routed MoE 'E' blocks as cfg->layer_kind says. Tensors by hub names
 * (`backbone.*`, also `backbone.embedding.weight`); experts per expert, stacked, or MLX `switch_mlp.fc1/fc2`
 * (any weight dtype weft_matmul reads, incl. MLX affine); `mtp.*` is the MTP draft head (ops `draft`, when
 * num_nextn_predict_layers >= 1; src/families/nemotron_h_mtp.c). Small vectors (norms, conv,
 * A = −exp(A_log), D, dt_bias, correction bias) are decoded to fp32; weights stay as stored. Prefill runs the
 * recurrence row by row (SPEC §4.3.2); keep() rolls a stream back within its last forward's final 16 rows.
 * Errors: WEFT_EFORMAT naming a missing tensor or a wrong shape; WEFT_ENOTSUP for a block type it cannot run;
 * WEFT_ENOMEM. */
weft_status weft_nemotron_h_create(const weft_config *cfg, const weft_tensor_set *ts,
                                   const weft_family_opts *opts, weft_family_model *out, weft_err *err);

/* qwen3_5 and qwen3_5_moe (families-and-formats §3, §10): Gated DeltaNet + gated full attention (partial
 * RoPE, zero-centred norms: 1+w added at load unless opts->mlx), SwiGLU MLP or MoE (fp32 softmax router,
 * top-k with ties to the lower id, renormalised, σ-gated shared expert; experts per expert, fused
 * gate_up_proj/down_proj or MLX switch_mlp). Tensors by hub names (`model.language_model.*` or `model.*`,
 * `lm_head.weight`); vision tensors are ignored; `mtp.*` is the MTP draft head (ops `draft`, when
 * mtp_num_hidden_layers >= 1; src/families/qwen3_5_mtp.c). Prefill runs the token recurrence row by row
 * (SPEC §4.3.2); keep() rolls a stream back to any position within its last forward's first 16 rows
 * (replaying the recurrence). Errors: WEFT_EFORMAT naming a missing tensor or a wrong shape; WEFT_ENOTSUP for
 * a layer kind or weight dtype it cannot run; WEFT_ENOMEM. */
weft_status weft_qwen3_5_create(const weft_config *cfg, const weft_tensor_set *ts,
                                const weft_family_opts *opts, weft_family_model *out, weft_err *err);

/* Loads dir's MTP sidecar (its first `mtp*.safetensors` in name order: TensorFold's `mtp-4bit.safetensors`
 * beside an MLX checkpoint, families-and-formats §6.2) into ts under hub names (`mtp.*`; a Nemotron sidecar's
 * unprefixed `layers.*` get the prefix), its MLX-quantized modules folded (each module's bits from its
 * shapes, the group size from `__metadata__.group_size`, default 64). Nothing happens when dir has none.
 * *loaded (may be NULL) says whether one was. Errors: those of weft_safetensors_load_file and weft_mlx_fold
 * (naming the file / module), WEFT_EFORMAT (a module whose shapes fit no bit width), WEFT_ENOMEM. */
weft_status weft_mtp_sidecar_load(const char *dir, weft_tensor_set *ts, bool *loaded, weft_err *err);

/* True when ts holds any tensor whose name starts with "mtp." (a checkpoint or sidecar MTP draft head). */
bool weft_mtp_present(const weft_tensor_set *ts);

/* Picks the constructor for cfg->family. */
weft_status weft_family_create(const weft_config *cfg, const weft_tensor_set *ts,
                               const weft_family_opts *opts, weft_family_model *out, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
