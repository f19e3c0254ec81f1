/* qc_slots.cu: the `cast` and `quantize` slots of the CUDA plugin — they copy the host
 * request to the device, launch the kernels of qc_kernels.h and copy every output tensor
 * the kit allocated back, filling amax/global_enc/global_dec as the reference does.
 * Requests the kernels do not implement (other formats or rounding modes) answer
 * QS_ERR_UNSUPPORTED; CUDA failures answer QS_ERR_INTERNAL (the plugin never prints). */
#include <float.h>
#include <string.h>

#include "qc_axiswise.cuh"
#include "qc_device.cuh"
#include "qc_nvfp4.cuh"
#include "qc_slots.h"

namespace {


int input_kind(qs_dtype dt)
{
    switch (dt) {
    case QS_FP32:
        return QC_IN_FP32;
    case QS_BF16:
        return QC_IN_BF16;
    case QS_FP16:
        return QC_IN_FP16;
    default:
        return -1;
    }
}

/* Device copies of the kit's output tensors of one quantization. */
struct dev_out {
    qc_dev_buf data[QS_DIR_COUNT], scale[QS_DIR_COUNT];

    cudaError_t alloc(const qs_quantized *z)
    {
        cudaError_t err = cudaSuccess;
        for (int d = 0; d < QS_DIR_COUNT && err == cudaSuccess; d++) {
            if (!z->data[d].data)
                continue;
            err = data[d].alloc(z->data[d].nbytes);
            if (err == cudaSuccess)
                err = scale[d].alloc(z->scale[d].nbytes);
        }
        return err;
    }
    qc_copy copy(int d)
    {
        return qc_copy{static_cast<uint8_t *>(data[d].p), scale[d].p};
    }
    /* Copies data (and scales unless tensorwise) back into z. */
    cudaError_t fetch(qs_quantized *z, int with_scales)
    {
        cudaError_t err = cudaDeviceSynchronize();
        for (int d = 0; d < QS_DIR_COUNT && err == cudaSuccess; d++) {
            if (!z->data[d].data)
                continue;
            err = cudaMemcpy(z->data[d].data, data[d].p, z->data[d].nbytes, cudaMemcpyDeviceToHost);
            if (err == cudaSuccess && with_scales)
                err = cudaMemcpy(z->scale[d].data, scale[d].p, z->scale[d].nbytes,
                                 cudaMemcpyDeviceToHost);
        }
        return err;
    }
};

/* [REC-CS-*] [REC-DS-QUANT]: amax on the device, codes with the scale, scale_inv = 1/scale. */
cudaError_t run_tensorwise(const qs_quantize_args *a, const qc_input &in, qs_quantized *z)
{
    dev_out out;
    qc_dev_buf amax;
    cudaError_t err = out.alloc(z);
    if (err == cudaSuccess)
        err = amax.alloc(sizeof(uint32_t));
    int current = a->cfg->kind == QS_RECIPE_CURRENT;
    if (err == cudaSuccess && current && a->given_amax) /* [DIST-GIVEN-AMAX] */
        err = cudaMemcpy(amax.p, a->given_amax, sizeof(uint32_t), cudaMemcpyHostToDevice);
    else if (err == cudaSuccess && current) /* delayed scaling takes the amax in its pass */
        err = qc_amax(in, static_cast<uint32_t *>(amax.p));
    qc_tw_params p = {z->elem == QS_E5M2, current, a->ds_scale, a->cfg->eps, a->cfg->pow2};
    if (err == cudaSuccess)
        err = qc_tensorwise(in, p, static_cast<uint32_t *>(amax.p), out.copy(0).data,
                            out.copy(1).data);
    uint32_t amax_bits = 0;
    if (err == cudaSuccess)
        err = out.fetch(z, 0);
    if (err == cudaSuccess)
        err = cudaMemcpy(&amax_bits, amax.p, sizeof amax_bits, cudaMemcpyDeviceToHost);
    float am = qc::from_bits(amax_bits);
    float fmax = z->elem == QS_E5M2 ? 57344.0f : 448.0f;
    float scale = current ? qc::scale_from_amax(am, fmax, p.eps, p.pow2, FLT_MAX) : a->ds_scale;
    float scale_inv = qc::div_rn(1.0f, scale);
    for (int d = 0; d < QS_DIR_COUNT && err == cudaSuccess; d++) {
        if (!z->data[d].data)
            continue;
        memcpy(z->scale[d].data, &scale_inv, sizeof scale_inv);
        z->amax[d] = am;
        z->global_enc[d] = scale;
        z->global_dec[d] = scale_inv;
    }
    return err;
}

/* [REC-BLK-INF]: the largest finite value of the input dtype. */
float value_for_inf(qs_dtype dt)
{
    if (dt == QS_BF16)
        return qc::from_bits(0x7F7F0000u);
    return dt == QS_FP16 ? 65504.0f : FLT_MAX;
}

cudaError_t run_blocked(const qs_quantize_args *a, const qc_input &in, qs_quantized *z)
{
    dev_out out;
    cudaError_t err = out.alloc(z);
    int e5 = z->elem == QS_E5M2;
    if (err == cudaSuccess && a->cfg->kind == QS_RECIPE_MXFP8) {
        err = qc_mxfp8(in, e5, a->cfg->mx_rule == QS_MX_RULE_OCP, out.copy(0), out.copy(1));
    } else if (err == cudaSuccess) {
        qc_block_params p = {e5, a->cfg->eps, a->cfg->pow2, value_for_inf(a->x->dtype)};
        err = a->cfg->tile_2d ? qc_block_2d(in, p, out.copy(0), out.copy(1))
                              : qc_block_1d(in, p, out.copy(0), out.copy(1));
    }
    if (err == cudaSuccess)
        err = out.fetch(z, 1);
    return err;
}

/* [REC-NV-*]: codes and scales on the device; the amax of each copy from the device, and
 * S_enc/S_dec (te) or pts (torchao) from it as the kernels computed them [REC-NV-GLOBAL]. */
cudaError_t run_nvfp4(const qs_quantize_args *a, const qc_input &in, qs_quantized *z)
{
    const qs_recipe_config *c = a->cfg;
    dev_out out;
    qc_dev_buf amax;
    cudaError_t err = out.alloc(z);
    if (err == cudaSuccess)
        err = amax.alloc(2 * sizeof(uint32_t));
    int torchao = c->nv_variant == QS_NV_TORCHAO;
    qc_nvfp4_params p = {torchao,   c->tile_2d, c->rht && c->columnwise, c->sr, c->seed, c->offset,
                         QC_NV_AMAX_MEASURE};
    if (err == cudaSuccess && a->given_amax) { /* [DIST-GIVEN-AMAX] */
        p.amax_mode = QC_NV_AMAX_GIVEN;
        err = cudaMemcpy(amax.p, a->given_amax, 2 * sizeof(uint32_t), cudaMemcpyHostToDevice);
    }
    if (err == cudaSuccess)
        err = qc_nvfp4(in, p, out.copy(0), out.copy(1), static_cast<uint32_t *>(amax.p));
    if (err == cudaSuccess)
        err = out.fetch(z, 1);
    uint32_t bits[2] = {0, 0};
    if (err == cudaSuccess)
        err = cudaMemcpy(bits, amax.p, sizeof bits, cudaMemcpyDeviceToHost);
    for (int d = 0; d < QS_DIR_COUNT && err == cudaSuccess; d++) {
        if (!z->data[d].data)
            continue;
        z->amax[d] = qc::nv::copy_amax(bits, c->tile_2d, d);
        qc::nv::global g = qc::nv::tensor_scale(torchao, z->amax[d]);
        z->global_enc[d] = g.enc;
        z->global_dec[d] = g.dec;
    }
    return err;
}

/* How copy d of an axiswise request is scaled, QC_AX_* [REC-AX-LAYOUT] [REC-AX-GWHP]. */
int ax_kind(const qs_recipe_config *c, int d)
{
    return qc::ax::copy_kind(c->kind == QS_RECIPE_ROWWISE_GW_HP, c->role == QS_ROLE_WEIGHT, d);
}

/* [REC-INPUT] [REC-AX-LAYOUT]: an [M, K] input with M, K >= 1, and for each copy the kit
 * allocated, data [M,K] or [K,M] of the element format (FP32 for the high-precision copy)
 * and an FP32 scale per row of the copy, or one in all. */
qs_status ax_request_ok(const qs_quantize_args *a)
{
    int64_t M = a->x->shape[0], K = a->x->shape[1];
    if (M < 1 || K < 1)
        return QS_ERR_SHAPE;
    for (int d = 0; d < QS_DIR_COUNT; d++) {
        const qs_tensor *data = &a->out->data[d], *scale = &a->out->scale[d];
        int kind = ax_kind(a->cfg, d);
        size_t n = static_cast<size_t>(M) * static_cast<size_t>(K);
        size_t nscale = kind != QC_AX_ROWS ? 1 : static_cast<size_t>(d == QS_DIR_ROW ? M : K);
        qs_dtype dt = kind == QC_AX_HP ? QS_FP32 : a->out->elem;
        if (data->data && (data->dtype != dt || data->numel != n || !scale->data ||
                           scale->dtype != QS_FP32 || scale->numel != nscale))
            return QS_ERR_INVALID_ARG;
    }
    return QS_OK;
}

/* [REC-AX-*]: codes and per-row scales on the device; the columnwise copy's one scale and
 * what every copy records besides its tensors (amax, global_enc, global_dec) from
 * qc::ax::fields_of, as ref/recipe_axiswise.c leaves them. */
cudaError_t run_axiswise(const qs_quantize_args *a, const qc_input &in, qs_quantized *z)
{
    const qs_recipe_config *c = a->cfg;
    int kinds[QS_DIR_COUNT] = {ax_kind(c, QS_DIR_ROW), ax_kind(c, QS_DIR_COL)};
    dev_out out;
    qc_dev_buf mag;
    cudaError_t err = out.alloc(z);
    if (err == cudaSuccess)
        err = mag.alloc(sizeof(uint32_t));
    int e5 = z->elem == QS_E5M2;
    qc_axiswise_params p = {e5, c->pow2, kinds[QS_DIR_COL]};
    if (err == cudaSuccess)
        err = qc_axiswise(in, p, out.copy(QS_DIR_ROW), out.copy(QS_DIR_COL), mag.u32());
    if (err == cudaSuccess)
        err = out.fetch(z, 1);
    uint32_t mag_bits = 0;
    if (err == cudaSuccess && z->data[QS_DIR_COL].data && kinds[QS_DIR_COL] == QC_AX_TENSOR)
        err = cudaMemcpy(&mag_bits, mag.p, sizeof mag_bits, cudaMemcpyDeviceToHost);
    for (int d = 0; d < QS_DIR_COUNT && err == cudaSuccess; d++) {
        if (!z->data[d].data)
            continue;
        qc::ax::copy_fields f =
            qc::ax::fields_of(kinds[d], mag_bits, e5 ? 57344.0f : 448.0f, c->pow2);
        if (kinds[d] != QC_AX_ROWS)
            memcpy(z->scale[d].data, &f.scale0, sizeof f.scale0);
        z->amax[d] = f.amax;
        z->global_enc[d] = f.enc;
        z->global_dec[d] = f.dec;
    }
    return err;
}

} // namespace

