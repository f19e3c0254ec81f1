/* cmd_run.c: `qspec run`, `qspec list`, `qspec show` and `qspec coverage` — running the
 * conformance suite on a backend, listing and showing cases, and the rule coverage table.
 * A run checks the reference's outputs against each case's golden digests, then compares
 * the backend's outputs with the reference's as each output says, and writes the reports
 * (report.h) or, with --certify, a certification package (certify.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "certify.h"
#include "cli.h"
#include "fileio.h"
#include "plugin.h"
#include "progress.h"
#include "ranks.h"
#include "qspec/qspec.h"
#include "report.h"
#include "sha256.h"
#include "worker.h"

typedef qsk_case_result case_result;

typedef struct run_opts {
    const char *backend;
    const char *filter;
    const char *report_json;
    const char *junit;
    const char *html;
    const char *certify; /* the package directory of a certification run */
    int update_digests;
    int quiet;
    int timing; /* --timing: a TIME line per case [CASE-TIMING] */
    int skips;  /* --skips: a SKIP line per case not supported, with the reason */
    int jobs;
    int ranks;   /* --ranks: processes of a distributed run [CASE-RANKS] */
    int timeout; /* --timeout: seconds a case may take in a plugin's worker [CASE-TIMEOUT] */
    int tiers;   /* --tier: a bit per qsk_tier selected [CASE-TIER] */
} run_opts;

/* --tier NAME: default, large or all, as a bit per tier; -1 for another word. */
static int tier_mask(const char *name)
{
    if (strcmp(name, "all") == 0)
        return (1 << QSK_TIER_DEFAULT) | (1 << QSK_TIER_LARGE);
    int t = qsk_tier_parse(name);
    return t < 0 ? -1 : 1 << t;
}

static void tensor_digest(const qs_tensor *t, char hex[65])
{
    qsk_sha256_hex(t->data, t->nbytes, hex);
}

static void run_case(qs_ctx *ctx, const qsk_case *c, const qsk_plugin *pl, int update,
                     case_result *r, qsk_results *ref_keep)
{
    double t0 = qsk_now_seconds();
    qsk_result_init(r, c);
    const qsk_op *op = qsk_op_find(c->op);
    qs_tensor inputs[16];
    size_t nin = 0;
    qsk_results ref = {0}, got = {0};
    qs_status st = QS_OK;
    for (; nin < c->ninputs && nin < 16 && st == QS_OK; nin++)
        st = qsk_input_generate(ctx, &c->inputs[nin], &inputs[nin]);
    int ref_runs = !(pl && c->self_only); /* [CASE-TIER-SELF] */
    if (st == QS_OK && ref_runs) {
        double t_ref = qsk_now_seconds();
        st = op->run_ref(ctx, c, inputs, &ref);
        r->ref_seconds = qsk_now_seconds() - t_ref;
    }
    if (st != QS_OK) {
        qsk_result_fail(r, "the reference failed: %s", qs_ctx_errmsg(ctx));
    } else {
        qsk_check_digests(c, &ref, r, update);
        if (pl) {
            qs_ctx_clear_error(ctx);
            st = op->run_backend(ctx, pl, c, inputs, ref_runs ? &ref : NULL, &got);
            if (st == QS_ERR_UNSUPPORTED && got.n == 0) {
                if (r->kind == QSK_RES_PASS) { /* the op's reason, when it gave one */
                    const char *why = qs_ctx_errmsg(ctx);
                    r->kind = QSK_RES_SKIP;
                    snprintf(r->message, sizeof r->message, "not supported by backend %s%s%s",
                             pl->table->name, *why ? ": " : "", why);
                }
            } else if (st != QS_OK) {
                qsk_result_fail(r, "the backend failed: %s", qs_ctx_errmsg(ctx));
                r->backend_error = 1;
            } else {
                qsk_compare_outputs(c, &ref, &got, r);
            }
        }
    }
    qsk_result_finish(r);
    for (size_t i = 0; i < nin; i++)
        qs_tensor_free(&inputs[i]);
    qsk_results_free(&got);
    *ref_keep = ref;
    r->seconds = qsk_now_seconds() - t0;
}

/* Prints what a case printed: its failure lines, under --skips the reason it was not
 * supported, then under --timing its TIME line. */
static void print_case(const run_opts *o, const case_result *r)
{
    if (r->out)
        fputs(r->out, stdout);
    if (o->skips && r->kind == QSK_RES_SKIP)
        printf("SKIP %s %s [%s:%d]\n", r->c->id, r->message, r->c->file, r->c->pos.line);
    if (o->timing) {
        char line[1024];
        qsk_timing_text(r, line, sizeof line);
        printf("TIME %s\n", line);
    }
}

/* Rewrites the digests of one file from the reference outputs, atomically. */
static int update_file(qs_ctx *ctx, const qsk_case_file *f, qsk_results *refs)
{
    size_t extra = 0;
    for (size_t i = 0; i < f->ncases; i++)
        extra += f->cases[i].noutputs * 80;
    char *out = malloc(f->len + extra + 1);
    if (!out)
        return -1;
    size_t w = 0, r = 0;
    for (size_t i = 0; i < f->ncases; i++)
        for (size_t k = 0; k < f->cases[i].noutputs; k++) {
            const qsk_output *o = &f->cases[i].outputs[k];
            const qs_tensor *t = qsk_results_get(&refs[i], o->name);
            if (!t)
                continue;
            memcpy(out + w, f->text + r, o->digest_start - r);
            w += o->digest_start - r;
            char hex[65];
            tensor_digest(t, hex);
            w += (size_t)sprintf(out + w, "sha256:%s", hex);
            r = o->digest_end;
        }
    memcpy(out + w, f->text + r, f->len - r);
    w += f->len - r;
    int changed = w != f->len || memcmp(out, f->text, w) != 0;
    int rc = 0;
    if (changed) {
        rc = qsk_write_file(ctx, f->path, out, w) == QS_OK ? 0 : -1;
        if (rc == 0)
            printf("updated digests in %s\n", f->path);
    }
    free(out);
    return rc;
}

