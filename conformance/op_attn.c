/* op_attn.c: the `sdpa` and `gdn` ops — softmax attention and Gated DeltaNet of
 * spec/attention.md. Inputs are generated in their dtype and handed to the reference as
 * FP32 arrays of those values; outputs are FP32 tensors (holding values of the dtype where
 * the spec rounds to it). Giving the input `dout` adds the backward outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops.h"
#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"

/* An FP32 copy of t's values (t may be FP32, BF16 or FP16). */
static qs_status as_f32(qs_ctx *ctx, const qs_tensor *t, qs_tensor *f)
{
    qs_status st = qs_tensor_alloc(ctx, f, QS_FP32, t->ndim, t->shape);
    for (size_t i = 0; st == QS_OK && i < t->numel; i++) {
        float v = t->dtype == QS_FP32   ? ((const float *)t->data)[i]
                  : t->dtype == QS_BF16 ? qs_bf16_to_f32(((const uint16_t *)t->data)[i])
                                        : qs_f16_to_f32(((const uint16_t *)t->data)[i]);
        ((float *)f->data)[i] = v;
    }
    return st;
}

/* Parses the `seqlens` parameter ("3,5,2") into b+1 prefix sums; 0 sequences when absent. */
static qs_status seqlens_get(qs_ctx *ctx, const qsk_case *c, int32_t *cu, int64_t cap,
                             int64_t *nseq)
{
    const qsk_param *p = qsk_case_param(c, "seqlens");
    *nseq = 0;
    if (!p)
        return QS_OK;
    const char *s = p->value;
    cu[0] = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1 << 20 || *nseq + 1 >= cap || (*end && *end != ','))
            return qs_ctx_error(ctx, QS_ERR_FORMAT,
                                "%s:%d:%d: seqlens '%s' is not a list of lengths like 3,5,2",
                                c->file, p->pos.line, p->pos.col, p->value);
        cu[*nseq + 1] = cu[*nseq] + (int32_t)v;
        (*nseq)++;
        s = *end ? end + 1 : end;
    }
    return QS_OK;
}

static qs_status shape_error(qs_ctx *ctx, const qsk_case *c, const char *what)
{
    return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: impossible shape: %s", c->file, c->pos.line,
                        c->pos.col, what);
}

/* ------------------------------------------------------------------ shapes of every input */

/* The input name, when the case has it, must have exactly the shape want[0..nd) that the
 * other inputs imply (what says which): a mis-shaped input would be read out of bounds. */
static qs_status attn_input_is(qs_ctx *ctx, const qsk_case *c, const char *name, int nd,
                               const int64_t *want, const char *what)
{
    const qsk_input *in = qsk_case_input(c, name);
    if (!in)
        return QS_OK;
    int same = in->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = in->shape[d] == want[d];
    if (same)
        return QS_OK;
    char got[160], exp[160];
    qsk_shape_text(in->ndim, in->shape, 0, got, sizeof got);
    qsk_shape_text(nd, want, 0, exp, sizeof exp);
    return qs_ctx_error(ctx, QS_ERR_FORMAT,
                        "%s:%d:%d: impossible shape: '%s' is %s, expected %s (%s)", c->file,
                        in->pos.line, in->pos.col, name, got, exp, what);
}

/* The inputs of an sdpa case against its parameters [CASE-OP-SDPA]: k and v carry the key
 * tokens of q's batch, dout is o's shape. */
static qs_status sdpa_shapes_check(qs_ctx *ctx, const qsk_case *c, const qs_sdpa_params *p)
{
    const qsk_input *q = qsk_case_input(c, "q");
    if (p->h < 1 || p->hkv < 1 || p->d < 1 || p->dv < 1) /* [ATTN-SHAPES] */
        return shape_error(ctx, c, "the heads h, hkv and the head dims d, dv are at least 1");
    int64_t kshape[4], vshape[4], oshape[4];
    int nd = q->ndim;
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[nd - 1] = p->dv;
    if (p->layout == QS_ATTN_THD) {
        int64_t k3[3] = {p->sk, p->hkv, p->d}, v3[3] = {p->sk, p->hkv, p->dv};
        memcpy(kshape, k3, sizeof k3);
        memcpy(vshape, v3, sizeof v3);
    } else {
        int sd = p->layout == QS_ATTN_SBHD ? 0 : 1;
        kshape[sd] = vshape[sd] = p->sk;
        kshape[1 - sd] = vshape[1 - sd] = p->b;
        kshape[2] = vshape[2] = p->hkv;
        kshape[3] = p->d;
        vshape[3] = p->dv;
    }
    qs_status st = attn_input_is(ctx, c, "k", nd, kshape, "the key tokens, hkv and d");
    if (st == QS_OK)
        st = attn_input_is(ctx, c, "v", nd, vshape, "k's tokens and heads, and dv");
    if (st == QS_OK)
        st = attn_input_is(ctx, c, "dout", nd, oshape, "the shape of o");
    return st;
}

