/* test_status.c: status names and texts, and the per-context error message. */
#include <string.h>

#include "qspec/status.h"
#include "qstest.h"

START_TEST(test_every_status_has_a_distinct_name_and_text)
{
    const qs_status all[] = {QS_OK,         QS_ERR_INVALID_ARG, QS_ERR_NOMEM,    QS_ERR_IO,
                             QS_ERR_FORMAT, QS_ERR_UNSUPPORTED, QS_ERR_SHAPE,    QS_ERR_DTYPE,
                             QS_ERR_STATE,  QS_ERR_ABI,         QS_ERR_INJECTED, QS_ERR_INTERNAL};
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_ne(qs_status_name(all[i]), "QS_UNKNOWN");
        ck_assert_str_ne(qs_status_str(all[i]), "unknown status");
        for (size_t j = 0; j < i; j++) {
            ck_assert_str_ne(qs_status_name(all[i]), qs_status_name(all[j]));
            ck_assert_str_ne(qs_status_str(all[i]), qs_status_str(all[j]));
        }
    }
    ck_assert_str_eq(qs_status_name(QS_ERR_SHAPE), "QS_ERR_SHAPE");
    ck_assert_int_eq(QS_OK, 0);
}
END_TEST

START_TEST(test_unknown_status_is_named_unknown)
{
    ck_assert_str_eq(qs_status_name((qs_status)-999), "QS_UNKNOWN");
    ck_assert_str_eq(qs_status_str((qs_status)42), "unknown status");
}
END_TEST

START_TEST(test_ctx_records_message_and_status)
{
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    ck_assert_str_eq(qs_ctx_errmsg(ctx), "");
    ck_assert_int_eq(qs_ctx_errstatus(ctx), QS_OK);
    qs_status s = qs_ctx_error(ctx, QS_ERR_SHAPE, "argument '%s' has %d dims", "x", 9);
    ck_assert_int_eq(s, QS_ERR_SHAPE);
    ck_assert_str_eq(qs_ctx_errmsg(ctx), "argument 'x' has 9 dims");
    ck_assert_int_eq(qs_ctx_errstatus(ctx), QS_ERR_SHAPE);
    qs_ctx_clear_error(ctx);
    ck_assert_str_eq(qs_ctx_errmsg(ctx), "");
    ck_assert_int_eq(qs_ctx_errstatus(ctx), QS_OK);
    qs_ctx_free(ctx);
}
END_TEST

/* A message may wrap the context's own: the caller that adds file:line to a callee's error
 * passes qs_ctx_errmsg(ctx) as an argument. */
START_TEST(test_message_can_wrap_the_previous_one)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "option pow2 does not apply to recipe mxfp8");
    qs_ctx_error(ctx, QS_ERR_FORMAT, "cases.yaml:15:61: pow2: %s", qs_ctx_errmsg(ctx));
    ck_assert_str_eq(qs_ctx_errmsg(ctx),
                     "cases.yaml:15:61: pow2: option pow2 does not apply to recipe mxfp8");
    ck_assert_int_eq(qs_ctx_errstatus(ctx), QS_ERR_FORMAT);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_two_contexts_do_not_interact)
{
    qs_ctx *a = qs_ctx_new(), *b = qs_ctx_new();
    qs_ctx_error(a, QS_ERR_IO, "a failed");
    ck_assert_str_eq(qs_ctx_errmsg(b), "");
    qs_ctx_error(b, QS_ERR_DTYPE, "b failed");
    ck_assert_str_eq(qs_ctx_errmsg(a), "a failed");
    ck_assert_int_eq(qs_ctx_errstatus(a), QS_ERR_IO);
    qs_ctx_free(a);
    qs_ctx_free(b);
}
END_TEST

START_TEST(test_long_message_is_truncated_not_overrun)
{
    qs_ctx *ctx = qs_ctx_new();
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s", big);
    size_t n = strlen(qs_ctx_errmsg(ctx));
    ck_assert_uint_gt(n, 100);
    ck_assert_uint_lt(n, sizeof big - 1);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_ctx_is_accepted)
{
    ck_assert_int_eq(qs_ctx_error(NULL, QS_ERR_NOMEM, "x"), QS_ERR_NOMEM);
    ck_assert_str_eq(qs_ctx_errmsg(NULL), "");
    qs_ctx_free(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("status");
    tcase_add_test(tc, test_every_status_has_a_distinct_name_and_text);
    tcase_add_test(tc, test_unknown_status_is_named_unknown);
    tcase_add_test(tc, test_ctx_records_message_and_status);
    tcase_add_test(tc, test_two_contexts_do_not_interact);
    tcase_add_test(tc, test_long_message_is_truncated_not_overrun);
    tcase_add_test(tc, test_message_can_wrap_the_previous_one);
    tcase_add_test(tc, test_null_ctx_is_accepted);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
