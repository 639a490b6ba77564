/* Internal to weft_kernels: the elementwise kernels' ISA pieces (elementwise.c). */
#ifndef WEFT_CPU_EW_H
#define WEFT_CPU_EW_H

#include "weft/cpu.h"

#if defined(__x86_64__)
/* g[i] = g[i] / (1 + exp_c(−g[i])) · u[i], as the scalar loop in elementwise.c */
void weft_swiglu_avx512(float *g, const float *u, int64_t n);
#endif

#endif
