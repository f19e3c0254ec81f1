/* linear.c: the quantized and the high-precision linear layer of spec/gemm.md section 6.
 * Each of fprop, dgrad and wgrad is one qs_gemm (TN) over views of the quantized copies
 * [GEMM-LIN-FPROP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]; layouts[] says, per recipe, how a
 * direction's codes and scales map onto a GEMM operand; default_acc[] is
 * [GEMM-LIN-ACC-DEFAULT]. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels_internal.h"
#include "recipe_internal.h"
#include "qspec/format.h"
#include "qspec/linear.h"

/* ------------------------------------------------------------ tables */

static const char *const gemm_names[QS_LINEAR_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};

const char *qs_linear_gemm_name(qs_linear_gemm g)
{
    return (unsigned)g < QS_LINEAR_GEMM_COUNT ? gemm_names[g] : NULL;
}

/* [GEMM-LIN-ACC-DEFAULT]: TE runs tensorwise FP8 fprop with fast accumulation and
 * dgrad/wgrad with the split accumulator; block scaling requires split for all three;
 * MXFP8 and NVFP4 have no Hopper tensor-core path and accumulate in FP32. */
static const struct {
    qs_recipe_kind kind;
    qs_gemm_acc acc[QS_LINEAR_GEMM_COUNT];
} default_acc[] = {
    {QS_RECIPE_DELAYED,
     {{QS_GEMM_ACC_HOPPER_FP8_TC, 0},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128}}},
    {QS_RECIPE_CURRENT,
     {{QS_GEMM_ACC_HOPPER_FP8_TC, 0},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128}}},
    {QS_RECIPE_BLOCK,
     {{QS_GEMM_ACC_HOPPER_FP8_TC, 128},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128}}},
    {QS_RECIPE_MXFP8,
     {{QS_GEMM_ACC_FP32_SEQ, 0}, {QS_GEMM_ACC_FP32_SEQ, 0}, {QS_GEMM_ACC_FP32_SEQ, 0}}},
    {QS_RECIPE_NVFP4,
     {{QS_GEMM_ACC_FP32_SEQ, 0}, {QS_GEMM_ACC_FP32_SEQ, 0}, {QS_GEMM_ACC_FP32_SEQ, 0}}},
    /* torchao: output with fast accumulation, grad_input and grad_weight without; the
     * high-precision wgrad of rowwise_with_gw_hp is a BF16 GEMM, FP32 accumulation */
    {QS_RECIPE_ROWWISE,
     {{QS_GEMM_ACC_HOPPER_FP8_TC, 0},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128},
      {QS_GEMM_ACC_HOPPER_FP8_TC, 128}}},
    {QS_RECIPE_ROWWISE_GW_HP,
     {{QS_GEMM_ACC_HOPPER_FP8_TC, 0}, {QS_GEMM_ACC_HOPPER_FP8_TC, 128}, {QS_GEMM_ACC_FP32_SEQ, 0}}},
};

qs_gemm_acc qs_linear_default_acc(qs_recipe_kind kind, qs_linear_gemm g)
{
    qs_gemm_acc exact = {QS_GEMM_ACC_EXACT, 0};
    if ((unsigned)g >= QS_LINEAR_GEMM_COUNT)
        return exact;
    for (size_t i = 0; i < QSI_ARRAY_LEN(default_acc); i++)
        if (default_acc[i].kind == kind)
            return default_acc[i].acc[g];
    return exact;
}

void qs_linear_options_default(qs_linear_options *opt, qs_recipe_kind kind)
{
    for (int g = 0; g < QS_LINEAR_GEMM_COUNT; g++)
        opt->acc[g] = qs_linear_default_acc(kind, (qs_linear_gemm)g);
    opt->out_dtype = QS_BF16;
}

/* Per recipe: the GEMM scaling mode of its copies, the scale-group width along k, the
 * rows one scale covers in 2-D tiles, and whether the columnwise codes are stored
 * transposed ([REC-LAYOUT]: all but MXFP8). Block scales in 128x128 tiles are handed to the
 * GEMM one per tile row and group, as block_128x128 ([GEMM-ACC-HOPPER-VEC] promotes them
 * otherwise than 1x128 ones); NVFP4's 16x16 tiles one per row (its GEMM mode is per row). */
