// The 4-bit tensor-core matmul for many activation rows (prefill chunks): weft_cu_gemm_q4x (cuda_kernels.h),
// and for few rows: weft_cu_gemm_q4s.
//
// Same arithmetic as mma_q4x.cu — the product of a WEFT_CU_Q4F weight and prepared activations is defined
// there (mma_q4.cu's header): per output, K blocks are taken slot by slot (slot w = the blocks w, w + KW,
// w + 2·KW, ... in ascending order, KW from the weight shape), each slot's groups summed from 0 with the same
// mma sequence and fold, and the slot sums added in slot order ((s0 + s1) + s2) + ... . mma_q4x.cu gives
// each slot to its own warp and adds the warps' sums at the end; this kernel walks the slots one after the
// other in one warp, keeping the slot's sum (acc) and the running total (tot) — the same additions in the
// same order, so both kernels give the same bits (bench_cuda_matmul checks it for every layout).
//
// What changes is the data flow. A block owns 128 weight rows (8 tiles of 16) x 64 activation rows. Each K
// block's weight words, scales and prepared activations are copied to shared memory once (cp.async, NST
// stages in flight) and then read by every warp that needs them: 8 warps, warp (wm, wn) computes tiles
// 2·wm, 2·wm + 1 against activation rows 32·wn .. 32·wn + 31 (8 quads), so each decoded A fragment feeds
// 16 mma and each activation fragment 4. mma_q4x.cu's many-row kernel instead re-reads the activations from
// L2 for every 16-row tile and decodes each weight once per 32 rows.
//
// Few rows (weft_cu_gemm_q4s, any M; weft_cu_matmul_q4x hands it decode rounds of 5..16 streams, and 33..64
// on small weights): blocks of 128 weight rows x 8 or 16 activation rows (one tile and all quads per warp),
// and since 128-row blocks alone would leave most SMs idle on a 4096-row weight, the slots of one block's
// outputs are spread over the blocks of a thread block cluster, which add the slot sums in slot order through
// distributed shared memory at the end (the same additions, so the same bits). Measured in bench/NOTES.md
// session 8 (16 rows: 1.1–1.8x the one-quad-per-block kernel of mma_q4x.cu).
#include "cuda_kernels.h"
#include "pdl.cuh"
#include "q4_mma.cuh"
#include "cp_async.cuh"
#include "slot_walk.h"

#include <cooperative_groups.h>

