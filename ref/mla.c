/* mla.c: the reference multi-head latent attention block of spec/attention.md [MLA-*]:
 * q and kv down-projections, RMSNorm on the compressed parts, up-projections, decoupled
 * RoPE (YaRN) on the shared pe head, softmax attention (ref/sdpa.c) and the output
 * projection; plain, and absorbed (W_UK folded into the query, latent MQA, W_UV after).
 * Every linear goes through a runner (mla_internal.h) that runs it quantized or in high
 * precision [MLA-LINEAR]; the stages are shared with the engine's mla op (ref/engine.c).
 * t is a token row, h a head, d/e/c feature indices. The backward [MLA-BWD] follows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "kernels_internal.h"
#include "mla_internal.h"
#include "recipe_internal.h"
#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/linear.h"
#include "qspec/mathf.h"

/* ---------------------------------------------------------------- names */

static const char *const linear_names[QS_MLA_LINEAR_COUNT] = {
    "q_down", "q_up", "q_proj", "kv_down", "kv_up", "k_up", "v_up", "out_proj"};
static const char *const param_names[QS_MLA_PARAM_COUNT] = {
    "w_dq", "q_norm", "w_uq", "w_q", "w_dkv", "kv_norm", "w_ukv", "w_uk", "w_uv", "w_o"};

const char *qs_mla_linear_name(qs_mla_linear l)
{
    return (unsigned)l < QS_MLA_LINEAR_COUNT ? linear_names[l] : NULL;
}

const char *qs_mla_param_name(qs_mla_param p)
{
    return (unsigned)p < QS_MLA_PARAM_COUNT ? param_names[p] : NULL;
}

int qs_mla_param_from_name(const char *name)
{
    for (int p = 0; name && p < QS_MLA_PARAM_COUNT; p++)
        if (strcmp(name, param_names[p]) == 0)
            return p;
    return -1;
}

int qs_mla_linear_used(const qs_mla_config *cfg, int split, qs_mla_linear l)
{
    if (cfg == NULL)
        return 0;
    int lora = cfg->q_lora_rank > 0, plain = !cfg->absorbed;
    switch (l) {
    case QS_MLA_Q_DOWN:
    case QS_MLA_Q_UP:
        return lora;
    case QS_MLA_Q_PROJ:
        return !lora;
    case QS_MLA_KV_DOWN:
    case QS_MLA_OUT_PROJ:
        return 1;
    case QS_MLA_KV_UP:
        return plain && !split;
    case QS_MLA_K_UP:
    case QS_MLA_V_UP:
        return plain && split;
    default:
        return 0;
    }
}

int qs_mla_param_shape(const qs_mla_config *cfg, int split, qs_mla_param p, int64_t shape[2])
{
    if (cfg == NULL || shape == NULL)
        return 0;
    int64_t n = cfg->heads, rq = cfg->q_lora_rank, rkv = cfg->kv_lora_rank, hid = cfg->hidden;
    int64_t dq = cfg->dn + cfg->dr, r = 0, c = 0;
    int lora = rq > 0, nd = 2;
    switch (p) {
    case QS_MLA_W_DQ:
        r = lora ? rq : 0, c = hid;
        break;
    case QS_MLA_Q_NORM:
        r = lora ? rq : 0, nd = 1;
        break;
    case QS_MLA_W_UQ:
        r = lora ? n * dq : 0, c = rq;
        break;
    case QS_MLA_W_Q:
        r = lora ? 0 : n * dq, c = hid;
        break;
    case QS_MLA_W_DKV:
        r = rkv + cfg->dr, c = hid;
        break;
    case QS_MLA_KV_NORM:
        r = rkv, nd = 1;
        break;
    case QS_MLA_W_UKV:
        r = split ? 0 : n * (cfg->dn + cfg->dv), c = rkv;
        break;
    case QS_MLA_W_UK:
        r = split ? n * cfg->dn : 0, c = rkv;
        break;
    case QS_MLA_W_UV:
        r = split ? n * cfg->dv : 0, c = rkv;
        break;
    case QS_MLA_W_O:
        r = hid, c = n * cfg->dv;
        break;
    default:
        return 0;
    }
    if (r == 0)
        return 0;
    shape[0] = r;
    shape[1] = nd == 2 ? c : 0;
    return nd;
}

/* ---------------------------------------------------------------- the linears */

/* out = a b^T through the gemm slot: a [m, k] and b [n, k] FP32 values as unscaled
 * operands, FP32 accumulation in increasing k from +0 (fp32_seq), FP32 out [m, n]. */
static qs_status qsi_mla_gemm(qs_ctx *ctx, const float *a, const float *b, int64_t m, int64_t n,
                              int64_t k, qs_tensor *out)
{
    qs_tensor ta, tb;
    qsi_f32_view(&ta, a, m, k);
    qsi_f32_view(&tb, b, n, k);
    qs_gemm_coded_operand oa = {QS_GEMM_SCALE_NONE, &ta, NULL, 1.0f};
    qs_gemm_coded_operand ob = {QS_GEMM_SCALE_NONE, &tb, NULL, 1.0f};
    qs_gemm_acc acc = {QS_GEMM_ACC_FP32_SEQ, 0};
    return qsi_k_gemm(ctx, &oa, &ob, m, n, k, acc, QS_FP32, out);
}

qs_status qsi_mla_lin_hp_fwd(qs_ctx *ctx, const qsi_mla_call *c)
{
    if (c->rows == 0)
        return QS_OK;
    qs_tensor y;
    qs_status s = qsi_mla_gemm(ctx, c->x, c->w, c->rows, c->out, c->in, &y);
    for (int64_t e = 0; s == QS_OK && e < c->rows * c->out; e++)
        c->y[e] = qsi_attn_round(c->dt, ((const float *)y.data)[e]);
    if (s == QS_OK)
        qs_tensor_free(&y);
    return s;
}

qs_status qsi_mla_lin_hp_bwd(qs_ctx *ctx, const qsi_mla_call *c)
{
    if (c->rows == 0) {
        for (int64_t e = 0; e < c->out * c->in; e++)
            c->dw[e] = 0.0f;
        return QS_OK;
    }
    size_t nw = (size_t)(c->out * c->in), ny = (size_t)(c->rows * c->out);
    size_t nx = (size_t)(c->rows * c->in);
    float *wt = malloc(nw * sizeof *wt), *dyt = malloc(ny * sizeof *dyt);
    float *xt = malloc(nx * sizeof *xt);
    qs_tensor dx = {0}, dw = {0};
    qs_status s = wt && dyt && xt ? QS_OK : qs_ctx_error(ctx, QS_ERR_NOMEM, "mla: out of memory");
    if (s == QS_OK) {
        qsi_transpose_f32(c->w, c->out, c->in, wt);                    /* W^T [in, out] */
        qsi_transpose_f32(c->dy, c->rows, c->out, dyt);                /* dY^T [out, rows] */
        qsi_transpose_f32(c->x, c->rows, c->in, xt);                   /* X^T [in, rows] */
        s = qsi_mla_gemm(ctx, c->dy, wt, c->rows, c->in, c->out, &dx); /* dX = dY W */
    }
    if (s == QS_OK)
        s = qsi_mla_gemm(ctx, dyt, xt, c->out, c->in, c->rows, &dw); /* dW = dY^T X */
    for (size_t e = 0; s == QS_OK && e < nx; e++)
        c->dx[e] = qsi_attn_round(c->dt, ((const float *)dx.data)[e]);
    if (s == QS_OK)
        memcpy(c->dw, dw.data, nw * sizeof(float));
    qs_tensor_free(&dx);
    qs_tensor_free(&dw);
    free(wt);
    free(dyt);
    free(xt);
    return s;
}

/* A [rows, cols] tensor of dtype dt holding the values v (exact: v are dt values). */
static qs_status qsi_mla_tensor(qs_ctx *ctx, qs_dtype dt, int64_t rows, int64_t cols,
                                const float *v, qs_tensor *t)
{
    int64_t shape[2] = {rows, cols};
    qs_status s = qs_tensor_alloc(ctx, t, dt, 2, shape);
    for (size_t i = 0; s == QS_OK && i < t->numel; i++) {
        if (dt == QS_BF16)
            ((uint16_t *)t->data)[i] = qs_f32_to_bf16(v[i]);
        else if (dt == QS_FP16)
            ((uint16_t *)t->data)[i] = qs_f32_to_f16(v[i]);
        else
            ((float *)t->data)[i] = v[i];
    }
    return s;
}

