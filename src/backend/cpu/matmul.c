/* weft_matmul and weft_dot: the task split, ISA dispatch, and the portable (scalar) pieces. The arithmetic
 * every ISA implements is written down in mm.h. */
#include "mm.h"

#include "weft/safetensors.h"

#include <string.h>

/* ---- ISA choice ---- */

bool weft_cpu_isa_supported(weft_cpu_isa isa) {
    switch (isa) {
    case WEFT_CPU_ISA_SCALAR:
        return true;
#if defined(__x86_64__)
    case WEFT_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case WEFT_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("f16c");
#endif
    default:
        return false;
    }
}

weft_cpu_isa weft_cpu_isa_best(void) {
    if (weft_cpu_isa_supported(WEFT_CPU_ISA_AVX512)) return WEFT_CPU_ISA_AVX512;
    if (weft_cpu_isa_supported(WEFT_CPU_ISA_AVX2)) return WEFT_CPU_ISA_AVX2;
    return WEFT_CPU_ISA_SCALAR;
}

const char *weft_cpu_isa_name(weft_cpu_isa isa) {
    switch (isa) {
    case WEFT_CPU_ISA_SCALAR:
        return "scalar";
    case WEFT_CPU_ISA_AVX2:
        return "avx2";
    case WEFT_CPU_ISA_AVX512:
        return "avx512";
    default:
        return "auto";
    }
}

/* The ISA's pieces; an unsupported request falls back to the best supported one (never to a different
 * arithmetic: all give the same bits). __builtin_cpu_supports reads a table libgcc fills at start-up, so
 * asking per call costs a few loads and keeps no state of our own. */
static const weft_mm_isa *isa_get(weft_cpu_isa isa) {
    if (isa == WEFT_CPU_ISA_AUTO || !weft_cpu_isa_supported(isa)) isa = weft_cpu_isa_best();
#if defined(__x86_64__)
    if (isa == WEFT_CPU_ISA_AVX512) return &weft_mm_avx512;
    if (isa == WEFT_CPU_ISA_AVX2) return &weft_mm_avx2;
#endif
    return &weft_mm_scalar;
}

/* ---- portable pieces ---- */

static float scale_at(weft_dtype dt, const uint8_t *base, int64_t i) {
    if (dt == WEFT_DT_F32) {
        float f;
        memcpy(&f, base + 4 * i, 4);
        return f;
    }
    uint16_t h = (uint16_t)(base[2 * i] | base[2 * i + 1] << 8);
    return dt == WEFT_DT_F16 ? weft_f16_to_f32(h) : weft_bf16_to_f32(h);
}

/* mlx.c's decoder on a column range (k0 is a multiple of 32, so a group and a word boundary for every width):
 * q from the LSB-first bitstream, value = s·q + b with two roundings. */
static void mlx_segment(const weft_tensor *t, int64_t row, int64_t k0, int64_t kc, float *out) {
    const uint8_t *w = t->data + (size_t)row * weft_mlx_row_bytes(t);
    size_t srow = weft_mlx_scale_row_bytes(t) * (size_t)row;
    const uint8_t *sp = t->scales + srow, *bp = t->biases + srow;
    const int bits = t->bits;
    for (int64_t j = k0; j < k0 + kc; j++) {
        int64_t g = j / t->group_size;
        float s = scale_at(t->scale_dtype, sp, g), b = scale_at(t->scale_dtype, bp, g);
        uint64_t bit = (uint64_t)j * (uint64_t)bits;
        const uint8_t *p = w + 4 * (bit >> 5);
        unsigned off = (unsigned)(bit & 31);
        uint64_t word = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        if (off + (unsigned)bits > 32)
            word |= ((uint64_t)p[4] | (uint64_t)p[5] << 8 | (uint64_t)p[6] << 16 | (uint64_t)p[7] << 24)
                    << 32;
        float q = (float)(uint32_t)((word >> off) & ((1u << bits) - 1u));
        float sq = s * q;
        out[j - k0] = sq + b;
    }
}

