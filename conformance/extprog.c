/* extprog.c: program cases for an external framework (spec/cases.md [CASE-GEN-PROG],
 * [CASE-VERIFY-PROG]). gen's manifest gets, per variant, the statements with the variant's
 * tags applied (a region left out is transparent), the recipe of each region with every
 * role's configuration, the outputs to write (V/y, V/dx, V/grad.OP) with dtype and shape,
 * the optional trace file and its observable fields, and the checks between variants.
 * verify reads what the framework wrote and checks its variants against each other, each
 * output against the reference's run of the same variant, and the trace records it wrote.
 * A case with `reference: none` has no reference run [CASE-VERIFY-SELF]: verify checks the
 * variants against each other and each trace against the one the case states, and says that
 * no reference comparison was made. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "compare.h"
#include "extprog.h"
#include "fileio.h"
#include "npy.h"
#include "program.h"
#include "qspec/qspec.h"
#include "report.h"
#include "run.h"
#include "yamltree.h"

/* [CASE-PLUGIN-TOL] The normwise bound of an output against the reference's. */
#define QSKX_NORMWISE 0.0078125

/* The trace fields a framework can observe and verify compares [CASE-VERIFY-PROG]. */
static const char *const trace_fields[] = {"phase", "op", "precision", "recipe", NULL};

/* ------------------------------------------------------------ the manifest */

static const char *role_format(const qs_recipe_config *cfg, qs_scope_role role)
{
    if (cfg->format == QS_FP8_E4M3)
        return "e4m3";
    if (cfg->format == QS_FP8_E5M2)
        return "e5m2";
    return role == QS_SCOPE_DY ? "e5m2" : "e4m3"; /* HYBRID [REC-FORMAT] */
}

/* One role's configuration: the fields a framework needs to pick its recipe. */
static void json_role(FILE *fp, qs_recipe_kind kind, const qs_recipe_config *cfg,
                      qs_scope_role role)
{
    fprintf(fp, "{\"format\": \"%s\"",
            kind == QS_RECIPE_MXFP8 ? qs_dtype_name(cfg->mx_elem) : role_format(cfg, role));
    if (kind == QS_RECIPE_DELAYED)
        fprintf(fp, ", \"history\": %lld, \"margin\": %d, \"algo\": \"%s\"",
                (long long)cfg->history_len, cfg->margin,
                cfg->algo == QS_AMAX_MAX ? "max" : "most_recent");
    else
        fprintf(fp, ", \"eps\": %.9g, \"pow2\": %s", (double)cfg->eps,
                cfg->pow2 ? "true" : "false");
    fputs("}", fp);
}

static void json_recipe(FILE *fp, const qs_scope_recipe *r)
{
    static const char *const roles[QS_SCOPE_ROLE_COUNT] = {"x", "w", "dy"};
    fputs("{\"name\": ", fp);
    qsk_json_string(fp, qs_recipe_kind_name(r->kind));
    for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
        fprintf(fp, ", \"%s\": ", roles[role]);
        json_role(fp, r->kind, &r->cfg[role], (qs_scope_role)role);
    }
    fputs("}", fp);
}

static void json_key_string(FILE *fp, const char *key, const char *v)
{
    fprintf(fp, "\"%s\": ", key);
    qsk_json_string(fp, v);
}

static int json_statements(FILE *fp, const qskp_node *region, const qskp_variant *v, int n);

