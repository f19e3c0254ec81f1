/* qc_sdpa.cu: the sdpa_fwd and sdpa_bwd slots — softmax attention of spec/attention.md
 * [ATTN-*] on the device, every layout (sbhd, bshd, thd with padding), mask, GQA/MQA and head
 * dims up to 1024 (192/128, the absorbed 576/512), FP32/BF16/FP16 values. The kernels follow
 * the reference's operation order, so their results are the reference's bit for bit: one
 * block per query row (forward, dq) or per key (dk, dv); scores are dot products over d
 * increasing by one thread each; the row maximum is a block reduction (a maximum has no
 * order); the softmax sum l, D = do . o and every output sum run over the keys (or the
 * group's query rows) in increasing order, tile after tile of kTile scores held in shared
 * memory (no S x S matrix exists). A row longer than a tile recomputes its scores in each of
 * three passes (max, sum, output). The faster tensor-core kernels replace these behind the
 * same slots. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "qc_attn.cuh"
#include "qc_flash.h"
#include "qc_slots.h"

namespace qc
{
namespace
{

constexpr int kThreads = 256;
constexpr int kTile = 2048; /* scores of one tile in shared memory */
constexpr int kMaxDim = 1024;
constexpr int kPer = kMaxDim / kThreads; /* output columns per thread */

struct geo {
    int layout, mask, dt;
    int64_t b, sq, sk, h, hkv, d, dv;
    const int32_t *cu_q, *cu_kv, *pad_q, *pad_kv; /* device; NULL when not thd / no padding */
    float scale;

    __device__ int64_t len(int kv, int64_t s) const
    {
        if (layout == QS_ATTN_THD) {
            const int32_t *cu = kv ? cu_kv : cu_q;
            return static_cast<int64_t>(cu[s + 1]) - cu[s];
        }
        return kv ? sk : sq;
    }
    __device__ int64_t tok(int kv, int64_t s, int64_t i) const
    {
        if (layout == QS_ATTN_SBHD)
            return i * b + s;
        if (layout == QS_ATTN_BSHD)
            return s * (kv ? sk : sq) + i;
        const int32_t *pad = kv ? pad_kv : pad_q, *cu = kv ? cu_kv : cu_q;
        return (pad ? pad[s] : cu[s]) + i;
    }
    __device__ int64_t nkeys(int64_t i, int64_t lk) const
    {
        return mask == QS_ATTN_MASK_CAUSAL ? (i + 1 < lk ? i + 1 : lk) : lk;
    }
};

__device__ float dot_seq(const float *a, const float *b, int64_t n)
{
    float acc = 0.0f;
    for (int64_t e = 0; e < n; e++)
        acc = __fadd_rn(acc, __fmul_rn(a[e], b[e]));
    return acc;
}

__device__ float block_max(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < kThreads / 32; w++)
        m = fmaxf(m, red[w]);
    return m;
}

/* The softmax statistics of one row (m, l) by [ATTN-SOFTMAX-ORDER], and the scores of
 * the first tile left in xs when the row fits one tile (returns true then). */
struct row_ctx {
    const geo *g;
    const float *qrow, *k;
    int64_t s, hk, nk;
};

__device__ void scores(const row_ctx &r, int64_t j0, int64_t j1, float *xs)
{
    const geo &g = *r.g;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads) {
        const float *krow = r.k + (g.tok(1, r.s, j) * g.hkv + r.hk) * g.d;
        xs[j - j0] = __fmul_rn(g.scale, dot_seq(r.qrow, krow, g.d));
    }
}

/* m and l of the row; on return xs holds e_j of the first tile (valid when nk <= kTile). */
__device__ void row_stats(const row_ctx &r, float *xs, float *red, float *m_out, float *l_out)
{
    float m = -INFINITY;
    for (int64_t j0 = 0; j0 < r.nk; j0 += kTile) {
        int64_t j1 = j0 + kTile < r.nk ? j0 + kTile : r.nk;
        __syncthreads();
        scores(r, j0, j1, xs);
        for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads)
            m = fmaxf(m, xs[j - j0]);
    }
    m = block_max(m, red);
    float l = 0.0f;
    for (int64_t j0 = 0; j0 < r.nk; j0 += kTile) {
        int64_t j1 = j0 + kTile < r.nk ? j0 + kTile : r.nk;
        __syncthreads();
        if (j0 > 0 || r.nk > kTile)
            scores(r, j0, j1, xs);
        __syncthreads();
        for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads)
            xs[j - j0] = mf::expf_cr(__fsub_rn(xs[j - j0], m));
        __syncthreads();
        if (threadIdx.x == 0)
            for (int64_t j = j0; j < j1; j++)
                l = __fadd_rn(l, xs[j - j0]);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        red[0] = l;
    __syncthreads();
    *m_out = m;
    *l_out = red[0];
    __syncthreads();
}

