// Prefill attention over query tiles (weft_cu_attention_tiles, cuda_kernels.h): the same arithmetic as the
// decode kernel (attention.cu), organised so that a tile's rows share each key block's operands.
//
// One block of NW warps per (tile of up to 16·NW/G consecutive rows of one stream, kv head j, group of
// span_group spans of WEFT_CU_ATTN_SPAN key blocks): its 16·NW row-heads (row, query head of the group) form
// NW m-tiles of 16, one per warp. Q is staged once (every load in flight). For each key block of the group
// (WEFT_CU_ATTN_KB positions aligned to absolute position 0, ascending) its K and V reach shared memory
// (keys past the tile's last position as zeros) while the previous block is computed — fp32 mode: loaded
// into registers, then stored as bf16 hi/lo planes of K and Vᵀ (AttnKV); f16 mode: the cache's f16 rows
// copied as they are (cp.async, two stages), V's B fragments then read with ldmatrix .trans, the same words
// in the same fragment positions as the Vᵀ plane gives — and each warp runs attn_block (attn_mma.cuh) and
// folds the block into its rows' span partials (Fold's operations, ascending; the partials restart at each
// span's first block). At a row's last block of a span, a row whose keys fit one span writes o / l; with one
// group of spans per block (gridDim.z == 1) any other row folds the span into its total (the running o kept
// in its output row by the lane that owns it) and writes o / l at its last span; otherwise it stores the span
// partial (m, l, o) to scratch and attention.cu's combine kernel folds the spans in ascending order — step
// for step what attention.cu's span and combine kernels compute, so a row gives the same bits whichever
// kernel runs it, whatever rows share its tile and however many warps and spans a block takes.
// A key block that every row of a warp sees whole (all but a tile's last one or two; never for a warp holding
// a padded row, with 3, 5, 6 or 7 heads per kv head) runs attn_block's FULL form in the default 8-warp
// kernels: no mask and no liveness selects — the same operations on the same values (the tile kernel 11%
// fewer instructions, 9% faster: bench/NOTES.md session 26).
// The wgmma form (warps = -8: f16, d = 128, sm_90a; attn_wgmma.cuh) computes each key block's step on wgmma,
// a warpgroup's 64 row-heads at once, with the same bits (bench_cuda_attention); not the default: at parity
// with the mma.sync form (harness +1%, model prefill 8k −1.4%; bench/NOTES.md session 19).
#include "cuda_kernels.h"
#include "attn_mma.cuh"
#include "attn_wgmma.cuh"
#include "cp_async.cuh"
#include "pdl.cuh"

namespace {

constexpr int KB = WEFT_CU_ATTN_KB, SPAN = WEFT_CU_ATTN_SPAN;
constexpr int kMaxD = 128;
constexpr int kDefaultWarps = 8; // 128 row-heads per block: each staged key block serves twice the rows of 4
constexpr long kFoldHerePairs = 256; // (tile, kv head) pairs from which one block takes all of a tile's spans
constexpr int kWgWarps = -8;  // `warps` of the wgmma form: 8 warps as 2 warpgroups (attn_wgmma.cuh), and of
constexpr int kWgWarps2 = -7; // the same with P·V's quarters in two alternating accumulator sets (timing)

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
    __device__ __forceinline__ void reset() {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            ms[r] = -INFINITY;
            ls[r] = 0.0f;
        }
#pragma unroll
        for (int nt = 0; nt < DMAX / 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) os[nt][i] = 0.0f;
    }
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

