/* flash_emu.cc: the flash kernels of cuda/qc_flash.cuh (mma.sync) and cuda/qc_flash_wgmma.cuh
 * (Hopper wgmma) run on the CPU through cuda/emu/qc_emu.h, against the reference
 * (qs_sdpa_fwd, qs_sdpa_bwd) on small cases within the tolerance of [ATTN-TOL]: the forward
 * and backward of every class (64/64, 128/128, 192/128, the absorbed 576/512), BF16 and FP16
 * (the mma.sync kernels BF16 only), in the split form the plugin runs. The layouts, masks,
 * GQA/MQA, sequences of unequal and zero length and tiles cut by the sequence end are each
 * met by some case. This checks the kernels' logic (tiling, indices, barriers, shared-memory
 * layouts, fragments and descriptors as PTX defines them) where there is no GPU; the GPU's
 * own check is cuda/bench/attn_bench. Then the emulator's own rules on a toy kernel: the
 * clean kernel gives its product, and each way of breaking the asynchronous rules (a missing
 * cp.async wait or proxy fence, an accumulator, A fragment or shared operand touched while
 * its wgmma is in flight) is caught. Prints "ok N - ..." or "FAIL N - ..." a case, dtype and
 * path with the excess of each output over the tolerance (1 is at it); exits 0 when every
 * case passes, 1 otherwise. */
#define QC_EMU 1
#include "qc_flash_wgmma.cuh"

#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/attn_inputs.h"
#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qspec/status.h"

