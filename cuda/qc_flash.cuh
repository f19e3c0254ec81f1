/* qc_flash.cuh: flash-style softmax attention of spec/attention.md [ATTN-FWD], [ATTN-BWD]
 * on tensor cores (mma.sync m16n8k16, BF16 or FP16 operands, FP32 accumulation): a tiled
 * online softmax with no S x S matrix in memory, the log-sum-exp saved for the backward, and
 * a backward in two passes without atomics (dq per query tile; dk and dv per key tile).
 * Layouts sbhd, bshd and thd (varlen, padded offsets), causal (top-left) and no mask, GQA and
 * MQA, head dims up to 576/512 (the absorbed latent form). The probabilities P and dS of the
 * second product of each pass are FP32 values; under kSplit each is given to the tensor core
 * as two 16-bit parts (hi + lo, about 16 bits of precision), which keeps the result inside
 * [ATTN-TOL]; without it (the peers' arithmetic) P and dS are rounded to 16 bits once. The
 * plugin (cuda/qc_flash.cu) uses the split form; cuda/bench/attn_bench.cu times both. */
#ifndef QC_FLASH_CUH
#define QC_FLASH_CUH

#ifdef QC_EMU
#include "emu/qc_emu.h" /* on the CPU, to check the kernels' logic (cuda/emu/qc_emu.h) */
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#include <math.h>
#include <stdint.h>

#include "qspec/attn_params.h"
#include "qspec/format.h"

namespace qc
{
namespace fl
{

/* The request's geometry: token t of a layout's sequence s is row base(s) + i * tstride of
 * the [tokens, heads, dim] arrays; thd sequences are delimited by cu_q/cu_kv (device). */
struct geo {
    int layout, mask, dt;
    int b, sq, sk, h, hkv, d, dv;
    const int32_t *cu_q, *cu_kv, *pad_q, *pad_kv;
    float scale;

