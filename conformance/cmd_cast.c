/* cmd_cast.c: `qspec cast` — encode values in a format under a rounding mode and overflow
 * policy of spec/formats.md, one line per value (input, code, decoded value, flags), or
 * print the decode table of a format of 8 bits or fewer. Every argument is checked before
 * anything is printed, so a usage error leaves stdout empty. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qspec/format.h"

typedef struct cast_args {
    const qs_format_info *to;
    const qs_format_info *table;
    qs_cast_mode mode;
} cast_args;

/* A format for --to or --table: one of those with a descriptor, not fp64 or the integers. */
static const qs_format_info *parse_format(const char *name)
{
    return qs_format_info_get(qs_dtype_from_name(name));
}

/* A whole string as a double (decimal, C99 hex float, inf, nan); 0 when malformed, -1 when
 * a finite number overflows FP64 to an infinity, -2 when a nonzero number underflows to
 * zero (strtod's ERANGE): casting inf or 0 in its place would be a quiet wrong answer. */
static int parse_value(const char *s, double *x)
{
    char *end;
    if (*s == '\0' || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    *x = strtod(s, &end);
    if (end == s || *end != '\0')
        return 0;
    if (errno == ERANGE && isinf(*x))
        return -1;
    if (errno == ERANGE && *x == 0)
        return -2;
    return 1;
}

static int parse_u32(const char *s, uint32_t *u)
{
    char *end;
    if (*s == '\0' || *s == '-' || *s == '+' || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end != '\0' || errno == ERANGE || v > 0xFFFFFFFFull)
        return 0;
    *u = (uint32_t)v;
    return 1;
}

/* Reads "--name VALUE" or "--name=VALUE" at argv[*i]; NULL if argv[*i] is not that option,
 * and sets *missing when the value is absent. */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

/* Parses one option at argv[*i]; returns -1 when it is not an option, else an exit code
 * (QSK_EXIT_OK to go on). */
static int parse_option(int argc, char **argv, int *i, cast_args *a)
{
    const char *arg = argv[*i], *v;
    int missing = 0;
    if ((v = option_value(argc, argv, i, "--to", &missing))) {
        if (!(a->to = parse_format(v)))
            return qsk_usage_error("cast", "unknown format '%s' for --to", v);
    } else if ((v = option_value(argc, argv, i, "--table", &missing))) {
        a->table = parse_format(v);
        if (!a->table || a->table->bits > 8)
            return qsk_usage_error("cast", "--table needs a format of 8 bits or fewer, got '%s'",
                                   v);
    } else if ((v = option_value(argc, argv, i, "--round", &missing))) {
        int r = qs_round_from_name(v);
        if (r < 0)
            return qsk_usage_error("cast", "unknown rounding mode '%s' for --round", v);
        a->mode.round = (qs_round)r;
    } else if ((v = option_value(argc, argv, i, "--overflow", &missing))) {
        int o = qs_overflow_from_name(v);
        if (o < 0)
            return qsk_usage_error("cast", "unknown overflow policy '%s' for --overflow", v);
        a->mode.overflow = (qs_overflow)o;
    } else if ((v = option_value(argc, argv, i, "--sr-bits", &missing))) {
        if (!parse_u32(v, &a->mode.sr_bits))
            return qsk_usage_error("cast", "--sr-bits needs an integer in 0..0xffffffff, got '%s'",
                                   v);
    } else if (missing) {
        return qsk_usage_error("cast", "option '%s' needs a value", arg);
    } else if (arg[0] == '-' && arg[1] == '-') {
        return qsk_usage_error("cast", "unknown option '%s'", arg);
    } else {
        return -1;
    }
    return QSK_EXIT_OK;
}

/* Options may come before, between or after the values; "--" ends the options. Marks the
 * values in is_value and counts them in *nvalues. */
static int parse_args(int argc, char **argv, cast_args *a, char *is_value, int *nvalues)
{
    int options_done = 0;
    *nvalues = 0;
    for (int i = 0; i < argc; i++) {
        if (!options_done && strcmp(argv[i], "--") == 0) {
            options_done = 1;
            continue;
        }
        int rc = options_done ? -1 : parse_option(argc, argv, &i, a);
        if (rc >= 0 && rc != QSK_EXIT_OK)
            return rc;
        if (rc >= 0)
            continue;
        double x;
        int pv = parse_value(argv[i], &x);
        if (pv == -1)
            return qsk_usage_error("cast",
                                   "value '%s' overflows FP64 (beyond 1.8e308): write inf for an "
                                   "infinity",
                                   argv[i]);
        if (pv == -2)
            return qsk_usage_error("cast",
                                   "value '%s' underflows FP64 to zero (below 4.9e-324): write 0 "
                                   "for a zero",
                                   argv[i]);
        if (pv != 1)
            return qsk_usage_error(
                "cast", "bad value '%s' (want a decimal, a hex float, inf or nan)", argv[i]);
        is_value[i] = 1;
        *nvalues += 1;
    }
    if (a->table && (a->to || *nvalues > 0))
        return qsk_usage_error("cast", "%s", "--table takes no --to and no values");
    if (!a->table && !a->to)
        return qsk_usage_error("cast", "%s", "missing --to FMT (or --table FMT)");
    if (!a->table && *nvalues == 0)
        return qsk_usage_error("cast", "%s", "no values to cast");
    return QSK_EXIT_OK;
}

static void print_value(double v)
{
    if (isnan(v))
        fputs(signbit(v) ? "-nan" : "nan", stdout);
    else
        printf("%.17g", v);
}

static void print_code(const qs_format_info *fi, uint32_t code)
{
    printf("0x%0*x", (int)((fi->bits + 3) / 4), (unsigned)code);
}

static void print_flags(unsigned fl)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {
        {QS_FLAG_OVERFLOW, "overflow"}, {QS_FLAG_INEXACT, "inexact"}, {QS_FLAG_NAN, "nan"}};
    int any = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (fl & names[i].bit) {
            printf("%s%s", any ? "," : "", names[i].name);
            any = 1;
        }
    if (!any)
        fputs("exact", stdout);
}

