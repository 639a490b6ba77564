/* weft/safetensors.h — safetensors checkpoints (single file or sharded), MLX affine quantization folding,
 * MLX → HF tensor names, and the weights-vs-memory check.
 *
 * Formats: docs families-and-formats §6.1 (safetensors) and §6.2 (MLX affine; mlx/ops.cpp affine_quantize /
 * affine_dequantize, mlx_lm/utils.py load_model). Readers never convert weights: every tensor points into a
 * read-only mmap of its file, owned by the weft_tensor_set.
 *
 * Shape conventions of the loaded tensors:
 * - a 0-d (scalar) tensor is stored as ndim 1, shape [1] (weft_tensor_cols needs one dimension);
 * - a tensor of more than WEFT_MAX_DIMS dimensions (e.g. a vision patch-embedding conv [32,3,2,16,16]) keeps
 *   its bytes and its innermost WEFT_MAX_DIMS-1 dimensions; the outer ones are merged into dim 0
 *   ([32,3,2,16,16] → [96,2,16,16]), so rows and row length are unchanged;
 * - tensor data is wherever the file puts it: writers pad the header to 8 bytes, but nothing guarantees it,
 * so decoders read through memcpy. */
#ifndef WEFT_SAFETENSORS_H
#define WEFT_SAFETENSORS_H

#include "weft/common.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Header length cap (the reference implementation's limit). */
#define WEFT_SAFETENSORS_MAX_HEADER (100u * 1024u * 1024u)

/* Loads every tensor of one .safetensors file into set under its stored name. The file is mmap'd read-only
 * and the mapping handed to the set (unmapped by weft_tensor_set_free), even on failure.
 * Validates: file ≥ 8 bytes; header length (u64 LE) ≤ WEFT_SAFETENSORS_MAX_HEADER and inside the file; the
 * header is one JSON object without duplicate keys; every entry has dtype (string), shape (array of
 * non-negative integers) and data_offsets ([begin, end], begin ≤ end); end − begin = numel·sizeof(dtype);
 * end ≤ data section size; no two tensors' byte ranges overlap; `__metadata__` (optional) maps strings to
 * strings. Errors (one line naming the file and, where it applies, the tensor): WEFT_EIO (open/stat/mmap),
 * WEFT_EFORMAT (every check above; a name already in set), WEFT_ENOTSUP (a valid safetensors dtype this build
 * does not decode: U64, F8_E4M3, F8_E5M2, ...). On failure set may already hold some of the file's tensors;
 * the caller frees it. is_mlx (may be NULL) is set true when `__metadata__.format` is "mlx", else left alone.
 */
weft_status weft_safetensors_load_file(const char *path, weft_tensor_set *set, bool *is_mlx, weft_err *err);

typedef struct weft_safetensors_dir_info {
    int n_files;  /* shard files loaded */
    bool sharded; /* read through model.safetensors.index.json */
    bool is_mlx;  /* some shard's __metadata__.format is "mlx" */
} weft_safetensors_dir_info;

/* Loads a checkpoint directory into set (stored names), choosing the files as:
 * 1. dir/model.safetensors.index.json when present: its `weight_map` (name → file) must match the shards
 *    exactly (every listed tensor in its listed shard, every shard tensor listed); a shard the index names
 * but the directory lacks is WEFT_EFORMAT naming both;
 * 2. else dir/model.safetensors when present;
 * 3. else every dir/model*.safetensors (MLX's `model-0000k-of-0000n.safetensors`), in name order;
 * 4. else every dir/ *.safetensors, in name order.
 * Sidecars (TensorFold `mtp-4bit.safetensors`) are therefore not loaded beside a model*.safetensors; load
 * them with weft_safetensors_load_file. Errors: as weft_safetensors_load_file, plus WEFT_EIO (dir unreadable
 * or no .safetensors file), WEFT_EFORMAT (bad index JSON, a weight_map mismatch). info may be NULL. */
weft_status weft_safetensors_load_dir(const char *dir, weft_tensor_set *set, weft_safetensors_dir_info *info,
                                      weft_err *err);

/* ---- MLX affine quantization (§6.2) ---- */

typedef struct weft_mlx_summary {
    bool present; /* config.json has MLX affine quantization (`quantization` or legacy
                     `quantization_config` without quant_method) */
    int bits;     /* global parameters (0 when !present) */
    int group_size;
    int n_folded;    /* modules folded into WEFT_DT_MLX_AFFINE */
    int n_overrides; /* folded modules whose parameters came from a per-module entry */
} weft_mlx_summary;