    __device__ int len(int kv, int s) const
    {
        if (layout == QS_ATTN_THD) {
            const int32_t *cu = kv ? cu_kv : cu_q;
            return cu[s + 1] - cu[s];
        }
        return kv ? sk : sq;
    }
    /* the token index of position 0 of sequence s, and the token step between positions */
    __device__ int64_t base(int kv, int s) const
    {
        if (layout == QS_ATTN_SBHD)
            return s;
        if (layout == QS_ATTN_BSHD)
            return static_cast<int64_t>(s) * (kv ? sk : sq);
        const int32_t *pad = kv ? pad_kv : pad_q, *cu = kv ? cu_kv : cu_q;
        return pad ? pad[s] : cu[s];
    }
    __device__ int64_t tstride() const
    {
        return layout == QS_ATTN_SBHD ? b : 1;
    }
};

template <typename T> struct ops;
template <> struct ops<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float round(float x)
    {
        return __bfloat162float(__float2bfloat16_rn(x));
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
#ifdef QC_EMU
        emu::mma16816<__nv_bfloat16>(c, a, b0, b1);
#else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static constexpr float kMax = 3.0e38f; /* no overflow to guard against */
};
template <> struct ops<__half> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float round(float x)
    {
        return __half2float(__float2half_rn(x));
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
#ifdef QC_EMU
        emu::mma16816<__half>(c, a, b0, b1);
#else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static constexpr float kMax = 65504.0f; /* a larger dS would become inf */
};

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
#ifdef QC_EMU
    return emu::smem_offset(p);
#else
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
#ifdef QC_EMU
    emu::ldsm<false>(r, p);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#endif
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
#ifdef QC_EMU
    emu::ldsm<true>(r, p);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
#endif
}
__device__ __forceinline__ float ex2(float x)
{
#ifdef QC_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}
__device__ __forceinline__ void cp16(void *s, const void *g)
{
#ifdef QC_EMU
    emu::cp_async(s, g, true);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(s)), "l"(g));
#endif
}
__device__ __forceinline__ void cp_wait()
{
#ifdef QC_EMU
    emu::cp_land_all();
#else
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
#endif
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps; /* rows of the tile the warps own, 16 each */

/* Rows [0, nrows) x columns [0, ncols) of a tile in shared memory (row stride ld elements),
 * from global rows r0 + r of g (row stride rs elements) for r < valid and columns c0 + c
 * below dim; the rest is zero. 16-byte copies when vec (dim, rs and c0 multiples of 8). */
template <typename T>
__device__ void load_tile(T *sm, int ld, int nrows, int ncols, const T *g, int64_t rs, int r0,
                          int valid, int c0, int dim, bool vec)
{
    if (vec) {
        int per = ncols / 8;
        for (int e = threadIdx.x; e < nrows * per; e += kThreads) {
            int r = e / per, c = (e % per) * 8;
            T *dst = sm + r * ld + c;
            if (r < valid && c0 + c < dim)
                cp16(dst, g + (r0 + r) * rs + c0 + c);
            else
                *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
        }
    } else {
        for (int e = threadIdx.x; e < nrows * ncols; e += kThreads) {
            int r = e / ncols, c = e % ncols;
            float zero = 0.0f;
            sm[r * ld + c] =
                r < valid && c0 + c < dim ? g[(r0 + r) * rs + c0 + c] : static_cast<T>(zero);
        }
    }
}

/* acc[NB][4] += A(16 x 16*KS, rows of sa at stride ld) * B, with B^T rows (n) of sb at
 * stride ldb: the product of a row tile and the transpose of another (S = Q K^T). */
template <typename T, int KS, int NB>
__device__ __forceinline__ void mma_abt(float (*acc)[4], const T *sa, int lda, const T *sb, int ldb)
{
    int lane = threadIdx.x & 31;
    const T *pa = sa + ((lane & 7) + ((lane >> 3) & 1) * 8) * lda + (lane >> 4) * 8;
    const T *pb = sb + ((lane & 7) + (lane >> 4) * 8) * ldb + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        uint32_t a[4];
        ldsm_x4(a, pa + kk * 16);
#pragma unroll
        for (int nb = 0; nb < NB / 2; nb++) {
            uint32_t bf[4];
            ldsm_x4(bf, pb + nb * 16 * ldb + kk * 16);
            ops<T>::mma(acc[2 * nb], a, bf[0], bf[1]);
            ops<T>::mma(acc[2 * nb + 1], a, bf[2], bf[3]);
        }
    }
}

/* The A fragments of a 16 x (8*NB) FP32 accumulator tile, as hi (+ lo under split). */
template <typename T, int NB, bool kSplit>
__device__ __forceinline__ void to_a(const float (*x)[4], uint32_t (*hi)[4], uint32_t (*lo)[4])
{
#pragma unroll
    for (int kk = 0; kk < NB / 2; kk++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            /* R0: (g, 2t) of block 2kk; R1: (g+8, 2t) of 2kk; R2, R3: the same of 2kk+1 */
            const float *c = x[2 * kk + (e >> 1)] + (e & 1) * 2;
            hi[kk][e] = ops<T>::pack(c[0], c[1]);
            if (kSplit) {
                float h0 = ops<T>::round(c[0]), h1 = ops<T>::round(c[1]);
                lo[kk][e] = ops<T>::pack(c[0] - h0, c[1] - h1);
            }
        }
    }
}

/* acc[NB][4] += X(16 x 16*KS, fragments hi/lo) * B, B rows (k) of sb at stride ldb, columns
 * from 0 (the second product: P V, dS K, P^T dO, dS^T Q). */
