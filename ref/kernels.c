/* kernels.c: the kernel table between the engine and its kernels (spec/cases.md
 * [CASE-KERNEL-TABLE]). The reference's table puts ref/'s quantizers, GEMM, SDPA and GDN
 * behind the ABI's request structs (thin wrappers whose state is the calling context); a
 * backend's table is installed with qs_ctx_set_backend. The qsi_k_ calls build a request,
 * call the context's slot, and name the slot in every refusal or failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernels_internal.h"
#include "recipe_internal.h"
#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/gemm.h"
#include "qspec/mathf.h"

/* ------------------------------------------------------------ the reference's slots */

/* Copies the copies and per-tensor values of z into out, whose tensors the caller
 * allocated with the layout of the same configuration. */
static qs_status copy_quantized(qs_ctx *ctx, const qs_quantized *z, qs_quantized *out)
{
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        const qs_tensor *src[2] = {&z->data[d], &z->scale[d]};
        qs_tensor *dst[2] = {&out->data[d], &out->scale[d]};
        for (int i = 0; i < 2; i++) {
            if (!dst[i]->data)
                continue;
            if (!src[i]->data || src[i]->nbytes != dst[i]->nbytes)
                return qs_ctx_error(ctx, QS_ERR_SHAPE,
                                    "quantize: the output tensors do not have the recipe's layout");
            memcpy(dst[i]->data, src[i]->data, src[i]->nbytes);
        }
        out->amax[d] = z->amax[d];
        out->global_enc[d] = z->global_enc[d];
        out->global_dec[d] = z->global_dec[d];
    }
    return QS_OK;
}

/* [REC-DS-SCALE] delayed scaling with the scale handed in: the state stays with the kit,
 * so the amax lands in a private slot and is reported in out->amax. */
static qs_status ref_quantize_delayed(qs_ctx *ctx, qs_quantizer *q, float ds_scale,
                                      const qs_tensor *x, qs_quantized *z)
{
    float slot = 0.0f;
    q->ds.scale = ds_scale;
    q->ds.scale_inv = 1.0f / ds_scale;
    q->ds.history = &slot;
    q->ds.len = 1;
    qsi_input in;
    qs_status s = qs_recipe_config_check(ctx, &q->cfg);
    if (s == QS_OK)
        s = qsi_input_load(ctx, x, &in);
    if (s != QS_OK)
        return s;
    z->cfg = q->cfg;
    z->elem = qs_recipe_elem_dtype(&q->cfg);
    z->rows = in.m;
    z->cols = in.k;
    s = qsi_quantize_delayed(ctx, q, &in, z);
    qsi_input_free(&in);
    return s;
}

static qs_status ref_quantize(void *state, const qs_quantize_args *a)
{
    qs_ctx *ctx = state;
    if (!a || !a->cfg || !a->x || !a->out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantize: NULL request");
    qs_quantizer q;
    qs_quantized z;
    memset(&q, 0, sizeof q);
    memset(&z, 0, sizeof z);
    q.cfg = *a->cfg;
    if (a->given_amax) {
        q.amax_given = 1;
        q.given_amax[QS_DIR_ROW] = a->given_amax[QS_DIR_ROW];
        q.given_amax[QS_DIR_COL] = a->given_amax[QS_DIR_COL];
    }
    qs_status s = q.cfg.kind == QS_RECIPE_DELAYED
                      ? ref_quantize_delayed(ctx, &q, a->ds_scale, a->x, &z)
                      : qs_quantize(ctx, &q, a->x, &z);
    if (s == QS_OK)
        s = copy_quantized(ctx, &z, a->out);
    qs_quantized_free(&z);
    return s;
}

static qs_status ref_dequantize(void *state, const qs_dequantize_args *a)
{
    qs_ctx *ctx = state;
    if (!a || !a->in || !a->y || !a->y->data || a->y->dtype != QS_FP32)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dequantize: NULL request or output");
    qs_tensor y;
    memset(&y, 0, sizeof y);
    qs_status s = qs_dequantize(ctx, a->in, a->dir, &y);
    if (s == QS_OK && y.nbytes != a->y->nbytes)
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "dequantize: the output is not [rows, cols]");
    if (s == QS_OK)
        memcpy(a->y->data, y.data, y.nbytes);
    qs_tensor_free(&y);
    return s;
}

