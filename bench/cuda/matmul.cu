// weft_cu_matmul and weft_cu_embed on every device weight layout:
//   correctness: against a CPU reference (weights decoded with the CPU decoders' fp32 formulas, dot in fp64),
//                relative L2 per output row <= 1e-5, and row invariance: every row of an M-row call equals
//                the same row computed alone (M = 1) bit for bit, for M in {1, 3, 7, 16, 33, 256};
//   timing:      M = 1 (decode: weight bytes / time = achieved bandwidth), M = 16 and M = 256.
// Usage: bench_cuda_matmul [N K]   (default: the Llama-3.1-8B FFN shape 14336 x 4096, plus a check shape)
#include "matmul_common.cuh"
#include "matmul_f16.cuh"

namespace {

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

// The prepared-activation path (weft_cu_xq_prep + weft_cu_matmul_q4x) against the fp32-activation kernel
// (weft_cu_matmul on WEFT_CU_Q4F): the same bits for every M, with bias, with accumulate, with the outputs
// split into three buffers, and the SwiGLU epilogue equal to matmul + weft_cu_swiglu. With timing: M = 1
// (cold and hot), 4, 16, 256 for both paths.
void check_q4x(const Layout &L, int64_t N, int64_t K, bool timing) {
    Weight W = make_weight(L, N, K, 4242 + (uint64_t)L.mode * 3 + (uint64_t)L.group);
    const int MAXM = 512;
    Rng rng(11);
    std::vector<float> x((size_t)MAXM * K), bias(N), y0((size_t)MAXM * N);
    for (auto &v : x) v = rng.uniform();
    for (auto &v : bias) v = rng.uniform();
    for (auto &v : y0) v = rng.uniform();
    float *dx = dev_upload(x), *db = dev_upload(bias), *dy = nullptr, *dy2 = nullptr;
    CK(cudaMalloc(&dy, (size_t)MAXM * N * sizeof(float)));
    CK(cudaMalloc(&dy2, (size_t)MAXM * N * sizeof(float)));
    weft_cu_xq xq{nullptr, nullptr, K, 0};
    CK(cudaMalloc(&xq.f, (size_t)MAXM * K * sizeof(uint32_t)));
    CK(cudaMalloc(&xq.s, (size_t)MAXM * (K / 32) * sizeof(float)));
    const size_t ny = (size_t)MAXM * N * sizeof(float);
    int bad = 0, gemv_ran = 0, gemv_rows_ran = 0, gemv_sk_ran = 0, wsk_ran = 0;
    // the split-K forms' slot sums (weft_cu_epi.part; gemv_q4.cu's and the wgmma GEMM's), poisoned: every
    // sum a fold reads must be written
    const size_t npart = std::max(weft_cu_gemv_part_floats(N, K), weft_cu_gemm_q4w_part_floats(N, K, MAXM));
    float *dpart = nullptr;
    CK(cudaMalloc(&dpart, npart * sizeof(float)));
    CK(cudaMemset(dpart, 0xff, npart * sizeof(float)));
    // 64 rows and up run the shared-memory GEMM (gemm_q4.cu): full and partial blocks of 64 rows
    for (int M : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 33, 63, 64, 65, 100, 256, 300}) {
        for (int mode = 0; mode < 3; mode++) { // plain, bias, bias + accumulate
            const float *bp = mode ? db : nullptr;
            const int accu = mode == 2;
            CK(cudaMemcpy(dy, y0.data(), ny, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dy2, y0.data(), ny, cudaMemcpyHostToDevice));
            if (!accu) CK(cudaMemset(dy2, 0xff, ny));
            CK(weft_cu_matmul(&W.w, dx, K, M, dy, N, bp, accu, 0));
            CK(cudaMemset(xq.f, 0xff, (size_t)MAXM * K * sizeof(uint32_t)));
            CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
            const weft_cu_epi e = weft_cu_epi_store(dy2, N, bp, accu, N);
            CK(weft_cu_matmul_q4x(&W.w, &xq, M, &e, 0));
            std::vector<float> a = dev_download(dy, (size_t)M * N), b = dev_download(dy2, (size_t)M * N);
            const bool eq = !memcmp(a.data(), b.data(), (size_t)M * N * sizeof(float));
            bad += !eq;
            EXPECT(eq, "%s %lldx%lld q4x: M=%d mode %d differs from the fp32-activation kernel", L.name,
                   (long long)N, (long long)K, M, mode);
            // the GEMMs (mma.sync, wgmma) at every M, whether or not weft_cu_matmul_q4x would pick them here
            // (and, at 1..16 rows, the streaming kernel, dispatched for Q4_0 only, with runs of 1, 2, 3 and 7
            // tiles per group of warps and the whole weight in one group besides the device's own choice; at
            // 9..16 rows with and without the split-K scratch)
            static const char *const gname[4] = {"mma.sync", "wgmma", "cluster-split", "gemv_q4.cu"};
            static const int gemv_runs[6] = {0, 1, 2, 3, 7, 1 << 30};
            for (int wg = 0; wg < 3 + (M <= 16 ? (M > 8 ? 12 : 6) : 0); wg++) {
                weft_cu_epi ev = e;
                if (wg >= 3) ev.gemv_run = gemv_runs[(wg - 3) % 6];
                if (wg >= 9) { // poisoned before every call: each slot sum the fold reads must be this call's
                    ev.part = dpart;
                    ev.part_floats = npart;
                    CK(cudaMemset(dpart, 0xff, npart * sizeof(float)));
                }
                CK(cudaMemcpy(dy2, y0.data(), ny, cudaMemcpyHostToDevice));
                if (!accu) CK(cudaMemset(dy2, 0xff, ny));
                const cudaError_t ge = wg >= 3   ? weft_cu_gemv_q4(&W.w, &xq, M, &ev, 0)
                                       : wg == 2 ? weft_cu_gemm_q4s(&W.w, &xq, M, &e, 0)
                                       : wg == 1 ? weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0)
                                                 : weft_cu_gemm_q4x(&W.w, &xq, M, &e, 0);
                if (ge == cudaErrorNotSupported) continue;
                CK(ge);
                gemv_ran += wg >= 3;
                gemv_rows_ran += wg >= 3 && M > 1;
                gemv_sk_ran += wg >= 9;
                CK(cudaDeviceSynchronize());
                const std::vector<float> gv = dev_download(dy2, (size_t)M * N);
                const bool geq = !memcmp(gv.data(), a.data(), (size_t)M * N * sizeof(float));
                bad += !geq;
                EXPECT(geq, "%s %lldx%lld %s: M=%d mode %d differs from the fp32-activation kernel (run %d)",
                       L.name, (long long)N, (long long)K, gname[wg < 3 ? wg : 3], M, mode,
                       wg >= 3 ? gemv_runs[(wg - 3) % 6] : 0);
            }
            bad += check_wgmma_sk(W, xq, M, e, dy2, y0, accu, dpart, npart, a, wsk_ran,
                                  "fp32-activation kernel");
        }
    }
    // gemv_q4.cu must have run where it takes the shape (K blocks of 4 sub-blocks, at least as many as warps
    // per tile, 4+ bytes of scales per K block), so a refusal cannot pass silently
    const int ssz = L.sdt == WEFT_CU_S_F32 ? 4 : 2;
    if (K % 128 == 0 && K / 128 >= weft_cu_q4_kw(N, K) && 128 / L.group * ssz >= 4) {
        bad += gemv_ran == 0;
        EXPECT(gemv_ran > 0, "%s %lldx%lld: gemv_q4.cu refused a shape it takes", L.name, (long long)N,
               (long long)K);
    }
    // ... and at several rows for Q4_0 where its 8 staged rows fit shared memory (K <= 4096 here)
    if (L.mode == WEFT_CU_OFF8 && K % 128 == 0 && K / 128 >= weft_cu_q4_kw(N, K) && K <= 4096) {
        bad += gemv_rows_ran == 0;
        EXPECT(gemv_rows_ran > 0, "%s %lldx%lld: gemv_q4.cu refused several rows of a shape it takes", L.name,
               (long long)N, (long long)K);
    }
    // ... and its split-K form at 9..16 rows (Q4_0, where K has at least KW blocks)
    if (L.mode == WEFT_CU_OFF8 && K % 128 == 0 && K / 128 >= weft_cu_q4_kw(N, K)) {
        bad += gemv_sk_ran == 0;
        EXPECT(gemv_sk_ran > 0, "%s %lldx%lld: gemv_q4.cu's split-K form refused a shape it takes", L.name,
               (long long)N, (long long)K);
    }
    // ... and the wgmma GEMM's split-K form where the wgmma GEMM runs (sm_90a, K blocks of 4 sub-blocks)
    if (wgmma_ran(L, K)) {
        bad += wsk_ran == 0;
        EXPECT(wsk_ran > 0, "%s %lldx%lld: the wgmma GEMM's split-K form never ran", L.name, (long long)N,
               (long long)K);
    }
    // three-way split (segments at 16-row multiples) == the plain store's slices (1..16: gemv_q4.cu; 12, 16:
    // its split-K form and fold; 40: the wgmma GEMM's split-K form on small weights; 70: the GEMMs)
    bad += check_split_store(L, W, dx, xq, db, dy, y0, dpart, npart, nullptr, 0, {1, 5, 12, 16, 40, 70}, 0);
    // SwiGLU epilogue == plain store, de-interleaved, then weft_cu_swiglu
    for (const int M : {1, 7, 12, 16, 40, 70}) {
        const int64_t I = N / 2;
        CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
        const weft_cu_epi plain = weft_cu_epi_store(dy, N, nullptr, 0, N);
        CK(weft_cu_matmul_q4x(&W.w, &xq, M, &plain, 0));
        std::vector<float> a = dev_download(dy, (size_t)M * N), gh((size_t)M * I), uh((size_t)M * I);
        for (int r = 0; r < M; r++)
            for (int64_t o = 0; o < I; o++) {
                gh[r * I + o] = a[r * N + 16 * (o / 8) + o % 8];
                uh[r * I + o] = a[r * N + 16 * (o / 8) + 8 + o % 8];
            }
        float *dg = dev_upload(gh), *du = dev_upload(uh);
        CK(weft_cu_swiglu(dg, du, (int64_t)M * I, 0));
        // the epilogue's prepared words of the output (I % 32 == 0) == weft_cu_xq_prep of that output
        weft_cu_xq xw{nullptr, nullptr, I, 0}, xp{nullptr, nullptr, I, 0};
        const bool words = I % 32 == 0;
        if (words) {
            for (weft_cu_xq *q : {&xw, &xp}) {
                CK(cudaMalloc(&q->f, (size_t)M * I * sizeof(uint32_t)));
                CK(cudaMalloc(&q->s, (size_t)M * (I / 32) * sizeof(float)));
                CK(cudaMemset(q->f, 0xff, (size_t)M * I * sizeof(uint32_t)));
            }
        }
        weft_cu_epi sw = weft_cu_epi_store(dy2, I, nullptr, 0, N);
        sw.mode = WEFT_CU_EPI_SWIGLU;
        sw.xf = xw.f;
        sw.xf_nsub = I / 32;
        sw.part =
            dpart; // 12, 16: the split-K form's fold runs this epilogue (the plain store: the split GEMM)
        sw.part_floats = npart;
        CK(cudaMemset(dy2, 0xff, ny));
        CK(weft_cu_matmul_q4x(&W.w, &xq, M, &sw, 0));
        std::vector<float> want = dev_download(dg, (size_t)M * I), got = dev_download(dy2, (size_t)M * I);
        bool ok = !memcmp(want.data(), got.data(), (size_t)M * I * sizeof(float));
        if (words) {
            CK(weft_cu_xq_prep(dy2, I, M, &xp, 0));
            ok &= dev_download(xw.f, (size_t)M * I) == dev_download(xp.f, (size_t)M * I);
            for (weft_cu_xq *q : {&xw, &xp}) {
                cudaFree(q->f);
                cudaFree(q->s);
            }
        }
        bad += !ok;
        EXPECT(ok, "%s q4x: SwiGLU epilogue differs from matmul + weft_cu_swiglu (M=%d)", L.name, M);
        cudaFree(dg);
        cudaFree(du);
    }
    printf("q4x %-16s %6lldx%-6lld same bits as the fp32-activation kernel: %s", L.name, (long long)N,
           (long long)K, bad ? "FAIL" : "ok");
    if (timing) {
        auto flush = [&] { CK(cudaMemsetAsync(g_flush, (int)(g_flush_n++ & 0x7f), kFlushBytes, 0)); };
        weft_cu_epi e = weft_cu_epi_store(dy, N, nullptr, 0, N);
        e.part = dpart; // the dispatch's split-K form at 9..16 rows
        e.part_floats = npart;
        auto old_mm = [&](int M) { return [&, M] { weft_cu_matmul(&W.w, dx, K, M, dy, N, nullptr, 0, 0); }; };
        auto new_mm = [&](int M) { return [&, M] { weft_cu_matmul_q4x(&W.w, &xq, M, &e, 0); }; };
        CK(weft_cu_xq_prep(dx, K, 256, &xq, 0));
        const double o1 = time_ms(old_mm(1), 3, 20, flush), n1 = time_ms(new_mm(1), 3, 20, flush);
        const double n1h = time_ms(new_mm(1));
        const double o4 = time_ms(old_mm(4), 3, 20, flush), n4 = time_ms(new_mm(4), 3, 20, flush);
        const double o16 = time_ms(old_mm(16), 3, 20, flush), n16 = time_ms(new_mm(16), 3, 20, flush);
        const double o256 = time_ms(old_mm(256), 1, 5, flush), n256 = time_ms(new_mm(256), 1, 5, flush);
        const double p1 = time_ms([&] { weft_cu_xq_prep(dx, K, 1, &xq, 0); });
        // many rows: the GEMM against mma_q4x.cu's own kernel (no_gemm), M = 16 .. 512 (the dispatch uses the
        // GEMM from WEFT_CU_GEMM_MIN_ROWS)
        weft_cu_epi eo = e;
        eo.gemm = -1;
        CK(weft_cu_xq_prep(dx, K, MAXM, &xq, 0));
        // few rows: mma_q4x.cu's kernels (no split) against the cluster-split GEMM
        weft_cu_epi en = e;
        en.no_split = 1;
        printf("\n    few rows, ms q4x kernel / split GEMM / gemv_q4.cu:");
        for (const int M : {2, 4, 8, 16, 32, 64}) {
            const double tk = time_ms([&] { weft_cu_matmul_q4x(&W.w, &xq, M, &en, 0); }, 3, 20, flush);
            const double ts = time_ms([&] { weft_cu_gemm_q4s(&W.w, &xq, M, &e, 0); }, 3, 20, flush);
            const bool has_v = weft_cu_gemv_q4(&W.w, &xq, M, &e, 0) == cudaSuccess;
            const double tv =
                has_v ? time_ms([&] { weft_cu_gemv_q4(&W.w, &xq, M, &e, 0); }, 3, 20, flush) : 0.0;
            printf(" M=%d %.4f / %.4f / %.4f", M, tk, ts, tv);
        }
        printf("\n    many rows, ms (TFLOP/s) q4x kernel / GEMM / wgmma GEMM:");
        for (const int M : {16, 32, 64, 128, 256, 512}) {
            const double tk = time_ms([&] { weft_cu_matmul_q4x(&W.w, &xq, M, &eo, 0); }, 1, 5, flush);
            const double tg = time_ms([&] { weft_cu_gemm_q4x(&W.w, &xq, M, &e, 0); }, 1, 5, flush);
            const bool has_w = weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0) == cudaSuccess;
            const double tw =
                has_w ? time_ms([&] { weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0); }, 1, 5, flush) : 0.0;
            const double f = 2.0 * M * N * K / 1e9;
            printf(" M=%d %.3f (%.1f) / %.3f (%.1f) / %.3f (%.1f)", M, tk, f / tk, tg, f / tg, tw,
                   has_w ? f / tw : 0.0);
        }
        // back to back (as inside a CUDA graph): 24 launches rotating over copies of the weight that
        // together exceed the L2, so every launch reads its weight from HBM and the launch cost is amortised
        const int ncopy = (int)std::min<size_t>(16, (size_t)(256 << 20) / W.w.bytes + 2);
        std::vector<weft_cu_weight> cp(ncopy, W.w);
        const size_t qb = (size_t)N * K / 2,
                     sb = (size_t)N * (K / L.group) * (L.sdt == WEFT_CU_S_F32 ? 4 : 2);
        for (int c = 1; c < ncopy; c++) {
            CK(cudaMalloc(&cp[c].q, qb));
            CK(cudaMemcpy(cp[c].q, W.w.q, qb, cudaMemcpyDeviceToDevice));
            CK(cudaMalloc(&cp[c].s, sb));
            CK(cudaMemcpy(cp[c].s, W.w.s, sb, cudaMemcpyDeviceToDevice));
            if (W.w.b) {
                CK(cudaMalloc(&cp[c].b, sb));
                CK(cudaMemcpy(cp[c].b, W.w.b, sb, cudaMemcpyDeviceToDevice));
            }
        }
        auto stream_ms = [&](bool fresh, int M) {
            return time_ms(
                       [&] {
                           for (int r = 0; r < 24; r++) {
                               const weft_cu_weight *wc = &cp[r % ncopy];
                               if (fresh)
                                   weft_cu_matmul_q4x(wc, &xq, M, &e, 0);
                               else
                                   weft_cu_matmul(wc, dx, K, M, dy, N, nullptr, 0, 0);
                           }
                       },
                       2, 7) /
                   24;
        };
        const double so1 = stream_ms(false, 1), sn1 = stream_ms(true, 1), sn16 = stream_ms(true, 16);
        const double sn4 = stream_ms(true, 4), sn8 = stream_ms(true, 8);
        e.no_gemv =
            1; // 4, 8 and 16 rows without gemv_q4.cu (the q4x kernel at 4, the split GEMM at 8 and 16)
        const double sv4 = stream_ms(true, 4), sv8 = stream_ms(true, 8), sv16 = stream_ms(true, 16);
        e.no_gemv = 0;
        e.no_split = 1; // 16 and 64 rows without the cluster-split GEMM
        const double sk16 = stream_ms(true, 16), sk64 = stream_ms(true, 64);
        e.no_split = 0;
        const double sn64 = stream_ms(true, 64);
        e.no_gemv = 1; // mma_q4x.cu's one-row kernel (session 9's decode), for comparison
        const double sg1 = stream_ms(true, 1);
        e.no_x1s = 1; // ... and without its shared-memory row (session 5)
        const double sx1 = stream_ms(true, 1);
        e.no_x1s = e.no_gemv = 0;
        for (int c = 1; c < ncopy; c++) {
            cudaFree(cp[c].q);
            cudaFree(cp[c].s);
            cudaFree(cp[c].b);
        }
        CK(cudaGetLastError());
        printf(
            "\n    back to back (graph-like, cold): M=1 old %.4f ms %5.0f GB/s | new %.4f ms %5.0f GB/s "
            "(mma_q4x.cu's %.4f ms %5.0f GB/s, without the shared row %.4f ms %5.0f GB/s) | M=16 %.4f ms "
            "(no split %.4f) | M=64 %.4f ms (no split %.4f)"
            "\n    back to back, ms dispatch / without gemv_q4.cu: M=4 %.4f / %.4f | M=8 %.4f / %.4f | M=16 "
            "%.4f / %.4f (%5.0f / %5.0f GB/s)",
            so1, W.w.bytes / so1 / 1e6, sn1, W.w.bytes / sn1 / 1e6, sg1, W.w.bytes / sg1 / 1e6, sx1,
            W.w.bytes / sx1 / 1e6, sn16, sk16, sn64, sk64, sn4, sv4, sn8, sv8, sn16, sv16,
            W.w.bytes / sn16 / 1e6, W.w.bytes / sv16 / 1e6);
        printf("\n    M=1 old %.4f ms %5.0f GB/s | new %.4f ms %5.0f GB/s (hot %.4f ms %5.0f GB/s) | prep "
               "%.4f ms"
               "\n    M=4 %.4f / %.4f | M=16 %.4f / %.4f | M=256 %.3f / %.3f ms (%.1f / %.1f TFLOP/s)",
               o1, W.w.bytes / o1 / 1e6, n1, W.w.bytes / n1 / 1e6, n1h, W.w.bytes / n1h / 1e6, p1, o4, n4,
               o16, n16, o256, n256, 2.0 * 256 * N * K / o256 / 1e9, 2.0 * 256 * N * K / n256 / 1e9);
    }
    printf("\n");
    cudaFree(dpart);
    cudaFree(dx);
    cudaFree(db);
    cudaFree(dy);
    cudaFree(dy2);
    cudaFree(xq.f);
    cudaFree(xq.s);
    W.release();
}
} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int64_t N = 14336, K = 4096;
    const bool gemv = (argc == 4 || argc == 5) && !strcmp(argv[1], "gemv");
    if (gemv || (argc == 5 && (!strcmp(argv[1], "gemm") || !strcmp(argv[1], "split") ||
                               !strcmp(argv[1], "wgemm")))) { // bench_cuda_matmul gemm|split|wgemm N K M:
        // the GEMM (or the cluster-split GEMM, or the wgmma GEMM) alone, for a profiler; gemv N K [M]: M rows
        // (default 1) through the dispatch with the split-K scratch (weft_cu_gemv_q4 at 1..16 rows;
        // WEFT_NO_GEMV=1: the kernels before it)
        const bool split = !strcmp(argv[1], "split"), wg = !strcmp(argv[1], "wgemm");
        N = atoll(argv[2]);
        K = atoll(argv[3]);
        const int M = argc == 5 ? atoi(argv[4]) : 1;
        if (M < 1 || M > 4096) {
            fprintf(stderr, "bench_cuda_matmul: M must be 1..4096\n");
            return 2;
        }
        const Layout &L = kLayouts[8]; // Q4_0-mma
        Weight W = make_weight(L, N, K, 7);
        weft_cu_xq xq{nullptr, nullptr, K, getenv("WEFT_F16") != nullptr}; // WEFT_F16=1: f16 activations
        float *dy = nullptr;
        CK(cudaMalloc(&xq.f, (size_t)M * K * sizeof(uint32_t)));
        CK(cudaMalloc(&xq.s, (size_t)M * (K / 32) * sizeof(float)));
        CK(cudaMalloc(&dy, (size_t)M * N * sizeof(float)));
        { // the activations as the backend prepares them (an f16 buffer's lo words zero)
            float *dx = nullptr;
            CK(cudaMalloc(&dx, (size_t)M * K * sizeof(float)));
            CK(cudaMemset(dx, 0x3c, (size_t)M * K * sizeof(float))); // (0x3c3c3c3c: 0.0115f)
            CK(weft_cu_xq_prep(dx, K, M, &xq, 0));
            CK(cudaDeviceSynchronize());
            cudaFree(dx);
        }
        weft_cu_epi e = weft_cu_epi_store(dy, N, nullptr, 0, N);
        e.no_gemv = getenv("WEFT_NO_GEMV") != nullptr;
        float *dpart = nullptr; // the split-K scratch, as the backend passes it
        e.part_floats = weft_cu_gemv_part_floats(N, K);
        CK(cudaMalloc(&dpart, e.part_floats * sizeof(float)));
        e.part = dpart;
        uint32_t *dxb = nullptr; // f16 past 64 rows: the bulk copies' scratch, as the backend passes it
        if (wg && xq.f16 && M > 64) {
            e.xb_words = weft_cu_gemm_q4w_xb_words(K, M);
            CK(cudaMalloc(&dxb, e.xb_words * sizeof(uint32_t)));
            e.xb = dxb;
        }
        auto gemm = [&] {
            return gemv    ? weft_cu_matmul_q4x(&W.w, &xq, M, &e, 0)
                   : split ? weft_cu_gemm_q4s(&W.w, &xq, M, &e, 0)
                   : wg    ? weft_cu_gemm_q4w(&W.w, &xq, M, &e, 0)
                           : weft_cu_gemm_q4x(&W.w, &xq, M, &e, 0);
        };
        for (int r = 0; r < 3; r++) CK(gemm());
        CK(cudaDeviceSynchronize());
        printf("%s %s %lldx%lld M=%d: %.4f ms\n", L.name, argv[1], (long long)N, (long long)K, M,
               time_ms([&] { gemm(); }, 1, 5));
        return 0;
    }
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
    // the prepared-activation path: every 4-bit tensor-core format at check shapes (all SB / GPB variants)
    for (const Layout &L : kLayouts) {
        if (L.kind != WEFT_CU_Q4F) continue;
        check_q4x(L, 1008, 512, false);
        if (192 % L.group == 0) check_q4x(L, 64, 192, false);
        if (L.group == 32) check_q4x(L, 48, 96, false);
        if (L.group <= 64) check_q4x(L, 128, 64, false); // the fixtures' FFN shape
        // uneven K slots (more K blocks than warps per tile, not a multiple: some slots hold one block more),
        // as Qwen3-4B's K = 2560 / 9728 give: 12 blocks over 8 slots, 5 blocks of 2 sub-blocks over 4
        check_q4x(L, 1024, 1536, false);
        if (320 % L.group == 0) check_q4x(L, 64, 320, false);
        // gemv_q4.cu's one-row loop unrolled by its ring (a warp's K blocks per tile a multiple of 4) beside
        // the plain loop in the same group: 36 blocks over 8 slots (5, 5, 5, 5, 4, 4, 4, 4), 34 over 4
        // (9, 9, 8, 8); and all slots unrolled: 32 over 8 and over 4
        check_q4x(L, 1024, 4608, false);
        check_q4x_f16(L, 1024, 4608, false);
        if (L.mode == WEFT_CU_OFF8) {
            check_q4x_f16(L, 8448, 4352, false);
            check_q4x_f16(L, 1024, 4096, false);
            check_q4x_f16(L, 8448, 4096, false);
        }
        // the wgmma GEMM's stage ring: 1, 3 and 5 K blocks (fewer than its 3 stages, not a multiple of them),
        // and uneven slots at 4 warps per tile (528+ tiles)
        for (int64_t K : {128, 384, 640})
            if (K % L.group == 0) check_q4x(L, 1008, K, false);
        if (640 % L.group == 0) check_q4x(L, 8448, 640, false);
        check_q4x_f16(L, 1008, 512, false);
        if (L.mode == WEFT_CU_OFF8) // the bulk copies' ring with 1, 3 and 5 K blocks (fewer than its stages)
            for (int64_t K : {128, 384, 640}) check_q4x_f16(L, 1008, K, false);
        if (L.group == 32) check_q4x_f16(L, 48, 96, false);
        check_q4x_f16(L, 1024, 1536, false);
        if (640 % L.group == 0) check_q4x_f16(L, 8448, 640, false);
    }
    // decode-path timings first (the numbers this session is about): the 8B shapes, fused Q|K|V and gate|up
    for (const Layout &L : kLayouts) {
        const bool q4_0 = L.mode == WEFT_CU_OFF8, mlx_g64_bf16 = L.group == 64 && L.sdt == WEFT_CU_S_BF16;
        if (L.kind != WEFT_CU_Q4F || !(q4_0 || mlx_g64_bf16)) continue;
        check_q4x(L, 14336, 4096, true);
        check_q4x_f16(L, 14336, 4096, true);
        if (L.mode != WEFT_CU_OFF8) continue; // the other shapes: Q4_0 (the llama.cpp comparison) only
        check_q4x_f16(L, 28672, 4096, true);
        check_q4x_f16(L, 4096, 14336, true);
        check_q4x(L, 28672, 4096, true); // gate|up fused
        check_q4x(L, 6144, 4096, true);  // q|k|v fused
        check_q4x(L, 4096, 14336, true); // down
        if (getenv("WEFT_MATMUL_QUICK")) continue;
        check_q4x(L, 4096, 4096, true); // o
        check_q4x(L, 1024, 4096, true); // k or v alone (before fusion)
    }
    if (getenv("WEFT_MATMUL_QUICK")) return report("bench_cuda_matmul");
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
