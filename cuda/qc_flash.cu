/* qc_flash.cu: the flash path of the sdpa_fwd and sdpa_bwd slots (cuda/qc_flash.cuh) for
 * BF16 and FP16 requests whose head dims fit a class (d <= 576, dv <= 512): the kit's FP32
 * host arrays become 16-bit device arrays (exact: they hold values of the dtype), the
 * kernels run, and the outputs come back as FP32 values of the dtype. The result is another
 * evaluation order than the reference's, so each request claims a tolerance
 * ([CASE-PLUGIN-REF], [ATTN-TOL]). The backward recomputes lse with the forward kernel
 * (the slot carries no lse) and forms D from the rounded o it is given.
 * The forward runs a Hopper wgmma kernel (cuda/qc_flash_wgmma.cuh) when the request fits
 * one (d <= 192, dv <= 128, or the absorbed-MLA class d <= 576, dv <= 512; both multiples of
 * 8, a positive scale) on a device of compute capability 9.0, unless
 * QSPEC_CUDA_FLASH_WGMMA=0 (then, and for every other request, the mma.sync kernels of
 * cuda/qc_flash.cuh). The backward runs the wgmma kernels under the same conditions, unless
 * QSPEC_CUDA_FLASH_WGMMA_BWD=0 (then the mma.sync backward, to compare the two). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qc_attn.cuh"
#include "qc_flash.cuh"
#include "qc_flash.h"
#include "qc_flash_wgmma.cuh"

namespace qc
{
namespace
{

template <typename T> __global__ void to16_kernel(const float *x, T *y, size_t n)
{
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
         e += static_cast<size_t>(gridDim.x) * blockDim.x)
        y[e] = static_cast<T>(x[e]);
}

__global__ void fill_f32(float *x, size_t n, float v)
{
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
         e += static_cast<size_t>(gridDim.x) * blockDim.x)
        x[e] = v;
}

unsigned blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

/* A host FP32 array of n values as device T. */
template <typename T> cudaError_t up16(dbuf<T> &y, const float *host, size_t n)
{
    dbuf<float> x;
    cudaError_t e = x.up(host, n);
    if (e == cudaSuccess)
        e = y.alloc(n);
    if (e == cudaSuccess && n)
        to16_kernel<<<blocks_for(n), 256>>>(x.p, y.p, n);
    return e == cudaSuccess ? cudaDeviceSynchronize() : e;
}

/* The request's geometry with device copies of its cu_seqlens arrays. */
struct flash_req {
    fl::geo g;
    int maxq, maxk;
    int64_t tq, tk;
    dbuf<int32_t> cu[4];

    qs_status init(const qs_sdpa_args *a)
    {
        const qs_sdpa_params &p = a->p;
        bool thd = p.layout == QS_ATTN_THD;
        g = fl::geo{p.layout,  p.mask,   p.dtype,    (int)p.b, (int)p.sq,
                    (int)p.sk, (int)p.h, (int)p.hkv, (int)p.d, (int)p.dv,
                    nullptr,   nullptr,  nullptr,    nullptr,  p.scale};
        tq = thd ? p.sq : p.b * p.sq;
        tk = thd ? p.sk : p.b * p.sk;
        maxq = thd ? 0 : (int)p.sq;
        maxk = thd ? 0 : (int)p.sk;
        if (thd) {
            const int32_t *src[4] = {p.cu_seqlens_q, p.cu_seqlens_kv, p.cu_seqlens_q_padded,
                                     p.cu_seqlens_kv_padded};
            for (int64_t s = 0; s < p.b; s++) {
                int lq = src[0][s + 1] - src[0][s], lk = src[1][s + 1] - src[1][s];
                maxq = lq > maxq ? lq : maxq;
                maxk = lk > maxk ? lk : maxk;
            }
            for (int e = 0; e < 4; e++) {
                if (!src[e])
                    continue;
                cudaError_t err = cu[e].up(src[e], static_cast<size_t>(p.b + 1));
                if (err != cudaSuccess)
                    return cuda_fail(err, "cu_seqlens", a->why, a->why_len);
            }
            g.cu_q = cu[0].p;
            g.cu_kv = cu[1].p;
            g.pad_q = cu[2].p;
            g.pad_kv = cu[3].p;
        }
        return QS_OK;
    }
};

template <typename T, int C>
qs_status fwd_class(const flash_req &r, const qs_sdpa_args *a, const T *q, const T *k, const T *v,
                    float *o, float *lse)
{
    (void)a;
    cudaError_t e = fl::fwd_launch<T, C, true>(r.g, r.maxq, q, k, v, o, lse, 0);
    return e == cudaSuccess ? QS_OK : cuda_fail(e, "flash forward", a->why, a->why_len);
}

