/* scope.c: precision scoping of spec/scoping.md. A context holds the current state and a
 * stack of frames, one per entered region, each with its token and the state it replaced.
 * Invariant: scope.depth == nframes outside a replay; every error path leaves the state and
 * the stack as they were [SCOPE-EXIT] [SCOPE-TOKEN]. */
#include <string.h>

#include "internal.h"
#include "qspec/scope.h"

/* ------------------------------------------------------------ recipes */

qs_status qs_scope_recipe_default(qs_ctx *ctx, qs_scope_recipe *r, qs_recipe_kind kind)
{
    static const qs_tensor_role roles[QS_SCOPE_ROLE_COUNT] = {QS_ROLE_INPUT, QS_ROLE_WEIGHT,
                                                              QS_ROLE_GRAD_OUTPUT};
    if (!r)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scope_recipe_default: r is NULL");
    memset(r, 0, sizeof *r);
    r->kind = kind;
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++) {
        qs_status s = qs_recipe_config_default(ctx, &r->cfg[i], kind, roles[i]);
        if (s != QS_OK)
            return s;
    }
    return QS_OK;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xFFu;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t fnv_f32(uint64_t h, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return fnv_u64(h, bits);
}

static uint64_t digest_config(uint64_t h, const qs_recipe_config *c)
{
    const int64_t ints[] = {
        c->kind, c->role, c->rowwise, c->columnwise, c->format,  c->history_len, c->algo, c->margin,
        c->roll, c->pow2, c->mx_elem, c->mx_rule,    c->tile_2d, c->nv_variant,  c->rht,  c->sr};
    for (size_t i = 0; i < QSI_ARRAY_LEN(ints); i++)
        h = fnv_u64(h, (uint64_t)ints[i]);
    h = fnv_f32(h, c->eps);
    h = fnv_u64(h, c->seed);
    return fnv_u64(h, c->offset);
}

uint64_t qs_scope_recipe_digest(const qs_scope_recipe *r)
{
    uint64_t h = 14695981039346656037ull;
    if (!r)
        return h;
    h = fnv_u64(h, (uint64_t)r->kind);
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
        h = digest_config(h, &r->cfg[i]);
    return h;
}

/* ------------------------------------------------------------ state */

qs_status qs_scope_get(qs_ctx *ctx, qs_scope_state *out)
{
    if (!ctx || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scope_get: NULL argument");
    *out = ctx->scope;
    return QS_OK;
}

int qs_scope_state_equal(const qs_scope_state *a, const qs_scope_state *b)
{
    if (a->has_recipe != b->has_recipe)
        return 0;
    if (a->has_recipe && qs_scope_recipe_digest(&a->recipe) != qs_scope_recipe_digest(&b->recipe))
        return 0;
    return a->enabled == b->enabled && a->calibrating == b->calibrating && a->group == b->group &&
           a->first_module == b->first_module && a->depth == b->depth &&
           a->recompute_phase == b->recompute_phase && a->island == b->island &&
           a->island_dtype == b->island_dtype;
}

/* ------------------------------------------------------------ fault injection */

void qs_fault_set(qs_ctx *ctx, int64_t n)
{
    if (!ctx)
        return;
    ctx->fault_at = n > 0 ? n : 0;
    ctx->fault_steps = 0;
}

int64_t qs_fault_steps(const qs_ctx *ctx)
{
    return ctx ? ctx->fault_steps : 0;
}

/* [SCOPE-FAULT]: steps are counted in execution order; only the n-th fails. */
qs_status qsi_fault_step(qs_ctx *ctx, const char *where)
{
    if (!ctx)
        return QS_OK;
    ctx->fault_steps++;
    if (ctx->fault_at && ctx->fault_steps == ctx->fault_at)
        return qs_ctx_error(ctx, QS_ERR_INJECTED, "injected failure at step %lld (%s)",
                            (long long)ctx->fault_steps, where ? where : "?");
    return QS_OK;
}

/* ------------------------------------------------------------ RNG */

void qs_rng_set(qs_ctx *ctx, uint64_t seed, uint64_t offset)
{
    if (!ctx)
        return;
    ctx->rng_seed = seed;
    ctx->rng_offset = offset;
}

void qs_rng_get(const qs_ctx *ctx, uint64_t *seed, uint64_t *offset)
{
    if (seed)
        *seed = ctx ? ctx->rng_seed : 0;
    if (offset)
        *offset = ctx ? ctx->rng_offset : 0;
}

/* ------------------------------------------------------------ enter and exit */

/* Pushes a frame holding the current state and installs next; cannot fail once the
 * capacity check has passed [SCOPE-ENTER]. */
static qs_status push_state(qs_ctx *ctx, const qs_scope_state *next, qs_scope_token *token)
{
    if (ctx->nframes >= QS_SCOPE_MAX_DEPTH)
        return qs_ctx_error(ctx, QS_ERR_STATE, "autocast_enter: more than %d nested regions",
                            QS_SCOPE_MAX_DEPTH);
    qsi_scope_frame *f = &ctx->frames[ctx->nframes++];
    f->token = ++ctx->next_token;
    f->saved = ctx->scope;
    ctx->scope = *next;
    token->id = f->token;
    return QS_OK;
}

qs_status qsi_scope_enter_state(qs_ctx *ctx, const qs_scope_state *st, qs_scope_token *token)
{
    if (!ctx || !st || !token)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scope_enter_state: NULL argument");
    return push_state(ctx, st, token);
}

static qs_status check_params(qs_ctx *ctx, const qs_autocast_params *p)
{
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "autocast_enter: params is NULL");
    if ((p->enabled || p->calibrating) && !p->recipe)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "autocast_enter: an enabled or calibrating region needs a recipe");
    if (p->recipe && (unsigned)p->recipe->kind >= QS_RECIPE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "autocast_enter: recipe kind %d is unknown",
                            (int)p->recipe->kind);
    return QS_OK;
}