/* The inputs of a gdn case against its parameters [CASE-OP-GDN], as attn_params.h lays them
 * out: q, k [b, t, h, dk]; v, dout [b, t, hv, dv]; g, beta [b, t, hv]; h0 [b, hv, dk, dv];
 * with seqlens the arrays drop b. g, beta and h0 hold FP32 values of any input dtype. */
static qs_status gdn_shapes_check(qs_ctx *ctx, const qsk_case *c, const qs_gdn_params *p)
{
    static const char *const names[] = {"q", "k", "v", "g", "beta", "h0", "dout"};
    const char *const why[] = {
        "b, t, h and dk",      "q's shape",        "q's b and t, hv and dv", "q's b and t, and hv",
        "q's b and t, and hv", "b, hv, dk and dv", "the shape of o"};
    if (p->hv < 1 || p->dk < 1 || p->dv < 1) /* [GDN-SHAPES] */
        return shape_error(ctx, c, "the heads h, hv and the head dims dk, dv are at least 1");
    int o = p->cu_seqlens ? 1 : 0; /* varlen arrays drop b */
    int64_t qk[4] = {p->b, p->t, p->h, p->dk}, vo[4] = {p->b, p->t, p->hv, p->dv};
    int64_t gb[3] = {p->b, p->t, p->hv}, h0[4] = {p->b, p->hv, p->dk, p->dv};
    const int64_t *want[] = {qk + o, qk + o, vo + o, gb + o, gb + o, h0, vo + o};
    const int nd[] = {4 - o, 4 - o, 4 - o, 3 - o, 3 - o, 4, 4 - o};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const qsk_input *in = qsk_case_input(c, names[i]);
        if (in && in->dtype != QS_FP32 && in->dtype != QS_BF16 && in->dtype != QS_FP16)
            return qs_ctx_error(
                ctx, QS_ERR_FORMAT, "%s:%d:%d: gdn input '%s' must be fp32, bf16 or fp16, not %s",
                c->file, in->pos.line, in->pos.col, names[i], qs_dtype_name(in->dtype));
        qs_status st = attn_input_is(ctx, c, names[i], nd[i], want[i], why[i]);
        if (st != QS_OK)
            return st;
    }
    return QS_OK;
}

/* ------------------------------------------------------------------ sdpa */

#define QSK_MAX_SEQS 64

typedef struct sdpa_case {
    qs_sdpa_params p;
    int32_t cu[QSK_MAX_SEQS + 1];
} sdpa_case;

