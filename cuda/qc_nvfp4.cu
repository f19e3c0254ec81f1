/* qc_nvfp4.cu: NVFP4 of spec/recipes.md section 7 on the GPU, in two passes: the tensor
 * amax of each copy (the columnwise one after the Hadamard transform), then the codes.
 * The arithmetic is qc_nvfp4.cuh's, element by element the same on both paths.
 *
 * Fast path (M % 128 == 0, K % 64 == 0, 16-byte aligned buffers): one thread block of 256
 * threads per 128x64 tile makes both copies. Thread t loads the 8-column chunk t % 8 of
 * rows t/8 + 32j (j < 4) with 16-byte loads; a 1x16 rowwise block is two adjacent lanes,
 * its codes leave as 4-byte words. The tile goes to shared memory, where thread (k, b),
 * k = t % 64, b = t / 64 + 4h, takes the 16x1 columnwise block b of column k (transformed
 * or not); those codes leave through shared memory as 64-byte rows of x^T. 2-D tiles: the
 * 16x16 amax by shared atomics, the columnwise codes the rowwise nibbles transposed.
 *
 * The fast path's arithmetic comes in four builds with the same outputs (qc_nvfp4_arith):
 * 0, the generic kernels' own functions (E2M1 by threshold compares, the transform in the
 * reference's order); 1, e2m1_rne_magic and rht16_butterfly; 2, e2m1_rne_magic with the
 * transform in the reference's order. On an H100 (2026-12-05, docs/perf.md) the
 * magic encode made the rows without the transform 10 to 24% faster and the butterfly made
 * those with it slower. 3 (the default; round 3, fewer instructions an element): e2m1_rne_minmax (the
 * magic add with FMNMX clamps, about 8 instructions against 14), every amax by fmaxf of
 * |v| (one FMNMX a value against four), the block factors (a correctly rounded division
 * each) read from a shared table of all 256 scale codes computed once a thread block, and
 * the transform's BF16 rounding by the two-at-a-time conversion (rht16_cvt).
 *
 * Generic path (any shape): one thread per scale code, then one per data byte, calling
 * scale_entry() and data_byte(), which cuda/check_arith.cu runs against the reference. */
#include <algorithm>

#include "qc_dispatch.cuh"
#include "qc_nvfp4.cuh"

/* The fast path's arithmetic build (cuda/qc_kernels.h); the default is this one line. */
int qc_nvfp4_arith = 3;

