/* op_quantize.c: the `quantize` op — a recipe of spec/recipes.md applied to input x.
 * params: recipe (delayed|current|mxfp8|block|nvfp4|rowwise|rowwise_with_gw_hp) and any recipe
 * option by its name in qs_recipe_config_set (role, format, rule, tile, rht, sr, seed, ...). A 2-D
 * x [M,K] is quantized once. A 3-D x [S,M,K] under delayed scaling is a sequence of S steps: step s
 * quantizes x[s] with the current state, then runs the explicit update.
 * outputs: row_data, row_scale, col_data, col_scale (the copies produced), amax and
 * scale_inv (tensorwise), global_scale (nvfp4); for sequences also scales (the scale used
 * at each step) and history (the final amax history); row_dequant and col_dequant, the
 * dequantization of each copy (a plugin's through its dequantize slot, of its own codes).
 * With the parameter ranks: N the case is distributed [CASE-RANKS]: x's rows are split
 * into N equal shards quantized as N ranks of the world group (spec/distributed.md), and
 * every output is the ranks' outputs stacked along the first dimension in rank order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "opcheck.h"
#include "ops.h"
#include "qspec/distributed.h"
#include "qspec/kernels.h"
#include "qspec/recipe.h"
#include "ranks.h"

static const char *const produced[] = {"row_data",     "row_scale",   "col_data",    "col_scale",
                                       "amax",         "scale_inv",   "scales",      "history",
                                       "global_scale", "row_dequant", "col_dequant", NULL};
static const char *const dequant_names[QS_DIR_COUNT] = {"row_dequant", "col_dequant"};

/* Whether the case compares output name. */
static int wants_output(const qsk_case *c, const char *name)
{
    for (size_t i = 0; i < c->noutputs; i++)
        if (strcmp(c->outputs[i].name, name) == 0)
            return 1;
    return 0;
}

/* [REC-DEQ-SHAPE] The dequantizations of z the case asks for, into y[dir] (dtype INVALID
 * where not asked for), by the reference or, when p is given, by p's dequantize slot. */
static qs_status dequantize_wanted(qs_ctx *ctx, const qsk_case *c, const qsk_plugin *p,
                                   const qs_quantized *z, qs_tensor y[QS_DIR_COUNT])
{
    qs_status st = QS_OK;
    for (int d = 0; d < QS_DIR_COUNT && st == QS_OK; d++) {
        if (!wants_output(c, dequant_names[d]) || !z->data[d].data)
            continue;
        if (!p) {
            st = qs_dequantize(ctx, z, (qs_direction)d, &y[d]);
            continue;
        }
        int64_t shape[2] = {z->rows, z->cols};
        st = qs_tensor_alloc(ctx, &y[d], QS_FP32, 2, shape);
        if (st != QS_OK)
            break;
        qs_dequantize_args args = {z, (qs_direction)d, &y[d]};
        st = p->table->dequantize(p->state, &args);
        if (st != QS_OK && st != QS_ERR_UNSUPPORTED)
            st = qs_ctx_error(ctx, st, "backend %s: dequantize failed: %s", p->table->name,
                              qs_status_str(st));
    }
    if (st != QS_OK)
        for (int d = 0; d < QS_DIR_COUNT; d++)
            qs_tensor_free(&y[d]);
    return st;
}

/* Moves the dequantizations into out when st is QS_OK (else frees them); returns st. */
static qs_status add_dequantized(qs_ctx *ctx, qsk_results *out, qs_tensor y[QS_DIR_COUNT],
                                 qs_status st)
{
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        if (st == QS_OK && y[d].data)
            st = qsk_results_add(ctx, out, dequant_names[d], &y[d]);
        else
            qs_tensor_free(&y[d]);
    }
    return st;
}

