/* mla.c: the reference multi-head latent attention block of spec/attention.md [MLA-*]:
 * q and kv down-projections, RMSNorm on the compressed parts, up-projections, decoupled
 * RoPE (YaRN) on the shared pe head, softmax attention (ref/sdpa.c) and the output
 * projection; plain, and absorbed (W_UK folded into the query, latent MQA, W_UV after).
 * t is a token row, h a head, d/e/c feature indices. The backward [MLA-BWD] is at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "qspec/attention.h"
#include "qspec/mathf.h"

/* ---------------------------------------------------------------- pieces */

/* The high-precision linear y[t, o] = round_dt(sum_i x[t, i] w[o, i]), FP32 sum in
 * increasing i [MLA-LINEAR]. This is where the quantized linear (include/qspec/linear.h,
 * qs_linear_forward under the active recipe) plugs in for the down, up (plain form) and
 * output projections; the absorbed W_UK / W_UV einsums stay on this high-precision path. */
static void qsi_mla_linear(int64_t rows, int64_t in, int64_t out, const float *x, const float *w,
                           float *y, qs_dtype dt)
{
    for (int64_t t = 0; t < rows; t++)
        for (int64_t o = 0; o < out; o++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < in; i++)
                acc = acc + x[t * in + i] * w[o * in + i];
            y[t * out + o] = qsi_attn_round(dt, acc);
        }
}

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

/* RoPE of one vector with precomputed inverse frequencies [MLA-ROPE]. */
static void qsi_mla_rope_apply(const qs_mla_config *cfg, qs_dtype dt, const float *inv, int64_t pos,
                               const float *x, float *y)
{
    float m = qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale) /
              qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale_all_dim);
    int64_t half = cfg->dr / 2;
    for (int64_t j = 0; j < half; j++) {
        float fr = (float)pos * inv[j];
        float c = qsi_attn_round(dt, qs_cosf(fr) * m), s = qsi_attn_round(dt, qs_sinf(fr) * m);
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
    float inv[512];
    if (st == QS_OK && cfg != NULL && cfg->dr > 1024)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "qs_mla_rope: dr > 1024");
    if (st == QS_OK)
        st = qs_mla_rope_inv_freq(ctx, cfg, inv, NULL, NULL);
    if (st == QS_OK)
        qsi_mla_rope_apply(cfg, dtype, inv, pos, x, y);
    return st;
}

/* ---------------------------------------------------------------- checks and geometry */

static int64_t qsi_mla_tokens(const qs_mla_shape *sh)
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

static qs_status qsi_mla_check(qs_ctx *ctx, const char *fn, const qs_mla_config *c,
                               const qs_mla_shape *sh, const qs_mla_weights *w)
{
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

/* ---------------------------------------------------------------- mla_up_proj */

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

/* Plain keys and values: [k_nope_h | k_pe rotated] and v_h from c_kv W_UK^T, W_UV^T. */
static void qsi_mla_plain_kv(const qs_mla_config *c, const qs_mla_weights *w, int64_t T,
                             qs_dtype dt, const float *ckv, const float *kpe, float *key,
                             float *value)
{
    int64_t dq = c->dn + c->dr, rkv = c->kv_lora_rank;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < c->heads; h++) {
            float *kr = key + (t * c->heads + h) * dq;
            for (int64_t d = 0; d < c->dn; d++)
                qsi_mla_linear(1, rkv, 1, ckv + t * rkv, qsi_mla_wuk(c, w, h, d), kr + d, dt);
            memcpy(kr + c->dn, kpe + t * c->dr, (size_t)c->dr * sizeof(float));
            for (int64_t e = 0; e < c->dv; e++)
                qsi_mla_linear(1, rkv, 1, ckv + t * rkv, qsi_mla_wuv(c, w, h, e),
                               value + (t * c->heads + h) * c->dv + e, dt);
        }
}