namespace {

namespace cg = cooperative_groups;

constexpr int GT = 8;  // weight tiles (16 rows) per block
constexpr int NST = 3; // K blocks of copies in flight

// A block's shape: NT / 32 warps, warp (wm, wn) = (warp % WM, warp / WM) computes tiles TPW·wm .. TPW·wm +
// TPW − 1 against activation rows 4·WQ·wn .. + 4·WQ − 1 (WQ quads); GT = TPW·WM tiles, GR = 4·WQ·WN rows per
// block. SPLIT: the block takes SPC slots only (below). BPSM: blocks per SM the registers are bounded for.
template <int TPW_, int WQ_, int WN_, bool SPLIT_, int BPSM_ = 1, int NT_ = 256> struct GLay {
    static constexpr int NT = NT_, NW = NT_ / 32, TPW = TPW_, WQ = WQ_, WM = NT_ / 32 / WN_,
                         GR = 4 * WQ_ * WN_, BPSM = BPSM_;
    static constexpr bool SPLIT = SPLIT_;
    static_assert(TPW_ * (NT_ / 32 / WN_) == GT, "a block holds GT tiles");
};
using LWide = GLay<2, 8, 2, false, 1>; // prefill chunks: 128 weight rows x 64 activation rows, every slot
using LS8 = GLay<1, 2, 1, true, 2>;    // few rows, some slots per block: 128 x 8
using LS16 = GLay<1, 4, 1, true, 2>;   // 128 x 16
using LS8c = GLay<1, 2, 1, true, 3>;   // the same with 3 blocks per SM (clusters of 8: see launch)
using LS16c = GLay<1, 4, 1, true, 3>;

// One pipeline stage: K block kb of the block's GT tiles and GR activation rows.
template <int MODE, int SDT, int SB, int GPB, int GR> struct alignas(16) GStage {
    static constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2, SBYTES = GPB * SSZ;
    uint32_t a[GT][64 * SB];          // q4f words of the block (tile-major, as in global memory)
    uint32_t x[GR][32 * SB];          // prepared activations, sub-blocks kb·SB .. kb·SB + SB − 1
    float xs[GR][SB];                 // their 32-element sums (AFFINE)
    unsigned char s[GT * 16][SBYTES]; // each weight row's GPB scales of the block
    unsigned char b[q4_affine<MODE> ? GT * 16 : 1][SBYTES]; // and biases (AFFINE)

    __device__ __forceinline__ float scale(const unsigned char *p, int gi) const {
        if constexpr (SSZ == 4) return reinterpret_cast<const float *>(p)[gi];
        const uint32_t h = reinterpret_cast<const unsigned short *>(p)[gi];
        return SDT == WEFT_CU_S_F16 ? f16_bits(h) : bf16_bits(h);
    }
};

// A thread's share of the copies of one K block, fixed for the whole kernel (only the K block's offset
// changes): 16-byte chunks o of the weight tiles T0, T0 + TPI, ..., chunks o of activation rows r0, r0 + RPI,
// ..., the 32-element sums of row tid (AFFINE), the scales (biases) of weight row tid % 128. The weight part
// (load_w: data no kernel writes) may be issued before weft_pdl_enter, the activation part (load_x) only
// after. Addresses are kept as the stage-0 shared-memory offsets and the K-block-0 sources; a K block adds
// its offsets (no per-copy selects: a zero-filling copy's source is its array's start — the words' first
// row, the scales' first tile — whose K blocks are inside the array, so the sum stays in bounds and is not
// read). Its cursor (seek, then step: KW blocks on within a slot) keeps the offsets as running sums.
template <int MODE, int SDT, int SB, int GPB, int GR, int NT> struct GLoad {
    using St = GStage<MODE, SDT, SB, GPB, GR>;
    static constexpr int CPT = 16 * SB, TPI = NT / CPT; // chunks per tile, tiles per pass
    static constexpr int CPR = 8 * SB, RPI = NT / CPR;  // chunks per activation row, rows per pass
    static constexpr int NSC = GT * 16 * (q4_affine<MODE> ? 2 : 1); // scale (bias) rows
    static constexpr int NPA = (GT + TPI - 1) / TPI, NPX = (GR + RPI - 1) / RPI, NPS = (NSC + NT - 1) / NT;
    const uint32_t *a[NPA], *x[NPX]; // each pass's source at K block 0
    const float *xs;
    const char *sc[NPS];
    uint32_t da[NPA], dx[NPX], dsc[NPS], dxs; // each pass's destination in stage 0 (shared-memory address)
    bool a_ok[NPA], x_ok[NPX], sc_ok[NPS], xs_ok;
    int oa = 0, ox = 0, os = 0; // the cursor's offsets: words of a and of x, bytes of the scales
    int step_a = 0, step_x = 0, step_s = 0;

    __device__ __forceinline__ GLoad(const WDev &w, const uint32_t *XF, const float *XS, int M, int64_t tile0,
                                     int64_t ntiles, int row0, int nblk, int KW, const St *stage0, int tid) {
        const int64_t nsub = w.cols / 32;
        const int t0 = tid / CPT, ca = tid % CPT, r0 = tid / CPR, cx = tid % CPR;
        // a zero-filling copy (tile or row past the end) still names a source: the array's start
#pragma unroll
        for (int k = 0; k < NPA; k++) {
            const int64_t T = tile0 + t0 + k * TPI;
            a_ok[k] = t0 + k * TPI < GT && T < ntiles;
            a[k] = static_cast<const uint32_t *>(w.q) + (a_ok[k] ? T * nblk * 64 * SB + 4 * ca : 0);
            da[k] = smem_addr(&stage0->a[t0 + k * TPI < GT ? t0 + k * TPI : 0][4 * ca]);
        }
#pragma unroll
        for (int k = 0; k < NPX; k++) {
            const int r = r0 + k * RPI;
            x_ok[k] = r < GR && row0 + r < M;
            x[k] = XF + (x_ok[k] ? (int64_t)(row0 + r) * nsub * 32 + 4 * cx : 0);
            dx[k] = smem_addr(&stage0->x[r < GR ? r : 0][4 * cx]);
        }
        xs_ok = tid < GR && row0 + tid < M;
        xs = XS + (int64_t)(xs_ok ? row0 + tid : 0) * nsub;
        dxs = smem_addr(&stage0->xs[tid < GR ? tid : 0][0]);
#pragma unroll
        for (int k = 0; k < NPS; k++) { // copy tid + k·NT: the scales of weight row i % 128, biases from 128
            const int i = tid + k * NT, sr = i % (GT * 16);
            sc_ok[k] = i < NSC && tile0 + sr / 16 < ntiles;
            const char *base = static_cast<const char *>(i >= GT * 16 ? w.b : w.s);
            // row sr % 16 of tile tile0 + sr / 16 at K block 0 (weft_cu_q4f_sidx: [tile][K block][16][GPB])
            sc[k] = base + (sc_ok[k] ? ((tile0 + sr / 16) * nblk * 16 + sr % 16) * GPB : 0) * St::SSZ;
            dsc[k] = smem_addr(i >= GT * 16 ? &stage0->b[sr][0] : &stage0->s[sr][0]);
        }
        step_a = KW * 64 * SB, step_x = KW * SB * 32, step_s = KW * 16 * GPB * St::SSZ;
    }
    // The cursor at K block kb (a slot's first block), then one step on (the slot's next block).
    __device__ __forceinline__ void seek(int kb) {
        oa = kb * 64 * SB, ox = kb * SB * 32, os = kb * 16 * GPB * St::SSZ;
    }
    __device__ __forceinline__ void step() {
        oa += step_a, ox += step_x, os += step_s;
    }

    // The weight part of the cursor's K block into the stage at shared-memory offset so (bytes).
    __device__ __forceinline__ void load_w(uint32_t so, int tid) const {
#pragma unroll
        for (int k = 0; k < NPA; k++)
            if (tid / CPT + k * TPI < GT) cp_async16_s(da[k] + so, a[k] + oa, a_ok[k]);
#pragma unroll
        for (int k = 0; k < NPS; k++)
            if (tid + k * NT < NSC) cp_async_s<St::SBYTES>(dsc[k] + so, sc[k] + os, sc_ok[k]);
    }
    // The activation part of the K block whose x offset is ox_ (the cursor's when it was there).
    __device__ __forceinline__ void load_x(uint32_t so, int ox_, int tid) const {
#pragma unroll
        for (int k = 0; k < NPX; k++)
            if (tid / CPR + k * RPI < GR) cp_async16_s(dx[k] + so, x[k] + ox_, x_ok[k]);
        if (q4_affine<MODE> && tid < GR) cp_async_s<4 * SB>(dxs + so, xs + (unsigned)ox_ / 32, xs_ok);
    }
};

// Grid: (ceil(tiles / 8) [x CL with SPLIT], ceil(M / GR)); L::NT threads. Lane (g = lane / 4, t = lane % 4)
// of warp (wm, wn), as in mma_q4x.cu per tile and quad: B column g = activation row 4q + g/2, part g % 2; C:
// tile rows g, g + 8 for activation row 4q + t.
// SPLIT (few rows, where GT-tile blocks alone would leave most SMs idle): the CL = KW / SPC blocks of one
// block's outputs form a thread block cluster; block r = blockIdx.x % CL takes the slots r, r + CL, ... (each
// the slot sum of mma_q4x.cu's warp of that slot), leaves each slot's sums in shared memory, and after a
// cluster barrier warps w with w % CL == r add the KW slot sums of their outputs in slot order (read through
// distributed shared memory) and store them — the same additions in the same order, so the same bits.
template <int MODE, int SDT, int SB, int GPB, class L, int SPC>
__global__ void __launch_bounds__(L::NT, L::BPSM)
    gemm_q4_kernel(WDev w, const uint32_t *__restrict__ XF, const float *__restrict__ XS, int M, int KW,
                   weft_cu_epi epi) {
    using St = GStage<MODE, SDT, SB, GPB, L::GR>;
    constexpr int SPB = SB / GPB, TPW = L::TPW, WQ = L::WQ; // SPB: sub-blocks per scale group
    constexpr bool H1 = q4_f16<MODE>;
    static_assert(!H1 || WQ % 2 == 0, "f16: octets of activation rows");
    extern __shared__ __align__(16) unsigned char smem[];
    St *stage = reinterpret_cast<St *>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp % L::WM, wn = warp / L::WM;
    const int g = lane >> 2, t = lane & 3;
    const int CL = L::SPLIT ? KW / SPC : 1, rank = (int)(blockIdx.x % (unsigned)CL);
    const int64_t ntiles = w.rows / 16, tile0 = (int64_t)(blockIdx.x / CL) * GT;
    const int row0 = blockIdx.y * L::GR, nblk = (int)(w.cols / (32 * SB));
    // the slots this block walks: SPC of them (SPLIT), or all KW in order
    const weft_slot_walk sw = weft_slot_walk_make(rank, CL, KW, nblk, L::SPLIT ? SPC : KW);
    const int nmine = sw.n;
    int lj = 0, lk = 0, cj = 0, ck = 0; // the walk's cursors of the next K block to load and to compute
    // SPLIT: [SPC][warp][m][q][h][lane], each local slot's sums, after the stages
    float *part = reinterpret_cast<float *>(smem + sizeof(St) * NST);
    auto pidx = [&](int j, int wp, int m, int q, int h) {
        return ((((j * L::NW + wp) * TPW + m) * WQ + q) * 2 + h) * 32 + lane;
    };

    float acc[TPW][WQ][2], tot[TPW][WQ][2], C[TPW][WQ][4], sxg[WQ];
#pragma unroll
    for (int m = 0; m < TPW; m++)
#pragma unroll
        for (int q = 0; q < WQ; q++) {
            acc[m][q][0] = acc[m][q][1] = 0.0f;
            tot[m][q][0] = tot[m][q][1] = 0.0f;
#pragma unroll
            for (int r = 0; r < 4; r++) C[m][q][r] = 0.0f;
        }
#pragma unroll
    for (int q = 0; q < WQ; q++) sxg[q] = 0.0f;

    GLoad<MODE, SDT, SB, GPB, L::GR, L::NT> ld(w, XF, XS, M, tile0, ntiles, row0, nblk, KW, stage, tid);
    auto load_next = [&]() { // the copy cursor to the walk's next K block: a slot's first, or KW blocks on
        if (lk == 0)
            ld.seek(weft_slot_walk_kb(&sw, lj, 0));
        else
            ld.step();
        weft_slot_walk_next(&sw, &lj, &lk);
    };
    constexpr uint32_t SST = sizeof(St); // bytes between stages
    // the first stages' weights travel while the previous kernel finishes (pdl.cuh); they join the first
    // commit group with the first activations
    int ox0[NST - 1];
#pragma unroll
    for (int p = 0; p < NST - 1; p++) {
        ox0[p] = 0;
        if (p < nmine) {
            load_next();
            ld.load_w(p * SST, tid);
            ox0[p] = ld.ox;
        }
    }
    weft_pdl_enter();
#pragma unroll
    for (int p = 0; p < NST - 1; p++) {
        if (p < nmine) ld.load_x(p * SST, ox0[p], tid);
        cp_commit();
    }
    // The outputs of tile TPW·wm + m, value(m, q, h) the total of acc[m][q][h]: quads — weight rows g + 8h of
    // activation row 4q + t; octets (H1) — (q, h) = (2o + h', c): weight row g + 8h', activation row 8o + 2t
    // + c.
    auto store_outs = [&](int m, auto value) {
        const int64_t tile = tile0 + TPW * wm + m;
        const int rb = row0 + 4 * WQ * wn;
        if constexpr (H1) {
#pragma unroll
            for (int o = 0; o < WQ / 2; o++)
#pragma unroll
                for (int c = 0; c < 2; c++)
                    q4_epi_store(epi, tile, rb + 8 * o + 2 * t + c, M, g, t, value(m, 2 * o, c),
                                 value(m, 2 * o + 1, c));
        } else {
#pragma unroll
            for (int q = 0; q < WQ; q++)
                q4_epi_store(epi, tile, rb + 4 * q + t, M, g, t, value(m, q, 0), value(m, q, 1));
        }
    };
    int slot = 0;
    uint32_t so = (NST - 1) * SST; // the stage of block i + NST − 1 (the next copies)
    const St *S_ = stage;          // the stage of block i
#pragma unroll 1
    for (int i = 0; i < nmine; i++) {
        {
            cp_wait<NST - 2>();
            __syncthreads(); // block i has landed for all threads; block i − 1's stage is free again
            if (i + NST - 1 < nmine) {
                load_next();
                ld.load_w(so, tid);
                ld.load_x(so, ld.ox, tid);
            }
            cp_commit();
            so = so == (NST - 1) * SST ? 0 : so + SST;
            const int jslot = cj; // the local slot of block i
            const bool slot_end = ck == weft_slot_walk_len(&sw, cj) - 1;
            weft_slot_walk_next(&sw, &cj, &ck);
            const St &S = *S_;
            S_ = S_ == stage + (NST - 1) ? stage : S_ + 1;
            // Scale groups two at a time (the compiler hoists a step's activation loads: all of a block's
            // groups at once would run out of registers; two at once measured 3-4% faster than one), each
            // group's SPB sub-blocks unrolled. Tiles past the weight's end compute on zero-filled copies and
            // store nothing.
#pragma unroll 2
            for (int gi = 0; gi < GPB; gi++) {
#pragma unroll
                for (int js = 0; js < SPB; js++) {
                    const int j = gi * SPB + js;
                    const bool first = js == 0, last = js == SPB - 1;
                    uint32_t P[TPW][2][4];
                    float sc[TPW][2], bc[TPW][2];
#pragma unroll
                    for (int m = 0; m < TPW; m++) {
                        // the lane's words of rows g and g + 8 of tile TPW·wm + m for sub-block j
                        q4_dec_word<true, q4_f16<MODE>>(S.a[TPW * wm + m][lane * SB + j], P[m][0]);
                        q4_dec_word<true, q4_f16<MODE>>(S.a[TPW * wm + m][32 * SB + lane * SB + j], P[m][1]);
                        sc[m][0] = sc[m][1] = bc[m][0] = bc[m][1] = 0.0f;
                        if (last) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const int r = (TPW * wm + m) * 16 + g + 8 * h;
                                sc[m][h] = S.scale(S.s[r], gi);
                                if (q4_affine<MODE>) bc[m][h] = q4_affine_b(sc[m][h], S.scale(S.b[r], gi));
                            }
                        }
                    }
                    if constexpr (H1) { // f16 buffer: octets of hi words (the header)
#pragma unroll
                        for (int o = 0; o < WQ / 2; o++) {
                            const int xr = 4 * WQ * wn + 8 * o;
                            const uint4 xv = *reinterpret_cast<const uint4 *>(&S.x[xr + g][32 * j + 4 * t]);
                            if (q4_affine<MODE>)
#pragma unroll
                                for (int c = 0; c < 2; c++) {
                                    const float ls = S.xs[xr + 2 * t + c][j];
                                    sxg[2 * o + c] = first ? ls : __fadd_rn(sxg[2 * o + c], ls);
                                }
#pragma unroll
                            for (int m = 0; m < TPW; m++) {
                                q4_mma_sub<true>(C[m][2 * o], P[m][0], P[m][1], xv, first);
                                if (last) // q4_fold's expressions with hi + lo = the accumulator
#pragma unroll
                                    for (int e = 0; e < 4; e++) {
                                        const int h = e >> 1, c = e & 1;
                                        q4_fold1<MODE>(acc[m][2 * o + h][c], sc[m][h], bc[m][h],
                                                       sxg[2 * o + c], C[m][2 * o][e]);
                                    }
                            }
                        }
                    } else {
#pragma unroll
                        for (int q = 0; q < WQ; q++) {
                            const int xr = 4 * WQ * wn + 4 * q;
                            const uint4 xv = *reinterpret_cast<const uint4 *>(
                                &S.x[xr + (g >> 1)][32 * j + (g & 1) * 16 + 4 * t]);
                            if (q4_affine<MODE>) {
                                const float ls = S.xs[xr + t][j];
                                sxg[q] = first ? ls : __fadd_rn(sxg[q], ls);
                            }
#pragma unroll
                            for (int m = 0; m < TPW; m++) {
                                q4_mma_sub<false>(C[m][q], P[m][0], P[m][1], xv, first);
                                if (last)
                                    q4_fold<MODE>(acc[m][q], C[m][q], sc[m][0], sc[m][1], bc[m][0], bc[m][1],
                                                  sxg[q]);
                            }
                        }
                    }
                }
            }
            if (L::SPLIT && slot_end) { // the slot's sums wait in shared memory for the cluster's combine
#pragma unroll
                for (int m = 0; m < TPW; m++)
#pragma unroll
                    for (int q = 0; q < WQ; q++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            part[pidx(jslot, warp, m, q, h)] = acc[m][q][h];
                            acc[m][q][h] = 0.0f;
                        }
            }
            if (!L::SPLIT && slot_end) { // the slot's sum joins the total (the first slot's sum is the total)
#pragma unroll
                for (int m = 0; m < TPW; m++)
#pragma unroll
                    for (int q = 0; q < WQ; q++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            tot[m][q][h] = slot == 0 ? acc[m][q][h] : __fadd_rn(tot[m][q][h], acc[m][q][h]);
                            acc[m][q][h] = 0.0f;
                        }
                slot++;
            }
        }
    }
    cp_wait<0>();
    if constexpr (L::SPLIT) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // slots without blocks (K shorter than KW blocks) have zero sums, as mma_q4x.cu's idle warps
        for (int j = 0; j < SPC; j++)
            if (weft_slot_walk_len(&sw, j) == 0)