void weft_mm_decode_ref(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {
    const int64_t K = weft_tensor_cols(W);
    if (W->dtype == WEFT_DT_MLX_AFFINE) {
        mlx_segment(W, row, k0, kc, out);
        return;
    }
    const uint8_t *src = W->data + (size_t)row * weft_dtype_row_bytes(W->dtype, K);
    switch (W->dtype) {
    case WEFT_DT_F32:
        memcpy(out, src + 4 * k0, (size_t)kc * 4);
        return;
    case WEFT_DT_F16:
    case WEFT_DT_BF16:
        for (int64_t i = 0; i < kc; i++) {
            uint16_t h = (uint16_t)(src[2 * (k0 + i)] | src[2 * (k0 + i) + 1] << 8);
            out[i] = W->dtype == WEFT_DT_F16 ? weft_f16_to_f32(h) : weft_bf16_to_f32(h);
        }
        return;
    default: {
        const weft_dtype_info *info = weft_dtype_get(W->dtype);
        weft_ggml_dequant(W->dtype, src + (size_t)(k0 / info->block) * (size_t)info->block_bytes, out, kc);
        return;
    }
    }
}

static bool scalar_decode(const weft_tensor *W, int64_t row, int64_t k0, int64_t kc, float *out) {
    (void)W, (void)row, (void)k0, (void)kc, (void)out;
    return false;
}

static void scalar_tile(const float *const w[MM_MR], const float *x, int64_t ldx, int nr, int64_t kc,
                        float *acc, bool init, bool finish, float *y, int64_t ldy, int mr) {
    for (int i = 0; i < MM_MR; i++)
        for (int r = 0; r < nr; r++) {
            float *a = acc + (i * MM_NR + r) * 16, lanes[16];
            for (int l = 0; l < 16; l++) lanes[l] = init ? 0.0f : a[l];
            const float *wi = w[i], *xr = x + r * ldx;
            for (int64_t k = 0; k < kc; k++) lanes[k & 15] = fmaf(wi[k], xr[k], lanes[k & 15]);
            if (!finish)
                memcpy(a, lanes, sizeof lanes);
            else if (i < mr)
                y[r * ldy + i] = weft_mm_tree16(lanes);
        }
}

static float scalar_dot(const float *a, const float *b, int64_t n) {
    float lanes[16] = {0};
    for (int64_t k = 0; k < n; k++) lanes[k & 15] = fmaf(a[k], b[k], lanes[k & 15]);
    return weft_mm_tree16(lanes);
}

const weft_mm_isa weft_mm_scalar = {"scalar", scalar_decode, scalar_tile, NULL, scalar_dot};

/* ---- the task split ---- */

typedef struct mm_job {
    const weft_tensor *W;
    const weft_mm_isa *isa;
    const float *X;
    float *Y;
    int64_t n_rows, K, out, ldy;
    int64_t o_per_task, r_per_task, n_otasks;
} mm_job;

/* Few input rows: each panel of MM_MR weight rows decoded in registers (fused) or into a small buffer, then
 * one tile over the rows. */
static void mm_few(const mm_job *j, int64_t o0, int64_t o1, int64_t r0, int64_t r1, float *buf) {
    const int64_t K = j->K, nr = r1 - r0;
    const bool direct = j->W->dtype == WEFT_DT_F32;
    float *acc = buf + MM_MR * MM_KC;
    for (int64_t o = o0; o < o1; o += MM_MR) {
        const int mr = (int)(o1 - o < MM_MR ? o1 - o : MM_MR);
        float *y = j->Y + r0 * j->ldy + o;
        const float *x = j->X + r0 * K;
        if (!direct && j->isa->fused && j->isa->fused(j->W, o, mr, x, K, (int)nr, y, j->ldy)) continue;
        for (int64_t k0 = 0; k0 < K; k0 += MM_KC) {
            const int64_t kc = K - k0 < MM_KC ? K - k0 : MM_KC;
            const float *w[MM_MR];
            for (int i = 0; i < MM_MR; i++) {
                const int64_t row = o + (i < mr ? i : mr - 1); /* padding rows: computed, never written */
                if (direct) {
                    w[i] = (const float *)(const void *)(j->W->data + (size_t)row * (size_t)K * 4) + k0;
                    continue;
                }
                float *dst = buf + (int64_t)i * MM_KC;
                if (!j->isa->decode(j->W, row, k0, kc, dst)) weft_mm_decode_ref(j->W, row, k0, kc, dst);
                w[i] = dst;
            }
            j->isa->tile(w, x + k0, K, (int)nr, kc, acc, k0 == 0, k0 + kc == K, y, j->ldy, mr);
        }
    }
}

/* Many input rows (prefill): a block of MM_OB weight rows × MM_KB columns is decoded once into scratch (it
 * stays in L2), then every tile of MM_NR input rows (in L1) runs against each of its MM_MR-row panels.
 * When K > MM_KB, the lanes of up to MM_RB input rows wait in scratch between column blocks. */
static void mm_many(const mm_job *j, int64_t o0, int64_t o1, int64_t r0, int64_t r1, float *scratch) {
    const int64_t K = j->K;
    const int64_t kb = K <= MM_KB1 ? K : MM_KB, rb_rows = K <= MM_KB1 ? r1 - r0 : MM_RB;
    float *wblk = scratch, *acc = scratch + MM_OB * MM_KB; /* acc: only when K > MM_KB1 */
    for (int64_t ob = o0; ob < o1; ob += MM_OB) {
        const int64_t oe = o1 - ob < MM_OB ? o1 : ob + MM_OB, n_o = oe - ob;
        for (int64_t rb = r0; rb < r1; rb += rb_rows) {
            const int64_t re = r1 - rb < rb_rows ? r1 : rb + rb_rows;
            for (int64_t k0 = 0; k0 < K; k0 += kb) {
                const int64_t kc = K - k0 < kb ? K - k0 : kb;
                for (int64_t i = 0; i < n_o; i++) { /* fp32 too: a compact block streams better */
                    float *dst = wblk + i * kb;
                    if (!j->isa->decode(j->W, ob + i, k0, kc, dst))
                        weft_mm_decode_ref(j->W, ob + i, k0, kc, dst);
                }
                for (int64_t r = rb; r < re; r += MM_NR) {
                    const int nr = (int)(re - r < MM_NR ? re - r : MM_NR);
                    for (int64_t o = ob; o < oe; o += MM_MR) {
                        const int mr = (int)(oe - o < MM_MR ? oe - o : MM_MR);
                        const float *w[MM_MR];
                        for (int i = 0; i < MM_MR; i++) {
                            const int64_t row = o + (i < mr ? i : mr - 1);
                            w[i] = wblk + (row - ob) * kb;
                        }
                        float *a = acc + (((o - ob) / MM_MR) * MM_RB_TILES + (r - rb) / MM_NR) *
                                             (MM_MR * MM_NR * 16);
                        j->isa->tile(w, j->X + r * K + k0, K, nr, kc, a, k0 == 0, k0 + kc == K,
                                     j->Y + r * j->ldy + o, j->ldy, mr);
                    }
                }
            }
        }
    }
}

static void mm_task(void *ctx, int64_t task, float *scratch) {
    const mm_job *j = ctx;
    int64_t ot = task % j->n_otasks, rt = task / j->n_otasks;
    int64_t o0 = ot * j->o_per_task, o1 = o0 + j->o_per_task;
    int64_t r0 = rt * j->r_per_task, r1 = r0 + j->r_per_task;
    if (o1 > j->out) o1 = j->out;
    if (r1 > j->n_rows) r1 = j->n_rows;
    if (r1 - r0 <= MM_NF)
        mm_few(j, o0, o1, r0, r1, scratch);
    else
        mm_many(j, o0, o1, r0, r1, scratch);
}

void weft_matmul_isa(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y,
                     int64_t ldy, weft_cpu_isa isa) {
    if (n_rows <= 0 || weft_tensor_rows(W) <= 0) return;
    mm_job j = {W, isa_get(isa), X, Y, n_rows, weft_tensor_cols(W), weft_tensor_rows(W), ldy, 0, 0, 0};
    if (j.K <= 0) { /* an empty sum */
        for (int64_t r = 0; r < n_rows; r++) memset(Y + r * ldy, 0, (size_t)j.out * sizeof(float));
        return;
    }
    /* The split only decides which thread computes which outputs, never how (see mm.h). About 4 tasks per
     * thread (a multiple of the thread count), each at least ~16K multiply-adds: every task costs two atomic
     * operations on lines both threads write, which matters for the small matrices of a decode step. Weight
     * rows go in units of a decoded block (MM_OB) when many input rows share it, else of a panel (MM_MR). */
    const int threads = weft_pool_threads(p);
    const int64_t unit = n_rows > MM_NF ? MM_OB : MM_MR, units = (j.out + unit - 1) / unit;
    const int64_t macs = j.out * j.K * n_rows, want = (int64_t)threads * 4;
    int64_t max_tasks = macs / 16384 > 1 ? macs / 16384 : 1, r_tasks = 1;
    if (units < want && n_rows >= 2 * MM_NR) { /* few weight rows, many input rows: split the rows too */
        r_tasks = (want + units - 1) / units;
        if (r_tasks > n_rows / MM_NR) r_tasks = n_rows / MM_NR;
    }
    j.r_per_task = (n_rows + r_tasks - 1) / r_tasks;
    j.r_per_task = (j.r_per_task + MM_NR - 1) / MM_NR * MM_NR;
    r_tasks = (n_rows + j.r_per_task - 1) / j.r_per_task;
    int64_t o_tasks = want < max_tasks ? want : max_tasks;
    o_tasks = (o_tasks + r_tasks - 1) / r_tasks;
    if (o_tasks > threads) o_tasks = o_tasks / threads * threads;
    if (o_tasks > units) o_tasks = units;
    j.o_per_task = (units + o_tasks - 1) / o_tasks * unit;
    j.n_otasks = (j.out + j.o_per_task - 1) / j.o_per_task;
    weft_pool_run(p, j.n_otasks * r_tasks, mm_task, &j);
}

void weft_matmul(weft_pool *p, const weft_tensor *W, const float *X, int64_t n_rows, float *Y, int64_t ldy) {
    weft_matmul_isa(p, W, X, n_rows, Y, ldy, WEFT_CPU_ISA_AUTO);
}

float weft_dot_isa(const float *a, const float *b, int64_t n, weft_cpu_isa isa) {
    return isa_get(isa)->dot(a, b, n);
}

float weft_dot(const float *a, const float *b, int64_t n) {
    return isa_get(WEFT_CPU_ISA_AUTO)->dot(a, b, n);
}
