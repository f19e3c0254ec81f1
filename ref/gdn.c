/* gdn.c: the reference Gated DeltaNet of spec/attention.md [GDN-*].
 * The normative token recurrence with FP32 state h[dk][dv] per (sequence, value head), its
 * backward (reverse time over states recomputed from checkpoints), and the chunked WY
 * form. n is a sequence, i a token in it, hv a value head, kk and vv state indices. The
 * layer pieces around the op (gate, beta, conv, gated RMSNorm) are in ref/gdn_layer.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"
#include "qspec/attention.h"
#include "qspec/mathf.h"

/* The backward keeps the state at every QSI_GDN_SEG-th token and recomputes inside. */
#define QSI_GDN_SEG 64

/* ---------------------------------------------------------------- geometry [GDN-SHAPES] */

static int64_t qsi_gdn_tokens(const qs_gdn_params *p)
{
    return p->cu_seqlens != NULL ? p->t : p->b * p->t;
}

/* First token of sequence n in the [tokens, heads, dim] view [GDN-VARLEN]. */
static int64_t qsi_gdn_start(const qs_gdn_params *p, int64_t n)
{
    return p->cu_seqlens != NULL ? p->cu_seqlens[n] : n * p->t;
}

static int64_t qsi_gdn_len(const qs_gdn_params *p, int64_t n)
{
    return p->cu_seqlens != NULL ? (int64_t)p->cu_seqlens[n + 1] - p->cu_seqlens[n] : p->t;
}

static float qsi_gdn_scale(const qs_gdn_params *p)
{
    return p->scale != 0.0f ? p->scale : qs_rsqrtf((float)p->dk); /* [GDN-SCALE] */
}

static qs_status qsi_gdn_check(qs_ctx *ctx, const char *fn, const qs_gdn_params *p)
{
    if (p == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'p' is NULL", fn);
    if (p->b < 0 || p->t < 0 || p->h < 1 || p->hv < 1 || p->dk < 1 || p->dv < 1)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "%s: need b, t >= 0 and h, hv, dk, dv >= 1 [GDN-SHAPES]", fn);
    if (p->hv % p->h != 0)
        return qs_ctx_error(ctx, QS_ERR_SHAPE, "%s: hv = %lld is not a multiple of h = %lld", fn,
                            (long long)p->hv, (long long)p->h);
    if (!(p->scale == p->scale) || p->scale < 0.0f || p->scale == INFINITY)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: scale must be finite and >= 0", fn);
    qs_status st = qsi_attn_check_dtype(ctx, fn, p->dtype);
    if (st == QS_OK && p->cu_seqlens != NULL)
        st = qsi_attn_check_cu(ctx, fn, "cu_seqlens", p->cu_seqlens, p->b, p->t);
    size_t n;
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "q", qsi_gdn_tokens(p), p->hv, p->dk + p->dv, 1, &n);
    if (st == QS_OK)
        st = qsi_attn_numel(ctx, fn, "h0", p->b, p->hv, p->dk, p->dv, &n);
    return st;
}

static qs_status qsi_gdn_check_inputs(qs_ctx *ctx, const char *fn, const qs_gdn_params *p,
                                      const float *q, const float *k, const float *v,
                                      const float *g, const float *beta)
{
    size_t nt = (size_t)qsi_gdn_tokens(p);
    qs_status st = qsi_attn_check_values(ctx, fn, "q", q, nt * (size_t)(p->h * p->dk), p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "k", k, nt * (size_t)(p->h * p->dk), p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "v", v, nt * (size_t)(p->hv * p->dv), p->dtype);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "g", g, nt * (size_t)p->hv, QS_FP32);
    if (st == QS_OK)
        st = qsi_attn_check_values(ctx, fn, "beta", beta, nt * (size_t)p->hv, QS_FP32);
    return st;
}

/* ---------------------------------------------------------------- l2norm [GDN-L2NORM] */

/* r = sqrt(sum x^2 + 1e-6) of one head vector, FP32 in increasing index. */
static float qsi_gdn_l2_r(const float *x, int64_t n)
{
    float ss = 0.0f;
    for (int64_t d = 0; d < n; d++)
        ss = ss + x[d] * x[d];
    return qs_sqrtf(ss + 1e-6f);
}

