/* test_gdn.c: the Gated DeltaNet reference of spec/attention.md [GDN-*]: hand-checked tokens,
 * a double-precision recurrence written here (the backward is checked against its central
 * differences), varlen and GVA against their dense / repeated equivalents, the chunked form
 * against the recurrence, extreme gates, and the layer ops (gate, beta, conv, gated RMSNorm). */
#include <math.h>
#include <string.h>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qstest.h"

/* ---------------------------------------------------------------- helpers */

static float *rbuf(size_t n, float lo, float hi)
{
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++)
        x[e] = qst_rnd(lo, hi);
    return x;
}

static float *zbuf(size_t n)
{
    return calloc(n + 1, sizeof(float));
}

static double *to_d(const float *x, size_t n)
{
    double *y = malloc((n + 1) * sizeof(double));
    for (size_t e = 0; e < n; e++)
        y[e] = x[e];
    return y;
}

static void expect_bitwise(const char *what, const float *a, const float *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        ck_assert_msg(qs_f32_bits(a[e]) == qs_f32_bits(b[e]), "%s[%zu]: %a (0x%08x) vs %a (0x%08x)",
                      what, e, (double)a[e], qs_f32_bits(a[e]), (double)b[e], qs_f32_bits(b[e]));
}

static void expect_close(const char *what, const float *a, const float *b, size_t n, double atol,
                         double rtol)
{
    for (size_t e = 0; e < n; e++)
        ck_assert_msg(fabs((double)a[e] - b[e]) <= atol + rtol * fabs((double)b[e]),
                      "%s[%zu]: %.9g vs %.9g", what, e, (double)a[e], (double)b[e]);
}

static qs_gdn_params dense(int64_t b, int64_t t, int64_t h, int64_t hv, int64_t dk, int64_t dv)
{
    qs_gdn_params p;
    memset(&p, 0, sizeof p);
    p.b = b;
    p.t = t;
    p.h = h;
    p.hv = hv;
    p.dk = dk;
    p.dv = dv;
    p.dtype = QS_FP32;
    return p;
}

/* All inputs and outputs of one dense or varlen call. */
typedef struct gdn_io {
    qs_gdn_params p;
    size_t nq, nv, ng, ns;
    float *q, *k, *v, *g, *beta, *h0, *o, *ht, *w, *wh;
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;
} gdn_io;

/* Random inputs: q, k in [-1, 1), v in [-1, 1), g in [gmin, 0), beta in (0, 1), h0, and the
 * loss weights w (for o) and wh (for ht). */
static void io_init(gdn_io *x, const qs_gdn_params *p, uint64_t seed, float gmin)
{
    int64_t tok = p->cu_seqlens != NULL ? p->t : p->b * p->t;
    x->p = *p;
    x->nq = (size_t)(tok * p->h * p->dk);
    x->nv = (size_t)(tok * p->hv * p->dv);
    x->ng = (size_t)(tok * p->hv);
    x->ns = (size_t)(p->b * p->hv * p->dk * p->dv);
    qst_rng_seed(seed);
    x->q = rbuf(x->nq, -1.0f, 1.0f);
    x->k = rbuf(x->nq, -1.0f, 1.0f);
    x->v = rbuf(x->nv, -1.0f, 1.0f);
    x->g = rbuf(x->ng, gmin, 0.0f);
    x->beta = rbuf(x->ng, 0.05f, 0.95f);
    x->h0 = rbuf(x->ns, -0.5f, 0.5f);
    x->w = rbuf(x->nv, -1.0f, 1.0f);
    x->wh = rbuf(x->ns, -1.0f, 1.0f);
    x->o = zbuf(x->nv);
    x->ht = zbuf(x->ns);
    x->dq = zbuf(x->nq);
    x->dk = zbuf(x->nq);
    x->dv = zbuf(x->nv);
    x->dg = zbuf(x->ng);
    x->dbeta = zbuf(x->ng);
    x->dh0 = zbuf(x->ns);
}

static void io_free(gdn_io *x)
{
    float *all[] = {x->q, x->k,  x->v,  x->g,  x->beta, x->h0, x->o,     x->ht,
                    x->w, x->wh, x->dq, x->dk, x->dv,   x->dg, x->dbeta, x->dh0};
    for (size_t e = 0; e < sizeof all / sizeof all[0]; e++)
        free(all[e]);
}

static void io_fwd_bwd(qs_ctx *ctx, gdn_io *x)
{
    ck_assert_int_eq(qs_gdn_fwd(ctx, &x->p, x->q, x->k, x->v, x->g, x->beta, x->h0, x->o, x->ht),
                     QS_OK);
    ck_assert_int_eq(qs_gdn_bwd(ctx, &x->p, x->q, x->k, x->v, x->g, x->beta, x->h0, x->w, x->wh,
                                x->dq, x->dk, x->dv, x->dg, x->dbeta, x->dh0),
                     QS_OK);
}

/* ---------------------------------------------------------------- a double recurrence */

/* Inputs of the double recurrence (dense layout only). */
typedef struct gdn_d {
    const qs_gdn_params *p;
    double scale;
    double *q, *k, *v, *g, *beta, *h0;
    double *w, *wh;
} gdn_d;

static void l2n_d(const double *x, double *y, int64_t n, int on)
{
    double ss = 0.0;
    for (int64_t d = 0; d < n; d++)
        ss += x[d] * x[d];
    for (int64_t d = 0; d < n; d++)
        y[d] = on ? x[d] / sqrt(ss + 1e-6) : x[d];
}

