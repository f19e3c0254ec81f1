/* op_gemm.c: the `gemm` op — the TN GEMM of spec/gemm.md with a named accumulation model.
 * params: operands (fp32|bf16|e4m3|e5m2: the inputs are first rounded, RNE satfinite, to
 * that format, with a tensor scale of 1), acc (exact|fp32_seq|hopper_fp8_tc),
 * promote_every, out (fp32|bf16|fp16), alpha (a decimal); inputs a [M,K] and b [N,K];
 * outputs y [M,N] (FP32 holding values of the output dtype) and, beside it, y.bound, the
 * per-element bound a gemm_bound comparison uses. */
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops.h"
#include "qspec/format.h"
#include "qspec/gemm.h"

static const char *const operand_names[] = {"fp32", "bf16", "e4m3", "e5m2", NULL};
static const char *const acc_names[] = {"exact", "fp32_seq", "hopper_fp8_tc", NULL};
static const char *const out_names[] = {"fp32", "bf16", "fp16", NULL};

typedef struct gemm_case {
    int operand;
    qs_gemm_params p;
} gemm_case;

static qs_status gemm_params_get(qs_ctx *ctx, const qsk_case *c, gemm_case *g)
{
    static const char *const keys[] = {"operands", "acc", "promote_every", "out", "alpha", NULL};
    qs_status st = qsk_check_param_keys(ctx, c, keys);
    if (st != QS_OK)
        return st;
    g->operand = qsk_param_choice(ctx, c, "operands", operand_names, 0);
    int acc = qsk_param_choice(ctx, c, "acc", acc_names, 1);
    int out = qsk_param_choice(ctx, c, "out", out_names, 0);
    if (g->operand < 0 || acc < 0 || out < 0)
        return QS_ERR_FORMAT;
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

static qs_status gemm_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out)
{
    gemm_case g;
    qs_status st = gemm_params_get(ctx, c, &g);
    if (st != QS_OK)
        return st;
    const qs_tensor *ta = qsk_input_tensor(c, inputs, "a");
    const qs_tensor *tb = qsk_input_tensor(c, inputs, "b");
    qs_tensor ra, rb, y, yb, bound;
    int64_t yshape[2] = {g.p.m, g.p.n};
    memset(&bound, 0, sizeof bound);
    st = qs_tensor_clone(ctx, &ra, ta);
    if (st == QS_OK)
        st = qs_tensor_clone(ctx, &rb, tb);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &y, QS_FP32, 2, yshape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &yb, QS_FP32, 2, yshape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &bound, QS_FP64, 2, yshape);
    if (st != QS_OK)
        return st;
    round_operand(g.operand, ta->data, ra.data, ta->numel);
    round_operand(g.operand, tb->data, rb.data, tb->numel);
    qs_gemm_operand a = {ra.data, QS_GEMM_SCALE_NONE, NULL, 1.0f};
    qs_gemm_operand b = {rb.data, QS_GEMM_SCALE_NONE, NULL, 1.0f};
    st = qs_gemm(ctx, &g.p, &a, &b, NULL, y.data);
    qs_gemm_params pe = g.p;
    pe.out_dtype = QS_FP32;
    if (st == QS_OK)
        st = qs_gemm_bound(ctx, &pe, &a, &b, NULL, yb.data, bound.data);
    qs_tensor_free(&ra);
    qs_tensor_free(&rb);
    qs_tensor_free(&yb);
    if (st == QS_OK)
        st = qsk_results_add(ctx, out, "y", &y);
    if (st == QS_OK)
        st = qsk_results_add(ctx, out, "y.bound", &bound);
    qs_tensor_free(&y);
    qs_tensor_free(&bound);
    return st;
}

const qsk_op qsk_op_gemm = {"gemm", "TN GEMM with a named accumulation model (spec/gemm.md)",
                            gemm_check, gemm_ref, qsk_op_no_backend_slot};