template <typename T, int KS, int NB, bool kSplit>
__device__ __forceinline__ void mma_xb(float (*acc)[4], const uint32_t (*hi)[4],
                                       const uint32_t (*lo)[4], const T *sb, int ldb)
{
    int lane = threadIdx.x & 31;
    const T *pb = sb + ((lane & 7) + ((lane >> 3) & 1) * 8) * ldb + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
#pragma unroll
        for (int nb = 0; nb < NB / 2; nb++) {
            uint32_t bf[4];
            ldsm_x4_t(bf, pb + kk * 16 * ldb + nb * 16);
            ops<T>::mma(acc[2 * nb], hi[kk], bf[0], bf[1]);
            ops<T>::mma(acc[2 * nb + 1], hi[kk], bf[2], bf[3]);
            if (kSplit) {
                ops<T>::mma(acc[2 * nb], lo[kk], bf[0], bf[1]);
                ops<T>::mma(acc[2 * nb + 1], lo[kk], bf[2], bf[3]);
            }
        }
    }
}

/* Tile shapes: KD (q/k head dim, padded), DV (v head dim, padded), BN (the streamed tile's
 * rows), OC (the output columns one block computes), NBUF (buffers of the streamed tile). */
template <int KD_, int DV_, int BN_, int OC_, int NBUF_, int OCV_ = OC_> struct shape {
    static constexpr int KD = KD_, DV = DV_, BN = BN_, OC = OC_;
    static constexpr int OCV = OCV_; /* dkv: the dv chunk (OC is the dk chunk) */
    static constexpr int OMAX = OC > OCV ? OC : OCV;
    static constexpr int NBUF = NBUF_; /* 2: the next streamed tile loads during this one */
    static constexpr int LK = KD + 8, LV = DV + 8; /* padded rows: no bank conflicts */
};

/* [ATTN-FWD], [ATTN-LSE]: block (query tile, head, sequence x column chunk of OC). */
template <typename T, class S, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    fwd_kernel(geo g, const T *q, const T *k, const T *v, float *o, float *lse)
{
    extern __shared__ __align__(16) unsigned char smraw[];
    constexpr int LK = S::LK, LO = S::OC + 8, BN = S::BN;
    T *sq = reinterpret_cast<T *>(smraw), *skv = sq + kRows * LK;
    int nch = (g.dv + S::OC - 1) / S::OC;
    int s = blockIdx.z / nch, c0 = (blockIdx.z % nch) * S::OC, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    /* causal: the longest rows first, so the short ones fill the last wave */
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    int i0 = qt * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return; /* [ATTN-EMPTY-ROW] rows keep o 0, lse -inf */
    int hk = hh / (g.h / g.hkv), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gr = lane >> 2, tq = lane & 3;
    int64_t ts = g.tstride();
    bool vq = g.d % 8 == 0, vv = g.dv % 8 == 0;
    const T *qg = q + (g.base(0, s) * g.h + hh) * g.d;
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    load_tile(sq, LK, kRows, S::KD, qg, ts * g.h * g.d, i0, lq - i0, 0, g.d, vq);
    int kend = causal ? min(lk, i0 + kRows) : lk;
    float sl2 = g.scale * kLog2e;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[S::OC / 8][4];
#pragma unroll
    for (int nb = 0; nb < S::OC / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    int row0 = i0 + warp * 16 + gr;
    auto load_kv = [&](int j, int buf) {
        T *bk = skv + buf * (BN * LK + BN * LO);
        load_tile(bk, LK, BN, S::KD, kg, ts * g.hkv * g.d, j, lk - j, 0, g.d, vq);
        load_tile(bk + BN * LK, LO, BN, S::OC, vg, ts * g.hkv * g.dv, j, lk - j, c0, g.dv, vv);
    };
    load_kv(0, 0);
    for (int j0 = 0, it = 0; j0 < kend; j0 += BN, it++) {
        int buf = S::NBUF == 2 ? (it & 1) : 0;
        if (S::NBUF == 1 && it > 0) {
            __syncthreads(); /* every warp is done with the previous tile */
            load_kv(j0, 0);
        }
        cp_wait();
        __syncthreads();
        if (S::NBUF == 2 && j0 + BN < kend)
            load_kv(j0 + BN, buf ^ 1); /* its buffer was freed by the barrier above */
        const T *sk = skv + buf * (BN * LK + BN * LO), *sv = sk + BN * LK;
        float x[BN / 8][4];
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
            x[nb][0] = x[nb][1] = x[nb][2] = x[nb][3] = 0.0f;
        mma_abt<T, S::KD / 16, BN / 8>(x, sq + warp * 16 * LK, LK, sk, LK);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + (e >> 1) * 8, key = j0 + nb * 8 + 2 * tq + (e & 1);
                bool ok = key < lk && (!causal || key <= row);
                x[nb][e] = ok ? x[nb][e] * sl2 : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], x[nb][e]);
            }
        float alpha[2], base[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mn = fmaxf(m[r], mx[r]);
            base[r] = mn == -INFINITY ? 0.0f : mn;
            alpha[r] = ex2(m[r] - base[r]);
            m[r] = mn;
        }
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[nb][e] = ex2(x[nb][e] - base[e >> 1]);
                ps[e >> 1] += x[nb][e];
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 1);
            ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 2);
            l[r] = l[r] * alpha[r] + ps[r];
        }
