/* mathf.c: correctly rounded binary32 elementary functions (spec/mathf.md).
 * Each function first evaluates in double with an error far below 2^-45 relative and rounds
 * to binary32 when that error cannot change the rounding [MATH-CR]; otherwise a slow path in
 * double-double arithmetic (about 2^-100 relative) decides. No libm transcendental is used;
 * only sqrt, which IEEE 754 requires to be correctly rounded [MATH-SQRT]. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "qspec/mathf.h"

/* [MATH-CR] the reasoning below needs IEEE binary32/binary64 evaluated without excess range
 * or precision; -ffp-contract=off keeps a*b+c as two roundings. */
#if FLT_RADIX != 2 || FLT_MANT_DIG != 24 || DBL_MANT_DIG != 53 || DBL_MAX_EXP != 1024
#error "qspec mathf needs IEEE binary32 float and binary64 double"
#endif
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "qspec mathf needs FLT_EVAL_METHOD == 0 (no excess precision)"
#endif

/* ------------------------------------------------------------------ constants */
/* ln 2 = LN2_1 + LN2_2 + LN2_3 (53-bit pieces), and LN2S_1 + LN2S_2 (42-bit pieces, so
 * that k * LN2S_i is exact for |k| < 2^11). */
static const double QSI_LN2_1 = 0x1.62e42fefa39efp-1;
static const double QSI_LN2_2 = 0x1.abc9e3b39803fp-56;
static const double QSI_LN2_3 = 0x1.7b57a079a1934p-111;
static const double QSI_LN2S_1 = 0x1.62e42fefa38p-1;
static const double QSI_LN2S_2 = 0x1.ef35793c768p-45;
static const double QSI_INV_LN2 = 0x1.71547652b82fep+0;
/* pi/2 = sum of five pieces of 33 bits each, so k * PIO2_i is exact for |k| < 2^20. */
static const double QSI_PIO2_1 = 0x1.921fb544p+0;
static const double QSI_PIO2_2 = 0x1.0b4611a6p-34;
static const double QSI_PIO2_3 = 0x1.3198a2ep-69;
static const double QSI_PIO2_4 = 0x1.b839a252p-104;
static const double QSI_PIO2_5 = 0x1.27044534p-142;
static const double QSI_TWO_OVER_PI = 0x1.45f306dc9c883p-1;
static const double QSI_SQRT2 = 0x1.6a09e667f3bcdp+0;
/* Adding then subtracting 1.5 * 2^52 rounds a double of magnitude < 2^51 to an integer (RNE). */
static const double QSI_ROUND_SHIFT = 0x1.8p52;
/* [MATH-CR] relative half-width of the interval in which the fast result is trusted. */
static const double QSI_FAST_REL = 0x1p-44;

/* ------------------------------------------------------------------ bits and specials */
static float qsi_nanf(void) /* [MATH-SPECIAL] the one NaN every function returns */
{
    uint32_t b = 0x7fc00000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static double qsi_pow2(int k) /* 2^k for -1022 <= k <= 1023, exact */
{
    uint64_t b = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static int qsi_exponent(double d) /* unbiased exponent of a normal double */
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return (int)((b >> 52) & 0x7ff) - 1023;
}

static float qsi_nextf(float f, int up) /* the binary32 neighbour of finite f, up or down */
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if (f == 0.0f) {
        b = up ? 1u : 0x80000001u;
    } else if ((f > 0.0f) == (up != 0)) {
        b += 1;
    } else {
        b -= 1;
    }
    memcpy(&f, &b, sizeof f);
    return f;
}

static double qsi_round_int(double d) /* nearest integer, ties to even; |d| < 2^51 */
{
    return (d + QSI_ROUND_SHIFT) - QSI_ROUND_SHIFT;
}

/* [MATH-CR] y approximates the exact result with relative error below QSI_FAST_REL / 2.
 * When the whole interval y(1 +- QSI_FAST_REL) rounds to one binary32 value, that value is
 * the correctly rounded result (rounding is monotone); returns 1 and stores it. */