/* sum(o * w) + sum(ht * wh) of the recurrence h = e^g h; u = beta (v - h^T k); h += k u^T;
 * o = h^T (scale q), in double, written from the math (not from ref/); o may be NULL. */
static double gdn_loss_d(const gdn_d *x, double *o)
{
    const qs_gdn_params *p = x->p;
    double S[64], u[8], qn[8], kn[8], loss = 0.0;
    for (int64_t n = 0; n < p->b; n++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            int64_t hq = hv / (p->hv / p->h);
            for (int64_t e = 0; e < p->dk * p->dv; e++)
                S[e] = x->h0[(n * p->hv + hv) * p->dk * p->dv + e];
            for (int64_t i = 0; i < p->t; i++) {
                int64_t tok = n * p->t + i;
                l2n_d(x->q + (tok * p->h + hq) * p->dk, qn, p->dk, p->use_qk_l2norm);
                l2n_d(x->k + (tok * p->h + hq) * p->dk, kn, p->dk, p->use_qk_l2norm);
                double a = exp(x->g[tok * p->hv + hv]), bt = x->beta[tok * p->hv + hv];
                for (int64_t e = 0; e < p->dk * p->dv; e++)
                    S[e] *= a;
                for (int64_t c = 0; c < p->dv; c++) {
                    double pred = 0.0;
                    for (int64_t r = 0; r < p->dk; r++)
                        pred += S[r * p->dv + c] * kn[r];
                    u[c] = bt * (x->v[(tok * p->hv + hv) * p->dv + c] - pred);
                }
                for (int64_t r = 0; r < p->dk; r++)
                    for (int64_t c = 0; c < p->dv; c++)
                        S[r * p->dv + c] += kn[r] * u[c];
                for (int64_t c = 0; c < p->dv; c++) {
                    double acc = 0.0;
                    for (int64_t r = 0; r < p->dk; r++)
                        acc += S[r * p->dv + c] * x->scale * qn[r];
                    size_t e = (size_t)((tok * p->hv + hv) * p->dv + c);
                    if (o != NULL)
                        o[e] = acc;
                    loss += acc * x->w[e];
                }
            }
            for (int64_t e = 0; e < p->dk * p->dv; e++)
                loss += S[e] * x->wh[(n * p->hv + hv) * p->dk * p->dv + e];
        }
    return loss;
}

static double gdn_fd(const gdn_d *x, double *arr, size_t e)
{
    const double eps = 1e-5;
    double x0 = arr[e];
    arr[e] = x0 + eps;
    double lp = gdn_loss_d(x, NULL);
    arr[e] = x0 - eps;
    double lm = gdn_loss_d(x, NULL);
    arr[e] = x0;
    return (lp - lm) / (2.0 * eps);
}

/* Tolerance of an FP32 gradient against the exact one. The FP32 state carries a relative
 * error that grows at most linearly in the tokens (~T * dk * 2^-24 ~ 1e-5 at T = 70, dk = 3)
 * with values of order 1; the central difference in double (eps 1e-5) is within ~1e-9. */
static void expect_grad(const char *what, size_t e, float got, double want)
{
    double tol = 5e-5 + 2e-4 * fabs(want);
    ck_assert_msg(fabs((double)got - want) <= tol, "%s[%zu]: got %.9g, want %.9g (diff %.3g)", what,
                  e, (double)got, want, fabs((double)got - want));
}

/* [GDN-BWD] [GDN-RECURRENCE] [GDN-STATE-FP32] [GDN-GVA] [GDN-L2NORM]: o and ht against the
 * double recurrence; dq, dk, dv, dg, dbeta, dh0 against its central differences. */
static void check_bwd(const qs_gdn_params *p, uint64_t seed, float gmin, int strong_gates)
{
    qs_ctx *ctx = qs_ctx_new();
    gdn_io x;
    io_init(&x, p, seed, gmin);
    if (strong_gates) /* decay 1 (g = 0) and a near-reset (g = -20) */
        for (size_t e = 0; e < x.ng; e += 3)
            x.g[e] = (e % 2 == 0) ? 0.0f : -20.0f;
    io_fwd_bwd(ctx, &x);
    gdn_d d = {p,
               (double)(p->scale != 0.0f ? p->scale : qs_rsqrtf((float)p->dk)),
               to_d(x.q, x.nq),
               to_d(x.k, x.nq),
               to_d(x.v, x.nv),
               to_d(x.g, x.ng),
               to_d(x.beta, x.ng),
               to_d(x.h0, x.ns),
               to_d(x.w, x.nv),
               to_d(x.wh, x.ns)};
    double *od = malloc(x.nv * sizeof(double));
    gdn_loss_d(&d, od);
    for (size_t e = 0; e < x.nv; e++)
        ck_assert_msg(fabs(x.o[e] - od[e]) <= 1e-5, "o[%zu] %.9g vs %.9g", e, (double)x.o[e],
                      od[e]);
    for (size_t e = 0; e < x.nq; e++)
        expect_grad("dq", e, x.dq[e], gdn_fd(&d, d.q, e));
    for (size_t e = 0; e < x.nq; e++)
        expect_grad("dk", e, x.dk[e], gdn_fd(&d, d.k, e));
    for (size_t e = 0; e < x.nv; e++)
        expect_grad("dv", e, x.dv[e], gdn_fd(&d, d.v, e));
    for (size_t e = 0; e < x.ng; e++)
        expect_grad("dg", e, x.dg[e], gdn_fd(&d, d.g, e));
    for (size_t e = 0; e < x.ng; e++)
        expect_grad("dbeta", e, x.dbeta[e], gdn_fd(&d, d.beta, e));
    for (size_t e = 0; e < x.ns; e++)
        expect_grad("dh0", e, x.dh0[e], gdn_fd(&d, d.h0, e));
    free(d.q), free(d.k), free(d.v), free(d.g), free(d.beta), free(d.h0);
    free(d.w), free(d.wh), free(od);
    io_free(&x);
    qs_ctx_free(ctx);
}

