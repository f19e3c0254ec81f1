/* test_linear.c: the quantized and high-precision linear of spec/gemm.md section 6 — the
 * default accumulation per recipe and GEMM, the operand views of every recipe's copies
 * against qs_dequantize, the HYBRID formats, the quantized GEMMs against double
 * precision, and the high-precision backward against finite differences in double. */
#include <math.h>
#include <string.h>

#include "qspec/format.h"
#include "qspec/linear.h"
#include "qstest.h"

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Roughly N(0,1) (Irwin-Hall of 12 uniforms), rounded to BF16. */
static float rand_bf16(uint64_t *s)
{
    double sum = -6.0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) * 0x1p-53;
    return qs_round_bf16((float)sum);
}

/* A 2-D BF16 tensor of random values. */
static void make_bf16(qs_tensor *t, int64_t rows, int64_t cols, uint64_t seed)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    for (size_t i = 0; i < t->numel; i++)
        ((uint16_t *)t->data)[i] = qs_f32_to_bf16(rand_bf16(&seed));
}

/* Element i of a BF16 or FP32 tensor as a double. */
static double elem(const qs_tensor *t, size_t i)
{
    if (t->dtype == QS_BF16)
        return (double)qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return (double)((const float *)t->data)[i];
}

/* out[m,n] = sum_k a[m,k] b[n,k] (ta/tb: read a/b transposed), in double. */
static void ref_gemm(const qs_tensor *a, int ta, const qs_tensor *b, int tb, double *out)
{
    int64_t M = a->shape[ta], K = a->shape[1 - ta], N = b->shape[tb];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) {
                size_t ia = ta ? (size_t)(k * M + m) : (size_t)(m * K + k);
                size_t ib = tb ? (size_t)(k * N + n) : (size_t)(n * K + k);
                s += elem(a, ia) * elem(b, ib);
            }
            out[m * N + n] = s;
        }
}

static double cosine(const qs_tensor *t, const double *ref)
{
    double dot = 0.0, nt = 0.0, nr = 0.0;
    for (size_t i = 0; i < t->numel; i++) {
        dot += elem(t, i) * ref[i];
        nt += elem(t, i) * elem(t, i);
        nr += ref[i] * ref[i];
    }
    return dot / sqrt(nt * nr);
}

/* ---------------------------------------------------------------- defaults */

START_TEST(test_default_accumulation_is_fast_fprop_and_split_backward)
{
    /* [GEMM-LIN-ACC-DEFAULT]: tensorwise FP8 (delayed, current): fprop fast, dgrad and
     * wgrad split (promote 128); block: split for all; MXFP8/NVFP4: fp32_seq. */
    for (int kind = QS_RECIPE_DELAYED; kind <= QS_RECIPE_CURRENT; kind++) {
        qs_gemm_acc f = qs_linear_default_acc((qs_recipe_kind)kind, QS_LINEAR_FPROP);
        qs_gemm_acc d = qs_linear_default_acc((qs_recipe_kind)kind, QS_LINEAR_DGRAD);
        qs_gemm_acc w = qs_linear_default_acc((qs_recipe_kind)kind, QS_LINEAR_WGRAD);
        ck_assert_int_eq(f.kind, QS_GEMM_ACC_HOPPER_FP8_TC);
        ck_assert_int_eq(f.promote_every, 0);
        ck_assert_int_eq(d.kind, QS_GEMM_ACC_HOPPER_FP8_TC);
        ck_assert_int_eq(d.promote_every, 128);
        ck_assert_int_eq(w.kind, QS_GEMM_ACC_HOPPER_FP8_TC);
        ck_assert_int_eq(w.promote_every, 128);
    }
    for (int g = 0; g < QS_LINEAR_GEMM_COUNT; g++) {
        qs_gemm_acc b = qs_linear_default_acc(QS_RECIPE_BLOCK, (qs_linear_gemm)g);
        ck_assert_int_eq(b.kind, QS_GEMM_ACC_HOPPER_FP8_TC);
        ck_assert_int_eq(b.promote_every, 128);
        ck_assert_int_eq(qs_linear_default_acc(QS_RECIPE_MXFP8, (qs_linear_gemm)g).kind,
                         QS_GEMM_ACC_FP32_SEQ);
        ck_assert_int_eq(qs_linear_default_acc(QS_RECIPE_NVFP4, (qs_linear_gemm)g).kind,
                         QS_GEMM_ACC_FP32_SEQ);
    }
    ck_assert_str_eq(qs_linear_gemm_name(QS_LINEAR_WGRAD), "wgrad");
    qs_linear_options opt;
    qs_linear_options_default(&opt, QS_RECIPE_CURRENT);
    ck_assert_int_eq(opt.out_dtype, QS_BF16);
    ck_assert_int_eq(opt.acc[QS_LINEAR_DGRAD].promote_every, 128);
}
END_TEST

