/* test_distributed.c: the distributed semantics of spec/distributed.md on simulated ranks —
 * the exact amax all-reduce and its NaN rule, sequence- and tensor-parallel linears under
 * current scaling against the unsharded single-rank run, delayed-scaling updates across a
 * group against one quantizer fed the maximum, a replay that reduces nothing, nested
 * regions with other groups, and block scales that stay local. Most tests run for
 * N = 1, 2, 4 and 8 ranks (the loop index i gives N = 1 << i). */
#include <math.h>
#include <string.h>

#include "qspec/distributed.h"
#include "qspec/format.h"
#include "qstest.h"

#define NRANKS(i) (1 << (i))

/* ---------------------------------------------------------------- data */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Roughly N(0,1) (Irwin-Hall of 12 uniforms). */
static float rand_normal(uint64_t *s)
{
    double sum = -6.0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) * 0x1p-53;
    return (float)sum;
}

/* A BF16 [rows, cols] tensor of random values; row m is scaled by 2^(growth * m / rows),
 * so later rows (later ranks) hold larger values. Powers of two keep BF16 values exact. */
static void make_bf16(qs_tensor *t, int64_t rows, int64_t cols, uint64_t seed, int growth)
{
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, t, QS_BF16, 2, shape), QS_OK);
    seed = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t m = 0; m < rows; m++) {
        float mult = ldexpf(1.0f, (int)(growth * m / rows));
        for (int64_t k = 0; k < cols; k++)
            ((uint16_t *)t->data)[m * cols + k] = qs_f32_to_bf16(rand_normal(&seed) * mult);
    }
}

static void set_bf16(qs_tensor *t, int64_t m, int64_t k, float v)
{
    ((uint16_t *)t->data)[m * t->shape[1] + k] = qs_f32_to_bf16(v);
}

/* Row offsets of an even split (qs_dist_split_rows with rows NULL). */
static int64_t row_offset(int64_t M, int n, int r)
{
    int64_t off = 0;
    for (int p = 0; p < r; p++)
        off += M / n + (p < M % n ? 1 : 0);
    return off;
}

static void split(const qs_tensor *t, int n, qs_tensor *parts, const qs_tensor **ptrs)
{
    ck_assert_int_eq(qs_dist_split_rows(NULL, t, n, NULL, parts), QS_OK);
    for (int r = 0; r < n; r++)
        ptrs[r] = &parts[r];
}

static void free_parts(qs_tensor *parts, int n)
{
    for (int r = 0; r < n; r++)
        qs_tensor_free(&parts[r]);
}

static uint32_t bits(float v)
{
    return qs_f32_bits(v);
}

static size_t elem_bytes(const qs_tensor *t)
{
    return t->nbytes / t->numel;
}

/* Rows r0.. of the row-major tensor big equal every row of small, byte for byte. */
static void assert_rows_equal(const qs_tensor *small, const qs_tensor *big, int64_t r0,
                              const char *what)
{
    ck_assert_msg(small->shape[1] == big->shape[1], "%s: column counts differ", what);
    size_t row = elem_bytes(big) * (size_t)big->shape[1];
    const unsigned char *a = small->data, *b = (const unsigned char *)big->data + row * (size_t)r0;
    for (size_t i = 0; i < row * (size_t)small->shape[0]; i++)
        ck_assert_msg(a[i] == b[i], "%s: byte %zu is 0x%02X, unsharded 0x%02X (row offset %lld)",
                      what, i, a[i], b[i], (long long)r0);
}

/* Columns c0.. of big equal every column of small (one-byte elements or FP32). */
static void assert_cols_equal(const qs_tensor *small, const qs_tensor *big, int64_t c0,
                              const char *what)
{
    size_t eb = elem_bytes(big);
    ck_assert_msg(small->shape[0] == big->shape[0], "%s: row counts differ", what);
    for (int64_t i = 0; i < small->shape[0]; i++)
        for (int64_t j = 0; j < small->shape[1]; j++) {
            const unsigned char *a =
                (const unsigned char *)small->data + eb * (size_t)(i * small->shape[1] + j);
            const unsigned char *b =
                (const unsigned char *)big->data + eb * (size_t)(i * big->shape[1] + c0 + j);
            ck_assert_msg(memcmp(a, b, eb) == 0, "%s: element (%lld,%lld) differs from column %lld",
                          what, (long long)i, (long long)j, (long long)(c0 + j));
        }
}

static void assert_same_tensor(const qs_tensor *a, const qs_tensor *b, const char *what)
{
    ck_assert_msg(qs_tensor_same_layout(a, b), "%s: layouts differ", what);
    ck_assert_msg(memcmp(a->data, b->data, a->nbytes) == 0, "%s: contents differ", what);
}

static void assert_same_quantized(const qs_quantized *a, const qs_quantized *b, const char *what)
{
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        ck_assert_int_eq(a->data[d].dtype, b->data[d].dtype);
        if (a->data[d].dtype == QS_DTYPE_INVALID)
            continue;
        assert_same_tensor(&a->data[d], &b->data[d], what);
        assert_same_tensor(&a->scale[d], &b->scale[d], what);
        ck_assert_uint_eq(bits(a->amax[d]), bits(b->amax[d]));
        ck_assert_uint_eq(bits(a->global_enc[d]), bits(b->global_enc[d]));
        ck_assert_uint_eq(bits(a->global_dec[d]), bits(b->global_dec[d]));
    }
}

/* ---------------------------------------------------------------- worlds and regions */

static qs_recipe_config config(qs_recipe_kind kind, qs_tensor_role role)
{
    qs_recipe_config c;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, kind, role), QS_OK);
    return c;
}

/* A world of n ranks with group 1 the world and group 2 pairs of ranks (colors r / 2). */
static void make_world(qs_dist_world *w, int n)
{
    int pairs[QS_DIST_MAX_RANKS];
    for (int r = 0; r < n; r++)
        pairs[r] = r / 2;
    ck_assert_int_eq(qs_dist_world_init(NULL, w, n), QS_OK);
    ck_assert_int_eq(qs_dist_world_add_group(NULL, w, 1, NULL), QS_OK);
    ck_assert_int_eq(qs_dist_world_add_group(NULL, w, 2, pairs), QS_OK);
}

/* Enters an enabled region of recipe kind and group on every rank. */
static void enter(qs_dist_world *w, qs_recipe_kind kind, int group, qs_scope_token *tokens)
{
    qs_scope_recipe rcp;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &rcp, kind), QS_OK);
    qs_autocast_params p = {1, 0, &rcp, group};
    ck_assert_int_eq(qs_dist_autocast_enter(NULL, w, &p, tokens), QS_OK);
}

static void leave(qs_dist_world *w, const qs_scope_token *tokens)
{
    ck_assert_int_eq(qs_dist_autocast_exit(NULL, w, tokens), QS_OK);
}

/* The scale single-rank current scaling gives t. */
static float single_current_scale(const qs_tensor *t, qs_tensor_role role)
{
    qs_recipe_config c = config(QS_RECIPE_CURRENT, role);
    qs_quantizer q;
    qs_quantized z;
    ck_assert_int_eq(qs_quantizer_init(NULL, &q, &c), QS_OK);
    ck_assert_int_eq(qs_quantize(NULL, &q, t, &z), QS_OK);
    float s = z.global_enc[QS_DIR_ROW];
    qs_quantized_free(&z);
    qs_quantizer_free(&q);
    return s;
}

/* A tensor holding rows [r0, r1) of t. */
static void row_block(const qs_tensor *t, int64_t r0, int64_t r1, qs_tensor *out)
{
    int64_t shape[2] = {r1 - r0, t->shape[1]};
    ck_assert_int_eq(qs_tensor_alloc(NULL, out, t->dtype, 2, shape), QS_OK);
    size_t row = elem_bytes(t) * (size_t)t->shape[1];
    memcpy(out->data, (const unsigned char *)t->data + row * (size_t)r0, row * (size_t)(r1 - r0));
}

/* ---------------------------------------------------------------- the reduction */

/* The oracle of [DIST-REDUCE-NAN], written from the statement, not from the bit rule: a
 * NaN wins (of several, the one with the larger pattern), else the numeric maximum. */
static float oracle_max(const float *v, int n)
{
    float nan = 0.0f;
    int have_nan = 0;
    double best = 0.0;
    float best_v = 0.0f;
    for (int i = 0; i < n; i++) {
        if (isnan(v[i])) {
            if (!have_nan || bits(v[i]) > bits(nan))
                nan = v[i];
            have_nan = 1;
        } else if ((double)v[i] > best) {
            best = (double)v[i];
            best_v = v[i];
        }
    }
    return have_nan ? nan : best_v;
}

