/* test_recipes.c: the quantization recipes of spec/recipes.md — hand-derived known
 * answers per recipe (the numbers of docs/recipes-examples.md), special blocks, odd
 * shapes, rowwise/columnwise consistency, the dequantize-requantize fixed point, the
 * delayed-scaling update against an independent transcription, stochastic rounding, and
 * bad input. Expected values are typed in; none comes from the code under test. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "qspec/qspec.h"
#include "qstest.h"

/* ------------------------------------------------------------------ helpers */

static uint32_t f32_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

static float f32_from(uint32_t u)
{
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static qs_tensor make_f32(int64_t m, int64_t k, const float *v)
{
    qs_tensor t;
    int64_t shape[2] = {m, k};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &t, QS_FP32, 2, shape), QS_OK);
    if (v)
        memcpy(t.data, v, (size_t)(m * k) * sizeof(float));
    return t;
}

/* A BF16 tensor from FP32 values that are BF16 values already (low 16 bits zero). */
static qs_tensor make_bf16(int64_t m, int64_t k, const float *v)
{
    qs_tensor t;
    int64_t shape[2] = {m, k};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &t, QS_BF16, 2, shape), QS_OK);
    for (int64_t i = 0; i < m * k; i++) {
        uint32_t u = f32_bits(v[i]);
        ck_assert_uint_eq(u & 0xFFFF, 0);
        uint16_t h = (uint16_t)(u >> 16);
        memcpy((char *)t.data + 2 * i, &h, 2);
    }
    return t;
}

/* Code i of a code tensor, read independently of the library (E2M1: low nibble first). */
static uint32_t code_at(const qs_tensor *t, int64_t i)
{
    const uint8_t *b = t->data;
    if (t->dtype == QS_E2M1)
        return (i % 2 == 0) ? (uint32_t)(b[i / 2] & 0x0F) : (uint32_t)(b[i / 2] >> 4);
    return b[i];
}

static float f32_at(const qs_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

#define ASSERT_CODE(t, i, want)                                                                    \
    do {                                                                                           \
        uint32_t got_ = code_at((t), (i));                                                         \
        ck_assert_msg(got_ == (uint32_t)(want), "code[%lld] = 0x%02X, expected 0x%02X",            \
                      (long long)(i), got_, (unsigned)(want));                                     \
    } while (0)

#define ASSERT_BITS(v, want)                                                                       \
    do {                                                                                           \
        uint32_t got_ = f32_bits(v);                                                               \
        ck_assert_msg(got_ == (uint32_t)(want), "%s = 0x%08X (%g), expected 0x%08X", #v, got_,     \
                      (double)(v), (unsigned)(want));                                              \
    } while (0)

#define ASSERT_SHAPE(t, r, c)                                                                      \
    do {                                                                                           \
        ck_assert_int_eq((t)->ndim, 2);                                                            \
        ck_assert_int_eq((t)->shape[0], (r));                                                      \
        ck_assert_int_eq((t)->shape[1], (c));                                                      \
    } while (0)

/* Configures kind/role, then applies "key=value" options (NULL-terminated list). */
static qs_quantizer make_q(qs_recipe_kind kind, qs_tensor_role role, const char *const *opts)
{
    qs_recipe_config cfg;
    qs_quantizer q;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &cfg, kind, role), QS_OK);
    for (int i = 0; opts && opts[i]; i += 2)
        ck_assert_int_eq(qs_recipe_config_set(NULL, &cfg, opts[i], opts[i + 1]), QS_OK);
    ck_assert_int_eq(qs_quantizer_init(NULL, &q, &cfg), QS_OK);
    return q;
}

static void quant(qs_recipe_kind kind, qs_tensor_role role, const char *const *opts,
                  const qs_tensor *x, qs_quantized *out)
{
    qs_quantizer q = make_q(kind, role, opts);
    qs_ctx *ctx = qs_ctx_new();
    qs_status s = qs_quantize(ctx, &q, x, out);
    ck_assert_msg(s == QS_OK, "quantize failed: %s", qs_ctx_errmsg(ctx));
    qs_ctx_free(ctx);
    qs_quantizer_free(&q);
}

/* A small deterministic generator for property tests (xorshift32), independent of qspec. */
static uint32_t rng_next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

/* Uniform in (-1, 1), exactly representable in BF16 (8 significant bits). */
static float rng_sym(uint32_t *s)
{
    int32_t v = (int32_t)(rng_next(s) >> 24) - 128; /* -128..127 */
    return (float)v / 128.0f;
}

/* ------------------------------------------------------------------ MXFP8 */

/* The 921.6 block of docs/recipes-examples.md: x[0..3] = 921.6, -1, 0.5, 100; rest 0. */
static qs_tensor block_921_6(void)
{
    float v[32] = {921.6f, -1.0f, 0.5f, 100.0f};
    return make_f32(1, 32, v);
}

/* [REC-MX-SCALE] [REC-MX-E8M0-UP] [REC-MX-ELEM] [REC-MX-MULT]: worked example MX-1 under te. */
START_TEST(test_mx_921_6_te_scale_0x81_and_codes)
{
    qs_tensor x = block_921_6();
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 1, 1);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x81);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x76); /* 230.4 -> 224 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0xA8); /* -0.25 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 2, 0x20); /* 0.125 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x5C); /* 25 -> 24 (tie to even) */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 31, 0x00);
    qs_tensor y;
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK); /* [REC-DEQ-MX] */
    ck_assert_float_eq(f32_at(&y, 0), 896.0f);
    ck_assert_float_eq(f32_at(&y, 1), -1.0f);
    ck_assert_float_eq(f32_at(&y, 2), 0.5f);
    ck_assert_float_eq(f32_at(&y, 3), 96.0f);
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-SCALE-OCP] [REC-MX-ELEM-OCP]: worked example MX-1 under ocp. */
START_TEST(test_mx_921_6_ocp_scale_0x80_and_clamped_codes)
{
    qs_tensor x = block_921_6();
    qs_quantized z;
    const char *opts[] = {"rule", "ocp", NULL};
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, opts, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x80);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7E); /* 460.8 -> 448 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0xB0); /* -0.5 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 2, 0x28); /* 0.25 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x64); /* 50 -> 48 */
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-SCALE] [REC-MX-SCALE-OCP] [REC-MX-ELEM]: the 921.6 block with E5M2 elements:
 * te 921.6 * fl(1/57344) in [2^-6, 2^-5) rounds up to 0x7A, ocp 9 - 15 = -6 gives 0x79. */
START_TEST(test_mx_921_6_e5m2_elements)
{
    qs_tensor x = block_921_6();
    qs_quantized z;
    const char *te[] = {"elem", "e5m2", NULL};
    const char *ocp[] = {"elem", "e5m2", "rule", "ocp", NULL};
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, te, &x, &z);
    ck_assert_int_eq(z.elem, QS_E5M2);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7A);
    const uint32_t want_te[4] = {0x77, 0xD0, 0x4C, 0x6A}; /* x * 32: 29491 -> 28672, ... */
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want_te[i]);
    qs_quantized_free(&z);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x79);
    const uint32_t want_ocp[4] = {0x7B, 0xD4, 0x50, 0x6E}; /* 58982 clamps to 57344 */
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want_ocp[i]);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-SCALE] [REC-MX-SCALE-OCP]: the rules agree for amax 448 (significand 1.75) and
 * differ just above it (450.5625, significand 1.76). */
START_TEST(test_mx_rules_agree_at_1_75_and_differ_above)
{
    const char *ocp[] = {"rule", "ocp", NULL};
    float a[32] = {448.0f}, b[32] = {450.5625f};
    qs_tensor xa = make_f32(1, 32, a), xb = make_f32(1, 32, b);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &xa, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7F);
    qs_quantized_free(&z);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, &xa, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7F);
    qs_quantized_free(&z);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &xb, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x80);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x76); /* 225.28 -> 224 */
    qs_quantized_free(&z);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, &xb, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7F);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7E); /* 450.5625 clamps to 448 */
    qs_quantized_free(&z);
    qs_tensor_free(&xa);
    qs_tensor_free(&xb);
}
END_TEST

/* [REC-MX-SCALE] [REC-MX-SCALE-OCP]: an all-zero block has scale 0x00 and zero codes. */
START_TEST(test_mx_zero_block)
{
    float v[32] = {0};
    qs_tensor x = make_f32(1, 32, v);
    const char *ocp[] = {"rule", "ocp", NULL};
    for (int rule = 0; rule < 2; rule++) {
        qs_quantized z;
        quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, rule ? ocp : NULL, &x, &z);
        ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x00);
        ASSERT_CODE(&z.scale[QS_DIR_COL], 0, 0x00);
        for (int i = 0; i < 32; i++)
            ASSERT_CODE(&z.data[QS_DIR_ROW], i, 0x00);
        qs_quantized_free(&z);
    }
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AMAX] [REC-MX-SCALE] [REC-MX-MULT] [REC-MX-ELEM] [REC-MX-ELEM-OCP]: one +Inf in a
 * block. te: scale 0xFE, multiplier +0 (TE's exp2f_rcp(254)), so finite values give +-0 and
 * Inf * 0 = NaN gives 0x7F. ocp: scale NaN 0xFF, every element NaN. */
START_TEST(test_mx_inf_block_te_gives_zeros_and_nan_ocp_all_nan)
{
    float v[32] = {INFINITY, 1.0f, -300.0f, 3e38f};
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0xFE);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7F); /* Inf * 0 = NaN */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0x00);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 2, 0x80); /* -300 * 0 = -0 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x00); /* 3e38 * 0 = 0 (was 0x3E with 2^-127) */
    qs_quantized_free(&z);
    const char *ocp[] = {"rule", "ocp", NULL};
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0xFF);
    for (int i = 0; i < 32; i++)
        ck_assert_uint_eq(code_at(&z.data[QS_DIR_ROW], i) & 0x7F, 0x7F);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-MULT] [REC-MX-MULT-OCP]: a block of amax 0x00001001 (about 2^-137) has scale
 * 0x00 under both rules; te multiplies by exp2f_rcp(0) = 1, so the element is 0x00 (as TE
 * and torchao's RCEIL mode give); ocp divides by X = 2^-127 exactly: 4097 * 2^-22 is just
 * above half of E4M3's 2^-9, so 0x01. */
START_TEST(test_mx_scale_zero_block_te_multiplier_one_ocp_exact)
{
    float v[32] = {0};
    v[0] = qs_f32_from_bits(0x00001001u);
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x00);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x00);
    qs_quantized_free(&z);
    const char *ocp[] = {"rule", "ocp", NULL};
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x00);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x01);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AMAX] [REC-MX-SCALE] [REC-MX-ELEM]: a NaN is ignored by amax; it encodes to 0x7F. */
START_TEST(test_mx_single_nan_block)
{
    float v[32] = {NAN, 2.0f, -0.5f};
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x78); /* 2 * fl(1/448) in [2^-8, 2^-7) -> up */
    ck_assert_uint_eq(code_at(&z.data[QS_DIR_ROW], 0) & 0x7F, 0x7F);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0x78); /* 256 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 2, 0xE8); /* -64 */
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-PARTIAL] [REC-MX-LAYOUT]: 3x40: a trailing block of 8 takes its own amax;
 * rowwise scale [3,2], columnwise scale [1,40]. */