static int selected(const qsk_case *c, const char *filter, int tiers)
{
    return (tiers & (1 << c->tier)) && (!filter || fnmatch(filter, c->id, 0) == 0);
}

/* Runs the selected cases in this process, printing each case's failure lines as it
 * finishes, and rewrites digests per file under --update-digests. Returns nonzero on an
 * I/O failure. */
static int run_sequential(qs_ctx *ctx, const run_opts *o, const qsk_suite *s, const qsk_case **sel,
                          size_t n, const qsk_plugin *pl, case_result *rs)
{
    int failed = 0;
    size_t j = 0;
    qsk_progress pg;
    qsk_progress_init(&pg, n, !o->quiet);
    for (size_t i = 0; i < s->nfiles; i++) {
        const qsk_case_file *f = &s->files[i];
        qsk_results *refs = calloc(f->ncases + 1, sizeof *refs);
        if (!refs)
            return 1;
        for (size_t k = 0; k < f->ncases && j < n; k++) {
            if (sel[j] != &f->cases[k])
                continue;
            qsk_progress_show(&pg, j, sel[j]->id);
            run_case(ctx, sel[j], pl, o->update_digests, &rs[j], &refs[k]);
            qsk_progress_clear(&pg);
            print_case(o, &rs[j]);
            j++;
        }
        if (o->update_digests && update_file(ctx, f, refs) != 0) {
            fprintf(stderr, "qspec run: %s\n", qs_ctx_errmsg(ctx));
            failed = 1;
        }
        for (size_t k = 0; k < f->ncases; k++)
            qsk_results_free(&refs[k]);
        free(refs);
    }
    return failed;
}

/* Writes all of buf to fd; returns nonzero on failure. */
static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* A process of --jobs: runs cases w, w+jobs, ... and writes each result to fd as the case's
 * index (32 bits) and its result frame (worker.h). On the reference it runs them itself;
 * with a plugin (pw, a copy of the kit's worker settings) through a worker process of its
 * own, so the plugin still never runs in a process of the kit's [CASE-ISOLATE]. */
static void jobs_process(qs_ctx *ctx, const qsk_case **sel, size_t n, int w, int jobs,
                         const qsk_worker *pw, int fd)
{
    qsk_worker own;
    if (pw) {
        own = *pw;
        own.pid = 0;
        own.started = 0;
    }
    for (size_t j = (size_t)w; j < n; j += (size_t)jobs) {
        case_result r;
        if (pw) {
            qsk_worker_run(ctx, &own, j, 0, &r, NULL, NULL);
        } else {
            qsk_results ref;
            run_case(ctx, sel[j], NULL, 0, &r, &ref);
            qsk_results_free(&ref);
        }
        uint32_t index = (uint32_t)j;
        if (write_all(fd, &index, sizeof index) || qsk_result_send(fd, &r))
            _exit(3);
        qsk_result_free(&r);
    }
    if (pw)
        qsk_worker_stop(&own);
    _exit(0);
}

/* Parses the records a --jobs process wrote into rs; returns nonzero if they are malformed. */
static int parse_records(const char *buf, size_t len, const qsk_case **sel, size_t n,
                         case_result *rs)
{
    size_t at = 0;
    while (at < len) {
        uint32_t head[2]; /* the case's index, its frame's length */
        if (len - at < sizeof head)
            return 1;
        memcpy(head, buf + at, sizeof head);
        at += sizeof head;
        if (head[0] >= n || len - at < head[1])
            return 1;
        case_result *r = &rs[head[0]];
        qsk_result_init(r, sel[head[0]]);
        if (qsk_result_parse(buf + at, head[1], sel[head[0]], r) != 0)
            return 1;
        at += head[1];
    }
    return 0;
}

/* A worker's pipe and what has been read from it. */
typedef struct worker_pipe {
    int fd;
    pid_t pid;
    char *buf;
    size_t len, cap;
} worker_pipe;

/* Reads what is available on one worker's pipe; returns 1 at its end, -1 on error. */
static int drain(worker_pipe *wp)
{
    if (wp->len + 65536 > wp->cap) {
        size_t cap = wp->cap ? wp->cap * 2 : (size_t)1 << 20;
        char *g = realloc(wp->buf, cap);
        if (!g)
            return -1;
        wp->buf = g;
        wp->cap = cap;
    }
    ssize_t r = read(wp->fd, wp->buf + wp->len, wp->cap - wp->len);
    if (r < 0)
        return errno == EINTR ? 0 : -1;
    if (r == 0)
        return 1;
    wp->len += (size_t)r;
    return 0;
}

/* --jobs N: runs the selected cases on N processes at once (each with a plugin worker of its
 * own when pw is set) and gathers their records, so the report is the same, line for line,
 * as a run in one process. */
static int run_parallel(qs_ctx *ctx, const qsk_case **sel, size_t n, int jobs, const qsk_worker *pw,
                        case_result *rs)
{
    fflush(stdout);
    worker_pipe *wp = calloc((size_t)jobs, sizeof *wp);
    struct pollfd *pfd = calloc((size_t)jobs, sizeof *pfd);
    int started = 0, failed = wp == NULL || pfd == NULL;
    for (; !failed && started < jobs; started++) {
        int fds[2];
        if (pipe(fds) != 0) {
            failed = 1;
            break;
        }
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[0]);
            close(fds[1]);
            failed = 1;
            break;
        }
        if (pid == 0) {
            close(fds[0]);
            for (int w = 0; w < started; w++)
                close(wp[w].fd);
            jobs_process(ctx, sel, n, started, jobs, pw, fds[1]);
        }
        close(fds[1]);
        wp[started] = (worker_pipe){fds[0], pid, NULL, 0, 0};
    }
    int open_pipes = started;
    while (!failed && open_pipes > 0) {
        int np = 0;
        for (int w = 0; w < started; w++)
            if (wp[w].fd >= 0)
                pfd[np++] = (struct pollfd){wp[w].fd, POLLIN, 0};
        if (poll(pfd, (nfds_t)np, -1) < 0 && errno != EINTR) {
            failed = 1;
            break;
        }
        for (int w = 0; w < started; w++) {
            if (wp[w].fd < 0)
                continue;
            int ready = 0;
            for (int q = 0; q < np; q++)
                if (pfd[q].fd == wp[w].fd && pfd[q].revents)
                    ready = 1;
            if (!ready)
                continue;
            int r = drain(&wp[w]);
            if (r != 0) {
                close(wp[w].fd);
                wp[w].fd = -1;
                open_pipes--;
                failed |= r < 0;
            }
        }
    }
    for (int w = 0; wp && w < started; w++) {
        int status = 0;
        if (wp[w].fd >= 0)
            close(wp[w].fd);
        waitpid(wp[w].pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            parse_records(wp[w].buf, wp[w].len, sel, n, rs))
            failed = 1;
        free(wp[w].buf);
    }
    free(wp);
    free(pfd);
    if (failed)
        qs_ctx_error(ctx, QS_ERR_INTERNAL, "a worker of --jobs %d failed", jobs);
    return failed;
}

