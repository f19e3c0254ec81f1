/* test_dist_program.c: programs of the reference engine on N simulated ranks at once
 * (qs_dist_world_run, spec/distributed.md [DIST-HOOK]), one context and one thread per rank,
 * against the same program run on one context over the unsharded tensors: a
 * sequence-parallel chain of linears under current scaling, NVFP4, delayed scaling across
 * steps and MXFP8; a checkpoint whose replay reduces nothing; a nested region with a group
 * of pairs; a NaN on one rank; and ranks that diverge, which fail instead of hanging. The
 * loop index i gives N = 1 << i ranks. */
#include <math.h>
#include <string.h>

#include "qspec/distributed.h"
#include "qspec/format.h"
#include "qspec/program.h"
#include "qstest.h"

#define NRANKS(i) (1 << (i))
#define M         128 /* rows: 16 per rank at N = 8, a multiple of NVFP4's 16 */
#define K         64
#define N1        48
#define N2        32

/* ---------------------------------------------------------------- data */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* BF16 [rows, cols]; row m scaled by 2^(growth * m / rows), so later ranks hold larger
 * values and their amaxes differ. */
static void make_bf16(qs_tensor *t, int64_t rows, int64_t cols, uint64_t seed, int growth)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    seed = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t m = 0; m < rows; m++) {
        float mult = ldexpf(1.0f, (int)(growth * m / rows));
        for (int64_t k = 0; k < cols; k++) {
            double u = (double)(rng_next(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0;
            ((uint16_t *)t->data)[m * cols + k] = qs_f32_to_bf16((float)u * mult);
        }
    }
}

/* Rows r0.. of big hold small, byte for byte. */
static void assert_rows(const qs_tensor *small, const qs_tensor *big, int64_t r0, const char *what)
{
    ck_assert_msg(small->dtype == big->dtype && small->shape[1] == big->shape[1],
                  "%s: dtype or columns differ", what);
    size_t row = big->nbytes / (size_t)big->shape[0];
    const unsigned char *a = small->data, *b = (const unsigned char *)big->data + row * (size_t)r0;
    for (size_t i = 0; i < small->nbytes; i++)
        ck_assert_msg(a[i] == b[i],
                      "%s: byte %zu (row %lld of the unsharded) is 0x%02X, want 0x%02X", what, i,
                      (long long)(r0 + (int64_t)(i / row)), a[i], b[i]);
}

static int same_bytes(const qs_tensor *a, const qs_tensor *b)
{
    return a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* ---------------------------------------------------------------- the program */

/* autocast(kind, group g_outer) { [checkpoint] { linear a }; [autocast(kind, g_inner)]
 * { linear b } }, then backward. */
typedef struct spec {
    qs_recipe_kind kind;
    int ckpt;
    int g_outer, g_inner;
    int steps;
} spec;

typedef struct fixture {
    qs_tensor x, dy, wa, wb;
} fixture;

static void fixture_init(fixture *f, int growth)
{
    make_bf16(&f->x, M, K, 11, growth);
    make_bf16(&f->dy, M, N2, 12, growth);
    make_bf16(&f->wa, N1, K, 13, 0);
    make_bf16(&f->wb, N2, N1, 14, 0);
}

static void fixture_free(fixture *f)
{
    qs_tensor_free(&f->x);
    qs_tensor_free(&f->dy);
    qs_tensor_free(&f->wa);
    qs_tensor_free(&f->wb);
}

static qs_scope_recipe recipe_of(qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++) {
        r.cfg[i].history_len = 4;
        r.cfg[i].sr = 0; /* stochastic rounding indexes shards locally [DIST-NV-SR] */
    }
    return r;
}

static qs_status build(qs_ctx *ctx, const spec *sp, const fixture *f, int g_outer, qs_program **out)
{
    qs_scope_recipe r = recipe_of(sp->kind);
    qs_autocast_params outer = {1, 0, &r, g_outer}, inner = {1, 0, &r, sp->g_inner};
    int root, a_parent, b_parent, id;
    qs_status s = qs_program_new(ctx, out);
    if (s == QS_OK)
        s = qs_program_autocast(ctx, *out, QS_PROGRAM_ROOT, &outer, &root);
    a_parent = b_parent = root;
    if (s == QS_OK && sp->ckpt)
        s = qs_program_checkpoint(ctx, *out, root, &a_parent);
    if (s == QS_OK)
        s = qs_program_linear(ctx, *out, a_parent, "a", &f->wa, &id);
    if (s == QS_OK && sp->g_inner != sp->g_outer)
        s = qs_program_autocast(ctx, *out, root, &inner, &b_parent);
    if (s == QS_OK)
        s = qs_program_linear(ctx, *out, b_parent, "b", &f->wb, &id);
    return s;
}

/* One rank's (or the single context's) run: the program, its last result, and the
 * reductions of the last step per group. */
typedef struct job {
    const spec *sp;
    const fixture *f;
    const qs_tensor *x, *dy;
    int g_outer;
    int skip; /* returns at once without running (a rank that leaves) */
    qs_program *p;
    qs_program_result res;
    int64_t red1, red2;
} job;

static qs_status run_job(qs_ctx *ctx, job *j)
{
    if (j->skip)
        return QS_OK;
    qs_status s = build(ctx, j->sp, j->f, j->g_outer, &j->p);
    for (int step = 1; s == QS_OK && step <= j->sp->steps; step++) {
        int64_t r1 = qs_dist_reductions(ctx, 1), r2 = qs_dist_reductions(ctx, 2);
        qs_program_result_free(&j->res);
        s = qs_program_run(ctx, j->p, j->x, j->dy, &j->res);
        j->red1 = qs_dist_reductions(ctx, 1) - r1;
        j->red2 = qs_dist_reductions(ctx, 2) - r2;
    }
    return s;
}

static void job_free(job *j)
{
    qs_program_result_free(&j->res);
    qs_program_free(j->p);
}

typedef struct world_jobs {
    job j[QS_DIST_MAX_RANKS];
} world_jobs;

static qs_status rank_fn(qs_ctx *ctx, int rank, void *user)
{
    return run_job(ctx, &((world_jobs *)user)->j[rank]);
}

/* The world: group 1 of every rank, group 2 of pairs (ranks 2p and 2p + 1). */
static void world_init(qs_dist_world *w, int n)
{
    int pairs[QS_DIST_MAX_RANKS];
    for (int r = 0; r < n; r++)
        pairs[r] = r / 2;
    ck_assert_int_eq(qs_dist_world_init(NULL, w, n), QS_OK);
    ck_assert_int_eq(qs_dist_world_add_group(NULL, w, 1, NULL), QS_OK);
    ck_assert_int_eq(qs_dist_world_add_group(NULL, w, 2, pairs), QS_OK);
}

/* Runs sp on one context over f and on n ranks over row shards of x and dy. */
static void run_both(const spec *sp, const fixture *f, int n, job *single, world_jobs *wj,
                     qs_tensor *xs, qs_tensor *dys)
{
    qs_ctx *ctx = qs_ctx_new();
    memset(single, 0, sizeof *single);
    single->sp = sp;
    single->f = f;
    single->x = &f->x;
    single->dy = &f->dy;
    single->g_outer = sp->g_outer;
    ck_assert_msg(run_job(ctx, single) == QS_OK, "unsharded run: %s", qs_ctx_errmsg(ctx));
    qs_ctx_free(ctx);

    ck_assert_int_eq(qs_dist_split_rows(NULL, &f->x, n, NULL, xs), QS_OK);
    ck_assert_int_eq(qs_dist_split_rows(NULL, &f->dy, n, NULL, dys), QS_OK);
    qs_dist_world w;
    world_init(&w, n);
    memset(wj, 0, sizeof *wj);
    for (int r = 0; r < n; r++) {
        wj->j[r] = *single;
        memset(&wj->j[r].res, 0, sizeof wj->j[r].res);
        wj->j[r].p = NULL;
        wj->j[r].x = &xs[r];
        wj->j[r].dy = &dys[r];
    }
    qs_ctx *top = qs_ctx_new();
    qs_status st = qs_dist_world_run(top, &w, rank_fn, wj, NULL);
    ck_assert_msg(st == QS_OK, "ranks: %s", qs_ctx_errmsg(top));
    qs_ctx_free(top);
    qs_dist_world_free(&w);
}

static void free_both(job *single, world_jobs *wj, int n, qs_tensor *xs, qs_tensor *dys)
{
    job_free(single);
    for (int r = 0; r < n; r++) {
        job_free(&wj->j[r]);
        qs_tensor_free(&xs[r]);
        qs_tensor_free(&dys[r]);
    }
}

/* Every delayed quantizer of both linears is bitwise the unsharded program's
 * [DIST-DS-EQUAL]. */
static void assert_delayed_states(const qs_program *got, const qs_program *want, int rank)
{
    for (int op = 0; op < 2; op++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
            const qs_quantizer *a = qs_program_quantizer(got, op, QS_RECIPE_DELAYED, role);
            const qs_quantizer *b = qs_program_quantizer(want, op, QS_RECIPE_DELAYED, role);
            ck_assert_msg(a && b, "rank %d: op %d role %d: quantizer missing", rank, op, role);
            ck_assert_msg(qs_f32_bits(a->ds.scale) == qs_f32_bits(b->ds.scale),
                          "rank %d op %d role %d: scale 0x%08X, unsharded 0x%08X", rank, op, role,
                          qs_f32_bits(a->ds.scale), qs_f32_bits(b->ds.scale));
            for (int64_t t = 0; t < a->ds.len; t++)
                ck_assert_msg(qs_f32_bits(a->ds.history[t]) == qs_f32_bits(b->ds.history[t]),
                              "rank %d op %d role %d: history[%lld] 0x%08X, unsharded 0x%08X", rank,
                              op, role, (long long)t, qs_f32_bits(a->ds.history[t]),
                              qs_f32_bits(b->ds.history[t]));
        }
}

/* ---------------------------------------------------------------- tests */

static const qs_recipe_kind sp_kinds[] = {QS_RECIPE_CURRENT, QS_RECIPE_NVFP4, QS_RECIPE_DELAYED,
                                          QS_RECIPE_MXFP8};

/* [DIST-LINEAR-SP] [DIST-CS-EQUAL] [DIST-DS-EQUAL]: every rank's y and dx rows are bitwise
 * the unsharded program's rows; delayed states equal the unsharded quantizers'; each rank
 * counts the reductions of one process [DIST-COUNT]. */
START_TEST(test_sequence_parallel_program_matches_the_unsharded_run)
{
    int n = NRANKS(_i);
    fixture f;
    fixture_init(&f, 6);
    for (size_t ki = 0; ki < sizeof sp_kinds / sizeof sp_kinds[0]; ki++) {
        spec sp = {sp_kinds[ki], 0, 1, 1, sp_kinds[ki] == QS_RECIPE_DELAYED ? 3 : 1};
        job single;
        world_jobs wj;
        qs_tensor xs[QS_DIST_MAX_RANKS], dys[QS_DIST_MAX_RANKS];
        run_both(&sp, &f, n, &single, &wj, xs, dys);
        /* tensor amaxes: x and w of two linears forward, dy of two backward; delayed: one
         * reduction per key at each update (forward, then backward); block scales: none */
        int64_t want = sp.kind == QS_RECIPE_MXFP8 ? 0 : sp.kind == QS_RECIPE_DELAYED ? 2 : 6;
        ck_assert_int_eq(single.red1, want);
        int64_t off = 0;
        for (int r = 0; r < n; r++) {
            char what[64];
            snprintf(what, sizeof what, "%s rank %d y", qs_recipe_kind_name(sp.kind), r);
            assert_rows(&wj.j[r].res.y, &single.res.y, off, what);
            snprintf(what, sizeof what, "%s rank %d dx", qs_recipe_kind_name(sp.kind), r);
            assert_rows(&wj.j[r].res.dx, &single.res.dx, off, what);
            ck_assert_int_eq(wj.j[r].red1, want);
            if (sp.kind == QS_RECIPE_DELAYED)
                assert_delayed_states(wj.j[r].p, single.p, r);
            off += xs[r].shape[0];
        }
        free_both(&single, &wj, n, xs, dys);
    }
    fixture_free(&f);
}
END_TEST

/* [DIST-REPLAY]: with linear a checkpointed, the replay reads the recorded reduced amaxes:
 * the same number of reductions as without the checkpoint, the same y, dx and gradients,
 * and the recompute record says the scales are recorded. */
START_TEST(test_checkpoint_replay_reduces_nothing)
{
    int n = NRANKS(_i);
    fixture f;
    fixture_init(&f, 6);
    static const qs_recipe_kind kinds[] = {QS_RECIPE_CURRENT, QS_RECIPE_NVFP4};
    for (size_t ki = 0; ki < 2; ki++) {
        spec plain = {kinds[ki], 0, 1, 1, 1}, ck = {kinds[ki], 1, 1, 1, 1};
        job s0, s1;
        world_jobs w0, w1;
        qs_tensor x0[QS_DIST_MAX_RANKS], d0[QS_DIST_MAX_RANKS];
        qs_tensor x1[QS_DIST_MAX_RANKS], d1[QS_DIST_MAX_RANKS];
        run_both(&plain, &f, n, &s0, &w0, x0, d0);
        run_both(&ck, &f, n, &s1, &w1, x1, d1);
        for (int r = 0; r < n; r++) {
            const qs_program_result *a = &w1.j[r].res, *b = &w0.j[r].res;
            ck_assert_int_eq(w1.j[r].red1, w0.j[r].red1);
            ck_assert_int_eq(a->nreplays, 1);
            ck_assert(same_bytes(&a->y, &b->y));
            ck_assert(same_bytes(&a->dx, &b->dx));
            for (int op = 0; op < 2; op++)
                ck_assert_msg(same_bytes(&a->grads[op], &b->grads[op]), "rank %d grad %d", r, op);
            int seen = 0;
            for (size_t t = 0; t < a->trace.n; t++)
                if (a->trace.rec[t].phase == QS_PHASE_RECOMPUTE) {
                    ck_assert_int_eq(a->trace.rec[t].scales, QS_SCALES_RECORDED);
                    seen++;
                }
            ck_assert_int_eq(seen, 1);
        }
        free_both(&s0, &w0, n, x0, d0);
        free_both(&s1, &w1, n, x1, d1);
    }
    fixture_free(&f);
}
END_TEST

/* [DIST-NESTED]: linear b in a nested region with the group of pairs reduces over its pair
 * (counted on group 2), linear a over the world. With two ranks the pair is the world, so
 * the run is the unsharded one; with more, the pairs hold different amaxes and linear b's
 * output differs from the unsharded rows while linear a's gradient input scale does not
 * matter to it. */
START_TEST(test_nested_region_with_a_group_of_pairs)
{
    int n = NRANKS(_i);
    fixture f;
    fixture_init(&f, 6);
    spec sp = {QS_RECIPE_CURRENT, 0, 1, 2, 1};
    job single;
    world_jobs wj;
    qs_tensor xs[QS_DIST_MAX_RANKS], dys[QS_DIST_MAX_RANKS];
    run_both(&sp, &f, n, &single, &wj, xs, dys);
    ck_assert_int_eq(single.red1, 3); /* a: x, w, dy */
    ck_assert_int_eq(single.red2, 3); /* b: x, w, dy */
    int differ = 0;
    int64_t off = 0;
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(wj.j[r].red1, 3);
        ck_assert_int_eq(wj.j[r].red2, 3);
        if (n <= 2) {
            assert_rows(&wj.j[r].res.y, &single.res.y, off, "pair = world: y");
        } else {
            size_t row = single.res.y.nbytes / M;
            differ +=
                memcmp(wj.j[r].res.y.data, (const char *)single.res.y.data + row * (size_t)off,
                       wj.j[r].res.y.nbytes) != 0;
        }
        off += xs[r].shape[0];
    }
    if (n > 2) /* the pairs below the last see smaller amaxes than the whole tensor's */
        ck_assert_int_ge(differ, n - 2);
    free_both(&single, &wj, n, xs, dys);
    fixture_free(&f);
}
END_TEST

