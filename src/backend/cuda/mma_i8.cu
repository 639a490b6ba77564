// The proposed integer 4-bit arithmetic at one activation row (i8limb.h; bench/NOTES.md session 6, "A
// proposal for the 4-bit arithmetic"): weft_cu_i8_prep and weft_cu_matmul_i8x (cuda_kernels.h).
//
// STATUS: verified on the H200 in session 7 (bench/cuda/i8matvec.cu: prep == the CPU definition word for
// word, the product == its CPU reference bit for bit on every shape, 1.04–1.17x weft_cu_matmul_q4x back to
// back; bench/NOTES.md session 7). Only that harness calls it; the forward does not (the integer arithmetic
// would have to cover every M path first).
//
// Prep: one warp per (row, 32-element block), lane i = element i: the block's max |x| by a warp max, then the
// limbs exactly as weft_i8l_split (the same per-element operations), their joined sum by an integer warp sum,
// and the words below by shuffles. Matvec (M = 1, WEFT_CU_OFF8 with f16 scales, group 32, 4 sub-blocks per K
// block): mma_q4x.cu's grid, warps per tile (KW) and slot order (warp w takes K blocks w, w + KW, ...), the
// weights prefetched the same way (Stage) and the row's words staged per warp with cp.async (X1S). Per
// sub-block one mma.sync m16n8k32 .u8.s8: A = the Q4F words' nibbles (w & 0x0F0F0F0F: k 4t..4t+3 = elements
// 8t
// + 0, 2, 4, 6; (w >> 4) & 0x0F0F0F0F: k 16 + 4t.. = 8t + 1, 3, 5, 7), B column l = limb l (l < 3; the other
// five columns zero), so lane t = 0 holds limbs 0 and 1 of its rows and lane t = 1 limb 2: one shuffle brings
// it over, then P = (P0·128 + P1)·128 + P2 − 8·Σc, v = (float)P·2^(e−19), acc = fmaf(s, v, acc); the warps'
// sums meet in order ((w0 + w1) + w2) + ... as in mma_q4x.cu.
//
// Prepared words per (row, block) [32 u32]: word (l·4 + t)·2 + h (l < 3, t < 4, h < 2) = the limb-l bytes of
// elements 8t + 2j + h, j = 0..3 (byte j); word 24 = Σc (int32); word 25 = 2^(e−19) (float bits); word 26 = 1
// when the block was not finite; words 27..31 = 0.
#include "cuda_kernels.h"
#include "i8limb.h"
#include "pdl.cuh"
#include "q4_mma.cuh"

namespace {

__global__ void i8_prep_kernel(const float *__restrict__ X, int64_t ldx, int M, int64_t K, uint32_t *XL) {
    weft_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t nsub = K / 32, gw = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (gw >= (int64_t)M * nsub) return; // warp-uniform
    const int64_t r = gw / nsub, u = gw % nsub;
    const float x = X[r * ldx + u * 32 + lane], a = fabsf(x);
    const bool bad = __any_sync(0xffffffffu, !(a <= 3.40282346638528859812e+38f));
    float m = bad ? 0.0f : a;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    int e = WEFT_I8L_EMIN;
    if (m > 0.0f && !bad && ilogbf(m) > e) e = ilogbf(m);
    float y = bad ? 0.0f : ldexpf(x, 5 - e);
    int d[WEFT_I8L_LIMBS];
#pragma unroll
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
        const float dl = rintf(y);
        d[l] = (int)dl;
        y = (y - dl) * 128.0f;
    }
    const int32_t sum = __reduce_add_sync(0xffffffffu, weft_i8l_join(d[0], d[1], d[2]));
    // lane L < 24 gathers word L: limb l = L / 8, t = (L / 2) % 4, h = L % 2
    const int l = lane >> 3, t = (lane >> 1) & 3, h = lane & 1;
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int src = 8 * t + 2 * j + h;
        const int v0 = __shfl_sync(0xffffffffu, d[0], src), v1 = __shfl_sync(0xffffffffu, d[1], src),
                  v2 = __shfl_sync(0xffffffffu, d[2], src);
        const int v = l == 0 ? v0 : l == 1 ? v1 : v2;
        word |= (uint32_t)(uint8_t)(int8_t)v << (8 * j);
    }
    uint32_t *out = XL + (r * nsub + u) * 32;
    out[lane] = lane < 24    ? word
                : lane == 24 ? (uint32_t)sum
                : lane == 25 ? __float_as_uint(ldexpf(1.0f, e - 19))
                : lane == 26 ? (uint32_t)bad
                             : 0u;
}

