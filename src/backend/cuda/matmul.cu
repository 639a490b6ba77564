// Row-invariant matmul over every device weight layout, and the embedding lookup that shares its decoders.
// See cuda_kernels.h for the contract; the embedding reproduces src/model/format's fp32 decoding exactly, the
// matmul's quantized dot products factor the scale out of each unit (cuda_decode.cuh says how).
#include "cuda_kernels.h"
#include "cuda_decode.cuh"

#include <type_traits>

namespace {

// Decoders with kMma (DecQ4F) belong to the tensor-core kernel (mma_q4.cu); only their unit() is used here.
template <class D, class = void> struct IsMma : std::false_type {};
template <class D> struct IsMma<D, std::void_t<decltype(D::kMma)>> : std::true_type {};

constexpr int kWarps = 4; // warps per block; each warp owns D::OR consecutive output rows

// One warp computes D::OR outputs for R rows of X. Lane l walks units l, l+32, ... of the weight rows; for
// each unit it loads the OR weight chunks once, then for each X row loads the unit's x (and its sum when the
// layout needs it) and adds each output's unit contribution (D::dot, a fixed order) to that output's running
// sum.
template <class D, int R>
__global__ void __launch_bounds__(kWarps * 32)
    mm_kernel(WDev w, int64_t N, const float *__restrict__ X, int64_t ldx, int M, float *Y, int64_t ldy,
              const float *__restrict__ bias, int accumulate) {
    constexpr int OR = D::OR;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o0 = ((int64_t)blockIdx.x * kWarps + warp) * OR;
    if (o0 >= N) return;
    const int i0 = blockIdx.y * R;
    float acc[R][OR];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int oo = 0; oo < OR; oo++) acc[r][oo] = 0.0f;
    const float *xr[R];
#pragma unroll
    for (int r = 0; r < R; r++) xr[r] = X + (int64_t)min(i0 + r, M - 1) * ldx;
    int64_t orow[OR];
#pragma unroll
    for (int oo = 0; oo < OR; oo++) orow[oo] = o0 + oo < N ? o0 + oo : N - 1;
    const int64_t nu = w.cols / D::U;
    for (int64_t u = lane; u < nu; u += 32) {
        typename D::Raw raw[OR];
#pragma unroll
        for (int oo = 0; oo < OR; oo++) raw[oo] = D::load(w, orow[oo], u);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float xv[D::U];
            const float4 *xp = reinterpret_cast<const float4 *>(xr[r] + u * D::U);
#pragma unroll
            for (int j = 0; j < D::U / 4; j++) {
                float4 t = xp[j];
                xv[4 * j] = t.x;
                xv[4 * j + 1] = t.y;
                xv[4 * j + 2] = t.z;
                xv[4 * j + 3] = t.w;
            }
            float sx = 0.0f;
            if (D::kSumX) {
#pragma unroll
                for (int j = 0; j < D::U; j++) sx = __fadd_rn(sx, xv[j]);
            }
#pragma unroll
            for (int oo = 0; oo < OR; oo++) acc[r][oo] = D::dot(raw[oo], xv, sx, acc[r][oo]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int oo = 0; oo < OR; oo++) {
            float v = acc[r][oo];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
            acc[r][oo] = v;
        }
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (i0 + r >= M) break;
#pragma unroll
        for (int oo = 0; oo < OR; oo++) {
            const int64_t o = o0 + oo;
            if (o >= N) break;
            float y = acc[r][oo];
            if (bias) y = __fadd_rn(y, bias[o]);
            float *dst = Y + (int64_t)(i0 + r) * ldy + o;
            *dst = accumulate ? __fadd_rn(*dst, y) : y;
        }
    }
}

template <class D> __global__ void embed_kernel(WDev w, const weft_cu_row *__restrict__ rows, float *X) {
    const int r = blockIdx.x;
    const int64_t tok = rows[r].token, nu = w.cols / D::U;
    float *x = X + (int64_t)r * w.cols;
    for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
        float wv[D::U];
        D::unit(w, tok, u, wv);
#pragma unroll
        for (int j = 0; j < D::U; j++) x[u * D::U + j] = wv[j];
    }
}

template <class D, int R>
cudaError_t launch_mm(const WDev &w, int64_t N, const float *X, int64_t ldx, int M, float *Y, int64_t ldy,
                      const float *bias, int accumulate, cudaStream_t st) {
    constexpr int OR = D::OR;
    dim3 grid((unsigned)((N + kWarps * OR - 1) / (kWarps * OR)), (unsigned)((M + R - 1) / R));
    mm_kernel<D, R><<<grid, kWarps * 32, 0, st>>>(w, N, X, ldx, M, Y, ldy, bias, accumulate);
    return cudaGetLastError();
}

template <class D> struct Launch {
    static cudaError_t mm(const WDev &w, int64_t N, const float *X, int64_t ldx, int M, float *Y, int64_t ldy,
                          const float *bias, int accumulate, cudaStream_t st) {
        if constexpr (IsMma<D>::value) {
            return cudaErrorNotSupported; // weft_cu_matmul sends these to weft_cu_matmul_q4f
        } else {
            return mm_fp32(w, N, X, ldx, M, Y, ldy, bias, accumulate, st);
        }
    }
    static cudaError_t mm_fp32(const WDev &w, int64_t N, const float *X, int64_t ldx, int M, float *Y,
                               int64_t ldy, const float *bias, int accumulate, cudaStream_t st) {
        // The tile only sets how many rows share one pass over the weights; every sum is the same (see
        // header).
        if (M <= 2) return launch_mm<D, 1>(w, N, X, ldx, M, Y, ldy, bias, accumulate, st);
        // 4-bit units keep 32 x values and 4 outputs' weights in registers: 8 rows at once would spill.
        if constexpr (D::U == 32) {
            return launch_mm<D, 4>(w, N, X, ldx, M, Y, ldy, bias, accumulate, st);
        } else {
            if (M <= 16) return launch_mm<D, 4>(w, N, X, ldx, M, Y, ldy, bias, accumulate, st);
            return launch_mm<D, 8>(w, N, X, ldx, M, Y, ldy, bias, accumulate, st);
        }
    }
    static cudaError_t embed(const WDev &w, const weft_cu_row *rows, int n, float *X, cudaStream_t st) {
        embed_kernel<D><<<n, 128, 0, st>>>(w, rows, X);
        return cudaGetLastError();
    }
};

