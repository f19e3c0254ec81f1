/* report_html.c: the HTML report of a run ([CASE-REPORT-HTML]): one self-contained page (no
 * scripts, no external resources, well-formed XHTML syntax) with the run's summary, each
 * failed case with its failure lines and, for every output that failed its comparison, an
 * inline SVG histogram of the elements' errors on a log2 axis with the tolerance marked,
 * then a table of every case. */
#include <math.h>
#include <string.h>

#include "qspec/qspec.h"
#include "report.h"

static const char css[] =
    "body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}h3{font-size:1em;margin:0}"
    "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:2px 6px;"
    "text-align:left;vertical-align:top;font-size:0.85em}"
    "table.summary th{background:#f3f3f3}"
    "table.cases th{background:#f3f3f3;position:sticky;top:0}"
    "tr.fail td{background:#fbe3e1}tr.skip td{color:#777}"
    "td.status{font-weight:bold}tr.fail td.status{color:#b03a2e}tr.pass td.status{color:#2e7d32}"
    ".verdict{font-size:1.2em;font-weight:bold;padding:6px 10px;display:inline-block}"
    ".verdict.pass{background:#e3f4e4;color:#2e7d32}.verdict.fail{background:#fbe3e1;"
    "color:#b03a2e}"
    "section.case{border-left:4px solid #b03a2e;padding:4px 12px;margin:1em 0}"
    "pre{background:#f7f7f7;padding:6px;overflow-x:auto;font-size:0.8em;white-space:pre-wrap}"
    "figure{margin:0.5em 0}figcaption{font-size:0.85em;margin-bottom:4px}"
    "code{font-size:0.9em}p.where,p.note{font-size:0.85em;margin:2px 0}";

/* The plot area of a histogram, in SVG user units. */
enum { SVG_W = 600, SVG_H = 220, PAD_L = 60, PAD_R = 16, PAD_T = 30, PAD_B = 50 };

typedef struct axis {
    int lo, hi; /* the log2 range shown */
} axis;

static double ax_x(const axis *a, double k)
{
    return PAD_L + (k - a->lo) * (SVG_W - PAD_L - PAD_R) / (double)(a->hi - a->lo);
}

/* The tolerance's position on the log2 axis; 0 when it has none (bitwise or whole-tensor). */
static int tol_position(const qsk_err_hist *h, double *t)
{
    if (!(h->tol > 0))
        return 0;
    *t = log2(h->tol);
    return 1;
}

static axis hist_axis(const qsk_err_hist *h)
{
    int kmin = 0, kmax = 0, any = 0;
    for (int b = 0; b < QSK_HIST_BINS; b++) {
        if (!h->bins[b])
            continue;
        int k = b + QSK_HIST_KMIN;
        if (!any || k < kmin)
            kmin = k;
        if (!any || k > kmax)
            kmax = k;
        any = 1;
    }
    axis a = {any ? kmin - 2 : -2, any ? kmax + 1 : 2};
    double t;
    if (tol_position(h, &t)) {
        if (floor(t) - 1 < a.lo)
            a.lo = (int)floor(t) - 1;
        if (ceil(t) + 1 > a.hi)
            a.hi = (int)ceil(t) + 1;
    }
    while (a.hi - a.lo < 6) {
        a.lo--;
        a.hi++;
    }
    if (h->scale == QSK_ERR_ULP || h->scale == QSK_ERR_ABS) {
        /* whole numbers: nothing lies below the bin (1/2, 1] */
        a.hi += a.lo < -1 ? -1 - a.lo : 0;
        a.lo = a.lo < -1 ? -1 : a.lo;
    }
    return a;
}

static const char *scale_title(const qsk_out_fail *f)
{
    switch (f->cmp.hist.scale) {
    case QSK_ERR_ULP:
        return "log2 of the distance in ulp (steps between codes)";
    case QSK_ERR_ABS:
        return "log2 |observed \xe2\x88\x92 expected|";
    case QSK_ERR_ALLOWED:
        return f->o->cmp == QSK_CMP_GEMM_BOUND
                   ? "log2 of |observed \xe2\x88\x92 expected| / (c \xc2\xb7 bound)"
                   : "log2 of |observed \xe2\x88\x92 expected| / (atol + rtol \xc2\xb7 "
                     "|expected|)";
    default:
        return "log2 of |observed \xe2\x88\x92 expected| / rms(expected)";
    }
}

