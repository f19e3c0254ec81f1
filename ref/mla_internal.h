/* mla_internal.h: the MLA block of ref/mla.c cut into its stages, shared by the standalone
 * calls (qs_mla_forward, qs_mla_backward) and the engine's mla op (ref/engine.c). The block
 * makes every linear call through a runner, which decides the linear's precision and owns
 * its quantizers [MLA-LINEAR]; the math of both kinds of linear is here. Not public. */
#ifndef QSPEC_REF_MLA_INTERNAL_H
#define QSPEC_REF_MLA_INTERNAL_H

#include <stdint.h>

#include "qspec/attention.h"
#include "qspec/recipe.h"
#include "qspec/scope.h"

/* What a stage works on: the configuration, the token shape (its dtype is dt) and the
 * weight values. */
typedef struct qsi_mla_block {
    const qs_mla_config *cfg;
    const qs_mla_shape *shape;
    const qs_mla_weights *w;
} qsi_mla_block;

/* One linear call of the block. Forward: y = x w^T. Backward: dx = dy w, dw = dy^T x. */
typedef struct qsi_mla_call {
    qs_mla_linear lin;
    int64_t rows, in, out;
    qs_dtype dt;     /* the activation dtype */
    const float *x;  /* [rows, in], dt values */
    const float *w;  /* [out, in] */
    float *y;        /* forward: [rows, out], dt values */
    const float *dy; /* backward: [rows, out], dt values */
    float *dx;       /* backward: [rows, in], dt values */
    float *dw;       /* backward: [out, in], FP32 */
} qsi_mla_call;

/* What one linear's forward leaves for its backward: the decision and, when quantized,
 * the quantized copies of x and w [GEMM-LIN-WGRAD]. */
typedef struct qsi_mla_saved {
    qs_precision prec;
    qs_recipe_kind kind;
    qs_quantized xq, wq;
} qsi_mla_saved;

/* The absorbed form's high-precision einsums [MLA-ABSORBED-HP]. */
typedef enum qsi_mla_einsum {
    QSI_MLA_K_ABSORB = 0, /* q_abs = q_nope W_UK (inside the mla_up_proj region) */
    QSI_MLA_V_ABSORB      /* o = lat W_UV^T (after the attention) */
} qsi_mla_einsum;

/* How the block runs its linears. fwd decides, computes c->y and fills *sv; bwd computes
 * c->dx and c->dw from *sv. einsum (may be NULL) is told of each absorbed einsum. */
typedef struct qsi_mla_runner {
    void *arg;
    qs_status (*fwd)(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv);
    qs_status (*bwd)(void *arg, const qsi_mla_call *c, qsi_mla_saved *sv);
    qs_status (*einsum)(void *arg, qsi_mla_einsum e, int backward);
} qsi_mla_runner;

/* [MLA-LINEAR-HP]: y = round_dt(FP32 dot); dx = round_dt(FP32 sum over out); dw = FP32
 * sum over rows; each an FP32 (fp32_seq) GEMM through the context's gemm slot (ctx NULL:
 * the reference's). */
qs_status qsi_mla_lin_hp_fwd(qs_ctx *ctx, const qsi_mla_call *c);
qs_status qsi_mla_lin_hp_bwd(qs_ctx *ctx, const qsi_mla_call *c);
/* [MLA-LINEAR-QUANT]: qs_linear_forward with qx, qw (the recipe's default options, output
 * dt), keeping the quantized copies in *sv; and qs_linear_backward with qdy (output FP32:
 * dx rounded to dt, dw as given). */
qs_status qsi_mla_lin_q_fwd(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qx, qs_quantizer *qw,
                            qsi_mla_saved *sv);
qs_status qsi_mla_lin_q_bwd(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qdy,
                            const qsi_mla_saved *sv);
/* [MLA-LINEAR-CALIB]: delayed-scaling calibration of x (qx) and w (qw). */
qs_status qsi_mla_lin_calibrate(qs_ctx *ctx, const qsi_mla_call *c, qs_quantizer *qx,
                                qs_quantizer *qw);

/* Checks configuration, shape and weights [MLA-SHAPES]. */
qs_status qsi_mla_check(qs_ctx *ctx, const char *fn, const qsi_mla_block *b);
/* The number of token rows of a shape. */
int64_t qsi_mla_tokens(const qs_mla_shape *sh);

/* The block's intermediates, forward and backward, and its saved linears. */
typedef struct qsi_mla_state qsi_mla_state;
qs_status qsi_mla_state_new(qs_ctx *ctx, const char *fn, const qsi_mla_block *b,
                            qsi_mla_state **out);
/* Frees a state and the quantized copies it holds; NULL is accepted. */
void qsi_mla_state_free(qsi_mla_state *st);

/* Forward stages, in order [MLA-FWD]: the down-projections of x ([MLA-Q-PATH]
 * [MLA-KV-PATH]; x must stay valid until the backward is done); the mla_up_proj region
 * [MLA-UP-PROJ]; the attention, the absorbed W_UV and the output projection into out. */
qs_status qsi_mla_fwd_down(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *x, qsi_mla_state *st);
qs_status qsi_mla_fwd_up(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                         qsi_mla_state *st);
qs_status qsi_mla_fwd_out(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                          qsi_mla_state *st, float *out);
/* A 64-bit FNV-1a digest of the region's outputs (query, key, value bits). */
uint64_t qsi_mla_up_digest(const qsi_mla_block *b, const qsi_mla_state *st);
/* Discards the region's outputs and intermediates (overwritten with NaN) and the quantized
 * copies of its linears [RCP-MLA-UP-PROJ]; qsi_mla_fwd_up recomputes them. */
void qsi_mla_up_discard(const qsi_mla_block *b, qsi_mla_state *st);

/* Backward stages, in order [MLA-BWD]: the output projection (from dout); the absorbed
 * W_UV and the attention; the region; the down-projections (writes g->dx). */
qs_status qsi_mla_bwd_proj(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *dout, const qs_mla_grads *g, qsi_mla_state *st);
qs_status qsi_mla_bwd_attn(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const qs_mla_grads *g, qsi_mla_state *st);
qs_status qsi_mla_bwd_up(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                         const qs_mla_grads *g, qsi_mla_state *st);
qs_status qsi_mla_bwd_down(qs_ctx *ctx, const qsi_mla_block *b, const qsi_mla_runner *r,
                           const float *x, const qs_mla_grads *g, qsi_mla_state *st);

#endif
