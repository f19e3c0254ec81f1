/* qstest.h: shared helpers for the Check unit tests — a main() runner and hex-printing
 * assertions, so a failure shows the values involved in hex and in decimal. */
#ifndef QSPEC_TESTS_QSTEST_H
#define QSPEC_TESTS_QSTEST_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs the suite and returns the process exit status (0 when every test passed). */
static inline int qst_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* Path of a file under the source tree's tests/fixtures (static buffer per call site). */
#define QST_FIXTURE(buf, name)                                                                     \
    (snprintf((buf), sizeof(buf), "%s/tests/fixtures/%s", QS_TEST_SRCDIR, (name)), (buf))

#endif
