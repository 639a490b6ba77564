// weft_cu_matmul and weft_cu_embed on every device weight layout:
//   correctness: against a CPU reference (weights decoded with the CPU decoders' fp32 formulas, dot in fp64),
//                relative L2 per output row <= 1e-5, and row invariance: every row of an M-row call equals
//                the same row computed alone (M = 1) bit for bit, for M in {1, 3, 7, 16, 33, 256};
//   timing:      M = 1 (decode: weight bytes / time = achieved bandwidth), M = 16 and M = 256.
// Usage: bench_cuda_matmul [N K]   (default: the Llama-3.1-8B FFN shape 14336 x 4096, plus a check shape)
#include "common.cuh"
#include "cuda_kernels.h"

namespace {

constexpr size_t kFlushBytes = (size_t)256 << 20;
void *g_flush = nullptr;
unsigned g_flush_n = 0;

struct Layout {
    const char *name;
    weft_cu_kind kind;
    weft_cu_qmode mode;
    weft_cu_sdt sdt;
    int group;
};

const Layout kLayouts[] = {
    {"F32", WEFT_CU_F32, WEFT_CU_AFFINE, WEFT_CU_S_F32, 0},
    {"F16", WEFT_CU_F16, WEFT_CU_AFFINE, WEFT_CU_S_F32, 0},
    {"BF16", WEFT_CU_BF16, WEFT_CU_AFFINE, WEFT_CU_S_F32, 0},
    {"Q4_0", WEFT_CU_Q4, WEFT_CU_OFF8, WEFT_CU_S_F16, 32},
    {"MLX4-g64-bf16", WEFT_CU_Q4, WEFT_CU_AFFINE, WEFT_CU_S_BF16, 64},
    {"MLX4-g32-f16", WEFT_CU_Q4, WEFT_CU_AFFINE, WEFT_CU_S_F16, 32},
    {"Q8_0", WEFT_CU_Q8, WEFT_CU_SYM, WEFT_CU_S_F16, 32},
    {"MLX8-g64-bf16", WEFT_CU_Q8, WEFT_CU_AFFINE, WEFT_CU_S_BF16, 64},
    // the tensor-core 4-bit path (mma_q4.cu): same values, fragment-ordered words
    {"Q4_0-mma", WEFT_CU_Q4F, WEFT_CU_OFF8, WEFT_CU_S_F16, 32},
    {"MLX4-g64-mma", WEFT_CU_Q4F, WEFT_CU_AFFINE, WEFT_CU_S_BF16, 64},
    {"MLX4-g32f16-mma", WEFT_CU_Q4F, WEFT_CU_AFFINE, WEFT_CU_S_F16, 32},
    {"MLX4-g128f32-mma", WEFT_CU_Q4F, WEFT_CU_AFFINE, WEFT_CU_S_F32, 128},
};

// Relative L2 allowed against the fp64 reference: fp32 paths 1e-5; the tensor-core path multiplies bf16
// hi + lo parts of x (16 significand bits), ~5e-6 typical.
double tolerance(const Layout &L) {
    return L.kind == WEFT_CU_Q4F ? 3e-5 : 1e-5;
}

float scale_value(weft_cu_sdt sdt, const std::vector<uint16_t> &s16, const std::vector<float> &s32,
                  size_t i) {
    if (sdt == WEFT_CU_S_F32) return s32[i];
    return sdt == WEFT_CU_S_F16 ? f16_to_f32(s16[i]) : bf16_to_f32(s16[i]);
}

// Random weights in a layout, uploaded; ref gets the decoded fp32 matrix (CPU decoder arithmetic).
struct Weight {
    weft_cu_weight w{};
    std::vector<float> ref;
    void *q = nullptr, *s = nullptr, *b = nullptr;
    void release() {
        cudaFree(q);
        cudaFree(s);
        cudaFree(b);
    }
};

Weight make_weight(const Layout &L, int64_t N, int64_t K, uint64_t seed) {
    Rng rng(seed);
    Weight W;
    W.w.kind = L.kind;
    W.w.mode = L.mode;
    W.w.sdt = L.sdt;
    W.w.group = L.group;
    W.w.rows = N;
    W.w.cols = K;
    const size_t n = (size_t)N * K;
    W.ref.resize(n);
    if (L.kind == WEFT_CU_F32) {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) W.ref[i] = h[i] = rng.uniform() * 0.05f;
        W.q = dev_upload(h);
    } else if (L.kind == WEFT_CU_F16 || L.kind == WEFT_CU_BF16) {
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; i++) {
            float v = rng.uniform() * 0.05f;
            h[i] = L.kind == WEFT_CU_F16 ? f32_to_f16(v) : f32_to_bf16(v);
            W.ref[i] = L.kind == WEFT_CU_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
        }
        W.q = dev_upload(h);
    } else {
        const size_t ng = n / L.group;
        std::vector<uint16_t> s16(ng), b16(ng);
        std::vector<float> s32(ng), b32(ng);
        for (size_t g = 0; g < ng; g++) {
            float sv = 0.001f + 0.004f * (rng.uniform() + 1.0f), bv = -0.03f * (rng.uniform() + 1.0f);
            s32[g] = sv;
            b32[g] = bv;
            s16[g] = L.sdt == WEFT_CU_S_F16 ? f32_to_f16(sv) : f32_to_bf16(sv);
            b16[g] = L.sdt == WEFT_CU_S_F16 ? f32_to_f16(bv) : f32_to_bf16(bv);
        }
        std::vector<uint8_t> qv(n);
        const bool four = L.kind == WEFT_CU_Q4 || L.kind == WEFT_CU_Q4F;
        for (size_t i = 0; i < n; i++) qv[i] = (uint8_t)(rng.next() >> (four ? 60 : 56));
        for (size_t i = 0; i < n; i++) {
            const size_t g = i / L.group;
            const float s = scale_value(L.sdt, s16, s32, g), bb = scale_value(L.sdt, b16, b32, g);
            if (L.mode == WEFT_CU_AFFINE) {
                float sq = s * (float)qv[i];
                W.ref[i] = sq + bb;
            } else if (L.mode == WEFT_CU_OFF8) {
                W.ref[i] = (float)((int)qv[i] - 8) * s;
            } else {
                W.ref[i] = (float)(int8_t)qv[i] * s;
            }
        }
        if (four) {
            std::vector<uint32_t> words(n / 8, 0);
            for (size_t i = 0; i < n; i++) words[i / 8] |= (uint32_t)qv[i] << (4 * (i % 8));
            if (L.kind == WEFT_CU_Q4F) {
                std::vector<uint32_t> perm(n / 8);
                weft_cu_q4f_pack(words.data(), N, K, perm.data());
                words.swap(perm);
            }
            W.q = dev_upload(words);
        } else {
            W.q = dev_upload(qv);
        }
        if (L.sdt == WEFT_CU_S_F32) {
            W.s = dev_upload(s32);
            if (L.mode == WEFT_CU_AFFINE) W.b = dev_upload(b32);
        } else {
            W.s = dev_upload(s16);
            if (L.mode == WEFT_CU_AFFINE) W.b = dev_upload(b16);
        }
    }
    W.w.q = W.q;
    W.w.s = W.s;
    W.w.b = W.b;
    W.w.bytes = weft_cu_weight_bytes(L.kind, L.mode, L.sdt, L.group, N, K);
    return W;
}