/* One statement as {"KIND": {fields}}; a region's body is its "body". */
static void json_statement(FILE *fp, const qskp_node *s, const qskp_variant *v)
{
    static const char *const kinds[QSKP_KIND_COUNT] = {
        [QSKP_AUTOCAST] = "autocast", [QSKP_CALIBRATE] = "calibrate",
        [QSKP_ISLAND] = "island",     [QSKP_CHECKPOINT] = "checkpoint",
        [QSKP_LINEAR] = "linear",     [QSKP_GDN] = "gdn",
        [QSKP_GELU] = "gelu",         [QSKP_MLA] = "mla",
        [QSKP_BACKWARD] = "backward"};
    fprintf(fp, "{\"%s\": {", kinds[s->kind]);
    int comma = 0;
    if (s->name[0]) {
        json_key_string(fp, "name", s->name);
        comma = 1;
    }
    switch (s->kind) {
    case QSKP_AUTOCAST:
    case QSKP_CALIBRATE:
        fprintf(fp, "%s\"enabled\": %s, \"calibrating\": %s, \"group\": %d, \"recipe\": ",
                comma ? ", " : "", s->enabled ? "true" : "false", s->calibrating ? "true" : "false",
                s->group);
        if (s->has_recipe)
            json_recipe(fp, &s->recipe);
        else
            fputs("null", fp);
        comma = 1;
        break;
    case QSKP_LINEAR:
        fputs(", ", fp);
        json_key_string(fp, "w", s->in[0]);
        break;
    case QSKP_GDN:
        fputs(", ", fp);
        json_key_string(fp, "g", s->in[0]);
        fputs(", ", fp);
        json_key_string(fp, "beta", s->in[1]);
        fprintf(fp, ", \"heads\": %lld", (long long)s->heads);
        break;
    case QSKP_BACKWARD:
        json_key_string(fp, "dy", v->dy[0] ? v->dy : s->in[0]);
        break;
    default:
        break;
    }
    if (s->kind == QSKP_AUTOCAST || s->kind == QSKP_CALIBRATE || s->kind == QSKP_ISLAND ||
        s->kind == QSKP_CHECKPOINT) {
        fprintf(fp, "%s\"body\": [", comma ? ", " : "");
        json_statements(fp, s, v, 0);
        fputs("]", fp);
    }
    fputs("}}", fp);
}

/* The statements of region that variant v runs, a region left out spliced into its parent
 * ([CASE-PROG-VARIANT]); n statements were written before. Returns the count written. */
static int json_statements(FILE *fp, const qskp_node *region, const qskp_variant *v, int n)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        if (!qskp_node_in(s, v)) {
            if (!QSKP_IS_OP(s->kind) && s->kind != QSKP_BACKWARD)
                n = json_statements(fp, s, v, n);
            continue;
        }
        fputs(n++ ? ", " : "", fp);
        json_statement(fp, s, v);
    }
    return n;
}

static void json_check(FILE *fp, const qskp_cmp *c)
{
    static const char *const verbs[] = {"same_as", "differs_from", "close_to"};
    fprintf(fp, "{\"%s\": ", verbs[c->kind]);
    qsk_json_string(fp, c->variant);
    fputs(", \"outputs\": [", fp);
    for (size_t i = 0; i < c->noutputs; i++) {
        fputs(i ? ", " : "", fp);
        qsk_json_string(fp, c->outputs[i]);
    }
    fputs("]", fp);
    if (c->kind == QSKP_CLOSE_TO) {
        fputs(", \"compare\": ", fp);
        qsk_gen_json_compare(fp, &c->tol);
    }
    fputs("}", fp);
}

static int has_prefix(const char *s, const char *variant)
{
    size_t n = strlen(variant);
    return strncmp(s, variant, n) == 0 && s[n] == '/';
}

