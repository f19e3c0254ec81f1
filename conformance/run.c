/* run.c: the records of running a case ([CASE-RUN], [CASE-REPORT]): failure lines, the
 * golden-digest check of the reference's outputs, and the comparison of a backend's
 * outputs with the reference's, keeping each failed comparison (with its error histogram)
 * for the reports. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run.h"
#include "sha256.h"

void qsk_result_init(qsk_case_result *r, const qsk_case *c)
{
    memset(r, 0, sizeof *r);
    r->c = c;
    r->kind = QSK_RES_PASS;
    r->ref_seconds = -1;
}

void qsk_result_free(qsk_case_result *r)
{
    free(r->out);
    free(r->fails);
    r->out = NULL;
    r->fails = NULL;
    r->outlen = r->nfails = 0;
}

/* Appends text to the case's output buffer (dropped when out of memory). */
static void append_out(qsk_case_result *r, const char *text, size_t n)
{
    char *g = realloc(r->out, r->outlen + n + 1);
    if (!g)
        return;
    memcpy(g + r->outlen, text, n);
    r->outlen += n;
    g[r->outlen] = '\0';
    r->out = g;
}

static uint64_t case_seed(const qsk_case *c)
{
    return c->ninputs ? c->inputs[0].seed : 0;
}

void qsk_result_fail(qsk_case_result *r, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (r->kind != QSK_RES_FAIL)
        snprintf(r->message, sizeof r->message, "%s", buf);
    r->kind = QSK_RES_FAIL;
    if (r->lines++ < QSK_MAX_FAIL_LINES) {
        char line[1024];
        int k = snprintf(line, sizeof line, "FAIL %s seed=%llu %s [%s:%d]\n", r->c->id,
                         (unsigned long long)case_seed(r->c), buf, r->c->file, r->c->pos.line);
        append_out(r, line, k < (int)sizeof line ? (size_t)k : sizeof line - 1);
    }
}

void qsk_result_finish(qsk_case_result *r)
{
    if (r->lines <= QSK_MAX_FAIL_LINES)
        return;
    char more[256];
    int k = snprintf(more, sizeof more, "FAIL %s: %d more failure lines not shown\n", r->c->id,
                     r->lines - QSK_MAX_FAIL_LINES);
    append_out(r, more, k < (int)sizeof more ? (size_t)k : sizeof more - 1);
}

const char *qsk_res_name(qsk_res_kind k)
{
    return k == QSK_RES_PASS ? "pass" : k == QSK_RES_FAIL ? "fail" : "not_supported";
}

const char *qsk_cmp_text(const qsk_output *o, char *buf, size_t cap)
{
    switch (o->cmp) {
    case QSK_CMP_BITWISE:
        snprintf(buf, cap, "bitwise (nan: %s)", o->nan_any ? "any" : "canonical");
        break;
    case QSK_CMP_ULP:
        snprintf(buf, cap, "ulp %g", o->p1);
        break;
    case QSK_CMP_ALLCLOSE:
        snprintf(buf, cap, "allclose atol %g rtol %g", o->p1, o->p2);
        break;
    case QSK_CMP_GEMM_BOUND:
        snprintf(buf, cap, "gemm_bound %g", o->p1);
        break;
    case QSK_CMP_RMS_RATIO:
        snprintf(buf, cap, "rms_ratio %g", o->p1);
        break;
    default:
        snprintf(buf, cap, "cosine %g", o->p1);
        break;
    }
    return buf;
}

void qsk_check_digests(const qsk_case *c, const qsk_results *ref, qsk_case_result *r, int update)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        const qsk_output *o = &c->outputs[i];
        const qs_tensor *t = qsk_results_get(ref, o->name);
        char hex[65];
        if (!t) {
            qsk_result_fail(r, "output=%s: the reference produced no such output", o->name);
            continue;
        }
        qsk_sha256_hex(t->data, t->nbytes, hex);
        if (update)
            continue;
        if (!o->digest[0])
            qsk_result_fail(
                r, "output=%s: no golden digest (digest: pending); run with --update-digests",
                o->name);
        else if (strcmp(hex, o->digest) != 0)
            qsk_result_fail(
                r,
                "output=%s: reference regression: digest sha256:%s differs from the golden digest",
                o->name, hex);
    }
}

