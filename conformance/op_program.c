/* op_program.c: the `program` op (spec/cases.md, Programs) — each variant of a case's
 * program is built for its tags and run on the reference engine (include/qspec/program.h)
 * in a context of its own, step after step, with injected and expected errors; the kit
 * checks after every run what the spec promises (the scope restored, a failed run changed
 * nothing, recipes not mutated [CASE-PROG-RUN]), the expected traces and quantizer states,
 * and the comparisons between variants; the outputs are the named tensors of a variant.
 * On a plugin the same engine runs with the plugin's slots as its kernel table
 * [CASE-KERNEL-TABLE]: a program is not supported when a slot it needs is missing, and the
 * checks above are the plugin's self-consistency and trace checks [CASE-PLUGIN-SELF]
 * [CASE-PLUGIN-TRACE] [CASE-PROG-BACKEND]. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "opcheck.h"
#include "ops.h"
#include "program.h"
#include "qspec/format.h"
#include "qspec/kernels.h"
#include "qspec/program.h"

/* ------------------------------------------------------------ check failures */

/* The first failed check of a case, and how many there were. */
typedef struct checker {
    char first[420];
    int count;
} checker;

static void fail(checker *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(checker *ck, const char *fmt, ...)
{
    if (ck->count++ > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ck->first, sizeof ck->first, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ one variant's run */

/* Quantizer slots per op: per linear of an mla op (a linear op uses the first), recipe
 * kind and role. */
#define QSKR_NQ  (QS_MLA_LINEAR_COUNT * QS_RECIPE_COUNT * QS_SCOPE_ROLE_COUNT)
#define QSKR_MSG 512

typedef struct vrun {
    const qskp_variant *v;
    const qsk_case *c;
    const qs_tensor *inputs;
    qs_ctx *ctx;
    qs_program *p;
    int nops, cap;
    const qskp_node **ops;       /* op statements by op index */
    const qskp_node **region_of; /* a linear's or mla's quantizing region (NULL: none) */
    const qs_tensor *x, *dy;
    qs_program_result res; /* of the last step run */
    int ok;                /* the variant ran to its end with no failed check */
    qs_tensor state, trace, error;
    float *before;   /* per op and quantizer: the scale before the current step */
    int *before_has; /* and whether the quantizer existed */
    int step;
    /* one rank of a variant on several ranks [CASE-PROG-RANKS]: the context is the world's,
     * and the rank's shards replace the program input, the output gradient and (tensor
     * parallel) the weight */
    int rank_ctx;
    const qs_tensor *x_shard, *dy_shard, *w_shard;
    int64_t red[QSKP_MAX_GROUPS]; /* reductions of the last step, per v->red_group */
    /* on a plugin [CASE-KERNEL-TABLE]: its table is the context's kernels; a slot that
     * refused a request (QS_ERR_UNSUPPORTED) makes the case not supported, with why */
    const qsk_plugin *pl;
    int refused;
    char refused_why[QSKR_MSG];
    qs_gemm_claim claim; /* the weakest gemm claim of the variant's runs */
    int attn_tol;        /* an sdpa or gdn slot of its runs claimed only a tolerance */
} vrun;

static void vrun_free(vrun *r)
{
    qs_program_result_free(&r->res);
    qs_program_free(r->p);
    if (!r->rank_ctx)
        qs_ctx_free(r->ctx);
    free(r->ops);
    free(r->region_of);
    free(r->before);
    free(r->before_has);
    qs_tensor_free(&r->state);
    qs_tensor_free(&r->trace);
    qs_tensor_free(&r->error);
    memset(r, 0, sizeof *r);
}

static qs_status add_op(vrun *r, const qskp_node *s, const qskp_node *region)
{
    if (r->nops == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        const qskp_node **a = realloc(r->ops, (size_t)cap * sizeof *a);
        if (a)
            r->ops = a;
        const qskp_node **b = a ? realloc(r->region_of, (size_t)cap * sizeof *b) : NULL;
        if (!a || !b)
            return qs_ctx_error(r->ctx, QS_ERR_NOMEM, "out of memory");
        r->region_of = b;
        r->cap = cap;
    }
    r->ops[r->nops] = s;
    r->region_of[r->nops++] = region;
    return QS_OK;
}

/* Builds the statements of region under engine node parent; region_q is the innermost
 * quantizing (enabled or calibrating) region, NULL when none applies [CASE-PROG-REGION]. */
static qs_status build(vrun *r, const qskp_node *region, int parent, const qskp_node *region_q)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        int id = 0;
        qs_status st = QS_OK;
        if (!qskp_node_in(s, r->v)) {
            if (!QSKP_IS_OP(s->kind) && s->kind != QSKP_BACKWARD)
                st = build(r, s, parent, region_q); /* a region left out is transparent */
            if (st != QS_OK)
                return st;
            continue;
        }
        switch (s->kind) {
        case QSKP_AUTOCAST: {
            qs_autocast_params a = {s->enabled, s->calibrating, s->has_recipe ? &s->recipe : NULL,
                                    s->group};
            st = qs_program_autocast(r->ctx, r->p, parent, &a, &id);
            if (st == QS_OK)
                st = build(r, s, id, s->enabled || s->calibrating ? s : NULL);
            break;
        }
        case QSKP_CALIBRATE:
            st = qs_program_calibrate(r->ctx, r->p, parent, &s->recipe, &id);
            if (st == QS_OK)
                st = build(r, s, id, s);
            break;
        case QSKP_ISLAND:
            st = qs_program_island(r->ctx, r->p, parent, &id);
            if (st == QS_OK)
                st = build(r, s, id, NULL);
            break;
        case QSKP_CHECKPOINT:
            st = qs_program_checkpoint(r->ctx, r->p, parent, &id);
            if (st == QS_OK)
                st = build(r, s, id, region_q);
            break;
        case QSKP_LINEAR:
            st = qs_program_linear(
                r->ctx, r->p, parent, s->name,
                r->w_shard ? r->w_shard : qsk_input_tensor(r->c, r->inputs, s->in[0]), &id);
            if (st == QS_OK)
                st = add_op(r, s, region_q);
            break;
        case QSKP_GELU: /* [RCP-GELU-OP]: computed by the engine, no parameters */
            st = qs_program_gelu(r->ctx, r->p, parent, s->name, &id);
            if (st == QS_OK)
                st = add_op(r, s, NULL);
            break;
        case QSKP_GDN: {
            const qs_tensor *g = qsk_input_tensor(r->c, r->inputs, s->in[0]);
            const qs_tensor *beta = qsk_input_tensor(r->c, r->inputs, s->in[1]);
            st = qs_program_gdn_heads(r->ctx, r->p, parent, s->name, (int64_t)g->numel / s->heads,
                                      s->heads, g->data, beta->data, &id);
            if (st == QS_OK)
                st = add_op(r, s, NULL);
            break;
        }
        case QSKP_MLA: { /* [RCP-MLA-OP] */
            const qskp_mla *m = &s->mla;
            qs_program_mla_params mp;
            memset(&mp, 0, sizeof mp);
            mp.cfg = m->cfg;
            mp.layout = m->layout;
            mp.mask = m->mask;
            mp.b = m->b;
            mp.s = m->s ? m->s : (int64_t)r->x->shape[0] / m->b;
            mp.cu_seqlens = m->layout == QS_ATTN_THD ? m->cu_seqlens : NULL;
            mp.recompute_up_proj = m->recompute_up_proj;
            for (int t = 0; m->recompute_when[0] && t < r->v->ntags; t++)
                mp.recompute_up_proj |= strcmp(r->v->tags[t], m->recompute_when) == 0;
            for (int pm = 0; pm < QS_MLA_PARAM_COUNT; pm++)
                mp.w[pm] = m->w[pm][0] ? qsk_input_tensor(r->c, r->inputs, m->w[pm]) : NULL;
            st = qs_program_mla(r->ctx, r->p, parent, s->name, &mp, &id);
            if (st == QS_OK)
                st = add_op(r, s, region_q);
            break;
        }
        case QSKP_BACKWARD:
            r->dy = r->dy_shard
                        ? r->dy_shard
                        : qsk_input_tensor(r->c, r->inputs, r->v->dy[0] ? r->v->dy : s->in[0]);
            break;
        default:
            break;
        }
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

/* ------------------------------------------------------------ the state output */

typedef struct bytes {
    unsigned char *b;
    size_t n, cap;
    int nomem;
} bytes;

static void put_u32(bytes *o, uint32_t v)
{
    if (o->n + 4 > o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        unsigned char *g = realloc(o->b, cap);
        if (!g) {
            o->nomem = 1;
            return;
        }
        o->b = g;
        o->cap = cap;
    }
    for (int i = 0; i < 4; i++)
        o->b[o->n++] = (unsigned char)(v >> (8 * i));
}

static void put_u64(bytes *o, uint64_t v)
{
    put_u32(o, (uint32_t)v);
    put_u32(o, (uint32_t)(v >> 32));
}

static void put_quantizer(bytes *o, const qs_quantizer *q)
{
    put_u32(o, qs_f32_bits(q->ds.scale));
    put_u32(o, qs_f32_bits(q->ds.scale_inv));
    put_u32(o, (uint32_t)(q->ds.history ? q->ds.len : 0));
    for (int64_t j = 0; q->ds.history && j < q->ds.len; j++)
        put_u32(o, qs_f32_bits(q->ds.history[j]));
}

/* The quantizer of op (linear lin of an mla op; lin -1: a linear op), NULL if none. */
static const qs_quantizer *op_quantizer(const qs_program *p, int op, int lin, qs_recipe_kind k,
                                        qs_scope_role role)
{
    return lin < 0 ? qs_program_quantizer(p, op, k, role)
                   : qs_program_mla_quantizer(p, op, (qs_mla_linear)lin, k, role);
}

/* [CASE-PROG-OUTPUT] `state`: every quantizer that exists, in (op, recipe, role) order —
 * for an mla op in (op, linear, recipe, role) order, with the linear's index after the
 * op's — then the RNG state; all little-endian. */
static qs_status state_bytes(qs_ctx *ctx, const qs_program *p, qs_tensor *out)
{
    bytes o = {0};
    for (int op = 0; op < qs_program_op_count(p); op++) {
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
                const qs_quantizer *q = qs_program_quantizer(p, op, k, role);
                if (!q)
                    continue;
                put_u32(&o, (uint32_t)op);
                put_u32(&o, (uint32_t)k);
                put_u32(&o, (uint32_t)role);
                put_quantizer(&o, q);
            }
        for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
            for (int k = 0; k < QS_RECIPE_COUNT; k++)
                for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
                    const qs_quantizer *q =
                        qs_program_mla_quantizer(p, op, (qs_mla_linear)l, k, role);
                    if (!q)
                        continue;
                    put_u32(&o, (uint32_t)op);
                    put_u32(&o, (uint32_t)l);
                    put_u32(&o, (uint32_t)k);
                    put_u32(&o, (uint32_t)role);
                    put_quantizer(&o, q);
                }
    }
    uint64_t seed, offset;
    qs_rng_get(ctx, &seed, &offset);
    put_u64(&o, seed);
    put_u64(&o, offset);
    int64_t n = (int64_t)o.n;
    qs_status st = o.nomem ? qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory")
                           : qs_tensor_alloc(ctx, out, QS_U8, 1, &n);
    if (st == QS_OK)
        memcpy(out->data, o.b, o.n);
    free(o.b);
    return st;
}

static qs_status text_tensor(qs_ctx *ctx, const char *s, size_t len, qs_tensor *out)
{
    int64_t n = (int64_t)len;
    qs_status st = qs_tensor_alloc(ctx, out, QS_U8, 1, &n);
    if (st == QS_OK && len)
        memcpy(out->data, s, len);
    return st;
}

static int same_bits(const qs_tensor *a, const qs_tensor *b)
{
    return qs_tensor_same_layout(a, b) && a->nbytes == b->nbytes &&
           (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* ------------------------------------------------------------ engine runs */

static const char *where(const vrun *r, char *buf, size_t cap)
{
    snprintf(buf, cap, "variant '%s' step %d", r->v->name, r->step);
    return buf;
}

/* One qs_program_run with the checks every run gets [CASE-PROG-RUN]: the scoping state is
 * as before ([SCOPE-RESTORE-ERR]); a failed run returned nothing and left every quantizer
 * and the RNG state as before ([SCOPE-FAIL-ATOMIC]). *es gets the engine's status and msg
 * its message; a successful run's result replaces r->res. Returns nonzero when a check
 * failed or memory ran out. */
static int engine_run(vrun *r, checker *ck, qs_status *es, char *msg, size_t cap)
{
    char w[96];
    qs_tensor before = {0}, after = {0};
    qs_scope_state s0, s1;
    qs_program_result res;
    memset(&res, 0, sizeof res);
    qs_scope_get(r->ctx, &s0);
    if (state_bytes(r->ctx, r->p, &before) != QS_OK) {
        fail(ck, "%s: out of memory", where(r, w, sizeof w));
        return 1;
    }
    *es = qs_program_run(r->ctx, r->p, r->x, r->dy, &res);
    snprintf(msg, cap, "%s", *es == QS_OK ? "" : qs_ctx_errmsg(r->ctx));
    if (r->pl && *es == QS_ERR_UNSUPPORTED && !r->refused) {
        r->refused = 1;
        snprintf(r->refused_why, sizeof r->refused_why, "%s", msg);
    }
    if (r->pl && qs_ctx_gemm_claim(r->ctx) > r->claim)
        r->claim = qs_ctx_gemm_claim(r->ctx);
    if (r->pl && qs_ctx_attn_claim(r->ctx) != QS_ATTN_CLAIM_REFERENCE)
        r->attn_tol = 1;
    qs_scope_get(r->ctx, &s1);
    int bad = 0;
    if (!qs_scope_state_equal(&s0, &s1)) {
        fail(ck, "%s: the run (%s) left the scoping state changed [SCOPE-RESTORE-ERR]",
             where(r, w, sizeof w), qs_status_name(*es));
        bad = 1;
    }
    if (*es == QS_OK) {
        qs_program_result_free(&r->res);
        r->res = res;
        qs_tensor_free(&before);
        return bad;
    }
    if (res.y.data || res.dx.data || res.grads || res.trace.n) {
        fail(ck, "%s: a failed run (%s) returned a result [SCOPE-FAIL-ATOMIC]",
             where(r, w, sizeof w), qs_status_name(*es));
        bad = 1;
    }
    if (state_bytes(r->ctx, r->p, &after) != QS_OK) {
        fail(ck, "%s: out of memory", where(r, w, sizeof w));
        bad = 1;
    } else if (!same_bits(&before, &after)) {
        size_t i = 0;
        while (i < before.nbytes && i < after.nbytes &&
               ((unsigned char *)before.data)[i] == ((unsigned char *)after.data)[i])
            i++;
        fail(ck,
             "%s: a failed run (%s: %s) changed the quantizer or RNG state (state byte %zu) "
             "[SCOPE-FAIL-ATOMIC]",
             where(r, w, sizeof w), qs_status_name(*es), msg, i);
        bad = 1;
    }
    qs_program_result_free(&res);
    qs_tensor_free(&before);
    qs_tensor_free(&after);
    return bad;
}

/* A run that must succeed. */
static int run_ok(vrun *r, checker *ck)
{
    char msg[QSKR_MSG], w[96];
    qs_status es;
    if (engine_run(r, ck, &es, msg, sizeof msg))
        return 1;
    if (es != QS_OK) {
        fail(ck, "%s: the engine failed: %s: %s", where(r, w, sizeof w), qs_status_name(es), msg);
        return 1;
    }
    return 0;
}

/* [CASE-PROG-INJECT]: injected failures, each checked like any failed run, then the step
 * runs again (a retried step is the same step [SCOPE-FAIL-ATOMIC]). */
static int inject_step(vrun *r, checker *ck)
{
    const qskp_inject *in = &r->v->inject;
    char msg[QSKR_MSG], w[96], tag[48];
    int64_t found = 0;
    snprintf(tag, sizeof tag, "(%s)", in->step_name);
    for (int64_t n = in->kind == QSKP_INJECT_NUMBER ? in->nth : 1;; n++) {
        qs_status es;
        qs_fault_set(r->ctx, n);
        int bad = engine_run(r, ck, &es, msg, sizeof msg);
        qs_fault_set(r->ctx, 0);
        if (bad)
            return 1;
        if (es == QS_OK) {
            if (in->kind == QSKP_INJECT_EVERY)
                return 0; /* the sweep ends with the run that reaches its end */
            if (in->kind == QSKP_INJECT_NUMBER)
                fail(ck, "%s: inject_error: the run has fewer than %lld steps",
                     where(r, w, sizeof w), (long long)in->nth);
            else
                fail(ck, "%s: inject_error: the run has %lld '%s' step(s), not %lld",
                     where(r, w, sizeof w), (long long)found, in->step_name, (long long)in->nth);
            return 1;
        }
        if (es != QS_ERR_INJECTED) {
            fail(ck, "%s: a failure injected at step %lld gave %s: %s", where(r, w, sizeof w),
                 (long long)n, qs_status_name(es), msg);
            return 1;
        }
        if (in->kind == QSKP_INJECT_NUMBER)
            break;
        if (in->kind == QSKP_INJECT_NAMED && strstr(msg, tag) && ++found == in->nth)
            break;
    }
    return run_ok(r, ck);
}

/* [CASE-PROG-ERROR]: the step must fail with the expected code (and message); the
 * failure itself is checked like any other. */
static int expect_error_step(vrun *r, checker *ck)
{
    const qskp_error *e = &r->v->error;
    char msg[QSKR_MSG], w[96];
    qs_status es;
    if (engine_run(r, ck, &es, msg, sizeof msg))
        return 1;
    if (es != e->code) {
        fail(ck, "%s: expected %s, the run gave %s%s%s", where(r, w, sizeof w),
             qs_status_name(e->code), qs_status_name(es), es == QS_OK ? "" : ": ", msg);
        return 1;
    }
    if (e->message[0] && !strstr(msg, e->message)) {
        fail(ck, "%s: the %s message does not contain '%s': %s", where(r, w, sizeof w),
             qs_status_name(es), e->message, msg);
        return 1;
    }
    return text_tensor(r->ctx, msg, strlen(msg), &r->error) != QS_OK;
}

/* ------------------------------------------------------------ checks after a step */

static int op_index(const vrun *r, const char *name)
{
    for (int i = 0; i < r->nops; i++)
        if (strcmp(r->ops[i]->name, name) == 0)
            return i;
    return -1;
}

/* The slot of (op, linear lin of an mla op or -1, k, role) in r->before. */
static size_t before_slot(int op, int lin, qs_recipe_kind k, qs_scope_role role)
{
    size_t l = lin < 0 ? 0 : (size_t)lin;
    return (((size_t)op * QS_MLA_LINEAR_COUNT + l) * QS_RECIPE_COUNT + (size_t)k) *
               QS_SCOPE_ROLE_COUNT +
           (size_t)role;
}

/* The linears of op index op: -1 alone for a linear op, the linears it runs for an mla
 * op (lins gets them; returns the count). */
static int op_linears(const vrun *r, int op, int lins[QS_MLA_LINEAR_COUNT])
{
    const qskp_node *s = r->ops[op];
    if (s->kind != QSKP_MLA) {
        lins[0] = -1;
        return 1;
    }
    int n = 0;
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        if (qs_mla_linear_used(&s->mla.cfg, s->mla.split, (qs_mla_linear)l))
            lins[n++] = l;
    return n;
}

static void snapshot_before(vrun *r)
{
    for (int op = 0; op < r->nops; op++) {
        int lins[QS_MLA_LINEAR_COUNT], nl = op_linears(r, op, lins);
        for (int li = 0; li < nl; li++)
            for (int k = 0; k < QS_RECIPE_COUNT; k++)
                for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
                    const qs_quantizer *q = op_quantizer(r->p, op, lins[li], k, role);
                    size_t i = before_slot(op, lins[li], k, role);
                    r->before_has[i] = q != NULL;
                    /* [REC-DS-STATE]: the first scale is 1 */
                    r->before[i] = q ? q->ds.scale : 1.0f;
                }
    }
}

static float before_scale(const vrun *r, int op, int lin, qs_recipe_kind k, qs_scope_role role)
{
    return r->before[before_slot(op, lin, k, role)];
}

/* [CASE-PROG-RUN] [SCOPE-ISLAND-NOMUTATE] [SCOPE-RECIPE]: every linear that ran in a
 * quantizing region holds quantizers configured exactly as that region's recipe. */
static void check_recipes(vrun *r, checker *ck)
{
    char w[96];
    for (int op = 0; op < r->nops; op++) {
        const qskp_node *reg = r->region_of[op];
        if (!reg)
            continue;
        qs_recipe_kind k = reg->recipe.kind;
        int lins[QS_MLA_LINEAR_COUNT], nl = op_linears(r, op, lins);
        for (int li = 0; li < nl; li++) {
            qs_scope_recipe have;
            int missing = 0;
            char nm[QS_TRACE_NAME_LEN + 16];
            snprintf(nm, sizeof nm, "%s%s%s", r->ops[op]->name, lins[li] < 0 ? "" : "/",
                     lins[li] < 0 ? "" : qs_mla_linear_name((qs_mla_linear)lins[li]));
            memset(&have, 0, sizeof have);
            have.kind = k;
            for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
                const qs_quantizer *q = op_quantizer(r->p, op, lins[li], k, (qs_scope_role)role);
                missing |= q == NULL;
                if (q)
                    have.cfg[role] = q->cfg;
            }
            if (missing)
                fail(ck, "%s: linear '%s' ran in a %s region but has no %s quantizers",
                     where(r, w, sizeof w), nm, qs_recipe_kind_name(k), qs_recipe_kind_name(k));
            else if (qs_scope_recipe_digest(&have) != qs_scope_recipe_digest(&reg->recipe))
                fail(ck,
                     "%s: linear '%s' holds %s quantizers configured unlike its region's recipe "
                     "[SCOPE-ISLAND-NOMUTATE]",
                     where(r, w, sizeof w), nm, qs_recipe_kind_name(k));
        }
    }
}

static const char *yes_no(int b)
{
    return b ? "true" : "false";
}

/* Compares record got with the expectation e; the first difference goes to buf. */
static int trace_rec_differs(const vrun *r, const qskp_trace_exp *e, const qs_trace_record *got,
                             char *buf, size_t cap)
{
    if (got->phase != e->phase || strcmp(got->op, e->op) != 0) {
        snprintf(buf, cap, "expected %s of '%s', got %s of '%s'", qs_trace_phase_name(e->phase),
                 e->op, qs_trace_phase_name(got->phase), got->op);
        return 1;
    }
    if (e->kind[0] && strcmp(got->kind, e->kind) != 0) {
        snprintf(buf, cap, "kind: expected %s, got %s", e->kind, got->kind);
        return 1;
    }
    if (got->precision != e->precision) {
        snprintf(buf, cap, "precision: expected %s, got %s", qs_precision_name(e->precision),
                 qs_precision_name(got->precision));
        return 1;
    }
    if (got->has_recipe != e->has_recipe || (e->has_recipe && got->recipe != e->recipe)) {
        snprintf(buf, cap, "recipe: expected %s, got %s",
                 e->has_recipe ? qs_recipe_kind_name(e->recipe) : "null",
                 got->has_recipe ? qs_recipe_kind_name(got->recipe) : "null");
        return 1;
    }
    if (got->first_module != e->first_module) {
        snprintf(buf, cap, "first_module: expected %s, got %s", yes_no(e->first_module),
                 yes_no(got->first_module));
        return 1;
    }
    if (e->scales_given && got->scales != e->scales) {
        snprintf(buf, cap, "scales: expected %s, got %s", qs_trace_scales_name(e->scales),
                 qs_trace_scales_name(got->scales));
        return 1;
    }
    if (e->dtype_given && got->dtype != e->dtype) {
        snprintf(buf, cap, "dtype: expected %s, got %s", qs_dtype_name(e->dtype),
                 qs_dtype_name(got->dtype));
        return 1;
    }
    if (e->nbits < 0)
        return 0;
    if (got->nscale != e->nbits) {
        snprintf(buf, cap, "scale_bits: expected %d scales, got %d", e->nbits, got->nscale);
        return 1;
    }
    for (int i = 0; i < e->nbits; i++) {
        uint32_t want = e->bits[i];
        if (e->bits_kind[i] == QSKP_BITS_PREV) {
            /* the scale this quantizer had before the step: forward and recompute x then w,
             * backward dy [RCP-TRACE] */
            qs_scope_role role = got->phase == QS_PHASE_BACKWARD ? QS_SCOPE_DY
                                 : i == 0                        ? QS_SCOPE_X
                                                                 : QS_SCOPE_W;
            const qskp_node *node;
            int part, op = -1;
            qskp_trace_op_split(r->c->program, r->v, e->op, &node, &part);
            for (int i2 = 0; i2 < r->nops; i2++)
                if (r->ops[i2] == node)
                    op = i2;
            if (op < 0 || part >= QS_MLA_LINEAR_COUNT) {
                snprintf(buf, cap, "scale_bits: 'prev' names no quantized linear");
                return 1;
            }
            want = qs_f32_bits(before_scale(r, op, part, got->recipe, role));
        }
        if (got->scale_bits[i] != want) {
            snprintf(buf, cap, "scale_bits[%d]: expected 0x%08x%s, got 0x%08x", i, (unsigned)want,
                     e->bits_kind[i] == QSKP_BITS_PREV ? " (the scale before this step)" : "",
                     (unsigned)got->scale_bits[i]);
            return 1;
        }
    }
    return 0;
}

/* [CASE-PROG-TRACE] */
static void check_trace(vrun *r, checker *ck)
{
    const qskp_variant *v = r->v;
    const qs_trace *t = &r->res.trace;
    char w[96], why[200];
    for (size_t i = 0; i < v->ntrace && i < t->n; i++)
        if (trace_rec_differs(r, &v->trace[i], &t->rec[i], why, sizeof why)) {
            fail(ck, "%s: trace record %zu (case line %d): %s", where(r, w, sizeof w), i,
                 v->trace[i].pos.line, why);
            return;
        }
    if (v->ntrace != t->n)
        fail(ck, "%s: trace: expected %zu records, the run has %zu", where(r, w, sizeof w),
             v->ntrace, t->n);
}

/* amax of an input (|x| from 0, NaN ignored) [REC-AMAX]. */
static float input_amax(const qs_tensor *t)
{
    double m = 0;
    for (size_t i = 0; i < t->numel; i++) {
        double a = fabs(qsk_elem_value(t, i));
        if (a > m)
            m = a;
    }
    return (float)m;
}

/* [REC-DS-SCALE], written out again from the spec: the scale a delayed quantizer's update
 * computes from its (rolled) history. */
static float scale_from_history(const qs_quantizer *q, float prev)
{
    float amax = 0.0f;
    if (q->cfg.algo == QS_AMAX_MAX) {
        for (int64_t j = 0; j < q->ds.len; j++) {
            float a = q->ds.history[j];
            if (a != a && q->cfg.roll == QS_DS_ROLL_UNFUSED)
                return prev; /* [REC-DS-ROLL-UNFUSED]: a NaN amax keeps the scale */
            if (a > amax)
                amax = a; /* [REC-DS-ROLL-FUSED]: fmaxf drops NaN */
        }
    } else {
        amax = q->ds.history[q->ds.len - 1]; /* the newest slot after a roll */
    }
    if (!(amax > 0.0f) || isinf(amax))
        return prev;
    float fp8_max = qs_recipe_elem_dtype(&q->cfg) == QS_E5M2 ? 57344.0f : 448.0f;
    float s = (fp8_max * qs_f32_from_bits((uint32_t)(127 - q->cfg.margin) << 23)) / amax;
    return isinf(s) ? 3.40282347e38f : s;
}

static const char *const role_name[QS_SCOPE_ROLE_COUNT] = {"x", "w", "dy"};

/* [CASE-PROG-STATE] */
static void check_state(vrun *r, checker *ck, const qskp_state_exp *e)
{
    char w[96];
    int op = op_index(r, e->op);
    const qs_quantizer *q = op_quantizer(r->p, op, e->linear, e->recipe, e->role);
    const char *kn = qs_recipe_kind_name(e->recipe);
    if ((q != NULL) != e->exists) {
        fail(ck, "%s: state (case line %d): the %s %s quantizer of '%s%s%s' %s",
             where(r, w, sizeof w), e->pos.line, kn, role_name[e->role], e->op,
             e->linear < 0 ? "" : "/",
             e->linear < 0 ? "" : qs_mla_linear_name((qs_mla_linear)e->linear),
             e->exists ? "does not exist" : "exists");
        return;
    }
    if (!q)
        return;
    int64_t filled = 0;
    for (int64_t j = 0; j < q->ds.len; j++)
        filled += q->ds.history[j] != 0.0f;
    if (e->filled >= 0 && filled != e->filled)
        fail(ck, "%s: state (case line %d): %s.%s has %lld filled history slots, expected %lld",
             where(r, w, sizeof w), e->pos.line, e->op, role_name[e->role], (long long)filled,
             (long long)e->filled);
    if (e->amax_of[0]) {
        float a = input_amax(qsk_input_tensor(r->c, r->inputs, e->amax_of));
        int hit = 0;
        for (int64_t j = 0; j < q->ds.len; j++)
            hit |= (e->amax_slot < 0 || j == e->amax_slot) &&
                   qs_f32_bits(q->ds.history[j]) == qs_f32_bits(a);
        if (!hit)
            fail(ck, "%s: state (case line %d): %s.%s history holds no amax(%s) = %.9g%s",
                 where(r, w, sizeof w), e->pos.line, e->op, role_name[e->role], e->amax_of,
                 (double)a, e->amax_slot >= 0 ? " in the slot named" : "");
    }
    float prev = before_scale(r, op, e->linear, e->recipe, e->role), want = q->ds.scale;
    if (e->scale == QSKP_SCALE_INITIAL)
        want = 1.0f;
    else if (e->scale == QSKP_SCALE_PREV)
        want = prev;
    else if (e->scale == QSKP_SCALE_HISTORY)
        want = scale_from_history(q, prev);
    if (qs_f32_bits(want) != qs_f32_bits(q->ds.scale) ||
        (e->scale && qs_f32_bits(q->ds.scale_inv) != qs_f32_bits(1.0f / q->ds.scale)))
        fail(ck,
             "%s: state (case line %d): %s.%s scale 0x%08x (scale_inv 0x%08x), expected 0x%08x "
             "(%s)",
             where(r, w, sizeof w), e->pos.line, e->op, role_name[e->role],
             (unsigned)qs_f32_bits(q->ds.scale), (unsigned)qs_f32_bits(q->ds.scale_inv),
             (unsigned)qs_f32_bits(want),
             e->scale == QSKP_SCALE_INITIAL ? "initial"
             : e->scale == QSKP_SCALE_PREV  ? "the scale before the step"
                                            : "from the history [REC-DS-SCALE]");
}

/* [CASE-PROG-REPLAYS]: the step replayed v->replays regions (checkpoint and mla_up_proj
 * regions alike), each reproducing the digest of the forward it discarded [RCP-AUDIT]. */
static void check_replays(vrun *r, checker *ck)
{
    char w[96];
    const qs_program_result *res = &r->res;
    if (res->nreplays != r->v->replays) {
        fail(ck, "%s: replays: expected %d, the run has %d", where(r, w, sizeof w), r->v->replays,
             res->nreplays);
        return;
    }
    for (int i = 0; i < res->nreplays && i < 16; i++)
        if (res->replay_digest[i] != res->replay_fwd_digest[i])
            fail(ck,
                 "%s: replay %d: digest 0x%016llx, the discarded forward's 0x%016llx "
                 "[RCP-REPLAY-BITWISE]",
                 where(r, w, sizeof w), i, (unsigned long long)res->replay_digest[i],
                 (unsigned long long)res->replay_fwd_digest[i]);
}

/* [DIST-COUNT]: the reductions each rank ran in the last step, per group. */
static void check_reductions(vrun *r, checker *ck)
{
    char w[96];
    for (int g = 0; g < r->v->nreductions; g++)
        if (r->red[g] != r->v->red_count[g])
            fail(ck, "%s: reductions on group %d: expected %lld, the run has %lld [DIST-COUNT]",
                 where(r, w, sizeof w), r->v->red_group[g], (long long)r->v->red_count[g],
                 (long long)r->red[g]);
}

static void after_step(vrun *r, checker *ck)
{
    if (r->step == r->v->steps)
        check_reductions(r, ck);
    const qskp_variant *v = r->v;
    check_recipes(r, ck);
    if (v->replays >= 0)
        check_replays(r, ck);
    if (v->has_trace && (v->trace_step ? v->trace_step : v->steps) == r->step)
        check_trace(r, ck);
    for (size_t i = 0; i < v->nstate; i++)
        if ((v->state[i].step ? v->state[i].step : v->steps) == r->step)
            check_state(r, ck, &v->state[i]);
}

/* Runs variant r->v step by step; r->ok when it ran to its end with no failed check. */
static void run_variant(vrun *r, checker *ck)
{
    const qskp_variant *v = r->v;
    char w[96];
    size_t nq = 0;
    if (!r->rank_ctx)
        r->ctx = qs_ctx_new();
    qs_status st = r->ctx ? qs_program_new(r->ctx, &r->p) : QS_ERR_NOMEM;
    if (st == QS_OK && r->pl) /* [CASE-KERNEL-TABLE] */
        st = qs_ctx_set_backend(r->ctx, r->pl->table, r->pl->state);
    r->x = r->x_shard ? r->x_shard : qsk_input_tensor(r->c, r->inputs, v->x);
    if (st == QS_OK)
        st = build(r, &((const qskp_program *)r->c->program)->root, QS_PROGRAM_ROOT, NULL);
    if (st == QS_OK)
        st = qs_program_set_replay(r->ctx, r->p, v->replay);
    nq = (size_t)(r->nops + 1) * QSKR_NQ;
    if (st == QS_OK && (!(r->before = calloc(nq, sizeof *r->before)) ||
                        !(r->before_has = calloc(nq, sizeof *r->before_has))))
        st = QS_ERR_NOMEM;
    if (st != QS_OK) {
        fail(ck, "variant '%s': building the program failed: %s", v->name,
             r->ctx ? qs_ctx_errmsg(r->ctx) : "out of memory");
        return;
    }
    qs_rng_set(r->ctx, v->rng_seed, v->rng_offset);
    int err_step = v->error.set ? (v->error.step ? v->error.step : v->steps) : 0;
    int inj_step = v->inject.kind ? (v->inject.step ? v->inject.step : v->steps) : 0;
    for (r->step = 1; r->step <= v->steps; r->step++) {
        int before = ck->count, bad;
        snapshot_before(r);
        for (int g = 0; g < v->nreductions; g++)
            r->red[g] = qs_dist_reductions(r->ctx, v->red_group[g]);
        if (r->step == err_step) {
            if (!expect_error_step(r, ck))
                r->ok = ck->count == before;
            for (size_t i = 0; r->ok && i < v->nstate; i++)
                if ((v->state[i].step ? v->state[i].step : v->steps) == r->step)
                    check_state(r, ck, &v->state[i]); /* the state the failure left */
            break;                                    /* the failed step ends the variant */
        }
        bad = r->step == inj_step ? inject_step(r, ck) : run_ok(r, ck);
        if (bad)
            return;
        for (int g = 0; g < v->nreductions; g++)
            r->red[g] = qs_dist_reductions(r->ctx, v->red_group[g]) - r->red[g];
        after_step(r, ck);
    }
    if (!err_step && r->step > v->steps) {
        char *text = NULL;
        size_t len = 0;
        st = qs_trace_to_jsonl(r->ctx, &r->res.trace, &text, &len);
        if (st == QS_OK)
            st = text_tensor(r->ctx, text, len, &r->trace);
        free(text);
        r->ok = st == QS_OK;
    }
    if (r->ok && state_bytes(r->ctx, r->p, &r->state) != QS_OK)
        r->ok = 0;
    if (!r->ok && ck->count == 0)
        fail(ck, "%s: out of memory", where(r, w, sizeof w));
}

/* ------------------------------------------------------------ variants on several ranks */

/* Splits the 2-D t into n blocks of rows (cols 0) or columns (cols 1), in rank order, the
 * first extent mod n blocks one longer [CASE-PROG-RANKS]. */
static qs_status split2(qs_ctx *ctx, const qs_tensor *t, int n, int cols, qs_tensor *parts)
{
    if (!cols)
        return qs_dist_split_rows(ctx, t, n, NULL, parts);
    int64_t R = t->shape[0], C = t->shape[1], c0 = 0;
    size_t es = t->nbytes / t->numel;
    for (int r = 0; r < n; r++) {
        int64_t w = C / n + (r < C % n ? 1 : 0), shape[2] = {R, w};
        qs_status st = qs_tensor_alloc(ctx, &parts[r], t->dtype, 2, shape);
        if (st != QS_OK) {
            while (r-- > 0)
                qs_tensor_free(&parts[r]);
            return st;
        }
        for (int64_t i = 0; i < R; i++)
            memcpy((char *)parts[r].data + (size_t)(i * w) * es,
                   (const char *)t->data + (size_t)(i * C + c0) * es, (size_t)w * es);
        c0 += w;
    }
    return QS_OK;
}

/* Joins n 2-D tensors of one dtype along rows (cols 0) or columns (cols 1). */
static qs_status join2(qs_ctx *ctx, const qs_tensor *parts, int n, int cols, qs_tensor *out)
{
    int64_t R = 0, C = 0;
    for (int r = 0; r < n; r++) {
        if (parts[r].ndim != 2 || parts[r].dtype != parts[0].dtype ||
            (cols ? parts[r].shape[0] != parts[0].shape[0]
                  : parts[r].shape[1] != parts[0].shape[1]))
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "the ranks' outputs do not join");
        R = cols ? parts[0].shape[0] : R + parts[r].shape[0];
        C = cols ? C + parts[r].shape[1] : parts[0].shape[1];
    }
    int64_t shape[2] = {R, C};
    qs_status st = qs_tensor_alloc(ctx, out, parts[0].dtype, 2, shape);
    size_t es = parts[0].nbytes / (parts[0].numel ? parts[0].numel : 1), at = 0;
    for (int r = 0, c0 = 0; st == QS_OK && r < n; r++) {
        if (!cols) {
            memcpy((char *)out->data + at, parts[r].data, parts[r].nbytes);
            at += parts[r].nbytes;
            continue;
        }
        int64_t w = parts[r].shape[1];
        for (int64_t i = 0; i < R; i++)
            memcpy((char *)out->data + (size_t)(i * C + c0) * es,
                   (const char *)parts[r].data + (size_t)(i * w) * es, (size_t)w * es);
        c0 += (int)w;
    }
    return st;
}