/* Builds the configuration from the case's params; errors carry the param's position. */
static qs_status config_from(qs_ctx *ctx, const qsk_case *c, qs_recipe_config *cfg)
{
    const qsk_param *r = qsk_case_param(c, "recipe");
    if (!r)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: op 'quantize' needs the parameter 'recipe'", c->file,
                            c->op_pos.line, c->op_pos.col);
    int kind = qs_recipe_kind_from_name(r->value);
    if (kind < 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: unknown recipe '%s' (delayed, current, mxfp8, block, nvfp4, "
                            "rowwise, rowwise_with_gw_hp)",
                            c->file, r->pos.line, r->pos.col, r->value);
    const qsk_param *role = qsk_case_param(c, "role");
    int ro = role ? qs_tensor_role_from_name(role->value) : (int)QS_ROLE_INPUT;
    if (ro < 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: unknown role '%s'", c->file,
                            role->pos.line, role->pos.col, role->value);
    qs_status st = qs_recipe_config_default(ctx, cfg, (qs_recipe_kind)kind, (qs_tensor_role)ro);
    for (size_t i = 0; st == QS_OK && i < c->nparams; i++) {
        const qsk_param *p = &c->params[i];
        if (strcmp(p->key, "recipe") == 0 || strcmp(p->key, "role") == 0 ||
            strcmp(p->key, "ranks") == 0)
            continue;
        if (qs_recipe_config_set(ctx, cfg, p->key, p->value) != QS_OK) {
            char why[400];
            snprintf(why, sizeof why, "%s", qs_ctx_errmsg(ctx));
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: %s", c->file, p->pos.line,
                                p->pos.col, why);
        }
    }
    if (st == QS_OK && qs_recipe_config_check(ctx, cfg) != QS_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", qs_ctx_errmsg(ctx));
        st = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: %s", c->file, c->op_pos.line,
                          c->op_pos.col, why);
    }
    return st;
}

int qsk_case_dist_ranks(const qsk_case *c)
{
    const qsk_param *p = strcmp(c->op, "quantize") == 0 ? qsk_case_param(c, "ranks") : NULL;
    return p ? atoi(p->value) : 0;
}

/* [CASE-RANKS]: ranks is 1..64 and divides the rows; delayed scaling (reduced at its
 * update, not at a quantization) and dequantized outputs are not distributed cases. */
static qs_status check_ranks(qs_ctx *ctx, const qsk_case *c, const qs_recipe_config *cfg)
{
    const qsk_param *p = qsk_case_param(c, "ranks");
    if (!p)
        return QS_OK;
    char *end;
    long n = strtol(p->value, &end, 10);
    const char *why = *end || n < 1 || n > QS_DIST_MAX_RANKS ? "must be a number from 1 to 64"
                      : cfg->kind == QS_RECIPE_DELAYED
                          ? "is not for delayed scaling, which reduces at its update "
                            "(a program case with ranks covers it)"
                      : c->ninputs != 1 || c->inputs[0].ndim != 2 ? "needs a 2-D x"
                      : c->inputs[0].shape[0] % n                 ? "must divide the rows of x"
                                                                  : NULL;
    for (size_t i = 0; !why && i < c->noutputs; i++)
        if (strstr(c->outputs[i].name, "dequant"))
            why = "takes no dequantized outputs";
    if (why)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: parameter 'ranks' %s [CASE-RANKS]",
                            c->file, p->pos.line, p->pos.col, why);
    return QS_OK;
}

static qs_status quantize_check(qs_ctx *ctx, const qsk_case *c)
{
    static const char *const inputs[] = {"x", NULL};
    static const qs_dtype dtypes[] = {QS_FP32, QS_BF16, QS_FP16, QS_DTYPE_INVALID};
    qs_recipe_config cfg;
    qs_status st = config_from(ctx, c, &cfg);
    if (st == QS_OK)
        st = qsk_check_inputs(ctx, c, inputs, dtypes, 2, cfg.kind == QS_RECIPE_DELAYED ? 3 : 2);
    if (st == QS_OK)
        st = qsk_check_outputs(ctx, c, produced);
    if (st == QS_OK)
        st = check_ranks(ctx, c, &cfg);
    return st;
}

static qs_status add_f32(qs_ctx *ctx, qsk_results *out, const char *name, const float *v, int64_t n)
{
    qs_tensor t;
    qs_status st = qs_tensor_alloc(ctx, &t, QS_FP32, 1, &n);
    if (st != QS_OK)
        return st;
    memcpy(t.data, v, (size_t)n * sizeof(float));
    return qsk_results_add(ctx, out, name, &t);
}

/* Moves the copies and the per-tensor values of z into out, by the names of
 * [REC-CLI-FILES]. */
