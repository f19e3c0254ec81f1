/* cmd_quantize.c: `qspec quantize` and `qspec dequantize` — run a recipe of spec/recipes.md
 * on a .npy tensor and write its copies as .npy files in a directory ([REC-CLI-FILES]), or
 * read such a directory back to FP32. Delayed scaling keeps its state in a text file
 * ([REC-CLI-STATE]). Everything is computed and written into a temporary directory first;
 * only a complete result is renamed into place, so an error leaves nothing behind. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "fileio.h"
#include "npy.h"
#include "qspec/qspec.h"

#define QSK_MAX_OPTS 32

/* ------------------------------------------------------------------ arguments */

typedef struct q_args {
    const char *recipe, *in, *out, *state, *dir, *role;
    int init, update, history_given;
    int nopts;
    const char *keys[QSK_MAX_OPTS], *values[QSK_MAX_OPTS];
} q_args;

/* "--name VALUE" or "--name=VALUE" at argv[*i] into key and value (key without dashes);
 * flags (--init, --update) have value NULL. Returns 0, or an exit code on error. */
static int split_option(const char *cmd, int argc, char **argv, int *i, const char **key,
                        const char **value, char *buf, size_t bufsize)
{
    const char *arg = argv[*i];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
        return qsk_usage_error(cmd, "unexpected argument '%s'", arg);
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n + 1 > bufsize)
        return qsk_usage_error(cmd, "option '%.40s...' is too long", arg);
    memcpy(buf, arg + 2, n);
    buf[n] = '\0';
    *key = buf;
    *value = NULL;
    if (strcmp(buf, "init") == 0 || strcmp(buf, "update") == 0)
        return eq ? qsk_usage_error(cmd, "option '--%s' takes no value", buf) : 0;
    if (eq) {
        *value = eq + 1;
    } else {
        if (*i + 1 >= argc)
            return qsk_usage_error(cmd, "option '%s' needs a value", arg);
        *i += 1;
        *value = argv[*i];
    }
    return 0;
}

static char opt_names[QSK_MAX_OPTS + 8][64];

static int parse_args(const char *cmd, int argc, char **argv, q_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *key = NULL, *value = NULL;
        int slot = a->nopts < QSK_MAX_OPTS ? a->nopts : QSK_MAX_OPTS;
        int rc = split_option(cmd, argc, argv, &i, &key, &value, opt_names[slot],
                              sizeof opt_names[slot]);
        if (rc)
            return rc;
        if (strcmp(key, "recipe") == 0)
            a->recipe = value;
        else if (strcmp(key, "in") == 0)
            a->in = value;
        else if (strcmp(key, "out") == 0)
            a->out = value;
        else if (strcmp(key, "state") == 0)
            a->state = value;
        else if (strcmp(key, "dir") == 0)
            a->dir = value;
        else if (strcmp(key, "role") == 0)
            a->role = value;
        else if (strcmp(key, "init") == 0)
            a->init = 1;
        else if (strcmp(key, "update") == 0)
            a->update = 1;
        else if (a->nopts >= QSK_MAX_OPTS)
            return qsk_usage_error(cmd, "too many options");
        else {
            a->history_given |= strcmp(key, "history") == 0;
            a->keys[a->nopts] = key;
            a->values[a->nopts++] = value;
        }
    }
    return 0;
}