/* The group ids the regions of the program name. */
static void program_groups(const qskp_node *region, int *ids, int *n)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        if (s->kind != QSKP_AUTOCAST && s->kind != QSKP_CALIBRATE && s->kind != QSKP_CHECKPOINT &&
            s->kind != QSKP_ISLAND)
            continue;
        int seen = s->group == 0;
        for (int k = 0; k < *n; k++)
            seen |= ids[k] == s->group;
        if (!seen && *n < QS_DIST_MAX_GROUPS)
            ids[(*n)++] = s->group;
        program_groups(s, ids, n);
    }
}

/* The world of variant v: its groups, and the world group for every other group the
 * program names. *all_world is whether every group is the world group. */
static qs_status make_world(qs_ctx *ctx, const qskp_program *p, const qskp_variant *v,
                            qs_dist_world *w, int *all_world)
{
    int ids[QS_DIST_MAX_GROUPS], n = 0;
    qs_status st = qs_dist_world_init(ctx, w, v->ranks);
    *all_world = 1;
    for (int g = 0; st == QS_OK && g < v->ngroups; g++) {
        st = qs_dist_world_add_group(ctx, w, v->group_id[g], v->color[g]);
        for (int r = 1; r < v->ranks; r++)
            *all_world &= v->color[g][r] == v->color[g][0];
    }
    program_groups(&p->root, ids, &n);
    for (int k = 0; st == QS_OK && k < n; k++)
        if (!qs_dist_world_group(w, ids[k]))
            st = qs_dist_world_add_group(ctx, w, ids[k], NULL);
    return st;
}

