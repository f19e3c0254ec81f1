/* qc_dequant.cuh: the dequantization arithmetic of spec/recipes.md [REC-DEQ-*] for the
 * CUDA `dequantize` slot (cuda/qc_dequant.cu): where each element's scale lives, and the
 * per-element FP32 operations in the reference's order (ref/recipe_*.c qsi_dequantize_*),
 * each product through fmt::mul_ref so that NaNs come out with the reference's bits.
 * __host__ __device__, so cuda/check_arith.cu compares it with qs_dequantize on a CPU. */
#ifndef QC_DEQUANT_CUH
#define QC_DEQUANT_CUH

#include "qc_format.cuh"
#include "qc_kernels.h"
#include "qspec/recipe.h"

namespace qc {
namespace dq {

/* How a copy's scale tensor is read. */
enum { SK_F32 = 0, SK_E8M0 = 1, SK_E4M3 = 2 };
/* How an element combines with its scales: fl(dec(q) * s) ([REC-DEQ-TW] [REC-DEQ-MX]
 * [REC-DEQ-BLK]), NVFP4 te [REC-DEQ-NV] or torchao [REC-DEQ-NV-TORCHAO]. The order of the
 * operands matters only when both are NaN (x86 returns the first): it is the order the
 * reference's compiled code multiplies in (GCC 12, x86-64: the scale first for block
 * scaling, the code's value first for tensorwise and MXFP8; see each C_*), which the spec
 * does not fix and a reference quantization never produces. */
enum {
    C_PLAIN = 0,      /* mul_ref(dec(q), s) */
    C_NV_TE = 1,      /* mul_ref(mul_ref(d, S_dec), dec(q)) */
    C_NV_TORCHAO = 2, /* mul_ref(mul_ref(d, dec(q)), pts) */
    C_SCALE_FIRST = 3 /* mul_ref(s, dec(q)): block scaling */
};

/* The stored copy is data [R, C]; element (r, c) uses scale entry (r / br) * sc + c / bc
 * and lands at y[c * R + r] when transposed (a [K,M] columnwise copy: y is [M,K]), else at
 * y[r * C + c]. */
struct geometry {
    int64_t R, C, br, bc, sc;
    int transposed;
};

/* [REC-LAYOUT] [REC-TW-LAYOUT] [REC-MX-LAYOUT] [REC-BLK-*] [REC-NV-1D] [REC-NV-2D] and
 * their columnwise rules: the geometry of copy col (0 rowwise, 1 columnwise) of an [M,K]
 * input; sc is the scale tensor's second extent (1 for a tensorwise scale [1]). */
__host__ __device__ inline geometry geometry_of(int kind, int col, int64_t M, int64_t K,
                                                int tile_2d, int64_t sc)
{
    geometry g;
    g.transposed = col && kind != QS_RECIPE_MXFP8;
    g.R = g.transposed ? K : M;
    g.C = g.transposed ? M : K;
    g.sc = sc;
    switch (kind) {
    case QS_RECIPE_MXFP8:
        g.br = col ? 32 : 1;
        g.bc = col ? 1 : 32;
        break;
    case QS_RECIPE_BLOCK:
        g.br = tile_2d ? 128 : 1;
        g.bc = 128;
        break;
    case QS_RECIPE_NVFP4:
        g.br = tile_2d ? 16 : 1;
        g.bc = 16;
        break;
    case QS_RECIPE_ROWWISE: /* [REC-AX-LAYOUT]: one scale per row of the copy */
    case QS_RECIPE_ROWWISE_GW_HP:
        g.br = 1;
        g.bc = g.C;
        g.sc = 1;
        break;
    default: /* tensorwise: the one entry */
        g.br = g.R;
        g.bc = g.C;
        g.sc = 1;
        break;
    }
    return g;
}

/* The kind whose geometry a copy has: an axiswise copy with one scale for the tensor
 * (rowwise_with_gw_hp's weight, and its high-precision copies, scale 1) is laid out as a
 * tensorwise one [REC-AX-GWHP]. */
__host__ __device__ inline int layout_kind(int kind, int scale_ndim)
{
    bool ax = kind == QS_RECIPE_ROWWISE || kind == QS_RECIPE_ROWWISE_GW_HP;
    return ax && scale_ndim == 1 ? QS_RECIPE_CURRENT : kind;
}

__host__ __device__ __forceinline__ size_t scale_index(const geometry &g, int64_t r, int64_t c)
{
    return static_cast<size_t>((r / g.br) * g.sc + c / g.bc);
}

/* Code of element i of a data tensor: E2M1 packed two a byte, element 2i in the low
 * nibble of byte i [REC-LAYOUT]; the bits of an FP32 value (an axiswise high-precision
 * copy [REC-AX-GWHP]); other codes one a byte. */
template <int ELEM> __host__ __device__ __forceinline__ uint32_t code_at(const uint8_t *d, size_t i)
{
    if (ELEM == QS_FP32) {
        uint32_t w;
        memcpy(&w, d + 4 * i, sizeof w);
        return w;
    }
    if (ELEM == QS_E2M1)
        return (d[i / 2] >> (4 * (i % 2))) & 0xFu;
    return d[i];
}

/* The value of scale entry i: FP32 scale_inv, E8M0 2^(e-127) (0xFF: NaN), or the E4M3
 * block scale d = dec_E4M3(sb). */
template <int SK> __host__ __device__ __forceinline__ float scale_at(const void *s, size_t i)
{
    if (SK == SK_F32)
        return static_cast<const float *>(s)[i];
    uint32_t code = static_cast<const uint8_t *>(s)[i];
    return SK == SK_E8M0 ? fmt::decode<QS_E8M0>(code) : fmt::decode<QS_E4M3>(code);
}

/* One element: q its code, s its scale's value, gdec the copy's S_dec (te) or pts
 * (torchao). */
template <int ELEM, int COMB>
__host__ __device__ __forceinline__ float value(uint32_t q, float s, float gdec)
{
    float v = fmt::decode<ELEM>(q);
    if (COMB == C_NV_TE) /* [REC-DEQ-NV]: fl(dec(q) * fl(d * S_dec)) */
        return fmt::mul_ref(fmt::mul_ref(s, gdec), v);
    if (COMB == C_NV_TORCHAO) /* [REC-DEQ-NV-TORCHAO]: fl(fl(dec(q) * d) * pts) */
        return fmt::mul_ref(fmt::mul_ref(s, v), gdec);
    if (COMB == C_SCALE_FIRST) /* [REC-DEQ-BLK]: fl(dec(q) * scale_inv) */
        return fmt::mul_ref(s, v);
    return fmt::mul_ref(v, s); /* [REC-DEQ-TW] [REC-DEQ-MX] [REC-DEQ-AX]: fl(dec(q) * scale) */
}

/* Whether one of the element's products has two NaN operands: then the NaN's bits depend
 * on the operand order (see C_*), which check_arith reports but does not count. */
template <int ELEM, int COMB>
__host__ __device__ __forceinline__ bool both_nan(uint32_t q, float s, float gdec)
{
    float v = fmt::decode<ELEM>(q);
    if (COMB == C_NV_TE || COMB == C_NV_TORCHAO) /* dec_E2M1 is never NaN */
        return (v != v && s != s) || (s != s && gdec != gdec);
    return v != v && s != s;
}

/* Element (r, c) of the stored copy, dequantized. */
template <int ELEM, int SK, int COMB>
__host__ __device__ __forceinline__ float
element(const geometry &g, const uint8_t *data, const void *scale, float gdec, int64_t r, int64_t c)
{
    uint32_t q = code_at<ELEM>(data, static_cast<size_t>(r * g.C + c));
    return value<ELEM, COMB>(q, scale_at<SK>(scale, scale_index(g, r, c)), gdec);
}

} // namespace dq
} // namespace qc

#endif
