/* ops.h: the ops a conformance case can name (spec/cases.md [CASE-OP-*]). Each op checks
 * its parameters and inputs at load time, computes its outputs with the reference, and
 * runs on a backend plugin through the matching slot when the plugin has the capability. */
#ifndef QSPEC_KIT_OPS_H
#define QSPEC_KIT_OPS_H

#include "cases.h"
#include "plugin.h"

#define QSK_MAX_OUTPUTS 96

/* The named tensors an op produces; "NAME.bound" holds a gemm_bound's per-element bound. */
typedef struct qsk_results {
    char names[QSK_MAX_OUTPUTS][QSK_NAME_LEN];
    qs_tensor t[QSK_MAX_OUTPUTS];
    size_t n;
    /* set by a backend run for an output the op already compared with the reference
     * ([CASE-PLUGIN-TOL]): the case's own comparison is then not applied to it */
    int checked[QSK_MAX_OUTPUTS];
} qsk_results;

typedef struct qsk_op {
    const char *name;
    const char *summary;
    /* Validates params and inputs of c; errors are file:line:col messages (QS_ERR_FORMAT). */
    qs_status (*check)(qs_ctx *ctx, const qsk_case *c);
    /* Computes every output with the reference. */
    qs_status (*run_ref)(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out);
    /* Runs on a plugin; QS_ERR_UNSUPPORTED when the plugin lacks the capability or slot.
     * ref holds the outputs run_ref computed for the same inputs (NULL when the reference
     * did not run, [CASE-TIER-SELF]): an op that compares with the reference itself reads
     * them and never runs the reference again. */
    qs_status (*run_backend)(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                             const qs_tensor *inputs, const qsk_results *ref, qsk_results *out);
} qsk_op;

const qsk_op *qsk_op_find(const char *name);
/* Validates a loaded case against its op (unknown op, bad params, missing inputs,
 * outputs the op does not produce). */
qs_status qsk_case_check(qs_ctx *ctx, const qsk_case *c);
/* The output named name, or NULL. */
const qs_tensor *qsk_results_get(const qsk_results *r, const char *name);
/* The ranks a distributed case runs on (its `ranks` parameter, spec/cases.md [CASE-RANKS]),
 * 0 for any other case. */
int qsk_case_dist_ranks(const qsk_case *c);
/* Appends a tensor (ownership moves to r). */
qs_status qsk_results_add(qs_ctx *ctx, qsk_results *r, const char *name, qs_tensor *t);
void qsk_results_free(qsk_results *r);
/* The run_backend of an op whose kernels ABI v1 has no slot for yet: every plugin answers
 * QS_ERR_UNSUPPORTED, so its cases are reported as not supported [CASE-BACKEND-UNSUPPORTED]. */
qs_status qsk_op_no_backend_slot(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                                 const qs_tensor *inputs, const qsk_results *ref, qsk_results *out);
/* The generated tensor of the case's input named name (inputs[] is in case order). */
const qs_tensor *qsk_input_tensor(const qsk_case *c, const qs_tensor *inputs, const char *name);
/* The list of ops, for `qspec show` and the docs. */
const qsk_op *const *qsk_ops(size_t *n);

#endif