/* [GDN-BWD] [GDN-GVA] [GDN-L2NORM]: b 2, T 5, h 1 over hv 2, with h0. */
START_TEST(test_backward_matches_central_differences_gva_l2norm)
{
    qs_gdn_params p = dense(2, 5, 1, 2, 3, 2);
    p.use_qk_l2norm = 1;
    check_bwd(&p, 1, -1.0f, 0);
}
END_TEST

/* [GDN-BWD] [GDN-SCALE]: T 70, past one 64-token segment; gates 0 and -20. */
START_TEST(test_backward_matches_central_differences_past_a_checkpoint_segment)
{
    qs_gdn_params p = dense(1, 70, 1, 1, 3, 2); /* 70 > the 64-token segment of the backward */
    p.use_qk_l2norm = 1;
    p.scale = 0.75f;
    check_bwd(&p, 2, -0.3f, 1);
}
END_TEST

/* [GDN-BWD] [GDN-RECURRENCE]: raw q, k; gates 0 and -20. */
START_TEST(test_backward_matches_central_differences_without_l2norm)
{
    qs_gdn_params p = dense(1, 6, 2, 2, 2, 3);
    check_bwd(&p, 3, -2.0f, 1);
}
END_TEST

/* ---------------------------------------------------------------- hand-checked tokens */

/* [GDN-RECURRENCE] [GDN-SCALE] [GDN-STATE-FP32]: dk 2, dv 1, h0 = 0, g = 0 (decay 1).
 * Token 0: k (1,0), v 2, beta 0.5: u = 0.5 (2 - 0) = 1, h = (1; 0), o = h.(s q) with q (1,1),
 * s = 2^-1/2: o = s. Token 1: k (0,1), v 3, beta 1, q (0,1): pred 0, u = 3, h = (1; 3),
 * o = 3 s. Final state (1, 3). */
START_TEST(test_two_tokens_one_head_hand_example)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 2, 1, 1, 2, 1);
    float q[4] = {1, 1, 0, 1}, k[4] = {1, 0, 0, 1}, v[2] = {2, 3}, g[2] = {0, 0};
    float beta[2] = {0.5f, 1.0f}, o[2], ht[2];
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, beta, NULL, o, ht), QS_OK);
    float s = qs_rsqrtf(2.0f), want_o[2] = {s, 3.0f * s}, want_h[2] = {1.0f, 3.0f};
    expect_bitwise("o", o, want_o, 2);
    expect_bitwise("ht", ht, want_h, 2);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-RECURRENCE]: g = -200 makes exp(g) = 0 in FP32, so the state is forgotten: the
 * outputs from that token on equal, bitwise, a run that starts there from a zero state. */
START_TEST(test_strongly_negative_gate_forgets_the_state)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 6, 1, 1, 3, 2);
    gdn_io x;
    io_init(&x, &p, 7, -1.0f);
    x.g[2] = -200.0f;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, x.q, x.k, x.v, x.g, x.beta, x.h0, x.o, x.ht), QS_OK);
    qs_gdn_params p2 = dense(1, 4, 1, 1, 3, 2);
    float o2[8], ht2[6];
    ck_assert_int_eq(
        qs_gdn_fwd(ctx, &p2, x.q + 6, x.k + 6, x.v + 4, x.g + 2, x.beta + 2, NULL, o2, ht2), QS_OK);
    expect_bitwise("o", x.o + 4, o2, 8);
    expect_bitwise("ht", x.ht, ht2, 6);
    io_free(&x);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-RECURRENCE]: g = 0 is decay 1: a token with k = 0 leaves the state unchanged (u is
 * multiplied by k = 0), so its output is the read of the previous state: h0^T (s q). */
START_TEST(test_zero_gate_and_zero_key_keep_the_state)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 1, 1, 1, 2, 2);
    p.scale = 1.0f;
    float q[2] = {1.0f, -2.0f}, k[2] = {0, 0}, v[2] = {5, 6}, g[1] = {0}, beta[1] = {0.5f};
    float h0[4] = {1.0f, 2.0f, 3.0f, 4.0f}, o[2], ht[4];
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, beta, h0, o, ht), QS_OK);
    float want[2] = {1.0f - 6.0f, 2.0f - 8.0f};
    expect_bitwise("o", o, want, 2);
    expect_bitwise("ht", ht, h0, 4);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-L2NORM]: with use_qk_l2norm, the result equals the plain call on q, k normalized
 * here as x / qs_sqrtf(sum x^2 + 1e-6) (FP32, increasing index), bitwise. */