START_TEST(test_mx_partial_block_odd_shape)
{
    float v[3 * 40];
    for (int i = 0; i < 120; i++)
        v[i] = 1.0f;
    v[35] = 8.0f;  /* row 0, block 1 */
    v[40] = -2.0f; /* row 1, column 0 */
    qs_tensor x = make_f32(3, 40, v);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_SHAPE(&z.data[QS_DIR_ROW], 3, 40);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 3, 2);
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 3, 40);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 1, 40);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x77);  /* amax 1 */
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x7A);  /* amax 8, elements 32..39 only */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 35, 0x78);  /* 8 * 2^(127-122) = 256 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 36, 0x60);  /* 1 * 32 */
    ASSERT_CODE(&z.scale[QS_DIR_COL], 0, 0x78);  /* column 0: amax 2 */
    ASSERT_CODE(&z.scale[QS_DIR_COL], 1, 0x77);  /* column 1: amax 1 */
    ASSERT_CODE(&z.scale[QS_DIR_COL], 35, 0x7A); /* column 35: amax 8 */
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-MX-LAYOUT]: the columnwise copy of x equals the rowwise copy of x^T, transposed
 * back (data [M,K], scale [ceil(M/32), K]). */
START_TEST(test_mx_columnwise_is_rowwise_of_transpose)
{
    enum { M = 40, K = 33 };
    static float v[M * K], vt[K * M];
    uint32_t s = 12345;
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            float e = rng_sym(&s) * (float)(1 << (m % 7));
            v[m * K + k] = e;
            vt[k * M + m] = e;
        }
    qs_tensor x = make_f32(M, K, v), xt = make_f32(K, M, vt);
    qs_quantized a, b;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &a);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &xt, &b);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            ck_assert_uint_eq(code_at(&a.data[QS_DIR_COL], m * K + k),
                              code_at(&b.data[QS_DIR_ROW], k * M + m));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < K; k++)
            ck_assert_uint_eq(code_at(&a.scale[QS_DIR_COL], i * K + k),
                              code_at(&b.scale[QS_DIR_ROW], k * 2 + i));
    qs_quantized_free(&a);
    qs_quantized_free(&b);
    qs_tensor_free(&x);
    qs_tensor_free(&xt);
}
END_TEST

/* [REC-BLK-1D-COL] [REC-NV-1D-COL] [REC-LAYOUT]: the 1-D columnwise copy of x is the rowwise
 * copy of x^T (data and scales), for block and nvfp4 without the transform. */
START_TEST(test_1d_columnwise_is_rowwise_of_transpose)
{
    enum { M = 40, K = 150 };
    static float v[M * K], vt[K * M];
    uint32_t s = 2024;
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            float e = rng_sym(&s) * (float)(1 << (k % 5));
            v[m * K + k] = e;
            vt[k * M + m] = e;
        }
    qs_tensor x = make_f32(M, K, v), xt = make_f32(K, M, vt);
    const char *nv[] = {"rht", "0", "sr", "0", NULL};
    for (int r = 0; r < 2; r++) {
        qs_recipe_kind kind = r ? QS_RECIPE_NVFP4 : QS_RECIPE_BLOCK;
        qs_quantized a, b;
        quant(kind, QS_ROLE_INPUT, r ? nv : NULL, &x, &a);
        quant(kind, QS_ROLE_INPUT, r ? nv : NULL, &xt, &b);
        ck_assert_int_eq(a.data[QS_DIR_COL].nbytes, b.data[QS_DIR_ROW].nbytes);
        ck_assert_mem_eq(a.data[QS_DIR_COL].data, b.data[QS_DIR_ROW].data,
                         a.data[QS_DIR_COL].nbytes);
        ck_assert_int_eq(a.scale[QS_DIR_COL].nbytes, b.scale[QS_DIR_ROW].nbytes);
        ck_assert_mem_eq(a.scale[QS_DIR_COL].data, b.scale[QS_DIR_ROW].data,
                         a.scale[QS_DIR_COL].nbytes);
        qs_quantized_free(&a);
        qs_quantized_free(&b);
    }
    qs_tensor_free(&x);
    qs_tensor_free(&xt);
}
END_TEST

/* [REC-MX-LAYOUT]: TE's padded scale layout: rowwise [128, 4], columnwise [4, 128] for 3x40,
 * the logical entries in place and 0x00 elsewhere. */
START_TEST(test_mx_padded_scale_layout)
{
    float v[3 * 40];
    for (int i = 0; i < 120; i++)
        v[i] = 1.0f;
    v[35] = 8.0f;
    qs_tensor x = make_f32(3, 40, v);
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    qs_tensor p;
    ck_assert_int_eq(qs_scale_padded(NULL, &z, QS_DIR_ROW, &p), QS_OK);
    ASSERT_SHAPE(&p, 128, 4);
    ASSERT_CODE(&p, 0, 0x77);
    ASSERT_CODE(&p, 1, 0x7A);
    ASSERT_CODE(&p, 2, 0x00);
    ASSERT_CODE(&p, 4, 0x77); /* row 1 */
    ASSERT_CODE(&p, 3 * 4, 0x00);
    qs_tensor_free(&p);
    ck_assert_int_eq(qs_scale_padded(NULL, &z, QS_DIR_COL, &p), QS_OK);
    ASSERT_SHAPE(&p, 4, 128);
    ASSERT_CODE(&p, 35, 0x7A);
    ASSERT_CODE(&p, 40, 0x00);
    ASSERT_CODE(&p, 128, 0x00);
    qs_tensor_free(&p);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-DEQ-ROUNDTRIP]: the te rule is not a fixed point: the 921.6 block dequantizes to
 * amax 896 = 2 * 448, which requantizes with scale 0x80. */
START_TEST(test_mx_te_requantize_of_921_6_moves_to_0x80)
{
    qs_tensor x = block_921_6(), y;
    qs_quantized z, z2;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &y, &z2);
    ASSERT_CODE(&z2.scale[QS_DIR_ROW], 0, 0x80);
    ASSERT_CODE(&z2.data[QS_DIR_ROW], 0, 0x7E); /* 896 / 2 = 448 */
    qs_quantized_free(&z);
    qs_quantized_free(&z2);
    qs_tensor_free(&x);
    qs_tensor_free(&y);
}
END_TEST

/* ------------------------------------------------------------------ current scaling */

static const float cs_x[4] = {1.0f, -2.0f, 3.0f, 0.5f};

/* [REC-CS-SCALE] [REC-ELEM] [REC-LAYOUT] [REC-TW-ELEM] [REC-TW-LAYOUT]: worked example CS-1. */
START_TEST(test_cs_known_answer)
{
    qs_tensor x = make_f32(2, 2, cs_x);
    qs_quantized z;
    quant(QS_RECIPE_CURRENT, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_int_eq(z.elem, QS_E4M3);
    ASSERT_BITS(z.global_enc[QS_DIR_ROW], 0x43155555); /* fl(448/3) */
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), 0x3BDB6DB7);
    ck_assert_float_eq(z.amax[QS_DIR_ROW], 3.0f);
    const uint32_t want[4] = {0x71, 0xF9, 0x7E, 0x69};
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want[i]);
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 2, 2); /* transposed: [0,1] holds x[1,0] */
    ASSERT_CODE(&z.data[QS_DIR_COL], 1, 0x7E);
    ASSERT_CODE(&z.data[QS_DIR_COL], 2, 0xF9);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-CS-POW2] [REC-DEQ-TW]: worked example CS-2: scale 128, exact dequantization. */
START_TEST(test_cs_pow2_known_answer)
{
    qs_tensor x = make_f32(2, 2, cs_x), y;
    qs_quantized z;
    const char *opts[] = {"pow2", "1", NULL};
    quant(QS_RECIPE_CURRENT, QS_ROLE_INPUT, opts, &x, &z);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 128.0f);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 0), 0.0078125f);
    const uint32_t want[4] = {0x70, 0xF8, 0x7C, 0x68};
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want[i]);
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_COL, &y), QS_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(f32_at(&y, i), cs_x[i]);
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-DS-HYBRID] [REC-CS-POW2]: a gradient role encodes E5M2 with max 57344. */
START_TEST(test_cs_hybrid_gradient_uses_e5m2)
{
    qs_tensor x = make_f32(2, 2, cs_x);
    qs_quantized z;
    const char *opts[] = {"pow2", "1", NULL};
    quant(QS_RECIPE_CURRENT, QS_ROLE_GRAD_OUTPUT, opts, &x, &z);
    ck_assert_int_eq(z.elem, QS_E5M2);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 16384.0f);
    const uint32_t want[4] = {0x74, 0xF8, 0x7A, 0x70};
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want[i]);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-CS-SCALE] [REC-CS-POW2]: the scale rule's special cases, typed from the spec. */
START_TEST(test_cs_scale_rule_special_cases)
{
    ck_assert_float_eq(qs_scale_from_amax(0.0f, 448.0f, 0.0f, 0, FLT_MAX), 1.0f);
    ck_assert_float_eq(qs_scale_from_amax(INFINITY, 448.0f, 0.0f, 0, FLT_MAX), 1.0f);
    ck_assert_float_eq(qs_scale_from_amax(NAN, 448.0f, 0.0f, 0, FLT_MAX), 1.0f);
    float tiny = f32_from(0x00000001); /* 2^-149: 448 / tiny overflows */
    ASSERT_BITS(qs_scale_from_amax(tiny, 448.0f, 0.0f, 0, FLT_MAX), 0x7F7FFFFF);
    ASSERT_BITS(qs_scale_from_amax(tiny, 448.0f, 0.0f, 1, FLT_MAX), 0x7F000000);
    /* eps floors the amax: amax 0 with eps 2 gives 448/2 */
    ck_assert_float_eq(qs_scale_from_amax(0.0f, 448.0f, 2.0f, 0, FLT_MAX), 224.0f);
    ck_assert_float_eq(qs_scale_from_amax(3.0f, 448.0f, 0.0f, 1, FLT_MAX), 128.0f);
}
END_TEST

