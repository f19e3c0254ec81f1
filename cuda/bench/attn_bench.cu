/* attn_bench.cu: the flash attention kernels (cuda/qc_flash.cuh) against the plugin's
 * reference-order sdpa slots on small cases of each head-dim class (BF16 and FP16; every
 * output within [ATTN-TOL] of the reference-order result), then timed at the shapes of
 * docs/perf.md: B2 H16 S4096 d128, 192/128 with 16 and 128 heads, and the absorbed latent
 * MQA 576/512 (128 query heads, one KV head), causal, BF16, forward and backward, in the
 * split form the plugin runs and in the single-rounding form of the peers (P and dS rounded
 * to BF16 once). TFLOP/s count the causal half: forward 2 B H S^2 (d_qk + d_v) / 2, backward
 * 2.5 times that (the convention of the FlashAttention papers and cuda/bench/attn_peer.py).
 * Usage: attn_bench [--no-timing | --profile d128|mla] (--profile: only that shape, no
 * checks; for ncu). Needs a GPU; exit 1 when a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "bench_common.cuh"
#include "qc_flash.cuh"
#include "qc_flash.h"
#include "qc_slots.h"
#include "qspec/attention.h"
#include "qspec/mathf.h"
#include "qspec/format.h"

namespace
{

int g_fail = 0;
uint64_t g_rng = 0x2545F4914F6CDD1Dull;

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

/* The largest |x - r| / (atol + rtol |r|) of [ATTN-TOL] (above 1: outside). */
double excess(const std::vector<float> &x, const std::vector<float> &r, double rtol)
{
    double worst = 0.0;
    for (size_t e = 0; e < x.size(); e++) {
        double t = fabs((double)x[e] - r[e]) / (1e-5 + rtol * fabs((double)r[e]));
        if (!(t <= worst))
            worst = t; /* NaN too */
    }
    return worst;
}

struct small_case {
    const char *name;
    int layout, mask;
    int64_t b, sq, sk, h, hkv, d, dv;
    std::vector<int32_t> cu; /* thd */
};

/* One case: reference-order slots, then the flash path, outputs compared. */
void check_case(const small_case &c, qs_dtype dt)
{
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
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
    bool thd = c.layout == QS_ATTN_THD;
    if (thd) {
        p.cu_seqlens_q = c.cu.data();
        p.cu_seqlens_kv = c.cu.data();
    }
    int64_t tq = thd ? c.sq : c.b * c.sq, tk = thd ? c.sk : c.b * c.sk;
    size_t nq = tq * c.h * c.d, nk = tk * c.hkv * c.d, nv = tk * c.hkv * c.dv;
    size_t no = tq * c.h * c.dv, nl = tq * c.h;
    auto q = randn(nq, dt), k = randn(nk, dt), v = randn(nv, dt), dout = randn(no, dt);
    std::vector<float> o[2], lse[2], dq[2], dk[2], dv[2];
    char why[256] = "";
    for (int path = 0; path < 2; path++) {
        o[path].assign(no, 0.0f);
        lse[path].assign(nl, 0.0f);
        dq[path].assign(nq, 0.0f);
        dk[path].assign(nk, 0.0f);
        dv[path].assign(nv, 0.0f);
        qs_sdpa_args a;
        memset(&a, 0, sizeof a);
        a.p = p;
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.o = o[path].data();
        a.lse = lse[path].data();
        a.why = why;
        a.why_len = sizeof why;
        qs_status st = path == 0 ? qc_slot_sdpa_fwd(nullptr, &a) : qc_flash_fwd(&a);
        /* both backwards read the reference-order o (the kit hands the reference's o) */
        a.o = o[0].data();
        a.dout = dout.data();
        a.dq = dq[path].data();
        a.dk = dk[path].data();
        a.dv = dv[path].data();
        int fell = 0;
        if (st == QS_OK)
            st = path == 0 ? qc_slot_sdpa_bwd(nullptr, &a) : qc_flash_bwd(&a, &fell);
        if (st != QS_OK || fell) {
            printf("check    %-34s %s: %s failed: %s%s\n", c.name, dt == QS_BF16 ? "bf16" : "fp16",
                   path ? "flash" : "reference", why, fell ? " (fp16 range)" : "");
            g_fail++;
            return;
        }
    }
    double rt = dt == QS_BF16 ? 0.016625 : 0.0029531;
    double e[5] = {excess(o[1], o[0], rt), excess(lse[1], lse[0], 1e-3), excess(dq[1], dq[0], rt),
                   excess(dk[1], dk[0], rt), excess(dv[1], dv[0], rt)};
    double worst = 0.0;
    for (double x : e)
        worst = x > worst || x != x ? x : worst;
    bool ok = worst <= 1.0;
    g_fail += !ok;
    printf("check    %-34s %s: excess over tolerance o %.3f lse %.3f dq %.3f dk %.3f dv %.3f  %s\n",
           c.name, dt == QS_BF16 ? "bf16" : "fp16", e[0], e[1], e[2], e[3], e[4],
           ok ? "ok" : "FAIL");
}

