/* test_gemm.c: the reference GEMM of spec/gemm.md — the TN layout, scale application per
 * scaling mode, the accumulation models on cases where they differ, `exact` against an
 * independent 128-bit integer computation, the output rounding, and gemm_bound (it holds
 * for FP32 sums in any order and fails for a wrong result). Expected values are worked
 * out by hand in the comments or computed here independently of ref/gemm.c. */
#include <math.h>
#include <string.h>

#include "qspec/format.h"
#include "qspec/gemm.h"
#include "qstest.h"

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Asserts y has exactly the bits of e, printing both in hex and decimal. */
#define ASSERT_F32_EQ(y, e)                                                                        \
    do {                                                                                           \
        float y_ = (y), e_ = (e);                                                                  \
        ck_assert_msg(bits_of(y_) == bits_of(e_), "%s = %a (0x%08x), expected %a (0x%08x)", #y,    \
                      (double)y_, bits_of(y_), (double)e_, bits_of(e_));                           \
    } while (0)

static qs_gemm_params params(int64_t m, int64_t n, int64_t k, qs_gemm_acc_kind kind,
                             int64_t promote)
{
    qs_gemm_params p;
    memset(&p, 0, sizeof p);
    p.m = m;
    p.n = n;
    p.k = k;
    p.alpha = 1.0f;
    p.beta = 0.0f;
    p.acc.kind = kind;
    p.acc.promote_every = promote;
    p.out_dtype = QS_FP32;
    return p;
}

static qs_gemm_operand plain(const float *data)
{
    qs_gemm_operand op = {data, QS_GEMM_SCALE_NONE, NULL, 1.0f, QS_DTYPE_INVALID};
    return op;
}

/* One dot product a . b (1 x 1 output) under a model, FP32 output. */
static float dot1(const float *a, const float *b, int64_t k, qs_gemm_acc_kind kind, int64_t promote)
{
    qs_gemm_params p = params(1, 1, k, kind, promote);
    qs_gemm_operand oa = plain(a), ob = plain(b);
    float y = -12345.0f;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    return y;
}

static void fill(float *v, int64_t k, float x)
{
    for (int64_t i = 0; i < k; i++)
        v[i] = x;
}

/* ---------------------------------------------------------------- a tiny E4M3 decoder */

/* LOCAL TEST HELPER, independent of ref/format.c (which is not written yet): the OCP
 * e4m3fn value of a non-NaN code (bias 7, subnormals m * 2^-9). */
static float test_e4m3_value(unsigned code)
{
    unsigned e = (code >> 3) & 15u, m = code & 7u;
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8u + m), (int)e - 10);
    return (code & 0x80u) ? -v : v;
}

/* xorshift64*: deterministic test data. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* A random finite E4M3 value (uniform over the non-NaN codes). */
static float rand_e4m3(uint64_t *s)
{
    for (;;) {
        unsigned code = (unsigned)(rng_next(s) >> 56);
        if ((code & 0x7Fu) != 0x7Fu)
            return test_e4m3_value(code);
    }
}

/* ---------------------------------------------------------------- names and layout */

START_TEST(test_accumulation_models_are_named_in_one_table)
{
    /* [GEMM-ACC-EXACT] [GEMM-ACC-FP32SEQ] [GEMM-ACC-HOPPER] */
    ck_assert_str_eq(qs_gemm_acc_name(QS_GEMM_ACC_EXACT), "exact");
    ck_assert_str_eq(qs_gemm_acc_name(QS_GEMM_ACC_FP32_SEQ), "fp32_seq");
    ck_assert_str_eq(qs_gemm_acc_name(QS_GEMM_ACC_HOPPER_FP8_TC), "hopper_fp8_tc");
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++)
        ck_assert_int_eq(qs_gemm_acc_from_name(qs_gemm_acc_name((qs_gemm_acc_kind)kind)), kind);
    ck_assert_int_eq(qs_gemm_acc_from_name("fp32"), -1);
    ck_assert_int_eq(qs_gemm_acc_from_name(NULL), -1);
    ck_assert_ptr_null(qs_gemm_acc_name(QS_GEMM_ACC_COUNT));
}
END_TEST

START_TEST(test_tn_layout_reads_b_as_n_by_k)
{
    /* [GEMM-TN]: Y[m,n] = sum_k A[m,k] B[n,k]. A = [[1,2,3],[4,5,6]], B = [[1,0,1],[0,1,0]]
     * gives Y = [[1+3, 2], [4+6, 5]] = [[4,2],[10,5]] under every model. */
    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 1, 0, 1, 0};
    const float want[4] = {4, 2, 10, 5};
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++) {
        qs_gemm_params p = params(2, 2, 3, (qs_gemm_acc_kind)kind, 0);
        qs_gemm_operand oa = plain(a), ob = plain(b);
        float y[4];
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
        for (int i = 0; i < 4; i++)
            ASSERT_F32_EQ(y[i], want[i]);
    }
}
END_TEST

/* ---------------------------------------------------------------- models where they differ */

START_TEST(test_cancellation_exact_keeps_what_fp32_and_hopper_lose)
{
    /* [GEMM-ACC-EXACT] [GEMM-ACC-FP32SEQ] [GEMM-ACC-HOPPER]: 2^24 + 1 - 2^24.
     * exact: 1. fp32_seq: fl(2^24 + 1) = 2^24 (tie to even), then 0.
     * hopper: one step, emax 24, quantum 2^11: the 1 truncates to 0, sum 0. */
    const float a[3] = {0x1p24f, 1.0f, -0x1p24f}, b[3] = {1, 1, 1};
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_EXACT, 0), 1.0f);
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_FP32_SEQ, 0), 0.0f);
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 0.0f);
}
END_TEST

START_TEST(test_hopper_drops_terms_below_2p13_of_the_step_maximum)
{
    /* [GEMM-ACC-HOPPER], the H200 probes of research: K = 32, 256 + 31 x 2^-6 loses all 31
     * (2^-6 = 2^-14 relative), 256 + 31 x 2^-5 keeps them (2^-13 relative). */
    float a[32], b[32];
    fill(b, 32, 1.0f);
    fill(a, 32, 0x1p-6f);
    a[0] = 256.0f;
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 256.0f);
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 128), 256.0f);
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_FP32_SEQ, 0), 256.0f + 31.0f / 64.0f);
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_EXACT, 0), 256.0f + 31.0f / 64.0f);
    fill(a, 32, 0x1p-5f);
    a[0] = 256.0f;
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 256.0f + 31.0f / 32.0f);
}
END_TEST

