/* test_mla.c: the MLA block of spec/attention.md [MLA-*]: YaRN bounds and the DeepSeek-V3
 * softmax scale, RoPE on de-interleaved pairs, the plain block against a double-precision
 * MLA written here, absorbed against plain (FP32 and BF16), split against combined K/V
 * up-projections, thd against per-sequence sbhd, and the norm on c_kv only; the backward
 * [MLA-BWD] against finite differences of a double MLA, absorbed against plain, thd; the
 * block's linears under each recipe against a hand-composed sequence of quantized linears,
 * and in high precision against qs_linear_hp_*; islands, calibration and bad quantizers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/linear.h"
#include "qspec/mathf.h"
#include "qstest.h"

/* ---------------------------------------------------------------- helpers */

static float *rbuf(size_t n, float amp, qs_dtype dt)
{
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++) {
        x[e] = qst_rnd(-amp, amp);
        if (dt == QS_BF16)
            x[e] = qs_round_bf16(x[e]);
    }
    return x;
}

/* A small MLA: hidden 8, 2 heads, rq 6 (or 0), rkv 5, dn 3, dr 4, dv 2. */
static qs_mla_config small_cfg(int64_t rq)
{
    qs_mla_config c;
    memset(&c, 0, sizeof c);
    c.hidden = 8;
    c.heads = 2;
    c.q_lora_rank = rq;
    c.kv_lora_rank = 5;
    c.dn = 3;
    c.dr = 4;
    c.dv = 2;
    c.norm_eps = 1e-6f;
    c.rope_base = 10000.0f;
    c.yarn_factor = 1.0f;
    return c;
}

/* Random weights for c (values of dt), each matrix scaled by about 1/sqrt(in). */
typedef struct mla_w {
    float *w_dq, *q_norm, *w_uq, *w_q, *w_dkv, *kv_norm, *w_ukv, *w_o;
    qs_mla_weights w;
} mla_w;

static void weights_init(mla_w *m, const qs_mla_config *c, qs_dtype dt, uint64_t seed)
{
    int64_t rq = c->q_lora_rank > 0 ? c->q_lora_rank : 1, n = c->heads, rkv = c->kv_lora_rank;
    qst_rng_seed(seed);
    m->w_dq = rbuf((size_t)(rq * c->hidden), 0.6f, dt);
    m->q_norm = rbuf((size_t)rq, 0.5f, QS_FP32);
    for (int64_t e = 0; e < rq; e++)
        m->q_norm[e] += 1.0f;
    m->w_uq = rbuf((size_t)(n * (c->dn + c->dr) * rq), 0.7f, dt);
    m->w_q = rbuf((size_t)(n * (c->dn + c->dr) * c->hidden), 0.6f, dt);
    m->w_dkv = rbuf((size_t)((rkv + c->dr) * c->hidden), 0.6f, dt);
    m->kv_norm = rbuf((size_t)rkv, 0.5f, QS_FP32);
    for (int64_t e = 0; e < rkv; e++)
        m->kv_norm[e] += 1.0f;
    m->w_ukv = rbuf((size_t)(n * (c->dn + c->dv) * rkv), 0.7f, dt);
    m->w_o = rbuf((size_t)(c->hidden * n * c->dv), 0.7f, dt);
    memset(&m->w, 0, sizeof m->w);
    m->w.w_dq = m->w_dq;
    m->w.q_norm = m->q_norm;
    m->w.w_uq = m->w_uq;
    m->w.w_q = m->w_q;
    m->w.w_dkv = m->w_dkv;
    m->w.kv_norm = m->kv_norm;
    m->w.w_ukv = m->w_ukv;
    m->w.w_o = m->w_o;
}

static void weights_free(mla_w *m)
{
    free(m->w_dq), free(m->q_norm), free(m->w_uq), free(m->w_q), free(m->w_dkv);
    free(m->kv_norm), free(m->w_ukv), free(m->w_o);
}

static qs_mla_shape sbhd_shape(int64_t b, int64_t s, qs_dtype dt)
{
    qs_mla_shape sh = {QS_ATTN_SBHD, QS_ATTN_MASK_CAUSAL, b, s, NULL, dt};
    return sh;
}

/* ---------------------------------------------------------------- a double MLA */

/* y[o] = sum_i x[i] w[o, i] in double. */
static void lin_d(const double *x, const float *w, int64_t in, int64_t out, double *y)
{
    for (int64_t o = 0; o < out; o++) {
        double acc = 0.0;
        for (int64_t i = 0; i < in; i++)
            acc += x[i] * w[o * in + i];
        y[o] = acc;
    }
}

static void rms_d(double *x, const float *w, int64_t n, double eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * r * w[i];
}

/* RoPE without YaRN in double: pairs (x[2j], x[2j+1]) rotated by pos * base^(-2j/dr),
 * output de-interleaved. */
static void rope_d(const double *x, double *y, int64_t dr, double base, int64_t pos)
{
    for (int64_t j = 0; j < dr / 2; j++) {
        double f = (double)pos * pow(base, -2.0 * (double)j / (double)dr);
        double a = x[2 * j], b = x[2 * j + 1];
        y[j] = a * cos(f) - b * sin(f);
        y[dr / 2 + j] = b * cos(f) + a * sin(f);
    }
}

/* The plain MLA block in double, sbhd with causal mask and scale 1/sqrt(dn + dr) (no YaRN),
 * written from the math; x [s, b, hidden] -> out. Token r of the array is position r / b
 * of sequence r % b. */
static void mla_d(const qs_mla_config *c, const mla_w *m, int64_t b, int64_t s, const float *x,
                  double *out)
{
    enum { MT = 16, MH = 2, DQ = 7 };
    int64_t T = b * s, n = c->heads, dq = c->dn + c->dr, rkv = c->kv_lora_rank;
    double Q[MT][MH][DQ], K[MT][MH][DQ], V[MT][MH][4], xd[16], t1[64], t2[64];
    for (int64_t r = 0; r < T; r++) {
        for (int64_t i = 0; i < c->hidden; i++)
            xd[i] = x[r * c->hidden + i];
        if (c->q_lora_rank > 0) {
            lin_d(xd, m->w_dq, c->hidden, c->q_lora_rank, t1);
            rms_d(t1, m->q_norm, c->q_lora_rank, c->norm_eps);
            lin_d(t1, m->w_uq, c->q_lora_rank, n * dq, t2);
        } else {
            lin_d(xd, m->w_q, c->hidden, n * dq, t2);
        }
        for (int64_t h = 0; h < n; h++) {
            memcpy(Q[r][h], t2 + h * dq, (size_t)c->dn * sizeof(double));
            rope_d(t2 + h * dq + c->dn, Q[r][h] + c->dn, c->dr, c->rope_base, r / b);
        }
        lin_d(xd, m->w_dkv, c->hidden, rkv + c->dr, t1);
        double kpe[8];
        rope_d(t1 + rkv, kpe, c->dr, c->rope_base, r / b);
        rms_d(t1, m->kv_norm, rkv, c->norm_eps);
        lin_d(t1, m->w_ukv, rkv, n * (c->dn + c->dv), t2);
        for (int64_t h = 0; h < n; h++) {
            memcpy(K[r][h], t2 + h * (c->dn + c->dv), (size_t)c->dn * sizeof(double));
            memcpy(K[r][h] + c->dn, kpe, (size_t)c->dr * sizeof(double));
            memcpy(V[r][h], t2 + h * (c->dn + c->dv) + c->dn, (size_t)c->dv * sizeof(double));
        }
    }
    double scale = 1.0 / sqrt((double)dq), att[16];
    for (int64_t r = 0; r < T; r++) {
        double o[8] = {0};
        for (int64_t h = 0; h < n; h++) {
            double sc[16], mx = -INFINITY, l = 0.0;
            int64_t i = r / b, seq = r % b;
            for (int64_t j = 0; j <= i; j++) {
                double acc = 0.0;
                for (int64_t d = 0; d < dq; d++)
                    acc += Q[r][h][d] * K[j * b + seq][h][d];
                sc[j] = scale * acc;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = 0; j <= i; j++)
                l += exp(sc[j] - mx);
            for (int64_t j = 0; j <= i; j++)
                for (int64_t e = 0; e < c->dv; e++)
                    o[h * c->dv + e] += exp(sc[j] - mx) / l * V[j * b + seq][h][e];
        }
        lin_d(o, m->w_o, n * c->dv, c->hidden, att);
        memcpy(out + r * c->hidden, att, (size_t)c->hidden * sizeof(double));
    }
}

/* [MLA-FWD] [MLA-Q-PATH] [MLA-KV-PATH] [MLA-NORM] [MLA-LINEAR] [MLA-ROPE] [MLA-ATTN]
 * [MLA-SHAPES]: the FP32 block against the double MLA; FP32 rounding of sums of <= 8
 * terms of magnitude ~1 through five stages stays below 1e-5. */
static void check_plain_against_double(int64_t rq)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(rq);
    mla_w m;
    weights_init(&m, &c, QS_FP32, 100 + (uint64_t)rq);
    enum { B = 2, S = 5 };
    qs_mla_shape sh = sbhd_shape(B, S, QS_FP32);
    float *x = rbuf(B * S * 8, 1.0f, QS_FP32), out[B * S * 8];
    double want[B * S * 8];
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_OK);
    mla_d(&c, &m, B, S, x, want);
    for (int e = 0; e < B * S * 8; e++)
        ck_assert_msg(fabs(out[e] - want[e]) <= 1e-5 + 1e-5 * fabs(want[e]), "out[%d] %.9g vs %.9g",
                      e, (double)out[e], want[e]);
    free(x);
    weights_free(&m);
    qs_ctx_free(ctx);
}