/* ---------------------------------------------------------------- operand views */

/* Checks that view (r,k) times its scales, in the dequantization's order, is the
 * dequantized element (r,k) (ROW) or (k,r) (COL) bit for bit. */
static void check_view(const qs_quantized *qz, qs_direction dir, const char *what)
{
    qs_linear_operand v;
    qs_tensor deq;
    memset(&deq, 0, sizeof deq);
    ck_assert_int_eq(qs_linear_operand_from(NULL, qz, dir, &v), QS_OK);
    ck_assert_int_eq(qs_dequantize(NULL, qz, dir, &deq), QS_OK);
    if (qz->cfg.kind == QS_RECIPE_BLOCK) /* the model tells the two layouts apart */
        ck_assert_int_eq(v.op.scaling,
                         qz->cfg.tile_2d ? QS_GEMM_SCALE_BLOCK_128X128 : QS_GEMM_SCALE_BLOCK_1X128);
    int64_t tile = v.op.scaling == QS_GEMM_SCALE_BLOCK_128X128 ? 128 : 1;
    int64_t group =
        v.op.scaling == QS_GEMM_SCALE_BLOCK_1X128 || v.op.scaling == QS_GEMM_SCALE_BLOCK_128X128
            ? 128
        : v.op.scaling == QS_GEMM_SCALE_MX    ? 32
        : v.op.scaling == QS_GEMM_SCALE_NVFP4 ? 16
                                              : 0;
    int64_t ng = group ? (v.k + group - 1) / group : 0;
    for (int64_t r = 0; r < v.rows; r++) {
        for (int64_t k = 0; k < v.k; k++) {
            float s = group ? v.scales[(r / tile) * ng + k / group] : 1.0f;
            float mult = v.op.scaling == QS_GEMM_SCALE_NVFP4    ? s * v.op.tensor_scale
                         : v.op.scaling == QS_GEMM_SCALE_TENSOR ? v.op.tensor_scale
                                                                : s;
            float got = v.values[r * v.k + k] * mult;
            size_t at = dir == QS_DIR_ROW ? (size_t)(r * v.k + k) : (size_t)(k * v.rows + r);
            float want = ((const float *)deq.data)[at];
            ck_assert_msg(memcmp(&got, &want, sizeof got) == 0,
                          "%s %s view (%lld,%lld) = %a, dequantize gives %a", what,
                          dir == QS_DIR_ROW ? "row" : "col", (long long)r, (long long)k,
                          (double)got, (double)want);
        }
    }
    qs_tensor_free(&deq);
    qs_linear_operand_free(&v);
}