// Q's RH row-heads (row_of(rh): d fp32 values, or nullptr for a padded row of zeros) staged as planes by the
// block's NT threads, every load issued before the first store (WG: in AttnWgLayout::q_off's order).
template <int DMAX, int NT, int RH, bool F16, bool WG, class RowOf>
__device__ __forceinline__ void tile_stage_q(uint32_t *qh, uint32_t *ql, int qs, int d, RowOf row_of) {
    constexpr int U = (RH * (DMAX / 8) + NT - 1) / NT;
    const int d8 = d / 8;
    float4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = threadIdx.x + u * NT;
        a[u] = b[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float *src = i < RH * d8 ? row_of(i / d8) : nullptr;
        if (src) {
            a[u] = *reinterpret_cast<const float4 *>(src + 8 * (i % d8));
            b[u] = *reinterpret_cast<const float4 *>(src + 8 * (i % d8) + 4);
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = threadIdx.x + u * NT;
        if (i >= RH * d8) continue;
        const int w = WG ? (int)(AttnWgLayout<DMAX>::template q_off<RH>(i / d8, i % d8) / 4)
                         : (i / d8) * qs + 4 * (i % d8); // (WG: the wgmma order, the hi plane only)
        attn_stage8<F16>(qh, ql, w, a[u], b[u]);
    }
}

// K and V of a key block as the f16 cache's rows ([KB keys][QS words], d / 2 words used): K's rows are B of
// Kᵀ as in SmemSrc; V's B fragments come from ldmatrix .trans of 8 × 8 blocks (rows = keys): lane (g, t) gets
// keys 2t, 2t + 1 at dim g — what SmemSrc::v2h reads from the Vᵀ plane.
struct SmemRowsF16 : AttnQ {
    const uint32_t *k, *v;
    __device__ __forceinline__ void k2h(int ks, int np, uint32_t h[4]) const {
        const int lane = threadIdx.x & 31;
        attn_ldm4(k + (16 * np + 8 * (lane >> 4) + (lane & 7)) * qs + 8 * ks + 4 * ((lane >> 3) & 1), h);
    }
    __device__ __forceinline__ void v2h(int nt, uint32_t h[4]) const {
        // matrices: keys 0-7, 8-15, 16-23, 24-31 (lane l: key l) at dims 8nt .. 8nt + 7
        const unsigned a = (unsigned)__cvta_generic_to_shared(v + (threadIdx.x & 31) * qs + 4 * nt);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(h[0]), "=r"(h[1]), "=r"(h[2]), "=r"(h[3])
                     : "r"(a));
    }
};

// fp32 mode: K and Vᵀ as hi/lo planes, through registers (AttnKV). PREF: the next block's loads are issued
// before the current block is computed (registers permitting); otherwise just before they are stored.
template <int DMAX, int NT, bool PREF> struct StageRegs {
    static constexpr int kPlanes = 2;
    AttnKV<DMAX, NT, false> kv;
    const float *K, *V;
    uint32_t *kh, *kl, *vh, *vl;
    int kvd, last, d, qs;
    // (every stage takes the same arguments: the cache rows, the staging buffer, the row's last position)
    __device__ __forceinline__ StageRegs(const float *K_, const float *V_, uint32_t *buf, int kvd_, int last_,
                                         int d_, int qs_, int)
        : K(K_), V(V_), kh(buf), kl(buf + KB * qs_), vh(buf + 2 * KB * qs_),
          vl(buf + 2 * KB * qs_ + d_ * kAttnVS), kvd(kvd_), last(last_), d(d_), qs(qs_) {}
    __device__ __forceinline__ void start(int kb) {
        if (PREF) load(kb);
    }
    // Before block kb is computed: its operands in shared memory (block kb − 1's consumed first).
    __device__ __forceinline__ void ready(int kb, int kb1) {
        __syncthreads();
        if (!PREF) load(kb);
        kv.store_k(kh, kl, qs, d);
        kv.store_v(vh, vl, d);
        __syncthreads();
        if (PREF && kb + 1 < kb1) load(kb + 1);
    }
    __device__ __forceinline__ SmemSrc src(const AttnQ &q, int) const { return SmemSrc{q, kh, kl, vh, vl}; }

  private:
    __device__ __forceinline__ void load(int kb) {
        kv.load_k(K, kvd, kb * KB, last, d);
        kv.load_v(V, kvd, kb * KB, last, d);
    }
};

