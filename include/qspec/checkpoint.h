/* checkpoint.h: recompute replay of spec/recompute.md — the trace of effective precision
 * decisions (one record per op execution: forward, recompute, backward), its JSON-lines
 * form, the replay audit over a trace, and the named replay behaviours (the specified one
 * and the upstream defects a conformance case can ask the engine to reproduce). */
#ifndef QSPEC_CHECKPOINT_H
#define QSPEC_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "scope.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The phase of an op execution [RCP-TRACE]. */
typedef enum qs_trace_phase {
    QS_PHASE_FORWARD = 0,
    QS_PHASE_RECOMPUTE, /* a checkpoint replay during backward [RCP-REPLAY] */
    QS_PHASE_BACKWARD,
    QS_PHASE_COUNT
} qs_trace_phase;

/* Where the scales of a quantized execution came from [RCP-TRACE]. */
typedef enum qs_trace_scales {
    QS_SCALES_NONE = 0, /* not quantized */
    QS_SCALES_FRESH,    /* the quantizer's current state, or computed from the data */
    QS_SCALES_RECORDED, /* delayed scaling during a replay: the checkpoint's record */
    QS_SCALES_COUNT
} qs_trace_scales;

#define QS_TRACE_NAME_LEN 32

/* One op execution [RCP-TRACE]. scale_bits holds the FP32 bits of the delayed-scaling
 * scales used (forward and recompute: x then w; backward: dy); nscale 0 otherwise. */
typedef struct qs_trace_record {
    int64_t seq;
    qs_trace_phase phase;
    char op[QS_TRACE_NAME_LEN];   /* the op's name in the program */
    char kind[QS_TRACE_NAME_LEN]; /* "linear" or "gdn" */
    qs_precision precision;
    int has_recipe;
    qs_recipe_kind recipe;
    qs_trace_scales scales;
    int nscale;
    uint32_t scale_bits[2];
    int first_module; /* this execution consumed the first-module flag [SCOPE-FIRST-MODULE] */
    qs_dtype dtype;   /* the activation dtype the op ran in */
} qs_trace_record;

typedef struct qs_trace {
    qs_trace_record *rec;
    size_t n, cap;
} qs_trace;

/* Appends a copy of r, numbering it (r->seq ignored); QS_ERR_NOMEM. */
qs_status qs_trace_append(qs_ctx *ctx, qs_trace *t, const qs_trace_record *r);
/* Frees a trace's records; accepts NULL and freed traces. */
void qs_trace_free(qs_trace *t);
/* "forward", "recompute", "backward"; "none", "fresh", "recorded"; NULL for others. */
const char *qs_trace_phase_name(qs_trace_phase p);
const char *qs_trace_scales_name(qs_trace_scales s);
/* Renders the trace as JSON lines (spec/recompute.md [RCP-TRACE-JSONL]) into a NUL-terminated
 * string allocated here (free it with free()); *len gets its length (may be NULL). */
qs_status qs_trace_to_jsonl(qs_ctx *ctx, const qs_trace *t, char **out, size_t *len);

/* The replay audit [RCP-AUDIT]: every recompute record must repeat the decision of the most
 * recent forward record of the same op (precision, recipe, and for delayed scaling the
 * recorded scale bits). QS_ERR_STATE naming the op, the sequence number and the field. */
qs_status qs_trace_audit(qs_ctx *ctx, const qs_trace *t);

/* How the engine replays a checkpoint [RCP-REPLAY]. The variants reproduce upstream
 * defects so that the audit can be shown to catch them. */
typedef enum qs_replay_variant {
    QS_REPLAY_SPEC = 0,         /* the recorded scope, recorded scales, no state change */
    QS_REPLAY_OUTSIDE_AUTOCAST, /* replays under the scope current at backward time */
    QS_REPLAY_EXTRA_UPDATE,     /* also runs a forward delayed-scaling update on exit */
    QS_REPLAY_COUNT
} qs_replay_variant;

#ifdef __cplusplus
}
#endif
#endif
