/* cmd_gen.c: `qspec gen` and `qspec verify` — certifying a backend the kit cannot load, such
 * as a Python framework on a GPU ([CASE-GEN], [CASE-VERIFY]). gen writes one case's inputs
 * as .npy files and a manifest naming the outputs to produce (name, dtype, shape,
 * comparison); the framework writes those outputs as .npy files into a folder; verify
 * checks that folder and compares each output with the reference's, as `qspec run`
 * compares a plugin's. A program case with `reference: none` runs no reference in either:
 * gen derives the outputs' layouts from the program and verify checks the variants against
 * each other only ([CASE-VERIFY-SELF]). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "extprog.h"
#include "fileio.h"
#include "npy.h"
#include "program.h"
#include "outdir.h"
#include "qspec/qspec.h"
#include "report.h"
#include "run.h"
#include "sha256.h"

#define MAX_INPUTS 16

typedef struct gen_args {
    const char *cases;
    const char *id;
    const char *dir;    /* --out (gen) or --results (verify) */
    int expected;       /* gen --expected */
    const char *second; /* a second positional argument: the id, or the case file */
} gen_args;

/* Parses CASE-FILE [--id] ID DIROPT DIR [--expected] (the case file and the id in either
 * order); returns an exit status after a usage
 * error or help, or -1 to go on. */
static int parse_args(const qsk_command *cmd, const char *diropt, int argc, char **argv,
                      gen_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (qsk_is_help(s)) {
            qsk_print_help(stdout, cmd);
            return QSK_EXIT_OK;
        }
        const char **slot = strcmp(s, "--id") == 0   ? &a->id
                            : strcmp(s, diropt) == 0 ? &a->dir
                                                     : NULL;
        if (slot) {
            if (i + 1 >= argc)
                return qsk_usage_error(cmd->name, "option '%s' needs a value", s);
            *slot = argv[++i];
        } else if (cmd == &qsk_cmd_gen && strcmp(s, "--expected") == 0) {
            a->expected = 1;
        } else if (s[0] == '-') {
            return qsk_usage_error(cmd->name, "unknown option '%s'", s);
        } else if (a->cases && a->second) {
            return qsk_usage_error(cmd->name, "takes one case file and one case id, got '%s' too",
                                   s);
        } else if (a->cases) {
            a->second = s;
        } else {
            a->cases = s;
        }
    }
    if (a->second && a->id)
        return qsk_usage_error(cmd->name, "takes one case file, got '%s' and '%s'", a->cases,
                               a->second);
    if (a->second) { /* CASE-FILE and ID in either order, as qspec show takes them */
        struct stat sb;
        int first_is_file = stat(a->cases, &sb) == 0;
        a->id = first_is_file ? a->second : a->cases;
        a->cases = first_is_file ? a->cases : a->second;
    }
    if (!a->cases)
        return qsk_usage_error(cmd->name, "needs a case file (see 'qspec help %s')", cmd->name);
    if (!a->id)
        return qsk_usage_error(cmd->name, "needs --id ID (see 'qspec list %s')", a->cases);
    if (!a->dir)
        return qsk_usage_error(cmd->name, "needs %s DIR", diropt);
    return -1;
}

/* Loads the case file and finds the case; returns an exit status after a usage error. */
static int load_case(qs_ctx *ctx, const char *cmd, const gen_args *a, qsk_suite *s,
                     const qsk_case **c)
{
    char *paths[1] = {qsk_strdup(a->cases)};
    *c = NULL;
    memset(s, 0, sizeof *s);
    if (!paths[0])
        return qsk_usage_error(cmd, "out of memory");
    qs_status st = qsk_suite_load(ctx, 1, paths, s);
    free(paths[0]);
    if (st != QS_OK)
        return qsk_usage_error(cmd, "%s", qs_ctx_errmsg(ctx));
    if (s->nerrors)
        return qsk_usage_error(cmd, "%s", s->errors[0]);
    for (size_t f = 0; f < s->nfiles; f++)
        for (size_t k = 0; k < s->files[f].ncases; k++)
            if (strcmp(s->files[f].cases[k].id, a->id) == 0)
                *c = &s->files[f].cases[k];
    if (!*c)
        return qsk_usage_error(cmd, "no case with id '%s' in %s", a->id, a->cases);
    return 0;
}