static const struct {
    qs_recipe_kind kind;
    qs_gemm_scaling mode;
    int64_t group;
    int64_t tile_rows;
    int col_transposed;
} layouts[] = {
    {QS_RECIPE_DELAYED, QS_GEMM_SCALE_TENSOR, 0, 0, 1},
    {QS_RECIPE_CURRENT, QS_GEMM_SCALE_TENSOR, 0, 0, 1},
    {QS_RECIPE_BLOCK, QS_GEMM_SCALE_BLOCK_1X128, 128, 128, 1},
    {QS_RECIPE_MXFP8, QS_GEMM_SCALE_MX, 32, 0, 0},
    {QS_RECIPE_NVFP4, QS_GEMM_SCALE_NVFP4, 16, 16, 1},
    /* axiswise: one scale per row, handed to an operand view as 1x128 groups that repeat it */
    {QS_RECIPE_ROWWISE, QS_GEMM_SCALE_BLOCK_1X128, 128, 0, 1},
    {QS_RECIPE_ROWWISE_GW_HP, QS_GEMM_SCALE_BLOCK_1X128, 128, 0, 1},
};

static int layout_index(qs_recipe_kind kind)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(layouts); i++)
        if (layouts[i].kind == kind)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------------ operand views */

/* Storage index of the scale of operand row r, group g. */
static size_t scale_index(const qs_quantized *qz, qs_direction dir, int li, int64_t r, int64_t g)
{
    int64_t sc = qz->scale[dir].shape[1];
    if (qsi_recipe_is_axiswise(layouts[li].kind)) /* [REC-AX-LAYOUT]: [rows, 1] or [1] */
        return qz->scale[dir].ndim == 1 ? 0 : (size_t)r;
    if (layouts[li].kind == QS_RECIPE_MXFP8 && dir == QS_DIR_COL)
        return (size_t)(g * sc + r); /* [ceil(R/32), C]: blocks run down the columns */
    int64_t tile = qz->cfg.tile_2d && layouts[li].tile_rows ? layouts[li].tile_rows : 1;
    return (size_t)((r / tile) * sc + g);
}

static float scale_value(const qs_quantized *qz, qs_direction dir, size_t i)
{
    const qs_tensor *s = &qz->scale[dir];
    if (s->dtype == QS_FP32)
        return qsi_f32_get(s, i);
    return qs_decode_f32(s->dtype, qsi_code_get(s, i));
}

/* Decoded element values of the view: operand (r, k) is input element (r, k) for the
 * rowwise copy and (k, r) for the columnwise one. */
static void view_values(const qs_quantized *qz, qs_direction dir, int li, qs_linear_operand *o)
{
    int64_t R = qz->rows, C = qz->cols;
    for (int64_t r = 0; r < o->rows; r++) {
        for (int64_t k = 0; k < o->k; k++) {
            int64_t i = dir == QS_DIR_ROW ? r : k, j = dir == QS_DIR_ROW ? k : r;
            size_t at = (dir == QS_DIR_COL && layouts[li].col_transposed) ? (size_t)(j * R + i)
                                                                          : (size_t)(i * C + j);
            const qs_tensor *d = &qz->data[dir]; /* FP32: the high-precision copy [REC-AX-GWHP] */
            o->values[r * o->k + k] = d->dtype == QS_FP32
                                          ? qsi_f32_get(d, at)
                                          : qs_decode_f32(d->dtype, qsi_code_get(d, at));
        }
    }
}

