/* check_axiswise.cuh: the axiswise part of cuda/check_arith.cu — torchao's rowwise and
 * rowwise_with_gw_hp (spec/recipes.md section 8) in the CUDA plugin against libqspec, bitwise:
 *  - the scale rule of cuda/qc_axiswise.cuh against qs_axiswise_scale_from_amax on every
 *    stride-th non-negative FP32 amax, the specials and the neighbourhood of 1e-12, both
 *    element formats, pow2 on and off;
 *  - the high-precision copy's values against qs_bf16_to_f32 / qs_f16_to_f32 on all 2^16
 *    patterns;
 *  - whole tensors against qs_quantize: a host model that walks the groups as the kernels
 *    do with the same qc::ax functions, for both recipes, every role, input dtype, format
 *    option, pow2 and copy selection, on shapes from 1x1 up with NaN, Inf, -0, zero rows and
 *    columns, values below 1e-12 and near FLT_MAX; every data and scale byte and the amax,
 *    global_enc and global_dec each copy records (qc::ax::fields_of, as the plugin's slot
 *    fills them);
 *  - when a CUDA device is present, the same tensors through the kernels (qc_axiswise of
 *    cuda/qc_axiswise.cu) against qs_quantize, plus larger shapes.
 * qc_check_axiswise(stride) returns the number of mismatches. */
#ifndef QC_CHECK_AXISWISE_CUH
#define QC_CHECK_AXISWISE_CUH

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "check_util.cuh"

#include "qc_axiswise.cuh"
#include "qspec/format.h"
#include "qspec/recipe.h"