namespace qc
{
namespace nv
{
namespace
{

constexpr int kThreads = 256;
constexpr int kTM = 128, kTK = 64; /* fast-path tile: rows (m) by columns (k) */
constexpr int kCB = kTM / kBlock;  /* columnwise blocks down one tile column */
constexpr unsigned kFull = 0xFFFFFFFFu;
enum { MODE_1D = 0, MODE_RHT = 1, MODE_2D = 2 };

/* [REC-NV-ELEM] [REC-NV-SR]: the element code by arithmetic build A (the same codes). */
template <int A> __device__ __forceinline__ uint32_t e2m1_fast(float v, int sr, uint32_t u)
{
    if (sr)
        return A == 3 ? e2m1_sr_minmax(v, u) : e2m1_sr(v, u);
    return A == 3 ? e2m1_rne_minmax(v) : A ? e2m1_rne_magic(v) : e2m1_rne(v);
}

/* [RNG-STREAM] words 4 blk .. 4 blk + 3 by build A (the same words). */
template <int A>
__device__ __forceinline__ void rand4(uint64_t seed, uint64_t offset, uint64_t blk, uint32_t w[4])
{
    if (A == 3)
        random4_wide(seed, offset, blk, w);
    else
        random4(seed, offset, blk, w);
}

/* [REC-NV-RHT] on one group of BF16 values by arithmetic build A (the same values). */
template <int A> __device__ __forceinline__ void rht16_fast(const float v[16], float w[16])
{
    if (A == 1)
        rht16_butterfly(v, w);
    else if (A == 3)
        rht16_cvt(v, w);
    else
        rht16(v, w);
}

/* [REC-NV-SCALE] by build A: build 3 with te's fl(1/6) as a constant (the same codes). */
template <int V, int A> __device__ __forceinline__ uint32_t block_scale_a(float b, const global &g)
{
    return A == 3 ? variant<V>::block_scale_k(b, g) : variant<V>::block_scale(b, g);
}

/* [REC-NV-ELEM] the value handed to the encoder by build A: build 3 leaves out torchao's
 * clamp to [-6, 6], which its encoders (e2m1_rne_minmax, e2m1_sr_minmax) make themselves:
 * beyond +-6 both give the code of +-6, a NaN stays a NaN; the same codes. */
template <int V, int A> __device__ __forceinline__ float value_a(float x, float f, const global &g)
{
    if (V == 1 && A == 3)
        return g.dec == 0.0f ? 0.0f : mul_rn(x, f);
    return variant<V>::value(x, f, g);
}

/* [REC-AMAX] of n values as bits (NaN ignored, -0 as +0) by build A: the unsigned maximum
 * of abs_bits, or (build 3) fmaxf of |v| from +0, one FMNMX a value (a NaN operand yields
 * the other; for the rest the order of non-negative floats is that of their bits;
 * cuda/check_arith.cu compares the two on all 2^32 inputs on the device). */
template <int A, int N> __device__ __forceinline__ uint32_t amax_bits_of(const float *v)
{
    if (A == 3) {
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < N; i++)
            m = fmaxf(m, fabsf(v[i]));
        return bits_of(m);
    }
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < N; i++)
        m = max_u32(m, abs_bits(v[i]));
    return m;
}

struct fast_args {
    const void *x;
    int64_t M, K;
    int sr;
    uint64_t seed, offset;
    uint32_t *amax_bits; /* written by amax_rht_tile, read by tile_kernel */
    qc_copy row, col;
};

/* Block-wide maximum of one value per thread (kThreads threads, all of them calling). */
__device__ __forceinline__ uint32_t block_max(uint32_t a, uint32_t *part)
{
    a = warp_max(a);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = a;
    __syncthreads();
    a = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; i++)
        a = max_u32(a, part[i]);
    return a;
}

/* atomicMax, skipped when the (monotonic) word already holds at least a. */
__device__ __forceinline__ void max_into(uint32_t *p, uint32_t a)
{
    if (a > __ldcg(p))
        atomicMax(p, a);
}

/* The codes of v[0..7], elements i0 .. i0+7 (i0 % 8 == 0) of `stream`; code e at bit 4e. */
template <int V, int A>
__device__ __forceinline__ uint32_t encode8(const float v[8], float f, const global &g,
                                            const fast_args &a, uint64_t stream, uint64_t i0)
{
    uint32_t u[8] = {};
    if (a.sr) {
        rand4<A>(a.seed, stream, i0 / 4, u);
        rand4<A>(a.seed, stream, i0 / 4 + 1, u + 4);
    }
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < 8; e++)
        w |= e2m1_fast<A>(value_a<V, A>(v[e], f, g), a.sr, u[e]) << (4 * e);
    return w;
}

/* The same for 16 values, i0 % 16 == 0. */
template <int V, int A>
__device__ __forceinline__ uint64_t encode16(const float v[16], float f, const global &g,
                                             const fast_args &a, uint64_t stream, uint64_t i0)
{
    uint32_t u[16] = {};
    if (a.sr) {
#pragma unroll
        for (int q = 0; q < 4; q++)
            rand4<A>(a.seed, stream, i0 / 4 + q, u + 4 * q);
    }
    uint64_t w = 0;
#pragma unroll
    for (int e = 0; e < 16; e++)
        w |= static_cast<uint64_t>(e2m1_fast<A>(value_a<V, A>(v[e], f, g), a.sr, u[e])) << (4 * e);
    return w;
}

