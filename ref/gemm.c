/* gemm.c: the reference TN GEMM of spec/gemm.md.
 * One output element at a time: the scale groups along k of the operands' scaling mode
 * [GEMM-SCALE-*], one accumulation model chosen by name from models[] [GEMM-ACC-*], the
 * FP32 epilogue [GEMM-ALPHA-BETA] and the output rounding [GEMM-OUT-ROUND]. The exact
 * model and the fused promotion use a wide fixed-point accumulator (qsi_xacc) whose width
 * is proved in spec/gemm.md [GEMM-ACC-EXACT-WIDTH]; gemm_bound is [GEMM-BOUND]. */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "qspec/gemm.h"

/* ------------------------------------------------------------ scaling modes table */

/* Per scaling mode: its family (A and B must agree), the scale-group width along k
 * (0: the whole k) and the rows one block scale covers (0: no block scales). */
static const struct {
    qs_gemm_scaling mode;
    const char *name;
    int family;
    int64_t group_k;
    int64_t group_rows;
} scalings[] = {
    {QS_GEMM_SCALE_NONE, "none", 0, 0, 0},
    {QS_GEMM_SCALE_TENSOR, "tensor", 0, 0, 0},
    {QS_GEMM_SCALE_BLOCK_1X128, "block_1x128", 1, 128, 1},
    {QS_GEMM_SCALE_BLOCK_128X128, "block_128x128", 1, 128, 128},
    {QS_GEMM_SCALE_MX, "mx", 2, 32, 1},
    {QS_GEMM_SCALE_NVFP4, "nvfp4", 3, 16, 1},
};

/* ------------------------------------------------------------ output formats */

/* Output dtypes [GEMM-OUT-ROUND]: precision p (significand bits), the exponent of the
 * smallest subnormal and the largest finite value; u = 2^-p is the unit roundoff. */
typedef struct qsi_outfmt {
    qs_dtype dtype;
    int p;
    int emin_q;
    double max_finite;
} qsi_outfmt;

static const qsi_outfmt outfmts[] = {
    {QS_FP32, 24, -149, 0x1.fffffep127},
    {QS_BF16, 8, -133, 0x1.fep127},
    {QS_FP16, 11, -24, 65504.0},
};

static const qsi_outfmt *outfmt_get(qs_dtype dt)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(outfmts); i++)
        if (outfmts[i].dtype == dt)
            return &outfmts[i];
    return NULL;
}

/* The canonical NaNs of the models [GEMM-NONFINITE]. */
#define QSI_NAN_CANONICAL 0x7FC00000u
#define QSI_NAN_HOPPER    0x7FFFFFFFu

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds sign * W * 2^e0 (W != 0), with sticky set when nonzero bits lie below W, once
 * to the output format, ties to even; overflow gives Inf [GEMM-OUT-ROUND]. */
static double round_window(int neg, uint64_t w, int e0, int sticky, const qsi_outfmt *f)
{
    int top = 63;
    while (!((w >> top) & 1u))
        top--;
    int q = top + e0 - (f->p - 1);
    if (q < f->emin_q)
        q = f->emin_q;
    int sh = q - e0; /* bits of w below the quantum 2^q */
    uint64_t r = w;
    if (sh > 0) {
        r = sh >= 64 ? 0 : w >> sh;
        int rbit = sh - 1 < 64 ? (int)((w >> (sh - 1)) & 1u) : 0;
        uint64_t below = sh - 1 >= 64 ? w : (w & ((((uint64_t)1) << (sh - 1)) - 1u));
        if (below != 0)
            sticky = 1;
        if (rbit && (sticky || (r & 1u)))
            r++;
    } else {
        q = e0;
    }
    double v = ldexp((double)r, q);
    if (v > f->max_finite)
        v = HUGE_VAL;
    return neg ? -v : v;
}

/* Splits a finite nonzero double into mant * 2^exp with mant odd (so exp is the exponent
 * of the value's least significant set bit). */
