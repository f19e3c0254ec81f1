/* test_sdpa.c: the softmax attention reference of spec/attention.md [ATTN-*]: hand-checked
 * rows, the specified softmax and backward order, a double-precision forward written here
 * (against which the backward is checked by central differences), layouts against each
 * other, GQA against repeated heads, causal masks on ragged sequences, and bad arguments. */
#include <math.h>
#include <string.h>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qstest.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state;

/* Uniform in [-1, 1), from a 64-bit xorshift; deterministic per seed. */
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 4503599627370496.0) - 1.0f;
}

static float *rnd_buf(size_t n, qs_dtype dt)
{
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++) {
        x[e] = rnd();
        if (dt == QS_BF16)
            x[e] = qs_round_bf16(x[e]);
    }
    return x;
}

static float *zbuf(size_t n)
{
    return calloc(n + 1, sizeof(float));
}

static void expect_bitwise(const char *what, const float *a, const float *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        ck_assert_msg(qs_f32_bits(a[e]) == qs_f32_bits(b[e]), "%s[%zu]: %a (0x%08x) vs %a (0x%08x)",
                      what, e, (double)a[e], qs_f32_bits(a[e]), (double)b[e], qs_f32_bits(b[e]));
}

static qs_sdpa_params sbhd(int64_t b, int64_t sq, int64_t sk, int64_t h, int64_t hkv, int64_t d,
                           int64_t dv, qs_attn_mask mask)
{
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.layout = QS_ATTN_SBHD;
    p.mask = mask;
    p.b = b;
    p.sq = sq;
    p.sk = sk;
    p.h = h;
    p.hkv = hkv;
    p.d = d;
    p.dv = dv;
    p.dtype = QS_FP32;
    return p;
}

/* The probabilities of one row in the order of [ATTN-SOFTMAX-ORDER], written here from the
 * spec: x_j = scale * dot (FP32, increasing d), max, sum of exp(x_j - max) increasing j. */
static float row_probs_spec(const float *x, int64_t n, float *prob)
{
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < n; j++) {
        prob[j] = qs_expf(x[j] - m);
        l = l + prob[j];
    }
    for (int64_t j = 0; j < n; j++)
        prob[j] = prob[j] / l;
    return m + qs_logf(l);
}

/* ---------------------------------------------------------------- a double forward */

/* O = softmax(scale Q K^T + mask) V in double, sbhd, GQA; returns sum(O * w) (the loss
 * whose gradient is the backward with dO = w). Written from the math, not from ref/. */
static double ref_loss_d(const qs_sdpa_params *p, double scale, const double *q, const double *k,
                         const double *v, const double *w, double *o)
{
    double loss = 0.0, sc[64];
    int64_t g = p->h / p->hkv;
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t h = 0; h < p->h; h++)
            for (int64_t i = 0; i < p->sq; i++) {
                int64_t hk = h / g,
                        nk = p->mask == QS_ATTN_MASK_CAUSAL && i + 1 < p->sk ? i + 1 : p->sk;
                double m = -INFINITY, l = 0.0;
                for (int64_t j = 0; j < nk; j++) {
                    double acc = 0.0;
                    for (int64_t d = 0; d < p->d; d++)
                        acc += q[((i * p->b + s) * p->h + h) * p->d + d] *
                               k[((j * p->b + s) * p->hkv + hk) * p->d + d];
                    sc[j] = scale * acc;
                    m = sc[j] > m ? sc[j] : m;
                }
                for (int64_t j = 0; j < nk; j++)
                    l += exp(sc[j] - m);
                for (int64_t d = 0; d < p->dv; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < nk; j++)
                        acc += exp(sc[j] - m) / l * v[((j * p->b + s) * p->hkv + hk) * p->dv + d];
                    size_t e = (size_t)(((i * p->b + s) * p->h + h) * p->dv + d);
                    if (o != NULL)
                        o[e] = acc;
                    loss += acc * w[e];
                }
            }
    return loss;
}

static double *to_d(const float *x, size_t n)
{
    double *y = malloc((n + 1) * sizeof(double));
    for (size_t e = 0; e < n; e++)
        y[e] = x[e];
    return y;
}