static qs_status add_quantized(qs_ctx *ctx, qsk_results *out, qs_quantized *z)
{
    static const char *const data_names[2] = {"row_data", "col_data"};
    static const char *const scale_names[2] = {"row_scale", "col_scale"};
    qs_status st = QS_OK;
    for (int d = 0; d < QS_DIR_COUNT && st == QS_OK; d++) {
        if (!z->data[d].data)
            continue;
        st = qsk_results_add(ctx, out, data_names[d], &z->data[d]);
        if (st == QS_OK)
            st = qsk_results_add(ctx, out, scale_names[d], &z->scale[d]);
    }
    int d0 = z->data[QS_DIR_ROW].data || !z->data[QS_DIR_COL].data ? QS_DIR_ROW : QS_DIR_COL;
    if (st == QS_OK && (z->cfg.kind == QS_RECIPE_DELAYED || z->cfg.kind == QS_RECIPE_CURRENT)) {
        st = add_f32(ctx, out, "amax", &z->amax[d0], 1);
        if (st == QS_OK)
            st = add_f32(ctx, out, "scale_inv", &z->global_dec[d0], 1);
    }
    if (st == QS_OK && z->cfg.kind == QS_RECIPE_NVFP4) {
        st = add_f32(ctx, out, "amax", z->amax, 2);
        if (st == QS_OK)
            st = add_f32(ctx, out, "global_scale", z->global_dec, 2);
    }
    return st;
}

/* A view of step s of a 3-D input as a 2-D tensor (a copy). */
static qs_status step_slice(qs_ctx *ctx, const qs_tensor *x, int64_t s, qs_tensor *xs)
{
    qs_status st = qs_tensor_alloc(ctx, xs, x->dtype, 2, x->shape + 1);
    if (st == QS_OK)
        memcpy(xs->data, (const char *)x->data + (size_t)s * xs->nbytes, xs->nbytes);
    return st;
}

/* ------------------------------------------------------------ distributed cases */

/* Stacks the outputs of n ranks (same names, dtypes and trailing extents) along the first
 * dimension in rank order [CASE-RANKS]. */
static qs_status stack_results(qs_ctx *ctx, qsk_results *parts, int n, qsk_results *out)
{
    qs_status st = QS_OK;
    for (size_t i = 0; i < parts[0].n && st == QS_OK; i++) {
        const qs_tensor *t0 = &parts[0].t[i];
        int64_t shape[QS_MAX_DIMS];
        memcpy(shape, t0->shape, sizeof shape);
        shape[0] = 0;
        size_t bytes = 0;
        for (int r = 0; r < n && st == QS_OK; r++) {
            const qs_tensor *t = qsk_results_get(&parts[r], parts[0].names[i]);
            if (!t || t->dtype != t0->dtype || t->ndim != t0->ndim ||
                (t0->ndim > 1 && memcmp(t->shape + 1, t0->shape + 1,
                                        (size_t)(t0->ndim - 1) * sizeof t->shape[0]) != 0))
                st = qs_ctx_error(ctx, QS_ERR_SHAPE, "rank %d's output %s does not stack", r,
                                  parts[0].names[i]);
            else {
                shape[0] += t->shape[0];
                bytes += t->nbytes;
            }
        }
        qs_tensor s;
        if (st == QS_OK)
            st = qs_tensor_alloc(ctx, &s, t0->dtype, t0->ndim, shape);
        if (st == QS_OK && s.nbytes != bytes) {
            qs_tensor_free(&s);
            st = qs_ctx_error(ctx, QS_ERR_SHAPE, "output %s does not stack bytewise",
                              parts[0].names[i]);
        }
        for (int r = 0, at = 0; r < n && st == QS_OK; r++) {
            const qs_tensor *t = qsk_results_get(&parts[r], parts[0].names[i]);
            memcpy((char *)s.data + at, t->data, t->nbytes);
            at += (int)t->nbytes;
        }
        if (st == QS_OK)
            st = qsk_results_add(ctx, out, parts[0].names[i], &s);
    }
    return st;
}

/* [CASE-RANKS] on the reference: n simulated ranks in the world group (group 1),
 * qs_dist_quantize of the row shards, the outputs stacked. */
