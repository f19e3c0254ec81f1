/* test_recompute.c: programs on the reference engine (spec/recompute.md, spec/scoping.md):
 * the replay contract and non-vacuity per recipe, MLP blocks with a gelu op (eager,
 * checkpointed, in an island), GDN islands between quantized linears
 * (eager and checkpointed), calibration inside and outside islands, delayed-scaling update
 * timing over several steps with checkpoints, the replay audit, the JSON-lines trace, and
 * the fault-injection sweep over every program of this file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qspec/program.h"
#include "qspec/random.h"
#include "qstensor.h"
#include "qstest.h"

#define ROWS 32
#define DIM  32

/* ---------------------------------------------------------------- helpers */

/* A [rows, cols] BF16 tensor of uniform values in [-amp, amp) from Philox stream seed. */
static void make_bf16(qs_tensor *t, int64_t rows, int64_t cols, uint64_t seed, float amp)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    for (size_t i = 0; i < t->numel; i++) {
        float u = qs_random_uniform(seed, 0, i) * 2.0f - 1.0f;
        ((uint16_t *)t->data)[i] = qs_f32_to_bf16(u * amp);
    }
}

static float amax_of(const qs_tensor *t)
{
    float m = 0.0f;
    for (size_t i = 0; i < t->numel; i++)
        m = fabsf((float)value(t, i)) > m ? fabsf((float)value(t, i)) : m;
    return m;
}

/* Inputs shared by every program: x, dy, four weights, GDN gates. */
typedef struct fixture {
    qs_tensor x, dy, w[4];
    float g[ROWS], beta[ROWS];
} fixture;

static void fixture_init(fixture *f)
{
    make_bf16(&f->x, ROWS, DIM, 1, 2.0f);
    make_bf16(&f->dy, ROWS, DIM, 2, 1.0f);
    for (int i = 0; i < 4; i++)
        make_bf16(&f->w[i], DIM, DIM, 10 + (uint64_t)i, 0.35f);
    for (int t = 0; t < ROWS; t++) {
        f->g[t] = -0.05f - 0.01f * (float)(t % 5);
        f->beta[t] = 0.3f + 0.02f * (float)(t % 7);
    }
}

static void fixture_free(fixture *f)
{
    qs_tensor_free(&f->x);
    qs_tensor_free(&f->dy);
    for (int i = 0; i < 4; i++)
        qs_tensor_free(&f->w[i]);
}

static qs_scope_recipe recipe_for(qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    if (kind == QS_RECIPE_DELAYED)
        for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
            r.cfg[i].history_len = 8; /* small, so that the roll is visible */
    if (kind == QS_RECIPE_NVFP4)
        r.cfg[QS_SCOPE_X].sr = 1; /* random bits in forward too: the RNG must replay */
    return r;
}

static int add_autocast(qs_program *p, int parent, const qs_scope_recipe *r)
{
    qs_autocast_params a = {1, 0, r, 0};
    int id;
    ck_assert_int_eq(qs_program_autocast(NULL, p, parent, &a, &id), QS_OK);
    return id;
}

static int add_ckpt(qs_program *p, int parent)
{
    int id;
    ck_assert_int_eq(qs_program_checkpoint(NULL, p, parent, &id), QS_OK);
    return id;
}

static int add_island(qs_program *p, int parent)
{
    int id;
    ck_assert_int_eq(qs_program_island(NULL, p, parent, &id), QS_OK);
    return id;
}

static void add_linear(qs_program *p, int parent, const fixture *f, int i)
{
    char name[8];
    int id;
    snprintf(name, sizeof name, "lin%d", i + 1);
    ck_assert_int_eq(qs_program_linear(NULL, p, parent, name, &f->w[i], &id), QS_OK);
}

static void add_gdn(qs_program *p, int parent, const fixture *f)
{
    int id;
    ck_assert_int_eq(qs_program_gdn(NULL, p, parent, "gdn", ROWS, f->g, f->beta, &id), QS_OK);
}

/* autocast(kind) { lin1, [checkpoint] { lin2, lin3 }, lin4 }; kind < 0: no autocast. */
static qs_program *chain(const fixture *f, int kind, int ckpt)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for(kind < 0 ? QS_RECIPE_CURRENT : (qs_recipe_kind)kind);
    int top = kind < 0 ? QS_PROGRAM_ROOT : add_autocast(p, QS_PROGRAM_ROOT, &r);
    add_linear(p, top, f, 0);
    int mid = ckpt ? add_ckpt(p, top) : top;
    add_linear(p, mid, f, 1);
    add_linear(p, mid, f, 2);
    add_linear(p, top, f, 3);
    return p;
}

/* autocast(kind) { lin1, <island placement>, lin2 }: placement 0 island{gdn}, 1
 * checkpoint{island{gdn}}, 2 island{checkpoint{gdn}}. */
static qs_program *island_prog(const fixture *f, qs_recipe_kind kind, int placement)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for(kind);
    int top = add_autocast(p, QS_PROGRAM_ROOT, &r);
    add_linear(p, top, f, 0);
    int parent = placement == 1 ? add_ckpt(p, top) : top;
    int isl = add_island(p, parent);
    add_gdn(p, placement == 2 ? add_ckpt(p, isl) : isl, f);
    add_linear(p, top, f, 1);
    return p;
}

static int nonzero_slots(const qs_quantizer *q);

static void run_ok(qs_ctx *ctx, qs_program *p, const fixture *f, qs_program_result *res)
{
    qs_status s = qs_program_run(ctx, p, &f->x, &f->dy, res);
    ck_assert_msg(s == QS_OK, "program_run: %s: %s", qs_status_name(s), qs_ctx_errmsg(ctx));
}

static void expect_same_results(const qs_program_result *a, const qs_program_result *b)
{
    expect_bitwise("y", &a->y, &b->y);
    expect_bitwise("dx", &a->dx, &b->dx);
    ck_assert_int_eq(a->nops, b->nops);
    for (int i = 0; i < a->nops; i++)
        expect_bitwise("parameter gradient", &a->grads[i], &b->grads[i]);
}

static void expect_same_quantizers(const qs_program *a, const qs_program *b)
{
    for (int op = 0; op < qs_program_op_count(a); op++)
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++) {
                const qs_quantizer *qa = qs_program_quantizer(a, op, k, r);
                const qs_quantizer *qb = qs_program_quantizer(b, op, k, r);
                ck_assert_int_eq(qa == NULL, qb == NULL);
                if (!qa)
                    continue;
                ck_assert_uint_eq(qs_f32_bits(qa->ds.scale), qs_f32_bits(qb->ds.scale));
                ck_assert_int_eq(qa->ds.len, qb->ds.len);
                if (qa->ds.history)
                    ck_assert_int_eq(
                        memcmp(qa->ds.history, qb->ds.history, (size_t)qa->ds.len * sizeof(float)),
                        0);
            }
}

static const qs_trace_record *find_rec(const qs_trace *t, const char *op, qs_trace_phase ph,
                                       int nth)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rec[i].op, op) == 0 && t->rec[i].phase == ph && nth-- == 0)
            return &t->rec[i];
    return NULL;
}

/* ---------------------------------------------------------------- replay contract */

/* [RCP-REPLAY-BITWISE] [RCP-REPLAY] [RCP-RECORD] for every recipe: the replayed output is
 * bitwise the discarded forward output, and the output, dx and every parameter gradient
 * are bitwise those of the same program without the checkpoint; states end equal. */
