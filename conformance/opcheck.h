/* opcheck.h: helpers the ops use to check a case: allowed parameter keys, parameter values
 * from a list, required inputs with allowed dtypes, and the outputs an op produces. Every
 * failure is a file:line:col message with status QS_ERR_FORMAT. */
#ifndef QSPEC_KIT_OPCHECK_H
#define QSPEC_KIT_OPCHECK_H

#include "cases.h"

qs_status qsk_check_param_keys(qs_ctx *ctx, const qsk_case *c, const char *const *allowed);
/* The index in names of parameter key's value (def when absent); -1 after an error. */
int qsk_param_choice(qs_ctx *ctx, const qsk_case *c, const char *key, const char *const *names,
                     int def);
/* An unsigned integer parameter (def when absent); returns QS_OK or an error. */
qs_status qsk_param_u64(qs_ctx *ctx, const qsk_case *c, const char *key, uint64_t def, uint64_t *v);
/* Checks that exactly the named inputs exist (NULL-terminated), each with a dtype from
 * dtypes (QS_DTYPE_INVALID-terminated) and ndim in [min_ndim, max_ndim]. */
qs_status qsk_check_inputs(qs_ctx *ctx, const qsk_case *c, const char *const *names,
                           const qs_dtype *dtypes, int min_ndim, int max_ndim);
/* Checks that every output of the case is one the op produces (NULL-terminated). */
qs_status qsk_check_outputs(qs_ctx *ctx, const qsk_case *c, const char *const *produced);

#endif
