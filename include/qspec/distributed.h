/* distributed.h: the distributed semantics of spec/distributed.md — N simulated ranks in
 * one process, each with its own context, groups that partition them, the exact amax
 * all-reduce, and the recipes on per-rank shards: current scaling and NVFP4 reduce their
 * tensor amaxes before the scale, delayed scaling reduces the current history slot at the
 * update, block scales stay local, and a replay reduces nothing. Every per-rank argument is
 * an array indexed by rank. */
#ifndef QSPEC_DISTRIBUTED_H
#define QSPEC_DISTRIBUTED_H

#include <stdint.h>

#include "linear.h"
#include "recipe.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most ranks and groups a simulated world holds. */
#define QS_DIST_MAX_RANKS  64
#define QS_DIST_MAX_GROUPS 16

/* A group [DIST-GROUP]: an autocast group id and a partition of the ranks into subgroups
 * (ranks of equal color reduce together). reductions counts the all-reduce calls run on
 * it [DIST-COUNT]. */
typedef struct qs_dist_group {
    int id;
    int nranks;
    int color[QS_DIST_MAX_RANKS];
    int64_t reductions;
} qs_dist_group;

/* N simulated ranks [DIST-RANKS]: one context per rank (owned) and the groups defined. */
typedef struct qs_dist_world {
    int nranks;
    qs_ctx *rank[QS_DIST_MAX_RANKS];
    int ngroups;
    qs_dist_group group[QS_DIST_MAX_GROUPS];
} qs_dist_world;

/* Creates nranks (1..QS_DIST_MAX_RANKS) fresh contexts; QS_ERR_INVALID_ARG or QS_ERR_NOMEM. */
qs_status qs_dist_world_init(qs_ctx *ctx, qs_dist_world *w, int nranks);
/* Frees the rank contexts; accepts NULL and freed worlds. */
void qs_dist_world_free(qs_dist_world *w);
/* Defines group id (>= 1, not yet defined) with one color per rank (NULL: the world group,
 * one subgroup of every rank) [DIST-GROUP]; QS_ERR_INVALID_ARG otherwise. */
qs_status qs_dist_world_add_group(qs_ctx *ctx, qs_dist_world *w, int id, const int *color);
/* The group with this id, NULL for id 0 or an id not defined. */
qs_dist_group *qs_dist_world_group(qs_dist_world *w, int id);

/* The reduction's binary operation [DIST-REDUCE-MAX]: of two amaxes, the one whose bit
 * pattern is the larger unsigned integer (so a NaN wins, then +Inf, then the larger). */
float qs_dist_amax_max(float a, float b);
/* The all-reduce [DIST-REDUCE-MAX] [DIST-REDUCE-NAN] [DIST-REDUCE-ORDER]: vals[r] points to
 * rank r's n >= 1 amaxes; afterwards every rank holds, element by element, the maximum over
 * its subgroup. A negative value (-0 included) that is not a NaN is QS_ERR_INVALID_ARG
 * naming the rank and index, and nothing changes. Counts one reduction on g. */
qs_status qs_dist_allreduce_amax(qs_ctx *ctx, qs_dist_group *g, int64_t n, float *const *vals);

/* Enters (exits) the same autocast region on every rank's context [DIST-SPMD]; tokens has
 * one entry per rank. On an error no rank's state changes. */
qs_status qs_dist_autocast_enter(qs_ctx *ctx, qs_dist_world *w, const qs_autocast_params *params,
                                 qs_scope_token *tokens);
qs_status qs_dist_autocast_exit(qs_ctx *ctx, qs_dist_world *w, const qs_scope_token *tokens);
/* The group in effect on every rank [DIST-NESTED]: *g = NULL for group 0. QS_ERR_STATE when
 * the ranks' states name different groups [DIST-SPMD], QS_ERR_INVALID_ARG for an id the
 * world does not define [DIST-GROUP]. */
qs_status qs_dist_current_group(qs_ctx *ctx, qs_dist_world *w, qs_dist_group **g);

