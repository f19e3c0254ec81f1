/* example_backend.c: a small backend plugin, built the way a vendor builds one: against
 * the installed headers only (include/qspec/backend.h), never against libqspec. It
 * implements the `cast` slot for E4M3 and E5M2 under RNE with the satfinite policy, and
 * claims nothing else, so every other case is reported as not supported.
 * Built with -DQS_EXAMPLE_PLANT_ERROR it returns one code too high for E4M3 values in
 * [1, 2): the kit's own test proves that exactly the cases covering E4M3 then fail. */
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
#ifdef QS_EXAMPLE_PLANT_ERROR
    if (e4 && a >= 1.0f && a < 2.0f)
        code++;
#endif
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

static const qs_backend example_table = {
    QS_BACKEND_ABI_VERSION, sizeof(qs_backend), "example",    "1.0", QS_CAP_CAST, example_open,
    example_close,          example_device,     example_cast, NULL,  NULL};

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    return abi_version == QS_BACKEND_ABI_VERSION ? &example_table : NULL;
}