qs_status qs_linear_operand_from(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir,
                                 qs_linear_operand *out)
{
    if (!qz || !out || (unsigned)dir >= QS_DIR_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear: NULL quantized tensor or view");
    memset(out, 0, sizeof *out);
    int li = layout_index(qz->cfg.kind);
    if (li < 0 || qz->data[dir].dtype == QS_DTYPE_INVALID || !qz->data[dir].data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: the %s copy of the quantized tensor was not produced",
                            dir == QS_DIR_ROW ? "rowwise" : "columnwise");
    out->rows = dir == QS_DIR_ROW ? qz->rows : qz->cols;
    out->k = dir == QS_DIR_ROW ? qz->cols : qz->rows;
    int64_t group = layouts[li].group, ng = group ? qsi_ceil_div(out->k, group) : 0;
    int64_t tile =
        layouts[li].kind == QS_RECIPE_BLOCK && qz->cfg.tile_2d ? layouts[li].tile_rows : 1;
    int64_t srows = qsi_ceil_div(out->rows, tile);
    out->values = malloc((size_t)(out->rows * out->k) * sizeof(float));
    out->scales = ng ? malloc((size_t)(srows * ng) * sizeof(float)) : NULL;
    if (!out->values || (ng && !out->scales)) {
        qs_linear_operand_free(out);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "linear: out of memory");
    }
    view_values(qz, dir, li, out);
    for (int64_t r = 0; r < srows && ng; r++)
        for (int64_t g = 0; g < ng; g++)
            out->scales[r * ng + g] = scale_value(qz, dir, scale_index(qz, dir, li, r * tile, g));
    out->op.data = out->values;
    out->op.scaling = tile > 1 ? QS_GEMM_SCALE_BLOCK_128X128 : layouts[li].mode;
    out->op.block_scale = out->scales;
    out->op.tensor_scale = 1.0f;
    out->op.elem = qz->elem;
    if (layouts[li].mode == QS_GEMM_SCALE_TENSOR)
        out->op.tensor_scale = qsi_f32_get(&qz->scale[dir], 0); /* scale_inv */
    if (layouts[li].mode == QS_GEMM_SCALE_NVFP4)
        out->op.tensor_scale = qz->global_dec[dir]; /* S_dec */
    return QS_OK;
}

