// Prefill attention over query tiles (weft_cu_attention_tiles, cuda_kernels.h): the same arithmetic as the
// decode kernel (attention.cu), organised so that a tile's rows share each key block's operands.
//
// One block per (tile of up to 64/G consecutive rows of one stream, kv head j, span of WEFT_CU_ATTN_SPAN key
// blocks): its 64 row-heads (row, query head of the group) form four m-tiles of 16, one per warp. For each
// key block of the span (WEFT_CU_ATTN_KB positions aligned to absolute position 0, ascending) the block's
// threads stage K and Vᵀ as bf16 hi/lo planes in shared memory (keys past the tile's last position as
// zeros), then each warp runs attn_block (attn_mma.cuh) and folds the block into its rows' span partials
// (Fold's operations, ascending). At a row's last block of the span, a row whose keys fit one span writes
// o / l; any other row stores the span partial (m, l, o) to scratch and attention.cu's combine kernel folds
// the spans in ascending order — step for step what attention.cu's span and combine kernels compute, so a
// row gives the same bits whichever kernel runs it and whatever rows share its tile.
#include "cuda_kernels.h"
#include "attn_mma.cuh"
#include "pdl.cuh"

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN;
constexpr int kWarps = 4, kRowHeads = 16 * kWarps; // a block's row-heads: one m-tile of 16 per warp
constexpr int kMaxD = 128;

// Shared memory (u32 words): Q hi, lo [64][QS]; K hi, lo [KB][QS]; Vᵀ hi, lo [d][kAttnVS].
__host__ __device__ constexpr size_t tile_smem_words(int d) {
    return (size_t)2 * (kRowHeads + KB) * (size_t)(d / 2 + 4) + (size_t)2 * d * kAttnVS;
}

// Fold::add (attn_common.cuh) on the lane's elements of one row: m, l updated; returns the scale for its o.
__device__ __forceinline__ FoldScale fold_ml(float &m, float &l, float m2, float l2) {
    const FoldScale f = fold_scale(m, m2);
    l = f.mix(l, l2);
    m = f.mn;
    return f;
}

// The warp's span partials: a block's o_b folds in as attn_block hands out its n-tiles.
template <int DMAX> struct SpanFold {
    float ms[2], ls[2], os[DMAX / 8][4];
    FoldScale c[2];
    bool live[2];
    __device__ __forceinline__ void begin(const AttnBlock &b) {
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (live[r]) c[r] = fold_ml(ms[r], ls[r], b.m[r], b.l[r]);
    }
    __device__ __forceinline__ void tile(int nt, const float o[4]) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (live[i / 2]) os[nt][i] = c[i / 2].mix(os[nt][i], o[i]);
    }
};

template <int DMAX, bool F16>
__global__ void __launch_bounds__(kWarps * 32, 3)
    attn_tile_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows,
                     const weft_cu_tile *__restrict__ tiles, int Hq, int Hkv, int d, int layer, float scale,
                     float *scratch, int max_spans) {
    extern __shared__ __align__(16) uint32_t smw[];
    weft_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, j = blockIdx.y, span = blockIdx.z;
    const int g = lane >> 2, t = lane & 3;
    const int G = Hq / Hkv, kvd = Hkv * d, QS = d / 2 + 4, d8 = d / 8;
    const weft_cu_tile tl = tiles[blockIdx.x];
    const int r0 = tl.r0, nr = tl.n;
    const weft_cu_row row0 = rows[r0];
    int P = row0.pos;
    for (int k = 1; k < nr; k++) P = max(P, rows[r0 + k].pos);
    const int kb0 = span * SPAN, kb1 = min(kb0 + SPAN, P / KB + 1);
    if (kb0 >= kb1) return; // the tile's keys end before this span
    uint32_t *qh = smw, *ql = qh + kRowHeads * QS, *kh = ql + kRowHeads * QS, *kl = kh + KB * QS;
    uint32_t *vh = kl + KB * QS, *vl = vh + d * kAttnVS;
    const KvElem<F16> *Kc = kv_rows<F16>(row0, layer, 0, kvd) + (size_t)j * d,
                      *Vc = kv_rows<F16>(row0, layer, 1, kvd) + (size_t)j * d;

    attn_stage_q<F16>(qh, ql, QS, kRowHeads, d, [&](int rh) -> const float * {
        const int rr = rh / G;
        return rr < nr ? Q + ((size_t)(r0 + rr) * Hq + (size_t)j * G + rh % G) * d : nullptr;
    });
    // The lane's rows: r = 0 is row-head warp·16 + g, r = 1 is warp·16 + g + 8 (row rh / G, head rh % G).
    int pos[2];
    SpanFold<DMAX> sf;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int rr = (warp * 16 + g + 8 * r) / G;
        pos[r] = rr < nr ? rows[r0 + rr].pos : -1;
        sf.ms[r] = -INFINITY;
        sf.ls[r] = 0.0f;
    }
