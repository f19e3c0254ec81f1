/* gdn_emu.cc: kernels of the BF16-staged chunked GDN (cuda/qc_gdn_staged.cuh) run on the CPU
 * through cuda/emu/qc_emu.h: wy_fast_kernel (four and five tiles, W, U and A stored as pairs
 * and as 16-byte rows, the solve's merges in FP32 and on the tensor cores) against W, U, A and T
 * evaluated from their definitions, and the lean
 * walks (state_lean_kernel, forward and the backward's state pass, and dstate_lean_kernel) with
 * 4 and 8 warps a block, on mma.sync and on wgmma, against a direct evaluation of the walks
 * (docs/gdn.md, "On the GPU"), all in double precision with the kernels' BF16 roundings of the
 * operands (T diag(beta e^G), T diag(beta), the state, Vn, F . Vn, the state gradient, dVn,
 * scale e^G . dO) and of the outputs. Two sequences of 150 and 70 tokens (both end inside a
 * chunk), two value heads on one q/k head, an initial state and a dht; the walks' workspace
 * inputs (W, U, A) are random: the walks are functions of them whatever produced them. The
 * walks again over windows of the chunks, chained through FP32 states as gdn_pipe chains
 * them, must give one walk's bytes, and so must the state pass in one stage of tiles (the form
 * gdn_bwd_overlap runs). First, gdn_pipe_count's rule for how many pieces (the
 * default's bound, forced counts, the cases that keep one piece); put_strip's two forms on
 * distinct values; wy_gva_kernel, which must give wy_fast_kernel's bytes;
 * last, the staged forward and backward end to end
 * (wy_fast_kernel, the walks, grad_fast_kernel, qk_sum_h_kernel, as the plugin launches them)
 * against qs_gdn_fwd and qs_gdn_bwd, with the bounds of gdn_bench's checks. This checks the
 * kernels' logic (indices, the tiles' layouts and swizzle, fragments, wgmma descriptors, the
 * cp.async stages, barriers and proxy fences, as PTX defines them: a hazard fails the launch) where
 * there is no GPU; on a GPU gdn_bench checks the whole path against the reference. Prints "ok N -
 * ..." or "FAIL N - ..." with the relative RMS error of each output (the bound is 1e-3: the sums
 * inside the products run in another order than here, which moves an operand's BF16 rounding now
 * and then); exits 0 when every case passes. */
#define QC_EMU 1
#include "qc_gdn_staged.cuh"

#include "qspec/attention.h"
#include "qspec/status.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

namespace
{

using qc::emu::uint3e;
typedef __nv_bfloat16 bf16;

constexpr int D = 128, C = 64, HV = 2, H = 1;
const int32_t kCu[3] = {0, 150, 220};
constexpr int NSEQ = 2, T = 220;
const int32_t kChunk0[3] = {0, 3, 5};
constexpr int NCH = 5;

double bfr(double x) /* the BF16 rounding of x (through FP32, as the kernels round) */
{
    return static_cast<float>(bf16(static_cast<float>(x)));
}

uint64_t g_state = 0x9E3779B97F4A7C15ull;
double uni() /* in [-1, 1) */
{
    g_state = g_state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(g_state >> 11) / 4503599627370496.0 - 1.0;
}
std::vector<bf16> rand_bf16(size_t n, double a)
{
    std::vector<bf16> v(n);
    for (auto &x : v)
        x = bf16(static_cast<float>(a * uni()));
    return v;
}
std::vector<float> rand_f32(size_t n, double a, double b)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = static_cast<float>(a + b * uni());
    return v;
}

double rrms(const std::vector<double> &got, const std::vector<double> &ref)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double d = got[i] - ref[i];
        e += std::isfinite(got[i]) ? d * d : 1e300;
        r += ref[i] * ref[i];
    }
    return std::sqrt(e / (r > 0 ? r : 1));
}
template <typename V> std::vector<double> wide(const V &v)
{
    return std::vector<double>(v.begin(), v.end());
}

struct inputs {
    std::vector<bf16> q, k, v, W, U, A, dout;
    std::vector<float> g, beta, h0, dht;
    float scale = 1.0f / std::sqrt(static_cast<float>(D));
    inputs()
    {
        q = rand_bf16(static_cast<size_t>(T) * H * D, 0.1);
        k = rand_bf16(static_cast<size_t>(T) * H * D, 0.1);
        W = rand_bf16(static_cast<size_t>(HV) * T * D, 0.1);
        U = rand_bf16(static_cast<size_t>(HV) * T * D, 1.0);
        A = rand_bf16(static_cast<size_t>(HV) * T * C, 0.05);
        dout = rand_bf16(static_cast<size_t>(T) * HV * D, 1.0);
        g = rand_f32(static_cast<size_t>(T) * HV, -0.05, 0.04); /* log decays in (-0.09, -0.01) */
        v = rand_bf16(static_cast<size_t>(T) * HV * D, 1.0);
        beta = rand_f32(static_cast<size_t>(T) * HV, 0.5, 0.45);
        h0 = rand_f32(static_cast<size_t>(NSEQ) * HV * D * D, 0.0, 0.5);
        dht = rand_f32(static_cast<size_t>(NSEQ) * HV * D * D, 0.0, 0.5);
    }
};

/* The gate vectors of a chunk of nc tokens from tok0 (value head hv): F, scale e^G, e^{G_l}. */
void gates(const inputs &in, int tok0, int nc, int hv, double *F, double *E, double *egl)
{
    float G[C], acc = 0.0f;
    for (int i = 0; i < C; i++) {
        acc = acc + (i < nc ? in.g[static_cast<size_t>(tok0 + i) * HV + hv] : 0.0f);
        G[i] = acc;
    }
    for (int i = 0; i < C; i++) {
        F[i] = static_cast<float>(std::exp(G[C - 1] - G[i]));
        E[i] = static_cast<float>(in.scale * std::exp(G[i]));
    }
    *egl = static_cast<float>(std::exp(G[C - 1]));
}

struct walk_ref {
    std::vector<double> o, ht, hs, vn, dhs, dvn, dh0;
};