/* P_j of tile [j0, j1) into xs: recomputed unless the row is one tile (xs holds e_j). */
__device__ void tile_probs(const row_ctx &r, int64_t j0, int64_t j1, float m, float l, float *xs)
{
    __syncthreads();
    if (r.nk > kTile) {
        scores(r, j0, j1, xs);
        __syncthreads();
        for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads)
            xs[j - j0] = __fdiv_rn(mf::expf_cr(__fsub_rn(xs[j - j0], m)), l);
    } else {
        for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads)
            xs[j - j0] = __fdiv_rn(xs[j - j0], l);
    }
    __syncthreads();
}

/* [ATTN-FWD] one block per (query i, head h, sequence s). */
__global__ void __launch_bounds__(kThreads)
    fwd_kernel(geo g, const float *q, const float *k, const float *v, float *o, float *lse)
{
    __shared__ float xs[kTile];
    __shared__ float red[kThreads / 32];
    int64_t i = blockIdx.x, hh = blockIdx.y, s = blockIdx.z;
    if (i >= g.len(0, s))
        return;
    int64_t tq = g.tok(0, s, i), hk = hh / (g.h / g.hkv);
    row_ctx r = {&g, q + (tq * g.h + hh) * g.d, k, s, hk, g.nkeys(i, g.len(1, s))};
    if (r.nk == 0)
        return; /* [ATTN-EMPTY-ROW]: o 0, lse -inf, as preset */
    float m, l;
    row_stats(r, xs, red, &m, &l);
    float acc[kPer];
    for (int c = 0; c < kPer; c++)
        acc[c] = 0.0f;
    for (int64_t j0 = 0; j0 < r.nk; j0 += kTile) {
        int64_t j1 = j0 + kTile < r.nk ? j0 + kTile : r.nk;
        tile_probs(r, j0, j1, m, l, xs);
        for (int c = 0; c < kPer; c++) {
            int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
            if (col >= g.dv)
                break;
            float a = acc[c];
            for (int64_t j = j0; j < j1; j++)
                a = __fadd_rn(a,
                              __fmul_rn(xs[j - j0], v[(g.tok(1, s, j) * g.hkv + hk) * g.dv + col]));
            acc[c] = a;
        }
    }
    float *orow = o + (tq * g.h + hh) * g.dv;
    for (int c = 0; c < kPer; c++) {
        int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
        if (col < g.dv)
            orow[col] = round_dt(g.dt, acc[c]);
    }
    if (lse && threadIdx.x == 0)
        lse[tq * g.h + hh] = __fadd_rn(m, mf::logf_cr(l));
}