/* The values of a BF16, FP16 or FP32 tensor. */
static void qsi_mla_values(const qs_tensor *t, float *v)
{
    for (size_t i = 0; i < t->numel; i++) {
        if (t->dtype == QS_BF16)
            v[i] = qs_bf16_to_f32(((const uint16_t *)t->data)[i]);
        else if (t->dtype == QS_FP16)
            v[i] = qs_f16_to_f32(((const uint16_t *)t->data)[i]);
        else
            v[i] = ((const float *)t->data)[i];
    }
}

/* [MLA-LINEAR-QUANT]: x is handed over in the activation dtype, w as FP32 (its values
 * exactly). With no rows there is nothing to quantize: the high-precision linear gives
 * the same (empty) result. */
qs_status qsi_mla_lin_q_fwd(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qx, qs_quantizer *qw,
                            qsi_mla_saved *sv)
{
    if (c->rows == 0)
        return qsi_mla_lin_hp_fwd(ctx, c);
    qs_tensor xt = {0}, wt = {0}, yt = {0};
    qs_linear_options opt;
    qs_linear_options_default(&opt, qx->cfg.kind);
    opt.out_dtype = c->dt;
    qs_status s = qsi_mla_tensor(ctx, c->dt, c->rows, c->in, c->x, &xt);
    if (s == QS_OK)
        s = qsi_mla_tensor(ctx, QS_FP32, c->out, c->in, c->w, &wt);
    if (s == QS_OK)
        s = qs_linear_forward(ctx, &opt, qx, qw, &xt, &wt, &yt, &sv->xq, &sv->wq);
    if (s == QS_OK)
        qsi_mla_values(&yt, c->y);
    qs_tensor_free(&xt);
    qs_tensor_free(&wt);
    qs_tensor_free(&yt);
    return s;
}

/* [MLA-LINEAR-QUANT]: dgrad and wgrad in FP32; dx is then rounded to dt (for the default
 * accumulation models the GEMM's own rounding to dt gives the same bits). */
qs_status qsi_mla_lin_q_bwd(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qdy,
                            const qsi_mla_saved *sv)
{
    if (c->rows == 0)
        return qsi_mla_lin_hp_bwd(ctx, c);
    qs_tensor dyt = {0}, dxt = {0}, dwt = {0};
    qs_linear_options opt;
    qs_linear_options_default(&opt, sv->kind);
    opt.out_dtype = QS_FP32;
    qs_status s = qsi_mla_tensor(ctx, c->dt, c->rows, c->out, c->dy, &dyt);
    if (s == QS_OK)
        s = qs_linear_backward(ctx, &opt, qdy, &dyt, &sv->xq, &sv->wq, &dxt, &dwt);
    if (s == QS_OK) {
        qsi_mla_values(&dxt, c->dx);
        qsi_mla_values(&dwt, c->dw);
        for (int64_t e = 0; e < c->rows * c->in; e++)
            c->dx[e] = qsi_attn_round(c->dt, c->dx[e]);
    }
    qs_tensor_free(&dyt);
    qs_tensor_free(&dxt);
    qs_tensor_free(&dwt);
    return s;
}

qs_status qsi_mla_lin_calibrate(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qx,
                                qs_quantizer *qw)
{
    if (c->rows == 0)
        return QS_OK;
    qs_tensor xt = {0}, wt = {0};
    qs_status s = qsi_mla_tensor(ctx, c->dt, c->rows, c->in, c->x, &xt);
    if (s == QS_OK)
        s = qsi_mla_tensor(ctx, QS_FP32, c->out, c->in, c->w, &wt);
    if (s == QS_OK)
        s = qs_delayed_calibrate(ctx, qx, &xt);
    if (s == QS_OK)
        s = qs_delayed_calibrate(ctx, qw, &wt);
    qs_tensor_free(&xt);
    qs_tensor_free(&wt);
    return s;
}

/* ---------------------------------------------------------------- the absorbed einsums */

/* A strided matrix: element (i, j) is at[i * rs + j * cs]. */
typedef struct qsi_mla_view {
    const float *at;
    int64_t rs, cs;
} qsi_mla_view;

static qsi_mla_view qsi_mla_view_of(const float *at, int64_t rs, int64_t cs)
{
    qsi_mla_view v = {at, rs, cs};
    return v;
}

/* Elements (i, j), i < rows, j < cols, of v packed row-major into out, by 32 x 32 tiles so
 * that a transposed view (cs the long stride) is read a cache line at a time. */
static void qsi_mla_pack(qsi_mla_view v, int64_t rows, int64_t cols, float *out)
{
    enum { TILE = 32 };
    for (int64_t i0 = 0; i0 < rows; i0 += TILE)
        for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
            int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
            int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++)
                    out[i * cols + j] = v.at[i * v.rs + j * v.cs];
        }
}

/* One head's einsum of the absorbed form [MLA-ABSORBED] [MLA-BWD-ABSORBED]: for i < m and
 * j < n, y(i, j) = the FP32 sum over increasing k from +0 of fl(a(i, k) b(j, k)), stored
 * round_dt(y) at out[i * ors + j * ocs] (dt QS_FP32: unrounded). That sum is the fp32_seq
 * GEMM of unscaled operands, so it goes through the gemm slot on packed copies of a and b. */
static qs_status qsi_mla_head_einsum(qs_ctx *ctx, qsi_mla_view a, qsi_mla_view b, int64_t m,
                                     int64_t n, int64_t k, float *out, int64_t ors, int64_t ocs,
                                     qs_dtype dt)
{
    if (m == 0 || n == 0)
        return QS_OK;
    if (k == 0) { /* the empty sum */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                out[i * ors + j * ocs] = 0.0f;
        return QS_OK;
    }
    float *pa = malloc((size_t)(m * k) * sizeof *pa), *pb = malloc((size_t)(n * k) * sizeof *pb);
    qs_tensor y = {0};
    qs_status s = pa && pb ? QS_OK : qs_ctx_error(ctx, QS_ERR_NOMEM, "mla: out of memory");
    if (s == QS_OK) {
        qsi_mla_pack(a, m, k, pa);
        qsi_mla_pack(b, n, k, pb);
        s = qsi_mla_gemm(ctx, pa, pb, m, n, k, &y);
    }
    for (int64_t i = 0; s == QS_OK && i < m; i++)
        for (int64_t j = 0; j < n; j++)
            out[i * ors + j * ocs] = qsi_attn_round(dt, ((const float *)y.data)[i * n + j]);
    qs_tensor_free(&y);
    free(pa);
    free(pb);
    return s;
}

/* ---------------------------------------------------------------- pieces */

/* RMSNorm of each row [MLA-NORM]: y_i = round_dt(fl(fl(x_i * rstd) * w_i)),
 * rstd = rsqrt(fl(sum x^2 / n) + eps); x rows have stride ld. */
static void qsi_mla_rmsnorm(int64_t rows, int64_t n, int64_t ld, const float *x, const float *w,
                            float eps, float *y, qs_dtype dt)
{
    for (int64_t t = 0; t < rows; t++) {
        const float *xr = x + t * ld;
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++)
            ss = ss + xr[i] * xr[i];
        float rstd = qs_rsqrtf(ss / (float)n + eps);
        for (int64_t i = 0; i < n; i++)
            y[t * n + i] = qsi_attn_round(dt, (xr[i] * rstd) * w[i]);
    }
}

/* _yarn_get_mscale: 1 for f <= 1, else 0.1 m ln f + 1 [MLA-YARN]. */
static float qsi_mla_mscale(float f, float m)
{
    return f <= 1.0f ? 1.0f : 0.1f * m * qs_logf(f) + 1.0f;
}

float qs_mla_softmax_scale(const qs_mla_config *cfg)
{
    float m = qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale_all_dim); /* [MLA-SCALE] */
    return (m * m) * qs_rsqrtf((float)(cfg->dn + cfg->dr));
}

/* The YaRN correction dim of a rotation count [MLA-YARN]. */
static float qsi_mla_corr_dim(const qs_mla_config *cfg, float rot)
{
    const float two_pi = 6.28318530717958647692f;
    float num = (float)cfg->dr * qs_logf((float)cfg->yarn_original_max_pos / (rot * two_pi));
    return num / (2.0f * qs_logf(cfg->rope_base));
}

