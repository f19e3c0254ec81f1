/* qc_mxfp8.cu: MXFP8 of spec/recipes.md section 5 on the GPU — one (32, 8) thread block
 * per 32x32 tile loads the tile once and writes both the rowwise 1x32 and the columnwise
 * 32x1 copies (data [M,K] both, E8M0 scales [M, ceil(K/32)] and [ceil(M/32), K]). The two
 * scale rules, te and ocp, are the two rows of the rule table below [REC-VARIANTS]. */
#include "qc_tile.cuh"

namespace qc
{
namespace
{

/* One block of 32 held one value per lane (absent lanes hold 0): its E8M0 code and the
 * lane's element code. */
template <int RULE, int E5> __device__ __forceinline__ uint8_t mx_block(float v, uint32_t *e_out)
{
    uint32_t e = mx_rule<RULE, E5>::scale(__uint_as_float(warp_max(abs_bits(v))));
    *e_out = e;
    return mx_rule<RULE, E5>::enc(__fmul_rn(v, mx_rule<RULE, E5>::mult(e)));
}

template <int DT, int E5, int RULE>
__global__ void __launch_bounds__(256) mx_kernel(qc_input in, qc_copy row, qc_copy col)
{
    __shared__ float tile[32][33];
    __shared__ uint8_t ccodes[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t M = in.rows, K = in.cols, m0 = blockIdx.y * 32ll, k0 = blockIdx.x * 32ll;
    for (int j = ty; j < 32; j += 8) {
        int64_t m = m0 + j, k = k0 + tx;
        tile[j][tx] = (m < M && k < K) ? load<DT>(in.x, static_cast<size_t>(m * K + k)) : 0.0f;
    }
    __syncthreads();
    int64_t kb = (K + 31) / 32;
    for (int j = ty; row.data && j < 32; j += 8) { /* rowwise: warp ty walks rows */
        int64_t m = m0 + j, k = k0 + tx;
        uint32_t e;
        uint8_t c = mx_block<RULE, E5>(tile[j][tx], &e);
        if (m < M && k < K)
            row.data[m * K + k] = c;
        if (m < M && tx == 0)
            static_cast<uint8_t *>(row.scale)[m * kb + blockIdx.x] = static_cast<uint8_t>(e);
    }
    if (!col.data)
        return;
    for (int j = ty; j < 32; j += 8) { /* columnwise: warp ty walks columns */
        int64_t k = k0 + j;
        uint32_t e;
        ccodes[tx][j] = mx_block<RULE, E5>(tile[tx][j], &e);
        if (k < K && tx == 0)
            static_cast<uint8_t *>(col.scale)[blockIdx.y * K + k] = static_cast<uint8_t>(e);
    }
    __syncthreads();
    for (int j = ty; j < 32; j += 8) {
        int64_t m = m0 + j, k = k0 + tx;
        if (m < M && k < K)
            col.data[m * K + k] = ccodes[j][tx];
    }
}

} // namespace
} // namespace qc

cudaError_t qc_mxfp8(const qc_input &in, int e5m2, int rule, qc_copy row, qc_copy col)
{
    qc::fast_args fa = {};
    fa.row = row;
    fa.col = col;
    bool tile = col.data && qc::fast_tile_ok(in);
    bool rows = !col.data && row.data && qc::fast_rows_ok(in, 32);
    dim3 grid(qc::blocks_for(in.cols, 32), qc::blocks_for(in.rows, 32));
    return qc::dispatch(in.dtype, e5m2, [&](auto dt, auto e5) {
        constexpr int DT = decltype(dt)::value, E5 = decltype(e5)::value;
        if (tile)
            return rule == 0 ? qc::launch_tile<DT, E5, qc::K_MX, 0>(in, fa)
                             : qc::launch_tile<DT, E5, qc::K_MX, 1>(in, fa);
        if (rows)
            return rule == 0 ? qc::launch_rows<DT, E5, qc::K_MX, 0>(in, fa)
                             : qc::launch_rows<DT, E5, qc::K_MX, 1>(in, fa);
        if (rule == 0)
            qc::mx_kernel<DT, E5, 0><<<grid, dim3(32, 8)>>>(in, row, col);
        else
            qc::mx_kernel<DT, E5, 1><<<grid, dim3(32, 8)>>>(in, row, col);
        return cudaGetLastError();
    });
}
