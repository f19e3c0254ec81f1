/* main.c: the qspec command-line tool — git-style subcommands over the reference and
 * the conformance kit. `qspec help` lists them; `qspec help CMD` and `CMD --help` show one. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buildtree.h"
#include "cli.h"
#include "fileio.h"
#include "qspec/qspec.h"

/* Appended to a line at a time; kept out of clang-format so that an addition does not
 * reflow the lines above it. */
/* clang-format off */
static const qsk_command *const commands[] = {
    &qsk_cmd_help, &qsk_cmd_version, &qsk_cmd_backends, &qsk_cmd_cast,     &qsk_cmd_run,
    &qsk_cmd_list, &qsk_cmd_show,    &qsk_cmd_coverage, &qsk_cmd_quantize, &qsk_cmd_dequantize,
    &qsk_cmd_gen,  &qsk_cmd_verify,  &qsk_cmd_verify_package,
};
/* clang-format on */

int qsk_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "qspec%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return QSK_EXIT_USAGE;
}

int qsk_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

void qsk_print_help(FILE *fp, const qsk_command *cmd)
{
    fputs(cmd->usage, fp);
}

const qsk_command *qsk_find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static void print_overview(FILE *fp)
{
    fprintf(fp, "usage: qspec [--version] [--help] COMMAND [ARGS]\n\n"
                "qspec is an executable specification of low-precision (FP8/FP4) training\n"
                "semantics and a conformance kit that checks backends against it.\n\n"
                "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-15s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(fp, "\nRun 'qspec help COMMAND' for a command's options. Exit status: 0 success,\n"
                "1 a check failed, 2 bad usage or input.\n");
}

static int help_run(int argc, char **argv)
{
    if (argc == 0) {
        print_overview(stdout);
        return QSK_EXIT_OK;
    }
    if (argc > 1)
        return qsk_usage_error("help", "takes at most one command name, got %d arguments", argc);
    if (qsk_is_help(argv[0])) {
        qsk_print_help(stdout, &qsk_cmd_help);
        return QSK_EXIT_OK;
    }
    const qsk_command *c = qsk_find_command(argv[0]);
    if (!c)
        return qsk_usage_error("help", "unknown command '%s' (see 'qspec help')", argv[0]);
    qsk_print_help(stdout, c);
    return QSK_EXIT_OK;
}

const qsk_command qsk_cmd_help = {
    "help", "show the commands, or one command's help",
    "usage: qspec help [COMMAND]\n\n"
    "Without COMMAND, lists the commands. With it, prints that command's help.\n",
    help_run};

static int version_run(int argc, char **argv)
{
    if (argc == 1 && qsk_is_help(argv[0])) {
        qsk_print_help(stdout, &qsk_cmd_version);
        return QSK_EXIT_OK;
    }
    if (argc != 0)
        return qsk_usage_error("version", "takes no arguments, got '%s'", argv[0]);
    printf("qspec %s (backend ABI %u)\n", qs_version(), QS_BACKEND_ABI_VERSION);
    return QSK_EXIT_OK;
}

const qsk_command qsk_cmd_version = {
    "version", "print the kit version and the backend ABI version",
    "usage: qspec version\n\nPrints the qspec version and the backend plugin ABI version.\n",
    version_run};

static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stderr);
        return QSK_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (qsk_is_help(name)) {
        print_overview(stdout);
        return QSK_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0)
        return version_run(0, NULL);
    if (name[0] == '-')
        return qsk_usage_error(NULL, "unknown option '%s' (see 'qspec help')", name);
    const qsk_command *c = qsk_find_command(name);
    if (!c)
        return qsk_usage_error(NULL, "unknown command '%s' (see 'qspec help')", name);
    /* [CASE-BUILD-TREE] a person at a terminal is told which suite a build tree gives */
    int tree_suite = qsk_build_tree_defaults();
    static const qsk_command *const suite_readers[] = {&qsk_cmd_run, &qsk_cmd_list, &qsk_cmd_show,
                                                       &qsk_cmd_coverage, &qsk_cmd_verify_package};
    for (size_t i = 0; tree_suite && i < sizeof suite_readers / sizeof suite_readers[0]; i++)
        if (c == suite_readers[i] && isatty(STDERR_FILENO))
            fprintf(stderr,
                    "qspec: run from the build tree %s: by default the cases of %s and the "
                    "plugins of %s\n",
                    qsk_build_tree(), qsk_build_tree_cases(), qsk_build_tree_plugins());
    return c->run(argc - 2, argv + 2);
}

/* A command's output that did not reach stdout (a full disk, a closed pipe) is bad output:
 * exit 2 with the reason, whatever the command returned. */
int main(int argc, char **argv)
{
    int rc = run_command(argc, argv);
    return qsk_stdout_close() != 0 ? QSK_EXIT_USAGE : rc;
}
