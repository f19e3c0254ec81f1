/* qc_cast.cu: the element conversion of spec/formats.md on the device — n FP32 values to
 * codes of any format under any rounding mode and overflow policy [FMT-ENCODE], bitwise the
 * reference's (cuda/qc_format.cuh). One thread converts four values: a 16-byte load and a
 * 4-, 8- or 16-byte store when the buffers are aligned, the last n % 4 values one by one.
 * Stochastic rounding [FMT-ROUND-SR] uses the one sr_bits word of the mode for every value,
 * as qs_cast_args carries it. */
#include "qc_format.cuh"
#include "qc_kernels.h"

namespace qc {
namespace {

constexpr int kThreads = 256;

/* Storage of one code: a byte for 8 bits or fewer (E2M1 unpacked), else 16 or 32 bits. */
template <int DT> struct code_of {
    using type = uint8_t;
    using vec = uchar4;
};
template <> struct code_of<QS_BF16> {
    using type = uint16_t;
    using vec = ushort4;
};
template <> struct code_of<QS_FP16> {
    using type = uint16_t;
    using vec = ushort4;
};
template <> struct code_of<QS_FP32> {
    using type = uint32_t;
    using vec = uint4;
};

struct cast_mode {
    int round, ovf;
    uint32_t sr_bits;
};

template <int DT> __device__ __forceinline__ uint32_t one(float x, const cast_mode &m)
{
    return fmt::cast<DT>(x, m.round, m.ovf, m.sr_bits);
}

template <int DT>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const float *in, size_t n, cast_mode m, typename code_of<DT>::type *out, int vec)
{
    using T = typename code_of<DT>::type;
    using V = typename code_of<DT>::vec;
    size_t nch = n / 4, stride = static_cast<size_t>(gridDim.x) * kThreads;
    for (size_t ch = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; ch < nch;
         ch += stride) {
        if (vec) {
            float4 v = reinterpret_cast<const float4 *>(in)[ch];
            V c;
            c.x = static_cast<T>(one<DT>(v.x, m));
            c.y = static_cast<T>(one<DT>(v.y, m));
            c.z = static_cast<T>(one<DT>(v.z, m));
            c.w = static_cast<T>(one<DT>(v.w, m));
            reinterpret_cast<V *>(out)[ch] = c;
        } else {
            for (size_t i = ch * 4; i < ch * 4 + 4; i++)
                out[i] = static_cast<T>(one<DT>(in[i], m));
        }
    }
    if (blockIdx.x == 0 && threadIdx.x < n % 4) {
        size_t i = nch * 4 + threadIdx.x;
        out[i] = static_cast<T>(one<DT>(in[i], m));
    }
}

template <int DT> cudaError_t launch(const float *in, size_t n, const cast_mode &m, void *out)
{
    using V = typename code_of<DT>::vec;
    size_t nch = n / 4;
    size_t grid = (nch + kThreads - 1) / kThreads;
    if (grid < 1)
        grid = 1;
    if (grid > 132u * 16u)
        grid = 132u * 16u;
    int vec = reinterpret_cast<uintptr_t>(in) % sizeof(float4) == 0 &&
              reinterpret_cast<uintptr_t>(out) % sizeof(V) == 0;
    cast_kernel<DT><<<static_cast<unsigned>(grid), kThreads>>>(
        in, n, m, static_cast<typename code_of<DT>::type *>(out), vec);
    return cudaGetLastError();
}

} // namespace
} // namespace qc

cudaError_t qc_cast(const float *in, size_t n, int dtype, int round, int overflow, uint32_t sr_bits,
                    void *out)
{
    if ((unsigned)round >= QS_ROUND_COUNT || (unsigned)overflow >= QS_OVF_COUNT)
        return cudaErrorInvalidValue;
    if (n == 0)
        return qc::fmt::known(dtype) ? cudaSuccess : cudaErrorInvalidValue;
    qc::cast_mode m = {round, overflow, sr_bits};
    switch (dtype) {
    case QS_FP32:
        return qc::launch<QS_FP32>(in, n, m, out);
    case QS_BF16:
        return qc::launch<QS_BF16>(in, n, m, out);
    case QS_FP16:
        return qc::launch<QS_FP16>(in, n, m, out);
    case QS_E4M3:
        return qc::launch<QS_E4M3>(in, n, m, out);
    case QS_E5M2:
        return qc::launch<QS_E5M2>(in, n, m, out);
    case QS_E8M0:
        return qc::launch<QS_E8M0>(in, n, m, out);
    case QS_E2M1:
        return qc::launch<QS_E2M1>(in, n, m, out);
    case QS_E2M3:
        return qc::launch<QS_E2M3>(in, n, m, out);
    case QS_E3M2:
        return qc::launch<QS_E3M2>(in, n, m, out);
    default:
        return cudaErrorInvalidValue;
    }
}
