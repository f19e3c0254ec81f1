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
    void *scale; /* float (tensorwise, block, axiswise) or uint8_t E8M0 codes (mxfp8) */
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
 * scale tensors are not written here (the host writes scale_inv). Current scaling reads
 * the amax from *amax_bits (qc_amax first); delayed scaling writes the amax it saw there,
 * in the same pass [REC-DS-QUANT]. */
cudaError_t qc_tensorwise(const qc_input &in, const qc_tw_params &p, uint32_t *amax_bits,
                          uint8_t *row, uint8_t *col);
/* [REC-MX-*]: rowwise 1x32 and columnwise 32x1 blocks in one pass (rule 0 te, 1 ocp). */
cudaError_t qc_mxfp8(const qc_input &in, int e5m2, int rule, qc_copy row, qc_copy col);
/* [REC-BLK-1D] [REC-BLK-1D-COL]: 1x128 rowwise and 1x128 of the transpose. */
cudaError_t qc_block_1d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col);
/* [REC-BLK-2D] [REC-BLK-2D-COL]: 128x128 tiles, the columnwise copy the transpose. */
cudaError_t qc_block_2d(const qc_input &in, const qc_block_params &p, qc_copy row, qc_copy col);
/* torchao's axiswise recipes [REC-AX-*] (cuda/qc_axiswise.cu). How the columnwise copy is
 * scaled [REC-AX-LAYOUT] [REC-AX-GWHP]: one scale per row of x^T; one scale for the tensor
 * (rowwise_with_gw_hp's weight); or none, x^T in FP32 (its other roles). */
enum { QC_AX_ROWS = 0, QC_AX_TENSOR = 1, QC_AX_HP = 2 };
struct qc_axiswise_params {
    int e5m2;     /* element format E5M2 (else E4M3) */
    int pow2;     /* [REC-AX-POW2] */
    int col_kind; /* QC_AX_*: how the columnwise copy is scaled */
};
/* [REC-AX-ROW] [REC-AX-COL] [REC-AX-GWHP]: the rowwise copy, codes [M,K] and FP32 scale_inv
 * [M]; the columnwise copy x^T [K,M]: with QC_AX_ROWS codes and scale_inv [K]; with
 * QC_AX_TENSOR codes with one scale from the tensor amax, whose magnitude bits (NaN
 * propagating, qc::ax::amax_of) go to *max_mag (device memory) while col.scale is left to
 * the host (qc::ax::fields_of); with QC_AX_HP col.data receives K*M FP32 values and
 * col.scale is left to the host. */
cudaError_t qc_axiswise(const qc_input &in, const qc_axiswise_params &p, qc_copy row, qc_copy col,
                        uint32_t *max_mag);
/* [FMT-OVF-SATFINITE] RNE cast of n FP32 values to E4M3 or E5M2 codes. */
cudaError_t qc_cast_fp8(const float *in, size_t n, int e5m2, uint8_t *out);

/* NVFP4 options [REC-NV-*] (cuda/qc_nvfp4.cu). */
struct qc_nvfp4_params {
    int torchao;           /* variant torchao [REC-NV-TORCHAO] (else te) */
    int tile_2d;           /* 16x16 tiles [REC-NV-2D] (else 1x16 blocks) */
    int rht;               /* 1-D columnwise copy Hadamard-transformed [REC-NV-RHT] */
    int sr;                /* stochastic rounding [REC-NV-SR] */
    uint64_t seed, offset; /* the rowwise stream; the columnwise one is offset + 1 */
    int amax_mode;         /* QC_NV_AMAX_MEASURE, _ONLY or _GIVEN */
};
/* What qc_nvfp4 does with the tensor amaxes: measure them into amax_bits and encode
 * (default); only measure them (the local amaxes a rank reduces, spec/distributed.md
 * [DIST-NV-AMAX]); or encode with the amaxes amax_bits already holds, the reduced or
 * recorded ones, measuring nothing [DIST-GIVEN-AMAX]. */
enum { QC_NV_AMAX_MEASURE = 0, QC_NV_AMAX_ONLY = 1, QC_NV_AMAX_GIVEN = 2 };
/* [REC-NV-*]: packed E2M1 data and E4M3 scale codes of the rowwise copy [M,K] and the
 * columnwise copy [K,M]; amax_bits (device memory, 2 words) receives the bits of the tensor
 * amax of each (2-D tiles use word 0 for both, the 1-D columnwise word is taken after the
 * transform), from which the host takes S_enc and S_dec (qc::nv::copy_amax, tensor_scale in
 * cuda/qc_nvfp4.cuh). rht needs a BF16 input with rows % 16 == 0 (cudaErrorInvalidValue
 * otherwise). */
cudaError_t qc_nvfp4(const qc_input &in, const qc_nvfp4_params &p, qc_copy row, qc_copy col,
                     uint32_t *amax_bits);