static int qsi_decide(double y, float *out)
{
    double e = fabs(y) * QSI_FAST_REL;
    float a = (float)(y - e);
    float b = (float)(y + e);
    if (a != b) {
        return 0;
    }
    *out = a;
    return 1;
}

/* ------------------------------------------------------------------ double-double */
typedef struct {
    double hi, lo; /* value hi + lo, |lo| <= ulp(hi) / 2 */
} qsi_dd;

static qsi_dd qsi_dd_make(double hi, double lo)
{
    qsi_dd r = {hi, lo};
    return r;
}

static qsi_dd qsi_two_sum(double a, double b) /* exact a + b */
{
    double s = a + b;
    double bb = s - a;
    double err = (a - (s - bb)) + (b - bb);
    return qsi_dd_make(s, err);
}

static qsi_dd qsi_fast_two_sum(double a, double b) /* exact a + b when |a| >= |b| or a == 0 */
{
    double s = a + b;
    return qsi_dd_make(s, b - (s - a));
}

static void qsi_split(double a, double *hi, double *lo) /* Veltkamp: a = hi + lo, 26 bits */
{
    double c = 134217729.0 * a;
    *hi = c - (c - a);
    *lo = a - *hi;
}

static qsi_dd qsi_two_prod(double a, double b) /* exact a * b (Dekker) */
{
    double p = a * b;
    double ah, al, bh, bl;
    qsi_split(a, &ah, &al);
    qsi_split(b, &bh, &bl);
    double err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return qsi_dd_make(p, err);
}

static qsi_dd qsi_dd_add(qsi_dd x, qsi_dd y)
{
    qsi_dd s = qsi_two_sum(x.hi, y.hi);
    qsi_dd t = qsi_two_sum(x.lo, y.lo);
    s = qsi_fast_two_sum(s.hi, s.lo + t.hi);
    return qsi_fast_two_sum(s.hi, s.lo + t.lo);
}

static qsi_dd qsi_dd_add_d(qsi_dd x, double d)
{
    return qsi_dd_add(x, qsi_dd_make(d, 0.0));
}

static qsi_dd qsi_dd_mul(qsi_dd x, qsi_dd y)
{
    qsi_dd p = qsi_two_prod(x.hi, y.hi);
    return qsi_fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}

static qsi_dd qsi_dd_mul_d(qsi_dd x, double d)
{
    qsi_dd p = qsi_two_prod(x.hi, d);
    return qsi_fast_two_sum(p.hi, p.lo + x.lo * d);
}

static qsi_dd qsi_dd_div(qsi_dd x, qsi_dd y) /* three quotient digits, about 2^-104 */
{
    double q1 = x.hi / y.hi;
    qsi_dd r = qsi_dd_add(x, qsi_dd_mul_d(y, -q1));
    double q2 = r.hi / y.hi;
    r = qsi_dd_add(r, qsi_dd_mul_d(y, -q2));
    double q3 = r.hi / y.hi;
    return qsi_dd_add_d(qsi_fast_two_sum(q1, q2), q3);
}

static qsi_dd qsi_dd_scale(qsi_dd x, int k) /* x * 2^k, exact in the ranges used here */
{
    double p = qsi_pow2(k);
    return qsi_dd_make(x.hi * p, x.lo * p);
}

/* [MATH-CR] the binary32 value nearest to hi + lo (ties to even). A binary32 midpoint is a
 * double and |lo| <= ulp(hi)/2, so lo can change the rounding of hi only when hi is exactly
 * a midpoint; then the sign of lo decides. */
static float qsi_dd_to_float(qsi_dd x)
{
    float f = (float)x.hi;
    double d = (double)f;
    if (x.lo == 0.0 || d == x.hi || isinf(f)) {
        return f;
    }
    float g = qsi_nextf(f, x.hi > d); /* the other binary32 neighbour of hi */
    if (x.hi != 0.5 * (d + (double)g)) {
        return f;
    }
    return (x.lo > 0.0) == (g > f) ? g : f;
}

