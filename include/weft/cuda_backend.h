/* weft/cuda_backend.h — the CUDA implementation of the backend vtable (weft/backend.h) for the dense families
 * llama and qwen3 (issue E1). Built only with -DWEFT_CUDA=ON (then WEFT_HAVE_CUDA is defined for users of the
 * weft_cuda library).
 *
 * What it does: weights are uploaded once into the device layouts of src/backend/cuda/cuda_kernels.h (MLX
 * affine 4/8-bit, GGUF Q4_0/Q8_0, F16/BF16/F32; other dtypes are refused at creation with the tensor's name);
 * each open slot owns an fp32 KV cache in device memory; forward() runs one pass of row-invariant kernels
 * over every segment's rows; the logits of the drawn rows are copied back and sampled on the host with
 * weft_sample (SPEC §5: the same fp64 code as the CPU backend, so the draws are exactly what the CPU sampler
 * makes of those logits). Activations are fp32 (SPEC §5.5's fp32 tolerance applies). 4-bit q|k|v and gate|up
 * matrices of one format are fused at upload (one matmul each, SwiGLU in the gate|up epilogue), activations
 * are prepared once per matmul input, and prefill chunks take the tiled attention kernel — all with the same
 * bits as the unfused path, which the environment variable WEFT_CUDA_BASELINE=1 (read at creation) selects
 * for side-by-side measurement. A forward's kernels are captured once into a CUDA graph per shape (rows,
 * drawn rows, attention spans) and replayed while the shape repeats (decode rounds).
 *
 * Memory (SPEC §4.6): the device's free memory is read (cudaMemGetInfo) before anything is uploaded; weights
 * + activations + logits must fit under free − reserve, else WEFT_ENOMEM with the numbers. open() checks the
 * slot's KV bytes the same way. destroy() frees every device allocation it made. */
#ifndef WEFT_CUDA_BACKEND_H
#define WEFT_CUDA_BACKEND_H

#include "weft/backend.h"
#include "weft/config.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_cuda_backend_opts {
    int device;           /* CUDA device ordinal (0) */
    int max_slots;        /* streams open at once (>= 1) */
    int max_rows;         /* rows per forward (>= 1) */
    int max_context;      /* positions per stream: open() refuses a larger capacity */
    size_t reserve_bytes; /* device memory left free for the runtime and other users; 0 = 1 GiB */
    bool no_graphs; /* launch kernels one by one instead of replaying a captured CUDA graph (same bits) */
    bool act_f16;   /* the 4-bit products (Q4_0, MLX affine 4-bit) and the attention take their operands
                       rounded to f16 (nearest even, magnitudes past 65504 saturated) instead of fp32 as bf16
                       hi/lo pairs: one tensor-core term per product instead of two (matmuls) or three
                       (attention). Replies change within SPEC §5.5's bf16-path tolerance; every exactness
                       invariant (§4.3) holds as in the fp32 mode */
} weft_cuda_backend_opts;

/* Builds the backend for cfg (family llama or qwen3) over the tensors of ts (canonical HF names, as
 * weft_model_load gives them). ts is only read during the call: everything is copied to the device.
 * Errors: WEFT_ENOTSUP (no CUDA device, another family, an unsupported dtype or shape, naming the tensor),
 * WEFT_EFORMAT (missing tensor or wrong shape), WEFT_ENOMEM (device memory, with the numbers: needed, free,
 * reserve), WEFT_EINTERNAL (a CUDA call failed: its name and error string). out is set on success. */
weft_status weft_cuda_backend_new(const weft_config *cfg, const weft_tensor_set *ts,
                                  const weft_cuda_backend_opts *opts, weft_backend *out, weft_err *err);

/* Number of CUDA devices visible (0 when there is no driver or device). */
int weft_cuda_device_count(void);

/* Device `device`'s name (truncated to name_size − 1 bytes, NUL-terminated), compute capability and total
 * memory in bytes. Returns 0, or −1 when the device cannot be queried (outputs untouched). */
int weft_cuda_device_info(int device, char *name, size_t name_size, int *cc_major, int *cc_minor,
                          size_t *memory_bytes);

/* Test hook: the fp32 logits of the drawn rows of the last forward() on this backend (rows in segment order,
 * each segment's drawn rows in order), [*n_rows, vocab]. Owned by the backend, valid until the next forward.
 */
const float *weft_cuda_backend_last_logits(const weft_backend *b, int *n_rows);

/* Device bytes this backend holds now (weights, activations, open slots), as counted from its allocations. */
size_t weft_cuda_backend_device_bytes(const weft_backend *b);

#ifdef __cplusplus
}
#endif
#endif
