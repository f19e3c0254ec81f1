/* extprog.h: program cases for an external framework (spec/cases.md [CASE-GEN-PROG],
 * [CASE-VERIFY-PROG]) — the part of `qspec gen`'s manifest that describes a program (each
 * variant's statements with its tags applied, the outputs and trace a framework writes for
 * it, the checks between variants), and `qspec verify`'s checks of what a framework wrote:
 * its variants against each other (self-consistency), against the reference's run of the
 * same variant, and its observable trace. cmd_gen.c is the command; this is its program
 * half. */
#ifndef QSPEC_KIT_EXTPROG_H
#define QSPEC_KIT_EXTPROG_H

#include <stdio.h>

#include "cases.h"
#include "ops.h"

/* The exit status of verify when the framework reported the case as not supported. */
#define QSKX_EXIT_UNSUPPORTED 3

/* The file a framework writes instead of outputs when it cannot express the case: its first
 * line is the reason. */
#define QSKX_NOT_SUPPORTED "not_supported.txt"
/* The optional file a framework describes itself in (name, version, claim). */
#define QSKX_FRAMEWORK "framework.json"

/* Writes the program keys of the manifest of program case c (",\n  \"variants\": ..."),
 * shapes and dtypes from ref (qsk_program_framework_ref's outputs). */
void qskx_manifest(FILE *fp, const qsk_case *c, const qsk_results *ref);

/* Whether name is an entry a framework may write into the results folder of program case c
 * (a variant's folder, not_supported.txt, framework.json). */
int qskx_entry_ok(const qsk_case *c, const char *name);

/* Verifies what a framework wrote into dir for program case c against ref (the reference's
 * framework outputs); prints the failure lines and a PASS, FAIL or NOT SUPPORTED line, and
 * returns the exit status (0, 1, 2 for a missing or malformed file, QSKX_EXIT_UNSUPPORTED). */
int qskx_verify(qs_ctx *ctx, const qsk_case *c, const char *dir, const qsk_results *ref);

/* From cmd_gen.c: a tensor's manifest entry without its closing brace, and a comparison. */
void qsk_gen_json_tensor(FILE *fp, const char *name, const qs_tensor *t);
void qsk_gen_json_compare(FILE *fp, const qsk_output *o);

#endif