/* ------------------------------------------------------------------ exp kernels */
/* [MATH-EXP] e^r for |r| <= 0.35 by its Taylor polynomial of degree 14 (truncation below
 * 2^-62); Horner in double, relative error below 2^-51. */
static double qsi_exp_poly(double r)
{
    static const double c[15] = {1.0,
                                 1.0,
                                 1.0 / 2,
                                 1.0 / 6,
                                 1.0 / 24,
                                 1.0 / 120,
                                 1.0 / 720,
                                 1.0 / 5040,
                                 1.0 / 40320,
                                 1.0 / 362880,
                                 1.0 / 3628800,
                                 1.0 / 39916800,
                                 1.0 / 479001600,
                                 1.0 / 6227020800,
                                 1.0 / 87178291200};
    double p = c[14];
    for (int n = 13; n >= 0; n--) {
        p = p * r + c[n];
    }
    return p;
}

/* e^r for a double-double |r| <= 0.36 by summing the Taylor series until the terms fall
 * below 2^-110 of the sum. */
static qsi_dd qsi_exp_dd(qsi_dd r)
{
    qsi_dd sum = qsi_dd_make(1.0, 0.0);
    qsi_dd term = sum;
    for (int n = 1; n < 40; n++) {
        term = qsi_dd_div(qsi_dd_mul(term, r), qsi_dd_make((double)n, 0.0));
        sum = qsi_dd_add(sum, term);
        if (fabs(term.hi) < 0x1p-110) {
            break;
        }
    }
    return sum;
}

/* k * ln 2 as a double-double, |k| < 2^11. */
static qsi_dd qsi_k_ln2_dd(double kd)
{
    qsi_dd a = qsi_two_prod(kd, QSI_LN2_1);
    a = qsi_dd_add(a, qsi_two_prod(kd, QSI_LN2_2));
    return qsi_dd_add_d(a, kd * QSI_LN2_3);
}

/* ------------------------------------------------------------------ exp, exp2 */
static float qsi_expf_slow(double xd, double kd) /* [MATH-EXP] slow path */
{
    qsi_dd r = qsi_dd_add(qsi_dd_make(xd, 0.0), qsi_k_ln2_dd(-kd));
    return qsi_dd_to_float(qsi_dd_scale(qsi_exp_dd(r), (int)kd));
}

float qs_expf(float x) /* [MATH-EXP] */
{
    if (x != x) {
        return qsi_nanf(); /* [MATH-SPECIAL] */
    }
    if (x > 89.0f) {
        return HUGE_VALF; /* e^89 > 2^128: overflow, also for +Inf [MATH-EXP-OVF] */
    }
    if (x < -104.0f) {
        return 0.0f; /* e^-104 < 2^-150: rounds to +0, also for -Inf [MATH-EXP-UNF] */
    }
    double xd = x;
    double kd = qsi_round_int(xd * QSI_INV_LN2);
    /* x - k*LN2S_1 is exact (both multiples of 2^-42, result below 2^-1); |r| <= 0.35 */
    double r = (xd - kd * QSI_LN2S_1) - kd * QSI_LN2S_2;
    double y = qsi_exp_poly(r) * qsi_pow2((int)kd);
    float f;
    if (qsi_decide(y, &f)) {
        return f;
    }
    return qsi_expf_slow(xd, kd);
}

static float qsi_exp2f_slow(double r, double kd) /* [MATH-EXP2] slow path */
{
    qsi_dd ln2 = qsi_dd_add_d(qsi_dd_make(QSI_LN2_1, QSI_LN2_2), QSI_LN2_3);
    qsi_dd t = qsi_dd_mul_d(ln2, r);
    return qsi_dd_to_float(qsi_dd_scale(qsi_exp_dd(t), (int)kd));
}

