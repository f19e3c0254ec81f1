/* recipe_nvfp4.c: NVFP4 of spec/recipes.md — E2M1 elements in 1x16 blocks (16x16 tiles
 * for weights) with E4M3 block scales under an FP32 tensor scale; columnwise = the
 * transposed tensor, optionally Hadamard-transformed; RNE or stochastic rounding.
 * The TE and torchao arithmetic chains are the two rows of nv_variants. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "qspec/random.h"
#include "recipe_internal.h"

#define QSI_NV_BLOCK 16

/* The tensor-level scale of one direction: te S_enc and S_dec; torchao pts in both. */
typedef struct nv_global {
    float enc, dec;
} nv_global;

static float fminf_(float a, float b)
{
    if (a != a)
        return b;
    if (b != b)
        return a;
    return a < b ? a : b;
}

/* torch.clamp: NaN stays NaN. */
static float clampf_(float v, float lo, float hi)
{
    if (v != v)
        return v;
    return v < lo ? lo : (v > hi ? hi : v);
}

/* [REC-NV-GLOBAL]: S_enc = fminf(2688/amax, FLT_MAX), 1 when amax is 0 or S_enc is 0;
 * S_dec = 1/S_enc (RN). */
static nv_global te_global(float amax)
{
    nv_global g;
    g.enc = fminf_(2688.0f / amax, FLT_MAX);
    if (amax == 0.0f || g.enc == 0.0f)
        g.enc = 1.0f;
    g.dec = 1.0f / g.enc;
    return g;
}

/* [REC-NV-SCALE]: e4m3_satfinite(fminf(blk_amax * (S_enc * fl(1/6)), FLT_MAX)). */
static uint32_t te_block_scale(float blk_amax, const nv_global *g)
{
    float f = g->enc * (1.0f / 6.0f);
    return qs_encode_e4m3(fminf_(blk_amax * f, FLT_MAX), QS_OVF_SATFINITE);
}

/* [REC-NV-ELEM]: x * fminf(1 / (float(sdec_b) * S_dec), FLT_MAX). */
static float te_elem_value(float x, uint32_t scode, const nv_global *g)
{
    float mult = fminf_(1.0f / (qs_decode_f32(QS_E4M3, scode) * g->dec), FLT_MAX);
    return x * mult;
}

/* [REC-DEQ-NV]: decode(q) * (float(sdec_b) * S_dec). */
static float te_dequant(uint32_t q, uint32_t scode, const nv_global *g)
{
    return qs_decode_f32(QS_E2M1, q) * (qs_decode_f32(QS_E4M3, scode) * g->dec);
}

/* [REC-NV-TORCHAO]: pts = amax / 2688 (RN division). */
static nv_global torchao_global(float amax)
{
    nv_global g;
    g.enc = amax / 2688.0f;
    g.dec = g.enc;
    return g;
}

/* [REC-NV-TORCHAO]: e4m3(clamp((blk_amax / 6) / pts, 2^-6, 448)); pts = 0 gives 2^-6
 * [REC-NV-TORCHAO-ZERO]. */
static uint32_t torchao_block_scale(float blk_amax, const nv_global *g)
{
    if (g->dec == 0.0f)
        return 0x08;
    float v = clampf_((blk_amax / 6.0f) / g->dec, 0.015625f, 448.0f);
    return qs_encode_e4m3(v, QS_OVF_SATFINITE);
}

/* [REC-NV-TORCHAO]: torchao 0.18.0: clamp(x * ((1 / pts) / s), -6, 6); pts = 0 gives 0. */
static float torchao_elem_value(float x, uint32_t scode, const nv_global *g)
{
    if (g->dec == 0.0f)
        return 0.0f;
    float reciprocal_scale = (1.0f / g->dec) / qs_decode_f32(QS_E4M3, scode);
    return clampf_(x * reciprocal_scale, -6.0f, 6.0f);
}

