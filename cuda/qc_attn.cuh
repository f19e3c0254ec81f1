/* qc_attn.cuh: what the attention slots (cuda/qc_sdpa.cu, cuda/qc_gdn.cu) share — the
 * rounding to the activation dtype of spec/attention.md (round_dt), and device buffers
 * filled from and copied back to the kit's host arrays. */
#ifndef QC_ATTN_CUH
#define QC_ATTN_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>

#include "qc_mathf.cuh"
#include "qspec/format.h"
#include "qspec/status.h"

namespace qc
{

/* round_dt: identity for FP32, RNE to BF16 / FP16 (qs_round_bf16 / qs_round_f16). */
__device__ __forceinline__ float round_dt(int dt, float x)
{
    if (dt == QS_BF16)
        return __bfloat162float(__float2bfloat16_rn(x));
    if (dt == QS_FP16)
        return __half2float(__float2half_rn(x));
    return x;
}

/* A device array of n elements of T, freed on scope exit. */
template <typename T> struct dbuf {
    T *p = nullptr;
    size_t n = 0;
    dbuf() = default;
    dbuf(const dbuf &) = delete;
    dbuf &operator=(const dbuf &) = delete;
    ~dbuf()
    {
        if (p)
            cudaFree(p);
    }
    cudaError_t alloc(size_t count)
    {
        n = count;
        return cudaMalloc(&p, (count ? count : 1) * sizeof(T));
    }
    /* alloc and copy host[0..count) (host may be NULL: zeros). */
    cudaError_t up(const T *host, size_t count)
    {
        cudaError_t e = alloc(count);
        if (e == cudaSuccess && host)
            e = cudaMemcpy(p, host, count * sizeof(T), cudaMemcpyHostToDevice);
        else if (e == cudaSuccess)
            e = cudaMemset(p, 0, (count ? count : 1) * sizeof(T));
        return e;
    }
    cudaError_t down(T *host) const
    {
        return host ? cudaMemcpy(host, p, n * sizeof(T), cudaMemcpyDeviceToHost) : cudaSuccess;
    }
};

/* The one-line reason of a failed CUDA call into why[0..why_len). */
inline qs_status cuda_fail(cudaError_t e, const char *what, char *why, size_t why_len)
{
    if (why && why_len)
        snprintf(why, why_len, "%s: %s", what, cudaGetErrorString(e));
    return QS_ERR_INTERNAL;
}

inline qs_status refuse(const char *reason, char *why, size_t why_len)
{
    if (why && why_len)
        snprintf(why, why_len, "%s", reason);
    return QS_ERR_UNSUPPORTED;
}

} // namespace qc

#endif