qs_status qs_autocast_enter(qs_ctx *ctx, const qs_autocast_params *params, qs_scope_token *token)
{
    if (!ctx || !token)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "autocast_enter: NULL ctx or token");
    qs_status s = check_params(ctx, params);
    if (s == QS_OK)
        s = qsi_fault_step(ctx, "autocast_enter");
    if (s != QS_OK)
        return s;
    /* [SCOPE-ENTER]: every field is set; an inner region overrides the outer one. */
    qs_scope_state next = ctx->scope;
    next.enabled = params->enabled != 0;
    next.calibrating = params->calibrating != 0;
    next.has_recipe = params->recipe != NULL;
    memset(&next.recipe, 0, sizeof next.recipe);
    if (params->recipe)
        next.recipe = *params->recipe; /* a copy: the caller's recipe is never written */
    next.group = params->group;
    next.first_module = ctx->scope.depth == 0 ? 1 : ctx->scope.first_module;
    next.depth = ctx->scope.depth + 1;
    next.island = 0;
    next.island_dtype = QS_DTYPE_INVALID;
    return push_state(ctx, &next, token); /* recompute_phase is inherited */
}

qs_status qs_island_enter(qs_ctx *ctx, qs_dtype input_dtype, qs_scope_token *token)
{
    if (!ctx || !token)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "island_enter: NULL ctx or token");
    if (input_dtype != QS_BF16 && input_dtype != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE,
                            "island_enter: input dtype %s; an island runs in bf16 or fp16",
                            qs_dtype_name(input_dtype) ? qs_dtype_name(input_dtype) : "invalid");
    qs_status s = qsi_fault_step(ctx, "island_enter");
    if (s != QS_OK)
        return s;
    /* [SCOPE-ISLAND]: quantization and calibration off; the recipe is kept untouched
     * [SCOPE-ISLAND-NOMUTATE]. */
    qs_scope_state next = ctx->scope;
    next.enabled = 0;
    next.calibrating = 0;
    next.island = 1;
    next.island_dtype = input_dtype;
    next.depth = ctx->scope.depth + 1;
    return push_state(ctx, &next, token);
}

/* [SCOPE-TOKEN]: which of the two errors a bad token is. */
static qs_status token_error(qs_ctx *ctx, qs_scope_token token)
{
    for (int i = 0; i < ctx->nframes; i++)
        if (ctx->frames[i].token == token.id)
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "autocast_exit: mismatched exit: token %llu is not the innermost "
                                "region (token %llu is)",
                                (unsigned long long)token.id,
                                (unsigned long long)ctx->frames[ctx->nframes - 1].token);
    if (token.id != 0 && token.id <= ctx->next_token)
        return qs_ctx_error(ctx, QS_ERR_STATE,
                            "autocast_exit: double exit: token %llu was already exited",
                            (unsigned long long)token.id);
    return qs_ctx_error(ctx, QS_ERR_STATE,
                        "autocast_exit: token %llu was never issued by this context",
                        (unsigned long long)token.id);
}