/* out = x (or x / r, rounded to dtype, with use_qk_l2norm) for every token and q/k head. */
static void qsi_gdn_prep_qk(const qs_gdn_params *p, const float *x, float *out)
{
    int64_t rows = qsi_gdn_tokens(p) * p->h;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * p->dk;
        float nrm = p->use_qk_l2norm ? qsi_gdn_l2_r(xr, p->dk) : 1.0f;
        for (int64_t d = 0; d < p->dk; d++)
            out[r * p->dk + d] = p->use_qk_l2norm ? qsi_attn_round(p->dtype, xr[d] / nrm) : xr[d];
    }
}

/* dx of y = x / r for one head vector: (dy - y (y . dy)) / r, y = fl32(x / r) unrounded. */
static void qsi_gdn_l2_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
    float nrm = qsi_gdn_l2_r(x, n), c = 0.0f;
    for (int64_t d = 0; d < n; d++)
        c = c + (x[d] / nrm) * dy[d];
    for (int64_t d = 0; d < n; d++)
        dx[d] = (dy[d] - (x[d] / nrm) * c) / nrm;
}

/* ---------------------------------------------------------------- one token [GDN-RECURRENCE] */

/* Decay and delta update of state S[dk][dv] by token (kt, vt, gt, bt); writes u (dv). */
static void qsi_gdn_step(int64_t dk, int64_t dv, float *S, const float *kt, const float *vt,
                         float gt, float bt, float *u)
{
    float a = qs_expf(gt);
    for (int64_t kk = 0; kk < dk * dv; kk++)
        S[kk] = S[kk] * a;
    for (int64_t vv = 0; vv < dv; vv++) {
        float pred = 0.0f;
        for (int64_t kk = 0; kk < dk; kk++)
            pred = pred + S[kk * dv + vv] * kt[kk];
        u[vv] = bt * (vt[vv] - pred);
    }
    for (int64_t kk = 0; kk < dk; kk++)
        for (int64_t vv = 0; vv < dv; vv++)
            S[kk * dv + vv] = S[kk * dv + vv] + kt[kk] * u[vv];
}

/* The read o = S^T (scale q), FP32, sum over kk increasing. */
static void qsi_gdn_read(int64_t dk, int64_t dv, const float *S, const float *qt, float scale,
                         float *o)
{
    for (int64_t vv = 0; vv < dv; vv++) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < dk; kk++)
            acc = acc + S[kk * dv + vv] * (scale * qt[kk]);
        o[vv] = acc;
    }
}

/* Inputs of one (sequence, value head) after l2norm: pointers and strides. */
typedef struct qsi_gdn_seq {
    const qs_gdn_params *p;
    const float *qn, *kn, *v, *g, *beta;
    int64_t n, hv, hq, start, len;
} qsi_gdn_seq;

static qsi_gdn_seq qsi_gdn_seq_at(const qs_gdn_params *p, const float *qn, const float *kn,
                                  const float *v, const float *g, const float *beta, int64_t n,
                                  int64_t hv)
{
    qsi_gdn_seq s = {p,
                     qn,
                     kn,
                     v,
                     g,
                     beta,
                     n,
                     hv,
                     hv / (p->hv / p->h),
                     qsi_gdn_start(p, n),
                     qsi_gdn_len(p, n)}; /* [GDN-GVA] */
    return s;
}

static const float *qsi_gdn_q(const qsi_gdn_seq *s, int64_t i)
{
    return s->qn + ((s->start + i) * s->p->h + s->hq) * s->p->dk;
}
static const float *qsi_gdn_k(const qsi_gdn_seq *s, int64_t i)
{
    return s->kn + ((s->start + i) * s->p->h + s->hq) * s->p->dk;
}
static const float *qsi_gdn_v(const qsi_gdn_seq *s, int64_t i)
{
    return s->v + ((s->start + i) * s->p->hv + s->hv) * s->p->dv;
}
static float qsi_gdn_gate(const qsi_gdn_seq *s, int64_t i)
{
    return s->g[(s->start + i) * s->p->hv + s->hv];
}
static float qsi_gdn_beta(const qsi_gdn_seq *s, int64_t i)
{
    return s->beta[(s->start + i) * s->p->hv + s->hv];
}