qs_status qs_mla_rope_inv_freq(qs_ctx *ctx, const qs_mla_config *cfg, float *inv, float *low,
                               float *high)
{
    if (cfg == NULL || inv == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_mla_rope_inv_freq: NULL argument");
    if (cfg->dr < 2 || cfg->dr % 2 != 0 || !(cfg->rope_base > 1.0f))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "qs_mla_rope_inv_freq: need an even dr >= 2 and rope_base > 1");
    int yarn = cfg->yarn_factor > 1.0f;
    if (yarn && cfg->yarn_original_max_pos < 1)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "qs_mla_rope_inv_freq: yarn_original_max_pos must be >= 1");
    float lo = 0.0f, hi = 0.0f;
    if (yarn) {
        lo = floorf(qsi_mla_corr_dim(cfg, cfg->yarn_beta_fast));
        hi = ceilf(qsi_mla_corr_dim(cfg, cfg->yarn_beta_slow));
        lo = lo < 0.0f ? 0.0f : lo;
        hi = hi > (float)(cfg->dr - 1) ? (float)(cfg->dr - 1) : hi;
        if (lo == hi)
            hi = hi + 0.001f;
    }
    for (int64_t j = 0; j < cfg->dr / 2; j++) {
        float pw = qs_expf(((float)(2 * j) / (float)cfg->dr) * qs_logf(cfg->rope_base));
        float extra = 1.0f / pw;
        if (!yarn) {
            inv[j] = extra;
            continue;
        }
        float inter = 1.0f / (cfg->yarn_factor * pw);
        float ramp = ((float)j - lo) / (hi - lo);
        ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
        inv[j] = inter * ramp + extra * (1.0f - ramp);
    }
    if (low != NULL)
        *low = lo;
    if (high != NULL)
        *high = hi;
    return QS_OK;
}

/* The rotation constants of position pos [MLA-ROPE]: cs[j] = C_j = round_dt(fl(cos(pos
 * inv_j) m)) and cs[dr/2 + j] = S_j = round_dt(fl(sin(pos inv_j) m)), j < dr/2, with m the
 * YaRN mscale ratio. A block computes them once per token row for all its rotations. */
static void qsi_mla_rope_consts(const qs_mla_config *cfg, qs_dtype dt, const float *inv,
                                int64_t pos, float *cs)
{
    float m = qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale) /
              qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale_all_dim);
    int64_t half = cfg->dr / 2;
    for (int64_t j = 0; j < half; j++) {
        float fr = (float)pos * inv[j];
        cs[j] = qsi_attn_round(dt, qs_cosf(fr) * m);
        cs[half + j] = qsi_attn_round(dt, qs_sinf(fr) * m);
    }
}

/* RoPE of one vector of dr = 2 half values with its position's constants [MLA-ROPE]. */
static void qsi_mla_rope_apply(int64_t half, qs_dtype dt, const float *cs, const float *x, float *y)
{
    for (int64_t j = 0; j < half; j++) {
        float c = cs[j], s = cs[half + j];
        float a = x[2 * j], b = x[2 * j + 1];
        y[j] = qsi_attn_round(dt, qsi_attn_round(dt, a * c) + qsi_attn_round(dt, -b * s));
        y[half + j] = qsi_attn_round(dt, qsi_attn_round(dt, b * c) + qsi_attn_round(dt, a * s));
    }
}

qs_status qs_mla_rope(qs_ctx *ctx, const qs_mla_config *cfg, qs_dtype dtype, int64_t pos,
                      const float *x, float *y)
{
    if (x == NULL || y == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_mla_rope: NULL argument");
    if (pos < 0 || pos > (1 << 20))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_mla_rope: pos %lld outside 0..2^20",
                            (long long)pos);
    qs_status st = qsi_attn_check_dtype(ctx, "qs_mla_rope", dtype);
    float inv[512], cs[1024];
    if (st == QS_OK && cfg != NULL && cfg->dr > 1024)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_mla_rope: dr > 1024");
    if (st == QS_OK)
        st = qs_mla_rope_inv_freq(ctx, cfg, inv, NULL, NULL);
    if (st == QS_OK) {
        qsi_mla_rope_consts(cfg, dtype, inv, pos, cs);
        qsi_mla_rope_apply(cfg->dr / 2, dtype, cs, x, y);
    }
    return st;
}

/* ---------------------------------------------------------------- checks and geometry */

int64_t qsi_mla_tokens(const qs_mla_shape *sh)
{
    return sh->layout == QS_ATTN_THD ? sh->s : sh->b * sh->s;
}

/* The RoPE position (index within its sequence) of every token row [MLA-ROPE]. */
static void qsi_mla_positions(const qs_mla_shape *sh, int64_t *pos)
{
    for (int64_t r = 0; r < qsi_mla_tokens(sh); r++) {
        if (sh->layout == QS_ATTN_SBHD)
            pos[r] = r / sh->b;
        else if (sh->layout == QS_ATTN_BSHD)
            pos[r] = r % sh->s;
    }
    for (int64_t n = 0; sh->layout == QS_ATTN_THD && n < sh->b; n++)
        for (int64_t r = sh->cu_seqlens[n]; r < sh->cu_seqlens[n + 1]; r++)
            pos[r] = r - sh->cu_seqlens[n];
}

