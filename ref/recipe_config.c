/* recipe_config.c: the configuration of a quantizer (spec/recipes.md [REC-DEFAULTS],
 * [REC-OPTIONS]) — enum names, the defaults per recipe and role, options set by name from
 * one table, the consistency check, and the element format a configuration encodes to. */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "recipe_internal.h"

/* ------------------------------------------------------------------ names */

static const char *const kind_names[QS_RECIPE_COUNT] = {[QS_RECIPE_DELAYED] = "delayed",
                                                        [QS_RECIPE_CURRENT] = "current",
                                                        [QS_RECIPE_MXFP8] = "mxfp8",
                                                        [QS_RECIPE_BLOCK] = "block",
                                                        [QS_RECIPE_NVFP4] = "nvfp4",
                                                        [QS_RECIPE_ROWWISE] = "rowwise",
                                                        [QS_RECIPE_ROWWISE_GW_HP] =
                                                            "rowwise_with_gw_hp"};
static const char *const role_names[QS_ROLE_COUNT] = {"input", "weight", "output", "grad_output",
                                                      "grad_input"};
static const char *const roll_names[QS_DS_ROLL_COUNT] = {"fused", "unfused"};
static const char *const rule_names[QS_MX_RULE_COUNT] = {"te", "ocp"};
static const char *const variant_names[QS_NV_COUNT] = {"te", "torchao"};
static const char *const format_names[QS_FP8_COUNT] = {"hybrid", "e4m3", "e5m2"};
static const char *const algo_names[QS_AMAX_COUNT] = {"max", "most_recent"};

static const char *name_of(const char *const *names, int count, int v)
{
    return (v >= 0 && v < count) ? names[v] : NULL;
}

