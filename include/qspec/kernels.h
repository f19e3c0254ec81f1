/* kernels.h: the kernel table of a context (spec/cases.md [CASE-KERNEL-TABLE]).
 * Every computation of the engine (programs, the quantized and high-precision linear, MLA,
 * GDN and SDPA inside programs) reaches its kernels through one table held by the context:
 * the quantize, dequantize, gemm, sdpa_fwd/bwd and gdn_fwd/bwd slots of backend.h. A new
 * context holds the reference's table; installing a backend's table makes the same engine
 * (scoping, tape, checkpoint record and replay, trace, delayed-scaling state) run on that
 * backend's kernels. Neighbours: backend.h (the slots), program.h (the engine). */
#ifndef QSPEC_KERNELS_H
#define QSPEC_KERNELS_H

#include "backend.h"
#include "scope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs table (with state, handed to every slot) as the context's kernels; table NULL
 * puts the reference's back. The table is copied (slots past its struct_size count as
 * NULL), state is borrowed. A slot the engine needs and the table lacks (NULL) makes that
 * call fail with QS_ERR_UNSUPPORTED naming the slot. QS_ERR_ABI for a table of another ABI
 * version or too small a struct_size; QS_ERR_INVALID_ARG for a NULL ctx. */
qs_status qs_ctx_set_backend(qs_ctx *ctx, const qs_backend *table, void *state);

/* The context's table: the reference's (name "ref") unless a backend was installed. */
const qs_backend *qs_ctx_backend(const qs_ctx *ctx);

/* The capability bit a table claims to quantize under recipe kind (QS_CAP_QUANT_*), and
 * its name in *name when name is not NULL; 0 (and "") for an unknown kind. */
uint64_t qs_recipe_capability(qs_recipe_kind kind, const char **name);

/* The weakest gemm claim [CASE-GEMM-CLAIM] the context's gemm slot made since the last
 * reset (QS_GEMM_CLAIM_MODEL when every GEMM claimed the model, or none ran), and its
 * reset, which also resets the attention claim below. The kit reads them to know whether
 * a program's outputs can match bit for bit [CASE-PLUGIN-REF]. */
qs_gemm_claim qs_ctx_gemm_claim(const qs_ctx *ctx);
void qs_ctx_gemm_claim_reset(qs_ctx *ctx);
/* QS_ATTN_CLAIM_TOLERANCE when an sdpa or gdn slot claimed only a tolerance since the
 * last reset; QS_ATTN_CLAIM_REFERENCE when every one claimed the reference's order (or
 * none ran). */
qs_attn_claim qs_ctx_attn_claim(const qs_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
