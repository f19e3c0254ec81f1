/* check_nvfp4.cuh: the NVFP4 part of cuda/check_arith.cu — cuda/qc_nvfp4.cuh against
 * libqspec, on the CPU, bitwise:
 *  - E2M1 RNE: all 2^16 BF16-representable floats, every float of [1/8, 8) (of -[1/8, 8)
 *    every stride/4096-th one), every float within 2^12 ULPs of each grid point and
 *    midpoint, every stride-th float;
 *  - E2M1 stochastic: the same BF16 floats and neighbourhoods, each with the bits on either
 *    side of its own boundary, 0, 1, 2^31, 2^32-1 and random bits; stride-th floats with
 *    random bits;
 *  - the fast path's e2m1_rne_magic and e2m1_rne_minmax against e2m1_rne on all 2^32
 *    floats; with a CUDA device, on the device too: e2m1_rne_minmax (whose FMNMX takes a
 *    NaN operand as missing), build 3's amax (fmaxf of |v|) against abs_bits and
 *    round_bf16_pair against round_bf16, each on all 2^32 floats;
 *  - E4M3 decoding of all 256 codes; BF16 rounding at and around every halfway pattern;
 *  - Philox4x32-10 and the stream mapping on 2^18 random (seed, offset, index) triples;
 *  - the 16-point Hadamard transform on 2^16 random BF16 groups (specials, cancellation,
 *    signed zeros) against qsi_rht16, and rht16_butterfly on those and on groups whose
 *    exponent spread and largest binade sit at either side of its exactness bounds;
 *  - the generic kernels' scale_entry/data_byte and amax, run over whole tensors, against
 *    qs_quantize: every dtype, variant, tile, rht, sr and copy selection on full and
 *    partial shapes with NaN, Inf, -0, zero blocks, tiny and huge values; and two-block
 *    tensors over a sample of every tensor amax A (TE's S_enc overflow, torchao's pts
 *    underflow, Inf).
 * qc_check_nvfp4(stride) returns the number of mismatches. */
#ifndef QC_CHECK_NVFP4_CUH
#define QC_CHECK_NVFP4_CUH

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <vector>

#include "check_util.cuh"

#include "qc_nvfp4.cuh"
#include "qspec/random.h"
#include "qspec/recipe.h"

/* The reference transform (ref/hadamard.c), internal to libqspec but linked statically. */
extern "C" void qsi_rht16(const float *v, int64_t n, float *out);

namespace qc_check_nv
{

using namespace qc::nv;

long g_fail = 0;

void fail(const char *what, const char *ctx, uint64_t x, uint32_t want, uint32_t got)
{
    qc_check_report(&g_fail, "nvfp4", what, ctx, x, want, got);
}

uint64_t g_rng = 0x243F6A8885A308D3ull;
uint64_t next_u64()
{
    return qc_check_splitmix(&g_rng);
}
uint32_t next_u32()
{
    return static_cast<uint32_t>(next_u64() >> 32);
}
/* Uniform in [0, 1). */
float next_unit()
{
    return static_cast<float>(next_u32() >> 8) * 0x1p-24f;
}

/* ---------------------------------------------------------------- E2M1 */

uint32_t ref_e2m1(float v, qs_round r, uint32_t u)
{
    qs_cast_mode mode = {r, QS_OVF_SATFINITE, u};
    uint32_t code = 0;
    qs_encode_f32(QS_E2M1, v, mode, &code);
    return code;
}

/* The grid points and midpoints of E2M1 (the RNE and SR boundaries) and 8. */
const float kE2m1Points[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f,
                             2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  6.0f, 7.0f,  8.0f};

/* Every float within n ULPs of +-each point. */
template <typename F> void for_neighbours(uint32_t n, F f)
{
    for (float p : kE2m1Points)
        for (uint32_t sign = 0; sign < 2; sign++) {
            uint32_t b = qc::bits_of(p);
            for (uint32_t u = b - n; u <= b + n; u++)
                f(u | (sign << 31));
        }
}

/* The SR bits at v's own boundary: u0 rounds up, u0 - 1 does not (0 when r = 0). */
uint32_t sr_boundary(float v)
{
    double a = fabs((double)v);
    if (!(a > 0) || !(a < 6))
        return 0;
    double q = a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0);
    double t = a / q; /* exact: q is a power of two */
    double r = floor(ldexp(t - floor(t), 32));
    return (uint32_t)(4294967296.0 - r);
}