// Calls F<Decoder>::fn(args...) for the weight's layout; cudaErrorNotSupported for a combination with no
// decoder (the backend refuses those at upload, so this is a guard).
template <template <class> class F, class Fn> cudaError_t dispatch(const weft_cu_weight *w, Fn &&fn) {
    switch (w->kind) {
    case WEFT_CU_F32:
        return fn(F<DecF32>());
    case WEFT_CU_F16:
        return fn(F<DecF16>());
    case WEFT_CU_BF16:
        return fn(F<DecBF16>());
    case WEFT_CU_Q4:
        if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
            return fn(F<DecQ4<WEFT_CU_OFF8, WEFT_CU_S_F16>>());
        if (w->mode == WEFT_CU_AFFINE) {
            if (w->sdt == WEFT_CU_S_F32) return fn(F<DecQ4<WEFT_CU_AFFINE, WEFT_CU_S_F32>>());
            if (w->sdt == WEFT_CU_S_F16) return fn(F<DecQ4<WEFT_CU_AFFINE, WEFT_CU_S_F16>>());
            if (w->sdt == WEFT_CU_S_BF16) return fn(F<DecQ4<WEFT_CU_AFFINE, WEFT_CU_S_BF16>>());
        }
        break;
    case WEFT_CU_Q4F:
        if (w->mode == WEFT_CU_OFF8 && w->sdt == WEFT_CU_S_F16)
            return fn(F<DecQ4F<WEFT_CU_OFF8, WEFT_CU_S_F16>>());
        if (w->mode == WEFT_CU_AFFINE) {
            if (w->sdt == WEFT_CU_S_F32) return fn(F<DecQ4F<WEFT_CU_AFFINE, WEFT_CU_S_F32>>());
            if (w->sdt == WEFT_CU_S_F16) return fn(F<DecQ4F<WEFT_CU_AFFINE, WEFT_CU_S_F16>>());
            if (w->sdt == WEFT_CU_S_BF16) return fn(F<DecQ4F<WEFT_CU_AFFINE, WEFT_CU_S_BF16>>());
        }
        break;
    case WEFT_CU_Q8:
        if (w->mode == WEFT_CU_SYM && w->sdt == WEFT_CU_S_F16)
            return fn(F<DecQ8<WEFT_CU_SYM, WEFT_CU_S_F16>>());
        if (w->mode == WEFT_CU_AFFINE) {
            if (w->sdt == WEFT_CU_S_F32) return fn(F<DecQ8<WEFT_CU_AFFINE, WEFT_CU_S_F32>>());
            if (w->sdt == WEFT_CU_S_F16) return fn(F<DecQ8<WEFT_CU_AFFINE, WEFT_CU_S_F16>>());
            if (w->sdt == WEFT_CU_S_BF16) return fn(F<DecQ8<WEFT_CU_AFFINE, WEFT_CU_S_BF16>>());
        }
        break;
    }
    return cudaErrorNotSupported;
}

} // namespace

extern "C" cudaError_t weft_cu_matmul(const weft_cu_weight *w, const float *X, int64_t ldx, int M, float *Y,
                                      int64_t ldy, const float *bias, int accumulate, cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (w->cols % 32 || ldx % 4) return cudaErrorInvalidValue;
    if (w->kind == WEFT_CU_Q4F) return weft_cu_matmul_q4f(w, X, ldx, M, Y, ldy, bias, accumulate, stream);
    const WDev d = wdev(w);
    return dispatch<Launch>(
        w, [&](auto l) { return decltype(l)::mm(d, w->rows, X, ldx, M, Y, ldy, bias, accumulate, stream); });
}

extern "C" cudaError_t weft_cu_embed(const weft_cu_weight *w, const weft_cu_row *rows, int n, float *X,
                                     cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (w->cols % 32) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    return dispatch<Launch>(w, [&](auto l) { return decltype(l)::embed(d, rows, n, X, stream); });
}

extern "C" size_t weft_cu_weight_bytes(weft_cu_kind kind, weft_cu_qmode mode, weft_cu_sdt sdt, int group,
                                       int64_t rows, int64_t cols) {
    const size_t n = (size_t)rows * (size_t)cols;
    switch (kind) {
    case WEFT_CU_F32:
        return n * 4;
    case WEFT_CU_F16:
    case WEFT_CU_BF16:
        return n * 2;
    case WEFT_CU_Q4:
    case WEFT_CU_Q4F:
    case WEFT_CU_Q8: {
        const size_t q = kind != WEFT_CU_Q8 ? n / 2 : n;
        const size_t ss = sdt == WEFT_CU_S_F32 ? 4 : 2, ng = group > 0 ? n / (size_t)group : 0;
        return q + ng * ss * (mode == WEFT_CU_AFFINE ? 2 : 1);
    }
    }
    return 0;
}