/* Loads h0 of (n, hv) into S [GDN-STATE-FP32] (zeros when h0 is NULL). */
static void qsi_gdn_load(const qs_gdn_params *p, const float *h0, int64_t n, int64_t hv, float *S)
{
    size_t ns = (size_t)(p->dk * p->dv);
    if (h0 == NULL)
        memset(S, 0, ns * sizeof(float));
    else
        memcpy(S, h0 + (size_t)(n * p->hv + hv) * ns, ns * sizeof(float));
}

/* Allocates the normalized q and k of every token; NULL on failure. */
static float *qsi_gdn_prep(qs_ctx *ctx, const char *fn, const qs_gdn_params *p, const float *q,
                           const float *k, float **kn)
{
    size_t nqk = (size_t)(qsi_gdn_tokens(p) * p->h * p->dk) + 1;
    float *qn = malloc(2 * nqk * sizeof(float));
    if (qn == NULL) {
        qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
        return NULL;
    }
    *kn = qn + nqk;
    qsi_gdn_prep_qk(p, q, qn);
    qsi_gdn_prep_qk(p, k, *kn);
    return qn;
}

/* ---------------------------------------------------------------- forward [GDN-RECURRENCE] */

static void qsi_gdn_fwd_seq(const qsi_gdn_seq *s, const float *h0, float *o, float *ht, float *S,
                            float *u, float *orow)
{
    const qs_gdn_params *p = s->p;
    float scale = qsi_gdn_scale(p);
    qsi_gdn_load(p, h0, s->n, s->hv, S);
    for (int64_t i = 0; i < s->len; i++) {
        qsi_gdn_step(p->dk, p->dv, S, qsi_gdn_k(s, i), qsi_gdn_v(s, i), qsi_gdn_gate(s, i),
                     qsi_gdn_beta(s, i), u);
        qsi_gdn_read(p->dk, p->dv, S, qsi_gdn_q(s, i), scale, orow);
        float *out = o + ((s->start + i) * p->hv + s->hv) * p->dv;
        for (int64_t vv = 0; vv < p->dv; vv++)
            out[vv] = qsi_attn_round(p->dtype, orow[vv]); /* [GDN-DTYPE] */
    }
    if (ht != NULL)
        memcpy(ht + (size_t)(s->n * p->hv + s->hv) * (size_t)(p->dk * p->dv), S,
               (size_t)(p->dk * p->dv) * sizeof(float));
}

qs_status qs_gdn_fwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0, float *o,
                     float *ht)
{
    const char *fn = "qs_gdn_fwd";
    qs_status st = qsi_gdn_check(ctx, fn, p);
    if (st == QS_OK)
        st = qsi_gdn_check_inputs(ctx, fn, p, q, k, v, g, beta);
    if (st != QS_OK)
        return st;
    if (o == NULL)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'o' is NULL", fn);
    float *kn = NULL, *qn = qsi_gdn_prep(ctx, fn, p, q, k, &kn);
    size_t ns = (size_t)(p->dk * p->dv);
    float *S = malloc((ns + 2 * (size_t)p->dv) * sizeof(float));
    if (qn == NULL || S == NULL) {
        free(qn);
        free(S);
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int64_t n = 0; n < p->b; n++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            qsi_gdn_seq s = qsi_gdn_seq_at(p, qn, kn, v, g, beta, n, hv);
            qsi_gdn_fwd_seq(&s, h0, o, ht, S, S + ns, S + ns + p->dv);
        }
    free(qn);
    free(S);
    return QS_OK;
}

/* ---------------------------------------------------------------- backward [GDN-BWD] */

/* Scratch of one (sequence, value head) in the backward. */
typedef struct qsi_gdn_bwork {
    float *ckpt;          /* state before token c*SEG, for each segment c */
    float *seg;           /* state before each token of the current segment */
    float *hd, *ht, *dH;  /* h' = e^g h_{i-1}, h_i, and dL/dh_i (all dk x dv) */
    float *u, *r, *du;    /* u, v - pred, du (dv) */
    float *dq_hv, *dk_hv; /* FP32 dq, dk per value head [tokens, hv, dk] */
    float *qs;            /* scale*q (dk) */
} qsi_gdn_bwork;

