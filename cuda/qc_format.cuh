/* qc_format.cuh: the number formats of spec/formats.md on the device — the reference's
 * descriptor-driven encoder (ref/format.c, one rounding from FP32 under every rounding mode
 * and overflow policy, exact integer rounding decisions) and exact decoder, for FP32, BF16,
 * FP16, E4M3, E5M2, E8M0, E2M1, E2M3 and E3M2; the conversion instructions where they give
 * exactly the specified result (FP8 satfinite RNE, BF16/FP16 RNE); and the reference's FP32
 * multiply with x86 SSE NaN propagation, which dequantization needs to give the reference's
 * NaN bits (a GPU multiply returns the canonical NaN 0x7FFFFFFF instead). Everything is
 * __host__ __device__: cuda/check_arith.cu checks it against libqspec on the CPU.
 * Formats are template arguments: the qs_dtype value of the format. */
#ifndef QC_FORMAT_CUH
#define QC_FORMAT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

#include "qspec/format.h"

namespace qc
{
namespace fmt
{

__host__ __device__ __forceinline__ uint32_t bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

__host__ __device__ __forceinline__ float from(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* [FMT-LAYOUT] The descriptor of a format: ref/format.c's qsi_formats row. */
struct desc {
    unsigned bits, ebits, mbits;
    int bias;
    int has_sign, has_inf;
    int nan_kind; /* 0 none; 1 IEEE; 2 only S.1111.111 (E4M3); 3 only 0xFF (E8M0) */
    int has_zero;
    uint32_t max_code, nan_code;
};

__host__ __device__ constexpr desc desc_of(int dt)
{
    return dt == QS_FP32   ? desc{32, 8, 23, 127, 1, 1, 1, 1, 0x7F7FFFFFu, 0x7FC00000u}
           : dt == QS_BF16 ? desc{16, 8, 7, 127, 1, 1, 1, 1, 0x7F7Fu, 0x7FFFu}
           : dt == QS_FP16 ? desc{16, 5, 10, 15, 1, 1, 1, 1, 0x7BFFu, 0x7FFFu}
           : dt == QS_E4M3 ? desc{8, 4, 3, 7, 1, 0, 2, 1, 0x7Eu, 0x7Fu}
           : dt == QS_E5M2 ? desc{8, 5, 2, 15, 1, 1, 1, 1, 0x7Bu, 0x7Fu}
           : dt == QS_E8M0 ? desc{8, 8, 0, 127, 0, 0, 3, 0, 0xFEu, 0xFFu}
           : dt == QS_E2M1 ? desc{4, 2, 1, 1, 1, 0, 0, 1, 0x7u, 0u}
           : dt == QS_E2M3 ? desc{6, 2, 3, 1, 1, 0, 0, 1, 0x1Fu, 0u}
           : dt == QS_E3M2 ? desc{6, 3, 2, 3, 1, 0, 0, 1, 0x1Fu, 0u}
                           : desc{0, 0, 0, 0, 0, 0, 0, 0, 0u, 0u};
}

/* Whether dt is one of the formats above. */
__host__ __device__ constexpr bool known(int dt)
{
    return desc_of(dt).bits != 0;
}

__host__ __device__ constexpr uint32_t code_mask(desc f)
{
    return f.bits == 32 ? 0xFFFFFFFFu : (1u << f.bits) - 1u;
}

__host__ __device__ constexpr uint32_t sign_bit(desc f)
{
    return f.has_sign ? 1u << (f.bits - 1) : 0u;
}

__host__ __device__ constexpr uint32_t exp_ones(desc f)
{
    return ((1u << f.ebits) - 1u) << f.mbits;
}

__host__ __device__ constexpr uint32_t frac_mask(desc f)
{
    return (1u << f.mbits) - 1u;
}

/* Smallest exponent of a value with the implicit bit: 1-bias, or -bias without subnormals. */
__host__ __device__ constexpr int emin(desc f)
{
    return f.has_zero ? 1 - f.bias : -f.bias;
}

/* [FMT-DECODE] Whether a masked code is a NaN, or an Inf. */
__host__ __device__ __forceinline__ bool is_nan_code(desc f, uint32_t code)
{
    uint32_t mag = code & ~sign_bit(f) & code_mask(f);
    switch (f.nan_kind) {
    case 1:
        return (mag & exp_ones(f)) == exp_ones(f) && (mag & frac_mask(f)) != 0;
    case 2:
        return mag == (exp_ones(f) | frac_mask(f));
    case 3:
        return mag == code_mask(f);
    default:
        return false;
    }
}

__host__ __device__ __forceinline__ bool is_inf_code(desc f, uint32_t code)
{
    return f.has_inf && (code & ~sign_bit(f) & code_mask(f)) == exp_ones(f);
}

/* 2^p as FP32, for -149 <= p <= 127 (exact: a normal or subnormal power of two). */
__host__ __device__ __forceinline__ float pow2(int p)
{
    return p >= -126 ? from(static_cast<uint32_t>(p + 127) << 23) : from(1u << (p + 149));
}

/* [FMT-DECODE] The exact FP32 value of a code of format DT (qs_decode_f32): bits above the
 * width are ignored; a NaN code gives the quiet NaN 0x7FC00000 with the code's sign. */
template <int DT> __host__ __device__ __forceinline__ float decode(uint32_t code)
{
    constexpr desc f = desc_of(DT);
    if (DT == QS_FP32)
        return from(code);
    code &= code_mask(f);
    uint32_t sign32 = (code & sign_bit(f)) ? 0x80000000u : 0u;
    if (is_nan_code(f, code))
        return from(sign32 | 0x7FC00000u);
    if (is_inf_code(f, code))
        return from(sign32 | 0x7F800000u);
    uint32_t mag = code & ~sign_bit(f);
    uint32_t field = mag >> f.mbits, frac = mag & frac_mask(f);
    float v;
    /* The significand (< 2^24) converts exactly and the power of two scales it exactly:
     * every value of these formats is an FP32 value. */
    if (field == 0 && f.has_zero)
        v = static_cast<float>(frac) * pow2(emin(f) - static_cast<int>(f.mbits));
    else
        v = static_cast<float>((1u << f.mbits) + frac) *
            pow2(static_cast<int>(field) - f.bias - static_cast<int>(f.mbits));
    return from(bits(v) | sign32);
}

/* Run-time dispatch of decode over the formats (0 bits for an unknown dtype: NaN). */
__host__ __device__ __forceinline__ float decode_dt(int dt, uint32_t code)
{
    switch (dt) {
    case QS_FP32:
        return decode<QS_FP32>(code);
    case QS_BF16:
        return decode<QS_BF16>(code);
    case QS_FP16:
        return decode<QS_FP16>(code);
    case QS_E4M3:
        return decode<QS_E4M3>(code);
    case QS_E5M2:
        return decode<QS_E5M2>(code);
    case QS_E8M0:
        return decode<QS_E8M0>(code);
    case QS_E2M1:
        return decode<QS_E2M1>(code);
    case QS_E2M3:
        return decode<QS_E2M3>(code);
    case QS_E3M2:
        return decode<QS_E3M2>(code);
    default:
        return from(0x7FC00000u);
    }
}

/* ---------------------------------------------------------------- special cases */

/* What a special case turns into (ref/format.c qsi_action). */
enum action { TO_MAX, TO_INF, TO_NAN_CANON, TO_NAN_SIGNED };

/* [FMT-OVF-SATFINITE] [FMT-OVF-NOSAT] [FMT-OVF-MLDTYPES]: ref/format.c qsi_policies. */
struct policy {
    action overflow, infinity, nan;
    int unsigned_abs; /* E8M0: 1 encodes |x| and 0 as 0x00 (CUDA); 0 gives NaN for x <= 0 */
};

__host__ __device__ __forceinline__ policy policy_of(int ovf)
{
    if (ovf == QS_OVF_SATFINITE)
        return policy{TO_MAX, TO_MAX, TO_NAN_CANON, 1};
    if (ovf == QS_OVF_NOSAT)
        return policy{TO_INF, TO_INF, TO_NAN_CANON, 1};
    return policy{TO_INF, TO_INF, TO_NAN_SIGNED, 0};
}

/* The quiet NaN code: IEEE-style formats set the top fraction bit. */
__host__ __device__ constexpr uint32_t quiet_nan(desc f)
{
    return f.nan_kind == 1 ? exp_ones(f) | (1u << (f.mbits - 1)) : f.nan_code;
}

/* Resolves a policy action for format f and a sign [FMT-E4M3-OVF] [FMT-E2M1-OVF]
 * [FMT-E2M1-NAN]. */
__host__ __device__ __forceinline__ uint32_t special(desc f, action a, bool neg)
{
    uint32_t s = neg ? sign_bit(f) : 0u;
    switch (a) {
    case TO_MAX:
        return f.max_code | s;
    case TO_INF:
        if (f.has_inf)
            return exp_ones(f) | s;
        return (f.nan_kind != 0 ? f.nan_code : f.max_code) | s;
    case TO_NAN_CANON:
        return f.nan_kind != 0 ? f.nan_code : f.max_code;
    default: /* TO_NAN_SIGNED; no NaN: the zero of the opposite sign, as ml_dtypes 0.7.0 */
        return f.nan_kind != 0 ? quiet_nan(f) | s : (neg ? 0u : sign_bit(f));
    }
}

/* ---------------------------------------------------------------- rounding */

/* A magnitude (n + r) * quantum: n the integer part, floor(r * 2^64) in frac and whether
 * anything below that is non-zero in sticky (ref/format.c qsi_split). */
struct split {
    uint64_t n, frac;
    bool sticky;
};

/* Splits m * 2^-shift (m < 2^24, shift >= 0) into integer part and fraction. */
__host__ __device__ __forceinline__ split split_shift(uint32_t m, int shift)
{
    split sp = {0, 0, false};
    if (shift == 0) {
        sp.n = m;
    } else if (shift < 64) {
        sp.n = static_cast<uint64_t>(m) >> shift;
        sp.frac = (static_cast<uint64_t>(m) & ((1ull << shift) - 1u)) << (64 - shift);
    } else if (shift - 64 < 64) {
        int s2 = shift - 64;
        sp.frac = static_cast<uint64_t>(m) >> s2;
        sp.sticky = (static_cast<uint64_t>(m) & ((1ull << s2) - 1u)) != 0;
    } else {
        sp.sticky = m != 0;
    }
    return sp;
}

/* [FMT-ROUND-*] Whether the magnitude goes up from n to n+1. */
__host__ __device__ __forceinline__ bool round_up(const split &sp, int round, bool neg,
                                                  uint32_t sr_bits)
{
    const uint64_t half = 1ull << 63;
    if (sp.frac == 0 && !sp.sticky)
        return false; /* exact */
    switch (round) {
    case QS_ROUND_RNE: /* [FMT-ROUND-RNE] */
        if (sp.frac != half || sp.sticky)
            return sp.frac > half || (sp.frac == half && sp.sticky);
        return (sp.n & 1u) != 0;
    case QS_ROUND_AWAY: /* [FMT-ROUND-AWAY] */
        return sp.frac >= half;
    case QS_ROUND_RU: /* [FMT-ROUND-RU] */
        return !neg;
    case QS_ROUND_RD: /* [FMT-ROUND-RD] */
        return neg;
    case QS_ROUND_SR: /* [FMT-ROUND-SR]: frac + u*2^32 >= 2^64 */
        return sr_bits != 0 && sp.frac >= (static_cast<uint64_t>(0x100000000ull - sr_bits) << 32);
    default: /* [FMT-ROUND-RZ] */
        return false;
    }
}

/* [FMT-OVF-DIRECTED] Whether an overflow gives +-max whatever the policy. */
__host__ __device__ __forceinline__ bool overflow_truncates(int round, bool neg, bool up)
{
    switch (round) {
    case QS_ROUND_RZ:
        return true;
    case QS_ROUND_RU:
        return neg;
    case QS_ROUND_RD:
        return !neg;
    case QS_ROUND_SR:
        return !up;
    default:
        return false;
    }
}

__host__ __device__ __forceinline__ int clz(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __clz(static_cast<int>(u));
#else
    return __builtin_clz(u);
#endif
}

/* [FMT-ENCODE] step 4: the finite non-zero magnitude with FP32 bits a (sign neg), one
 * rounding to the unbounded grid, then [FMT-OVF]. a = m * 2^(k-24), 2^23 <= m < 2^24. */
template <int DT>
__host__ __device__ __forceinline__ uint32_t encode_finite(uint32_t a, bool neg, int round, int ovf,
                                                           uint32_t sr_bits)
{
    constexpr desc f = desc_of(DT);
    uint32_t field = a >> 23, m = a & 0x7FFFFFu;
    int k;
    if (field != 0) {
        m |= 0x800000u;
        k = static_cast<int>(field) - 126;
    } else { /* an FP32 subnormal, normalised */
        int lz = clz(m) - 8;
        m <<= lz;
        k = -125 - lz;
    }
    int e = k - 1 > emin(f) ? k - 1 : emin(f); /* the binade of the result */
    /* The quantum of binade e is 2^(e-mbits), so a / quantum = m * 2^-(e-mbits-k+24). */
    split sp = split_shift(m, e - static_cast<int>(f.mbits) - (k - 24));
    bool up = round_up(sp, round, neg, sr_bits);
    uint64_t n = sp.n + (up ? 1u : 0u);
    if (!f.has_zero && n == 0) /* [FMT-E8M0-UNDERFLOW] */
        n = 1;
    uint64_t mag = (static_cast<uint64_t>(e - emin(f)) << f.mbits) + n;
    if (!f.has_zero)
        mag -= 1u << f.mbits;
    if (mag > f.max_code) { /* [FMT-OVF] */
        if (overflow_truncates(round, neg, up))
            return special(f, TO_MAX, neg);
        return special(f, policy_of(ovf).overflow, neg);
    }
    return static_cast<uint32_t>(mag) | (neg ? sign_bit(f) : 0u);
}

/* [FMT-ENCODE] The portable encoder: qs_encode_f32(DT, x, {round, ovf, sr_bits}) for a valid
 * round (qs_round) and ovf (qs_overflow). */
template <int DT>
__host__ __device__ __forceinline__ uint32_t encode(float x, int round, int ovf, uint32_t sr_bits)
{
    constexpr desc f = desc_of(DT);
    uint32_t b = bits(x), a = b & 0x7FFFFFFFu;
    bool neg = (b >> 31) != 0;
    policy p = policy_of(ovf);
    if (!f.has_sign && a <= 0x7F800000u && (neg || a == 0)) { /* [FMT-E8M0-SIGN]: x <= 0 */
        if (!p.unsigned_abs)
            return f.nan_code; /* ml_dtypes: zero and negatives are NaN */
        if (a == 0)
            return 0x00u; /* CUDA: zero gives the smallest scale 2^-127 */
        neg = false;      /* CUDA: the sign is ignored */
    }
    if (a > 0x7F800000u)
        return special(f, p.nan, neg); /* [FMT-NAN] */
    if (a == 0x7F800000u)
        return special(f, p.infinity, neg); /* [FMT-INF] */
    if (a == 0)
        return neg ? sign_bit(f) : 0u; /* [FMT-ZERO] */
    return encode_finite<DT>(a, neg, round, ovf, sr_bits);
}

/* Whether DT has a conversion instruction (or intrinsic) whose RNE result on finite inputs
 * is the specified one: FP8 cvt.rn.satfinite, BF16 cvt.rn.bf16.f32, FP16 cvt.rn.f16.f32. */
template <int DT> __host__ __device__ constexpr bool has_hw_rne()
{
    return DT == QS_E4M3 || DT == QS_E5M2 || DT == QS_BF16 || DT == QS_FP16;
}

/* [FMT-ROUND-RNE] of a finite x through the conversion instruction, with the overflow
 * policy applied: the FP8 instruction saturates, so an overflow (|x| > 464 in E4M3, where
 * 464 ties to 448 [FMT-E4M3-OVF]; |x| >= 61440 in E5M2 [FMT-E5M2-OVF]) is resolved first;
 * BF16/FP16 conversions give Inf on overflow, replaced by the policy's code. */
template <int DT> __host__ __device__ __forceinline__ uint32_t encode_rne_hw(float x, int ovf)
{
    constexpr desc f = desc_of(DT);
    uint32_t a = bits(x) & 0x7FFFFFFFu;
    bool neg = (bits(x) >> 31) != 0;
    if constexpr (DT == QS_E4M3 || DT == QS_E5M2) {
        bool over = DT == QS_E4M3 ? a > 0x43E80000u : a >= 0x47700000u;
        if (over && ovf != QS_OVF_SATFINITE)
            return special(f, policy_of(ovf).overflow, neg);
        return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, DT == QS_E4M3 ? __NV_E4M3 : __NV_E5M2);
    }
    uint32_t h;
    if constexpr (DT == QS_BF16) {
        __nv_bfloat16_raw r = __float2bfloat16_rn(x);
        h = r.x;
    } else {
        __half_raw r = __float2half_rn(x);
        h = r.x;
    }
    if ((h & ~sign_bit(f)) == exp_ones(f)) /* Inf from a finite x: an overflow */
        return special(f, policy_of(ovf).overflow, neg);
    return h;
}

/* The encoder of the cast kernel: encode(), with the instruction for RNE where it is exact.
 * HW = false forces the portable path (check_arith tests both). */
template <int DT, bool HW = true>
__host__ __device__ __forceinline__ uint32_t cast(float x, int round, int ovf, uint32_t sr_bits)
{
    if constexpr (HW && has_hw_rne<DT>()) {
        if (round == QS_ROUND_RNE && (bits(x) & 0x7F800000u) != 0x7F800000u)
            return encode_rne_hw<DT>(x, ovf);
    }
    return encode<DT>(x, round, ovf, sr_bits);
}

/* ---------------------------------------------------------------- the reference's multiply */

/* fl(a * b) as the reference computes it on x86-64 (SSE mulss with a the first operand):
 * a NaN a gives a quieted, else a NaN b gives b quieted, else an invalid product (0 * Inf)
 * gives the default NaN 0xFFC00000; otherwise the IEEE RNE product. A GPU multiply would
 * return 0x7FFFFFFF for all three. */
__host__ __device__ __forceinline__ float mul_ref(float a, float b)
{
    uint32_t ua = bits(a), ub = bits(b);
    if ((ua & 0x7FFFFFFFu) > 0x7F800000u)
        return from(ua | 0x00400000u);
    if ((ub & 0x7FFFFFFFu) > 0x7F800000u)
        return from(ub | 0x00400000u);
#ifdef __CUDA_ARCH__
    float p = __fmul_rn(a, b);
#else
    float p = a * b;
#endif
    return (bits(p) & 0x7FFFFFFFu) > 0x7F800000u ? from(0xFFC00000u) : p;
}

} // namespace fmt
} // namespace qc

#endif
