// Probe for the proposed integer 4-bit arithmetic (src/backend/cuda/i8limb.h, bench/NOTES.md session 6): does
// mma.sync m16n8k32 .s32.u8.s8 on the 4-bit matmuls' own weight words (A = the raw nibbles q, two LOP3 and a
// shift per word) and on int8 activation limbs (B) give the exact integer dot products, and does the device
// turn them into the same value bits as the CPU definition?
//
// A (16 weight rows x 32 k) comes from the Q4F words as the kernels hold them: lane (g, t) has the word of
// elements 8t .. 8t+7 of rows g and g + 8 (element 8t + n at bits 4n); a0 = w_g & 0x0F0F0F0F is k 4t .. 4t+3
// <-> elements 8t + 0, 2, 4, 6, a2 = (w_g >> 4) & 0x0F0F0F0F is k 16 + 4t .. <-> elements 8t + 1, 3, 5, 7
// (a1, a3: row g + 8). So B must hold element 8t + 2j at k 4t + j and element 8t + 2j + 1 at k 16 + 4t + j:
// b0 = limb bytes of elements 8t + 0, 2, 4, 6 of column g, b1 = of 8t + 1, 3, 5, 7. Columns: 8 activation
// blocks, one mma per limb. Checked: P_l (int32) == the CPU's exact sums for every (row, column, limb); the
// values v == weft_i8l_value on the CPU bit for bit. Usage: bench_cuda_imma_probe (sm_80 or newer).
#include "common.cuh"

#include "backend/cuda/i8limb.h"

namespace {

constexpr int kTrials = 8192;

// One warp per trial. W: [trial][16 rows][4 words]; B: [trial][limb][8 columns][4 t][2 words] (b0, b1 of lane
// (column, t)); blocks: [trial][8] (e, nonfinite, sums). Out: P [trial][limb][16][8], V [trial][16][8].
__global__ void probe_kernel(const uint32_t *W, const uint32_t *B, const weft_i8l_block *blocks, int *P,
                             float *V) {
    const int trial = blockIdx.x, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const uint32_t wg = W[((size_t)trial * 16 + g) * 4 + t], wh = W[((size_t)trial * 16 + g + 8) * 4 + t];
    const uint32_t a0 = wg & 0x0F0F0F0Fu, a2 = (wg >> 4) & 0x0F0F0F0Fu;
    const uint32_t a1 = wh & 0x0F0F0F0Fu, a3 = (wh >> 4) & 0x0F0F0F0Fu;
    int c[WEFT_I8L_LIMBS][4];
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
        const uint32_t *b = B + ((((size_t)trial * WEFT_I8L_LIMBS + l) * 8 + g) * 4 + t) * 2;
        c[l][0] = c[l][1] = c[l][2] = c[l][3] = 0;
        weft_i8l_mma(c[l], a0, a1, a2, a3, b[0], b[1]);
        for (int r = 0; r < 4; r++) {
            const int row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
            P[(((size_t)trial * WEFT_I8L_LIMBS + l) * 16 + row) * 8 + col] = c[l][r];
        }
    }
    for (int r = 0; r < 4; r++) {
        const int row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
        const weft_i8l_block &bk = blocks[(size_t)trial * 8 + col];
        const int32_t p = weft_i8l_join(c[0][r], c[1][r], c[2][r]) - 8 * bk.sum;
        V[((size_t)trial * 16 + row) * 8 + col] = weft_i8l_value(p, bk.e, bk.nonfinite);
    }
}

} // namespace