/* The configuration of --recipe, --role and the recipe options, in order. */
static int build_config(const char *cmd, qs_ctx *ctx, const q_args *a, qs_recipe_config *cfg)
{
    if (!a->recipe)
        return qsk_usage_error(
            cmd, "missing --recipe (delayed|current|mxfp8|block|nvfp4|rowwise|rowwise_with_gw_hp)");
    int kind = qs_recipe_kind_from_name(a->recipe);
    if (kind < 0)
        return qsk_usage_error(
            cmd,
            "unknown recipe '%s' (delayed|current|mxfp8|block|nvfp4|rowwise|rowwise_with_gw_hp)",
            a->recipe);
    int role = a->role ? qs_tensor_role_from_name(a->role) : QS_ROLE_INPUT;
    if (role < 0)
        return qsk_usage_error(cmd, "unknown role '%s'", a->role);
    qs_recipe_config_default(ctx, cfg, (qs_recipe_kind)kind, (qs_tensor_role)role);
    for (int i = 0; i < a->nopts; i++)
        if (qs_recipe_config_set(ctx, cfg, a->keys[i], a->values[i]) != QS_OK)
            return qsk_usage_error(cmd, "%s", qs_ctx_errmsg(ctx));
    if (qs_recipe_config_check(ctx, cfg) != QS_OK)
        return qsk_usage_error(cmd, "%s", qs_ctx_errmsg(ctx));
    return 0;
}

/* ------------------------------------------------------------------ delayed state file */

static int parse_hex32(const char *s, uint32_t *u)
{
    if (strlen(s) != 8)
        return -1;
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    if (*end)
        return -1;
    *u = (uint32_t)v;
    return 0;
}

/* Reads the next line of fp into buf without its newline; -1 at end of file or if too long. */
static int read_line(FILE *fp, char *buf, size_t n)
{
    if (!fgets(buf, (int)n, fp))
        return -1;
    size_t len = strlen(buf);
    if (len == 0 || buf[len - 1] != '\n')
        return -1;
    buf[len - 1] = '\0';
    return 0;
}

/* "NAME HEX" into *u; -1 if the line is not that. */
static int named_hex(const char *line, const char *name, uint32_t *u)
{
    size_t n = strlen(name);
    if (strncmp(line, name, n) != 0 || line[n] != ' ')
        return -1;
    return parse_hex32(line + n + 1, u);
}

/* [REC-CLI-STATE]: reads path into q's state (q is initialized with len L or, when the
 * file's len differs and --history was not given, re-initialized with the file's len). */
static qs_status state_read(qs_ctx *ctx, const char *path, qs_quantizer *q, int history_given)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return qs_ctx_error(ctx, QS_ERR_IO,
                            "state file %s: is %s, not a file (--state names a file)", path,
                            S_ISDIR(sb.st_mode) ? "a directory" : "a special file");
    FILE *fp = fopen(path, "r");
    if (!fp)
        return qs_ctx_error(ctx, QS_ERR_IO, "state file %s: cannot open: %s", path,
                            strerror(errno));
    char line[128];
    uint32_t sc, si, len;
    int ln = 1;
    qs_status s = QS_OK;
    if (read_line(fp, line, sizeof line) || strcmp(line, "qspec-ds-state 1") != 0)
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "state file %s:1: expected 'qspec-ds-state 1'", path);
    else if (ln++, read_line(fp, line, sizeof line) || named_hex(line, "scale", &sc))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "state file %s:%d: expected 'scale HEX8'", path, ln);
    else if (ln++, read_line(fp, line, sizeof line) || named_hex(line, "scale_inv", &si))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "state file %s:%d: expected 'scale_inv HEX8'", path,
                         ln);
    else if (ln++, read_line(fp, line, sizeof line) || strncmp(line, "len ", 4) != 0 ||
                       sscanf(line + 4, "%u", &len) != 1 || len < 1 || len > (1u << 24))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "state file %s:%d: expected 'len L' (1..16777216)",
                         path, ln);
    if (s == QS_OK && (int64_t)len != q->cfg.history_len) {
        if (history_given) {
            s = qs_ctx_error(ctx, QS_ERR_FORMAT,
                             "state file %s: len %u differs from --history %lld", path, len,
                             (long long)q->cfg.history_len);
        } else {
            qs_recipe_config cfg = q->cfg;
            cfg.history_len = len;
            qs_quantizer_free(q);
            s = qs_quantizer_init(ctx, q, &cfg);
        }
    }
    for (uint32_t i = 0; s == QS_OK && i < len; i++) {
        uint32_t h;
        ln++;
        if (read_line(fp, line, sizeof line) || parse_hex32(line, &h))
            s = qs_ctx_error(ctx, QS_ERR_FORMAT,
                             "state file %s:%d: expected history entry %u "
                             "as HEX8",
                             path, ln, i);
        else
            q->ds.history[i] = qs_f32_from_bits(h);
    }
    if (s == QS_OK && fgets(line, sizeof line, fp))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "state file %s:%d: unexpected text after the history",
                         path, ln + 1);
    fclose(fp);
    /* A scale is a finite positive FP32 number [REC-CLI-STATE]: NaN, inf, zero or a negative
     * value would quantize everything to NaN or zero without a word. */
    float fsc = qs_f32_from_bits(sc), fsi = qs_f32_from_bits(si);
    if (s == QS_OK && (!(fsc > 0) || isinf(fsc) || !(fsi > 0) || isinf(fsi)))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT,
                         "state file %s: scale %08X or scale_inv %08X is not a finite positive "
                         "number",
                         path, (unsigned)sc, (unsigned)si);
    if (s == QS_OK) {
        q->ds.scale = qs_f32_from_bits(sc);
        q->ds.scale_inv = qs_f32_from_bits(si);
    }
    return s;
}

