/* qc_flash_wgmma.cuh: the flash forward of spec/attention.md [ATTN-FWD], [ATTN-LSE] (and, in
 * their own sections below, the backward [ATTN-BWD]) on Hopper
 * warpgroup tensor-core instructions (wgmma.mma_async, sm_90a), for BF16 and FP16 requests
 * with d_qk <= 192, d_v <= 128 (classes 64/64, 128/128, 192/128), d and dv multiples of 8;
 * and d_qk <= 576, d_v <= 512 (class 3, absorbed MLA) by fwd_mla_kernel (its own section).
 * Same outputs and conventions as fl::fwd_kernel of cuda/qc_flash.cuh (o rounded to the
 * dtype and stored as FP32, lse = m + log l in natural-log units, rows with no key untouched),
 * same addressing (fl::geo: sbhd, bshd, thd with padded offsets, GQA, top-left causal).
 *
 * Design (docs/perf.md, "Flash attention"):
 * - A block is two warpgroups (256 threads) and owns 128 query rows, 64 per warpgroup; the
 *   key/value tiles are 128 keys. Every thread issues cp.async (16 bytes, zero-filled past
 *   the sequence or the head dim) for the Q tile once and for the K and V tiles, double
 *   buffered: K_{j+1} and V_j load while S_j = Q K_j^T and P_{j-1} V_{j-1} are computed (the
 *   latter on the tensor cores during the softmax of S_j). mbarriers, not block barriers,
 *   say when a buffer has landed (cp.async.mbarrier.arrive of every thread) and when it is
 *   free (an arrival of every thread after its wgmma reading it completed), so the two
 *   warpgroups drift apart and one's softmax overlaps the other's products.
 * - Shared-memory tiles are in the 128-byte swizzle layout of the wgmma descriptors: a tile
 *   of R rows x C columns (16-bit) is C/64 panels of R rows of 128 bytes; the 16-byte chunk c
 *   of row r sits at chunk c ^ (r & 7); panels are 1024-byte aligned. Q, K and V all use it
 *   with their global rows (tokens) as rows.
 * - S = Q K^T: wgmma m64n128k16 with both operands from shared memory, K-major (the head dim
 *   contiguous in both): descriptor start advanced by 32 bytes per k step inside a panel,
 *   by a panel per 4 steps; leading byte offset unused (16), stride byte offset 1024 (8 rows).
 * - The online softmax in FP32 registers (the accumulator layout: per warp 16 rows, per
 *   thread rows g and g+8), exp2 of fma(s, scale log2 e, -m) with ex2.approx; masks only on
 *   tiles that reach past the sequence or the diagonal.
 * - O += P V: P from registers (the A-fragment layout equals the accumulator's, as for
 *   mma.sync), V from shared memory in its natural layout (dv contiguous, "MN-major") with
 *   the transpose bit of the B operand set (allowed for 16-bit types): leading byte offset =
 *   the stride between 64-column panels of V (128 keys x 128 bytes), stride byte offset =
 *   1024 (8 keys), start advanced by 16 keys (2048 bytes) per k step. Under kSplit P is given
 *   as hi + lo (two wgmmas per step), as the plugin's mma.sync kernels do (docs/sdpa.md).
 * The wgmma code exists only in the sm_90a compilation (__CUDA_ARCH_FEAT_SM90_ALL); in any
 * other the kernels trap, and available() says false, so the dispatcher falls back. With
 * QC_EMU defined the header compiles as host C++ for the CPU emulator of cuda/emu/qc_emu.h
 * (tests/flash_emu), which gives each instruction its PTX meaning. */
#ifndef QC_FLASH_WGMMA_CUH
#define QC_FLASH_WGMMA_CUH

#include <type_traits>

#include "qc_flash.cuh"

#if defined(QC_EMU) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define QC_WGMMA 1
#else
#define QC_WGMMA 0
#endif

namespace qc
{
namespace fl
{
namespace wg
{

constexpr int kRows = 128;   /* query rows of a block, 64 per warpgroup */
constexpr int kBN = 128;     /* keys of a K/V tile */
constexpr int kThreads = 256; /* two warpgroups */

/* The element offset of (r, c) (c a multiple of 8) in an R-row tile of the swizzle layout. */
template <int R> __device__ __forceinline__ int sw_off(int r, int c)
{
    return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3);
}

#ifndef QC_EMU
/* 16 bytes global -> shared, or 16 zero bytes when !ok (src is then not read). */
__device__ __forceinline__ void cp16z(void *s, const void *g, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(s)), "l"(g),
                 "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_wait_n()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* this thread's generic-proxy writes to shared memory (cp.async's) -> visible to wgmma */
__device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* mbarriers (shared memory, 8 bytes each) */
__device__ __forceinline__ void mb_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mb_arrive(uint64_t *b)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_addr(b))
                 : "memory");
}
/* an arrival when this thread's cp.async operations so far have completed (the count at
 * init includes it: .noinc) */
__device__ __forceinline__ void mb_arrive_cp(uint64_t *b)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_addr(b)) : "memory");
}
/* until the phase of this parity has completed */
__device__ __forceinline__ void mb_wait(uint64_t *b, int parity)
{
    uint32_t done = 0, a = smem_addr(b);
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
    } while (!done);
}

/* named barriers of the two warpgroups (256 threads) */
__device__ __forceinline__ void nb_sync(int id)
{
    asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void nb_arrive(int id)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}
#else /* the same on the CPU (cuda/emu/qc_emu.h): copies land when waited for */
inline void cp16z(void *s, const void *g, bool ok)
{
    emu::cp_async(s, g, ok);
}
inline void cp_commit()
{
    emu::cp_commit();
}
template <int N> inline void cp_wait_n()
{
    emu::cp_wait(N);
}
inline void fence_async_smem()
{
    emu::fence_proxy_async();
}
inline void mb_init(uint64_t *b, int count)
{
    emu::mb_init(b, static_cast<unsigned>(count));
}
inline void mb_arrive(uint64_t *b)
{
    emu::mb_arrive(b);
}
inline void mb_arrive_cp(uint64_t *b)
{
    emu::cp_land_all();
    emu::mb_arrive(b);
}
inline void mb_wait(uint64_t *b, int parity)
{
    emu::mb_wait(b, parity);
}
inline void nb_sync(int id)
{
    emu::named_sync(id);
}
inline void nb_arrive(int id)
{
    emu::named_arrive(id);
}
#endif

/* Rows [0, R) x columns [0, C) of a swizzled tile from global rows r0 + r (row stride rs
 * elements) for r < valid and columns c < dim (dim, rs multiples of 8, g 16-byte aligned);
 * zeros elsewhere. NT threads, thread tid. kFull: a tile with every row and column in range
 * takes the copies with no predicates and constant offsets from one pointer a row (the
 * absorbed-MLA forward; the class 0-2 forward measured slower with it, 2026-12-06). */
template <typename T, int R, int C, int NT, bool kFull = false>
__device__ __forceinline__ void load_sw(T *sm, const T *g, int64_t rs, int r0, int valid, int dim,
                                        int tid)
{
    /* panel by panel; thread tid: chunk tid % 8 of rows tid / 8 + step * it (one swizzle
     * phase per thread, one pointer per panel advanced by step rows) */
    constexpr int step = NT / 8;
    static_assert(C % 64 == 0 && NT % 64 == 0 && R % step == 0, "tile shape");
    int r = tid / 8, cc = (tid % 8) * 8;
    int swz = (((tid % 8) ^ (r & 7)) << 3) + r * 64;
    if (kFull && valid >= R && dim >= C) { /* one pointer a row, constant offsets */
#pragma unroll
        for (int it = 0; it < R / step; it++) {
            const T *src = g + (r0 + r + it * step) * rs + cc;
            T *dst = sm + swz + it * step * 64;
#pragma unroll
            for (int p = 0; p < C / 64; p++)
                cp16z(dst + p * (R * 64), src + p * 64, true);
        }
        return;
    }
#pragma unroll
    for (int p = 0; p < C / 64; p++) {
        int c = p * 64 + cc;
        bool cok = c < dim;
        T *dst = sm + p * (R * 64) + swz;
        const T *src = g + (r0 + r) * rs + c;
#pragma unroll
        for (int it = 0; it < R / step; it++) {
            bool ok = cok && r + it * step < valid;
            cp16z(dst + it * step * 64, ok ? src : g, ok);
            src += step * rs;
        }
    }
}

/* A shared-memory matrix descriptor, 128-byte swizzle, base offset 0. */
__device__ __forceinline__ uint64_t desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    uint32_t a = smem_addr(p);
    uint32_t lo = ((a >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16);
    uint32_t hi = ((sbo >> 4) & 0x3FFF) | (1u << 30);
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

/* The descriptor d of a tile moved on by off elements of T: the start address is the low 14
 * bits of the low word in 16-byte units, and a shared-memory address stays below 2^18, so the
 * sum never carries out of its field (off * sizeof(T) a multiple of 16). One addition, where
 * desc() takes about ten instructions. */
#ifndef QC_EMU
template <typename T> __device__ __forceinline__ uint64_t desc_add(uint64_t d, int off)
{
    uint32_t lo = static_cast<uint32_t>(d) + static_cast<uint32_t>(off * sizeof(T) / 16);
    uint64_t r; /* the pair packed by a move: the compiler would otherwise add in 64 bits */
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(r) : "r"(lo), "r"(static_cast<uint32_t>(d >> 32)));
    return r;
}

__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of these registers (FP32 accumulators or 16-bit
 * operand pairs) across a wgmma wait. */
__device__ __forceinline__ void keep1(float &x)
{
    asm volatile("" : "+f"(x));
}
__device__ __forceinline__ void keep1(uint32_t &x)
{
    asm volatile("" : "+r"(x));
}
#else /* the same on the CPU (cuda/emu/qc_emu.h): a wgmma completes when issued */
template <typename T> inline uint64_t desc_add(uint64_t d, int off)
{
    uint32_t lo = static_cast<uint32_t>(d) + static_cast<uint32_t>(off * sizeof(T) / 16);
    return (d >> 32 << 32) | lo;
}
inline void wg_fence()
{
}
inline void wg_commit()
{
    emu::wg_commit();
}
template <int N> inline void wg_wait()
{
    emu::wg_wait(N);
}
inline void keep1(float &)
{
}
inline void keep1(uint32_t &)
{
}
#endif
template <int NB, typename E> __device__ __forceinline__ void keep(E (*d)[4])
{
#pragma unroll
    for (int i = 0; i < NB; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            keep1(d[i][e]);
}

#if QC_WGMMA && !defined(QC_EMU)
/* The accumulator operands of a wgmma: fragment rows 0..7 or 0..15 of d, four floats each. */
#define QC_WG_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define QC_WG_D32                                                                                  \
    QC_WG_D4(0), QC_WG_D4(1), QC_WG_D4(2), QC_WG_D4(3), QC_WG_D4(4), QC_WG_D4(5), QC_WG_D4(6),     \
        QC_WG_D4(7)
#define QC_WG_D64                                                                                  \
    QC_WG_D32, QC_WG_D4(8), QC_WG_D4(9), QC_WG_D4(10), QC_WG_D4(11), QC_WG_D4(12), QC_WG_D4(13),   \
        QC_WG_D4(14), QC_WG_D4(15)
#define QC_WG_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define QC_WG_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
/* m64n128k16, A and B from shared memory (descriptors), both K-major; TY bf16 or f16. */
#define QC_WG_SS_N128(TY)                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " QC_WG_R64 ", "       \
                 "%64, %65, p, 1, 1, 0, 0;\n"                                                      \
                 "}\n"                                                                             \
                 : QC_WG_D64                                                                       \
                 : "l"(da), "l"(db), "r"(scale_d))