START_TEST(test_allreduce_gives_every_rank_the_maximum_and_nan_wins)
{
    int n = NRANKS(_i);
    qs_dist_world w;
    make_world(&w, n);
    enum { NV = 6 };
    float vals[QS_DIST_MAX_RANKS][NV], *p[QS_DIST_MAX_RANKS];
    uint64_t seed = 77 + (uint64_t)n;
    for (int r = 0; r < n; r++) {
        p[r] = vals[r];
        for (int i = 0; i < NV; i++)
            vals[r][i] = fabsf(rand_normal(&seed)) * 100.0f;
        vals[r][3] = 0.0f;
        vals[r][4] = qs_f32_from_bits(0x00000001u + (uint32_t)r); /* subnormals */
    }
    vals[n - 1][0] = qs_f32_from_bits(0x7FC00001u); /* one NaN, on the last rank */
    vals[0][1] = INFINITY;                          /* one +Inf, on the first */
    vals[0][2] = qs_f32_from_bits(0x7FC00005u);     /* a NaN on the first rank ... */
    vals[n - 1][2] = qs_f32_from_bits(0xFFC00000u); /* ... and a negative NaN on the last */
    float expect[NV];
    for (int i = 0; i < NV; i++) {
        float col[QS_DIST_MAX_RANKS];
        for (int r = 0; r < n; r++)
            col[r] = vals[r][i];
        expect[i] = oracle_max(col, n);
    }
    qs_dist_group *g = qs_dist_world_group(&w, 1);
    /* [DIST-REDUCE-MAX] [DIST-REDUCE-NAN]: every rank receives the same bits. */
    ck_assert_int_eq(qs_dist_allreduce_amax(NULL, g, NV, p), QS_OK);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < NV; i++)
            ck_assert_msg(bits(vals[r][i]) == bits(expect[i]),
                          "N=%d rank %d value %d: 0x%08X, expected 0x%08X", n, r, i,
                          bits(vals[r][i]), bits(expect[i]));
    ck_assert(isnan(vals[0][0]));                     /* the NaN reached rank 0 */
    ck_assert_uint_eq(bits(vals[0][0]), 0x7FC00001u); /* a single NaN: bitwise that NaN */
    if (n > 1)
        ck_assert_uint_eq(bits(vals[0][2]), 0xFFC00000u); /* of two NaNs: the larger pattern */
    ck_assert(isinf(vals[n - 1][1]));
    ck_assert_uint_eq(bits(vals[n - 1][3]), 0u);
    ck_assert_uint_eq(bits(vals[0][4]), 0x00000001u + (uint32_t)(n - 1));
    ck_assert_int_eq(g->reductions, 1); /* [DIST-COUNT]: one call, one reduction */
    qs_dist_world_free(&w);
}
END_TEST

START_TEST(test_allreduce_combines_each_subgroup_separately)
{
    int n = NRANKS(_i);
    qs_dist_world w;
    make_world(&w, n);
    float vals[QS_DIST_MAX_RANKS], *p[QS_DIST_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        vals[r] = (float)(r * 3 % 7) + 0.5f;
        p[r] = &vals[r];
    }
    float orig[QS_DIST_MAX_RANKS];
    memcpy(orig, vals, sizeof vals);
    qs_dist_group *pairs = qs_dist_world_group(&w, 2);
    /* [DIST-GROUP]: ranks 2j and 2j+1 reduce together and with nobody else. */
    ck_assert_int_eq(qs_dist_allreduce_amax(NULL, pairs, 1, p), QS_OK);
    for (int r = 0; r < n; r++) {
        float pair[2] = {orig[r & ~1], (r | 1) < n ? orig[r | 1] : orig[r & ~1]};
        ck_assert_uint_eq(bits(vals[r]), bits(oracle_max(pair, 2)));
    }
    ck_assert_int_eq(pairs->reductions, 1);
    ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 0);
    qs_dist_world_free(&w);
}
END_TEST

START_TEST(test_reduction_is_order_free_and_one_rank_keeps_its_value)
{
    /* [DIST-REDUCE-ORDER]: commutative and associative over the specials an amax can be. */
    static const uint32_t sp[] = {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,
                                  0x3F800000u, 0x3F800001u, 0x7F7FFFFFu, 0x7F800000u,
                                  0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0xFFC00000u};
    size_t ns = sizeof sp / sizeof sp[0];
    for (size_t a = 0; a < ns; a++)
        for (size_t b = 0; b < ns; b++) {
            float x = qs_f32_from_bits(sp[a]), y = qs_f32_from_bits(sp[b]);
            ck_assert_uint_eq(bits(qs_dist_amax_max(x, y)), bits(qs_dist_amax_max(y, x)));
            for (size_t c = 0; c < ns; c++) {
                float z = qs_f32_from_bits(sp[c]);
                ck_assert_uint_eq(bits(qs_dist_amax_max(qs_dist_amax_max(x, y), z)),
                                  bits(qs_dist_amax_max(x, qs_dist_amax_max(y, z))));
            }
        }
    /* Rotating the ranks' values among the ranks does not change the result. */
    enum { N = 8 };
    qs_dist_world w;
    make_world(&w, N);
    qs_dist_group *g = qs_dist_world_group(&w, 1);
    float first = 0.0f;
    for (int rot = 0; rot < N; rot++) {
        float vals[N], *p[N];
        for (int r = 0; r < N; r++) {
            vals[r] = qs_f32_from_bits(sp[(size_t)((r + rot) % N) + 2]);
            p[r] = &vals[r];
        }
        ck_assert_int_eq(qs_dist_allreduce_amax(NULL, g, 1, p), QS_OK);
        if (rot == 0)
            first = vals[0];
        ck_assert_uint_eq(bits(vals[0]), bits(first));
    }
    ck_assert_uint_eq(bits(first), 0x7FC00000u); /* sp[2..9] holds a NaN: it wins */
    qs_dist_world_free(&w);
    /* A one-rank subgroup gets its own value back, NaN payload and sign included. */
    qs_dist_world one;
    make_world(&one, 1);
    float v = qs_f32_from_bits(0xFFC01234u), *pv = &v;
    ck_assert_int_eq(qs_dist_allreduce_amax(NULL, qs_dist_world_group(&one, 1), 1, &pv), QS_OK);
    ck_assert_uint_eq(bits(v), 0xFFC01234u);
    qs_dist_world_free(&one);
}
END_TEST

START_TEST(test_reduction_rejects_a_negative_amax_and_changes_nothing)
{
    int n = NRANKS(_i);
    qs_dist_world w;
    make_world(&w, n);
    qs_ctx *ctx = qs_ctx_new();
    qs_dist_group *g = qs_dist_world_group(&w, 1);
    for (int bad = 0; bad < 2; bad++) {
        float vals[QS_DIST_MAX_RANKS], *p[QS_DIST_MAX_RANKS];
        for (int r = 0; r < n; r++) {
            vals[r] = (float)r + 1.0f;
            p[r] = &vals[r];
        }
        vals[n - 1] = bad ? -0.0f : -2.0f; /* [DIST-REDUCE-MAX]: -0 is not an amax either */
        ck_assert_int_eq(qs_dist_allreduce_amax(ctx, g, 1, p), QS_ERR_INVALID_ARG);
        char want[32];
        snprintf(want, sizeof want, "rank %d", n - 1);
        ck_assert_msg(strstr(qs_ctx_errmsg(ctx), want), "message: %s", qs_ctx_errmsg(ctx));
        for (int r = 0; r < n - 1; r++)
            ck_assert_uint_eq(bits(vals[r]), bits((float)r + 1.0f));
    }
    ck_assert_int_eq(g->reductions, 0);
    qs_ctx_free(ctx);
    qs_dist_world_free(&w);
}
END_TEST

