/* attention.h: the reference attention ops of spec/attention.md. Softmax attention
 * (SDPA: sbhd/bshd/thd, none/causal, GQA, lse, backward) [ATTN-*]; Gated DeltaNet (the
 * normative token recurrence, its chunked WY form, backward, and the layer pieces: gate,
 * beta, short conv, gated RMSNorm) [GDN-*]; the MLA block, plain and absorbed, forward and
 * backward, its linears quantized under an enabled region [MLA-*]. Tensors are row-major
 * FP32 arrays holding values of the dtype named. */
#ifndef QSPEC_ATTENTION_H
#define QSPEC_ATTENTION_H

#include <stdint.h>

#include "attn_params.h"
#include "recipe.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- SDPA */

/* qs_attn_layout, qs_attn_mask and qs_sdpa_params: qspec/attn_params.h. */

/* Forward [ATTN-FWD]: o (q tokens x h x dv, in the layout) and lse (q tokens x h, FP32,
 * natural log [ATTN-LSE]; may be NULL). Returns QS_ERR_INVALID_ARG for a null pointer, bad
 * enum, scale or cu_seqlens, or an input value not representable in dtype; QS_ERR_SHAPE for
 * bad extents; QS_ERR_DTYPE for another dtype; QS_ERR_NOMEM. */
qs_status qs_sdpa_fwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                      const float *v, float *o, float *lse);
/* Backward [ATTN-BWD]: dq, dk, dv from q, k, v, the forward output o and its gradient dout.
 * Same errors as qs_sdpa_fwd. */
qs_status qs_sdpa_bwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                      const float *v, const float *o, const float *dout, float *dq, float *dk,
                      float *dv);
/* The scale a call uses: p->scale, or qs_rsqrtf((float)p->d) when it is 0 [ATTN-SCALE]. */
float qs_sdpa_scale(const qs_sdpa_params *p);

/* ---------------------------------------------------------------- Gated DeltaNet */

/* qs_gdn_params: qspec/attn_params.h. */

/* The normative token recurrence [GDN-RECURRENCE]: o from q, k, v, g (natural-log decay,
 * FP32), beta (FP32) and h0 (FP32 initial state, NULL for zeros); ht (FP32 final state)
 * may be NULL. Errors as qs_sdpa_fwd. */
qs_status qs_gdn_fwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0, float *o,
                     float *ht);
/* The chunked WY form [GDN-CHUNK] with chunk length chunk (1..256; 64 upstream): the same
 * function as qs_gdn_fwd, in another FP32 evaluation order (not bitwise equal). */
qs_status qs_gdn_fwd_chunked(qs_ctx *ctx, const qs_gdn_params *p, int64_t chunk, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             const float *h0, float *o, float *ht);
/* Backward of qs_gdn_fwd [GDN-BWD]: from dout (dtype values) and dht (FP32, NULL for
 * zeros) gives dq, dk, dv (dtype values), dg, dbeta and dh0 (FP32; dh0 may be NULL). */
qs_status qs_gdn_bwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *dout, const float *dht, float *dq, float *dk, float *dv,
                     float *dg, float *dbeta, float *dh0);

/* Gate [GDN-GATE]: g[n, c] = -exp(a_log[c]) * softplus(a[n, c] + dt_bias[c]) in FP32, for
 * n rows of hv channels. QS_ERR_INVALID_ARG for null pointers, QS_ERR_SHAPE for n, hv < 0. */
qs_status qs_gdn_gate_fwd(qs_ctx *ctx, int64_t n, int64_t hv, const float *a, const float *a_log,
                          const float *dt_bias, float *g);
/* Backward of the gate [GDN-GATE-BWD]: da [n, hv], da_log [hv], ddt_bias [hv]. */
qs_status qs_gdn_gate_bwd(qs_ctx *ctx, int64_t n, int64_t hv, const float *a, const float *a_log,
                          const float *dt_bias, const float *dg, float *da, float *da_log,
                          float *ddt_bias);
