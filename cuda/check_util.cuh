/* check_util.cuh: what the parts of cuda/check_arith.cu share — the failure line (at most
 * 30 a family are printed, every one counted), the splitmix64 stream each part draws its
 * random inputs from (its own state, so that one part's inputs do not depend on another's),
 * and whether a CUDA device is there for the device halves. */
#ifndef QC_CHECK_UTIL_CUH
#define QC_CHECK_UTIL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

/* Counts one failure in *count and prints it while fewer than 30 were: family (empty for the
 * formats part), what was compared, where, the input and the two results. */
inline void qc_check_report(long *count, const char *family, const char *what, const char *ctx,
                            uint64_t x, uint32_t want, uint32_t got)
{
    if ((*count)++ < 30)
        printf("FAIL %s%s%s %s x=0x%llx ref=0x%08x cuda=0x%08x\n", family, *family ? " " : "",
               what, ctx, (unsigned long long)x, want, got);
}

/* The next splitmix64 value of the stream whose state is *s. */
inline uint64_t qc_check_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* True when a CUDA device is present (the device halves then run); the error of a failed
 * probe is cleared. */
inline bool qc_check_have_device()
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return false;
    }
    return true;
}

#endif