START_TEST(test_bit_integer_max_is_the_reduction_and_a_float_max_is_not)
{
    /* [DIST-BACKEND]: what a device computes with an unsigned-integer MAX all-reduce over
     * the bit patterns (NCCL ncclUint32/ncclMax) is the reference's result; an fmaxf
     * reduction loses a NaN met early. */
    enum { N = 4 };
    float v[N] = {qs_f32_from_bits(0x7FC00000u), 3.0f, 5.0f, 1.0f};
    uint32_t u = 0;
    for (int r = 0; r < N; r++)
        if (bits(v[r]) > u)
            u = bits(v[r]);
    qs_dist_world w;
    make_world(&w, N);
    float *p[N];
    for (int r = 0; r < N; r++)
        p[r] = &v[r];
    float f = v[0];
    for (int r = 1; r < N; r++)
        f = fmaxf(f, v[r]);
    ck_assert_int_eq(qs_dist_allreduce_amax(NULL, qs_dist_world_group(&w, 1), 1, p), QS_OK);
    for (int r = 0; r < N; r++)
        ck_assert_uint_eq(bits(v[r]), u);
    ck_assert(isnan(v[0]));
    ck_assert(!isnan(f)); /* fmaxf(NaN, 3) = 3: the float max dropped the NaN */
    qs_dist_world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- sharded linears */

/* Per-rank quantizers of one recipe for a linear. */
typedef struct rank_quantizers {
    qs_quantizer x[QS_DIST_MAX_RANKS], w[QS_DIST_MAX_RANKS];
    qs_quantizer *px[QS_DIST_MAX_RANKS], *pw[QS_DIST_MAX_RANKS];
} rank_quantizers;

static void init_quantizers(rank_quantizers *q, int n, qs_recipe_kind kind)
{
    qs_recipe_config cx = config(kind, QS_ROLE_INPUT), cw = config(kind, QS_ROLE_WEIGHT);
    if (kind == QS_RECIPE_DELAYED)
        cx.history_len = cw.history_len = 4;
    for (int r = 0; r < n; r++) {
        ck_assert_int_eq(qs_quantizer_init(NULL, &q->x[r], &cx), QS_OK);
        ck_assert_int_eq(qs_quantizer_init(NULL, &q->w[r], &cw), QS_OK);
        q->px[r] = &q->x[r];
        q->pw[r] = &q->w[r];
    }
}

static void free_quantizers(rank_quantizers *q, int n)
{
    for (int r = 0; r < n; r++) {
        qs_quantizer_free(&q->x[r]);
        qs_quantizer_free(&q->w[r]);
    }
}

static void free_linear(int n, qs_tensor *y, qs_quantized *xq, qs_quantized *wq)
{
    for (int r = 0; r < n; r++) {
        qs_tensor_free(&y[r]);
        qs_quantized_free(&xq[r]);
        qs_quantized_free(&wq[r]);
    }
}

/* The unsharded single-rank forward under kind. */
static void single_linear(qs_recipe_kind kind, const qs_tensor *x, const qs_tensor *wt,
                          qs_tensor *y, qs_quantized *xq, qs_quantized *wq)
{
    rank_quantizers q;
    init_quantizers(&q, 1, kind);
    qs_linear_options opt;
    qs_linear_options_default(&opt, kind);
    ck_assert_int_eq(qs_linear_forward(NULL, &opt, &q.x[0], &q.w[0], x, wt, y, xq, wq), QS_OK);
    free_quantizers(&q, 1);
}

/* A sharded linear under test: the unsharded X and W with their single-rank forward (Y,
 * xq0, wq0), the shards (X's rows in sequence parallelism, W's rows in tensor parallelism,
 * the other operand replicated), a world of n ranks inside a region of group 1, and the
 * ranks' quantizers, options and outputs. */
typedef struct lin_spec {
    qs_recipe_kind kind;
    qs_dist_parallel par;
    int64_t M, K, NO;
    uint64_t xseed;
    int xgrowth;
    uint64_t wseed;
    int wgrowth;
} lin_spec;

typedef struct lin_fixture {
    int n;
    lin_spec sp;
    qs_tensor X, W, Y, parts[QS_DIST_MAX_RANKS];
    const qs_tensor *px[QS_DIST_MAX_RANKS], *pw[QS_DIST_MAX_RANKS];
    qs_quantized xq0, wq0;
    qs_dist_world w;
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    rank_quantizers q;
    qs_linear_options opt;
    qs_tensor y[QS_DIST_MAX_RANKS];
    qs_quantized xq[QS_DIST_MAX_RANKS], wq[QS_DIST_MAX_RANKS];
    qs_dist_linear_record rec[QS_DIST_MAX_RANKS];
} lin_fixture;

static lin_fixture *lin_setup(int n, const lin_spec *sp)
{
    lin_fixture *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    f->n = n;
    f->sp = *sp;
    make_bf16(&f->X, sp->M, sp->K, sp->xseed, sp->xgrowth);
    make_bf16(&f->W, sp->NO, sp->K, sp->wseed, sp->wgrowth);
    single_linear(sp->kind, &f->X, &f->W, &f->Y, &f->xq0, &f->wq0);
    int tp = sp->par == QS_DIST_TENSOR;
    split(tp ? &f->W : &f->X, n, f->parts, tp ? f->pw : f->px);
    for (int r = 0; r < n; r++) {
        if (tp)
            f->px[r] = &f->X;
        else
            f->pw[r] = &f->W;
    }
    make_world(&f->w, n);
    enter(&f->w, sp->kind, 1, f->tok);
    init_quantizers(&f->q, n, sp->kind);
    qs_linear_options_default(&f->opt, sp->kind);
    return f;
}

/* The ranks' forward, which must succeed; rec: keep the records for a replay. */
static void lin_forward(lin_fixture *f, int rec)
{
    ck_assert_int_eq(qs_dist_linear_forward(NULL, &f->w, f->sp.par, &f->opt, f->q.px, f->q.pw,
                                            f->px, f->pw, f->y, f->xq, f->wq, rec ? f->rec : NULL),
                     QS_OK);
}

static int64_t lin_reductions(lin_fixture *f)
{
    return qs_dist_world_group(&f->w, 1)->reductions;
}

static void lin_teardown(lin_fixture *f)
{
    leave(&f->w, f->tok);
    free_linear(f->n, f->y, f->xq, f->wq);
    free_quantizers(&f->q, f->n);
    free_parts(f->parts, f->n);
    qs_quantized_free(&f->xq0);
    qs_quantized_free(&f->wq0);
    qs_tensor_free(&f->X);
    qs_tensor_free(&f->W);
    qs_tensor_free(&f->Y);
    qs_dist_world_free(&f->w);
    free(f);
}

START_TEST(test_sequence_parallel_current_scale_is_shared_and_rows_match_unsharded)
{
    int n = NRANKS(_i);
    /* the largest rows are the last rank's */
    lin_fixture *f =
        lin_setup(n, &(lin_spec){QS_RECIPE_CURRENT, QS_DIST_SEQUENCE, 40, 64, 24, 11, 6, 12, 0});
    lin_forward(f, 0);
    /* [DIST-COUNT]: one reduction for x and one for w. */
    ck_assert_int_eq(lin_reductions(f), 2);
    for (int r = 0; r < n; r++) {
        int64_t r0 = row_offset(f->sp.M, n, r);
        const qs_quantized *xq = &f->xq[r], *x0 = &f->xq0;
        /* [DIST-CS-AMAX] [DIST-CS-EQUAL]: the unsharded scale, bitwise, on every rank. */
        for (int d = 0; d < QS_DIR_COUNT; d++) {
            ck_assert_uint_eq(bits(xq->global_enc[d]), bits(x0->global_enc[d]));
            ck_assert_uint_eq(bits(xq->global_dec[d]), bits(x0->global_dec[d]));
            ck_assert_uint_eq(bits(xq->amax[d]), bits(x0->amax[d]));
            assert_same_tensor(&xq->scale[d], &x0->scale[d], "x scale_inv");
            ck_assert_uint_eq(bits(f->wq[r].global_enc[d]), bits(f->wq0.global_enc[d]));
        }
        assert_rows_equal(&xq->data[QS_DIR_ROW], &x0->data[QS_DIR_ROW], r0, "x rowwise codes");
        assert_cols_equal(&xq->data[QS_DIR_COL], &x0->data[QS_DIR_COL], r0, "x columnwise");
        ck_assert_int_eq(xq->cfg.kind, QS_RECIPE_CURRENT);
        /* [DIST-LINEAR-SP]: the output rows are the unsharded run's rows, bitwise. */
        assert_rows_equal(&f->y[r], &f->Y, r0, "y rows");
    }
    if (n > 1) /* non-vacuous: rank 0 alone would have used another scale */
        ck_assert_uint_ne(bits(single_current_scale(&f->parts[0], QS_ROLE_INPUT)),
                          bits(f->xq0.global_enc[QS_DIR_ROW]));
    lin_teardown(f);
}
END_TEST

/* [DIST-NV-AMAX] [DIST-GIVEN-AMAX] [DIST-LINEAR-SP]: the sequence-parallel NVFP4 linear
 * reduces the x and w tensor amaxes (one reduction each), every rank encodes with the
 * unsharded S_enc and its y rows are the unsharded rows; the replay with the record gives
 * the same codes and output without a reduction [DIST-REPLAY]. */
START_TEST(test_sequence_parallel_nvfp4_linear_matches_unsharded)
{
    int n = NRANKS(_i);
    /* 16-row shards at N = 8 */
    lin_fixture *f =
        lin_setup(n, &(lin_spec){QS_RECIPE_NVFP4, QS_DIST_SEQUENCE, 128, 64, 32, 21, 6, 22, 0});
    lin_forward(f, 1);
    ck_assert_int_eq(lin_reductions(f), 2);
    for (int r = 0; r < n; r++) {
        int64_t r0 = row_offset(f->sp.M, n, r);
        for (int d = 0; d < QS_DIR_COUNT; d++) {
            ck_assert_uint_eq(bits(f->xq[r].amax[d]), bits(f->xq0.amax[d]));
            ck_assert_uint_eq(bits(f->xq[r].global_enc[d]), bits(f->xq0.global_enc[d]));
            ck_assert_uint_eq(bits(f->wq[r].global_dec[d]), bits(f->wq0.global_dec[d]));
        }
        assert_rows_equal(&f->y[r], &f->Y, r0, "nvfp4 y rows");
        qs_tensor y2;
        qs_quantized xq2, wq2;
        ck_assert_int_eq(qs_dist_linear_replay(NULL, &f->opt, f->q.px[r], f->q.pw[r], &f->rec[r],
                                               f->px[r], &f->W, &y2, &xq2, &wq2),
                         QS_OK);
        assert_same_tensor(&y2, &f->y[r], "nvfp4 replayed y");
        assert_same_tensor(&xq2.data[QS_DIR_COL], &f->xq[r].data[QS_DIR_COL], "replayed x col");
        qs_tensor_free(&y2);
        qs_quantized_free(&xq2);
        qs_quantized_free(&wq2);
    }
    ck_assert_int_eq(lin_reductions(f), 2); /* the replays reduced nothing */
    if (n > 1) { /* non-vacuous: rank 0's own amax is smaller than the tensor's */
        float own[QS_DIR_COUNT];
        qs_recipe_config cx = config(QS_RECIPE_NVFP4, QS_ROLE_INPUT);
        ck_assert_int_eq(qs_dist_tensor_amax(NULL, &cx, &f->parts[0], own), QS_OK);
        ck_assert_uint_ne(bits(own[QS_DIR_ROW]), bits(f->xq0.amax[QS_DIR_ROW]));
    }
    lin_teardown(f);
}
END_TEST

START_TEST(test_tensor_parallel_current_columns_match_unsharded)
{
    int n = NRANKS(_i);
    lin_fixture *f =
        lin_setup(n, &(lin_spec){QS_RECIPE_CURRENT, QS_DIST_TENSOR, 12, 64, 36, 21, 0, 22, 5});
    lin_forward(f, 1);
    for (int r = 0; r < n; r++) {
        int64_t n0 = row_offset(f->sp.NO, n, r);
        const qs_quantized *wq = &f->wq[r], *w0 = &f->wq0;
        /* [DIST-LINEAR-TP]: the weight's scale is the unsharded W's ... */
        ck_assert_uint_eq(bits(wq->global_enc[QS_DIR_ROW]), bits(w0->global_enc[QS_DIR_ROW]));
        ck_assert_uint_eq(bits(f->rec[r].w.scale), bits(w0->global_enc[QS_DIR_ROW]));
        ck_assert_uint_eq(bits(f->rec[r].w.amax[QS_DIR_ROW]), bits(w0->amax[QS_DIR_ROW]));
        ck_assert_int_eq(f->rec[r].w.group, 1);
        assert_rows_equal(&wq->data[QS_DIR_ROW], &w0->data[QS_DIR_ROW], n0, "w codes");
        /* ... and the output is its block of columns of the unsharded Y, bitwise. */
        assert_cols_equal(&f->y[r], &f->Y, n0, "y columns");
    }
    if (n > 1)
        ck_assert_uint_ne(bits(single_current_scale(&f->parts[0], QS_ROLE_WEIGHT)),
                          bits(f->wq0.global_enc[QS_DIR_ROW]));
    free_linear(n, f->y, f->xq, f->wq); /* zeroed: the teardown's free is a no-op */

    /* The replicated x must be the same on every rank. */
    if (n > 1) {
        qs_tensor X2;
        ck_assert_int_eq(qs_tensor_clone(NULL, &X2, &f->X), QS_OK);
        set_bf16(&X2, 0, 0, 1000.0f);
        f->px[n - 1] = &X2;
        qs_ctx *ctx = qs_ctx_new();
        int64_t before = lin_reductions(f);
        ck_assert_int_eq(qs_dist_linear_forward(ctx, &f->w, QS_DIST_TENSOR, &f->opt, f->q.px,
                                                f->q.pw, f->px, f->pw, f->y, f->xq, f->wq, NULL),
                         QS_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "DIST-LINEAR-TP"));
        ck_assert_int_eq(lin_reductions(f), before);
        qs_ctx_free(ctx);
        qs_tensor_free(&X2);
    }
    lin_teardown(f);
}
END_TEST

