/* qc_dequant.cu: the `dequantize` slot of the CUDA plugin — one copy of a quantization
 * back to FP32 [M,K] [REC-DEQ-SHAPE] for every recipe: tensorwise [REC-DEQ-TW], MXFP8
 * [REC-DEQ-MX], block 1x128 / 128x128 [REC-DEQ-BLK], NVFP4 te [REC-DEQ-NV] and torchao
 * [REC-DEQ-NV-TORCHAO], with the arithmetic of cuda/qc_dequant.cuh. Copies in the input's
 * orientation go element by element, four a thread (one 4- or 2-byte code load and one
 * 16-byte store when K is a multiple of 4); transposed columnwise copies go through a
 * 32x32 shared-memory tile so that loads and stores stay coalesced. */
#include "qc_dequant.cuh"
#include "qc_slots.h"

namespace qc {
namespace dq {
namespace {

constexpr int kThreads = 256;

struct job {
    geometry g;
    float gdec;
    int vec; /* C % 4 == 0: four elements of a chunk share a row */
};

template <int ELEM, int SK, int COMB>
__global__ void __launch_bounds__(kThreads)
    direct_kernel(job j, const uint8_t *data, const void *scale, float *y)
{
    const geometry &g = j.g;
    size_t n = static_cast<size_t>(g.R) * static_cast<size_t>(g.C);
    size_t nch = n / 4, stride = static_cast<size_t>(gridDim.x) * kThreads;
    for (size_t ch = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; ch < nch;
         ch += stride) {
        size_t i = ch * 4;
        if (j.vec) {
            int64_t r = static_cast<int64_t>(i / g.C), c = static_cast<int64_t>(i % g.C);
            uint32_t w = ELEM == QS_E2M1 ? reinterpret_cast<const uint16_t *>(data)[i / 4]
                                         : reinterpret_cast<const uint32_t *>(data)[i / 4];
            unsigned sh = ELEM == QS_E2M1 ? 4 : 8, mask = ELEM == QS_E2M1 ? 0xFu : 0xFFu;
            float v[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                v[k] = value<ELEM, COMB>((w >> (sh * k)) & mask,
                                         scale_at<SK>(scale, scale_index(g, r, c + k)), j.gdec);
            reinterpret_cast<float4 *>(y)[ch] = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            for (size_t e = i; e < i + 4; e++)
                y[e] =
                    element<ELEM, SK, COMB>(g, data, scale, j.gdec, static_cast<int64_t>(e / g.C),
                                            static_cast<int64_t>(e % g.C));
        }
    }
    if (blockIdx.x == 0 && threadIdx.x < n % 4) {
        size_t e = nch * 4 + threadIdx.x;
        y[e] = element<ELEM, SK, COMB>(g, data, scale, j.gdec, static_cast<int64_t>(e / g.C),
                                       static_cast<int64_t>(e % g.C));
    }
}

/* A (32, 8) thread block walks 32x32 tiles of the stored [R, C] copy: dequantized values
 * go through shared memory and leave as y[c * R + r]. */
template <int ELEM, int SK, int COMB>
__global__ void __launch_bounds__(256)
    transpose_kernel(job j, const uint8_t *data, const void *scale, float *y)
{
    __shared__ float t[32][33];
    const geometry &g = j.g;
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t tiles_r = (g.R + 31) / 32, tiles_c = (g.C + 31) / 32;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        for (int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
            int64_t r0 = tr * 32, c0 = tc * 32;
            for (int k = ty; k < 32; k += 8) {
                int64_t r = r0 + k, c = c0 + tx;
                if (r < g.R && c < g.C)
                    t[k][tx] = element<ELEM, SK, COMB>(g, data, scale, j.gdec, r, c);
            }
            __syncthreads();
            for (int k = ty; k < 32; k += 8) {
                int64_t c = c0 + k, r = r0 + tx;
                if (r < g.R && c < g.C)
                    y[c * g.R + r] = t[tx][k];
            }
            __syncthreads();
        }
    }
}

template <int ELEM, int SK, int COMB>
cudaError_t launch(const job &j, const uint8_t *data, const void *scale, float *y)
{
    if (j.g.transposed) {
        int64_t tr = (j.g.R + 31) / 32, tc = (j.g.C + 31) / 32;
        dim3 grid(static_cast<unsigned>(tc < 65535 ? tc : 65535),
                  static_cast<unsigned>(tr < 65535 ? tr : 65535));
        transpose_kernel<ELEM, SK, COMB><<<grid, dim3(32, 8)>>>(j, data, scale, y);
    } else {
        size_t nch = static_cast<size_t>(j.g.R) * static_cast<size_t>(j.g.C) / 4;
        size_t grid = (nch + kThreads - 1) / kThreads;
        grid = grid < 1 ? 1 : (grid > 132u * 16u ? 132u * 16u : grid);
        direct_kernel<ELEM, SK, COMB><<<static_cast<unsigned>(grid), kThreads>>>(j, data, scale, y);
    }
    return cudaGetLastError();
}


/* The scale dtype and element dtypes of a recipe [REC-LAYOUT]. */
bool dtypes_ok(int kind, qs_dtype elem, qs_dtype scale)
{
    switch (kind) {
    case QS_RECIPE_DELAYED:
    case QS_RECIPE_CURRENT:
    case QS_RECIPE_BLOCK:
        return (elem == QS_E4M3 || elem == QS_E5M2) && scale == QS_FP32;
    case QS_RECIPE_MXFP8:
        return (elem == QS_E4M3 || elem == QS_E5M2) && scale == QS_E8M0;
    case QS_RECIPE_ROWWISE: /* FP32 data: a high-precision copy [REC-AX-GWHP] */
    case QS_RECIPE_ROWWISE_GW_HP:
        return (elem == QS_E4M3 || elem == QS_E5M2 || elem == QS_FP32) && scale == QS_FP32;
    case QS_RECIPE_NVFP4:
        return elem == QS_E2M1 && scale == QS_E4M3;
    default:
        return false;
    }
}

} // namespace
} // namespace dq
} // namespace qc

