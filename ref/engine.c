/* engine.c: the reference engine of spec/recompute.md — programs (trees of regions over
 * linear, gelu, gdn and mla ops), run forward on a tape and backward from an output gradient, with
 * checkpointed regions recorded and replayed [RCP-RECORD] [RCP-REPLAY], an mla op's
 * mla_up_proj region checkpointed the same way [RCP-MLA-UP-PROJ], a trace record per op
 * execution [RCP-TRACE], the delayed-scaling update timing of spec/scoping.md, and failure
 * atomicity: a failed run leaves every state as before [SCOPE-FAIL-ATOMIC]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "checkpoint_internal.h"
#include "internal.h"
#include "kernels_internal.h"
#include "mla_internal.h"
#include "recipe_internal.h"
#include "qspec/attention.h"
#include "qspec/distributed.h"
#include "qspec/format.h"
#include "qspec/linear.h"
#include "qspec/mathf.h"
#include "qspec/program.h"

/* ------------------------------------------------------------ programs */

typedef enum qsi_node_kind {
    QSI_N_ROOT = 0,
    QSI_N_AUTOCAST,
    QSI_N_CALIBRATE,
    QSI_N_ISLAND,
    QSI_N_CHECKPOINT,
    QSI_N_LINEAR,
    QSI_N_GDN,
    QSI_N_GELU,   /* the tanh-form GELU [RCP-GELU-OP]: no parameters, never quantized */
    QSI_N_MLA,    /* an mla op; its linears are QSI_N_MLA_LIN children, never run by the tree */
    QSI_N_MLA_LIN /* one linear of an mla op: its trace name and quantizers */
} qsi_node_kind;

/* What an mla op keeps: its configuration, token shape (the dtype is the activation's at
 * run time), weight values and the node of each linear it runs. */
typedef struct qsi_mla_op {
    qs_mla_config cfg;
    qs_mla_shape shape;
    int32_t *cu;
    int split;
    int recompute_up;
    float *wv[QS_MLA_PARAM_COUNT]; /* NULL when the configuration does not use it */
    int wnd[QS_MLA_PARAM_COUNT];
    int64_t wshape[QS_MLA_PARAM_COUNT][2];
    qs_mla_weights w; /* views of wv */
    int sub[QS_MLA_LINEAR_COUNT];
} qsi_mla_op;

typedef struct qsi_node {
    qsi_node_kind kind;
    int parent, first_child, last_child, next;
    char name[QS_TRACE_NAME_LEN];
    qs_autocast_params params; /* autocast, calibrate (recipe pointer unused) */
    int has_recipe;
    qs_scope_recipe recipe;
    int op; /* op index, -1 for regions */
    qs_tensor w;
    qs_quantizer q[QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT];
    int qinit[QS_RECIPE_COUNT];
    int64_t rows, heads; /* gdn: tokens, and heads (g, beta hold rows * heads values) */
    float *g, *beta;
    qsi_mla_op *mla;
} qsi_node;

struct qs_program {
    qsi_node *nodes;
    int n, cap;
    int nops;
    qs_replay_variant variant;
};

static int is_region(qsi_node_kind k)
{
    return k != QSI_N_LINEAR && k != QSI_N_GDN && k != QSI_N_GELU && k != QSI_N_MLA &&
           k != QSI_N_MLA_LIN;
}

/* The nodes that run as a quantizable linear: linear ops and the linears of mla ops. */
static int is_linear(qsi_node_kind k)
{
    return k == QSI_N_LINEAR || k == QSI_N_MLA_LIN;
}

/* dst = "<op>/<part>", a trace name (the builder keeps op short enough; longer is cut). */
static void part_name(char *dst, const char *op, const char *part)
{
    size_t n = strlen(op), k = strlen(part);
    if (n + 1 + k >= QS_TRACE_NAME_LEN)
        n = QS_TRACE_NAME_LEN > k + 2 ? QS_TRACE_NAME_LEN - k - 2 : 0;
    memcpy(dst, op, n);
    dst[n] = '/';
    memcpy(dst + n + 1, part, k + 1);
}

static void mla_op_free(qsi_mla_op *op)
{
    if (!op)
        return;
    for (int i = 0; i < QS_MLA_PARAM_COUNT; i++)
        free(op->wv[i]);
    free(op->cu);
    free(op);
}

qs_status qs_program_new(qs_ctx *ctx, qs_program **out)
{
    if (!out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_new: out is NULL");
    qs_program *p = calloc(1, sizeof *p);
    if (p)
        p->nodes = calloc(8, sizeof *p->nodes);
    if (!p || !p->nodes) {
        free(p);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_new: out of memory");
    }
    p->cap = 8;
    p->n = 1;
    p->nodes[0].kind = QSI_N_ROOT;
    p->nodes[0].first_child = p->nodes[0].last_child = p->nodes[0].next = -1;
    p->nodes[0].op = -1;
    *out = p;
    return QS_OK;
}

static void free_quantizers(qsi_node *n, int kind)
{
    for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++)
        qs_quantizer_free(&n->q[kind][r]);
    n->qinit[kind] = 0;
}

void qs_program_free(qs_program *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        qsi_node *n = &p->nodes[i];
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            if (n->qinit[k])
                free_quantizers(n, k);
        qs_tensor_free(&n->w);
        free(n->g);
        free(n->beta);
        mla_op_free(n->mla);
    }
    free(p->nodes);
    free(p);
}

/* Appends a node of kind as the last child of parent (any node); its index in *id. */
static qs_status add_child(qs_ctx *ctx, qs_program *p, int parent, qsi_node_kind kind, int *id)
{
    if (p->n == p->cap) {
        qsi_node *nn = realloc(p->nodes, (size_t)(2 * p->cap) * sizeof *nn);
        if (!nn)
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "program: out of memory");
        p->nodes = nn;
        p->cap *= 2;
    }
    int i = p->n++;
    qsi_node *n = &p->nodes[i];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->parent = parent;
    n->first_child = n->last_child = n->next = -1;
    n->op = -1;
    qsi_node *par = &p->nodes[parent];
    if (par->last_child < 0)
        par->first_child = i;
    else
        p->nodes[par->last_child].next = i;
    par->last_child = i;
    *id = i;
    return QS_OK;
}

/* Appends a node of kind under the region parent; returns its index in *id. */
static qs_status add_node(qs_ctx *ctx, qs_program *p, int parent, qsi_node_kind kind, int *id)
{
    if (!p || !id)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program: NULL program or id");
    if (parent < 0 || parent >= p->n || !is_region(p->nodes[parent].kind))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program: parent %d is not a region of this program", parent);
    return add_child(ctx, p, parent, kind, id);
}

/* Removes the last node again (a builder that failed after add_node). */
static void drop_last(qs_program *p)
{
    int i = --p->n;
    qsi_node *par = &p->nodes[p->nodes[i].parent];
    if (par->first_child == i) {
        par->first_child = par->last_child = -1;
        return;
    }
    for (int c = par->first_child; c >= 0; c = p->nodes[c].next)
        if (p->nodes[c].next == i) {
            p->nodes[c].next = -1;
            par->last_child = c;
        }
}

qs_status qs_program_autocast(qs_ctx *ctx, qs_program *p, int parent,
                              const qs_autocast_params *params, int *id)
{
    if (!params)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_autocast: params is NULL");
    if ((params->enabled || params->calibrating) && !params->recipe)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program_autocast: an enabled or calibrating region needs a recipe");
    qs_status s = add_node(ctx, p, parent, QSI_N_AUTOCAST, id);
    if (s != QS_OK)
        return s;
    qsi_node *n = &p->nodes[*id];
    n->params = *params;
    n->params.recipe = NULL;
    n->has_recipe = params->recipe != NULL;
    if (params->recipe)
        n->recipe = *params->recipe;
    return QS_OK;
}

qs_status qs_program_calibrate(qs_ctx *ctx, qs_program *p, int parent, const qs_scope_recipe *r,
                               int *id)
{
    qs_autocast_params a = {0, 1, r, 0};
    qs_status s = qs_program_autocast(ctx, p, parent, &a, id);
    if (s == QS_OK)
        p->nodes[*id].kind = QSI_N_CALIBRATE;
    return s;
}

qs_status qs_program_island(qs_ctx *ctx, qs_program *p, int parent, int *id)
{
    return add_node(ctx, p, parent, QSI_N_ISLAND, id);
}

qs_status qs_program_checkpoint(qs_ctx *ctx, qs_program *p, int parent, int *id)
{
    return add_node(ctx, p, parent, QSI_N_CHECKPOINT, id);
}

/* Op names must be unique: the trace and the audit key on them. '/' is reserved for the
 * parts of an mla op ("<op>/<linear>"), which are therefore unique too [RCP-MLA-TRACE]. */
static qs_status check_op_name(qs_ctx *ctx, const qs_program *p, const char *name)
{
    if (!name || !name[0] || strlen(name) >= QS_TRACE_NAME_LEN)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program: an op name must have 1 to %d characters",
                            QS_TRACE_NAME_LEN - 1);
    if (strchr(name, '/'))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program: op name '%s' contains '/' (reserved for mla parts)", name);
    for (int i = 0; p && i < p->n; i++)
        if (p->nodes[i].op >= 0 && strcmp(p->nodes[i].name, name) == 0)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program: op name '%s' is used twice",
                                name);
    return QS_OK;
}

qs_status qs_program_linear(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                            const qs_tensor *w, int *id)
{
    qs_status s = check_op_name(ctx, p, name);
    if (s != QS_OK)
        return s;
    if (!w || w->ndim != 2 || w->dtype != QS_BF16)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_linear: '%s' needs a 2-D bf16 weight",
                            name);
    if ((s = add_node(ctx, p, parent, QSI_N_LINEAR, id)) != QS_OK)
        return s;
    qsi_node *n = &p->nodes[*id];
    if ((s = qs_tensor_clone(ctx, &n->w, w)) != QS_OK) {
        drop_last(p);
        return s;
    }
    strcpy(n->name, name);
    n->op = p->nops++;
    return QS_OK;
}

qs_status qs_program_gdn(qs_ctx *ctx, qs_program *p, int parent, const char *name, int64_t rows,
                         const float *g, const float *beta, int *id)
{
    return qs_program_gdn_heads(ctx, p, parent, name, rows, 1, g, beta, id);
}