qs_status qc_slot_quantize(void *state, const qs_quantize_args *a)
{
    (void)state;
    const qs_tensor *x = a->x;
    qs_recipe_kind kind = a->cfg->kind;
    int dt = input_kind(x->dtype);
    if (dt < 0 || x->ndim != 2 || kind >= QS_RECIPE_COUNT)
        return QS_ERR_UNSUPPORTED;
    if (kind != QS_RECIPE_NVFP4 && a->out->elem != QS_E4M3 && a->out->elem != QS_E5M2)
        return QS_ERR_UNSUPPORTED;
    int axiswise = kind == QS_RECIPE_ROWWISE || kind == QS_RECIPE_ROWWISE_GW_HP;
    qs_status st = axiswise ? ax_request_ok(a) : QS_OK; /* torchao's recipes [REC-AX-*] */
    if (st != QS_OK)
        return st;
    if (kind == QS_RECIPE_NVFP4 && a->cfg->rht && a->cfg->columnwise) { /* [REC-NV-RHT] */
        if (x->dtype != QS_BF16)
            return QS_ERR_DTYPE;
        if (x->shape[0] % 16 != 0)
            return QS_ERR_SHAPE;
    }
    qc_dev_buf xd;
    cudaError_t err = xd.alloc(x->nbytes);
    if (err == cudaSuccess)
        err = cudaMemcpy(xd.p, x->data, x->nbytes, cudaMemcpyHostToDevice);
    qc_input in = {xd.p, dt, x->shape[0], x->shape[1]};
    if (err == cudaSuccess && kind == QS_RECIPE_NVFP4)
        err = run_nvfp4(a, in, a->out);
    else if (err == cudaSuccess && axiswise)
        err = run_axiswise(a, in, a->out);
    else if (err == cudaSuccess)
        err = kind == QS_RECIPE_DELAYED || kind == QS_RECIPE_CURRENT ? run_tensorwise(a, in, a->out)
                                                                     : run_blocked(a, in, a->out);
    return err == cudaSuccess ? QS_OK : QS_ERR_INTERNAL;
}