static qs_status sdpa_params_get(qs_ctx *ctx, const qsk_case *c, sdpa_case *s)
{
    static const char *const keys[] = {"layout", "mask", "scale", "seqlens", NULL};
    static const char *const layouts[] = {"sbhd", "bshd", "thd", NULL};
    static const char *const masks[] = {"none", "causal", NULL};
    qs_status st = qsk_check_param_keys(ctx, c, keys);
    if (st != QS_OK)
        return st;
    memset(s, 0, sizeof *s);
    int lay = qsk_param_choice(ctx, c, "layout", layouts, 0);
    int mask = qsk_param_choice(ctx, c, "mask", masks, 0);
    if (lay < 0 || mask < 0)
        return QS_ERR_FORMAT;
    s->p.layout = (qs_attn_layout)lay;
    s->p.mask = (qs_attn_mask)mask;
    const qsk_param *sc = qsk_case_param(c, "scale");
    if (sc)
        s->p.scale = strtof(sc->value, NULL);
    const qsk_input *q = qsk_case_input(c, "q"), *k = qsk_case_input(c, "k"),
                    *v = qsk_case_input(c, "v");
    if (!q || !k || !v)
        return QS_OK; /* the input check names what is missing */
    int nd = lay == QS_ATTN_THD ? 3 : 4;
    if (q->ndim != nd || k->ndim != nd || v->ndim != nd)
        return shape_error(ctx, c, "q, k and v need [s,b,h,d], [b,s,h,d] or (thd) [t,h,d]");
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return shape_error(ctx, c, "q, k and v must have one dtype");
    s->p.dtype = q->dtype;
    int hd = nd - 2; /* the head dimension's index */
    s->p.h = q->shape[hd];
    s->p.hkv = k->shape[hd];
    s->p.d = q->shape[hd + 1];
    s->p.dv = v->shape[hd + 1];
    if (k->shape[hd + 1] != s->p.d || v->shape[hd] != s->p.hkv || (s->p.hkv && s->p.h % s->p.hkv))
        return shape_error(ctx, c, "k must be [.., hkv, d] and v [.., hkv, dv] with h % hkv == 0");
    if (lay == QS_ATTN_THD) {
        int64_t nseq;
        st = seqlens_get(ctx, c, s->cu, QSK_MAX_SEQS + 1, &nseq);
        if (st != QS_OK)
            return st;
        if (nseq == 0 || s->cu[nseq] != q->shape[0] || q->shape[0] != k->shape[0])
            return shape_error(ctx, c, "thd needs seqlens summing to the token count of q and k");
        s->p.b = nseq;
        s->p.sq = s->p.sk = q->shape[0];
        s->p.cu_seqlens_q = s->p.cu_seqlens_kv = s->cu;
    } else {
        int sd = lay == QS_ATTN_SBHD ? 0 : 1, bd = 1 - sd;
        s->p.b = q->shape[bd];
        s->p.sq = q->shape[sd];
        s->p.sk = k->shape[sd];
        if (k->shape[bd] != s->p.b || v->shape[bd] != s->p.b || v->shape[sd] != s->p.sk)
            return shape_error(ctx, c, "q, k and v disagree on the batch or key length");
    }
    return sdpa_shapes_check(ctx, c, &s->p);
}

static qs_status sdpa_check(qs_ctx *ctx, const qsk_case *c)
{
    static const char *const fwd_in[] = {"q", "k", "v", NULL};
    static const char *const bwd_in[] = {"q", "k", "v", "dout", NULL};
    static const qs_dtype dtypes[] = {QS_FP32, QS_BF16, QS_FP16, QS_DTYPE_INVALID};
    static const char *const outputs[] = {"o", "lse", "dq", "dk", "dv", NULL};
    sdpa_case s;
    qs_status st =
        qsk_check_inputs(ctx, c, qsk_case_input(c, "dout") ? bwd_in : fwd_in, dtypes, 3, 4);
    if (st == QS_OK)
        st = sdpa_params_get(ctx, c, &s);
    if (st == QS_OK)
        st = qsk_check_outputs(ctx, c, outputs);
    return st;
}

/* An FP32 output tensor of the given shape, moved into out under name. */
static qs_status add_out(qs_ctx *ctx, qsk_results *out, const char *name, qs_tensor *t)
{
    return qsk_results_add(ctx, out, name, t);
}

/* [CASE-BACKEND-UNSUPPORTED] Whether the plugin has the capability and both slots a case
 * needs (a table built before the slots were appended has them NULL). */
static int has_slots(const qsk_plugin *pl, uint64_t cap, int fwd_ok, int bwd_ok, int bwd)
{
    return (pl->table->caps & cap) && fwd_ok && (!bwd || bwd_ok);
}

/* A slot's answer as the kit reports it: a refusal is "not supported" with the slot's
 * reason; an unknown claim is an ABI error. */