void qs_linear_operand_free(qs_linear_operand *o)
{
    if (!o)
        return;
    free(o->values);
    free(o->scales);
    memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------ one GEMM through the table */

/* A quantized copy as a coded operand of the gemm slot [CASE-OP-GEMM]: rows x k codes with
 * k contiguous and the scales in the ABI's layout. What the copy does not hold in that form
 * (MXFP8's columnwise codes and scales, stored untransposed; NVFP4 16x16 tile scales, one
 * row per tile) is built into data/scale, owned here. */
typedef struct coded_view {
    qs_gemm_coded_operand op;
    int64_t rows, k;
    qs_tensor data, scale;
} coded_view;

static void coded_view_free(coded_view *v)
{
    qs_tensor_free(&v->data);
    qs_tensor_free(&v->scale);
}

/* [ceil(R/16), G] tile scales of an NVFP4 copy repeated on each of its R rows. */
static qs_status expand_tile_scales(qs_ctx *ctx, const qs_tensor *s, int64_t rows, qs_tensor *out)
{
    int64_t shape[2] = {rows, s->shape[1]};
    qs_status st = qs_tensor_alloc(ctx, out, s->dtype, 2, shape);
    for (int64_t r = 0; st == QS_OK && r < rows; r++)
        memcpy((uint8_t *)out->data + r * shape[1], (const uint8_t *)s->data + (r / 16) * shape[1],
               (size_t)shape[1]);
    return st;
}

static qs_status coded_view_from(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir,
                                 coded_view *v)
{
    memset(v, 0, sizeof *v);
    int li = layout_index(qz->cfg.kind);
    if (li < 0 || qz->data[dir].dtype == QS_DTYPE_INVALID || !qz->data[dir].data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: the %s copy of the quantized tensor was not produced",
                            dir == QS_DIR_ROW ? "rowwise" : "columnwise");
    v->rows = dir == QS_DIR_ROW ? qz->rows : qz->cols;
    v->k = dir == QS_DIR_ROW ? qz->cols : qz->rows;
    qs_gemm_coded_operand *op = &v->op;
    op->scaling = layouts[li].mode;
    op->data = &qz->data[dir];
    op->scale = &qz->scale[dir];
    op->tensor_scale = 1.0f;
    qs_status s = QS_OK;
    switch (layouts[li].mode) {
    case QS_GEMM_SCALE_TENSOR:
        op->scale = NULL;
        op->tensor_scale = qsi_f32_get(&qz->scale[dir], 0); /* scale_inv */
        break;
    case QS_GEMM_SCALE_BLOCK_1X128:
        if (qz->cfg.tile_2d)
            op->scaling = QS_GEMM_SCALE_BLOCK_128X128;
        break;
    case QS_GEMM_SCALE_MX:
        if (dir == QS_DIR_COL) { /* [R, C] codes and [ceil(R/32), C] scales, transposed */
            s = qsi_transpose_tensor(ctx, &qz->data[dir], &v->data);
            if (s == QS_OK)
                s = qsi_transpose_tensor(ctx, &qz->scale[dir], &v->scale);
            op->data = &v->data;
            op->scale = &v->scale;
        }
        break;
    case QS_GEMM_SCALE_NVFP4:
        op->tensor_scale = qz->global_dec[dir]; /* S_dec */
        if (qz->cfg.tile_2d) {
            s = expand_tile_scales(ctx, &qz->scale[dir], v->rows, &v->scale);
            op->scale = &v->scale;
        }
        break;
    default:
        break;
    }
    if (s != QS_OK)
        coded_view_free(v);
    return s;
}

static qs_status check_out_dtype(qs_ctx *ctx, qs_dtype dt)
{
    if (dt != QS_FP32 && dt != QS_BF16 && dt != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "linear: output dtype %s (fp32, bf16 or fp16)",
                            qs_dtype_name(dt) ? qs_dtype_name(dt) : "invalid");
    return QS_OK;
}

/* ------------------------------------------------------------ axiswise GEMMs */

/* [GEMM-LIN-AX-OPERAND]: a copy of the axiswise recipes as an operand of the gemm slot —
 * its codes (or, for the high-precision copy, its FP32 values) with unit tensor scaling —
 * and its decode scale per operand row (a tensorwise copy repeats its one scale). */
typedef struct ax_view {
    qs_gemm_coded_operand op;
    int64_t rows, k;
    float *scale; /* rows entries */
} ax_view;

static qs_status ax_view_from(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir, ax_view *v)
{
    memset(v, 0, sizeof *v);
    if (qz->data[dir].dtype == QS_DTYPE_INVALID || !qz->data[dir].data || !qz->scale[dir].data)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: the %s copy of the quantized tensor was not produced",
                            dir == QS_DIR_ROW ? "rowwise" : "columnwise");
    v->rows = qz->data[dir].shape[0]; /* every copy is stored [rows of the copy, k] */
    v->k = qz->data[dir].shape[1];
    v->op.scaling = qz->data[dir].dtype == QS_FP32 ? QS_GEMM_SCALE_NONE : QS_GEMM_SCALE_TENSOR;
    v->op.data = &qz->data[dir];
    v->op.scale = NULL;
    v->op.tensor_scale = 1.0f;
    v->scale = malloc((size_t)v->rows * sizeof(float));
    if (!v->scale)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "linear: out of memory");
    int tensorwise = qz->scale[dir].ndim == 1;
    for (int64_t r = 0; r < v->rows; r++)
        v->scale[r] = qsi_f32_get(&qz->scale[dir], tensorwise ? 0 : (size_t)r);
    return QS_OK;
}

/* Value i of a GEMM result of dtype FP32 or BF16. */
static float result_value(const qs_tensor *t, size_t i)
{
    return t->dtype == QS_BF16 ? qs_bf16_to_f32(((const uint16_t *)t->data)[i])
                               : ((const float *)t->data)[i];
}

/* Stores value i (a BF16 value, or any value for FP32/FP16) into a result of dtype dt. */
static void store_value(qs_tensor *t, size_t i, float v)
{
    if (t->dtype == QS_BF16)
        ((uint16_t *)t->data)[i] = qs_f32_to_bf16(v);
    else if (t->dtype == QS_FP16)
        ((uint16_t *)t->data)[i] = qs_f32_to_f16(v);
    else
        ((float *)t->data)[i] = v;
}

/* One GEMM of the axiswise recipes. [GEMM-LIN-AX-FPROP] (fprop, torch's rowwise kernel):
 * z = the slot's FP32 result, y = bf16(fl(fl(z * sb[n]) * sa[m])). [GEMM-LIN-AX-POST]
 * (dgrad; wgrad of rowwise: torchao scales after a unit-scaled BF16 GEMM): p = the slot's
 * BF16 result, y = bf16(fl(p * fl(sa[m] * sb[n]))). [GEMM-LIN-AX-GWHP] (wgrad of
 * rowwise_with_gw_hp): the slot's result over the high-precision copies, rounded to dt.
 * Then y is converted to dt (exact for FP32; BF16 to FP16 rounds). */
