/* qc_tile.cuh: the fast paths of the FP8 quantizers, for aligned shapes — the arithmetic
 * is qc_device.cuh's, element by element the same as the generic kernels; only the data
 * movement differs.
 *
 * rows_vec: the rowwise copy alone, a grid-stride walk of 8-element chunks (one 16-byte
 * load, one 8-byte store per chunk); a 1xB block of B = 8G elements is G adjacent lanes,
 * reduced with G-lane shuffles.
 *
 * rows_pipe: the rowwise copy of MXFP8 and block 1x128 with the next step's loads in
 * flight while the current step is encoded, coalesced or a lane owning 32 elements.
 *
 * rows_bulk: the same encode with the input staged in shared memory by cp.async.bulk, a
 * block's next windows in flight. The launchers pick a rowwise kernel and its grid by
 * qc_rows_path.
 *
 * tile128: both copies of a 128x128 tile in one pass by 256 threads. Lane l of warp w
 * owns column chunk c = l % 16 (8 columns) of rows h*64 + g*4 + i (g = 2w + l/16; h, i
 * in 0..1, 0..3): 64 values in registers. Row blocks reduce over lanes; column maxima go
 * through shared memory, one partial per (h, g) per column; the transposed copy packs the
 * four codes of rows g*4..g*4+3 into one word of a [128][33]-word shared tile and leaves
 * it row by row, 128 bytes a warp. */
#ifndef QC_TILE_CUH
#define QC_TILE_CUH

#include "qc_dispatch.cuh"

namespace qc
{

/* How a kernel scales: tensorwise (one scale), MXFP8 (1x32 / 32x1 E8M0), block 1x128
 * (1x128 of x and of its transpose) and block 128x128 (one scale per tile). */
enum { K_TW = 0, K_MX = 1, K_B1 = 2, K_B2 = 3 };

struct fast_args {
    qc_copy row, col;
    int rule; /* mxfp8: 0 te, 1 ocp */
    qc_block_params bp;
    float tw_scale_given;    /* tensorwise: the scale when amax_in is NULL (delayed) */
    qc_tw_params tw;         /* tensorwise: eps, pow2 for the scale from *amax_in */
    const uint32_t *amax_in; /* tensorwise current scaling: the tensor amax bits */
    uint32_t *amax_out;      /* tensorwise delayed scaling: the amax seen (atomic max) */
};

/* The tensorwise scale of a request [REC-CS-SCALE]. */
__device__ __forceinline__ float fast_tw_scale(const fast_args &a, int e5)
{
    if (!a.amax_in)
        return a.tw_scale_given;
    return scale_from_amax(__uint_as_float(*a.amax_in), e5 ? 57344.0f : 448.0f, a.tw.eps, a.tw.pow2,
                           3.402823466e38f);
}

/* [REC-BLK-SCALE]: the block scale and its inverse. */
__device__ __forceinline__ float fast_blk_scale(const qc_block_params &p, int e5,
                                                uint32_t amax_bits, float *sinv)
{
    float s = scale_from_amax(__uint_as_float(amax_bits), e5 ? 57344.0f : 448.0f, p.eps, p.pow2,
                              p.value_for_inf);
    *sinv = __fdiv_rn(1.0f, s);
    return s;
}

/* Folds one amax (bits) into *out: one atomic from one thread, and none when *out already
 * holds as much (the common case once the first blocks have run). */
__device__ __forceinline__ void publish_amax(uint32_t *out, uint32_t t)
{
    if (threadIdx.x % 32 == 0 && t > *static_cast<volatile uint32_t *>(out))
        atomicMax(out, t);
}

/* The maximum over G adjacent lanes (G a power of two), every lane active. */
template <int G> __device__ __forceinline__ uint32_t group_max(uint32_t a)
{
#pragma unroll
    for (int d = 1; d < G; d *= 2)
        a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, d));
    return a;
}

/* Block-wide maximum of one value per thread (256 threads); every thread gets it. */
__device__ __forceinline__ uint32_t block_max256(uint32_t a, uint32_t *scratch8)
{
    a = warp_max(a);
    if (threadIdx.x % 32 == 0)
        scratch8[threadIdx.x / 32] = a;
    __syncthreads();
    a = 0;
#pragma unroll
    for (int i = 0; i < 8; i++)
        a = max(a, scratch8[i]);
    return a;
}

template <int KIND, int RULE, int E5> __device__ __forceinline__ uint8_t fast_enc(float v)
{
    if (KIND == K_MX)
        return mx_rule<RULE, E5>::enc(v);
    return enc_sat<E5>(v);
}

/* max with NaN propagation (PTX max.NaN): a NaN or Inf among |p| shows in the result. */
__device__ __forceinline__ float fmax_nan(float a, float b)
{
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* |v| maxima for the amax: fmaxf ignores NaN and the result is never -0 [REC-AMAX]. */
__device__ __forceinline__ float amax8(float acc, const float v[8])
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        acc = fmaxf(acc, fabsf(v[j]));
    return acc;
}

__device__ __forceinline__ uint32_t fbits(float v)
{
    return __float_as_uint(v);
}