/* The forward walk and the backward's two walks, sequence by sequence, value head by value
 * head, as docs/gdn.md states them (state S [dk][dv]). */
walk_ref reference(const inputs &in)
{
    walk_ref r;
    r.o.assign(static_cast<size_t>(T) * HV * D, 0);
    r.ht.assign(static_cast<size_t>(NSEQ) * HV * D * D, 0);
    r.hs.assign(static_cast<size_t>(HV) * NCH * D * D, 0);
    r.vn.assign(static_cast<size_t>(HV) * T * D, 0);
    r.dhs = r.hs;
    r.dvn = r.vn;
    r.dh0 = r.ht;
    auto at = [](const std::vector<bf16> &v, size_t i) { return static_cast<double>(v[i]); };
    std::vector<double> S(D * D), Sb(D * D), Vn(C * D), vb(C * D), v2(C * D);
    double F[C], E[C], egl;
    for (int n = 0; n < NSEQ; n++)
        for (int hv = 0; hv < HV; hv++) {
            size_t sb = (static_cast<size_t>(n) * HV + hv) * D * D;
            int len = kCu[n + 1] - kCu[n], nch = (len + C - 1) / C;
            for (int e = 0; e < D * D; e++)
                S[e] = in.h0[sb + e];
            for (int c = 0; c < nch; c++) {
                int tok0 = kCu[n] + c * C, nc = len - c * C < C ? len - c * C : C;
                size_t row0 = static_cast<size_t>(hv) * T + tok0;
                gates(in, tok0, nc, hv, F, E, &egl);
                for (int e = 0; e < D * D; e++) {
                    Sb[e] = bfr(S[e]);
                    r.hs[(static_cast<size_t>(hv) * NCH + kChunk0[n] + c) * D * D + e] = Sb[e];
                }
                for (int i = 0; i < nc; i++)
                    for (int v = 0; v < D; v++) {
                        double ws = 0;
                        for (int d = 0; d < D; d++)
                            ws += at(in.W, (row0 + i) * D + d) * Sb[d * D + v];
                        double x = static_cast<float>(at(in.U, (row0 + i) * D + v) - ws);
                        Vn[i * D + v] = x;
                        vb[i * D + v] = bfr(x);
                        v2[i * D + v] = bfr(static_cast<float>(x * F[i]));
                        r.vn[(row0 + i) * D + v] = bfr(x);
                    }
                for (int i = 0; i < nc; i++)
                    for (int v = 0; v < D; v++) {
                        double qs = 0, av = 0;
                        for (int d = 0; d < D; d++)
                            qs +=
                                at(in.q, static_cast<size_t>(tok0 + i) * H * D + d) * Sb[d * D + v];
                        for (int j = 0; j < nc; j++)
                            av += at(in.A, (row0 + i) * C + j) * vb[j * D + v];
                        r.o[(static_cast<size_t>(tok0 + i) * HV + hv) * D + v] =
                            bfr(static_cast<float>(qs * E[i]) + av);
                    }
                for (int d = 0; d < D; d++)
                    for (int v = 0; v < D; v++) {
                        double kv = 0;
                        for (int i = 0; i < nc; i++)
                            kv +=
                                at(in.k, static_cast<size_t>(tok0 + i) * H * D + d) * v2[i * D + v];
                        S[d * D + v] = static_cast<float>(egl * S[d * D + v]) + kv;
                    }
            }
            for (int e = 0; e < D * D; e++)
                r.ht[sb + e] = S[e];
            /* the reverse walk: dS (the gradient of the state after the chunk) */
            std::vector<double> dS(in.dht.begin() + static_cast<std::ptrdiff_t>(sb),
                                   in.dht.begin() + static_cast<std::ptrdiff_t>(sb + D * D)),
                dSb(D * D), dt(C * D), na(C * D), oa(C * D);
            for (int c = nch - 1; c >= 0; c--) {
                int tok0 = kCu[n] + c * C, nc = len - c * C < C ? len - c * C : C;
                size_t row0 = static_cast<size_t>(hv) * T + tok0;
                gates(in, tok0, nc, hv, F, E, &egl);
                for (int e = 0; e < D * D; e++) {
                    dSb[e] = bfr(dS[e]);
                    r.dhs[(static_cast<size_t>(hv) * NCH + kChunk0[n] + c) * D * D + e] = dSb[e];
                }
                for (int i = 0; i < C; i++)
                    for (int v = 0; v < D; v++) {
                        double kd = 0, oa_ = 0;
                        if (i < nc)
                            for (int d = 0; d < D; d++)
                                kd += at(in.k, static_cast<size_t>(tok0 + i) * H * D + d) *
                                      dSb[d * D + v];
                        for (int j = 0; j < nc; j++)
                            oa_ += at(in.dout, (static_cast<size_t>(tok0 + j) * HV + hv) * D + v) *
                                   at(in.A, (row0 + j) * C + i);
                        double x = static_cast<float>(kd) * F[i] + oa_;
                        dt[i * D + v] = bfr(x);
                        na[i * D + v] = bfr(-x);
                        if (i < nc)
                            r.dvn[(row0 + i) * D + v] = bfr(x);
                        oa[i * D + v] =
                            i < nc ? bfr(static_cast<float>(
                                         at(in.dout,
                                            (static_cast<size_t>(tok0 + i) * HV + hv) * D + v) *
                                         E[i]))
                                   : 0.0;
                    }
                for (int d = 0; d < D; d++)
                    for (int v = 0; v < D; v++) {
                        double x = 0;
                        for (int j = 0; j < nc; j++)
                            x += oa[j * D + v] *
                                     at(in.q, static_cast<size_t>(tok0 + j) * H * D + d) +
                                 na[j * D + v] * at(in.W, (row0 + j) * D + d);
                        dS[d * D + v] = static_cast<float>(egl * dS[d * D + v]) + x;
                    }
            }
            for (int e = 0; e < D * D; e++)
                r.dh0[sb + e] = dS[e];
        }
    return r;
}

int g_fail = 0, g_n = 0;

