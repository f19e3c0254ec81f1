/* compare.h: comparing a backend's output with the reference's, as a case's output says
 * (spec/cases.md [CASE-CMP-*]): bitwise (NaN rule canonical or any), ulp, allclose,
 * gemm_bound, rms_ratio, cosine. Every comparison also bins each element's error into a
 * log2 histogram, which the HTML report draws for the outputs that failed. */
#ifndef QSPEC_KIT_COMPARE_H
#define QSPEC_KIT_COMPARE_H

#include "cases.h"

/* The histogram's bins: bin b holds errors e with 2^(k-1) < e <= 2^k, k = b + QSK_HIST_KMIN;
 * errors beyond the ends are counted in the first or last bin. */
#define QSK_HIST_KMIN (-64)
#define QSK_HIST_BINS 128

/* What an element's error is measured in, for each comparison. */
typedef enum {
    QSK_ERR_ULP,     /* bitwise, ulp: distance in the format's ordered codes */
    QSK_ERR_ABS,     /* bitwise on integers: |observed - expected| */
    QSK_ERR_ALLOWED, /* allclose, gemm_bound: |observed - expected| / the allowed error */
    QSK_ERR_RMS      /* cosine, rms_ratio: |observed - expected| / rms(expected) */
} qsk_err_scale;

typedef struct qsk_err_hist {
    qsk_err_scale scale;
    double tol;     /* the largest error that passes, on the same scale; < 0: no per-element
                       tolerance (whole-tensor rules) */
    size_t exact;   /* elements whose error is 0 */
    size_t special; /* mismatches with no finite error: NaN or Inf against another value,
                       signed zeros and NaN payloads under bitwise, a zero allowed error */
    size_t binned;  /* elements counted in bins[] */
    size_t bins[QSK_HIST_BINS];
    double max_err; /* the largest finite error, at index max_index */
    size_t max_index;
} qsk_err_hist;

typedef struct qsk_cmp_result {
    size_t mismatches; /* elements failing an elementwise rule */
    size_t first;      /* index of the first mismatch */
    char expected[96]; /* first mismatch, "0x7e (448)" */
    char observed[96];
    double metric;     /* cosine or rms ratio for whole-tensor rules */
    int whole_failed;  /* a whole-tensor rule failed */
    char detail[160];  /* why a comparison could not be made (shape, dtype) */
    qsk_err_hist hist; /* every element's error, binned (empty when detail is set) */
} qsk_cmp_result;

/* Compares observed against expected; bound is the reference's per-element bound for
 * gemm_bound (NULL otherwise). Returns 1 when they agree, 0 when not. */
int qsk_compare(const qsk_output *o, const qs_tensor *expected, const qs_tensor *observed,
                const qs_tensor *bound, qsk_cmp_result *r);
/* The bin of a positive finite error e: ceil(log2 e) - QSK_HIST_KMIN, clamped to the bins. */
int qsk_hist_bin(double e);
/* Element i of t as a double (decoded for encoded formats; E2M1 unpacked). */
double qsk_elem_value(const qs_tensor *t, size_t i);
/* Element i of t as its raw code or bits. */
uint64_t qsk_elem_bits(const qs_tensor *t, size_t i);
/* Formats element i as "0xCODE (value)". */
void qsk_format_elem(const qs_tensor *t, size_t i, char *buf, size_t cap);

#endif
