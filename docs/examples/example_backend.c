/* example_backend.c: a small backend plugin, built the way a vendor builds one: against
 * the installed headers only (include/qspec/backend.h), never against libqspec. It
 * implements the `cast` slot for E4M3 and E5M2 under RNE with the satfinite policy and the
 * `quantize` slot for current scaling, and claims nothing else, so every other case is
 * reported as not supported. Built with -DQS_EXAMPLE_PLANT_ERROR its current-scaling
 * scale_inv is one ulp too large: the kit's own test proves that exactly the cases covering
 * that quantizer then fail. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "qspec/backend.h"

/* RNE of a finite positive float to an FP8 code with e exponent bits and m mantissa
 * bits (bias 2^(e-1)-1), saturating at the code max_code; specials handled by the caller. */
static uint32_t fp8_magnitude(float a, int e, int m, uint32_t max_code)
{
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    int bias = (1 << (e - 1)) - 1;
    int exp = (int)((bits >> 23) & 0xFF) - 127;
    uint32_t sig = (bits & 0x7FFFFF) | (exp > -127 ? 0x800000u : 0);
    if (exp == -127)
        exp = -126;
    int min_exp = 1 - bias;
    /* number of low bits of sig to drop so that the result has m fraction bits */
    int shift = 23 - m + (exp < min_exp ? min_exp - exp : 0);
    if (shift > 31)
        return 0;
    uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    /* q is the significand in units of the result's ulp; rebuild the code */
    int e_field = exp < min_exp ? 0 : exp + bias;
    uint32_t code;
    if (e_field == 0)
        code = q; /* subnormal, may carry into the first normal binade */
    else
        code = ((uint32_t)e_field << m) + (q - (1u << m));
    return code > max_code ? max_code : code;
}

static uint8_t encode(qs_dtype dt, float x)
{
    int e4 = dt == QS_E4M3;
    uint32_t max_code = e4 ? 0x7E : 0x7B;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    if ((bits & 0x7FFFFFFF) > 0x7F800000)
        return 0x7F; /* NaN: canonical, sign dropped */
    if ((bits & 0x7FFFFFFF) == 0x7F800000)
        return (uint8_t)(sign | max_code);
    float a = x < 0 ? -x : x;
    uint8_t code = (uint8_t)(sign | fp8_magnitude(a, e4 ? 4 : 5, e4 ? 3 : 2, max_code));
    return code;
}

static qs_status example_cast(void *state, const qs_cast_args *args)
{
    (void)state;
    if ((args->dtype != QS_E4M3 && args->dtype != QS_E5M2) || args->mode.round != QS_ROUND_RNE ||
        args->mode.overflow != QS_OVF_SATFINITE)
        return QS_ERR_UNSUPPORTED;
    for (size_t i = 0; i < args->n; i++)
        args->out[i] = encode(args->dtype, args->in[i]);
    return QS_OK;
}

/* Element i of a 2-D FP32, BF16 or FP16 host tensor as FP32. */
static float load(const qs_tensor *x, size_t i)
{
    uint32_t bits;
    float f;
    if (x->dtype == QS_FP32)
        return ((const float *)x->data)[i];
    uint16_t h = ((const uint16_t *)x->data)[i];
    if (x->dtype == QS_BF16) {
        bits = (uint32_t)h << 16;
    } else { /* FP16: rebuild the FP32 bits */
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
        if (e == 0x1F) {
            bits = sign | 0x7F800000u | (m << 13);
        } else if (e == 0) {
            f = (float)m * 0x1p-24f;
            return sign ? -f : f;
        } else {
            bits = sign | ((e + 112) << 23) | (m << 13);
        }
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Current scaling as spec/recipes.md defines it: amax (NaN ignored), the scale
 * fp8_max / amax (1 for 0, Inf or NaN; FLT_MAX for an infinite quotient; optionally
 * floored to a power of two), scale_inv = 1 / scale, codes of x * scale; the columnwise
 * copy is the transpose. */
static qs_status quantize_current(const qs_quantize_args *a)
{
    const qs_tensor *x = a->x;
    qs_quantized *z = a->out;
    int64_t rows = x->shape[0], cols = x->shape[1];
    float amax = 0.0f;
    for (size_t i = 0; i < x->numel; i++) {
        float v = load(x, i);
        v = v < 0 ? -v : v;
        if (v > amax)
            amax = v;
    }
    float floor_amax = amax < a->cfg->eps ? a->cfg->eps : amax; /* the reported amax is raw */
    float fmax = z->elem == QS_E4M3 ? 448.0f : 57344.0f, scale = 1.0f;
    if (floor_amax != 0.0f && floor_amax <= FLT_MAX) {
        scale = fmax / floor_amax;
        if (scale > FLT_MAX)
            scale = FLT_MAX;
        if (a->cfg->pow2) {
            uint32_t b;
            memcpy(&b, &scale, sizeof b);
            b &= 0xFF800000u;
            memcpy(&scale, &b, sizeof b);
        }
    }
    float scale_inv = 1.0f / scale;
#ifdef QS_EXAMPLE_PLANT_ERROR
    {
        uint32_t b;
        memcpy(&b, &scale_inv, sizeof b);
        b += 1; /* the planted error: one ulp */
        memcpy(&scale_inv, &b, sizeof b);
    }
#endif
    for (int d = 0; d < 2; d++) {
        if (!z->data[d].data)
            continue;
        ((float *)z->scale[d].data)[0] = scale_inv;
        z->amax[d] = amax;
        z->global_enc[d] = scale;
        z->global_dec[d] = scale_inv;
    }
    for (int64_t m = 0; m < rows; m++)
        for (int64_t k = 0; k < cols; k++) {
            uint8_t code = encode(z->elem, load(x, (size_t)(m * cols + k)) * scale);
            if (z->data[0].data)
                ((uint8_t *)z->data[0].data)[m * cols + k] = code;
            if (z->data[1].data)
                ((uint8_t *)z->data[1].data)[k * rows + m] = code;
        }
    return QS_OK;
}

static qs_status example_quantize(void *state, const qs_quantize_args *args)
{
    (void)state;
    if (args->cfg->kind != QS_RECIPE_CURRENT || args->x->ndim != 2)
        return QS_ERR_UNSUPPORTED;
    return quantize_current(args);
}

static qs_status example_open(void **state, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    *state = NULL;
    return QS_OK;
}

static void example_close(void *state)
{
    (void)state;
}

static const char *example_device(void *state)
{
    (void)state;
    return "host CPU (example plugin)";
}

static const qs_backend example_table = {QS_BACKEND_ABI_VERSION,
                                         sizeof(qs_backend),
                                         "example",
                                         "1.0",
                                         QS_CAP_CAST | QS_CAP_QUANT_CURRENT,
                                         example_open,
                                         example_close,
                                         example_device,
                                         example_cast,
                                         example_quantize,
                                         NULL};

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    return abi_version == QS_BACKEND_ABI_VERSION ? &example_table : NULL;
}
