/* qc_gdn_staged.cuh: kernels of the BF16-staged chunked GDN (kGdnMmaBf16Smem,
 * cuda/qc_gdn_chunk.cu; docs/gdn.md): wy_fast_kernel (a chunk's W, U, A and T), the lean
 * serial kernels state_lean_kernel (the forward's walk over a sequence's chunks, and the
 * backward's state pass) and dstate_lean_kernel (the backward's reverse walk), on mma.sync or
 * (kWg, sm_90a) wgmma, the backward's grad_fast_kernel and qk_sum_h_kernel, with the tile
 * primitives and the solve they share with the other kernels. With QC_EMU defined the header
 * compiles as host C++ for the CPU emulator of cuda/emu/qc_emu.h (tests/gdn_emu), which gives each
 * instruction its PTX meaning. */
#ifndef QC_GDN_STAGED_CUH
#define QC_GDN_STAGED_CUH

#include <stdint.h>

#include "qc_flash_wgmma.cuh"
#include "qc_gdn_chunk.h"

#ifdef QC_EMU /* the kernels' dynamic shared memory: the emulator's block buffer */
#define QC_GDN_SMEM(name) unsigned char *name = ::qc::fl::wg::smraw
#else
#define QC_GDN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace qc
{
namespace
{

constexpr int kC = 64;        /* chunk */
constexpr int kMaxD = 128;    /* largest dk, dv */
constexpr int kThreads = 256; /* 8 warps */
constexpr int kLdC = kC + 4;  /* row stride of FP32 [64][64] tiles */

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lower k) in the low half */
    return *reinterpret_cast<uint32_t *>(&v);
}

/* The tile primitives are the flash kernels' (cuda/qc_flash.cuh), which the emulator also
 * gives: here with the GDN kernels' array and element types. */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    fl::ops<__nv_bfloat16>::mma(c, a, b0, b1);
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
#ifdef QC_EMU
    emu::mma1688_tf32(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* x rounded to TF32 (nearest, ties away), low 13 bits cleared. */
__device__ __forceinline__ uint32_t to_tf32(float x)
{
#ifdef QC_EMU
    return emu::cvt_rna_tf32(x);
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r & 0xffffe000u;
#endif
}

/* big + small = x to about 22 bits. */
__device__ __forceinline__ void split_tf32(float x, uint32_t &big, uint32_t &small)
{
    big = to_tf32(x);
    small = to_tf32(__fsub_rn(x, __uint_as_float(big)));
}

/* c[n] (the 16 x 8 tile n of a 16 x 8NT strip) += A B over k in [0, kdim), kdim a
 * multiple of 16; a(r, k) for r < 16 and b(k, j) for j < 8 NT read shared memory. The
 * fragment layouts are those of mma.sync m16n8k16 (bf16) and m16n8k8 (tf32): g = lane / 4
 * picks rows g and g + 8 of A and column g of B, t = lane % 4 the k pairs (bf16) or k
 * and k + 4 (tf32); c holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). */
template <int kMma, int NT, class FA, class FB>
__device__ __forceinline__ void mma_strip(float (&c)[NT][4], int kdim, const FA &a, const FB &b)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (kMma == kGdnMmaBf16) {
        for (int k0 = 0; k0 < kdim; k0 += 16) {
            int k1 = k0 + 2 * t, k2 = k1 + 8;
            uint32_t fa[4] = {
                pack_bf16(a(g, k1), a(g, k1 + 1)), pack_bf16(a(g + 8, k1), a(g + 8, k1 + 1)),
                pack_bf16(a(g, k2), a(g, k2 + 1)), pack_bf16(a(g + 8, k2), a(g + 8, k2 + 1))};
#pragma unroll
            for (int n = 0; n < NT; n++) {
                int j = 8 * n + g;
                mma_bf16(c[n], fa, pack_bf16(b(k1, j), b(k1 + 1, j)),
                         pack_bf16(b(k2, j), b(k2 + 1, j)));
            }
        }
    } else {
        for (int k0 = 0; k0 < kdim; k0 += 8) {
            int k1 = k0 + t, k2 = k1 + 4;
            uint32_t ab[4], as[4];
            split_tf32(a(g, k1), ab[0], as[0]);
            split_tf32(a(g + 8, k1), ab[1], as[1]);
            split_tf32(a(g, k2), ab[2], as[2]);
            split_tf32(a(g + 8, k2), ab[3], as[3]);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                int j = 8 * n + g;
                uint32_t bb0, bs0, bb1, bs1;
                split_tf32(b(k1, j), bb0, bs0);
                split_tf32(b(k2, j), bb1, bs1);
                mma_tf32(c[n], as, bb0, bb1); /* the small terms first */
                mma_tf32(c[n], ab, bs0, bs1);
                mma_tf32(c[n], ab, bb0, bb1);
            }
        }
    }
}

/* Row and column (in the 16 x 8NT strip) of accumulator element e of tile n. */
__device__ __forceinline__ int acc_row(int e)
{
    return ((threadIdx.x & 31) >> 2) + (e >= 2 ? 8 : 0);
}
__device__ __forceinline__ int acc_col(int n, int e)
{
    return 8 * n + 2 * (threadIdx.x & 3) + (e & 1);
}

constexpr int kLdH = kMaxD + 8;           /* BF16 row stride of [64][128] tiles (272 B) */
constexpr int kLdH64 = kC + 8;            /* BF16 row stride of [.][64] tiles (144 B) */
constexpr int kTileH = kC * kLdH * 2;     /* bytes */
constexpr int kTileH64 = kC * kLdH64 * 2; /* bytes */
constexpr int kTileF = kC * kLdC * 4;     /* bytes, = kTileH */
static_assert(kTileF == kTileH, "the FP32 [64][68] and BF16 [64][136] tiles alias");

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return fl::smem_addr(p);
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16 *p)
{
    fl::ldsm_x4(r, p);
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16 *p)
{
    fl::ldsm_x4_t(r, p);
}

/* Where element (r, c) (c a multiple of 8) of a BF16 tile lies: pad_layout, rows of ld
 * elements; swz_layout<R>, the 128-byte swizzle of the wgmma operands (R rows; 64-column
 * panels of R x 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r & 7)). */
struct pad_layout {
    int ld;
    __device__ __forceinline__ int at(int r, int c) const
    {
        return r * ld + c;
    }
};
template <int R> struct swz_layout {
    __device__ __forceinline__ int at(int r, int c) const
    {
        return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3);
    }
};

/* The A fragment (16 x 16 from row m0, column k0) of A stored [m][k]. */
template <class Lay>
__device__ __forceinline__ void frag_a_mk(uint32_t (&a)[4], const bf16 *s, Lay y, int m0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4(a, s + y.at(m0 + (l & 7) + ((l >> 3) & 1) * 8, k0 + (l >> 4) * 8));
}
__device__ __forceinline__ void frag_a_mk(uint32_t (&a)[4], const bf16 *s, int ld, int m0, int k0)
{
    frag_a_mk(a, s, pad_layout{ld}, m0, k0);
}
/* The A fragment of A stored transposed, [k][m]. */
__device__ __forceinline__ void frag_a_km(uint32_t (&a)[4], const bf16 *s, int ld, int m0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4_t(a, s + (k0 + (l & 7) + (l >> 4) * 8) * ld + m0 + ((l >> 3) & 1) * 8);
}
/* The B fragments of two 8-column tiles (n0, n0 + 8; k0 .. k0 + 16) of B stored [k][n]:
 * b[0], b[1] for the first, b[2], b[3] for the second. */
template <class Lay>
__device__ __forceinline__ void frag_b_kn(uint32_t (&b)[4], const bf16 *s, Lay y, int n0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4_t(b, s + y.at(k0 + (l & 7) + ((l >> 3) & 1) * 8, n0 + (l >> 4) * 8));
}
__device__ __forceinline__ void frag_b_kn(uint32_t (&b)[4], const bf16 *s, int ld, int n0, int k0)
{
    frag_b_kn(b, s, pad_layout{ld}, n0, k0);
}
/* The same of B stored transposed, [n][k]. */
template <class Lay>
__device__ __forceinline__ void frag_b_nk(uint32_t (&b)[4], const bf16 *s, Lay y, int n0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4(b, s + y.at(n0 + (l & 7) + (l >> 4) * 8, k0 + ((l >> 3) & 1) * 8));
}
__device__ __forceinline__ void frag_b_nk(uint32_t (&b)[4], const bf16 *s, int ld, int n0, int k0)
{
    frag_b_nk(b, s, pad_layout{ld}, n0, k0);
}

__device__ __forceinline__ void mma2(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[4])
{
    mma_bf16(c0, a, b[0], b[1]);
    mma_bf16(c1, a, b[2], b[3]);
}

/* The BF16 pairs w[j] (columns 2t, 2t + 1 of 8-column tile j, lane 4g + t) of one row of
 * four tiles, exchanged within each quad of lanes: lane t gets tile t's eight columns (the
 * pairs of lanes 0..3), 16 bytes in column order. Two butterfly rounds of two shuffles. */
__device__ __forceinline__ uint4 quad_transpose(const uint32_t (&w)[4])
{
    const bool b0 = threadIdx.x & 1, b1 = threadIdx.x & 2;
    uint32_t x[4], y[4];
#pragma unroll
    for (int k = 0; k < 2; k++) { /* x[2k + c] = lane (t & 2 | c)'s w[2k + (t & 1)] */
        uint32_t r = __shfl_xor_sync(0xffffffffu, b0 ? w[2 * k] : w[2 * k + 1], 1);
        x[2 * k] = b0 ? r : w[2 * k];
        x[2 * k + 1] = b0 ? w[2 * k + 1] : r;
    }
#pragma unroll
    for (int c = 0; c < 2; c++) { /* y[s] = lane s's w[t] */
        uint32_t r = __shfl_xor_sync(0xffffffffu, b1 ? x[c] : x[2 + c], 2);
        y[c] = b1 ? r : x[c];
        y[2 + c] = b1 ? x[2 + c] : r;
    }
    return make_uint4(y[0], y[1], y[2], y[3]);
}

__device__ __forceinline__ void st_pair(bf16 *p, float x, float y)
{
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}

/* How a warp's products are handed over (wy_la, wy_mul of cuda/qc_gdn_chunk.cu): a plain callable
 * takes BF16 pairs, put(i, j, x_j, x_{j+1}); a wide_put takes each row's eight columns j .. j + 7
 * as 16 bytes, put.f(i, j, v), after a transpose within each quad of lanes (quad_transpose), so a
 * thread stores 16 bytes where it stored four pairs. */
template <class F> struct wide_put {
    F f;
};
template <class F> __device__ __forceinline__ wide_put<F> wide(F f)
{
    return {f};
}
/* A warp's [16][8 NT] accumulators c (rows r0 + acc_row, columns n0 + acc_col) to put. */
template <int NT, class Put>
__device__ __forceinline__ void put_strip(int r0, int n0, const float (&c)[NT][4], Put put)
{
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e += 2)
            put(r0 + acc_row(e), n0 + acc_col(n, e), c[n][e], c[n][e + 1]);
}
template <int NT, class F>
__device__ __forceinline__ void put_strip(int r0, int n0, const float (&c)[NT][4], wide_put<F> put)
{
    static_assert(NT % 4 == 0, "groups of four 8-column tiles");
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int q = 0; q < NT / 4; q++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = pack_bf16(c[4 * q + j][2 * h], c[4 * q + j][2 * h + 1]);
            put.f(r0 + g + 8 * h, n0 + 32 * q + 8 * t, quad_transpose(w));
        }
}

#ifndef QC_EMU
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool on)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(on ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool on)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(on ? 4 : 0));
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* this thread's writes to shared memory (its landed cp.async copies too) ordered before the
 * async proxy's reads (wgmma operands) */
__device__ __forceinline__ void fence_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#else
inline void cp_async16(void *dst, const void *src, bool on)
{
    emu::cp_async(dst, src, on, 16);
}
inline void cp_async4(void *dst, const void *src, bool on)
{
    emu::cp_async(dst, src, on, 4);
}
inline void cp_commit()
{
    emu::cp_commit();
}
template <int N> inline void cp_wait()
{
    emu::cp_wait(N);
}
inline void fence_async()
{
    emu::fence_proxy_async();
}
#endif

/* The inclusive cumsum of 64 gates, x0 = g[lane] and x1 = g[lane + 32] (0 past the
 * chunk), by one warp: a shuffle scan of each half, then the first half's total added to
 * the second. */
