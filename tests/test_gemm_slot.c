/* test_gemm_slot.c: the gemm slot of the backend ABI as the kit drives it (spec/cases.md
 * [CASE-OP-GEMM] [CASE-GEMM-CLAIM] [CASE-BACKEND-UNSUPPORTED]): a table without the slot
 * (built before it was appended) loads and its gemm cases are not supported; the operands
 * reach the slot as the codes and scales of the ABI; the claim decides what a bitwise
 * comparison means, with the measured deviation as the reason; errors and bad claims are
 * reported; and the op's schema errors. A fake backend inside the test computes through
 * libqspec (a test may; a plugin never links it). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cases.h"
#include "compare.h"
#include "ops.h"
#include "plugin.h"
#include "qspec/qspec.h"
#include "qstest.h"

/* ------------------------------------------------------------ a fake backend */

static struct {
    qs_gemm_claim claim; /* what the fake claims */
    int perturb;         /* add one ulp to element 0 */
    qs_status fail;      /* answer this instead (QS_OK: compute) */
    int calls;
    qs_gemm_scaling seen_scaling[2];
    qs_dtype seen_data[2], seen_scale[2];
    int64_t seen_scale_shape[2][2];
    float seen_tensor_scale[2];
    qs_gemm_acc seen_acc;
} fake;

static float code_value(const qs_tensor *t, size_t i)
{
    if (t->dtype == QS_FP32)
        return ((const float *)t->data)[i];
    if (t->dtype == QS_BF16)
        return qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == QS_E2M1)
        return qs_decode_f32(QS_E2M1, (((const uint8_t *)t->data)[i / 2] >> (4 * (i % 2))) & 0xF);
    return qs_decode_f32(t->dtype, ((const uint8_t *)t->data)[i]);
}

/* Decoded values and per-row group scales of a coded operand, as qs_gemm reads them. */
static void decode(const qs_gemm_coded_operand *c, int64_t rows, int64_t k, float **v, float **s,
                   qs_gemm_operand *op)
{
    *v = malloc((size_t)(rows * k) * sizeof **v);
    for (size_t i = 0; i < (size_t)(rows * k); i++)
        (*v)[i] = code_value(c->data, i);
    *s = NULL;
    op->data = *v;
    op->scaling = c->scaling;
    op->tensor_scale = c->tensor_scale;
    op->block_scale = NULL;
    if (c->scale) {
        *s = malloc(c->scale->numel * sizeof **s);
        for (size_t i = 0; i < c->scale->numel; i++)
            (*s)[i] = code_value(c->scale, i);
        op->block_scale = *s;
    }
}

static qs_status fake_gemm(void *state, qs_gemm_args *g)
{
    (void)state;
    fake.calls++;
    const qs_gemm_coded_operand *ops[2] = {&g->a, &g->b};
    for (int i = 0; i < 2; i++) {
        fake.seen_scaling[i] = ops[i]->scaling;
        fake.seen_data[i] = ops[i]->data->dtype;
        fake.seen_scale[i] = ops[i]->scale ? ops[i]->scale->dtype : QS_DTYPE_INVALID;
        fake.seen_scale_shape[i][0] = ops[i]->scale ? ops[i]->scale->shape[0] : 0;
        fake.seen_scale_shape[i][1] = ops[i]->scale ? ops[i]->scale->shape[1] : 0;
        fake.seen_tensor_scale[i] = ops[i]->tensor_scale;
    }
    fake.seen_acc = g->acc;
    if (fake.fail != QS_OK) {
        snprintf(g->why, g->why_len, "fake refuses");
        return fake.fail;
    }
    float *va, *sa, *vb, *sb;
    qs_gemm_operand a, b;
    decode(&g->a, g->m, g->k, &va, &sa, &a);
    decode(&g->b, g->n, g->k, &vb, &sb, &b);
    qs_gemm_params p = {g->m, g->n, g->k, g->alpha, 0.0f, g->acc, g->out_dtype};
    float *y = malloc((size_t)(g->m * g->n) * sizeof *y);
    qs_status st = qs_gemm(NULL, &p, &a, &b, NULL, y);
    for (size_t i = 0; st == QS_OK && i < (size_t)(g->m * g->n); i++) {
        float v = y[i];
        if (i == 0 && fake.perturb)
            v = nextafterf(v, INFINITY);
        if (g->out_dtype == QS_BF16)
            ((uint16_t *)g->y->data)[i] = qs_f32_to_bf16(v);
        else
            ((float *)g->y->data)[i] = v;
    }
    free(va);
    free(sa);
    free(vb);
    free(sb);
    free(y);
    g->claim = fake.claim;
    return st;
}

