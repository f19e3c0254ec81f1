/* program.h: programs in case files (spec/cases.md, Programs) — the tree of scoping regions
 * over ops that a case with `op: program` holds, its variants (tags, steps, injected
 * errors, expected errors, expected traces and quantizer states, comparisons with each
 * other), the loader that checks all of it against the case's inputs and reports
 * file:line:col, and the runner that interprets it on the reference engine
 * (include/qspec/program.h). */
#ifndef QSPEC_KIT_PROGRAM_H
#define QSPEC_KIT_PROGRAM_H

#include "cases.h"
#include "qspec/distributed.h"
#include "qspec/program.h"

#define QSKP_MAX_TAGS   8
#define QSKP_MAX_CMP    16
#define QSKP_MAX_STEPS  64
#define QSKP_MAX_OUTSEL 16
#define QSKP_MAX_GROUPS 8 /* groups a variant on several ranks defines [CASE-PROG-RANKS] */

/* Statement kinds [CASE-PROG]. `sdpa` is a reserved name: the engine has no such op yet,
 * so the loader rejects it (see the op table in program.c). */
typedef enum qskp_kind {
    QSKP_ROOT = 0,
    QSKP_AUTOCAST,
    QSKP_CALIBRATE,
    QSKP_ISLAND,
    QSKP_CHECKPOINT,
    QSKP_LINEAR,
    QSKP_GDN,
    QSKP_GELU,
    QSKP_MLA,
    QSKP_BACKWARD,
    QSKP_KIND_COUNT
} qskp_kind;

/* The input names an op statement reads (linear: w; gdn: g, beta; backward: dy; an mla op
 * names its weights in its mla block). */
#define QSKP_MAX_OP_INPUTS 4

/* Whether a statement kind is an op (linear, gdn, gelu, mla). */
#define QSKP_IS_OP(k) ((k) == QSKP_LINEAR || (k) == QSKP_GDN || (k) == QSKP_GELU || (k) == QSKP_MLA)

/* The most sequences of an mla op in the thd layout. */
#define QSKP_MLA_MAX_SEQS 64

/* An mla op's fields [CASE-PROG-OP] (include/qspec/program.h, qs_program_mla_params): the
 * configuration (hidden taken from w_dkv's shape), layout, mask, b and s (s 0: rows / b,
 * decided when the program is built), thd's cu_seqlens, the K/V form (split: w_uk and w_uv
 * instead of w_ukv), the up-projection recompute (always, or in the variants with a tag),
 * and the input names of its weights by
 * qs_mla_param ("" for a parameter the configuration does not use). */
typedef struct qskp_mla {
    qs_mla_config cfg;
    qs_attn_layout layout;
    qs_attn_mask mask;
    int64_t b, s;
    int32_t cu_seqlens[QSKP_MLA_MAX_SEQS + 1];
    int split, recompute_up_proj;
    char recompute_when[QSK_NAME_LEN]; /* "" : recompute_up_proj; else on with this tag */
    char w[QS_MLA_PARAM_COUNT][QSK_NAME_LEN];
    qsk_pos w_pos[QS_MLA_PARAM_COUNT];
} qskp_mla;

typedef struct qskp_node {
    qskp_kind kind;
    qsk_pos pos;
    char name[QS_TRACE_NAME_LEN]; /* ops: required and unique; regions: optional */
    char when[QSK_NAME_LEN];      /* present only in variants with this tag ("" none) */
    char unless[QSK_NAME_LEN];    /* absent in variants with this tag ("" none) */
    /* autocast and calibrate [CASE-PROG-REGION] */
    int enabled, calibrating, group, has_recipe;
    qs_scope_recipe recipe;
    /* ops [CASE-PROG-OP]: input names, in the order of the op's table entry */
    char in[QSKP_MAX_OP_INPUTS][QSK_NAME_LEN];
    qsk_pos in_pos[QSKP_MAX_OP_INPUTS];
    int64_t heads;          /* gdn ops: heads (1 unless given) */
    qskp_mla mla;           /* mla ops */
    struct qskp_node *body; /* regions: the statements of the body */
    size_t nbody;
} qskp_node;