START_TEST(test_l2norm_divides_by_sqrt_of_sum_of_squares_plus_1e_6)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 4, 1, 1, 3, 2);
    gdn_io x;
    io_init(&x, &p, 9, -1.0f);
    x.q[0] = x.q[1] = x.q[2] = 0.0f; /* a zero vector stays zero (eps keeps it finite) */
    float qn[12], kn[12], o2[8];
    for (int r = 0; r < 4; r++) {
        float sq = 0.0f, sk = 0.0f;
        for (int d = 0; d < 3; d++) {
            sq = sq + x.q[r * 3 + d] * x.q[r * 3 + d];
            sk = sk + x.k[r * 3 + d] * x.k[r * 3 + d];
        }
        for (int d = 0; d < 3; d++) {
            qn[r * 3 + d] = x.q[r * 3 + d] / qs_sqrtf(sq + 1e-6f);
            kn[r * 3 + d] = x.k[r * 3 + d] / qs_sqrtf(sk + 1e-6f);
        }
    }
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, qn, kn, x.v, x.g, x.beta, x.h0, o2, NULL), QS_OK);
    p.use_qk_l2norm = 1;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, x.q, x.k, x.v, x.g, x.beta, x.h0, x.o, NULL), QS_OK);
    expect_bitwise("o", x.o, o2, 8);
    ck_assert(x.o[0] == 0.0f && x.o[1] == 0.0f);
    io_free(&x);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- varlen, GVA, dtype */

/* [GDN-VARLEN]: packed sequences of 3, 0 and 7 tokens, each with its own h0, equal bitwise
 * the dense call on each sequence alone, forward and backward. */
START_TEST(test_varlen_equals_each_sequence_alone_bitwise)
{
    qs_ctx *ctx = qs_ctx_new();
    int32_t cu[4] = {0, 3, 3, 10};
    qs_gdn_params p = dense(3, 10, 1, 2, 2, 3);
    p.cu_seqlens = cu;
    p.use_qk_l2norm = 1;
    gdn_io x;
    io_init(&x, &p, 13, -1.0f);
    io_fwd_bwd(ctx, &x);
    size_t st = 2 * 2 * 3; /* hv dk dv per sequence */
    for (int n = 0; n < 3; n++) {
        int64_t t0 = cu[n], len = cu[n + 1] - cu[n];
        qs_gdn_params ps = dense(1, len, 1, 2, 2, 3);
        ps.use_qk_l2norm = 1;
        float o[64], ht[12], dq[64], dk[64], dv[64], dg[32], db[32], dh0[12];
        const float *q = x.q + t0 * 2, *k = x.k + t0 * 2, *v = x.v + t0 * 6, *g = x.g + t0 * 2;
        const float *beta = x.beta + t0 * 2, *h0 = x.h0 + n * st;
        ck_assert_int_eq(qs_gdn_fwd(ctx, &ps, q, k, v, g, beta, h0, o, ht), QS_OK);
        ck_assert_int_eq(qs_gdn_bwd(ctx, &ps, q, k, v, g, beta, h0, x.w + t0 * 6, x.wh + n * st, dq,
                                    dk, dv, dg, db, dh0),
                         QS_OK);
        expect_bitwise("o", x.o + t0 * 6, o, (size_t)len * 6);
        expect_bitwise("ht", x.ht + n * st, ht, st);
        expect_bitwise("dq", x.dq + t0 * 2, dq, (size_t)len * 2);
        expect_bitwise("dk", x.dk + t0 * 2, dk, (size_t)len * 2);
        expect_bitwise("dv", x.dv + t0 * 6, dv, (size_t)len * 6);
        expect_bitwise("dg", x.dg + t0 * 2, dg, (size_t)len * 2);
        expect_bitwise("dbeta", x.dbeta + t0 * 2, db, (size_t)len * 2);
        expect_bitwise("dh0", x.dh0 + n * st, dh0, st);
    }
    expect_bitwise("empty sequence: ht = h0", x.ht + st, x.h0 + st, st);
    io_free(&x);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-GVA]: h = 2 q/k heads for hv = 4 value heads (value head i uses q/k head i / 2)
 * equals the call with q, k repeated to 4 heads: o, ht, dv, dg, dbeta, dh0 bitwise; dq, dk
 * are the sums over the repeated heads (FP32 rounding of a different summation). */
START_TEST(test_gva_equals_explicitly_repeated_qk_heads)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 5, 2, 4, 2, 2);
    p.use_qk_l2norm = 1;
    gdn_io x, r;
    io_init(&x, &p, 17, -1.0f);
    qs_gdn_params pr = p;
    pr.h = 4;
    io_init(&r, &pr, 17, -1.0f);
    memcpy(r.v, x.v, x.nv * sizeof(float));
    memcpy(r.g, x.g, x.ng * sizeof(float));
    memcpy(r.beta, x.beta, x.ng * sizeof(float));
    memcpy(r.h0, x.h0, x.ns * sizeof(float));
    memcpy(r.w, x.w, x.nv * sizeof(float));
    memcpy(r.wh, x.wh, x.ns * sizeof(float));
    for (int t = 0; t < 5; t++)
        for (int h = 0; h < 4; h++)
            for (int d = 0; d < 2; d++) {
                r.q[(t * 4 + h) * 2 + d] = x.q[(t * 2 + h / 2) * 2 + d];
                r.k[(t * 4 + h) * 2 + d] = x.k[(t * 2 + h / 2) * 2 + d];
            }
    io_fwd_bwd(ctx, &x);
    io_fwd_bwd(ctx, &r);
    expect_bitwise("o", x.o, r.o, x.nv);
    expect_bitwise("ht", x.ht, r.ht, x.ns);
    expect_bitwise("dv", x.dv, r.dv, x.nv);
    expect_bitwise("dg", x.dg, r.dg, x.ng);
    expect_bitwise("dbeta", x.dbeta, r.dbeta, x.ng);
    expect_bitwise("dh0", x.dh0, r.dh0, x.ns);
    float sq[20], sk[20];
    for (int t = 0; t < 5; t++)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 2; d++) {
                sq[(t * 2 + h) * 2 + d] =
                    r.dq[(t * 4 + 2 * h) * 2 + d] + r.dq[(t * 4 + 2 * h + 1) * 2 + d];
                sk[(t * 2 + h) * 2 + d] =
                    r.dk[(t * 4 + 2 * h) * 2 + d] + r.dk[(t * 4 + 2 * h + 1) * 2 + d];
            }
    expect_close("dq", x.dq, sq, 20, 1e-6, 1e-5);
    expect_close("dk", x.dk, sk, 20, 1e-6, 1e-5);
    io_free(&x);
    io_free(&r);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-DTYPE] [GDN-STATE-FP32]: with BF16 q, k, v the output is the FP32-mode output rounded
 * once to BF16, and the state ht stays FP32 (equal to the FP32-mode state). */