qs_status qsi_mla_check(qs_ctx *ctx, const char *fn, const qsi_mla_block *b)
{
    const qs_mla_config *c = b->cfg;
    const qs_mla_shape *sh = b->shape;
    const qs_mla_weights *w = b->w;
    if (c == NULL || sh == NULL || w == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: NULL cfg, shape or weights", fn);
    if (c->hidden < 1 || c->heads < 1 || c->q_lora_rank < 0 || c->kv_lora_rank < 1 || c->dn < 1 ||
        c->dv < 1 || c->dr < 2 || c->dr % 2 != 0 || c->dr > 1024)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: bad MLA dimensions [MLA-SHAPES]", fn);
    if (!(c->norm_eps > 0.0f))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: norm_eps must be > 0", fn);
    if (sh->b < 0 || sh->s < 0 || sh->s > (1 << 20) || (unsigned)sh->layout >= 3)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: bad shape (b, s, layout)", fn);
    qs_status st = qsi_attn_check_dtype(ctx, fn, sh->dtype);
    if (st == QS_OK && sh->layout == QS_ATTN_THD)
        st = qsi_attn_check_cu(ctx, fn, "cu_seqlens", sh->cu_seqlens, sh->b, sh->s);
    int need_q = c->q_lora_rank > 0 ? (w->w_dq && w->q_norm && w->w_uq) : (w->w_q != NULL);
    int need_kv = w->w_ukv != NULL || (w->w_uk != NULL && w->w_uv != NULL);
    if (st == QS_OK && (!need_q || !need_kv || !w->w_dkv || !w->kv_norm || !w->w_o))
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: a weight the config needs is NULL", fn);
    return st;
}

/* Head h's W_UK row d (rkv values) and W_UV row e, from combined or split weights. */
static const float *qsi_mla_wuk(const qs_mla_config *c, const qs_mla_weights *w, int64_t h,
                                int64_t d)
{
    int64_t r = w->w_ukv != NULL ? h * (c->dn + c->dv) + d : h * c->dn + d;
    return (w->w_ukv != NULL ? w->w_ukv : w->w_uk) + r * c->kv_lora_rank;
}
static const float *qsi_mla_wuv(const qs_mla_config *c, const qs_mla_weights *w, int64_t h,
                                int64_t e)
{
    int64_t r = w->w_ukv != NULL ? h * (c->dn + c->dv) + c->dn + e : h * c->dv + e;
    return (w->w_ukv != NULL ? w->w_ukv : w->w_uv) + r * c->kv_lora_rank;
}

/* ---------------------------------------------------------------- the state */

struct qsi_mla_state {
    int64_t T;
    int64_t *pos;
    float inv[512];
    float *rope; /* [T, dr]: each token row's rotation constants (qsi_mla_rope_consts) */
    const float *q_in, *ckv_in, *kpe_in; /* the region's inputs */
    /* down-projections: c_q (pre-norm), [c_kv | k_pe] and its two parts */
    float *cq, *kvc, *ckv, *kpe0;
    /* the region: normed c_q, q, c, rotated k_pe, the K/V up outputs (combined or split),
     * and its outputs query, key, value */
    float *cqn, *q, *c, *kpe, *kvu, *ku, *vu, *query, *key, *value;
    /* after the region: the attention output and (absorbed) lat W_UV^T */
    float *att, *o;
    qsi_mla_saved sv[QS_MLA_LINEAR_COUNT];
    /* backward */
    float *d_o, *d_att, *d_query, *d_key, *d_value, *d_q, *d_cqn, *d_cq, *d_kvu, *d_ku, *d_vu;
    float *d_c, *d_ck, *d_cv, *d_ckv, *d_kvc, *dx_q, *dx_kv;
};

/* Geometry of the block. */
typedef struct qsi_mla_dims {
    int64_t T, H, rq, rkv, dr, dn, dv, dqin, dq, hk, dvv, nkv, hid;
} qsi_mla_dims;

static qsi_mla_dims qsi_mla_dims_of(const qsi_mla_block *b)
{
    const qs_mla_config *c = b->cfg;
    qsi_mla_dims d;
    d.T = qsi_mla_tokens(b->shape);
    d.H = c->heads, d.rq = c->q_lora_rank, d.rkv = c->kv_lora_rank, d.dr = c->dr;
    d.dn = c->dn, d.dv = c->dv, d.dqin = c->dn + c->dr, d.hid = c->hidden;
    d.dq = c->absorbed ? d.rkv + d.dr : d.dqin;
    d.hk = c->absorbed ? 1 : d.H;
    d.dvv = c->absorbed ? d.rkv : d.dv;
    d.nkv = d.H * (d.dn + d.dv);
    return d;
}

qs_status qsi_mla_state_new(qs_ctx *ctx, const char *fn, const qsi_mla_block *b,
                            qsi_mla_state **out)
{
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qsi_mla_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    st->T = d.T;
    float **p[] = {&st->cq,      &st->kvc,   &st->ckv,     &st->kpe0, &st->cqn,   &st->q,
                   &st->c,       &st->kpe,   &st->kvu,     &st->ku,   &st->vu,    &st->query,
                   &st->key,     &st->value, &st->att,     &st->o,    &st->d_o,   &st->d_att,
                   &st->d_query, &st->d_key, &st->d_value, &st->d_q,  &st->d_cqn, &st->d_cq,
                   &st->d_kvu,   &st->d_ku,  &st->d_vu,    &st->d_c,  &st->d_ck,  &st->d_cv,
                   &st->d_ckv,   &st->d_kvc, &st->dx_q,    &st->dx_kv};
    int64_t n[] = {d.rq,        d.rkv + d.dr, d.rkv,        d.dr,         d.rq,       d.H * d.dqin,
                   d.rkv,       d.dr,         d.nkv,        d.H * d.dn,   d.H * d.dv, d.H * d.dq,
                   d.hk * d.dq, d.hk * d.dvv, d.H * d.dvv,  d.H * d.dv,   d.H * d.dv, d.H * d.dvv,
                   d.H * d.dq,  d.hk * d.dq,  d.hk * d.dvv, d.H * d.dqin, d.rq,       d.rq,
                   d.nkv,       d.H * d.dn,   d.H * d.dv,   d.rkv,        d.rkv,      d.rkv,
                   d.rkv,       d.rkv + d.dr, d.hid,        d.hid};
    int bad = 0;
    for (size_t e = 0; e < sizeof n / sizeof n[0]; e++) {
        *p[e] = malloc(((size_t)(d.T * n[e]) + 1) * sizeof(float));
        bad |= *p[e] == NULL;
    }
    st->pos = malloc(((size_t)d.T + 1) * sizeof(int64_t));
    st->rope = malloc(((size_t)(d.T * d.dr) + 1) * sizeof(float));
    qs_status s = QS_OK;
    if (bad || st->pos == NULL || st->rope == NULL)
        s = qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    if (s == QS_OK) {
        qsi_mla_positions(b->shape, st->pos);
        s = qs_mla_rope_inv_freq(ctx, b->cfg, st->inv, NULL, NULL);
    }
    for (int64_t t = 0; s == QS_OK && t < d.T; t++)
        qsi_mla_rope_consts(b->cfg, b->shape->dtype, st->inv, st->pos[t], st->rope + t * d.dr);
    if (s != QS_OK) {
        qsi_mla_state_free(st);
        return s;
    }
    *out = st;
    return QS_OK;
}

static void qsi_mla_saved_free(qsi_mla_saved *sv)
{
    qs_quantized_free(&sv->xq);
    qs_quantized_free(&sv->wq);
}

void qsi_mla_state_free(qsi_mla_state *st)
{
    if (st == NULL)
        return;
    float *p[] = {st->cq,   st->kvc,   st->ckv,   st->kpe0,  st->cqn,     st->q,     st->c,
                  st->kpe,  st->kvu,   st->ku,    st->vu,    st->query,   st->key,   st->value,
                  st->att,  st->o,     st->d_o,   st->d_att, st->d_query, st->d_key, st->d_value,
                  st->d_q,  st->d_cqn, st->d_cq,  st->d_kvu, st->d_ku,    st->d_vu,  st->d_c,
                  st->d_ck, st->d_cv,  st->d_ckv, st->d_kvc, st->dx_q,    st->dx_kv};
    for (size_t e = 0; e < sizeof p / sizeof p[0]; e++)
        free(p[e]);
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        qsi_mla_saved_free(&st->sv[l]);
    free(st->pos);
    free(st->rope);
    free(st);
}

/* A call of linear l over rows T (forward: x -> y; backward: dy -> dx, dw). */
static qsi_mla_call qsi_mla_mkcall(const qsi_mla_block *b, qs_mla_linear l, int64_t in, int64_t out,
                                   const float *x, const float *w)
{
    qsi_mla_call c;
    memset(&c, 0, sizeof c);
    c.lin = l;
    c.rows = qsi_mla_tokens(b->shape);
    c.in = in;
    c.out = out;
    c.dt = b->shape->dtype;
    c.x = x;
    c.w = w;
    return c;
}

static qs_status qsi_mla_run_fwd(const qsi_mla_runner *r, qsi_mla_call *c, qsi_mla_state *st,
                                 float *y)
{
    c->y = y;
    qsi_mla_saved_free(&st->sv[c->lin]);
    memset(&st->sv[c->lin], 0, sizeof st->sv[c->lin]);
    return r->fwd(r->arg, c, &st->sv[c->lin]);
}

static qs_status qsi_mla_run_bwd(const qsi_mla_runner *r, qsi_mla_call *c, qsi_mla_state *st,
                                 const float *dy, float *dx, float *dw)
{
    c->dy = dy;
    c->dx = dx;
    c->dw = dw;
    return r->bwd(r->arg, c, &st->sv[c->lin]);
}

static qs_status qsi_mla_note(const qsi_mla_runner *r, qsi_mla_einsum e, int backward)
{
    return r->einsum != NULL ? r->einsum(r->arg, e, backward) : QS_OK;
}

/* ---------------------------------------------------------------- forward */

qs_status qsi_mla_fwd_down(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *x, qsi_mla_state *st)
{
    (void)ctx;
    const qs_mla_config *c = b->cfg;
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qs_status s = QS_OK;
    st->q_in = x;
    if (d.rq > 0) { /* [MLA-Q-PATH] */
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_Q_DOWN, d.hid, d.rq, x, b->w->w_dq);
        s = qsi_mla_run_fwd(r, &k, st, st->cq);
        st->q_in = st->cq;
    }
    if (s == QS_OK) { /* [MLA-KV-PATH] */
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_KV_DOWN, d.hid, d.rkv + d.dr, x, b->w->w_dkv);
        s = qsi_mla_run_fwd(r, &k, st, st->kvc);
    }
    for (int64_t t = 0; s == QS_OK && t < d.T; t++) {
        memcpy(st->ckv + t * d.rkv, st->kvc + t * (d.rkv + d.dr), (size_t)d.rkv * sizeof(float));
        memcpy(st->kpe0 + t * d.dr, st->kvc + t * (d.rkv + d.dr) + d.rkv,
               (size_t)c->dr * sizeof(float));
    }
    st->ckv_in = st->ckv;
    st->kpe_in = st->kpe0;
    return s;
}

/* Absorbed query part: q_abs[t, h, c] = round_dt(sum_d q_nope[t, h, d] W_UK[h][d][c]),
 * one einsum per head. */
static qs_status qsi_mla_absorb_q(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_dims *d,
                                  const float *q, float *query)
{
    qs_status s = QS_OK;
    for (int64_t h = 0; s == QS_OK && h < d->H; h++)
        s = qsi_mla_head_einsum(ctx, qsi_mla_view_of(q + h * d->dqin, d->H * d->dqin, 1),
                                qsi_mla_view_of(qsi_mla_wuk(b->cfg, b->w, h, 0), 1, d->rkv), d->T,
                                d->rkv, d->dn, query + h * d->dq, d->H * d->dq, 1, b->shape->dtype);
    return s;
}

