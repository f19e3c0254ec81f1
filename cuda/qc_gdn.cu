/* qc_gdn.cu: the gdn_fwd and gdn_bwd slots — Gated DeltaNet of spec/attention.md [GDN-*]
 * on the device: the token recurrence [GDN-RECURRENCE] with the FP32 state, initial and
 * final states, varlen (cu_seqlens), GVA, the optional q/k l2norm, FP32/BF16/FP16 values.
 * The kernels evaluate the reference's operations in the reference's order, so o, ht and
 * every gradient are its bits:
 *   forward: the columns of the state are independent, so a warp owns 32 columns of one
 *     (sequence, value head) and each thread its column: decay, prediction, delta update
 *     and read are sums over the key dim in increasing order, in the thread;
 *   backward [GDN-BWD]: one block per (sequence, value head) holds h' and dH in shared
 *     memory; the states before each token are recomputed from checkpoints every kSeg
 *     tokens (global scratch), column sums run in column threads, row sums in row threads,
 *     and dbeta and dg (one FP32 sum over the whole state, rows then columns) in one thread.
 * The environment variable QSPEC_CUDA_GDN, read once, selects the forward and the backward:
 * `reference` (the default, these kernels), `chunk` (cuda/qc_gdn_chunk.cu with TF32x3
 * tensor-core matmuls, FP32-accurate, claiming the case's tolerance), `chunk-bf16` (the
 * same with BF16 operands, as upstream kernels round them) or `chunk-bf16-smem` (the
 * BF16-staged kernels for BF16 requests with dk = dv = 128, on BF16 device arrays; other
 * requests take chunk) or `chunk-bf16-fused` (the same, with the staged forward's two kernels
 * fused into one that keeps W, U and A in shared memory: the same o and final state) or
 * `chunk-bf16-wgmma` (that kernel with the walk's products on wgmma, sm_90a). The chunked
 * backward's dq̂, dk̂ per value head come back to qk_kernel here for the GVA sum and the l2norm
 * backward. QSPEC_GDN_LEAN_WG, QSPEC_GDN_WY_WIDE, QSPEC_GDN_WY_GVA, QSPEC_GDN_TFORM,
 * QSPEC_GDN_SOLVE_TC and QSPEC_GDN_PIPE, read with it, choose the staged kernels' forms
 * (gdn_forms_from_env, qc_gdn_chunk.h). */
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "qc_attn.cuh"
#include "qc_gdn_chunk.h"
#include "qc_slots.h"

namespace qc
{
namespace
{

constexpr int kSeg = 64; /* backward checkpoint interval */
constexpr int kBwdThreads = 128;

struct gdn_geo {
    int64_t b, t, h, hv, dk, dv;
    const int32_t *cu; /* device, NULL for dense */
    float scale;
    int l2, dt;