/* The output gradient input of variant v, NULL without a backward. */
static const qs_tensor *dy_input(const vrun *r)
{
    const qskp_node *root = &((const qskp_program *)r->c->program)->root;
    const qskp_node *last = &root->body[root->nbody - 1];
    if (last->kind != QSKP_BACKWARD || !qskp_node_in(last, r->v))
        return NULL;
    return qsk_input_tensor(r->c, r->inputs, r->v->dy[0] ? r->v->dy : last->in[0]);
}

/* The weight of the variant's one linear op (tensor parallel). */
static const qskp_node *first_linear(const qskp_node *region, const qskp_variant *v)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i], *f = NULL;
        if (s->kind == QSKP_LINEAR && qskp_node_in(s, v))
            return s;
        if (!QSKP_IS_OP(s->kind) && s->kind != QSKP_BACKWARD && (f = first_linear(s, v)))
            return f;
    }
    return NULL;
}

typedef struct ranks_job {
    vrun *rr;
    checker *ck;
} ranks_job;

static qs_status rank_variant(qs_ctx *ctx, int rank, void *user)
{
    ranks_job *j = user;
    j->rr[rank].ctx = ctx;
    run_variant(&j->rr[rank], &j->ck[rank]);
    return j->rr[rank].ok ? QS_OK : QS_ERR_STATE;
}