/* [ATTN-BWD] dq of one row; saves m, l and D of the row for the dk/dv kernel. */
__global__ void __launch_bounds__(kThreads)
    dq_kernel(geo g, const float *q, const float *k, const float *v, const float *o,
              const float *dout, float *dq, float *rm, float *rl, float *rd)
{
    __shared__ float xs[kTile];
    __shared__ float red[kThreads / 32];
    __shared__ float dor[kMaxDim];
    int64_t i = blockIdx.x, hh = blockIdx.y, s = blockIdx.z;
    if (i >= g.len(0, s))
        return;
    int64_t tq = g.tok(0, s, i), hk = hh / (g.h / g.hkv), row = tq * g.h + hh;
    row_ctx r = {&g, q + row * g.d, k, s, hk, g.nkeys(i, g.len(1, s))};
    if (r.nk == 0)
        return;
    const float *dorow = dout + row * g.dv;
    for (int64_t c = threadIdx.x; c < g.dv; c += kThreads)
        dor[c] = dorow[c];
    float m, l;
    row_stats(r, xs, red, &m, &l);
    if (threadIdx.x == 0)
        red[0] = dot_seq(dorow, o + row * g.dv, g.dv);
    __syncthreads();
    float di = red[0];
    if (threadIdx.x == 0) {
        rm[row] = m;
        rl[row] = l;
        rd[row] = di;
    }
    float acc[kPer];
    for (int c = 0; c < kPer; c++)
        acc[c] = 0.0f;
    for (int64_t j0 = 0; j0 < r.nk; j0 += kTile) {
        int64_t j1 = j0 + kTile < r.nk ? j0 + kTile : r.nk;
        tile_probs(r, j0, j1, m, l, xs);
        for (int64_t j = j0 + threadIdx.x; j < j1; j += kThreads) {
            const float *vrow = v + (g.tok(1, s, j) * g.hkv + hk) * g.dv;
            float dp = dot_seq(dor, vrow, g.dv);
            xs[j - j0] = __fmul_rn(xs[j - j0], __fsub_rn(dp, di));
        }
        __syncthreads();
        for (int c = 0; c < kPer; c++) {
            int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
            if (col >= g.d)
                break;
            float a = acc[c];
            for (int64_t j = j0; j < j1; j++)
                a = __fadd_rn(a,
                              __fmul_rn(xs[j - j0], k[(g.tok(1, s, j) * g.hkv + hk) * g.d + col]));
            acc[c] = a;
        }
    }
    for (int c = 0; c < kPer; c++) {
        int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
        if (col < g.d)
            dq[row * g.d + col] = round_dt(g.dt, __fmul_rn(g.scale, acc[c]));
    }
}

/* [ATTN-BWD-ORDER] dk, dv of key j of (sequence s, kv head hk): sums over the group's
 * query heads increasing, then the queries attending j increasing. */
__global__ void __launch_bounds__(kThreads)
    dkv_kernel(geo g, const float *q, const float *k, const float *v, const float *dout,
               const float *rm, const float *rl, const float *rd, float *dk, float *dv)
{
    __shared__ float ps[kTile / 2], dss[kTile / 2];
    __shared__ float kr[kMaxDim], vr[kMaxDim];
    constexpr int kItems = kTile / 2;
    int64_t j = blockIdx.x, hk = blockIdx.y, s = blockIdx.z;
    int64_t lk = g.len(1, s), lq = g.len(0, s);
    if (j >= lk)
        return;
    int64_t tk = g.tok(1, s, j), grp = g.h / g.hkv;
    for (int64_t c = threadIdx.x; c < g.d; c += kThreads)
        kr[c] = k[(tk * g.hkv + hk) * g.d + c];
    for (int64_t c = threadIdx.x; c < g.dv; c += kThreads)
        vr[c] = v[(tk * g.hkv + hk) * g.dv + c];
    __syncthreads();
    int64_t i0 = g.mask == QS_ATTN_MASK_CAUSAL ? j : 0; /* queries i >= j see key j */
    int64_t cnt = lq > i0 ? lq - i0 : 0, n = grp * cnt;
    float ak[kPer], av[kPer];
    for (int c = 0; c < kPer; c++)
        ak[c] = av[c] = 0.0f;
    for (int64_t e0 = 0; e0 < n; e0 += kItems) {
        int64_t e1 = e0 + kItems < n ? e0 + kItems : n;
        __syncthreads();
        for (int64_t e = e0 + threadIdx.x; e < e1; e += kThreads) {
            int64_t hh = hk * grp + e / cnt, i = i0 + e % cnt;
            int64_t row = g.tok(0, s, i) * g.h + hh;
            float x = __fmul_rn(g.scale, dot_seq(q + row * g.d, kr, g.d));
            float p = __fdiv_rn(mf::expf_cr(__fsub_rn(x, rm[row])), rl[row]);
            float dp = dot_seq(dout + row * g.dv, vr, g.dv);
            ps[e - e0] = p;
            dss[e - e0] = __fmul_rn(p, __fsub_rn(dp, rd[row]));
        }
        __syncthreads();
        for (int64_t e = e0; e < e1; e++) {
            int64_t hh = hk * grp + e / cnt, i = i0 + e % cnt;
            int64_t row = g.tok(0, s, i) * g.h + hh;
            float dsv = dss[e - e0], pv = ps[e - e0];
            for (int c = 0; c < kPer; c++) {
                int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
                if (col < g.d)
                    ak[c] = __fadd_rn(ak[c], __fmul_rn(dsv, q[row * g.d + col]));
                if (col < g.dv)
                    av[c] = __fadd_rn(av[c], __fmul_rn(pv, dout[row * g.dv + col]));
            }
        }
    }
    for (int c = 0; c < kPer; c++) {
        int64_t col = threadIdx.x + static_cast<int64_t>(c) * kThreads;
        if (col < g.d)
            dk[(tk * g.hkv + hk) * g.d + col] = round_dt(g.dt, __fmul_rn(g.scale, ak[c]));
        if (col < g.dv)
            dv[(tk * g.hkv + hk) * g.dv + col] = round_dt(g.dt, av[c]);
    }
}

