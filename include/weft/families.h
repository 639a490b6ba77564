/* weft/families.h — constructors of the model families (src/families/<family>.c). */
#ifndef WEFT_FAMILIES_H
#define WEFT_FAMILIES_H

#include "weft/family.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options every family constructor takes. */
typedef struct weft_family_opts {
    int max_rows;     /* most rows per forward (row budget of a round) */
    int max_context;  /* most positions per stream (attention scratch is sized by it) */
    bool mlx;         /* tensors come from an MLX checkpoint (conventions differ: norms, conv layout) */
} weft_family_opts;

/* llama and qwen3 (dense decoders, families-and-formats §1–§2). Resolves and checks every tensor of cfg's
 * shape in ts (canonical HF names), decodes norm vectors to fp32; weights stay as stored.
 * Errors: WEFT_EFORMAT naming a missing tensor or a wrong shape; WEFT_ENOTSUP for an option it cannot run. */
weft_status weft_llama_create(const weft_config *cfg, const weft_tensor_set *ts, const weft_family_opts *opts,
                              weft_family_model *out, weft_err *err);

/* Picks the constructor for cfg->family. */
weft_status weft_family_create(const weft_config *cfg, const weft_tensor_set *ts, const weft_family_opts *opts,
                               weft_family_model *out, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