static qs_status axiswise_gemm(qs_ctx *ctx, qs_linear_gemm g, const qs_quantized *qa,
                               qs_direction da, const qs_quantized *qb, qs_direction db,
                               qs_gemm_acc acc, qs_dtype dt, qs_tensor *out)
{
    ax_view a, b;
    qs_tensor p;
    memset(&b, 0, sizeof b);
    memset(&p, 0, sizeof p);
    memset(out, 0, sizeof *out);
    qs_status s = ax_view_from(ctx, qa, da, &a);
    if (s == QS_OK)
        s = ax_view_from(ctx, qb, db, &b);
    if (s == QS_OK && a.k != b.k)
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "linear: inner extents %lld and %lld differ",
                         (long long)a.k, (long long)b.k);
    int hp = s == QS_OK && a.op.scaling == QS_GEMM_SCALE_NONE;
    if (s == QS_OK && hp != (b.op.scaling == QS_GEMM_SCALE_NONE))
        s = qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                         "linear: %s pairs a high-precision copy with a quantized one",
                         qs_linear_gemm_name(g));
    if (s == QS_OK && hp) { /* [GEMM-LIN-AX-GWHP] */
        s = qsi_k_gemm(ctx, &a.op, &b.op, a.rows, b.rows, a.k, acc, dt, out);
        free(a.scale);
        free(b.scale);
        return s;
    }
    int fprop = g == QS_LINEAR_FPROP;
    if (s == QS_OK)
        s = qsi_k_gemm(ctx, &a.op, &b.op, a.rows, b.rows, a.k, acc, fprop ? QS_FP32 : QS_BF16, &p);
    int64_t shape[2] = {a.rows, b.rows};
    if (s == QS_OK)
        s = qs_tensor_alloc(ctx, out, dt, 2, shape);
    for (int64_t m = 0; s == QS_OK && m < a.rows; m++) {
        for (int64_t n = 0; n < b.rows; n++) {
            size_t i = (size_t)(m * b.rows + n);
            float z = result_value(&p, i);
            float y = fprop ? (z * b.scale[n]) * a.scale[m] : z * (a.scale[m] * b.scale[n]);
            store_value(out, i, qs_round_bf16(y));
        }
    }
    qs_tensor_free(&p);
    free(a.scale);
    free(b.scale);
    if (s != QS_OK)
        qs_tensor_free(out);
    return s;
}

/* One GEMM over two quantized copies [GEMM-LIN-FPROP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]. */
static qs_status quantized_gemm(qs_ctx *ctx, qs_linear_gemm g, const qs_quantized *qa,
                                qs_direction da, const qs_quantized *qb, qs_direction db,
                                qs_gemm_acc acc, qs_dtype dt, qs_tensor *out)
{
    coded_view a, b;
    memset(&b, 0, sizeof b);
    qs_status s = check_out_dtype(ctx, dt);
    if (s == QS_OK && qsi_recipe_is_axiswise(qa->cfg.kind))
        return axiswise_gemm(ctx, g, qa, da, qb, db, acc, dt, out);
    if (s == QS_OK)
        s = coded_view_from(ctx, qa, da, &a);
    else
        memset(&a, 0, sizeof a);
    if (s == QS_OK)
        s = coded_view_from(ctx, qb, db, &b);
    if (s == QS_OK && a.k != b.k)
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "linear: inner extents %lld and %lld differ",
                         (long long)a.k, (long long)b.k);
    if (s == QS_OK)
        s = qsi_k_gemm(ctx, &a.op, &b.op, a.rows, b.rows, a.k, acc, dt, out);
    coded_view_free(&a);
    coded_view_free(&b);
    return s;
}

/* ------------------------------------------------------------ the quantized linear */

/* [GEMM-LIN-HYBRID]: each tensor is quantized by a quantizer of its own role (so HYBRID
 * gives E4M3 for X and W, E5M2 for dY), all of one recipe, producing both copies. */