static void split_f64(double d, uint64_t *mant, int *exp)
{
    int e;
    double f = frexp(fabs(d), &e);
    uint64_t m = (uint64_t)ldexp(f, 53);
    e -= 53;
    while (!(m & 1u)) {
        m >>= 1;
        e++;
    }
    *mant = m;
    *exp = e;
}

/* Rounds a double once to the output format (NaN: canonical). */
static float round_out_f64(double v, const qsi_outfmt *f)
{
    if (isnan(v))
        return f32_from_bits(QSI_NAN_CANONICAL);
    if (v == 0.0 || isinf(v))
        return (float)v;
    uint64_t mant;
    int exp;
    split_f64(v, &mant, &exp);
    return (float)round_window(v < 0, mant, exp, 0, f);
}

/* ------------------------------------------------------------ exact accumulator */

/* qsi_xacc: two non-negative fixed-point magnitudes (positive and negative terms), bit 0
 * of limb 0 weighing 2^QSI_XACC_LSB. Invariant [GEMM-ACC-EXACT-WIDTH]: every term the
 * reference adds has its lowest set bit at or above 2^-1043 and every magnitude stays
 * below 2^917, so 32 limbs from 2^-1088 (up to 2^960) hold every sum exactly. */
#define QSI_XACC_LIMBS 32
#define QSI_XACC_LSB   (-1088)

typedef struct qsi_xacc {
    uint64_t mag[2][QSI_XACC_LIMBS];
    int broken; /* set if a term fell outside the proved range (a bug) */
} qsi_xacc;

static void xacc_zero(qsi_xacc *x)
{
    memset(x->mag, 0, sizeof x->mag);
}

/* Adds mant * 2^exp to magnitude neg (0 or 1). */
static void xacc_add(qsi_xacc *x, int neg, uint64_t mant, int exp)
{
    if (mant == 0)
        return;
    int pos = exp - QSI_XACC_LSB;
    if (pos < 0 || pos / 64 + 1 >= QSI_XACC_LIMBS) {
        x->broken = 1;
        return;
    }
    uint64_t *w = x->mag[neg];
    int i = pos / 64, sh = pos % 64;
    uint64_t lo = mant << sh, hi = sh ? mant >> (64 - sh) : 0;
    w[i] += lo;
    uint64_t carry = w[i] < lo;
    i++;
    uint64_t t = w[i] + hi;
    uint64_t c1 = t < hi;
    w[i] = t + carry;
    carry = c1 | (w[i] < carry);
    while (carry && ++i < QSI_XACC_LIMBS) {
        w[i]++;
        carry = w[i] == 0;
    }
    if (carry)
        x->broken = 1;
}

/* Adds the exact double d, scaled by 2^shift. */
static void xacc_add_f64(qsi_xacc *x, double d, int shift)
{
    if (d == 0.0)
        return;
    uint64_t mant;
    int exp;
    split_f64(d, &mant, &exp);
    xacc_add(x, d < 0, mant, exp + shift);
}

/* Adds the exact product p * q of two doubles with at most 48 significant bits each
 * (each an exact product of two FP32 values), scaled by 2^shift. */
static void xacc_add_prod(qsi_xacc *x, double p, double q, int shift)
{
    if (p == 0.0 || q == 0.0)
        return;
    uint64_t mp, mq;
    int ep, eq;
    split_f64(p, &mp, &ep);
    split_f64(q, &mq, &eq);
    uint64_t ph = mp >> 24, pl = mp & 0xFFFFFFu, qh = mq >> 24, ql = mq & 0xFFFFFFu;
    int neg = (p < 0) != (q < 0), e = ep + eq + shift;
    xacc_add(x, neg, ph * qh, e + 48);
    xacc_add(x, neg, ph * ql, e + 24);
    xacc_add(x, neg, pl * qh, e + 24);
    xacc_add(x, neg, pl * ql, e);
}