/* ---------------------------------------------------------------- delayed scaling */

static void assert_same_state(const qs_quantizer *a, const qs_quantizer *b, const char *what)
{
    ck_assert_msg(bits(a->ds.scale) == bits(b->ds.scale), "%s: scale 0x%08X vs 0x%08X", what,
                  bits(a->ds.scale), bits(b->ds.scale));
    ck_assert_uint_eq(bits(a->ds.scale_inv), bits(b->ds.scale_inv));
    ck_assert_int_eq(a->ds.len, b->ds.len);
    for (int64_t i = 0; i < a->ds.len; i++)
        ck_assert_msg(bits(a->ds.history[i]) == bits(b->ds.history[i]),
                      "%s: history[%lld] 0x%08X vs 0x%08X", what, (long long)i,
                      bits(a->ds.history[i]), bits(b->ds.history[i]));
}

/* The amax of a BF16 tensor by the statement of [REC-AMAX], in double. */
static float oracle_amax(const qs_tensor *t)
{
    double a = 0.0;
    for (size_t i = 0; i < t->numel; i++) {
        double v = fabs((double)qs_bf16_to_f32(((const uint16_t *)t->data)[i]));
        if (v > a)
            a = v;
    }
    return (float)a;
}

static void delayed_quantizer(qs_quantizer *q, qs_tensor_role role, qs_ds_roll roll)
{
    qs_recipe_config c = config(QS_RECIPE_DELAYED, role);
    c.history_len = 4;
    c.roll = roll;
    ck_assert_int_eq(qs_quantizer_init(NULL, q, &c), QS_OK);
}

START_TEST(test_delayed_updates_give_every_rank_the_state_of_one_quantizer_fed_the_max)
{
    int n = NRANKS(_i);
    for (int roll = 0; roll < QS_DS_ROLL_COUNT; roll++) {
        qs_dist_world w;
        make_world(&w, n);
        /* Two tensors under one key: an activation and a weight-like tensor. */
        qs_quantizer q[2 * QS_DIST_MAX_RANKS], *pq[2 * QS_DIST_MAX_RANKS];
        qs_quantizer single[2], fed[2], alone;
        for (int r = 0; r < n; r++)
            for (int t = 0; t < 2; t++) {
                delayed_quantizer(&q[r * 2 + t], t ? QS_ROLE_WEIGHT : QS_ROLE_INPUT,
                                  (qs_ds_roll)roll);
                pq[r * 2 + t] = &q[r * 2 + t];
            }
        for (int t = 0; t < 2; t++) {
            delayed_quantizer(&single[t], t ? QS_ROLE_WEIGHT : QS_ROLE_INPUT, (qs_ds_roll)roll);
            delayed_quantizer(&fed[t], t ? QS_ROLE_WEIGHT : QS_ROLE_INPUT, (qs_ds_roll)roll);
        }
        delayed_quantizer(&alone, QS_ROLE_INPUT, (qs_ds_roll)roll); /* rank 0 without a group */
        const int steps = 6;
        int diverged = 0;
        for (int step = 0; step < steps; step++) {
            for (int t = 0; t < 2; t++) {
                qs_tensor X, xs[QS_DIST_MAX_RANKS];
                const qs_tensor *px[QS_DIST_MAX_RANKS];
                make_bf16(&X, 24, 32, (uint64_t)(100 + step * 2 + t), 3 + step % 3);
                if (step == 3) /* all zero: the fused roll skips, the unfused one rolls */
                    memset(X.data, 0, X.nbytes);
                split(&X, n, xs, px);
                qs_quantized z0;
                ck_assert_int_eq(qs_quantize(NULL, &single[t], &X, &z0), QS_OK);
                float mx = 0.0f;
                for (int r = 0; r < n; r++) {
                    qs_quantized z;
                    ck_assert_int_eq(qs_quantize(NULL, &q[r * 2 + t], px[r], &z), QS_OK);
                    /* [DIST-DS-EQUAL]: between updates every rank uses the common scale. */
                    assert_rows_equal(&z.data[QS_DIR_ROW], &z0.data[QS_DIR_ROW],
                                      row_offset(24, n, r), "delayed codes");
                    qs_quantized_free(&z);
                    float a = oracle_amax(&xs[r]);
                    mx = a > mx ? a : mx;
                    if (r == 0 && t == 0) {
                        ck_assert_int_eq(qs_quantize(NULL, &alone, px[0], &z), QS_OK);
                        qs_quantized_free(&z);
                    }
                }
                ck_assert_int_eq(qs_delayed_record(NULL, &fed[t], mx), QS_OK);
                qs_quantized_free(&z0);
                free_parts(xs, n);
                qs_tensor_free(&X);
            }
            /* [DIST-DS-KEY] [DIST-DS-UPDATE]: one reduction of the key's two slots. */
            ck_assert_int_eq(qs_dist_delayed_update(NULL, &w, 1, 2, pq), QS_OK);
            ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, step + 1);
            for (int t = 0; t < 2; t++) {
                ck_assert_int_eq(qs_delayed_update(NULL, &single[t]), QS_OK);
                ck_assert_int_eq(qs_delayed_update(NULL, &fed[t]), QS_OK);
                assert_same_state(&fed[t], &single[t], "fed vs unsharded");
                for (int r = 0; r < n; r++)
                    assert_same_state(&q[r * 2 + t], &single[t], "rank vs single");
            }
            ck_assert_int_eq(qs_delayed_update(NULL, &alone), QS_OK);
            diverged |= bits(alone.ds.scale) != bits(single[0].ds.scale);
        }
        if (n > 1) /* non-vacuous: rank 0 updating alone drifts away */
            ck_assert(diverged);
        for (int r = 0; r < 2 * n; r++)
            qs_quantizer_free(&q[r]);
        for (int t = 0; t < 2; t++) {
            qs_quantizer_free(&single[t]);
            qs_quantizer_free(&fed[t]);
        }
        qs_quantizer_free(&alone);
        qs_dist_world_free(&w);
    }
}
END_TEST

START_TEST(test_delayed_update_rejects_keys_that_differ_between_ranks)
{
    int n = NRANKS(_i) < 2 ? 2 : NRANKS(_i);
    qs_dist_world w;
    make_world(&w, n);
    qs_quantizer q[QS_DIST_MAX_RANKS], *pq[QS_DIST_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        delayed_quantizer(&q[r], QS_ROLE_INPUT, QS_DS_ROLL_FUSED);
        q[r].ds.history[0] = 2.0f + (float)r;
        pq[r] = &q[r];
    }
    q[n - 1].cfg.margin = 1;
    qs_ctx *ctx = qs_ctx_new();
    /* [DIST-DS-KEY]: tensor t must be the same logical tensor on every rank. */
    ck_assert_int_eq(qs_dist_delayed_update(ctx, &w, 1, 1, pq), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_dist_delayed_update(ctx, &w, 9, 1, pq), QS_ERR_INVALID_ARG);
    for (int r = 0; r < n; r++) {
        ck_assert_uint_eq(bits(q[r].ds.history[0]), bits(2.0f + (float)r));
        ck_assert_uint_eq(bits(q[r].ds.scale), bits(1.0f));
    }
    ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 0);
    /* A key of group 0 updates each rank alone. */
    q[n - 1].cfg.margin = 0;
    ck_assert_int_eq(qs_dist_delayed_update(ctx, &w, 0, 1, pq), QS_OK);
    for (int r = 0; r < n; r++)
        ck_assert_uint_eq(bits(q[r].ds.scale), bits(448.0f / (2.0f + (float)r)));
    for (int r = 0; r < n; r++)
        qs_quantizer_free(&q[r]);
    qs_ctx_free(ctx);
    qs_dist_world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- NaN and Inf */

START_TEST(test_a_nan_slot_on_one_rank_reaches_every_rank)
{
    int n = NRANKS(_i);
    for (int roll = 0; roll < QS_DS_ROLL_COUNT; roll++) {
        qs_dist_world w;
        make_world(&w, n);
        qs_quantizer q[QS_DIST_MAX_RANKS], *pq[QS_DIST_MAX_RANKS], single;
        for (int r = 0; r < n; r++) {
            delayed_quantizer(&q[r], QS_ROLE_INPUT, (qs_ds_roll)roll);
            pq[r] = &q[r];
        }
        delayed_quantizer(&single, QS_ROLE_INPUT, (qs_ds_roll)roll);
        for (int step = 0; step < 3; step++) {
            qs_tensor X, xs[QS_DIST_MAX_RANKS];
            const qs_tensor *px[QS_DIST_MAX_RANKS];
            make_bf16(&X, 16, 16, (uint64_t)(300 + step), 4);
            if (step == 1) /* a NaN in the last rank's rows: its calibration amax is NaN */
                ((uint16_t *)X.data)[15 * 16 + 3] = 0x7FC0;
            split(&X, n, xs, px);
            for (int r = 0; r < n; r++)
                ck_assert_int_eq(qs_delayed_calibrate(NULL, &q[r], px[r]), QS_OK);
            ck_assert_int_eq(qs_delayed_calibrate(NULL, &single, &X), QS_OK);
            ck_assert_int_eq(qs_dist_delayed_update(NULL, &w, 1, 1, pq), QS_OK);
            ck_assert_int_eq(qs_delayed_update(NULL, &single), QS_OK);
            /* [DIST-REDUCE-NAN] [DIST-DS-EQUAL]: as one quantizer that saw every shard. */
            for (int r = 0; r < n; r++)
                assert_same_state(&q[r], &single, "calibrated rank vs single");
            free_parts(xs, n);
            qs_tensor_free(&X);
        }
        int nan_in_rank0 = 0;
        for (int64_t i = 0; i < q[0].ds.len; i++)
            nan_in_rank0 |= isnan(q[0].ds.history[i]);
        ck_assert(nan_in_rank0); /* rank 0 had no NaN of its own (for n > 1) */
        ck_assert(isfinite(q[0].ds.scale));
        for (int r = 0; r < n; r++)
            qs_quantizer_free(&q[r]);
        qs_quantizer_free(&single);
        qs_dist_world_free(&w);
    }
}
END_TEST

