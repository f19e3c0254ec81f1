/* compare.h: comparing a backend's output with the reference's, as a case's output says
 * (spec/cases.md [CASE-CMP-*]): bitwise (NaN rule canonical or any), ulp, allclose,
 * gemm_bound, rms_ratio, cosine. */
#ifndef QSPEC_KIT_COMPARE_H
#define QSPEC_KIT_COMPARE_H

#include "cases.h"

typedef struct qsk_cmp_result {
    size_t mismatches; /* elements failing an elementwise rule */
    size_t first;      /* index of the first mismatch */
    char expected[96]; /* first mismatch, "0x7e (448)" */
    char observed[96];
    double metric;    /* cosine or rms ratio for whole-tensor rules */
    int whole_failed; /* a whole-tensor rule failed */
    char detail[160]; /* why a comparison could not be made (shape, dtype) */
} qsk_cmp_result;

/* Compares observed against expected; bound is the reference's per-element bound for
 * gemm_bound (NULL otherwise). Returns 1 when they agree, 0 when not. */
int qsk_compare(const qsk_output *o, const qs_tensor *expected, const qs_tensor *observed,
                const qs_tensor *bound, qsk_cmp_result *r);
/* Element i of t as a double (decoded for encoded formats; E2M1 unpacked). */
double qsk_elem_value(const qs_tensor *t, size_t i);
/* Element i of t as its raw code or bits. */
uint64_t qsk_elem_bits(const qs_tensor *t, size_t i);
/* Formats element i as "0xCODE (value)". */
void qsk_format_elem(const qs_tensor *t, size_t i, char *buf, size_t cap);

#endif
