/* weft/cpu_backend.h — the CPU implementation of the backend vtable (weft/backend.h) over a model family. */
#ifndef WEFT_CPU_BACKEND_H
#define WEFT_CPU_BACKEND_H

#include "weft/backend.h"
#include "weft/family.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_cpu_backend_opts {
    int threads;   /* worker threads (>= 1); results are bit-identical for any count */
    int max_slots; /* streams open at once */
} weft_cpu_backend_opts;

/* Takes ownership of fam (destroyed with the backend). out->ops/self/max_slots/max_rows/vocab_size are set.
 * Allocates the pool, the logits rows [fam.max_rows, vocab] and the samplers here, never in forward.
 * Errors: WEFT_ENOMEM with the numbers. */
weft_status weft_cpu_backend_new(weft_family_model fam, const weft_cpu_backend_opts *opts, weft_backend *out,
                                 weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
