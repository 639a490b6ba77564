// weft_cu_rmsnorm, weft_cu_rope_store and weft_cu_swiglu: CPU references (the CPU backend's formulas),
// checks, row invariance (a row alone == the same row among others, bit for bit) and timing.
#include "common.cuh"
#include "cuda_kernels.h"

namespace {

void check_rmsnorm(int n, int rows) {
    Rng rng(11);
    std::vector<float> x((size_t)rows * n), w(n);
    for (auto &v : x) v = rng.uniform() * 3.0f;
    for (auto &v : w) v = 1.0f + 0.1f * rng.uniform();
    float *dx = dev_upload(x), *dw = dev_upload(w), *dy = nullptr;
    CK(cudaMalloc(&dy, x.size() * sizeof(float)));
    CK(weft_cu_rmsnorm(dy, n, dx, n, nullptr, dw, rows, n, 1e-5f, 0));
    std::vector<float> y = dev_download(dy, x.size());
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[(size_t)r * n + i] * x[(size_t)r * n + i];
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        for (int i = 0; i < n; i++) {
            double ref = w[i] * (x[(size_t)r * n + i] * inv), d = fabs(y[(size_t)r * n + i] - ref);
            worst = fmax(worst, d / fmax(1.0, fabs(ref)));
        }
    }
    EXPECT(worst < 1e-5, "rmsnorm n=%d: worst %.3g", n, worst);
    // the last row alone, through a row map, must give the same bits
    const int pick = rows - 1;
    std::vector<int> map = {pick};
    int *dmap = dev_upload(map);
    CK(weft_cu_rmsnorm(dy, n, dx, n, dmap, dw, 1, n, 1e-5f, 0));
    std::vector<float> y5 = dev_download(dy, n);
    bool inv_ok = !memcmp(y5.data(), y.data() + (size_t)pick * n, n * sizeof(float));
    EXPECT(inv_ok, "rmsnorm n=%d: a mapped row differs", n);
    double t = time_ms([&] { weft_cu_rmsnorm(dy, n, dx, n, nullptr, dw, rows, n, 1e-5f, 0); });
    printf("rmsnorm  n=%-6d rows=%-5d worst=%.1e invariance=%s  %.4f ms  %.0f GB/s\n", n, rows, worst,
           inv_ok ? "ok" : "FAIL", t, 2.0 * x.size() * 4 / t / 1e6);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    cudaFree(dmap);
}

