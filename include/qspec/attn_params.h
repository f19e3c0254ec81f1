/* attn_params.h: the shapes and options of the attention ops of spec/attention.md, SDPA
 * [ATTN-SHAPES] and Gated DeltaNet [GDN-SHAPES]. They are plain data shared by the reference
 * (attention.h) and the backend ABI (backend.h), so a plugin sees the same description of a
 * call as the reference without the reference's context API. */
#ifndef QSPEC_ATTN_PARAMS_H
#define QSPEC_ATTN_PARAMS_H

#include <stdint.h>

#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token layouts [ATTN-LAYOUT-SBHD] [ATTN-LAYOUT-BSHD] [ATTN-LAYOUT-THD]. */
typedef enum qs_attn_layout {
    QS_ATTN_SBHD = 0, /* [s, b, h, d] */
    QS_ATTN_BSHD,     /* [b, s, h, d] */
    QS_ATTN_THD,      /* [t, h, d], sequences packed along t, delimited by cu_seqlens */
    QS_ATTN_LAYOUT_COUNT
} qs_attn_layout;

/* Masks [ATTN-MASK-NONE] [ATTN-MASK-CAUSAL] (causal is top-left aligned). */
typedef enum qs_attn_mask {
    QS_ATTN_MASK_NONE = 0,
    QS_ATTN_MASK_CAUSAL,
    QS_ATTN_MASK_COUNT
} qs_attn_mask;

/* The shape and options of one SDPA call [ATTN-SHAPES].
 * sbhd/bshd: b sequences, each sq query and sk key tokens.
 * thd: b sequences; cu_seqlens_q/kv (b+1 int32 prefix sums, from 0) give the lengths;
 *   cu_seqlens_q/kv_padded (NULL: the same as cu_seqlens) give where each sequence starts
 *   in the packed arrays [ATTN-LAYOUT-THD-PADDED]; sq and sk are the packed token counts
 *   (the last padded entry). */
typedef struct qs_sdpa_params {
    qs_attn_layout layout;
    qs_attn_mask mask;
    int64_t b, sq, sk;
    int64_t h, hkv; /* query heads and key/value heads; h % hkv == 0 [ATTN-GQA] */
    int64_t d, dv;  /* q/k head dim and v head dim */
    const int32_t *cu_seqlens_q, *cu_seqlens_kv;
    const int32_t *cu_seqlens_q_padded, *cu_seqlens_kv_padded;
    float scale;    /* 0 selects the default qs_rsqrtf((float)d) [ATTN-SCALE] */
    qs_dtype dtype; /* QS_FP32, QS_BF16 or QS_FP16: of q, k, v, o, do, dq, dk, dv */
} qs_sdpa_params;

/* The shape and options of one GDN call [GDN-SHAPES].
 * Dense: q, k [b, t, h, dk]; v, o [b, t, hv, dv]; g, beta [b, t, hv]; states
 *   [b, hv, dk, dv]. Varlen [GDN-VARLEN]: cu_seqlens non-NULL, b+1 int32 prefix sums;
 *   arrays are packed [t, ...] with t = cu_seqlens[b] tokens; states [b, hv, dk, dv]. */
typedef struct qs_gdn_params {
    int64_t b, t;
    int64_t h, hv;  /* q/k heads and value heads; hv % h == 0 [GDN-GVA] */
    int64_t dk, dv; /* key and value head dims */
    const int32_t *cu_seqlens;
    float scale;       /* 0 selects the default qs_rsqrtf((float)dk) [GDN-SCALE] */
    int use_qk_l2norm; /* nonzero: q and k are l2-normalized first [GDN-L2NORM] */
    qs_dtype dtype;    /* QS_FP32, QS_BF16 or QS_FP16: of q, k, v, o, do, dq, dk, dv */
} qs_gdn_params;

#ifdef __cplusplus
}
#endif
#endif
