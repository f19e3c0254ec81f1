/* test_engine_mla.c: the mla op of the reference engine (spec/recompute.md [RCP-MLA-*] over
 * spec/attention.md [MLA-*]): for every recipe, layout (sbhd, ragged thd), K/V weights
 * (combined, split) and form (plain, absorbed), the mla_up_proj recompute gives bitwise the
 * run without it and its replay reproduces the discarded forward, while the quantized run
 * differs from high precision yet stays close; the op against the standalone MLA calls;
 * delayed scaling over steps between linear ops; islands, calibration, an outer checkpoint;
 * the audit; the trace; fault injection; and the builder's checks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qspec/format.h"
#include "qspec/program.h"
#include "qspec/random.h"
#include "qstensor.h"
#include "qstest.h"

/* hidden 32, 2 heads, q LoRA rank 16, kv LoRA rank 16, dn 8, dr 8, dv 8; 32 token rows
 * (NVFP4's Hadamard transform needs a multiple of 16). */
enum { HID = 32, NH = 2, RQ = 16, RKV = 16, DN = 8, DR = 8, DV = 8, T = 32 };

/* ---------------------------------------------------------------- fixture */

/* A tensor of shape (rows, cols; cols 0: 1-D) of uniform values in [base - amp, base +
 * amp) from Philox stream seed, BF16 or FP32. */
static void make(qs_tensor *t, qs_dtype dt, int64_t rows, int64_t cols, uint64_t seed, float base,
                 float amp)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, dt, cols ? 2 : 1, shape), QS_OK);
    for (size_t i = 0; i < t->numel; i++) {
        float v = base + (qs_random_uniform(seed, 0, i) * 2.0f - 1.0f) * amp;
        if (dt == QS_BF16)
            ((uint16_t *)t->data)[i] = qs_f32_to_bf16(v);
        else
            ((float *)t->data)[i] = v;
    }
}

static float *values(const qs_tensor *t)
{
    float *v = malloc(t->numel * sizeof(float) + 1);
    for (size_t i = 0; i < t->numel; i++)
        v[i] = (float)value(t, i);
    return v;
}

typedef struct fixture {
    qs_tensor x, dy, lin_w[2];
    qs_tensor w[QS_MLA_PARAM_COUNT]; /* all of them: w_q for rq 0, w_uk/w_uv split copies */
    int32_t cu[4];
} fixture;

/* Uniform in +-sqrt(3 / in): variance 1/in, so activations stay of order one. */
static void fixture_init(fixture *f)
{
    make(&f->x, QS_BF16, T, HID, 1, 0.0f, 1.0f);
    make(&f->dy, QS_BF16, T, HID, 2, 0.0f, 1.0f);
    for (int i = 0; i < 2; i++)
        make(&f->lin_w[i], QS_BF16, HID, HID, 3 + (uint64_t)i, 0.0f, 0.3f);
    make(&f->w[QS_MLA_W_DQ], QS_BF16, RQ, HID, 10, 0.0f, 0.3f);
    make(&f->w[QS_MLA_Q_NORM], QS_FP32, RQ, 0, 11, 1.0f, 0.2f);
    make(&f->w[QS_MLA_W_UQ], QS_BF16, NH * (DN + DR), RQ, 12, 0.0f, 0.43f);
    make(&f->w[QS_MLA_W_Q], QS_BF16, NH * (DN + DR), HID, 13, 0.0f, 0.3f);
    make(&f->w[QS_MLA_W_DKV], QS_BF16, RKV + DR, HID, 14, 0.0f, 0.3f);
    make(&f->w[QS_MLA_KV_NORM], QS_FP32, RKV, 0, 15, 1.0f, 0.2f);
    make(&f->w[QS_MLA_W_UKV], QS_BF16, NH * (DN + DV), RKV, 16, 0.0f, 0.43f);
    make(&f->w[QS_MLA_W_O], QS_BF16, HID, NH * DV, 17, 0.0f, 0.43f);
    uint16_t *wkv = f->w[QS_MLA_W_UKV].data;
    for (size_t e = 0; e < f->w[QS_MLA_W_UKV].numel; e++) /* V rows: another amax than K's */
        if (e / RKV % (DN + DV) >= DN)
            wkv[e] = qs_f32_to_bf16(0.7f * qs_bf16_to_f32(wkv[e]));
    int64_t sk[2] = {NH * DN, RKV}, sv[2] = {NH * DV, RKV};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &f->w[QS_MLA_W_UK], QS_BF16, 2, sk), QS_OK);
    ck_assert_int_eq(qs_tensor_alloc(NULL, &f->w[QS_MLA_W_UV], QS_BF16, 2, sv), QS_OK);
    const uint16_t *ukv = f->w[QS_MLA_W_UKV].data;
    for (int h = 0; h < NH; h++) { /* the same rows, split */
        memcpy((uint16_t *)f->w[QS_MLA_W_UK].data + h * DN * RKV, ukv + h * (DN + DV) * RKV,
               DN * RKV * sizeof(uint16_t));
        memcpy((uint16_t *)f->w[QS_MLA_W_UV].data + h * DV * RKV, ukv + (h * (DN + DV) + DN) * RKV,
               DV * RKV * sizeof(uint16_t));
    }
    int32_t cu[4] = {0, 5, 16, 32}; /* ragged: 5, 11 and 16 tokens */
    memcpy(f->cu, cu, sizeof cu);
}

static void fixture_free(fixture *f)
{
    qs_tensor_free(&f->x);
    qs_tensor_free(&f->dy);
    for (int i = 0; i < 2; i++)
        qs_tensor_free(&f->lin_w[i]);
    for (int i = 0; i < QS_MLA_PARAM_COUNT; i++)
        qs_tensor_free(&f->w[i]);
}

/* One MLA variant: layout (0 sbhd s 16 b 2, 1 thd ragged), K/V (0 combined, 1 split), form
 * (0 plain, 1 absorbed), q LoRA (rq 16, or 0: a single q projection). */
typedef struct variant {
    int thd, split, absorbed, rq0;
} variant;