/* [MLA-FWD] [MLA-Q-PATH]: q down-proj, RMSNorm, up-proj. */
START_TEST(test_plain_block_matches_double_reference_with_q_lora)
{
    check_plain_against_double(6);
}
END_TEST

/* [MLA-FWD] [MLA-Q-PATH]: a single q projection (rq 0). */
START_TEST(test_plain_block_matches_double_reference_with_single_q_proj)
{
    check_plain_against_double(0);
}
END_TEST

/* ---------------------------------------------------------------- YaRN and RoPE */

/* [MLA-YARN] [MLA-SCALE]: DeepSeek-V3 (dr 64, base 10000, f 40, L0 4096, beta 32/1,
 * mscale = mscale_all_dim = 1) has ramp bounds low 10, high 23 and softmax scale
 * (0.1 ln 40 + 1)^2 / sqrt(192) = 0.1352338; below low the frequency is base^(-2j/dr),
 * above high it is that divided by f. Without YaRN the scale is rsqrt(dn + dr). The
 * frequencies are FP32 exp(e ln base) with |e ln base| <= 9.3, whose argument rounding
 * alone gives up to ~6e-7 relative: checked within 2e-6 of the double value. */
START_TEST(test_yarn_deepseek_v3_bounds_frequencies_and_scale)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    c.dn = 128;
    c.dr = 64;
    c.yarn_factor = 40.0f;
    c.yarn_mscale = c.yarn_mscale_all_dim = 1.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    c.yarn_original_max_pos = 4096;
    float inv[32], lo, hi;
    ck_assert_int_eq(qs_mla_rope_inv_freq(ctx, &c, inv, &lo, &hi), QS_OK);
    ck_assert_msg(lo == 10.0f && hi == 23.0f, "low %g high %g", (double)lo, (double)hi);
    double want_scale = pow(0.1 * log(40.0) + 1.0, 2.0) / sqrt(192.0);
    ck_assert_msg(fabs(qs_mla_softmax_scale(&c) - want_scale) < 1e-7, "scale %.9g",
                  (double)qs_mla_softmax_scale(&c));
    ck_assert_msg(fabs(qs_mla_softmax_scale(&c) - 0.1352338) < 1e-6, "scale");
    for (int j = 0; j < 32; j++) {
        double extra = pow(10000.0, -2.0 * j / 64.0), ramp = (j - 10.0) / 13.0;
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        double want = extra / 40.0 * ramp + extra * (1.0 - ramp);
        ck_assert_msg(fabs(inv[j] - want) <= 2e-6 * want, "inv[%d] %.9g vs %.9g", j, (double)inv[j],
                      want);
    }
    c.yarn_factor = 1.0f;
    ck_assert(qs_mla_softmax_scale(&c) == qs_rsqrtf(192.0f));
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-ROPE]: at position 0 RoPE only de-interleaves, y = (x0, x2 | x1, x3); in BF16 the
 * cos/sin are rounded to BF16 and each product and sum is rounded to BF16 (recomputed
 * here at those points, bitwise); scores of rotated vectors depend only on the position
 * difference. */
START_TEST(test_rope_deinterleaves_and_rotates_pairs)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, y[4], want0[4] = {1.0f, 3.0f, 2.0f, 4.0f};
    ck_assert_int_eq(qs_mla_rope(ctx, &c, QS_FP32, 0, x, y), QS_OK);
    for (int e = 0; e < 4; e++)
        ck_assert(y[e] == want0[e]);
    float xb[4] = {0.5f, -1.25f, 0.75f, 2.0f};
    ck_assert_int_eq(qs_mla_rope(ctx, &c, QS_BF16, 7, xb, y), QS_OK);
    for (int j = 0; j < 2; j++) {
        float f = 7.0f * (1.0f / qs_expf(((float)(2 * j) / 4.0f) * qs_logf(10000.0f)));
        float cs = qs_round_bf16(qs_cosf(f)), sn = qs_round_bf16(qs_sinf(f));
        float a = xb[2 * j], b = xb[2 * j + 1];
        float y0 = qs_round_bf16(qs_round_bf16(a * cs) + qs_round_bf16(-b * sn));
        float y1 = qs_round_bf16(qs_round_bf16(b * cs) + qs_round_bf16(a * sn));
        ck_assert_msg(y[j] == y0 && y[2 + j] == y1, "pair %d: %a %a vs %a %a", j, (double)y[j],
                      (double)y[2 + j], (double)y0, (double)y1);
    }
    float q[4] = {0.3f, -0.7f, 1.1f, 0.2f}, k[4] = {-0.4f, 0.9f, 0.5f, -1.3f}, qr[4], kr[4];
    double dots[2];
    for (int t = 0; t < 2; t++) {
        ck_assert_int_eq(qs_mla_rope(ctx, &c, QS_FP32, 5 + 10 * t, q, qr), QS_OK);
        ck_assert_int_eq(qs_mla_rope(ctx, &c, QS_FP32, 2 + 10 * t, k, kr), QS_OK);
        dots[t] = qr[0] * kr[0] + qr[1] * kr[1] + qr[2] * kr[2] + qr[3] * kr[3];
    }
    ck_assert_msg(fabs(dots[0] - dots[1]) < 1e-5, "%.9g vs %.9g", dots[0], dots[1]);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- absorbed vs plain */

/* [MLA-ABSORBED]: absorbed and plain MLA are the same function (q_nope . (W_UK c) =
 * (W_UK^T q_nope) . c and sum_t p_t W_UV c_t = W_UV sum_t p_t c_t), so in FP32 they agree
 * within FP32 rounding of the reassociated sums (1e-5); in BF16 the rounding points differ
 * (q_abs and the latent output instead of k_nope and v), so they agree only to BF16
 * precision: cosine > 0.9999 (as Megatron's test_absorbed_mla) and |diff| <= 5e-3 +
 * 2^-6 |plain| (Megatron's atol; the outputs are themselves BF16, so two values on either
 * side of a rounding boundary differ by one BF16 ulp, 2^-7 relative, which its rtol 5e-3
 * does not allow at these few-element sums), and they are not bitwise equal. */
static void check_absorbed(qs_dtype dt, qs_attn_mask mask, float yarn)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    c.yarn_factor = yarn;
    c.yarn_mscale = c.yarn_mscale_all_dim = 1.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    c.yarn_original_max_pos = 8;
    mla_w m;
    weights_init(&m, &c, dt, 200);
    enum { B = 2, S = 6, N = B * S * 8 };
    qs_mla_shape sh = sbhd_shape(B, S, dt);
    sh.mask = mask;
    float *x = rbuf(N, 1.0f, dt), plain[N], absd[N];
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, plain), QS_OK);
    c.absorbed = 1;
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, absd), QS_OK);
    double sxy = 0, sxx = 0, syy = 0;
    int same = 1;
    for (int e = 0; e < N; e++) {
        sxy += (double)plain[e] * absd[e];
        sxx += (double)plain[e] * plain[e];
        syy += (double)absd[e] * absd[e];
        same &= qs_f32_bits(plain[e]) == qs_f32_bits(absd[e]);
        double tol = dt == QS_FP32 ? 1e-5 + 1e-5 * fabs(plain[e]) : 5e-3 + 0x1p-6 * fabs(plain[e]);
        ck_assert_msg(fabs(plain[e] - absd[e]) <= tol, "out[%d]: plain %.9g absorbed %.9g", e,
                      (double)plain[e], (double)absd[e]);
    }
    ck_assert_msg(sxy / sqrt(sxx * syy) > 0.9999, "cosine %.9g", sxy / sqrt(sxx * syy));
    if (dt == QS_BF16)
        ck_assert(!same);
    free(x);
    weights_free(&m);
    qs_ctx_free(ctx);
}

/* [MLA-ABSORBED] [MLA-YARN] [MLA-SCALE]: FP32, causal, YaRN f 4. */
START_TEST(test_absorbed_equals_plain_in_fp32_causal_with_yarn)
{
    check_absorbed(QS_FP32, QS_ATTN_MASK_CAUSAL, 4.0f);
}
END_TEST

/* [MLA-ABSORBED]: FP32, no mask, plain RoPE. */
START_TEST(test_absorbed_equals_plain_in_fp32_unmasked)
{
    check_absorbed(QS_FP32, QS_ATTN_MASK_NONE, 1.0f);
}
END_TEST

/* [MLA-ABSORBED] [MLA-LINEAR]: BF16 rounding points differ. */
START_TEST(test_absorbed_close_to_plain_in_bf16)
{
    check_absorbed(QS_BF16, QS_ATTN_MASK_CAUSAL, 4.0f);
}
END_TEST

/* ---------------------------------------------------------------- variants */

/* [MLA-UP-PROJ] [MLA-SHAPES] [MLA-SPLIT-KV]: in high precision split W_UK / W_UV equal the
 * combined [K_h; V_h] rows bitwise in the forward, for the plain and the absorbed forms. */