/* [REC-AMAX] [REC-CS-AMAX] [REC-CS-SCALE]: Inf in the tensor gives scale 1 and Inf -> 448; NaN is
 * ignored. */
START_TEST(test_cs_inf_and_nan_inputs)
{
    float v[4] = {INFINITY, -2.0f, NAN, 0.5f};
    qs_tensor x = make_f32(1, 4, v);
    qs_quantized z;
    quant(QS_RECIPE_CURRENT, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 1.0f);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7E);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0xC0);
    ck_assert_uint_eq(code_at(&z.data[QS_DIR_ROW], 2) & 0x7F, 0x7F);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x30);
    qs_quantized_free(&z);
    v[0] = 7.0f; /* NaN alone does not reach the amax: amax 7 */
    qs_tensor_free(&x);
    x = make_f32(1, 4, v);
    quant(QS_RECIPE_CURRENT, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_float_eq(z.amax[QS_DIR_ROW], 7.0f);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 64.0f);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ delayed scaling */

/* Quantizes a 1x1 tensor holding v with q (so the recorded amax is |v|). */
static void ds_step(qs_quantizer *q, float v)
{
    qs_tensor x = make_f32(1, 1, &v);
    qs_quantized z;
    ck_assert_int_eq(qs_quantize(NULL, q, &x, &z), QS_OK);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}

/* [REC-DS-STATE] [REC-DS-RECORD] [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED] [REC-DS-SCALE]:
 * worked example DS-1, L = 4: amaxes 2, 0, 4, 0, 0, 0, 0, 1. */
START_TEST(test_ds_worked_example_fused_and_unfused)
{
    const char *fused[] = {"history", "4", NULL};
    const char *unfused[] = {"history", "4", "roll", "unfused", NULL};
    qs_quantizer a = make_q(QS_RECIPE_DELAYED, QS_ROLE_INPUT, fused);
    qs_quantizer b = make_q(QS_RECIPE_DELAYED, QS_ROLE_INPUT, unfused);
    ck_assert_float_eq(a.ds.scale, 1.0f);
    ck_assert_float_eq(a.ds.scale_inv, 1.0f);
    const float steps[8] = {2, 0, 4, 0, 0, 0, 0, 1};
    const float want_a[8] = {224, 224, 112, 112, 112, 112, 112, 112};
    const float want_b[8] = {224, 224, 112, 112, 112, 112, 112, 448};
    for (int t = 0; t < 8; t++) {
        ds_step(&a, steps[t]);
        ds_step(&b, steps[t]);
        ck_assert_int_eq(qs_delayed_update(NULL, &a), QS_OK);
        ck_assert_int_eq(qs_delayed_update(NULL, &b), QS_OK);
        ck_assert_msg(a.ds.scale == want_a[t], "fused step %d: scale %g", t, (double)a.ds.scale);
        ck_assert_msg(b.ds.scale == want_b[t], "unfused step %d: scale %g", t, (double)b.ds.scale);
        if (t == 2) {
            const float ha[4] = {0, 0, 2, 4}, hb[4] = {0, 2, 0, 4};
            for (int i = 0; i < 4; i++) {
                ck_assert_float_eq(a.ds.history[i], ha[i]);
                ck_assert_float_eq(b.ds.history[i], hb[i]);
            }
        }
    }
    ASSERT_BITS(a.ds.scale_inv, 0x3C124925); /* fl(1/112) */
    qs_quantizer_free(&a);
    qs_quantizer_free(&b);
}
END_TEST

/* An independent transcription of [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED] [REC-DS-SCALE]
 * for finite and infinite amaxes (no NaN). */
typedef struct ref_ds {
    float h[16];
    int len;
    float scale;
} ref_ds;

static void ref_ds_update(ref_ds *r, int unfused, int most_recent, float fp8_max, int margin)
{
    float amax = 0.0f;
    int n = r->len;
    if (!unfused) {
        float last = r->h[0];
        if (last == 0.0f)
            return; /* no roll, scale kept */
        float w[16];
        for (int i = 0; i + 1 < n; i++)
            w[i] = r->h[i + 1];
        w[n - 1] = last;
        for (int i = 0; i < n; i++)
            amax = w[i] > amax ? w[i] : amax;
        if (most_recent)
            amax = last;
        for (int i = 0; i < n; i++)
            r->h[i] = i == 0 ? 0.0f : w[i];
    } else {
        for (int i = 0; i < n; i++)
            amax = r->h[i] > amax ? r->h[i] : amax;
        if (most_recent)
            amax = r->h[0];
        float w[16];
        for (int i = 0; i < n; i++)
            w[i] = r->h[(i + 1) % n];
        for (int i = 0; i < n; i++)
            r->h[i] = i == 0 ? 0.0f : w[i];
    }
    if (amax > 0.0f && amax < INFINITY) {
        float num = fp8_max;
        for (int i = 0; i < margin; i++)
            num = num / 2.0f;
        r->scale = num / amax;
    }
    if (r->scale == INFINITY)
        r->scale = FLT_MAX;
}

/* [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED] [REC-DS-SCALE] [REC-DS-HYBRID] [REC-DS-RECORD]:
 * 300 steps of random amaxes (zeros, tiny, Inf included), every variant, against the
 * transcription above. */
START_TEST(test_ds_update_sequence_matches_transcription)
{
    for (int variant = 0; variant < 8; variant++) {
        int unfused = variant & 1, most_recent = (variant >> 1) & 1, grad = variant >> 2;
        const char *opts[] = {"history", "7",
                              "margin",  "1",
                              "roll",    unfused ? "unfused" : "fused",
                              "algo",    most_recent ? "most_recent" : "max",
                              NULL};
        qs_quantizer q =
            make_q(QS_RECIPE_DELAYED, grad ? QS_ROLE_GRAD_INPUT : QS_ROLE_WEIGHT, opts);
        ref_ds r = {{0}, 7, 1.0f};
        float fp8_max = grad ? 57344.0f : 448.0f;
        uint32_t s = 777u + (uint32_t)variant;
        for (int t = 0; t < 300; t++) {
            uint32_t u = rng_next(&s);
            float v = (u % 5 == 0) ? 0.0f : (float)(u >> 8) / 1024.0f;
            if (u % 97 == 0)
                v = INFINITY;
            if (u % 89 == 0)
                v = f32_from(0x00000003); /* 448 / v overflows to Inf -> FLT_MAX */
            int substeps = 1 + (int)(u % 3);
            for (int k = 0; k < substeps; k++) { /* several quantizations per step */
                float vk = v / (float)(k + 1);
                ds_step(&q, vk);
                r.h[0] = vk > r.h[0] ? vk : r.h[0];
            }
            ck_assert_int_eq(qs_delayed_update(NULL, &q), QS_OK);
            ref_ds_update(&r, unfused, most_recent, fp8_max, 1);
            ck_assert_msg(f32_bits(q.ds.scale) == f32_bits(r.scale),
                          "variant %d step %d: scale 0x%08X, expected 0x%08X", variant, t,
                          f32_bits(q.ds.scale), f32_bits(r.scale));
            ck_assert_uint_eq(f32_bits(q.ds.scale_inv), f32_bits(1.0f / r.scale));
            for (int i = 0; i < 7; i++)
                ck_assert_uint_eq(f32_bits(q.ds.history[i]), f32_bits(r.h[i]));
        }
        qs_quantizer_free(&q);
    }
}
END_TEST

/* [REC-DS-QUANT] [REC-DS-HYBRID]: quantization uses the stored scale; gradients are E5M2. */
START_TEST(test_ds_quantize_uses_stored_scale)
{
    const char *opts[] = {"history", "2", NULL};
    qs_quantizer q = make_q(QS_RECIPE_DELAYED, QS_ROLE_GRAD_OUTPUT, opts);
    float v[2] = {3.0f, -0.5f};
    qs_tensor x = make_f32(1, 2, v);
    qs_quantized z;
    ck_assert_int_eq(qs_quantize(NULL, &q, &x, &z), QS_OK); /* step 1: scale 1 */
    ck_assert_int_eq(z.elem, QS_E5M2);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x42); /* 3 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0xB8); /* -0.5 */
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 0), 1.0f);
    qs_quantized_free(&z);
    ck_assert_int_eq(qs_delayed_update(NULL, &q), QS_OK);
    ASSERT_BITS(q.ds.scale, 0x46955555); /* fl(57344/3) */
    ck_assert_int_eq(qs_quantize(NULL, &q, &x, &z), QS_OK);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7B); /* 3 * scale = 57344 */
    qs_quantized_free(&z);
    qs_tensor_free(&x);
    qs_quantizer_free(&q);
}
END_TEST