/* The plain K/V up-projection [MLA-LINEAR]: one kv_up linear over the combined rows, or
 * k_up and v_up over the split ones [MLA-SPLIT-KV]; then key = [k_nope_h | RoPE(k_pe)],
 * value = v_h. */
static qs_status qsi_mla_plain_kv(const qsi_mla_block *b, const qsi_mla_dims *d,
                                  const qsi_mla_runner *r, qsi_mla_state *st)
{
    const qs_mla_weights *w = b->w;
    qs_status s;
    if (w->w_ukv != NULL) {
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_KV_UP, d->rkv, d->nkv, st->c, w->w_ukv);
        s = qsi_mla_run_fwd(r, &k, st, st->kvu);
    } else {
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_K_UP, d->rkv, d->H * d->dn, st->c, w->w_uk);
        qsi_mla_call v = qsi_mla_mkcall(b, QS_MLA_V_UP, d->rkv, d->H * d->dv, st->c, w->w_uv);
        s = qsi_mla_run_fwd(r, &k, st, st->ku);
        if (s == QS_OK)
            s = qsi_mla_run_fwd(r, &v, st, st->vu);
    }
    for (int64_t t = 0; s == QS_OK && t < d->T; t++)
        for (int64_t h = 0; h < d->H; h++) {
            float *kr = st->key + (t * d->H + h) * d->dq, *vr = st->value + (t * d->H + h) * d->dv;
            const float *kn = w->w_ukv != NULL ? st->kvu + t * d->nkv + h * (d->dn + d->dv)
                                               : st->ku + (t * d->H + h) * d->dn;
            const float *vn = w->w_ukv != NULL ? kn + d->dn : st->vu + (t * d->H + h) * d->dv;
            memcpy(kr, kn, (size_t)d->dn * sizeof(float));
            memcpy(kr + d->dn, st->kpe + t * d->dr, (size_t)d->dr * sizeof(float));
            memcpy(vr, vn, (size_t)d->dv * sizeof(float));
        }
    return s;
}

qs_status qsi_mla_fwd_up(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                         qsi_mla_state *st)
{
    const qs_mla_config *c = b->cfg;
    const qs_mla_weights *w = b->w;
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qs_dtype dt = b->shape->dtype;
    qs_status s;
    if (d.rq > 0) { /* [MLA-Q-PATH] */
        qsi_mla_rmsnorm(d.T, d.rq, d.rq, st->q_in, w->q_norm, c->norm_eps, st->cqn, dt);
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_Q_UP, d.rq, d.H * d.dqin, st->cqn, w->w_uq);
        s = qsi_mla_run_fwd(r, &k, st, st->q);
    } else {
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_Q_PROJ, d.hid, d.H * d.dqin, st->q_in, w->w_q);
        s = qsi_mla_run_fwd(r, &k, st, st->q);
    }
    if (s != QS_OK)
        return s;
    qsi_mla_rmsnorm(d.T, d.rkv, d.rkv, st->ckv_in, w->kv_norm, c->norm_eps, st->c, dt);
    for (int64_t t = 0; t < d.T; t++) /* [MLA-ROPE] */
        qsi_mla_rope_apply(d.dr / 2, dt, st->rope + t * d.dr, st->kpe_in + t * d.dr,
                           st->kpe + t * d.dr);
    for (int64_t t = 0; t < d.T; t++)
        for (int64_t h = 0; h < d.H; h++) {
            const float *qr = st->q + (t * d.H + h) * d.dqin;
            float *out = st->query + (t * d.H + h) * d.dq;
            if (!c->absorbed)
                memcpy(out, qr, (size_t)d.dn * sizeof(float));
            qsi_mla_rope_apply(d.dr / 2, dt, st->rope + t * d.dr, qr + d.dn, out + d.dq - d.dr);
        }
    if (!c->absorbed)
        return qsi_mla_plain_kv(b, &d, r, st);
    s = qsi_mla_note(r, QSI_MLA_K_ABSORB, 0); /* [MLA-ABSORBED] [MLA-ABSORBED-HP] */
    if (s != QS_OK)
        return s;
    s = qsi_mla_absorb_q(ctx, b, &d, st->q, st->query);
    for (int64_t t = 0; s == QS_OK && t < d.T; t++) {
        memcpy(st->key + t * d.dq, st->c + t * d.rkv, (size_t)d.rkv * sizeof(float));
        memcpy(st->key + t * d.dq + d.rkv, st->kpe + t * d.dr, (size_t)d.dr * sizeof(float));
        memcpy(st->value + t * d.rkv, st->c + t * d.rkv, (size_t)d.rkv * sizeof(float));
    }
    return s;
}

static uint64_t qsi_mla_fnv(uint64_t h, const float *v, int64_t n)
{
    for (int64_t e = 0; e < n; e++) {
        uint32_t u = qs_f32_bits(v[e]);
        for (int k = 0; k < 4; k++)
            h = (h ^ ((u >> (8 * k)) & 0xffu)) * 1099511628211ull;
    }
    return h;
}

uint64_t qsi_mla_up_digest(const qsi_mla_block *b, const qsi_mla_state *st)
{
    qsi_mla_dims d = qsi_mla_dims_of(b);
    uint64_t h = 14695981039346656037ull;
    h = qsi_mla_fnv(h, st->query, d.T * d.H * d.dq);
    h = qsi_mla_fnv(h, st->key, d.T * d.hk * d.dq);
    return qsi_mla_fnv(h, st->value, d.T * d.hk * d.dvv);
}

static void qsi_mla_poison(float *v, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        v[e] = NAN;
}

void qsi_mla_up_discard(const qsi_mla_block *b, qsi_mla_state *st)
{
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qsi_mla_poison(st->cqn, d.T * d.rq);
    qsi_mla_poison(st->q, d.T * d.H * d.dqin);
    qsi_mla_poison(st->c, d.T * d.rkv);
    qsi_mla_poison(st->kpe, d.T * d.dr);
    qsi_mla_poison(st->kvu, d.T * d.nkv);
    qsi_mla_poison(st->ku, d.T * d.H * d.dn);
    qsi_mla_poison(st->vu, d.T * d.H * d.dv);
    qsi_mla_poison(st->query, d.T * d.H * d.dq);
    qsi_mla_poison(st->key, d.T * d.hk * d.dq);
    qsi_mla_poison(st->value, d.T * d.hk * d.dvv);
    const qs_mla_linear region[] = {QS_MLA_Q_UP, QS_MLA_Q_PROJ, QS_MLA_KV_UP, QS_MLA_K_UP,
                                    QS_MLA_V_UP};
    for (size_t e = 0; e < sizeof region / sizeof region[0]; e++) {
        qsi_mla_saved_free(&st->sv[region[e]]);
        memset(&st->sv[region[e]], 0, sizeof st->sv[region[e]]);
    }
}

/* The SDPA parameters of the block's attention [MLA-ATTN] [MLA-ABSORBED]. */
static qs_sdpa_params qsi_mla_sdpa(const qsi_mla_block *b)
{
    const qs_mla_config *c = b->cfg;
    const qs_mla_shape *sh = b->shape;
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.layout = sh->layout;
    p.mask = sh->mask;
    p.b = sh->b;
    p.sq = p.sk = sh->s;
    p.cu_seqlens_q = p.cu_seqlens_kv = sh->cu_seqlens;
    p.h = c->heads;
    p.hkv = c->absorbed ? 1 : c->heads;
    p.d = c->absorbed ? c->kv_lora_rank + c->dr : c->dn + c->dr;
    p.dv = c->absorbed ? c->kv_lora_rank : c->dv;
    p.scale = qs_mla_softmax_scale(c);
    p.dtype = sh->dtype;
    return p;
}

qs_status qsi_mla_fwd_out(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                          qsi_mla_state *st, float *out)
{
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qs_sdpa_params p = qsi_mla_sdpa(b);
    qs_status s = qsi_k_sdpa_fwd(ctx, &p, st->query, st->key, st->value, st->att, NULL);
    const float *o = st->att;
    if (s == QS_OK && b->cfg->absorbed) /* [MLA-ABSORBED] [MLA-ABSORBED-HP] */
        s = qsi_mla_note(r, QSI_MLA_V_ABSORB, 0);
    /* absorbed: o[t, h, e] = round_dt(sum_c lat[t, h, c] W_UV[h][e][c]), per head */
    if (s == QS_OK && b->cfg->absorbed) {
        for (int64_t h = 0; s == QS_OK && h < d.H; h++)
            s = qsi_mla_head_einsum(ctx, qsi_mla_view_of(st->att + h * d.rkv, d.H * d.rkv, 1),
                                    qsi_mla_view_of(qsi_mla_wuv(b->cfg, b->w, h, 0), d.rkv, 1), d.T,
                                    d.dv, d.rkv, st->o + h * d.dv, d.H * d.dv, 1, b->shape->dtype);
        o = st->o;
    }
    if (s == QS_OK) { /* [MLA-ATTN] */
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_OUT_PROJ, d.H * d.dv, d.hid, o, b->w->w_o);
        s = qsi_mla_run_fwd(r, &k, st, out);
    }
    return s;
}