/* Finds the plugin named by --backend (none for the reference) without loading it: a
 * plugin runs in worker processes only [CASE-ISOLATE]. Returns an exit status after
 * printing the usage error, or 0. */
static int resolve_backend(qs_ctx *ctx, const char *name, char **path)
{
    *path = NULL;
    if (strcmp(name, "ref") == 0)
        return 0;
    if (qsk_plugin_resolve(ctx, name, path) != QS_OK)
        return qsk_usage_error("run", "%s", qs_ctx_errmsg(ctx));
    return 0;
}

/* Runs one case for a worker: the reference, then the worker's plugin. */
static void work_case(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c, case_result *r)
{
    qsk_results ref;
    run_case(ctx, c, pl, 0, r, &ref);
    qsk_results_free(&ref);
}

/* Runs the selected cases on the plugin, one at a time, in worker processes (w started),
 * printing each case's failure lines as it finishes [CASE-ISOLATE]. */
static void run_isolated(qs_ctx *ctx, const run_opts *o, qsk_worker *w, case_result *rs)
{
    qsk_progress pg;
    qsk_progress_init(&pg, w->n, !o->quiet);
    int nranks = qsk_ranks_self()->nranks, seq = 0;
    for (size_t j = 0; j < w->n; j++) {
        qsk_progress_show(&pg, j, w->sel[j]->id);
        qsk_worker_run(ctx, w, j, seq, &rs[j], qsk_progress_tick, &pg);
        qsk_progress_clear(&pg);
        if (nranks > 1 && qsk_case_dist_ranks(w->sel[j]) == nranks)
            seq++; /* the ranks' distributed cases, counted alike on every rank */
        print_case(o, &rs[j]);
    }
    qsk_worker_stop(w);
}

/* The state of a certification run: the suite folder, its must-pass list, the package. */
typedef struct certify_run {
    const char *suite_dir;
    qsk_mustpass list;
    qsk_outdir out;
} certify_run;

/* Prepares a certification run before the backend is loaded: the suite folder and its
 * must-pass list. Returns an exit status after a usage error, or 0. */