/* beta = sigmoid(b), FP32, element-wise over n values [GDN-BETA]. */
qs_status qs_gdn_beta_fwd(qs_ctx *ctx, int64_t n, const float *b, float *beta);
/* db = dbeta * beta * (1 - beta), from the forward output beta [GDN-BETA]. */
qs_status qs_gdn_beta_bwd(qs_ctx *ctx, int64_t n, const float *beta, const float *dbeta, float *db);

/* The short causal depthwise conv1d with SiLU [GDN-CONV]: x, y [b, t, c] (or packed [t, c]
 * with cu_seqlens, b+1 entries), w [c, width], bias [c] or NULL; values of dtype. */
typedef struct qs_conv_params {
    int64_t b, t, c, width;
    const int32_t *cu_seqlens;
    int silu;       /* nonzero: apply SiLU (the GDN layer's setting) */
    qs_dtype dtype; /* of x, w, bias, y, dy and dx; dw, dbias are FP32 sums */
} qs_conv_params;

qs_status qs_conv1d_fwd(qs_ctx *ctx, const qs_conv_params *p, const float *x, const float *w,
                        const float *bias, float *y);
/* Backward [GDN-CONV-BWD]: dx (dtype values), dw and dbias (FP32; dbias may be NULL and is
 * not written when bias is NULL). */
qs_status qs_conv1d_bwd(qs_ctx *ctx, const qs_conv_params *p, const float *x, const float *w,
                        const float *bias, const float *dy, float *dx, float *dw, float *dbias);

/* Gated RMSNorm [GDN-GATED-RMSNORM]: y[r, i] = rmsnorm(x[r,:])[i] * w[i] * silu(z[r, i]),
 * over rows of width n; x, z, y values of dtype, w FP32; eps > 0 (1e-5 in FLA). */
qs_status qs_gated_rmsnorm_fwd(qs_ctx *ctx, int64_t rows, int64_t n, float eps, qs_dtype dtype,
                               const float *x, const float *z, const float *w, float *y);
/* Backward [GDN-GATED-RMSNORM-BWD]: dx, dz (dtype values), dw (FP32). */
qs_status qs_gated_rmsnorm_bwd(qs_ctx *ctx, int64_t rows, int64_t n, float eps, qs_dtype dtype,
                               const float *x, const float *z, const float *w, const float *dy,
                               float *dx, float *dz, float *dw);

/* ---------------------------------------------------------------- MLA */

/* Multi-head latent attention dimensions and RoPE/YaRN options [MLA-SHAPES] [MLA-YARN]. */
typedef struct qs_mla_config {
    int64_t hidden, heads;
    int64_t q_lora_rank;  /* rq; 0: a single q projection from the hidden state */
    int64_t kv_lora_rank; /* rkv */
    int64_t dn, dr, dv;   /* qk nope dim, qk rope dim (even), v dim */
    float norm_eps;       /* RMSNorm eps of the q and kv norms (> 0) */
    float rope_base;      /* 10000 */
    float yarn_factor;    /* f; <= 1: plain RoPE, no YaRN */
    float yarn_mscale, yarn_mscale_all_dim;
    float yarn_beta_fast, yarn_beta_slow;
    int64_t yarn_original_max_pos;
    int absorbed; /* nonzero: the absorbed form [MLA-ABSORBED] */
} qs_mla_config;

/* Weights, [out, in] row-major, values of the shape's dtype; norm weights FP32.
 * w_dq [rq, hidden], q_norm [rq], w_uq [heads*(dn+dr), rq] (or w_q [heads*(dn+dr), hidden]
 * when rq is 0); w_dkv [rkv+dr, hidden]; kv_norm [rkv]; either w_ukv [heads*(dn+dv), rkv]
 * (per head dn K rows then dv V rows) or split w_uk [heads*dn, rkv] and w_uv [heads*dv, rkv]
 * (w_ukv NULL); w_o [hidden, heads*dv]. */
typedef struct qs_mla_weights {
    const float *w_dq, *q_norm, *w_uq, *w_q;
    const float *w_dkv, *kv_norm;
    const float *w_ukv, *w_uk, *w_uv;
    const float *w_o;
} qs_mla_weights;