/* The wgmma class of the request (fl::wg::wg_class), or -1 when the mma.sync kernels run
 * it: QSPEC_CUDA_FLASH_WGMMA=0 (read at each call), or no sm_90a device. */
int wgmma_class(const qs_sdpa_params &p)
{
    const char *e = getenv("QSPEC_CUDA_FLASH_WGMMA");
    if (e && strcmp(e, "0") == 0)
        return -1;
    if (p.dtype != QS_BF16 && p.dtype != QS_FP16)
        return -1;
    int c = fl::wg::wg_class((int)p.d, (int)p.dv, p.scale);
    return c >= 0 && fl::wg::available() ? c : -1;
}

template <typename T>
qs_status fwd_any(const flash_req &r, const qs_sdpa_args *a, const T *q, const T *k, const T *v,
                  float *o, float *lse)
{
    int wc = wgmma_class(a->p);
    if (wc >= 0) {
        cudaError_t e = fl::wg::fwd_launch_class<T, true>(wc, r.g, r.maxq, q, k, v, o, lse, 0);
        return e == cudaSuccess ? QS_OK : cuda_fail(e, "flash wgmma forward", a->why, a->why_len);
    }
    switch (fl::dim_class(a->p.d, a->p.dv)) {
    case 0:
        return fwd_class<T, 0>(r, a, q, k, v, o, lse);
    case 1:
        return fwd_class<T, 1>(r, a, q, k, v, o, lse);
    case 2:
        return fwd_class<T, 2>(r, a, q, k, v, o, lse);
    default:
        return fwd_class<T, 3>(r, a, q, k, v, o, lse);
    }
}

template <typename T>
qs_status bwd_any(const flash_req &r, const qs_sdpa_args *a, const T *q, const T *k, const T *v,
                  const T *dout, const float *lse, const float *dd, float *dq, float *dk, float *dv,
                  int *ovf, dbuf<float> &part)
{
    cudaError_t e;
    const char *opt = getenv("QSPEC_CUDA_FLASH_WGMMA_BWD");
    int wc = opt && strcmp(opt, "0") == 0 ? -1 : wgmma_class(a->p);
    if (wc >= 0) {
        const qs_sdpa_params &p = a->p;
        int64_t nk = r.tk * p.hkv * p.d, nv = r.tk * p.hkv * p.dv;
        size_t ns = fl::wg::bwd_scratch(wc, r.g, r.maxk, nk, nv);
        e = ns ? part.alloc(ns) : cudaSuccess;
        if (e == cudaSuccess)
            e = fl::wg::bwd_launch_class<T, true>(wc, r.g, r.maxq, r.maxk, q, k, v, dout, lse, dd,
                                                  dq, dk, dv, ovf, part.p, nk, nv, 0);
        return e == cudaSuccess ? QS_OK : cuda_fail(e, "flash wgmma backward", a->why, a->why_len);
    }
    switch (fl::dim_class(a->p.d, a->p.dv)) {
    case 0:
        e = fl::bwd_launch<T, 0, true>(r.g, r.maxq, r.maxk, q, k, v, dout, lse, dd, dq, dk, dv, ovf,
                                       0);
        break;
    case 1:
        e = fl::bwd_launch<T, 1, true>(r.g, r.maxq, r.maxk, q, k, v, dout, lse, dd, dq, dk, dv, ovf,
                                       0);
        break;
    case 2:
        e = fl::bwd_launch<T, 2, true>(r.g, r.maxq, r.maxk, q, k, v, dout, lse, dd, dq, dk, dv, ovf,
                                       0);
        break;
    default:
        e = fl::bwd_launch<T, 3, true>(r.g, r.maxq, r.maxk, q, k, v, dout, lse, dd, dq, dk, dv, ovf,
                                       0);
        break;
    }
    return e == cudaSuccess ? QS_OK : cuda_fail(e, "flash backward", a->why, a->why_len);
}

template <typename T> qs_status flash_fwd(qs_sdpa_args *a)
{
    flash_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    const qs_sdpa_params &p = a->p;
    size_t nq = r.tq * p.h * p.d, nk = r.tk * p.hkv * p.d, nv = r.tk * p.hkv * p.dv;
    size_t no = r.tq * p.h * p.dv, nl = r.tq * p.h;
    dbuf<T> q, k, v;
    dbuf<float> o, lse;
    cudaError_t err = up16(q, a->q, nq);
    if (err == cudaSuccess)
        err = up16(k, a->k, nk);
    if (err == cudaSuccess)
        err = up16(v, a->v, nv);
    if (err == cudaSuccess)
        err = o.up(nullptr, no);
    if (err == cudaSuccess)
        err = lse.alloc(nl);
    if (err != cudaSuccess)
        return cuda_fail(err, "flash forward buffers", a->why, a->why_len);
    if (nl)
        fill_f32<<<blocks_for(nl), 256>>>(lse.p, nl, -INFINITY);
    st = fwd_any<T>(r, a, q.p, k.p, v.p, o.p, lse.p);
    if (st != QS_OK)
        return st;
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = o.down(a->o);
    if (err == cudaSuccess && a->lse)
        err = lse.down(a->lse);
    a->claim = QS_ATTN_CLAIM_TOLERANCE;
    return err == cudaSuccess ? QS_OK : cuda_fail(err, "flash forward", a->why, a->why_len);
}

