/* qc_slots.h: the kernel slots of the CUDA plugin's backend table (cuda/qc_slots.cu),
 * with the signatures of include/qspec/backend.h. */
#ifndef QC_SLOTS_H
#define QC_SLOTS_H

#include "qspec/backend.h"

qs_status qc_slot_quantize(void *state, const qs_quantize_args *a);
qs_status qc_slot_cast(void *state, const qs_cast_args *a);
/* The gemm slot (cuda/qc_gemm.cu) and the release of its cuBLASLt handle and workspace. */
qs_status qc_slot_gemm(void *state, qs_gemm_args *a);
void qc_gemm_release(void);
/* cuda/qc_dequant.cu */
qs_status qc_slot_dequantize(void *state, const qs_dequantize_args *a);
/* The distributed slots over NCCL (cuda/qc_dist.cu; built when nccl.h is found). */
qs_status qc_slot_dist_id(void *state, void *id, size_t cap, size_t *len, char *why,
                          size_t why_len);
qs_status qc_slot_dist_join(void *state, int nranks, int rank, const void *id, size_t len,
                            char *why, size_t why_len);
qs_status qc_slot_allreduce_amax(void *state, int64_t n, float *amax, char *why, size_t why_len);
void qc_dist_release();
/* The wide cast (cuda/qc_cast16.cu), softmax attention (cuda/qc_sdpa.cu) and Gated DeltaNet
 * (cuda/qc_gdn.cu). */
qs_status qc_slot_cast16(void *state, const qs_cast16_args *a);
qs_status qc_slot_sdpa_fwd(void *state, qs_sdpa_args *a);
qs_status qc_slot_sdpa_bwd(void *state, qs_sdpa_args *a);
qs_status qc_slot_gdn_fwd(void *state, qs_gdn_args *a);
qs_status qc_slot_gdn_bwd(void *state, qs_gdn_args *a);

#endif