START_TEST(test_replay_is_bitwise_for_every_recipe)
{
    fixture f;
    fixture_init(&f);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
        qs_rng_set(c1, 77, 5);
        qs_rng_set(c2, 77, 5);
        qs_program *pc = chain(&f, kind, 1), *pe = chain(&f, kind, 0);
        qs_program_result rc, re;
        run_ok(c1, pc, &f, &rc);
        run_ok(c2, pe, &f, &re);
        ck_assert_int_eq(rc.nreplays, 1);
        ck_assert_int_eq(re.nreplays, 0);
        ck_assert_uint_eq(rc.replay_digest[0], rc.replay_fwd_digest[0]);
        expect_same_results(&rc, &re);
        expect_same_quantizers(pc, pe);
        uint64_t s1, o1, s2, o2;
        qs_rng_get(c1, &s1, &o1);
        qs_rng_get(c2, &s2, &o2);
        ck_assert_uint_eq(o1, o2);
        const qs_trace_record *r2 = find_rec(&rc.trace, "lin2", QS_PHASE_RECOMPUTE, 0);
        ck_assert_ptr_nonnull(r2);
        ck_assert_int_eq(r2->precision, QS_PREC_QUANTIZED);
        ck_assert_int_eq(r2->recipe, kind);
        ck_assert_ptr_null(find_rec(&re.trace, "lin2", QS_PHASE_RECOMPUTE, 0));
        ck_assert_ptr_null(find_rec(&rc.trace, "lin1", QS_PHASE_RECOMPUTE, 0));
        qs_program_result_free(&rc);
        qs_program_result_free(&re);
        qs_program_free(pc);
        qs_program_free(pe);
        qs_ctx_free(c1);
        qs_ctx_free(c2);
    }
    fixture_free(&f);
}
END_TEST

/* checkpoint? { autocast(kind) { lin1, lin2 } }, lin3: the region is outside the autocast */
static qs_program *outer_ckpt(const fixture *f, int kind, int ckpt)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for((qs_recipe_kind)kind);
    int top = add_autocast(p, ckpt ? add_ckpt(p, QS_PROGRAM_ROOT) : QS_PROGRAM_ROOT, &r);
    add_linear(p, top, f, 0);
    add_linear(p, top, f, 1);
    add_linear(p, QS_PROGRAM_ROOT, f, 2);
    return p;
}

/* [RCP-REPLAY-BITWISE] [RCP-REPLAY] [SCOPE-DS-UPDATE-FWD] a checkpoint around a whole
 * outermost autocast: the forward update at the region's exit runs once in forward and not
 * in the replay; over two steps results and states equal the run without the checkpoint. */
START_TEST(test_checkpoint_around_an_outermost_autocast_replays_bitwise)
{
    fixture f;
    fixture_init(&f);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
        qs_program *pc = outer_ckpt(&f, kind, 1), *pe = outer_ckpt(&f, kind, 0);
        for (int step = 0; step < 2; step++) {
            qs_program_result rc, re;
            run_ok(c1, pc, &f, &rc);
            run_ok(c2, pe, &f, &re);
            ck_assert_int_eq(rc.nreplays, 1);
            expect_same_results(&rc, &re);
            expect_same_quantizers(pc, pe);
            ck_assert_int_eq(find_rec(&rc.trace, "lin3", QS_PHASE_FORWARD, 0)->precision,
                             QS_PREC_HIGH);
            qs_program_result_free(&rc);
            qs_program_result_free(&re);
        }
        if (kind == QS_RECIPE_DELAYED)
            ck_assert_int_eq(
                nonzero_slots(qs_program_quantizer(pc, 0, QS_RECIPE_DELAYED, QS_SCOPE_X)), 2);
        qs_program_free(pc);
        qs_program_free(pe);
        qs_ctx_free(c1);
        qs_ctx_free(c2);
    }
    fixture_free(&f);
}
END_TEST

/* [RCP-NONVACUOUS] for every recipe the program build(f, kind, 1) makes differs bitwise
 * from its high-precision twin build(f, -1, 1) in y and dx, yet y, dx and every weight
 * gradient stay close: cosine > 0.99 (FP8), > 0.9 (NVFP4); an op without parameters (a
 * gelu) has no gradient to compare. The high-precision run traces every op as high
 * precision, with no recipe. */
static void expect_quantized_close(qs_program *(*build)(const fixture *, int, int))
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *ph = build(&f, -1, 1);
    qs_program_result rh;
    run_ok(ctx, ph, &f, &rh);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_program *pq = build(&f, kind, 1);
        qs_program_result rq;
        run_ok(ctx, pq, &f, &rq);
        double bound = kind == QS_RECIPE_NVFP4 ? 0.9 : 0.99;
        const char *name = qs_recipe_kind_name(kind);
        ck_assert_msg(differs(&rq.y, &rh.y), "%s: y equals the high-precision y", name);
        ck_assert_msg(differs(&rq.dx, &rh.dx), "%s: dx equals the high-precision dx", name);
        double cy = cosine(&rq.y, &rh.y), cx = cosine(&rq.dx, &rh.dx);
        ck_assert_msg(cy > bound, "%s: cosine(y) %.6f <= %.2f", name, cy, bound);
        ck_assert_msg(cx > bound, "%s: cosine(dx) %.6f <= %.2f", name, cx, bound);
        for (int i = 0; i < rq.nops; i++) {
            ck_assert_int_eq(rq.grads[i].data == NULL, rh.grads[i].data == NULL);
            if (!rq.grads[i].data)
                continue;
            double cw = cosine(&rq.grads[i], &rh.grads[i]);
            ck_assert_msg(cw > bound, "%s: cosine(dW of op %d) %.6f <= %.2f", name, i, cw, bound);
        }
        qs_program_result_free(&rq);
        qs_program_free(pq);
    }
    for (size_t i = 0; i < rh.trace.n; i++) {
        ck_assert_int_eq(rh.trace.rec[i].precision, QS_PREC_HIGH);
        ck_assert_int_eq(rh.trace.rec[i].has_recipe, 0);
    }
    qs_program_result_free(&rh);
    qs_program_free(ph);
    qs_ctx_free(ctx);
    fixture_free(&f);
}

START_TEST(test_quantized_run_differs_from_high_precision_but_stays_close)
{
    expect_quantized_close(chain);
}
END_TEST

/* ---------------------------------------------------------------- the gelu op */

/* autocast(kind) { lin1, gelu "act", lin2 } (kind < 0: no autocast); placement 0 eager, 1 a
 * checkpoint around the block, 2 a checkpoint around the gelu alone, 3 an island around the
 * gelu. */
static qs_program *mlp(const fixture *f, int kind, int placement)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for(kind < 0 ? QS_RECIPE_CURRENT : (qs_recipe_kind)kind);
    int top = kind < 0 ? QS_PROGRAM_ROOT : add_autocast(p, QS_PROGRAM_ROOT, &r);
    int block = placement == 1 ? add_ckpt(p, top) : top;
    add_linear(p, block, f, 0);
    int act = placement == 2 ? add_ckpt(p, block) : placement == 3 ? add_island(p, block) : block;
    int id;
    ck_assert_int_eq(qs_program_gelu(NULL, p, act, "act", &id), QS_OK);
    add_linear(p, block, f, 1);
    return p;
}

/* A gelu record: kind gelu, the given precision, no recipe, no scales, no first module,
 * the dtype of a linear's output (BF16). */
static void expect_gelu_record(const qs_trace_record *r, qs_precision prec)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->kind, "gelu");
    ck_assert_int_eq(r->precision, prec);
    ck_assert_int_eq(r->has_recipe, 0);
    ck_assert_int_eq(r->scales, QS_SCALES_NONE);
    ck_assert_int_eq(r->nscale, 0);
    ck_assert_int_eq(r->first_module, 0);
    ck_assert_int_eq(r->dtype, QS_BF16);
}

/* [RCP-GELU-OP] [RCP-REPLAY-BITWISE] [RCP-REPLAY] an MLP block (linear, gelu, linear) in
 * high precision and under every recipe: with a checkpoint around the block or around the
 * gelu alone, the replay reproduces its forward and the output, dx, every gradient and
 * every quantizer are bitwise those of the eager run. The gelu is traced in forward,
 * recompute and backward as high precision (never quantized, even in an enabled region)
 * and has no parameter gradient. */