#pragma unroll
    for (int nt = 0; nt < DMAX / 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) sf.os[nt][i] = 0.0f;
    const SmemSrc src{{qh + warp * 16 * QS, ql + warp * 16 * QS, QS}, kh, kl, vh, vl};

    for (int kb = kb0; kb < kb1; kb++) {
        const int t0 = kb * KB;
        __syncthreads(); // Q is staged; the previous block's operands are consumed
        {                // K, then V (registers are short here: os holds 64)
            AttnKV<DMAX, kWarps * 32, F16> kv;
            kv.load_k(Kc, kvd, t0, P, d);
            kv.store_k(kh, kl, QS, d);
            kv.load_v(Vc, kvd, t0, P, d);
            kv.store_v(vh, vl, d);
        }
        __syncthreads();
        sf.live[0] = pos[0] >= t0;
        sf.live[1] = pos[1] >= t0;
        if (!__any_sync(0xffffffffu, sf.live[0] || sf.live[1])) continue; // the warp's rows end before kb
        attn_block<DMAX, SmemSrc, SpanFold<DMAX>, false, F16>(src, pos, t0, d, scale, sf);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!sf.live[r] || (kb != pos[r] / KB && kb != kb1 - 1))
                continue; // not the row's last block here
            const int rh = warp * 16 + g + 8 * r;
            const size_t orow = (size_t)(r0 + rh / G) * Hq + (size_t)j * G + rh % G;
            if (pos[r] + 1 <= SPAN * KB) { // one span: o / l
                float *out = Out + orow * d + 2 * t;
#pragma unroll
                for (int nt = 0; nt < DMAX / 8; nt++) {
                    if (nt >= d8) break;
                    out[8 * nt] = sf.os[nt][2 * r] / sf.ls[r];
                    out[8 * nt + 1] = sf.os[nt][2 * r + 1] / sf.ls[r];
                }
            } else { // the span partial, for the combine kernel
                float *p = scratch + (orow * max_spans + span) * (size_t)(d + 2);
                if (t == 0) {
                    p[0] = sf.ms[r];
                    p[1] = sf.ls[r];
                }
#pragma unroll
                for (int nt = 0; nt < DMAX / 8; nt++) {
                    if (nt >= d8) break;
                    p[2 + 8 * nt + 2 * t] = sf.os[nt][2 * r];
                    p[3 + 8 * nt + 2 * t] = sf.os[nt][2 * r + 1];
                }
            }
        }
    }
}

template <int DMAX, bool F16>
cudaError_t launch_tiles_f(dim3 grid, const float *q, float *out, const weft_cu_row *rows,
                           const weft_cu_tile *tiles, int Hq, int Hkv, int d, int layer, float scale,
                           float *scratch, int max_spans, cudaStream_t stream) {
    const size_t smem = 4 * tile_smem_words(d);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attn_tile_kernel<DMAX, F16>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    return weft_pdl_launch(attn_tile_kernel<DMAX, F16>, grid, dim3(kWarps * 32), smem, stream, q, out, rows,
                           tiles, Hq, Hkv, d, layer, scale, scratch, max_spans);
}

template <int DMAX>
cudaError_t launch_tiles(bool f16, dim3 grid, const float *q, float *out, const weft_cu_row *rows,
                         const weft_cu_tile *tiles, int Hq, int Hkv, int d, int layer, float scale,
                         float *scratch, int max_spans, cudaStream_t stream) {
    return f16 ? launch_tiles_f<DMAX, true>(grid, q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch,
                                            max_spans, stream)
               : launch_tiles_f<DMAX, false>(grid, q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch,
                                             max_spans, stream);
}

} // namespace

extern "C" int weft_cu_attention_tiles_ok(int Hq, int Hkv, int d) {
    return weft_cu_attention_ok(Hq, Hkv, d) && d <= kMaxD;
}

extern "C" size_t weft_cu_attention_tiles_smem(int d) {
    return 4 * tile_smem_words(d);
}

extern "C" int weft_cu_attention_tile_rows(int Hq, int Hkv) {
    return kRowHeads / (Hq / Hkv);
}

extern "C" cudaError_t weft_cu_attention_tiles(const float *q, float *out, const weft_cu_row *rows, int n,
                                               int max_pos, const weft_cu_tile *tiles, int n_tiles, int Hq,
                                               int Hkv, int d, int layer, float scale, float *scratch,
                                               int max_context, int f16, cudaStream_t stream) {
    if (n_tiles <= 0) return cudaSuccess;
    if (!weft_cu_attention_tiles_ok(Hq, Hkv, d) || max_pos >= max_context) return cudaErrorInvalidValue;
    const int spans = max_pos / (SPAN * KB) + 1, max_spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    const dim3 grid((unsigned)n_tiles, (unsigned)Hkv, (unsigned)spans);
    cudaError_t e;
    if (d <= 32)
        e = launch_tiles<32>(f16 != 0, grid, q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch,
                             max_spans, stream);
    else if (d <= 64)
        e = launch_tiles<64>(f16 != 0, grid, q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch,
                             max_spans, stream);
    else
        e = launch_tiles<128>(f16 != 0, grid, q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch,
                              max_spans, stream);
    if (e != cudaSuccess || spans == 1) return e;
    return weft_cu_attention_combine(out, rows, n, Hq, d, scratch, max_context, stream);
}