/* Absorbed query part: q_abs[t, h, c] = round_dt(sum_d q_nope[t, h, d] W_UK[h][d][c]). */
static void qsi_mla_absorb_q(const qs_mla_config *c, const qs_mla_weights *w, int64_t T,
                             qs_dtype dt, const float *q, float *query)
{
    int64_t dqin = c->dn + c->dr, rkv = c->kv_lora_rank, dq = rkv + c->dr;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t cc = 0; cc < rkv; cc++) {
                float acc = 0.0f;
                for (int64_t d = 0; d < c->dn; d++)
                    acc = acc + q[(t * c->heads + h) * dqin + d] * qsi_mla_wuk(c, w, h, d)[cc];
                query[(t * c->heads + h) * dq + cc] = qsi_attn_round(dt, acc);
            }
}

/* Scratch of the up-projection region. */
typedef struct qsi_mla_upw {
    float *cqn, *q, *ckv, *kpe, inv[512];
    int64_t *pos;
} qsi_mla_upw;

static void qsi_mla_up_compute(const qs_mla_config *c, const qs_mla_shape *sh,
                               const qs_mla_weights *w, const float *q_in, const float *c_kv,
                               const float *k_pe, float *query, float *key, float *value,
                               qsi_mla_upw *u)
{
    int64_t T = qsi_mla_tokens(sh), dqin = c->dn + c->dr, rkv = c->kv_lora_rank;
    qs_dtype dt = sh->dtype;
    int64_t dq = c->absorbed ? rkv + c->dr : dqin;
    if (c->q_lora_rank > 0) { /* [MLA-Q-PATH] */
        qsi_mla_rmsnorm(T, c->q_lora_rank, c->q_lora_rank, q_in, w->q_norm, c->norm_eps, u->cqn,
                        dt);
        qsi_mla_linear(T, c->q_lora_rank, c->heads * dqin, u->cqn, w->w_uq, u->q, dt);
    } else {
        qsi_mla_linear(T, c->hidden, c->heads * dqin, q_in, w->w_q, u->q, dt);
    }
    qsi_mla_rmsnorm(T, rkv, rkv, c_kv, w->kv_norm, c->norm_eps, u->ckv, dt); /* [MLA-KV-PATH] */
    for (int64_t t = 0; t < T; t++)
        qsi_mla_rope_apply(c, dt, u->inv, u->pos[t], k_pe + t * c->dr, u->kpe + t * c->dr);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < c->heads; h++) {
            const float *qr = u->q + (t * c->heads + h) * dqin;
            float *out = query + (t * c->heads + h) * dq;
            if (!c->absorbed)
                memcpy(out, qr, (size_t)c->dn * sizeof(float));
            qsi_mla_rope_apply(c, dt, u->inv, u->pos[t], qr + c->dn, out + dq - c->dr);
        }
    if (c->absorbed) { /* [MLA-ABSORBED] */
        qsi_mla_absorb_q(c, w, T, dt, u->q, query);
        for (int64_t t = 0; t < T; t++) {
            memcpy(key + t * dq, u->ckv + t * rkv, (size_t)rkv * sizeof(float));
            memcpy(key + t * dq + rkv, u->kpe + t * c->dr, (size_t)c->dr * sizeof(float));
            memcpy(value + t * rkv, u->ckv + t * rkv, (size_t)rkv * sizeof(float));
        }
    } else {
        qsi_mla_plain_kv(c, w, T, dt, u->ckv, u->kpe, key, value);
    }
}

/* Allocates the region's scratch and fills the inverse frequencies and positions. */
static qs_status qsi_mla_upw_alloc(qs_ctx *ctx, const char *fn, const qs_mla_config *cfg,
                                   const qs_mla_shape *shape, qsi_mla_upw *u)
{
    size_t T = (size_t)qsi_mla_tokens(shape), rq = (size_t)cfg->q_lora_rank;
    u->cqn = malloc((T * rq + 1) * sizeof(float));
    u->q = malloc((T * (size_t)(cfg->heads * (cfg->dn + cfg->dr)) + 1) * sizeof(float));
    u->ckv = malloc((T * (size_t)cfg->kv_lora_rank + 1) * sizeof(float));
    u->kpe = malloc((T * (size_t)cfg->dr + 1) * sizeof(float));
    u->pos = malloc((T + 1) * sizeof(int64_t));
    if (!u->cqn || !u->q || !u->ckv || !u->kpe || !u->pos)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    qsi_mla_positions(shape, u->pos);
    return qs_mla_rope_inv_freq(ctx, cfg, u->inv, NULL, NULL);
}