START_TEST(test_bf16_rounds_only_the_output_and_keeps_an_fp32_state)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 6, 1, 1, 4, 3);
    gdn_io x;
    io_init(&x, &p, 19, -1.0f);
    for (size_t e = 0; e < x.nq; e++)
        x.q[e] = qs_round_bf16(x.q[e]), x.k[e] = qs_round_bf16(x.k[e]);
    for (size_t e = 0; e < x.nv; e++)
        x.v[e] = qs_round_bf16(x.v[e]);
    float o16[18], ht16[12];
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, x.q, x.k, x.v, x.g, x.beta, x.h0, x.o, x.ht), QS_OK);
    p.dtype = QS_BF16;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, x.q, x.k, x.v, x.g, x.beta, x.h0, o16, ht16), QS_OK);
    int differs = 0;
    for (int e = 0; e < 18; e++) {
        ck_assert(qs_f32_bits(o16[e]) == qs_f32_bits(qs_round_bf16(x.o[e])));
        differs |= qs_f32_bits(o16[e]) != qs_f32_bits(x.o[e]);
    }
    ck_assert(differs);
    expect_bitwise("ht", ht16, x.ht, 12);
    io_free(&x);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- chunked form */

/* [GDN-CHUNK]: the chunked WY form equals the recurrence within FP32 rounding: both are FP32
 * evaluations of one function, summed in different orders over at most ~C*dk terms of
 * magnitude <= ~4, so |diff| <= 2e-5 (measured: a few 1e-7). Gates include g = 0 and
 * g = -60, whose exp(G_i) underflows; only masked differences G_i - G_j <= 0 are
 * exponentiated, so nothing overflows. */
static void check_chunked(const qs_gdn_params *p, int64_t chunk, uint64_t seed)
{
    qs_ctx *ctx = qs_ctx_new();
    gdn_io x;
    io_init(&x, p, seed, -0.5f);
    for (size_t e = 0; e < x.ng; e += 5)
        x.g[e] = (e % 2 == 0) ? 0.0f : -60.0f;
    float *o2 = zbuf(x.nv), *ht2 = zbuf(x.ns);
    ck_assert_int_eq(qs_gdn_fwd(ctx, p, x.q, x.k, x.v, x.g, x.beta, x.h0, x.o, x.ht), QS_OK);
    ck_assert_int_eq(qs_gdn_fwd_chunked(ctx, p, chunk, x.q, x.k, x.v, x.g, x.beta, x.h0, o2, ht2),
                     QS_OK);
    for (size_t e = 0; e < x.nv; e++)
        ck_assert(isfinite(o2[e]));
    expect_close("o", o2, x.o, x.nv, 2e-5, 1e-5);
    expect_close("ht", ht2, x.ht, x.ns, 2e-5, 1e-5);
    free(o2);
    free(ht2);
    io_free(&x);
    qs_ctx_free(ctx);
}

/* [GDN-CHUNK]: chunk 64, T 150 (chunks of 64, 64, 22), GVA. */
START_TEST(test_chunked_64_matches_the_recurrence_over_a_partial_last_chunk)
{
    qs_gdn_params p = dense(1, 150, 1, 2, 4, 3);
    p.use_qk_l2norm = 1;
    check_chunked(&p, 64, 23);
}
END_TEST

/* [GDN-CHUNK] [GDN-VARLEN]: chunk 16, sequences of 17, 3 and 41 tokens. */
START_TEST(test_chunked_16_matches_the_recurrence_on_varlen)
{
    int32_t cu[4] = {0, 17, 20, 61};
    qs_gdn_params p = dense(3, 61, 2, 2, 3, 2);
    p.cu_seqlens = cu;
    p.use_qk_l2norm = 1;
    check_chunked(&p, 16, 29);
}
END_TEST

/* [GDN-CHUNK]: raw q, k, b 2, T 40 (one partial chunk). */
START_TEST(test_chunked_without_l2norm_matches_the_recurrence)
{
    qs_gdn_params p = dense(2, 40, 1, 1, 2, 2);
    check_chunked(&p, 64, 31);
}
END_TEST

/* ---------------------------------------------------------------- layer ops */

