/* cases.h: the conformance case model (spec/cases.md) and its loader.
 * A case file is `qspec: 1` plus a list of cases; each case names the rules it covers, an
 * op with parameters, input generators and the outputs to compare. The loader checks the
 * schema completely and reports the first problem as file:line:col: message. */
#ifndef QSPEC_KIT_CASES_H
#define QSPEC_KIT_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "qspec/tensor.h"
#include "yamltree.h"

#define QSK_NAME_LEN 64
#define QSK_ID_LEN   128

typedef struct qsk_pos {
    int line, col;
} qsk_pos;

/* One parameter of an op: key and scalar text. */
typedef struct qsk_param {
    char key[QSK_NAME_LEN];
    char value[QSK_ID_LEN];
    qsk_pos pos;
} qsk_param;

typedef enum { QSK_GEN_VALUES, QSK_GEN_UNIFORM, QSK_GEN_NORMAL } qsk_gen_kind;

typedef struct qsk_inject {
    int64_t index; /* flat row-major index; -1: at a position drawn from the stream */
    double value;
} qsk_inject;

typedef struct qsk_input {
    char name[QSK_NAME_LEN];
    qs_dtype dtype;
    int ndim;
    int64_t shape[QS_MAX_DIMS];
    qsk_gen_kind gen;
    uint64_t seed, offset;
    double a, b;    /* uniform: lo, hi; normal: mean, std */
    double *values; /* QSK_GEN_VALUES: the values, repeated cyclically to fill */
    size_t nvalues;
    qsk_inject *inject;
    size_t ninject;
    qsk_pos pos;
} qsk_input;

typedef enum {
    QSK_CMP_BITWISE,
    QSK_CMP_ULP,
    QSK_CMP_ALLCLOSE,
    QSK_CMP_GEMM_BOUND,
    QSK_CMP_RMS_RATIO,
    QSK_CMP_COSINE
} qsk_cmp_kind;

typedef struct qsk_output {
    char name[QSK_NAME_LEN];
    qsk_cmp_kind cmp;
    int nan_any;                     /* bitwise: any NaN matches any NaN (nan: any) */
    double p1, p2;                   /* ulp: N; allclose: atol, rtol; gemm_bound: c; rms_ratio: r;
                                        cosine: c */
    char digest[65];                 /* golden SHA-256 (hex), "" when pending */
    size_t digest_start, digest_end; /* byte range of the digest scalar in the file */
    qsk_pos pos;
} qsk_output;

struct qskp_program; /* conformance/program.h: the program of op: program */

/* The tier of a case [CASE-TIER]: a default run selects the default tier only. */
typedef enum { QSK_TIER_DEFAULT, QSK_TIER_LARGE } qsk_tier;

typedef struct qsk_case {
    char id[QSK_ID_LEN];
    const char *file; /* borrowed from the suite */
    qsk_pos pos;
    char **rules;
    size_t nrules;
    char op[QSK_NAME_LEN];
    qsk_pos op_pos;
    qsk_param *params;
    size_t nparams;
    qsk_input *inputs;
    size_t ninputs;
    qsk_output *outputs;
    size_t noutputs;
    char *description;
    struct qskp_program *program; /* op: program only [CASE-PROG] */
    qsk_tier tier;                /* [CASE-TIER] */
    int self_only;                /* reference: none: compared with no reference [CASE-TIER-SELF] */
    qsk_pos ref_pos;              /* where `reference` is (0:0 when absent) */
} qsk_case;

typedef struct qsk_case_file {
    char *path;
    char *text; /* the file's bytes, kept for --update-digests */
    size_t len;
    qsk_case *cases;
    size_t ncases;
} qsk_case_file;

/* The rule-ID check used by the loader: returns nonzero if id is defined in spec/.
 * NULL accepts any syntactically valid ID. */
typedef int (*qsk_rule_known_fn)(const char *id, void *arg);

/* Loads and validates a case file. */
qs_status qsk_case_file_load(qs_ctx *ctx, const char *path, qsk_rule_known_fn known,
                             void *known_arg, qsk_case_file *f);
/* The same for text held in memory, named name in messages. */
qs_status qsk_case_file_parse(qs_ctx *ctx, const char *name, const char *text, size_t len,
                              qsk_rule_known_fn known, void *known_arg, qsk_case_file *f);
void qsk_case_file_free(qsk_case_file *f);
/* A parameter's text, or NULL when absent. */
const qsk_param *qsk_case_param(const qsk_case *c, const char *key);

/* Integers in case files, parameters and the CLI have one reading: decimal digits (a
 * leading zero does not make octal: 010 is ten), or 0x and hexadecimal digits. These
 * return 0 for a number in range, 1 for text that is not an integer, 2 for an integer
 * out of the type's range (never clamped). */
int qsk_parse_u64(const char *s, uint64_t *v);
int qsk_parse_i64(const char *s, int64_t *v);
const qsk_input *qsk_case_input(const qsk_case *c, const char *name);
/* shape[0..nd) into buf as the manifests and messages write it, "[2, 3]", or with tuple as
 * Python writes a tuple, "()", "(5,)", "(2, 3)". */
void qsk_shape_text(int nd, const int64_t *shape, int tuple, char *buf, size_t cap);

/* A tier's name in case files and on the command line ("default", "large"). */
const char *qsk_tier_name(qsk_tier t);
/* The tier named s; returns -1 for an unknown name. */
int qsk_tier_parse(const char *s);

/* Generates an input tensor as spec/cases.md [CASE-GEN-*] and spec/random.md define. */
qs_status qsk_input_generate(qs_ctx *ctx, const qsk_input *in, qs_tensor *t);

#endif