static qs_backend fake_table;

static qsk_plugin fake_plugin(uint64_t caps)
{
    memset(&fake_table, 0, sizeof fake_table);
    fake_table.abi_version = QS_BACKEND_ABI_VERSION;
    fake_table.struct_size = sizeof(qs_backend);
    fake_table.name = "fake";
    fake_table.caps = caps;
    fake_table.gemm = fake_gemm;
    qsk_plugin p;
    memset(&p, 0, sizeof p);
    p.table = &fake_table;
    p.usable = 1;
    return p;
}

static void fake_reset(qs_gemm_claim claim, int perturb)
{
    memset(&fake, 0, sizeof fake);
    fake.claim = claim;
    fake.perturb = perturb;
}

/* ------------------------------------------------------------ cases */

static const char cases_text[] =
    "qspec: 1\n"
    "cases:\n"
    "  - id: bits\n"
    "    rules: [CASE-GEMM-CLAIM]\n"
    "    op: gemm\n"
    "    params: {operands: e4m3, acc: fp32_seq, out: fp32}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [8, 64], normal: {mean: 0, std: 2}, seed: 1}\n"
    "      b: {dtype: fp32, shape: [6, 64], normal: {mean: 0, std: 1}, seed: 2}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n"
    "  - id: bound\n"
    "    rules: [CASE-GEMM-CLAIM]\n"
    "    op: gemm\n"
    "    params: {operands: e4m3, acc: fp32_seq, out: fp32}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [8, 64], normal: {mean: 0, std: 2}, seed: 1}\n"
    "      b: {dtype: fp32, shape: [6, 64], normal: {mean: 0, std: 1}, seed: 2}\n"
    "    outputs:\n"
    "      y: {compare: {gemm_bound: 1}, digest: pending}\n"
    "  - id: mx\n"
    "    rules: [CASE-OP-GEMM]\n"
    "    op: gemm\n"
    "    params: {recipe: mxfp8, acc: exact, out: bf16}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [4, 80], normal: {mean: 0, std: 2}, seed: 3}\n"
    "      b: {dtype: fp32, shape: [3, 80], normal: {mean: 0, std: 1}, seed: 4}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n"
    "  - id: nv\n"
    "    rules: [CASE-OP-GEMM]\n"
    "    op: gemm\n"
    "    params: {recipe: nvfp4, acc: fp32_seq, out: bf16}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [4, 48], normal: {mean: 0, std: 2}, seed: 5}\n"
    "      b: {dtype: fp32, shape: [20, 48], normal: {mean: 0, std: 1}, seed: 6}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n"
    "  - id: blk\n"
    "    rules: [CASE-OP-GEMM]\n"
    "    op: gemm\n"
    "    params: {recipe: block, acc: hopper_fp8_tc, promote_every: 128, out: fp32}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [4, 300], normal: {mean: 0, std: 2}, seed: 7}\n"
    "      b: {dtype: fp32, shape: [130, 300], normal: {mean: 0, std: 1}, seed: 8}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n"
    "  - id: cur\n"
    "    rules: [CASE-OP-GEMM]\n"
    "    op: gemm\n"
    "    params: {recipe: current, a_role: grad_output, acc: hopper_fp8_tc, out: fp32}\n"
    "    inputs:\n"
    "      a: {dtype: fp32, shape: [4, 64], normal: {mean: 0, std: 2}, seed: 9}\n"
    "      b: {dtype: fp32, shape: [5, 64], normal: {mean: 0, std: 1}, seed: 10}\n"
    "    outputs:\n"
    "      y: {compare: bitwise, digest: pending}\n";

