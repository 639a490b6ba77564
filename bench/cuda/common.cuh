// Shared helpers of the kernel harnesses (llm.c dev/cuda style): checked CUDA calls, random data, timing with
// events (median of repeats), a results line per case. Harnesses exit 1 on any failed check.
#ifndef WEFT_BENCH_CUDA_COMMON_CUH
#define WEFT_BENCH_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));           \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

static int g_failures = 0;
#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            g_failures++;                                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                             \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
        }                                                                                                    \
    } while (0)

// xorshift64*: fast, reproducible host random numbers.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    float uniform() { return (float)((next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; } // [-1, 1)
};

template <class T> T *dev_upload(const std::vector<T> &h) {
    T *d = nullptr;
    CK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <class T> std::vector<T> dev_download(const T *d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// KV caches as the kernels hold them (weft_cu_row): fp32, or with f16 the f16 words of the values (magnitudes
// past 65504 saturated to it, then nearest even; NaN stays NaN). kv_round: the value an f16 cache holds, for
// the references; kv_upload: a device cache of the values; kv_values: a device cache read back as floats.
inline size_t kv_elem_bytes(int f16) {
    return f16 ? 2 : 4;
}
inline __half kv_half(float x) {
    return __float2half_rn(fabsf(x) > 65504.0f ? copysignf(65504.0f, x) : x);
}
inline float kv_round(float x, int f16) {
    return f16 ? __half2float(kv_half(x)) : x;
}
inline void kv_copy_in(void *d, const float *h, size_t n, int f16) {
    if (!f16) {
        CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
        return;
    }
    std::vector<__half> w(n);
    for (size_t i = 0; i < n; i++) w[i] = kv_half(h[i]);
    CK(cudaMemcpy(d, w.data(), n * 2, cudaMemcpyHostToDevice));
}
inline void *kv_upload(const std::vector<float> &h, int f16) {
    void *d = nullptr;
    CK(cudaMalloc(&d, h.size() * kv_elem_bytes(f16) + 16));
    kv_copy_in(d, h.data(), h.size(), f16);
    return d;
}
inline std::vector<float> kv_values(const void *d, size_t n, int f16) {
    std::vector<float> h(n);
    if (!f16) {
        CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
        return h;
    }
    std::vector<__half> w(n);
    CK(cudaMemcpy(w.data(), d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) h[i] = __half2float(w[i]);
    return h;
}

// Median milliseconds of `reps` runs of f() (after `warm` runs), timed with events around each run.
// pre() (untimed) runs before each timed run: e.g. an L2 flush, so weights come from HBM as in a model.
struct NoPre {
    void operator()() const {}
};
template <class F, class P = NoPre> double time_ms(F f, int warm = 3, int reps = 20, P pre = P()) {
    for (int i = 0; i < warm; i++) f();
    CK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t(reps);
    for (int i = 0; i < reps; i++) {
        pre();
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[i], a, b));
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        if (!m)
            u = s;
        else {
            e = 113;
            while (!(m & 1024)) {
                m <<= 1;
                e--;
            }
            u = s | e << 23 | (m & 1023) << 13;
        }
    } else if (e == 31)
        u = s | 0x7f800000u | m << 13;
    else
        u = s | (e + 112) << 23 | m << 13;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// Round-to-nearest-even fp32 -> fp16 for normal-range values (harness data stays in range).
static inline uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u;
    int e = (int)((u >> 23) & 255) - 112;
    uint32_t m = u & 0x7fffffu;
    if (e <= 0) return (uint16_t)s;
    uint32_t r = (uint32_t)e << 10 | m >> 13, rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(s | r);
}

// Whether the current device has compute capability major >= need; prints why NAME is not run when not.
static inline bool sm_at_least(int need, const char *name) {
    int dev = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < need) printf("%s: needs sm_%d0 or newer, not run\n", name, need);
    return major >= need;
}

static inline int report(const char *name) {
    if (g_failures)
        fprintf(stderr, "%s: %d checks FAILED\n", name, g_failures);
    else
        fprintf(stderr, "%s: all checks passed\n", name);
    return g_failures ? 1 : 0;
}

#endif