START_TEST(test_hopper_truncates_toward_zero_not_down)
{
    /* [GEMM-ACC-HOPPER]: 256 - 31 x 2^-6 gives exactly 256 (each -2^-6 truncates to 0);
     * floor would give 256 - 31 x 2^-5. exact: 256 - 31/64. */
    float a[32], b[32];
    fill(b, 32, 1.0f);
    fill(a, 32, -0x1p-6f);
    a[0] = 256.0f;
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 256.0f);
    ASSERT_F32_EQ(dot1(a, b, 32, QS_GEMM_ACC_EXACT, 0), 256.0f - 31.0f / 64.0f);
}
END_TEST

START_TEST(test_hopper_accumulator_takes_part_in_the_alignment)
{
    /* [GEMM-ACC-HOPPER]: K = 64, 256 in the first step, 32 x 2^-6 in the second: the
     * running 256 sets the second step's maximum, so all 32 are lost. fp32_seq keeps them. */
    float a[64], b[64];
    fill(b, 64, 1.0f);
    fill(a, 64, 0.0f);
    a[0] = 256.0f;
    for (int k = 32; k < 64; k++)
        a[k] = 0x1p-6f;
    ASSERT_F32_EQ(dot1(a, b, 64, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 256.0f);
    ASSERT_F32_EQ(dot1(a, b, 64, QS_GEMM_ACC_FP32_SEQ, 0), 256.5f);
}
END_TEST

START_TEST(test_hopper_sum_is_truncated_to_13_fraction_bits)
{
    /* [GEMM-ACC-HOPPER]: 1 + 1 + 2^-13 (2^-13 = 2^-6 x 2^-7, E4M3 operands): aligned to
     * emax 0 the units of 2^-13 are 8192 + 8192 + 1 = 16385, 15 bits; the sum is RZ'd to
     * 14 significant bits: 16384 units = 2. Negated: -2 (toward zero, not -2 - 2^-12).
     * exact and fp32_seq keep 2 + 2^-13. */
    const float a[3] = {1.0f, 1.0f, 0x1p-6f}, b[3] = {1.0f, 1.0f, 0x1p-7f};
    const float an[3] = {-1.0f, -1.0f, -0x1p-6f};
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 2.0f);
    ASSERT_F32_EQ(dot1(an, b, 3, QS_GEMM_ACC_HOPPER_FP8_TC, 0), -2.0f);
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_EXACT, 0), 2.0f + 0x1p-13f);
    ASSERT_F32_EQ(dot1(a, b, 3, QS_GEMM_ACC_FP32_SEQ, 0), 2.0f + 0x1p-13f);
}
END_TEST

START_TEST(test_hopper_promotion_every_128_restarts_the_partial)
{
    /* [GEMM-ACC-PROMOTE], research probes: K = 256, 256 + 255 x 2^-6. Fast accumulation
     * loses all 255; promote_every=128 loses the 127 of the first block only and adds the
     * second block's 128 x 2^-6 = 2 in FP32: 258. exact 256 + 255/64. */
    float a[256], b[256];
    fill(b, 256, 1.0f);
    fill(a, 256, 0x1p-6f);
    a[0] = 256.0f;
    ASSERT_F32_EQ(dot1(a, b, 256, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 256.0f);
    ASSERT_F32_EQ(dot1(a, b, 256, QS_GEMM_ACC_HOPPER_FP8_TC, 128), 258.0f);
    ASSERT_F32_EQ(dot1(a, b, 256, QS_GEMM_ACC_EXACT, 0), 256.0f + 255.0f / 64.0f);
    /* The large term last: only the 31 small terms of the last step are lost:
     * 224 x 2^-6 = 3.5 kept, then 256 + 3.5. */
    fill(a, 256, 0x1p-6f);
    a[255] = 256.0f;
    ASSERT_F32_EQ(dot1(a, b, 256, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 259.5f);
}
END_TEST

START_TEST(test_hopper_block_scaling_restarts_the_partial_every_group)
{
    /* [GEMM-ACC-PROMOTE] [GEMM-SCALE-BLOCK]: under block scaling the partial never spans
     * two 128-groups, even with promote_every = 0: 256 + 255 x 2^-6 with unit block
     * scales gives 258 as split accumulation does, not the 256 of fast accumulation. */
    static float a[256], b[256];
    fill(b, 256, 1.0f);
    fill(a, 256, 0x1p-6f);
    a[0] = 256.0f;
    const float s[2] = {1.0f, 1.0f};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_params p = params(1, 1, 256, QS_GEMM_ACC_HOPPER_FP8_TC, 0);
    float y;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 258.0f);
}
END_TEST

/* [GEMM-ACC-HOPPER-ALIGN] The probe, K = 32: the step aligns to e_a + e_b = 0, not
 * to the exponent 1 of the product 1.875^2 = 3.515625, so the two 2^-13 terms survive
 * (cuBLASLt on an H200: 0x1.c208p+1; aligning to the product's exponent gives 0x1.c2p+1). */
START_TEST(test_hopper_aligns_to_the_sum_of_operand_exponents)
{
    float a[32] = {0}, b[32] = {0};
    a[0] = 1.875f;
    a[1] = a[2] = 0x1p-6f;
    b[0] = 1.875f;
    b[1] = b[2] = 0x1p-7f;
    qs_gemm_params p = params(1, 1, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 0);
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    float y = 0.0f;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ck_assert_float_eq(y, 0x1.c208p+1f);
    p.acc.promote_every = 128; /* one segment all the same */
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ck_assert_float_eq(y, 0x1.c208p+1f);
}
END_TEST

/* [GEMM-ACC-HOPPER-ALIGN] A subnormal operand's exponent counts as its format's smallest
 * normal exponent: the E4M3 subnormal 2^-7 times 1 aligns the step to -6, not -7, so a
 * 2^-20 product (2^-4 times the E5M2 subnormal 2^-16) falls below 2^(-6-13) and is lost.
 * Without the clamp (no element format named) it is kept. */
START_TEST(test_hopper_clamps_subnormal_operand_exponents)
{
    float a[2] = {0x1p-7f, 0x1p-4f}, b[2] = {1.0f, 0x1p-16f};
    qs_gemm_params p = params(1, 1, 2, QS_GEMM_ACC_HOPPER_FP8_TC, 0);
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E5M2};
    float y = 0.0f;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ck_assert_float_eq(y, 0x1p-7f);
    oa.elem = ob.elem = QS_DTYPE_INVALID;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ck_assert_float_eq(y, 0x1p-7f + 0x1p-20f);
    /* E5M2's clamp is -14: the E5M2 subnormal 2^-15 times 1 aligns to -14, and a 2^-28
     * product (2^-13 times 2^-15) is below 2^(-14-13). */
    float c[2] = {0x1p-15f, 0x1p-13f}, d[2] = {1.0f, 0x1p-15f};
    qs_gemm_operand oc = {c, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E5M2};
    qs_gemm_operand od = {d, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E5M2};
    ck_assert_int_eq(qs_gemm(NULL, &p, &oc, &od, NULL, &y), QS_OK);
    ck_assert_float_eq(y, 0x1p-15f);
}
END_TEST

