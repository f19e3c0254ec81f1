/* test_gdn_chunk_bwd.c: the chunked Gated DeltaNet backward that cuda/qc_gdn_chunk.cu runs on
 * the device (docs/gdn.md, "The chunked backward"), written here in float64 in the kernels'
 * passes and with their zero padding of a partial last chunk, and checked against the
 * reference recurrence's backward qs_gdn_bwd (spec/attention.md [GDN-BWD]): the two are one
 * function, so they agree to the reference's FP32 rounding. Dense and varlen (a partial last
 * chunk, an empty sequence), GVA, l2norm on and off, h0 and dht present and absent, gates at
 * 0 and strongly negative. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qstest.h"

enum { C = 64 }; /* the chunk of the device kernels */

/* ---------------------------------------------------------------- inputs */

static float *rbuf(size_t n, float lo, float hi)
{
    float *x = malloc((n + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++)
        x[e] = qst_rnd(lo, hi);
    return x;
}

static double *dz(size_t n)
{
    return calloc(n + 1, sizeof(double));
}

/* One problem: the reference's inputs and gradients, and the model's gradients. */
typedef struct bwd_case {
    qs_gdn_params p;
    int64_t tokens;
    size_t nq, nv, ng, ns;
    float *q, *k, *v, *g, *beta, *h0, *dout, *dht;
    float *dq, *dk, *dv, *dg, *dbeta, *dh0;  /* qs_gdn_bwd */
    double *mq, *mk, *mv, *mg, *mbeta, *mh0; /* the chunked model */
    double *qn, *kn, *dq_hv, *dk_hv;         /* q̂, k̂ [tokens, h, dk]; [tokens, hv, dk] */
} bwd_case;

/* Random inputs: without l2norm, q and k are scaled to norm about 1 (as the layer's are),
 * so that T = (I + L)^-1 stays well conditioned. with_h0 / with_dht: NULL when 0. */
static void case_init(bwd_case *x, const qs_gdn_params *p, uint64_t seed, float gmin, int with_h0,
                      int with_dht)
{
    memset(x, 0, sizeof *x);
    x->p = *p;
    x->tokens = p->cu_seqlens != NULL ? p->t : p->b * p->t;
    x->nq = (size_t)(x->tokens * p->h * p->dk);
    x->nv = (size_t)(x->tokens * p->hv * p->dv);
    x->ng = (size_t)(x->tokens * p->hv);
    x->ns = (size_t)(p->b * p->hv * p->dk * p->dv);
    qst_rng_seed(seed);
    float qk = p->use_qk_l2norm ? 1.0f : 1.7f / sqrtf((float)p->dk);
    x->q = rbuf(x->nq, -qk, qk);
    x->k = rbuf(x->nq, -qk, qk);
    x->v = rbuf(x->nv, -1.0f, 1.0f);
    x->g = rbuf(x->ng, gmin, 0.0f);
    x->beta = rbuf(x->ng, 0.05f, 0.95f);
    x->h0 = with_h0 ? rbuf(x->ns, -0.5f, 0.5f) : NULL;
    x->dout = rbuf(x->nv, -1.0f, 1.0f);
    x->dht = with_dht ? rbuf(x->ns, -1.0f, 1.0f) : NULL;
    if (p->dtype == QS_BF16) { /* values of the dtype */
        float *all[] = {x->q, x->k, x->v, x->dout};
        size_t n[] = {x->nq, x->nq, x->nv, x->nv};
        for (int a = 0; a < 4; a++)
            for (size_t e = 0; e < n[a]; e++)
                all[a][e] = qs_round_bf16(all[a][e]);
    }
    x->dq = calloc(x->nq + 1, sizeof(float));
    x->dk = calloc(x->nq + 1, sizeof(float));
    x->dv = calloc(x->nv + 1, sizeof(float));
    x->dg = calloc(x->ng + 1, sizeof(float));
    x->dbeta = calloc(x->ng + 1, sizeof(float));
    x->dh0 = calloc(x->ns + 1, sizeof(float));
    x->mq = dz(x->nq);
    x->mk = dz(x->nq);
    x->mv = dz(x->nv);
    x->mg = dz(x->ng);
    x->mbeta = dz(x->ng);
    x->mh0 = dz(x->ns);
    x->qn = dz(x->nq);
    x->kn = dz(x->nq);
    x->dq_hv = dz(x->ng * (size_t)p->dk);
    x->dk_hv = dz(x->ng * (size_t)p->dk);
}

static void case_free(bwd_case *x)
{
    void *all[] = {x->q,  x->k,  x->v,     x->g,   x->beta,  x->h0,  x->dout,  x->dht,
                   x->dq, x->dk, x->dv,    x->dg,  x->dbeta, x->dh0, x->mq,    x->mk,
                   x->mv, x->mg, x->mbeta, x->mh0, x->qn,    x->kn,  x->dq_hv, x->dk_hv};
    for (size_t e = 0; e < sizeof all / sizeof all[0]; e++)
        free(all[e]);
}

/* ---------------------------------------------------------------- l2norm [GDN-L2NORM] */

/* q̂ = x, or fl32(x / r) rounded to the dtype, r = sqrt(fl32(sum x^2) + 1e-6), as the
 * reference and the device prep_kernel form it (the chunk passes start from q̂, k̂). */
static void prep_qk(const qs_gdn_params *p, const float *x, double *out, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * p->dk;
        float ss = 0.0f;
        for (int64_t d = 0; d < p->dk; d++)
            ss = ss + xr[d] * xr[d];
        float nrm = qs_sqrtf(ss + 1e-6f);
        for (int64_t d = 0; d < p->dk; d++) {
            float y = p->use_qk_l2norm ? xr[d] / nrm : xr[d];
            if (p->use_qk_l2norm && p->dtype == QS_BF16)
                y = qs_round_bf16(y);
            out[r * p->dk + d] = y;
        }
    }
}