/* The codes of eight scaled values p (first code lowest). All finite: the conversion
 * instruction two at a time, which is exactly enc_sat on finite values; otherwise (a NaN
 * or an Inf, rare) the encoder of the rule element by element. */
template <int KIND, int RULE, int E5> __device__ __forceinline__ uint2 enc8(const float p[8])
{
    float big = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++)
        big = fmax_nan(big, fabsf(p[j]));
    uint32_t q[4];
    if (big <= 3.402823466e38f) {
#pragma unroll
        for (int t = 0; t < 4; t++)
            q[t] = __nv_cvt_float2_to_fp8x2(make_float2(p[2 * t], p[2 * t + 1]), __NV_SATFINITE,
                                            E5 ? __NV_E5M2 : __NV_E4M3);
    } else {
#pragma unroll
        for (int t = 0; t < 4; t++)
            q[t] = fast_enc<KIND, RULE, E5>(p[2 * t]) |
                   (static_cast<uint32_t>(fast_enc<KIND, RULE, E5>(p[2 * t + 1])) << 8);
    }
    return make_uint2(q[0] | (q[1] << 16), q[2] | (q[3] << 16));
}

/* enc8 of v[j] * mult and of v[j] * mult[j]. */
template <int KIND, int RULE, int E5>
__device__ __forceinline__ uint2 enc8_scaled(const float v[8], float mult)
{
    float p[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        p[j] = __fmul_rn(v[j], mult);
    return enc8<KIND, RULE, E5>(p);
}
template <int KIND, int RULE, int E5>
__device__ __forceinline__ uint2 enc8_scaled(const float v[8], const float mult[8])
{
    float p[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        p[j] = __fmul_rn(v[j], mult[j]);
    return enc8<KIND, RULE, E5>(p);
}

/* Byte j (0..7) of four 8-code rows, as one word (row 0 lowest). */
__device__ __forceinline__ uint32_t column_word(const uint2 r[4], int j)
{
    uint32_t a0 = j < 4 ? r[0].x : r[0].y, a1 = j < 4 ? r[1].x : r[1].y;
    uint32_t a2 = j < 4 ? r[2].x : r[2].y, a3 = j < 4 ? r[3].x : r[3].y;
    uint32_t sel = static_cast<uint32_t>(j % 4) | (static_cast<uint32_t>(4 + j % 4) << 4);
    return __byte_perm(__byte_perm(a0, a1, sel), __byte_perm(a2, a3, sel), 0x5410);
}

/* The rowwise copy of an [M, K] input alone: K a multiple of the block (32 for MXFP8, 128
 * for block 1x128; 8 for tensorwise, with M*K a multiple of 8). 256 threads a block; a
 * warp takes 32 U chunks a step, U a lane (all U loads in flight before any is used). */
template <int DT, int E5, int KIND, int RULE, int U>
__global__ void __launch_bounds__(256) rows_vec(qc_input in, fast_args a)
{
    static_assert(U == 2 || U == 4, "two or four chunks a lane");
    constexpr int G = KIND == K_MX ? 4 : (KIND == K_B1 ? 16 : 1);
    const int64_t K = in.cols;
    const int64_t nchunk = in.rows * K / 8;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * 256 * U;
    const int lane = threadIdx.x % 32;
    float s = KIND == K_TW ? fast_tw_scale(a, E5) : 1.0f;
    float seen = 0.0f;
    /* Warp-uniform trip count: a group of G lanes is all in range or all out (nchunk and the
     * warp's step are multiples of G). */
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * 256 * U + (threadIdx.x / 32) * 32 * U;
         base < nchunk; base += stride) {
        float v[U][8];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t ch = base + u * 32 + lane;
            if (ch < nchunk)
                load8<DT>(in.x, static_cast<size_t>(ch) * 8, v[u]);
            else
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[u][j] = 0.0f;
        }
        /* Block 1x128: lane u (< U) of each half-warp divides for chunk set u, writes its
         * scale_inv (m*(K/128) + k/128 = ch/16) and hands the scale to the others. */
        float b1s[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            b1s[u] = 1.0f;
        if constexpr (KIND == K_B1) {
            uint32_t r[U], mine = 0;
#pragma unroll
            for (int u = 0; u < U; u++) {
                r[u] = group_max<G>(fbits(amax8(0.0f, v[u])));
                mine = (lane & (U - 1)) == u ? r[u] : mine;
            }
            int u = lane & (U - 1);
            float sinv, smine = fast_blk_scale(a.bp, E5, mine, &sinv);
            int64_t ch = base + u * 32 + lane;
            if (ch < nchunk && (lane & 15) < U)
                static_cast<float *>(a.row.scale)[ch / 16] = sinv;
#pragma unroll
            for (int j = 0; j < U; j++)
                b1s[j] = __shfl_sync(0xFFFFFFFFu, smine, (lane & 16) | j);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t ch = base + u * 32 + lane;
            bool live = ch < nchunk;
            float am = amax8(0.0f, v[u]);
            float mult = s;
            if (KIND == K_MX) {
                uint32_t e = mx_rule<RULE, E5>::scale(__uint_as_float(group_max<G>(fbits(am))));
                mult = mx_rule<RULE, E5>::mult(e);
                if (live && lane % G == 0) /* row m, block k/32: m*(K/32) + k/32 = ch/4 */
                    static_cast<uint8_t *>(a.row.scale)[ch / 4] = static_cast<uint8_t>(e);
            } else if (KIND == K_B1) {
                mult = b1s[u];
            } else {
                seen = fmaxf(seen, am);
            }
            uint2 w = enc8_scaled<KIND, RULE, E5>(v[u], mult);
            if (live)
                *reinterpret_cast<uint2 *>(a.row.data + ch * 8) = w;
        }
    }
    if (KIND == K_TW && a.amax_out)
        publish_amax(a.amax_out, warp_max(fbits(seen)));
}

/* Eight input elements as loaded: BF16 and FP16 stay two to a word until each is read (half
 * the registers of eight floats), FP32 is eight words. at(j) is element j as FP32, the same
 * value as load8's v[j]. */
template <int DT> struct raw8 {
    uint32_t w[DT == QC_IN_FP32 ? 8 : 4];
    __device__ __forceinline__ float at(int j) const
    {
        if (DT == QC_IN_FP32)
            return __uint_as_float(w[j]);
        uint32_t u = w[j / 2];
        if (DT == QC_IN_BF16)
            return __uint_as_float(j % 2 ? u & 0xFFFF0000u : u << 16);
        return __half2float(__ushort_as_half(static_cast<unsigned short>(j % 2 ? u >> 16 : u & 0xFFFFu)));
    }
    __device__ __forceinline__ void unpack(float v[8]) const
    {
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = at(j);
    }
};

/* 16-byte loads and stores; HINT 1: streaming (the input through the non-coherent path,
 * not kept in L1, L2 fetching 256 bytes; the codes stored evict-first). */
template <int HINT> __device__ __forceinline__ uint4 ld16(const uint4 *p)
{
    if (!HINT)
        return *p;
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}
template <int HINT> __device__ __forceinline__ void st16(uint8_t *p, uint4 v)
{
    if (HINT)
        __stcs(reinterpret_cast<uint4 *>(p), v);
    else
        *reinterpret_cast<uint4 *>(p) = v;
}
template <int HINT> __device__ __forceinline__ void st8(uint8_t *p, uint2 v)
{
    if (HINT)
        __stcs(reinterpret_cast<uint2 *>(p), v);
    else
        *reinterpret_cast<uint2 *>(p) = v;
}

/* Elements e0 .. e0+7 (e0 a multiple of 8, the buffer 16-byte aligned) as raw8. */
template <int DT, int HINT> __device__ __forceinline__ void load_raw8(const void *x, size_t e0, raw8<DT> &r)
{
    const uint4 *p = static_cast<const uint4 *>(x) + e0 / (DT == QC_IN_FP32 ? 4 : 8);
    uint4 u = ld16<HINT>(p);
    r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
    if constexpr (DT == QC_IN_FP32) {
        uint4 b = ld16<HINT>(p + 1);
        r.w[4] = b.x, r.w[5] = b.y, r.w[6] = b.z, r.w[7] = b.w;
    }
}

/* |v| maximum of a raw chunk, as amax8. */
template <int DT> __device__ __forceinline__ float amax_raw8(float acc, const raw8<DT> &r)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        acc = fmaxf(acc, fabsf(r.at(j)));
    return acc;
}

