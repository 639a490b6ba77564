/* Family dispatch by config family. */
#include "weft/families.h"

weft_status weft_family_create(const weft_config *cfg, const weft_tensor_set *ts,
                               const weft_family_opts *opts, weft_family_model *out, weft_err *err) {
    switch (cfg->family) {
    case WEFT_FAMILY_LLAMA:
    case WEFT_FAMILY_QWEN3:
        return weft_llama_create(cfg, ts, opts, out, err);
    case WEFT_FAMILY_QWEN3_5:
    case WEFT_FAMILY_QWEN3_5_MOE:
        return weft_qwen3_5_create(cfg, ts, opts, out, err);
    case WEFT_FAMILY_NEMOTRON_H:
        return weft_nemotron_h_create(cfg, ts, opts, out, err);
    default:
        break;
    }
    return weft_err_set(err, WEFT_ENOTSUP, "model family %s is not supported by this build yet",
                        weft_family_name(cfg->family));
}
