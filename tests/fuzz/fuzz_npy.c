/* fuzz_npy.c: libFuzzer target for the .npy reader: any bytes, written to a file, are read
 * back; a bad file must give an error with a message naming it, never a crash or a leak. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/qspec-fuzz-%ld.npy", (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return 0;
    if (size)
        fwrite(data, 1, size, fp);
    fclose(fp);
    qs_ctx *ctx = qs_ctx_new();
    qs_tensor t;
    qs_status st = qsk_npy_read(ctx, path, &t);
    if (st == QS_OK)
        qs_tensor_free(&t);
    else if (strstr(qs_ctx_errmsg(ctx), path) == NULL)
        abort(); /* every rejection names the file */
    qs_ctx_free(ctx);
    remove(path);
    return 0;
}