/* The rowwise copy of one warp window of 128 chunks (1024 elements) of MXFP8 or block 1x128
 * from cur (the four chunks of this lane, chunk(q)) to the codes and scales: the encode step
 * of rows_pipe and rows_bulk. Lane l holds chunks
 *   OWN = 0: 32q + l (q = 0..3) of the window: a 1x32 block is 4 adjacent lanes, a 1x128
 *            block 16, reduced with shuffles;
 *   OWN = 1: 4l + q: the lane owns 32 consecutive elements, one MXFP8 block (no shuffle,
 *            one E8M0 a lane, two 16-byte code stores) or a quarter of a 1x128 block (two
 *            shuffles; every lane of the four divides, which costs the warp no more issue
 *            than one lane dividing).
 * Every lane of the warp takes part (a block's lanes are all in range or all out). */
template <int OWN> __device__ __forceinline__ int64_t window_chunk(int64_t w, int q, int lane)
{
    return w + (OWN ? 4 * lane + q : 32 * q + lane);
}

template <int DT, int E5, int KIND, int RULE, int OWN, int HINT>
__device__ __forceinline__ void encode_window(const raw8<DT> (&cur)[4], int64_t win, int64_t nchunk,
                                              const fast_args &a, int lane)
{
    constexpr int G = OWN ? (KIND == K_MX ? 1 : 4) : (KIND == K_MX ? 4 : 16);
    float am[4], mult[4];
#pragma unroll
    for (int q = 0; q < 4; q++)
        am[q] = amax_raw8<DT>(0.0f, cur[q]);
    if constexpr (OWN) {
        /* the lane's 32 elements: MXFP8 block u, or quarter u % 4 of 1x128 block u / 4 */
        int64_t u = window_chunk<OWN>(win, 0, lane) / 4;
        bool live = window_chunk<OWN>(win, 0, lane) < nchunk;
        uint32_t b = group_max<G>(fbits(fmaxf(fmaxf(am[0], am[1]), fmaxf(am[2], am[3]))));
        float m;
        if constexpr (KIND == K_MX) {
            uint32_t e = mx_rule<RULE, E5>::scale(__uint_as_float(b));
            m = mx_rule<RULE, E5>::mult(e);
            if (live)
                static_cast<uint8_t *>(a.row.scale)[u] = static_cast<uint8_t>(e);
        } else {
            float sinv;
            m = fast_blk_scale(a.bp, E5, b, &sinv);
            if (live && lane % 4 == 0)
                static_cast<float *>(a.row.scale)[u / 4] = sinv;
        }
#pragma unroll
        for (int q = 0; q < 4; q++)
            mult[q] = m;
    } else if constexpr (KIND == K_MX) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int64_t ch = window_chunk<OWN>(win, q, lane);
            uint32_t e = mx_rule<RULE, E5>::scale(__uint_as_float(group_max<4>(fbits(am[q]))));
            mult[q] = mx_rule<RULE, E5>::mult(e);
            if (ch < nchunk && lane % 4 == 0) /* block ch / 4 */
                static_cast<uint8_t *>(a.row.scale)[ch / 4] = static_cast<uint8_t>(e);
        }
    } else {
        /* lane q (< 4) of each half-warp divides for chunk set q and hands out the scale */
        uint32_t mine = 0;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint32_t r = group_max<16>(fbits(am[q]));
            mine = (lane & 3) == q ? r : mine;
        }
        int64_t ch = window_chunk<OWN>(win, lane & 3, lane);
        float sinv, smine = fast_blk_scale(a.bp, E5, mine, &sinv);
        if (ch < nchunk && (lane & 15) < 4)
            static_cast<float *>(a.row.scale)[ch / 16] = sinv;
