/* program.h: programs for the reference engine (spec/recompute.md, ref/engine.c). A
 * program is a tree of autocast, calibrate, island and checkpoint regions over ops (linear;
 * gdn, which needs an island inside a region), run forward on one activation [rows, dim]
 * that flows through the ops in order, then backward from a given output gradient. The
 * engine is the reference's tape; checkpointed regions are replayed in backward. */
#ifndef QSPEC_PROGRAM_H
#define QSPEC_PROGRAM_H

#include <stdint.h>

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
/* A Gated DeltaNet op over the activation x [rows, dim] (one head, q = k = v = x, q/k
 * l2norm, dk = dv = dim): g and beta (rows FP32 values each, copied) are its gate
 * parameters; it runs in the activation dtype with an FP32 state [SCOPE-ISLAND]. */
qs_status qs_program_gdn(qs_ctx *ctx, qs_program *p, int parent, const char *name, int64_t rows,
                         const float *g, const float *beta, int *id);

/* How replays run (default QS_REPLAY_SPEC) [RCP-AUDIT]. */
qs_status qs_program_set_replay(qs_ctx *ctx, qs_program *p, qs_replay_variant v);

/* The number of ops, in build order (op index i is the i-th op added). */
int qs_program_op_count(const qs_program *p);
/* The quantizer of op index op for recipe kind and role, NULL if not created (or not a
 * linear). */
const qs_quantizer *qs_program_quantizer(const qs_program *p, int op, qs_recipe_kind kind,
                                         qs_scope_role role);

/* What a run produces. grads[i] is op i's parameter gradient: a linear's dW [N, K] BF16,
 * a gdn's [2, rows] FP32 (dg, then dbeta). replay_* hold, per replayed checkpoint in
 * backward order, the digest of the discarded forward output and of the replayed one. */
typedef struct qs_program_result {
    qs_tensor y;  /* forward output */
    qs_tensor dx; /* gradient of the program input (backward only) */
    int nops;
    qs_tensor *grads;
    qs_trace trace;
    int nreplays;
    uint64_t replay_fwd_digest[16];
    uint64_t replay_digest[16];
} qs_program_result;

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
