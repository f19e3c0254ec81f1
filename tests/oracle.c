/* oracle.c: the naive model of spec/formats.md for the tests (see oracle.h). Each format is
 * a literal row of widths; its values come from decoding every code; encoding searches the
 * sorted values for the neighbours of |x| and applies the spec's rules in the order the spec
 * states them. Written apart from ref/format.c on purpose: it shares no code with it. */
#include <math.h>
#include <stdlib.h>

#include "oracle.h"

typedef struct qso_fmt {
    qs_dtype dt;
    int bits, mbits, bias;
    int is_signed;
    int kind; /* 0 plain (no Inf/NaN), 1 IEEE Inf/NaN, 2 E4M3 (NaN S.1111.111), 3 E8M0 */
    int built;
    int n;          /* number of non-negative finite values */
    double *val;    /* ascending */
    uint32_t *code; /* their codes */
    double max;     /* largest finite value */
    uint32_t maxc;  /* its code */
} qso_fmt;

static qso_fmt qso_fmts[] = {
    {QS_BF16, 16, 7, 127, 1, 1, 0, 0, NULL, NULL, 0, 0},
    {QS_FP16, 16, 10, 15, 1, 1, 0, 0, NULL, NULL, 0, 0},
    {QS_E4M3, 8, 3, 7, 1, 2, 0, 0, NULL, NULL, 0, 0},
    {QS_E5M2, 8, 2, 15, 1, 1, 0, 0, NULL, NULL, 0, 0},
    {QS_E8M0, 8, 0, 127, 0, 3, 0, 0, NULL, NULL, 0, 0},
    {QS_E2M1, 4, 1, 1, 1, 0, 0, 0, NULL, NULL, 0, 0},
    {QS_E2M3, 6, 3, 1, 1, 0, 0, 0, NULL, NULL, 0, 0},
    {QS_E3M2, 6, 2, 3, 1, 0, 0, 0, NULL, NULL, 0, 0},
};

static qso_fmt *qso_find(qs_dtype dt)
{
    for (size_t i = 0; i < sizeof qso_fmts / sizeof qso_fmts[0]; i++)
        if (qso_fmts[i].dt == dt)
            return &qso_fmts[i];
    return NULL;
}

static double qso_decode_fmt(const qso_fmt *f, uint32_t c)
{
    uint32_t signbit = f->is_signed ? 1u << (f->bits - 1) : 0;
    int neg = (c & signbit) != 0;
    uint32_t mag = c & ~signbit;
    int ebits = f->bits - f->is_signed - f->mbits;
    uint32_t field = mag >> f->mbits;
    uint32_t frac = mag & ((1u << f->mbits) - 1);
    uint32_t allones = (1u << ebits) - 1;
    double v;
    if (f->kind == 3) { /* E8M0: 2^(c-127), 0xFF NaN */
        if (c == 0xFF)
            return NAN;
        return ldexp(1.0, (int)c - 127);
    }
    if (f->kind == 1 && field == allones)
        v = frac == 0 ? INFINITY : NAN;
    else if (f->kind == 2 && field == allones && frac == (1u << f->mbits) - 1)
        v = NAN;
    else if (field == 0)
        v = ldexp((double)frac, 1 - f->bias - f->mbits);
    else
        v = ldexp((double)(frac + (1u << f->mbits)), (int)field - f->bias - f->mbits);
    return neg ? -v : v;
}

static int qso_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Decodes every code and keeps the non-negative finite values, sorted with their codes. */
static void qso_build(qso_fmt *f)
{
    uint32_t ncodes = 1u << f->bits;
    double *pairs = malloc(sizeof(double) * 2 * ncodes);
    f->val = malloc(sizeof(double) * ncodes);
    f->code = malloc(sizeof(uint32_t) * ncodes);
    if (!pairs || !f->val || !f->code)
        abort();
    f->n = 0;
    for (uint32_t c = 0; c < ncodes; c++) {
        double v = qso_decode_fmt(f, c);
        if (isnan(v) || isinf(v) || signbit(v))
            continue;
        pairs[2 * f->n] = v;
        pairs[2 * f->n + 1] = (double)c;
        f->n++;
    }
    qsort(pairs, (size_t)f->n, 2 * sizeof(double), qso_cmp);
    for (int i = 0; i < f->n; i++) {
        f->val[i] = pairs[2 * i];
        f->code[i] = (uint32_t)pairs[2 * i + 1];
    }
    free(pairs);
    f->max = f->val[f->n - 1];
    f->maxc = f->code[f->n - 1];
    f->built = 1;
}

static qso_fmt *qso_get(qs_dtype dt)
{
    qso_fmt *f = qso_find(dt);
    if (f && !f->built)
        qso_build(f);
    return f;
}

double qso_decode(qs_dtype dt, uint32_t code)
{
    qso_fmt *f = qso_get(dt);
    return f ? qso_decode_fmt(f, code) : NAN;
}

uint32_t qso_ncodes(qs_dtype dt)
{
    qso_fmt *f = qso_find(dt);
    return f ? 1u << f->bits : 0;
}

static uint32_t qso_sign(const qso_fmt *f, int neg)
{
    return (neg && f->is_signed) ? 1u << (f->bits - 1) : 0;
}