static int index_of(const char *const *names, int count, const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

const char *qs_recipe_kind_name(qs_recipe_kind k)
{
    return name_of(kind_names, QS_RECIPE_COUNT, (int)k);
}
int qs_recipe_kind_from_name(const char *name)
{
    return index_of(kind_names, QS_RECIPE_COUNT, name);
}
const char *qs_tensor_role_name(qs_tensor_role r)
{
    return name_of(role_names, QS_ROLE_COUNT, (int)r);
}
int qs_tensor_role_from_name(const char *name)
{
    return index_of(role_names, QS_ROLE_COUNT, name);
}
const char *qs_ds_roll_name(qs_ds_roll r)
{
    return name_of(roll_names, QS_DS_ROLL_COUNT, (int)r);
}
int qs_ds_roll_from_name(const char *name)
{
    return index_of(roll_names, QS_DS_ROLL_COUNT, name);
}
const char *qs_mx_rule_name(qs_mx_rule r)
{
    return name_of(rule_names, QS_MX_RULE_COUNT, (int)r);
}
int qs_mx_rule_from_name(const char *name)
{
    return index_of(rule_names, QS_MX_RULE_COUNT, name);
}
const char *qs_nv_variant_name(qs_nv_variant v)
{
    return name_of(variant_names, QS_NV_COUNT, (int)v);
}
int qs_nv_variant_from_name(const char *name)
{
    return index_of(variant_names, QS_NV_COUNT, name);
}

/* ------------------------------------------------------------------ configuration */

static int role_is_gradient(qs_tensor_role r)
{
    return r == QS_ROLE_GRAD_OUTPUT || r == QS_ROLE_GRAD_INPUT;
}

/* The role-dependent defaults [REC-DEFAULTS]: 2-D tiles for weights (block, nvfp4); NVFP4
 * RHT for inputs and gradients, stochastic rounding for gradients. */
static void apply_role_defaults(qs_recipe_config *cfg)
{
    int tiled = cfg->kind == QS_RECIPE_BLOCK || cfg->kind == QS_RECIPE_NVFP4;
    cfg->tile_2d = tiled && cfg->role == QS_ROLE_WEIGHT;
    int nv = cfg->kind == QS_RECIPE_NVFP4;
    cfg->rht = nv && (cfg->role == QS_ROLE_INPUT || role_is_gradient(cfg->role));
    cfg->sr = nv && role_is_gradient(cfg->role);
}

qs_status qs_recipe_config_default(qs_ctx *ctx, qs_recipe_config *cfg, qs_recipe_kind kind,
                                   qs_tensor_role role)
{
    if (!cfg)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: cfg is NULL");
    if ((int)kind < 0 || kind >= QS_RECIPE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown kind %d", (int)kind);
    if ((int)role < 0 || role >= QS_ROLE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown role %d", (int)role);
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->role = role;
    cfg->rowwise = 1;
    cfg->columnwise = 1;
    int axiswise = kind == QS_RECIPE_ROWWISE || kind == QS_RECIPE_ROWWISE_GW_HP;
    /* [REC-AX-ELEM]: torchao's rowwise recipes cast gradients to E4M3 too */
    cfg->format = kind == QS_RECIPE_BLOCK || axiswise ? QS_FP8_E4M3 : QS_FP8_HYBRID;
    cfg->history_len = 1024;
    cfg->algo = QS_AMAX_MAX;
    cfg->margin = 0;
    cfg->roll = QS_DS_ROLL_FUSED;
    cfg->eps = 0.0f;
    cfg->pow2 = kind == QS_RECIPE_BLOCK || axiswise; /* [REC-AX-POW2] */
    cfg->mx_elem = QS_E4M3;
    cfg->mx_rule = QS_MX_RULE_TE;
    cfg->nv_variant = QS_NV_TE;
    cfg->seed = 0;
    cfg->offset = 0;
    apply_role_defaults(cfg);
    return QS_OK;
}

enum {
    K_DS = 1 << QS_RECIPE_DELAYED,
    K_CS = 1 << QS_RECIPE_CURRENT,
    K_MX = 1 << QS_RECIPE_MXFP8,
    K_BL = 1 << QS_RECIPE_BLOCK,
    K_NV = 1 << QS_RECIPE_NVFP4,
    K_AX = (1 << QS_RECIPE_ROWWISE) | (1 << QS_RECIPE_ROWWISE_GW_HP),
    K_ALL = K_DS | K_CS | K_MX | K_BL | K_NV | K_AX
};

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = (int64_t)x;
    return 0;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    if (s[0] == '-' || s[0] == '\0')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *v = (uint64_t)x;
    return 0;
}

static int parse_bool(const char *s, int *v)
{
    static const char *const yes[] = {"1", "on", "true", "yes"};
    static const char *const no[] = {"0", "off", "false", "no"};
    for (size_t i = 0; i < QSI_ARRAY_LEN(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *v = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *v = 0;
            return 0;
        }
    }
    return -1;
}

/* One named option: the kinds it belongs to and how its value is stored. */
typedef int (*opt_setter)(qs_recipe_config *cfg, const char *value);

static int set_role(qs_recipe_config *cfg, const char *v)
{
    int r = qs_tensor_role_from_name(v);
    if (r < 0)
        return -1;
    cfg->role = (qs_tensor_role)r;
    apply_role_defaults(cfg);
    return 0;
}
static int set_rowwise(qs_recipe_config *cfg, const char *v)
{
    return parse_bool(v, &cfg->rowwise);
}
static int set_columnwise(qs_recipe_config *cfg, const char *v)
{
    return parse_bool(v, &cfg->columnwise);
}
static int set_format(qs_recipe_config *cfg, const char *v)
{
    int f = index_of(format_names, QS_FP8_COUNT, v);
    if (f < 0)
        return -1;
    cfg->format = (qs_fp8_format)f;
    return 0;
}
static int set_history(qs_recipe_config *cfg, const char *v)
{
    return parse_i64(v, 1, 1 << 24, &cfg->history_len);
}
static int set_algo(qs_recipe_config *cfg, const char *v)
{
    int a = index_of(algo_names, QS_AMAX_COUNT, v);
    if (a < 0)
        return -1;
    cfg->algo = (qs_amax_algo)a;
    return 0;
}
static int set_margin(qs_recipe_config *cfg, const char *v)
{
    int64_t m;
    if (parse_i64(v, -64, 64, &m))
        return -1;
    cfg->margin = (int)m;
    return 0;
}
static int set_roll(qs_recipe_config *cfg, const char *v)
{
    int r = qs_ds_roll_from_name(v);
    if (r < 0)
        return -1;
    cfg->roll = (qs_ds_roll)r;
    return 0;
}
static int set_eps(qs_recipe_config *cfg, const char *v)
{
    char *end;
    errno = 0;
    float e = strtof(v, &end);
    if (errno || end == v || *end || !(e >= 0.0f) || e > FLT_MAX)
        return -1;
    cfg->eps = e;
    return 0;
}
static int set_pow2(qs_recipe_config *cfg, const char *v)
{
    return parse_bool(v, &cfg->pow2);
}
static int set_elem(qs_recipe_config *cfg, const char *v)
{
    qs_dtype d = qs_dtype_from_name(v);
    if (d != QS_E4M3 && d != QS_E5M2)
        return -1;
    cfg->mx_elem = d;
    return 0;
}
static int set_rule(qs_recipe_config *cfg, const char *v)
{
    int r = qs_mx_rule_from_name(v);
    if (r < 0)
        return -1;
    cfg->mx_rule = (qs_mx_rule)r;
    return 0;
}
static int set_tile(qs_recipe_config *cfg, const char *v)
{
    if (strcmp(v, "1d") == 0)
        cfg->tile_2d = 0;
    else if (strcmp(v, "2d") == 0)
        cfg->tile_2d = 1;
    else
        return -1;
    return 0;
}
static int set_variant(qs_recipe_config *cfg, const char *v)
{
    int r = qs_nv_variant_from_name(v);
    if (r < 0)
        return -1;
    cfg->nv_variant = (qs_nv_variant)r;
    return 0;
}
static int set_rht(qs_recipe_config *cfg, const char *v)
{
    return parse_bool(v, &cfg->rht);
}
static int set_sr(qs_recipe_config *cfg, const char *v)
{
    return parse_bool(v, &cfg->sr);
}
static int set_seed(qs_recipe_config *cfg, const char *v)
{
    return parse_u64(v, &cfg->seed);
}
static int set_offset(qs_recipe_config *cfg, const char *v)
{
    return parse_u64(v, &cfg->offset);
}

static const struct {
    const char *key;
    int kinds;
    opt_setter set;
    const char *values; /* for the message */
} options[] = {
    {"role", K_ALL, set_role, "input|weight|output|grad_output|grad_input"},
    {"rowwise", K_ALL, set_rowwise, "0|1"},
    {"columnwise", K_ALL, set_columnwise, "0|1"},
    {"format", K_DS | K_CS | K_BL | K_AX, set_format, "hybrid|e4m3|e5m2"},
    {"history", K_DS, set_history, "an integer 1..16777216"},
    {"algo", K_DS, set_algo, "max|most_recent"},
    {"margin", K_DS, set_margin, "an integer -64..64"},
    {"roll", K_DS, set_roll, "fused|unfused"},
    {"eps", K_CS | K_BL, set_eps, "a finite number >= 0"},
    {"pow2", K_CS | K_BL | K_AX, set_pow2, "0|1"},
    {"elem", K_MX, set_elem, "e4m3|e5m2"},
    {"rule", K_MX, set_rule, "te|ocp"},
    {"tile", K_BL | K_NV, set_tile, "1d|2d"},
    {"variant", K_NV, set_variant, "te|torchao"},
    {"rht", K_NV, set_rht, "0|1"},
    {"sr", K_NV, set_sr, "0|1"},
    {"seed", K_NV, set_seed, "an unsigned integer"},
    {"offset", K_NV, set_offset, "an unsigned integer"},
};

qs_status qs_recipe_config_set(qs_ctx *ctx, qs_recipe_config *cfg, const char *key,
                               const char *value)
{
    if (!cfg || !key || !value)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe option: NULL argument");
    const char *kname = qs_recipe_kind_name(cfg->kind);
    for (size_t i = 0; i < QSI_ARRAY_LEN(options); i++) {
        if (strcmp(options[i].key, key) != 0)
            continue;
        if (!(options[i].kinds & (1 << cfg->kind)))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "recipe option '%s' does not apply to recipe %s", key,
                                kname ? kname : "?");
        if (options[i].set(cfg, value))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "recipe option '%s': bad value '%s' (expected %s)", key, value,
                                options[i].values);
        return QS_OK;
    }
    return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "unknown recipe option '%s'", key);
}

