/* opcheck.c: the shared parameter, input and output checks of the ops. */
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"

static int in_list(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

qs_status qsk_check_param_keys(qs_ctx *ctx, const qsk_case *c, const char *const *allowed)
{
    for (size_t i = 0; i < c->nparams; i++)
        if (!in_list(c->params[i].key, allowed))
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op '%s' has no parameter '%s'",
                                c->file, c->params[i].pos.line, c->params[i].pos.col, c->op,
                                c->params[i].key);
    return QS_OK;
}

int qsk_param_choice(qs_ctx *ctx, const qsk_case *c, const char *key, const char *const *names,
                     int def)
{
    const qsk_param *p = qsk_case_param(c, key);
    if (!p)
        return def;
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], p->value) == 0)
            return i;
    char list[256] = "";
    for (int i = 0; names[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: '%s' is not a valid %s (one of: %s)", c->file,
                 p->pos.line, p->pos.col, p->value, key, list);
    return -1;
}

qs_status qsk_param_u64(qs_ctx *ctx, const qsk_case *c, const char *key, uint64_t def, uint64_t *v)
{
    const qsk_param *p = qsk_case_param(c, key);
    *v = def;
    if (!p)
        return QS_OK;
    int r = qsk_parse_u64(p->value, v);
    if (r == 2)
        return qs_ctx_error(ctx, QS_ERR_FORMAT,
                            "%s:%d:%d: %s '%s' is out of range (at most 2^64 - 1)", c->file,
                            p->pos.line, p->pos.col, key, p->value);
    if (r != 0)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: %s '%s' is not a non-negative integer",
                            c->file, p->pos.line, p->pos.col, key, p->value);
    return QS_OK;
}

qs_status qsk_check_inputs(qs_ctx *ctx, const qsk_case *c, const char *const *names,
                           const qs_dtype *dtypes, int min_ndim, int max_ndim)
{
    for (size_t i = 0; i < c->ninputs; i++) {
        const qsk_input *in = &c->inputs[i];
        if (!in_list(in->name, names))
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op '%s' takes no input '%s'",
                                c->file, in->pos.line, in->pos.col, c->op, in->name);
        int ok = 0;
        for (const qs_dtype *d = dtypes; *d != QS_DTYPE_INVALID; d++)
            if (*d == in->dtype)
                ok = 1;
        if (!ok)
            return qs_ctx_error(
                ctx, QS_ERR_FORMAT, "%s:%d:%d: op '%s' cannot take input '%s' as %s", c->file,
                in->pos.line, in->pos.col, c->op, in->name, qs_dtype_name(in->dtype));
        if (in->ndim < min_ndim || in->ndim > max_ndim)
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s:%d:%d: impossible shape: op '%s' needs input '%s' with %d to "
                                "%d dimensions, not %d",
                                c->file, in->pos.line, in->pos.col, c->op, in->name, min_ndim,
                                max_ndim, in->ndim);
    }
    for (const char *const *n = names; *n; n++)
        if (!qsk_case_input(c, *n))
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op '%s' needs an input '%s'",
                                c->file, c->pos.line, c->pos.col, c->op, *n);
    return QS_OK;
}

qs_status qsk_check_outputs(qs_ctx *ctx, const qsk_case *c, const char *const *produced)
{
    for (size_t i = 0; i < c->noutputs; i++)
        if (!in_list(c->outputs[i].name, produced))
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op '%s' produces no output '%s'",
                                c->file, c->outputs[i].pos.line, c->outputs[i].pos.col, c->op,
                                c->outputs[i].name);
    return QS_OK;
}
