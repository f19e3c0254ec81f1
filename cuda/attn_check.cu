/* attn_check.cu: the plugin's cast16, sdpa and gdn slots against the reference (libqspec)
 * on small cases of every family — formats x rounding modes x overflow policies with
 * per-element random bits; sbhd/bshd/thd (padded too), none/causal, MHA/GQA/MQA, d != dv
 * (192/128), the absorbed latent MQA (576/512); GDN dense/varlen, GVA, l2norm, states —
 * in FP32, BF16 and FP16. Prints, per case, the elements that differ from the reference's
 * bits and the largest excess over the tolerance the conformance cases use ([ATTN-TOL]:
 * |x - ref| <= 1e-5 + rtol |ref|, rtol 1e-3 for an FP32 output and 1e-3 + 2 ulp for one
 * rounded to BF16 or FP16), then times the slots
 * at production shapes. Also checks the device exp/log against qs_expf/qs_logf. Needs a GPU;
 * exit status 0 when every case is within its tolerance and every cast is bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

#include "bench/attn_inputs.h"
#include "qc_mathf.cuh"
#include "qc_slots.h"
#include "qspec/attention.h"
#include "qspec/mathf.h"

namespace
{

int g_fail = 0;
uint64_t g_rng = 0x9E3779B97F4A7C15ull;

uint32_t rnd32()
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return static_cast<uint32_t>(g_rng >> 16);
}
float unif()
{
    return (rnd32() >> 8) * 0x1p-24f;
}
float gauss()
{
    float s = 0;
    for (int i = 0; i < 4; i++)
        s += unif();
    return (s - 2.0f) * 1.7320508f;
}
float rdt(qs_dtype dt, float x)
{
    return dt == QS_BF16 ? qs_round_bf16(x) : dt == QS_FP16 ? qs_round_f16(x) : x;
}
std::vector<float> randn(size_t n, qs_dtype dt, float sc)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = rdt(dt, gauss() * sc);
    return v;
}
double now()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
const char *dname(qs_dtype d)
{
    return d == QS_BF16 ? "bf16" : d == QS_FP16 ? "fp16" : "fp32";
}

/* [ATTN-TOL] rtol of an output of dtype dt: 1e-3, plus 2 . 2^(1-p) when rounded to a dtype of
 * p bits of precision. */
double rtol_of(qs_dtype dt)
{
    return dt == QS_BF16 ? 1e-3 + 2 * 0x1p-7 : dt == QS_FP16 ? 1e-3 + 2 * 0x1p-10 : 1e-3;
}

/* One output compared: bit differences, max |err|, worst err / tolerance. */
struct cmp {
    size_t n = 0, diff = 0;
    double maxerr = 0, worst = 0, rtol;
    explicit cmp(qs_dtype dt) : rtol(rtol_of(dt)) {}
    void add(const float *a, const float *ref, size_t cnt)
    {
        for (size_t e = 0; e < cnt; e++) {
            n++;
            if (fbits(a[e]) == fbits(ref[e]))
                continue;
            diff++;
            double err = fabs((double)a[e] - ref[e]);
            if (!(err == err))
                err = INFINITY;
            double tol = 1e-5 + rtol * fabs((double)ref[e]);
            maxerr = err > maxerr ? err : maxerr;
            worst = err / tol > worst ? err / tol : worst;
        }
    }
};

void line(const char *slot, const char *name, const char *out, const cmp &c)
{
    bool ok = c.worst <= 1.0;
    if (!ok)
        g_fail++;
    printf("%-8s %-34s %-6s n=%-8zu bitdiff=%-6zu maxerr=%.3g tol=1e-5+%.6g|ref| %s\n", slot,
           name, out, c.n, c.diff, c.maxerr, c.rtol, ok ? "ok" : "FAIL");
}

/* ---------------------------------------------------------------- cast16 */

