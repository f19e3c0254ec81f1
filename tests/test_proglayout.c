/* test_proglayout.c: the layouts of a program's framework outputs derived without running it
 * (spec/cases.md [CASE-VERIFY-SELF], conformance/proglayout.c) — the names, dtypes and
 * shapes the reference's run gives on every default-tier program case of the shipped suites,
 * and on a program written here, values typed in by hand; the production-size framework
 * cases, which no test runs on the reference, get the layouts their sizes make. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "ops.h"
#include "program.h"
#include "qstest.h"
#include "suite.h"

static int is_trace(const char *name)
{
    size_t n = strlen(name);
    return n > 6 && strcmp(name + n - 6, "/trace") == 0;
}

/* The layouts of c equal the reference's framework outputs: the same names in the same
 * order, each (but the trace, whose length is the run's) of the same dtype and shape.
 * Returns the number of tensors compared. */
static int expect_layouts_of_reference(qs_ctx *ctx, const qsk_case *c)
{
    qs_tensor in[32];
    ck_assert_uint_le(c->ninputs, 32);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_msg(qsk_input_generate(ctx, &c->inputs[i], &in[i]) == QS_OK, "%s: %s", c->id,
                      qs_ctx_errmsg(ctx));
    qsk_results ref, lay;
    memset(&ref, 0, sizeof ref);
    memset(&lay, 0, sizeof lay);
    ck_assert_msg(qsk_program_framework_ref(ctx, c, in, &ref) == QS_OK, "%s: %s", c->id,
                  qs_ctx_errmsg(ctx));
    ck_assert_msg(qsk_program_framework_layouts(ctx, c, &lay) == QS_OK, "%s: %s", c->id,
                  qs_ctx_errmsg(ctx));
    ck_assert_msg(lay.n == ref.n, "%s: %zu layouts, the reference gives %zu outputs", c->id, lay.n,
                  ref.n);
    int compared = 0;
    for (size_t i = 0; i < ref.n; i++) {
        ck_assert_msg(strcmp(lay.names[i], ref.names[i]) == 0, "%s: output %zu is %s, not %s",
                      c->id, i, lay.names[i], ref.names[i]);
        ck_assert_ptr_null(lay.t[i].data);
        if (is_trace(ref.names[i]))
            continue;
        ck_assert_msg(qs_tensor_same_layout(&lay.t[i], &ref.t[i]),
                      "%s: %s is %s %d-D [%lld, ...], the reference's %s %d-D [%lld, ...]", c->id,
                      ref.names[i], qs_dtype_name(lay.t[i].dtype), lay.t[i].ndim,
                      (long long)lay.t[i].shape[0], qs_dtype_name(ref.t[i].dtype), ref.t[i].ndim,
                      (long long)ref.t[i].shape[0]);
        ck_assert_uint_eq(lay.t[i].numel, ref.t[i].numel);
        ck_assert_uint_eq(lay.t[i].nbytes, ref.t[i].nbytes);
        compared++;
    }
    qsk_results_free(&lay);
    qsk_results_free(&ref);
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    return compared;
}

START_TEST(test_layouts_are_the_references_on_every_shipped_program_case)
{
    char cases[4096], fw[4096];
    snprintf(cases, sizeof cases, "%s/conformance/cases", QS_TEST_SRCDIR);
    snprintf(fw, sizeof fw, "%s/conformance/framework", QS_TEST_SRCDIR);
    char *paths[2] = {cases, fw};
    qs_ctx *ctx = qs_ctx_new();
    qsk_suite s;
    ck_assert_int_eq(qsk_suite_load(ctx, 2, paths, &s), QS_OK);
    ck_assert_msg(s.nerrors == 0, "%s", s.nerrors ? s.errors[0] : "");
    int ncases = 0, ntensors = 0, ngelu_first = 0, nfp16 = 0;
    for (size_t f = 0; f < s.nfiles; f++)
        for (size_t k = 0; k < s.files[f].ncases; k++) {
            const qsk_case *c = &s.files[f].cases[k];
            if (strcmp(c->op, "program") != 0 || c->tier != QSK_TIER_DEFAULT)
                continue;
            ncases++;
            ntensors += expect_layouts_of_reference(ctx, c);
            ngelu_first += strstr(c->id, "gelu") != NULL;
            nfp16 += strstr(c->id, "fp16") != NULL;
        }
    /* the suites hold linears, gelu, gdn and mla ops, bf16 and fp16 programs */
    ck_assert_int_ge(ncases, 100);
    ck_assert_int_ge(ntensors, 1000);
    ck_assert_int_gt(nfp16, 0);
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
}
END_TEST

