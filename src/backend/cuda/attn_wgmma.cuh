// The f16 attention's key-block step on wgmma (sm_90a): the prefill tiles' form of attn_block<…, F16 = true>
// (attn_mma.cuh) for head dim D = 128, a warpgroup of 4 warps computing its 64 row-heads together, Q, K and V
// read by wgmma from shared memory.
//
// The same arithmetic, so the same bits (bench_cuda_attention checks the tiles against the per-row kernel,
// session 19: 30 cases; the probe bench/cuda/wgmma_probe.cu covers bf16 with A in registers only — this form
// reads Q from shared memory and V as an MN-major B): one wgmma m64nNk16 step computes, per warp (rows 16w ..
// 16w + 15) and per n8 column block, what mma.sync m16n8k16 computes from the same fragments. The chains are
// written from accumulators set to +0.0 with scale-d = 1, as attn_block's start from +0.0, but ptxas turns
// that into scale-d = 0 (D = A·B; session 19's review read the SASS): a sum of exactly zero may then be −0
// where attn_block has +0. Neither reaches an output — a score only feeds the block max and exp2 (2^(±0) =
// 1), and o_b only enters through the fold o·ca + o_b·cb onto partials that start at +0.0 and so are never
// −0 (+0 + −0 = +0) — only a key-block record's m of ±0 may differ in its sign:
//   scores: 8 steps m64n32k16 (head dims 16ks .. in order), A = the warpgroup's Q rows (K-major: core
//           matrices of 8 row-heads x 8 dims; the elements of attn_block's src.q1 fragments), B = the key
//           block's K rows (K-major: core matrices of 8 keys x 8 dims);
//   then attn_softmax on s·(scale·log2 e) — attn_block's code;
//   o_b: per quarter of 32 dims, 2 steps m64n32k16 (keys 16kk .., kk = 0, 1), A = P's fragments, B = the
//        key block's V rows (MN-major: core matrices of 8 keys x 8 dims, the rows as the cache holds them);
//        each n8 column block is its own sums, so quarters give the bits of one m64n128k16.
// The accumulators of n8 block b are mma.sync's C fragment of n-tile b, so out.begin / out.tile see exactly
// what attn_block hands them.
#ifndef WEFT_ATTN_WGMMA_CUH
#define WEFT_ATTN_WGMMA_CUH

#include "attn_mma.cuh"
#include "cp_async.cuh"
#include "wgmma.cuh"

// Bytes of one key block's K (or V) in the wgmma order, and the offsets of key `key`, head dims 8c .. 8c + 7
// (16 bytes of the cache row) in it:
//   K: [k step c / 2][key block of 8: key / 8][k half c % 2][key % 8][16 B] — per k step (1,024 B) the B of
//      m64n32k16 with lbo = 128 (k halves), sbo = 256 (8-key column blocks);
//   V: [key step key / 16][dim block c][key half (key / 8) % 2][key % 8][16 B] — per key step (D·32 B) the
//      MN-major B of m64n128k16 with lbo = 128 (key halves), sbo = 256 (8-dim column blocks).
template <int D> struct AttnWgLayout {
    static constexpr int KB = WEFT_CU_ATTN_KB;
    static_assert(KB == 32 && D % 16 == 0, "two key steps of 16 per block; whole k steps of head dims");
    static constexpr uint32_t BYTES = KB * D * 2, K_STEP = KB / 8 * 256, V_STEP = D / 8 * 256;
    __device__ __forceinline__ static uint32_t k_off(int key, int c) {
        return (uint32_t)((c >> 1) * K_STEP + (key >> 3) * 256 + (c & 1) * 128 + (key & 7) * 16);
    }
    __device__ __forceinline__ static uint32_t v_off(int key, int c) {
        return (uint32_t)((key >> 4) * V_STEP + c * 256 + ((key >> 3) & 1) * 128 + (key & 7) * 16);
    }
    // Q of RH row-heads: [k step c / 2][8 row-heads rh / 8][k half c % 2][rh % 8][16 B] — per k step (RH·32
    // B) the A of every warpgroup (rows 64w .. at 2,048·w bytes) with lbo = 128, sbo = 256.
    template <int RH> __host__ __device__ static constexpr uint32_t q_step() { return RH / 8 * 256; }
    template <int RH> __device__ __forceinline__ static uint32_t q_off(int rh, int c) {
        return (uint32_t)((c >> 1) * q_step<RH>() + (rh >> 3) * 256 + (c & 1) * 128 + (rh & 7) * 16);
    }
};

// One key block's f16 cache rows (keys t0 .. t0 + KB − 1, D8 chunks of 16 bytes each: 8 head dims) copied by
// the block's NT threads with cp.async to the shared addresses dst(key, c) of K's and V's chunk (kd, vd);
// keys past `last` as zeros (the cache is not read there). Both f16 stagings (attention_flash.cu's row
// order and StageWgF16's wgmma order) copy through it.
template <int KB, int D8MAX, int NT, class Dst>
__device__ __forceinline__ void attn_copy_kv_rows(const uint16_t *K, const uint16_t *V, int kvd, int t0,
                                                  int last, int d8, Dst &&dst) {
    constexpr int U = (KB * D8MAX + NT - 1) / NT;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = threadIdx.x + u * NT, key = i / d8, c = i % d8;
        if (i >= KB * d8) break;
        const bool ok = t0 + key <= last;
        const size_t off = (size_t)(ok ? t0 + key : 0) * kvd + 8 * c; // not read when !ok
        uint32_t kd, vd;
        dst(key, c, kd, vd);
        cp_async16_s(kd, K + off, ok);
        cp_async16_s(vd, V + off, ok);
    }
    cp_commit();
}