/* Generates the inputs and computes the reference's outputs (none for a case with
 * `reference: none`, [CASE-VERIFY-SELF]). */
static qs_status compute(qs_ctx *ctx, const qsk_case *c, qs_tensor *inputs, size_t *nin,
                         qsk_results *ref)
{
    qs_status st = QS_OK;
    memset(ref, 0, sizeof *ref);
    for (*nin = 0; *nin < c->ninputs && *nin < MAX_INPUTS && st == QS_OK; (*nin)++)
        st = qsk_input_generate(ctx, &c->inputs[*nin], &inputs[*nin]);
    if (st == QS_OK && !c->self_only)
        st = qsk_op_find(c->op)->run_ref(ctx, c, inputs, ref);
    return st;
}

static int is_program(const qsk_case *c)
{
    return strcmp(c->op, "program") == 0;
}

/* [CASE-GEN-PROG] The outputs a framework writes for a program case: every variant's, with
 * the reference's values; for a case with `reference: none` their layouts only, derived
 * from the program without running it [CASE-VERIFY-SELF]. */
static qs_status compute_framework(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs,
                                   qsk_results *fw)
{
    memset(fw, 0, sizeof *fw);
    if (!is_program(c))
        return QS_OK;
    return c->self_only ? qsk_program_framework_layouts(ctx, c, fw)
                        : qsk_program_framework_ref(ctx, c, inputs, fw);
}

static void free_inputs(qs_tensor *inputs, size_t nin)
{
    for (size_t i = 0; i < nin; i++)
        qs_tensor_free(&inputs[i]);
}

/* ------------------------------------------------------------------ gen */

static void json_shape(FILE *fp, const qs_tensor *t)
{
    char buf[QS_MAX_DIMS * 24 + 4];
    qsk_shape_text(t->ndim, t->shape, 0, buf, sizeof buf);
    fputs(buf, fp);
}

void qsk_gen_json_tensor(FILE *fp, const char *name, const qs_tensor *t)
{
    fputs("{\"name\": ", fp);
    qsk_json_string(fp, name);
    fputs(", \"file\": ", fp);
    char file[QSK_NAME_LEN + 8];
    snprintf(file, sizeof file, "%s.npy", name);
    qsk_json_string(fp, file);
    fprintf(fp, ", \"dtype\": \"%s\", \"npy_descr\": ", qs_dtype_name(t->dtype));
    qsk_json_string(fp, qsk_npy_descr(t->dtype));
    fputs(", \"shape\": ", fp);
    json_shape(fp, t);
}

void qsk_gen_json_compare(FILE *fp, const qsk_output *o)
{
    switch (o->cmp) {
    case QSK_CMP_BITWISE:
        fprintf(fp, "{\"bitwise\": {\"nan\": \"%s\"}}", o->nan_any ? "any" : "canonical");
        break;
    case QSK_CMP_ULP:
        fprintf(fp, "{\"ulp\": %.17g}", o->p1);
        break;
    case QSK_CMP_ALLCLOSE:
        fprintf(fp, "{\"allclose\": {\"atol\": %.17g, \"rtol\": %.17g}}", o->p1, o->p2);
        break;
    case QSK_CMP_GEMM_BOUND:
        fprintf(fp, "{\"gemm_bound\": %.17g}", o->p1);
        break;
    case QSK_CMP_RMS_RATIO:
        fprintf(fp, "{\"rms_ratio\": %.17g}", o->p1);
        break;
    default:
        fprintf(fp, "{\"cosine\": %.17g}", o->p1);
        break;
    }
}

static const qsk_case_file *file_of(const qsk_suite *s, const qsk_case *c)
{
    for (size_t f = 0; f < s->nfiles; f++)
        if (c >= s->files[f].cases && c < s->files[f].cases + s->files[f].ncases)
            return &s->files[f];
    return NULL;
}

/* ---------------------------------------------------------------- attention manifests */

/* The value of param key, or dflt when the case does not set it. */
static const char *param_or(const qsk_case *c, const char *key, const char *dflt)
{
    const qsk_param *p = qsk_case_param(c, key);
    return p ? p->value : dflt;
}