#pragma unroll
                for (int m = 0; m < TPW; m++)
#pragma unroll
                    for (int q = 0; q < WQ; q++)
                        part[pidx(j, warp, m, q, 0)] = part[pidx(j, warp, m, q, 1)] = 0.0f;
        cg::cluster_group cl = cg::this_cluster();
        cl.sync();
        if (warp % CL == rank) {
            auto sum = [&](int m, int q, int h) { // the KW slot sums of (m, q, h), in slot order
                float v = cl.map_shared_rank(part, 0)[pidx(0, warp, m, q, h)];
                for (int sl = 1; sl < KW; sl++)
                    v = __fadd_rn(v, cl.map_shared_rank(part, sl % CL)[pidx(sl / CL, warp, m, q, h)]);
                return v;
            };
#pragma unroll
            for (int m = 0; m < TPW; m++) {
                if (tile0 + TPW * wm + m >= ntiles) continue;
                store_outs(m, sum);
            }
        }
        cl.sync(); // no block leaves while another may still read its sums
#else
        __trap(); // unreachable: the host launches the split layouts only where clusters exist
#endif
    } else {
        // slots without blocks (K shorter than KW blocks) add their zero sums, as mma_q4x.cu's idle warps do
        for (; slot < KW; slot++)
#pragma unroll
            for (int m = 0; m < TPW; m++)
#pragma unroll
                for (int q = 0; q < WQ; q++) {
                    tot[m][q][0] = __fadd_rn(tot[m][q][0], 0.0f);
                    tot[m][q][1] = __fadd_rn(tot[m][q][1], 0.0f);
                }
#pragma unroll
        for (int m = 0; m < TPW; m++) {
            if (tile0 + TPW * wm + m >= ntiles) continue;
            store_outs(m, [&](int mm, int q, int h) { return tot[mm][q][h]; });
        }
    }
}

