/* qc_axiswise.cuh: the scalar arithmetic of torchao's axiswise recipes (spec/recipes.md
 * section 8, ref/recipe_axiswise.c) for the CUDA kernels of cuda/qc_axiswise.cu — the group
 * amax with NaN propagating as an unsigned maximum of magnitude bits, the binary64 scale
 * rule with eps 1e-12 and its power-of-two floor, the decode scale fl(1/s), the element
 * codes, the high-precision copy's values, and what a copy records besides its tensors.
 * All are __host__ __device__, so cuda/check_arith.cu (cuda/check_axiswise.cuh) runs them
 * on a CPU against libqspec. */
#ifndef QC_AXISWISE_CUH
#define QC_AXISWISE_CUH

#include "qc_device.cuh"

namespace qc
{
namespace ax
{

/* The quiet NaN the reference's amax and scale take for a group holding a NaN. */
constexpr uint32_t kQuietNan = 0x7FC00000u;

/* torchao's EPS, a binary64 constant [REC-AX-SCALE]. */
constexpr double kEps = 1e-12;

template <int E5> __host__ __device__ __forceinline__ float fp8_max()
{
    return E5 ? 57344.0f : 448.0f;
}

/* [REC-AX-AMAX] as bits: |v| with the sign cleared. A NaN's magnitude bits exceed those of
 * every other value, Inf included, so the unsigned maximum over a group is a NaN pattern
 * exactly when the group holds a NaN: an order-free maximum that propagates NaN. */
__host__ __device__ __forceinline__ uint32_t mag_bits(float v)
{
    return bits_of(v) & 0x7FFFFFFFu;
}

/* The group amax from the maximum of its mag_bits (0 for no element): a NaN is the
 * reference's quiet NaN, whatever payload the maximum kept. */
__host__ __device__ __forceinline__ float amax_of(uint32_t max_mag)
{
    return from_bits(max_mag > 0x7F800000u ? kQuietNan : max_mag);
}

/* [REC-AX-POW2]: the power of two at or below s >= 0 (the bits AND 0xFF800000 for a normal
 * s; a subnormal keeps its highest set bit); 0, Inf and NaN stay. */
__host__ __device__ __forceinline__ float pow2_floor(float s)
{
    if (!(s > 0.0f) || bits_of(s) == 0x7F800000u)
        return s;
    uint32_t b = bits_of(s);
    if ((b & 0x7F800000u) != 0)
        return from_bits(b & 0xFF800000u);
    return from_bits(0x80000000u >> clz32(b));
}

/* [REC-AX-SCALE] [REC-AX-POW2]: s = fl32(max_F / max(a, 1e-12)) with the quotient in
 * binary64, then the power-of-two floor. A NaN amax gives the quiet NaN 0x7FC00000, as the
 * reference's double arithmetic does on its host (the device's NaN would be 0x7FFFFFFF). */
__host__ __device__ __forceinline__ float scale_from_amax(float amax, float fp8_max, int pow2)
{
    if (amax != amax)
        return from_bits(kQuietNan);
    double a = static_cast<double>(amax);
    if (a < kEps)
        a = kEps;
#ifdef __CUDA_ARCH__
    float s = __double2float_rn(__ddiv_rn(static_cast<double>(fp8_max), a));
#else
    float s = static_cast<float>(static_cast<double>(fp8_max) / a);
#endif
    return pow2 ? pow2_floor(s) : s;
}

/* [REC-AX-SCALE]: the scale tensor's entry fl(1/s): +Inf for s = 0, the quiet NaN for NaN. */
__host__ __device__ __forceinline__ float scale_inv(float s)
{
    if (s != s)
        return from_bits(kQuietNan);
    return div_rn(1.0f, s);
}

/* [REC-AX-ELEM]: enc_F(fl(v * s)), satfinite RNE; a NaN product is the code 0x7F. */
template <int E5> __host__ __device__ __forceinline__ uint8_t encode(float v, float s)
{
    return enc_sat<E5>(mul_rn(v, s));
}

/* [REC-AX-GWHP] [REC-INPUT]: the FP32 bits the reference holds for an input element whose
 * raw bits are raw (qsi_input_load): FP32 as given; BF16 and FP16 decoded exactly, a NaN as
 * the quiet NaN of its sign (qs_bf16_to_f32, qs_f16_to_f32). */
template <int DT> __host__ __device__ __forceinline__ uint32_t hp_bits(uint32_t raw)
{
    if (DT == QC_IN_FP32)
        return raw;
    uint32_t sign = (raw & 0x8000u) << 16;
    if (DT == QC_IN_BF16)
        return (raw & 0x7FFFu) > 0x7F80u ? sign | kQuietNan : raw << 16;
    uint32_t e = (raw >> 10) & 0x1Fu, f = raw & 0x3FFu;
    if (e == 0x1Fu)
        return sign | (f ? kQuietNan : 0x7F800000u);
    if (e != 0)
        return sign | ((e + 112u) << 23) | (f << 13);
    if (f == 0)
        return sign;
    int p = 31 - clz32(f); /* f * 2^-24 = 1.xxx * 2^(p - 24), a normal FP32 number */
    return sign | (static_cast<uint32_t>(p + 103) << 23) | ((f << (23 - p)) & 0x7FFFFFu);
}

/* [REC-AX-LAYOUT] [REC-AX-GWHP]: how copy dir (0 rowwise, 1 columnwise) is scaled, QC_AX_*:
 * per row of the copy, except rowwise_with_gw_hp's columnwise copy — tensorwise for a weight,
 * high precision for every other role. */
__host__ __device__ __forceinline__ int copy_kind(int gw_hp, int weight, int dir)
{
    if (!gw_hp || dir == 0)
        return QC_AX_ROWS;
    return weight ? QC_AX_TENSOR : QC_AX_HP;
}

/* What a copy holds besides its codes and per-row scales, as ref/recipe_axiswise.c leaves
 * it: a per-row copy records nothing (qs_quantize zeroes amax, global_enc and global_dec);
 * the high-precision copy has scale 1 and global_enc = global_dec = 1; a tensorwise copy
 * records its amax, s and fl(1/s), and its one scale entry is fl(1/s). */
struct copy_fields {
    float amax, enc, dec;
    float scale0; /* the scale tensor's one entry (tensorwise and high precision) */
};

__host__ __device__ __forceinline__ copy_fields fields_of(int kind, uint32_t tensor_mag,
                                                          float fp8_max, int pow2)
{
    copy_fields f = {0.0f, 0.0f, 0.0f, 0.0f};
    if (kind == QC_AX_HP) {
        f.enc = f.dec = f.scale0 = 1.0f;
    } else if (kind == QC_AX_TENSOR) {
        f.amax = amax_of(tensor_mag);
        f.enc = scale_from_amax(f.amax, fp8_max, pow2);
        f.dec = f.scale0 = scale_inv(f.enc);
    }
    return f;
}

} // namespace ax
} // namespace qc

#endif