/* [REC-DS-CALIB]: calibration overwrites slot 0 with NaN-propagating amax; no roll. */
START_TEST(test_ds_calibration_propagates_nan)
{
    const char *opts[] = {"history", "3", NULL};
    qs_quantizer q = make_q(QS_RECIPE_DELAYED, QS_ROLE_INPUT, opts);
    ds_step(&q, 8.0f);
    float v[3] = {1.0f, NAN, 2.0f};
    qs_tensor x = make_f32(1, 3, v);
    ck_assert_int_eq(qs_delayed_calibrate(NULL, &q, &x), QS_OK);
    ck_assert(isnan(q.ds.history[0]));
    ck_assert_float_eq(q.ds.scale, 1.0f);
    v[1] = -1.5f;
    qs_tensor_free(&x);
    x = make_f32(1, 3, v);
    ck_assert_int_eq(qs_delayed_calibrate(NULL, &q, &x), QS_OK);
    ck_assert_float_eq(q.ds.history[0], 2.0f); /* overwrite, not max with 8 */
    ck_assert_float_eq(q.ds.history[1], 0.0f);
    qs_tensor_free(&x);
    qs_quantizer_free(&q);
}
END_TEST

/* ------------------------------------------------------------------ block scaling */

/* [REC-BLK-SCALE] [REC-BLK-1D] [REC-BLK-1D-COL] [REC-BLK-PARTIAL]: worked example BLK-1. */
START_TEST(test_blk_1x128_known_answer_with_partial_block)
{
    static float v[130];
    for (int i = 0; i < 130; i++)
        v[i] = 1.0f;
    v[5] = 3.0f;
    v[128] = 0.1f;
    v[129] = -0.05f;
    qs_tensor x = make_f32(1, 130, v);
    qs_quantized z;
    quant(QS_RECIPE_BLOCK, QS_ROLE_INPUT, NULL, &x, &z);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 1, 2);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 0), 0.0078125f);      /* 1/128 */
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 1), 0.000244140625f); /* 2^-12 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 5, 0x7C);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x70);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 128, 0x7D);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 129, 0xF5);
    /* columnwise: x^T is 130x1, every element its own block */
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 130, 1);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 130, 1);
    ASSERT_CODE(&z.data[QS_DIR_COL], 5, 0x7C);
    ASSERT_CODE(&z.data[QS_DIR_COL], 0, 0x78); /* 1 * 256 */
    ASSERT_CODE(&z.data[QS_DIR_COL], 128, 0x7D);
    ASSERT_CODE(&z.data[QS_DIR_COL], 129, 0xFD); /* -0.05 * 8192 */
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_COL], 0), 0.00390625f);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-BLK-2D] [REC-BLK-2D-COL] [REC-DEQ-BLK]: a weight is one 128x128 tile; the columnwise
 * copy is the transpose of the codes and shares the scale. */
START_TEST(test_blk_128x128_weight_shares_scale)
{
    const float v[6] = {1.0f, -2.0f, 0.3f, -5.0f, 2.5f, 0.0f};
    qs_tensor x = make_f32(2, 3, v), y;
    qs_quantized z;
    quant(QS_RECIPE_BLOCK, QS_ROLE_WEIGHT, NULL, &x, &z);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 1, 1);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 1, 1);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 0), 0.015625f);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_COL], 0), 0.015625f);
    const uint32_t want[6] = {0x68, 0xF0, 0x5A, 0xFA, 0x72, 0x00};
    for (int i = 0; i < 6; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want[i]);
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 3, 2);
    ASSERT_CODE(&z.data[QS_DIR_COL], 1, 0xFA); /* x[1,0] */
    ASSERT_CODE(&z.data[QS_DIR_COL], 2, 0xF0); /* x[0,1] */
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_COL, &y), QS_OK);
    ck_assert_float_eq(f32_at(&y, 2), 0.3125f); /* 20 / 64 */
    ck_assert_float_eq(f32_at(&y, 3), -5.0f);
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-BLK-INF]: a scale that overflows becomes the input dtype's max (then pow2 or not). */
START_TEST(test_blk_value_for_inf_is_input_dtype_max)
{
    float v[1] = {f32_from(0x00800000)}; /* 2^-126: 448 / v overflows */
    const char *fp32s[] = {"pow2", "0", NULL};
    qs_tensor xb = make_bf16(1, 1, v), xf = make_f32(1, 1, v);
    qs_quantized z;
    quant(QS_RECIPE_BLOCK, QS_ROLE_INPUT, fp32s, &xb, &z);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), 0x00202020); /* 1 / 0x1.FEp127 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x48);
    qs_quantized_free(&z);
    quant(QS_RECIPE_BLOCK, QS_ROLE_INPUT, fp32s, &xf, &z);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), 0x00200000); /* 1 / FLT_MAX */
    qs_quantized_free(&z);
    quant(QS_RECIPE_BLOCK, QS_ROLE_INPUT, NULL, &xb, &z);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), 0x00400000); /* pow2: 1 / 2^127 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x40);                /* 2 */
    qs_quantized_free(&z);
    qs_tensor_free(&xb);
    qs_tensor_free(&xf);
}
END_TEST

/* [REC-AMAX] [REC-BLK-SCALE]: zero, Inf and NaN blocks of 1x128. */
START_TEST(test_blk_zero_inf_nan_blocks)
{
    static float v[3 * 128];
    memset(v, 0, sizeof v);
    v[128] = INFINITY;
    v[129] = 4.0f;
    v[256] = NAN;
    v[257] = 7.0f;
    qs_tensor x = make_f32(3, 128, v);
    qs_quantized z;
    quant(QS_RECIPE_BLOCK, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 0), 1.0f);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x00);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 1), 1.0f); /* Inf amax -> scale 1 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 128, 0x7E);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 129, 0x48);
    ck_assert_float_eq(f32_at(&z.scale[QS_DIR_ROW], 2), 0.015625f); /* amax 7 -> 64 */
    ck_assert_uint_eq(code_at(&z.data[QS_DIR_ROW], 256) & 0x7F, 0x7F);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ NVFP4 */

static const char *const nv_plain[] = {"rht", "0", "sr", "0", NULL};

/* [REC-NV-1D] [REC-NV-GLOBAL] [REC-NV-SCALE] [REC-NV-ELEM]: worked example NV-1: amax 6 gives
 * S_enc 448, block scale 448, multiplier 1; E2M1 ties to even. */
START_TEST(test_nv_known_answer_amax_6)
{
    float v[16] = {6.0f, -3.0f, 2.5f, 1.25f, 0.25f, 0.75f, 5.0f, -0.1f};
    qs_tensor x = make_f32(1, 16, v), y;
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ASSERT_BITS(z.global_enc[QS_DIR_ROW], 0x43E00000);
    ASSERT_BITS(z.global_dec[QS_DIR_ROW], 0x3B124925);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 1, 1);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7E);
    const uint32_t want[9] = {0x7, 0xD, 0x4, 0x2, 0x0, 0x2, 0x6, 0x8, 0x0};
    for (int i = 0; i < 9; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, want[i]);
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
    ck_assert_float_eq(f32_at(&y, 1), -3.0f);
    ck_assert_float_eq(f32_at(&y, 6), 4.0f);
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-GLOBAL] [REC-NV-SCALE] [REC-NV-ELEM] [REC-DEQ-NV]: worked example NV-2: two blocks. */
START_TEST(test_nv_known_answer_two_blocks)
{
    float v[32] = {12.0f};
    v[16] = 1.0f;
    v[17] = 0.5f;
    v[18] = -1.0f;
    v[19] = 0.25f;
    qs_tensor x = make_f32(1, 32, v), y;
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ASSERT_BITS(z.global_enc[QS_DIR_ROW], 0x43600000); /* 224 */
    ASSERT_BITS(z.global_dec[QS_DIR_ROW], 0x3B924925); /* fl(1/224) */
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7E);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x61); /* 37.33 -> 36 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7);   /* 12 * 0.5 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 16, 0x7);  /* 6.22 -> 6 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 17, 0x5);  /* 3.11 -> 3 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 18, 0xF);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 19, 0x3); /* 1.56 -> 1.5 */
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
    ck_assert_float_eq(f32_at(&y, 0), 12.0f);                           /* 6 * (448 / 224) */
    ASSERT_BITS(f32_at(&y, 17), f32_bits(3.0f * f32_from(0x3E24924A))); /* 3 * fl(36*S_dec) */
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-TORCHAO]: torchao 0.18.0 multiplies by (1/pts)/d. With A = 0x40F90304,
 * pts = 0x3B3DB928 and a block of amax 0x40BF8206 (scale 352, 0x7B), x = 0x406442C4 scales to
 * just above the tie 3.5 and gives 4 (0x6); the older x / (pts * d) lands below it and gives
 * 3 (0x5). Values from a numpy float32 model of both formulas. */
START_TEST(test_nv_torchao_018_multiplies_by_the_reciprocal_scale)
{
    float v[32] = {0};
    v[0] = qs_f32_from_bits(0x40F90304u);
    v[16] = qs_f32_from_bits(0x40BF8206u);
    v[17] = qs_f32_from_bits(0x406442C4u);
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    const char *ao[] = {"rht", "0", "sr", "0", "variant", "torchao", NULL};
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, ao, &x, &z);
    ASSERT_BITS(z.global_dec[QS_DIR_ROW], 0x3B3DB928);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x7B);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 17, 0x6);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-SCALE] [REC-NV-TORCHAO] [REC-DEQ-NV-TORCHAO] [REC-VARIANTS]: worked example NV-3, a tiny
 * block: te's subnormal block scale 2^-7 (0x04) against torchao's 2^-6 floor (0x08); elements 6
 * against 3. */
