/* scope.h: precision scoping of spec/scoping.md — the autocast state a qs_ctx carries,
 * matched enter/exit with tokens, the callback form that restores on every exit path,
 * high-precision islands, the module policy decision, the context's RNG state, and the
 * fault-injection test hook. Two contexts never interact [SCOPE-STATE]. */
#ifndef QSPEC_SCOPE_H
#define QSPEC_SCOPE_H

#include <stdint.h>

#include "recipe.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tensors of a linear a recipe configures [SCOPE-RECIPE]. */
typedef enum qs_scope_role {
    QS_SCOPE_X = 0, /* input activation (forward) */
    QS_SCOPE_W,     /* weight (forward) */
    QS_SCOPE_DY,    /* output gradient (backward) */
    QS_SCOPE_ROLE_COUNT
} qs_scope_role;

/* A recipe as a region carries it: one kind and a full configuration per role. */
typedef struct qs_scope_recipe {
    qs_recipe_kind kind;
    qs_recipe_config cfg[QS_SCOPE_ROLE_COUNT];
} qs_scope_recipe;

/* Fills r with the defaults of spec/recipes.md for kind (roles input, weight, grad_output);
 * QS_ERR_INVALID_ARG for a bad kind. */
qs_status qs_scope_recipe_default(qs_ctx *ctx, qs_scope_recipe *r, qs_recipe_kind kind);
/* A 64-bit FNV-1a digest of every field of r, field by field (padding never read)
 * [SCOPE-ISLAND-NOMUTATE]. */
uint64_t qs_scope_recipe_digest(const qs_scope_recipe *r);

/* The scoping state of a context [SCOPE-STATE]. The zero state is "outside any region". */
typedef struct qs_scope_state {
    int enabled;            /* quantized execution */
    int calibrating;        /* amax recording without quantization */
    int has_recipe;         /* recipe is meaningful */
    qs_scope_recipe recipe; /* the effective recipe */
    int group;              /* amax reduction group id (0: none) */
    int first_module;       /* the next quantized module is the region's first */
    int depth;              /* number of regions entered */
    int recompute_phase;    /* inside a checkpoint replay */
    int island;             /* inside a high-precision island */
    qs_dtype island_dtype;  /* the island's input dtype (BF16 or FP16) */
} qs_scope_state;

/* What an autocast (or calibrate) region sets [SCOPE-ENTER]. recipe is copied; it must be
 * non-NULL when enabled or calibrating. */
typedef struct qs_autocast_params {
    int enabled;
    int calibrating;
    const qs_scope_recipe *recipe;
    int group;
} qs_autocast_params;

/* The token of one entered region [SCOPE-TOKEN]; 0 is never a valid token. */
typedef struct qs_scope_token {
    uint64_t id;
} qs_scope_token;

/* The most regions a context nests at once. */
#define QS_SCOPE_MAX_DEPTH 32

/* Copies the current state to *out. */
qs_status qs_scope_get(qs_ctx *ctx, qs_scope_state *out);
/* Whether two states are equal field by field (recipes compared by digest). */
int qs_scope_state_equal(const qs_scope_state *a, const qs_scope_state *b);

/* Enters an autocast region [SCOPE-ENTER]: snapshots the whole state and sets every field
 * (inner overrides outer; first_module set only at depth 0). On error nothing changes. */
qs_status qs_autocast_enter(qs_ctx *ctx, const qs_autocast_params *params, qs_scope_token *token);
/* Enters a high-precision island [SCOPE-ISLAND]: quantization and calibration off, island on,
 * island_dtype = input_dtype (BF16 or FP16, else QS_ERR_DTYPE); recipe and group unchanged. */
qs_status qs_island_enter(qs_ctx *ctx, qs_dtype input_dtype, qs_scope_token *token);
/* Exits the innermost region [SCOPE-EXIT] [SCOPE-TOKEN]: restores its snapshot exactly
 * (first_module excepted, [SCOPE-FIRST-MODULE]). A token that is not the innermost one, or
 * was already exited, gives QS_ERR_STATE naming it and changes nothing. */
qs_status qs_autocast_exit(qs_ctx *ctx, qs_scope_token token);

/* A region body for the callback forms; returns a status. */
typedef qs_status (*qs_scope_fn)(qs_ctx *ctx, void *arg);
/* Runs fn(ctx, arg) inside an autocast region and restores the enclosing state on every
 * exit path, including an error returned by fn or regions fn left open [SCOPE-RESTORE-ERR].
 * Returns fn's status (or the enter error, or QS_ERR_STATE for regions left open). */
qs_status qs_autocast_run(qs_ctx *ctx, const qs_autocast_params *params, qs_scope_fn fn, void *arg);
/* The same for an island [SCOPE-ISLAND] [SCOPE-RESTORE-ERR]. */
qs_status qs_island_run(qs_ctx *ctx, qs_dtype input_dtype, qs_scope_fn fn, void *arg);

/* How a module can run [SCOPE-POLICY-QUANT] [SCOPE-ISLAND-REJECT]. */
typedef enum qs_module_class {
    QS_MODULE_QUANTIZABLE = 0, /* a linear: quantized, calibrating or high precision */
    QS_MODULE_INPUT_PRECISION, /* GDN: never quantized; needs an island inside a region */
    QS_MODULE_CLASS_COUNT
} qs_module_class;

/* The effective precision of one module execution. */
typedef enum qs_precision {
    QS_PREC_QUANTIZED = 0, /* [SCOPE-POLICY-QUANT] */
    QS_PREC_CALIBRATING,   /* [SCOPE-POLICY-CALIB] */
    QS_PREC_HIGH,          /* [SCOPE-POLICY-HP] */
    QS_PREC_ISLAND,        /* [SCOPE-ISLAND]: input dtype, FP32 gate/state */
    QS_PREC_COUNT
} qs_precision;

/* "quantized", "calibrating", "high", "island"; NULL for another value. */
const char *qs_precision_name(qs_precision p);

/* The policy decision for a module of class cls named name under the current state.
 * QS_ERR_STATE when an input-precision module meets an enabled or calibrating region
 * outside an island [SCOPE-ISLAND-REJECT]. */
qs_status qs_scope_decide(qs_ctx *ctx, qs_module_class cls, const char *name, qs_precision *out);

/* Called by a module that runs quantized in forward [SCOPE-FIRST-MODULE]: returns 1 (and
 * clears the flag) when it is the first quantized module of the outermost region, 0
 * otherwise and always in the recompute phase. */
int qs_scope_take_first_module(qs_ctx *ctx);

/* The context's random state (Philox seed and offset) [SCOPE-RNG]. */
void qs_rng_set(qs_ctx *ctx, uint64_t seed, uint64_t offset);
void qs_rng_get(const qs_ctx *ctx, uint64_t *seed, uint64_t *offset);

/* Test hook [SCOPE-FAULT]: the n-th internal step (n >= 1) counted from this call fails with
 * QS_ERR_INJECTED; n = 0 disables injection and only counts. qs_fault_steps is the number of
 * steps counted since the last qs_fault_set. */
void qs_fault_set(qs_ctx *ctx, int64_t n);
int64_t qs_fault_steps(const qs_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