/* [GEMM-HOPPER-EPILOGUE] The Hopper epilogue adds +0: an exact zero sum times a negative
 * scale is +0 (a plain multiply, as fp32_seq's epilogue does, gives -0). */
START_TEST(test_hopper_epilogue_gives_plus_zero_for_an_exact_zero)
{
    float a[2] = {1.0f, -1.0f}, b[2] = {2.0f, 2.0f};
    qs_gemm_params p = params(1, 1, 2, QS_GEMM_ACC_HOPPER_FP8_TC, 0);
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_TENSOR, NULL, -0.5f, QS_E4M3};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    float y = 1.0f;
    uint32_t bits;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    memcpy(&bits, &y, sizeof bits);
    ck_assert_uint_eq(bits, 0x00000000u);
    p.acc.kind = QS_GEMM_ACC_FP32_SEQ;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    memcpy(&bits, &y, sizeof bits);
    ck_assert_uint_eq(bits, 0x80000000u);
}
END_TEST

START_TEST(test_long_k_fp32_swamps_ones_behind_2p24)
{
    /* [GEMM-ACC-FP32SEQ] [GEMM-ACC-EXACT] [GEMM-ACC-PROMOTE]: K = 4096, 2^24 then 4095 ones.
     * fp32_seq: every 2^24 + 1 ties back to 2^24. exact: 2^24 + 4095 = 16781311 rounds
     * (tie, spacing 2) to the even 16781312. hopper fast: 2^24 (quantum 2^11). hopper
     * split: block 0 keeps 2^24, each of the 31 later blocks adds 128 exactly: 2^24 + 3968. */
    static float a[4096], b[4096];
    fill(b, 4096, 1.0f);
    fill(a, 4096, 1.0f);
    a[0] = 0x1p24f;
    ASSERT_F32_EQ(dot1(a, b, 4096, QS_GEMM_ACC_FP32_SEQ, 0), 0x1p24f);
    ASSERT_F32_EQ(dot1(a, b, 4096, QS_GEMM_ACC_EXACT, 0), 16781312.0f);
    ASSERT_F32_EQ(dot1(a, b, 4096, QS_GEMM_ACC_HOPPER_FP8_TC, 0), 0x1p24f);
    ASSERT_F32_EQ(dot1(a, b, 4096, QS_GEMM_ACC_HOPPER_FP8_TC, 128), 16781184.0f);
}
END_TEST

/* ---------------------------------------------------------------- exact vs independent */

/* 128-bit integers where the compiler has them (GCC, Clang on 64-bit targets); elsewhere
 * the test uses int64 and power-of-two alphas only, still exact. */
#ifdef __SIZEOF_INT128__
__extension__ typedef __int128 i128;
#define QST_HAVE_I128 1
#else
typedef int64_t i128;
#define QST_HAVE_I128 0
#endif

/* Independent reference: E4M3 x E4M3 products are integers in units of 2^-18; their sum,
 * times alpha's 24-bit integer significand, is an exact 128-bit integer; one conversion
 * to float (correctly rounded, round to nearest even) and a power-of-two scaling. */
static float independent_dot(const float *a, const float *b, int64_t k, float alpha)
{
    i128 s = 0;
    for (int64_t i = 0; i < k; i++) {
        double p = ldexp((double)a[i] * (double)b[i], 18);
        s += (i128)(int64_t)p;
    }
    int e;
    double am = frexp((double)alpha, &e); /* alpha = am * 2^e, am * 2^24 an integer */
    s *= (i128)(int64_t)ldexp(am, 24);
    /* s * 2^(e - 24 - 18): convert once (no overflow, no underflow for these sizes). */
    return ldexpf((float)s, e - 24 - 18);
}

START_TEST(test_exact_matches_an_independent_integer_sum)
{
    /* [GEMM-ACC-EXACT] [GEMM-ACC-EXACT-WIDTH]: random E4M3 operands (every binade), K up to
     * 3000, alpha an arbitrary FP32 value: exact equals the 128-bit integer computation. */
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    static float a[4 * 3000], b[3 * 3000];
    const int64_t ks[4] = {1, 31, 777, 3000};
    for (int t = 0; t < 4; t++) {
        int64_t k = ks[t];
        for (int64_t i = 0; i < 4 * k; i++)
            a[i] = rand_e4m3(&seed);
        for (int64_t i = 0; i < 3 * k; i++)
            b[i] = rand_e4m3(&seed);
        qs_gemm_params p = params(4, 3, k, QS_GEMM_ACC_EXACT, 0);
        /* about 1.23 with 128-bit integers; else 2^(t-1), whose significand is 1 */
        p.alpha =
            QST_HAVE_I128 ? from_bits(0x3F9E0A3Bu + (uint32_t)t * 77777u) : ldexpf(1.0f, t - 1);
        qs_gemm_operand oa = plain(a), ob = plain(b);
        float y[12];
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
        for (int64_t m = 0; m < 4; m++)
            for (int64_t n = 0; n < 3; n++)
                ASSERT_F32_EQ(y[m * 3 + n], independent_dot(a + m * k, b + n * k, k, p.alpha));
    }
}
END_TEST

