/* gemm_bench.cu: the CUDA plugin's cuBLASLt GEMMs on a GPU (cuda/qc_gemm.cu's plans).
 *
 * 1. Throughput: the FP8 tensorwise GEMM (E4M3 x E4M3, BF16 out) with fast and with split
 *    accumulation, and the BF16 GEMM (FP32 accumulation, BF16 out) the MXFP8/NVFP4 path
 *    uses, at 8192^3 (or M N K from the command line); CUDA events, warm-up, median.
 * 2. Agreement of the FP8 GEMMs with the reference's hopper_fp8_tc model (spec/gemm.md
 *    [GEMM-ACC-HOPPER], [GEMM-ACC-HOPPER-ALIGN], [GEMM-HOPPER-EPILOGUE]): the crafted probes
 *    of research on Hopper accumulation, then a table over random operands (normal with
 *    sigma 4, and spread over 16 binades): K = 32 ... 4096, fast and split accumulation,
 *    FP32 and BF16 outputs, unit and non-unit tensor scales, E4M3 x E5M2 mixed operands,
 *    no workspace (cuBLASLt cannot split K) and a 32 MiB one, a whole 128 x 128 GEMM and the
 *    128 x 128 corner of larger ones, and the block-scaled modes (VEC128 x VEC128 and
 *    VEC128 x BLK128, random non-power-of-two scales): the fraction of outputs bitwise equal
 *    to the model and the largest distance in units in the last place.
 *
 * 3. --block: the block-scaled GEMMs (VEC128 x VEC128, VEC128 x BLK128, BF16 out) at 8192^3
 *    and at the DeepSeek-V3 layer shapes, TFLOP/s and the algorithm cuBLASLt picked;
 *    --tune N (implies --block): after each row, the fastest of the heuristic's first N
 *    algorithms and how many of its outputs differ from the heuristic algorithm's.
 * 4. --block-experiment DIR: the block-scaled outputs against candidate promotion models
 *    (block_experiment below), the GPU outputs kept in DIR; --block-analyze DIR repeats the
 *    comparison from those files on a machine without a GPU.
 * --agreement-block: of the agreement table, only the block-scaled rows.
 *
 * It is a tool, so it links libqspec for the models. Every CUDA and cuBLASLt status is
 * checked; a failure prints the call and exits 1. Usage: gemm_bench [M N K] [--no-agreement]
 * [--agreement-block] [--block] [--tune N] [--block-experiment DIR] | --block-analyze DIR
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "qc_gemm.h"
#include "qspec/qspec.h"

namespace
{

constexpr int kWarm = 5;
constexpr int kRuns = 30;

#define CHECK_CUDA(call) BENCH_CHECK(call)

#define CHECK_QS(call)                                                                             \
    do {                                                                                           \
        qs_status s_ = (call);                                                                     \
        if (s_ != QS_OK) {                                                                         \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, qs_status_name(s_),  \
                    why);                                                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

char why[512];
cublasLtHandle_t g_h;
void *g_ws;

/* Deterministic finite E4M3 codes (no NaN: exponent field at most 14), both signs. */
__global__ void fill_e4m3(uint8_t *x, size_t n, uint32_t seed)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t h = bench_hash(i, seed);
    x[i] = static_cast<uint8_t>((h & 0x77u) | ((h >> 8) & 0x80u));
}

/* The row-major y[M,N] = a[M,K] b[N,K]^T as a cuBLASLt TN plan (qc_gemm.h). */
qc_lt_desc tn_desc(int64_t M, int64_t N, int64_t K, cudaDataType_t ab, cudaDataType_t out, int fp8,
                   int fast, const float *d_one)
{
    qc_lt_desc d;
    memset(&d, 0, sizeof d);
    d.m_lt = N;
    d.n_lt = M;
    d.k = K;
    d.lda = K;
    d.ldb = K;
    d.ldd = N;
    d.a_type = d.b_type = ab;
    d.d_type = out;
    d.compute = CUBLAS_COMPUTE_32F;
    d.fp8 = fp8;
    d.fast_accum = fast;
    if (fp8) {
        d.a_scale_mode = d.b_scale_mode = QC_LT_SCALE_TENSOR;
        d.a_scale = d.b_scale = d_one;
    }
    d.alpha = 1.0f;
    return d;
}

/* Median time in ms of the plan on the given device buffers. */
double median_ms(const qc_lt_plan &p, const void *a, const void *b, void *d)
{
    cudaEvent_t t0, t1;
    CHECK_CUDA(cudaEventCreate(&t0));
    CHECK_CUDA(cudaEventCreate(&t1));
    for (int i = 0; i < kWarm; i++)
        CHECK_QS(qc_lt_plan_run(&p, g_h, b, a, d, g_ws, QC_LT_WORKSPACE, 0, why, sizeof why));
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> ms(kRuns);
    for (int i = 0; i < kRuns; i++) {
        CHECK_CUDA(cudaEventRecord(t0));
        CHECK_QS(qc_lt_plan_run(&p, g_h, b, a, d, g_ws, QC_LT_WORKSPACE, 0, why, sizeof why));
        CHECK_CUDA(cudaEventRecord(t1));
        CHECK_CUDA(cudaEventSynchronize(t1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], t0, t1));
    }
    CHECK_CUDA(cudaEventDestroy(t0));
    CHECK_CUDA(cudaEventDestroy(t1));
    std::sort(ms.begin(), ms.end());
    return ms[kRuns / 2];
}