static qs_status slot_answer(qs_ctx *ctx, const qsk_plugin *pl, qs_status st, const char *slot,
                             char *why, size_t len, qs_attn_claim claim)
{
    why[len - 1] = '\0';
    const char *sep = why[0] ? ": " : "";
    if (st == QS_ERR_UNSUPPORTED)
        return qs_ctx_error(ctx, st, "%s: %s%s", slot, sep[0] ? "" : "refused", why);
    if (st != QS_OK)
        return qs_ctx_error(ctx, st, "backend %s: %s failed: %s%s%s", pl->table->name, slot,
                            qs_status_str(st), sep, why);
    if ((unsigned)claim >= QS_ATTN_CLAIM_COUNT)
        return qs_ctx_error(ctx, QS_ERR_ABI, "backend %s: %s returned an unknown claim %d",
                            pl->table->name, slot, (int)claim);
    return QS_OK;
}

/* Calls the plugin's sdpa slot (bwd: sdpa_bwd) on s's request. */
static qs_status sdpa_slot(qs_ctx *ctx, const qsk_plugin *pl, const sdpa_case *s, int bwd,
                           qs_tensor *f, qs_tensor *o, qs_tensor *lse, qs_tensor *g)
{
    char why[256] = "";
    qs_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.p = s->p;
    a.p.scale = qs_sdpa_scale(&s->p); /* [ATTN-SCALE]: the kit resolves it */
    a.q = f[0].data, a.k = f[1].data, a.v = f[2].data, a.o = o->data;
    a.why = why, a.why_len = sizeof why;
    a.claim = QS_ATTN_CLAIM_TOLERANCE;
    qs_status st;
    if (!bwd) {
        a.lse = lse->data;
        st = pl->table->sdpa_fwd(pl->state, &a);
    } else {
        a.dout = f[3].data;
        a.dq = g[0].data, a.dk = g[1].data, a.dv = g[2].data;
        st = pl->table->sdpa_bwd(pl->state, &a);
    }
    return slot_answer(ctx, pl, st, bwd ? "sdpa_bwd" : "sdpa_fwd", why, sizeof why, a.claim);
}

/* The case's outputs from the reference (pl NULL) or from the plugin's slots. */
static qs_status sdpa_exec(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                           const qs_tensor *inputs, qsk_results *out)
{
    sdpa_case s;
    qs_status st = sdpa_params_get(ctx, c, &s);
    if (st != QS_OK)
        return st;
    if (pl) {
        const qs_backend *t = pl->table;
        int bwd = qsk_case_input(c, "dout") != NULL;
        if (!has_slots(pl, QS_CAP_SDPA,
                       QS_BACKEND_HAS_SLOT(t->struct_size, sdpa_fwd) && t->sdpa_fwd,
                       QS_BACKEND_HAS_SLOT(t->struct_size, sdpa_bwd) && t->sdpa_bwd, bwd)) {
            qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no %s (QS_CAP_SDPA)",
                         bwd ? "sdpa_fwd and sdpa_bwd slots" : "sdpa_fwd slot");
            return QS_ERR_UNSUPPORTED;
        }
    }
    const char *names[4] = {"q", "k", "v", "dout"};
    qs_tensor f[4];
    memset(f, 0, sizeof f);
    int nin = qsk_case_input(c, "dout") ? 4 : 3;
    for (int i = 0; i < nin && st == QS_OK; i++)
        st = as_f32(ctx, qsk_input_tensor(c, inputs, names[i]), &f[i]);
    qs_tensor o, lse, g[3];
    memset(&o, 0, sizeof o);
    memset(&lse, 0, sizeof lse);
    memset(g, 0, sizeof g);
    int64_t oshape[4];
    memcpy(oshape, f[0].shape, sizeof oshape);
    oshape[f[0].ndim - 1] = s.p.dv;
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &o, QS_FP32, f[0].ndim, oshape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &lse, QS_FP32, f[0].ndim - 1, f[0].shape);
    if (st == QS_OK)
        st = pl ? sdpa_slot(ctx, pl, &s, 0, f, &o, &lse, g)
                : qs_sdpa_fwd(ctx, &s.p, f[0].data, f[1].data, f[2].data, o.data, lse.data);
    if (st == QS_OK && nin == 4) {
        for (int i = 0; i < 3 && st == QS_OK; i++)
            st = qs_tensor_alloc(ctx, &g[i], QS_FP32, f[i].ndim, f[i].shape);
        if (st == QS_OK)
            st = pl ? sdpa_slot(ctx, pl, &s, 1, f, &o, &lse, g)
                    : qs_sdpa_bwd(ctx, &s.p, f[0].data, f[1].data, f[2].data, o.data, f[3].data,
                                  g[0].data, g[1].data, g[2].data);
    }
    if (st == QS_OK)
        st = add_out(ctx, out, "o", &o);
    if (st == QS_OK)
        st = add_out(ctx, out, "lse", &lse);
    const char *gn[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3 && st == QS_OK && nin == 4; i++)
        st = add_out(ctx, out, gn[i], &g[i]);
    for (int i = 0; i < 4; i++)
        qs_tensor_free(&f[i]);
    for (int i = 0; i < 3; i++)
        qs_tensor_free(&g[i]);
    qs_tensor_free(&o);
    qs_tensor_free(&lse);
    return st;
}

