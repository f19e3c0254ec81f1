/* interop_casts.c: writes a dense sample of binary32 bit patterns and qspec's codes for
 * them, for tests/interop_casts.sh to compare with ml_dtypes and numpy ([FMT-OVF-MLDTYPES],
 * [FMT-E2M1-NAN], [FMT-NAN]). The sample: every 16-bit high half with several low halves,
 * and around every finite code of each compared format its value and the tie above it,
 * each with its binary32 neighbours, both signs. Files in DIR, little-endian uint32:
 * x.u32 (the patterns) and one FMT.u32 per format (the codes under policy mldtypes, rne).
 * Without DIR it checks that the sample holds a few ties typed in by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qspec/format.h"

typedef struct sample {
    uint32_t *x;
    size_t n, cap;
} sample;

static int sample_add(sample *s, uint32_t bits)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1u << 20;
        uint32_t *x = realloc(s->x, cap * sizeof *x);
        if (!x)
            return -1;
        s->x = x;
        s->cap = cap;
    }
    s->x[s->n++] = bits;
    return 0;
}

/* v (a binary32 value) and its two neighbours, with both signs. */
static int sample_add_around(sample *s, float v)
{
    uint32_t b = qs_f32_bits(v) & 0x7FFFFFFFu;
    for (uint32_t sign = 0; sign <= 1; sign++)
        for (int d = -1; d <= 1; d++) {
            uint32_t m = b + (uint32_t)d;
            if (b == 0 && d < 0)
                continue;
            if (sample_add(s, (sign << 31) | m) != 0)
                return -1;
        }
    return 0;
}

/* Every finite code's value of dt and the point halfway to the next grid value above it
 * (the tie; E8M0, whose ties are at 1.5 * 2^k [FMT-E8M0-RNE], uses that). Past max the grid
 * goes on with the spacing of the top binade ([FMT-ENCODE]). */
static int sample_add_format(sample *s, qs_dtype dt)
{
    const qs_format_info *fi = qs_format_info_get(dt);
    for (uint32_t c = 0; c <= fi->max_code; c++) {
        double v = qs_decode_f64(dt, c);
        double next;
        if (dt == QS_E8M0)
            next = 2.0 * v;
        else if (c < fi->max_code)
            next = qs_decode_f64(dt, c + 1);
        else
            next = v + (v - qs_decode_f64(dt, c - 1));
        double tie = dt == QS_E8M0 ? 1.5 * v : (v + next) / 2.0;
        if (sample_add_around(s, (float)v) != 0 || sample_add_around(s, (float)tie) != 0)
            return -1;
    }
    return 0;
}

static int write_u32(const char *dir, const char *name, const uint32_t *v, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.u32", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char b[4] = {(unsigned char)v[i], (unsigned char)(v[i] >> 8),
                              (unsigned char)(v[i] >> 16), (unsigned char)(v[i] >> 24)};
        if (fwrite(b, 1, 4, f) != 4) {
            fclose(f);
            return -1;
        }
    }
    return fclose(f);
}

static const qs_dtype compared[] = {QS_E4M3, QS_E5M2, QS_E8M0, QS_E2M1,
                                    QS_E2M3, QS_E3M2, QS_BF16, QS_FP16};
static const uint16_t low_halves[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001,
                                      0x7FFF, 0x8000, 0x8001, 0xFFFF};

static int sample_build(sample *s)
{
    int bad = 0;
    for (uint32_t hi = 0; hi <= 0xFFFFu && !bad; hi++)
        for (size_t j = 0; j < sizeof low_halves / sizeof low_halves[0]; j++)
            bad |= sample_add(s, (hi << 16) | low_halves[j]) != 0;
    for (size_t f = 0; f < sizeof compared / sizeof compared[0] && !bad; f++)
        bad |= sample_add_format(s, compared[f]) != 0;
    return bad;
}

/* Without DIR (as make check runs it): the sample holds the ties it must hold, typed in by
 * hand: E4M3 464 and 464 + 1 ulp, E5M2 61440, E2M1 -5, FP16 65520 and its half-way point
 * 2^-25, BF16's 1 + 2^-8. */
static int self_check(void)
{
    static const uint32_t want[] = {0x43E80000u, 0x43E80001u, 0x47700000u, 0xC0A00000u,
                                    0x477FF000u, 0x33000000u, 0x3F808000u};
    sample s = {NULL, 0, 0};
    int bad = sample_build(&s);
    for (size_t w = 0; w < sizeof want / sizeof want[0] && !bad; w++) {
        size_t i = 0;
        while (i < s.n && s.x[i] != want[w])
            i++;
        if (i == s.n) {
            printf("interop_casts: the sample lacks 0x%08X\n", (unsigned)want[w]);
            bad = 1;
        }
    }
    if (!bad)
        printf("interop_casts: the sample of %zu patterns holds every typed-in tie\n", s.n);
    free(s.x);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 1)
        return self_check();
    if (argc != 2) {
        fprintf(stderr, "usage: interop_casts [DIR]\n");
        return 2;
    }
    sample s = {NULL, 0, 0};
    int bad = sample_build(&s);
    uint32_t *codes = bad ? NULL : malloc(s.n * sizeof *codes);
    if (!codes) {
        fprintf(stderr, "interop_casts: out of memory\n");
        free(s.x);
        return 1;
    }
    bad = write_u32(argv[1], "x", s.x, s.n) != 0;
    qs_cast_mode mode = {QS_ROUND_RNE, QS_OVF_MLDTYPES, 0};
    for (size_t f = 0; f < sizeof compared / sizeof compared[0] && !bad; f++) {
        const qs_format_info *fi = qs_format_info_get(compared[f]);
        for (size_t i = 0; i < s.n && !bad; i++)
            bad = qs_encode_f32(fi->dtype, qs_f32_from_bits(s.x[i]), mode, &codes[i]) != QS_OK;
        bad = bad || write_u32(argv[1], fi->name, codes, s.n) != 0;
    }
    if (bad)
        fprintf(stderr, "interop_casts: cannot encode or write into %s\n", argv[1]);
    else
        printf("interop_casts: %zu patterns, %zu formats\n", s.n,
               sizeof compared / sizeof compared[0]);
    free(codes);
    free(s.x);
    return bad ? 1 : 0;
}
