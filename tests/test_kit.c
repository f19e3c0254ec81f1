/* test_kit.c: the conformance kit's pieces — SHA-256 known answers, the comparisons,
 * input generation and the case loader's schema checks (spec/cases.md). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "cases.h"
#include "compare.h"
#include "qspec/qspec.h"
#include "qstest.h"
#include "sha256.h"

/* [CASE-DIGEST] FIPS 180-4 example vectors */
START_TEST(test_sha256_known_answers)
{
    char hex[65];
    qsk_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    qsk_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    qsk_sha256_hex(two, strlen(two), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a', fed in uneven pieces */
    qsk_sha256 s;
    uint8_t d[32];
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    qsk_sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        qsk_sha256_update(&s, chunk, n);
        left -= n;
    }
    qsk_sha256_final(&s, d);
    ck_assert_uint_eq(d[0], 0xcd);
    ck_assert_uint_eq(d[1], 0xc7);
    ck_assert_uint_eq(d[31], 0xd0);
}
END_TEST

static void make_u8(qs_tensor *t, qs_dtype dt, const uint8_t *codes, int64_t n)
{
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, dt, 1, &n), QS_OK);
    memcpy(t->data, codes, (size_t)n);
}

static void make_f32(qs_tensor *t, const float *v, int64_t n)
{
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_FP32, 1, &n), QS_OK);
    memcpy(t->data, v, (size_t)n * sizeof(float));
}

/* [CASE-CMP-BITWISE] [CASE-CMP-NAN] */
START_TEST(test_bitwise_counts_mismatches_and_nan_rule)
{
    const uint8_t e[4] = {0x7e, 0x7f, 0x01, 0xff};
    const uint8_t o[4] = {0x7e, 0xff, 0x02, 0x7f};
    qs_tensor te, to;
    make_u8(&te, QS_E4M3, e, 4);
    make_u8(&to, QS_E4M3, o, 4);
    qsk_output out = {0};
    out.cmp = QSK_CMP_BITWISE;
    qsk_cmp_result r;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    ck_assert_uint_eq(r.mismatches, 3);
    ck_assert_uint_eq(r.first, 1);
    ck_assert_str_eq(r.expected, "0x7f (nan)");
    ck_assert_str_eq(r.observed, "0xff (-nan)");
    out.nan_any = 1;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_uint_eq(r.first, 2);
    ck_assert_str_eq(r.expected, "0x01 (0.001953125)");
    qs_tensor_free(&te);
    qs_tensor_free(&to);
}
END_TEST

/* [CASE-CMP-ULP] */
START_TEST(test_ulp_distance_crosses_zero_and_binades)
{
    float e[4] = {1.0f, -0.0f, 2.0f, 1.0f};
    float o[4] = {nextafterf(1.0f, 2.0f), 0.0f, nextafterf(2.0f, 0.0f), 1.0f + 4 * 0x1p-23f};
    qs_tensor te, to;
    make_f32(&te, e, 4);
    make_f32(&to, o, 4);
    qsk_output out = {0};
    out.cmp = QSK_CMP_ULP;
    out.p1 = 1;
    qsk_cmp_result r;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_uint_eq(r.first, 3);
    out.p1 = 4;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 1);
    float tiny_e[1] = {0x1p-149f}, tiny_o[1] = {-0x1p-149f};
    qs_tensor_free(&te);
    qs_tensor_free(&to);
    make_f32(&te, tiny_e, 1);
    make_f32(&to, tiny_o, 1);
    out.p1 = 1;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0); /* 2 steps apart */
    out.p1 = 2;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 1);
    qs_tensor_free(&te);
    qs_tensor_free(&to);
}
END_TEST

/* [CASE-CMP-ALLCLOSE] [CASE-CMP-GEMM-BOUND] */
START_TEST(test_allclose_and_gemm_bound)
{
    float e[3] = {100.0f, 0.0f, -1.0f};
    float o[3] = {100.5f, 0.001f, -1.0f};
    float b[3] = {0.25f, 0.001f, 0.0f};
    qs_tensor te, to, tb;
    make_f32(&te, e, 3);
    make_f32(&to, o, 3);
    make_f32(&tb, b, 3);
    qsk_output out = {0};
    out.cmp = QSK_CMP_ALLCLOSE;
    out.p1 = 0.0011;
    out.p2 = 0.005;
    qsk_cmp_result r;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 1);
    out.p2 = 0.004;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    ck_assert_uint_eq(r.first, 0);
    out.cmp = QSK_CMP_GEMM_BOUND;
    out.p1 = 2;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, &tb, &r), 1);
    out.p1 = 1.5;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, &tb, &r), 0);
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0); /* no bound: fails */
    qs_tensor_free(&te);
    qs_tensor_free(&to);
    qs_tensor_free(&tb);
}
END_TEST

