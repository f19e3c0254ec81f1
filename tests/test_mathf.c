/* test_mathf.c: the binary32 functions of ref/mathf.c against MPFR (correct rounding) on
 * special values, boundaries and deterministic random samples, and the compositions
 * (sigmoid, softplus, silu) against their step-by-step definition and against MPFR within
 * the bounds stated in spec/mathf.md; the tanh-form GELU and its derivative against their
 * definition, the binary64 formula and its central differences. Failures print inputs and
 * results in hex. */
#include <float.h>
#include <math.h>
#include <mpfr.h>
#include <stdint.h>
#include <string.h>

#include "qspec/mathf.h"
#include "qstest.h"

#define QST_CANON_NAN  0x7fc00000u
#define QST_MAX_REPORT 8

typedef int (*qst_mpfr_fn)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);
typedef float (*qst_fn)(float);

/* ------------------------------------------------------------------ helpers */
static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t rng_next(uint64_t *s) /* splitmix64: deterministic test inputs */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s, float lo, float hi) /* uniform value in [lo, hi] */
{
    double t = (double)(rng_next(s) >> 11) * 0x1p-53;
    return (float)((double)lo + t * ((double)hi - (double)lo));
}

/* Rounds an MPFR value to binary32 with the binary32 exponent range (subnormals too). */
static float mpfr_to_binary32(mpfr_t v)
{
    mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_t r;
    mpfr_init2(r, 24);
    int inex = mpfr_set(r, v, MPFR_RNDN);
    mpfr_set_emin(-148);
    mpfr_set_emax(128);
    inex = mpfr_check_range(r, inex, MPFR_RNDN);
    inex = mpfr_subnormalize(r, inex, MPFR_RNDN);
    float f = mpfr_get_flt(r, MPFR_RNDN);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    mpfr_clear(r);
    return f;
}

/* The correctly rounded binary32 value of mp(x), computed by MPFR in binary32 directly. */
static float oracle(qst_mpfr_fn mp, float x)
{
    mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_t mx, my;
    mpfr_set_emin(-148);
    mpfr_set_emax(128);
    mpfr_init2(mx, 24);
    mpfr_init2(my, 24);
    mpfr_set_flt(mx, x, MPFR_RNDN);
    int inex = mp(my, mx, MPFR_RNDN);
    inex = mpfr_subnormalize(my, inex, MPFR_RNDN);
    float f = mpfr_get_flt(my, MPFR_RNDN);
    mpfr_clear(mx);
    mpfr_clear(my);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    return f;
}

/* Expected bits: NaN results are the canonical NaN [MATH-SPECIAL]. */
static uint32_t expected_bits(qst_mpfr_fn mp, float x)
{
    float want = oracle(mp, x);
    return isnan(want) ? QST_CANON_NAN : bits(want);
}

/* Compares fn with the MPFR oracle at x; prints the first few mismatches. */
static int check_cr(const char *name, qst_fn fn, qst_mpfr_fn mp, float x, int *nbad)
{
    uint32_t got = bits(fn(x));
    uint32_t want = expected_bits(mp, x);
    if (got == want) {
        return 1;
    }
    if (*nbad < QST_MAX_REPORT) {
        printf("%s(0x%08x = %a): got 0x%08x (%a), MPFR 0x%08x (%a)\n", name, bits(x), (double)x,
               got, (double)from_bits(got), want, (double)from_bits(want));
    }
    *nbad += 1;
    return 0;
}

/* Checks fn at every float within `span` ulps of each side of center (inclusive). */
static void check_around(const char *name, qst_fn fn, qst_mpfr_fn mp, float center, int span,
                         int *nbad)
{
    float lo = center, hi = center;
    check_cr(name, fn, mp, center, nbad);
    for (int i = 0; i < span; i++) {
        lo = nextafterf(lo, -INFINITY);
        hi = nextafterf(hi, INFINITY);
        check_cr(name, fn, mp, lo, nbad);
        check_cr(name, fn, mp, hi, nbad);
    }
}

/* n random bit patterns (any sign, exponent, mantissa) plus n uniform values in [lo, hi]. */
static void check_random(const char *name, qst_fn fn, qst_mpfr_fn mp, uint64_t seed, int n,
                         float lo, float hi, int *nbad)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        check_cr(name, fn, mp, from_bits((uint32_t)rng_next(&s)), nbad);
        check_cr(name, fn, mp, rng_uniform(&s, lo, hi), nbad);
    }
}

/* Every function on the whole subnormal boundary: extremes and random subnormals. */
static void check_subnormals(const char *name, qst_fn fn, qst_mpfr_fn mp, int *nbad)
{
    static const uint32_t edge[] = {0x00000001u, 0x00000002u, 0x00000003u, 0x00400000u,
                                    0x007fffffu, 0x00800000u, 0x00800001u};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        check_cr(name, fn, mp, from_bits(edge[i]), nbad);
        check_cr(name, fn, mp, from_bits(edge[i] | 0x80000000u), nbad);
    }
    uint64_t s = 12345;
    for (int i = 0; i < 2000; i++) {
        uint32_t u = (uint32_t)rng_next(&s) & 0x807fffffu;
        check_cr(name, fn, mp, from_bits(u), nbad);
    }
}

/* MPFR sin and cos restricted to the specified range: NaN beyond it [MATH-TRIG-RANGE]. */
static int sin_ranged(mpfr_ptr y, mpfr_srcptr x, mpfr_rnd_t rnd)
{
    if (mpfr_cmpabs_ui(x, 1048576) > 0) {
        mpfr_set_nan(y);
        return 0;
    }
    return mpfr_sin(y, x, rnd);
}