START_TEST(test_mlp_block_replays_bitwise_with_a_checkpoint_around_the_block_or_the_gelu)
{
    fixture f;
    fixture_init(&f);
    for (int kind = -1; kind < QS_RECIPE_COUNT; kind++)
        for (int placement = 1; placement <= 2; placement++) {
            qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
            qs_rng_set(c1, 77, 5);
            qs_rng_set(c2, 77, 5);
            qs_program *pc = mlp(&f, kind, placement), *pe = mlp(&f, kind, 0);
            qs_program_result rc, re;
            run_ok(c1, pc, &f, &rc);
            run_ok(c2, pe, &f, &re);
            ck_assert_int_eq(rc.nreplays, 1);
            ck_assert_uint_eq(rc.replay_digest[0], rc.replay_fwd_digest[0]);
            expect_same_results(&rc, &re);
            expect_same_quantizers(pc, pe);
            ck_assert_int_eq(rc.nops, 3);
            ck_assert_ptr_null(rc.grads[1].data);
            ck_assert_ptr_nonnull(rc.grads[0].data);
            ck_assert_ptr_nonnull(rc.grads[2].data);
            expect_gelu_record(find_rec(&rc.trace, "act", QS_PHASE_FORWARD, 0), QS_PREC_HIGH);
            expect_gelu_record(find_rec(&rc.trace, "act", QS_PHASE_RECOMPUTE, 0), QS_PREC_HIGH);
            expect_gelu_record(find_rec(&rc.trace, "act", QS_PHASE_BACKWARD, 0), QS_PREC_HIGH);
            ck_assert_ptr_null(find_rec(&re.trace, "act", QS_PHASE_RECOMPUTE, 0));
            /* a checkpoint around the gelu alone replays no linear */
            ck_assert_int_eq(find_rec(&rc.trace, "lin2", QS_PHASE_RECOMPUTE, 0) != NULL,
                             placement == 1);
            if (kind >= 0)
                ck_assert_int_eq(find_rec(&rc.trace, "lin1", QS_PHASE_FORWARD, 0)->precision,
                                 QS_PREC_QUANTIZED);
            qs_program_result_free(&rc);
            qs_program_result_free(&re);
            qs_program_free(pc);
            qs_program_free(pe);
            qs_ctx_free(c1);
            qs_ctx_free(c2);
        }
    fixture_free(&f);
}
END_TEST

/* [RCP-NONVACUOUS] [RCP-GELU-OP] the quantized MLP block differs bitwise from the
 * high-precision one and stays close to it, y, dx and both weight gradients. */
START_TEST(test_quantized_mlp_block_differs_from_high_precision_but_stays_close)
{
    expect_quantized_close(mlp);
}
END_TEST

/* The tanh-form GELU and its derivative in binary64, from the formula (the tanh form where
 * 1 + tanh does not cancel below binary64's precision, x >= -5; x / (1 + e^(-2u)) below). */
static double gelu_d(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x >= -5.0 ? 0.5 * x * (1.0 + tanh(u)) : x / (1.0 + exp(-2.0 * u));
}

/* [RCP-GELU-OP] [MATH-GELU] [MATH-GELU-GRAD] a gelu op alone on a bf16 and an fp16
 * activation: y is qs_geluf of each element rounded to the activation dtype, dx is
 * fl32(dy * qs_gelu_gradf(x)) rounded to it, both bit for bit; and both are within the
 * dtype's rounding of the binary64 formula (y) and of dy times a central difference of it
 * (dx). */
START_TEST(test_gelu_op_is_geluf_per_element_rounded_to_the_activation_dtype)
{
    for (int d = 0; d < 2; d++) {
        qs_dtype dt = d == 0 ? QS_BF16 : QS_FP16;
        int64_t shape[2] = {16, 64};
        qs_tensor x, dy;
        ck_assert_int_eq(qs_tensor_alloc(NULL, &x, dt, 2, shape), QS_OK);
        ck_assert_int_eq(qs_tensor_alloc(NULL, &dy, QS_FP32, 2, shape), QS_OK);
        uint16_t *xb = x.data;
        for (size_t i = 0; i < x.numel; i++) {
            float v = -7.0f + 14.0f * (float)i / (float)x.numel; /* -7 .. 7 */
            xb[i] = dt == QS_BF16 ? qs_f32_to_bf16(v) : qs_f32_to_f16(v);
            ((float *)dy.data)[i] = 0.5f + qs_random_uniform(31, 0, i);
        }
        qs_ctx *ctx = qs_ctx_new();
        qs_program *p;
        int id;
        ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
        ck_assert_int_eq(qs_program_gelu(ctx, p, QS_PROGRAM_ROOT, "act", &id), QS_OK);
        qs_program_result res;
        ck_assert_int_eq(qs_program_run(ctx, p, &x, &dy, &res), QS_OK);
        ck_assert_int_eq(res.y.dtype, dt);
        ck_assert_int_eq(res.dx.dtype, dt);
        const uint16_t *yb = res.y.data, *db = res.dx.data;
        double ulp = dt == QS_BF16 ? 0x1p-8 : 0x1p-11; /* one unit of the dtype, relative */
        for (size_t i = 0; i < x.numel; i++) {
            float xv = dt == QS_BF16 ? qs_bf16_to_f32(xb[i]) : qs_f16_to_f32(xb[i]);
            float g = ((float *)dy.data)[i];
            float yv = dt == QS_BF16 ? qs_bf16_to_f32(yb[i]) : qs_f16_to_f32(yb[i]);
            float dv = dt == QS_BF16 ? qs_bf16_to_f32(db[i]) : qs_f16_to_f32(db[i]);
            uint16_t ywant =
                dt == QS_BF16 ? qs_f32_to_bf16(qs_geluf(xv)) : qs_f32_to_f16(qs_geluf(xv));
            float dprod = g * qs_gelu_gradf(xv);
            uint16_t dwant = dt == QS_BF16 ? qs_f32_to_bf16(dprod) : qs_f32_to_f16(dprod);
            ck_assert_msg(yb[i] == ywant, "y[%zu] (x %a): 0x%04x, want 0x%04x", i, (double)xv,
                          yb[i], ywant);
            ck_assert_msg(db[i] == dwant, "dx[%zu] (x %a): 0x%04x, want 0x%04x", i, (double)xv,
                          db[i], dwant);
            double e = gelu_d(xv), h = 1e-4;
            double cd = (gelu_d((double)xv + h) - gelu_d((double)xv - h)) / (2 * h);
            double tiny = dt == QS_BF16 ? 0x1p-126 : 0x1p-24; /* the dtype's smallest step */
            ck_assert_msg(fabs(yv - e) <= ulp * fabs(e) + tiny, "y at x %a: %a, formula %a",
                          (double)xv, (double)yv, e);
            ck_assert_msg(fabs(dv - g * cd) <= ulp * fabs(g * cd) + 0x1p-20 * g + tiny,
                          "dx at x %a: %a, dy * central difference %a", (double)xv, (double)dv,
                          g * cd);
        }
        ck_assert_ptr_null(res.grads[0].data); /* no parameters */
        ck_assert_int_eq(res.trace.n, 2);      /* forward, backward */
        ck_assert_str_eq(res.trace.rec[0].kind, "gelu");
        ck_assert_int_eq(res.trace.rec[0].precision, QS_PREC_HIGH);
        ck_assert_int_eq(res.trace.rec[1].phase, QS_PHASE_BACKWARD);
        ck_assert_int_eq(res.trace.rec[0].dtype, dt);
        qs_program_result_free(&res);
        qs_program_free(p);
        qs_ctx_free(ctx);
        qs_tensor_free(&x);
        qs_tensor_free(&dy);
    }
}
END_TEST

/* [RCP-GELU-OP] [SCOPE-ISLAND] a gelu inside an island (between quantized linears) traces
 * precision island, and gives bitwise the results of the same gelu outside the island,
 * which traces high: the island changes the decision it reports, not the arithmetic. */