qs_status qs_program_gdn_heads(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                               int64_t rows, int64_t heads, const float *g, const float *beta,
                               int *id)
{
    qs_status s = check_op_name(ctx, p, name);
    if (s != QS_OK)
        return s;
    if (rows < 1 || heads < 1 || heads > (INT64_C(1) << 20) || !g || !beta)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program_gdn: '%s' needs rows >= 1, heads from 1 to 2^20 and gate "
                            "parameters g, beta",
                            name);
    if ((s = add_node(ctx, p, parent, QSI_N_GDN, id)) != QS_OK)
        return s;
    qsi_node *n = &p->nodes[*id];
    size_t nv = (size_t)rows * (size_t)heads;
    n->g = malloc(nv * sizeof(float));
    n->beta = malloc(nv * sizeof(float));
    if (!n->g || !n->beta) {
        free(n->g);
        free(n->beta);
        drop_last(p);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_gdn: out of memory");
    }
    memcpy(n->g, g, nv * sizeof(float));
    memcpy(n->beta, beta, nv * sizeof(float));
    n->rows = rows;
    n->heads = heads;
    strcpy(n->name, name);
    n->op = p->nops++;
    return QS_OK;
}

/* [RCP-GELU-OP]: an op without parameters; its gradient slot stays empty. */
qs_status qs_program_gelu(qs_ctx *ctx, qs_program *p, int parent, const char *name, int *id)
{
    qs_status s = check_op_name(ctx, p, name);
    if (s != QS_OK)
        return s;
    if ((s = add_node(ctx, p, parent, QSI_N_GELU, id)) != QS_OK)
        return s;
    qsi_node *n = &p->nodes[*id];
    strcpy(n->name, name);
    n->op = p->nops++;
    return QS_OK;
}

/* The values of a weight tensor of parameter pi: the shape qs_mla_param_shape gives,
 * FP32, BF16 or FP16. */
static qs_status mla_copy_weight(qs_ctx *ctx, const char *name, qsi_mla_op *op, int pi,
                                 const qs_tensor *t)
{
    const char *pn = qs_mla_param_name((qs_mla_param)pi);
    int nd = qs_mla_param_shape(&op->cfg, op->split, (qs_mla_param)pi, op->wshape[pi]);
    if (!nd && t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program_mla: '%s' does not use weight %s (with %s K/V weights)", name,
                            pn, op->split ? "split" : "combined");
    if (!nd)
        return QS_OK;
    if (!t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_mla: '%s' needs weight %s", name, pn);
    int ok = t->ndim == nd && t->shape[0] == op->wshape[pi][0] &&
             (nd == 1 || t->shape[1] == op->wshape[pi][1]);
    if (!ok && nd == 1)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "program_mla: '%s' weight %s must be [%lld] [MLA-SHAPES]", name, pn,
                            (long long)op->wshape[pi][0]);
    if (!ok)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "program_mla: '%s' weight %s must be [%lld, %lld] [MLA-SHAPES]", name,
                            pn, (long long)op->wshape[pi][0], (long long)op->wshape[pi][1]);
    if (t->dtype != QS_FP32 && t->dtype != QS_BF16 && t->dtype != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE,
                            "program_mla: '%s' weight %s must be fp32, bf16 or fp16", name, pn);
    op->wnd[pi] = nd;
    op->wv[pi] = malloc(t->numel * sizeof(float) + 1);
    if (!op->wv[pi])
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_mla: out of memory");
    for (size_t i = 0; i < t->numel; i++) {
        if (t->dtype == QS_FP32)
            op->wv[pi][i] = ((const float *)t->data)[i];
        else if (t->dtype == QS_BF16)
            op->wv[pi][i] = qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
        else
            op->wv[pi][i] = qs_f16_to_f32(((const uint16_t *)t->data)[i]);
    }
    return QS_OK;
}

/* Validates mp and copies it into a new op [MLA-SHAPES] [RCP-MLA-OP]. */
static qs_status mla_op_new(qs_ctx *ctx, const char *name, const qs_program_mla_params *mp,
                            qsi_mla_op **out)
{
    qsi_mla_op *op = calloc(1, sizeof *op);
    if (!op)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_mla: out of memory");
    op->cfg = mp->cfg;
    op->split = mp->w[QS_MLA_W_UKV] == NULL;
    op->recompute_up = mp->recompute_up_proj != 0;
    op->shape.layout = mp->layout;
    op->shape.mask = mp->mask;
    op->shape.b = mp->b;
    op->shape.s = mp->s;
    op->shape.dtype = QS_BF16; /* the activation's, at run time */
    qs_status s = QS_OK;
    if ((unsigned)mp->mask >= QS_ATTN_MASK_COUNT)
        s = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_mla: '%s' has a bad mask", name);
    if (s == QS_OK && mp->layout == QS_ATTN_THD && mp->b >= 0 && mp->b < (1 << 20)) {
        op->cu = malloc((size_t)(mp->b + 1) * sizeof(int32_t));
        if (!op->cu)
            s = qs_ctx_error(ctx, QS_ERR_NOMEM, "program_mla: out of memory");
        else if (!mp->cu_seqlens)
            s = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_mla: '%s' (thd) needs cu_seqlens",
                             name);
        else
            memcpy(op->cu, mp->cu_seqlens, (size_t)(mp->b + 1) * sizeof(int32_t));
        op->shape.cu_seqlens = op->cu;
    }
    for (int pi = 0; s == QS_OK && pi < QS_MLA_PARAM_COUNT; pi++)
        s = mla_copy_weight(ctx, name, op, pi, mp->w[pi]);
    qs_mla_weights *w = &op->w;
    w->w_dq = op->wv[QS_MLA_W_DQ], w->q_norm = op->wv[QS_MLA_Q_NORM];
    w->w_uq = op->wv[QS_MLA_W_UQ], w->w_q = op->wv[QS_MLA_W_Q];
    w->w_dkv = op->wv[QS_MLA_W_DKV], w->kv_norm = op->wv[QS_MLA_KV_NORM];
    w->w_ukv = op->wv[QS_MLA_W_UKV], w->w_uk = op->wv[QS_MLA_W_UK];
    w->w_uv = op->wv[QS_MLA_W_UV], w->w_o = op->wv[QS_MLA_W_O];
    qsi_mla_block blk = {&op->cfg, &op->shape, &op->w};
    if (s == QS_OK)
        s = qsi_mla_check(ctx, "program_mla", &blk);
    if (s != QS_OK) {
        mla_op_free(op);
        return s;
    }
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        op->sub[l] = -1;
    *out = op;
    return QS_OK;
}

qs_status qs_program_mla(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                         const qs_program_mla_params *mp, int *id)
{
    qs_status s = check_op_name(ctx, p, name);
    if (s != QS_OK)
        return s;
    if (!mp)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_mla: '%s' has NULL params", name);
    if (strlen(name) + 10 > QS_TRACE_NAME_LEN)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program_mla: name '%s' is too long: its parts are traced as "
                            "'%s/out_proj' (at most %d characters)",
                            name, name, QS_TRACE_NAME_LEN - 1);
    qsi_mla_op *op = NULL;
    if ((s = mla_op_new(ctx, name, mp, &op)) != QS_OK)
        return s;
    int n0 = p ? p->n : 0;
    if ((s = add_node(ctx, p, parent, QSI_N_MLA, id)) != QS_OK) {
        mla_op_free(op);
        return s;
    }
    int me = *id;
    strcpy(p->nodes[me].name, name);
    for (int l = 0; s == QS_OK && l < QS_MLA_LINEAR_COUNT; l++) {
        if (!qs_mla_linear_used(&op->cfg, op->split, (qs_mla_linear)l))
            continue;
        int sid;
        s = add_child(ctx, p, me, QSI_N_MLA_LIN, &sid);
        if (s == QS_OK) {
            part_name(p->nodes[sid].name, name, qs_mla_linear_name((qs_mla_linear)l));
            op->sub[l] = sid;
        }
    }
    if (s != QS_OK) {
        while (p->n > n0)
            drop_last(p);
        mla_op_free(op);
        return s;
    }
    p->nodes[me].mla = op;
    p->nodes[me].op = p->nops++;
    return QS_OK;
}

qs_status qs_program_set_replay(qs_ctx *ctx, qs_program *p, qs_replay_variant v)
{
    if (!p || (unsigned)v >= QS_REPLAY_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_set_replay: bad argument");
    p->variant = v;
    return QS_OK;
}

int qs_program_op_count(const qs_program *p)
{
    return p ? p->nops : 0;
}

const qs_quantizer *qs_program_quantizer(const qs_program *p, int op, qs_recipe_kind kind,
                                         qs_scope_role role)
{
    if (!p || (unsigned)kind >= QS_RECIPE_COUNT || (unsigned)role >= QS_SCOPE_ROLE_COUNT)
        return NULL;
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i].op == op && p->nodes[i].kind == QSI_N_LINEAR)
            return p->nodes[i].qinit[kind] ? &p->nodes[i].q[kind][role] : NULL;
    return NULL;
}

const qs_quantizer *qs_program_mla_quantizer(const qs_program *p, int op, qs_mla_linear lin,
                                             qs_recipe_kind kind, qs_scope_role role)
{
    if (!p || (unsigned)lin >= QS_MLA_LINEAR_COUNT || (unsigned)kind >= QS_RECIPE_COUNT ||
        (unsigned)role >= QS_SCOPE_ROLE_COUNT)
        return NULL;
    for (int i = 0; i < p->n; i++) {
        if (p->nodes[i].op != op || p->nodes[i].kind != QSI_N_MLA)
            continue;
        int sid = p->nodes[i].mla->sub[lin];
        if (sid < 0 || !p->nodes[sid].qinit[kind])
            return NULL;
        return &p->nodes[sid].q[kind][role];
    }
    return NULL;
}

/* ------------------------------------------------------------ the tape */

struct qsi_run;

/* What an mla op's forward leaves for its backward: the block's state (every
 * intermediate and each linear's saved copies, less what the mla_up_proj checkpoint
 * discarded), its input values, and that checkpoint's record. */
typedef struct qsi_mla_tape {
    struct qsi_run *run;
    int id;
    qs_mla_shape shape;
    qsi_mla_block blk;
    qsi_mla_runner runner;
    float *x;
    qsi_mla_state *st;
    qsi_ckpt *ck; /* NULL when the region was not checkpointed */
} qsi_mla_tape;

static void mla_tape_free(qsi_mla_tape *m)
{
    if (!m)
        return;
    free(m->x);
    qsi_mla_state_free(m->st);
    qsi_ckpt_free(m->ck);
    free(m);
}

typedef struct qsi_entry {
    int node;
    qs_precision prec;
    qs_recipe_kind kind;
    int group;           /* the group in effect at the forward: its backward reduces over it */
    qs_tensor x;         /* saved input: high-precision or calibrating linear, gdn */
    qs_quantized xq, wq; /* saved copies: quantized linear */
    qsi_ckpt *ck;        /* a checkpointed region */
    qsi_mla_tape *mla;   /* an mla op */
} qsi_entry;

typedef struct qsi_tape {
    qsi_entry *e;
    int n, cap;
} qsi_tape;

static void entry_free(qsi_entry *e)
{
    qs_tensor_free(&e->x);
    qs_quantized_free(&e->xq);
    qs_quantized_free(&e->wq);
    qsi_ckpt_free(e->ck);
    mla_tape_free(e->mla);
    memset(e, 0, sizeof *e);
}