#pragma unroll
        for (int nb = 0; nb < S::OC / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[nb][e] *= alpha[e >> 1];
        uint32_t ph[BN / 16][4], pl[kSplit ? BN / 16 : 1][4];
        to_a<T, BN / 8, kSplit>(x, ph, pl);
        mma_xb<T, BN / 16, S::OC / 8, kSplit>(acc, ph, pl, sv, LO);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + r * 8;
        if (row >= lq)
            continue;
        int64_t orow = (g.base(0, s) + row * ts) * g.h + hh;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int nb = 0; nb < S::OC / 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = c0 + nb * 8 + 2 * tq + e;
                if (col < g.dv) {
                    float y = acc[nb][r * 2 + e] * inv;
                    o[orow * g.dv + col] = g.dt == QS_FP32 ? y : ops<T>::round(y);
                }
            }
        if (lse && c0 == 0 && tq == 0)
            lse[orow] = (m[r] + log2f(l[r])) * 0.69314718055994531f;
    }
}

/* D_i = sum over c of dout[i, c] * o[i, c] (FP32, o the rounded forward output) [ATTN-BWD]. */
template <typename T>
__global__ void dsum_kernel(int64_t rows, int dv, const float *o, const T *dout, float *dd)
{
    int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    float a = 0.0f;
    for (int c = threadIdx.x & 31; c < dv; c += 32)
        a += static_cast<float>(dout[r * dv + c]) * o[r * dv + c];
    for (int w = 16; w > 0; w >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, w);
    if ((threadIdx.x & 31) == 0)
        dd[r] = a;
}

/* dS = P (dP - D) [ATTN-BWD] of a thread's score rows row0 and row0 + 8 (keys j0 + 8 nb +
 * 2 tq + (e & 1)), in place of the scores x: P = exp2(S sl2 - lr) for a key below lk and
 * (causal) not after its row, else 0 (lr, dr: the two rows' lse in log2 units and D); big
 * set when a dS is beyond T's range (the FP16 fallback). */
template <int NB>
__device__ __forceinline__ void p_rows(float (*x)[4], float sl2, const float *lr, int row0, int j0,
                                       int lk, bool causal, int tq)
{
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + (e >> 1) * 8, key = j0 + nb * 8 + 2 * tq + (e & 1);
            bool ok = key < lk && (!causal || key <= row);
            x[nb][e] = ok ? ex2(x[nb][e] * sl2 - lr[e >> 1]) : 0.0f;
        }
}
template <typename T, int NB>
__device__ __forceinline__ void dsp_rows(float (*x)[4], const float (*dp)[4], const float *dr,
                                         bool &big)
{
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float ds = x[nb][e] * (dp[nb][e] - dr[e >> 1]);
            big |= fabsf(ds) > ops<T>::kMax;
            x[nb][e] = ds;
        }
}
/* the two steps at once; p_rows alone (P from the scores) and dsp_rows (dS from P) let a
 * kernel form P while dP is still being computed */
