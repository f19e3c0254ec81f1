/* recipe_delayed.c: delayed (tensorwise, stateful) FP8 scaling of spec/recipes.md — the
 * quantization with the stored scale, the amax record, calibration, and the explicit
 * update. The two history-roll variants (TE fused, TE unfused) are the two functions of
 * roll_table and nothing else in this file depends on which one is chosen. */
#include <float.h>
#include <math.h>

#include "recipe_internal.h"

/* fmaxf of C and CUDA: a NaN operand yields the other operand. */
static float qsi_fmaxf(float a, float b)
{
    if (b != b)
        return a;
    if (a != a)
        return b;
    return a > b ? a : b;
}

/* [REC-DS-ROLL-FUSED]: TE's fused kernel. A zero current amax skips the roll and returns 0
 * (so the scale is kept); otherwise new[i] = old[i+1] (i < L-1), new[L-1] = last,
 * new[0] = 0, and amax is the fmaxf over the rolled window (or the last amax). */
static float roll_fused(qs_delayed_state *st, qs_amax_algo algo)
{
    float last = st->history[0];
    if (last == 0.0f)
        return 0.0f;
    float amax = 0.0f;
    for (int64_t i = 0; i < st->len; i++) {
        float a = i < st->len - 1 ? st->history[i + 1] : last;
        amax = qsi_fmaxf(amax, a);
        st->history[i] = i > 0 ? a : 0.0f;
    }
    return algo == QS_AMAX_MAX ? amax : last;
}

/* [REC-DS-ROLL-UNFUSED]: TE's Python update. amax first (max over all L slots with NaN
 * propagating, or slot 0), then always roll by one (circular) and zero slot 0. */
static float roll_unfused(qs_delayed_state *st, qs_amax_algo algo)
{
    float amax = st->history[0];
    if (algo == QS_AMAX_MAX) {
        for (int64_t i = 1; i < st->len && amax == amax; i++) {
            float a = st->history[i];
            if (a != a || a > amax)
                amax = a;
        }
    }
    float first = st->history[0];
    for (int64_t i = 0; i < st->len - 1; i++)
        st->history[i] = st->history[i + 1];
    st->history[st->len - 1] = first;
    st->history[0] = 0.0f;
    return amax;
}

typedef float (*roll_fn)(qs_delayed_state *st, qs_amax_algo algo);

/* The per-peer variant table [REC-VARIANTS], indexed by qs_ds_roll. */
static const roll_fn roll_table[QS_DS_ROLL_COUNT] = {roll_fused, roll_unfused};

/* 2^e for an integer e in -126..127, exactly. */
static float pow2f(int e)
{
    return qs_f32_from_bits((uint32_t)(e + 127) << 23);
}

/* [REC-DS-SCALE]: (fp8_max * 2^-margin) / amax when amax is finite and > 0, else the
 * previous scale; an infinite scale becomes FLT_MAX; scale_inv = 1/scale (RN). */
static void update_scale(qs_delayed_state *st, float amax, float fp8_max, int margin)
{
    float scale = st->scale;
    if (isfinite(amax) && amax > 0.0f)
        scale = (fp8_max * pow2f(-margin)) / amax;
    if (isinf(scale))
        scale = FLT_MAX;
    st->scale = scale;
    st->scale_inv = 1.0f / scale;
}

qs_status qs_delayed_update(qs_ctx *ctx, qs_quantizer *q)
{
    if (!q || q->cfg.kind != QS_RECIPE_DELAYED || !q->ds.history)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "delayed update: q is not an initialized delayed quantizer");
    if ((int)q->cfg.roll < 0 || q->cfg.roll >= QS_DS_ROLL_COUNT)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "delayed update: unknown roll variant");
    float amax = roll_table[q->cfg.roll](&q->ds, q->cfg.algo);
    update_scale(&q->ds, amax, qsi_elem_max(qs_recipe_elem_dtype(&q->cfg)), q->cfg.margin);
    return QS_OK;
}

qs_status qs_delayed_calibrate(qs_ctx *ctx, qs_quantizer *q, const qs_tensor *x)
{
    if (!q || q->cfg.kind != QS_RECIPE_DELAYED || !q->ds.history)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG,
                            "delayed calibrate: q is not an initialized delayed quantizer");
    qsi_input in;
    qs_status s = qsi_input_load(ctx, x, &in);
    if (s != QS_OK)
        return s;
    q->ds.history[0] = qsi_amax_nan(in.x, in.m * in.k); /* [REC-DS-CALIB] */
    qsi_input_free(&in);
    return QS_OK;
}

/* [REC-DS-QUANT] [REC-DS-RECORD]: encode with the stored scale; history[0] becomes the
 * larger of itself and amax(x) (a NaN in history[0] stays). */
qs_status qsi_quantize_delayed(qs_ctx *ctx, qs_quantizer *q, const qsi_input *in, qs_quantized *out)
{
    float amax = qsi_amax(in->x, in->m * in->k, 1);
    float scale = q->ds.scale;
    float scale_inv = 1.0f / scale;
    qs_status s = qsi_tensorwise_encode(ctx, in, scale, scale_inv, amax, out);
    if (s != QS_OK)
        return s;
    return qs_delayed_record(ctx, q, amax);
}

/* [REC-DS-RECORD] */
qs_status qs_delayed_record(qs_ctx *ctx, qs_quantizer *q, float amax)
{
    if (!q || q->cfg.kind != QS_RECIPE_DELAYED || !q->ds.history)
        return qs_ctx_error(ctx, QS_ERR_INVALID_ARG, "q is not an initialized delayed quantizer");
    if (amax > q->ds.history[0])
        q->ds.history[0] = amax;
    return QS_OK;
}
