/* test_format.c: the formats of spec/formats.md — decoding of every code, the boundary values
 * with literal expected codes, and random FP32/FP64 inputs against the naive oracle
 * (tests/oracle.c) for every format, rounding mode and overflow policy. Failures print the
 * input and both codes in hex. Each test names the rule IDs it checks. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "oracle.h"
#include "qspec/format.h"
#include "qstest.h"

static const qs_dtype small_formats[] = {QS_BF16, QS_FP16, QS_E4M3, QS_E5M2,
                                         QS_E8M0, QS_E2M1, QS_E2M3, QS_E3M2};
#define N_SMALL (sizeof small_formats / sizeof small_formats[0])

static uint32_t enc(qs_dtype dt, double x, qs_round r, qs_overflow o, uint32_t u)
{
    qs_cast_mode mode = {r, o, u};
    uint32_t code = 0xDEADBEEFu;
    if (qs_encode_f64(dt, x, mode, &code) != QS_OK)
        ck_abort_msg("qs_encode_f64(%s, %a) failed", qs_dtype_name(dt), x);
    return code;
}

/* Asserts the code of x (as FP32 and as FP64) under a mode; prints hex on failure. */
static void expect_code(qs_dtype dt, double x, qs_round r, qs_overflow o, uint32_t u, uint32_t want)
{
    uint32_t got = enc(dt, x, r, o, u);
    if (!(got == want))
        ck_abort_msg("%s(%a) %s/%s u=0x%x: got 0x%x, want 0x%x", qs_dtype_name(dt), x,
                     qs_round_name(r), qs_overflow_name(o), u, got, want);
    if ((double)(float)x == x || isnan(x)) {
        qs_cast_mode mode = {r, o, u};
        uint32_t got32 = 0;
        qs_encode_f32(dt, (float)x, mode, &got32);
        if (!(got32 == want))
            ck_abort_msg("%s(f32 %a): got 0x%x, want 0x%x", qs_dtype_name(dt), x, got32, want);
    }
}

static void rne(qs_dtype dt, double x, qs_overflow o, uint32_t want)
{
    expect_code(dt, x, QS_ROUND_RNE, o, 0, want);
}

/* [FMT-DECODE] [FMT-LAYOUT] */
START_TEST(test_every_code_decodes_as_the_oracle_decodes)
{
    for (size_t i = 0; i < N_SMALL; i++) {
        qs_dtype dt = small_formats[i];
        for (uint32_t c = 0; c < qso_ncodes(dt); c++) {
            double want = qso_decode(dt, c), got = qs_decode_f64(dt, c);
            float got32 = qs_decode_f32(dt, c);
            if (isnan(want)) {
                if (!(isnan(got) && isnan(got32) && !signbit(got) == !signbit(want) &&
                      !signbit(got32) == !signbit(want)))
                    ck_abort_msg("%s 0x%x: NaN expected, got %a", qs_dtype_name(dt), c, got);
                continue;
            }
            if (!(qs_f64_bits(got) == qs_f64_bits(want) &&
                  qs_f64_bits((double)got32) == qs_f64_bits(want)))
                ck_abort_msg("%s 0x%x: got %a / %a, want %a", qs_dtype_name(dt), c, got,
                             (double)got32, want);
        }
    }
}
END_TEST

/* [FMT-DECODE] [FMT-LAYOUT] spot values from the format definitions */
START_TEST(test_known_codes_decode_to_their_values)
{
    ck_assert(qs_decode_f64(QS_E4M3, 0x7E) == 448.0);
    ck_assert(qs_decode_f64(QS_E4M3, 0x01) == 0x1p-9);
    ck_assert(qs_decode_f64(QS_E4M3, 0x08) == 0x1p-6);
    ck_assert(isnan(qs_decode_f64(QS_E4M3, 0x7F)) && signbit(qs_decode_f64(QS_E4M3, 0xFF)));
    ck_assert(qs_decode_f64(QS_E5M2, 0x7B) == 57344.0);
    ck_assert(qs_decode_f64(QS_E5M2, 0x01) == 0x1p-16);
    ck_assert(isinf(qs_decode_f64(QS_E5M2, 0xFC)) && qs_decode_f64(QS_E5M2, 0xFC) < 0);
    ck_assert(isnan(qs_decode_f64(QS_E5M2, 0x7D)));
    ck_assert(qs_decode_f64(QS_E8M0, 0x00) == 0x1p-127);
    ck_assert(qs_decode_f64(QS_E8M0, 0x7F) == 1.0);
    ck_assert(qs_decode_f64(QS_E8M0, 0xFE) == 0x1p127);
    ck_assert(isnan(qs_decode_f64(QS_E8M0, 0xFF)));
    const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (uint32_t c = 0; c < 8; c++) {
        ck_assert(qs_decode_f64(QS_E2M1, c) == e2m1[c]);
        ck_assert(qs_decode_f64(QS_E2M1, c | 8) == -e2m1[c]);
    }
    ck_assert(qs_decode_f64(QS_E2M3, 0x1F) == 7.5 && qs_decode_f64(QS_E2M3, 0x01) == 0.125);
    ck_assert(qs_decode_f64(QS_E3M2, 0x1F) == 28.0 && qs_decode_f64(QS_E3M2, 0x01) == 0.0625);
    ck_assert(qs_decode_f64(QS_BF16, 0x3F80) == 1.0 && qs_decode_f64(QS_FP16, 0x7BFF) == 65504);
    ck_assert(qs_decode_f64(QS_FP32, 0x00000001u) == 0x1p-149);
    ck_assert_uint_eq(qs_f32_bits(qs_decode_f32(QS_FP32, 0xFFC01234u)), 0xFFC01234u);
    ck_assert(qs_decode_f64(QS_E4M3, 0x17E) == 448.0); /* wider codes are masked */
    ck_assert(isnan(qs_decode_f64(QS_U8, 1)));
}
END_TEST

