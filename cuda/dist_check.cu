/* dist_check.cu: the distributed cases of spec/distributed.md on GPUs. One process per GPU,
 * joined by NCCL (cuda/qc_nccl.cu), quantizes its shard with the CUDA kernels
 * (cuda/qc_kernels.h) and the amax all-reduce, and compares its reduced amaxes, delayed
 * states and codes bitwise with the reference's simulation of the same ranks (libqspec,
 * include/qspec/distributed.h), which every process runs for all ranks on the host.
 * Usage: dist_check [--ranks N]; N defaults to the number of visible GPUs. Exit 0 when every
 * case passed on every rank, 1 when one failed, 2 for bad usage or a setup failure. */
#include <cuda_runtime.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qc_kernels.h"
#include "qc_nccl.h"
#include "qspec/distributed.h"
#include "qspec/format.h"
#include "qspec/random.h"

namespace
{

/* ------------------------------------------------------------ reporting */

struct rank_ctx {
    int rank, nranks;
    qc_nccl world, pairs;
    int failures;
};

void fail(rank_ctx *rc, const char *name, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("rank %d: case %s: FAIL: %s\n", rc->rank, name, msg);
    fflush(stdout);
    rc->failures++;
}

void pass(const rank_ctx *rc, const char *name)
{
    printf("rank %d: case %s: ok\n", rc->rank, name);
    fflush(stdout);
}

/* Compares n bytes; reports the first mismatch with its index and both values in hex. */
bool same_bytes(rank_ctx *rc, const char *name, const char *what, const void *got, const void *want,
                size_t n)
{
    const uint8_t *g = static_cast<const uint8_t *>(got), *w = static_cast<const uint8_t *>(want);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i] != w[i] && bad++ == 0)
            first = i;
    if (bad)
        fail(rc, name, "%s: %zu of %zu bytes differ, first at %zu: device 0x%02X, reference 0x%02X",
             what, bad, n, first, g[first], w[first]);
    return bad == 0;
}

bool same_bits(rank_ctx *rc, const char *name, const char *what, float got, float want)
{
    if (qs_f32_bits(got) == qs_f32_bits(want))
        return true;
    fail(rc, name, "%s: device 0x%08X (%g), reference 0x%08X (%g)", what, qs_f32_bits(got),
         static_cast<double>(got), qs_f32_bits(want), static_cast<double>(want));
    return false;
}

/* ------------------------------------------------------------ device buffers */

bool to_device(qc_dev_buf &d, const void *h, size_t n)
{
    return (d.alloc(n) == cudaSuccess) &&
           cudaMemcpy(d.p, h, n, cudaMemcpyHostToDevice) == cudaSuccess;
}

bool to_host(void *h, const qc_dev_buf &d, size_t n)
{
    return cudaDeviceSynchronize() == cudaSuccess &&
           cudaMemcpy(h, d.p, n, cudaMemcpyDeviceToHost) == cudaSuccess;
}

/* ------------------------------------------------------------ the simulated ranks */

/* X [rows, cols] BF16, row m scaled by 2^(growth * m / rows): later ranks hold larger
 * values. The same on every process (Philox stream (seed, 0)). */
bool make_x(qs_tensor *t, int64_t rows, int64_t cols, uint64_t seed, int growth)
{
    int64_t shape[2] = {rows, cols};
    if (qs_tensor_alloc(nullptr, t, QS_BF16, 2, shape) != QS_OK)
        return false;
    uint16_t *v = static_cast<uint16_t *>(t->data);
    for (int64_t m = 0; m < rows; m++) {
        float mult = qs_f32_from_bits(static_cast<uint32_t>(127 + growth * m / rows) << 23);
        for (int64_t k = 0; k < cols; k++) {
            uint64_t i = static_cast<uint64_t>(m * cols + k);
            v[i] = qs_f32_to_bf16(qs_random_normal(seed, 0, i) * mult);
        }
    }
    return true;
}