namespace
{

using qc::emu::uint3e;
namespace fl = qc::fl;
namespace wg = qc::fl::wg;

using tcase = qc::check::small_case;

qc::check::rng g_rng{0x9E3779B97F4A7C15ull};
using qc::check::excess;

template <typename T> std::vector<T> to_t(const std::vector<float> &x)
{
    return std::vector<T>(x.begin(), x.end());
}

int g_fail = 0, g_n = 0;

/* A case's inputs (as the dtype's values, FP32 and T), geometry and reference outputs. */
template <typename T> struct problem {
    const tcase &c;
    qs_dtype dt;
    size_t nq, nk, nv, no, nl;
    std::vector<float> q, k, v, dout, o_ref, lse_ref, dq_ref, dk_ref, dv_ref, dd;
    std::vector<T> qt, kt, vt, dot;
    fl::geo g;
    int maxq, maxk;
    qs_status st;

    problem(const tcase &tc, qs_dtype d) : c(tc), dt(d)
    {
        bool thd = c.layout == QS_ATTN_THD;
        int64_t tq = thd ? c.sq : (int64_t)c.b * c.sq, tk = thd ? c.sk : (int64_t)c.b * c.sk;
        nq = tq * c.h * c.d, nk = tk * c.hkv * c.d, nv = tk * c.hkv * c.dv;
        no = tq * c.h * c.dv, nl = tq * c.h;
        q = g_rng.randn(nq, dt), k = g_rng.randn(nk, dt), v = g_rng.randn(nv, dt),
        dout = g_rng.randn(no, dt);
        qt = to_t<T>(q), kt = to_t<T>(k), vt = to_t<T>(v), dot = to_t<T>(dout);
        qs_sdpa_params p = qc::check::case_params(c, dt);
        const int32_t *cuq = p.cu_seqlens_q, *cuk = p.cu_seqlens_kv; /* NULL unless thd */
        o_ref.resize(no), lse_ref.resize(nl), dq_ref.resize(nq), dk_ref.resize(nk);
        dv_ref.resize(nv);
        qs_ctx *ctx = qs_ctx_new();
        st = qs_sdpa_fwd(ctx, &p, q.data(), k.data(), v.data(), o_ref.data(), lse_ref.data());
        if (st == QS_OK)
            st = qs_sdpa_bwd(ctx, &p, q.data(), k.data(), v.data(), o_ref.data(), dout.data(),
                             dq_ref.data(), dk_ref.data(), dv_ref.data());
        qs_ctx_free(ctx);
        /* D from the reference's o, as the plugin forms it from the o the kit hands */
        dd.resize(nl);
        for (size_t r = 0; r < nl; r++) {
            float acc = 0.0f;
            for (int j = 0; j < c.dv; j++)
                acc += dout[r * c.dv + j] * o_ref[r * c.dv + j];
            dd[r] = acc;
        }
        g = fl::geo{c.layout, c.mask,    dt,  (int)c.b, (int)c.sq, (int)c.sk, (int)c.h, (int)c.hkv,
                    (int)c.d, (int)c.dv, cuq, cuk,      nullptr,   nullptr,   p.scale};
        maxq = c.sq, maxk = c.sk;
        if (thd) {
            maxq = maxk = 0;
            for (int s = 0; s < c.b; s++) {
                maxq = std::max(maxq, cuq[s + 1] - cuq[s]);
                maxk = std::max(maxk, cuk[s + 1] - cuk[s]);
            }
        }
    }
};

/* One path's outputs: o and lse (lse then read by its backward), dq, dk, dv. */
struct outputs {
    std::vector<float> o, lse, dq, dk, dv;
    int ovf = 0;
    template <typename T>
    explicit outputs(const problem<T> &pr)
        : o(pr.no, 0.0f), lse(pr.nl, -INFINITY), dq(pr.nq, 0.0f), dk(pr.nk, 0.0f), dv(pr.nv, 0.0f)
    {
    }
};

/* The plugin's wgmma kernels (fl::wg::fwd_launch_class, bwd_launch_class) on the emulator. */
template <typename T, int KD, int DV> bool wgmma_path(problem<T> &pr, outputs &r)
{
    const tcase &c = pr.c;
    const fl::geo &g = pr.g;
    const T *qp = pr.qt.data(), *kp = pr.kt.data(), *vp = pr.vt.data(), *dop = pr.dot.data();
    uint3e block{wg::kThreads, 1, 1};
    bool ok;
    if constexpr (KD > 192) {
        uint3e gq{(unsigned)(pr.maxq + wg::kMlaRows - 1) / wg::kMlaRows, (unsigned)c.h,
                  (unsigned)c.b};
        ok = qc::emu::launch(gq, block, wg::fwd_mla_kernel<T, true>, g, qp, kp, vp, r.o.data(),
                             r.lse.data());
        ok = ok && qc::emu::launch(gq, block, wg::dq_mla_kernel<T, true>, g, qp, kp, vp, dop,
                                   r.lse.data(), pr.dd.data(), r.dq.data(), &r.ovf);
        /* as wg::bwd_mla_launch: head groups, their sums added by sum_parts */
        int ng = wg::mla_groups(g, pr.maxk);
        std::vector<float> part(wg::bwd_scratch(3, g, pr.maxk, pr.nk, pr.nv), 0.0f);
        float *pk = ng > 1 ? part.data() : nullptr, *pv = ng > 1 ? pk + ng * pr.nk : nullptr;
        ok = ok && qc::emu::launch(uint3e{(unsigned)(pr.maxk + wg::kMlaRows - 1) / wg::kMlaRows,
                                          (unsigned)c.hkv * ng * 2, (unsigned)c.b},
                                   block, wg::dkv_mla_kernel<T, true>, g, qp, kp, vp, dop,
                                   r.lse.data(), pr.dd.data(), r.dk.data(), r.dv.data(), &r.ovf, ng,
                                   pk, pv, (int64_t)pr.nk, (int64_t)pr.nv);
        if (ng > 1) {
            ok = ok &&
                 qc::emu::launch(uint3e{4, 1, 1}, uint3e{256, 1, 1}, wg::sum_parts<T>,
                                 (const float *)pk, (int64_t)pr.nk, ng, (int)pr.dt, r.dk.data());
            ok = ok &&
                 qc::emu::launch(uint3e{4, 1, 1}, uint3e{256, 1, 1}, wg::sum_parts<T>,
                                 (const float *)pv, (int64_t)pr.nv, ng, (int)pr.dt, r.dv.data());
        }
        printf("# absorbed dkv pass: %d head group%s\n", ng, ng > 1 ? "s" : "");
    } else {
        uint3e gq{(unsigned)(pr.maxq + wg::kRows - 1) / wg::kRows, (unsigned)c.h, (unsigned)c.b};
        ok = qc::emu::launch(gq, block, wg::fwd_kernel<T, KD, DV, true>, g, qp, kp, vp, r.o.data(),
                             r.lse.data());
        ok = ok && qc::emu::launch(gq, block, wg::dq_kernel<T, KD, DV, true>, g, qp, kp, vp, dop,
                                   r.lse.data(), pr.dd.data(), r.dq.data(), &r.ovf);
        ok = ok && qc::emu::launch(uint3e{(unsigned)(pr.maxk + wg::kRows - 1) / wg::kRows,
                                          (unsigned)c.hkv, (unsigned)c.b},
                                   block, wg::dkv_kernel<T, KD, DV, true>, g, qp, kp, vp, dop,
                                   r.lse.data(), pr.dd.data(), r.dk.data(), r.dv.data(), &r.ovf);
    }
    return ok;
}

/* The plugin's mma.sync kernels (fl::fwd_launch, fl::bwd_launch of class C) on the emulator. */
template <typename T, int C> bool mma_sync_path(problem<T> &pr, outputs &r)
{
    using SF = typename fl::cls<C>::F;
    using SQ = typename fl::cls<C>::Q;
    using SK = typename fl::cls<C>::KV;
    const tcase &c = pr.c;
    const fl::geo &g = pr.g;
    const T *qp = pr.qt.data(), *kp = pr.kt.data(), *vp = pr.vt.data(), *dop = pr.dot.data();
    uint3e block{fl::kThreads, 1, 1};
    unsigned nqt = (pr.maxq + fl::kRows - 1) / fl::kRows,
             nkt = (pr.maxk + fl::kRows - 1) / fl::kRows;
    unsigned nf = (c.dv + SF::OC - 1) / SF::OC, nd = (c.d + SQ::OC - 1) / SQ::OC;
    unsigned nkv = (c.d + SK::OC - 1) / SK::OC + (c.dv + SK::OCV - 1) / SK::OCV;
    bool ok = qc::emu::launch(uint3e{nqt, (unsigned)c.h, (unsigned)c.b * nf}, block,
                              fl::fwd_kernel<T, SF, true>, g, qp, kp, vp, r.o.data(), r.lse.data());
    ok = ok && qc::emu::launch(uint3e{nqt, (unsigned)c.h, (unsigned)c.b * nd}, block,
                               fl::dq_kernel<T, SQ, true>, g, qp, kp, vp, dop, r.lse.data(),
                               pr.dd.data(), r.dq.data(), &r.ovf);
    ok = ok && qc::emu::launch(uint3e{nkt, (unsigned)c.hkv, (unsigned)c.b * nkv}, block,
                               fl::dkv_kernel<T, SK, true>, g, qp, kp, vp, dop, r.lse.data(),
                               pr.dd.data(), r.dk.data(), r.dv.data(), &r.ovf);
    return ok;
}

/* One path's outputs against the reference: a line, a failure counted. */
template <typename T>
void verdict(const problem<T> &pr, const char *path, bool ran, const outputs &r)
{
    double rt = pr.dt == QS_BF16 ? 0.016625 : 0.0029531;
    double e[5] = {excess(r.o, pr.o_ref, rt), excess(r.lse, pr.lse_ref, 1e-3),
                   excess(r.dq, pr.dq_ref, rt), excess(r.dk, pr.dk_ref, rt),
                   excess(r.dv, pr.dv_ref, rt)};
    double worst = 0.0;
    for (double x : e)
        worst = x > worst || x != x ? x : worst;
    bool pass = ran && !r.ovf && worst <= 1.0;
    g_fail += !pass;
    printf("%s %d - %-40s %s %-8s: excess over [ATTN-TOL] o %.3f lse %.3f dq %.3f dk %.3f dv "
           "%.3f%s%s\n",
           pass ? "ok" : "FAIL", ++g_n, pr.c.name, pr.dt == QS_BF16 ? "bf16" : "fp16", path, e[0],
           e[1], e[2], e[3], e[4], r.ovf ? " (overflow flag)" : "",
           ran ? "" : " (the emulator stopped a block: a hang or a hazard)");
    fflush(stdout);
}

template <typename T, int KD, int DV, int C> void run(const tcase &c, qs_dtype dt)
{
    problem<T> pr(c, dt);
    if (pr.st != QS_OK) {
        printf("FAIL %d - %s: the reference failed (%d)\n", ++g_n, c.name, (int)pr.st);
        g_fail++;
        return;
    }
    outputs w(pr), m(pr);
    verdict(pr, "wgmma", wgmma_path<T, KD, DV>(pr, w), w);
    if (dt == QS_BF16) /* the mma.sync kernels (slower to emulate): BF16 only */
        verdict(pr, "mma.sync", mma_sync_path<T, C>(pr, m), m);
}

template <typename T> void run_class(const tcase &c, qs_dtype dt)
{
    int fc = fl::dim_class(c.d, c.dv);
    switch (wg::wg_class(c.d, c.dv, qs_rsqrtf((float)c.d))) {
    case 0:
        return run<T, 64, 64, 0>(c, dt);
    case 1:
        return run<T, 128, 128, 1>(c, dt);
    case 2:
        return run<T, 192, 128, 2>(c, dt);
    case 3:
        if (fc == 3)
            return run<T, 576, 512, 3>(c, dt);
    }
    printf("FAIL %d - %s: no class\n", ++g_n, c.name);
    g_fail++;
}

/* attn_bench's tile self-test for the backward (wg::test_bwd: S = A[64..127] B^T over 192
 * columns, then P C over a 64-row C read transposed), against FP64 products: the kernel the
 * GPU's layer-1/2 check runs, checked itself. */
template <typename T> void selftest_bwd(qs_dtype dt)
{
    const int K = 192;
    auto a = g_rng.randn(128 * K, dt), b = g_rng.randn(64 * K, dt), p = g_rng.randn(64 * 64, dt),
         c = g_rng.randn(64 * K, dt);
    auto at = to_t<T>(a), bt = to_t<T>(b), ct = to_t<T>(c);
    std::vector<float> gs(64 * 64), go(64 * K);
    bool ok = qc::emu::launch(uint3e{1, 1, 1}, uint3e{128, 1, 1}, wg::test_bwd<T>,
                              (const T *)at.data(), (const T *)bt.data(), (const float *)p.data(),
                              (const T *)ct.data(), gs.data(), go.data());
    double worst = 0.0;
    auto check = [&](double got, double want, double mag) {
        double t = std::fabs(got - want) / (1e-5 * mag + 1e-6);
        worst = t > worst || t != t ? t : worst;
    };
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < 64; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double t = (double)a[(64 + i) * K + k] * b[j * K + k];
                sum += t, mag += std::fabs(t);
            }
            check(gs[i * 64 + j], sum, mag);
        }
        for (int j = 0; j < K; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < 64; k++) {
                double t = (double)p[i * 64 + k] * c[k * K + j];
                sum += t, mag += std::fabs(t);
            }
            check(go[i * K + j], sum, mag);
        }
    }
    bool pass = ok && worst <= 1.0;
    g_fail += !pass;
    printf("%s %d - wg::test_bwd (attn_bench's tile self-test) %s: worst error %.3f of its bound\n",
           pass ? "ok" : "FAIL", ++g_n, dt == QS_BF16 ? "bf16" : "fp16", worst);
}

