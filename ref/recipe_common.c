/* recipe_common.c: what every recipe of spec/recipes.md shares — input decoding, amax,
 * code access, the quantizer object, dispatch to the per-recipe files, the logical and
 * padded layouts, and dequantization. The configuration is in ref/recipe_config.c; the
 * per-recipe arithmetic in ref/recipe_{delayed,current,mxfp8,block,nvfp4,axiswise}.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "recipe_internal.h"

/* ------------------------------------------------------------------ shared helpers */

int64_t qsi_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void qsi_transpose_f32(const float *v, int64_t rows, int64_t cols, float *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[c * rows + r] = v[r * cols + c];
}

qs_status qsi_transpose_tensor(qs_ctx *ctx, const qs_tensor *src, qs_tensor *dst)
{
    int64_t rows = src->shape[0], cols = src->shape[1];
    qs_status s = qsi_alloc_2d(ctx, dst, src->dtype, cols, rows);
    if (s != QS_OK)
        return s;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            size_t from = (size_t)(r * cols + c), to = (size_t)(c * rows + r);
            if (src->dtype == QS_FP32)
                qsi_f32_set(dst, to, qsi_f32_get(src, from));
            else
                qsi_code_set(dst, to, qsi_code_get(src, from));
        }
    }
    return QS_OK;
}

float qsi_elem_max(qs_dtype elem)
{
    switch (elem) {
    case QS_E4M3:
        return 448.0f;
    case QS_E5M2:
        return 57344.0f;
    case QS_E2M1:
        return 6.0f;
    default:
        return 0.0f;
    }
}

uint32_t qsi_encode_fp8(qs_dtype elem, float v)
{
    return elem == QS_E5M2 ? qs_encode_e5m2(v, QS_OVF_SATFINITE)
                           : qs_encode_e4m3(v, QS_OVF_SATFINITE);
}

/* [REC-AMAX]: fmaxf-style maximum from 0: a NaN never replaces the running maximum. */
float qsi_amax(const float *v, int64_t n, int64_t stride)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float x = v[i * stride];
        float ax = x < 0.0f ? -x : x;
        if (ax > a)
            a = ax;
    }
    return a;
}

/* [REC-DS-CALIB]: torch.aminmax-style maximum: any NaN makes the result NaN. */
float qsi_amax_nan(const float *v, int64_t n)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float x = v[i];
        if (x != x)
            return x;
        float ax = x < 0.0f ? -x : x;
        if (ax > a)
            a = ax;
    }
    return a;
}

qs_status qsi_alloc_2d(qs_ctx *ctx, qs_tensor *t, qs_dtype dt, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return qs_tensor_alloc(ctx, t, dt, 2, shape);
}

uint32_t qsi_code_get(const qs_tensor *t, size_t i)
{
    const uint8_t *b = t->data;
    if (t->dtype == QS_E2M1)
        return (i % 2 == 0) ? (uint32_t)(b[i / 2] & 0x0F) : (uint32_t)(b[i / 2] >> 4);
    return b[i];
}

void qsi_code_set(qs_tensor *t, size_t i, uint32_t code)
{
    uint8_t *b = t->data;
    if (t->dtype == QS_E2M1) {
        if (i % 2 == 0)
            b[i / 2] = (uint8_t)((b[i / 2] & 0xF0) | (code & 0x0F));
        else
            b[i / 2] = (uint8_t)((b[i / 2] & 0x0F) | ((code & 0x0F) << 4));
        return;
    }
    b[i] = (uint8_t)code;
}

float qsi_f32_get(const qs_tensor *t, size_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + i * sizeof v, sizeof v);
    return v;
}

void qsi_f32_set(qs_tensor *t, size_t i, float v)
{
    memcpy((char *)t->data + i * sizeof v, &v, sizeof v);
}

