/* recipe_axiswise.c: torchao's axiswise FP8 scaling of spec/recipes.md section 8 — recipes
 * rowwise and rowwise_with_gw_hp (torchao 0.18.0, torchao/float8/float8_utils.py and
 * float8_training_tensor.py). Each row of a copy has its own FP32 scale from the amax of
 * that row (NaN propagating, as torch.amax does), computed in binary64 against torchao's
 * eps 1e-12 and rounded down to a power of two; the weight's columnwise copy under
 * rowwise_with_gw_hp has one scale for the whole tensor [REC-AX-GWHP]. */
#include <math.h>
#include <stdlib.h>

#include "recipe_internal.h"

/* torchao's EPS, a binary64 constant: amaxes below it are raised to it [REC-AX-SCALE]. */
static const double axiswise_eps = 1e-12;

/* [REC-AX-POW2]: exp2(floor(log2(s))) for s >= 0 exactly — the power of two at or below s;
 * 0 stays 0 and NaN stays NaN. s is never subnormal or infinite here (fp8_max / FLT_MAX is
 * a normal number, fp8_max / 1e-12 is finite), but both are handled for completeness. */
static float pow2_floor(float s)
{
    if (!(s > 0.0f) || isinf(s))
        return s;
    uint32_t bits = qs_f32_bits(s);
    if ((bits & 0x7F800000u) != 0)
        return qs_f32_from_bits(bits & 0xFF800000u);
    uint32_t top = 0x00400000u; /* subnormal: keep the highest set fraction bit */
    while (!(bits & top))
        top >>= 1;
    return qs_f32_from_bits(top);
}

/* [REC-AX-SCALE] [REC-AX-POW2]: torchao's amax_to_scale. */
float qs_axiswise_scale_from_amax(float amax, float fp8_max, int pow2)
{
    double a = (double)amax;
    if (a < axiswise_eps) /* torch.clamp(amax, min=EPS): a NaN stays NaN */
        a = axiswise_eps;
    float s = (float)((double)fp8_max / a); /* binary64 quotient, then one rounding */
    return pow2 ? pow2_floor(s) : s;
}

/* [REC-AX-AMAX]: max |v| over n values with the stride given; any NaN makes it NaN. */
static float amax_nan_strided(const float *v, int64_t n, int64_t stride)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float x = v[i * stride];
        if (isnan(x))
            return qs_f32_from_bits(0x7FC00000u); /* the canonical NaN */
        float ax = x < 0.0f ? -x : x;
        if (ax > a)
            a = ax;
    }
    return a;
}

int qsi_recipe_is_axiswise(qs_recipe_kind kind)
{
    return kind == QS_RECIPE_ROWWISE || kind == QS_RECIPE_ROWWISE_GW_HP;
}

/* [REC-AX-LAYOUT] [REC-AX-GWHP]: how copy dir of cfg is scaled — one scale per row of the
 * copy, except under rowwise_with_gw_hp, whose weight's columnwise copy has one scale for
 * the tensor and whose other roles' columnwise copy is the high-precision x^T itself. */
qsi_ax_copy qsi_axiswise_copy(const qs_recipe_config *cfg, qs_direction dir)
{
    if (cfg->kind != QS_RECIPE_ROWWISE_GW_HP || dir != QS_DIR_COL)
        return QSI_AX_ROWS;
    return cfg->role == QS_ROLE_WEIGHT ? QSI_AX_TENSOR : QSI_AX_HP;
}

/* [REC-AX-ELEM]: q = enc_F(clamp(fl(v * s), -max_F, max_F)), RNE; the clamp and satfinite
 * give the same codes (an infinite product becomes ±max, NaN the NaN code). */
static uint32_t encode_scaled(qs_dtype elem, float v, float s)
{
    return qsi_encode_fp8(elem, v * s);
}

/* [REC-AX-GWHP]: the high-precision copy — the values as given (exact in FP32), scale 1. */
static qs_status keep_copy(qs_ctx *ctx, const float *v, int64_t rows, int64_t len,
                           qs_quantized *out, qs_direction dir)
{
    int64_t one = 1;
    qs_status s = qsi_alloc_2d(ctx, &out->data[dir], QS_FP32, rows, len);
    if (s == QS_OK)
        s = qs_tensor_alloc(ctx, &out->scale[dir], QS_FP32, 1, &one);
    if (s != QS_OK)
        return s;
    for (int64_t i = 0; i < rows * len; i++)
        qsi_f32_set(&out->data[dir], (size_t)i, v[i]);
    qsi_f32_set(&out->scale[dir], 0, 1.0f);
    out->global_enc[dir] = 1.0f;
    out->global_dec[dir] = 1.0f;
    return QS_OK;
}