#pragma unroll
        for (int q = 0; q < 4; q++)
            mult[q] = __shfl_sync(0xFFFFFFFFu, smine, (lane & 16) | q);
    }
    uint2 w[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float v[8];
        cur[q].unpack(v);
        w[q] = enc8_scaled<KIND, RULE, E5>(v, mult[q]);
    }
    if constexpr (OWN) {
        int64_t ch = window_chunk<OWN>(win, 0, lane);
        if (ch < nchunk) {
            st16<HINT>(a.row.data + ch * 8, make_uint4(w[0].x, w[0].y, w[1].x, w[1].y));
            st16<HINT>(a.row.data + ch * 8 + 16, make_uint4(w[2].x, w[2].y, w[3].x, w[3].y));
        }
    } else {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int64_t ch = window_chunk<OWN>(win, q, lane);
            if (ch < nchunk)
                st8<HINT>(a.row.data + ch * 8, w[q]);
        }
    }
}

/* rows_pipe: the rowwise copy of MXFP8 or block 1x128 alone, a warp taking a window of 128
 * chunks (1024 elements) a step, 4 chunks a lane (encode_window's OWN mappings), with the
 * loads of its next window issued before the current one is encoded (twice the bytes in
 * flight of rows_vec at the same occupancy). With OWN = 1 a load of the warp touches 32
 * sectors, each half; the lane's next load takes the other half (from L1). K is a multiple
 * of the block. */
template <int DT, int E5, int KIND, int RULE, int OWN, int HINT>
__global__ void __launch_bounds__(256) rows_pipe(qc_input in, fast_args a)
{
    static_assert(KIND == K_MX || KIND == K_B1, "the block kinds");
    const int64_t nchunk = in.rows * in.cols / 8;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * 8 * 128;
    const int lane = threadIdx.x % 32;
    raw8<DT> cur[4];
    int64_t win = (static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32) * 128;
    auto load_window = [&](raw8<DT>(&r)[4], int64_t w) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int64_t ch = window_chunk<OWN>(w, q, lane);
            if (ch < nchunk)
                load_raw8<DT, HINT>(in.x, static_cast<size_t>(ch) * 8, r[q]);
            else
#pragma unroll
                for (int i = 0; i < (DT == QC_IN_FP32 ? 8 : 4); i++)
                    r[q].w[i] = 0;
        }
    };
    load_window(cur, win);
    for (; win < nchunk; win += stride) {
        raw8<DT> nxt[4];
        load_window(nxt, win + stride);
        encode_window<DT, E5, KIND, RULE, OWN, HINT>(cur, win, nchunk, a, lane);
#pragma unroll
        for (int q = 0; q < 4; q++)
            cur[q] = nxt[q];
    }
}