/* The emulator's own rules, on a toy warpgroup kernel: A, B and C (64 x 64 each) load by
 * cp.async, S = A B^T (wgmma from shared memory), then O = S C (S as A fragments in
 * registers, C read transposed). `bug` breaks one rule; the clean kernel must give O, and
 * each broken one must be caught: the block stopped (a hazard) or NaNs in O. */
enum toy_bug { kClean, kNoCpWait, kNoFence, kReadEarly, kWriteAcc, kChangeA, kWriteSmem, kBugs };
const char *const kBugName[kBugs] = {"clean",
                                     "no cp.async wait",
                                     "no fence.proxy.async",
                                     "accumulator read before the wait",
                                     "accumulator written in flight",
                                     "A fragment changed in flight",
                                     "shared operand written in flight"};

template <typename T> void toy_kernel(const T *a, const T *b, const T *c, float *out, int bug)
{
    T *sa = wg::align1k<T>(wg::smraw), *sb = sa + 64 * 64, *sc = sb + 64 * 64;
    int tid = threadIdx.x, warp = tid >> 5, gr = (tid & 31) >> 2, tq = tid & 3;
    wg::load_sw<T, 64, 64, 128>(sa, a, 64, 0, 64, 64, tid);
    wg::load_sw<T, 64, 64, 128>(sb, b, 64, 0, 64, 64, tid);
    wg::load_sw<T, 64, 64, 128>(sc, c, 64, 0, 64, 64, tid);
    wg::cp_commit();
    if (bug != kNoCpWait)
        wg::cp_wait_n<0>();
    if (bug != kNoFence)
        wg::fence_async_smem();
    __syncthreads();
    float x[8][4], o[8][4] = {}; /* xb_issue accumulates */
    wg::wg_fence();
    wg::abt_issue<T, 4, 64>(x, sa, 0, sb);
    wg::wg_commit();
    float early = 0.0f;
    if (bug == kReadEarly)
        early = x[0][0];
    if (bug == kWriteAcc)
        x[0][0] = 1.0f;
    if (bug == kWriteSmem)
        sb[tid] = T(0.0f);
    wg::wg_wait<0>();
    uint32_t ph[4][4], pl[1][4];
    fl::to_a<T, 8, false>(x, ph, pl);
    wg::wg_fence();
    wg::xb_issue<T, 64, 4, 64, false>(o, ph, pl, sc);
    wg::wg_commit();
    if (bug == kChangeA)
        ph[0][0] ^= 1u;
    wg::wg_wait<0>();
    for (int nb = 0; nb < 8; nb++)
        for (int e = 0; e < 4; e++)
            out[(warp * 16 + gr + 8 * (e >> 1)) * 64 + nb * 8 + 2 * tq + (e & 1)] = o[nb][e];
    if (tid == 0)
        out[0] += early;
}

