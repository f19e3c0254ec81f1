/* ranks.c: the processes of a run on several ranks (ranks.h). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "ranks.h"

static qsk_ranks self;
static int self_read;

qsk_ranks *qsk_ranks_self(void)
{
    if (!self_read) {
        const char *r = getenv("QSPEC_RANK"), *n = getenv("QSPEC_NRANKS");
        const char *d = getenv("QSPEC_RANK_DIR");
        self.nranks = 1;
        if (r && n && d && atoi(n) >= 1 && atoi(r) >= 0 && atoi(r) < atoi(n)) {
            self.rank = atoi(r);
            self.nranks = atoi(n);
            self.dir = d;
        }
        self_read = 1;
    }
    return &self;
}

int qsk_ranks_child(void)
{
    return qsk_ranks_self()->dir != NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Prints the last lines of rank r's log (stdout and stderr of a rank > 0). */
static void show_log(const char *dir, int r)
{
    char path[4200], buf[2048];
    snprintf(path, sizeof path, "%s/rank-%d.log", dir, r);
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, len > (long)sizeof buf - 1 ? len - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "---- rank %d (end of its log) ----\n%s%s", r, buf,
            n && buf[n - 1] != '\n' ? "\n" : "");
}

static pid_t start_rank(const char *exe, char **argv, const char *dir, int r, int nranks)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char num[16], cnt[16];
    snprintf(num, sizeof num, "%d", r);
    snprintf(cnt, sizeof cnt, "%d", nranks);
    setenv("QSPEC_RANK", num, 1);
    setenv("QSPEC_NRANKS", cnt, 1);
    setenv("QSPEC_RANK_DIR", dir, 1);
    setenv("TMPDIR", dir, 1); /* what a plugin keeps in temporary files goes with the run */
    if (r > 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/rank-%d.log", dir, r);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
    }
    execv(exe, argv);
    fprintf(stderr, "qspec run: rank %d: cannot run %s: %s\n", r, exe, strerror(errno));
    _exit(2);
}

int qsk_ranks_launch(int nranks, int argc, char **argv)
{
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "qspec run: --ranks: cannot find the qspec executable\n");
        return 2;
    }
    exe[len] = '\0';
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/qspec-ranks.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char **av = calloc((size_t)argc + 3, sizeof *av);
    if (!av || !mkdtemp(dir)) {
        fprintf(stderr, "qspec run: --ranks: cannot create a run directory: %s\n", strerror(errno));
        free(av);
        return 2;
    }
    av[0] = exe;
    av[1] = "run";
    for (int i = 0; i < argc; i++)
        av[i + 2] = argv[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid[64];
    int status[64], done[64], left = nranks, rc = 0;
    for (int r = 0; r < nranks; r++) {
        pid[r] = start_rank(exe, av, dir, r, nranks);
        done[r] = pid[r] < 0;
        status[r] = -1;
        left -= done[r];
    }
    time_t broken = 0; /* when a rank first ended with an error while others ran */
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < nranks; r++)
                if (pid[r] == p && !done[r]) {
                    done[r] = 1;
                    status[r] = st;
                    left--;
                    if (!broken && !(WIFEXITED(st) && WEXITSTATUS(st) <= 1))
                        broken = time(NULL);
                }
            continue;
        }
        if (broken && time(NULL) - broken > 10) /* the others wait on a rank that is gone */
            for (int r = 0; r < nranks; r++)
                if (!done[r])
                    kill(pid[r], SIGTERM);
        sleep_ms(20);
    }
    for (int r = 0; r < nranks; r++) {
        int st = status[r];
        if (pid[r] < 0) {
            fprintf(stderr, "qspec run: rank %d could not be started\n", r);
            rc = 2;
        } else if (WIFSIGNALED(st)) {
            fprintf(stderr, "qspec run: rank %d was ended by signal %d\n", r, WTERMSIG(st));
            rc = 2;
        } else if (WEXITSTATUS(st) > 1 ||
                   (r > 0 && WEXITSTATUS(st) == 1 && WEXITSTATUS(status[0]) == 0)) {
            /* rank 0 may fail cases the other ranks do not run; not the other way round */
            fprintf(stderr, "qspec run: rank %d exited with status %d\n", r, WEXITSTATUS(st));
            rc = 2;
        }
        if (rc == 2 && r > 0)
            show_log(dir, r);
    }
    if (rc == 0)
        rc = WEXITSTATUS(status[0]);
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    free(av);
    return rc;
}

qs_status qsk_ranks_join(qs_ctx *ctx, const qsk_plugin *pl)
{
    qsk_ranks *me = qsk_ranks_self();
    const qs_backend *t = pl->table;
    if (me->joined)
        return QS_OK;
    if (!(t->caps & QS_CAP_DIST) || !t->dist_id || !t->dist_join || !t->allreduce_amax)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED,
                            "backend %s has no distributed slots (QS_CAP_DIST)", t->name);
    unsigned char id[QS_DIST_ID_MAX];
    size_t n = 0;
    char why[256] = "", path[4200], part[4200];
    qs_status st = QS_OK;
    if (me->dir)
        snprintf(path, sizeof path, "%s/id", me->dir);
    if (me->rank == 0) {
        st = t->dist_id(pl->state, id, sizeof id, &n, why, sizeof why);
        if (st == QS_OK && n > sizeof id)
            st = QS_ERR_INTERNAL;
        if (st == QS_OK && me->dir) { /* written whole, then renamed: a reader sees all */
            snprintf(part, sizeof part, "%s/id.part", me->dir);
            st = qsk_write_file(ctx, part, (const char *)id, n);
            if (st == QS_OK && rename(part, path) != 0)
                st = qs_ctx_error(ctx, QS_ERR_IO, "cannot publish the run id: %s", strerror(errno));
        }
    } else {
        FILE *f = NULL;
        for (int waited = 0; !(f = fopen(path, "rb")) && waited < 120000; waited += 10)
            sleep_ms(10);
        if (!f)
            return qs_ctx_error(ctx, QS_ERR_IO, "rank %d: no run id from rank 0 after 120 s",
                                me->rank);
        n = fread(id, 1, sizeof id, f);
        fclose(f);
    }
    if (st == QS_OK)
        st = t->dist_join(pl->state, me->nranks, me->rank, id, n, why, sizeof why);
    if (st != QS_OK)
        return qs_ctx_error(ctx, st, "backend %s: joining %d rank%s failed%s%s", t->name,
                            me->nranks, me->nranks == 1 ? "" : "s", why[0] ? ": " : "", why);
    me->joined = 1;
    return QS_OK;
}