void check_rne_one(uint32_t b)
{
    float v = qc::from_bits(b);
    uint32_t want = qs_encode_e2m1(v, QS_OVF_SATFINITE), got = e2m1_rne(v);
    if (want != got)
        fail("e2m1 rne", "", b, want, got);
}

void check_sr_one(uint32_t b, uint32_t u)
{
    float v = qc::from_bits(b);
    uint32_t want = ref_e2m1(v, QS_ROUND_SR, u), got = e2m1_sr(v, u);
    if (e2m1_sr_minmax(v, u) != want)
        fail("e2m1 sr minmax", "", (static_cast<uint64_t>(u) << 32) | b, want,
             e2m1_sr_minmax(v, u));
    if (want != got)
        fail("e2m1 sr", "", (static_cast<uint64_t>(u) << 32) | b, want, got);
}

void check_sr_bits(uint32_t b)
{
    uint32_t u0 = sr_boundary(qc::from_bits(b));
    const uint32_t us[] = {0u, 1u, 0x80000000u, 0xFFFFFFFFu, u0, u0 - 1u, u0 + 1u, next_u32()};
    for (uint32_t u : us)
        check_sr_one(b, u);
}

void check_e2m1(uint64_t stride)
{
    for (uint32_t h = 0; h < 65536u; h++) {
        check_rne_one(h << 16);
        check_sr_bits(h << 16);
    }
    for_neighbours(4096, check_rne_one);
    for_neighbours(256, check_sr_bits);
    uint32_t step = stride > 4096 ? static_cast<uint32_t>(stride / 4096) : 1u;
    for (uint32_t b = 0x3E000000u; b < 0x41000000u; b++) { /* [1/8, 8), negatives sampled */
        check_rne_one(b);
        if (b % step == 0)
            check_rne_one(b | 0x80000000u);
    }
    for (uint64_t b = 0; b < (1ull << 32); b += stride) {
        check_rne_one(static_cast<uint32_t>(b));
        check_sr_one(static_cast<uint32_t>(b), next_u32());
    }
}

/* The magic-number encoders against the threshold one on every FP32 pattern. */
void check_e2m1_magic()
{
    uint64_t bad = 0, bad2 = 0;
    for (uint64_t b = 0; b < (1ull << 32); b++) {
        float v = qc::from_bits(static_cast<uint32_t>(b));
        uint32_t want = e2m1_rne(v), got = e2m1_rne_magic(v), got2 = e2m1_rne_minmax(v);
        if (want != got && bad++ < 8)
            fail("e2m1 rne magic", "", b, want, got);
        if (want != got2 && bad2++ < 8)
            fail("e2m1 rne minmax", "", b, want, got2);
    }
    g_fail += bad > 8 ? static_cast<long>(bad - 8) : 0;
    g_fail += bad2 > 8 ? static_cast<long>(bad2 - 8) : 0;
}

constexpr int kB3 = 5;

/* The floor(r * 2^32) of e2m1_sr for |v| below 6 (its own arithmetic). */
__host__ __device__ inline uint32_t sr_r32(uint32_t a)
{
    int field = static_cast<int>(a >> 23);
    uint32_t sig = field ? (a & 0x7FFFFFu) | 0x800000u : a;
    int ex = field ? field - 127 : -126, e = ex > 0 ? ex : 0, sh = 22 + e - ex;
    return static_cast<uint32_t>(sh < 64 ? (static_cast<uint64_t>(sig) << 32) >> sh : 0);
}

/* The device halves of build 3's arithmetic, on every FP32 pattern u (v its float): bad[0]
 * counts the u where e2m1_rne_minmax differs from e2m1_rne, bad[1] where fmaxf(+0, |v|)
 * differs from abs_bits, bad[2] where round_bf16_pair (v, and u with its low half-word
 * inverted, as the pair) differs from round_bf16, bad[3] where e2m1_sr_minmax differs from
 * e2m1_sr with a hashed word and with the two words at v's rounding boundary, bad[4] (every
 * 64th u) where random4_wide differs from random4; first[i] is one such u. */
