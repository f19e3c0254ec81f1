/* example_backend.c: a small backend plugin, built the way a vendor builds one: against
 * the installed headers only (include/qspec/backend.h), never against libqspec. It
 * implements the `cast` slot for E4M3 and E5M2 under RNE with the satfinite policy, the
 * `cast16` slot for BF16 and FP16 under every rounding mode (stochastic rounding included)
 * and overflow policy, the `quantize` slot for current and delayed scaling, the `gemm` slot
 * for the `exact` and `fp32_seq` models on tensor-scaled operands (FP32, BF16 and FP16
 * values, E4M3 and E5M2 codes) and for `hopper_fp8_tc` on E4M3/E5M2 codes, which it claims
 * bit for bit, and the `sdpa_fwd`/`sdpa_bwd` slots (naive FP32 loops with libm's expf and
 * logf, held to each case's tolerance), and claims nothing else, so every other case is
 * reported as not supported. The engine runs a program on these slots when they are all the
 * program needs (spec/cases.md [CASE-KERNEL-TABLE]), on simulated ranks too. Built with
 * -DQS_EXAMPLE_PLANT_ERROR its current-scaling scale_inv is one ulp too large, and with
 * -DQS_EXAMPLE_PLANT_GEMM_ERROR its GEMMs leave out the last k: the kit's own tests prove that
 * exactly the cases covering the planted error then fail. It also has the distributed slots
 * (QS_CAP_DIST): its ranks are processes on one host that exchange amaxes through files of a
 * directory the id names. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qspec/backend.h"

/* RNE of a finite positive float to an FP8 code with e exponent bits and m mantissa
 * bits (bias 2^(e-1)-1), saturating at the code max_code; specials handled by the caller. */
static uint32_t fp8_magnitude(float a, int e, int m, uint32_t max_code)
{
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    int bias = (1 << (e - 1)) - 1;
    int exp = (int)((bits >> 23) & 0xFF) - 127;
    uint32_t sig = (bits & 0x7FFFFF) | (exp > -127 ? 0x800000u : 0);
    if (exp == -127)
        exp = -126;
    int min_exp = 1 - bias;
    /* number of low bits of sig to drop so that the result has m fraction bits */
    int shift = 23 - m + (exp < min_exp ? min_exp - exp : 0);
    if (shift > 31)
        return 0;
    uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    /* q is the significand in units of the result's ulp; rebuild the code */
    int e_field = exp < min_exp ? 0 : exp + bias;
    uint32_t code;
    if (e_field == 0)
        code = q; /* subnormal, may carry into the first normal binade */
    else
        code = ((uint32_t)e_field << m) + (q - (1u << m));
    return code > max_code ? max_code : code;
}

static uint8_t encode(qs_dtype dt, float x)
{
    int e4 = dt == QS_E4M3;
    uint32_t max_code = e4 ? 0x7E : 0x7B;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    if ((bits & 0x7FFFFFFF) > 0x7F800000)
        return 0x7F; /* NaN: canonical, sign dropped */
    if ((bits & 0x7FFFFFFF) == 0x7F800000)
        return (uint8_t)(sign | max_code);
    float a = x < 0 ? -x : x;
    uint8_t code = (uint8_t)(sign | fp8_magnitude(a, e4 ? 4 : 5, e4 ? 3 : 2, max_code));
    return code;
}

static qs_status example_cast(void *state, const qs_cast_args *args)
{
    (void)state;
    if ((args->dtype != QS_E4M3 && args->dtype != QS_E5M2) || args->mode.round != QS_ROUND_RNE ||
        args->mode.overflow != QS_OVF_SATFINITE)
        return QS_ERR_UNSUPPORTED;
    for (size_t i = 0; i < args->n; i++)
        args->out[i] = encode(args->dtype, args->in[i]);
    return QS_OK;
}