void report(const char *what, const std::vector<std::pair<const char *, double>> &errs, bool ran)
{
    g_n++;
    bool ok = ran;
    for (auto &e : errs)
        ok = ok && e.second <= 1e-3;
    g_fail += ok ? 0 : 1;
    printf("%s %d - %s:", ok ? "ok" : "FAIL", g_n, what);
    if (!ran)
        printf(" the launch failed (a hazard or a block that never ends)");
    for (auto &e : errs)
        printf(" %s %.2e", e.first, e.second);
    printf("\n");
    fflush(stdout);
}

template <int kW, bool kWg> void run(const inputs &in, const walk_ref &ref)
{
    qc::gdn_chunk_problem p{NSEQ, 0, T, H, HV, D, D, in.scale, 0, kCu};
    constexpr int cols = 16 * kW;
    const uint3e grid{static_cast<unsigned>(D / cols), HV, NSEQ}, block{32u * kW, 1, 1};
    char name[96];
    /* the forward: o and the final state */
    {
        std::vector<bf16> o(static_cast<size_t>(T) * HV * D, bf16(0.0f));
        std::vector<float> ht(ref.ht.size(), 0.0f);
        bool ran = qc::emu::launch(grid, block, qc::state_lean_kernel<true, kW, kWg>, p,
                                   in.q.data(), in.k.data(), in.g.data(), in.W.data(), in.U.data(),
                                   in.A.data(), in.h0.data(), o.data(), ht.data(),
                                   static_cast<const int32_t *>(nullptr), int64_t{0},
                                   static_cast<bf16 *>(nullptr), static_cast<bf16 *>(nullptr));
        snprintf(name, sizeof name, "state_lean_kernel, forward, %d warps, %s", kW,
                 kWg ? "wgmma" : "mma.sync");
        report(name, {{"o", rrms(wide(o), ref.o)}, {"ht", rrms(wide(ht), ref.ht)}}, ran);
    }
    /* the backward's state pass: the states before each chunk, Vn over U */
    {
        std::vector<bf16> hs(ref.hs.size(), bf16(0.0f)), vn = in.U;
        bool ran = qc::emu::launch(
            grid, block, qc::state_lean_kernel<false, kW, kWg>, p,
            static_cast<const bf16 *>(nullptr), in.k.data(), in.g.data(), in.W.data(), vn.data(),
            static_cast<const bf16 *>(nullptr), in.h0.data(), static_cast<bf16 *>(nullptr),
            static_cast<float *>(nullptr), kChunk0, int64_t{NCH}, hs.data(), vn.data());
        snprintf(name, sizeof name, "state_lean_kernel, state pass, %d warps, %s", kW,
                 kWg ? "wgmma" : "mma.sync");
        report(name, {{"hs", rrms(wide(hs), ref.hs)}, {"vn", rrms(wide(vn), ref.vn)}}, ran);
    }
    /* the reverse walk: the state gradients, dVn, dh0 */
    {
        std::vector<bf16> dhs(ref.dhs.size(), bf16(0.0f)), dvn(ref.dvn.size(), bf16(0.0f));
        std::vector<float> dh0(ref.dh0.size(), 0.0f);
        bool ran =
            qc::emu::launch(grid, block, qc::dstate_lean_kernel<kW, kWg>, p, kChunk0, int64_t{NCH},
                            in.q.data(), in.k.data(), in.dout.data(), in.g.data(), in.W.data(),
                            in.A.data(), in.dht.data(), dhs.data(), dvn.data(), dh0.data());
        snprintf(name, sizeof name, "dstate_lean_kernel, %d warps, %s", kW,
                 kWg ? "wgmma" : "mma.sync");
        report(name,
               {{"dhs", rrms(wide(dhs), ref.dhs)},
                {"dVn", rrms(wide(dvn), ref.dvn)},
                {"dh0", rrms(wide(dh0), ref.dh0)}},
               ran);
    }
}

/* wy_fast_kernel's outputs of every chunk, as docs/gdn.md states them: G the chunk's cumsum
 * of g, L = strictly lower (beta K K^T . Gamma), T = (I + L)^-1, A = scale (Q K^T . Gamma)
 * (lower), W = T diag(beta e^G) K and U = T diag(beta) V with T's BF16 roundings as operands. */
struct wy_ref_t {
    std::vector<double> W, U, A, T;
};
wy_ref_t wy_reference(const inputs &in)
{
    wy_ref_t r;
    r.W.assign(static_cast<size_t>(HV) * T * D, 0);
    r.U = r.W;
    r.A.assign(static_cast<size_t>(HV) * T * C, 0);
    r.T = r.A;
    auto at = [](const std::vector<bf16> &v, size_t i) { return static_cast<double>(v[i]); };
    for (int n = 0; n < NSEQ; n++)
        for (int c = 0; c * C < kCu[n + 1] - kCu[n]; c++)
            for (int hv = 0; hv < HV; hv++) {
                int tok0 = kCu[n] + c * C, nc = std::min(C, kCu[n + 1] - tok0);
                double G[C], Bt[C], L[C][C] = {}, Tm[C][C] = {};
                float acc = 0.0f;
                for (int i = 0; i < nc; i++) {
                    acc = acc + in.g[static_cast<size_t>(tok0 + i) * HV + hv];
                    G[i] = acc;
                    Bt[i] = in.beta[static_cast<size_t>(tok0 + i) * HV + hv];
                }
                auto kq = [&](const std::vector<bf16> &x, int i, int j) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += at(x, static_cast<size_t>(tok0 + i) * H * D + d) *
                             at(in.k, static_cast<size_t>(tok0 + j) * H * D + d);
                    return s;
                };
                size_t row0 = static_cast<size_t>(hv) * T + tok0;
                for (int i = 0; i < nc; i++)
                    for (int j = 0; j <= i; j++) {
                        double gam = std::exp(G[i] - G[j]);
                        if (j < i)
                            L[i][j] = Bt[i] * kq(in.k, i, j) * gam;
                        r.A[(row0 + i) * C + j] = bfr(in.scale * kq(in.q, i, j) * gam);
                    }
                for (int i = 0; i < nc; i++) /* forward substitution, row by row */
                    for (int j = 0; j <= i; j++) {
                        double x = i == j ? 1.0 : 0.0;
                        for (int m = j; m < i; m++)
                            x -= L[i][m] * Tm[m][j];
                        Tm[i][j] = x;
                    }
                for (int i = 0; i < nc; i++) {
                    for (int j = 0; j <= i; j++)
                        r.T[(row0 + i) * C + j] = bfr(Tm[i][j]);
                    for (int d = 0; d < D; d++) {
                        double w = 0, u = 0;
                        for (int j = 0; j <= i; j++) {
                            double tw = bfr(static_cast<float>(Tm[i][j]) *
                                            static_cast<float>(Bt[j] * std::exp(G[j])));
                            double tu =
                                bfr(static_cast<float>(Tm[i][j]) * static_cast<float>(Bt[j]));
                            w += tw * at(in.k, static_cast<size_t>(tok0 + j) * H * D + d);
                            u += tu * at(in.v, (static_cast<size_t>(tok0 + j) * HV + hv) * D + d);
                        }
                        r.W[(row0 + i) * D + d] = bfr(w);
                        r.U[(row0 + i) * D + d] = bfr(u);
                    }
                }
            }
    return r;
}

