/* ops.c: the op table and the shared checks on a case's params, inputs and outputs.
 * Each op lives in its own op_*.c file; this file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "ops.h"

extern const qsk_op qsk_op_cast;
extern const qsk_op qsk_op_gemm;
extern const qsk_op qsk_op_quantize;
extern const qsk_op qsk_op_sdpa;
extern const qsk_op qsk_op_gdn;
extern const qsk_op qsk_op_program;

static const qsk_op *const op_table[] = {
    &qsk_op_cast, &qsk_op_gemm, &qsk_op_quantize, &qsk_op_sdpa, &qsk_op_gdn, &qsk_op_program,
};

const qsk_op *const *qsk_ops(size_t *n)
{
    *n = sizeof op_table / sizeof op_table[0];
    return op_table;
}

const qsk_op *qsk_op_find(const char *name)
{
    for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; i++)
        if (strcmp(op_table[i]->name, name) == 0)
            return op_table[i];
    return NULL;
}

qs_status qsk_case_check(qs_ctx *ctx, const qsk_case *c)
{
    const qsk_op *op = qsk_op_find(c->op);
    if (!op)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: unknown op '%s'", c->file,
                            c->op_pos.line, c->op_pos.col, c->op);
    return op->check(ctx, c);
}

const qs_tensor *qsk_results_get(const qsk_results *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->names[i], name) == 0)
            return &r->t[i];
    return NULL;
}

qs_status qsk_results_add(qs_ctx *ctx, qsk_results *r, const char *name, qs_tensor *t)
{
    if (r->n == QSK_MAX_OUTPUTS) {
        qs_tensor_free(t);
        return qs_ctx_error(ctx, QS_ERR_INTERNAL, "too many outputs");
    }
    snprintf(r->names[r->n], QSK_NAME_LEN, "%s", name);
    r->t[r->n] = *t;
    memset(t, 0, sizeof *t);
    r->n++;
    return QS_OK;
}

void qsk_results_free(qsk_results *r)
{
    for (size_t i = 0; i < r->n; i++)
        qs_tensor_free(&r->t[i]);
    r->n = 0;
}

const qs_tensor *qsk_input_tensor(const qsk_case *c, const qs_tensor *inputs, const char *name)
{
    const qsk_input *in = qsk_case_input(c, name);
    return in ? &inputs[in - c->inputs] : NULL;
}

qs_status qsk_op_no_backend_slot(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                                 const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref;
    (void)ctx;
    (void)p;
    (void)c;
    (void)inputs;
    (void)out;
    return QS_ERR_UNSUPPORTED;
}
