/* worker.h: running a plugin backend's cases in a worker process (spec/cases.md
 * [CASE-ISOLATE], [CASE-TIMEOUT]). A plugin is untrusted code: the kit's process never loads
 * it. A worker is forked from the kit after the cases are loaded; it loads and opens the
 * plugin, says who the backend is, then runs one case at a time as the kit asks, sending back
 * each result. The kit owns the results and the reports: a worker that crashes, exits or
 * outlives the per-case timeout fails the case it was running, and the next case runs in a
 * fresh worker. */
#ifndef QSPEC_KIT_WORKER_H
#define QSPEC_KIT_WORKER_H

#include <sys/types.h>

#include "run.h"

#define QSK_DEFAULT_TIMEOUT 300 /* seconds a case may take in a worker, unless --timeout */

/* Runs case c on the worker's open plugin, filling r (started by the worker). */
typedef void (*qsk_work_fn)(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                            qsk_case_result *r);

typedef struct qsk_worker {
    /* set by the caller before the first start */
    const char *path;           /* the plugin file */
    const qsk_case *const *sel; /* the cases a request may name, by index */
    size_t n;
    int timeout_s; /* per case, and for opening the plugin */
    int join;      /* join the run's ranks when the first worker opens the plugin */
    qsk_work_fn fn;
    /* the backend, as the first worker's plugin describes itself */
    char name[64], version[128], device[256];
    /* the current worker */
    pid_t pid; /* 0 when none runs */
    int to_fd, from_fd;
    int started; /* workers started so far */
    int lost;    /* a worker that had joined the ranks ended: no fresh one can rejoin */
} qsk_worker;

/* Starts a worker (fork), which loads and opens the plugin; waits for it up to the timeout.
 * QS_ERR_IO with the reason when it cannot load or open the plugin, or ends or hangs first. */
qs_status qsk_worker_start(qs_ctx *ctx, qsk_worker *w);
/* Runs case sel[index] in the worker (a fresh one when the last ended) with the ranks'
 * distributed-case counter seq, and fills r. A worker that ends or times out during the case
 * fails it with the reason ("crashed: signal 11 (...)", "exited with status 0 during the
 * case", "timed out after 60 s"). tick, when not NULL, is called about once a second while
 * the case runs. */
void qsk_worker_run(qs_ctx *ctx, qsk_worker *w, size_t index, int seq, qsk_case_result *r,
                    void (*tick)(void *), void *tick_arg);
/* Asks the worker to close the plugin and exit, and reaps it (killed after the timeout). */
void qsk_worker_stop(qsk_worker *w);
/* A case's result as a frame (a 32-bit length, then the record: status, lines, times,
 * failed outputs by their index in the case) written to fd, as a worker sends it and as a
 * --jobs process hands results to the kit; nonzero on a write error. */
int qsk_result_send(int fd, const qsk_case_result *r);
/* Fills r (started with qsk_result_init) from one frame's record of len bytes for case c;
 * nonzero when it is malformed. */
int qsk_result_parse(const char *buf, size_t len, const qsk_case *c, qsk_case_result *r);
/* The reason a process ended, from its wait status: "crashed: signal 11 (Segmentation
 * fault)" or "exited with status 0". */
void qsk_wait_text(int status, char *buf, size_t cap);

#endif
