/* distributed.c: the distributed semantics of spec/distributed.md, on N simulated ranks in
 * one process. The reduction is the unsigned maximum of amax bit patterns, combined in
 * ascending rank order within each subgroup [DIST-REDUCE-MAX]; the recipes call it where
 * the spec says — current scaling and NVFP4 before the scale, delayed scaling at the update
 * — and never in a replay. Invariant: every public function either succeeds or leaves the
 * rank states, quantizer states and reduction counters as they were. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "recipe_internal.h"
#include "qspec/distributed.h"

/* ------------------------------------------------------------ errors */

/* Prefixes the message ctx holds with the rank it concerns. */
static qs_status rank_error(qs_ctx *ctx, qs_status s, int r)
{
    char msg[QSI_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", qs_ctx_errmsg(ctx));
    return qs_ctx_error(ctx, s, "rank %d: %s", r, msg);
}

/* Copies the message of a rank's own context into ctx. */
static qs_status rank_ctx_error(qs_ctx *ctx, qs_status s, const qs_dist_world *w, int r)
{
    return qs_ctx_error(ctx, s, "rank %d: %s", r, qs_ctx_errmsg(w->rank[r]));
}

static qs_status check_world(qs_ctx *ctx, const qs_dist_world *w, const char *fn)
{
    if (!w || w->nranks < 1 || w->nranks > QS_DIST_MAX_RANKS)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: w is not an initialized world", fn);
    return QS_OK;
}

/* ------------------------------------------------------------ the world [DIST-RANKS] */

qs_status qs_dist_world_init(qs_ctx *ctx, qs_dist_world *w, int nranks)
{
    if (!w)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_world_init: w is NULL");
    memset(w, 0, sizeof *w); /* a failed init leaves a freed world */
    if (nranks < 1 || nranks > QS_DIST_MAX_RANKS)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_world_init: nranks %d (must be 1..%d) [DIST-RANKS]", nranks,
                            QS_DIST_MAX_RANKS);
    for (int r = 0; r < nranks; r++) {
        w->rank[r] = qs_ctx_new();
        if (!w->rank[r]) {
            qs_dist_world_free(w);
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "dist_world_init: out of memory");
        }
        w->nranks = r + 1;
    }
    return QS_OK;
}

void qs_dist_world_free(qs_dist_world *w)
{
    if (!w)
        return;
    for (int r = 0; r < QS_DIST_MAX_RANKS; r++)
        qs_ctx_free(w->rank[r]);
    memset(w, 0, sizeof *w);
}

qs_dist_group *qs_dist_world_group(qs_dist_world *w, int id)
{
    if (!w || id == 0)
        return NULL;
    for (int i = 0; i < w->ngroups; i++)
        if (w->group[i].id == id)
            return &w->group[i];
    return NULL;
}

qs_status qs_dist_world_add_group(qs_ctx *ctx, qs_dist_world *w, int id, const int *color)
{
    qs_status s = check_world(ctx, w, "dist_world_add_group");
    if (s != QS_OK)
        return s;
    if (id < 1)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_world_add_group: group id %d (must be >= 1; 0 means none) "
                            "[DIST-GROUP]",
                            id);
    if (qs_dist_world_group(w, id))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_world_add_group: group %d exists", id);
    if (w->ngroups >= QS_DIST_MAX_GROUPS)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_world_add_group: more than %d groups",
                            QS_DIST_MAX_GROUPS);
    qs_dist_group *g = &w->group[w->ngroups++];
    memset(g, 0, sizeof *g);
    g->id = id;
    g->nranks = w->nranks;
    for (int r = 0; r < w->nranks; r++)
        g->color[r] = color ? color[r] : 0;
    return QS_OK;
}

/* ------------------------------------------------------------ the reduction */

/* [DIST-REDUCE-MAX]: the larger bit pattern as an unsigned integer. */
float qs_dist_amax_max(float a, float b)
{
    return qs_f32_bits(b) > qs_f32_bits(a) ? b : a;
}

/* An amax is +0, positive, +Inf or a NaN of either sign [DIST-REDUCE-MAX]. */
static int is_amax(float v)
{
    return v != v || (qs_f32_bits(v) >> 31) == 0;
}

static qs_status check_group(qs_ctx *ctx, const qs_dist_group *g, const char *fn)
{
    if (!g || g->nranks < 1 || g->nranks > QS_DIST_MAX_RANKS)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: g is not a group", fn);
    return QS_OK;
}

static qs_status check_amaxes(qs_ctx *ctx, const qs_dist_group *g, int64_t n, float *const *vals)
{
    if (n < 1 || !vals)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_allreduce_amax: n %lld (must be >= 1) or vals NULL",
                            (long long)n);
    for (int r = 0; r < g->nranks; r++) {
        if (!vals[r])
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_allreduce_amax: vals[%d] is NULL",
                                r);
        for (int64_t i = 0; i < n; i++)
            if (!is_amax(vals[r][i]))
                return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                    "dist_allreduce_amax: rank %d value %lld is %g (0x%08X), not "
                                    "an amax (negative) [DIST-REDUCE-MAX]",
                                    r, (long long)i, (double)vals[r][i],
                                    (unsigned)qs_f32_bits(vals[r][i]));
    }
    return QS_OK;
}

