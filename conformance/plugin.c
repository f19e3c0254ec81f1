/* plugin.c: resolving, loading and checking backend plugins.
 * A plugin is accepted only if it exports QS_BACKEND_ENTRY_NAME, that entry returns a
 * table for ABI QS_BACKEND_ABI_VERSION, and the table says the same version. The kit works
 * on a copy of the table of sizeof(qs_backend) bytes, zero beyond the plugin's struct_size,
 * so a slot appended after the plugin was built reads as NULL and is never read past the
 * end of the plugin's own table. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "plugin.h"

#ifndef QSPEC_PLUGINDIR
#define QSPEC_PLUGINDIR "/usr/local/lib/qspec"
#endif

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *qsk_plugin_search_path(void)
{
    static char buf[4096];
    const char *env = getenv("QSPEC_BACKEND_PATH");
    if (env && *env)
        snprintf(buf, sizeof buf, "%s:%s", env, QSPEC_PLUGINDIR);
    else
        snprintf(buf, sizeof buf, "%s", QSPEC_PLUGINDIR);
    return buf;
}

/* Calls fn(dir, arg) for each directory of the search path until fn returns nonzero. */
static int for_each_dir(int (*fn)(const char *dir, void *arg), void *arg)
{
    char *copy = qsk_strdup(qsk_plugin_search_path());
    if (!copy)
        return -1;
    int r = 0;
    char *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !r; d = strtok_r(NULL, ":", &save))
        r = fn(d, arg);
    free(copy);
    return r;
}

struct resolve_arg {
    const char *name;
    char *found;
};

static int resolve_in(const char *dir, void *argp)
{
    struct resolve_arg *a = argp;
    size_t n = strlen(dir) + strlen(a->name) + 32;
    char *p = malloc(n);
    if (!p)
        return -1;
    snprintf(p, n, "%s/libqspec-%s.so", dir, a->name);
    if (is_file(p)) {
        a->found = p;
        return 1;
    }
    free(p);
    return 0;
}

qs_status qsk_plugin_resolve(qs_ctx *ctx, const char *name, char **path)
{
    *path = NULL;
    if (strchr(name, '/')) {
        if (!is_file(name))
            return qs_ctx_error(ctx, QS_ERR_IO, "backend '%s': no such file", name);
        *path = qsk_strdup(name);
        return *path ? QS_OK : qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "backend '%s': a name may hold only a-z, 0-9, '_' and '-'", name);
    struct resolve_arg a = {name, NULL};
    if (for_each_dir(resolve_in, &a) < 0)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    if (!a.found)
        return qs_ctx_error(ctx, QS_ERR_IO, "unknown backend '%s': no libqspec-%s.so in %s", name,
                            name, qsk_plugin_search_path());
    *path = a.found;
    return QS_OK;
}

qs_status qsk_plugin_load(qs_ctx *ctx, const char *path, qsk_plugin *p)
{
    memset(p, 0, sizeof *p);
    p->path = qsk_strdup(path);
    if (!p->path)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    p->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_IO, "backend %s: cannot load: %s", path, dlerror());
        qsk_plugin_unload(p);
        return st;
    }
    void *sym = dlsym(p->handle, QS_BACKEND_ENTRY_NAME);
    if (!sym) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: missing entry point %s", path,
                                    QS_BACKEND_ENTRY_NAME);
        qsk_plugin_unload(p);
        return st;
    }
    qs_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object-to-function pointer, as POSIX allows */
    const qs_backend *t = entry(QS_BACKEND_ABI_VERSION);
    if (!t || t->abi_version != QS_BACKEND_ABI_VERSION) {
        qs_status st =
            qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: ABI version %u, but this kit needs %u", path,
                         t ? t->abi_version : 0u, QS_BACKEND_ABI_VERSION);
        qsk_plugin_unload(p);
        return st;
    }
    if (t->struct_size < QS_BACKEND_V1_MIN_SIZE || !t->name || !t->open || !t->close) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_ABI,
                                    "backend %s: table is incomplete (size %u, name, open, close)",
                                    path, t->struct_size);
        qsk_plugin_unload(p);
        return st;
    }
    if (strcmp(t->name, "ref") == 0 || t->name[0] == '\0') {
        qs_status st = qs_ctx_error(ctx, QS_ERR_ABI,
                                    "backend %s: calls itself '%s': a backend needs a name of its "
                                    "own ('ref' is the reference)",
                                    path, t->name);
        qsk_plugin_unload(p);
        return st;
    }
    qs_backend *copy = calloc(1, sizeof *copy);
    if (!copy) {
        qsk_plugin_unload(p);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    memcpy(copy, t, t->struct_size < sizeof *copy ? t->struct_size : sizeof *copy);
    p->table = copy;
    p->table_mem = copy;
    qs_status st = t->open(&p->state, p->why, sizeof p->why);
    if (st == QS_OK) {
        p->usable = 1;
    } else {
        p->state = NULL;
        if (!p->why[0])
            snprintf(p->why, sizeof p->why, "%s", qs_status_str(st));
    }
    return QS_OK;
}