START_TEST(test_exact_holds_extreme_exponents)
{
    /* [GEMM-ACC-EXACT-WIDTH]: terms at both ends of the proved range, 2^127 x 2^127 and
     * 2^-149 x 2^-149, with alpha 2^-126: the big terms cancel exactly and the result is
     * the tiny one, 2^-298 x 2^-126 = 2^-424, which underflows to +0 in FP32; with the tiny
     * term scaled up by the operands instead (2^-149 x 2^127 = 2^-22), alpha 1 returns it. */
    const float a[3] = {0x1p127f, 0x1p-149f, -0x1p127f}, b[3] = {0x1p127f, 0x1p-149f, 0x1p127f};
    qs_gemm_params p = params(1, 1, 3, QS_GEMM_ACC_EXACT, 0);
    p.alpha = 0x1p-126f;
    qs_gemm_operand oa = plain(a), ob = plain(b);
    float y;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0.0f);
    const float b2[3] = {0x1p127f, 0x1p127f, 0x1p127f};
    p.alpha = 1.0f;
    ob = plain(b2);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-22f);
    /* fp32_seq rounds the first product 2^254 to +Inf and the third to -Inf: their sum
     * is NaN, where exact (with no FP32 intermediate) returns 2^-22. */
    p.acc.kind = QS_GEMM_ACC_FP32_SEQ;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ck_assert_msg(isnan(y), "fp32_seq of overflowing products is %a", (double)y);
}
END_TEST

/* ---------------------------------------------------------------- output rounding */

START_TEST(test_exact_rounds_once_to_bf16_where_fp32_then_bf16_double_rounds)
{
    /* [GEMM-OUT-ROUND] [GEMM-ACC-EXACT]: 1 + 2^-8 + 2^-30. Once to BF16: above the tie
     * between 1 and 1 + 2^-7, so 1 + 2^-7. fp32_seq: FP32 gives 1 + 2^-8 (2^-30 is below
     * half an FP32 ulp), then BF16 ties to even: 1. */
    const float a[3] = {1.0f, 0x1p-8f, 0x1p-15f}, b[3] = {1.0f, 1.0f, 0x1p-15f};
    qs_gemm_params p = params(1, 1, 3, QS_GEMM_ACC_EXACT, 0);
    p.out_dtype = QS_BF16;
    qs_gemm_operand oa = plain(a), ob = plain(b);
    float y;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 1.0f + 0x1p-7f);
    p.acc.kind = QS_GEMM_ACC_FP32_SEQ;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 1.0f);
}
END_TEST

START_TEST(test_fp16_output_overflows_at_the_tie_above_65504)
{
    /* [GEMM-OUT-ROUND]: FP16 spacing at the top is 32: 65519 rounds to 65504, 65520 (the
     * tie with 65536) to even, which is 65536: overflow to +Inf. 2^-25 rounds to +0 (tie
     * with the smallest subnormal 2^-24, to even), 3 x 2^-26 to 2^-24. */
    const float in[4] = {65519.0f, 65520.0f, 0x1p-25f, 3 * 0x1p-26f};
    const float want[4] = {65504.0f, INFINITY, 0.0f, 0x1p-24f};
    const float one = 1.0f;
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < 4; i++) {
            qs_gemm_params p = params(1, 1, 1, (qs_gemm_acc_kind)kind, 0);
            p.out_dtype = QS_FP16;
            qs_gemm_operand oa = plain(&in[i]), ob = plain(&one);
            float y;
            ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
            ASSERT_F32_EQ(y, want[i]);
        }
    }
}
END_TEST

START_TEST(test_output_rounding_agrees_with_the_format_module)
{
    /* [GEMM-OUT-ROUND]: with K = 1 and b = 1, y is the output rounding of a; for random
     * finite FP32 bit patterns it equals qs_round_bf16 / qs_round_f16 of ref/format.c
     * ([FMT-BF16-ENC] [FMT-FP16-ENC]) under exact and fp32_seq. */
    uint64_t seed = 77;
    const float one = 1.0f;
    for (int i = 0; i < 20000; i++) {
        float x = from_bits((uint32_t)(rng_next(&seed) >> 32));
        if (!isfinite(x))
            continue;
        for (int kind = 0; kind < 2; kind++) {
            qs_gemm_params p = params(1, 1, 1, (qs_gemm_acc_kind)kind, 0);
            qs_gemm_operand oa = plain(&x), ob = plain(&one);
            float y;
            p.out_dtype = QS_BF16;
            ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
            ASSERT_F32_EQ(y, qs_round_bf16(x));
            p.out_dtype = QS_FP16;
            ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
            ASSERT_F32_EQ(y, qs_round_f16(x));
        }
    }
}
END_TEST

START_TEST(test_alpha_beta_epilogue_and_beta_zero_ignores_c)
{
    /* [GEMM-ALPHA-BETA]: y = alpha * acc + beta * c: 0.5 * (1*1 + 1*3) + 2 * 3 = 8. With
     * beta = 0, C is not read: a NaN in C does not reach y, and C may be NULL. */
    const float a[2] = {1, 1}, b[2] = {1, 3};
    float c = 3.0f, y;
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++) {
        qs_gemm_params p = params(1, 1, 2, (qs_gemm_acc_kind)kind, 0);
        qs_gemm_operand oa = plain(a), ob = plain(b);
        p.alpha = 0.5f;
        p.beta = 2.0f;
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, &c, &y), QS_OK);
        ASSERT_F32_EQ(y, 8.0f);
        p.beta = 0.0f;
        float cn = NAN;
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, &cn, &y), QS_OK);
        ASSERT_F32_EQ(y, 2.0f);
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
        ASSERT_F32_EQ(y, 2.0f);
    }
}
END_TEST

/* ---------------------------------------------------------------- scale application */

