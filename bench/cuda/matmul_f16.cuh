// bench_cuda_matmul's checks of the 4-bit products on f16 activation buffers (--activations f16).
#ifndef WEFT_BENCH_MATMUL_F16_CUH
#define WEFT_BENCH_MATMUL_F16_CUH

#include "matmul_common.cuh"

namespace {
// f16 activations (weft_cu_xq.f16): every path on an f16 buffer prepared from x gives the same bits as the
// dispatch, at every M, plain and with bias + accumulate, and those values are the products of the rounded
// activations x' = f16(x): relative L2 <= 1e-5 per output row against the fp32-activation kernel on x'; the
// SwiGLU epilogue's f16 words == weft_cu_xq_prep's f16 words of its output; the wgmma GEMM's 128-row tiles
// == its 64-row tiles. With timing: the wgmma GEMM on hi/lo activations against its f16 forms, M = 64 ..
// 2,048.
void check_q4x_f16(const Layout &L, int64_t N, int64_t K, bool timing) {
    Weight W = make_weight(L, N, K, 5151 + (uint64_t)L.mode * 3 + (uint64_t)L.group);
    const int MAXM = 2048;
    Rng rng(12);
    std::vector<float> x((size_t)MAXM * K), xr, bias(N), y0((size_t)MAXM * N);
    for (auto &v : x) v = rng.uniform();
    xr = x;
    for (auto &v : xr) v = __half2float(__float2half_rn(v)); // |v| < 65504: no saturation
    for (auto &v : bias) v = rng.uniform();
    for (auto &v : y0) v = rng.uniform();
    float *dx = dev_upload(x), *dxr = dev_upload(xr), *db = dev_upload(bias), *dy = nullptr, *dy2 = nullptr;
    const size_t ny = (size_t)MAXM * N * sizeof(float);
    CK(cudaMalloc(&dy, ny));
    CK(cudaMalloc(&dy2, ny));
    weft_cu_xq xq{nullptr, nullptr, K, 1}, xh{nullptr, nullptr, K, 0};
    for (weft_cu_xq *q : {&xq, &xh}) {
        CK(cudaMalloc(&q->f, (size_t)MAXM * K * sizeof(uint32_t)));
        CK(cudaMalloc(&q->s, (size_t)MAXM * (K / 32) * sizeof(float)));
    }
    const size_t npart = std::max(weft_cu_gemv_part_floats(N, K), weft_cu_gemm_q4w_part_floats(N, K, MAXM));
    float *dpart = nullptr;
    CK(cudaMalloc(&dpart, npart * sizeof(float)));
    const size_t nxb = weft_cu_gemm_q4w_xb_words(K, MAXM); // the wgmma GEMM's bulk-copy activations
    uint32_t *dxb = nullptr;
    CK(cudaMalloc(&dxb, nxb * sizeof(uint32_t)));
    int bad = 0, wg_ran = 0, wg64_ran = 0, wg128_ran = 0, wsk_ran = 0, gemv32_ran = 0;
    double worst = 0;
    const bool q4_0 = L.mode == WEFT_CU_OFF8,
               wgmma_layout = q4_0 || (L.group == 64 && L.sdt == WEFT_CU_S_BF16) ||
                              (L.group == 32 && L.sdt == WEFT_CU_S_F16); // the wgmma GEMM's layouts
    static const char *const gname[14] = {"dispatch",
                                          "mma.sync",
                                          "wgmma",
                                          "cluster-split",
                                          "gemv_q4.cu",
                                          "wgmma 64-row tiles",
                                          "wgmma 128-row tiles",
                                          "wgmma bulk copies",
                                          "wgmma bulk copies 64-row tiles",
                                          "wgmma bulk copies 128-row tiles",
                                          "gemv_q4.cu runs of 1 tile",
                                          "gemv_q4.cu runs of 2 tiles",
                                          "gemv_q4.cu runs of 3 tiles",
                                          "gemv_q4.cu runs of 7 tiles"};
    int bulk_ran[3] = {0, 0, 0}; // default, 64-row and 128-row tiles
    for (int M : {1, 3, 8, 12, 16, 17, 24, 32, 33, 64, 65, 100, 256, 300}) {
        CK(cudaMemset(xq.f, 0xff, (size_t)MAXM * K * sizeof(uint32_t)));
        CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
        for (int mode = 0; mode < 3; mode += 2) { // plain, bias + accumulate
            const float *bp = mode ? db : nullptr;
            const int accu = mode == 2;
            const size_t nm = (size_t)M * N * sizeof(float); // the rows written (MAXM is for the timing)
            CK(cudaMemcpy(dy, y0.data(), nm, cudaMemcpyHostToDevice));
            CK(weft_cu_matmul(&W.w, dxr, K, M, dy, N, bp, accu, 0));
            const std::vector<float> a = dev_download(dy, (size_t)M * N);
            std::vector<float> base;
            for (int p = 0; p < 14; p++) {
                weft_cu_epi e = weft_cu_epi_store(dy2, N, bp, accu, N);
                static const int gemv_runs[4] = {1, 2, 3, 7}; // p >= 10: gemv_q4.cu with equal runs
                if (p >= 10) e.gemv_run = gemv_runs[p - 10];
                e.wgmma_rows = p == 5 || p == 8 ? 64 : p == 6 || p == 9 ? 128 : 0;
                if (p >= 7) { // the bulk copies, their scratch poisoned
                    e.xb = dxb;
                    e.xb_words = nxb;
                    CK(cudaMemset(dxb, 0xff, nxb * sizeof(uint32_t)));
                }
                if (p == 4 &&
                    M > 8) { // the split-K form (17..32 rows: its octets of 32), its scratch poisoned
                    e.part = dpart;
                    e.part_floats = npart;
                    CK(cudaMemset(dpart, 0xff, npart * sizeof(float)));
                }
                CK(cudaMemcpy(dy2, y0.data(), nm, cudaMemcpyHostToDevice));
                if (!accu) CK(cudaMemset(dy2, 0xff, nm));
                const cudaError_t ge = p == 0              ? weft_cu_matmul_q4x(&W.w, &xq, M, &e, 0)
                                       : p == 1            ? weft_cu_gemm_q4x(&W.w, &xq, M, &e, 0)
                                       : p == 2            ? weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0)
                                       : p == 3            ? weft_cu_gemm_q4s(&W.w, &xq, M, &e, 0)
                                       : p == 4 || p >= 10 ? weft_cu_gemv_q4(&W.w, &xq, M, &e, 0)
                                                           : weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0); // 5..9
                if (ge == cudaErrorNotSupported) continue;
                CK(ge);
                wg_ran += p == 2;
                wg64_ran += p == 5 && M > 64;
                wg128_ran += p == 6 && M > 64;
                if (p >= 7 && q4_0 && M > 64) { // it ran only if it rewrote the (poisoned) scratch
                    uint32_t w0 = 0xffffffffu;
                    CK(cudaMemcpy(&w0, dxb, sizeof w0, cudaMemcpyDeviceToHost));
                    bulk_ran[p - 7] += w0 != 0xffffffffu;
                }
                gemv32_ran += p == 4 && M > 16;
                const std::vector<float> gv = dev_download(dy2, (size_t)M * N);
                if (p == 0) {
                    base = gv;
                    for (int r = 0; r < M; r++) { // the products of x': fp32-close to the fp32 kernel on x'
                        double num = 0, den = 0;
                        for (int64_t o = 0; o < N; o++) {
                            const double d = (double)gv[r * N + o] - a[r * N + o];
                            num += d * d;
                            den += (double)a[r * N + o] * a[r * N + o];
                        }
                        worst = std::max(worst, sqrt(num / std::max(den, 1e-30)));
                    }
                    continue;
                }
                const bool eq = !memcmp(gv.data(), base.data(), (size_t)M * N * sizeof(float));
                bad += !eq;
                EXPECT(eq, "%s %lldx%lld f16 %s: M=%d mode %d differs from the dispatch", L.name,
                       (long long)N, (long long)K, gname[p], M, mode);
            }
            const weft_cu_epi es = weft_cu_epi_store(dy2, N, bp, accu, N);
            bad += check_wgmma_sk(W, xq, M, es, dy2, y0, accu, dpart, npart, base, wsk_ran, "dispatch");
        }
    }
    // the three-way split on f16 buffers (the q|k|v prefill's epilogue), with and without the residual add,
    // through the bulk copies past 64 rows (the grid's tile height)
    for (const int accu : {0, 1})
        bad +=
            check_split_store(L, W, dx, xq, db, dy, y0, dpart, npart, dxb, nxb, {12, 40, 70, 100, 300}, accu);
    bad += !(worst <= 1e-5);
    EXPECT(worst <= 1e-5, "%s %lldx%lld f16: relative L2 %.3g against the fp32 kernel on f16(x)", L.name,
           (long long)N, (long long)K, worst);
    // the wgmma GEMM must have run its f16 form (sm_90a builds on an H200, K blocks of 4 sub-blocks)
    int dev = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (q4_0 && K % 128 == 0 && K / 128 >= weft_cu_q4_kw(N, K)) { // gemv_q4.cu's 32-row split-K octets
        bad += gemv32_ran == 0;
        EXPECT(gemv32_ran > 0, "%s %lldx%lld: gemv_q4.cu refused 17..32 rows of an f16 buffer", L.name,
               (long long)N, (long long)K);
    }
    if (q4_0 && major == 9 && K % 128 == 0) {
        bool all = true;
        for (const int n : bulk_ran) all = all && n > 0;
        bad += !all;
        EXPECT(all,
               "%s %lldx%lld: the wgmma GEMM's bulk copies ran %d / %d / %d times (default / 64 / 128 rows)",
               L.name, (long long)N, (long long)K, bulk_ran[0], bulk_ran[1], bulk_ran[2]);
    }
    if (wgmma_layout && major == 9 && K % 128 == 0) {
        bad += wsk_ran == 0;
        EXPECT(wsk_ran > 0, "%s %lldx%lld: the wgmma GEMM's split-K form refused f16 activations", L.name,
               (long long)N, (long long)K);
        bad += wg_ran == 0 || wg64_ran == 0 || wg128_ran == 0;
        EXPECT(
            wg_ran > 0 && wg64_ran > 0 && wg128_ran > 0,
            "%s %lldx%lld: the wgmma GEMM refused f16 activations (past 64 rows: %d in 64-row, %d in 128-row "
            "tiles)",
            L.name, (long long)N, (long long)K, wg64_ran, wg128_ran);
    }
    // the SwiGLU epilogue's f16 words == the f16 prep of its output
    const int64_t I = N / 2;
    if (I % 32 == 0)
        for (const int M : {1, 12, 24, 40, 70}) {
            weft_cu_xq xw{nullptr, nullptr, I, 1}, xp{nullptr, nullptr, I, 1};
            for (weft_cu_xq *q : {&xw, &xp}) {
                CK(cudaMalloc(&q->f, (size_t)M * I * sizeof(uint32_t)));
                CK(cudaMalloc(&q->s, (size_t)M * (I / 32) * sizeof(float)));
                CK(cudaMemset(q->f, 0xff, (size_t)M * I * sizeof(uint32_t)));
            }
            CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
            weft_cu_epi sw = weft_cu_epi_store(dy2, I, nullptr, 0, N);
            sw.mode = WEFT_CU_EPI_SWIGLU;
            sw.xf = xw.f;
            sw.xf_nsub = I / 32;
            sw.xf_f16 = 1;
            sw.part = dpart;
            sw.part_floats = npart;
            CK(weft_cu_matmul_q4x(&W.w, &xq, M, &sw, 0));
            CK(weft_cu_xq_prep(dy2, I, M, &xp, 0));
            const bool ok = dev_download(xw.f, (size_t)M * I) == dev_download(xp.f, (size_t)M * I);
            bad += !ok;
            EXPECT(ok, "%s f16: SwiGLU epilogue words differ from the f16 prep of its output (M=%d)", L.name,
                   M);
            for (weft_cu_xq *q : {&xw, &xp}) {
                cudaFree(q->f);
                cudaFree(q->s);
            }
        }
    printf("q4x %-16s %6lldx%-6lld f16 activations (every path == the dispatch; rel. L2 %.1e): %s", L.name,
           (long long)N, (long long)K, worst, bad ? "FAIL" : "ok");
    if (timing && q4_0) {
        auto flush = [&] { CK(cudaMemsetAsync(g_flush, (int)(g_flush_n++ & 0x7f), kFlushBytes, 0)); };
        const weft_cu_epi e = weft_cu_epi_store(dy, N, nullptr, 0, N);
        CK(weft_cu_xq_prep(dx, K, MAXM, &xq, 0));
        CK(weft_cu_xq_prep(dx, K, MAXM, &xh, 0));
        printf(
            "\n    wgmma GEMM, ms (TFLOP/s) hi/lo / f16 64-row tiles / f16 128-row tiles / with bulk copies "
            "64 / 128:");
        weft_cu_epi e64 = e, e128 = e;
        e64.wgmma_rows = 64;
        e128.wgmma_rows = 128;
        weft_cu_epi b64 = e64, b128 = e128; // with the bulk copies (the activations' rewrite included)
        b64.xb = b128.xb = dxb;
        b64.xb_words = b128.xb_words = nxb;
        for (const int M : {64, 128, 256, 512, 1024, 2048}) {
            if (weft_cu_gemm_q4w(&W.w, &xh, M, &e, 0) != cudaSuccess) break;
            const double th = time_ms([&] { weft_cu_gemm_q4w(&W.w, &xh, M, &e, 0); }, 1, 5, flush);
            const double t6 = time_ms([&] { weft_cu_gemm_q4w(&W.w, &xq, M, &e64, 0); }, 1, 5, flush);
            const double tb = time_ms([&] { weft_cu_gemm_q4w(&W.w, &xq, M, &e128, 0); }, 1, 5, flush);
            const double u6 = time_ms([&] { weft_cu_gemm_q4w(&W.w, &xq, M, &b64, 0); }, 1, 5, flush);
            const double ub = time_ms([&] { weft_cu_gemm_q4w(&W.w, &xq, M, &b128, 0); }, 1, 5, flush);
            const double f = 2.0 * M * N * K / 1e9;
            printf(" M=%d %.3f (%.1f) / %.3f (%.1f) / %.3f (%.1f) / bulk %.3f (%.1f) / %.3f (%.1f)", M, th,
                   f / th, t6, f / t6, tb, f / tb, u6, f / u6, ub, f / ub);
        }
        weft_cu_epi ep = e;
        ep.part = dpart;
        ep.part_floats = npart;
        printf("\n    dispatch, ms hi/lo / f16:");
        for (const int M : {1, 4, 16, 24, 32, 64}) {
            const double th = time_ms([&] { weft_cu_matmul_q4x(&W.w, &xh, M, &ep, 0); }, 3, 20, flush);
            const double tb = time_ms([&] { weft_cu_matmul_q4x(&W.w, &xq, M, &ep, 0); }, 3, 20, flush);
            printf(" M=%d %.4f / %.4f", M, th, tb);
        }
        // 64 rows: the cluster-split GEMM against the wgmma GEMM's split-K form at each split
        printf("\n    64 rows, ms hi/lo / f16: split GEMM");
        auto t64 = [&](auto f) {
            if (f(xh) != cudaSuccess || f(xq) != cudaSuccess) return;
            printf(" %.4f / %.4f", time_ms([&] { f(xh); }, 3, 20, flush),
                   time_ms([&] { f(xq); }, 3, 20, flush));
        };
        t64([&](const weft_cu_xq &x) { return weft_cu_gemm_q4s(&W.w, &x, 64, &e, 0); });
        for (const int nz : {2, 4, 8}) {
            weft_cu_epi es = ep;
            es.wgmma_nz = nz;
            printf(" | wgmma split K over %d", nz);
            t64([&](const weft_cu_xq &x) { return weft_cu_gemm_q4w_sk(&W.w, &x, 64, &es, 0); });
        }
        CK(cudaGetLastError());
    }
    printf("\n");
    for (weft_cu_xq *q : {&xq, &xh}) {
        cudaFree(q->f);
        cudaFree(q->s);
    }
    cudaFree(dpart);
    cudaFree(dxb);
    cudaFree(dx);
    cudaFree(dxr);
    cudaFree(db);
    cudaFree(dy);
    cudaFree(dy2);
    W.release();
}

} // namespace

#endif