START_TEST(test_nv_te_and_torchao_differ_on_tiny_block)
{
    float v[32] = {6.0f};
    v[16] = 1e-4f;
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x04);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 16, 0x7);
    qs_quantized_free(&z);
    const char *ao[] = {"rht", "0", "sr", "0", "variant", "torchao", NULL};
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, ao, &x, &z);
    ASSERT_BITS(z.global_dec[QS_DIR_ROW], 0x3B124925); /* 6 / 2688 */
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7E);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x08);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 16, 0x5); /* 2.87 -> 3 */
    qs_tensor y;
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
    ASSERT_BITS(f32_at(&y, 0), 0x40C00001);  /* fl(fl(6 * 448) * pts) */
    ASSERT_BITS(f32_at(&y, 16), 0x38DB6DB8); /* fl(fl(3 * 2^-6) * pts) */
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-GLOBAL] [REC-NV-TORCHAO-ZERO]: an all-zero tensor: S_enc 1, codes 0. */
START_TEST(test_nv_zero_tensor)
{
    float v[16] = {0};
    qs_tensor x = make_f32(1, 16, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 1.0f);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x00);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x0);
    qs_quantized_free(&z);
    const char *ao[] = {"rht", "0", "sr", "0", "variant", "torchao", NULL};
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, ao, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x08);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 3, 0x0);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-TORCHAO] [REC-NV-TORCHAO-NAN]: variant torchao where its arithmetic makes NaNs.
 * An Inf gives pts = Inf: its block scale (Inf/6)/Inf is NaN, encoded 0x7F, and its elements
 * NaN, encoded +6; a finite block's scale 0.5/Inf = 0 clamps to 2^-6 and its multiplier
 * (1/Inf)/2^-6 = 0 gives code 0. A tensor amax of 2^-135 gives a subnormal pts (6 * 2^-149),
 * 1/pts = Inf: the block scale 2731/6 = 455.2 clamps to 448 (0x7E), 2^-135 * Inf clamps to 6,
 * and a zero element gives 0 * Inf = NaN, encoded +6 (torchao 0.18.0 gives 0xB there). */
START_TEST(test_nv_torchao_nan_cases)
{
    const char *ao[] = {"rht", "0", "sr", "0", "variant", "torchao", NULL};
    float v[32] = {INFINITY, 1.0f};
    v[16] = 3.0f;
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, ao, &x, &z);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7F);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0x7);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x08);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 16, 0x0);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
    float w[16] = {0};
    w[0] = qs_f32_from_bits(0x00004000u); /* 2^-135 */
    x = make_f32(1, 16, w);
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, ao, &x, &z);
    ASSERT_BITS(z.global_dec[QS_DIR_ROW], 0x00000006);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7E);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0x7);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AMAX] [REC-NV-GLOBAL] [REC-NV-SCALE]: Inf gives S_enc 1 and a block scale of 448;
 * Inf encodes to 6 and NaN to +6 (satfinite). */
START_TEST(test_nv_inf_and_nan)
{
    float v[32] = {INFINITY, 1.0f};
    v[16] = NAN;
    v[17] = 3.0f;
    qs_tensor x = make_f32(1, 32, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ck_assert_float_eq(z.global_enc[QS_DIR_ROW], 1.0f);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 0, 0x7E);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 1, 0x0);   /* 1/448 -> 0 */
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x30); /* 3 * (1 * fl(1/6)) rounds to 0.5 */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 16, 0x7);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-PARTIAL] [REC-NV-1D-COL] [REC-NV-LAYOUT]: 3x20: blocks of 16 and 4 per row;
 * columnwise = x^T [20,3] with one partial block per row; padded layout [128, 4]. */
START_TEST(test_nv_partial_blocks_and_transposed_columnwise)
{
    float v[60];
    for (int i = 0; i < 60; i++)
        v[i] = 0.5f;
    v[18] = 6.0f; /* row 0, block 1 */
    qs_tensor x = make_f32(3, 20, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv_plain, &x, &z);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 3, 2);
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 20, 3);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 20, 1);
    ASSERT_CODE(&z.scale[QS_DIR_ROW], 1, 0x7E); /* amax 6 == global amax */
    ASSERT_CODE(&z.data[QS_DIR_ROW], 18, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 19, 0x1);
    ASSERT_CODE(&z.scale[QS_DIR_COL], 18, 0x7E); /* column 18 holds the 6 */
    ASSERT_CODE(&z.data[QS_DIR_COL], 18 * 3, 0x7);
    ASSERT_CODE(&z.data[QS_DIR_COL], 18 * 3 + 1, 0x1);
    qs_tensor p;
    ck_assert_int_eq(qs_scale_padded(NULL, &z, QS_DIR_COL, &p), QS_OK);
    ASSERT_SHAPE(&p, 128, 4);
    ASSERT_CODE(&p, 18 * 4, 0x7E);
    ASSERT_CODE(&p, 18 * 4 + 1, 0x00);
    qs_tensor_free(&p);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-2D] [REC-NV-2D-COL]: a 16x16 weight tile has one scale; the columnwise copy is the
 * transpose of the codes. */
START_TEST(test_nv_16x16_weight_transpose_shares_codes)
{
    static float v[32 * 16];
    uint32_t s = 99;
    for (int i = 0; i < 32 * 16; i++)
        v[i] = rng_sym(&s) * 6.0f;
    qs_tensor x = make_f32(32, 16, v);
    qs_quantized z;
    quant(QS_RECIPE_NVFP4, QS_ROLE_WEIGHT, NULL, &x, &z);
    ck_assert_int_eq(z.cfg.tile_2d, 1);
    ck_assert_int_eq(z.cfg.rht, 0);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 2, 1);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 1, 2);
    for (int m = 0; m < 32; m++)
        for (int k = 0; k < 16; k++)
            ck_assert_uint_eq(code_at(&z.data[QS_DIR_ROW], m * 16 + k),
                              code_at(&z.data[QS_DIR_COL], k * 32 + m));
    ck_assert_uint_eq(code_at(&z.scale[QS_DIR_ROW], 1), code_at(&z.scale[QS_DIR_COL], 1));
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-RHT] [REC-NV-RHT-SIGNS]: a 16x1 BF16 column e_3 * 4 transforms to
 * -s_3 * H[3][j] = -(+1,-1,-1,+1, ...); amax 1 after the transform; codes +-6. */
START_TEST(test_nv_rht_known_answer)
{
    float v[16] = {0};
    v[3] = 4.0f;
    qs_tensor x = make_bf16(16, 1, v), y;
    qs_quantized z;
    const char *opts[] = {"sr", "0", NULL};
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, opts, &x, &z);
    ck_assert_int_eq(z.cfg.rht, 1);
    ck_assert_float_eq(z.amax[QS_DIR_COL], 1.0f);
    ck_assert_float_eq(z.amax[QS_DIR_ROW], 4.0f);
    /* H[3][j] = (-1)^popcount(3 & j); s_3 = -1, so y_j = -H[3][j] */
    const uint32_t want[16] = {0xF, 0x7, 0x7, 0xF, 0xF, 0x7, 0x7, 0xF,
                               0xF, 0x7, 0x7, 0xF, 0xF, 0x7, 0x7, 0xF};
    for (int j = 0; j < 16; j++)
        ASSERT_CODE(&z.data[QS_DIR_COL], j, want[j]);
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_COL, &y), QS_OK);
    ck_assert_float_eq(f32_at(&y, 0), -1.0f); /* transformed values, no inverse */
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    v[3] = 0.0f;
    v[0] = 4.0f; /* e_0: every output s_0 * H[0][j] = +1 */
    qs_tensor_free(&x);
    x = make_bf16(16, 1, v);
    quant(QS_RECIPE_NVFP4, QS_ROLE_INPUT, opts, &x, &z);
    for (int j = 0; j < 16; j++)
        ASSERT_CODE(&z.data[QS_DIR_COL], j, 0x7);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-RHT] [REC-INPUT]: the transform needs BF16 input and rows a multiple of 16. */
START_TEST(test_nv_rht_rejects_fp32_and_ragged_rows)
{
    float v[17 * 2] = {0};
    qs_tensor xf = make_f32(16, 2, v), xb = make_bf16(17, 2, v);
    qs_quantizer q = make_q(QS_RECIPE_NVFP4, QS_ROLE_INPUT, NULL);
    qs_ctx *ctx = qs_ctx_new();
    qs_quantized z;
    ck_assert_int_eq(qs_quantize(ctx, &q, &xf, &z), QS_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "bf16"));
    ck_assert_int_eq(qs_quantize(ctx, &q, &xb, &z), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "multiple of 16"));
    qs_ctx_free(ctx);
    qs_quantizer_free(&q);
    qs_tensor_free(&xf);
    qs_tensor_free(&xb);
}
END_TEST

/* The SR tensor of test_nv_sr_*: rows of 16: an anchor 6 and fifteen 2.5 (halfway 2..3). */
static qs_tensor sr_input(void)
{
    static float v[64 * 16];
    for (int i = 0; i < 64 * 16; i++)
        v[i] = (i % 16 == 0) ? 6.0f : 2.5f;
    return make_f32(64, 16, v);
}

/* [REC-NV-SR] [RNG-SR-BITS]: the same seed gives the same codes; another seed differs. */
START_TEST(test_nv_sr_same_seed_same_bits)
{
    qs_tensor x = sr_input();
    const char *s1[] = {"rht", "0", "seed", "1", NULL};
    const char *s2[] = {"rht", "0", "seed", "2", NULL};
    qs_quantized a, b, c;
    quant(QS_RECIPE_NVFP4, QS_ROLE_GRAD_OUTPUT, s1, &x, &a);
    quant(QS_RECIPE_NVFP4, QS_ROLE_GRAD_OUTPUT, s1, &x, &b);
    quant(QS_RECIPE_NVFP4, QS_ROLE_GRAD_OUTPUT, s2, &x, &c);
    ck_assert_int_eq(a.cfg.sr, 1);
    ck_assert_mem_eq(a.data[QS_DIR_ROW].data, b.data[QS_DIR_ROW].data, a.data[QS_DIR_ROW].nbytes);
    ck_assert_mem_eq(a.data[QS_DIR_COL].data, b.data[QS_DIR_COL].data, a.data[QS_DIR_COL].nbytes);
    ck_assert(memcmp(a.data[QS_DIR_ROW].data, c.data[QS_DIR_ROW].data, a.data[QS_DIR_ROW].nbytes) !=
              0);
    qs_quantized_free(&a);
    qs_quantized_free(&b);
    qs_quantized_free(&c);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-NV-SR]: the mean of stochastically rounded 2.5s is about 2.5; RNE gives exactly 2. */
