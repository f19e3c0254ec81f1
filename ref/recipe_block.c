/* recipe_block.c: DeepSeek-style block FP8 of spec/recipes.md — 1x128 blocks for
 * activations and gradients (columnwise = the transposed tensor, again in 1x128 blocks)
 * and 128x128 tiles for weights (one scale per tile, shared by the data and its
 * transpose). Each block uses the current-scaling rule with pow2 on by default. */
#include <float.h>
#include <stdlib.h>

#include "recipe_internal.h"

#define QSI_BLK 128

/* [REC-BLK-INF]: value_for_inf is the largest finite value of the input dtype. */
static float value_for_inf(qs_dtype in)
{
    if (in == QS_BF16)
        return qs_f32_from_bits(0x7F7F0000u); /* 0x1.FEp127 */
    if (in == QS_FP16)
        return 65504.0f;
    return FLT_MAX;
}

typedef struct blk_params {
    qs_dtype elem;
    float fp8_max, eps, vinf;
    int pow2;
} blk_params;

/* [REC-BLK-SCALE]: the scale of a block with amax a, and its scale_inv = 1/scale (RN). */
static float blk_scale(const blk_params *p, float a, float *scale_inv)
{
    float s = qs_scale_from_amax(a, p->fp8_max, p->eps, p->pow2, p->vinf);
    *scale_inv = 1.0f / s;
    return s;
}

/* [REC-BLK-1D]: 1x128 blocks along the rows of the rows x cols matrix src; data
 * [rows, cols], scale_inv [rows, ceil(cols/128)]; a partial block uses the elements present. */
static void blk_encode_rows(const blk_params *p, const float *src, int64_t rows, int64_t cols,
                            qs_tensor *data, qs_tensor *scale)
{
    int64_t nblk = qsi_ceil_div(cols, QSI_BLK);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t b = 0; b < nblk; b++) {
            int64_t c0 = b * QSI_BLK, len = cols - c0 < QSI_BLK ? cols - c0 : QSI_BLK;
            float sinv, s = blk_scale(p, qsi_amax(src + r * cols + c0, len, 1), &sinv);
            qsi_f32_set(scale, (size_t)(r * nblk + b), sinv);
            for (int64_t c = c0; c < c0 + len; c++)
                qsi_code_set(data, (size_t)(r * cols + c),
                             qsi_encode_fp8(p->elem, src[r * cols + c] * s));
        }
    }
}

/* amax of the tile of src [rows, cols] starting at (r0, c0), clipped to the matrix. */
static float tile_amax(const float *src, int64_t rows, int64_t cols, int64_t r0, int64_t c0)
{
    float a = 0.0f;
    for (int64_t r = r0; r < rows && r < r0 + QSI_BLK; r++) {
        int64_t len = cols - c0 < QSI_BLK ? cols - c0 : QSI_BLK;
        float t = qsi_amax(src + r * cols + c0, len, 1);
        if (t > a)
            a = t;
    }
    return a;
}

/* [REC-BLK-2D]: 128x128 tiles; data [M,K], scale_inv [ceil(M/128), ceil(K/128)]. */
static void blk_encode_tiles(const blk_params *p, const float *src, int64_t rows, int64_t cols,
                             qs_tensor *data, qs_tensor *scale)
{
    int64_t tr = qsi_ceil_div(rows, QSI_BLK), tc = qsi_ceil_div(cols, QSI_BLK);
    for (int64_t i = 0; i < tr; i++) {
        for (int64_t j = 0; j < tc; j++) {
            float sinv,
                s = blk_scale(p, tile_amax(src, rows, cols, i * QSI_BLK, j * QSI_BLK), &sinv);
            qsi_f32_set(scale, (size_t)(i * tc + j), sinv);
            for (int64_t r = i * QSI_BLK; r < rows && r < (i + 1) * QSI_BLK; r++)
                for (int64_t c = j * QSI_BLK; c < cols && c < (j + 1) * QSI_BLK; c++)
                    qsi_code_set(data, (size_t)(r * cols + c),
                                 qsi_encode_fp8(p->elem, src[r * cols + c] * s));
        }
    }
}

