/* test_kernels.c: the kernel table of a context (include/qspec/kernels.h, spec/cases.md
 * [CASE-KERNEL-TABLE]): a new context runs on the reference's table; an installed table's
 * slots are the ones the engine's layers call (counted here by a table that forwards to
 * the reference's); a missing slot is a refusal naming it; a table's slots past its
 * struct_size count as NULL; the delayed-scaling state stays with the caller. */
#include <stddef.h>
#include <string.h>

#include "qspec/kernels.h"
#include "qspec/linear.h"
#include "qspec/qspec.h"
#include "qstest.h"

/* A table that forwards every call to the reference's (its state is a context of its
 * own) and counts the calls; claim_fp32 makes its gemm claim FP32 accumulation. */
typedef struct counting {
    qs_ctx *ref;
    int quantize, gemm;
    float ds_scale;
    int claim_fp32;
} counting;

static qs_status count_quantize(void *state, const qs_quantize_args *a)
{
    counting *c = state;
    c->quantize++;
    c->ds_scale = a->ds_scale;
    return qs_ctx_backend(NULL)->quantize(c->ref, a);
}

static qs_status count_gemm(void *state, qs_gemm_args *a)
{
    counting *c = state;
    c->gemm++;
    qs_status s = qs_ctx_backend(NULL)->gemm(c->ref, a);
    if (s == QS_OK && c->claim_fp32)
        a->claim = QS_GEMM_CLAIM_FP32;
    return s;
}

static qs_backend counting_table(void)
{
    qs_backend t = *qs_ctx_backend(NULL);
    t.name = "counting";
    t.quantize = count_quantize;
    t.gemm = count_gemm;
    return t;
}

/* A 2-D BF16 tensor of small distinct values (exact in BF16). */
static void make_bf16(qs_tensor *t, int64_t rows, int64_t cols, int salt)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    for (size_t i = 0; i < t->numel; i++)
        ((uint16_t *)t->data)[i] =
            qs_f32_to_bf16((float)((int)((i * 7 + (size_t)salt) % 13) - 6) * 0.25f);
}

/* One linear forward of recipe kind on ctx: y; the quantized copies are freed. */
static qs_status linear_forward_once(qs_ctx *ctx, qs_recipe_kind kind, const qs_tensor *x,
                                     const qs_tensor *w, qs_tensor *y)
{
    qs_recipe_config cx, cw;
    qs_quantizer qx, qw;
    qs_quantized xq, wq;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cx, kind, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cw, kind, QS_ROLE_WEIGHT), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &qx, &cx), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &qw, &cw), QS_OK);
    qs_linear_options opt;
    qs_linear_options_default(&opt, kind);
    qs_status s = qs_linear_forward(ctx, &opt, &qx, &qw, x, w, y, &xq, &wq);
    if (s == QS_OK) {
        qs_quantized_free(&xq);
        qs_quantized_free(&wq);
    }
    qs_quantizer_free(&qx);
    qs_quantizer_free(&qw);
    return s;
}

