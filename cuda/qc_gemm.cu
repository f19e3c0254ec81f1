/* qc_gemm.cu: the gemm slot of the CUDA plugin — the TN GEMM of spec/gemm.md through
 * cuBLASLt (CUDA 13.0, sm_90), on the codes and scales of include/qspec/backend.h:
 *
 *  - FP8 tensorwise (E4M3 x E4M3, E5M2 x E4M3, E4M3 x E5M2), for hopper_fp8_tc: the FP8
 *    tensor-core GEMM with the per-tensor scale_inv as the A/B scale pointers and
 *    CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1 (promote_every 0, fast accumulation) or 0
 *    (promote_every 128, TE's split accumulator). Claim: Hopper tensor cores.
 *  - FP8 block scaling (1x128 and 128x128, not 128x128 on both operands), for
 *    hopper_fp8_tc: cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F /
 *    _BLK128x128_32F scale modes (cuBLAS 12.9 and later on sm_90; split accumulation only,
 *    which is what the model does with block scales). Claim: Hopper tensor cores.
 *  - everything else that accumulates in FP32 (exact and fp32_seq requests; MXFP8 and NVFP4,
 *    which have no Hopper tensor-core path): a kernel dequantizes the codes times their block
 *    scales to BF16 (exact for FP8, BF16, MXFP8 and NVFP4 operands while the products stay
 *    inside BF16's range) or to FP32 (FP32 or FP16 data, FP32 block scales), a cuBLASLt
 *    BF16 (or FP32) GEMM with CUBLAS_COMPUTE_32F accumulates, and the per-tensor scales
 *    (TENSOR scale_inv, NVFP4 S_dec) enter as alpha = fl(alpha * fl(ta * tb)).
 *    Claim: FP32 accumulation.
 *
 * M, N and K are padded with zero rows and columns to what the FP8 kernels need (M, N to
 * multiples of 16; K to 16, or 128 under block scaling): zero products change no model's
 * result. Requests outside these paths answer QS_ERR_UNSUPPORTED with the reason; CUDA and
 * cuBLASLt failures QS_ERR_INTERNAL with the failing call and its status. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "qc_gemm.h"
#include "qc_slots.h"

#define QC_TRY_CUDA(call)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(why, why_len, "%s: %s", #call, cudaGetErrorString(e_));                       \
            return QS_ERR_INTERNAL;                                                                \
        }                                                                                          \
    } while (0)

#define QC_TRY_LT(call)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            const char *n_ = cublasLtGetStatusName(s_);                                            \
            snprintf(why, why_len, "%s: %s", #call, n_ ? n_ : "unknown cuBLAS status");            \
            return s_ == CUBLAS_STATUS_NOT_SUPPORTED ? QS_ERR_UNSUPPORTED : QS_ERR_INTERNAL;       \
        }                                                                                          \
    } while (0)

#define QC_TRY(expr)                                                                               \
    do {                                                                                           \
        qs_status st_ = (expr);                                                                    \
        if (st_ != QS_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

/* ------------------------------------------------------------ cuBLASLt plans */

