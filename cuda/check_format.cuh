/* check_format.cuh: the format and dequantization part of cuda/check_arith.cu — the CUDA
 * encoder and decoder (cuda/qc_format.cuh) and the dequantization arithmetic
 * (cuda/qc_dequant.cuh) against libqspec, on the CPU:
 *  - decode: every code of every format (and codes with bits above the width);
 *  - encode: for every format x rounding mode x overflow policy, with the instruction path
 *    and the portable path: all 2^16 BF16-representable floats (every NaN payload class,
 *    Inf, -0, subnormals), every float within 4 ULPs of every grid point and midpoint of the
 *    format (the rounding boundaries, the overflow boundary included), and 2^19 random floats
 *    per format (half of them in the format's exponent range); stochastic rounding with
 *    random bits and with the two bit patterns on either side of the element's own boundary;
 *  - dequantize: every (code, scale code) pair of MXFP8 and NVFP4, every code against special
 *    FP32 scales, and reference quantizations of random tensors with NaN, Inf and -0, for
 *    every recipe, variant and direction, element by element against qs_dequantize.
 * When a CUDA device is present it also runs the device side: the instruction path against
 * the portable path on all 2^32 floats, and the portable path on a sample against the
 * reference. qc_check_formats() returns the number of mismatches. */
#ifndef QC_CHECK_FORMAT_CUH
#define QC_CHECK_FORMAT_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

#include "check_util.cuh"
#include "qc_dequant.cuh"
#include "qc_format.cuh"
#include "qspec/recipe.h"