/* W, U, A and T of a wy kernel's launch on grid (chunks, heads). */
struct wy_out {
    std::vector<bf16> W, U, A, T;
    bool ran;
};
template <class K>
wy_out launch_wy(const inputs &in, const wy_ref_t &ref, K kernel, unsigned heads, bool tc = false)
{
    qc::gdn_chunk_problem p{NSEQ, 0, T, H, HV, D, D, in.scale, 0, kCu};
    p.solve_tc = tc;
    std::vector<int32_t> chunks;
    for (int n = 0; n < NSEQ; n++)
        for (int t = kCu[n]; t < kCu[n + 1]; t += C) {
            chunks.push_back(t);
            chunks.push_back(std::min(C, kCu[n + 1] - t));
        }
    const bf16 nan = bf16(NAN);
    wy_out r{std::vector<bf16>(ref.W.size(), nan), std::vector<bf16>(ref.U.size(), nan),
             std::vector<bf16>(ref.A.size(), nan), std::vector<bf16>(ref.T.size(), nan), false};
    r.ran = qc::emu::launch(
        uint3e{static_cast<unsigned>(chunks.size() / 2), heads, 1}, uint3e{qc::kThreads, 1, 1},
        kernel, p, static_cast<const int32_t *>(chunks.data()), in.q.data(), in.k.data(),
        in.v.data(), in.g.data(), in.beta.data(), r.W.data(), r.U.data(), r.A.data(), r.T.data());
    return r;
}

/* The elements of a and b whose bytes differ. */
template <class E> size_t ndiff(const std::vector<E> &a, const std::vector<E> &b)
{
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++)
        n += memcmp(&a[i], &b[i], sizeof(E)) != 0;
    return n;
}

/* wy_fast_kernel against the definitions; with four tiles, wy_gva_kernel (the value heads of a
 * q/k head in one block) too, which must give the same bytes. kTc: the solve's block merges on the
 * tensor cores (gdn_solve_tc). */
template <bool kLateV, bool kWide, bool kTc = false>
void run_wy(const inputs &in, const wy_ref_t &ref)
{
    wy_out r = launch_wy(in, ref, qc::wy_fast_kernel<kLateV, kWide>, HV, kTc);
    const char *solve = kTc ? ", the solve on the tensor cores" : "";
    char name[128];
    snprintf(name, sizeof name, "wy_fast_kernel, %s, %s%s", kLateV ? "four tiles" : "five tiles",
             kWide ? "16-byte rows" : "pairs", solve);
    report(name,
           {{"W", rrms(wide(r.W), ref.W)},
            {"U", rrms(wide(r.U), ref.U)},
            {"A", rrms(wide(r.A), ref.A)},
            {"T", rrms(wide(r.T), ref.T)}},
           r.ran);
    if (!kLateV)
        return;
    wy_out g = launch_wy(in, ref, qc::wy_gva_kernel<kWide>, H, kTc);
    size_t nd = ndiff(g.W, r.W) + ndiff(g.U, r.U) + ndiff(g.A, r.A) + ndiff(g.T, r.T);
    snprintf(name, sizeof name, "wy_gva_kernel (%d value heads a block), %s%s: bytes differing %zu",
             HV / H, kWide ? "16-byte rows" : "pairs", solve, nd);
    report(name,
           {{"W", rrms(wide(g.W), ref.W)},
            {"U", rrms(wide(g.U), ref.U)},
            {"A", rrms(wide(g.A), ref.A)},
            {"T", rrms(wide(g.T), ref.T)},
            {"differing", static_cast<double>(nd)}},
           g.ran);
}

/* The BF16 value of bits 0x3F80 + x (x < 1024: 1024 distinct finite values, 1.0 upwards). */
float code(int x)
{
    bf16 b;
    b.x = static_cast<uint16_t>(0x3F80 + x);
    return static_cast<float>(b);
}

/* put_strip's two forms on one warp: accumulators c[8][4] with distinct BF16 values, handed
 * over as BF16 pairs and as 16-byte rows (quad_transpose), into two [16][64] arrays. */
void strip_kernel(bf16 *pairs, bf16 *rows)
{
    float c[8][4];
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++)
            c[n][e] = code(64 * qc::acc_row(e) + qc::acc_col(n, e));
    qc::put_strip(0, 0, c, [&](int i, int j, float x0, float x1) {
        qc::st_pair(pairs + i * 64 + j, x0, x1);
    });
    qc::put_strip(0, 0, c,
                  qc::wide([&](int i, int j, uint4 v) { memcpy(rows + i * 64 + j, &v, 16); }));
}

void strip_check()
{
    std::vector<bf16> pairs(16 * 64, bf16(-1.0f)), rows(16 * 64, bf16(-1.0f));
    bool ran =
        qc::emu::launch(uint3e{1, 1, 1}, uint3e{32, 1, 1}, strip_kernel, pairs.data(), rows.data());
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) {
            float want = code(64 * i + j);
            bad += static_cast<float>(pairs[i * 64 + j]) != want;
            bad += static_cast<float>(rows[i * 64 + j]) != want;
        }
    g_n++;
    g_fail += ran && bad == 0 ? 0 : 1;
    printf("%s %d - put_strip: pairs and 16-byte rows (quad_transpose) give each element its "
           "place: %d of 2048 wrong\n",
           ran && bad == 0 ? "ok" : "FAIL", g_n, bad);
}

