/* program.c: loading the program of a case with `op: program` (spec/cases.md, Programs):
 * the statement tree, the recipes of its regions, its variants with their expectations,
 * and the static checks against the case's inputs — names, dtypes, shapes and the island
 * policy where it can be decided before running [CASE-PROG-ISLAND-CHECK]. Every error is
 * path:line:col of the offending node. The runner is op_program.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"

typedef struct ploader {
    qs_ctx *ctx;
    const char *path;
    const qsk_case *c;
    qskp_program *p;
} ploader;

static qs_status perr_at(ploader *L, qsk_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static qs_status perr_at(ploader *L, qsk_pos pos, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qs_ctx_error(L->ctx, QS_ERR_FORMAT, "%s:%d:%d: %s", L->path, pos.line, pos.col, msg);
}

static qsk_pos pos_of(const qsk_ynode *n)
{
    return (qsk_pos){n->line, n->col};
}

#define PERR(L, n, ...) perr_at((L), pos_of(n), __VA_ARGS__)

/* ------------------------------------------------------------ scalar helpers */

static const char *kind_name(qsk_ykind k)
{
    return k == QSK_Y_MAP ? "a mapping" : k == QSK_Y_SEQ ? "a sequence" : "a scalar";
}

static qs_status want(ploader *L, const qsk_ynode *n, qsk_ykind k, const char *what)
{
    if (n->kind == k)
        return QS_OK;
    return PERR(L, n, "%s must be %s, not %s", what, kind_name(k), kind_name(n->kind));
}

static qs_status only_keys(ploader *L, const qsk_ynode *map, const char *const *allowed,
                           const char *where)
{
    for (size_t i = 0; i < map->n; i += 2) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= strcmp(*a, map->items[i]->text) == 0;
        if (!ok)
            return PERR(L, map->items[i], "unknown key '%s' in %s", map->items[i]->text, where);
    }
    return QS_OK;
}

/* A name: 1 to cap-1 characters of a-z A-Z 0-9 _ . - (op names go into the JSON trace
 * unescaped, so nothing else is allowed). */
static qs_status name_at(ploader *L, const qsk_ynode *n, const char *what, char *dst, size_t cap)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    size_t len = strlen(n->text);
    if (len == 0 || len >= cap)
        return PERR(L, n, "%s must have 1 to %zu characters", what, cap - 1);
    for (const char *s = n->text; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return PERR(L, n, "%s '%s' may hold only letters, digits, '_', '-' and '.'", what,
                        n->text);
    memcpy(dst, n->text, len + 1);
    return QS_OK;
}

/* A trace record's op: NAME, or NAME/PART for the parts of an mla op [RCP-MLA-TRACE]. */
static qs_status trace_op_at(ploader *L, const qsk_ynode *n, char *dst, size_t cap)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, "an op name");
    if (st != QS_OK)
        return st;
    const char *slash = strchr(n->text, '/');
    if (!slash)
        return name_at(L, n, "an op name", dst, cap);
    size_t len = strlen(n->text);
    if (len >= cap || slash == n->text || !slash[1] || strchr(slash + 1, '/'))
        return PERR(L, n,
                    "an op name is NAME or NAME/PART (an mla op's linear), of 1 to %zu "
                    "characters, not '%s'",
                    cap - 1, n->text);
    for (const char *c = n->text; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.' || *c == '/'))
            return PERR(L, n,
                        "an op name '%s' may hold only letters, digits, '_', '-', '.' and "
                        "one '/'",
                        n->text);
    memcpy(dst, n->text, len + 1);
    return QS_OK;
}

static qs_status bool_at(ploader *L, const qsk_ynode *n, const char *what, int *v)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    static const char *const yes[] = {"true", "yes", "on", "1", NULL};
    static const char *const no[] = {"false", "no", "off", "0", NULL};
    for (int i = 0; yes[i]; i++) {
        if (strcmp(n->text, yes[i]) == 0) {
            *v = 1;
            return QS_OK;
        }
        if (strcmp(n->text, no[i]) == 0) {
            *v = 0;
            return QS_OK;
        }
    }
    return PERR(L, n, "%s must be true or false, not '%s'", what, n->text);
}

/* An integer in [lo, hi]. */
static qs_status int_at(ploader *L, const qsk_ynode *n, const char *what, int64_t lo, int64_t hi,
                        int64_t *v)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    int64_t x;
    if (qsk_parse_i64(n->text, &x) != 0 || x < lo || x > hi)
        return PERR(L, n, "%s must be an integer from %lld to %lld, not '%s'", what, (long long)lo,
                    (long long)hi, n->text);
    *v = (int64_t)x;
    return QS_OK;
}

static qs_status u64_at(ploader *L, const qsk_ynode *n, const char *what, uint64_t *v)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    int r = qsk_parse_u64(n->text, v);
    if (r == 2)
        return PERR(L, n, "%s: '%s' is out of range (at most 2^64 - 1)", what, n->text);
    if (r != 0)
        return PERR(L, n, "%s: '%s' is not a non-negative integer", what, n->text);
    return QS_OK;
}

static qs_status double_at(ploader *L, const qsk_ynode *n, const char *what, double *v)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    char *end;
    *v = strtod(n->text, &end);
    if (end == n->text || *end != '\0' || !(*v >= 0) || *v > 1e300)
        return PERR(L, n, "%s must be a finite number >= 0, not '%s'", what, n->text);
    return QS_OK;
}

