/* check_arith.cu: checks, on the CPU, the scalar arithmetic the CUDA kernels use
 * (cuda/qc_device.cuh: FP8 encoders, tensorwise/block scale, MXFP8 scale rules and
 * multipliers) against the reference library on sampled and special FP32 inputs. Needs no
 * GPU, so CI runs it; it links libqspec (the plugin itself never does). Prints each
 * mismatch in hex; exit status 0 when everything agrees. Argument: the sample stride.
 * The format encoder/decoder and dequantization checks are in cuda/check_format.cuh; the
 * axiswise quantizers' (which also run the kernels of cuda/qc_axiswise.cu when a GPU is
 * present) in cuda/check_axiswise.cuh. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_axiswise.cuh"
#include "check_format.cuh"
#include "check_nvfp4.cuh"
#include "qc_device.cuh"
#include "qspec/recipe.h"

namespace
{

long g_bad = 0;

void report(const char *what, uint32_t x, uint32_t want, uint32_t got)
{
    if (g_bad++ < 20)
        printf("FAIL %s x=0x%08x ref=0x%08x cuda=0x%08x\n", what, x, want, got);
}

/* Every stride-th FP32 bit pattern, plus the specials and the binade edges. */
template <typename F> void for_samples(uint64_t stride, F f)
{
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                       0x7FC00000u, 0xFFC00000u, 0x7F7FFFFFu, 0x00000001u,
                                       0x00400000u, 0x007FFFFFu, 0x43E00000u, 0x43E80000u};
    for (uint32_t s : special)
        f(s);
    for (uint64_t u = 0; u < (1ull << 32); u += stride)
        f(static_cast<uint32_t>(u));
}

void check_encoders(uint64_t stride)
{
    for_samples(stride, [](uint32_t b) {
        float v = qc::from_bits(b);
        bool fin = (b & 0x7F800000u) != 0x7F800000u;
        uint32_t r4 = qs_encode_e4m3(v, QS_OVF_SATFINITE), r5 = qs_encode_e5m2(v, QS_OVF_SATFINITE);
        if (qc::enc_sat<0>(v) != r4)
            report("enc_sat e4m3", b, r4, qc::enc_sat<0>(v));
        if (qc::enc_sat<1>(v) != r5)
            report("enc_sat e5m2", b, r5, qc::enc_sat<1>(v));
        uint32_t o4 = fin ? r4 : qs_encode_e4m3(v, QS_OVF_NOSAT);
        uint32_t o5 = fin ? r5 : qs_encode_e5m2(v, QS_OVF_NOSAT);
        if (qc::enc_ocp<0>(v) != o4)
            report("enc_ocp e4m3", b, o4, qc::enc_ocp<0>(v));
        if (qc::enc_ocp<1>(v) != o5)
            report("enc_ocp e5m2", b, o5, qc::enc_ocp<1>(v));
    });
}

void check_scales(uint64_t stride)
{
    static const float eps[] = {0.0f, 1e-12f, 1.0f};
    for_samples(stride, [](uint32_t b) {
        float a = qc::from_bits(b & 0x7FFFFFFFu);
        for (float e : eps)
            for (int pow2 = 0; pow2 < 2; pow2++)
                for (float fmax : {448.0f, 57344.0f}) {
                    float want = qs_scale_from_amax(a, fmax, e, pow2, 65504.0f);
                    float got = qc::scale_from_amax(a, fmax, e, pow2, 65504.0f);
                    if (qc::bits_of(want) != qc::bits_of(got))
                        report("scale_from_amax", b, qc::bits_of(want), qc::bits_of(got));
                }
    });
}

/* One 1x32 block [a, -a/3, a*2^-20, 0...] through the reference MXFP8 quantizer, compared
 * with the scale code and element codes the kernel computes. */
void check_mx_block(qs_ctx *ctx, qs_quantizer *q, float a, int e5, int ocp)
{
    qs_tensor x;
    int64_t shape[2] = {1, 32};
    if (qs_tensor_alloc(ctx, &x, QS_FP32, 2, shape) != QS_OK)
        exit(2);
    float *v = static_cast<float *>(x.data);
    for (int i = 0; i < 32; i++)
        v[i] = 0.0f;
    v[0] = a;
    v[1] = -a / 3.0f;
    v[2] = a * 0x1p-20f;
    qs_quantized z;
    if (qs_quantize(ctx, q, &x, &z) != QS_OK)
        exit(2);
    float amax = qc::from_bits(qc::abs_bits(a));
    uint32_t e = ocp ? (e5 ? qc::scale_ocp<1>(amax) : qc::scale_ocp<0>(amax))
                     : (e5 ? qc::scale_te<1>(amax) : qc::scale_te<0>(amax));
    uint32_t want = static_cast<const uint8_t *>(z.scale[QS_DIR_ROW].data)[0];
    if (want != e)
        report(ocp ? "mx scale ocp" : "mx scale te", qc::bits_of(a), want, e);
    for (int i = 0; i < 3; i++) {
        float p = qc::mul_rn(v[i], ocp ? qc::mx_multiplier(e) : qc::mx_multiplier_te(e));
        uint32_t got = ocp ? (e5 ? qc::enc_ocp<1>(p) : qc::enc_ocp<0>(p))
                           : (e5 ? qc::enc_sat<1>(p) : qc::enc_sat<0>(p));
        uint32_t w = static_cast<const uint8_t *>(z.data[QS_DIR_ROW].data)[i];
        if (w != got)
            report("mx element", qc::bits_of(v[i]), w, got);
    }
    qs_quantized_free(&z);
    qs_tensor_free(&x);
}

void check_mx(uint64_t stride)
{
    qs_ctx *ctx = qs_ctx_new();
    for (int e5 = 0; e5 < 2; e5++)
        for (int ocp = 0; ocp < 2; ocp++) {
            qs_recipe_config cfg;
            qs_quantizer q;
            if (qs_recipe_config_default(ctx, &cfg, QS_RECIPE_MXFP8, QS_ROLE_INPUT) != QS_OK)
                exit(2);
            cfg.columnwise = 0;
            cfg.mx_elem = e5 ? QS_E5M2 : QS_E4M3;
            cfg.mx_rule = ocp ? QS_MX_RULE_OCP : QS_MX_RULE_TE;
            if (qs_quantizer_init(ctx, &q, &cfg) != QS_OK)
                exit(2);
            for_samples(stride, [&](uint32_t b) {
                if ((b & 0x7FFFFFFFu) <= 0x7F800000u) /* NaN amax cannot occur */
                    check_mx_block(ctx, &q, qc::from_bits(b), e5, ocp);
            });
            qs_quantizer_free(&q);
        }
    qs_ctx_free(ctx);
}

} // namespace

int main(int argc, char **argv)
{
    uint64_t stride = argc > 1 ? strtoull(argv[1], nullptr, 0) : 65521;
    if (stride == 0)
        stride = 1;
    check_encoders(stride);
    check_scales(stride * 4 + 1);
    check_mx(stride * 16 + 1);
    g_bad += qc_check_formats(); /* cuda/check_format.cuh: cast, decode, dequantize */
    /* cuda/check_nvfp4.cuh: the NVFP4 quantizers */
    g_bad += qc_check_nvfp4(stride);
    /* cuda/check_axiswise.cuh: torchao's rowwise recipes */
    g_bad += qc_check_axiswise(stride * 4 + 1);
    printf("check_arith: stride %llu, %ld mismatches\n", (unsigned long long)stride, g_bad);
    return g_bad == 0 ? 0 : 1;
}