/* Element i of a 2-D FP32, BF16 or FP16 host tensor as FP32. */
static float load(const qs_tensor *x, size_t i)
{
    uint32_t bits;
    float f;
    if (x->dtype == QS_FP32)
        return ((const float *)x->data)[i];
    uint16_t h = ((const uint16_t *)x->data)[i];
    if (x->dtype == QS_BF16) {
        bits = (uint32_t)h << 16;
    } else { /* FP16: rebuild the FP32 bits */
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
        if (e == 0x1F) {
            bits = sign | 0x7F800000u | (m << 13);
        } else if (e == 0) {
            f = (float)m * 0x1p-24f;
            return sign ? -f : f;
        } else {
            bits = sign | ((e + 112) << 23) | (m << 13);
        }
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The amax of x: the largest magnitude, NaN ignored [REC-AMAX]. */
static float tensor_amax(const qs_tensor *x)
{
    float amax = 0.0f;
    for (size_t i = 0; i < x->numel; i++) {
        float v = load(x, i);
        v = v < 0 ? -v : v;
        if (v > amax)
            amax = v;
    }
    return amax;
}

/* A tensorwise quantization with the scale given: scale_inv = 1 / scale, the codes of
 * x * scale (the columnwise copy is the transpose), amax reported. */
static qs_status quantize_tensorwise(const qs_quantize_args *a, float scale, float scale_inv,
                                     float amax)
{
    const qs_tensor *x = a->x;
    qs_quantized *z = a->out;
    int64_t rows = x->shape[0], cols = x->shape[1];
    for (int d = 0; d < 2; d++) {
        if (!z->data[d].data)
            continue;
        ((float *)z->scale[d].data)[0] = scale_inv;
        z->amax[d] = amax;
        z->global_enc[d] = scale;
        z->global_dec[d] = scale_inv;
    }
    for (int64_t m = 0; m < rows; m++)
        for (int64_t k = 0; k < cols; k++) {
            uint8_t code = encode(z->elem, load(x, (size_t)(m * cols + k)) * scale);
            if (z->data[0].data)
                ((uint8_t *)z->data[0].data)[m * cols + k] = code;
            if (z->data[1].data)
                ((uint8_t *)z->data[1].data)[k * rows + m] = code;
        }
    return QS_OK;
}

/* Current scaling as spec/recipes.md defines it: the scale fp8_max / amax (1 for 0, Inf or
 * NaN; FLT_MAX for an infinite quotient; optionally floored to a power of two). */
static qs_status quantize_current(const qs_quantize_args *a)
{
    float amax = tensor_amax(a->x);
    if (a->given_amax) /* the reduced amax of a distributed run */
        amax = a->given_amax[0];
    float floor_amax = amax < a->cfg->eps ? a->cfg->eps : amax; /* the reported amax is raw */
    float fmax = a->out->elem == QS_E4M3 ? 448.0f : 57344.0f, scale = 1.0f;
    if (floor_amax != 0.0f && floor_amax <= FLT_MAX) {
        scale = fmax / floor_amax;
        if (scale > FLT_MAX)
            scale = FLT_MAX;
        if (a->cfg->pow2) {
            uint32_t b;
            memcpy(&b, &scale, sizeof b);
            b &= 0xFF800000u;
            memcpy(&scale, &b, sizeof b);
        }
    }
    float scale_inv = 1.0f / scale;
#ifdef QS_EXAMPLE_PLANT_ERROR
    {
        uint32_t b;
        memcpy(&b, &scale_inv, sizeof b);
        b += 1; /* the planted error: one ulp */
        memcpy(&scale_inv, &b, sizeof b);
    }
#endif
    return quantize_tensorwise(a, scale, scale_inv, amax);
}

/* Delayed scaling [REC-DS-SCALE]: the kit keeps the history and hands over the scale of
 * this step (ds_scale); the quantizer uses it and reports the amax it saw. */
static qs_status quantize_delayed(const qs_quantize_args *a)
{
    return quantize_tensorwise(a, a->ds_scale, 1.0f / a->ds_scale, tensor_amax(a->x));
}

static qs_status example_quantize(void *state, const qs_quantize_args *args)
{
    (void)state;
    if (args->x->ndim != 2)
        return QS_ERR_UNSUPPORTED;
    if (args->cfg->kind == QS_RECIPE_CURRENT)
        return quantize_current(args);
    if (args->cfg->kind == QS_RECIPE_DELAYED)
        return quantize_delayed(args);
    return QS_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------------------ cast16 (spec/formats.md) */

/* 2^e as a double, for any e a float's exponent range needs. */
static double pow2d(int e)
{
    double p = 1.0;
    for (; e > 0; e--)
        p *= 2.0;
    for (; e < 0; e++)
        p *= 0.5;
    return p;
}

/* One FP32 value to the code of a 16-bit IEEE-style format with ebits exponent and mbits
 * fraction bits (BF16 8/7, FP16 5/10): the grid point lo below |x| and the fraction r of the
 * way to the next one, in exact double arithmetic [FMT-ROUND-*]; the code of the next grid
 * point is always the code of lo plus one. Overflow [FMT-OVF-*], Inf [FMT-INF] and NaN as
 * the policies say. */
static uint16_t encode16(float x, int ebits, int mbits, qs_round mode, qs_overflow ovf, uint32_t u)
{
    uint32_t xbits;
    memcpy(&xbits, &x, sizeof xbits);
    uint32_t sign = (xbits >> 31) ? 1u << (ebits + mbits) : 0u; /* NaN and -0 keep theirs */
    uint32_t inf = ((1u << ebits) - 1u) << mbits, maxc = inf - 1u;
    if (x != x) /* NaN: canonical without its sign, or quiet with it (mldtypes) */
        return (uint16_t)(ovf == QS_OVF_MLDTYPES ? sign | inf | (1u << (mbits - 1)) : 0x7FFFu);
    double a = x < 0.0f ? -(double)x : (double)x;
    if (a > (double)FLT_MAX)
        return (uint16_t)(sign | (ovf == QS_OVF_SATFINITE ? maxc : inf));
    int emin = 2 - (1 << (ebits - 1)); /* 1 - bias */
    int e = emin;
    while (a >= pow2d(e + 1))
        e++;
    double units = a / pow2d(e - mbits); /* exact: a power-of-two scaling */
    uint64_t lo = (uint64_t)units;
    double r = units - (double)lo; /* exact, in [0, 1) */
    int neg = sign != 0, up = 0;
    switch (mode) {
    case QS_ROUND_RNE:
        up = r > 0.5 || (r == 0.5 && (lo & 1u));
        break;
    case QS_ROUND_AWAY:
        up = r >= 0.5;
        break;
    case QS_ROUND_RU:
        up = r > 0.0 && !neg;
        break;
    case QS_ROUND_RD:
        up = r > 0.0 && neg;
        break;
    case QS_ROUND_SR: /* r + u 2^-32 >= 1, compared exactly */
        up = r > 0.0 && r >= (4294967296.0 - (double)u) / 4294967296.0;
        break;
    default: /* rz */
        break;
    }
    uint64_t code = ((uint64_t)(e - emin) << mbits) + lo + (uint64_t)up;
    int toward_zero = mode == QS_ROUND_RZ || (mode == QS_ROUND_RU && neg) ||
                      (mode == QS_ROUND_RD && !neg) || (mode == QS_ROUND_SR && !up);
    if (code > maxc) /* [FMT-OVF-DIRECTED] or the policy */
        code = toward_zero || ovf == QS_OVF_SATFINITE ? maxc : inf;
    return (uint16_t)(sign | (uint32_t)code);
}

/* The cast16 slot: BF16 and FP16 under every rounding mode and overflow policy, the
 * per-element random bits for stochastic rounding; other formats are refused. */
static qs_status example_cast16(void *state, const qs_cast16_args *args)
{
    (void)state;
    int ebits = args->dtype == QS_BF16 ? 8 : args->dtype == QS_FP16 ? 5 : 0;
    if (!ebits || (unsigned)args->round >= QS_ROUND_COUNT ||
        (unsigned)args->overflow >= QS_OVF_COUNT || (args->round == QS_ROUND_SR && !args->sr_bits))
        return QS_ERR_UNSUPPORTED;
    for (size_t i = 0; i < args->n; i++)
        args->out[i] = encode16(args->in[i], ebits, ebits == 8 ? 7 : 10, args->round,
                                args->overflow, args->round == QS_ROUND_SR ? args->sr_bits[i] : 0);
    return QS_OK;
}

/* ------------------------------------------------------------------ gemm (spec/gemm.md) */

/* 2^e as a float, for -126 <= e <= 127. */
static float pow2f(int e)
{
    uint32_t bits = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Element i of an operand's data tensor as its FP32 value: FP32, BF16, FP16 (load above)
 * or an E4M3 / E5M2 code. */
static float operand_value(const qs_tensor *t, size_t i)
{
    if (t->dtype != QS_E4M3 && t->dtype != QS_E5M2)
        return load(t, i);
    uint8_t c = ((const uint8_t *)t->data)[i];
    int e4 = t->dtype == QS_E4M3, mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
    int e = (c & 0x7F) >> mbits, m = c & ((1 << mbits) - 1);
    float v;
    if (e4 && e == 15 && m == 7)
        return 0.0f / 0.0f; /* the one E4M3 NaN */
    if (!e4 && e == 31)
        v = m ? 0.0f / 0.0f : 1.0f / 0.0f;
    else if (e == 0) /* subnormal: m * 2^(1 - bias - mbits) */
        v = (float)m * pow2f(1 - bias - mbits);
    else
        v = (float)((1 << mbits) + m) * pow2f(e - bias - mbits);
    return (c & 0x80) ? -v : v;
}

static int is_finite(float x)
{
    return x - x == 0.0f;
}

/* The exponent of x when |x| is a power of two in the normal range, else INT32_MIN. */
static int32_t pow2_exponent(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t e = (b >> 23) & 0xFF;
    if ((b & 0x7FFFFF) != 0 || e == 0 || e == 0xFF)
        return INT32_MIN;
    return (int32_t)e - 127;
}

/* The exact model's accumulator: a magnitude of EX_LIMBS 32-bit limbs, bit 0 weighing
 * 2^EX_BIAS. Each product of two FP32 values is exact in binary64, a 53-bit integer times
 * 2^e with e >= -298 - 52 = -350 (above EX_BIAS) and magnitude below 2^256; 2^20 of them
 * stay below 2^276, so 640 bits hold every sum. */
#define EX_LIMBS 20
#define EX_BIAS  (-352)

typedef struct ex_acc {
    uint32_t limb[EX_LIMBS];
} ex_acc;

static void ex_add_at(ex_acc *a, int word, uint64_t v)
{
    for (int w = word; v && w < EX_LIMBS; w++) {
        uint64_t s = (uint64_t)a->limb[w] + (v & 0xFFFFFFFFu);
        a->limb[w] = (uint32_t)s;
        v = (v >> 32) + (s >> 32);
    }
}

/* Adds |p| (a nonzero binary64 product of two finite floats: always normal) to a. */
static void ex_add_product(ex_acc *a, double p)
{
    uint64_t bits;
    memcpy(&bits, &p, sizeof bits);
    uint64_t m = (bits & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1) << 52);
    int off = (int)((bits >> 52) & 0x7FF) - 1075 - EX_BIAS; /* p = m * 2^(off + EX_BIAS) */
    int word = off / 32, sh = off % 32;
    ex_add_at(a, word, (m & 0xFFFFFFFFu) << sh);
    ex_add_at(a, word + 1, (m >> 32) << sh);
}

static int ex_cmp(const ex_acc *x, const ex_acc *y)
{
    for (int w = EX_LIMBS - 1; w >= 0; w--)
        if (x->limb[w] != y->limb[w])
            return x->limb[w] > y->limb[w] ? 1 : -1;
    return 0;
}

/* x -= y, for x >= y. */
static void ex_sub(ex_acc *x, const ex_acc *y)
{
    uint64_t borrow = 0;
    for (int w = 0; w < EX_LIMBS; w++) {
        uint64_t d = (uint64_t)x->limb[w] - y->limb[w] - borrow;
        x->limb[w] = (uint32_t)d;
        borrow = (d >> 32) & 1;
    }
}

static int ex_bit(const ex_acc *a, int i)
{
    return i >= 0 && i < 32 * EX_LIMBS && ((a->limb[i / 32] >> (i % 32)) & 1);
}

static int ex_top(const ex_acc *a)
{
    for (int i = 32 * EX_LIMBS - 1; i >= 0; i--)
        if (ex_bit(a, i))
            return i;
    return -1;
}

/* The magnitude a * 2^(EX_BIAS + shift), rounded once to nearest even to a binary format
 * with prec significant bits and binary32's exponent range (24: FP32, 8: BF16); overflow
 * gives Inf. */
static float ex_round(const ex_acc *a, int shift, int prec)
{
    int h = ex_top(a), lsb = EX_BIAS + shift;
    if (h < 0)
        return 0.0f;
    int x = h + lsb;                            /* exponent of the leading bit */
    int q = (x < -126 ? -126 : x) - (prec - 1); /* exponent of the result's last bit */
    int drop = q - lsb;                         /* bits of a below that last bit */
    uint64_t r = 0;
    for (int i = h; i >= (drop > 0 ? drop : 0); i--)
        r = (r << 1) | (uint64_t)ex_bit(a, i);
    if (drop < 0)
        r <<= -drop;
    if (drop > 0 && ex_bit(a, drop - 1)) {
        int sticky = 0;
        for (int i = drop - 2; i >= 0 && !sticky; i--)
            sticky = ex_bit(a, i);
        if (sticky || (r & 1))
            r++;
    }
    double v = (double)r; /* r * 2^q, exact in binary64 */
    for (int e = q; e > 0; e--)
        v *= 2.0;
    for (int e = q; e < 0; e++)
        v *= 0.5;
    return v > FLT_MAX ? 1.0f / 0.0f : (float)v;
}

/* [GEMM-ACC-EXACT]: one element, rounded once to the output (prec bits). The scale
 * factors are powers of two (checked by the caller), an exponent shift. */
static float gemm_exact_element(const float *a, const float *b, int64_t k, int shift, int neg,
                                int prec)
{
    ex_acc pos, negs;
    memset(&pos, 0, sizeof pos);
    memset(&negs, 0, sizeof negs);
    for (int64_t i = 0; i < k; i++) {
        double p = (double)a[i] * (double)b[i];
        if (p > 0)
            ex_add_product(&pos, p);
        else if (p < 0)
            ex_add_product(&negs, -p);
    }
    int c = ex_cmp(&pos, &negs);
    if (c == 0)
        return 0.0f; /* an exact zero is +0 */
    if (c > 0) {
        ex_sub(&pos, &negs);
        float v = ex_round(&pos, shift, prec);
        return neg ? -v : v;
    }
    ex_sub(&negs, &pos);
    float v = ex_round(&negs, shift, prec);
    return neg ? v : -v;
}

/* [GEMM-ACC-FP32SEQ] with tensor scaling: FP32 products added in increasing k from +0,
 * then the epilogue z = fl(t * acc), t = fl(alpha * fl(ta * tb)). The volatile temporaries
 * keep a compiler from fusing a product and a sum into one FMA (one rounding, not two). */
static float gemm_fp32_element(const float *a, const float *b, int64_t k, float t)
{
    volatile float acc = 0.0f;
    for (int64_t i = 0; i < k; i++) {
        volatile float p = a[i] * b[i];
        acc = acc + p;
    }
    volatile float z = t * acc;
    return z;
}

/* [GEMM-ACC-HOPPER-ALIGN] e(x) = max(floor(log2 |x|), emin) for a nonzero x. */
static int clamped_exponent(float x, int emin)
{
    int e;
    frexp((double)x, &e); /* |x| = f 2^e, f in [0.5, 1) */
    return e - 1 < emin ? emin : e - 1;
}

/* One 32-wide step of the Hopper model [GEMM-ACC-HOPPER]: the products of a[0..n) and
 * b[0..n) and the partial c, each truncated toward zero to a multiple of 2^(E-13), are
 * added as integers (FP8 products and c stay below 2^(E+2), so 33 of them below 2^22
 * units), and the sum is truncated toward zero to 14 significant bits. */
static double hopper_step(const float *a, const float *b, int n, double c, int emin_a, int emin_b)
{
    int E = INT32_MIN;
    for (int i = 0; i < n; i++)
        if (a[i] != 0.0f && b[i] != 0.0f) {
            int e = clamped_exponent(a[i], emin_a) + clamped_exponent(b[i], emin_b);
            E = e > E ? e : E;
        }
    if (c != 0.0) {
        int ec;
        frexp(c, &ec);
        E = ec - 1 > E ? ec - 1 : E;
    }
    if (E == INT32_MIN)
        return 0.0; /* every product and c are zero */
    double unit = ldexp(1.0, E - 13);
    int64_t sum = (int64_t)trunc(c / unit);
    for (int i = 0; i < n; i++)
        sum += (int64_t)trunc((double)a[i] * (double)b[i] / unit); /* exact: a power of 2 */
    if (sum == 0)
        return 0.0;
    uint64_t mag = sum < 0 ? (uint64_t)-sum : (uint64_t)sum;
    int shift = 0;
    while ((mag >> shift) >= (UINT64_C(1) << 14))
        shift++;
    double v = ldexp((double)(mag >> shift), E - 13 + shift);
    return sum < 0 ? -v : v;
}

/* [GEMM-ACC-HOPPER] [GEMM-ACC-PROMOTE] [GEMM-HOPPER-EPILOGUE] one element on tensor-scaled
 * FP8 operands: segments of promote values (all of k for 0) summed in 32-wide steps, each
 * segment's partial added into the FP32 accumulator with one rounding (the FP64 sum of two
 * floats rounded to FP32 is correctly rounded), then z = fl(fl(t * acc) + (+0)). */
static float gemm_hopper_element(const float *a, const float *b, int64_t k, int64_t promote,
                                 int emin_a, int emin_b, float t)
{
    int64_t seg = promote > 0 ? promote : (k > 0 ? k : 1);
    float acc = 0.0f;
    for (int64_t s0 = 0; s0 < k; s0 += seg) {
        int64_t s1 = s0 + seg < k ? s0 + seg : k;
        double c = 0.0;
        for (int64_t k0 = s0; k0 < s1; k0 += 32)
            c = hopper_step(a + k0, b + k0, (int)(s1 - k0 < 32 ? s1 - k0 : 32), c, emin_a, emin_b);
        acc = (float)((double)acc + c);
    }
    volatile float z = t * acc;
    volatile float zp = z + 0.0f;
    return zp;
}

/* Decoded rows x k values of an operand, or NULL when out of memory. */
static float *operand_values(const qs_gemm_coded_operand *o, int64_t rows, int64_t k)
{
    size_t n = (size_t)(rows * k);
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = operand_value(o->data, i);
    return v;
}

static qs_status example_gemm(void *state, qs_gemm_args *g)
{
    (void)state;
    int exact = g->acc.kind == QS_GEMM_ACC_EXACT;
    int hopper = g->acc.kind == QS_GEMM_ACC_HOPPER_FP8_TC;
    int fp8 = (g->a.data->dtype == QS_E4M3 || g->a.data->dtype == QS_E5M2) &&
              (g->b.data->dtype == QS_E4M3 || g->b.data->dtype == QS_E5M2);
    if ((!exact && !hopper && g->acc.kind != QS_GEMM_ACC_FP32_SEQ) ||
        (g->acc.promote_every != 0 && !hopper) || (hopper && !fp8) ||
        (g->out_dtype != QS_FP32 && g->out_dtype != QS_BF16) || g->beta != 0.0f ||
        g->a.scaling > QS_GEMM_SCALE_TENSOR || g->b.scaling > QS_GEMM_SCALE_TENSOR) {
        snprintf(g->why, g->why_len,
                 "the example computes exact and fp32_seq GEMMs, and hopper_fp8_tc on FP8 "
                 "codes, on tensor-scaled operands, FP32 or BF16 out, beta 0");
        return QS_ERR_UNSUPPORTED;
    }
    int emin_a = g->a.data->dtype == QS_E4M3 ? -6 : -14;
    int emin_b = g->b.data->dtype == QS_E4M3 ? -6 : -14;
    float ta = g->a.scaling == QS_GEMM_SCALE_TENSOR ? g->a.tensor_scale : 1.0f;
    float tb = g->b.scaling == QS_GEMM_SCALE_TENSOR ? g->b.tensor_scale : 1.0f;
    int32_t ea = pow2_exponent(g->alpha), eta = pow2_exponent(ta), etb = pow2_exponent(tb);
    if (exact && (ea == INT32_MIN || eta == INT32_MIN || etb == INT32_MIN)) {
        snprintf(g->why, g->why_len, "the example's exact model needs power-of-two scales");
        return QS_ERR_UNSUPPORTED;
    }
    float *a = operand_values(&g->a, g->m, g->k), *b = operand_values(&g->b, g->n, g->k);
    qs_status st = a && b ? QS_OK : QS_ERR_NOMEM;
    for (size_t i = 0; st == QS_OK && i < (size_t)(g->m * g->k); i++)
        if (!is_finite(a[i]))
            st = QS_ERR_UNSUPPORTED;
    for (size_t i = 0; st == QS_OK && i < (size_t)(g->n * g->k); i++)
        if (!is_finite(b[i]))
            st = QS_ERR_UNSUPPORTED;
    if (st == QS_ERR_UNSUPPORTED)
        snprintf(g->why, g->why_len, "the example takes finite operands only");
    int64_t k = g->k;
#ifdef QS_EXAMPLE_PLANT_GEMM_ERROR
    if (k > 0)
        k--; /* the planted error: the last k is left out of every sum */
#endif
    volatile float tt = ta * tb;
    float t = g->alpha * tt;
    /* the exponents are INT32_MIN for scales that are not powers of two: exact only */
    int shift = exact ? ea + eta + etb : 0, neg = (g->alpha < 0) ^ (ta < 0) ^ (tb < 0);
    for (int64_t m = 0; st == QS_OK && m < g->m; m++)
        for (int64_t n = 0; n < g->n; n++) {
            const float *ar = a + m * g->k, *br = b + n * g->k;
            float z =
                exact ? gemm_exact_element(ar, br, k, shift, neg, g->out_dtype == QS_BF16 ? 8 : 24)
                : hopper ? gemm_hopper_element(ar, br, k, g->acc.promote_every, emin_a, emin_b, t)
                         : gemm_fp32_element(ar, br, k, t);
            size_t at = (size_t)(m * g->n + n);
            uint32_t bits;
            memcpy(&bits, &z, sizeof bits);
            if (z != z) { /* an FP32 overflow met its opposite: the model's NaN */
                bits = hopper ? 0x7FFFFFFFu : 0x7FC00000u;
                memcpy(&z, &bits, sizeof z);
            }
            if (g->out_dtype == QS_FP32) {
                ((float *)g->y->data)[at] = z;
            } else if (exact) { /* already a BF16 value */
                ((uint16_t *)g->y->data)[at] = (uint16_t)(bits >> 16);
            } else { /* FP32 to BF16, round to nearest even */
                bits += 0x7FFFu + ((bits >> 16) & 1u);
                ((uint16_t *)g->y->data)[at] = (uint16_t)(bits >> 16);
            }
        }
    free(a);
    free(b);
    if (st == QS_OK)
        g->claim = QS_GEMM_CLAIM_MODEL; /* each model, bit for bit */
    return st;
}

/* ------------------------------------------------------------------ distributed runs */

/* This process's rank: the directory the ranks share, and the reductions run so far. */
static struct {
    char dir[512];
    int nranks, rank;
    long seq;
} ex_dist;

static void ex_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static qs_status example_dist_id(void *state, void *id, size_t cap, size_t *len, char *why,
                                 size_t why_len)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/qspec-example.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || strlen(dir) + 1 > cap) {
        snprintf(why, why_len, "cannot create the directory of the ranks");
        return QS_ERR_IO;
    }
    memcpy(id, dir, strlen(dir) + 1);
    *len = strlen(dir) + 1;
    return QS_OK;
}

static qs_status example_dist_join(void *state, int nranks, int rank, const void *id, size_t len,
                                   char *why, size_t why_len)
{
    (void)state;
    if (nranks < 1 || rank < 0 || rank >= nranks || len == 0 || len > sizeof ex_dist.dir ||
        ((const char *)id)[len - 1] != '\0') {
        snprintf(why, why_len, "bad rank or id");
        return QS_ERR_INVALID_ARG;
    }
    memcpy(ex_dist.dir, id, len);
    ex_dist.nranks = nranks;
    ex_dist.rank = rank;
    ex_dist.seq = 0;
    return QS_OK;
}

/* [DIST-REDUCE-MAX]: each rank writes its values to a file of its own (whole, then renamed),
 * waits for every rank's file of this reduction, and takes the unsigned maximum of the bit
 * patterns in rank order. */
static qs_status example_allreduce(void *state, int64_t n, float *amax, char *why, size_t why_len)
{
    (void)state;
    if (ex_dist.nranks == 0 || n < 1) {
        snprintf(why, why_len, "not joined");
        return QS_ERR_STATE;
    }
    long seq = ex_dist.seq++;
    if (ex_dist.nranks == 1)
        return QS_OK;
    char path[600], part[608];
    snprintf(path, sizeof path, "%s/ar%ld.r%d", ex_dist.dir, seq, ex_dist.rank);
    snprintf(part, sizeof part, "%s.part", path);
    FILE *f = fopen(part, "wb");
    int ok = f && fwrite(amax, sizeof *amax, (size_t)n, f) == (size_t)n;
    if (f)
        ok = fclose(f) == 0 && ok;
    if (!ok || rename(part, path) != 0) {
        snprintf(why, why_len, "cannot write %s", path);
        return QS_ERR_IO;
    }
    uint32_t *acc = calloc((size_t)n, sizeof *acc), *v = calloc((size_t)n, sizeof *v);
    qs_status st = acc && v ? QS_OK : QS_ERR_NOMEM;
    for (int r = 0; r < ex_dist.nranks && st == QS_OK; r++) {
        snprintf(path, sizeof path, "%s/ar%ld.r%d", ex_dist.dir, seq, r);
        for (int waited = 0; !(f = fopen(path, "rb")) && waited < 120000; waited++)
            ex_sleep_ms(1);
        if (!f || fread(v, sizeof *v, (size_t)n, f) != (size_t)n) {
            snprintf(why, why_len, "no values from rank %d for reduction %ld", r, seq);
            st = QS_ERR_IO;
        }
        if (f)
            fclose(f);
        for (int64_t i = 0; st == QS_OK && i < n; i++)
            acc[i] = v[i] > acc[i] ? v[i] : acc[i];
    }
    if (st == QS_OK)
        memcpy(amax, acc, (size_t)n * sizeof *acc);
    free(acc);
    free(v);
    return st;
}

/* ------------------------------------------------------- sdpa (spec/attention.md) */

/* x rounded to nearest-even in dt (FP32 values pass through) [ATTN-DTYPE]. */
static float round_dt(qs_dtype dt, float x)
{
    if (dt != QS_BF16 && dt != QS_FP16)
        return x;
    int eb = dt == QS_BF16 ? 8 : 5, mb = dt == QS_BF16 ? 7 : 10;
    uint16_t c = encode16(x, eb, mb, QS_ROUND_RNE, QS_OVF_NOSAT, 0);
    uint32_t e = (c >> mb) & ((1u << eb) - 1u), f = c & ((1u << mb) - 1u);
    int emin = 2 - (1 << (eb - 1));
    double v = e == 0                 ? (double)f * pow2d(emin - mb)
               : e == (1u << eb) - 1u ? HUGE_VAL
                                      : (double)((1u << mb) + f) * pow2d((int)e - 1 + emin - mb);
    return (float)((c >> (eb + mb)) ? -v : v);
}

/* Where token i of sequence s lies in a layout's arrays, and the sequence's length. */
static int64_t sdpa_token(const qs_sdpa_params *p, int kv, int64_t s, int64_t i)
{
    const int32_t *cu = kv ? p->cu_seqlens_kv : p->cu_seqlens_q;
    int64_t len = kv ? p->sk : p->sq;
    if (p->layout == QS_ATTN_THD)
        return cu[s] + i;
    return p->layout == QS_ATTN_SBHD ? i * p->b + s : s * len + i;
}

static int64_t sdpa_len(const qs_sdpa_params *p, int kv, int64_t s)
{
    const int32_t *cu = kv ? p->cu_seqlens_kv : p->cu_seqlens_q;
    if (p->layout == QS_ATTN_THD)
        return cu[s + 1] - cu[s];
    return kv ? p->sk : p->sq;
}

/* Row (s, h, i)'s probabilities into P[0..n) (n keys attended), in the reference's order
 * [ATTN-SCORE] [ATTN-SOFTMAX-ORDER]; returns n and writes the lse. */
static int64_t sdpa_row(const qs_sdpa_args *a, int64_t s, int64_t h, int64_t i, float *P,
                        float *lse)
{
    const qs_sdpa_params *p = &a->p;
    int64_t lk = sdpa_len(p, 1, s), hk = h / (p->h / p->hkv);
    int64_t n = p->mask == QS_ATTN_MASK_CAUSAL && i + 1 < lk ? i + 1 : lk;
    const float *q = a->q + (sdpa_token(p, 0, s, i) * p->h + h) * p->d;
    float m = -HUGE_VALF, l = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float *k = a->k + (sdpa_token(p, 1, s, j) * p->hkv + hk) * p->d;
        float dot = 0.0f;
        for (int64_t c = 0; c < p->d; c++)
            dot += q[c] * k[c];
        P[j] = p->scale * dot;
        m = P[j] > m ? P[j] : m;
    }
    for (int64_t j = 0; j < n; j++) {
        P[j] = expf(P[j] - m);
        l += P[j];
    }
    for (int64_t j = 0; j < n; j++)
        P[j] = P[j] / l;
    *lse = n ? m + logf(l) : -HUGE_VALF;
    return n;
}