/* Tokens of an MLA call: layout (sbhd: [s, b, hidden], bshd: [b, s, hidden], thd: [s,
 * hidden] packed by cu_seqlens with b + 1 entries), mask, and the activation dtype. */
typedef struct qs_mla_shape {
    qs_attn_layout layout;
    qs_attn_mask mask;
    int64_t b, s;
    const int32_t *cu_seqlens;
    qs_dtype dtype;
} qs_mla_shape;

/* The linears of the block [MLA-LINEAR], each a quantizable module with its own
 * quantizers. The K/V up-projections run only in the plain form: the absorbed form uses
 * their weights in high-precision einsums instead [MLA-ABSORBED-HP]. */
typedef enum qs_mla_linear {
    QS_MLA_Q_DOWN = 0, /* "q_down": c_q = x w_dq^T (rq > 0) */
    QS_MLA_Q_UP,       /* "q_up": q = rmsnorm(c_q) w_uq^T (rq > 0) */
    QS_MLA_Q_PROJ,     /* "q_proj": q = x w_q^T (rq = 0) */
    QS_MLA_KV_DOWN,    /* "kv_down": [c_kv | k_pe] = x w_dkv^T */
    QS_MLA_KV_UP,      /* "kv_up": [k_nope | v] = c w_ukv^T (plain, combined) */
    QS_MLA_K_UP,       /* "k_up": k_nope = c w_uk^T (plain, split) */
    QS_MLA_V_UP,       /* "v_up": v = c w_uv^T (plain, split) */
    QS_MLA_OUT_PROJ,   /* "out_proj": out = o w_o^T */
    QS_MLA_LINEAR_COUNT
} qs_mla_linear;

/* The parameters of the block, named as in qs_mla_weights ("w_dq", "q_norm", ...). */
typedef enum qs_mla_param {
    QS_MLA_W_DQ = 0,
    QS_MLA_Q_NORM,
    QS_MLA_W_UQ,
    QS_MLA_W_Q,
    QS_MLA_W_DKV,
    QS_MLA_KV_NORM,
    QS_MLA_W_UKV,
    QS_MLA_W_UK,
    QS_MLA_W_UV,
    QS_MLA_W_O,
    QS_MLA_PARAM_COUNT
} qs_mla_param;

/* Names of the enums ("q_down", ..., "out_proj"; "w_dq", ..., "w_o"); NULL for another
 * value. qs_mla_param_from_name returns -1 for an unknown name. */
const char *qs_mla_linear_name(qs_mla_linear l);
const char *qs_mla_param_name(qs_mla_param p);
int qs_mla_param_from_name(const char *name);
/* Whether cfg runs linear l with combined (split 0) or split (split 1) K/V weights
 * [MLA-LINEAR]; 0 for an unused linear or a bad argument. */
int qs_mla_linear_used(const qs_mla_config *cfg, int split, qs_mla_linear l);
/* The shape of parameter p under cfg with combined (split 0) or split K/V weights
 * [MLA-SHAPES]: returns 2 (a linear weight [out, in]) or 1 (a norm weight [n]) and fills
 * shape; 0 when the configuration does not use p, or for a bad argument. */
int qs_mla_param_shape(const qs_mla_config *cfg, int split, qs_mla_param p, int64_t shape[2]);

/* The quantizers of the block's linears under an enabled region [MLA-LINEAR-QUANT]:
 * q[l][QS_SCOPE_X] (role input), [QS_SCOPE_W] (role weight) and [QS_SCOPE_DY] (role
 * grad_output) for linear l, of the region's recipe kind, each producing both copies.
 * Entries of linears that do not run may be NULL; a calibrating region needs only the x
 * and w quantizers, and only under delayed scaling [MLA-LINEAR-CALIB]. They are used in
 * place: delayed scaling records its amax in them, nothing updates them. */
typedef struct qs_mla_quantizers {
    qs_quantizer *q[QS_MLA_LINEAR_COUNT][QS_SCOPE_ROLE_COUNT];
} qs_mla_quantizers;