/* Central difference of the double loss in element e of x (one of q, k, v). */
static double fd(const qs_sdpa_params *p, double scale, double *q, double *k, double *v,
                 const double *w, double *x, size_t e)
{
    const double eps = 1e-5;
    double x0 = x[e];
    x[e] = x0 + eps;
    double lp = ref_loss_d(p, scale, q, k, v, w, NULL);
    x[e] = x0 - eps;
    double lm = ref_loss_d(p, scale, q, k, v, w, NULL);
    x[e] = x0;
    return (lp - lm) / (2.0 * eps);
}

/* Tolerance of an FP32 gradient against the exact one: the FP32 evaluation of sums of at
 * most ~40 terms of magnitude <= ~2 has an error below ~1e-5; the central difference in
 * double (eps 1e-5) is within ~1e-9. */
static void expect_grad(const char *what, size_t e, float got, double want)
{
    double tol = 2e-5 + 1e-4 * fabs(want);
    ck_assert_msg(fabs((double)got - want) <= tol, "%s[%zu]: got %.9g (%a), want %.9g", what, e,
                  (double)got, (double)got, want);
}

/* ---------------------------------------------------------------- hand-checked rows */

/* [ATTN-FWD] [ATTN-LSE] [ATTN-SCALE]: one query, one key: o = v exactly, lse = the score. */
START_TEST(test_one_key_gives_v_and_lse_equal_to_the_scaled_score)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_sdpa_params p = sbhd(1, 1, 1, 1, 1, 2, 3, QS_ATTN_MASK_NONE);
    float q[2] = {1.0f, 2.0f}, k[2] = {3.0f, 4.0f}, v[3] = {0.5f, -7.0f, 3.25f}, o[3], lse[1];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    expect_bitwise("o", o, v, 3);
    float want = 11.0f * qs_rsqrtf(2.0f); /* the default scale 2^-1/2 */
    ck_assert_msg(qs_f32_bits(lse[0]) == qs_f32_bits(want), "lse %a want %a", (double)lse[0],
                  (double)want);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-SOFTMAX-ORDER] [ATTN-LSE]: scores 0 and 1 give p = (1, e)/(1 + e); shifting both by
 * 1000 changes nothing, because the maximum is subtracted before exp. */
START_TEST(test_two_keys_hand_example_and_shift_invariance)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_sdpa_params p = sbhd(1, 1, 2, 1, 1, 1, 1, QS_ATTN_MASK_NONE);
    p.scale = 1.0f;
    float q[1] = {1.0f}, k[2] = {0.0f, 1.0f}, v[2] = {0.0f, 1.0f}, o[1], lse[1];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    ck_assert_msg(fabs(o[0] - 0.7310585786) < 2e-7, "o %.9g", (double)o[0]);
    ck_assert_msg(fabs(lse[0] - 1.3132616875) < 2e-7, "lse %.9g", (double)lse[0]);
    float k2[2] = {1000.0f, 1001.0f}, o2[1], lse2[1];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k2, v, o2, lse2), QS_OK);
    expect_bitwise("o shifted", o2, o, 1);
    ck_assert_msg(fabs(lse2[0] - 1001.3132616875) < 1e-4, "lse %.9g", (double)lse2[0]);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-SCALE]: the default is qs_rsqrtf((float)d), and scale 0 selects it. */
START_TEST(test_default_scale_is_rsqrt_of_d)
{
    qs_sdpa_params p = sbhd(1, 1, 1, 1, 1, 64, 1, QS_ATTN_MASK_NONE);
    ck_assert_msg(qs_sdpa_scale(&p) == 0.125f, "%a", (double)qs_sdpa_scale(&p));
    p.d = 3;
    ck_assert_msg(qs_f32_bits(qs_sdpa_scale(&p)) == 0x3f13cd3a, "%a", (double)qs_sdpa_scale(&p));
    p.scale = 0.5f;
    ck_assert(qs_sdpa_scale(&p) == 0.5f);
}
END_TEST

/* [ATTN-SOFTMAX-ORDER] [ATTN-SCORE]: a 700-key row equals, bit for bit, the order written in
 * the spec (scores, max, sequential FP32 sum of exp in increasing j, divide, sum p v). */
