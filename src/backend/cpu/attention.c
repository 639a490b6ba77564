/* Causal attention over a KV cache in the fixed-block order of att.h: the task split and the portable pieces.
 *
 * Task splits (they change which thread computes what, never how):
 *   many rows (prefill): one task per (row, kv head), its query heads sharing each K/V row load;
 *   few rows, long context: one task per (row, kv head, super-block) writing partials to the pool's shared
 *   workspace, then one task per (row, query head) merging them in order;
 *   few rows, short context: one task per (row, query head). */
#include "att.h"
#include "mm.h"

typedef struct att_job {
    const weft_attn_args *a;
    const weft_att_isa *isa;
    int G;        /* query heads per kv head */
    int n_sb;     /* super-blocks of the longest row (split mode) */
    float *parts; /* split mode: [n_rows][n_heads][n_sb] × (2 + d) */
    int by_group; /* whole-row tasks over a kv head's query heads (else one query head) */
    int per_task; /* (row, kv head) or (row, query head) units per task */
    int64_t units;
} att_job;

static int n_super(int pos) {
    return pos / ATT_SUPER + 1;
}

/* Heads [h0, h0+g) of row r (one kv head), super-blocks in order, merged into out; then out /= L. */
static void att_heads(const att_job *j, int r, int h0, int g, float *scratch) {
    const weft_attn_args *a = j->a;
    const int d = a->head_dim, kvh = h0 / j->G, P = a->pos[r];
    const float *K = a->k[r] + (int64_t)kvh * d, *V = a->v[r] + (int64_t)kvh * d;
    float M[ATT_GC], L[ATT_GC], m[ATT_GC], l[ATT_GC];
    float *o = scratch, *ws = scratch + ATT_GC * d;
    for (int c = 0; c < g; c += ATT_GC) {
        const int gc = g - c < ATT_GC ? g - c : ATT_GC;
        const float *q[ATT_GC];
        float *out[ATT_GC];
        for (int h = 0; h < gc; h++) {
            q[h] = a->q + r * a->q_stride + (int64_t)(h0 + c + h) * d;
            out[h] = a->out + r * a->out_stride + (int64_t)(h0 + c + h) * d;
        }
        for (int sb = 0; sb < n_super(P); sb++) {
            const int t0 = sb * ATT_SUPER, t1 = P + 1 < t0 + ATT_SUPER ? P + 1 : t0 + ATT_SUPER;
            j->isa->sblock(q, gc, K, V, a->kv_stride, d, a->scale, t0, t1, sb ? m : M, sb ? l : L, o, ws);
            for (int h = 0; h < gc; h++) {
                if (sb == 0)
                    memcpy(out[h], o + h * d, (size_t)d * sizeof(float));
                else
                    j->isa->merge(&M[h], &L[h], out[h], m[h], l[h], o + h * d, d);
            }
        }
        for (int h = 0; h < gc; h++)
            for (int i = 0; i < d; i++) out[h][i] = out[h][i] / L[h];
    }
}

static void task_rows(void *ctx, int64_t task, float *scratch) {
    const att_job *j = ctx;
    for (int64_t u = task * j->per_task; u < (task + 1) * j->per_task && u < j->units; u++) {
        if (j->by_group) {
            const int r = (int)(u / j->a->n_kv_heads), kvh = (int)(u % j->a->n_kv_heads);
            att_heads(j, r, kvh * j->G, j->G, scratch);
        } else {
            att_heads(j, (int)(u / j->a->n_heads), (int)(u % j->a->n_heads), 1, scratch);
        }
    }
}

/* split mode, part 1: (row, kv head, super-block) → partials of the kv head's query heads */
static float *part_at(const att_job *j, int r, int h, int sb) {
    return j->parts + (((int64_t)r * j->a->n_heads + h) * j->n_sb + sb) * (2 + j->a->head_dim);
}

static void task_parts(void *ctx, int64_t task, float *scratch) {
    const att_job *j = ctx;
    const weft_attn_args *a = j->a;
    const int sb = (int)(task % j->n_sb), rk = (int)(task / j->n_sb);
    const int r = rk / a->n_kv_heads, kvh = rk % a->n_kv_heads, d = a->head_dim, P = a->pos[r];
    if (sb >= n_super(P)) return;
    const int t0 = sb * ATT_SUPER, t1 = P + 1 < t0 + ATT_SUPER ? P + 1 : t0 + ATT_SUPER;
    const float *K = a->k[r] + (int64_t)kvh * d, *V = a->v[r] + (int64_t)kvh * d;
    float M[ATT_GC], L[ATT_GC];
    float *o = scratch, *ws = scratch + ATT_GC * d;
    for (int c = 0; c < j->G; c += ATT_GC) {
        const int gc = j->G - c < ATT_GC ? j->G - c : ATT_GC, h0 = kvh * j->G + c;
        const float *q[ATT_GC];
        for (int h = 0; h < gc; h++) q[h] = a->q + r * a->q_stride + (int64_t)(h0 + h) * d;
        j->isa->sblock(q, gc, K, V, a->kv_stride, d, a->scale, t0, t1, M, L, o, ws);
        for (int h = 0; h < gc; h++) {
            float *p = part_at(j, r, h0 + h, sb);
            p[0] = M[h];
            p[1] = L[h];
            memcpy(p + 2, o + h * d, (size_t)d * sizeof(float));
        }
    }
}

