/* SPEC §5.1 steps 4-8 (sort, top_k, l = z/T, top_p, min_p, keyed draw), equal bit for bit to the reference
 * draw() in ../shared/tools/sampler_reference.py, which sorts the whole vocabulary. We avoid that with:
 *
 *  (a) A prefix cut. Candidates with fl(l_i - l_0) < -41 can neither change the top_p total nor win:
 *      - their p = exp(l_i - l_0) < e^-41 ~ 1.6e-18 < 2^-53, which is under half an ulp of the running sum
 *        (it starts at p_0 = exp(0) = 1 and only grows), and they come after every kept candidate in sorted
 *        order, so the reference adds them without changing a bit; the keep loop ends inside the prefix
 *        because acc reaches total there and top_p * total <= total;
 *      - Gumbel noise lies in [-3.61, 36.74] (weft_gumbel), so l_i + g_i < l_0 - 4.2 < l_0 + g_0, and
 *        candidate 0 (the best) survives every filter.
 *      The cut predicate, and min_p's l >= l_0 + ln(min_p) when top_p is off, are monotone in z (fp division
 *      and subtraction round monotonically), so the kept set {z >= zcut} is a prefix of the sorted order.
 *  (b) top_k by a histogram pass and radix selection of the k-th candidate instead of a sort.
 *  (c) top_p needs the p values in sorted order (the total is a sequential sum): only the 32-bit value keys
 *      are radix-sorted; ids are not needed there (equal values add the same p in any order, and the sign
 *      of a zero z changes no p). The kept prefix is then "key < K, or key == K for the first c ids".
 *  (d) The draw needs no order at all: the winner is the largest l + g with ties to the earlier candidate,
 *      i.e. the smallest (key, id). Candidates are visited in id order; one whose noise provably cannot
 *      reach the current best (integer test on the key, see skip_bound) skips both logs.
 * A best logit of +-inf makes l_i - l_0 meaningless: that row takes the literal path (full sort). */
#include "core/sampler_impl.h"

#include "core/sampler_order.h"

#include <math.h>
#include <string.h>

#define L_CUT (-41.0)

static inline int32_t cand_id(uint64_t c) {
    return (int32_t)(uint32_t)(c & 0xffffffffu);
}

/* weft_key(seed, pos, id) = mix(base ^ id) with base = mix(mix(seed + G) ^ pos * C) shared by the row. */
static inline uint64_t key_base(uint64_t seed, int64_t pos) {
    return weft_mix(weft_mix(seed + 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)pos * 0xD1B54A32D192ED03ULL));
}
static inline uint64_t key_of(uint64_t base, int32_t id) {
    return weft_mix(base ^ (uint64_t)(int64_t)id);
}

/* The reference's draw() line by line over a full sort: for rows whose best logit is infinite. */
static int32_t draw_literal(weft_sampler *s, const weft_sampling *p, int64_t pos, double T) {
    const float *z = s->z;
    const size_t V = (size_t)s->vocab;
    for (size_t i = 0; i < V; i++) s->cand[i] = weft_order_cand(z[i], (int32_t)i);
    weft_order_sort(s->cand, s->tmp, V);
    size_t n = V;
    if (p->top_k > 0 && (size_t)p->top_k < n) n = (size_t)p->top_k;
    const double l0 = (double)z[cand_id(s->cand[0])] / T;
    size_t keep = n;
    if (p->top_p < 1.0) {
        double total = 0.0, acc = 0.0;
        for (size_t i = 0; i < n; i++) {
            s->p[i] = exp((double)z[cand_id(s->cand[i])] / T - l0);
            total += s->p[i];
        }
        keep = 0;
        for (size_t i = 0; i < n; i++) {
            if (keep > 0 && acc >= p->top_p * total) break;
            acc += s->p[i];
            keep++;
        }
    }
    const double thr = p->min_p > 0 ? l0 + log(p->min_p) : -INFINITY;
    size_t win = 0; /* stays 0 when nothing beats -inf: the reference has no answer, take the first */
    double bestv = -INFINITY;
    for (size_t i = 0; i < keep; i++) {
        int32_t id = cand_id(s->cand[i]);
        double l = (double)z[id] / T;
        if (p->min_p > 0 && !(l >= thr)) continue;
        double v = l + weft_gumbel(weft_uniform(weft_key(p->seed, pos, id)));
        if (v > bestv) {
            bestv = v;
            win = i;
        }
    }
    return cand_id(s->cand[win]);
}

