/* op_quantize.c: the `quantize` op — a recipe of spec/recipes.md applied to input x.
 * params: recipe (delayed|current|mxfp8|block|nvfp4) and any recipe option by its name in
 * qs_recipe_config_set (role, format, rule, tile, rht, sr, seed, ...). A 2-D x [M,K] is
 * quantized once. A 3-D x [S,M,K] under delayed scaling is a sequence of S steps: step s
 * quantizes x[s] with the current state, then runs the explicit update.
 * outputs: row_data, row_scale, col_data, col_scale (the copies produced), amax and
 * scale_inv (tensorwise), global_scale (nvfp4); for sequences also scales (the scale used
 * at each step) and history (the final amax history); row_dequant and col_dequant, the
 * dequantization of each copy (a plugin's through its dequantize slot, of its own codes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops.h"
#include "qspec/recipe.h"

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
                            "%s:%d:%d: unknown recipe '%s' (delayed, current, mxfp8, block, nvfp4)",
                            c->file, r->pos.line, r->pos.col, r->value);
    const qsk_param *role = qsk_case_param(c, "role");
    int ro = role ? qs_tensor_role_from_name(role->value) : (int)QS_ROLE_INPUT;
    if (ro < 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: unknown role '%s'", c->file,
                            role->pos.line, role->pos.col, role->value);
    qs_status st = qs_recipe_config_default(ctx, cfg, (qs_recipe_kind)kind, (qs_tensor_role)ro);
    for (size_t i = 0; st == QS_OK && i < c->nparams; i++) {
        const qsk_param *p = &c->params[i];
        if (strcmp(p->key, "recipe") == 0 || strcmp(p->key, "role") == 0)
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

static qs_status quantize_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                              qsk_results *out)
{
    qs_recipe_config cfg;
    qs_status st = config_from(ctx, c, &cfg);
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

/* Allocates out for the copies cfg asks for, as qs_recipe_layout gives them. */
static qs_status alloc_quantized(qs_ctx *ctx, const qs_recipe_config *cfg, int64_t rows,
                                 int64_t cols, qs_quantized *out)
{
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    out->elem = qs_recipe_elem_dtype(cfg);
    out->rows = rows;
    out->cols = cols;
    const int want[QS_DIR_COUNT] = {cfg->rowwise, cfg->columnwise};
    qs_status st = QS_OK;
    for (int d = 0; d < QS_DIR_COUNT && st == QS_OK; d++) {
        if (!want[d])
            continue;
        qs_copy_layout l;
        st = qs_recipe_layout(ctx, cfg, rows, cols, (qs_direction)d, &l);
        if (st == QS_OK)
            st = qs_tensor_alloc(ctx, &out->data[d], l.data_dtype, 2, l.data_shape);
        if (st == QS_OK)
            st = qs_tensor_alloc(ctx, &out->scale[d], l.scale_dtype, l.scale_ndim, l.scale_shape);
    }
    if (st != QS_OK)
        qs_quantized_free(out);
    return st;
}

static uint64_t cap_of(qs_recipe_kind k)
{
    static const uint64_t caps[QS_RECIPE_COUNT] = {QS_CAP_QUANT_DELAYED, QS_CAP_QUANT_CURRENT,
                                                   QS_CAP_QUANT_MXFP8, QS_CAP_QUANT_BLOCK,
                                                   QS_CAP_QUANT_NVFP4};
    return caps[k];
}

/* [CASE-BACKEND-UNSUPPORTED]: a backend without the recipe's capability or the quantize
 * slot does not run the case. The kit keeps the delayed-scaling state: it hands the backend
 * the current scale, records the amax the backend reports, and runs the update. */
static qs_status quantize_backend(qs_ctx *ctx, const qsk_plugin *p, const qsk_case *c,
                                  const qs_tensor *inputs, qsk_results *out)
{
    qs_recipe_config cfg;
    qs_status st = config_from(ctx, c, &cfg);
    if (st != QS_OK)
        return st;
    if (!(p->table->caps & cap_of(cfg.kind)) || !p->table->quantize)
        return QS_ERR_UNSUPPORTED;
    if ((wants_output(c, dequant_names[0]) || wants_output(c, dequant_names[1])) &&
        (!(p->table->caps & QS_CAP_DEQUANT) || !p->table->dequantize))
        return QS_ERR_UNSUPPORTED;
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
            st = alloc_quantized(ctx, &cfg, in->shape[0], in->shape[1], &z);
        if (st == QS_OK) {
            scales[s] = q.ds.scale;
            qs_quantize_args args = {&cfg, in, q.ds.scale, &z};
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
