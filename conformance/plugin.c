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
#include "run.h"

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

/* ------------------------------------------------------------ wrapped kernel slots */

const char *const qsk_slot_names[QSK_NSLOTS] = {
#define QSK_SLOT_NAME(slot, type) #slot,
    QSK_KERNEL_SLOTS(QSK_SLOT_NAME)
#undef QSK_SLOT_NAME
};

/* A wrapper's table: the plugin's identity, and for each kernel slot the plugin fills the
 * wrapper's function of that slot (NULL where the plugin has none, so the capabilities
 * read the same); the other slots are NULL. */
static void wrap_table(qs_backend *w, const qs_backend *t, const qs_backend *fns)
{
    w->abi_version = t->abi_version;
    w->struct_size = (uint32_t)sizeof *w;
    w->name = t->name;
    w->version = t->version;
    w->caps = t->caps; /* device is left NULL: it would be handed the wrapper's state */
#define QSK_WRAP_SLOT(slot, type) w->slot = t->slot ? fns->slot : NULL;
    QSK_KERNEL_SLOTS(QSK_WRAP_SLOT)
#undef QSK_WRAP_SLOT
}

/* The locking slots: take the mutex, call the plugin's slot with its own state, release. */
#define QSK_SERIAL_SLOT(slot, type)                                                                \
    static qs_status serial_##slot(void *state, type a)                                            \
    {                                                                                              \
        qsk_plugin_serial *s = state;                                                              \
        pthread_mutex_lock(&s->mutex);                                                             \
        qs_status st = s->of->table->slot(s->of->state, a);                                        \
        pthread_mutex_unlock(&s->mutex);                                                           \
        return st;                                                                                 \
    }
QSK_KERNEL_SLOTS(QSK_SERIAL_SLOT)
#undef QSK_SERIAL_SLOT

qs_status qsk_plugin_serial_init(qsk_plugin_serial *s, const qsk_plugin *pl)
{
    static const qs_backend fns = {
#define QSK_SERIAL_FN(slot, type) .slot = serial_##slot,
        QSK_KERNEL_SLOTS(QSK_SERIAL_FN)
#undef QSK_SERIAL_FN
    };
    memset(s, 0, sizeof *s);
    s->of = pl;
    wrap_table(&s->table, pl->table, &fns);
    s->plugin = *pl;
    s->plugin.table = &s->table;
    s->plugin.state = s;
    if (pthread_mutex_init(&s->mutex, NULL) != 0)
        return QS_ERR_NOMEM;
    s->locked = 1;
    return QS_OK;
}

/* The metering slots: call the plugin's slot, add the call and its wall time. */
#define QSK_METER_SLOT(slot, type)                                                                 \
    static qs_status meter_##slot(void *state, type a)                                             \
    {                                                                                              \
        qsk_plugin_meter *m = state;                                                               \
        double t0 = qsk_now_seconds();                                                             \
        qs_status st = m->of->table->slot(m->of->state, a);                                        \
        m->t[QSK_SLOT_##slot].calls++;                                                             \
        m->t[QSK_SLOT_##slot].seconds += qsk_now_seconds() - t0;                                   \
        return st;                                                                                 \
    }
QSK_KERNEL_SLOTS(QSK_METER_SLOT)
#undef QSK_METER_SLOT

/* The distributed slots pass through unmetered, with the plugin's own state. */
static qs_status meter_dist_id(void *state, void *id, size_t cap, size_t *len, char *why,
                               size_t why_len)
{
    const qsk_plugin *of = ((qsk_plugin_meter *)state)->of;
    return of->table->dist_id(of->state, id, cap, len, why, why_len);
}

static qs_status meter_dist_join(void *state, int nranks, int rank, const void *id, size_t len,
                                 char *why, size_t why_len)
{
    const qsk_plugin *of = ((qsk_plugin_meter *)state)->of;
    return of->table->dist_join(of->state, nranks, rank, id, len, why, why_len);
}

static qs_status meter_allreduce_amax(void *state, int64_t n, float *amax, char *why,
                                      size_t why_len)
{
    const qsk_plugin *of = ((qsk_plugin_meter *)state)->of;
    return of->table->allreduce_amax(of->state, n, amax, why, why_len);
}

void qsk_plugin_meter_init(qsk_plugin_meter *m, const qsk_plugin *pl)
{
    static const qs_backend fns = {
#define QSK_METER_FN(slot, type) .slot = meter_##slot,
        QSK_KERNEL_SLOTS(QSK_METER_FN)
#undef QSK_METER_FN
    };
    const qs_backend *t = pl->table;
    memset(m, 0, sizeof *m);
    m->of = pl;
    wrap_table(&m->table, t, &fns);
    m->table.dist_id = t->dist_id ? meter_dist_id : NULL;
    m->table.dist_join = t->dist_join ? meter_dist_join : NULL;
    m->table.allreduce_amax = t->allreduce_amax ? meter_allreduce_amax : NULL;
    m->plugin = *pl;
    m->plugin.table = &m->table;
    m->plugin.state = m;
}

void qsk_plugin_meter_reset(qsk_plugin_meter *m)
{
    memset(m->t, 0, sizeof m->t);
}

void qsk_plugin_serial_free(qsk_plugin_serial *s)
{
    if (s->locked)
        pthread_mutex_destroy(&s->mutex);
    memset(s, 0, sizeof *s);
}
