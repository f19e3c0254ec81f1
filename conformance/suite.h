/* suite.h: a suite of case files gathered from files and folders, the rule IDs the
 * spec defines, and the loading of every file with its errors collected. */
#ifndef QSPEC_KIT_SUITE_H
#define QSPEC_KIT_SUITE_H

#include "cases.h"

typedef struct qsk_suite {
    qsk_case_file *files;
    size_t nfiles;
    char **errors; /* one line per file that failed to load */
    size_t nerrors;
} qsk_suite;

/* Whether id is a rule defined in spec/ (the list is compiled in from the spec files). */
int qsk_rule_defined(const char *id, void *unused);
/* All defined rule IDs, sorted. */
const char *const *qsk_rules(size_t *n);
/* Loads every case file named by paths (files, or folders searched recursively for
 * *.yaml); with no paths, the installed default suite. A file that fails to load is
 * recorded in errors and the others still load. Returns QS_ERR_IO only when a path
 * does not exist. */
qs_status qsk_suite_load(qs_ctx *ctx, int npaths, char **paths, qsk_suite *s);
void qsk_suite_free(qsk_suite *s);
/* The default suite folder. */
const char *qsk_default_case_dir(void);

#endif