/* [REC-DEQ-NV-TORCHAO]: (decode(q) * s) * pts. */
static float torchao_dequant(uint32_t q, uint32_t scode, const nv_global *g)
{
    return (qs_decode_f32(QS_E2M1, q) * qs_decode_f32(QS_E4M3, scode)) * g->dec;
}

/* The per-peer variant table [REC-VARIANTS], indexed by qs_nv_variant. */
static const struct {
    nv_global (*global)(float amax);
    uint32_t (*block_scale)(float blk_amax, const nv_global *g);
    float (*elem_value)(float x, uint32_t scode, const nv_global *g);
    float (*dequant)(uint32_t q, uint32_t scode, const nv_global *g);
} nv_variants[QS_NV_COUNT] = {
    {te_global, te_block_scale, te_elem_value, te_dequant},
    {torchao_global, torchao_block_scale, torchao_elem_value, torchao_dequant},
};

/* What one direction's encoding needs. */
typedef struct nv_job {
    qs_nv_variant variant;
    nv_global g;
    int sr;
    uint64_t seed, offset; /* [REC-NV-SR]: the stream of this copy */
} nv_job;

/* [REC-NV-ELEM] [REC-NV-SR]: E2M1 satfinite, RNE or stochastic with the bits of element i. */
static uint32_t nv_encode(const nv_job *j, float v, size_t i)
{
    qs_cast_mode mode = {QS_ROUND_RNE, QS_OVF_SATFINITE, 0};
    if (j->sr) {
        mode.round = QS_ROUND_SR;
        mode.sr_bits = qs_random_u32(j->seed, j->offset, i);
    }
    uint32_t code = 0;
    (void)qs_encode_f32(QS_E2M1, v, mode, &code);
    return code;
}

/* Encodes the block of src [rows, cols] with rows r0..r1-1 and columns c0..c1-1 under one
 * block scale; writes the scale code at scale index si. */
static void nv_encode_block(const nv_job *j, const float *src, int64_t cols, int64_t r0, int64_t r1,
                            int64_t c0, int64_t c1, qs_tensor *data, qs_tensor *scale, size_t si)
{
    float a = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float t = qsi_amax(src + r * cols + c0, c1 - c0, 1);
        if (t > a)
            a = t;
    }
    uint32_t scode = nv_variants[j->variant].block_scale(a, &j->g);
    qsi_code_set(scale, si, scode);
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t c = c0; c < c1; c++) {
            size_t i = (size_t)(r * cols + c);
            float v = nv_variants[j->variant].elem_value(src[i], scode, &j->g);
            qsi_code_set(data, i, nv_encode(j, v, i));
        }
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* [REC-NV-1D] or [REC-NV-2D]: data [rows, cols] and scale [rows or ceil(rows/16),
 * ceil(cols/16)] of src; a partial block uses the elements present [REC-NV-PARTIAL]. */
static qs_status nv_encode_matrix(qs_ctx *ctx, const nv_job *j, const float *src, int64_t rows,
                                  int64_t cols, int tile_2d, qs_tensor *data, qs_tensor *scale)
{
    int64_t sr = tile_2d ? qsi_ceil_div(rows, QSI_NV_BLOCK) : rows;
    int64_t sc = qsi_ceil_div(cols, QSI_NV_BLOCK);
    qs_status s = qsi_alloc_2d(ctx, data, QS_E2M1, rows, cols);
    if (s == QS_OK)
        s = qsi_alloc_2d(ctx, scale, QS_E4M3, sr, sc);
    if (s != QS_OK)
        return s;
    int64_t rstep = tile_2d ? QSI_NV_BLOCK : 1;
    for (int64_t i = 0; i < sr; i++) {
        for (int64_t b = 0; b < sc; b++) {
            int64_t r0 = i * rstep, c0 = b * QSI_NV_BLOCK;
            nv_encode_block(j, src, cols, r0, min64(r0 + rstep, rows), c0,
                            min64(c0 + QSI_NV_BLOCK, cols), data, scale, (size_t)(i * sc + b));
        }
    }
    return QS_OK;
}