/* One comparison between variants [CASE-PROG-COMPARE]. */
typedef enum { QSKP_SAME_AS, QSKP_DIFFERS_FROM, QSKP_CLOSE_TO } qskp_cmp_kind;

typedef struct qskp_cmp {
    qskp_cmp_kind kind;
    qsk_pos pos;
    char variant[QSK_NAME_LEN];
    char outputs[QSKP_MAX_OUTSEL][QSK_NAME_LEN]; /* y, dx, grads, grad.NAME[.PARAM], state,
                                                    trace */
    size_t noutputs;
    qsk_output tol; /* close_to: the tolerance, as an output's compare would hold it */
} qskp_cmp;

/* One expected trace record [CASE-PROG-TRACE]; fields marked unchecked are not compared. */
typedef enum { QSKP_BITS_NONE, QSKP_BITS_HEX, QSKP_BITS_PREV } qskp_bits_kind;

typedef struct qskp_trace_exp {
    qsk_pos pos;
    qs_trace_phase phase;
    char op[QS_TRACE_NAME_LEN];
    char kind[QS_TRACE_NAME_LEN]; /* "" unchecked */
    qs_precision precision;
    int has_recipe; /* recipe given and not null */
    qs_recipe_kind recipe;
    int first_module;
    int scales_given;
    qs_trace_scales scales;
    int dtype_given;
    qs_dtype dtype;
    int nbits; /* -1: scale_bits not checked */
    qskp_bits_kind bits_kind[2];
    uint32_t bits[2];
} qskp_trace_exp;

/* One expectation on a quantizer's delayed-scaling state [CASE-PROG-STATE]. */
typedef enum {
    QSKP_SCALE_UNCHECKED,
    QSKP_SCALE_INITIAL,
    QSKP_SCALE_PREV,
    QSKP_SCALE_HISTORY
} qskp_scale_rule;

typedef struct qskp_state_exp {
    qsk_pos pos;
    char op[QS_TRACE_NAME_LEN];
    int linear; /* an mla op's linear (qs_mla_linear); -1 for a linear op */
    qs_scope_role role;
    qs_recipe_kind recipe;
    int step;                   /* after this step (0: the variant's last) */
    int exists;                 /* 1: the quantizer must exist; 0: it must not */
    int64_t filled;             /* -1 unchecked: the number of nonzero history slots */
    char amax_of[QSK_NAME_LEN]; /* "" unchecked: the history holds amax of this input */
    int amax_slot;              /* -1: any slot */
    qskp_scale_rule scale;
} qskp_state_exp;

/* inject_error [CASE-PROG-INJECT]. */
typedef enum {
    QSKP_INJECT_NONE,
    QSKP_INJECT_NAMED,
    QSKP_INJECT_NUMBER,
    QSKP_INJECT_EVERY
} qskp_inject_kind;

typedef struct qskp_inject {
    qskp_inject_kind kind;
    qsk_pos pos;
    char step_name[32]; /* the engine's name of the step kind ("gdn backward") */
    int64_t nth;        /* the n-th step of that kind, or the n-th step of the run */
    int step;           /* which training step of the variant (0: the last) */
    int retry;          /* run the step again after the injected failure (default 1) */
} qskp_inject;

/* expect_error [CASE-PROG-ERROR]. */
typedef struct qskp_error {
    int set;
    qsk_pos pos;
    qs_status code;
    char message[256]; /* a substring the message must contain ("" none) */
    int step;          /* the training step that fails (0: the last) */
} qskp_error;

typedef struct qskp_variant {
    char name[QSK_NAME_LEN];
    qsk_pos pos;
    char tags[QSKP_MAX_TAGS][QSK_NAME_LEN];
    int ntags;
    char x[QSK_NAME_LEN];  /* the program input (default "x") */
    char dy[QSK_NAME_LEN]; /* "" : the backward statement's */
    int steps;
    qs_replay_variant replay;
    uint64_t rng_seed, rng_offset;
    qskp_inject inject;
    qskp_error error;
    qskp_trace_exp *trace;
    size_t ntrace;
    int has_trace, trace_step;
    qskp_state_exp *state;
    size_t nstate;
    qskp_cmp cmp[QSKP_MAX_CMP];
    size_t ncmp;
    int replays; /* -1 unchecked: the number of replays of the last step [CASE-PROG-REPLAYS] */
    /* [CASE-PROG-RANKS]: the ranks the variant runs on (1: one context, as before), how
     * its inputs are sharded, the groups it defines (colors per rank; a group the program
     * names and the variant does not define is the world group), and the reductions
     * expected on every rank in the last step, per group (-1 unchecked). */
    int ranks;
    qs_dist_parallel parallel;
    int ngroups;
    int group_id[QSKP_MAX_GROUPS];
    int color[QSKP_MAX_GROUPS][QS_DIST_MAX_RANKS];
    int nreductions;
    int red_group[QSKP_MAX_GROUPS];
    int64_t red_count[QSKP_MAX_GROUPS];
    qsk_pos ranks_pos;
} qskp_variant;