/* Multiplies both magnitudes by f (f < 2^32). */
static void xacc_mul(qsi_xacc *x, uint32_t f)
{
    for (int s = 0; s < 2; s++) {
        uint64_t carry = 0;
        for (int i = 0; i < QSI_XACC_LIMBS; i++) {
            uint64_t w = x->mag[s][i];
            uint64_t lo = (w & 0xFFFFFFFFu) * f + carry;
            uint64_t hi = (w >> 32) * f + (lo >> 32);
            x->mag[s][i] = (hi << 32) | (lo & 0xFFFFFFFFu);
            carry = hi >> 32;
        }
        if (carry)
            x->broken = 1;
    }
}

/* Rounds the exact value (positive minus negative magnitude) once to the output format;
 * an exact zero is +0 [GEMM-ACC-EXACT]. */
static double xacc_round(const qsi_xacc *x, const qsi_outfmt *f)
{
    int cmp = 0, i;
    for (i = QSI_XACC_LIMBS - 1; i >= 0 && cmp == 0; i--)
        cmp = x->mag[0][i] > x->mag[1][i] ? 1 : (x->mag[0][i] < x->mag[1][i] ? -1 : 0);
    if (cmp == 0)
        return 0.0;
    const uint64_t *big = x->mag[cmp < 0], *small = x->mag[cmp > 0];
    uint64_t d[QSI_XACC_LIMBS], borrow = 0;
    for (i = 0; i < QSI_XACC_LIMBS; i++) {
        uint64_t t = big[i] - small[i];
        uint64_t b1 = big[i] < small[i];
        d[i] = t - borrow;
        borrow = b1 | (t < borrow);
    }
    int top = QSI_XACC_LIMBS - 1;
    while (d[top] == 0)
        top--;
    int bit = 63;
    while (!((d[top] >> bit) & 1u))
        bit--;
    int h = top * 64 + bit; /* index of the leading bit */
    if (h < 64)
        return round_window(cmp < 0, d[0], QSI_XACC_LSB, 0, f);
    int lo = h - 63, li = lo / 64, ls = lo % 64;
    uint64_t w = ls ? (d[li] >> ls) | (d[li + 1] << (64 - ls)) : d[li];
    int sticky = ls ? (d[li] & ((((uint64_t)1) << ls) - 1u)) != 0 : 0;
    for (i = 0; i < li && !sticky; i++)
        sticky = d[i] != 0;
    return round_window(cmp < 0, w, lo + QSI_XACC_LSB, sticky, f);
}

/* x * y + z rounded once to FP32 (a fused multiply-add without relying on fma()). */
static float fma32(float xf, float yf, float zf, qsi_xacc *x)
{
    double xy = (double)xf * (double)yf; /* exact */
    if (!isfinite(xy) || !isfinite(zf) || xy == 0.0 || zf == 0.0)
        return (float)(xy + (double)zf); /* exact sum or a special, rounded once */
    xacc_zero(x);
    xacc_add_f64(x, xy, 0);
    xacc_add_f64(x, (double)zf, 0);
    return (float)xacc_round(x, &outfmts[0]);
}

/* ------------------------------------------------------------ one output element */

/* Everything one output element reads. sa and sb point at the group scales of its row of
 * A and of B (NULL: every group scale is 1). */
typedef struct qsi_dot {
    const float *a, *b;
    int64_t k, group, ngroups;
    const float *sa, *sb;
    float ta, tb, alpha, beta, c;
    int emin_a, emin_b; /* exponent clamps of the operands' formats [GEMM-ACC-HOPPER-ALIGN] */
    int vec_vec;        /* both operands block_1x128 [GEMM-ACC-HOPPER-VEC] */
    int64_t promote;
    const qsi_outfmt *out;
    qsi_xacc *x;
} qsi_dot;

static float group_scale(const float *s, int64_t g)
{
    return s ? s[g] : 1.0f;
}

/* The FP32 epilogue of the non-exact models and the output rounding [GEMM-ALPHA-BETA]
 * [GEMM-OUT-ROUND]: t = fl(alpha * fl(ta * tb)); z = fl(t * acc); z = fl(z + fl(beta*c))
 * when beta != 0, else, with plus_zero set (the Hopper epilogue [GEMM-HOPPER-EPILOGUE]),
 * z = fl(z + (+0)), so that an exact zero is +0 whatever the signs; then one rounding of
 * z to the output dtype. */
