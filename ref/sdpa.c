/* sdpa.c: the reference softmax attention of spec/attention.md [ATTN-*].
 * O = softmax(scale * Q K^T + mask) V per (sequence, query head), FP32 softmax in the
 * order of [ATTN-SOFTMAX-ORDER], layouts sbhd/bshd/thd, GQA, and the backward of
 * [ATTN-BWD]. Straight loops; s is the sequence, i a query token, j a key token, h a query
 * head, d a feature. Also the helpers of attn_internal.h shared with ref/gdn.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"

/* ---------------------------------------------------------------- shared helpers */

qs_status qsi_attn_check_dtype(qs_ctx *ctx, const char *fn, qs_dtype dt)
{
    if (dt != QS_FP32 && dt != QS_BF16 && dt != QS_FP16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE, "%s: dtype must be fp32, bf16 or fp16", fn);
    return QS_OK;
}

qs_status qsi_attn_check_values(qs_ctx *ctx, const char *fn, const char *name, const float *x,
                                size_t n, qs_dtype dt)
{
    if (x == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: '%s' is NULL", fn, name);
    if (dt == QS_FP32)
        return QS_OK;
    for (size_t e = 0; e < n; e++) {
        float r = qsi_attn_round(dt, x[e]);
        if (x[e] == x[e] && qs_f32_bits(r) != qs_f32_bits(x[e]))
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "%s: '%s'[%zu] = %a is not a %s value [ATTN-DTYPE]", fn, name, e,
                                (double)x[e], qs_dtype_name(dt));
    }
    return QS_OK;
}

qs_status qsi_attn_check_cu(qs_ctx *ctx, const char *fn, const char *name, const int32_t *cu,
                            int64_t b, int64_t total)
{
    if (cu == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: '%s' is NULL", fn, name);
    if (cu[0] != 0)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: '%s'[0] is %d, not 0", fn, name,
                            (int)cu[0]);
    for (int64_t s = 0; s < b; s++) {
        if (cu[s + 1] < cu[s])
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: '%s' decreases at entry %lld", fn,
                                name, (long long)(s + 1));
    }
    if (total >= 0 && cu[b] != total)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: '%s'[%lld] is %d, expected %lld", fn,
                            name, (long long)b, (int)cu[b], (long long)total);
    return QS_OK;
}

qs_status qsi_attn_numel(qs_ctx *ctx, const char *fn, const char *name, int64_t a, int64_t b,
                         int64_t c, int64_t d, size_t *out)
{
    const int64_t lim = (int64_t)1 << 40;
    int64_t f[4] = {a, b, c, d};
    int64_t n = 1;
    for (int e = 0; e < 4; e++) {
        if (f[e] < 0)
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: '%s' has a negative extent", fn, name);
        if (f[e] != 0 && n > lim / f[e])
            return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: '%s' is too large", fn, name);
        n *= f[e];
    }
    *out = (size_t)n;
    return QS_OK;
}

/* ---------------------------------------------------------------- geometry [ATTN-SHAPES] */

float qs_sdpa_scale(const qs_sdpa_params *p)
{
    return p->scale != 0.0f ? p->scale : qs_rsqrtf((float)p->d); /* [ATTN-SCALE] */
}

/* Where sequence s starts in the packed thd arrays [ATTN-LAYOUT-THD-PADDED]. */
static int64_t qsi_sdpa_thd_start(const qs_sdpa_params *p, int is_kv, int64_t s)
{
    const int32_t *pad = is_kv ? p->cu_seqlens_kv_padded : p->cu_seqlens_q_padded;
    const int32_t *cu = is_kv ? p->cu_seqlens_kv : p->cu_seqlens_q;
    return pad != NULL ? pad[s] : cu[s];
}

/* The number of query (is_kv 0) or key (is_kv 1) tokens of sequence s. */
static int64_t qsi_sdpa_len(const qs_sdpa_params *p, int is_kv, int64_t s)
{
    if (p->layout == QS_ATTN_THD) {
        const int32_t *cu = is_kv ? p->cu_seqlens_kv : p->cu_seqlens_q;
        return (int64_t)cu[s + 1] - cu[s];
    }
    return is_kv ? p->sk : p->sq;
}

/* The token index of token i of sequence s in the [tokens, heads, dim] view of the layout:
 * sbhd i*b + s, bshd s*S + i, thd start(s) + i [ATTN-LAYOUT-SBHD] [ATTN-LAYOUT-BSHD]. */
static int64_t qsi_sdpa_tok(const qs_sdpa_params *p, int is_kv, int64_t s, int64_t i)
{
    if (p->layout == QS_ATTN_SBHD)
        return i * p->b + s;
    if (p->layout == QS_ATTN_BSHD)
        return s * (is_kv ? p->sk : p->sq) + i;
    return qsi_sdpa_thd_start(p, is_kv, s) + i;
}

