/* cli.h: the qspec command-line tool's subcommand table and shared helpers.
 * Each subcommand is a function taking (argc, argv) after the subcommand name and
 * returning the process exit status: 0 success, 1 some check failed, 2 bad usage or input. */
#ifndef QSPEC_KIT_CLI_H
#define QSPEC_KIT_CLI_H

#include <stdio.h>

enum { QSK_EXIT_OK = 0, QSK_EXIT_FAIL = 1, QSK_EXIT_USAGE = 2 };

typedef struct qsk_command {
    const char *name;
    const char *summary; /* one line for `qspec help` */
    const char *usage;   /* the full help text for `qspec help NAME` */
    int (*run)(int argc, char **argv);
} qsk_command;

/* Prints "qspec CMD: message" to stderr as one line and returns QSK_EXIT_USAGE. */
int qsk_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Whether arg is "-h" or "--help". */
int qsk_is_help(const char *arg);
/* Prints a command's help text to fp. */
void qsk_print_help(FILE *fp, const qsk_command *cmd);
/* Looks a command up by name; NULL if unknown. */
const qsk_command *qsk_find_command(const char *name);

/* The subcommands, one file each (cmd_NAME.c). */
extern const qsk_command qsk_cmd_version;
extern const qsk_command qsk_cmd_help;
extern const qsk_command qsk_cmd_backends;
extern const qsk_command qsk_cmd_quantize;
extern const qsk_command qsk_cmd_dequantize;
extern const qsk_command qsk_cmd_cast;
extern const qsk_command qsk_cmd_run;
extern const qsk_command qsk_cmd_list;
extern const qsk_command qsk_cmd_show;
extern const qsk_command qsk_cmd_coverage;
extern const qsk_command qsk_cmd_gen;
extern const qsk_command qsk_cmd_verify;
extern const qsk_command qsk_cmd_verify_package;

#endif