START_TEST(test_split_kv_up_projection_equals_combined_bitwise)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_BF16, 300);
    float wuk[2 * 3 * 5], wuv[2 * 2 * 5];
    for (int h = 0; h < 2; h++) {
        memcpy(wuk + h * 15, m.w_ukv + h * 25, 15 * sizeof(float));
        memcpy(wuv + h * 10, m.w_ukv + h * 25 + 15, 10 * sizeof(float));
    }
    qs_mla_shape sh = sbhd_shape(1, 4, QS_BF16);
    float *x = rbuf(32, 1.0f, QS_BF16), a[32], b[32];
    for (int ab = 0; ab < 2; ab++) {
        c.absorbed = ab;
        qs_mla_weights ws = m.w;
        ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, a), QS_OK);
        ws.w_ukv = NULL;
        ws.w_uk = wuk;
        ws.w_uv = wuv;
        ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &ws, x, b), QS_OK);
        for (int e = 0; e < 32; e++)
            ck_assert_msg(qs_f32_bits(a[e]) == qs_f32_bits(b[e]), "absorbed %d out[%d]", ab, e);
    }
    free(x);
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-ROPE] [MLA-ATTN]: thd with sequences of 3 and 5 tokens equals each sequence alone in
 * sbhd bitwise: RoPE positions restart at 0 in each sequence, attention stays inside it. */
START_TEST(test_thd_equals_each_sequence_alone_bitwise)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_BF16, 400);
    int32_t cu[3] = {0, 3, 8};
    qs_mla_shape sh = {QS_ATTN_THD, QS_ATTN_MASK_CAUSAL, 2, 8, cu, QS_BF16};
    float *x = rbuf(64, 1.0f, QS_BF16), out[64], one[64];
    for (int ab = 0; ab < 2; ab++) {
        c.absorbed = ab;
        ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_OK);
        for (int n = 0; n < 2; n++) {
            qs_mla_shape s1 = sbhd_shape(1, cu[n + 1] - cu[n], QS_BF16);
            ck_assert_int_eq(qs_mla_fwd(ctx, &c, &s1, &m.w, x + cu[n] * 8, one), QS_OK);
            for (int e = 0; e < (cu[n + 1] - cu[n]) * 8; e++)
                ck_assert(qs_f32_bits(out[cu[n] * 8 + e]) == qs_f32_bits(one[e]));
        }
    }
    free(x);
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-KV-PATH] [MLA-NORM]: RMSNorm applies to c_kv only: doubling the c_kv rows of W_DKV
 * leaves the output unchanged up to the eps and FP32 rounding, doubling the k_pe rows
 * changes it. */
START_TEST(test_kv_norm_covers_c_kv_but_not_k_pe)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_FP32, 500);
    qs_mla_shape sh = sbhd_shape(1, 5, QS_FP32);
    float *x = rbuf(40, 1.0f, QS_FP32), base[40], a[40];
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, base), QS_OK);
    for (int e = 0; e < 5 * 8; e++)
        m.w_dkv[e] *= 2.0f; /* rows 0..4: c_kv */
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, a), QS_OK);
    for (int e = 0; e < 40; e++)
        ck_assert_msg(fabsf(a[e] - base[e]) <= 1e-5f, "c_kv scaled: out[%d]", e);
    for (int e = 5 * 8; e < 9 * 8; e++)
        m.w_dkv[e] *= 2.0f; /* rows 5..8: k_pe */
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, a), QS_OK);
    double diff = 0.0;
    for (int e = 0; e < 40; e++)
        diff += fabs(a[e] - base[e]);
    ck_assert_msg(diff > 1e-3, "k_pe scaling changed nothing (%g)", diff);
    free(x);
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- backward */

/* All parameters of the block in double (x and every weight), for finite differences. */
typedef struct mla_pd {
    double x[16 * 8], w_dq[6 * 8], q_norm[6], w_uq[14 * 6], w_q[14 * 8], w_dkv[9 * 8];
    double kv_norm[5], w_ukv[10 * 5], w_o[8 * 4];
} mla_pd;

static void to_d(double *d, const float *f, size_t n)
{
    for (size_t e = 0; e < n; e++)
        d[e] = f[e];
}

static void lin_dd(const double *x, const double *w, int64_t in, int64_t out, double *y)
{
    for (int64_t o = 0; o < out; o++) {
        double acc = 0.0;
        for (int64_t i = 0; i < in; i++)
            acc += x[i] * w[o * in + i];
        y[o] = acc;
    }
}

static void rms_dd(double *x, const double *w, int64_t n, double eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * r * w[i];
}

/* RoPE in double with the reference's FP32 inverse frequencies (constants), M = 1. */
static void rope_dd(const double *x, double *y, int64_t dr, const float *inv, int64_t pos)
{
    for (int64_t j = 0; j < dr / 2; j++) {
        double f = (double)pos * inv[j], a = x[2 * j], b = x[2 * j + 1];
        y[j] = a * cos(f) - b * sin(f);
        y[dr / 2 + j] = b * cos(f) + a * sin(f);
    }
}

/* L = sum(out * dout) of the plain MLA in double, sbhd, mask as given, the scale of
 * [MLA-SCALE]; x and the weights from P (w_ukv combined). */
static double mla_loss_dd(const qs_mla_config *c, const mla_pd *P, int64_t b, int64_t s,
                          qs_attn_mask mask, const float *dout)
{
    enum { MT = 16, MH = 2, DQ = 7 };
    int64_t T = b * s, n = c->heads, dq = c->dn + c->dr, rkv = c->kv_lora_rank;
    double Q[MT][MH][DQ], K[MT][MH][DQ], V[MT][MH][4], t1[64], t2[64], loss = 0.0;
    float inv[8];
    qs_mla_rope_inv_freq(NULL, c, inv, NULL, NULL);
    for (int64_t r = 0; r < T; r++) {
        const double *xd = P->x + r * c->hidden;
        if (c->q_lora_rank > 0) {
            lin_dd(xd, P->w_dq, c->hidden, c->q_lora_rank, t1);
            rms_dd(t1, P->q_norm, c->q_lora_rank, c->norm_eps);
            lin_dd(t1, P->w_uq, c->q_lora_rank, n * dq, t2);
        } else {
            lin_dd(xd, P->w_q, c->hidden, n * dq, t2);
        }
        for (int64_t h = 0; h < n; h++) {
            memcpy(Q[r][h], t2 + h * dq, (size_t)c->dn * sizeof(double));
            rope_dd(t2 + h * dq + c->dn, Q[r][h] + c->dn, c->dr, inv, r / b);
        }
        lin_dd(xd, P->w_dkv, c->hidden, rkv + c->dr, t1);
        double kpe[8];
        rope_dd(t1 + rkv, kpe, c->dr, inv, r / b);
        rms_dd(t1, P->kv_norm, rkv, c->norm_eps);
        lin_dd(t1, P->w_ukv, rkv, n * (c->dn + c->dv), t2);
        for (int64_t h = 0; h < n; h++) {
            memcpy(K[r][h], t2 + h * (c->dn + c->dv), (size_t)c->dn * sizeof(double));
            memcpy(K[r][h] + c->dn, kpe, (size_t)c->dr * sizeof(double));
            memcpy(V[r][h], t2 + h * (c->dn + c->dv) + c->dn, (size_t)c->dv * sizeof(double));
        }
    }
    double scale = qs_mla_softmax_scale(c), att[16];
    for (int64_t r = 0; r < T; r++) {
        double o[8] = {0};
        int64_t i = r / b, seq = r % b, nk = mask == QS_ATTN_MASK_CAUSAL ? i + 1 : s;
        for (int64_t h = 0; h < n; h++) {
            double sc[16], mx = -INFINITY, l = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                double acc = 0.0;
                for (int64_t d = 0; d < dq; d++)
                    acc += Q[r][h][d] * K[j * b + seq][h][d];
                sc[j] = scale * acc;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = 0; j < nk; j++)
                l += exp(sc[j] - mx);
            for (int64_t j = 0; j < nk; j++)
                for (int64_t e = 0; e < c->dv; e++)
                    o[h * c->dv + e] += exp(sc[j] - mx) / l * V[j * b + seq][h][e];
        }
        lin_dd(o, P->w_o, n * c->dv, c->hidden, att);
        for (int64_t e = 0; e < c->hidden; e++)
            loss += att[e] * dout[r * c->hidden + e];
    }
    return loss;
}

/* Gradient buffers (combined and split K/V both present). */
typedef struct mla_g {
    float dx[16 * 8], dw_dq[6 * 8], dq_norm[6], dw_uq[14 * 6], dw_q[14 * 8], dw_dkv[9 * 8];
    float dkv_norm[5], dw_ukv[10 * 5], dw_uk[6 * 5], dw_uv[4 * 5], dw_o[8 * 4];
    qs_mla_grads g;
} mla_g;

static void grads_init(mla_g *m)
{
    memset(m, 0, sizeof *m);
    qs_mla_grads g = {m->dx,       m->dw_dq,  m->dq_norm, m->dw_uq, m->dw_q, m->dw_dkv,
                      m->dkv_norm, m->dw_ukv, m->dw_uk,   m->dw_uv, m->dw_o};
    m->g = g;
}

/* Splits combined [K_h; V_h] rows (n 2, dn 3, dv 2, rkv 5) into W_UK and W_UV. */
static void split_rows(const float *ukv, float *uk, float *uv)
{
    for (int h = 0; h < 2; h++) {
        memcpy(uk + h * 15, ukv + h * 25, 15 * sizeof(float));
        memcpy(uv + h * 10, ukv + h * 25 + 15, 10 * sizeof(float));
    }
}