/* The index of text in names (NULL-terminated), or an error listing them. */
static qs_status choice_at(ploader *L, const qsk_ynode *n, const char *what,
                           const char *const *names, int *v)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    char list[256] = "";
    for (int i = 0; names[i]; i++) {
        if (strcmp(names[i], n->text) == 0) {
            *v = i;
            return QS_OK;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return PERR(L, n, "'%s' is not a valid %s (one of: %s)", n->text, what, list);
}

static const qsk_input *input_named(const ploader *L, const char *name)
{
    return qsk_case_input(L->c, name);
}

/* ------------------------------------------------------------ the op table */

/* The ops a program statement can name [CASE-PROG-OP]. A reserved op carries the reason
 * it cannot be used yet in `unavailable`; adding one is its row here (kind and input
 * fields), its field checks in walk_op and its builder in op_program.c's build(). */
typedef struct qskp_opdef {
    const char *name;
    qskp_kind kind;
    const char *inputs[QSKP_MAX_OP_INPUTS + 1]; /* the fields naming inputs */
    const char *unavailable;
} qskp_opdef;

static const qskp_opdef opdefs[] = {
    {"linear", QSKP_LINEAR, {"w", NULL}, NULL},
    {"gdn", QSKP_GDN, {"g", "beta", NULL}, NULL},
    {"gelu", QSKP_GELU, {NULL}, NULL},
    {"mla", QSKP_MLA, {NULL}, NULL},
    {"sdpa", QSKP_KIND_COUNT, {NULL}, "the reference engine has no sdpa op yet"},
};

/* The engine's names of its fault-injection steps [SCOPE-FAULT], as inject_error names
 * them. */
static const char *const step_names[][2] = {
    {"autocast_enter", "autocast_enter"},
    {"island_enter", "island_enter"},
    {"checkpoint_record", "checkpoint record"},
    {"checkpoint_replay", "checkpoint replay"},
    {"linear_forward", "linear forward"},
    {"linear_backward", "linear backward"},
    {"gdn_forward", "gdn forward"},
    {"gdn_backward", "gdn backward"},
    {"gelu_forward", "gelu forward"},
    {"gelu_backward", "gelu backward"},
    {"mla_forward", "mla forward"},
    {"mla_backward", "mla backward"},
    {"mla_linear_forward", "mla linear forward"},
    {"mla_linear_backward", "mla linear backward"},
    {"mla_up_proj_record", "mla up_proj record"},
    {"mla_up_proj_replay", "mla up_proj replay"},
    {"quantizer_init", "quantizer init"},
    {"forward_update", "forward update"},
    {"backward_update", "backward update"},
};

const char *qskp_step_engine_name(const char *yaml_name)
{
    for (size_t i = 0; i < sizeof step_names / sizeof step_names[0]; i++)
        if (strcmp(step_names[i][0], yaml_name) == 0)
            return step_names[i][1];
    return NULL;
}

/* ------------------------------------------------------------ recipes */

static const char *const role_keys[QS_SCOPE_ROLE_COUNT + 1] = {"x", "w", "dy", NULL};

/* Applies the options of map (key: scalar) to cfg; errors at the value's position. */
static qs_status apply_options(ploader *L, const qsk_ynode *map, qs_recipe_config *cfg)
{
    qs_status st = want(L, map, QSK_Y_MAP, "recipe options");
    for (size_t i = 0; st == QS_OK && i < map->n; i += 2) {
        const qsk_ynode *k = map->items[i], *v = map->items[i + 1];
        st = want(L, v, QSK_Y_SCALAR, "a recipe option");
        if (st != QS_OK)
            break;
        if (strcmp(k->text, "role") == 0)
            return PERR(L, k, "a region sets the roles itself: give options under x, w or dy");
        if (qs_recipe_config_set(L->ctx, cfg, k->text, v->text) != QS_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", qs_ctx_errmsg(L->ctx));
            return PERR(L, v, "%s", why);
        }
    }
    return st;
}

/* recipe, options, x, w, dy of a region mapping into s->recipe. */
static qs_status load_recipe(ploader *L, const qsk_ynode *m, qskp_node *s)
{
    static const char *const kinds[] = {
        "delayed", "current", "mxfp8", "block", "nvfp4", "rowwise", "rowwise_with_gw_hp", NULL};
    const qsk_ynode *r = qsk_yaml_get(m, "recipe"), *opt = qsk_yaml_get(m, "options");
    const qsk_ynode *roles[QS_SCOPE_ROLE_COUNT];
    int any = opt != NULL;
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
        any |= (roles[i] = qsk_yaml_get(m, role_keys[i])) != NULL;
    if (!r) {
        if (any)
            return PERR(L, m, "recipe options need a 'recipe'");
        return QS_OK;
    }
    int kind;
    qs_status st = choice_at(L, r, "recipe", kinds, &kind);
    if (st == QS_OK)
        st = qs_scope_recipe_default(L->ctx, &s->recipe, (qs_recipe_kind)kind);
    for (int i = 0; st == QS_OK && i < QS_SCOPE_ROLE_COUNT; i++) {
        if (opt)
            st = apply_options(L, opt, &s->recipe.cfg[i]);
        if (st == QS_OK && roles[i])
            st = apply_options(L, roles[i], &s->recipe.cfg[i]);
        if (st == QS_OK && qs_recipe_config_check(L->ctx, &s->recipe.cfg[i]) != QS_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", qs_ctx_errmsg(L->ctx));
            st = PERR(L, r, "role %s: %s", role_keys[i], why);
        }
    }
    s->has_recipe = st == QS_OK;
    return st;
}

/* ------------------------------------------------------------ statements */

static qs_status load_body(ploader *L, const qsk_ynode *seq, qskp_node *region, int top);

static qs_status load_tags(ploader *L, const qsk_ynode *m, qskp_node *s)
{
    const qsk_ynode *w = qsk_yaml_get(m, "when"), *u = qsk_yaml_get(m, "unless");
    qs_status st = QS_OK;
    if (w)
        st = name_at(L, w, "'when'", s->when, sizeof s->when);
    if (st == QS_OK && u)
        st = name_at(L, u, "'unless'", s->unless, sizeof s->unless);
    const qsk_ynode *nm = qsk_yaml_get(m, "name");
    if (st == QS_OK && nm)
        st = name_at(L, nm, "a name", s->name, sizeof s->name);
    return st;
}

static qs_status load_region(ploader *L, const qsk_ynode *v, qskp_node *s)
{
    static const char *const ac_keys[] = {"recipe", "enabled", "calibrating", "group", "options",
                                          "x",      "w",       "dy",          "name",  "when",
                                          "unless", "body",    NULL};
    static const char *const cal_keys[] = {"recipe", "group", "options", "x",    "w", "dy",
                                           "name",   "when",  "unless",  "body", NULL};
    static const char *const plain_keys[] = {"name", "when", "unless", "body", NULL};
    const char *what = s->kind == QSKP_AUTOCAST    ? "autocast"
                       : s->kind == QSKP_CALIBRATE ? "calibrate"
                       : s->kind == QSKP_ISLAND    ? "island"
                                                   : "checkpoint";
    if (v->kind == QSK_Y_SEQ && (s->kind == QSKP_ISLAND || s->kind == QSKP_CHECKPOINT))
        return load_body(L, v, s, 0); /* the body alone */
    qs_status st = want(L, v, QSK_Y_MAP, what);
    if (st == QS_OK)
        st = only_keys(L, v,
                       s->kind == QSKP_AUTOCAST    ? ac_keys
                       : s->kind == QSKP_CALIBRATE ? cal_keys
                                                   : plain_keys,
                       what);
    if (st == QS_OK)
        st = load_tags(L, v, s);
    if (st != QS_OK)
        return st;
    s->enabled = s->kind == QSKP_AUTOCAST;
    s->calibrating = s->kind == QSKP_CALIBRATE;
    const qsk_ynode *e = qsk_yaml_get(v, "enabled"), *c = qsk_yaml_get(v, "calibrating"),
                    *g = qsk_yaml_get(v, "group"), *body = qsk_yaml_get(v, "body");
    if (e)
        st = bool_at(L, e, "'enabled'", &s->enabled);
    if (st == QS_OK && c)
        st = bool_at(L, c, "'calibrating'", &s->calibrating);
    int64_t grp = 0;
    if (st == QS_OK && g)
        st = int_at(L, g, "'group'", 0, 1 << 30, &grp);
    s->group = (int)grp;
    if (st == QS_OK && (s->kind == QSKP_AUTOCAST || s->kind == QSKP_CALIBRATE))
        st = load_recipe(L, v, s);
    if (st == QS_OK && (s->enabled || s->calibrating) && !s->has_recipe)
        st = PERR(L, v, "an enabled or calibrating %s needs a 'recipe' [SCOPE-ENTER]", what);
    if (st == QS_OK && !body)
        st = PERR(L, v, "missing required field 'body'");
    if (st == QS_OK)
        st = load_body(L, body, s, 0);
    return st;
}

static qs_status load_op(ploader *L, const qsk_ynode *v, const qskp_opdef *d, qskp_node *s)
{
    const char *keys[QSKP_MAX_OP_INPUTS + 5] = {"name", "when", "unless"};
    int nk = 3;
    for (int i = 0; d->inputs[i]; i++)
        keys[nk++] = d->inputs[i];
    if (d->kind == QSKP_GDN)
        keys[nk++] = "heads";
    keys[nk] = NULL;
    qs_status st = want(L, v, QSK_Y_MAP, d->name);
    if (st == QS_OK)
        st = only_keys(L, v, (const char *const *)keys, d->name);
    if (st == QS_OK)
        st = load_tags(L, v, s);
    if (st == QS_OK && !s->name[0])
        st = PERR(L, v, "op '%s' needs a 'name' (the trace and the outputs name it)", d->name);
    for (int i = 0; st == QS_OK && d->inputs[i]; i++) {
        const qsk_ynode *in = qsk_yaml_get(v, d->inputs[i]);
        if (!in)
            return PERR(L, v, "op '%s' needs '%s' (the name of an input)", d->name, d->inputs[i]);
        st = name_at(L, in, "an input name", s->in[i], sizeof s->in[i]);
        s->in_pos[i] = pos_of(in);
        if (st == QS_OK && !input_named(L, s->in[i]))
            st = PERR(L, in, "op '%s': the case has no input '%s'", s->name, s->in[i]);
    }
    const qsk_ynode *h = d->kind == QSKP_GDN ? qsk_yaml_get(v, "heads") : NULL;
    s->heads = 1;
    if (st == QS_OK && h)
        st = int_at(L, h, "gdn 'heads'", 1, 4096, &s->heads);
    return st;
}

/* The sequence lengths of a thd mla op: "3,5,8" (a scalar) or [3, 5, 8], each >= 1. */
static qs_status load_seqlens(ploader *L, const qsk_ynode *n, qskp_mla *m)
{
    char buf[512];
    size_t count = 0;
    if (n->kind == QSK_Y_SEQ) {
        for (size_t i = 0; i < n->n; i++) {
            int64_t len;
            qs_status st = int_at(L, n->items[i], "a sequence length", 1, 1 << 20, &len);
            if (st != QS_OK)
                return st;
            if (count == QSKP_MLA_MAX_SEQS)
                return PERR(L, n, "'seqlens' holds at most %d sequences", QSKP_MLA_MAX_SEQS);
            m->cu_seqlens[count + 1] = m->cu_seqlens[count] + (int32_t)len;
            count++;
        }
    } else {
        qs_status st = want(L, n, QSK_Y_SCALAR, "'seqlens'");
        if (st != QS_OK)
            return st;
        snprintf(buf, sizeof buf, "%s", n->text);
        for (char *tok = buf, *next; tok; tok = next) {
            next = strchr(tok, ',');
            if (next)
                *next++ = '\0';
            while (*tok == ' ')
                tok++;
            char *end;
            long len = strtol(tok, &end, 10);
            while (*end == ' ')
                end++;
            if (end == tok || *end != '\0' || len < 1 || len > (1 << 20))
                return PERR(L, n,
                            "'seqlens' is a comma-separated list of sequence lengths >= 1, not "
                            "'%s'",
                            n->text);
            if (count == QSKP_MLA_MAX_SEQS)
                return PERR(L, n, "'seqlens' holds at most %d sequences", QSKP_MLA_MAX_SEQS);
            m->cu_seqlens[count + 1] = m->cu_seqlens[count] + (int32_t)len;
            count++;
        }
    }
    if (count == 0)
        return PERR(L, n, "'seqlens' names at least one sequence");
    m->b = (int64_t)count;
    m->s = m->cu_seqlens[count];
    return QS_OK;
}

/* dims: {heads, q_lora_rank, kv_lora_rank, dn, dr, dv, norm_eps}. */
static qs_status load_mla_dims(ploader *L, const qsk_ynode *n, qs_mla_config *c)
{
    static const char *const keys[] = {"heads", "q_lora_rank", "kv_lora_rank", "dn",
                                       "dr",    "dv",          "norm_eps",     NULL};
    static const char *const required[] = {"heads", "kv_lora_rank", "dn", "dr", "dv", NULL};
    qs_status st = want(L, n, QSK_Y_MAP, "'dims'");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "'dims'");
    for (int i = 0; st == QS_OK && required[i]; i++)
        if (!qsk_yaml_get(n, required[i]))
            st = PERR(L, n, "'dims' needs '%s'", required[i]);
    int64_t *dst[] = {&c->heads, &c->q_lora_rank, &c->kv_lora_rank, &c->dn, &c->dr, &c->dv};
    for (int i = 0; st == QS_OK && i < 6; i++) {
        const qsk_ynode *v = qsk_yaml_get(n, keys[i]);
        if (v)
            st = int_at(L, v, keys[i], i == 1 ? 0 : 1, 1 << 16, dst[i]);
    }
    const qsk_ynode *dr = qsk_yaml_get(n, "dr"), *eps = qsk_yaml_get(n, "norm_eps");
    if (st == QS_OK && c->dr % 2)
        st = PERR(L, dr, "'dr' (the RoPE dim) must be even [MLA-SHAPES]");
    double e = 1e-6;
    if (st == QS_OK && eps)
        st = double_at(L, eps, "'norm_eps'", &e);
    if (st == QS_OK && !(e > 0))
        st = PERR(L, eps, "'norm_eps' must be > 0");
    c->norm_eps = (float)e;
    return st;
}

/* rope: {base, yarn_factor, mscale, mscale_all_dim, beta_fast, beta_slow, original_max_pos}. */
static qs_status load_mla_rope(ploader *L, const qsk_ynode *n, qs_mla_config *c)
{
    static const char *const keys[] = {
        "base",      "yarn_factor", "mscale",           "mscale_all_dim",
        "beta_fast", "beta_slow",   "original_max_pos", NULL};
    float *dst[] = {&c->rope_base,           &c->yarn_factor,    &c->yarn_mscale,
                    &c->yarn_mscale_all_dim, &c->yarn_beta_fast, &c->yarn_beta_slow};
    qs_status st = want(L, n, QSK_Y_MAP, "'rope'");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "'rope'");
    for (int i = 0; st == QS_OK && i < 6; i++) {
        const qsk_ynode *v = qsk_yaml_get(n, keys[i]);
        double d;
        if (v && (st = double_at(L, v, keys[i], &d)) == QS_OK)
            *dst[i] = (float)d;
    }
    const qsk_ynode *b = qsk_yaml_get(n, "base"), *mp = qsk_yaml_get(n, "original_max_pos");
    if (st == QS_OK && b && !(c->rope_base > 0))
        st = PERR(L, b, "'base' must be > 0");
    if (st == QS_OK && mp)
        st = int_at(L, mp, "'original_max_pos'", 1, INT64_C(1) << 40, &c->yarn_original_max_pos);
    return st;
}

/* weights: {PARAM: INPUT, ...}: every parameter the configuration uses, with its shape and
 * dtype, and nothing else [RCP-MLA-OP] [MLA-SHAPES]. */
