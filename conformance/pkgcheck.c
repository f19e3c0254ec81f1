/* pkgcheck.c: reading a package's junit.xml and report.html back (pkgcheck.h). The readers
 * look for the exact markup report.c and report_html.c write; they are not XML parsers. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pkgcheck.h"

/* Copies the XML text [s, e) into buf with the kit's five entities decoded. */
static void unescape(const char *s, const char *e, char *buf, size_t cap)
{
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&#39;", '\''}};
    size_t w = 0;
    while (s < e && w + 1 < cap) {
        size_t k = 0;
        for (; *s == '&' && k < sizeof ents / sizeof ents[0]; k++)
            if ((size_t)(e - s) >= strlen(ents[k].ent) &&
                strncmp(s, ents[k].ent, strlen(ents[k].ent)) == 0)
                break;
        if (*s == '&' && k < sizeof ents / sizeof ents[0]) {
            buf[w++] = ents[k].c;
            s += strlen(ents[k].ent);
        } else {
            buf[w++] = *s++;
        }
    }
    buf[w] = '\0';
}

/* The value of attribute name in the tag starting at tag (up to its '>'), unescaped into
 * buf; 0 when the tag has no such attribute. */
static int attr(const char *tag, const char *name, char *buf, size_t cap)
{
    const char *end = strchr(tag, '>');
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(tag, key);
    if (!end || !p || p > end)
        return 0;
    p += strlen(key);
    const char *q = strchr(p, '"');
    if (!q || q > end)
        return 0;
    unescape(p, q, buf, cap);
    return 1;
}

static size_t attr_count(const char *tag, const char *name, int *ok)
{
    char buf[32], *end;
    if (!attr(tag, name, buf, sizeof buf)) {
        *ok = 0;
        return 0;
    }
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || *end)
        *ok = 0;
    return (size_t)v;
}

static int push(qsk_pkg_report *r, const char *id, size_t len, int kind)
{
    qsk_pkg_case *g = realloc(r->cases, (r->n + 1) * sizeof *g);
    if (!g)
        return 1;
    r->cases = g;
    unescape(id, id + len, g[r->n].id, sizeof g[r->n].id);
    g[r->n++].kind = kind;
    return 0;
}

int qsk_pkg_read_junit(const char *text, qsk_pkg_report *r)
{
    memset(r, 0, sizeof *r);
    const char *top = strstr(text, "<testsuites ");
    if (top) {
        int ok = 1;
        r->tests = attr_count(top, "tests", &ok);
        r->fail = attr_count(top, "failures", &ok);
        r->errors = attr_count(top, "errors", &ok);
        r->skip = attr_count(top, "skipped", &ok);
        r->found = ok;
    }
    static const char *const props[3] = {"backend", "backend_version", "device"};
    char *dst[3] = {r->backend, r->backend_version, r->device};
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "<property name=\"%s\" ", props[i]);
        const char *p = strstr(text, key);
        if (p)
            attr(p, "value", dst[i], sizeof r->backend);
    }
    for (const char *p = strstr(text, "<testcase "); p; p = strstr(p + 1, "<testcase ")) {
        char id[QSK_ID_LEN];
        const char *end = strchr(p, '>');
        if (!end || !attr(p, "name", id, sizeof id))
            continue;
        int kind = QSK_RES_PASS;
        if (end[-1] != '/') {
            const char *child = end + 1;
            while (*child == ' ' || *child == '\n')
                child++;
            kind = strncmp(child, "<failure", 8) == 0   ? QSK_RES_FAIL
                   : strncmp(child, "<skipped", 8) == 0 ? QSK_RES_SKIP
                                                        : -1;
        }
        if (kind == QSK_RES_PASS)
            r->pass++;
        if (push(r, id, strlen(id), kind))
            return 1;
    }
    return 0;
}

int qsk_pkg_read_html(const char *text, qsk_pkg_report *r)
{
    memset(r, 0, sizeof *r);
    const char *v = strstr(text, "<p class=\"verdict ");
    if (v && (v = strchr(v, '>')) != NULL) {
        unsigned long long a, b, c;
        char tail[2];
        if (sscanf(v + 1, "%llu passed, %llu failed, %llu skippe%1[d]", &a, &b, &c, tail) == 4) {
            r->pass = (size_t)a;
            r->fail = (size_t)b;
            r->skip = (size_t)c;
            r->found = 1;
        }
    }
    const char *t = NULL; /* the last table of cases holds them all (a first one, the failed) */
    for (const char *p = strstr(text, "<table class=\"cases\">"); p;
         p = strstr(p + 1, "<table class=\"cases\">"))
        t = p;
    const char *tend = t ? strstr(t, "</table>") : NULL;
    static const char *const cls[3] = {"pass", "fail", "skip"};
    for (const char *p = t ? strstr(t, "<tr class=\"") : NULL; p && p < tend;
         p = strstr(p + 1, "<tr class=\"")) {
        const char *q = p + strlen("<tr class=\"");
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if (strncmp(q, cls[k], strlen(cls[k])) == 0 && q[strlen(cls[k])] == '"')
                kind = k;
        const char *id = strstr(q, "<td>");
        if (!id)
            break;
        id += 4;
        if (strncmp(id, "<a href=\"#case-", 15) == 0 && (id = strchr(id, '>')) != NULL)
            id++;
        if (!id)
            break;
        const char *idend = strchr(id, '<');
        if (!idend)
            break;
        if (push(r, id, (size_t)(idend - id), kind))
            return 1;
    }
    return 0;
}

void qsk_pkg_report_free(qsk_pkg_report *r)
{
    free(r->cases);
    memset(r, 0, sizeof *r);
}
