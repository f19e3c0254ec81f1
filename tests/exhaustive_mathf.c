/* exhaustive_mathf.c: every binary32 input of each correctly rounded function of
 * ref/mathf.c against an independent oracle (make check-exhaustive). The oracle is the
 * libm long double function when its result is far enough from a binary32 rounding boundary,
 * and MPFR otherwise. Two threads split the inputs. Usage: exhaustive_mathf [name [step]].
 * Checks [MATH-EXP] [MATH-EXP2] [MATH-LOG] [MATH-LOG1P] [MATH-SIN] [MATH-COS] [MATH-SQRT]
 * [MATH-RSQRT] [MATH-SPECIAL] [MATH-TRIG-RANGE] [MATH-CR]. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <mpfr.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qspec/mathf.h"

#define QSE_THREADS    2
#define QSE_CHUNK      (1u << 16)
#define QSE_MAX_REPORT 10

typedef int (*qse_mpfr_fn)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);

typedef struct {
    const char *name;
    float (*fn)(float);
    long double (*ld)(long double);
    qse_mpfr_fn mp;
    int trig; /* defined only for |x| <= QS_MATHF_TRIG_MAX */
} qse_func;

static long double qse_rsqrtl(long double x)
{
    return 1.0L / sqrtl(x);
}

static const qse_func qse_funcs[] = {
    {"expf", qs_expf, expl, mpfr_exp, 0},     {"exp2f", qs_exp2f, exp2l, mpfr_exp2, 0},
    {"logf", qs_logf, logl, mpfr_log, 0},     {"log1pf", qs_log1pf, log1pl, mpfr_log1p, 0},
    {"sinf", qs_sinf, sinl, mpfr_sin, 1},     {"cosf", qs_cosf, cosl, mpfr_cos, 1},
    {"sqrtf", qs_sqrtf, sqrtl, mpfr_sqrt, 0}, {"rsqrtf", qs_rsqrtf, qse_rsqrtl, mpfr_rec_sqrt, 0},
};

typedef struct {
    const qse_func *f;
    uint64_t step;
    unsigned tid;
    uint64_t checked, bad, mpfr_used;
} qse_job;

static pthread_mutex_t qse_print_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t qse_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float qse_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The correctly rounded binary32 result by MPFR (exponent range of binary32). */
static float qse_mpfr_oracle(const qse_func *f, float x, mpfr_t mx, mpfr_t my)
{
    mpfr_set_flt(mx, x, MPFR_RNDN);
    int inex = f->mp(my, mx, MPFR_RNDN);
    inex = mpfr_subnormalize(my, inex, MPFR_RNDN);
    (void)inex;
    return mpfr_get_flt(my, MPFR_RNDN);
}

/* The expected bits for input x; counts the MPFR fallbacks. */
static uint32_t qse_expected(const qse_func *f, float x, mpfr_t mx, mpfr_t my, uint64_t *mp_used)
{
    if (isnan(x) || (f->trig && fabsf(x) > QS_MATHF_TRIG_MAX)) {
        return 0x7fc00000u;
    }
    long double y = f->ld((long double)x);
    if (isnan(y)) {
        return 0x7fc00000u;
    }
    if (isinf(y) || y == 0.0L) {
        return qse_bits((float)y);
    }
    long double e = fabsl(y) * (LDBL_EPSILON * 256.0L);
    float a = (float)(y - e), b = (float)(y + e);
    if (a == b) {
        return qse_bits(a);
    }
    *mp_used += 1;
    return qse_bits(qse_mpfr_oracle(f, x, mx, my));
}

static void qse_report(const qse_func *f, uint32_t u, uint32_t got, uint32_t want)
{
    pthread_mutex_lock(&qse_print_lock);
    printf("FAIL %s(0x%08" PRIx32 " = %a): got 0x%08" PRIx32 " (%a), want 0x%08" PRIx32 " (%a)\n",
           f->name, u, (double)qse_float(u), got, (double)qse_float(got), want,
           (double)qse_float(want));
    pthread_mutex_unlock(&qse_print_lock);
}

static void *qse_worker(void *arg)
{
    qse_job *job = arg;
    mpfr_t mx, my;
    mpfr_set_emin(-148);
    mpfr_set_emax(128);
    mpfr_init2(mx, 24);
    mpfr_init2(my, 24);
    uint64_t nchunks = (1ull << 32) / QSE_CHUNK;
    for (uint64_t c = job->tid; c < nchunks; c += QSE_THREADS) {
        for (uint64_t i = c * QSE_CHUNK; i < (c + 1) * QSE_CHUNK; i += job->step) {
            uint32_t u = (uint32_t)i;
            float x = qse_float(u);
            uint32_t got = qse_bits(job->f->fn(x));
            uint32_t want = qse_expected(job->f, x, mx, my, &job->mpfr_used);
            job->checked++;
            if (got != want) {
                if (job->bad < QSE_MAX_REPORT) {
                    qse_report(job->f, u, got, want);
                }
                job->bad++;
            }
        }
    }
    mpfr_clear(mx);
    mpfr_clear(my);
    return NULL;
}

static double qse_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Checks one function over all inputs (every step-th one); returns the mismatch count. */
static uint64_t qse_run(const qse_func *f, uint64_t step)
{
    qse_job jobs[QSE_THREADS];
    pthread_t th[QSE_THREADS];
    double t0 = qse_now();
    for (unsigned t = 0; t < QSE_THREADS; t++) {
        jobs[t] = (qse_job){f, step, t, 0, 0, 0};
        if (pthread_create(&th[t], NULL, qse_worker, &jobs[t]) != 0) {
            fprintf(stderr, "exhaustive_mathf: cannot start a thread\n");
            exit(2);
        }
    }
    uint64_t checked = 0, bad = 0, mp = 0;
    for (unsigned t = 0; t < QSE_THREADS; t++) {
        pthread_join(th[t], NULL);
        checked += jobs[t].checked;
        bad += jobs[t].bad;
        mp += jobs[t].mpfr_used;
    }
    printf("%-7s %11" PRIu64 " inputs, %" PRIu64 " wrong, %" PRIu64 " decided by MPFR, %.1f s\n",
           f->name, checked, bad, mp, qse_now() - t0);
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    uint64_t step = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    if (step == 0) {
        step = 1;
    }
    uint64_t bad = 0;
    int ran = 0;
    double t0 = qse_now();
    for (size_t i = 0; i < sizeof qse_funcs / sizeof qse_funcs[0]; i++) {
        if (only != NULL && strcmp(only, "all") != 0 && strcmp(only, qse_funcs[i].name) != 0) {
            continue;
        }
        bad += qse_run(&qse_funcs[i], step);
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "exhaustive_mathf: unknown function '%s'\n", only);
        return 2;
    }
    printf("total: %" PRIu64 " wrong, %.1f s\n", bad, qse_now() - t0);
    return bad == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
