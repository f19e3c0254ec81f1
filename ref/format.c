/* format.c: the number formats of spec/formats.md — exact decoding and one-rounding
 * encoding from FP64 (and FP32, which widens exactly) for every rounding mode and overflow
 * policy. Every format goes through the same code, driven by its qs_format_info row; what
 * differs between CUDA, OCP and ml_dtypes (the overflow policy) is the one table
 * qsi_policies. Rounding decisions use exact integer arithmetic only. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "qspec/format.h"

/* [FMT-LAYOUT] The formats: bits, exponent and fraction widths, bias and specials. */
static const qs_format_info qsi_formats[] = {
    {QS_FP32, "fp32", 32, 8, 23, 127, 1, 1, 1, 1, 0x7F7FFFFFu, 0x1.fffffep127, 0x1p-149,
     0x7FC00000u},
    {QS_BF16, "bf16", 16, 8, 7, 127, 1, 1, 1, 1, 0x7F7Fu, 0x1.fep127, 0x1p-133, 0x7FFFu},
    {QS_FP16, "fp16", 16, 5, 10, 15, 1, 1, 1, 1, 0x7BFFu, 65504.0, 0x1p-24, 0x7FFFu},
    {QS_E4M3, "e4m3", 8, 4, 3, 7, 1, 0, 2, 1, 0x7Eu, 448.0, 0x1p-9, 0x7Fu},
    {QS_E5M2, "e5m2", 8, 5, 2, 15, 1, 1, 1, 1, 0x7Bu, 57344.0, 0x1p-16, 0x7Fu},
    {QS_E8M0, "e8m0", 8, 8, 0, 127, 0, 0, 3, 0, 0xFEu, 0x1p127, 0x1p-127, 0xFFu},
    {QS_E2M1, "e2m1", 4, 2, 1, 1, 1, 0, 0, 1, 0x7u, 6.0, 0.5, 0u},
    {QS_E2M3, "e2m3", 6, 2, 3, 1, 1, 0, 0, 1, 0x1Fu, 7.5, 0x1p-3, 0u},
    {QS_E3M2, "e3m2", 6, 3, 2, 3, 1, 0, 0, 1, 0x1Fu, 28.0, 0x1p-4, 0u},
};

/* What a special case turns into; resolved per format by qsi_special_code. */
typedef enum qsi_action {
    QSI_TO_MAX,        /* +-max finite */
    QSI_TO_INF,        /* +-Inf; NaN with the sign where there is no Inf; +-max where no NaN */
    QSI_TO_NAN_CANON,  /* the canonical positive NaN code; +max where the format has no NaN */
    QSI_TO_NAN_SIGNED, /* the quiet NaN with the input's sign; where there is no NaN, the
                          zero of the opposite sign (ml_dtypes: -(-0) for a -NaN) */
} qsi_action;

/* One overflow policy [FMT-OVF-SATFINITE] [FMT-OVF-NOSAT] [FMT-OVF-MLDTYPES]. */
typedef struct qsi_policy {
    qsi_action overflow; /* a finite value whose rounding exceeds max, rounded outward */
    qsi_action infinity; /* an input +-Inf */
    qsi_action nan;      /* an input NaN */
    int unsigned_abs;    /* E8M0: 1 encodes |x| and 0 as 0x00 (CUDA); 0 gives NaN for x <= 0 */
} qsi_policy;

static const qsi_policy qsi_policies[QS_OVF_COUNT] = {
    [QS_OVF_SATFINITE] = {QSI_TO_MAX, QSI_TO_MAX, QSI_TO_NAN_CANON, 1},
    [QS_OVF_NOSAT] = {QSI_TO_INF, QSI_TO_INF, QSI_TO_NAN_CANON, 1},
    [QS_OVF_MLDTYPES] = {QSI_TO_INF, QSI_TO_INF, QSI_TO_NAN_SIGNED, 0},
};

