/* qc_emu.h: the flash kernels of cuda/qc_flash.cuh and cuda/qc_flash_wgmma.cuh, and the
 * BF16-staged GDN kernels of cuda/qc_gdn_staged.cuh, compiled as host C++ and run on the CPU,
 * to check their logic (tiling, masks, loop bounds, barriers, the shared-memory layouts and wgmma
 * descriptors) where no GPU is at hand. Defining QC_EMU before including those headers makes
 * them include this one instead of CUDA's: a kernel is
 * then an ordinary function, and qc::emu::launch runs it block by block, each block's
 * threads as fibers (ucontext) taking turns on one host thread, switching only where a
 * thread waits (a barrier, an mbarrier, a warp or warpgroup exchange). The instructions the
 * kernels use are given by their PTX meaning:
 * - cp.async copies (16 or 4 bytes) as late as PTX allows: a thread's copies wait in its
 *   groups (commit_group closes one) and land only when the thread waits for them
 *   (wait_group N: all but the N
 *   groups committed last; an mbarrier's cp arrival or the thread's end: all it issued), so
 *   a read before the wait, or a copy into a buffer still being read, shows in the results;
 *   a wgmma that reads what a cp.async wrote needs a fence.proxy.async since the copy landed,
 *   by the thread that issued the copy or by the reading thread (else a hazard); the wgmma
 *   fence is a no-op;
 * - mbarriers count arrivals per phase; bar.sync/bar.arrive of a named barrier and
 *   __syncthreads are generation barriers; a shuffle exchanges values through the warp;
 * - wgmma is asynchronous (its results land at the wait_group that completes its group; see
 *   wg_complete for the hazards checked then) and m64nNk16 (FP32 accumulation) reads its
 *   shared-memory operands through the
 *   descriptor: 128-byte swizzle only, element (row r, k) of a K-major operand at byte
 *   start + (r / 8) SBO + (r % 8) 128 + 2 k, element (k, n) of a transposed ("MN-major") B
 *   at start + (n / 64) LBO + (k / 8) SBO + (k % 8) 128 + 2 (n % 64), each address then
 *   swizzled (bits 4-6 ^= bits 7-9); A from registers in the m16n8k16 fragment layout, one
 *   warp's 16 rows a warp; mma.sync m16n8k16 and ldmatrix .x4 by their fragment layouts.
 * Results are not the GPU's bits (the products are summed in another order) and timings
 * mean nothing. When every thread of a block waits and none can go on, launch says so and
 * returns false (the block is abandoned). A block's shared memory is a static buffer (blocks run
 * one after another; qc::fl::smraw and qc::fl::wg::smraw, the kernels' own names for it, so this
 * header goes into one program source only), filled with NaNs before each block. */
#ifndef QC_EMU_H
#define QC_EMU_H

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)
#define __shared__