static void qsi_mla_upw_free(qsi_mla_upw *u)
{
    free(u->cqn), free(u->q), free(u->ckv), free(u->kpe), free(u->pos);
}

qs_status qs_mla_up_proj(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                         const qs_mla_weights *w, const float *q_in, const float *c_kv,
                         const float *k_pe, float *query, float *key, float *value)
{
    const char *fn = "qs_mla_up_proj";
    qs_status st = qsi_mla_check(ctx, fn, cfg, shape, w);
    if (st != QS_OK)
        return st;
    if (!q_in || !c_kv || !k_pe || !query || !key || !value)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: a tensor argument is NULL", fn);
    qsi_mla_upw u;
    st = qsi_mla_upw_alloc(ctx, fn, cfg, shape, &u);
    if (st == QS_OK)
        qsi_mla_up_compute(cfg, shape, w, q_in, c_kv, k_pe, query, key, value, &u);
    qsi_mla_upw_free(&u);
    return st;
}

/* ---------------------------------------------------------------- the block */

/* The attention of the block over query/key/value [MLA-ATTN]. */
static qs_status qsi_mla_attend(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_shape *sh,
                                const float *query, const float *key, const float *value, float *o)
{
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
    return qs_sdpa_fwd(ctx, &p, query, key, value, o, NULL);
}

/* Absorbed output: o[t, h, e] = round_dt(sum_c lat[t, h, c] W_UV[h][e][c]). */
static void qsi_mla_absorb_out(const qs_mla_config *c, const qs_mla_weights *w, int64_t T,
                               qs_dtype dt, const float *lat, float *o)
{
    int64_t rkv = c->kv_lora_rank;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t e = 0; e < c->dv; e++)
                qsi_mla_linear(1, rkv, 1, lat + (t * c->heads + h) * rkv, qsi_mla_wuv(c, w, h, e),
                               o + (t * c->heads + h) * c->dv + e, dt);
}

/* Buffers of the block. */
typedef struct qsi_mla_blk {
    float *cq, *kvc, *ckv, *kpe, *query, *key, *value, *att, *o;
} qsi_mla_blk;

static qs_status qsi_mla_blk_alloc(qs_ctx *ctx, const qs_mla_config *c, size_t T, qsi_mla_blk *b)
{
    size_t H = (size_t)c->heads, rkv = (size_t)c->kv_lora_rank, dr = (size_t)c->dr;
    size_t dq = c->absorbed ? rkv + dr : (size_t)(c->dn + c->dr);
    size_t dvv = c->absorbed ? rkv : (size_t)c->dv, hk = c->absorbed ? 1 : H;
    size_t rq = c->q_lora_rank > 0 ? (size_t)c->q_lora_rank : (size_t)c->hidden;
    b->cq = malloc((T * rq + 1) * sizeof(float));
    b->kvc = malloc((T * (rkv + dr) + 1) * sizeof(float));
    b->ckv = malloc((T * rkv + 1) * sizeof(float));
    b->kpe = malloc((T * dr + 1) * sizeof(float));
    b->query = malloc((T * H * dq + 1) * sizeof(float));
    b->key = malloc((T * hk * dq + 1) * sizeof(float));
    b->value = malloc((T * hk * dvv + 1) * sizeof(float));
    b->att = malloc((T * H * dvv + 1) * sizeof(float));
    b->o = malloc((T * H * (size_t)c->dv + 1) * sizeof(float));
    if (!b->cq || !b->kvc || !b->ckv || !b->kpe || !b->query || !b->key || !b->value || !b->att ||
        !b->o)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "qs_mla_fwd: out of memory");
    return QS_OK;
}

static void qsi_mla_blk_free(qsi_mla_blk *b)
{
    free(b->cq), free(b->kvc), free(b->ckv), free(b->kpe), free(b->query);
    free(b->key), free(b->value), free(b->att), free(b->o);
}

/* The down-projections [MLA-Q-PATH] [MLA-KV-PATH]: c_q (pre-norm) or x, and the split of
 * x W_DKV^T into c_kv (pre-norm) and k_pe. */