qs_status qsi_scope_pop(qs_ctx *ctx, qs_scope_token token)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (ctx->nframes == 0 || ctx->frames[ctx->nframes - 1].token != token.id)
        return token_error(ctx, token);
    qsi_scope_frame *f = &ctx->frames[--ctx->nframes];
    int first = ctx->scope.first_module;
    ctx->scope = f->saved; /* [SCOPE-EXIT]: the snapshot, exactly */
    /* [SCOPE-FIRST-MODULE]: the flag belongs to the outermost region; an inner exit
     * keeps its current value instead of bringing back a consumed flag. */
    if (ctx->scope.depth > 0)
        ctx->scope.first_module = first;
    memset(f, 0, sizeof *f);
    return QS_OK;
}

qs_status qs_autocast_exit(qs_ctx *ctx, qs_scope_token token)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (ctx->nframes == 0 || ctx->frames[ctx->nframes - 1].token != token.id)
        return token_error(ctx, token);
    qs_status s = qsi_fault_step(ctx, "autocast_exit");
    if (s != QS_OK)
        return s; /* nothing changed: the region is still entered */
    return qsi_scope_pop(ctx, token);
}

/* ------------------------------------------------------------ the callback form */

/* [SCOPE-RESTORE-ERR]: pops every frame above and including the region's own, so the
 * enclosing state comes back whatever fn did; regions fn left open are an error. */
static qs_status run_body(qs_ctx *ctx, int base, qs_scope_token token, qs_scope_fn fn, void *arg)
{
    qs_status s = fn ? fn(ctx, arg) : QS_OK;
    int left_open = ctx->nframes - (base + 1);
    if (left_open < 0 || ctx->frames[base].token != token.id) {
        /* fn exited the region itself: restore what we can verify is ours. */
        return s != QS_OK ? s
                          : qs_ctx_error(ctx, QS_ERR_STATE,
                                         "autocast_run: the body exited its own region");
    }
    while (ctx->nframes > base + 1)
        qsi_scope_pop(ctx, (qs_scope_token){ctx->frames[ctx->nframes - 1].token});
    qsi_scope_pop(ctx, token);
    if (s == QS_OK && left_open > 0)
        s = qs_ctx_error(ctx, QS_ERR_STATE, "autocast_run: the body left %d region(s) open",
                         left_open);
    return s;
}

qs_status qs_autocast_run(qs_ctx *ctx, const qs_autocast_params *params, qs_scope_fn fn, void *arg)
{
    qs_scope_token token;
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    int base = ctx->nframes;
    qs_status s = qs_autocast_enter(ctx, params, &token);
    return s != QS_OK ? s : run_body(ctx, base, token, fn, arg);
}

qs_status qs_island_run(qs_ctx *ctx, qs_dtype input_dtype, qs_scope_fn fn, void *arg)
{
    qs_scope_token token;
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    int base = ctx->nframes;
    qs_status s = qs_island_enter(ctx, input_dtype, &token);
    return s != QS_OK ? s : run_body(ctx, base, token, fn, arg);
}

/* ------------------------------------------------------------ module policies */

int qs_scope_take_first_module(qs_ctx *ctx)
{
    if (!ctx || !ctx->scope.first_module || ctx->scope.recompute_phase)
        return 0;
    ctx->scope.first_module = 0; /* [SCOPE-FIRST-MODULE] */
    return 1;
}

static const char *const prec_names[QS_PREC_COUNT] = {"quantized", "calibrating", "high", "island"};

const char *qs_precision_name(qs_precision p)
{
    return (unsigned)p < QS_PREC_COUNT ? prec_names[p] : NULL;
}

qs_status qs_scope_decide(qs_ctx *ctx, qs_module_class cls, const char *name, qs_precision *out)
{
    if (!ctx || !out || (unsigned)cls >= QS_MODULE_CLASS_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "scope_decide: bad argument");
    const qs_scope_state *st = &ctx->scope;
    const char *nm = name ? name : "?";
    if (cls == QS_MODULE_QUANTIZABLE) {
        /* [SCOPE-POLICY-QUANT] [SCOPE-POLICY-CALIB] [SCOPE-POLICY-HP] */
        *out = st->enabled       ? QS_PREC_QUANTIZED
               : st->calibrating ? QS_PREC_CALIBRATING
                                 : QS_PREC_HIGH;
        return QS_OK;
    }
    if (st->island) {
        *out = QS_PREC_ISLAND; /* [SCOPE-ISLAND] */
        return QS_OK;
    }
    if (st->enabled || st->calibrating) /* [SCOPE-ISLAND-REJECT] */
        return qs_ctx_error(ctx, QS_ERR_STATE,
                            "module '%s' cannot run quantized: the enclosing region is %s "
                            "(recipe %s); run it inside a high-precision island",
                            nm, st->enabled ? "enabled" : "calibrating",
                            st->has_recipe ? qs_recipe_kind_name(st->recipe.kind) : "none");
    *out = QS_PREC_HIGH;
    return QS_OK;
}
