/* status.c: status names and descriptions, and the per-context error message.
 * A context records the last error; library functions record their reason with
 * qs_ctx_error and return its status, so a caller can print one clear line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "qspec/status.h"

static const struct {
    qs_status status;
    const char *name;
    const char *text;
} status_table[] = {
    {QS_OK, "QS_OK", "success"},
    {QS_ERR_INVALID_ARG, "QS_ERR_INVALID_ARG", "invalid argument"},
    {QS_ERR_NOMEM, "QS_ERR_NOMEM", "out of memory"},
    {QS_ERR_IO, "QS_ERR_IO", "input/output error"},
    {QS_ERR_FORMAT, "QS_ERR_FORMAT", "malformed input"},
    {QS_ERR_UNSUPPORTED, "QS_ERR_UNSUPPORTED", "not supported"},
    {QS_ERR_SHAPE, "QS_ERR_SHAPE", "impossible or mismatched shape"},
    {QS_ERR_DTYPE, "QS_ERR_DTYPE", "wrong dtype"},
    {QS_ERR_STATE, "QS_ERR_STATE", "invalid in the current state"},
    {QS_ERR_ABI, "QS_ERR_ABI", "backend ABI mismatch"},
    {QS_ERR_INJECTED, "QS_ERR_INJECTED", "injected failure"},
    {QS_ERR_INTERNAL, "QS_ERR_INTERNAL", "internal error"},
};

const char *qs_status_name(qs_status s)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(status_table); i++)
        if (status_table[i].status == s)
            return status_table[i].name;
    return "QS_UNKNOWN";
}

const char *qs_status_str(qs_status s)
{
    for (size_t i = 0; i < QSI_ARRAY_LEN(status_table); i++)
        if (status_table[i].status == s)
            return status_table[i].text;
    return "unknown status";
}

qs_ctx *qs_ctx_new(void)
{
    qs_ctx *ctx = calloc(1, sizeof *ctx);
    return ctx;
}

void qs_ctx_free(qs_ctx *ctx)
{
    free(ctx);
}

const char *qs_ctx_errmsg(const qs_ctx *ctx)
{
    return ctx ? ctx->errmsg : "";
}

qs_status qs_ctx_errstatus(const qs_ctx *ctx)
{
    return ctx ? ctx->last_status : QS_OK;
}

void qs_ctx_clear_error(qs_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->last_status = QS_OK;
    ctx->errmsg[0] = '\0';
}

qs_status qs_ctx_error(qs_ctx *ctx, qs_status s, const char *fmt, ...)
{
    if (!ctx)
        return s;
    /* formatted aside first: an argument may be the context's own message */
    char msg[sizeof ctx->errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(ctx->errmsg, msg, sizeof msg);
    ctx->last_status = s;
    return s;
}