static qs_status load_mla_weights(ploader *L, const qsk_ynode *n, const char *op, qskp_mla *m)
{
    qs_status st = want(L, n, QSK_Y_MAP, "'weights'");
    const qsk_ynode *given[QS_MLA_PARAM_COUNT] = {NULL};
    for (size_t i = 0; st == QS_OK && i < n->n; i += 2) {
        const qsk_ynode *k = n->items[i];
        int p = qs_mla_param_from_name(k->text);
        if (p < 0) {
            char list[200] = "";
            for (int j = 0; j < QS_MLA_PARAM_COUNT; j++) {
                strncat(list, j ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, qs_mla_param_name((qs_mla_param)j), sizeof list - strlen(list) - 1);
            }
            return PERR(L, k, "mla '%s': '%s' is not an MLA parameter (%s)", op, k->text, list);
        }
        given[p] = n->items[i + 1];
        st = name_at(L, given[p], "an input name", m->w[p], sizeof m->w[p]);
        m->w_pos[p] = pos_of(given[p]);
        if (st == QS_OK && !input_named(L, m->w[p]))
            st = PERR(L, given[p], "mla '%s': the case has no input '%s'", op, m->w[p]);
    }
    if (st != QS_OK)
        return st;
    if (given[QS_MLA_W_UKV] && (given[QS_MLA_W_UK] || given[QS_MLA_W_UV]))
        return PERR(L, given[QS_MLA_W_UK] ? given[QS_MLA_W_UK] : given[QS_MLA_W_UV],
                    "mla '%s': K/V weights are either combined (w_ukv) or split (w_uk and "
                    "w_uv), not both",
                    op);
    m->split = !given[QS_MLA_W_UKV];
    if (!given[QS_MLA_W_DKV])
        return PERR(L, n, "mla '%s': 'weights' needs 'w_dkv'", op);
    const qsk_input *dkv = input_named(L, m->w[QS_MLA_W_DKV]);
    if (dkv->ndim != 2)
        return PERR(L, given[QS_MLA_W_DKV], "mla '%s': the weight 'w_dkv' must be 2-D", op);
    m->cfg.hidden = dkv->shape[1]; /* [MLA-SHAPES]: w_dkv [rkv + dr, hidden] */
    for (int p = 0; p < QS_MLA_PARAM_COUNT; p++) {
        int64_t shape[2] = {0, 0};
        int nd = qs_mla_param_shape(&m->cfg, m->split, (qs_mla_param)p, shape);
        const char *pn = qs_mla_param_name((qs_mla_param)p);
        if (nd == 0 && given[p])
            return PERR(L, given[p], "mla '%s': this configuration (%s, %s K/V) does not use '%s'",
                        op, m->cfg.q_lora_rank ? "q LoRA" : "q_lora_rank 0",
                        m->split ? "split" : "combined", pn);
        if (nd == 0)
            continue;
        if (!given[p])
            return PERR(L, n, "mla '%s': 'weights' needs '%s'", op, pn);
        const qsk_input *in = input_named(L, m->w[p]);
        int norm = nd == 1;
        if (norm ? in->dtype != QS_FP32
                 : in->dtype != QS_FP32 && in->dtype != QS_BF16 && in->dtype != QS_FP16)
            return PERR(L, given[p], "mla '%s': the weight '%s' (%s) must be %s, not %s", op, pn,
                        m->w[p], norm ? "fp32" : "fp32, bf16 or fp16", qs_dtype_name(in->dtype));
        if (in->ndim != nd || in->shape[0] != shape[0] || (nd == 2 && in->shape[1] != shape[1])) {
            char want_s[48];
            if (nd == 2)
                snprintf(want_s, sizeof want_s, "[%lld, %lld]", (long long)shape[0],
                         (long long)shape[1]);
            else
                snprintf(want_s, sizeof want_s, "[%lld]", (long long)shape[0]);
            return PERR(L, given[p],
                        "impossible shape: mla '%s': the weight '%s' (%s) must be %s "
                        "[MLA-SHAPES]",
                        op, pn, m->w[p], want_s);
        }
    }
    return QS_OK;
}

/* mla: {name, layout, b, s, seqlens, mask, absorbed, up_proj_checkpoint, dims, rope,
 * weights} [CASE-PROG-OP] [RCP-MLA-OP]. */
static qs_status load_mla(ploader *L, const qsk_ynode *v, qskp_node *s)
{
    static const char *const keys[] = {
        "name", "when",    "unless",  "layout",   "b",
        "s",    "seqlens", "mask",    "absorbed", "up_proj_checkpoint",
        "dims", "rope",    "weights", NULL};
    static const char *const layouts[] = {"sbhd", "bshd", "thd", NULL};
    static const char *const masks[] = {"none", "causal", NULL};
    qskp_mla *m = &s->mla;
    qs_status st = want(L, v, QSK_Y_MAP, "mla");
    if (st == QS_OK)
        st = only_keys(L, v, keys, "mla");
    if (st == QS_OK)
        st = load_tags(L, v, s);
    if (st == QS_OK && !s->name[0])
        st = PERR(L, v, "op 'mla' needs a 'name' (the trace and the outputs name it)");
    if (st == QS_OK && strlen(s->name) > 22)
        st = PERR(L, qsk_yaml_get(v, "name"),
                  "an mla op's name has at most 22 characters: its linears are traced as "
                  "'%s/out_proj' [RCP-MLA-TRACE]",
                  s->name);
    if (st != QS_OK)
        return st;
    m->mask = QS_ATTN_MASK_CAUSAL;
    m->cfg.norm_eps = 1e-6f;
    m->cfg.rope_base = 10000.0f;
    m->cfg.yarn_factor = 1.0f;
    m->cfg.yarn_mscale = m->cfg.yarn_mscale_all_dim = 1.0f;
    m->cfg.yarn_beta_fast = 32.0f;
    m->cfg.yarn_beta_slow = 1.0f;
    m->cfg.yarn_original_max_pos = 4096;
    const qsk_ynode *lay = qsk_yaml_get(v, "layout"), *b = qsk_yaml_get(v, "b"),
                    *sn = qsk_yaml_get(v, "s"), *sl = qsk_yaml_get(v, "seqlens"),
                    *mk = qsk_yaml_get(v, "mask"), *ab = qsk_yaml_get(v, "absorbed"),
                    *rc = qsk_yaml_get(v, "up_proj_checkpoint"), *dims = qsk_yaml_get(v, "dims"),
                    *rope = qsk_yaml_get(v, "rope"), *w = qsk_yaml_get(v, "weights");
    int x;
    if (!lay)
        return PERR(L, v, "op 'mla' needs a 'layout' (sbhd, bshd or thd)");
    if (!dims || !w)
        return PERR(L, v, "op 'mla' needs 'dims' and 'weights'");
    st = choice_at(L, lay, "layout", layouts, &x);
    m->layout = (qs_attn_layout)x;
    if (st == QS_OK && m->layout == QS_ATTN_THD) {
        if (b || sn)
            return PERR(L, b ? b : sn, "a thd mla op takes 'seqlens', not 'b' or 's'");
        if (!sl)
            return PERR(L, lay, "a thd mla op needs 'seqlens' (the sequence lengths: \"3,5,8\")");
        st = load_seqlens(L, sl, m);
    } else if (st == QS_OK) {
        if (sl)
            return PERR(L, sl, "'seqlens' belongs to the thd layout");
        if (!b)
            return PERR(L, lay, "an %s mla op needs 'b' (the number of sequences)", lay->text);
        st = int_at(L, b, "'b'", 1, 1 << 20, &m->b);
        if (st == QS_OK && sn)
            st = int_at(L, sn, "'s'", 1, 1 << 24, &m->s);
    }
    if (st == QS_OK && mk) {
        st = choice_at(L, mk, "mask", masks, &x);
        m->mask = (qs_attn_mask)x;
    }
    if (st == QS_OK && ab)
        st = bool_at(L, ab, "'absorbed'", &m->cfg.absorbed);
    if (st == QS_OK && rc && rc->kind == QSK_Y_MAP) { /* {when: TAG} */
        static const char *const rkeys[] = {"when", NULL};
        const qsk_ynode *t = qsk_yaml_get(rc, "when");
        st = only_keys(L, rc, rkeys, "'up_proj_checkpoint'");
        if (st == QS_OK && !t)
            st = PERR(L, rc, "'up_proj_checkpoint' is true, false or {when: TAG}");
        if (st == QS_OK)
            st = name_at(L, t, "'when'", m->recompute_when, sizeof m->recompute_when);
    } else if (st == QS_OK && rc) {
        st = bool_at(L, rc, "'up_proj_checkpoint'", &m->recompute_up_proj);
    }
    if (st == QS_OK)
        st = load_mla_dims(L, dims, &m->cfg);
    if (st == QS_OK && rope)
        st = load_mla_rope(L, rope, &m->cfg);
    if (st == QS_OK)
        st = load_mla_weights(L, w, s->name, m);
    return st;
}

static qs_status load_backward(ploader *L, const qsk_ynode *v, qskp_node *s)
{
    static const char *const keys[] = {"dy", "when", "unless", NULL};
    qs_status st = want(L, v, QSK_Y_MAP, "backward");
    if (st == QS_OK)
        st = only_keys(L, v, keys, "backward");
    if (st == QS_OK)
        st = load_tags(L, v, s);
    if (st != QS_OK)
        return st;
    strcpy(s->in[0], "dy");
    s->in_pos[0] = pos_of(v);
    const qsk_ynode *dy = qsk_yaml_get(v, "dy");
    if (dy) {
        st = name_at(L, dy, "an input name", s->in[0], sizeof s->in[0]);
        s->in_pos[0] = pos_of(dy);
    }
    if (st == QS_OK && !input_named(L, s->in[0]))
        st = perr_at(L, s->in_pos[0], "backward: the case has no input '%s'", s->in[0]);
    return st;
}

static qs_status load_stmt(ploader *L, const qsk_ynode *item, qskp_node *s, int top, int last)
{
    static const char *const regions[] = {"autocast", "calibrate", "island", "checkpoint", NULL};
    static const qskp_kind region_kinds[] = {QSKP_AUTOCAST, QSKP_CALIBRATE, QSKP_ISLAND,
                                             QSKP_CHECKPOINT};
    qs_status st = want(L, item, QSK_Y_MAP, "a program statement");
    if (st != QS_OK)
        return st;
    if (item->n != 2)
        return PERR(L, item,
                    "a program statement is a mapping with one key (autocast, calibrate, island, "
                    "checkpoint, linear, gelu, gdn, mla, backward)");
    const qsk_ynode *k = item->items[0], *v = item->items[1];
    s->pos = pos_of(k);
    for (int i = 0; regions[i]; i++)
        if (strcmp(k->text, regions[i]) == 0) {
            s->kind = region_kinds[i];
            return load_region(L, v, s);
        }
    if (strcmp(k->text, "backward") == 0) {
        s->kind = QSKP_BACKWARD;
        if (!top || !last)
            return PERR(L, k, "'backward' must be the last statement of the program");
        return load_backward(L, v, s);
    }
    for (size_t i = 0; i < sizeof opdefs / sizeof opdefs[0]; i++)
        if (strcmp(k->text, opdefs[i].name) == 0) {
            if (opdefs[i].unavailable)
                return PERR(L, k, "op '%s' is not available in programs: %s", k->text,
                            opdefs[i].unavailable);
            s->kind = opdefs[i].kind;
            return s->kind == QSKP_MLA ? load_mla(L, v, s) : load_op(L, v, &opdefs[i], s);
        }
    return PERR(L, k,
                "unknown program statement '%s' (autocast, calibrate, island, checkpoint, linear, "
                "gelu, gdn, mla, backward)",
                k->text);
}