/* The token count of q (kv = 0) or k and v (kv = 1) in their arrays. */
static int64_t sdpa_tokens(const qs_sdpa_params *p, int kv)
{
    int64_t len = kv ? p->sk : p->sq;
    return p->layout == QS_ATTN_THD ? len : p->b * len;
}

static qs_status sdpa_refuse(const qs_sdpa_args *a)
{
    const qs_sdpa_params *p = &a->p;
    const char *why = p->cu_seqlens_q_padded || p->cu_seqlens_kv_padded
                          ? "the example has no padded thd"
                      : p->hkv < 1 || p->h % p->hkv ? "h must be a multiple of hkv"
                                                    : NULL;
    if (why && a->why && a->why_len)
        snprintf(a->why, a->why_len, "%s", why);
    return why ? QS_ERR_UNSUPPORTED : QS_OK;
}

/* The sdpa_fwd slot: the reference's loops, with libm's expf and logf. */
static qs_status example_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    const qs_sdpa_params *p = &a->p;
    qs_status st = sdpa_refuse(a);
    float *P = st == QS_OK ? malloc((size_t)(p->sk + 1) * sizeof *P) : NULL;
    if (st == QS_OK && !P)
        st = QS_ERR_NOMEM;
    if (st != QS_OK)
        return st;
    int64_t hk_per = p->h / p->hkv;
    memset(a->o, 0, (size_t)(sdpa_tokens(p, 0) * p->h * p->dv) * sizeof *a->o);
    if (a->lse)
        for (int64_t t = 0; t < sdpa_tokens(p, 0) * p->h; t++)
            a->lse[t] = -HUGE_VALF;
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t h = 0; h < p->h; h++)
            for (int64_t i = 0; i < sdpa_len(p, 0, s); i++) {
                int64_t row = sdpa_token(p, 0, s, i) * p->h + h;
                float lse;
                int64_t n = sdpa_row(a, s, h, i, P, &lse);
                for (int64_t c = 0; c < p->dv; c++) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < n; j++)
                        acc +=
                            P[j] * a->v[(sdpa_token(p, 1, s, j) * p->hkv + h / hk_per) * p->dv + c];
                    a->o[row * p->dv + c] = round_dt(p->dtype, acc);
                }
                if (a->lse)
                    a->lse[row] = lse;
            }
    free(P);
    a->claim = QS_ATTN_CLAIM_TOLERANCE; /* libm's exp and log, not the reference's */
    return QS_OK;
}

