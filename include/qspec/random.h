/* random.h: Philox4x32-10 and the mapping from counters to uniform and normal FP32
 * samples (spec/random.md). Everything random in qspec (input generators, stochastic
 * rounding bits) comes from here, keyed by (seed, offset, index), so any implementation
 * reproduces the same bits. */
#ifndef QSPEC_RANDOM_H
#define QSPEC_RANDOM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: 10 rounds over counter ctr with key key [RNG-PHILOX]. */
void qs_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The i-th 32-bit random word of stream (seed, offset) [RNG-STREAM]. */
uint32_t qs_random_u32(uint64_t seed, uint64_t offset, uint64_t i);
/* Uniform FP32 in [0, 1) from a 32-bit word [RNG-UNIFORM]. */
float qs_u32_to_uniform(uint32_t u);
/* The i-th uniform sample of stream (seed, offset) [RNG-UNIFORM]. */
float qs_random_uniform(uint64_t seed, uint64_t offset, uint64_t i);
/* The i-th standard normal sample of stream (seed, offset), Box-Muller with qs_mathf
 * functions [RNG-NORMAL]. */
float qs_random_normal(uint64_t seed, uint64_t offset, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
