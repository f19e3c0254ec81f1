/* cmd_backends.c: `qspec backends` — list the built-in reference and every plugin found,
 * loading each to show its ABI version, capabilities and whether it is usable. Each plugin
 * is probed in a child process [CASE-ISOLATE], so one that crashes or hangs in its entry
 * point or in open is listed with the reason, and the others still are. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buildtree.h"
#include "cli.h"
#include "plugin.h"
#include "qspec/qspec.h"
#include "worker.h"

#define PROBE_TIMEOUT 60 /* seconds a plugin may take to load and open */

static void print_caps(uint64_t caps)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {QS_CAP_CAST, "cast"},
        {QS_CAP_QUANT_DELAYED, "delayed"},
        {QS_CAP_QUANT_CURRENT, "current"},
        {QS_CAP_QUANT_MXFP8, "mxfp8"},
        {QS_CAP_QUANT_BLOCK, "block"},
        {QS_CAP_QUANT_NVFP4, "nvfp4"},
        {QS_CAP_QUANT_ROWWISE, "rowwise"},
        {QS_CAP_DEQUANT, "dequantize"},
        {QS_CAP_GEMM_TENSOR, "gemm-tensor"},
        {QS_CAP_GEMM_BLOCK, "gemm-block"},
        {QS_CAP_GEMM_MX, "gemm-mx"},
        {QS_CAP_GEMM_NVFP4, "gemm-nvfp4"},
        {QS_CAP_DIST, "dist"},
    };
    int any = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & names[i].bit) {
            printf("%s%s", any ? "," : "", names[i].name);
            any = 1;
        }
    if (!any)
        printf("none");
}

/* Loads one plugin and prints its lines; returns 0 if it loaded (usable or not). When it
 * does not load, the error is printed under the path only if list_errors is set (a listing);
 * otherwise the caller reports it. */
static int show_plugin_here(qs_ctx *ctx, const char *path, int list_errors)
{
    qsk_plugin p;
    if (qsk_plugin_load(ctx, path, &p) != QS_OK) {
        if (list_errors)
            printf("%-8s %s\n         error: %s\n", "?", path, qs_ctx_errmsg(ctx));
        return 1;
    }
    printf("%-8s %s\n", p.table->name, path);
    printf("         version %s, ABI %u, capabilities ", p.table->version ? p.table->version : "?",
           p.table->abi_version);
    print_caps(p.table->caps);
    printf("\n");
    const char *dev = p.usable && p.table->device ? p.table->device(p.state) : NULL;
    if (p.usable)
        printf("         usable: %s\n", dev && dev[0] ? dev : "yes");
    else
        printf("         not usable: %s\n", p.why);
    qsk_plugin_unload(&p);
    return 0;
}

/* Reads fd to its end or until the deadline; 0 at the end, 1 at the deadline. */
static int read_until(int fd, time_t deadline, char **buf, size_t *len)
{
    size_t cap = 0;
    for (;;) {
        time_t left = deadline - time(NULL);
        if (left <= 0)
            return 1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, (int)left * 1000);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            return 1;
        if (*len + 4096 > cap) {
            char *g = realloc(*buf, cap = cap * 2 + 8192);
            if (!g)
                return 0;
            *buf = g;
        }
        ssize_t k = read(fd, *buf + *len, cap - *len - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        *len += (size_t)k;
        (*buf)[*len] = '\0';
    }
}

/* show_plugin_here in a child process whose output comes back through a pipe: a plugin that
 * crashes or hangs while loading or opening is shown with the reason. With list_errors
 * unset, a plugin that does not load leaves its reason in ctx's message. */