static qs_status quantize_2d(qs_ctx *ctx, const blk_params *p, const qs_quantizer *q,
                             const qsi_input *in, qs_quantized *out)
{
    int64_t M = in->m, K = in->k;
    qs_tensor *d = &out->data[QS_DIR_ROW], *s = &out->scale[QS_DIR_ROW];
    qs_status st = qsi_alloc_2d(ctx, d, out->elem, M, K);
    if (st == QS_OK)
        st = qsi_alloc_2d(ctx, s, QS_FP32, qsi_ceil_div(M, QSI_BLK), qsi_ceil_div(K, QSI_BLK));
    if (st != QS_OK)
        return st;
    blk_encode_tiles(p, in->x, M, K, d, s);
    /* [REC-BLK-2D-COL]: the columnwise copy is the transpose of the codes and of the grid. */
    if (q->cfg.columnwise) {
        st = qsi_transpose_tensor(ctx, d, &out->data[QS_DIR_COL]);
        if (st == QS_OK)
            st = qsi_transpose_tensor(ctx, s, &out->scale[QS_DIR_COL]);
    }
    if (!q->cfg.rowwise) {
        qs_tensor_free(d);
        qs_tensor_free(s);
    }
    return st;
}

qs_status qsi_quantize_block(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out)
{
    blk_params p = {out->elem, qsi_elem_max(out->elem), q->cfg.eps, value_for_inf(in->dtype),
                    q->cfg.pow2};
    if (q->cfg.tile_2d)
        return quantize_2d(ctx, &p, q, in, out);
    int64_t M = in->m, K = in->k;
    qs_status st = QS_OK;
    if (q->cfg.rowwise) {
        st = qsi_alloc_2d(ctx, &out->data[QS_DIR_ROW], out->elem, M, K);
        if (st == QS_OK)
            st = qsi_alloc_2d(ctx, &out->scale[QS_DIR_ROW], QS_FP32, M, qsi_ceil_div(K, QSI_BLK));
        if (st != QS_OK)
            return st;
        blk_encode_rows(&p, in->x, M, K, &out->data[QS_DIR_ROW], &out->scale[QS_DIR_ROW]);
    }
    if (!q->cfg.columnwise)
        return QS_OK;
    /* [REC-BLK-1D-COL]: the transposed tensor [K,M] in 1x128 blocks. */
    float *xt = malloc((size_t)(M * K) * sizeof *xt);
    if (!xt)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantize: out of memory");
    qsi_transpose_f32(in->x, M, K, xt);
    st = qsi_alloc_2d(ctx, &out->data[QS_DIR_COL], out->elem, K, M);
    if (st == QS_OK)
        st = qsi_alloc_2d(ctx, &out->scale[QS_DIR_COL], QS_FP32, K, qsi_ceil_div(M, QSI_BLK));
    if (st == QS_OK)
        blk_encode_rows(&p, xt, K, M, &out->data[QS_DIR_COL], &out->scale[QS_DIR_COL]);
    free(xt);
    return st;
}

/* The scale_inv of element (r, c) of a direction's data. */
static float blk_scale_at(const qs_quantized *qz, qs_direction dir, int64_t r, int64_t c)
{
    const qs_tensor *s = &qz->scale[dir];
    int64_t sc = s->shape[1];
    if (qz->cfg.tile_2d)
        return qsi_f32_get(s, (size_t)((r / QSI_BLK) * sc + c / QSI_BLK));
    return qsi_f32_get(s, (size_t)(r * sc + c / QSI_BLK));
}

/* [REC-DEQ-BLK]: y = decode(q) * scale_inv of its block, one FP32 multiply. */
void qsi_dequantize_block(const qs_quantized *qz, qs_direction dir, float *y)
{
    int64_t M = qz->rows, K = qz->cols;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t r = dir == QS_DIR_ROW ? m : k, c = dir == QS_DIR_ROW ? k : m;
            int64_t cols = dir == QS_DIR_ROW ? K : M;
            uint32_t code = qsi_code_get(&qz->data[dir], (size_t)(r * cols + c));
            y[m * K + k] = qs_decode_f32(qz->elem, code) * blk_scale_at(qz, dir, r, c);
        }
    }
}