static int certify_prepare(qs_ctx *ctx, int npaths, char **paths, certify_run *cr)
{
    memset(cr, 0, sizeof *cr);
    cr->suite_dir = npaths ? paths[0] : qsk_default_case_dir();
    struct stat sb;
    if (stat(cr->suite_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qsk_usage_error("run", "--certify runs a whole suite folder: '%s' is not a folder",
                               cr->suite_dir);
    if (qsk_mustpass_load(ctx, cr->suite_dir, &cr->list) != QS_OK)
        return qsk_usage_error("run", "%s", qs_ctx_errmsg(ctx));
    return 0;
}

/* Checks the loaded suite against the list and opens the package directory. */
static int certify_open(qs_ctx *ctx, const run_opts *o, const qsk_suite *s, certify_run *cr)
{
    if (s->nerrors)
        return QSK_EXIT_USAGE; /* the load errors are printed; a suite must load whole */
    if (qsk_mustpass_check(ctx, &cr->list, s) != QS_OK ||
        qsk_outdir_open(ctx, &cr->out, o->certify) != QS_OK)
        return qsk_usage_error("run", "%s", qs_ctx_errmsg(ctx));
    return 0;
}

static int picked(const run_opts *o, const certify_run *cr, const qsk_case *c)
{
    const qsk_ranks *me = qsk_ranks_self(); /* a rank > 0 runs the distributed cases only */
    if (me->rank > 0 && qsk_case_dist_ranks(c) != me->nranks)
        return 0;
    return o->certify ? c->tier == QSK_TIER_DEFAULT && qsk_mustpass_match(&cr->list, c->id)
                      : selected(c, o->filter, o->tiers);
}

static int write_report(qs_ctx *ctx, const char *path, void (*writer)(FILE *, const qsk_report *),
                        const qsk_report *rep)
{
    qsk_atomic a;
    if (qsk_atomic_open(ctx, &a, path) != QS_OK)
        return -1;
    writer(a.fp, rep);
    if (qsk_atomic_commit(ctx, &a) != QS_OK)
        return -1;
    return 0;
}

/* Writes the reports asked for; returns nonzero after an I/O error (already printed). */
static int write_reports(qs_ctx *ctx, const run_opts *o, const qsk_report *rep)
{
    const char *paths[3] = {o->junit, o->report_json, o->html};
    void (*writers[3])(FILE *, const qsk_report *) = {qsk_report_junit, qsk_report_json,
                                                      qsk_report_html};
    int failed = 0;
    for (int i = 0; i < 3; i++)
        if (paths[i] && write_report(ctx, paths[i], writers[i], rep) != 0) {
            fprintf(stderr, "qspec run: %s\n", qs_ctx_errmsg(ctx));
            failed = 1;
        }
    return failed;
}

/* Writes and commits the certification package; returns nonzero after an error. */
static int certify_finish(qs_ctx *ctx, const run_opts *o, certify_run *cr, const qsk_report *rep,
                          const char *plugin_path)
{
    qsk_certify_info ci = {cr->suite_dir, &cr->list, plugin_path};
    if (qsk_certify_write(ctx, &cr->out, rep, &ci) != QS_OK ||
        qsk_outdir_commit(ctx, &cr->out) != QS_OK) {
        fprintf(stderr, "qspec run: %s\n", qs_ctx_errmsg(ctx));
        qsk_outdir_abort(&cr->out);
        return 1;
    }
    if (qsk_certify_ok(rep))
        printf("certification package %s: every must-pass case passed or is not supported\n",
               o->certify);
    else
        printf("certification package %s: NOT certified: %s\n", o->certify,
               rep->counts[QSK_RES_FAIL] ? "must-pass cases failed" : "no must-pass case passed");
    return 0;
}

/* Selects, runs and reports the cases of a loaded suite; returns the exit status. */
static int run_loaded(qs_ctx *ctx, const run_opts *o, const qsk_suite *s, const char *plugin_path,
                      certify_run *cr, qsk_report *rep)
{
    size_t total = 0;
    for (size_t i = 0; i < s->nfiles; i++)
        total += s->files[i].ncases;
    case_result *rs = calloc(total + 1, sizeof *rs);
    const qsk_case **sel = calloc(total + 1, sizeof *sel);
    size_t n = 0;
    int io_failed = rs == NULL || sel == NULL;
    for (size_t i = 0; !io_failed && i < s->nfiles; i++)
        for (size_t k = 0; k < s->files[i].ncases; k++)
            if (picked(o, cr, &s->files[i].cases[k]))
                sel[n++] = &s->files[i].cases[k];
    if (!io_failed && n == 0 && qsk_ranks_self()->rank == 0) {
        /* A run that ran nothing proves nothing: it is not a pass. */
        if (s->nerrors == 0)
            fprintf(stderr, "qspec run: nothing to run: %s\n",
                    total && o->filter ? "--filter matches no case"
                    : total            ? "no case was selected"
                    : s->nfiles        ? "the case files hold no case"
                                       : "no case file found (case files end in .yaml)");
        free(rs);
        free(sel);
        return QSK_EXIT_USAGE;
    }
    qsk_worker w;
    memset(&w, 0, sizeof w);
    if (!io_failed && plugin_path) {
        w = (qsk_worker){.path = plugin_path,
                         .sel = sel,
                         .n = n,
                         .timeout_s = o->timeout,
                         .join = qsk_ranks_child(),
                         .fn = work_case};
        if (qsk_worker_start(ctx, &w) != QS_OK) {
            int rc = qsk_usage_error("run", "%s", qs_ctx_errmsg(ctx));
            free(rs);
            free(sel);
            return rc;
        }
        rep->backend_name = w.name;
        rep->backend_version = w.version;
        rep->device = w.device;
        if (o->jobs >
            1) { /* the first worker said who the backend is; each process starts its own */
            qsk_worker_stop(&w);
            if (run_parallel(ctx, sel, n, o->jobs, &w, rs) != 0) {
                fprintf(stderr, "qspec run: %s\n", qs_ctx_errmsg(ctx));
                io_failed = 1;
            }
            for (size_t j = 0; !io_failed && j < n; j++)
                print_case(o, &rs[j]);
        } else {
            run_isolated(ctx, o, &w, rs);
        }
    } else if (!io_failed && o->jobs > 1) {
        if (run_parallel(ctx, sel, n, o->jobs, NULL, rs) != 0) {
            fprintf(stderr, "qspec run: %s\n", qs_ctx_errmsg(ctx));
            io_failed = 1;
        }
        for (size_t j = 0; !io_failed && j < n; j++)
            print_case(o, &rs[j]);
    } else if (!io_failed) {
        io_failed = run_sequential(ctx, o, s, sel, n, NULL, rs);
    }
    for (size_t j = 0; !io_failed && j < n; j++)
        rep->counts[rs[j].kind]++;
    rep->rs = rs;
    rep->n = n;
    if (!io_failed)
        io_failed = write_reports(ctx, o, rep);
    if (!io_failed && o->certify)
        io_failed = certify_finish(ctx, o, cr, rep, plugin_path);
    if (s->nerrors)
        printf("%zu case file%s could not be loaded (see above)\n", s->nerrors,
               s->nerrors == 1 ? "" : "s");
    printf("%zu passed, %zu failed, %zu skipped\n", rep->counts[QSK_RES_PASS],
           rep->counts[QSK_RES_FAIL], rep->counts[QSK_RES_SKIP]);
    int rc = (s->nerrors || io_failed)            ? QSK_EXIT_USAGE
             : o->certify && !qsk_certify_ok(rep) ? QSK_EXIT_FAIL
             : rep->counts[QSK_RES_FAIL]          ? QSK_EXIT_FAIL
                                                  : QSK_EXIT_OK;
    for (size_t j = 0; rs && j < n; j++)
        qsk_result_free(&rs[j]);
    free(rs);
    free(sel);
    return rc;
}

static int do_run(const run_opts *o, int npaths, char **paths)
{
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("run", "out of memory");
    qsk_report rep;
    memset(&rep, 0, sizeof rep);
    qsk_report_date(rep.date);
    certify_run cr;
    memset(&cr, 0, sizeof cr);
    char *suite_arg[1] = {NULL};
    int rc = o->certify ? certify_prepare(ctx, npaths, paths, &cr) : 0;
    char *plugin_path = NULL; /* every rank's first worker joins the ranks when it opens */
    if (rc == 0)
        rc = resolve_backend(ctx, o->backend, &plugin_path);
    qsk_suite s;
    memset(&s, 0, sizeof s);
    if (rc == 0 && o->certify) {
        suite_arg[0] = qsk_strdup(cr.suite_dir);
        if (!suite_arg[0])
            rc = qsk_usage_error("run", "out of memory");
        npaths = 1;
        paths = suite_arg;
    }
    if (rc == 0 && qsk_suite_load(ctx, npaths, paths, &s) != QS_OK)
        rc = qsk_usage_error("run", "%s", qs_ctx_errmsg(ctx));
    for (size_t i = 0; rc == 0 && i < s.nerrors; i++)
        fprintf(stderr, "%s\n", s.errors[i]);
    if (rc == 0 && o->certify)
        rc = certify_open(ctx, o, &s, &cr);
    if (rc == 0) {
        rep.backend = o->backend;
        rep.backend_name = "ref"; /* a plugin's worker names its own */
        rep.backend_version = qs_version();
        rep.device = "host CPU (the reference)";
        rep.suite = &s;
        if (o->certify)
            rep.title = "qspec certification report";
        rc = run_loaded(ctx, o, &s, plugin_path, &cr, &rep);
    }
    free(suite_arg[0]);
    qsk_outdir_abort(&cr.out);
    qsk_mustpass_free(&cr.list);
    qsk_suite_free(&s);
    free(plugin_path);
    qs_ctx_free(ctx);
    return rc;
}

/* A certification run allows no option that changes what runs or how it is judged. */
static int certify_check_opts(const run_opts *o, int npaths)
{
    const char *bad = o->filter           ? "--filter"
                      : o->update_digests ? "--update-digests"
                      : o->report_json    ? "--report-json"
                      : o->junit          ? "--junit"
                      : o->html           ? "--html"
                                          : NULL;
    if (bad)
        return qsk_usage_error("run",
                               "--certify runs the fixed must-pass list and writes its own "
                               "reports: %s is not allowed with it",
                               bad);
    if (npaths > 1)
        return qsk_usage_error("run", "--certify takes one suite folder, got %d paths", npaths);
    return 0;
}

static int run_run(int argc, char **argv)
{
    run_opts o = {.backend = "ref",
                  .jobs = 1,
                  .ranks = 1,
                  .timeout = QSK_DEFAULT_TIMEOUT,
                  .tiers = 1 << QSK_TIER_DEFAULT};
    int i = 0, tier_given = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (qsk_is_help(a)) {
            qsk_print_help(stdout, &qsk_cmd_run);
            return QSK_EXIT_OK;
        }
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-')
            break;
        const char **slot = strcmp(a, "--backend") == 0       ? &o.backend
                            : strcmp(a, "--filter") == 0      ? &o.filter
                            : strcmp(a, "--report-json") == 0 ? &o.report_json
                            : strcmp(a, "--junit") == 0       ? &o.junit
                            : strcmp(a, "--html") == 0        ? &o.html
                            : strcmp(a, "--certify") == 0     ? &o.certify
                                                              : NULL;
        if (slot) {
            if (i + 1 >= argc)
                return qsk_usage_error("run", "option '%s' needs a value", a);
            *slot = argv[++i];
        } else if (strcmp(a, "--jobs") == 0 || strcmp(a, "-j") == 0) {
            if (i + 1 >= argc)
                return qsk_usage_error("run", "option '%s' needs a value", a);
            char *end;
            long j = strtol(argv[++i], &end, 10);
            if (*end != '\0' || j < 1 || j > 256)
                return qsk_usage_error("run", "--jobs '%s' is not a number from 1 to 256", argv[i]);
            o.jobs = (int)j;
        } else if (strcmp(a, "--ranks") == 0) {
            if (i + 1 >= argc)
                return qsk_usage_error("run", "option '%s' needs a value", a);
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end != '\0' || r < 1 || r > 64)
                return qsk_usage_error("run", "--ranks '%s' is not a number from 1 to 64", argv[i]);
            o.ranks = (int)r;
        } else if (strcmp(a, "--timeout") == 0) {
            if (i + 1 >= argc)
                return qsk_usage_error("run", "option '%s' needs a value", a);
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i] || t < 1 || t > 86400)
                return qsk_usage_error("run",
                                       "--timeout '%s' is not a number of seconds from 1 to "
                                       "86400",
                                       argv[i]);
            o.timeout = (int)t;
        } else if (strcmp(a, "--tier") == 0) {
            if (i + 1 >= argc)
                return qsk_usage_error("run", "option '%s' needs a value", a);
            if ((o.tiers = tier_mask(argv[++i])) < 0)
                return qsk_usage_error("run", "--tier '%s' is not default, large or all", argv[i]);
            tier_given = 1;
        } else if (strcmp(a, "--update-digests") == 0) {
            o.update_digests = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            o.quiet = 1;
        } else if (strcmp(a, "--timing") == 0) {
            o.timing = 1;
        } else if (strcmp(a, "--skips") == 0) {
            o.skips = 1;
        } else {
            return qsk_usage_error("run", "unknown option '%s'", a);
        }
    }
    if (o.certify && tier_given)
        return qsk_usage_error("run", "--certify runs the must-pass list of the default tier: "
                                      "--tier is not allowed with it");
    if (o.certify) {
        int rc = certify_check_opts(&o, argc - i);
        if (rc)
            return rc;
    }
    const char *outs[4][2] = {{"--junit", o.junit},
                              {"--report-json", o.report_json},
                              {"--html", o.html},
                              {"--certify", o.certify}};
    for (int k = 0; k < 4; k++) {
        char why[512];
        if (outs[k][1] && qsk_check_out_path(outs[k][1], k == 3, why, sizeof why) != 0)
            return qsk_usage_error("run", "%s: %s", outs[k][0], why);
    }
    if (o.jobs > 1 && o.update_digests)
        return qsk_usage_error("run", "--jobs does not combine with --update-digests: the digests "
                                      "of a file are rewritten in one process");
    if (o.update_digests && strcmp(o.backend, "ref") != 0)
        return qsk_usage_error(
            "run", "--update-digests takes the reference's outputs: use it with --backend ref");
    if (o.ranks > 1 && (strcmp(o.backend, "ref") == 0 || o.jobs > 1 || o.certify))
        return qsk_usage_error("run", "--ranks starts one process per rank of a plugin backend: "
                                      "it needs --backend, and does not combine with --jobs or "
                                      "--certify (the reference simulates the ranks of every "
                                      "case in one process)");
    if (qsk_ranks_child() && o.ranks != qsk_ranks_self()->nranks)
        return qsk_usage_error("run", "rank %d: --ranks %d, but the run has %d ranks",
                               qsk_ranks_self()->rank, o.ranks, qsk_ranks_self()->nranks);
    if (o.ranks > 1 && !qsk_ranks_child())
        return qsk_ranks_launch(o.ranks, argc, argv);
    if (qsk_ranks_self()->rank > 0) /* rank 0 reports */
        o.report_json = o.junit = o.html = NULL;
    return do_run(&o, argc - i, argv + i);
}

