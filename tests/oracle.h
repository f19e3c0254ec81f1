/* oracle.h: an independent, deliberately naive model of spec/formats.md used by the format
 * tests. It decodes every code of a format with its own formula, sorts the values, and
 * encodes by nearest-value search with the spec's tie, overflow and special rules applied
 * one by one. It never calls the encoder of ref/format.c. */
#ifndef QSPEC_TESTS_ORACLE_H
#define QSPEC_TESTS_ORACLE_H

#include <stdint.h>

#include "qspec/format.h"

/* The oracle's own exact decoding of a code (NaN codes give a NaN with the code's sign). */
double qso_decode(qs_dtype dt, uint32_t code);
/* The code the spec requires for x under (round, overflow, u); u is used by sr only. */
uint32_t qso_encode(qs_dtype dt, double x, qs_round round, qs_overflow ovf, uint32_t u);
/* Number of codes of a format the oracle knows (2^bits), 0 for others. */
uint32_t qso_ncodes(qs_dtype dt);

#endif