int main() {
    if (!sm_at_least(8, "imma probe")) return 0;
    Rng rng(7);
    std::vector<uint32_t> W((size_t)kTrials * 16 * 4);
    std::vector<int> q((size_t)kTrials * 16 * 32); // q [trial][row][element]
    for (size_t i = 0; i < q.size(); i++) q[i] = (int)(rng.next() % 16);
    for (int tr = 0; tr < kTrials; tr++)
        for (int r = 0; r < 16; r++)
            for (int t = 0; t < 4; t++) {
                uint32_t w = 0;
                for (int n = 0; n < 8; n++)
                    w |= (uint32_t)q[((size_t)tr * 16 + r) * 32 + 8 * t + n] << (4 * n);
                W[((size_t)tr * 16 + r) * 4 + t] = w;
            }
    // activations: regimes by trial (uniform, outliers, tiny, mixed exponents), split on the CPU
    std::vector<weft_i8l_block> blocks((size_t)kTrials * 8);
    for (int tr = 0; tr < kTrials; tr++)
        for (int col = 0; col < 8; col++) {
            float x[WEFT_I8L_N];
            for (int i = 0; i < WEFT_I8L_N; i++) {
                const float u = rng.uniform();
                switch (tr % 4) {
                case 0:
                    x[i] = u;
                    break;
                case 1:
                    x[i] = u * ((rng.next() % 16) == 0 ? 1000.0f : 1.0f);
                    break;
                case 2:
                    x[i] = u * 1e-30f;
                    break;
                default:
                    x[i] = u * ldexpf(1.0f, (int)(rng.next() % 40) - 20);
                    break;
                }
            }
            weft_i8l_split(x, &blocks[(size_t)tr * 8 + col]);
        }
    std::vector<uint32_t> B((size_t)kTrials * WEFT_I8L_LIMBS * 8 * 4 * 2);
    for (int tr = 0; tr < kTrials; tr++)
        for (int l = 0; l < WEFT_I8L_LIMBS; l++)
            for (int col = 0; col < 8; col++)
                for (int t = 0; t < 4; t++)
                    for (int h = 0; h < 2; h++) { // h = 0: elements 8t + 0, 2, 4, 6; h = 1: 8t + 1, 3, 5, 7
                        uint32_t v = 0;
                        for (int j = 0; j < 4; j++)
                            v |= (uint32_t)(uint8_t)blocks[(size_t)tr * 8 + col].d[l][8 * t + 2 * j + h]
                                 << (8 * j);
                        B[((((size_t)tr * WEFT_I8L_LIMBS + l) * 8 + col) * 4 + t) * 2 + h] = v;
                    }
    uint32_t *dW = dev_upload(W), *dB = dev_upload(B);
    weft_i8l_block *dblocks = dev_upload(blocks);
    int *dP = nullptr;
    float *dV = nullptr;
    CK(cudaMalloc(&dP, sizeof(int) * (size_t)kTrials * WEFT_I8L_LIMBS * 16 * 8));
    CK(cudaMalloc(&dV, sizeof(float) * (size_t)kTrials * 16 * 8));
    probe_kernel<<<kTrials, 32>>>(dW, dB, dblocks, dP, dV);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const std::vector<int> P = dev_download(dP, (size_t)kTrials * WEFT_I8L_LIMBS * 16 * 8);
    const std::vector<float> V = dev_download(dV, (size_t)kTrials * 16 * 8);
    long bad_p = 0, bad_v = 0, n = 0;
    for (int tr = 0; tr < kTrials; tr++)
        for (int r = 0; r < 16; r++)
            for (int col = 0; col < 8; col++) {
                const weft_i8l_block &bk = blocks[(size_t)tr * 8 + col];
                int32_t p[WEFT_I8L_LIMBS];
                for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
                    int64_t s = 0;
                    for (int i = 0; i < WEFT_I8L_N; i++)
                        s += (int64_t)q[((size_t)tr * 16 + r) * 32 + i] * bk.d[l][i];
                    const int got = P[(((size_t)tr * WEFT_I8L_LIMBS + l) * 16 + r) * 8 + col];
                    if (got != s && bad_p++ < 5)
                        fprintf(stderr, "trial %d row %d col %d limb %d: mma %d, exact %lld\n", tr, r, col, l,
                                got, (long long)s);
                    p[l] = (int32_t)s;
                }
                const float want = weft_i8l_value(weft_i8l_join(p[0], p[1], p[2]) - 8 * bk.sum, bk.e,
                                                  bk.nonfinite),
                            got = V[((size_t)tr * 16 + r) * 8 + col];
                if (memcmp(&want, &got, sizeof want) != 0 && bad_v++ < 5)
                    fprintf(stderr, "trial %d row %d col %d: device value %.9g, CPU %.9g\n", tr, r, col,
                            (double)got, (double)want);
                n++;
            }
    printf(
        "imma probe (m16n8k32 .u8.s8, A = raw nibbles, B = int8 limbs): %ld of %ld limb sums differ from the "
        "exact integers; %ld of %ld values differ from the CPU definition's bits\n",
        bad_p, n * WEFT_I8L_LIMBS, bad_v, n);
    cudaFree(dW);
    cudaFree(dB);
    cudaFree(dblocks);
    cudaFree(dP);
    cudaFree(dV);
    return bad_p || bad_v ? 1 : 0;
}