__device__ __forceinline__ void warp_cumsum64(float &x0, float &x1)
{
    int l = threadIdx.x & 31;
    for (int off = 1; off < 32; off <<= 1) {
        float y0 = __shfl_up_sync(0xffffffffu, x0, off), y1 = __shfl_up_sync(0xffffffffu, x1, off);
        if (l >= off) {
            x0 = __fadd_rn(x0, y0);
            x1 = __fadd_rn(x1, y1);
        }
    }
    x1 = __fadd_rn(x1, __shfl_sync(0xffffffffu, x0, 31));
}

/* x summed over the 4 lanes of a quad (those holding one accumulator row); every lane gets
 * the same value (each step adds a pair in both orders, which FP32 addition makes equal). */
__device__ __forceinline__ float quad_sum(float x)
{
    x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* T = (I + L)^-1 for strictly lower L [64][64] (in Ls), into Ts (zeroed by the caller): the
 * four 16 x 16 diagonal blocks D_b = (I + L_bb)^-1 by forward substitution, one warp
 * each, a lane a column; then for block rows bi = 1..3, T_{bi,bj} = -D_bi sum_{m=bj}^{bi-1}
 * L_{bi,m} T_{m,bj} through the scratch Ps: in FP32 on the CUDA cores (tc false), or (tc) on
 * the tensor cores in three TF32 products a step (solve_merge_tc), by NT threads (tid their
 * index, from 0) that bar() synchronizes. */
struct block_bar {
    __device__ void operator()() const
    {
        __syncthreads();
    }
};
/* The block merges of solve_t on the tensor cores: warp w takes the 8-column tiles n = w, w +
 * NT / 32, ... of block row bi; P_n = L_{bi,.} T_{.,n} over the block rows from n's own (T is
 * zero above it), into its columns of Ps, then T_{bi,n} = -D_bi P_n; mma_strip's three TF32
 * products a step, about 22 significant bits of each operand, FP32 accumulation. Only the warp
 * that wrote a tile of Ps reads it. */
template <int NT, class Bar>
__device__ __forceinline__ void solve_merge_tc(const float *Ls, float *Ts, float *Ps, int tid,
                                               Bar bar)
{
#pragma unroll
    for (int bi = 1; bi < 4; bi++) {
        for (int n = tid >> 5; n < 2 * bi; n += NT / 32) {
            int r0 = 16 * bi, n0 = 8 * n, k0 = 16 * (n >> 1);
            float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
            mma_strip<kGdnMmaTf32x3, 1>(
                c, r0 - k0, [&](int r, int k) { return Ls[(r0 + r) * kLdC + k0 + k]; },
                [&](int k, int j) { return Ts[(k0 + k) * kLdC + n0 + j]; });
#pragma unroll
            for (int e = 0; e < 4; e++)
                Ps[(r0 + acc_row(e)) * kLdC + n0 + acc_col(0, e)] = c[0][e];
            __syncwarp();
            float d[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
            mma_strip<kGdnMmaTf32x3, 1>(
                d, 16, [&](int r, int k) { return Ts[(r0 + r) * kLdC + r0 + k]; },
                [&](int k, int j) { return Ps[(r0 + k) * kLdC + n0 + j]; });
#pragma unroll
            for (int e = 0; e < 4; e++)
                Ts[(r0 + acc_row(e)) * kLdC + n0 + acc_col(0, e)] = -d[0][e];
            __syncwarp();
        }
        bar();
    }
}
template <int NT = kThreads, class Bar = block_bar>
__device__ void solve_t(const float *Ls, float *Ts, float *Ps, int tid = threadIdx.x, Bar bar = {},
                        bool tc = false)
{
    int warp = tid >> 5, lane = tid & 31;
    if (warp < 4 && lane < 16) {
        int b0 = 16 * warp, j = lane;
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float s = i == j ? 1.0f : 0.0f;
#pragma unroll
            for (int m = 0; m < i; m++)
                s = __fsub_rn(s, __fmul_rn(Ls[(b0 + i) * kLdC + b0 + m], x[m]));
            x[i] = i < j ? 0.0f : s;
            Ts[(b0 + i) * kLdC + b0 + j] = x[i];
        }
    }
    bar();
    if (tc) {
        solve_merge_tc<NT>(Ls, Ts, Ps, tid, bar);
        return;
    }
    /* Each thread takes element (r, c) of every block of the row at once: one sum a block,
     * each in increasing m as before, the sums of a row's blocks interleaved so that their
     * shared-memory loads overlap (m, bi and bj are compile-time after unrolling). */
#pragma unroll
    for (int bi = 1; bi < 4; bi++) {
        for (int e = tid; e < 256; e += NT) {
            int r = e >> 4, c = e & 15;
            const float *lrow = Ls + (16 * bi + r) * kLdC;
            float acc[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int m = 0; m < 16 * bi; m++) {
                float l = lrow[m];
#pragma unroll
                for (int bj = 0; bj < 3; bj++)
                    if (bj < bi && m >= 16 * bj)
                        acc[bj] = __fadd_rn(acc[bj], __fmul_rn(l, Ts[m * kLdC + 16 * bj + c]));
            }
#pragma unroll
            for (int bj = 0; bj < 3; bj++)
                if (bj < bi)
                    Ps[(16 * bi + r) * kLdC + 16 * bj + c] = acc[bj];
        }
        bar();
        for (int e = tid; e < 256; e += NT) {
            int r = e >> 4, c = e & 15;
            const float *drow = Ts + (16 * bi + r) * kLdC + 16 * bi;
            float acc[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int m = 0; m < 16; m++) {
                float d = drow[m];
#pragma unroll
                for (int bj = 0; bj < 3; bj++)
                    if (bj < bi)
                        acc[bj] = __fadd_rn(acc[bj],
                                            __fmul_rn(d, Ps[(16 * bi + m) * kLdC + 16 * bj + c]));
            }
#pragma unroll
            for (int bj = 0; bj < 3; bj++)
                if (bj < bi)
                    Ts[(16 * bi + r) * kLdC + 16 * bj + c] = -acc[bj];
        }
        bar();
    }
}

/* Rows of 128 BF16 (or 64) from global into a tile, 16 bytes a copy; rows >= nc zero. */
__device__ __forceinline__ void tile_rows(bool r64, int ldt, bf16 *t, int64_t nc, const bf16 *base,
                                          int64_t stride)
{
    int per = r64 ? 8 : 16;
    for (int e = threadIdx.x; e < kC * per; e += kThreads) {
        int i = e / per, c = e % per;
        bool on = i < nc;
        cp_async16(t + i * ldt + c * 8, on ? base + i * stride + c * 8 : base, on);
    }
}

/* wy_fast_kernel's products, one warp's share (also the fused forward's). wy_la: rows 16 mt ..
 * 16 mt + 15 and columns n0 .. n0 + 31 of L = (beta K K^T . Gamma) strictly below the diagonal
 * (into Lf, FP32) and of A = scale Q K^T . Gamma, A given to put (put_strip): the products
 * K K^T and Q K^T (wy_kq), then the gates and beta applied (wy_la_gates). */
template <class Lay>
__device__ __forceinline__ void wy_kq(int mt, int n0, const bf16 *Kh, const bf16 *Qh,
                                      float (&ckk)[4][4], float (&cqk)[4][4], Lay y)
{
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            ckk[n][e] = cqk[n][e] = 0.0f;
    for (int k0 = 0; k0 < kMaxD; k0 += 16) {
        uint32_t ak[4], aq[4], b0[4], b1[4];
        frag_a_mk(ak, Kh, y, 16 * mt, k0);
        frag_a_mk(aq, Qh, y, 16 * mt, k0);
        frag_b_nk(b0, Kh, y, n0, k0);
        frag_b_nk(b1, Kh, y, n0 + 16, k0);
        mma2(ckk[0], ckk[1], ak, b0);
        mma2(ckk[2], ckk[3], ak, b1);
        mma2(cqk[0], cqk[1], aq, b0);
        mma2(cqk[2], cqk[3], aq, b1);
    }
}
template <class Put>
__device__ __forceinline__ void wy_la_gates(int mt, int n0, const float (&ckk)[4][4],
                                            const float (&cqk)[4][4], const float *G,
                                            const float *Bt, float *Lf, float scale, Put put)
{
    float a[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mt + acc_row(e), j = n0 + acc_col(n, e);
            float gam = i >= j ? expf(__fsub_rn(G[i], G[j])) : 0.0f;
            Lf[i * kLdC + j] = i > j ? __fmul_rn(__fmul_rn(Bt[i], ckk[n][e]), gam) : 0.0f;
            a[n][e] = __fmul_rn(__fmul_rn(scale, cqk[n][e]), gam);
        }
    put_strip(16 * mt, n0, a, put);
}
template <class Put, class Lay = pad_layout>
__device__ __forceinline__ void wy_la(int mt, int n0, const bf16 *Kh, const bf16 *Qh,
                                      const float *G, const float *Bt, float *Lf, float scale,
                                      Put put, Lay y = pad_layout{kLdH})
{
    float ckk[4][4], cqk[4][4];
    wy_kq(mt, n0, Kh, Qh, ckk, cqk, y);
    wy_la_gates(mt, n0, ckk, cqk, G, Bt, Lf, scale, put);
}

/* Rows 16 mt .. 16 mt + 15 and columns n0 .. n0 + 63 of Ta [64][kLdH64] times B (64 deep, in
 * layout yb: pad_layout or swz_layout), given to put (put_strip). */
template <class Put, class Lay>
__device__ __forceinline__ void wy_mul(int mt, int n0, const bf16 *Ta, const bf16 *Bs, Lay yb,
                                       Put put)
{
    float c[8][4] = {};
    for (int k0 = 0; k0 < kC; k0 += 16) {
        uint32_t a[4];
        frag_a_mk(a, Ta, kLdH64, 16 * mt, k0);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            frag_b_kn(b, Bs, yb, n0 + 16 * np, k0);
            mma2(c[2 * np], c[2 * np + 1], a, b);
        }
    }
    put_strip(16 * mt, n0, c, put);
}

/* Tw = T diag(beta e^G) (unless !kTw: the T form needs only Tu) and Tu = T diag(beta) (BF16,
 * [64][kLdH64]) from T (FP32, Tf) by NT threads (tid their index, from 0), each element pair
 * (i, j) of T also given to keep(i, j, t_j, t_{j+1}). A thread's columns j, j + 1 are the same
 * in every row (NT is a multiple of kC / 2), so their factors are formed once. */
template <int NT, class Keep, bool kTw = true>
__device__ __forceinline__ void wy_scale_t(const float *Tf, const float *G, const float *Bt,
                                           bf16 *Tw, bf16 *Tu, int tid, Keep keep)
{
    static_assert(NT % (kC / 2) == 0, "a thread's columns are the same in every row");
    const int j = 2 * (tid % (kC / 2));
    const float fw0 = kTw ? __fmul_rn(Bt[j], expf(G[j])) : 0.0f,
                fw1 = kTw ? __fmul_rn(Bt[j + 1], expf(G[j + 1])) : 0.0f;
    for (int e = tid; e < kC * kC / 2; e += NT) {
        int i = e / (kC / 2);
        float t0 = Tf[i * kLdC + j], t1 = Tf[i * kLdC + j + 1];
        if constexpr (kTw)
            st_pair(Tw + i * kLdH64 + j, __fmul_rn(t0, fw0), __fmul_rn(t1, fw1));
        st_pair(Tu + i * kLdH64 + j, __fmul_rn(t0, Bt[j]), __fmul_rn(t1, Bt[j + 1]));
        keep(i, j, t0, t1);
    }
}

/* kLateV: V is fetched into T's tile once Tw and Tu are formed, while W = Tw K is computed, so
 * the kernel holds four tiles (three blocks an SM) instead of five (two); the same products in
 * the same order either way. Shared memory: the tiles K, Q, (V,) L, T, then G and beta. */
__host__ __device__ constexpr int wy_tiles(bool late_v)
{
    return late_v ? 4 : 5;
}
constexpr size_t wy_smem(bool late_v)
{
    return wy_tiles(late_v) * static_cast<size_t>(kTileH) + 2 * kC * sizeof(float);
}
/* wy_fast_kernel's shared memory, the tiles K, Q, (V,) L, T, then G and beta; the solve's
 * scratch P takes Q's tile once Q K^T is formed, Tw and Tu (BF16) Q's and L's once T is, and
 * under kLateV V takes T's. */