/* `qspec cast --table FMT`: one line per code, "0xNN value". */
static void print_table(const qs_format_info *fi)
{
    for (uint32_t c = 0; c < (1u << fi->bits); c++) {
        print_code(fi, c);
        putchar(' ');
        print_value(qs_decode_f64(fi->dtype, c));
        putchar('\n');
    }
}

static void print_cast(const cast_args *a, const char *arg, uint32_t code, unsigned fl)
{
    printf("%s ", arg);
    print_code(a->to, code);
    putchar(' ');
    print_value(qs_decode_f64(a->to->dtype, code));
    putchar(' ');
    print_flags(fl);
    putchar('\n');
}

static int cast_values(const cast_args *a, int argc, char **argv, const char *is_value)
{
    for (int j = 0; j < argc; j++) {
        double x = 0;
        uint32_t code = 0;
        unsigned fl = 0;
        if (!is_value[j])
            continue;
        parse_value(argv[j], &x);
        if (qs_encode_f64_flags(a->to->dtype, x, a->mode, &code, &fl) != QS_OK)
            return qsk_usage_error("cast", "cannot encode '%s'", argv[j]);
        print_cast(a, argv[j], code, fl);
    }
    return QSK_EXIT_OK;
}

static int cast_run(int argc, char **argv)
{
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (qsk_is_help(argv[i])) {
            qsk_print_help(stdout, &qsk_cmd_cast);
            return QSK_EXIT_OK;
        }
    cast_args a = {NULL, NULL, {QS_ROUND_RNE, QS_OVF_SATFINITE, 0}};
    char *is_value = calloc((size_t)argc + 1, 1);
    int nvalues = 0;
    if (!is_value)
        return qsk_usage_error("cast", "out of memory");
    int rc = parse_args(argc, argv, &a, is_value, &nvalues);
    if (rc == QSK_EXIT_OK && a.table)
        print_table(a.table);
    else if (rc == QSK_EXIT_OK)
        rc = cast_values(&a, argc, argv, is_value);
    free(is_value);
    return rc;
}

const qsk_command qsk_cmd_cast = {
    "cast", "encode values in a number format, or print a format's decode table",
    "usage: qspec cast --to FMT [--round MODE] [--overflow POLICY] [--sr-bits N] VALUE...\n"
    "       qspec cast --table FMT\n\n"
    "Encodes each VALUE in format FMT (fp32 bf16 fp16 e4m3 e5m2 e8m0 e2m1 e2m3 e3m2) with one\n"
    "rounding, as spec/formats.md defines it, and prints one line per value:\n"
    "  VALUE CODE DECODED FLAGS     e.g.  465 0x7e 448 overflow,inexact\n"
    "CODE is hexadecimal; DECODED is the exact value of the code; FLAGS is 'exact' or a\n"
    "comma-separated list of overflow, inexact, nan.\n\n"
    "Options and values may come in any order; after '--' every argument is a value.\n"
    "VALUE is a decimal number, a C99 hex float (0x1.8p-3), inf, -inf or nan. It is read as\n"
    "FP64 (strtod, correctly rounded) and encoded from that FP64 value: it is NOT first\n"
    "rounded to FP32. To encode an exact FP32 value, give it exactly (a hex float does).\n\n"
    "Options:\n"
    "  --to FMT           the target format (required unless --table)\n"
    "  --round MODE       rne (default), rz, ru, rd, away (ties away), sr (stochastic)\n"
    "  --overflow POLICY  satfinite (default; CUDA __NV_SATFINITE), nosat, mldtypes\n"
    "  --sr-bits N        the 32 random bits u of sr (decimal or 0x hex; default 0)\n"
    "  --table FMT        print every code of FMT (8 bits or fewer) and its value\n\n"
    "Exit status: 0, or 2 for a bad value, format, mode, policy or option (one line on\n"
    "stderr, nothing on stdout).\n",
    cast_run};