namespace qc_check_ax
{

long g_fail = 0;

void fail(const char *what, const char *ctx, uint64_t x, uint32_t want, uint32_t got)
{
    qc_check_report(&g_fail, "axiswise", what, ctx, x, want, got);
}

uint64_t g_rng = 0x452821E638D01377ull;
uint64_t next_u64()
{
    return qc_check_splitmix(&g_rng);
}
float next_unit()
{
    return static_cast<float>(next_u64() >> 40) * 0x1p-24f;
}

/* ---------------------------------------------------------------- scalar rules */

void check_scale_one(uint32_t b)
{
    float a = qc::from_bits(b);
    for (int e5 = 0; e5 < 2; e5++)
        for (int pow2 = 0; pow2 < 2; pow2++) {
            float fmax = e5 ? 57344.0f : 448.0f;
            uint32_t want = qc::bits_of(qs_axiswise_scale_from_amax(a, fmax, pow2));
            uint32_t got = qc::bits_of(qc::ax::scale_from_amax(a, fmax, pow2));
            if (want != got)
                fail(pow2 ? "scale pow2" : "scale", e5 ? "e5m2" : "e4m3", b, want, got);
        }
}

/* [REC-AX-SCALE] [REC-AX-POW2] on non-negative amaxes (a group's amax is never negative,
 * and a NaN amax is the quiet NaN). */
void check_scales(uint64_t stride)
{
    static const uint32_t special[] = {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,
                                       0x3F800000u, 0x43E00000u, 0x43E08000u, 0x47600000u,
                                       0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x3FE00001u};
    for (uint32_t s : special)
        check_scale_one(s);
    uint32_t eps = qc::bits_of(1e-12f); /* fl32(1e-12) lies on one side of the binary64 eps */
    for (uint32_t d = 0; d < 64; d++)
        check_scale_one(eps - 32 + d);
    for (uint64_t b = 0; b <= 0x7F800000ull; b += stride)
        check_scale_one(static_cast<uint32_t>(b));
}

/* [REC-AX-GWHP]: the FP32 values of every BF16 and FP16 pattern. */
void check_hp_values()
{
    for (uint32_t h = 0; h < 65536u; h++) {
        uint32_t wb = qc::bits_of(qs_bf16_to_f32(static_cast<uint16_t>(h)));
        uint32_t wf = qc::bits_of(qs_f16_to_f32(static_cast<uint16_t>(h)));
        if (qc::ax::hp_bits<QC_IN_BF16>(h) != wb)
            fail("hp value", "bf16", h, wb, qc::ax::hp_bits<QC_IN_BF16>(h));
        if (qc::ax::hp_bits<QC_IN_FP16>(h) != wf)
            fail("hp value", "fp16", h, wf, qc::ax::hp_bits<QC_IN_FP16>(h));
    }
}

/* ---------------------------------------------------------------- whole tensors */

/* What the plugin hands back for one quantization: every copy's data and scale bytes and
 * its amax, global_enc and global_dec. */
struct result {
    std::vector<uint8_t> data[2], scale[2];
    float amax[2], enc[2], dec[2];
};

int in_kind(qs_dtype dt)
{
    return dt == QS_FP32 ? QC_IN_FP32 : (dt == QS_BF16 ? QC_IN_BF16 : QC_IN_FP16);
}

uint32_t raw_at(const qs_tensor &x, size_t i)
{
    if (x.dtype == QS_FP32)
        return static_cast<const uint32_t *>(x.data)[i];
    return static_cast<const uint16_t *>(x.data)[i];
}

void put_f32(std::vector<uint8_t> &v, size_t i, float f)
{
    memcpy(v.data() + 4 * i, &f, 4);
}

/* The kernels' walk on the host: for each copy, each group's amax (mag_bits folded by an
 * unsigned maximum), its scale, its scale_inv and its codes; the tensorwise copy from the
 * tensor's amax; the high-precision copy as hp_bits; then fields_of as the slot does. */
template <int DT, int E5>
void run_model(const qs_recipe_config &cfg, const qs_tensor &x, result &mo)
{
    int64_t M = x.shape[0], K = x.shape[1];
    float fmax = qc::ax::fp8_max<E5>();
    auto value = [&](int64_t m, int64_t k) {
        return qc::from_bits(qc::ax::hp_bits<DT>(raw_at(x, static_cast<size_t>(m * K + k))));
    };
    const int want[2] = {cfg.rowwise, cfg.columnwise};
    for (int d = 0; d < 2; d++) {
        mo.data[d].clear();
        mo.scale[d].clear();
        mo.amax[d] = mo.enc[d] = mo.dec[d] = 0.0f;
        if (!want[d])
            continue;
        int kind =
            qc::ax::copy_kind(cfg.kind == QS_RECIPE_ROWWISE_GW_HP, cfg.role == QS_ROLE_WEIGHT, d);
        int64_t R = d ? K : M, L = d ? M : K; /* the copy is [R, L] */
        auto at = [&](int64_t r, int64_t c) { return d ? value(c, r) : value(r, c); };
        mo.data[d].resize(static_cast<size_t>(R * L) * (kind == QC_AX_HP ? 4 : 1));
        mo.scale[d].resize(4 * static_cast<size_t>(kind == QC_AX_ROWS ? R : 1));
        uint32_t tensor_mag = 0;
        for (int64_t r = 0; kind == QC_AX_TENSOR && r < R; r++)
            for (int64_t c = 0; c < L; c++)
                tensor_mag = std::max(tensor_mag, qc::ax::mag_bits(at(r, c)));
        for (int64_t r = 0; r < R; r++) {
            uint32_t mag = tensor_mag;
            for (int64_t c = 0; kind == QC_AX_ROWS && c < L; c++)
                mag = std::max(mag, qc::ax::mag_bits(at(r, c)));
            float s = qc::ax::scale_from_amax(qc::ax::amax_of(mag), fmax, cfg.pow2);
            if (kind == QC_AX_ROWS)
                put_f32(mo.scale[d], static_cast<size_t>(r), qc::ax::scale_inv(s));
            for (int64_t c = 0; c < L; c++) {
                size_t i = static_cast<size_t>(r * L + c);
                if (kind == QC_AX_HP)
                    put_f32(mo.data[d], i, at(r, c));
                else
                    mo.data[d][i] = qc::ax::encode<E5>(at(r, c), s);
            }
        }
        qc::ax::copy_fields f = qc::ax::fields_of(kind, tensor_mag, fmax, cfg.pow2);
        if (kind != QC_AX_ROWS)
            put_f32(mo.scale[d], 0, f.scale0);
        mo.amax[d] = f.amax;
        mo.enc[d] = f.enc;
        mo.dec[d] = f.dec;
    }
}

void model(const qs_recipe_config &cfg, const qs_tensor &x, int e5, result &mo)
{
    switch (in_kind(x.dtype) * 2 + e5) {
    case QC_IN_FP32 * 2:
        return run_model<QC_IN_FP32, 0>(cfg, x, mo);
    case QC_IN_FP32 * 2 + 1:
        return run_model<QC_IN_FP32, 1>(cfg, x, mo);
    case QC_IN_BF16 * 2:
        return run_model<QC_IN_BF16, 0>(cfg, x, mo);
    case QC_IN_BF16 * 2 + 1:
        return run_model<QC_IN_BF16, 1>(cfg, x, mo);
    case QC_IN_FP16 * 2:
        return run_model<QC_IN_FP16, 0>(cfg, x, mo);
    default:
        return run_model<QC_IN_FP16, 1>(cfg, x, mo);
    }
}

/* The kernels on the device, as the plugin's slot runs them (cuda/qc_slots.cu
 * run_axiswise); false when a CUDA call failed. */
bool device_run(const qs_recipe_config &cfg, const qs_tensor &x, int e5, result &got)
{
    int64_t M = x.shape[0], K = x.shape[1];
    size_t n = static_cast<size_t>(M * K);
    int kinds[2];
    for (int d = 0; d < 2; d++)
        kinds[d] =
            qc::ax::copy_kind(cfg.kind == QS_RECIPE_ROWWISE_GW_HP, cfg.role == QS_ROLE_WEIGHT, d);
    qc_dev_buf dx, data[2], scale[2], mag;
    const int want[2] = {cfg.rowwise, cfg.columnwise};
    cudaError_t err = dx.alloc(x.nbytes);
    if (err == cudaSuccess)
        err = cudaMemcpy(dx.p, x.data, x.nbytes, cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = mag.alloc(4);
    for (int d = 0; d < 2 && err == cudaSuccess; d++) {
        got.data[d].clear();
        got.scale[d].clear();
        got.amax[d] = got.enc[d] = got.dec[d] = 0.0f;
        if (!want[d])
            continue;
        got.data[d].resize(n * (kinds[d] == QC_AX_HP ? 4 : 1));
        got.scale[d].resize(4 * static_cast<size_t>(kinds[d] != QC_AX_ROWS ? 1 : (d ? K : M)));
        err = data[d].alloc(got.data[d].size());
        if (err == cudaSuccess)
            err = scale[d].alloc(got.scale[d].size());
    }
    qc_input in = {dx.p, in_kind(x.dtype), M, K};
    qc_axiswise_params p = {e5, cfg.pow2, kinds[1]};
    qc_copy row = {want[0] ? data[0].u8() : nullptr, scale[0].p};
    qc_copy col = {want[1] ? data[1].u8() : nullptr, scale[1].p};
    if (err == cudaSuccess)
        err = qc_axiswise(in, p, row, col, mag.u32());
    if (err == cudaSuccess)
        err = cudaDeviceSynchronize();
    uint32_t mag_bits = 0;
    if (err == cudaSuccess)
        err = cudaMemcpy(&mag_bits, mag.p, 4, cudaMemcpyDeviceToHost);
    for (int d = 0; d < 2 && err == cudaSuccess; d++) {
        if (!want[d])
            continue;
        err = cudaMemcpy(got.data[d].data(), data[d].p, got.data[d].size(), cudaMemcpyDeviceToHost);
        if (err == cudaSuccess && kinds[d] == QC_AX_ROWS)
            err = cudaMemcpy(got.scale[d].data(), scale[d].p, got.scale[d].size(),
                             cudaMemcpyDeviceToHost);
        qc::ax::copy_fields f =
            qc::ax::fields_of(kinds[d], d == 1 ? mag_bits : 0u, e5 ? 57344.0f : 448.0f, cfg.pow2);
        if (kinds[d] != QC_AX_ROWS)
            put_f32(got.scale[d], 0, f.scale0);
        got.amax[d] = f.amax;
        got.enc[d] = f.enc;
        got.dec[d] = f.dec;
    }
    if (err != cudaSuccess)
        printf("FAIL axiswise device: %s\n", cudaGetErrorString(err));
    return err == cudaSuccess;
}

/* Compares what the reference made (z) with mo byte by byte; who names mo's maker. */
void compare(const qs_quantized &z, const result &mo, const char *who, const char *desc)
{
    for (int d = 0; d < 2; d++) {
        const char *dn = d ? "col" : "row";
        const qs_tensor *t[2] = {&z.data[d], &z.scale[d]};
        const std::vector<uint8_t> *m[2] = {&mo.data[d], &mo.scale[d]};
        for (int s = 0; s < 2; s++) {
            size_t nb = t[s]->data ? t[s]->nbytes : 0;
            char w[240];
            snprintf(w, sizeof w, "%s %s %s: %s", who, dn, s ? "scale" : "data", desc);
            if (nb != m[s]->size()) {
                printf("FAIL axiswise %s: %zu bytes, %s %zu\n", w, nb, who, m[s]->size());
                g_fail++;
                continue;
            }
            const uint8_t *b = static_cast<const uint8_t *>(t[s]->data);
            for (size_t i = 0; i < nb; i++)
                if (b[i] != (*m[s])[i]) {
                    fail("byte", w, i, b[i], (*m[s])[i]);
                    break;
                }
        }
        const float rf[3] = {z.amax[d], z.global_enc[d], z.global_dec[d]};
        const float mf[3] = {mo.amax[d], mo.enc[d], mo.dec[d]};
        static const char *const names[3] = {"amax", "global_enc", "global_dec"};
        for (int s = 0; s < 3; s++)
            if (qc::bits_of(rf[s]) != qc::bits_of(mf[s])) {
                char w[240];
                snprintf(w, sizeof w, "%s %s %s: %s", who, dn, names[s], desc);
                fail("field", w, 0, qc::bits_of(rf[s]), qc::bits_of(mf[s]));
            }
    }
}

/* Input styles: 0 normal, 1 specials (NaN of either sign, +-Inf, -0, FLT_MAX, subnormals)
 * at random places, 2 a zero row and a zero column and values below 1e-12, 3 huge
 * (about 2^120), 4 each row and column of its own magnitude (2^-20 .. 2^20). */
float style_value(int style, int64_t m, int64_t k, int64_t zr, int64_t zc)
{
    float u = 2.0f * next_unit() - 1.0f;
    switch (style) {
    case 1: {
        static const uint32_t sp[] = {0x7FC00000u, 0xFFC00001u, 0x7F800000u, 0xFF800000u,
                                      0x80000000u, 0x7F7FFFFFu, 0x00000001u, 0x807FFFFFu};
        uint32_t r = static_cast<uint32_t>(next_u64() % 96);
        return r < 8 ? qc::from_bits(sp[r]) : ldexpf(u, static_cast<int>(next_u64() % 12) - 6);
    }
    case 2:
        if (m == zr || k == zc)
            return (m + k) % 2 ? -0.0f : 0.0f;
        return m % 3 == 0 ? u * 1e-13f : u;
    case 3:
        return ldexpf(u, 120 + static_cast<int>(next_u64() % 8));
    case 4:
        return ldexpf(u, static_cast<int>((m * 7 + k * 3) % 41) - 20);
    default:
        return ldexpf(u, static_cast<int>(next_u64() % 5) - 2);
    }
}

void fill_tensor(qs_ctx *ctx, qs_tensor &x, qs_dtype dt, int64_t M, int64_t K, int style)
{
    int64_t shape[2] = {M, K};
    if (qs_tensor_alloc(ctx, &x, dt, 2, shape) != QS_OK)
        exit(2);
    int64_t zr = static_cast<int64_t>(next_u64() % static_cast<uint64_t>(M));
    int64_t zc = static_cast<int64_t>(next_u64() % static_cast<uint64_t>(K));
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            size_t i = static_cast<size_t>(m * K + k);
            float v = style_value(style, m, k, zr, zc);
            if (dt == QS_FP32)
                static_cast<float *>(x.data)[i] = v;
            else if (dt == QS_BF16)
                static_cast<uint16_t *>(x.data)[i] = qs_f32_to_bf16(v);
            else
                static_cast<uint16_t *>(x.data)[i] = qs_f32_to_f16(v);
        }
}

/* The reference's quantization of x under cfg compared with the model and, when device is
 * set, with the kernels. */
void check_tensor(qs_ctx *ctx, const qs_recipe_config &cfg, const qs_tensor &x, bool device)
{
    char desc[200];
    snprintf(desc, sizeof desc, "%s %s %s %lldx%lld format=%d pow2=%d row=%d col=%d",
             qs_recipe_kind_name(cfg.kind), qs_tensor_role_name(cfg.role), qs_dtype_name(x.dtype),
             (long long)x.shape[0], (long long)x.shape[1], (int)cfg.format, cfg.pow2, cfg.rowwise,
             cfg.columnwise);
    qs_quantizer q;
    qs_quantized z;
    if (qs_quantizer_init(ctx, &q, &cfg) != QS_OK || qs_quantize(ctx, &q, &x, &z) != QS_OK) {
        printf("axiswise: reference quantization failed: %s: %s\n", desc, qs_ctx_errmsg(ctx));
        exit(2);
    }
    int e5 = z.elem == QS_E5M2;
    result r;
    model(cfg, x, e5, r);
    compare(z, r, "model", desc);
    if (device && device_run(cfg, x, e5, r))
        compare(z, r, "device", desc);
    else if (device)
        g_fail++;
    qs_quantized_free(&z);
    qs_quantizer_free(&q);
}

/* Every recipe, role, input dtype, format option, pow2 and copy selection over the shapes;
 * on the device also larger shapes (rows longer than a block, strips of many tiles). */
int check_tensors(qs_ctx *ctx, bool device)
{
    static const int64_t shapes[][2] = {{1, 1},   {1, 5},   {5, 1},   {3, 7},  {32, 32},
                                        {33, 70}, {40, 64}, {7, 300}, {65, 33}};
    static const int64_t large[][2] = {{300, 1000}, {1, 5000}, {5000, 3}, {257, 513}};
    static const qs_dtype dts[] = {QS_FP32, QS_BF16, QS_FP16};
    static const char *const formats[] = {"e4m3", "e5m2", "hybrid"};
    static const int copies[3][2] = {{1, 1}, {1, 0}, {0, 1}};
    int run = 0;
    for (int kind = QS_RECIPE_ROWWISE; kind <= QS_RECIPE_ROWWISE_GW_HP; kind++)
        for (int role = 0; role < QS_ROLE_COUNT; role++)
            for (qs_dtype dt : dts)
                for (const char *fmt : formats)
                    for (int pow2 = 0; pow2 < 2; pow2++)
                        for (const int *cp : copies) {
                            qs_recipe_config cfg;
                            if (qs_recipe_config_default(ctx, &cfg, (qs_recipe_kind)kind,
                                                         (qs_tensor_role)role) != QS_OK ||
                                qs_recipe_config_set(ctx, &cfg, "format", fmt) != QS_OK)
                                exit(2);
                            cfg.pow2 = pow2;
                            cfg.rowwise = cp[0];
                            cfg.columnwise = cp[1];
                            const int64_t *s = shapes[run % 9];
                            if (device && run % 7 == 0)
                                s = large[(run / 7) % 4];
                            qs_tensor x;
                            fill_tensor(ctx, x, dt, s[0], s[1], run % 5);
                            check_tensor(ctx, cfg, x, device);
                            qs_tensor_free(&x);
                            run++;
                        }
    return run;
}

} // namespace qc_check_ax

inline long qc_check_axiswise(uint64_t stride)
{
    using namespace qc_check_ax;
    qs_ctx *ctx = qs_ctx_new();
    clock_t t0 = clock();
    check_scales(stride);
    check_hp_values();
    bool device = qc_check_have_device();
    int runs = check_tensors(ctx, device);
    qs_ctx_free(ctx);
    printf("check_arith: axiswise: scale rule, hp values, %d whole tensors vs the model%s: %ld "
           "mismatches, %.1f s\n",
           runs, device ? " and the device" : " (no CUDA device: device half skipped)", g_fail,
           static_cast<double>(clock() - t0) / CLOCKS_PER_SEC);
    return g_fail;
}

#endif