/* m64n128k16 and m64n64k16, A from registers, B from shared memory with the transpose bit. */
#define QC_WG_RS_N128(TY)                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " QC_WG_R64 ", "       \
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"                                        \
                 "}\n"                                                                             \
                 : QC_WG_D64                                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))
/* m64n64k16, A and B from shared memory, both K-major (the backward's S, S^T, dP, dP^T). */
#define QC_WG_SS_N64(TY)                                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " QC_WG_R32 ", "        \
                 "%32, %33, p, 1, 1, 0, 0;\n"                                                      \
                 "}\n"                                                                             \
                 : QC_WG_D32                                                                       \
                 : "l"(da), "l"(db), "r"(scale_d))
#define QC_WG_D16 QC_WG_D4(0), QC_WG_D4(1), QC_WG_D4(2), QC_WG_D4(3)
/* m64n32k16, A and B from shared memory, both K-major (the absorbed-MLA kernels' S). */
#define QC_WG_SS_N32(TY)                                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " "                       \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "        \
                 "%16, %17, p, 1, 1, 0, 0;\n"                                                      \
                 "}\n"                                                                             \
                 : QC_WG_D16                                                                       \
                 : "l"(da), "l"(db), "r"(scale_d))
#define QC_WG_RS_N64(TY)                                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                     \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " QC_WG_R32 ", "        \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"                                        \
                 "}\n"                                                                             \
                 : QC_WG_D32                                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))

__device__ __forceinline__ void mma_ss_n128_bf16(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    QC_WG_SS_N128("bf16");
}
__device__ __forceinline__ void mma_ss_n128_f16(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    QC_WG_SS_N128("f16");
}
__device__ __forceinline__ void mma_rs_n128_bf16(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    QC_WG_RS_N128("bf16");
}
__device__ __forceinline__ void mma_rs_n128_f16(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    QC_WG_RS_N128("f16");
}
__device__ __forceinline__ void mma_ss_n32_bf16(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    QC_WG_SS_N32("bf16");
}
__device__ __forceinline__ void mma_ss_n32_f16(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    QC_WG_SS_N32("f16");
}
__device__ __forceinline__ void mma_ss_n64_bf16(float (*d)[4], uint64_t da, uint64_t db,
                                                int scale_d)
{
    QC_WG_SS_N64("bf16");
}
__device__ __forceinline__ void mma_ss_n64_f16(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    QC_WG_SS_N64("f16");
}
__device__ __forceinline__ void mma_rs_n64_bf16(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    QC_WG_RS_N64("bf16");
}
__device__ __forceinline__ void mma_rs_n64_f16(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    QC_WG_RS_N64("f16");
}
#undef QC_WG_D4
#undef QC_WG_D32
#undef QC_WG_D64
#undef QC_WG_R64
#undef QC_WG_R32
#undef QC_WG_SS_N128
#undef QC_WG_SS_N64
#undef QC_WG_D16
#undef QC_WG_SS_N32
#undef QC_WG_RS_N128
#undef QC_WG_RS_N64
#elif QC_WGMMA /* the same on the CPU (cuda/emu/qc_emu.h) */
#define QC_WG_EMU(NAME, FN, T, N, A)                                                               \
    inline void NAME(float(*d)[4], A a, uint64_t db, int scale_d)                                  \
    {                                                                                              \
        emu::FN<T, N>(d, a, db, scale_d);                                                          \
    }
QC_WG_EMU(mma_ss_n128_bf16, wg_ss, __nv_bfloat16, 128, uint64_t)
QC_WG_EMU(mma_ss_n128_f16, wg_ss, __half, 128, uint64_t)
QC_WG_EMU(mma_ss_n64_bf16, wg_ss, __nv_bfloat16, 64, uint64_t)
QC_WG_EMU(mma_ss_n64_f16, wg_ss, __half, 64, uint64_t)
QC_WG_EMU(mma_rs_n128_bf16, wg_rs, __nv_bfloat16, 128, const uint32_t *)
QC_WG_EMU(mma_rs_n128_f16, wg_rs, __half, 128, const uint32_t *)
QC_WG_EMU(mma_rs_n64_bf16, wg_rs, __nv_bfloat16, 64, const uint32_t *)
QC_WG_EMU(mma_rs_n64_f16, wg_rs, __half, 64, const uint32_t *)
QC_WG_EMU(mma_ss_n32_bf16, wg_ss, __nv_bfloat16, 32, uint64_t)
QC_WG_EMU(mma_ss_n32_f16, wg_ss, __half, 32, uint64_t)
#undef QC_WG_EMU
#endif
#if QC_WGMMA

/* The wgmma calls of a type: scores (m64n{128,64,32}k16, A and B from shared memory, both
 * K-major) and products with P or dS (m64n{128,64}k16, A from registers, B from shared memory
 * with the transpose bit). */
template <typename T, int N>
__device__ __forceinline__ void mma_ss(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    static_assert(N == 32 || N == 64 || N == 128, "n32, n64 or n128");
    if constexpr (std::is_same<T, __half>::value) {
        if constexpr (N == 128)
            mma_ss_n128_f16(d, da, db, scale_d);
        else if constexpr (N == 64)
            mma_ss_n64_f16(d, da, db, scale_d);
        else
            mma_ss_n32_f16(d, da, db, scale_d);
    } else {
        if constexpr (N == 128)
            mma_ss_n128_bf16(d, da, db, scale_d);
        else if constexpr (N == 64)
            mma_ss_n64_bf16(d, da, db, scale_d);
        else
            mma_ss_n32_bf16(d, da, db, scale_d);
    }
}
template <typename T, int N>
__device__ __forceinline__ void mma_rs(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    static_assert(N == 64 || N == 128, "n64 or n128");
    if constexpr (std::is_same<T, __half>::value) {
        if constexpr (N == 128)
            mma_rs_n128_f16(d, a, db, scale_d);
        else
            mma_rs_n64_f16(d, a, db, scale_d);
    } else {
        if constexpr (N == 128)
            mma_rs_n128_bf16(d, a, db, scale_d);
        else
            mma_rs_n64_bf16(d, a, db, scale_d);
    }
}

/* x[16][4] = A B^T over k in [0, 16 KS): A the 64 rows of the warpgroup, from a swizzled
 * tile of RA rows starting at row ra (a multiple of 8), B the 128 rows of a swizzled tile
 * of 128 rows; both with at least 16 KS columns. Issued and committed, not waited for. */
template <typename T, int KS, int RA>
__device__ __forceinline__ void qk_issue(float (*x)[4], const T *sa, int ra, const T *sb)
{
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        uint64_t da = desc(sa + (kk >> 2) * (RA * 64) + ra * 64 + (kk & 3) * 16, 16, 1024);
        uint64_t db = desc(sb + (kk >> 2) * (kBN * 64) + (kk & 3) * 16, 16, 1024);
        mma_ss<T, 128>(x, da, db, kk > 0);
    }
    wg_commit();
}

/* acc[N/8][4] += P V over the 128 keys of a tile: P as A fragments hi (and lo under kSplit,
 * k step kk in hi[kk]), V a swizzled tile of 128 rows (keys) x N columns. Issued and
 * committed, not waited for. */
template <typename T, int N, bool kSplit>
__device__ __forceinline__ void pv_issue(float (*acc)[4], const uint32_t (*hi)[4],
                                         const uint32_t (*lo)[4], const T *sv)
{
#pragma unroll
    for (int kk = 0; kk < kBN / 16; kk++) {
        uint64_t db = desc(sv + kk * 16 * 64, kBN * 128, 1024);
        mma_rs<T, N>(acc, hi[kk], db, 1);
        if (kSplit)
            mma_rs<T, N>(acc, lo[kk], db, 1);
    }
    wg_commit();
}
#endif /* QC_WGMMA */

/* The online softmax of a tile of scores x (a warp's 16 rows x 8 NB keys from key j0, in the
 * accumulator layout; this thread's rows row0 and row0 + 8, the warp's first row wrow), in
 * place into probabilities: masked past lk and (causal) past the row, exp2 of fma(s, scale
 * log2 e, -m) against the running maximum m (scaled log2 units), l (this thread's part of
 * the row sum) and alpha (the factor of the accumulator) updated. */
template <int NB>
__device__ __forceinline__ void tile_softmax(float (*x)[4], float *m, float *l, float *alpha,
                                             float sl2, int j0, int lk, bool causal, int row0,
                                             int wrow)
{
    int tq = threadIdx.x & 3;
    if (j0 + 8 * NB > lk || (causal && j0 + 8 * NB - 1 > wrow)) {
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + (e >> 1) * 8, key = j0 + nb * 8 + 2 * tq + (e & 1);
                if (!(key < lk && (!causal || key <= row)))
                    x[nb][e] = -INFINITY;
            }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            mx[e >> 1] = fmaxf(mx[e >> 1], x[nb][e]);
    float nbase[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mn = fmaxf(m[r], mx[r] * sl2); /* sl2 > 0: the max of the scaled scores */
        float b = mn == -INFINITY ? 0.0f : mn;
        alpha[r] = ex2(m[r] - b);
        nbase[r] = -b;
        m[r] = mn;
    }
    float ps[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            x[nb][e] = ex2(__fmaf_rn(x[nb][e], sl2, nbase[e >> 1]));
            ps[e >> 1] += x[nb][e];
        }
#pragma unroll
    for (int r = 0; r < 2; r++)
        l[r] = __fmaf_rn(l[r], alpha[r], ps[r]); /* this thread's part; summed at the end */
}

/* The shared memory of the forward: Q, two K and two V tiles, 8 mbarriers, and 1024 bytes of
 * alignment. */
template <int KD, int DV> constexpr size_t fwd_smem()
{
    return (size_t)(kRows * KD + 2 * kBN * KD + 2 * kBN * DV) * 2 + 8 * 8 + 1024;
}

template <typename T> __device__ __forceinline__ T *align1k(unsigned char *p)
{
    uint32_t a = smem_addr(p);
    return reinterpret_cast<T *>(p + ((1024u - (a & 1023u)) & 1023u));
}

/* The forward's epilogue, one thread's share of a warpgroup's rows: l summed over the quad,
 * then for rows row0 and row0 + 8 below lq, o = acc / l at columns col0 + 8 nb + 2 tq (those
 * below dv) rounded to T's precision, and lse when lse is given and this thread writes it. */
template <typename T, int NB>
__device__ __forceinline__ void fwd_epilogue(const geo &g, int s, int hh, int64_t ts, int row0,
                                             int lq, int col0, float (&acc)[NB][4],
                                             const float (&m)[2], float (&l)[2], float *o,
                                             float *lse, bool lse_here)
{
    int tq = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + r * 8;
        if (row >= lq)
            continue;
        int64_t orow = (g.base(0, s) + row * ts) * g.h + hh;
        float inv = 1.0f / l[r];
        float *orp = o + orow * g.dv;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            int col = col0 + nb * 8 + 2 * tq;
            if (col < g.dv) /* dv is even: col + 1 < dv too */
                *reinterpret_cast<float2 *>(orp + col) = make_float2(
                    ops<T>::round(acc[nb][2 * r] * inv), ops<T>::round(acc[nb][2 * r + 1] * inv));
        }
        if (lse && lse_here && tq == 0)
            lse[orow] = (m[r] + log2f(l[r])) * 0.69314718055994531f;
    }
}