    __device__ int64_t start(int64_t n) const
    {
        return cu ? cu[n] : n * t;
    }
    __device__ int64_t len(int64_t n) const
    {
        return cu ? static_cast<int64_t>(cu[n + 1]) - cu[n] : t;
    }
};

/* [GDN-L2NORM] r = sqrt(fl(ss + 1e-6)) of one head vector. */
__device__ float l2_r(const float *x, int64_t n)
{
    float ss = 0.0f;
    for (int64_t e = 0; e < n; e++)
        ss = __fadd_rn(ss, __fmul_rn(x[e], x[e]));
    return __fsqrt_rn(__fadd_rn(ss, 1e-6f));
}

/* q̂, k̂ of every (token, head) row: one thread per row. */
__global__ void prep_kernel(gdn_geo g, const float *x, float *out, int64_t rows)
{
    int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * g.dk;
    float *yr = out + row * g.dk;
    if (!g.l2) {
        for (int64_t e = 0; e < g.dk; e++)
            yr[e] = xr[e];
        return;
    }
    float r = l2_r(xr, g.dk);
    for (int64_t e = 0; e < g.dk; e++)
        yr[e] = round_dt(g.dt, __fdiv_rn(xr[e], r));
}

/* [GDN-RECURRENCE] one warp per (32 columns, value head, sequence); state column-major
 * in dynamic shared memory S[r * 32 + lane], then k̂ and fl(scale q̂). */
__global__ void __launch_bounds__(32)
    fwd_kernel(gdn_geo g, const float *qn, const float *kn, const float *v, const float *gate,
               const float *beta, const float *h0, float *o, float *ht)
{
    extern __shared__ float sm[];
    float *S = sm, *ks = sm + g.dk * 32, *qs = ks + g.dk;
    int lane = threadIdx.x;
    int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane, hv = blockIdx.y, n = blockIdx.z;
    int64_t hq = hv / (g.hv / g.h), st = g.start(n), L = g.len(n);
    bool on = c < g.dv;
    size_t sbase = static_cast<size_t>(n * g.hv + hv) * g.dk * g.dv;
    for (int64_t r = 0; r < g.dk; r++)
        S[r * 32 + lane] = on && h0 ? h0[sbase + r * g.dv + c] : 0.0f;
    for (int64_t i = 0; i < L; i++) {
        int64_t tok = st + i;
        __syncwarp();
        for (int64_t r = lane; r < g.dk; r += 32) {
            ks[r] = kn[(tok * g.h + hq) * g.dk + r];
            qs[r] = __fmul_rn(g.scale, qn[(tok * g.h + hq) * g.dk + r]);
        }
        __syncwarp();
        if (!on)
            continue;
        float a = mf::expf_cr(gate[tok * g.hv + hv]), bt = beta[tok * g.hv + hv];
        float pred = 0.0f;
        for (int64_t r = 0; r < g.dk; r++) {
            float s = __fmul_rn(S[r * 32 + lane], a);
            S[r * 32 + lane] = s;
            pred = __fadd_rn(pred, __fmul_rn(s, ks[r]));
        }
        float u = __fmul_rn(bt, __fsub_rn(v[(tok * g.hv + hv) * g.dv + c], pred));
        float acc = 0.0f;
        for (int64_t r = 0; r < g.dk; r++) {
            float s = __fadd_rn(S[r * 32 + lane], __fmul_rn(ks[r], u));
            S[r * 32 + lane] = s;
            acc = __fadd_rn(acc, __fmul_rn(s, qs[r]));
        }
        o[(tok * g.hv + hv) * g.dv + c] = round_dt(g.dt, acc);
    }
    if (on && ht)
        for (int64_t r = 0; r < g.dk; r++)
            ht[sbase + r * g.dv + c] = S[r * 32 + lane];
}

/* The backward's shared memory: h' and dH [dk][dv + 1], then vectors. */
struct bwd_smem {
    float *hd, *dH, *ks, *qs, *vv, *dov, *u, *rv, *du, *mdu, *red;
    int64_t ld;
    __device__ bwd_smem(float *sm, int64_t dk, int64_t dv)
    {
        ld = dv + 1;
        hd = sm;
        dH = hd + dk * ld;
        ks = dH + dk * ld;
        qs = ks + dk;
        vv = qs + dk;
        dov = vv + dv;
        u = dov + dv;
        rv = u + dv;
        du = rv + dv;
        mdu = du + dv;
        red = mdu + dv;
    }
};

/* One token's forward on the state S (in sm.hd, stride ld): decay, delta, update. */
__device__ void step_state(const gdn_geo &g, const bwd_smem &sm, int64_t tok, int64_t hv,
                           const float *vsrc, float a, float bt)
{
    for (int64_t c = threadIdx.x; c < g.dv; c += blockDim.x) {
        float pred = 0.0f;
        for (int64_t r = 0; r < g.dk; r++) {
            float s = __fmul_rn(sm.hd[r * sm.ld + c], a);
            sm.hd[r * sm.ld + c] = s;
            pred = __fadd_rn(pred, __fmul_rn(s, sm.ks[r]));
        }
        float u = __fmul_rn(bt, __fsub_rn(vsrc[(tok * g.hv + hv) * g.dv + c], pred));
        for (int64_t r = 0; r < g.dk; r++)
            sm.hd[r * sm.ld + c] = __fadd_rn(sm.hd[r * sm.ld + c], __fmul_rn(sm.ks[r], u));
    }
}

__device__ void load_k(const gdn_geo &g, const bwd_smem &sm, const float *kn, int64_t tok,
                       int64_t hq)
{
    __syncthreads();
    for (int64_t r = threadIdx.x; r < g.dk; r += blockDim.x)
        sm.ks[r] = kn[(tok * g.h + hq) * g.dk + r];
    __syncthreads();
}

__device__ void save_state(const gdn_geo &g, const bwd_smem &sm, float *dst)
{
    __syncthreads();
    for (int64_t e = threadIdx.x; e < g.dk * g.dv; e += blockDim.x)
        dst[e] = sm.hd[(e / g.dv) * sm.ld + e % g.dv];
}

__device__ void load_state(const gdn_geo &g, const bwd_smem &sm, const float *src, float *dst)
{
    __syncthreads();
    for (int64_t e = threadIdx.x; e < g.dk * g.dv; e += blockDim.x)
        dst[(e / g.dv) * sm.ld + e % g.dv] = src ? src[e] : 0.0f;
    __syncthreads();
}

/* [GDN-BWD] one block per (value head, sequence). scratch: (nseg + kSeg) states. */
__global__ void __launch_bounds__(kBwdThreads)
    bwd_kernel(gdn_geo g, const float *qn, const float *kn, const float *v, const float *gate,
               const float *beta, const float *h0, const float *dout, const float *dht,
               float *dq_hv, float *dk_hv, float *dvo, float *dg, float *dbeta, float *dh0,
               float *scratch, int64_t nseg_max)
{
    extern __shared__ float smraw[];
    bwd_smem sm(smraw, g.dk, g.dv);
    int64_t hv = blockIdx.x, n = blockIdx.y, ns = g.dk * g.dv;
    int64_t hq = hv / (g.hv / g.h), st = g.start(n), L = g.len(n);
    size_t sbase = static_cast<size_t>(n * g.hv + hv) * ns;
    float *ckpt = scratch + static_cast<size_t>(n * g.hv + hv) * (nseg_max + kSeg) * ns;
    float *seg = ckpt + nseg_max * ns;
    int64_t nseg = (L + kSeg - 1) / kSeg;
    int tid = threadIdx.x, nt = blockDim.x;
    /* checkpoints: the state before tokens 0, kSeg, 2 kSeg, ... */
    load_state(g, sm, h0 ? h0 + sbase : nullptr, sm.hd);
    for (int64_t i = 0; i < L; i++) {
        if (i % kSeg == 0)
            save_state(g, sm, ckpt + (i / kSeg) * ns);
        int64_t tok = st + i;
        load_k(g, sm, kn, tok, hq);
        step_state(g, sm, tok, hv, v, mf::expf_cr(gate[tok * g.hv + hv]), beta[tok * g.hv + hv]);
    }
    load_state(g, sm, dht ? dht + sbase : nullptr, sm.dH);
    for (int64_t cs = nseg - 1; cs >= 0; cs--) {
        int64_t i0 = cs * kSeg, i1 = i0 + kSeg < L ? i0 + kSeg : L;
        load_state(g, sm, ckpt + cs * ns, sm.hd);
        for (int64_t i = i0; i < i1; i++) {
            save_state(g, sm, seg + (i - i0) * ns);
            if (i + 1 == i1)
                break;
            int64_t tok = st + i;
            load_k(g, sm, kn, tok, hq);
            step_state(g, sm, tok, hv, v, mf::expf_cr(gate[tok * g.hv + hv]),
                       beta[tok * g.hv + hv]);
        }
        for (int64_t i = i1 - 1; i >= i0; i--) {
            int64_t tok = st + i, th = tok * g.hv + hv;
            float a = mf::expf_cr(gate[th]), bt = beta[th];
            __syncthreads();
            for (int64_t r = tid; r < g.dk; r += nt) {
                sm.ks[r] = kn[(tok * g.h + hq) * g.dk + r];
                sm.qs[r] = __fmul_rn(g.scale, qn[(tok * g.h + hq) * g.dk + r]);
            }
            for (int64_t c = tid; c < g.dv; c += nt) {
                sm.vv[c] = v[th * g.dv + c];
                sm.dov[c] = dout[th * g.dv + c];
            }
            const float *prev = seg + (i - i0) * ns;
            for (int64_t e = tid; e < ns; e += nt)
                sm.hd[(e / g.dv) * sm.ld + e % g.dv] = __fmul_rn(prev[e], a);
            __syncthreads();
            for (int64_t c = tid; c < g.dv; c += nt) { /* the forward again: rv, u */
                float pred = 0.0f;
                for (int64_t r = 0; r < g.dk; r++)
                    pred = __fadd_rn(pred, __fmul_rn(sm.hd[r * sm.ld + c], sm.ks[r]));
                float rv = __fsub_rn(sm.vv[c], pred);
                sm.rv[c] = rv;
                sm.u[c] = __fmul_rn(bt, rv);
            }
            __syncthreads();
            for (int64_t r = tid; r < g.dk; r += nt) { /* dq̃, then dH += (scale q) do^T */
                float acc = 0.0f, kr = sm.ks[r], qr = sm.qs[r];
                for (int64_t c = 0; c < g.dv; c++) {
                    float h = __fadd_rn(sm.hd[r * sm.ld + c], __fmul_rn(kr, sm.u[c]));
                    acc = __fadd_rn(acc, __fmul_rn(h, sm.dov[c]));
                }
                dq_hv[th * g.dk + r] = __fmul_rn(g.scale, acc);
                for (int64_t c = 0; c < g.dv; c++)
                    sm.dH[r * sm.ld + c] =
                        __fadd_rn(sm.dH[r * sm.ld + c], __fmul_rn(qr, sm.dov[c]));
            }
            __syncthreads();
            for (int64_t c = tid; c < g.dv; c += nt) {
                float acc = 0.0f;
                for (int64_t r = 0; r < g.dk; r++)
                    acc = __fadd_rn(acc, __fmul_rn(sm.dH[r * sm.ld + c], sm.ks[r]));
                sm.du[c] = acc;
                float bdu = __fmul_rn(bt, acc);
                sm.mdu[c] = -bdu;
                dvo[th * g.dv + c] = round_dt(g.dt, bdu);
            }
            __syncthreads();
            if (tid == 0) {
                float db = 0.0f;
                for (int64_t c = 0; c < g.dv; c++)
                    db = __fadd_rn(db, __fmul_rn(sm.du[c], sm.rv[c]));
                dbeta[th] = db;
            }
            for (int64_t r = tid; r < g.dk; r += nt) {
                float acc = 0.0f, acc2 = 0.0f;
                for (int64_t c = 0; c < g.dv; c++)
                    acc = __fadd_rn(acc, __fmul_rn(sm.dH[r * sm.ld + c], sm.u[c]));
                for (int64_t c = 0; c < g.dv; c++)
                    acc2 = __fadd_rn(acc2, __fmul_rn(sm.hd[r * sm.ld + c], sm.mdu[c]));
                dk_hv[th * g.dk + r] = __fadd_rn(acc, acc2);
            }
            __syncthreads();
            for (int64_t e = tid; e < ns; e += nt) { /* dh' = dH + k̂ (-β du)^T */
                int64_t r = e / g.dv, c = e % g.dv;
                sm.dH[r * sm.ld + c] =
                    __fadd_rn(sm.dH[r * sm.ld + c], __fmul_rn(sm.ks[r], sm.mdu[c]));
            }
            __syncthreads();
            if (tid == 0) { /* dg: rows increasing, then columns */
                float dgt = 0.0f;
                for (int64_t r = 0; r < g.dk; r++)
                    for (int64_t c = 0; c < g.dv; c++)
                        dgt = __fadd_rn(dgt, __fmul_rn(sm.dH[r * sm.ld + c], sm.hd[r * sm.ld + c]));
                dg[th] = dgt;
            }
            __syncthreads();
            for (int64_t e = tid; e < ns; e += nt) {
                int64_t r = e / g.dv, c = e % g.dv;
                sm.dH[r * sm.ld + c] = __fmul_rn(a, sm.dH[r * sm.ld + c]);
            }
        }
    }
    __syncthreads();
    if (dh0)
        for (int64_t e = tid; e < ns; e += nt)
            dh0[sbase + e] = sm.dH[(e / g.dv) * sm.ld + e % g.dv];
}

/* dq or dk of each (token, q/k head) [GDN-GVA] [GDN-L2NORM]: one thread per row. */
__global__ void qk_kernel(gdn_geo g, const float *x, const float *d_hv, float *dx, int64_t rows)
{
    int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    int64_t tok = row / g.h, hq = row % g.h, grp = g.hv / g.h;
    const float *xr = x + row * g.dk;
    float *out = dx + row * g.dk;
    for (int64_t e = 0; e < g.dk; e++) {
        float acc = 0.0f;
        for (int64_t hv = hq * grp; hv < (hq + 1) * grp; hv++)
            acc = __fadd_rn(acc, d_hv[(tok * g.hv + hv) * g.dk + e]);
        out[e] = acc;
    }
    if (g.l2) {
        float r = l2_r(xr, g.dk), c = 0.0f;
        for (int64_t e = 0; e < g.dk; e++)
            c = __fadd_rn(c, __fmul_rn(__fdiv_rn(xr[e], r), out[e]));
        for (int64_t e = 0; e < g.dk; e++)
            out[e] = __fdiv_rn(__fsub_rn(out[e], __fmul_rn(__fdiv_rn(xr[e], r), c)), r);
    }
    for (int64_t e = 0; e < g.dk; e++)
        out[e] = round_dt(g.dt, out[e]);
}

struct gdn_req {
    gdn_geo g;
    int64_t tokens, maxlen;
    dbuf<int32_t> cu;

