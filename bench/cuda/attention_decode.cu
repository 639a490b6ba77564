// weft_cu_attention_decode (the batch-1 attention stage in one kernel) against the separate kernels it
// replaces — weft_cu_rope_store, weft_cu_attention, weft_cu_xq_prep — bit for bit: the attention output, the
// cache entries it stores, the prepared words and sums, the inputs left unchanged, a second launch (the
// arrival counters back at zero) identical; the refusals; then the time of both at the 8B shape.
#include "common.cuh"
#include "cuda_kernels.h"

namespace {

struct Case {
    int Hq, Hkv, d, cap, rot, adjacent;
};

struct Bufs {
    float *kv = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *scratch = nullptr;
    uint32_t *xf = nullptr;
    float *xs = nullptr;
    weft_cu_row *rows = nullptr;
    void release() {
        for (float *p : {kv, q, k, v, out, scratch, xs}) cudaFree(p);
        cudaFree(xf);
        cudaFree(rows);
    }
};

size_t kv_floats(const Case &c) {
    return (size_t)2 * c.cap * c.Hkv * c.d;
}

// One path's buffers: the same cache (positions from pos on set to NaN: each path must write pos before
// reading it and never read past it) and the same q, k, v rows.
Bufs make_bufs(const Case &c, int pos, const std::vector<float> &cache, const std::vector<float> &qkv) {
    Bufs b;
    const int qd = c.Hq * c.d, kvd = c.Hkv * c.d;
    std::vector<float> h = cache;
    for (int w = 0; w < 2; w++)
        for (size_t i = ((size_t)w * c.cap + pos) * kvd; i < ((size_t)w + 1) * c.cap * kvd; i++) h[i] = NAN;
    b.kv = dev_upload(h);
    b.q = dev_upload(std::vector<float>(qkv.begin(), qkv.begin() + qd));
    b.k = dev_upload(std::vector<float>(qkv.begin() + qd, qkv.begin() + qd + kvd));
    b.v = dev_upload(std::vector<float>(qkv.begin() + qd + kvd, qkv.end()));
    CK(cudaMalloc(&b.out, (size_t)qd * 4));
    CK(cudaMemset(b.out, 0xff, (size_t)qd * 4));
    CK(cudaMalloc(&b.xf, (size_t)qd * 4));
    CK(cudaMemset(b.xf, 0xff, (size_t)qd * 4));
    CK(cudaMalloc(&b.xs, (size_t)qd / 32 * 4));
    CK(cudaMemset(b.xs, 0xff, (size_t)qd / 32 * 4));
    CK(cudaMalloc(&b.scratch, weft_cu_attention_scratch_floats(1, c.Hq, c.d, c.cap) * sizeof(float)));
    b.rows = dev_upload(std::vector<weft_cu_row>{weft_cu_row{b.kv, pos, 0, c.cap, 0}});
    return b;
}

template <class T> bool same_bits(const T *a, const T *b, size_t n, size_t *first) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(T))) {
            *first = i;
            return false;
        }
    return true;
}

weft_cu_rope make_rope(const Case &c, float **dfreq) {
    std::vector<float> f(c.rot / 2 > 0 ? c.rot / 2 : 1);
    for (int i = 0; i < c.rot / 2; i++) f[i] = (float)pow(10000.0, -2.0 * i / c.rot);
    *dfreq = dev_upload(f);
    return weft_cu_rope{c.rot, c.adjacent, 1.0f, *dfreq};
}