float qs_exp2f(float x) /* [MATH-EXP2] */
{
    if (x != x) {
        return qsi_nanf(); /* [MATH-SPECIAL] */
    }
    if (x >= 128.0f) {
        return HUGE_VALF; /* 2^128 overflows [MATH-EXP-OVF] */
    }
    if (x < -151.0f) {
        return 0.0f; /* below 2^-151: rounds to +0 [MATH-EXP-UNF] */
    }
    double xd = x;
    double kd = qsi_round_int(xd);
    double r = xd - kd; /* exact, |r| <= 1/2 */
    double y = qsi_exp_poly(r * QSI_LN2_1) * qsi_pow2((int)kd);
    float f;
    if (qsi_decide(y, &f)) {
        return f;
    }
    return qsi_exp2f_slow(r, kd);
}

/* ------------------------------------------------------------------ log, log1p */
/* [MATH-LOG] 2 atanh(s) = ln((1+s)/(1-s)) for |s| <= 0.172 by its series up to s^21
 * (truncation below 2^-60 relative), in double. */
static double qsi_atanh2_poly(double s)
{
    static const double c[10] = {2.0 / 3,  2.0 / 5,  2.0 / 7,  2.0 / 9,  2.0 / 11,
                                 2.0 / 13, 2.0 / 15, 2.0 / 17, 2.0 / 19, 2.0 / 21};
    double z = s * s;
    double p = c[9];
    for (int n = 8; n >= 0; n--) {
        p = p * z + c[n];
    }
    return 2.0 * s + s * (z * p);
}

/* 2 atanh(s) for a double-double |s| <= 0.172, series summed until below 2^-110. */
static qsi_dd qsi_atanh2_dd(qsi_dd s)
{
    qsi_dd z = qsi_dd_mul(s, s);
    qsi_dd pw = s;
    qsi_dd sum = s;
    for (int n = 1; n < 60; n++) {
        pw = qsi_dd_mul(pw, z);
        qsi_dd term = qsi_dd_div(pw, qsi_dd_make(2.0 * n + 1.0, 0.0));
        sum = qsi_dd_add(sum, term);
        if (fabs(term.hi) < 0x1p-110 * fabs(sum.hi)) {
            break;
        }
    }
    return qsi_dd_scale(sum, 1);
}

/* The argument of a logarithm as 2^e * (mh + ml) with mh in [sqrt(1/2), sqrt(2)]. */
typedef struct {
    double mh, ml;
    int e;
} qsi_logarg;

static qsi_logarg qsi_log_split(double hi, double lo)
{
    qsi_logarg a;
    a.e = qsi_exponent(hi);
    double p = qsi_pow2(-a.e);
    a.mh = hi * p;
    a.ml = lo * p;
    if (a.mh > QSI_SQRT2) {
        a.mh *= 0.5;
        a.ml *= 0.5;
        a.e += 1;
    }
    return a;
}

/* ln(2^e (mh + ml)) in double: s = (m-1)/(m+1), ln m = 2 atanh s. mh - 1 is exact
 * (Sterbenz), each other operation adds one rounding; relative error below 2^-49. */
static double qsi_log_fast(qsi_logarg a)
{
    double num = (a.mh - 1.0) + a.ml;
    double den = (a.mh + 1.0) + a.ml;
    double lm = qsi_atanh2_poly(num / den);
    double ed = (double)a.e;
    return ed * QSI_LN2S_1 + (lm + ed * QSI_LN2S_2);
}

static float qsi_log_slow(qsi_logarg a) /* [MATH-LOG] slow path, double-double */
{
    qsi_dd num = qsi_two_sum(a.mh - 1.0, a.ml);
    qsi_dd den = qsi_dd_add_d(qsi_two_sum(a.mh, 1.0), a.ml);
    qsi_dd lm = qsi_atanh2_dd(qsi_dd_div(num, den));
    return qsi_dd_to_float(qsi_dd_add(qsi_k_ln2_dd((double)a.e), lm));
}

