/* cases.c: loading and validating case files against the schema of spec/cases.md.
 * Each check reports file:line:col of the offending node. The loader owns everything it
 * allocates; qsk_case_file_free releases it all, also after a failed load. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "fileio.h"
#include "program.h"

#define QSK_MAX_INPUT_ELEMS (INT64_C(1) << 26)
#define QSK_MAX_LARGE_ELEMS (INT64_C(1) << 28) /* in a large-tier case [CASE-TIER] */

typedef struct loader {
    qs_ctx *ctx;
    const char *path;
    qsk_rule_known_fn known;
    void *known_arg;
    int64_t max_elems; /* of one input: the case's tier sets it */
} loader;

static qs_status err_at(loader *L, const qsk_ynode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static qs_status err_at(loader *L, const qsk_ynode *n, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qs_ctx_error(L->ctx, QS_ERR_FORMAT, "%s:%d:%d: %s", L->path, n ? n->line : 1,
                        n ? n->col : 1, msg);
}

static const char *kind_name(qsk_ykind k)
{
    return k == QSK_Y_MAP ? "a mapping" : k == QSK_Y_SEQ ? "a sequence" : "a scalar";
}

static qs_status want_kind(loader *L, const qsk_ynode *n, qsk_ykind k, const char *what)
{
    if (n->kind == k)
        return QS_OK;
    char buf[200];
    snprintf(buf, sizeof buf, "%s must be %s, not %s", what, kind_name(k), kind_name(n->kind));
    return err_at(L, n, "%s", buf);
}

/* Rejects keys of map not in allowed (a NULL-terminated list). */
static qs_status only_keys(loader *L, const qsk_ynode *map, const char *const *allowed,
                           const char *where)
{
    for (size_t i = 0; i < map->n; i += 2) {
        const char *k = map->items[i]->text;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, k) == 0)
                ok = 1;
        if (!ok)
            return err_at(L, map->items[i], "unknown key '%s' in %s", k, where);
    }
    return QS_OK;
}

static qs_status need(loader *L, const qsk_ynode *map, const char *key, const qsk_ynode **out)
{
    *out = qsk_yaml_get(map, key);
    if (!*out)
        return err_at(L, map, "missing required field '%s'", key);
    return QS_OK;
}

