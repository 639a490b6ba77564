// Per-row kernels: RMSNorm (one block per row, fixed order), RoPE + KV store, SwiGLU.
#include "cuda_kernels.h"
#include "kv_cache.cuh"
#include "pdl.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"

namespace {

template <int T>
__global__ void __launch_bounds__(T)
    rmsnorm_kernel(float *Y, int64_t ldy, const float *X, int64_t ldx, const int *__restrict__ rowmap,
                   const float *__restrict__ w, int n, float eps, uint32_t *F, float *S, bool f16) {
    __shared__ float part[T / 32];
    __shared__ float inv_s;
    const int r = blockIdx.x, t = threadIdx.x;
    // With F, block y of gridDim.y writes the chunks (8 elements) [c0, c1) of the row — a multiple of 4 each,
    // so a sub-block's four chunks stay in consecutive lanes — after the same full-row reduction as every
    // other block of the row (so the same inv: the slices only spread the output work over more SMs).
    const int nch = n / 8, cps = ((nch + (int)gridDim.y - 1) / (int)gridDim.y + 3) & ~3;
    const int c0 = min(nch, (int)blockIdx.y * cps), c1 = min(nch, c0 + cps);
    // The prepared path's norm weights (constant: loaded before the predecessor ends, pdl.cuh): chunks c0 + t
    // and c0 + t + T, the ones this thread scales below when the slice has at most 2·T chunks (else read
    // there).
    const bool wpre = F && w && c1 - c0 <= 2 * T;
    float4 wv[4];
    for (int j = 0; j < 2; j++) {
        const int c = c0 + t + j * T;
        const bool ok = wpre && c < c1;
        wv[2 * j] = ok ? __ldg(reinterpret_cast<const float4 *>(w + 8 * c)) : make_float4(0.f, 0.f, 0.f, 0.f);
        wv[2 * j + 1] =
            ok ? __ldg(reinterpret_cast<const float4 *>(w + 8 * c + 4)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    weft_pdl_enter();
    const float *x = X + (int64_t)(rowmap ? rowmap[r] : r) * ldx;
    float *y = Y ? Y + (int64_t)r * ldy : nullptr; // (Y NULL: only the prepared copy, F)
    // 16-byte aligned rows: the prepared path moves its chunks as float4 (8 scalar accesses 32 bytes apart
    // per lane cost a 2,048-row norm ≈ 3x its bytes' time: bench/NOTES.md session 25)
    const bool vec = (((uintptr_t)x | (uintptr_t)y) & 15) == 0;
    float ss = 0.0f;
    for (int i = t; i < n; i += T) ss = fmaf(x[i], x[i], ss);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
    if ((t & 31) == 0) part[t >> 5] = ss;
    __syncthreads();
    if (t == 0) {
        float tot = part[0];
        for (int i = 1; i < T / 32; i++) tot = __fadd_rn(tot, part[i]);
        inv_s = 1.0f / sqrtf(tot / (float)n + eps);
    }
    __syncthreads();
    const float inv = inv_s;
    if (F) { // the prepared copy for the 4-bit matmul (weft_cu_xq): chunks of 8 elements, warp-uniform loop;
             // each chunk's y values are stored here too (the same expression as the loop below)
        const int lane = t & 31;
        uint32_t *Fr = F + (int64_t)r * n;
        float *Sr = S + (int64_t)r * (n / 32);
        for (int base = c0 + t - lane, j = 0; base < c1; base += T, j++) {
            const int c = base + lane;
            const bool ok = c < c1;
            float v[8], wk[8], xv[8];
            if (wpre) {
                const float4 a = j == 0 ? wv[0] : wv[2], b = j == 0 ? wv[1] : wv[3];
                wk[0] = a.x, wk[1] = a.y, wk[2] = a.z, wk[3] = a.w, wk[4] = b.x, wk[5] = b.y, wk[6] = b.z,
                wk[7] = b.w;
            }
            const int k0 = 8 * (ok ? c : 0);
            if (vec) { // the chunk's 8 elements as two 16-byte loads (and stores below)
                const float4 a = *reinterpret_cast<const float4 *>(x + k0),
                             b = *reinterpret_cast<const float4 *>(x + k0 + 4);
                xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z,
                xv[7] = b.w;
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) xv[e] = x[k0 + e];
            }
#pragma unroll
            for (int e = 0; e < 8; e++) { // the same expression as y[i] below
                const float wke = wpre ? wk[e] : w ? w[k0 + e] : 1.0f;
                v[e] = w ? wke * (xv[e] * inv) : xv[e] * inv;
            }
            if (ok && y && vec) {
                *reinterpret_cast<float4 *>(y + k0) = make_float4(v[0], v[1], v[2], v[3]);
                *reinterpret_cast<float4 *>(y + k0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
            } else if (ok && y) {
#pragma unroll
                for (int e = 0; e < 8; e++) y[k0 + e] = v[e];
            }
            const float s = q4_prep_chunk(v, Fr + (ok ? c >> 2 : 0) * 32, c & 3, ok, f16);
            if (ok && (c & 3) == 0) Sr[c >> 2] = s;
        }
        return;
    }
    for (int i = t; i < n; i += T) y[i] = w ? w[i] * (x[i] * inv) : x[i] * inv;
}

// One block per (row, group of kRopeHeads heads of q|k): thread (i, h) rotates pair i of head h (the angle is
// recomputed per head: the same expression, so the same bits, and no serial pass over the heads) and, for a
// k head, writes the rotated pair into the KV cache row as well (F16: an f16 cache, kv_cache.cuh); the block
// then copies its k heads' other dimensions and the matching v heads. No thread reads what another writes,
// so no barrier. The first kRopePre inv_freq values of each thread are loaded before the PDL wait (uploaded
// once at load, written by no kernel: pdl.cuh), so the angle waits only for the row's position.
constexpr int kRopeHeads = 4, kRopePre = 4;
template <bool F16>
__global__ void __launch_bounds__(128)
    rope_store_kernel(float *q, float *k, const float *v, const weft_cu_row *__restrict__ rows, int Hq,
                      int Hkv, int d, int layer, weft_cu_rope rope) {
    const int r = blockIdx.x, h0 = blockIdx.y * kRopeHeads, t = threadIdx.x, T = blockDim.x;
    const int half = rope.rot / 2, nh = min(kRopeHeads, Hq + Hkv - h0), npair = half * nh;
    float fpre[kRopePre];
#pragma unroll
    for (int j = 0; j < kRopePre; j++) fpre[j] = t + j * T < npair ? rope.inv_freq[(t + j * T) % half] : 0.0f;
    weft_pdl_enter();
    const weft_cu_row row = rows[r];
    const int qd = Hq * d, kvd = Hkv * d;
    float *qr = q + (int64_t)r * qd, *kr = k + (int64_t)r * kvd;
    KvElem<F16> *K = kv_rows<F16>(row, layer, 0, kvd) + (size_t)row.pos * (size_t)kvd,
                *V = kv_rows<F16>(row, layer, 1, kvd) + (size_t)row.pos * (size_t)kvd;
    auto rotate = [&](int idx, float f) {
        const int h = h0 + idx / half;
        int a, b;
        weft_rope_dims(rope, idx % half, a, b);
        float *x = h < Hq ? qr + (int64_t)h * d : kr + (int64_t)(h - Hq) * d;
        float y0, y1;
        weft_rope_rotate(row.pos, f, rope.attn_factor, x[a], x[b], y0, y1);
        x[a] = y0;
        x[b] = y1;
        if (h >= Hq) {
            K[(int64_t)(h - Hq) * d + a] = kv_elem<F16>(y0);
            K[(int64_t)(h - Hq) * d + b] = kv_elem<F16>(y1);
        }
    };
#pragma unroll
    for (int j = 0; j < kRopePre; j++)
        if (t + j * T < npair) rotate(t + j * T, fpre[j]);
    for (int idx = t + kRopePre * T; idx < npair; idx += T) rotate(idx, rope.inv_freq[idx % half]);
    // The rotated dimensions are [0, rot) either way (pairs (i, i + rot/2) or (2i, 2i + 1), i < rot/2).
    const int k0 = max(h0, Hq) - Hq, k1 = h0 + nh - Hq; // this block's kv heads [k0, k1)
    const float *vr = v + (int64_t)r * kvd;
    for (int i = k0 * d + t; i < k1 * d; i += T) {
        if (i % d >= rope.rot) K[i] = kv_elem<F16>(kr[i]);
        V[i] = kv_elem<F16>(vr[i]);
    }
}

__global__ void swiglu_kernel(float *g, const float *__restrict__ u, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

} // namespace

static cudaError_t rmsnorm_launch(float *Y, int64_t ldy, const float *X, int64_t ldx, const int *rowmap,
                                  const float *w, int n_rows, int n, float eps, uint32_t *F, float *S,
                                  bool f16, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    // Few rows (decode): the prepared path's output work in 4 slices per row (the kernel's header); one block
    // per row would leave all but a few SMs idle behind a serial chain (measured 4.5 µs per norm at batch 1).
    const dim3 grid((unsigned)n_rows, F && n_rows < 32 ? 4u : 1u);
    switch (weft_norm_threads(n)) {
    case 256:
        return weft_pdl_launch(rmsnorm_kernel<256>, grid, dim3(256), 0, stream, Y, ldy, X, ldx, rowmap, w, n,
                               eps, F, S, f16);
    case 128:
        return weft_pdl_launch(rmsnorm_kernel<128>, grid, dim3(128), 0, stream, Y, ldy, X, ldx, rowmap, w, n,
                               eps, F, S, f16);
    default:
        return weft_pdl_launch(rmsnorm_kernel<32>, grid, dim3(32), 0, stream, Y, ldy, X, ldx, rowmap, w, n,
                               eps, F, S, f16);
    }
}

extern "C" cudaError_t weft_cu_rmsnorm(float *Y, int64_t ldy, const float *X, int64_t ldx, const int *rowmap,
                                       const float *w, int n_rows, int n, float eps, cudaStream_t stream) {
    return rmsnorm_launch(Y, ldy, X, ldx, rowmap, w, n_rows, n, eps, nullptr, nullptr, false, stream);
}

extern "C" cudaError_t weft_cu_rmsnorm_xq(float *Y, int64_t ldy, const float *X, int64_t ldx,
                                          const int *rowmap, const float *w, int n_rows, int n, float eps,
                                          const weft_cu_xq *xq, cudaStream_t stream) {
    if (xq->K != n || n % 32 || Y == X) return cudaErrorInvalidValue; // (Y NULL: no fp32 copy)
    return rmsnorm_launch(Y, ldy, X, ldx, rowmap, w, n_rows, n, eps, xq->f, xq->s, xq->f16 != 0, stream);
}

extern "C" cudaError_t weft_cu_rope_store(float *q, float *k, const float *v, const weft_cu_row *rows, int n,
                                          int Hq, int Hkv, int d, int layer, const weft_cu_rope *rope,
                                          int f16, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const dim3 grid((unsigned)n, (unsigned)((Hq + Hkv + kRopeHeads - 1) / kRopeHeads));
    return f16 ? weft_pdl_launch(rope_store_kernel<true>, grid, dim3(128), 0, stream, q, k, v, rows, Hq, Hkv,
                                 d, layer, *rope)
               : weft_pdl_launch(rope_store_kernel<false>, grid, dim3(128), 0, stream, q, k, v, rows, Hq, Hkv,
                                 d, layer, *rope);
}

extern "C" cudaError_t weft_cu_swiglu(float *g, const float *u, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65535) blocks = 65535;
    swiglu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(g, u, n);
    return cudaGetLastError();
}
