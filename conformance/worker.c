/* worker.c: a plugin's cases in worker processes (worker.h; spec/cases.md [CASE-ISOLATE],
 * [CASE-TIMEOUT]). The kit and its worker talk through two pipes in frames: a 32-bit length,
 * then that many bytes. The kit sends requests (case index, distributed-case counter); the
 * worker answers first with its hello (status, backend name, version, device, reason), then
 * one result per request. Both are the same program, forked: structs cross as bytes, and a
 * pointer never does (a failed output is sent by its index in the case). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qspec/qspec.h"
#include "ranks.h"
#include "worker.h"

#define STOP_INDEX UINT32_MAX
#define MAX_FRAME  ((uint32_t)64 << 20)

typedef struct request {
    uint32_t index;
    int32_t seq;
} request;

typedef struct result_head {
    uint32_t kind, lines, msglen, outlen, nfails;
    int32_t metered, backend_error;
    double seconds, ref_seconds;
    qsk_slot_time slots[QSK_NSLOTS]; /* [CASE-TIMING] */
} result_head;

void qsk_wait_text(int status, char *buf, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(buf, cap, "crashed: signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status))
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, cap, "ended (wait status %d)", status);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Reads exactly len bytes (blocking); 1 at the end of the stream, -1 on error. */
static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = read(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            return 1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------------ the worker's side */

/* A frame under construction in memory. */
typedef struct frame {
    char *buf;
    size_t len, cap;
    int oom;
} frame;

static void put(frame *f, const void *p, size_t n)
{
    if (f->oom)
        return;
    if (f->len + n > f->cap) {
        size_t cap = (f->len + n) * 2 + 256;
        char *g = realloc(f->buf, cap);
        if (!g) {
            f->oom = 1;
            return;
        }
        f->buf = g;
        f->cap = cap;
    }
    memcpy(f->buf + f->len, p, n);
    f->len += n;
}

static void put_str(frame *f, const char *s)
{
    put(f, s ? s : "", strlen(s ? s : "") + 1);
}

static int send_frame(int fd, frame *f)
{
    uint32_t n = (uint32_t)f->len;
    int rc = f->oom || write_all(fd, &n, sizeof n) || write_all(fd, f->buf, f->len) ? -1 : 0;
    free(f->buf);
    memset(f, 0, sizeof *f);
    return rc;
}

int qsk_result_send(int fd, const qsk_case_result *r)
{
    frame f = {0};
    result_head h;
    memset(&h, 0, sizeof h);
    h.kind = (uint32_t)r->kind;
    h.lines = (uint32_t)r->lines;
    h.msglen = (uint32_t)strlen(r->message);
    h.outlen = (uint32_t)r->outlen;
    h.nfails = (uint32_t)r->nfails;
    h.metered = r->metered;
    h.backend_error = r->backend_error;
    h.seconds = r->seconds;
    h.ref_seconds = r->ref_seconds;
    memcpy(h.slots, r->slots, sizeof h.slots);
    put(&f, &h, sizeof h);
    put(&f, r->message, h.msglen);
    put(&f, r->out ? r->out : "", h.outlen);
    for (size_t k = 0; k < r->nfails; k++) {
        qsk_out_fail of = r->fails[k];
        uint32_t idx = (uint32_t)(of.o - r->c->outputs);
        of.o = NULL;
        put(&f, &idx, sizeof idx);
        put(&f, &of, sizeof of);
    }
    return send_frame(fd, &f);
}

static void worker_main(qsk_worker *w, int in, int out)
{
    signal(SIGPIPE, SIG_DFL);
    qs_ctx *ctx = qs_ctx_new();
    qsk_plugin p;
    memset(&p, 0, sizeof p);
    char why[512] = "";
    int ok = 0;
    if (!ctx)
        snprintf(why, sizeof why, "out of memory");
    else if (qsk_plugin_load(ctx, w->path, &p) != QS_OK)
        snprintf(why, sizeof why, "%s", qs_ctx_errmsg(ctx));
    else if (!p.usable)
        snprintf(why, sizeof why, "backend %s is not usable: %s", p.table->name, p.why);
    else
        ok = 1;
    if (ok && w->join && qsk_ranks_self()->nranks > 1 && qsk_ranks_join(ctx, &p) != QS_OK) {
        snprintf(why, sizeof why, "rank %d: %s", qsk_ranks_self()->rank, qs_ctx_errmsg(ctx));
        ok = 0;
    }
    frame f = {0};
    put(&f, &ok, sizeof ok);
    put_str(&f, ok ? p.table->name : "");
    put_str(&f, ok ? (p.table->version ? p.table->version : "") : "");
    put_str(&f, ok ? (p.table->device && p.table->device(p.state) ? p.table->device(p.state)
                                                                  : "unknown")
                   : "");
    put_str(&f, why);
    if (send_frame(out, &f) != 0 || !ok)
        _exit(0);
    qsk_plugin_meter meter; /* [CASE-TIMING] */
    qsk_plugin_meter_init(&meter, &p);
    request q;
    while (read_all(in, &q, sizeof q) == 0 && q.index != STOP_INDEX && q.index < w->n) {
        qsk_case_result r;
        qsk_ranks_self()->seq = q.seq;
        qs_ctx_clear_error(ctx);
        qsk_plugin_meter_reset(&meter);
        w->fn(ctx, &meter.plugin, w->sel[q.index], &r);
        r.metered = 1;
        memcpy(r.slots, meter.t, sizeof r.slots);
        int bad = qsk_result_send(out, &r);
        qsk_result_free(&r);
        if (bad)
            _exit(3);
    }
    qsk_plugin_unload(&p);
    qs_ctx_free(ctx);
    _exit(0);
}

/* ------------------------------------------------------------------ the kit's side */

/* Reads one frame from fd before deadline, calling tick about once a second. Returns 0 with
 * *buf (malloc'd) and *len, 1 at the end of the stream, 2 at the deadline, -1 on error. */
static int read_frame(int fd, double deadline, char **buf, size_t *len, void (*tick)(void *),
                      void *arg)
{
    uint32_t n = 0;
    char *b = NULL;
    size_t want = sizeof n, got = 0;
    int in_body = 0;
    *buf = NULL;
    for (;;) {
        double left = deadline - qsk_now_seconds();
        if (left <= 0) {
            free(b);
            return 2;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno != EINTR) {
            free(b);
            return -1;
        }
        if (pr <= 0) {
            if (tick)
                tick(arg);
            continue;
        }
        char *dst = in_body ? b + got : (char *)&n + got;
        ssize_t k = read(fd, dst, want - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            free(b);
            return k == 0 ? 1 : -1;
        }
        got += (size_t)k;
        if (got < want)
            continue;
        if (in_body || n == 0) {
            *buf = b ? b : malloc(1);
            *len = n;
            return *buf ? 0 : -1;
        }
        if (n > MAX_FRAME || !(b = malloc(n)))
            return -1;
        in_body = 1;
        want = n;
        got = 0;
    }
}

/* Reaps the worker; kills it first when kill_it. Returns the wait status. */
static int reap(qsk_worker *w, int kill_it)
{
    int status = 0;
    if (w->pid <= 0)
        return 0;
    if (kill_it)
        kill(w->pid, SIGKILL);
    close(w->to_fd);
    close(w->from_fd);
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
        ;
    w->pid = 0;
    return status;
}

/* Marks the ranks' run as unable to run distributed cases any more (a worker that had
 * joined the ranks ended): this rank and, through a file of the run's directory, the
 * others. */
static void lose_ranks(qsk_worker *w, const char *why)
{
    const qsk_ranks *me = qsk_ranks_self();
    if (me->nranks <= 1 || w->lost)
        return;
    w->lost = 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/lost-rank-%d", me->dir, me->rank);
    FILE *fp = fopen(path, "w");
    if (fp) {
        fprintf(fp, "%s\n", why);
        fclose(fp);
    }
}

/* Whether another rank's worker was lost; its reason in buf. */
static int ranks_lost_elsewhere(char *buf, size_t cap)
{
    const qsk_ranks *me = qsk_ranks_self();
    for (int r = 0; me->nranks > 1 && r < me->nranks; r++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/lost-rank-%d", me->dir, r);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        char line[300] = "";
        if (!fgets(line, sizeof line, fp))
            line[0] = '\0';
        fclose(fp);
        line[strcspn(line, "\n")] = '\0';
        snprintf(buf, cap, "rank %d: %s", r, line);
        return 1;
    }
    return 0;
}

qs_status qsk_worker_start(qs_ctx *ctx, qsk_worker *w)
{
    int down[2], up[2];
    signal(SIGPIPE, SIG_IGN); /* a worker's end shows as a read at the end of its pipe */
    if (pipe(down) != 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "cannot start a worker: %s", strerror(errno));
    if (pipe(up) != 0) {
        close(down[0]);
        close(down[1]);
        return qs_ctx_error(ctx, QS_ERR_IO, "cannot start a worker: %s", strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    int join = w->join && w->started == 0;
    pid_t pid = fork();
    if (pid < 0) {
        for (int i = 0; i < 2; i++) {
            close(down[i]);
            close(up[i]);
        }
        return qs_ctx_error(ctx, QS_ERR_IO, "cannot start a worker: %s", strerror(errno));
    }
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        w->join = join;
        worker_main(w, down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    w->pid = pid;
    w->to_fd = down[1];
    w->from_fd = up[0];
    w->started++;
    char *buf = NULL;
    size_t len = 0;
    int rr = read_frame(w->from_fd, qsk_now_seconds() + w->timeout_s, &buf, &len, NULL, NULL);
    int ok = 0;
    const char *fields[4] = {"", "", "", ""};
    if (rr == 0 && len > sizeof ok && buf[len - 1] == '\0') {
        memcpy(&ok, buf, sizeof ok);
        const char *p = buf + sizeof ok, *end = buf + len;
        for (int i = 0; i < 4 && p < end; i++) {
            fields[i] = p;
            p += strlen(p) + 1;
        }
    }
    if (rr == 0 && ok) {
        snprintf(w->name, sizeof w->name, "%s", fields[0]);
        snprintf(w->version, sizeof w->version, "%s", fields[1]);
        snprintf(w->device, sizeof w->device, "%s", fields[2]);
        free(buf);
        return QS_OK;
    }
    qs_status st;
    if (rr == 0) {
        st = qs_ctx_error(ctx, QS_ERR_IO, "%s", fields[3]);
        reap(w, 0);
    } else if (rr == 2) {
        reap(w, 1);
        st = qs_ctx_error(ctx, QS_ERR_IO,
                          "backend %s: its worker timed out after %d s opening the plugin "
                          "(--timeout) and was killed",
                          w->path, w->timeout_s);
    } else {
        char how[200];
        qsk_wait_text(reap(w, 0), how, sizeof how);
        st = qs_ctx_error(ctx, QS_ERR_IO, "backend %s: its worker %s while opening the plugin",
                          w->path, how);
    }
    free(buf);
    return st;
}

int qsk_result_parse(const char *buf, size_t len, const qsk_case *c, qsk_case_result *r)
{
    result_head h;
    if (len < sizeof h)
        return 1;
    memcpy(&h, buf, sizeof h);
    size_t each = sizeof(uint32_t) + sizeof(qsk_out_fail);
    if (h.kind > QSK_RES_SKIP || h.msglen >= sizeof r->message ||
        (len - sizeof h) != (size_t)h.msglen + h.outlen + (size_t)h.nfails * each)
        return 1;
    const char *p = buf + sizeof h;
    r->kind = (qsk_res_kind)h.kind;
    r->lines = (int)h.lines;
    r->metered = h.metered != 0;
    r->backend_error = h.backend_error != 0;
    r->seconds = h.seconds;
    r->ref_seconds = h.ref_seconds;
    memcpy(r->slots, h.slots, sizeof r->slots);
    memcpy(r->message, p, h.msglen);
    r->message[h.msglen] = '\0';
    p += h.msglen;
    if (h.outlen) {
        r->out = malloc((size_t)h.outlen + 1);
        if (!r->out)
            return 1;
        memcpy(r->out, p, h.outlen);
        r->out[h.outlen] = '\0';
        r->outlen = h.outlen;
    }
    p += h.outlen;
    if (h.nfails) {
        r->fails = calloc(h.nfails, sizeof *r->fails);
        if (!r->fails)
            return 1;
    }
    for (uint32_t k = 0; k < h.nfails; k++) {
        uint32_t idx;
        memcpy(&idx, p, sizeof idx);
        if (idx >= c->noutputs)
            return 1;
        memcpy(&r->fails[k], p + sizeof idx, sizeof r->fails[k]);
        r->fails[k].o = &c->outputs[idx];
        r->nfails++;
        p += each;
    }
    return 0;
}

void qsk_worker_run(qs_ctx *ctx, qsk_worker *w, size_t index, int seq, qsk_case_result *r,
                    void (*tick)(void *), void *tick_arg)
{
    const qsk_case *c = w->sel[index];
    const qsk_ranks *me = qsk_ranks_self();
    double t0 = qsk_now_seconds();
    qsk_result_init(r, c);
    char why[400];
    if (me->nranks > 1 && qsk_case_dist_ranks(c) == me->nranks &&
        (w->lost || ranks_lost_elsewhere(why, sizeof why))) {
        if (w->lost)
            snprintf(why, sizeof why, "this rank's worker ended earlier");
        qsk_result_fail(r, "not run: the ranks cannot meet again (%s)", why);
        qsk_result_finish(r);
        return;
    }
    request q = {(uint32_t)index, seq};
    for (int attempt = 0; attempt < 2; attempt++) {
        if (w->pid <= 0 && qsk_worker_start(ctx, w) != QS_OK) {
            qsk_result_fail(r, "no worker could be started: %s", qs_ctx_errmsg(ctx));
            qsk_result_finish(r);
            r->seconds = qsk_now_seconds() - t0;
            return;
        }
        if (write_all(w->to_fd, &q, sizeof q) == 0)
            break;
        reap(w, 1); /* it ended between cases: start a fresh one, once */
    }
    if (w->pid <= 0) {
        qsk_result_fail(r, "the backend's worker ended before it could be given the case");
        qsk_result_finish(r);
        r->seconds = qsk_now_seconds() - t0;
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    int rr = read_frame(w->from_fd, t0 + w->timeout_s, &buf, &len, tick, tick_arg);
    if (rr == 0 && qsk_result_parse(buf, len, c, r) == 0) {
        free(buf);
        /* [CASE-ISOLATE] a plugin that returned an error may be left in a state that fails
         * every later call (a CUDA context after an illegal address): the next case gets a
         * fresh worker, except under --ranks, where a fresh one could not join the others */
        if (r->backend_error && me->nranks <= 1)
            qsk_worker_stop(w);
        r->seconds = qsk_now_seconds() - t0;
        return;
    }
    free(buf);
    qsk_result_free(r);
    qsk_result_init(r, c);
    char how[200];
    if (rr == 2) {
        reap(w, 1);
        snprintf(how, sizeof how, "timed out after %d s (--timeout)", w->timeout_s);
    } else if (rr == 1) {
        qsk_wait_text(reap(w, 0), how, sizeof how);
    } else {
        reap(w, 1);
        snprintf(how, sizeof how, "sent a result that cannot be read");
    }
    qsk_result_fail(r, "the backend's worker %s during the case%s", how,
                    rr == 1 ? "" : "; it was killed");
    qsk_result_finish(r);
    lose_ranks(w, how);
    r->seconds = qsk_now_seconds() - t0;
}

void qsk_worker_stop(qsk_worker *w)
{
    if (w->pid <= 0)
        return;
    request q = {STOP_INDEX, 0};
    if (write_all(w->to_fd, &q, sizeof q) == 0) {
        close(w->to_fd);
        w->to_fd = -1;
        char *buf = NULL;
        size_t len = 0;
        int rr = read_frame(w->from_fd, qsk_now_seconds() + w->timeout_s, &buf, &len, NULL, NULL);
        free(buf);
        if (rr == 1) { /* it closed its end: it is exiting */
            close(w->from_fd);
            while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            w->pid = 0;
            return;
        }
    }
    if (w->to_fd >= 0)
        close(w->to_fd);
    kill(w->pid, SIGKILL);
    close(w->from_fd);
    while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    w->pid = 0;
}