START_TEST(test_long_row_follows_the_specified_order_bitwise)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { SK = 700, D = 4 };
    rng_state = 99;
    qs_sdpa_params p = sbhd(1, 1, SK, 1, 1, D, 1, QS_ATTN_MASK_NONE);
    float *q = rnd_buf(D, QS_FP32), *k = rnd_buf(SK * D, QS_FP32), *v = rnd_buf(SK, QS_FP32);
    for (int e = 0; e < D; e++)
        q[e] *= 8.0f;
    float o[1], lse[1], x[SK], prob[SK], scale = qs_rsqrtf((float)D);
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    for (int j = 0; j < SK; j++) {
        float acc = 0.0f;
        for (int d = 0; d < D; d++)
            acc = acc + q[d] * k[j * D + d];
        x[j] = scale * acc;
    }
    float want_lse = row_probs_spec(x, SK, prob), want_o = 0.0f;
    for (int j = 0; j < SK; j++)
        want_o = want_o + prob[j] * v[j];
    expect_bitwise("o", o, &want_o, 1);
    expect_bitwise("lse", lse, &want_lse, 1);
    free(q);
    free(k);
    free(v);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- against the double forward */

/* [ATTN-FWD] [ATTN-BWD] [ATTN-GQA] [ATTN-MASK-NONE] [ATTN-MASK-CAUSAL]: forward against the
 * double forward, and dq, dk, dv against central differences of it, with GQA, sq != sk. */
static void check_against_double(qs_attn_mask mask, int64_t sq, int64_t sk, int64_t h, int64_t hkv,
                                 uint64_t seed)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_sdpa_params p = sbhd(2, sq, sk, h, hkv, 3, 2, mask);
    size_t nq = (size_t)(sq * 2 * h * 3), nk = (size_t)(sk * 2 * hkv * 3);
    size_t nv = (size_t)(sk * 2 * hkv * 2), no = (size_t)(sq * 2 * h * 2);
    rng_state = seed;
    float *q = rnd_buf(nq, QS_FP32), *k = rnd_buf(nk, QS_FP32), *v = rnd_buf(nv, QS_FP32);
    float *w = rnd_buf(no, QS_FP32), *o = zbuf(no), *dq = zbuf(nq), *dk = zbuf(nk), *dv = zbuf(nv);
    for (size_t e = 0; e < nq; e++)
        q[e] *= 2.0f;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    double *qd = to_d(q, nq), *kd = to_d(k, nk), *vd = to_d(v, nv), *wd = to_d(w, no);
    double *od = malloc(no * sizeof(double)), scale = (double)qs_sdpa_scale(&p);
    ref_loss_d(&p, scale, qd, kd, vd, wd, od);
    for (size_t e = 0; e < no; e++)
        ck_assert_msg(fabs(o[e] - od[e]) <= 1e-6, "o[%zu] %.9g vs %.9g", e, (double)o[e], od[e]);
    for (size_t e = 0; e < nq; e++)
        expect_grad("dq", e, dq[e], fd(&p, scale, qd, kd, vd, wd, qd, e));
    for (size_t e = 0; e < nk; e++)
        expect_grad("dk", e, dk[e], fd(&p, scale, qd, kd, vd, wd, kd, e));
    for (size_t e = 0; e < nv; e++)
        expect_grad("dv", e, dv[e], fd(&p, scale, qd, kd, vd, wd, vd, e));
    free(q), free(k), free(v), free(w), free(o), free(dq), free(dk), free(dv);
    free(qd), free(kd), free(vd), free(wd), free(od);
    qs_ctx_free(ctx);
}

/* [ATTN-BWD] [ATTN-GQA] [ATTN-MASK-NONE]: b 2, sq 4, sk 5, h 4 over hkv 2. */
START_TEST(test_backward_matches_central_differences_no_mask_gqa)
{
    check_against_double(QS_ATTN_MASK_NONE, 4, 5, 4, 2, 1);
}
END_TEST

/* [ATTN-BWD] [ATTN-MASK-CAUSAL]: top-left causal with sq 3 < sk 5. */
START_TEST(test_backward_matches_central_differences_causal_sq_lt_sk)
{
    check_against_double(QS_ATTN_MASK_CAUSAL, 3, 5, 2, 2, 2);
}
END_TEST

