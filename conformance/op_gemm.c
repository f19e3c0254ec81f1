/* op_gemm.c: the `gemm` op — the TN GEMM of spec/gemm.md with a named accumulation model.
 * params: operands (fp32|bf16|e4m3|e5m2: the inputs are first rounded, RNE satfinite, to
 * that format, with a tensor scale of 1) or recipe (current|block|mxfp8|nvfp4: a and b are
 * quantized by the reference's quantizer of that recipe, roles a_role and b_role, rowwise
 * copies), acc (exact|fp32_seq|hopper_fp8_tc), promote_every, out (fp32|bf16|fp16), alpha
 * (a decimal); inputs a [M,K] and b [N,K]; outputs y [M,N] (FP32 holding values of the
 * output dtype) and, beside it, y.bound, the per-element bound a gemm_bound comparison uses.
 * On a plugin the case runs through the gemm slot on the same codes and scales, and the
 * backend's claim decides what a bitwise comparison means [CASE-GEMM-CLAIM]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops.h"
#include "qspec/format.h"
#include "qspec/gemm.h"
#include "qspec/linear.h"
#include "qspec/recipe.h"

static const char *const operand_names[] = {"fp32", "bf16", "e4m3", "e5m2", NULL};
static const char *const recipe_names[] = {"current", "block", "mxfp8", "nvfp4", NULL};
static const qs_recipe_kind recipe_kinds[] = {QS_RECIPE_CURRENT, QS_RECIPE_BLOCK, QS_RECIPE_MXFP8,
                                              QS_RECIPE_NVFP4};
static const char *const role_names[] = {"input",       "weight",     "output",
                                         "grad_output", "grad_input", NULL};
static const char *const acc_names[] = {"exact", "fp32_seq", "hopper_fp8_tc", NULL};
static const char *const out_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const claim_names[QS_GEMM_CLAIM_COUNT] = {"the model", "FP32 accumulation",
                                                             "Hopper FP8 tensor cores"};

typedef struct gemm_case {
    int operand; /* index in operand_names (no recipe) */
    int recipe;  /* index in recipe_names, -1 for none */
    qs_recipe_config cfg[2];
    qs_gemm_params p;
} gemm_case;

