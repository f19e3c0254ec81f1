/* report.h: the reports of a run ([CASE-REPORT], [CASE-REPORT-HTML]): the results as JSON,
 * as JUnit XML for CI dashboards, and as one self-contained HTML page with an error
 * histogram for every output that failed its comparison. Each writer writes to an open
 * stream; callers write to a temporary file renamed into place (fileio.h), so an error
 * never leaves a partial report. */
#ifndef QSPEC_KIT_REPORT_H
#define QSPEC_KIT_REPORT_H

#include <stdio.h>

#include "run.h"

typedef struct qsk_report {
    const char *backend;         /* as given to --backend: ref, a name or a path */
    const char *backend_name;    /* the backend table's name ("ref" for the reference) */
    const char *backend_version; /* the backend's own version */
    const char *device;          /* the backend's device line */
    char date[32];               /* when the run started, UTC, 2026-12-02T16:54:00Z */
    const qsk_case_result *rs;
    size_t n;
    const qsk_suite *suite; /* for its load errors */
    size_t counts[3];       /* by qsk_res_kind */
    const char *title;      /* the HTML page's heading; NULL for the default */
} qsk_report;

/* The current time as UTC ISO 8601 ("2026-12-02T16:54:00Z"). */
void qsk_report_date(char date[32]);
/* The results as JSON: kit, version, ABI, backend, date, summary, load errors, and one line
 * per case (id, file, line, status, message, rules). */
void qsk_report_json(FILE *fp, const qsk_report *r);
/* JUnit XML: one testsuite, a testcase per case (classname qspec.FILE-STEM, name the id)
 * with a failure, skipped or (for a case file that did not load) error child. */
void qsk_report_junit(FILE *fp, const qsk_report *r);
/* The HTML report (report_html.c). */
void qsk_report_html(FILE *fp, const qsk_report *r);
/* s as a JSON string literal; bytes that are not UTF-8 become U+FFFD. */
void qsk_json_string(FILE *fp, const char *s);
/* s escaped for XML and HTML text and attribute values (& < > " '); control characters
 * other than tab and newline become spaces, bytes that are not UTF-8 become U+FFFD. */
void qsk_xml_text(FILE *fp, const char *s);
/* The case file's name without folders and without .yaml, for classnames and labels. */
void qsk_file_stem(const char *path, char *buf, size_t cap);

#endif