/* [ATTN-FWD], [ATTN-LSE]: block (query tile of 128 rows, head, sequence). */
template <typename T, int KD, int DV, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    fwd_kernel(geo g, const T *q, const T *k, const T *v, float *o, float *lse)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sq = align1k<T>(smraw), *sk = sq + kRows * KD, *sv = sk + 2 * kBN * KD;
    /* full_k[2], full_v[2]: the tile has landed (every thread's cp.async arrival);
     * empty_k[2], empty_v[2]: every thread's wgmma reading it has completed */
    uint64_t *bars = reinterpret_cast<uint64_t *>(sv + 2 * kBN * DV);
    uint64_t *full_k = bars, *full_v = bars + 2, *empty_k = bars + 4, *empty_v = bars + 6;
    int s = blockIdx.z, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    /* causal: the longest rows first, so the short ones fill the last wave */
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    int i0 = qt * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return; /* [ATTN-EMPTY-ROW] rows keep o 0, lse -inf */
    int tid = threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    int gr = lane >> 2;
    int hk = hh / (g.h / g.hkv);
    int64_t ts = g.tstride();
    const T *qg = q + (g.base(0, s) * g.h + hh) * g.d;
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    int64_t krs = ts * g.hkv * g.d, vrs = ts * g.hkv * g.dv;
    load_sw<T, kRows, KD, kThreads>(sq, qg, ts * g.h * g.d, i0, lq - i0, g.d, tid);
    int kend = causal ? min(lk, i0 + kRows) : lk;
    int ntile = (kend + kBN - 1) / kBN;
    /* K tile j and V tile j load separately: iteration j (below) computes S_j = Q K_j^T and
     * O += P_{j-1} V_{j-1} together, the second on the tensor cores while the softmax of S_j
     * runs, and meanwhile K_{j+1} and V_j load. Two K and two V buffers. */
    auto load_k = [&](int j) {
        load_sw<T, kBN, KD, kThreads>(sk + ((j / kBN) & 1) * (kBN * KD), kg, krs, j, lk - j, g.d,
                                      tid);
    };
    auto load_v = [&](int j) {
        load_sw<T, kBN, DV, kThreads>(sv + ((j / kBN) & 1) * (kBN * DV), vg, vrs, j, lk - j, g.dv,
                                      tid);
    };
    if (tid == 0)
        for (int b = 0; b < 8; b++)
            mb_init(bars + b, kThreads);
    __syncthreads(); /* the only block-wide barrier: the warpgroups then run decoupled */
    /* Ping-pong: the warpgroups take turns to issue their products (named barrier 1: the
     * turn of warpgroup 0, 2: of warpgroup 1), so one's softmax runs while the other's
     * products occupy the tensor cores. Warpgroup 0 starts; warpgroup 1 skips its last
     * hand-over, so every barrier ends complete. */
    if (wgi == 1)
        nb_arrive(1);
    load_k(0);
    mb_arrive_cp(full_k); /* Q and K_0 */
    load_v(0);
    mb_arrive_cp(full_v);
    if (ntile > 1) {
        load_k(kBN);
        mb_arrive_cp(full_k + 1);
    }
    float sl2 = g.scale * kLog2e;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[DV / 8][4];