void throughput(int64_t M, int64_t N, int64_t K, const float *d_one)
{
    printf("== throughput, M=%lld N=%lld K=%lld, median of %d after %d warm-up runs\n",
           (long long)M, (long long)N, (long long)K, kRuns, kWarm);
    printf("| GEMM                                   | ms       | TFLOP/s  |\n");
    printf("|----------------------------------------|----------|----------|\n");
    size_t na = (size_t)(M * K), nb = (size_t)(N * K), nd = (size_t)(M * N);
    void *a, *b, *d;
    CHECK_CUDA(cudaMalloc(&a, na * 2));
    CHECK_CUDA(cudaMalloc(&b, nb * 2));
    CHECK_CUDA(cudaMalloc(&d, nd * 2));
    double flop = 2.0 * (double)M * (double)N * (double)K;
    fill_e4m3<<<(unsigned)((na + 255) / 256), 256>>>(static_cast<uint8_t *>(a), na, 1u);
    fill_e4m3<<<(unsigned)((nb + 255) / 256), 256>>>(static_cast<uint8_t *>(b), nb, 2u);
    CHECK_CUDA(cudaGetLastError());
    for (int ws0 = 0; ws0 <= 1; ws0++)
        for (int fast = 1; fast >= 0; fast--) {
            qc_lt_plan p;
            qc_lt_desc desc = tn_desc(M, N, K, CUDA_R_8F_E4M3, CUDA_R_16BF, 1, fast, d_one);
            CHECK_QS(qc_lt_plan_init(&p, g_h, desc, ws0 ? 0 : QC_LT_WORKSPACE, why, sizeof why));
            double t = median_ms(p, a, b, d);
            printf("| FP8 E4M3 x E4M3 -> BF16, %-5s, ws %-6s | %8.3f | %8.1f |\n",
                   fast ? "fast" : "split", ws0 ? "0" : "32 MiB", t, flop / (t * 1e-3) / 1e12);
            qc_lt_plan_free(&p);
        }
    bench_fill_bf16<<<(unsigned)((na + 255) / 256), 256>>>(static_cast<uint16_t *>(a), na, 3u);
    bench_fill_bf16<<<(unsigned)((nb + 255) / 256), 256>>>(static_cast<uint16_t *>(b), nb, 4u);
    CHECK_CUDA(cudaGetLastError());
    qc_lt_plan p;
    qc_lt_desc desc = tn_desc(M, N, K, CUDA_R_16BF, CUDA_R_16BF, 0, 0, d_one);
    CHECK_QS(qc_lt_plan_init(&p, g_h, desc, QC_LT_WORKSPACE, why, sizeof why));
    double t = median_ms(p, a, b, d);
    printf("| BF16 x BF16 -> BF16, FP32 accumulation | %8.3f | %8.1f |\n", t,
           flop / (t * 1e-3) / 1e12);
    qc_lt_plan_free(&p);
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaFree(d));
    printf("\n");
}

__global__ void fill_f32(float *x, size_t n, float v)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = v;
}

/* The algorithm cuBLASLt's heuristic picked: config id, tile, stages, split-K and its
 * reduction scheme, cluster shape and CTA swizzling (cublasLtMatmulAlgoConfigGetAttribute). */
void algo_note(const qc_lt_plan &p, char *buf, size_t n)
{
    int id = -1, splitk = -1;
    uint32_t tile = 0, stages = 0, red = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                         sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                         sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                         sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                         sizeof red, &w);
    uint32_t cluster = 0, swz = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                         sizeof cluster, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                         sizeof swz, &w);
    snprintf(buf, n, "algo %d tile %u stages %u splitK %d red %u cluster %u swizzle %u", id, tile,
             stages, splitk, red, cluster, swz);
}

/* Elements of the n 16-bit words x and y that differ, into *count (device). */
__global__ void count_diff16(const uint16_t *x, const uint16_t *y, size_t n, unsigned long long *count)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n && x[i] != y[i])
        atomicAdd(count, 1ull);
}

size_t differ16(const void *x, const void *y, size_t n)
{
    unsigned long long *dc, hc = 0;
    CHECK_CUDA(cudaMalloc(&dc, sizeof hc));
    CHECK_CUDA(cudaMemset(dc, 0, sizeof hc));
    count_diff16<<<(unsigned)((n + 255) / 256), 256>>>(static_cast<const uint16_t *>(x),
                                                       static_cast<const uint16_t *>(y), n, dc);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(&hc, dc, sizeof hc, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaFree(dc));
    return static_cast<size_t>(hc);
}

/* The fastest of the heuristic's first ntune algorithms for plan p (the heuristic's own
 * included), timed as median_ms times the plan; its output is compared with ref (the
 * heuristic algorithm's, n BF16 values). A candidate cuBLASLt refuses to run is skipped. */