__global__ void fill_kernel(float *x, size_t n, float v)
{
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
         e += static_cast<size_t>(gridDim.x) * blockDim.x)
        x[e] = v;
}

/* The request's shape on the device: checks, token counts, cu_seqlens copies. */
struct sdpa_req {
    geo g;
    int64_t tq, tk, maxq, maxk;
    dbuf<int32_t> cu[4];

    qs_status init(const qs_sdpa_args *a)
    {
        const qs_sdpa_params &p = a->p;
        if ((unsigned)p.layout >= QS_ATTN_LAYOUT_COUNT || (unsigned)p.mask >= QS_ATTN_MASK_COUNT)
            return refuse("unknown layout or mask", a->why, a->why_len);
        if (p.dtype != QS_FP32 && p.dtype != QS_BF16 && p.dtype != QS_FP16)
            return refuse("dtype must be fp32, bf16 or fp16", a->why, a->why_len);
        if (p.b < 0 || p.sq < 0 || p.sk < 0 || p.h < 1 || p.hkv < 1 || p.h % p.hkv != 0 ||
            p.d < 1 || p.dv < 1)
            return QS_ERR_SHAPE;
        if (p.d > kMaxDim || p.dv > kMaxDim)
            return refuse("head dims above 1024 are not implemented", a->why, a->why_len);
        if (p.b > 65535 || p.h > 65535)
            return refuse("more than 65535 sequences or heads", a->why, a->why_len);
        g = geo{p.layout, p.mask, p.dtype, p.b,     p.sq,    p.sk,    p.h,    p.hkv,
                p.d,      p.dv,   nullptr, nullptr, nullptr, nullptr, p.scale};
        bool thd = p.layout == QS_ATTN_THD;
        tq = thd ? p.sq : p.b * p.sq;
        tk = thd ? p.sk : p.b * p.sk;
        maxq = thd ? 0 : p.sq;
        maxk = thd ? 0 : p.sk;
        if (thd) {
            const int32_t *src[4] = {p.cu_seqlens_q, p.cu_seqlens_kv, p.cu_seqlens_q_padded,
                                     p.cu_seqlens_kv_padded};
            if (!src[0] || !src[1])
                return QS_ERR_INVALID_ARG;
            for (int64_t s = 0; s < p.b; s++) {
                int64_t lq = src[0][s + 1] - src[0][s], lk = src[1][s + 1] - src[1][s];
                maxq = lq > maxq ? lq : maxq;
                maxk = lk > maxk ? lk : maxk;
            }
            for (int e = 0; e < 4; e++) {
                if (!src[e])
                    continue;
                cudaError_t err = cu[e].up(src[e], static_cast<size_t>(p.b + 1));
                if (err != cudaSuccess)
                    return cuda_fail(err, "cu_seqlens", a->why, a->why_len);
            }
            g.cu_q = cu[0].p;
            g.cu_kv = cu[1].p;
            g.pad_q = cu[2].p;
            g.pad_kv = cu[3].p;
        }
        if (maxq > 0x7fffffff || maxk > 0x7fffffff)
            return refuse("a sequence is too long", a->why, a->why_len);
        return QS_OK;
    }
};

void fill(float *x, size_t n, float v)
{
    if (n)
        fill_kernel<<<(unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256>>>(x, n, v);
}

} // namespace
} // namespace qc

using qc::dbuf;

/* QSPEC_CUDA_SDPA, read once: "reference" (the default) keeps every request on the
 * reference-order kernels above; "flash" sends the BF16/FP16 requests the flash kernels
 * take to cuda/qc_flash.cu (a tolerance claim). Any other value is the default. */
static bool sdpa_flash_wanted(void)
{
    static const bool flash = [] {
        const char *e = getenv("QSPEC_CUDA_SDPA");
        return e && strcmp(e, "flash") == 0;
    }();
    return flash;
}