static qs_status scalar_copy(loader *L, const qsk_ynode *n, const char *what, char *dst, size_t cap)
{
    qs_status st = want_kind(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    if (strlen(n->text) >= cap || n->text[0] == '\0')
        return err_at(L, n, "%s must be a non-empty string of at most %s characters", what,
                      cap > 100 ? "127" : "63");
    memcpy(dst, n->text, strlen(n->text) + 1);
    return QS_OK;
}

/* Parses a number: decimal, C99 hex float, nan, inf, -inf. A finite number beyond FP64's
 * range or a nonzero one that underflows to zero is not a number (strtod's ERANGE). */
static int parse_number(const char *s, double *v)
{
    if (strcmp(s, "nan") == 0 || strcmp(s, "+nan") == 0) {
        *v = NAN;
        return 1;
    }
    if (strcmp(s, "-nan") == 0) {
        *v = -NAN;
        return 1;
    }
    if (strcmp(s, "inf") == 0 || strcmp(s, "+inf") == 0 || strcmp(s, ".inf") == 0) {
        *v = INFINITY;
        return 1;
    }
    if (strcmp(s, "-inf") == 0 || strcmp(s, "-.inf") == 0) {
        *v = -INFINITY;
        return 1;
    }
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (errno == ERANGE && (isinf(*v) || *v == 0))
        return 0;
    return end != s && *end == '\0' && !isnan(*v);
}

static qs_status number_at(loader *L, const qsk_ynode *n, const char *what, double *v)
{
    qs_status st = want_kind(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    if (!parse_number(n->text, v))
        return err_at(L, n, "%s: '%s' is not a number (or is beyond FP64's range)", what, n->text);
    return QS_OK;
}

int qsk_parse_u64(const char *s, uint64_t *v)
{
    unsigned base = 10;
    *v = 0;
    if ((s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) && s[2] != '\0') {
        base = 16;
        s += 2;
    }
    if (*s == '\0')
        return 1;
    uint64_t x = 0;
    int over = 0;
    for (; *s; s++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (base == 16 && *s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a') + 10;
        else if (base == 16 && *s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A') + 10;
        else
            return 1;
        if (x > (UINT64_MAX - d) / base)
            over = 1;
        else
            x = x * base + d;
    }
    if (over)
        return 2;
    *v = x;
    return 0;
}

int qsk_parse_i64(const char *s, int64_t *v)
{
    int neg = *s == '-';
    uint64_t u;
    *v = 0;
    int r = qsk_parse_u64(s + (neg || *s == '+'), &u);
    if (r != 0)
        return r;
    if (u > (uint64_t)INT64_MAX + (uint64_t)neg)
        return 2;
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

static qs_status uint_at(loader *L, const qsk_ynode *n, const char *what, uint64_t *v)
{
    qs_status st = want_kind(L, n, QSK_Y_SCALAR, what);
    if (st != QS_OK)
        return st;
    int r = qsk_parse_u64(n->text, v);
    if (r == 2)
        return err_at(L, n, "%s: '%s' is out of range (at most 2^64 - 1)", what, n->text);
    if (r != 0)
        return err_at(L, n, "%s: '%s' is not a non-negative integer", what, n->text);
    return QS_OK;
}

static int rule_id_syntax(const char *s)
{
    if (!(*s >= 'A' && *s <= 'Z'))
        return 0;
    int dashes = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '-') {
            if (p[1] == '\0' || p[1] == '-')
                return 0;
            dashes++;
        } else if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) {
            return 0;
        }
    }
    return dashes > 0;
}

static qs_status load_rules(loader *L, const qsk_ynode *n, qsk_case *c)
{
    qs_status st = want_kind(L, n, QSK_Y_SEQ, "'rules'");
    if (st != QS_OK)
        return st;
    if (n->n == 0)
        return err_at(L, n, "'rules' must name at least one rule ID");
    c->rules = calloc(n->n, sizeof *c->rules);
    if (!c->rules)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n->n; i++) {
        const qsk_ynode *r = n->items[i];
        st = want_kind(L, r, QSK_Y_SCALAR, "a rule ID");
        if (st != QS_OK)
            return st;
        if (!rule_id_syntax(r->text))
            return err_at(L, r, "'%s' is not a rule ID (like FMT-E4M3-OVF)", r->text);
        if (L->known && !L->known(r->text, L->known_arg))
            return err_at(L, r, "unknown rule ID '%s': spec/ defines no such rule", r->text);
        c->rules[i] = malloc(strlen(r->text) + 1);
        if (!c->rules[i])
            return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
        strcpy(c->rules[i], r->text);
        c->nrules++;
    }
    return QS_OK;
}

static qs_status load_params(loader *L, const qsk_ynode *n, qsk_case *c)
{
    qs_status st = want_kind(L, n, QSK_Y_MAP, "'params'");
    if (st != QS_OK)
        return st;
    c->params = calloc(n->n / 2 + 1, sizeof *c->params);
    if (!c->params)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n->n; i += 2) {
        qsk_param *p = &c->params[c->nparams];
        st = scalar_copy(L, n->items[i], "a parameter name", p->key, sizeof p->key);
        if (st == QS_OK)
            st = scalar_copy(L, n->items[i + 1], "a parameter value", p->value, sizeof p->value);
        if (st != QS_OK)
            return st;
        p->pos = (qsk_pos){n->items[i + 1]->line, n->items[i + 1]->col};
        c->nparams++;
    }
    return QS_OK;
}