/* [DIST-REDUCE-NAN] with a NaN in the last rank's rows: a quantization's amax ignores it
 * ([REC-AMAX]), on that rank as on the unsharded tensor, so after two delayed steps every
 * rank holds the unsharded quantizers' finite state, and under current scaling every rank's
 * rows are the unsharded rows (the NaN row included). A NaN slot written by calibration is
 * reduced like any value (tests/test_distributed.c). */
START_TEST(test_a_nan_on_one_rank_is_ignored_alike_on_every_rank)
{
    int n = NRANKS(_i);
    fixture f;
    fixture_init(&f, 0);
    ((uint16_t *)f.x.data)[(M - 1) * K + 3] = 0x7FC1; /* a NaN in the last rank's rows */
    static const qs_recipe_kind kinds[] = {QS_RECIPE_DELAYED, QS_RECIPE_CURRENT};
    for (int ki = 0; ki < 2; ki++) {
        spec sp = {kinds[ki], 0, 1, 1, 2};
        job single;
        world_jobs wj;
        qs_tensor xs[QS_DIST_MAX_RANKS], dys[QS_DIST_MAX_RANKS];
        run_both(&sp, &f, n, &single, &wj, xs, dys);
        int64_t off = 0;
        for (int r = 0; r < n; r++) {
            if (sp.kind == QS_RECIPE_DELAYED) {
                const qs_quantizer *q =
                    qs_program_quantizer(single.p, 0, QS_RECIPE_DELAYED, QS_SCOPE_X);
                int nonzero = 0;
                for (int64_t t = 0; q && t < q->ds.len; t++) {
                    ck_assert(isfinite(q->ds.history[t]));
                    nonzero += q->ds.history[t] > 0.0f;
                }
                ck_assert_int_eq(nonzero, 2); /* the two steps' amaxes, NaN ignored */
                assert_delayed_states(wj.j[r].p, single.p, r);
            } else {
                assert_rows(&wj.j[r].res.y, &single.res.y, off, "current y with a NaN");
            }
            off += xs[r].shape[0];
        }
        free_both(&single, &wj, n, xs, dys);
    }
    fixture_free(&f);
}
END_TEST