// f16 mode: the cache rows copied into two stages of K and V (SmemRowsF16), block kb + 1's copies in flight
// while kb is computed.
template <int DMAX, int NT> struct StageAsyncF16 {
    static constexpr int kPlanes = 1;
    const uint16_t *K, *V;
    uint32_t *buf; // [2 stages][K, V][KB][qs]
    int kvd, last, d, qs, kb0;
    __device__ __forceinline__ StageAsyncF16(const uint16_t *K_, const uint16_t *V_, uint32_t *buf_, int kvd_,
                                             int last_, int d_, int qs_, int kb0_)
        : K(K_), V(V_), buf(buf_), kvd(kvd_), last(last_), d(d_), qs(qs_), kb0(kb0_) {}
    __device__ __forceinline__ void start(int kb) { copy(kb); }
    __device__ __forceinline__ void ready(int kb, int kb1) {
        cp_wait<0>();
        __syncthreads(); // every thread's copies of block kb landed; block kb − 1 is consumed
        if (kb + 1 < kb1) copy(kb + 1);
    }
    __device__ __forceinline__ SmemRowsF16 src(const AttnQ &q, int kb) const {
        const uint32_t *k = stage(kb);
        return SmemRowsF16{q, k, k + KB * qs};
    }

  private:
    __device__ __forceinline__ uint32_t *stage(int kb) const { return buf + ((kb - kb0) & 1) * 2 * KB * qs; }
    __device__ __forceinline__ void copy(int kb) {
        uint32_t *ks = stage(kb), *vs = ks + KB * qs;
        attn_copy_kv_rows<KB, DMAX / 8, NT>(K, V, kvd, kb * KB, last, d / 8,
                                            [&](int key, int c, uint32_t &kd, uint32_t &vd) {
                                                kd = smem_addr(ks + key * qs + 4 * c);
                                                vd = smem_addr(vs + key * qs + 4 * c);
                                            });
    }
};

template <int DMAX, bool F16, int NW, bool WG> struct TileStage {
    using type = StageRegs<DMAX, NW * 32, NW == 8>;
};
template <int DMAX, int NW> struct TileStage<DMAX, true, NW, false> {
    using type = StageAsyncF16<DMAX, NW * 32>;
};
template <int DMAX, int NW> struct TileStage<DMAX, true, NW, true> {
    using type = StageWgF16<DMAX, NW * 32>;
};

// u32 words of the K/V staging for d head dims.
__host__ __device__ constexpr size_t stage_words(int d, bool f16) {
    return f16 ? (size_t)2 * 2 * KB * (size_t)(d / 2 + 4) : (size_t)attn_kv_words(d);
}

// Shared memory (u32 words): Q [16·nw][QS] as a hi and (fp32 mode) a lo plane, then the K/V staging (wg: two
// stages of K and V in AttnWgLayout's order).
__host__ __device__ constexpr size_t tile_smem_words(int d, int nw, bool f16, bool wg = false) {
    return (size_t)(f16 ? 1 : 2) * (size_t)(16 * nw) * (size_t)(wg ? d / 2 : d / 2 + 4) +
           (wg ? (size_t)2 * 2 * WEFT_CU_ATTN_KB * (size_t)d / 2 : stage_words(d, f16));
}