static void json_variant(FILE *fp, const qsk_case *c, const qskp_variant *v, const qsk_results *ref)
{
    const qskp_program *p = c->program;
    const char *why = qsk_program_framework_why(v);
    const qskp_node *last = &p->root.body[p->root.nbody - 1];
    int backward = last->kind == QSKP_BACKWARD && qskp_node_in(last, v);
    fputs("    {", fp);
    json_key_string(fp, "name", v->name);
    fputs(", \"tags\": [", fp);
    for (int t = 0; t < v->ntags; t++) {
        fputs(t ? ", " : "", fp);
        qsk_json_string(fp, v->tags[t]);
    }
    fprintf(fp, "], \"steps\": %d, ", v->steps);
    json_key_string(fp, "x", v->x);
    fprintf(fp, ", \"backward\": %s, \"framework\": %s", backward ? "true" : "false",
            why ? "false" : "true");
    if (why) {
        fputs(", ", fp);
        json_key_string(fp, "why", why);
        fputs("}", fp);
        return;
    }
    fputs(",\n     \"program\": [", fp);
    json_statements(fp, &p->root, v, 0);
    fputs("],\n     \"outputs\": [", fp);
    int n = 0;
    for (size_t i = 0; i < ref->n; i++) {
        const char *name = ref->names[i];
        size_t len = strlen(name);
        if (!has_prefix(name, v->name) || (len > 6 && strcmp(name + len - 6, "/trace") == 0))
            continue;
        fputs(n++ ? ",\n       " : "\n       ", fp);
        qsk_gen_json_tensor(fp, name, &ref->t[i]);
        fputs("}", fp);
    }
    fputs("],\n     \"trace\": {\"file\": ", fp);
    char file[2 * QSK_NAME_LEN];
    snprintf(file, sizeof file, "%s/trace.jsonl", v->name);
    qsk_json_string(fp, file);
    fputs(", \"required\": false, \"fields\": [", fp);
    for (int f = 0; trace_fields[f]; f++)
        fprintf(fp, "%s\"%s\"", f ? ", " : "", trace_fields[f]);
    fputs("]},\n     \"checks\": [", fp);
    for (size_t k = 0; k < v->ncmp; k++) {
        fputs(k ? ", " : "", fp);
        json_check(fp, &v->cmp[k]);
    }
    fputs("]", fp);
    if (v->replays >= 0)
        fprintf(fp, ", \"replays\": %d", v->replays);
    fputs("}", fp);
}

void qskx_manifest(FILE *fp, const qsk_case *c, const qsk_results *ref)
{
    const qskp_program *p = c->program;
    /* [CASE-VERIFY-SELF] whether verify compares with a reference run */
    fprintf(fp, ",\n  \"reference\": \"%s\"", c->self_only ? "none" : "compare");
    fputs(",\n  \"variants\": [\n", fp);
    for (size_t i = 0; i < p->nvariants; i++) {
        json_variant(fp, c, &p->variants[i], ref);
        fputs(i + 1 < p->nvariants ? ",\n" : "\n", fp);
    }
    fprintf(fp, "  ],\n  \"framework\": {\"not_supported\": \"%s\", \"describe\": \"%s\", ",
            QSKX_NOT_SUPPORTED, QSKX_FRAMEWORK);
    if (c->self_only) /* no reference run: no bound against it */
        fputs("\"reference\": null}", fp);
    else
        fprintf(fp, "\"reference\": {\"normwise\": %.9g, \"bitwise_if_claim\": \"reference\"}}",
                QSKX_NORMWISE);
}

/* ------------------------------------------------------------ the results folder */

static const qskp_variant *framework_variant(const qsk_case *c, const char *name)
{
    const qskp_variant *v = qskp_variant_find(c->program, name);
    return v && !qsk_program_framework_why(v) ? v : NULL;
}

int qskx_entry_ok(const qsk_case *c, const char *name)
{
    return strcmp(name, QSKX_NOT_SUPPORTED) == 0 || strcmp(name, QSKX_FRAMEWORK) == 0 ||
           framework_variant(c, name) != NULL;
}

/* ------------------------------------------------------------ verify */

typedef struct xrun {
    const qsk_case *c;
    const char *dir;
    const qsk_results *ref; /* the reference's outputs; only layouts for reference: none */
    qsk_results got;
    char *trace_text[64]; /* per variant: the framework's trace.jsonl, or NULL */
    int bitwise;          /* the framework claims the reference's arithmetic */
    int checks, skipped;
} xrun;

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The folder may hold only the entries qskx_entry_ok allows and, inside a variant's folder,
 * its outputs and trace.jsonl. Returns an exit status after a usage error, or 0. */