/* Whether z belongs to the prefix: fl(z/T) - l0 >= L_CUT and fl(z/T) >= lmin (same operations as used later).
 */
static inline int in_prefix(float z, double T, double l0, double lmin) {
    double l = (double)z / T;
    return l - l0 >= L_CUT && l >= lmin;
}

static inline uint32_t asc_of(float z) {
    uint32_t b;
    memcpy(&b, &z, sizeof b);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The smallest fp32 value in the prefix, by bisection over the ordered bit patterns between -inf (outside,
 * since l0 is finite) and zb (inside). Every pattern in that range is a number, never a NaN. */
static float prefix_cut(float zb, double T, double l0, double lmin) {
    uint32_t lo = asc_of(-INFINITY), hi = asc_of(zb);
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (in_prefix(weft_order_value(~mid), T, l0, lmin))
            hi = mid;
        else
            lo = mid;
    }
    return weft_order_value(~hi);
}

/* The largest m such that every key with (key >> 12) <= m has Gumbel noise g <= d - 1e-6 (or -1: none;
 * INT64_MAX: all). With u = (m + 0.5) 2^-52, g(u) = -ln(-ln u) <= D  <=>  1 - u >= q = -expm1(-e^-D), i.e.
 * m <= 2^52 - 0.5 - q 2^52. The relative errors of exp and expm1 move that bound by < 3 units: 4 are
 * taken off. Working on 1 - u keeps this exact near u = 1, where u itself is too coarse.
 * Why it is safe to skip: the computed noise (two libm logs) exceeds the exact one by < 1e-14, and the 1e-6
 * margin covers that, the bin edge rounding (< 2^-24 for |l0| < 2^28) and the rounding of l + g, so a skipped
 * candidate's l + g is strictly below the current best and could not have replaced it. */
static int64_t skip_bound(double d) {
    double D = d - 1e-6;
    if (!(D > -4.0)) return -1;      /* noise is always >= -3.61 */
    if (D >= 37.0) return INT64_MAX; /* noise is always <= 36.74 */
    double q = -expm1(-exp(-D));
    double mf = 0x1p52 - 0.5 - q * 0x1p52;
    if (!(mf >= 5.0)) return -1;
    return (int64_t)mf - 4;
}

/* Fills s->cand with the prefix {z >= zcut} in id order, cut to the first top_k of the order when top_k > 0
 * (b): a histogram of the keys' top 11 bits finds the bucket that holds the k-th candidate, so only the
 * buckets up to it are gathered (usually a few hundred entries, not the vocabulary) and radix selection
 * finishes inside them. The first k of the order are the candidates <= the k-th smallest. */
static size_t collect(weft_sampler *s, float zcut, int top_k) {
    const float *z = s->z;
    const int64_t V = s->vocab;
    size_t n = 0;
    if (top_k <= 0) {
        for (int64_t i = 0; i < V; i++)
            if (z[i] >= zcut) s->cand[n++] = weft_order_cand(z[i], (int32_t)i);
        return n;
    }
    uint32_t hist[2048];
    memset(hist, 0, sizeof hist);
    for (int64_t i = 0; i < V; i++)
        if (z[i] >= zcut) hist[weft_order_key(z[i]) >> 21]++;
    size_t k = (size_t)top_k, cum = 0;
    uint32_t last = 2047;
    for (uint32_t b = 0; b < 2048; b++) {
        if (cum + hist[b] >= k) {
            last = b;
            break;
        }
        cum += hist[b];
    }
    for (int64_t i = 0; i < V; i++)
        if (z[i] >= zcut && (weft_order_key(z[i]) >> 21) <= last)
            s->cand[n++] = weft_order_cand(z[i], (int32_t)i);
    if (n > k) {
        uint64_t kth = weft_order_kth(s->cand, n, k, s->tmp);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (s->cand[i] <= kth) s->cand[m++] = s->cand[i];
        n = m;
    }
    return n;
}

