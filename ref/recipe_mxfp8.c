/* recipe_mxfp8.c: MXFP8 of spec/recipes.md — 1x32 rowwise and 32x1 columnwise blocks
 * (columnwise data not transposed), one E8M0 scale per block, E4M3 or E5M2 elements.
 * The scale rules (TE round-up, OCP floor), their multipliers and element policies are the
 * two rows of mx_rules; the block walk below never branches on the rule. */
#include <math.h>
#include <stdlib.h>

#include "recipe_internal.h"

#define QSI_MX_BLOCK 32

/* [REC-MX-E8M0-UP]: TE's float_to_e8m0 on a non-negative v: NaN -> 0xFF, Inf -> 0xFE,
 * 0 -> 0x00, else the biased exponent of v, plus one when v is not a power of two (and
 * not at 0xFE), where a subnormal v <= 2^-127 gives 0x00. */
static uint32_t e8m0_round_up(float v)
{
    if (isnan(v))
        return 0xFF;
    if (isinf(v))
        return 0xFE;
    if (v == 0.0f)
        return 0x00;
    uint32_t bits = qs_f32_bits(v);
    uint32_t exp = (bits >> 23) & 0xFF, mant = bits & 0x7FFFFF;
    if (mant > 0 && exp != 0xFE && !(exp == 0 && mant <= 0x400000))
        exp++;
    return exp;
}

/* [REC-MX-SCALE]: e = e8m0_round_up(amax * fl(1/fp8_max)), one FP32 multiply. */
static uint32_t scale_te(float amax, qs_dtype elem)
{
    float rcp = 1.0f / qsi_elem_max(elem);
    return e8m0_round_up(amax * rcp);
}

/* floor(log2 v) of a positive finite FP32 v, exactly (subnormals included). */
static int floor_log2f(float v)
{
    uint32_t bits = qs_f32_bits(v);
    int exp = (int)((bits >> 23) & 0xFF);
    if (exp > 0)
        return exp - 127;
    uint32_t mant = bits & 0x7FFFFF;
    int e = -127;
    while (!(mant & 0x400000)) {
        mant <<= 1;
        e--;
    }
    return e;
}

/* [REC-MX-SCALE-OCP]: shared exponent floor(log2 amax) - emax_elem, clamped below at -127;
 * amax 0 gives 0x00, an infinite amax gives NaN (0xFF). */
static uint32_t scale_ocp(float amax, qs_dtype elem)
{
    int emax = elem == QS_E5M2 ? 15 : 8;
    if (isinf(amax) || isnan(amax))
        return 0xFF;
    if (amax == 0.0f)
        return 0x00;
    int se = floor_log2f(amax) - emax;
    if (se < -127)
        se = -127;
    return (uint32_t)(se + 127);
}

/* [REC-MX-ELEM]: satfinite RNE (TE): overflow and +-Inf give +-max, NaN the NaN code. */
static uint32_t elem_satfinite(qs_dtype elem, float v)
{
    return qsi_encode_fp8(elem, v);
}

/* [REC-MX-ELEM-OCP]: finite values clamped to +-max (RNE, satfinite); Inf and NaN are not
 * clamped: Inf stays Inf in E5M2 and becomes NaN in E4M3, NaN stays NaN (nosat). */
static uint32_t elem_clamp_finite(qs_dtype elem, float v)
{
    if (isfinite(v))
        return qsi_encode_fp8(elem, v);
    return elem == QS_E5M2 ? qs_encode_e5m2(v, QS_OVF_NOSAT) : qs_encode_e4m3(v, QS_OVF_NOSAT);
}

/* [REC-MX-MULT]: TE's exp2f_rcp: 1 for e = 0, else the binary32 with bits (254-e) << 23
 * taken as a 32-bit pattern, so e = 254 gives +0 and e = 255 gives -Inf (bits 0xFF800000). */
static float mult_te(uint32_t e)
{
    if (e == 0)
        return 1.0f;
    return qs_f32_from_bits((uint32_t)(254 - (int32_t)e) << 23);
}

/* [REC-MX-MULT-OCP]: the exact 2^(127-e) of V/X: 2^127 for e = 0, 2^-127 (bits 0x00400000)
 * for e = 254, NaN for e = 255. */
static float mult_ocp(uint32_t e)
{
    if (e == 255)
        return qs_f32_from_bits(0x7FC00000u);
    if (e == 254)
        return qs_f32_from_bits(0x00400000u);
    return qs_f32_from_bits((254u - e) << 23);
}