static float epilogue(const qsi_dot *d, float acc, int plus_zero)
{
    float tab = d->ta * d->tb;
    float t = d->alpha * tab;
    float z = t * acc;
    if (d->beta != 0.0f) {
        float bc = d->beta * d->c;
        z = z + bc;
    } else if (plus_zero) {
        z = z + 0.0f;
    }
    return round_out_f64((double)z, d->out);
}

/* [GEMM-ACC-EXACT] non-finite inputs: the IEEE result class, evaluated in FP64. */
static float exact_nonfinite(const qsi_dot *d)
{
    double s = 0.0;
    for (int64_t k = 0; k < d->k; k++) {
        int64_t g = k / d->group;
        double sg = (double)group_scale(d->sa, g) * (double)group_scale(d->sb, g);
        s += (double)d->a[k] * (double)d->b[k] * sg;
    }
    double y = s * (double)d->alpha * (double)d->ta * (double)d->tb;
    if (d->beta != 0.0f)
        y += (double)d->beta * (double)d->c;
    return round_out_f64(y, d->out);
}

static int dot_has_nonfinite(const qsi_dot *d)
{
    if (!isfinite(d->alpha) || !isfinite(d->ta) || !isfinite(d->tb))
        return 1;
    if (d->beta != 0.0f && (!isfinite(d->beta) || !isfinite(d->c)))
        return 1;
    for (int64_t k = 0; k < d->k; k++)
        if (!isfinite(d->a[k]) || !isfinite(d->b[k]))
            return 1;
    for (int64_t g = 0; g < d->ngroups; g++)
        if (!isfinite(group_scale(d->sa, g)) || !isfinite(group_scale(d->sb, g)))
            return 1;
    return 0;
}

/* Splits a finite nonzero float into an integer significand below 2^24 and exponent. */
static void split_f32(float v, uint32_t *mant, int *exp)
{
    uint64_t m;
    split_f64((double)v, &m, exp);
    *mant = (uint32_t)m;
}

/* [GEMM-ACC-EXACT]: alpha * ta * tb * sum_g (sa_g sb_g sum_k a_k b_k) + beta c, exactly,
 * rounded once. The factor alpha*ta*tb enters as an exponent shift on every term and
 * three integer multiplications of the sum. */
static float model_exact(const qsi_dot *d)
{
    if (dot_has_nonfinite(d))
        return exact_nonfinite(d);
    qsi_xacc *x = d->x;
    xacc_zero(x);
    const float fac[3] = {d->alpha, d->ta, d->tb};
    uint32_t fm[3];
    int shift = 0, fneg = 0, fzero = 0;
    for (int i = 0; i < 3; i++) {
        int e;
        if (fac[i] == 0.0f) {
            fzero = 1;
            continue;
        }
        split_f32(fabsf(fac[i]), &fm[i], &e);
        shift += e;
        fneg ^= fac[i] < 0.0f;
    }
    if (!fzero) {
        for (int64_t g = 0; g < d->ngroups; g++) {
            double sg = (double)group_scale(d->sa, g) * (double)group_scale(d->sb, g);
            int64_t k1 = (g + 1) * d->group < d->k ? (g + 1) * d->group : d->k;
            for (int64_t k = g * d->group; k < k1; k++) {
                double p = (double)d->a[k] * (double)d->b[k];
                xacc_add_prod(x, fneg ? -p : p, sg, shift);
            }
        }
        for (int i = 0; i < 3; i++)
            xacc_mul(x, fm[i]);
    }
    if (d->beta != 0.0f)
        xacc_add_f64(x, (double)d->beta * (double)d->c, 0);
    return (float)xacc_round(x, d->out);
}

/* [GEMM-ACC-FP32SEQ]: per scale group, P = FP32 sum of fl(a_k b_k) in increasing k from
 * +0; acc = fl(acc + s_g * P) with s_g = fl(sa_g sb_g), one rounding [GEMM-SCALE-BLOCK]. */