/* Thread t's part of the tile at (m0, k0): rows t/8 + 32j, columns 8(t%8) .. +7. */
template <int DT>
__device__ __forceinline__ void load_tile(const fast_args &a, int64_t m0, int64_t k0, float v[4][8])
{
    int t = threadIdx.x;
#pragma unroll
    for (int j = 0; j < 4; j++)
        load8<DT>(a.x, static_cast<size_t>((m0 + t / 8 + 32 * j) * a.K + k0 + 8 * (t % 8)), v[j]);
}

/* The same values into xs; the two halves in an order that keeps the 16-byte stores of a
 * quarter warp on distinct banks. */
__device__ __forceinline__ void store_tile(float (*xs)[kTK], const float v[4][8])
{
    int t = threadIdx.x, c = t % 8, sw = (c & 4) ? 4 : 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float4 lo = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
        float4 hi = make_float4(v[j][4], v[j][5], v[j][6], v[j][7]);
        float *p = &xs[t / 8 + 32 * j][8 * c];
        *reinterpret_cast<float4 *>(p + sw) = sw ? hi : lo;
        *reinterpret_cast<float4 *>(p + 4 - sw) = sw ? lo : hi;
    }
}

/* The 16 values of columnwise block b of tile column k, transformed for MODE_RHT. */
template <int MODE, int A>
__device__ __forceinline__ void col_block(const float (*xs)[kTK], int b, int k, float x16[16])
{
#pragma unroll
    for (int i = 0; i < 16; i++)
        x16[i] = xs[kBlock * b + i][k];
    if (MODE == MODE_RHT)
        rht16_fast<A>(x16, x16);
}

/* [REC-AMAX] of x into both words (the columnwise copy quantizes the same values). */
template <int DT, int A>
__global__ void __launch_bounds__(kThreads)
    amax_vec(const void *x, int64_t nchunk, uint32_t *amax_bits)
{
    __shared__ uint32_t part[kThreads / 32];
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    uint32_t a = 0;
    for (int64_t ch = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; ch < nchunk;
         ch += 4 * stride) {
        float v[4][8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (ch + u * stride < nchunk)
                load8<DT>(x, static_cast<size_t>(ch + u * stride) * 8, v[u]);
            else
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[u][e] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            a = max_u32(a, amax_bits_of<A, 8>(v[u]));
    }
    a = block_max(a, part);
    if (threadIdx.x == 0 && a) {
        max_into(&amax_bits[0], a);
        max_into(&amax_bits[1], a);
    }
}

/* [REC-AMAX] of x into word 0 and, [REC-NV-1D-COL], of the transformed x^T into word 1. */
template <int A> __global__ void __launch_bounds__(kThreads) amax_rht_tile(fast_args a)
{
    __shared__ __align__(16) float xs[kTM][kTK];
    __shared__ uint32_t part[2][kThreads / 32];
    const int t = threadIdx.x;
    const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTM,
                  k0 = static_cast<int64_t>(blockIdx.x) * kTK;
    float v[4][8];
    load_tile<QC_IN_BF16>(a, m0, k0, v);
    uint32_t raw = 0, tr = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
        raw = max_u32(raw, amax_bits_of<A, 8>(v[j]));
    store_tile(xs, v);
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float x16[16];
        col_block<MODE_RHT, A>(xs, t / kTK + 4 * h, t % kTK, x16);
        tr = max_u32(tr, amax_bits_of<A, 16>(x16));
    }
    raw = warp_max(raw);
    tr = warp_max(tr);
    if (t % 32 == 0) {
        part[0][t / 32] = raw;
        part[1][t / 32] = tr;
    }
    __syncthreads();
    if (t == 0) {
        for (int i = 1; i < kThreads / 32; i++) {
            raw = max_u32(raw, part[0][i]);
            tr = max_u32(tr, part[1][i]);
        }
        if (raw)
            max_into(&a.amax_bits[0], raw);
        if (tr)
            max_into(&a.amax_bits[1], tr);
    }
}