static qs_status load_shape(loader *L, const qsk_ynode *n, qsk_input *in)
{
    qs_status st = want_kind(L, n, QSK_Y_SEQ, "'shape'");
    if (st != QS_OK)
        return st;
    if (n->n > QS_MAX_DIMS)
        return err_at(L, n, "impossible shape: more than 8 dimensions");
    int64_t numel = 1;
    for (size_t d = 0; d < n->n; d++) {
        uint64_t e;
        if (n->items[d]->kind != QSK_Y_SCALAR || qsk_parse_u64(n->items[d]->text, &e) == 1)
            return err_at(L, n->items[d],
                          "impossible shape: extent '%s' is not a non-negative integer",
                          n->items[d]->kind == QSK_Y_SCALAR ? n->items[d]->text : "?");
        if (qsk_parse_u64(n->items[d]->text, &e) != 0 || e > (uint64_t)L->max_elems ||
            (e && numel > L->max_elems / (int64_t)e))
            return err_at(L, n->items[d], "impossible shape: more than 2^%d elements%s",
                          L->max_elems == QSK_MAX_INPUT_ELEMS ? 26 : 28,
                          L->max_elems == QSK_MAX_INPUT_ELEMS ? "" : " (tier large)");
        in->shape[d] = (int64_t)e;
        numel *= (int64_t)e;
    }
    in->ndim = (int)n->n;
    return QS_OK;
}

static int64_t input_numel(const qsk_input *in)
{
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n *= in->shape[d];
    return n;
}

static qs_status load_values(loader *L, const qsk_ynode *n, qsk_input *in)
{
    qs_status st = want_kind(L, n, QSK_Y_SEQ, "'values'");
    if (st != QS_OK)
        return st;
    if (n->n == 0)
        return err_at(L, n, "'values' must hold at least one value");
    in->values = calloc(n->n, sizeof *in->values);
    if (!in->values)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n->n; i++) {
        st = number_at(L, n->items[i], "a value", &in->values[i]);
        if (st != QS_OK)
            return st;
    }
    in->nvalues = n->n;
    int64_t numel = input_numel(in);
    if (numel % (int64_t)n->n != 0)
        return err_at(L, n,
                      "impossible shape: the values do not fill the shape (the count must divide "
                      "the element count)");
    in->gen = QSK_GEN_VALUES;
    return QS_OK;
}

static qs_status load_dist(loader *L, const qsk_ynode *n, qsk_input *in, int normal)
{
    static const char *const ukeys[] = {"lo", "hi", NULL};
    static const char *const nkeys[] = {"mean", "std", NULL};
    const char *const *keys = normal ? nkeys : ukeys;
    qs_status st = want_kind(L, n, QSK_Y_MAP, normal ? "'normal'" : "'uniform'");
    if (st == QS_OK)
        st = only_keys(L, n, keys, normal ? "'normal'" : "'uniform'");
    const qsk_ynode *a, *b;
    if (st == QS_OK)
        st = need(L, n, keys[0], &a);
    if (st == QS_OK)
        st = need(L, n, keys[1], &b);
    if (st == QS_OK)
        st = number_at(L, a, keys[0], &in->a);
    if (st == QS_OK)
        st = number_at(L, b, keys[1], &in->b);
    if (st != QS_OK)
        return st;
    if (!isfinite(in->a) || !isfinite(in->b) || (normal ? in->b < 0 : in->b < in->a))
        return err_at(L, n,
                      normal ? "'normal' needs a finite mean and std >= 0"
                             : "'uniform' needs finite lo <= hi");
    in->gen = normal ? QSK_GEN_NORMAL : QSK_GEN_UNIFORM;
    return QS_OK;
}

static qs_status load_inject(loader *L, const qsk_ynode *n, qsk_input *in)
{
    static const char *const keys[] = {"at", "value", NULL};
    qs_status st = want_kind(L, n, QSK_Y_SEQ, "'inject'");
    if (st != QS_OK)
        return st;
    in->inject = calloc(n->n + 1, sizeof *in->inject);
    if (!in->inject)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    int64_t numel = input_numel(in);
    for (size_t i = 0; i < n->n; i++) {
        const qsk_ynode *e = n->items[i], *at, *val;
        st = want_kind(L, e, QSK_Y_MAP, "an injection");
        if (st == QS_OK)
            st = only_keys(L, e, keys, "an injection");
        if (st == QS_OK)
            st = need(L, e, "at", &at);
        if (st == QS_OK)
            st = need(L, e, "value", &val);
        if (st == QS_OK)
            st = number_at(L, val, "'value'", &in->inject[i].value);
        if (st != QS_OK)
            return st;
        if (at->kind == QSK_Y_SCALAR && strcmp(at->text, "random") == 0) {
            in->inject[i].index = -1;
        } else {
            uint64_t idx;
            st = uint_at(L, at, "'at'", &idx);
            if (st != QS_OK)
                return st;
            if ((int64_t)idx >= numel)
                return err_at(L, at, "impossible shape: injection index %s is outside the tensor",
                              at->text);
            in->inject[i].index = (int64_t)idx;
        }
        in->ninject++;
    }
    return QS_OK;
}