namespace qc_check {

long g_fail = 0;
long g_order_nan = 0; /* see qc::dq::both_nan */

void fail(const char *what, const char *ctx, uint32_t x, uint32_t want, uint32_t got)
{
    qc_check_report(&g_fail, "", what, ctx, x, want, got);
}

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t next_u64()
{
    return qc_check_splitmix(&g_rng);
}

__host__ __device__ inline uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

/* ---------------------------------------------------------------- decode */

template <int DT> void check_decode()
{
    constexpr qc::fmt::desc f = qc::fmt::desc_of(DT);
    uint32_t ncodes = f.bits >= 16 ? 65536u : 1u << f.bits;
    for (uint32_t i = 0; i < ncodes; i++) {
        /* FP32: the low and the high halves; narrow formats: also garbage above the width */
        uint32_t codes[3] = {i, f.bits == 32 ? i << 16 : i | 0xFFFF0000u,
                             f.bits == 32 ? (i << 16) | mix32(i) >> 16 : i | (mix32(i) << 8)};
        for (uint32_t c : codes) {
            uint32_t want = qc::fmt::bits(qs_decode_f32((qs_dtype)DT, c));
            uint32_t got = qc::fmt::bits(qc::fmt::decode<DT>(c));
            uint32_t dyn = qc::fmt::bits(qc::fmt::decode_dt(DT, c));
            if (want != got || want != dyn)
                fail("decode", qs_dtype_name((qs_dtype)DT), c, want, want != got ? got : dyn);
        }
    }
}

/* ---------------------------------------------------------------- encode */

/* The stochastic-rounding bits at the element's own boundary: u0 rounds up, u0 - 1 down
 * ([FMT-ROUND-SR]: up iff floor(r * 2^32) + u >= 2^32 when r has no bits below 2^-32). */
uint32_t sr_boundary(const qs_format_info *fi, float x)
{
    double a = fabs((double)x);
    if (!(a > 0) || isinf(a) || isnan(a))
        return 0;
    int ex;
    frexp(a, &ex); /* a = s * 2^ex, 0.5 <= s < 1 */
    int emin = fi->has_zero ? 1 - fi->bias : -fi->bias;
    int e = ex - 1 > emin ? ex - 1 : emin;
    double q = ldexp(a, -(e - (int)fi->mbits)); /* a / quantum, exact */
    double r = q - floor(q);
    double t = floor(ldexp(r, 32));
    return (uint32_t)(4294967296.0 - t); /* 2^32 wraps to 0 */
}

/* The inputs of one format: bf16-representable, specials, boundaries, random. */
std::vector<uint32_t> inputs_for(int dt)
{
    const qs_format_info *fi = qs_format_info_get((qs_dtype)dt);
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < 65536u; i++)
        v.push_back(i << 16);
    static const uint32_t specials[] = {
        0x7F800001u, 0x7FBFFFFFu, 0x7FC00001u, 0x7FFFFFFFu, 0xFF800001u, 0xFFBFFFFFu,
        0xFFC00001u, 0xFFFFFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00000001u, 0x80000001u,
        0x007FFFFFu, 0x807FFFFFu, 0x00800000u, 0x43E80000u, 0x43E80001u, 0x47700000u,
        0x476FFFFFu, 0x40C00000u, 0x40E00000u, 0x40DFFFFFu, 0x7F7F8000u, 0x7F7F7FFFu};
    for (uint32_t s : specials)
        v.push_back(s);
    if (dt != QS_FP32) {
        /* every grid point and midpoint of the unbounded grid up to max + quantum */
        std::vector<double> pts;
        pts.push_back(fi->min_subnormal / 2);
        for (uint32_t c = 0; c <= fi->max_code; c++) {
            double lo = qs_decode_f64((qs_dtype)dt, c), hi;
            if (c < fi->max_code)
                hi = qs_decode_f64((qs_dtype)dt, c + 1);
            else if (dt == QS_E8M0)
                hi = 2 * lo;
            else
                hi = lo + (lo - qs_decode_f64((qs_dtype)dt, c - 1));
            pts.push_back(lo);
            pts.push_back((lo + hi) / 2);
            if (c == fi->max_code)
                pts.push_back(hi);
        }
        for (double p : pts) {
            float pf = (float)p;
            if (isinf(pf) || (double)pf != p)
                continue;
            uint32_t b = qc::fmt::bits(pf);
            for (int d = -4; d <= 4; d++) {
                uint32_t u = b + (uint32_t)d;
                if ((int64_t)b + d < 0 || u >= 0x7F800000u)
                    continue;
                v.push_back(u);
                v.push_back(u | 0x80000000u);
            }
        }
    }
    /* random: half uniform bit patterns, half in [min_subnormal/16, 16*max] */
    int lo_e = (int)floor(log2(fi->min_subnormal)) - 4, hi_e = (int)ceil(log2(fi->max_value)) + 4;
    if (lo_e < -149)
        lo_e = -149;
    if (hi_e > 127)
        hi_e = 127;
    for (int i = 0; i < (1 << 19); i++) {
        uint64_t r = next_u64();
        if (i % 2) {
            v.push_back((uint32_t)r);
        } else {
            int e = lo_e + (int)((r >> 32) % (uint64_t)(hi_e - lo_e + 1));
            float m = 1.0f + (float)((r >> 8) & 0x7FFFFF) * 0x1p-23f;
            float x = (float)ldexp((double)m, e); /* RNE into the subnormals below 2^-126 */
            v.push_back(qc::fmt::bits(x) | (uint32_t)(r & 1u) << 31);
        }
    }
    return v;
}