cudaError_t qc_dequantize(const qc_dequant_params &p, const uint8_t *data, const void *scale,
                          float *y)
{
    using namespace qc::dq;
    job j;
    int kind = layout_kind(p.kind, p.scale_ndim);
    j.g = geometry_of(kind, p.col, p.rows, p.cols, p.tile_2d, p.scale_cols);
    j.gdec = p.global_dec;
    uintptr_t code_align = p.elem == QS_E2M1 ? 2 : 4; /* the load of four codes */
    j.vec = p.elem != QS_FP32 && j.g.C % 4 == 0 &&
            reinterpret_cast<uintptr_t>(data) % code_align == 0 &&
            reinterpret_cast<uintptr_t>(y) % 16 == 0;
    if (p.rows < 1 || p.cols < 1)
        return cudaErrorInvalidValue;
    if (p.elem == QS_FP32) /* an axiswise high-precision copy: its values times 1 */
        return launch<QS_FP32, SK_F32, C_PLAIN>(j, data, scale, y);
    switch (kind) {
    case QS_RECIPE_DELAYED:
    case QS_RECIPE_CURRENT:
        return p.elem == QS_E5M2 ? launch<QS_E5M2, SK_F32, C_PLAIN>(j, data, scale, y)
                                 : launch<QS_E4M3, SK_F32, C_PLAIN>(j, data, scale, y);
    case QS_RECIPE_BLOCK:
        return p.elem == QS_E5M2 ? launch<QS_E5M2, SK_F32, C_SCALE_FIRST>(j, data, scale, y)
                                 : launch<QS_E4M3, SK_F32, C_SCALE_FIRST>(j, data, scale, y);
    case QS_RECIPE_ROWWISE: /* [REC-DEQ-AX]: fl(dec(q) * scale_inv of the copy's row) */
    case QS_RECIPE_ROWWISE_GW_HP:
        return p.elem == QS_E5M2 ? launch<QS_E5M2, SK_F32, C_PLAIN>(j, data, scale, y)
                                 : launch<QS_E4M3, SK_F32, C_PLAIN>(j, data, scale, y);
    case QS_RECIPE_MXFP8:
        return p.elem == QS_E5M2 ? launch<QS_E5M2, SK_E8M0, C_PLAIN>(j, data, scale, y)
                                 : launch<QS_E4M3, SK_E8M0, C_PLAIN>(j, data, scale, y);
    case QS_RECIPE_NVFP4:
        return p.torchao ? launch<QS_E2M1, SK_E4M3, C_NV_TORCHAO>(j, data, scale, y)
                         : launch<QS_E2M1, SK_E4M3, C_NV_TE>(j, data, scale, y);
    default:
        return cudaErrorInvalidValue;
    }
}

