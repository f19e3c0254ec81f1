/* qc_gdn_chunk.cu: the chunked Gated DeltaNet forward of spec/attention.md [GDN-CHUNK] on
 * the device, chunk size 64, with the chunk matmuls on tensor cores (mma.sync, FP32
 * accumulation). Two kernels:
 *   wy_kernel, one block per (chunk, value head), all in parallel: G = cumsum g, the
 *     masked K K^T and Q K^T (Gamma_ij = exp(G_i - G_j) formed for i >= j only), T =
 *     (I + L)^-1 by 16 x 16 diagonal blocks (forward substitution) and block merges, then
 *     W = T diag(beta e^G) K and U = T diag(beta) V; W, U and A = scale (Q K^T . Gamma) go to
 *     the workspace;
 *   state_kernel, one block per (64 value columns, value head, sequence), serial over the
 *     sequence's chunks with the FP32 state S [dk][64] in shared memory: Vn = U - W S,
 *     o = scale e^G (Q S) + A Vn, S = e^{G_last} S + (K . e^{G_last - G})^T Vn.
 * A partial last chunk is zero-padded (k, q, v, beta = 0, G held at its last valid value),
 * so padded rows contribute nothing. These kernels keep every tile in FP32 shared memory
 * and convert operands as they load them (BF16, or the TF32 pair); the BF16-staged pair
 * wy_fast_kernel / state_fast_kernel below does the same work on BF16 tiles. */
#include <cuda_bf16.h>
#include <vector>

#include "qc_attn.cuh"
#include "qc_gdn_chunk.h"

namespace qc
{
namespace
{

constexpr int kC = 64;          /* chunk */
constexpr int kMaxD = 128;      /* largest dk, dv */
constexpr int kBV = 64;         /* value columns of the state per state_kernel block */
constexpr int kThreads = 256;   /* 8 warps */
constexpr int kLdD = kMaxD + 4; /* row stride of [64][d] tiles */
constexpr int kLdC = kC + 4;    /* row stride of [64][64] tiles */
constexpr int kLdV = kBV + 4;   /* row stride of the state [dk][64] */

constexpr size_t kWySmem = (3 * kC * kLdD + 3 * kC * kLdC + 2 * kC) * sizeof(float);
constexpr size_t kStateSmem =
    (kMaxD * kLdV + 3 * kC * kLdD + 2 * kC * kLdC + 2 * kC) * sizeof(float);

__host__ __device__ inline int round32(int64_t x)
{
    return static_cast<int>((x + 31) / 32 * 32);
}

__device__ __forceinline__ float ldf(const float *p)
{
    return *p;
}
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}

__device__ __forceinline__ void store_out(float *p, float x, int dt)
{
    *p = round_dt(dt, x);
}
__device__ __forceinline__ void store_out(__nv_bfloat16 *p, float x, int)
{
    *p = __float2bfloat16_rn(x);
}

/* ---------------------------------------------------------------- warp MMA */

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lower k) in the low half */
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* x rounded to TF32 (nearest, ties away), low 13 bits cleared. */
__device__ __forceinline__ uint32_t to_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r & 0xffffe000u;
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

/* G[i] = inclusive FP32 cumsum of the chunk's gates, held at its last valid value over the
 * padded rows; one thread. */
__device__ void chunk_cumsum(const gdn_chunk_problem &p, const float *gate, int64_t tok0,
                             int64_t nc, int64_t hvi, float *G)
{
    float s = 0.0f;
    for (int i = 0; i < kC; i++) {
        if (i < nc)
            s = __fadd_rn(s, gate[(tok0 + i) * p.hv + hvi]);
        G[i] = s;
    }
}

/* ---------------------------------------------------------------- wy_kernel */

/* T = (I + L)^-1 for strictly lower L [64][64] (in Ls), into Ts (zeroed by the caller): the
 * four 16 x 16 diagonal blocks D_b = (I + L_bb)^-1 by forward substitution, one warp
 * each, a lane a column; then for block rows bi = 1..3, T_{bi,bj} = -D_bi sum_{m=bj}^{bi-1}
 * L_{bi,m} T_{m,bj} through the scratch Ps. All FP32 on the CUDA cores. */
__device__ void solve_t(const float *Ls, float *Ts, float *Ps)
{
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
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
    __syncthreads();
    for (int bi = 1; bi < 4; bi++) {
        for (int e = tid; e < bi * 256; e += kThreads) {
            int bj = e >> 8, r = (e >> 4) & 15, c = e & 15;
            float s = 0.0f;
            for (int m = 16 * bj; m < 16 * bi; m++)
                s = __fadd_rn(s,
                              __fmul_rn(Ls[(16 * bi + r) * kLdC + m], Ts[m * kLdC + 16 * bj + c]));
            Ps[(16 * bi + r) * kLdC + 16 * bj + c] = s;
        }
        __syncthreads();
        for (int e = tid; e < bi * 256; e += kThreads) {
            int bj = e >> 8, r = (e >> 4) & 15, c = e & 15;
            float s = 0.0f;
            for (int m = 0; m < 16; m++)
                s = __fadd_rn(s, __fmul_rn(Ts[(16 * bi + r) * kLdC + 16 * bi + m],
                                           Ps[(16 * bi + m) * kLdC + 16 * bj + c]));
            Ts[(16 * bi + r) * kLdC + 16 * bj + c] = -s;
        }
        __syncthreads();
    }
}