/* ---------------------------------------------------------------- backward [MLA-BWD] */

/* RMSNorm backward of each row [MLA-BWD-NORM]: with xn_i = fl(x_i * rstd) (unrounded) and
 * dxn_i = fl(dy_i * w_i): c = fl((sum_i dxn_i xn_i) / n), dx_i = round_dt(fl(rstd *
 * fl(dxn_i - fl(xn_i * c)))); dw_i = sum over rows of fl(dy_i * xn_i). x has stride ld. */
static void qsi_mla_rmsnorm_bwd(int64_t rows, int64_t n, int64_t ld, const float *x, const float *w,
                                float eps, const float *dy, float *dx, float *dw, qs_dtype dt)
{
    for (int64_t i = 0; i < n; i++)
        dw[i] = 0.0f;
    for (int64_t t = 0; t < rows; t++) {
        const float *xr = x + t * ld, *dyr = dy + t * n;
        float ss = 0.0f, c = 0.0f;
        for (int64_t i = 0; i < n; i++)
            ss = ss + xr[i] * xr[i];
        float rstd = qs_rsqrtf(ss / (float)n + eps);
        for (int64_t i = 0; i < n; i++)
            c = c + (dyr[i] * w[i]) * (xr[i] * rstd);
        c = c / (float)n;
        for (int64_t i = 0; i < n; i++) {
            float xn = xr[i] * rstd;
            dx[t * n + i] = qsi_attn_round(dt, rstd * (dyr[i] * w[i] - xn * c));
            dw[i] = dw[i] + dyr[i] * xn;
        }
    }
}

/* RoPE backward of one vector, the transpose of the rotation with the forward's constants
 * C_j, S_j [MLA-BWD-ROPE]: with g1 = dy[j], g2 = dy[dr/2 + j],
 * dx[2j] = round_dt(round_dt(g1 C) + round_dt(g2 S)), dx[2j+1] = round_dt(round_dt(g2 C) +
 * round_dt(-g1 S)). */
static void qsi_mla_rope_bwd(int64_t half, qs_dtype dt, const float *cs, const float *dy, float *dx)
{
    for (int64_t j = 0; j < half; j++) {
        float c = cs[j], s = cs[half + j];
        float g1 = dy[j], g2 = dy[half + j];
        dx[2 * j] = qsi_attn_round(dt, qsi_attn_round(dt, g1 * c) + qsi_attn_round(dt, g2 * s));
        dx[2 * j + 1] =
            qsi_attn_round(dt, qsi_attn_round(dt, g2 * c) + qsi_attn_round(dt, -g1 * s));
    }
}

/* Head h's rows of the K/V weight gradients, combined or split (as qsi_mla_wuk/wuv). */
static float *qsi_mla_duk(const qs_mla_config *c, const qs_mla_grads *g, int64_t h, int64_t d)
{
    if (g->dw_ukv != NULL)
        return g->dw_ukv + (h * (c->dn + c->dv) + d) * c->kv_lora_rank;
    return g->dw_uk + (h * c->dn + d) * c->kv_lora_rank;
}
static float *qsi_mla_duv(const qs_mla_config *c, const qs_mla_grads *g, int64_t h, int64_t e)
{
    if (g->dw_ukv != NULL)
        return g->dw_ukv + (h * (c->dn + c->dv) + c->dn + e) * c->kv_lora_rank;
    return g->dw_uv + (h * c->dv + e) * c->kv_lora_rank;
}

/* The output side: the out_proj linear's backward, from dout to d_o and dW_O. */
qs_status qsi_mla_bwd_proj(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *dout, const qs_mla_grads *g, qsi_mla_state *st)
{
    (void)ctx;
    qsi_mla_dims d = qsi_mla_dims_of(b);
    const float *o = b->cfg->absorbed ? st->o : st->att;
    qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_OUT_PROJ, d.H * d.dv, d.hid, o, b->w->w_o);
    return qsi_mla_run_bwd(r, &k, st, dout, st->d_o, g->dw_o);
}

/* In the absorbed form o = lat W_UV^T [MLA-BWD-ABSORBED]: d_lat[t,h,c] = round_dt(sum_e
 * d_o[t,h,e] W_UV[h][e][c]) and dW_UV[h][e][c] = sum_t d_o[t,h,e] lat[t,h,c]; then the
 * SDPA backward of the block's attention. */
qs_status qsi_mla_bwd_attn(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const qs_mla_grads *g, qsi_mla_state *st)
{
    const qs_mla_config *c = b->cfg;
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qs_dtype dt = b->shape->dtype;
    qs_status s = QS_OK;
    if (!c->absorbed)
        memcpy(st->d_att, st->d_o, (size_t)(d.T * d.H * d.dv) * sizeof(float));
    else
        s = qsi_mla_note(r, QSI_MLA_V_ABSORB, 1);
    for (int64_t h = 0; s == QS_OK && c->absorbed && h < d.H; h++) {
        qsi_mla_view dout = qsi_mla_view_of(st->d_o + h * d.dv, d.H * d.dv, 1);
        qsi_mla_view lat = qsi_mla_view_of(st->att + h * d.rkv, d.H * d.rkv, 1);
        qsi_mla_view wuv = qsi_mla_view_of(qsi_mla_wuv(c, b->w, h, 0), d.rkv, 1);
        s = qsi_mla_head_einsum(ctx, dout, qsi_mla_view_of(wuv.at, 1, d.rkv), d.T, d.rkv, d.dv,
                                st->d_att + h * d.rkv, d.H * d.rkv, 1, dt);
        if (s == QS_OK) /* the same operands, summed over t */
            s = qsi_mla_head_einsum(ctx, qsi_mla_view_of(dout.at, 1, dout.rs),
                                    qsi_mla_view_of(lat.at, 1, lat.rs), d.dv, d.rkv, d.T,
                                    qsi_mla_duv(c, g, h, 0), d.rkv, 1, QS_FP32);
    }
    if (s != QS_OK)
        return s;
    qs_sdpa_params p = qsi_mla_sdpa(b);
    return qsi_k_sdpa_bwd(ctx, &p, st->query, st->key, st->value, st->att, st->d_att, st->d_query,
                          st->d_key, st->d_value);
}

/* The gradient of c: plain, the K/V up-projection's backward — the combined kv_up linear
 * over the rows [dk_nope_h | dv_h], or k_up and v_up with dc = round_dt(fl(dc_k + dc_v))
 * [MLA-SPLIT-KV]; absorbed, round_dt(fl(d_key[.., :rkv] + d_value)) [MLA-BWD-ABSORBED]. */
static qs_status qsi_mla_bwd_c(const qsi_mla_block *b, const qsi_mla_dims *d,
                               const qsi_mla_runner *r, const qs_mla_grads *g, qsi_mla_state *st)
{
    const qs_mla_weights *w = b->w;
    qs_dtype dt = b->shape->dtype;
    if (b->cfg->absorbed) {
        for (int64_t t = 0; t < d->T; t++)
            for (int64_t cc = 0; cc < d->rkv; cc++)
                st->d_c[t * d->rkv + cc] =
                    qsi_attn_round(dt, st->d_key[t * d->dq + cc] + st->d_value[t * d->rkv + cc]);
        return QS_OK;
    }
    for (int64_t t = 0; t < d->T; t++)
        for (int64_t h = 0; h < d->H; h++) {
            const float *dk = st->d_key + (t * d->H + h) * d->dq;
            const float *dv = st->d_value + (t * d->H + h) * d->dv;
            float *kn = w->w_ukv != NULL ? st->d_kvu + t * d->nkv + h * (d->dn + d->dv)
                                         : st->d_ku + (t * d->H + h) * d->dn;
            float *vn = w->w_ukv != NULL ? kn + d->dn : st->d_vu + (t * d->H + h) * d->dv;
            memcpy(kn, dk, (size_t)d->dn * sizeof(float));
            memcpy(vn, dv, (size_t)d->dv * sizeof(float));
        }
    if (w->w_ukv != NULL) {
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_KV_UP, d->rkv, d->nkv, st->c, w->w_ukv);
        return qsi_mla_run_bwd(r, &k, st, st->d_kvu, st->d_c, g->dw_ukv);
    }
    qsi_mla_call v = qsi_mla_mkcall(b, QS_MLA_V_UP, d->rkv, d->H * d->dv, st->c, w->w_uv);
    qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_K_UP, d->rkv, d->H * d->dn, st->c, w->w_uk);
    qs_status s = qsi_mla_run_bwd(r, &v, st, st->d_vu, st->d_cv, g->dw_uv);
    if (s == QS_OK)
        s = qsi_mla_run_bwd(r, &k, st, st->d_ku, st->d_ck, g->dw_uk);
    for (int64_t e = 0; s == QS_OK && e < d->T * d->rkv; e++)
        st->d_c[e] = qsi_attn_round(dt, st->d_ck[e] + st->d_cv[e]);
    return s;
}