/* dx of the q/k head rows: the sum of the value heads' dq̂ [GDN-GVA], then the l2norm
 * backward dx = (dy - y (y . dy)) / r with y = x / r, in float64. */
static void finish_qk(const qs_gdn_params *p, int64_t tokens, const float *x, const double *d_hv,
                      double *dx)
{
    int64_t grp = p->hv / p->h, dk = p->dk;
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t hq = 0; hq < p->h; hq++) {
            double *out = dx + (t * p->h + hq) * dk;
            for (int64_t d = 0; d < dk; d++) {
                double s = 0.0;
                for (int64_t hv = hq * grp; hv < (hq + 1) * grp; hv++)
                    s += d_hv[(t * p->hv + hv) * dk + d];
                out[d] = s;
            }
            if (!p->use_qk_l2norm)
                continue;
            const float *xr = x + (t * p->h + hq) * dk;
            double ss = 0.0, c = 0.0;
            for (int64_t d = 0; d < dk; d++)
                ss += (double)xr[d] * xr[d];
            double r = sqrt(ss + 1e-6);
            for (int64_t d = 0; d < dk; d++)
                c += xr[d] / r * out[d];
            for (int64_t d = 0; d < dk; d++)
                out[d] = (out[d] - xr[d] / r * c) / r;
        }
}

/* ---------------------------------------------------------------- the chunk model */

/* One chunk of one (sequence, value head), rows zero-padded to C: K, Q [C][dk], V, dO
 * [C][dv]; beta 0 and G held at G[nc - 1] on the padded rows. E = e^G, F = e^{G_l - G}. */
typedef struct mchunk {
    int64_t tok0, nc;
    double G[C], E[C], F[C], B[C];
    double *K, *Q, *V, *dO;
    double *Lg, *T, *A; /* [C][C]: K K^T . Gamma (strictly lower), (I + diag(B) Lg)^-1, A */
    double *W, *Vn;     /* W [C][dk]; U [C][dv], overwritten by Vn in the forward pass */
    double *S, *dS;     /* the state before the chunk, the gradient of the state after it */
} mchunk;