START_TEST(test_tensor_scales_multiply_in_the_epilogue)
{
    /* [GEMM-SCALE-TENSOR]: y = fl(alpha fl(ta tb)) * acc: (1*3 + 2*4) * 0.5 * 0.25 = 1.375.
     * With ta = tb = 1 + 2^-12 the factor fl(ta tb) = 1 + 2^-11 (the 2^-24 tie goes to
     * even), so fp32_seq gives 11 (1 + 2^-11) rounded = 11 + 11 x 2^-11 while exact gives
     * 11 (1 + 2^-11 + 2^-24) rounded once: 11 + 11 x 2^-11 + 11 x 2^-24 -> nearest FP32. */
    const float a[2] = {1, 2}, b[2] = {3, 4};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_TENSOR, NULL, 0.5f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_TENSOR, NULL, 0.25f, QS_DTYPE_INVALID};
    float y;
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++) {
        qs_gemm_params p = params(1, 1, 2, (qs_gemm_acc_kind)kind, 0);
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
        ASSERT_F32_EQ(y, 1.375f);
    }
    oa.tensor_scale = ob.tensor_scale = 1.0f + 0x1p-12f;
    qs_gemm_params p = params(1, 1, 2, QS_GEMM_ACC_FP32_SEQ, 0);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 11.0f + 11.0f * 0x1p-11f);
    /* exact: 11 + 11*2^-11 + 11*2^-24 = 11.00537109375 + 6.556e-7; FP32 spacing at 11 is
     * 2^-20, and 11 * 2^-24 = 0.6875 x 2^-20 rounds up to one unit. */
    p.acc.kind = QS_GEMM_ACC_EXACT;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 11.0f + 11.0f * 0x1p-11f + 0x1p-20f);
}
END_TEST

START_TEST(test_block_scales_index_rows_and_k_blocks)
{
    /* [GEMM-SCALE-BLOCK]: K = 256 (two k blocks), A 2 x 256 with 1x128 scales
     * [[2, 0.5], [1, 3]], B 130 x 256 with 128x128 scales [[4, 8], [16, 0.25]] (rows
     * 0..127, then 128..129); all data 1. y[m,n] = 128 (sa0 sb0 + sa1 sb1):
     * y[0,0] = 128 (8 + 4) = 1536, y[0,129] = 128 (32 + 0.125) = 4112,
     * y[1,0] = 128 (4 + 24) = 3584, y[1,129] = 128 (16 + 0.75) = 2144. */
    static float a[2 * 256], b[130 * 256], y[2 * 130];
    fill(a, 2 * 256, 1.0f);
    fill(b, 130 * 256, 1.0f);
    const float sa[4] = {2, 0.5f, 1, 3}, sb[4] = {4, 8, 16, 0.25f};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_BLOCK_1X128, sa, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_BLOCK_128X128, sb, 1.0f, QS_DTYPE_INVALID};
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++) {
        qs_gemm_params p = params(2, 130, 256, (qs_gemm_acc_kind)kind, 0);
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
        ASSERT_F32_EQ(y[0 * 130 + 0], 1536.0f);
        ASSERT_F32_EQ(y[0 * 130 + 127], 1536.0f);
        ASSERT_F32_EQ(y[0 * 130 + 129], 4112.0f);
        ASSERT_F32_EQ(y[1 * 130 + 0], 3584.0f);
        ASSERT_F32_EQ(y[1 * 130 + 128], 2144.0f);
    }
}
END_TEST

START_TEST(test_block_promotion_is_fused_with_a_rounded_scale_product)
{
    /* [GEMM-SCALE-BLOCK] [GEMM-ACC-FP32SEQ]: block 0 gives P0 = -1 (scales 1); block 1
     * gives P1 = 1 + 2^-23 with scales sa = sb = 1 + 2^-12. s1 = fl(sa sb) = 1 + 2^-11
     * (tie to even drops 2^-24). Fused: fl(-1 + s1 P1) = fl(2^-11 + 2^-23 + 2^-34) =
     * 2^-11 + 2^-23 + 2^-34 (24 bits, exact). An unfused product would lose 2^-34.
     * exact: -1 + (1 + 2^-11 + 2^-24)(1 + 2^-23) = 2^-11 + 2^-23 + 2^-24 + 2^-34 + 2^-47,
     * rounded: 2^-11 + 2^-23 + 2^-24 + 2^-34. */
    static float a[256], b[256];
    fill(a, 256, 0.0f);
    fill(b, 256, 1.0f);
    a[0] = -1.0f;
    a[128] = 1.0f;
    a[129] = 0x1p-23f;
    const float s[2] = {1.0f, 1.0f + 0x1p-12f};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_params p = params(1, 1, 256, QS_GEMM_ACC_FP32_SEQ, 0);
    float y;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f + 0x1p-23f + 0x1p-34f);
    p.acc.kind = QS_GEMM_ACC_EXACT;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f + 0x1p-23f + 0x1p-24f + 0x1p-34f);
}
END_TEST