static qs_status load_body(ploader *L, const qsk_ynode *seq, qskp_node *region, int top)
{
    qs_status st = want(L, seq, QSK_Y_SEQ, top ? "'program'" : "a region's body");
    if (st != QS_OK)
        return st;
    region->body = calloc(seq->n + 1, sizeof *region->body);
    if (!region->body)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < seq->n; i++) {
        st = load_stmt(L, seq->items[i], &region->body[i], top, i + 1 == seq->n);
        region->nbody++;
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

/* Op names are unique across the program [CASE-PROG-OP]. */
static qs_status check_names(ploader *L, const qskp_node *s, const qskp_node **seen, size_t *n)
{
    for (size_t i = 0; i < s->nbody; i++) {
        const qskp_node *b = &s->body[i];
        if (QSKP_IS_OP(b->kind)) {
            for (size_t j = 0; j < *n; j++)
                if (strcmp(seen[j]->name, b->name) == 0)
                    return perr_at(L, b->pos, "op name '%s' is used twice (also at line %d)",
                                   b->name, seen[j]->pos.line);
            seen[(*n)++] = b;
        }
        qs_status st = check_names(L, b, seen, n);
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

static size_t count_nodes(const qskp_node *s)
{
    size_t n = 1;
    for (size_t i = 0; i < s->nbody; i++)
        n += count_nodes(&s->body[i]);
    return n;
}

static void node_free(qskp_node *s)
{
    for (size_t i = 0; i < s->nbody; i++)
        node_free(&s->body[i]);
    free(s->body);
    s->body = NULL;
    s->nbody = 0;
}

/* ------------------------------------------------------------ variants */

int qskp_node_in(const qskp_node *s, const qskp_variant *v)
{
    int has_when = !s->when[0], has_unless = 0;
    for (int i = 0; i < v->ntags; i++) {
        has_when |= strcmp(v->tags[i], s->when) == 0;
        has_unless |= s->unless[0] && strcmp(v->tags[i], s->unless) == 0;
    }
    return has_when && !has_unless;
}

const qskp_variant *qskp_variant_find(const qskp_program *p, const char *name)
{
    for (size_t i = 0; i < p->nvariants; i++)
        if (strcmp(p->variants[i].name, name) == 0)
            return &p->variants[i];
    return NULL;
}

static const qskp_node *op_in(const qskp_node *s, const qskp_variant *v, const char *name)
{
    for (size_t i = 0; i < s->nbody; i++) {
        const qskp_node *b = &s->body[i];
        int op = QSKP_IS_OP(b->kind);
        if (op && qskp_node_in(b, v) && strcmp(b->name, name) == 0)
            return b;
        if (op || b->kind == QSKP_BACKWARD)
            continue; /* a region left out is transparent: its ops stay */
        const qskp_node *f = op_in(b, v, name);
        if (f)
            return f;
    }
    return NULL;
}

const qskp_node *qskp_op_find(const qskp_program *p, const qskp_variant *v, const char *name)
{
    return op_in(&p->root, v, name);
}

const qskp_node *qskp_grad_find(const qskp_program *p, const qskp_variant *v, const char *sel,
                                int *param)
{
    *param = -1;
    const qskp_node *op = qskp_op_find(p, v, sel);
    if (op)
        return op->kind == QSKP_GELU ? NULL : op; /* [RCP-GELU-OP]: no parameters */
    const char *dot = strrchr(sel, '.');
    char name[QS_TRACE_NAME_LEN];
    if (!dot || dot == sel || (size_t)(dot - sel) >= sizeof name)
        return NULL;
    snprintf(name, sizeof name, "%.*s", (int)(dot - sel), sel);
    op = qskp_op_find(p, v, name);
    int pm = qs_mla_param_from_name(dot + 1);
    int64_t shape[2];
    if (!op || op->kind != QSKP_MLA || pm < 0 ||
        !qs_mla_param_shape(&op->mla.cfg, op->mla.split, (qs_mla_param)pm, shape))
        return NULL;
    *param = pm;
    return op;
}

void qskp_trace_op_split(const qskp_program *p, const qskp_variant *v, const char *name,
                         const qskp_node **op, int *part)
{
    const char *slash = strchr(name, '/');
    char base[QS_TRACE_NAME_LEN];
    *part = -1;
    if (!slash) {
        *op = qskp_op_find(p, v, name);
        return;
    }
    snprintf(base, sizeof base, "%.*s", (int)(slash - name), name);
    *op = qskp_op_find(p, v, base);
    const char *pt = slash + 1;
    if (strcmp(pt, "k_absorb") == 0)
        *part = QS_MLA_LINEAR_COUNT;
    else if (strcmp(pt, "v_absorb") == 0)
        *part = QS_MLA_LINEAR_COUNT + 1;
    for (int l = 0; l < QS_MLA_LINEAR_COUNT && *part < 0; l++)
        if (strcmp(pt, qs_mla_linear_name((qs_mla_linear)l)) == 0)
            *part = l;
    if (*part < 0)
        *part = QS_MLA_LINEAR_COUNT + 2; /* no such part */
}

static qs_status status_at(ploader *L, const qsk_ynode *n, qs_status *code)
{
    qs_status st = want(L, n, QSK_Y_SCALAR, "an error code");
    if (st != QS_OK)
        return st;
    for (int s = -1; s >= -11; s--)
        if (strcmp(qs_status_name((qs_status)s), n->text) == 0) {
            if (s == QS_ERR_INJECTED)
                return PERR(L, n,
                            "QS_ERR_INJECTED is what inject_error causes, not an "
                            "expected error");
            *code = (qs_status)s;
            return QS_OK;
        }
    return PERR(L, n, "'%s' is not an error code (QS_ERR_STATE, QS_ERR_DTYPE, ...)", n->text);
}

/* expect_error: CODE, or {code, message, step} [CASE-PROG-ERROR]. */
static qs_status load_error(ploader *L, const qsk_ynode *n, qskp_error *e)
{
    static const char *const keys[] = {"code", "message", "step", NULL};
    e->set = 1;
    e->pos = pos_of(n);
    if (n->kind == QSK_Y_SCALAR)
        return status_at(L, n, &e->code);
    qs_status st = want(L, n, QSK_Y_MAP, "'expect_error'");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "'expect_error'");
    const qsk_ynode *code = qsk_yaml_get(n, "code"), *msg = qsk_yaml_get(n, "message"),
                    *step = qsk_yaml_get(n, "step");
    if (st == QS_OK && !code)
        st = PERR(L, n, "missing required field 'code'");
    if (st == QS_OK)
        st = status_at(L, code, &e->code);
    if (st == QS_OK && msg) {
        st = want(L, msg, QSK_Y_SCALAR, "'message'");
        if (st == QS_OK && strlen(msg->text) >= sizeof e->message)
            st = PERR(L, msg, "'message' is longer than %zu characters", sizeof e->message - 1);
        if (st == QS_OK)
            strcpy(e->message, msg->text);
    }
    int64_t s = 0;
    if (st == QS_OK && step)
        st = int_at(L, step, "'step'", 1, QSKP_MAX_STEPS, &s);
    e->step = (int)s;
    return st;
}

/* inject_error: {at: NAME | N | every, nth, step} [CASE-PROG-INJECT]. */
static qs_status load_inject(ploader *L, const qsk_ynode *n, qskp_inject *in)
{
    static const char *const keys[] = {"at", "nth", "step", NULL};
    in->pos = pos_of(n);
    qs_status st = want(L, n, QSK_Y_MAP, "'inject_error'");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "'inject_error'");
    const qsk_ynode *at = qsk_yaml_get(n, "at"), *nth = qsk_yaml_get(n, "nth"),
                    *step = qsk_yaml_get(n, "step");
    if (st == QS_OK && !at)
        st = PERR(L, n, "missing required field 'at'");
    if (st == QS_OK)
        st = want(L, at, QSK_Y_SCALAR, "'at'");
    if (st != QS_OK)
        return st;
    in->nth = 1;
    const char *engine = qskp_step_engine_name(at->text);
    if (strcmp(at->text, "every") == 0) {
        in->kind = QSKP_INJECT_EVERY;
    } else if (engine) {
        in->kind = QSKP_INJECT_NAMED;
        snprintf(in->step_name, sizeof in->step_name, "%s", engine);
    } else if (at->text[0] >= '0' && at->text[0] <= '9') {
        in->kind = QSKP_INJECT_NUMBER;
        st = int_at(L, at, "'at'", 1, INT64_C(1) << 40, &in->nth);
    } else if (strstr(at->text, "exit")) {
        return PERR(L, at,
                    "a region's exit in a program cannot fail: the engine leaves regions through "
                    "the callback form, whose exit is not a fault step [SCOPE-RESTORE-ERR]; the "
                    "outermost exit's work is 'forward_update'");
    } else {
        char list[400] = "";
        for (size_t i = 0; i < sizeof step_names / sizeof step_names[0]; i++) {
            strncat(list, step_names[i][0], sizeof list - strlen(list) - 1);
            strncat(list, ", ", sizeof list - strlen(list) - 1);
        }
        return PERR(L, at, "'%s' is not an injection point (%severy, or a step number)", at->text,
                    list);
    }
    if (st == QS_OK && nth) {
        if (in->kind != QSKP_INJECT_NAMED)
            return PERR(L, nth, "'nth' applies to a named injection point");
        st = int_at(L, nth, "'nth'", 1, 1 << 20, &in->nth);
    }
    int64_t s = 0;
    if (st == QS_OK && step)
        st = int_at(L, step, "'step'", 1, QSKP_MAX_STEPS, &s);
    in->step = (int)s;
    return st;
}

static qs_status load_trace_rec(ploader *L, const qsk_ynode *m, qskp_trace_exp *t)
{
    static const char *const keys[] = {"phase",  "op",    "kind",       "precision",    "recipe",
                                       "scales", "dtype", "scale_bits", "first_module", NULL};
    static const char *const phases[] = {"forward", "recompute", "backward", NULL};
    static const char *const precs[] = {"quantized", "calibrating", "high", "island", NULL};
    static const char *const scales[] = {"none", "fresh", "recorded", NULL};
    static const char *const kinds[] = {
        "delayed", "current", "mxfp8", "block", "nvfp4", "rowwise", "rowwise_with_gw_hp", NULL};
    static const char *const dtypes[] = {"bf16", "fp16", "fp32", NULL};
    static const qs_dtype dtype_codes[] = {QS_BF16, QS_FP16, QS_FP32};
    qs_status st = want(L, m, QSK_Y_MAP, "a trace record");
    if (st == QS_OK)
        st = only_keys(L, m, keys, "a trace record");
    if (st != QS_OK)
        return st;
    t->pos = pos_of(m);
    t->nbits = -1;
    const qsk_ynode *ph = qsk_yaml_get(m, "phase"), *op = qsk_yaml_get(m, "op"),
                    *pr = qsk_yaml_get(m, "precision");
    if (!ph || !op || !pr)
        return PERR(L, m, "a trace record needs 'phase', 'op' and 'precision'");
    int v;
    st = choice_at(L, ph, "phase", phases, &v);
    t->phase = (qs_trace_phase)v;
    if (st == QS_OK)
        st = trace_op_at(L, op, t->op, sizeof t->op);
    if (st == QS_OK)
        st = choice_at(L, pr, "precision", precs, &v);
    t->precision = (qs_precision)v;
    const qsk_ynode *r = qsk_yaml_get(m, "recipe");
    if (st == QS_OK && r && !(r->kind == QSK_Y_SCALAR && strcmp(r->text, "null") == 0)) {
        st = choice_at(L, r, "recipe", kinds, &v);
        t->has_recipe = 1;
        t->recipe = (qs_recipe_kind)v;
    }
    const qsk_ynode *fm = qsk_yaml_get(m, "first_module");
    if (st == QS_OK && fm)
        st = bool_at(L, fm, "'first_module'", &t->first_module);
    const qsk_ynode *sc = qsk_yaml_get(m, "scales");
    if (st == QS_OK && sc) {
        st = choice_at(L, sc, "scales", scales, &v);
        t->scales_given = 1;
        t->scales = (qs_trace_scales)v;
    }
    const qsk_ynode *dt = qsk_yaml_get(m, "dtype");
    if (st == QS_OK && dt) {
        st = choice_at(L, dt, "dtype", dtypes, &v);
        t->dtype_given = 1;
        t->dtype = st == QS_OK ? dtype_codes[v] : QS_DTYPE_INVALID;
    }
    const qsk_ynode *bits = qsk_yaml_get(m, "scale_bits");
    if (st == QS_OK && bits) {
        st = want(L, bits, QSK_Y_SEQ, "'scale_bits'");
        if (st == QS_OK && bits->n > 2)
            st = PERR(L, bits, "'scale_bits' holds at most 2 scales (x and w, or dy)");
        t->nbits = (int)bits->n;
        for (size_t i = 0; st == QS_OK && i < bits->n; i++) {
            const qsk_ynode *b = bits->items[i];
            st = want(L, b, QSK_Y_SCALAR, "a scale");
            if (st != QS_OK)
                break;
            if (strcmp(b->text, "prev") == 0) {
                t->bits_kind[i] = QSKP_BITS_PREV;
                continue;
            }
            char *end;
            unsigned long x = strtoul(b->text, &end, 16);
            if (strncmp(b->text, "0x", 2) != 0 || strlen(b->text) != 10 || *end != '\0')
                return PERR(L, b, "a scale is 'prev' or 0x and 8 hex digits, not '%s'", b->text);
            t->bits_kind[i] = QSKP_BITS_HEX;
            t->bits[i] = (uint32_t)x;
        }
    }
    const qsk_ynode *kd = qsk_yaml_get(m, "kind");
    if (st == QS_OK && kd)
        st = name_at(L, kd, "an op kind", t->kind, sizeof t->kind);
    return st;
}

static qs_status load_trace(ploader *L, const qsk_ynode *n, qskp_variant *v)
{
    const qsk_ynode *recs = n;
    qs_status st = QS_OK;
    v->has_trace = 1;
    if (n->kind == QSK_Y_MAP) {
        static const char *const keys[] = {"step", "records", NULL};
        st = only_keys(L, n, keys, "'trace'");
        const qsk_ynode *step = qsk_yaml_get(n, "step");
        recs = qsk_yaml_get(n, "records");
        if (st == QS_OK && !recs)
            st = PERR(L, n, "missing required field 'records'");
        int64_t s = 0;
        if (st == QS_OK && step)
            st = int_at(L, step, "'step'", 1, QSKP_MAX_STEPS, &s);
        v->trace_step = (int)s;
    }
    if (st == QS_OK)
        st = want(L, recs, QSK_Y_SEQ, "'trace'");
    if (st != QS_OK)
        return st;
    v->trace = calloc(recs->n + 1, sizeof *v->trace);
    if (!v->trace)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QS_OK && i < recs->n; i++) {
        st = load_trace_rec(L, recs->items[i], &v->trace[i]);
        v->ntrace++;
    }
    return st;
}