    qs_status init(const qs_gdn_args *a)
    {
        const qs_gdn_params &p = a->p;
        if (p.dtype != QS_FP32 && p.dtype != QS_BF16 && p.dtype != QS_FP16)
            return refuse("dtype must be fp32, bf16 or fp16", a->why, a->why_len);
        if (p.b < 0 || p.t < 0 || p.h < 1 || p.hv < 1 || p.dk < 1 || p.dv < 1 || p.hv % p.h != 0)
            return QS_ERR_SHAPE;
        if (p.b > 65535 || p.hv > 65535)
            return refuse("more than 65535 sequences or value heads", a->why, a->why_len);
        g = gdn_geo{p.b,    p.t, p.h, p.hv, p.dk, p.dv, nullptr, p.scale, p.use_qk_l2norm ? 1 : 0,
                    p.dtype};
        tokens = p.cu_seqlens ? p.t : p.b * p.t;
        maxlen = p.cu_seqlens ? 0 : p.t;
        if (p.cu_seqlens) {
            for (int64_t n = 0; n < p.b; n++) {
                int64_t l = p.cu_seqlens[n + 1] - p.cu_seqlens[n];
                maxlen = l > maxlen ? l : maxlen;
            }
            cudaError_t err = cu.up(p.cu_seqlens, static_cast<size_t>(p.b + 1));
            if (err != cudaSuccess)
                return cuda_fail(err, "cu_seqlens", a->why, a->why_len);
            g.cu = cu.p;
        }
        return QS_OK;
    }
    size_t fwd_smem() const
    {
        return static_cast<size_t>(g.dk * 32 + 2 * g.dk) * sizeof(float);
    }
    size_t bwd_smem() const
    {
        return static_cast<size_t>(2 * g.dk * (g.dv + 1) + 2 * g.dk + 7 * g.dv + 32) *
               sizeof(float);
    }
};

constexpr size_t kSmemMax = 220 * 1024;

/* The request's inputs on the device, as every path of both directions reads them: q and
 * k with q̂ and k̂ (l2-normalized where asked), v, g, beta, and h0 when given. */
cudaError_t prep(const gdn_req &r, const qs_gdn_args *a, dbuf<float> &q, dbuf<float> &k,
                 dbuf<float> &qn, dbuf<float> &kn, dbuf<float> &v, dbuf<float> &g,
                 dbuf<float> &beta, dbuf<float> &h0)
{
    size_t nqk = static_cast<size_t>(r.tokens * r.g.h * r.g.dk);
    cudaError_t err = q.up(a->q, nqk);
    if (err == cudaSuccess)
        err = k.up(a->k, nqk);
    if (err == cudaSuccess)
        err = qn.alloc(nqk);
    if (err == cudaSuccess)
        err = kn.alloc(nqk);
    int64_t rows = r.tokens * r.g.h;
    if (err == cudaSuccess && rows > 0) {
        prep_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, q.p, qn.p, rows);
        prep_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, k.p, kn.p, rows);
        err = cudaGetLastError();
    }
    const qs_gdn_params &p = a->p;
    size_t nv = r.tokens * p.hv * p.dv, ng = r.tokens * p.hv, ns = p.b * p.hv * p.dk * p.dv;
    if (err == cudaSuccess)
        err = v.up(a->v, nv);
    if (err == cudaSuccess)
        err = g.up(a->g, ng);
    if (err == cudaSuccess)
        err = beta.up(a->beta, ng);
    if (err == cudaSuccess && a->h0)
        err = h0.up(a->h0, ns);
    return err;
}

