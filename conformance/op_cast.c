/* op_cast.c: the `cast` op — element format conversion of spec/formats.md.
 * params: to (format), round (rne|rz|ru|rd|away|sr), overflow (satfinite|nosat|mldtypes),
 * sr_seed, sr_offset (stochastic rounding bits, [RNG-SR-BITS]); input x (fp32 or fp64);
 * output y, the codes, as a tensor of the target format. */
#include <stdlib.h>
#include <string.h>

#include "opcheck.h"
#include "ops.h"
#include "qspec/format.h"
#include "qspec/random.h"

static const char *const round_names[] = {"rne", "rz", "ru", "rd", "away", "sr", NULL};
static const char *const ovf_names[] = {"satfinite", "nosat", "mldtypes", NULL};
static const char *const format_names[] = {"fp32", "bf16", "fp16", "e4m3", "e5m2",
                                           "e8m0", "e2m1", "e2m3", "e3m2", NULL};

typedef struct cast_params {
    qs_dtype to;
    qs_cast_mode mode;
    uint64_t sr_seed, sr_offset;
} cast_params;

static qs_status cast_params_get(qs_ctx *ctx, const qsk_case *c, cast_params *p)
{
    static const char *const keys[] = {"to", "round", "overflow", "sr_seed", "sr_offset", NULL};
    qs_status st = qsk_check_param_keys(ctx, c, keys);
    if (st != QS_OK)
        return st;
    if (!qsk_case_param(c, "to"))
        return qs_ctx_error(ctx, QS_ERR_FORMAT, "%s:%d:%d: op 'cast' needs the parameter 'to'",
                            c->file, c->op_pos.line, c->op_pos.col);
    int to = qsk_param_choice(ctx, c, "to", format_names, 0);
    int r = qsk_param_choice(ctx, c, "round", round_names, 0);
    int o = qsk_param_choice(ctx, c, "overflow", ovf_names, 0);
    if (to < 0 || r < 0 || o < 0)
        return QS_ERR_FORMAT;
    p->to = qs_dtype_from_name(format_names[to]);
    p->mode = (qs_cast_mode){(qs_round)r, (qs_overflow)o, 0};
    st = qsk_param_u64(ctx, c, "sr_seed", 0, &p->sr_seed);
    if (st == QS_OK)
        st = qsk_param_u64(ctx, c, "sr_offset", 0, &p->sr_offset);
    return st;
}

static qs_status cast_check(qs_ctx *ctx, const qsk_case *c)
{
    static const char *const inputs[] = {"x", NULL};
    static const qs_dtype dtypes[] = {QS_FP32, QS_FP64, QS_DTYPE_INVALID};
    static const char *const outputs[] = {"y", NULL};
    cast_params p;
    qs_status st = cast_params_get(ctx, c, &p);
    if (st == QS_OK)
        st = qsk_check_inputs(ctx, c, inputs, dtypes, 0, QS_MAX_DIMS);
    if (st == QS_OK)
        st = qsk_check_outputs(ctx, c, outputs);
    return st;
}

static void put_code(qs_tensor *t, size_t i, uint32_t code)
{
    uint8_t *b = t->data;
    switch (qs_dtype_bits(t->dtype)) {
    case 4:
        b[i / 2] = (uint8_t)((b[i / 2] & (i % 2 ? 0x0F : 0xF0)) | ((code & 0xF) << (4 * (i % 2))));
        break;
    case 8:
        b[i] = (uint8_t)code;
        break;
    case 16:
        ((uint16_t *)t->data)[i] = (uint16_t)code;
        break;
    default:
        ((uint32_t *)t->data)[i] = code;
        break;
    }
}

static qs_status cast_ref(qs_ctx *ctx, const qsk_case *c, const qs_tensor *inputs, qsk_results *out)
{
    cast_params p;
    qs_status st = cast_params_get(ctx, c, &p);
    if (st != QS_OK)
        return st;
    const qs_tensor *x = &inputs[0];
    qs_tensor y;
    st = qs_tensor_alloc(ctx, &y, p.to, x->ndim, x->shape);
    if (st != QS_OK)
        return st;
    for (size_t i = 0; i < x->numel; i++) {
        qs_cast_mode m = p.mode;
        m.sr_bits = qs_random_u32(p.sr_seed, p.sr_offset, i); /* [RNG-SR-BITS] */
        uint32_t code = 0;
        st = x->dtype == QS_FP64 ? qs_encode_f64(p.to, ((const double *)x->data)[i], m, &code)
                                 : qs_encode_f32(p.to, ((const float *)x->data)[i], m, &code);
        if (st != QS_OK) {
            qs_tensor_free(&y);
            return qs_ctx_error(ctx, st, "%s: case %s: encoding element %zu failed", c->file, c->id,
                                i);
        }
        put_code(&y, i, code);
    }
    return qsk_results_add(ctx, out, "y", &y);
}

/* The cast16 slot [CASE-OP-CAST]: every format of at most 16 bits, any mode, one random
 * word per element for sr ([RNG-SR-BITS], as the reference draws them). */
