/* fill_backend.c: the example plugin of docs/examples with its gemm, sdpa and gdn slots
 * answered by fills of their outputs (the example's sdpa_tokens and gdn_rows size them), in no
 * time: a run through it costs what the kit's own work costs (the engine's host work, the inputs,
 * the comparisons) plus the example's quantizers, which `qspec run --timing` separates
 * ([CASE-TIMING]). Its results are wrong by design; it measures, it passes nothing (docs/perf.md,
 * "The kit's own time"). */
#define qs_backend_entry_v1 example_entry_v1
#include "example_backend.c"
#undef qs_backend_entry_v1

const qs_backend *qs_backend_entry_v1(uint32_t abi_version);

static void fill_f32(float *x, int64_t n, float v)
{
    for (int64_t i = 0; x && i < n; i++)
        x[i] = v;
}

static qs_status fill_gemm(void *state, qs_gemm_args *a)
{
    (void)state;
    memset(a->y->data, 0, a->y->nbytes);
    a->claim = QS_GEMM_CLAIM_FP32;
    return QS_OK;
}

static qs_status fill_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    int64_t t = sdpa_tokens(&a->p, 0);
    fill_f32(a->o, t * a->p.h * a->p.dv, 0.25f);
    fill_f32(a->lse, t * a->p.h, 1.0f);
    return QS_OK;
}

static qs_status fill_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    int64_t t = sdpa_tokens(&a->p, 0), u = sdpa_tokens(&a->p, 1);
    fill_f32(a->dq, t * a->p.h * a->p.d, 0.125f);
    fill_f32(a->dk, u * a->p.hkv * a->p.d, 0.125f);
    fill_f32(a->dv, u * a->p.hkv * a->p.dv, 0.125f);
    return QS_OK;
}

static qs_status fill_gdn_fwd(void *state, qs_gdn_args *a)
{
    (void)state;
    const qs_gdn_params *p = &a->p;
    fill_f32(a->o, gdn_rows(p) * p->hv * p->dv, 0.25f);
    fill_f32(a->ht, p->b * p->hv * p->dk * p->dv, 0.0f);
    return QS_OK;
}

static qs_status fill_gdn_bwd(void *state, qs_gdn_args *a)
{
    (void)state;
    const qs_gdn_params *p = &a->p;
    int64_t t = gdn_rows(p);
    fill_f32(a->dq, t * p->h * p->dk, 0.125f);
    fill_f32(a->dk, t * p->h * p->dk, 0.125f);
    fill_f32(a->dv, t * p->hv * p->dv, 0.125f);
    fill_f32(a->dg, t * p->hv, 0.125f);
    fill_f32(a->dbeta, t * p->hv, 0.125f);
    fill_f32(a->dh0, p->b * p->hv * p->dk * p->dv, 0.0f);
    return QS_OK;
}

static qs_backend fill_table;

const qs_backend *qs_backend_entry_v1(uint32_t abi_version)
{
    const qs_backend *t = example_entry_v1(abi_version);
    if (!t)
        return NULL;
    fill_table = *t;
    fill_table.name = "fill";
    fill_table.gemm = fill_gemm;
    fill_table.sdpa_fwd = fill_sdpa_fwd;
    fill_table.sdpa_bwd = fill_sdpa_bwd;
    fill_table.gdn_fwd = fill_gdn_fwd;
    fill_table.gdn_bwd = fill_gdn_bwd;
    return &fill_table;
}