typedef struct mseq {
    const bwd_case *x;
    int64_t n, hv, hq, dk, dv;
    double scale;
    int64_t nch;
    mchunk *ch;
} mseq;

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0.0;
    for (int64_t d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* Pass 1, every chunk in parallel (wy_kernel): G, the masked K K^T and A = scale (Q K^T .
 * Gamma) (i >= j), T by forward substitution, W = T diag(B E) K and U = T diag(B) V. */
static void pass_wy(mseq *s, mchunk *c)
{
    const bwd_case *x = s->x;
    int64_t dk = s->dk, dv = s->dv;
    double acc = 0.0;
    for (int64_t i = 0; i < C; i++) {
        int64_t tok = c->tok0 + i;
        int on = i < c->nc;
        if (on)
            acc += x->g[tok * x->p.hv + s->hv];
        c->G[i] = acc;
        c->B[i] = on ? x->beta[tok * x->p.hv + s->hv] : 0.0;
        for (int64_t d = 0; d < dk; d++) {
            c->K[i * dk + d] = on ? x->kn[(tok * x->p.h + s->hq) * dk + d] : 0.0;
            c->Q[i * dk + d] = on ? x->qn[(tok * x->p.h + s->hq) * dk + d] : 0.0;
        }
        for (int64_t d = 0; d < dv; d++) {
            size_t e = (size_t)((tok * x->p.hv + s->hv) * dv + d);
            c->V[i * dv + d] = on ? x->v[e] : 0.0;
            c->dO[i * dv + d] = on ? x->dout[e] : 0.0;
        }
    }
    for (int64_t i = 0; i < C; i++) {
        c->E[i] = exp(c->G[i]);
        c->F[i] = exp(c->G[C - 1] - c->G[i]);
        for (int64_t j = 0; j < C; j++) {
            double gam = i >= j ? exp(c->G[i] - c->G[j]) : 0.0;
            c->Lg[i * C + j] = i > j ? dot(c->K + i * dk, c->K + j * dk, dk) * gam : 0.0;
            c->A[i * C + j] = s->scale * dot(c->Q + i * dk, c->K + j * dk, dk) * gam;
        }
    }
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            double t = i == j ? 1.0 : 0.0;
            for (int64_t m = j; m < i; m++)
                t -= c->B[i] * c->Lg[i * C + m] * c->T[m * C + j];
            c->T[i * C + j] = j <= i ? t : 0.0;
        }
    for (int64_t i = 0; i < C; i++) {
        for (int64_t d = 0; d < dk; d++) {
            double w = 0.0;
            for (int64_t j = 0; j <= i; j++)
                w += c->T[i * C + j] * c->B[j] * c->E[j] * c->K[j * dk + d];
            c->W[i * dk + d] = w;
        }
        for (int64_t d = 0; d < dv; d++) {
            double u = 0.0;
            for (int64_t j = 0; j <= i; j++)
                u += c->T[i * C + j] * c->B[j] * c->V[j * dv + d];
            c->Vn[i * dv + d] = u;
        }
    }
}

/* Pass 2, serial over the chunks (state_kernel, o not wanted): S before each chunk, Vn =
 * U - W S, S' = E_l S + (F . K)^T Vn. */
static void pass_states(mseq *s)
{
    const bwd_case *x = s->x;
    int64_t dk = s->dk, dv = s->dv;
    double *S = dz((size_t)(dk * dv));
    if (x->h0 != NULL)
        for (int64_t e = 0; e < dk * dv; e++)
            S[e] = x->h0[(s->n * x->p.hv + s->hv) * dk * dv + e];
    for (int64_t ci = 0; ci < s->nch; ci++) {
        mchunk *c = &s->ch[ci];
        memcpy(c->S, S, (size_t)(dk * dv) * sizeof(double));
        for (int64_t i = 0; i < C; i++)
            for (int64_t v = 0; v < dv; v++) {
                double ws = 0.0;
                for (int64_t d = 0; d < dk; d++)
                    ws += c->W[i * dk + d] * S[d * dv + v];
                c->Vn[i * dv + v] -= ws;
            }
        for (int64_t d = 0; d < dk; d++)
            for (int64_t v = 0; v < dv; v++) {
                double kv = 0.0;
                for (int64_t i = 0; i < C; i++)
                    kv += c->F[i] * c->K[i * dk + d] * c->Vn[i * dv + v];
                S[d * dv + v] = c->E[C - 1] * c->S[d * dv + v] + kv;
            }
    }
    free(S);
}