/* Central difference of L in parameter a[e], step 1e-5. */
static double fd_at(const qs_mla_config *c, mla_pd *P, double *a, size_t e, int64_t b, int64_t s,
                    qs_attn_mask mask, const float *dout)
{
    const double hstep = 1e-5;
    double keep = a[e];
    a[e] = keep + hstep;
    double lp = mla_loss_dd(c, P, b, s, mask, dout);
    a[e] = keep - hstep;
    double lm = mla_loss_dd(c, P, b, s, mask, dout);
    a[e] = keep;
    return (lp - lm) / (2.0 * hstep);
}

static double max_err_seen;

/* Every element of the FP32 gradient g[0..n) against the finite difference in a. */
static void check_fd_array(const char *name, const float *g, double *a, size_t n,
                           const qs_mla_config *c, mla_pd *P, int64_t b, int64_t s,
                           qs_attn_mask mask, const float *dout)
{
    double gn = 0.0;
    for (size_t e = 0; e < n; e++) {
        double fd = fd_at(c, P, a, e, b, s, mask, dout), err = fabs(g[e] - fd);
        double rel = err / (1.0 + fabs(fd));
        max_err_seen = rel > max_err_seen ? rel : max_err_seen;
        gn += fabs(fd);
        ck_assert_msg(err <= 5e-6 * (1.0 + fabs(fd)),
                      "%s[%zu]: backward %.9g, finite difference %.9g", name, e, (double)g[e], fd);
    }
    ck_assert_msg(gn > 1e-3, "%s: the gradient is all but zero (%g)", name, gn);
}

/* [MLA-BWD] [MLA-BWD-NORM] [MLA-BWD-ROPE]: the FP32 backward of x and every weight against
 * central differences (step 1e-5) of the double MLA written here. The difference itself is
 * good to ~1e-10 (truncation ~h^2 times the third derivative, cancellation ~1e-16 L / h);
 * the FP32 backward carries FP32 rounding of the forward and backward through ~10 stages
 * of sums of <= 16 terms of magnitude ~1 (measured below 1e-6); checked within
 * 5e-6 (1 + |fd|). Each gradient must also be far from zero. */
static void check_bwd_fd(int64_t rq, int split, int absorbed, qs_attn_mask mask, float yarn)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(rq);
    c.yarn_factor = yarn;
    c.yarn_mscale = c.yarn_mscale_all_dim = 1.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    c.yarn_original_max_pos = 8;
    c.absorbed = absorbed;
    mla_w m;
    weights_init(&m, &c, QS_FP32, 700 + (uint64_t)(rq + 2 * split + 4 * absorbed));
    enum { B = 2, S = 4, N = B * S * 8 };
    qs_mla_shape sh = sbhd_shape(B, S, QS_FP32);
    sh.mask = mask;
    float *x = rbuf(N, 1.0f, QS_FP32), *dout = rbuf(N, 1.0f, QS_FP32), uk[30], uv[20];
    qs_mla_weights ws = m.w;
    static mla_g g;
    grads_init(&g);
    if (split) {
        split_rows(m.w_ukv, uk, uv);
        ws.w_ukv = NULL, ws.w_uk = uk, ws.w_uv = uv;
        g.g.dw_ukv = NULL;
    }
    ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &ws, x, dout, &g.g), QS_OK);
    for (int h = 0; split && h < 2; h++) { /* back to the combined row order */
        memcpy(g.dw_ukv + h * 25, g.dw_uk + h * 15, 15 * sizeof(float));
        memcpy(g.dw_ukv + h * 25 + 15, g.dw_uv + h * 10, 10 * sizeof(float));
    }
    static mla_pd P;
    int64_t nq = 2 * 7, nr = rq > 0 ? rq : 1;
    to_d(P.x, x, N), to_d(P.w_dq, m.w_dq, (size_t)(nr * 8)), to_d(P.q_norm, m.q_norm, (size_t)nr);
    to_d(P.w_uq, m.w_uq, (size_t)(nq * nr)), to_d(P.w_q, m.w_q, (size_t)(nq * 8));
    to_d(P.w_dkv, m.w_dkv, 72), to_d(P.kv_norm, m.kv_norm, 5), to_d(P.w_ukv, m.w_ukv, 50);
    to_d(P.w_o, m.w_o, 32);
    check_fd_array("dx", g.dx, P.x, N, &c, &P, B, S, mask, dout);
    if (rq > 0) {
        check_fd_array("dw_dq", g.dw_dq, P.w_dq, (size_t)(rq * 8), &c, &P, B, S, mask, dout);
        check_fd_array("dq_norm", g.dq_norm, P.q_norm, (size_t)rq, &c, &P, B, S, mask, dout);
        check_fd_array("dw_uq", g.dw_uq, P.w_uq, (size_t)(nq * rq), &c, &P, B, S, mask, dout);
    } else {
        check_fd_array("dw_q", g.dw_q, P.w_q, (size_t)(nq * 8), &c, &P, B, S, mask, dout);
    }
    check_fd_array("dw_dkv", g.dw_dkv, P.w_dkv, 72, &c, &P, B, S, mask, dout);
    check_fd_array("dkv_norm", g.dkv_norm, P.kv_norm, 5, &c, &P, B, S, mask, dout);
    check_fd_array("dw_ukv", g.dw_ukv, P.w_ukv, 50, &c, &P, B, S, mask, dout);
    check_fd_array("dw_o", g.dw_o, P.w_o, 32, &c, &P, B, S, mask, dout);
    free(x), free(dout);
    weights_free(&m);
    qs_ctx_free(ctx);
}

/* [MLA-BWD] [MLA-BWD-NORM]: plain, q LoRA (q norm), combined K/V, causal. */
START_TEST(test_bwd_plain_q_lora_combined_matches_finite_differences)
{
    max_err_seen = 0.0;
    check_bwd_fd(6, 0, 0, QS_ATTN_MASK_CAUSAL, 1.0f);
    fprintf(stderr, "mla bwd (plain) vs finite differences: max err/(1+|fd|) %.3g\n", max_err_seen);
}
END_TEST

/* [MLA-BWD] [MLA-BWD-ROPE]: plain, single q proj, split K/V, no mask, YaRN f 4. */
START_TEST(test_bwd_plain_single_q_split_kv_matches_finite_differences)
{
    check_bwd_fd(0, 1, 0, QS_ATTN_MASK_NONE, 4.0f);
}
END_TEST

/* [MLA-BWD-ABSORBED]: absorbed, q LoRA, combined K/V, causal, YaRN f 4. */
START_TEST(test_bwd_absorbed_matches_finite_differences)
{
    max_err_seen = 0.0;
    check_bwd_fd(6, 0, 1, QS_ATTN_MASK_CAUSAL, 4.0f);
    fprintf(stderr, "mla bwd (absorbed) vs finite differences: max err/(1+|fd|) %.3g\n",
            max_err_seen);
}
END_TEST

/* [MLA-BWD-ABSORBED]: absorbed, single q proj, split K/V, no mask. */
START_TEST(test_bwd_absorbed_single_q_split_kv_matches_finite_differences)
{
    check_bwd_fd(0, 1, 1, QS_ATTN_MASK_NONE, 1.0f);
}
END_TEST

/* Runs qs_mla_bwd for c on x, dout into g (combined K/V). */
static void run_bwd(qs_ctx *ctx, const qs_mla_config *c, const qs_mla_shape *sh, const mla_w *m,
                    const float *x, const float *dout, mla_g *g)
{
    grads_init(g);
    ck_assert_int_eq(qs_mla_bwd(ctx, c, sh, &m->w, x, dout, &g->g), QS_OK);
}

/* [MLA-BWD-ABSORBED]: absorbed and plain backward are gradients of the same function, so
 * in FP32 they agree within FP32 rounding of the reassociated sums, checked within
 * 1e-5 (1 + |plain|) (both are within 6e-7 of the finite differences above); in BF16 the
 * rounding points differ, so only cosine > 0.999 per gradient, and not bitwise. */
static void check_bwd_absorbed_vs_plain(qs_dtype dt)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, dt, 800);
    enum { B = 2, S = 6, N = B * S * 8 };
    qs_mla_shape sh = sbhd_shape(B, S, dt);
    float *x = rbuf(N, 1.0f, dt), *dout = rbuf(N, 1.0f, dt);
    static mla_g gp, ga;
    run_bwd(ctx, &c, &sh, &m, x, dout, &gp);
    c.absorbed = 1;
    run_bwd(ctx, &c, &sh, &m, x, dout, &ga);
    const float *a[] = {gp.dx,     gp.dw_dq,    gp.dq_norm, gp.dw_uq,
                        gp.dw_dkv, gp.dkv_norm, gp.dw_ukv,  gp.dw_o};
    const float *b[] = {ga.dx,     ga.dw_dq,    ga.dq_norm, ga.dw_uq,
                        ga.dw_dkv, ga.dkv_norm, ga.dw_ukv,  ga.dw_o};
    const int n[] = {N, 48, 6, 84, 72, 5, 50, 32};
    int same = 1;
    for (int k = 0; k < 8; k++) {
        double sxy = 0, sxx = 0, syy = 0;
        for (int e = 0; e < n[k]; e++) {
            sxy += (double)a[k][e] * b[k][e];
            sxx += (double)a[k][e] * a[k][e];
            syy += (double)b[k][e] * b[k][e];
            same &= qs_f32_bits(a[k][e]) == qs_f32_bits(b[k][e]);
            if (dt == QS_FP32)
                ck_assert_msg(fabs(a[k][e] - b[k][e]) <= 1e-5 * (1.0 + fabs(a[k][e])),
                              "gradient %d [%d]: plain %.9g absorbed %.9g", k, e, (double)a[k][e],
                              (double)b[k][e]);
        }
        ck_assert_msg(sxx > 1e-6 && sxy / sqrt(sxx * syy) > 0.999, "gradient %d: cosine %.9g", k,
                      sxy / sqrt(sxx * syy));
    }
    if (dt == QS_BF16)
        ck_assert(!same);
    free(x), free(dout);
    weights_free(&m);
    qs_ctx_free(ctx);
}