/* The quantizer part of a state output (the RNG state, its last 16 bytes, left out: a
 * rank's stream advances by its own shard sizes). */
static int same_quantizers(const qs_tensor *a, const qs_tensor *b)
{
    return a->nbytes == b->nbytes && a->nbytes >= 16 &&
           memcmp(a->data, b->data, a->nbytes - 16) == 0;
}

/* Gathers the ranks' runs into r [CASE-PROG-RANKS]: y joined along the sharded dimension,
 * dx and every gradient stacked by rows in rank order, state and trace rank 0's. */
static qs_status gather(vrun *r, vrun *rr, int n, qs_tensor *tmp)
{
    qs_ctx *ctx = r->ctx;
    int cols = r->v->parallel == QS_DIST_TENSOR, nops = rr[0].nops;
    r->nops = nops;
    r->ops = calloc((size_t)nops + 1, sizeof *r->ops);
    r->res.grads = calloc((size_t)nops + 1, sizeof *r->res.grads);
    r->res.nops = nops;
    if (!r->ops || !r->res.grads)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    memcpy(r->ops, rr[0].ops, (size_t)nops * sizeof *r->ops);
    for (int k = 0; k < n; k++)
        tmp[k] = rr[k].res.y;
    qs_status st = join2(ctx, tmp, n, cols, &r->res.y);
    for (int k = 0; k < n && st == QS_OK && rr[0].res.dx.data; k++)
        tmp[k] = rr[k].res.dx;
    if (st == QS_OK && rr[0].res.dx.data)
        st = join2(ctx, tmp, n, 0, &r->res.dx);
    for (int op = 0; st == QS_OK && rr[0].res.grads && op < nops; op++) {
        if (!rr[0].res.grads[op].data)
            continue;
        for (int k = 0; k < n; k++)
            tmp[k] = rr[k].res.grads[op];
        st = join2(ctx, tmp, n, 0, &r->res.grads[op]);
    }
    if (st == QS_OK)
        st = qs_tensor_clone(ctx, &r->state, &rr[0].state);
    if (st == QS_OK)
        st = qs_tensor_clone(ctx, &r->trace, &rr[0].trace);
    return st;
}

