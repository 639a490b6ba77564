// Harness of the proposed integer 4-bit matvec (src/backend/cuda/mma_i8.cu, i8limb.h; bench/NOTES.md session
// 6): weft_cu_i8_prep == the CPU definition's limbs word for word; weft_cu_matmul_i8x == its CPU reference
// (the same per-block integers, values, fmaf folds in slot order and warp-sum order) bit for bit; relative L2
// of both it and today's bf16 hi/lo kernel (weft_cu_matmul_q4x) against fp64; then back-to-back timing of
// both at one row on rotating weight copies (cold in L2, as in a model). Q4_0 shapes of the 8B model with
// K = 4096, and a small one. Usage: bench_cuda_i8matvec [quick]. Exit 1 on any mismatch.
#include "common.cuh"

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/i8limb.h"

namespace {

struct Q4 { // a random Q4_0 matrix: q [N][K] (0..15), f16 scales [N][K/32], the Q4F upload
    int64_t N, K;
    std::vector<uint8_t> q;
    std::vector<uint16_t> s16;
    weft_cu_weight w{};
};

Q4 make_q4(int64_t N, int64_t K, uint64_t seed) {
    Rng rng(seed);
    Q4 m;
    m.N = N;
    m.K = K;
    m.q.resize((size_t)N * K);
    m.s16.resize((size_t)N * K / 32);
    for (auto &v : m.q) v = (uint8_t)(rng.next() >> 60);
    for (auto &v : m.s16) v = f32_to_f16(0.001f + 0.004f * (rng.uniform() + 1.0f));
    std::vector<uint32_t> words((size_t)N * K / 8, 0), packed((size_t)N * K / 8);
    for (size_t i = 0; i < m.q.size(); i++) words[i / 8] |= (uint32_t)m.q[i] << (4 * (i % 8));
    weft_cu_q4f_pack(words.data(), N, K, packed.data());
    m.w.kind = WEFT_CU_Q4F;
    m.w.mode = WEFT_CU_OFF8;
    m.w.sdt = WEFT_CU_S_F16;
    m.w.group = 32;
    m.w.rows = N;
    m.w.cols = K;
    m.w.q = dev_upload(packed);
    std::vector<uint16_t> tiled(m.s16.size()); // the scales in WEFT_CU_Q4F's tile order
    weft_cu_q4f_pack_scales(m.s16.data(), N, K, 32, 2, tiled.data());
    m.w.s = dev_upload(tiled);
    return m;
}

// The CPU reference of weft_cu_matmul_i8x: per output, warp slot w (KW from the shape) folds its K blocks w,
// w + KW, ... (4 sub-blocks each) in order, acc = fmaf(s, v, acc); slots meet as ((s0 + s1) + s2) + ...
std::vector<float> reference(const Q4 &m, const std::vector<weft_i8l_block> &blk) {
    const int KW = weft_cu_q4_kw(m.N, m.K), nblk = (int)(m.K / 128);
    std::vector<float> y((size_t)m.N);
    for (int64_t o = 0; o < m.N; o++) {
        float tot = 0.0f;
        for (int w = 0; w < KW; w++) {
            float acc = 0.0f;
            for (int kb = w; kb < nblk; kb += KW)
                for (int j = 0; j < 4; j++) {
                    const int64_t u = (int64_t)kb * 4 + j;
                    const weft_i8l_block &b = blk[(size_t)u];
                    int64_t p = 0;
                    for (int i = 0; i < 32; i++) {
                        const int c = (b.d[0][i] * 128 + b.d[1][i]) * 128 + b.d[2][i];
                        p += (int64_t)m.q[(size_t)o * m.K + u * 32 + i] * c;
                    }
                    p -= 8 * (int64_t)b.sum;
                    const float v = weft_i8l_value((int32_t)p, b.e, b.nonfinite);
                    acc = fmaf(f16_to_f32(m.s16[(size_t)o * (m.K / 32) + u]), v, acc);
                }
            tot = w == 0 ? acc : tot + acc;
        }
        y[(size_t)o] = tot;
    }
    return y;
}

// The prepared words the CPU definition gives for one block (mma_i8.cu's layout).
void words_of(const weft_i8l_block &b, uint32_t *out) {
    for (int L = 0; L < 32; L++) out[L] = 0;
    for (int l = 0; l < 3; l++)
        for (int t = 0; t < 4; t++)
            for (int h = 0; h < 2; h++) {
                uint32_t v = 0;
                for (int j = 0; j < 4; j++) v |= (uint32_t)(uint8_t)b.d[l][8 * t + 2 * j + h] << (8 * j);
                out[(l * 4 + t) * 2 + h] = v;
            }
    out[24] = (uint32_t)b.sum;
    const float unit = ldexpf(1.0f, b.e - 19);
    memcpy(&out[25], &unit, 4);
    out[26] = (uint32_t)b.nonfinite;
}

// Same bits, or both NaN (the device's NaN is 0x7fffffff, the host's 0x7fc00000).
bool same(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

// Prep on crafted blocks (zeros, −0, denormals, values around and below 2^−100, 1e30 next to 1e−30, inf,
// NaN, ±FLT_MAX, exact ties at several scales, random bit patterns) for two rows with a row stride of K + 32:
// the device ldexpf's long-shift path and the row addressing, against the CPU definition's words.
void check_prep_edges() {
    const int64_t K = 16 * 32, ldx = K + 32;
    Rng rng(3);
    std::vector<float> x((size_t)(2 * ldx), 0.0f);
    for (int r = 0; r < 2; r++)
        for (int64_t k = 0; k < K; k++) {
            const int blk = (int)(k / 32), i = (int)(k % 32);
            const float u = rng.uniform();
            float v = 0.0f;
            switch ((blk + 5 * r) % 16) {
            case 0:
                v = 0.0f;
                break;
            case 1:
                v = i % 2 ? -0.0f : 0.0f;
                break;
            case 2:
                v = u * 1e-40f;
                break;
            case 3:
                v = u * ldexpf(1.0f, -110);
                break;
            case 4:
                v = u * ldexpf(1.0f, -100);
                break;
            case 5:
                v = u * 1e-30f;
                break;
            case 6:
                v = i % 2 ? u * 1e30f : u * 1e-30f;
                break;
            case 7:
                v = i == 3 ? INFINITY : u;
                break;
            case 8:
                v = i == 9 ? NAN : u;
                break;
            case 9:
                v = i % 2 ? 3.40282347e+38f : -3.40282347e+38f;
                break;
            case 10:
                v = ldexpf((float)((int)(rng.next() % 129) - 64) + 0.5f, -6);
                break;
            case 11:
                v = ldexpf((float)((int)(rng.next() % 129) - 64) + 0.5f, 40);
                break;
            case 12: {
                uint32_t bits = (uint32_t)rng.next();
                memcpy(&v, &bits, 4);
                if (!isfinite(v)) v = 1.0f;
                break;
            }
            case 13:
                v = u * ldexpf(1.0f, 127);
                break;
            case 14:
                v = i == 0 ? 1.0f : u * 1e-38f;
                break;
            default:
                v = u * 30.0f;
                break;
            }
            x[(size_t)(r * ldx + k)] = v;
        }
    std::vector<uint32_t> want((size_t)(2 * K));
    for (int r = 0; r < 2; r++)
        for (int64_t u = 0; u < K / 32; u++) {
            weft_i8l_block b;
            weft_i8l_split(&x[(size_t)(r * ldx + u * 32)], &b);
            words_of(b, &want[(size_t)(r * K + u * 32)]);
        }
    float *dx = dev_upload(x);
    uint32_t *dxl = nullptr;
    CK(cudaMalloc(&dxl, sizeof(uint32_t) * (size_t)(2 * K)));
    CK(weft_cu_i8_prep(dx, ldx, 2, K, dxl, 0));
    const std::vector<uint32_t> got = dev_download(dxl, (size_t)(2 * K));
    long bad = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (got[i] != want[i] && bad++ < 5)
            fprintf(stderr, "prep edge: row %zu block %zu word %zu: device %08x, CPU %08x\n", i / K,
                    (i % K) / 32, i % 32, got[i], want[i]);
    EXPECT(bad == 0, "prep on crafted blocks: %ld of %lld words differ from the CPU definition", bad,
           (long long)(2 * K));
    printf("i8x prep on 32 crafted blocks (zeros, denormals, < 2^-100, inf, NaN, FLT_MAX, ties), two rows "
           "with a "
           "stride: %s\n",
           bad ? "DIFFERS" : "== CPU");
    cudaFree(dx);
    cudaFree(dxl);
}

double rel_l2(const std::vector<float> &y, const std::vector<double> &ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < y.size(); i++) {
        num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1.0));
}

