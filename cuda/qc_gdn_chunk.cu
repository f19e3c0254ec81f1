/* qc_gdn_chunk.cu: the chunked Gated DeltaNet forward of spec/attention.md [GDN-CHUNK] and
 * its backward on the device, chunk size 64, with the chunk matmuls on tensor cores
 * (mma.sync, FP32 accumulation). The forward is two kernels:
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
 * and convert operands as they load them (BF16, or the TF32 pair); wy_fast_kernel and
 * state_lean_kernel (cuda/qc_gdn_staged.cuh) do the same work on BF16 tiles
 * (kGdnMmaBf16Smem). The backward (section "the backward" below) runs wy_kernel and
 * state_kernel again, then dstate_kernel (serial over the chunks in reverse) and grad_kernel
 * (every chunk in parallel); the BF16-staged backward (kGdnMmaBf16Smem, launched at the end)
 * runs wy_fast_kernel and state_lean_kernel, then dstate_lean_kernel and grad_fast_kernel on
 * BF16 tiles, and sums BF16 dq̂, dk̂ (qk_sum_h_kernel), all of qc_gdn_staged.cuh. The lean
 * kernels hold the state (or its gradient) in the accumulators of their mma (or wgmma) tiles,
 * 4 or 8 warps a block. This file keeps the FP32-tile kernels, the fused forward and the
 * launchers. */
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <cuda_bf16.h>
#include <vector>

#include "qc_attn.cuh"
#include "qc_flash_wgmma.cuh"
#include "qc_gdn_chunk.h"
#include "qc_gdn_staged.cuh"

namespace qc
{

int gdn_lean_warps = 0;
int gdn_wy_tiles = 0;
/* The defaults: the forms gdn_bench timed fastest (docs/perf.md, "The T form and the other forms
 * measured"): the walks on wgmma, 16-byte stores, the T form of the forward, and wy_gva_kernel
 * in the T form only (in the W and U form it was slower); the solve's merges on the tensor cores
 * and, for one long sequence, wy beside the walk in 4 pieces (docs/perf.md, "The tensor-core
 * solve and the pipe, timed"). */
int gdn_lean_wg = 1;
int gdn_wy_wide = 1;
int gdn_wy_gva = -1;
int gdn_tform = 1;
int gdn_solve_tc = 1;
int gdn_pipe = -1;
int gdn_bwd_overlap = 0;

void gdn_forms_from_env()
{
    static const bool once = [] {
        /* *knob from the variable name when it is "0" or "1" */
        auto flag = [](const char *name, int *knob) {
            const char *e = getenv(name);
            if (e && (e[0] == '0' || e[0] == '1') && e[1] == 0)
                *knob = e[0] - '0';
        };
        flag("QSPEC_GDN_WY_WIDE", &gdn_wy_wide);
        flag("QSPEC_GDN_WY_GVA", &gdn_wy_gva);
        flag("QSPEC_GDN_TFORM", &gdn_tform);
        flag("QSPEC_GDN_LEAN_WG", &gdn_lean_wg);
        flag("QSPEC_GDN_SOLVE_TC", &gdn_solve_tc);
        flag("QSPEC_GDN_BWD_OVERLAP", &gdn_bwd_overlap);
        const char *e = getenv("QSPEC_GDN_PIPE");
        char *end = nullptr;
        long n = e ? strtol(e, &end, 10) : -1;
        if (e && end != e && *end == 0 && n >= 0 && n <= 64) /* -1, the default, stays for none */
            gdn_pipe = static_cast<int>(n);
        return true;
    }();
    (void)once;
}

namespace
{

constexpr int kBV = 64;         /* value columns of the state per state_kernel block */
constexpr int kLdD = kMaxD + 4; /* row stride of [64][d] tiles */
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

/* The state pass of the backward runs this kernel too: with hs, it stores the state before
 * each chunk (hs [hv][nchunks][dk][dv], chunk0 the first chunk of each sequence), with vn it
 * writes Vn over U, and o may then be NULL (not computed). */
template <int kMma, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads)
    state_kernel(gdn_chunk_problem p, const TIn *q, const TIn *k, const float *gate, const float *W,
                 const float *U, const float *A, const float *h0, TOut *o, float *ht,
                 const int32_t *chunk0, int64_t nchunks, float *hs, float *vn)
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
        if (hs) {
            size_t c0 = (static_cast<size_t>(hvi) * nchunks + chunk0[n] + i0 / kC) * p.dk * p.dv;
            for (int e = tid; e < kMaxD * kBV; e += kThreads) {
                int r = e / kBV, c = e % kBV;
                if (r < p.dk && cv + c < p.dv)
                    hs[c0 + static_cast<size_t>(r) * p.dv + cv + c] = Ss[r * kLdV + c];
            }
        }
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
            if (o)
                mma_strip<kMma, 4>(cq, dkp, aQ, bS);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e), j = n0 + acc_col(nt, e);
                    float x = __fsub_rn(Vn[i * kLdC + j], cw[nt][e]);
                    Vn[i * kLdC + j] = x;
                    if (vn && i < nc && cv + j < p.dv)
                        vn[(row0 + i) * p.dv + cv + j] = x;
                }
        }
        __syncthreads();
        if (o) { /* o = scale e^G (Q S) + A Vn */
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
                kThreads, kStateSmem, st>>>(p, tq, tk, g, W, U, A, h0, static_cast<TOut *>(o), ht,
                                            nullptr, 0, nullptr, nullptr);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- the BF16-staged path */
/* kGdnMmaBf16Smem: the same algorithm with dk = dv = 128 and BF16 tiles in shared memory read by
 * ldmatrix, BF16 W, U and A in the workspace, and the state kernel's tiles of the next
 * chunk fetched by cp.async while the current one is computed. The FP32 state stays in the
 * walk's mma accumulators (state_lean_kernel); its BF16 rounding is the matmul operand. The
 * kernels are those of cuda/qc_gdn_staged.cuh; here, which of their forms runs. */

/* p with the solve form gdn_solve_tc, for the kernels that solve for T (wy_head, the fused
 * kernel's chunk warps). */
gdn_chunk_problem with_solve(const gdn_chunk_problem &p)
{
    gdn_chunk_problem r = p;
    r.solve_tc = gdn_solve_tc;
    return r;
}

/* wy_fast_kernel's form (kLateV unless gdn_wy_tiles is 5; kWide when gdn_wy_wide), or
 * wy_gva_kernel's (gdn_wy_gva_on, value heads grouped on q/k heads, the four-tile form), its
 * shared memory and its grid's second dimension (value heads, or q/k heads); kTf: the T form of
 * the forward (gdn_tform, four tiles). */
struct wy_pick {
    decltype(&wy_fast_kernel<true, false>) fn;
    size_t smem;
    unsigned heads;
};
template <bool kWide, bool kTf> wy_pick wy_pick_of(const gdn_chunk_problem &p)
{
    bool late = kTf || gdn_wy_tiles != wy_tiles(false);
    if (gdn_wy_gva_on(kTf) && late && p.hv > p.h)
        return {wy_gva_kernel<kWide, kTf>, wy_smem(true), static_cast<unsigned>(p.h)};
    return {late ? wy_fast_kernel<true, kWide, kTf> : wy_fast_kernel<false, kWide>, wy_smem(late),
            static_cast<unsigned>(p.hv)};
}
wy_pick wy_fast_pick(const gdn_chunk_problem &p, bool tform = false)
{
    if (tform)
        return gdn_wy_wide ? wy_pick_of<true, true>(p) : wy_pick_of<false, true>(p);
    return gdn_wy_wide ? wy_pick_of<true, false>(p) : wy_pick_of<false, false>(p);
}

/* The fused forward (kGdnMmaBf16Fused): wy_fast_kernel and state_lean_kernel<true, 4> in one
 * block of 8 warps per (64 value columns, value head, sequence), with the same arithmetic, so
 * its o and final state are bitwise those of the two kernels. Warps 4-7 (the chunk warps)
 * compute chunk c's L, T, W, U (the block's 64 columns) and A into buffer c & 1 while warps
 * 0-3 (the walk warps) take chunk c - 1 from the other buffer through lean_chunk; W, U and A
 * never leave shared memory. The chunk warps fetch chunk c + 1's K, Q, gates (into buffer
 * (c + 1) & 1), V and beta (into their own pair of buffers) by cp.async as soon as the walk
 * has left that buffer: they look (without waiting) after each step of chunk c, and wait only
 * once chunk c is handed over, so the fetch overlaps chunk c whichever side is the slower.
 * The hand-over: named barrier kBarFull + b (the chunk warps arrive when buffer b holds a
 * chunk, the walk warps wait), mbarrier empty[b] (each walk thread arrives when done with a
 * chunk in b; its phase n completes when chunk 2n + b is done), and kBarChunk among the chunk
 * warps alone. W and A are computed by both column blocks of a value head (their product
 * share is small next to the walk). The backward's pass needs hs and vn (not null). */
template <bool kWg> struct fused_layout_t {
    static constexpr int kLdX = 64 + 8; /* U, V: the block's 64 columns */
    static constexpr int kTileX = kC * kLdX * 2;
    /* buffer b: K, Q, W [64][128]; A [64][64]; U [64][kLdX]; the raw gates [64]. Padded rows
     * (kLdH, kLdH64) for the mma.sync walk; for the wgmma walk (kWg) the 128-byte swizzle of
     * its operands (swz_layout<64>), each tile 1024-byte aligned. */
    static constexpr int kTileQ = kWg ? kC * kMaxD * 2 : kTileH; /* K, Q, W */
    static constexpr int kTileA = kWg ? kC * kC * 2 : kTileH64;  /* A */
    static constexpr int kOffQ = kTileQ, kOffW = 2 * kTileQ;
    static constexpr int kOffA = kWg ? 3 * kTileQ : 3 * kTileH + kTileX;
    static constexpr int kOffU = kWg ? 3 * kTileQ + kTileA : 3 * kTileH;
    static constexpr int kOffG = kWg ? kOffU + kTileX : 3 * kTileH + kTileX + kTileH64;
    static constexpr int kBuf = kWg ? (kOffG + kC * 4 + 1023) / 1024 * 1024 : kOffG + kC * 4;
    /* the chunk warps': V [2][64][kLdX] and the raw beta [2][64] (fetched a chunk ahead, the
     * buffer's index); L, T, P (FP32 [64][kLdC]); G, beta [64] */
    static constexpr int kPriv = 2 * kTileX + 2 * kC * 4 + 3 * kTileF + 2 * kC * 4;
    /* the walk warps': a staging tile and the gate vectors each */
    static constexpr int kWalk = 4 * (kC * kLdT * 2 + 3 * kC * 4);
    /* kWg: 1024 bytes to align the base */
    static constexpr size_t kBytes =
        2 * static_cast<size_t>(kBuf) + kPriv + kWalk + 16 + (kWg ? 1024 : 0);
    static __device__ unsigned char *base(unsigned char *s)
    {
        if (!kWg)
            return s;
        uint32_t a = smem_addr(s);
        return s + ((1024u - (a & 1023u)) & 1023u);
    }
    static __device__ bf16 *K(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kBuf);
    }
    /* the mbarriers empty[2] (8 bytes each), after the walk warps' region */
    static __device__ uint64_t *empty(unsigned char *s, int b)
    {
        return reinterpret_cast<uint64_t *>(s + 2 * kBuf + kPriv + kWalk) + b;
    }
    static __device__ bf16 *Q(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kBuf + kOffQ);
    }
    static __device__ bf16 *W(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kBuf + kOffW);
    }
    static __device__ bf16 *U(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kBuf + kOffU);
    }
    static __device__ bf16 *A(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + b * kBuf + kOffA);
    }
    static __device__ float *graw(unsigned char *s, int b)
    {
        return reinterpret_cast<float *>(s + b * kBuf + kOffG);
    }
    /* the chunk warps' region: V [2], beta [2], then L, T, P, G, beta */
    static __device__ unsigned char *priv(unsigned char *s)
    {
        return s + 2 * kBuf;
    }
    static __device__ bf16 *V(unsigned char *s, int b)
    {
        return reinterpret_cast<bf16 *>(s + 2 * kBuf + b * kTileX);
    }
    static __device__ float *braw(unsigned char *s, int b)
    {
        return reinterpret_cast<float *>(s + 2 * kBuf + 2 * kTileX + b * kC * 4);
    }
    static __device__ bf16 *stg(unsigned char *s, int warp)
    {
        return reinterpret_cast<bf16 *>(s + 2 * kBuf + kPriv + warp * kC * kLdT * 2);
    }
    static __device__ float *vec(unsigned char *s, int warp)
    {
        return reinterpret_cast<float *>(s + 2 * kBuf + kPriv + 4 * kC * kLdT * 2 +
                                         warp * 3 * kC * 4);
    }
};
typedef fused_layout_t<false> fused_layout;
typedef fused_layout_t<true> fused_wg_layout;
static_assert((2 * fused_layout::kBuf + fused_layout::kPriv + fused_layout::kWalk) % 8 == 0 &&
                  (2 * fused_wg_layout::kBuf + fused_wg_layout::kPriv + fused_wg_layout::kWalk) %
                          8 ==
                      0,
              "the mbarriers are 8-byte aligned");