/* Splits the rows of a 2-D tensor into nranks contiguous blocks in rank order (rows[r] rows
 * each, or, with rows NULL, as even as possible: the first M mod nranks blocks get one row
 * more). parts[r] are new tensors; QS_ERR_SHAPE when a block would be empty. */
qs_status qs_dist_split_rows(qs_ctx *ctx, const qs_tensor *t, int nranks, const int64_t *rows,
                             qs_tensor *parts);

/* What one rank keeps of one tensor quantization, for the replay [DIST-REPLAY]: the
 * recipe, the group reduced over (0: none), the (reduced) amax of each copy and the
 * tensorwise encode scale (0 for block recipes). */
typedef struct qs_dist_record {
    qs_recipe_kind kind;
    int group;
    float amax[QS_DIR_COUNT];
    float scale;
} qs_dist_record;

/* Quantizes rank r's tensor x[r] into out[r] (every rank, under cfg) with the group in
 * effect: current scaling reduces the amax first [DIST-CS-AMAX]; MXFP8 and block FP8 are
 * local [DIST-BLOCK-LOCAL]; NVFP4 reduces its two tensor amaxes [DIST-NV-AMAX]. rec (may be
 * NULL) gets one record per rank. Delayed scaling is QS_ERR_INVALID_ARG (quantize with each
 * rank's quantizer; the reduction is at qs_dist_delayed_update). NVFP4 encodes each shard
 * with the reduced amaxes; its stochastic-rounding index is shard-local [DIST-NV-SR]. On
 * error no out[] is left allocated. */
qs_status qs_dist_quantize(qs_ctx *ctx, qs_dist_world *w, const qs_recipe_config *cfg,
                           const qs_tensor *const *x, qs_quantized *out, qs_dist_record *rec);
/* One rank's replay of a recorded quantization [DIST-REPLAY]: the recorded amax and scale,
 * no reduction (no group is involved). The record must match cfg's kind. */
qs_status qs_dist_quantize_replay(qs_ctx *ctx, const qs_recipe_config *cfg,
                                  const qs_dist_record *rec, const qs_tensor *x, qs_quantized *out);

/* The NVFP4 tensor amaxes of every rank's x[r] under cfg, reduced over the group in effect
 * as one vector [DIST-NV-AMAX]: amax[2r] rowwise, amax[2r+1] columnwise (after the Hadamard
 * transform when cfg->rht; 0 for a copy cfg does not produce). */
qs_status qs_dist_nvfp4_amax(qs_ctx *ctx, qs_dist_world *w, const qs_recipe_config *cfg,
                             const qs_tensor *const *x, float *amax);

/* The delayed-scaling update of one key on every rank [DIST-DS-KEY] [DIST-DS-UPDATE]:
 * q[r * ntensors + t] is rank r's quantizer of tensor t. The vector of history[0] is
 * reduced over group (an id of w; 0: no reduction), written back, then qs_delayed_update
 * runs on every quantizer. Quantizer t must have the same configuration on every rank.
 * On error nothing changes. */
qs_status qs_dist_delayed_update(qs_ctx *ctx, qs_dist_world *w, int group, int ntensors,
                                 qs_quantizer *const *q);

/* How a linear is sharded [DIST-LINEAR-SP] [DIST-LINEAR-TP]. */
typedef enum qs_dist_parallel {
    QS_DIST_SEQUENCE = 0, /* x rows sharded, w replicated: y[r] = rows of Y */
    QS_DIST_TENSOR,       /* w rows sharded, x replicated: y[r] = columns of Y */
    QS_DIST_PARALLEL_COUNT
} qs_dist_parallel;

/* What one rank keeps of a linear forward for its replay [DIST-REPLAY]. */
typedef struct qs_dist_linear_record {
    qs_dist_record x, w;
} qs_dist_linear_record;

/* The sharded quantized forward: on every rank r, qs_linear_forward of x[r] and wt[r] with
 * qx[r], qw[r] into y[r], xq[r], wq[r], the quantizations reduced over the group in effect
 * (current scaling: the x and w amaxes, one reduction each; delayed: the ranks' own states;
 * block recipes: local; NVFP4: the x and w tensor amaxes, one reduction each). The
 * replicated operand must be
 * bitwise the same on every rank.
 * rec (may be NULL) gets one record per rank. On error nothing is left allocated and every
 * quantizer state is as before. */