// f16: an f16 cache (weft_cu_row): the cache's K and V words == the f16 words of the rotated k (as left in
// place) and of v, bit for bit, with values past 65504 in v (saturated, not infinite).
void check_rope(int Hq, int Hkv, int d, int rows, int cap, bool adjacent, int f16 = 0) {
    Rng rng(13);
    const int qd = Hq * d, kvd = Hkv * d, rot = d, half = rot / 2, L = 2, layer = 1;
    std::vector<float> q((size_t)rows * qd), k((size_t)rows * kvd), v((size_t)rows * kvd), inv(half);
    for (auto &x : q) x = rng.uniform();
    for (auto &x : k) x = rng.uniform();
    for (auto &x : v) x = rng.uniform();
    if (f16) v[1] = 1e5f, v[2] = -7e4f, v[3] = 65519.0f; // saturated / saturated / rounds to 65504
    for (int i = 0; i < half; i++) inv[i] = (float)(1.0 / pow(500000.0, (double)(2 * i) / rot));
    float *dq = dev_upload(q), *dk = dev_upload(k), *dv = dev_upload(v), *dinv = dev_upload(inv);
    const size_t nkv = (size_t)L * 2 * cap * kvd;
    void *kv = kv_upload(std::vector<float>(nkv, 0.0f), f16);
    std::vector<weft_cu_row> rw(rows);
    for (int r = 0; r < rows; r++) rw[r] = weft_cu_row{kv, (r * 37) % cap, 0, cap, 0};
    weft_cu_row *drows = dev_upload(rw);
    weft_cu_rope rope{rot, adjacent ? 1 : 0, 1.0f, dinv};
    CK(weft_cu_rope_store(dq, dk, dv, drows, rows, Hq, Hkv, d, layer, &rope, f16, 0));
    std::vector<float> gq = dev_download(dq, q.size()), gk = dev_download(dk, k.size());
    std::vector<float> cache = kv_values(kv, nkv, f16);
    double worst = 0;
    bool store_ok = true;
    for (int r = 0; r < rows; r++) {
        const int pos = rw[r].pos;
        for (int h = 0; h < Hq + Hkv; h++) {
            const float *src = h < Hq ? &q[(size_t)r * qd + h * d] : &k[(size_t)r * kvd + (h - Hq) * d];
            for (int i = 0; i < half; i++) {
                double ang = (double)(float)((float)pos * inv[i]), c = cos(ang), s = sin(ang);
                int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
                double ra = src[a] * c - src[b] * s, rb = src[b] * c + src[a] * s;
                const float *got = h < Hq ? &gq[(size_t)r * qd + h * d]
                                          : &cache[((size_t)(2 * layer) * cap + pos) * kvd + (h - Hq) * d];
                worst = fmax(worst, fmax(fabs(got[a] - ra), fabs(got[b] - rb)));
            }
        }
        for (int i = 0; i < kvd; i++) {
            const float want = kv_round(v[(size_t)r * kvd + i], f16),
                        want_k = kv_round(gk[(size_t)r * kvd + i], f16);
            store_ok &= !memcmp(&cache[((size_t)(2 * layer + 1) * cap + pos) * kvd + i], &want, 4);
            store_ok &= !memcmp(&cache[((size_t)(2 * layer) * cap + pos) * kvd + i], &want_k, 4);
        }
    }
    // f16: |x| < 2 here, so an f16 word is within 2^-11 of the rotated value
    EXPECT(worst < (f16 ? 1e-3 : 2e-5 * (1 + cap / 1000.0)), "rope: worst %.3g", worst);
    EXPECT(store_ok, "rope: K or V rows not stored as the rotated k / v (f16 %d)", f16);
    double t =
        time_ms([&] { weft_cu_rope_store(dq, dk, dv, drows, rows, Hq, Hkv, d, layer, &rope, f16, 0); });
    printf("rope     %d/%d heads d=%d rows=%-4d %s %s worst=%.1e store=%s  %.4f ms\n", Hq, Hkv, d, rows,
           adjacent ? "adjacent" : "halves  ", f16 ? "f16 cache " : "fp32 cache", worst,
           store_ok ? "ok" : "FAIL", t);
    for (float *p : {dq, dk, dv, dinv}) cudaFree(p);
    cudaFree(kv);
    cudaFree(drows);
}

void check_swiglu(int64_t n) {
    Rng rng(17);
    std::vector<float> g(n), u(n);
    for (auto &x : g) x = rng.uniform() * 6.0f;
    for (auto &x : u) x = rng.uniform();
    float *dg = dev_upload(g), *du = dev_upload(u);
    CK(weft_cu_swiglu(dg, du, n, 0));
    std::vector<float> y = dev_download(dg, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        worst = fmax(worst, fabs(y[i] - ref) / fmax(1.0, fabs(ref)));
    }
    EXPECT(worst < 1e-6, "swiglu: worst %.3g", worst);
    CK(cudaMemcpy(dg, g.data(), n * 4, cudaMemcpyHostToDevice));
    double t = time_ms([&] { weft_cu_swiglu(dg, du, n, 0); });
    printf("swiglu   n=%-9lld worst=%.1e  %.4f ms  %.0f GB/s\n", (long long)n, worst, t,
           3.0 * n * 4 / t / 1e6);
    cudaFree(dg);
    cudaFree(du);
}

// weft_cu_argmax against weft_sample's greedy scan (src/core/sampler.c): NaN -> -inf, strict > in id order.
int cpu_argmax(const float *z, int64_t V) {
    int best = 0;
    float zb = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        float v = z[i];
        if (isnan(v)) v = -INFINITY;
        if (v > zb) {
            zb = v;
            best = (int)i;
        }
    }
    return best;
}