START_TEST(test_gelu_in_an_island_traces_island_and_computes_the_same_bits)
{
    fixture f;
    fixture_init(&f);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_ctx *ctx = qs_ctx_new();
        qs_program *pi = mlp(&f, kind, 3), *pe = mlp(&f, kind, 0);
        qs_program_result ri, re;
        qs_rng_set(ctx, 3, 0);
        run_ok(ctx, pi, &f, &ri);
        qs_rng_set(ctx, 3, 0);
        run_ok(ctx, pe, &f, &re);
        expect_gelu_record(find_rec(&ri.trace, "act", QS_PHASE_FORWARD, 0), QS_PREC_ISLAND);
        expect_gelu_record(find_rec(&ri.trace, "act", QS_PHASE_BACKWARD, 0), QS_PREC_ISLAND);
        expect_gelu_record(find_rec(&re.trace, "act", QS_PHASE_FORWARD, 0), QS_PREC_HIGH);
        ck_assert_int_eq(find_rec(&ri.trace, "lin2", QS_PHASE_FORWARD, 0)->precision,
                         QS_PREC_QUANTIZED);
        expect_same_results(&ri, &re);
        qs_program_result_free(&ri);
        qs_program_result_free(&re);
        qs_program_free(pi);
        qs_program_free(pe);
        qs_ctx_free(ctx);
    }
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- islands */

/* [SCOPE-ISLAND] [RCP-ISLAND] [SCOPE-ISLAND-NOMUTATE] a GDN island between two quantized
 * linears of each recipe runs in BF16 in forward, recompute and backward, gives bitwise the
 * same results eager and checkpointed (outside or inside the island), the linear after it
 * is quantized with the unchanged enclosing recipe, and the caller's recipe is intact. */
START_TEST(test_gdn_island_between_quantized_linears_eager_and_checkpointed)
{
    fixture f;
    fixture_init(&f);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_scope_recipe r = recipe_for((qs_recipe_kind)kind);
        uint64_t digest = qs_scope_recipe_digest(&r);
        qs_program_result res[3];
        qs_program *p[3];
        for (int pl = 0; pl < 3; pl++) {
            qs_ctx *ctx = qs_ctx_new();
            qs_scope_state before, after;
            qs_scope_get(ctx, &before);
            p[pl] = island_prog(&f, (qs_recipe_kind)kind, pl);
            run_ok(ctx, p[pl], &f, &res[pl]);
            qs_scope_get(ctx, &after);
            ck_assert(qs_scope_state_equal(&before, &after));
            const qs_trace_record *g = find_rec(&res[pl].trace, "gdn", QS_PHASE_FORWARD, 0);
            const qs_trace_record *gb = find_rec(&res[pl].trace, "gdn", QS_PHASE_BACKWARD, 0);
            const qs_trace_record *l2 = find_rec(&res[pl].trace, "lin2", QS_PHASE_FORWARD, 0);
            ck_assert_int_eq(g->precision, QS_PREC_ISLAND);
            ck_assert_int_eq(g->has_recipe, 0);
            ck_assert_int_eq(g->dtype, QS_BF16);
            ck_assert_int_eq(gb->precision, QS_PREC_ISLAND);
            ck_assert_int_eq(l2->precision, QS_PREC_QUANTIZED);
            ck_assert_int_eq(l2->recipe, kind);
            const qs_trace_record *gr = find_rec(&res[pl].trace, "gdn", QS_PHASE_RECOMPUTE, 0);
            if (pl == 0) {
                ck_assert_ptr_null(gr);
            } else {
                ck_assert_ptr_nonnull(gr);
                ck_assert_int_eq(gr->precision, QS_PREC_ISLAND);
            }
            /* the quantizers of lin2 (after the island) carry the enclosing recipe */
            const qs_quantizer *q = qs_program_quantizer(p[pl], 2, kind, QS_SCOPE_X);
            ck_assert_ptr_nonnull(q);
            qs_scope_recipe seen = r;
            seen.cfg[QS_SCOPE_X] = q->cfg;
            ck_assert_uint_eq(qs_scope_recipe_digest(&seen), digest);
            qs_ctx_free(ctx);
        }
        ck_assert_uint_eq(qs_scope_recipe_digest(&r), digest);
        expect_same_results(&res[0], &res[1]);
        expect_same_results(&res[0], &res[2]);
        for (int pl = 0; pl < 3; pl++) {
            qs_program_result_free(&res[pl]);
            qs_program_free(p[pl]);
        }
    }
    fixture_free(&f);
}
END_TEST

/* [SCOPE-ISLAND-REJECT] [SCOPE-FAIL-ATOMIC] GDN directly inside an MXFP8 autocast (no
 * island) is rejected with a message naming it; the run leaves all state as before. */
START_TEST(test_gdn_without_island_rejects_the_enclosing_autocast)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    qs_scope_recipe r = recipe_for(QS_RECIPE_MXFP8);
    int top = add_autocast(p, QS_PROGRAM_ROOT, &r);
    add_linear(p, top, &f, 0);
    add_gdn(p, top, &f);
    qs_program_result res;
    ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'gdn' cannot run quantized"));
    ck_assert_ptr_null(res.y.data);
    ck_assert_ptr_null(qs_program_quantizer(p, 0, QS_RECIPE_MXFP8, QS_SCOPE_X));
    qs_scope_state st;
    qs_scope_get(ctx, &st);
    ck_assert_int_eq(st.depth, 0);
    ck_assert_int_eq(st.enabled, 0);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-ISLAND] an island runs in its input dtype: island { gdn } on FP16 input gives FP16
 * (forward and backward traced as fp16); a GDN whose input is not the island's dtype (a
 * linear inside the island produced BF16) is QS_ERR_DTYPE; an FP32 input is refused. */
START_TEST(test_island_runs_in_its_input_dtype)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor x16, dy16, x32;
    int64_t shape[2] = {ROWS, DIM};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &x16, QS_FP16, 2, shape), QS_OK);
    ck_assert_int_eq(qs_tensor_alloc(NULL, &dy16, QS_FP16, 2, shape), QS_OK);
    ck_assert_int_eq(qs_tensor_alloc(NULL, &x32, QS_FP32, 2, shape), QS_OK);
    for (size_t i = 0; i < x16.numel; i++) {
        ((uint16_t *)x16.data)[i] = qs_f32_to_f16((float)value(&f.x, i));
        ((uint16_t *)dy16.data)[i] = qs_f32_to_f16((float)value(&f.dy, i));
    }
    qs_program *p;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    add_gdn(p, add_island(p, QS_PROGRAM_ROOT), &f);
    qs_program_result res;
    ck_assert_int_eq(qs_program_run(ctx, p, &x16, &dy16, &res), QS_OK);
    ck_assert_int_eq(res.y.dtype, QS_FP16);
    ck_assert_int_eq(res.dx.dtype, QS_FP16);
    ck_assert_int_eq(res.grads[0].dtype, QS_FP32);
    ck_assert_int_eq(find_rec(&res.trace, "gdn", QS_PHASE_FORWARD, 0)->dtype, QS_FP16);
    ck_assert_int_eq(find_rec(&res.trace, "gdn", QS_PHASE_BACKWARD, 0)->dtype, QS_FP16);
    qs_program_result_free(&res);
    qs_program_free(p);
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    int isl = add_island(p, QS_PROGRAM_ROOT);
    add_linear(p, isl, &f, 0);
    add_gdn(p, isl, &f);
    ck_assert_int_eq(qs_program_run(ctx, p, &x16, &dy16, &res), QS_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "the island runs in fp16"));
    ck_assert_int_eq(qs_program_run(ctx, p, &x32, &dy16, &res), QS_ERR_INVALID_ARG);
    qs_program_free(p);
    qs_tensor_free(&x16);
    qs_tensor_free(&dy16);
    qs_tensor_free(&x32);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-ENTER] [SCOPE-FIRST-MODULE] [SCOPE-DS-UPDATE-BWD] in autocast(delayed) {
 * autocast(mxfp8) { lin1 }, lin2 } the inner region overrides the recipe (lin1 mxfp8, lin2
 * delayed); lin1 consumes the first-module flag and the inner exit does not give it back
 * to lin2. In autocast(delayed) { autocast(delayed) { lin1 }, lin2 } the backward update
 * runs once per step: each dy history has exactly one entry after one step. */