static void tape_free(qsi_tape *t)
{
    for (int i = 0; i < t->n; i++)
        entry_free(&t->e[i]);
    free(t->e);
    memset(t, 0, sizeof *t);
}

/* Moves *e onto the tape (e is cleared); on failure *e is freed. */
static qs_status tape_push(qs_ctx *ctx, qsi_tape *t, qsi_entry *e)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        qsi_entry *n = realloc(t->e, (size_t)cap * sizeof *n);
        if (!n) {
            entry_free(e);
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "engine: out of memory");
        }
        t->e = n;
        t->cap = cap;
    }
    t->e[t->n++] = *e;
    memset(e, 0, sizeof *e);
    return QS_OK;
}

/* ------------------------------------------------------------ run state */

typedef struct qsi_run {
    qs_ctx *ctx;
    qs_program *p;
    qs_program_result *res;
    int grad;               /* gradients enabled: a backward follows */
    int replaying;          /* inside a checkpoint replay */
    qsi_ckpt *rec;          /* the checkpoint being recorded, NULL if none */
    const qsi_ckpt *replay; /* the checkpoint being replayed */
    int step;               /* the current outermost region, -1 if none */
    int *step_of;           /* per node: its outermost region at forward time */
    int *fwd_quant;         /* per node: executed quantized in forward */
    int *fwd_kind;          /* per node: the recipe kind of that execution */
    int *first_of;          /* per node: consumed the first-module flag */
    int *fwd_group;         /* per node: the group in effect at that execution [DIST-DS-KEY] */
    int amax_at;            /* the next recorded amax a replay reads [DIST-REPLAY] */
} qsi_run;

static qs_status exec_children(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape);
static qs_status mla_fwd(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape);
static qs_status mla_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad);

static void set_name(qs_trace_record *r, const char *op, const char *kind)
{
    strcpy(r->op, op);
    strcpy(r->kind, kind);
}

/* [SCOPE-RNG]: a stochastic-rounding quantizer draws from the context's stream; the
 * offset advances by the number of elements quantized (numel). */
static void draw_rng(qs_ctx *ctx, qs_quantizer *q, size_t numel)
{
    if (!q->cfg.sr || q->cfg.kind != QS_RECIPE_NVFP4)
        return;
    q->cfg.seed = ctx->rng_seed;
    q->cfg.offset = ctx->rng_offset;
    ctx->rng_offset += (uint64_t)numel;
}

/* Creates the quantizers of node n for recipe r on first use; a later use must carry the
 * same configuration. */
static qs_status ensure_quantizers(qsi_run *run, qsi_node *n, const qs_scope_recipe *r)
{
    qs_ctx *ctx = run->ctx;
    int k = (int)r->kind;
    if (n->qinit[k]) {
        qs_scope_recipe have = {r->kind, {n->q[k][0].cfg, n->q[k][1].cfg, n->q[k][2].cfg}};
        if (qs_scope_recipe_digest(&have) != qs_scope_recipe_digest(r))
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "linear '%s': recipe %s changed its configuration between runs",
                                n->name, qs_recipe_kind_name(r->kind));
        return QS_OK;
    }
    qs_status s = qsi_fault_step(ctx, "quantizer init");
    for (int i = 0; s == QS_OK && i < QS_SCOPE_ROLE_COUNT; i++)
        s = qs_quantizer_init(ctx, &n->q[k][i], &r->cfg[i]);
    if (s != QS_OK) {
        free_quantizers(n, k);
        return s;
    }
    n->qinit[k] = 1;
    return QS_OK;
}

/* ------------------------------------------------------------ delayed-scaling updates */

/* Whether node i lies inside node anc. */
static int is_inside(const qs_program *p, int i, int anc)
{
    for (int a = p->nodes[i].parent; a > 0; a = p->nodes[a].parent)
        if (a == anc)
            return 1;
    return anc == 0;
}

/* Whether node i's delayed quantizers take part in the update of ds_update below. */
static int ds_updates(const qsi_run *run, int i, int step, int only_in)
{
    const qsi_node *n = &run->p->nodes[i];
    if (!is_linear(n->kind) || !run->fwd_quant[i] || (only_in < 0 && run->step_of[i] != step) ||
        run->fwd_kind[i] != QS_RECIPE_DELAYED)
        return 0;
    return only_in < 0 || is_inside(run->p, i, only_in);
}

/* The key of node i's delayed quantizers [DIST-DS-KEY]: the recipe digest and the group. */
static uint64_t ds_key_digest(const qsi_node *n)
{
    const qs_quantizer *q = n->q[QS_RECIPE_DELAYED];
    qs_scope_recipe r = {QS_RECIPE_DELAYED, {q[0].cfg, q[1].cfg, q[2].cfg}};
    return qs_scope_recipe_digest(&r);
}

/* [DIST-DS-UPDATE]: before any roll, for each key (in the order of its first linear), the
 * history[0] slots of its quantizers (x then w of each linear in node order; dy in
 * backward) reduced over the key's group as one vector and written back. */
static qs_status ds_reduce(qsi_run *run, int step, int backward, int only_in)
{
    int np = run->p->n, nq = backward ? 1 : 2;
    char *done = calloc((size_t)np + 1, 1);
    float *vec = malloc(((size_t)np * 2 + 1) * sizeof(float));
    qs_status s =
        done && vec ? QS_OK : qs_ctx_error(run->ctx, QS_ERR_NOMEM, "update: out of memory");
    for (int i = 0; s == QS_OK && i < np; i++) {
        if (done[i] || !ds_updates(run, i, step, only_in) || run->fwd_group[i] == 0)
            continue;
        uint64_t key = ds_key_digest(&run->p->nodes[i]);
        int group = run->fwd_group[i], n = 0;
        for (int j = i; j < np; j++) {
            if (done[j] || !ds_updates(run, j, step, only_in) || run->fwd_group[j] != group ||
                ds_key_digest(&run->p->nodes[j]) != key)
                continue;
            done[j] = 1;
            qs_quantizer *q = run->p->nodes[j].q[QS_RECIPE_DELAYED];
            for (int t = 0; t < nq; t++)
                vec[n++] = q[backward ? QS_SCOPE_DY
                             : t == 0 ? QS_SCOPE_X
                                      : QS_SCOPE_W]
                               .ds.history[0];
        }
        s = qs_dist_reduce(run->ctx, group, n, vec);
        for (int j = i, at = 0; s == QS_OK && j < np; j++) {
            if (!ds_updates(run, j, step, only_in) || run->fwd_group[j] != group ||
                ds_key_digest(&run->p->nodes[j]) != key)
                continue;
            qs_quantizer *q = run->p->nodes[j].q[QS_RECIPE_DELAYED];
            for (int t = 0; t < nq; t++)
                q[backward ? QS_SCOPE_DY
                  : t == 0 ? QS_SCOPE_X
                           : QS_SCOPE_W]
                    .ds.history[0] = vec[at++];
        }
    }
    free(done);
    free(vec);
    return s;
}

/* [SCOPE-DS-UPDATE-FWD] (roles x, w) and [SCOPE-DS-UPDATE-BWD] (role dy): updates the
 * delayed quantizers of every linear that ran quantized in outermost region step; with
 * only_in >= 0, instead those inside node only_in (the replay defect variant). */
static qs_status ds_update(qsi_run *run, int step, int backward, int only_in)
{
    qs_status s = ds_reduce(run, step, backward, only_in);
    if (s != QS_OK)
        return s;
    for (int i = 0; i < run->p->n; i++) {
        if (!ds_updates(run, i, step, only_in))
            continue;
        s = qsi_fault_step(run->ctx, backward ? "backward update" : "forward update");
        qsi_node *m = &run->p->nodes[i];
        if (s == QS_OK && backward)
            s = qs_delayed_update(run->ctx, &m->q[QS_RECIPE_DELAYED][QS_SCOPE_DY]);
        if (s == QS_OK && !backward)
            s = qs_delayed_update(run->ctx, &m->q[QS_RECIPE_DELAYED][QS_SCOPE_X]);
        if (s == QS_OK && !backward)
            s = qs_delayed_update(run->ctx, &m->q[QS_RECIPE_DELAYED][QS_SCOPE_W]);
        if (s != QS_OK)
            return s;
    }
    return QS_OK;
}

/* ------------------------------------------------------------ linear */

/* A local copy of q whose delayed state is the checkpoint's record, with a private
 * history so that the replay's amax reaches no history [RCP-REPLAY]. */
static qs_status replay_quantizer(qsi_run *run, const qsi_node *n, const qs_quantizer *q,
                                  qs_quantizer *local, float **hist)
{
    *local = *q;
    *hist = NULL;
    if (q->cfg.kind != QS_RECIPE_DELAYED)
        return QS_OK;
    const qsi_ds_saved *d = qsi_ckpt_find_ds(run->replay, q);
    if (!d)
        return qs_ctx_error(run->ctx, QS_ERR_STATE,
                            "replay: linear '%s' uses a quantizer the checkpoint did not record",
                            n->name);
    *hist = malloc((size_t)d->len * sizeof(float));
    if (!*hist)
        return qs_ctx_error(run->ctx, QS_ERR_NOMEM, "replay: out of memory");
    memcpy(*hist, d->history, (size_t)d->len * sizeof(float));
    local->ds.scale = d->scale;
    local->ds.scale_inv = d->scale_inv;
    local->ds.history = *hist;
    return QS_OK;
}

/* Local copies of the x and w quantizers for this execution: the record's state during a
 * replay, the live state (recorded first when inside a checkpoint) otherwise. */
static qs_status fwd_quantizers(qsi_run *run, qsi_node *n, int k, qs_quantizer *lx,
                                qs_quantizer *lw, float **hx, float **hw, qs_trace_record *r)
{
    qs_quantizer *qx = &n->q[k][QS_SCOPE_X], *qw = &n->q[k][QS_SCOPE_W];
    qs_status s = QS_OK;
    *hx = *hw = NULL;
    if (run->replaying) {
        s = replay_quantizer(run, n, qx, lx, hx);
        if (s == QS_OK)
            s = replay_quantizer(run, n, qw, lw, hw);
        r->scales = QS_SCALES_RECORDED;
    } else {
        if (run->rec) /* [RCP-RECORD]: the state as before the region */
            s = qsi_ckpt_save_ds(run->ctx, run->rec, qx);
        if (s == QS_OK && run->rec)
            s = qsi_ckpt_save_ds(run->ctx, run->rec, qw);
        *lx = *qx;
        *lw = *qw;
        r->scales = QS_SCALES_FRESH;
    }
    if (k == QS_RECIPE_DELAYED) {
        r->nscale = 2;
        r->scale_bits[0] = qs_f32_bits(lx->ds.scale);
        r->scale_bits[1] = qs_f32_bits(lw->ds.scale);
    } else if (run->replaying) {
        r->scales = QS_SCALES_FRESH; /* stateless: recomputed from identical data */
    }
    return s;
}