static qs_status quantize_ref_dist(qs_ctx *ctx, const qs_recipe_config *cfg, const qs_tensor *x,
                                   int n, qsk_results *out)
{
    qs_dist_world w;
    qs_scope_recipe rcp;
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    qs_tensor parts[QS_DIST_MAX_RANKS];
    const qs_tensor *ptr[QS_DIST_MAX_RANKS];
    qs_quantized z[QS_DIST_MAX_RANKS];
    qsk_results *res = calloc((size_t)n, sizeof *res);
    int nparts = 0, nz = 0;
    qs_status st = res ? qs_dist_world_init(ctx, &w, n) : QS_ERR_NOMEM;
    if (st == QS_OK)
        st = qs_dist_world_add_group(ctx, &w, 1, NULL);
    if (st == QS_OK)
        st = qs_scope_recipe_default(ctx, &rcp, cfg->kind);
    qs_autocast_params ap = {1, 0, &rcp, 1};
    if (st == QS_OK)
        st = qs_dist_autocast_enter(ctx, &w, &ap, tok);
    if (st == QS_OK && (st = qs_dist_split_rows(ctx, x, n, NULL, parts)) == QS_OK)
        nparts = n;
    for (int r = 0; r < nparts; r++)
        ptr[r] = &parts[r];
    if (st == QS_OK && (st = qs_dist_quantize(ctx, &w, cfg, ptr, z, NULL)) == QS_OK)
        nz = n;
    for (int r = 0; r < nz && st == QS_OK; r++)
        st = add_quantized(ctx, &res[r], &z[r]);
    if (st == QS_OK)
        st = stack_results(ctx, res, n, out);
    for (int r = 0; r < nz; r++)
        qs_quantized_free(&z[r]);
    for (int r = 0; r < nparts; r++)
        qs_tensor_free(&parts[r]);
    for (int r = 0; res && r < n; r++)
        qsk_results_free(&res[r]);
    free(res);
    qs_dist_world_free(&w);
    return st;
}

static qs_status quantize_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                              qsk_results *out)
{
    qs_recipe_config cfg;
    qs_status st = config_from(ctx, c, &cfg);
    if (st == QS_OK && qsk_case_dist_ranks(c))
        return quantize_ref_dist(ctx, &cfg, &inputs[0], qsk_case_dist_ranks(c), out);
    qs_quantizer q;
    if (st == QS_OK)
        st = qs_quantizer_init(ctx, &q, &cfg);
    if (st != QS_OK)
        return st;
    const qs_tensor *x = &inputs[0];
    int64_t steps = x->ndim == 3 ? x->shape[0] : 1;
    float *scales = calloc((size_t)steps, sizeof *scales);
    qs_quantized z;
    memset(&z, 0, sizeof z);
    for (int64_t s = 0; st == QS_OK && s < steps; s++) {
        qs_tensor xs;
        const qs_tensor *in = x;
        if (x->ndim == 3) {
            st = step_slice(ctx, x, s, &xs);
            in = &xs;
        }
        if (st != QS_OK)
            break;
        qs_quantized_free(&z);
        if (scales)
            scales[s] = q.ds.scale;
        st = qs_quantize(ctx, &q, in, &z);
        if (st == QS_OK && x->ndim == 3)
            st = qs_delayed_update(ctx, &q); /* [REC-DS-ROLL-FUSED] [REC-DS-SCALE] */
        if (x->ndim == 3)
            qs_tensor_free(&xs);
    }
    if (!scales && st == QS_OK)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_tensor y[QS_DIR_COUNT];
    memset(y, 0, sizeof y);
    if (st == QS_OK)
        st = dequantize_wanted(ctx, c, NULL, &z, y); /* [REC-DEQ-*] */
    if (st == QS_OK)
        st = add_quantized(ctx, out, &z);
    st = add_dequantized(ctx, out, y, st);
    if (st == QS_OK && x->ndim == 3) {
        st = add_f32(ctx, out, "scales", scales, steps);
        if (st == QS_OK)
            st = add_f32(ctx, out, "history", q.ds.history, q.ds.len);
    }
    free(scales);
    qs_quantized_free(&z);
    qs_quantizer_free(&q);
    return st;
}

/* One quantize call of the backend (given: the tensor amaxes, or NULL). */
static qs_status backend_quantize(qs_ctx *ctx, const qsk_plugin *p, const qs_recipe_config *cfg,
                                  const qs_tensor *x, const float *given, qs_quantized *z)
{
    qs_status st = qs_quantized_alloc(ctx, cfg, x->shape[0], x->shape[1], z);
    if (st != QS_OK)
        return st;
    qs_quantize_args args = {cfg, x, 1.0f, z, given};
    st = p->table->quantize(p->state, &args);
    if (st != QS_OK && st != QS_ERR_UNSUPPORTED)
        st = qs_ctx_error(ctx, st, "backend %s: quantize failed: %s", p->table->name,
                          qs_status_str(st));
    if (st != QS_OK)
        qs_quantized_free(z);
    return st;
}