static float qsi_log_round(qsi_logarg a)
{
    float f;
    if (qsi_decide(qsi_log_fast(a), &f)) {
        return f;
    }
    return qsi_log_slow(a);
}

float qs_logf(float x) /* [MATH-LOG] */
{
    if (x != x || x < 0.0f) {
        return qsi_nanf(); /* [MATH-SPECIAL] NaN, and ln of a negative number */
    }
    if (x == 0.0f) {
        return -HUGE_VALF; /* ln(+-0) = -Inf */
    }
    if (x == HUGE_VALF) {
        return x;
    }
    return qsi_log_round(qsi_log_split((double)x, 0.0));
}

float qs_log1pf(float x) /* [MATH-LOG1P] */
{
    if (x != x || x < -1.0f) {
        return qsi_nanf(); /* [MATH-SPECIAL] */
    }
    if (x == -1.0f) {
        return -HUGE_VALF;
    }
    if (x == 0.0f || x == HUGE_VALF) {
        return x; /* keeps the sign of zero */
    }
    qsi_dd u = qsi_two_sum(1.0, (double)x); /* 1 + x exactly */
    return qsi_log_round(qsi_log_split(u.hi, u.lo));
}

/* ------------------------------------------------------------------ sin, cos */
/* [MATH-TRIG-RANGE] x = k pi/2 + r with |r| <= pi/4 (plus rounding slack), r as a
 * double-double accurate to about 2^-120 absolute for |x| <= 2^20; returns k mod 4. */
static int qsi_reduce_pio2(double xd, qsi_dd *r)
{
    double kd = qsi_round_int(xd * QSI_TWO_OVER_PI);
    qsi_dd t = qsi_dd_make(xd - kd * QSI_PIO2_1, 0.0); /* exact: multiples of 2^-32 */
    t = qsi_dd_add_d(t, -(kd * QSI_PIO2_2));
    t = qsi_dd_add_d(t, -(kd * QSI_PIO2_3));
    t = qsi_dd_add_d(t, -(kd * QSI_PIO2_4));
    t = qsi_dd_add_d(t, -(kd * QSI_PIO2_5));
    *r = t;
    long k = (long)kd;
    return (int)(((k % 4) + 4) % 4);
}

/* sin(rh + rl) in double, Taylor to r^17 (truncation below 2^-60 relative). */
static double qsi_sin_poly(qsi_dd r)
{
    static const double c[8] = {
        -1.0 / 6,        1.0 / 120,        -1.0 / 5040,          1.0 / 362880,
        -1.0 / 39916800, 1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000};
    double z = r.hi * r.hi;
    double p = c[7];
    for (int n = 6; n >= 0; n--) {
        p = p * z + c[n];
    }
    return r.hi + (r.hi * (z * p) + r.lo * (1.0 - 0.5 * z));
}

/* cos(rh + rl) in double, Taylor to r^18 (truncation below 2^-66). */
static double qsi_cos_poly(qsi_dd r)
{
    static const double c[9] = {-1.0 / 2,
                                1.0 / 24,
                                -1.0 / 720,
                                1.0 / 40320,
                                -1.0 / 3628800,
                                1.0 / 479001600,
                                -1.0 / 87178291200,
                                1.0 / 20922789888000,
                                -1.0 / 6402373705728000};
    double z = r.hi * r.hi;
    double p = c[8];
    for (int n = 7; n >= 0; n--) {
        p = p * z + c[n];
    }
    return 1.0 + (z * p - r.lo * r.hi);
}

/* sin (odd = 1) or cos (odd = 0) of a double-double |r| <= 0.8 by summing the Taylor
 * series until the terms fall below 2^-110. */
