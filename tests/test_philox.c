/* test_philox.c: Philox4x32-10 against the published Random123 known answers, the
 * (seed, offset, index) stream layout, the exactness and range of the uniform samples,
 * the Box-Muller definition of the normal samples, and crude statistics of both.
 * Expected words come from the Random123 kat_vectors file or from an independent
 * implementation (worked examples of spec/random.md), never from this library. */
#include <math.h>
#include <string.h>

#include "qspec/mathf.h"
#include "qspec/random.h"
#include "qstest.h"

#define NSAMPLES 100000

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void check_philox(const uint32_t ctr[4], const uint32_t key[2], const uint32_t want[4])
{
    uint32_t got[4];
    qs_philox4x32_10(ctr, key, got);
    for (int w = 0; w < 4; w++) {
        ck_assert_msg(got[w] == want[w], "philox word %d: got 0x%08x want 0x%08x", w, got[w],
                      want[w]);
    }
}

/* [RNG-PHILOX] kat_vectors: philox4x32 10, counter 0, key 0. */
START_TEST(test_philox_kat_zero_counter_zero_key)
{
    const uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0};
    const uint32_t want[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    check_philox(ctr, key, want);
}
END_TEST

/* [RNG-PHILOX] kat_vectors: philox4x32 10, every counter and key bit set. */
START_TEST(test_philox_kat_all_ones)
{
    const uint32_t ctr[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
    const uint32_t key[2] = {0xffffffff, 0xffffffff};
    const uint32_t want[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    check_philox(ctr, key, want);
}
END_TEST

/* [RNG-PHILOX] kat_vectors: philox4x32 10, counter and key from the digits of pi. */
START_TEST(test_philox_kat_pi_digits)
{
    const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    const uint32_t key[2] = {0xa4093822, 0x299f31d0};
    const uint32_t want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    check_philox(ctr, key, want);
}
END_TEST

/* [RNG-STREAM] word i of (seed, offset) is word i%4 of the block with key (seed lo, seed hi)
 * and counter ((i/4) lo, (i/4) hi, offset lo, offset hi), rebuilt here word by word. */
START_TEST(test_stream_word_is_word_i_mod_4_of_counter_block)
{
    const uint64_t seeds[] = {0, 1, 0x100000000u, 0x0123456789abcdefu, UINT64_MAX};
    const uint64_t offsets[] = {0, 1, 0x100000000u, 0xfedcba9876543210u, UINT64_MAX};
    const uint64_t idx[] = {
        0, 1, 2, 3, 4, 7, 0x3fffffffcu, 0x400000000u, 0x1000000000005u, UINT64_MAX - 3, UINT64_MAX};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            for (size_t n = 0; n < sizeof idx / sizeof idx[0]; n++) {
                uint64_t seed = seeds[s], off = offsets[o], i = idx[n];
                uint64_t blk = i >> 2;
                uint32_t key[2] = {(uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32)};
                uint32_t ctr[4] = {(uint32_t)(blk & 0xffffffffu), (uint32_t)(blk >> 32),
                                   (uint32_t)(off & 0xffffffffu), (uint32_t)(off >> 32)};
                uint32_t out[4];
                qs_philox4x32_10(ctr, key, out);
                uint32_t got = qs_random_u32(seed, off, i);
                ck_assert_msg(got == out[i & 3],
                              "seed 0x%016llx offset 0x%016llx i %llu: got 0x%08x want 0x%08x",
                              (unsigned long long)seed, (unsigned long long)off,
                              (unsigned long long)i, got, out[i & 3]);
            }
        }
    }
}
END_TEST

