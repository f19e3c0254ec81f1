/* sha256.h: SHA-256 (FIPS 180-4), for the golden digests of reference outputs and the
 * case-file digests of a certification package. */
#ifndef QSPEC_KIT_SHA256_H
#define QSPEC_KIT_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct qsk_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t fill;
} qsk_sha256;

void qsk_sha256_init(qsk_sha256 *s);
void qsk_sha256_update(qsk_sha256 *s, const void *data, size_t n);
void qsk_sha256_final(qsk_sha256 *s, uint8_t out[32]);
/* The digest of data as 64 lower-case hex digits and a NUL. */
void qsk_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