/* A variant on v->ranks simulated ranks [CASE-PROG-RANKS]: one run_variant per rank, all at
 * once (qs_dist_world_run), on the rank's shards; then the ranks' results gathered into r.
 * Every rank's own checks apply; with world groups only, every rank's quantizer state must
 * be bitwise rank 0's [DIST-CS-EQUAL] [DIST-DS-EQUAL]. */
static void run_ranks(vrun *r, checker *ck)
{
    const qskp_variant *v = r->v;
    int n = v->ranks, all_world = 1, cols = v->parallel == QS_DIST_TENSOR;
    qs_dist_world w;
    qsk_plugin_serial serial; /* [CASE-KERNEL-TABLE] the ranks' threads share the plugin */
    memset(&serial, 0, sizeof serial);
    vrun *rr = calloc((size_t)n, sizeof *rr);
    checker *cks = calloc((size_t)n, sizeof *cks);
    qs_tensor *xs = calloc((size_t)n, sizeof *xs), *dys = calloc((size_t)n, sizeof *dys);
    qs_tensor *ws = calloc((size_t)n, sizeof *ws), *tmp = calloc((size_t)n, sizeof *tmp);
    memset(&w, 0, sizeof w);
    r->ctx = qs_ctx_new();
    qs_status st = rr && cks && xs && dys && ws && tmp && r->ctx ? QS_OK : QS_ERR_NOMEM;
    const qs_tensor *x = qsk_input_tensor(r->c, r->inputs, v->x), *dy = dy_input(r);
    if (st == QS_OK)
        st = make_world(r->ctx, r->c->program, v, &w, &all_world);
    if (st == QS_OK && r->pl)
        st = qsk_plugin_serial_init(&serial, r->pl);
    if (st == QS_OK && !cols)
        st = split2(r->ctx, x, n, 0, xs);
    if (st == QS_OK && dy)
        st = split2(r->ctx, dy, n, cols, dys);
    if (st == QS_OK && cols) {
        const qskp_node *lin = first_linear(&((const qskp_program *)r->c->program)->root, v);
        st = split2(r->ctx, qsk_input_tensor(r->c, r->inputs, lin->in[0]), n, 0, ws);
    }
    for (int k = 0; st == QS_OK && k < n; k++) {
        rr[k].v = v;
        rr[k].c = r->c;
        rr[k].inputs = r->inputs;
        rr[k].rank_ctx = 1;
        rr[k].pl = r->pl ? &serial.plugin : NULL;
        rr[k].x_shard = cols ? NULL : &xs[k];
        rr[k].dy_shard = dy ? &dys[k] : NULL;
        rr[k].w_shard = cols ? &ws[k] : NULL;
    }
    ranks_job job = {rr, cks};
    if (st == QS_OK)
        qs_dist_world_run(r->ctx, &w, rank_variant, &job, NULL);
    int ok = st == QS_OK;
    for (int k = 0; ok && k < n; k++) { /* a rank's refusal or weak claim is the variant's */
        if (rr[k].refused && !r->refused) {
            r->refused = 1;
            snprintf(r->refused_why, sizeof r->refused_why, "rank %d: %s", k, rr[k].refused_why);
        }
        r->claim = rr[k].claim > r->claim ? rr[k].claim : r->claim;
        r->attn_tol |= rr[k].attn_tol;
    }
    for (int k = 0; ok && k < n; k++) {
        if (cks[k].count) {
            fail(ck, "rank %d: %s", k, cks[k].first);
            ok = 0;
        } else if (!rr[k].ok) {
            ok = 0;
        }
    }
    for (int k = 1; ok && all_world && k < n; k++)
        if (!same_quantizers(&rr[k].state, &rr[0].state)) {
            fail(ck,
                 "variant '%s': rank %d's quantizer state differs from rank 0's under world "
                 "groups [DIST-CS-EQUAL] [DIST-DS-EQUAL]",
                 v->name, k);
            ok = 0;
        }
    if (ok && (st = gather(r, rr, n, tmp)) == QS_OK)
        r->ok = 1;
    if (st != QS_OK)
        fail(ck, "variant '%s' on %d ranks: %s", v->name, n,
             r->ctx ? qs_ctx_errmsg(r->ctx) : "out of memory");
    for (int k = 0; rr && k < n; k++) {
        vrun_free(&rr[k]);
        if (xs)
            qs_tensor_free(&xs[k]);
        if (dys)
            qs_tensor_free(&dys[k]);
        if (ws)
            qs_tensor_free(&ws[k]);
    }
    qs_dist_world_free(&w);
    qsk_plugin_serial_free(&serial);
    free(rr);
    free(cks);
    free(xs);
    free(dys);
    free(ws);
    free(tmp);
}

