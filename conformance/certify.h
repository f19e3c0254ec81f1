/* certify.h: certification runs (spec/cases.md [CASE-CERTIFY-LIST], [CASE-CERTIFY-PACKAGE]).
 * The must-pass list is the file certify.list of the suite folder: one case-id glob a
 * line. `qspec run --certify DIR` runs exactly the cases it selects, with no overrides, and
 * writes the package DIR; `qspec verify-package DIR` re-checks one. */
#ifndef QSPEC_KIT_CERTIFY_H
#define QSPEC_KIT_CERTIFY_H

#include "outdir.h"
#include "report.h"

#define QSK_MUSTPASS_FILE "certify.list"

typedef struct qsk_mustpass {
    char *path;      /* SUITE/certify.list */
    char sha256[65]; /* of the file's bytes */
    char **globs;
    int *lines; /* the line of each glob */
    size_t n;
} qsk_mustpass;

/* Reads suite_dir/certify.list; a missing file or a malformed line is QS_ERR_IO or
 * QS_ERR_FORMAT with a "path:line: reason" message. */
qs_status qsk_mustpass_load(qs_ctx *ctx, const char *suite_dir, qsk_mustpass *m);
/* Whether case id is on the list. */
int qsk_mustpass_match(const qsk_mustpass *m, const char *id);
/* Checks that every glob of the list matches a case of s (a stale line is QS_ERR_FORMAT). */
qs_status qsk_mustpass_check(qs_ctx *ctx, const qsk_mustpass *m, const qsk_suite *s);
void qsk_mustpass_free(qsk_mustpass *m);

typedef struct qsk_certify_info {
    const char *suite_dir;
    const qsk_mustpass *list;
    const char *plugin_path; /* the plugin's file, NULL for the reference */
} qsk_certify_info;

/* Whether a certification run's results certify the backend: no case failed, none was
 * missing, and at least one passed. */
int qsk_certify_ok(const qsk_report *r);
/* Writes the package (manifest.json, manifest.sha256, results.json, junit.xml,
 * report.html) into the open temporary directory o. */
qs_status qsk_certify_write(qs_ctx *ctx, qsk_outdir *o, const qsk_report *r,
                            const qsk_certify_info *ci);

#endif