// The f16 cache rows of key blocks copied (cp.async, two stages, block kb + 1's copies in flight while kb is
// computed) into AttnWgLayout's order by the block's NT threads; keys past `last` as zeros.
template <int D, int NT> struct StageWgF16 {
    using L = AttnWgLayout<D>;
    static constexpr int KB = WEFT_CU_ATTN_KB, kPlanes = 1;
    const uint16_t *K, *V;
    uint32_t buf; // shared address: [2 stages][K, V][L::BYTES]
    int kvd, last, kb0;
    // (attention_flash.cu's stages' arguments; d = D and the row padding qs are the layout's own)
    __device__ __forceinline__ StageWgF16(const uint16_t *K_, const uint16_t *V_, uint32_t *buf_, int kvd_,
                                          int last_, int, int, int kb0_)
        : K(K_), V(V_), buf(smem_addr(buf_)), kvd(kvd_), last(last_), kb0(kb0_) {}
    __device__ __forceinline__ void start(int kb) { copy(kb); }
    __device__ __forceinline__ void ready(int kb, int kb1) {
        cp_wait<0>();
        // this thread's copies landed; make them visible to wgmma's reads (the async proxy), then every
        // thread's: block kb is staged and block kb − 1 consumed (each warpgroup waited for its wgmma)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (kb + 1 < kb1) copy(kb + 1);
    }
    __device__ __forceinline__ uint32_t k_stage(int kb) const {
        return buf + ((kb - kb0) & 1) * 2 * L::BYTES;
    }
    __device__ __forceinline__ uint32_t v_stage(int kb) const { return k_stage(kb) + L::BYTES; }

  private:
    __device__ __forceinline__ void copy(int kb) {
        const uint32_t ks = k_stage(kb), vs = v_stage(kb);
        attn_copy_kv_rows<KB, D / 8, NT>(K, V, kvd, kb * KB, last, D / 8,
                                         [&](int key, int c, uint32_t &kd, uint32_t &vd) {
                                             kd = ks + L::k_off(key, c);
                                             vd = vs + L::v_off(key, c);
                                         });
    }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The key block t0 .. t0 + 31 for the warpgroup's 64 row-heads: q_wg the shared address of the warpgroup's Q
// (AttnWgLayout::q_off's order, A of the score steps), k_stage / v_stage the block's K and V, pos[r] as
// attn_block's. Calls out.begin(blk), then out.tile(nt, o) for the 16 n-tiles of o_b in order — attn_block's
// contract. o_b is computed a quarter (4 n-tiles, 32 dims) at a time in two alternating
// accumulator sets, each quarter's n-tiles handed out while the next quarter runs: 16 + 16 accumulators
// instead of 64, so that two blocks of 8 warps fit an SM. Every thread of the warpgroup calls it (wgmma is
// warpgroup-wide); rows without a visible key come out as attn_block's.
template <int D, int RH, bool ONE_SET, class Out>
__device__ __forceinline__ void attn_block_wg(uint32_t q_wg, uint32_t k_stage, uint32_t v_stage,
                                              const int pos[2], int t0, float scale, Out &out) {
    using L = AttnWgLayout<D>;
    static_assert(D == 128, "four quarters of 32 dims");
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); // scale·log2 e (attn_block's)
    float s[16];
#pragma unroll
    for (int e = 0; e < 16; e++) s[e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; e++) wgmma_pin(s[e]);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
        wgmma_m64n32k16_f16_ss(s, wgmma_desc_at(q_wg + ks * L::template q_step<RH>(), 128, 256),
                               wgmma_desc_at(k_stage + ks * L::K_STEP, 128, 256));
    wgmma_commit_wait0();
    float p[4][4];
#pragma unroll
    for (int e = 0; e < 16; e++) {
        wgmma_pin(s[e]);
        p[e / 4][e % 4] = __fmul_rn(s[e], sl2);
    }
    uint32_t ph[2][4], pl[2][4];
    const AttnBlock blk = attn_softmax<true>(p, pos, t0, ph, pl);
    out.begin(blk);
    float o[ONE_SET ? 1 : 2][16]; // quarter qq in set qq % 2
    auto issue = [&](int qq) {
        float(&d)[16] = o[ONE_SET ? 0 : qq & 1];
#pragma unroll
        for (int e = 0; e < 16; e++) d[e] = 0.0f;
#pragma unroll
        for (int e = 0; e < 16; e++) wgmma_pin(d[e]);
#pragma unroll
        for (int kk = 0; kk < 2; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) wgmma_pin(ph[kk][e]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 2; kk++)
            wgmma_m64n32k16_f16_tb(d, ph[kk][0], ph[kk][1], ph[kk][2], ph[kk][3],
                                   wgmma_desc_at(v_stage + kk * L::V_STEP + qq * 4 * 256, 128, 256));
        wgmma_commit();
    };
    auto hand_out = [&](int qq) {
        float(&d)[16] = o[ONE_SET ? 0 : qq & 1];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float r[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                wgmma_pin(d[4 * j + i]);
                r[i] = d[4 * j + i];
            }
            out.tile(4 * qq + j, r);
        }
    };
    if constexpr (ONE_SET) { // (registers: the quarters one after another)
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            issue(qq);
            wgmma_wait<0>();
            hand_out(qq);
        }
    } else {
        issue(0);
        issue(1);
        wgmma_wait<1>();
        hand_out(0);
        issue(2);
        wgmma_wait<1>();
        hand_out(1);
        issue(3);
        wgmma_wait<1>();
        hand_out(2);
        wgmma_wait<0>();
        hand_out(3);
    }
}
#endif

#endif