template <int kMma, typename TIn>
__global__ void __launch_bounds__(kThreads)
    wy_kernel(gdn_chunk_problem p, const int32_t *chunks, const TIn *q, const TIn *k, const TIn *v,
              const float *gate, const float *beta, float *W, float *U, float *A)
{
    extern __shared__ float sm[];
    float *Ks = sm, *Qs = Ks + kC * kLdD, *Vs = Qs + kC * kLdD; /* Qs later beta e^G K */
    float *Ls = Vs + kC * kLdD, *Ts = Ls + kC * kLdC, *Ps = Ts + kC * kLdC;
    float *G = Ps + kC * kLdC, *Bt = G + kC;
    int tid = threadIdx.x, warp = tid >> 5;
    int64_t ci = blockIdx.x, hvi = blockIdx.y;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1], hq = hvi / (p.hv / p.h);
    int dkp = round32(p.dk), dvp = round32(p.dv);
    for (int e = tid; e < kC * dkp; e += kThreads) {
        int i = e / dkp, d = e % dkp;
        bool on = i < nc && d < p.dk;
        size_t off = (static_cast<size_t>(tok0 + i) * p.h + hq) * p.dk + d;
        Ks[i * kLdD + d] = on ? ldf(k + off) : 0.0f;
        Qs[i * kLdD + d] = on ? ldf(q + off) : 0.0f;
    }
    for (int e = tid; e < kC * dvp; e += kThreads) {
        int i = e / dvp, d = e % dvp;
        bool on = i < nc && d < p.dv;
        Vs[i * kLdD + d] =
            on ? ldf(v + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + d) : 0.0f;
    }
    for (int e = tid; e < kC * kC; e += kThreads)
        Ts[(e / kC) * kLdC + e % kC] = 0.0f;
    if (tid < kC)
        Bt[tid] = tid < nc ? beta[(tok0 + tid) * p.hv + hvi] : 0.0f;
    if (tid == 0)
        chunk_cumsum(p, gate, tok0, nc, hvi, G);
    __syncthreads();
    { /* L = strictly-lower(beta_i k_i.k_j Gamma_ij), A = scale lower(q_i.k_j Gamma_ij) */
        int mt = warp >> 1, n0 = (warp & 1) * 32;
        float ckk[4][4] = {}, cqk[4][4] = {};
        auto aK = [&](int r, int kk) { return Ks[(16 * mt + r) * kLdD + kk]; };
        auto aQ = [&](int r, int kk) { return Qs[(16 * mt + r) * kLdD + kk]; };
        auto bK = [&](int kk, int j) { return Ks[(n0 + j) * kLdD + kk]; };
        mma_strip<kMma, 4>(ckk, dkp, aK, bK);
        mma_strip<kMma, 4>(cqk, dkp, aQ, bK);
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n0 + acc_col(n, e);
                float gam = i >= j ? expf(__fsub_rn(G[i], G[j])) : 0.0f;
                Ls[i * kLdC + j] = i > j ? __fmul_rn(__fmul_rn(Bt[i], ckk[n][e]), gam) : 0.0f;
                if (i < nc)
                    A[(static_cast<size_t>(hvi) * p.tokens + tok0 + i) * kC + j] =
                        __fmul_rn(__fmul_rn(p.scale, cqk[n][e]), gam);
            }
    }
    __syncthreads();
    for (int e = tid; e < kC * dkp; e += kThreads) { /* Qs = diag(beta e^G) K, Vs = diag(beta) V */
        int i = e / dkp, d = e % dkp;
        Qs[i * kLdD + d] = __fmul_rn(Ks[i * kLdD + d], __fmul_rn(Bt[i], expf(G[i])));
    }
    for (int e = tid; e < kC * dvp; e += kThreads) {
        int i = e / dvp, d = e % dvp;
        Vs[i * kLdD + d] = __fmul_rn(Vs[i * kLdD + d], Bt[i]);
    }
    solve_t(Ls, Ts, Ps);
    { /* W = T Qs, U = T Vs */
        int mt = warp >> 1;
        auto aT = [&](int r, int kk) { return Ts[(16 * mt + r) * kLdC + kk]; };
        for (int c0 = (warp & 1) * 32; c0 < dkp; c0 += 64) {
            float c[4][4] = {};
            auto bB = [&](int kk, int j) { return Qs[kk * kLdD + c0 + j]; };
            mma_strip<kMma, 4>(c, kC, aT, bB);
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e), d = c0 + acc_col(n, e);
                    if (i < nc && d < p.dk)
                        W[(static_cast<size_t>(hvi) * p.tokens + tok0 + i) * p.dk + d] = c[n][e];
                }
        }
        for (int c0 = (warp & 1) * 32; c0 < dvp; c0 += 64) {
            float c[4][4] = {};
            auto bB = [&](int kk, int j) { return Vs[kk * kLdD + c0 + j]; };
            mma_strip<kMma, 4>(c, kC, aT, bB);
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e), d = c0 + acc_col(n, e);
                    if (i < nc && d < p.dv)
                        U[(static_cast<size_t>(hvi) * p.tokens + tok0 + i) * p.dv + d] = c[n][e];
                }
        }
    }
}