/* One coded operand decoded to what qs_gemm reads: values (FP32) and one scale per row and
 * scale group; 128x128 tiles repeat their scale on each of their rows (the same values). */
typedef struct ref_operand {
    float *values, *scales;
    qs_gemm_operand op;
} ref_operand;

static void ref_operand_free(ref_operand *o)
{
    free(o->values);
    free(o->scales);
    memset(o, 0, sizeof *o);
}

/* The scale-group width along k and the rows one stored scale covers, per scaling. */
static void scale_geometry(qs_gemm_scaling s, int64_t *group, int64_t *tile_rows)
{
    *group = 0;
    *tile_rows = 1;
    if (s == QS_GEMM_SCALE_BLOCK_1X128 || s == QS_GEMM_SCALE_BLOCK_128X128)
        *group = 128;
    if (s == QS_GEMM_SCALE_BLOCK_128X128)
        *tile_rows = 128;
    if (s == QS_GEMM_SCALE_MX)
        *group = 32;
    if (s == QS_GEMM_SCALE_NVFP4)
        *group = 16;
}

static qs_status ref_operand_values(qs_ctx *ctx, const qs_tensor *t, int64_t rows, int64_t k,
                                    float **out)
{
    *out = NULL;
    if (!t || !t->data || t->ndim != 2 || t->shape[0] != rows || t->shape[1] != k)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "gemm: an operand's data is not [%lld, %lld]",
                            (long long)rows, (long long)k);
    if (t->dtype == QS_FP32 || t->dtype == QS_BF16 || t->dtype == QS_FP16) {
        qsi_input in;
        qs_status s = qsi_input_load(ctx, t, &in);
        *out = s == QS_OK ? in.x : NULL;
        return s;
    }
    *out = malloc((size_t)(rows * k > 0 ? rows * k : 1) * sizeof(float));
    if (!*out)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "gemm: out of memory");
    for (size_t i = 0; i < (size_t)(rows * k); i++)
        (*out)[i] = qs_decode_f32(t->dtype, qsi_code_get(t, i));
    return QS_OK;
}

static qs_status ref_operand_from(qs_ctx *ctx, const qs_gemm_coded_operand *c, int64_t rows,
                                  int64_t k, ref_operand *o)
{
    memset(o, 0, sizeof *o);
    qs_status s = ref_operand_values(ctx, c->data, rows, k, &o->values);
    int64_t group, tile;
    scale_geometry(c->scaling, &group, &tile);
    int64_t ng = group ? qsi_ceil_div(k, group) : 0;
    const qs_tensor *st = c->scale;
    if (s == QS_OK && ng &&
        (!st || !st->data || st->ndim != 2 || st->shape[0] != qsi_ceil_div(rows, tile) ||
         st->shape[1] != ng))
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "gemm: an operand's scales are not [%lld, %lld]",
                         (long long)qsi_ceil_div(rows, tile), (long long)ng);
    /* the scales decoded in their own layout (one row per tile of rows): the model reads
     * a 128x128 operand as one ([GEMM-ACC-HOPPER-VEC] tells it from 1x128) */
    int64_t srows = ng ? qsi_ceil_div(rows, tile) : 0;
    if (s == QS_OK && ng && !(o->scales = malloc((size_t)(srows * ng + 1) * sizeof(float))))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gemm: out of memory");
    for (int64_t at = 0; s == QS_OK && at < srows * ng; at++)
        o->scales[at] = st->dtype == QS_FP32
                            ? qsi_f32_get(st, (size_t)at)
                            : qs_decode_f32(st->dtype, qsi_code_get(st, (size_t)at));
    if (s != QS_OK) {
        ref_operand_free(o);
        return s;
    }
    o->op.data = o->values;
    o->op.scaling = c->scaling;
    o->op.block_scale = o->scales;
    o->op.tensor_scale = c->tensor_scale;
    o->op.elem = c->data->dtype; /* the exponent clamp of [GEMM-ACC-HOPPER-ALIGN] */
    return QS_OK;
}