static_assert(fused_layout::kBuf % 16 == 0 && fused_layout::kPriv % 16 == 0 &&
                  fused_layout::kTileX % 16 == 0 && (3 * kTileH + fused_layout::kTileX) % 16 == 0,
              "the fused kernel's tiles stay 16-byte aligned");
static_assert(fused_wg_layout::kOffQ % 1024 == 0 && fused_wg_layout::kOffW % 1024 == 0 &&
                  fused_wg_layout::kOffA % 1024 == 0 && fused_wg_layout::kOffU % 16 == 0 &&
                  fused_wg_layout::kBuf % 1024 == 0,
              "the wgmma operand tiles are 1024-byte aligned");
static_assert(fused_layout::kBytes <= 227 * 1024 && fused_wg_layout::kBytes <= 227 * 1024,
              "the fused kernel's shared memory");
static_assert(kTileH64 <= kTileF, "Tw and Tu fit in L and P");
static_assert(fused_layout::kLdX == lean_layout<true, 4>::kLdX, "U tiles as the walk reads them");

constexpr int kBarChunk = 1, kBarFull = 2;

__device__ __forceinline__ void bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_addr(b))
                 : "memory");
}
/* Whether the phase of this parity has completed (no wait). */
__device__ __forceinline__ bool mbar_test(uint64_t *b, int parity)
{
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_addr(b)), "r"(parity)
                 : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity)
{
    while (!mbar_test(b, parity))
        ;
}
struct chunk_bar {
    __device__ void operator()() const
    {
        bar_sync(kBarChunk, 128);
    }
};

/* The fused kernel's tile layouts: K, Q, W padded (kLdH) for the mma.sync walk, swizzled
 * (swz_layout<64>) for the wgmma walk; the positions of W and A pairs written by the chunk
 * warps (d, j even: a pair stays inside a 16-byte chunk). */
template <bool kWg> __device__ __forceinline__ auto tile_lay()
{
    if constexpr (kWg)
        return swz_layout<64>{};
    else
        return pad_layout{kLdH};
}
template <bool kWg> __device__ __forceinline__ int w_at(int i, int d)
{
    return kWg ? swz_layout<64>{}.at(i, d & ~7) + (d & 7) : i * kLdH + d;
}
template <bool kWg> __device__ __forceinline__ int a_at(int i, int j)
{
    return kWg ? swz_layout<64>{}.at(i, j & ~7) + (j & 7) : i * kLdH64 + j;
}

/* kOut: the forward (o, ht). !kOut: the backward's first pass, wy_fast_kernel and
 * state_lean_kernel<false, 4> fused: the chunk warps of the first column block also store W,
 * A and T (rows < nc) into the workspace as wy_fast_kernel does (not U: the walk writes Vn
 * over it), and the walk
 * stores the BF16 state before each chunk into hs and Vn over U, with no o. */