/* Both copies of the tile (blockIdx.y, blockIdx.x) [REC-NV-1D] [REC-NV-1D-COL] [REC-NV-RHT]
 * [REC-NV-2D] [REC-NV-2D-COL]; a copy with NULL data is skipped. */
template <int DT, int V, int MODE, int A>
__global__ void __launch_bounds__(kThreads) tile_kernel(fast_args a)
{
    constexpr bool k2d = MODE == MODE_2D;
    constexpr bool kTab = A == 3; /* the block factors from a table of all 256 scale codes */
    __shared__ float ftab[kTab ? 2 : 1][kTab ? 256 : 1];    /* [copy][code]: factor() */
    __shared__ __align__(16) float xs[k2d ? 1 : kTM][kTK];  /* the tile (1-D) */
    __shared__ uint32_t rcodes[k2d ? kTM : 1][kTK / 8];     /* 2-D rowwise codes */
    __shared__ uint32_t tamax[k2d ? kCB : 1][kTK / kBlock]; /* 2-D tile amax bits */
    __shared__ uint64_t ccodes[kTK][kCB + 1];               /* columnwise codes */
    __shared__ uint8_t cscale[k2d ? 1 : kTK][kCB];          /* columnwise scales */
    const int t = threadIdx.x, c = t % 8, lane = t % 32;
    const int64_t M = a.M, K = a.K;
    const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTM,
                  k0 = static_cast<int64_t>(blockIdx.x) * kTK;
    const bool do_row = a.row.data != nullptr, do_col = a.col.data != nullptr;
    const global grow = variant<V>::tensor(from_bits(a.amax_bits[0]));

    if (k2d && t < kCB * (kTK / kBlock))
        tamax[t / (kTK / kBlock)][t % (kTK / kBlock)] = 0;
    float v[4][8];
    load_tile<DT>(a, m0, k0, v);
    if constexpr (kTab) { /* code t's factor for each copy (2-D: both use grow) */
        static_assert(kThreads == 256, "one table entry a thread");
        ftab[0][t] = variant<V>::factor(static_cast<uint32_t>(t), grow);
        if (!k2d && do_col)
            ftab[1][t] = variant<V>::factor(static_cast<uint32_t>(t),
                                            variant<V>::tensor(from_bits(a.amax_bits[1])));
    }
    if (!k2d && do_col)
        store_tile(xs, v);
    if (kTab && !k2d)
        __syncthreads(); /* 2-D: the tile amax's first barrier comes before any use */

    /* The rowwise copy (and, 2-D, the codes the columnwise copy transposes). */
    if (do_row || k2d) {
        uint32_t am[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            am[j] = amax_bits_of<A, 8>(v[j]);
            am[j] = max_u32(am[j], __shfl_xor_sync(kFull, am[j], 1)); /* the 1x16 block */
        }
        if (k2d) { /* the 16x16 tile: 16 rows of 1x16 blocks */
            __syncthreads();
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c % 2 == 0)
                    atomicMax(&tamax[(t / 8 + 32 * j) / kBlock][c / 2], am[j]);
            __syncthreads();
#pragma unroll
            for (int j = 0; j < 4; j++)
                am[j] = tamax[(t / 8 + 32 * j) / kBlock][c / 2];
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = t / 8 + 32 * j;
            int64_t m = m0 + r, e0 = m * K + k0 + 8 * c;
            uint32_t sc = block_scale_a<V, A>(from_bits(am[j]), grow);
            uint32_t w = encode8<V, A>(v[j], kTab ? ftab[0][sc] : variant<V>::factor(sc, grow),
                                       grow, a, a.offset, static_cast<uint64_t>(e0));
            if (do_row) {
                *reinterpret_cast<uint32_t *>(a.row.data + e0 / 2) = w;
                if (!k2d) { /* the row's four scales of this tile, one word */
                    uint32_t s4;
                    if (A == 3) { /* lanes 8i: sc of lanes 8i, 8i+2, then 8i+4, 8i+6 */
                        uint32_t s2 = sc | (__shfl_down_sync(kFull, sc, 2) << 8);
                        s4 = s2 | (__shfl_down_sync(kFull, s2, 4) << 16);
                    } else {
                        int l0 = lane & ~7;
                        s4 = __shfl_sync(kFull, sc, l0) | (__shfl_sync(kFull, sc, l0 + 2) << 8) |
                             (__shfl_sync(kFull, sc, l0 + 4) << 16) |
                             (__shfl_sync(kFull, sc, l0 + 6) << 24);
                    }
                    if (c == 0)
                        *reinterpret_cast<uint32_t *>(static_cast<uint8_t *>(a.row.scale) +
                                                      m * (K / 16) + k0 / 16) = s4;
                }
            }
            if (k2d && do_col)
                rcodes[r][c] = w;
        }
        if (k2d && do_row && t < kCB) { /* tile row t: four scales */
            uint32_t s4 = 0;
            for (int b = 0; b < kTK / kBlock; b++)
                s4 |= block_scale_a<V, A>(from_bits(tamax[t][b]), grow) << (8 * b);
            *reinterpret_cast<uint32_t *>(static_cast<uint8_t *>(a.row.scale) +
                                          (m0 / 16 + t) * (K / 16) + k0 / 16) = s4;
        }
        if (k2d && do_col && t >= 32 && t < 32 + kTK / kBlock) { /* tile column b: eight scales */
            int b = t - 32;
            uint64_t s8 = 0;
            for (int i = 0; i < kCB; i++)
                s8 |= static_cast<uint64_t>(block_scale_a<V, A>(from_bits(tamax[i][b]), grow))
                      << (8 * i);
            *reinterpret_cast<uint64_t *>(static_cast<uint8_t *>(a.col.scale) +
                                          (k0 / 16 + b) * (M / 16) + m0 / 16) = s8;
        }
    }
    if (!do_col)
        return;

    /* The columnwise copy: block b of tile column k, 16 codes a word in ccodes[k][b]. */
    __syncthreads();
    const int k = t % kTK;
    const global gcol = k2d ? grow : variant<V>::tensor(from_bits(a.amax_bits[1]));
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int b = t / kTK + 4 * h;
        uint64_t w = 0;
        if (k2d) {
#pragma unroll
            for (int i = 0; i < 16; i++)
                w |= static_cast<uint64_t>((rcodes[kBlock * b + i][k / 8] >> (4 * (k % 8))) & 0xFu)
                     << (4 * i);
        } else {
            float x16[16];
            col_block<MODE, A>(xs, b, k, x16);
            uint32_t am = amax_bits_of<A, 16>(x16);
            uint32_t sc = block_scale_a<V, A>(from_bits(am), gcol);
            uint64_t e0 = static_cast<uint64_t>((k0 + k) * M + m0 + kBlock * b);
            w = encode16<V, A>(x16, kTab ? ftab[1][sc] : variant<V>::factor(sc, gcol), gcol, a,
                               a.offset + 1, e0);
            cscale[k2d ? 0 : k][b] = static_cast<uint8_t>(sc);
        }
        ccodes[k][b] = w;
    }
    __syncthreads();
    {
        int kr = t / 4, q = t % 4; /* 64 rows of x^T, 64 bytes each: four 16-byte pieces */
        uint64_t lo = ccodes[kr][2 * q], hi = ccodes[kr][2 * q + 1];
        uint4 o = make_uint4(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo >> 32),
                             static_cast<uint32_t>(hi), static_cast<uint32_t>(hi >> 32));
        *reinterpret_cast<uint4 *>(a.col.data + ((k0 + kr) * M + m0) / 2 + 16 * q) = o;
    }
    if (!k2d && t < kTK) {
        uint2 s;
        s.x = cscale[t][0] | (cscale[t][1] << 8) | (cscale[t][2] << 16) |
              (static_cast<uint32_t>(cscale[t][3]) << 24);
        s.y = cscale[t][4] | (cscale[t][5] << 8) | (cscale[t][6] << 16) |
              (static_cast<uint32_t>(cscale[t][7]) << 24);
        *reinterpret_cast<uint2 *>(static_cast<uint8_t *>(a.col.scale) + (k0 + t) * (M / 16) +
                                   m0 / 16) = s;
    }
}