/* [REC-INPUT]: a 2-D BF16/FP16/FP32 tensor with both extents >= 1, decoded exactly. */
qs_status qsi_input_load(qs_ctx *ctx, const qs_tensor *x, qsi_input *in)
{
    memset(in, 0, sizeof *in);
    if (!x || !x->data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantize: x is NULL or has no data");
    if (x->dtype != QS_FP32 && x->dtype != QS_BF16 && x->dtype != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "quantize: x has dtype %s, expected fp32|bf16|fp16",
                            qs_dtype_name(x->dtype) ? qs_dtype_name(x->dtype) : "invalid");
    if (x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1) {
        char shape[200] = "[";
        for (int d = 0; d < x->ndim && d < QS_MAX_DIMS; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)x->shape[d]);
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "quantize: x must be 2-D with both extents >= 1, got shape %s]", shape);
    }
    in->dtype = x->dtype;
    in->m = x->shape[0];
    in->k = x->shape[1];
    size_t n = (size_t)in->m * (size_t)in->k;
    in->x = malloc(n * sizeof *in->x);
    if (!in->x)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantize: out of memory for x");
    for (size_t i = 0; i < n; i++) {
        if (x->dtype == QS_FP32) {
            memcpy(&in->x[i], (const char *)x->data + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, (const char *)x->data + 2 * i, 2);
            in->x[i] = x->dtype == QS_BF16 ? qs_bf16_to_f32(h) : qs_f16_to_f32(h);
        }
    }
    return QS_OK;
}

void qsi_input_free(qsi_input *in)
{
    free(in->x);
    in->x = NULL;
}

qs_status qs_tensor_amax(qs_ctx *ctx, const qs_tensor *x, float *amax)
{
    if (!amax)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "amax: result pointer is NULL");
    if (!x || (x->numel > 0 && !x->data))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "amax: x is NULL");
    if (x->dtype != QS_FP32 && x->dtype != QS_BF16 && x->dtype != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "amax: x must be fp32|bf16|fp16");
    float a = 0.0f;
    for (size_t i = 0; i < x->numel; i++) {
        float v;
        if (x->dtype == QS_FP32) {
            memcpy(&v, (const char *)x->data + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, (const char *)x->data + 2 * i, 2);
            v = x->dtype == QS_BF16 ? qs_bf16_to_f32(h) : qs_f16_to_f32(h);
        }
        float m = qsi_amax(&v, 1, 1);
        if (m > a)
            a = m;
    }
    *amax = a;
    return QS_OK;
}

/* ------------------------------------------------------------------ quantizer */

qs_status qs_quantizer_init(qs_ctx *ctx, qs_quantizer *q, const qs_recipe_config *cfg)
{
    if (!q)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantizer init: q is NULL");
    memset(q, 0, sizeof *q);
    qs_status s = qs_recipe_config_check(ctx, cfg);
    if (s != QS_OK)
        return s;
    q->cfg = *cfg;
    if (cfg->kind != QS_RECIPE_DELAYED)
        return QS_OK;
    /* [REC-DS-STATE]: scale 1, scale_inv 1, history all zero. */
    q->ds.history = calloc((size_t)cfg->history_len, sizeof(float));
    if (!q->ds.history)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantizer init: out of memory for the history");
    q->ds.len = cfg->history_len;
    q->ds.scale = 1.0f;
    q->ds.scale_inv = 1.0f;
    return QS_OK;
}

void qs_quantizer_free(qs_quantizer *q)
{
    if (!q)
        return;
    free(q->ds.history);
    memset(q, 0, sizeof *q);
}

void qs_quantized_free(qs_quantized *qz)
{
    if (!qz)
        return;
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        qs_tensor_free(&qz->data[d]);
        qs_tensor_free(&qz->scale[d]);
    }
    memset(qz, 0, sizeof *qz);
}

typedef qs_status (*quantize_fn)(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in,
                                 qs_quantized *out);

