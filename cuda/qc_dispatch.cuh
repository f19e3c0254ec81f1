/* qc_dispatch.cuh: host-side dispatch from run-time (input dtype, element format) to the
 * kernel template instances, and the 32x32 tile walk that the transposing kernels share.
 * Each kernel file calls dispatch() with a generic lambda that launches its template. */
#ifndef QC_DISPATCH_CUH
#define QC_DISPATCH_CUH

#include <type_traits>

#include "qc_device.cuh"

namespace qc {

template <int V> using int_c = std::integral_constant<int, V>;

template <typename F> cudaError_t dispatch_e5(int e5m2, int_c<0> dt, F f)
{
    return e5m2 ? f(dt, int_c<1>()) : f(dt, int_c<0>());
}
template <typename F> cudaError_t dispatch_e5(int e5m2, int_c<1> dt, F f)
{
    return e5m2 ? f(dt, int_c<1>()) : f(dt, int_c<0>());
}
template <typename F> cudaError_t dispatch_e5(int e5m2, int_c<2> dt, F f)
{
    return e5m2 ? f(dt, int_c<1>()) : f(dt, int_c<0>());
}

/* Calls f(int_c<DT>, int_c<E5>) for the input dtype and element format. */
template <typename F> cudaError_t dispatch(int dtype, int e5m2, F f)
{
    switch (dtype) {
    case QC_IN_FP32:
        return dispatch_e5(e5m2, int_c<QC_IN_FP32>(), f);
    case QC_IN_BF16:
        return dispatch_e5(e5m2, int_c<QC_IN_BF16>(), f);
    case QC_IN_FP16:
        return dispatch_e5(e5m2, int_c<QC_IN_FP16>(), f);
    default:
        return cudaErrorInvalidValue;
    }
}

inline unsigned blocks_for(int64_t n, int64_t per_block)
{
    return static_cast<unsigned>((n + per_block - 1) / per_block);
}

/* One 32x32 tile at (m0, k0) encoded with one scale s, by a (32, 8) thread block: rowwise
 * codes to row [M,K] and transposed codes to col [K,M] through shared memory. */
template <int DT, int E5>
__device__ void encode_tile32(const qc_input &in, int64_t m0, int64_t k0, float s, uint8_t *row,
                              uint8_t *col, uint8_t (*codes)[33])
{
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols;
    for (int j = ty; j < 32; j += 8) {
        int64_t m = m0 + j, k = k0 + tx;
        if (m < M && k < K) {
            uint8_t c = enc_sat<E5>(__fmul_rn(load<DT>(in.x, static_cast<size_t>(m * K + k)), s));
            if (row)
                row[m * K + k] = c;
            codes[j][tx] = c;
        }
    }
    if (!col)
        return;
    __syncthreads();
    for (int j = ty; j < 32; j += 8) {
        int64_t k = k0 + j, m = m0 + tx;
        if (m < M && k < K)
            col[k * M + m] = codes[tx][j];
    }
    __syncthreads();
}

} // namespace qc

#endif
