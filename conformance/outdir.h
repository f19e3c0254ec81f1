/* outdir.h: an output directory written atomically. Everything goes into a temporary
 * directory beside the target, which is renamed to the target only once complete; on any
 * error the temporary is removed, so a failed command leaves nothing behind. The target
 * must not exist. */
#ifndef QSPEC_KIT_OUTDIR_H
#define QSPEC_KIT_OUTDIR_H

#include "qspec/status.h"

typedef struct qsk_outdir {
    char *dir; /* the target */
    char *tmp; /* the temporary directory */
} qsk_outdir;

/* Creates the temporary beside dir; QS_ERR_IO when dir exists or its parent is missing. */
qs_status qsk_outdir_open(qs_ctx *ctx, qsk_outdir *o, const char *dir);
/* The path of name inside the temporary (malloc'd; NULL when out of memory). */
char *qsk_outdir_path(const qsk_outdir *o, const char *name);
/* Creates the subdirectory name inside the temporary. */
qs_status qsk_outdir_mkdir(qs_ctx *ctx, qsk_outdir *o, const char *name);
/* Renames the temporary to the target. */
qs_status qsk_outdir_commit(qs_ctx *ctx, qsk_outdir *o);
/* Removes the temporary and everything in it (after an error; harmless after a commit). */
void qsk_outdir_abort(qsk_outdir *o);

#endif
