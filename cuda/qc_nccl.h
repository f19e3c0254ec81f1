/* qc_nccl.h: the amax all-reduce of spec/distributed.md on devices, through NCCL, one
 * process per GPU. Amaxes travel as their binary32 bit patterns and are reduced with
 * ncclMax over ncclUint32: for amaxes (+0, positive, +Inf, NaN) the unsigned order of the
 * patterns is the numeric order with every NaN above +Inf, so the result is exact,
 * NaN-propagating and independent of NCCL's ring or tree order [DIST-REDUCE-MAX]
 * [DIST-BACKEND]. ncclMax over ncclFloat32 is not used: a floating-point max may drop a
 * NaN depending on which values meet first. */
#ifndef QC_NCCL_H
#define QC_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>

/* One communicator: the ranks of a group's subgroup [DIST-GROUP]. reductions counts the
 * all-reduce calls issued through it [DIST-COUNT]. */
struct qc_nccl {
    ncclComm_t comm;
    int rank, nranks;
    int64_t reductions;
};

/* Joins the communicator of nranks processes that share id, as rank; the calling process
 * must have selected its device (cudaSetDevice) first. */
ncclResult_t qc_nccl_init(qc_nccl *c, int nranks, int rank, const ncclUniqueId &id);
/* The subgroup communicator of the ranks of parent with the same color (collective over
 * parent: every rank calls it), ranks ordered as in parent. */
ncclResult_t qc_nccl_split(const qc_nccl *parent, int color, qc_nccl *out);
/* Destroys the communicator; accepts one never initialized (comm NULL). */
void qc_nccl_free(qc_nccl *c);
/* [DIST-REDUCE-MAX]: replaces, in place, each of the n bit patterns at bits (device memory)
 * by the unsigned maximum over the communicator's ranks, and waits for it on stream. */
ncclResult_t qc_nccl_allreduce_amax(qc_nccl *c, uint32_t *bits, size_t n, cudaStream_t stream);

#endif
