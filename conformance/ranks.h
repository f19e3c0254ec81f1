/* ranks.h: a run on several ranks, one process per rank (spec/cases.md [CASE-RANKS],
 * spec/distributed.md [DIST-BACKEND]). `qspec run --backend B --ranks N` starts N copies of
 * itself, rank R told by its environment (QSPEC_RANK, QSPEC_NRANKS, QSPEC_RANK_DIR); each
 * loads the plugin and joins the others through its dist_id/dist_join slots, the id passed
 * in a file of the run's directory. Rank 0 runs the whole selection and reports; the other
 * ranks run only the distributed cases of N ranks, in the same order, quietly. A
 * distributed case's ranks exchange their outputs through files of the run's directory, so
 * that every rank compares the whole result. */
#ifndef QSPEC_KIT_RANKS_H
#define QSPEC_KIT_RANKS_H

#include "plugin.h"

typedef struct qsk_ranks {
    int rank, nranks; /* 0 and 1 outside a run on several ranks */
    const char *dir;  /* the run's directory (NULL for one rank) */
    int joined;       /* the plugin joined the ranks (dist_join) */
    int seq;          /* distributed cases run so far (the same on every rank) */
} qsk_ranks;

/* The ranks of this process (from the environment, read once). */
qsk_ranks *qsk_ranks_self(void);
/* Whether this process is a rank started by a launcher. */
int qsk_ranks_child(void);
/* The launcher: runs argv (a qspec run command line, --ranks included) as nranks processes
 * and returns the exit status of the run: rank 0's, or 2 (with the ranks' logs shown) when
 * another rank failed to start, crashed or exited with an error. */
int qsk_ranks_launch(int nranks, int argc, char **argv);
/* Joins the plugin's ranks (rank 0 makes the id, the others wait for it, up to 120 s). */
qs_status qsk_ranks_join(qs_ctx *ctx, const qsk_plugin *pl);

#endif