/* Pass 3, serial over the chunks in reverse (dstate_kernel), from dS = dht: dS after each
 * chunk, dVn = diag(F) K dS' + A^T dO, dS = E_l dS' + scale (E . Q)^T dO - W^T dVn; the last
 * dS is dh0. */
static void pass_dstates(mseq *s, double *dh0)
{
    const bwd_case *x = s->x;
    int64_t dk = s->dk, dv = s->dv;
    double *dS = dz((size_t)(dk * dv)), *dVn = dz((size_t)(C * dv));
    if (x->dht != NULL)
        for (int64_t e = 0; e < dk * dv; e++)
            dS[e] = x->dht[(s->n * x->p.hv + s->hv) * dk * dv + e];
    for (int64_t ci = s->nch - 1; ci >= 0; ci--) {
        mchunk *c = &s->ch[ci];
        memcpy(c->dS, dS, (size_t)(dk * dv) * sizeof(double));
        for (int64_t i = 0; i < C; i++)
            for (int64_t v = 0; v < dv; v++) {
                double a = 0.0, b = 0.0;
                for (int64_t d = 0; d < dk; d++)
                    a += c->K[i * dk + d] * c->dS[d * dv + v];
                for (int64_t j = 0; j < C; j++)
                    b += c->A[j * C + i] * c->dO[j * dv + v];
                dVn[i * dv + v] = c->F[i] * a + b;
            }
        for (int64_t d = 0; d < dk; d++)
            for (int64_t v = 0; v < dv; v++) {
                double a = 0.0;
                for (int64_t i = 0; i < C; i++)
                    a += s->scale * c->E[i] * c->Q[i * dk + d] * c->dO[i * dv + v] -
                         c->W[i * dk + d] * dVn[i * dv + v];
                dS[d * dv + v] = c->E[C - 1] * c->dS[d * dv + v] + a;
            }
    }
    memcpy(dh0, dS, (size_t)(dk * dv) * sizeof(double));
    free(dS);
    free(dVn);
}

/* Work arrays of pass 4. */
typedef struct mgrad {
    double *dVn, *dQ, *dK, *dW, *Y, *dA, *dT, *P, *dL;
    double dG[C];
} mgrad;

/* dq̂, dk̂ (of the value head), dv, dbeta and dg of one chunk from S, dS' and the pass-1
 * tiles (grad_kernel):
 *   dVn = diag(F) K dS' + A^T dO (as pass 3);  dA = lower(dO Vn^T);  dAs = scale dA . Gamma
 *   dQ = scale E . (dO S^T) + dAs K
 *   dK = F . (Vn dS'^T) + dAs^T Q + diag(B E) T^T dW + (Bl + Bl^T) K,  dW = -dVn S^T
 *   dT = dVn (diag(B) V)^T + dW (diag(B E) K)^T;  dL = -T^T dT T^T (strictly lower)
 *   Bl = dL . diag(B) Gamma (the L-gradient per k_i . k_j)
 *   dV = diag(B) T^T dVn;  dbeta = rows (T^T dVn . V) + E rows (T^T dW . K) + rows (dL . Lg)
 *   dG = rows(dQ_inter . Q) + rows(M) - cols(M) - F rows(Vn dS'^T . K) + B E rows(T^T dW . K)
 *        + rows(N) - cols(N), and at row l = C - 1: + sum_j F_j rows(Vn dS'^T . K)_j
 *        + E_l sum(S . dS'); M = dA . A, N = dL . diag(B) Lg
 *   dg = the reverse cumulative sum of dG over the chunk. */
