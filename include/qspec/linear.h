/* linear.h: the quantized linear layer of spec/gemm.md section 6 — fprop Y = X W^T,
 * dgrad dX = dY W and wgrad dW = dY^T X, each a qs_gemm over the quantized copy the
 * spec names, with the default accumulation of each GEMM per recipe — and the
 * high-precision linear (BF16 inputs, FP32 accumulation, BF16 output). */
#ifndef QSPEC_LINEAR_H
#define QSPEC_LINEAR_H

#include "gemm.h"
#include "recipe.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The three GEMMs of a linear layer [GEMM-LIN-FPROP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]. */
typedef enum qs_linear_gemm {
    QS_LINEAR_FPROP = 0, /* Y[M,N] = X[M,K] W[N,K]^T */
    QS_LINEAR_DGRAD,     /* dX[M,K] = dY[M,N] W[N,K] */
    QS_LINEAR_WGRAD,     /* dW[N,K] = dY[M,N]^T X[M,K] */
    QS_LINEAR_GEMM_COUNT
} qs_linear_gemm;

/* "fprop", "dgrad", "wgrad"; NULL for another value. */
const char *qs_linear_gemm_name(qs_linear_gemm g);

/* The default accumulation model of GEMM g under recipe kind [GEMM-LIN-ACC-DEFAULT];
 * an unknown kind or g gives exact. */
qs_gemm_acc qs_linear_default_acc(qs_recipe_kind kind, qs_linear_gemm g);

/* A GEMM operand viewed from direction dir of a quantized tensor of shape [R,C]
 * [GEMM-LIN-FPROP]: QS_DIR_ROW gives rows = R with k along C; QS_DIR_COL gives the
 * transposed tensor, rows = C with k along R. values and scales are owned by the view. */
typedef struct qs_linear_operand {
    qs_gemm_operand op;
    int64_t rows, k;
    float *values; /* rows x k decoded element values */
    float *scales; /* rows x ngroups group scales (NULL for tensorwise recipes); for a block
                      copy in 128x128 tiles (op.scaling QS_GEMM_SCALE_BLOCK_128X128) one row
                      per 128 rows */
} qs_linear_operand;

/* Builds the view; QS_ERR_INVALID_ARG if dir was not produced. Free with
 * qs_linear_operand_free (accepts NULL and freed views). */
qs_status qs_linear_operand_from(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir,
                                 qs_linear_operand *out);
void qs_linear_operand_free(qs_linear_operand *o);

/* Options of the quantized linear: the model of each GEMM (fill with
 * qs_linear_options_default) and the output dtype of every GEMM (FP32, BF16 or FP16). */
typedef struct qs_linear_options {
    qs_gemm_acc acc[QS_LINEAR_GEMM_COUNT];
    qs_dtype out_dtype;
} qs_linear_options;

/* The defaults for a recipe kind: qs_linear_default_acc per GEMM, BF16 output. */
void qs_linear_options_default(qs_linear_options *opt, qs_recipe_kind kind);

/* Quantized forward [GEMM-LIN-FPROP] [GEMM-LIN-HYBRID]: quantizes x [M,K] with qx (role
 * input) and w [N,K] with qw (role weight), both directions, and returns y [M,N]
 * (allocated, dtype opt->out_dtype) plus the quantized copies the backward reads (free
 * them with qs_quantized_free). Bad roles, shapes or dtypes: QS_ERR_INVALID_ARG /
 * QS_ERR_SHAPE / QS_ERR_DTYPE. */
qs_status qs_linear_forward(qs_ctx *ctx, const qs_linear_options *opt, qs_quantizer *qx,
                            qs_quantizer *qw, const qs_tensor *x, const qs_tensor *w, qs_tensor *y,
                            qs_quantized *xq, qs_quantized *wq);

/* Quantized backward [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]: quantizes dy [M,N] with qdy (role
 * grad_output) and returns dx [M,K] and dw [N,K] (allocated, dtype opt->out_dtype) from
 * the saved xq, wq. */
qs_status qs_linear_backward(qs_ctx *ctx, const qs_linear_options *opt, qs_quantizer *qdy,
                             const qs_tensor *dy, const qs_quantized *xq, const qs_quantized *wq,
                             qs_tensor *dx, qs_tensor *dw);

/* High-precision linear [GEMM-LIN-HP]: BF16 x, w (and dy) as given, fp32_seq
 * accumulation, BF16 outputs y = x w^T; dx = dy w, dw = dy^T x. */
qs_status qs_linear_hp_forward(qs_ctx *ctx, const qs_tensor *x, const qs_tensor *w, qs_tensor *y);
qs_status qs_linear_hp_backward(qs_ctx *ctx, const qs_tensor *dy, const qs_tensor *x,
                                const qs_tensor *w, qs_tensor *dx, qs_tensor *dw);

#ifdef __cplusplus
}
#endif
#endif