static qs_status gemm_params_get(qs_ctx *ctx, const qsk_case *c, gemm_case *g)
{
    static const char *const keys[] = {"operands",      "recipe", "a_role", "b_role", "acc",
                                       "promote_every", "out",    "alpha",  "pow2",   NULL};
    qs_status st = qsk_check_param_keys(ctx, c, keys);
    if (st != QS_OK)
        return st;
    memset(g, 0, sizeof *g);
    g->operand = qsk_param_choice(ctx, c, "operands", operand_names, 0);
    g->recipe = qsk_param_choice(ctx, c, "recipe", recipe_names, -1);
    int role[2] = {qsk_param_choice(ctx, c, "a_role", role_names, QS_ROLE_INPUT),
                   qsk_param_choice(ctx, c, "b_role", role_names, QS_ROLE_WEIGHT)};
    int acc = qsk_param_choice(ctx, c, "acc", acc_names, 1);
    int out = qsk_param_choice(ctx, c, "out", out_names, 0);
    if (g->operand < 0 || acc < 0 || out < 0 || role[0] < 0 || role[1] < 0 ||
        (g->recipe < 0 && qsk_case_param(c, "recipe")))
        return QS_ERR_FORMAT;
    if (g->recipe >= 0 && qsk_case_param(c, "operands"))
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: 'operands' and 'recipe' exclude each other: a recipe "
                            "quantizes the operands itself",
                            c->file, c->op_pos.line, c->op_pos.col);
    if (g->recipe < 0 &&
        (qsk_case_param(c, "a_role") || qsk_case_param(c, "b_role") || qsk_case_param(c, "pow2")))
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: 'a_role', 'b_role' and 'pow2' need a 'recipe'", c->file,
                            c->op_pos.line, c->op_pos.col);
    const qsk_param *pp = qsk_case_param(c, "pow2");
    uint64_t promote;
    st = qsk_param_u64(ctx, c, "promote_every", 0, &promote);
    if (st != QS_OK)
        return st;
    const qsk_param *pa = qsk_case_param(c, "alpha");
    float alpha = 1.0f;
    if (pa) {
        char *end;
        alpha = strtof(pa->value, &end);
        if (*end != '\0' || end == pa->value)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: alpha '%s' is not a number", c->file,
                                pa->pos.line, pa->pos.col, pa->value);
    }
    if (g->recipe >= 0) {
        qs_recipe_kind kind = recipe_kinds[g->recipe];
        for (int i = 0; i < 2; i++) {
            st = qs_recipe_config_default(ctx, &g->cfg[i], kind, (qs_tensor_role)role[i]);
            if (st != QS_OK)
                return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: recipe %s: %s", c->file,
                                    c->op_pos.line, c->op_pos.col, recipe_names[g->recipe],
                                    qs_ctx_errmsg(ctx));
            if (pp && qs_recipe_config_set(ctx, &g->cfg[i], "pow2", pp->value) != QS_OK)
                return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: pow2: %s", c->file, pp->pos.line,
                                    pp->pos.col, qs_ctx_errmsg(ctx));
            g->cfg[i].rowwise = 1;
            g->cfg[i].columnwise = 0;
        }
        if (acc == QS_GEMM_ACC_HOPPER_FP8_TC &&
            (kind == QS_RECIPE_MXFP8 || kind == QS_RECIPE_NVFP4))
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s:%d:%d: hopper_fp8_tc has no model for %s operands (no Hopper "
                                "tensor-core path; use fp32_seq or exact)",
                                c->file, c->op_pos.line, c->op_pos.col, recipe_names[g->recipe]);
    }
    const qsk_input *a = qsk_case_input(c, "a"), *b = qsk_case_input(c, "b");
    if (!a || !b || a->ndim != 2 || b->ndim != 2)
        return QS_OK; /* reported by the input check */
    if (a->shape[1] != b->shape[1])
        return qs_ctx_error(
            ctx, QS_ERR_FORMAT,
            "%s:%d:%d: impossible shape: a is [M,K] and b is [N,K] with the same K (%lld != %lld)",
            c->file, b->pos.line, b->pos.col, (long long)a->shape[1], (long long)b->shape[1]);
    if ((acc != QS_GEMM_ACC_HOPPER_FP8_TC && promote) || promote % 32 != 0)
        return qs_ctx_error(
            ctx, QS_ERR_FORMAT,
            "%s:%d:%d: promote_every applies to hopper_fp8_tc and is a multiple of 32", c->file,
            c->op_pos.line, c->op_pos.col);
    g->p.m = a->shape[0];
    g->p.n = b->shape[0];
    g->p.k = a->shape[1];
    g->p.alpha = alpha;
    g->p.beta = 0.0f;
    g->p.acc = (qs_gemm_acc){(qs_gemm_acc_kind)acc, (int64_t)promote};
    g->p.out_dtype = qs_dtype_from_name(out_names[out]);
    return QS_OK;
}

static qs_status gemm_check(qs_ctx *ctx, const qsk_case *c)
{
    static const char *const inputs[] = {"a", "b", NULL};
    static const qs_dtype dtypes[] = {QS_FP32, QS_DTYPE_INVALID};
    static const char *const outputs[] = {"y", NULL};
    qs_status st = qsk_check_inputs(ctx, c, inputs, dtypes, 2, 2);
    gemm_case g;
    if (st == QS_OK)
        st = gemm_params_get(ctx, c, &g);
    if (st == QS_OK)
        st = qsk_check_outputs(ctx, c, outputs);
    return st;
}

/* Rounds every element of src to the operand format (RNE, satfinite), into dst. */
static void round_operand(int operand, const float *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (operand) {
        case 1:
            dst[i] = qs_round_bf16(src[i]);
            break;
        case 2:
            dst[i] = qs_decode_f32(QS_E4M3, qs_encode_e4m3(src[i], QS_OVF_SATFINITE));
            break;
        case 3:
            dst[i] = qs_decode_f32(QS_E5M2, qs_encode_e5m2(src[i], QS_OVF_SATFINITE));
            break;
        default:
            dst[i] = src[i];
            break;
        }
    }
}

