/* kernels_internal.h: how the engine and its layers call the context's kernel table
 * (ref/kernels.c, spec/cases.md [CASE-KERNEL-TABLE]). Each qsi_k_ function builds the
 * ABI's request for one slot, calls the context's table (the reference's or a backend's),
 * and turns a backend's failure or refusal into a context error naming the slot. */
#ifndef QSPEC_REF_KERNELS_INTERNAL_H
#define QSPEC_REF_KERNELS_INTERNAL_H

#include "qspec/attn_params.h"
#include "qspec/backend.h"
#include "qspec/kernels.h"
#include "qspec/recipe.h"

/* Quantizes the 2-D x under q through the quantize slot into out (allocated here with the
 * layout of qs_recipe_layout). The delayed-scaling state stays with q: the slot gets
 * q's scale (ds_scale) and the amax it reports is recorded into q [REC-DS-RECORD]; given
 * tensor amaxes (q->amax_given) go to the slot as given_amax [DIST-GIVEN-AMAX]. */
qs_status qsi_k_quantize(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x, qs_quantized *out);

/* The GEMM slot: y (allocated here, [m, n] of out_dtype) = sum_k deq(a) deq(b) under acc,
 * alpha 1, beta 0 [CASE-OP-GEMM]. The claim is folded into the context's weakest claim. */
qs_status qsi_k_gemm(qs_ctx *ctx, const qs_gemm_coded_operand *a, const qs_gemm_coded_operand *b,
                     int64_t m, int64_t n, int64_t k, qs_gemm_acc acc, qs_dtype out_dtype,
                     qs_tensor *y);

/* The sdpa slots, arguments as for qs_sdpa_fwd/qs_sdpa_bwd (the scale is resolved here). */
qs_status qsi_k_sdpa_fwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                         const float *v, float *o, float *lse);
qs_status qsi_k_sdpa_bwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                         const float *v, const float *o, const float *dout, float *dq, float *dk,
                         float *dv);

/* The gdn slots, arguments as for qs_gdn_fwd/qs_gdn_bwd (the scale is resolved here). */
qs_status qsi_k_gdn_fwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        float *o, float *ht);
qs_status qsi_k_gdn_bwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const float *h0,
                        const float *dout, const float *dht, float *dq, float *dk, float *dv,
                        float *dg, float *dbeta, float *dh0);

/* A read-only view (not owning: never qs_tensor_free it) of rows x cols FP32 values as a
 * 2-D tensor, for handing host arrays to a slot as an operand. */
void qsi_f32_view(qs_tensor *t, const float *v, int64_t rows, int64_t cols);

/* The reference's table: the slots of ref/ behind the ABI's request structs (their state
 * is the calling context). */
extern const qs_backend qsi_ref_backend;

#endif
