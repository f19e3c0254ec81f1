/* qc_block.cu: DeepSeek-style block FP8 of spec/recipes.md section 6 on the GPU — 1x128
 * blocks along the rows (one warp per block), 1x128 blocks of the transpose (a 128x32 tile
 * in shared memory, one warp per column), and 128x128 tiles (one thread block per tile,
 * the columnwise copy the transpose of the codes and of the scale grid). Each block's
 * scale is [REC-BLK-SCALE]; its scale_inv is fl(1/scale). */
#include "qc_tile.cuh"

namespace qc {
namespace {

constexpr int kBlk = 128;

__device__ __forceinline__ float blk_scale(const qc_block_params &p, uint32_t amax_bits, float *sinv)
{
    float fmax = p.e5m2 ? 57344.0f : 448.0f;
    float s = scale_from_amax(__uint_as_float(amax_bits), fmax, p.eps, p.pow2, p.value_for_inf);
    *sinv = __fdiv_rn(1.0f, s);
    return s;
}

/* [REC-BLK-1D]: warp w of the grid encodes block (r, b) of 128 elements of row r. */
template <int DT, int E5>
__global__ void __launch_bounds__(256) rows_kernel(qc_input in, qc_block_params p, qc_copy row)
{
    int lane = threadIdx.x % 32;
    int64_t K = in.cols, nblk = (K + kBlk - 1) / kBlk;
    int64_t w = (static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x) / 32;
    if (w >= in.rows * nblk)
        return;
    int64_t r = w / nblk, c0 = (w % nblk) * kBlk;
    float v[4];
    uint32_t a = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t c = c0 + lane + 32 * i;
        v[i] = c < K ? load<DT>(in.x, static_cast<size_t>(r * K + c)) : 0.0f;
        a = max(a, abs_bits(v[i]));
    }
    float sinv, s = blk_scale(p, warp_max(a), &sinv);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t c = c0 + lane + 32 * i;
        if (c < K)
            row.data[r * K + c] = enc_sat<E5>(__fmul_rn(v[i], s));
    }
    if (lane == 0)
        static_cast<float *>(row.scale)[r * nblk + w % nblk] = sinv;
}

/* [REC-BLK-1D-COL]: the transpose [K,M] in 1x128 blocks; a 128x32 tile of x per block. */
template <int DT, int E5>
__global__ void __launch_bounds__(256) cols_kernel(qc_input in, qc_block_params p, qc_copy col)
{
    __shared__ float tile[kBlk][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols, m0 = blockIdx.y * static_cast<int64_t>(kBlk);
    int64_t k0 = blockIdx.x * 32ll, nbm = (M + kBlk - 1) / kBlk;
    for (int j = ty; j < kBlk; j += 8) {
        int64_t m = m0 + j, k = k0 + tx;
        tile[j][tx] = (m < M && k < K) ? load<DT>(in.x, static_cast<size_t>(m * K + k)) : 0.0f;
    }
    __syncthreads();
    for (int j = ty; j < 32; j += 8) {
        int64_t k = k0 + j;
        uint32_t a = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            a = max(a, abs_bits(tile[tx + 32 * i][j]));
        float sinv, s = blk_scale(p, warp_max(a), &sinv);
        if (k >= K)
            continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t m = m0 + tx + 32 * i;
            if (m < M)
                col.data[k * M + m] = enc_sat<E5>(__fmul_rn(tile[tx + 32 * i][j], s));
        }
        if (tx == 0)
            static_cast<float *>(col.scale)[k * nbm + blockIdx.y] = sinv;
    }
}

/* [REC-BLK-2D] [REC-BLK-2D-COL]: one 128x128 tile per (32, 8) thread block. */
template <int DT, int E5>
__global__ void __launch_bounds__(256) tile_kernel(qc_input in, qc_block_params p, qc_copy row,
                                                   qc_copy col)
{
    __shared__ uint32_t part[8];
    __shared__ uint8_t codes[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols;
    int64_t m0 = blockIdx.y * static_cast<int64_t>(kBlk), k0 = blockIdx.x * static_cast<int64_t>(kBlk);
    uint32_t a = 0;
    for (int64_t m = m0 + ty; m < M && m < m0 + kBlk; m += 8)
        for (int64_t k = k0 + tx; k < K && k < k0 + kBlk; k += 32)
            a = max(a, abs_bits(load<DT>(in.x, static_cast<size_t>(m * K + k))));
    a = warp_max(a);
    if (tx == 0)
        part[ty] = a;
    __syncthreads();
    a = 0;
    for (int i = 0; i < 8; i++)
        a = max(a, part[i]);
    float sinv, s = blk_scale(p, a, &sinv);
    for (int sm = 0; sm < kBlk; sm += 32)
        for (int sk = 0; sk < kBlk; sk += 32)
            encode_tile32<DT, E5>(in, m0 + sm, k0 + sk, s, row.data, col.data, codes);
    if (tx != 0 || ty != 0)
        return;
    if (row.data)
        static_cast<float *>(row.scale)[blockIdx.y * gridDim.x + blockIdx.x] = sinv;
    if (col.data)
        static_cast<float *>(col.scale)[blockIdx.x * gridDim.y + blockIdx.y] = sinv;
}

} // namespace
} // namespace qc

cudaError_t qc_block_1d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col)
{
    qc::fast_args fa = {};
    fa.row = row;
    fa.col = col;
    fa.bp = p;
    bool tile = col.data && qc::fast_tile_ok(in);
    bool rows = !col.data && row.data && qc::fast_rows_ok(in, qc::kBlk);
    return qc::dispatch(in.dtype, p.e5m2, [&](auto dt, auto e5) {
        constexpr int DT = decltype(dt)::value, E5 = decltype(e5)::value;
        if (tile)
            return qc::launch_tile<DT, E5, qc::K_B1, 0>(in, fa);
        if (rows)
            return qc::launch_rows<DT, E5, qc::K_B1, 0>(in, fa);
        if (row.data) {
            int64_t warps = in.rows * ((in.cols + qc::kBlk - 1) / qc::kBlk);
            qc::rows_kernel<DT, E5><<<qc::blocks_for(warps, 8), 256>>>(in, p, row);
        }
        if (col.data) {
            dim3 grid(qc::blocks_for(in.cols, 32), qc::blocks_for(in.rows, qc::kBlk));
            qc::cols_kernel<DT, E5><<<grid, dim3(32, 8)>>>(in, p, col);
        }
        return cudaGetLastError();
    });
}

cudaError_t qc_block_2d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col)
{
    qc::fast_args fa = {};
    fa.row = row;
    fa.col = col;
    fa.bp = p;
    bool tile = qc::fast_tile_ok(in);
    dim3 grid(qc::blocks_for(in.cols, qc::kBlk), qc::blocks_for(in.rows, qc::kBlk));
    return qc::dispatch(in.dtype, p.e5m2, [&](auto dt, auto e5) {
        constexpr int DT = decltype(dt)::value, E5 = decltype(e5)::value;
        if (tile)
            return qc::launch_tile<DT, E5, qc::K_B2, 0>(in, fa);
        qc::tile_kernel<DT, E5><<<grid, dim3(32, 8)>>>(in, p, row, col);
        return cudaGetLastError();
    });
}