/* The two operands of a case, as the reference reads them (op[]) and, for a backend, as
 * codes and scales (coded[]); the tensors behind both are owned here. */
typedef struct gemm_operands {
    qs_tensor rounded[2]; /* no recipe: the rounded values */
    qs_tensor codes[2];   /* no recipe: their codes (FP32 bits, BF16, E4M3, E5M2) */
    qs_quantized qz[2];   /* recipe: the rowwise copies */
    qs_linear_operand view[2];
    qs_tensor scale[2]; /* NVFP4 2-D tiles: the tile scales repeated on each row */
    qs_gemm_operand op[2];
    qs_gemm_coded_operand coded[2];
} gemm_operands;

static void operands_free(gemm_operands *o)
{
    for (int i = 0; i < 2; i++) {
        qs_tensor_free(&o->rounded[i]);
        qs_tensor_free(&o->codes[i]);
        qs_quantized_free(&o->qz[i]);
        qs_linear_operand_free(&o->view[i]);
        qs_tensor_free(&o->scale[i]);
    }
}

static const qs_dtype operand_dtypes[] = {QS_FP32, QS_BF16, QS_E4M3, QS_E5M2};

/* Operand i given as rounded values with a tensor scale of 1: BF16 and FP32 values as
 * scaling NONE, FP8 codes as TENSOR with scale_inv 1 (the form an FP8 GEMM takes). */
static qs_status plain_operand(qs_ctx *ctx, const gemm_case *g, const qs_tensor *x, int i,
                               gemm_operands *o)
{
    qs_status st = qs_tensor_clone(ctx, &o->rounded[i], x);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &o->codes[i], operand_dtypes[g->operand], 2, x->shape);
    if (st != QS_OK)
        return st;
    float *r = o->rounded[i].data;
    round_operand(g->operand, x->data, r, x->numel);
    for (size_t j = 0; j < x->numel; j++) {
        if (g->operand == 0)
            memcpy((float *)o->codes[i].data + j, &r[j], sizeof(float));
        else if (g->operand == 1)
            ((uint16_t *)o->codes[i].data)[j] = qs_f32_to_bf16(r[j]);
        else
            ((uint8_t *)o->codes[i].data)[j] = g->operand == 2
                                                   ? qs_encode_e4m3(r[j], QS_OVF_SATFINITE)
                                                   : qs_encode_e5m2(r[j], QS_OVF_SATFINITE);
    }
    qs_gemm_scaling mode = g->operand >= 2 ? QS_GEMM_SCALE_TENSOR : QS_GEMM_SCALE_NONE;
    o->op[i] = (qs_gemm_operand){r, mode, NULL, 1.0f, operand_dtypes[g->operand]};
    o->coded[i] = (qs_gemm_coded_operand){mode, &o->codes[i], NULL, 1.0f};
    return QS_OK;
}

/* Operand i quantized by the case's recipe: the reference reads the rowwise view
 * (spec/gemm.md section 6), a backend the copy's codes and scales in the ABI's layout. */