static qs_status load_input(loader *L, const qsk_ynode *key, const qsk_ynode *n, qsk_input *in)
{
    static const char *const keys[] = {"dtype", "shape",  "values", "uniform", "normal",
                                       "seed",  "offset", "inject", NULL};
    qs_status st = scalar_copy(L, key, "an input name", in->name, sizeof in->name);
    if (st == QS_OK)
        st = want_kind(L, n, QSK_Y_MAP, "an input");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "an input");
    if (st != QS_OK)
        return st;
    in->pos = (qsk_pos){key->line, key->col};
    const qsk_ynode *dt, *shape;
    st = need(L, n, "dtype", &dt);
    if (st == QS_OK)
        st = want_kind(L, dt, QSK_Y_SCALAR, "'dtype'");
    if (st != QS_OK)
        return st;
    in->dtype = qs_dtype_from_name(dt->text);
    if (in->dtype != QS_FP32 && in->dtype != QS_BF16 && in->dtype != QS_FP16 &&
        in->dtype != QS_FP64)
        return err_at(L, dt, "input dtype '%s' is not one of fp32, bf16, fp16, fp64", dt->text);
    st = need(L, n, "shape", &shape);
    if (st == QS_OK)
        st = load_shape(L, shape, in);
    if (st != QS_OK)
        return st;
    const qsk_ynode *v = qsk_yaml_get(n, "values"), *u = qsk_yaml_get(n, "uniform"),
                    *g = qsk_yaml_get(n, "normal");
    if ((v != NULL) + (u != NULL) + (g != NULL) != 1)
        return err_at(L, n, "an input needs exactly one of 'values', 'uniform', 'normal'");
    st = v ? load_values(L, v, in) : load_dist(L, u ? u : g, in, g != NULL);
    const qsk_ynode *seed = qsk_yaml_get(n, "seed"), *off = qsk_yaml_get(n, "offset");
    if (st == QS_OK && seed)
        st = uint_at(L, seed, "'seed'", &in->seed);
    if (st == QS_OK && off)
        st = uint_at(L, off, "'offset'", &in->offset);
    const qsk_ynode *inj = qsk_yaml_get(n, "inject");
    if (st == QS_OK && inj)
        st = load_inject(L, inj, in);
    return st;
}

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static qs_status load_compare(loader *L, const qsk_ynode *n, qsk_output *o)
{
    if (n->kind == QSK_Y_SCALAR) {
        if (strcmp(n->text, "bitwise") != 0)
            return err_at(L, n,
                          "unknown comparison '%s' (bitwise, or a mapping: ulp, allclose, "
                          "gemm_bound, rms_ratio, cosine)",
                          n->text);
        o->cmp = QSK_CMP_BITWISE;
        return QS_OK;
    }
    qs_status st = want_kind(L, n, QSK_Y_MAP, "'compare'");
    if (st != QS_OK)
        return st;
    if (n->n != 2)
        return err_at(L, n, "'compare' holds exactly one comparison");
    const qsk_ynode *k = n->items[0], *v = n->items[1];
    static const struct {
        const char *name;
        qsk_cmp_kind kind;
    } simple[] = {{"ulp", QSK_CMP_ULP},
                  {"gemm_bound", QSK_CMP_GEMM_BOUND},
                  {"rms_ratio", QSK_CMP_RMS_RATIO},
                  {"cosine", QSK_CMP_COSINE}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (strcmp(k->text, simple[i].name) == 0) {
            o->cmp = simple[i].kind;
            st = number_at(L, v, k->text, &o->p1);
            if (st == QS_OK && (!(o->p1 >= 0) || !isfinite(o->p1)))
                return err_at(L, v, "'%s' must be a finite number >= 0", k->text);
            if (st == QS_OK && o->cmp == QSK_CMP_ULP && o->p1 != floor(o->p1))
                return err_at(L, v, "'ulp' counts whole units in the last place, not '%s'",
                              v->text);
            if (st == QS_OK && o->cmp == QSK_CMP_COSINE && o->p1 > 1)
                return err_at(L, v, "'cosine' is at most 1 (a cosine similarity), not '%s'",
                              v->text);
            return st;
        }
    if (strcmp(k->text, "allclose") == 0) {
        static const char *const keys[] = {"atol", "rtol", NULL};
        const qsk_ynode *a, *r;
        o->cmp = QSK_CMP_ALLCLOSE;
        st = want_kind(L, v, QSK_Y_MAP, "'allclose'");
        if (st == QS_OK)
            st = only_keys(L, v, keys, "'allclose'");
        if (st == QS_OK)
            st = need(L, v, "atol", &a);
        if (st == QS_OK)
            st = need(L, v, "rtol", &r);
        if (st == QS_OK)
            st = number_at(L, a, "'atol'", &o->p1);
        if (st == QS_OK && (!(o->p1 >= 0) || !isfinite(o->p1)))
            return err_at(L, a, "'atol' must be a finite number >= 0");
        if (st == QS_OK)
            st = number_at(L, r, "'rtol'", &o->p2);
        if (st == QS_OK && (!(o->p2 >= 0) || !isfinite(o->p2)))
            return err_at(L, r, "'rtol' must be a finite number >= 0");
        return st;
    }
    return err_at(L, k, "unknown comparison '%s'", k->text);
}

static qs_status load_output(loader *L, const qsk_ynode *key, const qsk_ynode *n, qsk_output *o)
{
    static const char *const keys[] = {"compare", "nan", "digest", NULL};
    qs_status st = scalar_copy(L, key, "an output name", o->name, sizeof o->name);
    if (st == QS_OK)
        st = want_kind(L, n, QSK_Y_MAP, "an output");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "an output");
    const qsk_ynode *cmp, *dg;
    if (st == QS_OK)
        st = need(L, n, "compare", &cmp);
    if (st == QS_OK)
        st = load_compare(L, cmp, o);
    if (st == QS_OK)
        st = need(L, n, "digest", &dg);
    if (st == QS_OK)
        st = want_kind(L, dg, QSK_Y_SCALAR, "'digest'");
    if (st != QS_OK)
        return st;
    o->pos = (qsk_pos){key->line, key->col};
    const qsk_ynode *nan = qsk_yaml_get(n, "nan");
    if (nan) {
        if (o->cmp != QSK_CMP_BITWISE)
            return err_at(L, nan, "'nan' applies to bitwise comparisons only");
        st = want_kind(L, nan, QSK_Y_SCALAR, "'nan'");
        if (st != QS_OK)
            return st;
        if (strcmp(nan->text, "any") == 0)
            o->nan_any = 1;
        else if (strcmp(nan->text, "canonical") != 0)
            return err_at(L, nan, "'nan' is 'canonical' or 'any', not '%s'", nan->text);
    }
    o->digest_start = dg->start;
    o->digest_end = dg->end;
    if (strcmp(dg->text, "pending") == 0) {
        o->digest[0] = '\0';
        return QS_OK;
    }
    if (strncmp(dg->text, "sha256:", 7) != 0 || !is_hex64(dg->text + 7))
        return err_at(
            L, dg,
            "malformed digest '%s': expected sha256: and 64 lower-case hex digits, or pending",
            dg->text);
    memcpy(o->digest, dg->text + 7, 65);
    return QS_OK;
}