void check_argmax(int64_t V, int rows) {
    Rng rng(23);
    std::vector<float> z((size_t)rows * V);
    for (auto &v : z) v = rng.uniform() * 8.0f;
    for (int r = 0; r < rows; r++) {
        float *zr = z.data() + (size_t)r * V;
        switch (r % 8) {
        case 1: // ties: the max at several ids, the lowest must win
            for (int k = 0; k < 5; k++) zr[(rng.next() % V)] = 9.0f;
            break;
        case 2: // NaNs everywhere around a max
            for (int k = 0; k < 100; k++) zr[(rng.next() % V)] = NAN;
            zr[V - 1] = 8.5f;
            break;
        case 3: // all -inf / NaN: id 0
            for (int64_t i = 0; i < V; i++) zr[i] = i % 3 ? -INFINITY : NAN;
            break;
        case 4: // max is zero of both signs
            for (int64_t i = 0; i < V; i++) zr[i] = -fabsf(zr[i]) - 1.0f;
            zr[V / 2] = 0.0f;
            zr[V / 3] = -0.0f;
            break;
        case 5: // +inf twice
            zr[V - 2] = INFINITY;
            zr[V - 5] = INFINITY;
            break;
        default:
            break;
        }
    }
    std::vector<int> sel(rows);
    for (int r = 0; r < rows; r++) sel[r] = rows - 1 - r; // reversed: the selection is honoured
    float *dz = dev_upload(z);
    int *dsel = dev_upload(sel);
    int32_t *dids = nullptr;
    CK(cudaMalloc(&dids, rows * sizeof(int32_t)));
    CK(weft_cu_argmax(dz, V, dsel, rows, dids, 0));
    CK(cudaDeviceSynchronize());
    std::vector<int32_t> ids = dev_download(dids, rows);
    int bad = 0;
    for (int r = 0; r < rows; r++) bad += ids[r] != cpu_argmax(z.data() + (size_t)sel[r] * V, V);
    EXPECT(bad == 0, "argmax V=%lld: %d of %d rows differ from the CPU greedy draw", (long long)V, bad, rows);
    double t = time_ms([&] { weft_cu_argmax(dz, V, dsel, rows, dids, 0); });
    printf("argmax   V=%-7lld rows=%-3d %s  %.4f ms  %.0f GB/s\n", (long long)V, rows, bad ? "FAIL" : "ok", t,
           (double)rows * V * 4 / t / 1e6);
    cudaFree(dz);
    cudaFree(dsel);
    cudaFree(dids);
}

