/* format.h: the number formats of spec/formats.md — exact decoding and correctly
 * specified encoding from FP32 and FP64, for every rounding mode and overflow policy.
 * All formats share one encode/decode interface driven by a format descriptor
 * (qs_format_info); the per-peer differences (overflow policy) live in one table. */
#ifndef QSPEC_FORMAT_H
#define QSPEC_FORMAT_H

#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rounding modes [FMT-ROUND-*]. */
typedef enum qs_round {
    QS_ROUND_RNE = 0, /* to nearest, ties to even (default) */
    QS_ROUND_RZ,      /* toward zero */
    QS_ROUND_RU,      /* toward +Inf */
    QS_ROUND_RD,      /* toward -Inf */
    QS_ROUND_AWAY,    /* to nearest, ties away from zero (microxcaling 'nearest') */
    QS_ROUND_SR,      /* stochastic, with caller-given random bits [FMT-ROUND-SR] */
    QS_ROUND_COUNT
} qs_round;

/* Overflow policies [FMT-OVF-*]. */
typedef enum qs_overflow {
    QS_OVF_SATFINITE = 0, /* CUDA __NV_SATFINITE: overflow and +-Inf give +-max; NaN canonical */
    QS_OVF_NOSAT,         /* overflow gives Inf (or NaN where the format has no Inf) */
    QS_OVF_MLDTYPES,      /* ml_dtypes 0.7.0 astype: overflow and Inf give Inf (NaN where
                             there is no Inf), NaN keeps its sign [FMT-OVF-MLDTYPES] */
    QS_OVF_COUNT
} qs_overflow;

/* The descriptor of an encoded floating-point format. */
typedef struct qs_format_info {
    qs_dtype dtype;
    const char *name; /* "e4m3" */
    unsigned bits;    /* storage bits of one code: 4, 6, 8, 16, 32 */
    unsigned ebits;   /* exponent bits */
    unsigned mbits;   /* explicit mantissa (fraction) bits */
    int bias;
    int has_sign;         /* 0 for E8M0 */
    int has_inf;          /* IEEE-style Inf at max exponent, zero mantissa */
    int nan_kind;         /* 0: no NaN; 1: IEEE (max exponent, mantissa != 0);
                             2: only all-ones magnitude (E4M3 S.1111.111); 3: only code 0xFF (E8M0) */
    int has_zero;         /* 0 for E8M0 */
    uint32_t max_code;    /* code of the largest finite positive value */
    double max_value;     /* that value */
    double min_subnormal; /* smallest positive value (2^-127 for E8M0) */
    uint32_t nan_code;    /* canonical positive NaN code (0 when no NaN) */
} qs_format_info;

/* The descriptor of an encoded format (FP32, BF16, FP16, E4M3, E5M2, E8M0, E2M1, E2M3,
 * E3M2); NULL for any other dtype. */
const qs_format_info *qs_format_info_get(qs_dtype dt);
/* Names: "rne".."sr" and "satfinite", "nosat", "mldtypes"; parse returns -1 if unknown. */
const char *qs_round_name(qs_round r);
int qs_round_from_name(const char *name);
const char *qs_overflow_name(qs_overflow o);
int qs_overflow_from_name(const char *name);

/* Exact decoding of a code of format dt to FP64 and FP32 [FMT-DECODE]. Codes wider than
 * the format are masked to its bits. NaN codes decode to a NaN carrying the code's sign. */
double qs_decode_f64(qs_dtype dt, uint32_t code);
float qs_decode_f32(qs_dtype dt, uint32_t code);

/* The conversion mode: rounding, overflow policy and, for QS_ROUND_SR, 32 random bits. */
typedef struct qs_cast_mode {
    qs_round round;
    qs_overflow overflow;
    uint32_t sr_bits;
} qs_cast_mode;

/* One rounding of x to format dt under mode [FMT-ENCODE]; writes the code to *code.
 * Returns QS_ERR_INVALID_ARG for an unknown dtype, mode or policy. For E8M0, the value
 * encoded is the unsigned power of two (spec/formats.md [FMT-E8M0-*]). */
qs_status qs_encode_f32(qs_dtype dt, float x, qs_cast_mode mode, uint32_t *code);
qs_status qs_encode_f64(qs_dtype dt, double x, qs_cast_mode mode, uint32_t *code);

/* Exception flags of one encoding [FMT-FLAGS]: the result differs from x (inexact), x was
 * finite and its rounded magnitude exceeded the format's max (overflow), the code is a NaN. */
enum { QS_FLAG_INEXACT = 1u, QS_FLAG_OVERFLOW = 2u, QS_FLAG_NAN = 4u };
/* qs_encode_f64 that also reports the QS_FLAG_* bits of the encoding in *flags (may be NULL). */
qs_status qs_encode_f64_flags(qs_dtype dt, double x, qs_cast_mode mode, uint32_t *code,
                              unsigned *flags);

/* Shorthand for the conversions the recipes use: RNE, with the given policy. */
uint8_t qs_encode_e4m3(float x, qs_overflow ovf);
uint8_t qs_encode_e5m2(float x, qs_overflow ovf);
uint8_t qs_encode_e2m1(float x, qs_overflow ovf);
/* CUDA __float2bfloat16_rn / __float2half_rn: RNE, overflow to Inf; every NaN, of either
 * sign and any payload, gives 0x7FFF: the sign is dropped [FMT-BF16-ENC] [FMT-FP16-ENC]. */
uint16_t qs_f32_to_bf16(float x);
uint16_t qs_f32_to_f16(float x);
float qs_bf16_to_f32(uint16_t h);
float qs_f16_to_f32(uint16_t h);
/* Rounds x to the nearest BF16 value and back (the BF16 rounding points of the spec). */
float qs_round_bf16(float x);
float qs_round_f16(float x);

/* Bit access to FP32 without aliasing violations. */
uint32_t qs_f32_bits(float x);
float qs_f32_from_bits(uint32_t u);
uint64_t qs_f64_bits(double x);
double qs_f64_from_bits(uint64_t u);

#ifdef __cplusplus
}
#endif
#endif
