/* checkpoint.c: the checkpoint record and the trace of spec/recompute.md. The record
 * keeps what a replay needs [RCP-RECORD]; the trace has one record per op execution and a
 * JSON-lines form [RCP-TRACE] [RCP-TRACE-JSONL]; the audit checks that every recompute
 * repeats its forward decision [RCP-AUDIT]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "internal.h"

/* ------------------------------------------------------------ the record */

qs_status qsi_ckpt_save_ds(qs_ctx *ctx, qsi_ckpt *ck, const qs_quantizer *q)
{
    if (q->cfg.kind != QS_RECIPE_DELAYED || qsi_ckpt_find_ds(ck, q))
        return QS_OK;
    if (ck->nds == ck->capds) {
        int cap = ck->capds ? 2 * ck->capds : 8;
        qsi_ds_saved *n = realloc(ck->ds, (size_t)cap * sizeof *n);
        if (!n)
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "checkpoint: out of memory");
        ck->ds = n;
        ck->capds = cap;
    }
    qsi_ds_saved *d = &ck->ds[ck->nds];
    d->history = malloc((size_t)q->ds.len * sizeof(float));
    if (!d->history)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "checkpoint: out of memory");
    memcpy(d->history, q->ds.history, (size_t)q->ds.len * sizeof(float));
    d->q = q;
    d->scale = q->ds.scale;
    d->scale_inv = q->ds.scale_inv;
    d->len = q->ds.len;
    ck->nds++;
    return QS_OK;
}

const qsi_ds_saved *qsi_ckpt_find_ds(const qsi_ckpt *ck, const qs_quantizer *q)
{
    for (int i = 0; i < ck->nds; i++)
        if (ck->ds[i].q == q)
            return &ck->ds[i];
    return NULL;
}

qs_status qsi_ckpt_save_amax(qs_ctx *ctx, qsi_ckpt *ck, int n, const float *amax)
{
    if (ck->namax + n > ck->capamax) {
        int cap = ck->capamax ? 2 * ck->capamax : 16;
        while (cap < ck->namax + n)
            cap *= 2;
        float *a = realloc(ck->amax, (size_t)cap * sizeof *a);
        if (!a)
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "checkpoint: out of memory");
        ck->amax = a;
        ck->capamax = cap;
    }
    memcpy(ck->amax + ck->namax, amax, (size_t)n * sizeof *amax);
    ck->namax += n;
    return QS_OK;
}

void qsi_ckpt_free(qsi_ckpt *ck)
{
    if (!ck)
        return;
    free(ck->amax);
    for (int i = 0; i < ck->nds; i++)
        free(ck->ds[i].history);
    free(ck->ds);
    qs_tensor_free(&ck->input);
    free(ck);
}

uint64_t qsi_tensor_digest(const qs_tensor *t)
{
    uint64_t h = 14695981039346656037ull;
    const unsigned char *b = t->data;
    h = (h ^ (uint64_t)t->dtype) * 1099511628211ull;
    for (int d = 0; d < t->ndim; d++)
        h = (h ^ (uint64_t)t->shape[d]) * 1099511628211ull;
    for (size_t i = 0; i < t->nbytes; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ------------------------------------------------------------ the trace */

static const char *const phase_names[QS_PHASE_COUNT] = {"forward", "recompute", "backward"};
static const char *const scales_names[QS_SCALES_COUNT] = {"none", "fresh", "recorded"};

const char *qs_trace_phase_name(qs_trace_phase p)
{
    return (unsigned)p < QS_PHASE_COUNT ? phase_names[p] : NULL;
}

const char *qs_trace_scales_name(qs_trace_scales s)
{
    return (unsigned)s < QS_SCALES_COUNT ? scales_names[s] : NULL;
}

qs_status qs_trace_append(qs_ctx *ctx, qs_trace *t, const qs_trace_record *r)
{
    if (!t || !r)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "trace_append: NULL argument");
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        qs_trace_record *n = realloc(t->rec, cap * sizeof *n);
        if (!n)
            return qs_ctx_error(ctx, QS_ERR_NOMEM, "trace: out of memory");
        t->rec = n;
        t->cap = cap;
    }
    t->rec[t->n] = *r;
    t->rec[t->n].seq = (int64_t)t->n;
    t->n++;
    return QS_OK;
}

void qs_trace_free(qs_trace *t)
{
    if (!t)
        return;
    free(t->rec);
    memset(t, 0, sizeof *t);
}