/* [DIST-CS-AMAX] [DIST-NV-AMAX]: under a group, current scaling and NVFP4 quantize t with
 * the tensor amaxes reduced over it, given to the local quantizer q [DIST-GIVEN-AMAX]; the
 * reduced values are recorded when a checkpoint records, and a replay reads them back and
 * reduces nothing [DIST-REPLAY]. *recorded says whether the values came from the record. */
static qs_status group_amax(qsi_run *run, qs_quantizer *q, const qs_tensor *t, int group,
                            int *recorded)
{
    qs_recipe_kind k = q->cfg.kind;
    if (group == 0 || (k != QS_RECIPE_CURRENT && k != QS_RECIPE_NVFP4))
        return QS_OK;
    int n = k == QS_RECIPE_NVFP4 ? 2 : 1;
    float a[QS_DIR_COUNT];
    qs_status s = QS_OK;
    if (run->replaying) {
        if (run->amax_at + n > run->replay->namax)
            return qs_ctx_error(run->ctx, QS_ERR_STATE,
                                "replay: a quantization under group %d that the checkpoint did "
                                "not record [DIST-REPLAY]",
                                group);
        memcpy(a, run->replay->amax + run->amax_at, (size_t)n * sizeof *a);
        run->amax_at += n;
        *recorded = 1;
    } else {
        s = qs_dist_tensor_amax(run->ctx, &q->cfg, t, a);
        if (s == QS_OK)
            s = qs_dist_reduce(run->ctx, group, n, a);
        if (s == QS_OK && run->rec)
            s = qsi_ckpt_save_amax(run->ctx, run->rec, n, a);
    }
    q->amax_given = 1;
    q->given_amax[QS_DIR_ROW] = a[0];
    q->given_amax[QS_DIR_COL] = a[n - 1];
    return s;
}

static qs_status linear_quantized_fwd(qsi_run *run, qsi_node *n, const qs_tensor *x, qsi_entry *e,
                                      qs_trace_record *r, qs_tensor *y)
{
    int k = (int)e->kind, recorded = 0;
    qs_quantizer lx, lw;
    float *hx, *hw;
    qs_status s = fwd_quantizers(run, n, k, &lx, &lw, &hx, &hw, r);
    if (s == QS_OK)
        s = group_amax(run, &lx, x, e->group, &recorded);
    if (s == QS_OK)
        s = group_amax(run, &lw, &n->w, e->group, &recorded);
    if (recorded)
        r->scales = QS_SCALES_RECORDED;
    if (s == QS_OK) {
        qs_linear_options opt;
        qs_linear_options_default(&opt, e->kind);
        draw_rng(run->ctx, &lx, x->numel);
        draw_rng(run->ctx, &lw, n->w.numel);
        s = qs_linear_forward(run->ctx, &opt, &lx, &lw, x, &n->w, y, &e->xq, &e->wq);
    }
    free(hx);
    free(hw);
    return s;
}

/* [SCOPE-POLICY-CALIB] [SCOPE-CALIB]: high-precision compute; delayed scaling writes the
 * current amax slot of x and w (other recipes are stateless: nothing to record). A replay
 * records nothing [RCP-REPLAY]. */
static qs_status linear_calibrating_fwd(qsi_run *run, qsi_node *n, const qs_tensor *x, qsi_entry *e,
                                        qs_tensor *y)
{
    qs_status s = QS_OK;
    if (e->kind == QS_RECIPE_DELAYED && !run->replaying) {
        s = qs_delayed_calibrate(run->ctx, &n->q[QS_RECIPE_DELAYED][QS_SCOPE_X], x);
        if (s == QS_OK)
            s = qs_delayed_calibrate(run->ctx, &n->q[QS_RECIPE_DELAYED][QS_SCOPE_W], &n->w);
    }
    return s == QS_OK ? qs_linear_hp_forward(run->ctx, x, &n->w, y) : s;
}

/* [SCOPE-FIRST-MODULE]: the first quantized module of an outermost region consumes the
 * flag; a replay never does (the forward's marking stands). */
static void consume_first(qsi_run *run, int id, qs_trace_record *r)
{
    if (run->replaying || !qs_scope_take_first_module(run->ctx))
        return;
    run->first_of[id] = 1;
    r->first_module = 1;
}

static qs_status linear_fwd(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qsi_node *n = &run->p->nodes[id];
    qs_ctx *ctx = run->ctx;
    qs_trace_record r;
    qsi_entry e;
    qs_tensor y;
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    memset(&y, 0, sizeof y);
    qs_status s = qsi_fault_step(ctx, "linear forward");
    if (s == QS_OK)
        s = qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, n->name, &e.prec);
    if (s != QS_OK)
        return s;
    e.node = id;
    e.group = ctx->scope.group;
    set_name(&r, n->name, "linear");
    r.phase = run->replaying ? QS_PHASE_RECOMPUTE : QS_PHASE_FORWARD;
    r.precision = e.prec;
    r.dtype = act->dtype;
    if (e.prec == QS_PREC_QUANTIZED || e.prec == QS_PREC_CALIBRATING) {
        e.kind = ctx->scope.recipe.kind;
        r.has_recipe = 1;
        r.recipe = e.kind;
        s = ensure_quantizers(run, n, &ctx->scope.recipe);
    }
    if (s == QS_OK && e.prec == QS_PREC_QUANTIZED) /* [SCOPE-POLICY-QUANT] */
        s = linear_quantized_fwd(run, n, act, &e, &r, &y);
    else if (s == QS_OK && e.prec == QS_PREC_CALIBRATING)
        s = linear_calibrating_fwd(run, n, act, &e, &y);
    else if (s == QS_OK) /* [SCOPE-POLICY-HP] */
        s = qs_linear_hp_forward(ctx, act, &n->w, &y);
    if (s == QS_OK && e.prec == QS_PREC_QUANTIZED)
        consume_first(run, id, &r);
    if (s == QS_OK && !run->replaying) {
        run->fwd_quant[id] = e.prec == QS_PREC_QUANTIZED;
        run->fwd_kind[id] = (int)e.kind;
        run->fwd_group[id] = e.group;
        run->step_of[id] = run->step;
    }
    if (s == QS_OK)
        s = qs_trace_append(ctx, &run->res->trace, &r);
    if (s != QS_OK) {
        entry_free(&e);
        qs_tensor_free(&y);
        return s;
    }
    if (e.prec == QS_PREC_QUANTIZED)
        qs_tensor_free(act); /* the backward reads the quantized copies */
    else
        e.x = *act;
    *act = y;
    return tape_push(ctx, tape, &e);
}

/* ------------------------------------------------------------ gdn */

static qs_status gdn_params(qsi_run *run, const qsi_node *n, const qs_tensor *x, qs_gdn_params *p)
{
    if (x->ndim != 2 || x->shape[0] != n->rows || x->shape[1] % n->heads != 0)
        return qs_ctx_error(run->ctx, QS_ERR_SHAPE,
                            "gdn '%s': activation must be [%lld, dim], dim a multiple of %lld",
                            n->name, (long long)n->rows, (long long)n->heads);
    memset(p, 0, sizeof *p);
    p->b = 1;
    p->t = n->rows;
    p->h = p->hv = n->heads;
    p->dk = p->dv = x->shape[1] / n->heads;
    p->use_qk_l2norm = 1;
    p->dtype = x->dtype;
    return QS_OK;
}

/* values (FP32 floats holding dtype values) into a new 2-D tensor of dtype like. */
static qs_status store_like(qs_ctx *ctx, const qs_tensor *like, const float *v, qs_tensor *out)
{
    qs_status s = qs_tensor_alloc(ctx, out, like->dtype, 2, like->shape);
    for (size_t i = 0; s == QS_OK && i < out->numel; i++) {
        if (like->dtype == QS_BF16)
            ((uint16_t *)out->data)[i] = qs_f32_to_bf16(v[i]);
        else if (like->dtype == QS_FP16)
            ((uint16_t *)out->data)[i] = qs_f32_to_f16(v[i]);
        else
            ((float *)out->data)[i] = v[i];
    }
    return s;
}

/* [RCP-TRACE] The trace record of one execution of a gdn or gelu op. */
static qs_status op_trace(qsi_run *run, const qsi_node *n, const char *kind, qs_trace_phase phase,
                          qs_precision prec, qs_dtype dtype)
{
    qs_trace_record r = {0};
    set_name(&r, n->name, kind);
    r.phase = phase;
    r.precision = prec;
    r.dtype = dtype;
    return qs_trace_append(run->ctx, &run->res->trace, &r);
}

/* The end of a gdn or gelu forward whose work left status s and output y: its trace record,
 * then the tape entry e saving the input, and y in place of the activation; y is freed on
 * failure. */
static qs_status op_fwd_done(qsi_run *run, int id, const char *kind, qs_status s, qsi_entry *e,
                             qs_tensor *act, qs_tensor *y, qsi_tape *tape)
{
    if (s == QS_OK)
        s = op_trace(run, &run->p->nodes[id], kind,
                     run->replaying ? QS_PHASE_RECOMPUTE : QS_PHASE_FORWARD, e->prec, act->dtype);
    if (s != QS_OK) {
        qs_tensor_free(y);
        return s;
    }
    e->node = id;
    e->x = *act;
    *act = *y;
    return tape_push(run->ctx, tape, e);
}

/* [SCOPE-ISLAND]: in an island the op runs in the island's input dtype with FP32 gate and
 * state; outside any region it runs high precision; elsewhere it rejects. */
static qs_status gdn_decide(qsi_run *run, const qsi_node *n, const qs_tensor *x, qs_precision *p)
{
    qs_ctx *ctx = run->ctx;
    qs_status s = qs_scope_decide(ctx, QS_MODULE_INPUT_PRECISION, n->name, p);
    if (s == QS_OK && *p == QS_PREC_ISLAND && x->dtype != ctx->scope.island_dtype)
        s = qs_ctx_error(ctx, QS_ERR_DTYPE, "gdn '%s': input is %s, the island runs in %s", n->name,
                         qs_dtype_name(x->dtype), qs_dtype_name(ctx->scope.island_dtype));
    return s;
}