START_TEST(test_nv_sr_mean_is_unbiased)
{
    qs_tensor x = sr_input(), y;
    const char *sr[] = {"rht", "0", "columnwise", "0", "seed", "7", NULL};
    const char *rne[] = {"rht", "0", "columnwise", "0", "sr", "0", NULL};
    for (int pass = 0; pass < 2; pass++) {
        qs_quantized z;
        quant(QS_RECIPE_NVFP4, QS_ROLE_GRAD_OUTPUT, pass ? rne : sr, &x, &z);
        ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
        double sum = 0.0;
        int n = 0, twos = 0;
        for (int i = 0; i < 64 * 16; i++) {
            if (i % 16 == 0)
                continue;
            float e = f32_at(&y, i);
            ck_assert(e == 2.0f || e == 3.0f);
            twos += e == 2.0f;
            sum += e;
            n++;
        }
        double mean = sum / n;
        if (pass == 0)
            ck_assert_msg(fabs(mean - 2.5) < 0.08, "SR mean %g", mean);
        else
            ck_assert_int_eq(twos, n);
        qs_tensor_free(&y);
        qs_quantized_free(&z);
    }
    qs_tensor_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ axiswise (torchao) */

/* [REC-AX-SCALE] [REC-AX-POW2]: torchao's amax_to_scale, values typed from the rule: the
 * binary64 eps 1e-12, 448/3 rounded once, the power of two at or below, 0 for Inf. */
START_TEST(test_ax_scale_rule_known_answers)
{
    ASSERT_BITS(qs_axiswise_scale_from_amax(0.0f, 448.0f, 0), 0x57CBBA10u); /* fl32(448/1e-12) */
    ASSERT_BITS(qs_axiswise_scale_from_amax(0.0f, 448.0f, 1), 0x57800000u); /* 2^48 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(1e-13f, 448.0f, 1), 0x57800000u);
    ASSERT_BITS(qs_axiswise_scale_from_amax(1.0f, 448.0f, 0), 0x43E00000u); /* 448 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(1.0f, 448.0f, 1), 0x43800000u); /* 256 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(3.0f, 448.0f, 0), 0x43155555u); /* 149.33 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(3.0f, 448.0f, 1), 0x43000000u); /* 128 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(448.0f, 448.0f, 1), 0x3F800000u);
    ASSERT_BITS(qs_axiswise_scale_from_amax(449.0f, 448.0f, 1), 0x3F000000u);
    ASSERT_BITS(qs_axiswise_scale_from_amax(1.0f, 57344.0f, 1), 0x47000000u); /* E5M2: 2^15 */
    ASSERT_BITS(qs_axiswise_scale_from_amax(INFINITY, 448.0f, 1), 0x00000000u);
    ck_assert(isnan(qs_axiswise_scale_from_amax(NAN, 448.0f, 1)));
    /* 448 / 0x3FE00001 = 255.99998: the exact floor is 128 (torch's float32 log2 gives 256) */
    ASSERT_BITS(qs_axiswise_scale_from_amax(f32_from(0x3FE00001u), 448.0f, 0), 0x437FFFFFu);
    ASSERT_BITS(qs_axiswise_scale_from_amax(f32_from(0x3FE00001u), 448.0f, 1), 0x43000000u);
}
END_TEST

/* [REC-AX-ROW] [REC-AX-COL] [REC-AX-LAYOUT] [REC-AX-ELEM]: a 2x4 input by hand. Row 0
 * [1,-2,3,0.5]: amax 3, s = 128, codes 128 0x70, -256 0xF8, 384 0x7C, 64 0x68; row 1 zeros:
 * s = 2^48. Columns [1,0], [-2,0], [3,0], [0.5,0]: s = 256, 128, 128, 512. */
START_TEST(test_ax_rowwise_known_answer_both_copies)
{
    float v[8] = {1.0f, -2.0f, 3.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    qs_tensor x = make_bf16(2, 4, v);
    qs_quantized z;
    quant(QS_RECIPE_ROWWISE, QS_ROLE_INPUT, NULL, &x, &z);
    ck_assert_int_eq(z.elem, QS_E4M3);
    ASSERT_SHAPE(&z.data[QS_DIR_ROW], 2, 4);
    ASSERT_SHAPE(&z.scale[QS_DIR_ROW], 2, 1);
    ASSERT_SHAPE(&z.data[QS_DIR_COL], 4, 2);
    ASSERT_SHAPE(&z.scale[QS_DIR_COL], 4, 1);
    const uint32_t row[8] = {0x70, 0xF8, 0x7C, 0x68, 0, 0, 0, 0};
    for (int i = 0; i < 8; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, row[i]);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), 0x3C000000u); /* 2^-7 */
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 1), 0x27800000u); /* 2^-48 */
    const uint32_t col[8] = {0x78, 0, 0xF8, 0, 0x7C, 0, 0x78, 0};
    for (int i = 0; i < 8; i++)
        ASSERT_CODE(&z.data[QS_DIR_COL], i, col[i]);
    const uint32_t col_s[4] = {0x3B800000u, 0x3C000000u, 0x3C000000u, 0x3B000000u};
    for (int i = 0; i < 4; i++)
        ASSERT_BITS(f32_at(&z.scale[QS_DIR_COL], i), col_s[i]);
    qs_tensor y;
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_COL, &y), QS_OK); /* [REC-DEQ-AX] */
    for (int i = 0; i < 8; i++)
        ASSERT_BITS(f32_at(&y, i), f32_bits(v[i]));
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AX-AMAX] [REC-AX-SCALE] [REC-AX-ELEM]: a NaN makes its whole row NaN (scale NaN);
 * an Inf gives scale 0, so finite values become signed zeros and the Inf NaN, and the
 * decode scale is +Inf. Columns: [NaN, Inf] is NaN; [1, -1] has s = 256. */
START_TEST(test_ax_nan_row_and_inf_row)
{
    float v[4] = {NAN, 1.0f, INFINITY, -1.0f};
    qs_tensor x = make_f32(2, 2, v);
    qs_quantized z;
    quant(QS_RECIPE_ROWWISE, QS_ROLE_INPUT, NULL, &x, &z);
    const uint32_t row[4] = {0x7F, 0x7F, 0x7F, 0x80};
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_ROW], i, row[i]);
    ck_assert(isnan(f32_at(&z.scale[QS_DIR_ROW], 0)));
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 1), 0x7F800000u);
    const uint32_t col[4] = {0x7F, 0x7F, 0x78, 0xF8};
    for (int i = 0; i < 4; i++)
        ASSERT_CODE(&z.data[QS_DIR_COL], i, col[i]);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_COL], 1), 0x3B800000u);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AX-GWHP]: under rowwise_with_gw_hp the weight's columnwise copy has one scale (amax 3
 * of the whole 2x4 input above: s = 128, decode 2^-7), and the input's columnwise copy is x^T
 * as FP32 values with scale 1; the rowwise copies are rowwise's. */
START_TEST(test_ax_gwhp_weight_tensorwise_and_input_high_precision)
{
    float v[8] = {1.0f, -2.0f, 3.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    qs_tensor x = make_bf16(2, 4, v);
    qs_quantized w, in, plain;
    quant(QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_WEIGHT, NULL, &x, &w);
    quant(QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_INPUT, NULL, &x, &in);
    quant(QS_RECIPE_ROWWISE, QS_ROLE_WEIGHT, NULL, &x, &plain);
    ck_assert_int_eq(w.scale[QS_DIR_COL].ndim, 1);
    ASSERT_BITS(f32_at(&w.scale[QS_DIR_COL], 0), 0x3C000000u);
    ASSERT_BITS(w.global_enc[QS_DIR_COL], 0x43000000u);
    ASSERT_BITS(w.amax[QS_DIR_COL], 0x40400000u); /* 3 */
    const uint32_t col[8] = {0x70, 0, 0xF8, 0, 0x7C, 0, 0x68, 0};
    for (int i = 0; i < 8; i++)
        ASSERT_CODE(&w.data[QS_DIR_COL], i, col[i]);
    ck_assert_int_eq(in.data[QS_DIR_COL].dtype, QS_FP32);
    ASSERT_SHAPE(&in.data[QS_DIR_COL], 4, 2);
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < 2; m++)
            ASSERT_BITS(f32_at(&in.data[QS_DIR_COL], k * 2 + m), f32_bits(v[m * 4 + k]));
    ASSERT_BITS(f32_at(&in.scale[QS_DIR_COL], 0), 0x3F800000u);
    ck_assert_mem_eq(w.data[QS_DIR_ROW].data, plain.data[QS_DIR_ROW].data, 8);
    ck_assert_mem_eq(w.scale[QS_DIR_ROW].data, plain.scale[QS_DIR_ROW].data, 8);
    qs_tensor y;
    ck_assert_int_eq(qs_dequantize(NULL, &in, QS_DIR_COL, &y), QS_OK);
    for (int i = 0; i < 8; i++)
        ASSERT_BITS(f32_at(&y, i), f32_bits(v[i]));
    qs_tensor_free(&y);
    qs_quantized_free(&w);
    qs_quantized_free(&in);
    qs_quantized_free(&plain);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-AX-POW2] [REC-AX-ELEM] [REC-DEFAULTS] [REC-OPTIONS]: pow2=0 keeps 448/3 and reaches
 * the top code 0x7E; format=e5m2 gives 57344/3 -> 2^14 and 3*2^14 = 0x7A; gradients are
 * E4M3 by default; eps is not an option of these recipes. */