static qs_status load_named(loader *L, const qsk_ynode *n, const char *what, qsk_case *c,
                            int outputs)
{
    qs_status st = want_kind(L, n, QSK_Y_MAP, what);
    if (st != QS_OK)
        return st;
    if (n->n == 0)
        return err_at(L, n, "%s must not be empty", what);
    size_t count = n->n / 2;
    if (outputs) {
        c->outputs = calloc(count, sizeof *c->outputs);
        if (!c->outputs)
            return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    } else {
        c->inputs = calloc(count, sizeof *c->inputs);
        if (!c->inputs)
            return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        if (outputs) {
            st = load_output(L, n->items[2 * i], n->items[2 * i + 1], &c->outputs[i]);
            c->noutputs++;
        } else {
            st = load_input(L, n->items[2 * i], n->items[2 * i + 1], &c->inputs[i]);
            c->ninputs++;
        }
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

const char *qsk_tier_name(qsk_tier t)
{
    return t == QSK_TIER_LARGE ? "large" : "default";
}

int qsk_tier_parse(const char *s)
{
    return strcmp(s, "default") == 0 ? QSK_TIER_DEFAULT
           : strcmp(s, "large") == 0 ? QSK_TIER_LARGE
                                     : -1;
}

/* [CASE-TIER] `tier: default|large`; [CASE-TIER-SELF] `reference: compare|none`, where none
 * belongs to a large op: program case only. */
static qs_status load_tier(loader *L, const qsk_ynode *n, qsk_case *c)
{
    const qsk_ynode *t = qsk_yaml_get(n, "tier"), *r = qsk_yaml_get(n, "reference");
    qs_status st = t ? want_kind(L, t, QSK_Y_SCALAR, "'tier'") : QS_OK;
    if (st == QS_OK && t) {
        int k = qsk_tier_parse(t->text);
        if (k < 0)
            return err_at(L, t, "unknown tier '%s' (default or large)", t->text);
        c->tier = (qsk_tier)k;
    }
    if (st == QS_OK && r)
        st = want_kind(L, r, QSK_Y_SCALAR, "'reference'");
    if (st != QS_OK || !r)
        return st;
    c->ref_pos = (qsk_pos){r->line, r->col};
    if (strcmp(r->text, "none") == 0)
        c->self_only = 1;
    else if (strcmp(r->text, "compare") != 0)
        return err_at(L, r, "'reference' is 'compare' or 'none', not '%s'", r->text);
    if (c->self_only && c->tier != QSK_TIER_LARGE)
        return err_at(L, r,
                      "'reference: none' belongs to a case of tier large: a default-tier case is "
                      "checked against the reference");
    if (c->self_only && strcmp(c->op, "program") != 0)
        return err_at(L, r,
                      "'reference: none' belongs to op: program, whose variants check each "
                      "other; op %s has only the comparison with the reference",
                      c->op);
    return QS_OK;
}

/* A case compared with no reference must check something that can fail: a same_as with a
 * differs_from beside it [RCP-NONVACUOUS]. */
static qs_status check_self_only(loader *L, const qsk_ynode *r, const qsk_case *c)
{
    const qskp_program *p = c->program;
    int same = 0, differs = 0;
    for (size_t i = 0; p && i < p->nvariants; i++)
        for (size_t k = 0; k < p->variants[i].ncmp; k++) {
            same |= p->variants[i].cmp[k].kind == QSKP_SAME_AS;
            differs |= p->variants[i].cmp[k].kind == QSKP_DIFFERS_FROM;
        }
    if (same && differs)
        return QS_OK;
    return err_at(L, r,
                  "a case with 'reference: none' checks only its variants against each other: "
                  "it needs a same_as and a differs_from");
}

/* The keys of op: program (conformance/program.c) [CASE-PROG]; other ops have none. */
static qs_status load_program_keys(loader *L, const qsk_ynode *n, qsk_case *c)
{
    if (strcmp(c->op, "program") == 0)
        return qskp_load(L->ctx, L->path, n, c, &c->program);
    static const char *const keys[] = {"program", "variants", "expect_error"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (qsk_yaml_get(n, keys[i]))
            return err_at(L, n, "'%s' belongs to op: program, not op: %s", keys[i], c->op);
    return QS_OK;
}

static qs_status load_case(loader *L, const qsk_ynode *n, qsk_case *c)
{
    static const char *const keys[] = {
        "id",        "rules",       "op",      "params",   "inputs",       "outputs", "tier",
        "reference", "description", "program", "variants", "expect_error", NULL};
    qs_status st = want_kind(L, n, QSK_Y_MAP, "a case");
    if (st == QS_OK)
        st = only_keys(L, n, keys, "a case");
    if (st != QS_OK)
        return st;
    c->file = L->path;
    c->pos = (qsk_pos){n->line, n->col};
    const qsk_ynode *id, *rules, *op, *inputs, *outputs;
    st = need(L, n, "id", &id);
    if (st == QS_OK)
        st = scalar_copy(L, id, "'id'", c->id, sizeof c->id);
    for (const char *p = c->id; st == QS_OK && *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              *p == '_'))
            st = err_at(L, id, "case id '%s' may hold only a-z, 0-9, '-', '.', '_'", c->id);
    if (st == QS_OK)
        st = need(L, n, "rules", &rules);
    if (st == QS_OK)
        st = load_rules(L, rules, c);
    if (st == QS_OK)
        st = need(L, n, "op", &op);
    if (st == QS_OK)
        st = scalar_copy(L, op, "'op'", c->op, sizeof c->op);
    if (st != QS_OK)
        return st;
    c->op_pos = (qsk_pos){op->line, op->col};
    st = load_tier(L, n, c);
    L->max_elems = c->tier == QSK_TIER_LARGE ? QSK_MAX_LARGE_ELEMS : QSK_MAX_INPUT_ELEMS;
    const qsk_ynode *params = qsk_yaml_get(n, "params");
    if (st == QS_OK && params)
        st = load_params(L, params, c);
    if (st == QS_OK)
        st = need(L, n, "inputs", &inputs);
    if (st == QS_OK)
        st = load_named(L, inputs, "'inputs'", c, 0);
    outputs = qsk_yaml_get(n, "outputs");
    if (st == QS_OK && c->self_only && outputs)
        st = err_at(L, outputs,
                    "a case with 'reference: none' is compared with no reference: it has no "
                    "'outputs'");
    else if (st == QS_OK && !c->self_only)
        st = need(L, n, "outputs", &outputs);
    if (st == QS_OK && outputs)
        st = load_named(L, outputs, "'outputs'", c, 1);
    const qsk_ynode *desc = qsk_yaml_get(n, "description");
    if (st == QS_OK && desc) {
        st = want_kind(L, desc, QSK_Y_SCALAR, "'description'");
        if (st == QS_OK) {
            c->description = malloc(strlen(desc->text) + 1);
            if (!c->description)
                return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
            strcpy(c->description, desc->text);
        }
    }
    if (st == QS_OK)
        st = load_program_keys(L, n, c);
    if (st == QS_OK && c->self_only)
        st = check_self_only(L, qsk_yaml_get(n, "reference"), c);
    return st;
}

static qs_status load_root(loader *L, const qsk_ynode *root, qsk_case_file *f)
{
    static const char *const keys[] = {"qspec", "cases", NULL};
    qs_status st = want_kind(L, root, QSK_Y_MAP, "a case file");
    if (st == QS_OK)
        st = only_keys(L, root, keys, "a case file");
    const qsk_ynode *ver, *cases;
    if (st == QS_OK)
        st = need(L, root, "qspec", &ver);
    if (st == QS_OK && (ver->kind != QSK_Y_SCALAR || strcmp(ver->text, "1") != 0))
        st = err_at(L, ver, "unsupported schema version '%s' (this kit reads qspec: 1)",
                    ver->kind == QSK_Y_SCALAR ? ver->text : "?");
    if (st == QS_OK)
        st = need(L, root, "cases", &cases);
    if (st == QS_OK)
        st = want_kind(L, cases, QSK_Y_SEQ, "'cases'");
    if (st != QS_OK)
        return st;
    f->cases = calloc(cases->n + 1, sizeof *f->cases);
    if (!f->cases)
        return qs_ctx_error(L->ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cases->n; i++) {
        st = load_case(L, cases->items[i], &f->cases[i]);
        f->ncases++;
        if (st != QS_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(f->cases[j].id, f->cases[i].id) == 0)
                return err_at(L, qsk_yaml_get(cases->items[i], "id"), "duplicate case id '%s'",
                              f->cases[i].id);
    }
    return QS_OK;
}

/* Parses f->text (f->path names it in messages) into f's cases. */
static qs_status parse_loaded(qs_ctx *ctx, qsk_rule_known_fn known, void *known_arg,
                              qsk_case_file *f)
{
    qs_status st;
    qsk_ynode *root = NULL;
    const unsigned char *u = (const unsigned char *)f->text;
    if (f->len >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF)))
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:1:1: the file is UTF-16 (it starts with a byte-order mark): a case "
                            "file is UTF-8 text",
                            f->path);
    const char *nul = memchr(f->text, '\0', f->len);
    if (nul) {
        int line = 1, col = 1;
        for (const char *p = f->text; p < nul; p++, col++)
            if (*p == '\n')
                line++, col = 0;
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: a NUL byte: a case file is UTF-8 text (is it UTF-16?)",
                            f->path, line, col);
    }
    st = qsk_yaml_parse(ctx, f->path, f->text, f->len, &root);
    if (st != QS_OK)
        return st;
    loader L = {ctx, f->path, known, known_arg, QSK_MAX_INPUT_ELEMS};
    st = load_root(&L, root, f);
    qsk_yaml_free(root);
    return st;
}