static qs_status backend_allreduce(qs_ctx *ctx, const qsk_plugin *p, int64_t n, float *v)
{
    char why[256] = "";
    qs_status st = p->table->allreduce_amax(p->state, n, v, why, sizeof why);
    if (st != QS_OK)
        return qs_ctx_error(ctx, st, "backend %s: allreduce_amax failed%s%s", p->table->name,
                            why[0] ? ": " : "", why);
    return QS_OK;
}

/* Every rank's outputs, through files of the run's directory: each rank writes its own,
 * an all-reduce makes sure all are written, then each reads all [CASE-RANKS]. */
static qs_status exchange(qs_ctx *ctx, const qsk_plugin *p, qsk_results *mine, int n,
                          qsk_results *out)
{
    qsk_ranks *me = qsk_ranks_self();
    qsk_results *all = calloc((size_t)n, sizeof *all);
    char path[4096];
    qs_status st = all ? QS_OK : qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < mine->n && st == QS_OK; i++) {
        snprintf(path, sizeof path, "%s/case%d.%s.r%d.npy", me->dir, me->seq, mine->names[i],
                 me->rank);
        st = qsk_npy_write(ctx, path, &mine->t[i]);
    }
    float zero = 0.0f;
    if (st == QS_OK)
        st = backend_allreduce(ctx, p, 1, &zero); /* a barrier: every rank has written */
    for (int r = 0; r < n && st == QS_OK; r++)
        for (size_t i = 0; i < mine->n && st == QS_OK; i++) {
            qs_tensor t;
            snprintf(path, sizeof path, "%s/case%d.%s.r%d.npy", me->dir, me->seq, mine->names[i],
                     r);
            st = qsk_npy_read(ctx, path, &t);
            if (st == QS_OK)
                st = qsk_results_add(ctx, &all[r], mine->names[i], &t);
        }
    if (st == QS_OK)
        st = stack_results(ctx, all, n, out);
    for (int r = 0; all && r < n; r++)
        qsk_results_free(&all[r]);
    free(all);
    return st;
}

/* [CASE-RANKS] [DIST-BACKEND] on a plugin: this process is one of the run's ranks (as many
 * as the case names); it quantizes its shard, all-reduces the tensor amaxes the backend
 * measured (current scaling and NVFP4), quantizes again with the reduced ones given, and
 * the ranks' outputs are stacked. */
static qs_status quantize_backend_dist(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                                       const qs_recipe_config *cfg, const qs_tensor *x,
                                       qsk_results *out)
{
    qsk_ranks *me = qsk_ranks_self();
    int n = qsk_case_dist_ranks(c);
    const qs_backend *t = p->table;
    if (!(t->caps & QS_CAP_DIST) || !t->dist_id || !t->dist_join || !t->allreduce_amax) {
        qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no distributed slots (QS_CAP_DIST)");
        return QS_ERR_UNSUPPORTED;
    }
    if (me->nranks != n) {
        qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "the case runs on %d rank%s: run with --ranks %d", n,
                     n == 1 ? "" : "s", n);
        return QS_ERR_UNSUPPORTED;
    }
    qs_tensor parts[QS_DIST_MAX_RANKS];
    qs_quantized z;
    qsk_results mine = {0};
    memset(&z, 0, sizeof z);
    qs_status st = qsk_ranks_join(ctx, p);
    int nparts = 0;
    if (st == QS_OK && (st = qs_dist_split_rows(ctx, x, n, NULL, parts)) == QS_OK)
        nparts = n;
    if (st == QS_OK)
        st = backend_quantize(ctx, p, cfg, &parts[me->rank], NULL, &z);
    if (st == QS_OK && (cfg->kind == QS_RECIPE_CURRENT || cfg->kind == QS_RECIPE_NVFP4)) {
        /* [DIST-CS-AMAX] [DIST-NV-AMAX]: the local amaxes as the backend measured them */
        int d0 = z.data[QS_DIR_ROW].data ? QS_DIR_ROW : QS_DIR_COL;
        float a[QS_DIR_COUNT] = {z.amax[d0], z.amax[QS_DIR_COL]};
        int64_t na = cfg->kind == QS_RECIPE_NVFP4 ? 2 : 1;
        if (cfg->kind == QS_RECIPE_NVFP4)
            a[0] = z.amax[QS_DIR_ROW];
        st = backend_allreduce(ctx, p, na, a);
        qs_quantized_free(&z);
        float given[QS_DIR_COUNT] = {a[0], na == 2 ? a[1] : a[0]};
        if (st == QS_OK)
            st = backend_quantize(ctx, p, cfg, &parts[me->rank], given, &z);
    }
    if (st == QS_OK)
        st = add_quantized(ctx, &mine, &z);
    if (st == QS_OK && n == 1)
        st = stack_results(ctx, &mine, 1, out);
    else if (st == QS_OK)
        st = exchange(ctx, p, &mine, n, out);
    me->seq++;
    qsk_results_free(&mine);
    qs_quantized_free(&z);
    for (int r = 0; r < nparts; r++)
        qs_tensor_free(&parts[r]);
    return st;
}