/* The shared-memory barrier and bulk copy of rows_bulk (PTX ISA 8.0, sm_90). */
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/* Arms the barrier's current phase for bytes of asynchronous copies (one arrival). */
__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
/* Waits until the barrier's phase of the given parity has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra wait_%=;\n"
                 "}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst,
 * completing on bar. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* rows_bulk: encode_window's coalesced walk (OWN = 0) with the input staged in shared memory
 * by cp.async.bulk, each copy completing on its stage's mbarrier, the next steps' windows in
 * flight while the current one is encoded.
 *   WARPS = 0: a block of 8 warps takes a window of 1024 chunks (8192 contiguous elements) a
 *     step, four stages; thread 0 issues the copies. Every thread reads its four chunks of
 *     the stage into registers (16-byte shared loads, a warp 512 contiguous bytes), the block
 *     syncs, the stage is refilled with the block's window four steps ahead, and only then
 *     the window is encoded, so the refill overlaps the arithmetic.
 *   WARPS = 1: every warp runs the same ring on its own (windows of 128 chunks, six stages,
 *     lane 0 issuing, a warp sync in place of the block's), so no warp waits for another.
 * The grid is the resident one; the last window may be partial (its bytes a multiple of 16:
 * a chunk is 16 or 32 bytes). */
template <int WARPS> struct bulk_geo {
    static constexpr int stages = WARPS ? 6 : 4;
    static constexpr int rings = WARPS ? 8 : 1;      /* rings a block: one a warp, or one */
    static constexpr int64_t chunks = WARPS ? 128 : 1024; /* a window */
};
template <int DT, int WARPS> __host__ __device__ constexpr uint32_t bulk_window_bytes()
{
    return static_cast<uint32_t>(bulk_geo<WARPS>::chunks) * (DT == QC_IN_FP32 ? 32u : 16u);
}
template <int DT, int WARPS> __host__ __device__ constexpr size_t bulk_smem_bytes()
{
    return static_cast<size_t>(bulk_geo<WARPS>::rings) * bulk_geo<WARPS>::stages *
           (bulk_window_bytes<DT, WARPS>() + sizeof(uint64_t));
}