void check_layout(const Layout &L, int64_t N, int64_t K, bool timing) {
    Weight W = make_weight(L, N, K, 42 + (uint64_t)L.kind * 7 + (uint64_t)L.mode);
    const int Ms[] = {1, 3, 7, 16, 33, 256};
    const int MAXM = 256;
    Rng rng(7);
    std::vector<float> x((size_t)MAXM * K);
    for (auto &v : x) v = rng.uniform();
    float *dx = dev_upload(x), *dy = nullptr;
    CK(cudaMalloc(&dy, (size_t)MAXM * N * sizeof(float)));
    // M = 1 per row: the reference bits for invariance
    std::vector<float> solo((size_t)MAXM * N);
    for (int i = 0; i < MAXM; i++) {
        CK(weft_cu_matmul(&W.w, dx + (size_t)i * K, K, 1, dy, N, nullptr, 0, 0));
        CK(cudaMemcpy(solo.data() + (size_t)i * N, dy, N * sizeof(float), cudaMemcpyDeviceToHost));
    }
    // accuracy of the solo rows (a sample of 8 rows) against the fp64 reference
    double worst = 0;
    for (int i = 0; i < MAXM; i += MAXM / 8) {
        double num = 0, den = 0;
        for (int64_t o = 0; o < N; o++) {
            double acc = 0;
            const float *w = W.ref.data() + (size_t)o * K, *xi = x.data() + (size_t)i * K;
            for (int64_t k = 0; k < K; k++) acc += (double)w[k] * xi[k];
            double dd = solo[(size_t)i * N + o] - acc;
            num += dd * dd;
            den += acc * acc;
        }
        worst = fmax(worst, sqrt(num / fmax(den, 1e-300)));
    }
    EXPECT(worst <= tolerance(L), "%s %lldx%lld: relative L2 %.3g vs fp64 reference", L.name, (long long)N,
           (long long)K, worst);
    int inv_bad = 0;
    for (int M : Ms) {
        CK(cudaMemset(dy, 0xff, (size_t)M * N * sizeof(float))); // poison: NaN everywhere
        CK(weft_cu_matmul(&W.w, dx, K, M, dy, N, nullptr, 0, 0));
        std::vector<float> y = dev_download(dy, (size_t)M * N);
        if (memcmp(y.data(), solo.data(), (size_t)M * N * sizeof(float))) inv_bad++;
        EXPECT(!memcmp(y.data(), solo.data(), (size_t)M * N * sizeof(float)), "%s: M=%d rows differ from M=1",
               L.name, M);
    }
    // embedding rows = the decoded weight rows exactly
    std::vector<weft_cu_row> rows(4);
    for (int i = 0; i < 4; i++) rows[i] = weft_cu_row{nullptr, 0, (int)((i * 977) % N), 0, 0};
    weft_cu_row *drows = dev_upload(rows);
    CK(weft_cu_embed(&W.w, drows, 4, dy, 0));
    std::vector<float> e = dev_download(dy, (size_t)4 * K);
    bool emb_ok = true;
    for (int i = 0; i < 4; i++)
        emb_ok &=
            !memcmp(e.data() + (size_t)i * K, W.ref.data() + (size_t)rows[i].token * K, K * sizeof(float));
    EXPECT(emb_ok, "%s: embedding rows differ from the CPU decoder", L.name);
    printf("%-14s %6lldx%-6lld relL2=%.1e invariance=%s embed=%s", L.name, (long long)N, (long long)K, worst,
           inv_bad ? "FAIL" : "ok", emb_ok ? "ok" : "FAIL");
    if (timing) {
        // Each timed run starts with the weights out of L2 (a 256 MB write in between), as in a model where
        // every matrix is read once per token; "hot" repeats without the flush (weights L2-resident if they
        // fit).
        auto flush = [&] { CK(cudaMemsetAsync(g_flush, (int)(g_flush_n++ & 0x7f), kFlushBytes, 0)); };
        double t1 = time_ms([&] { weft_cu_matmul(&W.w, dx, K, 1, dy, N, nullptr, 0, 0); }, 3, 20, flush);
        double t1h = time_ms([&] { weft_cu_matmul(&W.w, dx, K, 1, dy, N, nullptr, 0, 0); });
        double t4 = time_ms([&] { weft_cu_matmul(&W.w, dx, K, 4, dy, N, nullptr, 0, 0); }, 3, 20, flush);
        double t16 = time_ms([&] { weft_cu_matmul(&W.w, dx, K, 16, dy, N, nullptr, 0, 0); }, 3, 20, flush);
        double t256 = time_ms([&] { weft_cu_matmul(&W.w, dx, K, 256, dy, N, nullptr, 0, 0); }, 1, 5, flush);
        printf("  M=1 %.4f ms %5.0f GB/s (hot %.4f ms %5.0f) | M=4 %.4f | M=16 %.4f ms | M=256 %.3f ms %.1f "
               "TFLOP/s",
               t1, W.w.bytes / t1 / 1e6, t1h, W.w.bytes / t1h / 1e6, t4, t16, t256,
               2.0 * 256 * N * K / t256 / 1e9);
    }
    printf("\n");
    cudaFree(drows);
    cudaFree(dx);
    cudaFree(dy);
    W.release();
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int64_t N = 14336, K = 4096;
    if (argc == 3) {
        N = atoll(argv[1]);
        K = atoll(argv[2]);
    }
    CK(cudaMalloc(&g_flush, kFlushBytes));
    for (const Layout &L : kLayouts) {
        if (L.kind != WEFT_CU_Q4F) {
            check_layout(L, 1001, 512, false); // odd N: tails of the output tiles
            continue;
        }
        check_layout(L, 1008, 512, false);                       // 63 tiles, K blocks of 4 sub-blocks
        if (192 % L.group == 0) check_layout(L, 64, 192, false); // K blocks of 2 sub-blocks (fixture shapes)
        if (L.group == 32) check_layout(L, 48, 96, false);       // 1 sub-block per K block
    }
    for (const Layout &L : kLayouts) check_layout(L, N, K, true);
    if (argc == 3) return report("bench_cuda_matmul");
    // the 8B model's other 4-bit shapes: down projection (8 warps per tile on the mma path), k/v projection
    for (const Layout &L : kLayouts) {
        if (L.kind != WEFT_CU_Q4 && L.kind != WEFT_CU_Q4F) continue;
        check_layout(L, 4096, 14336, true);
        check_layout(L, 1024, 4096, true);
    }
    return report("bench_cuda_matmul");
}
