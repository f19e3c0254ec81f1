/* qc_kernels.h: the launch API of the CUDA quantizers, on device pointers and the default
 * stream, shared by the plugin slots (cuda/plugin.cu) and the benchmark (cuda/bench).
 * A NULL output pointer skips that copy. Layouts are those of spec/recipes.md
 * [REC-LAYOUT]; the arithmetic is the reference's, operation by operation. */
#ifndef QC_KERNELS_H
#define QC_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

/* Input element types of the kernels (a 2-D row-major [rows, cols] tensor). */
enum { QC_IN_FP32 = 0, QC_IN_BF16 = 1, QC_IN_FP16 = 2 };

struct qc_input {
    const void *x;
    int dtype; /* QC_IN_* */
    int64_t rows, cols;
};

/* The codes of a tensorwise or block copy: data and its scale tensor. */
struct qc_copy {
    uint8_t *data;
    void *scale; /* float (tensorwise, block) or uint8_t E8M0 codes (mxfp8) */
};

/* Tensorwise scale parameters [REC-CS-SCALE]: fixed (delayed) or from the amax (current). */
struct qc_tw_params {
    int e5m2;     /* element format E5M2 (else E4M3) */
    int from_amax; /* 1: current scaling from *amax_bits; 0: delayed with scale */
    float scale;   /* delayed: the scale to use */
    float eps;
    int pow2;
};

struct qc_block_params {
    int e5m2;
    float eps;
    int pow2;
    float value_for_inf; /* [REC-BLK-INF] */
};

/* [REC-AMAX]: *amax_bits = bits of max |x| (NaN ignored); amax_bits is device memory. */
cudaError_t qc_amax(const qc_input &in, uint32_t *amax_bits);
/* [REC-TW-ELEM] [REC-TW-LAYOUT]: rowwise codes [M,K] and/or transposed codes [K,M]; the
 * scale tensors are not written here (the host writes scale_inv). */
cudaError_t qc_tensorwise(const qc_input &in, const qc_tw_params &p, const uint32_t *amax_bits,
                          uint8_t *row, uint8_t *col);
/* [REC-MX-*]: rowwise 1x32 and columnwise 32x1 blocks in one pass (rule 0 te, 1 ocp). */
cudaError_t qc_mxfp8(const qc_input &in, int e5m2, int rule, qc_copy row, qc_copy col);
/* [REC-BLK-1D] [REC-BLK-1D-COL]: 1x128 rowwise and 1x128 of the transpose. */
cudaError_t qc_block_1d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col);
/* [REC-BLK-2D] [REC-BLK-2D-COL]: 128x128 tiles, the columnwise copy the transpose. */
cudaError_t qc_block_2d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col);
/* [FMT-OVF-SATFINITE] RNE cast of n FP32 values to E4M3 or E5M2 codes. */
cudaError_t qc_cast_fp8(const float *in, size_t n, int e5m2, uint8_t *out);

#endif