/* A world of n simulated ranks with group 1 (all) and group 2 (pairs, color r / 2). */
struct sim {
    qs_dist_world w;
    qs_scope_token tok[QS_DIST_MAX_RANKS];
    bool ok;

    sim(int n, int group, qs_recipe_kind kind) : ok(false)
    {
        int pairs[QS_DIST_MAX_RANKS];
        for (int r = 0; r < n; r++)
            pairs[r] = r / 2;
        qs_scope_recipe rcp;
        if (qs_dist_world_init(nullptr, &w, n) != QS_OK)
            return;
        qs_autocast_params p = {1, 0, &rcp, group};
        ok = qs_dist_world_add_group(nullptr, &w, 1, nullptr) == QS_OK &&
             qs_dist_world_add_group(nullptr, &w, 2, pairs) == QS_OK &&
             qs_scope_recipe_default(nullptr, &rcp, kind) == QS_OK &&
             qs_dist_autocast_enter(nullptr, &w, &p, tok) == QS_OK;
    }
    ~sim()
    {
        qs_dist_world_free(&w);
    }
};

struct shards {
    qs_tensor part[QS_DIST_MAX_RANKS];
    const qs_tensor *ptr[QS_DIST_MAX_RANKS];
    int n = 0;
    bool split(const qs_tensor *x, int nranks)
    {
        if (qs_dist_split_rows(nullptr, x, nranks, nullptr, part) != QS_OK)
            return false;
        n = nranks;
        for (int r = 0; r < n; r++)
            ptr[r] = &part[r];
        return true;
    }
    ~shards()
    {
        for (int r = 0; r < n; r++)
            qs_tensor_free(&part[r]);
    }
};

struct quantized_set {
    qs_quantized q[QS_DIST_MAX_RANKS];
    qs_dist_record rec[QS_DIST_MAX_RANKS];
    int n = 0;
    ~quantized_set()
    {
        for (int r = 0; r < n; r++)
            qs_quantized_free(&q[r]);
    }
};

qc_input device_input(const qc_dev_buf &x, const qs_tensor *t)
{
    return qc_input{x.p, QC_IN_BF16, t->shape[0], t->shape[1]};
}

/* ------------------------------------------------------------ the cases */

/* Current scaling of one shard on the device: qc_amax, the all-reduce over comm, codes. */
bool device_current(rank_ctx *rc, const char *name, qc_nccl *comm, const qs_tensor *shard,
                    uint32_t *amax_bits, qs_tensor *row, qs_tensor *col)
{
    qc_dev_buf x, amax, drow, dcol;
    qc_input in = device_input(x, shard);
    qc_tw_params p = {0, 1, 1.0f, 0.0f, 0};
    bool ok = to_device(x, shard->data, shard->nbytes) &&
              (amax.alloc(sizeof(uint32_t)) == cudaSuccess) &&
              (drow.alloc(row->nbytes) == cudaSuccess) && (dcol.alloc(col->nbytes) == cudaSuccess);
    in.x = x.p;
    ok = ok && qc_amax(in, amax.u32()) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    ok = ok && qc_nccl_allreduce_amax(comm, amax.u32(), 1, 0) == ncclSuccess;
    ok = ok && qc_tensorwise(in, p, amax.u32(), drow.u8(), dcol.u8()) == cudaSuccess;
    ok = ok && to_host(row->data, drow, row->nbytes) && to_host(col->data, dcol, col->nbytes) &&
         to_host(amax_bits, amax, sizeof *amax_bits);
    if (!ok)
        fail(rc, name, "a CUDA or NCCL call failed (%s)", cudaGetErrorString(cudaGetLastError()));
    return ok;
}

/* Compares the device's reduced amax and codes with the simulated rank's quantization. */
void compare_tensorwise(rank_ctx *rc, const char *name, uint32_t amax_bits, const qs_tensor *row,
                        const qs_tensor *col, const qs_quantized *want)
{
    bool ok = same_bits(rc, name, "reduced amax", qs_f32_from_bits(amax_bits), want->amax[0]);
    ok = same_bytes(rc, name, "rowwise codes", row->data, want->data[QS_DIR_ROW].data,
                    row->nbytes) &&
         ok;
    ok = same_bytes(rc, name, "columnwise codes", col->data, want->data[QS_DIR_COL].data,
                    col->nbytes) &&
         ok;
    if (ok)
        pass(rc, name);
}