static int read_outputs(qs_ctx *ctx, xrun *x)
{
    for (size_t i = 0; i < x->ref->n; i++) {
        const char *name = x->ref->names[i];
        size_t len = strlen(name);
        if (len > 6 && strcmp(name + len - 6, "/trace") == 0)
            continue;
        const qs_tensor *e = &x->ref->t[i];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", x->dir, name);
        if (!file_exists(path))
            return qsk_usage_error("verify", "%s: missing: case %s has the output %s", path,
                                   x->c->id, name);
        qs_tensor t;
        if (qsk_npy_read(ctx, path, &t) != QS_OK)
            return qsk_usage_error("verify", "%s", qs_ctx_errmsg(ctx));
        if (!qs_tensor_same_layout(&t, e)) {
            char have[160], want[160];
            qsk_shape_text(t.ndim, t.shape, 0, have, sizeof have);
            qsk_shape_text(e->ndim, e->shape, 0, want, sizeof want);
            int rc = qsk_usage_error("verify", "%s: %s %s, but output %s of case %s is %s %s", path,
                                     qs_dtype_name(t.dtype), have, name, x->c->id,
                                     qs_dtype_name(e->dtype), want);
            qs_tensor_free(&t);
            return rc;
        }
        if (qsk_results_add(ctx, &x->got, name, &t) != QS_OK)
            return qsk_usage_error("verify", "%s", qs_ctx_errmsg(ctx));
    }
    const qskp_program *p = x->c->program;
    for (size_t v = 0; v < p->nvariants && v < 64; v++) {
        char path[4096];
        size_t len;
        snprintf(path, sizeof path, "%s/%s/trace.jsonl", x->dir, p->variants[v].name);
        if (framework_variant(x->c, p->variants[v].name) && file_exists(path) &&
            qsk_read_file(ctx, path, &x->trace_text[v], &len) != QS_OK)
            return qsk_usage_error("verify", "%s", qs_ctx_errmsg(ctx));
    }
    return 0;
}

/* Checks that each entry of a variant's folder is one of the variant's outputs or its
 * trace. Returns an exit status after a usage error, or 0. */
static int check_variant_folders(const xrun *x)
{
    const qskp_program *p = x->c->program;
    int rc = 0;
    for (size_t v = 0; v < p->nvariants && rc == 0; v++) {
        const char *vn = p->variants[v].name;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", x->dir, vn);
        struct stat sb;
        if (lstat(sub, &sb) != 0)
            continue;
        if (!S_ISDIR(sb.st_mode) || !framework_variant(x->c, vn))
            return qsk_usage_error("verify", "%s: not the folder of a variant a framework runs",
                                   sub);
        DIR *d = opendir(sub);
        struct dirent *e;
        while (rc == 0 && d && (e = readdir(d)) != NULL) {
            char full[2 * QSK_NAME_LEN + 300];
            size_t len = strlen(e->d_name);
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
                strcmp(e->d_name, "trace.jsonl") == 0)
                continue;
            snprintf(full, sizeof full, "%s/%.*s", vn, len > 4 ? (int)(len - 4) : 0, e->d_name);
            if (len <= 4 || strcmp(e->d_name + len - 4, ".npy") != 0 ||
                !qsk_results_get(x->ref, full) || strcmp(e->d_name, "trace.npy") == 0)
                rc = qsk_usage_error("verify",
                                     "%s/%s: not an output of variant %s (its outputs are "
                                     "y.npy, dx.npy, grad.OP.npy and trace.jsonl)",
                                     sub, e->d_name, vn);
        }
        if (d)
            closedir(d);
    }
    return rc;
}

static const qs_tensor *got_of(const xrun *x, const char *variant, const char *name)
{
    char full[2 * QSK_NAME_LEN + 2];
    snprintf(full, sizeof full, "%s/%s", variant, name);
    return qsk_results_get(&x->got, full);
}

/* The trace records of text (JSON lines) as parsed documents; *n gets the count. */
static qsk_ynode **parse_trace(qs_ctx *ctx, const char *path, const char *text, size_t *n,
                               char *err, size_t cap)
{
    size_t lines = 0, k = 0;
    for (const char *s = text; *s; s++)
        lines += *s == '\n';
    qsk_ynode **recs = calloc(lines + 2, sizeof *recs);
    *n = 0;
    err[0] = '\0';
    if (!recs) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    const char *s = text;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len > 0) {
            if (qsk_yaml_parse(ctx, path, s, len, &recs[k]) != QS_OK ||
                recs[k]->kind != QSK_Y_MAP) {
                snprintf(err, cap, "%s: record %zu is not a JSON object: %s", path, k + 1,
                         qs_ctx_errmsg(ctx));
                break;
            }
            k++;
        }
        s += len + (e ? 1 : 0);
    }
    *n = k;
    return recs;
}