template <typename T, int NB>
__device__ __forceinline__ void ds_rows(float (*x)[4], const float (*dp)[4], float sl2,
                                        const float *lr, const float *dr, int row0, int j0, int lk,
                                        bool causal, int tq, bool &big)
{
    p_rows<NB>(x, sl2, lr, row0, j0, lk, causal, tq);
    dsp_rows<T, NB>(x, dp, dr, big);
}

/* dq of a query tile, columns [c0, c0 + OC): block (query tile, head, sequence x chunk). */
template <typename T, class S, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
              const float *dd, float *dq, int *overflow)
{
    extern __shared__ __align__(16) unsigned char smraw[];
    constexpr int LK = S::LK, LV = S::LV, BN = S::BN;
    T *sq = reinterpret_cast<T *>(smraw), *sdo = sq + kRows * LK, *skv = sdo + kRows * LV;
    int nch = (g.d + S::OC - 1) / S::OC;
    int s = blockIdx.z / nch, c0 = (blockIdx.z % nch) * S::OC, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; /* longest rows first */
    int i0 = qt * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return;
    int hk = hh / (g.h / g.hkv), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gr = lane >> 2, tq = lane & 3;
    int64_t ts = g.tstride();
    bool vq = g.d % 8 == 0, vv = g.dv % 8 == 0;
    int64_t qb = g.base(0, s);
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    load_tile(sq, LK, kRows, S::KD, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0, lq - i0, 0, g.d,
              vq);
    load_tile(sdo, LV, kRows, S::DV, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv, i0, lq - i0, 0,
              g.dv, vv);
    int kend = causal ? min(lk, i0 + kRows) : lk;
    float sl2 = g.scale * kLog2e;
    int row0 = i0 + warp * 16 + gr;
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + r * 8;
        int64_t idx = (qb + min(row, lq - 1) * ts) * g.h + hh;
        lr[r] = lse[idx] * kLog2e;
        dr[r] = dd[idx];
    }
    float acc[S::OC / 8][4];
#pragma unroll
    for (int nb = 0; nb < S::OC / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    bool big = false;
    auto load_kv = [&](int j, int buf) {
        T *bk = skv + buf * (BN * LK + BN * LV);
        load_tile(bk, LK, BN, S::KD, kg, ts * g.hkv * g.d, j, lk - j, 0, g.d, vq);
        load_tile(bk + BN * LK, LV, BN, S::DV, vg, ts * g.hkv * g.dv, j, lk - j, 0, g.dv, vv);
    };
    load_kv(0, 0);
    for (int j0 = 0, it = 0; j0 < kend; j0 += BN, it++) {
        int buf = S::NBUF == 2 ? (it & 1) : 0;
        if (S::NBUF == 1 && it > 0) {
            __syncthreads();
            load_kv(j0, 0);
        }
        cp_wait();
        __syncthreads();
        if (S::NBUF == 2 && j0 + BN < kend)
            load_kv(j0 + BN, buf ^ 1);
        const T *sk = skv + buf * (BN * LK + BN * LV), *sv = sk + BN * LK;
        float x[BN / 8][4], dp[BN / 8][4];
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                x[nb][e] = dp[nb][e] = 0.0f;
        mma_abt<T, S::KD / 16, BN / 8>(x, sq + warp * 16 * LK, LK, sk, LK);
        mma_abt<T, S::DV / 16, BN / 8>(dp, sdo + warp * 16 * LV, LV, sv, LV);
        ds_rows<T, BN / 8>(x, dp, sl2, lr, dr, row0, j0, lk, causal, tq, big);
        uint32_t sh[BN / 16][4], slo[kSplit ? BN / 16 : 1][4];
        to_a<T, BN / 8, kSplit>(x, sh, slo);
        mma_xb<T, BN / 16, S::OC / 8, kSplit>(acc, sh, slo, sk + c0, LK);
    }
    if (big)
        atomicOr(overflow, 1);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + r * 8;
        if (row >= lq)
            continue;
        int64_t qrow = (qb + row * ts) * g.h + hh;
#pragma unroll
        for (int nb = 0; nb < S::OC / 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = c0 + nb * 8 + 2 * tq + e;
                if (col < g.d) {
                    float y = acc[nb][r * 2 + e] * g.scale;
                    dq[qrow * g.d + col] = g.dt == QS_FP32 ? y : ops<T>::round(y);
                }
            }
    }
}