static const char *const qsi_round_names[QS_ROUND_COUNT] = {"rne", "rz", "ru", "rd", "away", "sr"};
static const char *const qsi_overflow_names[QS_OVF_COUNT] = {"satfinite", "nosat", "mldtypes"};

const qs_format_info *qs_format_info_get(qs_dtype dt)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(qsi_formats); i++)
        if (qsi_formats[i].dtype == dt)
            return &qsi_formats[i];
    return NULL;
}

const char *qs_round_name(qs_round r)
{
    return (unsigned)r < QS_ROUND_COUNT ? qsi_round_names[r] : NULL;
}

int qs_round_from_name(const char *name)
{
    for (int i = 0; name && i < QS_ROUND_COUNT; i++)
        if (strcmp(qsi_round_names[i], name) == 0)
            return i;
    return -1;
}

const char *qs_overflow_name(qs_overflow o)
{
    return (unsigned)o < QS_OVF_COUNT ? qsi_overflow_names[o] : NULL;
}

int qs_overflow_from_name(const char *name)
{
    for (int i = 0; name && i < QS_OVF_COUNT; i++)
        if (strcmp(qsi_overflow_names[i], name) == 0)
            return i;
    return -1;
}

uint32_t qs_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float qs_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint64_t qs_f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

double qs_f64_from_bits(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---------------------------------------------------------------- descriptor helpers */

static uint32_t qsi_code_mask(const qs_format_info *fi)
{
    return fi->bits == 32 ? 0xFFFFFFFFu : (1u << fi->bits) - 1u;
}

static uint32_t qsi_sign_bit(const qs_format_info *fi)
{
    return fi->has_sign ? 1u << (fi->bits - 1) : 0u;
}

/* The all-ones exponent field, shifted into place. */
static uint32_t qsi_exp_ones(const qs_format_info *fi)
{
    return ((1u << fi->ebits) - 1u) << fi->mbits;
}

/* Smallest exponent of a value with the implicit bit: 1-bias, or -bias without subnormals. */
static int qsi_emin(const qs_format_info *fi)
{
    return fi->has_zero ? 1 - fi->bias : -fi->bias;
}

/* [FMT-DECODE] Whether a (masked) code is a NaN. */
static int qsi_is_nan_code(const qs_format_info *fi, uint32_t code)
{
    uint32_t mag = code & ~qsi_sign_bit(fi) & qsi_code_mask(fi);
    uint32_t frac = mag & ((1u << fi->mbits) - 1u);
    switch (fi->nan_kind) {
    case 1:
        return (mag & qsi_exp_ones(fi)) == qsi_exp_ones(fi) && frac != 0;
    case 2:
        return mag == (qsi_exp_ones(fi) | ((1u << fi->mbits) - 1u));
    case 3:
        return mag == qsi_code_mask(fi);
    default:
        return 0;
    }
}

static int qsi_is_inf_code(const qs_format_info *fi, uint32_t code)
{
    uint32_t mag = code & ~qsi_sign_bit(fi) & qsi_code_mask(fi);
    return fi->has_inf && mag == qsi_exp_ones(fi);
}

/* ---------------------------------------------------------------- decoding */

/* [FMT-DECODE] The exact value of a finite code's magnitude. */
static double qsi_decode_magnitude(const qs_format_info *fi, uint32_t mag)
{
    uint32_t field = mag >> fi->mbits;
    uint32_t frac = mag & ((1u << fi->mbits) - 1u);
    if (field == 0 && fi->has_zero)
        return ldexp((double)frac, qsi_emin(fi) - (int)fi->mbits);
    int e = (int)field - fi->bias;
    return ldexp((double)((1u << fi->mbits) + frac), e - (int)fi->mbits);
}

double qs_decode_f64(qs_dtype dt, uint32_t code)
{
    const qs_format_info *fi = qs_format_info_get(dt);
    if (!fi)
        return qs_f64_from_bits(0x7FF8000000000000ull);
    code &= qsi_code_mask(fi);
    uint64_t sign64 = (code & qsi_sign_bit(fi)) ? 0x8000000000000000ull : 0;
    if (qsi_is_nan_code(fi, code))
        return qs_f64_from_bits(sign64 | 0x7FF8000000000000ull);
    if (qsi_is_inf_code(fi, code))
        return qs_f64_from_bits(sign64 | 0x7FF0000000000000ull);
    double v = qsi_decode_magnitude(fi, code & ~qsi_sign_bit(fi));
    return sign64 ? -v : v;
}

float qs_decode_f32(qs_dtype dt, uint32_t code)
{
    if (dt == QS_FP32)
        return qs_f32_from_bits(code);
    if (dt == QS_BF16)
        return qs_bf16_to_f32((uint16_t)code);
    if (dt == QS_FP16)
        return qs_f16_to_f32((uint16_t)code);
    const qs_format_info *fi = qs_format_info_get(dt);
    if (fi && qsi_is_nan_code(fi, code & qsi_code_mask(fi))) {
        uint32_t sign32 = (code & qsi_sign_bit(fi)) ? 0x80000000u : 0;
        return qs_f32_from_bits(sign32 | 0x7FC00000u);
    }
    /* Every value of these formats is an FP32 value, so the narrowing is exact. */
    return (float)qs_decode_f64(dt, code);
}

/* ---------------------------------------------------------------- the special cases */

/* The quiet NaN code: IEEE-style formats set the top fraction bit. */
static uint32_t qsi_quiet_nan(const qs_format_info *fi)
{
    if (fi->nan_kind == 1)
        return qsi_exp_ones(fi) | (1u << (fi->mbits - 1));
    return fi->nan_code;
}

/* Resolves a policy action for format fi and a sign (0 or 1). */
static uint32_t qsi_special_code(const qs_format_info *fi, qsi_action a, int neg)
{
    uint32_t s = neg ? qsi_sign_bit(fi) : 0;
    switch (a) {
    case QSI_TO_MAX:
        return fi->max_code | s;
    case QSI_TO_INF:
        if (fi->has_inf)
            return qsi_exp_ones(fi) | s;
        if (fi->nan_kind != 0)
            return fi->nan_code | s; /* [FMT-E4M3-OVF]: E4M3 has no Inf, so NaN */
        return fi->max_code | s;     /* [FMT-E2M1-OVF]: FP4/FP6 have neither */
    case QSI_TO_NAN_CANON:
        return fi->nan_kind != 0 ? fi->nan_code : fi->max_code; /* [FMT-E2M1-NAN] */
    case QSI_TO_NAN_SIGNED:
        if (fi->nan_kind != 0)
            return qsi_quiet_nan(fi) | s;
        return neg ? 0u : qsi_sign_bit(fi); /* [FMT-E2M1-NAN]: ml_dtypes 0.7.0 */
    }
    return fi->nan_code;
}

/* ---------------------------------------------------------------- rounding */

/* The magnitude a = (n + r) * 2^qe split exactly: n the integer part, r as floor(r*2^64) in
 * frac and whether anything below that is non-zero in sticky. */
typedef struct qsi_split {
    uint64_t n;
    uint64_t frac;
    int sticky;
} qsi_split;

/* Splits m * 2^-shift (m < 2^53, shift >= 1) into integer part and fraction. */
static qsi_split qsi_split_shift(uint64_t m, int shift)
{
    qsi_split sp = {0, 0, 0};
    if (shift < 64) {
        sp.n = m >> shift;
        sp.frac = (m & ((1ull << shift) - 1u)) << (64 - shift);
        return sp;
    }
    int s2 = shift - 64;
    if (s2 < 64) {
        sp.frac = m >> s2;
        sp.sticky = (m & ((1ull << s2) - 1u)) != 0;
    } else {
        sp.sticky = m != 0;
    }
    return sp;
}

/* [FMT-ROUND-*] Whether the magnitude goes up from n to n+1. */
static int qsi_round_up(const qsi_split *sp, qs_round r, int neg, uint32_t sr_bits)
{
    const uint64_t half = 1ull << 63;
    if (sp->frac == 0 && !sp->sticky)
        return 0; /* exact */
    switch (r) {
    case QS_ROUND_RNE: /* [FMT-ROUND-RNE] */
        if (sp->frac != half || sp->sticky)
            return sp->frac > half || (sp->frac == half && sp->sticky);
        return (int)(sp->n & 1u);
    case QS_ROUND_AWAY: /* [FMT-ROUND-AWAY] */
        return sp->frac >= half;
    case QS_ROUND_RZ: /* [FMT-ROUND-RZ] */
        return 0;
    case QS_ROUND_RU: /* [FMT-ROUND-RU] */
        return !neg;
    case QS_ROUND_RD: /* [FMT-ROUND-RD] */
        return neg;
    case QS_ROUND_SR: /* [FMT-ROUND-SR]: r + u*2^-32 >= 1, i.e. frac + u*2^32 >= 2^64 */
        return sr_bits != 0 && sp->frac >= ((uint64_t)(0x100000000ull - sr_bits) << 32);
    case QS_ROUND_COUNT:
        break;
    }
    return 0;
}

/* [FMT-OVF-DIRECTED] Whether an overflow under mode r gives +-max whatever the policy: the
 * rounding went toward zero (rz, ru of a negative, rd of a positive, sr that rounded down). */
static int qsi_overflow_truncates(qs_round r, int neg, int up)
{
    switch (r) {
    case QS_ROUND_RZ:
        return 1;
    case QS_ROUND_RU:
        return neg;
    case QS_ROUND_RD:
        return !neg;
    case QS_ROUND_SR:
        return !up;
    default:
        return 0;
    }
}

/* The exact split of a finite a > 0 from its FP64 bits: a = m * 2^(k-53), 2^52 <= m < 2^53. */
static uint64_t qsi_f64_significand(double a, int *k)
{
    uint64_t u = qs_f64_bits(a);
    int field = (int)((u >> 52) & 0x7FFu);
    uint64_t m = u & ((1ull << 52) - 1u);
    if (field != 0) {
        *k = field - 1022;
        return m | (1ull << 52);
    }
    *k = -1021; /* an FP64 subnormal: m * 2^-1074, normalised here */
    while (!(m & (1ull << 52))) {
        m <<= 1;
        *k -= 1;
    }
    return m;
}

/* [FMT-ENCODE] Encodes a finite a > 0 (sign neg) with one rounding; returns the code. */
static uint32_t qsi_encode_finite(const qs_format_info *fi, double a, int neg, qs_cast_mode mode,
                                  unsigned *flags)
{
    int k;
    uint64_t m = qsi_f64_significand(a, &k);
    int emin = qsi_emin(fi);
    int e = k - 1 > emin ? k - 1 : emin; /* the binade of the result, subnormals at emin */
    /* The quantum of binade e is 2^(e-mbits), so a / quantum = m * 2^-(e-mbits-k+53). */
    qsi_split sp = qsi_split_shift(m, e - (int)fi->mbits - (k - 53));
    int up = qsi_round_up(&sp, mode.round, neg, mode.sr_bits);
    uint64_t n = sp.n + (uint64_t)up; /* the rounded magnitude is n * 2^(e-mbits) */
    if (sp.frac != 0 || sp.sticky)
        *flags |= QS_FLAG_INEXACT;
    if (!fi->has_zero && n == 0) /* [FMT-E8M0-UNDERFLOW]: no zero, the smallest value */
        n = 1;
    /* Magnitude codes grow with the value, and a carry of n into the next binade lands on
     * the right code, so the code of the unbounded grid point is this sum. */
    uint64_t mag = ((uint64_t)(e - emin) << fi->mbits) + n;
    if (!fi->has_zero)
        mag -= 1u << fi->mbits;
    if (mag > fi->max_code) { /* [FMT-OVF]: beyond max */
        *flags |= QS_FLAG_OVERFLOW | QS_FLAG_INEXACT;
        if (qsi_overflow_truncates(mode.round, neg, up))
            return qsi_special_code(fi, QSI_TO_MAX, neg);
        return qsi_special_code(fi, qsi_policies[mode.overflow].overflow, neg);
    }
    return (uint32_t)mag | (neg ? qsi_sign_bit(fi) : 0);
}

/* [FMT-E8M0-SIGN] The unsigned E8M0 scale: what zero, negatives and -Inf become. Returns 1
 * when *code is final, else sets *x to the value to encode. */
static int qsi_e8m0_sign(const qsi_policy *p, double *x, uint32_t *code)
{
    if (isnan(*x) || !(*x <= 0.0))
        return 0;
    if (!p->unsigned_abs) {
        *code = 0xFFu; /* ml_dtypes: zero and negatives are NaN */
        return 1;
    }
    if (*x == 0.0) {
        *code = 0x00u; /* CUDA: zero gives the smallest scale 2^-127 */
        return 1;
    }
    *x = -*x; /* CUDA: the sign is ignored */
    return 0;
}

static unsigned qsi_nan_flag(const qs_format_info *fi, uint32_t code)
{
    return qsi_is_nan_code(fi, code) ? QS_FLAG_NAN : 0u;
}

qs_status qs_encode_f64_flags(qs_dtype dt, double x, qs_cast_mode mode, uint32_t *code,
                              unsigned *flags)
{
    const qs_format_info *fi = qs_format_info_get(dt);
    unsigned fl = 0;
    if (!fi || !code || (unsigned)mode.round >= QS_ROUND_COUNT ||
        (unsigned)mode.overflow >= QS_OVF_COUNT)
        return QS_ERR_INVALID_ARG;
    const qsi_policy *p = &qsi_policies[mode.overflow];
    int negated = !fi->has_sign && signbit(x) && !isnan(x); /* E8M0 of a negative */
    if (!fi->has_sign && qsi_e8m0_sign(p, &x, code)) {
        fl = QS_FLAG_INEXACT; /* 0 -> 2^-127 or NaN: never the input's value */
    } else if (isnan(x)) {
        *code = qsi_special_code(fi, p->nan, signbit(x) != 0); /* [FMT-NAN] */
    } else if (isinf(x)) {
        *code = qsi_special_code(fi, p->infinity, signbit(x) != 0); /* [FMT-INF] */
    } else if (x == 0.0) {
        *code = signbit(x) ? qsi_sign_bit(fi) : 0u; /* [FMT-ZERO] */
    } else {
        *code = qsi_encode_finite(fi, fabs(x), signbit(x) != 0, mode, &fl);
    }
    if (!isfinite(x) && !qsi_is_nan_code(fi, *code) && !qsi_is_inf_code(fi, *code))
        fl |= QS_FLAG_INEXACT; /* [FMT-FLAGS]: Inf or NaN saturated to a finite code */
    if (negated)
        fl |= QS_FLAG_INEXACT;
    fl |= qsi_nan_flag(fi, *code);
    if (flags)
        *flags = fl;
    return QS_OK;
}

qs_status qs_encode_f64(qs_dtype dt, double x, qs_cast_mode mode, uint32_t *code)
{
    return qs_encode_f64_flags(dt, x, mode, code, NULL);
}

qs_status qs_encode_f32(qs_dtype dt, float x, qs_cast_mode mode, uint32_t *code)
{
    /* FP32 widens exactly to FP64 (NaN keeps its sign), so this is still one rounding. */
    return qs_encode_f64_flags(dt, (double)x, mode, code, NULL);
}

/* ---------------------------------------------------------------- shorthands */

static uint32_t qsi_encode_rne(qs_dtype dt, float x, qs_overflow ovf)
{
    qs_cast_mode mode = {QS_ROUND_RNE, ovf, 0};
    uint32_t code = 0;
    if ((unsigned)ovf >= QS_OVF_COUNT)
        mode.overflow = QS_OVF_SATFINITE;
    qs_encode_f32(dt, x, mode, &code);
    return code;
}

uint8_t qs_encode_e4m3(float x, qs_overflow ovf)
{
    return (uint8_t)qsi_encode_rne(QS_E4M3, x, ovf);
}

uint8_t qs_encode_e5m2(float x, qs_overflow ovf)
{
    return (uint8_t)qsi_encode_rne(QS_E5M2, x, ovf);
}

uint8_t qs_encode_e2m1(float x, qs_overflow ovf)
{
    return (uint8_t)qsi_encode_rne(QS_E2M1, x, ovf);
}

/* The 16-bit conversions below are the engine's hot path (every BF16 rounding point of a
 * program), so they work on the bits; each gives, for every input, the code or value of the
 * generic encoder and decoder (qs_encode_f32 under RNE and NOSAT, qs_decode_f64):
 * tests/exhaustive_format.c compares them on all 2^32 FP32 inputs and all 2^16 codes. */

/* [FMT-BF16-ENC] CUDA __float2bfloat16_rn: RNE, overflow to Inf, any NaN to 0x7FFF. BF16
 * is FP32 with 16 fraction bits dropped, so RNE is an integer rounding of the bits: a
 * carry out of the fraction moves the exponent up, and out of the largest finite value
 * reaches the Inf code. */
uint16_t qs_f32_to_bf16(float x)
{
    uint32_t u = qs_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return 0x7FFF;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* [FMT-FP16-ENC] CUDA __float2half_rn: RNE, overflow to Inf, any NaN to 0x7FFF. */
uint16_t qs_f32_to_f16(float x)
{
    uint32_t u = qs_f32_bits(x), a = u & 0x7FFFFFFFu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7F800000u)
        return 0x7FFF;
    if (a >= 0x477FF000u) /* 65520 and above round to Inf (65504 is the largest finite) */
        return sign | 0x7C00u;
    if (a >= 0x38800000u) { /* 2^-14 and above: normal; rebias 127 -> 15, RNE at bit 13 */
        uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    /* subnormal or zero: the code is |x| in units of 2^-24, rounded to an integer by RNE
     * (the product is exact, and adding and removing 2^23 rounds a value below 2^23 under
     * the default rounding; 1024 is the code of 2^-14) */
    float v = qs_f32_from_bits(a) * 0x1p24f;
    v = (v + 0x1p23f) - 0x1p23f;
    return (uint16_t)(sign | (uint16_t)v);
}

float qs_bf16_to_f32(uint16_t h)
{
    if ((h & 0x7FFFu) > 0x7F80u) /* NaN: the quiet NaN of its sign, as qs_decode_f32 */
        return qs_f32_from_bits(((uint32_t)(h & 0x8000u) << 16) | 0x7FC00000u);
    return qs_f32_from_bits((uint32_t)h << 16);
}

float qs_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, f = h & 0x3FFu;
    if (e == 0x1F)
        return qs_f32_from_bits(sign | (f ? 0x7FC00000u : 0x7F800000u));
    if (e == 0) { /* subnormal or zero: f units of 2^-24, exact in FP32 */
        float v = (float)f * 0x1p-24f;
        return sign ? -v : v;
    }
    return qs_f32_from_bits(sign | ((e + 112u) << 23) | (f << 13));
}

/* qs_bf16_to_f32(qs_f32_to_bf16(x)) in one step on the bits (a NaN gives 0x7FFF, whose
 * value is the positive quiet NaN); the engine calls it at every BF16 rounding point. */
float qs_round_bf16(float x)
{
    return qsi_round_bf16(x);
}

float qs_round_f16(float x)
{
    return qs_f16_to_f32(qs_f32_to_f16(x));
}