/* [RNG-STREAM] seed 0, offset 0: words 0..3 are the zero-counter known answer. */
START_TEST(test_stream_seed0_offset0_starts_with_zero_kat)
{
    const uint32_t want[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    for (uint64_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(qs_random_u32(0, 0, i), want[i]);
    }
}
END_TEST

/* [RNG-STREAM] the worked examples of spec/random.md (independent implementation): they
 * fix which half of seed and offset goes into which key and counter word. */
START_TEST(test_stream_matches_worked_examples)
{
    const uint64_t seed = 0x0123456789abcdefu, off = 0xfedcba9876543210u;
    ck_assert_uint_eq(qs_random_u32(seed, off, 0), 0xaef2adf7);
    ck_assert_uint_eq(qs_random_u32(seed, off, 5), 0x4671fd85);
    ck_assert_uint_eq(qs_random_u32(seed, off, 0x10000000005u), 0x0df101be);
    ck_assert_uint_eq(qs_random_u32(seed, off, UINT64_MAX), 0x4742b6c6);
    ck_assert_uint_eq(qs_random_u32(42, 7, 3), 0x557398d3);
    ck_assert_uint_eq(qs_random_u32(0, 0, UINT64_MAX), 0x31eb18f7);
}
END_TEST

/* [RNG-STREAM] a pure function: any call order, repeated calls, same bits. */
START_TEST(test_stream_is_deterministic_in_any_order)
{
    uint32_t fwd[64];
    for (uint64_t i = 0; i < 64; i++) {
        fwd[i] = qs_random_u32(1234, 99, i);
    }
    for (uint64_t i = 64; i-- > 0;) {
        ck_assert_uint_eq(qs_random_u32(1234, 99, i), fwd[i]);
        ck_assert_uint_eq(f32_bits(qs_random_normal(1234, 99, i)),
                          f32_bits(qs_random_normal(1234, 99, i)));
    }
}
END_TEST

static int count_equal_words(uint64_t s0, uint64_t o0, uint64_t s1, uint64_t o1, int n)
{
    int same = 0;
    for (int i = 0; i < n; i++) {
        same += qs_random_u32(s0, o0, (uint64_t)i) == qs_random_u32(s1, o1, (uint64_t)i);
    }
    return same;
}

/* [RNG-STREAM] seeds differing in one bit, low or high word, give unrelated streams. */
START_TEST(test_different_seeds_give_different_words)
{
    ck_assert_int_le(count_equal_words(0, 5, 1, 5, 4096), 2);
    ck_assert_int_le(count_equal_words(0, 5, 0x100000000u, 5, 4096), 2);
    ck_assert_int_le(count_equal_words(7, 5, 7u | (1ull << 63), 5, 4096), 2);
}
END_TEST

/* [RNG-STREAM] offsets differing in one bit give unrelated streams, and offset 1 is not
 * a shifted copy of offset 0 (its first words appear nowhere in offset 0's first 4096). */
START_TEST(test_different_offsets_give_different_words)
{
    ck_assert_int_le(count_equal_words(3, 0, 3, 1, 4096), 2);
    ck_assert_int_le(count_equal_words(3, 0, 3, 0x100000000u, 4096), 2);
    uint32_t base[4096];
    for (uint64_t i = 0; i < 4096; i++) {
        base[i] = qs_random_u32(3, 0, i);
    }
    int hits = 0;
    for (uint64_t j = 0; j < 64; j++) {
        uint32_t w = qs_random_u32(3, 1, j);
        for (int i = 0; i < 4096; i++) {
            hits += base[i] == w;
        }
    }
    ck_assert_int_le(hits, 2);
}
END_TEST

/* [RNG-UNIFORM] u -> (u >> 8) * 2^-24: low 8 bits ignored, top value 1 - 2^-24. */
START_TEST(test_uniform_of_word_is_top_24_bits_times_2_pow_minus_24)
{
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0x00000000u)), 0x00000000u);
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0x000000ffu)), 0x00000000u);
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0x00000100u)), 0x33800000u); /* 2^-24 */
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0x80000000u)), 0x3f000000u); /* 0.5 */
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0xffffffffu)), 0x3f7fffffu); /* 1-2^-24 */
    ck_assert_uint_eq(f32_bits(qs_u32_to_uniform(0x6627e8d5u)), 0x3ecc4fd0u);
}
END_TEST

/* [RNG-UNIFORM] for every 24-bit k the sample is exactly k * 2^-24 (no rounding). */
START_TEST(test_uniform_is_exact_for_every_24_bit_value)
{
    for (uint32_t k = 0; k < (1u << 24); k++) {
        float f = qs_u32_to_uniform((k << 8) | (k & 0xffu));
        if ((double)f != (double)k / 16777216.0) {
            ck_abort_msg("k 0x%06x: got 0x%08x", k, f32_bits(f));
        }
    }
}
END_TEST

