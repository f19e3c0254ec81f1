/* exhaustive_format.c: `make check-exhaustive` for spec/formats.md: all 2^32 FP32 inputs,
 * encoded by ref/format.c, against the naive oracle (tests/oracle.c), for every format under
 * rne and each policy, and E4M3, E5M2, E2M1 under every mode and policy (sr with fixed u).
 * Where the oracle is monotone it is asked once per run of equal results, otherwise per input.
 * QS_THREADS (default 2) threads; `exhaustive_format [FMT|all [MODE]]` runs a subset and
 * QS_SKIP_RNE skips the rne passes. Checks [FMT-ENCODE] and the rules the oracle applies;
 * then (`exhaustive_format fast16` alone) the bit-level BF16/FP16 conversions against the
 * generic ones. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracle.h"
#include "qspec/format.h"

typedef struct pass {
    qs_dtype dt;
    qs_round round;
    qs_overflow ovf;
    uint32_t u;
} pass;

typedef struct half_job {
    const pass *p;
    uint32_t sign;   /* 0 or 0x80000000 */
    uint32_t lo, hi; /* the magnitudes this job checks */
    uint64_t failures;
    uint64_t checked;
} half_job;

#define MAX_THREADS 64

static uint32_t oracle_at(const pass *p, uint32_t bits)
{
    return qso_encode(p->dt, (double)qs_f32_from_bits(bits), p->round, p->ovf, p->u);
}

static void report(half_job *j, uint32_t bits, uint32_t got, uint32_t want)
{
    if (j->failures++ < 10)
        printf("FAIL %s %s/%s u=0x%08x: input 0x%08x (%a) gave 0x%x, oracle 0x%x\n",
               qs_dtype_name(j->p->dt), qs_round_name(j->p->round), qs_overflow_name(j->p->ovf),
               j->p->u, bits, (double)qs_f32_from_bits(bits), got, want);
}

/* Checks inputs lo..hi (magnitude bits, sign added) against one expected code. */
static void check_run(half_job *j, uint32_t lo, uint32_t hi, uint32_t want)
{
    qs_cast_mode mode = {j->p->round, j->p->ovf, j->p->u};
    for (uint32_t m = lo;; m++) {
        uint32_t got = 0;
        qs_encode_f32(j->p->dt, qs_f32_from_bits(m | j->sign), mode, &got);
        if (got != want)
            report(j, m | j->sign, got, want);
        if (m == hi)
            break;
    }
    j->checked += (uint64_t)(hi - lo) + 1;
}

/* The last magnitude in [cur, end] with the oracle result of cur, assuming one run. */
static uint32_t run_end(const pass *p, uint32_t sign, uint32_t cur, uint32_t end, uint32_t want)
{
    uint64_t good = cur, step = 1;
    while (good + step <= end && oracle_at(p, (uint32_t)(good + step) | sign) == want) {
        good += step;
        step *= 2;
    }
    uint64_t bad = good + step <= end ? good + step : (uint64_t)end + 1;
    while (bad - good > 1) {
        uint64_t mid = good + (bad - good) / 2;
        if (oracle_at(p, (uint32_t)mid | sign) == want)
            good = mid;
        else
            bad = mid;
    }
    return (uint32_t)good;
}

/* Magnitudes above max under sr alternate between two results: no runs there. */
static uint32_t monotone_limit(const pass *p)
{
    if (p->round != QS_ROUND_SR)
        return 0x7F800000u;
    return qs_f32_bits((float)qs_format_info_get(p->dt)->max_value);
}

static void *run_half(void *arg)
{
    half_job *j = arg;
    uint32_t limit = monotone_limit(j->p);
    uint64_t cur = j->lo;
    uint32_t mono_end = limit < j->hi ? limit : j->hi;
    while (cur <= mono_end) {
        uint32_t want = oracle_at(j->p, (uint32_t)cur | j->sign);
        uint32_t end = run_end(j->p, j->sign, (uint32_t)cur, mono_end, want);
        check_run(j, (uint32_t)cur, end, want);
        cur = (uint64_t)end + 1;
    }
    for (; cur <= j->hi; cur++) {
        uint32_t want = oracle_at(j->p, (uint32_t)cur | j->sign);
        check_run(j, (uint32_t)cur, (uint32_t)cur, want);
    }
    return NULL;
}

static int nthreads = 2; /* QS_THREADS, default 2; an even number of jobs, half per sign */

static const char *only_format; /* argv[1]: run only the passes of this format */