static qs_status gdn_fwd(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qsi_node *n = &run->p->nodes[id];
    qs_ctx *ctx = run->ctx;
    qs_gdn_params gp;
    qsi_input in = {0};
    qs_tensor y = {0};
    qsi_entry e = {0};
    float *o = NULL;
    qs_status s = qsi_fault_step(ctx, "gdn forward");
    if (s == QS_OK)
        s = gdn_decide(run, n, act, &e.prec);
    if (s == QS_OK)
        s = gdn_params(run, n, act, &gp);
    if (s == QS_OK)
        s = qsi_input_load(ctx, act, &in);
    if (s == QS_OK && !(o = malloc(in.m * in.k * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gdn: out of memory");
    if (s == QS_OK) /* q = k = v = x */
        s = qsi_k_gdn_fwd(ctx, &gp, in.x, in.x, in.x, n->g, n->beta, NULL, o, NULL);
    if (s == QS_OK)
        s = store_like(ctx, act, o, &y);
    free(o);
    qsi_input_free(&in);
    return op_fwd_done(run, id, "gdn", s, &e, act, &y, tape);
}

/* ------------------------------------------------------------ gelu */

/* [RCP-GELU-OP]: the precision a gelu execution reports — island inside an island, high
 * everywhere else; it never quantizes or calibrates, whatever the region. */
static qs_precision gelu_precision(const qs_ctx *ctx)
{
    return ctx->scope.island ? QS_PREC_ISLAND : QS_PREC_HIGH;
}

/* y = qs_geluf(x) per element from the FP32 value of x, rounded to x's dtype (RNE)
 * [MATH-GELU]; the input is saved for the backward. */
static qs_status gelu_fwd(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qsi_node *n = &run->p->nodes[id];
    qs_ctx *ctx = run->ctx;
    qsi_input in = {0};
    qs_tensor y = {0};
    qsi_entry e = {0};
    float *o = NULL;
    qs_status s = qsi_fault_step(ctx, "gelu forward");
    if (s == QS_OK && act->ndim != 2)
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "gelu '%s': activation must be 2-D", n->name);
    if (s == QS_OK)
        s = qsi_input_load(ctx, act, &in);
    if (s == QS_OK && !(o = malloc(in.m * in.k * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gelu: out of memory");
    for (size_t i = 0; s == QS_OK && i < (size_t)(in.m * in.k); i++)
        o[i] = qs_geluf(in.x[i]);
    if (s == QS_OK)
        s = store_like(ctx, act, o, &y);
    free(o);
    qsi_input_free(&in);
    e.prec = gelu_precision(ctx);
    return op_fwd_done(run, id, "gelu", s, &e, act, &y, tape);
}

/* ------------------------------------------------------------ regions */

typedef struct qsi_body {
    qsi_run *run;
    int id;
    qs_tensor *act;
    qsi_tape *tape;
} qsi_body;

static qs_status body_fn(qs_ctx *ctx, void *arg)
{
    (void)ctx;
    qsi_body *b = arg;
    return exec_children(b->run, b->id, b->act, b->tape);
}

/* autocast, calibrate and island through the callback forms [SCOPE-RESTORE-ERR]; the
 * forward delayed-scaling update when an outermost region exits [SCOPE-DS-UPDATE-FWD]. */
static qs_status exec_region(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qsi_node *n = &run->p->nodes[id];
    qs_ctx *ctx = run->ctx;
    qsi_body b = {run, id, act, tape};
    int outer = ctx->scope.depth == 0 && !run->replaying;
    int saved = run->step;
    qs_status s;
    if (outer)
        run->step = id;
    if (n->kind == QSI_N_ISLAND) {
        s = qs_island_run(ctx, act->dtype, body_fn, &b);
    } else {
        qs_autocast_params a = n->params;
        a.recipe = n->has_recipe ? &n->recipe : NULL;
        s = qs_autocast_run(ctx, &a, body_fn, &b);
    }
    run->step = saved;
    if (s == QS_OK && outer && run->grad)
        s = ds_update(run, id, 0, -1);
    return s;
}

/* [RCP-RECORD]: snapshot, delayed-scaling state (as each quantizer is first used), RNG
 * state and input are recorded; the body's intermediates are discarded. A checkpoint in a
 * replay, inside another checkpoint or without gradients is transparent. */
static qs_status exec_checkpoint(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qs_ctx *ctx = run->ctx;
    if (!run->grad || run->replaying || run->rec)
        return exec_children(run, id, act, tape);
    qs_status s = qsi_fault_step(ctx, "checkpoint record");
    qsi_ckpt *ck = s == QS_OK ? calloc(1, sizeof *ck) : NULL;
    if (s == QS_OK && !ck)
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "checkpoint: out of memory");
    if (s != QS_OK)
        return s;
    ck->node = id;
    ck->scope = ctx->scope;
    qs_rng_get(ctx, &ck->rng_seed, &ck->rng_offset);
    qsi_tape scratch = {0};
    s = qs_tensor_clone(ctx, &ck->input, act);
    if (s == QS_OK) {
        run->rec = ck;
        s = exec_children(run, id, act, &scratch);
        run->rec = NULL;
    }
    tape_free(&scratch);
    if (s != QS_OK) {
        qsi_ckpt_free(ck);
        return s;
    }
    ck->out_digest = qsi_tensor_digest(act);
    qsi_entry e = {0};
    e.node = id;
    e.ck = ck;
    return tape_push(ctx, tape, &e);
}

static qs_status exec_node(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    switch (run->p->nodes[id].kind) {
    case QSI_N_LINEAR:
        return linear_fwd(run, id, act, tape);
    case QSI_N_GDN:
        return gdn_fwd(run, id, act, tape);
    case QSI_N_GELU:
        return gelu_fwd(run, id, act, tape);
    case QSI_N_MLA:
        return mla_fwd(run, id, act, tape);
    case QSI_N_CHECKPOINT:
        return exec_checkpoint(run, id, act, tape);
    case QSI_N_AUTOCAST:
    case QSI_N_CALIBRATE:
    case QSI_N_ISLAND:
        return exec_region(run, id, act, tape);
    default:
        return exec_children(run, id, act, tape);
    }
}

static qs_status exec_children(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    for (int c = run->p->nodes[id].first_child; c >= 0; c = run->p->nodes[c].next) {
        qs_status s = exec_node(run, c, act, tape);
        if (s != QS_OK)
            return s;
    }
    return QS_OK;
}

/* ------------------------------------------------------------ backward */

static qs_status backward_tape(qsi_run *run, qsi_tape *tape, qs_tensor *grad);

static qs_status set_grad(qsi_run *run, const qsi_node *n, qs_tensor *g)
{
    qs_tensor_free(&run->res->grads[n->op]);
    run->res->grads[n->op] = *g;
    memset(g, 0, sizeof *g);
    return QS_OK;
}

static qs_status linear_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad)
{
    qsi_node *n = &run->p->nodes[e->node];
    qs_ctx *ctx = run->ctx;
    qs_tensor dx = {0}, dw = {0};
    qs_trace_record r = {0};
    qs_status s = qsi_fault_step(ctx, "linear backward");
    set_name(&r, n->name, "linear");
    r.phase = QS_PHASE_BACKWARD;
    r.precision = e->prec;
    r.dtype = grad->dtype;
    if (s == QS_OK && e->prec == QS_PREC_QUANTIZED) {
        qs_quantizer ldy = n->q[e->kind][QS_SCOPE_DY];
        qs_linear_options opt;
        qs_linear_options_default(&opt, e->kind);
        r.has_recipe = 1;
        r.recipe = e->kind;
        r.scales = QS_SCALES_FRESH;
        if (e->kind == QS_RECIPE_DELAYED) {
            r.nscale = 1;
            r.scale_bits[0] = qs_f32_bits(ldy.ds.scale);
        }
        draw_rng(ctx, &ldy, grad->numel);
        int recorded = 0; /* a backward is never a replay: dy's amax is reduced here */
        s = group_amax(run, &ldy, grad, e->group, &recorded);
        if (s == QS_OK)
            s = qs_linear_backward(ctx, &opt, &ldy, grad, &e->xq, &e->wq, &dx, &dw);
    } else if (s == QS_OK) {
        r.has_recipe = e->prec == QS_PREC_CALIBRATING;
        r.recipe = e->kind;
        s = qs_linear_hp_backward(ctx, grad, &e->x, &n->w, &dx, &dw);
    }
    if (s == QS_OK)
        s = qs_trace_append(ctx, &run->res->trace, &r);
    if (s == QS_OK && run->first_of[e->node] && e->prec == QS_PREC_QUANTIZED)
        s = ds_update(run, run->step_of[e->node], 1, -1); /* [SCOPE-DS-UPDATE-BWD] */
    if (s != QS_OK) {
        qs_tensor_free(&dx);
        qs_tensor_free(&dw);
        return s;
    }
    set_grad(run, n, &dw);
    qs_tensor_free(grad);
    *grad = dx;
    return QS_OK;
}

/* dx = (dq + dk) + dv in FP32, rounded to the activation dtype: q = k = v = x. */
static qs_status gdn_bwd_values(qsi_run *run, const qsi_node *n, const qs_gdn_params *gp,
                                const float *x, const float *dy, float *buf, float *dgb)
{
    size_t nx = (size_t)(gp->t * gp->h * gp->dk);
    float *dq = buf, *dk = buf + nx, *dv = buf + 2 * nx;
    qs_status s = qsi_k_gdn_bwd(run->ctx, gp, x, x, x, n->g, n->beta, NULL, dy, NULL, dq, dk, dv,
                                dgb, dgb + gp->t * gp->hv, NULL);
    for (size_t i = 0; s == QS_OK && i < nx; i++)
        dq[i] = (dq[i] + dk[i]) + dv[i];
    return s;
}

static qs_status gdn_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad)
{
    qsi_node *n = &run->p->nodes[e->node];
    qs_ctx *ctx = run->ctx;
    qs_gdn_params gp;
    qsi_input in = {0}, gi = {0};
    qs_tensor dx = {0}, dgb = {0};
    float *buf = NULL;
    int64_t shape[2] = {2, n->rows * n->heads};
    qs_status s = qsi_fault_step(ctx, "gdn backward");
    if (s == QS_OK)
        s = gdn_params(run, n, &e->x, &gp);
    if (s == QS_OK)
        s = qsi_input_load(ctx, &e->x, &in);
    if (s == QS_OK)
        s = qsi_input_load(ctx, grad, &gi);
    if (s == QS_OK && (gi.m != in.m || gi.k != in.k))
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "gdn '%s': gradient shape differs", n->name);
    if (s == QS_OK && !(buf = malloc(3 * (size_t)(in.m * in.k) * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gdn: out of memory");
    if (s == QS_OK)
        s = qs_tensor_alloc(ctx, &dgb, QS_FP32, 2, shape);
    if (s == QS_OK)
        s = gdn_bwd_values(run, n, &gp, in.x, gi.x, buf, dgb.data);
    if (s == QS_OK)
        s = store_like(ctx, &e->x, buf, &dx);
    if (s == QS_OK)
        s = op_trace(run, n, "gdn", QS_PHASE_BACKWARD, e->prec, e->x.dtype);
    free(buf);
    qsi_input_free(&in);
    qsi_input_free(&gi);
    if (s != QS_OK) {
        qs_tensor_free(&dx);
        qs_tensor_free(&dgb);
        return s;
    }
    set_grad(run, n, &dgb);
    qs_tensor_free(grad);
    *grad = dx;
    return QS_OK;
}

/* [RCP-GELU-OP] [MATH-GELU-GRAD]: dx = fl32(dy * qs_gelu_gradf(x)) per element, dy the FP32
 * value of the incoming gradient, rounded to the dtype of the saved input (RNE). */
static qs_status gelu_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad)
{
    qsi_node *n = &run->p->nodes[e->node];
    qs_ctx *ctx = run->ctx;
    qsi_input in = {0}, gi = {0};
    qs_tensor dx = {0};
    float *buf = NULL;
    qs_status s = qsi_fault_step(ctx, "gelu backward");
    if (s == QS_OK)
        s = qsi_input_load(ctx, &e->x, &in);
    if (s == QS_OK)
        s = qsi_input_load(ctx, grad, &gi);
    if (s == QS_OK && (gi.m != in.m || gi.k != in.k))
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "gelu '%s': gradient shape differs", n->name);
    if (s == QS_OK && !(buf = malloc((size_t)(in.m * in.k) * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gelu: out of memory");
    for (size_t i = 0; s == QS_OK && i < (size_t)(in.m * in.k); i++)
        buf[i] = gi.x[i] * qs_gelu_gradf(in.x[i]);
    if (s == QS_OK)
        s = store_like(ctx, &e->x, buf, &dx);
    if (s == QS_OK)
        s = op_trace(run, n, "gelu", QS_PHASE_BACKWARD, e->prec, e->x.dtype);
    free(buf);
    qsi_input_free(&in);
    qsi_input_free(&gi);
    if (s != QS_OK) {
        qs_tensor_free(&dx);
        return s;
    }
    qs_tensor_free(grad);
    *grad = dx;
    return QS_OK;
}

/* A digest of every quantizer's delayed-scaling state: the audit's "state left as before". */
static uint64_t program_state_digest(const qs_program *p)
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            for (int r = 0; p->nodes[i].qinit[k] && r < QS_SCOPE_ROLE_COUNT; r++) {
                const qs_delayed_state *d = &p->nodes[i].q[k][r].ds;
                h = (h ^ qs_f32_bits(d->scale)) * 1099511628211ull;
                for (int64_t j = 0; d->history && j < d->len; j++)
                    h = (h ^ qs_f32_bits(d->history[j])) * 1099511628211ull;
            }
    return h;
}

/* A replay in progress: the region's token and the RNG state before it. */
typedef struct qsi_replay {
    qs_scope_token tok;
    uint64_t seed, offset;
} qsi_replay;

/* Enters the recorded scope of ck with recompute_phase set and the recorded RNG state
 * [RCP-REPLAY] (the variant of the program may change the scope [RCP-REPLAY-VARIANTS]). */
static qs_status replay_enter(qsi_run *run, const qsi_ckpt *ck, qsi_replay *rp)
{
    qs_ctx *ctx = run->ctx;
    qs_scope_state st = run->p->variant == QS_REPLAY_OUTSIDE_AUTOCAST ? ctx->scope : ck->scope;
    st.recompute_phase = 1;
    qs_status s = qsi_scope_enter_state(ctx, &st, &rp->tok);
    if (s != QS_OK)
        return s;
    qs_rng_get(ctx, &rp->seed, &rp->offset);
    qs_rng_set(ctx, ck->rng_seed, ck->rng_offset);
    run->replaying = 1;
    run->replay = ck;
    run->amax_at = 0;
    return QS_OK;
}

/* Leaves the replay entered by replay_enter, whatever s is; returns s (or the error of the
 * defect variant's update). */
static qs_status replay_leave(qsi_run *run, const qsi_ckpt *ck, const qsi_replay *rp, qs_status s)
{
    run->replaying = 0;
    run->replay = NULL;
    if (s == QS_OK && run->p->variant == QS_REPLAY_EXTRA_UPDATE)
        s = ds_update(run, -1, 0, ck->node); /* the upstream defect */
    qsi_scope_pop(run->ctx, rp->tok);
    qs_rng_set(run->ctx, rp->seed, rp->offset); /* the RNG state as before the replay */
    return s;
}

/* Runs the body of checkpoint ck again from its recorded input [RCP-REPLAY]; *out gets its
 * output. */
static qs_status replay_forward(qsi_run *run, const qsi_ckpt *ck, qsi_tape *sub, qs_tensor *out)
{
    qsi_replay rp;
    qs_status s = qs_tensor_clone(run->ctx, out, &ck->input);
    if (s == QS_OK)
        s = replay_enter(run, ck, &rp);
    if (s != QS_OK)
        return s;
    s = exec_children(run, ck->node, out, sub);
    return replay_leave(run, ck, &rp, s);
}

/* [RCP-AUDIT]: the replay repeats the forward decisions, reproduces the discarded output
 * (digest d) bit for bit [RCP-REPLAY-BITWISE] and changes no state; what names it. */
static qs_status audit_replay(qsi_run *run, const qsi_ckpt *ck, uint64_t d, uint64_t before,
                              const char *what)
{
    qs_program_result *res = run->res;
    if (res->nreplays < 16) {
        res->replay_fwd_digest[res->nreplays] = ck->out_digest;
        res->replay_digest[res->nreplays] = d;
    }
    res->nreplays++;
    qs_status s = qs_trace_audit(run->ctx, &res->trace);
    if (s == QS_OK && d != ck->out_digest)
        s = qs_ctx_error(run->ctx, QS_ERR_STATE,
                         "replay audit [RCP-AUDIT]: %s replayed an output that differs "
                         "from the discarded forward output [RCP-REPLAY-BITWISE]",
                         what);
    if (s == QS_OK && program_state_digest(run->p) != before)
        s = qs_ctx_error(run->ctx, QS_ERR_STATE,
                         "replay audit [RCP-AUDIT]: the replay of %s changed "
                         "delayed-scaling state",
                         what);
    return s;
}

static qs_status checkpoint_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad)
{
    qsi_tape sub = {0};
    qs_tensor out = {0};
    char what[48];
    snprintf(what, sizeof what, "checkpoint %d", e->ck->node);
    uint64_t before = program_state_digest(run->p);
    qs_status s = qsi_fault_step(run->ctx, "checkpoint replay");
    if (s == QS_OK)
        s = replay_forward(run, e->ck, &sub, &out);
    if (s == QS_OK)
        s = audit_replay(run, e->ck, qsi_tensor_digest(&out), before, what);
    if (s == QS_OK)
        s = backward_tape(run, &sub, grad);
    qs_tensor_free(&out);
    tape_free(&sub);
    return s;
}

static qs_status backward_tape(qsi_run *run, qsi_tape *tape, qs_tensor *grad)
{
    for (int i = tape->n - 1; i >= 0; i--) {
        qsi_entry *e = &tape->e[i];
        qsi_node_kind k = run->p->nodes[e->node].kind;
        qs_status s = e->ck               ? checkpoint_bwd(run, e, grad)
                      : e->mla            ? mla_bwd(run, e, grad)
                      : k == QSI_N_LINEAR ? linear_bwd(run, e, grad)
                      : k == QSI_N_GELU   ? gelu_bwd(run, e, grad)
                                          : gdn_bwd(run, e, grad);
        if (s != QS_OK)
            return s;
    }
    return QS_OK;
}

/* ------------------------------------------------------------ mla */

/* The engine's runner of an mla op's linears [RCP-MLA-OP]: each linear is a quantizable
 * module like a linear op — the scope decides, its node holds its quantizers per recipe
 * kind, it records into and replays from checkpoints, consumes the first-module flag and
 * takes part in the delayed-scaling updates — while ref/mla.c computes it. */
static qs_status mla_lin_quantized(qsi_run *run, qsi_node *n, const qsi_mla_call *c,
                                   qsi_mla_saved *sv, qs_trace_record *r)
{
    qs_quantizer lx, lw;
    float *hx, *hw;
    if (run->ctx->allreduce && run->ctx->scope.group != 0 &&
        (sv->kind == QS_RECIPE_CURRENT || sv->kind == QS_RECIPE_NVFP4))
        return qs_ctx_error(run->ctx, QS_ERR_UNSUPPORTED,
                            "mla '%s': its linears do not reduce their amaxes over a group of "
                            "several ranks yet [DIST-HOOK]",
                            n->name);
    qs_status s = fwd_quantizers(run, n, (int)sv->kind, &lx, &lw, &hx, &hw, r);
    if (s == QS_OK) {
        draw_rng(run->ctx, &lx, (size_t)(c->rows * c->in));
        draw_rng(run->ctx, &lw, (size_t)(c->out * c->in));
        s = qsi_mla_lin_q_fwd(run->ctx, c, &lx, &lw, sv);
    }
    free(hx);
    free(hw);
    return s;
}

static qs_status mla_lin_fwd(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv)
{
    qsi_mla_tape *m = arg;
    qsi_run *run = m->run;
    qs_ctx *ctx = run->ctx;
    int sub = run->p->nodes[m->id].mla->sub[c->lin];
    qsi_node *n = &run->p->nodes[sub];
    qs_trace_record r;
    memset(&r, 0, sizeof r);
    qs_status s = qsi_fault_step(ctx, "mla linear forward");
    if (s == QS_OK)
        s = qs_scope_decide(ctx, QS_MODULE_QUANTIZABLE, n->name, &sv->prec);
    if (s != QS_OK)
        return s;
    set_name(&r, n->name, "linear");
    r.phase = run->replaying ? QS_PHASE_RECOMPUTE : QS_PHASE_FORWARD;
    r.precision = sv->prec;
    r.dtype = c->dt;
    if (sv->prec == QS_PREC_QUANTIZED || sv->prec == QS_PREC_CALIBRATING) {
        sv->kind = ctx->scope.recipe.kind;
        r.has_recipe = 1;
        r.recipe = sv->kind;
        s = ensure_quantizers(run, n, &ctx->scope.recipe);
    }
    if (s == QS_OK && sv->prec == QS_PREC_QUANTIZED) { /* [SCOPE-POLICY-QUANT] */
        s = mla_lin_quantized(run, n, c, sv, &r);
    } else if (s == QS_OK) { /* [SCOPE-POLICY-CALIB] [SCOPE-POLICY-HP] */
        if (sv->prec == QS_PREC_CALIBRATING && sv->kind == QS_RECIPE_DELAYED && !run->replaying)
            s = qsi_mla_lin_calibrate(ctx, c, &n->q[QS_RECIPE_DELAYED][QS_SCOPE_X],
                                      &n->q[QS_RECIPE_DELAYED][QS_SCOPE_W]);
        if (s == QS_OK)
            s = qsi_mla_lin_hp_fwd(ctx, c);
    }
    if (s == QS_OK && sv->prec == QS_PREC_QUANTIZED)
        consume_first(run, sub, &r);
    if (s == QS_OK && !run->replaying) {
        run->fwd_quant[sub] = sv->prec == QS_PREC_QUANTIZED;
        run->fwd_kind[sub] = (int)sv->kind;
        run->fwd_group[sub] = ctx->scope.group;
        run->step_of[sub] = run->step;
    }
    return s == QS_OK ? qs_trace_append(ctx, &run->res->trace, &r) : s;
}

static qs_status mla_lin_bwd(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv)
{
    qsi_mla_tape *m = arg;
    qsi_run *run = m->run;
    qs_ctx *ctx = run->ctx;
    int sub = run->p->nodes[m->id].mla->sub[c->lin];
    qsi_node *n = &run->p->nodes[sub];
    qs_trace_record r;
    memset(&r, 0, sizeof r);
    qs_status s = qsi_fault_step(ctx, "mla linear backward");
    set_name(&r, n->name, "linear");
    r.phase = QS_PHASE_BACKWARD;
    r.precision = sv->prec;
    r.dtype = c->dt;
    r.has_recipe = sv->prec == QS_PREC_QUANTIZED || sv->prec == QS_PREC_CALIBRATING;
    r.recipe = sv->kind;
    if (s == QS_OK && sv->prec == QS_PREC_QUANTIZED) {
        qs_quantizer ldy = n->q[sv->kind][QS_SCOPE_DY];
        r.scales = QS_SCALES_FRESH;
        if (sv->kind == QS_RECIPE_DELAYED) {
            r.nscale = 1;
            r.scale_bits[0] = qs_f32_bits(ldy.ds.scale);
        }
        draw_rng(ctx, &ldy, (size_t)(c->rows * c->out));
        s = qsi_mla_lin_q_bwd(ctx, c, &ldy, sv);
    } else if (s == QS_OK) {
        s = qsi_mla_lin_hp_bwd(ctx, c);
    }
    if (s == QS_OK)
        s = qs_trace_append(ctx, &run->res->trace, &r);
    if (s == QS_OK && run->first_of[sub] && sv->prec == QS_PREC_QUANTIZED)
        s = ds_update(run, run->step_of[sub], 1, -1); /* [SCOPE-DS-UPDATE-BWD] */
    return s;
}

/* The absorbed einsums run in high precision whatever the region [MLA-ABSORBED-HP]; each
 * execution is traced as kind "einsum" [RCP-MLA-TRACE]. */
static qs_status mla_einsum(void *arg, qsi_mla_einsum which, int backward)
{
    qsi_mla_tape *m = arg;
    qsi_run *run = m->run;
    qs_trace_record r;
    memset(&r, 0, sizeof r);
    part_name(r.op, run->p->nodes[m->id].name, which == QSI_MLA_K_ABSORB ? "k_absorb" : "v_absorb");
    strcpy(r.kind, "einsum");
    r.phase =
        backward ? QS_PHASE_BACKWARD : (run->replaying ? QS_PHASE_RECOMPUTE : QS_PHASE_FORWARD);
    r.precision = QS_PREC_HIGH;
    r.dtype = m->shape.dtype;
    return qs_trace_append(run->ctx, &run->res->trace, &r);
}

/* A tape record for mla op id on the activation act (values decoded into m->x). */
static qs_status mla_tape_new(qsi_run *run, int id, const qs_tensor *act, qsi_mla_tape **out)
{
    qs_ctx *ctx = run->ctx;
    qsi_mla_op *op = run->p->nodes[id].mla;
    const char *nm = run->p->nodes[id].name;
    int64_t T = qsi_mla_tokens(&op->shape);
    if (act->ndim != 2 || act->shape[0] != T || act->shape[1] != op->cfg.hidden)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "mla '%s': the activation must be [%lld, %lld] (tokens, hidden)", nm,
                            (long long)T, (long long)op->cfg.hidden);
    if (act->dtype != QS_BF16 && act->dtype != QS_FP16 && act->dtype != QS_FP32)
        return qs_ctx_error(ctx, QS_ERR_DTYPE,
                            "mla '%s': the activation must be bf16, fp16 or fp32", nm);
    qsi_mla_tape *m = calloc(1, sizeof *m);
    qsi_input in = {0};
    qs_status s =
        m ? qsi_input_load(ctx, act, &in) : qs_ctx_error(ctx, QS_ERR_NOMEM, "mla: out of memory");
    if (s != QS_OK) {
        free(m);
        return s;
    }
    m->run = run;
    m->id = id;
    m->shape = op->shape;
    m->shape.dtype = act->dtype;
    m->blk.cfg = &op->cfg;
    m->blk.shape = &m->shape;
    m->blk.w = &op->w;
    m->runner.arg = m;
    m->runner.fwd = mla_lin_fwd;
    m->runner.bwd = mla_lin_bwd;
    m->runner.einsum = mla_einsum;
    m->x = in.x;
    s = qsi_mla_state_new(ctx, "mla", &m->blk, &m->st);
    if (s != QS_OK) {
        mla_tape_free(m);
        return s;
    }
    *out = m;
    return QS_OK;
}

/* [RCP-MLA-UP-PROJ] [RCP-RECORD]: the record of the mla_up_proj region — the scope, the
 * RNG state at its entry, and (through run->rec) the delayed-scaling state of each of its
 * quantizers before its first use. Its inputs stay in the op's state. */
static qs_status mla_record(qsi_run *run, qsi_mla_tape *m)
{
    qs_status s = qsi_fault_step(run->ctx, "mla up_proj record");
    if (s == QS_OK && !(m->ck = calloc(1, sizeof *m->ck)))
        s = qs_ctx_error(run->ctx, QS_ERR_NOMEM, "mla: out of memory");
    if (s != QS_OK)
        return s;
    m->ck->node = m->id;
    m->ck->scope = run->ctx->scope;
    qs_rng_get(run->ctx, &m->ck->rng_seed, &m->ck->rng_offset);
    return QS_OK;
}

/* The mla op's forward: down-projections, the mla_up_proj region (checkpointed when the op
 * asks for it, gradients are on and no other checkpoint is recording or replaying: its
 * outputs and intermediates are then discarded once the attention has read them),
 * attention and output projection. */
static qs_status mla_fwd(qsi_run *run, int id, qs_tensor *act, qsi_tape *tape)
{
    qs_ctx *ctx = run->ctx;
    qsi_mla_op *op = run->p->nodes[id].mla;
    qsi_mla_tape *m = NULL;
    float *out = NULL;
    qs_tensor y = {0};
    qs_status s = qsi_fault_step(ctx, "mla forward");
    if (s == QS_OK)
        s = mla_tape_new(run, id, act, &m);
    if (s != QS_OK)
        return s;
    size_t nout = (size_t)(qsi_mla_tokens(&m->shape) * op->cfg.hidden);
    if (!(out = malloc(nout * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "mla: out of memory");
    if (s == QS_OK)
        s = qsi_mla_fwd_down(ctx, &m->blk, &m->runner, m->x, m->st);
    int ckpt = op->recompute_up && run->grad && !run->replaying && !run->rec;
    if (s == QS_OK && ckpt)
        s = mla_record(run, m);
    if (s == QS_OK && m->ck) {
        run->rec = m->ck; /* no other record is open: ckpt requires it */
        s = qsi_mla_fwd_up(ctx, &m->blk, &m->runner, m->st);
        run->rec = NULL;
    } else if (s == QS_OK) {
        s = qsi_mla_fwd_up(ctx, &m->blk, &m->runner, m->st);
    }
    if (s == QS_OK && m->ck)
        m->ck->out_digest = qsi_mla_up_digest(&m->blk, m->st);
    if (s == QS_OK)
        s = qsi_mla_fwd_out(ctx, &m->blk, &m->runner, m->st, out);
    if (s == QS_OK && m->ck) /* the attention has consumed the region's outputs */
        qsi_mla_up_discard(&m->blk, m->st);
    if (s == QS_OK)
        s = store_like(ctx, act, out, &y);
    free(out);
    if (s != QS_OK) {
        mla_tape_free(m);
        return s;
    }
    qsi_entry e = {0};
    e.node = id;
    e.mla = m;
    qs_tensor_free(act);
    *act = y;
    return tape_push(ctx, tape, &e);
}

/* [RCP-MLA-UP-PROJ]: the replay of the region, when the output projection's backward is
 * done and before the attention's: the recorded scope with recompute_phase, recorded
 * scales and RNG; then the audit [RCP-AUDIT]. */
static qs_status mla_replay(qsi_run *run, qsi_mla_tape *m)
{
    char what[64];
    snprintf(what, sizeof what, "mla '%s' up_proj", run->p->nodes[m->id].name);
    uint64_t before = program_state_digest(run->p);
    qsi_replay rp;
    qs_status s = qsi_fault_step(run->ctx, "mla up_proj replay");
    if (s == QS_OK)
        s = replay_enter(run, m->ck, &rp);
    if (s != QS_OK)
        return s;
    s = qsi_mla_fwd_up(run->ctx, &m->blk, &m->runner, m->st);
    s = replay_leave(run, m->ck, &rp, s);
    if (s == QS_OK)
        s = audit_replay(run, m->ck, qsi_mla_up_digest(&m->blk, m->st), before, what);
    return s;
}

/* The gradient of each parameter: FP32 tensors shaped like the weights, and g pointing at
 * them. */
static qs_status mla_grads_alloc(qs_ctx *ctx, const qsi_mla_op *op, qs_tensor *pg, qs_mla_grads *g)
{
    float **slot[QS_MLA_PARAM_COUNT] = {&g->dw_dq,    &g->dq_norm, &g->dw_uq, &g->dw_q,  &g->dw_dkv,
                                        &g->dkv_norm, &g->dw_ukv,  &g->dw_uk, &g->dw_uv, &g->dw_o};
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
        if (!op->wv[pi])
            continue;
        qs_status s = qs_tensor_alloc(ctx, &pg[pi], QS_FP32, op->wnd[pi], op->wshape[pi]);
        if (s != QS_OK)
            return s;
        *slot[pi] = pg[pi].data;
    }
    return QS_OK;
}

/* The op's gradients into the result: each parameter's, and grads[op] their concatenation
 * in qs_mla_param order. */
static qs_status mla_set_grads(qsi_run *run, const qsi_node *n, qs_tensor *pg)
{
    int64_t total = 0;
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++)
        total += (int64_t)pg[pi].numel;
    qs_tensor flat = {0};
    qs_status s = qs_tensor_alloc(run->ctx, &flat, QS_FP32, 1, &total);
    if (s != QS_OK)
        return s;
    size_t at = 0;
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
        if (pg[pi].numel)
            memcpy((float *)flat.data + at, pg[pi].data, pg[pi].numel * sizeof(float));
        at += pg[pi].numel;
        qs_tensor *slot = &run->res->param_grads[n->op * QS_MLA_PARAM_COUNT + pi];
        qs_tensor_free(slot);
        *slot = pg[pi];
        memset(&pg[pi], 0, sizeof pg[pi]);
    }
    return set_grad(run, n, &flat);
}

/* The output gradient as values of the op's dtype (a gradient of another dtype is cast). */
static qs_status mla_dout(qsi_run *run, const qsi_mla_tape *m, const qs_tensor *grad, float **out)
{
    qs_ctx *ctx = run->ctx;
    const qsi_mla_op *op = run->p->nodes[m->id].mla;
    int64_t T = qsi_mla_tokens(&m->shape);
    if (grad->ndim != 2 || grad->shape[0] != T || grad->shape[1] != op->cfg.hidden)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "mla '%s': gradient shape differs",
                            run->p->nodes[m->id].name);
    qsi_input gi = {0};
    qs_status s = qsi_input_load(ctx, grad, &gi);
    for (int64_t e = 0; s == QS_OK && e < T * op->cfg.hidden; e++)
        gi.x[e] = qsi_attn_round(m->shape.dtype, gi.x[e]);
    if (s == QS_OK)
        *out = gi.x;
    return s;
}