/* [ATTN-BWD] [ATTN-MASK-CAUSAL] [ATTN-GQA]: sq 6 > sk 4, MQA (hkv 1). */
START_TEST(test_backward_matches_central_differences_causal_sq_gt_sk_mqa)
{
    check_against_double(QS_ATTN_MASK_CAUSAL, 6, 4, 3, 1, 3);
}
END_TEST

/* [ATTN-BWD-ORDER]: dv of each key is the FP32 sum of P_ij dO_i over the group's heads in
 * increasing h, then i increasing; recomputed here in that order, bit for bit. */
START_TEST(test_dv_sums_heads_then_queries_in_the_specified_order)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { SQ = 5, SK = 3, H = 2, D = 2 };
    qs_sdpa_params p = sbhd(1, SQ, SK, H, 1, D, 1, QS_ATTN_MASK_NONE);
    rng_state = 17;
    float *q = rnd_buf(SQ * H * D, QS_FP32), *k = rnd_buf(SK * D, QS_FP32);
    float *v = rnd_buf(SK, QS_FP32), *w = rnd_buf(SQ * H, QS_FP32), o[SQ * H];
    float dq[SQ * H * D], dk[SK * D], dv[SK], want[SK] = {0.0f, 0.0f, 0.0f};
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < SQ; i++) {
            float x[SK], prob[SK];
            for (int j = 0; j < SK; j++) {
                float acc = 0.0f;
                for (int d = 0; d < D; d++)
                    acc = acc + q[(i * H + h) * D + d] * k[j * D + d];
                x[j] = qs_rsqrtf((float)D) * acc;
            }
            row_probs_spec(x, SK, prob);
            for (int j = 0; j < SK; j++)
                want[j] = want[j] + prob[j] * w[i * H + h];
        }
    expect_bitwise("dv", dv, want, SK);
    free(q), free(k), free(v), free(w);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- layouts and heads */

/* Copies sbhd [s, b, h, d] to bshd [b, s, h, d]. */
static float *to_bshd(const float *x, int64_t s_n, int64_t b_n, int64_t hd)
{
    float *y = malloc((size_t)(s_n * b_n * hd + 1) * sizeof(float));
    for (int64_t s = 0; s < s_n; s++)
        for (int64_t b = 0; b < b_n; b++)
            memcpy(y + (b * s_n + s) * hd, x + (s * b_n + b) * hd, (size_t)hd * sizeof(float));
    return y;
}

/* [ATTN-LAYOUT-BSHD] [ATTN-LAYOUT-SBHD]: bshd gives the transposed sbhd results bitwise. */
START_TEST(test_bshd_equals_sbhd_transposed_bitwise)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { B = 3, SQ = 4, SK = 6, H = 2, HKV = 1, D = 3, DV = 2 };
    qs_sdpa_params p = sbhd(B, SQ, SK, H, HKV, D, DV, QS_ATTN_MASK_CAUSAL);
    rng_state = 5;
    size_t nq = SQ * B * H * D, nk = SK * B * HKV * D, nv = SK * B * HKV * DV, no = SQ * B * H * DV;
    float *q = rnd_buf(nq, QS_FP32), *k = rnd_buf(nk, QS_FP32), *v = rnd_buf(nv, QS_FP32);
    float *w = rnd_buf(no, QS_FP32), *o = zbuf(no), *lse = zbuf(SQ * B * H);
    float *dq = zbuf(nq), *dk = zbuf(nk), *dv = zbuf(nv);
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    float *qb = to_bshd(q, SQ, B, H * D), *kb = to_bshd(k, SK, B, HKV * D);
    float *vb = to_bshd(v, SK, B, HKV * DV), *wb = to_bshd(w, SQ, B, H * DV);
    float *ob = zbuf(no), *lseb = zbuf(SQ * B * H), *dqb = zbuf(nq), *dkb = zbuf(nk),
          *dvb = zbuf(nv);
    p.layout = QS_ATTN_BSHD;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, qb, kb, vb, ob, lseb), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, qb, kb, vb, ob, wb, dqb, dkb, dvb), QS_OK);
    float *t1 = to_bshd(o, SQ, B, H * DV), *t2 = to_bshd(lse, SQ, B, H);
    float *t3 = to_bshd(dq, SQ, B, H * D), *t4 = to_bshd(dk, SK, B, HKV * D);
    float *t5 = to_bshd(dv, SK, B, HKV * DV);
    expect_bitwise("o", ob, t1, no);
    expect_bitwise("lse", lseb, t2, SQ * B * H);
    expect_bitwise("dq", dqb, t3, nq);
    expect_bitwise("dk", dkb, t4, nk);
    expect_bitwise("dv", dvb, t5, nv);
    free(q), free(k), free(v), free(w), free(o), free(lse), free(dq), free(dk), free(dv);
    free(qb), free(kb), free(vb), free(wb), free(ob), free(lseb), free(dqb), free(dkb), free(dvb);
    free(t1), free(t2), free(t3), free(t4), free(t5);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-LAYOUT-THD] [ATTN-MASK-CAUSAL] [ATTN-LAYOUT-THD-PADDED]: packed ragged sequences
 * (q lengths 3, 1, 4; kv lengths 5, 2, 4) give, bitwise, what each sequence gives alone
 * in sbhd with b = 1, with the causal mask top-left aligned in each; with padded slots the
 * valid tokens are unchanged and the padding stays 0 (lse -inf). */
