/* status.h: qs_status codes and per-context error messages.
 * Every fallible library call returns a qs_status; QS_OK is zero and every error is
 * negative. A qs_ctx carries the message of the last error, naming the offending argument.
 * Nothing in libqspec aborts, exits or prints on bad input. */
#ifndef QSPEC_STATUS_H
#define QSPEC_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qs_status {
    QS_OK = 0,
    QS_ERR_INVALID_ARG = -1, /* an argument is out of its domain (null, bad enum, bad value) */
    QS_ERR_NOMEM = -2,       /* an allocation failed */
    QS_ERR_IO = -3,          /* a file could not be opened, read, written or renamed */
    QS_ERR_FORMAT = -4,      /* a file's content is malformed (npy header, state file) */
    QS_ERR_UNSUPPORTED = -5, /* valid, but not supported here (a dtype, a capability) */
    QS_ERR_SHAPE = -6,       /* shapes are impossible or do not agree */
    QS_ERR_DTYPE = -7,       /* a tensor has a dtype the operation cannot take */
    QS_ERR_STATE = -8,       /* the call is not valid in the current state (unmatched exit) */
    QS_ERR_ABI = -9,         /* a backend plugin has a wrong ABI version or entry point */
    QS_ERR_INJECTED = -10,   /* a failure injected by the test hook */
    QS_ERR_INTERNAL = -11    /* a broken invariant: a bug in qspec */
} qs_status;

/* The symbolic name of a status ("QS_ERR_SHAPE"); "QS_UNKNOWN" for other values. */
const char *qs_status_name(qs_status s);
/* A one-line English description of a status; never NULL. */
const char *qs_status_str(qs_status s);

/* A context: owns the last error message and, in later API, the scoping state.
 * Two contexts never interact; one context is used by one thread at a time. */
typedef struct qs_ctx qs_ctx;

/* Creates a context; NULL when out of memory. */
qs_ctx *qs_ctx_new(void);
/* Frees a context; NULL is accepted. */
void qs_ctx_free(qs_ctx *ctx);
/* The message of the last error recorded in ctx ("" when none); valid until the next call. */
const char *qs_ctx_errmsg(const qs_ctx *ctx);
/* The status of the last error recorded in ctx (QS_OK when none). */
qs_status qs_ctx_errstatus(const qs_ctx *ctx);
/* Clears the recorded error. */
void qs_ctx_clear_error(qs_ctx *ctx);
/* Records an error (printf-style message) in ctx and returns s; ctx may be NULL. */
qs_status qs_ctx_error(qs_ctx *ctx, qs_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