/* ------------------------------------------------------------------ 16-bit types */
struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(from(f))
    {
    }
    operator float() const
    {
        uint32_t u = static_cast<uint32_t>(x) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t from(float f) /* round to nearest even; NaN stays NaN */
    {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7FFFFFFFu) > 0x7F800000u)
            return static_cast<uint16_t>((u >> 16) | 0x40);
        u += 0x7FFFu + ((u >> 16) & 1u);
        return static_cast<uint16_t>(u >> 16);
    }
};
struct __half {
    uint16_t x;
    __half() = default;
    __half(float f) : x(from(f))
    {
    }
    operator float() const /* exact */
    {
        uint32_t s = (x >> 15) & 1u, e = (x >> 10) & 0x1Fu, m = x & 0x3FFu, u;
        if (e == 0) { /* zero or subnormal: m 2^-24 */
            float v = static_cast<float>(m) * 0x1p-24f;
            return s ? -v : v;
        }
        u = s << 31 | (e == 31 ? 0xFFu : e + 112) << 23 | m << 13;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t from(float f) /* round to nearest even, overflow to infinity */
    {
        uint16_t s = std::signbit(f) ? 0x8000 : 0;
        float a = std::fabs(f);
        if (std::isnan(f))
            return 0x7E00;
        if (a >= 65520.0f)
            return s | 0x7C00;
        if (a < 0x1p-14f) { /* subnormal: multiples of 2^-24 */
            float q = std::nearbyint(a * 0x1p24f);
            return s | static_cast<uint16_t>(q);
        }
        int ex;
        float fr = std::frexp(a, &ex);                /* a = fr 2^ex, fr in [0.5, 1) */
        float q = std::nearbyint(std::ldexp(fr, 11)); /* 11 significant bits */
        if (q >= 2048.0f) {
            q = 1024.0f;
            ex++;
        }
        return s | static_cast<uint16_t>(((ex + 14) << 10) | (static_cast<int>(q) - 1024));
    }
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct __half2 {
    __half x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    return __nv_bfloat16(f);
}
inline float __bfloat162float(__nv_bfloat16 b)
{
    return static_cast<float>(b);
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__nv_bfloat16(lo), __nv_bfloat16(hi)};
}
inline __half __float2half_rn(float f)
{
    return __half(f);
}
inline float __half2float(__half h)
{
    return static_cast<float>(h);
}
inline __half2 __floats2half2_rn(float lo, float hi)
{
    return __half2{__half(lo), __half(hi)};
}
struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
struct float2 {
    float x, y;
};
inline float2 make_float2(float x, float y)
{
    return float2{x, y};
}
inline float __fsub_rn(float a, float b)
{
    return a - b;
}
inline float __fmul_rn(float a, float b)
{
    return a * b;
}
inline float2 __bfloat1622float2(__nv_bfloat162 h)
{
    return float2{static_cast<float>(h.x), static_cast<float>(h.y)};
}
inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
inline float __fadd_rn(float a, float b)
{
    return a + b;
}
inline float __fmaf_rn(float a, float b, float c)
{
    return std::fmaf(a, b, c);
}
inline int min(int a, int b)
{
    return a < b ? a : b;
}
inline int max(int a, int b)
{
    return a > b ? a : b;
}
[[noreturn]] inline void __trap()
{
    fprintf(stderr, "qc_emu: __trap\n");
    abort();
}

namespace qc
{
namespace fl
{
/* the shared memory of the running block: the kernels of qc::fl and qc::fl::wg declare it
 * (extern smraw[]), each namespace its own */
alignas(1024) unsigned char smraw[232448];
namespace wg
{
alignas(1024) unsigned char smraw[232448];
} // namespace wg
} // namespace fl

namespace emu
{

struct uint3e {
    unsigned x, y, z;
};

constexpr size_t kSmem = sizeof fl::wg::smraw;
constexpr unsigned char *g_smem = fl::wg::smraw;

struct barrier {
    unsigned count = 0, gen = 0;
};
struct mbar {
    unsigned expected = 0, pending = 0, phase = 0;
};

struct copy16 { /* a pending cp.async of n bytes (16, 8 or 4; zeros unless ok) */
    void *dst;
    const void *src;
    bool ok;
    unsigned n;
};

/* a shared-memory element a wgmma read, with its bits then */
struct smem_read {
    uint32_t addr;
    uint16_t bits;
};
/* an issued wgmma: its results (accumulator element, value), the A fragments it read from
 * registers (rs) and their bits then, the shared memory it read */
struct wg_op {
    uint64_t seq = 0;
    std::vector<std::pair<float *, float>> out;
    const uint32_t *a = nullptr;
    uint32_t a_bits[4] = {0, 0, 0, 0};
    std::vector<smem_read> reads;
};
/* an accumulator element with a wgmma in flight: its value after the last one issued, that
 * one's number, and the bits it holds meanwhile (the poison written at issue) */
struct wg_pending {
    float val;
    uint64_t seq;
    uint32_t held;
};

/* a thread's asynchronous operations of one kind (cp.async, wgmma) in PTX's groups: those
 * issued since the last commit, and the committed groups not yet complete, oldest first */
template <class Op> struct async_groups {
    std::vector<Op> open;
    std::vector<std::vector<Op>> groups;
    void commit()
    {
        groups.push_back(std::move(open));
        open.clear();
    }
    /* wait_group n: completes (done(op), in issue order) all but the n newest groups */
    template <class F> void wait(size_t n, F &&done)
    {
        size_t k = groups.size() > n ? groups.size() - n : 0;
        for (size_t i = 0; i < k; i++)
            for (const Op &op : groups[i])
                done(op);
        groups.erase(groups.begin(), groups.begin() + static_cast<std::ptrdiff_t>(k));
    }
};

struct fiber {
    ucontext_t ctx;
    async_groups<wg_op> wg;                    /* wgmmas */
    std::map<float *, wg_pending> wg_inflight; /* accumulator elements in flight */
    uint64_t wg_seq = 0;
    async_groups<copy16> cp; /* cp.async */
    uint3e tid;
    bool done = false;
    unsigned exchanges = 0;          /* warp exchanges so far (the warp's lanes count alike) */
    const unsigned *watch = nullptr; /* waiting: until *watch != watch_val */
    unsigned watch_val = 0;
};

/* The running block: its fibers, the scheduler's context, barriers and exchange slots. */
struct block_rt {
    std::vector<fiber> f;
    ucontext_t sched;
    unsigned cur = 0, nthreads = 0;
    std::function<void()> body;
    barrier sync, named[16];
    std::vector<barrier> warp;
    std::vector<uint32_t> slot; /* two sets of kSlot words a thread */
    std::map<const void *, mbar> mbars;
    /* the proxies: for each 16-byte chunk of the wgmma kernels' shared memory that a cp.async
     * wrote, when it landed (a step of clock) and which thread issued it; each thread's last
     * fence.proxy.async */
    uint64_t clock = 0;
    std::vector<uint64_t> landed;
    std::vector<unsigned> lander;
    std::vector<uint64_t> fenced;
};
inline block_rt *&rt()
{
    static block_rt *r = nullptr;
    return r;
}
inline uint3e g_block, g_grid, g_dim;

inline const uint3e &thread_idx()
{
    return rt()->f[rt()->cur].tid;
}
inline void yield()
{
    block_rt *r = rt();
    swapcontext(&r->f[r->cur].ctx, &r->sched);
}
/* until *w differs from val; the scheduler resumes this thread only then */
inline void wait_change(const unsigned *w, unsigned val)
{
    if (*w != val)
        return;
    fiber &f = rt()->f[rt()->cur];
    f.watch = w;
    f.watch_val = val;
    yield();
    f.watch = nullptr;
}
inline void arrive(barrier &b, unsigned n)
{
    if (++b.count == n) {
        b.count = 0;
        b.gen++;
    }
}
inline void arrive_wait(barrier &b, unsigned n)
{
    unsigned g = b.gen;
    arrive(b, n);
    wait_change(&b.gen, g);
}
inline unsigned flat_tid()
{
    const uint3e &t = thread_idx();
    return t.x + g_dim.x * (t.y + g_dim.y * t.z);
}
inline void syncthreads()
{
    arrive_wait(rt()->sync, rt()->nthreads);
}
inline void warp_sync()
{
    arrive_wait(rt()->warp[flat_tid() / 32], 32);
}
constexpr int kSlot = 8;
/* the values v[0..n) (n <= kSlot) of every lane of this warp, exchanged: lane l's at out +
 * kSlot l. Two sets of slots used in turn: a lane writes a set again only after the barrier
 * of the exchange between, which every lane passes after it has read the set. */
inline const uint32_t *warp_exchange(const uint32_t *v, int n)
{
    block_rt *r = rt();
    unsigned t = flat_tid(), set = r->f[r->cur].exchanges++ & 1u;
    uint32_t *base = &r->slot[kSlot * (set * r->nthreads)];
    memcpy(base + kSlot * t, v, n * sizeof(uint32_t));
    warp_sync();
    return base + kSlot * (t & ~31u);
}
template <typename V> V shfl(V v, int src_lane)
{
    uint32_t w;
    static_assert(sizeof(V) == 4, "32-bit values");
    memcpy(&w, &v, 4);
    const uint32_t *all = warp_exchange(&w, 1);
    V r;
    memcpy(&r, all + kSlot * (src_lane & 31), 4);
    return r;
}

/* hazards: a wgmma operand changed before the wgmma completed (a shared-memory tile or A
 * fragment), or an accumulator written meanwhile; counted, the first few said */
inline unsigned &hazards()
{
    static unsigned n = 0;
    return n;
}
inline void hazard(const char *what);

/* cp.async: issue, commit, wait_group N, and the landing of all a thread issued */
inline fiber &self()
{
    return rt()->f[rt()->cur];
}
inline void land(const copy16 &c)
{
    if (c.ok)
        memcpy(c.dst, c.src, c.n);
    else
        memset(c.dst, 0, c.n);
    block_rt *r = rt();
    auto *d = static_cast<unsigned char *>(c.dst);
    /* a chunk wgmma may read, written by the generic proxy */
    if (d >= g_smem && d < g_smem + kSmem) {
        size_t ch = static_cast<size_t>(d - g_smem) / 16;
        r->landed[ch] = ++r->clock;
        r->lander[ch] = flat_tid();
    }
}
/* fence.proxy.async: this thread's generic-proxy writes so far, and what it has seen of
 * others', ordered before the async proxy's (wgmma's) reads */
inline void fence_proxy_async()
{
    block_rt *r = rt();
    r->fenced[flat_tid()] = ++r->clock;
}
/* a wgmma's read of shared memory at addr: a chunk a cp.async wrote needs a fence.proxy.async
 * since it landed, by the thread that issued it or by this one */
inline void proxy_check(uint32_t addr)
{
    block_rt *r = rt();
    size_t ch = addr / 16;
    uint64_t t = r->landed[ch];
    if (t && r->fenced[r->lander[ch]] < t && r->fenced[flat_tid()] < t)
        hazard("a wgmma read shared memory that cp.async wrote, with no fence.proxy.async since");
}
inline void cp_async(void *dst, const void *src, bool ok, unsigned n = 16)
{
    self().cp.open.push_back(copy16{dst, src, ok, n});
}
inline void cp_commit()
{
    self().cp.commit();
}
inline void cp_wait(size_t n)
{
    self().cp.wait(n, land);
}
inline void cp_land_all() /* the uncommitted copies too */
{
    cp_commit();
    cp_wait(0);
}

/* mbarriers */
inline void mb_init(const void *b, unsigned count)
{
    rt()->mbars[b] = mbar{count, count, 0};
}
inline void mb_arrive(const void *b)
{
    auto it = rt()->mbars.find(b);
    if (it == rt()->mbars.end()) {
        fprintf(stderr, "qc_emu: arrival on an mbarrier never initialized\n");
        abort();
    }
    if (--it->second.pending == 0) {
        it->second.pending = it->second.expected;
        it->second.phase++;
    }
}
inline void mb_wait(const void *b, int parity)
{
    const unsigned &phase = rt()->mbars[b].phase;
    if ((phase & 1u) == static_cast<unsigned>(parity & 1))
        wait_change(&phase, phase);
}
inline void named_sync(int id)
{
    arrive_wait(id ? rt()->named[id] : rt()->sync, rt()->nthreads);
}
inline void named_arrive(int id)
{
    arrive(id ? rt()->named[id] : rt()->sync, rt()->nthreads);
}

inline uint32_t smem_offset(const void *p)
{
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (c < g_smem || c >= g_smem + kSmem) {
        fprintf(stderr, "qc_emu: a shared-memory address outside the block's shared memory\n");
        abort();
    }
    return static_cast<uint32_t>(c - g_smem);
}

/* wgmma operands: an element of a K-major operand (row r, column k < 16) or of a transposed
 * B (row k < 16, column n), through the descriptor */
inline std::vector<smem_read> *&wg_reads() /* where the wgmma being issued notes its reads */
{
    static std::vector<smem_read> *r = nullptr;
    return r;
}
template <typename T> float sw_elem(uint32_t addr)
{
    addr ^= ((addr >> 7) & 7u) << 4;
    if (addr + sizeof(T) > kSmem) {
        fprintf(stderr, "qc_emu: a wgmma operand past the shared memory\n");
        abort();
    }
    T v;
    memcpy(&v, g_smem + addr, sizeof(T));
    if (wg_reads()) {
        uint16_t b;
        memcpy(&b, &v, 2);
        wg_reads()->push_back(smem_read{addr, b});
        proxy_check(addr);
    }
    return static_cast<float>(v);
}
inline void check_desc(uint64_t d)
{
    if ((d >> 62) != 1) {
        fprintf(stderr, "qc_emu: a wgmma descriptor without the 128-byte swizzle\n");
        abort();
    }
}
template <typename T> float kmajor(uint64_t d, int r, int k)
{
    uint32_t start = static_cast<uint32_t>(d & 0x3FFF) << 4;
    uint32_t sbo = static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4;
    return sw_elem<T>(start + (r >> 3) * sbo + (r & 7) * 128 + 2 * k);
}
template <typename T> float mnmajor(uint64_t d, int k, int n)
{
    uint32_t start = static_cast<uint32_t>(d & 0x3FFF) << 4;
    uint32_t lbo = static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4;
    uint32_t sbo = static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4;
    return sw_elem<T>(start + (n >> 6) * lbo + (k >> 3) * sbo + (k & 7) * 128 + 2 * (n & 63));
}
template <typename T> float half_of(uint32_t w, int hi)
{
    uint16_t b = static_cast<uint16_t>(hi ? w >> 16 : w & 0xFFFF);
    T v;
    memcpy(&v, &b, 2);
    return static_cast<float>(v);
}

/* wgmma is asynchronous: an issued product's results stay with the thread until a wait_group
 * completes its group; meanwhile its accumulator elements hold a NaN (a read shows in the
 * results), and at completion the emulator checks that the accumulator elements still hold
 * it, that the A fragments (rs) and every shared-memory element the product read are
 * unchanged (PTX: none may be accessed or changed before completion), then writes the
 * results. Products on the same accumulator chain (the next one starts from the last one's
 * result) as on the GPU. */
inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
constexpr uint32_t kPoison = 0x7FC0DEADu;
/* the value an accumulator element enters a new product with */
inline float wg_in(float *p)
{
    auto it = self().wg_inflight.find(p);
    return it != self().wg_inflight.end() ? it->second.val : *p;
}
inline void wg_out(wg_op &op, float *p, float v)
{
    fiber &f = self();
    op.out.emplace_back(p, v);
    f.wg_inflight[p] = wg_pending{v, op.seq, kPoison};
    uint32_t u = kPoison;
    memcpy(p, &u, 4);
}
inline void wg_complete(const wg_op &op)
{
    fiber &f = self();
    if (op.a) {
        for (int i = 0; i < 4; i++)
            if (op.a[i] != op.a_bits[i]) {
                hazard("an A fragment (registers) changed before its wgmma completed");
                break;
            }
    }
    for (const smem_read &r : op.reads) {
        uint16_t b;
        memcpy(&b, g_smem + r.addr, 2);
        if (b != r.bits) {
            hazard("shared memory a wgmma read changed before the wgmma completed");
            break;
        }
    }
    for (const auto &o : op.out) {
        auto it = f.wg_inflight.find(o.first);
        if (bits_of(*o.first) != it->second.held)
            hazard("an accumulator was written while its wgmma was in flight");
        *o.first = o.second;
        if (it->second.seq == op.seq)
            f.wg_inflight.erase(it);
        else
            it->second.held = bits_of(o.second);
    }
}
inline void wg_commit()
{
    self().wg.commit();
}
inline void wg_wait(size_t n)
{
    self().wg.wait(n, wg_complete);
}
/* a thread's end: what it never waited for is dropped (its accumulators are out of scope; a
 * result stored before its wait stored the NaN) */
inline void wg_finish()
{
    self().wg = async_groups<wg_op>();
    self().wg_inflight.clear();
}

/* d[N/8][4] (= or +=) A B over k < 16 for this thread's accumulator elements: A (64 x 16)
 * K-major through da, B (N x 16) K-major through db. */
template <typename T, int N> void wg_ss(float (*d)[4], uint64_t da, uint64_t db, int scale_d)
{
    check_desc(da);
    check_desc(db);
    unsigned t = flat_tid() & 127;
    int warp = t >> 5, gr = (t & 31) >> 2, tq = t & 3;
    wg_op op;
    op.seq = ++self().wg_seq;
    wg_reads() = &op.reads;
    float av[2][16], bv[N / 8][2][16]; /* the thread's two rows of A, its columns of B */
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++)
            av[h][k] = kmajor<T>(da, warp * 16 + gr + 8 * h, k);
    for (int nb = 0; nb < N / 8; nb++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 16; k++)
                bv[nb][c][k] = kmajor<T>(db, nb * 8 + 2 * tq + c, k);
    wg_reads() = nullptr;
    for (int nb = 0; nb < N / 8; nb++)
        for (int e = 0; e < 4; e++) {
            float acc = scale_d ? wg_in(&d[nb][e]) : 0.0f;
            for (int k = 0; k < 16; k++)
                acc += av[e >> 1][k] * bv[nb][e & 1][k];
            wg_out(op, &d[nb][e], acc);
        }
    self().wg.open.push_back(std::move(op));
}
/* The same with A from registers (fragments a[4] of each lane: rows g, g + 8, columns 2t,
 * 2t + 1 and 8 more) and B through db: transposed (16 x N, kTransB) or K-major (N x 16). */
template <typename T, int N, bool kTransB>
void wg_rs_any(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    check_desc(db);
    const uint32_t *all = warp_exchange(a, 4);
    unsigned t = flat_tid() & 127;
    int gr = (t & 31) >> 2, tq = t & 3;
    float arow[2][16];
    for (int q = 0; q < 4; q++) /* lane gr * 4 + q holds columns 2q, 2q + 1, 2q + 8, 2q + 9 */
        for (int h = 0; h < 2; h++) {
            const uint32_t *f = all + kSlot * (gr * 4 + q);
            arow[h][2 * q] = half_of<T>(f[h], 0);
            arow[h][2 * q + 1] = half_of<T>(f[h], 1);
            arow[h][2 * q + 8] = half_of<T>(f[2 + h], 0);
            arow[h][2 * q + 9] = half_of<T>(f[2 + h], 1);
        }
    wg_op op;
    op.seq = ++self().wg_seq;
    op.a = a;
    memcpy(op.a_bits, a, sizeof op.a_bits);
    wg_reads() = &op.reads;
    float bv[N / 8][2][16]; /* the thread's columns of B */
    for (int nb = 0; nb < N / 8; nb++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 16; k++)
                bv[nb][c][k] = kTransB ? mnmajor<T>(db, k, nb * 8 + 2 * tq + c)
                                       : kmajor<T>(db, nb * 8 + 2 * tq + c, k);
    wg_reads() = nullptr;
    for (int nb = 0; nb < N / 8; nb++)
        for (int e = 0; e < 4; e++) {
            float acc = scale_d ? wg_in(&d[nb][e]) : 0.0f;
            for (int k = 0; k < 16; k++)
                acc += arow[e >> 1][k] * bv[nb][e & 1][k];
            wg_out(op, &d[nb][e], acc);
        }
    self().wg.open.push_back(std::move(op));
}
template <typename T, int N> void wg_rs(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    wg_rs_any<T, N, true>(d, a, db, scale_d);
}
template <typename T, int N>
void wg_rs_k(float (*d)[4], const uint32_t *a, uint64_t db, int scale_d)
{
    wg_rs_any<T, N, false>(d, a, db, scale_d);
}

/* mma.sync m16n8k16 (row.col, FP32 accumulation): c[4] += A B for this lane's elements, the
 * warp's fragments exchanged (A rows g, g + 8 and columns 2t, 2t + 1, + 8; B columns (n) g,
 * rows 2t, 2t + 1, + 8; C rows g, g + 8, columns 2t, 2t + 1). */
template <typename T> void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const uint32_t *all = warp_exchange(mine, 6);
    int lane = flat_tid() & 31, g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 16; k++) {
            const uint32_t *fa = all + kSlot * ((row & 7) * 4 + ((k & 7) >> 1));
            const uint32_t *fb = all + kSlot * (col * 4 + ((k & 7) >> 1));
            acc += half_of<T>(fa[(row >> 3) + 2 * (k >> 3)], k & 1) *
                   half_of<T>(fb[4 + (k >> 3)], k & 1);
        }
        c[e] = acc;
    }
}