/* dk (chunks [0, nck)) or dv (chunks after) of a key tile, columns [c0, c0 + OC): block (key
 * tile, kv head, sequence x chunk), summing over the group's query heads and the query
 * tiles that see the keys. */
template <typename T, class S, bool kSplit>
__global__ void __launch_bounds__(kThreads)
    dkv_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
               const float *dd, float *dk, float *dv, int *overflow)
{
    extern __shared__ __align__(16) unsigned char smraw[];
    constexpr int LK = S::LK, LV = S::LV, BM = S::BN;
    T *sk = reinterpret_cast<T *>(smraw), *sv = sk + kRows * LK, *sqd = sv + kRows * LV;
    float *sld = reinterpret_cast<float *>(sqd + S::NBUF * (BM * LK + BM * LV));
    int nck = (g.d + S::OC - 1) / S::OC, ncv = (g.dv + S::OCV - 1) / S::OCV;
    int s = blockIdx.z / (nck + ncv), ch = blockIdx.z % (nck + ncv), hk = blockIdx.y;
    bool kmode = ch < nck;
    int c0 = kmode ? ch * S::OC : (ch - nck) * S::OCV, width = kmode ? S::OC : S::OCV;
    int j0 = blockIdx.x * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (j0 >= lk)
        return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
    int64_t ts = g.tstride(), qb = g.base(0, s), kb = g.base(1, s);
    bool vq = g.d % 8 == 0, vv = g.dv % 8 == 0;
    load_tile(sk, LK, kRows, S::KD, k + (kb * g.hkv + hk) * g.d, ts * g.hkv * g.d, j0, lk - j0, 0,
              g.d, vq);
    if (kmode)
        load_tile(sv, LV, kRows, S::DV, v + (kb * g.hkv + hk) * g.dv, ts * g.hkv * g.dv, j0,
                  lk - j0, 0, g.dv, vv);
    cp_wait(); /* also when no query tile follows */
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int istart = causal ? (j0 / BM) * BM : 0;
    float sl2 = g.scale * kLog2e;
    int key0 = j0 + warp * 16 + gr;
    float acc[S::OMAX / 8][4];
#pragma unroll
    for (int nb = 0; nb < S::OMAX / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    bool big = false;
    int grp = g.h / g.hkv;
    /* the query tiles of the group's heads, one after another: tile t is head
     * hk * grp + t / nqt, rows istart + (t % nqt) * BM */
    int nqt = lq > istart ? (lq - istart + BM - 1) / BM : 0, nt = grp * nqt;
    auto load_q = [&](int t, int buf) {
        int hh = hk * grp + t / nqt, i0 = istart + (t % nqt) * BM;
        T *bq = sqd + buf * (BM * LK + BM * LV);
        float *bl = sld + buf * 2 * BM;
        load_tile(bq, LK, BM, S::KD, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0, lq - i0, 0, g.d,
                  vq);
        load_tile(bq + BM * LK, LV, BM, S::DV, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv, i0,
                  lq - i0, 0, g.dv, vv);
        for (int r = threadIdx.x; r < BM; r += kThreads) {
            int64_t idx = (qb + (i0 + r) * ts) * g.h + hh;
            bool ok = i0 + r < lq;
            bl[r] = ok ? lse[idx] * kLog2e : INFINITY; /* P 0 on padding rows */
            bl[BM + r] = ok ? dd[idx] : 0.0f;
        }
    };
    if (nt > 0)
        load_q(0, 0);
    for (int t = 0; t < nt; t++) {
        int buf = S::NBUF == 2 ? (t & 1) : 0, i0 = istart + (t % nqt) * BM;
        if (S::NBUF == 1 && t > 0) {
            __syncthreads();
            load_q(t, 0);
        }
        cp_wait();
        __syncthreads();
        if (S::NBUF == 2 && t + 1 < nt)
            load_q(t + 1, buf ^ 1);
        const T *sq = sqd + buf * (BM * LK + BM * LV), *sdo = sq + BM * LK;
        const float *sl = sld + buf * 2 * BM, *sd = sl + BM;
        {
            float x[BM / 8][4];
#pragma unroll
            for (int nb = 0; nb < BM / 8; nb++)
                x[nb][0] = x[nb][1] = x[nb][2] = x[nb][3] = 0.0f;
            mma_abt<T, S::KD / 16, BM / 8>(x, sk + warp * 16 * LK, LK, sq, LK);
#pragma unroll
            for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = key0 + (e >> 1) * 8, qc = nb * 8 + 2 * tq + (e & 1);
                    bool ok = !causal || key <= i0 + qc;
                    x[nb][e] = ok ? ex2(x[nb][e] * sl2 - sl[qc]) : 0.0f;
                }
            uint32_t xh[BM / 16][4], xl[kSplit ? BM / 16 : 1][4];
            if (kmode) {
                float dp[BM / 8][4];
#pragma unroll
                for (int nb = 0; nb < BM / 8; nb++)
                    dp[nb][0] = dp[nb][1] = dp[nb][2] = dp[nb][3] = 0.0f;
                mma_abt<T, S::DV / 16, BM / 8>(dp, sv + warp * 16 * LV, LV, sdo, LV);
#pragma unroll
                for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int qc = nb * 8 + 2 * tq + (e & 1);
                        float ds = x[nb][e] * (dp[nb][e] - sd[qc]);
                        big |= fabsf(ds) > ops<T>::kMax;
                        x[nb][e] = ds;
                    }
                to_a<T, BM / 8, kSplit>(x, xh, xl);
                mma_xb<T, BM / 16, S::OC / 8, kSplit>(acc, xh, xl, sq + c0, LK);
            } else {
                to_a<T, BM / 8, kSplit>(x, xh, xl);
                mma_xb<T, BM / 16, S::OCV / 8, kSplit>(acc, xh, xl, sdo + c0, LV);
            }
        }
    }
    if (big)
        atomicOr(overflow, 1);
    int dim = kmode ? g.d : g.dv;
    float *out = kmode ? dk : dv;
    float mul = kmode ? g.scale : 1.0f;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = key0 + r * 8;
        if (key >= lk)
            continue;
        int64_t krow = (kb + key * ts) * g.hkv + hk;