// WG (f16, d = DMAX = 128, sm_90a): the key-block step on wgmma (attn_wgmma.cuh), each warpgroup of the
// block computing its 64 row-heads together; the rest of the kernel is the same.
template <int DMAX, bool F16, int NW, bool WG = false, bool WG2 = false>
__global__ void __launch_bounds__(NW * 32, WG        ? 2
                                           : NW == 4 ? (F16 ? 4 : 3)
                                                     : (F16 ? 2 : 1))
    attn_tile_kernel(const float *__restrict__ Q, float *Out, const weft_cu_row *__restrict__ rows,
                     const weft_cu_tile *__restrict__ tiles, int Hq, int Hkv, int d, int layer, float scale,
                     float *scratch, int max_spans, int span_group) {
    static_assert(!WG || (F16 && DMAX == 128 && NW % 4 == 0), "the wgmma form: f16, d = 128, warpgroups");
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (WG) {
        __trap(); // launched only after the host checked for compute capability 9.0 and an sm_90a build
        return;
    }
#endif
    constexpr int NT = NW * 32, RH = 16 * NW;
    using Stage = typename TileStage<DMAX, F16, NW, WG>::type;
    extern __shared__ __align__(16) uint32_t smw[];
    weft_pdl_enter();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, j = blockIdx.y;
    const int g = lane >> 2, t = lane & 3;
    const int G = Hq / Hkv, kvd = Hkv * d, QS = d / 2 + 4, d8 = d / 8;
    const weft_cu_tile tl = tiles[blockIdx.x];
    const int r0 = tl.r0, nr = tl.n;
    const weft_cu_row row0 = rows[r0];
    int P = row0.pos;
    for (int k = 1; k < nr; k++) P = max(P, rows[r0 + k].pos);
    const int nblk = P / KB + 1, kb0 = (int)blockIdx.z * span_group * SPAN,
              kb1 = min(kb0 + span_group * SPAN, nblk);
    if (kb0 >= kb1) return; // the tile's keys end before this group of spans
    // Q planes (F16: the hi plane alone; ql aliases it and is never read), then the K/V staging
    const int QP = WG ? d / 2 : QS; // words per Q row in the planes (WG: unpadded, the wgmma order)
    uint32_t *qh = smw, *ql = qh + (Stage::kPlanes - 1) * RH * QP, *kvs = ql + RH * QP;
    const KvElem<F16> *Kc = kv_rows<F16>(row0, layer, 0, kvd) + (size_t)j * d,
                      *Vc = kv_rows<F16>(row0, layer, 1, kvd) + (size_t)j * d;
    Stage st(Kc, Vc, kvs, kvd, P, d, QS, kb0);
    st.start(kb0); // in flight while Q is staged
    tile_stage_q<DMAX, NT, RH, F16, WG>(qh, ql, QS, d, [&](int rh) -> const float * {
        const int rr = rh / G;
        return rr < nr ? Q + ((size_t)(r0 + rr) * Hq + (size_t)j * G + rh % G) * d : nullptr;
    });
    // The lane's rows: r = 0 is row-head warp·16 + g, r = 1 is warp·16 + g + 8 (row rh / G, head rh % G).
    int pos[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int rr = (warp * 16 + g + 8 * r) / G;
        pos[r] = rr < nr ? rows[r0 + rr].pos : -1;
    }
    SpanFold<DMAX> sf;
    // One group holds every span (gridDim.z == 1): the spans of a row fold here, into mt, lt and the row's
    // output (the running o, read back by the lane that wrote it), as the combine kernel would fold them.
    const bool fold_here = gridDim.z == 1;
    float mt[2], lt[2];
    const AttnQ aq{qh + warp * 16 * QS, ql + warp * 16 * QS, QS};
    // WG: the warpgroup's Q (A of its score steps) and the last position of its rows (a warpgroup skips a
    // key block only together: wgmma is warpgroup-wide)
    const uint32_t q_wg = smem_addr(qh) + (uint32_t)(warp / 4) * (64 / 8 * 256);
    (void)q_wg;
    int wg_last = -1;
    if constexpr (WG) {
        for (int rr = (warp / 4) * 64 / G; rr <= ((warp / 4) * 64 + 63) / G && rr < nr; rr++)
            wg_last = max(wg_last, rows[r0 + rr].pos);
    }

    sf.reset();
    for (int kb = kb0; kb < kb1; kb++) {
        const int t0 = kb * KB, span = kb / SPAN, span_last = min(span * SPAN + SPAN, nblk) - 1;
        st.ready(kb, kb1); // (the first call's barrier also publishes Q)
        sf.live[0] = pos[0] >= t0;
        sf.live[1] = pos[1] >= t0;
        if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
            if (wg_last < t0) continue; // the warpgroup's rows end before kb
            attn_block_wg<DMAX, RH, !WG2>(q_wg, st.k_stage(kb), st.v_stage(kb), pos, t0, scale, sf);
#endif
        } else {
            using Src = decltype(st.src(aq, kb));
            // Every row of the warp sees the whole block (all but a tile's last one or two blocks; a warp
            // with a padded row, pos −1, never): the same step without the mask and the liveness selects
            // (live is true for every row: set as constants, the values they have, so that the compiler drops
            // the selects).
            if (NW == 8 && __all_sync(0xffffffffu, min(pos[0], pos[1]) >= t0 + KB - 1)) {
                sf.live[0] = sf.live[1] = true;
                attn_block<DMAX, Src, SpanFold<DMAX>, false, F16, true>(st.src(aq, kb), pos, t0, d, scale,
                                                                        sf);
            } else {
                if (!__any_sync(0xffffffffu, sf.live[0] || sf.live[1]))
                    continue; // the warp's rows end before kb
                attn_block<DMAX, Src, SpanFold<DMAX>, false, F16>(st.src(aq, kb), pos, t0, d, scale, sf);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!sf.live[r] || (kb != pos[r] / KB && kb != span_last)) continue; // not the row's last block
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
            } else if (fold_here) { // Fold::add of the span into the total (from (−∞, 0, 0) at span 0)
                const bool first = span == 0, last = span == pos[r] / (SPAN * KB);
                const FoldScale f = fold_scale(first ? -INFINITY : mt[r], sf.ms[r]);
                lt[r] = f.mix(first ? 0.0f : lt[r], sf.ls[r]);
                mt[r] = f.mn;
                float *out = Out + orow * d + 2 * t;
#pragma unroll
                for (int nt = 0; nt < DMAX / 8; nt++) {
                    if (nt >= d8) break;
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float o = f.mix(first ? 0.0f : out[8 * nt + c], sf.os[nt][2 * r + c]);
                        out[8 * nt + c] = last ? o / lt[r] : o;
                    }
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
        // The next span's partials start empty (reset here, where it is a branch taken once per span, not at
        // the top, where it was compiled into 68 selects per block; a warp or warpgroup that skipped a block
        // above has no rows left, so the reset it misses is never read).
        if (kb == span_last) sf.reset();
    }
}