template <int DT> void check_encode(long *ncalls)
{
    constexpr const char *rn[] = {"rne", "rz", "ru", "rd", "away", "sr"};
    constexpr const char *on[] = {"satfinite", "nosat", "mldtypes"};
    const qs_format_info *fi = qs_format_info_get((qs_dtype)DT);
    std::vector<uint32_t> in = inputs_for(DT);
    for (int r = 0; r < QS_ROUND_COUNT; r++)
        for (int o = 0; o < QS_OVF_COUNT; o++) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "%s/%s/%s", qs_dtype_name((qs_dtype)DT), rn[r], on[o]);
            for (size_t i = 0; i < in.size(); i++) {
                float x = qc::fmt::from(in[i]);
                uint32_t srs[5] = {0, 0, 0, 0, 0};
                int nsr = 1;
                if (r == QS_ROUND_SR) {
                    uint32_t u0 = sr_boundary(fi, x);
                    srs[0] = mix32(in[i] ^ (uint32_t)o);
                    srs[1] = u0;
                    srs[2] = u0 - 1u;
                    nsr = 3;
                    if (i % 8 == 0) {
                        srs[3] = 0;
                        srs[4] = 0xFFFFFFFFu;
                        nsr = 5;
                    }
                }
                for (int s = 0; s < nsr; s++) {
                    qs_cast_mode m = {(qs_round)r, (qs_overflow)o, srs[s]};
                    uint32_t want = 0;
                    qs_encode_f32((qs_dtype)DT, x, m, &want);
                    uint32_t hw = qc::fmt::cast<DT, true>(x, r, o, srs[s]);
                    uint32_t sw = qc::fmt::cast<DT, false>(x, r, o, srs[s]);
                    if (hw != want)
                        fail("encode(hw)", ctx, in[i], want, hw);
                    if (sw != want)
                        fail("encode", ctx, in[i], want, sw);
                    *ncalls += 1;
                }
            }
        }
}

/* ---------------------------------------------------------------- dequantize */

/* qs_dequantize of direction dir of z against the host mirror of the slot's kernels. */
template <int ELEM, int SK, int COMB>
void compare_dequant(qs_ctx *ctx, const qs_quantized *z, int dir, const char *what)
{
    qs_tensor y;
    if (qs_dequantize(ctx, z, (qs_direction)dir, &y) != QS_OK) {
        printf("FAIL %s: qs_dequantize: %s\n", what, qs_ctx_errmsg(ctx));
        g_fail++;
        return;
    }
    const qs_tensor *s = &z->scale[dir];
    qc::dq::geometry g =
        qc::dq::geometry_of(qc::dq::layout_kind(z->cfg.kind, s->ndim), dir, z->rows, z->cols,
                            z->cfg.tile_2d, s->ndim == 2 ? s->shape[1] : 1);
    const float *yr = static_cast<const float *>(y.data);
    for (int64_t r = 0; r < g.R; r++)
        for (int64_t c = 0; c < g.C; c++) {
            float v =
                qc::dq::element<ELEM, SK, COMB>(g, static_cast<const uint8_t *>(z->data[dir].data),
                                                s->data, z->global_dec[dir], r, c);
            int64_t at = g.transposed ? c * g.R + r : r * g.C + c;
            uint32_t want = qc::fmt::bits(yr[at]), got = qc::fmt::bits(v);
            uint32_t q = qc::dq::code_at<ELEM>(static_cast<const uint8_t *>(z->data[dir].data),
                                               static_cast<size_t>(r * g.C + c));
            float sv = qc::dq::scale_at<SK>(s->data, qc::dq::scale_index(g, r, c));
            if (want != got && yr[at] != yr[at] && v != v &&
                qc::dq::both_nan<ELEM, COMB>(q, sv, z->global_dec[dir])) {
                g_order_nan++; /* two NaN operands: the reference's operand order decides */
                continue;
            }
            if (want != got) {
                char ctx[96];
                snprintf(ctx, sizeof ctx, "%s dir=%d r=%lld c=%lld", what, dir, (long long)r,
                         (long long)c);
                fail("dequant", ctx, (uint32_t)at, want, got);
            }
        }
    qs_tensor_free(&y);
}