/* mma.sync m16n8k8 with TF32 operands (row.col, FP32 accumulation): c[4] += A B; A rows g,
 * g + 8 and columns t, t + 4 (a[0] (g, t), a[1] (g + 8, t), a[2] (g, t + 4), a[3] (g + 8,
 * t + 4)), B rows t, t + 4 of column g, C as m16n8k16's. The operands' low 13 bits are
 * ignored, as the tensor cores read a TF32 register. */
inline void mma1688_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    const uint32_t *all = warp_exchange(mine, 6);
    int lane = flat_tid() & 31, g = lane >> 2, t = lane & 3;
    auto val = [](uint32_t bits) { return __uint_as_float(bits & 0xffffe000u); };
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 8; k++) {
            const uint32_t *fa = all + kSlot * ((row & 7) * 4 + (k & 3));
            const uint32_t *fb = all + kSlot * (col * 4 + (k & 3));
            acc += val(fa[(row >> 3) + 2 * (k >> 2)]) * val(fb[4 + (k >> 2)]);
        }
        c[e] = acc;
    }
}
/* cvt.rna.tf32.f32 (finite x): to 10 fraction bits, to nearest, ties away from zero. */
inline uint32_t cvt_rna_tf32(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (b + 0x1000u) & 0xffffe000u;
}