/* "3,1,6" as the JSON array [3, 1, 6]; null when absent. */
static void json_seqlens(FILE *fp, const qsk_case *c)
{
    const qsk_param *p = qsk_case_param(c, "seqlens");
    if (!p) {
        fputs("null", fp);
        return;
    }
    fputc('[', fp);
    for (const char *v = p->value; *v; v++)
        fputs(*v == ',' ? ", " : (char[2]){*v, 0}, fp);
    fputc(']', fp);
}

/* A binary32 as a JSON number that reads back to the same float, and its bits. */
static void json_f32(FILE *fp, const char *key, float x)
{
    fprintf(fp, "\"%s\": %.9g, \"%s_bits\": \"0x%08X\"", key, (double)x, key,
            (unsigned)qs_f32_bits(x));
}

/* [CASE-GEN-ATTN] sdpa and gdn: every parameter typed, with its default filled in (the
 * scale a call uses, [ATTN-SCALE] [GDN-SCALE]). */
static void json_attn_params(FILE *fp, const qsk_case *c, const qs_tensor *inputs)
{
    const qs_tensor *q = qsk_input_tensor(c, inputs, "q");
    float d = q && q->ndim ? (float)q->shape[q->ndim - 1] : 1.0f;
    const qsk_param *sc = qsk_case_param(c, "scale");
    float scale = sc ? strtof(sc->value, NULL) : 0.0f;
    if (scale == 0.0f)
        scale = qs_rsqrtf(d);
    fputs("{", fp);
    if (strcmp(c->op, "sdpa") == 0) {
        fputs("\"layout\": ", fp);
        qsk_json_string(fp, param_or(c, "layout", "sbhd"));
        fputs(", \"mask\": ", fp);
        qsk_json_string(fp, param_or(c, "mask", "none"));
    } else {
        fprintf(fp, "\"l2norm\": %s, \"chunk\": %s",
                strcmp(param_or(c, "l2norm", "0"), "0") ? "true" : "false",
                param_or(c, "chunk", "0"));
    }
    fputs(", ", fp);
    json_f32(fp, "scale", scale);
    fputs(", \"seqlens\": ", fp);
    json_seqlens(fp, c);
    fputs("}", fp);
}

/* [CASE-GEN-ATTN] Which outputs are rounded to the input dtype, and the intermediate
 * roundings the spec fixes, so that a framework can match them from the manifest. */
static void json_attn_rounding(FILE *fp, const qsk_case *c, const qs_tensor *inputs)
{
    static const char *const rounded[] = {"o", "dq", "dk", "dv", NULL};
    const qs_tensor *q = qsk_input_tensor(c, inputs, "q");
    const char *dt = q ? qs_dtype_name(q->dtype) : "fp32";
    int sdpa = strcmp(c->op, "sdpa") == 0;
    int l2 = !sdpa && strcmp(param_or(c, "l2norm", "0"), "0") != 0;
    fputs(",\n  \"rounding\": {\"dtype\": ", fp);
    qsk_json_string(fp, dt);
    fputs(", \"rounded_outputs\": [", fp);
    int n = 0;
    for (size_t i = 0; i < c->noutputs; i++)
        for (int r = 0; rounded[r]; r++)
            if (strcmp(c->outputs[i].name, rounded[r]) == 0) {
                fputs(n++ ? ", " : "", fp);
                qsk_json_string(fp, rounded[r]);
            }
    fputs("], \"fp32_outputs\": [", fp);
    n = 0;
    for (size_t i = 0; i < c->noutputs; i++) {
        int is_rounded = 0;
        for (int r = 0; rounded[r]; r++)
            is_rounded |= strcmp(c->outputs[i].name, rounded[r]) == 0;
        if (!is_rounded) {
            fputs(n++ ? ", " : "", fp);
            qsk_json_string(fp, c->outputs[i].name);
        }
    }
    fputs("],\n    \"intermediates\": [", fp);
    if (sdpa) {
        fputs("\"all arithmetic in FP32; each of o, dq, dk, dv rounded to the dtype once, last "
              "[ATTN-DTYPE]\", \"backward: D_i = dout_i . o_i uses o as rounded to the dtype "
              "[ATTN-BWD]\"",
              fp);
    } else {
        fputs("\"all arithmetic in FP32; the state h stays FP32 [GDN-STATE-FP32]; each of o, dq, "
              "dk, dv rounded to the dtype once, last [GDN-DTYPE]\"",
              fp);
        if (l2)
            fputs(", \"q^ and k^ rounded to the dtype after l2norm, before the recurrence; the "
                  "backward treats that rounding as the identity [GDN-L2NORM]\"",
                  fp);
    }
    fputs("]}", fp);
}