/* Recomputes the states before each token of segment c from its checkpoint. */
static void qsi_gdn_bwd_segment(const qsi_gdn_seq *s, int64_t c, qsi_gdn_bwork *w)
{
    const qs_gdn_params *p = s->p;
    size_t ns = (size_t)(p->dk * p->dv);
    int64_t i0 = c * QSI_GDN_SEG, i1 = i0 + QSI_GDN_SEG < s->len ? i0 + QSI_GDN_SEG : s->len;
    memcpy(w->seg, w->ckpt + (size_t)c * ns, ns * sizeof(float));
    for (int64_t i = i0; i + 1 < i1; i++) {
        float *next = w->seg + (size_t)(i - i0 + 1) * ns;
        memcpy(next, w->seg + (size_t)(i - i0) * ns, ns * sizeof(float));
        qsi_gdn_step(p->dk, p->dv, next, qsi_gdn_k(s, i), qsi_gdn_v(s, i), qsi_gdn_gate(s, i),
                     qsi_gdn_beta(s, i), w->u);
    }
}

/* Token i's forward again from the state before it (prev): h', v - pred, u and h_i. */
static void qsi_gdn_bwd_refwd(const qsi_gdn_seq *s, int64_t i, const float *prev, qsi_gdn_bwork *w)
{
    const qs_gdn_params *p = s->p;
    const float *kt = qsi_gdn_k(s, i), *vt = qsi_gdn_v(s, i);
    float a = qs_expf(qsi_gdn_gate(s, i)), bt = qsi_gdn_beta(s, i);
    for (int64_t e = 0; e < p->dk * p->dv; e++)
        w->hd[e] = prev[e] * a;
    for (int64_t vv = 0; vv < p->dv; vv++) {
        float pred = 0.0f;
        for (int64_t kk = 0; kk < p->dk; kk++)
            pred = pred + w->hd[kk * p->dv + vv] * kt[kk];
        w->r[vv] = vt[vv] - pred;
        w->u[vv] = bt * w->r[vv];
    }
    for (int64_t kk = 0; kk < p->dk; kk++)
        for (int64_t vv = 0; vv < p->dv; vv++)
            w->ht[kk * p->dv + vv] = w->hd[kk * p->dv + vv] + kt[kk] * w->u[vv];
}

/* The read o = h_i^T (scale q) backward: dq_hv of token i, and dH += (scale q) do^T. */
static void qsi_gdn_bwd_read(const qsi_gdn_seq *s, int64_t i, const float *dout, qsi_gdn_bwork *w)
{
    const qs_gdn_params *p = s->p;
    float scale = qsi_gdn_scale(p);
    int64_t tok = s->start + i;
    const float *qt = qsi_gdn_q(s, i), *dot = dout + (tok * p->hv + s->hv) * p->dv;
    for (int64_t kk = 0; kk < p->dk; kk++) {
        float acc = 0.0f;
        for (int64_t vv = 0; vv < p->dv; vv++)
            acc = acc + w->ht[kk * p->dv + vv] * dot[vv];
        w->dq_hv[(tok * p->hv + s->hv) * p->dk + kk] = scale * acc;
        w->qs[kk] = scale * qt[kk];
    }
    for (int64_t kk = 0; kk < p->dk; kk++)
        for (int64_t vv = 0; vv < p->dv; vv++)
            w->dH[kk * p->dv + vv] = w->dH[kk * p->dv + vv] + w->qs[kk] * dot[vv];
}