/* top_p weights p_i = exp(l_i - l_0) of the sorted value keys, into s->p; each is computed alone, so parts
 * may run in parallel (weft_sampler_set_parallel). */
typedef struct weights_args {
    double *p;
    const uint32_t *keys;
    size_t n;
    int n_tasks;
    double T, l0;
} weights_args;

static void weights_part(const weights_args *w, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) w->p[i] = exp((double)weft_order_value(w->keys[i]) / w->T - w->l0);
}

static void weights_task(void *ctx, int64_t t) {
    const weights_args *w = ctx;
    weights_part(w, w->n * (size_t)t / (size_t)w->n_tasks, w->n * (size_t)(t + 1) / (size_t)w->n_tasks);
}

static void weights(weft_sampler *s, const uint32_t *keys, size_t n, double T, double l0) {
    weights_args w = {s->p, keys, n, s->n_tasks, T, l0};
    if (!s->run || n < WEFT_SAMPLER_PAR_MIN)
        weights_part(&w, 0, n);
    else
        s->run(s->run_ctx, s->n_tasks, weights_task, &w);
}

/* Everything step 8 reads, and the parts' results. */
typedef struct draw_args {
    const weft_sampler *s;
    const float *z;
    size_t n;
    int use_top_p, use_min_p, skipping;
    uint32_t kcut; /* top_p: keys above are cut; keys equal are kept before index eq_end */
    size_t eq_end;
    int32_t best; /* the first of the order, drawn before the loop */
    double T, l0, thr;
    uint64_t base; /* key_base(seed, pos) */
    uint64_t init_win;
    double init_v; /* best's l + g */
    double part_v[WEFT_SAMPLER_MAX_TASKS];
    uint64_t part_win[WEFT_SAMPLER_MAX_TASKS];
} draw_args;

/* Candidates [i0, i1) of s->cand (id order) against the running best (*bestv, *win), with skip table sk. */
static void draw_range(const draw_args *a, size_t i0, size_t i1, weft_skip_state *sk, double *bestv_io,
                       uint64_t *win_io) {
    const uint64_t *cand = a->s->cand;
    double bestv = *bestv_io;
    uint64_t win = *win_io;
    sk->stamp++;
    for (size_t i = i0; i < i1; i++) {
        const uint64_t c = cand[i];
        const int32_t id = cand_id(c);
        if (a->use_top_p) {
            uint32_t key = (uint32_t)(c >> 32);
            if (key > a->kcut) continue;
            if (key == a->kcut && i >= a->eq_end) continue; /* ties at the boundary: the first by id stay */
        }
        if (id == a->best) continue;
        const double l = (double)a->z[id] / a->T;
        if (a->use_min_p && !(l >= a->thr)) continue;
        if (a->skipping) {
            /* l0 - l is in [0, 41] here; the bin's upper l edge bounds this candidate's l from above (a
             * candidate put in a lower bin than its own only gets a looser bound). */
            double at = (a->l0 - l) * WEFT_SKIP_BINS_PER_UNIT;
            int bin = at < WEFT_SKIP_BINS - 1 ? (int)at : WEFT_SKIP_BINS - 1;
            if (sk->skip_stamp[bin] != sk->stamp) {
                sk->skip_max[bin] = skip_bound(bestv - (a->l0 - (double)bin / WEFT_SKIP_BINS_PER_UNIT));
                sk->skip_stamp[bin] = sk->stamp;
            }
            if (sk->skip_max[bin] == INT64_MAX) continue;
            uint64_t k = key_of(a->base, id);
            if ((int64_t)(k >> 12) <= sk->skip_max[bin]) continue;
            double v = l + weft_gumbel(weft_uniform(k));
            if (v > bestv || (v == bestv && c < win)) {
                bestv = v;
                win = c;
                sk->stamp++;
            }
        } else {
            double v = l + weft_gumbel(weft_uniform(key_of(a->base, id)));
            if (v > bestv || (v == bestv && c < win)) {
                bestv = v;
                win = c;
            }
        }
    }
    *bestv_io = bestv;
    *win_io = win;
}

/* Part t of the candidates, with its own skip table; a skipped candidate is below the part's best, which is
 * at least the starting best, so skipping stays safe per part. */