__global__ void build3_device(unsigned long long *bad, uint32_t *first)
{
    uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t u = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         u < (1ull << 32); u += stride) {
        uint32_t b = static_cast<uint32_t>(u), b2 = b ^ 0x0000FFFFu;
        float v = qc::from_bits(b), v2 = qc::from_bits(b2);
        bool d[kB3];
        d[0] = e2m1_rne_minmax(v) != e2m1_rne(v);
        d[1] = qc::bits_of(fmaxf(0.0f, fabsf(v))) != qc::abs_bits(v);
        float r, r2;
        round_bf16_pair(v, v2, r, r2);
        d[2] = qc::bits_of(r) != qc::bits_of(round_bf16(v)) ||
               qc::bits_of(r2) != qc::bits_of(round_bf16(v2));
        uint32_t h = b * 0x9E3779B9u ^ (b >> 15) * 0x85EBCA6Bu, a = b & 0x7FFFFFFFu;
        uint32_t ub = a < 0x40C00000u ? 0u - sr_r32(a) : h; /* 2^32 - r32 */
        d[3] = e2m1_sr_minmax(v, h) != e2m1_sr(v, h) || e2m1_sr_minmax(v, ub) != e2m1_sr(v, ub) ||
               e2m1_sr_minmax(v, ub - 1u) != e2m1_sr(v, ub - 1u);
        d[4] = false;
        if ((b & 63u) == 0) {
            uint32_t w[4], w2[4];
            uint64_t seed = (static_cast<uint64_t>(h) << 32) | b, off = ~seed * 3u;
            random4(seed, off, seed ^ (off >> 7), w);
            random4_wide(seed, off, seed ^ (off >> 7), w2);
            d[4] = w[0] != w2[0] || w[1] != w2[1] || w[2] != w2[2] || w[3] != w2[3];
        }
        for (int i = 0; i < kB3; i++)
            if (d[i] && atomicAdd(&bad[i], 1ull) == 0)
                first[i] = b;
    }
}