#pragma unroll
    for (int nb = 0; nb < DV / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    int wrow = i0 + wgi * 64 + warp * 16; /* the warp's first row; the thread's: + gr, + 8 */
    int row0 = wrow + gr;
    float x[kBN / 8][4];
    uint32_t ph[kBN / 16][4], pl[kSplit ? kBN / 16 : 1][4];
    /* x (S_j) -> probabilities in place, with the row statistics m, l and alpha (the factor
     * of the accumulator, applied by the caller) */
    auto softmax = [&](int j0, float *alpha) {
        tile_softmax<kBN / 8>(x, m, l, alpha, sl2, j0, lk, causal, row0, wrow);
    };
    auto rescale = [&](const float *alpha) {
#pragma unroll
        for (int nb = 0; nb < DV / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[nb][e] *= alpha[e >> 1];
    };
    auto zero_x = [&] {
#pragma unroll
        for (int nb = 0; nb < kBN / 8; nb++)
            x[nb][0] = x[nb][1] = x[nb][2] = x[nb][3] = 0.0f;
    };
    float alpha[2];
    /* S_0 and its softmax (the accumulator is 0: no rescale) */
    mb_wait(full_k, 0); /* Q and K_0 have landed */
    fence_async_smem();
    zero_x();
    nb_sync(1 + wgi);
    wg_fence();
    qk_issue<T, KD / 16, kRows>(x, sq, wgi * 64, sk);
    nb_arrive(2 - wgi);
    wg_wait<0>();
    keep<kBN / 8>(x);
    mb_arrive(empty_k);
    softmax(0, alpha);
    to_a<T, kBN / 8, kSplit>(x, ph, pl);
    for (int it = 1; it < ntile; it++) {
        int j0 = it * kBN;
        mb_wait(full_k + (it & 1), (it >> 1) & 1);             /* K_it has landed */
        mb_wait(full_v + ((it - 1) & 1), ((it - 1) >> 1) & 1); /* and V_{it-1} */
        fence_async_smem();
        /* x needs no zeros: the first product of qk_issue does not read it (scale-d 0) */
        nb_sync(1 + wgi);
        wg_fence();
        qk_issue<T, KD / 16, kRows>(x, sq, wgi * 64, sk + (it & 1) * (kBN * KD));
        pv_issue<T, DV, kSplit>(acc, ph, pl, sv + ((it - 1) & 1) * (kBN * DV));
        nb_arrive(2 - wgi);
        /* K_{it+1} into K_{it-1}'s buffer, V_it into V_{it-2}'s, once every thread is done
         * with those */
        if (it + 1 < ntile) {
            mb_wait(empty_k + ((it + 1) & 1), ((it - 1) >> 1) & 1);
            load_k(j0 + kBN);
            mb_arrive_cp(full_k + ((it + 1) & 1));
        }
        if (it >= 2)
            mb_wait(empty_v + (it & 1), ((it - 2) >> 1) & 1);
        load_v(j0);
        mb_arrive_cp(full_v + (it & 1));
        wg_wait<1>(); /* S_it is done; P_{it-1} V_{it-1} may still run */
        keep<kBN / 8>(x);
        mb_arrive(empty_k + (it & 1));
        softmax(j0, alpha);
        wg_wait<0>();
        keep<DV / 8>(acc);
        mb_arrive(empty_v + ((it - 1) & 1));
        keep<kBN / 16>(ph);
        if constexpr (kSplit)
            keep<kBN / 16>(pl);
        rescale(alpha);
        to_a<T, kBN / 8, kSplit>(x, ph, pl);
    }
    /* the last P V */
    mb_wait(full_v + ((ntile - 1) & 1), ((ntile - 1) >> 1) & 1);
    fence_async_smem();
    nb_sync(1 + wgi);
    wg_fence();
    pv_issue<T, DV, kSplit>(acc, ph, pl, sv + ((ntile - 1) & 1) * (kBN * DV));
    if (wgi == 0)
        nb_arrive(2);
    wg_wait<0>();
    keep<DV / 8>(acc);
    fwd_epilogue<T, DV / 8>(g, s, hh, ts, row0, lq, 0, acc, m, l, o, lse, true);
#else
    (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse;
    __trap();
#endif
}

/* ------------------------------------------------------------ the absorbed-MLA class */
/* d_qk <= 576, d_v <= 512 (class 3; absorbed MLA: 576 = 512 latent + 64 rope, one KV head
 * shared by every query head). A block is two warpgroups and owns 64 query rows of one head;
 * the key/value tiles are 32 keys. Per tile both warpgroups compute S over half of the head
 * dim each (m64n32k16, 18 k steps, the even ones and the odd ones, Q and K from shared
 * memory), exchange the partial sums
 * through shared memory (every thread adds its own and its twin's in the same order, so both
 * hold the same S bits), run the same online softmax, and each accumulates its half of the
 * 512 output columns, O += P V (two m64n128k16 a k step, P from registers, V with the
 * transpose bit). The next tile's K and V load by cp.async during this one (two buffers);
 * two block barriers a tile (this tile landed, the last one's buffer and the exchange free;
 * the partial sums written).
 * Shared memory: Q 72 KiB, two K tiles 72 KiB, two V tiles 64 KiB, exchange 16 KiB. */
constexpr int kMlaRows = 64, kMlaBN = 32, kMlaKD = 576, kMlaDV = 512;
constexpr int kMlaNB = kMlaBN / 8;     /* 8-key blocks of a tile */
constexpr int kMlaKS = kMlaKD / 32;    /* k steps of S a warpgroup: 18 */
constexpr int kMlaXch = kMlaNB * 4 * 128; /* floats of one warpgroup's partial S */
constexpr size_t mla_smem()
{
    return (size_t)(kMlaRows * kMlaKD + 2 * kMlaBN * kMlaKD + 2 * kMlaBN * kMlaDV) * 2 +
           2 * kMlaXch * sizeof(float) + 1024;
}
static_assert(mla_smem() <= 227 * 1024, "the absorbed-MLA forward's shared memory");

#if QC_WGMMA

/* x[4][4] = A B^T over the k steps w, w + 2, ..., w + 2 (KS - 1) (w 0 or 1: the two
 * warpgroups interleave theirs, so that a step's offset is a constant from a base that
 * depends on w alone, and each descriptor costs one addition): A the 64 rows of a swizzled
 * tile of 64 rows, B a swizzled tile of 32 rows (keys). Issued and committed, not waited
 * for. */
template <typename T, int KS>
__device__ __forceinline__ void qk32_issue(float (*x)[4], const T *sa, const T *sb, int w)
{
    /* step 2i + w: panel i / 2, column 16 (2 (i % 2) + w) of it */
    const uint64_t da0 = desc(sa + 16 * w, 16, 1024), db0 = desc(sb + 16 * w, 16, 1024);
#pragma unroll
    for (int i = 0; i < KS; i++) {
        int oa = (i >> 1) * (kMlaRows * 64) + (i & 1) * 32;
        int ob = (i >> 1) * (kMlaBN * 64) + (i & 1) * 32;
        mma_ss<T, 32>(x, desc_add<T>(da0, oa), desc_add<T>(db0, ob), i > 0);
    }
    wg_commit();
}

/* acc[8 NP][4] += X B over the 32 rows of a swizzled tile B (two k steps), columns of the NP
 * panels from panel p0 (n128 a pair of panels, n64 the last odd one). Issued, not committed. */
template <typename T, int NP, bool kSplit>
__device__ __forceinline__ void xb32_issue(float (*acc)[4], const uint32_t (*hi)[4],
                                           const uint32_t (*lo)[4], const T *sb, int p0)
{
    const uint64_t d0 = desc(sb + p0 * (kMlaBN * 64), kMlaBN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kMlaBN / 16; kk++) {
#pragma unroll
        for (int pp = 0; pp < NP / 2; pp++) {
            uint64_t db = desc_add<T>(d0, 2 * pp * (kMlaBN * 64) + kk * 16 * 64);
            mma_rs<T, 128>(acc + 16 * pp, hi[kk], db, 1);
            if constexpr (kSplit)
                mma_rs<T, 128>(acc + 16 * pp, lo[kk], db, 1);
        }
        if constexpr (NP % 2) {
            uint64_t db = desc_add<T>(d0, (NP - 1) * (kMlaBN * 64) + kk * 16 * 64);
            mma_rs<T, 64>(acc + 8 * (NP - 1), hi[kk], db, 1);
            if constexpr (kSplit)
                mma_rs<T, 64>(acc + 8 * (NP - 1), lo[kk], db, 1);
        }
    }
}

/* acc[16 NH][4] += P V over the 32 keys of a tile: P as A fragments (two k steps), V the
 * columns [c0, c0 + 128 NH) of a swizzled tile of 32 rows (c0 a multiple of 64). Issued and
 * committed, not waited for. */
template <typename T, int NH, bool kSplit>
__device__ __forceinline__ void pv32_issue(float (*acc)[4], const uint32_t (*hi)[4],
                                           const uint32_t (*lo)[4], const T *sv, int c0)
{
    xb32_issue<T, 2 * NH, kSplit>(acc, hi, lo, sv, c0 / 64);
    wg_commit();
}
#endif /* QC_WGMMA */

/* [ATTN-FWD], [ATTN-LSE] of class 3: block (query tile of 64 rows, head, sequence). */
template <typename T, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    fwd_mla_kernel(geo g, const T *q, const T *k, const T *v, float *o, float *lse)
{
#if QC_WGMMA
    constexpr int KD = kMlaKD, DV = kMlaDV, BN = kMlaBN, NB = kMlaNB, HALF = DV / 2;
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sq = align1k<T>(smraw), *sk = sq + kMlaRows * KD, *sv = sk + 2 * BN * KD;
    float *xch = reinterpret_cast<float *>(sv + 2 * BN * DV); /* [2][16][128] */
    int s = blockIdx.z, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; /* the longest rows first */
    int i0 = qt * kMlaRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return; /* [ATTN-EMPTY-ROW] rows keep o 0, lse -inf */
    int tid = threadIdx.x, t = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
    /* the warpgroup, broadcast from lane 0 so that the compiler knows it warp-uniform and keeps
     * what derives from it (the descriptors of S) in uniform registers */
    int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0);
    int hk = hh / (g.h / g.hkv);
    int64_t ts = g.tstride();
    const T *qg = q + (g.base(0, s) * g.h + hh) * g.d;
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    int64_t krs = ts * g.hkv * g.d, vrs = ts * g.hkv * g.dv;
    load_sw<T, kMlaRows, KD, kThreads, true>(sq, qg, ts * g.h * g.d, i0, lq - i0, g.d, tid);
    int kend = causal ? min(lk, i0 + kMlaRows) : lk;
    int ntile = (kend + BN - 1) / BN;
    auto load = [&](int it) { /* tile it into buffer it & 1, one commit group */
        int j = it * BN, b = it & 1;
        load_sw<T, BN, KD, kThreads, true>(sk + b * (BN * KD), kg, krs, j, lk - j, g.d, tid);
        load_sw<T, BN, DV, kThreads, true>(sv + b * (BN * DV), vg, vrs, j, lk - j, g.dv, tid);
        cp_commit();
    };
    load(0); /* with Q */
    float sl2 = g.scale * kLog2e;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[HALF / 8][4]; /* this warpgroup's 256 output columns */
#pragma unroll
    for (int nb = 0; nb < HALF / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    int wrow = i0 + warp * 16; /* both warpgroups hold all 64 rows, a warp 16 of them */
    int row0 = wrow + (lane >> 2);
    float x[NB][4], alpha[2];
    uint32_t ph[BN / 16][4], pl[kSplit ? BN / 16 : 1][4];
    float *mine = xch + wgi * kMlaXch, *twin = xch + (1 - wgi) * kMlaXch;
    for (int it = 0; it < ntile; it++) {
        int j0 = it * BN, b = it & 1;
        cp_wait_n<0>();
        fence_async_smem();
        /* tile it (and Q) have landed, every thread's copies; every thread is done with tile
         * it - 1 (its buffer and the exchange) */
        __syncthreads();
        if (it + 1 < ntile)
            load(it + 1);
        wg_fence();
        qk32_issue<T, kMlaKS>(x, sq, sk + b * (BN * KD), wgi);
        wg_wait<0>();
        keep<NB>(x);
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                mine[(nb * 4 + e) * 128 + t] = x[nb][e];
        __syncthreads(); /* both partial sums are written */
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) { /* S = S_0 + S_1 in both warpgroups */
                float y = twin[(nb * 4 + e) * 128 + t];
                x[nb][e] = wgi == 0 ? __fadd_rn(x[nb][e], y) : __fadd_rn(y, x[nb][e]);
            }
        tile_softmax<NB>(x, m, l, alpha, sl2, j0, lk, causal, row0, wrow);
        if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) /* else x 1 */
#pragma unroll
            for (int nb = 0; nb < HALF / 8; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[nb][e] *= alpha[e >> 1];
        to_a<T, NB, kSplit>(x, ph, pl);
        wg_fence();
        pv32_issue<T, HALF / 128, kSplit>(acc, ph, pl, sv + b * (BN * DV), wgi * HALF);
        wg_wait<0>();
        keep<HALF / 8>(acc);
        keep<BN / 16>(ph);
        if constexpr (kSplit)
            keep<BN / 16>(pl);
    }
    fwd_epilogue<T, HALF / 8>(g, s, hh, ts, row0, lq, wgi * HALF, acc, m, l, o, lse, wgi == 0);
#else
    (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse;
    __trap();
#endif
}

/* ------------------------------------------------------------ the backward, classes 0-2 */
/* [ATTN-BWD] on wgmma for classes 0-2 (d_qk <= 192, d_v <= 128), the same two passes as
 * fl::dq_kernel and fl::dkv_kernel of cuda/qc_flash.cuh and the same arithmetic (P from lse,
 * dS = P (dP - D), under kSplit P and dS given to the tensor cores as hi + lo, dq and dk
 * times the scale, the overflow flag for a dS beyond T's range), so dq, dk and dv are
 * deterministic and no pass needs atomics:
 * - dkv_kernel: a block is two warpgroups and owns 128 keys of one KV head, 64 a
 *   warpgroup; it streams the query tiles (64 rows, Q, dO, lse and D; two buffers loaded by
 *   cp.async during the tile before) of every query head of the group. Per tile a warpgroup
 *   computes S^T = K Q^T and dP^T = V dO^T (m64n64k16, both operands from shared memory,
 *   K-major), P^T and dS^T in the accumulator layout, then dV += P^T dO and dK += dS^T Q
 *   (A from registers, B with the transpose bit: Q and dO in their natural layout).
 * - dq_kernel: a block owns 128 query rows, 64 a warpgroup, and streams the key tiles (64
 *   keys, K and V): S = Q K^T, dP = dO V^T, dS, dQ += dS K.
 * Causal: a warpgroup skips a tile whose every pair is masked. A tile of 64 keeps the
 * accumulators and both score tiles of a thread in registers (192/128: dK 96 floats). */
constexpr int kBwdBM = 64; /* rows of a streamed tile: query rows (dkv), keys (dq) */

template <int KD, int DV> constexpr size_t bwd_smem()
{
    return (size_t)(kRows * KD + kRows * DV + 2 * (kBwdBM * KD + kBwdBM * DV)) * 2 +
           2 * 2 * kBwdBM * sizeof(float) + 1024;
}

#if QC_WGMMA
/* x[N/8][4] (= or +=, scale_d of the first step) A B^T over k in [0, 16 KS): A the 64 rows
 * from row ra of a swizzled tile of RA rows, B a swizzled tile of N rows (64 or 32); both
 * K-major. Issued, not committed. */
template <typename T, int KS, int RA, int N = kBwdBM>
__device__ __forceinline__ void abt_issue(float (*x)[4], const T *sa, int ra, const T *sb)
{
    const uint64_t da0 = desc(sa + ra * 64, 16, 1024), db0 = desc(sb, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
        mma_ss<T, N>(x, desc_add<T>(da0, (kk >> 2) * (RA * 64) + (kk & 3) * 16),
                     desc_add<T>(db0, (kk >> 2) * (N * 64) + (kk & 3) * 16), kk > 0);
}

/* acc[N/8][4] += X B: X as A fragments hi (and lo under kSplit) of KS k steps, B a swizzled
 * tile of R rows (the k dimension) and N columns (64, 128 or 192: n128 then n64), read with
 * the transpose bit. Issued, not committed. */
template <typename T, int N, int KS, int R, bool kSplit>
__device__ __forceinline__ void xb_issue(float (*acc)[4], const uint32_t (*hi)[4],
                                         const uint32_t (*lo)[4], const T *sb)
{
    static_assert(N == 64 || N == 128 || N == 192, "n64, n128 or n192");
    const uint64_t d0 = desc(sb, R * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        uint64_t db = desc_add<T>(d0, kk * 16 * 64);
        if constexpr (N >= 128) {
            mma_rs<T, 128>(acc, hi[kk], db, 1);
            if constexpr (kSplit)
                mma_rs<T, 128>(acc, lo[kk], db, 1);
        }
        if constexpr (N % 128 == 64) {
            uint64_t d64 = desc_add<T>(db, (N / 128) * 2 * (R * 64));
            mma_rs<T, 64>(acc + (N / 128) * 16, hi[kk], d64, 1);
            if constexpr (kSplit)
                mma_rs<T, 64>(acc + (N / 128) * 16, lo[kk], d64, 1);
        }
    }
}

/* The two warpgroups' score products in turn: the second issues its own once the first has
 * issued its own, so that the first forms P and dS (no tensor-core work) while the second's
 * products run, and the second forms its own while the first accumulates. Only on a tile
 * both warpgroups take (pair): a named barrier waits for both. The dq pass takes turns; the
 * dkv pass does not (on an H100 at d128, dq 0.745 -> 0.705 ms, dkv 1.14 -> 1.22 ms; passing
 * the turn after the first's products complete instead was slower in both). */
constexpr int kBwdTurn = 3; /* the named barrier */
__device__ __forceinline__ void turn_wait(bool pair, int wgi)
{
    if (pair && wgi == 1)
        nb_sync(kBwdTurn);
}
__device__ __forceinline__ void turn_pass(bool pair, int wgi)
{
    if (pair && wgi == 0)
        nb_arrive(kBwdTurn);
}

/* The backward's two score products of a warpgroup (in turn with the other, turn_wait): x =
 * A B^T over KD and dp = C D^T over DV (A and C from row ra of 128-row tiles, B and D tiles
 * of 64 rows), two wgmma groups. Once x has completed, on_x() runs while dp computes (it
 * forms P, and may issue and commit LEAVE groups of its own); when scores64 returns, dp has
 * completed too, and the LEAVE groups may still run. */
template <typename T, int KD, int DV, int LEAVE, class F>
__device__ __forceinline__ void scores64(float (*x)[4], float (*dp)[4], const T *sa, const T *sb,
                                         const T *sc, const T *sd, int ra, bool pair, int wgi,
                                         F &&on_x)
{
    turn_wait(pair, wgi);
    wg_fence();
    abt_issue<T, KD / 16, kRows>(x, sa, ra, sb);
    wg_commit();
    abt_issue<T, DV / 16, kRows>(dp, sc, ra, sd);
    wg_commit();
    turn_pass(pair, wgi);
    wg_wait<1>();
    keep<kBwdBM / 8>(x);
    on_x();
    wg_wait<LEAVE>();
    keep<kBwdBM / 8>(dp);
}
#endif /* QC_WGMMA */

/* Rows r0 + 8 r (r 0, 1) of a thread's accumulator tile, columns col0 + 8 nb + 2 tq + e (nb
 * < nbs), scaled by mul and rounded to T (unless !rnd), into out (row stride dim, columns below
 * dim; rows below n). */
template <typename T, int NB>
__device__ __forceinline__ void bwd_store(const geo &g, const float (&acc)[NB][4], int row0, int n,
                                          int64_t base, int64_t ts, int64_t heads, int64_t head,
                                          int dim, float mul, float *out, int col0 = 0,
                                          int nbs = NB, bool rnd = true)
{
    int tq = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + r * 8;
        if (row >= n)
            continue;
        float *orp = out + ((base + row * ts) * heads + head) * dim;
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int col = col0 + nb * 8 + 2 * tq + e;
                if (nb < nbs && col < dim) {
                    float y = acc[nb][r * 2 + e] * mul;
                    orp[col] = g.dt == QS_FP32 || !rnd ? y : ops<T>::round(y);
                }
            }
    }
}

/* dk and dv of a key tile: block (128 keys, kv head, sequence). */
template <typename T, int KD, int DV, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
               const float *dd, float *dk, float *dv, int *overflow)
{
#if QC_WGMMA
    constexpr int BM = kBwdBM;
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sk = align1k<T>(smraw), *sv = sk + kRows * KD, *sqd = sv + kRows * DV;
    float *sld = reinterpret_cast<float *>(sqd + 2 * (BM * KD + BM * DV));
    int s = blockIdx.z, hk = blockIdx.y;
    int j0 = blockIdx.x * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (j0 >= lk)
        return;
    int tid = threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    int gr = lane >> 2, tq = lane & 3;
    int64_t ts = g.tstride(), qb = g.base(0, s), kb = g.base(1, s);
    load_sw<T, kRows, KD, kThreads>(sk, k + (kb * g.hkv + hk) * g.d, ts * g.hkv * g.d, j0, lk - j0,
                                    g.d, tid);
    load_sw<T, kRows, DV, kThreads>(sv, v + (kb * g.hkv + hk) * g.dv, ts * g.hkv * g.dv, j0,
                                    lk - j0, g.dv, tid);
    cp_commit();
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int istart = causal ? j0 : 0; /* no query row before the first key sees it */
    int grp = g.h / g.hkv;
    /* the query tiles of the group's heads, one after another: tile t is head
     * hk * grp + t / nqt, rows istart + (t % nqt) * BM */
    int nqt = lq > istart ? (lq - istart + BM - 1) / BM : 0, nt = grp * nqt;
    auto load_q = [&](int t, int buf) {
        int hh = hk * grp + t / nqt, i0 = istart + (t % nqt) * BM;
        T *bq = sqd + buf * (BM * KD + BM * DV);
        float *bl = sld + buf * 2 * BM;
        load_sw<T, BM, KD, kThreads>(bq, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0, lq - i0,
                                     g.d, tid);
        load_sw<T, BM, DV, kThreads>(bq + BM * KD, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv,
                                     i0, lq - i0, g.dv, tid);
        cp_commit();
        if (tid < BM) {
            int64_t idx = (qb + (i0 + tid) * ts) * g.h + hh;
            bool ok = i0 + tid < lq;
            bl[tid] = ok ? lse[idx] * kLog2e : INFINITY; /* P 0 on padding rows */
            bl[BM + tid] = ok ? dd[idx] : 0.0f;
        }
    };
    float sl2 = g.scale * kLog2e;
    int wkey = j0 + wgi * 64, key0 = wkey + warp * 16 + gr; /* the thread's keys: +0, +8 */
    float ak[KD / 8][4], av[DV / 8][4];
#pragma unroll
    for (int nb = 0; nb < KD / 8; nb++)
        ak[nb][0] = ak[nb][1] = ak[nb][2] = ak[nb][3] = 0.0f;
#pragma unroll
    for (int nb = 0; nb < DV / 8; nb++)
        av[nb][0] = av[nb][1] = av[nb][2] = av[nb][3] = 0.0f;
    bool big = false;
    if (nt > 0)
        load_q(0, 0);
    for (int t = 0; t < nt; t++) {
        int buf = t & 1, i0 = istart + (t % nqt) * BM;
        cp_wait_n<0>();
        fence_async_smem();
        __syncthreads(); /* the tile has landed; every thread is done with the other buffer */
        if (t + 1 < nt)
            load_q(t + 1, buf ^ 1);
        if (wkey >= lk || (causal && wkey > i0 + BM - 1))
            continue; /* no key of the warpgroup, or each after every row of the tile */
        const T *sq = sqd + buf * (BM * KD + BM * DV), *sdo = sq + BM * KD;
        const float *sl = sld + buf * 2 * BM, *sd = sl + BM;
        float x[BM / 8][4], dp[BM / 8][4];
        uint32_t ph[BM / 16][4], pl[kSplit ? BM / 16 : 1][4];
        /* S^T, then P^T while dP^T computes, then (d <= 128) dV += P^T dO while dS^T forms;
         * at 192/128 the early dV leaves ptxas too few registers (it serializes the wgmmas,
         * C7512), so there dV and dK issue together */
        constexpr bool kEarlyDv = KD <= 128;
        scores64<T, KD, DV, kEarlyDv ? 1 : 0>(x, dp, sk, sq, sv, sdo, wgi * 64, false, wgi, [&] {
#pragma unroll
            for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = key0 + (e >> 1) * 8, qc = nb * 8 + 2 * tq + (e & 1);
                    /* keys past the sequence too: their zero rows would give P = e^-lse,
                     * whose dS could raise the overflow flag for nothing */
                    bool ok = key < lk && (!causal || key <= i0 + qc);
                    x[nb][e] = ok ? ex2(x[nb][e] * sl2 - sl[qc]) : 0.0f;
                }
            if constexpr (kEarlyDv) {
                to_a<T, BM / 8, kSplit>(x, ph, pl);
                wg_fence();
                xb_issue<T, DV, BM / 16, BM, kSplit>(av, ph, pl, sdo);
                wg_commit();
            }
        });
#pragma unroll
        for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float ds = x[nb][e] * (dp[nb][e] - sd[nb * 8 + 2 * tq + (e & 1)]);
                big |= fabsf(ds) > ops<T>::kMax;
                dp[nb][e] = ds;
            }
        uint32_t sh[BM / 16][4], slo[kSplit ? BM / 16 : 1][4];
        if constexpr (!kEarlyDv)
            to_a<T, BM / 8, kSplit>(x, ph, pl);
        to_a<T, BM / 8, kSplit>(dp, sh, slo);
        wg_fence();
        if constexpr (!kEarlyDv)
            xb_issue<T, DV, BM / 16, BM, kSplit>(av, ph, pl, sdo);
        xb_issue<T, KD, BM / 16, BM, kSplit>(ak, sh, slo, sq);
        wg_commit();
        wg_wait<0>();
        keep<DV / 8>(av);
        keep<KD / 8>(ak);
        keep<BM / 16>(ph);
        keep<BM / 16>(sh);
        if constexpr (kSplit) {
            keep<BM / 16>(pl);
            keep<BM / 16>(slo);
        }
    }
    cp_wait_n<0>(); /* the K and V copies, when no query tile followed */
    if (big)
        atomicOr(overflow, 1);
    bwd_store<T, KD / 8>(g, ak, key0, lk, kb, ts, g.hkv, hk, g.d, g.scale, dk);
    bwd_store<T, DV / 8>(g, av, key0, lk, kb, ts, g.hkv, hk, g.dv, 1.0f, dv);