/* [DIST-REDUCE-MAX] [DIST-REDUCE-ORDER]: for each subgroup (found at its lowest rank), the
 * maximum in ascending rank order from +0, then written to every rank of the subgroup. */
static void reduce_values(const qs_dist_group *g, int64_t n, float *const *vals)
{
    for (int r = 0; r < g->nranks; r++) {
        int first = 1;
        for (int p = 0; p < r; p++)
            if (g->color[p] == g->color[r])
                first = 0;
        if (!first)
            continue;
        for (int64_t i = 0; i < n; i++) {
            float v = 0.0f;
            for (int p = r; p < g->nranks; p++)
                if (g->color[p] == g->color[r])
                    v = qs_dist_amax_max(v, vals[p][i]);
            for (int p = r; p < g->nranks; p++)
                if (g->color[p] == g->color[r])
                    vals[p][i] = v;
        }
    }
}

qs_status qs_dist_allreduce_amax(qs_ctx *ctx, qs_dist_group *g, int64_t n, float *const *vals)
{
    qs_status s = check_group(ctx, g, "dist_allreduce_amax");
    if (s == QS_OK)
        s = check_amaxes(ctx, g, n, vals);
    if (s != QS_OK)
        return s;
    reduce_values(g, n, vals);
    g->reductions++; /* [DIST-COUNT] */
    return QS_OK;
}

/* ------------------------------------------------------------ regions [DIST-SPMD] */

qs_status qs_dist_autocast_enter(qs_ctx *ctx, qs_dist_world *w, const qs_autocast_params *params,
                                 qs_scope_token *tokens)
{
    qs_status s = check_world(ctx, w, "dist_autocast_enter");
    if (s != QS_OK)
        return s;
    if (!tokens)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_autocast_enter: tokens is NULL");
    for (int r = 0; r < w->nranks; r++) {
        s = qs_autocast_enter(w->rank[r], params, &tokens[r]);
        if (s != QS_OK) {
            qs_status e = rank_ctx_error(ctx, s, w, r);
            while (r-- > 0)
                qsi_scope_pop(w->rank[r], tokens[r]); /* the enter just made: cannot fail */
            return e;
        }
    }
    return QS_OK;
}

qs_status qs_dist_autocast_exit(qs_ctx *ctx, qs_dist_world *w, const qs_scope_token *tokens)
{
    qs_status s = check_world(ctx, w, "dist_autocast_exit");
    if (s != QS_OK)
        return s;
    if (!tokens)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_autocast_exit: tokens is NULL");
    for (int r = 0; r < w->nranks; r++) {
        qs_ctx *rc = w->rank[r];
        if (rc->nframes == 0 || rc->frames[rc->nframes - 1].token != tokens[r].id)
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "dist_autocast_exit: rank %d: token %llu is not its innermost "
                                "region [SCOPE-TOKEN]",
                                r, (unsigned long long)tokens[r].id);
    }
    for (int r = 0; r < w->nranks; r++) {
        s = qsi_fault_step(w->rank[r], "autocast_exit");
        if (s != QS_OK)
            return rank_ctx_error(ctx, s, w, r); /* no rank has exited yet */
    }
    for (int r = 0; r < w->nranks; r++)
        qsi_scope_pop(w->rank[r], tokens[r]);
    return QS_OK;
}

qs_status qs_dist_current_group(qs_ctx *ctx, qs_dist_world *w, qs_dist_group **g)
{
    qs_status s = check_world(ctx, w, "dist_current_group");
    if (s != QS_OK)
        return s;
    if (!g)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_current_group: g is NULL");
    int id = w->rank[0]->scope.group;
    for (int r = 1; r < w->nranks; r++)
        if (w->rank[r]->scope.group != id)
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "rank 0 is in group %d but rank %d in group %d: every rank must "
                                "take part in a reduction [DIST-SPMD]",
                                id, r, w->rank[r]->scope.group);
    *g = qs_dist_world_group(w, id);
    if (id != 0 && !*g)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "the region's group %d is not defined in this world [DIST-GROUP]", id);
    return QS_OK;
}

/* ------------------------------------------------------------ sharding */

qs_status qs_dist_split_rows(qs_ctx *ctx, const qs_tensor *t, int nranks, const int64_t *rows,
                             qs_tensor *parts)
{
    if (!t || !parts || t->ndim != 2 || !t->data)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "dist_split_rows: t must be a 2-D tensor");
    if (nranks < 1 || nranks > QS_DIST_MAX_RANKS)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_split_rows: nranks %d", nranks);
    int64_t M = t->shape[0], total = 0, n[QS_DIST_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        n[r] = rows ? rows[r] : M / nranks + (r < M % nranks ? 1 : 0);
        if (n[r] < 1)
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "dist_split_rows: rank %d would get %lld rows",
                                r, (long long)n[r]);
        total += n[r];
    }
    if (total != M)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "dist_split_rows: the blocks hold %lld rows, t %lld",
                            (long long)total, (long long)M);
    size_t row_bytes = qs_dtype_bytes(t->dtype, (size_t)t->shape[1]);
    const unsigned char *src = t->data;
    for (int r = 0; r < nranks; r++) {
        int64_t shape[2] = {n[r], t->shape[1]};
        qs_status s = qs_tensor_alloc(ctx, &parts[r], t->dtype, 2, shape);
        if (s != QS_OK) {
            while (r-- > 0)
                qs_tensor_free(&parts[r]);
            return s;
        }
        memcpy(parts[r].data, src, row_bytes * (size_t)n[r]);
        src += row_bytes * (size_t)n[r];
    }
    return QS_OK;
}

