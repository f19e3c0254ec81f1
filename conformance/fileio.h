/* fileio.h: whole-file reads and atomic writes for the kit.
 * An atomic write goes to a temporary file beside the target and is renamed over it
 * only once everything is written and flushed, so a failure never leaves partial output. */
#ifndef QSPEC_KIT_FILEIO_H
#define QSPEC_KIT_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qspec/status.h"

/* A malloc'd copy of s; NULL when out of memory. */
char *qsk_strdup(const char *s);

/* The largest file the kit reads (case files, .npy, state and package files). */
#define QSK_MAX_FILE_BYTES ((uint64_t)1 << 30)

/* Reads the whole of path, a regular file of at most QSK_MAX_FILE_BYTES, into a malloc'd buffer
 * (NUL-terminated, *len excludes it). */
qs_status qsk_read_file(qs_ctx *ctx, const char *path, char **buf, size_t *len);

/* An atomic output file in progress. */
typedef struct qsk_atomic {
    FILE *fp;
    char *path;
    char *tmp_path;
    int err; /* errno of a failed write, when a writer records one */
} qsk_atomic;

/* Opens a temporary file beside path for writing. */
qs_status qsk_atomic_open(qs_ctx *ctx, qsk_atomic *a, const char *path);
/* Flushes, closes and renames the temporary over path; on any error removes it. */
qs_status qsk_atomic_commit(qs_ctx *ctx, qsk_atomic *a);
/* Closes and removes the temporary without touching path. */
void qsk_atomic_abort(qsk_atomic *a);
/* Writes len bytes of buf to path atomically. */
qs_status qsk_write_file(qs_ctx *ctx, const char *path, const void *buf, size_t len);

/* Whether path can be created as an output (a file, or a directory when dir): not empty,
 * not an existing directory for a file, and its parent directory exists and is writable.
 * Returns 0, or -1 with the reason in why. Lets a command reject a bad output path before
 * it does its work. */
int qsk_check_out_path(const char *path, int dir, char *why, size_t cap);

/* Flushes the standard output; on a write error (a full disk, a closed pipe) prints one
 * line with the reason and returns 2, else 0. main returns it when the command succeeded. */
int qsk_stdout_close(void);

#endif