/* [DIST-SPMD]: ranks that reduce over different groups, or a rank that leaves, fail with
 * QS_ERR_STATE on the ranks left waiting; the run returns instead of hanging. */
START_TEST(test_diverging_ranks_fail_instead_of_hanging)
{
    int n = NRANKS(_i);
    if (n == 1)
        return; /* one rank cannot diverge */
    fixture f;
    fixture_init(&f, 0);
    qs_tensor xs[QS_DIST_MAX_RANKS], dys[QS_DIST_MAX_RANKS];
    ck_assert_int_eq(qs_dist_split_rows(NULL, &f.x, n, NULL, xs), QS_OK);
    ck_assert_int_eq(qs_dist_split_rows(NULL, &f.dy, n, NULL, dys), QS_OK);
    spec sp = {QS_RECIPE_CURRENT, 0, 1, 1, 1};
    for (int mode = 0; mode < 2; mode++) {
        qs_dist_world w;
        world_init(&w, n);
        world_jobs wj;
        memset(&wj, 0, sizeof wj);
        for (int r = 0; r < n; r++) {
            wj.j[r].sp = &sp;
            wj.j[r].f = &f;
            wj.j[r].x = &xs[r];
            wj.j[r].dy = &dys[r];
            wj.j[r].g_outer = 1;
        }
        if (mode == 0)
            wj.j[n - 1].g_outer = 2; /* reduces over its pair, the others over the world */
        else
            wj.j[n - 1].skip = 1; /* leaves at once */
        qs_status st[QS_DIST_MAX_RANKS];
        qs_ctx *top = qs_ctx_new();
        ck_assert_int_eq(qs_dist_world_run(top, &w, rank_fn, &wj, st), QS_ERR_STATE);
        ck_assert_msg(strstr(qs_ctx_errmsg(top), "cannot complete [DIST-SPMD]"), "%s",
                      qs_ctx_errmsg(top));
        ck_assert_int_eq(st[0], QS_ERR_STATE);
        if (mode == 1) {
            ck_assert_int_eq(st[n - 1], QS_OK);
            ck_assert_msg(strstr(qs_ctx_errmsg(top), "has returned"), "%s", qs_ctx_errmsg(top));
        }
        for (int r = 0; r < n; r++)
            job_free(&wj.j[r]);
        qs_ctx_free(top);
        qs_dist_world_free(&w);
    }
    for (int r = 0; r < n; r++) {
        qs_tensor_free(&xs[r]);
        qs_tensor_free(&dys[r]);
    }
    fixture_free(&f);
}
END_TEST