START_TEST(test_nested_regions_in_a_program_override_and_keep_the_first_module)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    for (int same = 0; same < 2; same++) {
        qs_program *p;
        ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
        qs_scope_recipe ds = recipe_for(QS_RECIPE_DELAYED), mx = recipe_for(QS_RECIPE_MXFP8);
        int top = add_autocast(p, QS_PROGRAM_ROOT, &ds);
        add_linear(p, add_autocast(p, top, same ? &ds : &mx), &f, 0);
        add_linear(p, top, &f, 1);
        qs_program_result res;
        run_ok(ctx, p, &f, &res);
        const qs_trace_record *l1 = find_rec(&res.trace, "lin1", QS_PHASE_FORWARD, 0);
        const qs_trace_record *l2 = find_rec(&res.trace, "lin2", QS_PHASE_FORWARD, 0);
        ck_assert_int_eq(l1->recipe, same ? QS_RECIPE_DELAYED : QS_RECIPE_MXFP8);
        ck_assert_int_eq(l2->recipe, QS_RECIPE_DELAYED);
        ck_assert_int_eq(l1->first_module, 1);
        ck_assert_int_eq(l2->first_module, 0);
        if (same)
            for (int op = 0; op < 2; op++)
                ck_assert_int_eq(
                    nonzero_slots(qs_program_quantizer(p, op, QS_RECIPE_DELAYED, QS_SCOPE_DY)), 1);
        qs_program_result_free(&res);
        qs_program_free(p);
    }
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* calibrate(delayed) { lin1, [island { gdn }], lin2 } or island { calibrate(delayed) {...} } */
static qs_program *calib_prog(const fixture *f, int shape)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for(QS_RECIPE_DELAYED);
    int cal, isl;
    if (shape == 0) { /* calibrate { lin1, island { gdn }, lin2 } */
        ck_assert_int_eq(qs_program_calibrate(NULL, p, QS_PROGRAM_ROOT, &r, &cal), QS_OK);
        add_linear(p, cal, f, 0);
        add_gdn(p, add_island(p, cal), f);
        add_linear(p, cal, f, 1);
    } else if (shape == 1) { /* island { calibrate { lin1 } } */
        isl = add_island(p, QS_PROGRAM_ROOT);
        ck_assert_int_eq(qs_program_calibrate(NULL, p, isl, &r, &cal), QS_OK);
        add_linear(p, cal, f, 0);
    } else if (shape == 2) { /* island { calibrate { gdn } } */
        isl = add_island(p, QS_PROGRAM_ROOT);
        ck_assert_int_eq(qs_program_calibrate(NULL, p, isl, &r, &cal), QS_OK);
        add_gdn(p, cal, f);
    } else { /* calibrate { gdn } */
        ck_assert_int_eq(qs_program_calibrate(NULL, p, QS_PROGRAM_ROOT, &r, &cal), QS_OK);
        add_gdn(p, cal, f);
    }
    return p;
}

/* [SCOPE-CALIB] [SCOPE-POLICY-CALIB] [SCOPE-ISLAND] a calibrating region around an island
 * calibrates its linears (history[0] = amax, scale 1, no roll) and runs the GDN as an
 * island; a calibrating region inside an island calibrates its linear (inner overrides);
 * a GDN directly in a calibrating region, inside an island or not, is rejected. */
START_TEST(test_calibration_inside_and_outside_an_island)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    for (int shape = 0; shape < 2; shape++) {
        qs_program *p = calib_prog(&f, shape);
        qs_program_result res;
        run_ok(ctx, p, &f, &res);
        const qs_quantizer *qx = qs_program_quantizer(p, 0, QS_RECIPE_DELAYED, QS_SCOPE_X);
        ck_assert_ptr_nonnull(qx);
        ck_assert_uint_eq(qs_f32_bits(qx->ds.history[0]), qs_f32_bits(amax_of(&f.x)));
        for (int64_t j = 1; j < qx->ds.len; j++)
            ck_assert_uint_eq(qs_f32_bits(qx->ds.history[j]), 0);
        ck_assert_uint_eq(qs_f32_bits(qx->ds.scale), qs_f32_bits(1.0f));
        const qs_quantizer *qw = qs_program_quantizer(p, 0, QS_RECIPE_DELAYED, QS_SCOPE_W);
        ck_assert_uint_eq(qs_f32_bits(qw->ds.history[0]), qs_f32_bits(amax_of(&f.w[0])));
        const qs_trace_record *l1 = find_rec(&res.trace, "lin1", QS_PHASE_FORWARD, 0);
        ck_assert_int_eq(l1->precision, QS_PREC_CALIBRATING);
        ck_assert_int_eq(l1->scales, QS_SCALES_NONE);
        if (shape == 0)
            ck_assert_int_eq(find_rec(&res.trace, "gdn", QS_PHASE_FORWARD, 0)->precision,
                             QS_PREC_ISLAND);
        qs_program_result_free(&res);
        qs_program_free(p);
    }
    for (int shape = 2; shape < 4; shape++) {
        qs_program *p = calib_prog(&f, shape);
        qs_program_result res;
        ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_STATE);
        ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "calibrating"));
        qs_program_free(p);
    }
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-CALIB] a second calibration overwrites the current slot (no max, no roll). */
START_TEST(test_calibration_overwrites_the_current_slot)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p = calib_prog(&f, 1);
    qs_program_result res;
    run_ok(ctx, p, &f, &res);
    qs_program_result_free(&res);
    qs_tensor small;
    make_bf16(&small, ROWS, DIM, 3, 0.25f);
    ck_assert_int_eq(qs_program_run(ctx, p, &small, &f.dy, &res), QS_OK);
    const qs_quantizer *qx = qs_program_quantizer(p, 0, QS_RECIPE_DELAYED, QS_SCOPE_X);
    ck_assert_uint_eq(qs_f32_bits(qx->ds.history[0]), qs_f32_bits(amax_of(&small)));
    ck_assert(amax_of(&small) < amax_of(&f.x));
    ck_assert_uint_eq(qs_f32_bits(qx->ds.scale), qs_f32_bits(1.0f));
    qs_program_result_free(&res);
    qs_tensor_free(&small);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- delayed scaling timing */

static int nonzero_slots(const qs_quantizer *q)
{
    int n = 0;
    for (int64_t j = 0; j < q->ds.len; j++)
        n += q->ds.history[j] != 0.0f;
    return n;
}

/* [SCOPE-DS-UPDATE-FWD] [SCOPE-DS-UPDATE-BWD] [SCOPE-FIRST-MODULE] [RCP-REPLAY] over three
 * steps of autocast(delayed) { lin1, checkpoint { lin2, lin3 }, lin4 }: each step rolls
 * every history exactly once (the replay adds no amax and no update), the scales follow
 * 448/amax(x) and 57344/amax(dy), the step-2 forward uses the step-1 scale, only lin1
 * consumes the first-module flag, and the state equals the run without the checkpoint. */