template <bool kOut, bool kWg>
__global__ void __launch_bounds__(256, 1)
    fused_fwd_kernel(gdn_chunk_problem p, const bf16 *q, const bf16 *k, const bf16 *v,
                     const float *gate, const float *beta, const float *h0, bf16 *o, float *ht,
                     const int32_t *chunk0, int64_t nchunks, bf16 *Wg, bf16 *Ag, bf16 *Tg, bf16 *hs,
                     bf16 *vn)
{
    typedef fused_layout_t<kWg> L;
    extern __shared__ __align__(16) unsigned char smfused[];
    unsigned char *smb = L::base(smfused);
    const auto ty = tile_lay<kWg>(); /* K, Q and W, as the walk reads them */
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * 64, nch = (len + kC - 1) / kC;
    if (tid == 0) {
        mbar_init(L::empty(smb, 0), 128);
        mbar_init(L::empty(smb, 1), 128);
    }
    __syncthreads(); /* the mbarriers are set up; the only block-wide barrier */
    if (warp >= 4) { /* the chunk warps */
        int it = tid - 128, iw = warp - 4;
        unsigned char *pv = L::priv(smb);
        float *Lf = reinterpret_cast<float *>(pv + 2 * L::kTileX + 2 * kC * 4),
              *Tf = Lf + kC * kLdC, *Pf = Tf + kC * kLdC, *G = Pf + kC * kLdC, *Bt = G + kC;
        bf16 *Tw = reinterpret_cast<bf16 *>(Lf), *Tu = reinterpret_cast<bf16 *>(Pf);
        /* chunk c's K, Q, gates into buffer b, its V and beta into the private ones */
        auto fetch = [&](int64_t c, int b) {
            int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
            lean_rows<128, 16>(ty, L::K(smb, b), nc, k + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD,
                               it);
            lean_rows<128, 16>(ty, L::Q(smb, b), nc, q + (tok0 * p.h + hq) * kMaxD, p.h * kMaxD,
                               it);
            lean_rows<128, 8>(L::kLdX, L::V(smb, b), nc, v + (tok0 * p.hv + hvi) * p.dv + cv,
                              p.hv * p.dv, it);
            if (iw == 0)
                for (int i = lane; i < kC; i += 32) {
                    bool on = i < nc;
                    size_t e = on ? (tok0 + i) * p.hv + hvi : 0;
                    cp_async4(L::graw(smb, b) + i, gate + e, on);
                    cp_async4(L::braw(smb, b) + i, beta + e, on);
                }
            cp_commit();
        };
        if (nch > 0)
            fetch(0, 0);
        bool fetched = false; /* chunk c + 1's fetch is issued */
        /* chunk c + 1's fetch once the walk is done with chunk c - 1 (no wait unless must) */
        auto fetch_next = [&](int64_t c, bool must) {
            if (fetched || c + 1 >= nch)
                return;
            int b1 = static_cast<int>((c + 1) & 1);
            if (c >= 1) {
                int par = static_cast<int>(((c - 1) >> 1) & 1);
                if (must)
                    mbar_wait(L::empty(smb, b1), par);
                else if (!mbar_test(L::empty(smb, b1), par))
                    return;
            }
            fetch(c + 1, b1);
            fetched = true;
        };
        for (int64_t c = 0; c < nch; c++) {
            int b = static_cast<int>(c & 1);
            int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
            bf16 *Kb = L::K(smb, b), *Qb = L::Q(smb, b), *Wb = L::W(smb, b), *Ub = L::U(smb, b),
                 *Ab = L::A(smb, b), *Vh = L::V(smb, b);
            fetched = false;
            cp_wait<0>();
            bar_sync(kBarChunk, 128); /* chunk c has landed; chunk c - 1's tiles are done with */
            for (int e = it; e < kC * kC; e += 128)
                Tf[(e / kC) * kLdC + e % kC] = 0.0f;
            if (iw == 1) { /* G and beta as wy_fast_kernel (the fetch zero-fills past nc) */
                float gr0 = L::graw(smb, b)[lane], gr1 = L::graw(smb, b)[lane + 32];
                Bt[lane] = L::braw(smb, b)[lane];
                Bt[lane + 32] = L::braw(smb, b)[lane + 32];
                warp_cumsum64(gr0, gr1);
                G[lane] = gr0;
                G[lane + 32] = gr1;
            }
            bar_sync(kBarChunk, 128);
            size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
            for (int task = iw; task < 8; task += 4) /* A: rows past nc zero, as fetched */
                wy_la(
                    task >> 1, (task & 1) * 32, Kb, Qb, G, Bt, Lf, p.scale,
                    [&](int i, int j, float a0, float a1) {
                        st_pair(Ab + a_at<kWg>(i, j), i < nc ? a0 : 0.0f, i < nc ? a1 : 0.0f);
                        if (!kOut && vb == 0 && i < nc)
                            st_pair(Ag + (row0 + i) * kC + j, a0, a1);
                    },
                    ty);
            fetch_next(c, false);
            bar_sync(kBarChunk, 128);
            solve_t<128>(Lf, Tf, Pf, it, chunk_bar{}, p.solve_tc != 0);
            fetch_next(c, false);
            wy_scale_t<128>(Tf, G, Bt, Tw, Tu, it, [&](int i, int j, float t0, float t1) {
                if (!kOut && vb == 0 && i < nc)
                    st_pair(Tg + (row0 + i) * kC + j, t0, t1);
            });
            bar_sync(kBarChunk, 128);
            for (int task = iw; task < 12; task += 4) { /* W (8 tasks), then U (4) */
                if (task < 8)
                    wy_mul(task >> 1, (task & 1) * 64, Tw, Kb, ty,
                           [&](int i, int d, float x0, float x1) {
                               st_pair(Wb + w_at<kWg>(i, d), i < nc ? x0 : 0.0f,
                                       i < nc ? x1 : 0.0f);
                               if (!kOut && vb == 0 && i < nc)
                                   st_pair(Wg + (row0 + i) * kMaxD + d, x0, x1);
                           });
                else
                    wy_mul(task - 8, 0, Tu, Vh, pad_layout{L::kLdX},
                           [&](int i, int d, float x0, float x1) {
                               st_pair(Ub + i * L::kLdX + d, i < nc ? x0 : 0.0f,
                                       i < nc ? x1 : 0.0f);
                           });
            }
            if (kWg) /* this thread's writes (and cp.async copies) -> the walk's wgmma */
                fence_async();
            fetch_next(c, false);
            bar_arrive(kBarFull + b, 256); /* buffer b holds chunk c */
            fetch_next(c, true);
        }
        return;
    }
    /* the walk warps: state_lean_kernel<true, 4> on the buffers */
    int cw = 16 * warp;
    size_t sbase = (static_cast<size_t>(n) * p.hv + hvi) * kMaxD * p.dv;
    bf16 *stg = L::stg(smb, warp);
    float *vec = L::vec(smb, warp);
    float s[16][4];
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[nt][e] =
                h0 ? h0[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)]
                   : 0.0f;
    for (int64_t c = 0; c < nch; c++) {
        int b = static_cast<int>(c & 1);
        int64_t tok0 = start + c * kC, nc = len - c * kC < kC ? len - c * kC : kC;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        uint32_t sa[8][4];
        acc_to_a<8>(sa, s);
        if (!kOut) /* the BF16 state before chunk c */
            lean_store_state(
                stg, s,
                hs + (static_cast<size_t>(hvi) * nchunks + chunk0[n] + c) * kMaxD * kMaxD + cv +
                    cw);
        bar_sync(kBarFull + b, 256);
        lean_gates(L::graw(smb, b), vec, p.scale);
        bf16 *od = kOut ? o + (static_cast<size_t>(tok0) * p.hv + hvi) * p.dv + cv + cw : nullptr;
        bf16 *vd = kOut ? nullptr : vn + row0 * p.dv + cv + cw;
        if constexpr (kWg)
            wg_chunk<kOut, L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::U(smb, b),
                                    L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv, vd, p.dv);
        else
            lean_chunk<kOut, L::kLdX>(s, sa, L::W(smb, b), L::K(smb, b), L::Q(smb, b), L::U(smb, b),
                                      L::A(smb, b), vec, stg, cw, nc, od, p.hv * p.dv, vd, p.dv);
        mbar_arrive(L::empty(smb, b)); /* this thread is done with buffer b */
    }
    if (kOut && ht)
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                ht[sbase + static_cast<size_t>(acc_col(nt, e)) * p.dv + cv + cw + acc_row(e)] =
                    s[nt][e];
}

/* The current device's SMs (1 << 30 when it cannot be asked), cached by device. */
int sm_count()
{
    static std::atomic<int> sms_of[64]; /* by device, 0 until asked */
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64)
        sms = sms_of[dev].load(std::memory_order_relaxed);
    if (sms == 0 &&
        (cudaGetDevice(&dev) != cudaSuccess ||
         cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess))
        sms = 1 << 30;
    else if (dev >= 0 && dev < 64)
        sms_of[dev].store(sms, std::memory_order_relaxed);
    return sms;
}
/* The lean kernels' warps a block: 8 (128 value columns) when hv x nseq blocks cover the
 * device's SMs, else 4 (64 columns, twice the blocks); gdn_lean_warps = 4 or 8 fixes it. */
int lean_warps(const gdn_chunk_problem &p)
{
    if (gdn_lean_warps == 4 || gdn_lean_warps == 8)
        return gdn_lean_warps;
    return p.hv * p.nseq >= sm_count() ? 8 : 4;
}

/* gdn_pipe's pieces for a walk of `blocks` blocks with `scratch` bytes free for the two states
 * handed between pieces; 0: one piece (gdn_pipe_count, qc_gdn_chunk.h). */
int pipe_pieces(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int64_t blocks,
                size_t scratch)
{
    bool fits = scratch >= 2 * sizeof(float) * static_cast<size_t>(p.hv) * p.dk * p.dv;
    return gdn_pipe_count(gdn_pipe, p.nseq, plan.nchunks, fits, blocks, sm_count());
}

/* The current device's side stream: non-blocking, of the device's greatest priority (so that its
 * blocks take an SM first as other blocks retire), created the first time and kept. */
cudaError_t side_stream(cudaStream_t *out)
{
    static std::mutex mu;
    static cudaStream_t side_of[64]; /* by device */
    int dev = 0, least = 0, greatest = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess && (dev < 0 || dev >= 64))
        err = cudaErrorInvalidDevice;
    if (err != cudaSuccess)
        return err;
    std::lock_guard<std::mutex> lock(mu);
    if (!side_of[dev]) {
        err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (err == cudaSuccess)
            err = cudaStreamCreateWithPriority(&side_of[dev], cudaStreamNonBlocking, greatest);
    }
    *out = side_of[dev];
    return err;
}

/* Work on the side stream between st's: open() orders the side stream after what st holds,
 * close() st after what the side stream then holds (where err is cudaSuccess) and releases the
 * events (each once its work completes); `ready` is a second event for the caller. */
struct side_fork {
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, ready = nullptr;
    cudaError_t open(cudaStream_t st)
    {
        cudaError_t err = side_stream(&side);
        if (err == cudaSuccess)
            err = cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
        if (err == cudaSuccess)
            err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
        if (err == cudaSuccess)
            err = cudaEventRecord(fork, st);
        if (err == cudaSuccess)
            err = cudaStreamWaitEvent(side, fork, 0);
        return err;
    }
    cudaError_t close(cudaStream_t st, cudaError_t err)
    {
        if (err == cudaSuccess)
            err = cudaEventRecord(fork, side);
        if (err == cudaSuccess)
            err = cudaStreamWaitEvent(st, fork, 0);
        for (cudaEvent_t e : {fork, ready})
            if (e)
                cudaEventDestroy(e);
        return err == cudaSuccess ? cudaGetLastError() : err;
    }
};

/* wy(lo, hi, stream), which forms chunks lo .. hi - 1 (table rows), then walk(pp, h0, ht,
 * stream), which walks pp's window from state h0 to ht over a grid of `blocks` blocks, on st;
 * or, where pipe_pieces gives pieces (`scratch`, `scratch_bytes` free for two states), the
 * chunks of the one sequence in that many pieces: wy takes the pieces one after another on st;
 * the walks run on the side stream (side_stream: as blocks of wy retire, the walk's take their
 * place first), the walk of piece i after wy of piece i (an event) and beside wy of piece
 * i + 1. The state between pieces is FP32 in scratch (two states, taken in turn), so the walk's
 * bits are those of one piece. Every launch is ordered after what st held before the call, and
 * st after every launch of the call. */
template <class Wy, class Walk>
cudaError_t wy_and_walk(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int64_t blocks,
                        float *scratch, size_t scratch_bytes, const float *h0, float *ht,
                        cudaStream_t st, Wy wy, Walk walk)
{
    const int pieces = pipe_pieces(p, plan, blocks, scratch_bytes);
    const int64_t nch = plan.nchunks;
    if (!pieces) {
        wy(0, nch, st);
        if (p.nseq > 0)
            walk(p, h0, ht, st);
        return cudaGetLastError();
    }
    side_fork sf;
    cudaError_t err = sf.open(st);
    auto cut = [&](int i) { return nch * i / pieces; };
    const size_t ns = static_cast<size_t>(p.hv) * p.dk * p.dv;
    for (int i = 0; i < pieces && err == cudaSuccess; i++) {
        wy(cut(i), cut(i + 1), st);
        err = cudaEventRecord(sf.ready, st);
        if (err == cudaSuccess)
            err = cudaStreamWaitEvent(sf.side, sf.ready, 0);
        gdn_chunk_problem pp = p;
        pp.walk_lo = static_cast<int32_t>(cut(i));
        pp.walk_hi = static_cast<int32_t>(cut(i + 1));
        if (err == cudaSuccess)
            walk(pp, i == 0 ? h0 : scratch + ((i - 1) & 1) * ns,
                 i + 1 == pieces ? ht : scratch + (i & 1) * ns, sf.side);
    }
    return sf.close(st, err); /* st after the last walk */
}

/* The serial kernels of kGdnMmaBf16Smem, their threads, shared memory and value columns a
 * block: the lean ones of lw warps. */