START_TEST(test_operand_views_match_dequantize_for_every_recipe)
{
    /* [GEMM-LIN-FPROP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]: the rowwise view (k along the
     * columns) and the columnwise view (the transpose, k along the rows) of every recipe's
     * copies, with 1-D and 2-D blocks, decode to what qs_dequantize gives. 48 x 160 has a
     * partial 128-block along k and rows that are not a multiple of 128. */
    qs_tensor x;
    make_bf16(&x, 48, 160, 5);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        for (int role = QS_ROLE_INPUT; role <= QS_ROLE_WEIGHT; role++) {
            qs_recipe_config cfg;
            qs_quantizer q;
            qs_quantized qz;
            ck_assert_int_eq(
                qs_recipe_config_default(NULL, &cfg, (qs_recipe_kind)kind, (qs_tensor_role)role),
                QS_OK);
            ck_assert_int_eq(qs_quantizer_init(NULL, &q, &cfg), QS_OK);
            ck_assert_int_eq(qs_quantize(NULL, &q, &x, &qz), QS_OK);
            check_view(&qz, QS_DIR_ROW, qs_recipe_kind_name((qs_recipe_kind)kind));
            check_view(&qz, QS_DIR_COL, qs_recipe_kind_name((qs_recipe_kind)kind));
            qs_quantized_free(&qz);
            qs_quantizer_free(&q);
        }
    }
    qs_tensor_free(&x);
}
END_TEST

/* ---------------------------------------------------------------- the quantized linear */

typedef struct lin_setup {
    qs_quantizer qx, qw, qdy;
} lin_setup;

static void lin_init(lin_setup *l, qs_recipe_kind kind)
{
    qs_recipe_config cx, cw, cd;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cx, kind, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cw, kind, QS_ROLE_WEIGHT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cd, kind, QS_ROLE_GRAD_OUTPUT), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &l->qx, &cx), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &l->qw, &cw), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &l->qdy, &cd), QS_OK);
}

static void lin_free(lin_setup *l)
{
    qs_quantizer_free(&l->qx);
    qs_quantizer_free(&l->qw);
    qs_quantizer_free(&l->qdy);
}

#define LM 32
#define LK 64
#define LN 48

START_TEST(test_quantized_linear_is_close_to_double_and_not_bitwise_hp)
{
    /* [GEMM-LIN-FPROP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD] [GEMM-LIN-ACC-DEFAULT]: under
     * every recipe, with default options, Y, dX and dW have cosine > 0.99 (FP8) or > 0.9
     * (NVFP4) with X W^T, dY W, dY^T X in double, and Y differs from the BF16 linear. */
    qs_tensor x, w, dy, yhp;
    make_bf16(&x, LM, LK, 11);
    make_bf16(&w, LN, LK, 12);
    make_bf16(&dy, LM, LN, 13);
    static double ry[LM * LN], rdx[LM * LK], rdw[LN * LK];
    ref_gemm(&x, 0, &w, 0, ry);
    ref_gemm(&dy, 0, &w, 1, rdx);
    ref_gemm(&dy, 1, &x, 1, rdw);
    ck_assert_int_eq(qs_linear_hp_forward(NULL, &x, &w, &yhp), QS_OK);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        lin_setup l;
        lin_init(&l, (qs_recipe_kind)kind);
        qs_linear_options opt;
        qs_linear_options_default(&opt, (qs_recipe_kind)kind);
        qs_tensor y, dx, dw;
        qs_quantized xq, wq;
        ck_assert_int_eq(qs_linear_forward(NULL, &opt, &l.qx, &l.qw, &x, &w, &y, &xq, &wq), QS_OK);
        ck_assert_int_eq(qs_linear_backward(NULL, &opt, &l.qdy, &dy, &xq, &wq, &dx, &dw), QS_OK);
        double floor_cos = kind == QS_RECIPE_NVFP4 ? 0.9 : 0.99;
        const char *name = qs_recipe_kind_name((qs_recipe_kind)kind);
        ck_assert_msg(cosine(&y, ry) > floor_cos, "%s fprop cosine %f", name, cosine(&y, ry));
        ck_assert_msg(cosine(&dx, rdx) > floor_cos, "%s dgrad cosine %f", name, cosine(&dx, rdx));
        ck_assert_msg(cosine(&dw, rdw) > floor_cos, "%s wgrad cosine %f", name, cosine(&dw, rdw));
        ck_assert_int_eq(y.dtype, QS_BF16);
        ck_assert_int_eq(dw.shape[0], LN);
        ck_assert_int_eq(dw.shape[1], LK);
        ck_assert_msg(memcmp(y.data, yhp.data, y.nbytes) != 0, "%s fprop equals the BF16 run",
                      name);
        qs_tensor_free(&y);
        qs_tensor_free(&dx);
        qs_tensor_free(&dw);
        qs_quantized_free(&xq);
        qs_quantized_free(&wq);
        lin_free(&l);
    }
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_tensor_free(&dy);
    qs_tensor_free(&yhp);
}
END_TEST