START_TEST(test_bwd_absorbed_equals_plain_in_fp32)
{
    check_bwd_absorbed_vs_plain(QS_FP32);
}
END_TEST

/* [MLA-BWD-ABSORBED] [MLA-BWD]: BF16 rounding points differ. */
START_TEST(test_bwd_absorbed_close_to_plain_in_bf16)
{
    check_bwd_absorbed_vs_plain(QS_BF16);
}
END_TEST

/* [MLA-BWD]: thd with two sequences of 4 equals bshd with b = 2 bit for bit in every
 * gradient (same rows, positions and sums); thd with sequences of 3 and 5 gives each
 * sequence alone's dx bit for bit, and weight gradients equal to the sum of the
 * per-sequence ones within FP32 rounding (1e-5 (1 + |g|)), plain and absorbed, BF16. */
START_TEST(test_bwd_thd_matches_bshd_and_per_sequence)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_BF16, 900);
    float *x = rbuf(64, 1.0f, QS_BF16), *dout = rbuf(64, 1.0f, QS_BF16);
    static mla_g gt, gb, g1;
    for (int ab = 0; ab < 2; ab++) {
        c.absorbed = ab;
        int32_t cu4[3] = {0, 4, 8}, cu35[3] = {0, 3, 8};
        qs_mla_shape th = {QS_ATTN_THD, QS_ATTN_MASK_CAUSAL, 2, 8, cu4, QS_BF16};
        qs_mla_shape bs = {QS_ATTN_BSHD, QS_ATTN_MASK_CAUSAL, 2, 4, NULL, QS_BF16};
        run_bwd(ctx, &c, &th, &m, x, dout, &gt);
        run_bwd(ctx, &c, &bs, &m, x, dout, &gb);
        const float *pt[] = {gt.dx,     gt.dw_dq,    gt.dq_norm, gt.dw_uq,
                             gt.dw_dkv, gt.dkv_norm, gt.dw_ukv,  gt.dw_o};
        const float *pb[] = {gb.dx,     gb.dw_dq,    gb.dq_norm, gb.dw_uq,
                             gb.dw_dkv, gb.dkv_norm, gb.dw_ukv,  gb.dw_o};
        const int nel[] = {64, 48, 6, 84, 72, 5, 50, 32};
        for (int k = 0; k < 8; k++)
            for (int e = 0; e < nel[k]; e++)
                ck_assert_msg(qs_f32_bits(pt[k][e]) == qs_f32_bits(pb[k][e]),
                              "absorbed %d, gradient %d [%d]", ab, k, e);
        th.cu_seqlens = cu35;
        run_bwd(ctx, &c, &th, &m, x, dout, &gt);
        float wsum[32] = {0};
        for (int n = 0; n < 2; n++) {
            qs_mla_shape s1 = sbhd_shape(1, cu35[n + 1] - cu35[n], QS_BF16);
            run_bwd(ctx, &c, &s1, &m, x + cu35[n] * 8, dout + cu35[n] * 8, &g1);
            for (int e = 0; e < (cu35[n + 1] - cu35[n]) * 8; e++)
                ck_assert(qs_f32_bits(gt.dx[cu35[n] * 8 + e]) == qs_f32_bits(g1.dx[e]));
            for (int e = 0; e < 32; e++)
                wsum[e] += g1.dw_o[e];
        }
        for (int e = 0; e < 32; e++)
            ck_assert_msg(fabsf(gt.dw_o[e] - wsum[e]) <= 1e-5f * (1.0f + fabsf(wsum[e])),
                          "dw_o[%d] %.9g vs %.9g", e, (double)gt.dw_o[e], (double)wsum[e]);
    }
    free(x), free(dout);
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-BWD]: a NULL gradient the configuration needs is rejected. */
START_TEST(test_bwd_rejects_missing_gradient)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_FP32, 950);
    qs_mla_shape sh = sbhd_shape(1, 2, QS_FP32);
    float x[16] = {0}, dout[16] = {0};
    static mla_g g;
    grads_init(&g);
    g.g.dq_norm = NULL;
    ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &m.w, x, dout, &g.g), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "gradient"));
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-SHAPES]: bad configurations are rejected. */
START_TEST(test_bad_configuration_is_rejected)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = small_cfg(6);
    mla_w m;
    weights_init(&m, &c, QS_FP32, 600);
    qs_mla_shape sh = sbhd_shape(1, 2, QS_FP32);
    float x[16] = {0}, out[16];
    c.dr = 3;
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_ERR_SHAPE);
    c.dr = 4;
    qs_mla_weights ws = m.w;
    ws.w_uq = NULL;
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &ws, x, out), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "weight"));
    sh.dtype = QS_E4M3;
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_ERR_DTYPE);
    weights_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* ---------------------------------------------------------------- the linears under a recipe */

/* hidden 32, 2 heads, rq 16 (or 0), rkv 16, dn 8, dr 8, dv 8, over 32 BF16 token rows (sbhd
 * s 16, b 2, causal): NVFP4's Hadamard transform needs a multiple of 16 rows. */
enum { QH = 32, QT = 32 };

static qs_mla_config quant_cfg(int64_t rq, int absorbed)
{
    qs_mla_config c = small_cfg(rq);
    c.hidden = QH;
    c.kv_lora_rank = 16;
    c.dn = 8;
    c.dr = 8;
    c.dv = 8;
    c.absorbed = absorbed;
    return c;
}

/* Weights of quant_cfg as BF16 values (uniform in +-sqrt(3/in)) and as tensors. */
typedef struct qw {
    float *v[QS_MLA_PARAM_COUNT];
    qs_tensor t[QS_MLA_PARAM_COUNT];
    qs_mla_weights w;
} qw;

static void qw_init(qw *m, const qs_mla_config *c, int split, uint64_t seed)
{
    qst_rng_seed(seed);
    memset(m, 0, sizeof *m);
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++) {
        int64_t shape[2];
        int nd = qs_mla_param_shape(c, split, (qs_mla_param)p, shape);
        if (!nd)
            continue;
        size_t n = (size_t)(shape[0] * (nd == 2 ? shape[1] : 1));
        int norm = p == QS_MLA_Q_NORM || p == QS_MLA_KV_NORM;
        m->v[p] = rbuf(n, norm ? 0.2f : sqrtf(3.0f / (float)shape[1]), norm ? QS_FP32 : QS_BF16);
        for (size_t e = 0; norm && e < n; e++)
            m->v[p][e] += 1.0f;
        ck_assert_int_eq(qs_tensor_alloc(NULL, &m->t[p], QS_BF16, nd, shape), QS_OK);
        for (size_t e = 0; !norm && e < n; e++)
            ((uint16_t *)m->t[p].data)[e] = qs_f32_to_bf16(m->v[p][e]);
    }
    qs_mla_weights w = {m->v[0], m->v[1], m->v[2], m->v[3], m->v[4],
                        m->v[5], m->v[6], m->v[7], m->v[8], m->v[9]};
    m->w = w;
}

static void qw_free(qw *m)
{
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++) {
        free(m->v[p]);
        qs_tensor_free(&m->t[p]);
    }
}

/* A full set of quantizers of recipe kind (the defaults, NVFP4 with stochastic rounding of
 * x too), one per linear and role. */
typedef struct qset {
    qs_quantizer q[QS_MLA_LINEAR_COUNT][QS_SCOPE_ROLE_COUNT];
    qs_mla_quantizers p;
} qset;

static void qset_init(qset *s, qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    if (kind == QS_RECIPE_DELAYED)
        for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
            r.cfg[i].history_len = 4;
    if (kind == QS_RECIPE_NVFP4)
        r.cfg[QS_SCOPE_X].sr = 1;
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
            ck_assert_int_eq(qs_quantizer_init(NULL, &s->q[l][role], &r.cfg[role]), QS_OK);
            s->p.q[l][role] = &s->q[l][role];
        }
}

static void qset_free(qset *s)
{
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++)
            qs_quantizer_free(&s->q[l][role]);
}

static qs_scope_token enter_region(qs_ctx *ctx, int enabled, int calibrating, qs_recipe_kind kind)
{
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, kind), QS_OK);
    qs_autocast_params a = {enabled, calibrating, &r, 0};
    qs_scope_token tok;
    ck_assert_int_eq(qs_autocast_enter(ctx, &a, &tok), QS_OK);
    return tok;
}

/* A [rows, cols] BF16 tensor of the BF16 values v, and the values of a BF16 tensor. */
static qs_tensor to_tensor(const float *v, int64_t rows, int64_t cols)
{
    qs_tensor t;
    int64_t shape[2] = {rows, cols};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &t, QS_BF16, 2, shape), QS_OK);
    for (size_t e = 0; e < t.numel; e++)
        ((uint16_t *)t.data)[e] = qs_f32_to_bf16(v[e]);
    return t;
}

static void from_tensor(const qs_tensor *t, float *v)
{
    for (size_t e = 0; e < t->numel; e++)
        v[e] = qs_bf16_to_f32(((const uint16_t *)t->data)[e]);
}

/* One linear of the composition: qs_linear_forward with the quantizers of linear l of s
 * (the recipe's default options, BF16 output), or qs_linear_hp_forward when s is NULL;
 * keeps the quantized copies of the output projection for its backward. */