/* The forward and backward QSPEC_CUDA_GDN selects; an unknown value is the reference's. */
enum gdn_path {
    kPathReference,
    kPathChunk,
    kPathChunkBf16,
    kPathChunkSmem,
    kPathChunkFused,
    kPathChunkWg
};

gdn_path gdn_path_selected()
{
    static const gdn_path sel = [] {
        gdn_forms_from_env();
        const char *e = getenv("QSPEC_CUDA_GDN");
        if (e && strcmp(e, "chunk") == 0)
            return kPathChunk;
        if (e && strcmp(e, "chunk-bf16") == 0)
            return kPathChunkBf16;
        if (e && strcmp(e, "chunk-bf16-smem") == 0)
            return kPathChunkSmem;
        if (e && strcmp(e, "chunk-bf16-fused") == 0)
            return kPathChunkFused;
        if (e && strcmp(e, "chunk-bf16-wgmma") == 0)
            return kPathChunkWg;
        return kPathReference;
    }();
    return sel;
}

/* The chunk kernels' operand precision for a request on a chunked path. chunk-bf16-smem:
 * the BF16-staged kernels where they apply (BF16 values, dk = dv = 128: their tiles;
 * chunk-bf16-fused: their forward in one kernel, the same bits; chunk-bf16-wgmma: that kernel's
 * walk on wgmma), and
 * the FP32-accurate TF32x3 kernels elsewhere, whose error fits the FP32 tolerances of
 * [ATTN-TOL] that BF16 operands do not. */
