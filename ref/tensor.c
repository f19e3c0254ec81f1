/* tensor.c: dtype names and sizes, and owned host tensors.
 * Invariant: an allocated tensor has numel = prod(shape), row-major strides and
 * nbytes = qs_dtype_bytes(dtype, numel); a freed tensor is all zero. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "qspec/tensor.h"

static const struct {
    qs_dtype dtype;
    const char *name;
    const char *alias;
    unsigned bits;
} dtype_table[] = {
    {QS_FP32, "fp32", "float32", 32},
    {QS_FP64, "fp64", "float64", 64},
    {QS_BF16, "bf16", "bfloat16", 16},
    {QS_FP16, "fp16", "float16", 16},
    {QS_E4M3, "e4m3", "float8_e4m3fn", 8},
    {QS_E5M2, "e5m2", "float8_e5m2", 8},
    {QS_E8M0, "e8m0", "float8_e8m0fnu", 8},
    {QS_E2M1, "e2m1", "float4_e2m1fn", 4},
    {QS_E2M3, "e2m3", "float6_e2m3fn", 8},
    {QS_E3M2, "e3m2", "float6_e3m2fn", 8},
    {QS_U8, "u8", "uint8", 8},
    {QS_I32, "i32", "int32", 32},
    {QS_I64, "i64", "int64", 64},
};

const char *qs_dtype_name(qs_dtype dt)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(dtype_table); i++)
        if (dtype_table[i].dtype == dt)
            return dtype_table[i].name;
    return NULL;
}

qs_dtype qs_dtype_from_name(const char *name)
{
    if (!name)
        return QS_DTYPE_INVALID;
    for (size_t i = 0; i < QSI_ARRAY_LEN(dtype_table); i++)
        if (strcmp(dtype_table[i].name, name) == 0 || strcmp(dtype_table[i].alias, name) == 0)
            return dtype_table[i].dtype;
    return QS_DTYPE_INVALID;
}

unsigned qs_dtype_bits(qs_dtype dt)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(dtype_table); i++)
        if (dtype_table[i].dtype == dt)
            return dtype_table[i].bits;
    return 0;
}

size_t qs_dtype_bytes(qs_dtype dt, size_t n)
{
    unsigned bits = qs_dtype_bits(dt);
    if (bits == 0)
        return 0;
    if (bits == 4)
        return n / 2 + n % 2;
    return n * (bits / 8);
}

qs_status qs_shape_numel(qs_ctx *ctx, int ndim, const int64_t *shape, size_t *numel)
{
    if (ndim < 0 || ndim > QS_MAX_DIMS)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "ndim %d is outside 0..%d", ndim, QS_MAX_DIMS);
    if (ndim > 0 && !shape)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "shape is NULL");
    /* ext: the product with each 0 counted as 1, the extent the strides span (an empty
     * tensor's strides are still the products of the other dimensions), bounded as numel is */
    size_t n = 1, ext = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "shape[%d] = %lld is negative", d,
                                (long long)shape[d]);
        uint64_t e = (uint64_t)shape[d];
        if (e != 0 && ext > (SIZE_MAX / 16) / e)
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "shape overflows: dimension %d", d);
        ext *= e != 0 ? (size_t)e : 1;
        n *= (size_t)e;
    }
    *numel = n;
    return QS_OK;
}

qs_status qs_tensor_alloc(qs_ctx *ctx, qs_tensor *t, qs_dtype dt, int ndim, const int64_t *shape)
{
    if (!t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "tensor is NULL");
    memset(t, 0, sizeof *t);
    if (qs_dtype_bits(dt) == 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dtype %d is not a valid dtype", (int)dt);
    size_t n;
    qs_status st = qs_shape_numel(ctx, ndim, shape, &n);
    if (st != QS_OK)
        return st;
    size_t nb = qs_dtype_bytes(dt, n);
    void *p = calloc(nb ? nb : 1, 1);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "cannot allocate %zu bytes for a tensor", nb);
    t->dtype = dt;
    t->ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = stride;
        stride *= shape[d] ? shape[d] : 1;
    }
    t->numel = n;
    t->nbytes = nb;
    t->data = p;
    return QS_OK;
}

void qs_tensor_free(qs_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

qs_status qs_tensor_clone(qs_ctx *ctx, qs_tensor *dst, const qs_tensor *src)
{
    if (!dst || !src)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "tensor is NULL");
    qs_status st = qs_tensor_alloc(ctx, dst, src->dtype, src->ndim, src->shape);
    if (st != QS_OK)
        return st;
    if (src->nbytes)
        memcpy(dst->data, src->data, src->nbytes);
    return QS_OK;
}

int qs_tensor_same_layout(const qs_tensor *a, const qs_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}
