/* fileio.c: whole-file reads and atomic writes (temporary name, then rename). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"

qs_status qsk_read_file(qs_ctx *ctx, const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    if (!p) {
        fclose(fp);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                fclose(fp);
                return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", path);
            }
            p = q;
            cap *= 2;
        }
        size_t got = fread(p + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(p);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: read error", path);
    }
    p[n] = '\0';
    *buf = p;
    *len = n;
    return QS_OK;
}

char *qsk_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

qs_status qsk_atomic_open(qs_ctx *ctx, qsk_atomic *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->path = qsk_strdup(path);
    size_t n = strlen(path) + 32;
    a->tmp_path = malloc(n);
    if (!a->path || !a->tmp_path) {
        qsk_atomic_abort(a);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(a->tmp_path, n, "%s.tmp%ld", path, (long)getpid());
    a->fp = fopen(a->tmp_path, "wb");
    if (!a->fp) {
        int e = errno;
        qsk_atomic_abort(a);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return QS_OK;
}

qs_status qsk_atomic_commit(qs_ctx *ctx, qsk_atomic *a)
{
    int bad = ferror(a->fp);
    if (fflush(a->fp) != 0)
        bad = 1;
    if (fclose(a->fp) != 0)
        bad = 1;
    a->fp = NULL;
    if (bad) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_IO, "%s: write error", a->path);
        qsk_atomic_abort(a);
        return st;
    }
    if (rename(a->tmp_path, a->path) != 0) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot rename into place: %s", a->path,
                                    strerror(errno));
        qsk_atomic_abort(a);
        return st;
    }
    free(a->path);
    free(a->tmp_path);
    memset(a, 0, sizeof *a);
    return QS_OK;
}

void qsk_atomic_abort(qsk_atomic *a)
{
    if (a->fp)
        fclose(a->fp);
    if (a->tmp_path)
        remove(a->tmp_path);
    free(a->path);
    free(a->tmp_path);
    memset(a, 0, sizeof *a);
}

qs_status qsk_write_file(qs_ctx *ctx, const char *path, const void *buf, size_t len)
{
    qsk_atomic a;
    qs_status st = qsk_atomic_open(ctx, &a, path);
    if (st != QS_OK)
        return st;
    if (len && fwrite(buf, 1, len, a.fp) != len) {
        qsk_atomic_abort(&a);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: write error", path);
    }
    return qsk_atomic_commit(ctx, &a);
}