void compare_dequant_any(qs_ctx *ctx, const qs_quantized *z, int dir, const char *what)
{
    using namespace qc::dq;
    bool e5 = z->elem == QS_E5M2;
    switch (z->cfg.kind) {
    case QS_RECIPE_DELAYED:
    case QS_RECIPE_CURRENT:
        if (e5)
            compare_dequant<QS_E5M2, SK_F32, C_PLAIN>(ctx, z, dir, what);
        else
            compare_dequant<QS_E4M3, SK_F32, C_PLAIN>(ctx, z, dir, what);
        break;
    case QS_RECIPE_BLOCK:
        if (e5)
            compare_dequant<QS_E5M2, SK_F32, C_SCALE_FIRST>(ctx, z, dir, what);
        else
            compare_dequant<QS_E4M3, SK_F32, C_SCALE_FIRST>(ctx, z, dir, what);
        break;
    case QS_RECIPE_MXFP8:
        if (e5)
            compare_dequant<QS_E5M2, SK_E8M0, C_PLAIN>(ctx, z, dir, what);
        else
            compare_dequant<QS_E4M3, SK_E8M0, C_PLAIN>(ctx, z, dir, what);
        break;
    case QS_RECIPE_ROWWISE:
    case QS_RECIPE_ROWWISE_GW_HP:
        if (z->data[dir].dtype == QS_FP32) /* the high-precision copy [REC-AX-GWHP] */
            compare_dequant<QS_FP32, SK_F32, C_PLAIN>(ctx, z, dir, what);
        else if (e5)
            compare_dequant<QS_E5M2, SK_F32, C_PLAIN>(ctx, z, dir, what);
        else
            compare_dequant<QS_E4M3, SK_F32, C_PLAIN>(ctx, z, dir, what);
        break;
    default:
        if (z->cfg.nv_variant == QS_NV_TORCHAO)
            compare_dequant<QS_E2M1, SK_E4M3, C_NV_TORCHAO>(ctx, z, dir, what);
        else
            compare_dequant<QS_E2M1, SK_E4M3, C_NV_TE>(ctx, z, dir, what);
    }
}

/* A reference quantization of x [M,K] under recipe kind with options "key=value" pairs. */
bool quantize(qs_ctx *ctx, qs_recipe_kind kind, const char *const *opts, const qs_tensor *x,
              qs_quantized *z)
{
    qs_recipe_config cfg;
    qs_quantizer q;
    if (qs_recipe_config_default(ctx, &cfg, kind, QS_ROLE_INPUT) != QS_OK)
        return false;
    for (int i = 0; opts && opts[i]; i += 2)
        if (qs_recipe_config_set(ctx, &cfg, opts[i], opts[i + 1]) != QS_OK)
            return false;
    if (qs_quantizer_init(ctx, &q, &cfg) != QS_OK)
        return false;
    bool ok = qs_quantize(ctx, &q, x, z) == QS_OK;
    qs_quantizer_free(&q);
    return ok;
}

/* Random FP32 (or BF16 bits) input with NaN, -NaN, +-Inf, -0 and a huge value injected. */
void fill_input(qs_tensor *x, float scale, bool specials)
{
    for (size_t i = 0; i < x->numel; i++) {
        uint64_t r = next_u64();
        float v = ((float)(r & 0xFFFFFF) * 0x1p-24f - 0.5f) * scale *
                  (float)ldexp(1.0, (int)((r >> 24) % 12) - 6);
        if (specials) {
            switch ((r >> 40) % 97) {
            case 0:
                v = qc::fmt::from(0x7FC00000u);
                break;
            case 1:
                v = qc::fmt::from(0xFFC00000u);
                break;
            case 2:
                v = qc::fmt::from(0x7F800000u);
                break;
            case 3:
                v = qc::fmt::from(0xFF800000u);
                break;
            case 4:
                v = -0.0f;
                break;
            case 5:
                v = 3e38f;
                break;
            default:
                break;
            }
        }
        if (x->dtype == QS_BF16)
            static_cast<uint16_t *>(x->data)[i] = qs_f32_to_bf16(v);
        else
            static_cast<float *>(x->data)[i] = v;
    }
}