/* Packed token counts of q and k: b*sq and b*sk, or sq and sk for thd. */
static int64_t qsi_sdpa_tokens(const qs_sdpa_params *p, int is_kv)
{
    int64_t n = is_kv ? p->sk : p->sq;
    return p->layout == QS_ATTN_THD ? n : n * p->b;
}

static qs_status qsi_sdpa_check_thd(qs_ctx *ctx, const char *fn, const qs_sdpa_params *p, int is_kv)
{
    const char *cn = is_kv ? "cu_seqlens_kv" : "cu_seqlens_q";
    const char *pn = is_kv ? "cu_seqlens_kv_padded" : "cu_seqlens_q_padded";
    const int32_t *cu = is_kv ? p->cu_seqlens_kv : p->cu_seqlens_q;
    const int32_t *pad = is_kv ? p->cu_seqlens_kv_padded : p->cu_seqlens_q_padded;
    int64_t total = is_kv ? p->sk : p->sq;
    qs_status st = qsi_attn_check_cu(ctx, fn, cn, cu, p->b, pad != NULL ? -1 : total);
    if (st != QS_OK || pad == NULL)
        return st;
    st = qsi_attn_check_cu(ctx, fn, pn, pad, p->b, total);
    if (st != QS_OK)
        return st;
    for (int64_t s = 0; s < p->b; s++) {
        if ((int64_t)pad[s] + (cu[s + 1] - cu[s]) > pad[s + 1])
            return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                                "%s: sequence %lld does not fit its '%s' slot", fn, (long long)s,
                                pn);
    }
    return QS_OK;
}

static qs_status qsi_sdpa_check(qs_ctx *ctx, const char *fn, const qs_sdpa_params *p)
{
    if (p == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'p' is NULL", fn);
    if ((unsigned)p->layout >= QS_ATTN_LAYOUT_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: bad layout %d", fn, (int)p->layout);
    if ((unsigned)p->mask >= QS_ATTN_MASK_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: bad mask %d", fn, (int)p->mask);
    if (p->b < 0 || p->sq < 0 || p->sk < 0 || p->h < 1 || p->hkv < 1 || p->d < 1 || p->dv < 1)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "%s: need b, sq, sk >= 0 and h, hkv, d, dv >= 1 [ATTN-SHAPES]", fn);
    if (p->h % p->hkv != 0)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: h = %lld is not a multiple of hkv = %lld", fn,
                            (long long)p->h, (long long)p->hkv);
    if (!(p->scale == p->scale) || p->scale < 0.0f || p->scale == INFINITY)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: scale must be finite and >= 0", fn);
    qs_status st = qsi_attn_check_dtype(ctx, fn, p->dtype);
    if (st == QS_OK && p->layout == QS_ATTN_THD)
        st = qsi_sdpa_check_thd(ctx, fn, p, 0);
    if (st == QS_OK && p->layout == QS_ATTN_THD)
        st = qsi_sdpa_check_thd(ctx, fn, p, 1);
    size_t n;
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "q", qsi_sdpa_tokens(p, 0), p->h, p->d + p->dv, 1, &n);
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "k", qsi_sdpa_tokens(p, 1), p->hkv, p->d + p->dv, 1, &n);
    return st;
}

/* Checks the dtype values of the inputs that are in dtype. */
static qs_status qsi_sdpa_check_inputs(qs_ctx *ctx, const char *fn, const qs_sdpa_params *p,
                                       const float *q, const float *k, const float *v)
{
    size_t nq = (size_t)(qsi_sdpa_tokens(p, 0) * p->h * p->d);
    size_t nk = (size_t)(qsi_sdpa_tokens(p, 1) * p->hkv * p->d);
    size_t nv = (size_t)(qsi_sdpa_tokens(p, 1) * p->hkv * p->dv);
    qs_status st = qsi_attn_check_values(ctx, fn, "q", q, nq, p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "k", k, nk, p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "v", v, nv, p->dtype);
    return st;
}

/* ---------------------------------------------------------------- the softmax row */

/* The keys query i of a sequence with lk keys may attend to: j < nkeys
 * [ATTN-MASK-NONE] [ATTN-MASK-CAUSAL] (top-left: j <= i). */
static int64_t qsi_sdpa_nkeys(const qs_sdpa_params *p, int64_t i, int64_t lk)
{
    if (p->mask == QS_ATTN_MASK_CAUSAL)
        return i + 1 < lk ? i + 1 : lk;
    return lk;
}

/* FP32 dot product in increasing d [ATTN-SCORE]. */
static float qsi_sdpa_dot(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++)
        acc = acc + a[d] * b[d];
    return acc;
}

/* The probabilities prob[0..nkeys) of query row qrow over the keys of sequence s, kv head
 * hk, and the row's log-sum-exp [ATTN-SCORE] [ATTN-SOFTMAX-ORDER] [ATTN-LSE]. */