static qs_mla_config config(const variant *v)
{
    qs_mla_config c;
    memset(&c, 0, sizeof c);
    c.hidden = HID;
    c.heads = NH;
    c.q_lora_rank = v->rq0 ? 0 : RQ;
    c.kv_lora_rank = RKV;
    c.dn = DN;
    c.dr = DR;
    c.dv = DV;
    c.norm_eps = 1e-6f;
    c.rope_base = 10000.0f;
    c.yarn_factor = 4.0f;
    c.yarn_mscale = c.yarn_mscale_all_dim = 1.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    c.yarn_original_max_pos = 8;
    c.absorbed = v->absorbed;
    return c;
}

static qs_program_mla_params mla_params(const fixture *f, const variant *v, int recompute)
{
    qs_program_mla_params mp;
    memset(&mp, 0, sizeof mp);
    mp.cfg = config(v);
    mp.layout = v->thd ? QS_ATTN_THD : QS_ATTN_SBHD;
    mp.mask = QS_ATTN_MASK_CAUSAL;
    mp.b = v->thd ? 3 : 2;
    mp.s = v->thd ? T : T / 2;
    mp.cu_seqlens = v->thd ? f->cu : NULL;
    mp.recompute_up_proj = recompute;
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
        int64_t shape[2];
        if (qs_mla_param_shape(&mp.cfg, v->split, (qs_mla_param)pi, shape))
            mp.w[pi] = &f->w[pi];
    }
    return mp;
}

static qs_scope_recipe recipe_for(qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    if (kind == QS_RECIPE_DELAYED)
        for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
            r.cfg[i].history_len = 8;
    if (kind == QS_RECIPE_NVFP4)
        r.cfg[QS_SCOPE_X].sr = 1; /* random bits inside the region: the RNG must replay */
    return r;
}

static int add_region(qs_program *p, int parent, int enabled, int calibrating,
                      const qs_scope_recipe *r)
{
    qs_autocast_params a = {enabled, calibrating, r, 0};
    int id;
    ck_assert_int_eq(qs_program_autocast(NULL, p, parent, &a, &id), QS_OK);
    return id;
}

static void add_mla(qs_program *p, int parent, const fixture *f, const variant *v, int recompute)
{
    qs_program_mla_params mp = mla_params(f, v, recompute);
    int id;
    qs_status s = qs_program_mla(NULL, p, parent, "mla", &mp, &id);
    ck_assert_msg(s == QS_OK, "program_mla: %s", qs_status_name(s));
}

/* autocast(kind) { mla } (kind < 0: no region). */
static qs_program *mla_prog(const fixture *f, int kind, const variant *v, int recompute)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    int top = QS_PROGRAM_ROOT;
    if (kind >= 0) {
        qs_scope_recipe r = recipe_for((qs_recipe_kind)kind);
        top = add_region(p, QS_PROGRAM_ROOT, 1, 0, &r);
    }
    add_mla(p, top, f, v, recompute);
    return p;
}

static void run_ok(qs_ctx *ctx, qs_program *p, const fixture *f, qs_program_result *res)
{
    qs_status s = qs_program_run(ctx, p, &f->x, &f->dy, res);
    ck_assert_msg(s == QS_OK, "program_run: %s: %s", qs_status_name(s), qs_ctx_errmsg(ctx));
}

/* ---------------------------------------------------------------- comparisons */

/* y, dx, every grads[i] and every mla parameter gradient bitwise. */
static void expect_same_results(const qs_program_result *a, const qs_program_result *b)
{
    expect_bitwise("y", &a->y, &b->y);
    expect_bitwise("dx", &a->dx, &b->dx);
    ck_assert_int_eq(a->nops, b->nops);
    for (int i = 0; i < a->nops; i++) {
        expect_bitwise("grads[i]", &a->grads[i], &b->grads[i]);
        for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
            const qs_tensor *ga = qs_program_result_mla_grad(a, i, (qs_mla_param)pi);
            const qs_tensor *gb = qs_program_result_mla_grad(b, i, (qs_mla_param)pi);
            ck_assert_int_eq(ga == NULL, gb == NULL);
            if (ga)
                expect_bitwise(qs_mla_param_name((qs_mla_param)pi), ga, gb);
        }
    }
}

/* Every quantizer of op `op` (an mla) equal in both programs: existence, scale, history. */
static void expect_same_mla_quantizers(const qs_program *a, const qs_program *b, int op)
{
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        for (int k = 0; k < QS_RECIPE_COUNT; k++)
            for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++) {
                const qs_quantizer *qa = qs_program_mla_quantizer(a, op, l, k, r);
                const qs_quantizer *qb = qs_program_mla_quantizer(b, op, l, k, r);
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

static const qs_trace_record *find_rec(const qs_trace *t, const char *op, qs_trace_phase ph)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->rec[i].op, op) == 0 && t->rec[i].phase == ph)
            return &t->rec[i];
    return NULL;
}

static int nonzero_slots(const qs_quantizer *q)
{
    int n = 0;
    for (int64_t i = 0; q && i < q->ds.len; i++)
        n += q->ds.history[i] != 0.0f;
    return n;
}

/* ---------------------------------------------------------------- the matrix */

/* The trace of a recompute run: the region's linears (q_up; kv_up, or k_up and v_up, in
 * the plain form) and, absorbed, the W_UK einsum are recomputed; nothing outside the
 * region is; the absorbed form runs no K/V up-projection at all. */
static void expect_recompute_trace(const qs_trace *t, const variant *v, int kind)
{
    const char *in_region[3] = {"mla/q_up", NULL, NULL};
    if (!v->absorbed && !v->split)
        in_region[1] = "mla/kv_up";
    if (!v->absorbed && v->split)
        in_region[1] = "mla/k_up", in_region[2] = "mla/v_up";
    for (int i = 0; i < 3 && in_region[i]; i++) {
        const qs_trace_record *r = find_rec(t, in_region[i], QS_PHASE_RECOMPUTE);
        ck_assert_msg(r != NULL, "%s is not recomputed", in_region[i]);
        ck_assert_int_eq(r->precision, QS_PREC_QUANTIZED);
        ck_assert_int_eq(r->recipe, kind);
        ck_assert_int_eq(r->scales,
                         kind == QS_RECIPE_DELAYED ? QS_SCALES_RECORDED : QS_SCALES_FRESH);
    }
    const char *outside[] = {"mla/q_down", "mla/kv_down", "mla/out_proj", "mla/v_absorb"};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++)
        ck_assert_ptr_null(find_rec(t, outside[i], QS_PHASE_RECOMPUTE));
    const qs_trace_record *ka = find_rec(t, "mla/k_absorb", QS_PHASE_RECOMPUTE);
    ck_assert_int_eq(ka != NULL, v->absorbed);
    if (ka) /* [MLA-ABSORBED-HP] */
        ck_assert(ka->precision == QS_PREC_HIGH && !ka->has_recipe);
    if (v->absorbed) {
        ck_assert_ptr_null(find_rec(t, "mla/kv_up", QS_PHASE_FORWARD));
        ck_assert_ptr_null(find_rec(t, "mla/k_up", QS_PHASE_FORWARD));
        ck_assert_ptr_nonnull(find_rec(t, "mla/v_absorb", QS_PHASE_BACKWARD));
    }
}

