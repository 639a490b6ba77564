// bench_cuda_matmul's shared pieces: the device weight layouts it covers, random weights in a layout with
// their CPU-decoded reference, the L2 flush for cold timings, and the wgmma GEMM split-K check used by both
// the fp32-activation and the f16-activation checks (matmul.cu, matmul_f16.cuh).
#ifndef WEFT_BENCH_MATMUL_COMMON_CUH
#define WEFT_BENCH_MATMUL_COMMON_CUH

#include "common.cuh"
#include "cuda_kernels.h"

#include <cuda_fp16.h>

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
        if (L.kind == WEFT_CU_Q4F) { // the scales (biases) in the layout's tile order (weft_cu_q4f_sidx)
            auto tiled = [&](auto &v) {
                auto t = v;
                weft_cu_q4f_pack_scales(v.data(), N, K, L.group, (int)sizeof(v[0]), t.data());
                v.swap(t);
            };
            tiled(s16), tiled(s32), tiled(b16), tiled(b32);
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
// Whether the wgmma GEMM (and so its split-K form) takes this layout and K on this device.
bool wgmma_ran(const Layout &L, int64_t K) {
    int dev = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool layout = L.mode == WEFT_CU_OFF8 || (L.group == 64 && L.sdt == WEFT_CU_S_BF16) ||
                        (L.group == 32 && L.sdt == WEFT_CU_S_F16);
    return layout && major == 9 && K % 128 == 0;
}

// The three-way STORE (segments at 16-row multiples, each with its slice of the bias; with accumulate onto
// y0's values, as the residual add) == the one-segment store's slices, bit for bit, through
// weft_cu_matmul_q4x on xq (prepared from dx [M, K] here, in xq's own mode: hi/lo or f16) — the split with
// the split-K scratch, and both with the bulk copies' scratch dxb when given (the f16 q|k|v prefill's
// epilogue). Returns the mismatches.
int check_split_store(const Layout &L, const Weight &W, const float *dx, const weft_cu_xq &xq,
                      const float *db, float *dy, const std::vector<float> &y0, float *dpart, size_t npart,
                      uint32_t *dxb, size_t nxb, std::initializer_list<int> Ms, int accu) {
    int bad = 0;
    const int64_t N = W.w.rows, K = W.w.cols;
    if (N < 48) return 0;
    const int64_t e0 = 16 * (N / 48), e1 = 2 * e0;
    for (const int M : Ms) {
        CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
        CK(cudaMemcpy(dy, y0.data(), (size_t)M * N * sizeof(float), cudaMemcpyHostToDevice));
        weft_cu_epi plain = weft_cu_epi_store(dy, N, db, accu, N);
        plain.xb = dxb;
        plain.xb_words = nxb;
        CK(weft_cu_matmul_q4x(&W.w, &xq, M, &plain, 0));
        float *seg[3];
        const int64_t w[3] = {e0, e1 - e0, N - e1}, off[3] = {0, e0, e1};
        for (int i = 0; i < 3; i++) {
            CK(cudaMalloc(&seg[i], (size_t)M * w[i] * sizeof(float)));
            for (int r = 0; r < M; r++) // (y0's slice: the old values the residual add reads)
                CK(cudaMemcpy(seg[i] + r * w[i], y0.data() + r * N + off[i], w[i] * sizeof(float),
                              cudaMemcpyHostToDevice));
        }
        weft_cu_epi sp = weft_cu_epi_store(seg[0], w[0], db, accu, e0);
        sp.part = dpart; // (the plain store runs without it: the split GEMM at 9..16 rows)
        sp.part_floats = npart;
        sp.xb = dxb;
        sp.xb_words = nxb;
        for (int i = 1; i < 3; i++) {
            sp.y[i] = seg[i];
            sp.ld[i] = w[i];
            sp.bias[i] = db + off[i];
        }
        sp.end[1] = e1;
        sp.end[2] = N;
        CK(weft_cu_matmul_q4x(&W.w, &xq, M, &sp, 0));
        std::vector<float> a = dev_download(dy, (size_t)M * N);
        bool ok = true;
        for (int i = 0; i < 3; i++) {
            std::vector<float> b = dev_download(seg[i], (size_t)M * w[i]);
            for (int r = 0; r < M; r++)
                ok &= !memcmp(b.data() + r * w[i], a.data() + r * N + off[i], w[i] * sizeof(float));
            cudaFree(seg[i]);
        }
        bad += !ok;
        EXPECT(ok,
               "%s q4x (f16 %d, bulk %d): split epilogue differs from the plain store (M=%d, accumulate %d)",
               L.name, xq.f16, dxb != nullptr, M, accu);
    }
    return bad;
}

// The wgmma GEMM with its K slots split (weft_cu_gemm_q4w_sk) at every split NZ of the weight's KW, its
// scratch poisoned before every call: each must give `want` (M rows of dy2, y0 before an accumulating
// epilogue) bit for bit, and each split that divides KW (<= 8) must run where the wgmma GEMM takes the
// layout (wgmma_ran's rule; session 16's review gap F6: a refused split used to pass as long as another
// ran). Returns the mismatches and refusals; counts the runs in ran.
int check_wgmma_sk(const Weight &W, const weft_cu_xq &xq, int M, const weft_cu_epi &e, float *dy2,
                   const std::vector<float> &y0, int accu, float *dpart, size_t npart,
                   const std::vector<float> &want, int &ran, const char *what) {
    int bad = 0;
    const int64_t N = W.w.rows, K = W.w.cols;
    const size_t ny = (size_t)M * N * sizeof(float);
    const int KW = weft_cu_q4_kw(N, K);
    const bool takes = W.w.kind == WEFT_CU_Q4F &&
                       wgmma_ran(Layout{"", W.w.kind, W.w.mode, W.w.sdt, W.w.group}, K) && KW <= 8;
    for (const int nz : {2, 4, 8}) {
        weft_cu_epi es = e;
        es.part = dpart;
        es.part_floats = weft_cu_gemm_q4w_part_floats(N, K, M); // exactly what it asks for: the tail
        es.wgmma_nz = nz;                                       // past it must stay poisoned
        CK(cudaMemset(dpart, 0xff, npart * sizeof(float)));
        CK(cudaMemcpy(dy2, y0.data(), ny, cudaMemcpyHostToDevice));
        if (!accu) CK(cudaMemset(dy2, 0xff, ny));
        const cudaError_t ge = weft_cu_gemm_q4w_sk(&W.w, &xq, M, &es, 0);
        if (ge == cudaErrorNotSupported) {
            const bool must = takes && KW % nz == 0;
            bad += must;
            EXPECT(!must, "%lldx%lld wgmma GEMM split K over %d blocks (KW %d, f16 %d): M=%d refused",
                   (long long)N, (long long)K, nz, KW, xq.f16, M);
            continue;
        }
        CK(ge);
        ran++;
        const std::vector<float> gv = dev_download(dy2, (size_t)M * N);
        const bool eq = !memcmp(gv.data(), want.data(), ny);
        bad += !eq;
        EXPECT(eq, "%lldx%lld wgmma GEMM split K over %d blocks (f16 %d): M=%d differs from the %s",
               (long long)N, (long long)K, nz, xq.f16, M, what);
        const size_t tail = std::min<size_t>(4096, npart - es.part_floats);
        const std::vector<uint32_t> tw =
            dev_download(reinterpret_cast<uint32_t *>(dpart + es.part_floats), tail);
        const bool untouched = std::all_of(tw.begin(), tw.end(), [](uint32_t u) { return u == 0xffffffffu; });
        bad += !untouched;
        EXPECT(untouched, "%lldx%lld wgmma GEMM split K over %d blocks: M=%d wrote past its scratch",
               (long long)N, (long long)K, nz, M);
    }
    return bad;
}
} // namespace

#endif
