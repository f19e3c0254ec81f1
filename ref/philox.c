/* philox.c: placeholder, being written. */
#include "qspec/qspec.h"
typedef int qsi_philox_placeholder;
