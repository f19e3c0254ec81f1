/* qc_axiswise.cu: torchao's axiswise FP8 scaling of spec/recipes.md section 8 on the GPU —
 * recipes rowwise and rowwise_with_gw_hp. The rowwise copy is one thread block per row of x
 * [REC-AX-ROW]; the columnwise copy x^T is one thread block per strip of 32 columns of x,
 * which takes each column's amax over all M rows [REC-AX-COL] (or reads the tensor's,
 * [REC-AX-GWHP]) and then encodes the strip in 32x32 tiles transposed through shared memory;
 * the high-precision x^T is the same walk over FP32 values. The arithmetic of a group is
 * cuda/qc_axiswise.cuh's, operation by operation the reference's. */
#include "qc_axiswise.cuh"
#include "qc_dispatch.cuh"

namespace qc
{
namespace
{

constexpr int kThreads = 256;
constexpr int kStrip = 32; /* columns of x a block of the columnwise kernels takes */

/* The maximum of one value per thread over a block of kThreads threads, for every thread;
 * red holds kThreads / 32 words and may be reused once this returns. */
__device__ __forceinline__ uint32_t block_max(uint32_t a, uint32_t *red)
{
    a = warp_max(a);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = a;
    __syncthreads();
    uint32_t m = 0;
    for (int i = 0; i < kThreads / 32; i++)
        m = max(m, red[i]);
    __syncthreads();
    return m;
}

/* Element i of the input as its raw bits (FP32, or a 16-bit pattern). */
template <int DT> __device__ __forceinline__ uint32_t load_raw(const void *x, size_t i)
{
    if (DT == QC_IN_FP32)
        return static_cast<const uint32_t *>(x)[i];
    return static_cast<const uint16_t *>(x)[i];
}

/* [REC-AX-ROW] [REC-AX-AMAX] [REC-AX-SCALE] [REC-AX-ELEM]: block r encodes row r of x with
 * the scale of its amax; thread 0 writes the row's scale_inv. */
template <int DT, int E5>
__global__ void __launch_bounds__(kThreads) rows_kernel(qc_input in, int pow2, qc_copy row)
{
    __shared__ uint32_t red[kThreads / 32];
    int64_t r = blockIdx.x, K = in.cols;
    size_t base = static_cast<size_t>(r) * static_cast<size_t>(K);
    uint32_t a = 0;
    for (int64_t c = threadIdx.x; c < K; c += kThreads)
        a = max(a, ax::mag_bits(load<DT>(in.x, base + c)));
    float s = ax::scale_from_amax(ax::amax_of(block_max(a, red)), ax::fp8_max<E5>(), pow2);
    for (int64_t c = threadIdx.x; c < K; c += kThreads)
        row.data[base + c] = ax::encode<E5>(load<DT>(in.x, base + c), s);
    if (threadIdx.x == 0)
        static_cast<float *>(row.scale)[r] = ax::scale_inv(s);
}

/* [REC-AX-GWHP]: the magnitude bits of the tensor's amax, NaN propagating, into *max_mag
 * (zeroed before): a grid-stride walk, one atomic maximum a block. */
template <int DT>
__global__ void __launch_bounds__(kThreads) amax_kernel(qc_input in, uint32_t *max_mag)
{
    __shared__ uint32_t red[kThreads / 32];
    size_t n = static_cast<size_t>(in.rows) * static_cast<size_t>(in.cols);
    size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
    uint32_t a = 0;
    for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
        a = max(a, ax::mag_bits(load<DT>(in.x, i)));
    a = block_max(a, red);
    if (threadIdx.x == 0 && a)
        atomicMax(max_mag, a);
}

/* [REC-AX-COL] (KIND QC_AX_ROWS) and the tensorwise copy of [REC-AX-GWHP] (QC_AX_TENSOR):
 * columns k0 .. k0+31 of x, which are rows k0 .. k0+31 of the copy x^T [K, M], by a (32, 8)
 * block. Thread (tx, ty) folds column k0+tx over rows ty, ty+8, ...; row ty = 0 combines the
 * eight partial maxima, takes the column's scale and writes its scale_inv. Then the strip is
 * encoded 32 rows of x at a time, each 32x32 tile leaving transposed through shared memory. */
template <int DT, int E5, int KIND>
__global__ void __launch_bounds__(kThreads)
    cols_kernel(qc_input in, int pow2, qc_copy col, const uint32_t *tensor_mag)
{
    __shared__ uint32_t part[8][kStrip];
    __shared__ float scale[kStrip];
    __shared__ uint8_t codes[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols, k0 = static_cast<int64_t>(blockIdx.x) * kStrip, k = k0 + tx;
    if (KIND == QC_AX_ROWS) {
        uint32_t a = 0;
        for (int64_t m = ty; k < K && m < M; m += 8)
            a = max(a, ax::mag_bits(load<DT>(in.x, static_cast<size_t>(m * K + k))));
        part[ty][tx] = a;
        __syncthreads();
        if (ty == 0) {
            for (int j = 1; j < 8; j++)
                a = max(a, part[j][tx]);
            float s = ax::scale_from_amax(ax::amax_of(a), ax::fp8_max<E5>(), pow2);
            scale[tx] = s;
            if (k < K)
                static_cast<float *>(col.scale)[k] = ax::scale_inv(s);
        }
        __syncthreads();
    }
    /* thread tx encodes column k0+tx of each tile: its scale is the column's
     * (encode_tile32's fl(v * s) and satfinite encode are ax::encode's) */
    float s = KIND == QC_AX_ROWS
                  ? scale[tx]
                  : ax::scale_from_amax(ax::amax_of(*tensor_mag), ax::fp8_max<E5>(), pow2);
    for (int64_t m0 = 0; m0 < M; m0 += 32)
        encode_tile32<DT, E5>(in, m0, k0, s, nullptr, col.data, codes);
}

/* [REC-AX-GWHP]: the high-precision columnwise copy, x^T [K, M] as the reference's FP32
 * values (ax::hp_bits), by the strips and tiles of cols_kernel. */
template <int DT> __global__ void __launch_bounds__(kThreads) hp_kernel(qc_input in, uint32_t *out)
{
    __shared__ uint32_t vals[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols, k0 = static_cast<int64_t>(blockIdx.x) * kStrip, k = k0 + tx;
    for (int64_t m0 = 0; m0 < M; m0 += 32) {
        for (int j = ty; j < 32; j += 8) {
            int64_t m = m0 + j;
            if (m < M && k < K)
                vals[j][tx] = ax::hp_bits<DT>(load_raw<DT>(in.x, static_cast<size_t>(m * K + k)));
        }
        __syncthreads();
        for (int j = ty; j < 32; j += 8) {
            int64_t kc = k0 + j, m = m0 + tx;
            if (m < M && kc < K)
                out[kc * M + m] = vals[tx][j];
        }
        __syncthreads();
    }
}

/* The tensor amax of [REC-AX-GWHP] into *max_mag. */
template <int DT> cudaError_t tensor_amax(const qc_input &in, uint32_t *max_mag)
{
    cudaError_t err = cudaMemsetAsync(max_mag, 0, sizeof *max_mag);
    if (err != cudaSuccess)
        return err;
    unsigned grid = blocks_for(in.rows * in.cols, kThreads * 8);
    if (grid > 132u * 8u)
        grid = 132u * 8u;
    amax_kernel<DT><<<grid, kThreads>>>(in, max_mag);
    return cudaGetLastError();
}

} // namespace
} // namespace qc

cudaError_t qc_axiswise(const qc_input &in, const qc_axiswise_params &p, qc_copy row, qc_copy col,
                        uint32_t *max_mag)
{
    if (in.rows < 1 || in.cols < 1 || in.rows > 0x7FFFFFFF || (unsigned)p.col_kind > QC_AX_HP ||
        (col.data && p.col_kind == QC_AX_TENSOR && !max_mag))
        return cudaErrorInvalidValue;
    unsigned strips = qc::blocks_for(in.cols, qc::kStrip);
    return qc::dispatch(in.dtype, p.e5m2, [&](auto dt, auto e5) {
        constexpr int DT = decltype(dt)::value, E5 = decltype(e5)::value;
        if (row.data)
            qc::rows_kernel<DT, E5>
                <<<static_cast<unsigned>(in.rows), qc::kThreads>>>(in, p.pow2, row);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess || !col.data)
            return err;
        dim3 block(32, 8);
        if (p.col_kind == QC_AX_ROWS) {
            qc::cols_kernel<DT, E5, QC_AX_ROWS><<<strips, block>>>(in, p.pow2, col, nullptr);
        } else if (p.col_kind == QC_AX_TENSOR) {
            err = qc::tensor_amax<DT>(in, max_mag);
            if (err != cudaSuccess)
                return err;
            qc::cols_kernel<DT, E5, QC_AX_TENSOR><<<strips, block>>>(in, p.pow2, col, max_mag);
        } else {
            qc::hp_kernel<DT><<<strips, block>>>(in, reinterpret_cast<uint32_t *>(col.data));
        }
        return cudaGetLastError();
    });
}