/* [REC-NV-SR]: the rowwise copy uses stream (seed, offset), the columnwise (seed, offset+1). */
static nv_job make_job(const qs_quantizer *q, float amax, uint64_t stream)
{
    nv_job j;
    j.variant = q->cfg.nv_variant;
    j.g = nv_variants[j.variant].global(amax);
    j.sr = q->cfg.sr;
    j.seed = q->cfg.seed;
    j.offset = q->cfg.offset + stream;
    return j;
}

static void store_global(qs_quantized *out, qs_direction d, float amax, const nv_job *j)
{
    out->amax[d] = amax;
    out->global_enc[d] = j->g.enc;
    out->global_dec[d] = j->g.dec;
}

/* [REC-NV-2D] [REC-NV-2D-COL]: 16x16 tiles under the one tensor amax; the columnwise
 * copy is the transpose. */
static qs_status quantize_2d(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in, float amax,
                             qs_quantized *out)
{
    nv_job j = make_job(q, amax, 0);
    qs_tensor *d = &out->data[QS_DIR_ROW], *s = &out->scale[QS_DIR_ROW];
    qs_status st = nv_encode_matrix(ctx, &j, in->x, in->m, in->k, 1, d, s);
    if (st != QS_OK)
        return st;
    store_global(out, QS_DIR_ROW, amax, &j);
    if (q->cfg.columnwise) {
        store_global(out, QS_DIR_COL, amax, &j);
        st = qsi_transpose_tensor(ctx, d, &out->data[QS_DIR_COL]);
        if (st == QS_OK)
            st = qsi_transpose_tensor(ctx, s, &out->scale[QS_DIR_COL]);
    }
    if (!q->cfg.rowwise) {
        qs_tensor_free(d);
        qs_tensor_free(s);
        out->amax[QS_DIR_ROW] = out->global_enc[QS_DIR_ROW] = out->global_dec[QS_DIR_ROW] = 0;
    }
    return st;
}

/* [REC-NV-RHT]: the transform needs a BF16 x with a multiple of 16 rows. */
static qs_status check_rht(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in)
{
    if (!cfg->rht || !cfg->columnwise)
        return QS_OK;
    if (in->dtype != QS_BF16)
        return qs_ctx_error(ctx, QS_ERR_DTYPE,
                            "quantize: nvfp4 with rht needs a bf16 x, got %s [REC-NV-RHT]",
                            qs_dtype_name(in->dtype));
    if (in->m % QSI_NV_BLOCK != 0)
        return qs_ctx_error(ctx, QS_ERR_SHAPE,
                            "quantize: nvfp4 with rht needs x rows (%lld) to be a multiple "
                            "of 16 [REC-NV-RHT]",
                            (long long)in->m);
    return QS_OK;
}

/* [REC-NV-1D-COL] [REC-NV-RHT]: *xt (malloc'd) = the transposed tensor [K, M],
 * Hadamard-transformed if cfg asks. */
static qs_status col_source(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in,
                            float **xt)
{
    int64_t M = in->m, K = in->k;
    *xt = malloc((size_t)(M * K) * sizeof **xt);
    if (!*xt)
        return qs_ctx_error(ctx, QS_ERR_NOMEM, "quantize: out of memory");
    qsi_transpose_f32(in->x, M, K, *xt);
    if (cfg->rht)
        for (int64_t k = 0; k < K; k++)
            qsi_rht16(*xt + k * M, M, *xt + k * M);
    return QS_OK;
}

