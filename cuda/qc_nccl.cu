/* qc_nccl.cu: the NCCL amax all-reduce of spec/distributed.md (cuda/qc_nccl.h). The amaxes
 * stay on the device as bit patterns, the form the quantizer kernels already keep them in
 * (cuda/qc_kernels.h: qc_amax writes the bits of max |x|), so the reduction needs no kernel
 * of its own: one ncclAllReduce of ncclUint32 with ncclMax per call. */
#include "qc_nccl.h"

ncclResult_t qc_nccl_init(qc_nccl *c, int nranks, int rank, const ncclUniqueId &id)
{
    c->comm = nullptr;
    c->rank = rank;
    c->nranks = nranks;
    c->reductions = 0;
    return ncclCommInitRank(&c->comm, nranks, id, rank);
}

ncclResult_t qc_nccl_split(const qc_nccl *parent, int color, qc_nccl *out)
{
    out->comm = nullptr;
    out->reductions = 0;
    ncclResult_t res = ncclCommSplit(parent->comm, color, parent->rank, &out->comm, nullptr);
    if (res == ncclSuccess)
        res = ncclCommUserRank(out->comm, &out->rank);
    if (res == ncclSuccess)
        res = ncclCommCount(out->comm, &out->nranks);
    return res;
}

void qc_nccl_free(qc_nccl *c)
{
    if (c->comm)
        ncclCommDestroy(c->comm);
    c->comm = nullptr;
}

/* [DIST-REDUCE-MAX] [DIST-REDUCE-NAN] [DIST-REDUCE-ORDER]: the unsigned maximum of the bit
 * patterns is the reduction itself, so NCCL's combination order cannot change a bit. */
ncclResult_t qc_nccl_allreduce_amax(qc_nccl *c, uint32_t *bits, size_t n, cudaStream_t stream)
{
    ncclResult_t res = ncclAllReduce(bits, bits, n, ncclUint32, ncclMax, c->comm, stream);
    if (res != ncclSuccess)
        return res;
    c->reductions++; /* [DIST-COUNT] */
    return cudaStreamSynchronize(stream) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}