/* [DIST-HOOK]: one context without an all-reduce is a world of one rank — a reduction
 * returns its values and counts on its group; group 0 neither reduces nor counts; a
 * negative amax is rejected. */
START_TEST(test_a_context_alone_is_a_world_of_one_rank)
{
    qs_ctx *ctx = qs_ctx_new();
    float v[2] = {3.0f, NAN};
    ck_assert_int_eq(qs_dist_reduce(ctx, 0, 2, v), QS_OK);
    ck_assert_int_eq(qs_dist_reductions(ctx, 0), 0);
    ck_assert_int_eq(qs_dist_reduce(ctx, 5, 2, v), QS_OK);
    ck_assert(v[0] == 3.0f && isnan(v[1]));
    ck_assert_int_eq(qs_dist_reductions(ctx, 5), 1);
    ck_assert_int_eq(qs_dist_reductions(ctx, 4), 0);
    float neg = -0.0f;
    ck_assert_int_eq(qs_dist_reduce(ctx, 5, 1, &neg), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_dist_reductions(ctx, 0), 1);
    qs_ctx_free(ctx);
}
END_TEST

static Suite *dist_program_suite(void)
{
    Suite *s = suite_create("dist_program");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_sequence_parallel_program_matches_the_unsharded_run, 0, 4);
    tcase_add_loop_test(tc, test_checkpoint_replay_reduces_nothing, 0, 4);
    tcase_add_loop_test(tc, test_nested_region_with_a_group_of_pairs, 0, 4);
    tcase_add_loop_test(tc, test_a_nan_on_one_rank_is_ignored_alike_on_every_rank, 0, 4);
    tcase_add_loop_test(tc, test_diverging_ranks_fail_instead_of_hanging, 0, 4);
    tcase_add_test(tc, test_a_context_alone_is_a_world_of_one_rank);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(dist_program_suite());
}