void check_build3_device()
{
    if (qc::bits_of(qc::div_rn(1.0f, 6.0f)) != kSixthBits)
        fail("fl(1/6)", "", 6, kSixthBits, qc::bits_of(qc::div_rn(1.0f, 6.0f)));
    if (!qc_check_have_device()) {
        printf("check_arith: nvfp4: no CUDA device, build 3's device checks skipped\n");
        return;
    }
    unsigned long long *dbad = nullptr;
    uint32_t *dfirst = nullptr;
    if (cudaMalloc(&dbad, kB3 * sizeof *dbad) != cudaSuccess ||
        cudaMalloc(&dfirst, kB3 * sizeof *dfirst) != cudaSuccess ||
        cudaMemset(dbad, 0, kB3 * sizeof *dbad) != cudaSuccess) {
        fail("build 3 device", "cudaMalloc failed", 0, 0, 0);
        cudaFree(dbad);
        cudaFree(dfirst);
        return;
    }
    build3_device<<<4096, 256>>>(dbad, dfirst);
    unsigned long long bad[kB3] = {};
    uint32_t first[kB3] = {};
    cudaError_t err = cudaMemcpy(bad, dbad, sizeof bad, cudaMemcpyDeviceToHost);
    if (err == cudaSuccess)
        err = cudaMemcpy(first, dfirst, sizeof first, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
        fail("build 3 device", cudaGetErrorString(err), 0, 0, 0);
    const char *what[kB3] = {"device e2m1 rne minmax", "device fmaxf amax",
                             "device round_bf16_pair", "device e2m1 sr minmax",
                             "device random4_wide"};
    for (int i = 0; i < kB3; i++)
        if (bad[i]) {
            fail(what[i], "", first[i], 0, 0);
            g_fail += static_cast<long>(bad[i] - 1);
        }
    printf("check_arith: nvfp4: build 3 on the device, all 2^32 floats: %llu, %llu, %llu, %llu, "
           "%llu mismatches (e2m1 rne minmax, fmaxf amax, bf16 pair, e2m1 sr minmax, philox "
           "wide)\n",
           bad[0], bad[1], bad[2], bad[3], bad[4]);
    cudaFree(dbad);
    cudaFree(dfirst);
}

/* ---------------------------------------------------------------- E4M3, BF16, Philox */

void check_e4m3_bf16(uint64_t stride)
{
    for (uint32_t c = 0; c < 256; c++) {
        uint32_t want = qc::bits_of(qs_decode_f32(QS_E4M3, c)), got = qc::bits_of(dec_e4m3(c));
        if (want != got)
            fail("dec e4m3", "", c, want, got);
    }
    auto one = [](uint32_t b) {
        float v = qc::from_bits(b);
        uint32_t want = qc::bits_of(qs_round_bf16(v)), got = qc::bits_of(round_bf16(v));
        if (want != got)
            fail("round bf16", "", b, want, got);
    };
    for (uint32_t h = 0; h < 65536u; h++)
        for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
            one((h << 16) | lo);
    for (uint64_t b = 0; b < (1ull << 32); b += stride)
        one(static_cast<uint32_t>(b));
}

void check_philox()
{
    for (int n = 0; n < (1 << 18); n++) {
        uint64_t seed = next_u64(), offset = next_u64(), i = next_u64();
        if (n % 4 == 1) { /* small values, and indices about 2^32 (the counter's high word) */
            seed &= 0xFF;
            offset &= 0xF;
            i = (n % 8 == 1) ? (i & 0xFFFF) : 0xFFFFFFF0ull + (i & 0x3F);
        }
        uint32_t want = qs_random_u32(seed, offset, i), got = random_u32(seed, offset, i);
        if (want != got)
            fail("philox", "", i, want, got);
        uint32_t ctr[4] = {static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32),
                           static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
        uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, w[4],
                 r[4];
        qs_philox4x32_10(ctr, key, w);
        random4(seed, offset, i, r);
        for (int k = 0; k < 4; k++)
            if (w[k] != r[k])
                fail("philox4", "", i, w[k], r[k]);
    }
}

/* ---------------------------------------------------------------- the transform */

/* A random BF16 value: mostly normal in a binade range around 2^e0, sometimes special. */
float random_bf16(int e0, int special_rate)
{
    uint32_t r = next_u32();
    if (special_rate && r % special_rate == 0) {
        static const uint32_t sp[] = {0x7FC00000u, 0xFFC10000u, 0x7F800000u, 0xFF800000u,
                                      0x80000000u, 0x00000000u, 0x00010000u, 0x80030000u,
                                      0x7F7F0000u, 0xFF7F0000u, 0x00800000u};
        return qc::from_bits(sp[next_u32() % (sizeof sp / sizeof sp[0])]);
    }
    int e = e0 + static_cast<int>(next_u32() % 9) - 4;
    float v = ldexpf(1.0f + next_unit(), e);
    return qs_round_bf16(next_u32() & 1 ? -v : v);
}

void check_butterfly_one(const float v[16], const float want[16], uint64_t n)
{
    float got[16];
    rht16_butterfly(v, got);
    for (int j = 0; j < 16; j++)
        if (qc::bits_of(want[j]) != qc::bits_of(got[j]))
            fail("rht16 butterfly", "", n * 16 + j, qc::bits_of(want[j]), qc::bits_of(got[j]));
}

/* Groups at the butterflies' exactness bounds: the largest value in binade eh (its
 * exponent field), the others spread down to eh - spread (or below it), full 8-bit
 * significands, with sums that round in the reference's order when the spread or the
 * binade is past the bound; some zeros and -0s, and subnormals. */
void check_butterfly_bounds()
{
    static const int ehs[] = {1, 2, 14, 20, 127, 140, 240, 248, 249, 250, 251, 252, 253, 254};
    for (int n = 0; n < (1 << 17); n++) {
        int eh = ehs[n % 14], spread = 10 + static_cast<int>(next_u32() % 6);
        float v[16], want[16];
        for (int i = 0; i < 16; i++) {
            int e = i == 0 ? eh : eh - static_cast<int>(next_u32() % (spread + 1));
            uint32_t m = (next_u32() & 0x7Fu) << 16 | (next_u32() % 4 == 0 ? 0x7F0000u : 0u);
            uint32_t b = e >= 1 ? (static_cast<uint32_t>(e) << 23) | (m & 0x7F0000u) : m;
            if (next_u32() % 16 == 0)
                b = 0;
            v[i] = qc::from_bits(b | ((next_u32() & 1u) << 31));
        }
        qsi_rht16(v, 16, want);
        check_butterfly_one(v, want, static_cast<uint64_t>(n) | (1ull << 40));
    }
    /* The largest sums: one value of odd last bit `spread` binades below fifteen of the
     * largest significand, each placed so that its product adds up in output 0 or j. */
    for (int n = 0; n < 14 * 8 * 16 * 16; n++) {
        int eh = ehs[n % 14], spread = 9 + (n / 14) % 8, lo = (n / 112) % 16, j = n / 1792;
        if (eh - spread < 1)
            continue;
        float v[16], want[16];
        for (int i = 0; i < 16; i++) {
            uint32_t e = static_cast<uint32_t>(i == lo ? eh - spread : eh);
            uint32_t b = (e << 23) | (i == lo ? 0x10000u : 0x7F0000u);
            v[i] = qc::from_bits(b | (rht_neg(i, j) ? 0x80000000u : 0u));
        }
        qsi_rht16(v, 16, want);
        check_butterfly_one(v, want, static_cast<uint64_t>(n) | (2ull << 40));
    }
}

void check_rht()
{
    static const int e0s[] = {0, -20, 60, 126, -126, -130};
    for (int n = 0; n < (1 << 16); n++) {
        float v[16], want[16], got[16];
        int e0 = e0s[n % 6];
        for (int i = 0; i < 16; i++)
            v[i] = random_bf16(e0, n % 3 == 0 ? 7 : 0);
        if (n % 5 == 4) /* exact cancellations: pairs of equal magnitude */
            for (int i = 0; i < 16; i += 2)
                v[i + 1] = (next_u32() & 1) ? v[i] : -v[i];
        if (n % 7 == 6) { /* zeros whose products for one output j are all -0 */
            int j = static_cast<int>(next_u32() % 16);
            for (int i = 0; i < 16; i++)
                v[i] = rht_neg(i, j) ? 0.0f : -0.0f;
            if (n % 14 == 13)
                v[next_u32() % 16] = -v[0];
        }
        qsi_rht16(v, 16, want);
        rht16(v, got);
        for (int j = 0; j < 16; j++)
            if (qc::bits_of(want[j]) != qc::bits_of(got[j]))
                fail("rht16", "", static_cast<uint64_t>(n) * 16 + j, qc::bits_of(want[j]),
                     qc::bits_of(got[j]));
        check_butterfly_one(v, want, static_cast<uint64_t>(n));
    }
    check_butterfly_bounds();
}

/* ---------------------------------------------------------------- whole tensors */

/* The generic kernels' outputs, computed on the CPU with the same functions. */
struct model_out {
    std::vector<uint8_t> data[2], scale[2];
    float amax[2], enc[2], dec[2];
};

template <int DT, int V>
void run_model(const qs_recipe_config &cfg, const qs_tensor &x, model_out &mo)
{
    job jb;
    memset(&jb, 0, sizeof jb);
    jb.x = x.data;
    jb.M = x.shape[0];
    jb.K = x.shape[1];
    jb.tile_2d = cfg.tile_2d;
    jb.rht = cfg.rht && cfg.columnwise && !cfg.tile_2d;
    jb.sr = cfg.sr;
    jb.seed = cfg.seed;
    jb.offset = cfg.offset;
    int64_t n = jb.M * jb.K;
    uint32_t amax[2] = {0, 0}; /* amax_elem, amax_rht */
    for (int64_t i = 0; i < n; i++)
        amax[0] = max_u32(amax[0], qc::abs_bits(in_load<DT>(x.data, static_cast<size_t>(i))));
    amax[1] = amax[0];
    if (jb.rht) {
        amax[1] = 0;
        for (int64_t k = 0; k < jb.K; k++)
            for (int64_t m0 = 0; m0 < jb.M; m0 += kBlock) {
                float v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = in_load<DT>(x.data, static_cast<size_t>((m0 + i) * jb.K + k));
                rht16(v, v);
                for (int i = 0; i < 16; i++)
                    amax[1] = max_u32(amax[1], qc::abs_bits(v[i]));
            }
    }
    jb.amax_bits = amax;
    const int want[2] = {cfg.rowwise, cfg.columnwise};
    for (int d = 0; d < 2; d++) {
        mo.data[d].clear();
        mo.scale[d].clear();
        mo.amax[d] = mo.enc[d] = mo.dec[d] = 0.0f;
        if (!want[d])
            continue;
        mo.scale[d].resize(static_cast<size_t>(scale_count(jb, d)));
        for (size_t i = 0; i < mo.scale[d].size(); i++)
            mo.scale[d][i] = scale_entry<DT, V>(jb, d, static_cast<int64_t>(i));
        jb.scale[d] = mo.scale[d].data();
        mo.data[d].resize(static_cast<size_t>((n + 1) / 2));
        for (size_t j = 0; j < mo.data[d].size(); j++)
            mo.data[d][j] = data_byte<DT, V>(jb, d, static_cast<int64_t>(j));
        mo.amax[d] = copy_amax(amax, jb.tile_2d, d);
        global g = tensor_scale(V, mo.amax[d]);
        mo.enc[d] = g.enc;
        mo.dec[d] = g.dec;
    }
}

void model(const qs_recipe_config &cfg, const qs_tensor &x, model_out &mo)
{
    int v = cfg.nv_variant == QS_NV_TORCHAO;
    int dt = x.dtype == QS_FP32 ? QC_IN_FP32 : (x.dtype == QS_BF16 ? QC_IN_BF16 : QC_IN_FP16);
    if (dt == QC_IN_FP32)
        v ? run_model<QC_IN_FP32, 1>(cfg, x, mo) : run_model<QC_IN_FP32, 0>(cfg, x, mo);
    else if (dt == QC_IN_BF16)
        v ? run_model<QC_IN_BF16, 1>(cfg, x, mo) : run_model<QC_IN_BF16, 0>(cfg, x, mo);
    else
        v ? run_model<QC_IN_FP16, 1>(cfg, x, mo) : run_model<QC_IN_FP16, 0>(cfg, x, mo);
}

/* Quantizes x with the reference and the model; compares every output byte and bit. */
void check_tensor(qs_ctx *ctx, const qs_recipe_config &cfg, const qs_tensor &x)
{
    char desc[160];
    snprintf(desc, sizeof desc,
             "%s %lldx%lld %s %s rht=%d sr=%d seed=%llu offset=%llu row=%d col=%d",
             qs_dtype_name(x.dtype), (long long)x.shape[0], (long long)x.shape[1],
             cfg.tile_2d ? "2d" : "1d", cfg.nv_variant == QS_NV_TORCHAO ? "torchao" : "te", cfg.rht,
             cfg.sr, (unsigned long long)cfg.seed, (unsigned long long)cfg.offset, cfg.rowwise,
             cfg.columnwise);
    qs_quantizer q;
    qs_quantized z;
    if (qs_quantizer_init(ctx, &q, &cfg) != QS_OK || qs_quantize(ctx, &q, &x, &z) != QS_OK) {
        printf("nvfp4: reference quantization failed: %s: %s\n", desc, qs_ctx_errmsg(ctx));
        exit(2);
    }
    model_out mo;
    model(cfg, x, mo);
    for (int d = 0; d < 2; d++) {
        const char *dn = d ? "col" : "row";
        const qs_tensor *t[2] = {&z.data[d], &z.scale[d]};
        const std::vector<uint8_t> *m[2] = {&mo.data[d], &mo.scale[d]};
        for (int s = 0; s < 2; s++) {
            size_t nb = t[s]->data ? t[s]->nbytes : 0;
            if (nb != m[s]->size()) {
                printf("FAIL nvfp4 %s %s: %zu bytes, model %zu: %s\n", dn, s ? "scale" : "data", nb,
                       m[s]->size(), desc);
                g_fail++;
                continue;
            }
            const uint8_t *b = static_cast<const uint8_t *>(t[s]->data);
            for (size_t i = 0; i < nb; i++)
                if (b[i] != (*m[s])[i]) {
                    char w[200];
                    snprintf(w, sizeof w, "%s %s: %s", dn, s ? "scale" : "data", desc);
                    fail("byte", w, i, b[i], (*m[s])[i]);
                    break;
                }
        }
        const float rf[3] = {z.amax[d], z.global_enc[d], z.global_dec[d]};
        const float mf[3] = {mo.amax[d], mo.enc[d], mo.dec[d]};
        static const char *const names[3] = {"amax", "global_enc", "global_dec"};
        for (int s = 0; s < 3; s++)
            if (qc::bits_of(rf[s]) != qc::bits_of(mf[s])) {
                char w[200];
                snprintf(w, sizeof w, "%s %s: %s", dn, names[s], desc);
                fail("tensor scale", w, 0, qc::bits_of(rf[s]), qc::bits_of(mf[s]));
            }
    }
    qs_quantized_free(&z);
    qs_quantizer_free(&q);
}

/* Input styles: 0 clean normal, 1 with specials and zero blocks, 2 uniform in [-6, 6],
 * 3 tiny (about 2^-125), 4 huge (about 2^120). */
float style_value(int style, int64_t i, int zero_block)
{
    if (zero_block)
        return (i % 3 == 0) ? -0.0f : 0.0f;
    float u = 2.0f * next_unit() - 1.0f;
    switch (style) {
    case 1: {
        uint32_t r = next_u32() % 64;
        static const uint32_t sp[] = {0x7FC00000u, 0xFFC00001u, 0x7F800000u, 0xFF800000u,
                                      0x80000000u, 0x00000000u, 0x00000001u, 0x7F7FFFFFu};
        if (r < 8)
            return qc::from_bits(sp[r]);
        if (r < 12) /* E2M1 ties of a block whose amax is 6 */
            return (r & 1 ? -1.0f : 1.0f) * kE2m1Points[next_u32() % 13];
        return ldexpf(u, static_cast<int>(next_u32() % 12) - 6);
    }
    case 2:
        return 6.0f * u;
    case 3:
        return ldexpf(u, -125 + static_cast<int>(next_u32() % 8));
    case 4:
        return ldexpf(u, 120 + static_cast<int>(next_u32() % 8));
    default:
        return ldexpf(u, static_cast<int>(next_u32() % 5) - 2);
    }
}

void fill_tensor(qs_ctx *ctx, qs_tensor &x, qs_dtype dt, int64_t M, int64_t K, int style)
{
    int64_t shape[2] = {M, K};
    if (qs_tensor_alloc(ctx, &x, dt, 2, shape) != QS_OK)
        exit(2);
    int64_t zb =
        style == 1 ? static_cast<int64_t>(next_u32() % 4) : -1; /* a zero 16-column stripe */
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            size_t i = static_cast<size_t>(m * K + k);
            float v = style_value(style, static_cast<int64_t>(i), k / 16 == zb && m % 3 == 0);
            if (dt == QS_FP32)
                static_cast<float *>(x.data)[i] = v;
            else if (dt == QS_BF16)
                static_cast<uint16_t *>(x.data)[i] = qs_f32_to_bf16(v);
            else
                static_cast<uint16_t *>(x.data)[i] = qs_f32_to_f16(v);
        }
}

