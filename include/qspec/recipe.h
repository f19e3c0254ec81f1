/* recipe.h: the quantization recipes of spec/recipes.md — delayed and current tensorwise
 * FP8 scaling, MXFP8, DeepSeek-style block FP8, NVFP4 and torchao's axiswise (rowwise)
 * FP8 recipes. A qs_quantizer holds one
 * tensor's configuration and (for delayed scaling) its state; qs_quantize maps a 2-D
 * BF16/FP16/FP32 tensor to codes plus scales for the requested directions, and
 * qs_dequantize maps them back to FP32. Peer variants are named options [REC-VARIANTS]. */
#ifndef QSPEC_RECIPE_H
#define QSPEC_RECIPE_H

#include <stdint.h>

#include "format.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qs_recipe_kind {
    QS_RECIPE_DELAYED = 0,   /* tensorwise FP8, stateful [REC-DS-*] */
    QS_RECIPE_CURRENT,       /* tensorwise FP8, stateless [REC-CS-*] */
    QS_RECIPE_MXFP8,         /* 1x32 / 32x1 blocks, E8M0 scales [REC-MX-*] */
    QS_RECIPE_BLOCK,         /* 1x128 or 128x128 blocks, FP32 scales [REC-BLK-*] */
    QS_RECIPE_NVFP4,         /* 1x16 or 16x16 E2M1 blocks, E4M3 + FP32 scales [REC-NV-*] */
    QS_RECIPE_ROWWISE,       /* torchao "rowwise": one FP32 scale per row of each copy [REC-AX-*] */
    QS_RECIPE_ROWWISE_GW_HP, /* torchao "rowwise_with_gw_hp": the weight's columnwise copy
                                tensorwise, wgrad in high precision [REC-AX-GWHP] */
    QS_RECIPE_COUNT
} qs_recipe_kind;

/* The role of a tensor in a linear layer [REC-ROLE]: forward roles and gradient roles. */
typedef enum qs_tensor_role {
    QS_ROLE_INPUT = 0,   /* activation (forward) */
    QS_ROLE_WEIGHT,      /* weight (forward) */
    QS_ROLE_OUTPUT,      /* forward output (forward) */
    QS_ROLE_GRAD_OUTPUT, /* dY (gradient) */
    QS_ROLE_GRAD_INPUT,  /* dX (gradient) */
    QS_ROLE_COUNT
} qs_tensor_role;

/* FP8 format choice of the FP8 recipes [REC-DS-HYBRID]. */
typedef enum qs_fp8_format {
    QS_FP8_HYBRID = 0, /* E4M3 for forward roles, E5M2 for gradient roles */
    QS_FP8_E4M3,
    QS_FP8_E5M2,
    QS_FP8_COUNT
} qs_fp8_format;

typedef enum qs_amax_algo {
    QS_AMAX_MAX = 0,     /* max over the history window [REC-DS-SCALE] */
    QS_AMAX_MOST_RECENT, /* the newest amax only */
    QS_AMAX_COUNT
} qs_amax_algo;

/* Delayed-scaling history roll variant [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED]. */
typedef enum qs_ds_roll {
    QS_DS_ROLL_FUSED = 0, /* TE's fused update: a zero amax skips the roll (default) */
    QS_DS_ROLL_UNFUSED,   /* TE's unfused Python update: always rolls */
    QS_DS_ROLL_COUNT
} qs_ds_roll;

/* MXFP8 scale rule [REC-MX-SCALE] [REC-MX-SCALE-OCP]. */
typedef enum qs_mx_rule {
    QS_MX_RULE_TE = 0, /* E8M0 of amax * fl(1/fp8_max), rounded up (default) */
    QS_MX_RULE_OCP,    /* floor(log2 amax) - emax_elem; elements clamped */
    QS_MX_RULE_COUNT
} qs_mx_rule;