static int show_plugin(qs_ctx *ctx, const char *path, int list_errors)
{
    int fds[2];
    if (pipe(fds) != 0)
        return show_plugin_here(ctx, path, list_errors);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(3);
        int rc = show_plugin_here(ctx, path, list_errors);
        if (rc && !list_errors)
            fputs(qs_ctx_errmsg(ctx), stdout);
        fflush(stdout);
        _exit(rc);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return show_plugin_here(ctx, path, list_errors);
    }
    char *buf = NULL, how[300];
    size_t len = 0;
    int late = read_until(fds[0], time(NULL) + PROBE_TIMEOUT, &buf, &len), status = 0;
    if (late)
        kill(pid, SIGKILL);
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = 1;
    if (late)
        snprintf(how, sizeof how,
                 "timed out after %d s loading or opening (probed in a child "
                 "process, killed)",
                 PROBE_TIMEOUT);
    else if (WIFEXITED(status) && WEXITSTATUS(status) <= 1)
        rc = WEXITSTATUS(status);
    else {
        char w[160];
        qsk_wait_text(status, w, sizeof w);
        snprintf(how, sizeof how, "%s while loading or opening (probed in a child process)", w);
    }
    if (rc == 0 || (rc == 1 && !late && WIFEXITED(status) && list_errors))
        fputs(buf ? buf : "", stdout);
    else if (rc == 1 && !late && WIFEXITED(status))
        qs_ctx_error(ctx, QS_ERR_IO, "%s", buf ? buf : "cannot load");
    else if (list_errors)
        printf("%-8s %s\n         error: the plugin %s\n", "?", path, how);
    else
        qs_ctx_error(ctx, QS_ERR_IO, "backend %s: the plugin %s", path, how);
    free(buf);
    return rc;
}

static int backends_run(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 0; i < argc; i++) {
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_backends);
            return QSK_EXIT_OK;
        }
        if (argv[i][0] == '-')
            return qsk_usage_error("backends", "unknown option '%s'", argv[i]);
        if (only)
            return qsk_usage_error("backends", "takes at most one backend, got '%s' too", argv[i]);
        only = argv[i];
    }
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("backends", "out of memory");
    int rc = QSK_EXIT_OK;
    if (only && strcmp(only, "ref") != 0) {
        char *path;
        if (qsk_plugin_resolve(ctx, only, &path) != QS_OK) {
            rc = qsk_usage_error("backends", "%s", qs_ctx_errmsg(ctx));
        } else {
            rc = show_plugin(ctx, path, 0) ? qsk_usage_error("backends", "%s", qs_ctx_errmsg(ctx))
                                           : QSK_EXIT_OK;
            free(path);
        }
        qs_ctx_free(ctx);
        return rc;
    }
    printf("%-8s %s\n         version %s, ABI %u, capabilities all\n         usable: yes\n", "ref",
           "(built in)", qs_version(), QS_BACKEND_ABI_VERSION);
    if (!only) {
        char **paths = NULL;
        size_t n = 0;
        if (qsk_plugin_discover(ctx, &paths, &n) == QS_OK) {
            for (size_t i = 0; i < n; i++) {
                show_plugin(ctx, paths[i], 1);
                free(paths[i]);
            }
            free(paths);
        }
        printf("search path: %s\n", qsk_plugin_search_path());
        if (qsk_build_tree()) /* [CASE-BUILD-TREE] */
            printf("build tree: %s (its plugins, in %s, are on the search path)\n",
                   qsk_build_tree(), qsk_build_tree_plugins());
    }
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_backends = {
    "backends", "list the reference and the backend plugins found, and whether each is usable",
    "usage: qspec backends [BACKEND]\n\n"
    "Lists the built-in reference backend 'ref' and every plugin libqspec-NAME.so found\n"
    "in the directories of QSPEC_BACKEND_PATH (colon-separated) and the installed plugin\n"
    "directory. Each plugin is loaded: its name, version, ABI version and capabilities are\n"
    "shown, and whether it is usable, with the reason when it is not (wrong ABI, missing\n"
    "entry point, no GPU).\n\n"
    "BACKEND is 'ref', a short name (cuda) or a path to a shared object: show that one only.\n"
    "Exit status: 0, or 2 when the named backend cannot be found or loaded.\n",
    backends_run};