/* The update h_i = h' + k u^T and u = beta (v - h'^T k) backward; then the decay. */
static void qsi_gdn_bwd_update(const qsi_gdn_seq *s, int64_t i, float *dv, float *dg, float *dbeta,
                               qsi_gdn_bwork *w)
{
    const qs_gdn_params *p = s->p;
    int64_t tok = s->start + i, dk = p->dk, dvn = p->dv;
    const float *kt = qsi_gdn_k(s, i);
    float bt = qsi_gdn_beta(s, i), a = qs_expf(qsi_gdn_gate(s, i));
    float *dkt = w->dk_hv + (tok * p->hv + s->hv) * dk;
    float db = 0.0f, dgt = 0.0f;
    for (int64_t vv = 0; vv < dvn; vv++) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < dk; kk++)
            acc = acc + w->dH[kk * dvn + vv] * kt[kk];
        w->du[vv] = acc;
        db = db + acc * w->r[vv];
        dv[(tok * p->hv + s->hv) * dvn + vv] = bt * acc;
    }
    for (int64_t kk = 0; kk < dk; kk++) {
        float acc = 0.0f, acc2 = 0.0f;
        for (int64_t vv = 0; vv < dvn; vv++)
            acc = acc + w->dH[kk * dvn + vv] * w->u[vv];
        for (int64_t vv = 0; vv < dvn; vv++)
            acc2 = acc2 + w->hd[kk * dvn + vv] * (-(bt * w->du[vv]));
        dkt[kk] = acc + acc2;
    }
    for (int64_t kk = 0; kk < dk; kk++)
        for (int64_t vv = 0; vv < dvn; vv++) {
            float dhd = w->dH[kk * dvn + vv] + kt[kk] * (-(bt * w->du[vv]));
            dgt = dgt + dhd * w->hd[kk * dvn + vv];
            w->dH[kk * dvn + vv] = a * dhd;
        }
    dbeta[tok * p->hv + s->hv] = db;
    dg[tok * p->hv + s->hv] = dgt;
}

/* Reverse time over one (sequence, value head) from dH = dht; leaves dh0 in w->dH. */
static void qsi_gdn_bwd_seq(const qsi_gdn_seq *s, const float *h0, const float *dout,
                            const float *dht, float *dv, float *dg, float *dbeta, qsi_gdn_bwork *w)
{
    const qs_gdn_params *p = s->p;
    size_t ns = (size_t)(p->dk * p->dv);
    int64_t nseg = (s->len + QSI_GDN_SEG - 1) / QSI_GDN_SEG;
    qsi_gdn_load(p, h0, s->n, s->hv, w->ckpt);
    for (int64_t c = 1; c < nseg; c++) {
        memcpy(w->ckpt + (size_t)c * ns, w->ckpt + (size_t)(c - 1) * ns, ns * sizeof(float));
        for (int64_t i = (c - 1) * QSI_GDN_SEG; i < c * QSI_GDN_SEG; i++)
            qsi_gdn_step(p->dk, p->dv, w->ckpt + (size_t)c * ns, qsi_gdn_k(s, i), qsi_gdn_v(s, i),
                         qsi_gdn_gate(s, i), qsi_gdn_beta(s, i), w->u);
    }
    qsi_gdn_load(p, dht, s->n, s->hv, w->dH);
    for (int64_t c = nseg - 1; c >= 0; c--) {
        qsi_gdn_bwd_segment(s, c, w);
        int64_t i1 = (c + 1) * QSI_GDN_SEG < s->len ? (c + 1) * QSI_GDN_SEG : s->len;
        for (int64_t i = i1 - 1; i >= c * QSI_GDN_SEG; i--) {
            qsi_gdn_bwd_refwd(s, i, w->seg + (size_t)(i - c * QSI_GDN_SEG) * ns, w);
            qsi_gdn_bwd_read(s, i, dout, w);
            qsi_gdn_bwd_update(s, i, dv, dg, dbeta, w);
        }
    }
}

/* dq, dk of each q/k head: the FP32 sum over its value heads in increasing hv [GDN-GVA],
 * then the l2norm backward [GDN-L2NORM], rounded to dtype. */
static void qsi_gdn_bwd_qk(const qs_gdn_params *p, const float *x, const float *d_hv, float *dx,
                           float *tmp)
{
    int64_t group = p->hv / p->h;
    for (int64_t tok = 0; tok < qsi_gdn_tokens(p); tok++)
        for (int64_t hq = 0; hq < p->h; hq++) {
            for (int64_t kk = 0; kk < p->dk; kk++) {
                float acc = 0.0f;
                for (int64_t hv = hq * group; hv < (hq + 1) * group; hv++)
                    acc = acc + d_hv[(tok * p->hv + hv) * p->dk + kk];
                tmp[kk] = acc;
            }
            float *out = dx + (tok * p->h + hq) * p->dk;
            if (p->use_qk_l2norm)
                qsi_gdn_l2_bwd(x + (tok * p->h + hq) * p->dk, tmp, out, p->dk);
            else
                memcpy(out, tmp, (size_t)p->dk * sizeof(float));
            for (int64_t kk = 0; kk < p->dk; kk++)
                out[kk] = qsi_attn_round(p->dtype, out[kk]);
        }
}