template <bool kLateV> struct wy_tiles_t {
    bf16 *Kh, *Qh, *Vh, *Tw, *Tu;
    float *Lf, *Tf, *Pf, *G, *Bt;
    __device__ explicit wy_tiles_t(unsigned char *smb)
    {
        constexpr int kT = wy_tiles(kLateV);
        Kh = reinterpret_cast<bf16 *>(smb);
        Qh = reinterpret_cast<bf16 *>(smb + kTileH);
        Lf = reinterpret_cast<float *>(smb + (kT - 2) * kTileH);
        Tf = reinterpret_cast<float *>(smb + (kT - 1) * kTileH);
        Vh = kLateV ? reinterpret_cast<bf16 *>(Tf) : reinterpret_cast<bf16 *>(smb + 2 * kTileH);
        Pf = reinterpret_cast<float *>(Qh);
        Tw = Qh;
        Tu = reinterpret_cast<bf16 *>(Lf);
        G = reinterpret_cast<float *>(smb + kT * kTileH);
        Bt = G + kC;
    }
};

/* T's tile zeroed (the solve's precondition), and by warp 0 the inclusive cumsum G of value
 * head hvi's gates in the chunk and its beta (0 past nc). */
template <bool kLateV>
__device__ __forceinline__ void wy_prepare(const gdn_chunk_problem &p, const wy_tiles_t<kLateV> &t,
                                           const float *gate, const float *beta, int64_t tok0,
                                           int64_t nc, int64_t hvi)
{
    int tid = threadIdx.x, lane = tid & 31;
    for (int e = tid; e < kC * kC; e += kThreads)
        t.Tf[(e / kC) * kLdC + e % kC] = 0.0f;
    if (tid < 32) {
        float gr0 = lane < nc ? gate[(tok0 + lane) * p.hv + hvi] : 0.0f;
        float gr1 = lane + 32 < nc ? gate[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        t.Bt[lane] = lane < nc ? beta[(tok0 + lane) * p.hv + hvi] : 0.0f;
        t.Bt[lane + 32] = lane + 32 < nc ? beta[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        warp_cumsum64(gr0, gr1);
        t.G[lane] = gr0;
        t.G[lane + 32] = gr1;
    }
}

/* Value head hvi's share of wy_fast_kernel once K K^T and Q K^T are in this warp's strips
 * (ckk, cqk; wy_kq) and wy_prepare's G, beta and zeroed T are visible: L and A, the solve,
 * Tw and Tu (T kept in Tout if not null), then (kLateV: V fetched into T's tile) W = Tw K and
 * U = Tu V. A, W and U leave as BF16 pairs, or (kWide) as 16-byte pieces of a row. kTf (the T
 * form of the forward, lean_chunk_t): no W and U; Tu = T diag(beta) leaves through W instead,
 * BF16 [hv][tokens][64]. */
template <bool kLateV, bool kWide, bool kTf = false>
__device__ __forceinline__ void wy_head(const gdn_chunk_problem &p, const wy_tiles_t<kLateV> &t,
                                        const float (&ckk)[4][4], const float (&cqk)[4][4],
                                        const bf16 *v, int64_t tok0, int64_t nc, int64_t hvi,
                                        bf16 *W, bf16 *U, bf16 *A, bf16 *Tout)
{
    int tid = threadIdx.x, warp = tid >> 5;
    const bf16 *vrows = v + (tok0 * p.hv + hvi) * kMaxD;
    auto out = [&](bf16 *dst, int ld) {
        auto pair = [=](int i, int j, float x0, float x1) {
            if (i < nc)
                st_pair(dst + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * ld + j, x0, x1);
        };
        auto row8 = [=](int i, int j, uint4 x) {
            if (i < nc)
                *reinterpret_cast<uint4 *>(
                    dst + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * ld + j) = x;
        };
        if constexpr (kWide)
            return wide(row8);
        else
            return pair;
    };
    wy_la_gates(warp >> 1, (warp & 1) * 32, ckk, cqk, t.G, t.Bt, t.Lf, p.scale, out(A, kC));
    __syncthreads();
    solve_t(t.Lf, t.Tf, t.Pf, tid, block_bar{}, p.solve_tc != 0);
    auto keep = [&](int i, int j, float t0, float t1) {
        if (Tout && i < nc) /* the backward keeps T, BF16 [hv][tokens][64] */
            st_pair(Tout + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * kC + j, t0, t1);
    };
    wy_scale_t<kThreads, decltype(keep), !kTf>(t.Tf, t.G, t.Bt, t.Tw, t.Tu, tid, keep);
    __syncthreads();
    if constexpr (kTf) { /* Tu's rows, 16 bytes a copy */
        for (int e = tid; e < kC * 8; e += kThreads) {
            int i = e >> 3, c = e & 7;
            if (i < nc)
                *reinterpret_cast<uint4 *>(
                    W + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * kC + 8 * c) =
                    *reinterpret_cast<const uint4 *>(t.Tu + i * kLdH64 + 8 * c);
        }
        return;
    }
    if (kLateV) { /* T is formed into Tw and Tu: its tile takes V */
        tile_rows(false, kLdH, t.Vh, nc, vrows, p.hv * kMaxD);
        cp_commit();
    }
    for (int pass = 0; pass < 2; pass++) { /* W = Tw K, U = Tu V */
        if (kLateV && pass == 1) {
            cp_wait<0>();
            __syncthreads();
        }
        wy_mul(warp >> 1, (warp & 1) * 64, pass ? t.Tu : t.Tw, pass ? t.Vh : t.Kh, pad_layout{kLdH},
               out(pass ? U : W, kMaxD));
    }
}

/* Block (chunk, value head). */
template <bool kLateV, bool kWide, bool kTf = false>
__global__ void __launch_bounds__(kThreads, kLateV ? 3 : 2)
    wy_fast_kernel(gdn_chunk_problem p, const int32_t *chunks, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *gate, const float *beta, bf16 *W, bf16 *U, bf16 *A,
                   bf16 *Tout)
{
    static_assert(!kTf || kLateV, "the T form: four tiles");
    QC_GDN_SMEM(smb);
    const wy_tiles_t<kLateV> t(smb);
    int warp = threadIdx.x >> 5;
    int64_t ci = blockIdx.x, hvi = blockIdx.y;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1], hq = hvi / (p.hv / p.h);
    tile_rows(false, kLdH, t.Kh, nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, t.Qh, nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    if (!kLateV)
        tile_rows(false, kLdH, t.Vh, nc, v + (tok0 * p.hv + hvi) * kMaxD, p.hv * kMaxD);
    cp_commit();
    wy_prepare(p, t, gate, beta, tok0, nc, hvi);
    cp_wait<0>();
    __syncthreads();
    float ckk[4][4], cqk[4][4];
    wy_kq(warp >> 1, (warp & 1) * 32, t.Kh, t.Qh, ckk, cqk, pad_layout{kLdH});
    wy_head<kLateV, kWide, kTf>(p, t, ckk, cqk, v, tok0, nc, hvi, W, U, A, Tout);
}

/* wy_fast_kernel<true, kWide> for all value heads of a q/k head (GVA: hv = grp h) in one block
 * (chunk, q/k head): K and Q are fetched once and K K^T and Q K^T formed once, kept in the
 * warps' accumulator strips, then each value head in turn takes its gates, beta and V, as
 * wy_fast_kernel does. The same products in the same order: the same bytes, with a quarter of
 * the K and Q fetches and of the K K^T and Q K^T products at grp = 4. */
template <bool kWide, bool kTf = false>
__global__ void __launch_bounds__(kThreads, 3)
    wy_gva_kernel(gdn_chunk_problem p, const int32_t *chunks, const bf16 *q, const bf16 *k,
                  const bf16 *v, const float *gate, const float *beta, bf16 *W, bf16 *U, bf16 *A,
                  bf16 *Tout)
{
    QC_GDN_SMEM(smb);
    const wy_tiles_t<true> t(smb);
    int warp = threadIdx.x >> 5;
    int64_t ci = blockIdx.x, hq = blockIdx.y, grp = p.hv / p.h;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1];
    tile_rows(false, kLdH, t.Kh, nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, t.Qh, nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    cp_commit();
    wy_prepare(p, t, gate, beta, tok0, nc, hq * grp);
    cp_wait<0>();
    __syncthreads();
    float ckk[4][4], cqk[4][4];
    wy_kq(warp >> 1, (warp & 1) * 32, t.Kh, t.Qh, ckk, cqk, pad_layout{kLdH});
    for (int64_t r = 0; r < grp; r++) {
        if (r > 0) {
            __syncthreads(); /* the last head's products are done with Tw, Tu, V, G and beta */
            wy_prepare(p, t, gate, beta, tok0, nc, hq * grp + r);
            __syncthreads();
        }
        wy_head<true, kWide, kTf>(p, t, ckk, cqk, v, tok0, nc, hq * grp + r, W, U, A, Tout);
    }
}

/* The lean serial kernels of kGdnMmaBf16Smem: one block of kW warps (4 or 8) per (16 kW value
 * columns, value head, sequence), each warp owning 16 value columns of the state, transposed (S^T,
 * [16 dv][128 dk]), in the FP32 accumulators of its mma tiles. S^T is the A operand of the products
 * with W and Q (the accumulator layout of two 8-column tiles is the A fragment of a 16-deep step),
 * and the warp's Vn^T (or dVn^T) accumulators are the A operand of the state update, so a chunk
 * step reads only the chunk's tiles from shared memory and needs no barrier between the warps past
 * the one that publishes the tiles. The shared memory holds two stages of the chunk tiles
 * (fetched by cp.async one chunk ahead), a [64][16] staging tile a warp for coalesced stores,
 * and each warp's gate vectors (every warp sums the gates itself). */

constexpr int kLdT = 24; /* BF16 row stride of a warp's [64][16] staging tile (48 B) */

/* The shared memory of the lean kernels with kW warps. Stage b: W, K [64][128], Q [64][128]
 * (kQA), X [64][kLdX] (U or dO, the block's 16 kW columns), A [64][64] (kQA), the raw gates
 * [64] (FP32). Then a staging tile and 3 x 64 floats of vectors per warp. The tiles W, K, Q
 * and A have padded rows (kLdH, kLdH64) for the mma.sync walk, or (kWg, state_lean_kernel's
 * wgmma walk) the 128-byte swizzle of the wgmma operands (swz_layout<64>), each such tile
 * 1024-byte aligned from base(). */
template <bool kQA, int kW, bool kWg = false, bool kTf = false, int kS = 2> struct lean_layout {
    static_assert(kW == 4 || kW == 8, "4 or 8 warps");
    static_assert(kS == 1 || kS == 2, "one or two stages");
    static constexpr int kCols = 16 * kW;
    static constexpr int kLdX = kCols + 8;
    static constexpr int kTileX = kC * kLdX * 2;
    static constexpr int kTiles = kQA ? 3 : 2;
    static constexpr int kTileQ = kWg ? kC * kMaxD * 2 : kTileH; /* W, K, Q */
    static constexpr int kTileA = kWg ? kC * kC * 2 : kTileH64;
    /* kWg: W, K, Q, A, X, gates (the swizzled tiles first, at multiples of 1024 bytes);
     * else W, K, Q, X, A, gates */
    static constexpr int kOffX = kTiles * kTileQ + (kWg && kQA ? kTileA : 0);
    static constexpr int kOffA = kWg ? kTiles * kTileQ : kOffX + kTileX;
    static constexpr int kOffG = kOffX + kTileX + (!kWg && kQA ? kTileA : 0);
    static constexpr int kStage = kWg ? (kOffG + kC * 4 + 1023) / 1024 * 1024 : kOffG + kC * 4;
    static constexpr int kStg = kC * kLdT * 2;
    static constexpr int kVec = (kTf ? 4 : 3) * kC * 4; /* the T form: e^G too */
    static constexpr size_t kBytes =
        kS * static_cast<size_t>(kStage) + kW * static_cast<size_t>(kStg + kVec) + (kWg ? 1024 : 0);
    /* the start of the layout in the dynamic shared memory s (kWg: aligned up to 1024 bytes) */
    static __device__ unsigned char *base(unsigned char *s)
    {
        if (!kWg)
            return s;
        return s + ((1024u - (smem_addr(s) & 1023u)) & 1023u);
    }
    static __device__ bf16 *W(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kStage);
    }
    static __device__ bf16 *K(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kStage + kTileQ);
    }
    static __device__ bf16 *Q(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kStage + 2 * kTileQ);
    }
    static __device__ bf16 *X(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kStage + kOffX);
    }
    static __device__ bf16 *A(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kStage + kOffA);
    }
    static __device__ float *graw(unsigned char *s, int b)
    {
        return reinterpret_cast<float *>(s + b * kStage + kOffG);
    }
    static __device__ bf16 *stg(unsigned char *s, int warp)
    {
        return reinterpret_cast<bf16 *>(s + kS * kStage + warp * kStg);
    }
    static __device__ float *vec(unsigned char *s, int warp)
    {
        return reinterpret_cast<float *>(s + kS * kStage + kW * kStg + warp * kVec);
    }
    /* where the fetches put rows of W, K, Q (128 columns) and of A (64) */
    static __device__ auto lay_q()
    {
        if constexpr (kWg)
            return swz_layout<64>{};
        else
            return pad_layout{kLdH};
    }
    static __device__ auto lay_a()
    {
        if constexpr (kWg)
            return swz_layout<64>{};
        else
            return pad_layout{kLdH64};
    }
};
static_assert(lean_layout<true, 4>::kStage % 16 == 0 && lean_layout<false, 4>::kStage % 16 == 0 &&
                  lean_layout<true, 8>::kStage % 16 == 0 &&
                  lean_layout<false, 8>::kStage % 16 == 0 && lean_layout<true, 4>::kStg % 16 == 0 &&
                  lean_layout<true, 4>::kTileX % 16 == 0 && lean_layout<true, 8>::kTileX % 16 == 0,
              "the lean kernels' tiles stay 16-byte aligned");
