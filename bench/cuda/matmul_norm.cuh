// bench_cuda_matmul's check of weft_cu_epi.norm (the batch-1 RMSNorm after a one-row product into the
// residual, forward.c's o and down projections): the product, the normed row and its prepared words and sums
// are bit for bit those of the product without it followed by weft_cu_rmsnorm_xq, on hi/lo and f16 buffers,
// twice in a row (the arrival counter returns to zero); and gemv_q4.cu's one-row stream takes it where the
// norm's thread count is its block's (1,024 ≤ rows < 8,448: 8 warps per tile).
#ifndef WEFT_BENCH_MATMUL_NORM_CUH
#define WEFT_BENCH_MATMUL_NORM_CUH

#include "matmul_common.cuh"

namespace {

void check_norm_epilogue(const Layout &L, int64_t N, int64_t K) {
    Weight W = make_weight(L, N, K, 777 + (uint64_t)N);
    Rng rng(31);
    std::vector<float> x(K), y0(N), nw(N);
    for (auto &v : x) v = rng.uniform();
    for (auto &v : y0) v = 4.0f * rng.uniform();
    for (auto &v : nw) v = 1.0f + 0.5f * rng.uniform();
    float *dx = dev_upload(x), *dnw = dev_upload(nw), *dy = dev_upload(y0), *dy2 = dev_upload(y0);
    float *dn = dev_upload(y0), *dn2 = dev_upload(y0);
    int *count = nullptr;
    CK(cudaMalloc(&count, sizeof(int)));
    CK(cudaMemset(count, 0, sizeof(int)));
    int bad = 0;
    // gemv_q4.cu's one-row stream (every 4-bit layout it takes; the dispatch sends it Q4_0) fuses it where
    // its block is the norm's 256 threads: 8 warps per tile (fewer than 528 tiles, 8+ K blocks of 128)
    const bool fused_expected = N >= 1024 && N / 16 < 528 && K % 128 == 0 && K / 128 >= 8;
    for (int f16 = 0; f16 < 2; f16++) {
        weft_cu_xq xq{nullptr, nullptr, K, f16}, on{nullptr, nullptr, N, f16}, on2{nullptr, nullptr, N, f16};
        for (weft_cu_xq *q : {&xq, &on, &on2}) {
            CK(cudaMalloc(&q->f, (size_t)q->K * sizeof(uint32_t)));
            CK(cudaMalloc(&q->s, (size_t)(q->K / 32) * sizeof(float)));
            CK(cudaMemset(q->f, 0xff, (size_t)q->K * sizeof(uint32_t)));
            CK(cudaMemset(q->s, 0xff, (size_t)(q->K / 32) * sizeof(float)));
        }
        CK(weft_cu_xq_prep(dx, K, 1, &xq, 0));
        for (int rep = 0; rep < 2; rep++) { // the second launch finds the counter back at zero
            CK(cudaMemcpy(dy, y0.data(), N * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dy2, y0.data(), N * sizeof(float), cudaMemcpyHostToDevice));
            const weft_cu_epi plain = weft_cu_epi_store(dy, N, nullptr, 1, N);
            CK(weft_cu_matmul_q4x(&W.w, &xq, 1, &plain, 0));
            CK(weft_cu_rmsnorm_xq(dn, N, dy, N, nullptr, dnw, 1, (int)N, 1e-5f, &on, 0));
            weft_cu_epi e = weft_cu_epi_store(dy2, N, nullptr, 1, N);
            e.norm_count = count;
            e.norm_y = dn2;
            e.norm_w = dnw;
            e.norm_eps = 1e-5f;
            e.norm_xq = on2;
            const cudaError_t ge = rep ? weft_cu_matmul_q4x(&W.w, &xq, 1, &e, 0) // (rep 1: the dispatch)
                                       : weft_cu_gemv_q4(&W.w, &xq, 1, &e, 0);
            if (!rep) {
                bad += (ge == cudaSuccess) != fused_expected;
                EXPECT((ge == cudaSuccess) == fused_expected,
                       "%s %lldx%lld: gemv_q4.cu %s the norm epilogue (%s)", L.name, (long long)N,
                       (long long)K, ge == cudaSuccess ? "took" : "refused", cudaGetErrorString(ge));
                if (ge != cudaSuccess) {
                    (void)cudaGetLastError();
                    CK(weft_cu_matmul_q4x(&W.w, &xq, 1, &e, 0));
                }
            } else {
                CK(ge);
            }
            CK(cudaDeviceSynchronize());
            int c = -1;
            CK(cudaMemcpy(&c, count, sizeof c, cudaMemcpyDeviceToHost));
            const bool eq = dev_download(dy, N) == dev_download(dy2, N) &&
                            dev_download(dn, N) == dev_download(dn2, N) &&
                            dev_download(on.f, N) == dev_download(on2.f, N) &&
                            dev_download(on.s, N / 32) == dev_download(on2.s, N / 32) && c == 0;
            bad += !eq;
            EXPECT(eq,
                   "%s %lldx%lld %s: the norm epilogue differs from the product then weft_cu_rmsnorm_xq "
                   "(launch %d, counter %d)",
                   L.name, (long long)N, (long long)K, f16 ? "f16" : "hi/lo", rep, c);
        }
        for (weft_cu_xq *q : {&xq, &on, &on2}) {
            cudaFree(q->f);
            cudaFree(q->s);
        }
    }
    printf("q4x %-16s %6lldx%-6lld norm epilogue == product + weft_cu_rmsnorm_xq (%s): %s\n", L.name,
           (long long)N, (long long)K, fused_expected ? "in the last block" : "its own kernel",
           bad ? "FAIL" : "ok");
    for (float *p : {dx, dnw, dy, dy2, dn, dn2}) cudaFree(p);
    cudaFree(count);
    W.release();
}

} // namespace

#endif
