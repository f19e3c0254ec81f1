/* dist_world.c: N simulated ranks running at once, one thread per rank, each on its own
 * context (spec/distributed.md [DIST-RANKS] [DIST-HOOK]). A rank's all-reduce waits at the
 * rendezvous of its subgroup; the last rank to arrive combines the values in ascending rank
 * order [DIST-REDUCE-ORDER] and writes the result into every waiting rank's buffer. Nothing
 * else is shared, so a rank's results do not depend on how the threads are scheduled. A
 * reduction that can never complete (a rank has returned, or the running ranks wait on
 * different reductions) is detected and fails every waiting rank [DIST-SPMD]. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "qspec/distributed.h"
#include "qspec/format.h"

/* The rendezvous of one subgroup: the generation being filled (from 0) and the number of
 * generations completed. */
typedef struct qsi_slot {
    int64_t gen, ndone;
    int arrived;
    int64_t n;
    int disagree;
    float *val[QS_DIST_MAX_RANKS]; /* the arrived ranks' buffers (valid while they wait) */
    qs_status status;              /* of the completed generation */
} qsi_slot;

typedef struct qsi_world_run qsi_world_run;

typedef struct qsi_rank_arg {
    qsi_world_run *wr;
    int rank;
    qs_status status;
} qsi_rank_arg;

struct qsi_world_run {
    qs_dist_world *w;
    qs_dist_rank_fn fn;
    void *user;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, waiting;
    int returned[QS_DIST_MAX_RANKS];
    int wait_group[QS_DIST_MAX_RANKS]; /* the group a rank waits on, 0 if none */
    int aborted;
    char why[QSI_ERRMSG_LEN];
    qsi_slot slot[QS_DIST_MAX_GROUPS][QS_DIST_MAX_RANKS]; /* by group, lowest rank of color */
    qsi_rank_arg arg[QS_DIST_MAX_RANKS];
};

/* Under the lock: when every rank still running waits, no reduction can complete. */
static void check_stuck(qsi_world_run *wr)
{
    if (wr->aborted || wr->running == 0 || wr->waiting < wr->running)
        return;
    size_t at =
        (size_t)snprintf(wr->why, sizeof wr->why, "a reduction cannot complete [DIST-SPMD]:");
    for (int r = 0; r < wr->w->nranks && at < sizeof wr->why; r++) {
        if (wr->returned[r])
            at += (size_t)snprintf(wr->why + at, sizeof wr->why - at, " rank %d has returned;", r);
        else
            at += (size_t)snprintf(wr->why + at, sizeof wr->why - at, " rank %d waits on group %d;",
                                   r, wr->wait_group[r]);
    }
    wr->aborted = 1;
    pthread_cond_broadcast(&wr->cv);
}

/* [DIST-REDUCE-MAX] [DIST-REDUCE-ORDER] over the arrived ranks of a full slot. */
static void slot_reduce(qsi_slot *sl, int nranks)
{
    for (int64_t i = 0; i < sl->n; i++) {
        float v = 0.0f;
        for (int p = 0; p < nranks; p++)
            if (sl->val[p])
                v = qs_dist_amax_max(v, sl->val[p][i]);
        for (int p = 0; p < nranks; p++)
            if (sl->val[p])
                sl->val[p][i] = v;
    }
}