/* The staged path end to end, as launch_fast and launch_bwd_fast of cuda/qc_gdn_chunk.cu run
 * it (mma.sync or wgmma walks, pairs or 16-byte stores), against the reference recurrence
 * (qs_gdn_fwd) and its backward (qs_gdn_bwd): three sequences of 64, 0 and 200 tokens, four
 * value heads on two q/k heads, l2-normalized q and k, an initial state, a dht and some gates
 * at -30; the bounds of gdn_bench's checks of these kernels (2e-2 forward, 3e-2 backward). */
struct e2e {
    static constexpr int B = 3, TT = 264, HQ = 2, HVV = 4;
    const int32_t cu[B + 1] = {0, 64, 64, 264};
    std::vector<float> q, k, v, g, beta, h0, dout, dht;
    std::vector<bf16> qb, kb, vb, dob;
    std::vector<int32_t> chunks, chunk0;
    qs_gdn_params p{};
    e2e()
    {
        auto gauss = [] {
            return static_cast<float>(std::sqrt(-2.0 * std::log(0.5 * (uni() + 1.0) + 1e-300)) *
                                      std::cos(3.141592653589793 * uni()));
        };
        auto bfr32 = [](float x) { return static_cast<float>(bf16(x)); };
        q.resize(static_cast<size_t>(TT) * HQ * D);
        k.resize(q.size());
        for (std::vector<float> *y : {&q, &k})
            for (size_t r = 0; r < static_cast<size_t>(TT) * HQ; r++) {
                double ss = 0;
                float row[D];
                for (float &e : row) {
                    e = gauss();
                    ss += static_cast<double>(e) * e;
                }
                for (int d = 0; d < D; d++)
                    (*y)[r * D + d] = bfr32(static_cast<float>(row[d] / std::sqrt(ss + 1e-6)));
            }
        v.resize(static_cast<size_t>(TT) * HVV * D);
        dout.resize(v.size());
        for (float &e : v)
            e = bfr32(gauss());
        for (float &e : dout)
            e = bfr32(gauss());
        g.resize(static_cast<size_t>(TT) * HVV);
        beta.resize(g.size());
        for (size_t e = 0; e < g.size(); e++) {
            g[e] = e % 29 == 7   ? -30.0f
                   : e % 13 == 4 ? 0.0f
                                 : static_cast<float>(-0.15 * (uni() + 1.0));
            beta[e] = static_cast<float>(0.5 + 0.45 * uni());
        }
        h0.resize(static_cast<size_t>(B) * HVV * D * D);
        dht.resize(h0.size());
        for (float &e : h0)
            e = 0.5f * gauss();
        for (float &e : dht)
            e = 0.5f * gauss();
        qb.assign(q.begin(), q.end());
        kb.assign(k.begin(), k.end());
        vb.assign(v.begin(), v.end());
        dob.assign(dout.begin(), dout.end());
        for (int n = 0; n < B; n++) {
            chunk0.push_back(static_cast<int32_t>(chunks.size() / 2));
            for (int t = cu[n]; t < cu[n + 1]; t += C) {
                chunks.push_back(t);
                chunks.push_back(std::min(C, cu[n + 1] - t));
            }
        }
        chunk0.push_back(static_cast<int32_t>(chunks.size() / 2));
        p.b = B;
        p.t = TT;
        p.h = HQ;
        p.hv = HVV;
        p.dk = D;
        p.dv = D;
        p.cu_seqlens = cu;
        p.scale = 1.0f / std::sqrt(static_cast<float>(D));
        p.dtype = QS_FP32;
    }
};