qs_status qc_slot_cast(void *state, const qs_cast_args *a)
{
    (void)state;
    /* [FMT-ENCODE] through cuda/qc_cast.cu, every rounding mode and overflow policy. The
     * ABI's out holds one byte per code, so formats wider than 8 bits are not taken. */
    if ((unsigned)a->mode.round >= QS_ROUND_COUNT || (unsigned)a->mode.overflow >= QS_OVF_COUNT)
        return QS_ERR_INVALID_ARG;
    switch (a->dtype) {
    case QS_E4M3:
    case QS_E5M2:
    case QS_E8M0:
    case QS_E2M1:
    case QS_E2M3:
    case QS_E3M2:
        break;
    default:
        return QS_ERR_UNSUPPORTED;
    }
    if (a->n == 0)
        return QS_OK;
    qc_dev_buf in, out;
    cudaError_t err = in.alloc(a->n * sizeof(float));
    if (err == cudaSuccess)
        err = out.alloc(a->n);
    if (err == cudaSuccess)
        err = cudaMemcpy(in.p, a->in, a->n * sizeof(float), cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = qc_cast(static_cast<const float *>(in.p), a->n, a->dtype, a->mode.round,
                      a->mode.overflow, a->mode.sr_bits, out.p);
    if (err == cudaSuccess)
        err = cudaMemcpy(a->out, out.p, a->n, cudaMemcpyDeviceToHost);
    return err == cudaSuccess ? QS_OK : QS_ERR_INTERNAL;
}