/* The bar colour of bin k against the tolerance: within, straddling it, or beyond it. */
static const char *bar_fill(const qsk_err_hist *h, int k)
{
    double t;
    if (h->tol < 0)
        return "#7f8c9a";
    if (!tol_position(h, &t))
        return "#c0392b"; /* bitwise: any difference fails */
    if (k <= t)
        return "#6b8fb3";
    return k - 1 < t ? "#e6a23c" : "#c0392b";
}

static void svg_axes(FILE *fp, const qsk_out_fail *f, const axis *a, size_t ymax)
{
    double y0 = SVG_H - PAD_B, y1 = PAD_T;
    fprintf(fp, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#222\"/>\n", PAD_L, y0,
            SVG_W - PAD_R, y0);
    fprintf(fp, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#222\"/>\n", PAD_L, y0,
            PAD_L, y1);
    int step = 1;
    while ((a->hi - a->lo) / step > 16)
        step *= 2;
    for (int k = a->lo; k <= a->hi; k++) {
        if (((k % step) + step) % step != 0)
            continue;
        double x = ax_x(a, k);
        fprintf(fp, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\"/>\n", x,
                y0, x, y0 + 4);
        fprintf(fp,
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">2<tspan "
                "font-size=\"8\" dy=\"-5\">%d</tspan></text>\n",
                x, y0 + 17, k);
    }
    fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">",
            (PAD_L + SVG_W - PAD_R) / 2, SVG_H - 12);
    qsk_xml_text(fp, scale_title(f));
    fputs("</text>\n", fp);
    size_t ticks[3] = {0, ymax / 2, ymax};
    for (int i = 0; i < 3; i++) {
        if (i == 1 && (ticks[1] == 0 || ticks[1] == ymax))
            continue;
        double y = y0 - (double)ticks[i] * (y0 - y1) / (double)(ymax ? ymax : 1);
        fprintf(fp, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#222\"/>\n",
                PAD_L - 4, y, PAD_L, y);
        fprintf(fp, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%zu</text>\n",
                PAD_L - 6, y + 4, ticks[i]);
    }
    fprintf(fp,
            "<text x=\"14\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 14 %.1f)\">elements</text>\n",
            (y0 + y1) / 2, (y0 + y1) / 2);
}

static void svg_tolerance(FILE *fp, const qsk_out_fail *f, const axis *a)
{
    const qsk_err_hist *h = &f->cmp.hist;
    double t, x;
    char label[160];
    if (h->tol < 0) {
        snprintf(label, sizeof label, "%s: whole-tensor metric %.6g, no per-element tolerance",
                 f->compare, f->cmp.metric);
        fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"11\">", PAD_L + 4, PAD_T - 12);
        qsk_xml_text(fp, label);
        fputs("</text>\n", fp);
        return;
    }
    if (tol_position(h, &t)) {
        x = ax_x(a, t);
        snprintf(label, sizeof label, "tolerance (%s)", f->compare);
    } else {
        x = PAD_L;
        snprintf(label, sizeof label, "tolerance 0 (%s): every difference fails",
                 f->o->cmp == QSK_CMP_BITWISE ? "bitwise" : f->compare);
    }
    fprintf(fp,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\" stroke-width=\"2\" "
            "stroke-dasharray=\"6,4\"/>\n",
            x, PAD_T - 8, x, SVG_H - PAD_B);
    fprintf(fp, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"%s\">", x + 4, PAD_T - 12,
            x > SVG_W / 2 ? "end" : "start");
    qsk_xml_text(fp, label);
    fputs("</text>\n", fp);
}

