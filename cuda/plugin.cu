/* plugin.cu: the CUDA backend plugin's entry point and device probe.
 * Built as libqspec-cuda.so against include/qspec/backend.h only. open() fails with a
 * clear reason when no CUDA device (or driver) is present. The table claims cast and the
 * delayed, current, mxfp8, block, nvfp4 and torchao's rowwise and rowwise_with_gw_hp
 * quantizers (cuda/qc_slots.cu; the axiswise kernels are cuda/qc_axiswise.cu).
 * dequantize (cuda/qc_dequant.cu) takes every recipe but the two axiswise ones (it answers
 * QS_ERR_UNSUPPORTED for them); the distributed slots run over NCCL (cuda/qc_dist.cu) when
 * the plugin was built with nccl.h; cast16, sdpa_fwd/bwd and gdn_fwd/bwd are
 * cuda/qc_cast16.cu, qc_sdpa.cu and qc_gdn.cu. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "qc_slots.h"
#include "qspec/backend.h"

namespace
{

struct cuda_state {
    int device;
    char desc[512];
};

cuda_state g_state;

qs_status cuda_open(void **state, char *why, size_t why_len)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(why, why_len, "no CUDA GPU is present (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return QS_ERR_UNSUPPORTED;
    }
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
        snprintf(why, why_len, "cannot query CUDA device 0: %s", cudaGetErrorString(err));
        return QS_ERR_UNSUPPORTED;
    }
    err = cudaSetDevice(0);
    if (err != cudaSuccess) {
        snprintf(why, why_len, "cannot use CUDA device 0: %s", cudaGetErrorString(err));
        return QS_ERR_UNSUPPORTED;
    }
    g_state.device = 0;
    snprintf(g_state.desc, sizeof g_state.desc, "%.200s, sm_%d%d, %.0f GiB, %d device%s", prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             count, count == 1 ? "" : "s");
    *state = &g_state;
    return QS_OK;
}

void cuda_close(void *state)
{
    (void)state;
    qc_gemm_release();
#ifdef QC_HAVE_DIST
    qc_dist_release();
#endif
}

const char *cuda_device(void *state)
{
    return static_cast<cuda_state *>(state)->desc;
}

qs_backend make_table()
{
    qs_backend t;
    memset(&t, 0, sizeof t);
    t.abi_version = QS_BACKEND_ABI_VERSION;
    t.struct_size = sizeof(qs_backend);
    t.name = "cuda";
    t.version = "0.1.0";
    t.caps = QS_CAP_CAST | QS_CAP_QUANT_DELAYED | QS_CAP_QUANT_CURRENT | QS_CAP_QUANT_MXFP8 |
             QS_CAP_QUANT_BLOCK | QS_CAP_QUANT_NVFP4 | QS_CAP_DEQUANT | QS_CAP_GEMM_TENSOR |
             QS_CAP_GEMM_BLOCK | QS_CAP_GEMM_MX | QS_CAP_GEMM_NVFP4 | QS_CAP_CAST16 | QS_CAP_SDPA |
             QS_CAP_GDN | QS_CAP_QUANT_ROWWISE;
    t.open = cuda_open;
    t.close = cuda_close;
    t.device = cuda_device;
    t.cast = qc_slot_cast;
    t.quantize = qc_slot_quantize;
    t.dequantize = qc_slot_dequantize;
    t.gemm = qc_slot_gemm;
    t.cast16 = qc_slot_cast16;
    t.sdpa_fwd = qc_slot_sdpa_fwd;
    t.sdpa_bwd = qc_slot_sdpa_bwd;
    t.gdn_fwd = qc_slot_gdn_fwd;
    t.gdn_bwd = qc_slot_gdn_bwd;
#ifdef QC_HAVE_DIST /* NCCL, opened when a distributed run joins */
    t.caps |= QS_CAP_DIST;
    t.dist_id = qc_slot_dist_id;
    t.dist_join = qc_slot_dist_join;
    t.allreduce_amax = qc_slot_allreduce_amax;
#endif
    return t;
}

const qs_backend g_table = make_table();

} // namespace

extern "C" __attribute__((visibility("default"))) const qs_backend *
qs_backend_entry_v1(unsigned abi_version)
{
    return abi_version == QS_BACKEND_ABI_VERSION ? &g_table : nullptr;
}