/* [FMT-ENCODE] [FMT-DECODE] every finite code survives decode then encode in every mode */
START_TEST(test_every_finite_code_reencodes_to_itself_in_every_mode)
{
    for (size_t i = 0; i < N_SMALL; i++) {
        qs_dtype dt = small_formats[i];
        for (uint32_t c = 0; c < qso_ncodes(dt); c++) {
            double v = qs_decode_f64(dt, c);
            if (isnan(v))
                continue;
            for (int r = 0; r < QS_ROUND_COUNT; r++)
                for (int o = 0; o < QS_OVF_COUNT; o++) {
                    if (isinf(v) && o == QS_OVF_SATFINITE)
                        continue;
                    expect_code(dt, v, (qs_round)r, (qs_overflow)o, 0xFFFFFFFFu, c);
                }
        }
    }
}
END_TEST

/* [FMT-OVF] [FMT-E4M3-OVF] [FMT-OVF-SATFINITE] [FMT-OVF-NOSAT] [FMT-OVF-MLDTYPES] [FMT-NAN]
 * [FMT-INF] */
START_TEST(test_e4m3_overflow_above_464_by_policy)
{
    rne(QS_E4M3, 448, QS_OVF_SATFINITE, 0x7E);
    rne(QS_E4M3, 464, QS_OVF_SATFINITE, 0x7E);
    rne(QS_E4M3, 464, QS_OVF_NOSAT, 0x7E); /* 464 ties to 448 */
    rne(QS_E4M3, 465, QS_OVF_SATFINITE, 0x7E);
    rne(QS_E4M3, 465, QS_OVF_NOSAT, 0x7F);
    rne(QS_E4M3, -465, QS_OVF_NOSAT, 0xFF);
    rne(QS_E4M3, 465, QS_OVF_MLDTYPES, 0x7F);
    rne(QS_E4M3, nextafter(464, 500), QS_OVF_NOSAT, 0x7F);
    rne(QS_E4M3, -INFINITY, QS_OVF_SATFINITE, 0xFE);
    rne(QS_E4M3, INFINITY, QS_OVF_SATFINITE, 0x7E);
    rne(QS_E4M3, -INFINITY, QS_OVF_NOSAT, 0xFF);
    rne(QS_E4M3, -INFINITY, QS_OVF_MLDTYPES, 0xFF);
    rne(QS_E4M3, NAN, QS_OVF_SATFINITE, 0x7F);
    rne(QS_E4M3, -NAN, QS_OVF_SATFINITE, 0x7F);
    rne(QS_E4M3, -NAN, QS_OVF_NOSAT, 0x7F);
    rne(QS_E4M3, -NAN, QS_OVF_MLDTYPES, 0xFF);
    rne(QS_E4M3, 1e30, QS_OVF_MLDTYPES, 0x7F);
}
END_TEST