template <int MODE, int SDT, int SB, int GPB, class L, int SPC>
cudaError_t launch_spc(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                       cudaStream_t st) {
    auto kernel = gemm_q4_kernel<MODE, SDT, SB, GPB, L, SPC>;
    const size_t part = L::SPLIT ? sizeof(float) * SPC * L::NW * L::TPW * L::WQ * 2 * 32 : 0;
    const size_t smem = sizeof(GStage<MODE, SDT, SB, GPB, L::GR>) * NST + part;
    const cudaError_t e = weft_smem_opt_in(kernel, smem);
    if (e != cudaSuccess) return e;
    const int64_t ntiles = d.rows / 16, C = L::SPLIT ? KW / SPC : 1;
    const dim3 grid((unsigned)((ntiles + GT - 1) / GT * C), (unsigned)((M + L::GR - 1) / L::GR));
    return weft_pdl_launch_cluster(kernel, grid, dim3(L::NT), smem, st, L::SPLIT ? (int)C : 0, d,
                                   (const uint32_t *)xq->f, (const float *)xq->s, M, KW, epi);
}

// SPLIT: slots per block — the fewest blocks that still fill the device about once (two blocks per SM), at
// most 4 slots per block (KW is 4 or 8). One slot per block with KW = 8 (a 4,096-row weight) makes clusters
// of 8, of which an H200 holds 30 at two blocks per SM — 240 blocks, fewer than the 256 of such a weight — so
// that case runs the layout bounded for three blocks per SM (LC; a few bytes of spills; measured 20% faster
// on 4096 x 14336 and 4096 x 4096, slower on larger weights, bench/NOTES.md session 8).
template <int MODE, int SDT, int SB, int GPB, class L, class LC = L>
cudaError_t launch(const WDev &d, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                   cudaStream_t st) {
    if constexpr (!L::SPLIT) {
        return launch_spc<MODE, SDT, SB, GPB, L, 1>(d, xq, M, epi, KW, st);
    } else {
        const int64_t groups = (d.rows / 16 + GT - 1) / GT * ((M + L::GR - 1) / L::GR);
        const int64_t fill = 2 * (int64_t)weft_sm_count();
        int spc = 4;
        while (spc > 1 && groups * (KW / spc) < fill * 7 / 10) spc /= 2;
        if (spc == 4) return launch_spc<MODE, SDT, SB, GPB, L, 4>(d, xq, M, epi, KW, st);
        if (spc == 2) return launch_spc<MODE, SDT, SB, GPB, L, 2>(d, xq, M, epi, KW, st);
        if constexpr (SB == 4) { // (KW is 8 only for K blocks of 4 sub-blocks, weft_cu_q4_kw)
            if (KW == 8) return launch_spc<MODE, SDT, SB, GPB, LC, 1>(d, xq, M, epi, KW, st);
        }
        return launch_spc<MODE, SDT, SB, GPB, L, 1>(d, xq, M, epi, KW, st);
    }
}