static qs_status sdpa_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out)
{
    return sdpa_exec(ctx, NULL, c, inputs, out);
}

/* [CASE-OP-SDPA] [CASE-PLUGIN-REF]: the case through sdpa_fwd (and sdpa_bwd when it gives
 * dout), compared with the reference's outputs as the case states. */
static qs_status sdpa_backend(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                              const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref; /* compared by the run (qsk_compare_outputs) */
    return sdpa_exec(ctx, pl, c, inputs, out);
}

/* ------------------------------------------------------------------ gdn */

typedef struct gdn_case {
    qs_gdn_params p;
    int64_t chunk;
    int32_t cu[QSK_MAX_SEQS + 1];
} gdn_case;

static qs_status gdn_params_get(qs_ctx *ctx, const qsk_case *c, gdn_case *s)
{
    static const char *const keys[] = {"l2norm", "scale", "chunk", "seqlens", NULL};
    qs_status st = qsk_check_param_keys(ctx, c, keys);
    if (st != QS_OK)
        return st;
    memset(s, 0, sizeof *s);
    uint64_t l2 = 0, chunk = 0;
    st = qsk_param_u64(ctx, c, "l2norm", 0, &l2);
    if (st == QS_OK)
        st = qsk_param_u64(ctx, c, "chunk", 0, &chunk);
    if (st != QS_OK)
        return st;
    if (chunk > 256)
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: chunk is 0 (the recurrence) or 1..256",
                            c->file, c->op_pos.line, c->op_pos.col);
    s->chunk = (int64_t)chunk;
    s->p.use_qk_l2norm = l2 != 0;
    const qsk_param *sc = qsk_case_param(c, "scale");
    if (sc)
        s->p.scale = strtof(sc->value, NULL);
    const qsk_input *q = qsk_case_input(c, "q"), *v = qsk_case_input(c, "v"),
                    *k = qsk_case_input(c, "k");
    if (!q || !v || !k)
        return QS_OK;
    int64_t nseq;
    st = seqlens_get(ctx, c, s->cu, QSK_MAX_SEQS + 1, &nseq);
    if (st != QS_OK)
        return st;
    int nd = nseq ? 3 : 4, o = nd - 4; /* varlen arrays drop the batch dimension */
    if (q->ndim != nd || v->ndim != nd || k->ndim != nd)
        return shape_error(ctx, c, "q, k are [b,t,h,dk] and v [b,t,hv,dv] (no b with seqlens)");
    s->p.b = nseq ? nseq : q->shape[0];
    s->p.t = q->shape[1 + o];
    s->p.h = q->shape[2 + o];
    s->p.dk = q->shape[3 + o];
    s->p.hv = v->shape[2 + o];
    s->p.dv = v->shape[3 + o];
    s->p.dtype = q->dtype;
    if (nseq) {
        if (s->cu[nseq] != s->p.t)
            return shape_error(ctx, c, "seqlens must sum to the token count");
        s->p.cu_seqlens = s->cu;
    }
    if (s->p.h == 0 || s->p.hv % s->p.h || k->dtype != q->dtype || v->dtype != q->dtype)
        return shape_error(ctx, c, "hv must be a multiple of h; q, k, v share one dtype");
    const qsk_input *dout = qsk_case_input(c, "dout");
    if (dout && dout->dtype != q->dtype)
        return shape_error(ctx, c, "dout has the dtype of q, k and v");
    return gdn_shapes_check(ctx, c, &s->p);
}

