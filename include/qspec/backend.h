/* backend.h: the backend plugin ABI, version 1.
 * A backend is a shared object exporting one C function, QS_BACKEND_ENTRY_NAME, that
 * returns a qs_backend table: the ABI version, a name, capability bits and kernel slots.
 * A slot that is NULL, or a capability bit that is clear, makes every case that needs it
 * "not supported"; the kit never falls back to the reference behind a backend's back.
 * Slots are only ever appended to the table: struct_size says which of them a plugin's
 * table holds, so a plugin built against an older header still loads and its missing
 * slots count as NULL (QS_BACKEND_HAS_SLOT).
 * This header depends only on status.h, tensor.h, format.h, recipe.h, gemm.h and
 * attn_params.h (for their types; a plugin never links libqspec), so a vendor builds a plugin
 * against the installed headers alone. */
#ifndef QSPEC_BACKEND_H
#define QSPEC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "attn_params.h"
#include "format.h"
#include "gemm.h"
#include "recipe.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_BACKEND_ABI_VERSION 1u
#define QS_BACKEND_ENTRY_NAME  "qs_backend_entry_v1"

/* Capability bits: one per kernel family a backend may implement. */
#define QS_CAP_CAST          (UINT64_C(1) << 0) /* element format conversion */
#define QS_CAP_QUANT_DELAYED (UINT64_C(1) << 1)
#define QS_CAP_QUANT_CURRENT (UINT64_C(1) << 2)
#define QS_CAP_QUANT_MXFP8   (UINT64_C(1) << 3)
#define QS_CAP_QUANT_BLOCK   (UINT64_C(1) << 4)
#define QS_CAP_QUANT_NVFP4   (UINT64_C(1) << 5)
#define QS_CAP_DEQUANT       (UINT64_C(1) << 6)
/* The gemm slot, one bit per family of operand scaling it takes ([GEMM-SCALE-*]). */
#define QS_CAP_GEMM_TENSOR (UINT64_C(1) << 7)  /* QS_GEMM_SCALE_NONE and _TENSOR */
#define QS_CAP_GEMM_BLOCK  (UINT64_C(1) << 8)  /* QS_GEMM_SCALE_BLOCK_1X128 and _128X128 */
#define QS_CAP_GEMM_MX     (UINT64_C(1) << 9)  /* QS_GEMM_SCALE_MX */
#define QS_CAP_GEMM_NVFP4  (UINT64_C(1) << 10) /* QS_GEMM_SCALE_NVFP4 */
/* Distributed runs (spec/distributed.md [DIST-BACKEND]): the dist_id, dist_join and
 * allreduce_amax slots, and quantize honours qs_quantize_args.given_amax. */
#define QS_CAP_DIST (UINT64_C(1) << 11)
/* The cast16 slot: casts to every element format, 16-bit codes included, with per-element
 * random bits for stochastic rounding. */
#define QS_CAP_CAST16 (UINT64_C(1) << 12)
/* The sdpa_fwd and sdpa_bwd slots (softmax attention, spec/attention.md [ATTN-*]). */
#define QS_CAP_SDPA (UINT64_C(1) << 13)
/* The gdn_fwd and gdn_bwd slots (Gated DeltaNet, spec/attention.md [GDN-*]). */
#define QS_CAP_GDN (UINT64_C(1) << 14)
/* The quantize slot takes torchao's axiswise recipes, rowwise and rowwise_with_gw_hp
 * (spec/recipes.md [REC-AX-*]); their GEMMs need QS_CAP_GEMM_TENSOR only ([GEMM-LIN-AX-*]). */
#define QS_CAP_QUANT_ROWWISE (UINT64_C(1) << 15)

/* The most bytes of a distributed run's id (dist_id). */
#define QS_DIST_ID_MAX 256

/* A conversion request: n FP32 values to codes of format dt under mode (one per element;
 * E2M1 codes one per byte here, not packed). */
typedef struct qs_cast_args {
    qs_dtype dtype;
    qs_cast_mode mode;
    size_t n;
    const float *in;
    uint8_t *out;
} qs_cast_args;

