/* attn_internal.h: helpers shared by ref/sdpa.c and ref/gdn.c (spec/attention.md):
 * dtype rounding points, input-value checks, cu_seqlens checks and sized products.
 * Internal names carry the qsi_attn_ prefix; the bodies are in ref/sdpa.c. */
#ifndef QSPEC_REF_ATTN_INTERNAL_H
#define QSPEC_REF_ATTN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "qspec/format.h"
#include "qspec/status.h"
#include "qspec/tensor.h"

/* Rounds an FP32 value to dt (QS_FP32: unchanged; BF16/FP16: RNE) [ATTN-DTYPE]. */
static inline float qsi_attn_round(qs_dtype dt, float x)
{
    if (dt == QS_BF16)
        return qsi_round_bf16(x);
    if (dt == QS_FP16)
        return qs_round_f16(x);
    return x;
}
/* QS_ERR_DTYPE unless dt is QS_FP32, QS_BF16 or QS_FP16. */
qs_status qsi_attn_check_dtype(qs_ctx *ctx, const char *fn, qs_dtype dt);
/* QS_ERR_INVALID_ARG when x is NULL or an element of x[0..n) is not a dt value. */
qs_status qsi_attn_check_values(qs_ctx *ctx, const char *fn, const char *name, const float *x,
                                size_t n, qs_dtype dt);
/* QS_ERR_INVALID_ARG unless cu[0..b] is a nondecreasing prefix sum from 0 ending at total
 * (total < 0: not checked). */
qs_status qsi_attn_check_cu(qs_ctx *ctx, const char *fn, const char *name, const int32_t *cu,
                            int64_t b, int64_t total);
/* *out = a * b * c * d, QS_ERR_SHAPE when a factor is negative or the product exceeds 2^40. */
qs_status qsi_attn_numel(qs_ctx *ctx, const char *fn, const char *name, int64_t a, int64_t b,
                         int64_t c, int64_t d, size_t *out);

#endif