START_TEST(test_hopper_vec_vec_promotion_rounds_the_partial_times_the_row_scale)
{
    /* [GEMM-ACC-HOPPER-VEC]: block 0 gives P0 = -1 (scales 1), block 1 gives P1 = 1 with
     * scales sa = sb = 1 + 2^-12. Two block_1x128 operands: fl(P1 sa) = 1 + 2^-12, then
     * fl(-1 + (1 + 2^-12)(1 + 2^-12)) = fl(2^-11 + 2^-24) = 2^-11 + 2^-24 (exact).
     * With a block_128x128 operand: s = fl(sa sb) = fl(1 + 2^-11 + 2^-24) = 1 + 2^-11 (the
     * tie goes to even), then fl(-1 + s P1) = 2^-11. */
    static float a[256], b[256];
    fill(a, 256, 0.0f);
    fill(b, 256, 0.0f);
    a[0] = -1.0f;
    b[0] = 1.0f;
    a[128] = 1.0f;
    b[128] = 1.0f;
    const float s[2] = {1.0f, 1.0f + 0x1p-12f};
    qs_gemm_operand vec_a = {a, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand vec_b = {b, QS_GEMM_SCALE_BLOCK_1X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand blk_a = {a, QS_GEMM_SCALE_BLOCK_128X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand blk_b = {b, QS_GEMM_SCALE_BLOCK_128X128, s, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_params p = params(1, 1, 256, QS_GEMM_ACC_HOPPER_FP8_TC, 128);
    float y;
    ck_assert_int_eq(qs_gemm(NULL, &p, &vec_a, &vec_b, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f + 0x1p-24f);
    ck_assert_int_eq(qs_gemm(NULL, &p, &vec_a, &blk_b, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f);
    ck_assert_int_eq(qs_gemm(NULL, &p, &blk_a, &vec_b, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f);
    p.acc.kind = QS_GEMM_ACC_FP32_SEQ; /* the other models keep fl(sa sb) */
    p.acc.promote_every = 0;
    ck_assert_int_eq(qs_gemm(NULL, &p, &vec_a, &vec_b, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p-11f);
}
END_TEST

START_TEST(test_mx_scales_apply_per_32_along_k)
{
    /* [GEMM-SCALE-MX]: K = 64, A = 1..64 (k+1), B = 1, E8M0 scales (decoded) A [2^-3, 2^2],
     * B [2, 1]: y = 2^-3 * 2 * (1+...+32) + 2^2 * 1 * (33+...+64) = 0.25*528 + 4*1552
     * = 132 + 6208 = 6340. */
    float a[64], b[64];
    for (int k = 0; k < 64; k++)
        a[k] = (float)(k + 1);
    fill(b, 64, 1.0f);
    const float sa[2] = {0x1p-3f, 4.0f}, sb[2] = {2.0f, 1.0f};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_MX, sa, 1.0f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_MX, sb, 1.0f, QS_DTYPE_INVALID};
    for (int kind = 0; kind < 2; kind++) {
        qs_gemm_params p = params(1, 1, 64, (qs_gemm_acc_kind)kind, 0);
        float y;
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
        ASSERT_F32_EQ(y, 6340.0f);
    }
}
END_TEST

START_TEST(test_nvfp4_block_and_tensor_scales)
{
    /* [GEMM-SCALE-NVFP4]: K = 32 of E2M1 values, 16-element blocks with E4M3 scales
     * A [1.5, 0.75], B [2, 6], FP32 tensor scales ta = 2^-4, tb = 0.5. A = 6 in block 0,
     * 0.5 in block 1; B = 1. y = 2^-5 (1.5*2*16*6 + 0.75*6*16*0.5) = 2^-5 (288 + 36)
     * = 10.125. */
    float a[32], b[32];
    fill(a, 16, 6.0f);
    fill(a + 16, 16, 0.5f);
    fill(b, 32, 1.0f);
    const float sa[2] = {1.5f, 0.75f}, sb[2] = {2.0f, 6.0f};
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_NVFP4, sa, 0x1p-4f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_NVFP4, sb, 0.5f, QS_DTYPE_INVALID};
    for (int kind = 0; kind < 2; kind++) {
        qs_gemm_params p = params(1, 1, 32, (qs_gemm_acc_kind)kind, 0);
        float y;
        ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
        ASSERT_F32_EQ(y, 10.125f);
    }
}
END_TEST

/* ---------------------------------------------------------------- non-finite values */

START_TEST(test_nonfinite_products_give_inf_or_canonical_nan)
{
    /* [GEMM-NONFINITE]: Inf * 1 + 1 = +Inf in every model; +Inf - Inf and 0 * Inf are NaN,
     * 0x7FC00000 for exact and fp32_seq, 0x7FFFFFFF for hopper_fp8_tc. */
    const float a[2] = {INFINITY, 1.0f}, b[2] = {1.0f, 1.0f};
    const float a2[2] = {INFINITY, -INFINITY}, z[2] = {0.0f, 1.0f};
    for (int kind = 0; kind < QS_GEMM_ACC_COUNT; kind++) {
        uint32_t nan = kind == QS_GEMM_ACC_HOPPER_FP8_TC ? 0x7FFFFFFFu : 0x7FC00000u;
        ASSERT_F32_EQ(dot1(a, b, 2, (qs_gemm_acc_kind)kind, 0), INFINITY);
        ASSERT_F32_EQ(dot1(a2, b, 2, (qs_gemm_acc_kind)kind, 0), from_bits(nan));
        ASSERT_F32_EQ(dot1(a, z, 2, (qs_gemm_acc_kind)kind, 0), from_bits(nan));
    }
}
END_TEST

/* ---------------------------------------------------------------- gemm_bound */

#define BM 3
#define BN 4
#define BK 2000

/* Random E4M3 operands (normal-ish: small codes excluded half the time) for the bound. */
static void bound_data(float *a, float *b, uint64_t seed)
{
    for (int i = 0; i < BM * BK; i++)
        a[i] = rand_e4m3(&seed);
    for (int i = 0; i < BN * BK; i++)
        b[i] = rand_e4m3(&seed);
}

/* FP32 sum of the products in a random order (Fisher-Yates over k). */
static float fp32_random_order(const float *a, const float *b, int k, uint64_t *s)
{
    static int perm[BK];
    for (int i = 0; i < k; i++)
        perm[i] = i;
    for (int i = k - 1; i > 0; i--) {
        int j = (int)(rng_next(s) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    float acc = 0.0f;
    for (int i = 0; i < k; i++) {
        float prod = a[perm[i]] * b[perm[i]];
        acc = acc + prod;
    }
    return acc;
}

/* FP32 pairwise (tree) sum of the products of k0..k1-1. */
static float fp32_pairwise(const float *a, const float *b, int k0, int k1)
{
    if (k1 - k0 == 1)
        return a[k0] * b[k0];
    int mid = k0 + (k1 - k0) / 2;
    float l = fp32_pairwise(a, b, k0, mid), r = fp32_pairwise(a, b, mid, k1);
    return l + r;
}

START_TEST(test_bound_holds_for_fp32_in_any_order)
{
    /* [GEMM-BOUND] [GEMM-ACC-FP32SEQ]: fp32_seq, random orders and a pairwise tree, with a
     * tensor scale of 2^-3 x 0.75 applied in FP32, all lie within the bound of exact. */
    static float a[BM * BK], b[BN * BK];
    bound_data(a, b, 42);
    qs_gemm_operand oa = {a, QS_GEMM_SCALE_TENSOR, NULL, 0x1p-3f, QS_DTYPE_INVALID};
    qs_gemm_operand ob = {b, QS_GEMM_SCALE_TENSOR, NULL, 0.75f, QS_DTYPE_INVALID};
    qs_gemm_params p = params(BM, BN, BK, QS_GEMM_ACC_FP32_SEQ, 0);
    float yx[BM * BN], y[BM * BN];
    double bound[BM * BN];
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, yx, bound), QS_OK);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
    size_t bad = 0;
    ck_assert_msg(qs_gemm_within_bound(y, yx, bound, 1.0, BM * BN, &bad),
                  "fp32_seq y[%zu] = %a, exact %a, bound %a", bad, (double)y[bad], (double)yx[bad],
                  bound[bad]);
    uint64_t s = 7;
    const float t = 0x1p-3f * 0.75f;
    for (int rep = 0; rep < 20; rep++) {
        for (int m = 0; m < BM; m++)
            for (int n = 0; n < BN; n++)
                y[m * BN + n] = t * fp32_random_order(a + m * BK, b + n * BK, BK, &s);
        ck_assert_msg(qs_gemm_within_bound(y, yx, bound, 1.0, BM * BN, &bad),
                      "random order y[%zu] = %a, exact %a, bound %a", bad, (double)y[bad],
                      (double)yx[bad], bound[bad]);
    }
    for (int m = 0; m < BM; m++)
        for (int n = 0; n < BN; n++)
            y[m * BN + n] = t * fp32_pairwise(a + m * BK, b + n * BK, 0, BK);
    ck_assert_msg(qs_gemm_within_bound(y, yx, bound, 1.0, BM * BN, &bad),
                  "pairwise y[%zu] = %a, exact %a, bound %a", bad, (double)y[bad], (double)yx[bad],
                  bound[bad]);
}
END_TEST

START_TEST(test_bound_is_not_vacuous)
{
    /* [GEMM-BOUND]: exact perturbed by 3 bounds, or missing its smallest-index product,
     * fails; the bound is far below the sum of |terms| (about K u of it, not more). */
    static float a[BM * BK], b[BN * BK];
    bound_data(a, b, 1234);
    qs_gemm_operand oa = plain(a), ob = plain(b);
    qs_gemm_params p = params(BM, BN, BK, QS_GEMM_ACC_EXACT, 0);
    float yx[BM * BN], y[BM * BN];
    double bound[BM * BN];
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, yx, bound), QS_OK);
    for (int i = 0; i < BM * BN; i++) {
        double sabs = 0.0;
        int m = i / BN, n = i % BN;
        for (int k = 0; k < BK; k++)
            sabs += fabs((double)a[m * BK + k] * (double)b[n * BK + k]);
        ck_assert_msg(bound[i] > 0.0 && bound[i] < 2.0 * BK * 0x1p-24 * sabs + 0x1p-20,
                      "bound[%d] = %a for sum|ab| = %a", i, bound[i], sabs);
        float wrong = (float)((double)yx[i] + 3.0 * bound[i]);
        ck_assert(!qs_gemm_within_bound(&wrong, &yx[i], &bound[i], 1.0, 1, NULL));
        wrong = (float)((double)yx[i] - 3.0 * bound[i]);
        ck_assert(!qs_gemm_within_bound(&wrong, &yx[i], &bound[i], 1.0, 1, NULL));
    }
    /* Drop one product whose magnitude exceeds the bound: 448 x 448 at k = 0. */
    a[0] = 448.0f;
    b[0] = 448.0f;
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, yx, bound), QS_OK);
    a[0] = 0.0f;
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
    size_t bad = 99;
    ck_assert(!qs_gemm_within_bound(y, yx, bound, 1.0, BM * BN, &bad));
    ck_assert_uint_eq(bad, 0);
}
END_TEST

START_TEST(test_bound_is_nearly_attained_by_fp32_swamping)
{
    /* [GEMM-BOUND] [GEMM-ACC-FP32SEQ]: 2^24 then 4095 ones. fp32_seq loses all 4095 and
     * gives 2^24; the exact result rounds to 2^24 + 4096, an error of 4096. The bound,
     * about (K + 8) u sum|ab| + 2 u |y| = 4104 + 2, holds and is within 1% of it. */
    static float a[4096], b[4096];
    fill(a, 4096, 1.0f);
    fill(b, 4096, 1.0f);
    a[0] = 0x1p24f;
    qs_gemm_params p = params(1, 1, 4096, QS_GEMM_ACC_FP32_SEQ, 0);
    qs_gemm_operand oa = plain(a), ob = plain(b);
    float yx, y;
    double bound;
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, &yx, &bound), QS_OK);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(y, 0x1p24f);
    ASSERT_F32_EQ(yx, 0x1p24f + 4096.0f);
    ck_assert(qs_gemm_within_bound(&y, &yx, &bound, 1.0, 1, NULL));
    ck_assert_msg(bound < 1.01 * 4096.0, "bound %a is loose for an error of 4096", bound);
}
END_TEST