static float model_fp32_seq(const qsi_dot *d)
{
    float acc = 0.0f;
    for (int64_t g = 0; g < d->ngroups; g++) {
        float sg = group_scale(d->sa, g) * group_scale(d->sb, g);
        int64_t k1 = (g + 1) * d->group < d->k ? (g + 1) * d->group : d->k;
        float part = 0.0f;
        for (int64_t k = g * d->group; k < k1; k++) {
            float prod = d->a[k] * d->b[k];
            part = part + prod;
        }
        acc = fma32(sg, part, acc, d->x);
    }
    return epilogue(d, acc, 0);
}

/* floor(log2 |v|) of a nonzero finite v, at least emin [GEMM-ACC-HOPPER-ALIGN]. */
static int clamped_exp(double v, int emin)
{
    int e;
    frexp(v, &e);
    return e - 1 < emin ? emin : e - 1;
}

/* [GEMM-ACC-HOPPER] one 32-wide step: the exact products of k0..k1-1 and the running
 * partial c, aligned to E = the largest of e_a + e_b over the nonzero products (each
 * operand's exponent clamped at its format's smallest normal exponent) and of
 * floor(log2 |c|) [GEMM-ACC-HOPPER-ALIGN]; each truncated toward zero to a multiple of
 * 2^(E-13), summed exactly, and the sum truncated (RZ) to 13 fraction bits of its own
 * leading bit. Values are held exactly in FP64. */
static double hopper_step(const qsi_dot *d, int64_t k0, int64_t k1, double c)
{
    double prod[32];
    int n = 0, emax = INT32_MIN, finite = isfinite(c);
    double special = c;
    for (int64_t k = k0; k < k1; k++, n++) {
        prod[n] = (double)d->a[k] * (double)d->b[k];
        finite &= isfinite(prod[n]);
        special += prod[n];
        if (prod[n] != 0.0) {
            int e = clamped_exp(d->a[k], d->emin_a) + clamped_exp(d->b[k], d->emin_b);
            emax = e > emax ? e : emax;
        }
    }
    if (!finite)
        return special; /* [GEMM-NONFINITE]: the IEEE class of the sum */
    if (c != 0.0) {
        int e = clamped_exp(c, INT32_MIN);
        emax = e > emax ? e : emax;
    }
    if (emax == INT32_MIN)
        return 0.0;
    assert(n <= 32);
    int q = emax - 13; /* weight of the last kept fraction bit */
    int64_t sum = 0;
    for (int i = 0; i <= n; i++) {
        double v = i < n ? prod[i] : c;
        sum += (int64_t)ldexp(v, -q); /* the cast truncates toward zero; |v| < 2^(E+2) */
    }
    uint64_t mag = sum < 0 ? (uint64_t)(-sum) : (uint64_t)sum;
    int bits = 0;
    while (bits < 64 && (mag >> bits) != 0)
        bits++;
    if (bits > 14)
        mag = (mag >> (bits - 14)) << (bits - 14);
    double r = ldexp((double)mag, q);
    return sum < 0 ? -r : r;
}

/* One tensor-core partial over k0..k1-1, starting from zero. */
static float hopper_partial(const qsi_dot *d, int64_t k0, int64_t k1)
{
    double c = 0.0;
    for (int64_t s = k0; s < k1; s += 32)
        c = hopper_step(d, s, s + 32 < k1 ? s + 32 : k1, c);
    return (float)c;
}

/* [GEMM-ACC-HOPPER] [GEMM-ACC-PROMOTE]: segments end at every scale-group boundary and,
 * when promote_every = N > 0, at every multiple of N; each segment is one tensor-core
 * partial P, promoted as acc = fl(acc + s_g * P), one rounding; with two block_1x128
 * operands as acc = fl(acc + fl(P * sa) * sb) [GEMM-ACC-HOPPER-VEC]. */