/* One copy: rows x len values v (row r at v + r*len) into data [rows, len] with per-row
 * scale_inv [rows, 1], or one scale for all [1] when tensorwise. */
static qs_status encode_copy(qs_ctx *ctx, const qs_quantizer *q, const float *v, int64_t rows,
                             int64_t len, int tensorwise, qs_quantized *out, qs_direction dir)
{
    qs_dtype elem = out->elem;
    float fp8_max = qsi_elem_max(elem);
    int64_t one = 1;
    qs_status s = qsi_alloc_2d(ctx, &out->data[dir], elem, rows, len);
    if (s == QS_OK)
        s = tensorwise ? qs_tensor_alloc(ctx, &out->scale[dir], QS_FP32, 1, &one)
                       : qsi_alloc_2d(ctx, &out->scale[dir], QS_FP32, rows, 1);
    if (s != QS_OK)
        return s;
    float tw_scale = 0.0f;
    if (tensorwise) { /* [REC-AX-GWHP]: torch.max(torch.abs(w)) over the whole tensor */
        float a = amax_nan_strided(v, rows * len, 1);
        tw_scale = qs_axiswise_scale_from_amax(a, fp8_max, q->cfg.pow2);
        qsi_f32_set(&out->scale[dir], 0, 1.0f / tw_scale);
        out->amax[dir] = a;
        out->global_enc[dir] = tw_scale;
        out->global_dec[dir] = 1.0f / tw_scale;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *row = v + r * len;
        float sc = tw_scale;
        if (!tensorwise) { /* [REC-AX-ROW]: torch.amax(abs, dim, keepdim=True) */
            sc = qs_axiswise_scale_from_amax(amax_nan_strided(row, len, 1), fp8_max, q->cfg.pow2);
            qsi_f32_set(&out->scale[dir], (size_t)r, 1.0f / sc); /* reciprocal(), RN */
        }
        for (int64_t c = 0; c < len; c++)
            qsi_code_set(&out->data[dir], (size_t)(r * len + c), encode_scaled(elem, row[c], sc));
    }
    return QS_OK;
}

/* [REC-AX-ROW] [REC-AX-COL] [REC-AX-GWHP]: the rowwise copy scales each row of x along K;
 * the columnwise copy is x^T [K, M] with each of its rows (a column of x) scaled along M. */
qs_status qsi_quantize_axiswise(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                                qs_quantized *out)
{
    qs_status s = QS_OK;
    if (q->cfg.rowwise)
        s = encode_copy(ctx, q, in->x, in->m, in->k, 0, out, QS_DIR_ROW);
    if (s != QS_OK || !q->cfg.columnwise)
        return s;
    float *xt = malloc((size_t)(in->m * in->k) * sizeof(float));
    if (!xt)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantize: out of memory");
    qsi_transpose_f32(in->x, in->m, in->k, xt);
    qsi_ax_copy how = qsi_axiswise_copy(&q->cfg, QS_DIR_COL);
    s = how == QSI_AX_HP
            ? keep_copy(ctx, xt, in->k, in->m, out, QS_DIR_COL)
            : encode_copy(ctx, q, xt, in->k, in->m, how == QSI_AX_TENSOR, out, QS_DIR_COL);
    free(xt);
    return s;
}

/* [REC-DEQ-AX]: y = fl(dec_F(q) * scale_inv) with the scale of the element's copy row (the
 * high-precision copy: its values times 1). */
void qsi_dequantize_axiswise(const qs_quantized *qz, qs_direction dir, float *y)
{
    int tensorwise = qz->scale[dir].ndim == 1;
    qs_dtype dt = qz->data[dir].dtype;
    for (int64_t m = 0; m < qz->rows; m++) {
        for (int64_t k = 0; k < qz->cols; k++) {
            int64_t r = dir == QS_DIR_ROW ? m : k, c = dir == QS_DIR_ROW ? k : m;
            int64_t len = dir == QS_DIR_ROW ? qz->cols : qz->rows;
            float scale_inv = qsi_f32_get(&qz->scale[dir], tensorwise ? 0 : (size_t)r);
            size_t at = (size_t)(r * len + c);
            float v = dt == QS_FP32 ? qsi_f32_get(&qz->data[dir], at)
                                    : qs_decode_f32(dt, qsi_code_get(&qz->data[dir], at));
            y[m * qz->cols + k] = v * scale_inv;
        }
    }
}