qs_status qs_recipe_config_check(qs_ctx *ctx, const qs_recipe_config *cfg)
{
    if (!cfg)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config is NULL");
    if ((int)cfg->kind < 0 || cfg->kind >= QS_RECIPE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown kind");
    if ((int)cfg->role < 0 || cfg->role >= QS_ROLE_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown role");
    if (!cfg->rowwise && !cfg->columnwise)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "recipe config: neither rowwise nor columnwise is requested");
    if ((int)cfg->format < 0 || cfg->format >= QS_FP8_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown format");
    if (cfg->kind == QS_RECIPE_DELAYED) {
        if (cfg->history_len < 1 || cfg->history_len > (1 << 24))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "recipe config: history length %lld outside 1..16777216",
                                (long long)cfg->history_len);
        if ((int)cfg->algo < 0 || cfg->algo >= QS_AMAX_COUNT || (int)cfg->roll < 0 ||
            cfg->roll >= QS_DS_ROLL_COUNT)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: bad algo or roll");
        if (cfg->margin < -64 || cfg->margin > 64)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: margin %d outside -64..64",
                                cfg->margin);
    }
    if (!(cfg->eps >= 0.0f) || cfg->eps > FLT_MAX)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: eps must be finite, >= 0");
    if (cfg->kind == QS_RECIPE_MXFP8) {
        if (cfg->mx_elem != QS_E4M3 && cfg->mx_elem != QS_E5M2)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: mxfp8 elem not e4m3/e5m2");
        if ((int)cfg->mx_rule < 0 || cfg->mx_rule >= QS_MX_RULE_COUNT)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown mxfp8 rule");
    }
    if (cfg->kind == QS_RECIPE_NVFP4) {
        if ((int)cfg->nv_variant < 0 || cfg->nv_variant >= QS_NV_COUNT)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "recipe config: unknown nvfp4 variant");
        if (cfg->rht && cfg->tile_2d)
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "recipe option 'rht' cannot be combined with tile 2d "
                                "[REC-NV-RHT]");
    } else if (cfg->rht || cfg->sr) {
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "recipe options 'rht' and 'sr' apply to nvfp4 only");
    }
    return QS_OK;
}

/* [REC-DS-HYBRID] [REC-MX-ELEM] [REC-NV-ELEM]: the element format of a configuration. */
qs_dtype qs_recipe_elem_dtype(const qs_recipe_config *cfg)
{
    if (cfg->kind == QS_RECIPE_NVFP4)
        return QS_E2M1;
    if (cfg->kind == QS_RECIPE_MXFP8)
        return cfg->mx_elem;
    switch (cfg->format) {
    case QS_FP8_E4M3:
        return QS_E4M3;
    case QS_FP8_E5M2:
        return QS_E5M2;
    default:
        return role_is_gradient(cfg->role) ? QS_E5M2 : QS_E4M3;
    }
}