static float model_hopper(const qsi_dot *d)
{
    float acc = 0.0f;
    for (int64_t g = 0; g < d->ngroups; g++) {
        float sa = group_scale(d->sa, g), sb = group_scale(d->sb, g);
        float sg = sa * sb;
        int64_t k0 = g * d->group;
        int64_t k1 = k0 + d->group < d->k ? k0 + d->group : d->k;
        while (k0 < k1) {
            int64_t s1 = k1;
            if (d->promote > 0 && (k0 / d->promote + 1) * d->promote < s1)
                s1 = (k0 / d->promote + 1) * d->promote;
            float part = hopper_partial(d, k0, s1);
            if (d->vec_vec)
                acc = fma32(part * sa, sb, acc, d->x);
            else
                acc = fma32(sg, part, acc, d->x);
            k0 = s1;
        }
    }
    float y = epilogue(d, acc, 1);
    return isnan(y) ? f32_from_bits(QSI_NAN_HOPPER) : y;
}

/* ------------------------------------------------------------ models table */

typedef float (*qsi_model_fn)(const qsi_dot *d);

/* The accumulation models, selected by name [GEMM-ACC-*]. */
static const struct {
    qs_gemm_acc_kind kind;
    const char *name;
    qsi_model_fn fn;
    int takes_promote;  /* accepts promote_every != 0 */
    int grouped_only_k; /* 1: only the tensor and block families (Hopper paths) */
} models[] = {
    {QS_GEMM_ACC_EXACT, "exact", model_exact, 0, 0},
    {QS_GEMM_ACC_FP32_SEQ, "fp32_seq", model_fp32_seq, 0, 0},
    {QS_GEMM_ACC_HOPPER_FP8_TC, "hopper_fp8_tc", model_hopper, 1, 1},
};

const char *qs_gemm_acc_name(qs_gemm_acc_kind kind)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(models); i++)
        if (models[i].kind == kind)
            return models[i].name;
    return NULL;
}

int qs_gemm_acc_from_name(const char *name)
{
    for (size_t i = 0; name && i < QSI_ARRAY_LEN(models); i++)
        if (strcmp(models[i].name, name) == 0)
            return (int)models[i].kind;
    return -1;
}

/* ------------------------------------------------------------ argument checks */

static int scaling_index(qs_gemm_scaling mode)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(scalings); i++)
        if (scalings[i].mode == mode)
            return (int)i;
    return -1;
}

static int model_index(qs_gemm_acc_kind kind)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(models); i++)
        if (models[i].kind == kind)
            return (int)i;
    return -1;
}

static qs_status check_operand(qs_ctx *ctx, const qs_gemm_operand *op, const char *name)
{
    if (!op || !op->data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: operand '%s' or its data is NULL",
                            name);
    int si = scaling_index(op->scaling);
    if (si < 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: operand '%s' has scaling mode %d", name,
                            (int)op->scaling);
    if (scalings[si].group_rows > 0 && !op->block_scale)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "gemm: operand '%s' (%s scaling) has no block_scale", name,
                            scalings[si].name);
    return QS_OK;
}

static qs_status check_args(qs_ctx *ctx, const qs_gemm_params *p, const qs_gemm_operand *a,
                            const qs_gemm_operand *b, const float *c, const void *y)
{
    qs_status s;
    if (!p || !y)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: params or output is NULL");
    if ((s = check_operand(ctx, a, "a")) != QS_OK || (s = check_operand(ctx, b, "b")) != QS_OK)
        return s;
    if (p->m < 0 || p->n < 0 || p->k < 0 || p->k > QS_GEMM_MAX_K)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "gemm: shape m=%lld n=%lld k=%lld (k at most %lld)", (long long)p->m,
                            (long long)p->n, (long long)p->k, (long long)QS_GEMM_MAX_K);
    if (p->n > 0 && p->m > (int64_t)(SIZE_MAX / sizeof(double)) / p->n)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: m*n overflows");
    int fa = scalings[scaling_index(a->scaling)].family;
    int fb = scalings[scaling_index(b->scaling)].family;
    if (fa != fb)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: scaling modes %s and %s do not mix",
                            scalings[scaling_index(a->scaling)].name,
                            scalings[scaling_index(b->scaling)].name);
    int mi = model_index(p->acc.kind);
    if (mi < 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: accumulation model %d",
                            (int)p->acc.kind);
    if (p->acc.promote_every < 0 || (p->acc.promote_every % 32) != 0 ||
        (p->acc.promote_every != 0 && !models[mi].takes_promote))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "gemm: promote_every=%lld for model %s (0, or a multiple of 32 "
                            "for hopper_fp8_tc)",
                            (long long)p->acc.promote_every, models[mi].name);
    if (models[mi].grouped_only_k && fa >= 2)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "gemm: model %s has no %s path (Hopper has no MX/NVFP4 MMA)",
                            models[mi].name, scalings[scaling_index(a->scaling)].name);
    if (!outfmt_get(p->out_dtype))
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "gemm: output dtype %d (fp32, bf16 or fp16)",
                            (int)p->out_dtype);
    if (p->beta != 0.0f && !c)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: beta != 0 but c is NULL");
    return QS_OK;
}

