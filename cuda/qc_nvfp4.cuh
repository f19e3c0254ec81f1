/* qc_nvfp4.cuh: the scalar arithmetic of the NVFP4 quantizers (spec/recipes.md section 7)
 * and the per-entry work of their generic kernels. The E2M1 encoders (RNE, stochastic),
 * E4M3 decoding, the te and torchao chains [REC-VARIANTS], Philox4x32-10 [RNG-STREAM] and
 * the 16-point Hadamard transform in the reference's operation order are all __host__
 * __device__, and so are scale_entry() and data_byte(), which compute one scale code or one
 * packed data byte of any shape: cuda/check_arith.cu runs them on a CPU against libqspec. */
#ifndef QC_NVFP4_CUH
#define QC_NVFP4_CUH

#include "qc_device.cuh"

/* #pragma unroll in the functions compiled for both sides (the host compiler has none). */
#ifdef __CUDA_ARCH__
#define QC_NV_UNROLL _Pragma("unroll")
#else
#define QC_NV_UNROLL
#endif

namespace qc
{
namespace nv
{

constexpr int kBlock = 16;                 /* [REC-NV-1D]: 1x16 blocks, 16x16 tiles */
constexpr float kFltMax = 3.402823466e38f; /* FLT_MAX */

__host__ __device__ __forceinline__ float add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* fl(a * b + c), one rounding. */
__host__ __device__ __forceinline__ float fma_rn(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

/* C fminf: a NaN operand yields the other operand. */
__host__ __device__ __forceinline__ float fmin_c(float a, float b)
{
    if (a != a)
        return b;
    if (b != b)
        return a;
    return a < b ? a : b;
}

__host__ __device__ __forceinline__ uint32_t max_u32(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

/* torch.clamp: a NaN stays NaN. */
__host__ __device__ __forceinline__ float clamp_torch(float v, float lo, float hi)
{
    if (v != v)
        return v;
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ---------------------------------------------------------------- formats */

/* [FMT-DECODE] E4M3 code to FP32, exact; 0x7F/0xFF give the quiet NaN with the code's sign. */
__host__ __device__ __forceinline__ float dec_e4m3(uint32_t code)
{
    uint32_t sign = (code & 0x80u) << 24, mag = code & 0x7Fu;
    if (mag == 0x7Fu)
        return from_bits(sign | 0x7FC00000u);
    uint32_t e = mag >> 3, m = mag & 7u;
    if (e == 0) /* subnormal m * 2^-9; both factors exact, so the product is */
        return from_bits(sign | bits_of(mul_rn(static_cast<float>(m), 0x1p-9f)));
    return from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

/* [FMT-E2M1] RNE, satfinite: |v| compared with the midpoints of 0, .5, 1, 1.5, 2, 3, 4, 6
 * (ties to the even code); above 5 (and +-Inf) +-6; NaN +6 (0x7) [FMT-E2M1-NAN]; -0 0x8. */
__host__ __device__ __forceinline__ uint32_t e2m1_rne(float v)
{
    uint32_t b = bits_of(v), a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return 0x7u;
    uint32_t c = (a > 0x3E800000u) + (a >= 0x3F400000u) + (a > 0x3FA00000u) + (a >= 0x3FE00000u) +
                 (a > 0x40200000u) + (a >= 0x40600000u) + (a > 0x40A00000u);
    return ((b >> 28) & 0x8u) | c;
}

/* [FMT-E2M1] e2m1_rne by one rounding of the adder: |v| + 2^(22+c), c = 0, 1, 2 for |v| below
 * 2, below 4, else, is rounded to nearest even at the E2M1 quantum of |v|'s binade (0.5, 1,
 * 2), so the sum's bits less the magic's count the quanta, n; the code is n + 2c, at most 7
 * (above 6, +-Inf and NaN give 7; a NaN loses its sign). The same codes as e2m1_rne for every
 * FP32 input (cuda/check_arith.cu compares all 2^32) in about half the instructions. */
__host__ __device__ __forceinline__ uint32_t e2m1_rne_magic(float v)
{
    uint32_t b = bits_of(v), a = b & 0x7FFFFFFFu;
    uint32_t e = a >> 23;
    uint32_t c = e < 127u ? 127u : (e > 129u ? 129u : e); /* 127 + (0, 1, 2) */
    uint32_t magic = (c + 22u) << 23;                     /* 2^(22 + c - 127) */
    uint32_t base = c * 0x7FFFFEu + 0x0B0000FEu;          /* magic - 2c + 254 */
    uint32_t mag = bits_of(add_rn(from_bits(a), from_bits(magic))) - base;
    uint32_t s = a > 0x7F800000u ? 0u : b;
    return ((s >> 28) & 0x8u) | (mag < 7u ? mag : 7u);
}

/* fminf where a NaN operand yields the other: the device's FMNMX (any NaN), fmin_c on the
 * host. */
__host__ __device__ __forceinline__ float fmin_num(float a, float b)
{
#ifdef __CUDA_ARCH__
    return fminf(a, b);
#else
    return fmin_c(a, b);
#endif
}

/* (s & 7) | (sh & ~7): one LOP3 on the device (the compiler otherwise splits the select in
 * two when it knows sh < 16). */
__host__ __device__ __forceinline__ uint32_t low3_select(uint32_t sh, uint32_t s)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;"
        : "=r"(r)
        : "r"(sh), "r"(s), "r"(7u)); /* LUT (b & c) | (a & ~c) */
    return r;
#else
    return (s & 7u) | (sh & ~7u);
#endif
}

/* [FMT-E2M1] e2m1_rne by the magic-number add of e2m1_rne_magic with the clamps done by two
 * FP32 minimums: y = min(|v|, 6) (+-Inf and NaN give 6, code 7, so no upper clamp is needed)
 * and t = min(v, 6), whose sign is v's except for a NaN (+6): the code's sign. The magic
 * 2^(22+c) for y's binade c (0, 1, 2 below 2, below 4, else) carries 2c in its last bits,
 * so y + magic, rounded to nearest even at the quantum of y's binade (the parity of the
 * sum's last bit is that of the quanta, n), ends in the code n + 2c, at most 7. About eight
 * instructions (FMNMX, SHF, IMNMX, IMAD, FADD, FMNMX, SHF, LOP3); the same codes as
 * e2m1_rne for every FP32 input (cuda/check_arith.cu compares all 2^32 on the host and on
 * the device). */
__host__ __device__ __forceinline__ uint32_t e2m1_rne_minmax(float v)
{
    float y = fmin_num(fabsf(v), 6.0f), t = fmin_num(v, 6.0f);
    uint32_t e = bits_of(y) >> 23;
    e = e > 127u ? e : 127u;
    uint32_t magic = e * 0x800002u + 0x0AFFFF02u; /* (e + 22) << 23 | 2(e - 127) */
    uint32_t s = bits_of(add_rn(y, from_bits(magic))), sh = bits_of(t) >> 28;
    return low3_select(sh, s); /* sh < 16: (s & 7) | (sh & 8) */
}

/* [FMT-ROUND-SR] E2M1, satfinite: with |v| = (n + r) * q, q the quantum of its binade
 * (0.5 below 2, then 1, 2), the magnitude goes up from n when u != 0 and
 * floor(r * 2^32) + u >= 2^32. |v| >= 6 and +-Inf give +-6, NaN +6. */
__host__ __device__ __forceinline__ uint32_t e2m1_sr(float v, uint32_t u)
{
    uint32_t b = bits_of(v), a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return 0x7u;
    uint32_t sign = (b >> 28) & 0x8u;
    if (a >= 0x40C00000u)
        return sign | 0x7u;
    int field = static_cast<int>(a >> 23);
    uint32_t sig = field ? (a & 0x7FFFFFu) | 0x800000u : a;
    int ex = field ? field - 127 : -126; /* |v| = sig * 2^(ex - 23) */
    int e = ex > 0 ? ex : 0;             /* the binade of the result, q = 2^(e - 1) */
    int sh = 22 + e - ex;                /* |v| / q = sig * 2^-sh, sh >= 22 */
    uint64_t t = sh < 64 ? (static_cast<uint64_t>(sig) << 32) >> sh : 0;
    uint32_t n = static_cast<uint32_t>(t >> 32), r32 = static_cast<uint32_t>(t);
    uint32_t up = u != 0 && static_cast<uint64_t>(r32) + u >= 0x100000000ull;
    uint32_t mag = (static_cast<uint32_t>(e) << 1) + n + up;
    return sign | (mag > 7u ? 7u : mag);
}

/* y + m rounded toward zero, for 0 <= y <= 6 and m in [2^22, 2^25) (the sum stays in m's
 * binade): the device's FADD.RZ; on the host, m plus the whole ulps of m in y, which is
 * the same sum (y / ulp is exact in double). */
__host__ __device__ __forceinline__ float add_rz_small(float y, float m)
{
#ifdef __CUDA_ARCH__
    return __fadd_rz(y, m);
#else
    double ulp = ldexp(1.0, static_cast<int>(bits_of(m) >> 23) - 150);
    return from_bits(bits_of(m) + static_cast<uint32_t>(floor(static_cast<double>(y) / ulp)));
#endif
}

/* [FMT-ROUND-SR] e2m1_sr without branches or 64-bit shifts: y = min(|v|, 6) and the sign
 * from t = min(v, 6) as in e2m1_rne_minmax; s = y + magic rounded toward zero ends in
 * 2c + n (n = floor(y / q), q the quantum of y's binade c); the remainder y - n q is exact
 * (both subtractions are), and scaled by 2^32 / q (exact) its truncation is floor(r * 2^32);
 * the magnitude goes up by the carry of floor(r * 2^32) + u (which u = 0 never sets). y = 6
 * (|v| >= 6, Inf, NaN) has remainder 0: code 7 for every u. About sixteen instructions;
 * cuda/check_arith.cu compares it with e2m1_sr on the host and on the device. */
__host__ __device__ __forceinline__ uint32_t e2m1_sr_minmax(float v, uint32_t u)
{
    float y = fmin_num(fabsf(v), 6.0f), t = fmin_num(v, 6.0f);
    uint32_t e = bits_of(y) >> 23;
    e = e > 127u ? e : 127u;
    float m = from_bits(e * 0x800002u + 0x0AFFFF02u); /* as in e2m1_rne_minmax */
    float s = add_rz_small(y, m);
    float r = add_rn(y, -add_rn(s, -m));
    float scaled = mul_rn(r, from_bits((287u - e) << 23)); /* r * 2^(160 - e) = r / q * 2^32 */
#ifdef __CUDA_ARCH__
    uint32_t r32 = __float2uint_rz(scaled);
#else
    uint32_t r32 = static_cast<uint32_t>(scaled);
#endif
    uint32_t up = r32 + u < u, sh = bits_of(t) >> 28;
    return low3_select(sh, bits_of(s) + up);
}

/* [REC-NV-ELEM] [REC-NV-SR]: the element code, with the stream's word when sr is on. */
__host__ __device__ __forceinline__ uint32_t e2m1(float v, int sr, uint32_t u)
{
    return sr ? e2m1_sr(v, u) : e2m1_rne(v);
}

/* [FMT-BF16-ENC] then [FMT-DECODE]: RNE to BF16 (overflow to Inf) and back; every NaN gives
 * the reference's 0x7FC00000. */
__host__ __device__ __forceinline__ float round_bf16(float v)
{
    uint32_t u = bits_of(v);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return from_bits(0x7FC00000u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return from_bits(u & 0xFFFF0000u);
}

/* round_bf16 of a finite v (no NaN test). */
__host__ __device__ __forceinline__ float round_bf16_finite(float v)
{
    uint32_t u = bits_of(v);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return from_bits(u & 0xFFFF0000u);
}

/* ---------------------------------------------------------------- Philox [RNG-PHILOX] */

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

/* Ten rounds over the counter x (in place) with key (k0, k1). */
__host__ __device__ __forceinline__ void philox4x32_10(uint32_t x[4], uint32_t k0, uint32_t k1)
{
    QC_NV_UNROLL
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * x[0];
        uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * x[2];
        uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x[1] ^ k0;
        uint32_t y2 = static_cast<uint32_t>(p0 >> 32) ^ x[3] ^ k1;
        x[0] = y0;
        x[1] = static_cast<uint32_t>(p1);
        x[2] = y2;
        x[3] = static_cast<uint32_t>(p0);
    }
}

/* [RNG-STREAM]: words 4*blk .. 4*blk+3 of stream (seed, offset). */
__host__ __device__ __forceinline__ void random4(uint64_t seed, uint64_t offset, uint64_t blk,
                                                 uint32_t w[4])
{
    w[0] = static_cast<uint32_t>(blk);
    w[1] = static_cast<uint32_t>(blk >> 32);
    w[2] = static_cast<uint32_t>(offset);
    w[3] = static_cast<uint32_t>(offset >> 32);
    philox4x32_10(w, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/* [RNG-STREAM]: word i of stream (seed, offset), qs_random_u32. */
__host__ __device__ __forceinline__ uint32_t random_u32(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t w[4];
    random4(seed, offset, i / 4, w);
    uint32_t j = static_cast<uint32_t>(i & 3u);
    return j == 0 ? w[0] : j == 1 ? w[1] : j == 2 ? w[2] : w[3];
}

/* random4 with each 32x32-bit product as one mul.wide.u32 (the 64-bit multiply of the
 * portable form also costs an add of a zero high word on sm_90): the same words. */
__device__ __forceinline__ uint64_t mul_wide_u32(uint32_t a, uint32_t b)
{
    uint64_t r;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
}

__device__ __forceinline__ void random4_wide(uint64_t seed, uint64_t offset, uint64_t blk,
                                             uint32_t w[4])
{
    uint32_t x0 = static_cast<uint32_t>(blk), x1 = static_cast<uint32_t>(blk >> 32);
    uint32_t x2 = static_cast<uint32_t>(offset), x3 = static_cast<uint32_t>(offset >> 32);
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        uint64_t p0 = mul_wide_u32(kPhiloxM0, x0), p1 = mul_wide_u32(kPhiloxM1, x2);
        uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ k0;
        uint32_t y2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ k1;
        x0 = y0;
        x1 = static_cast<uint32_t>(p1);
        x2 = y2;
        x3 = static_cast<uint32_t>(p0);
    }
    w[0] = x0;
    w[1] = x1;
    w[2] = x2;
    w[3] = x3;
}

/* ---------------------------------------------------------------- [REC-NV-RHT] */

/* [REC-NV-RHT-SIGNS] as a mask: bit i is set where s_i = -1. */
constexpr uint32_t kRhtNeg = 0xD7E8u;

__host__ __device__ constexpr uint32_t parity4(uint32_t v)
{
    return (v ^ (v >> 1) ^ (v >> 2) ^ (v >> 3)) & 1u;
}

/* Whether c_ij = s_i * H_ij / 4 is -1/4 (else +1/4); H_ij = (-1)^popcount(i AND j). */
__host__ __device__ constexpr bool rht_neg(int i, int j)
{
    return (((kRhtNeg >> i) & 1u) ^ parity4(static_cast<uint32_t>(i & j))) != 0;
}

/* Output j of one group from q_i = fl(v_i * 1/4): acc = (((0 + p_0j) + p_1j) + ...) + p_15j
 * with p_ij = fl(v_i * c_ij) = +-q_i (rounding is symmetric), rounded to BF16. */
__host__ __device__ __forceinline__ float rht16_out(const float q[16], int j)
{
    float acc = 0.0f;
    QC_NV_UNROLL
    for (int i = 0; i < 16; i++)
        acc = add_rn(acc, rht_neg(i, j) ? -q[i] : q[i]);
    return round_bf16(acc);
}

/* w = bf16(v * diag(s) * H16 / 4), the reference's qsi_rht16 on one group; w may be v. */
__host__ __device__ __forceinline__ void rht16(const float v[16], float w[16])
{
    float q[16];
    QC_NV_UNROLL
    for (int i = 0; i < 16; i++)
        q[i] = mul_rn(v[i], 0.25f);
    QC_NV_UNROLL
    for (int j = 0; j < 16; j++)
        w[j] = rht16_out(q, j);
}

/* round_bf16 of a and b by the device's BF16 conversion (cvt.rn.bf16x2.f32: RNE, overflow
 * to Inf, subnormals kept) in one instruction for both, with a NaN replaced by the
 * reference's 0x7FC00000 (the instruction's NaN is another). cuda/check_arith.cu compares it
 * with round_bf16 on all 2^32 inputs on the device. */
__device__ __forceinline__ void round_bf16_pair(float a, float b, float &ra, float &rb)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t lo = __bfloat16_as_ushort(h.x), hi = __bfloat16_as_ushort(h.y);
    ra = a != a ? from_bits(0x7FC00000u) : from_bits(lo << 16);
    rb = b != b ? from_bits(0x7FC00000u) : from_bits(hi << 16);
}

/* rht16 with round_bf16_pair for the final rounding: the same sums in the same order, the
 * same values. */
__device__ __forceinline__ void rht16_cvt(const float v[16], float w[16])
{
    float q[16];
    QC_NV_UNROLL
    for (int i = 0; i < 16; i++)
        q[i] = mul_rn(v[i], 0.25f);
    QC_NV_UNROLL
    for (int j = 0; j < 16; j += 2) {
        float a0 = 0.0f, a1 = 0.0f;
        QC_NV_UNROLL
        for (int i = 0; i < 16; i++) {
            a0 = add_rn(a0, rht_neg(i, j) ? -q[i] : q[i]);
            a1 = add_rn(a1, rht_neg(i, j + 1) ? -q[i] : q[i]);
        }
        round_bf16_pair(a0, a1, w[j], w[j + 1]);
    }
}

/* rht16 of BF16 values v by four butterfly stages (64 additions a group, not 256), used
 * only where every partial sum of either order is exact, so both give the exact sum: all
 * values finite, the largest exponent field at most 250 (16 of them stay below 2^128), and
 * at most 12 binades between the largest and the smallest nonzero (sums of 16 8-bit
 * significands fit in 24 bits). Else rht16. The final fl(s * 1/4 + 0) is exact and turns the
 * butterflies' -0 into the sequential sum's +0. */
__host__ __device__ __forceinline__ void rht16_butterfly(const float v[16], float w[16])
{
    uint32_t hi = 0, lo = 0xFFFFFFFFu; /* max of 2|v|, min of 2|v| - 1 (zeros are ignored) */
    QC_NV_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t a2 = bits_of(v[i]) << 1;
        hi = a2 > hi ? a2 : hi;
        lo = a2 - 1u < lo ? a2 - 1u : lo;
    }
    uint32_t ehi = hi >> 24, elo = lo >> 24;
    if (ehi > 250u || (elo < ehi && ehi - elo > 12u)) {
        rht16(v, w);
        return;
    }
    float y[16];
    QC_NV_UNROLL
    for (int i = 0; i < 16; i++)
        y[i] = ((kRhtNeg >> i) & 1u) ? -v[i] : v[i];
    QC_NV_UNROLL
    for (int h = 1; h < 16; h <<= 1)
        QC_NV_UNROLL
    for (int i = 0; i < 16; i++)
        if ((i & h) == 0) {
            float s = add_rn(y[i], y[i + h]), d = add_rn(y[i], -y[i + h]);
            y[i] = s;
            y[i + h] = d;
        }
    QC_NV_UNROLL
    for (int j = 0; j < 16; j++)
        w[j] = round_bf16_finite(fma_rn(y[j], 0.25f, 0.0f));
}

/* ---------------------------------------------------------------- the variants */

/* The tensor-level scale of one copy: te S_enc, S_dec; torchao pts in both. */
struct global {
    float enc, dec;
};

/* One row of the variant table [REC-VARIANTS]: tensor(A) the tensor scale, block_scale(b)
 * the E4M3 code of a block of amax b, factor(code) what every element of the block uses,
 * value(x, factor) the value handed to the E2M1 encoder. 0: te, 1: torchao. */
template <int V> struct variant;

/* fl(1/6), the correctly rounded quotient te's block scale multiplies by (div_rn(1, 6) is
 * not folded by the compiler; cuda/check_arith.cu checks the constant). */
constexpr uint32_t kSixthBits = 0x3E2AAAABu;

template <> struct variant<0> {
    /* [REC-NV-GLOBAL]: S_enc = fminf(2688 / A, FLT_MAX), 1 when A or S_enc is 0. */
    static __host__ __device__ global tensor(float amax)
    {
        global g;
        g.enc = fmin_c(div_rn(2688.0f, amax), kFltMax);
        if (amax == 0.0f || g.enc == 0.0f)
            g.enc = 1.0f;
        g.dec = div_rn(1.0f, g.enc);
        return g;
    }
    /* [REC-NV-SCALE]: enc_E4M3(fminf(b * fl(S_enc * fl(1/6)), FLT_MAX)). */
    static __host__ __device__ uint32_t block_scale(float b, const global &g)
    {
        float f = mul_rn(g.enc, div_rn(1.0f, 6.0f));
        return enc_sat<0>(fmin_c(mul_rn(b, f), kFltMax));
    }
    /* block_scale with fl(1/6) as a constant, fmin_c as FMNMX (which too yields FLT_MAX for
     * a NaN) and, as its operand is then finite, enc_sat's conversion alone: the same codes. */
    static __host__ __device__ uint32_t block_scale_k(float b, const global &g)
    {
        float f = mul_rn(g.enc, from_bits(kSixthBits));
        float s = fmin_num(mul_rn(b, f), kFltMax);
#ifdef __CUDA_ARCH__
        return __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
#else
        return enc_sat<0>(s);
#endif
    }
    /* [REC-NV-ELEM]: r = fminf(1 / (d * S_dec), FLT_MAX). */
    static __host__ __device__ float factor(uint32_t code, const global &g)
    {
        return fmin_c(div_rn(1.0f, mul_rn(dec_e4m3(code), g.dec)), kFltMax);
    }
    static __host__ __device__ float value(float x, float r, const global &g)
    {
        (void)g;
        return mul_rn(x, r);
    }
};

template <> struct variant<1> {
    /* [REC-NV-TORCHAO]: pts = A / 2688. */
    static __host__ __device__ global tensor(float amax)
    {
        global g;
        g.enc = div_rn(amax, 2688.0f);
        g.dec = g.enc;
        return g;
    }
    /* enc_E4M3(clamp((b / 6) / pts, 2^-6, 448)); 0x08 when pts is 0 [REC-NV-TORCHAO-ZERO].
     * block_scale_k is the same (no constant quotient to fold). */
    static __host__ __device__ uint32_t block_scale(float b, const global &g)
    {
        if (g.dec == 0.0f)
            return 0x08u;
        return enc_sat<0>(clamp_torch(div_rn(div_rn(b, 6.0f), g.dec), 0.015625f, 448.0f));
    }
    static __host__ __device__ uint32_t block_scale_k(float b, const global &g)
    {
        return block_scale(b, g);
    }
    /* torchao 0.18.0's reciprocal_scale = (1 / pts) / d. */
    static __host__ __device__ float factor(uint32_t code, const global &g)
    {
        return div_rn(div_rn(1.0f, g.dec), dec_e4m3(code));
    }
    /* clamp(x * reciprocal_scale, -6, 6); 0 when pts is 0. */
    static __host__ __device__ float value(float x, float rs, const global &g)
    {
        if (g.dec == 0.0f)
            return 0.0f;
        return clamp_torch(mul_rn(x, rs), -6.0f, 6.0f);
    }
};

/* The tensor scale of a copy with tensor amax A, by the run-time variant (1 torchao). */
__host__ __device__ __forceinline__ global tensor_scale(int torchao, float amax)
{
    return torchao ? variant<1>::tensor(amax) : variant<0>::tensor(amax);
}

/* The tensor amax of copy d from qc_nvfp4's two words: 2-D tiles share the rowwise one. */
__host__ __device__ __forceinline__ float copy_amax(const uint32_t bits[2], int tile_2d, int d)
{
    return from_bits(bits[tile_2d ? 0 : d]);
}

/* ---------------------------------------------------------------- the generic path */

/* Element i of the input as FP32, exact, on host and device. */
template <int DT> __host__ __device__ __forceinline__ float in_load(const void *x, size_t i)
{
    if (DT == QC_IN_FP32)
        return static_cast<const float *>(x)[i];
    uint32_t h = static_cast<const uint16_t *>(x)[i];
    if (DT == QC_IN_BF16)
        return from_bits(h << 16);
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu)
        return from_bits(sign | 0x7F800000u | (m << 13));
    if (e == 0) /* subnormal m * 2^-24, exact */
        return from_bits(sign | bits_of(mul_rn(static_cast<float>(m), 0x1p-24f)));
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* What the generic kernels read: the input, the options, the tensor amax bits of each copy
 * ([0] rowwise and 2-D, [1] 1-D columnwise) and, for data_byte, each copy's scale codes. */
struct job {
    const void *x;
    int64_t M, K;
    int tile_2d, rht, sr;
    uint64_t seed, offset;
    const uint32_t *amax_bits;
    const uint8_t *scale[2];
};

/* Copy d's rows and columns: rowwise [M, K], columnwise [K, M] [REC-LAYOUT]. */
__host__ __device__ __forceinline__ int64_t copy_rows(const job &jb, int d)
{
    return d ? jb.K : jb.M;
}
__host__ __device__ __forceinline__ int64_t copy_cols(const job &jb, int d)
{
    return d ? jb.M : jb.K;
}
__host__ __device__ __forceinline__ int64_t ceil16(int64_t n)
{
    return (n + kBlock - 1) / kBlock;
}
/* Entries of copy d's scale tensor: [R, ceil(C/16)] or, 2-D, [ceil(R/16), ceil(C/16)]. */
__host__ __device__ __forceinline__ int64_t scale_count(const job &jb, int d)
{
    int64_t r = copy_rows(jb, d);
    return (jb.tile_2d ? ceil16(r) : r) * ceil16(copy_cols(jb, d));
}

/* The tensor scale of copy d [REC-NV-1D-COL] [REC-NV-2D-COL]. */
template <int V> __host__ __device__ __forceinline__ global copy_global(const job &jb, int d)
{
    return variant<V>::tensor(copy_amax(jb.amax_bits, jb.tile_2d, d));
}

/* [REC-NV-RHT] output j of the group of x^T row k (column k of x) starting at m0. */
template <int DT>
__host__ __device__ __forceinline__ float rht_value(const job &jb, int64_t k, int64_t m0, int j)
{
    float q[16];
    for (int i = 0; i < 16; i++)
        q[i] = mul_rn(in_load<DT>(jb.x, static_cast<size_t>((m0 + i) * jb.K + k)), 0.25f);
    return rht16_out(q, j);
}

/* The value that element (r, c) of 1-D copy d quantizes: x, x^T, or x^T transformed. */
template <int DT>
__host__ __device__ __forceinline__ float copy_value(const job &jb, int d, int64_t r, int64_t c)
{
    if (d == 0)
        return in_load<DT>(jb.x, static_cast<size_t>(r * jb.K + c));
    if (!jb.rht)
        return in_load<DT>(jb.x, static_cast<size_t>(c * jb.K + r));
    return rht_value<DT>(jb, r, c - c % kBlock, static_cast<int>(c % kBlock));
}

/* [REC-NV-SCALE] [REC-NV-PARTIAL]: scale code idx of copy d, from the amax of the elements
 * its block holds ([REC-AMAX] as the maximum of abs_bits). */
template <int DT, int V> __host__ __device__ uint8_t scale_entry(const job &jb, int d, int64_t idx)
{
    int64_t R = copy_rows(jb, d), C = copy_cols(jb, d), nb = ceil16(C);
    int64_t br = idx / nb, c0 = (idx % nb) * kBlock;
    int64_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    uint32_t a = 0;
    if (jb.tile_2d) { /* [REC-NV-2D]: tile (br, bc) of copy d, in x's orientation */
        int64_t r0 = br * kBlock, r1 = r0 + kBlock < R ? r0 + kBlock : R;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++) {
                int64_t m = d ? c : r, k = d ? r : c;
                a = max_u32(a, abs_bits(in_load<DT>(jb.x, static_cast<size_t>(m * jb.K + k))));
            }
    } else if (d == 1 && jb.rht) { /* the whole group transformed once */
        float v[16];
        for (int i = 0; i < 16; i++)
            v[i] = in_load<DT>(jb.x, static_cast<size_t>((c0 + i) * jb.K + br));
        rht16(v, v);
        for (int i = 0; i < 16; i++)
            a = max_u32(a, abs_bits(v[i]));
    } else {
        for (int64_t c = c0; c < c1; c++)
            a = max_u32(a, abs_bits(copy_value<DT>(jb, d, br, c)));
    }
    return static_cast<uint8_t>(variant<V>::block_scale(from_bits(a), copy_global<V>(jb, d)));
}

/* [REC-NV-ELEM] [REC-NV-SR]: the code of element e (row-major) of copy d. A 2-D columnwise
 * code is the rowwise code of the transposed position, with the rowwise stream. */
template <int DT, int V>
__host__ __device__ __forceinline__ uint32_t elem_code(const job &jb, int d, int64_t e)
{
    int64_t C = copy_cols(jb, d), r = e / C, c = e % C;
    uint32_t code = jb.scale[d][(jb.tile_2d ? r / kBlock : r) * ceil16(C) + c / kBlock];
    global g = copy_global<V>(jb, d);
    float x;
    uint64_t stream = jb.offset, i = static_cast<uint64_t>(e);
    if (jb.tile_2d) {
        int64_t m = d ? c : r, k = d ? r : c;
        x = in_load<DT>(jb.x, static_cast<size_t>(m * jb.K + k));
        i = static_cast<uint64_t>(m * jb.K + k);
    } else {
        x = copy_value<DT>(jb, d, r, c);
        stream += static_cast<uint64_t>(d);
    }
    float v = variant<V>::value(x, variant<V>::factor(code, g), g);
    return e2m1(v, jb.sr, jb.sr ? random_u32(jb.seed, stream, i) : 0u);
}

/* [REC-LAYOUT]: byte j of copy d's packed data, elements 2j (low nibble) and 2j+1. */
template <int DT, int V> __host__ __device__ uint8_t data_byte(const job &jb, int d, int64_t j)
{
    int64_t n = jb.M * jb.K;
    uint32_t lo = elem_code<DT, V>(jb, d, 2 * j);
    uint32_t hi = 2 * j + 1 < n ? elem_code<DT, V>(jb, d, 2 * j + 1) : 0u;
    return static_cast<uint8_t>(lo | (hi << 4));
}

} // namespace nv
} // namespace qc

#endif
