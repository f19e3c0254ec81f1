/* flash_emu.cc: the Hopper wgmma flash kernels of cuda/qc_flash_wgmma.cuh run on the CPU
 * through cuda/emu/qc_emu.h, against the reference (qs_sdpa_fwd, qs_sdpa_bwd) on small cases
 * within the tolerance of [ATTN-TOL]: the forward of every class (64/64, 128/128, 192/128,
 * the absorbed 576/512) and the backward of each, BF16 and FP16, in the split form
 * the plugin runs. The layouts, masks, GQA/MQA, sequences of unequal and zero length and
 * tiles cut by the sequence end are each met by some case. This checks the kernels' logic
 * (tiling, indices, barriers, shared-memory layouts and descriptors as PTX defines them)
 * where there is no GPU; the GPU's own check is cuda/bench/attn_bench --wgmma-selftest.
 * Prints "ok N - ..." or "FAIL N - ..." a case and dtype with the excess of each output over
 * the tolerance (1 is at it); exits 0 when every case passes, 1 otherwise. */
#define QC_EMU 1
#include "qc_flash_wgmma.cuh"

#include <cmath>
#include <cstdio>
#include <vector>

#include "qspec/attention.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qspec/status.h"

namespace
{

using qc::emu::uint3e;
namespace fl = qc::fl;
namespace wg = qc::fl::wg;

struct tcase {
    const char *name;
    int layout, mask;
    int b, sq, sk, h, hkv, d, dv;
    std::vector<int32_t> cu, cuk; /* thd: cu_seqlens of the queries, of the keys (or cu) */
};

uint64_t g_rng = 0x9E3779B97F4A7C15ull;

float gauss()
{
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        s += static_cast<float>((g_rng >> 40) & 0xFFFFFF) * 0x1p-24f;
    }
    return (s - 2.0f) * 1.7320508f;
}

std::vector<float> randn(size_t n, qs_dtype dt)
{
    std::vector<float> v(n);
    for (auto &x : v)
        x = dt == QS_BF16 ? qs_round_bf16(gauss()) : qs_round_f16(gauss());
    return v;
}

template <typename T> std::vector<T> to_t(const std::vector<float> &x)
{
    return std::vector<T>(x.begin(), x.end());
}

/* the largest [ATTN-TOL] excess of x over r (1: at the tolerance; NaN counts as failing) */
double excess(const std::vector<float> &x, const std::vector<float> &r, double rtol)
{
    double worst = 0.0;
    for (size_t e = 0; e < x.size(); e++) {
        double t = std::fabs((double)x[e] - r[e]) / (1e-5 + rtol * std::fabs((double)r[e]));
        if (!(t <= worst))
            worst = t;
    }
    return worst;
}

int g_fail = 0, g_n = 0;