/* NVFP4 arithmetic variant [REC-NV-SCALE] [REC-NV-TORCHAO]. */
typedef enum qs_nv_variant {
    QS_NV_TE = 0,  /* TransformerEngine's reciprocal chain (default) */
    QS_NV_TORCHAO, /* torchao 0.18.0's chain with the 2^-6 block-scale floor */
    QS_NV_COUNT
} qs_nv_variant;

/* Which copies a quantization produces or a dequantization reads. */
typedef enum qs_direction {
    QS_DIR_ROW = 0, /* rowwise copy: the tensor as given, [M,K] */
    QS_DIR_COL,     /* columnwise copy: transposed [K,M] except for MXFP8 [REC-LAYOUT] */
    QS_DIR_COUNT
} qs_direction;

/* The configuration of one quantizer. Fill it with qs_recipe_config_default, then change
 * fields directly or by name with qs_recipe_config_set. */
typedef struct qs_recipe_config {
    qs_recipe_kind kind;
    qs_tensor_role role;
    int rowwise;    /* produce the rowwise copy (default 1) */
    int columnwise; /* produce the columnwise copy (default 1) */
    /* delayed, current, block */
    qs_fp8_format format; /* HYBRID by default; mxfp8 uses elem instead */
    /* delayed [REC-DS-*] */
    int64_t history_len; /* L, default 1024 */
    qs_amax_algo algo;   /* default max */
    int margin;          /* m, default 0 */
    qs_ds_roll roll;     /* default fused */
    /* current, block [REC-CS-SCALE] [REC-BLK-SCALE]; pow2 also rowwise [REC-AX-POW2] */
    float eps; /* amax floor, default 0 */
    int pow2;  /* current: default 0; block, rowwise, rowwise_with_gw_hp: default 1 */
    /* mxfp8 [REC-MX-*] */
    qs_dtype mx_elem;   /* QS_E4M3 (default) or QS_E5M2 */
    qs_mx_rule mx_rule; /* default te */
    /* block and nvfp4: 2-D tiles (128x128 / 16x16); default 1 for QS_ROLE_WEIGHT */
    int tile_2d;
    /* nvfp4 [REC-NV-*] */
    qs_nv_variant nv_variant; /* default te */
    int rht;                  /* Hadamard transform of the columnwise copy; default per role */
    int sr;                   /* stochastic rounding; default 1 for gradient roles */
    uint64_t seed, offset;    /* Philox stream of the stochastic rounding bits [REC-NV-SR] */
} qs_recipe_config;

/* The per-tensor state of a delayed-scaling quantizer [REC-DS-STATE]. */
typedef struct qs_delayed_state {
    float scale;     /* multiplies x before the FP8 cast; 1 at the first step */
    float scale_inv; /* 1/scale rounded to nearest; 1 at the first step */
    int64_t len;     /* L */
    float *history;  /* L entries; history[0] is the current step's slot */
} qs_delayed_state;

typedef struct qs_quantizer {
    qs_recipe_config cfg;
    qs_delayed_state ds; /* used by QS_RECIPE_DELAYED only */
    /* Given tensor amaxes (spec/distributed.md [DIST-GIVEN-AMAX]): when amax_given is
     * nonzero, current scaling uses given_amax[QS_DIR_ROW] and NVFP4 uses given_amax[d] for
     * copy d in place of the amaxes they would measure (the reduced amaxes of a group, or
     * those a replay recorded). Other recipes ignore them. qs_quantizer_init clears them. */
    int amax_given;
    float given_amax[QS_DIR_COUNT];
} qs_quantizer;

/* The result of a quantization [REC-LAYOUT]. Scales are decode multipliers throughout:
 * tensorwise FP32 scale_inv [1]; mxfp8 E8M0 codes; block FP32 scale_inv per block; nvfp4
 * E4M3 block decode scales; rowwise FP32 scale_inv [rows of the copy, 1] (the weight's
 * columnwise copy under rowwise_with_gw_hp: tensorwise [1]). Tensors of a direction not produced
 * have dtype INVALID. */