qs_recipe_config nv_config(qs_ctx *ctx)
{
    qs_recipe_config cfg;
    if (qs_recipe_config_default(ctx, &cfg, QS_RECIPE_NVFP4, QS_ROLE_INPUT) != QS_OK)
        exit(2);
    return cfg;
}

void check_tensors(qs_ctx *ctx)
{
    static const int64_t shapes[][2] = {{1, 1},   {1, 17},  {3, 5},   {2, 16},  {16, 16},
                                        {17, 33}, {31, 16}, {33, 70}, {16, 32}, {32, 64},
                                        {48, 32}, {40, 56}, {5, 128}, {128, 64}};
    static const qs_dtype dts[] = {QS_FP32, QS_BF16, QS_FP16};
    static const int copies[3][2] = {{1, 1}, {1, 0}, {0, 1}};
    int run = 0;
    for (qs_dtype dt : dts)
        for (const int64_t *s : shapes)
            for (int v = 0; v < 2; v++)
                for (int tile = 0; tile < 2; tile++)
                    for (int sr = 0; sr < 2; sr++)
                        for (int rht = 0; rht < 2; rht++) {
                            if (rht && (tile || dt != QS_BF16 || s[0] % 16 != 0))
                                continue;
                            for (const int *cp : copies) {
                                qs_recipe_config cfg = nv_config(ctx);
                                cfg.nv_variant = v ? QS_NV_TORCHAO : QS_NV_TE;
                                cfg.tile_2d = tile;
                                cfg.sr = sr;
                                cfg.rht = rht;
                                cfg.rowwise = cp[0];
                                cfg.columnwise = cp[1];
                                cfg.seed = run % 3 == 0 ? next_u64() : static_cast<uint64_t>(run);
                                cfg.offset = run % 5 == 0 ? ~0ull : next_u64() % 1000;
                                qs_tensor x;
                                fill_tensor(ctx, x, dt, s[0], s[1], run % 5);
                                check_tensor(ctx, cfg, x);
                                qs_tensor_free(&x);
                                run++;
                            }
                        }
}