/* ldmatrix .x4 (.trans): lane l gives the address of row l % 8 of matrix l / 8; r[i] of lane l
 * is matrix i's row l / 4, columns 2 (l % 4), + 1 (transposed: rows 2 (l % 4), + 1 of column
 * l / 4), two 16-bit values, the first in the low half. */
template <bool kTrans> void ldsm(uint32_t r[4], const void *p)
{
    uint32_t mine[2];
    memcpy(mine, &p, sizeof p);
    const uint32_t *all = warp_exchange(mine, 2);
    int lane = flat_tid() & 31;
    for (int i = 0; i < 4; i++) {
        uint16_t h[2];
        for (int j = 0; j < 2; j++) {
            int row = kTrans ? 2 * (lane & 3) + j : lane >> 2;
            int col = kTrans ? lane >> 2 : 2 * (lane & 3) + j;
            const unsigned char *base;
            memcpy(&base, all + kSlot * (8 * i + row), sizeof base);
            memcpy(&h[j], base + 2 * col, 2);
        }
        r[i] = static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
    }
}

/* the stack of fiber i, kept from block to block */
inline char *fiber_stack(unsigned i, size_t size)
{
    static std::vector<std::vector<char>> pool;
    while (pool.size() <= i)
        pool.emplace_back(size);
    return pool[i].data();
}