template <typename T> void emu_rules(qs_dtype dt)
{
    auto a = g_rng.randn(64 * 64, dt), b = g_rng.randn(64 * 64, dt), c = g_rng.randn(64 * 64, dt);
    auto at = to_t<T>(a), bt = to_t<T>(b), ct = to_t<T>(c);
    /* O as the kernel forms it: S rounded to T, then S C, in FP64 */
    std::vector<double> want(64 * 64, 0.0), mag(64 * 64, 0.0);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            double sij = 0.0;
            for (int k = 0; k < 64; k++)
                sij += (double)a[i * 64 + k] * b[j * 64 + k];
            double sr = (float)T((float)sij);
            for (int n = 0; n < 64; n++) {
                want[i * 64 + n] += sr * c[j * 64 + n];
                mag[i * 64 + n] += std::fabs(sr * c[j * 64 + n]);
            }
        }
    for (int bug = 0; bug < kBugs; bug++) {
        std::vector<float> out(64 * 64, 0.0f);
        bool ran =
            qc::emu::launch(uint3e{1, 1, 1}, uint3e{128, 1, 1}, toy_kernel<T>, (const T *)at.data(),
                            (const T *)bt.data(), (const T *)ct.data(), out.data(), bug);
        double worst = 0.0; /* error over a bound of the S rounding's and the sums' errors */
        bool nan = false;
        for (int e = 0; e < 64 * 64; e++) {
            nan |= out[e] != out[e];
            double t = std::fabs(out[e] - want[e]) / (1e-2 * mag[e] + 1e-6);
            worst = t > worst ? t : worst;
        }
        bool caught = !ran || nan;
        bool pass = bug == kClean ? ran && !nan && worst <= 1.0 : caught;
        g_fail += !pass;
        printf("%s %d - emulator rules %s, %s: %s\n", pass ? "ok" : "FAIL", ++g_n,
               dt == QS_BF16 ? "bf16" : "fp16", kBugName[bug],
               bug == kClean ? (pass ? "the product is right" : "the clean kernel failed")
                             : (!ran  ? "stopped (hazard)"
                                : nan ? "NaNs in the result"
                                      : "not caught"));
    }
}

} // namespace