/* [RCP-TRACE-JSONL]: one object per line, keys in this order, no spaces. */
static int render_record(const qs_trace_record *r, char *buf, size_t cap)
{
    char scales[48] = "[]";
    if (r->nscale == 1)
        snprintf(scales, sizeof scales, "[\"0x%08x\"]", (unsigned)r->scale_bits[0]);
    else if (r->nscale == 2)
        snprintf(scales, sizeof scales, "[\"0x%08x\",\"0x%08x\"]", (unsigned)r->scale_bits[0],
                 (unsigned)r->scale_bits[1]);
    char recipe[32] = "null";
    if (r->has_recipe)
        snprintf(recipe, sizeof recipe, "\"%s\"", qs_recipe_kind_name(r->recipe));
    const char *dt = qs_dtype_name(r->dtype);
    return snprintf(buf, cap,
                    "{\"seq\":%lld,\"phase\":\"%s\",\"op\":\"%s\",\"kind\":\"%s\","
                    "\"precision\":\"%s\",\"recipe\":%s,\"scales\":\"%s\",\"scale_bits\":%s,"
                    "\"first_module\":%s,\"dtype\":\"%s\"}\n",
                    (long long)r->seq, qs_trace_phase_name(r->phase), r->op, r->kind,
                    qs_precision_name(r->precision), recipe, qs_trace_scales_name(r->scales),
                    scales, r->first_module ? "true" : "false", dt ? dt : "invalid");
}

qs_status qs_trace_to_jsonl(qs_ctx *ctx, const qs_trace *t, char **out, size_t *len)
{
    if (!t || !out)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "trace_to_jsonl: NULL argument");
    size_t cap = t->n * 384 + 1, used = 0;
    char *buf = malloc(cap);
    if (!buf)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "trace_to_jsonl: out of memory");
    buf[0] = '\0';
    for (size_t i = 0; i < t->n; i++) {
        int w = render_record(&t->rec[i], buf + used, cap - used);
        if (w < 0 || (size_t)w >= cap - used) {
            free(buf);
            return qs_ctx_error(ctx, QS_ERR_INTERNAL, "trace_to_jsonl: record %zu too long", i);
        }
        used += (size_t)w;
    }
    *out = buf;
    if (len)
        *len = used;
    return QS_OK;
}

/* ------------------------------------------------------------ the audit */

static const qs_trace_record *last_forward(const qs_trace *t, size_t before, const char *op)
{
    for (size_t i = before; i-- > 0;)
        if (t->rec[i].phase == QS_PHASE_FORWARD && strcmp(t->rec[i].op, op) == 0)
            return &t->rec[i];
    return NULL;
}

static qs_status audit_one(qs_ctx *ctx, const qs_trace_record *f, const qs_trace_record *r)
{
    const char *what = NULL;
    if (f->precision != r->precision)
        what = "precision";
    else if (f->has_recipe != r->has_recipe || (f->has_recipe && f->recipe != r->recipe))
        what = "recipe";
    else if (f->nscale != r->nscale ||
             (f->nscale && memcmp(f->scale_bits, r->scale_bits, sizeof f->scale_bits) != 0))
        what = "scale_bits";
    else if (r->nscale && r->scales != QS_SCALES_RECORDED)
        what = "scales (a delayed-scaling recompute must use the recorded scales)";
    if (!what)
        return QS_OK;
    return qs_ctx_error(
        ctx, QS_ERR_STATE,
        "replay audit [RCP-AUDIT]: op '%s' recompute (seq %lld) differs from its "
        "forward (seq %lld) in %s: %s %s vs %s %s",
        r->op, (long long)r->seq, (long long)f->seq, what, qs_precision_name(r->precision),
        r->has_recipe ? qs_recipe_kind_name(r->recipe) : "-", qs_precision_name(f->precision),
        f->has_recipe ? qs_recipe_kind_name(f->recipe) : "-");
}

qs_status qs_trace_audit(qs_ctx *ctx, const qs_trace *t)
{
    if (!t)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "trace_audit: trace is NULL");
    for (size_t i = 0; i < t->n; i++) {
        const qs_trace_record *r = &t->rec[i];
        if (r->phase != QS_PHASE_RECOMPUTE)
            continue;
        const qs_trace_record *f = last_forward(t, i, r->op);
        if (!f)
            return qs_ctx_error(ctx, QS_ERR_STATE,
                                "replay audit [RCP-AUDIT]: op '%s' recompute (seq %lld) has no "
                                "forward execution before it",
                                r->op, (long long)r->seq);
        qs_status s = audit_one(ctx, f, r);
        if (s != QS_OK)
            return s;
    }
    return QS_OK;
}