static void check_thd(int padded)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { H = 2, HKV = 1, D = 3, DV = 2, NS = 3 };
    int32_t cq[NS + 1] = {0, 3, 4, 8}, ck[NS + 1] = {0, 5, 7, 11};
    int32_t cqp[NS + 1] = {0, 4, 6, 11}, ckp[NS + 1] = {0, 6, 8, 12};
    int64_t tq = padded ? 11 : 8, tk = padded ? 12 : 11;
    qs_sdpa_params p = sbhd(NS, tq, tk, H, HKV, D, DV, QS_ATTN_MASK_CAUSAL);
    p.layout = QS_ATTN_THD;
    p.cu_seqlens_q = cq;
    p.cu_seqlens_kv = ck;
    p.cu_seqlens_q_padded = padded ? cqp : NULL;
    p.cu_seqlens_kv_padded = padded ? ckp : NULL;
    rng_state = 11;
    size_t nq = (size_t)tq * H * D, nk = (size_t)tk * HKV * D, nv = (size_t)tk * HKV * DV;
    size_t no = (size_t)tq * H * DV;
    float *q = rnd_buf(nq, QS_FP32), *k = rnd_buf(nk, QS_FP32), *v = rnd_buf(nv, QS_FP32);
    float *w = rnd_buf(no, QS_FP32), *o = zbuf(no), *lse = zbuf((size_t)tq * H);
    float *dq = zbuf(nq), *dk = zbuf(nk), *dv = zbuf(nv);
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    for (int s = 0; s < NS; s++) {
        int64_t lq = cq[s + 1] - cq[s], lk = ck[s + 1] - ck[s];
        int64_t oq = padded ? cqp[s] : cq[s], ok = padded ? ckp[s] : ck[s];
        qs_sdpa_params ps = sbhd(1, lq, lk, H, HKV, D, DV, QS_ATTN_MASK_CAUSAL);
        float o1[64], lse1[64], dq1[64], dk1[64], dv1[64];
        ck_assert_int_eq(
            qs_sdpa_fwd(ctx, &ps, q + oq * H * D, k + ok * HKV * D, v + ok * HKV * DV, o1, lse1),
            QS_OK);
        ck_assert_int_eq(qs_sdpa_bwd(ctx, &ps, q + oq * H * D, k + ok * HKV * D, v + ok * HKV * DV,
                                     o1, w + oq * H * DV, dq1, dk1, dv1),
                         QS_OK);
        expect_bitwise("o", o + oq * H * DV, o1, (size_t)(lq * H * DV));
        expect_bitwise("lse", lse + oq * H, lse1, (size_t)(lq * H));
        expect_bitwise("dq", dq + oq * H * D, dq1, (size_t)(lq * H * D));
        expect_bitwise("dk", dk + ok * HKV * D, dk1, (size_t)(lk * HKV * D));
        expect_bitwise("dv", dv + ok * HKV * DV, dv1, (size_t)(lk * HKV * DV));
    }
    if (padded) { /* q padding token 3 (slot of sequence 0), kv padding token 5 */
        for (int e = 0; e < H * DV; e++)
            ck_assert(o[3 * H * DV + e] == 0.0f);
        ck_assert(lse[3 * H] == -INFINITY);
        for (int e = 0; e < HKV * D; e++)
            ck_assert(dk[5 * HKV * D + e] == 0.0f);
    }
    free(q), free(k), free(v), free(w), free(o), free(lse), free(dq), free(dk), free(dv);
    qs_ctx_free(ctx);
}