START_TEST(test_delayed_update_timing_over_steps_with_checkpoints)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
    qs_program *pc = chain(&f, QS_RECIPE_DELAYED, 1), *pe = chain(&f, QS_RECIPE_DELAYED, 0);
    float want_x = 448.0f / amax_of(&f.x), want_dy = 57344.0f / amax_of(&f.dy);
    for (int step = 1; step <= 3; step++) {
        qs_program_result rc, re;
        run_ok(c1, pc, &f, &rc);
        run_ok(c2, pe, &f, &re);
        expect_same_results(&rc, &re);
        expect_same_quantizers(pc, pe);
        const qs_quantizer *qx = qs_program_quantizer(pc, 0, QS_RECIPE_DELAYED, QS_SCOPE_X);
        const qs_quantizer *qdy = qs_program_quantizer(pc, 3, QS_RECIPE_DELAYED, QS_SCOPE_DY);
        for (int op = 0; op < 4; op++)
            for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++) {
                const qs_quantizer *q = qs_program_quantizer(pc, op, QS_RECIPE_DELAYED, r);
                ck_assert_int_eq(nonzero_slots(q), step);
                ck_assert_uint_eq(qs_f32_bits(q->ds.history[0]), 0);
            }
        ck_assert_uint_eq(qs_f32_bits(qx->ds.scale), qs_f32_bits(want_x));
        ck_assert_uint_eq(qs_f32_bits(qdy->ds.scale), qs_f32_bits(want_dy));
        const qs_trace_record *l1 = find_rec(&rc.trace, "lin1", QS_PHASE_FORWARD, 0);
        ck_assert_uint_eq(l1->scale_bits[0], qs_f32_bits(step == 1 ? 1.0f : want_x));
        ck_assert_int_eq(l1->first_module, 1);
        for (int i = 2; i <= 4; i++) {
            char nm[8];
            snprintf(nm, sizeof nm, "lin%d", i);
            ck_assert_int_eq(find_rec(&rc.trace, nm, QS_PHASE_FORWARD, 0)->first_module, 0);
        }
        const qs_trace_record *f2 = find_rec(&rc.trace, "lin2", QS_PHASE_FORWARD, 0);
        const qs_trace_record *r2 = find_rec(&rc.trace, "lin2", QS_PHASE_RECOMPUTE, 0);
        ck_assert_int_eq(r2->scales, QS_SCALES_RECORDED);
        ck_assert_int_eq(f2->scales, QS_SCALES_FRESH);
        ck_assert_uint_eq(r2->scale_bits[0], f2->scale_bits[0]);
        ck_assert_uint_eq(r2->scale_bits[1], f2->scale_bits[1]);
        ck_assert_int_eq(r2->first_module, 0);
        qs_program_result_free(&rc);
        qs_program_result_free(&re);
    }
    qs_program_free(pc);
    qs_program_free(pe);
    qs_ctx_free(c1);
    qs_ctx_free(c2);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-DS-UPDATE-FWD] a forward-only run (no gradient) updates nothing: history[0] holds
 * the amax and the scale stays 1. */
START_TEST(test_forward_without_gradients_does_not_update)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p = chain(&f, QS_RECIPE_DELAYED, 1);
    qs_program_result res;
    ck_assert_int_eq(qs_program_run(ctx, p, &f.x, NULL, &res), QS_OK);
    const qs_quantizer *qx = qs_program_quantizer(p, 0, QS_RECIPE_DELAYED, QS_SCOPE_X);
    ck_assert_uint_eq(qs_f32_bits(qx->ds.history[0]), qs_f32_bits(amax_of(&f.x)));
    ck_assert_int_eq(nonzero_slots(qx), 1);
    ck_assert_uint_eq(qs_f32_bits(qx->ds.scale), qs_f32_bits(1.0f));
    ck_assert_int_eq(res.nreplays, 0);
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- the audit */

/* [RCP-AUDIT] [RCP-REPLAY-VARIANTS] [SCOPE-FAIL-ATOMIC] a program that replays outside the recorded
 * autocast (Megatron #7538) is caught: the run fails naming the op, and no state changed. */
START_TEST(test_audit_catches_a_replay_outside_the_autocast)
{
    fixture f;
    fixture_init(&f);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        qs_ctx *ctx = qs_ctx_new();
        qs_program *p = chain(&f, kind, 1);
        qs_program_result res;
        run_ok(ctx, p, &f, &res); /* one good step: quantizers exist */
        qs_program_result_free(&res);
        const qs_quantizer *q = qs_program_quantizer(p, 1, kind, QS_SCOPE_X);
        float scale = q->ds.scale;
        uint64_t seed, off, seed2, off2;
        qs_rng_get(ctx, &seed, &off);
        ck_assert_int_eq(qs_program_set_replay(ctx, p, QS_REPLAY_OUTSIDE_AUTOCAST), QS_OK);
        ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_STATE);
        ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "[RCP-AUDIT]"));
        ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'lin2'"));
        ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "precision"));
        qs_rng_get(ctx, &seed2, &off2);
        ck_assert_uint_eq(off, off2);
        ck_assert_uint_eq(qs_f32_bits(q->ds.scale), qs_f32_bits(scale));
        qs_program_free(p);
        qs_ctx_free(ctx);
    }
    fixture_free(&f);
}
END_TEST

/* [RCP-AUDIT] [RCP-REPLAY-VARIANTS] [RCP-REPLAY] a replay that runs its own forward update (the TE
 * defect) is caught because it changes delayed-scaling state. */
START_TEST(test_audit_catches_a_replay_that_updates_state)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    qs_scope_recipe r = recipe_for(QS_RECIPE_DELAYED);
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
        r.cfg[i].roll = QS_DS_ROLL_UNFUSED; /* the extra update always rolls */
    int top = add_autocast(p, QS_PROGRAM_ROOT, &r);
    add_linear(p, top, &f, 0);
    add_linear(p, add_ckpt(p, top), &f, 1);
    qs_program_result res;
    ck_assert_int_eq(qs_program_set_replay(ctx, p, QS_REPLAY_EXTRA_UPDATE), QS_OK);
    ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "changed delayed-scaling state"));
    ck_assert_ptr_null(qs_program_quantizer(p, 0, QS_RECIPE_DELAYED, QS_SCOPE_X));
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* [RCP-AUDIT] the audit over a trace: a recompute that repeats its forward passes; one
 * that changes precision, recipe or recorded scales fails; one without a forward fails. */
START_TEST(test_trace_audit_compares_recompute_with_forward)
{
    qs_trace t = {0};
    qs_trace_record fw = {0}, rc;
    strcpy(fw.op, "up_proj");
    strcpy(fw.kind, "linear");
    fw.phase = QS_PHASE_FORWARD;
    fw.precision = QS_PREC_QUANTIZED;
    fw.has_recipe = 1;
    fw.recipe = QS_RECIPE_DELAYED;
    fw.scales = QS_SCALES_FRESH;
    fw.nscale = 2;
    fw.scale_bits[0] = 0x43e00000u;
    fw.scale_bits[1] = 0x3f800000u;
    rc = fw;
    rc.phase = QS_PHASE_RECOMPUTE;
    rc.scales = QS_SCALES_RECORDED;
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(qs_trace_append(ctx, &t, &fw), QS_OK);
    ck_assert_int_eq(qs_trace_append(ctx, &t, &rc), QS_OK);
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_OK);
    t.rec[1].scale_bits[0] = 0x3f800000u;
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "scale_bits"));
    t.rec[1] = rc;
    t.rec[1].seq = 1;
    t.rec[1].scales = QS_SCALES_FRESH;
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_ERR_STATE);
    t.rec[1].scales = QS_SCALES_RECORDED;
    t.rec[1].recipe = QS_RECIPE_CURRENT;
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "recipe"));
    t.rec[1].recipe = QS_RECIPE_DELAYED;
    t.rec[1].precision = QS_PREC_HIGH;
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_ERR_STATE);
    strcpy(t.rec[1].op, "other");
    ck_assert_int_eq(qs_trace_audit(ctx, &t), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "no forward execution"));
    qs_trace_free(&t);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- the trace */

/* [RCP-TRACE] [RCP-TRACE-JSONL] one record per op execution in execution order (forward,
 * recompute, backward), rendered one JSON object per line in the specified key order. */