bool alloc_like(qs_tensor *t, const qs_tensor *like)
{
    return qs_tensor_alloc(nullptr, t, like->dtype, like->ndim, like->shape) == QS_OK;
}

/* [DIST-CS-AMAX] [DIST-CS-EQUAL] (and [DIST-NESTED] over the pairs): the sequence-parallel
 * shards of X under current scaling; then [DIST-REPLAY]: the shard again with the recorded
 * amax and no all-reduce. */
void case_current(rank_ctx *rc, int group)
{
    const char *name = group == 1 ? "current-sp-world" : "current-sp-pairs";
    int n = rc->nranks, r = rc->rank;
    qs_tensor X;
    shards sh;
    sim s(n, group, QS_RECIPE_CURRENT);
    qs_recipe_config cfg;
    quantized_set want;
    if (!make_x(&X, 48 * n, 96, 7 + static_cast<uint64_t>(group), 6) || !sh.split(&X, n) || !s.ok ||
        qs_recipe_config_default(nullptr, &cfg, QS_RECIPE_CURRENT, QS_ROLE_INPUT) != QS_OK ||
        qs_dist_quantize(nullptr, &s.w, &cfg, sh.ptr, want.q, want.rec) != QS_OK) {
        fail(rc, name, "the reference simulation failed");
        return;
    }
    want.n = n;
    qs_tensor row, col;
    uint32_t amax_bits = 0;
    qc_nccl *comm = group == 1 ? &rc->world : &rc->pairs;
    const int64_t start = comm->reductions; /* earlier cases may have used this communicator */
    if (alloc_like(&row, &want.q[r].data[QS_DIR_ROW]) &&
        alloc_like(&col, &want.q[r].data[QS_DIR_COL]) &&
        device_current(rc, name, comm, &sh.part[r], &amax_bits, &row, &col))
        compare_tensorwise(rc, name, amax_bits, &row, &col, &want.q[r]);
    if (comm->reductions - start != 1)
        fail(rc, name, "%lld all-reduce calls, expected 1 [DIST-COUNT]",
             static_cast<long long>(comm->reductions - start));

    if (group == 1) { /* [DIST-REPLAY]: the recorded amax, no collective */
        const char *rname = "replay-recorded-amax";
        int64_t before = comm->reductions;
        qc_dev_buf x, amax, drow, dcol;
        qc_tw_params p = {0, 1, 1.0f, 0.0f, 0};
        qc_input in = device_input(x, &sh.part[r]);
        qs_tensor row2, col2;
        bool ok = alloc_like(&row2, &row) && alloc_like(&col2, &col) &&
                  to_device(x, sh.part[r].data, sh.part[r].nbytes) &&
                  to_device(amax, &amax_bits, sizeof amax_bits) &&
                  (drow.alloc(row.nbytes) == cudaSuccess) &&
                  (dcol.alloc(col.nbytes) == cudaSuccess);
        in.x = x.p;
        ok = ok && qc_tensorwise(in, p, amax.u32(), drow.u8(), dcol.u8()) == cudaSuccess &&
             to_host(row2.data, drow, row2.nbytes) && to_host(col2.data, dcol, col2.nbytes);
        qs_quantized rep;
        ok = ok && qs_dist_quantize_replay(nullptr, &cfg, &want.rec[r], &sh.part[r], &rep) == QS_OK;
        if (!ok) {
            fail(rc, rname, "a CUDA call or the reference replay failed");
        } else {
            bool same =
                same_bytes(rc, rname, "replayed rowwise codes", row2.data, row.data, row.nbytes);
            same = same_bytes(rc, rname, "replayed columnwise codes", col2.data, col.data,
                              col.nbytes) &&
                   same;
            same = same_bytes(rc, rname, "reference replay", rep.data[QS_DIR_ROW].data, row2.data,
                              row2.nbytes) &&
                   same;
            if (comm->reductions != before)
                fail(rc, rname, "the replay ran an all-reduce [DIST-REPLAY]");
            else if (same)
                pass(rc, rname);
            qs_quantized_free(&rep);
        }
        qs_tensor_free(&row2);
        qs_tensor_free(&col2);
    }
    qs_tensor_free(&row);
    qs_tensor_free(&col);
    qs_tensor_free(&X);
}