static void qsi_mla_down(const qs_mla_config *c, int64_t T, qs_dtype dt, const qs_mla_weights *w,
                         const float *x, qsi_mla_blk *b)
{
    int64_t rkv = c->kv_lora_rank, dr = c->dr;
    if (c->q_lora_rank > 0)
        qsi_mla_linear(T, c->hidden, c->q_lora_rank, x, w->w_dq, b->cq, dt);
    else
        memcpy(b->cq, x, (size_t)(T * c->hidden) * sizeof(float));
    qsi_mla_linear(T, c->hidden, rkv + dr, x, w->w_dkv, b->kvc, dt);
    for (int64_t t = 0; t < T; t++) {
        memcpy(b->ckv + t * rkv, b->kvc + t * (rkv + dr), (size_t)rkv * sizeof(float));
        memcpy(b->kpe + t * dr, b->kvc + t * (rkv + dr) + rkv, (size_t)dr * sizeof(float));
    }
}

qs_status qs_mla_fwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, float *out)
{
    const char *fn = "qs_mla_fwd";
    qs_status st = qsi_mla_check(ctx, fn, cfg, shape, w);
    if (st != QS_OK)
        return st;
    int64_t T = qsi_mla_tokens(shape);
    st = qsi_attn_check_values(ctx, fn, "x", x, (size_t)(T * cfg->hidden), shape->dtype);
    if (st == QS_OK && out == NULL)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'out' is NULL", fn);
    qsi_mla_blk b;
    memset(&b, 0, sizeof b);
    if (st == QS_OK)
        st = qsi_mla_blk_alloc(ctx, cfg, (size_t)T, &b);
    if (st == QS_OK) {
        qsi_mla_down(cfg, T, shape->dtype, w, x, &b);
        st = qs_mla_up_proj(ctx, cfg, shape, w, b.cq, b.ckv, b.kpe, b.query, b.key, b.value);
    }
    if (st == QS_OK)
        st = qsi_mla_attend(ctx, cfg, shape, b.query, b.key, b.value, b.att);
    if (st == QS_OK) {
        const float *o = b.att;
        if (cfg->absorbed) {
            qsi_mla_absorb_out(cfg, w, T, shape->dtype, b.att, b.o);
            o = b.o;
        }
        qsi_mla_linear(T, cfg->heads * cfg->dv, cfg->hidden, o, w->w_o, out, shape->dtype);
    }
    qsi_mla_blk_free(&b);
    return st;
}

/* ---------------------------------------------------------------- backward [MLA-BWD] */

/* Linear backward, data: dx[t, i] = round_dt(sum_o dy[t, o] w[o, i]), FP32 sum in
 * increasing o [MLA-BWD]. */
static void qsi_mla_linear_dx(int64_t rows, int64_t in, int64_t out, const float *dy,
                              const float *w, float *dx, qs_dtype dt)
{
    for (int64_t t = 0; t < rows; t++)
        for (int64_t i = 0; i < in; i++) {
            float acc = 0.0f;
            for (int64_t o = 0; o < out; o++)
                acc = acc + dy[t * out + o] * w[o * in + i];
            dx[t * in + i] = qsi_attn_round(dt, acc);
        }
}

/* Linear backward, weight: dw[o, i] = sum_t dy[t, o] x[t, i], FP32 sum in increasing t,
 * not rounded [MLA-BWD]. */
static void qsi_mla_linear_dw(int64_t rows, int64_t in, int64_t out, const float *dy,
                              const float *x, float *dw)
{
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < rows; t++)
                acc = acc + dy[t * out + o] * x[t * in + i];
            dw[o * in + i] = acc;
        }
}

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
static void qsi_mla_rope_bwd(const qs_mla_config *cfg, qs_dtype dt, const float *inv, int64_t pos,
                             const float *dy, float *dx)
{
    float m = qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale) /
              qsi_mla_mscale(cfg->yarn_factor, cfg->yarn_mscale_all_dim);
    int64_t half = cfg->dr / 2;
    for (int64_t j = 0; j < half; j++) {
        float fr = (float)pos * inv[j];
        float c = qsi_attn_round(dt, qs_cosf(fr) * m), s = qsi_attn_round(dt, qs_sinf(fr) * m);
        float g1 = dy[j], g2 = dy[half + j];
        dx[2 * j] = qsi_attn_round(dt, qsi_attn_round(dt, g1 * c) + qsi_attn_round(dt, g2 * s));
        dx[2 * j + 1] =
            qsi_attn_round(dt, qsi_attn_round(dt, g2 * c) + qsi_attn_round(dt, -g1 * s));
    }
}