static void free_trace(qsk_ynode **recs, size_t n)
{
    for (size_t i = 0; recs && i < n; i++)
        qsk_yaml_free(recs[i]);
    free(recs);
}

static const char *field_text(const qsk_ynode *rec, const char *key)
{
    const qsk_ynode *v = qsk_yaml_get(rec, key);
    return v && v->kind == QSK_Y_SCALAR ? v->text : "(absent)";
}

/* Compares trace text a (read from path) with b (named lb) on the observable fields;
 * writes the first difference into why. Returns 1 when they agree. */
static int traces_agree(qs_ctx *ctx, const char *a, const char *b, const char *path, const char *lb,
                        char *why, size_t cap)
{
    size_t na, nb;
    qsk_ynode **ra = parse_trace(ctx, path, a, &na, why, cap);
    int ok = ra && !why[0];
    qsk_ynode **rb = ok ? parse_trace(ctx, lb, b, &nb, why, cap) : NULL;
    ok = ok && rb && !why[0];
    for (size_t i = 0; ok && i < na && i < nb; i++)
        for (int f = 0; ok && trace_fields[f]; f++) {
            const char *fa = field_text(ra[i], trace_fields[f]);
            const char *fb = field_text(rb[i], trace_fields[f]);
            if (strcmp(fa, fb) != 0) {
                snprintf(why, cap, "record %zu (op %s): %s is %s, expected %s", i + 1,
                         field_text(rb[i], "op"), trace_fields[f], fa, fb);
                ok = 0;
            }
        }
    if (ok && na != nb) {
        snprintf(why, cap, "%zu records, expected %zu", na, nb);
        ok = 0;
    }
    free_trace(ra, ra ? na : 0);
    free_trace(rb, rb ? nb : 0);
    return ok;
}

static void describe_diff(const qs_tensor *a, const qs_tensor *b, char *buf, size_t cap)
{
    size_t first = 0, count = 0;
    for (size_t i = 0; i < a->numel; i++)
        if (qsk_elem_bits(a, i) != qsk_elem_bits(b, i) && count++ == 0)
            first = i;
    char ea[96], eb[96];
    qsk_format_elem(b, first, ea, sizeof ea);
    qsk_format_elem(a, first, eb, sizeof eb);
    snprintf(buf, cap, "index=%zu expected=%s observed=%s mismatches=%zu/%zu", first, ea, eb, count,
             a->numel);
}