static_assert(lean_layout<true, 4>::kBytes <= 227 * 1024 &&
                  lean_layout<true, 8>::kBytes <= 227 * 1024,
              "state_lean / dstate_lean shared memory");
static_assert(lean_layout<false, 4>::kBytes + 1024 <= 228 * 1024 / 2 &&
                  lean_layout<false, 4, true>::kBytes + 1024 <= 228 * 1024 / 2,
              "state_lean_kernel without o, 4 warps: two blocks an SM");
static_assert(lean_layout<true, 4, true>::kBytes <= 227 * 1024 &&
                  lean_layout<true, 8, true>::kBytes <= 227 * 1024 &&
                  lean_layout<true, 4, true>::kStage % 1024 == 0 &&
                  lean_layout<false, 8, true>::kStage % 1024 == 0 &&
                  lean_layout<true, 8, true>::kOffX % 1024 == 0,
              "state_lean_kernel's wgmma walk: shared memory, and tiles 1024-byte aligned");
static_assert(lean_layout<false, 4, false, false, 1>::kBytes + lean_layout<true, 4>::kBytes +
                          2 * 1024 <=
                      228 * 1024 &&
                  lean_layout<false, 4, true, false, 1>::kBytes +
                          lean_layout<true, 4, true>::kBytes + 2 * 1024 <=
                      228 * 1024,
              "the state pass in one stage beside dstate_lean_kernel, 4 warps each, on one SM");
static_assert(kMaxD % 64 == 0, "the lean kernels' column blocks tile dv");

/* tile_rows for NT threads (tid their index, from 0): rows of per 16-byte copies. NT is a
 * multiple of per, so a thread keeps its column c and steps NT / per rows at a time: its
 * source offset advances by an addition (the walks issue these copies between their
 * products, with one warp a scheduler, so each instruction here is on their critical path). */
template <int NT, int per, class Lay>
__device__ __forceinline__ void lean_rows(Lay y, bf16 *t, int64_t nc, const bf16 *base,
                                          int64_t stride, int tid = threadIdx.x)
{
    static_assert(per > 0 && (per & (per - 1)) == 0 && NT % per == 0, "a fixed column a thread");
    constexpr int di = NT / per;
    const unsigned ut = static_cast<unsigned>(tid); /* unsigned: shifts, not signed division */
    const int c = static_cast<int>(ut % per);
    int i = static_cast<int>(ut / per);
    int64_t off = i * stride + c * 8;
    for (; i < kC; i += di, off += di * stride) {
        bool on = i < nc;
        cp_async16(t + y.at(i, c * 8), on ? base + off : base, on);
    }
}
template <int NT, int per>
__device__ __forceinline__ void lean_rows(int ldt, bf16 *t, int64_t nc, const bf16 *base,
                                          int64_t stride, int tid = threadIdx.x)
{
    lean_rows<NT, per>(pad_layout{ldt}, t, nc, base, stride, tid);
}

/* The A fragments (16 rows, k step kk) of a warp's [16][8 nt] FP32 accumulators, in BF16. */
template <int NK>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[NK][4], const float (&c)[2 * NK][4])
{
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        a[kk][0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* A warp's [16 value columns][64 tokens] accumulators c (row = value column, col = token) into
 * its staging tile, transposed ([token][16], BF16), then rows < nc to dst + row * stride, 32
 * bytes a row. */
__device__ __forceinline__ void lean_store_t(bf16 *stg, const float (&c)[8][4], int64_t nc,
                                             bf16 *dst, int64_t stride)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            stg[acc_col(nt, e) * kLdT + acc_row(e)] = __float2bfloat16_rn(c[nt][e]);
    __syncwarp();
    for (int e = lane; e < 2 * kC; e += 32) {
        int r = e >> 1, h = e & 1;
        if (r < nc)
            *reinterpret_cast<uint4 *>(dst + r * stride + 8 * h) =
                *reinterpret_cast<const uint4 *>(stg + r * kLdT + 8 * h);
    }
    __syncwarp();
}

/* A warp's S^T ([16 value columns][128 dk], FP32 accumulators) into a BF16 [128][128] state
 * dst (row dk, this warp's 16 columns), by two halves of 64 rows through the staging tile. */
__device__ __forceinline__ void lean_store_state(bf16 *stg, const float (&s)[16][4], bf16 *dst)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                stg[acc_col(nt, e) * kLdT + acc_row(e)] = __float2bfloat16_rn(s[8 * hh + nt][e]);
        __syncwarp();
        for (int e = lane; e < 2 * kC; e += 32) {
            int r = e >> 1, h = e & 1;
            *reinterpret_cast<uint4 *>(dst + (64 * hh + r) * kMaxD + 8 * h) =
                *reinterpret_cast<const uint4 *>(stg + r * kLdT + 8 * h);
        }
        __syncwarp();
    }
}

/* Every warp's gate vectors of the chunk from the raw gates: v[0 .. 64) F = e^{G_l - G},
 * v[64 .. 128) scale e^G, v[128] e^{G_l}, and (eg) v[192 .. 256) e^G. */
__device__ __forceinline__ void lean_gates(const float *graw, float *v, float scale,
                                           bool eg = false)
{
    int lane = threadIdx.x & 31;
    float x0 = graw[lane], x1 = graw[lane + 32];
    warp_cumsum64(x0, x1);
    float gl = __shfl_sync(0xffffffffu, x1, 31);
    v[lane] = expf(__fsub_rn(gl, x0));
    v[lane + 32] = expf(__fsub_rn(gl, x1));
    v[kC + lane] = __fmul_rn(scale, expf(x0));
    v[kC + lane + 32] = __fmul_rn(scale, expf(x1));
    if (lane == 0)
        v[2 * kC] = expf(gl);
    if (eg) { /* the T form's e^G (3 kC floats from v) */
        v[3 * kC + lane] = expf(x0);
        v[3 * kC + lane + 32] = expf(x1);
    }
    __syncwarp();
}

/* c += A B^T for a warp's [16][64] strip: A its [16][16 KS] BF16 fragments (k step kk in
 * a[kk]), B [64][ld] in shared memory (row n, 16 KS k). */
template <int KS>
__device__ __forceinline__ void strip_nk(float (&c)[8][4], const uint32_t (&a)[KS][4],
                                         const bf16 *B, int ld)
{
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            frag_b_nk(b, B, ld, 16 * np, 16 * kk);
            mma2(c[2 * np], c[2 * np + 1], a[kk], b);
        }
}

/* The walk's element-wise steps on a warp's [16 value columns][64 tokens] strip vt (S^T W^T):
 * Vn^T = U^T - vt (in place; U [64][kLdX], the warp's columns from cw), then Vn^T and
 * F . Vn^T as A fragments (va, va2). */
template <int kLdX>
__device__ __forceinline__ void lean_vn(float (&vt)[8][4], uint32_t (&va)[4][4],
                                        uint32_t (&va2)[4][4], const bf16 *Uh, const float *vec,
                                        int cw)
{
    float v2[8][4]; /* F . Vn^T */
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = acc_col(nt, e);
            float u = __bfloat162float(Uh[i * kLdX + cw + acc_row(e)]);
            vt[nt][e] = __fsub_rn(u, vt[nt][e]);
            v2[nt][e] = __fmul_rn(vt[nt][e], vec[i]);
        }
    acc_to_a<4>(va, vt);
    acc_to_a<4>(va2, v2);
}
/* c[.][col] *= f[col] (the strip's token columns); every element *= a. */
__device__ __forceinline__ void scale_cols(float (&c)[8][4], const float *f)
{
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            c[nt][e] = __fmul_rn(c[nt][e], f[acc_col(nt, e)]);
}
template <int N> __device__ __forceinline__ void scale_all(float (&c)[N][4], float a)
{
#pragma unroll
    for (int nt = 0; nt < N; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            c[nt][e] = __fmul_rn(c[nt][e], a);
}

/* lean_chunk's steps after Vn^T (va) and F . Vn^T (va2): o^T (kOut) and the state update. */
template <bool kOut>
__device__ __forceinline__ void
lean_tail(float (&s)[16][4], const uint32_t (&sa)[8][4], const uint32_t (&va)[4][4],
          const uint32_t (&va2)[4][4], const bf16 *Kh, const bf16 *Qh, const bf16 *Ah,
          const float *vec, bf16 *stg, int64_t nc, bf16 *o, int64_t ostride)
{
    if (kOut) { /* o^T = (S^T Q^T) . scale e^G + Vn^T A^T */
        float ot[8][4] = {};
        strip_nk<8>(ot, sa, Qh, kLdH);
        scale_cols(ot, vec + kC);
        strip_nk<4>(ot, va, Ah, kLdH64);
        lean_store_t(stg, ot, nc, o, ostride);
    }
    /* S^T = e^{G_l} S^T + (F . Vn^T) K */
    scale_all(s, vec[2 * kC]);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int np = 0; np < 8; np++) {
            uint32_t bk[4];
            frag_b_kn(bk, Kh, kLdH, 16 * np, 16 * kk);
            mma2(s[2 * np], s[2 * np + 1], va2[kk], bk);
        }
}

/* One chunk of a lean walk by one warp (cw: its first column among the block's), from the
 * chunk's tiles W, K [64][kLdH], Q [64][kLdH] and A [64][kLdH64] (kOut), X (U, [64][kLdX], the
 * block's columns) and the warp's gate vectors: Vn^T = U^T - S^T W^T (into vn, over U, when vn
 * is not null), o^T = (S^T Q^T) . scale e^G + Vn^T A^T (kOut: rows < nc into o), S^T = e^{G_l}
 * S^T + (Vn^T . F) K. sa is S^T in BF16, the A operand. */
template <bool kOut, int kLdX>
__device__ __forceinline__ void
lean_chunk(float (&s)[16][4], const uint32_t (&sa)[8][4], const bf16 *Wh, const bf16 *Kh,
           const bf16 *Qh, const bf16 *Uh, const bf16 *Ah, const float *vec, bf16 *stg, int cw,
           int64_t nc, bf16 *o, int64_t ostride, bf16 *vn, int64_t vnstride)
{
    float vt[8][4] = {}; /* S^T W^T, then Vn^T: value column acc_row(e), token acc_col */
    strip_nk<8>(vt, sa, Wh, kLdH);
    uint32_t va[4][4], va2[4][4];
    lean_vn<kLdX>(vt, va, va2, Uh, vec, cw);
    if (!kOut && vn)
        lean_store_t(stg, vt, nc, vn, vnstride);
    lean_tail<kOut>(s, sa, va, va2, Kh, Qh, Ah, vec, stg, nc, o, ostride);
}

/* The T form's element-wise steps (lean_chunk_t): X^T = V^T - xt . e^G (xt = S^T K^T; V
 * [64][kLdX], the warp's columns from cw) as A fragments; then from Vn^T, Vn^T and F . Vn^T as
 * A fragments. */