/* Row `row` of the combined K/V up-projection order (per head dn K rows, then dv V rows),
 * in the weights (combined or split) and in the matching gradient. */
static const float *qsi_mla_ukv_row(const qs_mla_config *c, const qs_mla_weights *w, int64_t row)
{
    int64_t h = row / (c->dn + c->dv), r = row % (c->dn + c->dv);
    return r < c->dn ? qsi_mla_wuk(c, w, h, r) : qsi_mla_wuv(c, w, h, r - c->dn);
}
static float *qsi_mla_dukv_row(const qs_mla_config *c, const qs_mla_grads *g, int64_t row)
{
    int64_t h = row / (c->dn + c->dv), r = row % (c->dn + c->dv), rkv = c->kv_lora_rank;
    if (g->dw_ukv != NULL)
        return g->dw_ukv + row * rkv;
    return r < c->dn ? g->dw_uk + (h * c->dn + r) * rkv : g->dw_uv + (h * c->dv + r - c->dn) * rkv;
}
static float *qsi_mla_duk(const qs_mla_config *c, const qs_mla_grads *g, int64_t h, int64_t d)
{
    return qsi_mla_dukv_row(c, g, h * (c->dn + c->dv) + d);
}
static float *qsi_mla_duv(const qs_mla_config *c, const qs_mla_grads *g, int64_t h, int64_t e)
{
    return qsi_mla_dukv_row(c, g, h * (c->dn + c->dv) + c->dn + e);
}

/* Forward state and gradient scratch of the backward. */
typedef struct qsi_mla_bw {
    qsi_mla_blk f;
    qsi_mla_upw u;
    float *d_o, *d_att, *d_query, *d_key, *d_value, *d_q, *d_cqn, *d_cq, *d_c, *d_kvc, *d_ckv,
        *dx_q, *dx_kv, *dkv;
} qsi_mla_bw;

static qs_status qsi_mla_bw_alloc(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_shape *sh,
                                  qsi_mla_bw *b)
{
    size_t T = (size_t)qsi_mla_tokens(sh), H = (size_t)c->heads, rkv = (size_t)c->kv_lora_rank;
    size_t dr = (size_t)c->dr, dqin = (size_t)(c->dn + c->dr), hid = (size_t)c->hidden;
    size_t dq = c->absorbed ? rkv + dr : dqin, dvv = c->absorbed ? rkv : (size_t)c->dv;
    size_t hk = c->absorbed ? 1 : H, rq = c->q_lora_rank > 0 ? (size_t)c->q_lora_rank : 1;
    qs_status st = qsi_mla_blk_alloc(ctx, c, T, &b->f);
    if (st == QS_OK)
        st = qsi_mla_upw_alloc(ctx, "qs_mla_bwd", c, sh, &b->u);
    float **p[] = {&b->d_o,  &b->d_att, &b->d_query, &b->d_key, &b->d_value, &b->d_q,   &b->d_cqn,
                   &b->d_cq, &b->d_c,   &b->d_kvc,   &b->d_ckv, &b->dx_q,    &b->dx_kv, &b->dkv};
    size_t n[] = {H * (size_t)c->dv,
                  H * dvv,
                  H * dq,
                  hk * dq,
                  hk * dvv,
                  H * dqin,
                  rq,
                  rq,
                  rkv,
                  rkv + dr,
                  rkv,
                  hid,
                  hid,
                  H * (size_t)(c->dn + c->dv)};
    int bad = 0;
    for (size_t e = 0; e < sizeof n / sizeof n[0]; e++) {
        *p[e] = malloc((T * n[e] + 1) * sizeof(float));
        bad |= *p[e] == NULL;
    }
    if (st == QS_OK && bad)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "qs_mla_bwd: out of memory");
    return st;
}

static void qsi_mla_bw_free(qsi_mla_bw *b)
{
    qsi_mla_blk_free(&b->f);
    qsi_mla_upw_free(&b->u);
    free(b->d_o), free(b->d_att), free(b->d_query), free(b->d_key), free(b->d_value);
    free(b->d_q), free(b->d_cqn), free(b->d_cq), free(b->d_c), free(b->d_kvc);
    free(b->d_ckv), free(b->dx_q), free(b->dx_kv), free(b->dkv);
}