static int run_pass(const pass *p)
{
    if (only_format && strcmp(only_format, qs_dtype_name(p->dt)) != 0)
        return 1;
    half_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int per_sign = nthreads / 2;
    uint32_t chunk = (uint32_t)(0x80000000u / (uint32_t)per_sign);
    oracle_at(p, 0); /* builds the oracle's table before the threads share it */
    for (int t = 0; t < 2 * per_sign; t++) {
        half_job j = {p, t < per_sign ? 0u : 0x80000000u, 0, 0, 0, 0};
        int c = t % per_sign;
        j.lo = (uint32_t)c * chunk;
        j.hi = c == per_sign - 1 ? 0x7FFFFFFFu : j.lo + chunk - 1;
        jobs[t] = j;
    }
    for (int t = 0; t < 2 * per_sign; t++)
        if (pthread_create(&th[t], NULL, run_half, &jobs[t]) != 0) {
            run_half(&jobs[t]); /* no thread: run it here */
            th[t] = pthread_self();
        }
    uint64_t fails = 0, checked = 0;
    for (int t = 0; t < 2 * per_sign; t++) {
        if (!pthread_equal(th[t], pthread_self()))
            pthread_join(th[t], NULL);
        fails += jobs[t].failures;
        checked += jobs[t].checked;
    }
    printf("%-5s %-4s %-9s u=0x%08x: %llu inputs, %llu failures\n", qs_dtype_name(p->dt),
           qs_round_name(p->round), qs_overflow_name(p->ovf), p->u, (unsigned long long)checked,
           (unsigned long long)fails);
    fflush(stdout);
    return fails == 0;
}

/* The bit-level 16-bit conversions of ref/format.c (qs_f32_to_bf16, qs_f32_to_f16, their
 * inverses and qs_round_bf16, the engine's hot path) against the generic encoder and decoder the
 * passes above check against the oracle: every FP32 input, every 16-bit code. */
static int run_fast16(void)
{
    const qs_cast_mode m = {QS_ROUND_RNE, QS_OVF_NOSAT, 0};
    uint64_t bad = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u++) {
        float x = qs_f32_from_bits((uint32_t)u);
        uint32_t bf = 0, h = 0;
        qs_encode_f32(QS_BF16, x, m, &bf);
        qs_encode_f32(QS_FP16, x, m, &h);
        uint32_t rb = qs_f32_bits(qs_round_bf16(x));
        if (qs_f32_to_bf16(x) != bf || qs_f32_to_f16(x) != h ||
            rb != qs_f32_bits((float)qs_decode_f64(QS_BF16, bf))) {
            if (bad++ < 10)
                printf("FAIL fast16 encode 0x%08X: bf16 0x%04X (generic 0x%04X), fp16 0x%04X "
                       "(generic 0x%04X)\n",
                       (unsigned)u, qs_f32_to_bf16(x), bf, qs_f32_to_f16(x), h);
        }
    }
    for (uint32_t c = 0; c < 65536; c++) {
        uint32_t b = qs_f32_bits(qs_bf16_to_f32((uint16_t)c));
        uint32_t h = qs_f32_bits(qs_f16_to_f32((uint16_t)c));
        if (b != qs_f32_bits((float)qs_decode_f64(QS_BF16, c)) ||
            h != qs_f32_bits((float)qs_decode_f64(QS_FP16, c)) ||
            b != qs_f32_bits(qs_decode_f32(QS_BF16, c)) ||
            h != qs_f32_bits(qs_decode_f32(QS_FP16, c))) {
            if (bad++ < 10)
                printf("FAIL fast16 decode 0x%04X: bf16 0x%08X, fp16 0x%08X\n", (unsigned)c,
                       (unsigned)b, (unsigned)h);
        }
    }
    printf("fast16 (bf16/fp16 bit paths = generic): %s\n", bad ? "FAILED" : "ok");
    return bad == 0;
}

int main(int argc, char **argv)
{
    static const qs_dtype all[] = {QS_E4M3, QS_E5M2, QS_E2M1, QS_E8M0,
                                   QS_E2M3, QS_E3M2, QS_BF16, QS_FP16};
    static const qs_dtype moded[] = {QS_E4M3, QS_E5M2, QS_E2M1};
    time_t t0 = time(NULL);
    only_format = argc > 1 && strcmp(argv[1], "all") != 0 ? argv[1] : NULL;
    const char *env = getenv("QS_THREADS");
    if (env && atoi(env) >= 2)
        nthreads = atoi(env) > MAX_THREADS ? MAX_THREADS : atoi(env);
    int ok = 1;
    int only_round = argc > 2 ? qs_round_from_name(argv[2]) : -1; /* argv[2]: one mode */
    int skip_rne = getenv("QS_SKIP_RNE") != NULL;                 /* resume a split run */
    for (size_t f = 0; f < sizeof all / sizeof all[0] && !skip_rne; f++)
        for (int o = 0; o < QS_OVF_COUNT; o++) {
            pass p = {all[f], QS_ROUND_RNE, (qs_overflow)o, 0};
            ok &= run_pass(&p);
        }
    for (size_t f = 0; f < sizeof moded / sizeof moded[0] && only_round != QS_ROUND_RNE; f++)
        for (int r = only_round >= 0 ? only_round : QS_ROUND_RZ;
             r < (only_round >= 0 ? only_round + 1 : QS_ROUND_COUNT); r++)
            for (int o = 0; o < QS_OVF_COUNT; o++) {
                pass p = {moded[f], (qs_round)r, (qs_overflow)o, 0x80000000u};
                ok &= run_pass(&p);
                if (r == QS_ROUND_SR && o == QS_OVF_SATFINITE) {
                    p.u = 0xFFFFF000u;
                    ok &= run_pass(&p);
                }
            }
    if (!only_format || strcmp(only_format, "fast16") == 0)
        ok &= run_fast16();
    printf("exhaustive_format: %s in %ld s\n", ok ? "all passed" : "FAILED",
           (long)(time(NULL) - t0));
    return ok ? 0 : 1;
}
