/* qc_gdn_chunk.h: the chunked Gated DeltaNet forward and backward on the device
 * (cuda/qc_gdn_chunk.cu), spec/attention.md [GDN-CHUNK]: o and the final FP32 state, and the
 * gradients of q, k, v, g, beta and h0, by chunks of 64 tokens with tensor-core matmuls,
 * varlen, GVA, initial state. Used by the gdn_fwd and gdn_bwd slots (cuda/qc_gdn.cu,
 * QSPEC_CUDA_GDN=chunk) and by cuda/bench/gdn_bench.cu on device arrays. */
#ifndef QC_GDN_CHUNK_H
#define QC_GDN_CHUNK_H

#ifndef QC_EMU /* the CPU emulator (tests/gdn_emu) takes the types alone */
#include <cuda_runtime.h>
#endif
#include <stdint.h>

namespace qc
{

/* The operands of the chunk matmuls: BF16 (one mma.sync m16n8k16 per tile, FP32
 * accumulation; FP32 intermediates rounded to BF16 as operands, as upstream kernels do),
 * or FP32 split into two TF32 parts (three m16n8k8 per tile: big*big + big*small +
 * small*big, about 22 significant bits per operand). */
enum gdn_chunk_mma {
    kGdnMmaBf16 = 0,
    kGdnMmaTf32x3 = 1,
    kGdnMmaBf16Smem = 2,
    kGdnMmaBf16Fused = 3,
    kGdnMmaBf16Wg = 4
};
/* kGdnMmaBf16Smem: BF16 operands as kGdnMmaBf16, staged in BF16 (shared memory tiles read by
 * ldmatrix, W, U and A in the workspace, next chunk fetched by cp.async); dk = dv = 128,
 * kGdnIoBf16 only. Its backward keeps T and dVn in the workspace too, and the states before
 * and the state gradients after each chunk (plan.hs, plan.dhs) in BF16. Its serial kernels
 * are the lean ones (state and state gradient in registers, 4 or 8 warps a block;
 * gdn_lean_warps fixes the choice; gdn_tform and the other forms below). kGdnMmaBf16Fused:
 * the same forward in one kernel (W, U and A never leave shared memory; o and the final state
 * bitwise those of kGdnMmaBf16Smem in its W and U form, whose backward it shares). kGdnMmaBf16Wg:
 * kGdnMmaBf16Fused with the walk's products on wgmma (sm_90a; elsewhere kGdnMmaBf16Fused runs): the
 * same steps in another accumulation order inside the tensor-core products, so close to it but not
 * its bits; its backward's first pass is the wgmma kernel too. */
/* The BF16-staged kernels' modes (dk = dv = 128, kGdnIoBf16). */
inline bool gdn_chunk_staged(int mma)
{
    return mma == kGdnMmaBf16Smem || mma == kGdnMmaBf16Fused || mma == kGdnMmaBf16Wg;
}
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
    int solve_tc = 0;  /* the staged kernels' solve on the tensor cores (set from gdn_solve_tc
                          where they are launched) */
    /* The staged walks (state_lean_kernel) take only chunks walk_lo .. walk_hi - 1 of each
     * sequence (clipped to its chunks): h0 is then the state before chunk walk_lo and ht the
     * state after chunk walk_hi - 1, o and the backward's hs and vn those chunks' rows. The
     * launches of gdn_pipe set them; the defaults take every chunk. */
    int32_t walk_lo = 0;
    int32_t walk_hi = INT32_MAX;
};

/* The chunk table (first token and length of each chunk of each sequence, sequence by
 * sequence), the index of each sequence's first chunk, and the workspace of W, U and the
 * masked Q K^T of every chunk, FP32. A backward plan adds the states before each chunk,
 * the state gradients after each chunk and the value heads' dq̂, dk̂. */
struct gdn_chunk_plan {
    int64_t nchunks = 0;
    int32_t *chunks = nullptr; /* device, 2 per chunk: first token, length */
    int32_t *chunk0 = nullptr; /* device, nseq + 1: the first chunk of each sequence */
    float *ws = nullptr;
    size_t ws_floats = 0;
    float *hs = nullptr;  /* backward: [hv][nchunks][dk][dv] the state before each chunk */
    float *dhs = nullptr; /* backward: [hv][nchunks][dk][dv] the gradient of the state after */
    float *dqk = nullptr; /* backward: [2][tokens][hv][dk] dq̂ then dk̂ of each value head */
    bool narrow = false;  /* backward: hs, dhs and dqk sized for BF16 (the staged kernels only) */
};