/* The softmax scale mscale^2 / sqrt(dn + dr) [MLA-SCALE]. */
float qs_mla_softmax_scale(const qs_mla_config *cfg);
/* The dr/2 RoPE inverse frequencies, with YaRN when yarn_factor > 1 [MLA-YARN]; *low and
 * *high (may be NULL) get the ramp bounds. QS_ERR_INVALID_ARG for a bad configuration. */
qs_status qs_mla_rope_inv_freq(qs_ctx *ctx, const qs_mla_config *cfg, float *inv, float *low,
                               float *high);
/* RoPE of one dr-vector x at position pos into y [MLA-ROPE] (de-interleaved output). */
qs_status qs_mla_rope(qs_ctx *ctx, const qs_mla_config *cfg, qs_dtype dtype, int64_t pos,
                      const float *x, float *y);
/* The mla_up_proj region [MLA-UP-PROJ]: from q_in ([T, rq] pre-norm c_q, or [T, hidden]
 * when rq is 0), c_kv ([T, rkv], pre-norm) and k_pe ([T, dr]), writes query [T, heads, dq],
 * key [T, hk, dq] and value [T, hk, dvv] in the shape's token order, where plain MLA has
 * dq = dn+dr, hk = heads, dvv = dv and absorbed MLA dq = rkv+dr, hk = 1, dvv = rkv. Its
 * linears (q_up or q_proj, and kv_up or k_up and v_up) follow [MLA-LINEAR]; q may be NULL
 * where no linear needs quantizers (qs_mla_quantizers). Errors as qs_mla_forward. */
qs_status qs_mla_up_proj(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                         const qs_mla_weights *w, const qs_mla_quantizers *q, const float *q_in,
                         const float *c_kv, const float *k_pe, float *query, float *key,
                         float *value);
/* The MLA block forward [MLA-FWD]: out [T, hidden] from x [T, hidden]. Each linear runs as
 * the scope of ctx decides [MLA-LINEAR]: quantized with the quantizers q in an enabled
 * region (q may be NULL elsewhere). Errors as qs_sdpa_fwd, and QS_ERR_INVALID_ARG naming
 * the linear when a quantizer it needs is NULL or of another recipe kind. */
qs_status qs_mla_forward(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                         const qs_mla_weights *w, const qs_mla_quantizers *q, const float *x,
                         float *out);
/* qs_mla_forward without quantizers (high precision outside an enabled region). */
qs_status qs_mla_fwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, float *out);

/* Gradients of an MLA block, shaped like the input and the weights they belong to; the
 * ones the configuration uses (as in qs_mla_weights) must be non-NULL, the others are not
 * written. dx holds dtype values; weight gradients are FP32 sums, not rounded [MLA-BWD]. */
typedef struct qs_mla_grads {
    float *dx;
    float *dw_dq, *dq_norm, *dw_uq, *dw_q;
    float *dw_dkv, *dkv_norm;
    float *dw_ukv, *dw_uk, *dw_uv;
    float *dw_o;
} qs_mla_grads;

/* The MLA block backward [MLA-BWD] (plain or absorbed [MLA-BWD-ABSORBED]): from x and the
 * output gradient dout (dtype values) the gradients g of x and every weight. It recomputes
 * the forward under the same scope and quantizers (a delayed-scaling quantizer records the
 * same amax again, which changes nothing), then each linear's backward runs as its forward
 * did [MLA-LINEAR]. Errors as qs_mla_forward, and QS_ERR_INVALID_ARG for a NULL gradient
 * the configuration needs. */
qs_status qs_mla_backward(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                          const qs_mla_weights *w, const qs_mla_quantizers *q, const float *x,
                          const float *dout, const qs_mla_grads *g);
/* qs_mla_backward without quantizers. */
qs_status qs_mla_bwd(qs_ctx *ctx, const qs_mla_config *cfg, const qs_mla_shape *shape,
                     const qs_mla_weights *w, const float *x, const float *dout,
                     const qs_mla_grads *g);

#ifdef __cplusplus
}
#endif
#endif