/* Stores m*n values (representable in the tensor's dtype) as its codes. */
static void store_codes(const float *v, qs_tensor *y)
{
    for (size_t i = 0; i < y->numel; i++) {
        if (y->dtype == QS_BF16)
            ((uint16_t *)y->data)[i] = qs_f32_to_bf16(v[i]);
        else if (y->dtype == QS_FP16)
            ((uint16_t *)y->data)[i] = qs_f32_to_f16(v[i]);
        else
            ((float *)y->data)[i] = v[i];
    }
}

static qs_status ref_gemm(void *state, qs_gemm_args *a)
{
    qs_ctx *ctx = state;
    if (!a || !a->y || !a->y->data || a->y->dtype != a->out_dtype ||
        a->y->numel != (size_t)(a->m * a->n) || (a->beta != 0.0f && (!a->c || !a->c->data)))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: NULL request or a wrong output");
    ref_operand oa, ob;
    memset(&oa, 0, sizeof oa);
    memset(&ob, 0, sizeof ob);
    qs_status s = ref_operand_from(ctx, &a->a, a->m, a->k, &oa);
    if (s == QS_OK)
        s = ref_operand_from(ctx, &a->b, a->n, a->k, &ob);
    float *y = NULL;
    if (s == QS_OK && !(y = malloc((size_t)(a->m * a->n + 1) * sizeof *y)))
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "gemm: out of memory");
    qs_gemm_params p = {a->m, a->n, a->k, a->alpha, a->beta, a->acc, a->out_dtype};
    if (s == QS_OK)
        s = qs_gemm(ctx, &p, &oa.op, &ob.op, a->beta != 0.0f ? a->c->data : NULL, y);
    if (s == QS_OK) {
        store_codes(y, a->y);
        a->claim = QS_GEMM_CLAIM_MODEL;
    }
    free(y);
    ref_operand_free(&oa);
    ref_operand_free(&ob);
    return s;
}

static qs_status ref_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    return qs_sdpa_fwd(state, &a->p, a->q, a->k, a->v, a->o, a->lse);
}

static qs_status ref_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    return qs_sdpa_bwd(state, &a->p, a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv);
}

static qs_status ref_gdn_fwd(void *state, qs_gdn_args *a)
{
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    return qs_gdn_fwd(state, &a->p, a->q, a->k, a->v, a->g, a->beta, a->h0, a->o, a->ht);
}

static qs_status ref_gdn_bwd(void *state, qs_gdn_args *a)
{
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    return qs_gdn_bwd(state, &a->p, a->q, a->k, a->v, a->g, a->beta, a->h0, a->dout, a->dht, a->dq,
                      a->dk, a->dv, a->dg, a->dbeta, a->dh0);
}

const qs_backend qsi_ref_backend = {
    .abi_version = QS_BACKEND_ABI_VERSION,
    .struct_size = sizeof(qs_backend),
    .name = "ref",
    .version = "reference",
    .caps = QS_CAP_QUANT_DELAYED | QS_CAP_QUANT_CURRENT | QS_CAP_QUANT_MXFP8 | QS_CAP_QUANT_BLOCK |
            QS_CAP_QUANT_NVFP4 | QS_CAP_QUANT_ROWWISE | QS_CAP_DEQUANT | QS_CAP_GEMM_TENSOR |
            QS_CAP_GEMM_BLOCK | QS_CAP_GEMM_MX | QS_CAP_GEMM_NVFP4 | QS_CAP_DIST | QS_CAP_SDPA |
            QS_CAP_GDN,
    .quantize = ref_quantize,
    .dequantize = ref_dequantize,
    .gemm = ref_gemm,
    .sdpa_fwd = ref_sdpa_fwd,
    .sdpa_bwd = ref_sdpa_bwd,
    .gdn_fwd = ref_gdn_fwd,
    .gdn_bwd = ref_gdn_bwd,
};