/* [REC-CLI-STATE]: opens the atomic write of q's state (committed by the caller). */
static qs_status state_write(qs_ctx *ctx, const char *path, const qs_quantizer *q, qsk_atomic *a)
{
    qs_status s = qsk_atomic_open(ctx, a, path);
    if (s != QS_OK)
        return s;
    fprintf(a->fp, "qspec-ds-state 1\nscale %08X\nscale_inv %08X\nlen %lld\n",
            (unsigned)qs_f32_bits(q->ds.scale), (unsigned)qs_f32_bits(q->ds.scale_inv),
            (long long)q->ds.len);
    for (int64_t i = 0; i < q->ds.len; i++)
        fprintf(a->fp, "%08X\n", (unsigned)qs_f32_bits(q->ds.history[i]));
    return QS_OK;
}

/* ------------------------------------------------------------------ output directory */

typedef struct out_dir {
    char *tmp;             /* the temporary directory */
    const char *names[16]; /* files written in it */
    int n;
} out_dir;

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void out_dir_abort(out_dir *o)
{
    for (int i = 0; i < o->n; i++) {
        char *p = join(o->tmp, o->names[i]);
        if (p)
            remove(p);
        free(p);
    }
    if (o->tmp)
        rmdir(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    o->n = 0;
}

static qs_status out_dir_open(qs_ctx *ctx, out_dir *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    struct stat st;
    if (dir[0] == '\0')
        return qs_ctx_error(ctx, QS_ERR_IO, "--out: an empty path (give a new directory)");
    if (lstat(dir, &st) == 0)
        return qs_ctx_error(ctx, QS_ERR_IO,
                            "--out %s: already exists, as %s (give a new directory)", dir,
                            S_ISDIR(st.st_mode) ? "a directory" : "a file");
    size_t n = strlen(dir) + 16;
    o->tmp = malloc(n);
    if (!o->tmp)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    snprintf(o->tmp, n, "%s.tmp-XXXXXX", dir);
    if (!mkdtemp(o->tmp)) {
        qs_status s =
            qs_ctx_error(ctx, QS_ERR_IO, "cannot create a temporary directory beside %s: %s", dir,
                         strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return s;
    }
    return QS_OK;
}

static qs_status out_dir_npy(qs_ctx *ctx, out_dir *o, const char *name, const qs_tensor *t)
{
    char *p = join(o->tmp, name);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status s = qsk_npy_write(ctx, p, t);
    free(p);
    if (s == QS_OK && o->n < 16)
        o->names[o->n++] = name;
    return s;
}

static qs_status out_dir_text(qs_ctx *ctx, out_dir *o, const char *name, const char *text)
{
    char *p = join(o->tmp, name);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status s = qsk_write_file(ctx, p, text, strlen(text));
    free(p);
    if (s == QS_OK && o->n < 16)
        o->names[o->n++] = name;
    return s;
}

static qs_status out_dir_commit(qs_ctx *ctx, out_dir *o, const char *dir)
{
    if (rename(o->tmp, dir) != 0)
        return qs_ctx_error(ctx, QS_ERR_IO, "cannot rename the output into %s: %s", dir,
                            strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    return QS_OK;
}

/* ------------------------------------------------------------------ quantize */

/* A 1-D FP32 tensor of n values. */
static qs_status f32_vector(qs_ctx *ctx, qs_tensor *t, int64_t n, const float *v)
{
    qs_status s = qs_tensor_alloc(ctx, t, QS_FP32, 1, &n);
    if (s == QS_OK)
        memcpy(t->data, v, (size_t)n * sizeof(float));
    return s;
}

/* meta.txt [REC-CLI-FILES]: the options dequantization needs, as `key value` lines. */
static void write_meta(char *buf, size_t n, const qs_quantized *z)
{
    const qs_recipe_config *c = &z->cfg;
    int k = snprintf(buf, n, "qspec-quantized 1\nrecipe %s\nrows %lld\ncols %lld\nrole %s\n",
                     qs_recipe_kind_name(c->kind), (long long)z->rows, (long long)z->cols,
                     qs_tensor_role_name(c->role));
    static const char *const fmt_names[] = {"hybrid", "e4m3", "e5m2"};
    if (c->kind == QS_RECIPE_DELAYED || c->kind == QS_RECIPE_CURRENT ||
        c->kind == QS_RECIPE_BLOCK || c->kind == QS_RECIPE_ROWWISE ||
        c->kind == QS_RECIPE_ROWWISE_GW_HP)
        k += snprintf(buf + k, n - (size_t)k, "format %s\n", fmt_names[c->format]);
    if (c->kind == QS_RECIPE_MXFP8)
        k += snprintf(buf + k, n - (size_t)k, "elem %s\nrule %s\n", qs_dtype_name(c->mx_elem),
                      qs_mx_rule_name(c->mx_rule));
    if (c->kind == QS_RECIPE_BLOCK || c->kind == QS_RECIPE_NVFP4)
        k += snprintf(buf + k, n - (size_t)k, "tile %s\n", c->tile_2d ? "2d" : "1d");
    if (c->kind == QS_RECIPE_NVFP4)
        snprintf(buf + k, n - (size_t)k, "variant %s\nrht %d\nsr %d\n",
                 qs_nv_variant_name(c->nv_variant), c->rht, c->sr);
}

static qs_status write_outputs(qs_ctx *ctx, out_dir *o, const qs_quantized *z)
{
    static const char *const data_names[2] = {"row_data.npy", "col_data.npy"};
    static const char *const scale_names[2] = {"row_scale.npy", "col_scale.npy"};
    qs_status s = QS_OK;
    for (int d = 0; d < QS_DIR_COUNT && s == QS_OK; d++) {
        if (!z->data[d].data)
            continue;
        s = out_dir_npy(ctx, o, data_names[d], &z->data[d]);
        if (s == QS_OK)
            s = out_dir_npy(ctx, o, scale_names[d], &z->scale[d]);
    }
    qs_tensor t = {0};
    int tensorwise = z->cfg.kind == QS_RECIPE_DELAYED || z->cfg.kind == QS_RECIPE_CURRENT;
    int d0 = z->data[QS_DIR_ROW].data ? QS_DIR_ROW : QS_DIR_COL;
    if (s == QS_OK && tensorwise) {
        float sinv = z->global_dec[d0];
        if ((s = f32_vector(ctx, &t, 1, &z->amax[d0])) == QS_OK)
            s = out_dir_npy(ctx, o, "amax.npy", &t);
        qs_tensor_free(&t);
        if (s == QS_OK && (s = f32_vector(ctx, &t, 1, &sinv)) == QS_OK)
            s = out_dir_npy(ctx, o, "scale_inv.npy", &t);
        qs_tensor_free(&t);
    }
    if (s == QS_OK && z->cfg.kind == QS_RECIPE_NVFP4) {
        if ((s = f32_vector(ctx, &t, 2, z->amax)) == QS_OK)
            s = out_dir_npy(ctx, o, "amax.npy", &t);
        qs_tensor_free(&t);
        if (s == QS_OK && (s = f32_vector(ctx, &t, 2, z->global_dec)) == QS_OK)
            s = out_dir_npy(ctx, o, "global_scale.npy", &t);
        qs_tensor_free(&t);
    }
    char meta[512];
    write_meta(meta, sizeof meta, z);
    if (s == QS_OK)
        s = out_dir_text(ctx, o, "meta.txt", meta);
    return s;
}

static void print_summary(const q_args *a, const qs_quantized *z, const qs_quantizer *q)
{
    printf("%s: [%lld,%lld] -> %s", qs_recipe_kind_name(z->cfg.kind), (long long)z->rows,
           (long long)z->cols, qs_dtype_name(z->elem));
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        const qs_tensor *s = &z->scale[d];
        if (!z->data[d].data)
            continue;
        printf(", %s [%lld,%lld]", d == QS_DIR_ROW ? "row" : "col", (long long)z->data[d].shape[0],
               (long long)z->data[d].shape[1]);
        if (s->ndim == 2)
            printf(" scale %s [%lld,%lld]", qs_dtype_name(s->dtype), (long long)s->shape[0],
                   (long long)s->shape[1]);
        else
            printf(" scale_inv %08X", (unsigned)qs_f32_bits(z->global_dec[d]));
    }
    if (q->cfg.kind == QS_RECIPE_DELAYED && a->update)
        printf(", next scale %08X", (unsigned)qs_f32_bits(q->ds.scale));
    printf(" -> %s\n", a->out);
}

/* The delayed state: from --state when given (or fresh with --init when it is missing). */
static int load_state(qs_ctx *ctx, const q_args *a, qs_quantizer *q)
{
    if (!a->state) {
        if (a->update || a->init)
            return qsk_usage_error("quantize", "--update and --init need --state FILE");
        return 0;
    }
    if (q->cfg.kind != QS_RECIPE_DELAYED)
        return qsk_usage_error("quantize", "--state applies to recipe delayed only");
    struct stat st;
    if (stat(a->state, &st) != 0 && errno == ENOENT && a->init)
        return 0;
    if (state_read(ctx, a->state, q, a->history_given) != QS_OK)
        return qsk_usage_error("quantize", "%s", qs_ctx_errmsg(ctx));
    return 0;
}

static int quantize_with(qs_ctx *ctx, const q_args *a, qs_quantizer *q, const qs_tensor *x)
{
    qs_quantized z;
    int rc = load_state(ctx, a, q);
    if (rc)
        return rc;
    if (qs_quantize(ctx, q, x, &z) != QS_OK)
        return qsk_usage_error("quantize", "%s: %s", a->in, qs_ctx_errmsg(ctx));
    if (a->update && qs_delayed_update(ctx, q) != QS_OK) {
        qs_quantized_free(&z);
        return qsk_usage_error("quantize", "%s", qs_ctx_errmsg(ctx));
    }
    out_dir o;
    qsk_atomic st = {0};
    qs_status s = out_dir_open(ctx, &o, a->out);
    if (s == QS_OK)
        s = write_outputs(ctx, &o, &z);
    if (s == QS_OK && a->state)
        s = state_write(ctx, a->state, q, &st);
    if (s == QS_OK)
        s = out_dir_commit(ctx, &o, a->out);
    if (s == QS_OK && a->state)
        s = qsk_atomic_commit(ctx, &st);
    else if (st.fp)
        qsk_atomic_abort(&st);
    if (s != QS_OK) {
        out_dir_abort(&o);
        qs_quantized_free(&z);
        return qsk_usage_error("quantize", "%s", qs_ctx_errmsg(ctx));
    }
    print_summary(a, &z, q);
    qs_quantized_free(&z);
    return QSK_EXIT_OK;
}

static int quantize_run(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_quantize);
            return QSK_EXIT_OK;
        }
    }
    q_args a;
    int rc = parse_args("quantize", argc, argv, &a);
    if (rc)
        return rc;
    if (a.dir)
        return qsk_usage_error("quantize", "unknown option '--dir' (a dequantize option)");
    if (!a.in || !a.out)
        return qsk_usage_error("quantize", "missing %s", !a.in ? "--in X.npy" : "--out DIR");
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("quantize", "out of memory");
    qs_recipe_config cfg;
    qs_quantizer q = {0};
    qs_tensor x = {0};
    rc = build_config("quantize", ctx, &a, &cfg);
    if (!rc && qs_quantizer_init(ctx, &q, &cfg) != QS_OK)
        rc = qsk_usage_error("quantize", "%s", qs_ctx_errmsg(ctx));
    if (!rc && qsk_npy_read(ctx, a.in, &x) != QS_OK)
        rc = qsk_usage_error("quantize", "%s", qs_ctx_errmsg(ctx));
    if (!rc)
        rc = quantize_with(ctx, &a, &q, &x);
    qs_tensor_free(&x);
    qs_quantizer_free(&q);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_quantize = {
    "quantize", "quantize a .npy tensor with a recipe, writing its copies as .npy files",
    "usage: qspec quantize --recipe R [--role ROLE] [--KEY VALUE ...] --in X.npy --out DIR\n"
    "                      [--state FILE [--init] [--update]]\n\n"
    "Quantizes the 2-D bf16/fp16/fp32 tensor X with recipe R (delayed, current, mxfp8, block,\n"
    "nvfp4, rowwise, rowwise_with_gw_hp) as spec/recipes.md defines, and writes into the new "
    "directory DIR:\n"
    "row_data.npy, row_scale.npy, col_data.npy, col_scale.npy (the copies produced),\n"
    "amax.npy and scale_inv.npy (delayed, current), amax.npy and global_scale.npy (nvfp4),\n"
    "and meta.txt. DIR must not exist; it appears only when everything succeeded.\n\n"
    "Options (KEY VALUE, each for the recipes named):\n"
    "  role input|weight|output|grad_output|grad_input   rowwise 0|1   columnwise 0|1\n"
    "  delayed: history L, algo max|most_recent, margin M, roll fused|unfused, format F\n"
    "  current, block: format hybrid|e4m3|e5m2, eps E, pow2 0|1; block: tile 1d|2d\n"
    "  mxfp8: elem e4m3|e5m2, rule te|ocp\n"
    "  nvfp4: tile 1d|2d, variant te|torchao, rht 0|1, sr 0|1, seed S, offset O\n"
    "  rowwise, rowwise_with_gw_hp: format hybrid|e4m3|e5m2, pow2 0|1\n\n"
    "Delayed scaling: --state FILE reads the state (scale, scale_inv, history) before\n"
    "quantizing and writes it back after; --update runs the delayed-scaling update after the\n"
    "quantization; --init starts from scale 1 when FILE does not exist yet.\n"
    "Prints one summary line. Exit status 0, or 2 on bad usage or input (nothing written).\n",
    quantize_run};

