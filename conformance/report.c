/* report.c: the JSON and JUnit reports of a run, and the text escapes every report uses.
 * The JSON report keeps one case a line, so that `grep` reads it as well as a JSON parser;
 * the JUnit report follows the schema CI dashboards read (testsuites > testsuite > testcase
 * with failure, skipped or error). */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "qspec/qspec.h"
#include "report.h"

/* The length of the valid UTF-8 sequence at s (1..4), or 0 when s does not start one. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] < 0x80             ? 1
               : (s[0] & 0xE0) == 0xC0 ? 2
               : (s[0] & 0xF0) == 0xE0 ? 3
               : (s[0] & 0xF8) == 0xF0 ? 4
                                       : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (n == 2 && s[0] < 0xC2)
        return 0; /* overlong */
    if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
        return 0; /* overlong, or a surrogate */
    if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || s[0] > 0xF4 || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;
    return n;
}

void qsk_json_string(FILE *fp, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', fp);
    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0) {
            fputs("\\ufffd", fp);
            p++;
        } else if (*p == '"' || *p == '\\') {
            fprintf(fp, "\\%c", *p++);
        } else if (*p < 0x20) {
            fprintf(fp, "\\u%04x", *p++);
        } else {
            fwrite(p, 1, n, fp);
            p += n;
        }
    }
    fputc('"', fp);
}

void qsk_xml_text(FILE *fp, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0) {
            fputs("&#xfffd;", fp);
            p++;
            continue;
        }
        switch (*p) {
        case '<':
            fputs("&lt;", fp);
            break;
        case '>':
            fputs("&gt;", fp);
            break;
        case '&':
            fputs("&amp;", fp);
            break;
        case '"':
            fputs("&quot;", fp);
            break;
        case '\'':
            fputs("&#39;", fp);
            break;
        default:
            if (*p < 0x20 && *p != '\n' && *p != '\t')
                fputc(' ', fp);
            else
                fwrite(p, 1, n, fp);
            break;
        }
        p += n;
    }
}

void qsk_file_stem(const char *path, char *buf, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".yaml") == 0)
        n -= 5;
    snprintf(buf, cap, "%.*s", (int)n, base);
}