const qsk_command qsk_cmd_run = {
    "run", "run conformance cases on a backend and report",
    "usage: qspec run [--backend ref|NAME|PATH] [--filter GLOB] [--tier T]\n"
    "                 [--report-json FILE] [--junit FILE] [--html FILE] [--jobs N]\n"
    "                 [--ranks N] [--timeout S] [--update-digests] [--quiet] [--timing]\n"
    "                 [--skips]\n"
    "                 [CASES...]\n"
    "       qspec run --certify PKGDIR [--backend B] [--jobs N] [--timeout S] [--quiet]\n"
    "                 [--timing]\n"
    "                 [SUITE-DIR]\n\n"
    "Runs the conformance cases in CASES (files, or folders searched for *.yaml; by default\n"
    "the installed suite, or the folder QSPEC_CASES names). For every case the reference\n"
    "computes the outputs and checks them against the case's golden SHA-256 digests (a\n"
    "mismatch is a reference regression); a plugin backend then runs the case and each\n"
    "output is compared with the reference's as the case says. A case whose op the backend\n"
    "lacks is reported as not supported (skipped), never run on the reference instead.\n\n"
    "  --backend B        ref (default), a plugin name (cuda) or a path to a plugin\n"
    "  --filter GLOB      run only the cases whose id matches GLOB\n"
    "  --tier T           the tier of cases to run: default (the default), large (the\n"
    "                     production-size cases, skipped otherwise) or all. A large case with\n"
    "                     'reference: none' runs on a plugin with no reference run: only its\n"
    "                     variants' checks of each other (self-consistency) judge it\n"
    "  --report-json F    write the results as JSON to F\n"
    "  --junit F          write the results as JUnit XML to F\n"
    "  --html F           write a self-contained HTML report to F, with an error histogram\n"
    "                     for every output that failed its comparison\n"
    "  --jobs N, -j N     run the cases on N processes at once, each with a worker of its\n"
    "                     own for a plugin (the report is the same, in the same order)\n"
    "  --ranks N          run a plugin backend as N processes, one per rank (device), joined\n"
    "                     through its distributed slots: the distributed cases of N ranks run\n"
    "                     on all of them, the other cases on rank 0, which reports; a case of\n"
    "                     another number of ranks is not supported (default 1)\n"
    "  --timeout S        a plugin runs in worker processes, never in qspec's own: a case\n"
    "                     whose worker crashes, exits or runs longer than S seconds fails\n"
    "                     with the reason, and the run goes on in a fresh worker (default\n"
    "                     300)\n"
    "  --update-digests   rewrite the cases' golden digests from the reference (ref only)\n"
    "  --quiet            no progress line (on a terminal only: cases done of the total,\n"
    "                     the case running, the time since the run began)\n"
    "  --timing           after each case a line 'TIME ID: ...': its wall time, the\n"
    "                     reference's part, and on a plugin the time in each of its kernel\n"
    "                     slots with the number of calls (the JSON report always has them)\n"
    "  --skips            a line 'SKIP ID REASON [FILE:LINE]' for each case the backend\n"
    "                     does not support (the reports always have the reasons)\n"
    "  --certify PKGDIR   a certification run: the cases of the suite's must-pass list\n"
    "                     (SUITE-DIR/certify.list; SUITE-DIR defaults to the installed\n"
    "                     suite), with no --filter, --update-digests or report options;\n"
    "                     writes the package PKGDIR (a new directory): manifest.json,\n"
    "                     manifest.sha256, results.json, junit.xml, report.html. Check it\n"
    "                     with 'qspec verify-package PKGDIR'.\n\n"
    "Each failure prints one line: FAIL, the case id, the seed, the output, the first\n"
    "mismatching index, expected and observed in hex and decimal, the mismatch count and\n"
    "the case's file:line; at most 3 lines per case. The last line is\n"
    "'N passed, N failed, N skipped'. Exit status: 0 all passed, 1 some failed (under\n"
    "--certify: the backend is not certified), 2 bad usage or a case file that could not\n"
    "be loaded (the other files still run; a certification run stops).\n",
    run_run};