/* A quantization request [CASE-OP-QUANTIZE]: quantize the 2-D host tensor x under cfg
 * (spec/recipes.md). The kit allocates every tensor of out with the dtypes and shapes of
 * qs_recipe_layout for the copies cfg asks for (cfg->rowwise, cfg->columnwise), and sets
 * out->cfg, elem, rows and cols; the backend fills the data and scale tensors and amax[],
 * global_enc[], global_dec[] exactly as the reference does. Delayed scaling passes its
 * current scale in ds_scale (the backend uses it and reports the amax it saw); the kit, not
 * the backend, keeps and updates the delayed-scaling state. */
typedef struct qs_quantize_args {
    const qs_recipe_config *cfg;
    const qs_tensor *x;
    float ds_scale;
    qs_quantized *out;
    /* Read only by a backend with QS_CAP_DIST: when non-NULL, the tensor amaxes to quantize
     * with in place of those of x ([DIST-GIVEN-AMAX]: current scaling given_amax[0]; NVFP4
     * given_amax[QS_DIR_ROW] and [QS_DIR_COL]), reported back in out->amax. */
    const float *given_amax;
} qs_quantize_args;

/* A dequantization request: copy dir of in to FP32 y ([rows, cols], allocated by the kit). */
typedef struct qs_dequantize_args {
    const qs_quantized *in;
    qs_direction dir;
    qs_tensor *y;
} qs_dequantize_args;

/* What a gemm result is, as the backend states it for each request [CASE-GEMM-CLAIM]. A
 * bitwise comparison against the case's model checks only a backend that claims the model;
 * for another claim the kit measures the deviation and reports the case as not supported. */
typedef enum qs_gemm_claim {
    QS_GEMM_CLAIM_MODEL = 0, /* the requested accumulation model, bit for bit */
    QS_GEMM_CLAIM_FP32,      /* FP32 accumulation in an order the backend does not state
                                (cuBLASLt BF16/FP32 GEMMs): the class [GEMM-BOUND] covers */
    QS_GEMM_CLAIM_HOPPER_TC, /* Hopper FP8 tensor cores (cuBLASLt FP8): the hardware that
                                hopper_fp8_tc models, not reproduced by it bit for bit */
    QS_GEMM_CLAIM_COUNT
} qs_gemm_claim;

/* One GEMM operand as codes plus scales: rows x k, row-major, k contiguous (TN, [GEMM-TN]:
 * A has rows = m, B has rows = n). By scaling mode (spec/gemm.md section 2):
 *   NONE:    data FP32, BF16 or FP16, used as given; scale NULL; tensor_scale 1.
 *   TENSOR:  data E4M3 or E5M2 (or FP32/BF16/FP16); scale NULL; tensor_scale = scale_inv.
 *   BLOCK_1X128:   data E4M3/E5M2; scale FP32 [rows, ceil(k/128)].
 *   BLOCK_128X128: data E4M3/E5M2; scale FP32 [ceil(rows/128), ceil(k/128)].
 *   MX:      data E4M3/E5M2; scale E8M0 codes [rows, ceil(k/32)].
 *   NVFP4:   data E2M1 (packed two a byte as qs_tensor packs it); scale E4M3 codes
 *            [rows, ceil(k/16)] (a 16x16 tile's scale repeated on each of its rows);
 *            tensor_scale = the per-tensor decode scale (S_dec).
 * Every scale is a dequantization multiplier. Tensors are host memory owned by the kit. */
typedef struct qs_gemm_coded_operand {
    qs_gemm_scaling scaling;
    const qs_tensor *data;
    const qs_tensor *scale;
    float tensor_scale;
} qs_gemm_coded_operand;

/* A GEMM request [CASE-OP-GEMM]: y[m,n] = alpha * sum_k deq(a)[m,k] deq(b)[n,k]
 * (+ beta * c[m,n]) under the accumulation model acc, rounded to out_dtype (spec/gemm.md).
 * A and B are of one scaling family. The kit allocates y [m, n] of out_dtype (FP32, BF16 or
 * FP16) and the backend writes its codes. A backend that cannot honour acc (or the
 * operands, the shape, beta) answers QS_ERR_UNSUPPORTED; on QS_OK it sets claim (the kit
 * presets QS_GEMM_CLAIM_MODEL, the strongest claim). On an error or QS_ERR_UNSUPPORTED it
 * may write a one-line reason into why[0..why_len). c is NULL when beta is 0. */