/* ------------------------------------------------------------ the driver */

/* The group scales of one row of an operand (NULL: all 1) [GEMM-SCALE-BLOCK]
 * [GEMM-SCALE-MX] [GEMM-SCALE-NVFP4]. */
static const float *row_scales(const qs_gemm_operand *op, int64_t row, int64_t ngroups)
{
    int64_t gr = scalings[scaling_index(op->scaling)].group_rows;
    if (gr == 0)
        return NULL;
    return op->block_scale + (row / gr) * ngroups;
}

/* The per-tensor factor [GEMM-SCALE-TENSOR] [GEMM-SCALE-NVFP4]. */
static float tensor_factor(const qs_gemm_operand *op)
{
    if (op->scaling == QS_GEMM_SCALE_TENSOR || op->scaling == QS_GEMM_SCALE_NVFP4)
        return op->tensor_scale;
    return 1.0f;
}

/* Fills d for element (m, n), given everything shared. */
static void dot_at(qsi_dot *d, const qs_gemm_params *p, const qs_gemm_operand *a,
                   const qs_gemm_operand *b, const float *c, int64_t m, int64_t n)
{
    d->a = a->data + m * p->k;
    d->b = b->data + n * p->k;
    d->sa = row_scales(a, m, d->ngroups);
    d->sb = row_scales(b, n, d->ngroups);
    d->c = p->beta != 0.0f ? c[m * p->n + n] : 0.0f;
}

/* The smallest normal exponent of an operand's element format, the clamp of
 * [GEMM-ACC-HOPPER-ALIGN]; no clamp (INT32_MIN) for a format the rule does not name. */
static int elem_emin(qs_dtype elem)
{
    switch (elem) {
    case QS_E4M3:
        return -6;
    case QS_E5M2:
        return -14;
    default:
        return INT32_MIN;
    }
}

static void dot_init(qsi_dot *d, const qs_gemm_params *p, const qs_gemm_operand *a,
                     const qs_gemm_operand *b, qsi_xacc *x)
{
    int si = scaling_index(a->scaling); /* validated by the caller; guarded all the same */
    int64_t gk = si >= 0 ? scalings[si].group_k : 0;
    memset(d, 0, sizeof *d);
    d->k = p->k;
    d->group = gk > 0 ? gk : (p->k > 0 ? p->k : 1);
    d->ngroups = (p->k + d->group - 1) / d->group;
    d->ta = tensor_factor(a);
    d->tb = tensor_factor(b);
    d->alpha = p->alpha;
    d->beta = p->beta;
    d->promote = p->acc.promote_every;
    d->emin_a = elem_emin(a->elem);
    d->emin_b = elem_emin(b->elem);
    d->vec_vec = a->scaling == QS_GEMM_SCALE_BLOCK_1X128 && b->scaling == QS_GEMM_SCALE_BLOCK_1X128;
    d->out = outfmt_get(p->out_dtype);
    d->x = x;
}