static float qsi_sdpa_probs(const qs_sdpa_params *p, const float *qrow, const float *k, int64_t s,
                            int64_t hk, int64_t nkeys, float scale, float *prob)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < nkeys; j++) {
        const float *krow = k + (qsi_sdpa_tok(p, 1, s, j) * p->hkv + hk) * p->d;
        prob[j] = scale * qsi_sdpa_dot(qrow, krow, p->d);
        if (prob[j] > m)
            m = prob[j];
    }
    float l = 0.0f;
    for (int64_t j = 0; j < nkeys; j++) {
        prob[j] = qs_expf(prob[j] - m);
        l = l + prob[j];
    }
    for (int64_t j = 0; j < nkeys; j++)
        prob[j] = prob[j] / l;
    return m + qs_logf(l);
}

/* ---------------------------------------------------------------- forward [ATTN-FWD] */

static void qsi_sdpa_fwd_row(const qs_sdpa_params *p, const float *q, const float *k,
                             const float *v, float *o, float *lse, int64_t s, int64_t h, int64_t i,
                             float *prob)
{
    int64_t hk = h / (p->h / p->hkv); /* [ATTN-GQA] */
    int64_t tq = qsi_sdpa_tok(p, 0, s, i);
    int64_t nkeys = qsi_sdpa_nkeys(p, i, qsi_sdpa_len(p, 1, s));
    float *orow = o + (tq * p->h + h) * p->dv;
    if (nkeys == 0)
        return; /* an empty row: o stays 0, lse -inf [ATTN-EMPTY-ROW] */
    float m_lse =
        qsi_sdpa_probs(p, q + (tq * p->h + h) * p->d, k, s, hk, nkeys, qs_sdpa_scale(p), prob);
    for (int64_t d = 0; d < p->dv; d++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < nkeys; j++)
            acc = acc + prob[j] * v[(qsi_sdpa_tok(p, 1, s, j) * p->hkv + hk) * p->dv + d];
        orow[d] = qsi_attn_round(p->dtype, acc); /* [ATTN-DTYPE] */
    }
    if (lse != NULL)
        lse[tq * p->h + h] = m_lse;
}

qs_status qs_sdpa_fwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                      const float *v, float *o, float *lse)
{
    const char *fn = "qs_sdpa_fwd";
    qs_status st = qsi_sdpa_check(ctx, fn, p);
    if (st == QS_OK)
        st = qsi_sdpa_check_inputs(ctx, fn, p, q, k, v);
    if (st != QS_OK)
        return st;
    if (o == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'o' is NULL", fn);
    int64_t nt = qsi_sdpa_tokens(p, 0);
    memset(o, 0, (size_t)(nt * p->h * p->dv) * sizeof(float));
    for (int64_t e = 0; lse != NULL && e < nt * p->h; e++)
        lse[e] = -INFINITY; /* padding and empty rows [ATTN-EMPTY-ROW] */
    float *prob = malloc((size_t)(p->sk + 1) * sizeof(float));
    if (prob == NULL)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t s = 0; s < p->b; s++)
        for (int64_t h = 0; h < p->h; h++)
            for (int64_t i = 0; i < qsi_sdpa_len(p, 0, s); i++)
                qsi_sdpa_fwd_row(p, q, k, v, o, lse, s, h, i, prob);
    free(prob);
    return QS_OK;
}

/* ---------------------------------------------------------------- backward [ATTN-BWD] */

/* Scratch of one (sequence, kv head): probabilities, dS of a row, and the FP32 dK, dV
 * accumulators of the sequence's keys. */
typedef struct qsi_sdpa_bwd_work {
    float *prob, *ds, *dk_acc, *dv_acc;
} qsi_sdpa_bwd_work;

