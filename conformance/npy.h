/* npy.h: the NumPy .npy reader and writer (format versions 1.0, 2.0, 3.0).
 * Little-endian, C order only. The dtype descriptors for the formats NumPy lacks
 * (bfloat16, FP8, FP4, FP6, E8M0) are those of ml_dtypes, documented in spec/cases.md. */
#ifndef QSPEC_KIT_NPY_H
#define QSPEC_KIT_NPY_H

#include "qspec/tensor.h"

/* Reads path into t (allocated here). Every rejection (truncated file, bad magic,
 * malformed header, Fortran order, big-endian, unknown dtype, size/shape mismatch)
 * returns an error whose message names the file and the problem. */
qs_status qsk_npy_read(qs_ctx *ctx, const char *path, qs_tensor *t);
/* Writes t to path atomically, with the smallest format version that holds the header. */
qs_status qsk_npy_write(qs_ctx *ctx, const char *path, const qs_tensor *t);
/* The descr written for a dtype ([CASE-NPY-DESCR]): a type string such as "<f4", or for
 * the formats numpy lacks the structured list "[('float8_e4m3fn', '|u1')]"; NULL if invalid. */
const char *qsk_npy_descr(qs_dtype dt);

#endif
