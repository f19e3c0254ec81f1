/* mathf.h: correctly rounded binary32 elementary functions (spec/mathf.md).
 * Every function returns the binary32 value nearest (ties to even) to the exact
 * mathematical result, on every C11 compiler and CPU; the reference uses these and never
 * libm for anything whose bits are compared. Compositions (sigmoid, softplus, silu, gelu) are
 * defined by their exact operation order in spec/mathf.md, not by correct rounding. */
#ifndef QSPEC_MATHF_H
#define QSPEC_MATHF_H

#ifdef __cplusplus
extern "C" {
#endif

float qs_expf(float x);       /* e^x, correctly rounded [MATH-EXP] */
float qs_exp2f(float x);      /* 2^x, correctly rounded [MATH-EXP2] */
float qs_logf(float x);       /* ln x, correctly rounded [MATH-LOG] */
float qs_log1pf(float x);     /* ln(1+x), correctly rounded [MATH-LOG1P] */
float qs_sinf(float x);       /* sin x, correctly rounded for |x| <= QS_MATHF_TRIG_MAX [MATH-SIN] */
float qs_cosf(float x);       /* cos x, correctly rounded for |x| <= QS_MATHF_TRIG_MAX [MATH-COS] */
float qs_sqrtf(float x);      /* IEEE square root [MATH-SQRT] */
float qs_rsqrtf(float x);     /* 1/sqrt(x), correctly rounded [MATH-RSQRT] */
float qs_sigmoidf(float x);   /* composition of spec/mathf.md [MATH-SIGMOID] */
float qs_softplusf(float x);  /* composition of spec/mathf.md [MATH-SOFTPLUS] */
float qs_siluf(float x);      /* composition of spec/mathf.md [MATH-SILU] */
float qs_geluf(float x);      /* tanh-form GELU, composition of spec/mathf.md [MATH-GELU] */
float qs_gelu_gradf(float x); /* its derivative, composition of spec/mathf.md [MATH-GELU-GRAD] */

/* The largest |x| for which qs_sinf/qs_cosf are specified; beyond it they return NaN. */
#define QS_MATHF_TRIG_MAX 1048576.0f

#ifdef __cplusplus
}
#endif
#endif
