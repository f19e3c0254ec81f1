/* cmd_certify.c: certification ([CASE-CERTIFY-LIST], [CASE-CERTIFY-PACKAGE],
 * [CASE-CERTIFY-VERIFY]): the suite's must-pass list, the package a `qspec run --certify`
 * writes (manifest with the kit, the case files' digests, the backend and the environment;
 * the results as JSON, JUnit and HTML; a digest over the manifest), and `qspec
 * verify-package`, which re-checks a package against a suite it trusts. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "certify.h"
#include "cli.h"
#include "fileio.h"
#include "pkgcheck.h"
#include "qspec/qspec.h"
#include "sha256.h"
#include "yamltree.h"

#define PACKAGE_FORMAT 1

#if defined(__clang__)
#define QSK_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define QSK_COMPILER "gcc " __VERSION__
#else
#define QSK_COMPILER "an unknown C11 compiler"
#endif

static const char *const report_files[3] = {"results.json", "junit.xml", "report.html"};

/* ------------------------------------------------------------------ the must-pass list */

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* A glob of case ids: the id characters of spec/cases.md and the glob characters * ? [ ]. */
static int glob_chars_ok(const char *g)
{
    for (const char *p = g; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || strchr("-._*?[]!", *p)))
            return 0;
    return *g != '\0';
}

static qs_status push_glob(qs_ctx *ctx, qsk_mustpass *m, const char *g, size_t len, int line)
{
    char **gl = realloc(m->globs, (m->n + 1) * sizeof *gl);
    if (gl)
        m->globs = gl;
    int *li = realloc(m->lines, (m->n + 1) * sizeof *li);
    if (li)
        m->lines = li;
    char *copy = malloc(len + 1);
    if (!gl || !li || !copy) {
        free(copy);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    memcpy(copy, g, len);
    copy[len] = '\0';
    if (!glob_chars_ok(copy)) {
        qs_status st = qs_ctx_error(ctx, QS_ERR_FORMAT,
                                    "%s:%d: '%s' is not a case-id glob (a-z 0-9 - . _ * ? [ ])",
                                    m->path, line, copy);
        free(copy);
        return st;
    }
    m->globs[m->n] = copy;
    m->lines[m->n++] = line;
    return QS_OK;
}

qs_status qsk_mustpass_load(qs_ctx *ctx, const char *suite_dir, qsk_mustpass *m)
{
    memset(m, 0, sizeof *m);
    m->path = path_join(suite_dir, QSK_MUSTPASS_FILE);
    if (!m->path)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    char *text;
    size_t len;
    qs_status st = qsk_read_file(ctx, m->path, &text, &len);
    if (st != QS_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", qs_ctx_errmsg(ctx));
        return qs_ctx_error(ctx, st, "the suite's must-pass list: %s", why);
    }
    qsk_sha256_hex(text, len, m->sha256);
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        int at = 1;
        for (const char *p = text; p < nul; p++)
            at += *p == '\n';
        free(text);
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d: a NUL byte: the list is plain text",
                            m->path, at);
    }
    int line = 1;
    for (const char *p = text; st == QS_OK && p < text + len; line++) {
        const char *eol = memchr(p, '\n', (size_t)(text + len - p));
        const char *end = eol ? eol : text + len, *hash = memchr(p, '#', (size_t)(end - p));
        const char *a = p, *b = hash ? hash : end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        for (const char *q = a; q < b && st == QS_OK; q++)
            if (isspace((unsigned char)*q))
                st = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d: one glob a line, got '%.*s'", m->path,
                                  line, (int)(b - a), a);
        if (st == QS_OK && b > a)
            st = push_glob(ctx, m, a, (size_t)(b - a), line);
        p = end + 1;
    }
    if (st == QS_OK && m->n == 0)
        st = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: the must-pass list is empty", m->path);
    free(text);
    return st;
}

int qsk_mustpass_match(const qsk_mustpass *m, const char *id)
{
    for (size_t i = 0; i < m->n; i++)
        if (fnmatch(m->globs[i], id, 0) == 0)
            return 1;
    return 0;
}

qs_status qsk_mustpass_check(qs_ctx *ctx, const qsk_mustpass *m, const qsk_suite *s)
{
    for (size_t g = 0; g < m->n; g++) {
        int hit = 0;
        for (size_t f = 0; f < s->nfiles && !hit; f++)
            for (size_t k = 0; k < s->files[f].ncases && !hit; k++)
                hit = fnmatch(m->globs[g], s->files[f].cases[k].id, 0) == 0;
        if (!hit)
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s:%d: '%s' matches no case of the suite (a stale line)", m->path,
                                m->lines[g], m->globs[g]);
    }
    for (size_t f = 0; f < s->nfiles; f++) { /* every case file has a case on the list */
        int hit = 0, certifiable = 0;        /* a certification runs the default tier [CASE-TIER] */
        for (size_t k = 0; k < s->files[f].ncases && !hit; k++) {
            certifiable |= s->files[f].cases[k].tier == QSK_TIER_DEFAULT;
            hit = qsk_mustpass_match(m, s->files[f].cases[k].id);
        }
        if (!hit && certifiable)
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s: no case of %s is on the list (add a line for it, or take the "
                                "file out of the suite)",
                                m->path, s->files[f].path);
    }
    return QS_OK;
}

