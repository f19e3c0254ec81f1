/* tensor.h: dtypes, shapes and host tensors.
 * A qs_tensor is a dense, row-major (C order) host buffer with a dtype and up to
 * QS_MAX_DIMS dimensions. Strides are in elements; E2M1 packs two elements per byte
 * (element 2i in the low nibble of byte i, 2i+1 in the high nibble). */
#ifndef QSPEC_TENSOR_H
#define QSPEC_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_MAX_DIMS 8

typedef enum qs_dtype {
    QS_DTYPE_INVALID = 0,
    QS_FP32,
    QS_FP64,
    QS_BF16,
    QS_FP16,
    QS_E4M3,
    QS_E5M2,
    QS_E8M0,
    QS_E2M1, /* packed two per byte */
    QS_E2M3, /* one per byte, in the low 6 bits */
    QS_E3M2, /* one per byte, in the low 6 bits */
    QS_U8,
    QS_I32,
    QS_I64,
    QS_DTYPE_COUNT
} qs_dtype;

/* Lower-case dtype name ("fp32", "e4m3", ...); NULL for an invalid dtype. */
const char *qs_dtype_name(qs_dtype dt);
/* Parses a name as qs_dtype_name writes it (also "float32", "bfloat16", "float16", ...);
 * QS_DTYPE_INVALID when unknown. */
qs_dtype qs_dtype_from_name(const char *name);
/* Bits per element: 4 for E2M1, 8 for one-byte formats, 16, 32 or 64; 0 if invalid. */
unsigned qs_dtype_bits(qs_dtype dt);
/* Bytes needed for n elements of dt (E2M1 rounds up to whole bytes); 0 if invalid. */
size_t qs_dtype_bytes(qs_dtype dt, size_t n);

typedef struct qs_tensor {
    qs_dtype dtype;
    int ndim; /* 0..QS_MAX_DIMS; 0 is a scalar of one element */
    int64_t shape[QS_MAX_DIMS];
    int64_t strides[QS_MAX_DIMS]; /* in elements, row-major */
    size_t numel;
    size_t nbytes;
    void *data; /* owned: freed by qs_tensor_free */
} qs_tensor;

/* Allocates a zero-filled tensor. Rejects a bad dtype, ndim outside 0..8, a negative
 * extent, or a size that overflows (QS_ERR_INVALID_ARG / QS_ERR_SHAPE / QS_ERR_NOMEM). */
qs_status qs_tensor_alloc(qs_ctx *ctx, qs_tensor *t, qs_dtype dt, int ndim, const int64_t *shape);
/* Frees the buffer and resets t; accepts NULL and already-freed tensors. */
void qs_tensor_free(qs_tensor *t);
/* Deep copy of src into dst (dst is overwritten, not freed first). */
qs_status qs_tensor_clone(qs_ctx *ctx, qs_tensor *dst, const qs_tensor *src);
/* Element count of a shape; returns QS_ERR_SHAPE on negative extents or overflow. */
qs_status qs_shape_numel(qs_ctx *ctx, int ndim, const int64_t *shape, size_t *numel);
/* Whether two tensors have equal dtype and shape. */
int qs_tensor_same_layout(const qs_tensor *a, const qs_tensor *b);

#ifdef __cplusplus
}
#endif
#endif