template <typename T, int KD, int DV> void run(const tcase &c, qs_dtype dt)
{
    constexpr bool kMla = KD > 192;
    bool thd = c.layout == QS_ATTN_THD;
    int64_t tq = thd ? c.sq : (int64_t)c.b * c.sq, tk = thd ? c.sk : (int64_t)c.b * c.sk;
    size_t nq = tq * c.h * c.d, nk = tk * c.hkv * c.d, nv = tk * c.hkv * c.dv;
    size_t no = tq * c.h * c.dv, nl = tq * c.h;
    auto q = randn(nq, dt), k = randn(nk, dt), v = randn(nv, dt), dout = randn(no, dt);
    const int32_t *cuq = thd ? c.cu.data() : nullptr;
    const int32_t *cuk = thd ? (c.cuk.empty() ? c.cu.data() : c.cuk.data()) : nullptr;
    qs_sdpa_params p{};
    p.layout = (qs_attn_layout)c.layout;
    p.mask = (qs_attn_mask)c.mask;
    p.b = c.b;
    p.sq = c.sq;
    p.sk = c.sk;
    p.h = c.h;
    p.hkv = c.hkv;
    p.d = c.d;
    p.dv = c.dv;
    p.dtype = dt;
    p.scale = qs_rsqrtf((float)c.d);
    p.cu_seqlens_q = cuq;
    p.cu_seqlens_kv = cuk;
    /* the reference */
    std::vector<float> o_ref(no), lse_ref(nl), dq_ref(nq), dk_ref(nk), dv_ref(nv);
    qs_ctx *ctx = qs_ctx_new();
    qs_status st = qs_sdpa_fwd(ctx, &p, q.data(), k.data(), v.data(), o_ref.data(), lse_ref.data());
    if (st == QS_OK)
        st = qs_sdpa_bwd(ctx, &p, q.data(), k.data(), v.data(), o_ref.data(), dout.data(),
                         dq_ref.data(), dk_ref.data(), dv_ref.data());
    qs_ctx_free(ctx);
    const char *dname = dt == QS_BF16 ? "bf16" : "fp16";
    if (st != QS_OK) {
        printf("FAIL %d - %s %s: the reference failed (%d)\n", ++g_n, c.name, dname, (int)st);
        g_fail++;
        return;
    }
    /* the kernels, as the plugin runs them (cuda/qc_flash.cu) */
    fl::geo g{c.layout, c.mask, dt,  c.b, c.sq,    c.sk,    c.h,    c.hkv,
              c.d,      c.dv,   cuq, cuk, nullptr, nullptr, p.scale};
    int maxq = c.sq, maxk = c.sk;
    if (thd) {
        maxq = maxk = 0;
        for (int s = 0; s < c.b; s++) {
            maxq = std::max(maxq, cuq[s + 1] - cuq[s]);
            maxk = std::max(maxk, cuk[s + 1] - cuk[s]);
        }
    }
    auto qt = to_t<T>(q), kt = to_t<T>(k), vt = to_t<T>(v), dt16 = to_t<T>(dout);
    std::vector<float> o(no, 0.0f), lse(nl, -INFINITY);
    uint3e block{wg::kThreads, 1, 1};
    bool ok;
    if constexpr (kMla)
        ok = qc::emu::launch(uint3e{(unsigned)(maxq + wg::kMlaRows - 1) / wg::kMlaRows,
                                    (unsigned)c.h, (unsigned)c.b},
                             block, wg::fwd_mla_kernel<T, true>, g, qt.data(), kt.data(), vt.data(),
                             o.data(), lse.data());
    else
        ok = qc::emu::launch(
            uint3e{(unsigned)(maxq + wg::kRows - 1) / wg::kRows, (unsigned)c.h, (unsigned)c.b},
            block, wg::fwd_kernel<T, KD, DV, true>, g, qt.data(), kt.data(), vt.data(), o.data(),
            lse.data());
    double rt = dt == QS_BF16 ? 0.016625 : 0.0029531;
    double e[5] = {excess(o, o_ref, rt), excess(lse, lse_ref, 1e-3), 0, 0, 0};
    int ovf = 0;
    if (ok) {
        /* D from the reference's o (the kit hands it), lse from the forward above */
        std::vector<float> dd(nl), dq(nq, 0.0f), dk(nk, 0.0f), dv(nv, 0.0f);
        for (size_t r = 0; r < nl; r++) {
            float a = 0.0f;
            for (int j = 0; j < c.dv; j++)
                a += dout[r * c.dv + j] * o_ref[r * c.dv + j];
            dd[r] = a;
        }
        const T *qp = qt.data(), *kp = kt.data(), *vp = vt.data(), *dop = dt16.data();
        if constexpr (kMla) {
            ok = qc::emu::launch(uint3e{(unsigned)(maxq + wg::kMlaRows - 1) / wg::kMlaRows,
                                        (unsigned)c.h, (unsigned)c.b},
                                 block, wg::dq_mla_kernel<T, true>, g, qp, kp, vp, dop, lse.data(),
                                 dd.data(), dq.data(), &ovf);
            /* as wg::bwd_mla_launch: head groups, their sums added by sum_parts */
            int ng = wg::mla_groups(g, maxk);
            std::vector<float> part(wg::bwd_scratch(3, g, maxk, nk, nv), 0.0f);
            float *pk = ng > 1 ? part.data() : nullptr, *pv = ng > 1 ? pk + ng * nk : nullptr;
            ok = ok && qc::emu::launch(uint3e{(unsigned)(maxk + wg::kMlaRows - 1) / wg::kMlaRows,
                                              (unsigned)c.hkv, 2u * ng * c.b},
                                       block, wg::dkv_mla_kernel<T, true>, g, qp, kp, vp, dop,
                                       lse.data(), dd.data(), dk.data(), dv.data(), &ovf, ng, pk,
                                       pv, (int64_t)nk, (int64_t)nv);
            if (ng > 1) {
                ok = ok && qc::emu::launch(uint3e{4, 1, 1}, uint3e{256, 1, 1}, wg::sum_parts<T>,
                                           (const float *)pk, (int64_t)nk, ng, (int)dt, dk.data());
                ok = ok && qc::emu::launch(uint3e{4, 1, 1}, uint3e{256, 1, 1}, wg::sum_parts<T>,
                                           (const float *)pv, (int64_t)nv, ng, (int)dt, dv.data());
            }
            printf("# absorbed dkv pass: %d head group%s\n", ng, ng > 1 ? "s" : "");
        } else {
            ok = qc::emu::launch(
                uint3e{(unsigned)(maxq + wg::kRows - 1) / wg::kRows, (unsigned)c.h, (unsigned)c.b},
                block, wg::dq_kernel<T, KD, DV, true>, g, qp, kp, vp, dop, lse.data(), dd.data(),
                dq.data(), &ovf);
            ok = ok && qc::emu::launch(uint3e{(unsigned)(maxk + wg::kRows - 1) / wg::kRows,
                                              (unsigned)c.hkv, (unsigned)c.b},
                                       block, wg::dkv_kernel<T, KD, DV, true>, g, qp, kp, vp, dop,
                                       lse.data(), dd.data(), dk.data(), dv.data(), &ovf);
        }
        e[2] = excess(dq, dq_ref, rt);
        e[3] = excess(dk, dk_ref, rt);
        e[4] = excess(dv, dv_ref, rt);
    }
    double worst = 0.0;
    for (double x : e)
        worst = x > worst || x != x ? x : worst;
    bool pass = ok && !ovf && worst <= 1.0;
    g_fail += !pass;
    printf("%s %d - %-40s %s: excess over [ATTN-TOL] o %.3f lse %.3f dq %.3f dk %.3f dv %.3f%s\n",
           pass ? "ok" : "FAIL", ++g_n, c.name, dname, e[0], e[1], e[2], e[3], e[4],
           ovf ? " (overflow flag)" : "");
    fflush(stdout);
}