/* ------------------------------------------------------------ quantization helpers */

static int is_tensorwise(qs_recipe_kind k)
{
    return k == QS_RECIPE_DELAYED || k == QS_RECIPE_CURRENT;
}

/* The encode scale of a tensorwise quantization (the first copy produced). */
static float tensorwise_scale(const qs_quantized *qz)
{
    return qz->data[QS_DIR_ROW].data ? qz->global_enc[QS_DIR_ROW] : qz->global_enc[QS_DIR_COL];
}

static void make_record(qs_dist_record *rec, const qs_quantized *qz, const qs_dist_group *g)
{
    rec->kind = qz->cfg.kind;
    rec->group = g ? g->id : 0;
    for (int d = 0; d < QS_DIR_COUNT; d++)
        rec->amax[d] = qz->amax[d];
    rec->scale = is_tensorwise(qz->cfg.kind) ? tensorwise_scale(qz) : 0.0f;
}

/* A quantization done by one rank alone, as qs_quantize does it (stateless recipes). */
static qs_status quantize_local(qs_ctx *ctx, const qs_recipe_config *cfg, const qs_tensor *x,
                                qs_quantized *out)
{
    qs_quantizer q;
    qs_status s = qs_quantizer_init(ctx, &q, cfg);
    if (s == QS_OK)
        s = qs_quantize(ctx, &q, x, out);
    qs_quantizer_free(&q);
    return s;
}

/* The header of a quantization of in under cfg, as qs_quantize sets it. */
static void quantized_header(qs_quantized *out, const qs_recipe_config *cfg, const qsi_input *in)
{
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    out->elem = qs_recipe_elem_dtype(cfg);
    out->rows = in->m;
    out->cols = in->k;
}

/* [REC-TW-ELEM] [REC-TW-LAYOUT] with a given scale and amax: what current scaling does
 * once its scale is known; scale_inv = fl(1/scale). */
static qs_status encode_tensorwise(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in,
                                   float scale, float amax, qs_quantized *out)
{
    quantized_header(out, cfg, in);
    qs_status s = qsi_tensorwise_encode(ctx, in, scale, 1.0f / scale, amax, out);
    if (s != QS_OK)
        qs_quantized_free(out);
    return s;
}

static void free_inputs(qsi_input *in, int n)
{
    for (int r = 0; r < n; r++)
        qsi_input_free(&in[r]);
}

/* Loads every rank's tensor [REC-INPUT]; on error none stays loaded. */
static qs_status load_inputs(qs_ctx *ctx, int n, const qs_tensor *const *x, qsi_input *in)
{
    memset(in, 0, sizeof *in * (size_t)n);
    for (int r = 0; r < n; r++) {
        qs_status s = qsi_input_load(ctx, x[r], &in[r]);
        if (s != QS_OK) {
            free_inputs(in, r);
            return rank_error(ctx, s, r);
        }
    }
    return QS_OK;
}

/* Every rank's NVFP4 tensor amaxes [DIST-NV-AMAX] (rowwise over x, columnwise over x^T after
 * the Hadamard transform when rht, one amax for 2-D tiles, 0 for a copy cfg does not
 * produce), reduced over g (NULL: local) as one vector of 2, one counted reduction. */
static qs_status nvfp4_amaxes(qs_ctx *ctx, qs_dist_group *g, const qs_recipe_config *cfg, int n,
                              const qsi_input *in, float *local, float *reduced)
{
    float *p[QS_DIST_MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        qs_status s = qsi_nvfp4_amax(ctx, cfg, &in[r], &local[2 * r]);
        if (s != QS_OK)
            return rank_error(ctx, s, r);
        reduced[2 * r] = local[2 * r];
        reduced[2 * r + 1] = local[2 * r + 1];
        p[r] = &reduced[2 * r];
    }
    return g ? qs_dist_allreduce_amax(ctx, g, 2, p) : QS_OK;
}

/* [DIST-NV-AMAX] [DIST-NV-SR]: in quantized under cfg with the tensor amaxes given (the
 * reduced or recorded ones) in place of its own; the stochastic-rounding index is local. */
static qs_status encode_nvfp4(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in,
                              const float amax[QS_DIR_COUNT], qs_quantized *out)
{
    qs_quantizer q;
    quantized_header(out, cfg, in);
    qs_status s = qs_quantizer_init(ctx, &q, cfg);
    if (s == QS_OK)
        s = qsi_quantize_nvfp4_amax(ctx, &q, in, amax, out);
    qs_quantizer_free(&q);
    if (s != QS_OK)
        qs_quantized_free(out);
    return s;
}

/* ------------------------------------------------------------ qs_dist_quantize */

/* [DIST-CS-AMAX]: local amaxes, one reduction, the scale of the reduced amax on every rank,
 * local encoding. */
