/* gemm_bench.cu: the CUDA plugin's cuBLASLt GEMMs on a GPU (cuda/qc_gemm.cu's plans).
 *
 * 1. Throughput: the FP8 tensorwise GEMM (E4M3 x E4M3, BF16 out) with fast and with split
 *    accumulation, and the BF16 GEMM (FP32 accumulation, BF16 out) the MXFP8/NVFP4 path
 *    uses, at 8192^3 (or M N K from the command line); CUDA events, warm-up, median.
 * 2. Agreement of the FP8 GEMM with the reference's hopper_fp8_tc model (spec/gemm.md
 *    [GEMM-ACC-HOPPER]): the crafted probes of research on Hopper accumulation, then random
 *    E4M3 operands (normal with sigma 4, and spread over 16 binades) at K = 256, 1024, 4096,
 *    both as a 128 x 128 corner of a 2048 x 2048 GEMM and as a whole 128 x 128 GEMM (cuBLASLt
 *    picks its kernel by shape), fast and split: fraction of outputs bitwise equal to the
 *    model, largest distance in FP32 ulps and in value, the fraction equal to fp32_seq, and
 *    the largest |y - y_exact| / gemm_bound (the constant a gemm_bound case would need).
 *
 * It is a tool, so it links libqspec for the models. Every CUDA and cuBLASLt status is
 * checked; a failure prints the call and exits 1. Usage: gemm_bench [M N K] [--no-agreement]
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    for (int fast = 1; fast >= 0; fast--) {
        qc_lt_plan p;
        qc_lt_desc desc = tn_desc(M, N, K, CUDA_R_8F_E4M3, CUDA_R_16BF, 1, fast, d_one);
        CHECK_QS(qc_lt_plan_init(&p, g_h, desc, QC_LT_WORKSPACE, why, sizeof why));
        double t = median_ms(p, a, b, d);
        printf("| FP8 E4M3 x E4M3 -> BF16, %-13s | %8.3f | %8.1f |\n",
               fast ? "fast accum" : "split accum", t, flop / (t * 1e-3) / 1e12);
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
    CHECK_QS(qc_lt_plan_init(&p, g_h, desc, QC_LT_WORKSPACE, why, sizeof why));
    CHECK_QS(qc_lt_plan_run(&p, g_h, db, da, dd, g_ws, QC_LT_WORKSPACE, 0, why, sizeof why));
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
    qs_gemm_operand oa = {va.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f};
    qs_gemm_operand ob = {vb.data(), QS_GEMM_SCALE_TENSOR, NULL, 1.0f};
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

void agreement(const float *d_one)
{
    printf("== cuBLASLt FP8 (E4M3 x E4M3, scales 1, FP32 out) against the reference's models\n");
    printf(
        "| K    | data   | GEMM          | accum | = hopper | max ulp  | max |diff|   | = fp32_seq "
        "| max diff/bound |\n");
    printf(
        "|------|--------|---------------|-------|----------|----------|-------------|------------"
        "|----------------|\n");
    const int64_t C = 128; /* the corner compared */
    const int64_t Ks[] = {256, 1024, 4096};
    for (int spread = 0; spread <= 1; spread++)
        for (int64_t K : Ks)
            for (int big = 1; big >= 0; big--) {
                int64_t MN = big ? 2048 : C;
                std::vector<uint8_t> a = random_codes((size_t)(MN * K), 10 + (uint64_t)K, spread);
                std::vector<uint8_t> b = random_codes((size_t)(MN * K), 20 + (uint64_t)K, spread);
                std::vector<float> ye;
                std::vector<double> bound((size_t)(C * C));
                qs_gemm_acc seq = {QS_GEMM_ACC_FP32_SEQ, 0}, ex = {QS_GEMM_ACC_EXACT, 0};
                model(a, b, C, C, K, ex, &ye, &bound);
                std::vector<float> ys = model(a, b, C, C, K, seq, NULL, NULL);
                for (int fast = 1; fast >= 0; fast--) {
                    std::vector<float> yg = gpu_gemm(a, b, MN, MN, K, fast, d_one);
                    qs_gemm_acc acc = {QS_GEMM_ACC_HOPPER_FP8_TC, fast ? 0 : 128};
                    std::vector<float> ym = model(a, b, C, C, K, acc, NULL, NULL);
                    size_t eq = 0, eq_seq = 0;
                    double max_ulp = 0, max_abs = 0, max_ratio = 0;
                    for (int64_t m = 0; m < C; m++)
                        for (int64_t n = 0; n < C; n++) {
                            float g = yg[(size_t)(m * MN + n)], v = ym[(size_t)(m * C + n)];
                            float s = ys[(size_t)(m * C + n)], e = ye[(size_t)(m * C + n)];
                            double bd = bound[(size_t)(m * C + n)];
                            eq += memcmp(&g, &v, sizeof g) == 0;
                            eq_seq += memcmp(&g, &s, sizeof g) == 0;
                            max_ulp = fmax(max_ulp, fabs((double)(ordered(g) - ordered(v))));
                            max_abs = fmax(max_abs, fabs((double)g - (double)v));
                            if (bd > 0)
                                max_ratio = fmax(max_ratio, fabs((double)g - (double)e) / bd);
                        }
                    double nn = (double)(C * C);
                    printf("| %4lld | %-6s | %-13s | %-5s | %8.4f | %8.0f | %11.4g | %10.4f | "
                           "%14.1f |\n",
                           (long long)K, spread ? "spread" : "normal",
                           big ? "2048^2 corner" : "128^2", fast ? "fast" : "split", eq / nn,
                           max_ulp, max_abs, eq_seq / nn, max_ratio);
                    fflush(stdout);
                }
            }
    printf("\n");
}

} // namespace

int main(int argc, char **argv)
{
    int64_t M = 8192, N = 8192, K = 8192;
    int do_agreement = 1, npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-agreement") == 0) {
            do_agreement = 0;
            continue;
        }
        long long v = atoll(argv[i]);
        if (v <= 0 || v % 16 != 0 || npos >= 3) {
            fprintf(stderr, "usage: gemm_bench [M N K (multiples of 16)] [--no-agreement]\n");
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
    throughput(M, N, K, d_one);
    if (do_agreement) {
        probes(d_one);
        agreement(d_one);
    }
    CHECK_CUDA(cudaFree(d_one));
    CHECK_CUDA(cudaFree(g_ws));
    cublasLtDestroy(g_h);
    return 0;
}
