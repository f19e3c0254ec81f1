/* qc_cast16.cu: the cast16 slot — n FP32 values to codes of any element format of
 * spec/formats.md, BF16 and FP16 included, one 16-bit code per element, under every rounding
 * mode and overflow policy, with one random word per element for stochastic rounding
 * [FMT-ROUND-SR]. The encoder is cuda/qc_format.cuh's (bitwise qs_encode_f32; checked by
 * cuda/check_arith.cu and, through this slot, by cuda/attn_check.cu). */
#include "qc_attn.cuh"
#include "qc_format.cuh"
#include "qc_slots.h"

namespace qc
{
namespace
{

template <int DT>
__global__ void cast16_kernel(const float *in, const uint32_t *sr, size_t n, int round, int ovf,
                              uint16_t *out)
{
    size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride)
        out[e] = static_cast<uint16_t>(fmt::cast<DT>(in[e], round, ovf, sr ? sr[e] : 0u));
}

template <int DT>
void launch(const float *in, const uint32_t *sr, size_t n, int round, int ovf, uint16_t *out)
{
    size_t grid = (n + 255) / 256;
    cast16_kernel<DT>
        <<<(unsigned)(grid < 132 * 16 ? grid : 132 * 16), 256>>>(in, sr, n, round, ovf, out);
}

} // namespace
} // namespace qc

qs_status qc_slot_cast16(void *state, const qs_cast16_args *a)
{
    (void)state;
    if ((unsigned)a->round >= QS_ROUND_COUNT || (unsigned)a->overflow >= QS_OVF_COUNT)
        return QS_ERR_INVALID_ARG;
    if (a->round == QS_ROUND_SR && a->sr_bits == nullptr && a->n > 0)
        return QS_ERR_INVALID_ARG;
    switch (a->dtype) {
    case QS_BF16:
    case QS_FP16:
    case QS_E4M3:
    case QS_E5M2:
    case QS_E8M0:
    case QS_E2M1:
    case QS_E2M3:
    case QS_E3M2:
        break;
    default:
        return QS_ERR_UNSUPPORTED; /* FP32 has 32-bit codes */
    }
    if (a->n == 0)
        return QS_OK;
    qc::dbuf<float> in;
    qc::dbuf<uint32_t> sr;
    qc::dbuf<uint16_t> out;
    bool use_sr = a->round == QS_ROUND_SR;
    cudaError_t err = in.up(a->in, a->n);
    if (err == cudaSuccess && use_sr)
        err = sr.up(a->sr_bits, a->n);
    if (err == cudaSuccess)
        err = out.alloc(a->n);
    if (err != cudaSuccess)
        return QS_ERR_INTERNAL;
    const uint32_t *s = use_sr ? sr.p : nullptr;
    switch (a->dtype) {
    case QS_BF16:
        qc::launch<QS_BF16>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_FP16:
        qc::launch<QS_FP16>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_E4M3:
        qc::launch<QS_E4M3>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_E5M2:
        qc::launch<QS_E5M2>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_E8M0:
        qc::launch<QS_E8M0>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_E2M1:
        qc::launch<QS_E2M1>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    case QS_E2M3:
        qc::launch<QS_E2M3>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    default:
        qc::launch<QS_E3M2>(in.p, s, a->n, a->round, a->overflow, out.p);
        break;
    }
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = out.down(a->out);
    return err == cudaSuccess ? QS_OK : QS_ERR_INTERNAL;
}