static int cos_ranged(mpfr_ptr y, mpfr_srcptr x, mpfr_rnd_t rnd)
{
    if (mpfr_cmpabs_ui(x, 1048576) > 0) {
        mpfr_set_nan(y);
        return 0;
    }
    return mpfr_cos(y, x, rnd);
}

static int rsqrt_mpfr(mpfr_ptr y, mpfr_srcptr x, mpfr_rnd_t rnd)
{
    return mpfr_rec_sqrt(y, x, rnd); /* rec_sqrt(-0) = +Inf in MPFR; -0 is tested apart */
}

/* Distance in units in the last place between two finite floats of any sign. */
static int64_t ulp_distance(float a, float b)
{
    uint32_t ua = bits(a), ub = bits(b);
    int64_t ia = (ua & 0x80000000u) ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
    int64_t ib = (ub & 0x80000000u) ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
    return ia > ib ? ia - ib : ib - ia;
}

/* ------------------------------------------------------------------ special values */
typedef struct {
    qst_fn fn;
    const char *name;
    uint32_t in, out;
} special_case;

/* Hand-written from IEEE 754 and spec/mathf.md [MATH-SPECIAL]. */
static const special_case specials[] = {
    {qs_expf, "expf", 0x7fc00000u, QST_CANON_NAN},
    {qs_expf, "expf", 0xffc12345u, QST_CANON_NAN},
    {qs_expf, "expf", 0x7f800001u, QST_CANON_NAN},
    {qs_expf, "expf", 0x7f800000u, 0x7f800000u},
    {qs_expf, "expf", 0xff800000u, 0x00000000u},
    {qs_expf, "expf", 0x00000000u, 0x3f800000u},
    {qs_expf, "expf", 0x80000000u, 0x3f800000u},
    {qs_exp2f, "exp2f", 0x7f800000u, 0x7f800000u},
    {qs_exp2f, "exp2f", 0xff800000u, 0x00000000u},
    {qs_exp2f, "exp2f", 0x80000000u, 0x3f800000u},
    {qs_exp2f, "exp2f", 0xffc00000u, QST_CANON_NAN},
    {qs_logf, "logf", 0x00000000u, 0xff800000u},
    {qs_logf, "logf", 0x80000000u, 0xff800000u},
    {qs_logf, "logf", 0xbf800000u, QST_CANON_NAN},
    {qs_logf, "logf", 0x80000001u, QST_CANON_NAN},
    {qs_logf, "logf", 0x7f800000u, 0x7f800000u},
    {qs_logf, "logf", 0xff800000u, QST_CANON_NAN},
    {qs_logf, "logf", 0x3f800000u, 0x00000000u},
    {qs_logf, "logf", 0x7fa00000u, QST_CANON_NAN},
    {qs_log1pf, "log1pf", 0xbf800000u, 0xff800000u},
    {qs_log1pf, "log1pf", 0x80000000u, 0x80000000u},
    {qs_log1pf, "log1pf", 0x00000000u, 0x00000000u},
    {qs_log1pf, "log1pf", 0xc0000000u, QST_CANON_NAN},
    {qs_log1pf, "log1pf", 0x7f800000u, 0x7f800000u},
    {qs_log1pf, "log1pf", 0xff800000u, QST_CANON_NAN},
    {qs_log1pf, "log1pf", 0xbf800001u, QST_CANON_NAN},
    {qs_sinf, "sinf", 0x00000000u, 0x00000000u},
    {qs_sinf, "sinf", 0x80000000u, 0x80000000u},
    {qs_sinf, "sinf", 0x7f800000u, QST_CANON_NAN},
    {qs_sinf, "sinf", 0xff800000u, QST_CANON_NAN},
    {qs_sinf, "sinf", 0x7fc00001u, QST_CANON_NAN},
    {qs_cosf, "cosf", 0x00000000u, 0x3f800000u},
    {qs_cosf, "cosf", 0x80000000u, 0x3f800000u},
    {qs_cosf, "cosf", 0x7f800000u, QST_CANON_NAN},
    {qs_cosf, "cosf", 0xff800000u, QST_CANON_NAN},
    {qs_sqrtf, "sqrtf", 0x80000000u, 0x80000000u},
    {qs_sqrtf, "sqrtf", 0x00000000u, 0x00000000u},
    {qs_sqrtf, "sqrtf", 0xbf800000u, QST_CANON_NAN},
    {qs_sqrtf, "sqrtf", 0x7f800000u, 0x7f800000u},
    {qs_sqrtf, "sqrtf", 0xff800000u, QST_CANON_NAN},
    {qs_sqrtf, "sqrtf", 0x40800000u, 0x40000000u},
    {qs_sqrtf, "sqrtf", 0xffc00000u, QST_CANON_NAN},
    {qs_rsqrtf, "rsqrtf", 0x00000000u, 0x7f800000u},
    {qs_rsqrtf, "rsqrtf", 0x80000000u, 0xff800000u},
    {qs_rsqrtf, "rsqrtf", 0x7f800000u, 0x00000000u},
    {qs_rsqrtf, "rsqrtf", 0xbf800000u, QST_CANON_NAN},
    {qs_rsqrtf, "rsqrtf", 0x40800000u, 0x3f000000u},
    {qs_rsqrtf, "rsqrtf", 0x00000001u, 0x64b504f3u},
    {qs_rsqrtf, "rsqrtf", 0xff800000u, QST_CANON_NAN},
    {qs_rsqrtf, "rsqrtf", 0x7fc00000u, QST_CANON_NAN},
    {qs_sigmoidf, "sigmoidf", 0x7fc00000u, QST_CANON_NAN},
    {qs_sigmoidf, "sigmoidf", 0x7f800000u, 0x3f800000u},
    {qs_sigmoidf, "sigmoidf", 0xff800000u, 0x00000000u},
    {qs_sigmoidf, "sigmoidf", 0x00000000u, 0x3f000000u},
    {qs_softplusf, "softplusf", 0xffc00000u, QST_CANON_NAN},
    {qs_softplusf, "softplusf", 0x7f800000u, 0x7f800000u},
    {qs_softplusf, "softplusf", 0xff800000u, 0x00000000u},
    {qs_softplusf, "softplusf", 0x41a00001u, 0x41a00001u},
    {qs_siluf, "siluf", 0x7fc00000u, QST_CANON_NAN},
    {qs_siluf, "siluf", 0x7f800000u, 0x7f800000u},
    {qs_siluf, "siluf", 0xff800000u, 0x80000000u},
    {qs_siluf, "siluf", 0x00000000u, 0x00000000u},
    {qs_siluf, "siluf", 0x80000000u, 0x80000000u},
};