/* The per-peer variant table [REC-VARIANTS], indexed by qs_mx_rule. */
static const struct {
    uint32_t (*scale)(float amax, qs_dtype elem);
    float (*multiplier)(uint32_t e);
    uint32_t (*encode)(qs_dtype elem, float v);
} mx_rules[QS_MX_RULE_COUNT] = {
    [QS_MX_RULE_TE] = {scale_te, mult_te, elem_satfinite},
    [QS_MX_RULE_OCP] = {scale_ocp, mult_ocp, elem_clamp_finite},
};

/* Rowwise 1x32 blocks of the rows x cols matrix src into data [rows, cols] and scale
 * [rows, ceil(cols/32)]; a partial trailing block takes its amax over the elements present
 * [REC-MX-PARTIAL]. */
static void mx_encode_rows(const float *src, int64_t rows, int64_t cols, qs_dtype elem,
                           qs_mx_rule rule, qs_tensor *data, qs_tensor *scale)
{
    int64_t nblk = qsi_ceil_div(cols, QSI_MX_BLOCK);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t b = 0; b < nblk; b++) {
            int64_t c0 = b * QSI_MX_BLOCK;
            int64_t len = cols - c0 < QSI_MX_BLOCK ? cols - c0 : QSI_MX_BLOCK;
            const float *blk = src + r * cols + c0;
            uint32_t e = mx_rules[rule].scale(qsi_amax(blk, len, 1), elem);
            float mult = mx_rules[rule].multiplier(e);
            qsi_code_set(scale, (size_t)(r * nblk + b), e);
            for (int64_t c = 0; c < len; c++)
                qsi_code_set(data, (size_t)(r * cols + c0 + c),
                             mx_rules[rule].encode(elem, blk[c] * mult));
        }
    }
}

/* [REC-MX-LAYOUT]: rowwise from x; columnwise from x^T, then stored back untransposed:
 * data [M,K], scale [ceil(M/32), K]. */
qs_status qsi_quantize_mxfp8(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out)
{
    int64_t M = in->m, K = in->k;
    qs_status s = QS_OK;
    if (q->cfg.rowwise) {
        s = qsi_alloc_2d(ctx, &out->data[QS_DIR_ROW], out->elem, M, K);
        if (s == QS_OK)
            s = qsi_alloc_2d(ctx, &out->scale[QS_DIR_ROW], QS_E8M0, M,
                             qsi_ceil_div(K, QSI_MX_BLOCK));
        if (s != QS_OK)
            return s;
        mx_encode_rows(in->x, M, K, out->elem, q->cfg.mx_rule, &out->data[QS_DIR_ROW],
                       &out->scale[QS_DIR_ROW]);
    }
    if (!q->cfg.columnwise)
        return QS_OK;
    float *xt = malloc((size_t)(M * K) * sizeof *xt);
    if (!xt)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantize: out of memory");
    qsi_transpose_f32(in->x, M, K, xt);
    qs_tensor dt = {0}, st = {0};
    s = qsi_alloc_2d(ctx, &dt, out->elem, K, M);
    if (s == QS_OK)
        s = qsi_alloc_2d(ctx, &st, QS_E8M0, K, qsi_ceil_div(M, QSI_MX_BLOCK));
    if (s == QS_OK) {
        mx_encode_rows(xt, K, M, out->elem, q->cfg.mx_rule, &dt, &st);
        s = qsi_transpose_tensor(ctx, &dt, &out->data[QS_DIR_COL]);
    }
    if (s == QS_OK)
        s = qsi_transpose_tensor(ctx, &st, &out->scale[QS_DIR_COL]);
    qs_tensor_free(&dt);
    qs_tensor_free(&st);
    free(xt);
    return s;
}

/* [REC-DEQ-MX]: y = decode(q) * 2^(e-127), one FP32 multiply (e = 0xFF gives NaN). */
void qsi_dequantize_mxfp8(const qs_quantized *qz, qs_direction dir, float *y)
{
    int64_t K = qz->cols;
    int64_t scols = qz->scale[dir].shape[1];
    for (int64_t m = 0; m < qz->rows; m++) {
        for (int64_t k = 0; k < K; k++) {
            size_t si = dir == QS_DIR_ROW ? (size_t)(m * scols + k / QSI_MX_BLOCK)
                                          : (size_t)((m / QSI_MX_BLOCK) * scols + k);
            float sv = qs_decode_f32(QS_E8M0, qsi_code_get(&qz->scale[dir], si));
            uint32_t code = qsi_code_get(&qz->data[dir], (size_t)(m * K + k));
            y[m * K + k] = qs_decode_f32(qz->elem, code) * sv;
        }
    }
}
