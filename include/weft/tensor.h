/* weft/tensor.h — one weight tensor as any format stores it, and the name → tensor set a checkpoint loads
 * into.
 *
 * Format readers (safetensors, MLX affine, GGUF) never convert weights: a weft_tensor points at the stored
 * bytes (mmap'd read-only, or memory the set owns) and says how to decode them. Kernels dispatch on dtype.
 * Names in a set are canonical HF names (`model.layers.3.self_attn.q_proj.weight`): readers of other naming
 * schemes (GGUF `blk.3.attn_q.weight`, MLX prefixes) translate on the way in. */
#ifndef WEFT_TENSOR_H
#define WEFT_TENSOR_H

#include "weft/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_dtype {
    WEFT_DT_F32 = 0,
    WEFT_DT_F16,
    WEFT_DT_BF16,
    WEFT_DT_F64,
    WEFT_DT_I64,
    WEFT_DT_I32,
    WEFT_DT_I16,
    WEFT_DT_I8,
    WEFT_DT_U32,
    WEFT_DT_U16,
    WEFT_DT_U8,
    WEFT_DT_BOOL,
    /* ggml block formats (ggml-common.h); block size and bytes in weft_dtype_info */
    WEFT_DT_Q4_0,
    WEFT_DT_Q4_1,
    WEFT_DT_Q5_0,
    WEFT_DT_Q5_1,
    WEFT_DT_Q8_0,
    WEFT_DT_Q2_K,
    WEFT_DT_Q3_K,
    WEFT_DT_Q4_K,
    WEFT_DT_Q5_K,
    WEFT_DT_Q6_K,
    /* MLX affine: packed uint32 words + per-group scales/biases (fields bits, group_size, scales, biases) */
    WEFT_DT_MLX_AFFINE,
    WEFT_DT_COUNT
} weft_dtype;

typedef struct weft_dtype_info {
    const char *name; /* "F32", "Q4_K", "MLX_AFFINE" */
    int block;        /* elements per block (1 for plain types; 0 for MLX: depends on bits) */
    int block_bytes;  /* bytes per block */
} weft_dtype_info;

const weft_dtype_info *weft_dtype_get(weft_dtype t);

#define WEFT_MAX_DIMS 4

typedef struct weft_tensor {
    const char *name; /* canonical name; owned by the set */
    weft_dtype dtype;
    int ndim;
    int64_t shape[WEFT_MAX_DIMS]; /* logical (decoded) shape, outermost first; the innermost dim is a row */
    const uint8_t *data;          /* stored bytes, read-only */
    size_t nbytes;                /* bytes at data */
    /* MLX affine only (dtype == WEFT_DT_MLX_AFFINE): data is uint32 words [rows, cols*bits/32] */
    int bits;               /* 2,3,4,5,6,8 */
    int group_size;         /* 32, 64, 128 */
    weft_dtype scale_dtype; /* F32, F16 or BF16 */
    const uint8_t *scales;  /* [rows, cols/group_size] of scale_dtype */
    const uint8_t *biases;  /* [rows, cols/group_size] of scale_dtype */
} weft_tensor;

/* Elements in the innermost dimension (one row) and number of rows (product of the others). */
static inline int64_t weft_tensor_cols(const weft_tensor *t) {
    return t->shape[t->ndim - 1];
}
static inline int64_t weft_tensor_rows(const weft_tensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->ndim - 1; i++) r *= t->shape[i];
    return r;
}
int64_t weft_tensor_numel(const weft_tensor *t);

/* Bytes of one stored row of `cols` elements of a plain or ggml block type; 0 when cols is not a multiple
 * of the block size (the caller reports WEFT_EFORMAT). Not valid for MLX (see weft_mlx_row_bytes). */
size_t weft_dtype_row_bytes(weft_dtype t, int64_t cols);

/* Decodes row `row` (0 <= row < weft_tensor_rows) into out[cols] fp32, exactly as the reference decoders
 * (ggml-quants.c dequantize_row_*, mlx affine_dequantize) do. Works for F32/F16/BF16, every ggml type above
 * and MLX affine. Returns WEFT_ENOTSUP for other dtypes. */
weft_status weft_tensor_dequant_row(const weft_tensor *t, int64_t row, float *out, weft_err *err);

/* ggml block decoders (src/model/format/ggml_quants.c): decode n elements (a multiple of the block size)
 * starting at the block-aligned `src`. */
void weft_ggml_dequant(weft_dtype t, const void *src, float *out, int64_t n);

/* MLX affine row decoder (src/model/format/mlx.c). */
void weft_mlx_dequant_row(const weft_tensor *t, int64_t row, float *out);

/* ---- tensor sets ---- */
typedef struct weft_tensor_set weft_tensor_set;

weft_tensor_set *weft_tensor_set_new(void);
void weft_tensor_set_free(weft_tensor_set *s);
/* Copies t (and its name) into the set. A duplicate name is WEFT_EFORMAT. */
weft_status weft_tensor_set_add(weft_tensor_set *s, const weft_tensor *t, weft_err *err);
/* NULL when absent. The pointer stays valid until the set is freed. */
const weft_tensor *weft_tensor_set_get(const weft_tensor_set *s, const char *name);
weft_tensor *weft_tensor_set_get_mut(weft_tensor_set *s, const char *name);
size_t weft_tensor_set_count(const weft_tensor_set *s);
const weft_tensor *weft_tensor_set_at(const weft_tensor_set *s, size_t i);
/* Removes a tensor by name (used when a reader folds .scales/.biases into their weight). */
void weft_tensor_set_remove(weft_tensor_set *s, const char *name);
/* The set takes ownership of a mapping (munmap'd at free) or of heap memory (free'd at free). */
void weft_tensor_set_own_mapping(weft_tensor_set *s, void *addr, size_t len);
void weft_tensor_set_own_memory(weft_tensor_set *s, void *p);
/* Total stored bytes of all tensors (weights bytes, for memory checks and `weft info`). */
size_t weft_tensor_set_bytes(const weft_tensor_set *s);

#ifdef __cplusplus
}
#endif
#endif