/* [RNG-UNIFORM] stream samples are the words' uniforms, in [0, 1), multiples of 2^-24. */
START_TEST(test_uniform_samples_lie_in_0_1_on_the_2_pow_minus_24_grid)
{
    for (uint64_t i = 0; i < NSAMPLES; i++) {
        float u = qs_random_uniform(77, 3, i);
        ck_assert_uint_eq(f32_bits(u), f32_bits(qs_u32_to_uniform(qs_random_u32(77, 3, i))));
        ck_assert(u >= 0.0f && u < 1.0f);
        double scaled = (double)u * 16777216.0;
        ck_assert(scaled == floor(scaled));
    }
    ck_assert_uint_eq(f32_bits(qs_random_uniform(42, 7, 1)), 0x3f655410u);
}
END_TEST

/* [RNG-UNIFORM] mean 1/2, variance 1/12, 16 equal bins each within 10% of n/16. */
START_TEST(test_uniform_mean_variance_and_bins_are_plausible)
{
    double sum = 0.0, sum2 = 0.0;
    int bins[16] = {0};
    for (uint64_t i = 0; i < NSAMPLES; i++) {
        double u = qs_random_uniform(2024, 11, i);
        sum += u;
        sum2 += u * u;
        bins[(int)(u * 16.0)]++;
    }
    double mean = sum / NSAMPLES, var = sum2 / NSAMPLES - mean * mean;
    ck_assert_msg(fabs(mean - 0.5) < 0.01, "mean %.6f", mean);
    ck_assert_msg(fabs(var - 1.0 / 12.0) < 0.005, "variance %.6f", var);
    for (int b = 0; b < 16; b++) {
        ck_assert_msg(fabs(bins[b] - NSAMPLES / 16.0) < 0.1 * NSAMPLES / 16.0, "bin %d: %d", b,
                      bins[b]);
    }
}
END_TEST

/* The normal sample i rebuilt from its two words with the qs_mathf functions, in the
 * operation order of [RNG-NORMAL]. */
static float normal_by_definition(uint64_t seed, uint64_t off, uint64_t i)
{
    uint64_t first = i & ~(uint64_t)1;
    uint32_t a = qs_random_u32(seed, off, first), b = qs_random_u32(seed, off, first + 1);
    float u1 = (float)((a >> 8) + 1u) * 0x1p-24f;
    float u2 = (float)(b >> 8) * 0x1p-24f;
    float l = qs_logf(u1);
    float m = -2.0f * l;
    float r = qs_sqrtf(m);
    float t = 6.28318548202514648f * u2;
    float c = (i & 1) ? qs_sinf(t) : qs_cosf(t);
    return r * c;
}

/* [RNG-NORMAL] every sample equals the Box-Muller definition, bit for bit; the pair
 * (2p, 2p+1) uses cos then sin of the same angle and radius. */
START_TEST(test_normal_is_box_muller_of_its_pair_words)
{
    const uint64_t idx[] = {0, 1, 2, 3, 4, 5, 1001, 0x10000000005u, UINT64_MAX - 1, UINT64_MAX};
    for (size_t n = 0; n < sizeof idx / sizeof idx[0]; n++) {
        float got = qs_random_normal(5, 6, idx[n]), want = normal_by_definition(5, 6, idx[n]);
        ck_assert_msg(f32_bits(got) == f32_bits(want), "i %llu: got 0x%08x want 0x%08x",
                      (unsigned long long)idx[n], f32_bits(got), f32_bits(want));
    }
    for (uint64_t i = 0; i < 2000; i++) {
        ck_assert_uint_eq(f32_bits(qs_random_normal(9, 0, i)),
                          f32_bits(normal_by_definition(9, 0, i)));
    }
}
END_TEST

/* [RNG-NORMAL] worked examples of spec/random.md, computed independently with every step
 * correctly rounded; these bits hold only once qs_logf/qs_sqrtf/qs_cosf/qs_sinf are
 * correctly rounded as spec/mathf.md requires. */