static void gen_manifest(FILE *fp, const qsk_suite *s, const qsk_case *c, const qs_tensor *inputs,
                         const qsk_results *ref, const qsk_results *fw)
{
    const qsk_case_file *f = file_of(s, c);
    char hex[65];
    qsk_sha256_hex(f->text, f->len, hex);
    fprintf(fp, "{\n  \"kit\": \"qspec\",\n  \"version\": \"%s\",\n  \"case\": ", qs_version());
    qsk_json_string(fp, c->id);
    fputs(",\n  \"case_file\": ", fp);
    qsk_json_string(fp, c->file);
    fprintf(fp, ",\n  \"line\": %d,\n  \"case_file_sha256\": \"%s\",\n  \"op\": ", c->pos.line,
            hex);
    qsk_json_string(fp, c->op);
    int attn = strcmp(c->op, "sdpa") == 0 || strcmp(c->op, "gdn") == 0;
    fputs(",\n  \"params\": ", fp);
    if (attn) {
        json_attn_params(fp, c, inputs);
    } else {
        fputs("{", fp);
        for (size_t i = 0; i < c->nparams; i++) {
            fputs(i ? ", " : "", fp);
            qsk_json_string(fp, c->params[i].key);
            fputs(": ", fp);
            qsk_json_string(fp, c->params[i].value);
        }
        fputs("}", fp);
    }
    if (attn)
        json_attn_rounding(fp, c, inputs);
    fputs(",\n  \"rules\": [", fp);
    for (size_t i = 0; i < c->nrules; i++) {
        fputs(i ? ", " : "", fp);
        qsk_json_string(fp, c->rules[i]);
    }
    fputs("],\n  \"inputs\": [\n", fp);
    for (size_t i = 0; i < c->ninputs; i++) {
        fputs("    ", fp);
        qsk_gen_json_tensor(fp, c->inputs[i].name, &inputs[i]);
        fprintf(fp, "}%s\n", i + 1 < c->ninputs ? "," : "");
    }
    if (is_program(c)) { /* [CASE-GEN-PROG]: the outputs are the variants' */
        fputs("  ]", fp);
        qskx_manifest(fp, c, fw);
        fputs("\n}\n", fp);
        return;
    }
    fputs("  ],\n  \"outputs\": [\n", fp);
    for (size_t i = 0; i < c->noutputs; i++) {
        fputs("    ", fp);
        qsk_gen_json_tensor(fp, c->outputs[i].name, qsk_results_get(ref, c->outputs[i].name));
        fputs(", \"compare\": ", fp);
        qsk_gen_json_compare(fp, &c->outputs[i]);
        fprintf(fp, "}%s\n", i + 1 < c->noutputs ? "," : "");
    }
    fputs("  ]\n}\n", fp);
}

static qs_status write_npy_in(qs_ctx *ctx, qsk_outdir *o, const char *sub, const char *name,
                              const qs_tensor *t)
{
    char file[2 * QSK_NAME_LEN + 16];
    snprintf(file, sizeof file, "%s%s%s.npy", sub ? sub : "", sub ? "/" : "", name);
    char *p = qsk_outdir_path(o, file);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status st = qsk_npy_write(ctx, p, t);
    free(p);
    return st;
}