/* [FMT-E5M2-OVF] [FMT-OVF-SATFINITE] [FMT-OVF-NOSAT] [FMT-OVF-MLDTYPES] [FMT-NAN] [FMT-INF] */
START_TEST(test_e5m2_overflows_at_61440_by_policy)
{
    rne(QS_E5M2, 57344, QS_OVF_SATFINITE, 0x7B);
    rne(QS_E5M2, 61440, QS_OVF_SATFINITE, 0x7B);
    rne(QS_E5M2, 57344, QS_OVF_NOSAT, 0x7B);
    rne(QS_E5M2, 61440, QS_OVF_NOSAT, 0x7C);
    rne(QS_E5M2, nextafter(61440, 0), QS_OVF_NOSAT, 0x7B);
    rne(QS_E5M2, -61440, QS_OVF_MLDTYPES, 0xFC);
    rne(QS_E5M2, INFINITY, QS_OVF_NOSAT, 0x7C);
    rne(QS_E5M2, -INFINITY, QS_OVF_SATFINITE, 0xFB);
    rne(QS_E5M2, NAN, QS_OVF_SATFINITE, 0x7F);
    rne(QS_E5M2, -NAN, QS_OVF_NOSAT, 0x7F);
    rne(QS_E5M2, -NAN, QS_OVF_MLDTYPES, 0xFE);
}
END_TEST

/* [FMT-UNDERFLOW] [FMT-ZERO] [FMT-ROUND-RNE] */
START_TEST(test_half_the_smallest_subnormal_rounds_to_signed_zero)
{
    rne(QS_E4M3, 0x1p-10, QS_OVF_SATFINITE, 0x00);
    rne(QS_E4M3, -0x1p-10, QS_OVF_SATFINITE, 0x80);
    rne(QS_E4M3, nextafter(0x1p-10, 1), QS_OVF_SATFINITE, 0x01);
    rne(QS_E4M3, 3 * 0x1p-10, QS_OVF_SATFINITE, 0x02); /* tie 1.5 subnormals -> even */
    rne(QS_E5M2, 0x1p-17, QS_OVF_SATFINITE, 0x00);
    rne(QS_E5M2, nextafter(0x1p-17, 1), QS_OVF_SATFINITE, 0x01);
    rne(QS_E2M1, -0.25, QS_OVF_SATFINITE, 0x8);
    rne(QS_FP16, 0x1p-25, QS_OVF_NOSAT, 0x0000);
    rne(QS_FP16, nextafter(0x1p-25, 1), QS_OVF_NOSAT, 0x0001);
    rne(QS_BF16, -0x1p-134, QS_OVF_NOSAT, 0x8000);
    rne(QS_E4M3, -0.0, QS_OVF_SATFINITE, 0x80);
    rne(QS_E4M3, 1e-300, QS_OVF_SATFINITE, 0x00);
    expect_code(QS_E4M3, 1e-300, QS_ROUND_RU, QS_OVF_SATFINITE, 0, 0x01);
    expect_code(QS_E4M3, -1e-300, QS_ROUND_RU, QS_OVF_SATFINITE, 0, 0x80);
}
END_TEST

/* [FMT-E2M1-TIES] [FMT-ROUND-RNE] [FMT-ROUND-AWAY] [FMT-E2M1-OVF] */
START_TEST(test_e2m1_ties_go_to_even_under_rne_and_away_under_away)
{
    const double x[] = {0.25, 0.75, 1.25, 2.5, 3.5, 5, 7, -0.75, 6.5, 100};
    const uint32_t want_rne[] = {0x0, 0x2, 0x2, 0x4, 0x6, 0x6, 0x7, 0xA, 0x7, 0x7};
    const uint32_t want_away[] = {0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0x7, 0xA, 0x7, 0x7};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        rne(QS_E2M1, x[i], QS_OVF_SATFINITE, want_rne[i]);
        expect_code(QS_E2M1, x[i], QS_ROUND_AWAY, QS_OVF_SATFINITE, 0, want_away[i]);
    }
    rne(QS_E2M1, 7, QS_OVF_NOSAT, 0x7);
    rne(QS_E2M1, -7, QS_OVF_MLDTYPES, 0xF);
    ck_assert_uint_eq(qs_encode_e2m1(2.5f, QS_OVF_SATFINITE), 0x4);
}
END_TEST

/* [FMT-E2M1-NAN] [FMT-INF] [FMT-OVF-MLDTYPES] */
START_TEST(test_fp4_fp6_nan_gives_plus_max_except_mldtypes_zero_of_opposite_sign)
{
    rne(QS_E2M1, NAN, QS_OVF_SATFINITE, 0x7);
    rne(QS_E2M1, -NAN, QS_OVF_SATFINITE, 0x7);
    rne(QS_E2M1, -NAN, QS_OVF_NOSAT, 0x7);
    rne(QS_E2M1, NAN, QS_OVF_MLDTYPES, 0x8);
    rne(QS_E2M1, -NAN, QS_OVF_MLDTYPES, 0x0);
    rne(QS_E2M3, NAN, QS_OVF_MLDTYPES, 0x20);
    rne(QS_E2M3, -NAN, QS_OVF_MLDTYPES, 0x00);
    rne(QS_E3M2, NAN, QS_OVF_MLDTYPES, 0x20);
    rne(QS_E2M1, INFINITY, QS_OVF_MLDTYPES, 0x7);
    rne(QS_E2M1, -INFINITY, QS_OVF_NOSAT, 0xF);
    rne(QS_E2M3, NAN, QS_OVF_SATFINITE, 0x1F);
    rne(QS_E2M3, 7.75, QS_OVF_NOSAT, 0x1F);
    rne(QS_E2M3, -INFINITY, QS_OVF_SATFINITE, 0x3F);
    rne(QS_E3M2, -NAN, QS_OVF_SATFINITE, 0x1F);
    rne(QS_E3M2, 30, QS_OVF_SATFINITE, 0x1F);
    rne(QS_E3M2, -NAN, QS_OVF_MLDTYPES, 0x00);
}
END_TEST