static qs_status check_quantizer(qs_ctx *ctx, const qs_quantizer *q, qs_tensor_role role,
                                 qs_recipe_kind kind, const char *name)
{
    if (!q)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear: quantizer '%s' is NULL", name);
    if (q->cfg.role != role)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: quantizer '%s' has role %s, the linear needs %s", name,
                            qs_tensor_role_name(q->cfg.role), qs_tensor_role_name(role));
    if (q->cfg.kind != kind)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: quantizer '%s' is %s, the others are %s", name,
                            qs_recipe_kind_name(q->cfg.kind), qs_recipe_kind_name(kind));
    if (!q->cfg.rowwise || !q->cfg.columnwise)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear: quantizer '%s' must produce both copies", name);
    return QS_OK;
}

static qs_status check_2d(qs_ctx *ctx, const qs_tensor *t, const char *name)
{
    if (!t || t->ndim != 2)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "linear: '%s' must be a 2-D tensor", name);
    return QS_OK;
}

qs_status qs_linear_forward(qs_ctx *ctx, const qs_linear_options *opt, qs_quantizer *qx,
                            qs_quantizer *qw, const qs_tensor *x, const qs_tensor *w, qs_tensor *y,
                            qs_quantized *xq, qs_quantized *wq)
{
    qs_status s;
    if (!opt || !y || !xq || !wq || !qx)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear_forward: NULL argument");
    if ((s = check_quantizer(ctx, qx, QS_ROLE_INPUT, qx->cfg.kind, "x")) != QS_OK ||
        (s = check_quantizer(ctx, qw, QS_ROLE_WEIGHT, qx->cfg.kind, "w")) != QS_OK ||
        (s = check_2d(ctx, x, "x")) != QS_OK || (s = check_2d(ctx, w, "w")) != QS_OK)
        return s;
    if (x->shape[1] != w->shape[1])
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "linear_forward: x is [%lld,%lld], w [%lld,%lld]",
                            (long long)x->shape[0], (long long)x->shape[1], (long long)w->shape[0],
                            (long long)w->shape[1]);
    memset(xq, 0, sizeof *xq);
    memset(wq, 0, sizeof *wq);
    s = qsi_k_quantize(ctx, qx, x, xq);
    if (s == QS_OK)
        s = qsi_k_quantize(ctx, qw, w, wq);
    /* [GEMM-LIN-FPROP]: Y = X W^T reads the rowwise copies of X and W. */
    if (s == QS_OK)
        s = quantized_gemm(ctx, QS_LINEAR_FPROP, xq, QS_DIR_ROW, wq, QS_DIR_ROW,
                           opt->acc[QS_LINEAR_FPROP], opt->out_dtype, y);
    if (s != QS_OK) {
        qs_quantized_free(xq);
        qs_quantized_free(wq);
    }
    return s;
}

qs_status qs_linear_backward(qs_ctx *ctx, const qs_linear_options *opt, qs_quantizer *qdy,
                             const qs_tensor *dy, const qs_quantized *xq, const qs_quantized *wq,
                             qs_tensor *dx, qs_tensor *dw)
{
    qs_status s;
    if (!opt || !xq || !wq || !dx || !dw)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear_backward: NULL argument");
    if ((s = check_quantizer(ctx, qdy, QS_ROLE_GRAD_OUTPUT, xq->cfg.kind, "dy")) != QS_OK ||
        (s = check_2d(ctx, dy, "dy")) != QS_OK)
        return s;
    if (dy->shape[0] != xq->rows || dy->shape[1] != wq->rows)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "linear_backward: dy is [%lld,%lld], need [%lld,%lld]",
                            (long long)dy->shape[0], (long long)dy->shape[1], (long long)xq->rows,
                            (long long)wq->rows);
    if (xq->cfg.kind == QS_RECIPE_NVFP4 && qdy->cfg.rht != xq->cfg.rht)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "linear_backward: nvfp4 wgrad needs the Hadamard transform on both "
                            "or neither of dy and x [GEMM-LIN-WGRAD]");
    qs_quantized dyq;
    memset(&dyq, 0, sizeof dyq);
    memset(dx, 0, sizeof *dx);
    memset(dw, 0, sizeof *dw);
    s = qsi_k_quantize(ctx, qdy, dy, &dyq);
    /* [GEMM-LIN-DGRAD]: dX = dY W reads dY rowwise and W columnwise (W^T, k along N). */
    if (s == QS_OK)
        s = quantized_gemm(ctx, QS_LINEAR_DGRAD, &dyq, QS_DIR_ROW, wq, QS_DIR_COL,
                           opt->acc[QS_LINEAR_DGRAD], opt->out_dtype, dx);
    /* [GEMM-LIN-WGRAD]: dW = dY^T X reads dY and X columnwise (k along M). */
    if (s == QS_OK)
        s = quantized_gemm(ctx, QS_LINEAR_WGRAD, &dyq, QS_DIR_COL, xq, QS_DIR_COL,
                           opt->acc[QS_LINEAR_WGRAD], opt->out_dtype, dw);
    qs_quantized_free(&dyq);
    if (s != QS_OK) {
        qs_tensor_free(dx);
        qs_tensor_free(dw);
    }
    return s;
}