static qs_status call_current(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    return qsi_quantize_current(ctx, q, in, out);
}
static qs_status call_mxfp8(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    return qsi_quantize_mxfp8(ctx, q, in, out);
}
static qs_status call_block(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    return qsi_quantize_block(ctx, q, in, out);
}
static qs_status call_nvfp4(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    return qsi_quantize_nvfp4(ctx, q, in, out);
}

static qs_status call_axiswise(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    return qsi_quantize_axiswise(ctx, q, in, out);
}

static const quantize_fn quantize_table[QS_RECIPE_COUNT] = {
    [QS_RECIPE_DELAYED] = qsi_quantize_delayed,
    [QS_RECIPE_CURRENT] = call_current,
    [QS_RECIPE_MXFP8] = call_mxfp8,
    [QS_RECIPE_BLOCK] = call_block,
    [QS_RECIPE_NVFP4] = call_nvfp4,
    [QS_RECIPE_ROWWISE] = call_axiswise,
    [QS_RECIPE_ROWWISE_GW_HP] = call_axiswise};

qs_status qs_quantize(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x, qs_quantized *out)
{
    if (!q || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantize: q or out is NULL");
    memset(out, 0, sizeof *out);
    qs_status s = qs_recipe_config_check(ctx, &q->cfg);
    if (s != QS_OK)
        return s;
    if (q->cfg.kind == QS_RECIPE_DELAYED && (!q->ds.history || q->ds.len != q->cfg.history_len))
        return qs_ctx_error(ctx, QS_ERR_STATE, "quantize: delayed quantizer is not initialized");
    qsi_input in;
    s = qsi_input_load(ctx, x, &in);
    if (s != QS_OK)
        return s;
    out->cfg = q->cfg;
    out->elem = qs_recipe_elem_dtype(&q->cfg);
    out->rows = in.m;
    out->cols = in.k;
    s = quantize_table[q->cfg.kind](ctx, q, &in, out);
    qsi_input_free(&in);
    if (s != QS_OK)
        qs_quantized_free(out);
    return s;
}

/* ------------------------------------------------------------------ layouts */

/* Block length and scale dtype per recipe [REC-LAYOUT]; 0 for tensorwise, -1 for one
 * block per row of the copy (axiswise [REC-AX-LAYOUT]). */
static const struct {
    int64_t block;
    qs_dtype scale;
    int col_transposed;
} layout_table[QS_RECIPE_COUNT] = {
    [QS_RECIPE_DELAYED] = {0, QS_FP32, 1},       [QS_RECIPE_CURRENT] = {0, QS_FP32, 1},
    [QS_RECIPE_MXFP8] = {32, QS_E8M0, 0},        [QS_RECIPE_BLOCK] = {128, QS_FP32, 1},
    [QS_RECIPE_NVFP4] = {16, QS_E4M3, 1},        [QS_RECIPE_ROWWISE] = {-1, QS_FP32, 1},
    [QS_RECIPE_ROWWISE_GW_HP] = {-1, QS_FP32, 1}};

qs_status qs_recipe_layout(qs_ctx *ctx, const qs_recipe_config *cfg, int64_t rows, int64_t cols,
                           qs_direction dir, qs_copy_layout *out)
{
    qs_status s = qs_recipe_config_check(ctx, cfg);
    if (s != QS_OK)
        return s;
    if (!out || rows < 1 || cols < 1 || (int)dir < 0 || dir >= QS_DIR_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe layout: bad extent or direction");
    int64_t b = layout_table[cfg->kind].block;
    int tr = dir == QS_DIR_COL && layout_table[cfg->kind].col_transposed;
    int64_t r = tr ? cols : rows, c = tr ? rows : cols; /* the copy's [r, c] */
    out->data_dtype = qs_recipe_elem_dtype(cfg);
    out->data_shape[0] = r;
    out->data_shape[1] = c;
    out->scale_dtype = layout_table[cfg->kind].scale;
    out->scale_ndim = 2;
    qsi_ax_copy ax = b < 0 ? qsi_axiswise_copy(cfg, dir) : QSI_AX_ROWS;
    if (ax == QSI_AX_HP) /* [REC-AX-GWHP]: x^T as FP32 values */
        out->data_dtype = QS_FP32;
    if (b == 0 || ax != QSI_AX_ROWS) { /* [REC-TW-LAYOUT] */
        out->scale_ndim = 1;
        out->scale_shape[0] = 1;
        out->scale_shape[1] = 0;
    } else if (b < 0) { /* [REC-AX-LAYOUT]: one scale per row of the copy */
        out->scale_shape[0] = r;
        out->scale_shape[1] = 1;
    } else if (cfg->kind == QS_RECIPE_MXFP8 && dir == QS_DIR_COL) { /* [REC-MX-LAYOUT] */
        out->scale_shape[0] = qsi_ceil_div(rows, b);
        out->scale_shape[1] = cols;
    } else { /* [REC-BLK-*] [REC-NV-*]: 1-D blocks along the copy's rows, or 2-D tiles */
        out->scale_shape[0] = cfg->tile_2d ? qsi_ceil_div(r, b) : r;
        out->scale_shape[1] = qsi_ceil_div(c, b);
    }
    return QS_OK;
}

qs_status qs_quantized_alloc(qs_ctx *ctx, const qs_recipe_config *cfg, int64_t rows, int64_t cols,
                             qs_quantized *out)
{
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    out->elem = qs_recipe_elem_dtype(cfg);
    out->rows = rows;
    out->cols = cols;
    const int want[QS_DIR_COUNT] = {cfg->rowwise, cfg->columnwise};
    qs_status s = QS_OK;
    for (int d = 0; d < QS_DIR_COUNT && s == QS_OK; d++) {
        if (!want[d])
            continue;
        qs_copy_layout l;
        s = qs_recipe_layout(ctx, cfg, rows, cols, (qs_direction)d, &l);
        if (s == QS_OK)
            s = qs_tensor_alloc(ctx, &out->data[d], l.data_dtype, 2, l.data_shape);
        if (s == QS_OK)
            s = qs_tensor_alloc(ctx, &out->scale[d], l.scale_dtype, l.scale_ndim, l.scale_shape);
    }
    if (s != QS_OK)
        qs_quantized_free(out);
    return s;
}

static qs_status check_tensor(qs_ctx *ctx, const qs_tensor *t, const char *name, qs_dtype dt,
                              int ndim, const int64_t *shape)
{
    if (!t->data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s is missing", name);
    if (t->dtype != dt)
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "%s has dtype %s, expected %s", name,
                            qs_dtype_name(t->dtype) ? qs_dtype_name(t->dtype) : "invalid",
                            qs_dtype_name(dt));
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return QS_OK;
    if (ndim == 1)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s must have shape [%lld]", name,
                            (long long)shape[0]);
    return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s must have shape [%lld, %lld]", name,
                        (long long)shape[0], (long long)shape[1]);
}