START_TEST(test_normal_matches_correctly_rounded_worked_examples)
{
    const struct {
        uint64_t seed, off, i;
        uint32_t bits;
    } ex[] = {
        {0, 0, 0, 0x3f7dbb34u},
        {0, 0, 1, 0xbf6cb6adu},
        {0, 0, 2, 0xbf1e1ba1u},
        {0, 0, 3, 0xbef6d1acu},
        {0x0123456789abcdefu, 0xfedcba9876543210u, 2, 0xbfd2c2a9u},
        {42, 7, 5, 0x3ea7c2c6u},
    };
    for (size_t n = 0; n < sizeof ex / sizeof ex[0]; n++) {
        uint32_t got = f32_bits(qs_random_normal(ex[n].seed, ex[n].off, ex[n].i));
        ck_assert_msg(got == ex[n].bits, "example %zu: got 0x%08x want 0x%08x", n, got, ex[n].bits);
    }
}
END_TEST

/* [RNG-NORMAL] mean ~0, variance ~1, ~68.27% within one sigma, |z| <= sqrt(-2 ln 2^-24). */
START_TEST(test_normal_mean_variance_and_spread_are_plausible)
{
    double sum = 0.0, sum2 = 0.0;
    int within = 0;
    for (uint64_t i = 0; i < NSAMPLES; i++) {
        float z = qs_random_normal(31337, 2, i);
        ck_assert_msg(isfinite(z) && fabsf(z) <= 5.7682f, "i %llu: z 0x%08x", (unsigned long long)i,
                      f32_bits(z));
        sum += z;
        sum2 += (double)z * z;
        within += fabsf(z) < 1.0f;
    }
    double mean = sum / NSAMPLES, var = sum2 / NSAMPLES - mean * mean;
    double frac = (double)within / NSAMPLES;
    ck_assert_msg(fabs(mean) < 0.02, "mean %.6f", mean);
    ck_assert_msg(fabs(var - 1.0) < 0.03, "variance %.6f", var);
    ck_assert_msg(fabs(frac - 0.682689) < 0.01, "within one sigma %.6f", frac);
}
END_TEST

/* [RNG-INDEX] [RNG-SR-BITS] element (r, c) of a 3x5 tensor takes word r*5 + c of the
 * stream as its sr_bits: row-major flat index, and a row starts mid-block. */
START_TEST(test_sr_bits_of_element_are_word_of_row_major_index)
{
    const uint64_t seed = 0xabcdefu, off = 12;
    for (uint64_t r = 0; r < 3; r++) {
        for (uint64_t c = 0; c < 5; c++) {
            uint64_t e = r * 5 + c;
            uint32_t key[2] = {0x00abcdefu, 0};
            uint32_t ctr[4] = {(uint32_t)(e / 4), 0, 12, 0};
            uint32_t out[4];
            qs_philox4x32_10(ctr, key, out);
            ck_assert_uint_eq(qs_random_u32(seed, off, e), out[e % 4]);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("philox");
    TCase *tc = tcase_create("philox");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_philox_kat_zero_counter_zero_key);
    tcase_add_test(tc, test_philox_kat_all_ones);
    tcase_add_test(tc, test_philox_kat_pi_digits);
    tcase_add_test(tc, test_stream_word_is_word_i_mod_4_of_counter_block);
    tcase_add_test(tc, test_stream_seed0_offset0_starts_with_zero_kat);
    tcase_add_test(tc, test_stream_matches_worked_examples);
    tcase_add_test(tc, test_stream_is_deterministic_in_any_order);
    tcase_add_test(tc, test_different_seeds_give_different_words);
    tcase_add_test(tc, test_different_offsets_give_different_words);
    tcase_add_test(tc, test_uniform_of_word_is_top_24_bits_times_2_pow_minus_24);
    tcase_add_test(tc, test_uniform_is_exact_for_every_24_bit_value);
    tcase_add_test(tc, test_uniform_samples_lie_in_0_1_on_the_2_pow_minus_24_grid);
    tcase_add_test(tc, test_uniform_mean_variance_and_bins_are_plausible);
    tcase_add_test(tc, test_normal_is_box_muller_of_its_pair_words);
    tcase_add_test(tc, test_normal_matches_correctly_rounded_worked_examples);
    tcase_add_test(tc, test_normal_mean_variance_and_spread_are_plausible);
    tcase_add_test(tc, test_sr_bits_of_element_are_word_of_row_major_index);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
