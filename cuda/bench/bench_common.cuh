/* bench_common.cuh: what the GPU tools of cuda/bench share — a CUDA status check that
 * names the call and exits, the deterministic input generator (a hash of the element
 * index and a seed; BF16 values over 2^-7 .. 2^8, both signs) and a fingerprint of a
 * device array (dev_hash). */
#ifndef QC_BENCH_COMMON_CUH
#define QC_BENCH_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BENCH_CHECK(call)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A well-mixed 32-bit word of element i under seed. */
static __device__ __forceinline__ uint32_t bench_hash(size_t i, uint32_t seed)
{
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return h;
}

/* x[0..n) = deterministic BF16 values of 16 binades (2^-7 .. 2^8), some of each sign. */
static __global__ void bench_fill_bf16(uint16_t *x, size_t n, uint32_t seed)
{
    size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t h = bench_hash(i, seed);
    uint32_t exp = 120u + (h >> 28);
    x[i] = static_cast<uint16_t>(((h & 1u) << 15) | (exp << 7) | ((h >> 8) & 0x7Fu));
}

/* A fingerprint of n bytes (n a multiple of 4): the sum mod 2^64 of a mix of each 4-byte
 * word with its index, so that two builds' outputs can be compared bit for bit across runs. */
static __global__ void bench_hash_kernel(const uint32_t *a, size_t n, unsigned long long *acc)
{
    unsigned long long h = 0;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        unsigned long long z = (static_cast<unsigned long long>(i) << 32 | a[i]) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        h += z ^ (z >> 31);
    }
    atomicAdd(acc, h);
}

static inline unsigned long long dev_hash(const void *a, size_t bytes)
{
    unsigned long long *acc, h = 0;
    BENCH_CHECK(cudaMalloc(&acc, sizeof h));
    BENCH_CHECK(cudaMemset(acc, 0, sizeof h));
    bench_hash_kernel<<<1024, 256>>>(static_cast<const uint32_t *>(a), bytes / 4, acc);
    BENCH_CHECK(cudaMemcpy(&h, acc, sizeof h, cudaMemcpyDeviceToHost));
    BENCH_CHECK(cudaFree(acc));
    return h;
}

#endif