void qsk_mustpass_free(qsk_mustpass *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->globs[i]);
    free(m->globs);
    free(m->lines);
    free(m->path);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ the package */

int qsk_certify_ok(const qsk_report *r)
{
    return r->counts[QSK_RES_FAIL] == 0 && r->counts[QSK_RES_PASS] > 0 && r->suite->nerrors == 0;
}

/* A case file's name relative to the suite folder ("formats-e4m3.yaml"). */
static const char *suite_relative(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (strncmp(path, dir, n) == 0 && path[n] == '/')
        return path + n + 1;
    const char *base = strrchr(path, '/');
    return base ? base + 1 : path;
}

/* The SHA-256 of a file's bytes, read in pieces; QS_ERR_IO if it cannot be read. */
static qs_status file_sha256(qs_ctx *ctx, const char *path, char hex[65])
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    qsk_sha256 s;
    qsk_sha256_init(&s);
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, fp)) > 0)
        qsk_sha256_update(&s, buf, got);
    int bad = ferror(fp);
    fclose(fp);
    if (bad)
        return qs_ctx_error(ctx, QS_ERR_IO, "%s: read error", path);
    uint8_t d[32];
    qsk_sha256_final(&s, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return QS_OK;
}

/* The first "model name" of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp)
        return;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, cap, "%s", colon);
        break;
    }
    fclose(fp);
}

static void json_field(FILE *fp, const char *indent, const char *key, const char *value,
                       const char *sep)
{
    fprintf(fp, "%s\"%s\": ", indent, key);
    if (value)
        qsk_json_string(fp, value);
    else
        fputs("null", fp);
    fputs(sep, fp);
}

static void manifest_environment(FILE *fp)
{
    struct utsname u;
    int have = uname(&u) == 0;
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    fputs("  \"environment\": {\n", fp);
    json_field(fp, "    ", "os", have ? u.sysname : "unknown", ",\n");
    json_field(fp, "    ", "os_release", have ? u.release : "unknown", ",\n");
    json_field(fp, "    ", "os_version", have ? u.version : "unknown", ",\n");
    json_field(fp, "    ", "machine", have ? u.machine : "unknown", ",\n");
    json_field(fp, "    ", "cpu", cpu, ",\n");
    json_field(fp, "    ", "compiler", QSK_COMPILER, "\n");
    fputs("  },\n", fp);
}

/* Number of results from case file path. */
static size_t cases_from(const qsk_report *r, const char *path)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += strcmp(r->rs[i].c->file, path) == 0;
    return n;
}

static void manifest_json(FILE *fp, const qsk_report *r, const qsk_certify_info *ci,
                          const char *plugin_sha, char report_sha[3][65])
{
    fprintf(fp,
            "{\n  \"kit\": \"qspec\",\n  \"package_format\": %d,\n  \"version\": \"%s\",\n"
            "  \"abi\": %u,\n",
            PACKAGE_FORMAT, qs_version(), QS_BACKEND_ABI_VERSION);
    json_field(fp, "  ", "date", r->date, ",\n");
    fprintf(fp, "  \"certified\": %s,\n", qsk_certify_ok(r) ? "true" : "false");
    fputs("  \"backend\": {\n", fp);
    json_field(fp, "    ", "given", r->backend, ",\n");
    json_field(fp, "    ", "name", r->backend_name, ",\n");
    json_field(fp, "    ", "version", r->backend_version, ",\n");
    json_field(fp, "    ", "device", r->device, ",\n");
    json_field(fp, "    ", "file", ci->plugin_path, ",\n");
    json_field(fp, "    ", "file_sha256", plugin_sha, "\n");
    fputs("  },\n", fp);
    manifest_environment(fp);
    json_field(fp, "  ", "suite", ci->suite_dir, ",\n");
    fprintf(fp, "  \"must_pass\": {\"file\": \"%s\", \"sha256\": \"%s\", \"cases\": %zu},\n",
            QSK_MUSTPASS_FILE, ci->list->sha256, r->n);
    fprintf(fp, "  \"summary\": {\"passed\": %zu, \"failed\": %zu, \"not_supported\": %zu},\n",
            r->counts[QSK_RES_PASS], r->counts[QSK_RES_FAIL], r->counts[QSK_RES_SKIP]);
    fputs("  \"case_files\": [\n", fp);
    int first = 1;
    for (size_t f = 0; f < r->suite->nfiles; f++) {
        const qsk_case_file *cf = &r->suite->files[f];
        size_t n = cases_from(r, cf->path);
        if (n == 0)
            continue;
        char hex[65];
        qsk_sha256_hex(cf->text, cf->len, hex);
        fputs(first ? "    {\"file\": " : ",\n    {\"file\": ", fp);
        qsk_json_string(fp, suite_relative(cf->path, ci->suite_dir));
        fprintf(fp, ", \"sha256\": \"%s\", \"cases\": %zu}", hex, n);
        first = 0;
    }
    fputs("\n  ],\n  \"reports\": [\n", fp);
    for (int i = 0; i < 3; i++)
        fprintf(fp, "    {\"file\": \"%s\", \"sha256\": \"%s\"}%s\n", report_files[i],
                report_sha[i], i < 2 ? "," : "");
    fputs("  ]\n}\n", fp);
}