/* [DIST-REDUCE-MAX] [DIST-REDUCE-NAN]: NaN on one rank, NaNs on two, +Inf, finite values. */
void case_nan(rank_ctx *rc)
{
    const char *name = "allreduce-nan-inf";
    enum { NV = 4 };
    int n = rc->nranks, r = rc->rank;
    float vals[QS_DIST_MAX_RANKS][NV], *p[QS_DIST_MAX_RANKS];
    for (int q = 0; q < n; q++) {
        for (int i = 0; i < NV; i++)
            vals[q][i] = static_cast<float>((q * 7 + i * 3) % 11) + 0.25f;
        p[q] = vals[q];
    }
    vals[n - 1][0] = qs_f32_from_bits(0x7FC00001u);
    vals[0][1] = qs_f32_from_bits(0x7F800000u);
    vals[0][2] = qs_f32_from_bits(0x7FC00005u);
    vals[n - 1][2] = qs_f32_from_bits(0xFFC00000u);
    uint32_t mine[NV];
    memcpy(mine, vals[r], sizeof mine);
    qs_dist_world w;
    if (qs_dist_world_init(nullptr, &w, n) != QS_OK ||
        qs_dist_world_add_group(nullptr, &w, 1, nullptr) != QS_OK ||
        qs_dist_allreduce_amax(nullptr, qs_dist_world_group(&w, 1), NV, p) != QS_OK) {
        fail(rc, name, "the reference simulation failed");
        qs_dist_world_free(&w);
        return;
    }
    qs_dist_world_free(&w);
    qc_dev_buf d;
    uint32_t got[NV];
    if (!to_device(d, mine, sizeof mine) ||
        qc_nccl_allreduce_amax(&rc->world, d.u32(), NV, 0) != ncclSuccess ||
        !to_host(got, d, sizeof got)) {
        fail(rc, name, "a CUDA or NCCL call failed");
        return;
    }
    bool ok = true;
    for (int i = 0; i < NV; i++)
        ok = same_bits(rc, name, "reduced value", qs_f32_from_bits(got[i]), vals[r][i]) && ok;
    if (ok)
        pass(rc, name);
}

/* [DIST-DS-UPDATE] [DIST-DS-EQUAL]: delayed scaling over four steps, one of them all zero.
 * The device quantizes with the rank's scale and reports its amax; the host keeps the state
 * (as the kit does for a backend), the device reduces the current slot. */
