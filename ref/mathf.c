/* mathf.c: placeholder, being written. */
#include "qspec/qspec.h"
typedef int qsi_mathf_placeholder;