struct TileArgs {
    const float *q;
    float *out;
    const weft_cu_row *rows;
    const weft_cu_tile *tiles;
    int Hq, Hkv, d, layer;
    float scale;
    float *scratch;
    int max_spans, span_group;
};

template <int DMAX, bool F16, int NW, bool WG = false, bool WG2 = false>
cudaError_t launch_tiles_f(dim3 grid, const TileArgs &a, cudaStream_t s) {
    const size_t smem = 4 * tile_smem_words(a.d, NW, F16, WG);
    const cudaError_t e = weft_smem_opt_in(attn_tile_kernel<DMAX, F16, NW, WG, WG2>, smem); // (never lowered)
    if (e != cudaSuccess) return e;
    return weft_pdl_launch(attn_tile_kernel<DMAX, F16, NW, WG, WG2>, grid, dim3(NW * 32), smem, s, a.q, a.out,
                           a.rows, a.tiles, a.Hq, a.Hkv, a.d, a.layer, a.scale, a.scratch, a.max_spans,
                           a.span_group);
}

// Whether the wgmma form runs here: f16, d = 128, an sm_90a build on a compute capability 9.0 device.
bool tiles_wg_ok(bool f16, int d) {
#ifdef WEFT_CUDA_SM90A
    return f16 && d == 128 && weft_wgmma_on();
#else
    (void)f16, (void)d;
    return false;
#endif
}