void check_all()
{
    const int S = QS_ATTN_SBHD, B = QS_ATTN_BSHD, T = QS_ATTN_THD, N = QS_ATTN_MASK_NONE,
              C = QS_ATTN_MASK_CAUSAL;
    std::vector<small_case> cs = {
        {"sbhd none h4 d8", S, N, 2, 5, 7, 4, 4, 8, 8, {}},
        {"bshd causal gqa h4/2 d64", B, C, 2, 100, 100, 4, 2, 64, 64, {}},
        {"sbhd causal mqa sq90 sk130 d64", S, C, 2, 90, 130, 4, 1, 64, 64, {}},
        {"thd causal d128 3,70,140", T, C, 3, 213, 213, 2, 2, 128, 128, {0, 3, 73, 213}},
        {"bshd none d128 s200", B, N, 1, 200, 200, 2, 2, 128, 128, {}},
        {"sbhd causal 192/128 s150", S, C, 2, 150, 150, 2, 2, 192, 128, {}},
        {"bshd causal absorbed 576/512 h8/1", B, C, 1, 130, 130, 8, 1, 576, 512, {}},
        {"thd none 24/16 3,1,6", T, N, 3, 10, 10, 2, 2, 24, 16, {0, 3, 4, 10}},
    };
    for (const auto &c : cs)
        for (qs_dtype dt : {QS_BF16, QS_FP16})
            check_case(c, dt);
}

/* ---------------------------------------------------------------- timing */

__global__ void fill_bf16(__nv_bfloat16 *x, size_t n, uint32_t seed)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    /* roughly N(0, 1): a sum of four uniform bytes, centred and scaled */
    uint32_t h = bench_hash(i, seed);
    float s =
        (float)(h & 255) + (float)((h >> 8) & 255) + (float)((h >> 16) & 255) + (float)(h >> 24);
    x[i] = __float2bfloat16_rn((s - 510.0f) / 147.8f);
}

template <typename Tt> Tt *dalloc(size_t n)
{
    Tt *p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, n * sizeof(Tt)));
    return p;
}

void fill(__nv_bfloat16 *x, size_t n, uint32_t seed)
{
    fill_bf16<<<(unsigned)((n + 255) / 256), 256>>>(x, n, seed);
}