qs_status qs_gemm(qs_ctx *ctx, const qs_gemm_params *p, const qs_gemm_operand *a,
                  const qs_gemm_operand *b, const float *c, float *y)
{
    qs_status s = check_args(ctx, p, a, b, c, y);
    if (s != QS_OK)
        return s;
    qsi_xacc *x = malloc(sizeof *x);
    if (!x)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "gemm: out of memory");
    qsi_model_fn fn = models[model_index(p->acc.kind)].fn;
    qsi_dot d;
    dot_init(&d, p, a, b, x);
    x->broken = 0;
    for (int64_t m = 0; m < p->m && !x->broken; m++) {
        for (int64_t n = 0; n < p->n && !x->broken; n++) {
            dot_at(&d, p, a, b, c, m, n);
            y[m * p->n + n] = fn(&d);
        }
    }
    int broken = x->broken;
    free(x);
    if (broken)
        return qs_ctx_error(ctx, QS_ERR_INTERNAL, "gemm: exact accumulator out of range");
    return QS_OK;
}

/* ------------------------------------------------------------ gemm_bound */

/* [GEMM-BOUND] for one element, given its exact result yx. */
static double bound_at(const qsi_dot *d, float yx)
{
    if (!isfinite(yx))
        return 0.0;
    const double u = 0x1p-24, eta = 0x1p-150;
    double sum = 0.0, smax = 1.0;
    for (int64_t g = 0; g < d->ngroups; g++) {
        double sg = fabs((double)group_scale(d->sa, g) * (double)group_scale(d->sb, g));
        int64_t k1 = (g + 1) * d->group < d->k ? (g + 1) * d->group : d->k;
        double part = 0.0;
        for (int64_t k = g * d->group; k < k1; k++)
            part += fabs((double)d->a[k] * (double)d->b[k]);
        sum += sg * part;
        smax = sg > smax ? sg : smax;
    }
    double t = fabs((double)d->alpha * (double)d->ta * (double)d->tb);
    double bc = d->beta != 0.0f ? fabs((double)d->beta * (double)d->c) : 0.0;
    double nops = (double)d->k + 8.0;
    double gam = nops * u / (1.0 - nops * u);
    double b32 = gam * (t * sum + bc) + 2.0 * nops * eta * (t > 1.0 ? t : 1.0) * smax;
    double uo = ldexp(1.0, -d->out->p), etao = ldexp(1.0, d->out->emin_q - 1);
    double ystar = (fabs((double)yx) + etao) / (1.0 - uo);
    double total = b32 + uo * (ystar + b32) + etao + uo * ystar + etao;
    return total * (1.0 + 0x1p-20);
}

qs_status qs_gemm_bound(qs_ctx *ctx, const qs_gemm_params *p, const qs_gemm_operand *a,
                        const qs_gemm_operand *b, const float *c, float *y_exact, double *bound)
{
    qs_gemm_params pe = p ? *p : (qs_gemm_params){0};
    pe.acc.kind = QS_GEMM_ACC_EXACT;
    pe.acc.promote_every = 0;
    qs_status s = check_args(ctx, p ? &pe : NULL, a, b, c, y_exact);
    if (s != QS_OK)
        return s;
    if (!bound)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm_bound: bound is NULL");
    s = qs_gemm(ctx, &pe, a, b, c, y_exact);
    if (s != QS_OK)
        return s;
    qsi_dot d;
    dot_init(&d, &pe, a, b, NULL);
    for (int64_t m = 0; m < pe.m; m++) {
        for (int64_t n = 0; n < pe.n; n++) {
            dot_at(&d, &pe, a, b, c, m, n);
            bound[m * pe.n + n] = bound_at(&d, y_exact[m * pe.n + n]);
        }
    }
    return QS_OK;
}

int qs_gemm_within_bound(const float *y, const float *y_exact, const double *bound, double scale,
                         size_t count, size_t *first_bad)
{
    for (size_t i = 0; i < count; i++) {
        int ok;
        if (isnan(y_exact[i]) || isnan(y[i]))
            ok = isnan(y_exact[i]) && isnan(y[i]);
        else if (isinf(y_exact[i]) || isinf(y[i]))
            ok = y[i] == y_exact[i];
        else
            ok = fabs((double)y[i] - (double)y_exact[i]) <= scale * bound[i];
        if (!ok) {
            if (first_bad)
                *first_bad = i;
            return 0;
        }
    }
    return 1;
}