/* The sdpa_bwd slot [ATTN-BWD] [ATTN-BWD-ORDER]: FP32 sums kept per element, rounded last. */
static qs_status example_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    const qs_sdpa_params *p = &a->p;
    qs_status st = sdpa_refuse(a);
    if (st != QS_OK)
        return st;
    size_t nq = (size_t)(sdpa_tokens(p, 0) * p->h * p->d),
           nk = (size_t)(sdpa_tokens(p, 1) * p->hkv * p->d),
           nv = (size_t)(sdpa_tokens(p, 1) * p->hkv * p->dv);
    float *P = malloc((size_t)(p->sk + 1) * sizeof *P),
          *dS = malloc((size_t)(p->sk + 1) * sizeof *dS);
    float *gk = calloc(nk + 1, sizeof *gk), *gv = calloc(nv + 1, sizeof *gv);
    if (!P || !dS || !gk || !gv) {
        free(P), free(dS), free(gk), free(gv);
        return QS_ERR_NOMEM;
    }
    memset(a->dq, 0, nq * sizeof *a->dq);
    int64_t G = p->h / p->hkv;
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t hk = 0; hk < p->hkv; hk++)
            for (int64_t h = hk * G; h < hk * G + G; h++)
                for (int64_t i = 0; i < sdpa_len(p, 0, s); i++) {
                    int64_t row = sdpa_token(p, 0, s, i) * p->h + h;
                    const float *o = a->o + row * p->dv, *dout = a->dout + row * p->dv;
                    const float *q = a->q + row * p->d;
                    float lse, D = 0.0f;
                    int64_t n = sdpa_row(a, s, h, i, P, &lse);
                    for (int64_t c = 0; c < p->dv; c++)
                        D += dout[c] * o[c];
                    for (int64_t j = 0; j < n; j++) {
                        int64_t kr = sdpa_token(p, 1, s, j) * p->hkv + hk;
                        float dP = 0.0f;
                        for (int64_t c = 0; c < p->dv; c++)
                            dP += dout[c] * a->v[kr * p->dv + c];
                        dS[j] = P[j] * (dP - D);
                        for (int64_t c = 0; c < p->d; c++)
                            gk[kr * p->d + c] += dS[j] * q[c];
                        for (int64_t c = 0; c < p->dv; c++)
                            gv[kr * p->dv + c] += P[j] * dout[c];
                    }
                    for (int64_t c = 0; c < p->d; c++) {
                        float acc = 0.0f;
                        for (int64_t j = 0; j < n; j++)
                            acc += dS[j] * a->k[(sdpa_token(p, 1, s, j) * p->hkv + hk) * p->d + c];
                        a->dq[row * p->d + c] = round_dt(p->dtype, p->scale * acc);
                    }
                }
    for (size_t e = 0; e < nk; e++)
        a->dk[e] = round_dt(p->dtype, p->scale * gk[e]);
    for (size_t e = 0; e < nv; e++)
        a->dv[e] = round_dt(p->dtype, gv[e]);
    free(P), free(dS), free(gk), free(gv);
    a->claim = QS_ATTN_CLAIM_TOLERANCE;
    return QS_OK;
}

