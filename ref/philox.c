/* philox.c: the random numbers of qspec (spec/random.md). Philox4x32-10 as published
 * with Random123, the mapping of (seed, offset, index) to one 32-bit word, and the
 * uniform and normal FP32 samples made from those words. Every float operation is one
 * binary32 operation in the order the spec states; the elementary functions come from
 * qs_mathf, never libm, so the samples have the same bits everywhere. */
#include "qspec/random.h"

#include "qspec/mathf.h"

/* [RNG-PHILOX] the round multipliers and the Weyl key increments. */
#define QSI_PHILOX_M0     0xD2511F53u
#define QSI_PHILOX_M1     0xCD9E8D57u
#define QSI_PHILOX_W0     0x9E3779B9u
#define QSI_PHILOX_W1     0xBB67AE85u
#define QSI_PHILOX_ROUNDS 10

/* [RNG-NORMAL] 2*pi rounded to nearest binary32: 0x40C90FDB = 6.28318548202514648. */
#define QSI_TWO_PI_F 6.28318548202514648f
/* 2^-24, the spacing of the uniform samples [RNG-UNIFORM]. */
#define QSI_TWO_POW_M24 0x1p-24f

/* The high and low 32 bits of the 64-bit product a*b. */
static void qsi_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* One Philox4x32 round [RNG-PHILOX]: x <- (hi1^x1^k0, lo1, hi0^x3^k1, lo0). */
static void qsi_philox_round(uint32_t x[4], const uint32_t k[2])
{
    uint32_t hi0, lo0, hi1, lo1;
    qsi_mulhilo32(QSI_PHILOX_M0, x[0], &hi0, &lo0);
    qsi_mulhilo32(QSI_PHILOX_M1, x[2], &hi1, &lo1);
    uint32_t y0 = hi1 ^ x[1] ^ k[0];
    uint32_t y2 = hi0 ^ x[3] ^ k[1];
    x[0] = y0;
    x[1] = lo1;
    x[2] = y2;
    x[3] = lo0;
}

/* [RNG-PHILOX] 10 rounds; the key gains (W0, W1) mod 2^32 before each round after the first. */
void qs_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < QSI_PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k[0] += QSI_PHILOX_W0;
            k[1] += QSI_PHILOX_W1;
        }
        qsi_philox_round(x, k);
    }
    for (int w = 0; w < 4; w++) {
        out[w] = x[w];
    }
}

/* [RNG-STREAM] key = (seed lo, seed hi); counter = ((i/4) lo, (i/4) hi, offset lo,
 * offset hi); the result is word i%4 of that block. */
uint32_t qs_random_u32(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint64_t block = i / 4;
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)offset,
                       (uint32_t)(offset >> 32)};
    uint32_t out[4];
    qs_philox4x32_10(ctr, key, out);
    return out[i % 4];
}

/* [RNG-UNIFORM] (u >> 8) * 2^-24: the top 24 bits as a multiple of 2^-24 in [0, 1);
 * both the conversion and the product are exact. */
float qs_u32_to_uniform(uint32_t u)
{
    return (float)(u >> 8) * QSI_TWO_POW_M24;
}

float qs_random_uniform(uint64_t seed, uint64_t offset, uint64_t i)
{
    return qs_u32_to_uniform(qs_random_u32(seed, offset, i));
}

/* [RNG-NORMAL] u1 = ((a >> 8) + 1) * 2^-24 in (0, 1], so log never sees 0. Exact. */
static float qsi_uniform_open_below(uint32_t a)
{
    return (float)((a >> 8) + 1u) * QSI_TWO_POW_M24;
}

/* [RNG-NORMAL] Box-Muller on the words 2*(i/2) and 2*(i/2)+1 of the stream: with
 * u1 from the first, u2 from the second, r = sqrt(-2 * log(u1)), t = 2pi_f * u2, sample i
 * is r * cos(t) when i is even and r * sin(t) when i is odd; each step one binary32 op. */
float qs_random_normal(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint64_t first = i - (i % 2);
    float u1 = qsi_uniform_open_below(qs_random_u32(seed, offset, first));
    float u2 = qs_u32_to_uniform(qs_random_u32(seed, offset, first + 1));
    float l = qs_logf(u1);
    float m = -2.0f * l;
    float r = qs_sqrtf(m);
    float t = QSI_TWO_PI_F * u2;
    float c = (i % 2 == 0) ? qs_cosf(t) : qs_sinf(t);
    return r * c;
}