static qs_status cast16_backend(qs_ctx *ctx, const qsk_plugin *pl, const cast_params *p,
                                const qs_tensor *x, qs_tensor *y)
{
    size_t n = x->numel ? x->numel : 1;
    uint16_t *codes = malloc(n * sizeof *codes);
    uint32_t *bits = p->mode.round == QS_ROUND_SR ? malloc(n * sizeof *bits) : NULL;
    qs_status st = codes && (bits || p->mode.round != QS_ROUND_SR)
                       ? QS_OK
                       : qs_ctx_error(ctx, QS_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QS_OK && bits && i < x->numel; i++)
        bits[i] = qs_random_u32(p->sr_seed, p->sr_offset, i);
    if (st == QS_OK) {
        qs_cast16_args args = {p->to, p->mode.round, p->mode.overflow, x->numel, x->data,
                               bits,  codes};
        st = pl->table->cast16(pl->state, &args);
        if (st != QS_OK && st != QS_ERR_UNSUPPORTED)
            st = qs_ctx_error(ctx, st, "backend %s: cast16 failed: %s", pl->table->name,
                              qs_status_str(st));
    }
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, y, p->to, x->ndim, x->shape);
    for (size_t i = 0; st == QS_OK && i < x->numel; i++)
        put_code(y, i, codes[i]);
    free(codes);
    free(bits);
    return st;
}

/* The one-byte cast slot: formats of at most 8 bits, no stochastic rounding. */
static qs_status cast8_backend(qs_ctx *ctx, const qsk_plugin *pl, const cast_params *p,
                               const qs_tensor *x, qs_tensor *y)
{
    if (!(pl->table->caps & QS_CAP_CAST) || !pl->table->cast || qs_dtype_bits(p->to) > 8 ||
        p->mode.round == QS_ROUND_SR)
        return QS_ERR_UNSUPPORTED;
    qs_tensor codes;
    int64_t n = (int64_t)x->numel;
    qs_status st = qs_tensor_alloc(ctx, &codes, QS_U8, 1, &n);
    if (st != QS_OK)
        return st;
    qs_cast_args args = {p->to, p->mode, x->numel, x->data, codes.data};
    st = pl->table->cast(pl->state, &args);
    if (st == QS_OK)
        st = qs_tensor_alloc(ctx, y, p->to, x->ndim, x->shape);
    else if (st != QS_ERR_UNSUPPORTED)
        st = qs_ctx_error(ctx, st, "backend %s: cast failed: %s", pl->table->name,
                          qs_status_str(st));
    for (size_t i = 0; st == QS_OK && i < x->numel; i++)
        put_code(y, i, ((const uint8_t *)codes.data)[i]);
    qs_tensor_free(&codes);
    return st;
}

/* [CASE-BACKEND-UNSUPPORTED]: the cast16 slot when the plugin has it (QS_CAP_CAST16), the
 * one-byte cast slot for what it covers, or not supported. */
static qs_status cast_backend(qs_ctx *ctx, const qsk_plugin *pl, const qsk_case *c,
                              const qs_tensor *inputs, const qsk_results *ref, qsk_results *out)
{
    (void)ref; /* compared by the run (qsk_compare_outputs) */
    cast_params p;
    qs_status st = cast_params_get(ctx, c, &p);
    if (st != QS_OK)
        return st;
    const qs_tensor *x = &inputs[0];
    if (x->dtype != QS_FP32)
        return qs_ctx_error(ctx, QS_ERR_UNSUPPORTED, "the cast slots take FP32 input, not %s",
                            qs_dtype_name(x->dtype));
    qs_tensor y;
    memset(&y, 0, sizeof y);
    st = QS_ERR_UNSUPPORTED;
    if ((pl->table->caps & QS_CAP_CAST16) && pl->table->cast16 && qs_dtype_bits(p.to) <= 16)
        st = cast16_backend(ctx, pl, &p, x, &y);
    if (st == QS_ERR_UNSUPPORTED)
        st = cast8_backend(ctx, pl, &p, x, &y);
    if (st == QS_OK)
        return qsk_results_add(ctx, out, "y", &y);
    qs_tensor_free(&y);
    if (st == QS_ERR_UNSUPPORTED) { /* the reason line ([CASE-BACKEND-UNSUPPORTED]) */
        int bits = qs_dtype_bits(p.to), sr = p.mode.round == QS_ROUND_SR;
        int tried16 = (pl->table->caps & QS_CAP_CAST16) && pl->table->cast16 && bits <= 16;
        int tried8 = (pl->table->caps & QS_CAP_CAST) && pl->table->cast && bits <= 8 && !sr;
        qs_ctx_error(ctx, st, "no cast of FP32 to %s%s: %s", qs_dtype_name(p.to),
                     sr ? " with stochastic rounding" : "",
                     tried16 && tried8 ? "the backend's cast16 and cast slots refused it"
                     : tried16         ? "the backend's cast16 slot refused it"
                     : tried8          ? "the backend's cast slot refused it"
                     : bits > 8 || sr  ? "it needs the cast16 slot (QS_CAP_CAST16)"
                                       : "no cast slot (QS_CAP_CAST)");
    }
    return st;
}

const qsk_op qsk_op_cast = {"cast", "element conversion to a format (spec/formats.md)", cast_check,
                            cast_ref, cast_backend};