START_TEST(test_current_scaling_ignores_a_nan_and_keeps_an_inf_on_one_rank)
{
    int n = NRANKS(_i);
    const int64_t M = 16, K = 32;
    qs_dist_world w;
    make_world(&w, n);
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_CURRENT, 1, tok);
    qs_recipe_config cfg = config(QS_RECIPE_CURRENT, QS_ROLE_INPUT);
    for (int special = 0; special < 2; special++) {
        qs_tensor X, xs[QS_DIST_MAX_RANKS];
        const qs_tensor *px[QS_DIST_MAX_RANKS];
        make_bf16(&X, M, K, 400, 3);
        if (special == 0)
            ((uint16_t *)X.data)[(M - 1) * K + 5] = 0x7FC0; /* NaN on the last rank */
        else
            ((uint16_t *)X.data)[0 * K + 5] = 0x7F80; /* +Inf on rank 0 */
        float want = single_current_scale(&X, QS_ROLE_INPUT);
        split(&X, n, xs, px);
        qs_quantized out[QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
        for (int r = 0; r < n; r++) {
            /* [DIST-CS-AMAX] [DIST-REDUCE-NAN]: NaN ignored everywhere, an Inf everywhere. */
            ck_assert_uint_eq(bits(out[r].global_enc[QS_DIR_ROW]), bits(want));
            if (special == 1) {
                ck_assert(isinf(out[r].amax[QS_DIR_ROW]));
                ck_assert_uint_eq(bits(out[r].global_enc[QS_DIR_ROW]), bits(1.0f));
            } else {
                ck_assert(!isnan(out[r].amax[QS_DIR_ROW]));
            }
        }
        if (special == 0) { /* the NaN element itself encodes to the E4M3 NaN */
            const qs_quantized *last = &out[n - 1];
            int64_t m = last->rows - 1;
            ck_assert_uint_eq(((const uint8_t *)last->data[QS_DIR_ROW].data)[m * K + 5], 0x7F);
        }
        for (int r = 0; r < n; r++)
            qs_quantized_free(&out[r]);
        free_parts(xs, n);
        qs_tensor_free(&X);
    }
    leave(&w, tok);
    qs_dist_world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- replay */

START_TEST(test_replay_uses_the_recorded_scales_and_reduces_nothing)
{
    int n = NRANKS(_i);
    for (int kind = QS_RECIPE_DELAYED; kind <= QS_RECIPE_CURRENT; kind++) {
        lin_fixture *f = lin_setup(
            n, &(lin_spec){(qs_recipe_kind)kind, QS_DIST_SEQUENCE, 32, 64, 16, 500, 5, 501, 0});
        rank_quantizers *q = &f->q;
        if (kind == QS_RECIPE_DELAYED) /* a state that is not the initial one */
            for (int r = 0; r < n; r++) {
                q->x[r].ds.scale = 32.0f;
                q->x[r].ds.scale_inv = 1.0f / 32.0f;
            }
        lin_forward(f, 1);
        if (kind == QS_RECIPE_DELAYED) /* the step's update moves the live scales */
            for (int t = 0; t < 2; t++) {
                qs_quantizer *key[QS_DIST_MAX_RANKS];
                for (int r = 0; r < n; r++)
                    key[r] = t ? &q->w[r] : &q->x[r];
                ck_assert_int_eq(qs_dist_delayed_update(NULL, &f->w, 1, 1, key), QS_OK);
                ck_assert_uint_ne(bits(q->x[0].ds.scale), bits(32.0f));
            }
        int64_t count = lin_reductions(f);
        /* The other ranks' data changes before the backward. */
        for (int r = 1; r < n; r++)
            for (size_t i = 0; i < f->parts[r].numel; i++) {
                uint16_t *h = (uint16_t *)f->parts[r].data + i;
                *h = qs_f32_to_bf16(qs_bf16_to_f32(*h) * 1024.0f);
            }
        for (int r = 0; r < n; r++) {
            float hist[4];
            memcpy(hist, q->x[r].ds.history ? q->x[r].ds.history : (float[4]){0}, sizeof hist);
            qs_tensor yr;
            qs_quantized xr, wr;
            qs_tensor x0;
            row_block(&f->X, row_offset(f->sp.M, n, r), row_offset(f->sp.M, n, r + 1), &x0);
            /* [DIST-REPLAY]: rank r replays alone from its own recorded input. */
            ck_assert_int_eq(qs_dist_linear_replay(f->w.rank[r], &f->opt, q->px[r], q->pw[r],
                                                   &f->rec[r], &x0, &f->W, &yr, &xr, &wr),
                             QS_OK);
            assert_same_tensor(&yr, &f->y[r], "replayed y");
            assert_same_quantized(&xr, &f->xq[r], "replayed x");
            assert_same_quantized(&wr, &f->wq[r], "replayed w");
            if (kind == QS_RECIPE_DELAYED) /* the replay's amax reaches no live history */
                ck_assert(memcmp(hist, q->x[r].ds.history, sizeof hist) == 0);
            qs_tensor_free(&yr);
            qs_quantized_free(&xr);
            qs_quantized_free(&wr);
            qs_tensor_free(&x0);
        }
        ck_assert_int_eq(lin_reductions(f), count); /* [DIST-COUNT]: a replay reduces nothing */
        if (n > 1 && kind == QS_RECIPE_CURRENT) {
            /* Non-vacuous: a fresh forward now would give rank 0 another scale. */
            qs_tensor y2[QS_DIST_MAX_RANKS];
            qs_quantized xq2[QS_DIST_MAX_RANKS], wq2[QS_DIST_MAX_RANKS];
            ck_assert_int_eq(qs_dist_linear_forward(NULL, &f->w, QS_DIST_SEQUENCE, &f->opt, q->px,
                                                    q->pw, f->px, f->pw, y2, xq2, wq2, NULL),
                             QS_OK);
            ck_assert_uint_ne(bits(xq2[0].global_enc[QS_DIR_ROW]),
                              bits(f->xq[0].global_enc[QS_DIR_ROW]));
            free_linear(n, y2, xq2, wq2);
            /* The plain quantization's replay: recorded amax and scale, no reduction. */
            qs_recipe_config cfg = config(QS_RECIPE_CURRENT, QS_ROLE_INPUT);
            qs_quantized fwd[QS_DIST_MAX_RANKS], rep;
            qs_dist_record qrec[QS_DIST_MAX_RANKS];
            ck_assert_int_eq(qs_dist_quantize(NULL, &f->w, &cfg, f->px, fwd, qrec), QS_OK);
            count = lin_reductions(f);
            for (int r = 1; r < n; r++)
                set_bf16(&f->parts[r], 0, 0, 3.0e30f);
            ck_assert_int_eq(qs_dist_quantize_replay(f->w.rank[0], &cfg, &qrec[0], f->px[0], &rep),
                             QS_OK);
            assert_same_quantized(&rep, &fwd[0], "replayed quantization");
            ck_assert_int_eq(lin_reductions(f), count);
            qs_quantized_free(&rep);
            for (int r = 0; r < n; r++)
                qs_quantized_free(&fwd[r]);
        }
        lin_teardown(f);
    }
}
END_TEST

/* ---------------------------------------------------------------- nested regions */

/* The scale single-rank current scaling gives the rows of ranks [r0, r1) of X. */
static float block_scale(const qs_tensor *X, int n, int r0, int r1)
{
    qs_tensor b;
    row_block(X, row_offset(X->shape[0], n, r0), row_offset(X->shape[0], n, r1), &b);
    float s = single_current_scale(&b, QS_ROLE_INPUT);
    qs_tensor_free(&b);
    return s;
}

START_TEST(test_nested_region_reduces_over_its_own_group)
{
    int n = NRANKS(_i);
    const int64_t M = 32, K = 32;
    qs_tensor X, xs[QS_DIST_MAX_RANKS];
    const qs_tensor *px[QS_DIST_MAX_RANKS];
    make_bf16(&X, M, K, 600, 7);
    split(&X, n, xs, px);
    qs_dist_world w;
    make_world(&w, n);
    qs_dist_group *world = qs_dist_world_group(&w, 1), *pairs = qs_dist_world_group(&w, 2), *g;
    qs_recipe_config cfg = config(QS_RECIPE_CURRENT, QS_ROLE_INPUT);
    qs_quantized out[QS_DIST_MAX_RANKS];
    qs_scope_token outer[QS_DIST_MAX_RANKS], inner[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_CURRENT, 1, outer);
    ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
    for (int r = 0; r < n; r++) {
        ck_assert_uint_eq(bits(out[r].global_enc[0]), bits(block_scale(&X, n, 0, n)));
        qs_quantized_free(&out[r]);
    }
    /* [DIST-NESTED]: inside the inner region, each pair reduces alone. */
    enter(&w, QS_RECIPE_CURRENT, 2, inner);
    ck_assert_int_eq(qs_dist_current_group(NULL, &w, &g), QS_OK);
    ck_assert_ptr_eq(g, pairs);
    ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
    for (int r = 0; r < n; r++) {
        int p0 = r & ~1, p1 = p0 + 2 < n ? p0 + 2 : n; /* the pair, or a lone last rank */
        ck_assert_uint_eq(bits(out[r].global_enc[0]), bits(block_scale(&X, n, p0, p1)));
    }
    if (n >= 4) /* non-vacuous: the pairs' scales differ */
        ck_assert_uint_ne(bits(out[0].global_enc[0]), bits(out[n - 1].global_enc[0]));
    for (int r = 0; r < n; r++)
        qs_quantized_free(&out[r]);
    ck_assert_int_eq(pairs->reductions, 1);
    ck_assert_int_eq(world->reductions, 1);
    /* A region with group 0 inside: every rank alone [DIST-GROUP]. */
    qs_scope_token local[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_CURRENT, 0, local);
    ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
    for (int r = 0; r < n; r++) {
        ck_assert_uint_eq(bits(out[r].global_enc[0]), bits(block_scale(&X, n, r, r + 1)));
        qs_quantized_free(&out[r]);
    }
    leave(&w, local);
    leave(&w, inner);
    /* After the inner exit the world group is in effect again. */
    ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
    for (int r = 0; r < n; r++) {
        ck_assert_uint_eq(bits(out[r].global_enc[0]), bits(block_scale(&X, n, 0, n)));
        qs_quantized_free(&out[r]);
    }
    ck_assert_int_eq(world->reductions, 2);
    ck_assert_int_eq(pairs->reductions, 1);

    /* Delayed quantizers used in an inner region of the pairs belong to the pairs' key; the
     * update runs later, in the outer region, and still reduces over the pairs. */
    qs_quantizer q[QS_DIST_MAX_RANKS], *pq[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_DELAYED, 2, inner);
    ck_assert_int_eq(qs_dist_current_group(NULL, &w, &g), QS_OK);
    int key_group = g->id;
    for (int r = 0; r < n; r++) {
        delayed_quantizer(&q[r], QS_ROLE_INPUT, QS_DS_ROLL_FUSED);
        pq[r] = &q[r];
        qs_quantized z;
        ck_assert_int_eq(qs_quantize(NULL, &q[r], px[r], &z), QS_OK);
        qs_quantized_free(&z);
    }
    leave(&w, inner);
    ck_assert_int_eq(qs_dist_current_group(NULL, &w, &g), QS_OK);
    ck_assert_ptr_eq(g, world);
    ck_assert_int_eq(qs_dist_delayed_update(NULL, &w, key_group, 1, pq), QS_OK);
    for (int r = 0; r < n; r++) {
        int p0 = r & ~1, p1 = p0 + 2 < n ? p0 + 2 : n;
        ck_assert_uint_eq(bits(q[r].ds.scale), bits(block_scale(&X, n, p0, p1)));
        assert_same_state(&q[r], &q[p0], "pair partner");
    }
    if (n >= 4)
        ck_assert_uint_ne(bits(q[0].ds.scale), bits(q[n - 1].ds.scale));
    ck_assert_int_eq(pairs->reductions, 2);
    for (int r = 0; r < n; r++)
        qs_quantizer_free(&q[r]);
    leave(&w, outer);
    free_parts(xs, n);
    qs_tensor_free(&X);
    qs_dist_world_free(&w);
}
END_TEST

START_TEST(test_ranks_that_disagree_on_the_group_are_rejected)
{
    int n = NRANKS(_i) < 2 ? 2 : NRANKS(_i);
    qs_tensor X, xs[QS_DIST_MAX_RANKS];
    const qs_tensor *px[QS_DIST_MAX_RANKS];
    make_bf16(&X, 16, 16, 700, 2);
    split(&X, n, xs, px);
    qs_dist_world w;
    make_world(&w, n);
    qs_ctx *ctx = qs_ctx_new();
    qs_recipe_config cfg = config(QS_RECIPE_CURRENT, QS_ROLE_INPUT);
    qs_quantized out[QS_DIST_MAX_RANKS];
    memset(out, 0, sizeof out);
    /* [DIST-SPMD]: the last rank alone enters a region with another group. */
    qs_scope_recipe rcp;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &rcp, QS_RECIPE_CURRENT), QS_OK);
    qs_autocast_params p = {1, 0, &rcp, 2};
    qs_scope_token t;
    ck_assert_int_eq(qs_autocast_enter(w.rank[n - 1], &p, &t), QS_OK);
    ck_assert_int_eq(qs_dist_quantize(ctx, &w, &cfg, px, out, NULL), QS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "DIST-SPMD"));
    for (int r = 0; r < n; r++)
        ck_assert_ptr_null(out[r].data[0].data);
    ck_assert_int_eq(qs_autocast_exit(w.rank[n - 1], t), QS_OK);
    /* [DIST-GROUP]: a group the world does not define. */
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_CURRENT, 5, tok);
    ck_assert_int_eq(qs_dist_quantize(ctx, &w, &cfg, px, out, NULL), QS_ERR_INVALID_ARG);
    leave(&w, tok);
    /* Delayed scaling is not a stateless group quantization [DIST-DS-KEY]. */
    qs_recipe_config ds = config(QS_RECIPE_DELAYED, QS_ROLE_INPUT);
    ck_assert_int_eq(qs_dist_quantize(ctx, &w, &ds, px, out, NULL), QS_ERR_INVALID_ARG);
    /* [DIST-RANKS] [DIST-GROUP]: world and group arguments. */
    qs_dist_world bad;
    ck_assert_int_eq(qs_dist_world_init(ctx, &bad, 0), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_dist_world_init(ctx, &bad, QS_DIST_MAX_RANKS + 1), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_dist_world_add_group(ctx, &w, 0, NULL), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_dist_world_add_group(ctx, &w, 1, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_null(qs_dist_world_group(&w, 0));
    /* A failed exit on every rank changes no rank's state. */
    enter(&w, QS_RECIPE_CURRENT, 1, tok);
    qs_scope_token wrong[QS_DIST_MAX_RANKS];
    memcpy(wrong, tok, sizeof wrong);
    wrong[n - 1].id += 100;
    ck_assert_int_eq(qs_dist_autocast_exit(ctx, &w, wrong), QS_ERR_STATE);
    for (int r = 0; r < n; r++) {
        qs_scope_state st;
        ck_assert_int_eq(qs_scope_get(w.rank[r], &st), QS_OK);
        ck_assert_int_eq(st.depth, 1);
        ck_assert_int_eq(st.group, 1);
    }
    leave(&w, tok);
    qs_ctx_free(ctx);
    free_parts(xs, n);
    qs_tensor_free(&X);
    qs_dist_world_free(&w);
}
END_TEST

/* ---------------------------------------------------------------- block scales */

START_TEST(test_block_scales_are_local_and_match_the_unsharded_where_aligned)
{
    int n = NRANKS(_i);
    static const struct {
        qs_recipe_kind kind;
        qs_tensor_role role;
        int64_t rows_per_rank, cols;
    } cases[] = {
        {QS_RECIPE_MXFP8, QS_ROLE_INPUT, 32, 64},
        {QS_RECIPE_BLOCK, QS_ROLE_INPUT, 128, 32},
        {QS_RECIPE_BLOCK, QS_ROLE_WEIGHT, 128, 256},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t M = cases[c].rows_per_rank * n, K = cases[c].cols;
        qs_tensor X, xs[QS_DIST_MAX_RANKS];
        const qs_tensor *px[QS_DIST_MAX_RANKS];
        make_bf16(&X, M, K, 800 + c, 9);
        split(&X, n, xs, px);
        qs_recipe_config cfg = config(cases[c].kind, cases[c].role);
        qs_quantizer q0;
        qs_quantized whole;
        ck_assert_int_eq(qs_quantizer_init(NULL, &q0, &cfg), QS_OK);
        ck_assert_int_eq(qs_quantize(NULL, &q0, &X, &whole), QS_OK);
        qs_dist_world w;
        make_world(&w, n);
        qs_scope_token tok[QS_DIST_MAX_RANKS];
        enter(&w, cases[c].kind, 1, tok);
        qs_quantized out[QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
        /* [DIST-BLOCK-LOCAL] [DIST-COUNT]: no reduction at all ... */
        ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 0);
        for (int r = 0; r < n; r++) {
            /* ... each rank's result is the single-rank result on its own shard ... */
            qs_quantized alone;
            ck_assert_int_eq(qs_quantize(NULL, &q0, px[r], &alone), QS_OK);
            assert_same_quantized(&out[r], &alone, "rank vs alone");
            qs_quantized_free(&alone);
            /* ... and, the shards being aligned to the blocks, part of the unsharded one. */
            int64_t r0 = cases[c].rows_per_rank * r;
            assert_rows_equal(&out[r].data[QS_DIR_ROW], &whole.data[QS_DIR_ROW], r0, "row codes");
            int64_t srow = cases[c].role == QS_ROLE_WEIGHT ? r0 / 128 : r0;
            assert_rows_equal(&out[r].scale[QS_DIR_ROW], &whole.scale[QS_DIR_ROW], srow,
                              "row scales");
            if (cases[c].kind == QS_RECIPE_MXFP8) { /* columnwise [M, K], scales [M/32, K] */
                assert_rows_equal(&out[r].data[QS_DIR_COL], &whole.data[QS_DIR_COL], r0,
                                  "col codes");
                assert_rows_equal(&out[r].scale[QS_DIR_COL], &whole.scale[QS_DIR_COL], r0 / 32,
                                  "col scales");
            } else { /* transposed: a column block, scales [K, M/128] or tiles [K/128, M/128] */
                assert_cols_equal(&out[r].data[QS_DIR_COL], &whole.data[QS_DIR_COL], r0,
                                  "col codes");
                assert_cols_equal(&out[r].scale[QS_DIR_COL], &whole.scale[QS_DIR_COL], r0 / 128,
                                  "col scales");
            }
        }
        if (n > 1) /* non-vacuous: the ranks' block scales differ, nothing was shared */
            ck_assert(memcmp(out[0].scale[QS_DIR_ROW].data, out[n - 1].scale[QS_DIR_ROW].data,
                             elem_bytes(&out[0].scale[QS_DIR_ROW])) != 0);
        for (int r = 0; r < n; r++)
            qs_quantized_free(&out[r]);
        leave(&w, tok);
        qs_dist_world_free(&w);
        qs_quantized_free(&whole);
        qs_quantizer_free(&q0);
        free_parts(xs, n);
        qs_tensor_free(&X);
    }
}
END_TEST

START_TEST(test_axiswise_scales_are_local_and_rows_match_the_unsharded)
{
    /* [DIST-BLOCK-LOCAL] [DIST-COUNT] [REC-AX-ROW] [REC-AX-GWHP]: under a group the rowwise
     * recipes reduce nothing; each rank's copies are its shard quantized alone, and its
     * rowwise copy (one scale per row) is those rows of the unsharded quantization. */
    int n = NRANKS(_i);
    static const struct {
        qs_recipe_kind kind;
        qs_tensor_role role;
    } cases[] = {{QS_RECIPE_ROWWISE, QS_ROLE_INPUT}, {QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_WEIGHT}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t M = 24 * n, K = 40;
        qs_tensor X, xs[QS_DIST_MAX_RANKS];
        const qs_tensor *px[QS_DIST_MAX_RANKS];
        make_bf16(&X, M, K, 900 + c, 9);
        split(&X, n, xs, px);
        qs_recipe_config cfg = config(cases[c].kind, cases[c].role);
        qs_quantizer q0;
        qs_quantized whole;
        ck_assert_int_eq(qs_quantizer_init(NULL, &q0, &cfg), QS_OK);
        ck_assert_int_eq(qs_quantize(NULL, &q0, &X, &whole), QS_OK);
        qs_dist_world w;
        make_world(&w, n);
        qs_scope_token tok[QS_DIST_MAX_RANKS];
        enter(&w, cases[c].kind, 1, tok);
        qs_quantized out[QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
        ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 0);
        for (int r = 0; r < n; r++) {
            qs_quantized alone;
            ck_assert_int_eq(qs_quantize(NULL, &q0, px[r], &alone), QS_OK);
            assert_same_quantized(&out[r], &alone, "rank vs alone");
            qs_quantized_free(&alone);
            assert_rows_equal(&out[r].data[QS_DIR_ROW], &whole.data[QS_DIR_ROW], 24 * r,
                              "row codes");
            assert_rows_equal(&out[r].scale[QS_DIR_ROW], &whole.scale[QS_DIR_ROW], 24 * r,
                              "row scales");
            qs_quantized_free(&out[r]);
        }
        leave(&w, tok);
        qs_dist_world_free(&w);
        qs_quantized_free(&whole);
        qs_quantizer_free(&q0);
        free_parts(xs, n);
        qs_tensor_free(&X);
    }
}
END_TEST

START_TEST(test_nvfp4_tensor_amaxes_are_reduced_as_one_vector)
{
    int n = NRANKS(_i);
    for (int role = 0; role < 2; role++) {
        int64_t M = 16 * n, K = 32;
        qs_tensor X, xs[QS_DIST_MAX_RANKS];
        const qs_tensor *px[QS_DIST_MAX_RANKS];
        make_bf16(&X, M, K, 900 + (uint64_t)role, 6);
        split(&X, n, xs, px);
        qs_recipe_config cfg =
            config(QS_RECIPE_NVFP4, role ? QS_ROLE_WEIGHT : QS_ROLE_INPUT); /* rht, or 2-D */
        qs_quantizer q0;
        qs_quantized whole;
        ck_assert_int_eq(qs_quantizer_init(NULL, &q0, &cfg), QS_OK);
        ck_assert_int_eq(qs_quantize(NULL, &q0, &X, &whole), QS_OK);
        qs_dist_world w;
        make_world(&w, n);
        qs_scope_token tok[QS_DIST_MAX_RANKS];
        enter(&w, QS_RECIPE_NVFP4, 1, tok);
        float amax[2 * QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_nvfp4_amax(NULL, &w, &cfg, px, amax), QS_OK);
        /* [DIST-NV-AMAX] [DIST-COUNT]: both copies' amaxes, the columnwise one after the
         * transform, in one reduction, equal to the unsharded tensor's. */
        ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 1);
        for (int r = 0; r < n; r++) {
            ck_assert_uint_eq(bits(amax[2 * r]), bits(whole.amax[QS_DIR_ROW]));
            ck_assert_uint_eq(bits(amax[2 * r + 1]), bits(whole.amax[QS_DIR_COL]));
        }
        if (role == 0)
            ck_assert_uint_ne(bits(whole.amax[QS_DIR_ROW]), bits(whole.amax[QS_DIR_COL]));
        if (n > 1) { /* non-vacuous: rank 0 alone has another amax */
            qs_quantized alone;
            ck_assert_int_eq(qs_quantize(NULL, &q0, px[0], &alone), QS_OK);
            ck_assert_uint_ne(bits(alone.amax[QS_DIR_ROW]), bits(whole.amax[QS_DIR_ROW]));
            qs_quantized_free(&alone);
        }
        /* A group of one-rank subgroups: the reduction changes nothing, so it encodes. */
        int own[QS_DIST_MAX_RANKS];
        for (int r = 0; r < n; r++)
            own[r] = r;
        ck_assert_int_eq(qs_dist_world_add_group(NULL, &w, 3, own), QS_OK);
        qs_scope_token t3[QS_DIST_MAX_RANKS];
        enter(&w, QS_RECIPE_NVFP4, 3, t3);
        qs_quantized out[QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
        ck_assert_int_eq(qs_dist_world_group(&w, 3)->reductions, 1);
        for (int r = 0; r < n; r++) {
            qs_quantized alone;
            ck_assert_int_eq(qs_quantize(NULL, &q0, px[r], &alone), QS_OK);
            assert_same_quantized(&out[r], &alone, "nvfp4 own subgroup");
            qs_quantized_free(&alone);
            qs_quantized_free(&out[r]);
        }
        leave(&w, t3);
        leave(&w, tok);
        qs_dist_world_free(&w);
        qs_quantized_free(&whole);
        qs_quantizer_free(&q0);
        free_parts(xs, n);
        qs_tensor_free(&X);
    }
}
END_TEST

/* Code i of an NVFP4 code tensor: E2M1 two per byte (low nibble first), E4M3 one a byte. */
static unsigned nv_code(const qs_tensor *t, int64_t i)
{
    const unsigned char *b = t->data;
    if (t->dtype == QS_E2M1)
        return i % 2 == 0 ? b[i / 2] & 0x0Fu : (unsigned)b[i / 2] >> 4;
    ck_assert_int_eq((int)elem_bytes(t), 1);
    return b[i];
}

/* How many codes of small differ from big's block at row r0, column c0. */
static int64_t nv_diff(const qs_tensor *small, const qs_tensor *big, int64_t r0, int64_t c0)
{
    ck_assert_int_eq(small->dtype, big->dtype);
    ck_assert(small->numel > 0 && r0 + small->shape[0] <= big->shape[0] &&
              c0 + small->shape[1] <= big->shape[1]);
    int64_t sc = small->shape[1], bc = big->shape[1], diff = 0;
    for (int64_t i = 0; i < small->shape[0]; i++)
        for (int64_t j = 0; j < sc; j++)
            diff += nv_code(small, i * sc + j) != nv_code(big, (r0 + i) * bc + c0 + j);
    return diff;
}

static void assert_nv_block(const qs_tensor *small, const qs_tensor *big, int64_t r0, int64_t c0,
                            const char *what)
{
    int64_t d = nv_diff(small, big, r0, c0);
    ck_assert_msg(d == 0, "%s: %lld codes differ (block at %lld, %lld)", what, (long long)d,
                  (long long)r0, (long long)c0);
}

/* rows of a stacked on rows of b (same dtype and columns). */
static void stack_rows(const qs_tensor *a, const qs_tensor *b, qs_tensor *out)
{
    int64_t shape[2] = {a->shape[0] + b->shape[0], a->shape[1]};
    ck_assert_int_eq(qs_tensor_alloc(NULL, out, a->dtype, 2, shape), QS_OK);
    memcpy(out->data, a->data, a->nbytes);
    memcpy((unsigned char *)out->data + a->nbytes, b->data, b->nbytes);
}

/* Row shards of 16, 32, 16, 32, ... rows (multiples of 16, not all equal). */
static int64_t nv_split(const qs_tensor *t, int n, qs_tensor *parts, const qs_tensor **ptrs,
                        int64_t *off)
{
    int64_t rows[QS_DIST_MAX_RANKS], total = 0;
    for (int r = 0; r < n; r++) {
        off[r] = total;
        rows[r] = 16 * (1 + r % 2);
        total += rows[r];
    }
    if (t) {
        ck_assert_int_eq(qs_dist_split_rows(NULL, t, n, rows, parts), QS_OK);
        for (int r = 0; r < n; r++)
            ptrs[r] = &parts[r];
    }
    return total;
}

/* [DIST-NV-AMAX] [REC-NV-GLOBAL] [DIST-BLOCK-LOCAL]: under a group every rank encodes its
 * shard with the reduced amaxes: S_enc and S_dec of both copies are the unsharded tensor's
 * on every rank, and, the shard boundaries being multiples of 16, the codes and block
 * scales (RNE) are the corresponding part of the unsharded quantization. */
START_TEST(test_nvfp4_shards_encode_with_the_unsharded_tensor_scale)
{
    int n = NRANKS(_i);
    for (int role = 0; role < 2; role++) {
        int64_t off[QS_DIST_MAX_RANKS], K = 32;
        qs_tensor X, xs[QS_DIST_MAX_RANKS];
        const qs_tensor *px[QS_DIST_MAX_RANKS];
        int64_t M = nv_split(NULL, n, NULL, NULL, off);
        make_bf16(&X, M, K, 950 + (uint64_t)role, 6);
        nv_split(&X, n, xs, px, off);
        qs_recipe_config cfg =
            config(QS_RECIPE_NVFP4, role ? QS_ROLE_WEIGHT : QS_ROLE_INPUT); /* rht, or 2-D */
        ck_assert_int_eq(cfg.sr, 0);
        qs_quantizer q0;
        qs_quantized whole;
        ck_assert_int_eq(qs_quantizer_init(NULL, &q0, &cfg), QS_OK);
        ck_assert_int_eq(qs_quantize(NULL, &q0, &X, &whole), QS_OK);
        qs_dist_world w;
        make_world(&w, n);
        qs_scope_token tok[QS_DIST_MAX_RANKS];
        enter(&w, QS_RECIPE_NVFP4, 1, tok);
        qs_quantized out[QS_DIST_MAX_RANKS];
        qs_dist_record rec[QS_DIST_MAX_RANKS];
        ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, rec), QS_OK);
        ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 1); /* [DIST-COUNT] */
        for (int r = 0; r < n; r++) {
            for (int d = 0; d < QS_DIR_COUNT; d++) {
                ck_assert_uint_eq(bits(out[r].amax[d]), bits(whole.amax[d]));
                ck_assert_uint_eq(bits(out[r].global_enc[d]), bits(whole.global_enc[d]));
                ck_assert_uint_eq(bits(out[r].global_dec[d]), bits(whole.global_dec[d]));
                ck_assert_uint_eq(bits(out[r].global_enc[d]), bits(out[0].global_enc[d]));
                ck_assert_uint_eq(bits(out[r].global_dec[d]), bits(out[0].global_dec[d]));
                ck_assert_uint_eq(bits(rec[r].amax[d]), bits(whole.amax[d]));
            }
            int64_t r0 = off[r], srow = role ? r0 / 16 : r0;
            assert_nv_block(&out[r].data[QS_DIR_ROW], &whole.data[QS_DIR_ROW], r0, 0, "row codes");
            assert_nv_block(&out[r].scale[QS_DIR_ROW], &whole.scale[QS_DIR_ROW], srow, 0,
                            "row scales");
            /* columnwise: transposed [K, M]; scales [K, M/16] or tiles [K/16, M/16] */
            assert_nv_block(&out[r].data[QS_DIR_COL], &whole.data[QS_DIR_COL], 0, r0, "col codes");
            assert_nv_block(&out[r].scale[QS_DIR_COL], &whole.scale[QS_DIR_COL], 0, r0 / 16,
                            "col scales");
            /* [DIST-REPLAY]: the recorded amaxes give the same result without a reduction. */
            qs_quantized again;
            ck_assert_int_eq(qs_dist_quantize_replay(NULL, &cfg, &rec[r], px[r], &again), QS_OK);
            assert_same_quantized(&again, &out[r], "nvfp4 replay");
            qs_quantized_free(&again);
        }
        ck_assert_int_eq(qs_dist_world_group(&w, 1)->reductions, 1);
        if (n > 1) { /* non-vacuous: rank 0 alone has another tensor scale */
            qs_quantized alone;
            ck_assert_int_eq(qs_quantize(NULL, &q0, px[0], &alone), QS_OK);
            ck_assert_uint_ne(bits(alone.global_enc[QS_DIR_ROW]),
                              bits(out[0].global_enc[QS_DIR_ROW]));
            ck_assert_uint_ne(bits(alone.global_dec[QS_DIR_COL]),
                              bits(out[0].global_dec[QS_DIR_COL]));
            qs_quantized_free(&alone);
        }
        for (int r = 0; r < n; r++)
            qs_quantized_free(&out[r]);
        leave(&w, tok);
        qs_dist_world_free(&w);
        qs_quantized_free(&whole);
        qs_quantizer_free(&q0);
        free_parts(xs, n);
        qs_tensor_free(&X);
    }
}
END_TEST

