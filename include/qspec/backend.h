/* backend.h: the backend plugin ABI, version 1.
 * A backend is a shared object exporting one C function, QS_BACKEND_ENTRY_NAME, that
 * returns a qs_backend table: the ABI version, a name, capability bits and kernel slots.
 * A slot that is NULL, or a capability bit that is clear, makes every case that needs it
 * "not supported"; the kit never falls back to the reference behind a backend's back.
 * This header depends only on status.h, tensor.h, format.h and recipe.h (for their types;
 * a plugin never links libqspec), so a vendor builds a plugin against the installed
 * headers alone. */
#ifndef QSPEC_BACKEND_H
#define QSPEC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
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
} qs_quantize_args;

/* A dequantization request: copy dir of in to FP32 y ([rows, cols], allocated by the kit). */
typedef struct qs_dequantize_args {
    const qs_quantized *in;
    qs_direction dir;
    qs_tensor *y;
} qs_dequantize_args;

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
} qs_backend;

/* The type of the exported entry point. It returns the table for the ABI the caller
 * asks for, or NULL when the plugin cannot provide that version. */
typedef const qs_backend *(*qs_backend_entry_fn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif
#endif