/* split mode, part 2: (row, query head) → merge its super-blocks in order */
static void task_merge(void *ctx, int64_t task, float *scratch) {
    (void)scratch;
    const att_job *j = ctx;
    const weft_attn_args *a = j->a;
    const int r = (int)(task / a->n_heads), h = (int)(task % a->n_heads), d = a->head_dim;
    float *out = a->out + r * a->out_stride + (int64_t)h * d;
    const float *p = part_at(j, r, h, 0);
    float M = p[0], L = p[1];
    memcpy(out, p + 2, (size_t)d * sizeof(float));
    for (int sb = 1; sb < n_super(a->pos[r]); sb++) {
        p = part_at(j, r, h, sb);
        j->isa->merge(&M, &L, out, p[0], p[1], p + 2, d);
    }
    for (int i = 0; i < d; i++) out[i] = out[i] / L;
}

void weft_attention_isa(weft_pool *p, const weft_attn_args *a, weft_cpu_isa isa) {
    if (a->n_rows <= 0) return;
    if (isa == WEFT_CPU_ISA_AUTO || !weft_cpu_isa_supported(isa)) isa = weft_cpu_isa_best();
    att_job j = {a, &weft_att_scalar, a->n_heads / a->n_kv_heads, 0, NULL, 1, 1, 0};
#if defined(__x86_64__)
    if (isa == WEFT_CPU_ISA_AVX512) j.isa = &weft_att_avx512;
#endif
    const int threads = weft_pool_threads(p);
    int max_sb = 1;
    for (int r = 0; r < a->n_rows; r++)
        if (n_super(a->pos[r]) > max_sb) max_sb = n_super(a->pos[r]);
    const int64_t groups = (int64_t)a->n_rows * a->n_kv_heads;
    const size_t parts = (size_t)a->n_rows * (size_t)a->n_heads * (size_t)max_sb * (size_t)(2 + a->head_dim);
    if (groups < 4 * threads && max_sb >= 2 && threads > 1 && parts <= WEFT_POOL_SHARED_FLOATS) {
        j.n_sb = max_sb;
        j.parts = weft_pool_shared(p);
        weft_pool_run(p, groups * max_sb, task_parts, &j);
        weft_pool_run(p, (int64_t)a->n_rows * a->n_heads, task_merge, &j);
        return;
    }
    j.by_group = groups >= 4 * threads || threads == 1;
    /* ~8 tasks per thread: a prefill chunk has thousands of (row, head) units, each only a few µs */
    j.units = j.by_group ? groups : (int64_t)a->n_rows * a->n_heads;
    j.per_task = (int)((j.units + 8 * threads - 1) / (8 * threads));
    /* and at least ~16K multiply-adds per task (short contexts, small heads: a task is then a few µs) */
    int64_t keys = 0;
    for (int r = 0; r < a->n_rows; r++) keys += a->pos[r] + 1;
    const int64_t per_unit = keys / a->n_rows * a->head_dim * 2 * (j.by_group ? j.G : 1) + 1;
    if ((int64_t)j.per_task * per_unit < 16384) j.per_task = (int)(16384 / per_unit + 1);
    weft_pool_run(p, (j.units + j.per_task - 1) / j.per_task, task_rows, &j);
}

void weft_attention(weft_pool *p, const weft_attn_args *a) {
    weft_attention_isa(p, a, WEFT_CPU_ISA_AUTO);
}

/* ---- portable pieces ---- */

static void scalar_merge(float *M, float *L, float *O, float m, float l, const float *o, int d) {
    float a, c;
    weft_att_merge_scalars(M, L, m, l, &a, &c);
    for (int i = 0; i < d; i++) O[i] = fmaf(O[i], a, o[i] * c);
}

static void scalar_sblock(const float *const *q, int g, const float *K, const float *V, int64_t kvs, int d,
                          float scale, int t0, int t1, float *M, float *L, float *O, float *ws) {
    float *s = ws, *ob = ws + ATT_BLOCK;
    for (int h = 0; h < g; h++) {
        float *Oh = O + h * d;
        for (int tb = t0; tb < t1; tb += ATT_BLOCK) {
            const int te = t1 - tb < ATT_BLOCK ? t1 : tb + ATT_BLOCK;
            float m = -INFINITY;
            for (int t = tb; t < te; t++) {
                s[t - tb] = weft_mm_scalar.dot(q[h], K + t * kvs, d) * scale;
                if (s[t - tb] > m) m = s[t - tb];
            }
            float lanes[16] = {0};
            for (int t = tb; t < te; t++) {
                s[t - tb] = weft_exp_c(s[t - tb] - m);
                lanes[t & 15] = lanes[t & 15] + s[t - tb];
            }
            const float l = weft_mm_tree16(lanes);
            float *dst = tb == t0 ? Oh : ob;
            for (int i = 0; i < d; i++) dst[i] = 0.0f;
            for (int t = tb; t < te; t++)
                for (int i = 0; i < d; i++) dst[i] = fmaf(s[t - tb], V[t * kvs + i], dst[i]);
            if (tb == t0) {
                M[h] = m;
                L[h] = l;
            } else {
                scalar_merge(&M[h], &L[h], Oh, m, l, ob, d);
            }
        }
    }
}

const weft_att_isa weft_att_scalar = {scalar_sblock, scalar_merge};