static qs_status quantize_current(qs_ctx *ctx, qs_dist_group *g, const qs_recipe_config *cfg, int n,
                                  const qsi_input *in, qs_quantized *out)
{
    float amax[QS_DIST_MAX_RANKS] = {0}, *p[QS_DIST_MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        amax[r] = qsi_amax(in[r].x, in[r].m * in[r].k, 1); /* [REC-CS-AMAX] */
        p[r] = &amax[r];
    }
    qs_status s = qs_dist_allreduce_amax(ctx, g, 1, p);
    if (s != QS_OK)
        return s;
    float fmax = qsi_elem_max(qs_recipe_elem_dtype(cfg));
    for (int r = 0; r < n; r++) {
        float scale = qs_scale_from_amax(amax[r], fmax, cfg->eps, cfg->pow2, FLT_MAX);
        s = encode_tensorwise(ctx, cfg, &in[r], scale, amax[r], &out[r]);
        if (s != QS_OK) {
            while (r-- > 0)
                qs_quantized_free(&out[r]);
            return s;
        }
    }
    return QS_OK;
}

/* Every rank alone, as single-rank qs_quantize [DIST-BLOCK-LOCAL]. */
static qs_status quantize_all_local(qs_ctx *ctx, const qs_recipe_config *cfg, int n,
                                    const qs_tensor *const *x, qs_quantized *out)
{
    for (int r = 0; r < n; r++) {
        qs_status s = quantize_local(ctx, cfg, x[r], &out[r]);
        if (s != QS_OK) {
            while (r-- > 0)
                qs_quantized_free(&out[r]);
            return rank_error(ctx, s, r);
        }
    }
    return QS_OK;
}

/* [DIST-NV-AMAX] [DIST-BLOCK-LOCAL]: the reduced tensor amaxes, local block scales. */
static qs_status quantize_nvfp4(qs_ctx *ctx, qs_dist_group *g, const qs_recipe_config *cfg, int n,
                                const qsi_input *in, qs_quantized *out)
{
    float local[2 * QS_DIST_MAX_RANKS], reduced[2 * QS_DIST_MAX_RANKS];
    qs_status s = nvfp4_amaxes(ctx, g, cfg, n, in, local, reduced); /* [DIST-COUNT] */
    for (int r = 0; r < n && s == QS_OK; r++) {
        if ((s = encode_nvfp4(ctx, cfg, &in[r], &reduced[2 * r], &out[r])) != QS_OK) {
            while (r-- > 0)
                qs_quantized_free(&out[r]);
            return rank_error(ctx, s, r);
        }
    }
    return s;
}

qs_status qs_dist_quantize(qs_ctx *ctx, qs_dist_world *w, const qs_recipe_config *cfg,
                           const qs_tensor *const *x, qs_quantized *out, qs_dist_record *rec)
{
    qs_status s = check_world(ctx, w, "dist_quantize");
    if (s != QS_OK)
        return s;
    if (!cfg || !x || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_quantize: NULL argument");
    if ((s = qs_recipe_config_check(ctx, cfg)) != QS_OK)
        return s;
    if (cfg->kind == QS_RECIPE_DELAYED)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_quantize: delayed scaling is stateful: quantize with each "
                            "rank's quantizer and reduce at qs_dist_delayed_update [DIST-DS-KEY]");
    qs_dist_group *g;
    if ((s = qs_dist_current_group(ctx, w, &g)) != QS_OK)
        return s;
    int n = w->nranks;
    qsi_input in[QS_DIST_MAX_RANKS];
    if ((s = load_inputs(ctx, n, x, in)) != QS_OK)
        return s;
    int64_t count0 = g ? g->reductions : 0;
    if (g && cfg->kind == QS_RECIPE_CURRENT)
        s = quantize_current(ctx, g, cfg, n, in, out);
    else if (g && cfg->kind == QS_RECIPE_NVFP4)
        s = quantize_nvfp4(ctx, g, cfg, n, in, out);
    else /* [DIST-BLOCK-LOCAL], or no group */
        s = quantize_all_local(ctx, cfg, n, x, out);
    free_inputs(in, n);
    if (s != QS_OK && g)
        g->reductions = count0;
    for (int r = 0; r < n && s == QS_OK && rec; r++)
        make_record(&rec[r], &out[r], g);
    return s;
}

qs_status qs_dist_quantize_replay(qs_ctx *ctx, const qs_recipe_config *cfg,
                                  const qs_dist_record *rec, const qs_tensor *x, qs_quantized *out)
{
    if (!cfg || !rec || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_quantize_replay: NULL argument");
    qs_status s = qs_recipe_config_check(ctx, cfg);
    if (s != QS_OK)
        return s;
    if (rec->kind != cfg->kind)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_quantize_replay: the record is of a %s quantization, cfg %s",
                            qs_recipe_kind_name(rec->kind), qs_recipe_kind_name(cfg->kind));
    if (!is_tensorwise(cfg->kind) && cfg->kind != QS_RECIPE_NVFP4)
        return quantize_local(ctx, cfg, x, out);
    /* [DIST-REPLAY]: the recorded amaxes (and scale); no reduction. */
    qsi_input in;
    if ((s = qsi_input_load(ctx, x, &in)) != QS_OK)
        return s;
    if (cfg->kind == QS_RECIPE_NVFP4)
        s = encode_nvfp4(ctx, cfg, &in, rec->amax, out);
    else
        s = encode_tensorwise(ctx, cfg, &in, rec->scale, rec->amax[QS_DIR_ROW], out);
    qsi_input_free(&in);
    return s;
}