template <class Fn> struct serial_kernel {
    Fn fn;
    int threads;
    size_t smem;
    int cols;
};
/* state_lean_kernel<kOut, 4 or 8, kWg, kTf> for lw warps, with its shared memory. */
template <bool kOut, bool kWg, bool kTf>
serial_kernel<decltype(&state_lean_kernel<kOut, 4>)> state_of(int lw)
{
    if (lw == 8)
        return {state_lean_kernel<kOut, 8, kWg, kTf>, 256, lean_layout<kOut, 8, kWg, kTf>::kBytes,
                128};
    return {state_lean_kernel<kOut, 4, kWg, kTf>, 128, lean_layout<kOut, 4, kWg, kTf>::kBytes, 64};
}
/* state_lean_kernel without o, 4 warps, in one stage (gdn_bwd_overlap). */
template <bool kWg> serial_kernel<decltype(&state_lean_kernel<false, 4>)> state_one_stage()
{
    return {state_lean_kernel<false, 4, kWg, false, 1>, 128,
            lean_layout<false, 4, kWg, false, 1>::kBytes, 64};
}
/* dstate_lean_kernel<4 or 8, kWg> for lw warps, with its shared memory. */
template <bool kWg> serial_kernel<decltype(&dstate_lean_kernel<4>)> dstate_of(int lw)
{
    if (lw == 8)
        return {dstate_lean_kernel<8, kWg>, 256, lean_layout<true, 8, kWg>::kBytes, 128};
    return {dstate_lean_kernel<4, kWg>, 128, lean_layout<true, 4, kWg>::kBytes, 64};
}
/* Whether the lean walks run on wgmma: under gdn_lean_wg, where the sm_90a kernels run. */
bool lean_on_wgmma()
{
    return gdn_lean_wg && fl::wg::available();
}
/* The lean walk for lw warps (lean_on_wgmma picks the instructions); tform (the forward only):
 * the T form's. */
template <bool kOut>
serial_kernel<decltype(&state_lean_kernel<kOut, 4>)> state_pick(int lw, bool tform = false)
{
    bool wg = lean_on_wgmma();
    if constexpr (kOut)
        if (tform)
            return wg ? state_of<true, true, true>(lw) : state_of<true, false, true>(lw);
    return wg ? state_of<kOut, true, false>(lw) : state_of<kOut, false, false>(lw);
}

cudaError_t launch_fast(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, const void *q,
                        const void *k, const void *v, const float *g, const float *beta,
                        const float *h0, void *o, float *ht, cudaStream_t st)
{
    const bool tform = gdn_tform != 0;
    auto sk = state_pick<true>(lean_warps(p), tform);
    wy_pick wy = wy_fast_pick(p, tform);
    cudaError_t err =
        cudaFuncSetAttribute(wy.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wy.smem);
    if (err == cudaSuccess)
        err =
            cudaFuncSetAttribute(sk.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sk.smem);
    if (err != cudaSuccess)
        return err;
    bf16 *W = reinterpret_cast<bf16 *>(plan.ws),
         *U = W + static_cast<size_t>(p.hv) * p.tokens * p.dk;
    bf16 *A = U + static_cast<size_t>(p.hv) * p.tokens * p.dv;
    const bf16 *tq = static_cast<const bf16 *>(q), *tk = static_cast<const bf16 *>(k);
    const gdn_chunk_problem ps = with_solve(p);
    auto wy_range = [&](int64_t lo, int64_t hi, cudaStream_t s) {
        if (hi > lo)
            wy.fn<<<dim3((unsigned)(hi - lo), wy.heads), kThreads, wy.smem, s>>>(
                ps, plan.chunks + 2 * lo, tq, tk, static_cast<const bf16 *>(v), g, beta, W, U, A,
                nullptr);
    };
    /* the T form's walk: Tu in W, the values in place of U */
    const bf16 *xu = tform ? static_cast<const bf16 *>(v) : U;
    const dim3 grid((unsigned)(p.dv / sk.cols), (unsigned)p.hv, (unsigned)p.nseq);
    auto walk = [&](const gdn_chunk_problem &pp, const float *a, float *b, cudaStream_t s) {
        sk.fn<<<grid, sk.threads, sk.smem, s>>>(pp, tq, tk, g, W, xu, A, a, static_cast<bf16 *>(o),
                                                b, nullptr, 0, nullptr, nullptr);
    };
    /* the states between pieces: the workspace's second half (the BF16 tiles take the first) */
    const size_t half = (plan.ws_floats + 1) / 2;
    return wy_and_walk(p, plan, static_cast<int64_t>(grid.x) * grid.y * grid.z, plan.ws + half,
                       (plan.ws_floats - half) * sizeof(float), h0, ht, st, wy_range, walk);
}

/* fused_fwd_kernel<kOut, kWg> with its shared memory, on the (64 value columns, value head,
 * sequence) grid. */