/* Renders a writer's output into memory. */
static qs_status render(qs_ctx *ctx, void (*writer)(FILE *, const qsk_report *),
                        const qsk_report *r, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *fp = open_memstream(buf, len);
    if (!fp)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    writer(fp, r);
    if (fclose(fp) != 0) {
        free(*buf);
        *buf = NULL;
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    return QS_OK;
}

static qs_status put_file(qs_ctx *ctx, qsk_outdir *o, const char *name, const char *buf, size_t len)
{
    char *p = qsk_outdir_path(o, name);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status st = qsk_write_file(ctx, p, buf, len);
    free(p);
    return st;
}

qs_status qsk_certify_write(qs_ctx *ctx, qsk_outdir *o, const qsk_report *r,
                            const qsk_certify_info *ci)
{
    void (*writers[3])(FILE *, const qsk_report *) = {qsk_report_json, qsk_report_junit,
                                                      qsk_report_html};
    char sha[3][65], plugin_sha[65];
    qs_status st = QS_OK;
    if (ci->plugin_path)
        st = file_sha256(ctx, ci->plugin_path, plugin_sha);
    for (int i = 0; i < 3 && st == QS_OK; i++) {
        char *buf;
        size_t len;
        st = render(ctx, writers[i], r, &buf, &len);
        if (st != QS_OK)
            break;
        qsk_sha256_hex(buf, len, sha[i]);
        st = put_file(ctx, o, report_files[i], buf, len);
        free(buf);
    }
    char *man = NULL;
    size_t mlen = 0;
    FILE *fp = st == QS_OK ? open_memstream(&man, &mlen) : NULL;
    if (st == QS_OK && !fp)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    if (fp) {
        manifest_json(fp, r, ci, ci->plugin_path ? plugin_sha : NULL, sha);
        if (fclose(fp) != 0)
            st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    if (st == QS_OK)
        st = put_file(ctx, o, "manifest.json", man, mlen);
    if (st == QS_OK) {
        char hex[65], line[96];
        qsk_sha256_hex(man, mlen, hex);
        int k = snprintf(line, sizeof line, "%s  manifest.json\n", hex);
        st = put_file(ctx, o, "manifest.sha256", line, (size_t)k);
    }
    free(man);
    return st;
}

/* ------------------------------------------------------------------ verify-package */

#define MAX_SHOWN_PROBLEMS 20

#define SIG_FILE      "manifest.sha256.sig"
#define SIG_NAMESPACE "qspec-package"

typedef struct vp {
    const char *dir;
    size_t problems;
    const char *key; /* --key: the signer's public key file, or NULL */
} vp;

static void problem(vp *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(vp *v, const char *fmt, ...)
{
    if (v->problems++ >= MAX_SHOWN_PROBLEMS)
        return;
    va_list ap;
    printf("INVALID %s: ", v->dir);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* The text of a scalar field of a mapping, or NULL when absent or not a scalar. */
static const char *field(const qsk_ynode *map, const char *key)
{
    const qsk_ynode *n = qsk_yaml_get(map, key);
    return n && n->kind == QSK_Y_SCALAR ? n->text : NULL;
}

/* Reads and parses DIR/name; NULL (with the problem recorded) when it cannot. */
static qsk_ynode *read_json(qs_ctx *ctx, vp *v, const char *name, char **text, size_t *len)
{
    char *p = path_join(v->dir, name);
    qsk_ynode *root = NULL;
    *text = NULL;
    if (!p || qsk_read_file(ctx, p, text, len) != QS_OK) {
        problem(v, "%s is missing or unreadable", name);
    } else if (qsk_yaml_parse(ctx, p, *text, *len, &root) != QS_OK) {
        problem(v, "%s is not valid JSON: %s", name, qs_ctx_errmsg(ctx));
        root = NULL;
    } else if (root->kind != QSK_Y_MAP) {
        problem(v, "%s is not a JSON object", name);
        qsk_yaml_free(root);
        root = NULL;
    }
    free(p);
    return root;
}

static void check_manifest_digest(qs_ctx *ctx, vp *v, const char *man, size_t mlen)
{
    char *p = path_join(v->dir, "manifest.sha256"), *text = NULL, hex[65];
    size_t len;
    if (!p || qsk_read_file(ctx, p, &text, &len) != QS_OK) {
        problem(v, "manifest.sha256 is missing or unreadable");
    } else {
        qsk_sha256_hex(man, mlen, hex);
        char want[96];
        snprintf(want, sizeof want, "%s  manifest.json\n", hex);
        if (strcmp(text, want) != 0)
            problem(v,
                    "manifest.json: its SHA-256 (%s) differs from manifest.sha256's: the "
                    "manifest was changed after the run",
                    hex);
    }
    free(text);
    free(p);
}

static void check_kit(vp *v, const qsk_ynode *m)
{
    const char *kit = field(m, "kit"), *fmt = field(m, "package_format");
    const char *ver = field(m, "version"), *abi = field(m, "abi");
    char abi_now[16];
    snprintf(abi_now, sizeof abi_now, "%u", QS_BACKEND_ABI_VERSION);
    if (!kit || strcmp(kit, "qspec") != 0 || !fmt || atoi(fmt) != PACKAGE_FORMAT)
        problem(v, "manifest.json: not a qspec package of format %d", PACKAGE_FORMAT);
    if (!ver || strcmp(ver, qs_version()) != 0)
        problem(v,
                "manifest.json: made by qspec %s, but this is qspec %s: verify a package with "
                "the kit version that made it",
                ver ? ver : "(none)", qs_version());
    if (!abi || strcmp(abi, abi_now) != 0)
        problem(v, "manifest.json: backend ABI %s, but this kit has ABI %s", abi ? abi : "(none)",
                abi_now);
}

static void check_reports(qs_ctx *ctx, vp *v, const qsk_ynode *m)
{
    const qsk_ynode *reps = qsk_yaml_get(m, "reports");
    for (int i = 0; i < 3; i++) {
        const char *want = NULL;
        for (size_t k = 0; reps && reps->kind == QSK_Y_SEQ && k < reps->n; k++) {
            const char *f = field(reps->items[k], "file");
            if (f && strcmp(f, report_files[i]) == 0)
                want = field(reps->items[k], "sha256");
        }
        char *p = path_join(v->dir, report_files[i]), hex[65];
        if (!want)
            problem(v, "manifest.json: no digest of %s", report_files[i]);
        else if (!p || file_sha256(ctx, p, hex) != QS_OK)
            problem(v, "%s is missing or unreadable", report_files[i]);
        else if (strcmp(hex, want) != 0)
            problem(v,
                    "%s: its SHA-256 differs from the manifest's: the file was changed after "
                    "the run",
                    report_files[i]);
        free(p);
    }
}

/* Whether any case of file f is on the list. */
static int file_has_mustpass(const qsk_case_file *f, const qsk_mustpass *list)
{
    for (size_t k = 0; k < f->ncases; k++)
        if (qsk_mustpass_match(list, f->cases[k].id))
            return 1;
    return 0;
}

static void check_case_files(vp *v, const qsk_ynode *m, const qsk_suite *s, const char *suite_dir,
                             const qsk_mustpass *list)
{
    const char *lsha = NULL;
    const qsk_ynode *mp = qsk_yaml_get(m, "must_pass");
    if (mp)
        lsha = field(mp, "sha256");
    if (!lsha || strcmp(lsha, list->sha256) != 0)
        problem(v, "manifest.json: the run used a must-pass list other than %s", list->path);
    const qsk_ynode *cfs = qsk_yaml_get(m, "case_files");
    if (!cfs || cfs->kind != QSK_Y_SEQ) {
        problem(v, "manifest.json: no list of case files");
        return;
    }
    for (size_t k = 0; k < cfs->n; k++) {
        const char *name = field(cfs->items[k], "file"), *sha = field(cfs->items[k], "sha256");
        const qsk_case_file *f = NULL;
        for (size_t i = 0; name && i < s->nfiles && !f; i++)
            if (strcmp(suite_relative(s->files[i].path, suite_dir), name) == 0)
                f = &s->files[i];
        char hex[65];
        if (!name || !sha) {
            problem(v, "manifest.json: case file entry %zu lacks its file or sha256", k + 1);
            continue;
        }
        if (!f) {
            problem(v, "case file %s: not in the suite %s", name, suite_dir);
            continue;
        }
        qsk_sha256_hex(f->text, f->len, hex);
        if (strcmp(hex, sha) != 0)
            problem(v,
                    "case file %s: its SHA-256 in the manifest differs from the suite's: the run "
                    "used another version of the file",
                    name);
    }
    for (size_t i = 0; i < s->nfiles; i++) {
        const char *rel = suite_relative(s->files[i].path, suite_dir);
        int found = 0;
        for (size_t k = 0; k < cfs->n && !found; k++) {
            const char *name = field(cfs->items[k], "file");
            found = name && strcmp(name, rel) == 0;
        }
        if (!found && file_has_mustpass(&s->files[i], list))
            problem(v, "case file %s holds must-pass cases but is missing from the manifest", rel);
    }
}

typedef struct tally {
    size_t pass, fail, skip;
} tally;

/* The result item with id in the results sequence, or NULL. */
static const qsk_ynode *find_result(const qsk_ynode *res, const char *id)
{
    for (size_t k = 0; k < res->n; k++) {
        const char *rid = field(res->items[k], "id");
        if (rid && strcmp(rid, id) == 0)
            return res->items[k];
    }
    return NULL;
}

static void check_one_result(vp *v, const qsk_ynode *item, const char *id, tally *t)
{
    const char *st = item ? field(item, "status") : NULL;
    if (!item) {
        problem(v, "must-pass case %s is missing from results.json", id);
    } else if (st && strcmp(st, "pass") == 0) {
        t->pass++;
    } else if (st && strcmp(st, "not_supported") == 0) {
        t->skip++;
    } else if (st && strcmp(st, "fail") == 0) {
        const char *msg = field(item, "message");
        problem(v, "must-pass case %s failed: %s", id, msg ? msg : "");
        t->fail++;
    } else {
        problem(v, "results.json: case %s has the unknown status '%s'", id, st ? st : "(none)");
    }
}

static void check_results(qs_ctx *ctx, vp *v, const qsk_ynode *m, const qsk_suite *s,
                          const qsk_mustpass *list, tally *t)
{
    char *text;
    size_t len;
    qsk_ynode *root = read_json(ctx, v, "results.json", &text, &len);
    free(text);
    if (!root)
        return;
    const qsk_ynode *res = qsk_yaml_get(root, "results");
    if (!res || res->kind != QSK_Y_SEQ) {
        problem(v, "results.json: no results list");
        qsk_yaml_free(root);
        return;
    }
    size_t want = 0;
    for (size_t f = 0; f < s->nfiles; f++)
        for (size_t k = 0; k < s->files[f].ncases; k++) {
            const char *id = s->files[f].cases[k].id;
            if (!qsk_mustpass_match(list, id))
                continue;
            want++;
            check_one_result(v, find_result(res, id), id, t);
        }
    for (size_t k = 0; k < res->n; k++) {
        const char *rid = field(res->items[k], "id");
        if (!rid || !qsk_mustpass_match(list, rid))
            problem(v, "results.json: result %zu (%s) is not a must-pass case", k + 1,
                    rid ? rid : "no id");
    }
    const qsk_ynode *mb = qsk_yaml_get(m, "backend");
    const char *given = mb ? field(mb, "given") : NULL, *rb = field(root, "backend");
    if (!given || !rb || strcmp(given, rb) != 0)
        problem(v, "results.json: its backend differs from the manifest's");
    if (res->n != want)
        problem(v, "results.json: %zu results, but the must-pass list selects %zu cases", res->n,
                want);
    qsk_yaml_free(root);
}

/* The entries a package may hold: the five files and an optional signature, each a regular
 * file (no link, no folder). */
static void check_entries(vp *v)
{
    static const char *const allowed[] = {"manifest.json", "manifest.sha256", "results.json",
                                          "junit.xml",     "report.html",     SIG_FILE};
    DIR *d = opendir(v->dir);
    if (!d) {
        problem(v, "the package directory cannot be read: %s", strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int known = 0;
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            known |= strcmp(e->d_name, allowed[i]) == 0;
        char *p = path_join(v->dir, e->d_name);
        struct stat sb;
        int have = p && lstat(p, &sb) == 0;
        free(p);
        if (!known)
            problem(v, "'%s' does not belong in a package (it holds only the five files and %s)",
                    e->d_name, SIG_FILE);
        else if (have && S_ISLNK(sb.st_mode))
            problem(v, "%s is a symbolic link: a package holds regular files only", e->d_name);
        else if (have && !S_ISREG(sb.st_mode))
            problem(v, "%s is not a regular file", e->d_name);
    }
    closedir(d);
}

/* A count field of a mapping as a number; -1 when absent or not a count. */
static long long count_field(const qsk_ynode *map, const char *key)
{
    const char *t = map ? field(map, key) : NULL;
    char *end;
    if (!t || !*t)
        return -1;
    long long n = strtoll(t, &end, 10);
    return *end || n < 0 ? -1 : n;
}

static int same(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* The status of results.json's item as a qsk_res_kind, or -1. */
static int result_kind(const qsk_ynode *item)
{
    const char *st = field(item, "status");
    return same(st, "pass")            ? QSK_RES_PASS
           : same(st, "fail")          ? QSK_RES_FAIL
           : same(st, "not_supported") ? QSK_RES_SKIP
                                       : -1;
}

/* Checks one report read back (JUnit or HTML) against the results: its counts and every
 * case's status. */
static void check_report_agrees(vp *v, const char *name, const qsk_pkg_report *pr,
                                const qsk_ynode *res, const size_t count[3])
{
    static const char *const word[3] = {"passed", "failed", "not supported"};
    if (!pr->found) {
        problem(v, "%s: no summary where this kit writes one: not a report of this kit", name);
        return;
    }
    size_t got[3] = {pr->pass, pr->fail, pr->skip};
    for (int k = 0; k < 3; k++)
        if (got[k] != count[k])
            problem(v, "%s: %zu cases %s, but results.json has %zu", name, got[k], word[k],
                    count[k]);
    size_t rows = 0;
    for (size_t i = 0; i < pr->n; i++)
        rows += pr->cases[i].kind >= 0;
    if (rows != res->n)
        problem(v, "%s: %zu cases, but results.json has %zu", name, rows, res->n);
    size_t shown = 0;
    for (size_t k = 0; k < res->n && shown < 3; k++) {
        const char *id = field(res->items[k], "id");
        int kind = result_kind(res->items[k]), seen = -2;
        for (size_t i = 0; id && i < pr->n && seen == -2; i++)
            if (strcmp(pr->cases[i].id, id) == 0)
                seen = pr->cases[i].kind;
        if (!id || kind < 0 || seen == kind)
            continue;
        shown++;
        if (seen == -2)
            problem(v, "%s: case %s of results.json is missing", name, id);
        else
            problem(v, "%s: case %s is %s, but results.json says %s", name, id,
                    seen >= 0 ? qsk_res_name((qsk_res_kind)seen) : "an error",
                    qsk_res_name((qsk_res_kind)kind));
    }
}

/* Reads DIR/name whole; NULL when it cannot (the digest check has said so). */
static char *read_text(qs_ctx *ctx, vp *v, const char *name)
{
    char *p = path_join(v->dir, name), *text = NULL;
    size_t len;
    if (!p || qsk_read_file(ctx, p, &text, &len) != QS_OK)
        text = NULL;
    free(p);
    return text;
}

/* The reports and the manifest say the same: counts, each case's status, the certified
 * flag, the backend's identity [CASE-CERTIFY-VERIFY]. */
static void check_agreement(qs_ctx *ctx, vp *v, const qsk_ynode *m)
{
    char *text;
    size_t len;
    qsk_ynode *root = read_json(ctx, v, "results.json", &text, &len);
    free(text);
    const qsk_ynode *res = root ? qsk_yaml_get(root, "results") : NULL;
    if (!res || res->kind != QSK_Y_SEQ) {
        qsk_yaml_free(root);
        return; /* check_results has said so */
    }
    size_t count[3] = {0, 0, 0};
    for (size_t k = 0; k < res->n; k++)
        if (result_kind(res->items[k]) >= 0)
            count[result_kind(res->items[k])]++;
    const qsk_ynode *rsum = qsk_yaml_get(root, "summary"), *msum = qsk_yaml_get(m, "summary");
    long long loads = count_field(rsum, "load_errors");
    if (count_field(rsum, "passed") != (long long)count[0] ||
        count_field(rsum, "failed") != (long long)count[1] ||
        count_field(rsum, "skipped") != (long long)count[2] || loads != 0)
        problem(v,
                "results.json: its summary does not count its own results (%zu passed, %zu "
                "failed, %zu not supported, no load error)",
                count[0], count[1], count[2]);
    if (count_field(msum, "passed") != (long long)count[0] ||
        count_field(msum, "failed") != (long long)count[1] ||
        count_field(msum, "not_supported") != (long long)count[2])
        problem(v,
                "manifest.json: its summary differs from the results (%zu passed, %zu failed, "
                "%zu not supported)",
                count[0], count[1], count[2]);
    const qsk_ynode *mp = qsk_yaml_get(m, "must_pass");
    if (count_field(mp, "cases") != (long long)res->n)
        problem(v, "manifest.json: must_pass counts other than the %zu results", res->n);
    const char *cert = field(m, "certified");
    int should = count[1] == 0 && count[0] > 0 && loads == 0;
    if (!same(cert, should ? "true" : "false"))
        problem(v, "manifest.json: \"certified\": %s, but the results make it %s",
                cert ? cert : "(none)", should ? "true" : "false");
    const qsk_ynode *mb = qsk_yaml_get(m, "backend");
    const char *name = mb ? field(mb, "name") : NULL, *ver = mb ? field(mb, "version") : NULL;
    const char *dev = mb ? field(mb, "device") : NULL, *given = mb ? field(mb, "given") : NULL;
    if (!same(name, field(root, "backend_name")) || !same(ver, field(root, "backend_version")) ||
        !same(dev, field(root, "device")))
        problem(v, "results.json: the backend's name, version or device differs from the "
                   "manifest's");
    qsk_pkg_report pr;
    char *junit = read_text(ctx, v, "junit.xml"), *html = read_text(ctx, v, "report.html");
    if (junit && qsk_pkg_read_junit(junit, &pr) == 0) {
        if (pr.found && (pr.tests != res->n || pr.errors != 0))
            problem(v, "junit.xml: %zu tests and %zu errors, but results.json has %zu cases",
                    pr.tests, pr.errors, res->n);
        check_report_agrees(v, "junit.xml", &pr, res, count);
        if (!same(pr.backend, given) || !same(pr.backend_version, ver) || !same(pr.device, dev))
            problem(v, "junit.xml: the backend, its version or device differs from the manifest's");
        qsk_pkg_report_free(&pr);
    }
    if (html && qsk_pkg_read_html(html, &pr) == 0) {
        check_report_agrees(v, "report.html", &pr, res, count);
        qsk_pkg_report_free(&pr);
    }
    free(junit);
    free(html);
    qsk_yaml_free(root);
}

/* Runs ssh-keygen -Y verify on manifest.sha256 and its signature with the key in v->key.
 * Returns 1 for a good signature; records the problem otherwise. */
static int check_signature(vp *v)
{
    char *sig = path_join(v->dir, SIG_FILE), *msg = path_join(v->dir, "manifest.sha256");
    char *keytext = NULL, signers[4200] = "";
    size_t len = 0;
    struct stat sb;
    int good = 0;
    qs_ctx *ctx = qs_ctx_new();
    if (!sig || !msg || !ctx) {
        problem(v, "out of memory");
    } else if (lstat(sig, &sb) != 0) {
        problem(v, "%s is missing: the package is not signed (--key asks for a signature)",
                SIG_FILE);
    } else if (qsk_read_file(ctx, v->key, &keytext, &len) != QS_OK || len == 0 ||
               strncmp(keytext, "ssh-", 4) != 0 || memchr(keytext, '\0', len)) {
        problem(v,
                "--key %s: not an SSH public key (ssh-ed25519 AAAA..., as ssh-keygen writes "
                "KEY.pub)",
                v->key);
    } else {
        keytext[strcspn(keytext, "\n")] = '\0';
        const char *tmp = getenv("TMPDIR");
        snprintf(signers, sizeof signers, "%s/qspec-signers.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(signers);
        FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
        int ok =
            fp && fprintf(fp, "qspec-signer namespaces=\"%s\" %s\n", SIG_NAMESPACE, keytext) > 0;
        if (fp)
            ok = fclose(fp) == 0 && ok;
        else if (fd >= 0)
            close(fd);
        fflush(stdout);
        pid_t pid = ok ? fork() : -1;
        if (pid == 0) {
            int in = open(msg, O_RDONLY), null = open("/dev/null", O_WRONLY);
            if (in < 0 || null < 0 || dup2(in, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
                _exit(126);
            execlp("ssh-keygen", "ssh-keygen", "-Y", "verify", "-f", signers, "-I", "qspec-signer",
                   "-n", SIG_NAMESPACE, "-s", sig, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid > 0)
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (pid < 0)
            problem(v, "cannot check the signature: %s", strerror(errno));
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            problem(v, "cannot check the signature: ssh-keygen (OpenSSH) is not installed");
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            problem(v,
                    "%s: not a good signature of manifest.sha256 by the key %s (ssh-keygen -Y "
                    "verify, namespace %s)",
                    SIG_FILE, v->key, SIG_NAMESPACE);
        else
            good = 1;
        if (signers[0])
            unlink(signers);
    }
    free(keytext);
    free(sig);
    free(msg);
    qs_ctx_free(ctx);
    return good;
}

static void print_valid(const vp *v, const qsk_ynode *m, const tally *t)
{
    const qsk_ynode *b = qsk_yaml_get(m, "backend");
    const char *name = b ? field(b, "name") : NULL, *ver = b ? field(b, "version") : NULL;
    const char *dev = b ? field(b, "device") : NULL, *date = field(m, "date");
    printf("VALID %s: qspec %s certification of backend %s %s (%s), %s: %zu must-pass cases, %zu "
           "passed, %zu not supported by the backend\n",
           v->dir, qs_version(), name ? name : "?", ver ? ver : "", dev ? dev : "?",
           date ? date : "?", t->pass + t->skip, t->pass, t->skip);
}

/* Checks the package against the loaded suite and list; returns the exit status. */
static int verify_loaded(qs_ctx *ctx, vp *v, const qsk_suite *s, const char *suite_dir,
                         const qsk_mustpass *list)
{
    char *man;
    size_t mlen;
    qsk_ynode *m = read_json(ctx, v, "manifest.json", &man, &mlen);
    tally t = {0, 0, 0};
    check_entries(v);
    if (man)
        check_manifest_digest(ctx, v, man, mlen);
    if (m) {
        check_kit(v, m);
        check_reports(ctx, v, m);
        check_case_files(v, m, s, suite_dir, list);
        check_agreement(ctx, v, m); /* contradictions first: a failed case list is long */
        check_results(ctx, v, m, s, list, &t);
        if (t.pass == 0 && t.fail == 0)
            problem(v, "no must-pass case passed: the backend runs none of the suite's ops");
    }
    int signed_ok = v->key && check_signature(v);
    if (v->problems > MAX_SHOWN_PROBLEMS)
        printf("INVALID %s: %zu more problems not shown\n", v->dir,
               v->problems - MAX_SHOWN_PROBLEMS);
    if (v->problems)
        printf("%s is not a valid certification package (%zu problem%s)\n", v->dir, v->problems,
               v->problems == 1 ? "" : "s");
    else
        print_valid(v, m, &t);
    if (!v->problems && signed_ok)
        printf("signed: manifest.sha256 carries a good signature by the key %s (ssh-keygen -Y "
               "verify, namespace %s)\n",
               v->key, SIG_NAMESPACE);
    else if (!v->problems)
        printf("not signed: the digests show that the package's files agree with each other and "
               "with the suite, not who made them (anyone can recompute them); check a signature "
               "with --key\n");
    qsk_yaml_free(m);
    free(man);
    return v->problems ? QSK_EXIT_FAIL : QSK_EXIT_OK;
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int verify_package_run(int argc, char **argv)
{
    const char *key = NULL;
    char *pos[3];
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_verify_package);
            return QSK_EXIT_OK;
        }
        if (strcmp(argv[i], "--key") == 0) {
            if (i + 1 >= argc)
                return qsk_usage_error("verify-package", "option '--key' needs a value");
            key = argv[++i];
            if (!*key)
                return qsk_usage_error("verify-package", "--key needs a public key file");
            continue;
        }
        if (argv[i][0] == '-')
            return qsk_usage_error("verify-package", "unknown option '%s'", argv[i]);
        if (npos < 3)
            pos[npos] = argv[i];
        npos++;
    }
    argc = npos;
    argv = pos;
    if (argc < 1 || argc > 2)
        return qsk_usage_error("verify-package",
                               "needs a package directory and at most a suite folder, got %d "
                               "arguments",
                               argc);
    const char *suite_dir = argc == 2 ? argv[1] : qsk_default_case_dir();
    if (!is_dir(argv[0]))
        return qsk_usage_error("verify-package", "'%s' is not a package directory", argv[0]);
    if (!is_dir(suite_dir))
        return qsk_usage_error("verify-package", "'%s' is not a suite folder", suite_dir);
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("verify-package", "out of memory");
    qsk_mustpass list;
    qsk_suite s;
    memset(&s, 0, sizeof s);
    char *paths[1] = {qsk_strdup(suite_dir)};
    int rc = 0;
    if (qsk_mustpass_load(ctx, suite_dir, &list) != QS_OK || !paths[0] ||
        qsk_suite_load(ctx, 1, paths, &s) != QS_OK)
        rc = qsk_usage_error("verify-package", "%s", qs_ctx_errmsg(ctx));
    else if (s.nerrors)
        rc = qsk_usage_error("verify-package", "the suite does not load: %s", s.errors[0]);
    if (rc == 0) {
        vp v = {argv[0], 0, key};
        rc = verify_loaded(ctx, &v, &s, suite_dir, &list);
    }
    free(paths[0]);
    qsk_suite_free(&s);
    qsk_mustpass_free(&list);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_verify_package = {
    "verify-package", "check a certification package against the suite",
    "usage: qspec verify-package [--key KEY.pub] PKGDIR [SUITE-DIR]\n\n"
    "Re-checks a package written by 'qspec run --certify PKGDIR' against the suite in\n"
    "SUITE-DIR (default: the installed suite): that manifest.json matches manifest.sha256,\n"
    "that the package was made by this kit version and ABI, that results.json, junit.xml\n"
    "and report.html match their digests in the manifest, that the must-pass list and every\n"
    "case file the run used have the suite's SHA-256, and that every must-pass case is in\n"
    "the results and passed (or is not supported by the backend), with at least one pass.\n"
    "It also checks that the reports agree: the summaries of results.json, junit.xml,\n"
    "report.html and the manifest, each case's status in all three, the manifest's\n"
    "certified flag, and the backend's name, version and device; and that the package\n"
    "holds only its files, as regular files (no link, nothing extra).\n"
    "Prints each problem as a line 'INVALID PKGDIR: ...', then the verdict.\n\n"
    "The digests are not a signature: anyone who edits a package can recompute them. To\n"
    "sign one, its maker runs\n"
    "  ssh-keygen -Y sign -f KEY -n qspec-package PKGDIR/manifest.sha256\n"
    "which writes PKGDIR/manifest.sha256.sig; --key KEY.pub then requires that signature\n"
    "(checked with ssh-keygen -Y verify). Without --key the verdict says 'not signed'.\n\n"
    "Exit status: 0 a valid package, 1 an invalid one, 2 bad usage (no such directory, a\n"
    "suite that does not load).\n",
    verify_package_run};