/* ---------------------------------------------------------------- the generic path */

/* [REC-AMAX] of x into word 0, and into word 1 too unless the columnwise copy is
 * transformed. */
template <int DT>
__global__ void __launch_bounds__(kThreads)
    amax_elem(const void *x, int64_t n, int both, uint32_t *amax_bits)
{
    __shared__ uint32_t part[kThreads / 32];
    uint32_t a = 0;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        a = max_u32(a, abs_bits(in_load<DT>(x, static_cast<size_t>(i))));
    a = block_max(a, part);
    if (threadIdx.x == 0 && a) {
        max_into(&amax_bits[0], a);
        if (both)
            max_into(&amax_bits[1], a);
    }
}

/* [REC-NV-1D-COL] [REC-NV-RHT]: amax of the transformed x^T into word 1; thread
 * (g, k) transforms rows 16g .. 16g+15 of column k. */
__global__ void __launch_bounds__(kThreads) amax_rht(job jb, uint32_t *amax_bits)
{
    __shared__ uint32_t part[kThreads / 32];
    int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    uint32_t a = 0;
    if (idx < jb.K * (jb.M / kBlock)) {
        int64_t k = idx % jb.K, m0 = (idx / jb.K) * kBlock;
        float v[16];
        for (int i = 0; i < 16; i++)
            v[i] = in_load<QC_IN_BF16>(jb.x, static_cast<size_t>((m0 + i) * jb.K + k));
        rht16(v, v);
        for (int i = 0; i < 16; i++)
            a = max_u32(a, abs_bits(v[i]));
    }
    a = block_max(a, part);
    if (threadIdx.x == 0 && a)
        max_into(&amax_bits[1], a);
}