inline void trampoline();
/* f ready to run trampoline on stack st, back to link when it returns (not inlined: the
 * caller's locals stay clear of getcontext) */
__attribute__((noinline)) inline void make_fiber(fiber &f, char *st, size_t size, ucontext_t *link)
{
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = st;
    f.ctx.uc_stack.ss_size = size;
    f.ctx.uc_link = link;
    makecontext(&f.ctx, trampoline, 0);
}

inline void trampoline()
{
    block_rt *r = rt();
    r->body();
    cp_land_all();
    wg_finish();
    r->f[r->cur].done = true;
}

/* Runs kernel(args...) over grid x block threads (block.x * block.y * block.z <= 1024), the
 * blocks one after another, the shared memory zeroed before each. Returns false (and says
 * where) when the threads of a block wait for one another for ever. */
template <typename K, typename... A> bool launch(uint3e grid, uint3e block, K kernel, A... args)
{
    const size_t kStack = 256 * 1024;
    g_grid = grid;
    g_dim = block;
    unsigned n = block.x * block.y * block.z, h0 = hazards();
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                g_block = uint3e{bx, by, bz};
                /* every byte a NaN of both 16-bit types: a read of shared memory no thread
                 * wrote shows in the results */
                memset(fl::smraw, 0xFF, sizeof fl::smraw);
                memset(fl::wg::smraw, 0xFF, sizeof fl::wg::smraw);
                block_rt r;
                r.nthreads = n;
                r.f.resize(n);
                r.warp.resize((n + 31) / 32);
                r.slot.assign(2 * kSlot * n, 0);
                r.landed.assign(kSmem / 16, 0);
                r.lander.assign(kSmem / 16, 0);
                r.fenced.assign(n, 0);
                r.body = [&] { kernel(args...); };
                rt() = &r;
                for (unsigned i = 0; i < n; i++) {
                    fiber &f = r.f[i];
                    f.tid = uint3e{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
                    make_fiber(f, fiber_stack(i, kStack), kStack, &r.sched);
                }
                unsigned left = n;
                while (left) { /* a pass: every thread not waiting runs until it waits or ends */
                    bool ran = false;
                    left = 0;
                    for (unsigned i = 0; i < n; i++) {
                        fiber &f = r.f[i];
                        if (f.done)
                            continue;
                        if (!f.watch || *f.watch != f.watch_val) {
                            r.cur = i;
                            swapcontext(&r.sched, &f.ctx);
                            ran = true;
                        }
                        left += !f.done;
                    }
                    if (left && !ran) {
                        fprintf(stderr,
                                "qc_emu: block (%u, %u, %u): %u threads wait for ever (a barrier "
                                "or an mbarrier that no thread completes)\n",
                                bx, by, bz, left);
                        rt() = nullptr;
                        return false;
                    }
                }
                rt() = nullptr;
                if (hazards() != h0)
                    return false;
            }
    return true;
}