static void pass_grad(mseq *s, mchunk *c, mgrad *w)
{
    const bwd_case *x = s->x;
    int64_t dk = s->dk, dv = s->dv;
    double sc = s->scale;
    for (int64_t i = 0; i < C; i++) /* dVn */
        for (int64_t v = 0; v < dv; v++) {
            double a = 0.0, b = 0.0;
            for (int64_t d = 0; d < dk; d++)
                a += c->K[i * dk + d] * c->dS[d * dv + v];
            for (int64_t j = 0; j < C; j++)
                b += c->A[j * C + i] * c->dO[j * dv + v];
            w->dVn[i * dv + v] = c->F[i] * a + b;
        }
    double sdot = 0.0;
    memset(w->dG, 0, sizeof w->dG);
    for (int64_t e = 0; e < dk * dv; e++)
        sdot += c->S[e] * c->dS[e];
    for (int64_t i = 0; i < C; i++) {
        double gq = 0.0, gk = 0.0;
        for (int64_t d = 0; d < dk; d++) { /* the sums over the value columns */
            double qs = 0.0, ks = 0.0, ws = 0.0;
            for (int64_t v = 0; v < dv; v++) {
                qs += c->dO[i * dv + v] * c->S[d * dv + v];
                ks += c->Vn[i * dv + v] * c->dS[d * dv + v];
                ws += w->dVn[i * dv + v] * c->S[d * dv + v];
            }
            w->dQ[i * dk + d] = sc * c->E[i] * qs;
            w->dK[i * dk + d] = c->F[i] * ks;
            w->dW[i * dk + d] = -ws;
            gq += w->dQ[i * dk + d] * c->Q[i * dk + d];
            gk += w->dK[i * dk + d] * c->K[i * dk + d];
        }
        w->dG[i] += gq - gk;
        w->dG[C - 1] += gk;
        for (int64_t j = 0; j < C; j++) {
            double a = 0.0, t = 0.0;
            for (int64_t v = 0; v < dv; v++) {
                a += c->dO[i * dv + v] * c->Vn[j * dv + v];
                t += w->dVn[i * dv + v] * c->B[j] * c->V[j * dv + v];
            }
            w->dA[i * C + j] = i >= j ? a : 0.0;
            w->dT[i * C + j] = t;
        }
    }
    w->dG[C - 1] += c->E[C - 1] * sdot;
    for (int64_t i = 0; i < C; i++) {
        for (int64_t j = 0; j < C; j++) { /* dT += dW (diag(B E) K)^T, strictly lower */
            double t = 0.0;
            for (int64_t d = 0; d < dk; d++)
                t += w->dW[i * dk + d] * c->B[j] * c->E[j] * c->K[j * dk + d];
            w->dT[i * C + j] = i > j ? w->dT[i * C + j] + t : 0.0;
        }
        for (int64_t d = 0; d < dk; d++) { /* Y = T^T dW */
            double y = 0.0;
            for (int64_t j = 0; j < C; j++)
                y += c->T[j * C + i] * w->dW[j * dk + d];
            w->Y[i * dk + d] = y;
        }
    }
    for (int64_t i = 0; i < C; i++) /* P = T^T dT */
        for (int64_t j = 0; j < C; j++) {
            double a = 0.0;
            for (int64_t m = 0; m < C; m++)
                a += c->T[m * C + i] * w->dT[m * C + j];
            w->P[i * C + j] = a;
        }
    for (int64_t i = 0; i < C; i++) /* dL = -P T^T, strictly lower */
        for (int64_t j = 0; j < C; j++) {
            double a = 0.0;
            for (int64_t m = 0; m < C; m++)
                a += w->P[i * C + m] * c->T[j * C + m];
            w->dL[i * C + j] = i > j ? -a : 0.0;
        }
    for (int64_t i = 0; i < C; i++) {
        int64_t tok = c->tok0 + i;
        double ywk = dot(w->Y + i * dk, c->K + i * dk, dk), dbl = 0.0, m = 0.0, nn = 0.0;
        for (int64_t j = 0; j < C; j++) {
            dbl += w->dL[i * C + j] * c->Lg[i * C + j];
            m += w->dA[i * C + j] * c->A[i * C + j] - w->dA[j * C + i] * c->A[j * C + i];
            nn += c->B[i] * w->dL[i * C + j] * c->Lg[i * C + j] -
                  c->B[j] * w->dL[j * C + i] * c->Lg[j * C + i];
        }
        w->dG[i] += m + c->B[i] * c->E[i] * ywk + nn;
        for (int64_t d = 0; d < dk; d++) {
            double q = w->dQ[i * dk + d],
                   k = w->dK[i * dk + d] + c->B[i] * c->E[i] * w->Y[i * dk + d];
            for (int64_t j = 0; j < C; j++) {
                double das_ij = i >= j ? sc * w->dA[i * C + j] * exp(c->G[i] - c->G[j]) : 0.0;
                double das_ji = j >= i ? sc * w->dA[j * C + i] * exp(c->G[j] - c->G[i]) : 0.0;
                double bl_ij = i > j ? w->dL[i * C + j] * c->B[i] * exp(c->G[i] - c->G[j]) : 0.0;
                double bl_ji = j > i ? w->dL[j * C + i] * c->B[j] * exp(c->G[j] - c->G[i]) : 0.0;
                q += das_ij * c->K[j * dk + d];
                k += das_ji * c->Q[j * dk + d] + (bl_ij + bl_ji) * c->K[j * dk + d];
            }
            if (i < c->nc) {
                x->dq_hv[(tok * x->p.hv + s->hv) * dk + d] = q;
                x->dk_hv[(tok * x->p.hv + s->hv) * dk + d] = k;
            }
        }
        double db = dbl + c->E[i] * ywk;
        for (int64_t v = 0; v < dv; v++) {
            double tv = 0.0;
            for (int64_t j = 0; j < C; j++)
                tv += c->T[j * C + i] * w->dVn[j * dv + v];
            db += tv * c->V[i * dv + v];
            if (i < c->nc)
                x->mv[(tok * x->p.hv + s->hv) * dv + v] = c->B[i] * tv;
        }
        if (i < c->nc)
            x->mbeta[tok * x->p.hv + s->hv] = db;
    }
    double acc = 0.0;
    for (int64_t i = C - 1; i >= 0; i--) {
        acc += w->dG[i];
        if (i < c->nc)
            x->mg[(c->tok0 + i) * x->p.hv + s->hv] = acc;
    }
}