/* The lean kernels' warps a block for the benchmark (the plugin leaves it at 0), read at each
 * call: 4 or 8 fixes it; 0 chooses by the problem's size. */
extern int gdn_lean_warps;
/* The forms of kGdnMmaBf16Smem's kernels (all give results within the same bounds; the defaults
 * are the fastest measured, docs/perf.md):
 * gdn_lean_wg: the lean walks (state_lean_kernel, the forward and the backward's state pass,
 * and dstate_lean_kernel) on wgmma where the sm_90a kernels run (1, the default), or on
 * mma.sync (0). */
extern int gdn_lean_wg;
/* gdn_wy_wide: the wy kernels store W, U and A as rows of eight columns, 16 bytes (1, the
 * default; the pairs exchanged within each quad of lanes first), or as BF16 pairs, 4 bytes a
 * thread an instruction (0). The same bytes either way. */
extern int gdn_wy_wide;
/* gdn_wy_gva: where value heads share q/k heads, wy_gva_kernel, a block per (chunk, q/k head)
 * that fetches K and Q and forms K K^T and Q K^T once for the group's value heads (1), or
 * wy_fast_kernel per value head (0); -1, the default, takes wy_gva_kernel in the T form only.
 * The same bytes either way. */
extern int gdn_wy_gva;
/* Whether the wy kernel of the forward's T form (tform) or of the W and U form is
 * wy_gva_kernel, per gdn_wy_gva. */
inline bool gdn_wy_gva_on(bool tform)
{
    return gdn_wy_gva > 0 || (gdn_wy_gva < 0 && tform);
}
/* gdn_tform: the staged forward's T form (1, the default): wy keeps Tu = T diag(beta) and A, not
 * W and U, and the walk forms Vn = Tu (V - e^G . (K S)) (lean_chunk_t, or wg_chunk_t under
 * gdn_lean_wg); 0, the W and U form. Other roundings, so other bits, within the same bounds.
 * The backward always takes the W and U form. */
extern int gdn_tform;
/* gdn_solve_tc: the staged kernels' solve of T = (I + L)^-1 (solve_t, qc_gdn_staged.cuh) merges
 * its 16 x 16 blocks on the tensor cores, three TF32 products a step (1, the default), or in FP32
 * on the CUDA cores (0). Other roundings of T, so other bits, within the same bounds. */
extern int gdn_solve_tc;
/* gdn_pipe: where one sequence (nseq 1) is too short of blocks to fill the GPU with its walk
 * (one block an SM or fewer), the staged forward and the backward's first pass run wy and the
 * walk in gdn_pipe pieces of the sequence's chunks on two streams, wy on piece i + 1 beside the
 * walk on piece i (the walks on a stream of the greatest priority), the state handed from
 * piece to piece in FP32 (so the same bits as in one piece). 0 or 1: one piece; -1 (the
 * default): as gdn_pipe_count says. */
extern int gdn_pipe;
/* The pieces gdn_pipe gives a walk (0: one piece), from the knob, the problem's sequences and
 * chunks, whether the free workspace holds the two FP32 states handed between pieces, and the
 * walk's blocks against the device's SMs. The knob -1 takes kPipeAutoPieces pieces where each
 * has at least kPipeAutoChunks chunks (at 1 x 1024, 16 chunks, 4 pieces were slower than one on
 * an H100, at 1 x 32768, 512 chunks, faster; between them the bound is not tuned), else one.
 * Any count needs one sequence (its chunks are a range of the chunk table, which wy takes piece
 * by piece), at least two chunks a piece, and a walk that leaves room on the SMs for wy's blocks
 * beside it (a block an SM or fewer). */
constexpr int kPipeAutoPieces = 4;
constexpr int64_t kPipeAutoChunks = 64;
inline int gdn_pipe_count(int knob, int64_t nseq, int64_t nchunks, bool scratch_fits,
                          int64_t blocks, int64_t sms)
{
    int n = knob >= 0 ? knob : nchunks >= kPipeAutoPieces * kPipeAutoChunks ? kPipeAutoPieces : 0;
    if (n < 2 || nseq != 1 || nchunks < 2 * static_cast<int64_t>(n) || !scratch_fits ||
        blocks > sms)
        return 0;
    return n;
}
/* gdn_bwd_overlap (1; 0, the default, until timed on a GPU): the staged backward forms wy for
 * every chunk, then runs the reverse walk (dstate_lean_kernel, which reads W and A but not the
 * states) on the side stream beside the state pass, which takes one stage of tiles
 * (state_lean_kernel<..., 1>) so that a block of each fits on one SM; where gdn_bwd_overlap_on
 * says so (4-warp walks of at most one block an SM), else the order of gdn_pipe. The same
 * products, so the same bytes. */