template <bool kWg, bool kWide> void run_e2e(const e2e &x, qs_ctx *ctx)
{
    constexpr int HVV = e2e::HVV, TT = e2e::TT, B = e2e::B;
    const int64_t nch = static_cast<int64_t>(x.chunks.size() / 2);
    const size_t rows = static_cast<size_t>(HVV) * TT, ns = x.h0.size();
    qc::gdn_chunk_problem cp{B, 0, TT, e2e::HQ, HVV, D, D, x.p.scale, QS_FP32, x.cu};
    const uint3e walk_grid{D / 64, HVV, B}, walk_block{128, 1, 1};
    const uint3e wy_grid{static_cast<unsigned>(nch), HVV, 1}, block{qc::kThreads, 1, 1};
    /* the new forms take wy_gva_kernel, a block per (chunk, q/k head) */
    const uint3e wy_grid_new{static_cast<unsigned>(nch), kWide ? e2e::HQ : HVV, 1};
    auto wy_kernel = kWide ? qc::wy_gva_kernel<kWide> : qc::wy_fast_kernel<true, kWide>;
    const bf16 nan = bf16(NAN);
    std::vector<bf16> W(rows * D, nan), U(rows * D, nan), A(rows * C, nan), Tw(rows * C, nan),
        dVn(rows * D, nan), hs(static_cast<size_t>(HVV) * nch * D * D, nan), dhs(hs.size(), nan),
        dqk(2 * rows * D, nan), o(rows * D, nan), dq(x.q.size(), nan), dk(x.q.size(), nan),
        dv(x.v.size(), nan);
    std::vector<float> ht(ns, NAN), dg(x.g.size(), NAN), db(x.g.size(), NAN), dh0(ns, NAN);
    char name[128];
    /* the forward: wy_fast_kernel, then the walk with o */
    bool ran = qc::emu::launch(wy_grid_new, block, wy_kernel, cp,
                               static_cast<const int32_t *>(x.chunks.data()), x.qb.data(),
                               x.kb.data(), x.vb.data(), x.g.data(), x.beta.data(), W.data(),
                               U.data(), A.data(), static_cast<bf16 *>(nullptr));
    ran = ran &&
          qc::emu::launch(walk_grid, walk_block, qc::state_lean_kernel<true, 4, kWg>, cp,
                          x.qb.data(), x.kb.data(), x.g.data(), W.data(), U.data(), A.data(),
                          x.h0.data(), o.data(), ht.data(), static_cast<const int32_t *>(nullptr),
                          int64_t{0}, static_cast<bf16 *>(nullptr), static_cast<bf16 *>(nullptr));
    std::vector<float> ro(x.v.size()), rht(ns);
    qs_status st = qs_gdn_fwd(ctx, &x.p, x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                              x.beta.data(), x.h0.data(), ro.data(), rht.data());
    snprintf(name, sizeof name, "the staged forward against qs_gdn_fwd, %s walk, %s",
             kWg ? "wgmma" : "mma.sync", kWide ? "16-byte rows, wy_gva" : "pairs");
    double eo = rrms(wide(o), wide(ro)), eh = rrms(wide(ht), wide(rht));
    g_n++;
    bool ok = ran && st == QS_OK && eo <= 2e-2 && eh <= 2e-2;
    g_fail += ok ? 0 : 1;
    printf("%s %d - %s: o %.2e ht %.2e%s\n", ok ? "ok" : "FAIL", g_n, name, eo, eh,
           ran ? "" : " (the launch failed)");
    /* the backward: wy_fast_kernel keeping T, the state pass, the reverse walk, grad_fast_kernel,
     * the sums over each q/k head's value heads */
    ran = qc::emu::launch(wy_grid_new, block, wy_kernel, cp,
                          static_cast<const int32_t *>(x.chunks.data()), x.qb.data(), x.kb.data(),
                          x.vb.data(), x.g.data(), x.beta.data(), W.data(), U.data(), A.data(),
                          Tw.data());
    ran =
        ran && qc::emu::launch(walk_grid, walk_block, qc::state_lean_kernel<false, 4, kWg>, cp,
                               static_cast<const bf16 *>(nullptr), x.kb.data(), x.g.data(),
                               W.data(), U.data(), static_cast<const bf16 *>(nullptr), x.h0.data(),
                               static_cast<bf16 *>(nullptr), static_cast<float *>(nullptr),
                               x.chunk0.data(), nch, hs.data(), U.data());
    ran = ran &&
          qc::emu::launch(walk_grid, walk_block, qc::dstate_lean_kernel<4, kWg>, cp,
                          x.chunk0.data(), nch, x.qb.data(), x.kb.data(), x.dob.data(), x.g.data(),
                          W.data(), A.data(), x.dht.data(), dhs.data(), dVn.data(), dh0.data());
    ran = ran && qc::emu::launch(
                     wy_grid, block, qc::grad_fast_kernel, cp,
                     static_cast<const int32_t *>(x.chunks.data()), nch, x.qb.data(), x.kb.data(),
                     x.vb.data(), x.dob.data(), x.g.data(), x.beta.data(),
                     static_cast<const bf16 *>(U.data()), static_cast<const bf16 *>(A.data()),
                     static_cast<const bf16 *>(Tw.data()), static_cast<const bf16 *>(dVn.data()),
                     static_cast<const bf16 *>(hs.data()), static_cast<const bf16 *>(dhs.data()),
                     dv.data(), dg.data(), db.data(), dqk.data());
    const unsigned nb = static_cast<unsigned>((x.q.size() / 8 + 255) / 256);
    ran = ran && qc::emu::launch(uint3e{nb, 2, 1}, uint3e{256, 1, 1}, qc::qk_sum_h_kernel, cp,
                                 static_cast<const bf16 *>(dqk.data()), dq.data(), dk.data());
    std::vector<float> rdq(x.q.size()), rdk(x.q.size()), rdv(x.v.size()), rdg(x.g.size()),
        rdb(x.g.size()), rdh0(ns);
    st = qs_gdn_bwd(ctx, &x.p, x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(),
                    x.h0.data(), x.dout.data(), x.dht.data(), rdq.data(), rdk.data(), rdv.data(),
                    rdg.data(), rdb.data(), rdh0.data());
    snprintf(name, sizeof name, "the staged backward against qs_gdn_bwd, %s walks, %s",
             kWg ? "wgmma" : "mma.sync", kWide ? "16-byte rows, wy_gva" : "pairs");
    const std::vector<std::pair<const char *, double>> errs = {
        {"dq", rrms(wide(dq), wide(rdq))},    {"dk", rrms(wide(dk), wide(rdk))},
        {"dv", rrms(wide(dv), wide(rdv))},    {"dg", rrms(wide(dg), wide(rdg))},
        {"dbeta", rrms(wide(db), wide(rdb))}, {"dh0", rrms(wide(dh0), wide(rdh0))}};
    ok = ran && st == QS_OK;
    for (auto &e : errs)
        ok = ok && e.second <= 3e-2;
    g_n++;
    g_fail += ok ? 0 : 1;
    printf("%s %d - %s:", ok ? "ok" : "FAIL", g_n, name);
    for (auto &e : errs)
        printf(" %s %.2e", e.first, e.second);
    printf("%s\n", ran ? "" : " (a launch failed)");
    fflush(stdout);
}

/* The T form of the staged forward (gdn_tform): wy (a value head a block, or kGva the q/k head's
 * value heads) keeps Tu and A, and the walk of kW warps forms Vn = Tu (V - e^G . (K S)). */