/* ---------------------------------------------------------------- state_kernel */

template <int kMma, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads)
    state_kernel(gdn_chunk_problem p, const TIn *q, const TIn *k, const float *gate, const float *W,
                 const float *U, const float *A, const float *h0, TOut *o, float *ht)
{
    extern __shared__ float sm[];
    float *Ss = sm, *Ws = Ss + kMaxD * kLdV, *Ks = Ws + kC * kLdD, *Qs = Ks + kC * kLdD;
    float *Vn = Qs + kC * kLdD, *As = Vn + kC * kLdC, *G = As + kC * kLdC, *F = G + kC;
    int tid = threadIdx.x, warp = tid >> 5;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * kBV;
    int dkp = round32(p.dk);
    size_t sbase = (static_cast<size_t>(n) * p.hv + hvi) * p.dk * p.dv;
    for (int e = tid; e < kMaxD * kBV; e += kThreads) {
        int r = e / kBV, c = e % kBV;
        bool on = h0 && r < p.dk && cv + c < p.dv;
        Ss[r * kLdV + c] = on ? h0[sbase + static_cast<size_t>(r) * p.dv + cv + c] : 0.0f;
    }
    for (int64_t i0 = 0; i0 < len; i0 += kC) {
        int64_t nc = len - i0 < kC ? len - i0 : kC, tok0 = start + i0;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        __syncthreads();
        for (int e = tid; e < kC * dkp; e += kThreads) {
            int i = e / dkp, d = e % dkp;
            bool on = i < nc && d < p.dk;
            size_t off = (static_cast<size_t>(tok0 + i) * p.h + hq) * p.dk + d;
            Ws[i * kLdD + d] = on ? W[(row0 + i) * p.dk + d] : 0.0f;
            Ks[i * kLdD + d] = on ? ldf(k + off) : 0.0f;
            Qs[i * kLdD + d] = on ? ldf(q + off) : 0.0f;
        }
        for (int e = tid; e < kC * kC; e += kThreads) {
            int i = e / kC, j = e % kC;
            bool on = i < nc && cv + j < p.dv;
            Vn[i * kLdC + j] = on ? U[(row0 + i) * p.dv + cv + j] : 0.0f;
            As[i * kLdC + j] = i < nc ? A[(row0 + i) * kC + j] : 0.0f;
        }
        if (tid == 0)
            chunk_cumsum(p, gate, tok0, nc, hvi, G);
        __syncthreads();
        if (tid < kC)
            F[tid] = expf(__fsub_rn(G[kC - 1], G[tid]));
        int mt = warp >> 1, n0 = (warp & 1) * 32;
        float cw[4][4] = {}, cq[4][4] = {};
        { /* Vn = U - W S; Q S kept for o */
            auto aW = [&](int r, int kk) { return Ws[(16 * mt + r) * kLdD + kk]; };
            auto aQ = [&](int r, int kk) { return Qs[(16 * mt + r) * kLdD + kk]; };
            auto bS = [&](int kk, int j) { return Ss[kk * kLdV + n0 + j]; };
            mma_strip<kMma, 4>(cw, dkp, aW, bS);
            mma_strip<kMma, 4>(cq, dkp, aQ, bS);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e), j = n0 + acc_col(nt, e);
                    Vn[i * kLdC + j] = __fsub_rn(Vn[i * kLdC + j], cw[nt][e]);
                }
        }
        __syncthreads();
        { /* o = scale e^G (Q S) + A Vn */
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e);
                    cq[nt][e] = __fmul_rn(cq[nt][e], __fmul_rn(p.scale, expf(G[i])));
                }
            auto aA = [&](int r, int kk) { return As[(16 * mt + r) * kLdC + kk]; };
            auto bV = [&](int kk, int j) { return Vn[kk * kLdC + n0 + j]; };
            mma_strip<kMma, 4>(cq, kC, aA, bV);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e);
                    int64_t c = cv + n0 + acc_col(nt, e);
                    if (i < nc && c < p.dv)
                        store_out(o + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + c,
                                  cq[nt][e], p.out_dt);
                }
        }
        if (16 * warp < dkp) { /* S = e^{G_last} S + (K . F)^T Vn, rows 16 warp .. + 16 */
            float cs[8][4];
            float alast = expf(G[kC - 1]);
            int r0 = 16 * warp;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    cs[nt][e] = __fmul_rn(Ss[(r0 + acc_row(e)) * kLdV + acc_col(nt, e)], alast);
            auto aK = [&](int r, int kk) { return __fmul_rn(Ks[kk * kLdD + r0 + r], F[kk]); };
            auto bV = [&](int kk, int j) { return Vn[kk * kLdC + j]; };
            mma_strip<kMma, 8>(cs, kC, aK, bV);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    Ss[(r0 + acc_row(e)) * kLdV + acc_col(nt, e)] = cs[nt][e];
        }
    }
    __syncthreads();
    if (ht)
        for (int e = tid; e < kMaxD * kBV; e += kThreads) {
            int r = e / kBV, c = e % kBV;
            if (r < p.dk && cv + c < p.dv)
                ht[sbase + static_cast<size_t>(r) * p.dv + cv + c] = Ss[r * kLdV + c];
        }
}