template <bool kOut, bool kWg = false>
cudaError_t launch_fused(const gdn_chunk_problem &p, const void *q, const void *k, const void *v,
                         const float *g, const float *beta, const float *h0, void *o, float *ht,
                         const int32_t *chunk0, int64_t nchunks, bf16 *W, bf16 *A, bf16 *T,
                         bf16 *hs, bf16 *vn, cudaStream_t st)
{
    typedef fused_layout_t<kWg> L;
    cudaError_t err = cudaFuncSetAttribute(
        fused_fwd_kernel<kOut, kWg>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::kBytes);
    if (err != cudaSuccess)
        return err;
    if (p.nseq > 0)
        fused_fwd_kernel<kOut, kWg>
            <<<dim3((unsigned)(p.dv / 64), (unsigned)p.hv, (unsigned)p.nseq), 256, L::kBytes, st>>>(
                with_solve(p), static_cast<const bf16 *>(q), static_cast<const bf16 *>(k),
                static_cast<const bf16 *>(v), g, beta, h0, static_cast<bf16 *>(o), ht, chunk0,
                nchunks, W, A, T, hs, vn);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- the backward */
/* docs/gdn.md, "The chunked backward"; tests/test_gdn_chunk_bwd.c is the same in float64.
 * After wy_kernel (W, U, A of every chunk) and state_kernel (the state before each chunk into
 * hs, Vn over U, no o), two kernels:
 *   dstate_kernel, one block per (64 value columns, value head, sequence), serial over the
 *     chunks in reverse with the FP32 state gradient dS [dk][64] in shared memory: stores dS'
 *     (the gradient of the state after the chunk) into dhs, then dVn = diag(F) K dS' + A^T
 *     dO and dS = e^{G_last} dS' + scale (e^G . Q)^T dO - W^T dVn; the last dS is dh0;
 *   grad_kernel, one block per (chunk, value head), all in parallel: T again (K K^T, the
 *     solve), then over the value columns 32 at a time dVn again, the sums over the value
 *     columns (dO S^T, Vn dS'^T, -dVn S^T, dO Vn^T, dVn (beta V)^T) in registers and dv =
 *     diag(beta) T^T dVn; then dT, dL = -T^T dT T^T, dq̂ and dk̂ of the value head, dbeta and
 *     dG, and dg as the reverse cumulative sum of dG over the chunk.
 * qk_sum_kernel sums dq̂ and dk̂ over each q/k head's value heads. */

constexpr int kVB = 32;       /* value columns per step of grad_kernel */
constexpr int kLdB = kVB + 4; /* row stride of its [.][32] tiles */
/* grad_kernel's scratch region: the value-column tiles (S, dS' [128][32]; Vn, dO, V, dVn
 * [64][32]), or before them the solve's L and P, or after them dW [64][128], dT, P, dA
 * [64][64]; the largest. */
constexpr int kGradR = kC * kLdD + 3 * kC * kLdC;
static_assert(kGradR >= 2 * kMaxD * kLdB + 4 * kC * kLdB, "the value-column tiles fit");
/* its vectors: G, Bt, Ex, F, dbv [64]; rv, rq, rk, ry [2][64]; rowL, rowM, colM, colN, dG
 * [64]; red [kThreads] (grad_smem) */
constexpr int kGradVec = 18 * kC + kThreads;
constexpr size_t kDstateSmem =
    (kMaxD * kLdV + 3 * kC * kLdD + 3 * kC * kLdC + 3 * kC) * sizeof(float);
constexpr size_t kGradSmem = (2 * kC * kLdD + 3 * kC * kLdC + kGradR + kGradVec) * sizeof(float);

template <int kMma, typename TIn>
__global__ void __launch_bounds__(kThreads)
    dstate_kernel(gdn_chunk_problem p, const int32_t *chunk0, int64_t nchunks, const TIn *q,
                  const TIn *k, const TIn *dout, const float *gate, const float *W, const float *A,
                  const float *dht, float *dhs, float *dh0)
{
    extern __shared__ float sm[];
    float *dSs = sm, *Ks = dSs + kMaxD * kLdV, *Qs = Ks + kC * kLdD, *Ws = Qs + kC * kLdD;
    float *As = Ws + kC * kLdD, *dOs = As + kC * kLdC, *dVs = dOs + kC * kLdC;
    float *G = dVs + kC * kLdC, *F = G + kC, *Es = F + kC;
    int tid = threadIdx.x, warp = tid >> 5;
    int64_t vb = blockIdx.x, hvi = blockIdx.y, n = blockIdx.z, hq = hvi / (p.hv / p.h);
    int64_t start = p.cu ? p.cu[n] : n * p.seq_t;
    int64_t len = p.cu ? static_cast<int64_t>(p.cu[n + 1]) - p.cu[n] : p.seq_t;
    int64_t cv = vb * kBV, nch = (len + kC - 1) / kC;
    int dkp = round32(p.dk);
    size_t ns = static_cast<size_t>(p.dk) * p.dv,
           sbase = (static_cast<size_t>(n) * p.hv + hvi) * ns;
    for (int e = tid; e < kMaxD * kBV; e += kThreads) {
        int r = e / kBV, c = e % kBV;
        bool on = dht && r < p.dk && cv + c < p.dv;
        dSs[r * kLdV + c] = on ? dht[sbase + static_cast<size_t>(r) * p.dv + cv + c] : 0.0f;
    }
    for (int64_t ci = nch - 1; ci >= 0; ci--) {
        int64_t i0 = ci * kC, nc = len - i0 < kC ? len - i0 : kC, tok0 = start + i0;
        size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
        size_t c0 = (static_cast<size_t>(hvi) * nchunks + chunk0[n] + ci) * ns;
        __syncthreads();
        for (int e = tid; e < kMaxD * kBV; e += kThreads) {
            int r = e / kBV, c = e % kBV;
            if (r < p.dk && cv + c < p.dv)
                dhs[c0 + static_cast<size_t>(r) * p.dv + cv + c] = dSs[r * kLdV + c];
        }
        for (int e = tid; e < kC * dkp; e += kThreads) {
            int i = e / dkp, d = e % dkp;
            bool on = i < nc && d < p.dk;
            size_t off = (static_cast<size_t>(tok0 + i) * p.h + hq) * p.dk + d;
            Ks[i * kLdD + d] = on ? ldf(k + off) : 0.0f;
            Qs[i * kLdD + d] = on ? ldf(q + off) : 0.0f;
            Ws[i * kLdD + d] = on ? W[(row0 + i) * p.dk + d] : 0.0f;
        }
        for (int e = tid; e < kC * kC; e += kThreads) {
            int i = e / kC, j = e % kC;
            bool on = i < nc && cv + j < p.dv;
            As[i * kLdC + j] = i < nc ? A[(row0 + i) * kC + j] : 0.0f;
            dOs[i * kLdC + j] =
                on ? ldf(dout + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + cv + j)
                   : 0.0f;
        }
        if (tid == 0)
            chunk_cumsum(p, gate, tok0, nc, hvi, G);
        __syncthreads();
        if (tid < kC) {
            F[tid] = expf(__fsub_rn(G[kC - 1], G[tid]));
            Es[tid] = __fmul_rn(p.scale, expf(G[tid]));
        }
        __syncthreads();
        { /* dVn = diag(F) K dS' + A^T dO */
            int mt = warp >> 1, n0 = (warp & 1) * 32;
            float c[4][4] = {};
            auto aK = [&](int r, int kk) {
                return __fmul_rn(F[16 * mt + r], Ks[(16 * mt + r) * kLdD + kk]);
            };
            auto bS = [&](int kk, int j) { return dSs[kk * kLdV + n0 + j]; };
            auto aA = [&](int r, int kk) { return As[kk * kLdC + 16 * mt + r]; };
            auto bO = [&](int kk, int j) { return dOs[kk * kLdC + n0 + j]; };
            mma_strip<kMma, 4>(c, dkp, aK, bS);
            mma_strip<kMma, 4>(c, kC, aA, bO);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dVs[(16 * mt + acc_row(e)) * kLdC + n0 + acc_col(nt, e)] = c[nt][e];
        }
        __syncthreads();
        if (16 * warp < dkp) { /* dS = e^{G_last} dS' + (Es . Q)^T dO - W^T dVn, rows 16 warp .. */
            float cs[8][4];
            float alast = expf(G[kC - 1]);
            int r0 = 16 * warp;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    cs[nt][e] = __fmul_rn(dSs[(r0 + acc_row(e)) * kLdV + acc_col(nt, e)], alast);
            auto aQ = [&](int r, int kk) { return __fmul_rn(Es[kk], Qs[kk * kLdD + r0 + r]); };
            auto bO = [&](int kk, int j) { return dOs[kk * kLdC + j]; };
            auto aW = [&](int r, int kk) { return -Ws[kk * kLdD + r0 + r]; };
            auto bV = [&](int kk, int j) { return dVs[kk * kLdC + j]; };
            mma_strip<kMma, 8>(cs, kC, aQ, bO);
            mma_strip<kMma, 8>(cs, kC, aW, bV);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dSs[(r0 + acc_row(e)) * kLdV + acc_col(nt, e)] = cs[nt][e];
        }
    }
    __syncthreads();
    if (dh0)
        for (int e = tid; e < kMaxD * kBV; e += kThreads) {
            int r = e / kBV, c = e % kBV;
            if (r < p.dk && cv + c < p.dv)
                dh0[sbase + static_cast<size_t>(r) * p.dv + cv + c] = dSs[r * kLdV + c];
        }
}

/* The shared memory of grad_kernel (floats): K, Q [64][128]; A, T, Lg = strictlower(K K^T .
 * Gamma) [64][64]; the scratch region R in its three uses; vectors. */
struct grad_smem {
    float *Ks, *Qs, *As, *Ts, *Lg, *R;
    float *Sb, *dSb, *Vnb, *dOb, *Vb, *dVb; /* the value-column tiles, in R */
    float *Ls, *Ps;                         /* the solve, in R */
    float *dWs, *dTs, *Pp, *dAt;            /* after the value columns, in R */
    float *G, *Bt, *Ex, *F, *dbv, *rv, *rq, *rk, *ry, *rowL, *rowM, *colM, *colN, *dG, *red;
    __device__ grad_smem(float *s)
    {
        Ks = s;
        Qs = Ks + kC * kLdD;
        As = Qs + kC * kLdD;
        Ts = As + kC * kLdC;
        Lg = Ts + kC * kLdC;
        R = Lg + kC * kLdC;
        Sb = R;
        dSb = Sb + kMaxD * kLdB;
        Vnb = dSb + kMaxD * kLdB;
        dOb = Vnb + kC * kLdB;
        Vb = dOb + kC * kLdB;
        dVb = Vb + kC * kLdB;
        Ls = R;
        Ps = R + kC * kLdC;
        dWs = R;
        dTs = dWs + kC * kLdD;
        Pp = dTs + kC * kLdC;
        dAt = Pp + kC * kLdC;
        G = R + kGradR;
        Bt = G + kC;
        Ex = Bt + kC;
        F = Ex + kC;
        dbv = F + kC;
        rv = dbv + kC; /* [2][64]: per half of the warps */
        rq = rv + 2 * kC;
        rk = rq + 2 * kC;
        ry = rk + 2 * kC;
        rowL = ry + 2 * kC;
        rowM = rowL + kC;
        colM = rowM + kC;
        colN = colM + kC;
        dG = colN + kC;
        red = dG + kC; /* [kThreads] */
    }
};

/* Lg and T of the chunk (K, G, Bt loaded): Lg_ij = (k_i . k_j) Gamma_ij for i > j, T = (I +
 * diag(Bt) Lg)^-1. */
template <int kMma> __device__ void grad_solve(const gdn_chunk_problem &p, const grad_smem &s)
{
    int tid = threadIdx.x, warp = tid >> 5, mt = warp >> 1, n0 = (warp & 1) * 32;
    int dkp = round32(p.dk);
    for (int e = tid; e < kC * kC; e += kThreads)
        s.Ts[(e / kC) * kLdC + e % kC] = 0.0f;
    float c[4][4] = {};
    auto aK = [&](int r, int kk) { return s.Ks[(16 * mt + r) * kLdD + kk]; };
    auto bK = [&](int kk, int j) { return s.Ks[(n0 + j) * kLdD + kk]; };
    mma_strip<kMma, 4>(c, dkp, aK, bK);
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mt + acc_row(e), j = n0 + acc_col(nt, e);
            float lg = i > j ? __fmul_rn(c[nt][e], expf(__fsub_rn(s.G[i], s.G[j]))) : 0.0f;
            s.Lg[i * kLdC + j] = lg;
            s.Ls[i * kLdC + j] = __fmul_rn(s.Bt[i], lg);
        }
    __syncthreads();
    solve_t(s.Ls, s.Ts, s.Ps);
}

/* Row partial sums of a [64][128] accumulator strip times a [64][128] tile X, over this
 * warp's 64 columns: reduced over the quad and written to out[half * 64 + row]. */
__device__ __forceinline__ void strip_rowdot(const float (&c)[8][4], const float *X, float *out)
{
    int warp = threadIdx.x >> 5, mt = warp >> 1, n0 = (warp & 1) * 64;
    float r[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
            r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e], X[i * kLdD + d]));
        }
    r[0] = quad_sum(r[0]);
    r[1] = quad_sum(r[1]);
    if ((threadIdx.x & 3) == 0) {
        out[(warp & 1) * kC + 16 * mt + acc_row(0)] = r[0];
        out[(warp & 1) * kC + 16 * mt + acc_row(2)] = r[1];
    }
}