static double min_cos_seen[QS_RECIPE_COUNT][2];

/* [RCP-NONVACUOUS] the quantized run's output differs from the high-precision one, yet has
 * cosine > 0.99 (FP8), > 0.9 (NVFP4) to it, as in Megatron's parity test. dx and every
 * parameter gradient differ too; they pass through up to five quantized gradient GEMMs
 * (E5M2 under HYBRID, stochastically rounded E2M1 under NVFP4) and are held to a looser
 * sanity bound, 0.98 (FP8) and 0.8 (NVFP4), below which a wrong operand or copy would
 * show. */
static void expect_close_not_equal(const qs_program_result *q, const qs_program_result *h, int kind,
                                   const char *what)
{
    double bound = kind == QS_RECIPE_NVFP4 ? 0.9 : 0.99;
    double loose = kind == QS_RECIPE_NVFP4 ? 0.8 : 0.98;
    ck_assert_msg(differs(&q->y, &h->y), "%s: y equals the high-precision y", what);
    ck_assert_msg(differs(&q->dx, &h->dx), "%s: dx equals the high-precision dx", what);
    double cy = cosine(&q->y, &h->y), lo = cosine(&q->dx, &h->dx);
    ck_assert_msg(cy > bound, "%s: cosine(y) %.6f <= %.2f", what, cy, bound);
    ck_assert_msg(lo > loose, "%s: cosine(dx) %.6f <= %.2f", what, lo, loose);
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
        const qs_tensor *gq = qs_program_result_mla_grad(q, 0, (qs_mla_param)pi);
        const qs_tensor *gh = qs_program_result_mla_grad(h, 0, (qs_mla_param)pi);
        ck_assert_int_eq(gq == NULL, gh == NULL);
        if (!gq)
            continue;
        double cw = cosine(gq, gh);
        ck_assert_msg(differs(gq, gh), "%s: d%s equals high precision", what,
                      qs_mla_param_name((qs_mla_param)pi));
        ck_assert_msg(cw > loose, "%s: cosine(d%s) %.6f <= %.2f", what,
                      qs_mla_param_name((qs_mla_param)pi), cw, loose);
        lo = cw < lo ? cw : lo;
    }
    min_cos_seen[kind][0] = cy < min_cos_seen[kind][0] ? cy : min_cos_seen[kind][0];
    min_cos_seen[kind][1] = lo < min_cos_seen[kind][1] ? lo : min_cos_seen[kind][1];
}

/* One (layout, K/V, form): the high-precision run, then per recipe the run with the
 * mla_up_proj recompute and the one without, each from a fresh context with the same RNG
 * state. */
static void check_variant(const fixture *f, const variant *v)
{
    qs_ctx *ch = qs_ctx_new();
    qs_program *ph = mla_prog(f, -1, v, 1);
    qs_program_result rh;
    run_ok(ch, ph, f, &rh);
    ck_assert_int_eq(rh.nreplays, 1); /* high precision replays too, trivially */
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        char what[64];
        snprintf(what, sizeof what, "%s %s %s %s", qs_recipe_kind_name(kind),
                 v->thd ? "thd" : "sbhd", v->split ? "split" : "combined",
                 v->absorbed ? "absorbed" : "plain");
        qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
        qs_rng_set(c1, 77, 5);
        qs_rng_set(c2, 77, 5);
        qs_program *pc = mla_prog(f, kind, v, 1), *pe = mla_prog(f, kind, v, 0);
        qs_program_result rc, re;
        run_ok(c1, pc, f, &rc);
        run_ok(c2, pe, f, &re);
        ck_assert_msg(rc.nreplays == 1 && re.nreplays == 0, "%s: replays %d, %d", what, rc.nreplays,
                      re.nreplays);
        ck_assert_msg(rc.replay_digest[0] == rc.replay_fwd_digest[0], "%s: replay digest", what);
        expect_same_results(&rc, &re);
        expect_same_mla_quantizers(pc, pe, 0);
        uint64_t s1, o1, s2, o2;
        qs_rng_get(c1, &s1, &o1);
        qs_rng_get(c2, &s2, &o2);
        ck_assert_uint_eq(o1, o2);
        expect_recompute_trace(&rc.trace, v, kind);
        ck_assert_ptr_null(find_rec(&re.trace, "mla/q_up", QS_PHASE_RECOMPUTE));
        expect_close_not_equal(&rc, &rh, kind, what);
        if (v->absorbed) /* [MLA-ABSORBED-HP]: no K/V up-projection quantizer exists */
            for (int l = QS_MLA_KV_UP; l <= QS_MLA_V_UP; l++)
                ck_assert_ptr_null(qs_program_mla_quantizer(pc, 0, l, kind, QS_SCOPE_W));
        qs_program_result_free(&rc);
        qs_program_result_free(&re);
        qs_program_free(pc);
        qs_program_free(pe);
        qs_ctx_free(c1);
        qs_ctx_free(c2);
    }
    qs_program_result_free(&rh);
    qs_program_free(ph);
    qs_ctx_free(ch);
}

/* [RCP-MLA-UP-PROJ] [RCP-REPLAY-BITWISE] [RCP-REPLAY] [RCP-RECORD] [RCP-NONVACUOUS]
 * [RCP-MLA-OP] [MLA-LINEAR-QUANT] [MLA-SPLIT-KV]: every recipe x {sbhd, thd with ragged
 * sequences 5, 11, 16} x {combined, split} x {plain, absorbed}: the run with the
 * mla_up_proj recompute replays once, its replay digest equals the discarded forward's, and
 * y, dx and every parameter gradient are bitwise those without it (as are the quantizer
 * states and the RNG); the quantized run differs from high precision but stays close. */