/* ---------------------------------------------------------------- torchao's axiswise recipes */

/* A BF16 tensor of small integers (exact products and sums in FP32). */
static void make_ints(qs_tensor *t, int64_t rows, int64_t cols, int seed)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    for (size_t i = 0; i < t->numel; i++)
        ((uint16_t *)t->data)[i] =
            qs_f32_to_bf16((float)((int)((i * 5 + i / 7 + (size_t)seed * 3) % 13) - 6));
}

/* Decoded code (r, c) of a copy stored [rows of the copy, k], and the row's decode scale. */
static double ax_code(const qs_quantized *qz, qs_direction d, int64_t r, int64_t c)
{
    const qs_tensor *t = &qz->data[d];
    return (double)qs_decode_f32(t->dtype, ((const uint8_t *)t->data)[r * t->shape[1] + c]);
}

static float ax_scale(const qs_quantized *qz, qs_direction d, int64_t r)
{
    const float *s = qz->scale[d].data;
    return qz->scale[d].ndim == 1 ? s[0] : s[r];
}

static void ax_quantizers(lin_setup *l, qs_recipe_kind kind, int pow2)
{
    lin_init(l, kind);
    const char *v = pow2 ? "1" : "0";
    ck_assert_int_eq(qs_recipe_config_set(NULL, &l->qx.cfg, "pow2", v), QS_OK);
    ck_assert_int_eq(qs_recipe_config_set(NULL, &l->qw.cfg, "pow2", v), QS_OK);
    ck_assert_int_eq(qs_recipe_config_set(NULL, &l->qdy.cfg, "pow2", v), QS_OK);
}