START_TEST(test_ax_options_pow2_format_and_defaults)
{
    float v[4] = {3.0f, 1.0f, 0.0f, 0.0f};
    qs_tensor x = make_bf16(1, 4, v);
    qs_quantized z;
    const char *nopow2[] = {"pow2", "0", NULL};
    quant(QS_RECIPE_ROWWISE, QS_ROLE_INPUT, nopow2, &x, &z);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7E);
    ASSERT_BITS(f32_at(&z.scale[QS_DIR_ROW], 0), f32_bits(1.0f / f32_from(0x43155555u)));
    qs_quantized_free(&z);
    const char *e5m2[] = {"format", "e5m2", NULL};
    quant(QS_RECIPE_ROWWISE, QS_ROLE_INPUT, e5m2, &x, &z);
    ck_assert_int_eq(z.elem, QS_E5M2);
    ASSERT_CODE(&z.data[QS_DIR_ROW], 0, 0x7A);
    qs_quantized_free(&z);
    qs_recipe_config c;
    ck_assert_int_eq(
        qs_recipe_config_default(NULL, &c, QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_GRAD_OUTPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E4M3);
    ck_assert_int_eq(c.pow2, 1);
    ck_assert_str_eq(qs_recipe_kind_name(QS_RECIPE_ROWWISE_GW_HP), "rowwise_with_gw_hp");
    ck_assert_int_eq(qs_recipe_kind_from_name("rowwise"), QS_RECIPE_ROWWISE);
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(qs_recipe_config_set(ctx, &c, "eps", "1e-6"), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(
        strstr(qs_ctx_errmsg(ctx), "does not apply to recipe rowwise_with_gw_hp"));
    qs_ctx_free(ctx);
    qs_tensor_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ round trip */

/* [REC-DEQ-ROUNDTRIP]: when every block holds the top code, quantize(dequantize(Q)) = Q.
 * Inputs have one anchor per block that maps to the top code; the test checks that
 * precondition, then the fixed point, for every recipe and both directions. */
static void roundtrip_case(qs_recipe_kind kind, qs_tensor_role role, const char *const *opts,
                           int blk, float top_value, uint32_t top_code_mag)
{
    enum { M = 32, K = 64 };
    static float v[M * K];
    uint32_t s = 4242u + (uint32_t)kind;
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            v[m * K + k] = rng_sym(&s) * top_value * 0.9f;
    for (int m = 0; m < M; m++) /* anchors: the top value on the diagonal of each block */
        for (int k = 0; k < K; k++)
            if ((m % blk) == (k % blk))
                v[m * K + k] = (m + k) % 2 ? top_value : -top_value;
    qs_tensor x = make_f32(M, K, v), y;
    qs_quantized z, z2;
    quant(kind, role, opts, &x, &z);
    for (int d = 0; d < 2; d++) {
        if (!z.data[d].data)
            continue;
        uint32_t top = 0;
        for (size_t i = 0; i < z.data[d].numel; i++) {
            uint32_t c = code_at(&z.data[d], (int64_t)i) & (z.elem == QS_E2M1 ? 0x7 : 0x7F);
            top = c > top ? c : top;
        }
        ck_assert_uint_eq(top, top_code_mag);
        ck_assert_int_eq(qs_dequantize(NULL, &z, (qs_direction)d, &y), QS_OK);
        quant(kind, role, opts, &y, &z2);
        ck_assert_msg(memcmp(z.data[d].data, z2.data[d].data, z.data[d].nbytes) == 0,
                      "recipe %s direction %d: requantized codes differ", qs_recipe_kind_name(kind),
                      d);
        qs_quantized_free(&z2);
        qs_tensor_free(&y);
    }
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}

START_TEST(test_roundtrip_every_recipe)
{
    const char *ocp[] = {"rule", "ocp", NULL};
    const char *pow2[] = {"pow2", "1", NULL};
    const char *nv[] = {"rht", "0", "sr", "0", NULL};
    roundtrip_case(QS_RECIPE_CURRENT, QS_ROLE_INPUT, NULL, 32, 3.0f, 0x7E);
    roundtrip_case(QS_RECIPE_CURRENT, QS_ROLE_INPUT, pow2, 32, 3.5f, 0x7E);
    roundtrip_case(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, 32, 448.0f, 0x7E);
    roundtrip_case(QS_RECIPE_MXFP8, QS_ROLE_INPUT, ocp, 32, 460.0f, 0x7E);
    roundtrip_case(QS_RECIPE_BLOCK, QS_ROLE_INPUT, NULL, 32, 7.0f, 0x7E);
    roundtrip_case(QS_RECIPE_BLOCK, QS_ROLE_WEIGHT, NULL, 32, 7.0f, 0x7E);
    roundtrip_case(QS_RECIPE_NVFP4, QS_ROLE_INPUT, nv, 16, 5.0f, 0x7);
    roundtrip_case(QS_RECIPE_NVFP4, QS_ROLE_WEIGHT, NULL, 16, 5.0f, 0x7);
    roundtrip_case(QS_RECIPE_ROWWISE, QS_ROLE_INPUT, NULL, 32, 3.5f, 0x7E); /* [REC-DEQ-AX] */
    roundtrip_case(QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_WEIGHT, NULL, 32, 3.5f, 0x7E);
}
END_TEST

/* [REC-DEQ-ROUNDTRIP] [REC-DS-QUANT]: delayed scaling with an unchanged scale. */
START_TEST(test_roundtrip_delayed_fixed_scale)
{
    const char *opts[] = {"history", "1", NULL};
    qs_quantizer q = make_q(QS_RECIPE_DELAYED, QS_ROLE_INPUT, opts);
    q.ds.scale = 37.0f;
    q.ds.scale_inv = 1.0f / 37.0f;
    static float v[8 * 8];
    uint32_t s = 5;
    for (int i = 0; i < 64; i++)
        v[i] = rng_sym(&s) * 12.0f;
    qs_tensor x = make_f32(8, 8, v), y;
    qs_quantized z, z2;
    ck_assert_int_eq(qs_quantize(NULL, &q, &x, &z), QS_OK);
    ck_assert_int_eq(qs_dequantize(NULL, &z, QS_DIR_ROW, &y), QS_OK);
    ck_assert_int_eq(qs_quantize(NULL, &q, &y, &z2), QS_OK);
    ck_assert_mem_eq(z.data[0].data, z2.data[0].data, 64);
    ck_assert_mem_eq(z.data[1].data, z2.data[1].data, 64);
    qs_quantized_free(&z);
    qs_quantized_free(&z2);
    qs_tensor_free(&x);
    qs_tensor_free(&y);
    qs_quantizer_free(&q);
}
END_TEST

/* ------------------------------------------------------------------ bad input, options */

/* [REC-INPUT] [REC-OPTIONS]: each rejection names the argument or option. */
START_TEST(test_bad_inputs_and_options_are_named)
{
    qs_ctx *ctx = qs_ctx_new();
    qs_recipe_config cfg;
    ck_assert_int_eq(qs_recipe_config_default(ctx, &cfg, QS_RECIPE_MXFP8, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "rule", "floor"), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "'floor'"));
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "frob", "1"), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "unknown recipe option 'frob'"));
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "margin", "1"), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "does not apply to recipe mxfp8"));
    ck_assert_int_eq(qs_recipe_config_default(ctx, &cfg, QS_RECIPE_DELAYED, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "history", "0"), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "algo", "most_recent"), QS_OK);
    ck_assert_int_eq(cfg.algo, QS_AMAX_MOST_RECENT);
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "columnwise", "0"), QS_OK);
    ck_assert_int_eq(qs_recipe_config_set(ctx, &cfg, "rowwise", "0"), QS_OK);
    qs_quantizer q;
    ck_assert_int_eq(qs_quantizer_init(ctx, &q, &cfg), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "neither rowwise nor columnwise"));

    q = make_q(QS_RECIPE_CURRENT, QS_ROLE_INPUT, NULL);
    qs_tensor t;
    int64_t shape3[3] = {2, 2, 2};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &t, QS_FP32, 3, shape3), QS_OK);
    qs_quantized z;
    ck_assert_int_eq(qs_quantize(ctx, &q, &t, &z), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "x must be 2-D"));
    qs_tensor_free(&t);
    int64_t shape2[2] = {2, 2};
    ck_assert_int_eq(qs_tensor_alloc(NULL, &t, QS_E4M3, 2, shape2), QS_OK);
    ck_assert_int_eq(qs_quantize(ctx, &q, &t, &z), QS_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "x has dtype e4m3"));
    qs_tensor_free(&t);
    ck_assert_int_eq(qs_quantize(ctx, &q, NULL, &z), QS_ERR_INVALID_ARG);
    ck_assert_int_eq(qs_delayed_update(ctx, &q), QS_ERR_INVALID_ARG);
    qs_quantizer_free(&q);
    qs_ctx_free(ctx);
}
END_TEST

/* [REC-LAYOUT] [REC-TW-LAYOUT] [REC-MX-LAYOUT] [REC-BLK-1D-COL] [REC-BLK-2D-COL] [REC-NV-2D-COL]
 * [REC-AX-LAYOUT] [REC-AX-GWHP]:
 * the logical layouts of a 40x20 input, typed from the spec. */