/* One query row's contribution: dq of the row, and dS, P added into the dK, dV sums. */
static void qsi_sdpa_bwd_row(const qs_sdpa_params *p, const float *q, const float *k,
                             const float *v, const float *o, const float *dout, float *dq,
                             int64_t s, int64_t h, int64_t i, qsi_sdpa_bwd_work *w)
{
    int64_t hk = h / (p->h / p->hkv);
    int64_t tq = qsi_sdpa_tok(p, 0, s, i);
    int64_t nkeys = qsi_sdpa_nkeys(p, i, qsi_sdpa_len(p, 1, s));
    float scale = qs_sdpa_scale(p);
    const float *qrow = q + (tq * p->h + h) * p->d;
    const float *dorow = dout + (tq * p->h + h) * p->dv;
    if (nkeys == 0)
        return;
    qsi_sdpa_probs(p, qrow, k, s, hk, nkeys, scale, w->prob);
    float di = qsi_sdpa_dot(dorow, o + (tq * p->h + h) * p->dv, p->dv); /* rowsum(dO*O) */
    for (int64_t j = 0; j < nkeys; j++) {
        const float *vrow = v + (qsi_sdpa_tok(p, 1, s, j) * p->hkv + hk) * p->dv;
        float dp = qsi_sdpa_dot(dorow, vrow, p->dv);
        w->ds[j] = w->prob[j] * (dp - di);
    }
    for (int64_t d = 0; d < p->d; d++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < nkeys; j++)
            acc = acc + w->ds[j] * k[(qsi_sdpa_tok(p, 1, s, j) * p->hkv + hk) * p->d + d];
        dq[(tq * p->h + h) * p->d + d] = qsi_attn_round(p->dtype, scale * acc);
    }
    for (int64_t j = 0; j < nkeys; j++) {
        for (int64_t d = 0; d < p->d; d++)
            w->dk_acc[j * p->d + d] = w->dk_acc[j * p->d + d] + w->ds[j] * qrow[d];
        for (int64_t d = 0; d < p->dv; d++)
            w->dv_acc[j * p->dv + d] = w->dv_acc[j * p->dv + d] + w->prob[j] * dorow[d];
    }
}

/* dK, dV of sequence s, kv head hk: the sums over the group's query heads in increasing h,
 * and within a head over i in increasing order [ATTN-BWD-ORDER]. */
static void qsi_sdpa_bwd_kvhead(const qs_sdpa_params *p, const float *q, const float *k,
                                const float *v, const float *o, const float *dout, float *dq,
                                float *dk, float *dv, int64_t s, int64_t hk, qsi_sdpa_bwd_work *w)
{
    int64_t group = p->h / p->hkv, lk = qsi_sdpa_len(p, 1, s);
    float scale = qs_sdpa_scale(p);
    memset(w->dk_acc, 0, (size_t)(lk * p->d) * sizeof(float));
    memset(w->dv_acc, 0, (size_t)(lk * p->dv) * sizeof(float));
    for (int64_t h = hk * group; h < (hk + 1) * group; h++)
        for (int64_t i = 0; i < qsi_sdpa_len(p, 0, s); i++)
            qsi_sdpa_bwd_row(p, q, k, v, o, dout, dq, s, h, i, w);
    for (int64_t j = 0; j < lk; j++) {
        int64_t tk = qsi_sdpa_tok(p, 1, s, j);
        for (int64_t d = 0; d < p->d; d++)
            dk[(tk * p->hkv + hk) * p->d + d] =
                qsi_attn_round(p->dtype, scale * w->dk_acc[j * p->d + d]);
        for (int64_t d = 0; d < p->dv; d++)
            dv[(tk * p->hkv + hk) * p->dv + d] = qsi_attn_round(p->dtype, w->dv_acc[j * p->dv + d]);
    }
}

qs_status qs_sdpa_bwd(qs_ctx *ctx, const qs_sdpa_params *p, const float *q, const float *k,
                      const float *v, const float *o, const float *dout, float *dq, float *dk,
                      float *dv)
{
    const char *fn = "qs_sdpa_bwd";
    qs_status st = qsi_sdpa_check(ctx, fn, p);
    if (st == QS_OK)
        st = qsi_sdpa_check_inputs(ctx, fn, p, q, k, v);
    size_t no = (st == QS_OK) ? (size_t)(qsi_sdpa_tokens(p, 0) * p->h * p->dv) : 0;
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "o", o, no, p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "dout", dout, no, p->dtype);
    if (st != QS_OK)
        return st;
    if (dq == NULL || dk == NULL || dv == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'dq', 'dk' or 'dv' is NULL", fn);
    memset(dq, 0, (size_t)(qsi_sdpa_tokens(p, 0) * p->h * p->d) * sizeof(float));
    memset(dk, 0, (size_t)(qsi_sdpa_tokens(p, 1) * p->hkv * p->d) * sizeof(float));
    memset(dv, 0, (size_t)(qsi_sdpa_tokens(p, 1) * p->hkv * p->dv) * sizeof(float));
    size_t nk = (size_t)p->sk + 1;
    qsi_sdpa_bwd_work w = {malloc(nk * sizeof(float)), malloc(nk * sizeof(float)),
                           malloc(nk * (size_t)p->d * sizeof(float)),
                           malloc(nk * (size_t)p->dv * sizeof(float))};
    if (w.prob == NULL || w.ds == NULL || w.dk_acc == NULL || w.dv_acc == NULL)
        st = qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t s = 0; st == QS_OK && s < p->b; s++)
        for (int64_t hk = 0; hk < p->hkv; hk++)
            qsi_sdpa_bwd_kvhead(p, q, k, v, o, dout, dq, dk, dv, s, hk, &w);
    free(w.prob);
    free(w.ds);
    free(w.dk_acc);
    free(w.dv_acc);
    return st;
}