static void mchunk_alloc(mchunk *c, int64_t dk, int64_t dv)
{
    c->K = dz((size_t)(C * dk));
    c->Q = dz((size_t)(C * dk));
    c->V = dz((size_t)(C * dv));
    c->dO = dz((size_t)(C * dv));
    c->Lg = dz(C * C);
    c->T = dz(C * C);
    c->A = dz(C * C);
    c->W = dz((size_t)(C * dk));
    c->Vn = dz((size_t)(C * dv));
    c->S = dz((size_t)(dk * dv));
    c->dS = dz((size_t)(dk * dv));
}

static void mchunk_free(mchunk *c)
{
    double *all[] = {c->K, c->Q, c->V, c->dO, c->Lg, c->T, c->A, c->W, c->Vn, c->S, c->dS};
    for (size_t e = 0; e < sizeof all / sizeof all[0]; e++)
        free(all[e]);
}

static void mgrad_alloc(mgrad *w, int64_t dk, int64_t dv)
{
    w->dVn = dz((size_t)(C * dv));
    w->dQ = dz((size_t)(C * dk));
    w->dK = dz((size_t)(C * dk));
    w->dW = dz((size_t)(C * dk));
    w->Y = dz((size_t)(C * dk));
    w->dA = dz(C * C);
    w->dT = dz(C * C);
    w->P = dz(C * C);
    w->dL = dz(C * C);
}