#pragma unroll
        for (int nb = 0; nb < S::OMAX / 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = c0 + nb * 8 + 2 * tq + e;
                if (nb * 8 < width && col < dim) {
                    float y = acc[nb][r * 2 + e] * mul;
                    out[krow * dim + col] = g.dt == QS_FP32 ? y : ops<T>::round(y);
                }
            }
    }
}

/* The head-dim classes: the smallest with KD >= d and DV >= dv (-1: none). */
inline int dim_class(int d, int dv)
{
    static const int kd[4] = {64, 128, 192, 576}, kv[4] = {64, 128, 128, 512};
    for (int c = 0; c < 4; c++)
        if (d <= kd[c] && dv <= kv[c])
            return c;
    return -1;
}

/* Per class, the tiles of each pass. OC divides the dims it chunks: forward OC | DV; dq
 * OC | KD; dkv OC | KD and OCV | DV (one block computes one chunk of dk or of dv, and each
 * chunk recomputes the scores). BN 32 where 64 would not fit shared memory or registers. */
template <int C> struct cls;
template <> struct cls<0> {
    using F = shape<64, 64, 64, 64, 2>;
    using Q = shape<64, 64, 64, 64, 2>;
    using KV = shape<64, 64, 64, 64, 2>;
};
template <> struct cls<1> {
    using F = shape<128, 128, 64, 128, 2>;
    using Q = shape<128, 128, 64, 128, 2>;
    using KV = shape<128, 128, 64, 128, 2>;
};
template <> struct cls<2> {
    using F = shape<192, 128, 64, 128, 2>;
    using Q = shape<192, 128, 32, 192, 2>;
    using KV = shape<192, 128, 32, 192, 2, 128>;
};
template <> struct cls<3> {
    using F = shape<576, 512, 32, 256, 2>;
    using Q = shape<576, 512, 32, 288, 1>;
    using KV = shape<576, 512, 32, 192, 1, 128>;
};