static qs_status load_state_exp(ploader *L, const qsk_ynode *m, qskp_state_exp *e)
{
    static const char *const keys[] = {"op",     "linear", "role",       "recipe", "step",
                                       "exists", "filled", "holds_amax", "scale",  NULL};
    static const char *const kinds[] = {
        "delayed", "current", "mxfp8", "block", "nvfp4", "rowwise", "rowwise_with_gw_hp", NULL};
    static const char *const rules[] = {"unchecked", "initial", "prev", "from_history", NULL};
    qs_status st = want(L, m, QSK_Y_MAP, "a state expectation");
    if (st == QS_OK)
        st = only_keys(L, m, keys, "a state expectation");
    if (st != QS_OK)
        return st;
    e->pos = pos_of(m);
    e->exists = 1;
    e->filled = -1;
    e->amax_slot = -1;
    e->recipe = QS_RECIPE_DELAYED;
    e->linear = -1;
    const qsk_ynode *op = qsk_yaml_get(m, "op"), *role = qsk_yaml_get(m, "role");
    if (!op || !role)
        return PERR(L, m, "a state expectation needs 'op' and 'role'");
    int v;
    st = name_at(L, op, "an op name", e->op, sizeof e->op);
    if (st == QS_OK)
        st = choice_at(L, role, "role", role_keys, &v);
    e->role = (qs_scope_role)v;
    const qsk_ynode *r = qsk_yaml_get(m, "recipe"), *lin = qsk_yaml_get(m, "linear");
    if (st == QS_OK && r) {
        st = choice_at(L, r, "recipe", kinds, &v);
        e->recipe = (qs_recipe_kind)v;
    }
    if (st == QS_OK && lin) {
        const char *lins[QS_MLA_LINEAR_COUNT + 1];
        for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++)
            lins[l] = qs_mla_linear_name((qs_mla_linear)l);
        lins[QS_MLA_LINEAR_COUNT] = NULL;
        st = choice_at(L, lin, "MLA linear", lins, &v);
        e->linear = v;
    }
    int64_t x;
    const qsk_ynode *step = qsk_yaml_get(m, "step"), *ex = qsk_yaml_get(m, "exists"),
                    *fi = qsk_yaml_get(m, "filled"), *am = qsk_yaml_get(m, "holds_amax"),
                    *sc = qsk_yaml_get(m, "scale");
    if (st == QS_OK && step && (st = int_at(L, step, "'step'", 1, QSKP_MAX_STEPS, &x)) == QS_OK)
        e->step = (int)x;
    if (st == QS_OK && ex)
        st = bool_at(L, ex, "'exists'", &e->exists);
    if (st == QS_OK && fi && (st = int_at(L, fi, "'filled'", 0, 1 << 24, &x)) == QS_OK)
        e->filled = x;
    if (st == QS_OK && am && am->kind == QSK_Y_MAP) {
        static const char *const akeys[] = {"input", "slot", NULL};
        const qsk_ynode *in = qsk_yaml_get(am, "input"), *slot = qsk_yaml_get(am, "slot");
        st = only_keys(L, am, akeys, "'holds_amax'");
        if (st == QS_OK && !in)
            st = PERR(L, am, "missing required field 'input'");
        if (st == QS_OK)
            st = name_at(L, in, "an input name", e->amax_of, sizeof e->amax_of);
        if (st == QS_OK && slot && (st = int_at(L, slot, "'slot'", 0, 1 << 24, &x)) == QS_OK)
            e->amax_slot = (int)x;
    } else if (st == QS_OK && am) {
        st = name_at(L, am, "an input name", e->amax_of, sizeof e->amax_of);
    }
    if (st == QS_OK && e->amax_of[0] && !input_named(L, e->amax_of))
        st = PERR(L, am, "'holds_amax': the case has no input '%s'", e->amax_of);
    if (st == QS_OK && sc) {
        st = choice_at(L, sc, "scale rule", rules, &v);
        e->scale = (qskp_scale_rule)v;
    }
    if (st == QS_OK && !e->exists && (e->filled >= 0 || e->amax_of[0] || e->scale))
        st = PERR(L, m, "a quantizer that must not exist has no state to check");
    if (st == QS_OK && e->recipe != QS_RECIPE_DELAYED &&
        (e->filled >= 0 || e->amax_of[0] || e->scale))
        st = PERR(L, m, "only delayed scaling has a history and a stored scale [REC-DS-STATE]");
    return st;
}