// One sub-block's value for the lane's two rows (meaningful in lanes t = 0) from its A words and the block's
// prepared words xw [32] (shared memory).
__device__ __forceinline__ void i8_sub(uint32_t wg, uint32_t wh, const uint32_t *xw, int g, int t, float &vg,
                                       float &vh) {
    const uint32_t b0 = g < 3 ? xw[(g * 4 + t) * 2] : 0u, b1 = g < 3 ? xw[(g * 4 + t) * 2 + 1] : 0u;
    int c[4] = {0, 0, 0, 0};
    weft_i8l_mma(c, wg & 0x0F0F0F0Fu, wh & 0x0F0F0F0Fu, (wg >> 4) & 0x0F0F0F0Fu, (wh >> 4) & 0x0F0F0F0Fu, b0,
                 b1);
    const int p2g = __shfl_down_sync(0xffffffffu, c[0], 1), p2h = __shfl_down_sync(0xffffffffu, c[2], 1);
    const int32_t s8 = 8 * (int32_t)xw[24];
    const float unit = __uint_as_float(xw[25]);
    const bool bad = xw[26] != 0;
    vg = bad ? nanf("") : (float)(weft_i8l_join(c[0], c[1], p2g) - s8) * unit;
    vh = bad ? nanf("") : (float)(weft_i8l_join(c[2], c[3], p2h) - s8) * unit;
}

constexpr int SB = 4, GPB = 4, D = 4; // Q4_0: K blocks of 4 sub-blocks, one group each; loads in flight

__global__ void __launch_bounds__(256, 3)
    i8x_kernel(WDev w, const uint32_t *__restrict__ XL, weft_cu_epi epi) {
    extern __shared__ __align__(16) float red[]; // [KW − 1][2][32]: the warps' sums; then the row's words
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KW = (int)(blockDim.x >> 5);
    const int g = lane >> 2, t = lane & 3;
    const int64_t tile = blockIdx.x;
    const int nblk = (int)(w.cols / (32 * SB));
    const int mine = warp < nblk ? (nblk - warp + KW - 1) / KW : 0;
    const uint32_t *qb = static_cast<const uint32_t *>(w.q) + lane * SB;
    Stage<WEFT_CU_OFF8, WEFT_CU_S_F16, SB, GPB> st[D];
#pragma unroll
    for (int s = 0; s < D; s++)
        if (s < mine) st[s].load(w, qb, tile, nblk, warp + s * KW, g);
    weft_pdl_enter(); // weights in flight (pdl.cuh); the row only after this
    uint32_t *xs = reinterpret_cast<uint32_t *>(red + (KW - 1) * 64);
    q4_stage_slot<SB, D>(xs, XL, nullptr, nullptr, warp, KW, mine, lane); // this warp's K blocks' words
    float acc[2] = {0.0f, 0.0f};
    for (int i0 = 0; i0 < mine; i0 += D) {
#pragma unroll
        for (int s = 0; s < D; s++) {
            const int i = i0 + s;
            if (i >= mine) break; // warp-uniform
            if (i == D) q4_stage_rest();
            const int64_t kb = warp + (int64_t)i * KW;
#pragma unroll
            for (int j = 0; j < SB; j++) {
                float vg, vh;
                i8_sub(st[s].wg[j], st[s].wh[j], xs + (kb * SB + j) * 32, g, t, vg, vh);
                acc[0] = fmaf(st[s].sg.get(j), vg, acc[0]);
                acc[1] = fmaf(st[s].sh.get(j), vh, acc[1]);
            }
            if (i + D < mine) st[s].load(w, qb, tile, nblk, warp + (i + D) * KW, g);
        }
    }
    if (warp > 0) {
        red[(warp - 1) * 64 + lane] = acc[0];
        red[(warp - 1) * 64 + 32 + lane] = acc[1];
    }
    __syncthreads();
    if (warp != 0) return;
    float v0 = acc[0], v1 = acc[1];
    for (int w2 = 1; w2 < KW; w2++) {
        v0 = __fadd_rn(v0, red[(w2 - 1) * 64 + lane]);
        v1 = __fadd_rn(v1, red[(w2 - 1) * 64 + 32 + lane]);
    }
    q4_epi_store(epi, tile, t, 1, g, t, v0, v1); // activation row t: lanes t = 0 store
}

} // namespace

extern "C" cudaError_t weft_cu_i8_prep(const float *X, int64_t ldx, int M, int64_t K, uint32_t *XL,
                                       cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (K <= 0 || K % 32) return cudaErrorInvalidValue;
    const int64_t warps = (int64_t)M * (K / 32), blocks = (warps * 32 + 255) / 256;
    return weft_pdl_launch(i8_prep_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, X, ldx, M, K, XL);
}

extern "C" cudaError_t weft_cu_matmul_i8x(const weft_cu_weight *w, const uint32_t *XL, int M,
                                          const weft_cu_epi *epi, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (w->kind != WEFT_CU_Q4F || !weft_cu_q4f_ok(w->rows, w->cols, w->group)) return cudaErrorInvalidValue;
    if (M != 1 || w->mode != WEFT_CU_OFF8 || w->sdt != WEFT_CU_S_F16 || w->group != 32 ||
        weft_cu_q4f_sb(w->cols) != SB || epi->mode != WEFT_CU_EPI_STORE || w->cols > 8192)
        return cudaErrorNotSupported;
    const WDev d = wdev(w);
    const int KW = weft_cu_q4_kw(w->rows, w->cols);
    const size_t smem =
        sizeof(float) * (size_t)(KW - 1) * 64 + (size_t)(w->cols / 32) * 32 * sizeof(uint32_t);
    const cudaError_t e = weft_smem_opt_in(i8x_kernel, smem); // (K sets smem: never lowered)
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(i8x_kernel, dim3((unsigned)(w->rows / 16)), dim3(KW * 32), smem, stream, d, XL,
                           *epi);
}