START_TEST(test_new_context_runs_on_the_reference_table)
{
    qs_ctx *ctx = qs_ctx_new();
    const qs_backend *t = qs_ctx_backend(ctx);
    ck_assert_str_eq(t->name, "ref");
    ck_assert(t->quantize != NULL);
    ck_assert(t->gemm != NULL);
    ck_assert(t->sdpa_fwd != NULL);
    ck_assert(t->gdn_bwd != NULL);
    ck_assert(t->caps & QS_CAP_SDPA);
    ck_assert(t->caps & QS_CAP_GDN);
    ck_assert_int_eq(qs_ctx_gemm_claim(ctx), QS_GEMM_CLAIM_MODEL);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_installed_table_gets_the_linears_calls_and_gives_the_same_bits)
{
    qs_tensor x, w, y0, y1;
    make_bf16(&x, 4, 64, 1);
    make_bf16(&w, 3, 64, 5);
    qs_ctx *plain = qs_ctx_new(), *ctx = qs_ctx_new();
    counting c = {qs_ctx_new(), 0, 0, 0.0f, 0};
    qs_backend t = counting_table();
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, &c), QS_OK);
    ck_assert_str_eq(qs_ctx_backend(ctx)->name, "counting");
    ck_assert_int_eq(linear_forward_once(plain, QS_RECIPE_MXFP8, &x, &w, &y0), QS_OK);
    ck_assert_int_eq(linear_forward_once(ctx, QS_RECIPE_MXFP8, &x, &w, &y1), QS_OK);
    ck_assert_int_eq(c.quantize, 2); /* X and W */
    ck_assert_int_eq(c.gemm, 1);     /* fprop */
    ck_assert_int_eq(y0.nbytes, y1.nbytes);
    ck_assert_int_eq(memcmp(y0.data, y1.data, y0.nbytes), 0);
    /* the high-precision linear is one gemm call too, and NULL puts the reference back */
    qs_tensor yh;
    ck_assert_int_eq(qs_linear_hp_forward(ctx, &x, &w, &yh), QS_OK);
    ck_assert_int_eq(c.gemm, 2);
    ck_assert_int_eq(qs_ctx_set_backend(ctx, NULL, NULL), QS_OK);
    ck_assert_str_eq(qs_ctx_backend(ctx)->name, "ref");
    qs_tensor_free(&yh);
    ck_assert_int_eq(qs_linear_hp_forward(ctx, &x, &w, &yh), QS_OK);
    ck_assert_int_eq(c.gemm, 2);
    qs_tensor_free(&yh);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_tensor_free(&y0);
    qs_tensor_free(&y1);
    qs_ctx_free(plain);
    qs_ctx_free(ctx);
    qs_ctx_free(c.ref);
}
END_TEST

START_TEST(test_missing_gemm_slot_is_a_refusal_naming_it)
{
    qs_tensor x, w, y;
    make_bf16(&x, 2, 32, 2);
    make_bf16(&w, 2, 32, 3);
    qs_ctx *ctx = qs_ctx_new();
    counting c = {qs_ctx_new(), 0, 0, 0.0f, 0};
    qs_backend t = counting_table();
    t.gemm = NULL;
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, &c), QS_OK);
    ck_assert_int_eq(qs_linear_hp_forward(ctx, &x, &w, &y), QS_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "counting has no gemm slot"));
    /* a capability bit that is clear refuses too: no MXFP8 quantizer */
    t = counting_table();
    t.caps &= ~QS_CAP_QUANT_MXFP8;
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, &c), QS_OK);
    ck_assert_int_eq(linear_forward_once(ctx, QS_RECIPE_MXFP8, &x, &w, &y), QS_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "QS_CAP_QUANT_MXFP8"));
    ck_assert_int_eq(c.quantize, 0);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_ctx_free(ctx);
    qs_ctx_free(c.ref);
}
END_TEST

START_TEST(test_slots_past_struct_size_count_as_null_and_bad_tables_are_rejected)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_backend t = *qs_ctx_backend(NULL);                   /* every slot set */
    t.struct_size = (uint32_t)offsetof(qs_backend, cast16); /* built before the attention slots */
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, ctx), QS_OK);
    const qs_backend *got = qs_ctx_backend(ctx);
    ck_assert(got->gemm != NULL);
    ck_assert(got->cast16 == NULL);
    ck_assert(got->sdpa_fwd == NULL);
    ck_assert(got->sdpa_bwd == NULL);
    ck_assert(got->gdn_fwd == NULL);
    ck_assert(got->gdn_bwd == NULL);
    t = *qs_ctx_backend(NULL);
    t.abi_version = 2;
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, NULL), QS_ERR_ABI);
    t.abi_version = QS_BACKEND_ABI_VERSION;
    t.struct_size = 8;
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, NULL), QS_ERR_ABI);
    ck_assert_int_eq(qs_ctx_set_backend(NULL, &t, NULL), QS_ERR_INVALID_ARG);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_gemm_claims_fold_into_the_weakest_and_reset)
{
    qs_tensor x, w, y;
    make_bf16(&x, 2, 32, 4);
    make_bf16(&w, 2, 32, 6);
    qs_ctx *ctx = qs_ctx_new();
    counting c = {qs_ctx_new(), 0, 0, 0.0f, 1};
    qs_backend t = counting_table();
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, &c), QS_OK);
    ck_assert_int_eq(qs_ctx_gemm_claim(ctx), QS_GEMM_CLAIM_MODEL);
    ck_assert_int_eq(qs_linear_hp_forward(ctx, &x, &w, &y), QS_OK);
    ck_assert_int_eq(qs_ctx_gemm_claim(ctx), QS_GEMM_CLAIM_FP32);
    qs_ctx_gemm_claim_reset(ctx);
    ck_assert_int_eq(qs_ctx_gemm_claim(ctx), QS_GEMM_CLAIM_MODEL);
    qs_tensor_free(&y);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_ctx_free(ctx);
    qs_ctx_free(c.ref);
}
END_TEST