qs_status qs_quantized_check(qs_ctx *ctx, const qs_quantized *qz)
{
    static const char *const names[QS_DIR_COUNT][2] = {{"row_data", "row_scale"},
                                                       {"col_data", "col_scale"}};
    if (!qz)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantized result is NULL");
    int any = 0;
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        if (!qz->data[d].data && !qz->scale[d].data)
            continue;
        any = 1;
        qs_copy_layout l;
        qs_status s = qs_recipe_layout(ctx, &qz->cfg, qz->rows, qz->cols, (qs_direction)d, &l);
        if (s == QS_OK && qz->elem != qs_recipe_elem_dtype(&qz->cfg))
            s = qs_ctx_error(ctx, QS_ERR_DTYPE, "element dtype %s does not match the recipe",
                             qs_dtype_name(qz->elem) ? qs_dtype_name(qz->elem) : "invalid");
        if (s == QS_OK)
            s = check_tensor(ctx, &qz->data[d], names[d][0], l.data_dtype, 2, l.data_shape);
        if (s == QS_OK)
            s = check_tensor(ctx, &qz->scale[d], names[d][1], l.scale_dtype, l.scale_ndim,
                             l.scale_shape);
        if (s != QS_OK)
            return s;
    }
    if (!any)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantized result holds no copy");
    return QS_OK;
}