/* ------------------------------------------------------------ outputs */

/* The output name of variant r's tensor named name (y, dx, grad.NAME, state, trace,
 * error), or NULL. */
static const qs_tensor *vrun_get(const vrun *r, const char *name)
{
    if (!r->ok)
        return NULL;
    if (strcmp(name, "state") == 0)
        return &r->state;
    if (strcmp(name, "trace") == 0)
        return r->v->error.set ? NULL : &r->trace;
    if (strcmp(name, "error") == 0)
        return r->v->error.set ? &r->error : NULL;
    if (r->v->error.set)
        return NULL;
    if (strcmp(name, "y") == 0)
        return &r->res.y;
    if (strcmp(name, "dx") == 0)
        return r->res.dx.data ? &r->res.dx : NULL;
    if (strncmp(name, "grad.", 5) == 0) {
        int pm, op = -1;
        const qskp_node *node = qskp_grad_find(r->c->program, r->v, name + 5, &pm);
        for (int i = 0; node && i < r->nops; i++)
            if (r->ops[i] == node)
                op = i;
        if (op >= 0 && pm >= 0) /* an mla op's parameter */
            return qs_program_result_mla_grad(&r->res, op, (qs_mla_param)pm);
        return op >= 0 && r->res.grads && r->res.grads[op].data ? &r->res.grads[op] : NULL;
    }
    return NULL;
}

/* Splits "V/name" into the variant and the name; no '/' means the first variant. */
static const qskp_variant *output_variant(const qskp_program *p, const char *full,
                                          const char **name)
{
    const char *slash = strchr(full, '/');
    *name = slash ? slash + 1 : full;
    if (!slash)
        return &p->variants[0];
    char v[QSK_NAME_LEN];
    snprintf(v, sizeof v, "%.*s", (int)(slash - full), full);
    return qskp_variant_find(p, v);
}

/* ------------------------------------------------------------ comparisons */

static void describe_diff(const qs_tensor *a, const qs_tensor *b, char *buf, size_t cap)
{
    if (!qs_tensor_same_layout(a, b)) {
        snprintf(buf, cap, "the dtypes or shapes differ");
        return;
    }
    size_t first = 0, count = 0;
    for (size_t i = 0; i < a->numel; i++)
        if (qsk_elem_bits(a, i) != qsk_elem_bits(b, i) && count++ == 0)
            first = i;
    char ea[96], eb[96];
    qsk_format_elem(b, first, ea, sizeof ea);
    qsk_format_elem(a, first, eb, sizeof eb);
    snprintf(buf, cap, "index=%zu expected=%s observed=%s mismatches=%zu/%zu", first, ea, eb, count,
             a->numel);
}

static void compare_one(const vrun *a, const vrun *b, const qskp_cmp *c, const char *out,
                        checker *ck)
{
    const qs_tensor *ta = vrun_get(a, out), *tb = vrun_get(b, out);
    static const char *const verbs[] = {"same_as", "differs_from", "close_to"};
    char why[512];
    if (!ta || !tb) {
        fail(ck, "variant '%s' %s '%s': output %s is missing", a->v->name, verbs[c->kind],
             b->v->name, out);
        return;
    }
    int same = same_bits(ta, tb);
    if (c->kind == QSKP_SAME_AS && !same) {
        describe_diff(ta, tb, why, sizeof why);
        fail(ck, "variant '%s' same_as '%s': output=%s differs: %s (case line %d)", a->v->name,
             b->v->name, out, why, c->pos.line);
    } else if (c->kind == QSKP_DIFFERS_FROM && same) {
        fail(ck,
             "variant '%s' differs_from '%s': output=%s is bitwise identical, so the claim "
             "is vacuous (case line %d)",
             a->v->name, b->v->name, out, c->pos.line);
    } else if (c->kind == QSKP_CLOSE_TO) {
        qsk_cmp_result cr;
        if (qsk_compare(&c->tol, tb, ta, NULL, &cr))
            return;
        if (cr.detail[0])
            snprintf(why, sizeof why, "%s", cr.detail);
        else if (cr.mismatches == 0)
            snprintf(why, sizeof why, "metric %.9g outside the bound %.9g", cr.metric, c->tol.p1);
        else
            snprintf(why, sizeof why, "index=%zu expected=%s observed=%s mismatches=%zu/%zu",
                     cr.first, cr.expected, cr.observed, cr.mismatches, ta->numel);
        fail(ck, "variant '%s' close_to '%s': output=%s: %s (case line %d)", a->v->name, b->v->name,
             out, why, c->pos.line);
    }
}

