/* format.c: placeholder, being written. */
#include "qspec/qspec.h"
typedef int qsi_format_placeholder;