/* [ATTN-LAYOUT-THD] [ATTN-MASK-CAUSAL]: ragged sequences, no padding. */
START_TEST(test_thd_equals_each_sequence_alone_bitwise)
{
    check_thd(0);
}
END_TEST

/* [ATTN-LAYOUT-THD-PADDED]: the same sequences in padded slots. */
START_TEST(test_thd_padded_keeps_valid_tokens_and_zero_padding)
{
    check_thd(1);
}
END_TEST

/* [ATTN-MASK-CAUSAL]: top-left alignment. With sq 3 < sk 5, query 0 sees only key 0 (o = v0
 * exactly) and no query sees keys 3, 4; with sq 5 > sk 3, queries 2..4 see all keys and
 * equal the unmasked rows bitwise. */
START_TEST(test_causal_mask_is_top_left_aligned)
{
    qs_ctx *ctx = qs_ctx_new();
    rng_state = 23;
    qs_sdpa_params p = sbhd(1, 3, 5, 1, 1, 2, 2, QS_ATTN_MASK_CAUSAL);
    float *q = rnd_buf(10, QS_FP32), *k = rnd_buf(10, QS_FP32), *v = rnd_buf(10, QS_FP32);
    float o[10], o2[10], lse[10];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    expect_bitwise("o row 0", o, v, 2);
    ck_assert(lse[0] == qs_rsqrtf(2.0f) * (q[0] * k[0] + q[1] * k[1]));
    for (int e = 6; e < 10; e++)
        v[e] += 100.0f, k[e] -= 3.0f;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o2, lse), QS_OK);
    expect_bitwise("o unchanged by keys 3, 4", o2, o, 6);
    qs_sdpa_params pl = sbhd(1, 5, 3, 1, 1, 2, 2, QS_ATTN_MASK_CAUSAL);
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &pl, q, k, v, o, lse), QS_OK);
    pl.mask = QS_ATTN_MASK_NONE;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &pl, q, k, v, o2, lse), QS_OK);
    expect_bitwise("rows 2..4", o + 4, o2 + 4, 6);
    ck_assert(qs_f32_bits(o[0]) != qs_f32_bits(o2[0]));
    free(q), free(k), free(v);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-GQA]: h = 4 query heads over hkv = 2 kv heads (head h uses kv head h / 2) equal
 * the same call with K, V repeated to 4 heads: o, lse, dq bitwise; dk, dv are the sums of
 * the repeated heads' gradients (within FP32 rounding of the different summation). */
