/* cmd_backends.c: `qspec backends` — list the built-in reference and every plugin found,
 * loading each to show its ABI version, capabilities and whether it is usable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plugin.h"
#include "qspec/qspec.h"

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
static int show_plugin(qs_ctx *ctx, const char *path, int list_errors)
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