void qsk_report_date(char date[32])
{
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !gmtime_r(&now, &tm) ||
        strftime(date, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(date, 32, "unknown");
}

/* [CASE-TIMING] A case's times: "seconds", "reference_seconds" (null when the reference did
 * not run), and on a plugin "backend_seconds" and "slots", each slot that ran with its calls
 * and seconds. */
static void json_timing(FILE *fp, const qsk_case_result *c)
{
    fprintf(fp, "\"seconds\": %.6f, \"reference_seconds\": ", c->seconds);
    if (c->ref_seconds < 0)
        fputs("null", fp);
    else
        fprintf(fp, "%.6f", c->ref_seconds);
    if (!c->metered)
        return;
    fprintf(fp, ", \"backend_seconds\": %.6f, \"slots\": {", qsk_backend_seconds(c));
    int first = 1;
    for (int i = 0; i < QSK_NSLOTS; i++)
        if (c->slots[i].calls) {
            fprintf(fp, "%s\"%s\": {\"calls\": %u, \"seconds\": %.6f}", first ? "" : ", ",
                    qsk_slot_names[i], c->slots[i].calls, c->slots[i].seconds);
            first = 0;
        }
    fputs("}", fp);
}

void qsk_report_json(FILE *fp, const qsk_report *r)
{
    fprintf(fp, "{\n  \"kit\": \"qspec\",\n  \"version\": \"%s\",\n  \"abi\": %u,\n  \"backend\": ",
            qs_version(), QS_BACKEND_ABI_VERSION);
    qsk_json_string(fp, r->backend);
    fputs(",\n  \"backend_name\": ", fp);
    qsk_json_string(fp, r->backend_name);
    fputs(",\n  \"backend_version\": ", fp);
    qsk_json_string(fp, r->backend_version);
    fputs(",\n  \"device\": ", fp);
    qsk_json_string(fp, r->device);
    fputs(",\n  \"date\": ", fp);
    qsk_json_string(fp, r->date);
    fprintf(fp,
            ",\n  \"summary\": {\"passed\": %zu, \"failed\": %zu, \"skipped\": %zu, "
            "\"load_errors\": %zu},\n  \"load_errors\": [",
            r->counts[QSK_RES_PASS], r->counts[QSK_RES_FAIL], r->counts[QSK_RES_SKIP],
            r->suite->nerrors);
    for (size_t i = 0; i < r->suite->nerrors; i++) {
        fputs(i ? ", " : "", fp);
        qsk_json_string(fp, r->suite->errors[i]);
    }
    fputs("],\n  \"results\": [\n", fp);
    for (size_t i = 0; i < r->n; i++) {
        const qsk_case_result *c = &r->rs[i];
        fputs("    {\"id\": ", fp);
        qsk_json_string(fp, c->c->id);
        fputs(", \"file\": ", fp);
        qsk_json_string(fp, c->c->file);
        fprintf(fp, ", \"line\": %d, \"status\": \"%s\", \"message\": ", c->c->pos.line,
                qsk_res_name(c->kind));
        qsk_json_string(fp, c->message);
        fputs(", ", fp);
        json_timing(fp, c);
        fputs(", \"rules\": [", fp);
        for (size_t k = 0; k < c->c->nrules; k++) {
            fputs(k ? ", " : "", fp);
            qsk_json_string(fp, c->c->rules[k]);
        }
        fprintf(fp, "]}%s\n", i + 1 < r->n ? "," : "");
    }
    fputs("  ]\n}\n", fp);
}

static void junit_property(FILE *fp, const char *name, const char *value)
{
    fprintf(fp, "    <property name=\"%s\" value=\"", name);
    qsk_xml_text(fp, value);
    fputs("\"/>\n", fp);
}

void qsk_report_junit(FILE *fp, const qsk_report *r)
{
    size_t tests = r->n + r->suite->nerrors;
    char stamp[32];
    snprintf(stamp, sizeof stamp, "%.19s", r->date); /* JUnit's timestamp has no zone */
    double total = 0;
    for (size_t i = 0; i < r->n; i++)
        total += r->rs[i].seconds;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", fp);
    fprintf(fp,
            "<testsuites name=\"qspec\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
            "skipped=\"%zu\" time=\"%.3f\">\n",
            tests, r->counts[QSK_RES_FAIL], r->suite->nerrors, r->counts[QSK_RES_SKIP], total);
    fputs("<testsuite name=\"qspec ", fp);
    qsk_xml_text(fp, r->backend);
    fprintf(fp,
            "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\" "
            "timestamp=\"%s\">\n",
            tests, r->counts[QSK_RES_FAIL], r->suite->nerrors, r->counts[QSK_RES_SKIP], total,
            stamp);
    fputs("  <properties>\n", fp);
    junit_property(fp, "kit_version", qs_version());
    junit_property(fp, "backend", r->backend);
    junit_property(fp, "backend_version", r->backend_version);
    junit_property(fp, "device", r->device);
    fputs("  </properties>\n", fp);
    for (size_t i = 0; i < r->suite->nerrors; i++) {
        fprintf(fp,
                "  <testcase classname=\"qspec.load\" name=\"load-error-%zu\" time=\"0\">\n"
                "    <error message=\"",
                i);
        qsk_xml_text(fp, r->suite->errors[i]);
        fputs("\" type=\"load\">", fp);
        qsk_xml_text(fp, r->suite->errors[i]);
        fputs("</error>\n  </testcase>\n", fp);
    }
    for (size_t i = 0; i < r->n; i++) {
        const qsk_case_result *c = &r->rs[i];
        char stem[QSK_ID_LEN];
        qsk_file_stem(c->c->file, stem, sizeof stem);
        for (char *p = stem; *p; p++)
            if (*p == '.')
                *p = '_'; /* dashboards split classnames at dots */
        fputs("  <testcase classname=\"qspec.", fp);
        qsk_xml_text(fp, stem);
        fputs("\" name=\"", fp);
        qsk_xml_text(fp, c->c->id);
        fputs("\" file=\"", fp);
        qsk_xml_text(fp, c->c->file);
        fprintf(fp, "\" line=\"%d\" time=\"%.6f\"", c->c->pos.line, c->seconds);
        if (c->kind == QSK_RES_PASS) {
            fputs("/>\n", fp);
            continue;
        }
        if (c->kind == QSK_RES_SKIP) {
            fputs(">\n    <skipped message=\"", fp);
            qsk_xml_text(fp, c->message);
            fputs("\"/>\n  </testcase>\n", fp);
            continue;
        }
        fputs(">\n    <failure message=\"", fp);
        qsk_xml_text(fp, c->message);
        fputs("\" type=\"mismatch\">", fp);
        qsk_xml_text(fp, c->out ? c->out : "");
        fputs("</failure>\n  </testcase>\n", fp);
    }
    fputs("</testsuite>\n</testsuites>\n", fp);
}