void tune_row(const qc_lt_plan &p, int ntune, const void *a, const void *b, void *d, const void *ref,
              size_t n, double flop)
{
    std::vector<cublasLtMatmulAlgo_t> algos(static_cast<size_t>(ntune));
    int na = 0;
    CHECK_QS(qc_lt_plan_candidates(&p, g_h, QC_LT_WORKSPACE, algos.data(), ntune, &na, why,
                                   sizeof why));
    double best = -1.0;
    int ibest = -1, ran = 0;
    size_t dbest = 0;
    qc_lt_plan c = p; /* shares p's descriptors; not freed */
    for (int i = 0; i < na; i++) {
        c.algo = algos[static_cast<size_t>(i)];
        if (qc_lt_plan_run(&c, g_h, b, a, d, g_ws, QC_LT_WORKSPACE, 0, why, sizeof why) != QS_OK ||
            cudaDeviceSynchronize() != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        ran++;
        size_t nd = differ16(d, ref, n);
        double t = median_ms(c, a, b, d);
        if (best < 0 || t < best) {
            best = t;
            ibest = i;
            dbest = nd;
        }
    }
    if (ibest < 0) {
        printf("|      |       |       |   tuned: no candidate ran |\n");
        return;
    }
    c.algo = algos[static_cast<size_t>(ibest)];
    char note[128];
    algo_note(c, note, sizeof note);
    printf("|      |       |       | tuned: best of %2d ran  | candidate %2d    | %8.3f | %8.1f | %s; "
           "%zu of %zu outputs differ from the heuristic's |\n",
           ran, ibest, best, flop / (best * 1e-3) / 1e12, note, dbest, n);
}

/* Block-scaled FP8 GEMMs y[M,N] = a[M,K] b[N,K]^T, E4M3, BF16 out, 32 MiB workspace: a with
 * 1x128 scales (VEC128) and b with 1x128 (VEC128) or 128x128 (BLK128) scales, at 8192^3
 * and the DeepSeek-V3 layer shapes (M tokens x (N, K) of the projections and MLPs). With
 * ntune > 0, each row is followed by the fastest of the heuristic's first ntune algorithms. */
void block_throughput(int ntune)
{
    struct shape {
        int64_t m, n, k;
        const char *what;
    };
    const shape shapes[] = {
        {8192, 8192, 8192, "square"},
        {4096, 24576, 1536, "MLA q up-proj (wq_b)"},
        {8192, 24576, 1536, "MLA q up-proj (wq_b)"},
        {4096, 18432, 7168, "dense MLP up/gate"},
        {8192, 18432, 7168, "dense MLP up/gate"},
        {4096, 7168, 18432, "dense MLP down"},
        {8192, 7168, 18432, "dense MLP down"},
        {4096, 2048, 7168, "MoE expert up/gate"},
        {8192, 2048, 7168, "MoE expert up/gate"},
        {4096, 7168, 2048, "MoE expert down"},
        {8192, 7168, 2048, "MoE expert down"},
    };
    printf("== block-scaled FP8 GEMMs (E4M3 x E4M3 -> BF16, 32 MiB workspace), median of %d "
           "after %d warm-up runs\n",
           kRuns, kWarm);
    printf("| M    | N     | K     | layer                | scales          | ms       | TFLOP/s "
           " | algorithm |\n");
    printf("|------|-------|-------|----------------------|-----------------|----------|--------"
           "--|-----------|\n");
    size_t amax_a = 0, amax_b = 0, amax_d = 0;
    for (const shape &s : shapes) {
        amax_a = std::max(amax_a, (size_t)(s.m * s.k));
        amax_b = std::max(amax_b, (size_t)(s.n * s.k));
        amax_d = std::max(amax_d, (size_t)(s.m * s.n));
    }
    void *a, *b, *d, *d0 = nullptr;
    float *sa, *sb;
    size_t ns = std::max(amax_a, amax_b) / 128 + 4096;
    CHECK_CUDA(cudaMalloc(&a, amax_a));
    CHECK_CUDA(cudaMalloc(&b, amax_b));
    CHECK_CUDA(cudaMalloc(&d, amax_d * 2));
    if (ntune > 0)
        CHECK_CUDA(cudaMalloc(&d0, amax_d * 2));
    CHECK_CUDA(cudaMalloc(&sa, ns * 4));
    CHECK_CUDA(cudaMalloc(&sb, ns * 4));
    fill_e4m3<<<(unsigned)((amax_a + 255) / 256), 256>>>(static_cast<uint8_t *>(a), amax_a, 5u);
    fill_e4m3<<<(unsigned)((amax_b + 255) / 256), 256>>>(static_cast<uint8_t *>(b), amax_b, 6u);
    fill_f32<<<(unsigned)((ns + 255) / 256), 256>>>(sa, ns, 0.75f);
    fill_f32<<<(unsigned)((ns + 255) / 256), 256>>>(sb, ns, 1.25f);
    CHECK_CUDA(cudaGetLastError());
    for (const shape &s : shapes)
        for (int blk = 0; blk <= 1; blk++) {
            qc_lt_desc desc = tn_desc(s.m, s.n, s.k, CUDA_R_8F_E4M3, CUDA_R_16BF, 1, 0, nullptr);
            desc.a_scale_mode = blk ? QC_LT_SCALE_BLK128 : QC_LT_SCALE_VEC128; /* our b */
            desc.b_scale_mode = QC_LT_SCALE_VEC128;                            /* our a */
            desc.a_scale = sb;
            desc.b_scale = sa;
            qc_lt_plan p;
            qs_status st = qc_lt_plan_init(&p, g_h, desc, QC_LT_WORKSPACE, why, sizeof why);
            if (st != QS_OK) {
                printf("| %4lld | %5lld | %5lld | %-20s | %-15s | not supported: %s |\n",
                       (long long)s.m, (long long)s.n, (long long)s.k, s.what,
                       blk ? "VEC128 x BLK128" : "VEC128 x VEC128", why);
                continue;
            }
            double t = median_ms(p, a, b, d);
            char note[128];
            algo_note(p, note, sizeof note);
            double flop = 2.0 * (double)s.m * (double)s.n * (double)s.k;
            printf("| %4lld | %5lld | %5lld | %-20s | %-15s | %8.3f | %8.1f | %s |\n",
                   (long long)s.m, (long long)s.n, (long long)s.k, s.what,
                   blk ? "VEC128 x BLK128" : "VEC128 x VEC128", t, flop / (t * 1e-3) / 1e12,
                   note);
            if (ntune > 0) {
                size_t n = static_cast<size_t>(s.m * s.n);
                CHECK_CUDA(cudaMemcpy(d0, d, n * 2, cudaMemcpyDeviceToDevice));
                tune_row(p, ntune, a, b, d, d0, n, flop);
            }
            fflush(stdout);
            qc_lt_plan_free(&p);
        }
    for (void *q : {a, b, d, d0, (void *)sa, (void *)sb})
        CHECK_CUDA(cudaFree(q));
    printf("\n");
}

/* The FP8 GEMM y[M,N] (FP32 out) of E4M3 codes on the GPU, scales 1. */
std::vector<float> gpu_gemm(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b, int64_t M,
                            int64_t N, int64_t K, int fast, const float *d_one)
{
    void *da, *db, *dd;
    CHECK_CUDA(cudaMalloc(&da, a.size()));
    CHECK_CUDA(cudaMalloc(&db, b.size()));
    CHECK_CUDA(cudaMalloc(&dd, (size_t)(M * N) * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
    qc_lt_plan p;
    qc_lt_desc desc = tn_desc(M, N, K, CUDA_R_8F_E4M3, CUDA_R_32F, 1, fast, d_one);
    CHECK_QS(qc_lt_plan_init(&p, g_h, desc, 0, why, sizeof why)); /* no split K */
    CHECK_QS(qc_lt_plan_run(&p, g_h, db, da, dd, nullptr, 0, 0, why, sizeof why));
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> y((size_t)(M * N));
    CHECK_CUDA(cudaMemcpy(y.data(), dd, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    qc_lt_plan_free(&p);
    CHECK_CUDA(cudaFree(da));
    CHECK_CUDA(cudaFree(db));
    CHECK_CUDA(cudaFree(dd));
    return y;
}

float e4m3_value(uint8_t c)
{
    return qs_decode_f32(QS_E4M3, c);
}

/* The model's y for rows [0, m) of a and [0, n) of b (row length K). */
std::vector<float> model(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b, int64_t m,
                         int64_t n, int64_t K, qs_gemm_acc acc, std::vector<float> *y_exact,
                         std::vector<double> *bound)
{
    std::vector<float> va((size_t)(m * K)), vb((size_t)(n * K)), y((size_t)(m * n));
    for (size_t i = 0; i < va.size(); i++)
        va[i] = e4m3_value(a[i]);
    for (size_t i = 0; i < vb.size(); i++)
        vb[i] = e4m3_value(b[i]);
    qs_gemm_operand oa = {va.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    qs_gemm_operand ob = {vb.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f, QS_E4M3};
    qs_gemm_params p = {m, n, K, 1.0f, 0.0f, acc, QS_FP32};
    qs_ctx *ctx = qs_ctx_new();
    qs_status st = y_exact ? qs_gemm_bound(ctx, &p, &oa, &ob, NULL, y.data(), bound->data())
                           : qs_gemm(ctx, &p, &oa, &ob, NULL, y.data());
    if (st != QS_OK) {
        fprintf(stderr, "the reference failed: %s\n", qs_ctx_errmsg(ctx));
        exit(1);
    }
    qs_ctx_free(ctx);
    if (y_exact)
        *y_exact = y;
    return y;
}

int64_t ordered(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return (b & 0x80000000u) ? -(int64_t)(b & 0x7FFFFFFFu) : (int64_t)b;
}

/* Row 0 of A: `big` at index `at`, `small` elsewhere (zeros in [zero_from, zero_to)); B: ones.
 * Prints how many small terms the GPU and the model lose. */
void probe(const char *what, int64_t K, float big, int64_t at, float small, int64_t zero_from,
           int64_t zero_to, const float *d_one)
{
    const int64_t M = 16, N = 16;
    std::vector<uint8_t> a((size_t)(M * K), 0), b((size_t)(N * K));
    int64_t nsmall = 0;
    for (int64_t k = 0; k < K; k++) {
        float v = k == at ? big : (k >= zero_from && k < zero_to ? 0.0f : small);
        nsmall += k != at && v != 0.0f;
        a[(size_t)k] = qs_encode_e4m3(v, QS_OVF_SATFINITE);
    }
    memset(b.data(), qs_encode_e4m3(1.0f, QS_OVF_SATFINITE), b.size());
    double exact = (double)big + (double)nsmall * small;
    printf("| %-34s |", what);
    for (int fast = 1; fast >= 0; fast--) {
        std::vector<float> y = gpu_gemm(a, b, M, N, K, fast, d_one);
        qs_gemm_acc acc = {QS_GEMM_ACC_HOPPER_FP8_TC, fast ? 0 : 128};
        std::vector<float> ym = model(a, b, 1, 1, K, acc, NULL, NULL);
        double lost = (exact - y[0]) / small, lost_m = (exact - ym[0]) / small;
        printf(" %5.0f / %5.0f %s |", lost, lost_m, y[0] == ym[0] ? "=" : "!");
    }
    printf("\n");
}

void probes(const float *d_one)
{
    printf("== crafted probes: small terms lost, GPU / hopper_fp8_tc model "
           "(= bitwise equal, ! not)\n");
    printf("| probe                              | fast accumulation | split accumulation |\n");
    printf("|------------------------------------|-------------------|--------------------|\n");
    probe("K=32: 256 + 31 x 2^-5", 32, 256.0f, 0, 0x1p-5f, 0, 0, d_one);
    probe("K=32: 256 + 31 x 2^-6", 32, 256.0f, 0, 0x1p-6f, 0, 0, d_one);
    probe("K=32: 256 - 31 x 2^-6", 32, 256.0f, 0, -0x1p-6f, 0, 0, d_one);
    probe("K=64: 256, 32 x 2^-6 in step 2", 64, 256.0f, 0, 0x1p-6f, 1, 32, d_one);
    probe("K=256: 256 + 255 x 2^-6", 256, 256.0f, 0, 0x1p-6f, 0, 0, d_one);
    probe("K=1024: 256 + 1023 x 2^-6", 1024, 256.0f, 0, 0x1p-6f, 0, 0, d_one);
    probe("K=4096: 256 + 4095 x 2^-6", 4096, 256.0f, 0, 0x1p-6f, 0, 0, d_one);
    probe("K=256: 255 x 2^-6, 256 last", 256, 256.0f, 255, 0x1p-6f, 0, 0, d_one);
    printf("\n");
}

/* E4M3 codes of random values: normal with sigma 4, or spread over 16 binades. */
std::vector<uint8_t> random_codes(size_t n, uint64_t seed, int spread)
{
    std::vector<uint8_t> c(n);
    for (size_t i = 0; i < n; i++) {
        float v;
        if (spread) {
            float u = qs_random_uniform(seed, 0, i), w = qs_random_uniform(seed, 1, i);
            v = ldexpf(1.0f + w, (int)floorf(u * 16.0f) - 8);
            if (qs_random_u32(seed, 2, i) & 1u)
                v = -v;
        } else {
            v = 4.0f * qs_random_normal(seed, 0, i);
        }
        c[i] = qs_encode_e4m3(v, QS_OVF_SATFINITE);
    }
    return c;
}

/* One FP8 GEMM of the agreement table: E4M3 or E5M2 codes, tensorwise scales sa, sb or
 * block scales (1x128 for a; 1x128 or 128x128 for b), FP32 or BF16 output, fast or split
 * accumulation, and the workspace cuBLASLt may use (0: it does not split K). */
struct fp8_req {
    int64_t mn, k;
    qs_dtype ta, tb;
    qs_dtype out;
    int fast;
    float sa, sb;
    int block; /* 0 tensorwise; 1 a 1x128, b 1x128; 2 a 1x128, b 128x128; 3 a 128x128, b 1x128 */
    size_t ws;
    std::vector<uint8_t> a, b;   /* codes [mn, k] */
    std::vector<float> bsa, bsb; /* block scales, row-major as qs_gemm_operand holds them */
};

cudaDataType_t lt_fp8(qs_dtype t)
{
    return t == QS_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* cuBLASLt's layout of block scales (as the plugin hands them over): 1x128
 * [ceil(k/128)][roundup(rows, 4)], rows contiguous; 128x128 [ceil(rows/128)][roundup(kb, 4)]. */
std::vector<float> lt_scales(const std::vector<float> &s, int64_t rows, int64_t kb, int tile2d)
{
    if (!tile2d) {
        int64_t ld = (rows + 3) / 4 * 4;
        std::vector<float> v((size_t)(kb * ld), 1.0f);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < kb; j++)
                v[(size_t)(j * ld + r)] = s[(size_t)(r * kb + j)];
        return v;
    }
    int64_t br = (rows + 127) / 128, ld = (kb + 3) / 4 * 4;
    std::vector<float> v((size_t)(br * ld), 1.0f);
    for (int64_t r = 0; r < br; r++)
        for (int64_t j = 0; j < kb; j++)
            v[(size_t)(r * ld + j)] = s[(size_t)(r * kb + j)];
    return v;
}

void *upload_bytes(const void *p, size_t n)
{
    void *d;
    CHECK_CUDA(cudaMalloc(&d, n));
    CHECK_CUDA(cudaMemcpy(d, p, n, cudaMemcpyHostToDevice));
    return d;
}

int g_note_algo; /* gpu_fp8 prints the algorithm cuBLASLt picked */

/* The GPU's y (FP32 values; BF16 outputs widened exactly), all mn x mn. */
std::vector<float> gpu_fp8(const fp8_req &r)
{
    int64_t M = r.mn, N = r.mn, K = r.k, kb = (K + 127) / 128;
    void *da = upload_bytes(r.a.data(), r.a.size()), *db = upload_bytes(r.b.data(), r.b.size());
    size_t es = r.out == QS_BF16 ? 2 : 4;
    void *dd;
    CHECK_CUDA(cudaMalloc(&dd, (size_t)(M * N) * es));
    qc_lt_desc d;
    memset(&d, 0, sizeof d);
    d.m_lt = N;
    d.n_lt = M;
    d.k = K;
    d.lda = d.ldb = K;
    d.ldd = N;
    d.a_type = lt_fp8(r.tb); /* cuBLASLt's A is our b */
    d.b_type = lt_fp8(r.ta);
    d.d_type = r.out == QS_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    d.compute = CUBLAS_COMPUTE_32F;
    d.fp8 = 1;
    d.fast_accum = r.block ? 0 : r.fast;
    d.alpha = 1.0f;
    void *ssa, *ssb;
    if (r.block) {
        std::vector<float> la = lt_scales(r.bsa, M, kb, r.block == 3),
                           lb = lt_scales(r.bsb, N, kb, r.block == 2);
        ssa = upload_bytes(la.data(), la.size() * sizeof(float));
        ssb = upload_bytes(lb.data(), lb.size() * sizeof(float));
        d.a_scale_mode = r.block == 2 ? QC_LT_SCALE_BLK128 : QC_LT_SCALE_VEC128;
        d.b_scale_mode = r.block == 3 ? QC_LT_SCALE_BLK128 : QC_LT_SCALE_VEC128;
    } else {
        ssa = upload_bytes(&r.sa, sizeof(float));
        ssb = upload_bytes(&r.sb, sizeof(float));
        d.a_scale_mode = d.b_scale_mode = QC_LT_SCALE_TENSOR;
    }
    d.a_scale = ssb;
    d.b_scale = ssa;
    qc_lt_plan p;
    CHECK_QS(qc_lt_plan_init(&p, g_h, d, r.ws, why, sizeof why));
    if (g_note_algo) {
        char note[128];
        algo_note(p, note, sizeof note);
        printf("  cuBLASLt: %s\n", note);
    }
    CHECK_QS(qc_lt_plan_run(&p, g_h, db, da, dd, r.ws ? g_ws : nullptr, r.ws, 0, why, sizeof why));
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> y((size_t)(M * N));
    if (es == 4) {
        CHECK_CUDA(cudaMemcpy(y.data(), dd, y.size() * 4, cudaMemcpyDeviceToHost));
    } else {
        std::vector<uint16_t> h(y.size());
        CHECK_CUDA(cudaMemcpy(h.data(), dd, h.size() * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < h.size(); i++)
            y[i] = qs_bf16_to_f32(h[i]);
    }
    qc_lt_plan_free(&p);
    for (void *q : {da, db, dd, ssa, ssb})
        CHECK_CUDA(cudaFree(q));
    return y;
}

/* The hopper_fp8_tc model's y for the c x c corner, rows split over threads. */
std::vector<float> model_fp8(const fp8_req &r, int64_t c)
{
    int64_t K = r.k, kb = (K + 127) / 128;
    std::vector<float> va((size_t)(c * K)), vb((size_t)(c * K)), y((size_t)(c * c));
    for (size_t i = 0; i < va.size(); i++)
        va[i] = qs_decode_f32(r.ta, r.a[i]);
    for (size_t i = 0; i < vb.size(); i++)
        vb[i] = qs_decode_f32(r.tb, r.b[i]);
    int nt = (int)std::min<int64_t>(16, c);
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            int64_t r0 = c * t / nt, r1 = c * (t + 1) / nt;
            qs_gemm_operand oa, ob;
            if (r.block == 3) { /* the corner (c <= 128 rows) lies in a's first tile row */
                oa = {va.data() + r0 * K, QS_GEMM_SCALE_BLOCK_128X128, r.bsa.data(), 1.0f, r.ta};
                ob = {vb.data(), QS_GEMM_SCALE_BLOCK_1X128, r.bsb.data(), 1.0f, r.tb};
            } else if (r.block) {
                oa = {va.data() + r0 * K, QS_GEMM_SCALE_BLOCK_1X128, r.bsa.data() + r0 * kb, 1.0f,
                      r.ta};
                ob = {vb.data(),
                      r.block == 2 ? QS_GEMM_SCALE_BLOCK_128X128 : QS_GEMM_SCALE_BLOCK_1X128,
                      r.bsb.data(), 1.0f, r.tb};
            } else {
                oa = {va.data() + r0 * K, QS_GEMM_SCALE_TENSOR, NULL, r.sa, r.ta};
                ob = {vb.data(), QS_GEMM_SCALE_TENSOR, NULL, r.sb, r.tb};
            }
            qs_gemm_acc acc = {QS_GEMM_ACC_HOPPER_FP8_TC, r.fast && !r.block ? 0 : 128};
            qs_gemm_params p = {r1 - r0, c, K, 1.0f, 0.0f, acc, r.out};
            qs_ctx *ctx = qs_ctx_new();
            if (qs_gemm(ctx, &p, &oa, &ob, NULL, y.data() + r0 * c) != QS_OK) {
                fprintf(stderr, "the reference failed: %s\n", qs_ctx_errmsg(ctx));
                exit(1);
            }
            qs_ctx_free(ctx);
        });
    for (auto &x : th)
        x.join();
    return y;
}

/* Random non-power-of-two block scales in [2^-2, 2^2). */
std::vector<float> random_scales(size_t n, uint64_t seed)
{
    std::vector<float> s(n);
    for (size_t i = 0; i < n; i++) {
        float u = qs_random_uniform(seed, 0, i), w = qs_random_uniform(seed, 1, i);
        s[i] = ldexpf(1.0f + w, (int)floorf(u * 4.0f) - 2);
    }
    return s;
}

/* Codes of random values in format t: normal with sigma 4, or spread over 16 binades. */
std::vector<uint8_t> random_fp8(size_t n, uint64_t seed, int spread, qs_dtype t)
{
    std::vector<uint8_t> c = random_codes(n, seed, spread);
    if (t == QS_E5M2)
        for (size_t i = 0; i < n; i++)
            c[i] = qs_encode_e5m2(qs_decode_f32(QS_E4M3, c[i]), QS_OVF_SATFINITE);
    return c;
}

/* One row of the agreement table. */
void agreement_row(int64_t mn, int64_t k, int spread, qs_dtype ta, qs_dtype tb, qs_dtype out,
                   int fast, float sa, float sb, int block, size_t ws)
{
    fp8_req r;
    r.mn = mn;
    r.k = k;
    r.ta = ta;
    r.tb = tb;
    r.out = out;
    r.fast = fast;
    r.sa = sa;
    r.sb = sb;
    r.block = block;
    r.ws = ws;
    r.a = random_fp8((size_t)(mn * k), 10 + (uint64_t)k, spread, ta);
    r.b = random_fp8((size_t)(mn * k), 20 + (uint64_t)k, spread, tb);
    int64_t kb = (k + 127) / 128;
    if (block) {
        r.bsa = random_scales((size_t)((block == 3 ? (mn + 127) / 128 : mn) * kb), 30 + (uint64_t)k);
        r.bsb =
            random_scales((size_t)((block == 2 ? (mn + 127) / 128 : mn) * kb), 40 + (uint64_t)k);
    }
    int64_t c = std::min<int64_t>(mn, 128);
    std::vector<float> yg = gpu_fp8(r), ym = model_fp8(r, c);
    size_t eq = 0;
    double max_ulp = 0;
    for (int64_t m = 0; m < c; m++)
        for (int64_t n = 0; n < c; n++) {
            float g = yg[(size_t)(m * mn + n)], v = ym[(size_t)(m * c + n)];
            eq += memcmp(&g, &v, sizeof g) == 0;
            max_ulp = fmax(max_ulp, fabs((double)(ordered(g) - ordered(v))));
        }
    const char *scal = block == 1                   ? "VEC128 x VEC128"
                       : block == 2                 ? "VEC128 x BLK128"
                       : block == 3                 ? "BLK128 x VEC128"
                       : (sa == 1.0f && sb == 1.0f) ? "tensor, 1 x 1"
                                                    : "tensor, 0.75 x 1.375";
    printf("| %4lld | %4lld | %-6s | %-4s x %-4s | %-16s | %-4s | %-5s | %-6s | %8.4f | %8.0f |\n",
           (long long)mn, (long long)k, spread ? "spread" : "normal", qs_dtype_name(ta),
           qs_dtype_name(tb), scal, out == QS_BF16 ? "bf16" : "fp32",
           block  ? "block"
           : fast ? "fast"
                  : "split",
           ws ? "32 MiB" : "0", eq / (double)(c * c), max_ulp);
    fflush(stdout);
}

/* ------------------------------------------------------------ the block-scaled experiment
 * cuBLASLt's VEC128 x VEC128 (and, as a control, VEC128 x BLK128) outputs against candidate
 * models of the promotion: the tensor-core partial P of each 128-wide K block (or of 64 or
 * 32-wide pieces of it) by the [GEMM-ACC-HOPPER] steps, or the exact block sum rounded once,
 * folded into the FP32 accumulator with the block's scales sa (row of a) and sb (row or tile
 * of b) by one of six updates. Each GPU output (the 128 x 128 corner) is written to a file
 * so that the comparison can be repeated on a machine without a GPU (--block-analyze). */
struct bexp {
    const char *name;
    int64_t k;
    int spread;
    int block; /* 1 VEC128 x VEC128, 2 VEC128 x BLK128, 3 BLK128 x VEC128 (a x b) */
    int scal;  /* 0 all scales 1, 1 random powers of two, 2 random non-powers of two */
    qs_dtype out;
    size_t ws;
};

const bexp bexps[] = {
    {"v_k128_unit", 128, 0, 1, 0, QS_FP32, 0},
    {"v_k128_rand", 128, 0, 1, 2, QS_FP32, 0},
    {"v_k256_unit", 256, 0, 1, 0, QS_FP32, 0},
    {"v_k256_pow2", 256, 0, 1, 1, QS_FP32, 0},
    {"v_k256_rand", 256, 0, 1, 2, QS_FP32, 0},
    {"v_k1024_unit", 1024, 0, 1, 0, QS_FP32, 0},
    {"v_k1024_pow2", 1024, 0, 1, 1, QS_FP32, 0},
    {"v_k1024_rand", 1024, 0, 1, 2, QS_FP32, 0},
    {"v_k1024_rand_ws", 1024, 0, 1, 2, QS_FP32, QC_LT_WORKSPACE},
    {"v_k1024_rand_bf16", 1024, 0, 1, 2, QS_BF16, 0},
    {"v_k1024_spread", 1024, 1, 1, 2, QS_FP32, 0},
    {"v_k4096_rand", 4096, 0, 1, 2, QS_FP32, 0},
    {"b_k1024_rand", 1024, 0, 2, 2, QS_FP32, 0},
    {"b_k4096_rand", 4096, 0, 2, 2, QS_FP32, 0},
    {"t_k1024_rand", 1024, 0, 3, 2, QS_FP32, 0},
    {"t_k4096_rand", 4096, 0, 3, 2, QS_FP32, 0},
    {"v_k4096_rand_ws", 4096, 0, 1, 2, QS_FP32, QC_LT_WORKSPACE},
};

const char *const bupd_names[] = {
    "acc = fma(s, P, acc), s = fl(sa sb)", "acc = fl(acc + fl(s P))",
    "acc = fma(fl(P sa), sb, acc)",        "acc = fl(acc + fl(fl(P sa) sb))",
    "acc = fma(fl(P sb), sa, acc)",        "acc = fl(acc + fl(fl(P sb) sa))",
};
const char *const bpart_names[] = {"P: hopper steps per 128", "P: hopper steps per 64",
                                   "P: hopper steps per 32", "P: exact block sum, RN"};
constexpr int kUpd = 6, kPart = 4;

std::vector<float> exp_scales(size_t n, uint64_t seed, int scal)
{
    if (scal == 2)
        return random_scales(n, seed);
    std::vector<float> s(n, 1.0f);
    if (scal == 1)
        for (size_t i = 0; i < n; i++)
            s[i] = ldexpf(1.0f, (int)floorf(qs_random_uniform(seed, 0, i) * 4.0f) - 2);
    return s;
}

/* The partials of the c x c corner: P[(m c + n) np + j] for the pieces j of width w of K
 * (kind 0..2: the hopper model's partial of the piece, from +0; 3: the exact sum, RN). */
std::vector<float> exp_partials(const fp8_req &r, int64_t c, int kind)
{
    int64_t K = r.k, w = kind == 0 || kind == 3 ? 128 : kind == 1 ? 64 : 32, np = K / w;
    std::vector<float> va((size_t)(c * K)), vb((size_t)(c * K)), P((size_t)(c * c * np));
    for (size_t i = 0; i < va.size(); i++)
        va[i] = qs_decode_f32(r.ta, r.a[i]);
    for (size_t i = 0; i < vb.size(); i++)
        vb[i] = qs_decode_f32(r.tb, r.b[i]);
    int nt = 16;
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            std::vector<float> sa((size_t)(c * w)), sb((size_t)(c * w)), y((size_t)(c * c));
            qs_ctx *ctx = qs_ctx_new();
            for (int64_t j = t; j < np; j += nt) {
                if (kind == 3) {
                    for (int64_t m = 0; m < c; m++)
                        for (int64_t n = 0; n < c; n++) {
                            double acc = 0.0;
                            for (int64_t k = j * w; k < (j + 1) * w; k++)
                                acc += (double)va[(size_t)(m * K + k)] * vb[(size_t)(n * K + k)];
                            P[(size_t)((m * c + n) * np + j)] = (float)acc;
                        }
                    continue;
                }
                for (int64_t m = 0; m < c; m++)
                    for (int64_t k = 0; k < w; k++) {
                        sa[(size_t)(m * w + k)] = va[(size_t)(m * K + j * w + k)];
                        sb[(size_t)(m * w + k)] = vb[(size_t)(m * K + j * w + k)];
                    }
                qs_gemm_operand oa = {sa.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f, r.ta};
                qs_gemm_operand ob = {sb.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f, r.tb};
                qs_gemm_acc acc = {QS_GEMM_ACC_HOPPER_FP8_TC, 0};
                qs_gemm_params p = {c, c, w, 1.0f, 0.0f, acc, QS_FP32};
                if (qs_gemm(ctx, &p, &oa, &ob, NULL, y.data()) != QS_OK) {
                    fprintf(stderr, "the reference failed: %s\n", qs_ctx_errmsg(ctx));
                    exit(1);
                }
                for (int64_t i = 0; i < c * c; i++)
                    P[(size_t)(i * np + j)] = y[(size_t)i];
            }
            qs_ctx_free(ctx);
        });
    for (auto &x : th)
        x.join();
    return P;
}

float bf16_rne(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) != 0x7F800000u)
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    else
        u &= 0xFFFF0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

float exp_update(int upd, float acc, float P, float sa, float sb)
{
    float s = sa * sb, t;
    switch (upd) {
    case 0:
        return std::fma(s, P, acc);
    case 1:
        t = s * P;
        return acc + t;
    case 2:
        t = P * sa;
        return std::fma(t, sb, acc);
    case 3:
        t = P * sa;
        t = t * sb;
        return acc + t;
    case 4:
        t = P * sb;
        return std::fma(t, sa, acc);
    default:
        t = P * sb;
        t = t * sa;
        return acc + t;
    }
}

void block_experiment(const char *dir, int analyze)
{
    const int64_t mn = 2048, c = 128;
    const size_t nx = sizeof bexps / sizeof bexps[0];
    std::vector<std::vector<double>> rate(nx, std::vector<double>(kUpd * kPart + 1));
    printf("== block-scaled GEMMs against candidate promotion models (the 128 x 128 corner of a "
           "2048 x 2048 GEMM, bitwise); GPU outputs in %s\n",
           dir);
    for (size_t x = 0; x < nx; x++) {
        const bexp &e = bexps[x];
        fp8_req r;
        r.mn = mn;
        r.k = e.k;
        r.ta = r.tb = QS_E4M3;
        r.out = e.out;
        r.fast = 0;
        r.sa = r.sb = 1.0f;
        r.block = e.block;
        r.ws = e.ws;
        r.a = random_fp8((size_t)(mn * e.k), 10 + (uint64_t)e.k, e.spread, QS_E4M3);
        r.b = random_fp8((size_t)(mn * e.k), 20 + (uint64_t)e.k, e.spread, QS_E4M3);
        int64_t kb = e.k / 128;
        r.bsa = exp_scales((size_t)((e.block == 3 ? mn / 128 : mn) * kb), 30 + (uint64_t)e.k,
                           e.scal);
        r.bsb = exp_scales((size_t)((e.block == 2 ? mn / 128 : mn) * kb), 40 + (uint64_t)e.k,
                           e.scal);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.f32", dir, e.name);
        std::vector<float> yc((size_t)(c * c));
        if (analyze) {
            FILE *f = fopen(path, "rb");
            if (!f || fread(yc.data(), 4, yc.size(), f) != yc.size()) {
                fprintf(stderr, "cannot read %s\n", path);
                exit(1);
            }
            fclose(f);
        } else {
            g_note_algo = 1;
            std::vector<float> yg = gpu_fp8(r);
            g_note_algo = 0;
            for (int64_t m = 0; m < c; m++)
                for (int64_t n = 0; n < c; n++)
                    yc[(size_t)(m * c + n)] = yg[(size_t)(m * mn + n)];
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(yc.data(), 4, yc.size(), f) != yc.size()) {
                fprintf(stderr, "cannot write %s\n", path);
                exit(1);
            }
            fclose(f);
        }
        for (int part = 0; part < kPart; part++) {
            std::vector<float> P = exp_partials(r, c, part);
            int64_t w = part == 1 ? 64 : part == 2 ? 32 : 128, np = e.k / w;
            for (int upd = 0; upd < kUpd; upd++) {
                size_t eq = 0;
                for (int64_t m = 0; m < c; m++)
                    for (int64_t n = 0; n < c; n++) {
                        float acc = 0.0f;
                        for (int64_t j = 0; j < np; j++) {
                            int64_t g = j * w / 128;
                            float sa = r.bsa[(size_t)((e.block == 3 ? m / 128 : m) * kb + g)];
                            float sb = r.bsb[(size_t)((e.block == 2 ? n / 128 : n) * kb + g)];
                            acc = exp_update(upd, acc, P[(size_t)((m * c + n) * np + j)], sa, sb);
                        }
                        float y = acc + 0.0f;
                        if (e.out == QS_BF16)
                            y = bf16_rne(y);
                        float g = yc[(size_t)(m * c + n)];
                        eq += memcmp(&g, &y, 4) == 0;
                    }
                rate[x][(size_t)(part * kUpd + upd)] = eq / (double)(c * c);
            }
        }
        { /* the reference's model, as libqspec evaluates it */
            std::vector<float> ym = model_fp8(r, c);
            size_t eq = 0;
            for (size_t i = 0; i < ym.size(); i++)
                eq += memcmp(&ym[i], &yc[i], 4) == 0;
            rate[x][(size_t)(kPart * kUpd)] = eq / (double)(c * c);
        }
        printf("  %s done\n", e.name);
        fflush(stdout);
    }
    printf("| candidate (partial; update) ");
    for (size_t x = 0; x < nx; x++)
        printf("| %d ", (int)x);
    printf("|\n");
    for (int i = 0; i < kPart * kUpd; i++) {
        printf("| %s; %s ", bpart_names[i / kUpd], bupd_names[i % kUpd]);
        for (size_t x = 0; x < nx; x++)
            printf("| %.4f ", rate[x][(size_t)i]);
        printf("|\n");
    }
    printf("| libqspec hopper_fp8_tc, promote_every 128 ([GEMM-ACC-HOPPER-VEC]) ");
    for (size_t x = 0; x < nx; x++)
        printf("| %.4f ", rate[x][(size_t)(kPart * kUpd)]);
    printf("|\n");
    printf("columns:");
    for (size_t x = 0; x < nx; x++)
        printf(" %d=%s", (int)x, bexps[x].name);
    printf("\n\n");
}

void agreement(int block_only)
{
    printf("== cuBLASLt FP8 GEMMs against the reference's hopper_fp8_tc model "
           "([GEMM-ACC-HOPPER-ALIGN], [GEMM-HOPPER-EPILOGUE]); the 128 x 128 corner compared "
           "bitwise; max distance in units of the output's last place\n");
    printf("| M=N  | K    | data   | types        | scales           | out  | accum | ws     "
           "| = model  | max ulp  |\n");
    printf("|------|------|--------|--------------|------------------|------|-------|--------"
           "|----------|----------|\n");
    const int64_t Ks[] = {32, 64, 128, 256, 1024, 4096};
    const int64_t K2[] = {1024, 4096};
    for (int spread = 0; spread <= 1 && !block_only; spread++)
        for (int64_t K : Ks)
            for (int fast = 1; fast >= 0; fast--)
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_FP32, fast, 1.0f, 1.0f, 0, 0);
    for (int spread = 0; spread <= 1 && !block_only; spread++)
        for (int64_t K : K2)
            for (int fast = 1; fast >= 0; fast--) {
                agreement_row(128, K, spread, QS_E4M3, QS_E4M3, QS_FP32, fast, 1.0f, 1.0f, 0, 0);
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_BF16, fast, 1.0f, 1.0f, 0, 0);
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_FP32, fast, 0.75f, 1.375f, 0,
                              0);
                agreement_row(2048, K, spread, QS_E4M3, QS_E5M2, QS_FP32, fast, 1.0f, 1.0f, 0, 0);
                agreement_row(2048, K, spread, QS_E5M2, QS_E4M3, QS_BF16, fast, 0.75f, 1.375f, 0,
                              0);
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_FP32, fast, 1.0f, 1.0f, 0,
                              QC_LT_WORKSPACE);
                agreement_row(256, K, spread, QS_E4M3, QS_E4M3, QS_FP32, fast, 1.0f, 1.0f, 0,
                              QC_LT_WORKSPACE);
            }
    for (int spread = 0; spread <= 1; spread++)
        for (int64_t K : K2)
            for (int block = 1; block <= 3; block++) {
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_FP32, 0, 1.0f, 1.0f, block, 0);
                agreement_row(2048, K, spread, QS_E4M3, QS_E4M3, QS_BF16, 0, 1.0f, 1.0f, block,
                              QC_LT_WORKSPACE);
            }
    printf("\n");
}

} // namespace