/* The forward again, with the same functions, keeping every intermediate (bit-identical to
 * qs_mla_fwd's) [MLA-BWD]. */
static qs_status qsi_mla_bwd_forward(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_shape *sh,
                                     const qs_mla_weights *w, const float *x, qsi_mla_bw *b)
{
    int64_t T = qsi_mla_tokens(sh);
    qsi_mla_down(c, T, sh->dtype, w, x, &b->f);
    qsi_mla_up_compute(c, sh, w, b->f.cq, b->f.ckv, b->f.kpe, b->f.query, b->f.key, b->f.value,
                       &b->u);
    qs_status st = qsi_mla_attend(ctx, c, sh, b->f.query, b->f.key, b->f.value, b->f.att);
    if (st == QS_OK && c->absorbed)
        qsi_mla_absorb_out(c, w, T, sh->dtype, b->f.att, b->f.o);
    return st;
}

/* The SDPA backward of the block's attention [MLA-BWD]. */
static qs_status qsi_mla_attend_bwd(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_shape *sh,
                                    qsi_mla_bw *b)
{
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
    return qs_sdpa_bwd(ctx, &p, b->f.query, b->f.key, b->f.value, b->f.att, b->d_att, b->d_query,
                       b->d_key, b->d_value);
}

/* The output side: out = linear(o, w_o), and in the absorbed form o = lat W_UV^T
 * [MLA-BWD-ABSORBED]: d_lat[t,h,c] = round_dt(sum_e d_o[t,h,e] W_UV[h][e][c]) and
 * dW_UV[h][e][c] = sum_t d_o[t,h,e] lat[t,h,c]. */
static void qsi_mla_bwd_out(const qs_mla_config *c, int64_t T, qs_dtype dt, const qs_mla_weights *w,
                            const float *dout, const qs_mla_grads *g, qsi_mla_bw *b)
{
    int64_t H = c->heads, dv = c->dv, rkv = c->kv_lora_rank;
    const float *o = c->absorbed ? b->f.o : b->f.att;
    qsi_mla_linear_dx(T, H * dv, c->hidden, dout, w->w_o, b->d_o, dt);
    qsi_mla_linear_dw(T, H * dv, c->hidden, dout, o, g->dw_o);
    if (!c->absorbed) {
        memcpy(b->d_att, b->d_o, (size_t)(T * H * dv) * sizeof(float));
        return;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t cc = 0; cc < rkv; cc++) {
                float acc = 0.0f;
                for (int64_t e = 0; e < dv; e++)
                    acc = acc + b->d_o[(t * H + h) * dv + e] * qsi_mla_wuv(c, w, h, e)[cc];
                b->d_att[(t * H + h) * rkv + cc] = qsi_attn_round(dt, acc);
            }
    for (int64_t h = 0; h < H; h++)
        for (int64_t e = 0; e < dv; e++)
            for (int64_t cc = 0; cc < rkv; cc++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < T; t++)
                    acc = acc + b->d_o[(t * H + h) * dv + e] * b->f.att[(t * H + h) * rkv + cc];
                qsi_mla_duv(c, g, h, e)[cc] = acc;
            }
}

/* The query side down to d_q [T, n, dn + dr]: the nope part is d_query's (plain) or, in the
 * absorbed form, d_q_nope[t,h,d] = round_dt(sum_c d_q_abs[t,h,c] W_UK[h][d][c]) with
 * dW_UK[h][d][c] = sum_t q_nope[t,h,d] d_q_abs[t,h,c] [MLA-BWD-ABSORBED]; the pe part is
 * the RoPE backward of d_query's last dr dims [MLA-BWD-ROPE]. */