START_TEST(test_trace_has_one_record_per_execution_and_renders_as_json_lines)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p = chain(&f, QS_RECIPE_DELAYED, 1);
    qs_program_result res;
    run_ok(ctx, p, &f, &res);
    /* forward lin1..lin4, backward lin4, recompute lin2 lin3, backward lin3 lin2 lin1 */
    static const char *const want[][2] = {
        {"lin1", "forward"},  {"lin2", "forward"},   {"lin3", "forward"},   {"lin4", "forward"},
        {"lin4", "backward"}, {"lin2", "recompute"}, {"lin3", "recompute"}, {"lin3", "backward"},
        {"lin2", "backward"}, {"lin1", "backward"}};
    ck_assert_uint_eq(res.trace.n, 10);
    for (size_t i = 0; i < res.trace.n; i++) {
        ck_assert_str_eq(res.trace.rec[i].op, want[i][0]);
        ck_assert_str_eq(qs_trace_phase_name(res.trace.rec[i].phase), want[i][1]);
        ck_assert_int_eq(res.trace.rec[i].seq, (int64_t)i);
    }
    char *text;
    size_t len;
    ck_assert_int_eq(qs_trace_to_jsonl(ctx, &res.trace, &text, &len), QS_OK);
    const char *first = "{\"seq\":0,\"phase\":\"forward\",\"op\":\"lin1\",\"kind\":\"linear\","
                        "\"precision\":\"quantized\",\"recipe\":\"delayed\",\"scales\":\"fresh\","
                        "\"scale_bits\":[\"0x3f800000\",\"0x3f800000\"],\"first_module\":true,"
                        "\"dtype\":\"bf16\"}\n";
    ck_assert_int_eq(strncmp(text, first, strlen(first)), 0);
    const char *rec5 = strstr(text, "{\"seq\":5,");
    ck_assert_ptr_nonnull(rec5);
    ck_assert_int_eq(strncmp(rec5, "{\"seq\":5,\"phase\":\"recompute\",\"op\":\"lin2\"", 40), 0);
    ck_assert_ptr_nonnull(strstr(rec5, "\"scales\":\"recorded\""));
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    ck_assert_uint_eq(lines, 10);
    ck_assert_uint_eq(strlen(text), len);
    free(text);
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- fault injection */

/* A test-side copy of every quantizer of a program, the RNG state and the scope. */
typedef struct state_copy {
    int exists[4][QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT];
    uint32_t scale[4][QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT];
    float hist[4][QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT][1024];
    uint64_t seed, offset;
    qs_scope_state scope;
} state_copy;

static void copy_state(qs_ctx *ctx, const qs_program *p, state_copy *c)
{
    memset(c, 0, sizeof *c);
    ck_assert_int_le(qs_program_op_count(p), 4);
    for (int op = 0; op < qs_program_op_count(p); op++)
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++) {
                const qs_quantizer *q = qs_program_quantizer(p, op, k, r);
                c->exists[op][k][r] = q != NULL;
                if (!q)
                    continue;
                c->scale[op][k][r] = qs_f32_bits(q->ds.scale);
                ck_assert_int_le(q->ds.len, 1024);
                if (q->ds.history)
                    memcpy(c->hist[op][k][r], q->ds.history, (size_t)q->ds.len * sizeof(float));
            }
    qs_rng_get(ctx, &c->seed, &c->offset);
    qs_scope_get(ctx, &c->scope);
}

static void expect_state_equal(const state_copy *a, const state_copy *b, int n)
{
    ck_assert_msg(memcmp(a->exists, b->exists, sizeof a->exists) == 0,
                  "fault %d: the set of quantizers changed", n);
    ck_assert_msg(memcmp(a->scale, b->scale, sizeof a->scale) == 0, "fault %d: a scale changed", n);
    ck_assert_msg(memcmp(a->hist, b->hist, sizeof a->hist) == 0,
                  "fault %d: an amax history changed", n);
    ck_assert_msg(a->seed == b->seed && a->offset == b->offset, "fault %d: RNG changed", n);
    ck_assert_msg(qs_scope_state_equal(&a->scope, &b->scope), "fault %d: scope changed", n);
}

typedef qs_program *(*builder)(const fixture *f, int variant);

static qs_program *b_chain(const fixture *f, int v)
{
    return chain(f, v % QS_RECIPE_COUNT, v / QS_RECIPE_COUNT);
}

static qs_program *b_mlp(const fixture *f, int v)
{
    return mlp(f, v % QS_RECIPE_COUNT, v / QS_RECIPE_COUNT);
}

static qs_program *b_island(const fixture *f, int v)
{
    return island_prog(f, (qs_recipe_kind)(v % QS_RECIPE_COUNT), v / QS_RECIPE_COUNT);
}

static qs_program *b_calib(const fixture *f, int v)
{
    return calib_prog(f, v);
}

static qs_program *b_outer(const fixture *f, int v)
{
    return outer_ckpt(f, v, 1);
}

/* autocast(delayed) { lin1, autocast(mxfp8) { checkpoint { lin2 } }, island { gdn } } */
static qs_program *b_nested(const fixture *f, int v)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe outer = recipe_for(v ? QS_RECIPE_BLOCK : QS_RECIPE_DELAYED);
    qs_scope_recipe inner = recipe_for(QS_RECIPE_MXFP8);
    int top = add_autocast(p, QS_PROGRAM_ROOT, &outer);
    add_linear(p, top, f, 0);
    int in = add_autocast(p, top, &inner);
    add_linear(p, add_ckpt(p, in), f, 1);
    add_gdn(p, add_island(p, top), f);
    return p;
}

/* Injects a failure at every step n = 1, 2, ... until a run succeeds; each failed run must
 * leave every state as before. warm: one good run first, so that state exists. Returns
 * the number of injection points. */
static int sweep(const fixture *f, builder b, int variant, int warm)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p = b(f, variant);
    qs_program_result res;
    qs_rng_set(ctx, 5, 9);
    if (warm) {
        run_ok(ctx, p, f, &res);
        qs_program_result_free(&res);
    }
    int points = 0;
    for (int n = 1;; n++) {
        state_copy *before = malloc(sizeof *before), *after = malloc(sizeof *after);
        copy_state(ctx, p, before);
        qs_fault_set(ctx, n);
        qs_status s = qs_program_run(ctx, p, &f->x, &f->dy, &res);
        qs_fault_set(ctx, 0);
        if (s == QS_OK) {
            qs_program_result_free(&res);
            free(before);
            free(after);
            break;
        }
        ck_assert_msg(s == QS_ERR_INJECTED, "fault %d: %s: %s", n, qs_status_name(s),
                      qs_ctx_errmsg(ctx));
        ck_assert_ptr_null(res.y.data);
        ck_assert_ptr_null(res.grads);
        copy_state(ctx, p, after);
        expect_state_equal(before, after, n);
        free(before);
        free(after);
        points++;
    }
    qs_program_free(p);
    qs_ctx_free(ctx);
    return points;
}

/* [SCOPE-FAULT] [SCOPE-FAIL-ATOMIC] [SCOPE-RESTORE-ERR] every program of this file, cold
 * and warm, with a failure injected at every possible step: each run fails with
 * QS_ERR_INJECTED, returns nothing, and leaves the scope, every quantizer and the RNG
 * state exactly as before. */
START_TEST(test_fault_injection_at_every_step_leaves_all_state_unchanged)
{
    fixture f;
    fixture_init(&f);
    struct {
        builder b;
        int variants;
    } progs[] = {{b_chain, 2 * QS_RECIPE_COUNT},
                 {b_island, 3 * QS_RECIPE_COUNT},
                 {b_calib, 2},
                 {b_outer, QS_RECIPE_COUNT},
                 {b_nested, 2},
                 {b_mlp, 4 * QS_RECIPE_COUNT}};
    int total = 0, programs = 0;
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++)
        for (int v = 0; v < progs[i].variants; v++)
            for (int warm = 0; warm < 2; warm++) {
                int n = sweep(&f, progs[i].b, v, warm);
                ck_assert_int_gt(n, 3);
                total += n;
                programs++;
            }
    printf("fault injection: %d injection points over %d program runs\n", total, programs);
    ck_assert_int_gt(total, 500);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-FAULT] the hook counts steps without failing when n is 0, and the count of a
 * run is what the sweep iterates over. */