START_TEST(test_layouts_of_a_40x20_input)
{
    static const struct {
        qs_recipe_kind kind;
        qs_tensor_role role;
        qs_direction dir;
        qs_dtype data;
        int64_t dr, dc;
        qs_dtype scale;
        int sndim;
        int64_t sr, sc;
    } cases[] = {
        {QS_RECIPE_CURRENT, QS_ROLE_GRAD_OUTPUT, QS_DIR_COL, QS_E5M2, 20, 40, QS_FP32, 1, 1, 0},
        {QS_RECIPE_MXFP8, QS_ROLE_INPUT, QS_DIR_ROW, QS_E4M3, 40, 20, QS_E8M0, 2, 40, 1},
        {QS_RECIPE_MXFP8, QS_ROLE_INPUT, QS_DIR_COL, QS_E4M3, 40, 20, QS_E8M0, 2, 2, 20},
        {QS_RECIPE_BLOCK, QS_ROLE_INPUT, QS_DIR_COL, QS_E4M3, 20, 40, QS_FP32, 2, 20, 1},
        {QS_RECIPE_BLOCK, QS_ROLE_WEIGHT, QS_DIR_COL, QS_E4M3, 20, 40, QS_FP32, 2, 1, 1},
        {QS_RECIPE_NVFP4, QS_ROLE_INPUT, QS_DIR_ROW, QS_E2M1, 40, 20, QS_E4M3, 2, 40, 2},
        {QS_RECIPE_NVFP4, QS_ROLE_INPUT, QS_DIR_COL, QS_E2M1, 20, 40, QS_E4M3, 2, 20, 3},
        {QS_RECIPE_NVFP4, QS_ROLE_WEIGHT, QS_DIR_COL, QS_E2M1, 20, 40, QS_E4M3, 2, 2, 3},
        {QS_RECIPE_ROWWISE, QS_ROLE_INPUT, QS_DIR_ROW, QS_E4M3, 40, 20, QS_FP32, 2, 40, 1},
        {QS_RECIPE_ROWWISE, QS_ROLE_GRAD_OUTPUT, QS_DIR_COL, QS_E4M3, 20, 40, QS_FP32, 2, 20, 1},
        {QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_WEIGHT, QS_DIR_COL, QS_E4M3, 20, 40, QS_FP32, 1, 1, 0},
        {QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_INPUT, QS_DIR_COL, QS_FP32, 20, 40, QS_FP32, 1, 1, 0},
        {QS_RECIPE_ROWWISE_GW_HP, QS_ROLE_GRAD_OUTPUT, QS_DIR_ROW, QS_E4M3, 40, 20, QS_FP32, 2, 40,
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_recipe_config c;
        qs_copy_layout l;
        ck_assert_int_eq(qs_recipe_config_default(NULL, &c, cases[i].kind, cases[i].role), QS_OK);
        ck_assert_int_eq(qs_recipe_layout(NULL, &c, 40, 20, cases[i].dir, &l), QS_OK);
        ck_assert_msg(l.data_dtype == cases[i].data && l.data_shape[0] == cases[i].dr &&
                          l.data_shape[1] == cases[i].dc && l.scale_dtype == cases[i].scale &&
                          l.scale_ndim == cases[i].sndim && l.scale_shape[0] == cases[i].sr &&
                          (l.scale_ndim == 1 || l.scale_shape[1] == cases[i].sc),
                      "case %zu: data [%lld,%lld] scale [%lld,%lld]", i, (long long)l.data_shape[0],
                      (long long)l.data_shape[1], (long long)l.scale_shape[0],
                      (long long)l.scale_shape[1]);
    }
}
END_TEST

/* [REC-DEQ-SHAPE] [REC-LAYOUT]: a result whose scale has the wrong shape is refused. */
START_TEST(test_dequantize_refuses_a_malformed_result)
{
    float v[64] = {1.0f};
    qs_tensor x = make_f32(2, 32, v), y;
    qs_quantized z;
    quant(QS_RECIPE_MXFP8, QS_ROLE_INPUT, NULL, &x, &z);
    qs_tensor tmp = z.scale[QS_DIR_ROW];
    z.scale[QS_DIR_ROW] = z.scale[QS_DIR_COL];
    z.scale[QS_DIR_COL] = tmp;
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(qs_dequantize(ctx, &z, QS_DIR_ROW, &y), QS_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "row_scale must have shape [2, 1]"));
    qs_ctx_free(ctx);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

/* [REC-DEFAULTS] [REC-ROLE] [REC-DS-HYBRID]: the defaults of each recipe and role. */
START_TEST(test_defaults_per_recipe_and_role)
{
    qs_recipe_config c;
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, QS_RECIPE_DELAYED, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(c.history_len, 1024);
    ck_assert_int_eq(c.algo, QS_AMAX_MAX);
    ck_assert_int_eq(c.roll, QS_DS_ROLL_FUSED);
    ck_assert_int_eq(c.margin, 0);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E4M3);
    ck_assert_int_eq(qs_recipe_config_set(NULL, &c, "role", "grad_input"), QS_OK);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E5M2);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, QS_RECIPE_MXFP8, QS_ROLE_GRAD_OUTPUT),
                     QS_OK);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E4M3); /* mxfp8: E4M3 for gradients too */
    ck_assert_int_eq(c.mx_rule, QS_MX_RULE_TE);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, QS_RECIPE_BLOCK, QS_ROLE_WEIGHT), QS_OK);
    ck_assert_int_eq(c.tile_2d, 1);
    ck_assert_int_eq(c.pow2, 1);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E4M3);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, QS_RECIPE_CURRENT, QS_ROLE_INPUT), QS_OK);
    ck_assert_int_eq(c.pow2, 0);
    ck_assert_int_eq(qs_recipe_config_default(NULL, &c, QS_RECIPE_NVFP4, QS_ROLE_INPUT), QS_OK);
    ck_assert(c.rht == 1 && c.sr == 0 && c.tile_2d == 0);
    ck_assert_int_eq(qs_recipe_config_set(NULL, &c, "role", "weight"), QS_OK);
    ck_assert(c.rht == 0 && c.sr == 0 && c.tile_2d == 1);
    ck_assert_int_eq(qs_recipe_config_set(NULL, &c, "role", "grad_output"), QS_OK);
    ck_assert(c.rht == 1 && c.sr == 1 && c.tile_2d == 0);
    ck_assert_int_eq(qs_recipe_elem_dtype(&c), QS_E2M1);
}
END_TEST

/* [REC-DEQ-SHAPE]: dequantizing a direction that was not produced is an error. */
START_TEST(test_dequantize_of_missing_direction_fails)
{
    float v[4] = {1, 2, 3, 4};
    qs_tensor x = make_f32(2, 2, v), y;
    qs_quantized z;
    const char *opts[] = {"columnwise", "0", NULL};
    quant(QS_RECIPE_CURRENT, QS_ROLE_INPUT, opts, &x, &z);
    qs_ctx *ctx = qs_ctx_new();
    ck_assert_int_eq(qs_dequantize(ctx, &z, QS_DIR_COL, &y), QS_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(qs_ctx_errmsg(ctx), "columnwise copy was not produced"));
    qs_ctx_free(ctx);
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}
END_TEST

static Suite *recipes_suite(void)
{
    Suite *s = suite_create("recipes");
    TCase *mx = tcase_create("mxfp8");
    tcase_add_test(mx, test_mx_921_6_te_scale_0x81_and_codes);
    tcase_add_test(mx, test_mx_921_6_ocp_scale_0x80_and_clamped_codes);
    tcase_add_test(mx, test_mx_921_6_e5m2_elements);
    tcase_add_test(mx, test_mx_rules_agree_at_1_75_and_differ_above);
    tcase_add_test(mx, test_mx_zero_block);
    tcase_add_test(mx, test_mx_inf_block_te_gives_zeros_and_nan_ocp_all_nan);
    tcase_add_test(mx, test_mx_scale_zero_block_te_multiplier_one_ocp_exact);
    tcase_add_test(mx, test_mx_single_nan_block);
    tcase_add_test(mx, test_mx_partial_block_odd_shape);
    tcase_add_test(mx, test_mx_columnwise_is_rowwise_of_transpose);
    tcase_add_test(mx, test_mx_padded_scale_layout);
    tcase_add_test(mx, test_1d_columnwise_is_rowwise_of_transpose);
    tcase_add_test(mx, test_mx_te_requantize_of_921_6_moves_to_0x80);
    suite_add_tcase(s, mx);
    TCase *cs = tcase_create("current");
    tcase_add_test(cs, test_cs_known_answer);
    tcase_add_test(cs, test_cs_pow2_known_answer);
    tcase_add_test(cs, test_cs_hybrid_gradient_uses_e5m2);
    tcase_add_test(cs, test_cs_scale_rule_special_cases);
    tcase_add_test(cs, test_cs_inf_and_nan_inputs);
    suite_add_tcase(s, cs);
    TCase *ds = tcase_create("delayed");
    tcase_add_test(ds, test_ds_worked_example_fused_and_unfused);
    tcase_add_test(ds, test_ds_update_sequence_matches_transcription);
    tcase_add_test(ds, test_ds_quantize_uses_stored_scale);
    tcase_add_test(ds, test_ds_calibration_propagates_nan);
    suite_add_tcase(s, ds);
    TCase *bl = tcase_create("block");
    tcase_add_test(bl, test_blk_1x128_known_answer_with_partial_block);
    tcase_add_test(bl, test_blk_128x128_weight_shares_scale);
    tcase_add_test(bl, test_blk_value_for_inf_is_input_dtype_max);
    tcase_add_test(bl, test_blk_zero_inf_nan_blocks);
    suite_add_tcase(s, bl);
    TCase *nv = tcase_create("nvfp4");
    tcase_add_test(nv, test_nv_known_answer_amax_6);
    tcase_add_test(nv, test_nv_known_answer_two_blocks);
    tcase_add_test(nv, test_nv_te_and_torchao_differ_on_tiny_block);
    tcase_add_test(nv, test_nv_torchao_018_multiplies_by_the_reciprocal_scale);
    tcase_add_test(nv, test_nv_zero_tensor);
    tcase_add_test(nv, test_nv_torchao_nan_cases);
    tcase_add_test(nv, test_nv_inf_and_nan);
    tcase_add_test(nv, test_nv_partial_blocks_and_transposed_columnwise);
    tcase_add_test(nv, test_nv_16x16_weight_transpose_shares_codes);
    tcase_add_test(nv, test_nv_rht_known_answer);
    tcase_add_test(nv, test_nv_rht_rejects_fp32_and_ragged_rows);
    tcase_add_test(nv, test_nv_sr_same_seed_same_bits);
    tcase_add_test(nv, test_nv_sr_mean_is_unbiased);
    suite_add_tcase(s, nv);
    TCase *ax = tcase_create("axiswise");
    tcase_add_test(ax, test_ax_scale_rule_known_answers);
    tcase_add_test(ax, test_ax_rowwise_known_answer_both_copies);
    tcase_add_test(ax, test_ax_nan_row_and_inf_row);
    tcase_add_test(ax, test_ax_gwhp_weight_tensorwise_and_input_high_precision);
    tcase_add_test(ax, test_ax_options_pow2_format_and_defaults);
    suite_add_tcase(s, ax);
    TCase *rt = tcase_create("roundtrip");
    tcase_add_test(rt, test_roundtrip_every_recipe);
    tcase_add_test(rt, test_roundtrip_delayed_fixed_scale);
    suite_add_tcase(s, rt);
    TCase *bad = tcase_create("bad_input");
    tcase_add_test(bad, test_bad_inputs_and_options_are_named);
    tcase_add_test(bad, test_dequantize_of_missing_direction_fails);
    tcase_add_test(bad, test_defaults_per_recipe_and_role);
    tcase_add_test(bad, test_layouts_of_a_40x20_input);
    tcase_add_test(bad, test_dequantize_refuses_a_malformed_result);
    suite_add_tcase(s, bad);
    return s;
}

int main(void)
{
    return qst_run(recipes_suite());
}