static void qsi_mla_bwd_query(const qs_mla_config *c, int64_t T, qs_dtype dt,
                              const qs_mla_weights *w, const qs_mla_grads *g, qsi_mla_bw *b)
{
    int64_t H = c->heads, dqin = c->dn + c->dr, rkv = c->kv_lora_rank;
    int64_t dq = c->absorbed ? rkv + c->dr : dqin;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *dqr = b->d_query + (t * H + h) * dq;
            float *out = b->d_q + (t * H + h) * dqin;
            for (int64_t d = 0; d < c->dn && !c->absorbed; d++)
                out[d] = dqr[d];
            for (int64_t d = 0; d < c->dn && c->absorbed; d++) {
                float acc = 0.0f;
                for (int64_t cc = 0; cc < rkv; cc++)
                    acc = acc + dqr[cc] * qsi_mla_wuk(c, w, h, d)[cc];
                out[d] = qsi_attn_round(dt, acc);
            }
            qsi_mla_rope_bwd(c, dt, b->u.inv, b->u.pos[t], dqr + dq - c->dr, out + c->dn);
        }
    for (int64_t h = 0; h < H && c->absorbed; h++)
        for (int64_t d = 0; d < c->dn; d++)
            for (int64_t cc = 0; cc < rkv; cc++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < T; t++)
                    acc = acc + b->u.q[(t * H + h) * dqin + d] * b->d_query[(t * H + h) * dq + cc];
                qsi_mla_duk(c, g, h, d)[cc] = acc;
            }
}

/* The q projections: with rq > 0, through w_uq, the q norm and w_dq; else through w_q. */
static void qsi_mla_bwd_qproj(const qs_mla_config *c, int64_t T, qs_dtype dt,
                              const qs_mla_weights *w, const float *x, const qs_mla_grads *g,
                              qsi_mla_bw *b)
{
    int64_t nq = c->heads * (c->dn + c->dr), rq = c->q_lora_rank;
    if (rq == 0) {
        qsi_mla_linear_dx(T, c->hidden, nq, b->d_q, w->w_q, b->dx_q, dt);
        qsi_mla_linear_dw(T, c->hidden, nq, b->d_q, x, g->dw_q);
        return;
    }
    qsi_mla_linear_dx(T, rq, nq, b->d_q, w->w_uq, b->d_cqn, dt);
    qsi_mla_linear_dw(T, rq, nq, b->d_q, b->u.cqn, g->dw_uq);
    qsi_mla_rmsnorm_bwd(T, rq, rq, b->f.cq, w->q_norm, c->norm_eps, b->d_cqn, b->d_cq, g->dq_norm,
                        dt);
    qsi_mla_linear_dx(T, c->hidden, rq, b->d_cq, w->w_dq, b->dx_q, dt);
    qsi_mla_linear_dw(T, c->hidden, rq, b->d_cq, x, g->dw_dq);
}

/* The gradient of c (the normed c_kv): plain, the K/V up-projection backward over the
 * combined row order; absorbed, round_dt(fl(d_key[.., :rkv] + d_value)) [MLA-BWD-ABSORBED]. */
static void qsi_mla_bwd_c(const qs_mla_config *c, int64_t T, qs_dtype dt, const qs_mla_weights *w,
                          const qs_mla_grads *g, qsi_mla_bw *b)
{
    int64_t H = c->heads, rkv = c->kv_lora_rank, nr = H * (c->dn + c->dv), dq = c->dn + c->dr;
    if (c->absorbed) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t cc = 0; cc < rkv; cc++)
                b->d_c[t * rkv + cc] =
                    qsi_attn_round(dt, b->d_key[t * (rkv + c->dr) + cc] + b->d_value[t * rkv + cc]);
        return;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float *row = b->dkv + t * nr + h * (c->dn + c->dv);
            memcpy(row, b->d_key + (t * H + h) * dq, (size_t)c->dn * sizeof(float));
            memcpy(row + c->dn, b->d_value + (t * H + h) * c->dv, (size_t)c->dv * sizeof(float));
        }
    for (int64_t t = 0; t < T; t++)
        for (int64_t cc = 0; cc < rkv; cc++) {
            float acc = 0.0f;
            for (int64_t r = 0; r < nr; r++)
                acc = acc + b->dkv[t * nr + r] * qsi_mla_ukv_row(c, w, r)[cc];
            b->d_c[t * rkv + cc] = qsi_attn_round(dt, acc);
        }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t cc = 0; cc < rkv; cc++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < T; t++)
                acc = acc + b->dkv[t * nr + r] * b->u.ckv[t * rkv + cc];
            qsi_mla_dukv_row(c, g, r)[cc] = acc;
        }
}