qs_status qs_dist_nvfp4_amax(qs_ctx *ctx, qs_dist_world *w, const qs_recipe_config *cfg,
                             const qs_tensor *const *x, float *amax)
{
    qs_status s = check_world(ctx, w, "dist_nvfp4_amax");
    if (s != QS_OK)
        return s;
    if (!cfg || !x || !amax || cfg->kind != QS_RECIPE_NVFP4)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_nvfp4_amax: NULL or non-nvfp4 cfg");
    if ((s = qs_recipe_config_check(ctx, cfg)) != QS_OK)
        return s;
    qs_dist_group *g;
    if ((s = qs_dist_current_group(ctx, w, &g)) != QS_OK)
        return s;
    qsi_input in[QS_DIST_MAX_RANKS];
    if ((s = load_inputs(ctx, w->nranks, x, in)) != QS_OK)
        return s;
    float local[2 * QS_DIST_MAX_RANKS];
    s = nvfp4_amaxes(ctx, g, cfg, w->nranks, in, local, amax);
    free_inputs(in, w->nranks);
    return s;
}

/* ------------------------------------------------------------ delayed scaling */

/* The fields a delayed quantizer's update and format depend on. */
static int delayed_same_config(const qs_recipe_config *a, const qs_recipe_config *b)
{
    return a->kind == b->kind && a->role == b->role && a->format == b->format &&
           a->history_len == b->history_len && a->algo == b->algo && a->margin == b->margin &&
           a->roll == b->roll;
}

static qs_status check_delayed_key(qs_ctx *ctx, int n, int ntensors, qs_quantizer *const *q)
{
    if (ntensors < 1 || !q)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_delayed_update: ntensors %d (must be >= 1) or q NULL", ntensors);
    for (int r = 0; r < n; r++) {
        for (int t = 0; t < ntensors; t++) {
            const qs_quantizer *a = q[r * ntensors + t], *b = q[t];
            if (!a || a->cfg.kind != QS_RECIPE_DELAYED || !a->ds.history ||
                a->ds.len != a->cfg.history_len)
                return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                    "dist_delayed_update: rank %d tensor %d is not an "
                                    "initialized delayed quantizer",
                                    r, t);
            if (!delayed_same_config(&a->cfg, &b->cfg))
                return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                    "dist_delayed_update: rank %d tensor %d is configured "
                                    "differently from rank 0's [DIST-DS-KEY]",
                                    r, t);
        }
    }
    return QS_OK;
}

qs_status qs_dist_delayed_update(qs_ctx *ctx, qs_dist_world *w, int group, int ntensors,
                                 qs_quantizer *const *q)
{
    qs_status s = check_world(ctx, w, "dist_delayed_update");
    if (s != QS_OK)
        return s;
    int n = w->nranks;
    if ((s = check_delayed_key(ctx, n, ntensors, q)) != QS_OK)
        return s;
    qs_dist_group *g = qs_dist_world_group(w, group);
    if (group != 0 && !g)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_delayed_update: group %d is not defined [DIST-GROUP]", group);
    float *slot = malloc(sizeof *slot * (size_t)n * (size_t)ntensors);
    float *p[QS_DIST_MAX_RANKS] = {0};
    if (!slot)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "dist_delayed_update: out of memory");
    for (int r = 0; r < n; r++) {
        p[r] = slot + (size_t)r * (size_t)ntensors;
        for (int t = 0; t < ntensors; t++)
            p[r][t] = q[r * ntensors + t]->ds.history[0];
    }
    /* [DIST-DS-UPDATE]: one reduction of the key's current slots, before any roll. */
    if (g)
        s = qs_dist_allreduce_amax(ctx, g, ntensors, p);
    for (int r = 0; r < n && s == QS_OK; r++) {
        for (int t = 0; t < ntensors; t++) {
            q[r * ntensors + t]->ds.history[0] = p[r][t];
            qs_delayed_update(ctx, q[r * ntensors + t]); /* checked above: cannot fail */
        }
    }
    free(slot);
    return s;
}

/* ------------------------------------------------------------ sharded linears */

/* A delayed quantizer holding scale s encodes exactly as current scaling does once its scale
 * is s ([REC-TW-ELEM] is shared; only the origin of s differs). It is private, so the amax
 * it records reaches no live history [DIST-REPLAY]. */
static qs_status fixed_scale_quantizer(qs_ctx *ctx, const qs_recipe_config *cfg, float scale,
                                       qs_quantizer *q)
{
    qs_recipe_config c;
    qs_status s = qs_recipe_config_default(ctx, &c, QS_RECIPE_DELAYED, cfg->role);
    if (s != QS_OK)
        return s;
    c.format = cfg->format;
    c.rowwise = cfg->rowwise;
    c.columnwise = cfg->columnwise;
    c.history_len = 1;
    s = qs_quantizer_init(ctx, q, &c);
    if (s == QS_OK) {
        q->ds.scale = scale;
        q->ds.scale_inv = 1.0f / scale;
    }
    return s;
}

/* Gives a quantization made by a fixed-scale quantizer the configuration and amax of the
 * quantization it stands for. */