typedef struct composer {
    qs_ctx *ctx;
    qset *s;
    const qw *m;
    qs_quantized xq_o, wq_o;
} composer;

static void lin(composer *k, qs_mla_linear l, qs_mla_param p, const float *x, int64_t in, float *y)
{
    qs_tensor xt = to_tensor(x, QT, in), yt;
    qs_quantized xq, wq;
    if (k->s == NULL) {
        ck_assert_int_eq(qs_linear_hp_forward(k->ctx, &xt, &k->m->t[p], &yt), QS_OK);
    } else {
        qs_linear_options opt;
        qs_linear_options_default(&opt, k->s->q[l][0].cfg.kind);
        ck_assert_int_eq(qs_linear_forward(k->ctx, &opt, &k->s->q[l][QS_SCOPE_X],
                                           &k->s->q[l][QS_SCOPE_W], &xt, &k->m->t[p], &yt, &xq,
                                           &wq),
                         QS_OK);
        if (l == QS_MLA_OUT_PROJ) {
            k->xq_o = xq;
            k->wq_o = wq;
        } else {
            qs_quantized_free(&xq);
            qs_quantized_free(&wq);
        }
    }
    from_tensor(&yt, y);
    qs_tensor_free(&xt);
    qs_tensor_free(&yt);
}

/* [MLA-NORM] of each row, written from the rule. */
static void norm_rows(const float *x, const float *w, int64_t n, float *y)
{
    for (int64_t t = 0; t < QT; t++) {
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++)
            ss = ss + x[t * n + i] * x[t * n + i];
        float rstd = qs_rsqrtf(ss / (float)n + 1e-6f);
        for (int64_t i = 0; i < n; i++)
            y[t * n + i] = qs_round_bf16((x[t * n + i] * rstd) * w[i]);
    }
}

/* The block composed from public pieces [MLA-FWD]: the linears above, norms by the rule,
 * qs_mla_rope, qs_sdpa_fwd, and in the absorbed form the two einsums in high precision by
 * [MLA-ABSORBED]. o gets the attention output that feeds the output projection. */
static void compose_fwd(composer *k, const qs_mla_config *c, const float *x, float *out, float *o)
{
    enum { H = 2, DQ = 16, R = 16 };
    const qw *m = k->m;
    int ab = c->absorbed, split = m->v[QS_MLA_W_UKV] == NULL;
    int64_t dqq = ab ? R + 8 : DQ, hk = ab ? 1 : H, dvv = ab ? R : 8;
    static float cq[QT * 16], cqn[QT * 16], q[QT * H * DQ], kvc[QT * 24], ckv[QT * R], c_[QT * R];
    static float kvu[QT * H * 16], ku[QT * H * 8], vu[QT * H * 8], query[QT * H * 24];
    static float key[QT * H * 24], value[QT * H * 16], att[QT * H * 16];
    lin(k, QS_MLA_Q_DOWN, QS_MLA_W_DQ, x, QH, cq);
    lin(k, QS_MLA_KV_DOWN, QS_MLA_W_DKV, x, QH, kvc);
    norm_rows(cq, m->v[QS_MLA_Q_NORM], 16, cqn);
    lin(k, QS_MLA_Q_UP, QS_MLA_W_UQ, cqn, 16, q);
    for (int t = 0; t < QT; t++)
        memcpy(ckv + t * R, kvc + t * 24, R * sizeof(float));
    norm_rows(ckv, m->v[QS_MLA_KV_NORM], R, c_);
    if (!ab && !split)
        lin(k, QS_MLA_KV_UP, QS_MLA_W_UKV, c_, R, kvu);
    if (!ab && split) {
        lin(k, QS_MLA_K_UP, QS_MLA_W_UK, c_, R, ku);
        lin(k, QS_MLA_V_UP, QS_MLA_W_UV, c_, R, vu);
    }
    const float *wuk = split ? m->v[QS_MLA_W_UK] : m->v[QS_MLA_W_UKV];
    const float *wuv = split ? m->v[QS_MLA_W_UV] : m->v[QS_MLA_W_UKV];
    int64_t krow = split ? 8 : 16, voff = split ? 0 : 8;
    for (int t = 0; t < QT; t++) {
        float kpe[8];
        ck_assert_int_eq(qs_mla_rope(k->ctx, c, QS_BF16, t / 2, kvc + t * 24 + R, kpe), QS_OK);
        for (int h = 0; h < H; h++) {
            float *qo = query + (t * H + h) * dqq;
            const float *qr = q + (t * H + h) * DQ;
            ck_assert_int_eq(qs_mla_rope(k->ctx, c, QS_BF16, t / 2, qr + 8, qo + dqq - 8), QS_OK);
            for (int cc = 0; ab && cc < R; cc++) { /* q_abs */
                float acc = 0.0f;
                for (int d = 0; d < 8; d++)
                    acc = acc + qr[d] * wuk[(h * krow + d) * R + cc];
                qo[cc] = qs_round_bf16(acc);
            }
            if (ab)
                continue;
            memcpy(qo, qr, 8 * sizeof(float));
            float *kr = key + (t * H + h) * DQ;
            memcpy(kr, split ? ku + (t * H + h) * 8 : kvu + t * H * 16 + h * 16, 8 * sizeof(float));
            memcpy(kr + 8, kpe, 8 * sizeof(float));
            memcpy(value + (t * H + h) * 8,
                   split ? vu + (t * H + h) * 8 : kvu + t * H * 16 + h * 16 + 8, 8 * sizeof(float));
        }
        if (ab) {
            memcpy(key + t * dqq, c_ + t * R, R * sizeof(float));
            memcpy(key + t * dqq + R, kpe, 8 * sizeof(float));
            memcpy(value + t * R, c_ + t * R, R * sizeof(float));
        }
    }
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.layout = QS_ATTN_SBHD;
    p.mask = QS_ATTN_MASK_CAUSAL;
    p.b = 2;
    p.sq = p.sk = QT / 2;
    p.h = H;
    p.hkv = hk;
    p.d = dqq;
    p.dv = dvv;
    p.scale = qs_mla_softmax_scale(c);
    p.dtype = QS_BF16;
    ck_assert_int_eq(qs_sdpa_fwd(k->ctx, &p, query, key, value, ab ? att : o, NULL), QS_OK);
    for (int t = 0; ab && t < QT; t++) /* o = lat W_UV^T */
        for (int h = 0; h < H; h++)
            for (int e = 0; e < 8; e++) {
                float acc = 0.0f;
                for (int cc = 0; cc < R; cc++)
                    acc = acc + att[(t * H + h) * R + cc] * wuv[(h * krow + voff + e) * R + cc];
                o[(t * H + h) * 8 + e] = qs_round_bf16(acc);
            }
    lin(k, QS_MLA_OUT_PROJ, QS_MLA_W_O, o, H * 8, out);
}

static double cos_f(const float *a, const float *b, size_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (size_t e = 0; e < n; e++) {
        ab += (double)a[e] * b[e];
        aa += (double)a[e] * a[e];
        bb += (double)b[e] * b[e];
    }
    return ab / sqrt(aa * bb);
}

/* Gradient buffers for quant_cfg (every parameter, FP32). */
typedef struct qg {
    float *v[QS_MLA_PARAM_COUNT], dx[QT * QH];
    qs_mla_grads g;
} qg;

static void qg_init(qg *g, const qs_mla_config *c, int split)
{
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++) {
        int64_t shape[2];
        int nd = qs_mla_param_shape(c, split, (qs_mla_param)p, shape);
        g->v[p] = nd ? calloc((size_t)(shape[0] * (nd == 2 ? shape[1] : 1)), sizeof(float)) : NULL;
    }
    qs_mla_grads gg = {g->dx,   g->v[0], g->v[1], g->v[2], g->v[3], g->v[4],
                       g->v[5], g->v[6], g->v[7], g->v[8], g->v[9]};
    g->g = gg;
}

static void qg_free(qg *g)
{
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++)
        free(g->v[p]);
}

/* [MLA-LINEAR] [MLA-LINEAR-QUANT] [MLA-ABSORBED-HP] [MLA-SPLIT-KV] [MLA-FWD] [MLA-BWD]: in an
 * enabled autocast of each recipe, qs_mla_forward equals, bit for bit, the block composed
 * by hand from qs_linear_forward calls with quantizers of the same configuration (and, in
 * the absorbed form, the W_UK / W_UV einsums in high precision); so do the delayed-scaling
 * amax slots the two leave. The backward's dW_O is bitwise qs_linear_backward's wgrad
 * (FP32 output) over the composition's saved copies. The output differs from the
 * high-precision one but stays close: cosine > 0.99 (FP8), > 0.9 (NVFP4). In the absorbed
 * form the K/V up-projection quantizers are never touched. The FP32 dgrad rounded to BF16
 * is the dgrad of output dtype BF16 bit for bit. */
