// weft_cu_attention_decode (the batch-1 attention stage in one kernel) against the separate kernels it
// replaces — weft_cu_rope_store, weft_cu_attention, weft_cu_xq_prep — bit for bit: the attention output, the
// cache entries it stores, the prepared words and sums, the inputs left unchanged, a second launch (the
// arrival counters back at zero) identical; the refusals; then the time of both at the 8B shape.
#include "common.cuh"
#include "cuda_kernels.h"
#include "pdl.cuh"

namespace {

struct Case {
    int Hq, Hkv, d, cap, rot, adjacent;
};

// One path's buffers for n rows of distinct streams: a cache per row (positions from the row's own on set to
// NaN: each path must write pos before reading it and never read past it) and the same q, k, v rows.
struct Bufs {
    std::vector<void *> kv; // f16: f16 caches (weft_cu_row)
    float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *scratch = nullptr;
    uint32_t *xf = nullptr;
    float *xs = nullptr;
    weft_cu_row *rows = nullptr;
    size_t scratch_floats = 0;
    void release() {
        for (void *p : kv) cudaFree(p);
        for (float *p : {q, k, v, out, scratch, xs}) cudaFree(p);
        cudaFree(xf);
        cudaFree(rows);
    }
};

size_t kv_floats(const Case &c) {
    return (size_t)2 * c.cap * c.Hkv * c.d;
}

Bufs make_bufs(const Case &c, const std::vector<int> &pos, const std::vector<std::vector<float>> &cache,
               const std::vector<float> &qkv, int f16) {
    Bufs b;
    const int n = (int)pos.size(), qd = c.Hq * c.d, kvd = c.Hkv * c.d;
    std::vector<weft_cu_row> rows;
    for (int r = 0; r < n; r++) {
        std::vector<float> h = cache[r];
        for (int w = 0; w < 2; w++)
            for (size_t i = ((size_t)w * c.cap + pos[r]) * kvd; i < ((size_t)w + 1) * c.cap * kvd; i++)
                h[i] = NAN;
        b.kv.push_back(kv_upload(h, f16));
        rows.push_back(weft_cu_row{b.kv.back(), pos[r], 0, c.cap, 0});
    }
    const size_t nq = (size_t)n * qd, nk = (size_t)n * kvd;
    b.q = dev_upload(std::vector<float>(qkv.begin(), qkv.begin() + nq));
    b.k = dev_upload(std::vector<float>(qkv.begin() + nq, qkv.begin() + nq + nk));
    b.v = dev_upload(std::vector<float>(qkv.begin() + nq + nk, qkv.end()));
    CK(cudaMalloc(&b.out, nq * 4));
    CK(cudaMemset(b.out, 0xff, nq * 4));
    CK(cudaMalloc(&b.xf, nq * 4));
    CK(cudaMemset(b.xf, 0xff, nq * 4));
    CK(cudaMalloc(&b.xs, nq / 32 * 4));
    CK(cudaMemset(b.xs, 0xff, nq / 32 * 4));
    b.scratch_floats = std::max(weft_cu_attention_scratch_floats(n, c.Hq, c.d, c.cap),
                                weft_cu_attention_decode_scratch_floats(n, c.Hq, c.d));
    CK(cudaMalloc(&b.scratch, b.scratch_floats * sizeof(float)));
    b.rows = dev_upload(rows);
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

// The separate kernels (A) and the one kernel (B) from the same inputs, rows at positions pos (one row per
// stream, each with its own cache); with_xq: the prepared words too; qk_norm: per-head q and k norms first
// (qwen3: weft_cu_rmsnorm in place for A).
void check_case(const Case &c, const std::vector<int> &pos, bool with_xq, bool qk_norm = false) {
    const int n = (int)pos.size(), qd = c.Hq * c.d, kvd = c.Hkv * c.d;
    const size_t nq = (size_t)n * qd, nk = (size_t)n * kvd, nsub = nq / 32;
    const float scale = 1.0f / sqrtf((float)c.d);
    const int max_pos = *std::max_element(pos.begin(), pos.end());
    Rng rng(7 + pos[0] + 1000 * n);
    std::vector<std::vector<float>> cache(n, std::vector<float>(kv_floats(c)));
    std::vector<float> qkv(nq + 2 * nk);
    for (auto &row : cache)
        for (auto &x : row) x = rng.uniform();
    for (auto &x : qkv) x = 2.0f * rng.uniform();
    float *dfreq = nullptr;
    const weft_cu_rope rope = make_rope(c, &dfreq);
    // rows at an odd first position take f16 arithmetic and caches and write f16 buffers (--activations
    // f16), the others fp32
    const int f16 = pos[0] & 1;
    Bufs A = make_bufs(c, pos, cache, qkv, f16);
    const size_t ncnt = (size_t)weft_cu_attention_decode_counters(n, c.Hkv);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, ncnt * sizeof(int)));
    CK(cudaMemset(counters, 0, ncnt * sizeof(int)));
    const weft_cu_xq xa{A.xf, A.xs, qd, f16};
    std::vector<float> nqw(c.d), nkw(c.d);
    for (auto &x : nqw) x = 0.5f + rng.uniform();
    for (auto &x : nkw) x = 0.5f + rng.uniform();
    float *dnq = dev_upload(nqw), *dnk = dev_upload(nkw);
    const float eps = 1e-6f, *qn = qk_norm ? dnq : nullptr, *kn = qk_norm ? dnk : nullptr;
    if (qk_norm) {
        CK(weft_cu_rmsnorm(A.q, c.d, A.q, c.d, nullptr, dnq, n * c.Hq, c.d, eps, 0));
        CK(weft_cu_rmsnorm(A.k, c.d, A.k, c.d, nullptr, dnk, n * c.Hkv, c.d, eps, 0));
    }
    CK(weft_cu_rope_store(A.q, A.k, A.v, A.rows, n, c.Hq, c.Hkv, c.d, 0, &rope, f16, 0));
    CK(weft_cu_attention(A.q, A.out, A.rows, n, max_pos, c.Hq, c.Hkv, c.d, 0, scale, A.scratch, c.cap, f16,
                         0));
    CK(weft_cu_xq_prep(A.out, qd, n, &xa, 0));
    // f16: both forms (the default, the span form where it runs, and the block form); fp32: the block form
    for (int form : {0, 1}) {
        if (form == 1 && !f16) break;
        Bufs B = make_bufs(c, pos, cache, qkv, f16);
        const weft_cu_xq xb{B.xf, B.xs, qd, f16};
        std::vector<float> out1, xs1;
        std::vector<std::vector<float>> kv1(n);
        std::vector<uint32_t> xf1;
        for (int rep = 0; rep < 2; rep++) { // the second launch must find the counters at zero
            CK(weft_cu_attention_decode_shaped(B.q, B.k, B.v, B.out, with_xq ? &xb : nullptr, B.rows, n,
                                               max_pos, c.Hq, c.Hkv, c.d, 0, scale, &rope, qn, kn, eps,
                                               B.scratch, c.cap, counters, f16, form, 0));
            CK(cudaDeviceSynchronize());
            if (rep == 0) {
                out1 = dev_download(B.out, nq);
                for (int r = 0; r < n; r++) kv1[r] = kv_values(B.kv[r], kv_floats(c), f16);
                xf1 = dev_download(B.xf, nq);
                xs1 = dev_download(B.xs, nsub);
                // the second launch must not lean on the first one's records: scratch poisoned in between
                CK(cudaMemset(B.scratch, 0xff, B.scratch_floats * sizeof(float)));
            }
        }
        const std::vector<float> oa = dev_download(A.out, nq), ob = dev_download(B.out, nq);
        const std::vector<float> qb = dev_download(B.q, nq), kb_in = dev_download(B.k, nk),
                                 vb_in = dev_download(B.v, nk);
        const std::vector<int> cnt = dev_download(counters, ncnt);
        size_t i = 0;
        char what[112];
        snprintf(what, sizeof what, "decode %d/%d d=%d rot=%d%s %d row%s pos=%d..%d%s%s", c.Hq, c.Hkv, c.d,
                 c.rot, c.adjacent ? " adjacent" : "", n, n > 1 ? "s" : "", pos[0], max_pos,
                 with_xq ? " +xq" : "", qk_norm ? " +qk norms" : "");
        EXPECT(same_bits(oa.data(), ob.data(), nq, &i), "%s: output %zu (row %zu): %a vs %a", what, i, i / qd,
               oa[i], ob[i]);
        for (int r = 0; r < n; r++) {
            const std::vector<float> ka = kv_values(A.kv[r], kv_floats(c), f16),
                                     kb = kv_values(B.kv[r], kv_floats(c), f16);
            EXPECT(same_bits(ka.data(), kb.data(), ka.size(), &i), "%s: row %d cache float %zu: %a vs %a",
                   what, r, i, ka[i], kb[i]);
            EXPECT(same_bits(kv1[r].data(), kb.data(), kb.size(), &i),
                   "%s: row %d: the second launch's cache differs", what, r);
        }
        EXPECT(same_bits(out1.data(), ob.data(), nq, &i), "%s: the second launch differs at %zu", what, i);
        EXPECT(same_bits(qb.data(), qkv.data(), nq, &i) && same_bits(kb_in.data(), qkv.data() + nq, nk, &i) &&
                   same_bits(vb_in.data(), qkv.data() + nq + nk, nk, &i),
               "%s: a q, k or v input changed at %zu", what, i);
        bool zero = true;
        for (int x : cnt) zero = zero && x == 0;
        EXPECT(zero, "%s: counters not back at zero", what);
        if (with_xq) {
            const std::vector<uint32_t> fa = dev_download(A.xf, nq), fb = dev_download(B.xf, nq);
            const std::vector<float> sa = dev_download(A.xs, nsub), sb = dev_download(B.xs, nsub);
            EXPECT(same_bits(fa.data(), fb.data(), fa.size(), &i), "%s: prepared word %zu: %08x vs %08x",
                   what, i, fa[i], fb[i]);
            EXPECT(same_bits(sa.data(), sb.data(), sa.size(), &i), "%s: prepared sum %zu", what, i);
            EXPECT(same_bits(xf1.data(), fb.data(), fb.size(), &i), "%s: the second launch's words differ",
                   what);
        }
        printf("%-62s %s%s same bits as rope_store + attention%s: %s\n", what, f16 ? "f16 " : "fp32",
               form == 1 ? " (block form)" : "", with_xq ? " + prep" : "",
               g_failures ? "FAILED so far" : "ok");
        B.release();
    }
    A.release();
    cudaFree(counters);
    cudaFree(dfreq);
    cudaFree(dnq);
    cudaFree(dnk);
}
void check_case(const Case &c, int pos, bool with_xq, bool qk_norm = false) {
    check_case(c, std::vector<int>{pos}, with_xq, qk_norm);
}