/* [CASE-PROG-COMPARE]: "grads" stands for every op's gradient, in build order (a gelu op
 * has none, [RCP-GELU-OP]). */
static void compare_variants(const vrun *a, const vrun *b, const qskp_cmp *c, checker *ck)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        if (strcmp(c->outputs[i], "grads") != 0) {
            compare_one(a, b, c, c->outputs[i], ck);
            continue;
        }
        for (int op = 0; op < a->nops; op++) {
            if (a->ops[op]->kind == QSKP_GELU)
                continue;
            char name[QSK_NAME_LEN];
            snprintf(name, sizeof name, "grad.%s", a->ops[op]->name);
            compare_one(a, b, c, name, ck);
        }
    }
}

/* ------------------------------------------------------------ the op */

static qs_status program_check(qs_ctx *ctx, const qsk_case *c)
{
    const qskp_program *p = c->program;
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op 'program' needs a 'program'", c->file,
                            c->pos.line, c->pos.col);
    for (size_t i = 0; i < c->noutputs; i++) {
        const qsk_output *o = &c->outputs[i];
        const char *name;
        const qskp_variant *v = output_variant(p, o->name, &name);
        const char *why = NULL;
        int pm;
        if (!v)
            why = "names no variant of the program";
        else if (strcmp(name, "error") == 0 && !v->error.set)
            why = "is an error message, but the variant expects no error";
        else if (v->error.set && strcmp(name, "state") != 0 && strcmp(name, "error") != 0)
            why = "is not produced: the variant expects an error (it has 'state' and 'error')";
        else if (strcmp(name, "y") != 0 && strcmp(name, "dx") != 0 &&
                 strncmp(name, "grad.", 5) != 0 && strcmp(name, "state") != 0 &&
                 strcmp(name, "trace") != 0 && strcmp(name, "error") != 0)
            why = "is not a program output (y, dx, grad.NAME, state, trace, error)";
        else if (strncmp(name, "grad.", 5) == 0 && !qskp_grad_find(p, v, name + 5, &pm))
            why = "names no op of the variant (or parameter of its mla op)";
        if (!why && (strcmp(name, "dx") == 0 || strncmp(name, "grad.", 5) == 0)) {
            const qskp_node *last = &p->root.body[p->root.nbody - 1];
            if (last->kind != QSKP_BACKWARD || !qskp_node_in(last, v))
                why = "is not produced: the variant runs no backward";
        }
        if (why)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: output '%s' %s", c->file,
                                o->pos.line, o->pos.col, o->name, why);
    }
    return QS_OK;
}

/* Runs every variant (on the reference, or with pl's kernels), checks them and their
 * comparisons, and moves the case's outputs into out. On a plugin, *claim gets the weakest
 * gemm claim of all runs; a slot's refusal makes the case QS_ERR_UNSUPPORTED. */
static qs_status framework_outputs(qs_ctx *ctx, const qsk_case *c, const vrun *runs,
                                   qsk_results *out);

static qs_status run_program(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                             const qsk_plugin *pl, qsk_results *out, qs_gemm_claim *claim,
                             int *attn_tol, int framework)
{
    const qskp_program *p = c->program;
    vrun *runs = calloc(p->nvariants, sizeof *runs);
    checker ck = {"", 0};
    if (!runs)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < p->nvariants; i++) {
        runs[i].v = &p->variants[i];
        runs[i].c = c;
        runs[i].inputs = inputs;
        runs[i].pl = pl;
        if (p->variants[i].ranks > 1)
            run_ranks(&runs[i], &ck);
        else
            run_variant(&runs[i], &ck);
    }
    for (size_t i = 0; i < p->nvariants; i++)
        for (size_t k = 0; runs[i].ok && k < p->variants[i].ncmp; k++) {
            const qskp_cmp *cmp = &p->variants[i].cmp[k];
            const vrun *other = &runs[qskp_variant_find(p, cmp->variant) - p->variants];
            if (other->ok)
                compare_variants(&runs[i], other, cmp, &ck);
        }
    qs_status st = QS_OK;
    for (size_t i = 0; i < p->nvariants && st == QS_OK; i++) {
        if (runs[i].refused) /* [CASE-BACKEND-UNSUPPORTED]: no verdict from a refused run */
            st = qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "variant '%s': %s", p->variants[i].name,
                              runs[i].refused_why);
        if (claim && runs[i].claim > *claim)
            *claim = runs[i].claim;
        if (attn_tol && runs[i].attn_tol)
            *attn_tol = 1;
    }
    if (framework && ck.count == 0 && st == QS_OK)
        st = framework_outputs(ctx, c, runs, out);
    for (size_t i = 0; !framework && ck.count == 0 && st == QS_OK && i < c->noutputs; i++) {
        const char *name;
        const qskp_variant *v = output_variant(p, c->outputs[i].name, &name);
        const qs_tensor *t = vrun_get(&runs[v - p->variants], name);
        qs_tensor copy;
        if (!t) {
            fail(&ck, "output %s was not produced", c->outputs[i].name);
            break;
        }
        st = qs_tensor_clone(ctx, &copy, t);
        if (st == QS_OK)
            st = qsk_results_add(ctx, out, c->outputs[i].name, &copy);
    }
    for (size_t i = 0; i < p->nvariants; i++)
        vrun_free(&runs[i]);
    free(runs);
    if (st == QS_OK && ck.count)
        st = qs_ctx_error(ctx, QS_ERR_STATE, "%s%s", ck.first,
                          ck.count > 1 ? " (and more failed checks)" : "");
    return st;
}

static qs_status program_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                             qsk_results *out)
{
    return run_program(ctx, c, inputs, NULL, out, NULL, NULL, 0);
}

/* ------------------------------------------------------------ for an external framework */

const char *qsk_program_framework_why(const qskp_variant *v)
{
    if (v->inject.kind != QSKP_INJECT_NONE)
        return "it injects an engine fault (inject_error)";
    if (v->error.set)
        return "it expects an engine error (expect_error)";
    if (v->ranks > 1)
        return "it runs on simulated ranks";
    if (v->replay != QS_REPLAY_SPEC)
        return "it replays under a non-normative replay variant";
    return NULL;
}

/* [CASE-GEN-PROG]: the outputs of every variant a framework can run, as "V/y", "V/dx",
 * "V/grad.OP" (every op in build order) and "V/trace". */
static qs_status framework_outputs(qs_ctx *ctx, const qsk_case *c, const vrun *runs,
                                   qsk_results *out)
{
    const qskp_program *p = c->program;
    qs_status st = QS_OK;
    for (size_t i = 0; i < p->nvariants && st == QS_OK; i++) {
        const vrun *r = &runs[i];
        if (qsk_program_framework_why(r->v))
            continue;
        static const char *const fixed[] = {"y", "dx", "trace"};
        for (int op = -3; op < r->nops && st == QS_OK; op++) {
            char local[QSK_NAME_LEN], full[2 * QSK_NAME_LEN];
            if (op < 0)
                snprintf(local, sizeof local, "%s", fixed[op + 3]);
            else
                snprintf(local, sizeof local, "grad.%s", r->ops[op]->name);
            const qs_tensor *t = vrun_get(r, local);
            qs_tensor copy;
            if (!t)
                continue; /* dx and the gradients of a forward-only variant */
            snprintf(full, sizeof full, "%s/%s", r->v->name, local);
            st = qs_tensor_clone(ctx, &copy, t);
            if (st == QS_OK)
                st = qsk_results_add(ctx, out, full, &copy);
        }
    }
    return st;
}

qs_status qsk_program_framework_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                                    qsk_results *out)
{
    return run_program(ctx, c, inputs, NULL, out, NULL, NULL, 1);
}

/* [CASE-PROG-BACKEND] [CASE-KERNEL-TABLE] [CASE-BACKEND-UNSUPPORTED]: the slots and
 * capabilities a program needs on a plugin, the first one missing written into why: the
 * gemm slot for any linear or mla op (high-precision linears are unscaled operands,
 * QS_CAP_GEMM_TENSOR); for each recipe a region names, its quantizer and its GEMM family;
 * sdpa for an mla op and gdn for a gdn op (forward and backward); the distributed
 * capability for a region of a group. */