#else
    (void)g, (void)q, (void)k, (void)v, (void)dout, (void)lse, (void)dd, (void)dk, (void)dv;
    (void)overflow;
    __trap();
#endif
}

/* dq of a query tile: block (128 query rows, head, sequence). */
template <typename T, int KD, int DV, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    dq_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
              const float *dd, float *dq, int *overflow)
{
#if QC_WGMMA
    constexpr int BN = kBwdBM;
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sq = align1k<T>(smraw), *sdo = sq + kRows * KD, *skv = sdo + kRows * DV;
    int s = blockIdx.z, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; /* longest rows first */
    int i0 = qt * kRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return;
    int tid = threadIdx.x, wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    int gr = lane >> 2, tq = lane & 3;
    int hk = hh / (g.h / g.hkv);
    int64_t ts = g.tstride(), qb = g.base(0, s);
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    int64_t krs = ts * g.hkv * g.d, vrs = ts * g.hkv * g.dv;
    load_sw<T, kRows, KD, kThreads>(sq, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0, lq - i0, g.d,
                                    tid);
    load_sw<T, kRows, DV, kThreads>(sdo, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv, i0,
                                    lq - i0, g.dv, tid);
    auto load_kv = [&](int j, int buf) {
        T *bk = skv + buf * (BN * KD + BN * DV);
        load_sw<T, BN, KD, kThreads>(bk, kg, krs, j, lk - j, g.d, tid);
        load_sw<T, BN, DV, kThreads>(bk + BN * KD, vg, vrs, j, lk - j, g.dv, tid);
        cp_commit();
    };
    int kend = causal ? min(lk, i0 + kRows) : lk;
    float sl2 = g.scale * kLog2e;
    int wrow = i0 + wgi * 64, row0 = wrow + warp * 16 + gr; /* the thread's rows: +0, +8 */
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) { /* rows past the sequence: P 0 (no false overflow) */
        int row = row0 + r * 8;
        int64_t idx = (qb + min(row, lq - 1) * ts) * g.h + hh;
        lr[r] = row < lq ? lse[idx] * kLog2e : INFINITY;
        dr[r] = dd[idx];
    }
    float acc[KD / 8][4];
#pragma unroll
    for (int nb = 0; nb < KD / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    bool big = false;
    load_kv(0, 0); /* with Q and dO */
    for (int j0 = 0, it = 0; j0 < kend; j0 += BN, it++) {
        int buf = it & 1;
        cp_wait_n<0>();
        fence_async_smem();
        __syncthreads();
        if (j0 + BN < kend)
            load_kv(j0 + BN, buf ^ 1);
        /* whether a warpgroup has no row, or every key of the tile after each */
        auto idle = [&](int wr) { return wr >= lq || (causal && j0 > wr + 63); };
        if (idle(wrow))
            continue;
        bool pair = !idle(i0) && !idle(i0 + 64);
        const T *sk = skv + buf * (BN * KD + BN * DV), *sv = sk + BN * KD;
        float x[BN / 8][4], dp[BN / 8][4];
        /* S, then P while dP computes, then dS */
        scores64<T, KD, DV, 0>(x, dp, sq, sk, sdo, sv, wgi * 64, pair, wgi,
                               [&] { p_rows<BN / 8>(x, sl2, lr, row0, j0, lk, causal, tq); });
        dsp_rows<T, BN / 8>(x, dp, dr, big);
        uint32_t sh[BN / 16][4], slo[kSplit ? BN / 16 : 1][4];
        to_a<T, BN / 8, kSplit>(x, sh, slo);
        wg_fence();
        xb_issue<T, KD, BN / 16, BN, kSplit>(acc, sh, slo, sk);
        wg_commit();
        wg_wait<0>();
        keep<KD / 8>(acc);
        keep<BN / 16>(sh);
        if constexpr (kSplit)
            keep<BN / 16>(slo);
    }
    cp_wait_n<0>();
    if (big)
        atomicOr(overflow, 1);
    bwd_store<T, KD / 8>(g, acc, row0, lq, qb, ts, g.h, hh, g.d, g.scale, dq);
#else
    (void)g, (void)q, (void)k, (void)v, (void)dout, (void)lse, (void)dd, (void)dq, (void)overflow;
    __trap();
#endif
}

/* ------------------------------------------------------------ the absorbed-MLA backward */
/* [ATTN-BWD] for class 3 (d_qk <= 576, d_v <= 512), the same two passes and arithmetic as
 * the kernels above. The accumulators of 576 and 512 columns do not fit one warpgroup, so
 * both warpgroups of a block hold the same 64 rows and split the columns at 64-column panels
 * (a transposed B operand starts at a panel): the first warpgroup 256 of dQ or dK and 256 of
 * dV, the second the other 320 and 256. Both need the whole score tiles, 64 x 32:
 * - dq_mla_kernel: block (64 query rows, head, sequence), key tiles of 32. The first
 *   warpgroup computes S = Q K^T (36 k steps), the second dP = dO V^T (32), each hands its
 *   tile to the other through shared memory; both then form the same P and dS (the same
 *   operations on the same values) and add dS K to their columns of dQ.
 * - dkv_mla_kernel: block (64 keys, kv head, sequence x head group x {dV, dK}), query tiles
 *   of 32 of the group's heads. For dV only S^T = K Q^T is needed: each warpgroup computes
 *   half of its k steps (the even or the odd ones) and the two partial sums are added in one
 *   order; for dK, S^T and dP^T = V dO^T as in dq_mla_kernel. With one KV head for 128 query
 *   heads a block per key tile would be too few blocks, each streaming every head: the heads
 *   are split into groups (mla_groups), each block writes its unrounded sums to a scratch
 *   array, and sum_parts adds the groups' sums in their order and rounds (deterministic).
 * Shared memory: dq 220 KiB (Q, dO, one K and one V tile, the exchange), dkv 220 KiB (K, V,
 * one Q and one dO tile, the exchange); the next V tile of the dq pass loads while dS K
 * computes, and in the dkv pass each buffer of the next query tile loads as soon as this one
 * is done with it. */
