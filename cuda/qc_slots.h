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

#endif