void case_delayed(rank_ctx *rc)
{
    const char *name = "delayed-steps";
    int n = rc->nranks, r = rc->rank;
    qs_recipe_config cfg;
    qs_quantizer mine, simq[QS_DIST_MAX_RANKS], *pq[QS_DIST_MAX_RANKS];
    qs_dist_world w;
    bool ok = qs_recipe_config_default(nullptr, &cfg, QS_RECIPE_DELAYED, QS_ROLE_INPUT) == QS_OK;
    cfg.history_len = 4;
    ok = ok && qs_quantizer_init(nullptr, &mine, &cfg) == QS_OK;
    for (int q = 0; q < n; q++) {
        ok = ok && qs_quantizer_init(nullptr, &simq[q], &cfg) == QS_OK;
        pq[q] = &simq[q];
    }
    ok = ok && qs_dist_world_init(nullptr, &w, n) == QS_OK &&
         qs_dist_world_add_group(nullptr, &w, 1, nullptr) == QS_OK;
    int before = rc->failures;
    for (int step = 0; step < 4 && ok; step++) {
        qs_tensor X;
        shards sh;
        quantized_set want;
        ok = make_x(&X, 32 * n, 64, 40 + static_cast<uint64_t>(step), 3 + step) && sh.split(&X, n);
        for (int q = 0; q < n && ok && step == 2; q++) /* all zero: the fused roll skips */
            memset(sh.part[q].data, 0, sh.part[q].nbytes);
        for (int q = 0; q < n && ok; q++) {
            ok = qs_quantize(nullptr, &simq[q], sh.ptr[q], &want.q[q]) == QS_OK;
            want.n = ok ? q + 1 : q;
        }
        ok = ok && qs_dist_delayed_update(nullptr, &w, 1, 1, pq) == QS_OK;
        if (!ok) {
            fail(rc, name, "step %d: the reference simulation failed", step);
            qs_tensor_free(&X);
            break;
        }
        qc_dev_buf x, amax, drow, dcol;
        qc_tw_params p = {0, 0, mine.ds.scale, 0.0f, 0};
        qc_input in = device_input(x, &sh.part[r]);
        qs_tensor row, col;
        uint32_t amax_bits = 0;
        ok = alloc_like(&row, &want.q[r].data[QS_DIR_ROW]) &&
             alloc_like(&col, &want.q[r].data[QS_DIR_COL]) &&
             to_device(x, sh.part[r].data, sh.part[r].nbytes) &&
             (amax.alloc(sizeof(uint32_t)) == cudaSuccess) &&
             (drow.alloc(row.nbytes) == cudaSuccess) && (dcol.alloc(col.nbytes) == cudaSuccess);
        in.x = x.p;
        ok = ok && qc_tensorwise(in, p, amax.u32(), drow.u8(), dcol.u8()) == cudaSuccess &&
             to_host(row.data, drow, row.nbytes) && to_host(col.data, dcol, col.nbytes) &&
             to_host(&amax_bits, amax, sizeof amax_bits);
        /* [REC-DS-RECORD] on the host, the key's slot reduced on the device [DIST-DS-UPDATE]. */
        ok = ok && qs_delayed_record(nullptr, &mine, qs_f32_from_bits(amax_bits)) == QS_OK;
        uint32_t slot = qs_f32_bits(mine.ds.history[0]);
        ok = ok && cudaMemcpy(amax.p, &slot, sizeof slot, cudaMemcpyHostToDevice) == cudaSuccess &&
             qc_nccl_allreduce_amax(&rc->world, amax.u32(), 1, 0) == ncclSuccess &&
             to_host(&slot, amax, sizeof slot);
        if (ok) {
            mine.ds.history[0] = qs_f32_from_bits(slot);
            ok = qs_delayed_update(nullptr, &mine) == QS_OK;
        }
        if (!ok) {
            fail(rc, name, "step %d: a CUDA, NCCL or state call failed", step);
        } else {
            same_bytes(rc, name, "rowwise codes", row.data, want.q[r].data[QS_DIR_ROW].data,
                       row.nbytes);
            same_bits(rc, name, "local amax", qs_f32_from_bits(amax_bits), want.q[r].amax[0]);
            same_bits(rc, name, "scale after the update", mine.ds.scale, simq[r].ds.scale);
            same_bytes(rc, name, "history after the update", mine.ds.history, simq[r].ds.history,
                       sizeof(float) * static_cast<size_t>(cfg.history_len));
        }
        qs_tensor_free(&row);
        qs_tensor_free(&col);
        qs_tensor_free(&X);
    }
    if (ok && rc->failures == before)
        pass(rc, name);
    qs_quantizer_free(&mine);
    for (int q = 0; q < n; q++)
        qs_quantizer_free(&simq[q]);
    qs_dist_world_free(&w);
}

