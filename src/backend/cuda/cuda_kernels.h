/* cuda_kernels.h — the CUDA backend's row-invariant kernels (SPEC §4.3.1), callable from C.
 *
 * Every launcher enqueues on `stream` and returns the launch status (cudaGetLastError); nothing here
 * allocates or synchronises. All activations are fp32, row-major, one row per token.
 *
 * Exactness: each output element is reduced in an order that depends only on the shapes (K of a weight, n of
 * a norm, head_dim and absolute key positions for attention) — never on the number of rows in the launch, on
 * which rows sit beside it or on the device's SM count: one thread, or one warp whose lanes are combined by a
 * fixed xor-shuffle tree, or a tensor-core mma whose output element depends only on its own row and column
 * (the hardware's fixed internal order), with partials folded in a fixed order (the matmuls' K slots; the
 * attention's key blocks and spans, which may be computed by different thread blocks). No atomics; no split
 * chosen from the row count or the SM count (which whole outputs a block computes may depend on the device,
 * e.g. weft_cu_gemv_q4's runs of tiles; an output's reduction never does). Device code is compiled with
 * -fmad=false and without fast math: fused multiply-adds appear only where the source writes fmaf. */
#ifndef WEFT_CUDA_KERNELS_H
#define WEFT_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device weight layouts (chosen so that one 16-byte load per lane reads one "unit" of a row, coalesced):
 *   WEFT_CU_F32 / F16 / BF16  q = row-major [rows, cols] as stored            (unit: 4 / 8 / 8 elements)
 *   WEFT_CU_Q4                q = uint32 [rows, cols/8]: element e of a row at bits 4·(e%8) of word e/8
 * (MLX's packing; GGUF Q4_0 is repacked into it at upload)  (unit: 32 elements) WEFT_CU_Q8                q =
 * 8-bit [rows, cols], int8 (SYM) or uint8 (AFFINE)  (unit: 16 elements) Q4/Q8 have per-group scales s (and
 * biases b for AFFINE) [rows, cols/group] of dtype sdt; the decoded weight is AFFINE: (s·q) + b   (two
 * roundings, MLX affine_dequantize) SYM:    q · s       (GGUF Q8_0) OFF8:   (q − 8) · s (GGUF Q4_0) exactly
 * as the CPU decoders (src/model/format) compute it, in fp32. cols must be a multiple of 32 and group a power
 * of two >= 32 (Q4) or >= 16 (Q8). */
typedef enum weft_cu_kind {
    WEFT_CU_F32 = 0,
    WEFT_CU_F16,
    WEFT_CU_BF16,
    WEFT_CU_Q4,
    WEFT_CU_Q8,
    WEFT_CU_Q4F /* 4-bit in tensor-core fragment order, its scales in tile order (below); mode/sdt/group as
                   WEFT_CU_Q4 */
} weft_cu_kind;
typedef enum weft_cu_qmode { WEFT_CU_AFFINE = 0, WEFT_CU_SYM, WEFT_CU_OFF8 } weft_cu_qmode;
typedef enum weft_cu_sdt { WEFT_CU_S_F32 = 0, WEFT_CU_S_F16, WEFT_CU_S_BF16 } weft_cu_sdt;

typedef struct weft_cu_weight {
    weft_cu_kind kind;
    weft_cu_qmode mode; /* Q4/Q8 only */
    weft_cu_sdt sdt;    /* Q4/Q8 only */
    int group;          /* elements per scale (Q4/Q8) */
    int64_t rows, cols;
    void *q, *s, *b; /* device memory (s, b: Q4/Q8; b: AFFINE only) */
    size_t bytes;    /* device bytes of q + s + b */
} weft_cu_weight;

/* One row of a forward as the kernels see it: its stream's KV cache (layout [L][2][cap][Hkv·d]: layer l's K
 * rows at element (2l)·cap·kvd, V rows at element (2l+1)·cap·kvd), its absolute position and its token. The
 * elements are fp32, or with f16 = 1 (--activations f16) IEEE binary16 words of the values rounded as the f16
 * attention rounds its operands (nearest even, magnitudes past 65504 saturated): the same bits the attention
 * would compute from an fp32 cache, in half the bytes. Every kernel of a call takes the same f16. */
typedef struct weft_cu_row {
    void *kv;
    int pos, token, cap, pad;
} weft_cu_row;

typedef struct weft_cu_rope {
    int rot;               /* rotated dimensions (even, <= head_dim); 0 = none */
    int adjacent;          /* pairs (2i, 2i+1) instead of (i, i + rot/2) */
    float attn_factor;     /* multiplies cos and sin (yarn), else 1 */
    const float *inv_freq; /* device [rot/2] */
} weft_cu_rope;

/* WEFT_CU_Q4F: the same 4-bit values and scales as WEFT_CU_Q4, with the words (8 elements each, element e at
 * bits 4·(e%8)) permuted so that one lane's 16-byte load holds its mma fragments: rows in tiles of 16, K in
 * blocks of SB = weft_cu_q4f_sb(cols) sub-blocks of 32 elements; word w8 (elements 8·w8 .. 8·w8+7) of row r
 * goes to weft_cu_q4f_word(rows, cols, r, w8). The scales (and MLX biases) in the same tiles: value gi of row
 * r (group gi of the row, [rows, cols/group] in WEFT_CU_Q4) goes to weft_cu_q4f_sidx(cols, group, r, gi) —
 * [tile][K block][16 rows][GPB], GPB = 32·SB/group values of a row per K block (>= 1 for every shape
 * weft_cu_q4f_ok takes), so a K block's scales of a tile are 16·GPB contiguous values: the one-row stream's
 * 16 lanes copy them in one warp instruction over one contiguous run (its 16 rows' scattered pieces cost ≈
 * 1.1–1.45 µs per 56 MB beyond their bytes, bench/NOTES.md session 24). Used when weft_cu_q4f_ok:
 * rows % 16 == 0, group in {32, 64, 128}, cols % group == 0. The matmul on it (mma_q4.cu) computes with bf16
 * tensor-core products of the exact 4-bit values and activations split into bf16 hi + lo (16 significand
 * bits): relative error ~1e-5 against the fp32 definition, well inside SPEC §5.5's fp32 tolerance. */
int weft_cu_q4f_ok(int64_t rows, int64_t cols, int group);
int weft_cu_q4f_sb(int64_t cols);
int64_t weft_cu_q4f_word(int64_t rows, int64_t cols, int64_t r, int64_t w8);
/* src: MLX word order [rows, cols/8] little-endian uint32 (any alignment); dst: the same count of words in
 * Q4F order. Host function. */
void weft_cu_q4f_pack(const void *src, int64_t rows, int64_t cols, uint32_t *dst);
int64_t weft_cu_q4f_sidx(int64_t cols, int group, int64_t r, int64_t gi);
/* src: [rows, cols/group] values of ssz bytes (2 or 4; any alignment); dst: the same count in Q4F order
 * (weft_cu_q4f_sidx). Host function. Both need a shape weft_cu_q4f_ok takes (rows % 16 == 0, group dividing
 * 32·SB): the callers' check, not repeated here. */
void weft_cu_q4f_pack_scales(const void *src, int64_t rows, int64_t cols, int group, int ssz, void *dst);
/* weft_cu_matmul for WEFT_CU_Q4F weights (weft_cu_matmul calls it). */
cudaError_t weft_cu_matmul_q4f(const weft_cu_weight *w, const float *X, int64_t ldx, int M, float *Y,
                               int64_t ldy, const float *bias, int accumulate, cudaStream_t stream);

/* Activations prepared once for the WEFT_CU_Q4F matmul (weft_cu_matmul_q4x): X [M, K] (K % 32 == 0) as the
 * bf16 B fragments the tensor cores read, plus 32-element sums. Row i, sub-block u (elements 32u .. 32u+31),
 * t, j < 4: f[(i·K/32 + u)·32 + 16p + 4t + j] = the bf16 pair (part p of x[32u + 8t + j], part p of
 * x[32u + 8t + j + 4]), part 0 = hi = bf16(x), part 1 = lo = bf16(x − hi); s[i·K/32 + u] = (a0 + a1) +
 * (a2 + a3) with a_t = x[32u+8t] + x[32u+8t+1] + ... + x[32u+8t+7] left to right (fp32). f: M·K uint32,
 * s: M·K/32 floats, both device memory owned by the caller.
 * f16 (the backend's --activations f16): the activations are x' = f16(x) (round to nearest even, magnitudes
 * past 65504 saturated to it): part 0 = the f16 pair of x', part 1 = 0, and s sums x' in the same order. The
 * 4-bit kernels then decode the weights to f16 and multiply with .f16 tensor-core operations (q4_mma.cuh's
 * WEFT_CU_OFF8H / WEFT_CU_AFFINEH instances), every kernel the same products and fold, so the same bits for
 * any M; the lo columns add +0, and the wgmma GEMM reads only part 0 (half the tensor work; gemm_q4w.cu).
 * Every writer of prepared words (weft_cu_xq_prep, weft_cu_rmsnorm_xq, the decode attention, the SwiGLU
 * epilogue's xf) follows the flag of the buffer it writes. */
typedef struct weft_cu_xq {
    uint32_t *f;
    float *s;
    int64_t K;
    int f16;
} weft_cu_xq;

/* Writes rows [0, M) of X [M, ldx] (ldx % 4 == 0) into xq (layout above). */
cudaError_t weft_cu_xq_prep(const float *X, int64_t ldx, int M, const weft_cu_xq *xq, cudaStream_t stream);

/* EXPERIMENTAL (bench only; verified on the H200 in session 7, not used by the forward): the proposed integer
 * 4-bit arithmetic of src/backend/cuda/i8limb.h. weft_cu_i8_prep writes rows [0, M) of X [M, ldx] as int8
 * limbs: XL [M][K/32][32] u32 (mma_i8.cu's header has the word layout; K % 32 == 0). weft_cu_matmul_i8x: Y =
 * W·x for one row (M == 1), WEFT_CU_Q4F weights of WEFT_CU_OFF8 with f16 scales and group 32 (Q4_0), cols <=
 * 8192, a STORE epilogue; cudaErrorNotSupported otherwise. bench/cuda/i8matvec.cu checks both against the CPU
 * definition. */
cudaError_t weft_cu_i8_prep(const float *X, int64_t ldx, int M, int64_t K, uint32_t *XL, cudaStream_t stream);

/* Where weft_cu_matmul_q4x puts its outputs v[i, o] (the dot product of weight row o and activation row i):
 *   STORE:  outputs o of [0, end[0]) go to y[0], of [end[0], end[1]) to y[1], of [end[1], end[2]) to y[2]
 *           (o counted from the segment's start), each as y[s][i·ld[s] + o'] = v (+ bias[s][o'] if set),
 *           or += that with accumulate (the residual add);
 *   SWIGLU: the weight's rows are gate and up rows interleaved by 8 (rows 16k..16k+7 = gate rows 8k..8k+7,
 *           rows 16k+8..16k+15 = up rows 8k..8k+7): y[0][i·ld[0] + o] = silu(gate_o)·up_o =
 *           gate_o / (1 + exp(−gate_o))·up_o, exactly weft_cu_swiglu's arithmetic; no bias, no accumulate.
 * Segments of STORE must begin on multiples of 16 outputs, and no output's place may overlap another's or
 * a bias (the many-row GEMM loads the biases and the residual's old values of several rows before storing
 * any). weft_cu_epi_store fills a one-segment STORE. */
typedef enum weft_cu_epi_mode { WEFT_CU_EPI_STORE = 0, WEFT_CU_EPI_SWIGLU } weft_cu_epi_mode;
typedef struct weft_cu_epi {
    weft_cu_epi_mode mode;
    int accumulate;
    float *y[3];
    int64_t ld[3], end[3];
    const float *bias[3];
    /* SWIGLU only, optional: also write the outputs as prepared words (weft_cu_xq.f for K = the output width,
     * xf_nsub = K / 32), not the sums — so only for a consumer that reads none (WEFT_CU_OFF8 weights) */
    uint32_t *xf;
    int64_t xf_nsub;
    int xf_f16; /* xf is an f16 buffer (weft_cu_xq.f16) */
    /* timing experiments only (WEFT_CU_T_RQ4): 5..16 rows as 4 activation quads per block (session 3's
     * kernel) instead of one quad per block; the same bits */
    int quads4;
    /* timing experiments only (WEFT_CU_T_NO_X1S): one row without the shared-memory copy of its words (the
     * session 5 kernel); the same bits */
    int no_x1s;
    /* timing experiments only (WEFT_CU_T_NO_GEMV): no weft_cu_gemv_q4 (one row on mma_q4x.cu's kernels, 2..16
     * rows on the kernels before it); the same bits */
    int no_gemv;
    /* tests only: tiles per block of weft_cu_gemv_q4 (0 = from the device's occupancy and SM count); the
     * same bits for every value */
    int gemv_run;
    /* timing experiments only (WEFT_CU_T_NO_SPLIT): few rows without the cluster-split
     * GEMM (weft_cu_gemm_q4s); the same bits */
    int no_split;
    /* optional scratch of part_floats floats for the split-K forms — weft_cu_gemv_q4's (9..16 rows: every K
     * slot in its own blocks, the slot sums added by a second kernel; weft_cu_gemv_part_floats says how much
     * a weight needs) and weft_cu_gemm_q4w_sk's (17..64 rows on small weights;
     * weft_cu_gemm_q4w_part_floats) — NULL = not used; written and read within the call's kernels */
    float *part;
    size_t part_floats;
    /* tests only: weft_cu_gemm_q4w_sk's K split (a divisor of the weight's KW; 0 = from the shape and the
     * device's SM count); the same bits for every value */
    int wgmma_nz;
    /* tests and timing only: the wgmma GEMM's tile rows on an f16 buffer — 0: by the grid (128 past 64 rows
     * where those tiles still fill the GPU, else 64), 64 or 128 (past 64 rows, not split K) forced; the same
     * bits */
    int wgmma_rows;
    /* optional scratch of xb_words u32 for the wgmma GEMM on f16 buffers (Q4_0, not split K): the activations
     * rewritten in the order its wgmma reads them (weft_cu_gemm_q4w_xb_words says how much M rows of K need),
     * so each K block of a row block arrives in shared memory as one bulk copy (no per-thread copies, no
     * transposes), past 64 rows — 16-byte aligned (cudaMalloc's); NULL = the per-thread copies; the same bits
     * either way; written and read within the call */
    uint32_t *xb;
    size_t xb_words;
    /* timing experiments only, the same bits: 0 = a GEMM where it pays (the wgmma GEMM where it takes the
     * layout and the device has wgmma, else weft_cu_gemm_q4x), 1 = weft_cu_gemm_q4x only
     * (WEFT_CU_T_NO_WGMMA), -1 = never (WEFT_CU_T_NO_GEMM) */
    int gemm;
} weft_cu_epi;
weft_cu_epi weft_cu_epi_store(float *Y, int64_t ldy, const float *bias, int accumulate, int64_t rows);

/* The WEFT_CU_Q4F matmul on prepared activations (xq->K == w->cols), M rows: the same bits as
 * weft_cu_matmul_q4f on the fp32 rows xq was prepared from (one arithmetic, see mma_q4x.cu; checked bit for
 * bit by bench_cuda_matmul and the fixtures' baseline comparison), with the epilogue above. */
cudaError_t weft_cu_matmul_q4x(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                               cudaStream_t stream);

/* weft_cu_matmul_q4x hands the product to weft_cu_gemm_q4x from WEFT_CU_GEMM_MIN_ROWS rows when the GEMM's
 * grid has at least WEFT_CU_GEMM_MIN_BLOCKS blocks (smaller grids leave most of an H200 idle; measured in
 * bench/NOTES.md: on 14336×4096 the GEMM takes 0.094 ms at 32 rows against 0.154 for the q4x kernel, 0.086
 * against 0.076 at 16). Shapes only decide it, and both kernels give the same bits. */
#define WEFT_CU_GEMM_MIN_ROWS   17
#define WEFT_CU_GEMM_MIN_BLOCKS 96
/* ... and to weft_cu_gemm_q4s (K slots in separate blocks of a cluster) for WEFT_CU_SPLIT_MIN_ROWS ..
 * WEFT_CU_SPLIT_MAX_ROWS rows, and for 33..64 rows when the GEMM's grid is below WEFT_CU_GEMM_MIN_BLOCKS
 * (bench/NOTES.md session 8: faster than mma_q4x.cu's kernels there). */
#define WEFT_CU_SPLIT_MIN_ROWS 5
#define WEFT_CU_SPLIT_MAX_ROWS 16
/* ... but Q4_0 products of 2..WEFT_CU_GEMV_MAX_ROWS rows go to weft_cu_gemv_q4 first (bench/NOTES.md session
 * 13, back to back on the 8B shapes: 4 rows 13–27% and 8 rows 13–17% faster than the kernels before it), and
 * so do 9..16 rows when the epilogue carries the split-K scratch (weft_cu_epi.part: 16 rows 17–36% faster);
 * without it, 9..16 rows stay on the split GEMM (two blocks of 8 rows, each decoding the same weights, were
 * no faster). */
#define WEFT_CU_GEMV_MAX_ROWS 8

/* The same product (the same bits, the same epilogues) for many rows (gemm_q4.cu): blocks of 128 weight rows
 * x 64 activation rows staged through shared memory. Returns cudaErrorNotSupported for layouts it does not
 * take (a K block with a single 2-byte scale); weft_cu_matmul_q4x then runs its own kernel. */
cudaError_t weft_cu_gemm_q4x(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                             cudaStream_t stream);
/* The same product (the same bits, the same epilogues) for few rows (gemm_q4.cu, any M; blocks of 128 weight
 * rows x 8 or 16 activation rows by M): each block takes 1, 2 or 4 slots of the K split (weft_cu_q4_kw), the
 * blocks of one output tile form a thread block cluster and add their slot sums in slot order through
 * distributed shared memory, so a small weight still fills the GPU. Compute capability 9.0+ only
 * (cudaErrorNotSupported before that, and for the layouts weft_cu_gemm_q4x refuses). */
cudaError_t weft_cu_gemm_q4s(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                             cudaStream_t stream);
/* The same product on wgmma (gemm_q4w.cu; sm_90a, K blocks of 4 sub-blocks, three layouts: Q4_0, MLX group
 * 64 with bf16 scales, MLX group 32 with f16 scales; cudaErrorNotSupported otherwise, and on devices other
 * than compute capability 9.0). The same bits as weft_cu_gemm_q4x on every layout (bench_cuda_matmul).
 * weft_cu_matmul_q4x hands it the GEMM's Q4_0 products (1.35x weft_cu_gemm_q4x at 512 rows, session 9); the
 * MLX layouts stay on weft_cu_gemm_q4x (group 64 measured slower here). */
cudaError_t weft_cu_gemm_q4w(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                             cudaStream_t stream);
/* The wgmma GEMM with its K slots split over NZ blocks per 128-row tile block (NZ a divisor of the weight's
 * KW, the most that keeps the grid within one block per SM): each block writes its slots' sums to epi->part
 * and a second kernel adds every output's KW slot sums in slot order — the additions weft_cu_gemm_q4w makes,
 * so the same bits. For products whose tile blocks alone would leave most SMs idle (weft_cu_matmul_q4x: the
 * 4,096- and 6,144-row weights at 17..64 rows). cudaErrorNotSupported where weft_cu_gemm_q4w refuses, without
 * epi->part of at least weft_cu_gemm_q4w_part_floats(rows, cols, M) floats, or when even two blocks per tile
 * block exceed one wave.
 */
cudaError_t weft_cu_gemm_q4w_sk(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                                cudaStream_t stream);
/* Floats of weft_cu_epi.part weft_cu_gemm_q4w_sk needs for a rows x cols weight at M rows: the KW slot sums
 * of every output of the tile blocks' rows (padded to 128) and row blocks (of 64). */
size_t weft_cu_gemm_q4w_part_floats(int64_t rows, int64_t cols, int M);
/* u32 words of weft_cu_epi.xb the wgmma GEMM's bulk copies need for M rows of K columns (either tile height).
 */
size_t weft_cu_gemm_q4w_xb_words(int64_t K, int M);
/* The same product (the same bits, the same epilogues) for 1..16 activation rows (batch-1 decode and decode
 * rounds of few streams; gemv_q4.cu): groups of warps take runs of consecutive 16-row tiles, and each warp
 * streams its K blocks of the whole run through a ring of cp.async copies in shared memory, the activation
 * rows staged in shared memory once per block (2..16 rows: Q4_0 only; 8 rows per block, so K up to about
 * 4,500 — or, 9..16 rows with epi->part, the split-K form: every K slot in its own blocks staging that slot's
 * K blocks of all 16 rows, the slot sums added in slot order by a second kernel; then K up to about 14,000,
 * and cudaErrorNotSupported rather than another form where it does not fit). Returns cudaErrorNotSupported
 * for the shapes it does not take (K blocks of fewer than 4 sub-blocks, a K block's scales under 4 bytes,
 * fewer K blocks than warps per tile, rows too long for shared memory, more than 16 rows (32 on an f16 buffer
 * with epi->part: the split-K form's octets), several rows of a layout other than Q4_0). weft_cu_matmul_q4x
 * hands it the Q4_0 products of 1..WEFT_CU_GEMV_MAX_ROWS rows, and 9..16 with epi->part (the MLX layouts
 * measured slower here at one row than on its own kernel, bench/NOTES.md session 10) and runs another kernel
 * on the shapes this one refuses. */
cudaError_t weft_cu_gemv_q4(const weft_cu_weight *w, const weft_cu_xq *xq, int M, const weft_cu_epi *epi,
                            cudaStream_t stream);
/* Floats of weft_cu_epi.part that weft_cu_gemv_q4's split-K form needs for a rows x cols weight: 32 rows x
 * KW slot sums per output (rows · weft_cu_q4_kw · 32; 16 rows use half). */
size_t weft_cu_gemv_part_floats(int64_t rows, int64_t cols);
/* (EXPERIMENTAL, above weft_cu_i8_prep.) */
cudaError_t weft_cu_matmul_i8x(const weft_cu_weight *w, const uint32_t *XL, int M, const weft_cu_epi *epi,
                               cudaStream_t stream);
/* Warps per tile of the 4-bit matmuls = K slots of the defined reduction order: a function of the weight
 * shape alone (8 when K blocks hold 4 sub-blocks and the weight has fewer than 528 tiles, else 4). */
int weft_cu_q4_kw(int64_t rows, int64_t cols);

/* ids[r] = argmax of row sel[r] of logits [*, V] (NaN counts as −inf; ties to the lowest id; a row of −inf
 * gives 0): SPEC §5.1 step 3, exactly what weft_sample returns at temperature 0 with no bias or penalties.
 * One block per row. */
cudaError_t weft_cu_argmax(const float *logits, int64_t V, const int *sel, int n, int32_t *ids,
                           cudaStream_t stream);

/* Y[i, o] = Σ_k W[o, k]·X[i, k] (+ bias[o]) for i < M, o < W.rows, k < W.cols; with accumulate, Y[i, o] +=
 * that (the residual add: y = Y + (dot + bias)). X: [M, ldx] (ldx a multiple of 4), Y: [M, ldy]. Per output:
 * lane l of one warp takes units l, l+32, ... of the row in order, each unit's products added sequentially
 * with fmaf into the lane's fp32 sum; the 32 lane sums meet in an xor-shuffle tree. The row tile a launch
 * uses (1, 4 or 8 rows of X per block, picked from M) changes how many sums a lane interleaves, never any
 * sum's order: bit-identical for every M. */
cudaError_t weft_cu_matmul(const weft_cu_weight *w, const float *X, int64_t ldx, int M, float *Y, int64_t ldy,
                           const float *bias, int accumulate, cudaStream_t stream);

/* y = x / sqrt(mean(x²) + eps) ⊙ w (w may be NULL) for n_rows rows of n elements; row r of Y reads row
 * rowmap[r] of X (rowmap NULL = r). One block per row; its thread count is fixed by n alone; Y may equal X.
 */
cudaError_t weft_cu_rmsnorm(float *Y, int64_t ldy, const float *X, int64_t ldx, const int *rowmap,
                            const float *w, int n_rows, int n, float eps, cudaStream_t stream);
/* The same RMSNorm (same bits in Y) that also writes its output rows prepared for the 4-bit matmul into xq
 * (xq->K == n, n % 32 == 0): what weft_cu_xq_prep would make of Y, without the second pass. Y != X; Y NULL =
 * the prepared rows only (no consumer reads the fp32 rows). */
cudaError_t weft_cu_rmsnorm_xq(float *Y, int64_t ldy, const float *X, int64_t ldx, const int *rowmap,
                               const float *w, int n_rows, int n, float eps, const weft_cu_xq *xq,
                               cudaStream_t stream);

/* X[r, :] = decoded row rows[r].token of W (the embedding), r < n. X: [n, W.cols]. */
cudaError_t weft_cu_embed(const weft_cu_weight *w, const weft_cu_row *rows, int n, float *X,
                          cudaStream_t stream);

/* For every row r < n: rotates q [n, Hq·d] in place and k [n, Hkv·d] in place at position rows[r].pos
 * (angle = (float)pos·inv_freq[i], cos/sin scaled by attn_factor), then stores k and v [n, Hkv·d] into the
 * row's cache at that position for layer `layer` (f16: as f16 words, weft_cu_row; k stays fp32). */
cudaError_t weft_cu_rope_store(float *q, float *k, const float *v, const weft_cu_row *rows, int n, int Hq,
                               int Hkv, int d, int layer, const weft_cu_rope *rope, int f16,
                               cudaStream_t stream);

/* Causal attention (GQA: query head h reads kv head h / (Hq/Hkv)): for each row r and head h,
 * out[r, h] = softmax(q[r,h]·K[0..pos]ᵀ · scale) · V[0..pos] over the row's own cache.
 * Keys are taken in blocks of WEFT_CU_ATTN_KB positions aligned to absolute position 0 and in spans of
 * WEFT_CU_ATTN_SPAN blocks. A block's scores and p·V are bf16 tensor-core products of hi/lo split fp32
 * operands (x = bf16(x) + bf16(x − bf16(x)) to 2^-17; a·b = hi·hi + (hi·lo + lo·hi), fp32 accumulation:
 * per-product error ≈ 2^-16 relative, attn_mma.cuh), its max, exp and sums reduced in a fixed order; blocks
 * fold into their span and spans into the total in ascending position (the online-softmax rescale). A row's
 * result depends only on its query, its cache and its position. max_pos: the largest rows[r].pos of the call
 * (< max_context); scratch: weft_cu_attention_scratch_floats(n, Hq, d, max_context) floats (span partials of
 * rows whose keys exceed one span; in split mode — at most 16 (row, span) pairs — every row's key-block
 * partials, so the size has a floor of 16·WEFT_CU_ATTN_SPAN partials per query head). Needs
 * weft_cu_attention_ok(Hq, Hkv, d): Hq/Hkv <= 16 query heads per kv head, d % 16 == 0, d <= 256, and a device
 * allowing weft_cu_attention_smem(Hq, Hkv, d) bytes of shared memory per block (0 for a shape not ok);
 * returns cudaErrorInvalidValue for a shape not ok or max_pos >= max_context. Keys past a row's position are
 * never read into its result (they may hold anything). f16 (--activations f16): every operand (q, K, V, p)
 * is rounded to f16 instead (magnitudes past 65504 saturated) and each product is one f16 tensor-core term;
 * the same for every attention kernel given the same f16 (attn_mma.cuh); the cache then holds f16 words
 * (weft_cu_row). */
#define WEFT_CU_ATTN_KB   32
#define WEFT_CU_ATTN_SPAN 8
int weft_cu_attention_ok(int Hq, int Hkv, int d);
size_t weft_cu_attention_smem(int Hq, int Hkv, int d);
cudaError_t weft_cu_attention(const float *q, float *out, const weft_cu_row *rows, int n, int max_pos, int Hq,
                              int Hkv, int d, int layer, float scale, float *scratch, int max_context,
                              int f16, cudaStream_t stream);
size_t weft_cu_attention_scratch_floats(int n_rows, int Hq, int d, int max_context);

/* A query tile of the prefill attention: rows [r0, r0 + n) of the row table, all of one stream. */
typedef struct weft_cu_tile {
    int r0, n;
} weft_cu_tile;

/* The same attention (the same bits for every row as weft_cu_attention) for the n rows of a call grouped in
 * tiles, each tile's rows sharing the staged operands of every key block (attention_flash.cu): one block per
 * (tile, kv head, group of spans) of 128 row-heads; when the groups are several, rows whose keys exceed one
 * span leave span partials in scratch (weft_cu_attention_scratch_floats(n, Hq, d, max_context) floats),
 * folded by weft_cu_attention_combine; with one group (enough tiles to fill the GPU) the blocks fold the
 * spans themselves, in the same order. Needs weft_cu_attention_tiles_ok(Hq, Hkv, d) (weft_cu_attention_ok and
 * d <= 128) and tiles of at most weft_cu_attention_tile_rows(Hq, Hkv) = 128 / (Hq/Hkv) rows covering rows
 * 0..n-1 (rows of a tile past that count are not written), each tile's rows consecutive positions of one
 * stream (the same kv and cap) whose keys up to the tile's last position are all stored; tiles: device memory
 * [n_tiles]; max_pos: the largest position of the call (< max_context); cudaErrorInvalidValue otherwise.
 * Caveat: keys between a row's position and its tile's last position enter its P·V with p = 0, so a
 * non-finite V there (an overflowed later row of the same chunk) makes the row NaN here and not in
 * weft_cu_attention. Shared memory: weft_cu_attention_tiles_smem(d) bytes per block. */
int weft_cu_attention_tiles_ok(int Hq, int Hkv, int d);
int weft_cu_attention_tile_rows(int Hq, int Hkv);
size_t weft_cu_attention_tiles_smem(int d);
cudaError_t weft_cu_attention_tiles(const float *q, float *out, const weft_cu_row *rows, int n, int max_pos,
                                    const weft_cu_tile *tiles, int n_tiles, int Hq, int Hkv, int d, int layer,
                                    float scale, float *scratch, int max_context, int f16,
                                    cudaStream_t stream);

/* weft_cu_attention_tiles with the launch shape chosen by the caller (harnesses and tests): warps 4 or 8 per
 * block (tiles of at most 16·warps/(Hq/Hkv) rows), or -8 / -7: 8 warps computing each key block on wgmma as
 * two warpgroups (-7: P·V in two alternating accumulator sets; f16, d = 128, sm_90a only:
 * cudaErrorNotSupported elsewhere; tiles as for 8),
 * span_group spans of keys per block (0: the default from the grid size). Every shape gives the same bits. */
cudaError_t weft_cu_attention_tiles_shaped(const float *q, float *out, const weft_cu_row *rows, int n,
                                           int max_pos, const weft_cu_tile *tiles, int n_tiles, int Hq,
                                           int Hkv, int d, int layer, float scale, float *scratch,
                                           int max_context, int f16, int warps, int span_group,
                                           cudaStream_t stream);

/* Folds the span partials in scratch (laid out [row][query head][span of max_context][m, l, o[d]]) of every
 * row among rows 0..n-1 whose keys exceed one span, in ascending order, and writes o / l (attention.cu). */
cudaError_t weft_cu_attention_combine(float *out, const weft_cu_row *rows, int n, int Hq, int d,
                                      const float *scratch, int max_context, cudaStream_t stream);

/* The decode step of a layer's attention in one launch for n rows of distinct streams (attention_decode.cu):
 * what weft_cu_rope_store, weft_cu_attention and weft_cu_xq_prep do for rows 0..n-1, with the same bits.
 * Row r: q [n, Hq·d] and k [n, Hkv·d] (the q|k|v outputs, not rotated; read only) rotated at rows[r].pos, the
 * rotated k and v [n, Hkv·d] stored into the row's cache at that position for layer `layer` — with q_norm and
 * k_norm ([d] each, both or neither; qwen3), q's and k's heads first normed as weft_cu_rmsnorm(…, d, eps)
 * norms them —, out [n, Hq·d] = the attention over keys 0..pos, and, with xq (K = Hq·d), out's prepared words
 * and sums for rows 0..n-1. Every row must be its stream's only row of the call (rows[r].kv distinct): a row
 * reads its cache below its position and writes only its position. max_pos = the largest rows[r].pos (the
 * launch covers its spans; a graph replays it for any positions of the same span count). scratch:
 * max(weft_cu_attention_scratch_floats(n, Hq, d, max_context), weft_cu_attention_decode_scratch_floats(n, Hq,
 * d)) floats. counters: weft_cu_attention_decode_counters(n, Hkv) ints (or more), zero before the first
 * launch (the span form, weft_cu_attention_decode_shaped, uses neither); each launch returns them to zero
 * (the last blocks to finish fold a row's key-block records in their fixed order, so the bits do not depend
 * on which blocks those are, nor on the other rows). Returns cudaErrorInvalidValue for bad arguments and
 * cudaErrorNotSupported where the caller must take the separate kernels: long contexts (max_pos >=
 * 8·WEFT_CU_ATTN_SPAN·WEFT_CU_ATTN_KB = 2048, where they are faster at one row), xq with (Hq/Hkv)·d not a
 * multiple of 32, or more shared memory than the device has. The row table and the rows' cache entries before
 * their positions are read before the kernel waits for its predecessor (PDL; an exception to pdl.cuh's rule):
 * the kernel launched just before it on the stream must not write them, and every writer on another stream
 * must be complete (forward.c: the q|k|v matmul; cache entries are written by earlier forwards, each
 * synchronized, and by snapshot restores, synchronized too). f16: weft_cu_attention's f16 arithmetic
 * (independent of xq->f16, which only says how the words are written). */
int weft_cu_attention_decode_counters(int n_rows, int Hkv);
/* The most rows of distinct streams for which weft_cu_attention_decode beats the separate kernels at this
 * shape (bench_cuda_attention_decode, bench/NOTES.md session 21: at 600 positions, 4 rows 9.7 vs 21.1 µs per
 * layer in the span form, 16 rows 38.2 vs 28.0): WEFT_CU_ATTN_DECODE_MAX_ROWS where the span form runs
 * (weft_cu_attention_decode_shaped), else 1 (the block form: 26.1 µs at 4 rows); 0 for a shape not
 * weft_cu_attention_ok. Callers size the scratch and counters for WEFT_CU_ATTN_DECODE_MAX_ROWS rows. */
#define WEFT_CU_ATTN_DECODE_MAX_ROWS 4
int weft_cu_attention_decode_rows(int Hq, int Hkv, int d, int f16);
size_t weft_cu_attention_decode_scratch_floats(int n_rows, int Hq, int d);
cudaError_t weft_cu_attention_decode(const float *q, const float *k, const float *v, float *out,
                                     const weft_cu_xq *xq, const weft_cu_row *rows, int n, int max_pos,
                                     int Hq, int Hkv, int d, int layer, float scale, const weft_cu_rope *rope,
                                     const float *q_norm, const float *k_norm, float eps, float *scratch,
                                     int max_context, int *counters, int f16, cudaStream_t stream);

/* weft_cu_attention_decode in a chosen form (harnesses): 0 = the default; 1 = the block form (one block per
 * (kv head, key block, row), arrival counters in global memory); 2 = the span form (f16 only, thread block
 * clusters: one block per (span, kv head, row), each warp one key block, the folds in shared and distributed
 * shared memory; cudaErrorNotSupported where it cannot run: no clusters, fp32, d > 128, more shared memory
 * than the device has, or no cluster of 8 such blocks resident — cudaOccupancyMaxActiveClusters, e.g. a
 * MIG / MPS partition). The default is the span form where it runs, else the block form. Every form gives
 * the same bits. */
cudaError_t weft_cu_attention_decode_shaped(const float *q, const float *k, const float *v, float *out,
                                            const weft_cu_xq *xq, const weft_cu_row *rows, int n, int max_pos,
                                            int Hq, int Hkv, int d, int layer, float scale,
                                            const weft_cu_rope *rope, const float *q_norm,
                                            const float *k_norm, float eps, float *scratch, int max_context,
                                            int *counters, int f16, int form, cudaStream_t stream);

/* g[i] = silu(g[i])·u[i] = g/(1 + exp(−g))·u for i < n. */
cudaError_t weft_cu_swiglu(float *g, const float *u, int64_t n, cudaStream_t stream);

/* Device bytes a weight of this layout takes (q + s + b) for rows × cols. */
size_t weft_cu_weight_bytes(weft_cu_kind kind, weft_cu_qmode mode, weft_cu_sdt sdt, int group, int64_t rows,
                            int64_t cols);

#ifdef __cplusplus
}
#endif
#endif