START_TEST(test_bound_rejects_hopper_fast_accumulation_loss)
{
    /* [GEMM-BOUND] [GEMM-ACC-HOPPER]: the swamping probe (256 + 31 x 2^-6) under the Hopper
     * model misses 31/64, far outside the FP32 bound: TC results need the model, not it. */
    float a[32], b[32], yx, y;
    double bound;
    fill(b, 32, 1.0f);
    fill(a, 32, 0x1p-6f);
    a[0] = 256.0f;
    qs_gemm_params p = params(1, 1, 32, QS_GEMM_ACC_HOPPER_FP8_TC, 0);
    qs_gemm_operand oa = plain(a), ob = plain(b);
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, &yx, &bound), QS_OK);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, &y), QS_OK);
    ASSERT_F32_EQ(yx, 256.0f + 31.0f / 64.0f);
    ck_assert(!qs_gemm_within_bound(&y, &yx, &bound, 1.0, 1, NULL));
}
END_TEST

START_TEST(test_bound_covers_bf16_output)
{
    /* [GEMM-BOUND] [GEMM-OUT-ROUND]: with BF16 output, fp32_seq (FP32 sum, then BF16) is
     * within the bound of the exact BF16 result, and the bound includes both roundings. */
    static float a[BM * BK], b[BN * BK];
    bound_data(a, b, 99);
    qs_gemm_operand oa = plain(a), ob = plain(b);
    qs_gemm_params p = params(BM, BN, BK, QS_GEMM_ACC_FP32_SEQ, 0);
    p.out_dtype = QS_BF16;
    float yx[BM * BN], y[BM * BN];
    double bound[BM * BN];
    ck_assert_int_eq(qs_gemm_bound(NULL, &p, &oa, &ob, NULL, yx, bound), QS_OK);
    ck_assert_int_eq(qs_gemm(NULL, &p, &oa, &ob, NULL, y), QS_OK);
    size_t bad = 0;
    ck_assert_msg(qs_gemm_within_bound(y, yx, bound, 1.0, BM * BN, &bad),
                  "bf16 y[%zu] = %a, exact %a, bound %a", bad, (double)y[bad], (double)yx[bad],
                  bound[bad]);
    for (int i = 0; i < BM * BN; i++)
        ck_assert_msg(bound[i] >= 0x1p-9 * fabs((double)yx[i]), "bound[%d] = %a", i, bound[i]);
}
END_TEST