void run_shape(int64_t N, int64_t K, bool timing) {
    Q4 m = make_q4(N, K, 11 + (uint64_t)N);
    Rng rng(5);
    std::vector<float> x((size_t)K);
    for (auto &v : x) v = rng.uniform() * ((rng.next() % 64) == 0 ? 30.0f : 1.0f);
    std::vector<weft_i8l_block> blk((size_t)K / 32);
    std::vector<uint32_t> want((size_t)K);
    for (int64_t u = 0; u < K / 32; u++) {
        weft_i8l_split(&x[(size_t)u * 32], &blk[(size_t)u]);
        words_of(blk[(size_t)u], &want[(size_t)u * 32]);
    }
    float *dx = dev_upload(x), *dy = nullptr, *dy2 = nullptr;
    uint32_t *dxl = nullptr, *dxf = nullptr;
    float *dxs = nullptr;
    CK(cudaMalloc(&dxl, sizeof(uint32_t) * (size_t)K));
    CK(cudaMalloc(&dy, sizeof(float) * (size_t)N));
    CK(cudaMalloc(&dy2, sizeof(float) * (size_t)N));
    CK(cudaMalloc(&dxf, sizeof(uint32_t) * (size_t)K));
    CK(cudaMalloc(&dxs, sizeof(float) * (size_t)K / 32));
    CK(weft_cu_i8_prep(dx, K, 1, K, dxl, 0));
    const std::vector<uint32_t> got = dev_download(dxl, (size_t)K);
    long bad_w = 0;
    for (size_t i = 0; i < got.size(); i++) bad_w += got[i] != want[i];
    EXPECT(bad_w == 0, "%lldx%lld prep: %ld of %lld words differ from the CPU definition", (long long)N,
           (long long)K, bad_w, (long long)K);

    const weft_cu_epi e = weft_cu_epi_store(dy, N, nullptr, 0, N);
    CK(weft_cu_matmul_i8x(&m.w, dxl, 1, &e, 0));
    CK(cudaDeviceSynchronize());
    const std::vector<float> y = dev_download(dy, (size_t)N), ref = reference(m, blk);
    long bad_y = 0;
    for (size_t i = 0; i < y.size(); i++) bad_y += !same(y[i], ref[i]);
    EXPECT(bad_y == 0, "%lldx%lld matvec: %ld of %lld outputs differ from the CPU reference's bits",
           (long long)N, (long long)K, bad_y, (long long)N);

    // precision against fp64, and today's kernel on the same weights
    const weft_cu_xq xq{dxf, dxs, K, 0};
    CK(weft_cu_xq_prep(dx, K, 1, &xq, 0));
    const weft_cu_epi e2 = weft_cu_epi_store(dy2, N, nullptr, 0, N);
    CK(weft_cu_matmul_q4x(&m.w, &xq, 1, &e2, 0));
    const std::vector<float> y2 = dev_download(dy2, (size_t)N);
    std::vector<double> exact((size_t)N, 0.0);
    for (int64_t o = 0; o < N; o++)
        for (int64_t k = 0; k < K; k++)
            exact[(size_t)o] += (double)f16_to_f32(m.s16[(size_t)(o * K + k) / 32]) *
                                ((int)m.q[(size_t)(o * K + k)] - 8) * (double)x[(size_t)k];
    printf("i8x %6lldx%-5lld prep %s, matvec %s; rel L2 vs fp64: int8 limbs %.2e, bf16 hi/lo %.2e",
           (long long)N, (long long)K, bad_w ? "DIFFERS" : "== CPU", bad_y ? "DIFFERS" : "== CPU",
           rel_l2(y, exact), rel_l2(y2, exact));

    if (timing) { // back to back over copies that exceed the L2
        const size_t qb = (size_t)N * K / 2, sb = (size_t)N * (K / 32) * 2;
        const int ncopy = (int)std::min<size_t>(16, (size_t)(256 << 20) / (qb + sb) + 2);
        std::vector<weft_cu_weight> cp(ncopy, m.w);
        for (int c = 1; c < ncopy; c++) {
            CK(cudaMalloc((void **)&cp[c].q, qb));
            CK(cudaMemcpy((void *)cp[c].q, m.w.q, qb, cudaMemcpyDeviceToDevice));
            CK(cudaMalloc((void **)&cp[c].s, sb));
            CK(cudaMemcpy((void *)cp[c].s, m.w.s, sb, cudaMemcpyDeviceToDevice));
        }
        auto per = [&](bool i8) {
            return time_ms(
                       [&] {
                           for (int r = 0; r < 24; r++) {
                               if (i8)
                                   weft_cu_matmul_i8x(&cp[r % ncopy], dxl, 1, &e, 0);
                               else
                                   weft_cu_matmul_q4x(&cp[r % ncopy], &xq, 1, &e2, 0);
                           }
                       },
                       2, 7) /
                   24;
        };
        const double ti = per(true), tb = per(false), bytes = (double)(qb + sb);
        CK(cudaGetLastError()); // a failed launch would make the times meaningless
        printf(" | back to back: int8 %.4f ms %5.0f GB/s, bf16 hi/lo %.4f ms %5.0f GB/s (%.2fx)", ti,
               bytes / ti / 1e6, tb, bytes / tb / 1e6, tb / ti);
        for (int c = 1; c < ncopy; c++) {
            cudaFree((void *)cp[c].q);
            cudaFree((void *)cp[c].s);
        }
    }
    printf("\n");
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dy2);
    cudaFree(dxl);
    cudaFree(dxf);
    cudaFree(dxs);
    cudaFree((void *)m.w.q);
    cudaFree((void *)m.w.s);
}

} // namespace

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    if (!sm_at_least(8, "i8matvec")) return 0;
    check_prep_edges();
    run_shape(128, 256, false);
    run_shape(4096, 4096, !quick);
    run_shape(6144, 4096, !quick);
    run_shape(28672, 4096, !quick);
    return report("bench_cuda_i8matvec");
}