START_TEST(test_recipe_capability_names_the_bit_of_each_recipe)
{
    const char *name = NULL;
    ck_assert_uint_eq(qs_recipe_capability(QS_RECIPE_MXFP8, &name), QS_CAP_QUANT_MXFP8);
    ck_assert_str_eq(name, "QS_CAP_QUANT_MXFP8");
    ck_assert_uint_eq(qs_recipe_capability(QS_RECIPE_DELAYED, &name), QS_CAP_QUANT_DELAYED);
    ck_assert_str_eq(name, "QS_CAP_QUANT_DELAYED");
    /* both of torchao's axiswise recipes are one capability */
    ck_assert_uint_eq(qs_recipe_capability(QS_RECIPE_ROWWISE_GW_HP, &name), QS_CAP_QUANT_ROWWISE);
    ck_assert_str_eq(name, "QS_CAP_QUANT_ROWWISE");
    ck_assert_uint_eq(qs_recipe_capability(QS_RECIPE_NVFP4, NULL), QS_CAP_QUANT_NVFP4);
    ck_assert_uint_eq(qs_recipe_capability(QS_RECIPE_COUNT, &name), 0);
    ck_assert_str_eq(name, "");
}
END_TEST

START_TEST(test_delayed_state_stays_with_the_caller)
{
    /* [REC-DS-RECORD]: the slot gets the quantizer's scale and the amax it reports lands in
     * the caller's history slot 0. x holds values up to 1.5 (amax 1.5). */
    qs_tensor x, w, y;
    make_bf16(&x, 2, 32, 7);
    make_bf16(&w, 2, 32, 8);
    qs_ctx *ctx = qs_ctx_new();
    counting c = {qs_ctx_new(), 0, 0, 0.0f, 0};
    qs_backend t = counting_table();
    ck_assert_int_eq(qs_ctx_set_backend(ctx, &t, &c), QS_OK);
    qs_recipe_config cx, cw;
    qs_quantizer qx, qw;
    qs_quantized xq, wq;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cx, QS_RECIPE_DELAYED, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cw, QS_RECIPE_DELAYED, QS_ROLE_WEIGHT), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &qx, &cx), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &qw, &cw), QS_OK);
    qx.ds.scale = 4.0f;
    qw.ds.scale = 4.0f;
    qs_linear_options opt;
    qs_linear_options_default(&opt, QS_RECIPE_DELAYED);
    opt.acc[QS_LINEAR_FPROP] = (qs_gemm_acc){QS_GEMM_ACC_FP32_SEQ, 0};
    ck_assert_int_eq(qs_linear_forward(ctx, &opt, &qx, &qw, &x, &w, &y, &xq, &wq), QS_OK);
    ck_assert(c.ds_scale == 4.0f);
    ck_assert(qx.ds.history[0] == 1.5f);
    ck_assert(xq.global_dec[QS_DIR_ROW] == 0.25f); /* scale_inv = 1/4 */
    qs_quantized_free(&xq);
    qs_quantized_free(&wq);
    qs_quantizer_free(&qx);
    qs_quantizer_free(&qw);
    qs_tensor_free(&y);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_ctx_free(ctx);
    qs_ctx_free(c.ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_new_context_runs_on_the_reference_table);
    tcase_add_test(tc, test_recipe_capability_names_the_bit_of_each_recipe);
    tcase_add_test(tc, test_installed_table_gets_the_linears_calls_and_gives_the_same_bits);
    tcase_add_test(tc, test_missing_gemm_slot_is_a_refusal_naming_it);
    tcase_add_test(tc, test_slots_past_struct_size_count_as_null_and_bad_tables_are_rejected);
    tcase_add_test(tc, test_gemm_claims_fold_into_the_weakest_and_reset);
    tcase_add_test(tc, test_delayed_state_stays_with_the_caller);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
