/* cuda_internal.h — host-side pieces of the CUDA backend shared by its .c files. */
#ifndef WEFT_CUDA_INTERNAL_H
#define WEFT_CUDA_INTERNAL_H

#include "weft/cuda_backend.h"
#include "weft/sampler.h"
#include "cuda_kernels.h"

/* Every device allocation the backend makes at creation (weights, norms, activations) is recorded here so
 * that destroy frees all of them. */
typedef struct cu_allocs {
    void **ptr;
    size_t n, cap;
    size_t bytes; /* sum of the recorded allocations */
} cu_allocs;

/* cudaMalloc + record. WEFT_ENOMEM / WEFT_EINTERNAL with `what` named. */
weft_status cu_alloc(cu_allocs *a, void **out, size_t bytes, const char *what, weft_err *err);
void cu_free_all(cu_allocs *a);

/* Sets err from a failed CUDA call: "cuda: <what>: <error string>". Returns WEFT_EINTERNAL (WEFT_ENOMEM for
 * cudaErrorMemoryAllocation). */
weft_status cu_fail(weft_err *err, cudaError_t e, const char *what);

#define CU_TRY(call, what)                                                                                   \
    do {                                                                                                     \
        cudaError_t cu_e_ = (call);                                                                          \
        if (cu_e_ != cudaSuccess) return cu_fail(err, cu_e_, what);                                          \
    } while (0)

/* Chooses the device layout of a stored 2-D weight [rows, cols] (checks the shape and dtype; fills w's kind,
 * mode, sdt, group, rows, cols, bytes; no device memory yet). WEFT_EFORMAT for a wrong shape, WEFT_ENOTSUP
 * for a dtype or cols the kernels do not read (named). */
weft_status cu_weight_plan(const weft_tensor *t, int64_t rows, int64_t cols, weft_cu_weight *w,
                           weft_err *err);

/* Converts t into the planned layout and copies it to new device memory (recorded in a). */
weft_status cu_weight_upload(const weft_tensor *t, weft_cu_weight *w, cu_allocs *a, weft_err *err);

/* Uploads n_parts (<= 3) 4-bit tensors of one format [rows_p, cols] as one WEFT_CU_Q4F weight w (planned by
 * the caller: w->rows = the sum of the parts' rows, the parts' kind/mode/sdt/group/cols): rows of part 0,
 * then part 1, ..., or with interleave8 (two parts of equal rows) rows 16k..16k+7 = part 0's rows 8k..8k+7
 * and rows 16k+8..16k+15 = part 1's. The values and scales are the parts' own, moved. */
weft_status cu_weight_upload_cat(const weft_tensor *const *parts, int n_parts, bool interleave8,
                                 weft_cu_weight *w, cu_allocs *a, weft_err *err);

/* Decodes a 1-D tensor of n elements to fp32 and uploads it (recorded in a). NULL tensor: *out = NULL. */
weft_status cu_vec_upload(const weft_tensor *t, int64_t n, float **out, cu_allocs *a, weft_err *err);

#endif
