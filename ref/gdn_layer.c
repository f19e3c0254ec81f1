/* gdn_layer.c: the small ops around the Gated DeltaNet core of spec/attention.md: the
 * gate from A_log, a and dt_bias [GDN-GATE], beta = sigmoid(b) [GDN-BETA], the short causal
 * depthwise conv1d with SiLU [GDN-CONV] and the gated RMSNorm [GDN-GATED-RMSNORM], each
 * forward and backward, FP32 in the order written. n is a row, c a channel, j a tap. */
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "qspec/attention.h"
#include "qspec/mathf.h"

static qs_status qsi_layer_ptrs(qs_ctx *ctx, const char *fn, int count, const void *const *ptrs)
{
    for (int e = 0; e < count; e++)
        if (ptrs[e] == NULL)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: pointer argument %d is NULL", fn,
                                e + 1);
    return QS_OK;
}

static qs_status qsi_layer_rows(qs_ctx *ctx, const char *fn, int64_t n, int64_t c)
{
    size_t total;
    return qsi_attn_numel(ctx, fn, "rows x channels", n, c, 1, 1, &total);
}

/* d silu(x) / dx = s (1 + x (1 - s)), s = sigmoid(x), FP32 in that order. */
static float qsi_dsilu(float x)
{
    float s = qs_sigmoidf(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---------------------------------------------------------------- gate [GDN-GATE] */

qs_status qs_gdn_gate_fwd(qs_ctx *ctx, int64_t n, int64_t hv, const float *a, const float *a_log,
                          const float *dt_bias, float *g)
{
    const void *ptrs[] = {a, a_log, dt_bias, g};
    qs_status st = qsi_layer_ptrs(ctx, "qs_gdn_gate_fwd", 4, ptrs);
    if (st == QS_OK)
        st = qsi_layer_rows(ctx, "qs_gdn_gate_fwd", n, hv);
    for (int64_t r = 0; st == QS_OK && r < n; r++)
        for (int64_t c = 0; c < hv; c++)
            g[r * hv + c] = -(qs_expf(a_log[c]) * qs_softplusf(a[r * hv + c] + dt_bias[c]));
    return st;
}

qs_status qs_gdn_gate_bwd(qs_ctx *ctx, int64_t n, int64_t hv, const float *a, const float *a_log,
                          const float *dt_bias, const float *dg, float *da, float *da_log,
                          float *ddt_bias)
{
    const void *ptrs[] = {a, a_log, dt_bias, dg, da, da_log, ddt_bias};
    qs_status st = qsi_layer_ptrs(ctx, "qs_gdn_gate_bwd", 7, ptrs);
    if (st == QS_OK)
        st = qsi_layer_rows(ctx, "qs_gdn_gate_bwd", n, hv);
    for (int64_t c = 0; st == QS_OK && c < hv; c++) {
        float ea = qs_expf(a_log[c]), sl = 0.0f, sb = 0.0f;
        for (int64_t r = 0; r < n; r++) {
            float x = a[r * hv + c] + dt_bias[c];
            float gv = -(ea * qs_softplusf(x));
            da[r * hv + c] = -(ea * qs_sigmoidf(x)) * dg[r * hv + c];
            sl = sl + gv * dg[r * hv + c];
            sb = sb + da[r * hv + c];
        }
        da_log[c] = sl;
        ddt_bias[c] = sb;
    }
    return st;
}

/* ---------------------------------------------------------------- beta [GDN-BETA] */

qs_status qs_gdn_beta_fwd(qs_ctx *ctx, int64_t n, const float *b, float *beta)
{
    const void *ptrs[] = {b, beta};
    qs_status st = qsi_layer_ptrs(ctx, "qs_gdn_beta_fwd", 2, ptrs);
    if (st == QS_OK)
        st = qsi_layer_rows(ctx, "qs_gdn_beta_fwd", n, 1);
    for (int64_t e = 0; st == QS_OK && e < n; e++)
        beta[e] = qs_sigmoidf(b[e]);
    return st;
}

qs_status qs_gdn_beta_bwd(qs_ctx *ctx, int64_t n, const float *beta, const float *dbeta, float *db)
{
    const void *ptrs[] = {beta, dbeta, db};
    qs_status st = qsi_layer_ptrs(ctx, "qs_gdn_beta_bwd", 3, ptrs);
    if (st == QS_OK)
        st = qsi_layer_rows(ctx, "qs_gdn_beta_bwd", n, 1);
    for (int64_t e = 0; st == QS_OK && e < n; e++)
        db[e] = dbeta[e] * (beta[e] * (1.0f - beta[e]));
    return st;
}

/* ---------------------------------------------------------------- conv1d [GDN-CONV] */

static int64_t qsi_conv_tokens(const qs_conv_params *p)
{
    return p->cu_seqlens != NULL ? p->t : p->b * p->t;
}
static int64_t qsi_conv_start(const qs_conv_params *p, int64_t s)
{
    return p->cu_seqlens != NULL ? p->cu_seqlens[s] : s * p->t;
}
static int64_t qsi_conv_len(const qs_conv_params *p, int64_t s)
{
    return p->cu_seqlens != NULL ? (int64_t)p->cu_seqlens[s + 1] - p->cu_seqlens[s] : p->t;
}

static qs_status qsi_conv_check(qs_ctx *ctx, const char *fn, const qs_conv_params *p,
                                const float *x, const float *w, const float *bias)
{
    if (p == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'p' is NULL", fn);
    if (p->b < 0 || p->t < 0 || p->c < 1 || p->width < 1)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: need b, t >= 0 and c, width >= 1", fn);
    qs_status st = qsi_attn_check_dtype(ctx, fn, p->dtype);
    if (st == QS_OK && p->cu_seqlens != NULL)
        st = qsi_attn_check_cu(ctx, fn, "cu_seqlens", p->cu_seqlens, p->b, p->t);
    size_t nx = 0;
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "x", qsi_conv_tokens(p), p->c, p->width, 1, &nx);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "x", x, nx / (size_t)p->width, p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "w", w, (size_t)(p->c * p->width), p->dtype);
    if (st == QS_OK && bias != NULL)
        st = qsi_attn_check_values(ctx, fn, "bias", bias, (size_t)p->c, p->dtype);
    return st;
}

/* The pre-activation of token i (of the sequence from token t0), channel c: the FP32 sum
 * over taps j increasing of w[c, j] x[i - (width-1) + j, c] (zero before the sequence
 * start), then + bias[c]. */
static float qsi_conv_pre(const qs_conv_params *p, const float *x, const float *w,
                          const float *bias, int64_t t0, int64_t i, int64_t c)
{
    float acc = 0.0f;
    for (int64_t j = 0; j < p->width; j++) {
        int64_t src = i - (p->width - 1) + j;
        if (src >= 0)
            acc = acc + w[c * p->width + j] * x[(t0 + src) * p->c + c];
    }
    return bias != NULL ? acc + bias[c] : acc;
}

qs_status qs_conv1d_fwd(qs_ctx *ctx, const qs_conv_params *p, const float *x, const float *w,
                        const float *bias, float *y)
{
    qs_status st = qsi_conv_check(ctx, "qs_conv1d_fwd", p, x, w, bias);
    if (st == QS_OK && y == NULL)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_conv1d_fwd: 'y' is NULL");
    for (int64_t s = 0; st == QS_OK && s < p->b; s++) {
        int64_t t0 = qsi_conv_start(p, s);
        for (int64_t i = 0; i < qsi_conv_len(p, s); i++)
            for (int64_t c = 0; c < p->c; c++) {
                float z = qsi_conv_pre(p, x, w, bias, t0, i, c);
                y[(t0 + i) * p->c + c] = qsi_attn_round(p->dtype, p->silu ? qs_siluf(z) : z);
            }
    }
    return st;
}

/* dz = dy * silu'(z) (or dy without SiLU) for every token, into dz [tokens, c]. */
static void qsi_conv_dz(const qs_conv_params *p, const float *x, const float *w, const float *bias,
                        const float *dy, float *dz)
{
    for (int64_t s = 0; s < p->b; s++) {
        int64_t t0 = qsi_conv_start(p, s);
        for (int64_t i = 0; i < qsi_conv_len(p, s); i++)
            for (int64_t c = 0; c < p->c; c++) {
                float z = qsi_conv_pre(p, x, w, bias, t0, i, c);
                float gy = dy[(t0 + i) * p->c + c];
                dz[(t0 + i) * p->c + c] = p->silu ? gy * qsi_dsilu(z) : gy;
            }
    }
}

/* dx[i', c] = sum over taps j increasing of w[c, j] dz[i' + width-1 - j, c]; dw, dbias sum
 * over sequences and tokens in increasing order [GDN-CONV-BWD]. */
static void qsi_conv_grads(const qs_conv_params *p, const float *x, const float *w, const float *dz,
                           float *dx, float *dw, float *dbias)
{
    for (int64_t s = 0; s < p->b; s++) {
        int64_t t0 = qsi_conv_start(p, s), len = qsi_conv_len(p, s);
        for (int64_t i = 0; i < len; i++)
            for (int64_t c = 0; c < p->c; c++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < p->width; j++) {
                    int64_t dst = i + (p->width - 1) - j;
                    if (dst < len)
                        acc = acc + w[c * p->width + j] * dz[(t0 + dst) * p->c + c];
                }
                dx[(t0 + i) * p->c + c] = qsi_attn_round(p->dtype, acc);
                for (int64_t j = 0; j < p->width; j++) {
                    int64_t src = i - (p->width - 1) + j;
                    if (src >= 0)
                        dw[c * p->width + j] = dw[c * p->width + j] +
                                               dz[(t0 + i) * p->c + c] * x[(t0 + src) * p->c + c];
                }
                if (dbias != NULL)
                    dbias[c] = dbias[c] + dz[(t0 + i) * p->c + c];
            }
    }
}

