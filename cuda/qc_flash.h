/* qc_flash.h: the flash path of the sdpa slots (cuda/qc_flash.cu), chosen by
 * cuda/qc_sdpa.cu under QSPEC_CUDA_SDPA (docs/sdpa.md). */
#ifndef QC_FLASH_H
#define QC_FLASH_H

#include "qspec/backend.h"

/* Whether the flash kernels implement the request (BF16 or FP16, d <= 576, dv <= 512). */
bool qc_flash_takes(const qs_sdpa_args *a);
/* The flash forward and backward; each claims QS_ATTN_CLAIM_TOLERANCE. The backward sets
 * *fell_back (and writes nothing) when an FP16 dS left FP16's range. */
qs_status qc_flash_fwd(qs_sdpa_args *a);
/* Whether qc_flash_fwd (and the lse recomputation of qc_flash_bwd) runs the request on the
 * Hopper wgmma kernel (cuda/qc_flash_wgmma.cuh): it fits (d <= 192 and dv <= 128, or d <= 576
 * and dv <= 512; multiples of 8, scale > 0), the device is sm_90 and QSPEC_CUDA_FLASH_WGMMA is
 * not "0". */
bool qc_flash_wgmma_takes(const qs_sdpa_args *a);
/* The backward; on the wgmma kernels too when qc_flash_wgmma_takes, unless
 * QSPEC_CUDA_FLASH_WGMMA_BWD is "0" (read at each call; cuda/qc_flash.cu). */
qs_status qc_flash_bwd(qs_sdpa_args *a, int *fell_back);

#endif