template <int kLdX>
__device__ __forceinline__ void lean_x(const float (&xt)[8][4], uint32_t (&xa)[4][4],
                                       const bf16 *Vh, const float *vec, int cw)
{
    float x[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = acc_col(nt, e);
            float v = __bfloat162float(Vh[i * kLdX + cw + acc_row(e)]);
            x[nt][e] = __fsub_rn(v, __fmul_rn(xt[nt][e], vec[3 * kC + i]));
        }
    acc_to_a<4>(xa, x);
}
__device__ __forceinline__ void lean_vn_t(const float (&vt)[8][4], uint32_t (&va)[4][4],
                                          uint32_t (&va2)[4][4], const float *vec)
{
    float v2[8][4]; /* F . Vn^T */
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            v2[nt][e] = __fmul_rn(vt[nt][e], vec[acc_col(nt, e)]);
    acc_to_a<4>(va, vt);
    acc_to_a<4>(va2, v2);
}

/* The T form of lean_chunk's forward (gdn_tform): from Tu = T diag(beta) [64][kLdH64] and V (in
 * place of U, the block's columns) instead of W and U, Vn = U - W S = Tu (V - e^G . (K S)), since
 * U = Tu V and W = Tu diag(e^G) K: X^T = V^T - (S^T K^T) . e^G rounded to BF16, then
 * Vn^T = X^T Tu^T; o and the state update as lean_chunk's. One more product in the chain
 * (16 x 64 x 64 a warp), and W and U never formed. */
template <int kLdX>
__device__ __forceinline__ void
lean_chunk_t(float (&s)[16][4], const uint32_t (&sa)[8][4], const bf16 *Tuh, const bf16 *Kh,
             const bf16 *Qh, const bf16 *Vh, const bf16 *Ah, const float *vec, bf16 *stg, int cw,
             int64_t nc, bf16 *o, int64_t ostride)
{
    float xt[8][4] = {}; /* S^T K^T, then X^T */
    strip_nk<8>(xt, sa, Kh, kLdH);
    uint32_t xa[4][4];
    lean_x<kLdX>(xt, xa, Vh, vec, cw);
    float vt[8][4] = {}; /* Vn^T */
    strip_nk<4>(vt, xa, Tuh, kLdH64);
    uint32_t va[4][4], va2[4][4];
    lean_vn_t(vt, va, va2, vec);
    lean_tail<true>(s, sa, va, va2, Kh, Qh, Ah, vec, stg, nc, o, ostride);
}

/* The wgmma form of lean_chunk (kGdnMmaBf16Wg): the four warps of the walk are one
 * warpgroup, so S^T W^T and S^T Q^T are m64n64k16 products with S^T (BF16, registers) as A
 * and W, Q (swizzled, K-major) from shared memory, Vn^T A^T the same with A, and the state
 * update an m64n128k16 product with K as B through the transpose bit; the accumulators have
 * the per-warp layout of the mma.sync strips, so the element-wise steps are lean_chunk's.
 * Only the accumulation order inside the tensor-core products differs. */
#if QC_WGMMA
/* d[8][4] (m64n64, FP32) += A (registers) B (descriptor, K-major), bf16; scale_d 0: d = A B. */
__device__ __forceinline__ void wg_rs_n64k(float (*d)[4], const uint32_t (&a)[4], uint64_t db,
                                           int scale_d)
{
#ifdef QC_EMU
    emu::wg_rs_k<__nv_bfloat16, 64>(d, a, db, scale_d);
#else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
                   "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
                   "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
                   "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
                   "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                   "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
#endif
}
/* The descriptor of k step kk (16 columns) of a swizzled [64][128] tile, K-major. */
__device__ __forceinline__ uint64_t wg_kdesc(const bf16 *t, int kk)
{
    return fl::wg::desc(t + (kk >> 2) * (64 * 64) + (kk & 3) * 16, 16, 1024);
}
#endif

#if QC_WGMMA
/* wg_chunk's steps once Vn^T (va), F . Vn^T (va2) and (kOut) o^T's first part (ot, scaled) are
 * formed: o^T += Vn^T A^T, S^T = e^{G_l} S^T + (F . Vn^T) K, o stored. */
template <bool kOut>
__device__ __forceinline__ void wg_tail(float (&s)[16][4], uint32_t (&va)[4][4],
                                        uint32_t (&va2)[4][4], float (&ot)[8][4], const bf16 *Kh,
                                        const bf16 *Ah, const float *vec, bf16 *stg, int64_t nc,
                                        bf16 *o, int64_t ostride)
{
    namespace wg = fl::wg;
    scale_all(s, vec[2 * kC]);
    /* the accumulators and A fragments are written before the fence */
    wg::keep<16>(s);
    wg::keep<4>(va2);
    if (kOut) {
        wg::keep<8>(ot);
        wg::keep<4>(va);
    }
    wg::wg_fence();
    if (kOut) { /* o^T += Vn^T A^T: A [64 i][64 j] is B[k = j][n = i], K-major, one panel */
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_rs_n64k(ot, va[kk], wg::desc(Ah + kk * 16, 16, 1024), 1);
    }
    /* S^T += (F . Vn^T) K: K [64 tokens][128 dk] is B[k][n], n contiguous (transposed) */
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wg::mma_rs<bf16, 128>(s, va2[kk], wg::desc(Kh + kk * 16 * 64, 64 * 128, 1024), 1);
    wg::wg_commit();
    wg::wg_wait<0>();
    wg::keep<16>(s);
    if (kOut) {
        wg::keep<8>(ot);
        lean_store_t(stg, ot, nc, o, ostride);
    }
}
#endif

template <bool kOut, int kLdX>
__device__ __forceinline__ void
wg_chunk(float (&s)[16][4], const uint32_t (&sa)[8][4], const bf16 *Wh, const bf16 *Kh,
         const bf16 *Qh, const bf16 *Uh, const bf16 *Ah, const float *vec, bf16 *stg, int cw,
         int64_t nc, bf16 *o, int64_t ostride, bf16 *vn, int64_t vnstride)
{
#if QC_WGMMA
    namespace wg = fl::wg;
    /* S^T W^T, then Vn^T; o^T (no initial values: the first k step has scale-d 0) */
    float vt[8][4], ot[8][4];
    wg::keep<8>(const_cast<uint32_t(*)[4]>(sa)); /* S^T's fragments are written before the fence */
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wg_rs_n64k(vt, sa[kk], wg_kdesc(Wh, kk), kk > 0);
    wg::wg_commit();
    if (kOut) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
            wg_rs_n64k(ot, sa[kk], wg_kdesc(Qh, kk), kk > 0);
        wg::wg_commit();
        wg::wg_wait<1>(); /* S^T W^T is done; S^T Q^T may still run */
    } else {
        wg::wg_wait<0>();
    }
    wg::keep<8>(vt);
    uint32_t va[4][4], va2[4][4];
    lean_vn<kLdX>(vt, va, va2, Uh, vec, cw);
    if (!kOut && vn)
        lean_store_t(stg, vt, nc, vn, vnstride);
    if (kOut) {
        wg::wg_wait<0>();
        wg::keep<8>(ot);
        scale_cols(ot, vec + kC);
    }
    wg_tail<kOut>(s, va, va2, ot, Kh, Ah, vec, stg, nc, o, ostride);
#else
    (void)s, (void)sa, (void)Wh, (void)Kh, (void)Qh, (void)Uh, (void)Ah, (void)vec, (void)stg;
    (void)cw, (void)nc, (void)o, (void)ostride, (void)vn, (void)vnstride;
    __trap();
#endif
}

/* The T form of wg_chunk (gdn_tform, lean_chunk_t's steps): X^T = V^T - (S^T K^T) . e^G while
 * S^T Q^T computes, then Vn^T = X^T Tu^T (Tu [64 i][64 j] is B[k = j][n = i], K-major, swizzled
 * as A's tile), and wg_chunk's tail. */
template <int kLdX>
__device__ __forceinline__ void wg_chunk_t(float (&s)[16][4], const uint32_t (&sa)[8][4],
                                           const bf16 *Tuh, const bf16 *Kh, const bf16 *Qh,
                                           const bf16 *Vh, const bf16 *Ah, const float *vec,
                                           bf16 *stg, int cw, int64_t nc, bf16 *o, int64_t ostride)
{
#if QC_WGMMA
    namespace wg = fl::wg;
    float xt[8][4], ot[8][4], vt[8][4];
    wg::keep<8>(const_cast<uint32_t(*)[4]>(sa));
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wg_rs_n64k(xt, sa[kk], wg_kdesc(Kh, kk), kk > 0);
    wg::wg_commit();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wg_rs_n64k(ot, sa[kk], wg_kdesc(Qh, kk), kk > 0);
    wg::wg_commit();
    wg::wg_wait<1>(); /* S^T K^T is done; S^T Q^T may still run */
    wg::keep<8>(xt);
    uint32_t xa[4][4];
    lean_x<kLdX>(xt, xa, Vh, vec, cw);
    wg::keep<4>(xa);
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wg_rs_n64k(vt, xa[kk], wg::desc(Tuh + kk * 16, 16, 1024), kk > 0);
    wg::wg_commit();
    wg::wg_wait<0>();
    wg::keep<8>(vt);
    wg::keep<8>(ot);
    uint32_t va[4][4], va2[4][4];
    lean_vn_t(vt, va, va2, vec);
    scale_cols(ot, vec + kC);
    wg_tail<true>(s, va, va2, ot, Kh, Ah, vec, stg, nc, o, ostride);
#else
    (void)s, (void)sa, (void)Tuh, (void)Kh, (void)Qh, (void)Vh, (void)Ah, (void)vec, (void)stg;
    (void)cw, (void)nc, (void)o, (void)ostride;
    __trap();
#endif
}

/* The forward walk (kOut: o, from Q and A too) or the backward's state pass (!kOut: the BF16
 * state before each chunk into hs, Vn over U through vn), the lean way, over the chunks of
 * p's window (walk_lo, walk_hi) of each sequence. Per chunk and warp:
 * Vn^T = U^T - S^T W^T, o^T = (S^T Q^T) . scale e^G + Vn^T A^T, S^T = e^{G_l} S^T + (Vn^T . F) K,
 * every product rounded to BF16 as an operand, FP32 accumulation. kWg (sm_90a): the products
 * on wgmma (wg_chunk), each group of four warps one warpgroup of 64 columns, reading W, K, Q
 * and A from swizzled tiles once a warpgroup instead of once a warp; the same steps. kTf (the
 * forward only): the T form, lean_chunk_t or wg_chunk_t, with Tu (BF16 [hv][tokens][64]) passed
 * as W and the values v as U. kS (the state pass only) 1: one stage of the chunk tiles, chunk c
 * fetched only once every warp is done with chunk c - 1, so that a block of 4 warps fits beside
 * a dstate_lean_kernel block on one SM (gdn_bwd_overlap); the same products, so the same bytes. */
