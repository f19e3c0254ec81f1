/* gemm.h: the reference TN GEMM of spec/gemm.md over decoded quantized operands.
 * Y[m,n] = alpha * sum_k deq(A)[m,k] * deq(B)[n,k] (+ beta * C[m,n]), with the scale
 * application of each scaling mode, a named accumulation model (exact, fp32_seq,
 * hopper_fp8_tc with optional promotion) and the output rounding to FP32/BF16/FP16;
 * plus the gemm_bound tolerance, computed per element beside the exact result. */
#ifndef QSPEC_GEMM_H
#define QSPEC_GEMM_H

#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest K the reference accepts [GEMM-ACC-EXACT-WIDTH] [GEMM-BOUND]. */
#define QS_GEMM_MAX_K ((int64_t)1 << 20)

/* Accumulation models [GEMM-ACC-*], one table in ref/gemm.c selects them by name. */
typedef enum qs_gemm_acc_kind {
    QS_GEMM_ACC_EXACT = 0,     /* "exact": the exact value, rounded once [GEMM-ACC-EXACT] */
    QS_GEMM_ACC_FP32_SEQ,      /* "fp32_seq": FP32 adds in increasing k [GEMM-ACC-FP32SEQ] */
    QS_GEMM_ACC_HOPPER_FP8_TC, /* "hopper_fp8_tc": the Hopper FP8 model [GEMM-ACC-HOPPER] */
    QS_GEMM_ACC_COUNT
} qs_gemm_acc_kind;

/* An accumulation model with its option. promote_every (hopper_fp8_tc only) is 0 for
 * never (fast accumulation) or a positive multiple of 32 (128: split accumulation)
 * [GEMM-ACC-PROMOTE]; it must be 0 for the other models. */
typedef struct qs_gemm_acc {
    qs_gemm_acc_kind kind;
    int64_t promote_every;
} qs_gemm_acc;

/* "exact", "fp32_seq", "hopper_fp8_tc"; NULL for an unknown kind. */
const char *qs_gemm_acc_name(qs_gemm_acc_kind kind);
/* The kind of a name as qs_gemm_acc_name writes it; -1 when unknown. */
int qs_gemm_acc_from_name(const char *name);

/* Scaling modes of an operand [GEMM-SCALE-*]. A and B must be of the same family:
 * {NONE, TENSOR}, {BLOCK_1X128, BLOCK_128X128}, {MX}, {NVFP4}. */
typedef enum qs_gemm_scaling {
    QS_GEMM_SCALE_NONE = 0,      /* values used as given (BF16/FP32 operands) */
    QS_GEMM_SCALE_TENSOR,        /* one FP32 scale_inv [GEMM-SCALE-TENSOR] */
    QS_GEMM_SCALE_BLOCK_1X128,   /* FP32 scale_inv per row and 128 k [GEMM-SCALE-BLOCK] */
    QS_GEMM_SCALE_BLOCK_128X128, /* FP32 scale_inv per 128 rows and 128 k [GEMM-SCALE-BLOCK] */
    QS_GEMM_SCALE_MX,            /* E8M0 (decoded) per row and 32 k [GEMM-SCALE-MX] */
    QS_GEMM_SCALE_NVFP4,         /* E4M3 (decoded) per row and 16 k, times an FP32 tensor
                                    scale [GEMM-SCALE-NVFP4] */
    QS_GEMM_SCALE_COUNT
} qs_gemm_scaling;

/* One operand: rows x k decoded element values, row-major (A: rows = m; B: rows = n, so
 * B is given as its transpose, TN [GEMM-TN]). block_scale holds the decoded block scales
 * (dequantization multipliers, i.e. scale_inv), row-major:
 *   BLOCK_1X128: rows x ceil(k/128); BLOCK_128X128: ceil(rows/128) x ceil(k/128);
 *   MX: rows x ceil(k/32); NVFP4: rows x ceil(k/16); NULL for NONE and TENSOR.
 * tensor_scale is the per-tensor dequantization multiplier for TENSOR and NVFP4 (1 for
 * the other modes, where it is ignored). elem names the element format the values were
 * decoded from (QS_E4M3, QS_E5M2, ...): hopper_fp8_tc clamps each operand's exponent at
 * that format's smallest normal exponent [GEMM-ACC-HOPPER-ALIGN]; QS_DTYPE_INVALID (what an
 * initializer that leaves it out gives) means no clamp, the exponent of the value itself. */
typedef struct qs_gemm_operand {
    const float *data;
    qs_gemm_scaling scaling;
    const float *block_scale;
    float tensor_scale;
    qs_dtype elem;
} qs_gemm_operand;

/* Shape, epilogue, model and output dtype (QS_FP32, QS_BF16 or QS_FP16) [GEMM-OUT-ROUND]. */
typedef struct qs_gemm_params {
    int64_t m, n, k;
    float alpha, beta; /* [GEMM-ALPHA-BETA]: C is not read when beta is 0 */
    qs_gemm_acc acc;
    qs_dtype out_dtype;
} qs_gemm_params;

/* Computes y (m x n, row-major FP32 holding values of out_dtype) under p->acc; c is m x n
 * (NULL allowed when beta is 0). Returns QS_ERR_INVALID_ARG for null pointers, a bad
 * model, option, shape or k > QS_GEMM_MAX_K, QS_ERR_UNSUPPORTED for hopper_fp8_tc with
 * MX or NVFP4 operands, QS_ERR_DTYPE for another out_dtype, QS_ERR_NOMEM. */
qs_status qs_gemm(qs_ctx *ctx, const qs_gemm_params *p, const qs_gemm_operand *a,
                  const qs_gemm_operand *b, const float *c, float *y);

/* The gemm_bound tolerance [GEMM-BOUND]: writes y_exact (the exact model's result, p->acc
 * ignored) and, per element, bound (FP64, rounded up) such that any FP32-accumulating
 * evaluation of the same GEMM, in any order, lies within bound of y_exact. A non-finite
 * y_exact gets bound 0 (the values must then agree as specials). Same errors as qs_gemm. */
qs_status qs_gemm_bound(qs_ctx *ctx, const qs_gemm_params *p, const qs_gemm_operand *a,
                        const qs_gemm_operand *b, const float *c, float *y_exact, double *bound);

/* Whether |y - y_exact| <= scale * bound for every one of count elements (1) or not (0);
 * where it is not, *first_bad (if not NULL) gets the first failing index. NaN y passes
 * only against a NaN y_exact; an infinite y only against the same infinity. */
int qs_gemm_within_bound(const float *y, const float *y_exact, const double *bound, double scale,
                         size_t count, size_t *first_bad);

#ifdef __cplusplus
}
#endif
#endif
