/* compare.c: the comparisons of spec/cases.md. Elementwise rules count every mismatch and
 * remember the first; whole-tensor rules (cosine, rms_ratio) report their metric. Floating
 * values are read through the exact decoders of include/qspec/format.h. Every element's
 * error, on the scale its comparison judges it by, is binned into a log2 histogram for the
 * HTML report ([CASE-REPORT-HTML]). */
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
 * the order-preserving map of codes to integers (sign-magnitude codes; E8M0 has no sign). */
static double ulp_distance(const qs_tensor *t, uint64_t a, uint64_t b)
{
    const qs_format_info *fi = qs_format_info_get(t->dtype);
    unsigned bits = fi ? fi->bits : qs_dtype_bits(t->dtype);
    uint64_t mask = bits >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    a &= mask;
    b &= mask;
    if (fi && !fi->has_sign)
        return fabs((double)a - (double)b);
    uint64_t sign = (uint64_t)1 << (bits - 1);
    int64_t ia = (a & sign) ? -(int64_t)(a & ~sign) : (int64_t)a;
    int64_t ib = (b & sign) ? -(int64_t)(b & ~sign) : (int64_t)b;
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
        if (isinf(ve) || isinf(vx))
            return 0; /* an infinity is close only to itself */
        return fabs(vx - ve) <= o->p1 + o->p2 * fabs(ve);
    case QSK_CMP_GEMM_BOUND: /* [CASE-CMP-GEMM-BOUND] */
        if (ve == vx)
            return 1;
        if (isinf(ve) || isinf(vx))
            return 0;
        return bound && fabs(vx - ve) <= o->p1 * qsk_elem_value(bound, i);
    default:
        return 1;
    }
}

int qsk_hist_bin(double e)
{
    int k;
    double m = frexp(e, &k); /* e = m 2^k, 0.5 <= m < 1: ceil(log2 e) is k, or k-1 for m = 0.5 */
    if (m == 0.5)
        k--;
    int b = k - QSK_HIST_KMIN;
    return b < 0 ? 0 : b >= QSK_HIST_BINS ? QSK_HIST_BINS - 1 : b;
}

/* Element i's error on its comparison's scale (qsk_err_scale): 0 when there is none, a
 * positive number, or -1 for a mismatch that has no finite measure. rms is rms(expected)
 * for the whole-tensor rules. */
static double elem_error(const qsk_output *o, const qs_tensor *e, const qs_tensor *x,
                         const qs_tensor *bound, size_t i, double rms)
{
    uint64_t be = qsk_elem_bits(e, i), bx = qsk_elem_bits(x, i);
    double ve = qsk_elem_value(e, i), vx = qsk_elem_value(x, i);
    if (!is_float_dtype(e->dtype))
        return fabs(vx - ve);
    if (isnan(ve) || isnan(vx)) {
        int same = isnan(ve) && isnan(vx) && (be == bx || o->cmp != QSK_CMP_BITWISE || o->nan_any);
        return same ? 0 : -1;
    }
    if (isinf(ve) || isinf(vx))
        return ve == vx ? 0 : -1;
    double diff = fabs(vx - ve), allowed;
    switch (o->cmp) {
    case QSK_CMP_BITWISE:
    case QSK_CMP_ULP:
        if (be == bx)
            return 0;
        diff = ulp_distance(e, be, bx);
        /* +0 against -0: equal under ulp, a mismatch with no distance under bitwise */
        return diff > 0 ? diff : o->cmp == QSK_CMP_ULP ? 0 : -1;
    case QSK_CMP_ALLCLOSE:
        allowed = o->p1 + o->p2 * fabs(ve);
        break;
    case QSK_CMP_GEMM_BOUND:
        allowed = bound ? o->p1 * qsk_elem_value(bound, i) : 0;
        break;
    default:
        allowed = rms;
        break;
    }
    if (diff == 0)
        return 0;
    return allowed > 0 ? diff / allowed : -1;
}

/* Bins every element's error into r->hist. */
static void fill_hist(const qsk_output *o, const qs_tensor *e, const qs_tensor *x,
                      const qs_tensor *bound, double rms, qsk_cmp_result *r)
{
    qsk_err_hist *h = &r->hist;
    int fl = is_float_dtype(e->dtype);
    switch (o->cmp) {
    case QSK_CMP_BITWISE:
        h->scale = fl ? QSK_ERR_ULP : QSK_ERR_ABS;
        h->tol = 0;
        break;
    case QSK_CMP_ULP:
        h->scale = QSK_ERR_ULP;
        h->tol = o->p1;
        break;
    case QSK_CMP_ALLCLOSE:
    case QSK_CMP_GEMM_BOUND:
        h->scale = QSK_ERR_ALLOWED;
        h->tol = 1;
        break;
    default:
        h->scale = QSK_ERR_RMS;
        h->tol = -1;
        break;
    }
    for (size_t i = 0; i < e->numel; i++) {
        double err = elem_error(o, e, x, bound, i, rms);
        if (err == 0) {
            h->exact++;
        } else if (err < 0 || !isfinite(err)) {
            h->special++;
        } else {
            h->bins[qsk_hist_bin(err)]++;
            h->binned++;
            if (err > h->max_err) {
                h->max_err = err;
                h->max_index = i;
            }
        }
    }
}

/* Returns rms(expected), the scale of the whole-tensor rules' per-element errors. */
static double whole_tensor(const qsk_output *o, const qs_tensor *e, const qs_tensor *x,
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
    return e->numel ? sqrt(ee / (double)e->numel) : 0;
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
        double rms = whole_tensor(o, expected, observed, r);
        fill_hist(o, expected, observed, NULL, rms, r);
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
    fill_hist(o, expected, observed, bound, 0, r);
    return r->mismatches == 0;
}