/* --expected of a program case: each variant's outputs in expected/V/ [CASE-GEN-PROG]. */
static qs_status write_expected_variants(qs_ctx *ctx, qsk_outdir *o, const qsk_results *fw)
{
    qs_status st = QS_OK;
    for (size_t i = 0; i < fw->n && st == QS_OK; i++) {
        const char *slash = strchr(fw->names[i], '/');
        char sub[2 * QSK_NAME_LEN + 16];
        if (!slash || strcmp(slash, "/trace") == 0)
            continue;
        snprintf(sub, sizeof sub, "expected/%.*s", (int)(slash - fw->names[i]), fw->names[i]);
        char *path = qsk_outdir_path(o, sub);
        struct stat sb;
        if (!path)
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
        if (stat(path, &sb) != 0)
            st = qsk_outdir_mkdir(ctx, o, sub);
        free(path);
        if (st == QS_OK)
            st = write_npy_in(ctx, o, "expected", fw->names[i], &fw->t[i]);
    }
    return st;
}

static qs_status gen_write(qs_ctx *ctx, qsk_outdir *o, const gen_args *a, const qsk_suite *s,
                           const qsk_case *c, const qs_tensor *inputs, const qsk_results *ref,
                           const qsk_results *fw)
{
    qs_status st = QS_OK;
    for (size_t i = 0; i < c->ninputs && st == QS_OK; i++)
        st = write_npy_in(ctx, o, NULL, c->inputs[i].name, &inputs[i]);
    if (st == QS_OK && a->expected)
        st = qsk_outdir_mkdir(ctx, o, "expected");
    if (st == QS_OK && a->expected && is_program(c))
        st = write_expected_variants(ctx, o, fw);
    for (size_t i = 0; a->expected && !is_program(c) && i < c->noutputs && st == QS_OK; i++)
        st = write_npy_in(ctx, o, "expected", c->outputs[i].name,
                          qsk_results_get(ref, c->outputs[i].name));
    char *man = NULL, *p = NULL;
    size_t len = 0;
    FILE *fp = st == QS_OK ? open_memstream(&man, &len) : NULL;
    if (st == QS_OK && !fp)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    if (fp) {
        gen_manifest(fp, s, c, inputs, ref, fw);
        if (fclose(fp) != 0)
            st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    }
    if (st == QS_OK && !(p = qsk_outdir_path(o, "manifest.json")))
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    if (st == QS_OK)
        st = qsk_write_file(ctx, p, man, len);
    free(p);
    free(man);
    return st;
}