static const struct {
    uint64_t quant, gemm;
    const char *quant_name, *gemm_name;
} recipe_caps[QS_RECIPE_COUNT] = {
    [QS_RECIPE_DELAYED] = {QS_CAP_QUANT_DELAYED, QS_CAP_GEMM_TENSOR, "QS_CAP_QUANT_DELAYED",
                           "QS_CAP_GEMM_TENSOR"},
    [QS_RECIPE_CURRENT] = {QS_CAP_QUANT_CURRENT, QS_CAP_GEMM_TENSOR, "QS_CAP_QUANT_CURRENT",
                           "QS_CAP_GEMM_TENSOR"},
    [QS_RECIPE_MXFP8] = {QS_CAP_QUANT_MXFP8, QS_CAP_GEMM_MX, "QS_CAP_QUANT_MXFP8",
                         "QS_CAP_GEMM_MX"},
    [QS_RECIPE_BLOCK] = {QS_CAP_QUANT_BLOCK, QS_CAP_GEMM_BLOCK, "QS_CAP_QUANT_BLOCK",
                         "QS_CAP_GEMM_BLOCK"},
    [QS_RECIPE_NVFP4] = {QS_CAP_QUANT_NVFP4, QS_CAP_GEMM_NVFP4, "QS_CAP_QUANT_NVFP4",
                         "QS_CAP_GEMM_NVFP4"},
    [QS_RECIPE_ROWWISE] = {QS_CAP_QUANT_ROWWISE, QS_CAP_GEMM_TENSOR, "QS_CAP_QUANT_ROWWISE",
                           "QS_CAP_GEMM_TENSOR"},
    [QS_RECIPE_ROWWISE_GW_HP] = {QS_CAP_QUANT_ROWWISE, QS_CAP_GEMM_TENSOR, "QS_CAP_QUANT_ROWWISE",
                                 "QS_CAP_GEMM_TENSOR"},
};

static void missing_slot(const qs_backend *t, const qskp_node *s, char *why, size_t cap)
{
    for (size_t i = 0; i < s->nbody && !why[0]; i++) {
        const qskp_node *b = &s->body[i];
        int region = b->kind == QSKP_AUTOCAST || b->kind == QSKP_CALIBRATE;
        if ((b->kind == QSKP_LINEAR || b->kind == QSKP_MLA) &&
            (!t->gemm || !(t->caps & QS_CAP_GEMM_TENSOR)))
            snprintf(why, cap, "has no gemm slot for unscaled operands (QS_CAP_GEMM_TENSOR)");
        else if (b->kind == QSKP_MLA && (!t->sdpa_fwd || !t->sdpa_bwd || !(t->caps & QS_CAP_SDPA)))
            snprintf(why, cap, "has no sdpa_fwd and sdpa_bwd slots (QS_CAP_SDPA) for mla '%s'",
                     b->name);
        else if (b->kind == QSKP_GDN && (!t->gdn_fwd || !t->gdn_bwd || !(t->caps & QS_CAP_GDN)))
            snprintf(why, cap, "has no gdn_fwd and gdn_bwd slots (QS_CAP_GDN) for gdn '%s'",
                     b->name);
        else if (region && b->has_recipe && (unsigned)b->recipe.kind < QS_RECIPE_COUNT &&
                 (!t->quantize || !(t->caps & recipe_caps[b->recipe.kind].quant)))
            snprintf(why, cap, "has no quantize slot for recipe %s (%s)",
                     qs_recipe_kind_name(b->recipe.kind), recipe_caps[b->recipe.kind].quant_name);
        else if (region && b->has_recipe && (unsigned)b->recipe.kind < QS_RECIPE_COUNT &&
                 !(t->caps & recipe_caps[b->recipe.kind].gemm))
            snprintf(why, cap, "has no gemm for recipe %s operands (%s)",
                     qs_recipe_kind_name(b->recipe.kind), recipe_caps[b->recipe.kind].gemm_name);
        else if (region && b->group != 0 && !(t->caps & QS_CAP_DIST))
            snprintf(why, cap, "has no given-amax quantization (QS_CAP_DIST) for group %d",
                     b->group);
        else
            missing_slot(t, b, why, cap);
    }
}

/* [CASE-PLUGIN-TOL] The normwise relative error of x against e over the elements where e is
 * finite, or -1 when it cannot be taken (a shape mismatch, a NaN or infinity in one of them
 * where the other has not the same); 0 when both are all zeros, +inf when only e is. */
double qsk_normwise_error(const qs_tensor *e, const qs_tensor *x)
{
    if (e->numel != x->numel)
        return -1.0;
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < e->numel; i++) {
        double a = qsk_elem_value(e, i), b = qsk_elem_value(x, i);
        if (a != a || b != b) {
            if (a != a && b != b)
                continue; /* NaN where the reference has NaN */
            return -1.0;
        }
        if (isinf(a) || isinf(b)) {
            if (a == b)
                continue;
            return -1.0;
        }
        num += (b - a) * (b - a);
        den += a * a;
    }
    if (num != num || den != den)
        return -1.0;
    return den > 0.0 ? sqrt(num / den) : num > 0.0 ? HUGE_VAL : 0.0;
}

/* [CASE-PLUGIN-TOL] Compares each of mine's outputs whose case states no comparison other
 * than bitwise with the reference's within 2^-7 normwise, and marks it compared; the others
 * keep the case's comparison. */
static qs_status tolerance_check(qs_ctx *ctx, const qsk_case *c, const qsk_results *ref,
                                 qsk_results *mine)
{
    for (size_t i = 0; i < mine->n; i++) {
        const qsk_output *o = NULL;
        for (size_t k = 0; k < c->noutputs; k++)
            if (strcmp(c->outputs[k].name, mine->names[i]) == 0)
                o = &c->outputs[k];
        const qs_tensor *e = qsk_results_get(ref, mine->names[i]);
        if (!o || !e || o->cmp != QSK_CMP_BITWISE)
            continue;
        double err = qsk_normwise_error(e, &mine->t[i]);
        if (err < 0.0 || err > 0x1p-7)
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "output=%s: normwise relative error %s%.6g against the reference "
                                "exceeds 2^-7 (its kernels claim no reference arithmetic) "
                                "[CASE-PLUGIN-TOL]",
                                o->name, err < 0.0 ? "(NaN or shape) " : "", err < 0.0 ? 0.0 : err);
        mine->checked[i] = 1;
    }
    return QS_OK;
}

/* On a plugin: the engine runs every variant with the plugin's kernels; the kit's checks
 * of each run and the comparisons between variants are the self-consistency and trace
 * checks [CASE-PLUGIN-SELF] [CASE-PLUGIN-TRACE]; a run whose kernels all claim the
 * reference's arithmetic hands its outputs to the comparison with the reference
 * [CASE-PLUGIN-REF]; any other run is held to the default tolerance [CASE-PLUGIN-TOL] against
 * ref, the outputs of the run's one reference run. Simulated ranks (threads of one process)
 * run the plugin's kernels too, one slot call at a time (qsk_plugin_serial). */
static qs_status program_backend(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                                 const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    const qskp_program *p = c->program;
    char why[192] = "";
    missing_slot(pl->table, &p->root, why, sizeof why);
    for (size_t i = 0; !why[0] && i < p->nvariants; i++)
        if (p->variants[i].ranks > 1 && !(pl->table->caps & QS_CAP_DIST))
            snprintf(why, sizeof why,
                     "has no given-amax quantization (QS_CAP_DIST) for variant '%s' on %d "
                     "simulated ranks",
                     p->variants[i].name, p->variants[i].ranks);
    if (why[0]) {
        qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "backend %s %s: program case %s is not supported",
                     pl->table->name, why, c->id);
        return QS_ERR_UNSUPPORTED;
    }
    qs_gemm_claim claim = QS_GEMM_CLAIM_MODEL;
    qsk_results mine = {0};
    int attn_tol = 0;
    qs_status st = run_program(ctx, c, inputs, pl, &mine, &claim, &attn_tol, 0);
    /* the reference's outputs are the run's (its one run of the reference); a case of no
     * outputs [CASE-TIER-SELF] has none */
    int tol = st == QS_OK && !c->self_only && (claim != QS_GEMM_CLAIM_MODEL || attn_tol);
    if (tol && !ref)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                          "program case %s: no reference outputs to hold the backend's to", c->id);
    else if (tol)
        st = tolerance_check(ctx, c, ref, &mine);
    if (st == QS_OK)
        for (size_t i = 0; i < mine.n && st == QS_OK; i++) {
            st = qsk_results_add(ctx, out, mine.names[i], &mine.t[i]);
            memset(&mine.t[i], 0, sizeof mine.t[i]);
            if (st == QS_OK)
                out->checked[out->n - 1] = tol && mine.checked[i];
        }
    qsk_results_free(&mine);
    return st;
}

const qsk_op qsk_op_program = {"program",
                               "a program of scoping regions over ops on the reference engine "
                               "(spec/cases.md, Programs)",
                               program_check, program_ref, program_backend};