template <int DT, int E5, int KIND, int RULE, int WARPS>
__global__ void __launch_bounds__(256) rows_bulk(qc_input in, fast_args a)
{
    static_assert(KIND == K_MX || KIND == K_B1, "the block kinds");
    using geo = bulk_geo<WARPS>;
    constexpr int S = geo::stages;
    constexpr uint32_t CB = DT == QC_IN_FP32 ? 32u : 16u; /* bytes a chunk */
    constexpr uint32_t WB = bulk_window_bytes<DT, WARPS>();
    extern __shared__ __align__(128) unsigned char bulk_sm[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int ring = WARPS ? warp : 0;
    unsigned char *buf = bulk_sm + static_cast<size_t>(ring) * S * WB;
    uint64_t *bar = reinterpret_cast<uint64_t *>(bulk_sm + static_cast<size_t>(geo::rings) * S * WB) + ring * S;
    const bool issuer = WARPS ? lane == 0 : threadIdx.x == 0;
    const int64_t nchunk = in.rows * in.cols / 8;
    const int64_t nwin = (nchunk + geo::chunks - 1) / geo::chunks;
    /* step i of this ring takes window first + i nrings, in stage i % S */
    const int64_t first = WARPS ? static_cast<int64_t>(blockIdx.x) * 8 + warp : blockIdx.x;
    const int64_t nrings = static_cast<int64_t>(gridDim.x) * geo::rings;
    auto issue = [&](int64_t i) {
        int64_t w = first + i * nrings;
        if (w >= nwin)
            return;
        int64_t n = nchunk - w * geo::chunks;
        uint32_t bytes = static_cast<uint32_t>(n < geo::chunks ? n : geo::chunks) * CB;
        mbar_expect(&bar[i % S], bytes);
        bulk_load(buf + (i % S) * WB, static_cast<const unsigned char *>(in.x) + w * geo::chunks * CB, bytes,
                  &bar[i % S]);
    };
    if (issuer) {
        for (int s = 0; s < S; s++)
            mbar_init(&bar[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (issuer)
        for (int i = 0; i < S; i++)
            issue(i);
    for (int64_t i = 0;; i++) {
        int64_t w = first + i * nrings;
        if (w >= nwin)
            break;
        mbar_wait(&bar[i % S], static_cast<uint32_t>((i / S) & 1));
        const unsigned char *stage = buf + (i % S) * WB;
        const int wc = WARPS ? 0 : warp * 128; /* this warp's first chunk in the window */
        const int64_t win = w * geo::chunks + wc;
        raw8<DT> cur[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (win + 32 * q + lane < nchunk) {
                const uint4 *p = reinterpret_cast<const uint4 *>(stage + (wc + 32 * q + lane) * CB);
                uint4 u = p[0];
                cur[q].w[0] = u.x, cur[q].w[1] = u.y, cur[q].w[2] = u.z, cur[q].w[3] = u.w;
                if constexpr (DT == QC_IN_FP32) {
                    uint4 b = p[1];
                    cur[q].w[4] = b.x, cur[q].w[5] = b.y, cur[q].w[6] = b.z, cur[q].w[7] = b.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < (DT == QC_IN_FP32 ? 8 : 4); j++)
                    cur[q].w[j] = 0;
            }
        }
        /* every thread of the ring has read the stage: it may be refilled */
        if (WARPS)
            __syncwarp();
        else
            __syncthreads();
        if (issuer) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(i + S);
        }
        encode_window<DT, E5, KIND, RULE, 0, 0>(cur, win, nchunk, a, lane);
    }
}

/* The eight values a tile128 thread holds per row chunk: eight floats (PACK 0), or raw8
 * (PACK 1: BF16 and FP16 two to a register, unpacked at each use). */
template <int DT, int PACK> struct held8 {
    float v[8];
    __device__ __forceinline__ void load(const void *x, size_t e0) { load8<DT>(x, e0, v); }
    __device__ __forceinline__ float at(int j) const { return v[j]; }
};
template <int DT> struct held8<DT, 1> {
    raw8<DT> r;
    __device__ __forceinline__ void load(const void *x, size_t e0) { load_raw8<DT, 0>(x, e0, r); }
    __device__ __forceinline__ float at(int j) const { return r.at(j); }
};
template <int DT, int PACK> __device__ __forceinline__ void unpack(const held8<DT, PACK> &h, float t[8])
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        t[j] = h.at(j);
}

/* Shared memory of tile128. */
struct tile_smem {
    uint32_t part[2][16][128]; /* column maxima per (h, g), as bits */
    float cmul[4][128];        /* column multipliers: MXFP8 per 32-row block, block 1x128 row 0 */
    uint32_t codes[128][33];   /* transposed codes, four rows a word */
    uint32_t scratch[8];
};

/* The transposed copy of tile128 from the codes of the thread's rows: codes[k][r/4]
 * holds rows r..r+3 of column k; then 128 bytes a warp per output row. */
__device__ __forceinline__ void tile128_transposed(const fast_args &a, const uint2 (&rc)[2][4],
                                                   tile_smem &sm, int c, int g, int w, int lane,
                                                   int64_t M, int64_t m0, int64_t k0)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            sm.codes[c * 8 + j][h * 16 + g] = column_word(rc[h], j);
    __syncthreads();
#pragma unroll 4
    for (int kk = w; kk < 128; kk += 8)
        reinterpret_cast<uint32_t *>(a.col.data + (k0 + kk) * M + m0)[lane] = sm.codes[kk][lane];
}

/* Both copies of the 128x128 tile (blockIdx.y, blockIdx.x) of an [M, K] input, M and K
 * multiples of 128. The columnwise copy is transposed ([K, M]) except for MXFP8 ([M, K]).
 * Either copy may be absent (NULL data). */
template <int DT, int E5, int KIND, int RULE, int MINB, int PACK>
__global__ void __launch_bounds__(256, MINB) tile128(qc_input in, fast_args a)
{
    __shared__ tile_smem sm;
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int c = lane % 16, g = 2 * w + lane / 16;
    const int64_t M = in.rows, K = in.cols;
    const int64_t m0 = static_cast<int64_t>(blockIdx.y) * 128,
                  k0 = static_cast<int64_t>(blockIdx.x) * 128;
    const int64_t kc = k0 + c * 8; /* this thread's first column */

    held8<DT, PACK> v[2][4];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[h][i].load(in.x, static_cast<size_t>((m0 + h * 64 + g * 4 + i) * K + kc));

    /* Row amax per owned row, and the thread's total. */
    float ram[2][4], tot = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float t[8];
            unpack(v[h][i], t);
            ram[h][i] = amax8(0.0f, t);
            tot = fmaxf(tot, ram[h][i]);
        }

    /* One scale for the tile (tensorwise, 128x128) [REC-BLK-2D]. */
    float s1 = 1.0f, s1inv = 1.0f;
    if (KIND == K_TW) {
        s1 = fast_tw_scale(a, E5);
        if (a.amax_out) {
            uint32_t t = block_max256(fbits(tot), sm.scratch);
            if (w == 0)
                publish_amax(a.amax_out, t);
        }
    } else if (KIND == K_B2) {
        s1 = fast_blk_scale(a.bp, E5, block_max256(fbits(tot), sm.scratch), &s1inv);
        if (threadIdx.x == 0) {
            if (a.row.data)
                static_cast<float *>(a.row.scale)[blockIdx.y * gridDim.x + blockIdx.x] = s1inv;
            if (a.col.data)
                static_cast<float *>(a.col.scale)[blockIdx.x * gridDim.y + blockIdx.y] = s1inv;
        }
    }

    /* Block 1x128 row scales: lane c < 8 of each half-warp divides for row (c/4, c%4) of
     * the half's rows, writes its scale_inv and hands the scale to the others. */
    float bs[2][4];
    if constexpr (KIND == K_B1) {
        uint32_t mine = 0;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t r = group_max<16>(fbits(ram[h][i]));
                if (h * 4 + i == (c & 7))
                    mine = r;
            }
        float sinv, smine = fast_blk_scale(a.bp, E5, mine, &sinv);
        if (a.row.data && c < 8)
            static_cast<float *>(
                a.row.scale)[(m0 + (c / 4) * 64 + g * 4 + c % 4) * (K / 128) + blockIdx.x] = sinv;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                bs[h][i] = __shfl_sync(0xFFFFFFFFu, smine, (lane & 16) | (h * 4 + i));
    }

    /* The rowwise copy; its codes are also the transposed copy's for one-scale tiles. */
    uint2 rc[2][4];
    if (a.row.data || KIND == K_TW || KIND == K_B2) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int64_t m = m0 + h * 64 + g * 4 + i;
                float mult = s1;
                if (KIND == K_MX) {
                    uint32_t e =
                        mx_rule<RULE, E5>::scale(__uint_as_float(group_max<4>(fbits(ram[h][i]))));
                    mult = mx_rule<RULE, E5>::mult(e);
                    if (a.row.data && c % 4 == 0)
                        static_cast<uint8_t *>(a.row.scale)[m * (K / 32) + kc / 32] =
                            static_cast<uint8_t>(e);
                } else if (KIND == K_B1) {
                    mult = bs[h][i];
                }
                float t[8];
                unpack(v[h][i], t);
                rc[h][i] = enc8_scaled<KIND, RULE, E5>(t, mult);
                if (a.row.data)
                    *reinterpret_cast<uint2 *>(a.row.data + m * K + kc) = rc[h][i];
            }
    }
    if (!a.col.data)
        return;

    /* Column scales: MXFP8 per 32-row block, block 1x128 per column of the tile. */
    if constexpr (KIND == K_MX || KIND == K_B1) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float am = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    am = fmaxf(am, fabsf(v[h][i].at(j)));
                sm.part[h][g][c * 8 + j] = fbits(am);
            }
        __syncthreads();
        if (KIND == K_MX) {
            for (int q = threadIdx.x; q < 512; q += 256) {
                int k = q % 128, b = q / 128; /* rows 32b .. 32b+31: h = b/2, g in 8(b%2).. */
                uint32_t am = 0;
                for (int gg = 0; gg < 8; gg++)
                    am = max(am, sm.part[b / 2][(b % 2) * 8 + gg][k]);
                uint32_t e = mx_rule<RULE, E5>::scale(__uint_as_float(am));
                sm.cmul[b][k] = mx_rule<RULE, E5>::mult(e);
                static_cast<uint8_t *>(a.col.scale)[(m0 / 32 + b) * K + k0 + k] =
                    static_cast<uint8_t>(e);
            }
        } else if (threadIdx.x < 128) {
            int k = threadIdx.x;
            uint32_t am = 0;
            for (int h = 0; h < 2; h++)
                for (int gg = 0; gg < 16; gg++)
                    am = max(am, sm.part[h][gg][k]);
            float sinv;
            sm.cmul[0][k] = fast_blk_scale(a.bp, E5, am, &sinv);
            static_cast<float *>(a.col.scale)[(k0 + k) * (M / 128) + blockIdx.y] = sinv;
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mult[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                mult[j] = sm.cmul[KIND == K_MX ? 2 * h + g / 8 : 0][c * 8 + j];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float t[8];
                unpack(v[h][i], t);
                uint2 cw = enc8_scaled<KIND, RULE, E5>(t, mult);
                if (KIND == K_MX) /* columnwise MXFP8 keeps the [M, K] layout */
                    *reinterpret_cast<uint2 *>(a.col.data + (m0 + h * 64 + g * 4 + i) * K + kc) =
                        cw;
                else
                    rc[h][i] = cw;
            }
        }
    }
    if constexpr (KIND != K_MX)
        tile128_transposed(a, rc, sm, c, g, w, lane, M, m0, k0);
}