/* [FMT-E8M0-RNE] [FMT-E8M0-SIGN] [FMT-E8M0-UNDERFLOW] [FMT-E8M0-OVF] [FMT-ROUND-RZ]
 * [FMT-ROUND-RU] */
START_TEST(test_e8m0_rounds_the_significand_and_handles_sign_zero_and_range)
{
    rne(QS_E8M0, 1.0, QS_OVF_SATFINITE, 0x7F);
    rne(QS_E8M0, 1.5, QS_OVF_SATFINITE, 0x80);
    rne(QS_E8M0, 3.0, QS_OVF_SATFINITE, 0x81);
    rne(QS_E8M0, nextafter(1.5, 0), QS_OVF_SATFINITE, 0x7F);
    expect_code(QS_E8M0, 1.5, QS_ROUND_RZ, QS_OVF_SATFINITE, 0, 0x7F);
    expect_code(QS_E8M0, nextafter(1.0, 2), QS_ROUND_RU, QS_OVF_SATFINITE, 0, 0x80);
    expect_code(QS_E8M0, 1.5, QS_ROUND_AWAY, QS_OVF_SATFINITE, 0, 0x80);
    rne(QS_E8M0, 0.0, QS_OVF_SATFINITE, 0x00);
    rne(QS_E8M0, -0.0, QS_OVF_NOSAT, 0x00);
    rne(QS_E8M0, -1.0, QS_OVF_SATFINITE, 0x7F);
    rne(QS_E8M0, -7.0, QS_OVF_NOSAT, 0x82);
    rne(QS_E8M0, -1.0, QS_OVF_MLDTYPES, 0xFF);
    rne(QS_E8M0, 0.0, QS_OVF_MLDTYPES, 0xFF);
    rne(QS_E8M0, INFINITY, QS_OVF_SATFINITE, 0xFE);
    rne(QS_E8M0, -INFINITY, QS_OVF_SATFINITE, 0xFE);
    rne(QS_E8M0, INFINITY, QS_OVF_NOSAT, 0xFF);
    rne(QS_E8M0, NAN, QS_OVF_SATFINITE, 0xFF);
    rne(QS_E8M0, 0x1p-127, QS_OVF_SATFINITE, 0x00);
    rne(QS_E8M0, 0x1p127, QS_OVF_NOSAT, 0xFE);
    for (int r = 0; r < QS_ROUND_COUNT; r++)
        expect_code(QS_E8M0, 0x1p-140, (qs_round)r, QS_OVF_NOSAT, 0xFFFFFFFFu, 0x00);
    expect_code(QS_E8M0, FLT_MAX, QS_ROUND_RU, QS_OVF_SATFINITE, 0, 0xFE);
    expect_code(QS_E8M0, FLT_MAX, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0xFF);
    expect_code(QS_E8M0, FLT_MAX, QS_ROUND_RZ, QS_OVF_NOSAT, 0, 0xFE);
    rne(QS_E8M0, 0x1.8p127, QS_OVF_NOSAT, 0xFF);
    rne(QS_E8M0, 0x1.8p127, QS_OVF_SATFINITE, 0xFE);
}
END_TEST