typedef struct loaded {
    qs_ctx *ctx;
    qsk_case_file f;
} loaded;

static void load(loaded *l)
{
    l->ctx = qs_ctx_new();
    ck_assert_int_eq(
        qsk_case_file_parse(l->ctx, "slot.yaml", cases_text, strlen(cases_text), NULL, NULL, &l->f),
        QS_OK);
    for (size_t i = 0; i < l->f.ncases; i++)
        ck_assert_msg(qsk_case_check(l->ctx, &l->f.cases[i]) == QS_OK, "%s", qs_ctx_errmsg(l->ctx));
}

static void unload(loaded *l)
{
    qsk_case_file_free(&l->f);
    qs_ctx_free(l->ctx);
}

static const qsk_case *find(const loaded *l, const char *id)
{
    for (size_t i = 0; i < l->f.ncases; i++)
        if (strcmp(l->f.cases[i].id, id) == 0)
            return &l->f.cases[i];
    ck_abort_msg("no case %s", id);
    return NULL;
}

/* Runs case id on the reference and on plugin p; returns the backend's status. */
static qs_status run(const loaded *l, const char *id, const qsk_plugin *p, qsk_results *ref,
                     qsk_results *got)
{
    const qsk_case *c = find(l, id);
    const qsk_op *op = qsk_op_find("gemm");
    qs_tensor in[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(qsk_input_generate(l->ctx, &c->inputs[i], &in[i]), QS_OK);
    memset(ref, 0, sizeof *ref);
    memset(got, 0, sizeof *got);
    ck_assert_msg(op->run_ref(l->ctx, c, in, ref) == QS_OK, "%s", qs_ctx_errmsg(l->ctx));
    qs_ctx_clear_error(l->ctx);
    qs_status st = op->run_backend(l->ctx, p, c, in, ref, got);
    for (int i = 0; i < 2; i++)
        qs_tensor_free(&in[i]);
    return st;
}

static int agrees(const loaded *l, const char *id, const qsk_results *ref, const qsk_results *got,
                  qsk_cmp_result *r)
{
    const qsk_case *c = find(l, id);
    return qsk_compare(&c->outputs[0], qsk_results_get(ref, "y"), qsk_results_get(got, "y"),
                       qsk_results_get(ref, "y.bound"), r);
}

static void assert_msg_has(const loaded *l, const char *text)
{
    ck_assert_msg(strstr(qs_ctx_errmsg(l->ctx), text) != NULL, "message '%s' lacks '%s'",
                  qs_ctx_errmsg(l->ctx), text);
}

/* ------------------------------------------------------------ tests */

/* [CASE-BACKEND-UNSUPPORTED]: a table that ends before the slot loads; the slot is absent */
START_TEST(test_table_without_the_slot_loads_and_is_not_supported)
{
    ck_assert_uint_eq(QS_BACKEND_V1_MIN_SIZE, offsetof(qs_backend, gemm));
    ck_assert(!QS_BACKEND_HAS_SLOT(QS_BACKEND_V1_MIN_SIZE, gemm));
    ck_assert(QS_BACKEND_HAS_SLOT(sizeof(qs_backend), gemm));
    ck_assert(QS_BACKEND_HAS_SLOT(QS_BACKEND_V1_MIN_SIZE, dequantize));
    loaded l;
    load(&l);
    qsk_plugin p;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/.libs/libqstest-oldabi.so", QS_TEST_BUILDDIR);
    ck_assert_msg(qsk_plugin_load(l.ctx, path, &p) == QS_OK, "%s", qs_ctx_errmsg(l.ctx));
    ck_assert(p.usable);
    ck_assert_uint_eq(p.table->struct_size, QS_BACKEND_V1_MIN_SIZE);
    ck_assert_str_eq(p.table->name, "oldabi");
    ck_assert(p.table->gemm == NULL); /* the copy holds NULL, not the word after the table */
    qsk_results ref, got;
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_UNSUPPORTED);
    ck_assert_uint_eq(got.n, 0);
    qsk_results_free(&ref);
    qsk_plugin_unload(&p);
    unload(&l);
}
END_TEST