/* ------------------------------------------------------------ the high-precision linear */

/* Loads a BF16 (or FP16/FP32) 2-D tensor, optionally transposed, as FP32 values. */
static qs_status load_values(qs_ctx *ctx, const qs_tensor *t, int transpose, float **out)
{
    qsi_input in;
    qs_status s = qsi_input_load(ctx, t, &in);
    if (s != QS_OK)
        return s;
    if (!transpose) {
        *out = in.x;
        return QS_OK;
    }
    *out = malloc((size_t)(in.m * in.k) * sizeof(float));
    if (*out)
        qsi_transpose_f32(in.x, in.m, in.k, *out);
    qsi_input_free(&in);
    return *out ? QS_OK : qs_ctx_error(ctx, QS_ERR_NOMEM, "linear: out of memory");
}

/* [GEMM-LIN-HP]: out = a b^T with a [m,k], b [n,k] (after the transposes asked for). */
static qs_status hp_gemm(qs_ctx *ctx, const qs_tensor *a, int ta, const qs_tensor *b, int tb,
                         qs_tensor *out)
{
    float *va = NULL, *vb = NULL;
    qs_status s;
    if ((s = check_2d(ctx, a, "a")) != QS_OK || (s = check_2d(ctx, b, "b")) != QS_OK)
        return s;
    int64_t m = a->shape[ta ? 1 : 0], k = a->shape[ta ? 0 : 1];
    int64_t n = b->shape[tb ? 1 : 0], kb = b->shape[tb ? 0 : 1];
    if (k != kb)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "linear_hp: inner extents %lld and %lld differ",
                            (long long)k, (long long)kb);
    s = load_values(ctx, a, ta, &va);
    if (s == QS_OK)
        s = load_values(ctx, b, tb, &vb);
    if (s == QS_OK) { /* the values (exact in FP32) as unscaled FP32 operands */
        qs_tensor ta_v, tb_v;
        qsi_f32_view(&ta_v, va, m, k);
        qsi_f32_view(&tb_v, vb, n, k);
        qs_gemm_coded_operand oa = {QS_GEMM_SCALE_NONE, &ta_v, NULL, 1.0f};
        qs_gemm_coded_operand ob = {QS_GEMM_SCALE_NONE, &tb_v, NULL, 1.0f};
        qs_gemm_acc acc = {QS_GEMM_ACC_FP32_SEQ, 0};
        s = qsi_k_gemm(ctx, &oa, &ob, m, n, k, acc, QS_BF16, out);
    }
    free(va);
    free(vb);
    return s;
}

qs_status qs_linear_hp_forward(qs_ctx *ctx, const qs_tensor *x, const qs_tensor *w, qs_tensor *y)
{
    if (!y)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear_hp_forward: y is NULL");
    return hp_gemm(ctx, x, 0, w, 0, y); /* Y = X W^T */
}

qs_status qs_linear_hp_backward(qs_ctx *ctx, const qs_tensor *dy, const qs_tensor *x,
                                const qs_tensor *w, qs_tensor *dx, qs_tensor *dw)
{
    if (!dx || !dw)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "linear_hp_backward: NULL output");
    qs_status s = hp_gemm(ctx, dy, 0, w, 1, dx); /* dX = dY W: B = W^T [K,N] */
    if (s == QS_OK)
        s = hp_gemm(ctx, dy, 1, x, 1, dw); /* dW = dY^T X: A = dY^T, B = X^T */
    if (s != QS_OK)
        qs_tensor_free(dx);
    return s;
}