/* [CASE-BACKEND-UNSUPPORTED]: a backend without the recipe's capability or the quantize
 * slot does not run the case. The kit keeps the delayed-scaling state: it hands the backend
 * the current scale, records the amax the backend reports, and runs the update. */
static qs_status quantize_backend(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                                  const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref; /* compared by the run (qsk_compare_outputs) */
    qs_recipe_config cfg;
    qs_status st = config_from(ctx, c, &cfg);
    if (st != QS_OK)
        return st;
    const char *cap;
    if (!(p->table->caps & qs_recipe_capability(cfg.kind, &cap)) || !p->table->quantize)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no quantize slot with %s (recipe %s)", cap,
                            qs_recipe_kind_name(cfg.kind));
    if ((wants_output(c, dequant_names[0]) || wants_output(c, dequant_names[1])) &&
        (!(p->table->caps & QS_CAP_DEQUANT) || !p->table->dequantize))
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "the case checks dequantize, and the backend has no QS_CAP_DEQUANT");
    if (qsk_case_dist_ranks(c))
        return quantize_backend_dist(ctx, p, c, &cfg, &inputs[0], out);
    qs_quantizer q;
    st = qs_quantizer_init(ctx, &q, &cfg);
    if (st != QS_OK)
        return st;
    const qs_tensor *x = &inputs[0];
    int64_t steps = x->ndim == 3 ? x->shape[0] : 1;
    float *scales = calloc((size_t)steps, sizeof *scales);
    qs_quantized z;
    memset(&z, 0, sizeof z);
    if (!scales)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    for (int64_t s = 0; st == QS_OK && s < steps; s++) {
        qs_tensor xs;
        const qs_tensor *in = x;
        if (x->ndim == 3) {
            st = step_slice(ctx, x, s, &xs);
            in = &xs;
        }
        qs_quantized_free(&z);
        if (st == QS_OK)
            st = qs_quantized_alloc(ctx, &cfg, in->shape[0], in->shape[1], &z);
        if (st == QS_OK) {
            scales[s] = q.ds.scale;
            qs_quantize_args args = {&cfg, in, q.ds.scale, &z, NULL};
            st = p->table->quantize(p->state, &args);
            if (st != QS_OK && st != QS_ERR_UNSUPPORTED)
                st = qs_ctx_error(ctx, st, "backend %s: quantize failed: %s", p->table->name,
                                  qs_status_str(st));
        }
        if (st == QS_OK && cfg.kind == QS_RECIPE_DELAYED) {
            int d0 = z.data[QS_DIR_ROW].data ? QS_DIR_ROW : QS_DIR_COL;
            st = qs_delayed_record(ctx, &q, z.amax[d0]);
            if (st == QS_OK && x->ndim == 3)
                st = qs_delayed_update(ctx, &q);
        }
        if (x->ndim == 3 && in == &xs)
            qs_tensor_free(&xs);
    }
    qs_tensor y[QS_DIR_COUNT];
    memset(y, 0, sizeof y);
    if (st == QS_OK) /* before z moves into out, so that UNSUPPORTED leaves out empty */
        st = dequantize_wanted(ctx, c, p, &z, y);
    if (st == QS_OK)
        st = add_quantized(ctx, out, &z);
    st = add_dequantized(ctx, out, y, st);
    if (st == QS_OK && x->ndim == 3) {
        st = add_f32(ctx, out, "scales", scales, steps);
        if (st == QS_OK)
            st = add_f32(ctx, out, "history", q.ds.history, q.ds.len);
    }
    free(scales);
    qs_quantized_free(&z);
    qs_quantizer_free(&q);
    return st;
}

const qsk_op qsk_op_quantize = {"quantize", "a quantization recipe (spec/recipes.md)",
                                quantize_check, quantize_ref, quantize_backend};