/* ------------------------------------------------------------------ dequantization */

typedef void (*dequantize_fn)(const qs_quantized *qz, qs_direction dir, float *y);

static const dequantize_fn dequantize_table[QS_RECIPE_COUNT] = {
    [QS_RECIPE_DELAYED] = qsi_dequantize_tensorwise,
    [QS_RECIPE_CURRENT] = qsi_dequantize_tensorwise,
    [QS_RECIPE_MXFP8] = qsi_dequantize_mxfp8,
    [QS_RECIPE_BLOCK] = qsi_dequantize_block,
    [QS_RECIPE_NVFP4] = qsi_dequantize_nvfp4,
    [QS_RECIPE_ROWWISE] = qsi_dequantize_axiswise,
    [QS_RECIPE_ROWWISE_GW_HP] = qsi_dequantize_axiswise};

qs_status qs_dequantize(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir, qs_tensor *y)
{
    if (!qz || !y)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dequantize: qz or y is NULL");
    if ((int)dir < 0 || dir >= QS_DIR_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dequantize: unknown direction %d", (int)dir);
    if ((int)qz->cfg.kind < 0 || qz->cfg.kind >= QS_RECIPE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dequantize: unknown recipe");
    if (qz->data[dir].dtype == QS_DTYPE_INVALID || !qz->data[dir].data || !qz->scale[dir].data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dequantize: the %s copy was not produced",
                            dir == QS_DIR_ROW ? "rowwise" : "columnwise");
    qs_status s = qs_quantized_check(ctx, qz); /* results assembled from files */
    if (s != QS_OK)
        return s;
    s = qsi_alloc_2d(ctx, y, QS_FP32, qz->rows, qz->cols);
    if (s != QS_OK)
        return s;
    dequantize_table[qz->cfg.kind](qz, dir, y->data);
    return QS_OK;
}

/* ------------------------------------------------------------------ padded layouts */

static int64_t round_up(int64_t a, int64_t b)
{
    return qsi_ceil_div(a, b) * b;
}

/* [REC-MX-LAYOUT] [REC-NV-LAYOUT]: copy the logical scale into the padded grid. */
qs_status qs_scale_padded(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir, qs_tensor *padded)
{
    if (!qz || !padded || (int)dir < 0 || dir >= QS_DIR_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scale layout: bad argument");
    if (qz->cfg.kind != QS_RECIPE_MXFP8 && qz->cfg.kind != QS_RECIPE_NVFP4)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "scale layout: padded layouts are specified for mxfp8 and nvfp4 only");
    const qs_tensor *s = &qz->scale[dir];
    if (!s->data || s->ndim != 2)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scale layout: the %s copy was not produced",
                            dir == QS_DIR_ROW ? "rowwise" : "columnwise");
    int64_t r = s->shape[0], c = s->shape[1];
    int mx_col = qz->cfg.kind == QS_RECIPE_MXFP8 && dir == QS_DIR_COL;
    int64_t pr = mx_col ? round_up(r, 4) : round_up(r, 128);
    int64_t pc = mx_col ? round_up(c, 128) : round_up(c, 4);
    qs_status st = qsi_alloc_2d(ctx, padded, s->dtype, pr, pc);
    if (st != QS_OK)
        return st;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            qsi_code_set(padded, (size_t)(i * pc + j), qsi_code_get(s, (size_t)(i * c + j)));
    return QS_OK;
}