/* [CASE-GEMM-CLAIM]: a backend claiming the model is compared bitwise, and a deviation fails */
START_TEST(test_model_claim_is_compared_bitwise)
{
    loaded l;
    load(&l);
    qsk_plugin p = fake_plugin(QS_CAP_GEMM_TENSOR);
    qsk_results ref, got;
    qsk_cmp_result r;
    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_OK);
    ck_assert_int_eq(fake.calls, 1);
    ck_assert_int_eq(fake.seen_scaling[0], QS_GEMM_SCALE_TENSOR);
    ck_assert_int_eq(fake.seen_data[0], QS_E4M3);
    ck_assert_ptr_nonnull(qsk_results_get(&got, "y"));
    ck_assert(agrees(&l, "bits", &ref, &got, &r));
    qsk_results_free(&ref);
    qsk_results_free(&got);
    fake_reset(QS_GEMM_CLAIM_MODEL, 1);
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_OK);
    ck_assert(!agrees(&l, "bits", &ref, &got, &r));
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_uint_eq(r.first, 0);
    qsk_results_free(&ref);
    qsk_results_free(&got);
    unload(&l);
}
END_TEST

/* [CASE-GEMM-CLAIM]: another claim on a bitwise case is not supported, with the deviation */
START_TEST(test_other_claim_on_a_bitwise_case_reports_the_deviation)
{
    loaded l;
    load(&l);
    qsk_plugin p = fake_plugin(QS_CAP_GEMM_TENSOR);
    qsk_results ref, got;
    fake_reset(QS_GEMM_CLAIM_FP32, 0);
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_UNSUPPORTED);
    ck_assert_uint_eq(got.n, 0);
    assert_msg_has(&l, "backend fake claims FP32 accumulation, not fp32_seq bit for bit: 48 of "
                       "48 elements bitwise equal, at most 0 ulp (fp32) apart");
    qsk_results_free(&ref);
    fake_reset(QS_GEMM_CLAIM_HOPPER_TC, 1);
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_UNSUPPORTED);
    ck_assert_uint_eq(got.n, 0);
    assert_msg_has(&l, "claims Hopper FP8 tensor cores, not fp32_seq bit for bit: 47 of 48 "
                       "elements bitwise equal, at most 1 ulp (fp32) apart");
    qsk_results_free(&ref);
    unload(&l);
}
END_TEST

/* [CASE-GEMM-CLAIM] [CASE-CMP-GEMM-BOUND]: a tolerance holds whatever the claim */
START_TEST(test_tolerance_case_runs_for_any_claim)
{
    loaded l;
    load(&l);
    qsk_plugin p = fake_plugin(QS_CAP_GEMM_TENSOR);
    qsk_results ref, got;
    qsk_cmp_result r;
    fake_reset(QS_GEMM_CLAIM_FP32, 1);
    ck_assert_int_eq(run(&l, "bound", &p, &ref, &got), QS_OK);
    ck_assert(agrees(&l, "bound", &ref, &got, &r));
    /* the bound is B + |y - y_exact|: positive, and above the one-ulp perturbation */
    const qs_tensor *b = qsk_results_get(&ref, "y.bound");
    const qs_tensor *y = qsk_results_get(&ref, "y");
    ck_assert(((const double *)b->data)[0] > 0);
    float y0 = ((const float *)y->data)[0];
    ck_assert(((const double *)b->data)[0] >= fabs((double)nextafterf(y0, INFINITY) - y0));
    qsk_results_free(&ref);
    qsk_results_free(&got);
    unload(&l);
}
END_TEST