qs_status qs_conv1d_bwd(qs_ctx *ctx, const qs_conv_params *p, const float *x, const float *w,
                        const float *bias, const float *dy, float *dx, float *dw, float *dbias)
{
    const char *fn = "qs_conv1d_bwd";
    qs_status st = qsi_conv_check(ctx, fn, p, x, w, bias);
    if (st != QS_OK)
        return st;
    const void *ptrs[] = {dy, dx, dw};
    if ((st = qsi_layer_ptrs(ctx, fn, 3, ptrs)) != QS_OK)
        return st;
    size_t nx = (size_t)(qsi_conv_tokens(p) * p->c);
    float *dz = malloc((nx + 1) * sizeof(float));
    if (dz == NULL)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    memset(dx, 0, nx * sizeof(float));
    memset(dw, 0, (size_t)(p->c * p->width) * sizeof(float));
    if (bias == NULL)
        dbias = NULL;
    if (dbias != NULL)
        memset(dbias, 0, (size_t)p->c * sizeof(float));
    qsi_conv_dz(p, x, w, bias, dy, dz);
    qsi_conv_grads(p, x, w, dz, dx, dw, dbias);
    free(dz);
    return QS_OK;
}

/* ---------------------------------------------------------------- gated RMSNorm */

static qs_status qsi_grms_check(qs_ctx *ctx, const char *fn, int64_t rows, int64_t n, float eps,
                                qs_dtype dtype, const float *x, const float *z, const float *w)
{
    size_t total;
    qs_status st = qsi_attn_check_dtype(ctx, fn, dtype);
    if (st == QS_OK && n < 1)
        st = qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: n must be >= 1", fn);
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "x", rows, n, 1, 1, &total);
    if (st == QS_OK && !(eps > 0.0f))
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: eps must be > 0", fn);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "x", x, total, dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "z", z, total, dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "w", w, (size_t)n, QS_FP32);
    return st;
}