qs_status qc_slot_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    qc::sdpa_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    if (sdpa_flash_wanted() && qc_flash_takes(a))
        return qc_flash_fwd(a);
    /* the reference's operations in its order ([CASE-PLUGIN-REF]; cuda/attn_check) */
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    const qs_sdpa_params &p = a->p;
    size_t nq = r.tq * p.h * p.d, nk = r.tk * p.hkv * p.d, nv = r.tk * p.hkv * p.dv;
    size_t no = r.tq * p.h * p.dv, nl = r.tq * p.h;
    dbuf<float> q, k, v, o, lse;
    cudaError_t err = q.up(a->q, nq);
    if (err == cudaSuccess)
        err = k.up(a->k, nk);
    if (err == cudaSuccess)
        err = v.up(a->v, nv);
    if (err == cudaSuccess)
        err = o.up(nullptr, no);
    if (err == cudaSuccess)
        err = lse.alloc(nl);
    if (err != cudaSuccess)
        return qc::cuda_fail(err, "sdpa_fwd buffers", a->why, a->why_len);
    qc::fill(lse.p, nl, -INFINITY);
    if (r.maxq > 0 && p.b > 0)
        qc::fwd_kernel<<<dim3((unsigned)r.maxq, (unsigned)p.h, (unsigned)p.b), qc::kThreads>>>(
            r.g, q.p, k.p, v.p, o.p, lse.p);
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = o.down(a->o);
    if (err == cudaSuccess && a->lse)
        err = lse.down(a->lse);
    return err == cudaSuccess ? QS_OK : qc::cuda_fail(err, "sdpa_fwd", a->why, a->why_len);
}

qs_status qc_slot_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    qc::sdpa_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    if (sdpa_flash_wanted() && qc_flash_takes(a)) {
        int fell_back = 0;
        st = qc_flash_bwd(a, &fell_back);
        if (st != QS_OK || !fell_back)
            return st;
    }
    /* the reference's operations in its order ([CASE-PLUGIN-REF]; cuda/attn_check) */
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    const qs_sdpa_params &p = a->p;
    size_t nq = r.tq * p.h * p.d, nk = r.tk * p.hkv * p.d, nv = r.tk * p.hkv * p.dv;
    size_t no = r.tq * p.h * p.dv, nl = r.tq * p.h;
    dbuf<float> q, k, v, o, dout, dq, dk, dv, rm, rl, rd;
    cudaError_t err = q.up(a->q, nq);
    if (err == cudaSuccess)
        err = k.up(a->k, nk);
    if (err == cudaSuccess)
        err = v.up(a->v, nv);
    if (err == cudaSuccess)
        err = o.up(a->o, no);
    if (err == cudaSuccess)
        err = dout.up(a->dout, no);
    if (err == cudaSuccess)
        err = dq.up(nullptr, nq);
    if (err == cudaSuccess)
        err = dk.up(nullptr, nk);
    if (err == cudaSuccess)
        err = dv.up(nullptr, nv);
    if (err == cudaSuccess)
        err = rm.up(nullptr, nl);
    if (err == cudaSuccess)
        err = rl.up(nullptr, nl);
    if (err == cudaSuccess)
        err = rd.up(nullptr, nl);
    if (err != cudaSuccess)
        return qc::cuda_fail(err, "sdpa_bwd buffers", a->why, a->why_len);
    if (r.maxq > 0 && p.b > 0)
        qc::dq_kernel<<<dim3((unsigned)r.maxq, (unsigned)p.h, (unsigned)p.b), qc::kThreads>>>(
            r.g, q.p, k.p, v.p, o.p, dout.p, dq.p, rm.p, rl.p, rd.p);
    if (r.maxk > 0 && p.b > 0)
        qc::dkv_kernel<<<dim3((unsigned)r.maxk, (unsigned)p.hkv, (unsigned)p.b), qc::kThreads>>>(
            r.g, q.p, k.p, v.p, dout.p, rm.p, rl.p, rd.p, dk.p, dv.p);
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = dq.down(a->dq);
    if (err == cudaSuccess)
        err = dk.down(a->dk);
    if (err == cudaSuccess)
        err = dv.down(a->dv);
    return err == cudaSuccess ? QS_OK : qc::cuda_fail(err, "sdpa_bwd", a->why, a->why_len);
}