static int gen_run(int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(&qsk_cmd_gen, "--out", argc, argv, &a);
    if (rc >= 0)
        return rc;
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("gen", "out of memory");
    qsk_suite s;
    const qsk_case *c;
    qs_tensor inputs[MAX_INPUTS];
    size_t nin = 0;
    qsk_results ref = {0}, fw = {0};
    qsk_outdir o = {NULL, NULL};
    rc = load_case(ctx, "gen", &a, &s, &c);
    if (rc == 0 && c->self_only && a.expected) /* [CASE-VERIFY-SELF] */
        rc = qsk_usage_error("gen",
                             "%s:%d:%d: case %s says 'reference: none': there are no reference "
                             "outputs for --expected to write",
                             c->file, c->ref_pos.line, c->ref_pos.col, c->id);
    if (rc == 0 && (compute(ctx, c, inputs, &nin, &ref) != QS_OK ||
                    compute_framework(ctx, c, inputs, &fw) != QS_OK))
        rc = qsk_usage_error("gen", "case %s: the reference failed: %s", c->id, qs_ctx_errmsg(ctx));
    if (rc == 0 && (qsk_outdir_open(ctx, &o, a.dir) != QS_OK ||
                    gen_write(ctx, &o, &a, &s, c, inputs, &ref, &fw) != QS_OK ||
                    qsk_outdir_commit(ctx, &o) != QS_OK))
        rc = qsk_usage_error("gen", "%s", qs_ctx_errmsg(ctx));
    if (rc == 0) {
        printf("wrote the %zu input%s of case %s and manifest.json to %s; outputs to produce:",
               c->ninputs, c->ninputs == 1 ? "" : "s", c->id, a.dir);
        for (size_t i = 0; !is_program(c) && i < c->noutputs; i++)
            printf(" %s.npy", c->outputs[i].name);
        for (size_t i = 0; i < fw.n; i++) /* a program's: per variant, trace optional */
            printf(strstr(fw.names[i], "/trace") ? " [%s.jsonl]" : " %s.npy", fw.names[i]);
        printf("\n");
        if (c->self_only)
            printf("no reference run: case %s says 'reference: none' (%s:%d); verify will "
                   "check its variants against each other only\n",
                   c->id, c->file, c->ref_pos.line);
    }
    qsk_outdir_abort(&o);
    qsk_results_free(&fw);
    qsk_results_free(&ref);
    free_inputs(inputs, nin);
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_gen = {
    "gen", "write a case's inputs and manifest for an external framework",
    "usage: qspec gen CASE-FILE [--id] ID --out DIR [--expected]\n\n"
    "Writes the inputs of case ID of CASE-FILE (a case file or a folder of them) into the new\n"
    "directory DIR: one INPUT.npy per input, exactly as 'qspec run' generates them, and\n"
    "manifest.json, which names the case, its op, params and rules, each input (file,\n"
    "dtype, npy descr, shape) and each output the framework must write (file, dtype, npy\n"
    "descr, shape, comparison). With --expected, also writes the reference's outputs into\n"
    "DIR/expected/ (for debugging; 'qspec verify' never reads them). Compute the outputs,\n"
    "write each as OUTPUT.npy into a folder (DIR itself will do) and check them with\n"
    "'qspec verify CASE-FILE --id ID --results FOLDER'. A program case with 'reference:\n"
    "none' runs no reference: the manifest says \"reference\": \"none\", and --expected is\n"
    "an error.\n\n"
    "Exit status: 0 written, 2 bad usage, an unknown id or a case file that does not load.\n",
    gen_run};

/* ------------------------------------------------------------------ verify */

/* Whether name is a file gen wrote, which may stay beside the outputs. */
static int gen_file(const qsk_case *c, const char *name)
{
    if (strcmp(name, "manifest.json") == 0 || strcmp(name, "expected") == 0)
        return 1;
    for (size_t i = 0; i < c->ninputs; i++) {
        char file[QSK_NAME_LEN + 8];
        snprintf(file, sizeof file, "%s.npy", c->inputs[i].name);
        if (strcmp(name, file) == 0)
            return 1;
    }
    return 0;
}

static int output_file(const qsk_case *c, const char *name)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        char file[QSK_NAME_LEN + 8];
        snprintf(file, sizeof file, "%s.npy", c->outputs[i].name);
        if (strcmp(name, file) == 0)
            return 1;
    }
    return 0;
}

/* What the results folder of c holds: its outputs; for a program case, a folder per variant
 * a framework runs ([CASE-GEN-PROG]). */
static void output_names(const qsk_case *c, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    if (is_program(c)) {
        const qskp_program *p = c->program;
        at = (size_t)snprintf(buf, cap, "a folder per variant,");
        for (size_t v = 0; v < p->nvariants && at < cap; v++)
            if (!qsk_program_framework_why(&p->variants[v]))
                at += (size_t)snprintf(buf + at, cap - at, " %s/", p->variants[v].name);
        if (at < cap)
            snprintf(buf + at, cap - at, ", and %s or %s", QSKX_FRAMEWORK, QSKX_NOT_SUPPORTED);
        return;
    }
    for (size_t i = 0; i < c->noutputs && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", c->outputs[i].name);
}

/* Every entry of the results folder is an output or a file gen wrote; every output is
 * there. Returns an exit status after a usage error, or 0. */
static int check_folder(const gen_args *a, const qsk_case *c)
{
    char names[256];
    output_names(c, names, sizeof names);
    DIR *d = opendir(a->dir);
    if (!d)
        return qsk_usage_error("verify", "%s: cannot open the results folder: %s", a->dir,
                               strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && !output_file(c, e->d_name) && !gen_file(c, e->d_name) &&
            !(is_program(c) && qskx_entry_ok(c, e->d_name)))
            rc = qsk_usage_error("verify", "%s/%s: not an output of case %s (its outputs: %s)",
                                 a->dir, e->d_name, c->id, names);
    closedir(d);
    /* expected/ is gen --expected's: a regular OUTPUT.npy per output, nothing else */
    char sub[4096];
    struct stat xb;
    snprintf(sub, sizeof sub, "%s/expected", a->dir);
    if (rc == 0 && lstat(sub, &xb) == 0 && !S_ISDIR(xb.st_mode))
        rc = qsk_usage_error("verify", "%s: not a folder (gen --expected writes a folder)", sub);
    DIR *x = rc == 0 && !is_program(c) && lstat(sub, &xb) == 0 ? opendir(sub) : NULL;
    while (rc == 0 && x && (e = readdir(x)) != NULL) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", sub, e->d_name);
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!output_file(c, e->d_name))
            rc = qsk_usage_error("verify", "%s: not an output of case %s (its outputs: %s)", p,
                                 c->id, names);
        else if (lstat(p, &xb) != 0 || !S_ISREG(xb.st_mode))
            rc = qsk_usage_error("verify", "%s: not a regular file", p);
    }
    if (x)
        closedir(x);
    for (size_t i = 0; rc == 0 && !is_program(c) && i < c->noutputs; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s.npy", a->dir, c->outputs[i].name);
        if (stat(path, &sb) != 0)
            rc = qsk_usage_error("verify", "%s: missing: case %s has the output %s", path, c->id,
                                 c->outputs[i].name);
        else if (!S_ISREG(sb.st_mode))
            rc = qsk_usage_error("verify", "%s: not a regular file", path);
    }
    return rc;
}

