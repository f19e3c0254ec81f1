/* version.c: the library version string, from configure. */
#include "config.h"
#include "qspec/qspec.h"

const char *qs_version(void)
{
    return PACKAGE_VERSION;
}