/* Reference quantizations of random tensors, every recipe, variant and direction. */
void check_dequant_random(qs_ctx *ctx)
{
    struct rc {
        qs_recipe_kind kind;
        const char *opts[12];
        bool bf16;
    };
    static const rc cfgs[] = {
        {QS_RECIPE_CURRENT, {"format", "e4m3", nullptr}, false},
        {QS_RECIPE_CURRENT, {"format", "e5m2", "pow2", "1", nullptr}, false},
        {QS_RECIPE_DELAYED, {"format", "e4m3", nullptr}, false},
        {QS_RECIPE_MXFP8, {"elem", "e4m3", "rule", "te", nullptr}, false},
        {QS_RECIPE_MXFP8, {"elem", "e5m2", "rule", "te", nullptr}, true},
        {QS_RECIPE_MXFP8, {"elem", "e4m3", "rule", "ocp", nullptr}, false},
        {QS_RECIPE_MXFP8, {"elem", "e5m2", "rule", "ocp", nullptr}, true},
        {QS_RECIPE_BLOCK, {"tile", "1d", nullptr}, false},
        {QS_RECIPE_BLOCK, {"tile", "2d", "format", "e5m2", nullptr}, true},
        {QS_RECIPE_BLOCK, {"tile", "1d", "pow2", "0", nullptr}, false},
        {QS_RECIPE_NVFP4, {"variant", "te", "rht", "0", "sr", "0", nullptr}, false},
        {QS_RECIPE_NVFP4, {"variant", "te", "tile", "2d", "rht", "0", "sr", "1", nullptr}, false},
        {QS_RECIPE_NVFP4, {"variant", "torchao", "rht", "0", "sr", "0", nullptr}, false},
        {QS_RECIPE_NVFP4, {"variant", "torchao", "tile", "2d", "rht", "0", nullptr}, false},
        {QS_RECIPE_NVFP4, {"variant", "te", "rht", "1", nullptr}, true},
        {QS_RECIPE_ROWWISE, {"role", "input", nullptr}, true},
        {QS_RECIPE_ROWWISE, {"format", "e5m2", "pow2", "0", nullptr}, false},
        {QS_RECIPE_ROWWISE_GW_HP, {"role", "weight", nullptr}, true},
        {QS_RECIPE_ROWWISE_GW_HP, {"role", "input", nullptr}, false},
    };
    static const int64_t shapes[][2] = {{33, 70}, {130, 300}, {48, 64}, {1, 5}};
    for (const rc &c : cfgs)
        for (const auto &sh : shapes)
            for (int sp = 0; sp < 2; sp++) {
                bool rht = c.kind == QS_RECIPE_NVFP4 && c.bf16;
                if (rht && sh[0] % 16)
                    continue;
                qs_tensor x;
                qs_quantized z;
                if (qs_tensor_alloc(ctx, &x, c.bf16 ? QS_BF16 : QS_FP32, 2, sh) != QS_OK)
                    exit(2);
                fill_input(&x, sp ? 1000.0f : 3.0f, sp != 0);
                char what[96];
                snprintf(what, sizeof what, "%s %s=%s %lldx%lld%s", qs_recipe_kind_name(c.kind),
                         c.opts[0], c.opts[1], (long long)sh[0], (long long)sh[1],
                         sp ? " specials" : "");
                if (!quantize(ctx, c.kind, c.opts, &x, &z)) {
                    printf("FAIL %s: qs_quantize: %s\n", what, qs_ctx_errmsg(ctx));
                    g_fail++;
                    qs_tensor_free(&x);
                    continue;
                }
                for (int d = 0; d < QS_DIR_COUNT; d++)
                    compare_dequant_any(ctx, &z, d, what);
                qs_quantized_free(&z);
                qs_tensor_free(&x);
            }
}

/* FP32 scale values: specials, subnormals, NaN payloads, random. */
std::vector<uint32_t> scale_values()
{
    std::vector<uint32_t> v = {0x3F800000u, 0x3F000000u, 0x7F7FFFFFu, 0x00800000u, 0x00000001u,
                               0x00400000u, 0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                               0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x3B800000u,
                               0x2F800000u, 0x5E800000u, 0xBF800000u};
    for (int i = 0; i < 14; i++)
        v.push_back((uint32_t)next_u64());
    return v;
}

/* Every code against every scale: the data and scale tensors of reference results are
 * overwritten with exhaustive patterns, then dequantized both ways. */