/* [REC-DEQ-SHAPE]: copy a->dir of a->in to the FP32 [M,K] tensor a->y. A copy that was not
 * produced, or tensors that disagree with the recipe's layout, answer QS_ERR_INVALID_ARG. */
qs_status qc_slot_dequantize(void *state, const qs_dequantize_args *a)
{
    (void)state;
    const qs_quantized *z = a ? a->in : nullptr;
    if (!z || !a->y || (unsigned)a->dir >= QS_DIR_COUNT)
        return QS_ERR_INVALID_ARG;
    const qs_tensor *d = &z->data[a->dir], *s = &z->scale[a->dir];
    int64_t M = z->rows, K = z->cols;
    /* an axiswise copy may hold FP32 values (the high-precision copy [REC-AX-GWHP]) */
    bool ax = z->cfg.kind == QS_RECIPE_ROWWISE || z->cfg.kind == QS_RECIPE_ROWWISE_GW_HP;
    bool hp = ax && d->dtype == QS_FP32;
    if (!d->data || !s->data || (d->dtype != z->elem && !hp) || M < 1 || K < 1 ||
        !qc::dq::dtypes_ok(z->cfg.kind, d->dtype, s->dtype))
        return QS_ERR_INVALID_ARG;
    size_t n = static_cast<size_t>(M) * static_cast<size_t>(K);
    if (d->numel != n || a->y->dtype != QS_FP32 || a->y->numel != n || !a->y->data || s->numel == 0)
        return QS_ERR_INVALID_ARG;
    qc_dequant_params p;
    p.kind = z->cfg.kind;
    p.col = a->dir == QS_DIR_COL;
    p.elem = d->dtype;
    p.rows = M;
    p.cols = K;
    p.tile_2d = z->cfg.tile_2d;
    p.torchao = z->cfg.nv_variant == QS_NV_TORCHAO;
    p.scale_cols = s->ndim == 2 ? s->shape[1] : 1;
    p.scale_ndim = s->ndim;
    p.global_dec = z->global_dec[a->dir];
    qc::dq::geometry g = qc::dq::geometry_of(qc::dq::layout_kind(p.kind, p.scale_ndim), p.col, M,
                                             K, p.tile_2d, p.scale_cols);
    if (qc::dq::scale_index(g, g.R - 1, g.C - 1) >= s->numel) /* the largest index read */
        return QS_ERR_INVALID_ARG;
    qc_dev_buf dd, sd, yd;
    cudaError_t err = dd.alloc(d->nbytes);
    if (err == cudaSuccess)
        err = sd.alloc(s->nbytes);
    if (err == cudaSuccess)
        err = yd.alloc(n * sizeof(float));
    if (err == cudaSuccess)
        err = cudaMemcpy(dd.p, d->data, d->nbytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMemcpy(sd.p, s->data, s->nbytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err =
            qc_dequantize(p, static_cast<const uint8_t *>(dd.p), sd.p, static_cast<float *>(yd.p));
    if (err == cudaSuccess)
        err = cudaMemcpy(a->y->data, yd.p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return err == cudaSuccess ? QS_OK : QS_ERR_INTERNAL;
}
