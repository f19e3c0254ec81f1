/* internal.h: definitions shared by the reference modules and the kit, not part of the
 * public API. Internal names carry the qsi_ prefix. */
#ifndef QSPEC_REF_INTERNAL_H
#define QSPEC_REF_INTERNAL_H

#include "qspec/status.h"

#define QSI_ERRMSG_LEN 512

struct qs_ctx {
    qs_status last_status;
    char errmsg[QSI_ERRMSG_LEN];
};

#define QSI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