/* The streamed tiles are the forward's 32 rows (kMlaBN); a warpgroup's 64 x 32 exchange tile
 * is the forward's kMlaXch floats. */
constexpr int kMlaC0 = 256; /* the first warpgroup's columns of dQ, dK, dV */
constexpr size_t mla_dq_smem()
{
    return (size_t)(kMlaRows * kMlaKD + kMlaRows * kMlaDV + kMlaBN * kMlaKD + kMlaBN * kMlaDV) * 2 +
           2 * kMlaXch * sizeof(float) + 1024;
}
constexpr size_t mla_dkv_smem()
{
    return mla_dq_smem() + 2 * kMlaBN * sizeof(float);
}
static_assert(mla_dkv_smem() <= 227 * 1024, "the absorbed-MLA backward's shared memory");

#if QC_WGMMA
/* x[4][4] = A B^T over all k steps [0, KS): A a swizzled tile of 64 rows, B one of 32 rows.
 * Issued and committed, not waited for. */
template <typename T, int KS>
__device__ __forceinline__ void ab32_issue(float (*x)[4], const T *sa, const T *sb)
{
    abt_issue<T, KS, kMlaRows, kMlaBN>(x, sa, 0, sb);
    wg_commit();
}


/* The two warpgroups' 64 x 32 tiles exchanged: this thread's x into mine (thread t of its
 * warpgroup), a block barrier, its twin's into y. */
template <int NB>
__device__ __forceinline__ void swap_tiles(const float (*x)[4], float (*y)[4], float *mine,
                                           const float *twin, int t)
{
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            mine[(nb * 4 + e) * 128 + t] = x[nb][e];
    __syncthreads(); /* both tiles are written */
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            y[nb][e] = twin[(nb * 4 + e) * 128 + t];
}

/* acc += X B for this warpgroup's columns of a 576-column B (the first warpgroup panels 0-3,
 * the second 4-8), committed and waited for. */
template <typename T, bool kSplit>
__device__ __forceinline__ void xb32_cols(float (*acc)[4], const uint32_t (*hi)[4],
                                          const uint32_t (*lo)[4], const T *sb, int wgi)
{
    wg_fence();
    if (wgi == 0)
        xb32_issue<T, kMlaC0 / 64, kSplit>(acc, hi, lo, sb, 0);
    else
        xb32_issue<T, (kMlaKD - kMlaC0) / 64, kSplit>(acc, hi, lo, sb, kMlaC0 / 64);
    wg_commit();
    wg_wait<0>();
}
#endif /* QC_WGMMA */

/* dq of a query tile: block (64 query rows, head, sequence). */
template <typename T, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    dq_mla_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                  const float *dd, float *dq, int *overflow)
{
#if QC_WGMMA
    constexpr int KD = kMlaKD, DV = kMlaDV, BN = kMlaBN, NB = BN / 8;
    constexpr int NC = (KD - kMlaC0) / 8; /* 8-column blocks of the larger share */
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sq = align1k<T>(smraw), *sdo = sq + kMlaRows * KD, *sk = sdo + kMlaRows * DV;
    T *sv = sk + BN * KD;
    float *xch = reinterpret_cast<float *>(sv + BN * DV); /* [2][NB * 4][128] */
    int s = blockIdx.z, hh = blockIdx.y;
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int qt = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x; /* longest rows first */
    int i0 = qt * kMlaRows, lq = g.len(0, s), lk = g.len(1, s);
    if (i0 >= lq || lk == 0)
        return;
    int tid = threadIdx.x, t = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
    /* the warpgroup, broadcast from lane 0: the compiler then knows it the same across the
     * warp, and the branches on it below do not serialize the wgmmas (ptxas C7520) */
    int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0);
    int gr = lane >> 2, tq = lane & 3;
    int hk = hh / (g.h / g.hkv);
    int64_t ts = g.tstride(), qb = g.base(0, s);
    const T *kg = k + (g.base(1, s) * g.hkv + hk) * g.d;
    const T *vg = v + (g.base(1, s) * g.hkv + hk) * g.dv;
    int64_t krs = ts * g.hkv * g.d, vrs = ts * g.hkv * g.dv;
    load_sw<T, kMlaRows, KD, kThreads>(sq, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0, lq - i0,
                                       g.d, tid);
    load_sw<T, kMlaRows, DV, kThreads>(sdo, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv, i0,
                                       lq - i0, g.dv, tid);
    int kend = causal ? min(lk, i0 + kMlaRows) : lk;
    load_sw<T, BN, KD, kThreads>(sk, kg, krs, 0, lk, g.d, tid);
    load_sw<T, BN, DV, kThreads>(sv, vg, vrs, 0, lk, g.dv, tid);
    cp_commit();
    float sl2 = g.scale * kLog2e;
    int row0 = i0 + warp * 16 + gr; /* both warpgroups hold all 64 rows */
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) { /* rows past the sequence: P 0 */
        int row = row0 + r * 8;
        int64_t idx = (qb + min(row, lq - 1) * ts) * g.h + hh;
        lr[r] = row < lq ? lse[idx] * kLog2e : INFINITY;
        dr[r] = dd[idx];
    }
    float acc[NC][4];
#pragma unroll
    for (int nb = 0; nb < NC; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    bool big = false;
    float *mine = xch + wgi * kMlaXch, *twin = xch + (1 - wgi) * kMlaXch;
    for (int j0 = 0; j0 < kend; j0 += BN) {
        cp_wait_n<0>();
        fence_async_smem();
        __syncthreads(); /* K_j and V_j have landed (and Q, dO) */
        float x[NB][4], y[NB][4];
        wg_fence();
        if (wgi == 0)
            ab32_issue<T, KD / 16>(x, sq, sk); /* S */
        else
            ab32_issue<T, DV / 16>(x, sdo, sv); /* dP */
        wg_wait<0>();
        keep<NB>(x);
        swap_tiles<NB>(x, y, mine, twin, t);
        if (j0 + BN < kend) { /* V_j is no longer read */
            load_sw<T, BN, DV, kThreads>(sv, vg, vrs, j0 + BN, lk - j0 - BN, g.dv, tid);
            cp_commit();
        }
        float ds[NB][4], dp[NB][4]; /* S (becoming dS) and dP: each warpgroup's own and its twin's */
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                ds[nb][e] = wgi == 0 ? x[nb][e] : y[nb][e];
                dp[nb][e] = wgi == 0 ? y[nb][e] : x[nb][e];
            }
        ds_rows<T, NB>(ds, dp, sl2, lr, dr, row0, j0, lk, causal, tq, big);
        uint32_t sh[BN / 16][4], slo[kSplit ? BN / 16 : 1][4];
        to_a<T, NB, kSplit>(ds, sh, slo);
        xb32_cols<T, kSplit>(acc, sh, slo, sk, wgi);
        keep<NC>(acc);
        keep<BN / 16>(sh);
        if constexpr (kSplit)
            keep<BN / 16>(slo);
        __syncthreads(); /* K_j and the exchange are no longer read */
        if (j0 + BN < kend) {
            load_sw<T, BN, KD, kThreads>(sk, kg, krs, j0 + BN, lk - j0 - BN, g.d, tid);
            cp_commit();
        }
    }
    cp_wait_n<0>();
    if (big)
        atomicOr(overflow, 1);
    bwd_store<T, NC>(g, acc, row0, lq, qb, ts, g.h, hh, g.d, g.scale, dq, wgi ? kMlaC0 : 0,
                     wgi ? NC : kMlaC0 / 8);
#else
    (void)g, (void)q, (void)k, (void)v, (void)dout, (void)lse, (void)dd, (void)dq, (void)overflow;
    __trap();
#endif
}

/* dv (blockIdx.y even) or dk (odd) of a key tile over head group (blockIdx.y / 2) % ngrp:
 * block (64 keys, kv head x ngrp x 2, sequence). One group: dk and dv rounded; more: each
 * group's sums unrounded into pk, pv (ngrp arrays of nk, nv floats shaped as dk, dv) for
 * sum_parts. */
template <typename T, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_mla_kernel(geo g, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                   const float *dd, float *dk, float *dv, int *overflow, int ngrp, float *pk,
                   float *pv, int64_t nk, int64_t nv)
{
#if QC_WGMMA
    constexpr int KD = kMlaKD, DV = kMlaDV, BM = kMlaBN, NB = BM / 8;
    constexpr int NC = (KD - kMlaC0) / 8; /* 8-column blocks of the larger dK share */
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sk = align1k<T>(smraw), *sv = sk + kMlaRows * KD, *sq = sv + kMlaRows * DV;
    T *sdo = sq + BM * KD;
    float *xch = reinterpret_cast<float *>(sdo + BM * DV); /* [2][NB * 4][128] */
    float *sl = xch + 2 * kMlaXch, *sd = sl + BM;
    int s = blockIdx.z, gi = (blockIdx.y >> 1) % ngrp, hk = (blockIdx.y >> 1) / ngrp;
    bool kmode = blockIdx.y & 1;
    int j0 = blockIdx.x * kMlaRows, lq = g.len(0, s), lk = g.len(1, s);
    if (j0 >= lk)
        return;
    int tid = threadIdx.x, t = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
    /* the warpgroup, broadcast from lane 0: the compiler then knows it the same across the
     * warp, and the branches on it below do not serialize the wgmmas (ptxas C7520) */
    int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0);
    int gr = lane >> 2, tq = lane & 3;
    int64_t ts = g.tstride(), qb = g.base(0, s), kb = g.base(1, s);
    load_sw<T, kMlaRows, KD, kThreads>(sk, k + (kb * g.hkv + hk) * g.d, ts * g.hkv * g.d, j0,
                                       lk - j0, g.d, tid);
    if (kmode)
        load_sw<T, kMlaRows, DV, kThreads>(sv, v + (kb * g.hkv + hk) * g.dv, ts * g.hkv * g.dv, j0,
                                           lk - j0, g.dv, tid);
    cp_commit();
    bool causal = g.mask == QS_ATTN_MASK_CAUSAL;
    int istart = causal ? j0 : 0;
    int grp = g.h / g.hkv, h0 = gi * grp / ngrp, nh = (gi + 1) * grp / ngrp - h0;
    int nqt = lq > istart ? (lq - istart + BM - 1) / BM : 0, nt = nh * nqt;
    float sl2 = g.scale * kLog2e;
    int key0 = j0 + warp * 16 + gr; /* both warpgroups hold all 64 keys */
    float acc[NC][4];