void check_cast16()
{
    const qs_dtype dts[] = {QS_BF16, QS_FP16, QS_E4M3, QS_E5M2, QS_E8M0, QS_E2M1, QS_E2M3, QS_E3M2};
    for (qs_dtype dt : dts) {
        size_t n = (dt == QS_BF16 || dt == QS_FP16) ? (1u << 20) : (1u << 16);
        std::vector<float> in(n);
        std::vector<uint32_t> sr(n);
        for (size_t e = 0; e < n; e++) {
            uint32_t b = rnd32();
            if (e % 4 == 1) /* near the format's range */
                b = (b & 0x807FFFFFu) | ((100u + rnd32() % 60u) << 23);
            if (e < 16) {
                static const uint32_t sp[16] = {0,           0x80000000u, 0x7F800000u, 0xFF800000u,
                                                0x7FC00000u, 0xFFC00001u, 0x7F7FFFFFu, 1u,
                                                0x43E00000u, 0x43E80000u, 0x47700000u, 0x477FE000u,
                                                0x3F800000u, 0xBF800000u, 0x00800000u, 0x477FF000u};
                b = sp[e];
            }
            memcpy(&in[e], &b, 4);
            sr[e] = rnd32() ^ (rnd32() << 16);
        }
        long bad = 0, total = 0;
        std::vector<uint16_t> out(n);
        for (int r = 0; r < QS_ROUND_COUNT; r++)
            for (int o = 0; o < QS_OVF_COUNT; o++) {
                qs_cast16_args a = {dt,        (qs_round)r, (qs_overflow)o,
                                    n,         in.data(),   r == QS_ROUND_SR ? sr.data() : nullptr,
                                    out.data()};
                if (qc_slot_cast16(nullptr, &a) != QS_OK) {
                    printf("cast16 %s r=%d o=%d: slot failed\n", qs_dtype_name(dt), r, o);
                    bad++;
                    continue;
                }
                for (size_t e = 0; e < n; e++) {
                    qs_cast_mode m = {(qs_round)r, (qs_overflow)o, r == QS_ROUND_SR ? sr[e] : 0u};
                    uint32_t want = 0;
                    qs_encode_f32(dt, in[e], m, &want);
                    total++;
                    if (want != out[e] && bad++ < 5)
                        printf("cast16 %s r=%d o=%d x=0x%08x ref=0x%04x cuda=0x%04x\n",
                               qs_dtype_name(dt), r, o, fbits(in[e]), want, out[e]);
                }
            }
        printf("cast16   %-5s %zu inputs x 6 modes x 3 policies: %ld of %ld codes differ %s\n",
               qs_dtype_name(dt), n, bad, total, bad ? "FAIL" : "ok");
        if (bad)
            g_fail++;
    }
}

/* ---------------------------------------------------------------- device exp / log */

__global__ void mathf_kernel(const float *x, float *e, float *l, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        e[i] = qc::mf::expf_cr(x[i]);
        l[i] = qc::mf::logf_cr(x[i]);
    }
}

