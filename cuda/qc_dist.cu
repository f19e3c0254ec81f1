/* qc_dist.cu: the plugin's distributed slots (include/qspec/backend.h, QS_CAP_DIST;
 * spec/distributed.md [DIST-BACKEND]) over NCCL, one process per GPU. NCCL is opened at
 * run time (dlopen of libnccl.so.2), so the plugin loads and runs everything else on a
 * machine without it; the reduction is ncclMax over ncclUint32 on the amaxes' bit patterns
 * [DIST-REDUCE-MAX] (see cuda/qc_nccl.h). Rank r uses GPU r, so a run of N ranks needs N
 * visible GPUs. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <stdio.h>
#include <string.h>

#include "qc_kernels.h"
#include "qc_slots.h"

namespace
{

struct nccl_api {
    void *lib;
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error)(ncclResult_t);
};

nccl_api g_nccl;
ncclComm_t g_comm;
int g_nranks;

bool load_nccl(char *why, size_t why_len)
{
    if (g_nccl.lib)
        return true;
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "NCCL is not available (libnccl.so.2 not found: %s)", dlerror());
        return false;
    }
    nccl_api a;
    a.lib = lib;
    a.get_id = reinterpret_cast<decltype(a.get_id)>(dlsym(lib, "ncclGetUniqueId"));
    a.init_rank = reinterpret_cast<decltype(a.init_rank)>(dlsym(lib, "ncclCommInitRank"));
    a.all_reduce = reinterpret_cast<decltype(a.all_reduce)>(dlsym(lib, "ncclAllReduce"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(lib, "ncclCommDestroy"));
    a.error = reinterpret_cast<decltype(a.error)>(dlsym(lib, "ncclGetErrorString"));
    if (!a.get_id || !a.init_rank || !a.all_reduce || !a.destroy || !a.error) {
        snprintf(why, why_len, "libnccl lacks a function the plugin needs");
        dlclose(lib);
        return false;
    }
    g_nccl = a;
    return true;
}

qs_status nccl_fail(ncclResult_t r, const char *what, char *why, size_t why_len)
{
    snprintf(why, why_len, "%s: %s", what, g_nccl.error(r));
    return QS_ERR_INTERNAL;
}

} // namespace

qs_status qc_slot_dist_id(void *state, void *id, size_t cap, size_t *len, char *why,
                          size_t why_len)
{
    (void)state;
    if (!load_nccl(why, why_len))
        return QS_ERR_UNSUPPORTED;
    ncclUniqueId u;
    if (cap < sizeof u) {
        snprintf(why, why_len, "the id needs %zu bytes", sizeof u);
        return QS_ERR_INVALID_ARG;
    }
    ncclResult_t r = g_nccl.get_id(&u);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclGetUniqueId", why, why_len);
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return QS_OK;
}

qs_status qc_slot_dist_join(void *state, int nranks, int rank, const void *id, size_t len,
                            char *why, size_t why_len)
{
    (void)state;
    ncclUniqueId u;
    if (!load_nccl(why, why_len))
        return QS_ERR_UNSUPPORTED;
    if (len != sizeof u || nranks < 1 || rank < 0 || rank >= nranks || g_comm) {
        snprintf(why, why_len, "bad id, rank, or a second join");
        return QS_ERR_INVALID_ARG;
    }
    memcpy(&u, id, sizeof u);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0)
        e = cudaSetDevice(rank < count ? rank : 0);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, why_len, "rank %d: no GPU to use (%s)", rank, cudaGetErrorString(e));
        return QS_ERR_UNSUPPORTED;
    }
    if (nranks > count) { /* NCCL takes one GPU per rank */
        snprintf(why, why_len, "%d ranks need %d GPUs, %d %s visible", nranks, nranks, count,
                 count == 1 ? "is" : "are");
        return QS_ERR_UNSUPPORTED;
    }
    ncclResult_t r = g_nccl.init_rank(&g_comm, nranks, u, rank);
    if (r != ncclSuccess) {
        g_comm = nullptr;
        return nccl_fail(r, "ncclCommInitRank", why, why_len);
    }
    g_nranks = nranks;
    return QS_OK;
}

qs_status qc_slot_allreduce_amax(void *state, int64_t n, float *amax, char *why, size_t why_len)
{
    (void)state;
    if (!g_comm || n < 1) {
        snprintf(why, why_len, "not joined");
        return QS_ERR_STATE;
    }
    qc_dev_buf buf;
    size_t bytes = static_cast<size_t>(n) * sizeof(uint32_t);
    cudaError_t e = buf.alloc(bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(buf.p, amax, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s", cudaGetErrorString(e));
        return QS_ERR_INTERNAL;
    }
    ncclResult_t r = g_nccl.all_reduce(buf.p, buf.p, static_cast<size_t>(n), ncclUint32, ncclMax,
                                       g_comm, 0);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclAllReduce", why, why_len);
    e = cudaStreamSynchronize(0);
    if (e == cudaSuccess)
        e = cudaMemcpy(amax, buf.p, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s", cudaGetErrorString(e));
        return QS_ERR_INTERNAL;
    }
    return QS_OK;
}

void qc_dist_release()
{
    if (g_comm)
        g_nccl.destroy(g_comm);
    g_comm = nullptr;
}