static qs_status gdn_check(qs_ctx *ctx, const qsk_case *c)
{
    static const char *const all_in[] = {"q", "k", "v", "g", "beta", "h0", "dout", NULL};
    static const qs_dtype dtypes[] = {QS_FP32, QS_BF16, QS_FP16, QS_DTYPE_INVALID};
    static const char *const outputs[] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0", NULL};
    for (size_t i = 0; i < c->ninputs; i++) {
        int known = 0;
        for (const char *const *n = all_in; *n; n++)
            known |= strcmp(*n, c->inputs[i].name) == 0;
        if (!known)
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op 'gdn' takes no input '%s'",
                                c->file, c->inputs[i].pos.line, c->inputs[i].pos.col,
                                c->inputs[i].name);
    }
    static const char *const req[] = {"q", "k", "v", "g", "beta", NULL};
    for (const char *const *n = req; *n; n++)
        if (!qsk_case_input(c, *n))
            return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op 'gdn' needs an input '%s'",
                                c->file, c->pos.line, c->pos.col, *n);
    (void)dtypes;
    gdn_case s;
    qs_status st = gdn_params_get(ctx, c, &s);
    if (st == QS_OK && qsk_case_input(c, "dout") && s.chunk)
        st = qs_ctx_error(
            ctx, QS_ERR_FORMAT,
            "%s:%d:%d: the backward is the recurrence's: chunk applies to the forward only",
            c->file, c->op_pos.line, c->op_pos.col);
    if (st == QS_OK)
        st = qsk_check_outputs(ctx, c, outputs);
    return st;
}

/* [GDN-SCALE]: the kit resolves the default scale. */
static float gdn_scale(const qs_gdn_params *p)
{
    return p->scale != 0.0f ? p->scale : qs_rsqrtf((float)p->dk);
}

/* Calls the plugin's gdn_fwd (chunk is the case's; the slot chooses its own evaluation). */
static qs_status gdn_slot_fwd(qs_ctx *ctx, const qsk_plugin *pl, const gdn_case *s, qs_tensor *f,
                              qs_tensor *o, qs_tensor *ht)
{
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = s->p;
    a.p.scale = gdn_scale(&s->p);
    a.q = f[0].data, a.k = f[1].data, a.v = f[2].data, a.g = f[3].data, a.beta = f[4].data;
    a.h0 = f[5].data, a.o = o->data, a.ht = ht->data;
    a.why = why, a.why_len = sizeof why;
    a.claim = QS_ATTN_CLAIM_TOLERANCE;
    qs_status st = pl->table->gdn_fwd(pl->state, &a);
    return slot_answer(ctx, pl, st, "gdn_fwd", why, sizeof why, a.claim);
}

static qs_status gdn_slot_bwd(qs_ctx *ctx, const qsk_plugin *pl, const gdn_case *s, qs_tensor *f,
                              qs_tensor *g)
{
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = s->p;
    a.p.scale = gdn_scale(&s->p);
    a.q = f[0].data, a.k = f[1].data, a.v = f[2].data, a.g = f[3].data, a.beta = f[4].data;
    a.h0 = f[5].data, a.dout = f[6].data;
    a.dq = g[0].data, a.dk = g[1].data, a.dv = g[2].data, a.dg = g[3].data;
    a.dbeta = g[4].data, a.dh0 = g[5].data;
    a.why = why, a.why_len = sizeof why;
    a.claim = QS_ATTN_CLAIM_TOLERANCE;
    qs_status st = pl->table->gdn_bwd(pl->state, &a);
    return slot_answer(ctx, pl, st, "gdn_bwd", why, sizeof why, a.claim);
}