/* ------------------------------------------------------------ the context's table */

qs_status qs_ctx_set_backend(qs_ctx *ctx, const qs_backend *table, void *state)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!table) {
        ctx->kern_set = 0;
        memset(&ctx->kern, 0, sizeof ctx->kern);
        ctx->kern_state = NULL;
        ctx->kern_claim = QS_GEMM_CLAIM_MODEL;
        ctx->kern_attn_tol = 0;
        return QS_OK;
    }
    if (table->abi_version != QS_BACKEND_ABI_VERSION || table->struct_size < QS_BACKEND_V1_MIN_SIZE)
        return qs_ctx_error(ctx, QS_ERR_ABI,
                            "set_backend: table of ABI %u, %u bytes (need ABI %u, at least %zu)",
                            table->abi_version, table->struct_size, QS_BACKEND_ABI_VERSION,
                            (size_t)QS_BACKEND_V1_MIN_SIZE);
    size_t n = table->struct_size < sizeof(qs_backend) ? table->struct_size : sizeof(qs_backend);
    memset(&ctx->kern, 0, sizeof ctx->kern);
    memcpy(&ctx->kern, table, n); /* slots past struct_size stay NULL */
    ctx->kern_state = state;
    ctx->kern_set = 1;
    ctx->kern_claim = QS_GEMM_CLAIM_MODEL;
    ctx->kern_attn_tol = 0;
    return QS_OK;
}

const qs_backend *qs_ctx_backend(const qs_ctx *ctx)
{
    return ctx && ctx->kern_set ? &ctx->kern : &qsi_ref_backend;
}

qs_gemm_claim qs_ctx_gemm_claim(const qs_ctx *ctx)
{
    return ctx ? ctx->kern_claim : QS_GEMM_CLAIM_MODEL;
}

void qs_ctx_gemm_claim_reset(qs_ctx *ctx)
{
    if (ctx) {
        ctx->kern_claim = QS_GEMM_CLAIM_MODEL;
        ctx->kern_attn_tol = 0;
    }
}

qs_attn_claim qs_ctx_attn_claim(const qs_ctx *ctx)
{
    return ctx && ctx->kern_attn_tol ? QS_ATTN_CLAIM_TOLERANCE : QS_ATTN_CLAIM_REFERENCE;
}

/* The state a slot of the context's table is handed: the context for the reference's. */
static void *state_of(qs_ctx *ctx)
{
    return ctx && ctx->kern_set ? ctx->kern_state : ctx;
}

/* A slot or capability the table lacks [CASE-KERNEL-TABLE]. */
static qs_status missing(qs_ctx *ctx, const char *slot, const char *cap)
{
    const qs_backend *t = qs_ctx_backend(ctx);
    if (cap)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "backend %s: no %s (capability %s)", t->name,
                            slot, cap);
    return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "backend %s has no %s slot", t->name, slot);
}

/* A backend's failure or refusal as a context error naming the slot; the reference's
 * slots set their own messages. */
static qs_status slot_status(qs_ctx *ctx, qs_status st, const char *slot, char *why, size_t len)
{
    if (st == QS_OK || !ctx || !ctx->kern_set)
        return st;
    if (why && len)
        why[len - 1] = '\0';
    const char *sep = why && why[0] ? ": " : "";
    if (st == QS_ERR_UNSUPPORTED)
        return qs_ctx_error(ctx, st, "backend %s: %s not supported%s%s", ctx->kern.name, slot, sep,
                            why ? why : "");
    return qs_ctx_error(ctx, st, "backend %s: %s failed: %s%s%s", ctx->kern.name, slot,
                        qs_status_str(st), sep, why ? why : "");
}

/* ------------------------------------------------------------ calls */