/* The kv side: d_c, then the shared k_pe (round_dt of the FP32 sum over the key heads in
 * increasing order, then [MLA-BWD-ROPE]), the kv norm and w_dkv. */
static void qsi_mla_bwd_kv(const qs_mla_config *c, int64_t T, qs_dtype dt, const qs_mla_weights *w,
                           const float *x, const qs_mla_grads *g, qsi_mla_bw *b)
{
    int64_t rkv = c->kv_lora_rank, dr = c->dr, hk = c->absorbed ? 1 : c->heads;
    int64_t dq = c->absorbed ? rkv + dr : c->dn + dr;
    qsi_mla_bwd_c(c, T, dt, w, g, b);
    qsi_mla_rmsnorm_bwd(T, rkv, rkv, b->f.ckv, w->kv_norm, c->norm_eps, b->d_c, b->d_ckv,
                        g->dkv_norm, dt);
    for (int64_t t = 0; t < T; t++) {
        float rot[1024];
        for (int64_t j = 0; j < dr; j++) {
            float acc = 0.0f;
            for (int64_t h = 0; h < hk; h++)
                acc = acc + b->d_key[(t * hk + h) * dq + dq - dr + j];
            rot[j] = qsi_attn_round(dt, acc);
        }
        float *kv = b->d_kvc + t * (rkv + dr);
        memcpy(kv, b->d_ckv + t * rkv, (size_t)rkv * sizeof(float));
        qsi_mla_rope_bwd(c, dt, b->u.inv, b->u.pos[t], rot, kv + rkv);
    }
    qsi_mla_linear_dx(T, c->hidden, rkv + dr, b->d_kvc, w->w_dkv, b->dx_kv, dt);
    qsi_mla_linear_dw(T, c->hidden, rkv + dr, b->d_kvc, x, g->dw_dkv);
}

static qs_status qsi_mla_check_grads(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_weights *w,
                                     const qs_mla_grads *g)
{
    int ok = g != NULL && g->dx && g->dw_dkv && g->dkv_norm && g->dw_o;
    if (ok)
        ok = c->q_lora_rank > 0 ? (g->dw_dq && g->dq_norm && g->dw_uq) : g->dw_q != NULL;
    if (ok)
        ok = w->w_ukv != NULL ? g->dw_ukv != NULL : (g->dw_uk && g->dw_uv);
    if (!ok)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "qs_mla_bwd: a gradient the config needs is NULL");
    return QS_OK;
}

qs_status qs_mla_bwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, const float *dout,
                     const qs_mla_grads *g)
{
    const char *fn = "qs_mla_bwd";
    qs_status st = qsi_mla_check(ctx, fn, cfg, shape, w);
    if (st != QS_OK)
        return st;
    int64_t T = qsi_mla_tokens(shape);
    qs_dtype dt = shape->dtype;
    st = qsi_attn_check_values(ctx, fn, "x", x, (size_t)(T * cfg->hidden), dt);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "dout", dout, (size_t)(T * cfg->hidden), dt);
    if (st == QS_OK)
        st = qsi_mla_check_grads(ctx, cfg, w, g);
    qsi_mla_bw b;
    memset(&b, 0, sizeof b);
    if (st == QS_OK)
        st = qsi_mla_bw_alloc(ctx, cfg, shape, &b);
    if (st == QS_OK)
        st = qsi_mla_bwd_forward(ctx, cfg, shape, w, x, &b);
    if (st == QS_OK) {
        qsi_mla_bwd_out(cfg, T, dt, w, dout, g, &b);
        st = qsi_mla_attend_bwd(ctx, cfg, shape, &b);
    }
    if (st == QS_OK) {
        qsi_mla_bwd_query(cfg, T, dt, w, g, &b);
        qsi_mla_bwd_qproj(cfg, T, dt, w, x, g, &b);
        qsi_mla_bwd_kv(cfg, T, dt, w, x, g, &b);
        for (int64_t e = 0; e < T * cfg->hidden; e++)
            g->dx[e] = qsi_attn_round(dt, b.dx_q[e] + b.dx_kv[e]); /* [MLA-BWD] */
    }
    qsi_mla_bw_free(&b);
    return st;
}