template <bool kOut, int kW, bool kWg = false, bool kTf = false, int kS = 2>
__global__ void __launch_bounds__(32 * kW, kOut || kW == 8 ? 1 : 2)
    state_lean_kernel(gdn_chunk_problem p, const bf16 *q, const bf16 *k, const float *gate,
                      const bf16 *W, const bf16 *U, const bf16 *A, const float *h0, bf16 *o,
                      float *ht, const int32_t *chunk0, int64_t nchunks, bf16 *hs, bf16 *vn)
{
    static_assert(!kTf || kOut, "the T form: the forward");
    static_assert(kS == 2 || !kOut, "one stage: the state pass");
    typedef lean_layout<kOut, kW, kWg, kTf, kS> L;
    constexpr int NT = 32 * kW;
    QC_GDN_SMEM(smlean);
    unsigned char *smb = L::base(smlean);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * L::kCols, nch = (len + kC - 1) / kC;
    int cw = 16 * warp; /* the warp's columns in the block's */
    size_t sbase = (static_cast<size_t>(n) * p.hv + hvi) * kMaxD * p.dv;
    bf16 *stg = L::stg(smb, warp);
    float *vec = L::vec(smb, warp);
    auto fetch = [&](int64_t c, int b) {
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        if (kTf) /* Tu in W's tile */
            lean_rows<NT, 8>(L::lay_a(), L::W(smb, b), nc, W + row0 * kC, kC);
        else
            lean_rows<NT, 16>(L::lay_q(), L::W(smb, b), nc, W + row0 * kMaxD, kMaxD);
        lean_rows<NT, 16>(L::lay_q(), L::K(smb, b), nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
        if (kOut) {
            lean_rows<NT, 16>(L::lay_q(), L::Q(smb, b), nc, q + (tok0 * p.h + hq) * kMaxD,
                              p.h * kMaxD);
            lean_rows<NT, 8>(L::lay_a(), L::A(smb, b), nc, A + row0 * kC, kC);
        }
        if (kTf) /* V, the block's columns */
            lean_rows<NT, L::kCols / 8>(L::kLdX, L::X(smb, b), nc,
                                        U + (tok0 * p.hv + hvi) * p.dv + cv, p.hv * p.dv);
        else
            lean_rows<NT, L::kCols / 8>(L::kLdX, L::X(smb, b), nc, U + row0 * p.dv + cv, p.dv);
        if (warp == 0)
            for (int i = lane; i < kC; i += 32)
                cp_async4(L::graw(smb, b) + i, gate + (i < nc ? (tok0 + i) * p.hv + hvi : 0),
                          i < nc);
    };
    /* s[nt][e]: S^T at value column cv + cw + acc_row(e), dk acc_col(nt, e) */
    float s[16][4];
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[nt][e] =
                h0 ? h0[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)]
                   : 0.0f;
    /* the chunks of the window (gdn_chunk_problem::walk_lo, walk_hi) */
    const int64_t lo = p.walk_lo < nch ? p.walk_lo : nch, hi = p.walk_hi < nch ? p.walk_hi : nch;
    if (lo < hi)
        fetch(lo, 0);
    cp_commit();
    for (int64_t c = lo; c < hi; c++) {
        int b = kS == 2 ? static_cast<int>((c - lo) & 1) : 0;
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        __syncthreads(); /* every warp is done with stage b ^ 1 (one stage: with stage 0) */
        if (c + 1 < hi && kS == 2)
            fetch(c + 1, b ^ 1);
        else if (c > lo && kS == 1) /* one stage: chunk c only now */
            fetch(c, 0);
        cp_commit();
        uint32_t sa[8][4]; /* S^T in BF16, the A operand */
        acc_to_a<8>(sa, s);
        if (!kOut && hs) /* the backward: the BF16 state before chunk c */
            lean_store_state(
                stg, s,
                hs + (static_cast<size_t>(hvi) * nchunks + chunk0[n] + c) * kMaxD * kMaxD + cv +
                    cw);
        cp_wait<kS - 1>();
        if constexpr (kWg) /* this thread's copies -> the wgmma of every warp (async proxy) */
            fence_async();
        __syncthreads(); /* stage b is visible */
        lean_gates(L::graw(smb, b), vec, p.scale, kTf);
        bf16 *od = kOut ? o + (static_cast<size_t>(tok0) * p.hv + hvi) * p.dv + cv + cw : nullptr;
        bf16 *vd = !kOut && vn ? vn + row0 * p.dv + cv + cw : nullptr;
        if constexpr (kTf && kWg)
            wg_chunk_t<L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::X(smb, b),
                                L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv);
        else if constexpr (kTf)
            lean_chunk_t<L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::X(smb, b),
                                  L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv);
        else if constexpr (kWg) /* each warpgroup: its 64 of the block's columns */
            wg_chunk<kOut, L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::X(smb, b),
                                    L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv, vd, p.dv);
        else
            lean_chunk<kOut, L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::X(smb, b),
                                      L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv, vd, p.dv);
    }
    cp_wait<0>();
    if (ht)
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                ht[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)] =
                    s[nt][e];
}

/* The wgmma form of dstate_lean_kernel's products (kWg; the four warps of a group one
 * warpgroup, accumulators and register operands in the mma.sync strips' layout, so the steps
 * between the products are the same): dVn^T = (dS'^T K^T) . F + dO^T A, with dO^T (oa) read
 * from shared memory as the A operand; K [64 tokens][128 dk] and A [64][64] swizzled. */
template <int kLdX>
__device__ __forceinline__ void wg_dvn(float (&dt)[8][4], const uint32_t (&da)[8][4],
                                       uint32_t (&oa)[4][4], const bf16 *Kh, const bf16 *dOh,
                                       const bf16 *Ah, const float *vec, int cw)
{
#if QC_WGMMA
    namespace wg = fl::wg;
    wg::keep<8>(const_cast<uint32_t(*)[4]>(da));
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) /* K is B[k = dk][n = token], K-major */
        wg_rs_n64k(dt, da[kk], wg_kdesc(Kh, kk), kk > 0);
    wg::wg_commit();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        frag_a_km(oa[kk], dOh, kLdX, cw, 16 * kk);
    wg::wg_wait<0>();
    wg::keep<8>(dt);
    scale_cols(dt, vec);
    wg::keep<8>(dt);
    wg::keep<4>(oa);
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) /* A [64 j][64 i] is B[k = j][n = i], n contiguous */
        wg::mma_rs<bf16, 64>(dt, oa[kk], wg::desc(Ah + kk * 16 * 64, 64 * 128, 1024), 1);
    wg::wg_commit();
    wg::wg_wait<0>();
    wg::keep<8>(dt);
#else
    (void)dt, (void)da, (void)oa, (void)Kh, (void)dOh, (void)Ah, (void)vec, (void)cw;
    __trap();
#endif
}
/* d += (scale e^G . dO^T) Q - dVn^T W, k step by k step in mma.sync's order (Q, then W). */
__device__ __forceinline__ void wg_dstate_update(float (&d)[16][4], uint32_t (&oa)[4][4],
                                                 uint32_t (&na)[4][4], const bf16 *Qh,
                                                 const bf16 *Wh)
{
#if QC_WGMMA
    namespace wg = fl::wg;
    wg::keep<16>(d);
    wg::keep<4>(oa);
    wg::keep<4>(na);
    wg::wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { /* Q, W [64 tokens][128 dk] are B[k][n], n contiguous */
        wg::mma_rs<bf16, 128>(d, oa[kk], wg::desc(Qh + kk * 16 * 64, 64 * 128, 1024), 1);
        wg::mma_rs<bf16, 128>(d, na[kk], wg::desc(Wh + kk * 16 * 64, 64 * 128, 1024), 1);
    }
    wg::wg_commit();
    wg::wg_wait<0>();
    wg::keep<16>(d);
#else
    (void)d, (void)oa, (void)na, (void)Qh, (void)Wh;
    __trap();
#endif
}

/* The backward's reverse walk, the lean way: dS^T ([16 value columns][128 dk] a warp) in the
 * accumulators. Per chunk, from the last: dS' (BF16) into dhs, dVn^T = (dS'^T K^T) . F + dO^T A
 * (BF16 into dVn), dS^T = e^{G_l} dS'^T + (dO^T . scale e^G) Q - dVn^T W; the last dS is dh0.
 * Every product rounded to BF16 as an operand, FP32 accumulation. kWg (sm_90a): the products
 * on wgmma (wg_dvn, wg_dstate_update), as in state_lean_kernel. */
template <int kW, bool kWg = false>
__global__ void __launch_bounds__(32 * kW, 1)
    dstate_lean_kernel(gdn_chunk_problem p, const int32_t *chunk0, int64_t nchunks, const bf16 *q,
                       const bf16 *k, const bf16 *dout, const float *gate, const bf16 *W,
                       const bf16 *A, const float *dht, bf16 *dhs, bf16 *dVn, float *dh0)
{
    typedef lean_layout<true, kW, kWg> L;
    constexpr int NT = 32 * kW;
    QC_GDN_SMEM(smlean);
    unsigned char *smb = L::base(smlean);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * L::kCols, nch = (len + kC - 1) / kC;
    int cw = 16 * warp;
    size_t sbase = (static_cast<size_t>(n) * p.hv + hvi) * kMaxD * p.dv;
    bf16 *stg = L::stg(smb, warp);
    float *vec = L::vec(smb, warp);
    auto fetch = [&](int64_t c, int b) {
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        lean_rows<NT, 16>(L::lay_q(), L::W(smb, b), nc, W + row0 * kMaxD, kMaxD);
        lean_rows<NT, 16>(L::lay_q(), L::K(smb, b), nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
        lean_rows<NT, 16>(L::lay_q(), L::Q(smb, b), nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
        lean_rows<NT, L::kCols / 8>(L::kLdX, L::X(smb, b), nc,
                                    dout + (tok0 * p.hv + hvi) * p.dv + cv, p.hv * p.dv);
        lean_rows<NT, 8>(L::lay_a(), L::A(smb, b), nc, A + row0 * kC, kC);
        if (warp == 0)
            for (int i = lane; i < kC; i += 32)
                cp_async4(L::graw(smb, b) + i, gate + (i < nc ? (tok0 + i) * p.hv + hvi : 0),
                          i < nc);
    };
    /* d[nt][e]: dS^T at value column cv + cw + acc_row(e), dk acc_col(nt, e) */
    float d[16][4];
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d[nt][e] =
                dht ? dht[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)]
                    : 0.0f;
    if (nch > 0)
        fetch(nch - 1, 0);
    cp_commit();
    for (int64_t it = 0; it < nch; it++) {
        int64_t c = nch - 1 - it;
        int b = static_cast<int>(it & 1);
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        __syncthreads();
        if (c > 0)
            fetch(c - 1, b ^ 1);
        cp_commit();
        uint32_t da[8][4]; /* dS'^T in BF16, the A operand */
        acc_to_a<8>(da, d);
        lean_store_state(
            stg, d,
            dhs + (static_cast<size_t>(hvi) * nchunks + chunk0[n] + c) * kMaxD * kMaxD + cv + cw);
        cp_wait<1>();
        if constexpr (kWg) /* this thread's copies -> the wgmma of every warp (async proxy) */
            fence_async();
        __syncthreads();
        lean_gates(L::graw(smb, b), vec, p.scale);
        const bf16 *Wh = L::W(smb, b), *Kh = L::K(smb, b), *Qh = L::Q(smb, b);
        const bf16 *dOh = L::X(smb, b), *Ah = L::A(smb, b);
        float dt[8][4] = {}; /* dVn^T: value column acc_row(e), token acc_col */
        uint32_t oa[4][4];   /* dO^T (then scale e^G . dO^T), the A operand */
        if constexpr (kWg)
            wg_dvn<L::kLdX>(dt, da, oa, Kh, dOh, Ah, vec, cw);
        else {
            strip_nk<8>(dt, da, Kh, kLdH);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dt[nt][e] = __fmul_rn(dt[nt][e], vec[acc_col(nt, e)]);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                frag_a_km(oa[kk], dOh, L::kLdX, cw, 16 * kk);
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t ba[4];
                    frag_b_kn(ba, Ah, kLdH64, 16 * np, 16 * kk);
                    mma2(dt[2 * np], dt[2 * np + 1], oa[kk], ba);
                }
            }
        }
        lean_store_t(stg, dt, nc, dVn + row0 * p.dv + cv + cw, p.dv);
        uint32_t na[4][4]; /* -dVn^T, the A operand */
        {
            float ndt[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    ndt[nt][e] = -dt[nt][e];
            acc_to_a<4>(na, ndt);
        }
        int t2 = 2 * (lane & 3);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int r = 0; r < 4; r++) { /* registers 2, 3: tokens + 8 */
                float es0 = vec[kC + 16 * kk + t2 + (r >= 2 ? 8 : 0)];
                float es1 = vec[kC + 16 * kk + t2 + 1 + (r >= 2 ? 8 : 0)];
                __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162 *>(&oa[kk][r]);
                float2 f = __bfloat1622float2(h);
                oa[kk][r] = pack_bf16(__fmul_rn(f.x, es0), __fmul_rn(f.y, es1));
            }
        float al = vec[2 * kC];
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                d[nt][e] = __fmul_rn(d[nt][e], al);
        if constexpr (kWg)
            wg_dstate_update(d, oa, na, Qh, Wh);
        else
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int np = 0; np < 8; np++) {
                    uint32_t bq[4], bw[4];
                    frag_b_kn(bq, Qh, kLdH, 16 * np, 16 * kk);
                    frag_b_kn(bw, Wh, kLdH, 16 * np, 16 * kk);
                    mma2(d[2 * np], d[2 * np + 1], oa[kk], bq);
                    mma2(d[2 * np], d[2 * np + 1], na[kk], bw);
                }
    }
    cp_wait<0>();
    if (dh0)
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dh0[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)] =
                    d[nt][e];
}