/* [REC-NV-1D-COL]: the transposed (transformed) tensor under its own tensor amax. */
static qs_status quantize_col(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in, float amax,
                              qs_quantized *out)
{
    float *xt;
    qs_status st = col_source(ctx, &q->cfg, in, &xt);
    if (st != QS_OK)
        return st;
    nv_job j = make_job(q, amax, 1);
    st = nv_encode_matrix(ctx, &j, xt, in->k, in->m, 0, &out->data[QS_DIR_COL],
                          &out->scale[QS_DIR_COL]);
    if (st == QS_OK)
        store_global(out, QS_DIR_COL, amax, &j);
    free(xt);
    return st;
}

qs_status qsi_nvfp4_amax(qs_ctx *ctx, const qs_recipe_config *cfg, const qsi_input *in,
                         float amax[QS_DIR_COUNT])
{
    qs_status st = check_rht(ctx, cfg, in);
    if (st != QS_OK)
        return st;
    float whole = qsi_amax(in->x, in->m * in->k, 1);
    amax[QS_DIR_ROW] = cfg->rowwise ? whole : 0.0f;
    amax[QS_DIR_COL] = cfg->columnwise ? whole : 0.0f;
    if (cfg->columnwise && !cfg->tile_2d && cfg->rht) { /* taken after the transform */
        float *xt;
        if ((st = col_source(ctx, cfg, in, &xt)) != QS_OK)
            return st;
        amax[QS_DIR_COL] = qsi_amax(xt, in->m * in->k, 1);
        free(xt);
    }
    return QS_OK;
}

qs_status qsi_quantize_nvfp4_amax(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                                  const float amax[QS_DIR_COUNT], qs_quantized *out)
{
    qs_status st = check_rht(ctx, &q->cfg, in);
    if (st != QS_OK)
        return st;
    if (q->cfg.tile_2d)
        return quantize_2d(ctx, q, in, amax[q->cfg.rowwise ? QS_DIR_ROW : QS_DIR_COL], out);
    if (q->cfg.rowwise) {
        nv_job j = make_job(q, amax[QS_DIR_ROW], 0);
        st = nv_encode_matrix(ctx, &j, in->x, in->m, in->k, 0, &out->data[QS_DIR_ROW],
                              &out->scale[QS_DIR_ROW]);
        if (st != QS_OK)
            return st;
        store_global(out, QS_DIR_ROW, amax[QS_DIR_ROW], &j);
    }
    return q->cfg.columnwise ? quantize_col(ctx, q, in, amax[QS_DIR_COL], out) : QS_OK;
}

qs_status qsi_quantize_nvfp4(qs_ctx *ctx, const qs_quantizer *q, const qsi_input *in,
                             qs_quantized *out)
{
    float amax[QS_DIR_COUNT];
    if (q->amax_given) /* [DIST-GIVEN-AMAX] */
        return qsi_quantize_nvfp4_amax(ctx, q, in, q->given_amax, out);
    qs_status st = qsi_nvfp4_amax(ctx, &q->cfg, in, amax);
    return st == QS_OK ? qsi_quantize_nvfp4_amax(ctx, q, in, amax, out) : st;
}

/* [REC-DEQ-NV]: per element, the variant's dequantization, back in [M,K] orientation. */
void qsi_dequantize_nvfp4(const qs_quantized *qz, qs_direction dir, float *y)
{
    int64_t M = qz->rows, K = qz->cols;
    const qs_tensor *s = &qz->scale[dir];
    int64_t sc = s->shape[1];
    nv_global g = {qz->global_enc[dir], qz->global_dec[dir]};
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t r = dir == QS_DIR_ROW ? m : k, c = dir == QS_DIR_ROW ? k : m;
            int64_t cols = dir == QS_DIR_ROW ? K : M;
            int64_t sr = qz->cfg.tile_2d ? r / QSI_NV_BLOCK : r;
            uint32_t scode = qsi_code_get(s, (size_t)(sr * sc + c / QSI_NV_BLOCK));
            uint32_t code = qsi_code_get(&qz->data[dir], (size_t)(r * cols + c));
            y[m * K + k] = nv_variants[qz->cfg.nv_variant].dequant(code, scode, &g);
        }
    }
}