/* The gate loss sum(g * dg) in double, g = -exp(A_log) log(1 + exp(a + dt_bias)), over 3
 * rows of 2 channels (the exact softplus: a + dt_bias stays below the threshold 20). */
static double gate_loss_d(const double *a, const double *alog, const double *dtb, const float *dg)
{
    double loss = 0.0;
    for (int e = 0; e < 6; e++)
        loss += -exp(alog[e % 2]) * log1p(exp(a[e] + dtb[e % 2])) * dg[e];
    return loss;
}

/* [GDN-GATE] [GDN-GATE-BWD]: g = -exp(A_log) softplus(a + dt_bias): at 0, 0, 0 it is -ln 2;
 * above the softplus threshold 20 softplus is the identity; da, dA_log, ddt_bias match
 * central differences of the double gate (FP32 of a few terms: within 1e-5 relative). */
START_TEST(test_gate_values_and_backward)
{
    qs_ctx *ctx = qs_ctx_new();
    float a[6] = {0.0f, 30.0f, -1.5f, 0.25f, 2.0f, -4.0f}, alog[2] = {0.0f, 0.5f};
    float dtb[2] = {0.0f, 1.0f}, g[6], dg[6] = {1.0f, -0.5f, 2.0f, 0.75f, -1.0f, 0.3f};
    float da[6], dalog[2], ddtb[2];
    ck_assert_int_eq(qs_gdn_gate_fwd(ctx, 3, 2, a, alog, dtb, g), QS_OK);
    ck_assert_msg(fabs(g[0] + 0.69314718056) < 1e-7, "g0 %.9g", (double)g[0]);
    ck_assert(g[1] == -(qs_expf(0.5f) * 31.0f));
    a[1] = 3.0f; /* back below the threshold for the differences */
    ck_assert_int_eq(qs_gdn_gate_bwd(ctx, 3, 2, a, alog, dtb, dg, da, dalog, ddtb), QS_OK);
    double *ad = to_d(a, 6), *ld = to_d(alog, 2), *bd = to_d(dtb, 2);
    double *arrs[3] = {ad, ld, bd};
    float *got[3] = {da, dalog, ddtb};
    int ns[3] = {6, 2, 2};
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < ns[k]; e++) {
            double x0 = arrs[k][e];
            arrs[k][e] = x0 + 1e-6;
            double lp = gate_loss_d(ad, ld, bd, dg);
            arrs[k][e] = x0 - 1e-6;
            double lm = gate_loss_d(ad, ld, bd, dg);
            arrs[k][e] = x0;
            double want = (lp - lm) / 2e-6;
            ck_assert_msg(fabs(got[k][e] - want) <= 1e-6 + 1e-5 * fabs(want),
                          "arg %d [%d]: %.9g vs %.9g", k, e, (double)got[k][e], want);
        }
    free(ad), free(ld), free(bd);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-BETA]: beta = sigmoid(b) (0.5 at 0, within 2e-7 of the exact value), and db =
 * dbeta beta (1 - beta) matches central differences of the double sigmoid. */
START_TEST(test_beta_is_sigmoid_with_its_derivative)
{
    qs_ctx *ctx = qs_ctx_new();
    float b[3] = {0.0f, 2.0f, -3.0f}, beta[3], dbeta[3] = {1.0f, 1.0f, -2.0f}, db[3];
    ck_assert_int_eq(qs_gdn_beta_fwd(ctx, 3, b, beta), QS_OK);
    ck_assert(beta[0] == 0.5f);
    ck_assert_int_eq(qs_gdn_beta_bwd(ctx, 3, beta, dbeta, db), QS_OK);
    for (int e = 0; e < 3; e++) {
        double x = b[e], s = 1.0 / (1.0 + exp(-x));
        double fd = (1.0 / (1.0 + exp(-(x + 1e-6))) - 1.0 / (1.0 + exp(-(x - 1e-6)))) / 2e-6;
        ck_assert_msg(fabs(beta[e] - s) < 2e-7, "beta[%d]", e);
        ck_assert_msg(fabs(db[e] - dbeta[e] * fd) < 1e-6, "db[%d] %.9g vs %.9g", e, (double)db[e],
                      dbeta[e] * fd);
    }
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-CONV]: width 3, taps (1, 2, 3) on x = (1, 10, 100), no SiLU: y = (3, 32, 321); in a
 * packed second sequence the window restarts (no leakage across cu_seqlens). */
START_TEST(test_conv_is_causal_and_restarts_at_each_sequence)
{
    qs_ctx *ctx = qs_ctx_new();
    int32_t cu[3] = {0, 3, 5};
    qs_conv_params p = {2, 5, 1, 3, cu, 0, QS_FP32};
    float x[5] = {1, 10, 100, 7, 5}, w[3] = {1, 2, 3}, y[5];
    ck_assert_int_eq(qs_conv1d_fwd(ctx, &p, x, w, NULL, y), QS_OK);
    float want[5] = {3, 32, 321, 21, 29};
    expect_bitwise("y", y, want, 5);
    float bias[1] = {0.5f};
    p.silu = 1;
    ck_assert_int_eq(qs_conv1d_fwd(ctx, &p, x, w, bias, y), QS_OK);
    ck_assert(y[0] == qs_siluf(3.5f));
    qs_ctx_free(ctx);
}
END_TEST