/* [CASE-BACKEND-UNSUPPORTED]: caps, refusals, failures and claims that do not exist */
START_TEST(test_caps_refusals_failures)
{
    loaded l;
    load(&l);
    qsk_results ref, got;
    qsk_plugin p = fake_plugin(QS_CAP_GEMM_MX);
    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_UNSUPPORTED);
    ck_assert_int_eq(fake.calls, 0); /* no GEMM_TENSOR bit: the slot is not called */
    qsk_results_free(&ref);
    p = fake_plugin(QS_CAP_GEMM_TENSOR);
    fake.fail = QS_ERR_UNSUPPORTED;
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_UNSUPPORTED);
    ck_assert_uint_eq(got.n, 0);
    assert_msg_has(&l, "fake refuses");
    qsk_results_free(&ref);
    fake.fail = QS_ERR_INTERNAL;
    ck_assert_int_eq(run(&l, "bits", &p, &ref, &got), QS_ERR_INTERNAL);
    assert_msg_has(&l, "backend fake: gemm failed: ");
    assert_msg_has(&l, ": fake refuses");
    qsk_results_free(&ref);
    fake_reset((qs_gemm_claim)7, 0);
    ck_assert_int_eq(run(&l, "bound", &p, &ref, &got), QS_ERR_ABI);
    assert_msg_has(&l, "unknown claim 7");
    qsk_results_free(&ref);
    qsk_results_free(&got);
    unload(&l);
}
END_TEST

/* [CASE-OP-GEMM]: recipe operands reach the slot as codes and scales in the ABI's layout */
START_TEST(test_recipe_operands_reach_the_slot_as_codes_and_scales)
{
    loaded l;
    load(&l);
    qsk_results ref, got;
    qsk_cmp_result r;
    qsk_plugin p =
        fake_plugin(QS_CAP_GEMM_TENSOR | QS_CAP_GEMM_BLOCK | QS_CAP_GEMM_MX | QS_CAP_GEMM_NVFP4);
    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "mx", &p, &ref, &got), QS_OK);
    ck_assert_int_eq(fake.seen_scaling[0], QS_GEMM_SCALE_MX);
    ck_assert_int_eq(fake.seen_data[0], QS_E4M3);
    ck_assert_int_eq(fake.seen_scale[0], QS_E8M0);
    ck_assert_int_eq(fake.seen_scale_shape[0][0], 4);
    ck_assert_int_eq(fake.seen_scale_shape[0][1], 3); /* ceil(80/32) */
    ck_assert_int_eq(fake.seen_scale_shape[1][0], 3);
    ck_assert(agrees(&l, "mx", &ref, &got, &r)); /* the same product as the reference's views */
    qsk_results_free(&ref);
    qsk_results_free(&got);

    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "nv", &p, &ref, &got), QS_OK);
    ck_assert_int_eq(fake.seen_scaling[1], QS_GEMM_SCALE_NVFP4);
    ck_assert_int_eq(fake.seen_data[1], QS_E2M1);
    ck_assert_int_eq(fake.seen_scale[1], QS_E4M3);
    ck_assert_int_eq(fake.seen_scale_shape[1][0], 20); /* 16x16 tiles repeated on each row */
    ck_assert_int_eq(fake.seen_scale_shape[1][1], 3);
    ck_assert(fake.seen_tensor_scale[0] != 1.0f && fake.seen_tensor_scale[0] > 0);
    ck_assert(agrees(&l, "nv", &ref, &got, &r));
    qsk_results_free(&ref);
    qsk_results_free(&got);

    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "blk", &p, &ref, &got), QS_OK);
    ck_assert_int_eq(fake.seen_scaling[0], QS_GEMM_SCALE_BLOCK_1X128);
    ck_assert_int_eq(fake.seen_scale_shape[0][0], 4);
    ck_assert_int_eq(fake.seen_scale_shape[0][1], 3); /* ceil(300/128) */
    ck_assert_int_eq(fake.seen_scaling[1], QS_GEMM_SCALE_BLOCK_128X128);
    ck_assert_int_eq(fake.seen_scale[1], QS_FP32);
    ck_assert_int_eq(fake.seen_scale_shape[1][0], 2); /* ceil(130/128) */
    ck_assert_int_eq(fake.seen_scale_shape[1][1], 3);
    ck_assert_int_eq(fake.seen_acc.kind, QS_GEMM_ACC_HOPPER_FP8_TC);
    ck_assert_int_eq(fake.seen_acc.promote_every, 128);
    ck_assert(agrees(&l, "blk", &ref, &got, &r));
    qsk_results_free(&ref);
    qsk_results_free(&got);

    fake_reset(QS_GEMM_CLAIM_MODEL, 0);
    ck_assert_int_eq(run(&l, "cur", &p, &ref, &got), QS_OK);
    ck_assert_int_eq(fake.seen_scaling[0], QS_GEMM_SCALE_TENSOR);
    ck_assert_int_eq(fake.seen_data[0], QS_E5M2); /* grad_output under HYBRID */
    ck_assert_int_eq(fake.seen_data[1], QS_E4M3);
    ck_assert(fake.seen_tensor_scale[0] != 1.0f && fake.seen_tensor_scale[1] != 1.0f);
    ck_assert(agrees(&l, "cur", &ref, &got, &r));
    qsk_results_free(&ref);
    qsk_results_free(&got);
    unload(&l);
}
END_TEST