/* Keeps a failed comparison for the reports (dropped when out of memory). */
static void keep_fail(qsk_case_result *r, const qsk_output *o, size_t numel,
                      const qsk_cmp_result *cr)
{
    qsk_out_fail *g = realloc(r->fails, (r->nfails + 1) * sizeof *g);
    if (!g)
        return;
    r->fails = g;
    qsk_out_fail *f = &g[r->nfails++];
    memset(f, 0, sizeof *f);
    snprintf(f->output, sizeof f->output, "%s", o->name);
    qsk_cmp_text(o, f->compare, sizeof f->compare);
    f->o = o;
    f->numel = numel;
    f->cmp = *cr;
}

void qsk_compare_outputs(const qsk_case *c, const qsk_results *ref, const qsk_results *got,
                         qsk_case_result *r)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        const qsk_output *o = &c->outputs[i];
        const qs_tensor *e = qsk_results_get(ref, o->name), *x = qsk_results_get(got, o->name);
        if (!e)
            continue;
        if (!x) {
            qsk_result_fail(r, "output=%s: the backend produced no such output", o->name);
            continue;
        }
        if (got->checked[x - got->t]) /* compared by the op [CASE-PLUGIN-TOL] */
            continue;
        char bname[QSK_NAME_LEN + 8];
        snprintf(bname, sizeof bname, "%s.bound", o->name);
        qsk_cmp_result cr;
        if (qsk_compare(o, e, x, qsk_results_get(ref, bname), &cr))
            continue;
        keep_fail(r, o, e->numel, &cr);
        if (cr.detail[0])
            qsk_result_fail(r, "output=%s: %s", o->name, cr.detail);
        else if (cr.mismatches == 0)
            qsk_result_fail(r, "output=%s: metric %.9g outside the bound %.9g", o->name, cr.metric,
                            o->p1);
        else
            qsk_result_fail(r, "output=%s index=%zu expected=%s observed=%s mismatches=%zu/%zu",
                            o->name, cr.first, cr.expected, cr.observed, cr.mismatches, e->numel);
    }
}

double qsk_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double qsk_backend_seconds(const qsk_case_result *r)
{
    double total = 0;
    for (int i = 0; i < QSK_NSLOTS; i++)
        total += r->slots[i].seconds;
    return total;
}

void qsk_timing_text(const qsk_case_result *r, char *buf, size_t cap)
{
    size_t at = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (at < cap)                                                                              \
            at += (size_t)snprintf(buf + at, cap - at, __VA_ARGS__);                               \
    } while (0)
    PUT("%s: %.3f s; ", r->c->id, r->seconds);
    if (r->ref_seconds < 0)
        PUT("reference not run");
    else
        PUT("reference %.3f s", r->ref_seconds);
    if (r->metered) {
        unsigned long calls = 0;
        int order[QSK_NSLOTS], n = 0;
        for (int i = 0; i < QSK_NSLOTS; i++) {
            calls += r->slots[i].calls;
            if (r->slots[i].calls == 0)
                continue;
            int k = n++; /* insertion by time, longest first */
            while (k > 0 && r->slots[order[k - 1]].seconds < r->slots[i].seconds) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = i;
        }
        PUT("; backend %.3f s in %lu slot call%s", qsk_backend_seconds(r), calls,
            calls == 1 ? "" : "s");
        for (int k = 0; k < n; k++)
            PUT("%s %s %u x %.3f s", k ? "," : ":", qsk_slot_names[order[k]],
                r->slots[order[k]].calls, r->slots[order[k]].seconds);
    }
#undef PUT
}