void check_dequant_codes(qs_ctx *ctx)
{
    std::vector<uint32_t> sv = scale_values();
    qs_tensor x;
    /* tensorwise and block: every FP8 code against every scale value */
    for (int e5 = 0; e5 < 2; e5++)
        for (int kind = 0; kind < 2; kind++) {
            int64_t sh[2] = {16, 256};
            if (qs_tensor_alloc(ctx, &x, QS_FP32, 2, sh) != QS_OK)
                exit(2);
            fill_input(&x, 10.0f, false);
            const char *tw[] = {"format", e5 ? "e5m2" : "e4m3", nullptr};
            const char *bl[] = {"format", e5 ? "e5m2" : "e4m3", "tile", "1d", nullptr};
            qs_quantized z;
            qs_recipe_kind k = kind ? QS_RECIPE_BLOCK : QS_RECIPE_CURRENT;
            if (!quantize(ctx, k, kind ? bl : tw, &x, &z))
                exit(2);
            for (size_t si = 0; si < sv.size(); si++) {
                for (int d = 0; d < QS_DIR_COUNT; d++) {
                    uint8_t *dp = static_cast<uint8_t *>(z.data[d].data);
                    for (size_t i = 0; i < z.data[d].numel; i++)
                        dp[i] = (uint8_t)(i + si);
                    float *sp = static_cast<float *>(z.scale[d].data);
                    for (size_t i = 0; i < z.scale[d].numel; i++)
                        sp[i] = qc::fmt::from(sv[(si + i) % sv.size()]);
                    compare_dequant_any(ctx, &z, d, kind ? "block codes" : "tensorwise codes");
                }
            }
            qs_quantized_free(&z);
            qs_tensor_free(&x);
        }
    /* mxfp8: every element code against every E8M0 code, both directions */
    for (int e5 = 0; e5 < 2; e5++) {
        int64_t sh[2] = {256, 256};
        if (qs_tensor_alloc(ctx, &x, QS_FP32, 2, sh) != QS_OK)
            exit(2);
        fill_input(&x, 10.0f, false);
        const char *mx[] = {"elem", e5 ? "e5m2" : "e4m3", nullptr};
        qs_quantized z;
        if (!quantize(ctx, QS_RECIPE_MXFP8, mx, &x, &z))
            exit(2);
        uint8_t *rd = static_cast<uint8_t *>(z.data[0].data),
                *rs = static_cast<uint8_t *>(z.scale[0].data);
        uint8_t *cd = static_cast<uint8_t *>(z.data[1].data),
                *cs = static_cast<uint8_t *>(z.scale[1].data);
        for (int m = 0; m < 256; m++)
            for (int k = 0; k < 256; k++) {
                rd[m * 256 + k] = (uint8_t)k; /* row m: every code, scale code m */
                cd[m * 256 + k] = (uint8_t)m; /* column k: every code, scale code k */
            }
        for (size_t i = 0; i < z.scale[0].numel; i++)
            rs[i] = (uint8_t)(i / (size_t)z.scale[0].shape[1]);
        for (size_t i = 0; i < z.scale[1].numel; i++)
            cs[i] = (uint8_t)(i % (size_t)z.scale[1].shape[1]);
        compare_dequant_any(ctx, &z, 0, "mxfp8 codes");
        compare_dequant_any(ctx, &z, 1, "mxfp8 codes");
        qs_quantized_free(&z);
        qs_tensor_free(&x);
    }
    /* nvfp4: every E2M1 code against every E4M3 scale code, for each global scale */
    for (int ta = 0; ta < 2; ta++)
        for (int t2 = 0; t2 < 2; t2++) {
            int64_t sh[2] = {256, 16};
            if (qs_tensor_alloc(ctx, &x, QS_FP32, 2, sh) != QS_OK)
                exit(2);
            fill_input(&x, 10.0f, false);
            const char *nv[] = {
                "variant", ta ? "torchao" : "te", "tile", t2 ? "2d" : "1d", "rht", "0", "sr", "0",
                nullptr};
            qs_quantized z;
            if (!quantize(ctx, QS_RECIPE_NVFP4, nv, &x, &z))
                exit(2);
            for (size_t gi = 0; gi < sv.size(); gi++)
                for (int d = 0; d < QS_DIR_COUNT; d++) {
                    uint8_t *dp = static_cast<uint8_t *>(z.data[d].data);
                    for (size_t i = 0; i < z.data[d].nbytes; i++) /* codes (2i, 2i+1) */
                        dp[i] = (uint8_t)(((2 * i) & 0xF) | (((2 * i + 1 + gi) & 0xF) << 4));
                    uint8_t *sp = static_cast<uint8_t *>(z.scale[d].data);
                    for (size_t i = 0; i < z.scale[d].numel; i++)
                        sp[i] = (uint8_t)(i + 7 * gi);
                    z.global_dec[d] = qc::fmt::from(sv[gi]);
                    compare_dequant_any(ctx, &z, d, ta ? "nvfp4 torchao codes" : "nvfp4 te codes");
                }
            qs_quantized_free(&z);
            qs_tensor_free(&x);
        }
}

