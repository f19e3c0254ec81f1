/* qc_device.cuh: the scalar arithmetic of the CUDA quantizers — exact input loads, the
 * NaN-ignoring amax as an unsigned maximum of |x| bits, the FP8 encoders (the conversion
 * instruction's satfinite RNE for finite values, the reference's codes for NaN and Inf),
 * and the scale rules of spec/recipes.md. All but the loads and the warp reduction are
 * __host__ __device__, so cuda/check_arith.cu tests them against the reference on a CPU.
 * Every float operation is one IEEE operation: no fast-math, no FMA contraction. */
#ifndef QC_DEVICE_CUH
#define QC_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

#include "qc_kernels.h"

namespace qc
{

/* Bit casts and the correctly rounded FP32 division, the same on host and device. */
__host__ __device__ __forceinline__ uint32_t bits_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

__host__ __device__ __forceinline__ float from_bits(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

__host__ __device__ __forceinline__ float div_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

__host__ __device__ __forceinline__ float mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Leading zeros of a nonzero 32-bit value. */
__host__ __device__ __forceinline__ int clz32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __clz(static_cast<int>(u));
#else
    return __builtin_clz(u);
#endif
}

/* Element i of the input as FP32 (exact for every input dtype). */
template <int DT> __device__ __forceinline__ float load(const void *x, size_t i)
{
    if (DT == QC_IN_FP32)
        return static_cast<const float *>(x)[i];
    uint16_t h = static_cast<const uint16_t *>(x)[i];
    if (DT == QC_IN_BF16)
        return __uint_as_float(static_cast<uint32_t>(h) << 16);
    return __half2float(__ushort_as_half(h));
}

/* [REC-AMAX] as bits: |x| with NaN mapped to 0, so the unsigned maximum of these bits is
 * the bits of max |x| from 0 with NaN ignored and Inf kept; -0 counts as +0. */
__host__ __device__ __forceinline__ uint32_t abs_bits(float v)
{
    uint32_t u = bits_of(v) & 0x7FFFFFFFu;
    return u > 0x7F800000u ? 0u : u;
}

__device__ __forceinline__ uint32_t warp_max(uint32_t u)
{
    return __reduce_max_sync(0xFFFFFFFFu, u);
}

/* [FMT-OVF-SATFINITE] RNE: NaN -> 0x7F, +-Inf and overflow -> +-max. */
template <int E5> __host__ __device__ __forceinline__ uint8_t enc_sat(float v)
{
    uint32_t b = bits_of(v);
    uint32_t a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return 0x7F;
    if (a == 0x7F800000u)
        return static_cast<uint8_t>(((b >> 24) & 0x80u) | (E5 ? 0x7Bu : 0x7Eu));
    return static_cast<uint8_t>(
        __nv_cvt_float_to_fp8(v, __NV_SATFINITE, E5 ? __NV_E5M2 : __NV_E4M3));
}

/* [REC-MX-ELEM-OCP]: finite values as enc_sat; Inf and NaN unclamped (nosat): NaN -> 0x7F,
 * +-Inf -> +-Inf in E5M2 and the NaN code with the sign in E4M3. */
template <int E5> __host__ __device__ __forceinline__ uint8_t enc_ocp(float v)
{
    uint32_t b = bits_of(v);
    uint32_t a = b & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return 0x7F;
    if (a == 0x7F800000u)
        return static_cast<uint8_t>(((b >> 24) & 0x80u) | (E5 ? 0x7Cu : 0x7Fu));
    return enc_sat<E5>(v);
}

/* [REC-CS-SCALE] [REC-CS-POW2]: the tensorwise (and block) scale from an amax. */
__host__ __device__ __forceinline__ float scale_from_amax(float amax, float fp8_max, float eps,
                                                          int pow2, float value_for_inf)
{
    if (amax < eps)
        amax = eps;
    if (amax != amax || amax == 0.0f || amax > 3.402823466e38f)
        return 1.0f;
    float s = div_rn(fp8_max, amax); /* one correctly rounded FP32 division */
    if (s > 3.402823466e38f)
        s = value_for_inf;
    if (pow2)
        s = from_bits(bits_of(s) & 0xFF800000u); /* keep sign and exponent */
    return s;
}

/* [REC-MX-E8M0-UP]: TE's float_to_e8m0 of a non-negative v. */
__host__ __device__ __forceinline__ uint32_t e8m0_round_up(float v)
{
    uint32_t bits = bits_of(v);
    if (bits > 0x7F800000u)
        return 0xFF;
    if (bits == 0x7F800000u)
        return 0xFE;
    if (bits == 0)
        return 0x00;
    uint32_t exp = (bits >> 23) & 0xFF, mant = bits & 0x7FFFFF;
    if (mant > 0 && exp != 0xFE && !(exp == 0 && mant <= 0x400000))
        exp++;
    return exp;
}

/* [REC-MX-SCALE]: e8m0_round_up(amax * fl(1/fp8_max)), one FP32 multiply. */
template <int E5> __host__ __device__ __forceinline__ uint32_t scale_te(float amax)
{
    const float rcp = div_rn(1.0f, E5 ? 57344.0f : 448.0f);
    return e8m0_round_up(mul_rn(amax, rcp));
}

/* [REC-MX-SCALE-OCP]: floor(log2 amax) - emax_elem, clamped at -127; 0 -> 0x00, Inf -> 0xFF. */
template <int E5> __host__ __device__ __forceinline__ uint32_t scale_ocp(float amax)
{
    uint32_t bits = bits_of(amax);
    if (bits >= 0x7F800000u)
        return 0xFF;
    if (bits == 0)
        return 0x00;
    int exp = static_cast<int>(bits >> 23);
    /* floor(log2 amax), exactly: a subnormal's leading one at bit p gives p - 149 */
    int fl = exp > 0 ? exp - 127 : (31 - clz32(bits)) - 149;
    int se = fl - (E5 ? 15 : 8);
    return static_cast<uint32_t>((se < -127 ? -127 : se) + 127);
}

/* [REC-MX-MULT]: 2^(127-e) as TE builds it: 2^-127 for e = 254, NaN for e = 255. */
/* [REC-MX-MULT-OCP]: the exact 2^(127-e): 2^127 for e = 0, 2^-127 for 254, NaN for 255. */
__host__ __device__ __forceinline__ float mx_multiplier(uint32_t e)
{
    if (e == 255)
        return from_bits(0x7FC00000u);
    if (e == 254)
        return from_bits(0x00400000u);
    return from_bits((254u - e) << 23);
}

/* [REC-MX-MULT]: TE's exp2f_rcp: 1 for e = 0, else the bits (254 - e) << 23 as a 32-bit
 * pattern, so 254 gives +0 and 255 gives -Inf (0xFF800000). */
__host__ __device__ __forceinline__ float mx_multiplier_te(uint32_t e)
{
    if (e == 0)
        return 1.0f;
    return from_bits(static_cast<uint32_t>(254 - static_cast<int32_t>(e)) << 23);
}

/* The MXFP8 rule table [REC-VARIANTS]: scale, multiplier and element encoder per rule
 * (0 te, 1 ocp). */
template <int RULE, int E5> struct mx_rule;
template <int E5> struct mx_rule<0, E5> {
    static __host__ __device__ uint32_t scale(float a)
    {
        return scale_te<E5>(a);
    }
    static __host__ __device__ float mult(uint32_t e)
    {
        return mx_multiplier_te(e);
    }
    static __host__ __device__ uint8_t enc(float v)
    {
        return enc_sat<E5>(v);
    }
};
template <int E5> struct mx_rule<1, E5> {
    static __host__ __device__ uint32_t scale(float a)
    {
        return scale_ocp<E5>(a);
    }
    static __host__ __device__ float mult(uint32_t e)
    {
        return mx_multiplier(e);
    }
    static __host__ __device__ uint8_t enc(float v)
    {
        return enc_ocp<E5>(v);
    }
};

/* Elements e0 .. e0+7 of the input as FP32, in one or two 16-byte loads: e0 is a multiple
 * of 8 and the buffer 16-byte aligned (the fast paths check both). */
template <int DT> __device__ __forceinline__ void load8(const void *x, size_t e0, float v[8])
{
    if (DT == QC_IN_FP32) {
        const float4 *p = static_cast<const float4 *>(x) + e0 / 4;
        float4 a = p[0], b = p[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    uint4 u = static_cast<const uint4 *>(x)[e0 / 8];
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint16_t lo = static_cast<uint16_t>(w[j] & 0xFFFFu), hi = static_cast<uint16_t>(w[j] >> 16);
        if (DT == QC_IN_BF16) {
            v[2 * j] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
            v[2 * j + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
        } else {
            v[2 * j] = __half2float(__ushort_as_half(lo));
            v[2 * j + 1] = __half2float(__ushort_as_half(hi));
        }
    }
}

/* Eight codes as one 8-byte store at p (8-byte aligned), the first code lowest. */
__device__ __forceinline__ void store8(uint8_t *p, const uint8_t c[8])
{
    uint2 w;
    w.x = c[0] | (static_cast<uint32_t>(c[1]) << 8) | (static_cast<uint32_t>(c[2]) << 16) |
          (static_cast<uint32_t>(c[3]) << 24);
    w.y = c[4] | (static_cast<uint32_t>(c[5]) << 8) | (static_cast<uint32_t>(c[6]) << 16) |
          (static_cast<uint32_t>(c[7]) << 24);
    *reinterpret_cast<uint2 *>(p) = w;
}

/* Whether a buffer admits the 16-byte loads and 8-byte stores of the fast paths. */
__host__ __device__ __forceinline__ bool aligned16(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

} // namespace qc

#endif