/* [MATH-SPECIAL] [MATH-SQRT] [MATH-RSQRT] [MATH-SIGMOID] [MATH-SOFTPLUS] [MATH-SILU] */
START_TEST(test_special_values_give_the_ieee_results_and_the_canonical_nan)
{
    int nbad = 0;
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        const special_case *c = &specials[i];
        uint32_t got = bits(c->fn(from_bits(c->in)));
        if (got != c->out) {
            printf("%s(0x%08x): got 0x%08x, want 0x%08x\n", c->name, c->in, got, c->out);
            nbad++;
        }
    }
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* ------------------------------------------------------------------ exp, exp2 */
/* [MATH-EXP] [MATH-EXP-OVF] [MATH-EXP-UNF] [MATH-CR] */
START_TEST(test_expf_is_correctly_rounded_at_overflow_subnormal_and_underflow_thresholds)
{
    int nbad = 0;
    ck_assert_uint_eq(bits(qs_expf(89.0f)), 0x7f800000u);
    ck_assert(isfinite(qs_expf(88.72f)));
    ck_assert_uint_eq(bits(qs_expf(-104.0f)), 0u);
    ck_assert_float_gt(qs_expf(-103.9f), 0.0f);
    check_around("expf", qs_expf, mpfr_exp, 0x1.62e430p+6f, 3000, &nbad);  /* ln 2^128 */
    check_around("expf", qs_expf, mpfr_exp, -0x1.5d58a0p+6f, 3000, &nbad); /* ln 2^-126 */
    check_around("expf", qs_expf, mpfr_exp, -0x1.9fe368p+6f, 3000, &nbad); /* ln 2^-150 */
    check_around("expf", qs_expf, mpfr_exp, 0.0f, 3000, &nbad);
    check_subnormals("expf", qs_expf, mpfr_exp, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-EXP] [MATH-CR] */
START_TEST(test_expf_is_correctly_rounded_on_random_inputs)
{
    int nbad = 0;
    check_random("expf", qs_expf, mpfr_exp, 1, 100000, -104.0f, 89.0f, &nbad);
    check_random("expf", qs_expf, mpfr_exp, 2, 50000, -2.0f, 2.0f, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-EXP2] [MATH-EXP-OVF] [MATH-EXP-UNF] [MATH-CR] */
START_TEST(test_exp2f_is_exact_on_integers_and_correctly_rounded_at_thresholds)
{
    int nbad = 0;
    for (int k = -149; k <= 127; k++) {
        float want = ldexpf(1.0f, k);
        ck_assert_msg(bits(qs_exp2f((float)k)) == bits(want), "exp2f(%d) = %a", k,
                      (double)qs_exp2f((float)k));
    }
    ck_assert_uint_eq(bits(qs_exp2f(-150.0f)), 0u); /* 2^-150 is a tie: rounds to even 0 */
    ck_assert_uint_eq(bits(qs_exp2f(-149.5f)), 1u);
    ck_assert_uint_eq(bits(qs_exp2f(128.0f)), 0x7f800000u);
    check_around("exp2f", qs_exp2f, mpfr_exp2, 128.0f, 3000, &nbad);
    check_around("exp2f", qs_exp2f, mpfr_exp2, -126.0f, 3000, &nbad);
    check_around("exp2f", qs_exp2f, mpfr_exp2, -150.0f, 3000, &nbad);
    check_around("exp2f", qs_exp2f, mpfr_exp2, 0.0f, 3000, &nbad);
    check_subnormals("exp2f", qs_exp2f, mpfr_exp2, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-EXP2] [MATH-CR] */
START_TEST(test_exp2f_is_correctly_rounded_on_random_inputs)
{
    int nbad = 0;
    check_random("exp2f", qs_exp2f, mpfr_exp2, 3, 100000, -151.0f, 128.0f, &nbad);
    check_random("exp2f", qs_exp2f, mpfr_exp2, 4, 50000, -2.0f, 2.0f, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* ------------------------------------------------------------------ log, log1p */
/* [MATH-LOG] [MATH-CR] */
START_TEST(test_logf_is_correctly_rounded_near_one_and_on_subnormals)
{
    int nbad = 0;
    check_around("logf", qs_logf, mpfr_log, 1.0f, 20000, &nbad);
    check_around("logf", qs_logf, mpfr_log, 0x1.6a09e6p+0f, 2000, &nbad); /* sqrt 2 */
    check_around("logf", qs_logf, mpfr_log, 0x1.fffffep+127f, 2000, &nbad);
    check_subnormals("logf", qs_logf, mpfr_log, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-LOG] [MATH-CR] */
START_TEST(test_logf_is_correctly_rounded_on_random_inputs)
{
    int nbad = 0;
    check_random("logf", qs_logf, mpfr_log, 5, 100000, 0.0f, 4.0f, &nbad);
    for (int e = -149; e <= 127; e++) { /* every power of two: ln 2^e = e ln 2 */
        check_cr("logf", qs_logf, mpfr_log, ldexpf(1.0f, e), &nbad);
    }
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-LOG1P] [MATH-CR] */
START_TEST(test_log1pf_is_correctly_rounded_near_zero_and_minus_one)
{
    int nbad = 0;
    check_around("log1pf", qs_log1pf, mpfr_log1p, 0.0f, 20000, &nbad);
    check_around("log1pf", qs_log1pf, mpfr_log1p, -0x1.fffffep-1f, 3000, &nbad);
    check_around("log1pf", qs_log1pf, mpfr_log1p, 0x1.fffffep+127f, 1000, &nbad);
    for (int e = -149; e <= 127; e++) {
        check_cr("log1pf", qs_log1pf, mpfr_log1p, ldexpf(1.0f, e), &nbad);
        check_cr("log1pf", qs_log1pf, mpfr_log1p, -ldexpf(1.0f, e < 0 ? e : -1), &nbad);
    }
    check_subnormals("log1pf", qs_log1pf, mpfr_log1p, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-LOG1P] [MATH-CR] */
START_TEST(test_log1pf_is_correctly_rounded_on_random_inputs)
{
    int nbad = 0;
    check_random("log1pf", qs_log1pf, mpfr_log1p, 6, 100000, -1.0f, 4.0f, &nbad);
    check_random("log1pf", qs_log1pf, mpfr_log1p, 7, 50000, -0.01f, 0.01f, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* ------------------------------------------------------------------ sin, cos */
/* The float nearest to k * pi/2 (by MPFR). */
static float nearest_multiple_of_pio2(long k)
{
    mpfr_t v;
    mpfr_init2(v, 200);
    mpfr_const_pi(v, MPFR_RNDN);
    mpfr_mul_si(v, v, k, MPFR_RNDN);
    mpfr_div_2ui(v, v, 1, MPFR_RNDN);
    float f = mpfr_get_flt(v, MPFR_RNDN);
    mpfr_clear(v);
    return f;
}

/* [MATH-SIN] [MATH-COS] [MATH-TRIG-RANGE] [MATH-CR] */
START_TEST(test_sinf_cosf_are_correctly_rounded_near_multiples_of_pi_over_2)
{
    int nbad = 0;
    uint64_t s = 99;
    for (long k = -40; k <= 40; k++) {
        float c = nearest_multiple_of_pio2(k);
        check_around("sinf", qs_sinf, sin_ranged, c, 40, &nbad);
        check_around("cosf", qs_cosf, cos_ranged, c, 40, &nbad);
    }
    for (int i = 0; i < 3000; i++) { /* up to the largest k with k pi/2 <= 2^20 */
        long k = (long)(rng_next(&s) % 667544u) - 333772;
        k *= 2;
        float c = nearest_multiple_of_pio2(k + (long)(i & 1));
        check_around("sinf", qs_sinf, sin_ranged, c, 3, &nbad);
        check_around("cosf", qs_cosf, cos_ranged, c, 3, &nbad);
    }
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-SIN] [MATH-COS] [MATH-CR] */
START_TEST(test_sinf_cosf_are_correctly_rounded_on_random_inputs)
{
    int nbad = 0;
    uint64_t s = 8;
    for (int i = 0; i < 100000; i++) { /* bit patterns restricted to |x| <= 2^20 */
        uint32_t u = (uint32_t)rng_next(&s) % 0x49800001u;
        u |= (uint32_t)(rng_next(&s) & 1u) << 31;
        check_cr("sinf", qs_sinf, sin_ranged, from_bits(u), &nbad);
        check_cr("cosf", qs_cosf, cos_ranged, from_bits(u), &nbad);
    }
    check_random("sinf", qs_sinf, sin_ranged, 9, 30000, -10.0f, 10.0f, &nbad);
    check_random("cosf", qs_cosf, cos_ranged, 10, 30000, -10.0f, 10.0f, &nbad);
    check_random("sinf", qs_sinf, sin_ranged, 11, 20000, -1048576.0f, 1048576.0f, &nbad);
    check_random("cosf", qs_cosf, cos_ranged, 12, 20000, -1048576.0f, 1048576.0f, &nbad);
    check_subnormals("sinf", qs_sinf, sin_ranged, &nbad);
    check_subnormals("cosf", qs_cosf, cos_ranged, &nbad);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-TRIG-RANGE] */
START_TEST(test_sinf_cosf_are_nan_beyond_two_to_the_20)
{
    int nbad = 0;
    float top = QS_MATHF_TRIG_MAX;
    ck_assert(top == 0x1p20f);
    check_cr("sinf", qs_sinf, sin_ranged, top, &nbad);
    check_cr("cosf", qs_cosf, cos_ranged, -top, &nbad);
    check_around("sinf", qs_sinf, sin_ranged, nextafterf(top, 0.0f), 100, &nbad);
    check_around("cosf", qs_cosf, cos_ranged, nextafterf(top, 0.0f), 100, &nbad);
    ck_assert_int_eq(nbad, 0);
    float beyond[] = {nextafterf(top, INFINITY), -nextafterf(top, INFINITY), 0x1p21f, 1e30f,
                      3.4e38f};
    for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
        ck_assert_msg(bits(qs_sinf(beyond[i])) == QST_CANON_NAN, "sinf(%a) = 0x%08x",
                      (double)beyond[i], bits(qs_sinf(beyond[i])));
        ck_assert_msg(bits(qs_cosf(beyond[i])) == QST_CANON_NAN, "cosf(%a) = 0x%08x",
                      (double)beyond[i], bits(qs_cosf(beyond[i])));
    }
}
END_TEST

/* ------------------------------------------------------------------ sqrt, rsqrt */
/* [MATH-SQRT] [MATH-RSQRT] [MATH-CR] */
START_TEST(test_sqrtf_rsqrtf_are_correctly_rounded_on_random_and_boundary_inputs)
{
    int nbad = 0;
    check_random("sqrtf", qs_sqrtf, mpfr_sqrt, 13, 100000, 0.0f, 4.0f, &nbad);
    check_random("rsqrtf", qs_rsqrtf, rsqrt_mpfr, 14, 100000, 0.0f, 4.0f, &nbad);
    check_subnormals("sqrtf", qs_sqrtf, mpfr_sqrt, &nbad);
    check_around("rsqrtf", qs_rsqrtf, rsqrt_mpfr, 1.0f, 5000, &nbad);
    check_around("rsqrtf", qs_rsqrtf, rsqrt_mpfr, 4.0f, 5000, &nbad);
    check_around("rsqrtf", qs_rsqrtf, rsqrt_mpfr, 0x1.fffffep+127f, 1000, &nbad);
    for (uint32_t u = 1; u < 0x00800000u; u += 997) {
        check_cr("rsqrtf", qs_rsqrtf, rsqrt_mpfr, from_bits(u), &nbad);
    }
    for (int e = -74; e <= 63; e++) { /* 1/sqrt(4^e) = 2^-e exactly */
        ck_assert_float_eq(qs_rsqrtf(ldexpf(1.0f, 2 * e)), ldexpf(1.0f, -e));
    }
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* ------------------------------------------------------------------ hard cases */
typedef struct {
    qst_fn fn;
    qst_mpfr_fn mp;
    const char *name;
    uint32_t in;
} hard_case;

/* Inputs whose exact result lies within 2^-50 (relative) of a binary32 rounding boundary,
 * found by a search over all binary32 inputs (a binary64 evaluation, then MPFR at 200 bits).
 * A plain binary64 evaluation rounded to binary32 gets those marked "wrong" wrong; the
 * expected results come from MPFR at test time. */
static const hard_case hard_cases[] = {
    {qs_expf, mpfr_exp, "expf", 0x377eff81u},
    {qs_expf, mpfr_exp, "expf", 0x4001b249u},
    {qs_expf, mpfr_exp, "expf", 0x40315b33u},
    {qs_expf, mpfr_exp, "expf", 0xb3000000u},
    {qs_expf, mpfr_exp, "expf", 0xbae0e25cu},
    {qs_expf, mpfr_exp, "expf", 0xbbf0edf1u},
    {qs_expf, mpfr_exp, "expf", 0xc16912cdu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0x36879cf7u},
    {qs_exp2f, mpfr_exp2, "exp2f", 0x3a07857cu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0x3b429d37u}, /* wrong */
    {qs_exp2f, mpfr_exp2, "exp2f", 0x3c02a9adu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xb338aa3bu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xb466d4cbu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xb52d1f9au},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xb8d3d026u},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xbaec2b40u},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xbcf3a937u}, /* wrong */
    {qs_exp2f, mpfr_exp2, "exp2f", 0xbe1f29deu},
    {qs_exp2f, mpfr_exp2, "exp2f", 0xc3160000u}, /* tie */

    {qs_logf, mpfr_log, "logf", 0x3c413d3au}, /* wrong */
    {qs_logf, mpfr_log, "logf", 0x41178febu}, /* wrong */
    {qs_logf, mpfr_log, "logf", 0x4c5d65a5u}, /* wrong */
    {qs_logf, mpfr_log, "logf", 0x65d890d3u}, /* wrong */
    {qs_logf, mpfr_log, "logf", 0x6f31a8ecu}, /* wrong */
    {qs_logf, mpfr_log, "logf", 0x1f116ab8u},
    {qs_logf, mpfr_log, "logf", 0x4d604ebeu},
    {qs_logf, mpfr_log, "logf", 0x66a8c860u},
    {qs_logf, mpfr_log, "logf", 0x38dcbe38u},

    {qs_log1pf, mpfr_log1p, "log1pf", 0x35400003u}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0x3710001bu}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0x41078febu}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0x65d890d3u}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0x6f31a8ecu}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0xb53ffffdu}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0xb70fffe5u}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0xbb0ec8c4u}, /* wrong */
    {qs_log1pf, mpfr_log1p, "log1pf", 0x3efd81adu},
    {qs_log1pf, mpfr_log1p, "log1pf", 0x55185f82u},

    {qs_sinf, mpfr_sin, "sinf", 0x46199998u}, /* wrong */
    {qs_sinf, mpfr_sin, "sinf", 0xc6199998u}, /* wrong */
    {qs_sinf, mpfr_sin, "sinf", 0x4371ade3u},
    {qs_sinf, mpfr_sin, "sinf", 0x4967cb9bu},
    {qs_sinf, mpfr_sin, "sinf", 0x3ef3830fu},
};

