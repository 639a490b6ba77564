// weft_cu_attention: fp64 CPU reference of causal GQA attention over a cache, row invariance (a row alone ==
// the same row among rows of other positions and streams, bit for bit), and decode timing at growing context.
#include "common.cuh"
#include "cuda_kernels.h"

namespace {

struct Case {
    int Hq, Hkv, d, cap;
};

size_t kv_elems(const Case &c) {
    return (size_t)2 * c.cap * c.Hkv * c.d;
}

// A stream's cache for layer 0 (f16: an f16 cache) with random K/V; returns the values it holds
// [2][cap][kvd].
// The larger of two errors, NaN if either is (fmax would drop it: a NaN or unwritten output must fail).
double worse(double a, double b) {
    return std::isnan(a) || std::isnan(b) ? NAN : fmax(a, b);
}

std::vector<float> fill_cache(void **kv, const Case &c, uint64_t seed, int f16) {
    Rng rng(seed);
    std::vector<float> h(kv_elems(c));
    for (auto &v : h) v = kv_round(rng.uniform(), f16);
    *kv = kv_upload(h, f16);
    return h;
}

// Positions past `last` of one stream's cache (layer 0, K and V) set to NaN: no result may read them.
void poison_after(void *kv, const Case &c, int last, int f16) {
    const size_t kvd = (size_t)c.Hkv * c.d, n = (size_t)(c.cap - 1 - last) * kvd;
    if (last + 1 >= c.cap) return;
    const std::vector<float> nan(n, NAN);
    for (int w = 0; w < 2; w++)
        kv_copy_in((char *)kv + ((size_t)w * c.cap + (size_t)last + 1) * kvd * kv_elem_bytes(f16), nan.data(),
                   n, f16);
}

double ref_check(const Case &c, const std::vector<float> &q, const std::vector<float> &cache,
                 const std::vector<float> &out, int r, int pos) {
    const int G = c.Hq / c.Hkv, kvd = c.Hkv * c.d;
    const double scale = 1.0 / sqrt((double)c.d);
    double worst = 0;
    std::vector<double> s(pos + 1);
    for (int h = 0; h < c.Hq; h++) {
        const int j = h / G;
        const float *qh = &q[((size_t)r * c.Hq + h) * c.d];
        double mx = -1e300;
        for (int t = 0; t <= pos; t++) {
            double acc = 0;
            for (int i = 0; i < c.d; i++) acc += (double)qh[i] * cache[(size_t)t * kvd + j * c.d + i];
            s[t] = acc * scale;
            mx = fmax(mx, s[t]);
        }
        double sum = 0;
        for (int t = 0; t <= pos; t++) sum += (s[t] = exp(s[t] - mx));
        for (int i = 0; i < c.d; i++) {
            double o = 0;
            for (int t = 0; t <= pos; t++) o += s[t] * cache[((size_t)c.cap + t) * kvd + j * c.d + i];
            o /= sum;
            worst = worse(worst, fabs(out[((size_t)r * c.Hq + h) * c.d + i] - o));
        }
    }
    return worst;
}

void run_case(const Case &c, const int *positions, int n_rows, int f16 = 0) {
    const int qd = c.Hq * c.d;
    void *kv[2];
    std::vector<float> cache0 = fill_cache(&kv[0], c, 1, f16), cache1 = fill_cache(&kv[1], c, 2, f16);
    for (int sidx = 0; sidx < 2; sidx++) {
        int last = -1;
        for (int r = sidx; r < n_rows; r += 2) last = std::max(last, positions[r]);
        poison_after(kv[sidx], c, last, f16);
    }
    Rng rng(3);
    std::vector<float> q((size_t)n_rows * qd);
    for (auto &v : q) v = rng.uniform() * 2.0f;
    std::vector<weft_cu_row> rows(n_rows);
    for (int r = 0; r < n_rows; r++) rows[r] = weft_cu_row{kv[r % 2], positions[r], 0, c.cap, 0};
    float *dq = dev_upload(q), *dout = nullptr;
    weft_cu_row *drows = dev_upload(rows);
    CK(cudaMalloc(&dout, q.size() * sizeof(float)));
    CK(cudaMemset(dout, 0xff, q.size() * sizeof(float)));
    float *scratch = nullptr;
    CK(cudaMalloc(&scratch, weft_cu_attention_scratch_floats(n_rows, c.Hq, c.d, c.cap) * sizeof(float)));
    int max_pos = 0;
    for (int r = 0; r < n_rows; r++) max_pos = std::max(max_pos, positions[r]);
    CK(weft_cu_attention(dq, dout, drows, n_rows, max_pos, c.Hq, c.Hkv, c.d, 0, 1.0f / sqrtf((float)c.d),
                         scratch, c.cap, f16, 0));
    std::vector<float> out = dev_download(dout, q.size());
    double worst = 0;
    for (int r = 0; r < n_rows; r++)
        worst = worse(worst, ref_check(c, q, r % 2 ? cache1 : cache0, out, r, positions[r]));
    const double tol = f16 ? 5e-3 : 1e-5; // f16 operands: 11-bit significands
    EXPECT(worst < tol, "attention %d/%d d=%d f16=%d: worst %.3g", c.Hq, c.Hkv, c.d, f16, worst);
    bool inv_ok = true;
    const size_t nscratch = weft_cu_attention_scratch_floats(n_rows, c.Hq, c.d, c.cap);
    for (int r = 0; r < n_rows;
         r++) { // each row alone, the scratch poisoned (no partial left from the batch)
        CK(cudaMemset(scratch, 0xff, nscratch * sizeof(float)));
        CK(weft_cu_attention(dq + (size_t)r * qd, dout, drows + r, 1, positions[r], c.Hq, c.Hkv, c.d, 0,
                             1.0f / sqrtf((float)c.d), scratch, c.cap, f16, 0));
        std::vector<float> one = dev_download(dout, qd);
        inv_ok &= !memcmp(one.data(), out.data() + (size_t)r * qd, qd * sizeof(float));
    }
    EXPECT(inv_ok, "attention %d/%d d=%d: a row alone differs from the batch", c.Hq, c.Hkv, c.d);
    printf("attention %2d/%d d=%-3d rows=%-3d %s worst=%.1e invariance=%s\n", c.Hq, c.Hkv, c.d, n_rows,
           f16 ? "f16 " : "fp32", worst, inv_ok ? "ok" : "FAIL");
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(drows);
    cudaFree(scratch);
    for (auto p : kv) cudaFree(p);
}

// Decode rows of distinct streams (each its own cache, as in a decode round: rows sharing one cache would
// read each other's K and V from L2).
void time_decode(const Case &c, int ctx, int n_rows, int f16 = 0) {
    const int qd = c.Hq * c.d;
    const size_t kvb = kv_elems(c) * kv_elem_bytes(f16);
    float *dq = nullptr, *dout = nullptr;
    std::vector<void *> kv(n_rows);
    std::vector<weft_cu_row> rows(n_rows);
    for (int r = 0; r < n_rows; r++) {
        CK(cudaMalloc(&kv[r], kvb));
        CK(cudaMemset(kv[r], 0x3c, kvb));
        rows[r] = weft_cu_row{kv[r], ctx - 1, 0, c.cap, 0};
    }
    CK(cudaMalloc(&dq, (size_t)n_rows * qd * 4));
    CK(cudaMemset(dq, 0x3c, (size_t)n_rows * qd * 4));
    CK(cudaMalloc(&dout, (size_t)n_rows * qd * 4));
    weft_cu_row *drows = dev_upload(rows);
    float *scratch = nullptr;
    CK(cudaMalloc(&scratch, weft_cu_attention_scratch_floats(n_rows, c.Hq, c.d, c.cap) * sizeof(float)));
    double t = time_ms([&] {
        weft_cu_attention(dq, dout, drows, n_rows, ctx - 1, c.Hq, c.Hkv, c.d, 0, 1.0f / sqrtf((float)c.d),
                          scratch, c.cap, f16, 0);
    });
    CK(cudaGetLastError());
    cudaFree(scratch);
    double bytes = 2.0 * ctx * c.Hkv * c.d * (double)kv_elem_bytes(f16) * n_rows;
    printf("attention decode %d/%d d=%d ctx=%-6d rows=%-3d %s %.3f ms  %.0f GB/s (KV bytes / time)\n", c.Hq,
           c.Hkv, c.d, ctx, n_rows, f16 ? "f16 " : "fp32", t, bytes / t / 1e6);
    for (void *p : kv) cudaFree(p);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(drows);
}

// The launch shapes the tile kernel is checked and timed in: {warps, span_group} (0: the default group; 1 <<
// 20: all spans). warps -8: the wgmma form (f16, d = 128, sm_90a), which must run where it applies.
const int kShapes[][2] = {{8, 0},  {4, 1},  {8, 1},  {4, 3},        {8, 2},  {8, 1 << 20}, {4, 1 << 20},
                          {-8, 0}, {-8, 1}, {-8, 3}, {-8, 1 << 20}, {-7, 0}, {-7, 1 << 20}};
int g_wg_ran = 0; // tile checks of the wgmma form that ran (main requires some where the device has sm_90a)
// The tile rows of a shape.
int shape_rows(const Case &c, int warps) {
    return 16 * (warps < 0 ? 8 : warps) / (c.Hq / c.Hkv);
}
// Whether the shape applies to the case (the wgmma form: f16, d = 128).
bool shape_applies(const Case &c, int warps, int f16) {
    return warps > 0 || (f16 && c.d == 128);
}

// Prefill rows: segments of consecutive positions in two streams' caches, grouped into query tiles, through
// weft_cu_attention_tiles in every launch shape of kShapes; each row must equal the per-row kernel's result
// bit for bit (and the fp64 reference on a sample of rows).
// q_scale: the queries' range (larger: peaked softmax, p values down to f16 subnormals and zeros); tol: the
// bound on the error against the fp64 reference (0: the mode's default).
void check_tiles(const Case &c, const std::vector<std::pair<int, int>> &segs, int f16 = 0,
                 float q_scale = 2.0f, double tol = 0) {
    const int qd = c.Hq * c.d;
    void *kv[2];
    std::vector<float> cache0 = fill_cache(&kv[0], c, 5, f16), cache1 = fill_cache(&kv[1], c, 6, f16);
    std::vector<weft_cu_row> rows;
    for (size_t si = 0; si < segs.size(); si++)
        for (int p = segs[si].first; p < segs[si].first + segs[si].second; p++)
            rows.push_back(weft_cu_row{kv[si % 2], p, 0, c.cap, 0});
    const int n = (int)rows.size();
    for (int sidx = 0; sidx < 2; sidx++) {
        int last = -1;
        for (size_t si = sidx; si < segs.size(); si += 2)
            last = std::max(last, segs[si].first + segs[si].second - 1);
        poison_after(kv[sidx], c, last, f16);
    }
    Rng rng(9);
    std::vector<float> q((size_t)n * qd);
    for (auto &v : q) v = rng.uniform() * q_scale;
    if (tol == 0) tol = f16 ? 5e-3 : 1e-5;
    float *dq = dev_upload(q), *da = nullptr, *db = nullptr, *scratch = nullptr;
    weft_cu_row *drows = dev_upload(rows);
    CK(cudaMalloc(&da, q.size() * sizeof(float)));
    CK(cudaMalloc(&db, q.size() * sizeof(float)));
    CK(cudaMalloc(&scratch, weft_cu_attention_scratch_floats(n, c.Hq, c.d, c.cap) * sizeof(float)));
    int max_pos = 0;
    for (auto &r : rows) max_pos = std::max(max_pos, r.pos);
    const float scale = 1.0f / sqrtf((float)c.d);
    CK(weft_cu_attention(dq, da, drows, n, max_pos, c.Hq, c.Hkv, c.d, 0, scale, scratch, c.cap, f16, 0));
    std::vector<float> a = dev_download(da, q.size());
    for (const auto &shape : kShapes) {
        if (!shape_applies(c, shape[0], f16)) continue;
        const int TR = shape_rows(c, shape[0]);
        std::vector<weft_cu_tile> tiles;
        for (size_t si = 0, r0 = 0; si < segs.size(); r0 += segs[si].second, si++)
            for (int r = 0; r < segs[si].second; r += TR)
                tiles.push_back(weft_cu_tile{(int)r0 + r, std::min(TR, segs[si].second - r)});
        weft_cu_tile *dt = dev_upload(tiles);
        CK(cudaMemset(db, 0xff, q.size() * sizeof(float)));
        // the scratch poisoned: the per-row kernel left the same partials there
        CK(cudaMemset(scratch, 0xff, weft_cu_attention_scratch_floats(n, c.Hq, c.d, c.cap) * sizeof(float)));
        const cudaError_t te =
            weft_cu_attention_tiles_shaped(dq, db, drows, n, max_pos, dt, (int)tiles.size(), c.Hq, c.Hkv, c.d,
                                           0, scale, scratch, c.cap, f16, shape[0], shape[1], 0);
        if (shape[0] < 0 && te == cudaErrorNotSupported) { // no sm_90a here: said, not counted as run
            printf("attention tiles %2d/%d d=%-3d warps=%d: not supported on this device/build\n", c.Hq,
                   c.Hkv, c.d, shape[0]);
            cudaFree(dt);
            continue;
        }
        CK(te);
        if (shape[0] < 0) g_wg_ran++;
        std::vector<float> b = dev_download(db, q.size());
        int bad_rows = 0;
        for (int r = 0; r < n; r++) bad_rows += memcmp(&a[(size_t)r * qd], &b[(size_t)r * qd], qd * 4) != 0;
        double worst = 0;
        for (int r = 0; r < n; r += std::max(1, n / 6))
            worst = worse(worst, ref_check(c, q, rows[r].kv == kv[0] ? cache0 : cache1, b, r, rows[r].pos));
        EXPECT(bad_rows == 0,
               "attention tiles %d/%d d=%d warps=%d group=%d: %d of %d rows differ from the per-row "
               "kernel",
               c.Hq, c.Hkv, c.d, shape[0], shape[1], bad_rows, n);
        EXPECT(worst < tol, "attention tiles %d/%d d=%d f16=%d: worst %.3g", c.Hq, c.Hkv, c.d, f16, worst);
        printf(
            "attention tiles %2d/%d d=%-3d rows=%-4d tiles=%-3d warps=%d group=%d %s worst=%.1e same bits as "
            "per-row: %s\n",
            c.Hq, c.Hkv, c.d, n, (int)tiles.size(), shape[0], shape[1], f16 ? "f16 " : "fp32", worst,
            bad_rows ? "FAIL" : "ok");
        cudaFree(dt);
    }
    cudaFree(dq);
    cudaFree(da);
    cudaFree(db);
    cudaFree(scratch);
    cudaFree(drows);
    for (auto p : kv) cudaFree(p);
}

// An n-row prefill chunk ending at position ctx - 1: per-row kernel (n <= 256) vs tiles in each launch shape.
// only_warps != 0: that launch shape alone (its default span group), for a profiler.
void time_prefill(const Case &c, int ctx, int f16 = 0, int n = 256, int only_warps = 0) {
    const int qd = c.Hq * c.d;
    void *kv = nullptr;
    float *dq = nullptr, *dout = nullptr, *scratch = nullptr;
    CK(cudaMalloc(&kv, kv_elems(c) * kv_elem_bytes(f16)));
    CK(cudaMemset(kv, 0x3c, kv_elems(c) * kv_elem_bytes(f16)));
    CK(cudaMalloc(&dq, (size_t)n * qd * 4));
    CK(cudaMemset(dq, 0x3c, (size_t)n * qd * 4));
    CK(cudaMalloc(&dout, (size_t)n * qd * 4));
    std::vector<weft_cu_row> rows(n);
    for (int r = 0; r < n; r++) rows[r] = weft_cu_row{kv, ctx - n + r, 0, c.cap, 0};
    weft_cu_row *drows = dev_upload(rows);
    CK(cudaMalloc(&scratch, weft_cu_attention_scratch_floats(n, c.Hq, c.d, c.cap) * sizeof(float)));
    const float scale = 1.0f / sqrtf((float)c.d);
    // FLOPs: per row and query head, 2·d per key for q·k and 2·d per key for p·v
    const double flop = 4.0 * c.d * c.Hq * ((double)n * ctx - (double)n * (n - 1) / 2);
    if (n <= 256 && only_warps == 0) {
        const double t0 = time_ms(
            [&] {
                weft_cu_attention(dq, dout, drows, n, ctx - 1, c.Hq, c.Hkv, c.d, 0, scale, scratch, c.cap,
                                  f16, 0);
            },
            1, 5);
        printf("attention prefill %d/%d d=%d %4d rows ending at %-6d %s per-row %.3f ms (%.1f TFLOP/s)\n",
               c.Hq, c.Hkv, c.d, n, ctx, f16 ? "f16 " : "fp32", t0, flop / t0 / 1e9);
    }
    for (const auto &shape : kShapes) {
        if (!shape_applies(c, shape[0], f16) || (only_warps && (shape[0] != only_warps || shape[1] != 0)))
            continue;
        const int TR = shape_rows(c, shape[0]);
        std::vector<weft_cu_tile> tiles;
        for (int r = 0; r < n; r += TR) tiles.push_back(weft_cu_tile{r, std::min(TR, n - r)});
        weft_cu_tile *dt = dev_upload(tiles);
        if (weft_cu_attention_tiles_shaped(dq, dout, drows, n, ctx - 1, dt, (int)tiles.size(), c.Hq, c.Hkv,
                                           c.d, 0, scale, scratch, c.cap, f16, shape[0], shape[1],
                                           0) == cudaErrorNotSupported) {
            cudaFree(dt);
            continue; // (check_tiles said so)
        }
        const double t1 = time_ms(
            [&] {
                weft_cu_attention_tiles_shaped(dq, dout, drows, n, ctx - 1, dt, (int)tiles.size(), c.Hq,
                                               c.Hkv, c.d, 0, scale, scratch, c.cap, f16, shape[0], shape[1],
                                               0);
            },
            1, 5);
        CK(cudaGetLastError());
        printf(
            "attention prefill %d/%d d=%d %4d rows ending at %-6d %s tiles warps=%d group=%d %.3f ms (%.1f "
            "TFLOP/s)\n",
            c.Hq, c.Hkv, c.d, n, ctx, f16 ? "f16 " : "fp32", shape[0], shape[1], t1, flop / t1 / 1e9);
        cudaFree(dt);
    }
    cudaFree(kv);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(scratch);
    cudaFree(drows);
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "prefill")) { // timings for the profiler: prefill ending at argv[2]
        const int ctx = atoi(argv[2]), f16 = argc > 3 ? atoi(argv[3]) : 0, n = argc > 4 ? atoi(argv[4]) : 256,
                  warps = argc > 5 ? atoi(argv[5]) : 0; // [f16 0/1] [rows] [warps: that shape alone]
        time_prefill(Case{32, 8, 128, ctx > 8192 ? ctx : 8192}, ctx, f16, n, warps);
        return report("bench_cuda_attention");
    }
    const int small[] = {0, 1, 31, 32, 33, 62, 63, 5};
    run_case(Case{4, 2, 16, 64}, small, 8);
    const int mid[] = {0, 100, 1023, 1024, 1025, 2047, 3000, 4095};
    run_case(Case{32, 8, 128, 4096}, mid, 8);
    run_case(Case{64, 8, 128, 2048}, mid, 4);
    run_case(Case{8, 2, 256, 2048}, mid, 6);  // head dim 256 (the decode kernel only)
    run_case(Case{40, 8, 128, 4096}, mid, 8); // 5 heads per kv head: padded m-tile rows
    const int mid1k[] = {0, 100, 255, 256, 511, 700, 1000, 1023};
    run_case(Case{24, 8, 96, 1024}, mid1k, 8);  // head dim 96, 3 heads per kv head
    run_case(Case{6, 2, 48, 1024}, mid1k, 8);   // head dim 48
    run_case(Case{10, 2, 160, 1024}, mid1k, 8); // head dim 160 (the decode kernel only), 5 heads per kv head
    check_tiles(Case{4, 2, 16, 64}, {{0, 40}, {0, 64}, {10, 5}});
    check_tiles(Case{4, 2, 32, 128}, {{0, 48}, {60, 68}});
    check_tiles(Case{32, 8, 128, 4096}, {{0, 40}, {230, 60}, {1000, 64}, {4060, 36}, {2040, 17}});
    check_tiles(Case{64, 8, 128, 2048}, {{250, 20}, {1020, 9}});
    check_tiles(Case{8, 8, 64, 1024}, {{500, 70}, {0, 3}});
    check_tiles(Case{40, 8, 128, 1024}, {{0, 100}, {700, 33}}); // 5 heads per kv head: padded m-tile rows
    check_tiles(Case{16, 1, 64, 512}, {{0, 9}, {300, 40}});     // 16 heads per kv head
    check_tiles(Case{24, 8, 96, 1024}, {{0, 70}, {250, 30}, {600, 21}}); // head dim 96, 3 heads per kv head
    check_tiles(Case{6, 2, 48, 1024}, {{200, 90}, {0, 5}});              // head dim 48
    check_tiles(Case{4, 2, 32, 1024}, {{200, 90}, {0, 5}}); // head dim 32 past one span (session 27 review)
    check_tiles(Case{14, 2, 64, 1024}, {{240, 40}, {500, 13}}); // 7 heads per kv head
    // 35 tiles x 8 kv heads >= 256 pairs: the default shape folds the spans in the block (rows of 10 spans)
    check_tiles(Case{32, 8, 128, 4096}, {{0, 600}, {2000, 500}});
    // f16 operands (--activations f16): tiles == per-row kernel bit for bit, rows alone == the batch
    run_case(Case{4, 2, 16, 64}, small, 8, 1);
    run_case(Case{32, 8, 128, 4096}, mid, 8, 1);
    run_case(Case{8, 2, 256, 2048}, mid, 6, 1);
    run_case(Case{40, 8, 128, 4096}, mid, 8, 1);
    check_tiles(Case{4, 2, 16, 64}, {{0, 40}, {0, 64}, {10, 5}}, 1);
    check_tiles(Case{32, 8, 128, 4096}, {{0, 40}, {230, 60}, {1000, 64}, {4060, 36}, {2040, 17}}, 1);
    check_tiles(Case{40, 8, 128, 1024}, {{0, 100}, {700, 33}}, 1);
    check_tiles(Case{24, 8, 96, 1024}, {{0, 70}, {250, 30}, {600, 21}}, 1);
    // f16 caches at the other head dims (review gap F3 of session 16; added in session 17, first run in 18)
    run_case(Case{24, 8, 96, 1024}, mid1k, 8, 1);
    run_case(Case{6, 2, 48, 1024}, mid1k, 8, 1);
    run_case(Case{10, 2, 80, 1024}, mid1k, 8, 1);
    run_case(Case{10, 2, 160, 1024}, mid1k, 8, 1);
    run_case(Case{10, 2, 80, 1024}, mid1k, 8); // head dim 80 in fp32 mode too
    check_tiles(Case{6, 2, 48, 1024}, {{200, 90}, {0, 5}}, 1);
    check_tiles(Case{4, 2, 32, 1024}, {{200, 90}, {0, 5}}, 1);
    check_tiles(Case{10, 2, 80, 1024}, {{0, 70}, {300, 41}}, 1);
    check_tiles(Case{10, 2, 80, 1024}, {{0, 70}, {300, 41}});
    check_tiles(Case{14, 2, 64, 1024}, {{240, 40}, {500, 13}}, 1);
    // the wgmma form's cases (f16, d = 128): 8 and 16 heads per kv head, spans folded in the block
    check_tiles(Case{64, 8, 128, 2048}, {{250, 20}, {1020, 9}}, 1);
    // One head per kv head (128-row tiles): a warp whose rows end inside a span skips that span's last block
    // (and its span reset) while the tile's later warps go on into the next span (session 26 review).
    check_tiles(Case{8, 8, 64, 1024}, {{400, 128}}, 1);
    check_tiles(Case{8, 8, 128, 1024}, {{400, 128}}, 1);
    check_tiles(Case{16, 1, 128, 1024}, {{0, 9}, {300, 40}, {511, 1}}, 1);
    check_tiles(Case{32, 8, 128, 4096}, {{0, 600}, {2000, 500}}, 1);
    for (int G : {1, 2, 3, 6, 7}) // the other heads per kv head (review of session 19)
        check_tiles(Case{8 * G, 8, 128, 1024}, {{0, 70}, {300, 41}, {900, 3}}, 1);
    // peaked softmax (queries 16x larger): p down to f16 subnormals and zeros; the fp64 bound loosened to
    // what 11-bit scores allow (a NaN or an unwritten row still fails), the bits still == the per-row kernel
    check_tiles(Case{32, 8, 128, 4096}, {{0, 300}, {2000, 260}}, 1, 32.0f, 0.5);
    {
        int major = 0, minor = 0;
        CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
        EXPECT(!(major == 9 && minor == 0) || g_wg_ran > 0,
               "attention tiles: the wgmma form never ran on a compute capability 9.0 device");
        printf("attention tiles: the wgmma form ran in %d checks\n", g_wg_ran);
    }
    for (int f16 = 0; f16 < 2; f16++) {
        for (int ctx : {512, 2048, 8192}) time_prefill(Case{32, 8, 128, 8192}, ctx, f16);
        time_prefill(Case{32, 8, 128, 8192}, 8192, f16, 2048); // the model's 2,048-row chunks at 8k
        time_prefill(Case{32, 8, 128, 32768}, 32768, f16, 2048);
        for (int ctx : {512, 4096, 32768}) time_decode(Case{32, 8, 128, 32768}, ctx, 1, f16);
        for (int rows : {16, 64}) time_decode(Case{32, 8, 128, 1024}, 600, rows, f16);
    }
    return report("bench_cuda_attention");
}
