/* The int8-limb definition (src/backend/cuda/i8limb.h) on the CPU: every limb in [−64, 64], the limb sums,
 * the reconstruction bound |x − 2^(e−5)(d0 + d1/2^7 + d2/2^14)| ≤ 2^(e−20), the value of a 4-bit row times a
 * block against the exact fp64 dot product within its stated bound, all-zero and non-finite blocks, and
 * determinism. Regimes: uniform, heavy-tailed (outliers 10^3 larger), exact ties (half-integers after
 * scaling), denormals, values near FLT_MAX, mixed tiny and large. */
#include "check.h"

#include "backend/cuda/i8limb.h"

#include <float.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static float uni(void) { /* [-1, 1) */
    return (float)((double)(rng() >> 40) / 16777216.0) * 2.0f - 1.0f;
}

/* Fills x [32] for regime r. */
static void fill(float *x, int r) {
    for (int i = 0; i < WEFT_I8L_N; i++) {
        switch (r) {
        case 0:
            x[i] = uni();
            break;
        case 1:
            x[i] = uni() * ((rng() % 16) == 0 ? 1000.0f : 1.0f);
            break;
        case 2:
            x[i] = ldexpf((float)((int)(rng() % 257) - 128) + 0.5f, -3);
            break; /* halves after scaling */
        case 3:
            x[i] = uni() * 1e-39f;
            break; /* denormals */
        case 4:
            x[i] = uni() * 3.0e38f;
            break;
        default:
            x[i] = uni() * ldexpf(1.0f, (int)(rng() % 60) - 30);
            break; /* 2^±30 mixed */
        }
    }
}

static void check_block(const float *x) {
    weft_i8l_block b;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 0);
    double m = 0.0;
    for (int i = 0; i < WEFT_I8L_N; i++) m = fmax(m, fabs((double)x[i]));
    const double unit = ldexp(1.0, b.e - 5), bound = ldexp(1.0, b.e - 20);
    if (m > 0.0) CHECK(m >= ldexp(1.0, b.e) && m < ldexp(1.0, b.e + 1));
    int32_t sum[WEFT_I8L_LIMBS] = {0, 0, 0};
    for (int i = 0; i < WEFT_I8L_N; i++) {
        for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
            CHECK_MSG(b.d[l][i] >= -64 && b.d[l][i] <= 64, "limb %d of element %d is %d", l, i, b.d[l][i]);
            sum[l] += b.d[l][i];
        }
        const double rec = unit * (b.d[0][i] + b.d[1][i] / 128.0 + b.d[2][i] / 16384.0);
        CHECK_MSG(fabs(rec - (double)x[i]) <= bound, "element %d: %.9g vs %.9g (bound %.3g)", i, rec,
                  (double)x[i], bound);
    }
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) CHECK_EQ_INT(sum[l], b.sum[l]);

    /* a random 4-bit row times the block */
    int q[WEFT_I8L_N];
    for (int i = 0; i < WEFT_I8L_N; i++) q[i] = (int)(rng() % 16);
    int32_t P[WEFT_I8L_LIMBS];
    double exact = 0.0, mag = 0.0;
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
        int64_t p = 0;
        for (int i = 0; i < WEFT_I8L_N; i++) p += (int64_t)q[i] * b.d[l][i];
        p -= 8 * (int64_t)b.sum[l];
        CHECK(p >= -(32 * 15 * 64 + 8 * 32 * 64) && p <= 32 * 15 * 64 + 8 * 32 * 64);
        P[l] = (int32_t)p;
    }
    for (int i = 0; i < WEFT_I8L_N; i++) exact += (double)(q[i] - 8) * (double)x[i];
    mag = fabs((double)P[0]) + fabs((double)P[1]) / 128.0 + fabs((double)P[2]) / 16384.0;
    const float v = weft_i8l_value(P, b.e, b.nonfinite);
    /* limbs: Σ|q − 8|·2^(e−20) ≤ 256·2^(e−20); the two roundings of f: ≤ 2·2^−24 of mag (in units of 2^(e−5))
     */
    const double vb = 256.0 * bound + ldexp(mag, -23) * unit;
    if (isfinite(v))
        CHECK_MSG(fabs((double)v - exact) <= vb, "value %.9g vs exact %.9g (bound %.3g)", (double)v, exact,
                  vb);
    /* deterministic: the same input gives the same bits */
    weft_i8l_block b2;
    weft_i8l_split(x, &b2);
    CHECK(memcmp(&b, &b2, sizeof b) == 0);
    const float v2 = weft_i8l_value(P, b2.e, b2.nonfinite);
    CHECK(memcmp(&v, &v2, sizeof v) == 0);
}

int main(void) {
    float x[WEFT_I8L_N];
    for (int r = 0; r < 6; r++)
        for (int trial = 0; trial < 2000; trial++) {
            fill(x, r);
            check_block(x);
        }

    /* all zero: e = 0, limbs zero, value exactly 0 */
    memset(x, 0, sizeof x);
    weft_i8l_block b;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.e, 0);
    CHECK_EQ_INT(b.sum[0] | b.sum[1] | b.sum[2], 0);
    const int32_t P0[3] = {0, 0, 0};
    CHECK(weft_i8l_value(P0, b.e, b.nonfinite) == 0.0f);

    /* one element exactly at a power of two: m = 2^e, y = 32, so d0 = 32 and the rest zero */
    x[7] = -0.25f;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.e, -2);
    CHECK_EQ_INT(b.d[0][7], -32);
    CHECK_EQ_INT(b.d[1][7], 0);

    /* inf or NaN anywhere: non-finite block, no limbs, NaN values */
    fill(x, 0);
    x[3] = INFINITY;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 1);
    CHECK_EQ_INT(b.sum[0] | b.sum[1] | b.sum[2], 0);
    CHECK(isnan(weft_i8l_value(P0, b.e, b.nonfinite)));
    x[3] = NAN;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 1);
    return check_report("test_i8limb");
}