template <int DT, int V>
__global__ void __launch_bounds__(kThreads) scale_gen(job jb, int d, uint8_t *out, int64_t n)
{
    int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (idx < n)
        out[idx] = scale_entry<DT, V>(jb, d, idx);
}

template <int DT, int V>
__global__ void __launch_bounds__(kThreads) data_gen(job jb, int d, uint8_t *out, int64_t n)
{
    int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (j < n)
        out[j] = data_byte<DT, V>(jb, d, j);
}

bool fast_shape(const qc_input &in, qc_copy row, qc_copy col)
{
    const void *p[4] = {row.data, row.scale, col.data, col.scale};
    for (const void *q : p)
        if (q && !aligned16(q))
            return false;
    return !qc_force_generic && in.rows % kTM == 0 && in.cols % kTK == 0 && aligned16(in.x);
}

/* The fast path with arithmetic build A. */
template <int DT, int V, int A>
cudaError_t launch_fast(const qc_input &in, const qc_nvfp4_params &p, int rht, qc_copy row,
                        qc_copy col, uint32_t *amax_bits)
{
    const int64_t M = in.rows, K = in.cols, n = M * K;
    const bool measure = p.amax_mode != QC_NV_AMAX_GIVEN, encode = p.amax_mode != QC_NV_AMAX_ONLY;
    fast_args a = {in.x, M, K, p.sr, p.seed, p.offset, amax_bits, row, col};
    dim3 grid(static_cast<unsigned>(K / kTK), static_cast<unsigned>(M / kTM));
    if (rht) {
        if constexpr (DT == QC_IN_BF16) {
            if (measure)
                amax_rht_tile<A><<<grid, kThreads>>>(a);
            if (encode)
                tile_kernel<DT, V, MODE_RHT, A><<<grid, kThreads>>>(a);
        } else {
            return cudaErrorInvalidValue;
        }
    } else {
        unsigned blocks = std::min(blocks_for(n / 8, 4 * kThreads), 4096u);
        if (measure)
            amax_vec<DT, A><<<blocks, kThreads>>>(in.x, n / 8, amax_bits);
        if (!encode)
            return cudaGetLastError();
        if (p.tile_2d)
            tile_kernel<DT, V, MODE_2D, A><<<grid, kThreads>>>(a);
        else
            tile_kernel<DT, V, MODE_1D, A><<<grid, kThreads>>>(a);
    }
    return cudaGetLastError();
}