template <int DMAX> cudaError_t launch_tiles(bool f16, int nw, dim3 grid, const TileArgs &a, cudaStream_t s) {
    if constexpr (DMAX == 128) {
        if (nw == kWgWarps) return launch_tiles_f<128, true, 8, true>(grid, a, s);
        if (nw == kWgWarps2) return launch_tiles_f<128, true, 8, true, true>(grid, a, s);
    }
    if (nw == 4)
        return f16 ? launch_tiles_f<DMAX, true, 4>(grid, a, s) : launch_tiles_f<DMAX, false, 4>(grid, a, s);
    return f16 ? launch_tiles_f<DMAX, true, 8>(grid, a, s) : launch_tiles_f<DMAX, false, 8>(grid, a, s);
}

} // namespace

extern "C" int weft_cu_attention_tiles_ok(int Hq, int Hkv, int d) {
    return weft_cu_attention_ok(Hq, Hkv, d) && d <= kMaxD;
}

extern "C" size_t weft_cu_attention_tiles_smem(int d) {
    return 4 * tile_smem_words(d, kDefaultWarps, false);
}

extern "C" int weft_cu_attention_tile_rows(int Hq, int Hkv) {
    return 16 * kDefaultWarps / (Hq / Hkv);
}

extern "C" cudaError_t weft_cu_attention_tiles_shaped(const float *q, float *out, const weft_cu_row *rows,
                                                      int n, int max_pos, const weft_cu_tile *tiles,
                                                      int n_tiles, int Hq, int Hkv, int d, int layer,
                                                      float scale, float *scratch, int max_context, int f16,
                                                      int warps, int span_group, cudaStream_t stream) {
    if (n_tiles <= 0) return cudaSuccess;
    if (!weft_cu_attention_tiles_ok(Hq, Hkv, d) || max_pos >= max_context ||
        (warps != 4 && warps != 8 && warps != kWgWarps && warps != kWgWarps2) || span_group < 0)
        return cudaErrorInvalidValue;
    if (warps < 0 && !tiles_wg_ok(f16 != 0, d)) return cudaErrorNotSupported;
    const int spans = max_pos / (SPAN * KB) + 1, max_spans = (max_context + SPAN * KB - 1) / (SPAN * KB);
    if (span_group == 0) {
        // Every span in one block (no partials through scratch, no combine) when the (tile, kv head) pairs
        // alone fill the GPU; otherwise the most spans per block that still leave >= 1,024 blocks.
        const long pairs = (long)n_tiles * Hkv;
        span_group = 1;
        if (pairs >= kFoldHerePairs) span_group = spans;
        while (span_group < spans && pairs * ((spans + 2 * span_group - 1) / (2 * span_group)) >= 1024)
            span_group *= 2;
    }
    if (span_group > spans) span_group = spans;
    const int groups = (spans + span_group - 1) / span_group;
    const dim3 grid((unsigned)n_tiles, (unsigned)Hkv, (unsigned)groups);
    const TileArgs a{q, out, rows, tiles, Hq, Hkv, d, layer, scale, scratch, max_spans, span_group};
    cudaError_t e;
    if (d <= 32)
        e = launch_tiles<32>(f16 != 0, warps, grid, a, stream);
    else if (d <= 64)
        e = launch_tiles<64>(f16 != 0, warps, grid, a, stream);
    else
        e = launch_tiles<128>(f16 != 0, warps, grid, a, stream);
    if (e != cudaSuccess || groups == 1) return e; // one group: the blocks folded every span themselves
    return weft_cu_attention_combine(out, rows, n, Hq, d, scratch, max_context, stream);
}

extern "C" cudaError_t weft_cu_attention_tiles(const float *q, float *out, const weft_cu_row *rows, int n,
                                               int max_pos, const weft_cu_tile *tiles, int n_tiles, int Hq,
                                               int Hkv, int d, int layer, float scale, float *scratch,
                                               int max_context, int f16, cudaStream_t stream) {
    return weft_cu_attention_tiles_shaped(q, out, rows, n, max_pos, tiles, n_tiles, Hq, Hkv, d, layer, scale,
                                          scratch, max_context, f16, kDefaultWarps, 0, stream);
}