#pragma unroll
    for (int nb = 0; nb < NC; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    bool big = false;
    float *mine = xch + wgi * kMlaXch, *twin = xch + (1 - wgi) * kMlaXch;
    /* Tile tt is head hk * grp + h0 + tt % nh, rows istart + (nqt - 1 - tt / nh) * BM: the
     * heads of a row tile one after another, the last row tile first, so that the blocks of
     * every key tile read the same tiles at about the same time (through L2). Its two
     * buffers are read in different phases: the early one only by the score products (dV: Q;
     * dK: dO), the late one by the accumulation too (dV: dO; dK: Q). So the next tile's
     * early buffer loads while this tile's P or dS forms and accumulates, and its late one
     * while the next tile's scores compute (dV) or before them (dK). */
    auto tile_of = [&](int tt, int &hh, int &i0) {
        hh = hk * grp + h0 + tt % nh;
        i0 = istart + (nqt - 1 - tt / nh) * BM;
    };
    auto load_part = [&](int tt, bool is_do) { /* tile tt's dO or Q, one cp.async group */
        int hh, i0;
        tile_of(tt, hh, i0);
        if (is_do)
            load_sw<T, BM, DV, kThreads>(sdo, dout + (qb * g.h + hh) * g.dv, ts * g.h * g.dv, i0,
                                         lq - i0, g.dv, tid);
        else
            load_sw<T, BM, KD, kThreads>(sq, q + (qb * g.h + hh) * g.d, ts * g.h * g.d, i0,
                                         lq - i0, g.d, tid);
        cp_commit();
    };
    auto load_early = [&](int tt) { load_part(tt, kmode); };
    auto load_late = [&](int tt) { load_part(tt, !kmode); };
    /* a row's lse (times log2 e; +inf past the sequence: P 0) and D, for tid < BM */
    auto fetch_ld = [&](int tt, float &l, float &d) {
        int hh, i0;
        tile_of(tt, hh, i0);
        int64_t idx = (qb + (i0 + tid) * ts) * g.h + hh;
        bool ok = i0 + tid < lq;
        l = ok ? lse[idx] * kLog2e : INFINITY;
        d = ok ? dd[idx] : 0.0f;
    };
    if (nt > 0) {
        load_early(0);
        load_late(0);
        if (tid < BM)
            fetch_ld(0, sl[tid], sd[tid]);
    }
    for (int tt = 0; tt < nt; tt++) {
        int hh, i0;
        tile_of(tt, hh, i0);
        bool more = tt + 1 < nt;
        /* the tile's buffers (dK: both; dV: the early one, its late one may still load) */
        if (kmode)
            cp_wait_n<0>();
        else
            cp_wait_n<1>();
        fence_async_smem();
        __syncthreads();
        float x[NB][4], y[NB][4];
        wg_fence();
        if (!kmode)
            qk32_issue<T, kMlaKS>(x, sk, sq, wgi); /* half of S^T's k steps */
        else if (wgi == 0)
            ab32_issue<T, KD / 16>(x, sk, sq); /* S^T */
        else
            ab32_issue<T, DV / 16>(x, sv, sdo); /* dP^T */
        wg_wait<0>();
        keep<NB>(x);
        swap_tiles<NB>(x, y, mine, twin, t); /* after its barrier the early buffer is free */
        float nl = 0.0f, nd = 0.0f;
        if (more) {
            load_early(tt + 1);
            if (tid < BM)
                fetch_ld(tt + 1, nl, nd);
        }
        float st[NB][4]; /* S^T: the sum in one order (dV), or the first warpgroup's (dK) */
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                st[nb][e] = !kmode     ? (wgi == 0 ? __fadd_rn(x[nb][e], y[nb][e])
                                                   : __fadd_rn(y[nb][e], x[nb][e]))
                            : wgi == 0 ? x[nb][e]
                                       : y[nb][e];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = key0 + (e >> 1) * 8, qc = nb * 8 + 2 * tq + (e & 1);
                bool ok = key < lk && (!causal || key <= i0 + qc);
                float p = ok ? ex2(st[nb][e] * sl2 - sl[qc]) : 0.0f;
                if (kmode) { /* dS^T = P^T (dP^T - D) */
                    float dp = wgi == 0 ? y[nb][e] : x[nb][e];
                    p *= dp - sd[qc];
                    big |= fabsf(p) > ops<T>::kMax;
                }
                st[nb][e] = p;
            }
        uint32_t ah[BM / 16][4], al[kSplit ? BM / 16 : 1][4];
        to_a<T, NB, kSplit>(st, ah, al);
        if (kmode) {
            xb32_cols<T, kSplit>(acc, ah, al, sq, wgi);
        } else {
            if (more) /* this tile's dO; the next tile's Q may still load */
                cp_wait_n<1>();
            else
                cp_wait_n<0>();
            fence_async_smem();
            __syncthreads();
            wg_fence();
            pv32_issue<T, (DV / 2) / 128, kSplit>(acc, ah, al, sdo, wgi * (DV / 2));
            wg_wait<0>();
        }
        keep<NC>(acc);
        keep<BM / 16>(ah);
        if constexpr (kSplit)
            keep<BM / 16>(al);
        __syncthreads(); /* the late buffer, the exchange, lse and D are no longer read */
        if (more) {
            load_late(tt + 1);
            if (tid < BM) {
                sl[tid] = nl;
                sd[tid] = nd;
            }
        }
    }
    cp_wait_n<0>(); /* the K and V copies, when no query tile followed */
    if (big)
        atomicOr(overflow, 1);
    bool one = ngrp == 1;
    if (kmode)
        bwd_store<T, NC>(g, acc, key0, lk, kb, ts, g.hkv, hk, g.d, g.scale, one ? dk : pk + gi * nk,
                         wgi ? kMlaC0 : 0, wgi ? NC : kMlaC0 / 8, one);
    else
        bwd_store<T, NC>(g, acc, key0, lk, kb, ts, g.hkv, hk, g.dv, 1.0f, one ? dv : pv + gi * nv,
                         wgi * (DV / 2), DV / 2 / 8, one);
#else
    (void)g, (void)q, (void)k, (void)v, (void)dout, (void)lse, (void)dd, (void)dk, (void)dv;
    (void)overflow, (void)ngrp, (void)pk, (void)pv, (void)nk, (void)nv;
    __trap();
#endif
}

/* out[i] = the sum over p < parts of part[p n + i], added in that order, rounded to T (i < n). */
template <typename T>
__global__ void sum_parts(const float *part, int64_t n, int parts, int dt, float *out)
{
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float a = part[i];
        for (int p = 1; p < parts; p++)
            a += part[p * n + i];
        out[i] = dt == QS_FP32 ? a : ops<T>::round(a);
    }
}

/* The head groups of the absorbed-MLA dkv pass: enough blocks for about eight a multiprocessor
 * of an H100 or H200 (132), at most a group a query head of the KV head. */
inline int mla_groups(const geo &g, int maxk)
{
    int64_t blocks = static_cast<int64_t>((maxk + kMlaRows - 1) / kMlaRows) * g.hkv * g.b * 2;
    int64_t n = blocks > 0 ? (8 * 132 + blocks - 1) / blocks : 1;
    int grp = g.h / g.hkv;
    return n < 1 ? 1 : n > grp ? grp : static_cast<int>(n);
}

/* The FP32 scratch the wgmma backward of class c needs, in floats (0: none): the absorbed
 * class's dkv pass keeps a dk and a dv a head group when there are several (nk, nv: the
 * floats of dk and dv; maxk the longest key sequence). */
inline size_t bwd_scratch(int c, const geo &g, int maxk, int64_t nk, int64_t nv)
{
    int ng = c == 3 ? mla_groups(g, maxk) : 1;
    return ng > 1 ? static_cast<size_t>(ng) * static_cast<size_t>(nk + nv) : 0;
}

/* ------------------------------------------------------------ self-tests (attn_bench) */

/* d[64][128] = a[64][k] b[128][k]^T over k < 16 KS (a, b row-major with 128 columns): one
 * warpgroup, the tiles in shared memory through load_sw, the product through qk_issue. */
template <typename T, int KS>
__global__ void __launch_bounds__(128) test_ss(const T *a, const T *b, float *d)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sa = align1k<T>(smraw), *sb = sa + 64 * 128;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tq = lane & 3;
    load_sw<T, 64, 128, 128>(sa, a, 128, 0, 64, 128, tid);
    load_sw<T, kBN, 128, 128>(sb, b, 128, 0, 128, 128, tid);
    cp_commit();
    cp_wait_n<0>();
    fence_async_smem();
    __syncthreads();
    float x[16][4];
#pragma unroll
    for (int nb = 0; nb < 16; nb++)
        x[nb][0] = x[nb][1] = x[nb][2] = x[nb][3] = 0.0f;
    wg_fence();
    qk_issue<T, KS, 64>(x, sa, 0, sb);
    wg_wait<0>();
    keep<16>(x);
#pragma unroll
    for (int nb = 0; nb < 16; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d[(warp * 16 + gr + (e >> 1) * 8) * 128 + nb * 8 + 2 * tq + (e & 1)] = x[nb][e];
#else
    (void)a, (void)b, (void)d;
    __trap();
#endif
}

/* d[64][N] = p[64][128] v[128][N] (row-major): P rounded to T into A fragments from the
 * accumulator layout (to_a), V through load_sw, the product through pv_issue (kSplit off). */
template <typename T, int N> __global__ void __launch_bounds__(128) test_rs(const float *p, const T *v, float *d)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sv = align1k<T>(smraw);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tq = lane & 3;
    load_sw<T, kBN, N, 128>(sv, v, N, 0, 128, N, tid);
    cp_commit();
    cp_wait_n<0>();
    fence_async_smem();
    __syncthreads();
    float x[16][4], acc[N / 8][4];