// The separate kernels (A) and the one kernel (B) from the same inputs at position pos; with_xq: the
// prepared words too; qk_norm: per-head q and k norms first (qwen3: weft_cu_rmsnorm in place for A).
void check_case(const Case &c, int pos, bool with_xq, bool qk_norm = false) {
    const int qd = c.Hq * c.d, kvd = c.Hkv * c.d, nsub = qd / 32;
    const float scale = 1.0f / sqrtf((float)c.d);
    Rng rng(7 + pos);
    std::vector<float> cache(kv_floats(c)), qkv((size_t)qd + 2 * kvd);
    for (auto &x : cache) x = rng.uniform();
    for (auto &x : qkv) x = 2.0f * rng.uniform();
    float *dfreq = nullptr;
    const weft_cu_rope rope = make_rope(c, &dfreq);
    Bufs A = make_bufs(c, pos, cache, qkv), B = make_bufs(c, pos, cache, qkv);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    CK(cudaMemset(counters, 0, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    const weft_cu_xq xa{A.xf, A.xs, qd}, xb{B.xf, B.xs, qd};
    std::vector<float> nq(c.d), nk(c.d);
    for (auto &x : nq) x = 0.5f + rng.uniform();
    for (auto &x : nk) x = 0.5f + rng.uniform();
    float *dnq = dev_upload(nq), *dnk = dev_upload(nk);
    const float eps = 1e-6f, *qn = qk_norm ? dnq : nullptr, *kn = qk_norm ? dnk : nullptr;
    if (qk_norm) {
        CK(weft_cu_rmsnorm(A.q, c.d, A.q, c.d, nullptr, dnq, c.Hq, c.d, eps, 0));
        CK(weft_cu_rmsnorm(A.k, c.d, A.k, c.d, nullptr, dnk, c.Hkv, c.d, eps, 0));
    }
    CK(weft_cu_rope_store(A.q, A.k, A.v, A.rows, 1, c.Hq, c.Hkv, c.d, 0, &rope, 0));
    CK(weft_cu_attention(A.q, A.out, A.rows, 1, pos, c.Hq, c.Hkv, c.d, 0, scale, A.scratch, c.cap, 0));
    CK(weft_cu_xq_prep(A.out, qd, 1, &xa, 0));
    std::vector<float> out1, kv1;
    std::vector<uint32_t> xf1;
    std::vector<float> xs1;
    for (int rep = 0; rep < 2; rep++) { // the second launch must find the counters at zero
        CK(weft_cu_attention_decode(B.q, B.k, B.v, B.out, with_xq ? &xb : nullptr, B.rows, pos, c.Hq, c.Hkv,
                                    c.d, 0, scale, &rope, qn, kn, eps, B.scratch, c.cap, counters, 0));
        CK(cudaDeviceSynchronize());
        if (rep == 0) {
            out1 = dev_download(B.out, qd);
            kv1 = dev_download(B.kv, kv_floats(c));
            xf1 = dev_download(B.xf, (size_t)qd);
            xs1 = dev_download(B.xs, (size_t)nsub);
            // the second launch must not lean on the first one's records: scratch poisoned in between
            CK(cudaMemset(B.scratch, 0xff,
                          weft_cu_attention_scratch_floats(1, c.Hq, c.d, c.cap) * sizeof(float)));
        }
    }
    const std::vector<float> oa = dev_download(A.out, qd), ob = dev_download(B.out, qd);
    const std::vector<float> ka = dev_download(A.kv, kv_floats(c)), kb = dev_download(B.kv, kv_floats(c));
    const std::vector<float> qb = dev_download(B.q, qd), kb_in = dev_download(B.k, kvd),
                             vb_in = dev_download(B.v, kvd);
    const std::vector<int> cnt = dev_download(counters, (size_t)weft_cu_attention_decode_counters(c.Hkv));
    size_t i = 0;
    char what[96];
    snprintf(what, sizeof what, "decode %d/%d d=%d rot=%d%s pos=%d%s%s", c.Hq, c.Hkv, c.d, c.rot,
             c.adjacent ? " adjacent" : "", pos, with_xq ? " +xq" : "", qk_norm ? " +qk norms" : "");
    EXPECT(same_bits(oa.data(), ob.data(), (size_t)qd, &i), "%s: output %zu: %a vs %a", what, i, oa[i],
           ob[i]);
    EXPECT(same_bits(ka.data(), kb.data(), ka.size(), &i), "%s: cache float %zu: %a vs %a", what, i, ka[i],
           kb[i]);
    EXPECT(same_bits(out1.data(), ob.data(), (size_t)qd, &i) &&
               same_bits(kv1.data(), kb.data(), kv1.size(), &i),
           "%s: the second launch differs at %zu", what, i);
    EXPECT(same_bits(qb.data(), qkv.data(), (size_t)qd, &i) &&
               same_bits(kb_in.data(), qkv.data() + qd, kvd, &i) &&
               same_bits(vb_in.data(), qkv.data() + qd + kvd, kvd, &i),
           "%s: a q, k or v input changed at %zu", what, i);
    bool zero = true;
    for (int x : cnt) zero = zero && x == 0;
    EXPECT(zero, "%s: counters not back at zero", what);
    if (with_xq) {
        const std::vector<uint32_t> fa = dev_download(A.xf, (size_t)qd), fb = dev_download(B.xf, (size_t)qd);
        const std::vector<float> sa = dev_download(A.xs, (size_t)nsub), sb = dev_download(B.xs, (size_t)nsub);
        EXPECT(same_bits(fa.data(), fb.data(), fa.size(), &i), "%s: prepared word %zu: %08x vs %08x", what, i,
               fa[i], fb[i]);
        EXPECT(same_bits(sa.data(), sb.data(), sa.size(), &i), "%s: prepared sum %zu", what, i);
        EXPECT(same_bits(xf1.data(), fb.data(), fb.size(), &i), "%s: the second launch's words differ", what);
    }
    printf("%-48s same bits as rope_store + attention%s: %s\n", what, with_xq ? " + prep" : "",
           g_failures ? "FAILED so far" : "ok");
    A.release();
    B.release();
    cudaFree(counters);
    cudaFree(dfreq);
    cudaFree(dnq);
    cudaFree(dnk);
}

// The refusals: more key blocks than the scratch floor, xq with a head group not a multiple of 32 wide,
// bad arguments — none may launch anything.
void check_refusals() {
    const Case c{6, 2, 48, 8192, 48, 0};
    float *dfreq = nullptr;
    const weft_cu_rope rope = make_rope(c, &dfreq);
    const std::vector<float> cache(kv_floats(c), 0.5f), qkv((size_t)(c.Hq + 2 * c.Hkv) * c.d, 0.25f);
    Bufs B = make_bufs(c, 10, cache, qkv);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    CK(cudaMemset(counters, 0, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    const weft_cu_xq xb{B.xf, B.xs, (int64_t)c.Hq * c.d};
    const float s = 0.125f;
    EXPECT(weft_cu_attention_decode(B.q, B.k, B.v, B.out, nullptr, B.rows, 2048, c.Hq, c.Hkv, c.d, 0, s,
                                    &rope, nullptr, nullptr, 0.0f, B.scratch, c.cap, counters,
                                    0) == cudaErrorNotSupported,
           "position 2048 taken");
    EXPECT(weft_cu_attention_decode(B.q, B.k, B.v, B.out, &xb, B.rows, 10, c.Hq, c.Hkv, c.d, 0, s, &rope,
                                    nullptr, nullptr, 0.0f, B.scratch, c.cap, counters,
                                    0) == cudaErrorNotSupported,
           "xq taken with a head group of 144 outputs");
    EXPECT(weft_cu_attention_decode(B.q, B.k, B.v, B.out, nullptr, B.rows, 10, c.Hq, c.Hkv, c.d, 0, s, &rope,
                                    nullptr, nullptr, 0.0f, B.scratch, 10, counters,
                                    0) == cudaErrorInvalidValue,
           "a position past max_context taken");
    EXPECT(weft_cu_attention_decode(B.q, B.k, B.v, B.out, nullptr, B.rows, 10, c.Hq, c.Hkv, c.d, 0, s, &rope,
                                    nullptr, nullptr, 0.0f, B.scratch, c.cap, nullptr,
                                    0) == cudaErrorInvalidValue,
           "no counters taken");
    EXPECT(weft_cu_attention_decode(B.q, B.k, B.v, B.out, nullptr, B.rows, 10, c.Hq, c.Hkv, c.d, 0, s, &rope,
                                    B.q, nullptr, 1e-6f, B.scratch, c.cap, counters,
                                    0) == cudaErrorInvalidValue,
           "a q norm without a k norm taken");
    CK(cudaGetLastError());
    printf("decode refusals: %s\n", g_failures ? "FAILED so far" : "ok");
    B.release();
    cudaFree(counters);
    cudaFree(dfreq);
}

// Back-to-back time of the stage both ways at one position (the 8B shape: 32/8 heads of 128).
void time_stage(int pos) {
    const Case c{32, 8, 128, 4096, 128, 0};
    const int qd = c.Hq * c.d;
    const float scale = 1.0f / sqrtf((float)c.d);
    float *dfreq = nullptr;
    const weft_cu_rope rope = make_rope(c, &dfreq);
    const std::vector<float> cache(kv_floats(c), 0.01f), qkv((size_t)qd + 2 * c.Hkv * c.d, 0.02f);
    Bufs B = make_bufs(c, pos, cache, qkv);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    CK(cudaMemset(counters, 0, (size_t)weft_cu_attention_decode_counters(c.Hkv) * sizeof(int)));
    const weft_cu_xq xb{B.xf, B.xs, qd};
    constexpr int N = 32; // launches per timed run (a model's layers)
    const double sep = time_ms([&] {
        for (int i = 0; i < N; i++) {
            CK(weft_cu_rope_store(B.q, B.k, B.v, B.rows, 1, c.Hq, c.Hkv, c.d, 0, &rope, 0));
            CK(weft_cu_attention(B.q, B.out, B.rows, 1, pos, c.Hq, c.Hkv, c.d, 0, scale, B.scratch, c.cap,
                                 0));
            CK(weft_cu_xq_prep(B.out, qd, 1, &xb, 0));
        }
    });
    const double one = time_ms([&] {
        for (int i = 0; i < N; i++)
            CK(weft_cu_attention_decode(B.q, B.k, B.v, B.out, &xb, B.rows, pos, c.Hq, c.Hkv, c.d, 0, scale,
                                        &rope, nullptr, nullptr, 0.0f, B.scratch, c.cap, counters, 0));
    });
    printf("decode attention stage 32/8 d=128 pos=%-5d rope + attention + prep %.2f us | one kernel %.2f us "
           "(per layer, %d back to back)\n",
           pos, sep * 1e3 / N, one * 1e3 / N, N);
    B.release();
    cudaFree(counters);
    cudaFree(dfreq);
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 &&
        !strcmp(argv[1], "time")) { // one timing, for the profiler: the stage at position argv[2]
        time_stage(atoi(argv[2]));
        return report("bench_cuda_attention_decode");
    }
    for (int pos : {0, 1, 30, 31, 32, 33, 255, 256, 257, 600, 1023, 2047})
        check_case({32, 8, 128, 4096, 128, 0}, pos, true);
    for (int pos : {0, 5, 63, 64, 700})
        check_case({8, 8, 64, 1024, 64, 1}, pos, true);                            // G = 1, adjacent pairs
    for (int pos : {3, 300}) check_case({40, 8, 128, 1024, 64, 0}, pos, true);     // 5 heads, half rotated
    for (int pos : {0, 77, 1000}) check_case({16, 1, 64, 1024, 64, 0}, pos, true); // 16 heads per kv head
    for (int pos : {1, 511}) check_case({8, 2, 256, 1024, 256, 0}, pos, true);     // head dim 256
    for (int pos : {2, 260}) check_case({6, 2, 48, 1024, 48, 0}, pos, false);      // 144-wide head group
    for (int pos : {9, 400}) check_case({4, 2, 32, 1024, 0, 0}, pos, true);        // no rotation
    for (int pos : {6, 333}) check_case({24, 8, 96, 1024, 96, 0}, pos, true);      // head dim 96, 3 heads
    for (int pos : {4, 250}) check_case({10, 2, 80, 1024, 80, 0}, pos, false);     // head dim 80 (400 wide)
    for (int pos : {0, 63, 900}) check_case({4, 2, 16, 1024, 16, 0}, pos, true);   // head dim 16
    for (int pos : {2, 777}) check_case({8, 2, 128, 1024, 64, 1}, pos, true);      // adjacent, rot < d
    for (int pos : {1500, 2047})
        check_case({32, 32, 128, 4096, 128, 0}, pos, true); // G = 1: the unsplit reference
    for (int pos : {0, 31, 300, 2047}) check_case({32, 8, 128, 4096, 128, 0}, pos, true, true); // qwen3 norms
    for (int pos : {5, 700}) check_case({16, 8, 128, 1024, 128, 0}, pos, true, true);           // Qwen3-0.6B
    for (int pos : {1, 290}) check_case({8, 2, 64, 1024, 64, 1}, pos, true, true);              // d < 128
    for (int pos : {3, 511}) check_case({8, 2, 256, 1024, 256, 0}, pos, true, true);            // d = 256
    check_refusals();
    for (int pos : {64, 600, 1500, 2047}) time_stage(pos);
    return report("bench_cuda_attention_decode");
}
