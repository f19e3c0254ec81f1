/* test_mla.c: the MLA block of spec/attention.md [MLA-*]: YaRN bounds and the DeepSeek-V3
 * softmax scale, RoPE on de-interleaved pairs, the plain block against a double-precision
 * MLA written here, absorbed against plain (FP32 and BF16), split against combined K/V
 * up-projections, thd against per-sequence sbhd, and the norm on c_kv only; the backward
 * [MLA-BWD] against finite differences of a double MLA, absorbed against plain, thd. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qstest.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state;

static float rnd(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(lo + (hi - lo) * ((double)(rng_state >> 11) / 9007199254740992.0));
}

static float *rbuf(size_t n, float amp, qs_dtype dt)
{
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++) {
        x[e] = rnd(-amp, amp);
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
    rng_state = seed;
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

/* [MLA-UP-PROJ] [MLA-SHAPES]: split W_UK / W_UV equal the combined [K_h; V_h] rows bitwise,
 * for the plain and the absorbed forms. */
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
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(mla_suite());
}