static const char *const by_hand =
    "qspec: 1\n"
    "cases:\n"
    "  - id: p\n"
    "    rules: [CASE-VERIFY-SELF]\n"
    "    op: program\n"
    "    inputs:\n"
    "      x: {dtype: fp16, shape: [32, 16], uniform: {lo: -2, hi: 2}, seed: 1}\n"
    "      dy: {dtype: bf16, shape: [32, 48], uniform: {lo: -1, hi: 1}, seed: 2}\n"
    "      w1: {dtype: bf16, shape: [48, 16], uniform: {lo: -0.3, hi: 0.3}, seed: 3}\n"
    "      g: {dtype: fp32, shape: [32, 2], uniform: {lo: -0.1, hi: -0.02}, seed: 4}\n"
    "      beta: {dtype: fp32, shape: [32, 2], uniform: {lo: 0.2, hi: 0.5}, seed: 5}\n"
    "    program:\n"
    "      - island:\n"
    "          - gelu: {name: act}\n"
    "          - gdn: {name: mix, g: g, beta: beta, heads: 2, unless: nogdn}\n"
    "      - autocast:\n"
    "          when: q\n"
    "          recipe: current\n"
    "          body: [{linear: {name: lin, w: w1}}]\n"
    "      - backward: {dy: dy, unless: fwd}\n"
    "    variants:\n"
    "      - {name: a, tags: [q]}\n"
    "      - {name: b, tags: [nogdn], same_as: {variant: a, outputs: [y]}}\n"
    "      - {name: c, tags: [fwd], differs_from: {variant: a, outputs: [y]}}\n"
    "      - {name: d, inject_error: {at: gelu_forward}}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n";

static void expect_layout(const qsk_results *r, size_t i, const char *name, qs_dtype dt, int ndim,
                          int64_t d0, int64_t d1)
{
    ck_assert_uint_gt(r->n, i);
    ck_assert_str_eq(r->names[i], name);
    ck_assert_str_eq(qs_dtype_name(r->t[i].dtype), qs_dtype_name(dt));
    ck_assert_int_eq(r->t[i].ndim, ndim);
    ck_assert_int_eq(r->t[i].shape[0], d0);
    if (ndim > 1)
        ck_assert_int_eq(r->t[i].shape[1], d1);
}

/* A gelu first leaves dx in the input's fp16; a linear makes y [rows, n] BF16; a gdn's
 * gradient is [2, rows * heads] FP32, a gelu has none; a variant without the backward has y
 * and its trace only, an op left out has no gradient, and a variant no framework runs has
 * nothing. */