static void mgrad_free(mgrad *w)
{
    double *all[] = {w->dVn, w->dQ, w->dK, w->dW, w->Y, w->dA, w->dT, w->P, w->dL};
    for (size_t e = 0; e < sizeof all / sizeof all[0]; e++)
        free(all[e]);
}

/* The whole chunked backward of one problem into x->m*. */
static void model_bwd(bwd_case *x)
{
    const qs_gdn_params *p = &x->p;
    int64_t dk = p->dk, dv = p->dv;
    prep_qk(p, x->q, x->qn, x->tokens * p->h);
    prep_qk(p, x->k, x->kn, x->tokens * p->h);
    mgrad w;
    mgrad_alloc(&w, dk, dv);
    for (int64_t n = 0; n < p->b; n++)
        for (int64_t hv = 0; hv < p->hv; hv++) {
            int64_t start = p->cu_seqlens ? p->cu_seqlens[n] : n * p->t;
            int64_t len = p->cu_seqlens ? p->cu_seqlens[n + 1] - p->cu_seqlens[n] : p->t;
            mseq s = {x, n, hv, hv / (p->hv / p->h), dk, dv, 0.0, (len + C - 1) / C, NULL};
            s.scale = p->scale != 0.0f ? p->scale : qs_rsqrtf((float)dk);
            s.ch = calloc((size_t)s.nch + 1, sizeof(mchunk));
            for (int64_t ci = 0; ci < s.nch; ci++) {
                mchunk_alloc(&s.ch[ci], dk, dv);
                s.ch[ci].tok0 = start + ci * C;
                s.ch[ci].nc = len - ci * C < C ? len - ci * C : C;
                pass_wy(&s, &s.ch[ci]);
            }
            pass_states(&s);
            pass_dstates(&s, x->mh0 + (n * p->hv + hv) * dk * dv);
            for (int64_t ci = 0; ci < s.nch; ci++)
                pass_grad(&s, &s.ch[ci], &w);
            for (int64_t ci = 0; ci < s.nch; ci++)
                mchunk_free(&s.ch[ci]);
            free(s.ch);
        }
    finish_qk(p, x->tokens, x->q, x->dq_hv, x->mq);
    finish_qk(p, x->tokens, x->k, x->dk_hv, x->mk);
    mgrad_free(&w);
}

/* ---------------------------------------------------------------- the comparison */