int chunk_mma(gdn_path path, const qs_gdn_params &p)
{
    if (path == kPathChunkBf16)
        return kGdnMmaBf16;
    if ((path == kPathChunkSmem || path == kPathChunkFused || path == kPathChunkWg) &&
        p.dtype == QS_BF16 && p.dk == 128 && p.dv == 128)
        return path == kPathChunkWg      ? kGdnMmaBf16Wg
               : path == kPathChunkFused ? kGdnMmaBf16Fused
                                         : kGdnMmaBf16Smem;
    return kGdnMmaTf32x3;
}

/* FP32 values to BF16 (round to nearest even; exact for values of the dtype) and back. */
__global__ void to_bf16_kernel(const float *x, __nv_bfloat16 *y, size_t n)
{
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
         e += static_cast<size_t>(gridDim.x) * blockDim.x)
        y[e] = __float2bfloat16_rn(x[e]);
}
__global__ void from_bf16_kernel(const __nv_bfloat16 *x, float *y, size_t n)
{
    for (size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
         e += static_cast<size_t>(gridDim.x) * blockDim.x)
        y[e] = __bfloat162float(x[e]);
}
unsigned conv_blocks(size_t n)
{
    size_t b = (n + 255) / 256;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}
/* The BF16 copy of a device FP32 array (the staged kernels' io; q̂ and k̂ round here, as
 * the chunk matmuls round every operand to BF16). */