START_TEST(test_axiswise_linear_applies_scales_after_the_gemm)
{
    /* [GEMM-LIN-AX-OPERAND] [GEMM-LIN-AX-FPROP] [GEMM-LIN-AX-POST] [GEMM-LIN-AX-GWHP]
     * [GEMM-LIN-AX-OUT]: with pow2=0 (scales not powers of two) and the exact model (integer
     * codes: every sum is exact), typed from the rules: fprop bf16((z * sb[n]) * sa[m]); dgrad
     * and rowwise wgrad bf16(bf16(p) * (sa * sb)), whose first BF16 rounding these inputs
     * observe (an FP32 product instead fails); the rowwise_with_gw_hp wgrad is the BF16
     * linear's dW, and its dgrad reads W's one scale. (The order of fprop's two products
     * moves an FP32 ulp at most, which the BF16 rounding hides here.) */
    enum { M = 16, K = 8, N = 12 };
    qs_tensor x, w, dy;
    make_ints(&x, M, K, 1);
    make_ints(&w, N, K, 2);
    make_ints(&dy, M, N, 3);
    for (int kind = QS_RECIPE_ROWWISE; kind <= QS_RECIPE_ROWWISE_GW_HP; kind++) {
        lin_setup l;
        ax_quantizers(&l, (qs_recipe_kind)kind, 0);
        qs_linear_options opt;
        qs_linear_options_default(&opt, (qs_recipe_kind)kind);
        for (int g = 0; g < QS_LINEAR_GEMM_COUNT; g++)
            opt.acc[g] = (qs_gemm_acc){QS_GEMM_ACC_EXACT, 0};
        qs_tensor y, dx, dw, hdx, hdw;
        qs_quantized xq, wq, dyq;
        ck_assert_int_eq(qs_linear_forward(NULL, &opt, &l.qx, &l.qw, &x, &w, &y, &xq, &wq), QS_OK);
        ck_assert_int_eq(qs_linear_backward(NULL, &opt, &l.qdy, &dy, &xq, &wq, &dx, &dw), QS_OK);
        ck_assert_int_eq(qs_quantize(NULL, &l.qdy, &dy, &dyq), QS_OK);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double z = 0;
                for (int k = 0; k < K; k++)
                    z += ax_code(&xq, QS_DIR_ROW, m, k) * ax_code(&wq, QS_DIR_ROW, n, k);
                float want = qs_round_bf16(((float)z * ax_scale(&wq, QS_DIR_ROW, n)) *
                                           ax_scale(&xq, QS_DIR_ROW, m));
                ck_assert_float_eq(elem(&y, (size_t)(m * N + n)), want);
            }
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                double p = 0;
                for (int n = 0; n < N; n++)
                    p += ax_code(&dyq, QS_DIR_ROW, m, n) * ax_code(&wq, QS_DIR_COL, k, n);
                float s = ax_scale(&dyq, QS_DIR_ROW, m) * ax_scale(&wq, QS_DIR_COL, k);
                float want = qs_round_bf16(qs_round_bf16((float)p) * s);
                ck_assert_float_eq(elem(&dx, (size_t)(m * K + k)), want);
            }
        if (kind == QS_RECIPE_ROWWISE) {
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    double p = 0;
                    for (int m = 0; m < M; m++)
                        p += ax_code(&dyq, QS_DIR_COL, n, m) * ax_code(&xq, QS_DIR_COL, k, m);
                    float s = ax_scale(&dyq, QS_DIR_COL, n) * ax_scale(&xq, QS_DIR_COL, k);
                    float want = qs_round_bf16(qs_round_bf16((float)p) * s);
                    ck_assert_float_eq(elem(&dw, (size_t)(n * K + k)), want);
                }
        } else {
            ck_assert_int_eq(wq.scale[QS_DIR_COL].ndim, 1); /* W tensorwise for dgrad */
            ck_assert_int_eq(qs_linear_hp_backward(NULL, &dy, &x, &w, &hdx, &hdw), QS_OK);
            ck_assert_mem_eq(dw.data, hdw.data, dw.nbytes);
            ck_assert_msg(memcmp(dx.data, hdx.data, dx.nbytes) != 0, "dgrad is not quantized");
            qs_tensor_free(&hdx);
            qs_tensor_free(&hdw);
        }
        qs_tensor_free(&y);
        qs_tensor_free(&dx);
        qs_tensor_free(&dw);
        qs_quantized_free(&xq);
        qs_quantized_free(&wq);
        qs_quantized_free(&dyq);
        lin_free(&l);
    }
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_tensor_free(&dy);
}
END_TEST

