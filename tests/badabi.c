/* badabi.c: a plugin that exports the entry point but claims ABI version 99, so the kit's
 * rejection of a wrong ABI can be tested. */
#include <string.h>

#include "qspec/backend.h"

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

static qs_backend table = {
    .abi_version = 99u, .struct_size = sizeof(qs_backend), .name = "badabi", .version = "0"};

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    (void)abi_version;
    return &table;
}