/* The case's outputs from the reference (pl NULL) or from the plugin's slots. */
static qs_status gdn_exec(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                          const qs_tensor *inputs, qsk_results *out)
{
    gdn_case s;
    qs_status st = gdn_params_get(ctx, c, &s);
    if (st != QS_OK)
        return st;
    if (pl) {
        const qs_backend *t = pl->table;
        int bwd = qsk_case_input(c, "dout") != NULL;
        if (!has_slots(pl, QS_CAP_GDN, QS_BACKEND_HAS_SLOT(t->struct_size, gdn_fwd) && t->gdn_fwd,
                       QS_BACKEND_HAS_SLOT(t->struct_size, gdn_bwd) && t->gdn_bwd, bwd)) {
            qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "no %s (QS_CAP_GDN)",
                         bwd ? "gdn_fwd and gdn_bwd slots" : "gdn_fwd slot");
            return QS_ERR_UNSUPPORTED;
        }
    }
    const char *names[7] = {"q", "k", "v", "g", "beta", "h0", "dout"};
    qs_tensor f[7];
    memset(f, 0, sizeof f);
    for (int i = 0; i < 7 && st == QS_OK; i++) {
        const qs_tensor *t = qsk_input_tensor(c, inputs, names[i]);
        if (t)
            st = as_f32(ctx, t, &f[i]);
    }
    int64_t sshape[4] = {s.p.b, s.p.hv, s.p.dk, s.p.dv};
    qs_tensor o, ht, g[6];
    memset(&o, 0, sizeof o);
    memset(&ht, 0, sizeof ht);
    memset(g, 0, sizeof g);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &o, QS_FP32, f[2].ndim, f[2].shape);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, &ht, QS_FP32, 4, sshape);
    if (st == QS_OK && pl)
        st = gdn_slot_fwd(ctx, pl, &s, f, &o, &ht);
    else if (st == QS_OK)
        st = s.chunk ? qs_gdn_fwd_chunked(ctx, &s.p, s.chunk, f[0].data, f[1].data, f[2].data,
                                          f[3].data, f[4].data, f[5].data, o.data, ht.data)
                     : qs_gdn_fwd(ctx, &s.p, f[0].data, f[1].data, f[2].data, f[3].data, f[4].data,
                                  f[5].data, o.data, ht.data);
    int bwd = f[6].data != NULL;
    const int src[6] = {0, 1, 2, 3, 4, -1};
    for (int i = 0; bwd && i < 6 && st == QS_OK; i++)
        st = src[i] >= 0 ? qs_tensor_alloc(ctx, &g[i], QS_FP32, f[src[i]].ndim, f[src[i]].shape)
                         : qs_tensor_alloc(ctx, &g[i], QS_FP32, 4, sshape);
    if (st == QS_OK && bwd && pl)
        st = gdn_slot_bwd(ctx, pl, &s, f, g);
    else if (st == QS_OK && bwd)
        st = qs_gdn_bwd(ctx, &s.p, f[0].data, f[1].data, f[2].data, f[3].data, f[4].data, f[5].data,
                        f[6].data, NULL, g[0].data, g[1].data, g[2].data, g[3].data, g[4].data,
                        g[5].data);
    if (st == QS_OK)
        st = add_out(ctx, out, "o", &o);
    if (st == QS_OK)
        st = add_out(ctx, out, "ht", &ht);
    const char *gn[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
    for (int i = 0; i < 6 && st == QS_OK && bwd; i++)
        st = add_out(ctx, out, gn[i], &g[i]);
    for (int i = 0; i < 7; i++)
        qs_tensor_free(&f[i]);
    for (int i = 0; i < 6; i++)
        qs_tensor_free(&g[i]);
    qs_tensor_free(&o);
    qs_tensor_free(&ht);
    return st;
}

static qs_status gdn_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out)
{
    return gdn_exec(ctx, NULL, c, inputs, out);
}

/* [CASE-OP-GDN] [CASE-PLUGIN-REF]: the case through gdn_fwd (and gdn_bwd when it gives
 * dout), compared with the reference's outputs as the case states. */
static qs_status gdn_backend(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                             const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref; /* compared by the run (qsk_compare_outputs) */
    return gdn_exec(ctx, pl, c, inputs, out);
}

const qsk_op qsk_op_sdpa = {"sdpa", "softmax attention (spec/attention.md)", sdpa_check, sdpa_ref,
                            sdpa_backend};
const qsk_op qsk_op_gdn = {"gdn", "Gated DeltaNet (spec/attention.md)", gdn_check, gdn_ref,
                           gdn_backend};