/* The histogram of one failed output as inline SVG. */
static void svg_hist(FILE *fp, const qsk_out_fail *f)
{
    const qsk_err_hist *h = &f->cmp.hist;
    axis a = hist_axis(h);
    size_t ymax = 0;
    for (int b = 0; b < QSK_HIST_BINS; b++)
        if (h->bins[b] > ymax)
            ymax = h->bins[b];
    fprintf(fp,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" class=\"hist\">\n<title>",
            SVG_W, SVG_H, SVG_W, SVG_H);
    qsk_xml_text(fp, "error histogram of output ");
    qsk_xml_text(fp, f->output);
    fputs("</title>\n<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n", fp);
    double y0 = SVG_H - PAD_B, y1 = PAD_T;
    for (int b = 0; b < QSK_HIST_BINS; b++) {
        if (!h->bins[b])
            continue;
        int k = b + QSK_HIST_KMIN;
        double xa = ax_x(&a, k - 1), xb = ax_x(&a, k);
        double top = y0 - (double)h->bins[b] * (y0 - y1) / (double)ymax;
        fprintf(
            fp,
            "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"%s\"><title>%zu element%s with 2^%d &lt; error &#8804; 2^%d</title></rect>\n",
            xa + 1, top, xb - xa - 2 > 1 ? xb - xa - 2 : 1, y0 - top, bar_fill(h, k), h->bins[b],
            h->bins[b] == 1 ? "" : "s", k - 1, k);
        fprintf(fp,
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%zu</text>\n",
                (xa + xb) / 2, top - 3, h->bins[b]);
    }
    if (!h->binned)
        fprintf(fp,
                "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">no element has a "
                "finite error to draw</text>\n",
                (PAD_L + SVG_W - PAD_R) / 2, (PAD_T + SVG_H - PAD_B) / 2);
    svg_axes(fp, f, &a, ymax);
    svg_tolerance(fp, f, &a);
    fputs("</svg>\n", fp);
}

static void fail_caption(FILE *fp, const qsk_out_fail *f)
{
    const qsk_err_hist *h = &f->cmp.hist;
    fputs("<figcaption>output <b>", fp);
    qsk_xml_text(fp, f->output);
    fputs("</b>, compared ", fp);
    qsk_xml_text(fp, f->compare);
    if (f->cmp.detail[0]) {
        fputs(": ", fp);
        qsk_xml_text(fp, f->cmp.detail);
        fputs("</figcaption>\n", fp);
        return;
    }
    if (h->tol < 0)
        fprintf(fp, ": metric %.9g against the bound %.9g", f->cmp.metric, f->o->p1);
    else
        fprintf(fp, ": %zu of %zu elements fail", f->cmp.mismatches, f->numel);
    fprintf(fp, "; %zu exact, %zu with a finite error (drawn), %zu not measurable", h->exact,
            h->binned, h->special);
    if (h->binned)
        fprintf(fp, "; largest error %.6g at index %zu", h->max_err, h->max_index);
    fputs(".</figcaption>\n", fp);
}

static void rules_text(FILE *fp, const qsk_case *c)
{
    for (size_t k = 0; k < c->nrules; k++) {
        fputs(k ? ", " : "", fp);
        qsk_xml_text(fp, c->rules[k]);
    }
}

static void summary_row(FILE *fp, const char *key, const char *value)
{
    fprintf(fp, "<tr><th>%s</th><td>", key);
    qsk_xml_text(fp, value);
    fputs("</td></tr>\n", fp);
}

static void html_summary(FILE *fp, const qsk_report *r)
{
    char buf[256];
    int failed = r->counts[QSK_RES_FAIL] || r->suite->nerrors;
    fprintf(fp, "<p class=\"verdict %s\">%zu passed, %zu failed, %zu skipped</p>\n",
            failed ? "fail" : "pass", r->counts[QSK_RES_PASS], r->counts[QSK_RES_FAIL],
            r->counts[QSK_RES_SKIP]);
    fputs("<table class=\"summary\"><tbody>\n", fp);
    snprintf(buf, sizeof buf, "%s %s", r->backend_name, r->backend_version);
    summary_row(fp, "backend", buf);
    summary_row(fp, "--backend", r->backend);
    summary_row(fp, "device", r->device);
    snprintf(buf, sizeof buf, "qspec %s, backend ABI %u", qs_version(), QS_BACKEND_ABI_VERSION);
    summary_row(fp, "kit", buf);
    summary_row(fp, "date", r->date);
    snprintf(buf, sizeof buf, "%zu run: %zu passed, %zu failed, %zu not supported", r->n,
             r->counts[QSK_RES_PASS], r->counts[QSK_RES_FAIL], r->counts[QSK_RES_SKIP]);
    summary_row(fp, "cases", buf);
    snprintf(buf, sizeof buf, "%zu", r->suite->nerrors);
    summary_row(fp, "case files not loaded", buf);
    fputs("</tbody></table>\n", fp);
    if (r->suite->nerrors) {
        fputs("<h2>Case files that could not be loaded</h2>\n<ul>\n", fp);
        for (size_t i = 0; i < r->suite->nerrors; i++) {
            fputs("<li><code>", fp);
            qsk_xml_text(fp, r->suite->errors[i]);
            fputs("</code></li>\n", fp);
        }
        fputs("</ul>\n", fp);
    }
}