/* ---------------------------------------------------------------- the device side */

template <int DT> __global__ void hw_vs_portable(int ovf, unsigned long long *bad, unsigned *first)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; u < (1ull << 32);
         u += stride) {
        float x = qc::fmt::from((uint32_t)u);
        if (qc::fmt::cast<DT, true>(x, QS_ROUND_RNE, ovf, 0) !=
            qc::fmt::cast<DT, false>(x, QS_ROUND_RNE, ovf, 0)) {
            if (atomicAdd(bad, 1ull) == 0)
                *first = (uint32_t)u;
        }
    }
}

template <int DT>
__global__ void device_encode(const uint32_t *in, size_t n, int round, int ovf, uint32_t *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = qc::fmt::from(in[i]);
        uint32_t sr = mix32(in[i]);
        out[2 * i] = qc::fmt::cast<DT, true>(x, round, ovf, sr);
        out[2 * i + 1] = qc::fmt::bits(qc::fmt::decode<DT>(in[i]));
    }
}

template <int DT>
void check_device_format(const uint32_t *din, const std::vector<uint32_t> &in, uint32_t *dout,
                         unsigned long long *dbad, unsigned *dfirst)
{
    const char *name = qs_dtype_name((qs_dtype)DT);
    if (qc::fmt::has_hw_rne<DT>())
        for (int o = 0; o < QS_OVF_COUNT; o++) {
            unsigned long long bad = 0;
            unsigned first = 0;
            cudaMemset(dbad, 0, sizeof bad);
            hw_vs_portable<DT><<<132 * 16, 256>>>(o, dbad, dfirst);
            cudaMemcpy(&bad, dbad, sizeof bad, cudaMemcpyDeviceToHost);
            cudaMemcpy(&first, dfirst, sizeof first, cudaMemcpyDeviceToHost);
            if (bad) {
                char ctx[64];
                snprintf(ctx, sizeof ctx, "%s ovf=%d %llu inputs", name, o, bad);
                fail("device hw != portable", ctx, first, 0, 0);
            }
        }
    std::vector<uint32_t> out(2 * in.size());
    for (int r = 0; r < QS_ROUND_COUNT; r++)
        for (int o = 0; o < QS_OVF_COUNT; o++) {
            device_encode<DT>
                <<<(unsigned)((in.size() + 255) / 256), 256>>>(din, in.size(), r, o, dout);
            cudaMemcpy(out.data(), dout, out.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < in.size(); i++) {
                qs_cast_mode m = {(qs_round)r, (qs_overflow)o, mix32(in[i])};
                uint32_t want = 0;
                qs_encode_f32((qs_dtype)DT, qc::fmt::from(in[i]), m, &want);
                char ctx[64];
                snprintf(ctx, sizeof ctx, "%s r=%d o=%d", name, r, o);
                if (out[2 * i] != want)
                    fail("device encode", ctx, in[i], want, out[2 * i]);
                uint32_t dw = qc::fmt::bits(qs_decode_f32((qs_dtype)DT, in[i]));
                if (r == 0 && o == 0 && out[2 * i + 1] != dw)
                    fail("device decode", name, in[i], dw, out[2 * i + 1]);
            }
        }
}