static qs_status load_cmp_one(ploader *L, const qsk_ynode *n, qskp_cmp_kind kind, qskp_cmp *c)
{
    static const char *const same_keys[] = {"variant", "outputs", NULL};
    static const char *const close_keys[] = {"variant",  "outputs", "cosine", "rms_ratio",
                                             "allclose", "ulp",     NULL};
    static const char *const dflt_same[] = {"y", "dx", "grads", "state", NULL};
    static const char *const dflt_diff[] = {"y", "dx", NULL};
    static const char *const dflt_close[] = {"y", "dx", "grads", NULL};
    c->kind = kind;
    c->pos = pos_of(n);
    const char *const *dflt = kind == QSKP_SAME_AS        ? dflt_same
                              : kind == QSKP_DIFFERS_FROM ? dflt_diff
                                                          : dflt_close;
    for (; *dflt; dflt++)
        strcpy(c->outputs[c->noutputs++], *dflt);
    if (n->kind == QSK_Y_SCALAR && kind != QSKP_CLOSE_TO)
        return name_at(L, n, "a variant name", c->variant, sizeof c->variant);
    qs_status st = want(L, n, QSK_Y_MAP, "a comparison");
    if (st == QS_OK)
        st = only_keys(L, n, kind == QSKP_CLOSE_TO ? close_keys : same_keys, "a comparison");
    const qsk_ynode *var = qsk_yaml_get(n, "variant"), *outs = qsk_yaml_get(n, "outputs");
    if (st == QS_OK && !var)
        st = PERR(L, n, "missing required field 'variant'");
    if (st == QS_OK)
        st = name_at(L, var, "a variant name", c->variant, sizeof c->variant);
    if (st == QS_OK && outs) {
        st = want(L, outs, QSK_Y_SEQ, "'outputs'");
        if (st == QS_OK && (outs->n == 0 || outs->n > QSKP_MAX_OUTSEL))
            st = PERR(L, outs, "'outputs' names 1 to %d outputs", QSKP_MAX_OUTSEL);
        c->noutputs = 0;
        for (size_t i = 0; st == QS_OK && i < outs->n; i++)
            st = name_at(L, outs->items[i], "an output name", c->outputs[c->noutputs++],
                         QSK_NAME_LEN);
    }
    if (st != QS_OK || kind != QSKP_CLOSE_TO)
        return st;
    static const struct {
        const char *key;
        qsk_cmp_kind cmp;
    } tols[] = {{"cosine", QSK_CMP_COSINE},
                {"rms_ratio", QSK_CMP_RMS_RATIO},
                {"ulp", QSK_CMP_ULP},
                {"allclose", QSK_CMP_ALLCLOSE}};
    int found = 0;
    for (size_t i = 0; st == QS_OK && i < sizeof tols / sizeof tols[0]; i++) {
        const qsk_ynode *t = qsk_yaml_get(n, tols[i].key);
        if (!t)
            continue;
        if (found++)
            return PERR(L, t, "close_to takes one tolerance");
        c->tol.cmp = tols[i].cmp;
        if (tols[i].cmp != QSK_CMP_ALLCLOSE) {
            st = double_at(L, t, tols[i].key, &c->tol.p1);
            continue;
        }
        static const char *const akeys[] = {"atol", "rtol", NULL};
        const qsk_ynode *a, *r;
        st = want(L, t, QSK_Y_MAP, "'allclose'");
        if (st == QS_OK)
            st = only_keys(L, t, akeys, "'allclose'");
        if (st == QS_OK && (!(a = qsk_yaml_get(t, "atol")) || !(r = qsk_yaml_get(t, "rtol"))))
            return PERR(L, t, "'allclose' needs 'atol' and 'rtol'");
        if (st == QS_OK)
            st = double_at(L, a, "'atol'", &c->tol.p1);
        if (st == QS_OK)
            st = double_at(L, r, "'rtol'", &c->tol.p2);
    }
    if (st == QS_OK && !found)
        st = PERR(L, n, "close_to needs a tolerance: cosine, rms_ratio, ulp or allclose");
    snprintf(c->tol.name, sizeof c->tol.name, "close_to");
    return st;
}

static qs_status load_cmps(ploader *L, const qsk_ynode *n, qskp_cmp_kind kind, qskp_variant *v)
{
    size_t count = n->kind == QSK_Y_SEQ ? n->n : 1;
    if (v->ncmp + count > QSKP_MAX_CMP)
        return PERR(L, n, "a variant holds at most %d comparisons", QSKP_MAX_CMP);
    qs_status st = QS_OK;
    for (size_t i = 0; st == QS_OK && i < count; i++)
        st = load_cmp_one(L, n->kind == QSK_Y_SEQ ? n->items[i] : n, kind, &v->cmp[v->ncmp++]);
    return st;
}

/* A group id as a mapping key of 'groups' or 'reductions'. */
static qs_status group_key(ploader *L, const qsk_ynode *k, int *id)
{
    int64_t g;
    qs_status st = int_at(L, k, "a group id", 1, INT32_MAX, &g);
    *id = (int)g;
    return st;
}

/* [CASE-PROG-RANKS]: ranks, parallel, groups and reductions. */
static qs_status load_ranks(ploader *L, const qsk_ynode *m, qskp_variant *v)
{
    static const char *const par[] = {"sequence", "tensor", NULL};
    const qsk_ynode *rk = qsk_yaml_get(m, "ranks"), *pa = qsk_yaml_get(m, "parallel"),
                    *gr = qsk_yaml_get(m, "groups"), *rd = qsk_yaml_get(m, "reductions");
    int64_t n = 1;
    qs_status st = rk ? int_at(L, rk, "'ranks'", 1, QS_DIST_MAX_RANKS, &n) : QS_OK;
    v->ranks = (int)n;
    v->ranks_pos = rk ? pos_of(rk) : v->pos;
    int mode = 0;
    if (st == QS_OK && pa)
        st = choice_at(L, pa, "parallel", par, &mode);
    v->parallel = (qs_dist_parallel)mode;
    if (st == QS_OK && (pa || gr) && !rk)
        st = PERR(L, pa ? pa : gr, "'parallel' and 'groups' need 'ranks'");
    if (st == QS_OK && gr) {
        st = want(L, gr, QSK_Y_MAP, "'groups'");
        if (st == QS_OK && gr->n / 2 > QSKP_MAX_GROUPS)
            st = PERR(L, gr, "a variant defines at most %d groups", QSKP_MAX_GROUPS);
        for (size_t i = 0; st == QS_OK && i < gr->n / 2; i++) {
            const qsk_ynode *k = gr->items[2 * i], *c = gr->items[2 * i + 1];
            st = group_key(L, k, &v->group_id[i]);
            for (size_t j = 0; st == QS_OK && j < i; j++)
                if (v->group_id[j] == v->group_id[i])
                    st = PERR(L, k, "group %d is defined twice", v->group_id[i]);
            if (st == QS_OK)
                st = want(L, c, QSK_Y_SEQ, "a group's colors");
            if (st == QS_OK && c->n != (size_t)v->ranks)
                st = PERR(L, c, "group %d has %zu colors for %d ranks (one color per rank)",
                          v->group_id[i], c->n, v->ranks);
            for (size_t r = 0; st == QS_OK && r < c->n; r++) {
                int64_t col;
                st = int_at(L, c->items[r], "a color", 0, QS_DIST_MAX_RANKS, &col);
                v->color[i][r] = (int)col;
            }
            v->ngroups++;
        }
    }
    if (st == QS_OK && rd) {
        st = want(L, rd, QSK_Y_MAP, "'reductions'");
        if (st == QS_OK && rd->n / 2 > QSKP_MAX_GROUPS)
            st = PERR(L, rd, "'reductions' names at most %d groups", QSKP_MAX_GROUPS);
        for (size_t i = 0; st == QS_OK && i < rd->n / 2; i++) {
            st = group_key(L, rd->items[2 * i], &v->red_group[i]);
            if (st == QS_OK)
                st = int_at(L, rd->items[2 * i + 1], "a reduction count", 0, INT32_MAX,
                            &v->red_count[i]);
            v->nreductions++;
        }
    }
    return st;
}

static qs_status load_variant(ploader *L, const qsk_ynode *m, qskp_variant *v)
{
    static const char *const keys[] = {"name",
                                       "description",
                                       "tags",
                                       "x",
                                       "dy",
                                       "steps",
                                       "replay",
                                       "rng",
                                       "inject_error",
                                       "expect_error",
                                       "trace",
                                       "state",
                                       "same_as",
                                       "differs_from",
                                       "close_to",
                                       "replays",
                                       "ranks",
                                       "parallel",
                                       "groups",
                                       "reductions",
                                       NULL};
    static const char *const replays[] = {"spec", "outside_autocast", "extra_update", NULL};
    qs_status st = want(L, m, QSK_Y_MAP, "a variant");
    if (st == QS_OK)
        st = only_keys(L, m, keys, "a variant");
    if (st != QS_OK)
        return st;
    v->pos = pos_of(m);
    const qsk_ynode *nm = qsk_yaml_get(m, "name");
    if (!nm)
        return PERR(L, m, "missing required field 'name'");
    st = name_at(L, nm, "a variant name", v->name, sizeof v->name);
    if (st == QS_OK && strchr(v->name, '/'))
        st = PERR(L, nm, "a variant name has no '/'");
    const qsk_ynode *tags = qsk_yaml_get(m, "tags");
    if (st == QS_OK && tags) {
        st = want(L, tags, QSK_Y_SEQ, "'tags'");
        if (st == QS_OK && tags->n > QSKP_MAX_TAGS)
            st = PERR(L, tags, "a variant has at most %d tags", QSKP_MAX_TAGS);
        for (size_t i = 0; st == QS_OK && i < tags->n; i++)
            st = name_at(L, tags->items[i], "a tag", v->tags[v->ntags++], QSK_NAME_LEN);
    }
    const qsk_ynode *x = qsk_yaml_get(m, "x"), *dy = qsk_yaml_get(m, "dy");
    if (st == QS_OK && x)
        st = name_at(L, x, "an input name", v->x, sizeof v->x);
    if (st == QS_OK && x && !input_named(L, v->x))
        st = PERR(L, x, "the case has no input '%s'", v->x);
    if (st == QS_OK && dy)
        st = name_at(L, dy, "an input name", v->dy, sizeof v->dy);
    if (st == QS_OK && dy && !input_named(L, v->dy))
        st = PERR(L, dy, "the case has no input '%s'", v->dy);
    int64_t steps = 1;
    const qsk_ynode *sn = qsk_yaml_get(m, "steps");
    if (st == QS_OK && sn)
        st = int_at(L, sn, "'steps'", 1, QSKP_MAX_STEPS, &steps);
    v->steps = (int)steps;
    const qsk_ynode *rp = qsk_yaml_get(m, "replay");
    int r = 0;
    if (st == QS_OK && rp)
        st = choice_at(L, rp, "replay", replays, &r);
    v->replay = (qs_replay_variant)r;
    const qsk_ynode *nr = qsk_yaml_get(m, "replays");
    int64_t nrep = -1;
    if (st == QS_OK && nr)
        st = int_at(L, nr, "'replays'", 0, 16, &nrep);
    v->replays = (int)nrep;
    const qsk_ynode *rng = qsk_yaml_get(m, "rng");
    if (st == QS_OK && rng) {
        static const char *const rkeys[] = {"seed", "offset", NULL};
        st = want(L, rng, QSK_Y_MAP, "'rng'");
        if (st == QS_OK)
            st = only_keys(L, rng, rkeys, "'rng'");
        const qsk_ynode *sd = qsk_yaml_get(rng, "seed"), *of = qsk_yaml_get(rng, "offset");
        if (st == QS_OK && sd)
            st = u64_at(L, sd, "'seed'", &v->rng_seed);
        if (st == QS_OK && of)
            st = u64_at(L, of, "'offset'", &v->rng_offset);
    }
    const qsk_ynode *inj = qsk_yaml_get(m, "inject_error"), *err = qsk_yaml_get(m, "expect_error");
    if (st == QS_OK && inj)
        st = load_inject(L, inj, &v->inject);
    if (st == QS_OK && err)
        st = load_error(L, err, &v->error);
    if (st == QS_OK && inj && err)
        st = PERR(L, err, "a variant either injects an error or expects one, not both");
    const qsk_ynode *tr = qsk_yaml_get(m, "trace"), *sx = qsk_yaml_get(m, "state");
    if (st == QS_OK && tr)
        st = load_trace(L, tr, v);
    if (st == QS_OK && sx) {
        st = want(L, sx, QSK_Y_SEQ, "'state'");
        if (st == QS_OK && !(v->state = calloc(sx->n + 1, sizeof *v->state)))
            return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == QS_OK && i < sx->n; i++) {
            st = load_state_exp(L, sx->items[i], &v->state[i]);
            v->nstate++;
        }
    }
    if (st == QS_OK)
        st = load_ranks(L, m, v);
    static const char *const ckeys[] = {"same_as", "differs_from", "close_to"};
    for (int k = 0; k < 3 && st == QS_OK; k++) {
        const qsk_ynode *cn = qsk_yaml_get(m, ckeys[k]);
        if (cn)
            st = load_cmps(L, cn, (qskp_cmp_kind)k, v);
    }
    return st;
}