/* [DIST-BLOCK-LOCAL]: MXFP8 shards aligned to 32 rows: local block scales, no all-reduce. */
void case_mxfp8(rank_ctx *rc)
{
    const char *name = "mxfp8-local";
    int n = rc->nranks, r = rc->rank;
    qs_tensor X;
    shards sh;
    sim s(n, 1, QS_RECIPE_MXFP8);
    qs_recipe_config cfg;
    quantized_set want;
    if (!make_x(&X, 64 * n, 128, 90, 8) || !sh.split(&X, n) || !s.ok ||
        qs_recipe_config_default(nullptr, &cfg, QS_RECIPE_MXFP8, QS_ROLE_INPUT) != QS_OK ||
        qs_dist_quantize(nullptr, &s.w, &cfg, sh.ptr, want.q, nullptr) != QS_OK) {
        fail(rc, name, "the reference simulation failed");
        return;
    }
    want.n = n;
    const qs_quantized *z = &want.q[r];
    int64_t before = rc->world.reductions;
    qc_dev_buf x, d[2], sc[2];
    qc_input in = device_input(x, &sh.part[r]);
    bool ok = to_device(x, sh.part[r].data, sh.part[r].nbytes);
    for (int k = 0; k < 2 && ok; k++)
        ok = (d[k].alloc(z->data[k].nbytes) == cudaSuccess) &&
             (sc[k].alloc(z->scale[k].nbytes) == cudaSuccess);
    in.x = x.p;
    ok = ok && qc_mxfp8(in, 0, 0, qc_copy{d[0].u8(), sc[0].p}, qc_copy{d[1].u8(), sc[1].p}) ==
                   cudaSuccess;
    qs_tensor got[4];
    for (int k = 0; k < 4; k++)
        memset(&got[k], 0, sizeof got[k]);
    for (int k = 0; k < 2 && ok; k++)
        ok = alloc_like(&got[k], &z->data[k]) && alloc_like(&got[2 + k], &z->scale[k]) &&
             to_host(got[k].data, d[k], got[k].nbytes) &&
             to_host(got[2 + k].data, sc[k], got[2 + k].nbytes);
    if (!ok) {
        fail(rc, name, "a CUDA call failed");
    } else {
        bool same =
            same_bytes(rc, name, "rowwise codes", got[0].data, z->data[0].data, got[0].nbytes);
        same =
            same_bytes(rc, name, "columnwise codes", got[1].data, z->data[1].data, got[1].nbytes) &&
            same;
        same =
            same_bytes(rc, name, "rowwise scales", got[2].data, z->scale[0].data, got[2].nbytes) &&
            same;
        same = same_bytes(rc, name, "columnwise scales", got[3].data, z->scale[1].data,
                          got[3].nbytes) &&
               same;
        if (rc->world.reductions != before || qs_dist_world_group(&s.w, 1)->reductions != 0)
            fail(rc, name, "block scales were reduced [DIST-BLOCK-LOCAL]");
        else if (same)
            pass(rc, name);
    }
    for (int k = 0; k < 4; k++)
        qs_tensor_free(&got[k]);
    qs_tensor_free(&X);
}

/* [DIST-NV-AMAX] [DIST-GIVEN-AMAX] [DIST-NV-SR]: NVFP4 shards (1x16 blocks, the columnwise
 * copy Hadamard-transformed; with sr, stochastic rounding at shard-local indices): the
 * device measures the two local tensor amaxes (QC_NV_AMAX_ONLY), reduces them as one vector
 * of 2 over the world, and encodes with them (QC_NV_AMAX_GIVEN); the reduced amaxes, codes
 * and block scales must be the simulated ranks'. */