template <int kW, bool kGva, bool kWg, bool kTc = false>
void run_e2e_tform(const e2e &x, qs_ctx *ctx)
{
    constexpr int HVV = e2e::HVV, TT = e2e::TT, B = e2e::B;
    const int64_t nch = static_cast<int64_t>(x.chunks.size() / 2);
    const size_t rows = static_cast<size_t>(HVV) * TT, ns = x.h0.size();
    qc::gdn_chunk_problem cp{B, 0, TT, e2e::HQ, HVV, D, D, x.p.scale, QS_FP32, x.cu};
    cp.solve_tc = kTc;
    const bf16 nan = bf16(NAN);
    std::vector<bf16> Tu(rows * C, nan), A(rows * C, nan), o(rows * D, nan);
    std::vector<float> ht(ns, NAN);
    auto wy = kGva ? qc::wy_gva_kernel<false, true> : qc::wy_fast_kernel<true, false, true>;
    bool ran = qc::emu::launch(
        uint3e{static_cast<unsigned>(nch), kGva ? e2e::HQ : HVV, 1}, uint3e{qc::kThreads, 1, 1}, wy,
        cp, static_cast<const int32_t *>(x.chunks.data()), x.qb.data(), x.kb.data(), x.vb.data(),
        x.g.data(), x.beta.data(), Tu.data(), static_cast<bf16 *>(nullptr), A.data(),
        static_cast<bf16 *>(nullptr));
    ran = ran &&
          qc::emu::launch(uint3e{D / (16 * kW), HVV, B}, uint3e{32u * kW, 1, 1},
                          qc::state_lean_kernel<true, kW, kWg, true>, cp, x.qb.data(), x.kb.data(),
                          x.g.data(), static_cast<const bf16 *>(Tu.data()), x.vb.data(),
                          static_cast<const bf16 *>(A.data()), x.h0.data(), o.data(), ht.data(),
                          static_cast<const int32_t *>(nullptr), int64_t{0},
                          static_cast<bf16 *>(nullptr), static_cast<bf16 *>(nullptr));
    std::vector<float> ro(x.v.size()), rht(ns);
    qs_status st = qs_gdn_fwd(ctx, &x.p, x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                              x.beta.data(), x.h0.data(), ro.data(), rht.data());
    double eo = rrms(wide(o), wide(ro)), eh = rrms(wide(ht), wide(rht));
    g_n++;
    bool ok = ran && st == QS_OK && eo <= 2e-2 && eh <= 2e-2;
    g_fail += ok ? 0 : 1;
    printf("%s %d - the staged forward's T form against qs_gdn_fwd, %d warps, %s, %s%s: o %.2e ht "
           "%.2e%s\n",
           ok ? "ok" : "FAIL", g_n, kW, kWg ? "wgmma" : "mma.sync", kGva ? "wy_gva" : "wy_fast",
           kTc ? ", the solve on the tensor cores" : "", eo, eh, ran ? "" : " (the launch failed)");
}

} // namespace

/* launch(pp, h0, ht) over every chunk, or (pieces) over three windows of each sequence's chunks
 * (gdn_chunk_problem::walk_lo, walk_hi: [0, 1), [1, 2), [2, end), the last one empty for the
 * second sequence), the states in turn through two FP32 buffers; ht takes the last state. */
template <class F> bool chain_walks(const inputs &in, bool pieces, float *ht, F launch)
{
    const qc::gdn_chunk_problem p{NSEQ, 0, T, H, HV, D, D, in.scale, 0, kCu};
    const int32_t cuts[] = {0, 1, 2, INT32_MAX};
    std::vector<float> st[2] = {std::vector<float>(in.h0.size()), std::vector<float>(in.h0.size())};
    bool ran = true;
    const int n = pieces ? 3 : 1;
    for (int i = 0; i < n; i++) {
        qc::gdn_chunk_problem pp = p;
        pp.walk_lo = pieces ? cuts[i] : 0;
        pp.walk_hi = pieces ? cuts[i + 1] : INT32_MAX;
        ran = ran && launch(pp, i == 0 ? in.h0.data() : st[(i - 1) & 1].data(),
                            i + 1 == n ? ht : st[i & 1].data());
    }
    return ran;
}

/* The backward's state pass, state_lean_kernel<false, kW, kWg, false, kS>, of pp from h0 to ht:
 * the states into hs, Vn over vn (U). */
template <int kW, bool kWg, int kS = 2>
bool state_pass(const inputs &in, const qc::gdn_chunk_problem &pp, const float *h0, float *ht,
                bf16 *hs, bf16 *vn)
{
    const uint3e grid{static_cast<unsigned>(D / (16 * kW)), HV, NSEQ}, block{32u * kW, 1, 1};
    return qc::emu::launch(grid, block, qc::state_lean_kernel<false, kW, kWg, false, kS>, pp,
                           static_cast<const bf16 *>(nullptr), in.k.data(), in.g.data(),
                           in.W.data(), vn, static_cast<const bf16 *>(nullptr), h0,
                           static_cast<bf16 *>(nullptr), ht, kChunk0, int64_t{NCH}, hs, vn);
}

/* The walks over chain_walks' windows against one walk over every chunk: the same bytes of o
 * and the final state (the forward, kTf its T form) and of hs and Vn (the backward's state
 * pass), as gdn_pipe's launches chain them. */
template <int kW, bool kWg, bool kTf> void run_windows(const inputs &in)
{
    const uint3e grid{static_cast<unsigned>(D / (16 * kW)), HV, NSEQ}, block{32u * kW, 1, 1};
    const size_t no = static_cast<size_t>(T) * HV * D, ns = in.h0.size();
    auto walks = [&](bool pieces, bool out, bf16 *o, float *ht, bf16 *hs, bf16 *vn) {
        return chain_walks(
            in, pieces, ht, [&](const qc::gdn_chunk_problem &pp, const float *a, float *b) {
                if (!out)
                    return state_pass<kW, kWg>(in, pp, a, b, hs, vn);
                return qc::emu::launch(grid, block, qc::state_lean_kernel<true, kW, kWg, kTf>, pp,
                                       in.q.data(), in.k.data(), in.g.data(), in.W.data(),
                                       kTf ? in.v.data() : in.U.data(), in.A.data(), a, o, b,
                                       static_cast<const int32_t *>(nullptr), int64_t{0},
                                       static_cast<bf16 *>(nullptr), static_cast<bf16 *>(nullptr));
            });
    };
    char name[120];
    {
        std::vector<bf16> o1(no, bf16(0.0f)), o3(no, bf16(0.0f));
        std::vector<float> ht1(ns), ht3(ns);
        bool ran = walks(false, true, o1.data(), ht1.data(), nullptr, nullptr) &&
                   walks(true, true, o3.data(), ht3.data(), nullptr, nullptr);
        snprintf(name, sizeof name, "state_lean_kernel, %s forward, %d warps, %s, in 3 windows",
                 kTf ? "T-form" : "W and U", kW, kWg ? "wgmma" : "mma.sync");
        report(name,
               {{"o differing", static_cast<double>(ndiff(o1, o3))},
                {"ht differing", static_cast<double>(ndiff(ht1, ht3))}},
               ran);
    }
    if (!kTf) {
        const size_t nhs = static_cast<size_t>(HV) * NCH * D * D;
        std::vector<bf16> hs1(nhs, bf16(0.0f)), hs3(nhs, bf16(0.0f)), vn1 = in.U, vn3 = in.U;
        bool ran = walks(false, false, nullptr, nullptr, hs1.data(), vn1.data()) &&
                   walks(true, false, nullptr, nullptr, hs3.data(), vn3.data());
        snprintf(name, sizeof name, "state_lean_kernel, state pass, %d warps, %s, in 3 windows", kW,
                 kWg ? "wgmma" : "mma.sync");
        report(name,
               {{"hs differing", static_cast<double>(ndiff(hs1, hs3))},
                {"vn differing", static_cast<double>(ndiff(vn1, vn3))}},
               ran);
    }
}

