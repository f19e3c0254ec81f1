/* qc_gdn_chunk.h: the chunked Gated DeltaNet forward on the device (cuda/qc_gdn_chunk.cu),
 * spec/attention.md [GDN-CHUNK]: o and the final FP32 state by chunks of 64 tokens with
 * tensor-core matmuls, varlen, GVA, initial state. Used by the gdn_fwd slot
 * (cuda/qc_gdn.cu, QSPEC_CUDA_GDN=chunk) and by cuda/bench/gdn_bench.cu on device arrays. */
#ifndef QC_GDN_CHUNK_H
#define QC_GDN_CHUNK_H

#include <cuda_runtime.h>
#include <stdint.h>

namespace qc
{

/* The operands of the chunk matmuls: BF16 (one mma.sync m16n8k16 per tile, FP32
 * accumulation; FP32 intermediates rounded to BF16 as operands, as upstream kernels do),
 * or FP32 split into two TF32 parts (three m16n8k8 per tile: big*big + big*small +
 * small*big, about 22 significant bits per operand). */
enum gdn_chunk_mma { kGdnMmaBf16 = 0, kGdnMmaTf32x3 = 1, kGdnMmaBf16Smem = 2 };
/* kGdnMmaBf16Smem: BF16 operands as kGdnMmaBf16, staged in BF16 (shared memory tiles read by
 * ldmatrix, W, U and A in the workspace, next chunk fetched by cp.async); dk = dv = 128,
 * kGdnIoBf16 only. */
/* The element type of q, k, v and o in device memory: FP32 (o rounded to out_dt and kept
 * as FP32) or BF16. */
enum gdn_chunk_io { kGdnIoF32 = 0, kGdnIoBf16 = 1 };

struct gdn_chunk_problem {
    int64_t nseq;   /* sequences */
    int64_t seq_t;  /* tokens per sequence when cu is NULL (dense) */
    int64_t tokens; /* all tokens */
    int64_t h, hv, dk, dv;
    float scale;       /* resolved, never 0 */
    int out_dt;        /* qs_dtype the FP32 o is rounded to (kGdnIoF32) */
    const int32_t *cu; /* device cu_seqlens [nseq + 1], or NULL for dense */
};

/* The chunk table (first token and length of each chunk of each sequence) and the
 * workspace of W, U and the masked Q K^T of every chunk, FP32. */
struct gdn_chunk_plan {
    int64_t nchunks = 0;
    int32_t *chunks = nullptr; /* device, 2 per chunk: first token, length */
    float *ws = nullptr;
    size_t ws_floats = 0;
};

/* dk and dv up to 128. */
bool gdn_chunk_fits(int64_t dk, int64_t dv);
/* Builds plan from the host cu_seqlens (NULL: dense) and allocates its device memory. */
cudaError_t gdn_chunk_plan_make(const gdn_chunk_problem &p, const int32_t *cu_host,
                                gdn_chunk_plan *plan);
void gdn_chunk_plan_free(gdn_chunk_plan *plan);
/* o [tokens, hv, dv] and ht [nseq, hv, dk, dv] (may be NULL) from q, k [tokens, h, dk]
 * (already l2-normalized when the op asks for it), v [tokens, hv, dv], g, beta [tokens, hv]
 * and h0 (NULL: zeros). Asynchronous on stream st. */
cudaError_t gdn_chunk_fwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, void *o, float *ht, cudaStream_t st);

} // namespace qc

#endif