namespace
{

struct lt_pref {
    cublasLtMatmulPreference_t p = nullptr;
    ~lt_pref()
    {
        if (p)
            cublasLtMatmulPreferenceDestroy(p);
    }
};

cublasLtMatmulMatrixScale_t lt_scale_mode(qc_lt_scale s)
{
    switch (s) {
    case QC_LT_SCALE_VEC128:
        return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case QC_LT_SCALE_BLK128:
        return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default:
        return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

/* Up to max of the heuristic's algorithms for the plan's descriptors (best first) within
 * ws_size bytes of workspace; *found is how many. */
qs_status lt_heuristics(const qc_lt_plan *p, cublasLtHandle_t h, size_t ws_size,
                        cublasLtMatmulHeuristicResult_t *res, int max, int *found, char *why,
                        size_t why_len)
{
    lt_pref pref;
    uint64_t ws = ws_size;
    QC_TRY_LT(cublasLtMatmulPreferenceCreate(&pref.p));
    QC_TRY_LT(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
    memset(res, 0, sizeof *res * static_cast<size_t>(max));
    *found = 0;
    QC_TRY_LT(cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->d, p->d, pref.p, max, res,
                                             found));
    return QS_OK;
}

} // namespace

qs_status qc_lt_plan_init(qc_lt_plan *p, cublasLtHandle_t h, const qc_lt_desc &d, size_t ws_size,
                          char *why, size_t why_len)
{
    QC_TRY_LT(cublasLtMatmulDescCreate(&p->op, d.compute, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (d.fp8) {
        int8_t fast = d.fast_accum ? 1 : 0;
        QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                 sizeof fast));
        if (d.a_scale_mode != QC_LT_SCALE_NONE) {
            cublasLtMatmulMatrixScale_t mode = lt_scale_mode(d.a_scale_mode);
            QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                     &mode, sizeof mode));
            QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &d.a_scale, sizeof d.a_scale));
        }
        if (d.b_scale_mode != QC_LT_SCALE_NONE) {
            cublasLtMatmulMatrixScale_t mode = lt_scale_mode(d.b_scale_mode);
            QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                     &mode, sizeof mode));
            QC_TRY_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &d.b_scale, sizeof d.b_scale));
        }
    }
    QC_TRY_LT(cublasLtMatrixLayoutCreate(&p->a, d.a_type, (uint64_t)d.k, (uint64_t)d.m_lt, d.lda));
    QC_TRY_LT(cublasLtMatrixLayoutCreate(&p->b, d.b_type, (uint64_t)d.k, (uint64_t)d.n_lt, d.ldb));
    QC_TRY_LT(
        cublasLtMatrixLayoutCreate(&p->d, d.d_type, (uint64_t)d.m_lt, (uint64_t)d.n_lt, d.ldd));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    QC_TRY(lt_heuristics(p, h, ws_size, &res, 1, &found, why, why_len));
    if (found == 0) {
        snprintf(why, why_len, "cuBLASLt has no algorithm for this GEMM (m=%lld n=%lld k=%lld)",
                 (long long)d.m_lt, (long long)d.n_lt, (long long)d.k);
        return QS_ERR_UNSUPPORTED;
    }
    p->algo = res.algo;
    p->alpha = d.alpha;
    p->beta = 0.0f;
    return QS_OK;
}

qs_status qc_lt_plan_run(const qc_lt_plan *p, cublasLtHandle_t h, const void *a, const void *b,
                         void *d, void *ws, size_t ws_size, cudaStream_t s, char *why,
                         size_t why_len)
{
    QC_TRY_LT(cublasLtMatmul(h, p->op, &p->alpha, a, p->a, b, p->b, &p->beta, d, p->d, d, p->d,
                             &p->algo, ws, ws_size, s));
    return QS_OK;
}

qs_status qc_lt_plan_candidates(const qc_lt_plan *p, cublasLtHandle_t h, size_t ws_size,
                                cublasLtMatmulAlgo_t *algos, int max, int *n, char *why,
                                size_t why_len)
{
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(max > 0 ? max : 1));
    *n = 0;
    if (max <= 0)
        return QS_OK;
    int found = 0;
    QC_TRY(lt_heuristics(p, h, ws_size, res.data(), max, &found, why, why_len));
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            algos[(*n)++] = res[i].algo;
    return QS_OK;
}

void qc_lt_plan_free(qc_lt_plan *p)
{
    if (p->d)
        cublasLtMatrixLayoutDestroy(p->d);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    p->op = nullptr;
    p->a = p->b = p->d = nullptr;
}

/* ------------------------------------------------------------ device decoding */