template <int kMma, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads)
    grad_kernel(gdn_chunk_problem p, const int32_t *chunks, int64_t nchunks, const TIn *q,
                const TIn *k, const TIn *v, const TIn *dout, const float *gate, const float *beta,
                const float *Vn, const float *A, const float *hs, const float *dhs, float *dq_hv,
                float *dk_hv, TOut *dv, float *dg, float *dbeta)
{
    extern __shared__ float smraw[];
    grad_smem s(smraw);
    int tid = threadIdx.x, warp = tid >> 5, mt = warp >> 1;
    int64_t ci = blockIdx.x, hvi = blockIdx.y;
    int64_t tok0 = chunks[2 * ci], nc = chunks[2 * ci + 1], hq = hvi / (p.hv / p.h);
    size_t row0 = static_cast<size_t>(hvi) * p.tokens + tok0;
    int dkp = round32(p.dk);
    for (int e = tid; e < kC * kMaxD; e += kThreads) {
        int i = e / kMaxD, d = e % kMaxD;
        bool on = i < nc && d < p.dk;
        size_t off = (static_cast<size_t>(tok0 + i) * p.h + hq) * p.dk + d;
        s.Ks[i * kLdD + d] = on ? ldf(k + off) : 0.0f;
        s.Qs[i * kLdD + d] = on ? ldf(q + off) : 0.0f;
    }
    for (int e = tid; e < kC * kC; e += kThreads) {
        int i = e / kC, j = e % kC;
        s.As[i * kLdC + j] = i < nc ? A[(row0 + i) * kC + j] : 0.0f;
    }
    if (tid < kC) {
        s.Bt[tid] = tid < nc ? beta[(tok0 + tid) * p.hv + hvi] : 0.0f;
        s.dbv[tid] = 0.0f;
    }
    if (tid == 0)
        chunk_cumsum(p, gate, tok0, nc, hvi, s.G);
    __syncthreads();
    if (tid < kC) {
        s.Ex[tid] = expf(s.G[tid]);
        s.F[tid] = expf(__fsub_rn(s.G[kC - 1], s.G[tid]));
    }
    grad_solve<kMma>(p, s);

    /* the value columns, 32 at a time */
    size_t ns = static_cast<size_t>(p.dk) * p.dv,
           c0 = (static_cast<size_t>(hvi) * nchunks + ci) * ns;
    const float *Sg = hs + c0, *dSg = dhs + c0;
    float cQ[8][4] = {}, cK[8][4] = {}, cW[8][4] = {}, cA[4][4] = {}, cT[4][4] = {};
    float sdot = 0.0f;
    for (int v0 = 0; v0 < p.dv; v0 += kVB) {
        __syncthreads();
        for (int e = tid; e < kMaxD * kVB; e += kThreads) {
            int r = e / kVB, c = e % kVB;
            bool on = r < p.dk && v0 + c < p.dv;
            float x = on ? Sg[static_cast<size_t>(r) * p.dv + v0 + c] : 0.0f;
            float y = on ? dSg[static_cast<size_t>(r) * p.dv + v0 + c] : 0.0f;
            s.Sb[r * kLdB + c] = x;
            s.dSb[r * kLdB + c] = y;
            sdot = __fadd_rn(sdot, __fmul_rn(x, y));
        }
        for (int e = tid; e < kC * kVB; e += kThreads) {
            int i = e / kVB, c = e % kVB;
            bool on = i < nc && v0 + c < p.dv;
            size_t off = (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + v0 + c;
            s.Vnb[i * kLdB + c] = on ? Vn[(row0 + i) * p.dv + v0 + c] : 0.0f;
            s.dOb[i * kLdB + c] = on ? ldf(dout + off) : 0.0f;
            s.Vb[i * kLdB + c] = on ? ldf(v + off) : 0.0f;
        }
        __syncthreads();
        { /* dVn = diag(F) K dS' + A^T dO, [64][32] */
            int n0 = 16 * (warp & 1);
            float c[2][4] = {};
            auto aK = [&](int r, int kk) {
                return __fmul_rn(s.F[16 * mt + r], s.Ks[(16 * mt + r) * kLdD + kk]);
            };
            auto bS = [&](int kk, int j) { return s.dSb[kk * kLdB + n0 + j]; };
            auto aA = [&](int r, int kk) { return s.As[kk * kLdC + 16 * mt + r]; };
            auto bO = [&](int kk, int j) { return s.dOb[kk * kLdB + n0 + j]; };
            mma_strip<kMma, 2>(c, dkp, aK, bS);
            mma_strip<kMma, 2>(c, kC, aA, bO);
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s.dVb[(16 * mt + acc_row(e)) * kLdB + n0 + acc_col(nt, e)] = c[nt][e];
        }
        __syncthreads();
        { /* the sums over the value columns */
            int n0 = 64 * (warp & 1), n1 = 32 * (warp & 1);
            auto aO = [&](int r, int kk) { return s.dOb[(16 * mt + r) * kLdB + kk]; };
            auto aV = [&](int r, int kk) { return s.Vnb[(16 * mt + r) * kLdB + kk]; };
            auto aD = [&](int r, int kk) { return s.dVb[(16 * mt + r) * kLdB + kk]; };
            auto bS = [&](int kk, int j) { return s.Sb[(n0 + j) * kLdB + kk]; };
            auto bdS = [&](int kk, int j) { return s.dSb[(n0 + j) * kLdB + kk]; };
            auto bVn = [&](int kk, int j) { return s.Vnb[(n1 + j) * kLdB + kk]; };
            auto bBV = [&](int kk, int j) {
                return __fmul_rn(s.Bt[n1 + j], s.Vb[(n1 + j) * kLdB + kk]);
            };
            mma_strip<kMma, 8>(cQ, kVB, aO, bS);  /* dO S^T */
            mma_strip<kMma, 8>(cK, kVB, aV, bdS); /* Vn dS'^T */
            mma_strip<kMma, 8>(cW, kVB, aD, bS);  /* dVn S^T */
            mma_strip<kMma, 4>(cA, kVB, aO, bVn); /* dO Vn^T */
            mma_strip<kMma, 4>(cT, kVB, aD, bBV); /* dVn (beta V)^T */
        }
        { /* dv = diag(beta) T^T dVn, and its part of dbeta: rows(T^T dVn . V) */
            int n0 = 16 * (warp & 1);
            float c[2][4] = {}, r[2] = {0.0f, 0.0f};
            auto aT = [&](int rr, int kk) { return s.Ts[kk * kLdC + 16 * mt + rr]; };
            auto bD = [&](int kk, int j) { return s.dVb[kk * kLdB + n0 + j]; };
            mma_strip<kMma, 2>(c, kC, aT, bD);
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = 16 * mt + acc_row(e), j = n0 + acc_col(nt, e);
                    if (i < nc && v0 + j < p.dv)
                        store_out(dv + (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dv + v0 + j,
                                  __fmul_rn(s.Bt[i], c[nt][e]), p.out_dt);
                    r[e >> 1] = __fadd_rn(r[e >> 1], __fmul_rn(c[nt][e], s.Vb[i * kLdB + j]));
                }
            r[0] = quad_sum(r[0]);
            r[1] = quad_sum(r[1]);
            if ((tid & 3) == 0) {
                s.rv[(warp & 1) * kC + 16 * mt + acc_row(0)] = r[0];
                s.rv[(warp & 1) * kC + 16 * mt + acc_row(2)] = r[1];
            }
        }
        __syncthreads();
        if (tid < kC)
            s.dbv[tid] = __fadd_rn(s.dbv[tid], __fadd_rn(s.rv[tid], s.rv[kC + tid]));
    }
    __syncthreads();

    /* scale the inter-chunk parts: dQ = scale E . (dO S^T), dK = F . (Vn dS'^T); their rows
     * dotted with q and k go into dG; dW, dT (so far), dA to shared memory */
    {
        int n0 = 64 * (warp & 1), n1 = 32 * (warp & 1);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
                cQ[nt][e] = __fmul_rn(cQ[nt][e], __fmul_rn(p.scale, s.Ex[i]));
                cK[nt][e] = __fmul_rn(cK[nt][e], s.F[i]);
                s.dWs[i * kLdD + d] = -cW[nt][e];
            }
        strip_rowdot(cQ, s.Qs, s.rq);
        strip_rowdot(cK, s.Ks, s.rk);
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                s.dTs[i * kLdC + j] = cT[nt][e];
                s.dAt[i * kLdC + j] = i >= j ? cA[nt][e] : 0.0f;
            }
        s.red[tid] = sdot;
    }
    __syncthreads();
    { /* dT += dW (diag(beta E) K)^T, strictly lower; Y = T^T dW: dK += diag(beta E) Y */
        int n0 = 64 * (warp & 1), n1 = 32 * (warp & 1);
        float c[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                c[nt][e] = s.dTs[(16 * mt + acc_row(e)) * kLdC + n1 + acc_col(nt, e)];
        auto aW = [&](int r, int kk) { return s.dWs[(16 * mt + r) * kLdD + kk]; };
        auto bK = [&](int kk, int j) {
            return __fmul_rn(__fmul_rn(s.Bt[n1 + j], s.Ex[n1 + j]), s.Ks[(n1 + j) * kLdD + kk]);
        };
        mma_strip<kMma, 4>(c, dkp, aW, bK);
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                s.dTs[i * kLdC + j] = i > j ? c[nt][e] : 0.0f;
            }
        float cY[8][4] = {};
        auto aTt = [&](int r, int kk) { return s.Ts[kk * kLdC + 16 * mt + r]; };
        auto bW = [&](int kk, int j) { return s.dWs[kk * kLdD + n0 + j]; };
        mma_strip<kMma, 8>(cY, kC, aTt, bW);
        strip_rowdot(cY, s.Ks, s.ry);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e);
                cK[nt][e] = __fadd_rn(cK[nt][e], __fmul_rn(__fmul_rn(s.Bt[i], s.Ex[i]), cY[nt][e]));
            }
    }
    __syncthreads();
    { /* P = T^T dT */
        int n1 = 32 * (warp & 1);
        float c[4][4] = {};
        auto aTt = [&](int r, int kk) { return s.Ts[kk * kLdC + 16 * mt + r]; };
        auto bT = [&](int kk, int j) { return s.dTs[kk * kLdC + n1 + j]; };
        mma_strip<kMma, 4>(c, kC, aTt, bT);
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s.Pp[(16 * mt + acc_row(e)) * kLdC + n1 + acc_col(nt, e)] = c[nt][e];
    }
    __syncthreads();
    { /* dL = -(P T^T), strictly lower, over dT */
        int n1 = 32 * (warp & 1);
        float c[4][4] = {};
        auto aP = [&](int r, int kk) { return s.Pp[(16 * mt + r) * kLdC + kk]; };
        auto bTt = [&](int kk, int j) { return s.Ts[(n1 + j) * kLdC + kk]; };
        mma_strip<kMma, 4>(c, kC, aP, bTt);
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), j = n1 + acc_col(nt, e);
                s.dTs[i * kLdC + j] = i > j ? -c[nt][e] : 0.0f;
            }
    }
    __syncthreads();
    if (tid < kC) { /* rows: dL . Lg, dA . A */
        int i = tid;
        float l = 0.0f, m = 0.0f;
        for (int j = 0; j < kC; j++) {
            l = __fadd_rn(l, __fmul_rn(s.dTs[i * kLdC + j], s.Lg[i * kLdC + j]));
            m = __fadd_rn(m, __fmul_rn(s.dAt[i * kLdC + j], s.As[i * kLdC + j]));
        }
        s.rowL[i] = l;
        s.rowM[i] = m;
    } else if (tid < 2 * kC) { /* columns: diag(beta) dL . Lg, dA . A */
        int j = tid - kC;
        float l = 0.0f, m = 0.0f;
        for (int i = 0; i < kC; i++) {
            l = __fadd_rn(l,
                          __fmul_rn(s.Bt[i], __fmul_rn(s.dTs[i * kLdC + j], s.Lg[i * kLdC + j])));
            m = __fadd_rn(m, __fmul_rn(s.dAt[i * kLdC + j], s.As[i * kLdC + j]));
        }
        s.colN[j] = l;
        s.colM[j] = m;
    }
    __syncthreads();
    /* dAs = scale dA . Gamma over dA; Bl + Bl^T (Bl = dL . diag(beta) Gamma) over P */
    for (int e = tid; e < kC * kC; e += kThreads) {
        int i = e / kC, j = e % kC;
        float gij = i >= j ? expf(__fsub_rn(s.G[i], s.G[j])) : 0.0f;
        float gji = j >= i ? expf(__fsub_rn(s.G[j], s.G[i])) : 0.0f;
        s.dAt[i * kLdC + j] = __fmul_rn(__fmul_rn(p.scale, s.dAt[i * kLdC + j]), gij);
        s.Pp[i * kLdC + j] = __fadd_rn(__fmul_rn(__fmul_rn(s.dTs[i * kLdC + j], s.Bt[i]), gij),
                                       __fmul_rn(__fmul_rn(s.dTs[j * kLdC + i], s.Bt[j]), gji));
    }
    __syncthreads();
    { /* dq̂ = dQ + dAs K; dk̂ = dK + dAs^T Q + (Bl + Bl^T) K */
        int n0 = 64 * (warp & 1);
        auto aD = [&](int r, int kk) { return s.dAt[(16 * mt + r) * kLdC + kk]; };
        auto aDt = [&](int r, int kk) { return s.dAt[kk * kLdC + 16 * mt + r]; };
        auto aB = [&](int r, int kk) { return s.Pp[(16 * mt + r) * kLdC + kk]; };
        auto bK = [&](int kk, int j) { return s.Ks[kk * kLdD + n0 + j]; };
        auto bQ = [&](int kk, int j) { return s.Qs[kk * kLdD + n0 + j]; };
        mma_strip<kMma, 8>(cQ, kC, aD, bK);
        mma_strip<kMma, 8>(cK, kC, aDt, bQ);
        mma_strip<kMma, 8>(cK, kC, aB, bK);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int i = 16 * mt + acc_row(e), d = n0 + acc_col(nt, e);
                if (i < nc && d < p.dk) {
                    size_t off = (static_cast<size_t>(tok0 + i) * p.hv + hvi) * p.dk + d;
                    dq_hv[off] = cQ[nt][e];
                    dk_hv[off] = cK[nt][e];
                }
            }
    }
    if (tid < kC) { /* dbeta and dG of row i */
        int i = tid;
        float ywk = __fadd_rn(s.ry[i], s.ry[kC + i]);
        float gq = __fadd_rn(s.rq[i], s.rq[kC + i]), gk = __fadd_rn(s.rk[i], s.rk[kC + i]);
        float be = __fmul_rn(s.Bt[i], s.Ex[i]);
        float db = __fadd_rn(__fadd_rn(s.dbv[i], __fmul_rn(s.Ex[i], ywk)), s.rowL[i]);
        float x = __fsub_rn(gq, gk);
        x = __fadd_rn(x, __fmul_rn(be, ywk));
        x = __fadd_rn(x, __fsub_rn(s.rowM[i], s.colM[i]));
        x = __fadd_rn(x, __fsub_rn(__fmul_rn(s.Bt[i], s.rowL[i]), s.colN[i]));
        s.dG[i] = x;
        s.rv[i] = gk;
        if (i < nc)
            dbeta[(tok0 + i) * p.hv + hvi] = db;
    }
    __syncthreads();
    if (tid == 0) { /* the last row's terms, then dg = the reverse cumulative sum of dG */
        float gk = 0.0f, sd = 0.0f;
        for (int i = 0; i < kC; i++)
            gk = __fadd_rn(gk, s.rv[i]);
        for (int t = 0; t < kThreads; t++)
            sd = __fadd_rn(sd, s.red[t]);
        float acc = __fadd_rn(gk, __fmul_rn(s.Ex[kC - 1], sd));
        for (int i = kC - 1; i >= 0; i--) {
            acc = __fadd_rn(acc, s.dG[i]);
            if (i < nc)
                dg[(tok0 + i) * p.hv + hvi] = acc;
        }
    }
}