/* Whether the fast paths apply: every buffer 16-byte aligned, and for tile128 M and K
 * multiples of 128. */
inline bool fast_rows_ok(const qc_input &in, int64_t kmult)
{
    return !qc_force_generic && aligned16(in.x) && in.cols % kmult == 0 &&
           (in.rows * in.cols) % 8 == 0;
}
inline bool fast_tile_ok(const qc_input &in)
{
    return !qc_force_generic && aligned16(in.x) && in.rows % 128 == 0 && in.cols % 128 == 0;
}

/* The grid of a grid-stride kernel: the blocks the device holds at once (per_sm an SM, from
 * the occupancy calculator) and no more than the work needs, so that no block waits for a
 * second wave holding a full share of the walk. */
inline unsigned resident_grid(int per_sm, int64_t need)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        sms = 132;
    int64_t g = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
    return static_cast<unsigned>(g < need ? g : need);
}

/* Launches a grid-stride row kernel of 256 threads: a fixed grid of up to 8 blocks an SM
 * (132 SMs) when resident is 0, else the resident grid (the occupancy of kern is asked once
 * per instance). */
template <typename Kernel>
cudaError_t launch_walk(Kernel kern, int *per_sm, int resident, int64_t blocks_needed,
                        const qc_input &in, const fast_args &a)
{
    unsigned grid;
    if (resident) {
        if (*per_sm == 0) {
            cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kern, 256, 0);
            if (err != cudaSuccess)
                return err;
        }
        grid = resident_grid(*per_sm, blocks_needed);
    } else {
        grid = static_cast<unsigned>(blocks_needed < 132 * 8 ? blocks_needed : 132 * 8);
    }
    if (grid == 0)
        return cudaSuccess;
    kern<<<grid, 256>>>(in, a);
    return cudaGetLastError();
}