/* Loads the suite for list/show/coverage; prints load errors; returns 2 on any. */
static int load_for(const char *cmd, qs_ctx *ctx, int argc, char **argv, qsk_suite *s)
{
    if (qsk_suite_load(ctx, argc, argv, s) != QS_OK)
        return qsk_usage_error(cmd, "%s", qs_ctx_errmsg(ctx));
    for (size_t i = 0; i < s->nerrors; i++)
        fprintf(stderr, "%s\n", s->errors[i]);
    return s->nerrors ? QSK_EXIT_USAGE : QSK_EXIT_OK;
}

static int list_run(int argc, char **argv)
{
    const char *filter = NULL;
    int i = 0, tiers = 1 << QSK_TIER_DEFAULT;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_list);
            return QSK_EXIT_OK;
        }
        int tier = strcmp(argv[i], "--tier") == 0;
        if (!tier && strcmp(argv[i], "--filter") != 0)
            return qsk_usage_error("list", "unknown option '%s'", argv[i]);
        if (i + 1 >= argc)
            return qsk_usage_error("list", "option '%s' needs a value", argv[i]);
        if (!tier)
            filter = argv[++i];
        else if ((tiers = tier_mask(argv[++i])) < 0)
            return qsk_usage_error("list", "--tier '%s' is not default, large or all", argv[i]);
    }
    qs_ctx *ctx = qs_ctx_new();
    qsk_suite s;
    int rc = load_for("list", ctx, argc - i, argv + i, &s);
    if (rc == QSK_EXIT_OK || s.files) {
        for (size_t f = 0; f < s.nfiles; f++)
            for (size_t k = 0; k < s.files[f].ncases; k++)
                if (selected(&s.files[f].cases[k], filter, tiers))
                    printf("%s%s\n", s.files[f].cases[k].id,
                           s.files[f].cases[k].tier == QSK_TIER_LARGE ? " (tier large)" : "");
    }
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_list = {
    "list", "list the ids of conformance cases",
    "usage: qspec list [--filter GLOB] [--tier default|large|all] [CASES...]\n\n"
    "Prints one case id per line, for the cases in CASES (files or folders; by default the\n"
    "installed suite) of the tier selected (default: the default tier; a large case's line\n"
    "ends in ' (tier large)'). Exit status 2 when a case file cannot be loaded.\n",
    list_run};