cudaError_t as_bf16(const dbuf<float> &x, dbuf<__nv_bfloat16> &y)
{
    cudaError_t err = y.alloc(x.n);
    if (err == cudaSuccess && x.n) {
        to_bf16_kernel<<<conv_blocks(x.n), 256>>>(x.p, y.p, x.n);
        err = cudaGetLastError();
    }
    return err;
}
/* q̂, k̂ and v as the staged kernels' BF16 arrays. */
cudaError_t staged_qkv(const dbuf<float> &qn, const dbuf<float> &kn, const dbuf<float> &v,
                       dbuf<__nv_bfloat16> &qb, dbuf<__nv_bfloat16> &kb, dbuf<__nv_bfloat16> &vb)
{
    cudaError_t err = as_bf16(qn, qb);
    if (err == cudaSuccess)
        err = as_bf16(kn, kb);
    if (err == cudaSuccess)
        err = as_bf16(v, vb);
    return err;
}
cudaError_t widen_bf16(const dbuf<__nv_bfloat16> &x, dbuf<float> &y)
{
    if (x.n)
        from_bf16_kernel<<<conv_blocks(x.n), 256>>>(x.p, y.p, x.n);
    return cudaGetLastError();
}

/* The chunked forward of [GDN-CHUNK] on the kit's arrays: l2norm (prep), then the two
 * kernels of cuda/qc_gdn_chunk.cu. */
qs_status chunk_fwd(const gdn_req &r, qs_gdn_args *a, int mma)
{
    const qs_gdn_params &p = a->p;
    size_t nv = r.tokens * p.hv * p.dv, ns = p.b * p.hv * p.dk * p.dv;
    dbuf<float> q, k, qn, kn, v, g, beta, h0, o, ht;
    cudaError_t err = prep(r, a, q, k, qn, kn, v, g, beta, h0);
    if (err == cudaSuccess)
        err = o.up(nullptr, nv);
    if (err == cudaSuccess)
        err = ht.alloc(ns);
    gdn_chunk_problem cp{p.b, p.t, r.tokens, p.h, p.hv, p.dk, p.dv, p.scale, p.dtype, r.g.cu};
    gdn_chunk_plan plan;
    if (err == cudaSuccess)
        err = gdn_chunk_plan_make(cp, p.cu_seqlens, &plan);
    if (gdn_chunk_staged(mma)) {
        dbuf<__nv_bfloat16> qb, kb, vb, ob;
        if (err == cudaSuccess)
            err = staged_qkv(qn, kn, v, qb, kb, vb);
        if (err == cudaSuccess)
            err = ob.alloc(nv);
        if (err == cudaSuccess)
            err = gdn_chunk_fwd(cp, plan, mma, kGdnIoBf16, qb.p, kb.p, vb.p, g.p, beta.p,
                                a->h0 ? h0.p : nullptr, ob.p, ht.p, 0);
        if (err == cudaSuccess)
            err = widen_bf16(ob, o);
        if (err == cudaSuccess)
            err = cudaDeviceSynchronize();
    } else if (err == cudaSuccess) {
        err = gdn_chunk_fwd(cp, plan, mma, kGdnIoF32, qn.p, kn.p, v.p, g.p, beta.p,
                            a->h0 ? h0.p : nullptr, o.p, ht.p, 0);
    }
    if (err == cudaSuccess)
        err = cudaDeviceSynchronize();
    gdn_chunk_plan_free(&plan);
    if (err == cudaSuccess)
        err = o.down(a->o);
    if (err == cudaSuccess && a->ht)
        err = ht.down(a->ht);
    return err == cudaSuccess ? QS_OK : cuda_fail(err, "gdn_fwd (chunk)", a->why, a->why_len);
}

/* The chunked backward (docs/gdn.md, "The chunked backward") on the kit's arrays: l2norm
 * (prep), the kernels of cuda/qc_gdn_chunk.cu, then qk_kernel on the value heads' dq̂ and
 * dk̂ it leaves in the plan: the sum over each q/k head's value heads, the l2norm backward
 * and the rounding, as the reference path does them. */