static qs_status world_allreduce(void *user, qs_ctx *ctx, int group, int64_t n, float *amax)
{
    qsi_rank_arg *a = user;
    qsi_world_run *wr = a->wr;
    qs_dist_world *w = wr->w;
    int r = a->rank, gi = -1;
    for (int i = 0; i < w->ngroups; i++)
        if (w->group[i].id == group)
            gi = i;
    if (gi < 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "all-reduce on group %d, which the world does not define "
                            "[DIST-GROUP]",
                            group);
    const qs_dist_group *g = &w->group[gi];
    int lead = r, size = 0;
    for (int p = w->nranks - 1; p >= 0; p--)
        if (g->color[p] == g->color[r]) {
            lead = p;
            size++;
        }
    qsi_slot *sl = &wr->slot[gi][lead];
    pthread_mutex_lock(&wr->mu);
    if (wr->aborted) {
        pthread_mutex_unlock(&wr->mu);
        return qs_ctx_error(ctx, QS_ERR_STATE, "%s", wr->why);
    }
    int64_t my = sl->gen;
    if (sl->arrived++ == 0)
        sl->n = n;
    else if (sl->n != n)
        sl->disagree = 1;
    sl->val[r] = amax;
    if (sl->arrived == size) {
        if (!sl->disagree)
            slot_reduce(sl, w->nranks);
        sl->status = sl->disagree ? QS_ERR_STATE : QS_OK;
        wr->waiting -= size - 1;
        for (int p = 0; p < w->nranks; p++) {
            if (sl->val[p])
                wr->wait_group[p] = 0;
            sl->val[p] = NULL;
        }
        sl->ndone = my + 1;
        sl->gen++;
        sl->arrived = 0;
        sl->disagree = 0;
        pthread_cond_broadcast(&wr->cv);
    } else {
        wr->waiting++;
        wr->wait_group[r] = group;
        check_stuck(wr);
        while (sl->ndone != my + 1 && !wr->aborted)
            pthread_cond_wait(&wr->cv, &wr->mu);
    }
    int done = sl->ndone == my + 1;
    qs_status s = done ? sl->status : QS_ERR_STATE;
    pthread_mutex_unlock(&wr->mu);
    if (s == QS_OK)
        return QS_OK;
    if (done)
        return qs_ctx_error(ctx, s,
                            "the ranks of group %d disagree on the number of amaxes of a "
                            "reduction [DIST-SPMD]",
                            group);
    return qs_ctx_error(ctx, s, "%s", wr->why);
}

static void *rank_main(void *p)
{
    qsi_rank_arg *a = p;
    qsi_world_run *wr = a->wr;
    a->status = wr->fn(wr->w->rank[a->rank], a->rank, wr->user);
    pthread_mutex_lock(&wr->mu);
    wr->running--;
    wr->returned[a->rank] = 1;
    check_stuck(wr);
    pthread_mutex_unlock(&wr->mu);
    return NULL;
}

qs_status qs_dist_world_run(qs_ctx *ctx, qs_dist_world *w, qs_dist_rank_fn fn, void *user,
                            qs_status *status)
{
    if (!w || w->nranks < 1 || w->nranks > QS_DIST_MAX_RANKS || !fn)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "dist_world_run: bad argument");
    qsi_world_run *wr = calloc(1, sizeof *wr);
    pthread_t th[QS_DIST_MAX_RANKS];
    if (!wr)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "dist_world_run: out of memory");
    wr->w = w;
    wr->fn = fn;
    wr->user = user;
    pthread_mutex_init(&wr->mu, NULL);
    pthread_cond_init(&wr->cv, NULL);
    int started = 0;
    wr->running = w->nranks;
    for (int r = 0; r < w->nranks; r++) {
        wr->arg[r].wr = wr;
        wr->arg[r].rank = r;
        qs_ctx_set_allreduce(w->rank[r], world_allreduce, &wr->arg[r]);
    }
    for (; started < w->nranks; started++)
        if (pthread_create(&th[started], NULL, rank_main, &wr->arg[started]) != 0)
            break;
    if (started < w->nranks) { /* the ranks started fail at their first reduction */
        pthread_mutex_lock(&wr->mu);
        snprintf(wr->why, sizeof wr->why, "dist_world_run: could not start rank %d", started);
        wr->aborted = 1;
        wr->running -= w->nranks - started;
        pthread_cond_broadcast(&wr->cv);
        pthread_mutex_unlock(&wr->mu);
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    qs_status s = started < w->nranks ? QS_ERR_NOMEM : QS_OK;
    if (s != QS_OK)
        qs_ctx_error(ctx, s, "%s", wr->why);
    for (int r = 0; r < w->nranks; r++) {
        qs_ctx_set_allreduce(w->rank[r], NULL, NULL);
        qs_status rs = r < started ? wr->arg[r].status : QS_ERR_NOMEM;
        if (status)
            status[r] = rs;
        if (s == QS_OK && rs != QS_OK)
            s = qs_ctx_error(ctx, rs, "rank %d: %s", r, qs_ctx_errmsg(w->rank[r]));
    }
    pthread_cond_destroy(&wr->cv);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
    return s;
}