/* [DIST-NV-SR] [REC-NV-SR]: with stochastic rounding the element index is shard-local:
 * rank r's rowwise codes and scales are the first rows of the single-rank quantization of
 * [X_r; X] (whose tensor amax is X's and whose first rows have X_r's local indices), and
 * for a rank other than 0 not the unsharded tensor's rows. */
START_TEST(test_nvfp4_stochastic_rounding_index_is_shard_local)
{
    int n = NRANKS(_i);
    int64_t off[QS_DIST_MAX_RANKS], K = 32;
    qs_tensor X, xs[QS_DIST_MAX_RANKS];
    const qs_tensor *px[QS_DIST_MAX_RANKS];
    int64_t M = nv_split(NULL, n, NULL, NULL, off);
    make_bf16(&X, M, K, 970, 6);
    nv_split(&X, n, xs, px, off);
    qs_recipe_config cfg = config(QS_RECIPE_NVFP4, QS_ROLE_GRAD_OUTPUT); /* rht and sr */
    ck_assert(cfg.sr == 1 && cfg.rht == 1 && cfg.tile_2d == 0);
    cfg.seed = 1234;
    cfg.offset = 5;
    qs_quantizer q0;
    qs_quantized whole;
    ck_assert_int_eq(qs_quantizer_init(NULL, &q0, &cfg), QS_OK);
    ck_assert_int_eq(qs_quantize(NULL, &q0, &X, &whole), QS_OK);
    qs_dist_world w;
    make_world(&w, n);
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    enter(&w, QS_RECIPE_NVFP4, 1, tok);
    qs_quantized out[QS_DIST_MAX_RANKS];
    ck_assert_int_eq(qs_dist_quantize(NULL, &w, &cfg, px, out, NULL), QS_OK);
    for (int r = 0; r < n; r++) {
        ck_assert_uint_eq(bits(out[r].global_enc[QS_DIR_ROW]), bits(whole.global_enc[QS_DIR_ROW]));
        qs_tensor T;
        qs_quantized t;
        stack_rows(px[r], &X, &T);
        ck_assert_int_eq(qs_quantize(NULL, &q0, &T, &t), QS_OK);
        ck_assert_uint_eq(bits(t.global_enc[QS_DIR_ROW]), bits(whole.global_enc[QS_DIR_ROW]));
        assert_nv_block(&out[r].data[QS_DIR_ROW], &t.data[QS_DIR_ROW], 0, 0,
                        "sr row codes, local index");
        assert_nv_block(&out[r].scale[QS_DIR_ROW], &t.scale[QS_DIR_ROW], 0, 0, "sr row scales");
        /* The block scales do not depend on the rounding: they are the unsharded rows. */
        assert_nv_block(&out[r].scale[QS_DIR_ROW], &whole.scale[QS_DIR_ROW], off[r], 0,
                        "sr row scales vs unsharded");
        if (r == 0) /* local and global indices coincide */
            assert_nv_block(&out[0].data[QS_DIR_ROW], &whole.data[QS_DIR_ROW], 0, 0, "rank 0");
        else /* a global index would have given the unsharded rows */
            ck_assert_int_gt(nv_diff(&out[r].data[QS_DIR_ROW], &whole.data[QS_DIR_ROW], off[r], 0),
                             0);
        qs_quantized_free(&t);
        qs_tensor_free(&T);
        qs_quantized_free(&out[r]);
    }
    leave(&w, tok);
    qs_dist_world_free(&w);
    qs_quantized_free(&whole);
    qs_quantizer_free(&q0);
    free_parts(xs, n);
    qs_tensor_free(&X);
}
END_TEST

