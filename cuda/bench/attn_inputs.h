/* attn_inputs.h: what the small-case attention checks share, on the GPU
 * (cuda/bench/attn_bench.cu) and on the CPU emulator (tests/flash_emu.cc): the cases and
 * their slot parameters, random inputs rounded to the dtype (each program drawing from its
 * own xorshift64 stream), and the excess of a result over the tolerance of [ATTN-TOL]. Host
 * code only. */
#ifndef QC_ATTN_INPUTS_H
#define QC_ATTN_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "qspec/attn_params.h"
#include "qspec/format.h"
#include "qspec/mathf.h"
#include "qspec/tensor.h"

namespace qc
{
namespace check
{

/* A xorshift64 stream of roughly normal values. */
struct rng {
    uint64_t s;

    /* the sum of four uniforms on [0, 1) (24 bits each), centred and scaled to variance 1 */
    float gauss()
    {
        float sum = 0.0f;
        for (int i = 0; i < 4; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            sum += static_cast<float>((s >> 40) & 0xFFFFFF) * 0x1p-24f;
        }
        return (sum - 2.0f) * 1.7320508f;
    }
    /* n values of gauss() rounded to dt (BF16 or FP16) */
    std::vector<float> randn(size_t n, qs_dtype dt)
    {
        std::vector<float> v(n);
        for (auto &x : v)
            x = dt == QS_BF16 ? qs_round_bf16(gauss()) : qs_round_f16(gauss());
        return v;
    }
};

/* A small case: its layout, mask and extents; thd sequences by cu_seqlens. */
struct small_case {
    const char *name;
    int layout, mask;
    int64_t b, sq, sk, h, hkv, d, dv;
    std::vector<int32_t> cu;  /* thd: the queries' cu_seqlens, and the keys' unless cuk is set */
    std::vector<int32_t> cuk; /* thd: the keys' cu_seqlens when they differ */
};

/* The slot parameters of a case at dtype dt (scale 1/sqrt(d)). */
inline qs_sdpa_params case_params(const small_case &c, qs_dtype dt)
{
    qs_sdpa_params p;
    memset(&p, 0, sizeof p);
    p.layout = (qs_attn_layout)c.layout;
    p.mask = (qs_attn_mask)c.mask;
    p.b = c.b;
    p.sq = c.sq;
    p.sk = c.sk;
    p.h = c.h;
    p.hkv = c.hkv;
    p.d = c.d;
    p.dv = c.dv;
    p.dtype = dt;
    p.scale = qs_rsqrtf((float)c.d);
    if (c.layout == QS_ATTN_THD) {
        p.cu_seqlens_q = c.cu.data();
        p.cu_seqlens_kv = c.cuk.empty() ? c.cu.data() : c.cuk.data();
    }
    return p;
}

/* The largest |x - r| / (atol + rtol |r|) of [ATTN-TOL] over the elements (atol 1e-5; above 1:
 * outside; NaN counts as outside). */
inline double excess(const std::vector<float> &x, const std::vector<float> &r, double rtol)
{
    double worst = 0.0;
    for (size_t e = 0; e < x.size(); e++) {
        double t = fabs((double)x[e] - r[e]) / (1e-5 + rtol * fabs((double)r[e]));
        if (!(t <= worst))
            worst = t;
    }
    return worst;
}

} // namespace check
} // namespace qc

#endif