/* ------------------------------------------------------- gdn (spec/attention.md) */

/* Sequence n's first token row and its length [GDN-SHAPES] [GDN-VARLEN]. */
static int64_t gdn_seq(const qs_gdn_params *p, int64_t n, int64_t *first)
{
    if (p->cu_seqlens) {
        *first = p->cu_seqlens[n];
        return p->cu_seqlens[n + 1] - p->cu_seqlens[n];
    }
    *first = n * p->t;
    return p->t;
}

static int64_t gdn_rows(const qs_gdn_params *p)
{
    return p->cu_seqlens ? p->cu_seqlens[p->b] : p->b * p->t;
}

/* [GDN-L2NORM] the q or k head vectors x (rows * h of dk values) as the recurrence reads
 * them, rounded to dt, and each vector's norm r (1 without the flag). */
static void gdn_normalize(const qs_gdn_params *p, const float *x, int64_t nvec, float *xn, float *r)
{
    for (int64_t v = 0; v < nvec; v++) {
        const float *xv = x + v * p->dk;
        float ss = 0.0f;
        for (int64_t d = 0; d < p->dk; d++)
            ss += xv[d] * xv[d];
        r[v] = p->use_qk_l2norm ? sqrtf(ss + 1e-6f) : 1.0f;
        for (int64_t d = 0; d < p->dk; d++)
            xn[v * p->dk + d] = p->use_qk_l2norm ? round_dt(p->dtype, xv[d] / r[v]) : xv[d];
    }
}

