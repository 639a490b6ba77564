/* Elementwise kernels spread over the pool: SwiGLU's gate. Each element is computed alone, in the same
 * operations on every ISA (exp_c of att.h, IEEE division), so its bits depend on nothing but its inputs. */
#include "att.h"
#include "ew.h"

#define EW_CHUNK 4096 /* elements per task */

typedef struct ew_job {
    float *g;
    const float *u;
    int64_t n;
    void (*fn)(float *g, const float *u, int64_t n);
} ew_job;

static void swiglu_scalar(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i], s = x / (1.0f + weft_exp_c(-x));
        g[i] = s * u[i];
    }
}

static void ew_task(void *ctx, int64_t task, float *scratch) {
    (void)scratch;
    const ew_job *j = ctx;
    const int64_t a = task * EW_CHUNK, n = j->n - a < EW_CHUNK ? j->n - a : EW_CHUNK;
    j->fn(j->g + a, j->u + a, n);
}

void weft_swiglu_isa(weft_pool *p, float *g, const float *u, int64_t n, weft_cpu_isa isa) {
    if (n <= 0) return;
    if (isa == WEFT_CPU_ISA_AUTO || !weft_cpu_isa_supported(isa)) isa = weft_cpu_isa_best();
    ew_job j = {g, u, n, swiglu_scalar};
#if defined(__x86_64__)
    if (isa == WEFT_CPU_ISA_AVX512) j.fn = weft_swiglu_avx512;
#endif
    weft_pool_run(p, (n + EW_CHUNK - 1) / EW_CHUNK, ew_task, &j);
}

void weft_swiglu(weft_pool *p, float *g, const float *u, int64_t n) {
    weft_swiglu_isa(p, g, u, n, WEFT_CPU_ISA_AUTO);
}