/* Returns 1 when the device checks ran, 0 when no device is present. */
int check_device()
{
    if (!qc_check_have_device())
        return 0;
    std::vector<uint32_t> in;
    for (uint32_t i = 0; i < 65536u; i++)
        in.push_back(i << 16 | (mix32(i) & 0xFFFFu)); /* every exponent, sign, some payloads */
    for (uint32_t i = 0; i < 256u; i++)
        in.push_back(i);
    uint32_t *din = nullptr, *dout = nullptr, *dfirst = nullptr;
    unsigned long long *dbad = nullptr;
    if (cudaMalloc(&din, in.size() * 4) != cudaSuccess ||
        cudaMalloc(&dout, in.size() * 8) != cudaSuccess ||
        cudaMalloc(&dbad, sizeof *dbad) != cudaSuccess ||
        cudaMalloc(&dfirst, sizeof *dfirst) != cudaSuccess) {
        fail("device", "cudaMalloc failed", 0, 0, 0);
        return 1;
    }
    cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice);
    check_device_format<QS_FP32>(din, in, dout, dbad, dfirst);
    check_device_format<QS_BF16>(din, in, dout, dbad, dfirst);
    check_device_format<QS_FP16>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E4M3>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E5M2>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E8M0>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E2M1>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E2M3>(din, in, dout, dbad, dfirst);
    check_device_format<QS_E3M2>(din, in, dout, dbad, dfirst);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess)
        fail("device", cudaGetErrorString(err), 0, 0, 0);
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dbad);
    cudaFree(dfirst);
    return 1;
}

} // namespace qc_check

/* Runs every check above; prints one summary line each; returns the mismatch count. */
inline long qc_check_formats()
{
    using namespace qc_check;
    double t0 = now_s();
    check_decode<QS_FP32>();
    check_decode<QS_BF16>();
    check_decode<QS_FP16>();
    check_decode<QS_E4M3>();
    check_decode<QS_E5M2>();
    check_decode<QS_E8M0>();
    check_decode<QS_E2M1>();
    check_decode<QS_E2M3>();
    check_decode<QS_E3M2>();
    long n = 0;
    check_encode<QS_FP32>(&n);
    check_encode<QS_BF16>(&n);
    check_encode<QS_FP16>(&n);
    check_encode<QS_E4M3>(&n);
    check_encode<QS_E5M2>(&n);
    check_encode<QS_E8M0>(&n);
    check_encode<QS_E2M1>(&n);
    check_encode<QS_E2M3>(&n);
    check_encode<QS_E3M2>(&n);
    double t1 = now_s();
    printf("check_arith: formats: decode of every code, %ld encodings (9 formats x 6 modes x 3 "
           "policies, hw and portable paths), %.1f s\n",
           n, t1 - t0);
    qs_ctx *ctx = qs_ctx_new();
    check_dequant_codes(ctx);
    check_dequant_random(ctx);
    qs_ctx_free(ctx);
    double t2 = now_s();
    printf("check_arith: dequantize: every code x scale code, every recipe/variant/direction, "
           "%.1f s\n",
           t2 - t1);
    if (g_order_nan)
        printf("check_arith: note: %ld dequantized NaNs of two NaN operands differ in payload or "
               "sign: the reference was compiled with another operand order (not counted)\n",
               g_order_nan);
    if (check_device())
        printf("check_arith: device: hw vs portable RNE on all 2^32 floats, portable sample vs "
               "reference, %.1f s\n",
               now_s() - t2);
    else
        printf("check_arith: device: no CUDA device, device checks skipped\n");
    return g_fail;
}

#endif