/* One token of [GDN-RECURRENCE] on the state S [dk, dv]: decay, delta, rank-1 update;
 * u gets the delta, o (when not NULL) the output row before its rounding. */
static void gdn_token(const qs_gdn_params *p, float *S, const float *k, const float *v, float g,
                      float beta, float *u, const float *q, float scale, float *o)
{
    float a = expf(g);
    for (int64_t e = 0; e < p->dk * p->dv; e++)
        S[e] *= a;
    for (int64_t c = 0; c < p->dv; c++) {
        float pred = 0.0f;
        for (int64_t r = 0; r < p->dk; r++)
            pred += S[r * p->dv + c] * k[r];
        u[c] = beta * (v[c] - pred);
    }
    for (int64_t r = 0; r < p->dk; r++)
        for (int64_t c = 0; c < p->dv; c++)
            S[r * p->dv + c] += k[r] * u[c];
    for (int64_t c = 0; o && c < p->dv; c++) {
        float acc = 0.0f;
        for (int64_t r = 0; r < p->dk; r++)
            acc += S[r * p->dv + c] * (scale * q[r]);
        o[c] = acc;
    }
}

/* The normalized q and k of a call and their norms (NULL when out of memory). */
typedef struct gdn_qk {
    float *q, *k, *rq, *rk;
} gdn_qk;