/* Two blocks of 16, amax A and b = A * f, over a sample of every A [REC-NV-GLOBAL]. */
void check_amax_sweep(qs_ctx *ctx, uint64_t stride)
{
    static const float fs[] = {1.0f, 0x1p-8f, 0x1p-30f, 0.0f};
    int run = 0;
    auto one = [&](uint32_t b) {
        float A = qc::from_bits(b & 0x7FFFFFFFu);
        if (A != A)
            return;
        for (float f : fs) {
            qs_tensor x;
            int64_t shape[2] = {1, 32};
            if (qs_tensor_alloc(ctx, &x, QS_FP32, 2, shape) != QS_OK)
                exit(2);
            float *p = static_cast<float *>(x.data), bb = A * f;
            for (int i = 0; i < 16; i++) {
                p[i] = A * (2.0f * next_unit() - 1.0f);
                p[16 + i] = bb * (2.0f * next_unit() - 1.0f);
            }
            p[0] = A;
            p[17] = -bb;
            for (int v = 0; v < 2; v++) {
                qs_recipe_config cfg = nv_config(ctx);
                cfg.rht = 0;
                cfg.nv_variant = v ? QS_NV_TORCHAO : QS_NV_TE;
                cfg.sr = run % 2;
                cfg.tile_2d = (run / 2) % 2;
                cfg.seed = static_cast<uint64_t>(run);
                check_tensor(ctx, cfg, x);
                run++;
            }
            qs_tensor_free(&x);
        }
    };
    static const uint32_t special[] = {0x00000000u, 0x7F800000u, 0x7F7FFFFFu, 0x00000001u,
                                       0x00800000u, 0x0D800000u, 0x0E000000u, 0x3F800000u,
                                       0x45280000u, 0x40C00000u};
    for (uint32_t s : special)
        one(s);
    for (uint64_t b = 0; b < 0x80000000ull; b += stride)
        one(static_cast<uint32_t>(b));
}

} // namespace qc_check_nv

inline long qc_check_nvfp4(uint64_t stride)
{
    using namespace qc_check_nv;
    qs_ctx *ctx = qs_ctx_new();
    clock_t t0 = clock();
    check_e2m1(stride);
    check_e2m1_magic();
    check_build3_device();
    check_e4m3_bf16(stride);
    check_philox();
    check_rht();
    check_tensors(ctx);
    check_amax_sweep(ctx, stride * 8 + 1);
    qs_ctx_free(ctx);
    printf("check_arith: nvfp4: encoders, philox, rht16, whole tensors: %ld mismatches, %.1f s\n",
           g_fail, static_cast<double>(clock() - t0) / CLOCKS_PER_SEC);
    return g_fail;
}

#endif
