/* Private to src/model/format/gguf*.c: GGUF tensor names of the hybrid architectures (qwen35, qwen35moe,
 * nemotron_h, nemotron_h_moe) → the hub names their families read (docs families-and-formats §6.5). Not
 * installed. */
#ifndef WEFT_GGUF_HYBRID_H
#define WEFT_GGUF_HYBRID_H

#include <stdbool.h>
#include <stddef.h>

typedef enum weft_gguf_hybrid {
    WEFT_GGUF_NOT_HYBRID = 0,
    WEFT_GGUF_QWEN35,    /* qwen35 and qwen35moe: hub names under `model.` plus `lm_head.weight` */
    WEFT_GGUF_NEMOTRON_H /* nemotron_h and nemotron_h_moe: hub names under `backbone.` plus `lm_head.weight`
                          */
} weft_gguf_hybrid;

/* Which naming scheme `arch` (general.architecture) uses; WEFT_GGUF_NOT_HYBRID for any other or NULL. */
weft_gguf_hybrid weft_gguf_hybrid_of(const char *arch);

/* Maps one GGUF tensor name to its hub name in out[cap]:
 *   blk.N.<stem>[.weight|.bias] → <prefix>layers.N.<hub stem>[.weight|.bias] for N < mtp_from,
 *   blocks N >= mtp_from (the trailing nextn_predict_layers blocks) → mtp.layers.(N − mtp_from).<hub stem>
 *   (and blk.N.nextn.* → mtp.fc / mtp.pre_fc_norm_embedding / mtp.pre_fc_norm_hidden / mtp.norm ...),
 * mtp_from < 0 meaning "no MTP blocks". The families ignore mtp.*. Value conventions are not changed here
 * (the stored data stays as it is; weft_gguf_config records them: norms_plus_one, a_is_neg_exp,
 * gdn_tiled_heads). *layer is the block index or -1. false when the name has no mapping (*too_small: out was
 * too small). */
bool weft_gguf_hybrid_map(weft_gguf_hybrid h, const char *name, long mtp_from, char *out, size_t cap,
                          long *layer, bool *too_small);

#endif