/* [CASE-CMP-COSINE] [CASE-CMP-RMS-RATIO] */
START_TEST(test_cosine_and_rms_ratio_are_whole_tensor)
{
    float e[2] = {3.0f, 4.0f}, o[2] = {3.0f, 4.5f};
    qs_tensor te, to;
    make_f32(&te, e, 2);
    make_f32(&to, o, 2);
    qsk_output out = {0};
    qsk_cmp_result r;
    out.cmp = QSK_CMP_RMS_RATIO;
    out.p1 = 0.11;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 1);
    ck_assert(fabs(r.metric - 0.1) < 1e-12);
    out.p1 = 0.09;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    out.cmp = QSK_CMP_COSINE;
    double cosv = (9.0 + 18.0) / sqrt(25.0 * (9.0 + 20.25));
    out.p1 = cosv - 1e-9;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 1);
    out.p1 = cosv + 1e-9;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    qs_tensor_free(&te);
    qs_tensor_free(&to);
}
END_TEST

START_TEST(test_compare_rejects_mismatched_shapes)
{
    float e[2] = {1, 2}, o[3] = {1, 2, 3};
    qs_tensor te, to;
    make_f32(&te, e, 2);
    make_f32(&to, o, 3);
    qsk_output out = {0};
    qsk_cmp_result r;
    ck_assert_int_eq(qsk_compare(&out, &te, &to, NULL, &r), 0);
    ck_assert_ptr_nonnull(strstr(r.detail, "expected fp32 with 2 elements, observed fp32 with 3"));
    qs_tensor_free(&te);
    qs_tensor_free(&to);
}
END_TEST

/* [CASE-GEN-ORDER] [CASE-GEN-DTYPE] [CASE-GEN-INJECT] [RNG-GEN-UNIFORM] [RNG-GEN-NORMAL] */
START_TEST(test_generation_follows_the_streams)
{
    qsk_input in = {0};
    in.dtype = QS_FP32;
    in.ndim = 2;
    in.shape[0] = 3;
    in.shape[1] = 5;
    in.gen = QSK_GEN_UNIFORM;
    in.seed = 11;
    in.offset = 4;
    in.a = -2;
    in.b = 6;
    qsk_inject inj[2] = {{7, INFINITY}, {-1, NAN}};
    in.inject = inj;
    in.ninject = 2;
    qs_tensor t;
    ck_assert_int_eq(qsk_input_generate(NULL, &in, &t), QS_OK);
    size_t nan_at = qs_random_u32(11, 5, 1) % 15;
    for (size_t i = 0; i < 15; i++) {
        float v = ((float *)t.data)[i];
        if (i == nan_at) {
            ck_assert(isnan(v));
            continue;
        }
        if (i == 7) {
            ck_assert(isinf(v) && v > 0);
            continue;
        }
        float u = qs_random_uniform(11, 4, i);
        float width = 6.0f - -2.0f;
        float scaled = width * u;
        ck_assert_uint_eq(qs_f32_bits(v), qs_f32_bits(-2.0f + scaled));
    }
    qs_tensor_free(&t);
    in.gen = QSK_GEN_NORMAL;
    in.a = 1;
    in.b = 3;
    in.ninject = 0;
    in.dtype = QS_BF16;
    ck_assert_int_eq(qsk_input_generate(NULL, &in, &t), QS_OK);
    for (size_t i = 0; i < 15; i++) {
        float z = qs_random_normal(11, 4, i);
        float scaled = 3.0f * z;
        ck_assert_uint_eq(((uint16_t *)t.data)[i], qs_f32_to_bf16(1.0f + scaled));
    }
    qs_tensor_free(&t);
}
END_TEST