START_TEST(test_axiswise_default_models_and_fp32_output_holds_bf16)
{
    /* [GEMM-LIN-ACC-DEFAULT] [GEMM-LIN-AX-OUT]: torchao's models (fast fprop, split dgrad and
     * wgrad; the gw_hp wgrad fp32_seq); an FP32 output of the rowwise fprop and dgrad holds
     * the BF16 result of the BF16 run, bit for bit. */
    qs_gemm_acc f = qs_linear_default_acc(QS_RECIPE_ROWWISE, QS_LINEAR_FPROP);
    qs_gemm_acc d = qs_linear_default_acc(QS_RECIPE_ROWWISE_GW_HP, QS_LINEAR_DGRAD);
    qs_gemm_acc w = qs_linear_default_acc(QS_RECIPE_ROWWISE_GW_HP, QS_LINEAR_WGRAD);
    ck_assert(f.kind == QS_GEMM_ACC_HOPPER_FP8_TC && f.promote_every == 0);
    ck_assert(d.kind == QS_GEMM_ACC_HOPPER_FP8_TC && d.promote_every == 128);
    ck_assert(w.kind == QS_GEMM_ACC_FP32_SEQ);
    ck_assert_int_eq(qs_linear_default_acc(QS_RECIPE_ROWWISE, QS_LINEAR_WGRAD).promote_every, 128);
    qs_tensor x, wt, dy;
    make_bf16(&x, LM, LK, 21);
    make_bf16(&wt, LN, LK, 22);
    make_bf16(&dy, LM, LN, 23);
    qs_tensor y[2], dx[2], dw[2];
    for (int o = 0; o < 2; o++) {
        lin_setup l;
        lin_init(&l, QS_RECIPE_ROWWISE);
        qs_linear_options opt;
        qs_linear_options_default(&opt, QS_RECIPE_ROWWISE);
        opt.out_dtype = o ? QS_FP32 : QS_BF16;
        qs_quantized xq, wq;
        ck_assert_int_eq(qs_linear_forward(NULL, &opt, &l.qx, &l.qw, &x, &wt, &y[o], &xq, &wq),
                         QS_OK);
        ck_assert_int_eq(qs_linear_backward(NULL, &opt, &l.qdy, &dy, &xq, &wq, &dx[o], &dw[o]),
                         QS_OK);
        qs_quantized_free(&xq);
        qs_quantized_free(&wq);
        lin_free(&l);
    }
    for (size_t i = 0; i < y[0].numel; i++)
        ck_assert_float_eq(elem(&y[0], i), elem(&y[1], i));
    for (size_t i = 0; i < dx[0].numel; i++)
        ck_assert_float_eq(elem(&dx[0], i), elem(&dx[1], i));
    for (int o = 0; o < 2; o++) {
        qs_tensor_free(&y[o]);
        qs_tensor_free(&dx[o]);
        qs_tensor_free(&dw[o]);
    }
    qs_tensor_free(&x);
    qs_tensor_free(&wt);
    qs_tensor_free(&dy);
}
END_TEST

START_TEST(test_hybrid_is_e4m3_forward_e5m2_gradient_and_roles_are_checked)
{
    /* [GEMM-LIN-HYBRID]: delayed scaling, HYBRID: the saved X and W copies are E4M3, the
     * dY quantizer encodes E5M2; a weight-role quantizer in the input slot is refused. */
    qs_tensor x, w;
    make_bf16(&x, 16, 32, 1);
    make_bf16(&w, 8, 32, 2);
    lin_setup l;
    lin_init(&l, QS_RECIPE_DELAYED);
    qs_linear_options opt;
    qs_linear_options_default(&opt, QS_RECIPE_DELAYED);
    qs_tensor y;
    qs_quantized xq, wq;
    ck_assert_int_eq(qs_linear_forward(NULL, &opt, &l.qx, &l.qw, &x, &w, &y, &xq, &wq), QS_OK);
    ck_assert_int_eq(xq.elem, QS_E4M3);
    ck_assert_int_eq(wq.elem, QS_E4M3);
    ck_assert_int_eq(qs_recipe_elem_dtype(&l.qdy.cfg), QS_E5M2);
    qs_tensor_free(&y);
    qs_quantized_free(&xq);
    qs_quantized_free(&wq);
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(qs_linear_forward(ctx, &opt, &l.qw, &l.qw, &x, &w, &y, &xq, &wq),
                     QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "role"));
    qs_tensor w2;
    make_bf16(&w2, 8, 31, 3);
    ck_assert_int_eq(qs_linear_forward(ctx, &opt, &l.qx, &l.qw, &x, &w2, &y, &xq, &wq),
                     QS_ERR_SHAPE);
    qs_ctx_free(ctx);
    qs_tensor_free(&w2);
    lin_free(&l);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- finite differences */

#define FM 4
#define FK 6
#define FN 5

/* L(X, W) = sum_{m,n} G[m,n] (X W^T)[m,n], in double, with X and W as doubles. */
static double loss(const double *x, const double *w, const double *g)
{
    double l = 0.0;
    for (int m = 0; m < FM; m++)
        for (int n = 0; n < FN; n++) {
            double y = 0.0;
            for (int k = 0; k < FK; k++)
                y += x[m * FK + k] * w[n * FK + k];
            l += g[m * FN + n] * y;
        }
    return l;
}