START_TEST(test_fault_hook_counts_steps)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p = chain(&f, QS_RECIPE_CURRENT, 1);
    qs_program_result res;
    run_ok(ctx, p, &f, &res); /* cold: creates the quantizers */
    qs_program_result_free(&res);
    qs_fault_set(ctx, 0);
    run_ok(ctx, p, &f, &res);
    int64_t steps = qs_fault_steps(ctx);
    ck_assert_int_gt(steps, 10);
    qs_program_result_free(&res);
    qs_fault_set(ctx, steps);
    ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_INJECTED);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "injected failure at step"));
    qs_fault_set(ctx, steps + 1);
    run_ok(ctx, p, &f, &res);
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* Columns [h*d, (h+1)*d) of a [ROWS, DIM] BF16 tensor, as a [ROWS, d] tensor. */
static void take_columns(const qs_tensor *t, int h, int64_t d, qs_tensor *out)
{
    int64_t shape[2] = {ROWS, d};
    ck_assert_int_eq(qs_tensor_alloc(NULL, out, QS_BF16, 2, shape), QS_OK);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < d; c++)
            ((uint16_t *)out->data)[r * d + c] = ((const uint16_t *)t->data)[r * DIM + h * d + c];
}

/* [CASE-PROG-OP] [GDN-SHAPES] A gdn op of 2 heads over [ROWS, DIM] runs each head as the
 * one-head gdn over its DIM/2 columns with that head's gates: its output columns, input
 * gradient columns and gate gradients (token by token, head after head) are bitwise those
 * of the one-head runs, and differ from one head over all DIM columns. */
START_TEST(test_gdn_of_two_heads_is_two_one_head_gdns)
{
    enum { H = 2 };
    const int64_t d = DIM / H;
    fixture f;
    fixture_init(&f);
    float g2[ROWS * H], b2[ROWS * H];
    for (int t = 0; t < ROWS; t++)
        for (int h = 0; h < H; h++) {
            g2[t * H + h] = -0.03f - 0.02f * (float)((t + 3 * h) % 4);
            b2[t * H + h] = 0.25f + 0.05f * (float)((t * (h + 1)) % 5);
        }
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p2;
    qs_program_result r2;
    int id;
    ck_assert_int_eq(qs_program_new(ctx, &p2), QS_OK);
    ck_assert_int_eq(
        qs_program_gdn_heads(ctx, p2, add_island(p2, QS_PROGRAM_ROOT), "gdn", ROWS, H, g2, b2, &id),
        QS_OK);
    run_ok(ctx, p2, &f, &r2);
    ck_assert_int_eq(r2.grads[0].shape[1], ROWS * H);
    for (int h = 0; h < H; h++) {
        float g1[ROWS], b1[ROWS];
        for (int t = 0; t < ROWS; t++) {
            g1[t] = g2[t * H + h];
            b1[t] = b2[t * H + h];
        }
        fixture one = f;
        take_columns(&f.x, h, d, &one.x);
        take_columns(&f.dy, h, d, &one.dy);
        qs_program *p1;
        qs_program_result r1;
        ck_assert_int_eq(qs_program_new(ctx, &p1), QS_OK);
        ck_assert_int_eq(
            qs_program_gdn(ctx, p1, add_island(p1, QS_PROGRAM_ROOT), "gdn", ROWS, g1, b1, &id),
            QS_OK);
        run_ok(ctx, p1, &one, &r1);
        const uint16_t *y2 = r2.y.data, *dx2 = r2.dx.data, *y1 = r1.y.data, *dx1 = r1.dx.data;
        for (int64_t r = 0; r < ROWS; r++)
            for (int64_t c = 0; c < d; c++) {
                ck_assert_uint_eq(y2[r * DIM + h * d + c], y1[r * d + c]);
                ck_assert_uint_eq(dx2[r * DIM + h * d + c], dx1[r * d + c]);
            }
        const float *gg2 = r2.grads[0].data, *gg1 = r1.grads[0].data;
        for (int k = 0; k < 2; k++) /* dg, then dbeta */
            for (int t = 0; t < ROWS; t++)
                ck_assert_uint_eq(qs_f32_bits(gg2[k * ROWS * H + t * H + h]),
                                  qs_f32_bits(gg1[k * ROWS + t]));
        qs_program_result_free(&r1);
        qs_program_free(p1);
        qs_tensor_free(&one.x);
        qs_tensor_free(&one.dy);
    }
    qs_program *pw;
    qs_program_result rw;
    ck_assert_int_eq(qs_program_new(ctx, &pw), QS_OK);
    add_gdn(pw, add_island(pw, QS_PROGRAM_ROOT), &f);
    run_ok(ctx, pw, &f, &rw);
    ck_assert_int_ne(memcmp(rw.y.data, r2.y.data, r2.y.nbytes), 0);
    ck_assert_int_eq(qs_program_gdn_heads(ctx, pw, QS_PROGRAM_ROOT, "bad", ROWS, 0, g2, b2, &id),
                     QS_ERR_INVALID_ARG);
    qs_program_result_free(&rw);
    qs_program_free(pw);
    qs_program_result_free(&r2);
    qs_program_free(p2);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* Bad builder arguments are rejected with a message. */
START_TEST(test_program_builders_reject_bad_arguments)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p;
    int id, lin;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    ck_assert_int_eq(qs_program_linear(ctx, p, QS_PROGRAM_ROOT, "a", &f.w[0], &lin), QS_OK);
    ck_assert_int_eq(qs_program_linear(ctx, p, QS_PROGRAM_ROOT, "a", &f.w[1], &id),
                     QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "used twice"));
    ck_assert_int_eq(qs_program_checkpoint(ctx, p, lin, &id), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_program_checkpoint(ctx, p, 99, &id), QS_ERR_INVALID_ARG);
    qs_autocast_params bad = {1, 0, NULL, 0};
    ck_assert_int_eq(qs_program_autocast(ctx, p, QS_PROGRAM_ROOT, &bad, &id), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_program_gdn(ctx, p, QS_PROGRAM_ROOT, "g", 0, f.g, f.beta, &id),
                     QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_program_set_replay(ctx, p, QS_REPLAY_COUNT), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_program_op_count(p), 1);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

static Suite *recompute_suite(void)
{
    Suite *s = suite_create("recompute");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_replay_is_bitwise_for_every_recipe);
    tcase_add_test(tc, test_checkpoint_around_an_outermost_autocast_replays_bitwise);
    tcase_add_test(tc, test_quantized_run_differs_from_high_precision_but_stays_close);
    tcase_add_test(tc,
                   test_mlp_block_replays_bitwise_with_a_checkpoint_around_the_block_or_the_gelu);
    tcase_add_test(tc, test_quantized_mlp_block_differs_from_high_precision_but_stays_close);
    tcase_add_test(tc, test_gelu_op_is_geluf_per_element_rounded_to_the_activation_dtype);
    tcase_add_test(tc, test_gelu_in_an_island_traces_island_and_computes_the_same_bits);
    tcase_add_test(tc, test_gdn_island_between_quantized_linears_eager_and_checkpointed);
    tcase_add_test(tc, test_gdn_without_island_rejects_the_enclosing_autocast);
    tcase_add_test(tc, test_island_runs_in_its_input_dtype);
    tcase_add_test(tc, test_nested_regions_in_a_program_override_and_keep_the_first_module);
    tcase_add_test(tc, test_calibration_inside_and_outside_an_island);
    tcase_add_test(tc, test_calibration_overwrites_the_current_slot);
    tcase_add_test(tc, test_delayed_update_timing_over_steps_with_checkpoints);
    tcase_add_test(tc, test_forward_without_gradients_does_not_update);
    tcase_add_test(tc, test_audit_catches_a_replay_outside_the_autocast);
    tcase_add_test(tc, test_audit_catches_a_replay_that_updates_state);
    tcase_add_test(tc, test_trace_audit_compares_recompute_with_forward);
    tcase_add_test(tc, test_trace_has_one_record_per_execution_and_renders_as_json_lines);
    tcase_add_test(tc, test_fault_hook_counts_steps);
    tcase_add_test(tc, test_program_builders_reject_bad_arguments);
    tcase_add_test(tc, test_gdn_of_two_heads_is_two_one_head_gdns);
    tcase_add_test(tc, test_fault_injection_at_every_step_leaves_all_state_unchanged);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(recompute_suite());
}