/* Reads every output the framework wrote into got, checking dtype and shape against the
 * reference's. Returns an exit status after a usage error, or 0. */
static int read_outputs(qs_ctx *ctx, const gen_args *a, const qsk_case *c, const qsk_results *ref,
                        qsk_results *got)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        const qsk_output *o = &c->outputs[i];
        const qs_tensor *e = qsk_results_get(ref, o->name);
        char path[4096], want[160], have[160];
        snprintf(path, sizeof path, "%s/%s.npy", a->dir, o->name);
        qs_tensor t;
        if (qsk_npy_read(ctx, path, &t) != QS_OK)
            return qsk_usage_error("verify", "%s", qs_ctx_errmsg(ctx));
        if (t.dtype != e->dtype) {
            int rc = qsk_usage_error(
                "verify",
                "%s: dtype %s (npy descr %s), but output %s of case %s is %s (npy descr %s)", path,
                qs_dtype_name(t.dtype), qsk_npy_descr(t.dtype), o->name, c->id,
                qs_dtype_name(e->dtype), qsk_npy_descr(e->dtype));
            qs_tensor_free(&t);
            return rc;
        }
        qsk_shape_text(e->ndim, e->shape, 1, want, sizeof want);
        qsk_shape_text(t.ndim, t.shape, 1, have, sizeof have);
        if (strcmp(want, have) != 0) {
            qs_tensor_free(&t);
            return qsk_usage_error("verify", "%s: shape %s, but output %s of case %s has shape %s",
                                   path, have, o->name, c->id, want);
        }
        if (qsk_results_add(ctx, got, o->name, &t) != QS_OK)
            return qsk_usage_error("verify", "%s", qs_ctx_errmsg(ctx));
    }
    return 0;
}

/* [CASE-VERIFY-PROG]: the reference checked against its golden digests, then what the
 * framework wrote for each variant. */
static int verify_program(qs_ctx *ctx, const gen_args *a, const qsk_case *c,
                          const qs_tensor *inputs, const qsk_results *ref)
{
    qsk_results fw;
    qsk_case_result r;
    qsk_result_init(&r, c);
    qsk_check_digests(c, ref, &r, 0);
    int rc = r.kind == QSK_RES_PASS ? 0 : QSK_EXIT_FAIL;
    if (rc) {
        qsk_result_finish(&r);
        fputs(r.out ? r.out : "", stdout);
        printf("FAIL %s: the reference disagrees with the case's golden digests\n", c->id);
    }
    qsk_result_free(&r);
    if (rc == 0 && compute_framework(ctx, c, inputs, &fw) != QS_OK)
        rc = qsk_usage_error("verify", "case %s: the reference failed: %s", c->id,
                             qs_ctx_errmsg(ctx));
    else if (rc == 0) {
        rc = qskx_verify(ctx, c, a->dir, &fw);
        qsk_results_free(&fw);
    }
    return rc;
}

/* [CASE-VERIFY-SELF] A program case with `reference: none`: no reference run and no input
 * generated; what the framework wrote is read by the layouts the program gives and checked
 * by the variants' comparisons with each other and the case's traces. */
