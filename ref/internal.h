/* internal.h: definitions shared by the reference modules and the kit, not part of the
 * public API. Internal names carry the qsi_ prefix. */
#ifndef QSPEC_REF_INTERNAL_H
#define QSPEC_REF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "qspec/backend.h"
#include "qspec/scope.h"
#include "qspec/status.h"

#define QSI_ERRMSG_LEN         512
#define QSI_MAX_COUNTED_GROUPS 16

/* x rounded to BF16 (RNE; a NaN becomes the quiet NaN 0x7FC00000), as an FP32 value: the
 * body of qs_round_bf16, inline for the engine's rounding points (every element of every
 * BF16 intermediate passes through one). */
static inline float qsi_round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        u = 0x7FC00000u;
    else
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* One entered region: its token and the state it replaced (ref/scope.c). */
typedef struct qsi_scope_frame {
    uint64_t token;
    qs_scope_state saved;
} qsi_scope_frame;

struct qs_ctx {
    qs_status last_status;
    char errmsg[QSI_ERRMSG_LEN];
    /* scoping (ref/scope.c): all zero in a new context [SCOPE-STATE] */
    qs_scope_state scope;
    qsi_scope_frame frames[QS_SCOPE_MAX_DEPTH];
    int nframes;
    uint64_t next_token;
    uint64_t rng_seed, rng_offset; /* [SCOPE-RNG] */
    int64_t fault_at, fault_steps; /* [SCOPE-FAULT] */
    /* distributed (ref/distributed.c): the amax all-reduce of a simulated rank, and the
     * reductions counted per group id [DIST-HOOK] [DIST-COUNT] */
    qs_status (*allreduce)(void *user, qs_ctx *ctx, int group, int64_t n, float *amax);
    void *allreduce_user;
    int ncounts;
    struct {
        int group;
        int64_t n;
    } counts[QSI_MAX_COUNTED_GROUPS];
    /* the kernel table (ref/kernels.c) [CASE-KERNEL-TABLE]: kern_set 0 means the
     * reference's table; otherwise kern is an installed backend's (a copy, slots past its
     * struct_size NULL) with kern_state handed to every slot */
    int kern_set;
    qs_backend kern;
    void *kern_state;
    qs_gemm_claim kern_claim; /* the weakest claim since the last reset */
    int kern_attn_tol;        /* an sdpa or gdn slot claimed a tolerance since then */
};

/* Counts one internal step; QS_ERR_INJECTED (message naming where) at the injected one. */
qs_status qsi_fault_step(qs_ctx *ctx, const char *where);
/* Enters a region whose state is st exactly (a checkpoint replay) [RCP-REPLAY]. */
qs_status qsi_scope_enter_state(qs_ctx *ctx, const qs_scope_state *st, qs_scope_token *token);
/* Pops the innermost region without fault steps; QS_ERR_STATE on a token mismatch. */
qs_status qsi_scope_pop(qs_ctx *ctx, qs_scope_token token);

#define QSI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