/* rstd = 1/sqrt(sum x^2 / n + eps) of one row, FP32, sum in increasing index. */
static float qsi_grms_rstd(const float *x, int64_t n, float eps)
{
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++)
        ss = ss + x[i] * x[i];
    return qs_rsqrtf(ss / (float)n + eps);
}

qs_status qs_gated_rmsnorm_fwd(qs_ctx *ctx, int64_t rows, int64_t n, float eps, qs_dtype dtype,
                               const float *x, const float *z, const float *w, float *y)
{
    const char *fn = "qs_gated_rmsnorm_fwd";
    qs_status st = qsi_grms_check(ctx, fn, rows, n, eps, dtype, x, z, w);
    if (st == QS_OK && y == NULL)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'y' is NULL", fn);
    for (int64_t r = 0; st == QS_OK && r < rows; r++) {
        float rstd = qsi_grms_rstd(x + r * n, n, eps);
        for (int64_t i = 0; i < n; i++) {
            float xn = qsi_attn_round(dtype, x[r * n + i] * rstd);
            y[r * n + i] = qsi_attn_round(dtype, (w[i] * xn) * qs_siluf(z[r * n + i]));
        }
    }
    return st;
}

/* One row of the backward; dw accumulates over rows in increasing r. */
static void qsi_grms_bwd_row(int64_t n, float eps, qs_dtype dtype, const float *x, const float *z,
                             const float *w, const float *dy, float *dx, float *dz, float *dw)
{
    float rstd = qsi_grms_rstd(x, n, eps), c = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float xn = x[i] * rstd, sz = qs_siluf(z[i]);
        float dxn = (dy[i] * w[i]) * sz;
        c = c + dxn * xn;
        dw[i] = dw[i] + (dy[i] * xn) * sz;
        dz[i] = qsi_attn_round(dtype, ((dy[i] * w[i]) * xn) * qsi_dsilu(z[i]));
    }
    c = c / (float)n;
    for (int64_t i = 0; i < n; i++) {
        float xn = x[i] * rstd, dxn = (dy[i] * w[i]) * qs_siluf(z[i]);
        dx[i] = qsi_attn_round(dtype, rstd * (dxn - xn * c));
    }
}

qs_status qs_gated_rmsnorm_bwd(qs_ctx *ctx, int64_t rows, int64_t n, float eps, qs_dtype dtype,
                               const float *x, const float *z, const float *w, const float *dy,
                               float *dx, float *dz, float *dw)
{
    const char *fn = "qs_gated_rmsnorm_bwd";
    qs_status st = qsi_grms_check(ctx, fn, rows, n, eps, dtype, x, z, w);
    const void *ptrs[] = {dy, dx, dz, dw};
    if (st == QS_OK)
        st = qsi_layer_ptrs(ctx, fn, 4, ptrs);
    if (st != QS_OK)
        return st;
    memset(dw, 0, (size_t)n * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        qsi_grms_bwd_row(n, eps, dtype, x + r * n, z + r * n, w, dy + r * n, dx + r * n, dz + r * n,
                         dw);
    return QS_OK;
}
