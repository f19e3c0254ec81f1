/* gdn_bench.cu: the chunked Gated DeltaNet forward and backward (cuda/qc_gdn_chunk.cu) on a
 * GPU.
 * 1. Checks, before any timing: the chunk kernels with TF32x3 and with BF16 operands (FP32
 *    tiles), and the BF16-staged kernels (BF16 tiles and workspace, where dk = dv = 128),
 *    against the reference recurrence (libqspec qs_gdn_fwd, spec/attention.md
 *    [GDN-RECURRENCE]) on small dense and varlen problems with partial chunks, GVA, an
 *    initial state and head dims 128, 64/96 and 8/6; and the workspace (W, U and the
 *    masked Q K^T of every chunk) against a float64 evaluation of [GDN-CHUNK] on the host.
 *    Then the chunked backward (gdn_chunk_bwd: TF32x3 and BF16 operands on FP32 arrays,
 *    TF32x3 on BF16 arrays, and the BF16-staged backward on BF16 arrays where dk = dv = 128)
 *    against qs_gdn_bwd ([GDN-BWD]) on the same problems with h0, dht and some gates at -30:
 *    relative RMS of dq, dk, dv, dg, dbeta and dh0.
 * 2. Timing of the shapes of the GDN speed goals (bf16 q, k, v, o; dk = dv = 128, 16 q/k
 *    heads; 64 value heads x 1 x 32768 and x 4 x 8192 tokens, 32 value heads x 8 x 1024):
 *    CUDA events, 3 warm-up calls, the median of 15. The FLOP count is that of the chunked
 *    algorithm as the kernels evaluate it, per token and value head: forward
 *    6 dk dv (W S, Q S, K^T Vn) + 2 C (3 dk + 2 dv) (K K^T, Q K^T, T K, T V, A Vn), C = 64;
 *    backward 18 dk dv + C (18 dk + 12 dv) + 4 C^2 (bwd_flop below lists the matmuls).
 * 3. Accuracy on those shapes: forward, relative RMS ||x - x_ref||_2 / ||x_ref||_2 of o and
 *    of the final state against an FP32 token-by-token recurrence computed on the GPU;
 *    backward, the BF16-operand paths' gradients (chunk-bf16, chunk-bf16-smem) against the
 *    TF32x3 path's.
 * q and k are l2-normalized when generated (the op's l2norm is off); g = logsigmoid(N(0,1))
 * / 16, beta = sigmoid(N(0,1)), v, dout ~ N(0,1), no initial state or dht in the timed runs.
 * Usage: gdn_bench [--no-timing] [--skip-smem] [--wgmma] [--fwd-only | --bwd-only] [--profile]
 * (--skip-smem leaves out the BF16-staged forward and backward, and the fused ones, whose
 * outputs and gradients must be bitwise the staged ones', checked and timed after them, and
 * with --wgmma their wgmma form, held to the same bounds as the staged ones against the
 * references); --fwd-only
 * and --bwd-only time one direction (every check still runs); --profile times only 64 value heads x
 * 1 x 32768, four calls a path, without checks (for ncu). Exits 1 when a check fails. The
 * environment variable QSPEC_GDN_LEAN_WARPS=4 or 8 (read at the start into
 * qc::gdn_lean_warps) fixes the lean kernels' warps a block (by default 8 where the blocks
 * cover the SMs: the timed shapes with several sequences; 4 elsewhere, the checks included);
 * unset, the checks run a second time with 8 warps, and, where the wgmma kernels run, with 4
 * and 8 warps and the staged walk on the other instructions. The staged kernels' forms
 * (qc_gdn_chunk.h; the defaults are the fastest measured) are set from QSPEC_GDN_LEAN_WG (the
 * walks on wgmma or mma.sync), QSPEC_GDN_WY_WIDE (16-byte or 4-byte stores), QSPEC_GDN_WY_GVA
 * (wy_gva_kernel or wy_fast_kernel), QSPEC_GDN_TFORM (the forward's T form or its W and U
 * form) and QSPEC_GDN_SOLVE_TC (the solve's block merges on the tensor cores or in FP32), each 0
 * or 1; the checks run again, and the default form is timed again, with the other solve. The
 * checks take the staged forward in both forms (the fused one must give the W and U form's bytes);
 * each staged timing is repeated with the other stores and the other wy kernel, which must give the
 * same bytes, then (the forward) in every form of the walk and of wy with its accuracy against the
 * FP32 recurrence, which must meet the goal (o <= 0.005, ht <= 0.004), and (the backward) with the
 * walks on the other instructions. With one sequence (1 x 1024, 1 x 32768) both directions are
 * timed again with wy and the walk in one piece and beside each other in 4 and 8 pieces
 * (QSPEC_GDN_PIPE; each must give the same bytes), and the backward with the reverse walk beside
 * the state pass (QSPEC_GDN_BWD_OVERLAP; the same bytes). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench_common.cuh"
#include "qc_gdn_chunk.h"
#include "qspec/qspec.h"

namespace
{

#define CHECK_CUDA(call) BENCH_CHECK(call)

int g_fail = 0;
bool g_skip_smem = false; /* --skip-smem: leave out the BF16-staged path */
bool g_profile = false;   /* --profile: one call of each path, no checks (for ncu) */
bool g_wgmma = false;     /* --wgmma: the wgmma form of the fused kernels too */

typedef __nv_bfloat16 bf16;
const char *const kMmaName[5] = {"bf16", "tf32x3", "bf16-smem", "bf16-fused", "bf16-wgmma"};
/* The timed paths: mmas, the BF16-staged ones left out under --skip-smem. */
std::vector<int> timed_mmas(std::initializer_list<int> mmas)
{
    std::vector<int> r;
    for (int m : mmas)
        if (!(qc::gdn_chunk_staged(m) && g_skip_smem) && !(m == qc::kGdnMmaBf16Wg && !g_wgmma))
            r.push_back(m);
    return r;
}

unsigned blocks(size_t n)
{
    return (unsigned)((n + 255) / 256);
}

__global__ void bf16_to_f32(const bf16 *x, float *y, size_t n)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __bfloat162float(x[i]);
}

