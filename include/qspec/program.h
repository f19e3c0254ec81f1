/* program.h: programs for the reference engine (spec/recompute.md, ref/engine.c). A
 * program is a tree of autocast, calibrate, island and checkpoint regions over ops (linear;
 * gdn, which needs an island inside a region; mla, the MLA block of spec/attention.md with
 * its linears quantized like linear ops), run forward on one activation [rows, dim] that
 * flows through the ops in order, then backward from a given output gradient. The engine
 * is the reference's tape; checkpointed regions (and an mla op's mla_up_proj region, when
 * it asks for it) are replayed in backward.
 *
 * A typical use: qs_program_new; qs_program_autocast(ROOT) -> region id; ops under it
 * (qs_program_linear, qs_program_mla, ...); qs_program_run(x, dy) -> result; compare
 * result.y, result.dx, result.grads[i] (and qs_program_result_mla_grad per parameter);
 * qs_program_result_free; run again (quantizer state persists) or qs_program_free. */
#ifndef QSPEC_PROGRAM_H
#define QSPEC_PROGRAM_H

#include <stdint.h>

#include "attention.h"
#include "checkpoint.h"
#include "recipe.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qs_program qs_program;

/* The root of every program; region and op builders take a parent node id. */
#define QS_PROGRAM_ROOT 0

/* Creates an empty program; NULL argument or no memory: an error. */
qs_status qs_program_new(qs_ctx *ctx, qs_program **out);
/* Frees a program and its quantizers; NULL is accepted. */
void qs_program_free(qs_program *p);

/* Region nodes, appended as the last child of parent; *id gets the new node's id.
 * autocast copies params (and its recipe) [SCOPE-ENTER]; calibrate is an autocast with
 * enabled 0, calibrating 1 [SCOPE-CALIB]; island has policy input_precision
 * [SCOPE-ISLAND]; checkpoint records and replays its body [RCP-RECORD]. */
qs_status qs_program_autocast(qs_ctx *ctx, qs_program *p, int parent,
                              const qs_autocast_params *params, int *id);
qs_status qs_program_calibrate(qs_ctx *ctx, qs_program *p, int parent, const qs_scope_recipe *r,
                               int *id);
qs_status qs_program_island(qs_ctx *ctx, qs_program *p, int parent, int *id);
qs_status qs_program_checkpoint(qs_ctx *ctx, qs_program *p, int parent, int *id);

/* A linear op y = x w^T; w [N, K] BF16 is copied. Its quantizers are created per recipe
 * kind on first quantized or calibrating use and persist across runs. */
qs_status qs_program_linear(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                            const qs_tensor *w, int *id);
/* A tanh-form GELU op (spec/recompute.md [RCP-GELU-OP]): no parameters (its grads slot stays
 * empty), never quantized in any region; keeps the activation's shape and dtype. */
qs_status qs_program_gelu(qs_ctx *ctx, qs_program *p, int parent, const char *name, int *id);
/* A Gated DeltaNet op over the activation x [rows, dim] (one head, q = k = v = x, q/k
 * l2norm, dk = dv = dim): g and beta (rows FP32 values each, copied) are its gate
 * parameters; it runs in the activation dtype with an FP32 state [SCOPE-ISLAND]. */
qs_status qs_program_gdn(qs_ctx *ctx, qs_program *p, int parent, const char *name, int64_t rows,
                         const float *g, const float *beta, int *id);
/* The same with `heads` heads: x [rows, dim] is [1, rows, heads, dim / heads] (q = k = v,
 * dk = dv = dim / heads, heads value heads), and g and beta hold rows * heads values, token
 * by token ([b, t, hv] of spec/attention.md [GDN-SHAPES]); qs_program_gdn is heads 1. */
qs_status qs_program_gdn_heads(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                               int64_t rows, int64_t heads, const float *g, const float *beta,
                               int *id);

/* An MLA op [RCP-MLA-OP] over the activation [rows, hidden], rows being tokens in the
 * layout's order (spec/attention.md [MLA-SHAPES]). Everything is copied; mp may be freed
 * after the call. */
