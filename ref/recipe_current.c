/* recipe_current.c: current (tensorwise, stateless) FP8 scaling of spec/recipes.md, and
 * the tensorwise encoding and dequantization it shares with delayed scaling: one FP32
 * scale for the whole tensor, rowwise data as given, columnwise data its transpose. */
#include <float.h>
#include <math.h>

#include "recipe_internal.h"

/* [REC-CS-SCALE] [REC-CS-POW2]: TE's compute_scale_from_amax, operation by operation. */
float qs_scale_from_amax(float amax, float fp8_max, float eps, int pow2, float value_for_inf)
{
    if (amax < eps)
        amax = eps;
    if (isinf(amax) || amax == 0.0f || isnan(amax))
        return 1.0f;
    float s = fp8_max / amax; /* one correctly rounded FP32 division */
    if (isinf(s))
        s = value_for_inf;
    if (pow2)
        s = qs_f32_from_bits(qs_f32_bits(s) & 0xFF800000u); /* keep sign and exponent */
    return s;
}

/* [REC-TW-ELEM] [REC-TW-LAYOUT]: q = fp8_satfinite_rne(x * scale); columnwise = transpose. */
qs_status qsi_tensorwise_encode(qs_ctx *ctx, const qsi_input *in, float scale, float scale_inv,
                                float amax, qs_quantized *out)
{
    int64_t m_rows = in->m, k_cols = in->k;
    int64_t one = 1;
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        int want = d == QS_DIR_ROW ? out->cfg.rowwise : out->cfg.columnwise;
        if (!want)
            continue;
        qs_status s = d == QS_DIR_ROW ? qsi_alloc_2d(ctx, &out->data[d], out->elem, m_rows, k_cols)
                                      : qsi_alloc_2d(ctx, &out->data[d], out->elem, k_cols, m_rows);
        if (s == QS_OK)
            s = qs_tensor_alloc(ctx, &out->scale[d], QS_FP32, 1, &one);
        if (s != QS_OK)
            return s;
        qsi_f32_set(&out->scale[d], 0, scale_inv);
        out->amax[d] = amax;
        out->global_enc[d] = scale;
        out->global_dec[d] = scale_inv;
    }
    for (int64_t m = 0; m < m_rows; m++) {
        for (int64_t k = 0; k < k_cols; k++) {
            uint32_t code = qsi_encode_fp8(out->elem, in->x[m * k_cols + k] * scale);
            if (out->cfg.rowwise)
                qsi_code_set(&out->data[QS_DIR_ROW], (size_t)(m * k_cols + k), code);
            if (out->cfg.columnwise)
                qsi_code_set(&out->data[QS_DIR_COL], (size_t)(k * m_rows + m), code);
        }
    }
    return QS_OK;
}

/* [REC-DEQ-TW]: y = decode(q) * scale_inv, one FP32 multiply. */
void qsi_dequantize_tensorwise(const qs_quantized *qz, qs_direction dir, float *y)
{
    float scale_inv = qsi_f32_get(&qz->scale[dir], 0);
    for (int64_t m = 0; m < qz->rows; m++) {
        for (int64_t k = 0; k < qz->cols; k++) {
            size_t at = dir == QS_DIR_ROW ? (size_t)(m * qz->cols + k) : (size_t)(k * qz->rows + m);
            uint32_t code = qsi_code_get(&qz->data[dir], at);
            y[m * qz->cols + k] = qs_decode_f32(qz->elem, code) * scale_inv;
        }
    }
}

/* [REC-CS-AMAX] [REC-CS-SCALE]: amax of the tensor, scale, scale_inv = 1/scale (RN). */
qs_status qsi_quantize_current(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                               qs_quantized *out)
{
    float amax = q->amax_given ? q->given_amax[QS_DIR_ROW] : qsi_amax(in->x, in->m * in->k, 1);
    float scale =
        qs_scale_from_amax(amax, qsi_elem_max(out->elem), q->cfg.eps, q->cfg.pow2, FLT_MAX);
    float scale_inv = 1.0f / scale;
    return qsi_tensorwise_encode(ctx, in, scale, scale_inv, amax, out);
}