typedef struct qs_gemm_args {
    int64_t m, n, k;
    qs_gemm_coded_operand a, b;
    float alpha, beta;
    const qs_tensor *c; /* [m, n] FP32, read only when beta != 0 */
    qs_gemm_acc acc;
    qs_dtype out_dtype;
    qs_tensor *y;        /* out: [m, n] codes of out_dtype */
    qs_gemm_claim claim; /* out */
    char *why;           /* out: reason for a refusal or failure (may stay empty) */
    size_t why_len;
} qs_gemm_args;

/* A conversion request of the cast16 slot: n FP32 values to codes of any element format
 * dt, BF16 and FP16 included, one 16-bit code per element (8-bit and narrower formats in
 * the low bits; E2M1 one code per element, not packed). Under QS_ROUND_SR, sr_bits holds n
 * random words, one per element, used as qs_cast_mode.sr_bits is for one value
 * ([FMT-ROUND-SR]); it is NULL under every other rounding. */
typedef struct qs_cast16_args {
    qs_dtype dtype;
    qs_round round;
    qs_overflow overflow;
    size_t n;
    const float *in;
    const uint32_t *sr_bits;
    uint16_t *out;
} qs_cast16_args;

/* A softmax-attention request [CASE-OP-SDPA] (spec/attention.md): p as for qs_sdpa_fwd,
 * except that the kit resolves the scale (p.scale is never 0) and the cu_seqlens arrays it
 * points to are host memory. Tensors are host FP32 arrays holding values of p.dtype, in the
 * layout p.layout names: q [tokens, h, d], k [tokens, hkv, d], v [tokens, hkv, dv]. The
 * kit allocates every output. Forward (sdpa_fwd) writes o [q tokens, h, dv], rounded to
 * p.dtype as [ATTN-FWD] states, and lse [q tokens, h] (FP32, natural log) when lse is not
 * NULL. Backward (sdpa_bwd) reads o and dout and writes dq, dk, dv (rounded to p.dtype).
 * A slot that cannot honour a request (a head dim, a layout) answers QS_ERR_UNSUPPORTED;
 * on an error or a refusal it may write a one-line reason into why[0..why_len). */
/* What an sdpa or gdn result is, as the backend states it per request
 * [CASE-PLUGIN-REF]: the kit presets QS_ATTN_CLAIM_TOLERANCE. */
typedef enum qs_attn_claim {
    QS_ATTN_CLAIM_TOLERANCE = 0, /* another evaluation order: within the case's tolerance */
    QS_ATTN_CLAIM_REFERENCE,     /* the reference's operations in its order, bit for bit */
    QS_ATTN_CLAIM_COUNT
} qs_attn_claim;

typedef struct qs_sdpa_args {
    qs_sdpa_params p;
    const float *q, *k, *v;
    float *o, *lse;    /* forward outputs; backward: o is an input, lse unused */
    const float *dout; /* backward only */
    float *dq, *dk, *dv;
    char *why;
    size_t why_len;
    qs_attn_claim claim; /* out */
} qs_sdpa_args;

/* A Gated DeltaNet request [CASE-OP-GDN] (spec/attention.md): p as for qs_gdn_fwd, except
 * that the kit resolves the scale (never 0) and cu_seqlens (NULL for dense inputs) is host
 * memory. Tensors are host FP32 arrays: q, k, v, o, dout, dq, dk, dv hold values of p.dtype;
 * g, beta, states and their gradients are FP32 [GDN-STATE-FP32]. h0 and dht may be NULL
 * (zeros), ht and dh0 may be NULL (not wanted). gdn_fwd writes o and ht; gdn_bwd reads
 * dout and dht and writes dq, dk, dv, dg, dbeta and dh0. Refusals and reasons as for
 * qs_sdpa_args. */