typedef struct qs_program_mla_params {
    qs_mla_config cfg;         /* dims (q_lora_rank 0: a single q projection), RoPE/YaRN,
                                  absorbed (nonzero: the absorbed form [MLA-ABSORBED]) */
    qs_attn_layout layout;     /* QS_ATTN_SBHD: rows = s*b, row i*b + n is token i of sequence n;
                                  QS_ATTN_BSHD: rows = b*s, row n*s + i; QS_ATTN_THD: b sequences
                                  packed along rows = s by cu_seqlens (ragged lengths) */
    qs_attn_mask mask;         /* QS_ATTN_MASK_NONE or QS_ATTN_MASK_CAUSAL (top-left) */
    int64_t b, s;              /* sequences, and tokens per sequence (thd: tokens in all) */
    const int32_t *cu_seqlens; /* thd: b + 1 prefix sums from 0 to s; ignored otherwise */
    int recompute_up_proj;     /* nonzero: checkpoint and replay the mla_up_proj region
                                  [RCP-MLA-UP-PROJ] (transparent without gradients, or inside
                                  a checkpoint region) */
    /* The weights by qs_mla_param, FP32, BF16 or FP16 values, shaped as qs_mla_param_shape
     * says: [out, in] for linears, [n] for the two norms. The configuration decides which
     * are given: w_dq, q_norm, w_uq with q_lora_rank > 0, else w_q; w_dkv, kv_norm, w_o
     * always; w_ukv (combined K/V) or w_uk and w_uv (split: w_ukv NULL). Any other must be
     * NULL. */
    const qs_tensor *w[QS_MLA_PARAM_COUNT];
} qs_program_mla_params;

/* Adds an mla op named name (1 to 22 characters, no '/': its linears are traced as
 * "<name>/<linear>" [RCP-MLA-TRACE]). The op runs in the activation's dtype (BF16, FP16 or
 * FP32); each linear it runs (qs_mla_linear_used) gets its own quantizers per recipe kind,
 * created on first quantized or calibrating use and kept across runs, as for a linear op.
 * QS_ERR_INVALID_ARG for a bad name, a missing or extra weight, bad cu_seqlens or a bad
 * enum; QS_ERR_SHAPE for bad dimensions or a weight of another shape; QS_ERR_DTYPE. A run
 * whose activation is not [rows, hidden] fails with QS_ERR_SHAPE; NVFP4 (its Hadamard
 * transform) needs BF16 activations and rows a multiple of 16. */
qs_status qs_program_mla(qs_ctx *ctx, qs_program *p, int parent, const char *name,
                         const qs_program_mla_params *mp, int *id);

/* How replays run (default QS_REPLAY_SPEC) [RCP-AUDIT]. */
qs_status qs_program_set_replay(qs_ctx *ctx, qs_program *p, qs_replay_variant v);

/* The number of ops, in build order (op index i is the i-th op added). */
int qs_program_op_count(const qs_program *p);
/* The quantizer of op index op for recipe kind and role, NULL if not created (or not a
 * linear). */
const qs_quantizer *qs_program_quantizer(const qs_program *p, int op, qs_recipe_kind kind,
                                         qs_scope_role role);
/* The quantizer of linear lin of mla op index op for recipe kind and role; NULL if not
 * created, if the op does not run that linear, or if op is not an mla op. */
const qs_quantizer *qs_program_mla_quantizer(const qs_program *p, int op, qs_mla_linear lin,
                                             qs_recipe_kind kind, qs_scope_role role);

/* What a run produces. grads[i] is op i's parameter gradient: a linear's dW [N, K] BF16,
 * a gdn's [2, rows] FP32 (dg, then dbeta), an mla's parameter gradients (FP32) concatenated
 * in qs_mla_param order, the unused ones left out (each one alone: param_grads, through
 * qs_program_result_mla_grad). replay_* hold, per replay in backward order (checkpoint
 * regions and mla_up_proj regions alike), the digest of the discarded forward output and
 * of the replayed one. */
typedef struct qs_program_result {
    qs_tensor y;  /* forward output */
    qs_tensor dx; /* gradient of the program input (backward only) */
    int nops;
    qs_tensor *grads;
    qs_trace trace;
    int nreplays;
    uint64_t replay_fwd_digest[16];
    uint64_t replay_digest[16];
    qs_tensor *param_grads; /* nops * QS_MLA_PARAM_COUNT; read it with the function below */
} qs_program_result;

/* Op op's gradient of parameter param (FP32, shaped like the weight) when op is an mla op
 * using param and the run had a backward; NULL otherwise. */
const qs_tensor *qs_program_result_mla_grad(const qs_program_result *res, int op,
                                            qs_mla_param param);

/* Runs p forward on x [rows, dim] BF16 and, when dy is non-NULL, backward from dy
 * (gradients enabled) [RCP-REPLAY]. On any error (including an injected one) every
 * quantizer, the RNG state and the scoping state are left as before the call
 * [SCOPE-FAIL-ATOMIC] and *res holds nothing. */
qs_status qs_program_run(qs_ctx *ctx, qs_program *p, const qs_tensor *x, const qs_tensor *dy,
                         qs_program_result *res);
/* Frees what a run put in res; accepts NULL and freed results. */
void qs_program_result_free(qs_program_result *res);

#ifdef __cplusplus
}
#endif
#endif