/* The kv side of the region: d_c, the kv norm, and the shared k_pe (round_dt of the FP32
 * sum over the key heads in increasing order, then [MLA-BWD-ROPE]) into d_kvc. */
static qs_status qsi_mla_bwd_kv(const qsi_mla_block *b, const qsi_mla_dims *d,
                                const qsi_mla_runner *r, const qs_mla_grads *g, qsi_mla_state *st)
{
    const qs_mla_config *c = b->cfg;
    qs_dtype dt = b->shape->dtype;
    qs_status s = qsi_mla_bwd_c(b, d, r, g, st);
    if (s != QS_OK)
        return s;
    qsi_mla_rmsnorm_bwd(d->T, d->rkv, d->rkv, st->ckv_in, b->w->kv_norm, c->norm_eps, st->d_c,
                        st->d_ckv, g->dkv_norm, dt);
    for (int64_t t = 0; t < d->T; t++) {
        float rot[1024];
        for (int64_t j = 0; j < d->dr; j++) {
            float acc = 0.0f;
            for (int64_t h = 0; h < d->hk; h++)
                acc = acc + st->d_key[(t * d->hk + h) * d->dq + d->dq - d->dr + j];
            rot[j] = qsi_attn_round(dt, acc);
        }
        float *kv = st->d_kvc + t * (d->rkv + d->dr);
        memcpy(kv, st->d_ckv + t * d->rkv, (size_t)d->rkv * sizeof(float));
        qsi_mla_rope_bwd(d->dr / 2, dt, st->rope + t * d->dr, rot, kv + d->rkv);
    }
    return QS_OK;
}

/* The q side of the region down to d_q [T, n, dn + dr]: the nope part is d_query's
 * (plain) or, absorbed, d_q_nope[t,h,d] = round_dt(sum_c d_q_abs[t,h,c] W_UK[h][d][c])
 * with dW_UK[h][d][c] = sum_t q_nope[t,h,d] d_q_abs[t,h,c] [MLA-BWD-ABSORBED]; the pe
 * part the RoPE backward [MLA-BWD-ROPE]; then the q_up linear and the q norm (d_cq), or
 * the q_proj linear (dx_q). */
static qs_status qsi_mla_bwd_q(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_dims *d,
                               const qsi_mla_runner *r, const qs_mla_grads *g, qsi_mla_state *st)
{
    const qs_mla_config *c = b->cfg;
    const qs_mla_weights *w = b->w;
    qs_dtype dt = b->shape->dtype;
    qs_status s = c->absorbed ? qsi_mla_note(r, QSI_MLA_K_ABSORB, 1) : QS_OK;
    if (s != QS_OK)
        return s;
    for (int64_t t = 0; t < d->T; t++)
        for (int64_t h = 0; h < d->H; h++) {
            const float *dqr = st->d_query + (t * d->H + h) * d->dq;
            float *out = st->d_q + (t * d->H + h) * d->dqin;
            for (int64_t e = 0; e < d->dn && !c->absorbed; e++)
                out[e] = dqr[e];
            qsi_mla_rope_bwd(d->dr / 2, dt, st->rope + t * d->dr, dqr + d->dq - d->dr, out + d->dn);
        }
    for (int64_t h = 0; s == QS_OK && h < d->H && c->absorbed; h++) {
        qsi_mla_view dq = qsi_mla_view_of(st->d_query + h * d->dq, d->H * d->dq, 1);
        qsi_mla_view qn = qsi_mla_view_of(st->q + h * d->dqin, d->H * d->dqin, 1);
        s = qsi_mla_head_einsum(ctx, dq, qsi_mla_view_of(qsi_mla_wuk(c, w, h, 0), d->rkv, 1), d->T,
                                d->dn, d->rkv, st->d_q + h * d->dqin, d->H * d->dqin, 1, dt);
        if (s == QS_OK) /* summed over t */
            s = qsi_mla_head_einsum(ctx, qsi_mla_view_of(qn.at, 1, qn.rs),
                                    qsi_mla_view_of(dq.at, 1, dq.rs), d->dn, d->rkv, d->T,
                                    qsi_mla_duk(c, g, h, 0), d->rkv, 1, QS_FP32);
    }
    if (s != QS_OK)
        return s;
    if (d->rq == 0) {
        qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_Q_PROJ, d->hid, d->H * d->dqin, st->q_in, w->w_q);
        return qsi_mla_run_bwd(r, &k, st, st->d_q, st->dx_q, g->dw_q);
    }
    qsi_mla_call k = qsi_mla_mkcall(b, QS_MLA_Q_UP, d->rq, d->H * d->dqin, st->cqn, w->w_uq);
    s = qsi_mla_run_bwd(r, &k, st, st->d_q, st->d_cqn, g->dw_uq);
    if (s == QS_OK)
        qsi_mla_rmsnorm_bwd(d->T, d->rq, d->rq, st->q_in, w->q_norm, c->norm_eps, st->d_cqn,
                            st->d_cq, g->dq_norm, dt);
    return s;
}

/* The region backward, in the reverse of its forward: the kv side, then the q side. */
qs_status qsi_mla_bwd_up(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                         const qs_mla_grads *g, qsi_mla_state *st)
{
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qs_status s = qsi_mla_bwd_kv(b, &d, r, g, st);
    return s == QS_OK ? qsi_mla_bwd_q(ctx, b, &d, r, g, st) : s;
}

/* The down-projections (kv_down, then q_down) and dx = round_dt(fl(dx_q + dx_kv)). */
qs_status qsi_mla_bwd_down(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *x, const qs_mla_grads *g, qsi_mla_state *st)
{
    (void)ctx;
    qsi_mla_dims d = qsi_mla_dims_of(b);
    qsi_mla_call kv = qsi_mla_mkcall(b, QS_MLA_KV_DOWN, d.hid, d.rkv + d.dr, x, b->w->w_dkv);
    qs_status s = qsi_mla_run_bwd(r, &kv, st, st->d_kvc, st->dx_kv, g->dw_dkv);
    if (s == QS_OK && d.rq > 0) {
        qsi_mla_call q = qsi_mla_mkcall(b, QS_MLA_Q_DOWN, d.hid, d.rq, x, b->w->w_dq);
        s = qsi_mla_run_bwd(r, &q, st, st->d_cq, st->dx_q, g->dw_dq);
    }
    for (int64_t e = 0; s == QS_OK && e < d.T * d.hid; e++)
        g->dx[e] = qsi_attn_round(b->shape->dtype, st->dx_q[e] + st->dx_kv[e]); /* [MLA-BWD] */
    return s;
}

/* ---------------------------------------------------------------- the standalone calls */

/* The runner of qs_mla_forward / qs_mla_backward: the scope of ctx decides, the caller's
 * quantizers are used in place [MLA-LINEAR-QUANT] [MLA-LINEAR-CALIB]. */
typedef struct qsi_mla_solo {
    qs_ctx *ctx;
    const char *fn;
    const qs_mla_quantizers *q;
} qsi_mla_solo;

static qs_status qsi_solo_quantizer(const qsi_mla_solo *so, qs_mla_linear l, qs_scope_role role,
                                    qs_recipe_kind kind, qs_quantizer **out)
{
    static const char *const roles[QS_SCOPE_ROLE_COUNT] = {"x", "w", "dy"};
    qs_quantizer *q = so->q != NULL ? so->q->q[l][role] : NULL;
    if (q == NULL)
        return qs_ctx_error(so->ctx, QS_ERR_INVALID_ARG,
                            "%s: linear '%s' runs under recipe %s but has no %s quantizer "
                            "[MLA-LINEAR-QUANT]",
                            so->fn, qs_mla_linear_name(l), qs_recipe_kind_name(kind), roles[role]);
    if (q->cfg.kind != kind)
        return qs_ctx_error(so->ctx, QS_ERR_INVALID_ARG,
                            "%s: the %s quantizer of linear '%s' is %s, the region's recipe is %s",
                            so->fn, roles[role], qs_mla_linear_name(l),
                            qs_recipe_kind_name(q->cfg.kind), qs_recipe_kind_name(kind));
    *out = q;
    return QS_OK;
}

