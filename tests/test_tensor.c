/* test_tensor.c: dtype names and sizes, tensor allocation, strides and rejections. */
#include <string.h>

#include "qspec/tensor.h"
#include "qstest.h"

START_TEST(test_dtype_names_round_trip)
{
    for (int d = QS_FP32; d < QS_DTYPE_COUNT; d++) {
        const char *name = qs_dtype_name((qs_dtype)d);
        ck_assert_ptr_nonnull(name);
        ck_assert_int_eq(qs_dtype_from_name(name), d);
    }
    ck_assert_int_eq(qs_dtype_from_name("bfloat16"), QS_BF16);
    ck_assert_int_eq(qs_dtype_from_name("float8_e4m3fn"), QS_E4M3);
    ck_assert_int_eq(qs_dtype_from_name("e4m3fnuz"), QS_DTYPE_INVALID);
    ck_assert_int_eq(qs_dtype_from_name(NULL), QS_DTYPE_INVALID);
    ck_assert_ptr_null(qs_dtype_name(QS_DTYPE_INVALID));
}
END_TEST

START_TEST(test_dtype_sizes)
{
    ck_assert_uint_eq(qs_dtype_bits(QS_E2M1), 4);
    ck_assert_uint_eq(qs_dtype_bytes(QS_E2M1, 5), 3);
    ck_assert_uint_eq(qs_dtype_bytes(QS_E2M1, 4), 2);
    ck_assert_uint_eq(qs_dtype_bytes(QS_BF16, 3), 6);
    ck_assert_uint_eq(qs_dtype_bytes(QS_FP64, 3), 24);
    ck_assert_uint_eq(qs_dtype_bytes(QS_E8M0, 7), 7);
    ck_assert_uint_eq(qs_dtype_bytes(QS_E2M3, 7), 7);
    ck_assert_uint_eq(qs_dtype_bytes(QS_I64, 2), 16);
    ck_assert_uint_eq(qs_dtype_bytes(QS_DTYPE_INVALID, 2), 0);
}
END_TEST

START_TEST(test_alloc_sets_row_major_strides_and_zero_fills)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    int64_t shape[3] = {2, 3, 5};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 3, shape), QS_OK);
    ck_assert_uint_eq(t.numel, 30);
    ck_assert_uint_eq(t.nbytes, 120);
    ck_assert_int_eq(t.strides[0], 15);
    ck_assert_int_eq(t.strides[1], 5);
    ck_assert_int_eq(t.strides[2], 1);
    const float *f = t.data;
    for (size_t i = 0; i < t.numel; i++)
        ck_assert_uint_eq(((const uint32_t *)(const void *)f)[i], 0);
    qs_tensor c;
    ((float *)t.data)[7] = 2.5f;
    ck_assert_int_eq(qs_tensor_clone(ctx, &c, &t), QS_OK);
    ck_assert(qs_tensor_same_layout(&c, &t));
    ck_assert_int_eq(memcmp(c.data, t.data, t.nbytes), 0);
    qs_tensor_free(&c);
    qs_tensor_free(&t);
    ck_assert_ptr_null(t.data);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_scalar_and_empty_tensors)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP64, 0, NULL), QS_OK);
    ck_assert_uint_eq(t.numel, 1);
    ck_assert_uint_eq(t.nbytes, 8);
    qs_tensor_free(&t);
    int64_t shape[2] = {4, 0};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_E2M1, 2, shape), QS_OK);
    ck_assert_uint_eq(t.numel, 0);
    ck_assert_uint_eq(t.nbytes, 0);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_alloc_rejects_bad_arguments_with_a_message)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 9, shape), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "ndim 9"));
    int64_t neg[2] = {3, -1};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 2, neg), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "shape[1]"));
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_DTYPE_INVALID, 1, shape), QS_ERR_INVALID_ARG);
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 3, huge), QS_ERR_SHAPE);
    ck_assert_ptr_null(t.data);
    /* empty, but its strides (the products of the other dimensions) would overflow: the
     * .npy header the fuzzer found, (109951, 16, 7776, 0, 99511627776) */
    int64_t empty_huge[5] = {109951, 16, 7776, 0, INT64_C(99511627776)};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 5, empty_huge), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "shape overflows: dimension 4"));
    ck_assert_ptr_null(t.data);
    int64_t empty_ok[3] = {1000, 0, 1000};
    ck_assert_int_eq(qs_tensor_alloc(ctx, &t, QS_FP32, 3, empty_ok), QS_OK);
    ck_assert_int_eq(t.numel, 0);
    ck_assert_int_eq(t.strides[0], 1000);
    qs_tensor_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_add_test(tc, test_dtype_names_round_trip);
    tcase_add_test(tc, test_dtype_sizes);
    tcase_add_test(tc, test_alloc_sets_row_major_strides_and_zero_fills);
    tcase_add_test(tc, test_scalar_and_empty_tensors);
    tcase_add_test(tc, test_alloc_rejects_bad_arguments_with_a_message);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