#pragma unroll
    for (int nb = 0; nb < 16; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[nb][e] = p[(warp * 16 + gr + (e >> 1) * 8) * 128 + nb * 8 + 2 * tq + (e & 1)];
#pragma unroll
    for (int nb = 0; nb < N / 8; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    uint32_t ph[8][4], pl[1][4];
    to_a<T, 16, false>(x, ph, pl);
    wg_fence();
    pv_issue<T, N, false>(acc, ph, pl, sv);
    wg_wait<0>();
    keep<N / 8>(acc);
    keep<8>(ph);
#pragma unroll
    for (int nb = 0; nb < N / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d[(warp * 16 + gr + (e >> 1) * 8) * N + nb * 8 + 2 * tq + (e & 1)] = acc[nb][e];
#else
    (void)p, (void)v, (void)d;
    __trap();
#endif
}

/* d[64][32] = a[64][576] b[32][576]^T (row-major): the class-3 tiles (9 panels; B of 32 rows)
 * through load_sw and qk32_issue, the even and the odd k steps accumulated in turn. */
template <typename T> __global__ void __launch_bounds__(128) test_ss32(const T *a, const T *b, float *d)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sa = align1k<T>(smraw), *sb = sa + kMlaRows * kMlaKD;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tq = lane & 3;
    load_sw<T, kMlaRows, kMlaKD, 128>(sa, a, kMlaKD, 0, 64, kMlaKD, tid);
    load_sw<T, kMlaBN, kMlaKD, 128>(sb, b, kMlaKD, 0, 32, kMlaKD, tid);
    cp_commit();
    cp_wait_n<0>();
    fence_async_smem();
    __syncthreads();
    float x[kMlaNB][4], y[kMlaNB][4];
    wg_fence();
    qk32_issue<T, kMlaKS>(x, sa, sb, 0);
    qk32_issue<T, kMlaKS>(y, sa, sb, 1);
    wg_wait<0>();
    keep<kMlaNB>(x);
    keep<kMlaNB>(y);
#pragma unroll
    for (int nb = 0; nb < kMlaNB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d[(warp * 16 + gr + (e >> 1) * 8) * 32 + nb * 8 + 2 * tq + (e & 1)] =
                x[nb][e] + y[nb][e];
#else
    (void)a, (void)b, (void)d;
    __trap();
#endif
}

/* d[64][512] = p[64][32] v[32][512] (row-major): P rounded to T into A fragments, V a
 * class-3 tile of 32 rows through load_sw, the product through pv32_issue for both halves of
 * the columns (kSplit off). */
template <typename T> __global__ void __launch_bounds__(128) test_rs32(const float *p, const T *v, float *d)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sv = align1k<T>(smraw);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tq = lane & 3;
    load_sw<T, kMlaBN, kMlaDV, 128>(sv, v, kMlaDV, 0, 32, kMlaDV, tid);
    cp_commit();
    cp_wait_n<0>();
    fence_async_smem();
    __syncthreads();
    float x[kMlaNB][4], acc[kMlaDV / 16][4];
#pragma unroll
    for (int nb = 0; nb < kMlaNB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            x[nb][e] = p[(warp * 16 + gr + (e >> 1) * 8) * 32 + nb * 8 + 2 * tq + (e & 1)];
    uint32_t ph[2][4], pl[1][4];
    to_a<T, kMlaNB, false>(x, ph, pl);
#pragma unroll
    for (int half = 0; half < 2; half++) {
#pragma unroll
        for (int nb = 0; nb < kMlaDV / 16; nb++)
            acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
        wg_fence();
        pv32_issue<T, 2, false>(acc, ph, pl, sv, half * 256);
        wg_wait<0>();
        keep<kMlaDV / 16>(acc);
        keep<2>(ph);
#pragma unroll
        for (int nb = 0; nb < kMlaDV / 16; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                d[(warp * 16 + gr + (e >> 1) * 8) * kMlaDV + half * 256 + nb * 8 + 2 * tq +
                  (e & 1)] = acc[nb][e];
    }
#else
    (void)p, (void)v, (void)d;
    __trap();
#endif
}

/* The backward's tiles: s[64][64] = a[64..127][192] b[64][192]^T (a of 128 rows, b of 64,
 * row-major: abt_issue from row 64 over three panels), then o[64][192] = p[64][64]
 * c[64][192] (P rounded to T into A fragments, c through load_sw as a tile of 64 rows, read
 * transposed: xb_issue's n128 + n64). One warpgroup. */
template <typename T>
__global__ void __launch_bounds__(128)
    test_bwd(const T *a, const T *b, const float *p, const T *c, float *s, float *o)
{
#if QC_WGMMA
    extern __shared__ __align__(1024) unsigned char smraw[];
    T *sa = align1k<T>(smraw), *sb = sa + 128 * 192, *sc = sb + 64 * 192;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gr = lane >> 2, tq = lane & 3;
    load_sw<T, 128, 192, 128>(sa, a, 192, 0, 128, 192, tid);
    load_sw<T, 64, 192, 128>(sb, b, 192, 0, 64, 192, tid);
    load_sw<T, 64, 192, 128>(sc, c, 192, 0, 64, 192, tid);
    cp_commit();
    cp_wait_n<0>();
    fence_async_smem();
    __syncthreads();
    float x[8][4], acc[24][4];
#pragma unroll
    for (int nb = 0; nb < 24; nb++)
        acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;
    wg_fence();
    abt_issue<T, 12, 128>(x, sa, 64, sb);
    wg_commit();
    wg_wait<0>();
    keep<8>(x);
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = warp * 16 + gr + (e >> 1) * 8, col = nb * 8 + 2 * tq + (e & 1);
            s[r * 64 + col] = x[nb][e];
            x[nb][e] = p[r * 64 + col];
        }
    uint32_t ph[4][4], pl[1][4];
    to_a<T, 8, false>(x, ph, pl);
    wg_fence();
    xb_issue<T, 192, 4, 64, false>(acc, ph, pl, sc);
    wg_commit();
    wg_wait<0>();
    keep<24>(acc);
    keep<4>(ph);
#pragma unroll
    for (int nb = 0; nb < 24; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[(warp * 16 + gr + (e >> 1) * 8) * 192 + nb * 8 + 2 * tq + (e & 1)] = acc[nb][e];
#else
    (void)a, (void)b, (void)p, (void)c, (void)s, (void)o;
    __trap();
#endif
}

#ifndef QC_EMU /* the emulator launches kernels with qc::emu::launch */
template <int N> __global__ void probe_kernel(int *f) /* a template: no duplicate symbol */
{
    *f = QC_WGMMA;
}

/* Whether the wgmma kernels run on the current device: compute capability 9.0 with the
 * sm_90a build of the code loaded (probed once a device; a probe that could not run is
 * not remembered, and its error is cleared). */
inline bool available()
{
    constexpr int kDevices = 64;
    static int known[kDevices] = {}; /* 0 unknown, 1 yes, 2 no */
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices)
        return false;
    if (known[dev])
        return known[dev] == 1;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return false;
    if (major != 9 || minor != 0) {
        known[dev] = 2;
        return false;
    }
    int *f = nullptr, h = 0;
    if (cudaMalloc(&f, sizeof(int)) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    probe_kernel<0><<<1, 1>>>(f);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpy(&h, f, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(f);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    known[dev] = h == 1 ? 1 : 2;
    return known[dev] == 1;
}

#endif

/* The class of (d, dv) (0: 64/64, 1: 128/128, 2: 192/128, 3: 576/512), or -1 when none fits or the
 * request is outside what the kernels do (d, dv multiples of 8; a positive scale). */
inline int wg_class(int d, int dv, float scale)
{
    if (d <= 0 || dv <= 0 || d % 8 || dv % 8 || !(scale > 0.0f) || !(scale < INFINITY))
        return -1;
    if (d <= 64 && dv <= 64)
        return 0;
    if (d <= 128 && dv <= 128)
        return 1;
    if (d <= 192 && dv <= 128)
        return 2;
    if (d <= kMlaKD && dv <= kMlaDV)
        return 3;
    return -1;
}

#ifndef QC_EMU
/* As fl::fwd_launch: o and lse preset to 0 and -inf; maxq the longest query sequence. */
template <typename T, int KD, int DV, bool kSplit>
cudaError_t fwd_launch(const geo &g, int maxq, const T *q, const T *k, const T *v, float *o,
                       float *lse, cudaStream_t st)
{
    auto kern = fwd_kernel<T, KD, DV, kSplit>;
    size_t sm = fwd_smem<KD, DV>();
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess || maxq <= 0 || g.b <= 0)
        return e;
    dim3 grid((maxq + kRows - 1) / kRows, g.h, g.b);
    kern<<<grid, kThreads, sm, st>>>(g, q, k, v, o, lse);
    return cudaGetLastError();
}

/* As fwd_launch, class 3 (fwd_mla_kernel). */
template <typename T, bool kSplit>
cudaError_t fwd_mla_launch(const geo &g, int maxq, const T *q, const T *k, const T *v, float *o,
                           float *lse, cudaStream_t st)
{
    auto kern = fwd_mla_kernel<T, kSplit>;
    size_t sm = mla_smem();
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess || maxq <= 0 || g.b <= 0)
        return e;
    dim3 grid((maxq + kMlaRows - 1) / kMlaRows, g.h, g.b);
    kern<<<grid, kThreads, sm, st>>>(g, q, k, v, o, lse);
    return cudaGetLastError();
}

/* As fl::bwd_launch (the same preconditions), classes 0-2. */
template <typename T, int KD, int DV, bool kSplit>
cudaError_t bwd_launch(const geo &g, int maxq, int maxk, const T *q, const T *k, const T *v,
                       const T *dout, const float *lse, const float *dd, float *dq, float *dk,
                       float *dv, int *overflow, cudaStream_t st)
{
    auto kq = dq_kernel<T, KD, DV, kSplit>;
    auto kkv = dkv_kernel<T, KD, DV, kSplit>;
    size_t sm = bwd_smem<KD, DV>();
    cudaError_t e = cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess || g.b <= 0)
        return e;
    if (maxq > 0)
        kq<<<dim3((maxq + kRows - 1) / kRows, g.h, g.b), kThreads, sm, st>>>(g, q, k, v, dout, lse,
                                                                             dd, dq, overflow);
    if (maxk > 0)
        kkv<<<dim3((maxk + kRows - 1) / kRows, g.hkv, g.b), kThreads, sm, st>>>(
            g, q, k, v, dout, lse, dd, dk, dv, overflow);
    return cudaGetLastError();
}

/* As bwd_launch, class 3 (dq_mla_kernel, dkv_mla_kernel); scratch: bwd_scratch floats (nk,
 * nv: the floats of dk, dv). */
template <typename T, bool kSplit>
cudaError_t bwd_mla_launch(const geo &g, int maxq, int maxk, const T *q, const T *k, const T *v,
                           const T *dout, const float *lse, const float *dd, float *dq, float *dk,
                           float *dv, int *overflow, float *scratch, int64_t nk, int64_t nv,
                           cudaStream_t st)
{
    auto kq = dq_mla_kernel<T, kSplit>;
    auto kkv = dkv_mla_kernel<T, kSplit>;
    size_t smq = mla_dq_smem(), smk = mla_dkv_smem();
    cudaError_t e = cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smq);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smk);
    if (e != cudaSuccess || g.b <= 0)
        return e;
    if (maxq > 0)
        kq<<<dim3((maxq + kMlaRows - 1) / kMlaRows, g.h, g.b), kThreads, smq, st>>>(
            g, q, k, v, dout, lse, dd, dq, overflow);
    if (maxk <= 0)
        return cudaGetLastError();
    int ng = mla_groups(g, maxk);
    float *pk = ng > 1 ? scratch : nullptr, *pv = ng > 1 ? scratch + ng * nk : nullptr;
    if (ng > 1) /* rows no block writes (padding) sum to 0 */
        e = cudaMemsetAsync(scratch, 0, ng * (nk + nv) * sizeof(float), st);
    if (e != cudaSuccess)
        return e;
    kkv<<<dim3((maxk + kMlaRows - 1) / kMlaRows, g.hkv * ng * 2, g.b), kThreads, smk, st>>>(
        g, q, k, v, dout, lse, dd, dk, dv, overflow, ng, pk, pv, nk, nv);
    if (ng > 1) {
        sum_parts<T><<<1024, 256, 0, st>>>(pk, nk, ng, g.dt, dk);
        sum_parts<T><<<1024, 256, 0, st>>>(pv, nv, ng, g.dt, dv);
    }
    return cudaGetLastError();
}

/* The same by class; scratch: bwd_scratch floats (class 3). */
template <typename T, bool kSplit>
cudaError_t bwd_launch_class(int c, const geo &g, int maxq, int maxk, const T *q, const T *k,
                             const T *v, const T *dout, const float *lse, const float *dd,
                             float *dq, float *dk, float *dv, int *overflow, float *scratch,
                             int64_t nk, int64_t nv, cudaStream_t st)
{
    switch (c) {
    case 0:
        return bwd_launch<T, 64, 64, kSplit>(g, maxq, maxk, q, k, v, dout, lse, dd, dq, dk, dv,
                                             overflow, st);
    case 1:
        return bwd_launch<T, 128, 128, kSplit>(g, maxq, maxk, q, k, v, dout, lse, dd, dq, dk, dv,
                                               overflow, st);
    case 2:
        return bwd_launch<T, 192, 128, kSplit>(g, maxq, maxk, q, k, v, dout, lse, dd, dq, dk, dv,
                                               overflow, st);
    case 3:
        return bwd_mla_launch<T, kSplit>(g, maxq, maxk, q, k, v, dout, lse, dd, dq, dk, dv,
                                         overflow, scratch, nk, nv, st);
    default:
        return cudaErrorInvalidValue;
    }
}

/* The same by class (wg_class). */
template <typename T, bool kSplit>
cudaError_t fwd_launch_class(int c, const geo &g, int maxq, const T *q, const T *k, const T *v,
                             float *o, float *lse, cudaStream_t st)
{
    switch (c) {
    case 0:
        return fwd_launch<T, 64, 64, kSplit>(g, maxq, q, k, v, o, lse, st);
    case 1:
        return fwd_launch<T, 128, 128, kSplit>(g, maxq, q, k, v, o, lse, st);
    case 2:
        return fwd_launch<T, 192, 128, kSplit>(g, maxq, q, k, v, o, lse, st);
    case 3:
        return fwd_mla_launch<T, kSplit>(g, maxq, q, k, v, o, lse, st);
    default:
        return cudaErrorInvalidValue;
    }
}
#endif

} // namespace wg
} // namespace fl
} // namespace qc

#endif