static qs_status recipe_operand(qs_ctx *ctx, const gemm_case *g, const qs_tensor *x, int i,
                                gemm_operands *o)
{
    qs_quantizer q;
    qs_status st = qs_quantizer_init(ctx, &q, &g->cfg[i]);
    if (st != QS_OK)
        return st;
    st = qs_quantize(ctx, &q, x, &o->qz[i]);
    qs_quantizer_free(&q);
    if (st == QS_OK)
        st = qs_linear_operand_from(ctx, &o->qz[i], QS_DIR_ROW, &o->view[i]);
    if (st != QS_OK)
        return st;
    const qs_quantized *z = &o->qz[i];
    o->op[i] = o->view[i].op;
    qs_gemm_coded_operand *cd = &o->coded[i];
    cd->data = &z->data[QS_DIR_ROW];
    cd->scale = &z->scale[QS_DIR_ROW];
    cd->tensor_scale = 1.0f;
    switch (z->cfg.kind) {
    case QS_RECIPE_BLOCK:
        cd->scaling = z->cfg.tile_2d ? QS_GEMM_SCALE_BLOCK_128X128 : QS_GEMM_SCALE_BLOCK_1X128;
        break;
    case QS_RECIPE_MXFP8:
        cd->scaling = QS_GEMM_SCALE_MX;
        break;
    case QS_RECIPE_NVFP4:
        cd->scaling = QS_GEMM_SCALE_NVFP4;
        cd->tensor_scale = z->global_dec[QS_DIR_ROW];
        if (z->cfg.tile_2d) { /* [ceil(R/16), G] -> [R, G] */
            const qs_tensor *s = &z->scale[QS_DIR_ROW];
            int64_t shape[2] = {z->rows, s->shape[1]};
            st = qs_tensor_alloc(ctx, &o->scale[i], s->dtype, 2, shape);
            if (st != QS_OK)
                return st;
            for (int64_t r = 0; r < z->rows; r++)
                memcpy((uint8_t *)o->scale[i].data + r * shape[1],
                       (const uint8_t *)s->data + (r / 16) * shape[1], (size_t)shape[1]);
            cd->scale = &o->scale[i];
        }
        break;
    default: /* current: one scale_inv */
        cd->scaling = QS_GEMM_SCALE_TENSOR;
        cd->scale = NULL;
        cd->tensor_scale = o->view[i].op.tensor_scale;
        break;
    }
    return QS_OK;
}

static qs_status operands_make(qs_ctx *ctx, const qsk_case *c, const gemm_case *g,
                               const qs_tensor *inputs, gemm_operands *o)
{
    memset(o, 0, sizeof *o);
    const qs_tensor *x[2] = {qsk_input_tensor(c, inputs, "a"), qsk_input_tensor(c, inputs, "b")};
    qs_status st = QS_OK;
    for (int i = 0; i < 2 && st == QS_OK; i++)
        st =
            g->recipe >= 0 ? recipe_operand(ctx, g, x[i], i, o) : plain_operand(ctx, g, x[i], i, o);
    if (st != QS_OK)
        operands_free(o);
    return st;
}

/* The reference's result under the case's model, and the per-element bound of a gemm_bound
 * comparison against it. [GEMM-BOUND] bounds the distance B from the exact value y_exact;
 * the comparison is made against the model's y, so the bound handed to it is
 * B + |y - y_exact|: an evaluation within c*B of y_exact is then within c times that bound
 * of y for every c >= 1. A non-finite y_exact keeps the bound 0 (specials must agree). */
static qs_status reference_result(qs_ctx *ctx, const gemm_case *g, const gemm_operands *o,
                                  qs_tensor *y, qs_tensor *bound)
{
    int64_t shape[2] = {g->p.m, g->p.n};
    qs_tensor ye;
    memset(&ye, 0, sizeof ye);
    memset(y, 0, sizeof *y);
    memset(bound, 0, sizeof *bound);
    qs_status st = qs_tensor_alloc(ctx, y, QS_FP32, 2, shape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &ye, QS_FP32, 2, shape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, bound, QS_FP64, 2, shape);
    if (st == QS_OK)
        st = qs_gemm(ctx, &g->p, &o->op[0], &o->op[1], NULL, y->data);
    if (st == QS_OK)
        st = qs_gemm_bound(ctx, &g->p, &o->op[0], &o->op[1], NULL, ye.data, bound->data);
    for (size_t i = 0; st == QS_OK && i < y->numel; i++) {
        double e = ((const float *)ye.data)[i], v = ((const float *)y->data)[i];
        double *b = (double *)bound->data + i;
        if (isfinite(e) && isfinite(v))
            *b += fabs(v - e);
    }
    qs_tensor_free(&ye);
    if (st != QS_OK) {
        qs_tensor_free(y);
        qs_tensor_free(bound);
    }
    return st;
}

static qs_status gemm_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out)
{
    gemm_case g;
    gemm_operands o;
    qs_tensor y, bound;
    qs_status st = gemm_params_get(ctx, c, &g);
    if (st == QS_OK)
        st = operands_make(ctx, c, &g, inputs, &o);
    if (st != QS_OK)
        return st;
    st = reference_result(ctx, &g, &o, &y, &bound);
    operands_free(&o);
    if (st == QS_OK) {
        st = qsk_results_add(ctx, out, "y", &y);
        if (st == QS_OK)
            st = qsk_results_add(ctx, out, "y.bound", &bound);
        else
            qs_tensor_free(&bound);
    }
    return st;
}