inline void hazard(const char *what)
{
    if (hazards()++ < 8) {
        const uint3e &t = thread_idx();
        fprintf(stderr, "qc_emu: block (%u, %u, %u) thread %u: %s\n", g_block.x, g_block.y,
                g_block.z, t.x + g_dim.x * (t.y + g_dim.y * t.z), what);
    }
}

} // namespace emu
} // namespace qc

#define threadIdx (::qc::emu::thread_idx())
#define blockIdx  (::qc::emu::g_block)
#define gridDim   (::qc::emu::g_grid)
#define blockDim  (::qc::emu::g_dim)

inline void __syncthreads()
{
    qc::emu::syncthreads();
}
template <typename V> inline V __shfl_xor_sync(unsigned, V v, int m)
{
    return qc::emu::shfl(v, static_cast<int>(threadIdx.x & 31) ^ m);
}
template <typename V> inline V __shfl_sync(unsigned, V v, int src)
{
    return qc::emu::shfl(v, src);
}
template <typename V> inline V __shfl_down_sync(unsigned, V v, int delta)
{
    int l = static_cast<int>(threadIdx.x & 31);
    return qc::emu::shfl(v, l + delta < 32 ? l + delta : l);
}
template <typename V> inline V __shfl_up_sync(unsigned, V v, int delta)
{
    int l = static_cast<int>(threadIdx.x & 31);
    return qc::emu::shfl(v, l >= delta ? l - delta : l);
}
inline void __syncwarp()
{
    qc::emu::warp_sync();
}
inline int __any_sync(unsigned, int pred)
{
    uint32_t w = pred != 0;
    const uint32_t *all = qc::emu::warp_exchange(&w, 1);
    int any = 0;
    for (int l = 0; l < 32; l++)
        any |= all[qc::emu::kSlot * l] != 0;
    return any;
}
inline int atomicOr(int *p, int v)
{
    int old = *p;
    *p |= v;
    return old;
}

#endif