/* [CASE-GEN-DTYPE] explicit values: one rounding from binary64, repeated cyclically */
START_TEST(test_explicit_values_round_once_and_repeat)
{
    double vals[2] = {1.0 + 0x1p-11 + 0x1p-30, -65520.0};
    qsk_input in = {0};
    in.dtype = QS_FP16;
    in.ndim = 1;
    in.shape[0] = 4;
    in.gen = QSK_GEN_VALUES;
    in.values = vals;
    in.nvalues = 2;
    qs_tensor t;
    ck_assert_int_eq(qsk_input_generate(NULL, &in, &t), QS_OK);
    const uint16_t *h = t.data;
    /* 1 + 2^-11 + 2^-30 lies just above the tie between 1 and 1 + 2^-10: one rounding goes
     * up; rounding through binary32 first would land on the tie and go to even (0x3c00) */
    ck_assert_uint_eq(h[0], 0x3c01);
    ck_assert_uint_eq(h[1], 0xfc00); /* -65520 rounds to -Inf in FP16 */
    ck_assert_uint_eq(h[2], 0x3c01);
    ck_assert_uint_eq(h[3], 0xfc00);
    qs_tensor_free(&t);
}
END_TEST

static qs_status load_text(const char *text, qsk_case_file *f, qs_ctx *ctx)
{
    char path[] = "/tmp/qspec-kit-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *fp = fdopen(fd, "w");
    fputs(text, fp);
    fclose(fp);
    qs_status st = qsk_case_file_load(ctx, path, NULL, NULL, f);
    remove(path);
    return st;
}

/* [CASE-FILE] [CASE-RULES] */
START_TEST(test_loader_checks_version_rules_and_duplicates)
{
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_int_eq(load_text("qspec: 2\ncases: []\n", &f, ctx), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), ":1:8: unsupported schema version '2'"));
    qsk_case_file_free(&f);
    ck_assert_int_eq(load_text("qspec: 1\ncases: []\n---\nqspec: 1\n", &f, ctx), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "one YAML document"));
    qsk_case_file_free(&f);
    const char *dup = "qspec: 1\ncases:\n"
                      "  - {id: a, rules: [X-Y], op: cast, inputs: {x: {dtype: fp32, shape: [1], "
                      "values: [1]}}, outputs: {y: {compare: bitwise, digest: pending}}}\n"
                      "  - {id: a, rules: [x-y], op: cast, inputs: {x: {dtype: fp32, shape: [1], "
                      "values: [1]}}, outputs: {y: {compare: bitwise, digest: pending}}}\n";
    ck_assert_int_eq(load_text(dup, &f, ctx), QS_ERR_FORMAT);
    ck_assert_msg(strstr(qs_ctx_errmsg(ctx), ":4:21: 'x-y' is not a rule ID") != NULL, "%s",
                  qs_ctx_errmsg(ctx));
    qsk_case_file_free(&f);
    char same[1024];
    snprintf(same, sizeof same, "%s", dup);
    char *bad = strstr(same, "[x-y]");
    memcpy(bad, "[X-Y]", 5);
    ck_assert_int_eq(load_text(same, &f, ctx), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), ":4:10: duplicate case id 'a'"));
    qsk_case_file_free(&f);
    ck_assert_int_eq(load_text("qspec: 1\ncases: [1]\nqspec: 1\n", &f, ctx), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "duplicate key 'qspec'"));
    qsk_case_file_free(&f);
    ck_assert_int_eq(load_text("qspec: 1\ncases: &a []\n", &f, ctx), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "anchors are not allowed"));
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kit");
    TCase *tc = tcase_create("kit");
    tcase_add_test(tc, test_sha256_known_answers);
    tcase_add_test(tc, test_bitwise_counts_mismatches_and_nan_rule);
    tcase_add_test(tc, test_ulp_distance_crosses_zero_and_binades);
    tcase_add_test(tc, test_allclose_and_gemm_bound);
    tcase_add_test(tc, test_cosine_and_rms_ratio_are_whole_tensor);
    tcase_add_test(tc, test_compare_rejects_mismatched_shapes);
    tcase_add_test(tc, test_generation_follows_the_streams);
    tcase_add_test(tc, test_explicit_values_round_once_and_repeat);
    tcase_add_test(tc, test_loader_checks_version_rules_and_duplicates);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