static qs_status mla_bwd(qsi_run *run, qsi_entry *e, qs_tensor *grad)
{
    qs_ctx *ctx = run->ctx;
    qsi_mla_tape *m = e->mla;
    const qsi_node *n = &run->p->nodes[e->node];
    qs_tensor pg[QS_MLA_PARAM_COUNT], dx = {0};
    qs_mla_grads g;
    float *dout = NULL, *dxv = NULL;
    memset(pg, 0, sizeof pg);
    memset(&g, 0, sizeof g);
    size_t nx = (size_t)(qsi_mla_tokens(&m->shape) * n->mla->cfg.hidden);
    qs_status s = qsi_fault_step(ctx, "mla backward");
    if (s == QS_OK)
        s = mla_dout(run, m, grad, &dout);
    if (s == QS_OK)
        s = mla_grads_alloc(ctx, n->mla, pg, &g);
    if (s == QS_OK && !(dxv = malloc(nx * sizeof(float) + 1)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "mla: out of memory");
    g.dx = dxv;
    if (s == QS_OK)
        s = qsi_mla_bwd_proj(ctx, &m->blk, &m->runner, dout, &g, m->st);
    if (s == QS_OK && m->ck)
        s = mla_replay(run, m);
    if (s == QS_OK)
        s = qsi_mla_bwd_attn(ctx, &m->blk, &m->runner, &g, m->st);
    if (s == QS_OK)
        s = qsi_mla_bwd_up(ctx, &m->blk, &m->runner, &g, m->st);
    if (s == QS_OK)
        s = qsi_mla_bwd_down(ctx, &m->blk, &m->runner, m->x, &g, m->st);
    if (s == QS_OK) {
        qs_tensor like = {0};
        like.dtype = m->shape.dtype;
        like.ndim = 2;
        like.shape[0] = qsi_mla_tokens(&m->shape);
        like.shape[1] = n->mla->cfg.hidden;
        s = store_like(ctx, &like, dxv, &dx);
    }
    if (s == QS_OK)
        s = mla_set_grads(run, n, pg);
    free(dout);
    free(dxv);
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++)
        qs_tensor_free(&pg[pi]);
    if (s != QS_OK) {
        qs_tensor_free(&dx);
        return s;
    }
    qs_tensor_free(grad);
    *grad = dx;
    return QS_OK;
}

