/* run.h: the outcome of running conformance cases, shared by `qspec run`, its certification
 * mode and `qspec verify`: each case's status, its failure lines, and for every output that
 * failed a comparison the comparison's result with its error histogram. The reports
 * (report.h) are written from these records. */
#ifndef QSPEC_KIT_RUN_H
#define QSPEC_KIT_RUN_H

#include "compare.h"
#include "ops.h"
#include "suite.h"

#define QSK_MAX_FAIL_LINES 3

typedef enum { QSK_RES_PASS, QSK_RES_FAIL, QSK_RES_SKIP } qsk_res_kind;

/* One output that failed its comparison. */
typedef struct qsk_out_fail {
    char output[QSK_NAME_LEN];
    char compare[96]; /* the comparison as `qspec show` prints it */
    const qsk_output *o;
    size_t numel;
    qsk_cmp_result cmp;
} qsk_out_fail;

typedef struct qsk_case_result {
    const qsk_case *c;
    qsk_res_kind kind;
    char message[512]; /* the first failure line's text, or why the case was skipped */
    char *out;         /* the case's failure lines as printed (malloc'd) */
    size_t outlen;
    int lines;          /* failure lines recorded, shown or not */
    double seconds;     /* wall time the case took */
    double ref_seconds; /* of which the reference's run; < 0 when it did not run */
    int metered;        /* a plugin ran the case: slots holds its kernel slots' time */
    int backend_error;  /* the plugin returned an error: its worker is not reused [CASE-ISOLATE] */
    qsk_slot_time slots[QSK_NSLOTS]; /* [CASE-TIMING] */
    qsk_out_fail *fails;             /* malloc'd */
    size_t nfails;
} qsk_case_result;

/* Starts the record of case c as passed. */
void qsk_result_init(qsk_case_result *r, const qsk_case *c);
void qsk_result_free(qsk_case_result *r);
/* Records a failure line ([CASE-REPORT]); the first becomes the case's message. */
void qsk_result_fail(qsk_case_result *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends the "N more failure lines not shown" line when more than three were recorded. */
void qsk_result_finish(qsk_case_result *r);
/* Checks each of c's reference outputs against its golden digest ([CASE-DIGEST]); with
 * update, only checks that each output exists. */
void qsk_check_digests(const qsk_case *c, const qsk_results *ref, qsk_case_result *r, int update);
/* Compares each of c's outputs in got with ref's as the case says ([CASE-RUN]). */
void qsk_compare_outputs(const qsk_case *c, const qsk_results *ref, const qsk_results *got,
                         qsk_case_result *r);
/* The comparison of o as text ("allclose atol 1e-05 rtol 0.001"). */
const char *qsk_cmp_text(const qsk_output *o, char *buf, size_t cap);
/* [CASE-TIMING] The time r spent in the plugin's kernel slots, all of them. */
double qsk_backend_seconds(const qsk_case_result *r);
/* The monotonic clock, in seconds: every time the kit measures. */
double qsk_now_seconds(void);
/* [CASE-TIMING] One line of r's times: "ID: 28.1 s; reference not run; backend 20.3 s in
 * 415 slot calls: gemm 240 x 5.102 s, ..." (slots that ran, longest first). */
void qsk_timing_text(const qsk_case_result *r, char *buf, size_t cap);
/* "pass", "fail" or "not_supported", as the JSON report writes a status. */
const char *qsk_res_name(qsk_res_kind k);

#endif
