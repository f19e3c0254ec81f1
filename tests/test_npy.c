/* test_npy.c: placeholder, being written. */
#include "qstest.h"

START_TEST(test_placeholder_npy)
{
    ck_assert_int_eq(1, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("npy");
    tcase_add_test(tc, test_placeholder_npy);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
