/* oldabi.c: a plugin built as against the backend header before the gemm slot was
 * appended: its table ends after `dequantize` and struct_size says so. Its caps claim the
 * gemm family, and the word after its table is a function that aborts: a kit that read a
 * slot the table does not hold would call it. The kit must load the plugin, use its other
 * slots, and report gemm cases as not supported [CASE-BACKEND-UNSUPPORTED]. */
#include <stdlib.h>
#include <string.h>

#include "qspec/backend.h"

typedef struct old_table {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    const char *version;
    uint64_t caps;
    qs_status (*open)(void **state, char *why, size_t why_len);
    void (*close)(void *state);
    const char *(*device)(void *state);
    qs_status (*cast)(void *state, const qs_cast_args *args);
    qs_status (*quantize)(void *state, const qs_quantize_args *args);
    qs_status (*dequantize)(void *state, const qs_dequantize_args *args);
} old_table;

static qs_status old_open(void **state, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    *state = NULL;
    return QS_OK;
}

static void old_close(void *state)
{
    (void)state;
}

static qs_status poison_gemm(void *state, qs_gemm_args *args)
{
    (void)state;
    (void)args;
    abort();
}

static const struct {
    old_table t;
    qs_status (*after)(void *state, qs_gemm_args *args);
} image = {{QS_BACKEND_ABI_VERSION, (uint32_t)sizeof(old_table), "oldabi", "0",
            QS_CAP_CAST | QS_CAP_GEMM_TENSOR, old_open, old_close, NULL, NULL, NULL, NULL},
           poison_gemm};

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    if (abi_version != QS_BACKEND_ABI_VERSION)
        return NULL;
    const void *p = &image.t;
    const qs_backend *b;
    memcpy(&b, &p, sizeof b);
    return b;
}