static qs_status check_one(qs_ctx *ctx, const char *params)
{
    char text[1024];
    snprintf(text, sizeof text,
             "qspec: 1\ncases:\n  - id: x\n    rules: [CASE-OP-GEMM]\n    op: gemm\n"
             "    params: {%s}\n    inputs:\n"
             "      a: {dtype: fp32, shape: [2, 32], values: [1]}\n"
             "      b: {dtype: fp32, shape: [2, 32], values: [1]}\n"
             "    outputs:\n      y: {compare: bitwise, digest: pending}\n",
             params);
    qsk_case_file f;
    qs_status st = qsk_case_file_parse(ctx, "x.yaml", text, strlen(text), NULL, NULL, &f);
    if (st == QS_OK)
        st = qsk_case_check(ctx, &f.cases[0]);
    qsk_case_file_free(&f);
    return st;
}

/* [CASE-OP-GEMM] [CASE-SCHEMA-ERRORS]: the recipe parameters' errors */
START_TEST(test_recipe_parameters_are_checked)
{
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(check_one(ctx, "recipe: block, acc: hopper_fp8_tc, promote_every: 128"),
                     QS_OK);
    ck_assert_int_eq(check_one(ctx, "recipe: mxfp8, operands: e4m3"), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "x.yaml:5:9: 'operands' and 'recipe'"));
    ck_assert_int_eq(check_one(ctx, "recipe: nvfp4, acc: hopper_fp8_tc"), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "hopper_fp8_tc has no model for nvfp4"));
    ck_assert_int_eq(check_one(ctx, "operands: e4m3, a_role: weight"), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(
        strstr(qs_ctx_errmsg(ctx), "'a_role', 'b_role' and 'pow2' need a 'recipe'"));
    ck_assert_int_eq(check_one(ctx, "operands: e4m3, pow2: 0"), QS_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'pow2' need a 'recipe'"));
    ck_assert_int_eq(check_one(ctx, "recipe: block, pow2: 0, acc: hopper_fp8_tc"), QS_OK);
    ck_assert_int_eq(check_one(ctx, "recipe: mxfp8, pow2: 0"), QS_ERR_FORMAT);
    ck_assert_str_eq(qs_ctx_errmsg(ctx),
                     "x.yaml:6:35: pow2: recipe option 'pow2' does not apply to recipe mxfp8");
    ck_assert_int_eq(check_one(ctx, "recipe: block, pow2: maybe"), QS_ERR_FORMAT);
    ck_assert_int_eq(check_one(ctx, "recipe: delayed"), QS_ERR_FORMAT);
    ck_assert_int_eq(check_one(ctx, "recipe: current, b_role: boss"), QS_ERR_FORMAT);
    qs_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm_slot");
    TCase *tc = tcase_create("gemm_slot");
    tcase_add_test(tc, test_table_without_the_slot_loads_and_is_not_supported);
    tcase_add_test(tc, test_model_claim_is_compared_bitwise);
    tcase_add_test(tc, test_other_claim_on_a_bitwise_case_reports_the_deviation);
    tcase_add_test(tc, test_tolerance_case_runs_for_any_claim);
    tcase_add_test(tc, test_caps_refusals_failures);
    tcase_add_test(tc, test_recipe_operands_reach_the_slot_as_codes_and_scales);
    tcase_add_test(tc, test_recipe_parameters_are_checked);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