template <typename T> void run_class(const tcase &c, qs_dtype dt)
{
    switch (wg::wg_class(c.d, c.dv, qs_rsqrtf((float)c.d))) {
    case 0:
        return run<T, 64, 64>(c, dt);
    case 1:
        return run<T, 128, 128>(c, dt);
    case 2:
        return run<T, 192, 128>(c, dt);
    case 3:
        return run<T, 576, 512>(c, dt);
    default:
        printf("FAIL %d - %s: no wgmma class\n", ++g_n, c.name);
        g_fail++;
    }
}

} // namespace

int main()
{
    const int S = QS_ATTN_SBHD, B = QS_ATTN_BSHD, T = QS_ATTN_THD, N = QS_ATTN_MASK_NONE,
              C = QS_ATTN_MASK_CAUSAL;
    const std::vector<tcase> cs = {
        {"bshd causal d128 s150", B, C, 1, 150, 150, 1, 1, 128, 128, {}, {}},
        {"sbhd none d64 sq70 sk140 gqa 4/2", S, N, 2, 70, 140, 4, 2, 64, 64, {}, {}},
        {"bshd causal d96/80 s200 mqa 2/1", B, C, 1, 200, 200, 2, 1, 96, 80, {}, {}},
        {"thd causal 192/128 3,140,0,60",
         T,
         C,
         4,
         203,
         203,
         2,
         2,
         192,
         128,
         {0, 3, 143, 143, 203},
         {}},
        {"thd none d128 q 5,70 kv 130,9",
         T,
         N,
         2,
         75,
         139,
         2,
         1,
         128,
         128,
         {0, 5, 75},
         {0, 130, 139}},
        {"sbhd causal d64 sq150 sk90", S, C, 1, 150, 90, 2, 2, 64, 64, {}, {}},
        {"bshd causal absorbed 576/512 h2/1 s70", B, C, 1, 70, 70, 2, 1, 576, 512, {}, {}},
        {"thd none 320/256 h3/1 40,0,90", T, N, 3, 130, 130, 3, 1, 320, 256, {0, 40, 40, 130}, {}},
        {"sbhd causal 576/512 sq100 sk70 gqa 4/2", S, C, 1, 100, 70, 4, 2, 576, 512, {}, {}},
        {"bshd none 576/512 h2/2 sq40 sk90", B, N, 2, 40, 90, 2, 2, 576, 512, {}, {}},
    };
    for (const auto &c : cs) {
        run_class<__nv_bfloat16>(c, QS_BF16);
        run_class<__half>(c, QS_FP16);
    }
    printf("flash_emu: %d of %d failing\n", g_fail, g_n);
    return g_fail ? 1 : 0;
}
