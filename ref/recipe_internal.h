/* recipe_internal.h: what the ref/recipe_*.c files share and nothing else sees — the
 * decoded input, code access for packed formats, and one entry point per recipe.
 * spec/recipes.md is the text these functions follow; each cites its rule IDs. */
#ifndef QSPEC_REF_RECIPE_INTERNAL_H
#define QSPEC_REF_RECIPE_INTERNAL_H

#include <stdint.h>

#include "qspec/recipe.h"

/* A 2-D input decoded exactly to FP32 [REC-INPUT]. */
typedef struct qsi_input {
    qs_dtype dtype; /* BF16, FP16 or FP32 */
    int64_t m, k;   /* rows, columns */
    float *x;       /* m*k values, row-major */
} qsi_input;

/* Validates and decodes x (named "x" in messages); frees with qsi_input_free. */
qs_status qsi_input_load(qs_ctx *ctx, const qs_tensor *x, qsi_input *in);
void qsi_input_free(qsi_input *in);

/* amax over n values with the stride given [REC-AMAX]: max |v| from 0, NaN ignored. */
float qsi_amax(const float *v, int64_t n, int64_t stride);
/* amax with NaN propagating (delayed-scaling calibration) [REC-DS-CALIB]. */
float qsi_amax_nan(const float *v, int64_t n);

/* Allocates a 2-D tensor of dtype dt, zero-filled. */
qs_status qsi_alloc_2d(qs_ctx *ctx, qs_tensor *t, qs_dtype dt, int64_t rows, int64_t cols);
/* Code of element i of a code tensor (E2M1 packed two per byte), and its store. */
uint32_t qsi_code_get(const qs_tensor *t, size_t i);
void qsi_code_set(qs_tensor *t, size_t i, uint32_t code);
/* FP32 element i of an FP32 tensor, and its store. */
float qsi_f32_get(const qs_tensor *t, size_t i);
void qsi_f32_set(qs_tensor *t, size_t i, float v);

/* FP8 encoding of the recipes: RNE, satfinite [REC-ELEM]. */
uint32_t qsi_encode_fp8(qs_dtype elem, float v);
/* Largest finite value of an element format (448, 57344, 6) as FP32. */
float qsi_elem_max(qs_dtype elem);
/* out[c*rows + r] = v[r*cols + c]: the transpose of a rows x cols FP32 matrix. */
void qsi_transpose_f32(const float *v, int64_t rows, int64_t cols, float *out);
/* dst (allocated here) = the transpose of the 2-D code or FP32 tensor src. */
qs_status qsi_transpose_tensor(qs_ctx *ctx, const qs_tensor *src, qs_tensor *dst);
/* ceil(a / b) for a >= 0, b > 0. */
int64_t qsi_ceil_div(int64_t a, int64_t b);

/* Tensorwise output shared by delayed and current scaling [REC-TW-LAYOUT]. */
qs_status qsi_tensorwise_encode(qs_ctx *ctx, const qsi_input *in, float scale, float scale_inv,
                                float amax, qs_quantized *out);

/* One entry point per recipe; out's cfg, elem, rows and cols are already set. */
qs_status qsi_quantize_delayed(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in,
                               qs_quantized *out);
qs_status qsi_quantize_current(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                               qs_quantized *out);
qs_status qsi_quantize_mxfp8(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out);
qs_status qsi_quantize_block(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out);
qs_status qsi_quantize_nvfp4(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out);
qs_status qsi_quantize_axiswise(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                                qs_quantized *out);
/* How a copy of the axiswise recipes is scaled [REC-AX-LAYOUT] [REC-AX-GWHP]. */
typedef enum qsi_ax_copy {
    QSI_AX_ROWS = 0, /* one FP32 scale per row of the copy, FP8 codes */
    QSI_AX_TENSOR,   /* one FP32 scale for the tensor, FP8 codes (gw_hp weight, columnwise) */
    QSI_AX_HP        /* the values themselves as FP32, scale 1 (gw_hp x and dY, columnwise) */
} qsi_ax_copy;
qsi_ax_copy qsi_axiswise_copy(const qs_recipe_config *cfg, qs_direction dir);
/* Whether kind is one of torchao's axiswise recipes (rowwise, rowwise_with_gw_hp). */
int qsi_recipe_is_axiswise(qs_recipe_kind kind);
/* NVFP4's tensor amaxes of in under cfg [REC-NV-GLOBAL]: amax[QS_DIR_ROW] over x, amax[QS_DIR_COL]
 * over x^T after the Hadamard transform when rht (the one amax of x for 2-D tiles); 0 for a copy
 * cfg does not produce. qsi_quantize_nvfp4 is qsi_quantize_nvfp4_amax with these; the
 * distributed path passes the reduced ones instead [DIST-NV-AMAX] (2-D tiles use
 * amax[QS_DIR_ROW], or amax[QS_DIR_COL] when only columnwise). */
qs_status qsi_nvfp4_amax(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in,
                         float amax[QS_DIR_COUNT]);
qs_status qsi_quantize_nvfp4_amax(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                                  const float amax[QS_DIR_COUNT], qs_quantized *out);

/* Dequantization into y (M*K FP32 values, the input's orientation) [REC-DEQ-*]. */
void qsi_dequantize_tensorwise(const qs_quantized *qz, qs_direction dir, float *y);
void qsi_dequantize_mxfp8(const qs_quantized *qz, qs_direction dir, float *y);
void qsi_dequantize_block(const qs_quantized *qz, qs_direction dir, float *y);
void qsi_dequantize_nvfp4(const qs_quantized *qz, qs_direction dir, float *y);
void qsi_dequantize_axiswise(const qs_quantized *qz, qs_direction dir, float *y);

/* The random Hadamard transform of NVFP4 [REC-NV-RHT]: groups of 16 consecutive values of
 * v (stride 1), in place or not, each output rounded to BF16. n must be a multiple of 16. */
void qsi_rht16(const float *v, int64_t n, float *out);

#endif