static void check_quantized(int split, int absorbed)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = quant_cfg(16, absorbed);
    qw m;
    qw_init(&m, &c, split, 1000 + (uint64_t)(split + 2 * absorbed));
    qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
    float *x = rbuf(QT * QH, 1.0f, QS_BF16), *dout = rbuf(QT * QH, 1.0f, QS_BF16);
    static float hp[QT * QH], out[QT * QH], want[QT * QH], o[QT * 16];
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, hp), QS_OK);
    for (int kind = 0; kind < QS_RECIPE_COUNT; kind++) {
        static qset a, b;
        qset_init(&a, (qs_recipe_kind)kind);
        qset_init(&b, (qs_recipe_kind)kind);
        qs_scope_token tok = enter_region(ctx, 1, 0, (qs_recipe_kind)kind);
        qs_status st = qs_mla_forward(ctx, &c, &sh, &m.w, &a.p, x, out);
        ck_assert_msg(st == QS_OK, "%s: %s", qs_recipe_kind_name(kind), qs_ctx_errmsg(ctx));
        composer k;
        memset(&k, 0, sizeof k);
        k.ctx = ctx, k.s = &b, k.m = &m;
        compose_fwd(&k, &c, x, want, o);
        for (int e = 0; e < QT * QH; e++)
            ck_assert_msg(qs_f32_bits(out[e]) == qs_f32_bits(want[e]), "%s out[%d]: %a vs %a",
                          qs_recipe_kind_name(kind), e, (double)out[e], (double)want[e]);
        qg g;
        qg_init(&g, &c, split);
        ck_assert_int_eq(qs_mla_backward(ctx, &c, &sh, &m.w, &a.p, x, dout, &g.g), QS_OK);
        qs_tensor dyt = to_tensor(dout, QT, QH), dxo, dwo;
        qs_linear_options opt;
        qs_linear_options_default(&opt, (qs_recipe_kind)kind);
        opt.out_dtype = QS_FP32;
        ck_assert_int_eq(qs_linear_backward(ctx, &opt, &b.q[QS_MLA_OUT_PROJ][QS_SCOPE_DY], &dyt,
                                            &k.xq_o, &k.wq_o, &dxo, &dwo),
                         QS_OK);
        for (size_t e = 0; e < dwo.numel; e++)
            ck_assert_msg(qs_f32_bits(((float *)dwo.data)[e]) == qs_f32_bits(g.v[QS_MLA_W_O][e]),
                          "%s dw_o[%zu]", qs_recipe_kind_name(kind), e);
        qs_tensor dxb, dwb; /* the FP32 dgrad rounded to BF16 is the BF16 dgrad */
        opt.out_dtype = QS_BF16;
        ck_assert_int_eq(qs_linear_backward(ctx, &opt, &b.q[QS_MLA_OUT_PROJ][QS_SCOPE_DY], &dyt,
                                            &k.xq_o, &k.wq_o, &dxb, &dwb),
                         QS_OK);
        for (size_t e = 0; e < dxb.numel; e++)
            ck_assert_uint_eq(((uint16_t *)dxb.data)[e], qs_f32_to_bf16(((float *)dxo.data)[e]));
        qs_tensor_free(&dxb);
        qs_tensor_free(&dwb);
        ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
        for (int l = 0; kind == QS_RECIPE_DELAYED && l < QS_MLA_LINEAR_COUNT; l++)
            for (int role = 0; role < 2; role++)
                ck_assert_uint_eq(qs_f32_bits(a.q[l][role].ds.history[0]),
                                  qs_f32_bits(b.q[l][role].ds.history[0]));
        if (absorbed && kind == QS_RECIPE_DELAYED) /* [MLA-ABSORBED-HP] */
            for (int l = QS_MLA_KV_UP; l <= QS_MLA_V_UP; l++)
                for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++)
                    ck_assert(a.q[l][role].ds.history[0] == 0.0f);
        double cs = cos_f(out, hp, QT * QH), bound = kind == QS_RECIPE_NVFP4 ? 0.9 : 0.99;
        ck_assert_msg(cs > bound, "%s: cosine %.6f", qs_recipe_kind_name(kind), cs);
        ck_assert_msg(memcmp(out, hp, sizeof hp) != 0, "%s equals high precision",
                      qs_recipe_kind_name(kind));
        qs_tensor_free(&dyt);
        qs_tensor_free(&dxo);
        qs_tensor_free(&dwo);
        qs_quantized_free(&k.xq_o);
        qs_quantized_free(&k.wq_o);
        qg_free(&g);
        qset_free(&a);
        qset_free(&b);
    }
    free(x), free(dout);
    qw_free(&m);
    qs_ctx_free(ctx);
}

START_TEST(test_quantized_plain_combined_equals_hand_composed_linears)
{
    check_quantized(0, 0);
}
END_TEST

START_TEST(test_quantized_plain_split_equals_hand_composed_linears)
{
    check_quantized(1, 0);
}
END_TEST

START_TEST(test_quantized_absorbed_keeps_kv_up_in_high_precision)
{
    check_quantized(0, 1);
    check_quantized(1, 1);
}
END_TEST

/* [MLA-LINEAR-HP] [GEMM-LIN-HP]: outside any region, in BF16, the block equals bit for bit
 * the composition from qs_linear_hp_forward calls, and its FP32 dW_O rounded to BF16 is
 * qs_linear_hp_backward's dW of the output projection. */
START_TEST(test_high_precision_linears_are_the_hp_linear)
{
    qs_ctx *ctx = qs_ctx_new();
    for (int split = 0; split < 2; split++) {
        qs_mla_config c = quant_cfg(16, 0);
        qw m;
        qw_init(&m, &c, split, 1100 + (uint64_t)split);
        qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
        float *x = rbuf(QT * QH, 1.0f, QS_BF16), *dout = rbuf(QT * QH, 1.0f, QS_BF16);
        static float out[QT * QH], want[QT * QH], o[QT * 16];
        ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_OK);
        composer k;
        memset(&k, 0, sizeof k);
        k.ctx = ctx, k.m = &m;
        compose_fwd(&k, &c, x, want, o);
        for (int e = 0; e < QT * QH; e++)
            ck_assert_msg(qs_f32_bits(out[e]) == qs_f32_bits(want[e]), "out[%d]: %a vs %a", e,
                          (double)out[e], (double)want[e]);
        qg g;
        qg_init(&g, &c, split);
        ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &m.w, x, dout, &g.g), QS_OK);
        qs_tensor dyt = to_tensor(dout, QT, QH), ot = to_tensor(o, QT, 16), dxo, dwo;
        ck_assert_int_eq(qs_linear_hp_backward(ctx, &dyt, &ot, &m.t[QS_MLA_W_O], &dxo, &dwo),
                         QS_OK);
        for (size_t e = 0; e < dwo.numel; e++)
            ck_assert_uint_eq(((uint16_t *)dwo.data)[e], qs_f32_to_bf16(g.v[QS_MLA_W_O][e]));
        qs_tensor_free(&dyt), qs_tensor_free(&ot), qs_tensor_free(&dxo), qs_tensor_free(&dwo);
        qg_free(&g);
        free(x), free(dout);
        qw_free(&m);
    }
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-LINEAR] [MLA-LINEAR-HP] [SCOPE-ISLAND]: inside an island within an enabled MXFP8
 * region the block runs in high precision: forward and backward equal, bit for bit, the
 * calls outside any region, and no quantizer records anything. */
START_TEST(test_island_runs_the_linears_in_high_precision)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = quant_cfg(16, 0);
    qw m;
    qw_init(&m, &c, 0, 1200);
    qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
    float *x = rbuf(QT * QH, 1.0f, QS_BF16), *dout = rbuf(QT * QH, 1.0f, QS_BF16);
    static float hp[QT * QH], out[QT * QH];
    qg gh, gi;
    qg_init(&gh, &c, 0);
    qg_init(&gi, &c, 0);
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, hp), QS_OK);
    ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &m.w, x, dout, &gh.g), QS_OK);
    static qset a;
    qset_init(&a, QS_RECIPE_DELAYED);
    qs_scope_token tok = enter_region(ctx, 1, 0, QS_RECIPE_DELAYED), isl;
    ck_assert_int_eq(qs_island_enter(ctx, QS_BF16, &isl), QS_OK);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &m.w, &a.p, x, out), QS_OK);
    ck_assert_int_eq(qs_mla_backward(ctx, &c, &sh, &m.w, &a.p, x, dout, &gi.g), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, isl), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
    ck_assert_int_eq(memcmp(out, hp, sizeof hp), 0);
    ck_assert_int_eq(memcmp(gi.dx, gh.dx, sizeof gh.dx), 0);
    ck_assert_int_eq(memcmp(gi.v[QS_MLA_W_DQ], gh.v[QS_MLA_W_DQ], 16 * QH * sizeof(float)), 0);
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++)
            ck_assert(a.q[l][role].ds.history[0] == 0.0f);
    qset_free(&a);
    qg_free(&gh), qg_free(&gi);
    free(x), free(dout);
    qw_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-LINEAR-CALIB] [SCOPE-POLICY-CALIB]: a calibrating delayed-scaling region computes in
 * high precision (bitwise the call outside any region) and writes the current amax slot of
 * each linear's x and w quantizers: q_down's x slot is amax(x), each weight slot its
 * weight's amax, and no scale changes. A calibrating region of a stateless recipe needs no
 * quantizers. */
