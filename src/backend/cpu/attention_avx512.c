/* AVX-512 attention pieces in the order att.h specifies (bit-identical to the scalar ones): scores four keys
 * at a time with the batched lane tree, exp_c on 16 keys, V rows accumulated for up to ATT_GC query heads per
 * load. Compiled for AVX-512 with a target pragma and only used after __builtin_cpu_supports said yes. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")
#include "att.h"
#include "mm_avx512.h"

static void avx512_merge(float *M, float *L, float *O, float m, float l, const float *o, int d) {
    float a, c;
    weft_att_merge_scalars(M, L, m, l, &a, &c);
    const __m512 va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c);
    int i = 0;
    for (; i + 16 <= d; i += 16)
        _mm512_storeu_ps(
            O + i, _mm512_fmadd_ps(_mm512_loadu_ps(O + i), va, _mm512_mul_ps(_mm512_loadu_ps(o + i), vc)));
    if (i < d) {
        const __mmask16 k = (__mmask16)((1u << (d - i)) - 1);
        _mm512_mask_storeu_ps(O + i, k,
                              _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, O + i), va,
                                              _mm512_mul_ps(_mm512_maskz_loadu_ps(k, o + i), vc)));
    }
}

/* s[h][u] = dot(q[h], K_{t+u}) · scale for u < 4 (keys past te − 1 repeat the last one; their scores are not
 * used) */
static inline void scores4(const float *const *q, int g, const float *K, int64_t kvs, int d, float scale,
                           int t, int te, float *s) {
    const float *k[4];
    for (int u = 0; u < 4; u++) k[u] = K + (int64_t)(t + u < te ? t + u : te - 1) * kvs;
    for (int h = 0; h < g; h++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            const __m512 qv = _mm512_loadu_ps(q[h] + i);
            a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[0] + i), a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[1] + i), a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[2] + i), a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[3] + i), a3);
        }
        if (i < d) {
            const __mmask16 m = (__mmask16)((1u << (d - i)) - 1);
            const __m512 qv = _mm512_maskz_loadu_ps(m, q[h] + i);
            a0 = _mm512_mask3_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[0] + i), a0, m);
            a1 = _mm512_mask3_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[1] + i), a1, m);
            a2 = _mm512_mask3_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[2] + i), a2, m);
            a3 = _mm512_mask3_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[3] + i), a3, m);
        }
        _mm_storeu_ps(s + h * ATT_BLOCK,
                      _mm_mul_ps(weft_avx512_tree16x4(a0, a1, a2, a3), _mm_set1_ps(scale)));
    }
}

/* dst[h][i] = Σ_{t in [tb, te)} p[h][t − tb] · V_t[i] in t order, dims [i0, i0 + 64) at most */
static inline void pv_chunk(const float *s, int g, const float *V, int64_t kvs, int d, int tb, int te, int i0,
                            float *const *dst) {
    const int nv = (d - i0 + 15) / 16 < 4 ? (d - i0 + 15) / 16 : 4;
    const __mmask16 tail = (d - i0) >= 16 * nv ? (__mmask16)0xFFFF : (__mmask16)((1u << ((d - i0) % 16)) - 1);
    __m512 acc[ATT_GC][4];
    for (int h = 0; h < ATT_GC; h++)
        for (int v = 0; v < 4; v++) acc[h][v] = _mm512_setzero_ps();
    for (int t = tb; t < te; t++) {
        const float *vr = V + (int64_t)t * kvs + i0;
        __m512 vv[4];
        for (int v = 0; v < nv; v++)
            vv[v] = v == nv - 1 ? _mm512_maskz_loadu_ps(tail, vr + 16 * v) : _mm512_loadu_ps(vr + 16 * v);
        for (int h = 0; h < g; h++) {
            const __m512 p = _mm512_set1_ps(s[h * ATT_BLOCK + (t - tb)]);
            for (int v = 0; v < nv; v++) acc[h][v] = _mm512_fmadd_ps(p, vv[v], acc[h][v]);
        }
    }
    for (int h = 0; h < g; h++)
        for (int v = 0; v < nv; v++) {
            if (v == nv - 1)
                _mm512_mask_storeu_ps(dst[h] + i0 + 16 * v, tail, acc[h][v]);
            else
                _mm512_storeu_ps(dst[h] + i0 + 16 * v, acc[h][v]);
        }
}

static void avx512_sblock(const float *const *q, int g, const float *K, const float *V, int64_t kvs, int d,
                          float scale, int t0, int t1, float *M, float *L, float *O, float *ws) {
    float *s = ws, *ob = ws + ATT_GC * ATT_BLOCK;
    for (int tb = t0; tb < t1; tb += ATT_BLOCK) {
        const int te = t1 - tb < ATT_BLOCK ? t1 : tb + ATT_BLOCK, n = te - tb;
        for (int t = tb; t < te; t += 4) scores4(q, g, K + 0, kvs, d, scale, t, te, s + (t - tb));
        float m[ATT_GC], l[ATT_GC];
        for (int h = 0; h < g; h++) {
            float *sh = s + h * ATT_BLOCK;
            __m512 mx = _mm512_set1_ps(-INFINITY);
            for (int c = 0; c < n; c += 16) {
                const __mmask16 k = n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1);
                mx = _mm512_mask_max_ps(mx, k, mx, _mm512_loadu_ps(sh + c));
            }
            m[h] = _mm512_reduce_max_ps(mx); /* max is exact in any order */
            const __m512 vm = _mm512_set1_ps(m[h]);
            __m512 lanes = _mm512_setzero_ps();
            for (int c = 0; c < n; c += 16) {
                const __mmask16 k = n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1);
                const __m512 p =
                    _mm512_maskz_mov_ps(k, weft_avx512_exp_c(_mm512_sub_ps(_mm512_loadu_ps(sh + c), vm)));
                _mm512_storeu_ps(sh + c, p);
                lanes = _mm512_add_ps(lanes, p); /* masked lanes add +0: no change (lanes are never −0) */
            }
            l[h] = weft_avx512_tree16(lanes);
        }
        float *dst[ATT_GC];
        for (int h = 0; h < g; h++) dst[h] = tb == t0 ? O + h * d : ob + h * d;
        for (int i0 = 0; i0 < d; i0 += 64) pv_chunk(s, g, V, kvs, d, tb, te, i0, dst);
        for (int h = 0; h < g; h++) {
            if (tb == t0) {
                M[h] = m[h];
                L[h] = l[h];
            } else {
                avx512_merge(&M[h], &L[h], O + h * d, m[h], l[h], ob + h * d, d);
            }
        }
    }
}

const weft_att_isa weft_att_avx512 = {avx512_sblock, avx512_merge};

#endif