/* ------------------------------------------------------------------ dequantize */

/* Reads DIR/meta.txt into z's configuration and extents. */
static qs_status read_meta(qs_ctx *ctx, const char *dir, const char *recipe, qs_quantized *z)
{
    char *path = join(dir, "meta.txt"), *buf = NULL;
    size_t len;
    if (!path)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status s = qsk_read_file(ctx, path, &buf, &len);
    int ln = 0, kind = -1;
    long long rows = 0, cols = 0;
    for (char *line = buf, *next; s == QS_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        ln++;
        char *sp = strchr(line, ' ');
        if (ln == 1) {
            if (strcmp(line, "qspec-quantized 1") != 0)
                s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:1: expected 'qspec-quantized 1'", path);
            continue;
        }
        if (!sp) {
            s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d: expected 'key value'", path, ln);
            continue;
        }
        *sp = '\0';
        const char *v = sp + 1;
        if (ln == 2) {
            kind = strcmp(line, "recipe") == 0 ? qs_recipe_kind_from_name(v) : -1;
            if (kind < 0)
                s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:2: expected 'recipe NAME'", path);
            else if (recipe && strcmp(recipe, v) != 0)
                s = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s holds recipe %s, not %s", dir, v,
                                 recipe);
            else
                s = qs_recipe_config_default(ctx, &z->cfg, (qs_recipe_kind)kind, QS_ROLE_INPUT);
        } else if (strcmp(line, "rows") == 0 || strcmp(line, "cols") == 0) {
            long long *t = line[0] == 'r' ? &rows : &cols;
            if (sscanf(v, "%lld", t) != 1 || *t < 1)
                s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d: bad extent '%s'", path, ln, v);
        } else if (qs_recipe_config_set(ctx, &z->cfg, line, v) != QS_OK) {
            char why[256]; /* the message is copied: ctx's buffer is rewritten below */
            snprintf(why, sizeof why, "%s", qs_ctx_errmsg(ctx));
            s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d: %s", path, ln, why);
        }
    }
    if (s == QS_OK && (kind < 0 || rows < 1 || cols < 1))
        s = qs_ctx_error(ctx, QS_ERR_FORMAT, "%s: needs recipe, rows and cols lines", path);
    z->rows = rows;
    z->cols = cols;
    z->elem = qs_recipe_elem_dtype(&z->cfg);
    free(buf);
    free(path);
    return s;
}