/* dx of each (token, q/k head): the FP32 sum of its value heads' rows of d_hv in increasing
 * hv [GDN-GVA], stored as the io type. One thread per element. */
template <typename TOut>
__global__ void qk_sum_kernel(gdn_chunk_problem p, const float *d_hv, TOut *dx)
{
    int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= p.tokens * p.h * p.dk)
        return;
    int64_t tok = e / (p.h * p.dk), hq = (e / p.dk) % p.h, d = e % p.dk, grp = p.hv / p.h;
    float acc = 0.0f;
    for (int64_t hv = hq * grp; hv < (hq + 1) * grp; hv++)
        acc = __fadd_rn(acc, d_hv[(tok * p.hv + hv) * p.dk + d]);
    store_out(dx + e, acc, p.out_dt);
}

template <int kMma, typename TIn, typename TOut>
cudaError_t launch_bwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, const void *q,
                       const void *k, const void *v, const float *g, const float *beta,
                       const float *h0, const void *dout, const float *dht, void *dq, void *dk,
                       void *dv, float *dg, float *dbeta, float *dh0, cudaStream_t st)
{
    auto wy = wy_kernel<kMma, TIn>;
    auto state = state_kernel<kMma, TIn, TOut>;
    auto dstate = dstate_kernel<kMma, TIn>;
    auto grad = grad_kernel<kMma, TIn, TOut>;
    cudaError_t err =
        cudaFuncSetAttribute(wy, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kWySmem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(state, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kStateSmem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(dstate, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kDstateSmem);
    if (err == cudaSuccess)
        err =
            cudaFuncSetAttribute(grad, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kGradSmem);
    if (err != cudaSuccess)
        return err;
    float *W = plan.ws, *U = W + static_cast<size_t>(p.hv) * p.tokens * p.dk;
    float *A = U + static_cast<size_t>(p.hv) * p.tokens * p.dv;
    float *dq_hv = plan.dqk, *dk_hv = dq_hv + static_cast<size_t>(p.tokens) * p.hv * p.dk;
    const TIn *tq = static_cast<const TIn *>(q), *tk = static_cast<const TIn *>(k);
    const TIn *tv = static_cast<const TIn *>(v), *tdo = static_cast<const TIn *>(dout);
    dim3 cols((unsigned)((p.dv + kBV - 1) / kBV), (unsigned)p.hv, (unsigned)p.nseq);
    if (plan.nchunks > 0) {
        wy<<<dim3((unsigned)plan.nchunks, (unsigned)p.hv), kThreads, kWySmem, st>>>(
            p, plan.chunks, tq, tk, tv, g, beta, W, U, A);
        state<<<cols, kThreads, kStateSmem, st>>>(p, tq, tk, g, W, U, A, h0, nullptr, nullptr,
                                                  plan.chunk0, plan.nchunks, plan.hs, U);
    }
    if (p.nseq > 0)
        dstate<<<cols, kThreads, kDstateSmem, st>>>(p, plan.chunk0, plan.nchunks, tq, tk, tdo, g, W,
                                                    A, dht, plan.dhs, dh0);
    if (plan.nchunks > 0)
        grad<<<dim3((unsigned)plan.nchunks, (unsigned)p.hv), kThreads, kGradSmem, st>>>(
            p, plan.chunks, plan.nchunks, tq, tk, tv, tdo, g, beta, U, A, plan.hs, plan.dhs, dq_hv,
            dk_hv, static_cast<TOut *>(dv), dg, dbeta);
    int64_t nqk = p.tokens * p.h * p.dk;
    if (dq && dk && nqk > 0) {
        unsigned nb = (unsigned)((nqk + 255) / 256);
        qk_sum_kernel<TOut><<<nb, 256, 0, st>>>(p, dq_hv, static_cast<TOut *>(dq));
        qk_sum_kernel<TOut><<<nb, 256, 0, st>>>(p, dk_hv, static_cast<TOut *>(dk));
    }
    return cudaGetLastError();
}

cudaError_t launch_bwd_fast(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, const void *q,
                            const void *k, const void *v, const float *g, const float *beta,
                            const float *h0, const void *dout, const float *dht, void *dq, void *dk,
                            void *dv, float *dg, float *dbeta, float *dh0, int mma, cudaStream_t st)
{
    if (plan.ws_floats * 2 < static_cast<size_t>(p.hv) * p.tokens * kWsBwdFast)
        return cudaErrorInvalidValue;
    wy_pick wy = wy_fast_pick(p);
    cudaError_t err =
        cudaFuncSetAttribute(wy.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wy.smem);
    int lw = lean_warps(p);
    const bool fused = mma != kGdnMmaBf16Smem;
    const int64_t walk_blocks = p.dv / (16 * lw) * p.hv * p.nseq;
    /* the reverse walk beside the state pass (gdn_bwd_overlap) instead of after it */
    const bool overlap = !fused && plan.nchunks > 0 &&
                         gdn_bwd_overlap_on(gdn_bwd_overlap, lw, walk_blocks, sm_count());
    auto sk = !overlap          ? state_pick<false>(lw)
              : lean_on_wgmma() ? state_one_stage<true>()
                                : state_one_stage<false>();
    auto dk_ = lean_on_wgmma() ? dstate_of<true>(lw) : dstate_of<false>(lw);
    if (err == cudaSuccess)
        err =
            cudaFuncSetAttribute(sk.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sk.smem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(dk_.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)dk_.smem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(grad_fast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)kGradFastSmem);
    if (err != cudaSuccess)
        return err;
    size_t rows = static_cast<size_t>(p.hv) * p.tokens;
    bf16 *W = reinterpret_cast<bf16 *>(plan.ws), *U = W + rows * kMaxD, *A = U + rows * kMaxD;
    bf16 *Tw = A + rows * kC, *dVn = Tw + rows * kC;
    bf16 *hs = reinterpret_cast<bf16 *>(plan.hs), *dhs = reinterpret_cast<bf16 *>(plan.dhs);
    const bf16 *tq = static_cast<const bf16 *>(q), *tk = static_cast<const bf16 *>(k);
    const bf16 *tv = static_cast<const bf16 *>(v), *tdo = static_cast<const bf16 *>(dout);
    /* dstate_lean_kernel: dS' into dhs, dVn, dh0 (it reads W and A, never the states) */
    auto reverse_walk = [&](cudaStream_t s) {
        dk_.fn<<<dim3((unsigned)(p.dv / dk_.cols), (unsigned)p.hv, (unsigned)p.nseq), dk_.threads,
                 dk_.smem, s>>>(p, plan.chunk0, plan.nchunks, tq, tk, tdo, g, W, A, dht, dhs, dVn,
                                dh0);
    };
    if (plan.nchunks > 0 && fused)
        err = mma == kGdnMmaBf16Wg && fl::wg::available()
                  ? launch_fused<false, true>(p, q, k, v, g, beta, h0, nullptr, nullptr,
                                              plan.chunk0, plan.nchunks, W, A, Tw, hs, U, st)
                  : launch_fused<false>(p, q, k, v, g, beta, h0, nullptr, nullptr, plan.chunk0,
                                        plan.nchunks, W, A, Tw, hs, U, st);
    if (err != cudaSuccess)
        return err;
    if (plan.nchunks > 0 && !fused) {
        const gdn_chunk_problem ps = with_solve(p);
        auto wy_range = [&](int64_t lo, int64_t hi, cudaStream_t s) {
            if (hi > lo)
                wy.fn<<<dim3((unsigned)(hi - lo), wy.heads), kThreads, wy.smem, s>>>(
                    ps, plan.chunks + 2 * lo, tq, tk, tv, g, beta, W, U, A, Tw);
        };
        const dim3 grid((unsigned)(p.dv / sk.cols), (unsigned)p.hv, (unsigned)p.nseq);
        auto walk = [&](const gdn_chunk_problem &pp, const float *a, float *b, cudaStream_t s) {
            sk.fn<<<grid, sk.threads, sk.smem, s>>>(pp, tq, tk, g, W, U, A, a, nullptr, b,
                                                    plan.chunk0, plan.nchunks, hs, U);
        };
        if (overlap) { /* wy, then the state pass beside the reverse walk */
            wy_range(0, plan.nchunks, st);
            side_fork sf;
            err = sf.open(st);
            if (err == cudaSuccess) {
                reverse_walk(sf.side);
                walk(p, h0, nullptr, st);
            }
            err = sf.close(st, err); /* grad_fast_kernel after both walks */
            if (err != cudaSuccess)
                return err;
        } else {
            /* the states between pieces in the value heads' dq̂, dk̂ (written only later, by
             * grad_fast_kernel) */
            const size_t nqk = 2 * static_cast<size_t>(p.tokens) * p.hv * p.dk;
            err = wy_and_walk(p, plan, static_cast<int64_t>(grid.x) * grid.y * grid.z, plan.dqk,
                              nqk * sizeof(bf16), h0, nullptr, st, wy_range, walk);
            if (err != cudaSuccess)
                return err;
        }
    }
    if (p.nseq > 0 && !overlap)
        reverse_walk(st);
    if (plan.nchunks > 0)
        grad_fast_kernel<<<dim3((unsigned)plan.nchunks, (unsigned)p.hv), kThreads, kGradFastSmem,
                           st>>>(p, plan.chunks, plan.nchunks, tq, tk, tv, tdo, g, beta, U, A, Tw,
                                 dVn, hs, dhs, static_cast<bf16 *>(dv), dg, dbeta,
                                 reinterpret_cast<bf16 *>(plan.dqk));
    int64_t nqk = p.tokens * p.h * p.dk;
    if (dq && dk && nqk > 0) {
        unsigned nb = (unsigned)((nqk / 8 + 255) / 256);
        qk_sum_h_kernel<<<dim3(nb, 2), 256, 0, st>>>(p, reinterpret_cast<const bf16 *>(plan.dqk),
                                                     static_cast<bf16 *>(dq),
                                                     static_cast<bf16 *>(dk));
    }
    return cudaGetLastError();
}

} // namespace

bool gdn_chunk_wgmma_available()
{
    return fl::wg::available();
}

bool gdn_chunk_fits(int64_t dk, int64_t dv)
{
    return dk >= 1 && dv >= 1 && dk <= kMaxD && dv <= kMaxD;
}

cudaError_t gdn_chunk_plan_make(const gdn_chunk_problem &p, const int32_t *cu_host,
                                gdn_chunk_plan *plan)
{
    std::vector<int32_t> tab, first;
    for (int64_t n = 0; n < p.nseq; n++) {
        int64_t s = cu_host ? cu_host[n] : n * p.seq_t;
        int64_t l = cu_host ? static_cast<int64_t>(cu_host[n + 1]) - cu_host[n] : p.seq_t;
        first.push_back(static_cast<int32_t>(tab.size() / 2));
        for (int64_t i0 = 0; i0 < l; i0 += kC) {
            tab.push_back(static_cast<int32_t>(s + i0));
            tab.push_back(static_cast<int32_t>(l - i0 < kC ? l - i0 : kC));
        }
    }
    first.push_back(static_cast<int32_t>(tab.size() / 2));
    plan->nchunks = static_cast<int64_t>(tab.size() / 2);
    plan->ws_floats = static_cast<size_t>(p.hv) * p.tokens * (p.dk + p.dv + kC);
    cudaError_t err = cudaMalloc(&plan->chunks, (tab.size() + 2) * sizeof(int32_t));
    if (err == cudaSuccess && !tab.empty())
        err = cudaMemcpy(plan->chunks, tab.data(), tab.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->chunk0, first.size() * sizeof(int32_t));
    if (err == cudaSuccess)
        err = cudaMemcpy(plan->chunk0, first.data(), first.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->ws, (plan->ws_floats + 1) * sizeof(float));
    return err;
}

cudaError_t gdn_chunk_plan_make_bwd(const gdn_chunk_problem &p, const int32_t *cu_host,
                                    gdn_chunk_plan *plan, bool narrow)
{
    static_assert(sizeof(bf16) == 2, "the narrow plan's element");
    cudaError_t err = gdn_chunk_plan_make(p, cu_host, plan);
    size_t el = narrow ? sizeof(bf16) : sizeof(float);
    size_t nst = static_cast<size_t>(p.hv) * plan->nchunks * p.dk * p.dv;
    size_t nqk = 2 * static_cast<size_t>(p.tokens) * p.hv * p.dk;
    plan->narrow = narrow;
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->hs, (nst + 2) * el);
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->dhs, (nst + 2) * el);
    if (err == cudaSuccess)
        err = cudaMalloc(&plan->dqk, (nqk + 2) * el);
    return err;
}

