/* fuzz_cases.c: libFuzzer target for the case-file loader and the program validator: any
 * bytes are parsed as a case file and every case is checked against its op. A bad input
 * must give an error with a message, never a crash, a leak or undefined behaviour. */
#include <stdint.h>
#include <stdlib.h>

#include "cases.h"
#include "ops.h"
#include "suite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    qs_status st =
        qsk_case_file_parse(ctx, "fuzz.yaml", (const char *)data, size, qsk_rule_defined, NULL, &f);
    for (size_t i = 0; st == QS_OK && i < f.ncases; i++)
        st = qsk_case_check(ctx, &f.cases[i]);
    if (st != QS_OK && qs_ctx_errmsg(ctx)[0] == '\0')
        abort(); /* every rejection names its reason */
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    return 0;
}