typedef struct qs_quantized {
    qs_recipe_config cfg; /* the configuration that produced it */
    qs_dtype elem;        /* element code dtype: E4M3, E5M2 or E2M1 */
    int64_t rows, cols;   /* M, K of the input */
    qs_tensor data[QS_DIR_COUNT];
    qs_tensor scale[QS_DIR_COUNT];
    float amax[QS_DIR_COUNT]; /* tensorwise and nvfp4 global amax (col: post-RHT) */
    /* tensorwise: the scale used and its inverse; nvfp4: S_enc and S_dec per direction
     * (te) or the per-tensor scale amax/2688 in global_dec (torchao); rowwise: 0, except
     * the tensorwise copy of rowwise_with_gw_hp, which records as tensorwise ones do */
    float global_enc[QS_DIR_COUNT];
    float global_dec[QS_DIR_COUNT];
} qs_quantized;

/* Names of the enums ("delayed", "input", "hybrid", "max", "fused", "te", "row"), and
 * their parsers returning -1 when the name is unknown. */
const char *qs_recipe_kind_name(qs_recipe_kind k);
int qs_recipe_kind_from_name(const char *name);
const char *qs_tensor_role_name(qs_tensor_role r);
int qs_tensor_role_from_name(const char *name);
const char *qs_ds_roll_name(qs_ds_roll r);
int qs_ds_roll_from_name(const char *name);
const char *qs_mx_rule_name(qs_mx_rule r);
int qs_mx_rule_from_name(const char *name);
const char *qs_nv_variant_name(qs_nv_variant v);
int qs_nv_variant_from_name(const char *name);

/* Fills cfg with the defaults of spec/recipes.md for kind and role [REC-DEFAULTS]. */
qs_status qs_recipe_config_default(qs_ctx *ctx, qs_recipe_config *cfg, qs_recipe_kind kind,
                                   qs_tensor_role role);
/* Sets one option by name ("algo", "margin", "history", "roll", "format", "eps", "pow2",
 * "elem", "rule", "tile", "variant", "rht", "sr", "seed", "offset", "role", "rowwise",
 * "columnwise"); QS_ERR_INVALID_ARG naming the key or value when either is bad, or when the
 * option does not belong to cfg->kind. "role" resets the role-dependent defaults. */
qs_status qs_recipe_config_set(qs_ctx *ctx, qs_recipe_config *cfg, const char *key,
                               const char *value);
/* Checks a configuration for consistency (ranges, options valid for the kind). */
qs_status qs_recipe_config_check(qs_ctx *ctx, const qs_recipe_config *cfg);
/* The element format a configuration encodes to [REC-DS-HYBRID] [REC-MX-ELEM]. */
qs_dtype qs_recipe_elem_dtype(const qs_recipe_config *cfg);

/* Initializes q from cfg (copied); delayed scaling allocates its history and starts from
 * scale 1, scale_inv 1, history all 0 [REC-DS-STATE]. */
qs_status qs_quantizer_init(qs_ctx *ctx, qs_quantizer *q, const qs_recipe_config *cfg);
/* Frees what qs_quantizer_init allocated; accepts NULL and freed quantizers. */
void qs_quantizer_free(qs_quantizer *q);

/* Quantizes x (2-D, BF16/FP16/FP32, both extents >= 1) into out (allocated here; free it
 * with qs_quantized_free). Delayed scaling uses the current state's scale and records the
 * amax of x into history[0] [REC-DS-RECORD]; other recipes leave q unchanged. Returns
 * QS_ERR_DTYPE / QS_ERR_SHAPE / QS_ERR_INVALID_ARG naming x or the option on bad input. */
qs_status qs_quantize(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x, qs_quantized *out);
/* Dequantizes direction dir of qz to FP32 of shape [M,K] (the input's orientation, also for
 * a transposed columnwise copy) [REC-DEQ-*]; QS_ERR_INVALID_ARG if dir was not produced. */
qs_status qs_dequantize(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir, qs_tensor *y);
/* Frees the tensors of a quantization; accepts NULL and freed results. */
void qs_quantized_free(qs_quantized *qz);