START_TEST(test_layouts_follow_the_program_by_hand)
{
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(qsk_case_file_parse(ctx, "t.yaml", by_hand, strlen(by_hand), qsk_rule_defined,
                                      NULL, &f) == QS_OK,
                  "%s", qs_ctx_errmsg(ctx));
    qsk_results lay;
    memset(&lay, 0, sizeof lay);
    ck_assert_int_eq(qsk_program_framework_layouts(ctx, &f.cases[0], &lay), QS_OK);
    ck_assert_uint_eq(lay.n, 5 + 4 + 2);
    expect_layout(&lay, 0, "a/y", QS_BF16, 2, 32, 48);
    expect_layout(&lay, 1, "a/dx", QS_FP16, 2, 32, 16);
    expect_layout(&lay, 2, "a/trace", QS_U8, 1, 0, 0);
    expect_layout(&lay, 3, "a/grad.mix", QS_FP32, 2, 2, 64);
    expect_layout(&lay, 4, "a/grad.lin", QS_BF16, 2, 48, 16);
    /* b: the autocast left out is transparent, its linear runs in high precision */
    expect_layout(&lay, 5, "b/y", QS_BF16, 2, 32, 48);
    expect_layout(&lay, 6, "b/dx", QS_FP16, 2, 32, 16);
    expect_layout(&lay, 7, "b/trace", QS_U8, 1, 0, 0);
    expect_layout(&lay, 8, "b/grad.lin", QS_BF16, 2, 48, 16);
    expect_layout(&lay, 9, "c/y", QS_BF16, 2, 32, 48);
    expect_layout(&lay, 10, "c/trace", QS_U8, 1, 0, 0);
    ck_assert_uint_eq(lay.t[4].numel, 48 * 16);
    ck_assert_uint_eq(lay.t[4].nbytes, 48 * 16 * 2);
    qsk_results_free(&lay);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
}
END_TEST

/* The production-size MLP blocks of the framework suite [CASE-VERIFY-SELF]: 4096 tokens,
 * 2048 -> 8192 -> 2048; y and dx [4096, 2048] BF16, grad.up [8192, 2048], grad.down
 * [2048, 8192] for each of eager, ckpt and hp. */
START_TEST(test_layouts_of_the_large_framework_cases_are_their_sizes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/conformance/framework/large", QS_TEST_SRCDIR);
    char *paths[1] = {path};
    qs_ctx *ctx = qs_ctx_new();
    qsk_suite s;
    ck_assert_int_eq(qsk_suite_load(ctx, 1, paths, &s), QS_OK);
    ck_assert_msg(s.nerrors == 0, "%s", s.nerrors ? s.errors[0] : "");
    int n = 0;
    for (size_t f = 0; f < s.nfiles; f++)
        for (size_t k = 0; k < s.files[f].ncases; k++) {
            const qsk_case *c = &s.files[f].cases[k];
            if (strncmp(c->id, "fw.large.mlp.", 13) != 0)
                continue;
            ck_assert_int_eq(c->self_only, 1);
            ck_assert_int_eq(c->tier, QSK_TIER_LARGE);
            qsk_results lay;
            memset(&lay, 0, sizeof lay);
            ck_assert_int_eq(qsk_program_framework_layouts(ctx, c, &lay), QS_OK);
            ck_assert_uint_eq(lay.n, 3 * 5);
            static const char *const vs[] = {"eager", "ckpt", "hp"};
            for (int v = 0; v < 3; v++) {
                char name[64];
                snprintf(name, sizeof name, "%s/y", vs[v]);
                expect_layout(&lay, 5 * v, name, QS_BF16, 2, 4096, 2048);
                snprintf(name, sizeof name, "%s/dx", vs[v]);
                expect_layout(&lay, 5 * v + 1, name, QS_BF16, 2, 4096, 2048);
                snprintf(name, sizeof name, "%s/grad.up", vs[v]);
                expect_layout(&lay, 5 * v + 3, name, QS_BF16, 2, 8192, 2048);
                snprintf(name, sizeof name, "%s/grad.down", vs[v]);
                expect_layout(&lay, 5 * v + 4, name, QS_BF16, 2, 2048, 8192);
            }
            qsk_results_free(&lay);
            n++;
        }
    ck_assert_int_eq(n, 3); /* tensorwise, rowwise, rowwise_with_gw_hp */
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proglayout");
    TCase *tc = tcase_create("proglayout");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_layouts_are_the_references_on_every_shipped_program_case);
    tcase_add_test(tc, test_layouts_follow_the_program_by_hand);
    tcase_add_test(tc, test_layouts_of_the_large_framework_cases_are_their_sizes);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
