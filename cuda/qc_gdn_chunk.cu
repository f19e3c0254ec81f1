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
 * so padded rows contribute nothing. */
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
