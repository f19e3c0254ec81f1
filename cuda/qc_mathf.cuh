/* qc_mathf.cuh: the correctly rounded exp and log of spec/mathf.md ([MATH-EXP], [MATH-LOG])
 * on the device, by the algorithm of ref/mathf.c (a double evaluation trusted when its error
 * interval rounds to one binary32 value [MATH-CR], else a double-double slow path). A
 * correctly rounded function has one result, so these give qs_expf's and qs_logf's bits;
 * cuda/attn_check.cu compares them with the reference. Needs -fmad=false (no contraction). */
#ifndef QC_MATHF_CUH
#define QC_MATHF_CUH

#include <stdint.h>
#include <string.h>

namespace qc
{
namespace mf
{

#define QC_MF __host__ __device__ __forceinline__

QC_MF double pow2(int k)
{
    uint64_t b = static_cast<uint64_t>(k + 1023) << 52;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

QC_MF int exponent(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return static_cast<int>((b >> 52) & 0x7ff) - 1023;
}

QC_MF float nanf32()
{
    uint32_t b = 0x7fc00000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

QC_MF float inf32()
{
    uint32_t b = 0x7f800000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

QC_MF float nextf(float f, bool up)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if (f == 0.0f)
        b = up ? 1u : 0x80000001u;
    else if ((f > 0.0f) == up)
        b += 1;
    else
        b -= 1;
    memcpy(&f, &b, sizeof f);
    return f;
}

constexpr double kLn2a = 0x1.62e42fefa39efp-1, kLn2b = 0x1.abc9e3b39803fp-56,
                 kLn2c = 0x1.7b57a079a1934p-111;
constexpr double kLn2s1 = 0x1.62e42fefa38p-1, kLn2s2 = 0x1.ef35793c768p-45;
constexpr double kInvLn2 = 0x1.71547652b82fep+0, kSqrt2 = 0x1.6a09e667f3bcdp+0;
constexpr double kShift = 0x1.8p52, kFastRel = 0x1p-44;

QC_MF double rint_shift(double d)
{
    return (d + kShift) - kShift;
}

/* The one binary32 value of y(1 +- 2^-44), when there is one. */
QC_MF bool decide(double y, float *out)
{
    double e = (y < 0 ? -y : y) * kFastRel;
    float a = static_cast<float>(y - e), b = static_cast<float>(y + e);
    if (a != b)
        return false;
    *out = a;
    return true;
}

struct dd {
    double hi, lo;
};

QC_MF dd two_sum(double a, double b)
{
    double s = a + b, bb = s - a;
    return dd{s, (a - (s - bb)) + (b - bb)};
}
QC_MF dd fast_two_sum(double a, double b)
{
    double s = a + b;
    return dd{s, b - (s - a)};
}
QC_MF void split(double a, double *hi, double *lo)
{
    double c = 134217729.0 * a;
    *hi = c - (c - a);
    *lo = a - *hi;
}
QC_MF dd two_prod(double a, double b)
{
    double p = a * b, ah, al, bh, bl;
    split(a, &ah, &al);
    split(b, &bh, &bl);
    return dd{p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
}
QC_MF dd add(dd x, dd y)
{
    dd s = two_sum(x.hi, y.hi), t = two_sum(x.lo, y.lo);
    s = fast_two_sum(s.hi, s.lo + t.hi);
    return fast_two_sum(s.hi, s.lo + t.lo);
}
QC_MF dd add_d(dd x, double d)
{
    return add(x, dd{d, 0.0});
}
QC_MF dd mul(dd x, dd y)
{
    dd p = two_prod(x.hi, y.hi);
    return fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}
QC_MF dd mul_d(dd x, double d)
{
    dd p = two_prod(x.hi, d);
    return fast_two_sum(p.hi, p.lo + x.lo * d);
}
QC_MF dd div(dd x, dd y)
{
    double q1 = x.hi / y.hi;
    dd r = add(x, mul_d(y, -q1));
    double q2 = r.hi / y.hi;
    r = add(r, mul_d(y, -q2));
    double q3 = r.hi / y.hi;
    return add_d(fast_two_sum(q1, q2), q3);
}
QC_MF dd scale(dd x, int k)
{
    double p = pow2(k);
    return dd{x.hi * p, x.lo * p};
}
QC_MF float to_float(dd x)
{
    float f = static_cast<float>(x.hi);
    double d = f;
    if (x.lo == 0.0 || d == x.hi || f == inf32() || f == -inf32())
        return f;
    float g = nextf(f, x.hi > d);
    if (x.hi != 0.5 * (d + static_cast<double>(g)))
        return f;
    return (x.lo > 0.0) == (g > f) ? g : f;
}

/* e^r, |r| <= 0.35: Taylor to degree 14, Horner from the top. */
QC_MF double exp_poly(double r)
{
    double p = 1.0 / 87178291200.0;
    p = p * r + 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 1.0 / 2.0;
    p = p * r + 1.0;
    p = p * r + 1.0;
    return p;
}

__host__ __device__ inline dd exp_dd(dd r)
{
    dd sum{1.0, 0.0}, term = sum;
    for (int n = 1; n < 40; n++) {
        term = div(mul(term, r), dd{static_cast<double>(n), 0.0});
        sum = add(sum, term);
        if ((term.hi < 0 ? -term.hi : term.hi) < 0x1p-110)
            break;
    }
    return sum;
}

QC_MF dd k_ln2(double kd)
{
    dd a = two_prod(kd, kLn2a);
    a = add(a, two_prod(kd, kLn2b));
    return add_d(a, kd * kLn2c);
}

/* qs_expf [MATH-EXP]. */
__host__ __device__ inline float expf_cr(float x)
{
    if (x != x)
        return nanf32();
    if (x > 89.0f)
        return inf32();
    if (x < -104.0f)
        return 0.0f;
    double xd = x, kd = rint_shift(xd * kInvLn2);
    double r = (xd - kd * kLn2s1) - kd * kLn2s2;
    float f;
    if (decide(exp_poly(r) * pow2(static_cast<int>(kd)), &f))
        return f;
    dd rr = add(dd{xd, 0.0}, k_ln2(-kd));
    return to_float(scale(exp_dd(rr), static_cast<int>(kd)));
}

QC_MF double atanh2_poly(double s)
{
    double z = s * s, p = 2.0 / 21;
    p = p * z + 2.0 / 19;
    p = p * z + 2.0 / 17;
    p = p * z + 2.0 / 15;
    p = p * z + 2.0 / 13;
    p = p * z + 2.0 / 11;
    p = p * z + 2.0 / 9;
    p = p * z + 2.0 / 7;
    p = p * z + 2.0 / 5;
    p = p * z + 2.0 / 3;
    return 2.0 * s + s * (z * p);
}

__host__ __device__ inline dd atanh2_dd(dd s)
{
    dd z = mul(s, s), pw = s, sum = s;
    for (int n = 1; n < 60; n++) {
        pw = mul(pw, z);
        dd term = div(pw, dd{2.0 * n + 1.0, 0.0});
        sum = add(sum, term);
        double th = term.hi < 0 ? -term.hi : term.hi, sh = sum.hi < 0 ? -sum.hi : sum.hi;
        if (th < 0x1p-110 * sh)
            break;
    }
    return scale(sum, 1);
}

/* qs_logf [MATH-LOG]. */
__host__ __device__ inline float logf_cr(float x)
{
    if (x != x || x < 0.0f)
        return nanf32();
    if (x == 0.0f)
        return -inf32();
    if (x == inf32())
        return x;
    double hi = x;
    int e = exponent(hi);
    double mh = hi * pow2(-e), ml = 0.0;
    if (mh > kSqrt2) {
        mh *= 0.5;
        e += 1;
    }
    double ed = e;
    double num = (mh - 1.0) + ml, den = (mh + 1.0) + ml;
    double y = ed * kLn2s1 + (atanh2_poly(num / den) + ed * kLn2s2);
    float f;
    if (decide(y, &f))
        return f;
    dd n2 = two_sum(mh - 1.0, ml), d2 = add_d(two_sum(mh, 1.0), ml);
    return to_float(add(k_ln2(ed), atanh2_dd(div(n2, d2))));
}

#undef QC_MF

} // namespace mf
} // namespace qc

#endif
