/* pkgcheck.h: reading back the reports of a certification package, so that `qspec
 * verify-package` can check that they say the same as results.json and the manifest
 * (spec/cases.md [CASE-CERTIFY-VERIFY]): the counts and each case's status in junit.xml and
 * report.html, and the backend junit.xml names. Only what the kit itself writes is read
 * (report.c, report_html.c); anything else is "not a report of this kit". */
#ifndef QSPEC_KIT_PKGCHECK_H
#define QSPEC_KIT_PKGCHECK_H

#include <stddef.h>

#include "run.h"

typedef struct qsk_pkg_case {
    char id[QSK_ID_LEN];
    int kind; /* qsk_res_kind; -1 for JUnit's load error */
} qsk_pkg_case;

typedef struct qsk_pkg_report {
    int found;                              /* the counts were found where the kit writes them */
    size_t tests, pass, fail, skip, errors; /* as the report's summary says */
    qsk_pkg_case *cases;                    /* malloc'd, in report order */
    size_t n;
    char backend[256], backend_version[256], device[256]; /* JUnit's properties, unescaped */
} qsk_pkg_report;

/* Reads junit.xml's text: the testsuites counts, each testcase and the properties. Returns
 * nonzero when out of memory. */
int qsk_pkg_read_junit(const char *text, qsk_pkg_report *r);
/* Reads report.html's text: the verdict's counts and the first table's rows. */
int qsk_pkg_read_html(const char *text, qsk_pkg_report *r);
void qsk_pkg_report_free(qsk_pkg_report *r);

#endif
