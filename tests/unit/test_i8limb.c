/* The int8-limb definition (src/backend/cuda/i8limb.h) on the CPU: every limb in [−64, 64], the joined sum,
 * the reconstruction bound |x − 2^(e−19)·c| ≤ 2^(e−20), the block product P from three int8 dot products
 * (each in one mma's int32 range) equal to the direct integer Σ q·c − 8·Σ c and within int32, its value with
 * exactly one rounding and within the stated bound of the exact fp64 dot product, all-zero and non-finite
 * blocks, and determinism. Regimes: uniform, heavy-tailed (outliers 10^3 larger), exact ties (half-integers
 * after scaling), denormals and values below 2^EMIN, values near FLT_MAX, exponents mixed over 2^±30. */
#include "check.h"

#include "backend/cuda/i8limb.h"

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
            x[i] = uni() * (rng() % 2 ? 1e-39f : 1e-33f);
            break; /* below 2^EMIN */
        case 4:
            x[i] = uni() * 3.0e38f;
            break;
        default:
            x[i] = uni() * ldexpf(1.0f, (int)(rng() % 60) - 30);
            break;
        }
    }
}

static void check_block(const float *x) {
    weft_i8l_block b;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 0);
    CHECK(b.e >= WEFT_I8L_EMIN && b.e <= 127);
    double m = 0.0;
    for (int i = 0; i < WEFT_I8L_N; i++) m = fmax(m, fabs((double)x[i]));
    if (m >= ldexp(1.0, WEFT_I8L_EMIN)) CHECK(m >= ldexp(1.0, b.e) && m < ldexp(1.0, b.e + 1));
    const double bound = ldexp(1.0, b.e - 20);
    int64_t sum = 0, c[WEFT_I8L_N];
    for (int i = 0; i < WEFT_I8L_N; i++) {
        for (int l = 0; l < WEFT_I8L_LIMBS; l++)
            CHECK_MSG(b.d[l][i] >= -64 && b.d[l][i] <= 64, "limb %d of element %d is %d", l, i, b.d[l][i]);
        c[i] = ((int64_t)b.d[0][i] * 128 + b.d[1][i]) * 128 + b.d[2][i];
        sum += c[i];
        const double rec = ldexp((double)c[i], b.e - 19);
        CHECK_MSG(fabs(rec - (double)x[i]) <= bound, "element %d: %.9g vs %.9g (bound %.3g)", i, rec,
                  (double)x[i], bound);
    }
    CHECK_EQ_INT(sum, b.sum);

    /* a random 4-bit row times the block: three int8 dot products joined == the direct integer */
    int q[WEFT_I8L_N];
    for (int i = 0; i < WEFT_I8L_N; i++) q[i] = (int)(rng() % 16);
    int64_t direct = 0, pl[WEFT_I8L_LIMBS];
    for (int i = 0; i < WEFT_I8L_N; i++) direct += (int64_t)q[i] * c[i];
    direct -= 8 * (int64_t)b.sum;
    for (int l = 0; l < WEFT_I8L_LIMBS; l++) {
        pl[l] = 0;
        for (int i = 0; i < WEFT_I8L_N; i++) pl[l] += (int64_t)q[i] * b.d[l][i];
        CHECK(pl[l] >= -32 * 15 * 64 && pl[l] <= 32 * 15 * 64);
    }
    const int64_t joined = weft_i8l_join((int32_t)pl[0], (int32_t)pl[1], (int32_t)pl[2]) - 8 * (int64_t)b.sum;
    CHECK_EQ_INT(joined, direct);
    CHECK(direct >= -270548992 && direct <= 270548992); /* |Σ (q − 8)·c| */
    CHECK(joined + 8 * (int64_t)b.sum >= -507279360 && joined + 8 * (int64_t)b.sum <= 507279360); /* Σ q·c */

    double exact = 0.0, absq = 0.0;
    for (int i = 0; i < WEFT_I8L_N; i++) {
        exact += (double)(q[i] - 8) * (double)x[i];
        absq += fabs((double)(q[i] - 8));
    }
    const float v = weft_i8l_value((int32_t)direct, b.e, b.nonfinite);
    CHECK(v == (float)ldexp((double)(float)direct, b.e - 19)); /* one rounding: the conversion (or inf) */
    /* the limbs: Σ|q − 8|·2^(e−20); the conversion: 2^−24 of |P|·2^(e−19) */
    const double vb = absq * bound + ldexp(fabs((double)direct), b.e - 19 - 24);
    if (isfinite(v))
        CHECK_MSG(fabs((double)v - exact) <= vb, "value %.9g vs exact %.9g (bound %.3g)", (double)v, exact,
                  vb);

    weft_i8l_block b2; /* deterministic: the same input gives the same bits */
    weft_i8l_split(x, &b2);
    CHECK(memcmp(&b, &b2, sizeof b) == 0);
}

int main(void) {
    float x[WEFT_I8L_N];
    for (int r = 0; r < 6; r++)
        for (int trial = 0; trial < 2000; trial++) {
            fill(x, r);
            check_block(x);
        }

    /* all zero: e = EMIN, limbs zero, value exactly 0 */
    memset(x, 0, sizeof x);
    weft_i8l_block b;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.e, WEFT_I8L_EMIN);
    CHECK_EQ_INT(b.sum, 0);
    CHECK(weft_i8l_value(0, b.e, b.nonfinite) == 0.0f);

    /* one element at a power of two: m = 2^e, y = 32, so d0 = 32 and the rest zero */
    x[7] = -0.25f;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.e, -2);
    CHECK_EQ_INT(b.d[0][7], -32);
    CHECK_EQ_INT(b.d[1][7], 0);
    CHECK_EQ_INT(b.sum, -32 * 128 * 128);

    /* inf or NaN anywhere: non-finite block, no limbs, NaN values */
    fill(x, 0);
    x[3] = INFINITY;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 1);
    CHECK_EQ_INT(b.sum, 0);
    CHECK(isnan(weft_i8l_value(0, b.e, b.nonfinite)));
    x[3] = NAN;
    weft_i8l_split(x, &b);
    CHECK_EQ_INT(b.nonfinite, 1);
    return check_report("test_i8limb");
}