START_TEST(test_hp_backward_matches_finite_differences_in_double)
{
    /* [GEMM-LIN-HP] [GEMM-LIN-DGRAD] [GEMM-LIN-WGRAD]: with dY = G, dX and dW of the BF16
     * linear equal the central differences of L = sum G (X W^T) in double to BF16
     * precision (2^-8 relative, plus 1e-6); the forward equals X W^T to BF16 precision. */
    qs_tensor x, w, g, y, dx, dw;
    make_bf16(&x, FM, FK, 21);
    make_bf16(&w, FN, FK, 22);
    make_bf16(&g, FM, FN, 23);
    double xd[FM * FK], wd[FN * FK], gd[FM * FN];
    for (int i = 0; i < FM * FK; i++)
        xd[i] = elem(&x, (size_t)i);
    for (int i = 0; i < FN * FK; i++)
        wd[i] = elem(&w, (size_t)i);
    for (int i = 0; i < FM * FN; i++)
        gd[i] = elem(&g, (size_t)i);
    ck_assert_int_eq(qs_linear_hp_forward(NULL, &x, &w, &y), QS_OK);
    ck_assert_int_eq(qs_linear_hp_backward(NULL, &g, &x, &w, &dx, &dw), QS_OK);
    ck_assert_int_eq(dx.dtype, QS_BF16);
    const double h = 0x1p-10;
    for (int i = 0; i < FM * FK; i++) {
        double keep = xd[i];
        xd[i] = keep + h;
        double lp = loss(xd, wd, gd);
        xd[i] = keep - h;
        double fd = (lp - loss(xd, wd, gd)) / (2 * h);
        xd[i] = keep;
        ck_assert_msg(fabs(elem(&dx, (size_t)i) - fd) <= 0x1p-8 * fabs(fd) + 1e-6,
                      "dx[%d] = %a, finite difference %a", i, elem(&dx, (size_t)i), fd);
    }
    for (int i = 0; i < FN * FK; i++) {
        double keep = wd[i];
        wd[i] = keep + h;
        double lp = loss(xd, wd, gd);
        wd[i] = keep - h;
        double fd = (lp - loss(xd, wd, gd)) / (2 * h);
        wd[i] = keep;
        ck_assert_msg(fabs(elem(&dw, (size_t)i) - fd) <= 0x1p-8 * fabs(fd) + 1e-6,
                      "dw[%d] = %a, finite difference %a", i, elem(&dw, (size_t)i), fd);
    }
    double ry[FM * FN];
    ref_gemm(&x, 0, &w, 0, ry);
    for (int i = 0; i < FM * FN; i++)
        ck_assert_msg(fabs(elem(&y, (size_t)i) - ry[i]) <= 0x1p-8 * fabs(ry[i]) + 1e-6,
                      "y[%d] = %a, double %a", i, elem(&y, (size_t)i), ry[i]);
    qs_tensor_free(&x);
    qs_tensor_free(&w);
    qs_tensor_free(&g);
    qs_tensor_free(&y);
    qs_tensor_free(&dx);
    qs_tensor_free(&dw);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("linear");
    tcase_add_test(tc, test_default_accumulation_is_fast_fprop_and_split_backward);
    tcase_add_test(tc, test_operand_views_match_dequantize_for_every_recipe);
    tcase_add_test(tc, test_quantized_linear_is_close_to_double_and_not_bitwise_hp);
    tcase_add_test(tc, test_hybrid_is_e4m3_forward_e5m2_gradient_and_roles_are_checked);
    tcase_add_test(tc, test_hp_backward_matches_finite_differences_in_double);
    tcase_add_test(tc, test_axiswise_linear_applies_scales_after_the_gemm);
    tcase_add_test(tc, test_axiswise_default_models_and_fp32_output_holds_bf16);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