static void relabel(qs_quantized *qz, const qs_recipe_config *cfg, float amax)
{
    qz->cfg = *cfg;
    for (int d = 0; d < QS_DIR_COUNT; d++)
        if (qz->data[d].data)
            qz->amax[d] = amax;
}

/* qs_linear_forward of one rank with the tensorwise scales sx, sw (and the amaxes ax, aw
 * they came from) in place of the quantizers' own. */
static qs_status linear_fixed(qs_ctx *ctx, const qs_linear_options *opt, const qs_recipe_config *cx,
                              float sx, float ax, const qs_recipe_config *cw, float sw, float aw,
                              const qs_tensor *x, const qs_tensor *wt, qs_tensor *y,
                              qs_quantized *xq, qs_quantized *wq)
{
    qs_quantizer fx, fw;
    memset(&fw, 0, sizeof fw);
    qs_status s = fixed_scale_quantizer(ctx, cx, sx, &fx);
    if (s == QS_OK)
        s = fixed_scale_quantizer(ctx, cw, sw, &fw);
    if (s == QS_OK)
        s = qs_linear_forward(ctx, opt, &fx, &fw, x, wt, y, xq, wq);
    if (s == QS_OK) {
        relabel(xq, cx, ax);
        relabel(wq, cw, aw);
    }
    qs_quantizer_free(&fx);
    qs_quantizer_free(&fw);
    return s;
}

static int same_tensor(const qs_tensor *a, const qs_tensor *b)
{
    return a && b && qs_tensor_same_layout(a, b) && a->nbytes == b->nbytes &&
           (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* [DIST-LINEAR-SP] [DIST-LINEAR-TP]: the quantizers, the shapes, and the replicated operand
 * bitwise the same on every rank. */
static qs_status check_linear(qs_ctx *ctx, int n, qs_dist_parallel mode, qs_quantizer *const *qx,
                              qs_quantizer *const *qw, const qs_tensor *const *x,
                              const qs_tensor *const *wt)
{
    for (int r = 0; r < n; r++) {
        if (!qx[r] || !qw[r] || qx[r]->cfg.kind != qx[0]->cfg.kind ||
            qw[r]->cfg.kind != qx[0]->cfg.kind)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "dist_linear: rank %d's quantizers are missing or of another "
                                "recipe than rank 0's x",
                                r);
        if (!x[r] || !wt[r] || x[r]->ndim != 2 || wt[r]->ndim != 2 ||
            x[r]->shape[1] != wt[r]->shape[1] || x[r]->shape[1] != x[0]->shape[1])
            return qs_ctx_error(ctx, QS_ERR_SHAPE,
                                "dist_linear: rank %d: x and w must be 2-D with the same K as "
                                "rank 0's",
                                r);
        const qs_tensor *rep = mode == QS_DIST_SEQUENCE ? wt[r] : x[r];
        const qs_tensor *rep0 = mode == QS_DIST_SEQUENCE ? wt[0] : x[0];
        if (!same_tensor(rep, rep0))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "dist_linear: rank %d's %s differs from rank 0's; a %s-parallel "
                                "linear replicates it [%s]",
                                r, mode == QS_DIST_SEQUENCE ? "w" : "x",
                                mode == QS_DIST_SEQUENCE ? "sequence" : "tensor",
                                mode == QS_DIST_SEQUENCE ? "DIST-LINEAR-SP" : "DIST-LINEAR-TP");
    }
    return QS_OK;
}

/* [DIST-CS-AMAX] for a linear: the reduced amax of every rank's t[r], one reduction. */
static qs_status reduced_amax(qs_ctx *ctx, qs_dist_group *g, int n, const qs_tensor *const *t,
                              float *amax)
{
    float *p[QS_DIST_MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        qs_status s = qs_tensor_amax(ctx, t[r], &amax[r]);
        if (s != QS_OK)
            return rank_error(ctx, s, r);
        p[r] = &amax[r];
    }
    return qs_dist_allreduce_amax(ctx, g, 1, p);
}

/* [DIST-NV-AMAX] for a linear: every rank's NVFP4 tensor amaxes of t[r] under cfg, reduced
 * over g as one vector of 2 (one counted reduction) into amax[2r], amax[2r+1]. */
static qs_status nvfp4_reduced(qs_ctx *ctx, qs_dist_group *g, int n, const qs_recipe_config *cfg,
                               const qs_tensor *const *t, float *amax)
{
    float local[2 * QS_DIST_MAX_RANKS];
    qsi_input in[QS_DIST_MAX_RANKS];
    qs_status s = load_inputs(ctx, n, t, in);
    if (s != QS_OK)
        return s;
    s = nvfp4_amaxes(ctx, g, cfg, n, in, local, amax);
    free_inputs(in, n);
    return s;
}

/* A local copy of q that quantizes with the given tensor amaxes [DIST-GIVEN-AMAX]. */
static qs_quantizer with_amax(const qs_quantizer *q, const float *amax)
{
    qs_quantizer l = *q;
    l.amax_given = 1;
    l.given_amax[QS_DIR_ROW] = amax[0];
    l.given_amax[QS_DIR_COL] = amax[1];
    return l;
}