/* A double conv with SiLU, dense [b, t, c]: sum(y * wy). */
static double conv_loss_d(int64_t b, int64_t t, int64_t c, int64_t wd, const double *x,
                          const double *w, const double *bias, const double *wy)
{
    double loss = 0.0;
    for (int64_t n = 0; n < b; n++)
        for (int64_t i = 0; i < t; i++)
            for (int64_t ch = 0; ch < c; ch++) {
                double z = bias[ch];
                for (int64_t j = 0; j < wd; j++)
                    if (i - (wd - 1) + j >= 0)
                        z += w[ch * wd + j] * x[(n * t + i - (wd - 1) + j) * c + ch];
                loss += z / (1.0 + exp(-z)) * wy[(n * t + i) * c + ch];
            }
    return loss;
}

/* [GDN-CONV-BWD]: dx, dw, dbias against central differences of the double conv. */
START_TEST(test_conv_backward_matches_central_differences)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { B = 2, T = 6, C = 3, W = 4 };
    qs_conv_params p = {B, T, C, W, NULL, 1, QS_FP32};
    qst_rng_seed(37);
    float *x = rbuf(B * T * C, -1, 1), *w = rbuf(C * W, -1, 1), *bias = rbuf(C, -1, 1);
    float *wy = rbuf(B * T * C, -1, 1), dx[B * T * C], dw[C * W], db[C];
    ck_assert_int_eq(qs_conv1d_bwd(ctx, &p, x, w, bias, wy, dx, dw, db), QS_OK);
    double *xd = to_d(x, B * T * C), *wd = to_d(w, C * W), *bd = to_d(bias, C);
    double *wyd = to_d(wy, B * T * C);
    double *arrs[3] = {xd, wd, bd};
    float *got[3] = {dx, dw, db};
    size_t ns[3] = {B * T * C, C * W, C};
    for (int a = 0; a < 3; a++)
        for (size_t e = 0; e < ns[a]; e++) {
            double x0 = arrs[a][e];
            arrs[a][e] = x0 + 1e-5;
            double lp = conv_loss_d(B, T, C, W, xd, wd, bd, wyd);
            arrs[a][e] = x0 - 1e-5;
            double lm = conv_loss_d(B, T, C, W, xd, wd, bd, wyd);
            arrs[a][e] = x0;
            double want = (lp - lm) / 2e-5;
            ck_assert_msg(fabs(got[a][e] - want) <= 1e-5 + 1e-5 * fabs(want), "arg %d [%zu]: %g %g",
                          a, e, (double)got[a][e], want);
        }
    free(x), free(w), free(bias), free(wy), free(xd), free(wd), free(bd), free(wyd);
    qs_ctx_free(ctx);
}
END_TEST

/* A double gated RMSNorm: sum(y * wy), y = x / sqrt(mean x^2 + eps) * w * silu(z). */
static double grms_loss_d(int64_t rows, int64_t n, double eps, const double *x, const double *z,
                          const double *w, const double *wy)
{
    double loss = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++)
            ss += x[r * n + i] * x[r * n + i];
        double rstd = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t i = 0; i < n; i++) {
            double zz = z[r * n + i];
            loss += x[r * n + i] * rstd * w[i] * (zz / (1.0 + exp(-zz))) * wy[r * n + i];
        }
    }
    return loss;
}

/* [GDN-GATED-RMSNORM] [GDN-GATED-RMSNORM-BWD]: x = (3, 4), z large (silu(z) = z), w = 1:
 * y = x / sqrt(12.5 + eps) * z; the backward matches central differences in double. */
START_TEST(test_gated_rmsnorm_value_and_backward)
{
    qs_ctx *ctx = qs_ctx_new();
    float x2[2] = {3.0f, 4.0f}, z2[2] = {100.0f, 100.0f}, w2[2] = {1.0f, 1.0f}, y2[2];
    ck_assert_int_eq(qs_gated_rmsnorm_fwd(ctx, 1, 2, 1e-5f, QS_FP32, x2, z2, w2, y2), QS_OK);
    ck_assert_msg(fabs(y2[0] - 300.0 / sqrt(12.50001)) < 1e-4, "y0 %.9g", (double)y2[0]);
    ck_assert_msg(fabs(y2[1] - 400.0 / sqrt(12.50001)) < 1e-4, "y1 %.9g", (double)y2[1]);
    enum { R = 3, N = 5 };
    qst_rng_seed(41);
    float *x = rbuf(R * N, -1, 1), *z = rbuf(R * N, -2, 2), *w = rbuf(N, 0.5f, 1.5f);
    float *wy = rbuf(R * N, -1, 1), dx[R * N], dz[R * N], dw[N], y[R * N];
    ck_assert_int_eq(qs_gated_rmsnorm_fwd(ctx, R, N, 1e-5f, QS_FP32, x, z, w, y), QS_OK);
    ck_assert_int_eq(qs_gated_rmsnorm_bwd(ctx, R, N, 1e-5f, QS_FP32, x, z, w, wy, dx, dz, dw),
                     QS_OK);
    double *xd = to_d(x, R * N), *zd = to_d(z, R * N), *wd = to_d(w, N), *wyd = to_d(wy, R * N);
    double *arrs[3] = {xd, zd, wd};
    float *got[3] = {dx, dz, dw};
    size_t ns[3] = {R * N, R * N, N};
    for (int a = 0; a < 3; a++)
        for (size_t e = 0; e < ns[a]; e++) {
            double x0 = arrs[a][e];
            arrs[a][e] = x0 + 1e-5;
            double lp = grms_loss_d(R, N, 1e-5, xd, zd, wd, wyd);
            arrs[a][e] = x0 - 1e-5;
            double lm = grms_loss_d(R, N, 1e-5, xd, zd, wd, wyd);
            arrs[a][e] = x0;
            double want = (lp - lm) / 2e-5;
            ck_assert_msg(fabs(got[a][e] - want) <= 2e-5 + 1e-4 * fabs(want), "arg %d [%zu]: %g %g",
                          a, e, (double)got[a][e], want);
        }
    free(x), free(z), free(w), free(wy), free(xd), free(zd), free(wd), free(wyd);
    qs_ctx_free(ctx);
}
END_TEST

