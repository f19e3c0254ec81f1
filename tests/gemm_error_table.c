/* gemm_error_table.c: the error table of docs/gemm.md. Random normal operands quantized
 * to E4M3 with a per-tensor scale (current scaling, amax -> 448), multiplied under
 * fp32_seq and hopper_fp8_tc (fast, and promote_every=128), each compared with exact.
 * Not part of make check: `make tests/gemm_error_table && ./tests/gemm_error_table`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "qspec/format.h"
#include "qspec/gemm.h"

#define TM 32
#define TN 32

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Approximately N(0,1): the Irwin-Hall sum of 12 uniforms, minus 6 (no libm needed). */
static float rand_normal(uint64_t *s, int positive)
{
    double sum = 0.0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) * 0x1p-53;
    sum -= 6.0;
    return (float)(positive ? fabs(sum) : sum);
}

/* Quantizes n values to E4M3 with one scale 448/amax; writes decoded values and returns
 * the dequantization multiplier (scale_inv). */
static float quantize_e4m3(const float *x, float *q, size_t n)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float scale = 448.0f / amax;
    for (size_t i = 0; i < n; i++)
        q[i] = qs_decode_f32(QS_E4M3, qs_encode_e4m3(x[i] * scale, QS_OVF_SATFINITE));
    return 1.0f / scale;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One row of the table: max and median per-element relative error, and the normwise
 * error max|y - yx| / max|yx|, of model acc against the exact result yx. */
static int row(const qs_gemm_params *base, qs_gemm_acc acc, const char *label,
               const qs_gemm_operand *a, const qs_gemm_operand *b, const float *yx)
{
    static float y[TM * TN];
    static double rel[TM * TN];
    qs_gemm_params p = *base;
    p.acc = acc;
    if (qs_gemm(NULL, &p, a, b, NULL, y) != QS_OK)
        return 1;
    double emax = 0.0, ymax = 0.0;
    for (int i = 0; i < TM * TN; i++) {
        double e = fabs((double)y[i] - (double)yx[i]);
        rel[i] = yx[i] != 0.0f ? e / fabs((double)yx[i]) : 0.0;
        emax = e > emax ? e : emax;
        ymax = fabs((double)yx[i]) > ymax ? fabs((double)yx[i]) : ymax;
    }
    qsort(rel, TM * TN, sizeof rel[0], cmp_double);
    printf("| %6lld | %-26s | %9.2e | %9.2e | %9.2e |\n", (long long)p.k, label, rel[TM * TN - 1],
           0.5 * (rel[TM * TN / 2 - 1] + rel[TM * TN / 2]), emax / ymax);
    return 0;
}

static int table(int positive)
{
    static const int64_t ks[3] = {256, 4096, 16384};
    printf("\n%s inputs, M = N = %d, E4M3 per-tensor scaling, FP32 output\n\n",
           positive ? "|N(0,1)| (all positive)" : "N(0,1)", TM);
    printf("| K      | model                      | max rel   | median rel | normwise  |\n");
    printf("|--------|----------------------------|-----------|-----------|-----------|\n");
    for (int t = 0; t < 3; t++) {
        int64_t k = ks[t];
        uint64_t seed = 0x5EED0000u + (uint64_t)t + (positive ? 100u : 0u);
        float *x = malloc(sizeof(float) * (size_t)(TM + TN) * (size_t)k);
        float *q = malloc(sizeof(float) * (size_t)(TM + TN) * (size_t)k);
        static float yx[TM * TN];
        if (!x || !q)
            return 1;
        for (int64_t i = 0; i < (TM + TN) * k; i++)
            x[i] = rand_normal(&seed, positive);
        float sa = quantize_e4m3(x, q, (size_t)(TM * k));
        float sb = quantize_e4m3(x + TM * k, q + TM * k, (size_t)(TN * k));
        qs_gemm_operand a = {q, QS_GEMM_SCALE_TENSOR, NULL, sa, QS_DTYPE_INVALID};
        qs_gemm_operand b = {q + TM * k, QS_GEMM_SCALE_TENSOR, NULL, sb, QS_DTYPE_INVALID};
        qs_gemm_params p = {TM, TN, k, 1.0f, 0.0f, {QS_GEMM_ACC_EXACT, 0}, QS_FP32};
        if (qs_gemm(NULL, &p, &a, &b, NULL, yx) != QS_OK)
            return 1;
        const qs_gemm_acc seq = {QS_GEMM_ACC_FP32_SEQ, 0};
        const qs_gemm_acc fast = {QS_GEMM_ACC_HOPPER_FP8_TC, 0};
        const qs_gemm_acc split = {QS_GEMM_ACC_HOPPER_FP8_TC, 128};
        int bad = row(&p, seq, "fp32_seq", &a, &b, yx) ||
                  row(&p, fast, "hopper_fp8_tc (fast)", &a, &b, yx) ||
                  row(&p, split, "hopper_fp8_tc promote 128", &a, &b, yx);
        free(x);
        free(q);
        if (bad)
            return 1;
    }
    return 0;
}

int main(void)
{
    if (table(0) || table(1)) {
        fprintf(stderr, "gemm_error_table: a GEMM failed\n");
        return 2;
    }
    return 0;
}
