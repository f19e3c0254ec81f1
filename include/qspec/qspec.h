/* qspec.h: the umbrella header of libqspec, the qspec reference. */
#ifndef QSPEC_QSPEC_H
#define QSPEC_QSPEC_H

#include "status.h"
#include "tensor.h"
#include "format.h"
#include "mathf.h"
#include "random.h"
#include "recipe.h"
#include "backend.h"
#include "gemm.h"
#include "attention.h"
#include "scope.h"
#include "checkpoint.h"
#include "program.h"
#include "kernels.h"
#include "distributed.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library version, "MAJOR.MINOR.PATCH". */
const char *qs_version(void);

#ifdef __cplusplus
}
#endif
#endif