template <int DT, int V>
cudaError_t launch(const qc_input &in, const qc_nvfp4_params &p, int rht, qc_copy row, qc_copy col,
                   uint32_t *amax_bits)
{
    const int64_t M = in.rows, K = in.cols, n = M * K;
    const bool measure = p.amax_mode != QC_NV_AMAX_GIVEN, encode = p.amax_mode != QC_NV_AMAX_ONLY;
    if (fast_shape(in, row, col))
        return qc_nvfp4_arith == 3   ? launch_fast<DT, V, 3>(in, p, rht, row, col, amax_bits)
               : qc_nvfp4_arith == 2 ? launch_fast<DT, V, 2>(in, p, rht, row, col, amax_bits)
               : qc_nvfp4_arith == 1 ? launch_fast<DT, V, 1>(in, p, rht, row, col, amax_bits)
                                     : launch_fast<DT, V, 0>(in, p, rht, row, col, amax_bits);
    job jb = {in.x,
              M,
              K,
              p.tile_2d,
              rht,
              p.sr,
              p.seed,
              p.offset,
              amax_bits,
              {static_cast<const uint8_t *>(row.scale), static_cast<const uint8_t *>(col.scale)}};
    unsigned blocks = std::min(blocks_for(n, kThreads), 4096u);
    if (measure)
        amax_elem<DT><<<blocks, kThreads>>>(in.x, n, !rht, amax_bits);
    if (measure && rht)
        amax_rht<<<blocks_for(K * (M / kBlock), kThreads), kThreads>>>(jb, amax_bits);
    if (!encode)
        return cudaGetLastError();
    const qc_copy cp[2] = {row, col};
    for (int d = 0; d < 2; d++) {
        if (!cp[d].data)
            continue;
        int64_t ns = scale_count(jb, d);
        scale_gen<DT, V><<<blocks_for(ns, kThreads), kThreads>>>(
            jb, d, static_cast<uint8_t *>(cp[d].scale), ns);
    }
    for (int d = 0; d < 2; d++) {
        if (!cp[d].data)
            continue;
        int64_t nb = (n + 1) / 2;
        data_gen<DT, V><<<blocks_for(nb, kThreads), kThreads>>>(jb, d, cp[d].data, nb);
    }
    return cudaGetLastError();
}

} // namespace
} // namespace nv
} // namespace qc

cudaError_t qc_nvfp4(const qc_input &in, const qc_nvfp4_params &p, qc_copy row, qc_copy col,
                     uint32_t *amax_bits)
{
    int rht = p.rht && col.data && !p.tile_2d;
    if (in.rows < 1 || in.cols < 1 ||
        (rht && (in.dtype != QC_IN_BF16 || in.rows % qc::nv::kBlock != 0)))
        return cudaErrorInvalidValue;
    if (p.amax_mode < QC_NV_AMAX_MEASURE || p.amax_mode > QC_NV_AMAX_GIVEN)
        return cudaErrorInvalidValue;
    cudaError_t err = p.amax_mode == QC_NV_AMAX_GIVEN
                          ? cudaSuccess
                          : cudaMemsetAsync(amax_bits, 0, 2 * sizeof(uint32_t));
    if (err != cudaSuccess || (!row.data && !col.data && p.amax_mode != QC_NV_AMAX_ONLY))
        return err;
    /* dispatch's second index selects the variant here: 0 te, 1 torchao. */
    return qc::dispatch(in.dtype, p.torchao, [&](auto dt, auto var) {
        return qc::nv::launch<decltype(dt)::value, decltype(var)::value>(in, p, rht, row, col,
                                                                         amax_bits);
    });
}