/* Folds each quantized module `P` (tensors `P.weight` uint32 [.., out, words], `P.scales` and `P.biases`
 * [.., out, in/gs] of F32/F16/BF16) into one tensor `P.weight` of dtype WEFT_DT_MLX_AFFINE with logical shape
 * [.., out, in], in = words·32/bits, and removes `P.scales`/`P.biases` from set. data/nbytes stay the packed
 * words; scales/biases point at the stored scale rows.
 * Which modules (mlx_lm load_model): config_json's `quantization` is read before the legacy
 * `quantization_config` (top level, then text_config); a legacy one with `quant_method` (awq, gptq, mxfp4,
 * ...) is WEFT_ENOTSUP. Global `group_size`, `bits` are required, `mode` defaults to "affine" (anything else:
 * WEFT_ENOTSUP). For each `P.weight` in set: if P (the module path as stored; for names already canonicalised
 * also the MLX spelling) is a key of the quantization object, its value decides: false or {} = not quantized,
 * true = global parameters, a non-empty dict = its own parameters with mlx's own defaults (group_size 64,
 * bits 4, mode affine); otherwise P is quantized iff `P.scales` exists, with the global parameters.
 * Checks (WEFT_EFORMAT naming the module): `P.scales`/`P.biases` present, same dtype and shape, float dtype;
 * weight U32 with the same leading dims; words·32 == bits·(scale_cols·gs) (bits inferred from the shapes must
 * equal the configured bits); a module configured unquantized must not have `P.scales`. bits ∉ {2,3,4,5,6,8}
 * or gs ∉ {32,64,128}: WEFT_ENOTSUP. Without any quantization entry in config_json nothing is folded, but a
 * U32 `P.weight` with `P.scales` is WEFT_EFORMAT (quantized weights with no parameters).
 * config_json: the text of config.json (NUL-terminated). summary may be NULL. */
weft_status weft_mlx_fold(weft_tensor_set *set, const char *config_json, weft_mlx_summary *summary,
                          weft_err *err);

/* Bytes of one stored row of an MLX affine tensor: the packed words, cols·bits/8 (a multiple of 4 because
 * cols is a multiple of the group size ≥ 32). Row r's words start at t->data + r·weft_mlx_row_bytes(t). */
size_t weft_mlx_row_bytes(const weft_tensor *t);
/* Bytes of one row of scales (and of biases): (cols/group_size)·sizeof(scale_dtype). */
size_t weft_mlx_scale_row_bytes(const weft_tensor *t);
/* Total stored bytes of an MLX affine tensor: words + scales + biases. */
size_t weft_mlx_tensor_bytes(const weft_tensor *t);
/* The quantized integer q (0 ≤ q < 2^bits) of element `col` in row `row`: bits 2/4/8 are word-packed LSB
 * first, 3/5/6 one LSB-first bitstream per row (values may straddle words); one rule covers both. */
uint32_t weft_mlx_q(const weft_tensor *t, int64_t row, int64_t col);
/* weft_mlx_dequant_row (declared in tensor.h): out[j] = s·q + b in fp32 (s, b the group's scale and bias
 * converted exactly to fp32, then one fp32 multiply and one fp32 add, no FMA), the fp32 form of mlx's
 * `scales·q + biases`. (mlx itself returns the result in the scales' dtype; the fixtures' goldens and weft
 * use the fp32 value.) */

/* ---- names ---- */

/* MLX → HF names, so families see hub names: Qwen3.5 `language_model.model.X` → `model.language_model.X`,
 * `language_model.lm_head.X` → `lm_head.X`. Llama, Qwen3 and Nemotron-H (`backbone.`) MLX names are already
 * the hub names. Returns name itself when nothing changes, else buf (NULL when the result does not fit in
 * cap). */
const char *weft_canonical_name(const char *name, char *buf, size_t cap);

/* Renames every tensor of set to weft_canonical_name(name). Run after weft_mlx_fold (whose module paths are
 * MLX's). Errors: WEFT_EFORMAT when two names collide after renaming, WEFT_ENOMEM. */
weft_status weft_canonicalize_names(weft_tensor_set *set, weft_err *err);

/* ---- whole checkpoint ---- */

typedef struct weft_checkpoint_info {
    weft_safetensors_dir_info files;
    weft_mlx_summary mlx;
    /* MLX conventions apply (files.is_mlx || mlx.present): Qwen3.5 zero-centred norms stored as 1+w, conv1d
     * [C,K,1], experts stacked as switch_mlp. Families branch on this. */
    bool is_mlx;
    size_t weight_bytes; /* weft_tensor_set_bytes after folding */
} weft_checkpoint_info;

/* weft_safetensors_load_dir + weft_mlx_fold (with dir/config.json, required: WEFT_EIO when missing) +
 * weft_canonicalize_names. info may be NULL. Errors: those of the three steps. */
weft_status weft_safetensors_load_checkpoint(const char *dir, weft_tensor_set *set,
                                             weft_checkpoint_info *info, weft_err *err);

/* ---- JSON ---- */

/* A copy of JSON text in which Python's non-standard bare tokens `Infinity`, `-Infinity` and `NaN` (outside
 * strings) become transformers 5's {"__float__": "Infinity"} form, so strict parsers (jansson) accept configs
 * written by json.dumps(allow_nan=True), e.g. Nemotron-H's `"time_step_limit": [0.0, Infinity]`. The config
 * and MLX readers apply it; the caller frees the result. NULL on allocation failure. */
char *weft_json_nonfinite_dup(const char *text);

/* ---- memory ---- */

/* Bytes of memory available for new allocations: MemAvailable from /proc/meminfo, else
 * sysconf(_SC_AVPHYS_PAGES)·page size; 0 when neither can be read. */
size_t weft_mem_available(void);

/* WEFT_OK when need_bytes ≤ weft_mem_available() (or when that cannot be determined); else WEFT_ENOMEM with
 * one line "<what> needs N MiB but only M MiB of memory is available". */
weft_status weft_check_memory(size_t need_bytes, const char *what, weft_err *err);
/* Same against a given availability in bytes (0 = unknown: WEFT_OK). */
weft_status weft_check_memory_against(size_t need_bytes, size_t avail_bytes, const char *what, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