/* ---------------------------------------------------------------- the BF16-staged backward */
/* kGdnMmaBf16Smem (dk = dv = 128, BF16 arrays): the backward of docs/gdn.md on BF16 tiles in
 * shared memory read by ldmatrix, BF16 workspace and BF16 states.
 *   wy_fast_kernel as in the forward, keeping T too (BF16 [hv][tokens][64]);
 *   state_lean_kernel without o: the BF16 state before each chunk into hs, Vn over U;
 *   dstate_lean_kernel, one block per (16 kW value columns, value head, sequence), serial
 *     over the chunks in reverse, each warp's 16 columns of the state gradient in its FP32
 *     mma accumulators, the tiles of the previous chunk fetched by cp.async while the current
 *     one is computed: the BF16 dS' into dhs, dVn = diag(F) (K dS') + A^T dO into the
 *     workspace (BF16), dS = e^{G_last} dS' + Q^T (scale e^G . dO) - W^T dVn; the last dS
 *     is dh0;
 *   grad_fast_kernel, one block per (chunk, value head): every tile of the chunk (K, Q, V,
 *     dO, Vn, dVn, A, T, S, dS') by cp.async, then the matmuls of step 3 with the row and
 *     column sums spread over the block and dg as a warp scan. T and dVn come from the
 *     workspace rather than being computed again.
 * Workspace (BF16, inside the FP32 plan.ws): W, U (then Vn) [hv][tokens][128], A, T
 * [hv][tokens][64], dVn [hv][tokens][128]; hs and dhs hold BF16 [hv][nchunks][128][128]. */

/* The workspace of the BF16-staged backward, in BF16 elements per (value head, token). */
constexpr int64_t kWsBwdFast = 2 * kMaxD + 2 * kC + kMaxD;

constexpr int kTileS = kMaxD * kLdH * 2; /* bytes of a BF16 [128][kLdH] state tile */
/* grad_fast_kernel's vectors (floats): G, Bt, Ex, F [64]; rv, rq, rk, ry [2][64]; gk [64];
 * rowL, rowM, colM, colN, dG [64]; red [8] */
constexpr int kGradFastVec = 4 * kC + 4 * 2 * kC + kC + 5 * kC + 16;
constexpr size_t kGradFastSmem = 7 * static_cast<size_t>(kTileH) + 2 * static_cast<size_t>(kTileS) +
                                 2 * static_cast<size_t>(kTileH64) + kGradFastVec * sizeof(float);
static_assert(3 * kTileF <= 2 * kTileS, "dA, dT and Lg (FP32) fit in the state tiles");
static_assert(4 * kTileH64 <= 4 * kTileH, "dT, P, dAs and Bl (BF16) fit in V, dO, Vn, dVn");
static_assert(kGradFastSmem <= 227 * 1024, "grad_fast_kernel's shared memory");
static_assert(kThreads == 4 * kC, "grad_fast_kernel's row sums: a quad of threads a row");

/* The shared memory of grad_fast_kernel: K, Q, V, dO, Vn, dVn [64][kLdH]; S, dS' [128][kLdH];
 * dW [64][kLdH]; A, T [64][kLdH64] (all BF16); vectors. After the sums over the value
 * columns, S and dS' hold dA, dT (then dL) and Lg in FP32 [64][kLdC], and after dv, dA and dT,
 * V .. dVn hold dT, P, dAs and Bl + Bl^T in BF16 [64][kLdH64]. */
struct grad_fast_smem {
    bf16 *Kh, *Qh, *Vh, *dOh, *Vnh, *dVh, *Sh, *dSh, *dWh, *Ah, *Th;
    float *dAf, *dTf, *Lgf;
    bf16 *dTh, *Ph, *dAsh, *Blh;
    float *G, *Bt, *Ex, *F, *rv, *rq, *rk, *ry, *gk, *rowL, *rowM, *colM, *colN, *dG, *red;
    __device__ grad_fast_smem(unsigned char *s)
    {
        auto h = [&](size_t off) { return reinterpret_cast<bf16 *>(s + off); };
        Kh = h(0);
        Qh = h(kTileH);
        Vh = h(2 * kTileH);
        dOh = h(3 * kTileH);
        Vnh = h(4 * kTileH);
        dVh = h(5 * kTileH);
        Sh = h(6 * kTileH);
        dSh = h(6 * kTileH + kTileS);
        dWh = h(6 * kTileH + 2 * kTileS);
        Ah = h(7 * kTileH + 2 * kTileS);
        Th = h(7 * kTileH + 2 * kTileS + kTileH64);
        dAf = reinterpret_cast<float *>(Sh);
        dTf = dAf + kC * kLdC;
        Lgf = dTf + kC * kLdC;
        dTh = Vh;
        Ph = h(2 * kTileH + kTileH64);
        dAsh = h(2 * kTileH + 2 * kTileH64);
        Blh = h(2 * kTileH + 3 * kTileH64);
        G = reinterpret_cast<float *>(s + 7 * kTileH + 2 * kTileS + 2 * kTileH64);
        Bt = G + kC;
        Ex = Bt + kC;
        F = Ex + kC;
        rv = F + kC; /* [2][64]: per half of the warps */
        rq = rv + 2 * kC;
        rk = rq + 2 * kC;
        ry = rk + 2 * kC;
        gk = ry + 2 * kC;
        rowL = gk + kC;
        rowM = rowL + kC;
        colM = rowM + kC;
        colN = colM + kC;
        dG = colN + kC;
        red = dG + kC; /* [8] */
    }
};

/* The row sums of a [64][128] accumulator strip (rows 16 mt, columns n0 .. n0 + 64 of this
 * warp) times the BF16 tile X [64][kLdH], reduced over the quad, into out[half * 64 + row]. */
__device__ __forceinline__ void strip_rowdot_h(const float (&c)[8][4], const bf16 *X, float *out)
{
    int warp = threadIdx.x >> 5, mt = warp >> 1, n0 = (warp & 1) * 64;
    float r[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
            float2 x =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(X + i * kLdH + d));
            r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e], x.x));
            r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e + 1], x.y));
        }
    r[0] = quad_sum(r[0]);
    r[1] = quad_sum(r[1]);
    if ((threadIdx.x & 3) == 0) {
        out[(warp & 1) * kC + 16 * mt + acc_row(0)] = r[0];
        out[(warp & 1) * kC + 16 * mt + acc_row(2)] = r[1];
    }
}