// One row's inputs for the whole-call checks below: the rope table, a cache of one value, q|k|v of another.
struct OneRow {
    float *dfreq = nullptr;
    weft_cu_rope rope;
    std::vector<std::vector<float>> cache;
    std::vector<float> qkv;
    OneRow(const Case &c, float cache_v, float qkv_v)
        : rope(make_rope(c, &dfreq)), cache(1, std::vector<float>(kv_floats(c), cache_v)),
          qkv((size_t)(c.Hq + 2 * c.Hkv) * c.d, qkv_v) {}
    OneRow(const OneRow &) = delete;
    OneRow &operator=(const OneRow &) = delete;
    ~OneRow() { cudaFree(dfreq); }
};

// The refusals: more key blocks than the scratch floor, xq with a head group not a multiple of 32 wide,
// bad arguments — none may launch anything.
void check_refusals() {
    const Case c{6, 2, 48, 8192, 48, 0};
    const OneRow in(c, 0.5f, 0.25f);
    const weft_cu_rope &rope = in.rope;
    Bufs B = make_bufs(c, {10}, in.cache, in.qkv, 0);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, (size_t)weft_cu_attention_decode_counters(1, c.Hkv) * sizeof(int)));
    CK(cudaMemset(counters, 0, (size_t)weft_cu_attention_decode_counters(1, c.Hkv) * sizeof(int)));
    const weft_cu_xq xb{B.xf, B.xs, (int64_t)c.Hq * c.d, 0};
    // One call with the case's defaults (one row at position 10, no xq, no norms) and the named changes.
    struct Call {
        int n = 1, max_pos = 10, max_context;
        const weft_cu_xq *xq = nullptr;
        const float *q_norm = nullptr;
        int *counters;
    };
    auto call = [&](Call a) {
        return weft_cu_attention_decode(B.q, B.k, B.v, B.out, a.xq, B.rows, a.n, a.max_pos, c.Hq, c.Hkv, c.d,
                                        0, 0.125f, &rope, a.q_norm, nullptr, 1e-6f, B.scratch, a.max_context,
                                        a.counters, 0, 0);
    };
    const Call base{.max_context = c.cap, .counters = counters};
    Call pos2048 = base, with_xq = base, past_ctx = base, no_counters = base, q_only = base, no_rows = base;
    pos2048.max_pos = 2048;
    with_xq.xq = &xb;
    past_ctx.max_context = 10;
    no_counters.counters = nullptr;
    q_only.q_norm = B.q;
    no_rows.n = 0;
    EXPECT(call(pos2048) == cudaErrorNotSupported, "position 2048 taken");
    EXPECT(call(with_xq) == cudaErrorNotSupported, "xq taken with a head group of 144 outputs");
    EXPECT(call(past_ctx) == cudaErrorInvalidValue, "a position past max_context taken");
    EXPECT(call(no_counters) == cudaErrorInvalidValue, "no counters taken");
    EXPECT(call(q_only) == cudaErrorInvalidValue, "a q norm without a k norm taken");
    EXPECT(call(no_rows) == cudaErrorInvalidValue, "zero rows taken");
    auto call_form = [&](int f16, int form) {
        return weft_cu_attention_decode_shaped(B.q, B.k, B.v, B.out, nullptr, B.rows, 1, 10, c.Hq, c.Hkv, c.d,
                                               0, 0.125f, &rope, nullptr, nullptr, 1e-6f, B.scratch, c.cap,
                                               counters, f16, form, 0);
    };
    EXPECT(call_form(0, 2) == cudaErrorNotSupported, "the span form taken on fp32");
    // On an sm_90 device (clusters, and a cluster of 8 span blocks resident: the H200) the 8B shape in f16
    // takes the span form, so rounds of up to WEFT_CU_ATTN_DECODE_MAX_ROWS streams use the one kernel.
    int dev = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major == 9)
        EXPECT(weft_cu_attention_decode_rows(32, 8, 128, 1) == WEFT_CU_ATTN_DECODE_MAX_ROWS,
               "the span form refused for 32/8 heads of 128 on compute capability 9");
    EXPECT(call_form(0, 3) == cudaErrorInvalidValue && call_form(0, -1) == cudaErrorInvalidValue,
           "an unknown form taken");
    CK(cudaGetLastError());
    printf("decode refusals: %s\n", g_failures ? "FAILED so far" : "ok");
    B.release();
    cudaFree(counters);
}

