/* fuzz_cli.c: libFuzzer target for the CLI's argument parsing: the input, split at newlines,
 * is an argument vector for `qspec help`, `version` or `cast` (commands that write no
 * files); usage errors must exit through status 2, never crash. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qsk_cli_main(int argc, char **argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
        return 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    char *args[66];
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    int argc = 0;
    args[argc++] = "qspec";
    char *save = NULL;
    for (char *tok = strtok_r(buf, "\n", &save); tok && argc < 65;
         tok = strtok_r(NULL, "\n", &save))
        args[argc++] = tok;
    args[argc] = NULL;
    if (argc >= 2 && (strcmp(args[1], "help") == 0 || strcmp(args[1], "version") == 0 ||
                      strcmp(args[1], "cast") == 0)) {
        int rc = qsk_cli_main(argc, args);
        if (rc < 0 || rc > 2)
            abort();
    }
    free(buf);
    return 0;
}