START_TEST(test_gqa_equals_explicitly_repeated_heads)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { B = 2, SQ = 3, SK = 4, H = 4, HKV = 2, D = 3, DV = 2 };
    qs_sdpa_params p = sbhd(B, SQ, SK, H, HKV, D, DV, QS_ATTN_MASK_NONE);
    rng_state = 31;
    size_t nq = SQ * B * H * D, nk = SK * B * HKV * D, nv = SK * B * HKV * DV, no = SQ * B * H * DV;
    float *q = rnd_buf(nq, QS_FP32), *k = rnd_buf(nk, QS_FP32), *v = rnd_buf(nv, QS_FP32);
    float *w = rnd_buf(no, QS_FP32), *o = zbuf(no), *lse = zbuf(no), *dq = zbuf(nq);
    float *dk = zbuf(nk), *dv = zbuf(nv), *kr = zbuf(nk * 2), *vr = zbuf(nv * 2);
    float *o2 = zbuf(no), *lse2 = zbuf(no), *dq2 = zbuf(nq), *dk2 = zbuf(nk * 2),
          *dv2 = zbuf(nv * 2);
    for (int t = 0; t < SK * B; t++)
        for (int h = 0; h < H; h++) {
            memcpy(kr + (t * H + h) * D, k + (t * HKV + h / 2) * D, D * sizeof(float));
            memcpy(vr + (t * H + h) * DV, v + (t * HKV + h / 2) * DV, DV * sizeof(float));
        }
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    qs_sdpa_params pr = p;
    pr.hkv = H;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &pr, q, kr, vr, o2, lse2), QS_OK);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &pr, q, kr, vr, o2, w, dq2, dk2, dv2), QS_OK);
    expect_bitwise("o", o, o2, no);
    expect_bitwise("lse", lse, lse2, SQ * B * H);
    expect_bitwise("dq", dq, dq2, nq);
    for (int t = 0; t < SK * B; t++)
        for (int hk = 0; hk < HKV; hk++) {
            for (int d = 0; d < D; d++) {
                float s = dk2[(t * H + 2 * hk) * D + d] + dk2[(t * H + 2 * hk + 1) * D + d];
                ck_assert_msg(fabsf(dk[(t * HKV + hk) * D + d] - s) <= 1e-6f, "dk %d %d %d", t, hk,
                              d);
            }
            for (int d = 0; d < DV; d++) {
                float s = dv2[(t * H + 2 * hk) * DV + d] + dv2[(t * H + 2 * hk + 1) * DV + d];
                ck_assert_msg(fabsf(dv[(t * HKV + hk) * DV + d] - s) <= 1e-6f, "dv %d %d %d", t, hk,
                              d);
            }
        }
    free(q), free(k), free(v), free(w), free(o), free(lse), free(dq), free(dk), free(dv);
    free(kr), free(vr), free(o2), free(lse2), free(dq2), free(dk2), free(dv2);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-EMPTY-ROW]: a sequence with no keys gives o = 0, lse = -inf and zero gradients. */
START_TEST(test_sequence_without_keys_gives_zero_output_and_minus_inf_lse)
{
    qs_ctx *ctx = qs_ctx_new();
    int32_t cq[3] = {0, 2, 3}, ck[3] = {0, 0, 2};
    qs_sdpa_params p = sbhd(2, 3, 2, 1, 1, 2, 1, QS_ATTN_MASK_NONE);
    p.layout = QS_ATTN_THD;
    p.cu_seqlens_q = cq;
    p.cu_seqlens_kv = ck;
    rng_state = 3;
    float *q = rnd_buf(6, QS_FP32), *k = rnd_buf(4, QS_FP32), *v = rnd_buf(2, QS_FP32);
    float o[3], lse[3], w[3] = {1.0f, 1.0f, 1.0f}, dq[6], dk[4], dv[2];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, lse), QS_OK);
    ck_assert(o[0] == 0.0f && o[1] == 0.0f && lse[0] == -INFINITY && lse[1] == -INFINITY);
    ck_assert(lse[2] > -INFINITY);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o, w, dq, dk, dv), QS_OK);
    for (int e = 0; e < 4; e++)
        ck_assert(dq[e] == 0.0f);
    ck_assert(dv[0] != 0.0f);
    free(q), free(k), free(v);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-DTYPE]: with BF16 inputs the only rounding is of o (and of dq, dk, dv) to BF16 at the
 * end: each equals qs_round_bf16 of the FP32-mode result on the same values; lse is FP32. */