/* ||model - ref||_2 / ||ref||_2 over n values. */
static double rel_err(const double *m, const float *r, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < n; e++) {
        num += (m[e] - r[e]) * (m[e] - r[e]);
        den += (double)r[e] * r[e];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* The model's six gradients within lim (normwise) of qs_gdn_bwd's. */
static void check_model(const qs_gdn_params *p, uint64_t seed, float gmin, int with_h0,
                        int with_dht, double lim)
{
    qs_ctx *ctx = qs_ctx_new();
    bwd_case x;
    case_init(&x, p, seed, gmin, with_h0, with_dht);
    for (size_t e = 3; e < x.ng; e += 7) /* gates at 0 and strongly negative */
        x.g[e] = (e % 2 == 0) ? 0.0f : -30.0f;
    ck_assert_int_eq(qs_gdn_bwd(ctx, p, x.q, x.k, x.v, x.g, x.beta, x.h0, x.dout, x.dht, x.dq, x.dk,
                                x.dv, x.dg, x.dbeta, x.dh0),
                     QS_OK);
    model_bwd(&x);
    const char *name[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
    double err[6] = {rel_err(x.mq, x.dq, x.nq),       rel_err(x.mk, x.dk, x.nq),
                     rel_err(x.mv, x.dv, x.nv),       rel_err(x.mg, x.dg, x.ng),
                     rel_err(x.mbeta, x.dbeta, x.ng), rel_err(x.mh0, x.dh0, x.ns)};
    printf("chunk bwd model vs qs_gdn_bwd (b %lld t %lld h %lld hv %lld dk %lld dv %lld%s%s%s%s):",
           (long long)p->b, (long long)p->t, (long long)p->h, (long long)p->hv, (long long)p->dk,
           (long long)p->dv, p->cu_seqlens ? " varlen" : "", p->use_qk_l2norm ? " l2norm" : "",
           with_h0 ? " h0" : "", with_dht ? " dht" : "");
    for (int a = 0; a < 6; a++)
        printf(" %s %.1e", name[a], err[a]);
    printf("\n");
    for (int a = 0; a < 6; a++)
        ck_assert_msg(err[a] <= lim, "%s: ||model - ref|| / ||ref|| = %.3e > %.1e", name[a], err[a],
                      lim);
    case_free(&x);
    qs_ctx_free(ctx);
}

/* ---------------------------------------------------------------- tests */

/* Two full chunks and a partial one (150 = 64 + 64 + 22), GVA 2 -> 4, l2norm, h0 and dht. */
START_TEST(test_chunk_bwd_matches_the_recurrence_dense_gva_l2norm)
{
    qs_gdn_params p = {.b = 2, .t = 150, .h = 2, .hv = 4, .dk = 8, .dv = 6, .dtype = QS_FP32};
    p.use_qk_l2norm = 1;
    check_model(&p, 41, -0.5f, 1, 1, 1e-5);
}
END_TEST

/* Sequences of 5, 65, 130, 0 and 1 tokens; no h0, no dht. */
START_TEST(test_chunk_bwd_matches_the_recurrence_varlen_partial_and_empty)
{
    int32_t cu[6] = {0, 5, 70, 200, 200, 201};
    qs_gdn_params p = {.b = 5, .t = 201, .h = 1, .hv = 2, .dk = 7, .dv = 5, .dtype = QS_FP32};
    p.cu_seqlens = cu;
    check_model(&p, 43, -0.5f, 0, 0, 1e-5);
}
END_TEST

/* Raw q, k (no l2norm), MHA, h0 only; steep gates in [-3, 0). */
START_TEST(test_chunk_bwd_matches_the_recurrence_without_l2norm_steep_gates)
{
    qs_gdn_params p = {.b = 1, .t = 130, .h = 2, .hv = 2, .dk = 16, .dv = 16, .dtype = QS_FP32};
    p.scale = 0.37f;
    check_model(&p, 47, -3.0f, 1, 0, 1e-5);
}
END_TEST

/* Near-zero gates (the hard case upstream), l2norm, dht only, GVA 1 -> 3. */
START_TEST(test_chunk_bwd_matches_the_recurrence_near_zero_gates)
{
    qs_gdn_params p = {.b = 1, .t = 200, .h = 1, .hv = 3, .dk = 12, .dv = 4, .dtype = QS_FP32};
    p.use_qk_l2norm = 1;
    check_model(&p, 53, -0.01f, 0, 1, 1e-5);
}
END_TEST

/* BF16 values: the same function of the rounded inputs; dq, dk, dv rounded to BF16 by the
 * reference, so the bound is BF16's half-ulp (2^-9) in norm. */
START_TEST(test_chunk_bwd_matches_the_recurrence_bf16_values)
{
    qs_gdn_params p = {.b = 1, .t = 100, .h = 1, .hv = 2, .dk = 8, .dv = 8, .dtype = QS_FP32};
    p.use_qk_l2norm = 1;
    p.dtype = QS_BF16;
    check_model(&p, 59, -0.5f, 1, 1, 4e-3);
}
END_TEST

static Suite *chunk_bwd_suite(void)
{
    Suite *s = suite_create("gdn_chunk_bwd");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_chunk_bwd_matches_the_recurrence_dense_gva_l2norm);
    tcase_add_test(tc, test_chunk_bwd_matches_the_recurrence_varlen_partial_and_empty);
    tcase_add_test(tc, test_chunk_bwd_matches_the_recurrence_without_l2norm_steep_gates);
    tcase_add_test(tc, test_chunk_bwd_matches_the_recurrence_near_zero_gates);
    tcase_add_test(tc, test_chunk_bwd_matches_the_recurrence_bf16_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qst_run(chunk_bwd_suite());
}