/* [FMT-OVF-DIRECTED] [FMT-ROUND-RZ] [FMT-ROUND-RU] [FMT-ROUND-RD] [FMT-INF] */
START_TEST(test_directed_modes_overflow_to_max_when_rounding_toward_zero)
{
    expect_code(QS_E4M3, 1000, QS_ROUND_RZ, QS_OVF_NOSAT, 0, 0x7E);
    expect_code(QS_E4M3, 449, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0x7F);
    expect_code(QS_E4M3, 449, QS_ROUND_RU, QS_OVF_SATFINITE, 0, 0x7E);
    expect_code(QS_E4M3, -1000, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0xFE);
    expect_code(QS_E4M3, -449, QS_ROUND_RD, QS_OVF_MLDTYPES, 0, 0xFF);
    expect_code(QS_E4M3, 1000, QS_ROUND_RD, QS_OVF_MLDTYPES, 0, 0x7E);
    expect_code(QS_E5M2, INFINITY, QS_ROUND_RZ, QS_OVF_NOSAT, 0, 0x7C);
    expect_code(QS_E5M2, 60000, QS_ROUND_AWAY, QS_OVF_NOSAT, 0, 0x7B);
    expect_code(QS_E5M2, 61440, QS_ROUND_AWAY, QS_OVF_NOSAT, 0, 0x7C);
    expect_code(QS_E4M3, 1.0 + 0x1p-5, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0x39);
    expect_code(QS_E4M3, -1.0 - 0x1p-5, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0xB8);
    expect_code(QS_E4M3, -1.0 - 0x1p-5, QS_ROUND_RD, QS_OVF_NOSAT, 0, 0xB9);
    expect_code(QS_E4M3, 1.0 + 0x1p-5, QS_ROUND_RZ, QS_OVF_NOSAT, 0, 0x38);
    expect_code(QS_FP16, 1e6, QS_ROUND_RZ, QS_OVF_NOSAT, 0, 0x7BFF);
}
END_TEST

/* [FMT-ROUND-SR] [FMT-OVF-DIRECTED] the rule r + u*2^-32 >= 1, exactly at its edges */
START_TEST(test_stochastic_rounding_threshold_is_exact)
{
    double half = 1.0 + 0x1p-4; /* halfway between 1 (0x38) and 1.125 (0x39) */
    expect_code(QS_E4M3, half, QS_ROUND_SR, QS_OVF_SATFINITE, 0x80000000u, 0x39);
    expect_code(QS_E4M3, half, QS_ROUND_SR, QS_OVF_SATFINITE, 0x7FFFFFFFu, 0x38);
    expect_code(QS_E4M3, 1.0, QS_ROUND_SR, QS_OVF_SATFINITE, 0xFFFFFFFFu, 0x38);
    double tiny = 1.0 + 0x1p-35; /* r = 2^-32 */
    expect_code(QS_E4M3, tiny, QS_ROUND_SR, QS_OVF_SATFINITE, 0xFFFFFFFFu, 0x39);
    expect_code(QS_E4M3, tiny, QS_ROUND_SR, QS_OVF_SATFINITE, 0xFFFFFFFEu, 0x38);
    double tinier = 1.0 + 0x1p-36; /* r = 2^-33: never reaches 1 */
    expect_code(QS_E4M3, tinier, QS_ROUND_SR, QS_OVF_SATFINITE, 0xFFFFFFFFu, 0x38);
    expect_code(QS_E4M3, -half, QS_ROUND_SR, QS_OVF_SATFINITE, 0x80000000u, 0xB9);
    expect_code(QS_E2M1, 5.5, QS_ROUND_SR, QS_OVF_NOSAT, 0x40000000u, 0x7);  /* r=.75 up */
    expect_code(QS_E2M1, 0.3, QS_ROUND_SR, QS_OVF_NOSAT, 0, 0x0);            /* u=0: down */
    expect_code(QS_E4M3, 470, QS_ROUND_SR, QS_OVF_NOSAT, 0xC0000000u, 0x7F); /* up: over */
    expect_code(QS_E4M3, 470, QS_ROUND_SR, QS_OVF_NOSAT, 0x10000000u, 0x7E); /* down: max */
}
END_TEST

/* [FMT-ENCODE-F64] one rounding from FP64: no double rounding through FP32 */
START_TEST(test_encoding_from_f64_rounds_once)
{
    double x = 1.0 + 0x1p-4 + 0x1p-40; /* just above an E4M3 tie; FP32 would make it a tie */
    ck_assert((double)(float)x == 1.0 + 0x1p-4);
    expect_code(QS_E4M3, x, QS_ROUND_RNE, QS_OVF_SATFINITE, 0, 0x39);
    expect_code(QS_E4M3, 1.0 + 0x1p-4, QS_ROUND_RNE, QS_OVF_SATFINITE, 0, 0x38);
    expect_code(QS_BF16, 1.0 + 0x1p-8 + 0x1p-30, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x3F81);
    expect_code(QS_FP16, 1.0 + 0x1p-11 + 0x1p-40, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x3C01);
    expect_code(QS_FP32, 1.0 + 0x1p-24 + 0x1p-50, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x3F800001u);
    expect_code(QS_FP32, 1e300, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x7F800000u);
    expect_code(QS_FP32, 1e300, QS_ROUND_RNE, QS_OVF_SATFINITE, 0, 0x7F7FFFFFu);
    expect_code(QS_FP32, 0x1p-150, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x0);
    expect_code(QS_FP32, 0x1.8p-150, QS_ROUND_RNE, QS_OVF_NOSAT, 0, 0x1);
    expect_code(QS_E5M2, 1e-320, QS_ROUND_RU, QS_OVF_NOSAT, 0, 0x01); /* an f64 subnormal */
}
END_TEST

