/* fileio.c: whole-file reads and atomic writes (temporary name, then rename). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

qs_status qsk_read_file(qs_ctx *ctx, const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK so that opening a FIFO does not wait for a writer; only a regular file
     * is read, and only up to the cap, so /dev/zero or a pipe cannot hang or grow. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: not a regular file (%s)", path,
                            S_ISDIR(sb.st_mode)    ? "a directory"
                            : S_ISFIFO(sb.st_mode) ? "a FIFO"
                            : S_ISCHR(sb.st_mode)  ? "a character device"
                                                   : "not a plain file");
    }
    if ((uint64_t)sb.st_size > QSK_MAX_FILE_BYTES) {
        close(fd);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: %lld bytes, more than the %d MiB a file may hold",
                            path, (long long)sb.st_size, (int)(QSK_MAX_FILE_BYTES >> 20));
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *fp = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
    if (!fp) {
        int e = errno;
        close(fd);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
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
        if (got == 0 || n > QSK_MAX_FILE_BYTES)
            break;
    }
    int err = ferror(fp) ? errno : 0;
    fclose(fp);
    if (err || n > QSK_MAX_FILE_BYTES) {
        free(p);
        if (!err)
            return qs_ctx_error(ctx, QS_ERR_IO, "%s: grew beyond %d MiB while being read", path,
                                (int)(QSK_MAX_FILE_BYTES >> 20));
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: read error: %s", path, strerror(err));
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
    /* A symbolic link is written through: the new text replaces its target, beside which
     * the temporary lives, and the link stays a link. An existing file keeps its mode. */
    struct stat sb;
    char *real = NULL;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        real = realpath(path, NULL);
        if (!real)
            return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot follow the link: %s", path,
                                strerror(errno));
    }
    a->path = real ? real : qsk_strdup(path);
    int keep_mode = stat(a->path ? a->path : path, &sb) == 0 && S_ISREG(sb.st_mode);
    size_t n = strlen(a->path ? a->path : path) + 32;
    a->tmp_path = malloc(n);
    if (!a->path || !a->tmp_path) {
        qsk_atomic_abort(a);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(a->tmp_path, n, "%s.tmp%ld", a->path, (long)getpid());
    a->fp = fopen(a->tmp_path, "wb");
    if (!a->fp || (keep_mode && fchmod(fileno(a->fp), sb.st_mode & 07777) != 0)) {
        int e = errno;
        qsk_atomic_abort(a);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return QS_OK;
}

qs_status qsk_atomic_commit(qs_ctx *ctx, qsk_atomic *a)
{
    int bad = ferror(a->fp) ? (a->err ? a->err : EIO) : 0;
    if (fflush(a->fp) != 0 && !bad)
        bad = errno;
    if (fclose(a->fp) != 0 && !bad)
        bad = errno;
    a->fp = NULL;
    if (bad) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_IO, "%s: write error: %s", a->path, strerror(bad));
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
        int e = errno;
        qsk_atomic_abort(&a);
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: write error: %s", path, strerror(e));
    }
    return qsk_atomic_commit(ctx, &a);
}

int qsk_check_out_path(const char *path, int dir, char *why, size_t cap)
{
    struct stat sb;
    if (path[0] == '\0') {
        snprintf(why, cap, "an empty path (give a %s name)", dir ? "directory" : "file");
        return -1;
    }
    if (path[strlen(path) - 1] == '/' && !dir) {
        snprintf(why, cap, "%s names a directory, not a file", path);
        return -1;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && !dir) {
        snprintf(why, cap, "%s is a directory, not a file", path);
        return -1;
    }
    char *copy = qsk_strdup(path);
    if (!copy) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    char *slash = strrchr(copy, '/');
    while (slash && slash > copy && slash[1] == '\0') { /* "out/" names out */
        *slash = '\0';
        slash = strrchr(copy, '/');
    }
    const char *parent = slash ? (slash == copy ? "/" : (*slash = '\0', copy)) : ".";
    const char *reason = NULL;
    if (stat(parent, &sb) != 0)
        reason = strerror(errno);
    else if (!S_ISDIR(sb.st_mode))
        reason = "not a directory";
    else if (access(parent, W_OK | X_OK) != 0)
        reason = strerror(errno);
    int bad = reason != NULL;
    if (bad)
        snprintf(why, cap, "%s: cannot write into %s: %s", path, parent, reason);
    free(copy);
    return bad ? -1 : 0;
}

int qsk_stdout_close(void)
{
    /* After a failed write the stream keeps what it could not write: clearing the error and
     * flushing again fails the same way, and names the reason. */
    int bad = ferror(stdout) ? EIO : 0;
    clearerr(stdout);
    errno = 0;
    if (fflush(stdout) != 0)
        bad = errno ? errno : EIO;
    if (bad) {
        fprintf(stderr, "qspec: cannot write the standard output: %s\n", strerror(bad));
        return 2;
    }
    return 0;
}