static void free_linear_outputs(int n, qs_tensor *y, qs_quantized *xq, qs_quantized *wq)
{
    for (int r = 0; r < n; r++) {
        qs_tensor_free(&y[r]);
        qs_quantized_free(&xq[r]);
        qs_quantized_free(&wq[r]);
    }
}

/* The ranks' forwards once the scales are settled: current scaling under a group with the
 * reduced amaxes ax, aw; NVFP4 under a group with the reduced pairs nx, nw; every other
 * case with the ranks' own quantizers. */
static qs_status linear_ranks(qs_ctx *ctx, int n, const qs_linear_options *opt, int reduced,
                              qs_quantizer *const *qx, qs_quantizer *const *qw,
                              const qs_tensor *const *x, const qs_tensor *const *wt,
                              const float *ax, const float *aw, const float *nx, const float *nw,
                              qs_tensor *y, qs_quantized *xq, qs_quantized *wq)
{
    for (int r = 0; r < n; r++) {
        qs_status s;
        if (reduced) {
            const qs_recipe_config *cx = &qx[r]->cfg, *cw = &qw[r]->cfg;
            float sx = qs_scale_from_amax(ax[r], qsi_elem_max(qs_recipe_elem_dtype(cx)), cx->eps,
                                          cx->pow2, FLT_MAX);
            float sw = qs_scale_from_amax(aw[r], qsi_elem_max(qs_recipe_elem_dtype(cw)), cw->eps,
                                          cw->pow2, FLT_MAX);
            s = linear_fixed(ctx, opt, cx, sx, ax[r], cw, sw, aw[r], x[r], wt[r], &y[r], &xq[r],
                             &wq[r]);
        } else if (nx) {
            qs_quantizer lx = with_amax(qx[r], &nx[2 * r]), lw = with_amax(qw[r], &nw[2 * r]);
            s = qs_linear_forward(ctx, opt, &lx, &lw, x[r], wt[r], &y[r], &xq[r], &wq[r]);
        } else {
            s = qs_linear_forward(ctx, opt, qx[r], qw[r], x[r], wt[r], &y[r], &xq[r], &wq[r]);
        }
        if (s != QS_OK) {
            free_linear_outputs(r, y, xq, wq);
            return rank_error(ctx, s, r);
        }
    }
    return QS_OK;
}

qs_status qs_dist_linear_forward(qs_ctx *ctx, qs_dist_world *w, qs_dist_parallel mode,
                                 const qs_linear_options *opt, qs_quantizer *const *qx,
                                 qs_quantizer *const *qw, const qs_tensor *const *x,
                                 const qs_tensor *const *wt, qs_tensor *y, qs_quantized *xq,
                                 qs_quantized *wq, qs_dist_linear_record *rec)
{
    qs_status s = check_world(ctx, w, "dist_linear_forward");
    if (s != QS_OK)
        return s;
    if (!opt || !qx || !qw || !x || !wt || !y || !xq || !wq ||
        (unsigned)mode >= QS_DIST_PARALLEL_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_linear_forward: bad argument");
    int n = w->nranks;
    if ((s = check_linear(ctx, n, mode, qx, qw, x, wt)) != QS_OK)
        return s;
    qs_dist_group *g;
    if ((s = qs_dist_current_group(ctx, w, &g)) != QS_OK)
        return s;
    qs_recipe_kind kind = qx[0]->cfg.kind;
    float ax[QS_DIST_MAX_RANKS] = {0}, aw[QS_DIST_MAX_RANKS] = {0};
    float slot[2 * QS_DIST_MAX_RANKS] = {0};
    float nx[2 * QS_DIST_MAX_RANKS] = {0}, nw[2 * QS_DIST_MAX_RANKS] = {0};
    int reduced = g && kind == QS_RECIPE_CURRENT, given = g && kind == QS_RECIPE_NVFP4;
    for (int r = 0; r < n && kind == QS_RECIPE_DELAYED; r++) { /* restored on error */
        slot[2 * r] = qx[r]->ds.history ? qx[r]->ds.history[0] : 0.0f;
        slot[2 * r + 1] = qw[r]->ds.history ? qw[r]->ds.history[0] : 0.0f;
    }
    int64_t count0 = g ? g->reductions : 0;
    if (reduced && (s = reduced_amax(ctx, g, n, x, ax)) == QS_OK) /* [DIST-CS-AMAX] */
        s = reduced_amax(ctx, g, n, wt, aw);
    if (s == QS_OK && given) /* [DIST-NV-AMAX]: one reduction each [DIST-COUNT] */
        s = nvfp4_reduced(ctx, g, n, &qx[0]->cfg, x, nx);
    if (s == QS_OK && given)
        s = nvfp4_reduced(ctx, g, n, &qw[0]->cfg, wt, nw);
    if (s == QS_OK)
        s = linear_ranks(ctx, n, opt, reduced, qx, qw, x, wt, ax, aw, given ? nx : NULL,
                         given ? nw : NULL, y, xq, wq);
    if (s != QS_OK) {
        if (g)
            g->reductions = count0;
        for (int r = 0; r < n && kind == QS_RECIPE_DELAYED; r++) {
            if (qx[r]->ds.history)
                qx[r]->ds.history[0] = slot[2 * r];
            if (qw[r]->ds.history)
                qw[r]->ds.history[0] = slot[2 * r + 1];
        }
        return s;
    }
    for (int r = 0; r < n && rec; r++) {
        make_record(&rec[r].x, &xq[r], g);
        make_record(&rec[r].w, &wq[r], g);
    }
    return QS_OK;
}

qs_status qs_dist_linear_replay(qs_ctx *ctx, const qs_linear_options *opt, const qs_quantizer *qx,
                                const qs_quantizer *qw, const qs_dist_linear_record *rec,
                                const qs_tensor *x, const qs_tensor *wt, qs_tensor *y,
                                qs_quantized *xq, qs_quantized *wq)
{
    if (!opt || !qx || !qw || !rec || !y || !xq || !wq)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_linear_replay: NULL argument");
    if (rec->x.kind != qx->cfg.kind || rec->w.kind != qw->cfg.kind)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_linear_replay: the record is of another recipe");
    if (is_tensorwise(qx->cfg.kind)) /* [DIST-REPLAY]: recorded scales, no reduction */
        return linear_fixed(ctx, opt, &qx->cfg, rec->x.scale, rec->x.amax[QS_DIR_ROW], &qw->cfg,
                            rec->w.scale, rec->w.amax[QS_DIR_ROW], x, wt, y, xq, wq);
    qs_quantizer lx, lw;
    memset(&lw, 0, sizeof lw);
    qs_status s = qs_quantizer_init(ctx, &lx, &qx->cfg);
    if (s == QS_OK)
        s = qs_quantizer_init(ctx, &lw, &qw->cfg);
    if (s == QS_OK && qx->cfg.kind == QS_RECIPE_NVFP4) { /* the recorded tensor amaxes */
        lx.amax_given = lw.amax_given = 1;
        for (int d = 0; d < QS_DIR_COUNT; d++) {
            lx.given_amax[d] = rec->x.amax[d];
            lw.given_amax[d] = rec->w.amax[d];
        }
    }
    if (s == QS_OK)
        s = qs_linear_forward(ctx, opt, &lx, &lw, x, wt, y, xq, wq);
    qs_quantizer_free(&lx);
    qs_quantizer_free(&lw);
    return s;
}

/* ------------------------------------------------------------ ranks as contexts [DIST-HOOK] */

qs_status qs_ctx_set_allreduce(qs_ctx *ctx, qs_dist_allreduce_fn fn, void *user)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    ctx->allreduce = fn;
    ctx->allreduce_user = fn ? user : NULL;
    return QS_OK;
}