static void draw_task(void *ctx, int64_t t) {
    draw_args *a = ctx;
    const int nt = a->s->n_tasks;
    a->part_v[t] = a->init_v;
    a->part_win[t] = a->init_win;
    draw_range(a, a->n * (size_t)t / (size_t)nt, a->n * (size_t)(t + 1) / (size_t)nt, &a->s->task_skip[t],
               &a->part_v[t], &a->part_win[t]);
}

/* The value keys sorted ascending (returns keys or ktmp, whichever holds them). With a runner and many keys:
 * the 8 bits under the keys' common prefix pick one of 256 buckets (counted and scattered per part), then
 * the buckets are sorted one by one in parallel. Sorted values are one sequence however they were split, so
 * this equals weft_order_sort_u32 exactly. */
typedef struct sort_args {
    const weft_sampler *s;
    uint32_t *keys, *ktmp;
    size_t n;
    int shift, n_tasks;
    uint32_t lo[WEFT_SAMPLER_MAX_TASKS], hi[WEFT_SAMPLER_MAX_TASKS];
    size_t start[257];
} sort_args;

static inline size_t part_lo(size_t n, int64_t t, int nt) {
    return n * (size_t)t / (size_t)nt;
}

static void range_task(void *ctx, int64_t t) {
    sort_args *a = ctx;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = part_lo(a->n, t, a->n_tasks); i < part_lo(a->n, t + 1, a->n_tasks); i++) {
        lo = a->keys[i] < lo ? a->keys[i] : lo;
        hi = a->keys[i] > hi ? a->keys[i] : hi;
    }
    a->lo[t] = lo;
    a->hi[t] = hi;
}

static void hist_task(void *ctx, int64_t t) {
    sort_args *a = ctx;
    uint32_t *h = a->s->task_hist[t];
    memset(h, 0, 256 * sizeof *h);
    for (size_t i = part_lo(a->n, t, a->n_tasks); i < part_lo(a->n, t + 1, a->n_tasks); i++)
        h[(a->keys[i] >> a->shift) & 0xff]++;
}

static void scatter_task(void *ctx, int64_t t) {
    sort_args *a = ctx;
    uint32_t *h = a->s->task_hist[t]; /* holds this part's write offsets now */
    for (size_t i = part_lo(a->n, t, a->n_tasks); i < part_lo(a->n, t + 1, a->n_tasks); i++)
        a->ktmp[h[(a->keys[i] >> a->shift) & 0xff]++] = a->keys[i];
}

static void bucket_task(void *ctx, int64_t t) {
    sort_args *a = ctx;
    for (int b = (int)t; b < 256; b += a->n_tasks)
        weft_order_sort_u32(a->ktmp + a->start[b], a->keys + a->start[b], a->start[b + 1] - a->start[b]);
}

static uint32_t *sort_keys(weft_sampler *s, uint32_t *keys, uint32_t *ktmp, size_t n) {
    if (!s->run || n < WEFT_SAMPLER_PAR_MIN) {
        weft_order_sort_u32(keys, ktmp, n);
        return keys;
    }
    sort_args a = {s, keys, ktmp, n, 0, s->n_tasks, {0}, {0}, {0}};
    s->run(s->run_ctx, a.n_tasks, range_task, &a);
    uint32_t lo = a.lo[0], hi = a.hi[0];
    for (int t = 1; t < a.n_tasks; t++) {
        lo = a.lo[t] < lo ? a.lo[t] : lo;
        hi = a.hi[t] > hi ? a.hi[t] : hi;
    }
    if (lo == hi) return keys; /* all equal: already sorted */
    int top = 31;
    while (!(((lo ^ hi) >> top) & 1u)) top--;
    a.shift = top >= 7 ? top - 7 : 0;
    s->run(s->run_ctx, a.n_tasks, hist_task, &a);
    size_t sum = 0;
    for (int b = 0; b < 256; b++) { /* bucket starts, then each part's offset inside each bucket */
        a.start[b] = sum;
        for (int t = 0; t < a.n_tasks; t++) {
            uint32_t c = s->task_hist[t][b];
            s->task_hist[t][b] = (uint32_t)sum;
            sum += c;
        }
    }
    a.start[256] = sum;
    s->run(s->run_ctx, a.n_tasks, scatter_task, &a);
    s->run(s->run_ctx, a.n_tasks, bucket_task, &a);
    return ktmp;
}