typedef struct qskp_program {
    qskp_node root; /* QSKP_ROOT: the top-level statements */
    qskp_variant *variants;
    size_t nvariants;
} qskp_program;

/* Loads the program keys of the case mapping n (program, variants, expect_error) into
 * *out and checks them against c's inputs (already loaded): structure, names, shapes,
 * dtypes, the island policy where it is static [CASE-PROG-ISLAND-CHECK]. Errors are
 * "path:line:col: message" with QS_ERR_FORMAT. */
qs_status qskp_load(qs_ctx *ctx, const char *path, const qsk_ynode *n, const qsk_case *c,
                    qskp_program **out);
void qskp_free(qskp_program *p);

/* Whether statement s is part of variant v ([CASE-PROG-VARIANT] when/unless). */
int qskp_node_in(const qskp_node *s, const qskp_variant *v);
/* The variant named name, or NULL. */
const qskp_variant *qskp_variant_find(const qskp_program *p, const char *name);
/* The op statement named name that variant v includes, or NULL. */
const qskp_node *qskp_op_find(const qskp_program *p, const qskp_variant *v, const char *name);

/* The op a gradient selector names ("NAME" or, for an mla op, "NAME.PARAM") in variant v,
 * or NULL; *param gets the parameter (qs_mla_param) or -1 for the op's whole gradient. */
const qskp_node *qskp_grad_find(const qskp_program *p, const qskp_variant *v, const char *sel,
                                int *param);

/* Splits a trace op name: "NAME" (a linear or gdn op) or "NAME/PART" (an mla op's linear,
 * or its k_absorb or v_absorb einsum). *op gets the op (NULL when v has none of that name),
 * *part the linear (qs_mla_linear), QS_MLA_LINEAR_COUNT for k_absorb, +1 for v_absorb, or
 * -1 without a part. */
void qskp_trace_op_split(const qskp_program *p, const qskp_variant *v, const char *name,
                         const qskp_node **op, int *part);

/* The name of a step kind as inject_error writes it ("gdn_backward") mapped to the engine's
 * name ("gdn backward"); NULL when unknown. */
const char *qskp_step_engine_name(const char *yaml_name);

struct qsk_results;

/* [CASE-PLUGIN-TOL] The normwise relative error ||x - e||_2 / ||e||_2, or -1 when it cannot
 * be taken (another element count, a NaN); 0 when both are all zeros, +inf when only e is. */
double qsk_normwise_error(const qs_tensor *e, const qs_tensor *x);

/* [CASE-GEN-PROG] Why an external framework cannot run variant v (an injected fault, an
 * expected engine error, simulated ranks, a non-normative replay variant), or NULL. */
const char *qsk_program_framework_why(const qskp_variant *v);
/* Runs every variant of program case c on the reference, with every check of a run, and
 * adds the outputs of each variant a framework can run to out: "V/y", "V/dx", "V/grad.OP"
 * (every op of the variant, in build order) and "V/trace" (JSON lines, u8). */
qs_status qsk_program_framework_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                                    struct qsk_results *out);
/* [CASE-VERIFY-SELF] The same outputs by name, dtype and shape only (no data: each tensor's
 * data is NULL), derived from the program and the inputs c declares without running it;
 * "V/trace" is listed with no elements. The layouts are those qsk_program_framework_ref
 * gives. */
qs_status qsk_program_framework_layouts(qs_ctx *ctx, const qsk_case *c, struct qsk_results *out);

#endif
