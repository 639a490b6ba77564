// Prefill attention over query tiles (weft_cu_attention_tiles, cuda_kernels.h): the same arithmetic as the
// decode kernel (attention.cu), organised so that a tile's rows share each key block's loads.
//
// One block per (tile of up to 8·RH/G consecutive rows of one stream, kv head j): its 8·RH row-heads (row,
// query head of the group) are spread over 8 warps, RH per warp (RH = 4: 128 registers, two blocks per SM,
// measured 2-3% faster than RH = 8 at one block per SM; both kept, same bits). For each key block of
// WEFT_CU_ATTN_KB positions (aligned to absolute position 0, ascending, double-buffered into shared memory
// with cp.async), lane t of a warp is key t for the warp's 8 row-heads:
//   s_t = (q·k_t)·scale (fmaf over the head dims in order), m_b = max_t s_t, p_t = exp(s_t − m_b),
//   l_b = Σ p_t (xor-shuffle tree), o_b = Σ_t p_t·v_t (fmaf over the block's KB slots in order, slots past
//   the row's last key reading that key's row with p = 0),
// then the block folds into the row-head's span partial (fold() of attn_common.cuh, ascending), a full span
// folds into the total, and at the row's last block the output is o / l of the span (rows whose keys fit one
// span) or of the total — step for step what attention.cu's span kernel and combine kernel compute, so a row
// gives the same bits whichever kernel runs it and whatever rows share its tile.
#include "cuda_kernels.h"
#include "attn_common.cuh"
#include "pdl.cuh"
#include "cp_async.cuh"

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN;
constexpr int kWarps = 8;                    // a block's row-heads: kWarps · kRH (kRH per warp, 8 or 4)
constexpr int kMaxD = 128, kDJ = kMaxD / 32; // head dims per lane: c = lane + 32·jj