static Suite *distributed_suite(void)
{
    Suite *s = suite_create("distributed");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_allreduce_gives_every_rank_the_maximum_and_nan_wins, 0, 4);
    tcase_add_loop_test(tc, test_allreduce_combines_each_subgroup_separately, 0, 4);
    tcase_add_test(tc, test_reduction_is_order_free_and_one_rank_keeps_its_value);
    tcase_add_loop_test(tc, test_reduction_rejects_a_negative_amax_and_changes_nothing, 0, 4);
    tcase_add_test(tc, test_bit_integer_max_is_the_reduction_and_a_float_max_is_not);
    tcase_add_loop_test(tc, test_sequence_parallel_current_scale_is_shared_and_rows_match_unsharded,
                        0, 4);
    tcase_add_loop_test(tc, test_sequence_parallel_nvfp4_linear_matches_unsharded, 0, 4);
    tcase_add_loop_test(tc, test_tensor_parallel_current_columns_match_unsharded, 0, 4);
    tcase_add_loop_test(
        tc, test_delayed_updates_give_every_rank_the_state_of_one_quantizer_fed_the_max, 0, 4);
    tcase_add_loop_test(tc, test_delayed_update_rejects_keys_that_differ_between_ranks, 0, 4);
    tcase_add_loop_test(tc, test_a_nan_slot_on_one_rank_reaches_every_rank, 0, 4);
    tcase_add_loop_test(tc, test_current_scaling_ignores_a_nan_and_keeps_an_inf_on_one_rank, 0, 4);
    tcase_add_loop_test(tc, test_replay_uses_the_recorded_scales_and_reduces_nothing, 0, 4);
    tcase_add_loop_test(tc, test_nested_region_reduces_over_its_own_group, 0, 4);
    tcase_add_loop_test(tc, test_ranks_that_disagree_on_the_group_are_rejected, 0, 4);
    tcase_add_loop_test(tc, test_block_scales_are_local_and_match_the_unsharded_where_aligned, 0,
                        4);
    tcase_add_loop_test(tc, test_axiswise_scales_are_local_and_rows_match_the_unsharded, 0, 4);
    tcase_add_loop_test(tc, test_nvfp4_tensor_amaxes_are_reduced_as_one_vector, 0, 4);
    tcase_add_loop_test(tc, test_nvfp4_shards_encode_with_the_unsharded_tensor_scale, 0, 4);
    tcase_add_loop_test(tc, test_nvfp4_stochastic_rounding_index_is_shard_local, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(distributed_suite());
}
