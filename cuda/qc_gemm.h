/* qc_gemm.h: the cuBLASLt GEMMs of the CUDA plugin (cuda/qc_gemm.cu), shared by the gemm
 * slot and cuda/bench/gemm_bench.cu. A qc_lt_plan is one cuBLASLt matmul in column-major
 * terms, D[m_lt, n_lt] = alpha * op(A)[m_lt, k] op(B)[k, n_lt] with op(A) = A^T (TN, the only
 * FP8 layout Hopper has): A is stored k x m_lt with leading dimension lda, B k x n_lt with
 * ldb, D m_lt x n_lt with ldd. The row-major GEMM y[M,N] = a[M,K] b[N,K]^T of spec/gemm.md is
 * this with A = b, B = a, m_lt = N, n_lt = M. Every call checks every CUDA and cuBLASLt
 * status and writes the failing call and its status name into why. */
#ifndef QC_GEMM_H
#define QC_GEMM_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "qspec/backend.h"

/* Scale modes of qc_lt_desc (cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_*). */
enum qc_lt_scale {
    QC_LT_SCALE_NONE = 0,
    QC_LT_SCALE_TENSOR,
    QC_LT_SCALE_VEC128,
    QC_LT_SCALE_BLK128
};

struct qc_lt_desc {
    int64_t m_lt, n_lt, k;
    int64_t lda, ldb, ldd;
    cudaDataType_t a_type, b_type, d_type;
    cublasComputeType_t compute;
    int fp8;        /* FP8 operands: set FAST_ACCUM and the scale attributes */
    int fast_accum; /* CUBLASLT_MATMUL_DESC_FAST_ACCUM (1: never promoted; 0: split) */
    qc_lt_scale a_scale_mode, b_scale_mode;
    const void *a_scale, *b_scale; /* device: FP32 scalar (TENSOR) or FP32 arrays */
    float alpha;
};

struct qc_lt_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    float alpha = 1.0f, beta = 0.0f;
};

/* Creates the descriptors and asks the heuristic for one algorithm within ws_size bytes of
 * workspace. QS_ERR_UNSUPPORTED when cuBLASLt has no kernel for the combination
 * (CUBLAS_STATUS_NOT_SUPPORTED or no heuristic result), QS_ERR_INTERNAL on other failures. */
qs_status qc_lt_plan_init(qc_lt_plan *p, cublasLtHandle_t h, const qc_lt_desc &d, size_t ws_size,
                          char *why, size_t why_len);
/* The heuristic's first max algorithms for an initialized plan within ws_size bytes of
 * workspace, best first (the first is the plan's own), into algos; *n is how many. For
 * gemm_bench, which times them: the plugin runs the heuristic's first. */
qs_status qc_lt_plan_candidates(const qc_lt_plan *p, cublasLtHandle_t h, size_t ws_size,
                                cublasLtMatmulAlgo_t *algos, int max, int *n, char *why,
                                size_t why_len);
/* Launches the matmul on stream s (asynchronous). */
qs_status qc_lt_plan_run(const qc_lt_plan *p, cublasLtHandle_t h, const void *a, const void *b,
                         void *d, void *ws, size_t ws_size, cudaStream_t s, char *why,
                         size_t why_len);
void qc_lt_plan_free(qc_lt_plan *p);

/* The workspace the plugin gives cuBLASLt. */
#define QC_LT_WORKSPACE ((size_t)32 << 20)

#endif