static const char *gen_text(const qsk_input *in, char *buf, size_t cap)
{
    if (in->gen == QSK_GEN_VALUES)
        snprintf(buf, cap, "%zu explicit value%s", in->nvalues, in->nvalues == 1 ? "" : "s");
    else
        snprintf(buf, cap, "%s(%g, %g) seed %llu offset %llu",
                 in->gen == QSK_GEN_UNIFORM ? "uniform" : "normal", in->a, in->b,
                 (unsigned long long)in->seed, (unsigned long long)in->offset);
    return buf;
}

static void show_case(const qsk_case *c)
{
    char buf[160];
    printf("id: %s\nfile: %s:%d\nop: %s\n", c->id, c->file, c->pos.line, c->op);
    if (c->tier != QSK_TIER_DEFAULT || c->self_only)
        printf("tier: %s\nreference: %s\n", qsk_tier_name(c->tier),
               c->self_only ? "none (self-consistency only)" : "compare");
    if (c->description)
        printf("description: %s\n", c->description);
    printf("rules:");
    for (size_t i = 0; i < c->nrules; i++)
        printf(" %s", c->rules[i]);
    printf("\nparams:");
    for (size_t i = 0; i < c->nparams; i++)
        printf(" %s=%s", c->params[i].key, c->params[i].value);
    printf("\ninputs:\n");
    for (size_t i = 0; i < c->ninputs; i++) {
        const qsk_input *in = &c->inputs[i];
        printf("  %s: %s [", in->name, qs_dtype_name(in->dtype));
        for (int d = 0; d < in->ndim; d++)
            printf("%s%lld", d ? ", " : "", (long long)in->shape[d]);
        printf("], %s", gen_text(in, buf, sizeof buf));
        if (in->ninject)
            printf(", %zu injected value%s", in->ninject, in->ninject == 1 ? "" : "s");
        printf("\n");
    }
    printf("outputs:\n");
    for (size_t i = 0; i < c->noutputs; i++)
        printf("  %s: %s, digest %s%s\n", c->outputs[i].name,
               qsk_cmp_text(&c->outputs[i], buf, sizeof buf),
               c->outputs[i].digest[0] ? "sha256:" : "",
               c->outputs[i].digest[0] ? c->outputs[i].digest : "pending");
}

