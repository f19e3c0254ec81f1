/* checkpoint_internal.h: the checkpoint record of spec/recompute.md shared by
 * ref/checkpoint.c and the engine (ref/engine.c): the scoping snapshot, the delayed-scaling
 * state of each quantizer as before the region, the RNG state and the region input
 * [RCP-RECORD]. Not part of the public API. */
#ifndef QSPEC_REF_CHECKPOINT_INTERNAL_H
#define QSPEC_REF_CHECKPOINT_INTERNAL_H

#include "qspec/checkpoint.h"
#include "qspec/recipe.h"
#include "qspec/scope.h"
#include "qspec/tensor.h"

/* The delayed-scaling state of one quantizer as it was before the region. */
typedef struct qsi_ds_saved {
    const qs_quantizer *q; /* identity only */
    float scale, scale_inv;
    int64_t len;
    float *history;
} qsi_ds_saved;

typedef struct qsi_ckpt {
    int node;
    qs_scope_state scope;          /* the snapshot, island included */
    uint64_t rng_seed, rng_offset; /* the RNG state at region entry */
    qs_tensor input;               /* the region input (a copy) */
    uint64_t out_digest;           /* digest of the discarded forward output */
    qsi_ds_saved *ds;
    int nds, capds;
    /* [DIST-REPLAY]: the reduced tensor amaxes of the region's quantizations under a group,
     * in the order they ran; a replay reads them back instead of reducing */
    float *amax;
    int namax, capamax;
} qsi_ckpt;

/* Records q's state unless already recorded (called before q is first used in the
 * region); a non-delayed quantizer is stateless and not recorded. */
qs_status qsi_ckpt_save_ds(qs_ctx *ctx, qsi_ckpt *ck, const qs_quantizer *q);
/* The recorded state of q, NULL if q was not recorded. */
const qsi_ds_saved *qsi_ckpt_find_ds(const qsi_ckpt *ck, const qs_quantizer *q);
/* Appends n reduced amaxes to the record [DIST-REPLAY]. */
qs_status qsi_ckpt_save_amax(qs_ctx *ctx, qsi_ckpt *ck, int n, const float *amax);
/* Frees a record (and ck itself); NULL is accepted. */
void qsi_ckpt_free(qsi_ckpt *ck);
/* 64-bit FNV-1a over a tensor's dtype, shape and bytes. */
uint64_t qsi_tensor_digest(const qs_tensor *t);

#endif