template <int kMma, typename TIn, typename TOut>
cudaError_t launch(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, const void *q,
                   const void *k, const void *v, const float *g, const float *beta, const float *h0,
                   void *o, float *ht, cudaStream_t st)
{
    auto wy = wy_kernel<kMma, TIn>;
    auto state = state_kernel<kMma, TIn, TOut>;
    cudaError_t err =
        cudaFuncSetAttribute(wy, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kWySmem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(state, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kStateSmem);
    if (err != cudaSuccess)
        return err;
    float *W = plan.ws, *U = W + static_cast<size_t>(p.hv) * p.tokens * p.dk;
    float *A = U + static_cast<size_t>(p.hv) * p.tokens * p.dv;
    const TIn *tq = static_cast<const TIn *>(q), *tk = static_cast<const TIn *>(k);
    if (plan.nchunks > 0)
        wy<<<dim3((unsigned)plan.nchunks, (unsigned)p.hv), kThreads, kWySmem, st>>>(
            p, plan.chunks, tq, tk, static_cast<const TIn *>(v), g, beta, W, U, A);
    if (p.nseq > 0)
        state<<<dim3((unsigned)((p.dv + kBV - 1) / kBV), (unsigned)p.hv, (unsigned)p.nseq),
                kThreads, kStateSmem, st>>>(p, tq, tk, g, W, U, A, h0, static_cast<TOut *>(o), ht);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- the BF16-staged path */
/* kGdnMmaBf16Smem: the same algorithm with dk = dv = 128 and BF16 tiles in shared memory read by
 * ldmatrix, BF16 W, U and A in the workspace, and the state kernel's tiles of the next
 * chunk fetched by cp.async while the current one is computed. The FP32 state stays in
 * shared memory; its BF16 copy is the matmul operand. */

constexpr int kLdH = kMaxD + 8;           /* BF16 row stride of [64][128] tiles (272 B) */
constexpr int kLdH64 = kC + 8;            /* BF16 row stride of [.][64] tiles (144 B) */
constexpr int kTileH = kC * kLdH * 2;     /* bytes */
constexpr int kTileH64 = kC * kLdH64 * 2; /* bytes */
constexpr int kTileF = kC * kLdC * 4;     /* bytes, = kTileH */
static_assert(kTileF == kTileH, "the FP32 [64][68] and BF16 [64][136] tiles alias");
constexpr size_t kWyFastSmem = 5 * static_cast<size_t>(kTileH) + 2 * kC * sizeof(float);
constexpr int kStageBytes = 3 * kTileH + 2 * kTileH64;
constexpr size_t kStateFastSmem = static_cast<size_t>(kMaxD) * kLdV * 4 +
                                  static_cast<size_t>(kMaxD) * kLdH64 * 2 + 2 * kStageBytes +
                                  2 * kTileH64 + (2 * kC + 3 * kC + 1) * sizeof(float);

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* The A fragment (16 x 16 from row m0, column k0) of A stored [m][k]. */
__device__ __forceinline__ void frag_a_mk(uint32_t (&a)[4], const bf16 *s, int ld, int m0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4(a, s + (m0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + k0 + (l >> 4) * 8);
}
/* The A fragment of A stored transposed, [k][m]. */
__device__ __forceinline__ void frag_a_km(uint32_t (&a)[4], const bf16 *s, int ld, int m0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4_t(a, s + (k0 + (l & 7) + (l >> 4) * 8) * ld + m0 + ((l >> 3) & 1) * 8);
}
/* The B fragments of two 8-column tiles (n0, n0 + 8; k0 .. k0 + 16) of B stored [k][n]:
 * b[0], b[1] for the first, b[2], b[3] for the second. */
__device__ __forceinline__ void frag_b_kn(uint32_t (&b)[4], const bf16 *s, int ld, int n0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4_t(b, s + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
}
/* The same of B stored transposed, [n][k]. */
__device__ __forceinline__ void frag_b_nk(uint32_t (&b)[4], const bf16 *s, int ld, int n0, int k0)
{
    int l = threadIdx.x & 31;
    ldsm_x4(b, s + (n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
}

__device__ __forceinline__ void mma2(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[4])
{
    mma_bf16(c0, a, b[0], b[1]);
    mma_bf16(c1, a, b[2], b[3]);
}

__device__ __forceinline__ void st_pair(bf16 *p, float x, float y)
{
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(x, y);
}

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

__global__ void __launch_bounds__(kThreads)
    wy_fast_kernel(gdn_chunk_problem p, const int32_t *chunks, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *gate, const float *beta, bf16 *W, bf16 *U, bf16 *A)
{
    extern __shared__ __align__(16) unsigned char smb[];
    bf16 *Kh = reinterpret_cast<bf16 *>(smb), *Qh = reinterpret_cast<bf16 *>(smb + kTileH);
    bf16 *Vh = reinterpret_cast<bf16 *>(smb + 2 * kTileH);
    float *Lf = reinterpret_cast<float *>(smb + 3 * kTileH);
    float *Tf = reinterpret_cast<float *>(smb + 4 * kTileH);
    float *Pf = reinterpret_cast<float *>(Qh);         /* the solve's scratch, once Q is used */
    bf16 *Tw = Qh, *Tu = reinterpret_cast<bf16 *>(Lf); /* after the solve */
    float *G = reinterpret_cast<float *>(smb + 5 * kTileH), *Bt = G + kC;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int64_t ci = blockIdx.x, hvi = blockIdx.y;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1], hq = hvi / (p.hv / p.h);
    tile_rows(false, kLdH, Kh, nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, Qh, nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
    tile_rows(false, kLdH, Vh, nc, v + (tok0 * p.hv + hvi) * kMaxD, p.hv * kMaxD);
    cp_commit();
    for (int e = tid; e < kC * kC; e += kThreads)
        Tf[(e / kC) * kLdC + e % kC] = 0.0f;
    if (warp == 0) {
        float gr0 = lane < nc ? gate[(tok0 + lane) * p.hv + hvi] : 0.0f;
        float gr1 = lane + 32 < nc ? gate[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        Bt[lane] = lane < nc ? beta[(tok0 + lane) * p.hv + hvi] : 0.0f;
        Bt[lane + 32] = lane + 32 < nc ? beta[(tok0 + lane + 32) * p.hv + hvi] : 0.0f;
        warp_cumsum64(gr0, gr1);
        G[lane] = gr0;
        G[lane + 32] = gr1;
    }
    cp_wait<0>();
    __syncthreads();
    { /* L and A as in wy_kernel */
        int mt = warp >> 1, n0 = (warp & 1) * 32;
        float ckk[4][4] = {}, cqk[4][4] = {};
        for (int k0 = 0; k0 < kMaxD; k0 += 16) {
            uint32_t ak[4], aq[4], b0[4], b1[4];
            frag_a_mk(ak, Kh, kLdH, 16 * mt, k0);
            frag_a_mk(aq, Qh, kLdH, 16 * mt, k0);
            frag_b_nk(b0, Kh, kLdH, n0, k0);
            frag_b_nk(b1, Kh, kLdH, n0 + 16, k0);
            mma2(ckk[0], ckk[1], ak, b0);
            mma2(ckk[2], ckk[3], ak, b1);
            mma2(cqk[0], cqk[1], aq, b0);
            mma2(cqk[2], cqk[3], aq, b1);
        }
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), j = n0 + acc_col(n, e);
                float a2[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float gam = i >= j + h ? expf(__fsub_rn(G[i], G[j + h])) : 0.0f;
                    Lf[i * kLdC + j + h] =
                        i > j + h ? __fmul_rn(__fmul_rn(Bt[i], ckk[n][e + h]), gam) : 0.0f;
                    a2[h] = __fmul_rn(__fmul_rn(p.scale, cqk[n][e + h]), gam);
                }
                if (i < nc)
                    st_pair(A + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * kC + j, a2[0],
                            a2[1]);
            }
    }
    __syncthreads();
    solve_t(Lf, Tf, Pf);
    for (int e = tid; e < kC * kC / 2;
         e += kThreads) { /* Tw = T diag(beta e^G), Tu = T diag(beta) */
        int i = e / (kC / 2), j = 2 * (e % (kC / 2));
        float t0 = Tf[i * kLdC + j], t1 = Tf[i * kLdC + j + 1];
        st_pair(Tw + i * kLdH64 + j, __fmul_rn(t0, __fmul_rn(Bt[j], expf(G[j]))),
                __fmul_rn(t1, __fmul_rn(Bt[j + 1], expf(G[j + 1]))));
        st_pair(Tu + i * kLdH64 + j, __fmul_rn(t0, Bt[j]), __fmul_rn(t1, Bt[j + 1]));
    }
    __syncthreads();
    int mt = warp >> 1, n0 = (warp & 1) * 64;
    for (int pass = 0; pass < 2; pass++) { /* W = Tw K, U = Tu V */
        const bf16 *Ta = pass ? Tu : Tw, *Bs = pass ? Vh : Kh;
        bf16 *dst = pass ? U : W;
        float c[8][4] = {};
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4];
            frag_a_mk(a, Ta, kLdH64, 16 * mt, k0);
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t b[4];
                frag_b_kn(b, Bs, kLdH, n0 + 16 * np, k0);
                mma2(c[2 * np], c[2 * np + 1], a, b);
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(n, e);
                if (i < nc)
                    st_pair(dst + (static_cast<size_t>(hvi) * p.tokens + tok0 + i) * kMaxD + d,
                            c[n][e], c[n][e + 1]);
            }
    }
}

/* The shared memory of state_fast_kernel. */
struct state_fast_smem {
    float *Sf;                    /* [128][kLdV] the FP32 state */
    bf16 *Sh;                     /* [128][kLdH64] its BF16 copy */
    bf16 *Vnh;                    /* [64][kLdH64] Vn */
    bf16 *Vn2h;                   /* [64][kLdH64] F . Vn */
    float *graw, *F, *Eg, *alast; /* graw [2][64] */
    unsigned char *stage;
    __device__ state_fast_smem(unsigned char *s)
    {
        Sf = reinterpret_cast<float *>(s);
        s += kMaxD * kLdV * 4;
        Sh = reinterpret_cast<bf16 *>(s);
        s += kMaxD * kLdH64 * 2;
        stage = s;
        s += 2 * kStageBytes;
        Vnh = reinterpret_cast<bf16 *>(s);
        Vn2h = reinterpret_cast<bf16 *>(s + kTileH64);
        s += 2 * kTileH64;
        graw = reinterpret_cast<float *>(s);
        F = graw + 2 * kC;
        Eg = F + kC;
        alast = Eg + 2 * kC;
    }
    __device__ bf16 *W(int b) const
    {
        return reinterpret_cast<bf16 *>(stage + b * kStageBytes);
    }
    __device__ bf16 *K(int b) const
    {
        return reinterpret_cast<bf16 *>(stage + b * kStageBytes + kTileH);
    }
    __device__ bf16 *Q(int b) const
    {
        return reinterpret_cast<bf16 *>(stage + b * kStageBytes + 2 * kTileH);
    }
    __device__ bf16 *U(int b) const
    {
        return reinterpret_cast<bf16 *>(stage + b * kStageBytes + 3 * kTileH);
    }
    __device__ bf16 *A(int b) const
    {
        return reinterpret_cast<bf16 *>(stage + b * kStageBytes + 3 * kTileH + kTileH64);
    }
};

__global__ void __launch_bounds__(kThreads)
    state_fast_kernel(gdn_chunk_problem p, const bf16 *q, const bf16 *k, const float *gate,
                      const bf16 *W, const bf16 *U, const bf16 *A, const float *h0, bf16 *o,
                      float *ht)
{
    extern __shared__ __align__(16) unsigned char smb[];
    state_fast_smem sm(smb);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * kBV, nch = (len + kC - 1) / kC;
    size_t sbase = (static_cast<size_t>(n) * p.hv + hvi) * kMaxD * p.dv;
    auto fetch = [&](int64_t c, int b) {
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        tile_rows(false, kLdH, sm.W(b), nc, W + row0 * kMaxD, kMaxD);
        tile_rows(false, kLdH, sm.K(b), nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
        tile_rows(false, kLdH, sm.Q(b), nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD);
        tile_rows(true, kLdH64, sm.U(b), nc, U + row0 * p.dv + cv, p.dv);
        tile_rows(true, kLdH64, sm.A(b), nc, A + row0 * kC, kC);
        if (warp == 0)
            for (int i = lane; i < kC; i += 32)
                cp_async4(sm.graw + b * kC + i, gate + (i < nc ? (tok0 + i) * p.hv + hvi : 0),
                          i < nc);
    };
    for (int e = tid; e < kMaxD * kBV; e += kThreads) {
        int r = e / kBV, c = e % kBV;
        float s = h0 ? h0[sbase + static_cast<size_t>(r) * p.dv + cv + c] : 0.0f;
        sm.Sf[r * kLdV + c] = s;
        sm.Sh[r * kLdH64 + c] = __float2bfloat16_rn(s);
    }
    if (nch > 0)
        fetch(0, 0);
    cp_commit();
    int mt = warp >> 1, nb = (warp & 1) * 32;
    for (int64_t c = 0; c < nch; c++) {
        int b = static_cast<int>(c & 1);
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        __syncthreads();
        if (c + 1 < nch)
            fetch(c + 1, b ^ 1);
        cp_commit();
        cp_wait<1>();
        if (warp == 0) {
            __syncwarp();
            float x0 = sm.graw[b * kC + lane], x1 = sm.graw[b * kC + lane + 32];
            warp_cumsum64(x0, x1);
            float G[2] = {x0, x1};
            float gl = __shfl_sync(0xffffffffu, x1, 31);
            sm.F[lane] = expf(__fsub_rn(gl, G[0]));
            sm.F[lane + 32] = expf(__fsub_rn(gl, G[1]));
            sm.Eg[lane] = __fmul_rn(p.scale, expf(G[0]));
            sm.Eg[lane + 32] = __fmul_rn(p.scale, expf(G[1]));
            if (lane == 0)
                *sm.alast = expf(gl);
        }
        __syncthreads();
        const bf16 *Wh = sm.W(b), *Kh = sm.K(b), *Qh = sm.Q(b), *Uh = sm.U(b), *Ah = sm.A(b);
        float cw[4][4] = {}, cq[4][4] = {};
        for (int k0 = 0; k0 < kMaxD; k0 += 16) { /* W S and Q S */
            uint32_t aw[4], aq[4], b0[4], b1[4];
            frag_a_mk(aw, Wh, kLdH, 16 * mt, k0);
            frag_a_mk(aq, Qh, kLdH, 16 * mt, k0);
            frag_b_kn(b0, sm.Sh, kLdH64, nb, k0);
            frag_b_kn(b1, sm.Sh, kLdH64, nb + 16, k0);
            mma2(cw[0], cw[1], aw, b0);
            mma2(cw[2], cw[3], aw, b1);
            mma2(cq[0], cq[1], aq, b0);
            mma2(cq[2], cq[3], aq, b1);
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++) /* Vn = U - W S, and F . Vn */
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), j = nb + acc_col(nt, e);
                float2 u = __bfloat1622float2(
                    *reinterpret_cast<const __nv_bfloat162 *>(Uh + i * kLdH64 + j));
                float v0 = __fsub_rn(u.x, cw[nt][e]), v1 = __fsub_rn(u.y, cw[nt][e + 1]);
                st_pair(sm.Vnh + i * kLdH64 + j, v0, v1);
                st_pair(sm.Vn2h + i * kLdH64 + j, __fmul_rn(v0, sm.F[i]), __fmul_rn(v1, sm.F[i]));
            }
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < 4; nt++) /* o = Eg . (Q S) + A Vn */
#pragma unroll
            for (int e = 0; e < 4; e++)
                cq[nt][e] = __fmul_rn(cq[nt][e], sm.Eg[16 * mt + acc_row(e)]);
        for (int k0 = 0; k0 < kC; k0 += 16) {
            uint32_t a[4], b0[4], b1[4];
            frag_a_mk(a, Ah, kLdH64, 16 * mt, k0);
            frag_b_kn(b0, sm.Vnh, kLdH64, nb, k0);
            frag_b_kn(b1, sm.Vnh, kLdH64, nb + 16, k0);
            mma2(cq[0], cq[1], a, b0);
            mma2(cq[2], cq[3], a, b1);
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                int i = 16 * mt + acc_row(e), j = nb + acc_col(nt, e);
                if (i < nc)
                    st_pair(o + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + cv + j,
                            cq[nt][e], cq[nt][e + 1]);
            }
        { /* S = alast S + K^T (F . Vn), rows 16 warp .. + 16 */
            int r0 = 16 * warp;
            float al = *sm.alast, cs[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    cs[nt][e] = __fmul_rn(sm.Sf[(r0 + acc_row(e)) * kLdV + acc_col(nt, e)], al);
            for (int k0 = 0; k0 < kC; k0 += 16) {
                uint32_t a[4];
                frag_a_km(a, Kh, kLdH, r0, k0);
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bb[4];
                    frag_b_kn(bb, sm.Vn2h, kLdH64, 16 * np, k0);
                    mma2(cs[2 * np], cs[2 * np + 1], a, bb);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    int r = r0 + acc_row(e), j = acc_col(nt, e);
                    sm.Sf[r * kLdV + j] = cs[nt][e];
                    sm.Sf[r * kLdV + j + 1] = cs[nt][e + 1];
                    st_pair(sm.Sh + r * kLdH64 + j, cs[nt][e], cs[nt][e + 1]);
                }
        }
    }
    cp_wait<0>();
    __syncthreads();
    if (ht)
        for (int e = tid; e < kMaxD * kBV; e += kThreads) {
            int r = e / kBV, c = e % kBV;
            ht[sbase + static_cast<size_t>(r) * p.dv + cv + c] = sm.Sf[r * kLdV + c];
        }
}

cudaError_t launch_fast(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, const void *q,
                        const void *k, const void *v, const float *g, const float *beta,
                        const float *h0, void *o, float *ht, cudaStream_t st)
{
    cudaError_t err = cudaFuncSetAttribute(
        wy_fast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kWyFastSmem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(state_fast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kStateFastSmem);
    if (err != cudaSuccess)
        return err;
    bf16 *W = reinterpret_cast<bf16 *>(plan.ws),
         *U = W + static_cast<size_t>(p.hv) * p.tokens * p.dk;
    bf16 *A = U + static_cast<size_t>(p.hv) * p.tokens * p.dv;
    const bf16 *tq = static_cast<const bf16 *>(q), *tk = static_cast<const bf16 *>(k);
    if (plan.nchunks > 0)
        wy_fast_kernel<<<dim3((unsigned)plan.nchunks, (unsigned)p.hv), kThreads, kWyFastSmem, st>>>(
            p, plan.chunks, tq, tk, static_cast<const bf16 *>(v), g, beta, W, U, A);
    if (p.nseq > 0)
        state_fast_kernel<<<dim3((unsigned)(p.dv / kBV), (unsigned)p.hv, (unsigned)p.nseq),
                            kThreads, kStateFastSmem, st>>>(p, tq, tk, g, W, U, A, h0,
                                                            static_cast<bf16 *>(o), ht);
    return cudaGetLastError();
}

} // namespace

bool gdn_chunk_fits(int64_t dk, int64_t dv)
{
    return dk >= 1 && dv >= 1 && dk <= kMaxD && dv <= kMaxD;
}

cudaError_t gdn_chunk_plan_make(const gdn_chunk_problem &p, const int32_t *cu_host,
                                gdn_chunk_plan *plan)
{
    std::vector<int32_t> tab;
    for (int64_t n = 0; n < p.nseq; n++) {
        int64_t s = cu_host ? cu_host[n] : n * p.seq_t;
        int64_t l = cu_host ? static_cast<int64_t>(cu_host[n + 1]) - cu_host[n] : p.seq_t;
        for (int64_t i0 = 0; i0 < l; i0 += kC) {
            tab.push_back(static_cast<int32_t>(s + i0));
            tab.push_back(static_cast<int32_t>(l - i0 < kC ? l - i0 : kC));
        }
    }
    plan->nchunks = static_cast<int64_t>(tab.size() / 2);
    plan->ws_floats = static_cast<size_t>(p.hv) * p.tokens * (p.dk + p.dv + kC);
    cudaError_t err = cudaMalloc(&plan->chunks, (tab.size() + 2) * sizeof(int32_t));
    if (err == cudaSuccess && !tab.empty())
        err = cudaMemcpy(plan->chunks, tab.data(), tab.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->ws, (plan->ws_floats + 1) * sizeof(float));
    return err;
}

void gdn_chunk_plan_free(gdn_chunk_plan *plan)
{
    if (plan->chunks)
        cudaFree(plan->chunks);
    if (plan->ws)
        cudaFree(plan->ws);
    plan->chunks = nullptr;
    plan->ws = nullptr;
}

cudaError_t gdn_chunk_fwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, void *o, float *ht, cudaStream_t st)
{
    if (!gdn_chunk_fits(p.dk, p.dv) || p.hv % p.h != 0)
        return cudaErrorInvalidValue;
    if (mma == kGdnMmaBf16Smem)
        return p.dk == kMaxD && p.dv == kMaxD && io == kGdnIoBf16
                   ? launch_fast(p, plan, q, k, v, g, beta, h0, o, ht, st)
                   : cudaErrorInvalidValue;
    if (mma == kGdnMmaBf16 && io == kGdnIoBf16)
        return launch<kGdnMmaBf16, __nv_bfloat16, __nv_bfloat16>(p, plan, q, k, v, g, beta, h0, o,
                                                                 ht, st);
    if (mma == kGdnMmaTf32x3 && io == kGdnIoBf16)
        return launch<kGdnMmaTf32x3, __nv_bfloat16, __nv_bfloat16>(p, plan, q, k, v, g, beta, h0, o,
                                                                   ht, st);
    if (mma == kGdnMmaBf16)
        return launch<kGdnMmaBf16, float, float>(p, plan, q, k, v, g, beta, h0, o, ht, st);
    return launch<kGdnMmaTf32x3, float, float>(p, plan, q, k, v, g, beta, h0, o, ht, st);
}

} // namespace qc
