// Causal GQA attention over fixed key blocks aligned to absolute positions (cuda_kernels.h). One block per
// (row, kv head): its G = Hq/Hkv query heads share each staged K/V block.
#include "cuda_kernels.h"

#include <math.h>

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN, kThreads = 128;

// Per-head scalars kept in shared memory.
enum { H_MS, H_LS, H_MT, H_LT, H_MB, H_CA, H_CB, H_N };

size_t attn_smem(int G, int d) {
    return sizeof(float) * ((size_t)G * d * 3 + (size_t)KB * (d + 1) + (size_t)KB * d + (size_t)G * KB +
                            (size_t)G * H_N);
}

// Folds a partial (m2, l2, o2) into (m, l, o): m' = max(m, m2); ca = e^(m−m'), cb = e^(m2−m'); l' = l·ca + l2·cb.
// Run by one thread per head; returns the two coefficients through ca/cb.
__device__ __forceinline__ void fold(float *m, float *l, float m2, float l2, float *ca, float *cb) {
    const float mn = fmaxf(*m, m2);
    *ca = expf(*m - mn);
    *cb = expf(m2 - mn);
    *l = __fadd_rn(__fmul_rn(*l, *ca), __fmul_rn(l2, *cb));
    *m = mn;
}

__global__ void __launch_bounds__(kThreads)
    attn_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows, int Hq, int Hkv, int d,
                int layer, float scale) {
    extern __shared__ float sm[];
    const int r = blockIdx.x, j = blockIdx.y, t = threadIdx.x, G = Hq / Hkv, kvd = Hkv * d;
    const weft_cu_row row = rows[r];
    const float *Kc = row.kv + (size_t)(2 * layer) * (size_t)row.cap * (size_t)kvd + (size_t)j * d;
    const float *Vc = Kc + (size_t)row.cap * (size_t)kvd;
    float *sq = sm;                 // [G, d] queries
    float *sk = sq + G * d;         // [KB, d+1] keys (padded against bank conflicts)
    float *sv = sk + KB * (d + 1);  // [KB, d] values
    float *sp = sv + KB * d;        // [G, KB] scores, then probabilities
    float *os = sp + G * KB;        // [G, d] span accumulator
    float *ot = os + G * d;         // [G, d] total accumulator
    float *hs = ot + G * d;         // [G, H_N] per-head scalars
    const int qoff = r * Hq * d + j * G * d;
    for (int i = t; i < G * d; i += kThreads) {
        sq[i] = Q[qoff + i];
        ot[i] = 0.0f;
    }
    if (t < G) {
        hs[t * H_N + H_MT] = -INFINITY;
        hs[t * H_N + H_LT] = 0.0f;
    }
    const int nkeys = row.pos + 1, nb = (nkeys + KB - 1) / KB;
    for (int b = 0; b < nb; b++) {
        const int t0 = b * KB, nv = min(KB, nkeys - t0);
        if (b % SPAN == 0) {
            for (int i = t; i < G * d; i += kThreads) os[i] = 0.0f;
            if (t < G) {
                hs[t * H_N + H_MS] = -INFINITY;
                hs[t * H_N + H_LS] = 0.0f;
            }
        }
        for (int i = t; i < nv * d; i += kThreads) {
            const int kk = i / d, c = i % d;
            sk[kk * (d + 1) + c] = Kc[(size_t)(t0 + kk) * kvd + c];
            sv[kk * d + c] = Vc[(size_t)(t0 + kk) * kvd + c];
        }
        __syncthreads();
        for (int i = t; i < G * KB; i += kThreads) {
            const int g = i / KB, kk = i % KB;
            float s = -INFINITY;
            if (kk < nv) {
                float acc = 0.0f;
                for (int c = 0; c < d; c++) acc = fmaf(sq[g * d + c], sk[kk * (d + 1) + c], acc);
                s = acc * scale;
            }
            sp[i] = s;
        }
        __syncthreads();
        if (t < G) {
            float mb = sp[t * KB];
            for (int kk = 1; kk < nv; kk++) mb = fmaxf(mb, sp[t * KB + kk]);
            hs[t * H_N + H_MB] = mb;
        }
        __syncthreads();
        for (int i = t; i < G * KB; i += kThreads) {
            const int g = i / KB, kk = i % KB;
            sp[i] = kk < nv ? expf(sp[i] - hs[g * H_N + H_MB]) : 0.0f;
        }
        __syncthreads();
        if (t < G) {
            float lb = 0.0f;
            for (int kk = 0; kk < nv; kk++) lb = __fadd_rn(lb, sp[t * KB + kk]);
            float *h = hs + t * H_N;
            fold(&h[H_MS], &h[H_LS], h[H_MB], lb, &h[H_CA], &h[H_CB]);
        }
        __syncthreads();
        for (int i = t; i < G * d; i += kThreads) {
            const int g = i / d, c = i % d;
            float ob = 0.0f;
            for (int kk = 0; kk < nv; kk++) ob = fmaf(sp[g * KB + kk], sv[kk * d + c], ob);
            os[i] = __fadd_rn(__fmul_rn(os[i], hs[g * H_N + H_CA]), __fmul_rn(ob, hs[g * H_N + H_CB]));
        }
        __syncthreads();
        if (b % SPAN == SPAN - 1 || b == nb - 1) {
            if (t < G) {
                float *h = hs + t * H_N;
                fold(&h[H_MT], &h[H_LT], h[H_MS], h[H_LS], &h[H_CA], &h[H_CB]);
            }
            __syncthreads();
            for (int i = t; i < G * d; i += kThreads) {
                const int g = i / d;
                ot[i] = __fadd_rn(__fmul_rn(ot[i], hs[g * H_N + H_CA]), __fmul_rn(os[i], hs[g * H_N + H_CB]));
            }
            __syncthreads();
        }
    }
    for (int i = t; i < G * d; i += kThreads) Out[qoff + i] = ot[i] / hs[(i / d) * H_N + H_LT];
}

} // namespace

extern "C" cudaError_t weft_cu_attention(const float *q, float *out, const weft_cu_row *rows, int n, int Hq, int Hkv,
                                         int d, int layer, float scale, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (Hkv <= 0 || Hq % Hkv || d <= 0 || d > 256) return cudaErrorInvalidValue;
    const size_t smem = attn_smem(Hq / Hkv, d);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    attn_kernel<<<dim3((unsigned)n, (unsigned)Hkv), kThreads, smem, stream>>>(q, out, rows, Hq, Hkv, d, layer, scale);
    return cudaGetLastError();
}