/* [FMT-NAN] the code of a NaN input, per format and policy. */
static uint32_t qso_nan(const qso_fmt *f, qs_overflow ovf, int neg)
{
    if (ovf != QS_OVF_MLDTYPES) {
        switch (f->dt) {
        case QS_BF16:
        case QS_FP16:
            return 0x7FFF;
        case QS_E4M3:
        case QS_E5M2:
            return 0x7F;
        case QS_E8M0:
            return 0xFF;
        default:
            return f->maxc; /* FP4/FP6: +max [FMT-E2M1-NAN] */
        }
    }
    switch (f->dt) {
    case QS_BF16:
        return 0x7FC0 | qso_sign(f, neg);
    case QS_FP16:
        return 0x7E00 | qso_sign(f, neg);
    case QS_E4M3:
        return 0x7F | qso_sign(f, neg);
    case QS_E5M2:
        return 0x7E | qso_sign(f, neg);
    case QS_E8M0:
        return 0xFF;
    default:
        return qso_sign(f, !neg); /* the zero of the opposite sign [FMT-E2M1-NAN] */
    }
}

/* The "Inf" result of nosat and mldtypes for overflow and infinite inputs. */
static uint32_t qso_inf(const qso_fmt *f, int neg)
{
    switch (f->dt) {
    case QS_BF16:
        return 0x7F80 | qso_sign(f, neg);
    case QS_FP16:
        return 0x7C00 | qso_sign(f, neg);
    case QS_E5M2:
        return 0x7C | qso_sign(f, neg);
    case QS_E4M3:
        return 0x7F | qso_sign(f, neg);
    case QS_E8M0:
        return 0xFF;
    default:
        return f->maxc | qso_sign(f, neg);
    }
}

/* Index of the largest value <= a, or -1. */
static int qso_floor_index(const qso_fmt *f, double a)
{
    int lo = -1, hi = f->n; /* val[lo] <= a < val[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (f->val[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Rounds the magnitude between lo < a < hi (r = (a-lo)/(hi-lo) exactly); 1 means hi. */
static int qso_choose_hi(qs_round round, int neg, double r, int lo_even, int e8m0, uint32_t u)
{
    switch (round) {
    case QS_ROUND_RNE:
        if (r != 0.5)
            return r > 0.5;
        return e8m0 ? 1 : !lo_even; /* [FMT-E8M0-RNE]: significand 1.5 rounds up */
    case QS_ROUND_AWAY:
        return r >= 0.5;
    case QS_ROUND_RZ:
        return 0;
    case QS_ROUND_RU:
        return !neg;
    case QS_ROUND_RD:
        return neg;
    case QS_ROUND_SR:
        return r >= 1.0 - ldexp((double)u, -32);
    default:
        abort();
    }
}

/* |x| above max: round in the unbounded grid of x's own binade, then the overflow rule. */
static uint32_t qso_beyond_max(const qso_fmt *f, double a, int neg, qs_round round, qs_overflow ovf,
                               uint32_t u)
{
    int k;
    frexp(a, &k);
    double q = ldexp(1.0, k - 1 - f->mbits);
    double n = floor(a / q);
    double r = a / q - n;
    int up = r == 0.0 ? 0 : qso_choose_hi(round, neg, r, fmod(n, 2.0) == 0.0, f->kind == 3, u);
    double chosen = (n + up) * q;
    if (chosen <= f->max)
        return f->maxc | qso_sign(f, neg);
    int toward_zero = round == QS_ROUND_RZ || (round == QS_ROUND_RU && neg) ||
                      (round == QS_ROUND_RD && !neg) || (round == QS_ROUND_SR && !up);
    if (toward_zero || ovf == QS_OVF_SATFINITE)
        return f->maxc | qso_sign(f, neg);
    return qso_inf(f, neg);
}

uint32_t qso_encode(qs_dtype dt, double x, qs_round round, qs_overflow ovf, uint32_t u)
{
    qso_fmt *f = qso_get(dt);
    if (!f)
        abort();
    int neg = signbit(x) != 0;
    if (f->kind == 3 && (neg || x == 0.0) && !isnan(x)) { /* [FMT-E8M0-SIGN] */
        if (ovf == QS_OVF_MLDTYPES)
            return 0xFF;
        if (x == 0.0)
            return 0x00;
        x = -x;
        neg = 0;
    }
    if (isnan(x))
        return qso_nan(f, ovf, neg);
    if (isinf(x)) {
        if (ovf == QS_OVF_SATFINITE)
            return f->maxc | qso_sign(f, neg);
        return qso_inf(f, neg);
    }
    double a = fabs(x);
    if (a > f->max)
        return qso_beyond_max(f, a, neg, round, ovf, u);
    int i = qso_floor_index(f, a);
    if (i < 0) /* E8M0 below 2^-127 [FMT-E8M0-UNDERFLOW] */
        return 0x00;
    if (f->val[i] == a)
        return f->code[i] | qso_sign(f, neg);
    double lo = f->val[i], hi = f->val[i + 1];
    double r = (a - lo) / (hi - lo);
    int up = qso_choose_hi(round, neg, r, (f->code[i] & 1u) == 0, f->kind == 3, u);
    return f->code[i + up] | qso_sign(f, neg);
}