/* ------------------------------------------------------------ static checks */

/* What the static walk knows at a statement: the scoping state that matters to the island
 * policy, and the activation's dtype and shape. */
typedef struct walk {
    int enabled, calibrating, island;
    const char *recipe;
    qs_dtype island_dtype;
    qs_dtype dtype;
    int64_t rows, dim;
    int has_backward;
    int depth; /* scoping regions open (autocast, calibrate, island) */
} walk;

static const char *recipe_name(const qskp_node *s)
{
    return s->has_recipe ? qs_recipe_kind_name(s->recipe.kind) : "none";
}

static int expects(const qskp_variant *v, qs_status code)
{
    return v->error.set && v->error.code == code;
}

static qs_status walk_op(ploader *L, const qskp_variant *v, const qskp_node *s, walk *w)
{
    if (s->kind == QSKP_MLA) { /* [RCP-MLA-OP]: the activation keeps its shape and dtype */
        const qskp_mla *m = &s->mla;
        if (m->cfg.hidden != w->dim)
            return perr_at(L, m->w_pos[QS_MLA_W_DKV],
                           "impossible shape: mla '%s' takes [%lld, %lld] activations but its "
                           "hidden size (from w_dkv) is %lld",
                           s->name, (long long)w->rows, (long long)w->dim,
                           (long long)m->cfg.hidden);
        if (m->layout == QS_ATTN_THD ? m->s != w->rows
            : m->s                   ? m->s * m->b != w->rows
                                     : w->rows % m->b != 0)
            return perr_at(L, s->pos,
                           "impossible shape: mla '%s' gets %lld rows, but its tokens are %s%lld "
                           "[MLA-SHAPES]",
                           s->name, (long long)w->rows,
                           m->layout == QS_ATTN_THD ? "the seqlens sum, "
                           : m->s                   ? "s * b = "
                                                    : "a multiple of b = ",
                           (long long)(m->layout == QS_ATTN_THD ? m->s
                                       : m->s                   ? m->s * m->b
                                                                : m->b));
        return QS_OK;
    }
    if (s->kind == QSKP_LINEAR) {
        const qsk_input *in = input_named(L, s->in[0]);
        if (in->dtype != QS_BF16 || in->ndim != 2)
            return perr_at(L, s->in_pos[0], "linear '%s': the weight '%s' must be a 2-D bf16 input",
                           s->name, s->in[0]);
        if (in->shape[1] != w->dim || in->shape[0] < 1)
            return perr_at(L, s->in_pos[0],
                           "impossible shape: linear '%s' takes [%lld, %lld] activations but its "
                           "weight '%s' is [%lld, %lld] (it must be [n, %lld])",
                           s->name, (long long)w->rows, (long long)w->dim, s->in[0],
                           (long long)in->shape[0], (long long)in->shape[1], (long long)w->dim);
        w->dim = in->shape[0];
        w->dtype = QS_BF16; /* [GEMM-LIN-HP]: a linear's output is BF16 */
        return QS_OK;
    }
    if (s->kind == QSKP_GELU) /* [RCP-GELU-OP]: elementwise, any region, shape and dtype kept */
        return QS_OK;
    if (w->dim % s->heads != 0)
        return perr_at(L, s->pos,
                       "impossible shape: gdn '%s' has %lld heads, which do not divide its "
                       "activations' %lld columns",
                       s->name, (long long)s->heads, (long long)w->dim);
    for (int i = 0; i < 2; i++) {
        const qsk_input *in = input_named(L, s->in[i]);
        int ok = in->dtype == QS_FP32 && in->ndim == (s->heads > 1 ? 2 : 1) &&
                 in->shape[0] == w->rows && (s->heads == 1 || in->shape[1] == s->heads);
        if (!ok && s->heads == 1)
            return perr_at(L, s->in_pos[i],
                           "impossible shape: gdn '%s': '%s' must be a 1-D fp32 input of %lld "
                           "values (one per row)",
                           s->name, s->in[i], (long long)w->rows);
        if (!ok)
            return perr_at(L, s->in_pos[i],
                           "impossible shape: gdn '%s': '%s' must be an fp32 input [%lld, %lld] "
                           "(one value per row and head)",
                           s->name, s->in[i], (long long)w->rows, (long long)s->heads);
    }
    /* [CASE-PROG-ISLAND-CHECK] [SCOPE-ISLAND-REJECT] */
    if (!w->island && (w->enabled || w->calibrating) && !expects(v, QS_ERR_STATE))
        return perr_at(L, s->pos,
                       "gdn '%s' sits in %s region (recipe %s) without an island, in variant "
                       "'%s': GDN cannot run quantized and the engine rejects it "
                       "[SCOPE-ISLAND-REJECT]; wrap it in an 'island' region, or check the "
                       "rejection with 'expect_error: QS_ERR_STATE'",
                       s->name, w->enabled ? "an enabled" : "a calibrating", w->recipe, v->name);
    if (w->island && !w->enabled && !w->calibrating && w->dtype != w->island_dtype &&
        !expects(v, QS_ERR_DTYPE))
        return perr_at(L, s->pos,
                       "gdn '%s' gets %s activations in an island that runs in %s, in variant "
                       "'%s' [SCOPE-ISLAND]; check that with 'expect_error: QS_ERR_DTYPE'",
                       s->name, qs_dtype_name(w->dtype), qs_dtype_name(w->island_dtype), v->name);
    return QS_OK;
}

static qs_status walk_body(ploader *L, const qskp_variant *v, const qskp_node *region, walk *w)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        if (!qskp_node_in(s, v)) {
            if (QSKP_IS_OP(s->kind) || s->kind == QSKP_BACKWARD)
                continue;
            qs_status st = walk_body(L, v, s, w); /* a region left out is transparent */
            if (st != QS_OK)
                return st;
            continue;
        }
        walk inner = *w;
        qs_status st = QS_OK;
        if (s->kind == QSKP_AUTOCAST || s->kind == QSKP_CALIBRATE || s->kind == QSKP_ISLAND)
            inner.depth++;
        /* [SCOPE-ENTER] a context nests at most QS_SCOPE_MAX_DEPTH regions: more is a load
         * error unless the variant checks the engine's rejection */
        if (inner.depth > QS_SCOPE_MAX_DEPTH && !expects(v, QS_ERR_STATE))
            return perr_at(L, s->pos,
                           "more than %d nested regions in variant '%s': a context nests at "
                           "most %d [SCOPE-ENTER]; check the rejection with 'expect_error: "
                           "QS_ERR_STATE'",
                           QS_SCOPE_MAX_DEPTH, v->name, QS_SCOPE_MAX_DEPTH);
        switch (s->kind) {
        case QSKP_AUTOCAST:
        case QSKP_CALIBRATE:
            inner.enabled = s->enabled;
            inner.calibrating = s->calibrating;
            inner.island = 0;
            inner.recipe = recipe_name(s);
            st = walk_body(L, v, s, &inner);
            break;
        case QSKP_ISLAND:
            inner.enabled = inner.calibrating = 0;
            inner.island = 1;
            inner.island_dtype = w->dtype;
            st = walk_body(L, v, s, &inner);
            break;
        case QSKP_CHECKPOINT:
            st = walk_body(L, v, s, &inner);
            break;
        case QSKP_BACKWARD:
            w->has_backward = 1;
            continue;
        default:
            st = walk_op(L, v, s, w);
            if (st != QS_OK)
                return st;
            continue;
        }
        if (st != QS_OK)
            return st;
        w->dtype = inner.dtype; /* the activation flows out of the region */
        w->dim = inner.dim;
        w->has_backward |= inner.has_backward;
    }
    return QS_OK;
}

static const qskp_node *backward_of(const qskp_program *p, const qskp_variant *v)
{
    const qskp_node *last = p->root.nbody ? &p->root.body[p->root.nbody - 1] : NULL;
    return last && last->kind == QSKP_BACKWARD && qskp_node_in(last, v) ? last : NULL;
}

/* The names a variant's comparisons may select [CASE-PROG-COMPARE]. */
static qs_status check_cmp_outputs(ploader *L, const qskp_variant *a, const qskp_variant *b,
                                   const qskp_cmp *c)
{
    for (size_t i = 0; i < c->noutputs; i++) {
        const char *o = c->outputs[i];
        int tensor = strcmp(o, "y") == 0 || strcmp(o, "dx") == 0 || strcmp(o, "grads") == 0 ||
                     strncmp(o, "grad.", 5) == 0;
        if (!tensor && strcmp(o, "state") != 0 && strcmp(o, "trace") != 0)
            return perr_at(L, c->pos,
                           "'%s' is not a variant output (y, dx, grads, grad.NAME, state, trace)",
                           o);
        if (c->kind == QSKP_CLOSE_TO && !tensor)
            return perr_at(L, c->pos, "close_to compares tensors (y, dx, grads), not '%s'", o);
        const qskp_variant *vs[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            if (vs[k]->error.set && strcmp(o, "state") != 0)
                return perr_at(L, c->pos,
                               "variant '%s' expects an error: of its outputs only 'state' exists",
                               vs[k]->name);
            if ((strcmp(o, "dx") == 0 || strncmp(o, "grad", 4) == 0) && !backward_of(L->p, vs[k]))
                return perr_at(L, c->pos, "variant '%s' runs no backward: it has no '%s'",
                               vs[k]->name, o);
            int pm;
            if (strncmp(o, "grad.", 5) == 0 && !qskp_grad_find(L->p, vs[k], o + 5, &pm))
                return perr_at(L, c->pos, "variant '%s' has no op '%s' (or mla op parameter)",
                               vs[k]->name, o + 5);
        }
    }
    return QS_OK;
}

/* The op statements of variant v under region: linear ops (the first in *lin) and others. */
static void count_ops(const qskp_node *region, const qskp_variant *v, int *nlin, int *nother,
                      const qskp_node **lin)
{
    for (size_t i = 0; i < region->nbody; i++) {
        const qskp_node *s = &region->body[i];
        if (QSKP_IS_OP(s->kind)) {
            if (!qskp_node_in(s, v))
                continue;
            if (s->kind == QSKP_LINEAR && (*nlin)++ == 0)
                *lin = s;
            else if (s->kind != QSKP_LINEAR)
                (*nother)++;
        } else if (s->kind != QSKP_BACKWARD) {
            count_ops(s, v, nlin, nother, lin);
        }
    }
}

