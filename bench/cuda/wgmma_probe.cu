// Probe for the next prefill GEMM: does one wgmma k16 step (m64n8k16, bf16 A from registers, B from shared
// memory, fp32 accumulators) give the same bits as mma.sync m16n8k16 on the same A, B and accumulator? The
// 4-bit matmuls define their arithmetic as a sequence of mma.sync steps (mma_q4.cu); a wgmma GEMM may replace
// them only if every step is bit-identical. Regimes: 0 = small integers (exact: checks the fragment and
// descriptor layouts against a CPU reference), 1 = random bf16 with spread exponents and a random
// accumulator, 2 = the matmuls' operands (4-bit integers times bf16 hi or lo parts of activations), chained
// over 4 steps. The f16 attention's forms (attn_wgmma.cuh; session 19's review): m64n32k16 f16 with A from
// shared memory and a K-major B (the scores), and with A in registers and an MN-major B (P·V), against
// mma.sync f16 per n8 block, on small integers (against an exact reference too) and on f16 values with
// spread exponents, subnormals and signed zeros. Usage: bench_cuda_wgmma_probe (sm_90a only; other devices
// report "not run").
#include "common.cuh"
#include "wgmma.cuh"

#include <cuda_bf16.h>

namespace {

constexpr int kTrials = 4096, kSteps = 4;

// d += A·B, m16n8k16, bf16 (F16: f16) inputs.
template <bool F16 = false>
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if constexpr (F16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One block (a warpgroup) per trial. A: [kSteps][64][16] bf16 row-major; B: [kSteps][16][8] bf16 (B[k][n]);
// C: [64][8] fp32. D1 = mma.sync steps, D2 = wgmma steps (lbo / sbo: descriptor byte offsets to try).
__global__ void __launch_bounds__(128) probe_kernel(const unsigned short *A, const unsigned short *B,
                                                    const float *C, float *D1, float *D2, int lbo, int sbo) {
    __shared__ __align__(128) unsigned short sb[kSteps][256]; // per step: two 8 x 8 core matrices + padding
    const int trial = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2,
              t = lane & 3;
    const unsigned short *a = A + (size_t)trial * kSteps * 64 * 16, *b = B + (size_t)trial * kSteps * 16 * 8;
    const float *c = C + (size_t)trial * 64 * 8;
    for (int i = tid; i < kSteps * 256; i += 128) sb[i / 256][i % 256] = 0;
    __syncthreads();
    for (int i = tid; i < kSteps * 128; i += 128) { // B[k][n] -> core matrix k / 8, row n, column k % 8
        const int s = i / 128, k = (i % 128) / 8, n = i % 8;
        sb[s][(k / 8) * 64 + n * 8 + k % 8] = b[(size_t)s * 128 + k * 8 + n];
    }
    __syncthreads();
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    auto pair = [](unsigned short lo, unsigned short hi) { return (uint32_t)lo | ((uint32_t)hi << 16); };
    float d1[4] = {c[r0 * 8 + 2 * t], c[r0 * 8 + 2 * t + 1], c[r1 * 8 + 2 * t], c[r1 * 8 + 2 * t + 1]};
    float d2[4] = {d1[0], d1[1], d1[2], d1[3]};
    for (int s = 0; s < kSteps; s++) {
        const unsigned short *as = a + (size_t)s * 64 * 16, *bs = b + (size_t)s * 128;
        const uint32_t af[4] = {pair(as[r0 * 16 + 2 * t], as[r0 * 16 + 2 * t + 1]),
                                pair(as[r1 * 16 + 2 * t], as[r1 * 16 + 2 * t + 1]),
                                pair(as[r0 * 16 + 2 * t + 8], as[r0 * 16 + 2 * t + 9]),
                                pair(as[r1 * 16 + 2 * t + 8], as[r1 * 16 + 2 * t + 9])};
        const uint32_t b0 = pair(bs[(2 * t) * 8 + g], bs[(2 * t + 1) * 8 + g]),
                       b1 = pair(bs[(2 * t + 8) * 8 + g], bs[(2 * t + 9) * 8 + g]);
        mma16816(d1, af, b0, b1);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        const uint64_t addr = (uint64_t)__cvta_generic_to_shared(&sb[s][0]);
        const uint64_t desc = ((addr >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
                              ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, "
            "1, 1, 0;\n}"
            : "+f"(d2[0]), "+f"(d2[1]), "+f"(d2[2]), "+f"(d2[3])
            : "r"(af[0]), "r"(af[1]), "r"(af[2]), "r"(af[3]), "l"(desc), "r"(1)
            : "memory");
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#else
        (void)lbo;
        (void)sbo;
        asm volatile("" ::"l"(&sb[s][0])); // keeps the (unused) copy on targets without wgmma
        d2[0] = d2[1] = d2[2] = d2[3] = __int_as_float(0x7fc00000);
#endif
    }
    float *o1 = D1 + (size_t)trial * 64 * 8, *o2 = D2 + (size_t)trial * 64 * 8;
    o1[r0 * 8 + 2 * t] = d1[0], o1[r0 * 8 + 2 * t + 1] = d1[1], o1[r1 * 8 + 2 * t] = d1[2],
                    o1[r1 * 8 + 2 * t + 1] = d1[3];
    o2[r0 * 8 + 2 * t] = d2[0], o2[r0 * 8 + 2 * t + 1] = d2[1], o2[r1 * 8 + 2 * t] = d2[2],
                    o2[r1 * 8 + 2 * t + 1] = d2[3];
}

// The N-column kernels' shared pieces, for thread (g, t) of warp w (rows r0 = 16w + g and r0 + 8): its A
// fragment of a step (A [64][16]), its N / 2 accumulators (n8 block b: d[4b .. 4b + 3], mma.sync's C layout)
// from C [64][N] and back into O, and the mma.sync chain step over the N / 8 blocks of B [16][N].
__device__ __forceinline__ uint32_t probe_pair(unsigned short lo, unsigned short hi) {
    return (uint32_t)lo | ((uint32_t)hi << 16);
}
__device__ __forceinline__ void probe_afrag(const unsigned short *as, int r0, int t, uint32_t af[4]) {
    const int r1 = r0 + 8;
    af[0] = probe_pair(as[r0 * 16 + 2 * t], as[r0 * 16 + 2 * t + 1]);
    af[1] = probe_pair(as[r1 * 16 + 2 * t], as[r1 * 16 + 2 * t + 1]);
    af[2] = probe_pair(as[r0 * 16 + 2 * t + 8], as[r0 * 16 + 2 * t + 9]);
    af[3] = probe_pair(as[r1 * 16 + 2 * t + 8], as[r1 * 16 + 2 * t + 9]);
}
template <int N>
__device__ __forceinline__ void probe_load(const float *c, int r0, int t, float (&d)[N / 2]) {
#pragma unroll
    for (int bb = 0; bb < N / 8; bb++)
#pragma unroll
        for (int i = 0; i < 4; i++) d[4 * bb + i] = c[(r0 + 8 * (i / 2)) * N + 8 * bb + 2 * t + i % 2];
}
template <int N>
__device__ __forceinline__ void probe_store(float *o, int r0, int t, const float (&d)[N / 2]) {
#pragma unroll
    for (int bb = 0; bb < N / 8; bb++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[(r0 + 8 * (i / 2)) * N + 8 * bb + 2 * t + i % 2] = d[4 * bb + i];
}
template <int N, bool F16>
__device__ __forceinline__ void probe_mma_ref(float (&d)[N / 2], const uint32_t af[4],
                                              const unsigned short *bs, int g, int t) {
#pragma unroll
    for (int bb = 0; bb < N / 8; bb++) {
        const int n = 8 * bb + g;
        mma16816<F16>(&d[4 * bb], af, probe_pair(bs[(2 * t) * N + n], bs[(2 * t + 1) * N + n]),
                      probe_pair(bs[(2 * t + 8) * N + n], bs[(2 * t + 9) * N + n]));
    }
}

// The probe's chain over kSteps k16 steps for one warpgroup: d1 and d2 start from C's rows (probe_load), and
// per step d1 takes mma.sync (probe_mma_ref, F16 or bf16 inputs) and d2 the wgmma that issue(st, d2, af)
// issues between the fences (sm_90a; elsewhere d2 is NaN, keep(st) keeping the step's shared memory in use),
// then both are stored (probe_store). a / b: this trial's A [kSteps][64][16] and B [kSteps][16][N].
template <int N, bool F16, class Issue, class Keep>
__device__ __forceinline__ void probe_chain(const unsigned short *a, const unsigned short *b, const float *c,
                                            float *o1, float *o2, int r0, int g, int t, Issue &&issue,
                                            Keep &&keep) {
    float d1[N / 2], d2[N / 2];
    probe_load<N>(c, r0, t, d1);
    probe_load<N>(c, r0, t, d2);
    for (int st = 0; st < kSteps; st++) {
        const unsigned short *as = a + (size_t)st * 64 * 16, *bs = b + (size_t)st * 16 * N;
        uint32_t af[4];
        probe_afrag(as, r0, t, af);
        probe_mma_ref<N, F16>(d1, af, bs, g, t);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
        for (int e = 0; e < N / 2; e++) wgmma_pin(d2[e]);
#pragma unroll
        for (int e = 0; e < 4; e++) wgmma_pin(af[e]);
        wgmma_fence();
        issue(st, d2, af);
        wgmma_commit_wait0();
#pragma unroll
        for (int e = 0; e < N / 2; e++) wgmma_pin(d2[e]);
#else
        (void)issue;
        keep(st);
#pragma unroll
        for (int e = 0; e < N / 2; e++) d2[e] = __int_as_float(0x7fc00000);
#endif
    }
    probe_store<N>(o1, r0, t, d1);
    probe_store<N>(o2, r0, t, d2);
}

// The GEMM's shape: A [kSteps][64][16], B [kSteps][16][128] (B[k][n]), C [64][128]; B in shared memory as
// [step][column group b][k half][row n % 8][8 k], the layout gemm_q4w.cu's transpose writes.
__global__ void __launch_bounds__(128) probe_n128_kernel(const unsigned short *A, const unsigned short *B,
                                                         const float *C, float *D1, float *D2) {
    __shared__ __align__(128) unsigned short sb[kSteps][16 * 2 * 8 * 8];
    const int trial = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2,
              t = lane & 3;
    const unsigned short *a = A + (size_t)trial * kSteps * 64 * 16,
                         *b = B + (size_t)trial * kSteps * 16 * 128;
    const float *c = C + (size_t)trial * 64 * 128;
    for (int i = tid; i < kSteps * 16 * 128; i += 128) {
        const int s = i / 2048, k = (i % 2048) / 128, n = i % 128;
        sb[s][((n / 8) * 2 + k / 8) * 64 + (n % 8) * 8 + k % 8] = b[i];
    }
    __syncthreads();
    probe_chain<128, false>(
        a, b, c, D1 + (size_t)trial * 64 * 128, D2 + (size_t)trial * 64 * 128, 16 * warp + g, g, t,
        [&](int st, float(&d)[64], const uint32_t(&af)[4]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
            wgmma_m64n128k16(d, af[0], af[1], af[2], af[3], wgmma_desc(&sb[st][0], 128, 256));
#else
            (void)st, (void)d, (void)af;
#endif
        },
        [&](int st) { asm volatile("" ::"l"(&sb[st][0])); });
}

// The f16 attention's wgmma forms: A [kSteps][64][16] f16, B [kSteps][16][32] (B[k][n]), C [64][32]. FORM 0
// (the scores): A from shared memory, K-major — [k half][8-row block][row % 8][8 k] (lbo 128, sbo 256) — and
// B K-major, [k half][8-column block][column % 8][8 k]; FORM 1 (P·V): A in registers, B MN-major — [k
// half][8- column block][k % 8][8 columns] (imm-trans-b). D1 = mma.sync f16 per n8 block, D2 = the wgmma
// chain, both from C.
template <int FORM>
__global__ void __launch_bounds__(128) probe_attn_kernel(const unsigned short *A, const unsigned short *B,
                                                         const float *C, float *D1, float *D2) {
    __shared__ __align__(128) unsigned short sa[kSteps][2 * 8 * 64], sb[kSteps][2 * 4 * 64];
    const int trial = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2,
              t = lane & 3;
    const unsigned short *a = A + (size_t)trial * kSteps * 64 * 16, *b = B + (size_t)trial * kSteps * 16 * 32;
    const float *c = C + (size_t)trial * 64 * 32;
    for (int i = tid; i < kSteps * 64 * 16; i += 128) { // A[m][k]
        const int st = i / 1024, m = (i % 1024) / 16, k = i % 16;
        sa[st][(k / 8) * 64 + (m / 8) * 128 + (m % 8) * 8 + k % 8] = a[i];
    }
    for (int i = tid; i < kSteps * 16 * 32; i += 128) { // B[k][n]
        const int st = i / 512, k = (i % 512) / 32, n = i % 32;
        sb[st][(k / 8) * 64 + (n / 8) * 128 + (FORM == 0 ? (n % 8) * 8 + k % 8 : (k % 8) * 8 + n % 8)] = b[i];
    }
    __syncthreads();
    probe_chain<32, true>(
        a, b, c, D1 + (size_t)trial * 64 * 32, D2 + (size_t)trial * 64 * 32, 16 * warp + g, g, t,
        [&](int st, float(&d)[16], const uint32_t(&af)[4]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
            const uint64_t bdesc = wgmma_desc(&sb[st][0], 128, 256);
            if constexpr (FORM == 0)
                wgmma_m64n32k16_f16_ss(d, wgmma_desc(&sa[st][0], 128, 256), bdesc);
            else
                wgmma_m64n32k16_f16_tb(d, af[0], af[1], af[2], af[3], bdesc);
#else
            (void)st, (void)d, (void)af;
#endif
        },
        [&](int st) { asm volatile("" ::"l"(&sa[st][0]), "l"(&sb[st][0])); });
}

// f16 bits <-> float on the host (the probe's values only: no NaN or infinity).
float from_f16(unsigned short h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(1024 + m), e - 25);
    return (h & 0x8000) ? -v : v;
}
unsigned short f16_int(int v) { // a small integer (|v| <= 2048) exactly
    if (v == 0) return 0;
    const int a = v < 0 ? -v : v;
    int e = 0;
    while ((a >> e) > 1) e++;
    return (unsigned short)((v < 0 ? 0x8000 : 0) | ((e + 15) << 10) | (((a << (10 - e)) & 1023)));
}
// A random f16 of spread magnitude: 1/8 signed zeros, 1/8 subnormals, else 2^-14 .. 2^8.
unsigned short f16_spread(Rng &rng) {
    const float u = rng.uniform(), w = rng.uniform();
    const unsigned short sign = u < 0.0f ? 0x8000 : 0;
    const int m = (int)(fabsf(w) * 1023.0f) & 1023;
    const float r = fabsf(u);
    if (r < 0.125f) return sign;
    if (r < 0.25f) return (unsigned short)(sign | (m ? m : 1));
    return (unsigned short)(sign | ((1 + (int)(fabsf(rng.uniform()) * 22.0f)) << 10) | m);
}

// Runs both attention forms in both regimes; prints the counts.
void probe_attn(Rng &rng) {
    const int nt = 1024;
    const size_t na = (size_t)nt * kSteps * 64 * 16, nb = (size_t)nt * kSteps * 16 * 32,
                 nc = (size_t)nt * 64 * 32;
    std::vector<unsigned short> A(na), B(nb);
    std::vector<float> C(nc);
    float *e1 = nullptr, *e2 = nullptr;
    CK(cudaMalloc(&e1, nc * 4));
    CK(cudaMalloc(&e2, nc * 4));
    for (int regime = 0; regime < 2; regime++) {
        for (auto &v : A) v = regime == 0 ? f16_int((int)(rng.uniform() * 8.0f)) : f16_spread(rng);
        for (auto &v : B) v = regime == 0 ? f16_int((int)(rng.uniform() * 8.0f)) : f16_spread(rng);
        for (auto &v : C)
            v = regime == 0
                    ? (float)(int)(rng.uniform() * 64.0f)
                    : (rng.uniform() < -0.75f ? 0.0f : ldexpf(rng.uniform(), (int)(rng.uniform() * 10.0f)));
        unsigned short *dA = dev_upload(A), *dB = dev_upload(B);
        float *dC = dev_upload(C);
        for (int form = 0; form < 2; form++) {
            if (form == 0)
                probe_attn_kernel<0><<<nt, 128>>>(dA, dB, dC, e1, e2);
            else
                probe_attn_kernel<1><<<nt, 128>>>(dA, dB, dC, e1, e2);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            std::vector<float> r1 = dev_download(e1, nc), r2 = dev_download(e2, nc);
            size_t diff = 0, ref_bad = 0;
            for (size_t i = 0; i < nc; i++) diff += memcmp(&r1[i], &r2[i], 4) != 0;
            if (regime == 0) // exact integer reference for the wgmma chain (layouts, descriptors)
                for (size_t tr = 0; tr < (size_t)nt; tr++)
                    for (int m = 0; m < 64; m++)
                        for (int n = 0; n < 32; n++) {
                            double v = C[(tr * 64 + m) * 32 + n];
                            for (int st = 0; st < kSteps; st++)
                                for (int k = 0; k < 16; k++)
                                    v += (double)from_f16(A[((tr * kSteps + st) * 64 + m) * 16 + k]) *
                                         from_f16(B[((tr * kSteps + st) * 16 + k) * 32 + n]);
                            ref_bad += r2[(tr * 64 + m) * 32 + n] != (float)v;
                        }
            printf("wgmma probe f16 m64n32k16 %s, %s: %zu of %zu outputs differ between mma.sync and wgmma",
                   form == 0 ? "A shared + B K-major (scores)" : "A registers + B MN-major (P.V)",
                   regime == 0 ? "integers" : "spread exponents, subnormals, signed zeros", diff, nc);
            if (regime == 0) printf("; exact reference misses (wgmma) %zu", ref_bad);
            printf("\n");
        }
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dC);
    }
    cudaFree(e1);
    cudaFree(e2);
}

unsigned short to_bf16(float f) { // round to nearest even (inputs here are finite)
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
float from_bf16(unsigned short h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

} // namespace

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        printf("wgmma probe: compute capability %d.%d, not run (needs sm_90a)\n", prop.major, prop.minor);
        return 0;
    }
    const size_t na = (size_t)kTrials * kSteps * 64 * 16, nb = (size_t)kTrials * kSteps * 128,
                 nc = (size_t)kTrials * 64 * 8;
    std::vector<unsigned short> A(na), B(nb);
    std::vector<float> C(nc);
    unsigned short *dA = nullptr, *dB = nullptr;
    float *dC = nullptr, *d1 = nullptr, *d2 = nullptr;
    CK(cudaMalloc(&dA, na * 2));
    CK(cudaMalloc(&dB, nb * 2));
    CK(cudaMalloc(&dC, nc * 4));
    CK(cudaMalloc(&d1, nc * 4));
    CK(cudaMalloc(&d2, nc * 4));
    Rng rng(2026);
    const int descs[2][2] = {{128, 256}, {256, 128}}; // (LBO, SBO): core matrices 128 bytes apart along K
    for (int regime = 0; regime < 3; regime++) {
        for (size_t i = 0; i < na; i++) {
            const float u = rng.uniform();
            A[i] = regime == 1 ? to_bf16(ldexpf(u, (int)(rng.uniform() * 8.0f) - 4))
                               : to_bf16((float)(int)(u * 8.0f)); // integers in [-8, 8]
        }
        for (size_t i = 0; i < nb; i++) {
            const float u = rng.uniform();
            if (regime == 0) {
                B[i] = to_bf16((float)(int)(u * 8.0f));
            } else if (regime == 1) {
                B[i] = to_bf16(ldexpf(u, (int)(rng.uniform() * 8.0f) - 4));
            } else if (i % 2 == 0) { // columns 2j, 2j + 1 = hi and lo of one activation x (mma_q4.cu)
                const float x = ldexpf(u, (int)(rng.uniform() * 6.0f) - 3);
                const unsigned short hi = to_bf16(x);
                B[i] = hi;
                B[i + 1] = to_bf16(x - from_bf16(hi));
            }
        }
        for (size_t i = 0; i < nc; i++)
            C[i] = regime == 0 ? (float)(int)(rng.uniform() * 64.0f) : rng.uniform() * 50.0f;
        CK(cudaMemcpy(dA, A.data(), na * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dB, B.data(), nb * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dC, C.data(), nc * 4, cudaMemcpyHostToDevice));
        for (const auto &dsc : descs) {
            probe_kernel<<<kTrials, 128>>>(dA, dB, dC, d1, d2, dsc[0], dsc[1]);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            std::vector<float> r1 = dev_download(d1, nc), r2 = dev_download(d2, nc);
            size_t diff = 0, ref_bad1 = 0, ref_bad2 = 0;
            for (size_t i = 0; i < nc; i++) diff += memcmp(&r1[i], &r2[i], 4) != 0;
            if (regime == 0) { // exact integer reference
                for (size_t tr = 0; tr < (size_t)kTrials; tr++)
                    for (int m = 0; m < 64; m++)
                        for (int n = 0; n < 8; n++) {
                            double v = C[(tr * 64 + m) * 8 + n];
                            for (int s = 0; s < kSteps; s++)
                                for (int k = 0; k < 16; k++)
                                    v += (double)from_bf16(A[((tr * kSteps + s) * 64 + m) * 16 + k]) *
                                         from_bf16(B[(tr * kSteps + s) * 128 + k * 8 + n]);
                            ref_bad1 += r1[(tr * 64 + m) * 8 + n] != (float)v;
                            ref_bad2 += r2[(tr * 64 + m) * 8 + n] != (float)v;
                        }
            }
            printf("wgmma probe regime %d (LBO %d, SBO %d): %zu of %zu outputs differ between mma.sync and "
                   "wgmma",
                   regime, dsc[0], dsc[1], diff, nc);
            if (regime == 0) printf("; exact reference misses: mma.sync %zu, wgmma %zu", ref_bad1, ref_bad2);
            printf("\n");
        }
    }
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(d1);
    cudaFree(d2);

    // the GEMM's shape and layout: 4-bit integers x hi / lo activation parts, random accumulators
    const int nt = 512;
    const size_t na2 = (size_t)nt * kSteps * 64 * 16, nb2 = (size_t)nt * kSteps * 16 * 128,
                 nc2 = (size_t)nt * 64 * 128;
    std::vector<unsigned short> A2(na2), B2(nb2);
    std::vector<float> C2(nc2);
    for (auto &v : A2) v = to_bf16((float)(int)(rng.uniform() * 8.0f));
    for (size_t i = 0; i < nb2; i += 2) {
        const float x = ldexpf(rng.uniform(), (int)(rng.uniform() * 6.0f) - 3);
        const unsigned short hi = to_bf16(x);
        B2[i] = hi;
        B2[i + 1] = to_bf16(x - from_bf16(hi));
    }
    for (auto &v : C2) v = rng.uniform() * 50.0f;
    unsigned short *dA2 = dev_upload(A2), *dB2 = dev_upload(B2);
    float *dC2 = dev_upload(C2), *e1 = nullptr, *e2 = nullptr;
    CK(cudaMalloc(&e1, nc2 * 4));
    CK(cudaMalloc(&e2, nc2 * 4));
    probe_n128_kernel<<<nt, 128>>>(dA2, dB2, dC2, e1, e2);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> q1 = dev_download(e1, nc2), q2 = dev_download(e2, nc2);
    size_t diff2 = 0;
    for (size_t i = 0; i < nc2; i++) diff2 += memcmp(&q1[i], &q2[i], 4) != 0;
    printf("wgmma probe m64n128k16 (gemm_q4w.cu's B layout, LBO 128, SBO 256), 4-bit x hi/lo: %zu of %zu "
           "outputs "
           "differ between mma.sync and wgmma\n",
           diff2, nc2);
    cudaFree(dA2);
    cudaFree(dB2);
    cudaFree(dC2);
    cudaFree(e1);
    cudaFree(e2);
    probe_attn(rng);
    return 0;
}