/* [FMT-ENCODE] (cuda/qc_cast.cu): n FP32 values to codes of format dtype (a qs_dtype: FP32,
 * BF16, FP16, E4M3, E5M2, E8M0, E2M1, E2M3, E3M2) under round (a qs_round) and overflow (a
 * qs_overflow), stochastic rounding with sr_bits for every value. out holds one code per
 * element: a byte for formats of 8 bits or fewer (E2M1 unpacked), uint16_t for BF16/FP16,
 * uint32_t for FP32. cudaErrorInvalidValue for an unknown format, mode or policy. */
cudaError_t qc_cast(const float *in, size_t n, int dtype, int round, int overflow, uint32_t sr_bits,
                    void *out);

/* [REC-DEQ-*] (cuda/qc_dequant.cu): one copy of a quantization of an [rows, cols] input. */
struct qc_dequant_params {
    int kind;           /* qs_recipe_kind */
    int col;            /* 0 the rowwise copy, 1 the columnwise copy */
    int elem;           /* qs_dtype of the codes: E4M3, E5M2, E2M1 (nvfp4), or FP32 (an
                         * axiswise high-precision copy) */
    int64_t rows, cols; /* M, K of the input */
    int tile_2d;        /* block and nvfp4: 128x128 / 16x16 tiles */
    int torchao;        /* nvfp4: the torchao variant (else te) */
    int64_t scale_cols; /* second extent of the scale tensor; 1 for tensorwise */
    int scale_ndim;     /* 1: one scale for the copy (tensorwise) */
    float global_dec;   /* nvfp4: S_dec (te) or pts (torchao) of this copy */
};
/* Dequantizes the copy's data and scale tensors (device memory, the layouts of
 * [REC-LAYOUT]) into y, FP32 [rows, cols] in the input's orientation [REC-DEQ-SHAPE]. */
cudaError_t qc_dequantize(const qc_dequant_params &p, const uint8_t *data, const void *scale,
                          float *y);

/* A device allocation freed at scope exit (host code of the plugin and the tools). */
struct qc_dev_buf {
    void *p = nullptr;
    qc_dev_buf() = default;
    qc_dev_buf(const qc_dev_buf &) = delete;
    qc_dev_buf &operator=(const qc_dev_buf &) = delete;
    ~qc_dev_buf()
    {
        if (p)
            cudaFree(p);
    }
    cudaError_t alloc(size_t n) { return cudaMalloc(&p, n ? n : 1); }
    uint8_t *u8() const { return static_cast<uint8_t *>(p); }
    uint32_t *u32() const { return static_cast<uint32_t *>(p); }
};

/* 1: every entry point takes its generic path (the benchmark compares the fast paths of
 * aligned shapes with it); 0 (default): fast paths where the shape allows. */
extern int qc_force_generic;
/* How the rowwise fast kernels walk the input (cuda/qc_tile.cuh); the outputs are the same
 * and the benchmark times each. AUTO (default): VEC4 for MXFP8 and block 1x128, VEC2 for
 * tensorwise, the fastest of each on an H100 (docs/perf.md). VEC2 and VEC4: rows_vec, two or four 8-element
 * chunks a lane, a grid of up to 8 blocks an SM; VEC2_RES: two chunks on the grid the device
 * holds at once; the rest MXFP8 and block 1x128 only (tensorwise takes VEC2_RES): rows_pipe,
 * coalesced (COAL) or a lane owning 32 elements (OWN), the next step's loads in flight, on
 * the resident grid, with streaming cache hints (_CS) or without; BULK: rows_bulk, the input
 * staged in shared memory by cp.async.bulk, four block windows in flight; BULK_WARP: the same
 * with a ring of six warp windows a warp. */
enum {
    QC_ROWS_VEC2 = 0,
    QC_ROWS_VEC4,
    QC_ROWS_VEC2_RES,
    QC_ROWS_COAL,
    QC_ROWS_OWN,
    QC_ROWS_COAL_CS,
    QC_ROWS_OWN_CS,
    QC_ROWS_BULK,
    QC_ROWS_BULK_WARP,
    QC_ROWS_AUTO,
    QC_ROWS_NPATHS
};
extern int qc_rows_path;
/* How the fused MXFP8 and block 1x128 tile kernels are built (tile128 in
 * cuda/qc_tile.cuh); the outputs are the same and the benchmark times each. TILE_2
 * (default) and TILE_3: compiled for two or three resident blocks an SM (their register
 * budget); PACK3, PACK4: three or four blocks an SM, BF16 and FP16 inputs held two to a
 * register until used. */
enum { QC_TILE_2 = 0, QC_TILE_3, QC_TILE_PACK3, QC_TILE_PACK4, QC_TILE_NPATHS };
extern int qc_tile_path;
/* The NVFP4 fast path's arithmetic: 0 the generic kernels' functions, 1 the magic-number
 * E2M1 encode and the butterfly transform where exact, 2 the magic-number encode with the
 * generic transform, 3 (default, the fastest on an H100: docs/perf.md) the FMNMX-clamped
 * magic encode, FMNMX amaxes, a shared table of block factors and the transform with
 * hardware BF16 rounding (cuda/qc_nvfp4.cu). The outputs are the same; the benchmark times
 * and self-checks each. */
extern int qc_nvfp4_arith;

#endif