/* ------------------------------------------------------------ failure atomicity */

typedef struct qsi_snap_q {
    int init;
    float scale[QS_SCOPE_ROLE_COUNT], scale_inv[QS_SCOPE_ROLE_COUNT];
    float *hist[QS_SCOPE_ROLE_COUNT];
} qsi_snap_q;

static void snap_free(qsi_snap_q *sn, int count)
{
    for (int i = 0; sn && i < count; i++)
        for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++)
            free(sn[i].hist[r]);
    free(sn);
}

static qs_status snap_one(const qs_quantizer *q, qsi_snap_q *sn, int r)
{
    sn->scale[r] = q->ds.scale;
    sn->scale_inv[r] = q->ds.scale_inv;
    if (!q->ds.history)
        return QS_OK;
    sn->hist[r] = malloc((size_t)q->ds.len * sizeof(float));
    if (!sn->hist[r])
        return QS_ERR_NOMEM;
    memcpy(sn->hist[r], q->ds.history, (size_t)q->ds.len * sizeof(float));
    return QS_OK;
}

/* [SCOPE-FAIL-ATOMIC]: a copy of every quantizer's state (and which exist). */
static qs_status snap_take(qs_ctx *ctx, const qs_program *p, qsi_snap_q **out)
{
    int count = p->n * QS_RECIPE_COUNT;
    qsi_snap_q *sn = calloc((size_t)count, sizeof *sn);
    qs_status s = sn ? QS_OK : QS_ERR_NOMEM;
    for (int i = 0; s == QS_OK && i < p->n; i++)
        for (int k = 0; s == QS_OK && k < QS_RECIPE_COUNT; k++) {
            qsi_snap_q *e = &sn[i * QS_RECIPE_COUNT + k];
            e->init = p->nodes[i].qinit[k];
            for (int r = 0; e->init && s == QS_OK && r < QS_SCOPE_ROLE_COUNT; r++)
                s = snap_one(&p->nodes[i].q[k][r], e, r);
        }
    if (s != QS_OK) {
        snap_free(sn, count);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_run: out of memory");
    }
    *out = sn;
    return QS_OK;
}