typedef struct qs_gdn_args {
    qs_gdn_params p;
    const float *q, *k, *v, *g, *beta, *h0;
    float *o, *ht;                          /* forward outputs */
    const float *dout, *dht;                /* backward inputs */
    float *dq, *dk, *dv, *dg, *dbeta, *dh0; /* backward outputs */
    char *why;
    size_t why_len;
    qs_attn_claim claim; /* out */
} qs_gdn_args;

typedef struct qs_backend {
    uint32_t abi_version; /* QS_BACKEND_ABI_VERSION */
    uint32_t struct_size; /* sizeof(qs_backend) as the plugin was built */
    const char *name;     /* short name, "cuda" */
    const char *version;  /* the backend's own version string */
    uint64_t caps;        /* QS_CAP_* bits */

    /* Opens the backend: probes the device. On failure returns an error and writes a
     * one-line reason ("no CUDA device is present") into why[0..why_len). */
    qs_status (*open)(void **state, char *why, size_t why_len);
    void (*close)(void *state);
    /* A one-line description of the device in use ("NVIDIA H200, sm_90, 139 GiB"). */
    const char *(*device)(void *state);

    qs_status (*cast)(void *state, const qs_cast_args *args);
    /* A slot may answer QS_ERR_UNSUPPORTED for one request (a variant it does not
     * implement): that case is then reported as not supported. */
    qs_status (*quantize)(void *state, const qs_quantize_args *args);
    qs_status (*dequantize)(void *state, const qs_dequantize_args *args);

    /* Appended to ABI v1 (present when struct_size covers it): the TN GEMM of
     * spec/gemm.md on coded operands, claimed per request [CASE-OP-GEMM]. */
    qs_status (*gemm)(void *state, qs_gemm_args *args);

    /* Appended to ABI v1: distributed runs, one process per rank (QS_CAP_DIST,
     * spec/distributed.md [DIST-BACKEND]). The kit starts nranks processes; rank 0 calls
     * dist_id, which writes an id of at most cap (QS_DIST_ID_MAX) bytes into id and its
     * length into *len; every rank then calls dist_join with that id, which makes this
     * process rank `rank` of `nranks` (selecting its device). allreduce_amax replaces the n
     * host amaxes at amax by their maximum over every joined rank [DIST-REDUCE-MAX] (the
     * unsigned maximum of the bit patterns), all ranks calling it in the same order. On an
     * error a slot writes a one-line reason into why[0..why_len). */
    qs_status (*dist_id)(void *state, void *id, size_t cap, size_t *len, char *why, size_t why_len);
    qs_status (*dist_join)(void *state, int nranks, int rank, const void *id, size_t len, char *why,
                           size_t why_len);
    qs_status (*allreduce_amax)(void *state, int64_t n, float *amax, char *why, size_t why_len);

    /* Appended to ABI v1: the wide cast (QS_CAP_CAST16), softmax attention (QS_CAP_SDPA)
     * and Gated DeltaNet (QS_CAP_GDN), forward and backward. The engine runs a program's
     * sdpa, mla and gdn ops through these slots on a plugin (spec/cases.md
     * [CASE-KERNEL-TABLE]). */
    qs_status (*cast16)(void *state, const qs_cast16_args *args);
    qs_status (*sdpa_fwd)(void *state, qs_sdpa_args *args);
    qs_status (*sdpa_bwd)(void *state, qs_sdpa_args *args);
    qs_status (*gdn_fwd)(void *state, qs_gdn_args *args);
    qs_status (*gdn_bwd)(void *state, qs_gdn_args *args);
} qs_backend;

/* The size of a v1 table built before the gemm slot was appended: the smallest struct_size
 * the kit accepts. */
#define QS_BACKEND_V1_MIN_SIZE offsetof(qs_backend, gemm)
/* Whether a table of struct_size bytes holds the slot named field. */
#define QS_BACKEND_HAS_SLOT(struct_size, field)                                                    \
    ((size_t)(struct_size) >= offsetof(qs_backend, field) + sizeof(((qs_backend *)0)->field))

/* The type of the exported entry point. It returns the table for the ABI the caller
 * asks for, or NULL when the plugin cannot provide that version. */
typedef const qs_backend *(*qs_backend_entry_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif
#endif