/* Records amax into the current history slot as a quantization does [REC-DS-RECORD]:
 * history[0] becomes the larger of itself and amax (a NaN in history[0] stays). For a
 * backend's amax, so the kit keeps the state the reference would. */
qs_status qs_delayed_record(qs_ctx *ctx, qs_quantizer *q, float amax);
/* Delayed scaling calibration: history[0] = amax of x with NaN propagating (an overwrite,
 * not a max); no roll, no scale change [REC-DS-CALIB]. */
qs_status qs_delayed_calibrate(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x);
/* The explicit delayed-scaling update: roll per cfg.roll, amax per cfg.algo, new scale and
 * scale_inv [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED] [REC-DS-SCALE]. */
qs_status qs_delayed_update(qs_ctx *ctx, qs_quantizer *q);

/* amax of a 2-D or any-rank BF16/FP16/FP32 tensor: max |x| from 0, NaN ignored, Inf kept
 * [REC-AMAX]. */
qs_status qs_tensor_amax(qs_ctx *ctx, const qs_tensor *x, float *amax);
/* The tensorwise scale rule of current scaling, exposed for block scaling and tests
 * [REC-CS-SCALE]: eps floor, 0/Inf/NaN amax -> 1, fp8_max/amax, Inf -> value_for_inf, pow2. */
float qs_scale_from_amax(float amax, float fp8_max, float eps, int pow2, float value_for_inf);
/* The scale rule of torchao's axiswise and tensorwise casts, exposed for tests
 * [REC-AX-SCALE] [REC-AX-POW2]: fl32(fp8_max / max(amax, 1e-12)) computed in binary64
 * (a NaN amax gives NaN, an infinite one 0), then, with pow2, the power of two at or below. */
float qs_axiswise_scale_from_amax(float amax, float fp8_max, int pow2);

/* The logical layout of one copy [REC-LAYOUT]: its data and scale dtypes and shapes (a
 * tensorwise scale is 1-D [1]: scale_ndim 1, scale_shape[1] unused). */
typedef struct qs_copy_layout {
    qs_dtype data_dtype;
    int64_t data_shape[2];
    qs_dtype scale_dtype;
    int scale_ndim;
    int64_t scale_shape[2];
} qs_copy_layout;

/* The layout cfg gives direction dir of an [rows, cols] input; QS_ERR_INVALID_ARG for a bad
 * configuration or extent. */
qs_status qs_recipe_layout(qs_ctx *ctx, const qs_recipe_config *cfg, int64_t rows, int64_t cols,
                           qs_direction dir, qs_copy_layout *out);
/* Allocates out for the copies cfg asks for (cfg->rowwise, cfg->columnwise) of a rows x cols
 * input, with the dtypes and shapes of qs_recipe_layout, and sets its header (cfg, elem, rows,
 * cols); the codes and scales are zero. Errors as qs_recipe_layout, QS_ERR_NOMEM; on an error
 * out holds nothing. */
qs_status qs_quantized_alloc(qs_ctx *ctx, const qs_recipe_config *cfg, int64_t rows, int64_t cols,
                             qs_quantized *out);
/* Checks that every copy qz holds has the dtype and shape of qs_recipe_layout (for results
 * assembled from files); QS_ERR_DTYPE / QS_ERR_SHAPE naming the tensor otherwise. */
qs_status qs_quantized_check(qs_ctx *ctx, const qs_quantized *qz);

/* TE's padded device layout of an MXFP8 or NVFP4 scale tensor [REC-MX-LAYOUT]
 * [REC-NV-LAYOUT]: rowwise rows padded to a multiple of 128 and scale columns to 4,
 * columnwise (MXFP8) scale rows to 4 and columns to 128; padding bytes are 0. */
qs_status qs_scale_padded(qs_ctx *ctx, const qs_quantized *qz, qs_direction dir, qs_tensor *padded);

#ifdef __cplusplus
}
#endif
#endif
