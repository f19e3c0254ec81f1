/* npy.c: placeholder, being written. */
#include "npy.h"
typedef int qsk_npy_placeholder;
