/* compare.c: the comparisons of spec/cases.md. Elementwise rules count every mismatch and
 * remember the first; whole-tensor rules (cosine, rms_ratio) report their metric. Floating
 * values are read through the exact decoders of include/qspec/format.h. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "qspec/format.h"

uint64_t qsk_elem_bits(const qs_tensor *t, size_t i)
{
    const uint8_t *p = t->data;
    switch (qs_dtype_bits(t->dtype)) {
    case 4:
        return (p[i / 2] >> (4 * (i % 2))) & 0xF;
    case 8:
        return p[i];
    case 16:
        return ((const uint16_t *)t->data)[i];
    case 32:
        return ((const uint32_t *)t->data)[i];
    default:
        return ((const uint64_t *)t->data)[i];
    }
}

double qsk_elem_value(const qs_tensor *t, size_t i)
{
    uint64_t b = qsk_elem_bits(t, i);
    switch (t->dtype) {
    case QS_FP64:
        return qs_f64_from_bits(b);
    case QS_U8:
        return (double)b;
    case QS_I32:
        return (double)(int32_t)(uint32_t)b;
    case QS_I64:
        return (double)(int64_t)b;
    default:
        return qs_decode_f64(t->dtype, (uint32_t)b);
    }
}

void qsk_format_elem(const qs_tensor *t, size_t i, char *buf, size_t cap)
{
    unsigned digits = (qs_dtype_bits(t->dtype) + 3) / 4;
    snprintf(buf, cap, "0x%0*" PRIx64 " (%.9g)", (int)digits, qsk_elem_bits(t, i),
             qsk_elem_value(t, i));
}

static int is_float_dtype(qs_dtype dt)
{
    return qs_format_info_get(dt) != NULL || dt == QS_FP64;
}

/* Distance in units in the last place between two finite values of one format, through
 * the order-preserving map of codes to integers. */
static double ulp_distance(const qs_tensor *t, uint64_t a, uint64_t b)
{
    unsigned bits = qs_dtype_bits(t->dtype);
    uint64_t sign = (uint64_t)1 << (bits - 1);
    uint64_t mask = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    int64_t ia = (a & sign) ? -(int64_t)(a & ~sign & mask) : (int64_t)a;
    int64_t ib = (b & sign) ? -(int64_t)(b & ~sign & mask) : (int64_t)b;
    return fabs((double)ia - (double)ib);
}

static int elem_agrees(const qsk_output *o, const qs_tensor *e, const qs_tensor *x,
                       const qs_tensor *bound, size_t i)
{
    uint64_t be = qsk_elem_bits(e, i), bx = qsk_elem_bits(x, i);
    double ve = qsk_elem_value(e, i), vx = qsk_elem_value(x, i);
    int fl = is_float_dtype(e->dtype);
    if (fl && isnan(ve) && isnan(vx) && (o->cmp != QSK_CMP_BITWISE || o->nan_any))
        return 1; /* [CASE-CMP-NAN] */
    switch (o->cmp) {
    case QSK_CMP_BITWISE: /* [CASE-CMP-BITWISE] */
        return be == bx;
    case QSK_CMP_ULP: /* [CASE-CMP-ULP] */
        if (be == bx)
            return 1;
        if (!fl || isnan(ve) || isnan(vx) || isinf(ve) || isinf(vx))
            return 0;
        if (ve == 0 && vx == 0)
            return 1;
        return ulp_distance(e, be, bx) <= o->p1;
    case QSK_CMP_ALLCLOSE: /* [CASE-CMP-ALLCLOSE] */
        if (ve == vx)
            return 1;
        return fabs(vx - ve) <= o->p1 + o->p2 * fabs(ve);
    case QSK_CMP_GEMM_BOUND: /* [CASE-CMP-GEMM-BOUND] */
        if (ve == vx)
            return 1;
        return bound && fabs(vx - ve) <= o->p1 * qsk_elem_value(bound, i);
    default:
        return 1;
    }
}

static void whole_tensor(const qsk_output *o, const qs_tensor *e, const qs_tensor *x,
                         qsk_cmp_result *r)
{
    double dot = 0, ee = 0, xx = 0, dd = 0;
    for (size_t i = 0; i < e->numel; i++) {
        double ve = qsk_elem_value(e, i), vx = qsk_elem_value(x, i);
        dot += ve * vx;
        ee += ve * ve;
        xx += vx * vx;
        dd += (vx - ve) * (vx - ve);
    }
    if (o->cmp == QSK_CMP_COSINE) { /* [CASE-CMP-COSINE] */
        r->metric = (ee == 0 && xx == 0) ? 1.0 : dot / sqrt(ee * xx);
        r->whole_failed = !(r->metric >= o->p1);
    } else { /* [CASE-CMP-RMS-RATIO] */
        r->metric = ee == 0 ? (dd == 0 ? 0.0 : INFINITY) : sqrt(dd / ee);
        r->whole_failed = !(r->metric <= o->p1);
    }
}

int qsk_compare(const qsk_output *o, const qs_tensor *expected, const qs_tensor *observed,
                const qs_tensor *bound, qsk_cmp_result *r)
{
    memset(r, 0, sizeof *r);
    if (!qs_tensor_same_layout(expected, observed)) {
        snprintf(r->detail, sizeof r->detail, "expected %s with %zu elements, observed %s with %zu",
                 qs_dtype_name(expected->dtype), expected->numel, qs_dtype_name(observed->dtype),
                 observed->numel);
        r->whole_failed = 1;
        return 0;
    }
    if (o->cmp == QSK_CMP_COSINE || o->cmp == QSK_CMP_RMS_RATIO) {
        whole_tensor(o, expected, observed, r);
        return !r->whole_failed;
    }
    for (size_t i = 0; i < expected->numel; i++) {
        if (elem_agrees(o, expected, observed, bound, i))
            continue;
        if (r->mismatches == 0) {
            r->first = i;
            qsk_format_elem(expected, i, r->expected, sizeof r->expected);
            qsk_format_elem(observed, i, r->observed, sizeof r->observed);
        }
        r->mismatches++;
    }
    return r->mismatches == 0;
}
