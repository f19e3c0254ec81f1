/* proglayout.c: the outputs a framework writes for a program case — "V/y", "V/dx",
 * "V/grad.OP" and the optional "V/trace" of every variant a framework can run — by name,
 * dtype and shape only, derived from the program and the inputs the case declares, without
 * running anything (spec/cases.md [CASE-VERIFY-SELF]). gen lists them in the manifest and
 * verify reads them for a case with `reference: none`, whose reference run would take hours.
 * They are the layouts the reference's run gives: tests/test_proglayout.c holds the two
 * together on every program case of the shipped suites. */
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "program.h"
#include "qspec/attention.h"

/* The activation as it flows through a variant's ops [CASE-PROG-OP], and what the walk
 * collected: the ops with a gradient output, in build order. */
typedef struct walk {
    const qsk_case *c;
    const qskp_variant *v;
    qs_dtype dtype;
    int64_t rows, dim;
    int nops;           /* ops seen, gelu included */
    qskp_kind first_op; /* the first op's kind: it decides dx's dtype */
    const qskp_node *grad_ops[QSK_MAX_OUTPUTS];
    int ngrads;
} walk;

static int64_t input_numel(const qsk_input *in)
{
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n *= in->shape[d];
    return n;
}

/* One op: a linear makes the activation [rows, n] BF16 ([GEMM-LIN-HP]); gelu, gdn and mla
 * keep it. Every op but gelu has a gradient output. */
static void walk_op(walk *w, const qskp_node *s)
{
    if (w->nops++ == 0)
        w->first_op = s->kind;
    if (s->kind == QSKP_LINEAR) {
        const qsk_input *wt = qsk_case_input(w->c, s->in[0]);
        w->dim = wt ? wt->shape[0] : w->dim;
        w->dtype = QS_BF16;
    }
    if (s->kind != QSKP_GELU && w->ngrads < QSK_MAX_OUTPUTS)
        w->grad_ops[w->ngrads++] = s;
}

/* The ops of region that variant v runs, in tree order; a region left out is transparent
 * (its body stays), an op left out is gone ([CASE-PROG-VARIANT]). */
static void walk_region(walk *w, const qskp_node *region)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        int in = qskp_node_in(s, w->v);
        if (QSKP_IS_OP(s->kind) && in)
            walk_op(w, s);
        else if (!QSKP_IS_OP(s->kind) && s->kind != QSKP_BACKWARD)
            walk_region(w, s);
    }
}

/* An output's layout: a tensor with its dtype and shape, and no data. */
static qs_status add_layout(qs_ctx *ctx, qsk_results *out, const char *variant, const char *local,
                            qs_dtype dt, int ndim, const int64_t *shape)
{
    qs_tensor t;
    char full[2 * QSK_NAME_LEN + 8];
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    t.numel = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = (int64_t)t.numel;
        t.numel *= (size_t)shape[d];
    }
    t.nbytes = qs_dtype_bytes(dt, t.numel);
    snprintf(full, sizeof full, "%s/%s", variant, local);
    return qsk_results_add(ctx, out, full, &t);
}

/* A gradient output's layout ([CASE-PROG-OUTPUT]): a linear's dW [n, dim] BF16, a gdn's
 * [2, rows * heads] FP32 (dg then dbeta), an mla op's FP32 gradients of the parameters it
 * uses, concatenated in parameter order (1-D). */
static qs_status add_grad(qs_ctx *ctx, qsk_results *out, const walk *w, const qskp_node *s)
{
    char local[QSK_NAME_LEN + 8];
    snprintf(local, sizeof local, "grad.%s", s->name);
    if (s->kind == QSKP_LINEAR) {
        const qsk_input *wt = qsk_case_input(w->c, s->in[0]);
        return add_layout(ctx, out, w->v->name, local, QS_BF16, 2, wt->shape);
    }
    if (s->kind == QSKP_GDN) {
        int64_t shape[2] = {2, w->rows * s->heads};
        return add_layout(ctx, out, w->v->name, local, QS_FP32, 2, shape);
    }
    int64_t total = 0; /* QSKP_MLA */
    for (int pm = 0; pm < QS_MLA_PARAM_COUNT; pm++) {
        const qsk_input *in = s->mla.w[pm][0] ? qsk_case_input(w->c, s->mla.w[pm]) : NULL;
        total += in ? input_numel(in) : 0;
    }
    return add_layout(ctx, out, w->v->name, local, QS_FP32, 1, &total);
}

/* One variant's outputs, in the order the reference's run lists them: y, dx, trace, then
 * each op's gradient. dx has the program input's shape; its dtype is the first op's
 * backward's: BF16 after a linear (its dgrad, [GEMM-LIN-HP]), else the input's dtype (gelu,
 * gdn and mla round their input gradient to their input's dtype). */
static qs_status variant_layouts(qs_ctx *ctx, const qsk_case *c, const qskp_variant *v,
                                 qsk_results *out)
{
    const qskp_program *p = c->program;
    const qsk_input *x = qsk_case_input(c, v->x);
    const qskp_node *last = &p->root.body[p->root.nbody - 1];
    int backward = last->kind == QSKP_BACKWARD && qskp_node_in(last, v);
    walk w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.v = v;
    if (!x || x->ndim != 2)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "case %s variant %s: the program input is not a 2-D input", c->id,
                            v->name);
    w.dtype = x->dtype;
    w.rows = x->shape[0];
    w.dim = x->shape[1];
    walk_region(&w, &p->root);
    int64_t y[2] = {w.rows, w.dim}, none = 0;
    qs_dtype dx = w.first_op == QSKP_LINEAR ? QS_BF16 : x->dtype;
    qs_status st = add_layout(ctx, out, v->name, "y", w.dtype, 2, y);
    if (st == QS_OK && backward)
        st = add_layout(ctx, out, v->name, "dx", dx, 2, x->shape);
    if (st == QS_OK)
        st = add_layout(ctx, out, v->name, "trace", QS_U8, 1, &none);
    for (int i = 0; backward && i < w.ngrads && st == QS_OK; i++)
        st = add_grad(ctx, out, &w, w.grad_ops[i]);
    return st;
}

qs_status qsk_program_framework_layouts(qs_ctx *ctx, const qsk_case *c, qsk_results *out)
{
    const qskp_program *p = c->program;
    qs_status st = QS_OK;
    for (size_t i = 0; p && i < p->nvariants && st == QS_OK; i++)
        if (!qsk_program_framework_why(&p->variants[i]))
            st = variant_layouts(ctx, c, &p->variants[i], out);
    return st;
}
