/* qstensor.h: tensor comparisons shared by the engine tests (test_recompute.c,
 * test_engine_mla.c): element values of FP32 and BF16 tensors, bitwise equality with the
 * first differing byte in the message, cosine similarity, and "differs at all". */
#ifndef QSPEC_TESTS_QSTENSOR_H
#define QSPEC_TESTS_QSTENSOR_H

#include <check.h>
#include <math.h>
#include <string.h>

#include "qspec/format.h"
#include "qspec/tensor.h"

/* Element i of an FP32 or BF16 tensor. */
static inline double value(const qs_tensor *t, size_t i)
{
    if (t->dtype == QS_FP32)
        return ((const float *)t->data)[i];
    return qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
}

static inline void expect_bitwise(const char *what, const qs_tensor *a, const qs_tensor *b)
{
    ck_assert_msg(a->numel == b->numel && a->nbytes == b->nbytes && a->dtype == b->dtype,
                  "%s: layouts differ", what);
    const unsigned char *pa = a->data, *pb = b->data;
    for (size_t i = 0; i < a->nbytes; i++)
        ck_assert_msg(pa[i] == pb[i], "%s: byte %zu differs: 0x%02x vs 0x%02x (element %g vs %g)",
                      what, i, pa[i], pb[i], value(a, i * a->numel / a->nbytes),
                      value(b, i * b->numel / b->nbytes));
}

static inline double cosine(const qs_tensor *a, const qs_tensor *b)
{
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a->numel; i++) {
        ab += value(a, i) * value(b, i);
        aa += value(a, i) * value(a, i);
        bb += value(b, i) * value(b, i);
    }
    return ab / sqrt(aa * bb);
}

/* 1 when a and b differ in size or in any byte. */
static inline int differs(const qs_tensor *a, const qs_tensor *b)
{
    return a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes) != 0;
}

#endif