static void gdn_qk_free(gdn_qk *n)
{
    free(n->q), free(n->k), free(n->rq), free(n->rk);
}

static int gdn_qk_make(const qs_gdn_args *a, gdn_qk *n)
{
    const qs_gdn_params *p = &a->p;
    int64_t nvec = gdn_rows(p) * p->h;
    n->q = malloc((size_t)(nvec * p->dk + 1) * sizeof(float));
    n->k = malloc((size_t)(nvec * p->dk + 1) * sizeof(float));
    n->rq = malloc((size_t)(nvec + 1) * sizeof(float));
    n->rk = malloc((size_t)(nvec + 1) * sizeof(float));
    if (!n->q || !n->k || !n->rq || !n->rk) {
        gdn_qk_free(n);
        return 0;
    }
    gdn_normalize(p, a->q, nvec, n->q, n->rq);
    gdn_normalize(p, a->k, nvec, n->k, n->rk);
    return 1;
}

/* The gdn_fwd slot: the token recurrence with libm's expf and sqrtf. */
static qs_status example_gdn_fwd(void *state, qs_gdn_args *a)
{
    (void)state;
    const qs_gdn_params *p = &a->p;
    int64_t G = p->hv / p->h, sz = p->dk * p->dv;
    gdn_qk n = {0};
    float *S = malloc((size_t)(sz + p->dv + 1) * sizeof *S), *u = S ? S + sz : NULL;
    float *o = malloc((size_t)(p->dv + 1) * sizeof *o);
    if (!S || !o || !gdn_qk_make(a, &n)) {
        free(S), free(o);
        return QS_ERR_NOMEM;
    }
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            int64_t first, len = gdn_seq(p, s, &first), hq = hv / G;
            for (int64_t e = 0; e < sz; e++)
                S[e] = a->h0 ? a->h0[(s * p->hv + hv) * sz + e] : 0.0f;
            for (int64_t i = 0; i < len; i++) {
                int64_t row = first + i, at = row * p->hv + hv;
                gdn_token(p, S, n.k + (row * p->h + hq) * p->dk, a->v + at * p->dv, a->g[at],
                          a->beta[at], u, n.q + (row * p->h + hq) * p->dk, p->scale, o);
                for (int64_t c = 0; c < p->dv; c++)
                    a->o[at * p->dv + c] = round_dt(p->dtype, o[c]);
            }
            for (int64_t e = 0; a->ht && e < sz; e++)
                a->ht[(s * p->hv + hv) * sz + e] = S[e];
        }
    gdn_qk_free(&n);
    free(S), free(o);
    a->claim = QS_ATTN_CLAIM_TOLERANCE; /* libm's exp and sqrt, not the reference's */
    return QS_OK;
}

/* [GDN-L2NORM]'s backward of one vector, in place on the gradient dy of its normalized
 * form: dx = (dy - y c) / r, y = x / r, c = sum y dy; then rounded to dt. */
static void gdn_unnormalize(const qs_gdn_params *p, const float *x, float r, float *dy)
{
    float c = 0.0f;
    for (int64_t d = 0; p->use_qk_l2norm && d < p->dk; d++)
        c += (x[d] / r) * dy[d];
    for (int64_t d = 0; d < p->dk; d++)
        dy[d] = round_dt(p->dtype, p->use_qk_l2norm ? (dy[d] - (x[d] / r) * c) / r : dy[d]);
}

/* One (sequence, value head) of [GDN-BWD]: the forward again, keeping the state before
 * every token in H (len + 1 states), then the tokens in decreasing order. */