int main(int argc, char **argv)
{
    int64_t M = 8192, N = 8192, K = 8192;
    int do_agreement = 1, npos = 0, do_block = 0, ntune = 0;
    const char *exp_dir = nullptr;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-agreement") == 0) {
            do_agreement = 0;
            continue;
        }
        if (strcmp(argv[i], "--block") == 0) {
            do_block = 1;
            continue;
        }
        if (strcmp(argv[i], "--tune") == 0 && i + 1 < argc) {
            ntune = atoi(argv[++i]);
            if (ntune < 1 || ntune > 64) {
                fprintf(stderr, "gemm_bench: --tune takes 1 to 64 candidates\n");
                return 2;
            }
            do_block = 1;
            continue;
        }
        if (strcmp(argv[i], "--agreement-block") == 0) {
            do_agreement = 2;
            continue;
        }
        if (strcmp(argv[i], "--block-analyze") == 0 && i + 1 < argc) {
            block_experiment(argv[i + 1], 1);
            return 0;
        }
        if (strcmp(argv[i], "--block-experiment") == 0 && i + 1 < argc) {
            exp_dir = argv[++i];
            continue;
        }
        long long v = atoll(argv[i]);
        if (v <= 0 || v % 16 != 0 || npos >= 3) {
            fprintf(stderr, "usage: gemm_bench [M N K (multiples of 16)] [--no-agreement] [--block] [--tune N] "
                            "[--agreement-block] [--block-experiment DIR] | --block-analyze DIR\n");
            return 2;
        }
        (npos == 0 ? M : npos == 1 ? N : K) = v;
        npos++;
    }
    int dev = 0;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, sm_%d%d; cuBLASLt %zu; CUDA runtime %d\n", prop.name, prop.major,
           prop.minor, cublasLtGetVersion(), CUDART_VERSION);
    cublasStatus_t cs = cublasLtCreate(&g_h);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasLtCreate: %s\n", cublasLtGetStatusName(cs));
        return 1;
    }
    CHECK_CUDA(cudaMalloc(&g_ws, QC_LT_WORKSPACE));
    float one = 1.0f, *d_one;
    CHECK_CUDA(cudaMalloc(&d_one, sizeof one));
    CHECK_CUDA(cudaMemcpy(d_one, &one, sizeof one, cudaMemcpyHostToDevice));
    if (exp_dir) { /* the issue's experiment first: it is what a short run is for */
        block_experiment(exp_dir, 0);
        fflush(stdout);
    }
    if (do_block)
        block_throughput(ntune);
    throughput(M, N, K, d_one);
    if (do_agreement) {
        if (do_agreement == 1)
            probes(d_one);
        agreement(do_agreement == 2);
    }
    CHECK_CUDA(cudaFree(d_one));
    CHECK_CUDA(cudaFree(g_ws));
    cublasLtDestroy(g_h);
    return 0;
}