double rel_rms(const float *a, const float *b, size_t n)
{
    std::vector<float> x(n), y(n);
    BENCH_CHECK(cudaMemcpy(x.data(), a, n * 4, cudaMemcpyDeviceToHost));
    BENCH_CHECK(cudaMemcpy(y.data(), b, n * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t e = 0; e < n; e++) {
        num += ((double)x[e] - y[e]) * ((double)x[e] - y[e]);
        den += (double)y[e] * y[e];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

template <int C> void time_shape(const char *name, int b, int s, int h, int hkv, int d, int dv)
{
    using bf = __nv_bfloat16;
    namespace fl = qc::fl;
    fl::geo g{QS_ATTN_BSHD,
              QS_ATTN_MASK_CAUSAL,
              QS_BF16,
              b,
              s,
              s,
              h,
              hkv,
              d,
              dv,
              nullptr,
              nullptr,
              nullptr,
              nullptr,
              1.0f / sqrtf((float)d)};
    size_t nq = (size_t)b * s * h * d, nk = (size_t)b * s * hkv * d, nv = (size_t)b * s * hkv * dv;
    size_t no = (size_t)b * s * h * dv, nl = (size_t)b * s * h;
    bf *q = dalloc<bf>(nq), *k = dalloc<bf>(nk), *v = dalloc<bf>(nv), *dout = dalloc<bf>(no);
    fill(q, nq, 11);
    fill(k, nk, 12);
    fill(v, nv, 13);
    fill(dout, no, 14);
    float *o[2], *lse = dalloc<float>(nl), *dd = dalloc<float>(nl), *grad[2][3];
    int *ovf = dalloc<int>(1);
    BENCH_CHECK(cudaMemset(ovf, 0, sizeof(int)));
    for (int m = 0; m < 2; m++) {
        o[m] = dalloc<float>(no);
        grad[m][0] = dalloc<float>(nq);
        grad[m][1] = dalloc<float>(nk);
        grad[m][2] = dalloc<float>(nv);
    }
    double fl_fwd = 2.0 * b * h * (double)s * s / 2 * (d + dv);
    cudaEvent_t e0, e1;
    BENCH_CHECK(cudaEventCreate(&e0));
    BENCH_CHECK(cudaEventCreate(&e1));
    float ms[2][2];
    for (int m = 0; m < 2; m++) { /* m 0: split (the plugin's), 1: single rounding */
        auto fwd = [&] {
            if (m == 0)
                BENCH_CHECK((fl::fwd_launch<bf, C, true>(g, s, q, k, v, o[m], lse, 0)));
            else
                BENCH_CHECK((fl::fwd_launch<bf, C, false>(g, s, q, k, v, o[m], lse, 0)));
        };
        auto bwd = [&] {
            fl::dsum_kernel<bf><<<(unsigned)((nl + 7) / 8), 256>>>((int64_t)nl, dv, o[0], dout, dd);
            if (m == 0)
                BENCH_CHECK((fl::bwd_launch<bf, C, true>(
                    g, s, s, q, k, v, dout, lse, dd, grad[m][0], grad[m][1], grad[m][2], ovf, 0)));
            else
                BENCH_CHECK((fl::bwd_launch<bf, C, false>(
                    g, s, s, q, k, v, dout, lse, dd, grad[m][0], grad[m][1], grad[m][2], ovf, 0)));
        };
        for (int pass = 0; pass < 2; pass++) {
            int reps = pass == 0 ? 1 : 3; /* pass 0: warm-up */
            BENCH_CHECK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++)
                fwd();
            BENCH_CHECK(cudaEventRecord(e1));
            BENCH_CHECK(cudaEventSynchronize(e1));
            BENCH_CHECK(cudaEventElapsedTime(&ms[m][0], e0, e1));
            ms[m][0] /= reps;
            BENCH_CHECK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++)
                bwd();
            BENCH_CHECK(cudaEventRecord(e1));
            BENCH_CHECK(cudaEventSynchronize(e1));
            BENCH_CHECK(cudaEventElapsedTime(&ms[m][1], e0, e1));
            ms[m][1] /= reps;
        }
        printf("time     %-40s %-8s fwd %8.3f ms %6.1f TFLOP/s  bwd %8.3f ms %6.1f TFLOP/s\n", name,
               m == 0 ? "split" : "single", ms[m][0], fl_fwd / ms[m][0] / 1e9, ms[m][1],
               2.5 * fl_fwd / ms[m][1] / 1e9);
        fflush(stdout);
    }
    printf("accuracy %-40s single vs split: rel. RMS o %.2e dq %.2e dk %.2e dv %.2e\n", name,
           rel_rms(o[1], o[0], no), rel_rms(grad[1][0], grad[0][0], nq),
           rel_rms(grad[1][1], grad[0][1], nk), rel_rms(grad[1][2], grad[0][2], nv));
    fflush(stdout);
    for (int m = 0; m < 2; m++) {
        cudaFree(o[m]);
        for (int j = 0; j < 3; j++)
            cudaFree(grad[m][j]);
    }
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(dout);
    cudaFree(lse);
    cudaFree(dd);
    cudaFree(ovf);
}

} // namespace

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("attn_bench: no CUDA device\n");
        return 77;
    }
    unsetenv("QSPEC_CUDA_SDPA"); /* the slots' own path stays the reference order */
    if (argc > 2 && strcmp(argv[1], "--profile") == 0) {
        /* one shape, no checks: for ncu (the first launches are the split forward, dq, dkv) */
        if (strcmp(argv[2], "mla") == 0)
            time_shape<3>("b1 h128/1 s4096 absorbed 576/512 causal", 1, 4096, 128, 1, 576, 512);
        else
            time_shape<1>("b2 h16 s4096 d128 causal", 2, 4096, 16, 16, 128, 128);
        return 0;
    }
    check_all();
    printf("attn_bench: %d checks failing\n", g_fail);
    fflush(stdout);
    if (!(argc > 1 && strcmp(argv[1], "--no-timing") == 0)) {
        time_shape<1>("b2 h16 s4096 d128 causal", 2, 4096, 16, 16, 128, 128);
        time_shape<2>("b2 h16 s4096 192/128 causal", 2, 4096, 16, 16, 192, 128);
        time_shape<2>("b1 h128 s4096 192/128 causal", 1, 4096, 128, 128, 192, 128);
        time_shape<3>("b1 h128/1 s4096 absorbed 576/512 causal", 1, 4096, 128, 1, 576, 512);
    }
    return g_fail ? 1 : 0;
}