/* ------------------------------------------------------------ on a backend */

/* The capability bit of GEMMs over operands of scaling s, and its name (for a reason). */
static uint64_t cap_of(qs_gemm_scaling s)
{
    switch (s) {
    case QS_GEMM_SCALE_BLOCK_1X128:
    case QS_GEMM_SCALE_BLOCK_128X128:
        return QS_CAP_GEMM_BLOCK;
    case QS_GEMM_SCALE_MX:
        return QS_CAP_GEMM_MX;
    case QS_GEMM_SCALE_NVFP4:
        return QS_CAP_GEMM_NVFP4;
    default:
        return QS_CAP_GEMM_TENSOR;
    }
}

static const char *cap_name(qs_gemm_scaling s)
{
    uint64_t c = cap_of(s);
    return c == QS_CAP_GEMM_BLOCK   ? "QS_CAP_GEMM_BLOCK"
           : c == QS_CAP_GEMM_MX    ? "QS_CAP_GEMM_MX"
           : c == QS_CAP_GEMM_NVFP4 ? "QS_CAP_GEMM_NVFP4"
                                    : "QS_CAP_GEMM_TENSOR";
}

/* Element i of an output tensor of dtype FP32, BF16 or FP16 as its FP32 value. */
static float output_value(const qs_tensor *t, size_t i)
{
    if (t->dtype == QS_BF16)
        return qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == QS_FP16)
        return qs_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* A value of dtype dt as a position in that format's ordered codes (sign-magnitude to a
 * signed line; +0 and -0 both 0). */
static int64_t ordered_code(qs_dtype dt, float v)
{
    uint32_t bits, sign;
    if (dt == QS_BF16) {
        bits = qs_f32_to_bf16(v);
        sign = 0x8000u;
    } else if (dt == QS_FP16) {
        bits = qs_f32_to_f16(v);
        sign = 0x8000u;
    } else {
        memcpy(&bits, &v, sizeof bits);
        sign = 0x80000000u;
    }
    return (bits & sign) ? -(int64_t)(bits & ~sign) : (int64_t)bits;
}

/* [CASE-GEMM-CLAIM] How far a backend's result is from the model it does not claim:
 * written into the context as the reason the case is not supported. */
static qs_status report_deviation(qs_ctx *ctx, const qsk_plugin *pl, const gemm_case *g,
                                  const gemm_operands *o, const qs_tensor *got, qs_gemm_claim claim)
{
    qs_tensor y, bound;
    qs_status st = reference_result(ctx, g, o, &y, &bound);
    if (st != QS_OK)
        return st;
    size_t equal = 0, specials = 0;
    double max_ulp = 0, max_abs = 0, max_ratio = 0;
    for (size_t i = 0; i < y.numel; i++) {
        float e = ((const float *)y.data)[i], v = ((const float *)got->data)[i];
        uint32_t be, bv;
        memcpy(&be, &e, sizeof be);
        memcpy(&bv, &v, sizeof bv);
        if (be == bv) {
            equal++;
            continue;
        }
        if (!isfinite(e) || !isfinite(v)) {
            specials++;
            continue;
        }
        double d = fabs((double)v - (double)e), b = ((const double *)bound.data)[i];
        double u =
            fabs((double)(ordered_code(g->p.out_dtype, v) - ordered_code(g->p.out_dtype, e)));
        max_ulp = u > max_ulp ? u : max_ulp;
        max_abs = d > max_abs ? d : max_abs;
        if (b > 0 && d / b > max_ratio)
            max_ratio = d / b;
    }
    char spec[64] = "";
    if (specials)
        snprintf(spec, sizeof spec, ", %zu with NaN or Inf differing", specials);
    qs_status r = qs_ctx_error(
        ctx, QS_ERR_UNSUPPORTED,
        "backend %s claims %s, not %s%s bit for bit: %zu of %zu elements bitwise equal%s, at most "
        "%.0f ulp (%s) apart, max |difference| %.9g = %.3g x the gemm bound",
        pl->table->name, claim_names[claim], acc_names[g->p.acc.kind],
        g->p.acc.kind == QS_GEMM_ACC_HOPPER_FP8_TC
            ? (g->p.acc.promote_every ? " (split accumulation)" : " (fast accumulation)")
            : "",
        equal, y.numel, spec, max_ulp, qs_dtype_name(g->p.out_dtype), max_abs, max_ratio);
    qs_tensor_free(&y);
    qs_tensor_free(&bound);
    return r;
}