template <class S> constexpr size_t fwd_smem()
{
    return (size_t)(kRows * S::LK + S::NBUF * (S::BN * S::LK + S::BN * (S::OC + 8))) * 2;
}
template <class S> constexpr size_t dq_smem()
{
    return (size_t)(kRows * S::LK + kRows * S::LV + S::NBUF * (S::BN * S::LK + S::BN * S::LV)) * 2;
}
template <class S> constexpr size_t dkv_smem()
{
    return dq_smem<S>() + S::NBUF * 2 * S::BN * sizeof(float);
}

#ifndef QC_EMU /* the emulator launches kernels with qc::emu::launch */
/* The forward of every query row: o [tq, h, dv] (FP32, rounded to g.dt), lse [tq, h] (may
 * be NULL) must be preset to 0 and -inf (rows with no key keep them). maxq: the longest
 * query sequence. */
template <typename T, int C, bool kSplit>
cudaError_t fwd_launch(const geo &g, int maxq, const T *q, const T *k, const T *v, float *o,
                       float *lse, cudaStream_t st)
{
    using S = typename cls<C>::F;
    auto kern = fwd_kernel<T, S, kSplit>;
    size_t sm = fwd_smem<S>();
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess || maxq <= 0 || g.b <= 0)
        return e;
    int nch = (g.dv + S::OC - 1) / S::OC;
    dim3 grid((maxq + kRows - 1) / kRows, g.h, g.b * nch);
    kern<<<grid, kThreads, sm, st>>>(g, q, k, v, o, lse);
    return cudaGetLastError();
}

/* The backward from lse (of fwd_launch) and dd (D of dsum_kernel): dq, dk, dv (FP32,
 * rounded to g.dt; rows of keys no query sees must be preset to 0). overflow (device int)
 * is set when a dS is beyond T's range (FP16): the results are then not to be used. */
template <typename T, int C, bool kSplit>
cudaError_t bwd_launch(const geo &g, int maxq, int maxk, const T *q, const T *k, const T *v,
                       const T *dout, const float *lse, const float *dd, float *dq, float *dk,
                       float *dv, int *overflow, cudaStream_t st)
{
    using SQ = typename cls<C>::Q;
    using SK = typename cls<C>::KV;
    auto kq = dq_kernel<T, SQ, kSplit>;
    auto kkv = dkv_kernel<T, SK, kSplit>;
    size_t smq = dq_smem<SQ>(), smk = dkv_smem<SK>();
    cudaError_t e = cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smq);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smk);
    if (e != cudaSuccess || g.b <= 0)
        return e;
    if (maxq > 0) {
        int nch = (g.d + SQ::OC - 1) / SQ::OC;
        kq<<<dim3((maxq + kRows - 1) / kRows, g.h, g.b * nch), kThreads, smq, st>>>(
            g, q, k, v, dout, lse, dd, dq, overflow);
    }
    if (maxk > 0) {
        int nch = (g.d + SK::OC - 1) / SK::OC + (g.dv + SK::OCV - 1) / SK::OCV;
        kkv<<<dim3((maxk + kRows - 1) / kRows, g.hkv, g.b * nch), kThreads, smk, st>>>(
            g, q, k, v, dout, lse, dd, dk, dv, overflow);
    }
    return cudaGetLastError();
}

#endif

} // namespace fl
} // namespace qc

#endif