static int verify_self(qs_ctx *ctx, const gen_args *a, const qsk_case *c)
{
    qsk_results lay;
    int rc;
    memset(&lay, 0, sizeof lay);
    if (qsk_program_framework_layouts(ctx, c, &lay) != QS_OK)
        rc = qsk_usage_error("verify", "case %s: %s", c->id, qs_ctx_errmsg(ctx));
    else
        rc = qskx_verify(ctx, c, a->dir, &lay);
    qsk_results_free(&lay);
    return rc;
}

static int verify_checked(qs_ctx *ctx, const gen_args *a, const qsk_case *c)
{
    qs_tensor inputs[MAX_INPUTS];
    size_t nin = 0;
    qsk_results ref, got = {0};
    int rc = 0;
    if (is_program(c) && c->self_only)
        return verify_self(ctx, a, c);
    if (compute(ctx, c, inputs, &nin, &ref) != QS_OK)
        rc = qsk_usage_error("verify", "case %s: the reference failed: %s", c->id,
                             qs_ctx_errmsg(ctx));
    if (rc == 0 && is_program(c)) {
        rc = verify_program(ctx, a, c, inputs, &ref);
        qsk_results_free(&ref);
        free_inputs(inputs, nin);
        return rc;
    }
    if (rc == 0)
        rc = read_outputs(ctx, a, c, &ref, &got);
    if (rc == 0) {
        qsk_case_result r;
        qsk_result_init(&r, c);
        qsk_check_digests(c, &ref, &r, 0);
        qsk_compare_outputs(c, &ref, &got, &r);
        qsk_result_finish(&r);
        if (r.out)
            fputs(r.out, stdout);
        if (r.kind == QSK_RES_PASS)
            printf("PASS %s: %zu output%s with the reference\n", c->id, c->noutputs,
                   c->noutputs == 1 ? " agrees" : "s agree");
        else
            printf("FAIL %s: %zu of %zu output%s %s with the reference\n", c->id, r.nfails,
                   c->noutputs, c->noutputs == 1 ? "" : "s",
                   r.nfails == 1 ? "disagrees" : "disagree");
        rc = r.kind == QSK_RES_PASS ? QSK_EXIT_OK : QSK_EXIT_FAIL;
        qsk_result_free(&r);
    }
    qsk_results_free(&got);
    qsk_results_free(&ref);
    free_inputs(inputs, nin);
    return rc;
}

static int verify_run(int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(&qsk_cmd_verify, "--results", argc, argv, &a);
    if (rc >= 0)
        return rc;
    struct stat sb;
    if (stat(a.dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return qsk_usage_error("verify",
                               "%s: not a folder (--results names the folder the "
                               "outputs were written to)",
                               a.dir);
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("verify", "out of memory");
    qsk_suite s;
    const qsk_case *c;
    rc = load_case(ctx, "verify", &a, &s, &c);
    if (rc == 0)
        rc = check_folder(&a, c);
    if (rc == 0)
        rc = verify_checked(ctx, &a, c);
    qsk_suite_free(&s);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_verify = {
    "verify", "check an external framework's .npy outputs of a case",
    "usage: qspec verify CASE-FILE [--id] ID --results DIR\n\n"
    "Compares the outputs of case ID that an external framework wrote into DIR, one\n"
    "OUTPUT.npy per output named in the manifest of 'qspec gen', with the reference's, as\n"
    "'qspec run' compares a plugin's: the reference is checked against the golden digests,\n"
    "then each output is compared as the case says. DIR may also hold the files gen wrote\n"
    "(manifest.json, the inputs, expected/); any other entry, a missing output, or an output\n"
    "whose file cannot be read or has the wrong dtype or shape is an error. A program case\n"
    "with 'reference: none' runs no reference: its variants are checked against each other\n"
    "and the case's traces only, and a line 'no reference comparison: ...' says so.\n\n"
    "Each mismatch prints a FAIL line as 'qspec run' does, then a PASS or FAIL summary.\n"
    "Exit status: 0 every output agrees, 1 some output disagrees, 2 bad usage or a\n"
    "missing, extra, unreadable, mis-typed or mis-shaped file.\n",
    verify_run};