__global__ void __launch_bounds__(kThreads)
    grad_fast_kernel(gdn_chunk_problem p, const int32_t *chunks, int64_t nchunks, const bf16 *q,
                     const bf16 *k, const bf16 *v, const bf16 *dout, const float *gate,
                     const float *beta, const bf16 *Vn, const bf16 *A, const bf16 *Tw,
                     const bf16 *dVn, const bf16 *hs, const bf16 *dhs, bf16 *dv, float *dg,
                     float *dbeta, bf16 *dqk_h)
{
    QC_GDN_SMEM(smb);
    grad_fast_smem s(smb);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, mt = warp >> 1;
    int half = warp & 1, n0 = 64 * half, n1 = 32 * half;
    /* the grid is (chunk, value head); taken in launch order as value head fastest, so the
     * value heads of one q/k head [GDN-GVA] run together and share K and Q in L2 */
    int64_t bid = blockIdx.x + static_cast<int64_t>(blockIdx.y) * gridDim.x;
    int64_t ci = bid / p.hv, hvi = bid % p.hv;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1], hq = hvi / (p.hv / p.h);
    size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
    size_t c0 = (static_cast<size_t>(hvi) * nchunks + ci) * kMaxD * kMaxD;
    /* group 0: the chunk's rows; group 1: S and dS' */
    tile_rows(false, kLdH, s.Kh, nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, s.Qh, nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, s.Vh, nc, v + (tok0 * p.hv + hvi) * kMaxD, p.hv * kMaxD);
    tile_rows(false, kLdH, s.dOh, nc, dout + (tok0 * p.hv + hvi) * kMaxD, p.hv * kMaxD);
    tile_rows(false, kLdH, s.Vnh, nc, Vn + row0 * kMaxD, kMaxD);
    tile_rows(false, kLdH, s.dVh, nc, dVn + row0 * kMaxD, kMaxD);
    tile_rows(true, kLdH64, s.Ah, nc, A + row0 * kC, kC);
    tile_rows(true, kLdH64, s.Th, nc, Tw + row0 * kC, kC);
    cp_commit();
    for (int e = tid; e < kMaxD * 16; e += kThreads) {
        int r = e >> 4, c8 = 8 * (e & 15);
        cp_async16(s.Sh + r * kLdH + c8, hs + c0 + r * kMaxD + c8, true);
        cp_async16(s.dSh + r * kLdH + c8, dhs + c0 + r * kMaxD + c8, true);
    }
    cp_commit();
    if (warp == 0) {
        float x0 = lane < nc ? gate[(tok0 + lane) * p.hv + hvi] : 0.0f;
        float x1 = lane + 32 < nc ? gate[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        s.Bt[lane] = lane < nc ? beta[(tok0 + lane) * p.hv + hvi] : 0.0f;
        s.Bt[lane + 32] = lane + 32 < nc ? beta[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        warp_cumsum64(x0, x1);
        float gl = __shfl_sync(0xffffffffu, x1, 31);
        s.G[lane] = x0;
        s.G[lane + 32] = x1;
        s.Ex[lane] = expf(x0);
        s.Ex[lane + 32] = expf(x1);
        s.F[lane] = expf(__fsub_rn(gl, x0));
        s.F[lane + 32] = expf(__fsub_rn(gl, x1));
    }
    cp_wait<1>();
    __syncthreads();
    { /* dv = diag(beta) T^T dVn, and rows(T^T dVn . V) for dbeta */
        float c[8][4] = {};
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4];
            frag_a_km(a, s.Th, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t b[4];
                frag_b_kn(b, s.dVh, kLdH, n0 + 16 * np, k0);
                mma2(c[2 * np], c[2 * np + 1], a, b);
            }
        }
        float r[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
                float2 x = __bfloat1622float2(
                    *reinterpret_cast<const __nv_bfloat162 *>(s.Vh + i * kLdH + d));
                r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e], x.x));
                r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e + 1], x.y));
                if (i < nc)
                    st_pair(dv + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * kMaxD + d,
                            __fmul_rn(s.Bt[i], c[nt][e]), __fmul_rn(s.Bt[i], c[nt][e + 1]));
            }
        r[0] = quad_sum(r[0]);
        r[1] = quad_sum(r[1]);
        if ((lane & 3) == 0) {
            s.rv[half * kC + 16 * mt + acc_row(0)] = r[0];
            s.rv[half * kC + 16 * mt + acc_row(2)] = r[1];
        }
    }
    cp_wait<0>();
    __syncthreads();
    /* the sums over the value columns: dQ = dO S^T, dK = Vn dS'^T (kept to the end), dW =
     * -dVn S^T (to shared memory, BF16: only an operand); sum(S . dS') */
    float cQ[8][4] = {}, cK[8][4] = {};
    {
        float cW[8][4] = {};
        for (int k0 = 0; k0 < kMaxD; k0 += 16) {
            uint32_t ao[4], av[4], ad[4];
            frag_a_mk(ao, s.dOh, kLdH, 16 * mt, k0);
            frag_a_mk(av, s.Vnh, kLdH, 16 * mt, k0);
            frag_a_mk(ad, s.dVh, kLdH, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t bs[4], bd[4];
                frag_b_nk(bs, s.Sh, kLdH, n0 + 16 * np, k0);
                frag_b_nk(bd, s.dSh, kLdH, n0 + 16 * np, k0);
                mma2(cQ[2 * np], cQ[2 * np + 1], ao, bs);
                mma2(cW[2 * np], cW[2 * np + 1], ad, bs);
                mma2(cK[2 * np], cK[2 * np + 1], av, bd);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
                st_pair(s.dWh + i * kLdH + d, -cW[nt][e], -cW[nt][e + 1]);
            }
    }
    {
        float sd = 0.0f;
        for (int e = tid; e < kMaxD * (kMaxD / 2); e += kThreads) {
            int r = e / (kMaxD / 2), c = 2 * (e % (kMaxD / 2));
            float2 x =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(s.Sh + r * kLdH + c));
            float2 y =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(s.dSh + r * kLdH + c));
            sd = __fadd_rn(sd, __fmul_rn(x.x, y.x));
            sd = __fadd_rn(sd, __fmul_rn(x.y, y.y));
        }
        for (int off = 16; off > 0; off >>= 1)
            sd = __fadd_rn(sd, __shfl_xor_sync(0xffffffffu, sd, off));
        if (lane == 0)
            s.red[warp] = sd;
    }
    /* dQ = scale E . (dO S^T), dK = F . (Vn dS'^T); their rows dotted with q and k */
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mt + acc_row(e);
            cQ[nt][e] = __fmul_rn(cQ[nt][e], __fmul_rn(p.scale, s.Ex[i]));
            cK[nt][e] = __fmul_rn(cK[nt][e], s.F[i]);
        }
    strip_rowdot_h(cQ, s.Qh, s.rq);
    strip_rowdot_h(cK, s.Kh, s.rk);
    /* S and dS' are free */
    __syncthreads();
    { /* dA = lower(dO Vn^T), dT = dVn (diag(beta) V)^T, Lg = strictlower(K K^T . Gamma) */
        float cA[4][4] = {}, cT[4][4] = {}, cL[4][4] = {};
        for (int k0 = 0; k0 < kMaxD; k0 += 16) {
            uint32_t ao[4], ad[4], ak[4];
            frag_a_mk(ao, s.dOh, kLdH, 16 * mt, k0);
            frag_a_mk(ad, s.dVh, kLdH, 16 * mt, k0);
            frag_a_mk(ak, s.Kh, kLdH, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t bn[4], bv[4], bk[4];
                frag_b_nk(bn, s.Vnh, kLdH, n1 + 16 * np, k0);
                frag_b_nk(bv, s.Vh, kLdH, n1 + 16 * np, k0);
                frag_b_nk(bk, s.Kh, kLdH, n1 + 16 * np, k0);
                mma2(cA[2 * np], cA[2 * np + 1], ao, bn);
                mma2(cT[2 * np], cT[2 * np + 1], ad, bv);
                mma2(cL[2 * np], cL[2 * np + 1], ak, bk);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                s.dAf[i * kLdC + j] = i >= j ? cA[nt][e] : 0.0f;
                s.dTf[i * kLdC + j] = __fmul_rn(s.Bt[j], cT[nt][e]);
                s.Lgf[i * kLdC + j] =
                    i > j ? __fmul_rn(cL[nt][e], expf(__fsub_rn(s.G[i], s.G[j]))) : 0.0f;
            }
    }
    /* V, dO, Vn and dVn are free */
    __syncthreads();
    { /* dT += dW (diag(beta E) K)^T, strictly lower, to BF16 */
        float c[4][4] = {};
        for (int k0 = 0; k0 < kMaxD; k0 += 16) {
            uint32_t a[4];
            frag_a_mk(a, s.dWh, kLdH, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t b[4];
                frag_b_nk(b, s.Kh, kLdH, n1 + 16 * np, k0);
                mma2(c[2 * np], c[2 * np + 1], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                float x[2];
#pragma unroll
                for (int h = 0; h < 2; h++)
                    x[h] = i > j + h ? __fadd_rn(s.dTf[i * kLdC + j + h],
                                                 __fmul_rn(__fmul_rn(s.Bt[j + h], s.Ex[j + h]),
                                                           c[nt][e + h]))
                                     : 0.0f;
                st_pair(s.dTh + i * kLdH64 + j, x[0], x[1]);
            }
    }
    { /* Y = T^T dW: rows(Y . K) for dbeta and dG, dK += diag(beta E) Y */
        float cY[8][4] = {};
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4];
            frag_a_km(a, s.Th, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t b[4];
                frag_b_kn(b, s.dWh, kLdH, n0 + 16 * np, k0);
                mma2(cY[2 * np], cY[2 * np + 1], a, b);
            }
        }
        strip_rowdot_h(cY, s.Kh, s.ry);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e);
                cK[nt][e] = __fadd_rn(cK[nt][e], __fmul_rn(__fmul_rn(s.Bt[i], s.Ex[i]), cY[nt][e]));
            }
    }
    __syncthreads();
    { /* P = T^T dT, BF16 */
        float c[4][4] = {};
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4];
            frag_a_km(a, s.Th, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t b[4];
                frag_b_kn(b, s.dTh, kLdH64, n1 + 16 * np, k0);
                mma2(c[2 * np], c[2 * np + 1], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                st_pair(s.Ph + i * kLdH64 + j, c[nt][e], c[nt][e + 1]);
            }
    }
    __syncthreads();
    { /* dL = -(P T^T), strictly lower, FP32 over dT */
        float c[4][4] = {};
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4];
            frag_a_mk(a, s.Ph, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t b[4];
                frag_b_nk(b, s.Th, kLdH64, n1 + 16 * np, k0);
                mma2(c[2 * np], c[2 * np + 1], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                s.dTf[i * kLdC + j] = i > j ? -c[nt][e] : 0.0f;
            }
    }
    __syncthreads();
    const float *dLf = s.dTf;
    { /* row r (and column r) by a quad, 16 elements a thread: rows and columns of dL . Lg and
       * dA . A */
        int r = tid >> 2, j0 = 16 * (tid & 3);
        float l = 0.0f, m = 0.0f, cn = 0.0f, cm = 0.0f;
        for (int j = j0; j < j0 + 16; j++) {
            l = __fadd_rn(l, __fmul_rn(dLf[r * kLdC + j], s.Lgf[r * kLdC + j]));
            m = __fadd_rn(m,
                          __fmul_rn(s.dAf[r * kLdC + j], __bfloat162float(s.Ah[r * kLdH64 + j])));
            cn = __fadd_rn(cn,
                           __fmul_rn(s.Bt[j], __fmul_rn(dLf[j * kLdC + r], s.Lgf[j * kLdC + r])));
            cm = __fadd_rn(cm,
                           __fmul_rn(s.dAf[j * kLdC + r], __bfloat162float(s.Ah[j * kLdH64 + r])));
        }
        l = quad_sum(l);
        m = quad_sum(m);
        cn = quad_sum(cn);
        cm = quad_sum(cm);
        if ((tid & 3) == 0) {
            s.rowL[r] = l;
            s.rowM[r] = m;
            s.colN[r] = cn;
            s.colM[r] = cm;
        }
    }
    /* dAs = scale dA . Gamma; Bl + Bl^T (Bl = dL . diag(beta) Gamma); BF16 */
    for (int e = tid; e < kC * kC; e += kThreads) {
        int i = e / kC, j = e % kC;
        float gij = i >= j ? expf(__fsub_rn(s.G[i], s.G[j])) : 0.0f;
        float gji = j >= i ? expf(__fsub_rn(s.G[j], s.G[i])) : 0.0f;
        s.dAsh[i * kLdH64 + j] =
            __float2bfloat16_rn(__fmul_rn(__fmul_rn(p.scale, s.dAf[i * kLdC + j]), gij));
        s.Blh[i * kLdH64 + j] =
            __float2bfloat16_rn(__fadd_rn(__fmul_rn(__fmul_rn(dLf[i * kLdC + j], s.Bt[i]), gij),
                                          __fmul_rn(__fmul_rn(dLf[j * kLdC + i], s.Bt[j]), gji)));
    }
    __syncthreads();
    { /* dq̂ = dQ + dAs K; dk̂ = dK + dAs^T Q + (Bl + Bl^T) K */
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t ad[4], at[4], ab[4];
            frag_a_mk(ad, s.dAsh, kLdH64, 16 * mt, k0);
            frag_a_km(at, s.dAsh, kLdH64, 16 * mt, k0);
            frag_a_mk(ab, s.Blh, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t bk[4], bq[4];
                frag_b_kn(bk, s.Kh, kLdH, n0 + 16 * np, k0);
                frag_b_kn(bq, s.Qh, kLdH, n0 + 16 * np, k0);
                mma2(cQ[2 * np], cQ[2 * np + 1], ad, bk);
                mma2(cK[2 * np], cK[2 * np + 1], at, bq);
                mma2(cK[2 * np], cK[2 * np + 1], ab, bk);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
                if (i < nc) {
                    size_t off = (static_cast<size_t>(tok0 + i) * p.hv + hvi) * kMaxD + d;
                    /* BF16 [2][tokens][hv][128] for qk_sum_h_kernel */
                    st_pair(dqk_h + off, cQ[nt][e], cQ[nt][e + 1]);
                    st_pair(dqk_h + static_cast<size_t>(p.tokens) * p.hv * kMaxD + off, cK[nt][e],
                            cK[nt][e + 1]);
                }
            }
    }
    if (tid < kC) { /* dbeta and dG of row i */
        int i = tid;
        float ywk = __fadd_rn(s.ry[i], s.ry[kC + i]);
        float gq = __fadd_rn(s.rq[i], s.rq[kC + i]), gk = __fadd_rn(s.rk[i], s.rk[kC + i]);
        float dbv = __fadd_rn(s.rv[i], s.rv[kC + i]);
        float be = __fmul_rn(s.Bt[i], s.Ex[i]);
        float db = __fadd_rn(__fadd_rn(dbv, __fmul_rn(s.Ex[i], ywk)), s.rowL[i]);
        float x = __fsub_rn(gq, gk);
        x = __fadd_rn(x, __fmul_rn(be, ywk));
        x = __fadd_rn(x, __fsub_rn(s.rowM[i], s.colM[i]));
        x = __fadd_rn(x, __fsub_rn(__fmul_rn(s.Bt[i], s.rowL[i]), s.colN[i]));
        s.dG[i] = x;
        s.gk[i] = gk;
        if (i < nc)
            dbeta[(tok0 + i) * p.hv + hvi] = db;
    }
    __syncthreads();
    if (warp == 0) { /* the last row's terms, then dg = the reverse cumulative sum of dG */
        float gsum = __fadd_rn(s.gk[lane], s.gk[lane + 32]);
        for (int off = 16; off > 0; off >>= 1)
            gsum = __fadd_rn(gsum, __shfl_xor_sync(0xffffffffu, gsum, off));
        float sd = 0.0f;
        for (int w = 0; w < kThreads / 32; w++)
            sd = __fadd_rn(sd, s.red[w]);
        float x0 = s.dG[lane], x1 = s.dG[lane + 32];
        if (lane == 31)
            x1 = __fadd_rn(x1, __fadd_rn(gsum, __fmul_rn(s.Ex[kC - 1], sd)));
        for (int off = 1; off < 32; off <<= 1) {
            float y0 = __shfl_down_sync(0xffffffffu, x0, off);
            float y1 = __shfl_down_sync(0xffffffffu, x1, off);
            if (lane + off < 32) {
                x0 = __fadd_rn(x0, y0);
                x1 = __fadd_rn(x1, y1);
            }
        }
        x0 = __fadd_rn(x0, __shfl_sync(0xffffffffu, x1, 0));
        if (lane < nc)
            dg[(tok0 + lane) * p.hv + hvi] = x0;
        if (lane + 32 < nc)
            dg[(tok0 + lane + 32) * p.hv + hvi] = x1;
    }
}

/* dq and dk (BF16) from the value heads' BF16 dq̂, dk̂ (d_hv, [2][tokens][hv][128]): one
 * thread per 8 consecutive elements of dq (blockIdx.y 0) or dk (1), summed over the q/k head's
 * value heads in increasing hv in FP32, as qk_sum_kernel. */
__global__ void qk_sum_h_kernel(gdn_chunk_problem p, const bf16 *d_hv, bf16 *dq, bf16 *dk)
{
    int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= p.tokens * p.h * (kMaxD / 8))
        return;
    int64_t tok = e / (p.h * (kMaxD / 8)), hq = (e / (kMaxD / 8)) % p.h, d8 = 8 * (e % (kMaxD / 8));
    int64_t grp = p.hv / p.h;
    const bf16 *src = d_hv + blockIdx.y * static_cast<size_t>(p.tokens) * p.hv * kMaxD;
    float acc[8] = {};
    for (int64_t hv = hq * grp; hv < (hq + 1) * grp; hv++) {
        uint4 u = *reinterpret_cast<const uint4 *>(src + (tok * p.hv + hv) * kMaxD + d8);
        const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(h2[j]);
            acc[2 * j] = __fadd_rn(acc[2 * j], f.x);
            acc[2 * j + 1] = __fadd_rn(acc[2 * j + 1], f.y);
        }
    }
    uint4 out;
    uint32_t *o32 = reinterpret_cast<uint32_t *>(&out);
#pragma unroll
    for (int j = 0; j < 4; j++)
        o32[j] = pack_bf16(acc[2 * j], acc[2 * j + 1]);
    *reinterpret_cast<uint4 *>((blockIdx.y ? dk : dq) + (tok * p.h + hq) * kMaxD + d8) = out;
}

} // namespace
} // namespace qc

#endif