template <int MODE, int SDT, class L, class LC>
cudaError_t launch_g(const WDev &d, int group, const weft_cu_xq *xq, int M, const weft_cu_epi &epi, int KW,
                     cudaStream_t st) {
    constexpr int SSZ = SDT == WEFT_CU_S_F32 ? 4 : 2;
    const int sb = d.sb, gpb = 32 * sb / group;
    // Scales copied in pieces of 4, 8 or 16 bytes: GPB·SSZ >= 4 (one 2-byte scale per block is refused).
    if (sb == 4 && gpb == 4) return launch<MODE, SDT, 4, 4, L, LC>(d, xq, M, epi, KW, st);
    if (sb == 2 && gpb == 2) return launch<MODE, SDT, 2, 2, L, LC>(d, xq, M, epi, KW, st);
    if constexpr (SSZ == 4) {
        if (sb == 1 && gpb == 1) return launch<MODE, SDT, 1, 1, L, LC>(d, xq, M, epi, KW, st);
    }
    if constexpr (q4_affine<MODE>) {
        if (sb == 4 && gpb == 2) return launch<MODE, SDT, 4, 2, L, LC>(d, xq, M, epi, KW, st);
        if constexpr (SSZ == 4) {
            if (sb == 2 && gpb == 1) return launch<MODE, SDT, 2, 1, L, LC>(d, xq, M, epi, KW, st);
            if (sb == 4 && gpb == 1) return launch<MODE, SDT, 4, 1, L, LC>(d, xq, M, epi, KW, st);
        }
    }
    return cudaErrorNotSupported;
}