void gdn_chunk_plan_free(gdn_chunk_plan *plan)
{
    for (void *x : {(void *)plan->chunks, (void *)plan->chunk0, (void *)plan->ws, (void *)plan->hs,
                    (void *)plan->dhs, (void *)plan->dqk})
        if (x)
            cudaFree(x);
    plan->chunks = plan->chunk0 = nullptr;
    plan->ws = plan->hs = plan->dhs = plan->dqk = nullptr;
}

cudaError_t gdn_chunk_fwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, void *o, float *ht, cudaStream_t st)
{
    if (!gdn_chunk_fits(p.dk, p.dv) || p.hv % p.h != 0)
        return cudaErrorInvalidValue;
    if (gdn_chunk_staged(mma)) {
        if (p.dk != kMaxD || p.dv != kMaxD || io != kGdnIoBf16)
            return cudaErrorInvalidValue;
        if (mma == kGdnMmaBf16Smem)
            return launch_fast(p, plan, q, k, v, g, beta, h0, o, ht, st);
        if (mma == kGdnMmaBf16Wg && fl::wg::available())
            return launch_fused<true, true>(p, q, k, v, g, beta, h0, o, ht, nullptr, 0, nullptr,
                                            nullptr, nullptr, nullptr, nullptr, st);
        return launch_fused<true>(p, q, k, v, g, beta, h0, o, ht, nullptr, 0, nullptr, nullptr,
                                  nullptr, nullptr, nullptr, st);
    }
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

cudaError_t gdn_chunk_bwd(const gdn_chunk_problem &p, const gdn_chunk_plan &plan, int mma, int io,
                          const void *q, const void *k, const void *v, const float *g,
                          const float *beta, const float *h0, const void *dout, const float *dht,
                          void *dq, void *dk, void *dv, float *dg, float *dbeta, float *dh0,
                          cudaStream_t st)
{
    if (!gdn_chunk_fits(p.dk, p.dv) || p.hv % p.h != 0 || plan.hs == nullptr)
        return cudaErrorInvalidValue;
    if (gdn_chunk_staged(mma))
        return p.dk == kMaxD && p.dv == kMaxD && io == kGdnIoBf16
                   ? launch_bwd_fast(p, plan, q, k, v, g, beta, h0, dout, dht, dq, dk, dv, dg,
                                     dbeta, dh0, mma, st)
                   : cudaErrorInvalidValue;
    if ((mma != kGdnMmaBf16 && mma != kGdnMmaTf32x3) || plan.narrow)
        return cudaErrorInvalidValue;
    if (mma == kGdnMmaBf16 && io == kGdnIoBf16)
        return launch_bwd<kGdnMmaBf16, bf16, bf16>(p, plan, q, k, v, g, beta, h0, dout, dht, dq, dk,
                                                   dv, dg, dbeta, dh0, st);
    if (mma == kGdnMmaTf32x3 && io == kGdnIoBf16)
        return launch_bwd<kGdnMmaTf32x3, bf16, bf16>(p, plan, q, k, v, g, beta, h0, dout, dht, dq,
                                                     dk, dv, dg, dbeta, dh0, st);
    if (mma == kGdnMmaBf16)
        return launch_bwd<kGdnMmaBf16, float, float>(p, plan, q, k, v, g, beta, h0, dout, dht, dq,
                                                     dk, dv, dg, dbeta, dh0, st);
    return launch_bwd<kGdnMmaTf32x3, float, float>(p, plan, q, k, v, g, beta, h0, dout, dht, dq, dk,
                                                   dv, dg, dbeta, dh0, st);
}

} // namespace qc
