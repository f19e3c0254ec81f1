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

/* The tests' random inputs: a 64-bit xorshift, deterministic per seed. */
static inline uint64_t *qst_rng(void)
{
    static uint64_t state;
    return &state;
}

static inline void qst_rng_seed(uint64_t seed)
{
    *qst_rng() = seed;
}

/* Uniform in [lo, hi). */
static inline float qst_rnd(float lo, float hi)
{
    uint64_t *s = qst_rng();
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    double u = (double)(*s >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

/* Path of a file under the source tree's tests/fixtures (static buffer per call site). */
#define QST_FIXTURE(buf, name)                                                                     \
    (snprintf((buf), sizeof(buf), "%s/tests/fixtures/%s", QS_TEST_SRCDIR, (name)), (buf))

#endif