template <class L, class LC = L>
cudaError_t launch_w(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                     cudaStream_t stream) {
    if (M <= 0) return cudaSuccess;
    if (!q4x_args_ok(w, xq, epi)) return cudaErrorInvalidValue;
    const WDev d = wdev(w);
    const int KW = weft_cu_q4_kw(w->rows, w->cols);
    return q4_dispatch(w, xq, [&](auto mode, auto sdt) {
        return launch_g<decltype(mode)::value, decltype(sdt)::value, L, LC>(d, w->group, xq, M, *epi, KW,
                                                                            stream);
    });
}

} // namespace

extern "C" int weft_cu_q4_kw(int64_t rows, int64_t cols) {
    return weft_cu_q4f_sb(cols) == 4 && rows / 16 < 528 ? 8 : 4;
}

extern "C" cudaError_t weft_cu_gemm_q4x(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                        const weft_cu_epi *epi, cudaStream_t stream) {
    return launch_w<LWide>(w, xq, M, epi, stream);
}

extern "C" cudaError_t weft_cu_gemm_q4s(const weft_cu_weight *w, const weft_cu_xq *xq, int M,
                                        const weft_cu_epi *epi, cudaStream_t stream) {
    if (M > 0 && !weft_cluster_on()) return cudaErrorNotSupported;
    if (M <= 8) return launch_w<LS8, LS8c>(w, xq, M, epi, stream);
    return launch_w<LS16, LS16c>(w, xq, M, epi, stream);
}