/* Whether the case compares y against the model's exact bits (bitwise or by ulp). */
static int compares_model_bits(const qsk_case *c)
{
    for (size_t i = 0; i < c->noutputs; i++)
        if (strcmp(c->outputs[i].name, "y") == 0)
            return c->outputs[i].cmp == QSK_CMP_BITWISE || c->outputs[i].cmp == QSK_CMP_ULP;
    return 0;
}

/* [CASE-OP-GEMM] [CASE-BACKEND-UNSUPPORTED] [CASE-GEMM-CLAIM]: the case runs through the
 * gemm slot (absent in a table built before it was appended) when the backend claims the
 * operands' scaling family, on the codes and scales the reference reads. */
static qs_status gemm_backend(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                              const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref; /* compared by the run (qsk_compare_outputs) */
    gemm_case g;
    qs_status st = gemm_params_get(ctx, c, &g);
    if (st != QS_OK)
        return st;
    if (!QS_BACKEND_HAS_SLOT(pl->table->struct_size, gemm) || !pl->table->gemm)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no gemm slot");
    gemm_operands o;
    st = operands_make(ctx, c, &g, inputs, &o);
    if (st != QS_OK)
        return st;
    if (!(pl->table->caps & cap_of(o.coded[0].scaling))) {
        operands_free(&o);
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no gemm of these operands' scaling (%s)",
                            cap_name(o.coded[0].scaling));
    }
    int64_t shape[2] = {g.p.m, g.p.n};
    qs_tensor codes, y;
    memset(&y, 0, sizeof y);
    st = qs_tensor_alloc(ctx, &codes, g.p.out_dtype, 2, shape);
    if (st != QS_OK) {
        operands_free(&o);
        return st;
    }
    char why[256] = "";
    qs_gemm_args args = {
        g.p.m, g.p.n,   g.p.k,         o.coded[0], o.coded[1],          g.p.alpha, g.p.beta,
        NULL,  g.p.acc, g.p.out_dtype, &codes,     QS_GEMM_CLAIM_MODEL, why,       sizeof why};
    st = pl->table->gemm(pl->state, &args);
    why[sizeof why - 1] = '\0';
    if (st == QS_ERR_UNSUPPORTED) {
        qs_ctx_error(ctx, st, "backend %s: gemm not supported%s%s", pl->table->name,
                     why[0] ? ": " : "", why);
    } else if (st != QS_OK) {
        st = qs_ctx_error(ctx, st, "backend %s: gemm failed: %s%s%s", pl->table->name,
                          qs_status_str(st), why[0] ? ": " : "", why);
    } else if ((unsigned)args.claim >= QS_GEMM_CLAIM_COUNT) {
        st = qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: gemm returned an unknown claim %d",
                          pl->table->name, (int)args.claim);
    } else {
        st = qs_tensor_alloc(ctx, &y, QS_FP32, 2, shape);
        for (size_t i = 0; st == QS_OK && i < y.numel; i++)
            ((float *)y.data)[i] = output_value(&codes, i);
        if (st == QS_OK && args.claim != QS_GEMM_CLAIM_MODEL && compares_model_bits(c))
            st = report_deviation(ctx, pl, &g, &o, &y, args.claim);
        if (st == QS_OK)
            st = qsk_results_add(ctx, out, "y", &y);
    }
    qs_tensor_free(&y);
    qs_tensor_free(&codes);
    operands_free(&o);
    return st;
}

const qsk_op qsk_op_gemm = {"gemm", "TN GEMM with a named accumulation model (spec/gemm.md)",
                            gemm_check, gemm_ref, gemm_backend};
