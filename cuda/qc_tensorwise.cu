/* qc_tensorwise.cu: the tensorwise FP8 kernels of spec/recipes.md sections 2-4 — the
 * tensor amax [REC-AMAX], the encoding with one scale (delayed: the given one; current:
 * from the amax on the device, [REC-CS-SCALE]), rowwise [M,K] and transposed [K,M] copies
 * [REC-TW-LAYOUT] — and the plain FP8 cast of the `cast` slot. */
#include "qc_tile.cuh"

int qc_force_generic = 0;
int qc_rows_path = QC_ROWS_AUTO;
int qc_tile_path = QC_TILE_2;

namespace qc {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8; /* elements per thread in the elementwise kernels */

/* [REC-AMAX]: a grid-stride walk of 8-element chunks (16-byte loads where the buffer is
 * aligned), the tail of n % 8 elements by the first thread, one atomic maximum a block. */
template <int DT>
__global__ void __launch_bounds__(kThreads) amax_kernel(qc_input in, uint32_t *amax_bits, int vec)
{
    size_t n = static_cast<size_t>(in.rows) * static_cast<size_t>(in.cols);
    size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
    uint32_t a = 0;
    size_t nch = n / kVec;
    for (size_t ch = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; ch < nch; ch += stride) {
        float v[kVec];
        if (vec) {
            load8<DT>(in.x, ch * kVec, v);
        } else {
#pragma unroll
            for (int j = 0; j < kVec; j++)
                v[j] = load<DT>(in.x, ch * kVec + j);
        }
#pragma unroll
        for (int j = 0; j < kVec; j++)
            a = max(a, abs_bits(v[j]));
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (size_t i = nch * kVec; i < n; i++)
            a = max(a, abs_bits(load<DT>(in.x, i)));
    a = warp_max(a);
    __shared__ uint32_t part[kThreads / 32];
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = a;
    __syncthreads();
    if (threadIdx.x < 32) {
        a = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0u;
        a = warp_max(a);
        if (threadIdx.x == 0 && a)
            atomicMax(amax_bits, a);
    }
}

/* The encode scale of the request: the given one, or [REC-CS-SCALE] of the amax. */
__device__ __forceinline__ float tw_scale(const qc_tw_params &p, const uint32_t *amax_bits)
{
    if (!p.from_amax)
        return p.scale;
    float fmax = p.e5m2 ? 57344.0f : 448.0f;
    return scale_from_amax(__uint_as_float(*amax_bits), fmax, p.eps, p.pow2, 3.402823466e38f);
}

template <int DT, int E5>
__global__ void __launch_bounds__(kThreads)
    rows_kernel(qc_input in, qc_tw_params p, const uint32_t *amax_bits, uint8_t *row)
{
    float s = tw_scale(p, amax_bits);
    size_t n = static_cast<size_t>(in.rows) * static_cast<size_t>(in.cols);
    size_t i0 = (static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
#pragma unroll
    for (int j = 0; j < kVec; j++)
        if (i0 + j < n)
            row[i0 + j] = enc_sat<E5>(__fmul_rn(load<DT>(in.x, i0 + j), s));
}

template <int DT, int E5>
__global__ void __launch_bounds__(kThreads) tile_kernel(qc_input in, qc_tw_params p,
                                                        const uint32_t *amax_bits, uint8_t *row,
                                                        uint8_t *col)
{
    __shared__ uint8_t codes[32][33];
    float s = tw_scale(p, amax_bits);
    encode_tile32<DT, E5>(in, static_cast<int64_t>(blockIdx.y) * 32,
                          static_cast<int64_t>(blockIdx.x) * 32, s, row, col, codes);
}

template <int E5> __global__ void cast_kernel(const float *in, size_t n, uint8_t *out)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = enc_sat<E5>(in[i]);
}

} // namespace
} // namespace qc

cudaError_t qc_amax(const qc_input &in, uint32_t *amax_bits)
{
    cudaError_t err = cudaMemsetAsync(amax_bits, 0, sizeof *amax_bits);
    if (err != cudaSuccess)
        return err;
    int64_t nch = in.rows * in.cols / qc::kVec;
    unsigned grid = qc::blocks_for(nch > 0 ? nch : 1, qc::kThreads);
    if (grid > 132u * 8u)
        grid = 132u * 8u;
    int vec = !qc_force_generic && qc::aligned16(in.x);
    return qc::dispatch(in.dtype, 0, [&](auto dt, auto) {
        qc::amax_kernel<decltype(dt)::value><<<grid, qc::kThreads>>>(in, amax_bits, vec);
        return cudaGetLastError();
    });
}

cudaError_t qc_tensorwise(const qc_input &in, const qc_tw_params &p, uint32_t *amax_bits,
                          uint8_t *row, uint8_t *col)
{
    if (!p.from_amax) { /* delayed: the amax of this pass, not an earlier one */
        cudaError_t err = cudaMemsetAsync(amax_bits, 0, sizeof *amax_bits);
        if (err != cudaSuccess)
            return err;
    }
    qc::fast_args fa = {};
    fa.row = qc_copy{row, nullptr};
    fa.col = qc_copy{col, nullptr};
    fa.tw = p;
    fa.tw_scale_given = p.scale;
    fa.amax_in = p.from_amax ? amax_bits : nullptr;
    fa.amax_out = p.from_amax ? nullptr : amax_bits;
    bool tile = col && qc::fast_tile_ok(in), rows = !col && row && qc::fast_rows_ok(in, 1);
    if (!p.from_amax && !tile && !rows) { /* the generic kernels take the amax separately */
        cudaError_t err = qc_amax(in, amax_bits);
        if (err != cudaSuccess)
            return err;
    }
    return qc::dispatch(in.dtype, p.e5m2, [&](auto dt, auto e5) {
        constexpr int DT = decltype(dt)::value, E5 = decltype(e5)::value;
        if (tile)
            return qc::launch_tile<DT, E5, qc::K_TW, 0>(in, fa);
        if (rows)
            return qc::launch_rows<DT, E5, qc::K_TW, 0>(in, fa);
        if (col) {
            dim3 grid(qc::blocks_for(in.cols, 32), qc::blocks_for(in.rows, 32));
            qc::tile_kernel<DT, E5><<<grid, dim3(32, 8)>>>(in, p, amax_bits, row, col);
        } else if (row) {
            unsigned grid = qc::blocks_for(in.rows * in.cols, qc::kThreads * qc::kVec);
            qc::rows_kernel<DT, E5><<<grid, qc::kThreads>>>(in, p, amax_bits, row);
        }
        return cudaGetLastError();
    });
}

cudaError_t qc_cast_fp8(const float *in, size_t n, int e5m2, uint8_t *out)
{
    unsigned grid = qc::blocks_for(static_cast<int64_t>(n), 256);
    if (n == 0)
        return cudaSuccess;
    if (e5m2)
        qc::cast_kernel<1><<<grid, 256>>>(in, n, out);
    else
        qc::cast_kernel<0><<<grid, 256>>>(in, n, out);
    return cudaGetLastError();
}