void case_nvfp4(rank_ctx *rc, int sr)
{
    const char *name = sr ? "nvfp4-sp-rht-sr" : "nvfp4-sp-rht";
    int n = rc->nranks, r = rc->rank;
    qs_tensor X;
    shards sh;
    sim s(n, 1, QS_RECIPE_NVFP4);
    qs_recipe_config cfg;
    quantized_set want;
    bool built = make_x(&X, 64 * n, 128, 120 + static_cast<uint64_t>(sr), 6) && sh.split(&X, n) &&
                 s.ok &&
                 qs_recipe_config_default(nullptr, &cfg, QS_RECIPE_NVFP4, QS_ROLE_INPUT) == QS_OK;
    if (built) {
        cfg.rht = 1;
        cfg.sr = sr;
        cfg.seed = 77;
        cfg.offset = 5;
    }
    if (!built || qs_dist_quantize(nullptr, &s.w, &cfg, sh.ptr, want.q, nullptr) != QS_OK) {
        fail(rc, name, "the reference simulation failed");
        return;
    }
    want.n = n;
    const qs_quantized *z = &want.q[r];
    int64_t before = rc->world.reductions;
    qc_dev_buf x, amax, d[2], sc[2];
    qc_input in = device_input(x, &sh.part[r]);
    bool ok = to_device(x, sh.part[r].data, sh.part[r].nbytes) &&
              amax.alloc(2 * sizeof(uint32_t)) == cudaSuccess;
    for (int k = 0; k < 2 && ok; k++)
        ok = (d[k].alloc(z->data[k].nbytes) == cudaSuccess) &&
             (sc[k].alloc(z->scale[k].nbytes) == cudaSuccess);
    in.x = x.p;
    qc_copy row{d[0].u8(), sc[0].p}, col{d[1].u8(), sc[1].p};
    qc_nvfp4_params p = {0, 0, 1, sr, cfg.seed, cfg.offset, QC_NV_AMAX_ONLY};
    ok = ok && qc_nvfp4(in, p, row, col, amax.u32()) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
    ok = ok && qc_nccl_allreduce_amax(&rc->world, amax.u32(), 2, 0) == ncclSuccess;
    p.amax_mode = QC_NV_AMAX_GIVEN;
    ok = ok && qc_nvfp4(in, p, row, col, amax.u32()) == cudaSuccess;
    uint32_t bits[2] = {0, 0};
    qs_tensor got[4];
    for (int k = 0; k < 4; k++)
        memset(&got[k], 0, sizeof got[k]);
    ok = ok && to_host(bits, amax, sizeof bits);
    for (int k = 0; k < 2 && ok; k++)
        ok = alloc_like(&got[k], &z->data[k]) && alloc_like(&got[2 + k], &z->scale[k]) &&
             to_host(got[k].data, d[k], got[k].nbytes) &&
             to_host(got[2 + k].data, sc[k], got[2 + k].nbytes);
    if (!ok) {
        fail(rc, name, "a CUDA or NCCL call failed (%s)", cudaGetErrorString(cudaGetLastError()));
    } else {
        bool same = same_bits(rc, name, "reduced rowwise amax", qs_f32_from_bits(bits[0]),
                              z->amax[QS_DIR_ROW]);
        same = same_bits(rc, name, "reduced columnwise amax", qs_f32_from_bits(bits[1]),
                         z->amax[QS_DIR_COL]) &&
               same;
        static const char *const what[4] = {"rowwise codes", "columnwise codes", "rowwise scales",
                                            "columnwise scales"};
        for (int k = 0; k < 4; k++) {
            const qs_tensor *w = k < 2 ? &z->data[k] : &z->scale[k - 2];
            same = same_bytes(rc, name, what[k], got[k].data, w->data, got[k].nbytes) && same;
        }
        if (rc->world.reductions - before != 1)
            fail(rc, name, "%lld all-reduce calls, expected 1 [DIST-COUNT]",
                 static_cast<long long>(rc->world.reductions - before));
        else if (same)
            pass(rc, name);
    }
    for (int k = 0; k < 4; k++)
        qs_tensor_free(&got[k]);
    qs_tensor_free(&X);
}

/* ------------------------------------------------------------ one rank's process */