template <int DT, int E5, int KIND, int RULE, int U>
cudaError_t launch_vec(const qc_input &in, const fast_args &a, int resident)
{
    static int per_sm = 0;
    return launch_walk(rows_vec<DT, E5, KIND, RULE, U>, &per_sm, resident,
                       blocks_for(in.rows * in.cols / 8, 256 * U), in, a);
}

template <int DT, int E5, int KIND, int RULE, int OWN, int HINT>
cudaError_t launch_pipe(const qc_input &in, const fast_args &a)
{
    static int per_sm = 0;
    return launch_walk(rows_pipe<DT, E5, KIND, RULE, OWN, HINT>, &per_sm, 1,
                       blocks_for(in.rows * in.cols / 8, 8 * 128), in, a);
}

template <int DT, int E5, int KIND, int RULE, int WARPS>
cudaError_t launch_bulk(const qc_input &in, const fast_args &a)
{
    static int per_sm = 0;
    auto kern = rows_bulk<DT, E5, KIND, RULE, WARPS>;
    constexpr size_t smem = bulk_smem_bytes<DT, WARPS>();
    /* the attribute is the current device's: set at every call */
    cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
    if (err == cudaSuccess && per_sm == 0)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, 256, smem);
    if (err != cudaSuccess)
        return err;
    unsigned grid = resident_grid(per_sm, (in.rows * in.cols / 8 + 1023) / 1024);
    if (grid == 0)
        return cudaSuccess;
    kern<<<grid, 256, smem>>>(in, a);
    return cudaGetLastError();
}

/* Launches the rowwise copy by qc_rows_path (qc_kernels.h): rows_vec with two or four
 * chunks a lane, or rows_pipe (MXFP8 and block 1x128, with 16-byte aligned codes;
 * tensorwise, or unaligned codes, take rows_vec's two chunks on the resident grid). */
template <int DT, int E5, int KIND, int RULE>
cudaError_t launch_rows(const qc_input &in, const fast_args &a)
{
    int path = qc_rows_path;
    if (path == QC_ROWS_AUTO)
        path = KIND == K_MX || KIND == K_B1 ? QC_ROWS_VEC4 : QC_ROWS_VEC2;
    if (path == QC_ROWS_VEC4)
        return launch_vec<DT, E5, KIND, RULE, 4>(in, a, 0);
    if (path == QC_ROWS_VEC2)
        return launch_vec<DT, E5, KIND, RULE, 2>(in, a, 0);
    if constexpr (KIND == K_MX || KIND == K_B1) {
        if (aligned16(a.row.data)) {
            switch (path) {
            case QC_ROWS_COAL:
                return launch_pipe<DT, E5, KIND, RULE, 0, 0>(in, a);
            case QC_ROWS_OWN:
                return launch_pipe<DT, E5, KIND, RULE, 1, 0>(in, a);
            case QC_ROWS_COAL_CS:
                return launch_pipe<DT, E5, KIND, RULE, 0, 1>(in, a);
            case QC_ROWS_OWN_CS:
                return launch_pipe<DT, E5, KIND, RULE, 1, 1>(in, a);
            case QC_ROWS_BULK:
                return launch_bulk<DT, E5, KIND, RULE, 0>(in, a);
            case QC_ROWS_BULK_WARP:
                return launch_bulk<DT, E5, KIND, RULE, 1>(in, a);
            default:
                break;
            }
        }
    }
    return launch_vec<DT, E5, KIND, RULE, 2>(in, a, 1);
}

/* Launches tile128 by qc_tile_path (qc_kernels.h) for MXFP8 and block 1x128; the
 * one-scale tiles (tensorwise, 128x128) are built for three blocks an SM. */
template <int DT, int E5, int KIND, int RULE>
cudaError_t launch_tile(const qc_input &in, const fast_args &a)
{
    dim3 grid(static_cast<unsigned>(in.cols / 128), static_cast<unsigned>(in.rows / 128));
    if (grid.x == 0 || grid.y == 0)
        return cudaSuccess;
    if constexpr (KIND == K_TW || KIND == K_B2) {
        tile128<DT, E5, KIND, RULE, 3, 0><<<grid, 256>>>(in, a);
    } else {
        switch (qc_tile_path) {
        case QC_TILE_3:
            tile128<DT, E5, KIND, RULE, 3, 0><<<grid, 256>>>(in, a);
            break;
        case QC_TILE_PACK3:
            tile128<DT, E5, KIND, RULE, 3, 1><<<grid, 256>>>(in, a);
            break;
        case QC_TILE_PACK4:
            tile128<DT, E5, KIND, RULE, 4, 1><<<grid, 256>>>(in, a);
            break;
        default:
            tile128<DT, E5, KIND, RULE, 2, 0><<<grid, 256>>>(in, a);
            break;
        }
    }
    return cudaGetLastError();
}

} // namespace qc

#endif