// Shared memory: q [64][DP], then per buffer b: K [KB][DP], V [KB][DP]; DP = d + 4 (16-byte rows, no bank
// conflicts when each lane reads its own key row); then per warp the block's probabilities [KB][8].
template <int kRH>
__global__ void __launch_bounds__(kWarps * 32, kRH == 4 ? 2 : 1)
    attn_tile_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows,
                     const weft_cu_tile *__restrict__ tiles, int Hq, int Hkv, int d, int layer, float scale) {
    constexpr int kRowHeads = kWarps * kRH;
    extern __shared__ __align__(16) float sm[];
    weft_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, j = blockIdx.y;
    const int G = Hq / Hkv, kvd = Hkv * d, DP = d + 4;
    const weft_cu_tile tl = tiles[blockIdx.x];
    const int r0 = tl.r0, nr = tl.n;
    const weft_cu_row row0 = rows[r0];
    int P = row0.pos;
    for (int k = 1; k < nr; k++) P = max(P, rows[r0 + k].pos);
    float *sq = sm, *kv0 = sm + kRowHeads * DP;
    float *sp = kv0 + 4 * KB * DP + warp * KB * kRH; // this warp's probabilities [key][row-head]
    const float *Kc = row0.kv + (size_t)(2 * layer) * (size_t)row0.cap * (size_t)kvd + (size_t)j * d;
    const float *Vc = Kc + (size_t)row0.cap * (size_t)kvd;
    const int nkb = P / KB + 1, d4 = d / 4;

    auto issue = [&](int kb) { // K and V rows of key block kb that exist (<= P) into buffer kb & 1
        float *Ks = kv0 + (size_t)(kb & 1) * 2 * KB * DP, *Vs = Ks + KB * DP;
        const int t0 = kb * KB, nrow = min(KB, P + 1 - t0);
        for (int idx = tid; idx < 2 * nrow * d4; idx += kWarps * 32) {
            const int which = idx / (nrow * d4), rem = idx % (nrow * d4), rr = rem / d4, c4 = rem % d4;
            const float *src = (which ? Vc : Kc) + (size_t)(t0 + rr) * kvd + 4 * c4;
            cp_async<16>((which ? Vs : Ks) + rr * DP + 4 * c4, src, true);
        }
        cp_commit();
    };
    issue(0);
    for (int i = tid; i < kRowHeads * d; i += kWarps * 32) {
        const int rh = i / d, c = i % d, rr = rh / G, gg = rh % G;
        sq[rh * DP + c] = rr < nr ? Q[((size_t)(r0 + rr) * Hq + (size_t)j * G + gg) * d + c] : 0.0f;
    }

    // This warp's row-heads: rh = warp·8 + i, row rr = rh / G of the tile, head gg = rh % G of the group.
    int pos[kRH];
    bool act[kRH];
    float ms[kRH], ls[kRH], os[kRH][kDJ], mt[kRH], lt[kRH], ot[kRH][kDJ];
#pragma unroll
    for (int i = 0; i < kRH; i++) {
        const int rh = warp * kRH + i, rr = rh / G;
        act[i] = rr < nr;
        pos[i] = act[i] ? rows[r0 + rr].pos : -1;
        ms[i] = mt[i] = -INFINITY;
        ls[i] = lt[i] = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kDJ; jj++) os[i][jj] = ot[i][jj] = 0.0f;
    }

    for (int kb = 0; kb < nkb; kb++) {
        if (kb + 1 < nkb) {
            issue(kb + 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const float *Ks = kv0 + (size_t)(kb & 1) * 2 * KB * DP, *Vs = Ks + KB * DP;
        const int t0 = kb * KB;
        // scores of key `lane` for the 8 row-heads, dims in order
        float acc[kRH];
#pragma unroll
        for (int i = 0; i < kRH; i++) acc[i] = 0.0f;
        const float *krow = Ks + lane * DP;
        for (int c = 0; c < d; c += 4) {
            const float4 k4 = *reinterpret_cast<const float4 *>(krow + c);
#pragma unroll
            for (int i = 0; i < kRH; i++) {
                const float4 q4 = *reinterpret_cast<const float4 *>(sq + (warp * kRH + i) * DP + c);
                acc[i] = fmaf(q4.x, k4.x, acc[i]);
                acc[i] = fmaf(q4.y, k4.y, acc[i]);
                acc[i] = fmaf(q4.z, k4.z, acc[i]);
                acc[i] = fmaf(q4.w, k4.w, acc[i]);
            }
        }
        // softmax of the block per row-head (lane = key); p goes to shared memory [key][row-head]
        float mb[kRH], lb[kRH];
        bool live[kRH], full[kRH];
#pragma unroll
        for (int i = 0; i < kRH; i++) {
            live[i] = act[i] && t0 <= pos[i]; // warp-uniform: the row has keys in this block
            full[i] = live[i] && t0 + KB - 1 <= pos[i];
            mb[i] = lb[i] = 0.0f;
            if (!live[i]) continue;
            const int nv = min(KB, pos[i] + 1 - t0);
            const bool valid = lane < nv;
            const float sc = valid ? acc[i] * scale : -INFINITY;
            mb[i] = warp_max(sc);
            const float p = valid ? expf(sc - mb[i]) : 0.0f;
            lb[i] = warp_sum(p);
            sp[lane * kRH + i] = p;
        }
        __syncwarp();
        // o_b = Σ_kk p_kk·v_kk in key order: rows whose block is full share each V row's loads; a row's last,
        // partial block reads its last key's row for the slots past it (p = 0 there), as attention.cu does
        float o[kRH][kDJ];
#pragma unroll
        for (int i = 0; i < kRH; i++)
#pragma unroll
            for (int jj = 0; jj < kDJ; jj++) o[i][jj] = 0.0f;
        for (int kk = 0; kk < KB; kk++) {
            float pk[kRH];
#pragma unroll
            for (int i4 = 0; i4 < kRH; i4 += 4) {
                const float4 pa = *reinterpret_cast<const float4 *>(sp + kk * kRH + i4);
                pk[i4] = pa.x, pk[i4 + 1] = pa.y, pk[i4 + 2] = pa.z, pk[i4 + 3] = pa.w;
            }
#pragma unroll
            for (int jj = 0; jj < kDJ; jj++) {
                if (jj * 32 >= d) break;
                const int c = jj * 32 + lane;
                const float v = Vs[kk * DP + (c < d ? c : d - 1)];
#pragma unroll
                for (int i = 0; i < kRH; i++)
                    if (full[i]) o[i][jj] = fmaf(pk[i], v, o[i][jj]);
            }
        }
#pragma unroll
        for (int i = 0; i < kRH; i++) {
            if (!live[i] || full[i]) continue;
            const int nv = pos[i] + 1 - t0;
            for (int kk = 0; kk < KB; kk++) {
                const float pk = sp[kk * kRH + i];
                const float *vrow = Vs + min(kk, nv - 1) * DP;
#pragma unroll
                for (int jj = 0; jj < kDJ; jj++) {
                    if (jj * 32 >= d) break;
                    const int c = jj * 32 + lane;
                    o[i][jj] = fmaf(pk, vrow[c < d ? c : d - 1], o[i][jj]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kRH; i++) {
            if (!live[i]) continue;
            // fold the block into the span (Fold::add, its expf factors shared by the head's dims)
            {
                const float m = mb[i], mn = fmaxf(ms[i], m), ca = expf(ms[i] - mn), cb = expf(m - mn);
                ls[i] = __fadd_rn(__fmul_rn(ls[i], ca), __fmul_rn(lb[i], cb));
#pragma unroll
                for (int jj = 0; jj < kDJ; jj++)
                    os[i][jj] = __fadd_rn(__fmul_rn(os[i][jj], ca), __fmul_rn(o[i][jj], cb));
                ms[i] = mn;
            }
            const bool row_end = kb == pos[i] / KB, span_end = (kb + 1) % SPAN == 0;
            const bool single = pos[i] + 1 <= SPAN * KB;
            if (!single && (span_end || row_end)) { // the span partial into the total (the combine kernel)
                const float mn = fmaxf(mt[i], ms[i]), ca = expf(mt[i] - mn), cb = expf(ms[i] - mn);
                lt[i] = __fadd_rn(__fmul_rn(lt[i], ca), __fmul_rn(ls[i], cb));
#pragma unroll
                for (int jj = 0; jj < kDJ; jj++)
                    ot[i][jj] = __fadd_rn(__fmul_rn(ot[i][jj], ca), __fmul_rn(os[i][jj], cb));
                mt[i] = mn;
                ms[i] = -INFINITY;
                ls[i] = 0.0f;
#pragma unroll
                for (int jj = 0; jj < kDJ; jj++) os[i][jj] = 0.0f;
            }
            if (row_end) {
                const int rh = warp * kRH + i;
                float *out = Out + ((size_t)(r0 + rh / G) * Hq + (size_t)j * G + rh % G) * d;
#pragma unroll
                for (int jj = 0; jj < kDJ; jj++) {
                    const int c = jj * 32 + lane;
                    if (c < d) out[c] = single ? os[i][jj] / ls[i] : ot[i][jj] / lt[i];
                }
            }
        }
        __syncthreads(); // the buffer is refilled two blocks later
    }
}

} // namespace

extern "C" int weft_cu_attention_tiles_ok(int Hq, int Hkv, int d) {
    return Hkv > 0 && Hq % Hkv == 0 && kWarps * 8 % (Hq / Hkv) == 0 && kWarps * 4 % (Hq / Hkv) == 0 &&
           d > 0 && d <= kMaxD && d % 4 == 0;
}

extern "C" int weft_cu_attention_tile_rows(int Hq, int Hkv, int rh) {
    return kWarps * rh / (Hq / Hkv);
}

template <int kRH>
static cudaError_t launch_tiles(const float *q, float *out, const weft_cu_row *rows,
                                const weft_cu_tile *tiles, int n_tiles, int Hq, int Hkv, int d, int layer,
                                float scale, cudaStream_t stream) {
    const size_t smem =
        sizeof(float) * ((size_t)(d + 4) * (kWarps * kRH + 4 * KB) + (size_t)kWarps * KB * kRH);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_tile_kernel<kRH>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return weft_pdl_launch(attn_tile_kernel<kRH>, dim3((unsigned)n_tiles, (unsigned)Hkv), dim3(kWarps * 32),
                           smem, stream, q, out, rows, tiles, Hq, Hkv, d, layer, scale);
}

extern "C" cudaError_t weft_cu_attention_tiles(const float *q, float *out, const weft_cu_row *rows,
                                               const weft_cu_tile *tiles, int n_tiles, int Hq, int Hkv, int d,
                                               int layer, float scale, int rh, cudaStream_t stream) {
    if (n_tiles <= 0) return cudaSuccess;
    if (!weft_cu_attention_tiles_ok(Hq, Hkv, d) || (rh != 4 && rh != 8)) return cudaErrorInvalidValue;
    if (rh == 4) return launch_tiles<4>(q, out, rows, tiles, n_tiles, Hq, Hkv, d, layer, scale, stream);
    return launch_tiles<8>(q, out, rows, tiles, n_tiles, Hq, Hkv, d, layer, scale, stream);
}