// A grid that does not cover its row (max_pos below the row's position: a caller's error) computes nothing
// and leaves the counters at zero — and still keeps the launches around it in order (pdl.cuh): a slow
// predecessor's store must be seen by a successor launched after it. Without the wait in its leaving blocks
// the launch could complete at once and the successor read the flag before the predecessor set it. A control
// first: the same sequence with a kernel whose only block leaves without waiting (leave_at_once) in place of
// the attention — if its successor sees the flag anyway, this device orders such launches by itself and the
// check below cannot tell the mend from its absence (printed, not a failure).
__global__ void slow_store(int *flag, long long spin) {
    weft_pdl_enter();
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    *flag = 1;
}
__global__ void read_flag(const int *flag, int *out) {
    weft_pdl_enter();
    *out = *(const volatile int *)flag;
}
__global__ void leave_at_once() {}
// slow_store, then `middle` on st, then read_flag: what read_flag saw (1: the order held).
template <class F> int flag_after(int *flag, cudaStream_t st, F middle) {
    CK(cudaMemset(flag, 0, 2 * sizeof(int)));
    CK(cudaDeviceSynchronize());
    CK(weft_pdl_launch(slow_store, dim3(1), dim3(1), 0, st, flag, 2000000LL)); // ≈ 1 ms
    middle();
    CK(weft_pdl_launch(read_flag, dim3(1), dim3(1), 0, st, flag, flag + 1));
    CK(cudaStreamSynchronize(st));
    int seen = 0;
    CK(cudaMemcpy(&seen, flag + 1, sizeof seen, cudaMemcpyDeviceToHost));
    return seen;
}
void check_uncovered() {
    const Case c{32, 8, 128, 4096, 128, 0};
    const OneRow in(c, 0.01f, 0.02f);
    const size_t ncnt = (size_t)weft_cu_attention_decode_counters(1, c.Hkv), nq = (size_t)c.Hq * c.d;
    int *counters = nullptr, *flag = nullptr;
    CK(cudaMalloc(&counters, ncnt * sizeof(int)));
    CK(cudaMalloc(&flag, 2 * sizeof(int)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // (each kernel loaded before anything is timed against it: a first launch may synchronize the device)
    (void)flag_after(flag, st, [] {});
    const int control =
        flag_after(flag, st, [&] { CK(weft_pdl_launch(leave_at_once, dim3(1), dim3(1), 0, st)); });
    for (int f16 : {1, 0})
        for (int form : {0, 1}) {
            if (form == 1 && !f16) continue; // (fp32: the block form is the default)
            Bufs B = make_bufs(c, {600}, in.cache, in.qkv, f16);
            CK(cudaMemset(counters, 0, ncnt * sizeof(int)));
            CK(cudaMemset(B.out, 0xff, nq * sizeof(float)));
            // max_pos 300: two spans (the span form runs as a cluster) and 5 key blocks, none reaching 600
            const int seen = flag_after(flag, st, [&] {
                CK(weft_cu_attention_decode_shaped(B.q, B.k, B.v, B.out, nullptr, B.rows, 1, 300, c.Hq, c.Hkv,
                                                   c.d, 0, 0.088f, &in.rope, nullptr, nullptr, 1e-6f,
                                                   B.scratch, c.cap, counters, f16, form, st));
            });
            const std::vector<uint32_t> out = dev_download(reinterpret_cast<uint32_t *>(B.out), nq);
            const std::vector<int> cnt = dev_download(counters, ncnt);
            const bool untouched = std::all_of(out.begin(), out.end(), [](uint32_t u) { return u == ~0u; }),
                       zero = std::all_of(cnt.begin(), cnt.end(), [](int x) { return x == 0; });
            EXPECT(seen == 1,
                   "uncovered row (f16 %d, form %d): the next kernel ran before the one before it finished",
                   f16, form);
            EXPECT(untouched && zero, "uncovered row (f16 %d, form %d): output written or counters left set",
                   f16, form);
            B.release();
        }
    printf(
        "decode grid not covering its row (both forms; PDL %s; control without a wait: the order %s): %s\n",
        weft_pdl_on() ? "on" : "off", control ? "held anyway — this check cannot fail here" : "broke",
        g_failures ? "FAILED so far" : "ok");
    CK(cudaStreamDestroy(st));
    cudaFree(counters);
    cudaFree(flag);
}

// Back-to-back time of the stage both ways for n rows at one position (the 8B shape: 32/8 heads of 128); f16:
// f16 arithmetic and caches.
void time_stage(int pos, int n = 1, int f16 = 0) {
    const Case c{32, 8, 128, 4096, 128, 0};
    const int qd = c.Hq * c.d;
    const float scale = 1.0f / sqrtf((float)c.d);
    float *dfreq = nullptr;
    const weft_cu_rope rope = make_rope(c, &dfreq);
    const std::vector<std::vector<float>> cache(n, std::vector<float>(kv_floats(c), 0.01f));
    const std::vector<float> qkv((size_t)n * (qd + 2 * c.Hkv * c.d), 0.02f);
    Bufs B = make_bufs(c, std::vector<int>(n, pos), cache, qkv, f16);
    const size_t ncnt = (size_t)weft_cu_attention_decode_counters(n, c.Hkv);
    int *counters = nullptr;
    CK(cudaMalloc(&counters, ncnt * sizeof(int)));
    CK(cudaMemset(counters, 0, ncnt * sizeof(int)));
    const weft_cu_xq xb{B.xf, B.xs, qd, f16};
    constexpr int N = 32; // launches per timed run (a model's layers)
    const double sep = time_ms([&] {
        for (int i = 0; i < N; i++) {
            CK(weft_cu_rope_store(B.q, B.k, B.v, B.rows, n, c.Hq, c.Hkv, c.d, 0, &rope, f16, 0));
            CK(weft_cu_attention(B.q, B.out, B.rows, n, pos, c.Hq, c.Hkv, c.d, 0, scale, B.scratch, c.cap,
                                 f16, 0));
            CK(weft_cu_xq_prep(B.out, qd, n, &xb, 0));
        }
    });
    auto one = [&](int form) {
        return time_ms([&] {
            for (int i = 0; i < N; i++)
                CK(weft_cu_attention_decode_shaped(B.q, B.k, B.v, B.out, &xb, B.rows, n, pos, c.Hq, c.Hkv,
                                                   c.d, 0, scale, &rope, nullptr, nullptr, 0.0f, B.scratch,
                                                   c.cap, counters, f16, form, 0));
        });
    };
    const double dflt = one(0), block = f16 ? one(1) : dflt;
    printf("decode attention stage 32/8 d=128 %2d row%s pos=%-5d %s rope + attention + prep %.2f us | one "
           "kernel %.2f us (block form %.2f; per layer, %d back to back)\n",
           n, n > 1 ? "s" : " ", pos, f16 ? "f16 " : "fp32", sep * 1e3 / N, dflt * 1e3 / N, block * 1e3 / N,
           N);
    B.release();
    cudaFree(counters);
    cudaFree(dfreq);
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 &&
        !strcmp(argv[1], "time")) { // one timing, for the profiler: position argv[2], rows argv[3]
        time_stage(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 1, argc > 4 ? atoi(argv[4]) : 0);
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
    // Rows of distinct streams in one launch (a decode round): positions across span and block edges, the
    // reference (weft_cu_attention for n rows) in its unsplit mode for the larger calls.
    check_case({32, 8, 128, 4096, 128, 0}, {600, 0, 31, 1500}, true);
    check_case({32, 8, 128, 4096, 128, 0},
               {5, 255, 256, 2047, 64, 700, 33, 1, 999, 512, 128, 1600, 7, 300, 90, 257}, true);
    check_case({32, 8, 128, 4096, 128, 0}, {77, 600, 1023}, true, true);  // qwen3 norms
    check_case({8, 2, 64, 1024, 64, 1}, {900, 3, 64, 65, 500, 12}, true); // d = 64, adjacent pairs
    check_case({6, 2, 48, 1024, 48, 0}, {260, 2}, false);                 // 144-wide head group, no xq
    // f16 (the span form where it runs) at the row counts forward.c gives it (2..4), across span edges
    check_case({32, 8, 128, 4096, 128, 0}, {601, 40}, true);
    check_case({32, 8, 128, 4096, 128, 0}, {255, 256, 1500, 0}, true);
    check_case({8, 2, 64, 1024, 64, 1}, {65, 900, 3}, true, true); // d = 64, adjacent pairs, qwen3 norms
    check_refusals();
    check_uncovered();
    for (int f16 = 0; f16 < 2; f16++) {
        for (int pos : {64, 600, 1500, 2047}) time_stage(pos, 1, f16);
        for (int n : {2, 4, 8, 16, 64}) time_stage(600, n, f16);
    }
    return report("bench_cuda_attention_decode");
}