qs_status chunk_bwd(const gdn_req &r, qs_gdn_args *a, int mma)
{
    const qs_gdn_params &p = a->p;
    size_t nqk = r.tokens * p.h * p.dk, nv = r.tokens * p.hv * p.dv, ng = r.tokens * p.hv;
    size_t ns = p.b * p.hv * p.dk * p.dv, nhk = r.tokens * p.hv * p.dk;
    dbuf<float> q, k, qn, kn, v, g, beta, h0, dout, dht, dq, dk, dv, dg, dbeta, dh0;
    cudaError_t err = prep(r, a, q, k, qn, kn, v, g, beta, h0);
    if (err == cudaSuccess)
        err = dout.up(a->dout, nv);
    if (err == cudaSuccess && a->dht)
        err = dht.up(a->dht, ns);
    if (err == cudaSuccess)
        err = dq.alloc(nqk);
    if (err == cudaSuccess)
        err = dk.alloc(nqk);
    if (err == cudaSuccess)
        err = dv.up(nullptr, nv);
    if (err == cudaSuccess)
        err = dg.up(nullptr, ng);
    if (err == cudaSuccess)
        err = dbeta.up(nullptr, ng);
    if (err == cudaSuccess)
        err = dh0.up(nullptr, ns);
    gdn_chunk_problem cp{p.b, p.t, r.tokens, p.h, p.hv, p.dk, p.dv, p.scale, p.dtype, r.g.cu};
    gdn_chunk_plan plan;
    if (err == cudaSuccess)
        err = gdn_chunk_plan_make_bwd(cp, p.cu_seqlens, &plan, gdn_chunk_staged(mma));
    const float *dqk = plan.dqk; /* [2][tokens][hv][dk] FP32: dq̂, then dk̂ */
    dbuf<float> dqk_wide;
    if (gdn_chunk_staged(mma)) {
        dbuf<__nv_bfloat16> qb, kb, vb, dob, dvb;
        if (err == cudaSuccess)
            err = staged_qkv(qn, kn, v, qb, kb, vb);
        if (err == cudaSuccess)
            err = as_bf16(dout, dob);
        if (err == cudaSuccess)
            err = dvb.alloc(nv);
        if (err == cudaSuccess)
            err = gdn_chunk_bwd(cp, plan, mma, kGdnIoBf16, qb.p, kb.p, vb.p, g.p, beta.p,
                                a->h0 ? h0.p : nullptr, dob.p, a->dht ? dht.p : nullptr, nullptr,
                                nullptr, dvb.p, dg.p, dbeta.p, dh0.p, 0);
        if (err == cudaSuccess)
            err = widen_bf16(dvb, dv);
        /* the staged kernels leave the per-value-head dq̂, dk̂ in BF16 (plan.dqk): widened
         * for qk_kernel */
        if (err == cudaSuccess)
            err = dqk_wide.alloc(2 * nhk);
        if (err == cudaSuccess && nhk) {
            from_bf16_kernel<<<conv_blocks(2 * nhk), 256>>>(
                reinterpret_cast<const __nv_bfloat16 *>(plan.dqk), dqk_wide.p, 2 * nhk);
            err = cudaGetLastError();
        }
        dqk = dqk_wide.p;
        if (err == cudaSuccess)
            err = cudaDeviceSynchronize();
    } else if (err == cudaSuccess) {
        err = gdn_chunk_bwd(cp, plan, mma, kGdnIoF32, qn.p, kn.p, v.p, g.p, beta.p,
                            a->h0 ? h0.p : nullptr, dout.p, a->dht ? dht.p : nullptr, nullptr,
                            nullptr, dv.p, dg.p, dbeta.p, dh0.p, 0);
    }
    int64_t rows = r.tokens * p.h;
    if (err == cudaSuccess && rows > 0) {
        qk_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, q.p, dqk, dq.p, rows);
        qk_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, k.p, dqk + nhk, dk.p, rows);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaDeviceSynchronize();
    gdn_chunk_plan_free(&plan);
    if (err == cudaSuccess)
        err = dq.down(a->dq);
    if (err == cudaSuccess)
        err = dk.down(a->dk);
    if (err == cudaSuccess)
        err = dv.down(a->dv);
    if (err == cudaSuccess)
        err = dg.down(a->dg);
    if (err == cudaSuccess)
        err = dbeta.down(a->dbeta);
    if (err == cudaSuccess && a->dh0)
        err = dh0.down(a->dh0);
    return err == cudaSuccess ? QS_OK : cuda_fail(err, "gdn_bwd (chunk)", a->why, a->why_len);
}

} // namespace
} // namespace qc

using qc::dbuf;

qs_status qc_slot_gdn_fwd(void *state, qs_gdn_args *a)
{
    (void)state;
    qc::gdn_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    qc::gdn_path path = qc::gdn_path_selected();
    if (path != qc::kPathReference && qc::gdn_chunk_fits(a->p.dk, a->p.dv)) {
        /* another FP32 order: the case's tolerance ([CASE-PLUGIN-REF]; the kit's preset) */
        a->claim = QS_ATTN_CLAIM_TOLERANCE;
        return qc::chunk_fwd(r, a, qc::chunk_mma(path, a->p));
    }
    /* the reference's operations in its order ([CASE-PLUGIN-REF]; cuda/attn_check) */
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    if (r.fwd_smem() > qc::kSmemMax)
        return qc::refuse("gdn_fwd: key dim too large for the state in shared memory", a->why,
                          a->why_len);
    const qs_gdn_params &p = a->p;
    size_t nv = r.tokens * p.hv * p.dv, ns = p.b * p.hv * p.dk * p.dv;
    dbuf<float> q, k, qn, kn, v, g, beta, h0, o, ht;
    cudaError_t err = qc::prep(r, a, q, k, qn, kn, v, g, beta, h0);
    if (err == cudaSuccess)
        err = o.up(nullptr, nv);
    if (err == cudaSuccess)
        err = ht.alloc(ns);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(qc::fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)r.fwd_smem());
    if (err != cudaSuccess)
        return qc::cuda_fail(err, "gdn_fwd buffers", a->why, a->why_len);
    if (p.b > 0)
        qc::fwd_kernel<<<dim3((unsigned)((p.dv + 31) / 32), (unsigned)p.hv, (unsigned)p.b), 32,
                         r.fwd_smem()>>>(r.g, qn.p, kn.p, v.p, g.p, beta.p, a->h0 ? h0.p : nullptr,
                                         o.p, ht.p);
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = o.down(a->o);
    if (err == cudaSuccess && a->ht)
        err = ht.down(a->ht);
    return err == cudaSuccess ? QS_OK : qc::cuda_fail(err, "gdn_fwd", a->why, a->why_len);
}