static qs_status qsi_gdn_bwork_alloc(qs_ctx *ctx, const qs_gdn_params *p, qsi_gdn_bwork *w)
{
    size_t ns = (size_t)(p->dk * p->dv), nseg = 1, dk = (size_t)p->dk, dv = (size_t)p->dv;
    for (int64_t n = 0; n < p->b; n++) {
        size_t c = (size_t)((qsi_gdn_len(p, n) + QSI_GDN_SEG - 1) / QSI_GDN_SEG);
        nseg = c > nseg ? c : nseg;
    }
    size_t nqk = (size_t)(qsi_gdn_tokens(p) * p->hv) * dk + 1;
    memset(w, 0, sizeof *w);
    w->ckpt = malloc(nseg * ns * sizeof(float));
    w->seg = malloc(QSI_GDN_SEG * ns * sizeof(float));
    w->hd = malloc((3 * ns + 3 * dv + dk) * sizeof(float));
    w->dq_hv = calloc(2 * nqk, sizeof(float));
    if (w->ckpt == NULL || w->seg == NULL || w->hd == NULL || w->dq_hv == NULL)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "qs_gdn_bwd: out of memory");
    w->ht = w->hd + ns;
    w->dH = w->ht + ns;
    w->u = w->dH + ns;
    w->r = w->u + dv;
    w->du = w->r + dv;
    w->qs = w->du + dv;
    w->dk_hv = w->dq_hv + nqk;
    return QS_OK;
}

static void qsi_gdn_bwork_free(qsi_gdn_bwork *w)
{
    free(w->ckpt);
    free(w->seg);
    free(w->hd);
    free(w->dq_hv);
}

static qs_status qsi_gdn_bwd_check(qs_ctx *ctx, const char *fn, const qs_gdn_params *p,
                                   const float *dout, float *dq, float *dk, float *dv, float *dg,
                                   float *dbeta)
{
    size_t no = (size_t)(qsi_gdn_tokens(p) * p->hv * p->dv);
    qs_status st = qsi_attn_check_values(ctx, fn, "dout", dout, no, p->dtype);
    if (st == QS_OK && (dq == NULL || dk == NULL || dv == NULL || dg == NULL || dbeta == NULL))
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: an output gradient is NULL", fn);
    return st;
}

qs_status qs_gdn_bwd(qs_ctx *ctx, const qs_gdn_params *p, const float *q, const float *k,
                     const float *v, const float *g, const float *beta, const float *h0,
                     const float *dout, const float *dht, float *dq, float *dk, float *dv,
                     float *dg, float *dbeta, float *dh0)
{
    const char *fn = "qs_gdn_bwd";
    qs_status st = qsi_gdn_check(ctx, fn, p);
    if (st == QS_OK)
        st = qsi_gdn_check_inputs(ctx, fn, p, q, k, v, g, beta);
    if (st == QS_OK)
        st = qsi_gdn_bwd_check(ctx, fn, p, dout, dq, dk, dv, dg, dbeta);
    if (st != QS_OK)
        return st;
    qsi_gdn_bwork w;
    float *kn = NULL, *qn = NULL;
    st = qsi_gdn_bwork_alloc(ctx, p, &w);
    if (st == QS_OK && (qn = qsi_gdn_prep(ctx, fn, p, q, k, &kn)) == NULL)
        st = QS_ERR_NOMEM;
    size_t ns = (size_t)(p->dk * p->dv);
    for (int64_t n = 0; st == QS_OK && n < p->b; n++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            qsi_gdn_seq s = qsi_gdn_seq_at(p, qn, kn, v, g, beta, n, hv);
            qsi_gdn_bwd_seq(&s, h0, dout, dht, dv, dg, dbeta, &w);
            if (dh0 != NULL)
                memcpy(dh0 + (size_t)(n * p->hv + hv) * ns, w.dH, ns * sizeof(float));
        }
    if (st == QS_OK) {
        qsi_gdn_bwd_qk(p, q, w.dq_hv, dq, w.qs);
        qsi_gdn_bwd_qk(p, k, w.dk_hv, dk, w.qs);
        for (int64_t e = 0; e < qsi_gdn_tokens(p) * p->hv * p->dv; e++)
            dv[e] = qsi_attn_round(p->dtype, dv[e]);
    }
    qsi_gdn_bwork_free(&w);
    free(qn);
    return st;
}