START_TEST(test_up_proj_recompute_is_bitwise_for_every_recipe_layout_and_form)
{
    fixture f;
    fixture_init(&f);
    for (int k = 0; k < QS_RECIPE_COUNT; k++)
        min_cos_seen[k][0] = min_cos_seen[k][1] = 1.0;
    for (int i = 0; i < 8; i++) {
        variant v = {i & 1, (i >> 1) & 1, (i >> 2) & 1, 0};
        check_variant(&f, &v);
    }
    for (int k = 0; k < QS_RECIPE_COUNT; k++)
        printf("mla %s vs high precision: smallest cosine of y %.6f, of dx and the parameter "
               "gradients %.6f\n",
               qs_recipe_kind_name(k), min_cos_seen[k][0], min_cos_seen[k][1]);
    fixture_free(&f);
}
END_TEST

/* [RCP-MLA-UP-PROJ] [MLA-Q-PATH]: the same with a single q projection (rq 0), whose q_proj
 * linear is inside the region; sbhd, plain and absorbed, combined K/V. */
START_TEST(test_up_proj_recompute_with_a_single_q_projection)
{
    fixture f;
    fixture_init(&f);
    for (int ab = 0; ab < 2; ab++) {
        variant v = {0, 0, ab, 1};
        for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
            qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
            qs_program *pc = mla_prog(&f, kind, &v, 1), *pe = mla_prog(&f, kind, &v, 0);
            qs_program_result rc, re;
            run_ok(c1, pc, &f, &rc);
            run_ok(c2, pe, &f, &re);
            ck_assert_int_eq(rc.nreplays, 1);
            ck_assert_uint_eq(rc.replay_digest[0], rc.replay_fwd_digest[0]);
            expect_same_results(&rc, &re);
            const qs_trace_record *r = find_rec(&rc.trace, "mla/q_proj", QS_PHASE_RECOMPUTE);
            ck_assert_ptr_nonnull(r);
            ck_assert_int_eq(r->precision, QS_PREC_QUANTIZED);
            ck_assert_ptr_null(find_rec(&rc.trace, "mla/q_down", QS_PHASE_FORWARD));
            ck_assert_ptr_nonnull(qs_program_result_mla_grad(&rc, 0, QS_MLA_W_Q));
            ck_assert_ptr_null(qs_program_result_mla_grad(&rc, 0, QS_MLA_W_DQ));
            qs_program_result_free(&rc);
            qs_program_result_free(&re);
            qs_program_free(pc);
            qs_program_free(pe);
            qs_ctx_free(c1);
            qs_ctx_free(c2);
        }
    }
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- against qs_mla_* */

/* Runs the standalone MLA on the fixture's x and dy under the scope of ctx with fresh
 * quantizers of recipe r (NULL: none), into out and the per-parameter gradients g*. */
typedef struct solo {
    float *out, *dx, *pg[QS_MLA_PARAM_COUNT];
} solo;

static void run_solo(qs_ctx *ctx, const fixture *f, const variant *v, const qs_scope_recipe *r,
                     solo *so)
{
    qs_program_mla_params mp = mla_params(f, v, 0);
    qs_mla_shape sh = {mp.layout, mp.mask, mp.b, mp.s, mp.cu_seqlens, QS_BF16};
    float *wv[QS_MLA_PARAM_COUNT] = {0};
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
        int64_t shape[2];
        so->pg[pi] = NULL;
        if (qs_mla_param_shape(&mp.cfg, v->split, (qs_mla_param)pi, shape)) {
            wv[pi] = values(&f->w[pi]);
            so->pg[pi] = calloc(f->w[pi].numel, sizeof(float));
        }
    }
    qs_mla_weights w = {wv[0], wv[1], wv[2], wv[3], wv[4], wv[5], wv[6], wv[7], wv[8], wv[9]};
    qs_mla_grads g = {NULL,      so->pg[0], so->pg[1], so->pg[2], so->pg[3], so->pg[4],
                      so->pg[5], so->pg[6], so->pg[7], so->pg[8], so->pg[9]};
    static qs_quantizer qz[QS_MLA_LINEAR_COUNT][QS_SCOPE_ROLE_COUNT];
    qs_mla_quantizers qs;
    memset(&qs, 0, sizeof qs);
    for (int l = 0; r && l < QS_MLA_LINEAR_COUNT; l++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
            ck_assert_int_eq(qs_quantizer_init(NULL, &qz[l][role], &r->cfg[role]), QS_OK);
            qs.q[l][role] = &qz[l][role];
        }
    float *x = values(&f->x), *dy = values(&f->dy);
    so->out = malloc(T * HID * sizeof(float));
    so->dx = malloc(T * HID * sizeof(float));
    g.dx = so->dx;
    ck_assert_int_eq(qs_mla_forward(ctx, &mp.cfg, &sh, &w, r ? &qs : NULL, x, so->out), QS_OK);
    ck_assert_int_eq(qs_mla_backward(ctx, &mp.cfg, &sh, &w, r ? &qs : NULL, x, dy, &g), QS_OK);
    for (int l = 0; r && l < QS_MLA_LINEAR_COUNT; l++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++)
            qs_quantizer_free(&qz[l][role]);
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++)
        free(wv[pi]);
    free(x);
    free(dy);
}

static void solo_free(solo *so)
{
    free(so->out);
    free(so->dx);
    for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++)
        free(so->pg[pi]);
}

static void expect_values(const char *what, const qs_tensor *t, const float *v)
{
    for (size_t i = 0; i < t->numel; i++)
        ck_assert_msg(qs_f32_bits((float)value(t, i)) == qs_f32_bits(v[i]),
                      "%s[%zu]: engine %a, standalone %a", what, i, value(t, i), (double)v[i]);
}

/* [RCP-MLA-OP] [MLA-FWD] [MLA-BWD] [MLA-LINEAR]: the engine's op computes the MLA block of
 * spec/attention.md: without a region, y, dx and every parameter gradient are bitwise
 * qs_mla_fwd / qs_mla_bwd's; in an autocast of each stochastic-rounding-free recipe they
 * are bitwise qs_mla_forward / qs_mla_backward's under the same region with fresh
 * quantizers (the engine's are fresh in a first run). */