void qsi_f32_view(qs_tensor *t, const float *v, int64_t rows, int64_t cols)
{
    memset(t, 0, sizeof *t);
    t->dtype = QS_FP32;
    t->ndim = 2;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->strides[0] = cols;
    t->strides[1] = 1;
    t->numel = (size_t)(rows * cols);
    t->nbytes = t->numel * sizeof(float);
    t->data = (void *)(uintptr_t)v; /* read only: slots take operands as const */
}

static const struct {
    uint64_t cap;
    const char *name;
} quant_caps[QS_RECIPE_COUNT] = {
    [QS_RECIPE_DELAYED] = {QS_CAP_QUANT_DELAYED, "QS_CAP_QUANT_DELAYED"},
    [QS_RECIPE_CURRENT] = {QS_CAP_QUANT_CURRENT, "QS_CAP_QUANT_CURRENT"},
    [QS_RECIPE_MXFP8] = {QS_CAP_QUANT_MXFP8, "QS_CAP_QUANT_MXFP8"},
    [QS_RECIPE_BLOCK] = {QS_CAP_QUANT_BLOCK, "QS_CAP_QUANT_BLOCK"},
    [QS_RECIPE_NVFP4] = {QS_CAP_QUANT_NVFP4, "QS_CAP_QUANT_NVFP4"},
    [QS_RECIPE_ROWWISE] = {QS_CAP_QUANT_ROWWISE, "QS_CAP_QUANT_ROWWISE"},
    [QS_RECIPE_ROWWISE_GW_HP] = {QS_CAP_QUANT_ROWWISE, "QS_CAP_QUANT_ROWWISE"},
};

uint64_t qs_recipe_capability(qs_recipe_kind kind, const char **name)
{
    int known = (int)kind >= 0 && kind < QS_RECIPE_COUNT;
    if (name)
        *name = known ? quant_caps[kind].name : "";
    return known ? quant_caps[kind].cap : 0;
}

qs_status qsi_k_quantize(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x, qs_quantized *out)
{
    if (!q || !x || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "quantize: q, x or out is NULL");
    memset(out, 0, sizeof *out);
    qs_status s = qs_recipe_config_check(ctx, &q->cfg);
    if (s != QS_OK)
        return s;
    if (x->ndim != 2)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "quantize: x must be a 2-D tensor");
    if (q->cfg.kind == QS_RECIPE_DELAYED && (!q->ds.history || q->ds.len != q->cfg.history_len))
        return qs_ctx_error(ctx, QS_ERR_STATE, "quantize: delayed quantizer is not initialized");
    const qs_backend *t = qs_ctx_backend(ctx);
    if (!t->quantize)
        return missing(ctx, "quantize", NULL);
    const char *cap;
    if (!(t->caps & qs_recipe_capability(q->cfg.kind, &cap)))
        return missing(ctx, "quantize", cap);
    if (q->amax_given && !(t->caps & QS_CAP_DIST))
        return missing(ctx, "quantize with given amaxes", "QS_CAP_DIST");
    s = qs_quantized_alloc(ctx, &q->cfg, x->shape[0], x->shape[1], out);
    if (s != QS_OK)
        return s;
    float ds_scale = q->cfg.kind == QS_RECIPE_DELAYED ? q->ds.scale : 1.0f;
    qs_quantize_args args = {&q->cfg, x, ds_scale, out, q->amax_given ? q->given_amax : NULL};
    s = slot_status(ctx, t->quantize(state_of(ctx), &args), "quantize", NULL, 0);
    if (s == QS_OK && q->cfg.kind == QS_RECIPE_DELAYED) /* [REC-DS-RECORD] */
        s = qs_delayed_record(ctx, q,
                              out->amax[out->data[QS_DIR_ROW].data ? QS_DIR_ROW : QS_DIR_COL]);
    if (s != QS_OK)
        qs_quantized_free(out);
    return s;
}