START_TEST(test_bf16_rounds_only_the_outputs)
{
    qs_ctx *ctx = qs_ctx_new();
    enum { SQ = 3, SK = 4, H = 2, D = 4, DV = 3 };
    qs_sdpa_params p = sbhd(1, SQ, SK, H, H, D, DV, QS_ATTN_MASK_CAUSAL);
    rng_state = 41;
    float *q = rnd_buf(SQ * H * D, QS_BF16), *k = rnd_buf(SK * H * D, QS_BF16);
    float *v = rnd_buf(SK * H * DV, QS_BF16), *w = rnd_buf(SQ * H * DV, QS_BF16);
    float o32[SQ * H * DV], l32[SQ * H], o16[SQ * H * DV], l16[SQ * H], r[SQ * H * DV];
    float dq32[SQ * H * D], dq16[SQ * H * D], dk32[SK * H * D], dk16[SK * H * D];
    float dv32[SK * H * DV], dv16[SK * H * DV];
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o32, l32), QS_OK);
    p.dtype = QS_BF16;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o16, l16), QS_OK);
    for (int e = 0; e < SQ * H * DV; e++)
        r[e] = qs_round_bf16(o32[e]);
    expect_bitwise("o", o16, r, SQ * H * DV);
    expect_bitwise("lse", l16, l32, SQ * H);
    int differs = 0;
    for (int e = 0; e < SQ * H * DV; e++)
        differs |= qs_f32_bits(o16[e]) != qs_f32_bits(o32[e]);
    ck_assert(differs);
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o16, w, dq16, dk16, dv16), QS_OK);
    p.dtype = QS_FP32;
    ck_assert_int_eq(qs_sdpa_bwd(ctx, &p, q, k, v, o16, w, dq32, dk32, dv32), QS_OK);
    for (int e = 0; e < SQ * H * D; e++)
        ck_assert(qs_f32_bits(dq16[e]) == qs_f32_bits(qs_round_bf16(dq32[e])));
    for (int e = 0; e < SK * H * D; e++)
        ck_assert(qs_f32_bits(dk16[e]) == qs_f32_bits(qs_round_bf16(dk32[e])));
    for (int e = 0; e < SK * H * DV; e++)
        ck_assert(qs_f32_bits(dv16[e]) == qs_f32_bits(qs_round_bf16(dv32[e])));
    free(q), free(k), free(v), free(w);
    qs_ctx_free(ctx);
}
END_TEST

/* [ATTN-SHAPES] [ATTN-DTYPE] [ATTN-LAYOUT-THD]: bad arguments are reported, naming them. */
START_TEST(test_bad_arguments_are_rejected_with_a_message)
{
    qs_ctx *ctx = qs_ctx_new();
    float q[8] = {0}, k[8] = {0}, v[8] = {0}, o[8];
    qs_sdpa_params p = sbhd(1, 1, 1, 3, 2, 2, 2, QS_ATTN_MASK_NONE);
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "hkv"));
    p = sbhd(1, 1, 1, 1, 1, 2, 2, QS_ATTN_MASK_NONE);
    p.dtype = QS_E4M3;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_DTYPE);
    p.dtype = QS_BF16;
    q[1] = 1.0f + 0x1p-10f; /* not a BF16 value */
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'q'[1]"));
    p.dtype = QS_FP32;
    p.scale = -1.0f;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_INVALID_ARG);
    p.scale = 0.0f;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, NULL, v, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'k'"));
    int32_t cu[2] = {0, 2};
    p.layout = QS_ATTN_THD;
    p.cu_seqlens_q = cu;
    p.cu_seqlens_kv = cu;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "cu_seqlens_q"));
    p.layout = (qs_attn_layout)7;
    ck_assert_int_eq(qs_sdpa_fwd(ctx, &p, q, k, v, o, NULL), QS_ERR_INVALID_ARG);
    qs_ctx_free(ctx);
}
END_TEST

static Suite *sdpa_suite(void)
{
    Suite *s = suite_create("sdpa");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_one_key_gives_v_and_lse_equal_to_the_scaled_score);
    tcase_add_test(tc, test_two_keys_hand_example_and_shift_invariance);
    tcase_add_test(tc, test_default_scale_is_rsqrt_of_d);
    tcase_add_test(tc, test_long_row_follows_the_specified_order_bitwise);
    tcase_add_test(tc, test_backward_matches_central_differences_no_mask_gqa);
    tcase_add_test(tc, test_backward_matches_central_differences_causal_sq_lt_sk);
    tcase_add_test(tc, test_backward_matches_central_differences_causal_sq_gt_sk_mqa);
    tcase_add_test(tc, test_dv_sums_heads_then_queries_in_the_specified_order);
    tcase_add_test(tc, test_bshd_equals_sbhd_transposed_bitwise);
    tcase_add_test(tc, test_thd_equals_each_sequence_alone_bitwise);
    tcase_add_test(tc, test_thd_padded_keeps_valid_tokens_and_zero_padding);
    tcase_add_test(tc, test_causal_mask_is_top_left_aligned);
    tcase_add_test(tc, test_gqa_equals_explicitly_repeated_heads);
    tcase_add_test(tc, test_sequence_without_keys_gives_zero_output_and_minus_inf_lse);
    tcase_add_test(tc, test_bf16_rounds_only_the_outputs);
    tcase_add_test(tc, test_bad_arguments_are_rejected_with_a_message);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(sdpa_suite());
}
