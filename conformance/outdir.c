/* outdir.c: atomic output directories (temporary directory, then rename). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "outdir.h"

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void remove_tree(const char *path);

/* The temporary directory of the output being written, removed when the process is
 * interrupted (SIGINT, SIGTERM, SIGHUP) so that an interrupted run leaves no DIR.tmp-*.
 * Only the process that created it removes it (workers forked later inherit the handler). */
static const char *volatile interrupted_tmp;
static volatile pid_t interrupted_owner;
static struct sigaction saved_actions[3];
static const int cleanup_signals[3] = {SIGINT, SIGTERM, SIGHUP};

static void on_interrupt(int sig)
{
    if (interrupted_tmp && getpid() == interrupted_owner)
        remove_tree((const char *)interrupted_tmp);
    interrupted_tmp = NULL;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void cleanup_arm(const char *tmp)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    interrupted_owner = getpid();
    interrupted_tmp = tmp;
    for (int i = 0; i < 3; i++)
        sigaction(cleanup_signals[i], &sa, &saved_actions[i]);
}

static void cleanup_disarm(const char *tmp)
{
    if (!tmp || interrupted_tmp != tmp)
        return;
    interrupted_tmp = NULL;
    for (int i = 0; i < 3; i++)
        sigaction(cleanup_signals[i], &saved_actions[i], NULL);
}

qs_status qsk_outdir_open(qs_ctx *ctx, qsk_outdir *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    struct stat sb;
    if (dir[0] == '\0')
        return qs_ctx_error(ctx, QS_ERR_IO,
                            "an empty output directory name (give a new directory)");
    if (lstat(dir, &sb) == 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: already exists, as %s (give a new directory)", dir,
                            S_ISDIR(sb.st_mode)   ? "a directory"
                            : S_ISREG(sb.st_mode) ? "a regular file"
                            : S_ISLNK(sb.st_mode) ? "a symbolic link"
                                                  : "a special file");
    size_t n = strlen(dir) + 16;
    o->dir = qsk_strdup(dir);
    o->tmp = malloc(n);
    if (!o->dir || !o->tmp) {
        qsk_outdir_abort(o);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    snprintf(o->tmp, n, "%s.tmp-XXXXXX", dir);
    if (!mkdtemp(o->tmp)) {
        int e = errno;
        free(o->tmp);
        o->tmp = NULL;
        qsk_outdir_abort(o);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot create a temporary directory beside it: %s",
                            dir, strerror(e));
    }
    if (!interrupted_tmp)
        cleanup_arm(o->tmp);
    return QS_OK;
}

char *qsk_outdir_path(const qsk_outdir *o, const char *name)
{
    return join(o->tmp, name);
}

qs_status qsk_outdir_mkdir(qs_ctx *ctx, qsk_outdir *o, const char *name)
{
    char *p = join(o->tmp, name);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    int r = mkdir(p, 0777);
    int e = errno;
    free(p);
    if (r != 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s/%s: cannot create: %s", o->dir, name, strerror(e));
    return QS_OK;
}

qs_status qsk_outdir_commit(qs_ctx *ctx, qsk_outdir *o)
{
    cleanup_disarm(o->tmp);
    if (rename(o->tmp, o->dir) != 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot rename the output into place: %s", o->dir,
                            strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    free(o->dir);
    o->dir = NULL;
    return QS_OK;
}

/* Removes path and, for a directory, everything below it. */
static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *p = join(path, e->d_name);
            if (p)
                remove_tree(p);
            free(p);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

void qsk_outdir_abort(qsk_outdir *o)
{
    cleanup_disarm(o->tmp);
    if (o->tmp)
        remove_tree(o->tmp);
    free(o->tmp);
    free(o->dir);
    memset(o, 0, sizeof *o);
}