__global__ void f32_to_bf16(const float *x, bf16 *y, size_t n)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* ---------------------------------------------------------------- host data */

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
double unif()
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((g_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
float gauss()
{
    return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()));
}
float bf16r(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

struct rel {
    double num = 0, den = 0, maxabs = 0;
    void add(const float *y, const float *r, size_t n)
    {
        for (size_t i = 0; i < n; i++) {
            double d = (double)y[i] - r[i];
            num += d * d;
            den += (double)r[i] * r[i];
            maxabs = std::max(maxabs, fabs(d));
        }
    }
    double rrms() const
    {
        return den > 0 ? sqrt(num / den) : sqrt(num);
    }
};

/* ---------------------------------------------------------------- float64 workspace model */

/* W, U and A of [GDN-CHUNK] for one (chunk, value head) in float64, rows of the chunk. */
void model_chunk(const std::vector<float> &k, const std::vector<float> &q,
                 const std::vector<float> &v, const std::vector<float> &g,
                 const std::vector<float> &beta, int64_t h, int64_t hv, int64_t dk, int64_t dv,
                 float scale, int64_t tok0, int64_t nc, int64_t hvi, std::vector<double> &W,
                 std::vector<double> &U, std::vector<double> &A)
{
    int64_t hq = hvi / (hv / h);
    auto K = [&](int64_t i, int64_t d) { return (double)k[((tok0 + i) * h + hq) * dk + d]; };
    auto Q = [&](int64_t i, int64_t d) { return (double)q[((tok0 + i) * h + hq) * dk + d]; };
    std::vector<double> G(nc), T(nc * nc, 0.0), L(nc * nc, 0.0);
    double s = 0;
    for (int64_t i = 0; i < nc; i++)
        G[i] = s += g[(tok0 + i) * hv + hvi];
    auto B = [&](int64_t i) { return (double)beta[(tok0 + i) * hv + hvi]; };
    A.assign(nc * 64, 0.0);
    for (int64_t i = 0; i < nc; i++)
        for (int64_t j = 0; j <= i; j++) {
            double kk = 0, qk = 0;
            for (int64_t d = 0; d < dk; d++) {
                kk += K(i, d) * K(j, d);
                qk += Q(i, d) * K(j, d);
            }
            if (j < i)
                L[i * nc + j] = B(i) * kk * exp(G[i] - G[j]);
            A[i * 64 + j] = scale * qk * exp(G[i] - G[j]);
        }
    for (int64_t j = 0; j < nc; j++)
        for (int64_t i = j; i < nc; i++) {
            double x = i == j ? 1.0 : 0.0;
            for (int64_t m = j; m < i; m++)
                x -= L[i * nc + m] * T[m * nc + j];
            T[i * nc + j] = x;
        }
    W.assign(nc * dk, 0.0);
    U.assign(nc * dv, 0.0);
    for (int64_t i = 0; i < nc; i++)
        for (int64_t j = 0; j <= i; j++) {
            for (int64_t d = 0; d < dk; d++)
                W[i * dk + d] += T[i * nc + j] * B(j) * exp(G[j]) * K(j, d);
            for (int64_t d = 0; d < dv; d++)
                U[i * dv + d] += T[i * nc + j] * B(j) * v[((tok0 + j) * hv + hvi) * dv + d];
        }
}

/* ---------------------------------------------------------------- checks */

struct check_case {
    const char *name;
    int64_t b, t, h, hv, dk, dv;
    std::vector<int32_t> cu;
};

/* The host inputs of one check case: q, k l2-normalized rows of BF16 values, v BF16, g in
 * [-0.3, 0] with zeros, beta in [0.05, 0.95], h0; for the backward also dout (BF16 values)
 * and dht. The op's l2norm is off and dtype FP32: BF16 values, unrounded results, the
 * sharpest comparison. */
struct check_data {
    int64_t T;
    size_t nqk, nv, ng, ns;
    std::vector<float> q, k, v, g, beta, h0, dout, dht;
    qs_gdn_params p;
};

void make_data(const check_case &c, bool bwd, check_data &x)
{
    x.T = c.cu.empty() ? c.b * c.t : c.t;
    x.nqk = x.T * c.h * c.dk;
    x.nv = x.T * c.hv * c.dv;
    x.ng = x.T * c.hv;
    x.ns = c.b * c.hv * c.dk * c.dv;
    x.q.resize(x.nqk);
    x.k.resize(x.nqk);
    x.v.resize(x.nv);
    x.g.resize(x.ng);
    x.beta.resize(x.ng);
    x.h0.resize(x.ns);
    for (size_t r = 0; r < (size_t)(x.T * c.h); r++) /* l2-normalized rows, BF16 values */
        for (std::vector<float> *y : {&x.q, &x.k}) {
            double ss = 0;
            std::vector<float> row(c.dk);
            for (auto &e : row) {
                e = gauss();
                ss += (double)e * e;
            }
            for (int64_t d = 0; d < c.dk; d++)
                (*y)[r * c.dk + d] = bf16r((float)(row[d] / sqrt(ss + 1e-6)));
        }
    for (auto &e : x.v)
        e = bf16r(gauss());
    for (size_t e = 0; e < x.ng; e++) {
        x.g[e] = e % 13 == 4 ? 0.0f : (float)(-0.3 * unif());
        x.beta[e] = (float)(0.05 + 0.9 * unif());
    }
    for (auto &e : x.h0)
        e = 0.5f * gauss();
    if (bwd) {
        x.dout.resize(x.nv);
        x.dht.resize(x.ns);
        for (auto &e : x.dout)
            e = bf16r(gauss());
        for (auto &e : x.dht)
            e = 0.5f * gauss();
        for (size_t e = 7; e < x.ng; e += 29) /* strongly negative gates */
            x.g[e] = -30.0f;
    }
    memset(&x.p, 0, sizeof x.p);
    x.p.b = c.b;
    x.p.t = c.t;
    x.p.h = c.h;
    x.p.hv = c.hv;
    x.p.dk = c.dk;
    x.p.dv = c.dv;
    x.p.cu_seqlens = c.cu.empty() ? nullptr : c.cu.data();
    x.p.scale = qs_rsqrtf((float)c.dk);
    x.p.use_qk_l2norm = 0;
    x.p.dtype = QS_FP32;
}

void check_one(qs_ctx *ctx, const check_case &c)
{
    check_data x;
    make_data(c, false, x);
    int64_t T = x.T;
    size_t nqk = x.nqk, nv = x.nv, ng = x.ng, ns = x.ns;
    const std::vector<float> &q = x.q, &k = x.k, &v = x.v, &g = x.g, &beta = x.beta, &h0 = x.h0;
    const qs_gdn_params &p = x.p;
    std::vector<float> ro(nv), rht(ns);
    if (qs_gdn_fwd(ctx, &p, q.data(), k.data(), v.data(), g.data(), beta.data(), h0.data(),
                   ro.data(), rht.data()) != QS_OK) {
        printf("check %s: reference failed: %s\n", c.name, qs_ctx_errmsg(ctx));
        g_fail++;
        return;
    }
    float *dq, *dk, *dv, *dg, *db, *dh0, *dout, *dht;
    int32_t *dcu = nullptr;
    CHECK_CUDA(cudaMalloc(&dq, nqk * 4));
    CHECK_CUDA(cudaMalloc(&dk, nqk * 4));
    CHECK_CUDA(cudaMalloc(&dv, nv * 4));
    CHECK_CUDA(cudaMalloc(&dg, ng * 4));
    CHECK_CUDA(cudaMalloc(&db, ng * 4));
    CHECK_CUDA(cudaMalloc(&dh0, ns * 4));
    CHECK_CUDA(cudaMalloc(&dout, nv * 4));
    CHECK_CUDA(cudaMalloc(&dht, ns * 4));
    CHECK_CUDA(cudaMemcpy(dq, q.data(), nqk * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dk, k.data(), nqk * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dv, v.data(), nv * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dg, g.data(), ng * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, beta.data(), ng * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dh0, h0.data(), ns * 4, cudaMemcpyHostToDevice));
    if (!c.cu.empty()) {
        CHECK_CUDA(cudaMalloc(&dcu, c.cu.size() * 4));
        CHECK_CUDA(cudaMemcpy(dcu, c.cu.data(), c.cu.size() * 4, cudaMemcpyHostToDevice));
    }
    qc::gdn_chunk_problem cp{c.b, c.t, T, c.h, c.hv, c.dk, c.dv, p.scale, QS_FP32, dcu};
    qc::gdn_chunk_plan plan;
    CHECK_CUDA(qc::gdn_chunk_plan_make(cp, p.cu_seqlens, &plan));
    /* BF16 copies for the BF16-staged path (the values are BF16 already) */
    bf16 *hq, *hk, *hvv, *ho;
    CHECK_CUDA(cudaMalloc(&hq, nqk * 2));
    CHECK_CUDA(cudaMalloc(&hk, nqk * 2));
    CHECK_CUDA(cudaMalloc(&hvv, nv * 2));
    CHECK_CUDA(cudaMalloc(&ho, nv * 2));
    f32_to_bf16<<<blocks(nqk), 256>>>(dq, hq, nqk);
    f32_to_bf16<<<blocks(nqk), 256>>>(dk, hk, nqk);
    f32_to_bf16<<<blocks(nv), 256>>>(dv, hvv, nv);
    const double lim[5] = {2e-2, 1e-4, 2e-2, 2e-2, 2e-2};
    bool smem_ok = c.dk == 128 && c.dv == 128;
    std::vector<float> smem_o, smem_ht; /* the staged path's W and U form, for the fused one */
    /* the staged path in its W and U form (tform 0) and in the T form (1), the others once */
    const int tform0 = qc::gdn_tform;
    const std::pair<int, int> runs[] = {{qc::kGdnMmaTf32x3, 0},    {qc::kGdnMmaBf16, 0},
                                        {qc::kGdnMmaBf16Smem, 0},  {qc::kGdnMmaBf16Smem, 1},
                                        {qc::kGdnMmaBf16Fused, 0}, {qc::kGdnMmaBf16Wg, 0}};
    for (auto run : runs) {
        int mma = run.first;
        if ((qc::gdn_chunk_staged(mma) && (!smem_ok || g_skip_smem)) ||
            (mma == qc::kGdnMmaBf16Wg && !g_wgmma))
            continue;
        bool tform = run.second != 0;
        qc::gdn_tform = tform;
        bool hio = qc::gdn_chunk_staged(mma);
        CHECK_CUDA(cudaMemset(dout, 0xff, nv * 4)); /* NaN: an unwritten o shows */
        CHECK_CUDA(cudaMemset(ho, 0xff, nv * 2));
        CHECK_CUDA(cudaMemset(plan.ws, 0, plan.ws_floats * 4));
        if (hio)
            CHECK_CUDA(qc::gdn_chunk_fwd(cp, plan, mma, qc::kGdnIoBf16, hq, hk, hvv, dg, db, dh0,
                                         ho, dht, 0));
        else
            CHECK_CUDA(qc::gdn_chunk_fwd(cp, plan, mma, qc::kGdnIoF32, dq, dk, dv, dg, db, dh0,
                                         dout, dht, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        qc::gdn_tform = tform0;
        if (hio)
            bf16_to_f32<<<blocks(nv), 256>>>(ho, dout, nv);
        std::vector<float> go(nv), ght(ns), ws(plan.ws_floats);
        CHECK_CUDA(cudaMemcpy(go.data(), dout, nv * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(ght.data(), dht, ns * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(ws.data(), plan.ws, plan.ws_floats * 4, cudaMemcpyDeviceToHost));
        if (hio) { /* the BF16 workspace, widened in place from the end */
            const bf16 *wh = reinterpret_cast<const bf16 *>(ws.data());
            size_t nw = c.hv * T * (c.dk + c.dv + 64);
            std::vector<float> wide(nw);
            for (size_t e = 0; e < nw; e++)
                wide[e] = __bfloat162float(wh[e]);
            std::copy(wide.begin(), wide.end(), ws.begin());
        }
        rel eo, eh, ew, eu, ea;
        eo.add(go.data(), ro.data(), nv);
        eh.add(ght.data(), rht.data(), ns);
        if (mma == qc::kGdnMmaBf16Fused || mma == qc::kGdnMmaBf16Wg) {
            /* fused: the same bits as the staged kernels; wgmma: close to them */
            size_t od = 0, hd = 0;
            for (size_t e = 0; e < nv; e++)
                od += memcmp(&go[e], &smem_o[e], 4) != 0;
            for (size_t e = 0; e < ns; e++)
                hd += memcmp(&ght[e], &smem_ht[e], 4) != 0;
            bool same = mma == qc::kGdnMmaBf16Wg || (od == 0 && hd == 0);
            bool ok = same && eo.rrms() <= lim[mma] && eh.rrms() <= lim[mma] &&
                      !std::isnan(eo.num) && !std::isnan(eh.num);
            printf("check %-28s %-9s o rrms %.2e  ht rrms %.2e  | against bf16-smem: %zu of %zu o "
                   "and %zu of %zu ht differ  %s\n",
                   c.name, kMmaName[mma], eo.rrms(), eh.rrms(), od, nv, hd, ns, ok ? "ok" : "FAIL");
            fflush(stdout);
            g_fail += ok ? 0 : 1;
            continue;
        }
        if (mma == qc::kGdnMmaBf16Smem && !tform) {
            smem_o = go;
            smem_ht = ght;
        }
        /* the workspace of every chunk against the float64 model */
        const float *W = ws.data(), *U = W + c.hv * T * c.dk, *A = U + c.hv * T * c.dv;
        for (int64_t n = 0; n < c.b; n++) {
            int64_t s0 = c.cu.empty() ? n * c.t : c.cu[n];
            int64_t len = c.cu.empty() ? c.t : c.cu[n + 1] - c.cu[n];
            for (int64_t i0 = 0; i0 < len; i0 += 64)
                for (int64_t hvi = 0; hvi < c.hv; hvi++) {
                    int64_t nc = std::min<int64_t>(64, len - i0);
                    std::vector<double> mW, mU, mA;
                    model_chunk(k, q, v, g, beta, c.h, c.hv, c.dk, c.dv, p.scale, s0 + i0, nc, hvi,
                                mW, mU, mA);
                    std::vector<float> fW(mW.begin(), mW.end()), fU(mU.begin(), mU.end()),
                        fA(mA.begin(), mA.end());
                    size_t r0 = hvi * T + s0 + i0;
                    if (!tform) { /* the T form keeps Tu where W was, and no U */
                        ew.add(W + r0 * c.dk, fW.data(), fW.size());
                        eu.add(U + r0 * c.dv, fU.data(), fU.size());
                    }
                    ea.add(A + r0 * 64, fA.data(), fA.size());
                }
        }
        bool ok = eo.rrms() <= lim[mma] && eh.rrms() <= lim[mma] && !std::isnan(eo.num) &&
                  !std::isnan(eh.num);
        char wu[48] = "T form: Tu, no W or U";
        if (!tform)
            snprintf(wu, sizeof wu, "W %.2e U %.2e", ew.rrms(), eu.rrms());
        printf("check %-28s %-9s o rrms %.2e (max %.2e)  ht rrms %.2e (max %.2e)  | %s A %.2e  "
               "%s\n",
               c.name, kMmaName[mma], eo.rrms(), eo.maxabs, eh.rrms(), eh.maxabs, wu, ea.rrms(),
               ok ? "ok" : "FAIL");
        fflush(stdout);
        g_fail += ok ? 0 : 1;
    }
    for (bf16 *x : {hq, hk, hvv, ho})
        cudaFree(x);
    qc::gdn_chunk_plan_free(&plan);
    for (float *x : {dq, dk, dv, dg, db, dh0, dout, dht})
        cudaFree(x);
    if (dcu)
        cudaFree(dcu);
}

/* ---------------------------------------------------------------- backward checks */

/* A device copy of a host array (FP32, or BF16 when bf is set). */
void *dev_copy(const std::vector<float> &x, bool bf)
{
    void *d;
    CHECK_CUDA(cudaMalloc(&d, (x.size() + 1) * (bf ? 2 : 4)));
    if (!bf) {
        CHECK_CUDA(cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        return d;
    }
    std::vector<bf16> h(x.size());
    for (size_t e = 0; e < x.size(); e++)
        h[e] = __float2bfloat16_rn(x[e]);
    CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    return d;
}

/* n values of a device array (FP32, or BF16 when bf is set) as FP32 on the host. */
std::vector<float> host_copy(const void *d, size_t n, bool bf)
{
    std::vector<float> y(n);
    if (!bf) {
        CHECK_CUDA(cudaMemcpy(y.data(), d, n * 4, cudaMemcpyDeviceToHost));
        return y;
    }
    std::vector<bf16> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t e = 0; e < n; e++)
        y[e] = __bfloat162float(h[e]);
    return y;
}

/* gdn_chunk_bwd against qs_gdn_bwd (dtype FP32, BF16 values, no l2norm: the slot applies the
 * l2norm backward on top, cuda/attn_check covers that) with h0 and dht, on each path:
 * TF32x3 and BF16 operands with FP32 arrays, TF32x3 with BF16 arrays (dq, dk, dv then
 * rounded to BF16, so their bound is BF16's), and where dk = dv = 128 the BF16-staged
 * backward (BF16 arrays, operands, workspace and states; the BF16 operands' bound).
 * Relative RMS of the six gradients. */
void check_bwd_one(qs_ctx *ctx, const check_case &c)
{
    check_data x;
    make_data(c, true, x);
    std::vector<float> rdq(x.nqk), rdk(x.nqk), rdv(x.nv), rdg(x.ng), rdb(x.ng), rdh0(x.ns);
    if (qs_gdn_bwd(ctx, &x.p, x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(),
                   x.h0.data(), x.dout.data(), x.dht.data(), rdq.data(), rdk.data(), rdv.data(),
                   rdg.data(), rdb.data(), rdh0.data()) != QS_OK) {
        printf("check bwd %s: reference failed: %s\n", c.name, qs_ctx_errmsg(ctx));
        g_fail++;
        return;
    }
    int32_t *dcu = nullptr;
    if (!c.cu.empty()) {
        CHECK_CUDA(cudaMalloc(&dcu, c.cu.size() * 4));
        CHECK_CUDA(cudaMemcpy(dcu, c.cu.data(), c.cu.size() * 4, cudaMemcpyHostToDevice));
    }
    qc::gdn_chunk_problem cp{c.b, c.t, x.T, c.h, c.hv, c.dk, c.dv, x.p.scale, QS_FP32, dcu};
    /* the FP32-tile paths take an FP32 plan, the staged ones a BF16 one (the plugin's sizes:
     * a buffer too small shows as wrong gradients here or under compute-sanitizer) */
    qc::gdn_chunk_plan plan, narrow;
    CHECK_CUDA(qc::gdn_chunk_plan_make_bwd(cp, x.p.cu_seqlens, &plan));
    CHECK_CUDA(qc::gdn_chunk_plan_make_bwd(cp, x.p.cu_seqlens, &narrow, true));
    float *g = (float *)dev_copy(x.g, false), *beta = (float *)dev_copy(x.beta, false);
    float *h0 = (float *)dev_copy(x.h0, false), *dht = (float *)dev_copy(x.dht, false);
    float *dg, *db, *dh0;
    CHECK_CUDA(cudaMalloc(&dg, x.ng * 4));
    CHECK_CUDA(cudaMalloc(&db, x.ng * 4));
    CHECK_CUDA(cudaMalloc(&dh0, x.ns * 4));
    struct path {
        int mma;
        bool bf;
        double lim, lim_io; /* the bound of dg, dbeta, dh0; of dq, dk, dv */
    };
    const path paths[6] = {
        {qc::kGdnMmaTf32x3, false, 1e-4, 1e-4},   {qc::kGdnMmaBf16, false, 3e-2, 3e-2},
        {qc::kGdnMmaTf32x3, true, 1e-4, 4e-3},    {qc::kGdnMmaBf16Smem, true, 3e-2, 3e-2},
        {qc::kGdnMmaBf16Fused, true, 3e-2, 3e-2}, {qc::kGdnMmaBf16Wg, true, 3e-2, 3e-2}};
    bool smem_ok = c.dk == 128 && c.dv == 128 && !g_skip_smem;
    std::vector<float> smem_got[6]; /* the staged path's gradients, for the fused one */
    for (const path &pa : paths) {
        if ((qc::gdn_chunk_staged(pa.mma) && !smem_ok) || (pa.mma == qc::kGdnMmaBf16Wg && !g_wgmma))
            continue;
        void *q = dev_copy(x.q, pa.bf), *k = dev_copy(x.k, pa.bf), *v = dev_copy(x.v, pa.bf);
        void *dout = dev_copy(x.dout, pa.bf), *dq, *dk, *dv;
        size_t el = pa.bf ? 2 : 4;
        CHECK_CUDA(cudaMalloc(&dq, x.nqk * el + 4));
        CHECK_CUDA(cudaMalloc(&dk, x.nqk * el + 4));
        CHECK_CUDA(cudaMalloc(&dv, x.nv * el + 4));
        for (void *y : {dq, dk, dv}) /* NaN: an unwritten gradient shows */
            CHECK_CUDA(cudaMemset(y, 0xff, (y == dv ? x.nv : x.nqk) * el));
        for (float *y : {dg, db})
            CHECK_CUDA(cudaMemset(y, 0xff, x.ng * 4));
        CHECK_CUDA(cudaMemset(dh0, 0xff, x.ns * 4));
        auto bwd = [&](const qc::gdn_chunk_plan &pl) {
            return qc::gdn_chunk_bwd(cp, pl, pa.mma, pa.bf ? qc::kGdnIoBf16 : qc::kGdnIoF32, q, k,
                                     v, g, beta, h0, dout, dht, dq, dk, dv, dg, db, dh0, 0);
        };
        bool staged = qc::gdn_chunk_staged(pa.mma);
        if (!staged && bwd(narrow) != cudaErrorInvalidValue) {
            printf("check bwd %s: %s accepted a BF16-sized plan  FAIL\n", c.name, kMmaName[pa.mma]);
            g_fail++;
        }
        CHECK_CUDA(bwd(staged ? narrow : plan));
        CHECK_CUDA(cudaDeviceSynchronize());
        const char *nm[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
        std::vector<float> got[6] = {host_copy(dq, x.nqk, pa.bf), host_copy(dk, x.nqk, pa.bf),
                                     host_copy(dv, x.nv, pa.bf),  host_copy(dg, x.ng, false),
                                     host_copy(db, x.ng, false),  host_copy(dh0, x.ns, false)};
        const std::vector<float> *ref[6] = {&rdq, &rdk, &rdv, &rdg, &rdb, &rdh0};
        bool ok = true;
        printf("check bwd %-26s %-9s %s io:", c.name, kMmaName[pa.mma], pa.bf ? "bf16" : "f32 ");
        for (int a = 0; a < 6; a++) {
            rel r;
            r.add(got[a].data(), ref[a]->data(), got[a].size());
            double lim = a < 3 ? pa.lim_io : pa.lim;
            ok = ok && r.rrms() <= lim && !std::isnan(r.num);
            printf(" %s %.2e", nm[a], r.rrms());
        }
        if (pa.mma == qc::kGdnMmaBf16Smem)
            for (int a = 0; a < 6; a++)
                smem_got[a] = got[a];
        if (pa.mma == qc::kGdnMmaBf16Fused || pa.mma == qc::kGdnMmaBf16Wg) {
            /* fused: the same bits as the staged kernels; wgmma: close to them */
            size_t nd = 0;
            for (int a = 0; a < 6; a++)
                for (size_t e = 0; e < got[a].size(); e++)
                    nd += memcmp(&got[a][e], &smem_got[a][e], 4) != 0;
            printf("  %zu values differ from bf16-smem", nd);
            ok = ok && (nd == 0 || pa.mma == qc::kGdnMmaBf16Wg);
        }
        printf("  %s\n", ok ? "ok" : "FAIL");
        fflush(stdout);
        g_fail += ok ? 0 : 1;
        for (void *y : {q, k, v, dout, dq, dk, dv})
            cudaFree(y);
    }
    for (float *y : {g, beta, h0, dht, dg, db, dh0})
        cudaFree(y);
    qc::gdn_chunk_plan_free(&plan);
    qc::gdn_chunk_plan_free(&narrow);
    if (dcu)
        cudaFree(dcu);
}

void checks(qs_ctx *ctx)
{
    std::vector<check_case> cs = {
        {"dense gva 128 t150", 2, 150, 2, 4, 128, 128, {}},
        {"varlen 64/96 (5,65,130,1)", 4, 201, 1, 2, 64, 96, {0, 5, 70, 200, 201}},
        {"dense mha 8/6 t9", 2, 9, 2, 2, 8, 6, {}},
        {"varlen gva 128 (64,0,200)", 3, 264, 2, 4, 128, 128, {0, 64, 64, 264}},
        {"varlen 128 (100,330)", 2, 430, 1, 2, 128, 128, {0, 100, 430}},
    };
    for (const auto &c : cs)
        check_one(ctx, c);
    for (const auto &c : cs)
        check_bwd_one(ctx, c);
}

/* ---------------------------------------------------------------- device data */

__device__ float dev_gauss(size_t i, uint32_t seed)
{
    uint32_t a = bench_hash(2 * i, seed), b = bench_hash(2 * i + 1, seed ^ 0x5bd1e995u);
    float u1 = ((a >> 8) + 0.5f) * (1.0f / 16777216.0f), u2 = (b >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

/* rows of d values: N(0,1), l2-normalized, BF16 */
__global__ void gen_qk(__nv_bfloat16 *x, size_t rows, int d, uint32_t seed)
{
    size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    float ss = 0.0f;
    for (int e = 0; e < d; e++) {
        float z = dev_gauss(r * d + e, seed);
        ss += z * z;
    }
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int e = 0; e < d; e++)
        x[r * d + e] = __float2bfloat16_rn(dev_gauss(r * d + e, seed) * inv);
}

__global__ void gen_v(__nv_bfloat16 *x, size_t n, uint32_t seed)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = __float2bfloat16_rn(dev_gauss(i, seed));
}

/* g = logsigmoid(z) / 16, beta = sigmoid(z') */
__global__ void gen_gb(float *g, float *beta, size_t n, uint32_t seed)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float z = dev_gauss(i, seed), z2 = dev_gauss(i, seed ^ 0xabcdu);
    g[i] = -log1pf(expf(-z)) / 16.0f;
    beta[i] = 1.0f / (1.0f + expf(-z2));
}

/* The FP32 token recurrence [GDN-RECURRENCE] (no initial state): one block of 128 threads
 * per (value head, sequence), a thread per value column holding its state column. */
template <int D>
__global__ void __launch_bounds__(D)
    recur_kernel(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                 const float *g, const float *beta, int64_t seq_t, int64_t h, int64_t hv,
                 float scale, float *o, float *ht)
{
    __shared__ float ks[D], qs[D];
    int c = threadIdx.x;
    int64_t hvi = blockIdx.x, n = blockIdx.y, hq = hvi / (hv / h);
    float S[D];
#pragma unroll
    for (int r = 0; r < D; r++)
        S[r] = 0.0f;
    for (int64_t i = 0; i < seq_t; i++) {
        int64_t tok = n * seq_t + i;
        __syncthreads();
        ks[c] = __bfloat162float(k[(tok * h + hq) * D + c]);
        qs[c] = scale * __bfloat162float(q[(tok * h + hq) * D + c]);
        __syncthreads();
        float a = expf(g[tok * hv + hvi]), bt = beta[tok * hv + hvi], pred = 0.0f;
#pragma unroll
        for (int r = 0; r < D; r++) {
            S[r] *= a;
            pred += S[r] * ks[r];
        }
        float u = bt * (__bfloat162float(v[(tok * hv + hvi) * D + c]) - pred), acc = 0.0f;
#pragma unroll
        for (int r = 0; r < D; r++) {
            S[r] += ks[r] * u;
            acc += S[r] * qs[r];
        }
        o[(tok * hv + hvi) * D + c] = acc;
    }
    size_t sb = (static_cast<size_t>(n) * hv + hvi) * D * D;
#pragma unroll
    for (int r = 0; r < D; r++)
        ht[sb + static_cast<size_t>(r) * D + c] = S[r];
}

/* acc[0] += sum (a - b)^2, acc[1] += sum b^2, acc[2] += NaN count */
__global__ void sq_sums(const float *a, const float *b, size_t n, double *acc)
{
    double num = 0.0, den = 0.0, nan = 0.0;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        double d = (double)a[i] - b[i];
        if (d != d)
            nan += 1.0;
        else
            num += d * d;
        den += (double)b[i] * b[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        num += __shfl_down_sync(0xffffffffu, num, off);
        den += __shfl_down_sync(0xffffffffu, den, off);
        nan += __shfl_down_sync(0xffffffffu, nan, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(acc, num);
        atomicAdd(acc + 1, den);
        atomicAdd(acc + 2, nan);
    }
}

__global__ void ndiff_kernel(const unsigned char *a, const unsigned char *b, size_t n,
                             unsigned long long *cnt)
{
    unsigned long long m = 0;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        m += a[i] != b[i];
    if (m)
        atomicAdd(cnt, m);
}

/* The bytes in which two device arrays of n bytes differ. */
unsigned long long dev_ndiff(const void *a, const void *b, size_t n)
{
    unsigned long long *cnt, h = 0;
    CHECK_CUDA(cudaMalloc(&cnt, sizeof h));
    CHECK_CUDA(cudaMemset(cnt, 0, sizeof h));
    ndiff_kernel<<<1024, 256>>>(static_cast<const unsigned char *>(a),
                                static_cast<const unsigned char *>(b), n, cnt);
    CHECK_CUDA(cudaMemcpy(&h, cnt, sizeof h, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(cnt));
    return h;
}

/* ||a - b|| / ||b|| of two device arrays (NaN when a holds a NaN). */
double dev_rrms(const float *a, const float *b, size_t n)
{
    double *acc, h[3];
    CHECK_CUDA(cudaMalloc(&acc, 3 * sizeof(double)));
    CHECK_CUDA(cudaMemset(acc, 0, 3 * sizeof(double)));
    sq_sums<<<1024, 256>>>(a, b, n, acc);
    CHECK_CUDA(cudaMemcpy(h, acc, sizeof h, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(acc));
    return h[2] > 0 ? NAN : h[1] > 0 ? sqrt(h[0] / h[1]) : sqrt(h[0]);
}

/* The median time of launch() between the events e0 and e1: 15 calls after 3 warm-up calls,
 * or 4 calls and no warm-up under --profile. */
template <typename F> double median_ms(cudaEvent_t e0, cudaEvent_t e1, F launch)
{
    std::vector<float> ms;
    for (int it = 0; it < (g_profile ? 4 : 18); it++) {
        CHECK_CUDA(cudaEventRecord(e0));
        CHECK_CUDA(launch());
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t;
        CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
        if (it >= 3 || g_profile)
            ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

/* The staged path again through variant(knob, value, what) with wy and the walk (`walk` names
 * it) in one piece, then beside each other in 4 and 8 pieces, one sequence only (the default
 * takes 4 where each piece has at least 64 chunks): any byte that differs fails. */
template <class V> void pipe_variants(int64_t nseq, const char *walk, V variant)
{
    if (nseq != 1)
        return;
    for (int pieces : {1, 4, 8})
        if (pieces != qc::gdn_pipe) {
            char what[64];
            if (pieces == 1)
                snprintf(what, sizeof what, "wy, then the %s, one piece", walk);
            else
                snprintf(what, sizeof what, "wy beside the %s, %d pieces", walk, pieces);
            g_fail += variant(&qc::gdn_pipe, pieces, what) != 0;
        }
}

void time_shape(int64_t nseq, int64_t seq_t, int64_t hv)
{
    const int64_t h = 16, D = 128, T = nseq * seq_t;
    size_t nqk = T * h * D, nv = T * hv * D, ng = T * hv, ns = nseq * hv * D * D;
    __nv_bfloat16 *q, *k, *v, *o;
    float *g, *beta, *ht, *oref, *htref, *of;
    CHECK_CUDA(cudaMalloc(&q, nqk * 2));
    CHECK_CUDA(cudaMalloc(&k, nqk * 2));
    CHECK_CUDA(cudaMalloc(&v, nv * 2));
    CHECK_CUDA(cudaMalloc(&o, nv * 2));
    CHECK_CUDA(cudaMalloc(&of, nv * 4));
    CHECK_CUDA(cudaMalloc(&oref, nv * 4));
    CHECK_CUDA(cudaMalloc(&g, ng * 4));
    CHECK_CUDA(cudaMalloc(&beta, ng * 4));
    CHECK_CUDA(cudaMalloc(&ht, ns * 4));
    CHECK_CUDA(cudaMalloc(&htref, ns * 4));
    gen_qk<<<blocks(T * h), 256>>>(q, T * h, D, 11);
    gen_qk<<<blocks(T * h), 256>>>(k, T * h, D, 12);
    gen_v<<<blocks(nv), 256>>>(v, nv, 13);
    gen_gb<<<blocks(ng), 256>>>(g, beta, ng, 14);
    float scale = 1.0f / sqrtf((float)D);
    recur_kernel<128><<<dim3((unsigned)hv, (unsigned)nseq), 128>>>(q, k, v, g, beta, seq_t, h, hv,
                                                                   scale, oref, htref);
    CHECK_CUDA(cudaGetLastError());
    qc::gdn_chunk_problem cp{nseq, seq_t, T, h, hv, D, D, scale, QS_BF16, nullptr};
    qc::gdn_chunk_plan plan;
    CHECK_CUDA(qc::gdn_chunk_plan_make(cp, nullptr, &plan));
    double flop = (double)T * hv * (6.0 * D * D + 2.0 * 64 * (3.0 * D + 2.0 * D));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    __nv_bfloat16 *o_smem = nullptr; /* the staged path's W and U form, for the fused one */
    float *ht_smem = nullptr;
    for (int mma : timed_mmas({qc::kGdnMmaBf16, qc::kGdnMmaTf32x3, qc::kGdnMmaBf16Smem,
                               qc::kGdnMmaBf16Fused, qc::kGdnMmaBf16Wg})) {
        auto fwd = [&] {
            return qc::gdn_chunk_fwd(cp, plan, mma, qc::kGdnIoBf16, q, k, v, g, beta, nullptr, o,
                                     ht, 0);
        };
        double med = median_ms(e0, e1, fwd);
        bf16_to_f32<<<blocks(nv), 256>>>(o, of, nv);
        CHECK_CUDA(cudaDeviceSynchronize());
        printf("time gdn_fwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  %6.1f TFLOP/s  o rrms "
               "%.5f  ht rrms %.5f",
               kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, med,
               flop / (med * 1e-3) / 1e12, dev_rrms(of, oref, nv), dev_rrms(ht, htref, ns));
        printf("  bits %016llx %016llx", dev_hash(o, nv * 2), dev_hash(ht, ns * 4));
        if (mma == qc::kGdnMmaBf16Smem) {
            __nv_bfloat16 *o_def;
            float *ht_def;
            CHECK_CUDA(cudaMalloc(&o_def, nv * 2));
            CHECK_CUDA(cudaMalloc(&ht_def, ns * 4));
            CHECK_CUDA(cudaMemcpy(o_def, o, nv * 2, cudaMemcpyDeviceToDevice));
            CHECK_CUDA(cudaMemcpy(ht_def, ht, ns * 4, cudaMemcpyDeviceToDevice));
            /* the staged path again with *knob = value: its time, and the bytes of o and ht
             * that differ from the default's */
            auto variant = [&](int *knob, int value, const char *what) {
                int was = *knob;
                *knob = value;
                double m = median_ms(e0, e1, fwd);
                CHECK_CUDA(cudaDeviceSynchronize());
                *knob = was;
                unsigned long long od = dev_ndiff(o, o_def, nv * 2),
                                   hd = dev_ndiff(ht, ht_def, ns * 4);
                printf("\ntime gdn_fwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  %s; bytes "
                       "differing: o %llu, ht %llu",
                       kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, m, what, od,
                       hd);
                return od + hd;
            };
            /* the other stores, the other wy kernel (value heads on shared q/k heads) and, in
             * the W and U form, wy_fast_kernel's five tiles: the same bytes */
            const char *stores = qc::gdn_wy_wide ? "wy storing pairs" : "wy storing 16-byte rows";
            g_fail += variant(&qc::gdn_wy_wide, !qc::gdn_wy_wide, stores) != 0;
            const bool gva = qc::gdn_wy_gva_on(qc::gdn_tform != 0);
            if (hv > h)
                g_fail += variant(&qc::gdn_wy_gva, !gva,
                                  gva ? "wy_fast a value head a block"
                                      : "wy_gva, a q/k head's value heads a block") != 0;
            if (!qc::gdn_tform)
                g_fail += variant(&qc::gdn_wy_tiles, 5, "wy_fast with five tiles") != 0;
            pipe_variants(nseq, "walk", variant);
            /* the staged path timed with each (knob, value) set, then its o and final state
             * against the FP32 recurrence (eo, eh), held to the issue's accuracy goal */
            auto form_time = [&](std::initializer_list<std::pair<int *, int>> knobs, double &eo,
                                 double &eh) {
                std::vector<int> was;
                for (auto kv : knobs) {
                    was.push_back(*kv.first);
                    *kv.first = kv.second;
                }
                double m = median_ms(e0, e1, fwd);
                size_t i = 0;
                for (auto kv : knobs)
                    *kv.first = was[i++];
                bf16_to_f32<<<blocks(nv), 256>>>(o, of, nv);
                CHECK_CUDA(cudaDeviceSynchronize());
                eo = dev_rrms(of, oref, nv);
                eh = dev_rrms(ht, htref, ns);
                g_fail += eo <= 0.005 && eh <= 0.004 ? 0 : 1; /* the issue's goal */
                return m;
            };
            /* every form of the walk and of wy (T or W and U, wy_gva or not, mma.sync or
             * wgmma): its time and its accuracy (other roundings in the other form) */
            const int nwg = qc::gdn_chunk_wgmma_available() ? 2 : 1;
            double eo, eh;
            for (int tf = 0; tf < 2; tf++)
                for (int gv = 0; gv < (hv > h ? 2 : 1); gv++)
                    for (int wg = 0; wg < nwg; wg++) {
                        double m = form_time(
                            {{&qc::gdn_tform, tf}, {&qc::gdn_wy_gva, gv}, {&qc::gdn_lean_wg, wg}},
                            eo, eh);
                        if (!tf && !o_smem) { /* the W and U form's bytes, for the fused path */
                            CHECK_CUDA(cudaMalloc(&o_smem, nv * 2));
                            CHECK_CUDA(cudaMalloc(&ht_smem, ns * 4));
                            CHECK_CUDA(cudaMemcpy(o_smem, o, nv * 2, cudaMemcpyDeviceToDevice));
                            CHECK_CUDA(cudaMemcpy(ht_smem, ht, ns * 4, cudaMemcpyDeviceToDevice));
                        }
                        printf("\ntime gdn_fwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  %s "
                               "form%s, walk on %s; o rrms %.5f  ht rrms %.5f",
                               kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, m,
                               tf ? "T" : "W and U", gv ? ", wy_gva" : "",
                               wg ? "wgmma" : "mma.sync", eo, eh);
                    }
            /* the default form with the solve's merges in the other form: other bits */
            double m = form_time({{&qc::gdn_solve_tc, !qc::gdn_solve_tc}}, eo, eh);
            printf("\ntime gdn_fwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  the solve's "
                   "merges %s; o rrms %.5f  ht rrms %.5f",
                   kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, m,
                   qc::gdn_solve_tc ? "in FP32 on the CUDA cores" : "on the tensor cores", eo, eh);
            cudaFree(o_def);
            cudaFree(ht_def);
        }
        if ((mma == qc::kGdnMmaBf16Fused || mma == qc::kGdnMmaBf16Wg) && o_smem) {
            unsigned long long od = dev_ndiff(o, o_smem, nv * 2),
                               hd = dev_ndiff(ht, ht_smem, ns * 4);
            printf("  bytes differing from bf16-smem: o %llu, ht %llu", od, hd);
            g_fail += mma == qc::kGdnMmaBf16Fused && (od || hd) ? 1 : 0;
        }
        printf("\n");
        fflush(stdout);
    }
    cudaFree(o_smem);
    cudaFree(ht_smem);
    qc::gdn_chunk_plan_free(&plan);
    for (void *x : {(void *)q, (void *)k, (void *)v, (void *)o, (void *)of, (void *)oref, (void *)g,
                    (void *)beta, (void *)ht, (void *)htref})
        cudaFree(x);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* FLOP per token and value head of the chunked backward as its kernels evaluate it (C = 64):
 *   wy_kernel again: K K^T, Q K^T, T K, T V: 2 C (3 dk + dv);
 *   state_kernel without o: W S, K^T Vn: 4 dk dv;
 *   dstate_kernel: K dS', A^T dO, (E Q)^T dO, W^T dVn: 6 dk dv + 2 C dv;
 *   grad_kernel: K K^T, dVn again, dO S^T, Vn dS'^T, dVn S^T, dO Vn^T, dVn (beta V)^T, T^T dVn,
 *     dW (beta E K)^T, T^T dW, T^T dT, P T^T, dAs K, dAs^T Q, Bl K:
 *     8 dk dv + C (12 dk + 8 dv) + 4 C^2.
 * In all 18 dk dv + C (18 dk + 12 dv) + 4 C^2 (the solves and element-wise work left out). */
double bwd_flop(int64_t tokens, int64_t hv, int64_t dk, int64_t dv)
{
    const double C = 64.0;
    return (double)tokens * hv * (18.0 * dk * dv + C * (18.0 * dk + 12.0 * dv) + 4.0 * C * C);
}

/* The backward at a speed-goal shape (BF16 q, k, v, dout, dq, dk, dv; no h0, no dht): each
 * path timed as the forward is; the BF16-operand paths' gradients (chunk-bf16 and
 * chunk-bf16-smem) measured against the TF32x3 path's (FP32-accurate per the checks) as
 * relative RMS. */
void time_bwd_shape(int64_t nseq, int64_t seq_t, int64_t hv)
{
    const int64_t h = 16, D = 128, T = nseq * seq_t;
    size_t nqk = T * h * D, nv = T * hv * D, ng = T * hv, ns = nseq * hv * D * D;
    bf16 *q, *k, *v, *dout, *dq, *dk, *dv;
    float *g, *beta, *dg, *db, *dh0, *ref[6], *wide[3];
    CHECK_CUDA(cudaMalloc(&q, nqk * 2));
    CHECK_CUDA(cudaMalloc(&k, nqk * 2));
    CHECK_CUDA(cudaMalloc(&v, nv * 2));
    CHECK_CUDA(cudaMalloc(&dout, nv * 2));
    CHECK_CUDA(cudaMalloc(&dq, nqk * 2));
    CHECK_CUDA(cudaMalloc(&dk, nqk * 2));
    CHECK_CUDA(cudaMalloc(&dv, nv * 2));
    CHECK_CUDA(cudaMalloc(&g, ng * 4));
    CHECK_CUDA(cudaMalloc(&beta, ng * 4));
    CHECK_CUDA(cudaMalloc(&dg, ng * 4));
    CHECK_CUDA(cudaMalloc(&db, ng * 4));
    CHECK_CUDA(cudaMalloc(&dh0, ns * 4));
    const size_t nref[6] = {nqk, nqk, nv, ng, ng, ns};
    for (int a = 0; a < 6; a++)
        CHECK_CUDA(cudaMalloc(&ref[a], nref[a] * 4));
    for (int a = 0; a < 3; a++)
        CHECK_CUDA(cudaMalloc(&wide[a], nref[a] * 4));
    gen_qk<<<blocks(T * h), 256>>>(q, T * h, D, 11);
    gen_qk<<<blocks(T * h), 256>>>(k, T * h, D, 12);
    gen_v<<<blocks(nv), 256>>>(v, nv, 13);
    gen_v<<<blocks(nv), 256>>>(dout, nv, 15);
    gen_gb<<<blocks(ng), 256>>>(g, beta, ng, 14);
    CHECK_CUDA(cudaGetLastError());
    float scale = 1.0f / sqrtf((float)D);
    qc::gdn_chunk_problem cp{nseq, seq_t, T, h, hv, D, D, scale, QS_BF16, nullptr};
    qc::gdn_chunk_plan plan, narrow; /* FP32-sized for the FP32-tile paths, BF16 for the staged */
    CHECK_CUDA(qc::gdn_chunk_plan_make_bwd(cp, nullptr, &plan));
    CHECK_CUDA(qc::gdn_chunk_plan_make_bwd(cp, nullptr, &narrow, true));
    double flop = bwd_flop(T, hv, D, D);
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    void *keep[6] = {}; /* the staged path's gradients, for the fused one */
    for (int mma : timed_mmas({qc::kGdnMmaTf32x3, qc::kGdnMmaBf16, qc::kGdnMmaBf16Smem,
                               qc::kGdnMmaBf16Fused, qc::kGdnMmaBf16Wg})) {
        auto bwd = [&] {
            return qc::gdn_chunk_bwd(cp, qc::gdn_chunk_staged(mma) ? narrow : plan, mma,
                                     qc::kGdnIoBf16, q, k, v, g, beta, nullptr, dout, nullptr, dq,
                                     dk, dv, dg, db, dh0, 0);
        };
        double med = median_ms(e0, e1, bwd);
        const bf16 *io[3] = {dq, dk, dv};
        float *f32[3] = {dg, db, dh0};
        float **dst = mma == qc::kGdnMmaTf32x3 ? ref : wide;
        for (int a = 0; a < 3; a++)
            bf16_to_f32<<<blocks(nref[a]), 256>>>(io[a], dst[a], nref[a]);
        if (mma == qc::kGdnMmaTf32x3)
            for (int a = 0; a < 3; a++)
                CHECK_CUDA(
                    cudaMemcpy(ref[3 + a], f32[a], nref[3 + a] * 4, cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaDeviceSynchronize());
        printf("time gdn_bwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  %6.1f TFLOP/s",
               kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, med,
               flop / (med * 1e-3) / 1e12);
        const void *outs[6] = {dq, dk, dv, dg, db, dh0};
        const size_t bytes[6] = {nqk * 2, nqk * 2, nv * 2, ng * 4, ng * 4, ns * 4};
        unsigned long long bits = 0;
        for (int a = 0; a < 6; a++)
            bits += dev_hash(outs[a], bytes[a]) * (2 * a + 1);
        printf("  bits %016llx", bits);
        if (mma == qc::kGdnMmaBf16Smem)
            for (int a = 0; a < 6; a++) {
                CHECK_CUDA(cudaMalloc(&keep[a], bytes[a]));
                CHECK_CUDA(cudaMemcpy(keep[a], outs[a], bytes[a], cudaMemcpyDeviceToDevice));
            }
        if (mma == qc::kGdnMmaBf16Smem) {
            /* again with *knob = value: its time, and the bytes that differ from the default's */
            auto variant = [&](int *knob, int value, const char *what) {
                int was = *knob;
                *knob = value;
                double m = median_ms(e0, e1, bwd);
                CHECK_CUDA(cudaDeviceSynchronize());
                *knob = was;
                unsigned long long nd = 0;
                for (int a = 0; a < 6; a++)
                    nd += dev_ndiff(outs[a], keep[a], bytes[a]);
                printf("\ntime gdn_bwd chunk-%-10s hv%-3lld %lld x %-6lld %8.3f ms  %s; bytes "
                       "differing: %llu",
                       kMmaName[mma], (long long)hv, (long long)nseq, (long long)seq_t, m, what,
                       nd);
                return nd;
            };
            const char *stores =
                qc::gdn_wy_wide ? "wy_fast storing pairs" : "wy_fast storing 16-byte rows";
            g_fail += variant(&qc::gdn_wy_wide, !qc::gdn_wy_wide, stores) != 0;
            const bool gva = qc::gdn_wy_gva_on(false); /* the backward: the W and U form */
            if (hv > h)
                g_fail += variant(&qc::gdn_wy_gva, !gva,
                                  gva ? "wy_fast a value head a block"
                                      : "wy_gva, a q/k head's value heads a block") != 0;
            if (qc::gdn_chunk_wgmma_available())
                variant(&qc::gdn_lean_wg, !qc::gdn_lean_wg,
                        qc::gdn_lean_wg ? "the walks on mma.sync" : "the walks on wgmma");
            variant(&qc::gdn_solve_tc, !qc::gdn_solve_tc,
                    qc::gdn_solve_tc ? "the solve's merges in FP32 on the CUDA cores"
                                     : "the solve's merges on the tensor cores");
            pipe_variants(nseq, "state pass", variant);
            if (nseq == 1) /* 4-warp walks of at most a block an SM: the reverse walk beside */
                g_fail += variant(&qc::gdn_bwd_overlap, !qc::gdn_bwd_overlap,
                                  qc::gdn_bwd_overlap
                                      ? "the state pass, then the reverse walk"
                                      : "the reverse walk beside the state pass in one stage") != 0;
            printf("\n");
            CHECK_CUDA(bwd()); /* the default's outputs again, for the lines below */
            CHECK_CUDA(cudaDeviceSynchronize());
        }
        if ((mma == qc::kGdnMmaBf16Fused || mma == qc::kGdnMmaBf16Wg) && keep[0]) {
            unsigned long long nd = 0;
            for (int a = 0; a < 6; a++)
                nd += dev_ndiff(outs[a], keep[a], bytes[a]);
            printf("  bytes differing from bf16-smem: %llu", nd);
            g_fail += mma == qc::kGdnMmaBf16Fused && nd ? 1 : 0;
        }
        if (mma != qc::kGdnMmaTf32x3) {
            const char *nm[6] = {"dq", "dk", "dv", "dg", "dbeta", "dh0"};
            const float *got[6] = {wide[0], wide[1], wide[2], dg, db, dh0};
            printf("  vs tf32x3 rrms:");
            for (int a = 0; a < 6; a++)
                printf(" %s %.4f", nm[a], dev_rrms(got[a], ref[a], nref[a]));
        }
        printf("\n");
        fflush(stdout);
    }
    for (void *x : keep)
        cudaFree(x);
    qc::gdn_chunk_plan_free(&plan);
    qc::gdn_chunk_plan_free(&narrow);
    for (void *x : {(void *)q, (void *)k, (void *)v, (void *)dout, (void *)dq, (void *)dk,
                    (void *)dv, (void *)g, (void *)beta, (void *)dg, (void *)db, (void *)dh0})
        cudaFree(x);
    for (float *x : ref)
        cudaFree(x);
    for (float *x : wide)
        cudaFree(x);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

} // namespace

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gdn_bench: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("gdn_bench on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
    qc::gdn_forms_from_env();
    const char *wg = getenv("QSPEC_GDN_LEAN_WG");
    printf("chunk-bf16-smem: the walk's products on %s (QSPEC_GDN_LEAN_WG=%s)\n",
           qc::gdn_lean_wg && qc::gdn_chunk_wgmma_available() ? "wgmma" : "mma.sync",
           wg ? wg : "unset");
    const char *lw = getenv("QSPEC_GDN_LEAN_WARPS");
    qc::gdn_lean_warps = lw && (lw[0] == '4' || lw[0] == '8') && lw[1] == 0 ? lw[0] - '0' : 0;
    printf("chunk-bf16-smem: lean serial kernels of %s warps a block (QSPEC_GDN_LEAN_WARPS=%s)\n",
           qc::gdn_lean_warps ? lw : "4 or 8", lw ? lw : "unset");
    const char *tc = getenv("QSPEC_GDN_SOLVE_TC"), *pp = getenv("QSPEC_GDN_PIPE");
    const char *ov = getenv("QSPEC_GDN_BWD_OVERLAP");
    printf("chunk-bf16-smem: the solve's merges %s (QSPEC_GDN_SOLVE_TC=%s)\n",
           qc::gdn_solve_tc ? "on the tensor cores" : "in FP32 on the CUDA cores",
           tc ? tc : "unset");
    printf("chunk-bf16-smem: the backward's reverse walk %s (QSPEC_GDN_BWD_OVERLAP=%s)\n",
           qc::gdn_bwd_overlap ? "beside the state pass where it fits" : "after the state pass",
           ov ? ov : "unset");
    if (qc::gdn_pipe < 0)
        printf("chunk-bf16-smem: one sequence's wy and walk in %d pieces where each has %d chunks "
               "or more (QSPEC_GDN_PIPE=%s)\n",
               qc::kPipeAutoPieces, static_cast<int>(qc::kPipeAutoChunks), pp ? pp : "unset");
    else
        printf("chunk-bf16-smem: one sequence's wy and walk in %d piece(s) (QSPEC_GDN_PIPE=%s)\n",
               qc::gdn_pipe > 1 ? qc::gdn_pipe : 1, pp ? pp : "unset");
    bool timing = true, fwd = true, bwd = true;
    for (int i = 1; i < argc; i++) {
        timing = timing && strcmp(argv[i], "--no-timing") != 0;
        g_skip_smem = g_skip_smem || strcmp(argv[i], "--skip-smem") == 0;
        g_profile = g_profile || strcmp(argv[i], "--profile") == 0;
        g_wgmma = g_wgmma || strcmp(argv[i], "--wgmma") == 0;
        fwd = fwd && strcmp(argv[i], "--bwd-only") != 0;
        bwd = bwd && strcmp(argv[i], "--fwd-only") != 0;
    }
    if (g_wgmma) {
        bool wg = qc::gdn_chunk_wgmma_available();
        printf("chunk-bf16-wgmma: %s\n", wg ? "the wgmma kernels run on this device"
                                            : "FAIL: no sm_90a wgmma kernels on this device");
        g_fail += wg ? 0 : 1;
    }
    if (g_profile) { /* the long sequence only, for a profiler (ncu --launch-skip) */
        if (fwd)
            time_shape(1, 32768, 64);
        if (bwd)
            time_bwd_shape(1, 32768, 64);
        return 0;
    }
    qs_ctx *ctx = qs_ctx_new();
    checks(ctx);
    if (!g_skip_smem && qc::gdn_lean_warps == 0) {
        /* the checks' problems are small, so they take 4 warps: the 8-warp kernels too */
        printf("checks again with QSPEC_GDN_LEAN_WARPS=8\n");
        qc::gdn_lean_warps = 8;
        checks(ctx);
        qc::gdn_lean_warps = 0;
        if (qc::gdn_chunk_wgmma_available()) { /* the staged walk on the other instructions */
            qc::gdn_lean_wg = !qc::gdn_lean_wg;
            for (int lw : {4, 8}) {
                printf("checks again with QSPEC_GDN_LEAN_WARPS=%d QSPEC_GDN_LEAN_WG=%d\n", lw,
                       qc::gdn_lean_wg);
                qc::gdn_lean_warps = lw;
                checks(ctx);
            }
            qc::gdn_lean_warps = 0;
            qc::gdn_lean_wg = !qc::gdn_lean_wg;
        }
    }
    if (!g_skip_smem) { /* the staged kernels with the solve's merges in the other form */
        qc::gdn_solve_tc = !qc::gdn_solve_tc;
        printf("checks again with QSPEC_GDN_SOLVE_TC=%d\n", qc::gdn_solve_tc);
        checks(ctx);
        qc::gdn_solve_tc = !qc::gdn_solve_tc;
    }
    qs_ctx_free(ctx);
    printf("gdn_bench: checks: %d failing\n", g_fail);
    fflush(stdout);
    if (timing && fwd) {
        printf("FLOP per token and value head: 6 dk dv + 2 C (3 dk + 2 dv), C = 64\n");
        time_shape(1, 1024, 32); /* warm-up of modules and clocks, printed too */
        time_shape(8, 1024, 32);
        time_shape(4, 8192, 64);
        time_shape(1, 32768, 64);
    }
    if (timing && bwd) {
        printf("backward FLOP per token and value head: 18 dk dv + C (18 dk + 12 dv) + 4 C^2, "
               "C = 64 (%.0f at dk = dv = 128)\n",
               bwd_flop(1, 1, 128, 128));
        time_bwd_shape(1, 1024, 32); /* warm-up, printed too */
        time_bwd_shape(8, 1024, 32);
        time_bwd_shape(4, 8192, 64);
        time_bwd_shape(1, 32768, 64);
    }
    return g_fail ? 1 : 0;
}