namespace
{

enum code_kind { K_FP32, K_BF16, K_FP16, K_E4M3, K_E5M2, K_E2M1 };

__host__ __device__ float bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* 2^e for -149 <= e <= 127, built from its bits. */
__device__ float pow2(int e)
{
    if (e >= -126)
        return bits_f32((uint32_t)(e + 127) << 23);
    return bits_f32(1u << (e + 149));
}

__device__ float dec_fp8(uint32_t c, int e4)
{
    int mb = e4 ? 3 : 2, bias = e4 ? 7 : 15;
    int e = (int)((c & 0x7Fu) >> mb), m = (int)(c & ((1u << mb) - 1));
    float v;
    if (e4 && e == 15 && m == 7)
        return bits_f32(0x7FC00000u);
    if (!e4 && e == 31)
        return m ? bits_f32(0x7FC00000u) : ((c & 0x80u) ? -INFINITY : INFINITY);
    if (e == 0)
        v = (float)m * pow2(1 - bias - mb);
    else
        v = (float)((1 << mb) + m) * pow2(e - bias - mb);
    return (c & 0x80u) ? -v : v;
}

__device__ float dec_e2m1(uint32_t c)
{
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[c & 7u];
    return (c & 8u) ? -v : v;
}

/* E8M0: 2^(e-127), 0xFF is NaN. */
__device__ float dec_e8m0(uint32_t c)
{
    if (c == 0xFFu)
        return bits_f32(0x7FC00000u);
    return c ? bits_f32(c << 23) : bits_f32(0x00400000u);
}

struct deq_params {
    const void *data;
    int kind;
    int scaling; /* qs_gemm_scaling */
    const void *scale;
    int64_t rows, k, scale_cols;
    int64_t rows_p, k_p;
    int to_bf16;
    void *out;
};

__device__ float element(const deq_params &p, int64_t i)
{
    switch (p.kind) {
    case K_FP32:
        return static_cast<const float *>(p.data)[i];
    case K_BF16:
        return bits_f32((uint32_t) static_cast<const uint16_t *>(p.data)[i] << 16);
    case K_FP16:
        return __half2float(__ushort_as_half(static_cast<const uint16_t *>(p.data)[i]));
    case K_E4M3:
    case K_E5M2:
        return dec_fp8(static_cast<const uint8_t *>(p.data)[i], p.kind == K_E4M3);
    default: {
        uint32_t byte = static_cast<const uint8_t *>(p.data)[i / 2];
        return dec_e2m1((byte >> (4 * (i % 2))) & 0xFu);
    }
    }
}

__device__ float block_scale(const deq_params &p, int64_t r, int64_t k)
{
    switch (p.scaling) {
    case QS_GEMM_SCALE_BLOCK_1X128:
        return static_cast<const float *>(p.scale)[r * p.scale_cols + k / 128];
    case QS_GEMM_SCALE_BLOCK_128X128:
        return static_cast<const float *>(p.scale)[(r / 128) * p.scale_cols + k / 128];
    case QS_GEMM_SCALE_MX:
        return dec_e8m0(static_cast<const uint8_t *>(p.scale)[r * p.scale_cols + k / 32]);
    case QS_GEMM_SCALE_NVFP4:
        return dec_fp8(static_cast<const uint8_t *>(p.scale)[r * p.scale_cols + k / 16], 1);
    default:
        return 1.0f;
    }
}

/* out[r, k] (rows_p x k_p, zero outside rows x k) = element * block scale, in FP32 (one
 * rounding, none for power-of-two or E4M3 x E2M1 scales) and then to BF16 when asked (RNE;
 * exact when the value has at most 8 significant bits and lies in BF16's range). */
__global__ void dequantize_kernel(deq_params p)
{
    int64_t n = p.rows_p * p.k_p;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / p.k_p, k = i % p.k_p;
        float v = 0.0f;
        if (r < p.rows && k < p.k)
            v = element(p, r * p.k + k) * block_scale(p, r, k);
        if (p.to_bf16)
            static_cast<__nv_bfloat16 *>(p.out)[i] = __float2bfloat16_rn(v);
        else
            static_cast<float *>(p.out)[i] = v;
    }
}

/* ------------------------------------------------------------ host side */

struct dev_mem {
    void *p = nullptr;
    dev_mem() = default;
    dev_mem(const dev_mem &) = delete;
    dev_mem &operator=(const dev_mem &) = delete;
    ~dev_mem()
    {
        if (p)
            cudaFree(p);
    }
};

struct plan_guard {
    qc_lt_plan plan;
    ~plan_guard()
    {
        qc_lt_plan_free(&plan);
    }
};

struct runtime {
    cublasLtHandle_t h = nullptr;
    void *ws = nullptr;
};
runtime g_rt;

qs_status runtime_get(char *why, size_t why_len)
{
    if (!g_rt.h)
        QC_TRY_LT(cublasLtCreate(&g_rt.h));
    if (!g_rt.ws)
        QC_TRY_CUDA(cudaMalloc(&g_rt.ws, QC_LT_WORKSPACE));
    return QS_OK;
}