/* [CASE-PROG-RANKS]: what a variant on several ranks may hold. */
static qs_status check_ranks(ploader *L, const qskp_variant *v, const qsk_input *x)
{
    if (v->ranks == 1)
        return QS_OK;
    if (v->inject.kind != QSKP_INJECT_NONE || v->error.set)
        return perr_at(L, v->ranks_pos,
                       "variant '%s': a variant on several ranks neither injects nor expects "
                       "an error",
                       v->name);
    int nlin = 0, nother = 0;
    const qskp_node *lin = NULL;
    count_ops(&L->p->root, v, &nlin, &nother, &lin);
    if (nother)
        return perr_at(L, v->ranks_pos,
                       "variant '%s': on several ranks a program holds linear ops only (gdn and "
                       "mla ops do not shard along rows) [CASE-PROG-RANKS]",
                       v->name);
    if (v->parallel == QS_DIST_TENSOR && nlin != 1)
        return perr_at(L, v->ranks_pos,
                       "variant '%s': a tensor-parallel variant holds exactly one linear op "
                       "(it has %d) [CASE-PROG-RANKS]",
                       v->name, nlin);
    if (v->parallel == QS_DIST_SEQUENCE && x->shape[0] < v->ranks)
        return perr_at(L, v->ranks_pos,
                       "variant '%s': %lld rows of '%s' cannot be split over %d ranks", v->name,
                       (long long)x->shape[0], v->x, v->ranks);
    if (v->parallel == QS_DIST_TENSOR) {
        const qsk_input *w = input_named(L, lin->in[0]);
        if (w->shape[0] < v->ranks)
            return perr_at(L, v->ranks_pos,
                           "variant '%s': %lld rows of weight '%s' cannot be split over %d ranks",
                           v->name, (long long)w->shape[0], w->name, v->ranks);
    }
    return QS_OK;
}

static qs_status check_variant(ploader *L, const qskp_variant *v)
{
    const qsk_input *x = input_named(L, v->x);
    if (!x)
        return perr_at(L, v->pos, "variant '%s': the case has no input '%s' (the program input)",
                       v->name, v->x);
    if ((x->dtype != QS_BF16 && x->dtype != QS_FP16) || x->ndim != 2 || x->shape[0] < 1 ||
        x->shape[1] < 1)
        return perr_at(L, x->pos, "the program input '%s' must be a 2-D bf16 or fp16 input", v->x);
    walk w = {0, 0, 0, "none", QS_DTYPE_INVALID, x->dtype, x->shape[0], x->shape[1], 0, 0};
    qs_status st = check_ranks(L, v, x);
    if (st == QS_OK)
        st = walk_body(L, v, &L->p->root, &w);
    if (st != QS_OK)
        return st;
    const qskp_node *bw = backward_of(L->p, v);
    if (bw) {
        const qsk_input *dy = input_named(L, v->dy[0] ? v->dy : bw->in[0]);
        if (dy->ndim != 2 || dy->shape[0] != w.rows || dy->shape[1] != w.dim ||
            (dy->dtype != QS_BF16 && dy->dtype != QS_FP16 && dy->dtype != QS_FP32))
            return perr_at(L, dy->pos,
                           "impossible shape: the output gradient '%s' must be a 2-D bf16, fp16 "
                           "or fp32 input [%lld, %lld], the shape of the program output",
                           dy->name, (long long)w.rows, (long long)w.dim);
    }
    if (v->inject.kind != QSKP_INJECT_NONE && v->inject.step > v->steps)
        return perr_at(L, v->inject.pos, "inject_error: step %d, but the variant runs %d step(s)",
                       v->inject.step, v->steps);
    if (v->error.set && v->error.step > v->steps)
        return perr_at(L, v->error.pos, "expect_error: step %d, but the variant runs %d step(s)",
                       v->error.step, v->steps);
    if (v->has_trace && v->trace_step > v->steps)
        return perr_at(L, v->pos, "trace: step %d, but the variant runs %d step(s)", v->trace_step,
                       v->steps);
    if (v->has_trace && v->error.set)
        return perr_at(L, v->pos, "variant '%s' expects an error: a failed run has no trace",
                       v->name);
    for (size_t i = 0; i < v->ntrace; i++) {
        const qskp_node *op;
        int part;
        const char *tn = v->trace[i].op;
        qskp_trace_op_split(L->p, v, tn, &op, &part);
        if (!op)
            return perr_at(L, v->trace[i].pos, "trace: variant '%s' has no op '%s'", v->name, tn);
        if (op->kind == QSKP_MLA && part < 0)
            return perr_at(L, v->trace[i].pos,
                           "trace: mla op '%s' is traced as its parts, '%s/LINEAR' "
                           "[RCP-MLA-TRACE]",
                           tn, tn);
        if (op->kind != QSKP_MLA && part >= 0)
            return perr_at(L, v->trace[i].pos, "trace: op '%s' is not an mla op: '%s' has no part",
                           op->name, tn);
        const qskp_mla *m = &op->mla;
        if (op->kind == QSKP_MLA &&
            (part < QS_MLA_LINEAR_COUNT
                 ? !qs_mla_linear_used(&m->cfg, m->split, (qs_mla_linear)part)
                 : part > QS_MLA_LINEAR_COUNT + 1 || !m->cfg.absorbed))
            return perr_at(L, v->trace[i].pos,
                           "trace: mla op '%s' has no part '%s' (its linears, and k_absorb and "
                           "v_absorb in the absorbed form) [RCP-MLA-TRACE]",
                           op->name, strchr(tn, '/') + 1);
        const char *kind = op->kind == QSKP_LINEAR      ? "linear"
                           : op->kind == QSKP_GDN       ? "gdn"
                           : op->kind == QSKP_GELU      ? "gelu"
                           : part < QS_MLA_LINEAR_COUNT ? "linear"
                                                        : "einsum";
        if (v->trace[i].kind[0] && strcmp(v->trace[i].kind, kind) != 0)
            return perr_at(L, v->trace[i].pos, "trace: op '%s' is a %s, not a %s", tn, kind,
                           v->trace[i].kind);
    }
    for (size_t i = 0; i < v->nstate; i++) {
        const qskp_state_exp *e = &v->state[i];
        const qskp_node *op = qskp_op_find(L->p, v, e->op);
        if (op && op->kind == QSKP_MLA) {
            if (e->linear < 0 ||
                !qs_mla_linear_used(&op->mla.cfg, op->mla.split, (qs_mla_linear)e->linear))
                return perr_at(L, e->pos,
                               "state: mla op '%s' needs 'linear', one of the linears it runs",
                               e->op);
        } else if (!op || op->kind != QSKP_LINEAR) {
            return perr_at(L, e->pos, "state: variant '%s' has no linear '%s'", v->name, e->op);
        } else if (e->linear >= 0) {
            return perr_at(L, e->pos,
                           "state: 'linear' names a linear of an mla op, and '%s' is "
                           "a linear op",
                           e->op);
        }
        if (e->step > v->steps)
            return perr_at(L, e->pos, "state: step %d, but the variant runs %d step(s)", e->step,
                           v->steps);
    }
    if (v->replays >= 0 && (v->error.set || !backward_of(L->p, v)))
        return perr_at(L, v->pos,
                       "variant '%s': 'replays' counts the replays of a run with a backward "
                       "that succeeds",
                       v->name);
    for (size_t i = 0; i < v->ncmp; i++) {
        const qskp_variant *o = qskp_variant_find(L->p, v->cmp[i].variant);
        if (!o)
            return perr_at(L, v->cmp[i].pos, "no variant named '%s'", v->cmp[i].variant);
        if (o == v)
            return perr_at(L, v->cmp[i].pos, "a variant is compared with another variant");
        st = check_cmp_outputs(L, v, o, &v->cmp[i]);
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

/* ------------------------------------------------------------ the case's program keys */

static qs_status load_variants(ploader *L, const qsk_ynode *n, const qskp_error *dflt)
{
    size_t count = n ? n->n : 1;
    qs_status st = n ? want(L, n, QSK_Y_SEQ, "'variants'") : QS_OK;
    if (st == QS_OK && n && n->n == 0)
        st = PERR(L, n, "'variants' must name at least one variant");
    if (st != QS_OK)
        return st;
    L->p->variants = calloc(count, sizeof *L->p->variants);
    if (!L->p->variants)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        qskp_variant *v = &L->p->variants[i];
        L->p->nvariants++;
        strcpy(v->x, "x");
        v->steps = 1;
        v->ranks = 1;
        v->replays = -1;
        if (n) {
            st = load_variant(L, n->items[i], v);
        } else {
            strcpy(v->name, "main");
            v->pos = L->c->pos;
        }
        if (st != QS_OK)
            return st;
        if (!v->error.set && dflt->set)
            v->error = *dflt;
        for (size_t j = 0; j < i; j++)
            if (strcmp(L->p->variants[j].name, v->name) == 0)
                return perr_at(L, v->pos, "duplicate variant name '%s'", v->name);
    }
    return QS_OK;
}

qs_status qskp_load(qs_ctx *ctx, const char *path, const qsk_ynode *n, const qsk_case *c,
                    qskp_program **out)
{
    ploader L = {ctx, path, c, NULL};
    *out = NULL;
    const qsk_ynode *prog = qsk_yaml_get(n, "program"), *vars = qsk_yaml_get(n, "variants"),
                    *err = qsk_yaml_get(n, "expect_error");
    if (!prog)
        return perr_at(&L, c->pos, "missing required field 'program' (op: program)");
    if (c->nparams)
        return perr_at(&L, c->params[0].pos, "op 'program' takes no params");
    L.p = calloc(1, sizeof *L.p);
    if (!L.p)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    *out = L.p;
    L.p->root.kind = QSKP_ROOT;
    L.p->root.pos = pos_of(prog);
    qskp_error dflt = {0};
    qs_status st = load_body(&L, prog, &L.p->root, 1);
    if (st == QS_OK && L.p->root.nbody == 0)
        st = PERR(&L, prog, "'program' must hold at least one statement");
    const qskp_node **seen = NULL;
    size_t nseen = 0;
    if (st == QS_OK && !(seen = calloc(count_nodes(&L.p->root), sizeof *seen)))
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    if (st == QS_OK)
        st = check_names(&L, &L.p->root, seen, &nseen);
    free(seen);
    if (st == QS_OK && nseen == 0)
        st = PERR(&L, prog, "'program' holds no op");
    if (st == QS_OK && err)
        st = load_error(&L, err, &dflt);
    if (st == QS_OK)
        st = load_variants(&L, vars, &dflt);
    for (size_t i = 0; st == QS_OK && i < L.p->nvariants; i++)
        st = check_variant(&L, &L.p->variants[i]);
    return st;
}

void qskp_free(qskp_program *p)
{
    if (!p)
        return;
    node_free(&p->root);
    for (size_t i = 0; i < p->nvariants; i++) {
        free(p->variants[i].trace);
        free(p->variants[i].state);
    }
    free(p->variants);
    free(p);
}