/* [MATH-CR] [MATH-EXP] [MATH-EXP2] [MATH-LOG] [MATH-LOG1P] [MATH-SIN] [MATH-COS] [MATH-RSQRT] */
START_TEST(test_hard_to_round_inputs_are_correctly_rounded)
{
    int nbad = 0;
    for (size_t i = 0; i < sizeof hard_cases / sizeof hard_cases[0]; i++) {
        const hard_case *c = &hard_cases[i];
        check_cr(c->name, c->fn, c->mp, from_bits(c->in), &nbad);
    }
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* ------------------------------------------------------------------ compositions */
typedef float (*qst_def_fn)(float);

/* The spec's operation order, recomputed step by step from the correctly rounded parts. */
static float sigmoid_by_definition(float x)
{
    float e = qs_expf(-x);
    float d = 1.0f + e;
    return 1.0f / d;
}

static float softplus_by_definition(float x)
{
    if (x > 20.0f) {
        return x;
    }
    float e = qs_expf(x);
    return qs_log1pf(e);
}

static float silu_by_definition(float x)
{
    float e = qs_expf(-x);
    float d = 1.0f + e;
    return x / d;
}

/* The exact composition by MPFR at 200 bits, then rounded to binary32: sigmoid
 * (which = 0) 1/(1+e^-x), softplus (1) ln(1+e^x) = x + ln(1+e^-x) for x > 0, silu (2)
 * x/(1+e^-x). */
static float composition_oracle(int which, float x)
{
    mpfr_t v, t;
    mpfr_inits2(200, v, t, (mpfr_ptr)0);
    mpfr_set_flt(v, x, MPFR_RNDN);
    if (which == 1) {
        mpfr_set_flt(t, x > 0.0f ? -x : x, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_log1p(t, t, MPFR_RNDN);
        if (x > 0.0f) {
            mpfr_add(t, t, v, MPFR_RNDN);
        }
    } else {
        mpfr_neg(t, v, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add_ui(t, t, 1, MPFR_RNDN);
        if (which == 0) {
            mpfr_ui_div(t, 1, t, MPFR_RNDN);
        } else {
            mpfr_div(t, v, t, MPFR_RNDN);
        }
    }
    float f = mpfr_to_binary32(t);
    mpfr_clears(v, t, (mpfr_ptr)0);
    return f;
}

/* Checks fn against its definition (bitwise) and the exact value (within max_ulp ulps,
 * or 2^-126 (sigmoid) and 2^-120 (silu) absolute below -88, where e^-x overflows); returns the
 * worst ulp error. */
static int64_t check_composition(const char *name, qst_fn fn, qst_def_fn def, int which, float x,
                                 int64_t max_ulp, int *nbad)
{
    float got = fn(x), want = def(x);
    if (bits(got) != bits(want)) {
        if (*nbad < QST_MAX_REPORT) {
            printf("%s(0x%08x): got 0x%08x, definition 0x%08x\n", name, bits(x), bits(got),
                   bits(want));
        }
        *nbad += 1;
        return 0;
    }
    float exact = composition_oracle(which, x);
    int64_t d = ulp_distance(got, exact);
    float max_abs = which == 2 ? 0x1p-120f : 0x1p-126f; /* where e^-x overflows */
    int ok = d <= max_ulp || (x < -88.0f && fabsf(got - exact) <= max_abs);
    if (!ok) {
        if (*nbad < QST_MAX_REPORT) {
            printf("%s(0x%08x = %a): got 0x%08x (%a), exact 0x%08x (%a), %lld ulp\n", name, bits(x),
                   (double)x, bits(got), (double)got, bits(exact), (double)exact, (long long)d);
        }
        *nbad += 1;
    }
    return x < -88.0f ? 0 : d;
}

static void check_composition_sample(const char *name, qst_fn fn, qst_def_fn def, int which,
                                     int64_t max_ulp)
{
    int nbad = 0;
    int64_t worst = 0;
    uint64_t s = 20 + (uint64_t)which;
    for (int i = 0; i < 40000; i++) {
        float a = rng_uniform(&s, -30.0f, 30.0f);
        float b = rng_uniform(&s, -110.0f, 110.0f);
        uint32_t u = (uint32_t)rng_next(&s);
        float c = isnan(from_bits(u)) || isinf(from_bits(u)) ? 1.0f : from_bits(u);
        float xs[3] = {a, b, c};
        for (int j = 0; j < 3; j++) {
            int64_t d = check_composition(name, fn, def, which, xs[j], max_ulp, &nbad);
            worst = d > worst ? d : worst;
        }
    }
    for (float x = -21.0f; x <= 21.0f; x += 0.125f) {
        check_composition(name, fn, def, which, x, max_ulp, &nbad);
    }
    printf("%s: worst error %lld ulp over the sample (bound %lld)\n", name, (long long)worst,
           (long long)max_ulp);
    ck_assert_int_eq(nbad, 0);
}

/* [MATH-SIGMOID] */
START_TEST(test_sigmoidf_follows_its_definition_and_is_within_2_ulp)
{
    check_composition_sample("sigmoidf", qs_sigmoidf, sigmoid_by_definition, 0, 2);
    ck_assert_uint_eq(bits(qs_sigmoidf(100.0f)), 0x3f800000u);
    ck_assert_uint_eq(bits(qs_sigmoidf(-100.0f)), 0u);
}
END_TEST

/* [MATH-SOFTPLUS] */
START_TEST(test_softplusf_follows_its_definition_and_is_within_2_ulp)
{
    check_composition_sample("softplusf", qs_softplusf, softplus_by_definition, 1, 2);
    ck_assert_uint_eq(bits(qs_softplusf(20.0f)), bits(qs_log1pf(qs_expf(20.0f))));
    ck_assert_uint_eq(bits(qs_softplusf(nextafterf(20.0f, 21.0f))), bits(nextafterf(20.0f, 21.0f)));
}
END_TEST

/* [MATH-SILU] */
START_TEST(test_siluf_follows_its_definition_and_is_within_2_ulp)
{
    check_composition_sample("siluf", qs_siluf, silu_by_definition, 2, 2);
    ck_assert_uint_eq(bits(qs_siluf(-100.0f)), 0x80000000u);
}
END_TEST

/* The first steps of [MATH-GELU] and [MATH-GELU-GRAD] written out from spec/mathf.md, with
 * its hex constants: e = e^(-2|u|), u = k (x + c x^3), d = 1 + e; returns x^2. */
static float gelu_steps_by_definition(float x, float *e, float *d)
{
    float x2 = x * x;
    float x3 = x2 * x;
    float p = 0x1.6e4e26p-5f * x3;
    float s = x + p;
    float u = 0x1.988454p-1f * s;
    float m = -2.0f * fabsf(u);
    *e = qs_expf(m);
    *d = 1.0f + *e;
    return x2;
}

/* [MATH-GELU] written out from spec/mathf.md, step by step, with its hex constants. */
static float gelu_by_definition(float x)
{
    if (x == -HUGE_VALF) {
        return -0.0f;
    }
    float e, d;
    (void)gelu_steps_by_definition(x, &e, &d);
    if (x < 0.0f) {
        float n = x * e;
        return n / d;
    }
    return x / d;
}

/* [MATH-GELU-GRAD] written out from spec/mathf.md the same way. */
static float gelu_grad_by_definition(float x)
{
    float e, d;
    float x2 = gelu_steps_by_definition(x, &e, &d);
    float r = 1.0f / d, q = e / d;
    float sg = x < 0.0f ? q : r;
    float a = r * q;
    if (a == 0.0f) {
        return sg;
    }
    float b = x * a;
    float cx = 0x1.12ba9cp-3f * x2;
    float ds = 1.0f + cx;
    float pk = 0x1.988454p+0f * ds;
    float t = b * pk;
    return sg + t;
}

/* The tanh-form GELU in binary64 from its formula with the exact constants (libm tanh, an
 * independent evaluation): the tanh form where 1 + tanh(u) keeps binary64 precision far
 * beyond binary32's (x >= -5), and x / (1 + e^(-2u)), the same function, below. */
static double gelu_formula(double x)
{
    double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    return x >= -5.0 ? 0.5 * x * (1.0 + tanh(u)) : x / (1.0 + exp(-2.0 * u));
}

/* The ulp bound [MATH-GELU] states for x. */
static int64_t gelu_ulp_bound(float x)
{
    return x >= -1.0f ? 4 : x >= -3.0f ? 24 : x >= -5.0f ? 64 : 256;
}

static void check_gelu_at(float x, int *nbad, int64_t *worst)
{
    float got = qs_geluf(x), def = gelu_by_definition(x);
    float want = (float)gelu_formula((double)x);
    int64_t d = ulp_distance(got, want);
    if (bits(got) != bits(def) || d > gelu_ulp_bound(x)) {
        if (*nbad < QST_MAX_REPORT) {
            printf("geluf(0x%08x = %a): got 0x%08x (%a), definition 0x%08x, formula 0x%08x (%a), "
                   "%lld ulp\n",
                   bits(x), (double)x, bits(got), (double)got, bits(def), bits(want), (double)want,
                   (long long)d);
        }
        *nbad += 1;
    }
    if (x >= -1.0f && d > *worst) {
        *worst = d;
    }
}

/* [MATH-GELU] qs_geluf follows its definition bit for bit and is within the stated ulp of
 * the binary64 formula (rounded to binary32) on a grid of [-10, 10] and random inputs. */
START_TEST(test_geluf_follows_its_definition_and_is_within_the_stated_ulp_of_the_formula)
{
    int nbad = 0;
    int64_t worst = 0;
    for (int i = -40960; i <= 40960; i++) {
        check_gelu_at((float)i * 0x1p-12f, &nbad, &worst);
    }
    uint64_t s = 41;
    for (int i = 0; i < 100000; i++) {
        check_gelu_at(rng_uniform(&s, -10.0f, 10.0f), &nbad, &worst);
        float c = from_bits((uint32_t)rng_next(&s));
        if (!isnan(c) && bits(qs_geluf(c)) != bits(gelu_by_definition(c))) {
            nbad++;
        }
    }
    printf("geluf: worst error %lld ulp for x >= -1 (bound 4)\n", (long long)worst);
    ck_assert_int_eq(nbad, 0);
}
END_TEST

/* [MATH-GELU] [MATH-SPECIAL] exact results: zeros keep their sign, the limits (x for large
 * x, -0 for large negative x, +Inf, -Inf gives -0), x / 2 exactly for tiny x, the
 * canonical NaN; and hand-typed values of the formula within 4 ulp. */
START_TEST(test_geluf_gives_exact_limits_signed_zeros_and_known_values)
{
    ck_assert_uint_eq(bits(qs_geluf(0.0f)), 0x00000000u);
    ck_assert_uint_eq(bits(qs_geluf(-0.0f)), 0x80000000u);
    ck_assert_uint_eq(bits(qs_geluf(HUGE_VALF)), 0x7f800000u);
    ck_assert_uint_eq(bits(qs_geluf(-HUGE_VALF)), 0x80000000u);
    ck_assert_uint_eq(bits(qs_geluf(from_bits(0x7fc00000u))), 0x7fc00000u);
    ck_assert_uint_eq(bits(qs_geluf(from_bits(0xff800001u))), 0x7fc00000u);
    const float big[] = {10.0f, 16.0f, 100.0f, 0x1p42f, 0x1p100f, FLT_MAX};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        ck_assert_uint_eq(bits(qs_geluf(big[i])), bits(big[i]));
        ck_assert_uint_eq(bits(qs_geluf(-big[i] - 4.0f)), 0x80000000u); /* -14 and below */
    }
    const float tiny[] = {0x1p-100f, -0x1p-100f, 0x1p-126f, -0x1.8p-140f};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        ck_assert_uint_eq(bits(qs_geluf(tiny[i])), bits(tiny[i] * 0.5f));
    }
    const struct {
        float x;
        double y;
    } known[] = {{1.0f, 0.8411919906082768},    {-1.0f, -0.15880800939172324},
                 {2.0f, 1.954597694087775},     {0.5f, 0.34571400982514394},
                 {-0.5f, -0.15428599017485606}, {3.0f, 2.996362607918227}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        int64_t d = ulp_distance(qs_geluf(known[i].x), (float)known[i].y);
        ck_assert_msg(d <= 4, "geluf(%g) = %a, %lld ulp from %.17g", (double)known[i].x,
                      (double)qs_geluf(known[i].x), (long long)d, known[i].y);
    }
}
END_TEST

/* [MATH-GELU-GRAD] qs_gelu_gradf follows its definition bit for bit and is within 2^-20
 * absolute of a central difference of the binary64 formula (step 2^-14, whose own error is
 * below 2^-26) on [-12, 12]; exact values at the limits, zeros and the overflow of x^2. */
START_TEST(test_gelu_gradf_matches_central_differences_and_gives_exact_limits)
{
    int nbad = 0;
    double worst = 0.0;
    const double h = 0x1p-14;
    for (int i = -49152; i <= 49152; i++) {
        float x = (float)i * 0x1p-12f;
        float got = qs_gelu_gradf(x);
        double cd = (gelu_formula((double)x + h) - gelu_formula((double)x - h)) / (2.0 * h);
        double err = fabs((double)got - cd);
        worst = err > worst ? err : worst;
        if (bits(got) != bits(gelu_grad_by_definition(x)) || err > 0x1p-20) {
            if (nbad < QST_MAX_REPORT) {
                printf("gelu_gradf(%a): got %a, definition %a, central difference %a\n", (double)x,
                       (double)got, (double)gelu_grad_by_definition(x), cd);
            }
            nbad++;
        }
    }
    printf("gelu_gradf: worst absolute error %.3g (bound 2^-20)\n", worst);
    ck_assert_int_eq(nbad, 0);
    ck_assert_uint_eq(bits(qs_gelu_gradf(0.0f)), 0x3f000000u);
    ck_assert_uint_eq(bits(qs_gelu_gradf(-0.0f)), 0x3f000000u);
    ck_assert_uint_eq(bits(qs_gelu_gradf(HUGE_VALF)), 0x3f800000u);
    ck_assert_uint_eq(bits(qs_gelu_gradf(-HUGE_VALF)), 0x00000000u);
    ck_assert_uint_eq(bits(qs_gelu_gradf(from_bits(0xffc00001u))), 0x7fc00000u);
    const float big[] = {20.0f, 100.0f, 0x1p40f, 0x1p70f, FLT_MAX}; /* x^2 overflows from 2^64 */
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        ck_assert_uint_eq(bits(qs_gelu_gradf(big[i])), 0x3f800000u);
        ck_assert_uint_eq(bits(qs_gelu_gradf(-big[i])), 0x00000000u);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mathf");
    TCase *tc = tcase_create("mathf");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_special_values_give_the_ieee_results_and_the_canonical_nan);
    tcase_add_test(tc,
                   test_expf_is_correctly_rounded_at_overflow_subnormal_and_underflow_thresholds);
    tcase_add_test(tc, test_expf_is_correctly_rounded_on_random_inputs);
    tcase_add_test(tc, test_exp2f_is_exact_on_integers_and_correctly_rounded_at_thresholds);
    tcase_add_test(tc, test_exp2f_is_correctly_rounded_on_random_inputs);
    tcase_add_test(tc, test_logf_is_correctly_rounded_near_one_and_on_subnormals);
    tcase_add_test(tc, test_logf_is_correctly_rounded_on_random_inputs);
    tcase_add_test(tc, test_log1pf_is_correctly_rounded_near_zero_and_minus_one);
    tcase_add_test(tc, test_log1pf_is_correctly_rounded_on_random_inputs);
    tcase_add_test(tc, test_sinf_cosf_are_correctly_rounded_near_multiples_of_pi_over_2);
    tcase_add_test(tc, test_sinf_cosf_are_correctly_rounded_on_random_inputs);
    tcase_add_test(tc, test_sinf_cosf_are_nan_beyond_two_to_the_20);
    tcase_add_test(tc, test_sqrtf_rsqrtf_are_correctly_rounded_on_random_and_boundary_inputs);
    tcase_add_test(tc, test_hard_to_round_inputs_are_correctly_rounded);
    tcase_add_test(tc, test_sigmoidf_follows_its_definition_and_is_within_2_ulp);
    tcase_add_test(tc, test_softplusf_follows_its_definition_and_is_within_2_ulp);
    tcase_add_test(tc, test_siluf_follows_its_definition_and_is_within_2_ulp);
    tcase_add_test(tc,
                   test_geluf_follows_its_definition_and_is_within_the_stated_ulp_of_the_formula);
    tcase_add_test(tc, test_geluf_gives_exact_limits_signed_zeros_and_known_values);
    tcase_add_test(tc, test_gelu_gradf_matches_central_differences_and_gives_exact_limits);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