START_TEST(test_calibrating_region_records_amax_in_high_precision)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = quant_cfg(16, 0);
    qw m;
    qw_init(&m, &c, 0, 1300);
    qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
    float *x = rbuf(QT * QH, 1.0f, QS_BF16);
    static float hp[QT * QH], out[QT * QH];
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, hp), QS_OK);
    static qset a;
    qset_init(&a, QS_RECIPE_DELAYED);
    qs_scope_token tok = enter_region(ctx, 0, 1, QS_RECIPE_DELAYED);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &m.w, &a.p, x, out), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
    ck_assert_int_eq(memcmp(out, hp, sizeof hp), 0);
    float ax = 0.0f;
    for (int e = 0; e < QT * QH; e++)
        ax = fabsf(x[e]) > ax ? fabsf(x[e]) : ax;
    ck_assert_uint_eq(qs_f32_bits(a.q[QS_MLA_Q_DOWN][QS_SCOPE_X].ds.history[0]), qs_f32_bits(ax));
    const int lins[] = {QS_MLA_Q_DOWN, QS_MLA_Q_UP, QS_MLA_KV_DOWN, QS_MLA_KV_UP, QS_MLA_OUT_PROJ};
    const int pars[] = {QS_MLA_W_DQ, QS_MLA_W_UQ, QS_MLA_W_DKV, QS_MLA_W_UKV, QS_MLA_W_O};
    for (int i = 0; i < 5; i++) {
        float aw = 0.0f;
        for (size_t e = 0; e < m.t[pars[i]].numel; e++)
            aw = fabsf(m.v[pars[i]][e]) > aw ? fabsf(m.v[pars[i]][e]) : aw;
        ck_assert_uint_eq(qs_f32_bits(a.q[lins[i]][QS_SCOPE_W].ds.history[0]), qs_f32_bits(aw));
        ck_assert(a.q[lins[i]][QS_SCOPE_W].ds.scale == 1.0f);
    }
    tok = enter_region(ctx, 0, 1, QS_RECIPE_CURRENT);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &m.w, NULL, x, out), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
    ck_assert_int_eq(memcmp(out, hp, sizeof hp), 0);
    qset_free(&a);
    free(x);
    qw_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-LINEAR-QUANT]: in an enabled region a linear without quantizers, or with quantizers
 * of another recipe kind, is rejected with a message naming the linear; the region is left
 * as it was entered. */
START_TEST(test_quantized_linears_need_quantizers_of_the_region_recipe)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = quant_cfg(16, 0);
    qw m;
    qw_init(&m, &c, 0, 1400);
    qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
    float *x = rbuf(QT * QH, 1.0f, QS_BF16);
    static float out[QT * QH];
    qs_scope_token tok = enter_region(ctx, 1, 0, QS_RECIPE_CURRENT);
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &m.w, x, out), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'q_down' runs under recipe current"));
    static qset a;
    qset_init(&a, QS_RECIPE_CURRENT);
    a.p.q[QS_MLA_KV_UP][QS_SCOPE_W] = NULL;
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &m.w, &a.p, x, out), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'kv_up'"));
    qset_free(&a);
    qset_init(&a, QS_RECIPE_MXFP8);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &m.w, &a.p, x, out), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "is mxfp8, the region's recipe is current"));
    qs_scope_state st;
    qs_scope_get(ctx, &st);
    ck_assert_int_eq(st.depth, 1);
    ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
    qset_free(&a);
    free(x);
    qw_free(&m);
    qs_ctx_free(ctx);
}
END_TEST

/* [MLA-SPLIT-KV] [MLA-BWD]: split K/V weights are two linears. In high precision the
 * forward equals the combined one bitwise and so do dW_UK, dW_UV (the same rows of
 * dW_UKV, the same sums) and dW_O; dc is the sum of the two dgrads, each rounded, so dx
 * agrees with the combined one only to BF16 rounding (cosine > 0.9999). Under current
 * scaling the two linears have their own tensor scales (the V rows are scaled by 0.7 so
 * that their amax differs from the K rows'): the outputs are not bitwise those of the
 * combined form, though close. */
START_TEST(test_split_kv_is_two_linears)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_mla_config c = quant_cfg(16, 0);
    qw mc, ms;
    qw_init(&mc, &c, 0, 1500);
    qw_init(&ms, &c, 1, 1500);
    for (int e = 0; e < 2 * 16 * 16; e++) /* V rows of a smaller amax than the K rows */
        if (e / 16 % 16 >= 8)
            mc.v[QS_MLA_W_UKV][e] = qs_round_bf16(0.7f * mc.v[QS_MLA_W_UKV][e]);
    for (int h = 0; h < 2; h++) { /* the same rows */
        memcpy(ms.v[QS_MLA_W_UK] + h * 8 * 16, mc.v[QS_MLA_W_UKV] + h * 16 * 16,
               128 * sizeof(float));
        memcpy(ms.v[QS_MLA_W_UV] + h * 8 * 16, mc.v[QS_MLA_W_UKV] + (h * 16 + 8) * 16,
               128 * sizeof(float));
    }
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++)
        if (ms.v[p] && mc.v[p])
            memcpy(ms.v[p], mc.v[p], mc.t[p].numel * sizeof(float));
    qs_mla_shape sh = sbhd_shape(2, QT / 2, QS_BF16);
    float *x = rbuf(QT * QH, 1.0f, QS_BF16), *dout = rbuf(QT * QH, 1.0f, QS_BF16);
    static float oc[QT * QH], os[QT * QH];
    qg gc, gs;
    qg_init(&gc, &c, 0);
    qg_init(&gs, &c, 1);
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &mc.w, x, oc), QS_OK);
    ck_assert_int_eq(qs_mla_fwd(ctx, &c, &sh, &ms.w, x, os), QS_OK);
    ck_assert_int_eq(memcmp(oc, os, sizeof oc), 0);
    ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &mc.w, x, dout, &gc.g), QS_OK);
    ck_assert_int_eq(qs_mla_bwd(ctx, &c, &sh, &ms.w, x, dout, &gs.g), QS_OK);
    for (int h = 0; h < 2; h++) {
        ck_assert_int_eq(
            memcmp(gs.v[QS_MLA_W_UK] + h * 128, gc.v[QS_MLA_W_UKV] + h * 256, 128 * sizeof(float)),
            0);
        ck_assert_int_eq(memcmp(gs.v[QS_MLA_W_UV] + h * 128, gc.v[QS_MLA_W_UKV] + h * 256 + 128,
                                128 * sizeof(float)),
                         0);
    }
    ck_assert_int_eq(memcmp(gs.v[QS_MLA_W_O], gc.v[QS_MLA_W_O], 32 * 16 * sizeof(float)), 0);
    ck_assert_msg(cos_f(gs.dx, gc.dx, QT * QH) > 0.9999, "dx cosine %.8f",
                  cos_f(gs.dx, gc.dx, QT * QH));
    static qset a, b;
    qset_init(&a, QS_RECIPE_CURRENT);
    qset_init(&b, QS_RECIPE_CURRENT);
    qs_scope_token tok = enter_region(ctx, 1, 0, QS_RECIPE_CURRENT);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &mc.w, &a.p, x, oc), QS_OK);
    ck_assert_int_eq(qs_mla_forward(ctx, &c, &sh, &ms.w, &b.p, x, os), QS_OK);
    ck_assert_int_eq(qs_autocast_exit(ctx, tok), QS_OK);
    ck_assert_int_ne(memcmp(oc, os, sizeof oc), 0);
    ck_assert(cos_f(oc, os, QT * QH) > 0.99);
    qset_free(&a), qset_free(&b);
    qg_free(&gc), qg_free(&gs);
    free(x), free(dout);
    qw_free(&mc), qw_free(&ms);
    qs_ctx_free(ctx);
}
END_TEST

static Suite *mla_suite(void)
{
    Suite *s = suite_create("mla");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_plain_block_matches_double_reference_with_q_lora);
    tcase_add_test(tc, test_plain_block_matches_double_reference_with_single_q_proj);
    tcase_add_test(tc, test_yarn_deepseek_v3_bounds_frequencies_and_scale);
    tcase_add_test(tc, test_rope_deinterleaves_and_rotates_pairs);
    tcase_add_test(tc, test_absorbed_equals_plain_in_fp32_causal_with_yarn);
    tcase_add_test(tc, test_absorbed_equals_plain_in_fp32_unmasked);
    tcase_add_test(tc, test_absorbed_close_to_plain_in_bf16);
    tcase_add_test(tc, test_split_kv_up_projection_equals_combined_bitwise);
    tcase_add_test(tc, test_thd_equals_each_sequence_alone_bitwise);
    tcase_add_test(tc, test_kv_norm_covers_c_kv_but_not_k_pe);
    tcase_add_test(tc, test_bwd_plain_q_lora_combined_matches_finite_differences);
    tcase_add_test(tc, test_bwd_plain_single_q_split_kv_matches_finite_differences);
    tcase_add_test(tc, test_bwd_absorbed_matches_finite_differences);
    tcase_add_test(tc, test_bwd_absorbed_single_q_split_kv_matches_finite_differences);
    tcase_add_test(tc, test_bwd_absorbed_equals_plain_in_fp32);
    tcase_add_test(tc, test_bwd_absorbed_close_to_plain_in_bf16);
    tcase_add_test(tc, test_bwd_thd_matches_bshd_and_per_sequence);
    tcase_add_test(tc, test_bwd_rejects_missing_gradient);
    tcase_add_test(tc, test_bad_configuration_is_rejected);
    tcase_add_test(tc, test_quantized_plain_combined_equals_hand_composed_linears);
    tcase_add_test(tc, test_quantized_plain_split_equals_hand_composed_linears);
    tcase_add_test(tc, test_quantized_absorbed_keeps_kv_up_in_high_precision);
    tcase_add_test(tc, test_high_precision_linears_are_the_hp_linear);
    tcase_add_test(tc, test_island_runs_the_linears_in_high_precision);
    tcase_add_test(tc, test_calibrating_region_records_amax_in_high_precision);
    tcase_add_test(tc, test_quantized_linears_need_quantizers_of_the_region_recipe);
    tcase_add_test(tc, test_split_kv_is_two_linears);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(mla_suite());
}