/* [GDN-SHAPES] [GDN-SCALE] [GDN-CHUNK]: bad arguments are reported, naming them. */
/* No token (t = 0): nothing of q, k, v, g, beta is read (zero-byte buffers, which ASan
 * checks), the final state is h0 exactly, chunked or not, and the backward passes dht
 * through to dh0. */
START_TEST(test_no_token_reads_nothing_and_keeps_the_state)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_gdn_params p = dense(1, 0, 1, 2, 2, 3);
    float *none = malloc(1), h0[12], ht[12], dht[12], dh0[12], dg[1], db[1];
    for (int i = 0; i < 12; i++) {
        h0[i] = (float)(i + 1) * 0.25f;
        dht[i] = (float)(12 - i);
    }
    ck_assert_int_eq(qs_gdn_fwd_chunked(ctx, &p, 4, none, none, none, none, none, h0, none, ht),
                     QS_OK);
    ck_assert_mem_eq(ht, h0, sizeof h0);
    memset(ht, 0, sizeof ht);
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, none, none, none, none, none, h0, none, ht), QS_OK);
    ck_assert_mem_eq(ht, h0, sizeof h0);
    ck_assert_int_eq(qs_gdn_bwd(ctx, &p, none, none, none, none, none, h0, none, dht, none, none,
                                none, dg, db, dh0),
                     QS_OK);
    ck_assert_mem_eq(dh0, dht, sizeof dht);
    free(none);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_bad_arguments_are_rejected_with_a_message)
{
    qs_ctx *ctx = qs_ctx_new();
    float q[8] = {0}, k[8] = {0}, v[8] = {0}, g[8] = {0}, b[8] = {0}, o[8];
    qs_gdn_params p = dense(1, 1, 2, 3, 2, 2);
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, b, NULL, o, NULL), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "hv"));
    p = dense(1, 1, 1, 1, 2, 2);
    p.scale = NAN;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, b, NULL, o, NULL), QS_ERR_INVALID_ARG);
    p.scale = 0.0f;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, NULL, b, NULL, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'g'"));
    ck_assert_int_eq(qs_gdn_fwd_chunked(ctx, &p, 0, q, k, v, g, b, NULL, o, NULL),
                     QS_ERR_INVALID_ARG);
    int32_t cu[2] = {0, 3};
    p.cu_seqlens = cu;
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, b, NULL, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "cu_seqlens"));
    p.cu_seqlens = NULL;
    p.dtype = QS_FP16;
    v[0] = 1.0f + 0x1p-12f; /* not an FP16 value */
    ck_assert_int_eq(qs_gdn_fwd(ctx, &p, q, k, v, g, b, NULL, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'v'[0]"));
    ck_assert_int_eq(qs_gated_rmsnorm_fwd(ctx, 1, 2, 0.0f, QS_FP32, q, k, v, o),
                     QS_ERR_INVALID_ARG);
    qs_ctx_free(ctx);
}
END_TEST

static Suite *gdn_suite(void)
{
    Suite *s = suite_create("gdn");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_two_tokens_one_head_hand_example);
    tcase_add_test(tc, test_strongly_negative_gate_forgets_the_state);
    tcase_add_test(tc, test_zero_gate_and_zero_key_keep_the_state);
    tcase_add_test(tc, test_l2norm_divides_by_sqrt_of_sum_of_squares_plus_1e_6);
    tcase_add_test(tc, test_backward_matches_central_differences_gva_l2norm);
    tcase_add_test(tc, test_backward_matches_central_differences_past_a_checkpoint_segment);
    tcase_add_test(tc, test_backward_matches_central_differences_without_l2norm);
    tcase_add_test(tc, test_varlen_equals_each_sequence_alone_bitwise);
    tcase_add_test(tc, test_gva_equals_explicitly_repeated_qk_heads);
    tcase_add_test(tc, test_bf16_rounds_only_the_output_and_keeps_an_fp32_state);
    tcase_add_test(tc, test_chunked_64_matches_the_recurrence_over_a_partial_last_chunk);
    tcase_add_test(tc, test_chunked_16_matches_the_recurrence_on_varlen);
    tcase_add_test(tc, test_chunked_without_l2norm_matches_the_recurrence);
    tcase_add_test(tc, test_gate_values_and_backward);
    tcase_add_test(tc, test_beta_is_sigmoid_with_its_derivative);
    tcase_add_test(tc, test_conv_is_causal_and_restarts_at_each_sequence);
    tcase_add_test(tc, test_conv_backward_matches_central_differences);
    tcase_add_test(tc, test_gated_rmsnorm_value_and_backward);
    tcase_add_test(tc, test_bad_arguments_are_rejected_with_a_message);
    tcase_add_test(tc, test_no_token_reads_nothing_and_keeps_the_state);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(gdn_suite());
}