/* The state pass in one stage of tiles (state_lean_kernel<false, 4, kWg, false, 1>, which
 * gdn_bwd_overlap runs beside dstate_lean_kernel) against the two-stage kernel: the same bytes of
 * hs and Vn, over every chunk and over the windows of run_windows chained through FP32 states. */
template <bool kWg> void run_one_stage(const inputs &in)
{
    const size_t nhs = static_cast<size_t>(HV) * NCH * D * D;
    auto pass = [&](auto stages, bool windows, bf16 *hs, bf16 *vn) {
        return chain_walks(
            in, windows, nullptr, [&](const qc::gdn_chunk_problem &pp, const float *a, float *b) {
                return state_pass<4, kWg, decltype(stages)::value>(in, pp, a, b, hs, vn);
            });
    };
    using one = std::integral_constant<int, 1>;
    using two = std::integral_constant<int, 2>;
    std::vector<bf16> hs2(nhs, bf16(0.0f)), hs1(nhs, bf16(0.0f)), hsw(nhs, bf16(0.0f));
    std::vector<bf16> vn2 = in.U, vn1 = in.U, vnw = in.U;
    bool ran = pass(two{}, false, hs2.data(), vn2.data()) &&
               pass(one{}, false, hs1.data(), vn1.data()) &&
               pass(one{}, true, hsw.data(), vnw.data());
    char name[120];
    snprintf(name, sizeof name, "state_lean_kernel, state pass in one stage, 4 warps, %s",
             kWg ? "wgmma" : "mma.sync");
    report(name,
           {{"hs differing", static_cast<double>(ndiff(hs2, hs1))},
            {"vn differing", static_cast<double>(ndiff(vn2, vn1))},
            {"hs differing in 3 windows", static_cast<double>(ndiff(hs2, hsw))},
            {"vn differing in 3 windows", static_cast<double>(ndiff(vn2, vnw))}},
           ran);
}

/* gdn_pipe_count, the rule that cuts one sequence's wy and walk into pieces: the default's
 * bound (4 pieces from 256 chunks), a forced count, and the cases that keep one piece. */
void pipe_rule_check()
{
    struct {
        const char *what;
        int knob;
        int64_t nseq, nchunks;
        bool fits;
        int64_t blocks;
        int want;
    } cases[] = {
        {"default, 1 x 32768 (512 chunks, 128 walk blocks, 132 SMs)", -1, 1, 512, true, 128, 4},
        {"default, 1 x 1024 (16 chunks)", -1, 1, 16, true, 128, 0},
        {"default, 255 chunks", -1, 1, 255, true, 128, 0},
        {"default, 256 chunks", -1, 1, 256, true, 128, 4},
        {"default, two sequences", -1, 2, 1024, true, 128, 0},
        {"default, a walk of more blocks than SMs", -1, 1, 512, true, 256, 0},
        {"default, no room for the states", -1, 1, 512, false, 128, 0},
        {"forced 2 at 16 chunks", 2, 1, 16, true, 128, 2},
        {"forced 8 at 16 chunks", 8, 1, 16, true, 128, 8},
        {"forced 8 at 15 chunks (two a piece)", 8, 1, 15, true, 128, 0},
        {"forced 1", 1, 1, 512, true, 128, 0},
        {"forced 0", 0, 1, 512, true, 128, 0},
    };
    for (const auto &c : cases) {
        int got = qc::gdn_pipe_count(c.knob, c.nseq, c.nchunks, c.fits, c.blocks, 132);
        char name[160];
        snprintf(name, sizeof name, "gdn_pipe_count, %s: %d pieces (want %d)", c.what, got, c.want);
        report(name,
               {{"difference", static_cast<double>(got > c.want ? got - c.want : c.want - got)}},
               true);
    }
}

int main()
{
    pipe_rule_check();
    inputs in;
    strip_check();
    wy_ref_t wref = wy_reference(in);
    run_wy<true, false>(in, wref);
    run_wy<true, true>(in, wref);
    run_wy<false, false>(in, wref);
    run_wy<false, true>(in, wref);
    run_wy<true, true, true>(in, wref);
    run_wy<false, false, true>(in, wref);
    walk_ref ref = reference(in);
    run<4, false>(in, ref);
    run<4, true>(in, ref);
    run<8, false>(in, ref);
    run<8, true>(in, ref);
    run_windows<4, true, true>(in);
    run_windows<4, false, true>(in);
    run_windows<4, true, false>(in);
    run_windows<8, false, false>(in);
    run_one_stage<false>(in);
    run_one_stage<true>(in);
    e2e x;
    qs_ctx *ctx = qs_ctx_new();
    run_e2e<false, false>(x, ctx);
    run_e2e<true, true>(x, ctx);
    run_e2e_tform<4, false, false>(x, ctx);
    run_e2e_tform<8, true, false>(x, ctx);
    run_e2e_tform<4, true, true>(x, ctx);
    run_e2e_tform<8, false, true>(x, ctx);
    run_e2e_tform<4, true, true, true>(x, ctx);
    qs_ctx_free(ctx);
    printf("gdn_emu: %d of %d passed\n", g_n - g_fail, g_n);
    return g_fail ? 1 : 0;
}