template <typename T> qs_status flash_bwd(qs_sdpa_args *a, int *fell_back)
{
    flash_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    const qs_sdpa_params &p = a->p;
    size_t nq = r.tq * p.h * p.d, nk = r.tk * p.hkv * p.d, nv = r.tk * p.hkv * p.dv;
    size_t no = r.tq * p.h * p.dv, nl = r.tq * p.h;
    dbuf<T> q, k, v, dout;
    dbuf<float> o, scratch, lse, dd, dq, dk, dv, part; /* part: the wgmma backward's scratch */
    dbuf<int> ovf;
    cudaError_t err = up16(q, a->q, nq);
    if (err == cudaSuccess)
        err = up16(k, a->k, nk);
    if (err == cudaSuccess)
        err = up16(v, a->v, nv);
    if (err == cudaSuccess)
        err = up16(dout, a->dout, no);
    if (err == cudaSuccess)
        err = o.up(a->o, no);
    if (err == cudaSuccess)
        err = scratch.up(nullptr, no);
    if (err == cudaSuccess)
        err = lse.alloc(nl);
    if (err == cudaSuccess)
        err = dd.alloc(nl);
    if (err == cudaSuccess)
        err = dq.up(nullptr, nq);
    if (err == cudaSuccess)
        err = dk.up(nullptr, nk);
    if (err == cudaSuccess)
        err = dv.up(nullptr, nv);
    if (err == cudaSuccess)
        err = ovf.up(nullptr, 1);
    if (err != cudaSuccess)
        return cuda_fail(err, "flash backward buffers", a->why, a->why_len);
    if (nl) {
        fill_f32<<<blocks_for(nl), 256>>>(lse.p, nl, -INFINITY);
        fl::dsum_kernel<T>
            <<<(unsigned)((nl + 7) / 8), 256>>>((int64_t)nl, (int)p.dv, o.p, dout.p, dd.p);
    }
    st = fwd_any<T>(r, a, q.p, k.p, v.p, scratch.p, lse.p);
    if (st == QS_OK)
        st = bwd_any<T>(r, a, q.p, k.p, v.p, dout.p, lse.p, dd.p, dq.p, dk.p, dv.p, ovf.p, part);
    if (st != QS_OK)
        return st;
    int big = 0;
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = cudaMemcpy(&big, ovf.p, sizeof big, cudaMemcpyDeviceToHost);
    if (err == cudaSuccess && big) {
        *fell_back = 1; /* a dS beyond FP16: the caller runs the reference-order kernels */
        return QS_OK;
    }
    if (err == cudaSuccess)
        err = dq.down(a->dq);
    if (err == cudaSuccess)
        err = dk.down(a->dk);
    if (err == cudaSuccess)
        err = dv.down(a->dv);
    a->claim = QS_ATTN_CLAIM_TOLERANCE;
    return err == cudaSuccess ? QS_OK : cuda_fail(err, "flash backward", a->why, a->why_len);
}

} // namespace
} // namespace qc

bool qc_flash_takes(const qs_sdpa_args *a)
{
    const qs_sdpa_params &p = a->p;
    return (p.dtype == QS_BF16 || p.dtype == QS_FP16) &&
           qc::fl::dim_class((int)p.d, (int)p.dv) >= 0;
}

bool qc_flash_wgmma_takes(const qs_sdpa_args *a)
{
    return qc_flash_takes(a) && qc::wgmma_class(a->p) >= 0;
}

qs_status qc_flash_fwd(qs_sdpa_args *a)
{
    return a->p.dtype == QS_BF16 ? qc::flash_fwd<__nv_bfloat16>(a) : qc::flash_fwd<__half>(a);
}

qs_status qc_flash_bwd(qs_sdpa_args *a, int *fell_back)
{
    *fell_back = 0;
    return a->p.dtype == QS_BF16 ? qc::flash_bwd<__nv_bfloat16>(a, fell_back)
                                 : qc::flash_bwd<__half>(a, fell_back);
}