static qs_status qsi_solo_fwd(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv)
{
    qsi_mla_solo *so = arg;
    qs_scope_state ss;
    memset(&ss, 0, sizeof ss);
    sv->prec = QS_PREC_HIGH;
    qs_status s = QS_OK;
    if (so->ctx != NULL) {
        s = qs_scope_get(so->ctx, &ss);
        if (s == QS_OK)
            s = qs_scope_decide(so->ctx, QS_MODULE_QUANTIZABLE, qs_mla_linear_name(c->lin),
                                &sv->prec);
    }
    sv->kind = ss.recipe.kind;
    int need = sv->prec == QS_PREC_QUANTIZED ||
               (sv->prec == QS_PREC_CALIBRATING && sv->kind == QS_RECIPE_DELAYED);
    qs_quantizer *qx = NULL, *qw = NULL;
    if (s == QS_OK && need)
        s = qsi_solo_quantizer(so, c->lin, QS_SCOPE_X, sv->kind, &qx);
    if (s == QS_OK && need)
        s = qsi_solo_quantizer(so, c->lin, QS_SCOPE_W, sv->kind, &qw);
    if (s == QS_OK && sv->prec == QS_PREC_QUANTIZED) /* [SCOPE-POLICY-QUANT] */
        return qsi_mla_lin_q_fwd(so->ctx, c, qx, qw, sv);
    if (s == QS_OK && need) /* [SCOPE-POLICY-CALIB] */
        s = qsi_mla_lin_calibrate(so->ctx, c, qx, qw);
    if (s == QS_OK)
        s = qsi_mla_lin_hp_fwd(so->ctx, c);
    return s;
}

static qs_status qsi_solo_bwd(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv)
{
    qsi_mla_solo *so = arg;
    if (sv->prec != QS_PREC_QUANTIZED)
        return qsi_mla_lin_hp_bwd(so->ctx, c);
    qs_quantizer *qdy = NULL;
    qs_status s = qsi_solo_quantizer(so, c->lin, QS_SCOPE_DY, sv->kind, &qdy);
    return s == QS_OK ? qsi_mla_lin_q_bwd(so->ctx, c, qdy, sv) : s;
}

qs_status qs_mla_up_proj(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                         const qs_mla_weights *w, const qs_mla_quantizers *q, const float *q_in,
                         const float *c_kv, const float *k_pe, float *query, float *key,
                         float *value)
{
    const char *fn = "qs_mla_up_proj";
    qsi_mla_block b = {cfg, shape, w};
    qs_status st = qsi_mla_check(ctx, fn, &b);
    if (st != QS_OK)
        return st;
    if (!q_in || !c_kv || !k_pe || !query || !key || !value)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: a tensor argument is NULL", fn);
    qsi_mla_solo so = {ctx, fn, q};
    qsi_mla_runner r = {&so, qsi_solo_fwd, qsi_solo_bwd, NULL};
    qsi_mla_state *s = NULL;
    st = qsi_mla_state_new(ctx, fn, &b, &s);
    if (st != QS_OK)
        return st;
    s->q_in = q_in;
    s->ckv_in = c_kv;
    s->kpe_in = k_pe;
    st = qsi_mla_fwd_up(ctx, &b, &r, s);
    if (st == QS_OK) {
        qsi_mla_dims d = qsi_mla_dims_of(&b);
        memcpy(query, s->query, (size_t)(d.T * d.H * d.dq) * sizeof(float));
        memcpy(key, s->key, (size_t)(d.T * d.hk * d.dq) * sizeof(float));
        memcpy(value, s->value, (size_t)(d.T * d.hk * d.dvv) * sizeof(float));
    }
    qsi_mla_state_free(s);
    return st;
}

/* The forward stages in order. */
static qs_status qsi_mla_forward_all(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                                     const float *x, qsi_mla_state *st, float *out)
{
    qs_status s = qsi_mla_fwd_down(ctx, b, r, x, st);
    if (s == QS_OK)
        s = qsi_mla_fwd_up(ctx, b, r, st);
    if (s == QS_OK)
        s = qsi_mla_fwd_out(ctx, b, r, st, out);
    return s;
}

qs_status qs_mla_forward(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                         const qs_mla_weights *w, const qs_mla_quantizers *q, const float *x,
                         float *out)
{
    const char *fn = "qs_mla_forward";
    qsi_mla_block b = {cfg, shape, w};
    qs_status st = qsi_mla_check(ctx, fn, &b);
    if (st != QS_OK)
        return st;
    int64_t T = qsi_mla_tokens(shape);
    st = qsi_attn_check_values(ctx, fn, "x", x, (size_t)(T * cfg->hidden), shape->dtype);
    if (st == QS_OK && out == NULL)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'out' is NULL", fn);
    qsi_mla_solo so = {ctx, fn, q};
    qsi_mla_runner r = {&so, qsi_solo_fwd, qsi_solo_bwd, NULL};
    qsi_mla_state *s = NULL;
    if (st == QS_OK)
        st = qsi_mla_state_new(ctx, fn, &b, &s);
    if (st == QS_OK)
        st = qsi_mla_forward_all(ctx, &b, &r, x, s, out);
    qsi_mla_state_free(s);
    return st;
}

qs_status qs_mla_fwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, float *out)
{
    return qs_mla_forward(ctx, cfg, shape, w, NULL, x, out);
}

static qs_status qsi_mla_check_grads(qs_ctx *ctx, const char *fn, const qs_mla_config *c,
                                     const qs_mla_weights *w, const qs_mla_grads *g)
{
    int ok = g != NULL && g->dx && g->dw_dkv && g->dkv_norm && g->dw_o;
    if (ok)
        ok = c->q_lora_rank > 0 ? (g->dw_dq && g->dq_norm && g->dw_uq) : g->dw_q != NULL;
    if (ok)
        ok = w->w_ukv != NULL ? g->dw_ukv != NULL : (g->dw_uk && g->dw_uv);
    if (!ok)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: a gradient the config needs is NULL", fn);
    return QS_OK;
}

qs_status qs_mla_backward(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                          const qs_mla_weights *w, const qs_mla_quantizers *q, const float *x,
                          const float *dout, const qs_mla_grads *g)
{
    const char *fn = "qs_mla_backward";
    qsi_mla_block b = {cfg, shape, w};
    qs_status st = qsi_mla_check(ctx, fn, &b);
    if (st != QS_OK)
        return st;
    int64_t T = qsi_mla_tokens(shape);
    qs_dtype dt = shape->dtype;
    st = qsi_attn_check_values(ctx, fn, "x", x, (size_t)(T * cfg->hidden), dt);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "dout", dout, (size_t)(T * cfg->hidden), dt);
    if (st == QS_OK)
        st = qsi_mla_check_grads(ctx, fn, cfg, w, g);
    qsi_mla_solo so = {ctx, fn, q};
    qsi_mla_runner r = {&so, qsi_solo_fwd, qsi_solo_bwd, NULL};
    qsi_mla_state *s = NULL;
    float *out = NULL;
    if (st == QS_OK)
        st = qsi_mla_state_new(ctx, fn, &b, &s);
    if (st == QS_OK && !(out = malloc(((size_t)(T * cfg->hidden) + 1) * sizeof(float))))
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    if (st == QS_OK) /* the forward again, bit-identical [MLA-BWD] */
        st = qsi_mla_forward_all(ctx, &b, &r, x, s, out);
    if (st == QS_OK)
        st = qsi_mla_bwd_proj(ctx, &b, &r, dout, g, s);
    if (st == QS_OK)
        st = qsi_mla_bwd_attn(ctx, &b, &r, g, s);
    if (st == QS_OK)
        st = qsi_mla_bwd_up(ctx, &b, &r, g, s);
    if (st == QS_OK)
        st = qsi_mla_bwd_down(ctx, &b, &r, x, g, s);
    free(out);
    qsi_mla_state_free(s);
    return st;
}

qs_status qs_mla_bwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, const float *dout,
                     const qs_mla_grads *g)
{
    return qs_mla_backward(ctx, cfg, shape, w, NULL, x, dout, g);
}