/* ---------------------------------------------------------------- chunked form [GDN-CHUNK] */

/* Scratch of one chunk of length up to C. */
typedef struct qsi_gdn_cwork {
    int64_t c;
    float *G, *L, *T, *W, *U, *Vn, *S; /* S: the state, dk x dv */
} qsi_gdn_cwork;

static float qsi_gdn_dotf(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < n; d++)
        acc = acc + a[d] * b[d];
    return acc;
}

/* G (inclusive cumsum of g), L, and T = (I + L)^-1 by forward substitution, for the nc
 * tokens of the chunk from token i0. Only G_i - G_j with i >= j is exponentiated. */
static void qsi_gdn_chunk_solve(const qsi_gdn_seq *s, int64_t i0, int64_t nc, qsi_gdn_cwork *w)
{
    int64_t C = w->c, dk = s->p->dk;
    for (int64_t i = 0; i < nc; i++)
        w->G[i] = (i > 0 ? w->G[i - 1] : 0.0f) + qsi_gdn_gate(s, i0 + i);
    for (int64_t i = 0; i < nc; i++)
        for (int64_t j = 0; j < i; j++)
            w->L[i * C + j] = (qsi_gdn_beta(s, i0 + i) *
                               qsi_gdn_dotf(qsi_gdn_k(s, i0 + i), qsi_gdn_k(s, i0 + j), dk)) *
                              qs_expf(w->G[i] - w->G[j]);
    for (int64_t i = 0; i < nc; i++) {
        for (int64_t j = 0; j < nc; j++)
            w->T[i * C + j] = (i == j) ? 1.0f : 0.0f;
        for (int64_t j = 0; j < i; j++) {
            float acc = 0.0f;
            for (int64_t m = j; m < i; m++)
                acc = acc + w->L[i * C + m] * w->T[m * C + j];
            w->T[i * C + j] = -acc;
        }
    }
}

/* W = T diag(beta e^G) K and U = T diag(beta) V. */
static void qsi_gdn_chunk_wu(const qsi_gdn_seq *s, int64_t i0, int64_t nc, qsi_gdn_cwork *w)
{
    int64_t C = w->c, dk = s->p->dk, dv = s->p->dv;
    for (int64_t i = 0; i < nc; i++) {
        for (int64_t kk = 0; kk < dk; kk++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                acc = acc + w->T[i * C + j] * (qsi_gdn_beta(s, i0 + j) * qs_expf(w->G[j])) *
                                qsi_gdn_k(s, i0 + j)[kk];
            w->W[i * dk + kk] = acc;
        }
        for (int64_t vv = 0; vv < dv; vv++) {
            float acc = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                acc = acc + w->T[i * C + j] * qsi_gdn_beta(s, i0 + j) * qsi_gdn_v(s, i0 + j)[vv];
            w->U[i * dv + vv] = acc;
        }
    }
}