static int file_exists(const char *dir, const char *name)
{
    char *p = join(dir, name);
    struct stat st;
    int e = p && stat(p, &st) == 0;
    free(p);
    return e;
}

static qs_status read_npy(qs_ctx *ctx, const char *dir, const char *name, qs_tensor *t)
{
    char *p = join(dir, name);
    if (!p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    qs_status s = qsk_npy_read(ctx, p, t);
    free(p);
    return s;
}

/* Reads the copy dir of DIR and, for nvfp4, its global decode scale. */
static qs_status read_copy(qs_ctx *ctx, const char *dir, qs_direction d, qs_quantized *z)
{
    qs_status s =
        read_npy(ctx, dir, d == QS_DIR_ROW ? "row_data.npy" : "col_data.npy", &z->data[d]);
    if (s == QS_OK)
        s = read_npy(ctx, dir, d == QS_DIR_ROW ? "row_scale.npy" : "col_scale.npy", &z->scale[d]);
    if (s == QS_OK && (z->cfg.kind == QS_RECIPE_DELAYED || z->cfg.kind == QS_RECIPE_CURRENT)) {
        /* [REC-CLI-FILES] a tensorwise copy's scale is scale_inv.npy's: both must agree */
        qs_tensor si = {0};
        s = read_npy(ctx, dir, "scale_inv.npy", &si);
        int ok = s == QS_OK && si.dtype == QS_FP32 && si.numel == 1 &&
                 z->scale[d].dtype == QS_FP32 && z->scale[d].numel == 1;
        if (s == QS_OK && !ok)
            s = qs_ctx_error(ctx, QS_ERR_SHAPE,
                             "%s/scale_inv.npy and the copy's scale must be "
                             "fp32 of one value",
                             dir);
        if (s == QS_OK && memcmp(si.data, z->scale[d].data, 4) != 0)
            s = qs_ctx_error(ctx, QS_ERR_FORMAT,
                             "%s/scale_inv.npy (%08X) differs from %s_scale.npy (%08X): the "
                             "directory was changed after 'qspec quantize'",
                             dir, (unsigned)qs_f32_bits(((const float *)si.data)[0]),
                             d == QS_DIR_ROW ? "row" : "col",
                             (unsigned)qs_f32_bits(((const float *)z->scale[d].data)[0]));
        if (s == QS_OK)
            z->global_dec[d] = ((const float *)si.data)[0];
        qs_tensor_free(&si);
    }
    if (s != QS_OK || z->cfg.kind != QS_RECIPE_NVFP4)
        return s;
    qs_tensor g = {0};
    s = read_npy(ctx, dir, "global_scale.npy", &g);
    if (s == QS_OK && (g.dtype != QS_FP32 || g.ndim != 1 || g.shape[0] != 2))
        s = qs_ctx_error(ctx, QS_ERR_SHAPE, "%s/global_scale.npy must be fp32 of shape [2]", dir);
    if (s == QS_OK)
        memcpy(&z->global_dec[d], (const char *)g.data + 4 * d, 4);
    z->global_enc[d] = z->global_dec[d];
    qs_tensor_free(&g);
    return s;
}

static int dequantize_run(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_dequantize);
            return QSK_EXIT_OK;
        }
    }
    q_args a;
    int rc = parse_args("dequantize", argc, argv, &a);
    if (rc)
        return rc;
    if (a.nopts || a.state || a.init || a.update || a.role)
        return qsk_usage_error("dequantize",
                               "unknown option '--%s' (dequantize takes --recipe, "
                               "--in, --out, --dir)",
                               a.nopts   ? a.keys[0]
                               : a.state ? "state"
                               : a.role  ? "role"
                                         : "init");
    if (!a.in || !a.out)
        return qsk_usage_error("dequantize", "missing %s", !a.in ? "--in DIR" : "--out Y.npy");
    if (a.dir && strcmp(a.dir, "row") != 0 && strcmp(a.dir, "col") != 0)
        return qsk_usage_error("dequantize", "--dir must be row or col, got '%s'", a.dir);
    qs_ctx *ctx = qs_ctx_new();
    if (!ctx)
        return qsk_usage_error("dequantize", "out of memory");
    qs_quantized z;
    memset(&z, 0, sizeof z);
    qs_tensor y = {0};
    qs_direction d = (a.dir && a.dir[0] == 'c') || (!a.dir && !file_exists(a.in, "row_data.npy"))
                         ? QS_DIR_COL
                         : QS_DIR_ROW;
    qs_status s = read_meta(ctx, a.in, a.recipe, &z);
    if (s == QS_OK)
        s = read_copy(ctx, a.in, d, &z);
    if (s == QS_OK)
        s = qs_dequantize(ctx, &z, d, &y);
    if (s == QS_OK)
        s = qsk_npy_write(ctx, a.out, &y);
    if (s != QS_OK)
        rc = qsk_usage_error("dequantize", "%s: %s", a.in, qs_ctx_errmsg(ctx));
    else
        printf("%s: %s copy of %s -> %s [%lld,%lld] fp32\n", qs_recipe_kind_name(z.cfg.kind),
               d == QS_DIR_ROW ? "row" : "col", a.in, a.out, (long long)z.rows, (long long)z.cols);
    qs_tensor_free(&y);
    qs_quantized_free(&z);
    qs_ctx_free(ctx);
    return rc;
}

const qsk_command qsk_cmd_dequantize = {
    "dequantize", "read a directory written by 'qspec quantize' back to an fp32 .npy tensor",
    "usage: qspec dequantize [--recipe R] --in DIR --out Y.npy [--dir row|col]\n\n"
    "Reads DIR (as 'qspec quantize' writes it: meta.txt and the copy's .npy files) and\n"
    "writes the dequantization of one copy (--dir; the rowwise copy when present) as fp32 of\n"
    "the input's shape [M, K] (spec/recipes.md [REC-DEQ-SHAPE]). --recipe, when given, must\n"
    "match the recipe in DIR. Exit status 0, or 2 on bad usage or input (nothing written).\n",
    dequantize_run};