static const struct {
    uint64_t cap;
    const char *name;
} gemm_caps[] = {
    [QS_GEMM_SCALE_NONE] = {QS_CAP_GEMM_TENSOR, "QS_CAP_GEMM_TENSOR"},
    [QS_GEMM_SCALE_TENSOR] = {QS_CAP_GEMM_TENSOR, "QS_CAP_GEMM_TENSOR"},
    [QS_GEMM_SCALE_BLOCK_1X128] = {QS_CAP_GEMM_BLOCK, "QS_CAP_GEMM_BLOCK"},
    [QS_GEMM_SCALE_BLOCK_128X128] = {QS_CAP_GEMM_BLOCK, "QS_CAP_GEMM_BLOCK"},
    [QS_GEMM_SCALE_MX] = {QS_CAP_GEMM_MX, "QS_CAP_GEMM_MX"},
    [QS_GEMM_SCALE_NVFP4] = {QS_CAP_GEMM_NVFP4, "QS_CAP_GEMM_NVFP4"},
};

qs_status qsi_k_gemm(qs_ctx *ctx, const qs_gemm_coded_operand *a, const qs_gemm_coded_operand *b,
                     int64_t m, int64_t n, int64_t k, qs_gemm_acc acc, qs_dtype out_dtype,
                     qs_tensor *y)
{
    memset(y, 0, sizeof *y);
    const qs_backend *t = qs_ctx_backend(ctx);
    if (!QS_BACKEND_HAS_SLOT(t->struct_size, gemm) || !t->gemm)
        return missing(ctx, "gemm", NULL);
    if ((unsigned)a->scaling >= QSI_ARRAY_LEN(gemm_caps) ||
        (unsigned)b->scaling >= QSI_ARRAY_LEN(gemm_caps))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "gemm: unknown operand scaling");
    if (!(t->caps & gemm_caps[a->scaling].cap))
        return missing(ctx, "gemm", gemm_caps[a->scaling].name);
    int64_t shape[2] = {m, n};
    qs_status s = qs_tensor_alloc(ctx, y, out_dtype, 2, shape);
    if (s != QS_OK)
        return s;
    char why[256] = "";
    qs_gemm_args args = {
        m, n, k, *a, *b, 1.0f, 0.0f, NULL, acc, out_dtype, y, QS_GEMM_CLAIM_MODEL, why, sizeof why};
    s = slot_status(ctx, t->gemm(state_of(ctx), &args), "gemm", why, sizeof why);
    if (s == QS_OK && (unsigned)args.claim >= QS_GEMM_CLAIM_COUNT)
        s = qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: gemm returned an unknown claim %d", t->name,
                         (int)args.claim);
    if (s == QS_OK && ctx && args.claim > ctx->kern_claim)
        ctx->kern_claim = args.claim;
    if (s != QS_OK)
        qs_tensor_free(y);
    return s;
}

/* [CASE-PLUGIN-REF] Records an sdpa or gdn slot's claim; an unknown one is an ABI error. */
static qs_status attn_claim_note(qs_ctx *ctx, qs_status s, const char *slot, qs_attn_claim claim)
{
    if (s != QS_OK || !ctx)
        return s;
    if ((unsigned)claim >= QS_ATTN_CLAIM_COUNT)
        return qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: %s returned an unknown claim %d",
                            qs_ctx_backend(ctx)->name, slot, (int)claim);
    if (claim != QS_ATTN_CLAIM_REFERENCE)
        ctx->kern_attn_tol = 1;
    return QS_OK;
}

static qs_status sdpa_ready(qs_ctx *ctx, const qs_backend *t, int bwd)
{
    if (!(bwd ? QS_BACKEND_HAS_SLOT(t->struct_size, sdpa_bwd) && t->sdpa_bwd
              : QS_BACKEND_HAS_SLOT(t->struct_size, sdpa_fwd) && t->sdpa_fwd))
        return missing(ctx, bwd ? "sdpa_bwd" : "sdpa_fwd", NULL);
    if (!(t->caps & QS_CAP_SDPA))
        return missing(ctx, bwd ? "sdpa_bwd" : "sdpa_fwd", "QS_CAP_SDPA");
    return QS_OK;
}