static qsi_dd qsi_sincos_dd(qsi_dd r, int odd)
{
    qsi_dd r2 = qsi_dd_mul(r, r);
    qsi_dd term = odd ? r : qsi_dd_make(1.0, 0.0);
    qsi_dd sum = term;
    for (int n = 1; n < 40; n++) {
        double d = odd ? (2.0 * n) * (2.0 * n + 1.0) : (2.0 * n - 1.0) * (2.0 * n);
        term = qsi_dd_div(qsi_dd_mul(term, r2), qsi_dd_make(-d, 0.0));
        sum = qsi_dd_add(sum, term);
        if (fabs(term.hi) < 0x1p-110 * fabs(sum.hi)) {
            break;
        }
    }
    return sum;
}

/* sin(x) (want_cos = 0) or cos(x) (want_cos = 1) for finite |x| <= 2^20, x != 0. */
static float qsi_sincosf(float x, int want_cos)
{
    qsi_dd r;
    int q = qsi_reduce_pio2((double)x, &r);
    /* sin(x) = sin r, cos r, -sin r, -cos r for q = 0..3; cos(x) is sin(x + pi/2). */
    q = (q + want_cos) % 4;
    int use_cos = q & 1;
    double sign = q >= 2 ? -1.0 : 1.0;
    double y = sign * (use_cos ? qsi_cos_poly(r) : qsi_sin_poly(r));
    float f;
    if (qsi_decide(y, &f)) {
        return f;
    }
    qsi_dd s = qsi_sincos_dd(r, !use_cos);
    return qsi_dd_to_float(qsi_dd_make(sign * s.hi, sign * s.lo));
}

float qs_sinf(float x) /* [MATH-SIN] */
{
    if (x != x || fabsf(x) > QS_MATHF_TRIG_MAX) {
        return qsi_nanf(); /* [MATH-SPECIAL] [MATH-TRIG-RANGE], also +-Inf */
    }
    if (x == 0.0f) {
        return x; /* sin(+-0) = +-0 */
    }
    return qsi_sincosf(x, 0);
}

float qs_cosf(float x) /* [MATH-COS] */
{
    if (x != x || fabsf(x) > QS_MATHF_TRIG_MAX) {
        return qsi_nanf(); /* [MATH-SPECIAL] [MATH-TRIG-RANGE], also +-Inf */
    }
    if (x == 0.0f) {
        return 1.0f;
    }
    return qsi_sincosf(x, 1);
}

/* ------------------------------------------------------------------ sqrt, rsqrt */
float qs_sqrtf(float x) /* [MATH-SQRT] */
{
    if (x != x || x < 0.0f) {
        return qsi_nanf(); /* [MATH-SPECIAL] */
    }
    /* The double square root is correctly rounded (IEEE 754) and 53 >= 2*24 + 2, so rounding
     * it again to binary32 gives the correctly rounded binary32 square root. */
    return (float)sqrt((double)x);
}

/* Sign of 1 - m*m*x for m > 0 with 25 significant bits and a binary32 x > 0: m*m is exact
 * in double (50 bits) and m*m*x exact as a double-double (Dekker). */
static int qsi_rsqrt_side(double m, double x)
{
    qsi_dd p = qsi_two_prod(m * m, x);
    if (p.hi != 1.0) {
        return p.hi < 1.0 ? 1 : -1;
    }
    return p.lo < 0.0 ? 1 : (p.lo > 0.0 ? -1 : 0);
}

