/* suite.c: gathering case files and loading them, each checked against the schema and
 * its op; a broken file is reported and the rest still load. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops.h"
#include "suite.h"

#ifndef QSPEC_CASEDIR
#define QSPEC_CASEDIR "/usr/local/share/qspec/cases"
#endif

static const char *const rule_ids[] = {
#include "rules.inc"
    NULL};

const char *const *qsk_rules(size_t *n)
{
    *n = sizeof rule_ids / sizeof rule_ids[0] - 1;
    return rule_ids;
}

int qsk_rule_defined(const char *id, void *unused)
{
    (void)unused;
    size_t lo = 0, hi = sizeof rule_ids / sizeof rule_ids[0] - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(rule_ids[mid], id);
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

const char *qsk_default_case_dir(void)
{
    const char *env = getenv("QSPEC_CASES");
    return env && *env ? env : QSPEC_CASEDIR;
}

typedef struct pathlist {
    char **p;
    size_t n;
} pathlist;

static int push_path(pathlist *l, const char *path)
{
    char **g = realloc(l->p, (l->n + 1) * sizeof *g);
    if (!g)
        return -1;
    l->p = g;
    l->p[l->n] = malloc(strlen(path) + 1);
    if (!l->p[l->n])
        return -1;
    strcpy(l->p[l->n++], path);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int gather(const char *path, pathlist *l, int top)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return top ? 1 : 0;
    if (!S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        if (top || (n > 5 && strcmp(path + n - 5, ".yaml") == 0))
            return push_path(l, path) ? -1 : 0;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d)
        return 1;
    pathlist sub = {NULL, 0};
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d)) != NULL && r == 0) {
        if (e->d_name[0] == '.')
            continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p) {
            r = -1;
            break;
        }
        size_t plen = strlen(path);
        snprintf(p, n, "%.*s/%s", (int)(plen > 1 && path[plen - 1] == '/' ? plen - 1 : plen), path,
                 e->d_name);
        r = push_path(&sub, p);
        free(p);
    }
    closedir(d);
    if (sub.n > 0) /* an empty folder has no array to sort */
        qsort(sub.p, sub.n, sizeof *sub.p, cmp_str);
    for (size_t i = 0; i < sub.n; i++) {
        if (r == 0)
            r = gather(sub.p[i], l, 0);
        free(sub.p[i]);
    }
    free(sub.p);
    return r;
}

static int push_error(qsk_suite *s, const char *msg)
{
    char **g = realloc(s->errors, (s->nerrors + 1) * sizeof *g);
    if (!g)
        return -1;
    s->errors = g;
    s->errors[s->nerrors] = malloc(strlen(msg) + 1);
    if (!s->errors[s->nerrors])
        return -1;
    strcpy(s->errors[s->nerrors++], msg);
    return 0;
}

qs_status qsk_suite_load(qs_ctx *ctx, int npaths, char **paths, qsk_suite *s)
{
    memset(s, 0, sizeof *s);
    pathlist l = {NULL, 0};
    const char *dflt = qsk_default_case_dir();
    qs_status st = QS_OK;
    for (int i = 0; i < (npaths ? npaths : 1) && st == QS_OK; i++) {
        const char *path = npaths ? paths[i] : dflt;
        int r = gather(path, &l, 1);
        if (r > 0)
            st = qs_ctx_error(ctx, QS_ERR_IO, "%s: no such file or folder", path);
        else if (r < 0)
            st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    if (st == QS_OK) {
        s->files = calloc(l.n + 1, sizeof *s->files);
        if (!s->files)
            st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == QS_OK && i < l.n; i++) {
        qsk_case_file f;
        qs_status fs = qsk_case_file_load(ctx, l.p[i], qsk_rule_defined, NULL, &f);
        for (size_t k = 0; fs == QS_OK && k < f.ncases; k++)
            fs = qsk_case_check(ctx, &f.cases[k]);
        for (size_t j = 0; fs == QS_OK && j < s->nfiles; j++)
            for (size_t a = 0; fs == QS_OK && a < s->files[j].ncases; a++)
                for (size_t b = 0; fs == QS_OK && b < f.ncases; b++)
                    if (strcmp(s->files[j].cases[a].id, f.cases[b].id) == 0)
                        fs = qs_ctx_error(ctx, QS_ERR_FORMAT,
                                          "%s:%d:%d: case id '%s' is also defined in %s", f.path,
                                          f.cases[b].pos.line, f.cases[b].pos.col, f.cases[b].id,
                                          s->files[j].path);
        if (fs == QS_OK) {
            s->files[s->nfiles++] = f;
            continue;
        }
        qsk_case_file_free(&f);
        if (fs == QS_ERR_NOMEM || push_error(s, qs_ctx_errmsg(ctx)) != 0)
            st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.p[i]);
    free(l.p);
    if (st != QS_OK)
        qsk_suite_free(s);
    return st;
}

void qsk_suite_free(qsk_suite *s)
{
    for (size_t i = 0; i < s->nfiles; i++)
        qsk_case_file_free(&s->files[i]);
    free(s->files);
    for (size_t i = 0; i < s->nerrors; i++)
        free(s->errors[i]);
    free(s->errors);
    memset(s, 0, sizeof *s);
}