int main()
{
    const int S = QS_ATTN_SBHD, B = QS_ATTN_BSHD, T = QS_ATTN_THD, N = QS_ATTN_MASK_NONE,
              C = QS_ATTN_MASK_CAUSAL;
    /* clang-format off */
    const std::vector<tcase> cs = {
        {"bshd causal d128 s150", B, C, 1, 150, 150, 1, 1, 128, 128, {}, {}},
        {"sbhd none d64 sq70 sk140 gqa 4/2", S, N, 2, 70, 140, 4, 2, 64, 64, {}, {}},
        {"bshd causal d96/80 s200 mqa 2/1", B, C, 1, 200, 200, 2, 1, 96, 80, {}, {}},
        {"thd causal 192/128 3,140,0,60", T, C, 4, 203, 203, 2, 2, 192, 128,
         {0, 3, 143, 143, 203}, {}},
        {"thd none d128 q 5,70 kv 130,9", T, N, 2, 75, 139, 2, 1, 128, 128, {0, 5, 75},
         {0, 130, 139}},
        {"sbhd causal d64 sq150 sk90", S, C, 1, 150, 90, 2, 2, 64, 64, {}, {}},
        {"bshd causal absorbed 576/512 h2/1 s70", B, C, 1, 70, 70, 2, 1, 576, 512, {}, {}},
        {"thd none 320/256 h3/1 40,0,90", T, N, 3, 130, 130, 3, 1, 320, 256, {0, 40, 40, 130}, {}},
        {"sbhd causal 576/512 sq100 sk70 gqa 4/2", S, C, 1, 100, 70, 4, 2, 576, 512, {}, {}},
        {"bshd none 576/512 h2/2 sq40 sk90", B, N, 2, 40, 90, 2, 2, 576, 512, {}, {}},
    };
    /* clang-format on */
    for (const auto &c : cs) {
        run_class<__nv_bfloat16>(c, QS_BF16);
        run_class<__half>(c, QS_FP16);
    }
    selftest_bwd<__nv_bfloat16>(QS_BF16);
    selftest_bwd<__half>(QS_FP16);
    emu_rules<__nv_bfloat16>(QS_BF16);
    emu_rules<__half>(QS_FP16);
    printf("flash_emu: %d of %d failing\n", g_fail, g_n);
    return g_fail ? 1 : 0;
}