static void gdn_bwd_head(const qs_gdn_args *a, const gdn_qk *n, int64_t s, int64_t hv, float *H,
                         float *w, float *dq, float *dk)
{
    const qs_gdn_params *p = &a->p;
    int64_t sz = p->dk * p->dv, first, len = gdn_seq(p, s, &first), hq = hv / (p->hv / p->h);
    float *dH = w, *hp = w + sz, *u = hp + sz, *rv = u + p->dv, *du = rv + p->dv;
    for (int64_t e = 0; e < sz; e++) {
        H[e] = a->h0 ? a->h0[(s * p->hv + hv) * sz + e] : 0.0f;
        dH[e] = a->dht ? a->dht[(s * p->hv + hv) * sz + e] : 0.0f;
    }
    for (int64_t i = 0; i < len; i++) {
        int64_t row = first + i, at = row * p->hv + hv;
        memcpy(H + (i + 1) * sz, H + i * sz, (size_t)sz * sizeof *H);
        gdn_token(p, H + (i + 1) * sz, n->k + (row * p->h + hq) * p->dk, a->v + at * p->dv,
                  a->g[at], a->beta[at], u, NULL, 0.0f, NULL);
    }
    for (int64_t i = len - 1; i >= 0; i--) {
        int64_t row = first + i, at = row * p->hv + hv, qk = (row * p->h + hq) * p->dk;
        const float *kr = n->k + qk, *qr = n->q + qk, *h = H + (i + 1) * sz;
        const float *dout = a->dout + at * p->dv, *vr = a->v + at * p->dv;
        float ga = expf(a->g[at]), beta = a->beta[at], dbeta = 0.0f, dg = 0.0f;
        for (int64_t e = 0; e < sz; e++)
            hp[e] = H[i * sz + e] * ga;
        for (int64_t c = 0; c < p->dv; c++) {
            float pred = 0.0f;
            for (int64_t r = 0; r < p->dk; r++)
                pred += hp[r * p->dv + c] * kr[r];
            rv[c] = vr[c] - pred;
            u[c] = beta * rv[c];
        }
        for (int64_t r = 0; r < p->dk; r++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < p->dv; c++) {
                acc += h[r * p->dv + c] * dout[c];
                dH[r * p->dv + c] += (p->scale * qr[r]) * dout[c];
            }
            dq[qk + r] += p->scale * acc;
        }
        for (int64_t c = 0; c < p->dv; c++) {
            du[c] = 0.0f;
            for (int64_t r = 0; r < p->dk; r++)
                du[c] += dH[r * p->dv + c] * kr[r];
            dbeta += du[c] * rv[c];
            a->dv[at * p->dv + c] = round_dt(p->dtype, beta * du[c]);
        }
        for (int64_t r = 0; r < p->dk; r++) {
            float x1 = 0.0f, x2 = 0.0f;
            for (int64_t c = 0; c < p->dv; c++) {
                x1 += dH[r * p->dv + c] * u[c];
                x2 += hp[r * p->dv + c] * -(beta * du[c]);
            }
            dk[qk + r] += x1 + x2;
        }
        for (int64_t r = 0; r < p->dk; r++)
            for (int64_t c = 0; c < p->dv; c++) {
                float d = dH[r * p->dv + c] + kr[r] * -(beta * du[c]);
                dg += d * hp[r * p->dv + c];
                dH[r * p->dv + c] = ga * d;
            }
        a->dbeta[at] = dbeta;
        a->dg[at] = dg;
    }
    for (int64_t e = 0; a->dh0 && e < sz; e++)
        a->dh0[(s * p->hv + hv) * sz + e] = dH[e];
}

/* The gdn_bwd slot [GDN-BWD]: per (sequence, value head), the states kept for every token
 * (the example's inputs are small), dq and dk summed over the value heads, then the
 * l2norm backward. */
static qs_status example_gdn_bwd(void *state, qs_gdn_args *a)
{
    (void)state;
    const qs_gdn_params *p = &a->p;
    int64_t sz = p->dk * p->dv, nqk = gdn_rows(p) * p->h * p->dk, longest = 0;
    for (int64_t s = 0; s < p->b; s++) {
        int64_t first, len = gdn_seq(p, s, &first);
        longest = len > longest ? len : longest;
    }
    gdn_qk n = {0};
    float *H = malloc((size_t)((longest + 1) * sz) * sizeof *H);
    float *w = malloc((size_t)(2 * sz + 3 * p->dv) * sizeof *w);
    float *dq = calloc((size_t)nqk + 1, sizeof *dq), *dk = calloc((size_t)nqk + 1, sizeof *dk);
    if (!H || !w || !dq || !dk || !gdn_qk_make(a, &n)) {
        free(H), free(w), free(dq), free(dk);
        return QS_ERR_NOMEM;
    }
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t hv = 0; hv < p->hv; hv++)
            gdn_bwd_head(a, &n, s, hv, H, w, dq, dk);
    for (int64_t v = 0; v < nqk / p->dk; v++) {
        gdn_unnormalize(p, a->q + v * p->dk, n.rq[v], dq + v * p->dk);
        gdn_unnormalize(p, a->k + v * p->dk, n.rk[v], dk + v * p->dk);
    }
    memcpy(a->dq, dq, (size_t)nqk * sizeof *dq);
    memcpy(a->dk, dk, (size_t)nqk * sizeof *dk);
    gdn_qk_free(&n);
    free(H), free(w), free(dq), free(dk);
    a->claim = QS_ATTN_CLAIM_TOLERANCE;
    return QS_OK;
}

static qs_status example_open(void **state, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    *state = NULL;
    return QS_OK;
}

static void example_close(void *state)
{
    (void)state;
    if (ex_dist.nranks == 1 && ex_dist.rank == 0)
        rmdir(ex_dist.dir); /* empty: one rank writes no files */
}

static const char *example_device(void *state)
{
    (void)state;
    return "host CPU (example plugin)";
}

static const qs_backend example_table = {
    .abi_version = QS_BACKEND_ABI_VERSION,
    .struct_size = sizeof(qs_backend),
    .name = "example",
    .version = "1.0",
    .caps = QS_CAP_CAST | QS_CAP_QUANT_CURRENT | QS_CAP_QUANT_DELAYED | QS_CAP_GEMM_TENSOR |
            QS_CAP_DIST | QS_CAP_CAST16 | QS_CAP_SDPA | QS_CAP_GDN,
    .open = example_open,
    .close = example_close,
    .device = example_device,
    .cast = example_cast,
    .quantize = example_quantize,
    .gemm = example_gemm,
    .dist_id = example_dist_id,
    .dist_join = example_dist_join,
    .allreduce_amax = example_allreduce,
    .cast16 = example_cast16,
    .sdpa_fwd = example_sdpa_fwd,
    .sdpa_bwd = example_sdpa_bwd,
    .gdn_fwd = example_gdn_fwd,
    .gdn_bwd = example_gdn_bwd,
};

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    return abi_version == QS_BACKEND_ABI_VERSION ? &example_table : NULL;
}