START_TEST(test_engine_op_equals_the_standalone_block)
{
    fixture f;
    fixture_init(&f);
    const variant vs[2] = {{0, 0, 0, 0}, {1, 1, 1, 0}};
    for (int vi = 0; vi < 2; vi++)
        for (int kind = -1; kind < QS_RECIPE_NVFP4; kind++) {
            qs_ctx *ctx = qs_ctx_new();
            qs_program *p = mla_prog(&f, kind, &vs[vi], vi);
            qs_program_result res;
            run_ok(ctx, p, &f, &res);
            qs_scope_recipe r;
            qs_scope_token tok;
            if (kind >= 0) {
                r = recipe_for((qs_recipe_kind)kind);
                qs_autocast_params a = {1, 0, &r, 0};
                ck_assert_int_eq(qs_autocast_enter(ctx, &a, &tok), QS_OK);
            }
            solo so;
            run_solo(ctx, &f, &vs[vi], kind >= 0 ? &r : NULL, &so);
            if (kind >= 0)
                ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
            expect_values("y", &res.y, so.out);
            expect_values("dx", &res.dx, so.dx);
            for (int pi = 0; pi < QS_MLA_PARAM_COUNT; pi++) {
                const qs_tensor *g = qs_program_result_mla_grad(&res, 0, (qs_mla_param)pi);
                ck_assert_int_eq(g == NULL, so.pg[pi] == NULL);
                if (g)
                    expect_values(qs_mla_param_name((qs_mla_param)pi), g, so.pg[pi]);
            }
            solo_free(&so);
            qs_program_result_free(&res);
            qs_program_free(p);
            qs_ctx_free(ctx);
        }
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- in a larger program */

/* autocast(delayed) { lin1, mla(recompute?), lin2 } */
static qs_program *sandwich(const fixture *f, int recompute)
{
    qs_program *p;
    ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
    qs_scope_recipe r = recipe_for(QS_RECIPE_DELAYED);
    int top = add_region(p, QS_PROGRAM_ROOT, 1, 0, &r), id;
    ck_assert_int_eq(qs_program_linear(NULL, p, top, "lin1", &f->lin_w[0], &id), QS_OK);
    variant v = {1, 0, 0, 0};
    add_mla(p, top, f, &v, recompute);
    ck_assert_int_eq(qs_program_linear(NULL, p, top, "lin2", &f->lin_w[1], &id), QS_OK);
    return p;
}

/* [SCOPE-DS-UPDATE-FWD] [SCOPE-DS-UPDATE-BWD] [SCOPE-FIRST-MODULE] [RCP-MLA-OP]
 * [RCP-REPLAY]: over three steps of autocast(delayed) { lin1, mla, lin2 }, with and without
 * the mla_up_proj recompute: results and every quantizer state are bitwise equal at every
 * step; lin1 consumes the first-module flag (no linear of the mla does); the forward
 * update rolls each mla linear's x history once per step and the backward update its dy
 * history once per step; the replay uses the recorded scales, which from the second step
 * on are not 1 (the update changed them). */
START_TEST(test_delayed_scaling_over_steps_between_linear_ops)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
    qs_program *pc = sandwich(&f, 1), *pe = sandwich(&f, 0);
    for (int step = 0; step < 3; step++) {
        qs_program_result rc, re;
        run_ok(c1, pc, &f, &rc);
        run_ok(c2, pe, &f, &re);
        ck_assert_int_eq(rc.nreplays, 1);
        ck_assert_uint_eq(rc.replay_digest[0], rc.replay_fwd_digest[0]);
        expect_same_results(&rc, &re);
        expect_same_mla_quantizers(pc, pe, 1);
        ck_assert_int_eq(find_rec(&rc.trace, "lin1", QS_PHASE_FORWARD)->first_module, 1);
        for (size_t i = 0; i < rc.trace.n; i++)
            if (strncmp(rc.trace.rec[i].op, "mla/", 4) == 0)
                ck_assert_int_eq(rc.trace.rec[i].first_module, 0);
        const qs_trace_record *fw = find_rec(&rc.trace, "mla/q_up", QS_PHASE_FORWARD);
        const qs_trace_record *rp = find_rec(&rc.trace, "mla/q_up", QS_PHASE_RECOMPUTE);
        ck_assert_int_eq(rp->scales, QS_SCALES_RECORDED);
        ck_assert_int_eq(memcmp(fw->scale_bits, rp->scale_bits, sizeof fw->scale_bits), 0);
        if (step > 0)
            ck_assert_uint_ne(fw->scale_bits[0], qs_f32_bits(1.0f));
        for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++) {
            const qs_quantizer *qx =
                qs_program_mla_quantizer(pc, 1, l, QS_RECIPE_DELAYED, QS_SCOPE_X);
            const qs_quantizer *qd =
                qs_program_mla_quantizer(pc, 1, l, QS_RECIPE_DELAYED, QS_SCOPE_DY);
            ck_assert_int_eq(qx != NULL,
                             l != QS_MLA_Q_PROJ && l != QS_MLA_K_UP && l != QS_MLA_V_UP);
            if (qx) {
                ck_assert_int_eq(nonzero_slots(qx), step + 1);
                ck_assert_int_eq(nonzero_slots(qd), step + 1);
            }
        }
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

/* [RCP-RECORD] [RCP-REPLAY-BITWISE] [RCP-MLA-UP-PROJ]: inside a checkpoint region the op's
 * own recompute is transparent: autocast(kind) { checkpoint { mla(recompute) } } replays
 * once (the region, with the whole op in it, every linear of the op recorded), bitwise
 * equal to the eager program over two steps, for delayed scaling (whose recorded scales
 * the replay must find for the region's linears too) and MXFP8. */
START_TEST(test_mla_inside_a_checkpoint_region_replays_with_it)
{
    fixture f;
    fixture_init(&f);
    variant v = {1, 1, 0, 0};
    const qs_recipe_kind kinds[2] = {QS_RECIPE_DELAYED, QS_RECIPE_MXFP8};
    for (int ki = 0; ki < 2; ki++) {
        qs_scope_recipe r = recipe_for(kinds[ki]);
        qs_program *pc;
        ck_assert_int_eq(qs_program_new(NULL, &pc), QS_OK);
        int top = add_region(pc, QS_PROGRAM_ROOT, 1, 0, &r), ck;
        ck_assert_int_eq(qs_program_checkpoint(NULL, pc, top, &ck), QS_OK);
        add_mla(pc, ck, &f, &v, 1);
        qs_program *pe = mla_prog(&f, kinds[ki], &v, 0);
        qs_ctx *c1 = qs_ctx_new(), *c2 = qs_ctx_new();
        for (int step = 0; step < 2; step++) {
            qs_program_result rc, re;
            run_ok(c1, pc, &f, &rc);
            run_ok(c2, pe, &f, &re);
            ck_assert_int_eq(rc.nreplays, 1);
            ck_assert_uint_eq(rc.replay_digest[0], rc.replay_fwd_digest[0]);
            const qs_trace_record *qd = find_rec(&rc.trace, "mla/q_down", QS_PHASE_RECOMPUTE);
            const qs_trace_record *qu = find_rec(&rc.trace, "mla/k_up", QS_PHASE_RECOMPUTE);
            ck_assert(qd != NULL && qu != NULL);
            if (kinds[ki] == QS_RECIPE_DELAYED)
                ck_assert(qd->scales == QS_SCALES_RECORDED && qu->scales == QS_SCALES_RECORDED);
            expect_same_results(&rc, &re);
            expect_same_mla_quantizers(pc, pe, 0);
            qs_program_result_free(&rc);
            qs_program_result_free(&re);
        }
        qs_program_free(pc);
        qs_program_free(pe);
        qs_ctx_free(c1);
        qs_ctx_free(c2);
    }
    fixture_free(&f);
}
END_TEST

/* [SCOPE-ISLAND] [RCP-ISLAND] [MLA-LINEAR-HP]: autocast(nvfp4) { island { mla(recompute) } }
 * runs every linear in high precision (forward, recompute and backward traced "high", no
 * quantizer created) and equals the program without any region bitwise. */
START_TEST(test_mla_in_an_island_runs_high_precision)
{
    fixture f;
    fixture_init(&f);
    variant v = {0, 0, 1, 0};
    qs_scope_recipe r = recipe_for(QS_RECIPE_NVFP4);
    qs_program *pi;
    ck_assert_int_eq(qs_program_new(NULL, &pi), QS_OK);
    int top = add_region(pi, QS_PROGRAM_ROOT, 1, 0, &r), isl;
    ck_assert_int_eq(qs_program_island(NULL, pi, top, &isl), QS_OK);
    add_mla(pi, isl, &f, &v, 1);
    qs_program *ph = mla_prog(&f, -1, &v, 0);
    qs_ctx *ctx = qs_ctx_new();
    qs_program_result ri, rh;
    run_ok(ctx, pi, &f, &ri);
    run_ok(ctx, ph, &f, &rh);
    expect_same_results(&ri, &rh);
    ck_assert_int_eq(ri.nreplays, 1);
    for (size_t i = 0; i < ri.trace.n; i++) {
        ck_assert_int_eq(ri.trace.rec[i].precision, QS_PREC_HIGH);
        ck_assert_int_eq(ri.trace.rec[i].has_recipe, 0);
    }
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        ck_assert_ptr_null(qs_program_mla_quantizer(pi, 0, l, QS_RECIPE_NVFP4, QS_SCOPE_X));
    qs_program_result_free(&ri);
    qs_program_result_free(&rh);
    qs_program_free(pi);
    qs_program_free(ph);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* [SCOPE-CALIB] [MLA-LINEAR-CALIB]: calibrate(delayed) { mla(recompute) } computes in high
 * precision (bitwise the program without a region) and writes each linear's current amax
 * slot: q_down's x slot is amax(x) and each weight slot the weight's amax; the replay
 * records nothing (the slots equal those of the run without recompute). */
START_TEST(test_calibrating_mla_records_amax_and_computes_high_precision)
{
    fixture f;
    fixture_init(&f);
    variant v = {1, 0, 0, 0};
    qs_scope_recipe r = recipe_for(QS_RECIPE_DELAYED);
    qs_program *pc[2];
    for (int rc = 0; rc < 2; rc++) {
        ck_assert_int_eq(qs_program_new(NULL, &pc[rc]), QS_OK);
        add_mla(pc[rc], add_region(pc[rc], QS_PROGRAM_ROOT, 0, 1, &r), &f, &v, rc);
    }
    qs_program *ph = mla_prog(&f, -1, &v, 0);
    qs_ctx *ctx = qs_ctx_new();
    qs_program_result res[2], rh;
    for (int rc = 0; rc < 2; rc++)
        run_ok(ctx, pc[rc], &f, &res[rc]);
    run_ok(ctx, ph, &f, &rh);
    expect_same_results(&res[1], &rh);
    expect_same_results(&res[0], &rh);
    expect_same_mla_quantizers(pc[0], pc[1], 0);
    float ax = 0.0f;
    for (size_t i = 0; i < f.x.numel; i++)
        ax = fabsf((float)value(&f.x, i)) > ax ? fabsf((float)value(&f.x, i)) : ax;
    const qs_quantizer *qx =
        qs_program_mla_quantizer(pc[1], 0, QS_MLA_Q_DOWN, QS_RECIPE_DELAYED, QS_SCOPE_X);
    ck_assert_ptr_nonnull(qx);
    ck_assert_uint_eq(qs_f32_bits(qx->ds.history[0]), qs_f32_bits(ax));
    const int lin[] = {QS_MLA_Q_DOWN, QS_MLA_Q_UP, QS_MLA_KV_DOWN, QS_MLA_KV_UP, QS_MLA_OUT_PROJ};
    const int par[] = {QS_MLA_W_DQ, QS_MLA_W_UQ, QS_MLA_W_DKV, QS_MLA_W_UKV, QS_MLA_W_O};
    for (int i = 0; i < 5; i++) {
        const qs_quantizer *qw =
            qs_program_mla_quantizer(pc[1], 0, lin[i], QS_RECIPE_DELAYED, QS_SCOPE_W);
        float aw = 0.0f;
        for (size_t e = 0; e < f.w[par[i]].numel; e++)
            aw = fabsf((float)value(&f.w[par[i]], e)) > aw ? fabsf((float)value(&f.w[par[i]], e))
                                                           : aw;
        ck_assert_uint_eq(qs_f32_bits(qw->ds.history[0]), qs_f32_bits(aw));
        ck_assert_uint_eq(qs_f32_bits(qw->ds.scale), qs_f32_bits(1.0f));
    }
    for (int rc = 0; rc < 2; rc++) {
        qs_program_result_free(&res[rc]);
        qs_program_free(pc[rc]);
    }
    qs_program_result_free(&rh);
    qs_program_free(ph);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- audit and trace */

/* [RCP-AUDIT] [RCP-REPLAY-VARIANTS] [SCOPE-FAIL-ATOMIC]: an mla_up_proj replay outside the
 * recorded autocast (Megatron issue 7538) fails the run with the audit's message naming
 * the linear, and leaves the quantizers as before; the variant that runs a forward update
 * at the replay's exit (with the unfused roll, which always rolls) is caught as a state
 * change. */
START_TEST(test_audit_catches_defective_mla_replays)
{
    fixture f;
    fixture_init(&f);
    variant v = {0, 0, 0, 0};
    for (int var = QS_REPLAY_OUTSIDE_AUTOCAST; var <= QS_REPLAY_EXTRA_UPDATE; var++) {
        qs_ctx *ctx = qs_ctx_new();
        qs_program *p;
        ck_assert_int_eq(qs_program_new(NULL, &p), QS_OK);
        qs_scope_recipe r = recipe_for(QS_RECIPE_DELAYED);
        for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
            r.cfg[i].roll = QS_DS_ROLL_UNFUSED;
        add_mla(p, add_region(p, QS_PROGRAM_ROOT, 1, 0, &r), &f, &v, 1);
        qs_program_result res;
        ck_assert_int_eq(qs_program_set_replay(ctx, p, (qs_replay_variant)var), QS_OK);
        ck_assert_int_eq(qs_program_run(ctx, p, &f.x, &f.dy, &res), QS_ERR_STATE);
        const char *msg = qs_ctx_errmsg(ctx);
        ck_assert_ptr_nonnull(strstr(msg, "replay audit [RCP-AUDIT]"));
        if (var == QS_REPLAY_OUTSIDE_AUTOCAST)
            ck_assert_ptr_nonnull(strstr(msg, "'mla/q_up'"));
        else
            ck_assert_ptr_nonnull(strstr(msg, "mla 'mla' up_proj changed delayed-scaling state"));
        ck_assert_ptr_null(res.y.data);
        ck_assert_ptr_null(qs_program_mla_quantizer(p, 0, QS_MLA_Q_UP, QS_RECIPE_DELAYED, 0));
        qs_program_free(p);
        qs_ctx_free(ctx);
    }
    fixture_free(&f);
}
END_TEST

/* [RCP-MLA-TRACE] [RCP-TRACE] [RCP-TRACE-JSONL]: a plain, combined, recomputed op under
 * current scaling traces its linears as "mla/<linear>" of kind "linear", in this order:
 * forward q_down, kv_down, q_up, kv_up, out_proj; backward out_proj; the recompute of q_up,
 * kv_up; backward kv_up, q_up, kv_down, q_down. Absorbed, the einsums are kind "einsum",
 * high precision, forward k_absorb (in the region) and v_absorb. */
START_TEST(test_trace_names_the_parts_of_the_op_in_execution_order)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    variant v = {0, 0, 0, 0};
    qs_program *p = mla_prog(&f, QS_RECIPE_CURRENT, &v, 1);
    qs_program_result res;
    run_ok(ctx, p, &f, &res);
    const char *want[] = {"forward mla/q_down", "forward mla/kv_down",  "forward mla/q_up",
                          "forward mla/kv_up",  "forward mla/out_proj", "backward mla/out_proj",
                          "recompute mla/q_up", "recompute mla/kv_up",  "backward mla/kv_up",
                          "backward mla/q_up",  "backward mla/kv_down", "backward mla/q_down"};
    ck_assert_uint_eq(res.trace.n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < res.trace.n; i++) {
        char got[64];
        snprintf(got, sizeof got, "%s %s", qs_trace_phase_name(res.trace.rec[i].phase),
                 res.trace.rec[i].op);
        ck_assert_str_eq(got, want[i]);
        ck_assert_str_eq(res.trace.rec[i].kind, "linear");
    }
    char *jl;
    ck_assert_int_eq(qs_trace_to_jsonl(ctx, &res.trace, &jl, NULL), QS_OK);
    ck_assert_ptr_nonnull(strstr(jl, "{\"seq\":6,\"phase\":\"recompute\",\"op\":\"mla/q_up\","
                                     "\"kind\":\"linear\",\"precision\":\"quantized\","
                                     "\"recipe\":\"current\",\"scales\":\"fresh\""));
    free(jl);
    qs_program_result_free(&res);
    qs_program_free(p);
    v.absorbed = 1;
    p = mla_prog(&f, QS_RECIPE_CURRENT, &v, 0);
    run_ok(ctx, p, &f, &res);
    const char *einsums[] = {"forward mla/k_absorb", "forward mla/v_absorb",
                             "backward mla/v_absorb", "backward mla/k_absorb"};
    int seen = 0;
    for (size_t i = 0; i < res.trace.n; i++) {
        if (strcmp(res.trace.rec[i].kind, "einsum") != 0)
            continue;
        char got[64];
        snprintf(got, sizeof got, "%s %s", qs_trace_phase_name(res.trace.rec[i].phase),
                 res.trace.rec[i].op);
        ck_assert_int_lt(seen, 4);
        ck_assert_str_eq(got, einsums[seen++]);
        ck_assert_int_eq(res.trace.rec[i].precision, QS_PREC_HIGH);
        ck_assert_int_eq(res.trace.rec[i].has_recipe, 0);
    }
    ck_assert_int_eq(seen, 4);
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- failure atomicity */

/* Every quantizer of the first three ops (slot QS_MLA_LINEAR_COUNT: a linear op's), the
 * RNG state and the scope. */
typedef struct state_copy {
    int exists[3][QS_MLA_LINEAR_COUNT + 1][QS_RECIPE_COUNT];
    uint32_t scale[3][QS_MLA_LINEAR_COUNT + 1][QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT];
    float hist[3][QS_MLA_LINEAR_COUNT + 1][QS_RECIPE_COUNT][QS_SCOPE_ROLE_COUNT][8];
    uint64_t seed, offset;
    qs_scope_state scope;
} state_copy;

static void copy_state(qs_ctx *ctx, const qs_program *p, state_copy *c)
{
    memset(c, 0, sizeof *c);
    for (int op = 0; op < 3; op++)
        for (int l = 0; l <= QS_MLA_LINEAR_COUNT; l++)
            for (int k = 0; k < QS_RECIPE_COUNT; k++)
                for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++) {
                    const qs_quantizer *q = l < QS_MLA_LINEAR_COUNT
                                                ? qs_program_mla_quantizer(p, op, l, k, r)
                                                : qs_program_quantizer(p, op, k, r);
                    c->exists[op][l][k] = q != NULL;
                    if (!q)
                        continue;
                    c->scale[op][l][k][r] = qs_f32_bits(q->ds.scale);
                    ck_assert_int_le(q->ds.len, 8);
                    if (q->ds.history)
                        memcpy(c->hist[op][l][k][r], q->ds.history,
                               (size_t)q->ds.len * sizeof(float));
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

/* [SCOPE-FAULT] [SCOPE-FAIL-ATOMIC] [SCOPE-RESTORE-ERR]: autocast(delayed) { lin1,
 * mla(recompute), lin2 } and an NVFP4 recomputed op, cold and warm, with a failure injected
 * at every step (the op's record, replay and each of its linears among them): every run
 * fails with QS_ERR_INJECTED, returns nothing, and leaves the scope, every quantizer and
 * the RNG state as before. */
START_TEST(test_fault_injection_at_every_step_leaves_the_op_unchanged)
{
    fixture f;
    fixture_init(&f);
    int total = 0;
    for (int prog = 0; prog < 2; prog++)
        for (int warm = 0; warm < 2; warm++) {
            variant v = {1, 1, 0, 0};
            qs_program *p = prog == 0 ? sandwich(&f, 1) : mla_prog(&f, QS_RECIPE_NVFP4, &v, 1);
            qs_ctx *ctx = qs_ctx_new();
            qs_rng_set(ctx, 5, 9);
            qs_program_result res;
            if (warm) {
                run_ok(ctx, p, &f, &res);
                qs_program_result_free(&res);
            }
            int points = 0;
            for (int n = 1;; n++) {
                static state_copy before, after;
                copy_state(ctx, p, &before);
                qs_fault_set(ctx, n);
                qs_status s = qs_program_run(ctx, p, &f.x, &f.dy, &res);
                qs_fault_set(ctx, 0);
                if (s == QS_OK) {
                    qs_program_result_free(&res);
                    break;
                }
                ck_assert_msg(s == QS_ERR_INJECTED, "fault %d: %s: %s", n, qs_status_name(s),
                              qs_ctx_errmsg(ctx));
                ck_assert_ptr_null(res.y.data);
                ck_assert_ptr_null(res.param_grads);
                copy_state(ctx, p, &after);
                expect_state_equal(&before, &after, n);
                points++;
            }
            ck_assert_int_ge(points, 16); /* the op's own steps alone are 16 */
            total += points;
            qs_program_free(p);
            qs_ctx_free(ctx);
        }
    printf("mla fault injection: %d injection points over 4 program runs\n", total);
    fixture_free(&f);
}
END_TEST

/* ---------------------------------------------------------------- the builder */

/* [RCP-MLA-OP] [MLA-SHAPES]: bad arguments are rejected with a message and add nothing: a
 * missing or an extra weight, a weight of another shape, thd without cu_seqlens or with
 * cu_seqlens not ending at s, a name with '/' or too long for its parts' trace names, and
 * an activation of another row count at run time. */
START_TEST(test_builder_rejects_bad_arguments)
{
    fixture f;
    fixture_init(&f);
    qs_ctx *ctx = qs_ctx_new();
    qs_program *p;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    variant v = {1, 0, 0, 0};
    qs_program_mla_params mp = mla_params(&f, &v, 1);
    int id;
    mp.w[QS_MLA_W_UQ] = NULL;
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "m", &mp, &id), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "needs weight w_uq"));
    mp = mla_params(&f, &v, 1);
    mp.w[QS_MLA_W_Q] = &f.w[QS_MLA_W_Q];
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "m", &mp, &id), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "does not use weight w_q"));
    mp = mla_params(&f, &v, 1);
    mp.w[QS_MLA_W_DKV] = &f.w[QS_MLA_W_DQ];
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "m", &mp, &id), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "w_dkv must be [24, 32]"));
    mp = mla_params(&f, &v, 1);
    mp.cu_seqlens = NULL;
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "m", &mp, &id), QS_ERR_INVALID_ARG);
    int32_t bad_cu[4] = {0, 5, 16, 30};
    mp.cu_seqlens = bad_cu;
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "m", &mp, &id), QS_ERR_INVALID_ARG);
    mp = mla_params(&f, &v, 1);
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "a/b", &mp, &id), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "a_name_of_23_characters", &mp, &id),
                     QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "too long"));
    ck_assert_int_eq(qs_program_op_count(p), 0);
    ck_assert_int_eq(qs_program_mla(ctx, p, QS_PROGRAM_ROOT, "a_name_of_22_character", &mp, &id),
                     QS_OK);
    ck_assert_int_eq(qs_program_op_count(p), 1);
    qs_tensor x16;
    int64_t shape[2] = {16, HID};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &x16, QS_BF16, 2, shape), QS_OK);
    qs_program_result res;
    ck_assert_int_eq(qs_program_run(ctx, p, &x16, NULL, &res), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "must be [32, 32]"));
    qs_tensor_free(&x16);
    qs_program_free(p);
    qs_ctx_free(ctx);
    fixture_free(&f);
}
END_TEST

static Suite *engine_mla_suite(void)
{
    Suite *s = suite_create("engine_mla");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_up_proj_recompute_is_bitwise_for_every_recipe_layout_and_form);
    tcase_add_test(tc, test_up_proj_recompute_with_a_single_q_projection);
    tcase_add_test(tc, test_engine_op_equals_the_standalone_block);
    tcase_add_test(tc, test_delayed_scaling_over_steps_between_linear_ops);
    tcase_add_test(tc, test_mla_inside_a_checkpoint_region_replays_with_it);
    tcase_add_test(tc, test_mla_in_an_island_runs_high_precision);
    tcase_add_test(tc, test_calibrating_mla_records_amax_and_computes_high_precision);
    tcase_add_test(tc, test_audit_catches_defective_mla_replays);
    tcase_add_test(tc, test_trace_names_the_parts_of_the_op_in_execution_order);
    tcase_add_test(tc, test_fault_injection_at_every_step_leaves_the_op_unchanged);
    tcase_add_test(tc, test_builder_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(engine_mla_suite());
}