extern int gdn_bwd_overlap;
inline bool gdn_bwd_overlap_on(int knob, int lw, int64_t walk_blocks, int64_t sms)
{
    return knob > 0 && lw == 4 && walk_blocks <= sms;
}
/* wy_fast_kernel's shared-memory tiles for the benchmark: 5 takes the five-tile form (V fetched
 * with K and Q, two blocks an SM); otherwise four (V fetched once T is formed, three). */
extern int gdn_wy_tiles;
#ifndef QC_EMU
/* Sets gdn_lean_wg, gdn_wy_wide, gdn_wy_gva, gdn_tform, gdn_solve_tc, gdn_bwd_overlap and gdn_pipe
 * from the environment the first time it is called, and never again: QSPEC_GDN_LEAN_WG,
 * QSPEC_GDN_WY_WIDE, QSPEC_GDN_WY_GVA, QSPEC_GDN_TFORM, QSPEC_GDN_SOLVE_TC and
 * QSPEC_GDN_BWD_OVERLAP, each "0" or "1", and QSPEC_GDN_PIPE,
 * 0 to 64 (another value, or none, keeps the default, -1). The plugin calls it when it selects its
 * GDN path, gdn_bench first thing, so a benchmark's later changes to them are not undone. */
void gdn_forms_from_env();
/* dk and dv up to 128. */
bool gdn_chunk_fits(int64_t dk, int64_t dv);
/* Whether kGdnMmaBf16Wg runs its wgmma kernels on the current device (else the fused ones). */
bool gdn_chunk_wgmma_available();
/* Builds plan from the host cu_seqlens (NULL: dense) and allocates its device memory. */
cudaError_t gdn_chunk_plan_make(const gdn_chunk_problem &p, const int32_t *cu_host,
                                gdn_chunk_plan *plan);
/* The same, with the backward's buffers (hs, dhs, dqk) too: in FP32, or in BF16 (half the
 * memory) when narrow is set, for the staged modes only (gdn_chunk_staged); the other modes
 * refuse a narrow plan. */
cudaError_t gdn_chunk_plan_make_bwd(const gdn_chunk_problem &p, const int32_t *cu_host,
                                    gdn_chunk_plan *plan, bool narrow = false);
void gdn_chunk_plan_free(gdn_chunk_plan *plan);
/* o [tokens, hv, dv] and ht [nseq, hv, dk, dv] (may be NULL) from q, k [tokens, h, dk]
 * (already l2-normalized when the op asks for it), v [tokens, hv, dv], g, beta [tokens, hv]
 * and h0 (NULL: zeros). Asynchronous on stream st. */
cudaError_t gdn_chunk_fwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, void *o, float *ht, cudaStream_t st);
/* The backward of gdn_chunk_fwd (docs/gdn.md, "The chunked backward") on a backward plan,
 * from dout [tokens, hv, dv] (of the io type) and dht (FP32, NULL: zeros): dq, dk [tokens, h,
 * dk] (the sums over each q/k head's value heads [GDN-GVA], in increasing hv, of dq̂, dk̂;
 * before any l2norm backward, which the caller applies), dv [tokens, hv, dv], dg, dbeta
 * [tokens, hv] and dh0 [nseq, hv, dk, dv] (NULL: not wanted). dq and dk may both be NULL:
 * then only plan.dqk holds them, per value head (FP32 [2][tokens][hv][dk]; with kGdnMmaBf16Smem
 * BF16 [2][tokens][hv][128] in its first half). Values of the io type
 * are rounded to out_dt (kGdnIoF32) or BF16. kGdnMmaTf32x3, kGdnMmaBf16, or kGdnMmaBf16Smem (dk =
 * dv = 128 and kGdnIoBf16 only, else cudaErrorInvalidValue). Asynchronous on stream st. */
cudaError_t gdn_chunk_bwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, const void *dout, const float *dht,
                          void *dq, void *dk, void *dv, float *dg, float *dbeta, float *dh0,
                          cudaStream_t st);
#endif

} // namespace qc

#endif