qs_status qsi_k_sdpa_fwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                         const float *v, float *o, float *lse)
{
    const qs_backend *t = qs_ctx_backend(ctx);
    qs_status s = sdpa_ready(ctx, t, 0);
    if (s != QS_OK)
        return s;
    char why[256] = "";
    qs_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.p = *p;
    a.p.scale = qs_sdpa_scale(p); /* [ATTN-SCALE]: the kit resolves it */
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
    a.why = why, a.why_len = sizeof why;
    s = slot_status(ctx, t->sdpa_fwd(state_of(ctx), &a), "sdpa_fwd", why, sizeof why);
    return attn_claim_note(ctx, s, "sdpa_fwd", a.claim);
}

qs_status qsi_k_sdpa_bwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                         const float *v, const float *o, const float *dout, float *dq, float *dk,
                         float *dv)
{
    const qs_backend *t = qs_ctx_backend(ctx);
    qs_status s = sdpa_ready(ctx, t, 1);
    if (s != QS_OK)
        return s;
    char why[256] = "";
    qs_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.p = *p;
    a.p.scale = qs_sdpa_scale(p);
    a.q = q, a.k = k, a.v = v, a.o = (float *)(uintptr_t)o,
    /* read only in backward */ a.dout = dout;
    a.dq = dq, a.dk = dk, a.dv = dv;
    a.why = why, a.why_len = sizeof why;
    s = slot_status(ctx, t->sdpa_bwd(state_of(ctx), &a), "sdpa_bwd", why, sizeof why);
    return attn_claim_note(ctx, s, "sdpa_bwd", a.claim);
}

static qs_status gdn_ready(qs_ctx *ctx, const qs_backend *t, int bwd)
{
    if (!(bwd ? QS_BACKEND_HAS_SLOT(t->struct_size, gdn_bwd) && t->gdn_bwd
              : QS_BACKEND_HAS_SLOT(t->struct_size, gdn_fwd) && t->gdn_fwd))
        return missing(ctx, bwd ? "gdn_bwd" : "gdn_fwd", NULL);
    if (!(t->caps & QS_CAP_GDN))
        return missing(ctx, bwd ? "gdn_bwd" : "gdn_fwd", "QS_CAP_GDN");
    return QS_OK;
}

/* [GDN-SCALE]: the kit resolves the default scale. */
static float gdn_scale(const qs_gdn_params *p)
{
    return p->scale != 0.0f ? p->scale : qs_rsqrtf((float)p->dk);
}

qs_status qsi_k_gdn_fwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        float *o, float *ht)
{
    const qs_backend *t = qs_ctx_backend(ctx);
    qs_status s = gdn_ready(ctx, t, 0);
    if (s != QS_OK)
        return s;
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = *p;
    a.p.scale = gdn_scale(p);
    a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.h0 = h0, a.o = o, a.ht = ht;
    a.why = why, a.why_len = sizeof why;
    s = slot_status(ctx, t->gdn_fwd(state_of(ctx), &a), "gdn_fwd", why, sizeof why);
    return attn_claim_note(ctx, s, "gdn_fwd", a.claim);
}

qs_status qsi_k_gdn_bwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        const float *dout, const float *dht, float *dq, float *dk, float *dv,
                        float *dg, float *dbeta, float *dh0)
{
    const qs_backend *t = qs_ctx_backend(ctx);
    qs_status s = gdn_ready(ctx, t, 1);
    if (s != QS_OK)
        return s;
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = *p;
    a.p.scale = gdn_scale(p);
    a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.h0 = h0;
    a.dout = dout, a.dht = dht;
    a.dq = dq, a.dk = dk, a.dv = dv, a.dg = dg, a.dbeta = dbeta, a.dh0 = dh0;
    a.why = why, a.why_len = sizeof why;
    s = slot_status(ctx, t->gdn_bwd(state_of(ctx), &a), "gdn_bwd", why, sizeof why);
    return attn_claim_note(ctx, s, "gdn_bwd", a.claim);
}