/* Vn = U - W S; O = scale (e^G Q S + (tril(Q K^T) . Gamma) Vn); S = e^G_last S + K'^T Vn. */
static void qsi_gdn_chunk_out(const qsi_gdn_seq *s, int64_t i0, int64_t nc, float *S, float *o,
                              qsi_gdn_cwork *w)
{
    const qs_gdn_params *p = s->p;
    int64_t dk = p->dk, dv = p->dv;
    float scale = qsi_gdn_scale(p);
    for (int64_t i = 0; i < nc; i++)
        for (int64_t vv = 0; vv < dv; vv++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < dk; kk++)
                acc = acc + w->W[i * dk + kk] * S[kk * dv + vv];
            w->Vn[i * dv + vv] = w->U[i * dv + vv] - acc;
        }
    for (int64_t i = 0; i < nc; i++) {
        const float *qt = qsi_gdn_q(s, i0 + i);
        float *out = o + ((s->start + i0 + i) * p->hv + s->hv) * dv;
        for (int64_t vv = 0; vv < dv; vv++) {
            float inter = 0.0f, intra = 0.0f;
            for (int64_t kk = 0; kk < dk; kk++)
                inter = inter + qt[kk] * S[kk * dv + vv];
            for (int64_t j = 0; j <= i; j++)
                intra = intra +
                        (qsi_gdn_dotf(qt, qsi_gdn_k(s, i0 + j), dk) * qs_expf(w->G[i] - w->G[j])) *
                            w->Vn[j * dv + vv];
            out[vv] = qsi_attn_round(p->dtype, scale * (qs_expf(w->G[i]) * inter + intra));
        }
    }
    float glast = w->G[nc - 1], alast = qs_expf(glast);
    for (int64_t kk = 0; kk < dk; kk++)
        for (int64_t vv = 0; vv < dv; vv++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nc; i++)
                acc = acc +
                      (qsi_gdn_k(s, i0 + i)[kk] * qs_expf(glast - w->G[i])) * w->Vn[i * dv + vv];
            S[kk * dv + vv] = alast * S[kk * dv + vv] + acc;
        }
}

static qs_status qsi_gdn_cwork_alloc(qs_ctx *ctx, const qs_gdn_params *p, int64_t C,
                                     qsi_gdn_cwork *w)
{
    size_t c = (size_t)C, dk = (size_t)p->dk, dv = (size_t)p->dv;
    w->c = C;
    w->G = malloc((c + 2 * c * c + c * dk + 2 * c * dv + dk * dv) * sizeof(float));
    if (w->G == NULL)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "qs_gdn_fwd_chunked: out of memory");
    w->L = w->G + c;
    w->T = w->L + c * c;
    w->W = w->T + c * c;
    w->U = w->W + c * dk;
    w->Vn = w->U + c * dv;
    w->S = w->Vn + c * dv;
    return QS_OK;
}

qs_status qs_gdn_fwd_chunked(qs_ctx *ctx, const qs_gdn_params *p, int64_t chunk, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             const float *h0, float *o, float *ht)
{
    const char *fn = "qs_gdn_fwd_chunked";
    qs_status st = qsi_gdn_check(ctx, fn, p);
    if (st == QS_OK)
        st = qsi_gdn_check_inputs(ctx, fn, p, q, k, v, g, beta);
    if (st == QS_OK && (chunk < 1 || chunk > 256))
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: chunk = %lld is outside 1..256", fn,
                          (long long)chunk);
    if (st == QS_OK && o == NULL)
        st = qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "%s: 'o' is NULL", fn);
    if (st != QS_OK)
        return st;
    qsi_gdn_cwork w = {0, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    float *kn = NULL, *qn = NULL;
    st = qsi_gdn_cwork_alloc(ctx, p, chunk, &w);
    if (st == QS_OK && (qn = qsi_gdn_prep(ctx, fn, p, q, k, &kn)) == NULL)
        st = QS_ERR_NOMEM;
    size_t ns = (size_t)(p->dk * p->dv);
    for (int64_t n = 0; st == QS_OK && n < p->b; n++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            qsi_gdn_seq s = qsi_gdn_seq_at(p, qn, kn, v, g, beta, n, hv);
            float *S = w.S;
            qsi_gdn_load(p, h0, n, hv, S);
            for (int64_t i0 = 0; i0 < s.len; i0 += chunk) {
                int64_t nc = s.len - i0 < chunk ? s.len - i0 : chunk;
                qsi_gdn_chunk_solve(&s, i0, nc, &w);
                qsi_gdn_chunk_wu(&s, i0, nc, &w);
                qsi_gdn_chunk_out(&s, i0, nc, S, o, &w);
            }
            if (ht != NULL)
                memcpy(ht + (size_t)(n * p->hv + hv) * ns, S, ns * sizeof(float));
        }
    free(w.G);
    free(qn);
    return st;
}