int64_t roundup(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

int64_t ceil_div(int64_t x, int64_t m)
{
    return (x + m - 1) / m;
}

int kind_of(qs_dtype dt)
{
    switch (dt) {
    case QS_FP32:
        return K_FP32;
    case QS_BF16:
        return K_BF16;
    case QS_FP16:
        return K_FP16;
    case QS_E4M3:
        return K_E4M3;
    case QS_E5M2:
        return K_E5M2;
    case QS_E2M1:
        return K_E2M1;
    default:
        return -1;
    }
}

int is_fp8(qs_dtype dt)
{
    return dt == QS_E4M3 || dt == QS_E5M2;
}

cudaDataType_t fp8_type(qs_dtype dt)
{
    return dt == QS_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* The operand's tensors have the dtypes and shapes the ABI gives its scaling mode. */
qs_status check_operand(const qs_gemm_coded_operand &o, int64_t rows, int64_t k, const char *name,
                        char *why, size_t why_len)
{
    const qs_tensor *d = o.data;
    if (!d || !d->data || d->ndim != 2 || d->shape[0] != rows || d->shape[1] != k ||
        kind_of(d->dtype) < 0) {
        snprintf(why, why_len, "operand %s: data must be [%lld, %lld] of a supported dtype", name,
                 (long long)rows, (long long)k);
        return QS_ERR_INVALID_ARG;
    }
    qs_dtype want = QS_DTYPE_INVALID;
    int64_t sr = 0, sc = 0;
    switch (o.scaling) {
    case QS_GEMM_SCALE_NONE:
    case QS_GEMM_SCALE_TENSOR:
        return QS_OK;
    case QS_GEMM_SCALE_BLOCK_1X128:
        want = QS_FP32, sr = rows, sc = ceil_div(k, 128);
        break;
    case QS_GEMM_SCALE_BLOCK_128X128:
        want = QS_FP32, sr = ceil_div(rows, 128), sc = ceil_div(k, 128);
        break;
    case QS_GEMM_SCALE_MX:
        want = QS_E8M0, sr = rows, sc = ceil_div(k, 32);
        break;
    case QS_GEMM_SCALE_NVFP4:
        want = QS_E4M3, sr = rows, sc = ceil_div(k, 16);
        break;
    default:
        snprintf(why, why_len, "operand %s: unknown scaling mode %d", name, (int)o.scaling);
        return QS_ERR_INVALID_ARG;
    }
    const qs_tensor *s = o.scale;
    if (!s || !s->data || s->dtype != want || s->ndim != 2 || s->shape[0] != sr ||
        s->shape[1] != sc) {
        snprintf(why, why_len, "operand %s: block scales must be [%lld, %lld]", name, (long long)sr,
                 (long long)sc);
        return QS_ERR_INVALID_ARG;
    }
    return QS_OK;
}

qs_status upload(dev_mem &m, const void *src, size_t n, char *why, size_t why_len)
{
    QC_TRY_CUDA(cudaMalloc(&m.p, n ? n : 1));
    if (n)
        QC_TRY_CUDA(cudaMemcpy(m.p, src, n, cudaMemcpyHostToDevice));
    return QS_OK;
}

size_t out_size(qs_dtype dt)
{
    return dt == QS_FP32 ? 4 : 2;
}

cudaDataType_t out_type(qs_dtype dt)
{
    return dt == QS_FP32 ? CUDA_R_32F : dt == QS_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* FP32 to BF16 or FP16 codes, round to nearest even, on the host. */
uint16_t round_out(float v, qs_dtype dt)
{
    if (dt == QS_FP16) {
        __half_raw r = __float2half_rn(v);
        return r.x;
    }
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((b >> 16) | 0x40u); /* NaN stays NaN */
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

/* Copies the M x N corner of D (row-major [Mp][Np] in the output's own dtype, or FP32 when
 * d_fp32) into y, converting when needed. */
qs_status fetch(qs_gemm_args *g, const dev_mem &d, int64_t Mp, int64_t Np, int d_fp32, char *why,
                size_t why_len)
{
    size_t es = d_fp32 ? 4 : out_size(g->out_dtype);
    std::vector<uint8_t> host((size_t)(Mp * Np) * es);
    QC_TRY_CUDA(cudaDeviceSynchronize());
    QC_TRY_CUDA(cudaMemcpy(host.data(), d.p, host.size(), cudaMemcpyDeviceToHost));
    size_t os = out_size(g->out_dtype);
    uint8_t *y = static_cast<uint8_t *>(g->y->data);
    for (int64_t m = 0; m < g->m; m++)
        for (int64_t n = 0; n < g->n; n++) {
            const uint8_t *src = host.data() + (size_t)(m * Np + n) * es;
            uint8_t *dst = y + (size_t)(m * g->n + n) * os;
            if (!d_fp32 || g->out_dtype == QS_FP32) {
                memcpy(dst, src, os);
            } else {
                float v;
                memcpy(&v, src, sizeof v);
                uint16_t c = round_out(v, g->out_dtype);
                memcpy(dst, &c, sizeof c);
            }
        }
    return QS_OK;
}

/* Pads a rows x k operand of one-byte codes to rows_p x k_p with zero codes (+0). */
std::vector<uint8_t> pad_codes(const qs_tensor *t, int64_t rows, int64_t k, int64_t rows_p,
                               int64_t k_p)
{
    std::vector<uint8_t> v((size_t)(rows_p * k_p), 0);
    for (int64_t r = 0; r < rows; r++)
        memcpy(v.data() + r * k_p, static_cast<const uint8_t *>(t->data) + r * k, (size_t)k);
    return v;
}

/* cuBLASLt's layout of a block-scaled operand's scales (as TransformerEngine hands them
 * over): VEC128_32F takes [ceil(k/128)][roundup(rows, 4)], rows contiguous; BLK128x128_32F
 * takes [ceil(rows/128)][roundup(ceil(k/128), 4)], k-blocks contiguous. Padding is 1. */
std::vector<float> lt_block_scales(const qs_gemm_coded_operand &o, int64_t rows_p)
{
    const qs_tensor *s = o.scale;
    const float *src = static_cast<const float *>(s->data);
    int64_t sr = s->shape[0], sc = s->shape[1];
    if (o.scaling == QS_GEMM_SCALE_BLOCK_1X128) {
        int64_t ld = roundup(rows_p, 4);
        std::vector<float> v((size_t)(sc * ld), 1.0f);
        for (int64_t r = 0; r < sr; r++)
            for (int64_t j = 0; j < sc; j++)
                v[(size_t)(j * ld + r)] = src[r * sc + j];
        return v;
    }
    int64_t ld = roundup(sc, 4);
    std::vector<float> v((size_t)(sr * ld), 1.0f);
    for (int64_t r = 0; r < sr; r++)
        for (int64_t j = 0; j < sc; j++)
            v[(size_t)(r * ld + j)] = src[r * sc + j];
    return v;
}

/* Whether an FP8 request lies where cuBLASLt without a workspace was measured equal to the
 * hopper_fp8_tc model bit for bit on an H200 ([GEMM-ACC-HOPPER-ALIGN],
 * [GEMM-HOPPER-EPILOGUE], docs/gemm.md): tensorwise (E4M3 and E5M2 operands, fast or split
 * accumulation) or block scaled (1x128 x 1x128, 1x128 x 128x128, 128x128 x 1x128, with the
 * promotion of [GEMM-ACC-HOPPER-VEC]), FP32 or BF16 output, no beta, and an alpha that is a
 * power of two (measured at 1 and 0.5; such an alpha commutes with every rounding of the
 * epilogue). FP16 outputs and other alphas were not measured: there the plugin claims only
 * the hardware. */
int fp8_claims_model(const qs_gemm_args *g)
{
    int e;
    int pow2_alpha = g->alpha > 0.0f && frexpf(g->alpha, &e) == 0.5f;
    int block_a = g->a.scaling == QS_GEMM_SCALE_BLOCK_1X128 ||
                  g->a.scaling == QS_GEMM_SCALE_BLOCK_128X128,
        block_b = g->b.scaling == QS_GEMM_SCALE_BLOCK_1X128 ||
                  g->b.scaling == QS_GEMM_SCALE_BLOCK_128X128;
    int layout_ok = g->a.scaling == QS_GEMM_SCALE_TENSOR ||
                    (block_a && block_b &&
                     !(g->a.scaling == QS_GEMM_SCALE_BLOCK_128X128 &&
                       g->b.scaling == QS_GEMM_SCALE_BLOCK_128X128));
    return layout_ok && (g->acc.promote_every == 0 || g->acc.promote_every == 128) &&
           (g->out_dtype == QS_FP32 || g->out_dtype == QS_BF16) && pow2_alpha && g->beta == 0.0f;
}

/* [GEMM-ACC-HOPPER] on the FP8 tensor cores: tensorwise or block scaled. The GEMMs run
 * without a workspace, so that cuBLASLt does not split K (a split adds FP32 partials of
 * contiguous runs of 128-wide tiles, another evaluation than the model's). */
qs_status run_fp8(qs_gemm_args *g, char *why, size_t why_len)
{
    int block =
        g->a.scaling == QS_GEMM_SCALE_BLOCK_1X128 || g->a.scaling == QS_GEMM_SCALE_BLOCK_128X128;
    int64_t M = g->m, N = g->n, K = g->k;
    int64_t Mp = roundup(M, 16), Np = roundup(N, 16), Kp = roundup(K, block ? 128 : 16);
    std::vector<uint8_t> ha = pad_codes(g->a.data, M, K, Mp, Kp);
    std::vector<uint8_t> hb = pad_codes(g->b.data, N, K, Np, Kp);
    dev_mem da, db, dd, sa, sb;
    QC_TRY(upload(da, ha.data(), ha.size(), why, why_len));
    QC_TRY(upload(db, hb.data(), hb.size(), why, why_len));
    QC_TRY_CUDA(cudaMalloc(&dd.p, (size_t)(Mp * Np) * out_size(g->out_dtype)));
    qc_lt_desc d;
    memset(&d, 0, sizeof d);
    if (block) { /* A of cuBLASLt is our b, B is our a */
        std::vector<float> ssb = lt_block_scales(g->b, Np), ssa = lt_block_scales(g->a, Mp);
        QC_TRY(upload(sb, ssb.data(), ssb.size() * sizeof(float), why, why_len));
        QC_TRY(upload(sa, ssa.data(), ssa.size() * sizeof(float), why, why_len));
        d.a_scale_mode =
            g->b.scaling == QS_GEMM_SCALE_BLOCK_1X128 ? QC_LT_SCALE_VEC128 : QC_LT_SCALE_BLK128;
        d.b_scale_mode =
            g->a.scaling == QS_GEMM_SCALE_BLOCK_1X128 ? QC_LT_SCALE_VEC128 : QC_LT_SCALE_BLK128;
        d.fast_accum = 0; /* cuBLASLt block scaling has no fast accumulation */
    } else {
        QC_TRY(upload(sb, &g->b.tensor_scale, sizeof(float), why, why_len));
        QC_TRY(upload(sa, &g->a.tensor_scale, sizeof(float), why, why_len));
        d.a_scale_mode = d.b_scale_mode = QC_LT_SCALE_TENSOR;
        d.fast_accum = g->acc.promote_every == 0;
    }
    d.m_lt = Np;
    d.n_lt = Mp;
    d.k = Kp;
    d.lda = Kp;
    d.ldb = Kp;
    d.ldd = Np;
    d.a_type = fp8_type(g->b.data->dtype);
    d.b_type = fp8_type(g->a.data->dtype);
    d.d_type = out_type(g->out_dtype);
    d.compute = CUBLAS_COMPUTE_32F;
    d.fp8 = 1;
    d.a_scale = sb.p;
    d.b_scale = sa.p;
    d.alpha = g->alpha;
    plan_guard pg;
    QC_TRY(qc_lt_plan_init(&pg.plan, g_rt.h, d, 0, why, why_len));
    QC_TRY(qc_lt_plan_run(&pg.plan, g_rt.h, db.p, da.p, dd.p, nullptr, 0, 0, why, why_len));
    QC_TRY(fetch(g, dd, Mp, Np, 0, why, why_len));
    g->claim = fp8_claims_model(g) ? QS_GEMM_CLAIM_MODEL : QS_GEMM_CLAIM_HOPPER_TC;
    return QS_OK;
}

/* Whether the operand's dequantized values are exact in BF16 (within its range): FP8,
 * BF16 and E2M1 codes times power-of-two (MX) or E4M3 (NVFP4) block scales. */
int bf16_exact(const qs_gemm_coded_operand &o)
{
    qs_dtype dt = o.data->dtype;
    if (o.scaling == QS_GEMM_SCALE_BLOCK_1X128 || o.scaling == QS_GEMM_SCALE_BLOCK_128X128)
        return 0;
    return is_fp8(dt) || dt == QS_BF16 || dt == QS_E2M1;
}

qs_status dequantize(const qs_gemm_coded_operand &o, int64_t rows, int64_t k, int64_t rows_p,
                     int64_t k_p, int to_bf16, dev_mem &out, char *why, size_t why_len)
{
    const qs_tensor *t = o.data;
    dev_mem data, scale;
    QC_TRY(upload(data, t->data, t->nbytes, why, why_len));
    deq_params p;
    memset(&p, 0, sizeof p);
    if (o.scale && o.scaling != QS_GEMM_SCALE_NONE && o.scaling != QS_GEMM_SCALE_TENSOR) {
        QC_TRY(upload(scale, o.scale->data, o.scale->nbytes, why, why_len));
        p.scale_cols = o.scale->shape[1];
    }
    QC_TRY_CUDA(cudaMalloc(&out.p, (size_t)(rows_p * k_p) * (to_bf16 ? 2 : 4)));
    p.data = data.p;
    p.kind = kind_of(t->dtype);
    p.scaling = (int)o.scaling;
    p.scale = scale.p;
    p.rows = rows;
    p.k = k;
    p.rows_p = rows_p;
    p.k_p = k_p;
    p.to_bf16 = to_bf16;
    p.out = out.p;
    int64_t n = rows_p * k_p;
    int threads = 256;
    int64_t blocks = ceil_div(n, threads);
    dequantize_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), threads>>>(p);
    QC_TRY_CUDA(cudaGetLastError());
    QC_TRY_CUDA(cudaDeviceSynchronize()); /* before data and scale are freed */
    return QS_OK;
}

/* FP32 accumulation over dequantized operands: a BF16 (or FP32) cuBLASLt GEMM. */
qs_status run_dequantized(qs_gemm_args *g, char *why, size_t why_len)
{
    int64_t M = g->m, N = g->n, K = g->k;
    int64_t Mp = roundup(M, 16), Np = roundup(N, 16), Kp = roundup(K, 16);
    int bf16 = bf16_exact(g->a) && bf16_exact(g->b);
    dev_mem da, db, dd;
    QC_TRY(dequantize(g->a, M, K, Mp, Kp, bf16, da, why, why_len));
    QC_TRY(dequantize(g->b, N, K, Np, Kp, bf16, db, why, why_len));
    QC_TRY_CUDA(cudaMalloc(&dd.p, (size_t)(Mp * Np) * sizeof(float)));
    float ta = g->a.scaling == QS_GEMM_SCALE_TENSOR || g->a.scaling == QS_GEMM_SCALE_NVFP4
                   ? g->a.tensor_scale
                   : 1.0f;
    float tb = g->b.scaling == QS_GEMM_SCALE_TENSOR || g->b.scaling == QS_GEMM_SCALE_NVFP4
                   ? g->b.tensor_scale
                   : 1.0f;
    float tt = ta * tb; /* t = fl(alpha * fl(ta * tb)), as spec/gemm.md section 2 */
    qc_lt_desc d;
    memset(&d, 0, sizeof d);
    d.m_lt = Np;
    d.n_lt = Mp;
    d.k = Kp;
    d.lda = Kp;
    d.ldb = Kp;
    d.ldd = Np;
    d.a_type = d.b_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    d.d_type = CUDA_R_32F;
    d.compute = CUBLAS_COMPUTE_32F;
    d.alpha = g->alpha * tt; /* [GEMM-SCALE-NVFP4]: the tensor scales as the GEMM's alpha */
    plan_guard pg;
    QC_TRY(qc_lt_plan_init(&pg.plan, g_rt.h, d, QC_LT_WORKSPACE, why, why_len));
    QC_TRY(qc_lt_plan_run(&pg.plan, g_rt.h, db.p, da.p, dd.p, g_rt.ws, QC_LT_WORKSPACE, 0, why,
                          why_len));
    QC_TRY(fetch(g, dd, Mp, Np, 1, why, why_len));
    g->claim = QS_GEMM_CLAIM_FP32;
    return QS_OK;
}

int family(qs_gemm_scaling s)
{
    switch (s) {
    case QS_GEMM_SCALE_NONE:
    case QS_GEMM_SCALE_TENSOR:
        return 0;
    case QS_GEMM_SCALE_BLOCK_1X128:
    case QS_GEMM_SCALE_BLOCK_128X128:
        return 1;
    case QS_GEMM_SCALE_MX:
        return 2;
    default:
        return 3;
    }
}

} // namespace

qs_status qc_slot_gemm(void *state, qs_gemm_args *g)
{
    (void)state;
    char *why = g->why;
    size_t why_len = g->why_len;
    char scratch[8];
    if (!why || !why_len) {
        why = scratch;
        why_len = sizeof scratch;
    }
    why[0] = '\0';
    if (!g->y || g->m < 1 || g->n < 1 || g->k < 1) {
        snprintf(why, why_len, "empty GEMM (m=%lld n=%lld k=%lld)", (long long)g->m,
                 (long long)g->n, (long long)g->k);
        return QS_ERR_UNSUPPORTED;
    }
    if (g->out_dtype != QS_FP32 && g->out_dtype != QS_BF16 && g->out_dtype != QS_FP16)
        return QS_ERR_UNSUPPORTED;
    if (g->y->dtype != g->out_dtype || g->y->ndim != 2 || g->y->shape[0] != g->m ||
        g->y->shape[1] != g->n || !g->y->data) {
        snprintf(why, why_len, "y must be [%lld, %lld] of the output dtype", (long long)g->m,
                 (long long)g->n);
        return QS_ERR_INVALID_ARG;
    }
    if (g->beta != 0.0f) {
        snprintf(why, why_len, "beta != 0 is not implemented");
        return QS_ERR_UNSUPPORTED;
    }
    QC_TRY(check_operand(g->a, g->m, g->k, "a", why, why_len));
    QC_TRY(check_operand(g->b, g->n, g->k, "b", why, why_len));
    if (family(g->a.scaling) != family(g->b.scaling)) {
        snprintf(why, why_len, "operands of different scaling families");
        return QS_ERR_INVALID_ARG;
    }
    QC_TRY(runtime_get(why, why_len));
    int fam = family(g->a.scaling);
    if (g->acc.kind == QS_GEMM_ACC_EXACT || g->acc.kind == QS_GEMM_ACC_FP32_SEQ)
        return run_dequantized(g, why, why_len);
    if (g->acc.kind != QS_GEMM_ACC_HOPPER_FP8_TC)
        return QS_ERR_UNSUPPORTED;
    if (fam >= 2) {
        snprintf(why, why_len, "no Hopper tensor-core path for MXFP8 or NVFP4 operands");
        return QS_ERR_UNSUPPORTED;
    }
    if (!is_fp8(g->a.data->dtype) || !is_fp8(g->b.data->dtype)) {
        snprintf(why, why_len, "hopper_fp8_tc runs on FP8 codes only");
        return QS_ERR_UNSUPPORTED;
    }
    if (g->a.data->dtype == QS_E5M2 && g->b.data->dtype == QS_E5M2) {
        snprintf(why, why_len, "cuBLASLt has no E5M2 x E5M2 FP8 GEMM");
        return QS_ERR_UNSUPPORTED;
    }
    int64_t pe = g->acc.promote_every;
    if (fam == 0 && pe != 0 && pe != 128) {
        snprintf(why, why_len, "cuBLASLt promotes never (fast) or every 128 (split), not %lld",
                 (long long)pe);
        return QS_ERR_UNSUPPORTED;
    }
    if (fam == 1) {
        /* [GEMM-ACC-PROMOTE]: under block scaling a partial ends at every 128-wide group, so
         * promote_every 0 or any multiple of 128 is promotion every 128 */
        if (pe % 128 != 0) {
            snprintf(why, why_len, "block scaling promotes every 128, not every %lld",
                     (long long)pe);
            return QS_ERR_UNSUPPORTED;
        }
        if (g->a.scaling == QS_GEMM_SCALE_BLOCK_128X128 &&
            g->b.scaling == QS_GEMM_SCALE_BLOCK_128X128) {
            snprintf(why, why_len, "cuBLASLt has no 128x128 x 128x128 block-scaled GEMM");
            return QS_ERR_UNSUPPORTED;
        }
    }
    return run_fp8(g, why, why_len);
}

void qc_gemm_release(void)
{
    if (g_rt.ws)
        cudaFree(g_rt.ws);
    if (g_rt.h)
        cublasLtDestroy(g_rt.h);
    g_rt.ws = nullptr;
    g_rt.h = nullptr;
}