qs_status qc_slot_gdn_bwd(void *state, qs_gdn_args *a)
{
    (void)state;
    qc::gdn_req r;
    qs_status st = r.init(a);
    if (st != QS_OK)
        return st;
    qc::gdn_path path = qc::gdn_path_selected();
    if (path != qc::kPathReference && qc::gdn_chunk_fits(a->p.dk, a->p.dv)) {
        /* another FP32 order: the case's tolerance ([CASE-PLUGIN-REF]; the kit's preset) */
        a->claim = QS_ATTN_CLAIM_TOLERANCE;
        return qc::chunk_bwd(r, a, qc::chunk_mma(path, a->p));
    }
    /* the reference's operations in its order ([CASE-PLUGIN-REF]; cuda/attn_check) */
    a->claim = QS_ATTN_CLAIM_REFERENCE;
    if (r.bwd_smem() > qc::kSmemMax)
        return qc::refuse("gdn_bwd: dk x dv too large for the state in shared memory", a->why,
                          a->why_len);
    const qs_gdn_params &p = a->p;
    size_t nqk = r.tokens * p.h * p.dk, nv = r.tokens * p.hv * p.dv, ng = r.tokens * p.hv;
    size_t ns = p.b * p.hv * p.dk * p.dv, nhk = r.tokens * p.hv * p.dk;
    int64_t nseg = (r.maxlen + qc::kSeg - 1) / qc::kSeg;
    dbuf<float> q, k, qn, kn, v, g, beta, h0, dout, dht, dqh, dkh, dq, dk, dv, dg, dbeta, dh0, scr;
    cudaError_t err = qc::prep(r, a, q, k, qn, kn, v, g, beta, h0);
    if (err == cudaSuccess)
        err = dout.up(a->dout, nv);
    if (err == cudaSuccess && a->dht)
        err = dht.up(a->dht, ns);
    if (err == cudaSuccess)
        err = dqh.up(nullptr, nhk);
    if (err == cudaSuccess)
        err = dkh.up(nullptr, nhk);
    if (err == cudaSuccess)
        err = dq.alloc(nqk);
    if (err == cudaSuccess)
        err = dk.alloc(nqk);
    if (err == cudaSuccess)
        err = dv.up(nullptr, nv);
    if (err == cudaSuccess)
        err = dg.up(nullptr, ng);
    if (err == cudaSuccess)
        err = dbeta.up(nullptr, ng);
    if (err == cudaSuccess)
        err = dh0.alloc(ns);
    if (err == cudaSuccess)
        err = scr.alloc(static_cast<size_t>(p.b * p.hv) * (nseg + qc::kSeg) * p.dk * p.dv);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(qc::bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)r.bwd_smem());
    if (err != cudaSuccess)
        return qc::cuda_fail(err, "gdn_bwd buffers", a->why, a->why_len);
    if (p.b > 0) {
        if (a->h0 == nullptr)
            cudaMemset(dh0.p, 0, ns * sizeof(float));
        qc::bwd_kernel<<<dim3((unsigned)p.hv, (unsigned)p.b), qc::kBwdThreads, r.bwd_smem()>>>(
            r.g, qn.p, kn.p, v.p, g.p, beta.p, a->h0 ? h0.p : nullptr, dout.p,
            a->dht ? dht.p : nullptr, dqh.p, dkh.p, dv.p, dg.p, dbeta.p, dh0.p, scr.p, nseg);
    }
    int64_t rows = r.tokens * p.h;
    if (rows > 0) {
        qc::qk_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, q.p, dqh.p, dq.p, rows);
        qc::qk_kernel<<<(unsigned)((rows + 127) / 128), 128>>>(r.g, k.p, dkh.p, dk.p, rows);
    }
    err = cudaDeviceSynchronize();
    if (err == cudaSuccess)
        err = dq.down(a->dq);
    if (err == cudaSuccess)
        err = dk.down(a->dk);
    if (err == cudaSuccess)
        err = dv.down(a->dv);
    if (err == cudaSuccess)
        err = dg.down(a->dg);
    if (err == cudaSuccess)
        err = dbeta.down(a->dbeta);
    if (err == cudaSuccess && a->dh0)
        err = dh0.down(a->dh0);
    return err == cudaSuccess ? QS_OK : qc::cuda_fail(err, "gdn_bwd", a->why, a->why_len);
}