static int show_run(int argc, char **argv)
{
    if (argc >= 1 && qsk_is_help(argv[0])) {
        qsk_print_help(stdout, &qsk_cmd_show);
        return QSK_EXIT_OK;
    }
    if (argc < 1)
        return qsk_usage_error("show", "needs a case id (see 'qspec list')");
    if (argc >= 2 && strcmp(argv[0], "--id") == 0) /* qspec show --id ID [CASES...] */
        argv++, argc--;
    else if (argv[0][0] == '-')
        return qsk_usage_error("show", "unknown option '%s'", argv[0]);
    struct stat sb;
    if (argc == 2 && stat(argv[0], &sb) == 0 && stat(argv[1], &sb) != 0) {
        char *t = argv[0]; /* CASE-FILE ID, the order of gen and verify */
        argv[0] = argv[1];
        argv[1] = t;
    }
    qs_ctx *ctx = qs_ctx_new();
    qsk_suite s;
    int rc = load_for("show", ctx, argc - 1, argv + 1, &s);
    int found = 0;
    for (size_t f = 0; rc == QSK_EXIT_OK && f < s.nfiles; f++)
        for (size_t k = 0; k < s.files[f].ncases; k++)
            if (strcmp(s.files[f].cases[k].id, argv[0]) == 0) {
                show_case(&s.files[f].cases[k]);
                found = 1;
            }
    if (rc == QSK_EXIT_OK && !found)
        rc = qsk_usage_error("show", "no case with id '%s'", argv[0]);
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_show = {
    "show", "show one case: its file, op, rules, inputs and outputs",
    "usage: qspec show [--id] CASE-ID [CASES...]   (or: qspec show CASE-FILE CASE-ID)\n\n"
    "Prints the case with that id: where it is defined, its op and parameters, the spec\n"
    "rules it covers, a summary of its inputs (dtype, shape, generator, injected values)\n"
    "and its outputs (comparison and golden digest).\n",
    show_run};

static int coverage_run(int argc, char **argv)
{
    if (argc >= 1 && qsk_is_help(argv[0])) {
        qsk_print_help(stdout, &qsk_cmd_coverage);
        return QSK_EXIT_OK;
    }
    if (argc >= 1 && argv[0][0] == '-')
        return qsk_usage_error("coverage", "unknown option '%s'", argv[0]);
    qs_ctx *ctx = qs_ctx_new();
    qsk_suite s;
    int rc = load_for("coverage", ctx, argc, argv, &s);
    size_t nrules, uncovered = 0;
    const char *const *rules = qsk_rules(&nrules);
    for (size_t r = 0; rc == QSK_EXIT_OK && r < nrules; r++) {
        size_t count = 0;
        for (size_t f = 0; f < s.nfiles; f++)
            for (size_t k = 0; k < s.files[f].ncases; k++)
                for (size_t j = 0; j < s.files[f].cases[k].nrules; j++)
                    count += strcmp(s.files[f].cases[k].rules[j], rules[r]) == 0;
        printf("%-32s %zu\n", rules[r], count);
        uncovered += count == 0;
    }
    if (rc == QSK_EXIT_OK)
        printf("%zu rules, %zu covered by cases, %zu by none (unit tests may cover them)\n", nrules,
               nrules - uncovered, uncovered);
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_coverage = {
    "coverage", "print how many cases cite each rule of the spec",
    "usage: qspec coverage [CASES...]\n\n"
    "Prints each rule ID defined in spec/ with the number of cases in CASES (default: the\n"
    "installed suite) that cite it, then a total. `make check` separately fails when a rule\n"
    "is cited by no case and no unit test.\n",
    coverage_run};