qs_status qs_dist_linear_forward(qs_ctx *ctx, qs_dist_world *w, qs_dist_parallel mode,
                                 const qs_linear_options *opt, qs_quantizer *const *qx,
                                 qs_quantizer *const *qw, const qs_tensor *const *x,
                                 const qs_tensor *const *wt, qs_tensor *y, qs_quantized *xq,
                                 qs_quantized *wq, qs_dist_linear_record *rec);
/* One rank's replay of its linear forward [DIST-REPLAY]: tensorwise recipes encode with the
 * recorded scales (no reduction, no history touched), block recipes recompute locally. */
qs_status qs_dist_linear_replay(qs_ctx *ctx, const qs_linear_options *opt, const qs_quantizer *qx,
                                const qs_quantizer *qw, const qs_dist_linear_record *rec,
                                const qs_tensor *x, const qs_tensor *wt, qs_tensor *y,
                                qs_quantized *xq, qs_quantized *wq);

/* ------------------------------------------------------------ ranks as contexts
 * [DIST-HOOK]: the program engine (include/qspec/program.h) runs one rank per context and
 * reduces through the context's all-reduce, so that any program runs on N ranks. */

/* The all-reduce a context calls [DIST-REDUCE-MAX]: amax[0..n) of this rank, replaced by
 * the maximum over the ranks of its subgroup of group (an id >= 1). An error (a rank that
 * left, ranks that disagree on group or n) fails the calling rank's operation. */
typedef qs_status (*qs_dist_allreduce_fn)(void *user, qs_ctx *ctx, int group, int64_t n,
                                          float *amax);
/* Sets (fn NULL: clears) the all-reduce of ctx. A context without one is a world of one
 * rank: every reduction returns its own values. */
qs_status qs_ctx_set_allreduce(qs_ctx *ctx, qs_dist_allreduce_fn fn, void *user);
/* The reduction of a quantization or update on ctx [DIST-HOOK]: group 0 reduces nothing
 * and counts nothing; otherwise the values are checked ([DIST-REDUCE-MAX]: QS_ERR_INVALID_ARG
 * for a negative non-NaN), reduced through ctx's all-reduce and counted on the group. */
qs_status qs_dist_reduce(qs_ctx *ctx, int group, int64_t n, float *amax);
/* The reductions ctx has counted on group (0: on every group) [DIST-COUNT]. */
int64_t qs_dist_reductions(const qs_ctx *ctx, int group);
/* The tensor amaxes the recipe of cfg measures on x [DIST-CS-AMAX] [DIST-NV-AMAX]: current
 * scaling's amax in both entries; NVFP4's rowwise and columnwise (post-Hadamard) amaxes.
 * QS_ERR_INVALID_ARG for any other recipe. */
qs_status qs_dist_tensor_amax(qs_ctx *ctx, const qs_recipe_config *cfg, const qs_tensor *x,
                              float amax[QS_DIR_COUNT]);

/* What a rank runs in qs_dist_world_run: its own context and index. */
typedef qs_status (*qs_dist_rank_fn)(qs_ctx *rank_ctx, int rank, void *user);
/* Runs fn on every rank of w at once, one thread per rank [DIST-RANKS], each rank's context
 * reducing through the world's groups ([DIST-GROUP]; a group id the world does not define
 * is QS_ERR_INVALID_ARG on the ranks that name it). A reduction that cannot complete — a
 * rank has returned, or every rank still running waits on a reduction the others are not
 * in ([DIST-SPMD]) — fails with QS_ERR_STATE on each rank waiting. status[r] (may be NULL)
 * gets rank r's result; the call returns QS_OK when every rank returned QS_OK, else the
 * lowest failing rank's status with its message ("rank R: ..."). Afterwards the rank
 * contexts' all-reduce is cleared. */
qs_status qs_dist_world_run(qs_ctx *ctx, qs_dist_world *w, qs_dist_rank_fn fn, void *user,
                            qs_status *status);

#ifdef __cplusplus
}
#endif
#endif