static void snap_restore(qs_program *p, const qsi_snap_q *sn)
{
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < QS_RECIPE_COUNT; k++) {
            const qsi_snap_q *e = &sn[i * QS_RECIPE_COUNT + k];
            qsi_node *n = &p->nodes[i];
            if (!e->init && n->qinit[k])
                free_quantizers(n, k); /* created by the failed run */
            for (int r = 0; e->init && r < QS_SCOPE_ROLE_COUNT; r++) {
                qs_delayed_state *d = &n->q[k][r].ds;
                d->scale = e->scale[r];
                d->scale_inv = e->scale_inv[r];
                if (e->hist[r])
                    memcpy(d->history, e->hist[r], (size_t)d->len * sizeof(float));
            }
        }
}

/* ------------------------------------------------------------ running a program */

void qs_program_result_free(qs_program_result *res)
{
    if (!res)
        return;
    qs_tensor_free(&res->y);
    qs_tensor_free(&res->dx);
    for (int i = 0; res->grads && i < res->nops; i++)
        qs_tensor_free(&res->grads[i]);
    free(res->grads);
    for (int i = 0; res->param_grads && i < res->nops * QS_MLA_PARAM_COUNT; i++)
        qs_tensor_free(&res->param_grads[i]);
    free(res->param_grads);
    qs_trace_free(&res->trace);
    memset(res, 0, sizeof *res);
}

static qs_status check_run_args(qs_ctx *ctx, const qs_program *p, const qs_tensor *x,
                                const qs_tensor *dy, const qs_program_result *res)
{
    if (!ctx || !p || !x || !res)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_run: NULL argument");
    if (x->ndim != 2 || (x->dtype != QS_BF16 && x->dtype != QS_FP16))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "program_run: x must be a 2-D bf16 or fp16 tensor");
    if (dy && dy->ndim != 2)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "program_run: dy must be a 2-D tensor");
    return QS_OK;
}

static qs_status run_alloc(qs_ctx *ctx, qsi_run *run, qs_program *p, qs_program_result *res)
{
    size_t n = (size_t)p->n;
    run->step_of = calloc(n, sizeof(int));
    run->fwd_quant = calloc(n, sizeof(int));
    run->fwd_kind = calloc(n, sizeof(int));
    run->first_of = calloc(n, sizeof(int));
    run->fwd_group = calloc(n, sizeof(int));
    res->nops = p->nops;
    res->grads = calloc((size_t)p->nops + 1, sizeof(qs_tensor));
    res->param_grads = calloc((size_t)p->nops * QS_MLA_PARAM_COUNT + 1, sizeof(qs_tensor));
    if (!run->step_of || !run->fwd_quant || !run->fwd_kind || !run->first_of || !run->fwd_group ||
        !res->grads || !res->param_grads)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "program_run: out of memory");
    return QS_OK;
}

static void run_free(qsi_run *run)
{
    free(run->step_of);
    free(run->fwd_quant);
    free(run->fwd_kind);
    free(run->first_of);
    free(run->fwd_group);
}

/* Forward over the tape, then backward from dy when given. */
static qs_status run_program(qsi_run *run, const qs_tensor *x, const qs_tensor *dy)
{
    qs_ctx *ctx = run->ctx;
    qs_program_result *res = run->res;
    qsi_tape tape = {0};
    qs_tensor act = {0}, grad = {0};
    qs_status s = qs_tensor_clone(ctx, &act, x);
    if (s == QS_OK)
        s = exec_children(run, QS_PROGRAM_ROOT, &act, &tape);
    if (s == QS_OK && dy && !qs_tensor_same_layout(dy, &act) &&
        !(dy->ndim == 2 && dy->shape[0] == act.shape[0] && dy->shape[1] == act.shape[1]))
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "program_run: dy shape differs from the output");
    if (s == QS_OK && dy)
        s = qs_tensor_clone(ctx, &grad, dy);
    if (s == QS_OK && dy)
        s = backward_tape(run, &tape, &grad);
    tape_free(&tape);
    if (s == QS_OK) {
        res->y = act;
        res->dx = grad;
        return QS_OK;
    }
    qs_tensor_free(&act);
    qs_tensor_free(&grad);
    return s;
}

const qs_tensor *qs_program_result_mla_grad(const qs_program_result *res, int op,
                                            qs_mla_param param)
{
    if (!res || !res->param_grads || op < 0 || op >= res->nops ||
        (unsigned)param >= QS_MLA_PARAM_COUNT)
        return NULL;
    const qs_tensor *t = &res->param_grads[op * QS_MLA_PARAM_COUNT + param];
    return t->data ? t : NULL;
}

qs_status qs_program_run(qs_ctx *ctx, qs_program *p, const qs_tensor *x, const qs_tensor *dy,
                         qs_program_result *res)
{
    qs_status s = check_run_args(ctx, p, x, dy, res);
    if (s != QS_OK)
        return s;
    memset(res, 0, sizeof *res);
    qsi_snap_q *snap = NULL;
    qsi_run run = {0};
    uint64_t seed, offset;
    qs_rng_get(ctx, &seed, &offset);
    run.ctx = ctx;
    run.p = p;
    run.res = res;
    run.grad = dy != NULL;
    run.step = -1;
    s = snap_take(ctx, p, &snap);
    if (s == QS_OK)
        s = run_alloc(ctx, &run, p, res);
    if (s == QS_OK)
        s = run_program(&run, x, dy);
    if (s != QS_OK) { /* [SCOPE-FAIL-ATOMIC] */
        if (snap)
            snap_restore(p, snap);
        qs_rng_set(ctx, seed, offset);
        qs_program_result_free(res);
    }
    snap_free(snap, p->n * QS_RECIPE_COUNT);
    run_free(&run);
    return s;
}