/* [FMT-BF16-ENC] [FMT-FP16-ENC] the CUDA __float2bfloat16_rn / __float2half_rn results */
START_TEST(test_bf16_fp16_encoders_match_cuda_rn)
{
    ck_assert_uint_eq(qs_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(qs_f32_to_bf16(qs_f32_from_bits(0x3F808000u)), 0x3F80);
    ck_assert_uint_eq(qs_f32_to_bf16(qs_f32_from_bits(0x3F818000u)), 0x3F82);
    ck_assert_uint_eq(qs_f32_to_bf16(qs_f32_from_bits(0x3F808001u)), 0x3F81);
    ck_assert_uint_eq(qs_f32_to_bf16(FLT_MAX), 0x7F80);
    ck_assert_uint_eq(qs_f32_to_bf16(-INFINITY), 0xFF80);
    ck_assert_uint_eq(qs_f32_to_bf16(qs_f32_from_bits(0xFFC00000u)), 0x7FFF);
    ck_assert_uint_eq(qs_f32_to_bf16(qs_f32_from_bits(0x7F800001u)), 0x7FFF);
    ck_assert_uint_eq(qs_f32_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(qs_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(qs_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(qs_f32_to_f16(65519.996f), 0x7BFF);
    ck_assert_uint_eq(qs_f32_to_f16(qs_f32_from_bits(0xFFC00000u)), 0x7FFF);
    ck_assert_uint_eq(qs_f32_to_f16(-1.5f), 0xBE00);
    ck_assert_uint_eq(qs_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert(qs_bf16_to_f32(0x3F81) == 1.0078125f);
    ck_assert(qs_f16_to_f32(0x3C01) == 1.0f + 0x1p-10f);
    ck_assert(qs_round_bf16(1.00390625f) == 1.0f);
    ck_assert(qs_round_bf16(1.01171875f) == 1.015625f);
    ck_assert(qs_round_f16(1.0f + 0x1p-11f) == 1.0f);
    ck_assert(isnan(qs_round_f16(NAN)));
    /* the subnormal FP16 range of the bit-level path: ties to even at 2^-25 steps, the
     * largest subnormal, and the carry into the smallest normal 2^-14 */
    ck_assert_uint_eq(qs_f32_to_f16(0x1p-25f), 0x0000);
    ck_assert_uint_eq(qs_f32_to_f16(0x1.8p-24f), 0x0002);
    ck_assert_uint_eq(qs_f32_to_f16(-0x1.4p-23f), 0x8002);
    ck_assert_uint_eq(qs_f32_to_f16(0x3FFp-24f), 0x03FF);
    ck_assert_uint_eq(qs_f32_to_f16(0x7FFp-25f), 0x0400);
    ck_assert_uint_eq(qs_f32_to_f16(0x1p-149f), 0x0000);
    ck_assert_uint_eq(qs_f32_to_f16(-0.0f), 0x8000);
    ck_assert(qs_f16_to_f32(0x03FF) == 0x3FFp-24f);
    ck_assert_uint_eq(qs_f32_bits(qs_f16_to_f32(0x8000)), 0x80000000u);
    ck_assert_uint_eq(qs_f32_bits(qs_f16_to_f32(0xFE01)), 0xFFC00000u);
    ck_assert_uint_eq(qs_f32_bits(qs_bf16_to_f32(0xFF81)), 0xFFC00000u);
    ck_assert_uint_eq(qs_f32_bits(qs_f16_to_f32(0xFC00)), 0xFF800000u);
}
END_TEST

/* [FMT-FLAGS] */
START_TEST(test_flags_report_inexact_overflow_and_nan)
{
    qs_cast_mode m = {QS_ROUND_RNE, QS_OVF_SATFINITE, 0};
    uint32_t code;
    unsigned fl;
    qs_encode_f64_flags(QS_E4M3, 465, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_OVERFLOW | QS_FLAG_INEXACT);
    qs_encode_f64_flags(QS_E4M3, 448, m, &code, &fl);
    ck_assert_uint_eq(fl, 0);
    qs_encode_f64_flags(QS_E4M3, 0.3, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_INEXACT);
    qs_encode_f64_flags(QS_E4M3, NAN, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_NAN);
    m.overflow = QS_OVF_NOSAT;
    qs_encode_f64_flags(QS_E4M3, 500, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_OVERFLOW | QS_FLAG_INEXACT | QS_FLAG_NAN);
    ck_assert_uint_eq(code, 0x7F);
    ck_assert_int_eq(qs_encode_f64_flags(QS_E4M3, 1, m, &code, NULL), QS_OK);
    qs_encode_f64_flags(QS_E4M3, -INFINITY, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_NAN); /* Inf to NaN: NaN, not a finite overflow */
    m.overflow = QS_OVF_SATFINITE;
    qs_encode_f64_flags(QS_E4M3, INFINITY, m, &code, &fl);
    ck_assert_uint_eq(fl, QS_FLAG_INEXACT);
    qs_encode_f64_flags(QS_E8M0, -1.0, m, &code, &fl);
    ck_assert_uint_eq(code, 0x7F);
    ck_assert_uint_eq(fl, QS_FLAG_INEXACT);
    qs_encode_f64_flags(QS_E5M2, INFINITY, (qs_cast_mode){QS_ROUND_RNE, QS_OVF_NOSAT, 0}, &code,
                        &fl);
    ck_assert_uint_eq(fl, 0);
}
END_TEST

/* [FMT-ENCODE] [FMT-NAMES] */
START_TEST(test_bad_arguments_are_rejected_and_names_round_trip)
{
    qs_cast_mode m = {QS_ROUND_RNE, QS_OVF_SATFINITE, 0};
    uint32_t code;
    ck_assert_int_eq(qs_encode_f64(QS_U8, 1.0, m, &code), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_encode_f64(QS_E4M3, 1.0, m, NULL), QS_ERR_INVALID_ARG);
    m.round = (qs_round)99;
    ck_assert_int_eq(qs_encode_f32(QS_E4M3, 1.0f, m, &code), QS_ERR_INVALID_ARG);
    m.round = QS_ROUND_RNE;
    m.overflow = (qs_overflow)7;
    ck_assert_int_eq(qs_encode_f64(QS_E4M3, 1.0, m, &code), QS_ERR_INVALID_ARG);
    ck_assert_ptr_null(qs_format_info_get(QS_U8));
    ck_assert_ptr_null(qs_round_name((qs_round)QS_ROUND_COUNT));
    ck_assert_int_eq(qs_round_from_name("nearest"), -1);
    ck_assert_int_eq(qs_overflow_from_name(NULL), -1);
    for (int r = 0; r < QS_ROUND_COUNT; r++)
        ck_assert_int_eq(qs_round_from_name(qs_round_name((qs_round)r)), r);
    for (int o = 0; o < QS_OVF_COUNT; o++)
        ck_assert_int_eq(qs_overflow_from_name(qs_overflow_name((qs_overflow)o)), o);
    ck_assert_str_eq(qs_round_name(QS_ROUND_AWAY), "away");
    ck_assert_str_eq(qs_overflow_name(QS_OVF_MLDTYPES), "mldtypes");
    const qs_format_info *fi = qs_format_info_get(QS_E4M3);
    ck_assert(fi && fi->max_value == 448.0 && fi->max_code == 0x7E && fi->nan_code == 0x7F);
}
END_TEST

/* ---------------------------------------------------------------- random against the oracle */

static uint64_t rng_state;

static uint64_t xorshift64(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

/* Half uniform FP32 bit patterns, half dense in [min_subnormal/8, max*4] of the format. */
static float random_f32(const qs_format_info *fi)
{
    uint64_t r = xorshift64();
    if (r & 1)
        return qs_f32_from_bits((uint32_t)(r >> 32));
    int lo, hi;
    frexp(fi->min_subnormal, &lo);
    frexp(fi->max_value, &hi);
    lo -= 4;
    hi += 2;
    if (lo < -149)
        lo = -149;
    int e = lo + (int)((r >> 8) % (uint64_t)(hi - lo + 1));
    float m = (float)ldexp((double)((r >> 40) | 0x800000u), -24); /* [0.5, 1) */
    float x = (float)ldexp(m, e);
    return (r & 2) ? -x : x;
}

static double random_f64(const qs_format_info *fi)
{
    uint64_t r = xorshift64();
    if ((r & 7) == 0)
        return qs_f64_from_bits(xorshift64());
    int lo, hi;
    frexp(fi->min_subnormal, &lo);
    frexp(fi->max_value, &hi);
    int e = lo - 4 + (int)((r >> 8) % (uint64_t)(hi - lo + 7));
    double m = ldexp((double)((xorshift64() >> 11) | (1ull << 52)), -53);
    double x = ldexp(m, e);
    return (r & 2) ? -x : x;
}

static void check_against_oracle(qs_dtype dt, double x, qs_round r, qs_overflow o, uint32_t u)
{
    qs_cast_mode mode = {r, o, u};
    uint32_t got = 0, want = qso_encode(dt, x, r, o, u);
    qs_encode_f64(dt, x, mode, &got);
    if (!(got == want))
        ck_abort_msg("%s(%a = 0x%016llx) %s/%s u=0x%08x: got 0x%x, oracle 0x%x", qs_dtype_name(dt),
                     x, (unsigned long long)qs_f64_bits(x), qs_round_name(r), qs_overflow_name(o),
                     u, got, want);
}

/* [FMT-ENCODE] [FMT-ROUND-RNE] [FMT-ROUND-RZ] [FMT-ROUND-RU] [FMT-ROUND-RD] [FMT-ROUND-AWAY]
 * [FMT-ROUND-SR] [FMT-OVF-SATFINITE] [FMT-OVF-NOSAT] [FMT-OVF-MLDTYPES] */
START_TEST(test_random_f32_inputs_match_the_oracle)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < N_SMALL; i++) {
        const qs_format_info *fi = qs_format_info_get(small_formats[i]);
        for (int r = 0; r < QS_ROUND_COUNT; r++)
            for (int o = 0; o < QS_OVF_COUNT; o++)
                for (int n = 0; n < 100000; n++) {
                    float x = random_f32(fi);
                    uint32_t u = (uint32_t)xorshift64();
                    check_against_oracle(fi->dtype, x, (qs_round)r, (qs_overflow)o, u);
                }
    }
}
END_TEST

/* [FMT-ENCODE-F64] [FMT-ROUND-SR] */
START_TEST(test_random_f64_inputs_match_the_oracle)
{
    rng_state = 0xD1B54A32D192ED03ull;
    for (size_t i = 0; i < N_SMALL; i++) {
        const qs_format_info *fi = qs_format_info_get(small_formats[i]);
        for (int r = 0; r < QS_ROUND_COUNT; r++)
            for (int o = 0; o < QS_OVF_COUNT; o++)
                for (int n = 0; n < 30000; n++) {
                    double x = random_f64(fi);
                    uint32_t u = (uint32_t)xorshift64();
                    check_against_oracle(fi->dtype, x, (qs_round)r, (qs_overflow)o, u);
                }
    }
}
END_TEST

/* [FMT-ENCODE-F64] FP32 from FP64 under rne/nosat is the C conversion (IEEE RNE). */
START_TEST(test_fp32_from_f64_matches_the_c_conversion)
{
    rng_state = 0x2545F4914F6CDD1Dull;
    const qs_format_info *fi = qs_format_info_get(QS_FP32);
    for (int n = 0; n < 200000; n++) {
        double x = random_f64(fi);
        if (isnan(x))
            continue;
        uint32_t want = qs_f32_bits((float)x);
        expect_code(QS_FP32, x, QS_ROUND_RNE, QS_OVF_NOSAT, 0, want);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_code_decodes_as_the_oracle_decodes);
    tcase_add_test(tc, test_known_codes_decode_to_their_values);
    tcase_add_test(tc, test_every_finite_code_reencodes_to_itself_in_every_mode);
    tcase_add_test(tc, test_e4m3_overflow_above_464_by_policy);
    tcase_add_test(tc, test_e5m2_overflows_at_61440_by_policy);
    tcase_add_test(tc, test_half_the_smallest_subnormal_rounds_to_signed_zero);
    tcase_add_test(tc, test_e2m1_ties_go_to_even_under_rne_and_away_under_away);
    tcase_add_test(tc, test_fp4_fp6_nan_gives_plus_max_except_mldtypes_zero_of_opposite_sign);
    tcase_add_test(tc, test_e8m0_rounds_the_significand_and_handles_sign_zero_and_range);
    tcase_add_test(tc, test_directed_modes_overflow_to_max_when_rounding_toward_zero);
    tcase_add_test(tc, test_stochastic_rounding_threshold_is_exact);
    tcase_add_test(tc, test_encoding_from_f64_rounds_once);
    tcase_add_test(tc, test_bf16_fp16_encoders_match_cuda_rn);
    tcase_add_test(tc, test_flags_report_inexact_overflow_and_nan);
    tcase_add_test(tc, test_bad_arguments_are_rejected_and_names_round_trip);
    tcase_add_test(tc, test_random_f32_inputs_match_the_oracle);
    tcase_add_test(tc, test_random_f64_inputs_match_the_oracle);
    tcase_add_test(tc, test_fp32_from_f64_matches_the_c_conversion);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
