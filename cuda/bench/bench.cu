/* bench.cu: times every CUDA quantizer of cuda/ on an 8192x16384 BF16 input (or the size
 * given as two arguments) with CUDA events — warm-up, median of many runs, rotated input
 * and output buffers larger than L2 — beside a device-to-device copy measured in the same
 * run, and prints per kernel the bytes the algorithm must move, the achieved bandwidth and
 * its fraction of the copy bandwidth. cuda/bench/peer.py times PyTorch on the same work. */
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <cuda_fp16.h>

#include "../qc_kernels.h"
#include "bench_common.cuh"
#include "bench_nvfp4.inc"

namespace {

constexpr int kRot = 4;     /* buffer sets rotated between runs */
constexpr int kWarm = 5;
constexpr int kRuns = 40;

#define CHECK(call) BENCH_CHECK(call)

struct buffers {
    uint16_t *x;
    uint8_t *row, *col, *rs, *cs;
    uint32_t *amax;
};

struct bench_ctx {
    int64_t M, K;
    buffers set[kRot];
};

typedef void (*kernel_fn)(const bench_ctx &c, const buffers &b);

double median_us(const bench_ctx &c, kernel_fn f)
{
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    for (int i = 0; i < kWarm; i++)
        f(c, c.set[i % kRot]);
    std::vector<float> ms;
    for (int i = 0; i < kRuns; i++) {
        CHECK(cudaEventRecord(t0));
        f(c, c.set[i % kRot]);
        CHECK(cudaEventRecord(t1));
        CHECK(cudaEventSynchronize(t1));
        float v;
        CHECK(cudaEventElapsedTime(&v, t0, t1));
        ms.push_back(v);
    }
    CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return 1000.0 * ms[ms.size() / 2];
}

qc_input input(const bench_ctx &c, const buffers &b)
{
    return qc_input{b.x, QC_IN_BF16, c.M, c.K};
}

void k_copy(const bench_ctx &c, const buffers &b)
{
    CHECK(cudaMemcpyAsync(b.col, b.x, static_cast<size_t>(c.M * c.K) * 2, cudaMemcpyDeviceToDevice));
}
void k_amax(const bench_ctx &c, const buffers &b)
{
    CHECK(qc_amax(input(c, b), b.amax));
}
void k_delayed_row(const bench_ctx &c, const buffers &b)
{
    qc_tw_params p = {0, 0, 0.5f, 0.0f, 0};
    CHECK(qc_tensorwise(input(c, b), p, b.amax, b.row, nullptr));
}
void k_delayed_both(const bench_ctx &c, const buffers &b)
{
    qc_tw_params p = {0, 0, 0.5f, 0.0f, 0};
    CHECK(qc_tensorwise(input(c, b), p, b.amax, b.row, b.col));
}
void k_current_row(const bench_ctx &c, const buffers &b)
{
    qc_tw_params p = {0, 1, 1.0f, 0.0f, 0};
    CHECK(qc_amax(input(c, b), b.amax));
    CHECK(qc_tensorwise(input(c, b), p, b.amax, b.row, nullptr));
}
void k_current_both(const bench_ctx &c, const buffers &b)
{
    qc_tw_params p = {0, 1, 1.0f, 0.0f, 0};
    CHECK(qc_amax(input(c, b), b.amax));
    CHECK(qc_tensorwise(input(c, b), p, b.amax, b.row, b.col));
}
void k_mx_row(const bench_ctx &c, const buffers &b)
{
    CHECK(qc_mxfp8(input(c, b), 0, 0, qc_copy{b.row, b.rs}, qc_copy{nullptr, nullptr}));
}
void k_mx_both(const bench_ctx &c, const buffers &b)
{
    CHECK(qc_mxfp8(input(c, b), 0, 0, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
}
void k_blk1d_row(const bench_ctx &c, const buffers &b)
{
    qc_block_params p = {0, 0.0f, 1, 3.38953139e38f};
    CHECK(qc_block_1d(input(c, b), p, qc_copy{b.row, b.rs}, qc_copy{nullptr, nullptr}));
}
void k_blk1d_both(const bench_ctx &c, const buffers &b)
{
    qc_block_params p = {0, 0.0f, 1, 3.38953139e38f};
    CHECK(qc_block_1d(input(c, b), p, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
}
void k_blk2d_both(const bench_ctx &c, const buffers &b)
{
    qc_block_params p = {0, 0.0f, 1, 3.38953139e38f};
    CHECK(qc_block_2d(input(c, b), p, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
}

/* A kernel with another rowwise path (qc_rows_path) or tile build (qc_tile_path). */
template <kernel_fn F, int PATH> void rows_path(const bench_ctx &c, const buffers &b)
{
    const int path0 = qc_rows_path;
    qc_rows_path = PATH;
    F(c, b);
    qc_rows_path = path0;
}
template <kernel_fn F, int PATH> void tile_path(const bench_ctx &c, const buffers &b)
{
    const int path0 = qc_tile_path;
    qc_tile_path = PATH;
    F(c, b);
    qc_tile_path = path0;
}

struct entry {
    const char *name;
    kernel_fn f;
    double bytes_per_elem; /* the algorithm's minimum traffic, per input element */
};

void alloc_set(buffers &b, int64_t n, uint32_t seed)
{
    CHECK(cudaMalloc(&b.x, n * 2));
    CHECK(cudaMalloc(&b.row, n));
    CHECK(cudaMalloc(&b.col, n * 2)); /* also the copy's destination */
    CHECK(cudaMalloc(&b.rs, n / 8 + 64));
    CHECK(cudaMalloc(&b.cs, n / 8 + 64));
    CHECK(cudaMalloc(&b.amax, 4));
    bench_fill_bf16<<<static_cast<unsigned>((n + 255) / 256), 256>>>(b.x, static_cast<size_t>(n), seed);
    CHECK(cudaGetLastError());
}

/* Plants NaN, +-Inf, a zero 128x128 tile and a huge value into a BF16 tensor [M, K]. */
__global__ void plant_specials(uint16_t *x, int64_t M, int64_t K)
{
    int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t < 128 * 128) { /* the tile at (128, 256) is all zeros (-0 in its first row) */
        int64_t m = 128 + t / 128, k = 256 + t % 128;
        if (m < M && k < K)
            x[m * K + k] = m == 128 ? 0x8000u : 0u;
    }
    if (t == 0 && M > 8 && K > 300) {
        x[1 * K + 5] = 0x7FC1u;  /* NaN */
        x[2 * K + 40] = 0x7F80u; /* +Inf */
        x[3 * K + 77] = 0xFF80u; /* -Inf */
        x[5 * K + 300] = 0x7F7Fu; /* the largest finite BF16 */
        x[6 * K + 9] = 0x0001u;  /* the smallest subnormal */
    }
}

__global__ void widen(const uint16_t *x, size_t n, int to_fp16, void *out)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
    if (to_fp16)
        static_cast<__half *>(out)[i] = __float2half_rn(v);
    else
        static_cast<float *>(out)[i] = v;
}

/* One quantization written into (row, col, rs, cs, amax). */
typedef void (*quant_fn)(const qc_input &in, const buffers &b, int variant);

void q_tw(const qc_input &in, const buffers &b, int v)
{
    qc_tw_params p = {v & 1, (v >> 1) & 1, 0.75f, 0.0f, (v >> 2) & 1};
    if (p.from_amax)
        CHECK(qc_amax(in, b.amax));
    CHECK(qc_tensorwise(in, p, b.amax, b.row, (v >> 3) & 1 ? b.col : nullptr));
}
void q_mx(const qc_input &in, const buffers &b, int v)
{
    qc_copy col = (v >> 2) & 1 ? qc_copy{b.col, b.cs} : qc_copy{nullptr, nullptr};
    CHECK(qc_mxfp8(in, v & 1, (v >> 1) & 1, qc_copy{b.row, b.rs}, col));
}
void q_b1(const qc_input &in, const buffers &b, int v)
{
    qc_block_params p = {v & 1, 0.0f, (v >> 1) & 1, 3.38953139e38f};
    qc_copy col = (v >> 2) & 1 ? qc_copy{b.col, b.cs} : qc_copy{nullptr, nullptr};
    CHECK(qc_block_1d(in, p, qc_copy{b.row, b.rs}, col));
}
void q_b2(const qc_input &in, const buffers &b, int v)
{
    qc_block_params p = {v & 1, 1e-12f, (v >> 1) & 1, 3.38953139e38f};
    CHECK(qc_block_2d(in, p, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
}

/* Runs f with the fast paths and again with the generic kernels on the same input and
 * compares every output byte; returns the number of differing bytes. */
size_t compare_paths(const qc_input &in, const buffers &f, const buffers &g, int64_t n, quant_fn fn,
                     int variant)
{
    const size_t sizes[5] = {static_cast<size_t>(n), static_cast<size_t>(n), static_cast<size_t>(n / 8),
                             static_cast<size_t>(n / 8), 4};
    uint8_t *fb[5] = {f.row, f.col, f.rs, f.cs, reinterpret_cast<uint8_t *>(f.amax)};
    uint8_t *gb[5] = {g.row, g.col, g.rs, g.cs, reinterpret_cast<uint8_t *>(g.amax)};
    for (int i = 0; i < 5; i++) {
        CHECK(cudaMemset(fb[i], 0xA5, sizes[i]));
        CHECK(cudaMemset(gb[i], 0xA5, sizes[i]));
    }
    qc_force_generic = 0;
    fn(in, f, variant);
    qc_force_generic = 1;
    fn(in, g, variant);
    qc_force_generic = 0;
    CHECK(cudaDeviceSynchronize());
    size_t bad = 0;
    std::vector<uint8_t> a, b;
    for (int i = 0; i < 5; i++) {
        a.resize(sizes[i]);
        b.resize(sizes[i]);
        CHECK(cudaMemcpy(a.data(), fb[i], sizes[i], cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(b.data(), gb[i], sizes[i], cudaMemcpyDeviceToHost));
        for (size_t j = 0; j < sizes[i]; j++)
            bad += a[j] != b[j];
    }
    return bad;
}

/* The fast paths against the generic kernels (themselves checked against the reference by
 * the conformance cases) on inputs with NaN, Inf, zero tiles and extremes, for every
 * input dtype and every variant bit. Returns the number of failing comparisons. */
int verify_fast_paths(bench_ctx &c)
{
    struct job {
        const char *name;
        quant_fn fn;
        int nvariants;
    } jobs[] = {{"tensorwise", q_tw, 16}, {"mxfp8", q_mx, 8}, {"block 1x128", q_b1, 8}, {"block 128x128", q_b2, 4}};
    int64_t n = c.M * c.K;
    plant_specials<<<64, 256>>>(c.set[0].x, c.M, c.K);
    CHECK(cudaGetLastError());
    void *wide;
    CHECK(cudaMalloc(&wide, static_cast<size_t>(n) * 4));
    int failures = 0, runs = 0;
    /* alt 0: the defaults; alt k: rowwise path k and tile build k (the default where k is
     * past the last) */
    const int nalt = std::max<int>(QC_ROWS_NPATHS, QC_TILE_NPATHS);
    for (int alt = 0; alt < nalt; alt++)
    for (int dt = 0; dt < 3; dt++) {
        qc_input in = {c.set[0].x, QC_IN_BF16, c.M, c.K};
        if (dt != QC_IN_BF16) {
            widen<<<static_cast<unsigned>((n + 255) / 256), 256>>>(c.set[0].x, static_cast<size_t>(n),
                                                                 dt == QC_IN_FP16, wide);
            CHECK(cudaGetLastError());
            in.x = wide;
            in.dtype = dt;
        }
        for (const job &j : jobs)
            for (int v = 0; v < j.nvariants; v++) {
                const int rows0 = qc_rows_path, tile0 = qc_tile_path;
                const int rows = alt < QC_ROWS_NPATHS ? alt : rows0;
                const int tile = alt < QC_TILE_NPATHS ? alt : tile0;
                qc_rows_path = rows;
                qc_tile_path = tile;
                size_t bad = compare_paths(in, c.set[1], c.set[2], n, j.fn, v);
                qc_rows_path = rows0;
                qc_tile_path = tile0;
                runs++;
                if (bad) {
                    failures++;
                    printf("verify: %s dtype %d variant %d (rows path %d, tile path %d): %zu bytes differ\n",
                           j.name, dt, v, rows, tile, bad);
                }
            }
    }
    CHECK(cudaFree(wide));
    printf("verify: fast paths against the generic kernels: %d of %d comparisons differ\n", failures, runs);
    return failures;
}

void save(const char *dir, const char *name, const void *dev, size_t n)
{
    std::vector<uint8_t> h(n);
    CHECK(cudaMemcpy(h.data(), dev, n, cudaMemcpyDeviceToHost));
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(h.data(), 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* --dump DIR [M K]: the input (set 0's values) and the outputs of the quantizations that
 * cuda/bench/peer.py checks its peers against, as raw little-endian files: x.bf16; MXFP8
 * (rule te, E4M3) rowwise and columnwise codes and E8M0 scales; current scaling rowwise
 * codes and the amax bits; delayed (scale 0.5) rowwise codes; block 1x128 with power-of-two
 * scales and with plain scales (eps 1e-12, as torchao's kernels use), rowwise and of the
 * transpose, codes and FP32 scale_inv; block 128x128 with plain scales. */
int dump(const char *dir, int64_t M, int64_t K)
{
    buffers b;
    int64_t n = M * K;
    alloc_set(b, n, 0x9E3779B9u);
    CHECK(cudaDeviceSynchronize());
    qc_input in = {b.x, QC_IN_BF16, M, K};
    save(dir, "x.bf16", b.x, n * 2);
    CHECK(qc_mxfp8(in, 0, 0, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
    save(dir, "mx_row.u8", b.row, n);
    save(dir, "mx_row_s.u8", b.rs, n / 32);
    save(dir, "mx_col.u8", b.col, n);
    save(dir, "mx_col_s.u8", b.cs, n / 32);
    qc_tw_params cur = {0, 1, 1.0f, 0.0f, 0};
    CHECK(qc_amax(in, b.amax));
    CHECK(qc_tensorwise(in, cur, b.amax, b.row, b.col));
    save(dir, "cur_row.u8", b.row, n);
    save(dir, "cur_col.u8", b.col, n);
    save(dir, "amax.u32", b.amax, 4);
    qc_tw_params del = {0, 0, 0.5f, 0.0f, 0};
    CHECK(qc_tensorwise(in, del, b.amax, b.row, nullptr));
    save(dir, "del_row.u8", b.row, n);
    for (int pow2 = 1; pow2 >= 0; pow2--) {
        qc_block_params p = {0, pow2 ? 0.0f : 1e-12f, pow2, 3.38953139e38f};
        CHECK(qc_block_1d(in, p, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
        save(dir, pow2 ? "b1p_row.u8" : "b1_row.u8", b.row, n);
        save(dir, pow2 ? "b1p_row_s.f32" : "b1_row_s.f32", b.rs, n / 128 * 4);
        save(dir, pow2 ? "b1p_col.u8" : "b1_col.u8", b.col, n);
        save(dir, pow2 ? "b1p_col_s.f32" : "b1_col_s.f32", b.cs, n / 128 * 4);
    }
    qc_block_params p2 = {0, 1e-12f, 0, 3.38953139e38f};
    CHECK(qc_block_2d(in, p2, qc_copy{b.row, b.rs}, qc_copy{b.col, b.cs}));
    save(dir, "b2_row.u8", b.row, n);
    save(dir, "b2_row_s.f32", b.rs, (M / 128) * (K / 128) * 4);
    save(dir, "b2_col.u8", b.col, n);
    CHECK(cudaDeviceSynchronize());
    printf("dump: %lld x %lld written to %s\n", (long long)M, (long long)K, dir);
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--dump") == 0)
        return dump(argv[2], argc > 4 ? atoll(argv[3]) : 1024, argc > 4 ? atoll(argv[4]) : 4096);
    /* --only NAME: time only the rows whose name contains NAME (and the copy), without the
     * self-check: for a profiler that should see one kernel. */
    const char *only = nullptr;
    if (argc > 2 && strcmp(argv[1], "--only") == 0) {
        only = argv[2];
        argc -= 2;
        argv += 2;
    }
    bench_ctx c;
    c.M = argc > 2 ? atoll(argv[1]) : 8192;
    c.K = argc > 2 ? atoll(argv[2]) : 16384;
    int64_t n = c.M * c.K;
    for (int i = 0; i < kRot; i++)
        alloc_set(c.set[i], n, 0x9E3779B9u * (i + 1));
    CHECK(cudaDeviceSynchronize());
    /* The self-check runs on the leading 2048 x 4096 (or smaller) of the buffers: every
     * fast path is shape-generic above its alignment, and the smaller copy-back keeps the
     * comparisons to seconds. */
    bench_ctx v = c;
    v.M = std::min<int64_t>(c.M, 2048);
    v.K = std::min<int64_t>(c.K, 4096);
    int verify_failures = 0;
    if (!only) {
        printf("verify on %lld x %lld\n", (long long)v.M, (long long)v.K);
        verify_failures = verify_fast_paths(v);
        /* A ragged shape (M*K/8 no multiple of a warp's 128-chunk window, K a multiple of
         * 128 only): the rowwise walks' partial last steps. */
        bench_ctx r = v;
        r.M = v.M - 1;
        r.K = v.K > 128 ? v.K - 128 : v.K;
        if (r.M > 0) {
            printf("verify on %lld x %lld\n", (long long)r.M, (long long)r.K);
            verify_failures += verify_fast_paths(r);
        }
    }
    for (int i = 0; i < kRot; i++) /* the benchmark runs on the unplanted inputs */
        bench_fill_bf16<<<static_cast<unsigned>((n + 255) / 256), 256>>>(c.set[i].x, static_cast<size_t>(n),
                                                                 0x9E3779B9u * (i + 1));
    CHECK(cudaDeviceSynchronize());
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    /* Bytes per element: BF16 in = 2, each FP8 copy = 1, scales by their block size;
     * tensorwise current scaling must read x twice (amax before the cast). */
    const entry table[] = {
        {"copy (D2D, read+write)", k_copy, 4.0},
        {"amax", k_amax, 2.0},
        {"delayed rowwise (amax+cast)", k_delayed_row, 3.0},
        {"delayed row+col(T)", k_delayed_both, 4.0},
        {"current rowwise", k_current_row, 5.0},
        {"current row+col(T)", k_current_both, 6.0},
        {"mxfp8 rowwise", k_mx_row, 3.0 + 1.0 / 32},
        {"mxfp8 row+col fused", k_mx_both, 4.0 + 2.0 / 32},
        {"block 1x128 rowwise", k_blk1d_row, 3.0 + 4.0 / 128},
        {"block 1x128 row+col(T)", k_blk1d_both, 4.0 + 8.0 / 128},
        {"block 128x128 row+col(T)", k_blk2d_both, 4.0},
        {"delayed rowwise, 4 chunks/lane", rows_path<k_delayed_row, QC_ROWS_VEC4>, 3.0},
        {"current rowwise, 4 chunks/lane", rows_path<k_current_row, QC_ROWS_VEC4>, 5.0},
        {"delayed rowwise, resident grid", rows_path<k_delayed_row, QC_ROWS_VEC2_RES>, 3.0},
        {"mxfp8 rowwise, 4 chunks/lane", rows_path<k_mx_row, QC_ROWS_VEC4>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, resident grid", rows_path<k_mx_row, QC_ROWS_VEC2_RES>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, pipe coalesced", rows_path<k_mx_row, QC_ROWS_COAL>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, pipe own", rows_path<k_mx_row, QC_ROWS_OWN>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, pipe coalesced cs", rows_path<k_mx_row, QC_ROWS_COAL_CS>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, pipe own cs", rows_path<k_mx_row, QC_ROWS_OWN_CS>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, bulk", rows_path<k_mx_row, QC_ROWS_BULK>, 3.0 + 1.0 / 32},
        {"mxfp8 rowwise, bulk warp", rows_path<k_mx_row, QC_ROWS_BULK_WARP>, 3.0 + 1.0 / 32},
        {"block 1x128 rowwise, 4 chunks/lane", rows_path<k_blk1d_row, QC_ROWS_VEC4>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, resident grid", rows_path<k_blk1d_row, QC_ROWS_VEC2_RES>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, pipe coalesced", rows_path<k_blk1d_row, QC_ROWS_COAL>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, pipe own", rows_path<k_blk1d_row, QC_ROWS_OWN>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, pipe coalesced cs", rows_path<k_blk1d_row, QC_ROWS_COAL_CS>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, pipe own cs", rows_path<k_blk1d_row, QC_ROWS_OWN_CS>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, bulk", rows_path<k_blk1d_row, QC_ROWS_BULK>, 3.0 + 4.0 / 128},
        {"block 1x128 rowwise, bulk warp", rows_path<k_blk1d_row, QC_ROWS_BULK_WARP>, 3.0 + 4.0 / 128},
        {"mxfp8 row+col fused, 3 blocks/SM", tile_path<k_mx_both, QC_TILE_3>, 4.0 + 2.0 / 32},
        {"mxfp8 row+col fused, packed 3/SM", tile_path<k_mx_both, QC_TILE_PACK3>, 4.0 + 2.0 / 32},
        {"mxfp8 row+col fused, packed 4/SM", tile_path<k_mx_both, QC_TILE_PACK4>, 4.0 + 2.0 / 32},
        {"block 1x128 row+col(T), 3 blocks/SM", tile_path<k_blk1d_both, QC_TILE_3>, 4.0 + 8.0 / 128},
        {"block 1x128 row+col(T), packed 3/SM", tile_path<k_blk1d_both, QC_TILE_PACK3>, 4.0 + 8.0 / 128},
        {"block 1x128 row+col(T), packed 4/SM", tile_path<k_blk1d_both, QC_TILE_PACK4>, 4.0 + 8.0 / 128},
    };
    /* --only NAME picks the row of that exact name when there is one, else every row whose
     * name contains NAME. */
    bool exact = false;
    for (const entry &e : table)
        exact = exact || (only && strcmp(e.name, only) == 0);
    printf("device: %s, %d SMs, L2 %d MiB; input %lldx%lld bf16 (%.1f MB), %d rotated sets\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, (long long)c.M,
           (long long)c.K, n * 2 / 1e6, kRot);
    printf("%-40s %10s %10s %10s %8s\n", "kernel", "MB moved", "median us", "GB/s", "of copy");
    double copy_bw = 0.0;
    for (const entry &e : table) {
        if (only && copy_bw != 0.0 && (exact ? strcmp(e.name, only) != 0 : !strstr(e.name, only)))
            continue;
        double us = median_us(c, e.f), mb = e.bytes_per_elem * n / 1e6;
        double bw = mb / us * 1e3; /* GB/s */
        if (copy_bw == 0.0)
            copy_bw = bw;
        printf("%-40s %10.1f %10.1f %10.1f %7.1f%%\n", e.name, mb, us, bw, 100.0 * bw / copy_bw);
    }
    if (!only || strstr(only, "nvfp4") || strstr(only, " a1") || strstr(only, " a2") ||
        strstr(only, " a3"))
        verify_failures += qc_bench_nvfp4::run(c.M, c.K, copy_bw, only);
    return verify_failures ? 1 : 0;
}