/* The table of cases, all of them or only the failed ones; failed ids link to their
 * details. */
static void html_case_table(FILE *fp, const qsk_report *r, int failed_only)
{
    static const char *const row_class[3] = {"pass", "fail", "skip"};
    fputs("<table class=\"cases\">\n<thead><tr><th>id</th><th>file:line</th><th>status</th>"
          "<th>rules</th><th>message</th></tr></thead>\n<tbody>\n",
          fp);
    for (size_t i = 0; i < r->n; i++) {
        const qsk_case_result *c = &r->rs[i];
        if (failed_only && c->kind != QSK_RES_FAIL)
            continue;
        fprintf(fp, "<tr class=\"%s\"><td>", row_class[c->kind]);
        if (c->kind == QSK_RES_FAIL)
            fprintf(fp, "<a href=\"#case-%zu\">", i);
        qsk_xml_text(fp, c->c->id);
        fputs(c->kind == QSK_RES_FAIL ? "</a></td><td>" : "</td><td>", fp);
        qsk_xml_text(fp, c->c->file);
        fprintf(fp, ":%d</td><td class=\"status\">%s</td><td>", c->c->pos.line,
                qsk_res_name(c->kind));
        rules_text(fp, c->c);
        fputs("</td><td>", fp);
        qsk_xml_text(fp, c->message);
        fputs("</td></tr>\n", fp);
    }
    fputs("</tbody>\n</table>\n", fp);
}

static void html_failed(FILE *fp, const qsk_report *r)
{
    if (!r->counts[QSK_RES_FAIL])
        return;
    fputs("<h2 id=\"failures\">Failed cases</h2>\n", fp);
    html_case_table(fp, r, 1);
    fputs("<h2>Failures in detail</h2>\n<p class=\"note\">Each histogram counts the elements of "
          "one output by their error on the scale the comparison judges them by: the bar at "
          "2<sup>k</sup> holds the errors in (2<sup>k\xe2\x88\x92"
          "1</sup>, 2<sup>k</sup>]. Exact elements are not drawn. Blue bars lie within the "
          "tolerance (the dashed line), red bars beyond it, amber bars straddle it.</p>\n",
          fp);
    for (size_t i = 0; i < r->n; i++) {
        const qsk_case_result *c = &r->rs[i];
        if (c->kind != QSK_RES_FAIL)
            continue;
        fprintf(fp, "<section class=\"case\" id=\"case-%zu\">\n<h3>", i);
        qsk_xml_text(fp, c->c->id);
        fputs("</h3>\n<p class=\"where\">", fp);
        qsk_xml_text(fp, c->c->file);
        fprintf(fp, ":%d; rules: ", c->c->pos.line);
        rules_text(fp, c->c);
        fputs("</p>\n<pre>", fp);
        qsk_xml_text(fp, c->out ? c->out : c->message);
        fputs("</pre>\n", fp);
        for (size_t k = 0; k < c->nfails; k++) {
            fputs("<figure>\n", fp);
            fail_caption(fp, &c->fails[k]);
            if (!c->fails[k].cmp.detail[0])
                svg_hist(fp, &c->fails[k]);
            fputs("</figure>\n", fp);
        }
        fputs("</section>\n", fp);
    }
}

void qsk_report_html(FILE *fp, const qsk_report *r)
{
    const char *title = r->title ? r->title : "qspec conformance report";
    fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
          "<meta charset=\"utf-8\"/>\n<title>",
          fp);
    qsk_xml_text(fp, title);
    fputs(": ", fp);
    qsk_xml_text(fp, r->backend_name);
    fprintf(fp, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", css);
    qsk_xml_text(fp, title);
    fputs("</h1>\n", fp);
    html_summary(fp, r);
    html_failed(fp, r);
    fputs("<h2>All cases</h2>\n", fp);
    html_case_table(fp, r, 0);
    fprintf(fp,
            "<p>Written by qspec %s. Each failure line gives the case, its seed, the output, "
            "the first mismatching element and the expected and observed codes in hex and "
            "decimal; <code>qspec show ID</code> prints a case.</p>\n</body>\n</html>\n",
            qs_version());
}