void qsk_plugin_unload(qsk_plugin *p)
{
    if (p->table && p->usable && p->table->close)
        p->table->close(p->state);
    if (p->handle)
        dlclose(p->handle);
    free(p->table_mem);
    free(p->path);
    memset(p, 0, sizeof *p);
}

struct discover_arg {
    char **paths;
    size_t count;
    int oom;
};

static int discover_in(const char *dir, void *argp)
{
    struct discover_arg *a = argp;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 12 || strncmp(e->d_name, "libqspec-", 9) != 0 ||
            strcmp(e->d_name + len - 3, ".so") != 0)
            continue;
        size_t n = strlen(dir) + len + 2;
        char *p = malloc(n);
        char **grown = realloc(a->paths, (a->count + 1) * sizeof *grown);
        if (!p || !grown) {
            free(p);
            if (grown)
                a->paths = grown;
            a->oom = 1;
            break;
        }
        a->paths = grown;
        snprintf(p, n, "%s/%s", dir, e->d_name);
        a->paths[a->count++] = p;
    }
    closedir(d);
    return a->oom;
}

qs_status qsk_plugin_discover(qs_ctx *ctx, char ***paths, size_t *count)
{
    struct discover_arg a = {NULL, 0, 0};
    for_each_dir(discover_in, &a);
    if (a.oom) {
        for (size_t i = 0; i < a.count; i++)
            free(a.paths[i]);
        free(a.paths);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    *paths = a.paths;
    *count = a.count;
    return QS_OK;
}

/* ------------------------------------------------------------ one slot at a time */

/* The locking slots: take the mutex, call the plugin's slot with its own state, release. */
static qs_status serial_quantize(void *state, const qs_quantize_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->quantize(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_dequantize(void *state, const qs_dequantize_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->dequantize(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_gemm(void *state, qs_gemm_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->gemm(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->sdpa_fwd(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->sdpa_bwd(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_gdn_fwd(void *state, qs_gdn_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->gdn_fwd(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

static qs_status serial_gdn_bwd(void *state, qs_gdn_args *a)
{
    qsk_plugin_serial *s = state;
    pthread_mutex_lock(&s->mutex);
    qs_status st = s->of->table->gdn_bwd(s->of->state, a);
    pthread_mutex_unlock(&s->mutex);
    return st;
}

qs_status qsk_plugin_serial_init(qsk_plugin_serial *s, const qsk_plugin *pl)
{
    memset(s, 0, sizeof *s);
    const qs_backend *t = pl->table;
    s->of = pl;
    s->table.abi_version = t->abi_version;
    s->table.struct_size = (uint32_t)sizeof s->table;
    s->table.name = t->name;
    s->table.version = t->version;
    s->table.caps = t->caps;
    s->table.device = t->device;
    s->table.quantize = t->quantize ? serial_quantize : NULL;
    s->table.dequantize = t->dequantize ? serial_dequantize : NULL;
    s->table.gemm = t->gemm ? serial_gemm : NULL;
    s->table.sdpa_fwd = t->sdpa_fwd ? serial_sdpa_fwd : NULL;
    s->table.sdpa_bwd = t->sdpa_bwd ? serial_sdpa_bwd : NULL;
    s->table.gdn_fwd = t->gdn_fwd ? serial_gdn_fwd : NULL;
    s->table.gdn_bwd = t->gdn_bwd ? serial_gdn_bwd : NULL;
    s->plugin = *pl;
    s->plugin.table = &s->table;
    s->plugin.state = s;
    if (pthread_mutex_init(&s->mutex, NULL) != 0)
        return QS_ERR_NOMEM;
    s->locked = 1;
    return QS_OK;
}

void qsk_plugin_serial_free(qsk_plugin_serial *s)
{
    if (s->locked)
        pthread_mutex_destroy(&s->mutex);
    memset(s, 0, sizeof *s);
}
