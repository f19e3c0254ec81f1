/* gen.c: input generation for conformance cases (spec/cases.md [CASE-GEN-*]).
 * Element i (row-major) of a generated input is sample i of the Philox stream
 * (seed, offset) of spec/random.md, computed in binary32 and then rounded once to the
 * input dtype; explicit values repeat cyclically; injections are applied last, in order. */
#include <math.h>
#include <string.h>

#include "cases.h"
#include "qspec/format.h"
#include "qspec/random.h"

/* Stores the binary64 value v into element i of t with one rounding (RNE) [CASE-GEN-DTYPE]. */
static void store(qs_tensor *t, size_t i, double v)
{
    qs_cast_mode rne = {QS_ROUND_RNE, QS_OVF_NOSAT, 0};
    uint32_t code = 0;
    switch (t->dtype) {
    case QS_FP64:
        ((double *)t->data)[i] = v;
        break;
    case QS_FP32:
        ((float *)t->data)[i] = (float)v;
        break;
    case QS_BF16:
    case QS_FP16:
        qs_encode_f64(t->dtype, v, rne, &code);
        ((uint16_t *)t->data)[i] = (uint16_t)code;
        break;
    default:
        break;
    }
}

/* Sample i of a distribution, in binary32 in the order spec/random.md gives
 * [RNG-GEN-UNIFORM] [RNG-GEN-NORMAL]. */
static float sample(const qsk_input *in, uint64_t i)
{
    float a = (float)in->a, b = (float)in->b;
    if (in->gen == QSK_GEN_UNIFORM) {
        float u = qs_random_uniform(in->seed, in->offset, i);
        float width = b - a;
        float scaled = width * u;
        return a + scaled;
    }
    float z = qs_random_normal(in->seed, in->offset, i);
    float scaled = b * z;
    return a + scaled;
}

qs_status qsk_input_generate(qs_ctx *ctx, const qsk_input *in, qs_tensor *t)
{
    qs_status st = qs_tensor_alloc(ctx, t, in->dtype, in->ndim, in->shape);
    if (st != QS_OK)
        return st;
    for (size_t i = 0; i < t->numel; i++) {
        double v = in->gen == QSK_GEN_VALUES ? in->values[i % in->nvalues]
                                             : (double)sample(in, (uint64_t)i);
        store(t, i, v);
    }
    /* [CASE-GEN-INJECT] the j-th injection at 'random' goes to element
     * qs_random_u32(seed, offset + 1, j) mod numel. */
    for (size_t j = 0; j < in->ninject && t->numel > 0; j++) {
        size_t at = in->inject[j].index >= 0
                        ? (size_t)in->inject[j].index
                        : (size_t)(qs_random_u32(in->seed, in->offset + 1, j) % t->numel);
        store(t, at, in->inject[j].value);
    }
    return QS_OK;
}