int run_rank(int rank, int nranks, int id_in, const int *id_out)
{
    rank_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.rank = rank;
    rc.nranks = nranks;
    cudaError_t err = cudaSetDevice(rank);
    if (err != cudaSuccess) {
        printf("rank %d: cannot use GPU %d: %s\n", rank, rank, cudaGetErrorString(err));
        return 2;
    }
    ncclUniqueId id;
    if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) {
            printf("rank 0: ncclGetUniqueId failed\n");
            return 2;
        }
        for (int r = 1; r < nranks; r++)
            if (write(id_out[r], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
                printf("rank 0: cannot pass the NCCL id to rank %d\n", r);
                return 2;
            }
    } else if (read(id_in, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
        printf("rank %d: did not receive the NCCL id\n", rank);
        return 2;
    }
    ncclResult_t res = qc_nccl_init(&rc.world, nranks, rank, id);
    if (res == ncclSuccess)
        res = qc_nccl_split(&rc.world, rank / 2, &rc.pairs);
    if (res != ncclSuccess) {
        printf("rank %d: NCCL setup failed: %s\n", rank, ncclGetErrorString(res));
        return 2;
    }
    case_nan(&rc);
    case_current(&rc, 1);
    case_current(&rc, 2);
    case_delayed(&rc);
    case_mxfp8(&rc);
    case_nvfp4(&rc, 0);
    case_nvfp4(&rc, 1);
    qc_nccl_free(&rc.pairs);
    qc_nccl_free(&rc.world);
    return rc.failures ? 1 : 0;
}

/* The number of visible GPUs, asked in a child process so that this one never initializes
 * CUDA (a forked child cannot use a CUDA context its parent created). */
int device_count()
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess)
            count = 0;
        ssize_t w = write(fd[1], &count, sizeof count);
        _exit(w == static_cast<ssize_t>(sizeof count) ? 0 : 1);
    }
    close(fd[1]);
    int count = -1;
    if (pid < 0 || read(fd[0], &count, sizeof count) != static_cast<ssize_t>(sizeof count))
        count = -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, nullptr, 0);
    return count;
}

int usage()
{
    fprintf(stderr, "usage: dist_check [--ranks N]  (1 <= N <= the number of GPUs, at most %d)\n",
            QS_DIST_MAX_RANKS);
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    int nranks = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
            char *end = nullptr;
            long v = strtol(argv[++i], &end, 10);
            if (!end || *end || v < 1 || v > QS_DIST_MAX_RANKS)
                return usage();
            nranks = static_cast<int>(v);
        } else {
            return usage();
        }
    }
    int gpus = device_count();
    if (gpus < 1) {
        fprintf(stderr, "dist_check: no CUDA GPU is visible\n");
        return 2;
    }
    if (nranks == 0)
        nranks = gpus < QS_DIST_MAX_RANKS ? gpus : QS_DIST_MAX_RANKS;
    if (nranks > gpus) {
        fprintf(stderr, "dist_check: --ranks %d needs %d GPUs, %d visible (one process per GPU)\n",
                nranks, nranks, gpus);
        return 2;
    }
    int fds[QS_DIST_MAX_RANKS][2];
    int out[QS_DIST_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        if (pipe(fds[r]) != 0) {
            fprintf(stderr, "dist_check: pipe: %s\n", strerror(errno));
            return 2;
        }
        out[r] = fds[r][1];
    }
    fflush(stdout);
    pid_t pid[QS_DIST_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            int code = run_rank(r, nranks, fds[r][0], out);
            fflush(stdout);
            _exit(code);
        }
        if (pid[r] < 0) {
            fprintf(stderr, "dist_check: fork: %s\n", strerror(errno));
            return 2;
        }
    }
    for (int r = 0; r < nranks; r++) {
        close(fds[r][0]);
        close(fds[r][1]);
    }
    int worst = 0;
    for (int r = 0; r < nranks; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
        if (code != 0)
            printf("dist_check: rank %d %s\n", r, code == 1 ? "failed" : "did not complete");
        worst = code > worst ? code : worst;
    }
    if (worst == 0)
        printf("dist_check: %d rank%s: every case passed on every rank\n", nranks,
               nranks == 1 ? "" : "s");
    return worst;
}