/* ---------------------------------------------------------------- bad arguments */

START_TEST(test_bad_arguments_are_rejected_with_a_message)
{
    /* [GEMM-TN] [GEMM-ACC-PROMOTE] [GEMM-OUT-ROUND]: each bad argument returns its status. */
    const float a[64] = {0}, b[64] = {0}, s[2] = {1, 1};
    float y[1];
    qs_ctx *ctx = qs_ctx_new();
    qs_gemm_operand oa = plain(a), ob = plain(b);
    qs_gemm_params p = params(1, 1, 64, QS_GEMM_ACC_FP32_SEQ, 0);
    ck_assert_int_eq(qs_gemm(ctx, NULL, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_gemm(ctx, &p, NULL, &ob, NULL, y), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, NULL), QS_ERR_INVALID_ARG);
    p.k = QS_GEMM_MAX_K + 1;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    p.k = 64;
    p.acc.promote_every = 128;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "promote_every"));
    p.acc.kind = QS_GEMM_ACC_HOPPER_FP8_TC;
    p.acc.promote_every = 100;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    p.acc.promote_every = 128;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_OK);
    qs_gemm_operand mx = {a, QS_GEMM_SCALE_MX, s, 1.0f, QS_DTYPE_INVALID},
                    mxb = {b, QS_GEMM_SCALE_MX, s, 1.0f, QS_DTYPE_INVALID};
    ck_assert_int_eq(qs_gemm(ctx, &p, &mx, &mxb, NULL, y), QS_ERR_UNSUPPORTED);
    p.acc.kind = QS_GEMM_ACC_EXACT;
    p.acc.promote_every = 0;
    ck_assert_int_eq(qs_gemm(ctx, &p, &mx, &ob, NULL, y), QS_ERR_INVALID_ARG);
    mx.block_scale = NULL;
    ck_assert_int_eq(qs_gemm(ctx, &p, &mx, &mxb, NULL, y), QS_ERR_INVALID_ARG);
    p.out_dtype = QS_E4M3;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_DTYPE);
    p.out_dtype = QS_FP32;
    p.beta = 1.0f;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    p.beta = 0.0f;
    p.acc.kind = QS_GEMM_ACC_COUNT;
    ck_assert_int_eq(qs_gemm(ctx, &p, &oa, &ob, NULL, y), QS_ERR_INVALID_ARG);
    p.acc.kind = QS_GEMM_ACC_EXACT;
    double bound[1];
    ck_assert_int_eq(qs_gemm_bound(ctx, &p, &oa, &ob, NULL, y, NULL), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_gemm_bound(ctx, NULL, &oa, &ob, NULL, y, bound), QS_ERR_INVALID_ARG);
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("gemm");
    tcase_add_test(tc, test_accumulation_models_are_named_in_one_table);
    tcase_add_test(tc, test_tn_layout_reads_b_as_n_by_k);
    tcase_add_test(tc, test_cancellation_exact_keeps_what_fp32_and_hopper_lose);
    tcase_add_test(tc, test_hopper_drops_terms_below_2p13_of_the_step_maximum);
    tcase_add_test(tc, test_hopper_truncates_toward_zero_not_down);
    tcase_add_test(tc, test_hopper_accumulator_takes_part_in_the_alignment);
    tcase_add_test(tc, test_hopper_sum_is_truncated_to_13_fraction_bits);
    tcase_add_test(tc, test_hopper_promotion_every_128_restarts_the_partial);
    tcase_add_test(tc, test_hopper_block_scaling_restarts_the_partial_every_group);
    tcase_add_test(tc, test_hopper_aligns_to_the_sum_of_operand_exponents);
    tcase_add_test(tc, test_hopper_clamps_subnormal_operand_exponents);
    tcase_add_test(tc, test_hopper_epilogue_gives_plus_zero_for_an_exact_zero);
    tcase_add_test(tc, test_long_k_fp32_swamps_ones_behind_2p24);
    tcase_add_test(tc, test_exact_matches_an_independent_integer_sum);
    tcase_add_test(tc, test_exact_holds_extreme_exponents);
    tcase_add_test(tc, test_exact_rounds_once_to_bf16_where_fp32_then_bf16_double_rounds);
    tcase_add_test(tc, test_fp16_output_overflows_at_the_tie_above_65504);
    tcase_add_test(tc, test_output_rounding_agrees_with_the_format_module);
    tcase_add_test(tc, test_alpha_beta_epilogue_and_beta_zero_ignores_c);
    tcase_add_test(tc, test_tensor_scales_multiply_in_the_epilogue);
    tcase_add_test(tc, test_block_scales_index_rows_and_k_blocks);
    tcase_add_test(tc, test_block_promotion_is_fused_with_a_rounded_scale_product);
    tcase_add_test(tc, test_hopper_vec_vec_promotion_rounds_the_partial_times_the_row_scale);
    tcase_add_test(tc, test_mx_scales_apply_per_32_along_k);
    tcase_add_test(tc, test_nvfp4_block_and_tensor_scales);
    tcase_add_test(tc, test_nonfinite_products_give_inf_or_canonical_nan);
    tcase_add_test(tc, test_bound_holds_for_fp32_in_any_order);
    tcase_add_test(tc, test_bound_is_not_vacuous);
    tcase_add_test(tc, test_bound_is_nearly_attained_by_fp32_swamping);
    tcase_add_test(tc, test_bound_rejects_hopper_fast_accumulation_loss);
    tcase_add_test(tc, test_bound_covers_bf16_output);
    tcase_add_test(tc, test_bad_arguments_are_rejected_with_a_message);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