int32_t weft_sampler_draw(weft_sampler *s, const weft_sampling *p, int64_t pos, int32_t best, float zb) {
    const float *z = s->z;
    const int64_t V = s->vocab;
    const double T = p->temperature > 1e-6 ? p->temperature : 1e-6; /* step 5: max(T, 1e-6) */
    const double l0 = (double)zb / T;
    if (!isfinite(l0)) return draw_literal(s, p, pos, T);
    const int use_top_p = p->top_p < 1.0;
    const int use_min_p = p->min_p > 0;
    const double thr = use_min_p ? l0 + log(p->min_p) : -INFINITY; /* step 7's bound, l_0 + ln(min_p) */

    /* (a) the prefix. Without top_p, min_p's bound cuts it too (a prefix taken before or after top_k is the
     * same); with top_p it must wait, since top_p's total spans it. */
    const double lmin = use_top_p ? -INFINITY : thr;
    if (!in_prefix(zb, T, l0, lmin)) return best; /* only min_p > 1 (invalid): no survivor, take the first */
    const float zcut = prefix_cut(zb, T, l0, lmin);
    size_t n = collect(s, zcut, p->top_k);

    /* (c) step 6: p_i = exp(l_i - l_0) in sorted order, total added sequentially, keep while the sum before
     * i is < top_p * total. */
    uint32_t kcut = 0;
    size_t eq_left = 0;
    if (use_top_p) {
        uint32_t *keys = (uint32_t *)s->tmp, *ktmp = keys + V;
        for (size_t i = 0; i < n; i++) keys[i] = (uint32_t)(s->cand[i] >> 32);
        keys = sort_keys(s, keys, ktmp, n);
        weights(s, keys, n, T, l0);
        double total = 0.0, acc = 0.0;
        for (size_t i = 0; i < n; i++) total += s->p[i];
        size_t keep = 0;
        for (size_t i = 0; i < n; i++) {
            if (keep > 0 && acc >= p->top_p * total) break;
            acc += s->p[i];
            keep++;
        }
        kcut = keys[keep - 1];
        for (size_t i = keep; i-- > 0 && keys[i] == kcut;) eq_left++;
    }

    /* (d) step 8 in id order. The best (first of the order, always kept) goes first so that skipping bites
     * from the start. The top_p boundary ties kept are the first eq_left by id: those before eq_end. */
    size_t eq_end = 0;
    for (size_t i = 0, seen = 0; eq_left && !eq_end && i < n; i++)
        if ((uint32_t)(s->cand[i] >> 32) == kcut && ++seen == eq_left) eq_end = i + 1;
    const uint64_t base = key_base(p->seed, pos);
    draw_args d = {s,
                   z,
                   n,
                   use_top_p,
                   use_min_p,
                   fabs(l0) < 0x1p28 /* the skip proof's margins need |l| < 2^28 */,
                   kcut,
                   eq_end,
                   best,
                   T,
                   l0,
                   thr,
                   base,
                   weft_order_cand(zb, best),
                   l0 + weft_gumbel(weft_uniform(key_of(base, best))),
                   {0},
                   {0}};
    if (!s->run || n < WEFT_SAMPLER_PAR_MIN) {
        double bestv = d.init_v;
        uint64_t win = d.init_win;
        draw_range(&d, 0, n, &s->skip, &bestv, &win);
        return cand_id(win);
    }
    /* Parts in parallel, each from the same starting best; merged by (l + g desc, candidate asc), a total
     * order, so the result is the serial loop's whatever the parts or their schedule. */
    s->run(s->run_ctx, s->n_tasks, draw_task, &d);
    double bestv = d.init_v;
    uint64_t win = d.init_win;
    for (int t = 0; t < s->n_tasks; t++)
        if (d.part_v[t] > bestv || (d.part_v[t] == bestv && d.part_win[t] < win)) {
            bestv = d.part_v[t];
            win = d.part_win[t];
        }
    return cand_id(win);
}