// weft_cu_rmsnorm_xq == weft_cu_rmsnorm (Y) and == weft_cu_xq_prep of that Y (the prepared words and sums),
// bit for bit, with and without a row map, and with Y NULL (the prepared rows only); off > 0 starts X and Y
// off floats past a 16-byte boundary (the kernel's scalar path); f16: an f16 buffer. Timing of the fused
// norm against norm + prep, and without Y.
void check_rmsnorm_xq(int n, int rows, int off = 0, int f16 = 0) {
    Rng rng(17);
    std::vector<float> x((size_t)rows * n), w(n);
    for (auto &v : x) v = rng.uniform() * 3.0f;
    for (auto &v : w) v = 1.0f + 0.1f * rng.uniform();
    std::vector<float> xo((size_t)off, 0.0f);
    xo.insert(xo.end(), x.begin(), x.end());
    float *dxo = dev_upload(xo), *dx = dxo + off, *dw = dev_upload(w), *dy = nullptr, *dyo = nullptr;
    CK(cudaMalloc(&dy, x.size() * sizeof(float)));
    CK(cudaMalloc(&dyo, (x.size() + off) * sizeof(float)));
    float *dy2 = dyo + off;
    weft_cu_xq a{nullptr, nullptr, n, f16}, b{nullptr, nullptr, n, f16}, c{nullptr, nullptr, n, f16};
    for (weft_cu_xq *q : {&a, &b, &c}) {
        CK(cudaMalloc(&q->f, (size_t)rows * n * sizeof(uint32_t)));
        CK(cudaMalloc(&q->s, (size_t)rows * (n / 32) * sizeof(float)));
        CK(cudaMemset(q->f, 0xff, (size_t)rows * n * sizeof(uint32_t)));
    }
    std::vector<int> map(rows);
    for (int r = 0; r < rows; r++) map[r] = rows - 1 - r;
    int *dmap = dev_upload(map);
    bool ok = true;
    for (int use_map = 0; use_map < 2; use_map++) {
        const int *m = use_map ? dmap : nullptr;
        CK(weft_cu_rmsnorm(dy, n, dx, n, m, dw, rows, n, 1e-5f, 0));
        CK(weft_cu_xq_prep(dy, n, rows, &b, 0));
        CK(weft_cu_rmsnorm_xq(dy2, n, dx, n, m, dw, rows, n, 1e-5f, &a, 0));
        CK(cudaMemset(c.f, 0xff, (size_t)rows * n * sizeof(uint32_t)));
        CK(weft_cu_rmsnorm_xq(nullptr, n, dx, n, m, dw, rows, n, 1e-5f, &c, 0));
        ok &= dev_download(dy, x.size()) == dev_download(dy2, x.size());
        ok &= dev_download(a.f, (size_t)rows * n) == dev_download(b.f, (size_t)rows * n);
        ok &= dev_download(c.f, (size_t)rows * n) == dev_download(b.f, (size_t)rows * n);
        std::vector<float> sa = dev_download(a.s, (size_t)rows * (n / 32)), sb = dev_download(b.s, sa.size()),
                           sc = dev_download(c.s, sa.size());
        ok &= !memcmp(sa.data(), sb.data(), sa.size() * sizeof(float));
        ok &= !memcmp(sc.data(), sb.data(), sa.size() * sizeof(float));
    }
    EXPECT(ok, "rmsnorm_xq n=%d rows=%d off=%d f16=%d: differs from rmsnorm + prep", n, rows, off, f16);
    const double t0 = time_ms([&] {
        weft_cu_rmsnorm(dy, n, dx, n, nullptr, dw, rows, n, 1e-5f, 0);
        weft_cu_xq_prep(dy, n, rows, &b, 0);
    });
    const double t1 = time_ms([&] { weft_cu_rmsnorm_xq(dy2, n, dx, n, nullptr, dw, rows, n, 1e-5f, &a, 0); });
    const double t2 =
        time_ms([&] { weft_cu_rmsnorm_xq(nullptr, n, dx, n, nullptr, dw, rows, n, 1e-5f, &c, 0); });
    printf("rmsnorm_xq n=%-5d rows=%-4d off=%d f16=%d same bits as norm + prep: %s  norm+prep %.4f ms, fused "
           "%.4f ms, without Y %.4f ms\n",
           n, rows, off, f16, ok ? "ok" : "FAIL", t0, t1, t2);
    for (weft_cu_xq *q : {&a, &b, &c}) {
        cudaFree(q->f);
        cudaFree(q->s);
    }
    cudaFree(dxo);
    cudaFree(dw);
    cudaFree(dy);
    cudaFree(dyo);
    cudaFree(dmap);
}

} // namespace

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    check_argmax(512, 16);
    check_argmax(1000, 9);
    check_argmax(1003, 8); // V % 4 != 0: the scalar scan
    check_argmax(151936, 3);
    check_argmax(128256, 1);
    check_argmax(128256, 64);
    check_rmsnorm(64, 7);
    check_rmsnorm(128, 33);
    check_rmsnorm(4096, 1);
    check_rmsnorm(4096, 256);
    check_rmsnorm_xq(64, 7);
    check_rmsnorm_xq(96, 5);
    check_rmsnorm_xq(4096, 1);
    check_rmsnorm_xq(4096, 256);
    check_rmsnorm_xq(96, 5, 1);      // rows off a 16-byte boundary: the scalar path
    check_rmsnorm_xq(4096, 3, 2, 1); // (f16 buffer)
    check_rmsnorm_xq(4096, 2048);    // a prefill chunk's norm
    check_rmsnorm_xq(4096, 2048, 0, 1);
    check_rope(4, 2, 16, 9, 64, true);
    check_rope(32, 8, 128, 1, 4096, false);
    check_rope(32, 8, 128, 256, 4096, false);
    check_rope(4, 2, 16, 9, 64, true, 1); // f16 caches (--activations f16)
    check_rope(32, 8, 128, 256, 4096, false, 1);
    check_swiglu(14336);
    check_swiglu(14336LL * 256);
    return report("bench_cuda_ops");
}