float qs_rsqrtf(float x) /* [MATH-RSQRT] */
{
    if (x != x || x < 0.0f) {
        return qsi_nanf(); /* [MATH-SPECIAL] */
    }
    if (x == 0.0f) {
        return 1.0f / x; /* 1/sqrt(+-0) = +-Inf, as IEEE 754 rSqrt */
    }
    if (x == HUGE_VALF) {
        return 0.0f;
    }
    double xd = x;
    double y = 1.0 / sqrt(xd); /* two roundings: relative error below 2^-51 */
    float f;
    if (qsi_decide(y, &f)) {
        return f;
    }
    /* Exactly one binary32 midpoint m lies in the interval; 1/sqrt(x) > m iff m*m*x < 1. */
    float lo = (float)(y - fabs(y) * QSI_FAST_REL);
    float hi = (float)(y + fabs(y) * QSI_FAST_REL);
    double m = 0.5 * ((double)lo + (double)hi);
    int side = qsi_rsqrt_side(m, xd);
    if (side != 0) {
        return side > 0 ? hi : lo;
    }
    return (float)m; /* an exact tie (does not occur for binary32) rounds to even */
}

/* ------------------------------------------------------------------ compositions */
float qs_sigmoidf(float x) /* [MATH-SIGMOID] 1 / (1 + e^-x), each step binary32 */
{
    if (x != x) {
        return qsi_nanf();
    }
    float e = qs_expf(-x);
    float d = 1.0f + e;
    return 1.0f / d;
}

float qs_softplusf(float x) /* [MATH-SOFTPLUS] x above 20, else log1p(e^x) */
{
    if (x != x) {
        return qsi_nanf();
    }
    if (x > 20.0f) {
        return x;
    }
    return qs_log1pf(qs_expf(x));
}

float qs_siluf(float x) /* [MATH-SILU] x / (1 + e^-x), each step binary32; -Inf gives -0 */
{
    if (x != x) {
        return qsi_nanf();
    }
    if (x == -HUGE_VALF) {
        return -0.0f;
    }
    float e = qs_expf(-x);
    float d = 1.0f + e;
    return x / d;
}

/* The constants of the tanh-form GELU [MATH-GELU], as binary32 values: RN(sqrt(2/pi)), its
 * double (exact), RN(0.044715) and fl32(3 * RN(0.044715)). */
static const float QSI_GELU_K = 0x1.988454p-1f;
static const float QSI_GELU_K2 = 0x1.988454p+0f;
static const float QSI_GELU_C = 0x1.6e4e26p-5f;
static const float QSI_GELU_C3 = 0x1.12ba9cp-3f;

/* The shared first steps of [MATH-GELU] and [MATH-GELU-GRAD]: e = e^(-2|u|) with
 * u = k (x + c x^3), and d = 1 + e, each step binary32. Returns x^2 for the derivative. */
static float gelu_inner(float x, float *e, float *d)
{
    float x2 = x * x;
    float x3 = x2 * x;
    float p = QSI_GELU_C * x3;
    float s = x + p;
    float u = QSI_GELU_K * s;
    float m = -2.0f * fabsf(u);
    *e = qs_expf(m);
    *d = 1.0f + *e;
    return x2;
}

float qs_geluf(float x) /* [MATH-GELU] x sigmoid(2u), each step binary32; -Inf gives -0 */
{
    if (x != x) {
        return qsi_nanf();
    }
    if (x == -HUGE_VALF) {
        return -0.0f;
    }
    float e, d;
    (void)gelu_inner(x, &e, &d);
    if (x < 0.0f) {
        float n = x * e;
        return n / d;
    }
    return x / d;
}

float qs_gelu_gradf(float x) /* [MATH-GELU-GRAD] sigmoid(2u) + 2x s(1-s) u'(x) */
{
    if (x != x) {
        return qsi_nanf();
    }
    float e, d;
    float x2 = gelu_inner(x, &e, &d);
    float r = 1.0f / d; /* sigmoid(2|u|) */
    float q = e / d;    /* sigmoid(-2|u|), that is 1 - r without the cancellation */
    float sg = x < 0.0f ? q : r;
    float a = r * q;
    if (a == 0.0f) {
        return sg; /* the second term is zero, also where x^2 overflows */
    }
    float b = x * a;
    float cx = QSI_GELU_C3 * x2;
    float ds = 1.0f + cx;
    float pk = QSI_GELU_K2 * ds;
    float t = b * pk;
    return sg + t;
}