qs_status qsk_case_file_load(qs_ctx *ctx, const char *path, qsk_rule_known_fn known,
                             void *known_arg, qsk_case_file *f)
{
    memset(f, 0, sizeof *f);
    f->path = malloc(strlen(path) + 1);
    if (!f->path)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    strcpy(f->path, path);
    qs_status st = qsk_read_file(ctx, path, &f->text, &f->len);
    if (st != QS_OK)
        return st;
    return parse_loaded(ctx, known, known_arg, f);
}

qs_status qsk_case_file_parse(qs_ctx *ctx, const char *name, const char *text, size_t len,
                              qsk_rule_known_fn known, void *known_arg, qsk_case_file *f)
{
    memset(f, 0, sizeof *f);
    f->path = malloc(strlen(name) + 1);
    f->text = malloc(len + 1);
    if (!f->path || !f->text)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    strcpy(f->path, name);
    memcpy(f->text, text, len);
    f->text[len] = '\0';
    f->len = len;
    return parse_loaded(ctx, known, known_arg, f);
}

static void case_free(qsk_case *c)
{
    for (size_t i = 0; i < c->nrules; i++)
        free(c->rules[i]);
    free(c->rules);
    free(c->params);
    for (size_t i = 0; i < c->ninputs; i++) {
        free(c->inputs[i].values);
        free(c->inputs[i].inject);
    }
    free(c->inputs);
    free(c->outputs);
    free(c->description);
    qskp_free(c->program);
}

void qsk_case_file_free(qsk_case_file *f)
{
    for (size_t i = 0; i < f->ncases; i++)
        case_free(&f->cases[i]);
    free(f->cases);
    free(f->text);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const qsk_param *qsk_case_param(const qsk_case *c, const char *key)
{
    for (size_t i = 0; i < c->nparams; i++)
        if (strcmp(c->params[i].key, key) == 0)
            return &c->params[i];
    return NULL;
}

const qsk_input *qsk_case_input(const qsk_case *c, const char *name)
{
    for (size_t i = 0; i < c->ninputs; i++)
        if (strcmp(c->inputs[i].name, name) == 0)
            return &c->inputs[i];
    return NULL;
}

void qsk_shape_text(int nd, const int64_t *shape, int tuple, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "%s", tuple ? "(" : "[");
    for (int d = 0; d < nd && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "%s", !tuple ? "]" : nd == 1 ? ",)" : ")");
}