/* The counter of group on ctx, created on first use; NULL when the table is full. */
static int64_t *group_counter(qs_ctx *ctx, int group)
{
    for (int i = 0; i < ctx->ncounts; i++)
        if (ctx->counts[i].group == group)
            return &ctx->counts[i].n;
    if (ctx->ncounts == QSI_MAX_COUNTED_GROUPS)
        return NULL;
    ctx->counts[ctx->ncounts].group = group;
    ctx->counts[ctx->ncounts].n = 0;
    return &ctx->counts[ctx->ncounts++].n;
}

qs_status qs_dist_reduce(qs_ctx *ctx, int group, int64_t n, float *amax)
{
    if (!ctx || n < 1 || !amax || group < 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_reduce: bad argument");
    if (group == 0)
        return QS_OK;
    for (int64_t i = 0; i < n; i++)
        if (!is_amax(amax[i]))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "dist_reduce: value %lld is %g (0x%08X), not an amax (negative) "
                                "[DIST-REDUCE-MAX]",
                                (long long)i, (double)amax[i], (unsigned)qs_f32_bits(amax[i]));
    int64_t *count = group_counter(ctx, group);
    if (!count)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_reduce: more than %d groups on one rank [DIST-GROUP]",
                            QSI_MAX_COUNTED_GROUPS);
    if (ctx->allreduce) {
        qs_status s = ctx->allreduce(ctx->allreduce_user, ctx, group, n, amax);
        if (s != QS_OK)
            return s;
    }
    ++*count; /* [DIST-COUNT] */
    return QS_OK;
}

int64_t qs_dist_reductions(const qs_ctx *ctx, int group)
{
    int64_t n = 0;
    for (int i = 0; ctx && i < ctx->ncounts; i++)
        if (group == 0 || ctx->counts[i].group == group)
            n += ctx->counts[i].n;
    return n;
}

qs_status qs_dist_tensor_amax(qs_ctx *ctx, const qs_recipe_config *cfg, const qs_tensor *x,
                              float amax[QS_DIR_COUNT])
{
    if (!cfg || !amax || (cfg->kind != QS_RECIPE_CURRENT && cfg->kind != QS_RECIPE_NVFP4))
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "dist_tensor_amax: only current scaling and nvfp4 have tensor "
                            "amaxes to reduce");
    qsi_input in;
    qs_status s = qsi_input_load(ctx, x, &in);
    if (s != QS_OK)
        return s;
    if (cfg->kind == QS_RECIPE_CURRENT) /* [REC-CS-AMAX] */
        amax[QS_DIR_ROW] = amax[QS_DIR_COL] = qsi_amax(in.x, in.m * in.k, 1);
    else
        s = qsi_nvfp4_amax(ctx, cfg, &in, amax);
    qsi_input_free(&in);
    return s;
}