void check_mathf()
{
    size_t n = 1u << 24;
    std::vector<float> x(n), e(n), l(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)(i * 256u) | (rnd32() & 0xFFu);
        memcpy(&x[i], &b, 4);
    }
    float *dx, *de, *dl;
    cudaMalloc(&dx, n * 4);
    cudaMalloc(&de, n * 4);
    cudaMalloc(&dl, n * 4);
    cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
    mathf_kernel<<<(unsigned)(n / 256), 256>>>(dx, de, dl, n);
    cudaMemcpy(e.data(), de, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(l.data(), dl, n * 4, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(de);
    cudaFree(dl);
    long be = 0, bl = 0;
    for (size_t i = 0; i < n; i++) {
        be += fbits(e[i]) != fbits(qs_expf(x[i]));
        bl += fbits(l[i]) != fbits(qs_logf(x[i]));
    }
    printf("mathf    device exp/log on %zu FP32 patterns (every 256th + random low bits): "
           "%ld exp, %ld log differ from qs_expf/qs_logf %s\n",
           n, be, bl, be || bl ? "FAIL" : "ok");
    if (be || bl)
        g_fail++;
}

/* ---------------------------------------------------------------- sdpa */

/* a case of cuda/bench/attn_inputs.h, with thd's padded cu_seqlens when they are set */
struct sdpa_case : qc::check::small_case {
    std::vector<int32_t> padq, padk;
};

void run_sdpa(qs_ctx *ctx, const sdpa_case &c, qs_dtype dt)
{
    qs_sdpa_params p = qc::check::case_params(c, dt);
    if (c.layout == QS_ATTN_THD) {
        p.cu_seqlens_q_padded = c.padq.empty() ? nullptr : c.padq.data();
        p.cu_seqlens_kv_padded = c.padk.empty() ? nullptr : c.padk.data();
    }
    int64_t tq = c.layout == QS_ATTN_THD ? c.sq : c.b * c.sq;
    int64_t tk = c.layout == QS_ATTN_THD ? c.sk : c.b * c.sk;
    size_t nq = tq * c.h * c.d, nk = tk * c.hkv * c.d, nv = tk * c.hkv * c.dv, no = tq * c.h * c.dv;
    auto q = randn(nq, dt, 1.0f), k = randn(nk, dt, 1.0f), v = randn(nv, dt, 1.0f);
    auto dout = randn(no, dt, 1.0f);
    std::vector<float> ro(no), rl(tq * c.h), go(no), gl(tq * c.h);
    std::vector<float> rdq(nq), rdk(nk), rdv(nv), gdq(nq), gdk(nk), gdv(nv);
    if (qs_sdpa_fwd(ctx, &p, q.data(), k.data(), v.data(), ro.data(), rl.data()) != QS_OK ||
        qs_sdpa_bwd(ctx, &p, q.data(), k.data(), v.data(), ro.data(), dout.data(), rdq.data(),
                    rdk.data(), rdv.data()) != QS_OK) {
        printf("sdpa %s: reference failed: %s\n", c.name, qs_ctx_errmsg(ctx));
        g_fail++;
        return;
    }
    char why[256] = "";
    qs_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = go.data();
    a.lse = gl.data();
    a.why = why;
    a.why_len = sizeof why;
    qs_status s1 = qc_slot_sdpa_fwd(nullptr, &a);
    a.o = ro.data();
    a.dout = dout.data();
    a.dq = gdq.data();
    a.dk = gdk.data();
    a.dv = gdv.data();
    qs_status s2 = qc_slot_sdpa_bwd(nullptr, &a);
    char name[96];
    snprintf(name, sizeof name, "%s %s", c.name, dname(dt));
    if (s1 != QS_OK || s2 != QS_OK) {
        printf("sdpa %s: slot failed (%d %d): %s\n", name, s1, s2, why);
        g_fail++;
        return;
    }
    cmp co(dt), cl(QS_FP32), cq(dt), ck(dt), cv(dt);
    co.add(go.data(), ro.data(), no);
    cl.add(gl.data(), rl.data(), gl.size());
    cq.add(gdq.data(), rdq.data(), nq);
    ck.add(gdk.data(), rdk.data(), nk);
    cv.add(gdv.data(), rdv.data(), nv);
    line("sdpa", name, "o", co);
    line("sdpa", name, "lse", cl);
    line("sdpa", name, "dq", cq);
    line("sdpa", name, "dk", ck);
    line("sdpa", name, "dv", cv);
}

void check_sdpa(qs_ctx *ctx)
{
    std::vector<sdpa_case> cs;
    for (int m = 0; m < 2; m++) {
        qs_attn_mask mk = m ? QS_ATTN_MASK_CAUSAL : QS_ATTN_MASK_NONE;
        const char *mn = m ? "causal" : "none";
        char buf[8][64];
        snprintf(buf[0], 64, "sbhd mha %s", mn);
        snprintf(buf[1], 64, "sbhd gqa %s sq<sk", mn);
        snprintf(buf[2], 64, "bshd mqa %s sq>sk", mn);
        snprintf(buf[3], 64, "thd gqa %s", mn);
        snprintf(buf[4], 64, "thd padded mqa %s", mn);
        snprintf(buf[5], 64, "sbhd 192/128 %s", mn);
        snprintf(buf[6], 64, "bshd absorbed 576/512 %s", mn);
        snprintf(buf[7], 64, "sbhd long row %s", mn);
        for (int e = 0; e < 8; e++)
            cs.push_back(
                sdpa_case{{strdup(buf[e]), QS_ATTN_SBHD, mk, 2, 5, 5, 4, 4, 16, 16, {}, {}}, {}, {}});
        size_t base = cs.size() - 8;
        cs[base + 1].sq = 5;
        cs[base + 1].sk = 9;
        cs[base + 1].hkv = 2;
        cs[base + 2].layout = QS_ATTN_BSHD;
        cs[base + 2].sq = 9;
        cs[base + 2].sk = 4;
        cs[base + 2].hkv = 1;
        sdpa_case &t = cs[base + 3];
        t.layout = QS_ATTN_THD;
        t.b = 3;
        t.hkv = 2;
        t.cu = {0, 3, 3, 10};
        t.cuk = {0, 5, 6, 10};
        t.sq = 10;
        t.sk = 10;
        sdpa_case &tp = cs[base + 4];
        tp.layout = QS_ATTN_THD;
        tp.b = 3;
        tp.hkv = 1;
        tp.cu = {0, 3, 3, 10};
        tp.cuk = {0, 5, 5, 9};
        tp.padq = {0, 4, 6, 14};
        tp.padk = {0, 8, 9, 16};
        tp.sq = 14;
        tp.sk = 16;
        cs[base + 5].d = 192;
        cs[base + 5].dv = 128;
        cs[base + 5].sq = 7;
        cs[base + 5].sk = 7;
        sdpa_case &ab = cs[base + 6];
        ab.layout = QS_ATTN_BSHD;
        ab.h = 4;
        ab.hkv = 1;
        ab.d = 576;
        ab.dv = 512;
        ab.sq = 6;
        ab.sk = 6;
        sdpa_case &lr = cs[base + 7]; /* rows longer than one score tile */
        lr.b = 1;
        lr.h = 2;
        lr.hkv = 1;
        lr.sq = 3000;
        lr.sk = 4500;
        lr.d = 8;
        lr.dv = 8;
    }
    for (const auto &c : cs)
        for (qs_dtype dt : {QS_FP32, QS_BF16, QS_FP16})
            run_sdpa(ctx, c, dt);
}

/* ---------------------------------------------------------------- gdn */

struct gdn_case {
    const char *name;
    int64_t b, t, h, hv, dk, dv;
    int l2, states;
    std::vector<int32_t> cu;
};

void run_gdn(qs_ctx *ctx, const gdn_case &c, qs_dtype dt)
{
    qs_gdn_params p;
    memset(&p, 0, sizeof p);
    p.b = c.b;
    p.t = c.t;
    p.h = c.h;
    p.hv = c.hv;
    p.dk = c.dk;
    p.dv = c.dv;
    p.cu_seqlens = c.cu.empty() ? nullptr : c.cu.data();
    p.scale = qs_rsqrtf((float)c.dk);
    p.use_qk_l2norm = c.l2;
    p.dtype = dt;
    int64_t T = c.cu.empty() ? c.b * c.t : c.t;
    size_t nqk = T * c.h * c.dk, nv = T * c.hv * c.dv, ng = T * c.hv, ns = c.b * c.hv * c.dk * c.dv;
    float qks = c.l2 ? 1.0f : 1.0f / sqrtf((float)c.dk);
    auto q = randn(nqk, dt, qks), k = randn(nqk, dt, qks), v = randn(nv, dt, 1.0f);
    auto dout = randn(nv, dt, 1.0f);
    std::vector<float> g(ng), beta(ng);
    for (size_t e = 0; e < ng; e++) {
        g[e] = e % 11 == 3 ? 0.0f : e % 97 == 5 ? -60.0f : -0.5f * unif();
        beta[e] = 0.05f + 0.9f * unif();
    }
    auto h0 = randn(ns, QS_FP32, 0.5f), dht = randn(ns, QS_FP32, 0.5f);
    const float *ph0 = c.states ? h0.data() : nullptr, *pdht = c.states ? dht.data() : nullptr;
    std::vector<float> ro(nv), rht(ns), rdq(nqk), rdk(nqk), rdv(nv), rdg(ng), rdb(ng), rdh0(ns);
    std::vector<float> go(nv), ght(ns), gdq(nqk), gdk(nqk), gdv(nv), gdg(ng), gdb(ng), gdh0(ns);
    if (qs_gdn_fwd(ctx, &p, q.data(), k.data(), v.data(), g.data(), beta.data(), ph0, ro.data(),
                   rht.data()) != QS_OK ||
        qs_gdn_bwd(ctx, &p, q.data(), k.data(), v.data(), g.data(), beta.data(), ph0, dout.data(),
                   pdht, rdq.data(), rdk.data(), rdv.data(), rdg.data(), rdb.data(),
                   rdh0.data()) != QS_OK) {
        printf("gdn %s: reference failed: %s\n", c.name, qs_ctx_errmsg(ctx));
        g_fail++;
        return;
    }
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.g = g.data();
    a.beta = beta.data();
    a.h0 = ph0;
    a.o = go.data();
    a.ht = ght.data();
    a.dout = dout.data();
    a.dht = pdht;
    a.dq = gdq.data();
    a.dk = gdk.data();
    a.dv = gdv.data();
    a.dg = gdg.data();
    a.dbeta = gdb.data();
    a.dh0 = gdh0.data();
    a.why = why;
    a.why_len = sizeof why;
    qs_status s1 = qc_slot_gdn_fwd(nullptr, &a), s2 = qc_slot_gdn_bwd(nullptr, &a);
    char name[96];
    snprintf(name, sizeof name, "%s %s", c.name, dname(dt));
    if (s1 != QS_OK || s2 != QS_OK) {
        printf("gdn %s: slot failed (%d %d): %s\n", name, s1, s2, why);
        g_fail++;
        return;
    }
    const char *nm[] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    const std::vector<float> *gv[] = {&go, &ght, &gdq, &gdk, &gdv, &gdg, &gdb, &gdh0};
    const std::vector<float> *rv[] = {&ro, &rht, &rdq, &rdk, &rdv, &rdg, &rdb, &rdh0};
    for (int e = 0; e < 8; e++) {
        cmp cc(e == 0 || (e >= 2 && e <= 4) ? dt : QS_FP32); /* o, dq, dk, dv are in dt */
        cc.add(gv[e]->data(), rv[e]->data(), gv[e]->size());
        line("gdn", name, nm[e], cc);
    }
}

void check_gdn(qs_ctx *ctx)
{
    std::vector<gdn_case> cs = {
        {"dense mha", 2, 70, 2, 2, 16, 16, 0, 0, {}},
        {"dense gva l2norm states", 2, 70, 2, 4, 16, 8, 1, 1, {}},
        {"varlen gva l2norm states", 3, 150, 1, 2, 8, 16, 1, 1, {0, 65, 65, 150}},
        {"varlen mha", 2, 40, 2, 2, 16, 16, 0, 1, {0, 1, 40}},
        {"dense 128x128 l2norm states", 1, 80, 2, 2, 128, 128, 1, 1, {}},
    };
    for (const auto &c : cs)
        for (qs_dtype dt : {QS_FP32, QS_BF16, QS_FP16})
            run_gdn(ctx, c, dt);
}

/* ---------------------------------------------------------------- timing */

void time_sdpa(const char *name, int64_t b, int64_t s, int64_t h, int64_t hkv, int64_t d,
               int64_t dv)
{
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.layout = QS_ATTN_SBHD;
    p.mask = QS_ATTN_MASK_CAUSAL;
    p.b = b;
    p.sq = p.sk = s;
    p.h = h;
    p.hkv = hkv;
    p.d = d;
    p.dv = dv;
    p.dtype = QS_BF16;
    p.scale = qs_rsqrtf((float)d);
    size_t nq = b * s * h * d, nk = b * s * hkv * d, nv = b * s * hkv * dv, no = b * s * h * dv;
    auto q = randn(nq, QS_BF16, 1.0f), k = randn(nk, QS_BF16, 1.0f), v = randn(nv, QS_BF16, 1.0f);
    auto dout = randn(no, QS_BF16, 1.0f);
    std::vector<float> o(no), lse(b * s * h), dq(nq), dk(nk), dvv(nv);
    char why[256] = "";
    qs_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.lse = lse.data();
    a.dout = dout.data();
    a.dq = dq.data();
    a.dk = dk.data();
    a.dv = dvv.data();
    a.why = why;
    a.why_len = sizeof why;
    double t0 = now();
    qs_status s1 = qc_slot_sdpa_fwd(nullptr, &a);
    double t1 = now();
    qs_status s2 = qc_slot_sdpa_bwd(nullptr, &a);
    double t2 = now();
    double fl = 2.0 * b * h * (double)s * s / 2 * (d + dv); /* causal half */
    printf("time     sdpa %-44s fwd %8.1f ms (%.2f TFLOP/s)  bwd %8.1f ms (%.2f TFLOP/s) %s\n",
           name, (t1 - t0) * 1e3, fl / (t1 - t0) / 1e12, (t2 - t1) * 1e3,
           2.5 * fl / (t2 - t1) / 1e12, s1 == QS_OK && s2 == QS_OK ? "" : why);
}

void time_gdn(int64_t b, int64_t t, int64_t h, int64_t dk)
{
    qs_gdn_params p;
    memset(&p, 0, sizeof p);
    p.b = b;
    p.t = t;
    p.h = p.hv = h;
    p.dk = p.dv = dk;
    p.scale = qs_rsqrtf((float)dk);
    p.use_qk_l2norm = 1;
    p.dtype = QS_BF16;
    size_t nqk = b * t * h * dk, ng = b * t * h, ns = b * h * dk * dk;
    auto q = randn(nqk, QS_BF16, 1.0f), k = randn(nqk, QS_BF16, 1.0f),
         v = randn(nqk, QS_BF16, 1.0f);
    auto dout = randn(nqk, QS_BF16, 1.0f);
    std::vector<float> g(ng), beta(ng), o(nqk), ht(ns), dq(nqk), dk_(nqk), dv(nqk), dg(ng), db(ng),
        dh0(ns);
    for (size_t e = 0; e < ng; e++) {
        g[e] = -0.1f * unif();
        beta[e] = 0.05f + 0.9f * unif();
    }
    char why[256] = "";
    qs_gdn_args a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.g = g.data();
    a.beta = beta.data();
    a.o = o.data();
    a.ht = ht.data();
    a.dout = dout.data();
    a.dq = dq.data();
    a.dk = dk_.data();
    a.dv = dv.data();
    a.dg = dg.data();
    a.dbeta = db.data();
    a.dh0 = dh0.data();
    a.why = why;
    a.why_len = sizeof why;
    double t0 = now();
    qs_status s1 = qc_slot_gdn_fwd(nullptr, &a);
    double t1 = now();
    qs_status s2 = qc_slot_gdn_bwd(nullptr, &a);
    double t2 = now();
    printf("time     gdn b%lld t%lld h%lld dk=dv=%lld bf16 l2norm: fwd %8.1f ms  bwd %8.1f ms %s\n",
           (long long)b, (long long)t, (long long)h, (long long)dk, (t1 - t0) * 1e3,
           (t2 - t1) * 1e3, s1 == QS_OK && s2 == QS_OK ? "" : why);
}

} // namespace

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("attn_check: no CUDA device\n");
        return 77;
    }
    bool timing = !(argc > 1 && strcmp(argv[1], "--no-timing") == 0);
    qs_ctx *ctx = qs_ctx_new();
    double t0 = now();
    check_mathf();
    check_cast16();
    fflush(stdout);
    check_sdpa(ctx);
    fflush(stdout);
    check_gdn(ctx);
    printf("attn_check: checks took %.1f s, %d failing\n", now() - t0, g_fail);
    fflush(stdout);
    if (timing) {
        /* A warm-up call first (context creation, module load). */
        time_sdpa("warm-up b1 s256 h2 d64", 1, 256, 2, 2, 64, 64);
        time_sdpa("b2 h16 s4096 d128 causal bf16 (slot call)", 2, 4096, 16, 16, 128, 128);
        time_sdpa("b2 h16 s4096 192/128 causal bf16", 2, 4096, 16, 16, 192, 128);
        time_sdpa("b2 h16/1 s4096 absorbed 576/512 causal bf16", 2, 4096, 16, 1, 576, 512);
        time_gdn(2, 4096, 16, 128);
    }
    qs_ctx_free(ctx);
    return g_fail ? 1 : 0;
}