static int same_bits(const qs_tensor *a, const qs_tensor *b)
{
    return qs_tensor_same_layout(a, b) && a->nbytes == b->nbytes &&
           (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* One output of a comparison between the framework's variants a and b [CASE-PLUGIN-SELF]. */
static void check_one(qs_ctx *ctx, xrun *x, qsk_case_result *r, const qskp_variant *a,
                      const qskp_variant *b, const qskp_cmp *c, const char *out)
{
    static const char *const verbs[] = {"same_as", "differs_from", "close_to"};
    char why[512];
    if (strcmp(out, "state") == 0) {
        x->skipped++; /* the kit's quantizer state: not observable in a framework */
        return;
    }
    if (strcmp(out, "trace") == 0) {
        const qskp_program *p = x->c->program;
        const char *ta = x->trace_text[a - p->variants], *tb = x->trace_text[b - p->variants];
        if (!ta || !tb || c->kind != QSKP_SAME_AS) {
            x->skipped++;
            return;
        }
        x->checks++;
        if (!traces_agree(ctx, ta, tb, "the framework's trace", "the framework's trace", why,
                          sizeof why))
            qsk_result_fail(r, "variant=%s same_as=%s output=trace: %s (case line %d)", a->name,
                            b->name, why, c->pos.line);
        return;
    }
    const qs_tensor *ta = got_of(x, a->name, out), *tb = got_of(x, b->name, out);
    if (!ta || !tb) {
        qsk_result_fail(r, "variant=%s %s=%s output=%s: not written", a->name, verbs[c->kind],
                        b->name, out);
        return;
    }
    x->checks++;
    int same = same_bits(ta, tb);
    if (c->kind == QSKP_SAME_AS && !same) {
        describe_diff(ta, tb, why, sizeof why);
        qsk_result_fail(r, "variant=%s same_as=%s output=%s differs: %s [RCP-REPLAY-BITWISE]",
                        a->name, b->name, out, why);
    } else if (c->kind == QSKP_DIFFERS_FROM && same) {
        qsk_result_fail(r,
                        "variant=%s differs_from=%s output=%s is bitwise identical, so the "
                        "claim is vacuous [RCP-NONVACUOUS]",
                        a->name, b->name, out);
    } else if (c->kind == QSKP_CLOSE_TO) {
        qsk_cmp_result cr;
        if (!qsk_compare(&c->tol, tb, ta, NULL, &cr))
            qsk_result_fail(r, "variant=%s close_to=%s output=%s: metric %.9g outside %.9g %s",
                            a->name, b->name, out, cr.metric, c->tol.p1, cr.detail);
    }
}

/* The variant's gradient outputs, in the reference's (build) order. */
static void check_cmp(qs_ctx *ctx, xrun *x, qsk_case_result *r, const qskp_variant *a,
                      const qskp_cmp *c)
{
    const qskp_variant *b = framework_variant(x->c, c->variant);
    if (!b) {
        x->skipped += (int)c->noutputs;
        return;
    }
    for (size_t i = 0; i < c->noutputs; i++) {
        if (strcmp(c->outputs[i], "grads") != 0) {
            check_one(ctx, x, r, a, b, c, c->outputs[i]);
            continue;
        }
        for (size_t k = 0; k < x->ref->n; k++) {
            const char *name = x->ref->names[k];
            if (has_prefix(name, a->name) && strncmp(name + strlen(a->name) + 1, "grad.", 5) == 0)
                check_one(ctx, x, r, a, b, c, name + strlen(a->name) + 1);
        }
    }
}

/* The case's output for the framework output "V/NAME" ("NAME" for the first variant) when
 * the case states a comparison other than bitwise for it, or NULL. */
static const qsk_output *stated_compare(const qsk_case *c, const char *full)
{
    const qskp_program *p = c->program;
    const char *first = p->variants[0].name;
    const char *local = has_prefix(full, first) ? full + strlen(first) + 1 : NULL;
    for (size_t k = 0; k < c->noutputs; k++) {
        const qsk_output *o = &c->outputs[k];
        if (o->cmp != QSK_CMP_BITWISE &&
            (strcmp(o->name, full) == 0 || (local && strcmp(o->name, local) == 0)))
            return o;
    }
    return NULL;
}

/* Each output against the reference's run of the same variant: bitwise when the framework
 * claims the reference's arithmetic, else as the case states the output's comparison, else
 * within QSKX_NORMWISE [CASE-PLUGIN-TOL]. */
static void check_against_ref(xrun *x, qsk_case_result *r)
{
    for (size_t i = 0; i < x->got.n; i++) {
        const qs_tensor *e = qsk_results_get(x->ref, x->got.names[i]);
        const qs_tensor *g = &x->got.t[i];
        char why[512];
        x->checks++;
        if (x->bitwise) {
            if (!same_bits(g, e)) {
                describe_diff(g, e, why, sizeof why);
                qsk_result_fail(r, "output=%s differs from the reference: %s", x->got.names[i],
                                why);
            }
            continue;
        }
        const qsk_output *o = stated_compare(x->c, x->got.names[i]);
        if (o) { /* the case states the tolerance of this output */
            qsk_cmp_result cr;
            if (!qsk_compare(o, e, g, NULL, &cr))
                qsk_result_fail(r,
                                "output=%s against the reference: metric %.6g outside the "
                                "case's bound %.6g %s",
                                x->got.names[i], cr.metric, o->p1, cr.detail);
            continue;
        }
        double err = qsk_normwise_error(e, g);
        if (err < 0 || err > QSKX_NORMWISE)
            qsk_result_fail(r,
                            "output=%s normwise error %.6g against the reference, above "
                            "2^-7 [CASE-PLUGIN-TOL]",
                            x->got.names[i], err < 0 ? NAN : err);
    }
}

static void check_traces(qs_ctx *ctx, xrun *x, qsk_case_result *r)
{
    const qskp_program *p = x->c->program;
    for (size_t v = 0; v < p->nvariants && v < 64; v++) {
        if (!x->trace_text[v])
            continue;
        char name[2 * QSK_NAME_LEN], path[4096], why[512];
        snprintf(name, sizeof name, "%s/trace", p->variants[v].name);
        snprintf(path, sizeof path, "%s/%s.jsonl", x->dir, name);
        const qs_tensor *t = qsk_results_get(x->ref, name);
        char *text = t ? malloc(t->nbytes + 1) : NULL;
        if (!text)
            continue;
        memcpy(text, t->data, t->nbytes);
        text[t->nbytes] = '\0';
        x->checks++;
        if (!traces_agree(ctx, x->trace_text[v], text, path, "the reference's trace", why,
                          sizeof why))
            qsk_result_fail(r, "variant=%s output=trace differs from the reference's: %s",
                            p->variants[v].name, why);
        free(text);
    }
}

/* [CASE-VERIFY-SELF] The trace variant v states for its last step ([CASE-PROG-TRACE]) as
 * JSON lines ([RCP-TRACE-JSONL]; the fields a framework cannot observe at their defaults),
 * or NULL when it states none for that step (or on failure, with the error in ctx). */
static char *stated_trace(qs_ctx *ctx, const qskp_variant *v)
{
    if (!v->has_trace || (v->trace_step ? v->trace_step : v->steps) != v->steps)
        return NULL;
    qs_trace t = {0};
    qs_status st = QS_OK;
    for (size_t i = 0; i < v->ntrace && st == QS_OK; i++) {
        const qskp_trace_exp *e = &v->trace[i];
        qs_trace_record rec;
        memset(&rec, 0, sizeof rec);
        rec.phase = e->phase;
        snprintf(rec.op, sizeof rec.op, "%s", e->op);
        snprintf(rec.kind, sizeof rec.kind, "%s", e->kind);
        rec.precision = e->precision;
        rec.has_recipe = e->has_recipe;
        rec.recipe = e->recipe;
        rec.first_module = e->first_module;
        rec.dtype = e->dtype_given ? e->dtype : QS_BF16;
        st = qs_trace_append(ctx, &t, &rec);
    }
    char *text = NULL;
    if (st == QS_OK && qs_trace_to_jsonl(ctx, &t, &text, NULL) != QS_OK)
        text = NULL;
    qs_trace_free(&t);
    return text;
}

/* [CASE-VERIFY-SELF] Each trace the framework wrote, record by record on the observable
 * fields, against the trace its variant states in the case; a stated trace the framework
 * did not write is counted as not observable. */
static void check_stated_traces(qs_ctx *ctx, xrun *x, qsk_case_result *r)
{
    const qskp_program *p = x->c->program;
    for (size_t v = 0; v < p->nvariants && v < 64; v++) {
        const qskp_variant *var = &p->variants[v];
        char *text = framework_variant(x->c, var->name) ? stated_trace(ctx, var) : NULL;
        char path[4096], why[512];
        if (!text)
            continue;
        snprintf(path, sizeof path, "%s/%s/trace.jsonl", x->dir, var->name);
        if (!x->trace_text[v]) {
            x->skipped++;
        } else {
            x->checks++;
            if (!traces_agree(ctx, x->trace_text[v], text, path, "the case's trace", why,
                              sizeof why))
                qsk_result_fail(r, "variant=%s output=trace differs from the case's: %s", var->name,
                                why);
        }
        free(text);
    }
}

/* framework.json: {"name": ..., "version": ..., "claim": "reference" | "tolerance"}. */
static int read_framework(qs_ctx *ctx, xrun *x, char *label, size_t cap)
{
    char path[4096], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", x->dir, QSKX_FRAMEWORK);
    label[0] = '\0';
    if (!file_exists(path))
        return 0;
    qsk_ynode *root = NULL;
    if (qsk_read_file(ctx, path, &text, &len) != QS_OK ||
        qsk_yaml_parse(ctx, path, text, len, &root) != QS_OK || root->kind != QSK_Y_MAP) {
        free(text);
        qsk_yaml_free(root);
        return qsk_usage_error("verify", "%s: not a JSON object: %s", path, qs_ctx_errmsg(ctx));
    }
    const qsk_ynode *claim = qsk_yaml_get(root, "claim");
    x->bitwise = claim && claim->kind == QSK_Y_SCALAR && strcmp(claim->text, "reference") == 0;
    const qsk_ynode *name = qsk_yaml_get(root, "name");
    if (name && name->kind == QSK_Y_SCALAR)
        snprintf(label, cap, " (%s)", name->text);
    qsk_yaml_free(root);
    free(text);
    return 0;
}

static int not_supported(const qsk_case *c, const char *dir)
{
    char path[4096], line[512] = "";
    snprintf(path, sizeof path, "%s/%s", dir, QSKX_NOT_SUPPORTED);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    if (!fgets(line, sizeof line, fp))
        line[0] = '\0';
    fclose(fp);
    line[strcspn(line, "\r\n")] = '\0';
    printf("NOT SUPPORTED %s: %s\n", c->id, line[0] ? line : "(no reason given)");
    return 1;
}

int qskx_verify(qs_ctx *ctx, const qsk_case *c, const char *dir, const qsk_results *ref)
{
    if (not_supported(c, dir))
        return QSKX_EXIT_UNSUPPORTED;
    xrun x;
    memset(&x, 0, sizeof x);
    x.c = c;
    x.dir = dir;
    x.ref = ref;
    char label[160];
    int rc = check_variant_folders(&x);
    if (rc == 0)
        rc = read_framework(ctx, &x, label, sizeof label);
    if (rc == 0)
        rc = read_outputs(ctx, &x);
    if (rc == 0) {
        qsk_case_result r;
        qsk_result_init(&r, c);
        const qskp_program *p = c->program;
        for (size_t v = 0; v < p->nvariants; v++)
            for (size_t k = 0; framework_variant(c, p->variants[v].name) && k < p->variants[v].ncmp;
                 k++)
                check_cmp(ctx, &x, &r, &p->variants[v], &p->variants[v].cmp[k]);
        if (c->self_only) { /* [CASE-VERIFY-SELF] */
            check_stated_traces(ctx, &x, &r);
        } else {
            check_against_ref(&x, &r);
            check_traces(ctx, &x, &r);
        }
        qsk_result_finish(&r);
        if (r.out)
            fputs(r.out, stdout);
        if (c->self_only)
            printf("no reference comparison: case %s says 'reference: none' (%s:%d); its %zu "
                   "outputs were checked against each other and the case's traces only\n",
                   c->id, c->file, c->ref_pos.line, x.got.n);
        if (r.kind == QSK_RES_PASS && c->self_only)
            printf("PASS %s%s: %d checks hold (self-consistency only, no reference), %d not "
                   "observable\n",
                   c->id, label, x.checks, x.skipped);
        else if (r.kind == QSK_RES_PASS)
            printf("PASS %s%s: %d checks hold (%zu outputs against the reference, "
                   "%s), %d not observable\n",
                   c->id, label, x.checks, x.got.n,
                   x.bitwise ? "bitwise" : "as the case states, else normwise 2^-7", x.skipped);
        else
            printf("FAIL %s%s: %d failure%s in %d checks\n", c->id, label, r.lines,
                   r.lines == 1 ? "" : "s", x.checks);
        rc = r.kind == QSK_RES_PASS ? QSK_EXIT_OK : QSK_EXIT_FAIL;
        qsk_result_free(&r);
    }
    for (size_t v = 0; v < 64; v++)
        free(x.trace_text[v]);
    qsk_results_free(&x.got);
    return rc;
}
