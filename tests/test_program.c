/* test_program.c: programs in case files (spec/cases.md, Programs) — the loader builds the
 * statement tree, the recipes and the variants, and rejects every malformed program with
 * file:line:col of the offending node; the island policy is checked at load time where it
 * is static and at run time otherwise; the runner's outputs are those of the same program
 * built by hand on the engine; every kind of claim fails when it is false; program cases
 * are not supported on a plugin. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "ops.h"
#include "program.h"
#include "qspec/format.h"
#include "qspec/kernels.h"
#include "qspec/program.h"
#include "qstest.h"
#include "suite.h"

/* ---------------------------------------------------------------- helpers */

static const char *const inputs_block =
    "    inputs:\n"
    "      x: {dtype: bf16, shape: [32, 32], uniform: {lo: -2, hi: 2}, seed: 1}\n"
    "      x16: {dtype: fp16, shape: [32, 32], uniform: {lo: -2, hi: 2}, seed: 1}\n"
    "      dy: {dtype: bf16, shape: [32, 32], uniform: {lo: -1, hi: 1}, seed: 2}\n"
    "      w1: {dtype: bf16, shape: [32, 32], uniform: {lo: -0.35, hi: 0.35}, seed: 3}\n"
    "      w2: {dtype: bf16, shape: [32, 32], uniform: {lo: -0.35, hi: 0.35}, seed: 4}\n"
    "      wide: {dtype: bf16, shape: [16, 48], uniform: {lo: -0.35, hi: 0.35}, seed: 5}\n"
    "      g: {dtype: fp32, shape: [32], uniform: {lo: -0.1, hi: -0.02}, seed: 6}\n"
    "      beta: {dtype: fp32, shape: [32], uniform: {lo: 0.2, hi: 0.5}, seed: 7}\n"
    "      short: {dtype: fp32, shape: [31], uniform: {lo: 0.2, hi: 0.5}, seed: 8}\n"
    "      w_dq: {dtype: bf16, shape: [16, 32], uniform: {lo: -0.3, hi: 0.3}, seed: 10}\n"
    "      q_norm: {dtype: fp32, shape: [16], uniform: {lo: 0.8, hi: 1.2}, seed: 11}\n"
    "      w_uq: {dtype: bf16, shape: [32, 16], uniform: {lo: -0.43, hi: 0.43}, seed: 12}\n"
    "      w_dkv: {dtype: bf16, shape: [24, 32], uniform: {lo: -0.3, hi: 0.3}, seed: 13}\n"
    "      kv_norm: {dtype: fp32, shape: [16], uniform: {lo: 0.8, hi: 1.2}, seed: 14}\n"
    "      w_ukv: {dtype: bf16, shape: [32, 16], uniform: {lo: -0.43, hi: 0.43}, seed: 15}\n"
    "      w_o: {dtype: bf16, shape: [32, 16], uniform: {lo: -0.43, hi: 0.43}, seed: 16}\n";

/* An mla op over the [32, 32] activation (sbhd, 2 sequences of 16), combined K/V weights;
 * MLA_OP(extra, weights-extra) adds fields and weights. */
#define MLA_DIMS "dims: {heads: 2, q_lora_rank: 16, kv_lora_rank: 16, dn: 8, dr: 8, dv: 8}"
#define MLA_WEIGHTS                                                                                \
    "weights: {w_dq: w_dq, q_norm: q_norm, w_uq: w_uq, w_dkv: w_dkv, kv_norm: kv_norm, w_ukv: "    \
    "w_ukv, w_o: w_o"
#define MLA_OP(extra, wextra)                                                                      \
    "      - mla: {name: m, " extra MLA_DIMS ", " MLA_WEIGHTS wextra "}}\n"

/* A case file with one program case: program, variants and outputs are YAML blocks
 * indented for the case (variants may be ""). */
static char *case_text(const char *program, const char *variants, const char *outputs)
{
    size_t n = strlen(program) + strlen(variants) + strlen(outputs) + 2048;
    char *t = malloc(n);
    ck_assert_ptr_nonnull(t);
    snprintf(t, n,
             "qspec: 1\ncases:\n  - id: p\n    rules: [CASE-PROG]\n    op: program\n%s"
             "    program:\n%s%s%s    outputs:\n%s",
             inputs_block, program, variants[0] ? "    variants:\n" : "", variants, outputs);
    return t;
}

static qs_status load(qs_ctx *ctx, const char *text, qsk_case_file *f)
{
    qs_status st =
        qsk_case_file_parse(ctx, "t.yaml", text, strlen(text), qsk_rule_defined, NULL, f);
    for (size_t i = 0; st == QS_OK && i < f->ncases; i++)
        st = qsk_case_check(ctx, &f->cases[i]);
    return st;
}

/* "t.yaml:L:C: " for the first occurrence of needle in text at or after from (NULL: the
 * start): the position a message must name, found from the text itself. */
static void position_after(const char *text, const char *from, const char *needle, char *buf,
                           size_t cap)
{
    const char *at = strstr(from ? from : text, needle);
    ck_assert_msg(at != NULL, "needle '%s' is not in the text", needle);
    int line = 1, col = 1;
    for (const char *p = text; p < at; p++) {
        col = *p == '\n' ? 1 : col + 1;
        line += *p == '\n';
    }
    snprintf(buf, cap, "t.yaml:%d:%d: ", line, col);
}

static void position_of(const char *text, const char *needle, char *buf, size_t cap)
{
    position_after(text, NULL, needle, buf, cap);
}

static int line_of(const char *text, const char *needle)
{
    char buf[64];
    int line;
    position_of(text, needle, buf, sizeof buf);
    ck_assert_int_eq(sscanf(buf, "t.yaml:%d:", &line), 1);
    return line;
}

/* Loading text fails with QS_ERR_FORMAT at the position of needle, with a message holding
 * what. */
static void expect_load_error(const char *text, const char *needle, const char *what)
{
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    char pos[64];
    position_of(text, needle, pos, sizeof pos);
    qs_status st = load(ctx, text, &f);
    const char *msg = qs_ctx_errmsg(ctx);
    ck_assert_msg(st == QS_ERR_FORMAT, "expected a load error '%s' at %s, got %s: %s", what, pos,
                  qs_status_name(st), msg);
    ck_assert_msg(strncmp(msg, pos, strlen(pos)) == 0 && strstr(msg, what) != NULL,
                  "expected '%s%s', got '%s'", pos, what, msg);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
}

/* Generates the case's inputs and runs it on the reference; *out gets the outputs. */
static qs_status run_case(qs_ctx *ctx, const qsk_case *c, qsk_results *out)
{
    qs_tensor in[16];
    memset(in, 0, sizeof in);
    ck_assert_uint_le(c->ninputs, 16);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_int_eq(qsk_input_generate(ctx, &c->inputs[i], &in[i]), QS_OK);
    memset(out, 0, sizeof *out);
    qs_status st = qsk_op_find("program")->run_ref(ctx, c, in, out);
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    return st;
}

/* Loads text (which must load) and runs its case; returns the run's status, with the
 * message in msg. */
static qs_status load_and_run(const char *text, char *msg, size_t cap)
{
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    qs_status st = load(ctx, text, &f);
    ck_assert_msg(st == QS_OK, "load: %s", qs_ctx_errmsg(ctx));
    qsk_results out;
    st = run_case(ctx, &f.cases[0], &out);
    snprintf(msg, cap, "%s", st == QS_OK ? "" : qs_ctx_errmsg(ctx));
    qsk_results_free(&out);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    return st;
}

static const char *const chain_program = "      - autocast:\n"
                                         "          when: q\n"
                                         "          recipe: delayed\n"
                                         "          options: {history: 8}\n"
                                         "          body:\n"
                                         "            - linear: {name: lin1, w: w1}\n"
                                         "            - checkpoint:\n"
                                         "                when: ckpt\n"
                                         "                body: [{linear: {name: lin2, w: w2}}]\n"
                                         "      - backward: {dy: dy}\n";

static const char *const y_output = "      y: {compare: bitwise, digest: pending}\n";

/* ---------------------------------------------------------------- the loader */

/* [CASE-PROG] [CASE-PROG-REGION] [CASE-PROG-OP] [CASE-PROG-VARIANT] a valid program: its
 * regions, ops, recipe options per role, tags and variants with their defaults. */
START_TEST(test_loader_builds_the_statement_tree)
{
    const char *prog =
        "      - autocast:\n"
        "          recipe: delayed\n"
        "          options: {history: 8}\n"
        "          x: {margin: 2}\n"
        "          body:\n"
        "            - linear: {name: lin1, w: w1}\n"
        "            - autocast: {enabled: false, when: off, body: [{linear: {name: lin2, w: "
        "w2}}]}\n"
        "            - checkpoint: [{island: {name: isl, body: [{gdn: {name: gdn, g: g, beta: "
        "beta}}]}}]\n"
        "      - backward: {dy: dy}\n";
    const char *vars = "      - {name: a, tags: [off], steps: 2, replay: outside_autocast, rng: "
                       "{seed: 5, offset: 6}}\n"
                       "      - {name: b, x: x}\n";
    char *text = case_text(prog, vars, y_output);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qskp_program *p = f.cases[0].program;
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(p->root.nbody, 2);
    const qskp_node *ac = &p->root.body[0];
    ck_assert_int_eq(ac->kind, QSKP_AUTOCAST);
    ck_assert_int_eq(ac->enabled, 1);
    ck_assert_int_eq(ac->calibrating, 0);
    ck_assert_int_eq(ac->recipe.kind, QS_RECIPE_DELAYED);
    for (int r = 0; r < QS_SCOPE_ROLE_COUNT; r++)
        ck_assert_int_eq(ac->recipe.cfg[r].history_len, 8);
    ck_assert_int_eq(ac->recipe.cfg[QS_SCOPE_X].margin, 2);
    ck_assert_int_eq(ac->recipe.cfg[QS_SCOPE_W].margin, 0);
    ck_assert_int_eq(ac->recipe.cfg[QS_SCOPE_DY].role, QS_ROLE_GRAD_OUTPUT);
    ck_assert_uint_eq(ac->nbody, 3);
    const qskp_node *off = &ac->body[1], *ck = &ac->body[2];
    ck_assert_int_eq(off->kind, QSKP_AUTOCAST);
    ck_assert_int_eq(off->enabled, 0);
    ck_assert_int_eq(off->has_recipe, 0);
    ck_assert_str_eq(off->when, "off");
    ck_assert_int_eq(ck->kind, QSKP_CHECKPOINT);
    ck_assert_int_eq(ck->body[0].kind, QSKP_ISLAND);
    ck_assert_str_eq(ck->body[0].name, "isl");
    const qskp_node *gdn = &ck->body[0].body[0];
    ck_assert_int_eq(gdn->kind, QSKP_GDN);
    ck_assert_str_eq(gdn->in[0], "g");
    ck_assert_str_eq(gdn->in[1], "beta");
    ck_assert_int_eq(p->root.body[1].kind, QSKP_BACKWARD);
    ck_assert_str_eq(p->root.body[1].in[0], "dy");
    ck_assert_uint_eq(p->nvariants, 2);
    const qskp_variant *a = qskp_variant_find(p, "a"), *b = qskp_variant_find(p, "b");
    ck_assert_int_eq(a->steps, 2);
    ck_assert_int_eq(a->replay, QS_REPLAY_OUTSIDE_AUTOCAST);
    ck_assert_uint_eq(a->rng_seed, 5);
    ck_assert_uint_eq(a->rng_offset, 6);
    ck_assert_int_eq(b->steps, 1);
    ck_assert_int_eq(b->replay, QS_REPLAY_SPEC);
    ck_assert_str_eq(b->x, "x");
    ck_assert_int_eq(qskp_node_in(off, a), 1);
    ck_assert_int_eq(qskp_node_in(off, b), 0);
    /* a region left out is transparent: its op stays in the variant */
    ck_assert_ptr_eq(qskp_op_find(p, b, "lin2"), &off->body[0]);
    ck_assert_ptr_null(qskp_op_find(p, b, "nosuch"));
    qsk_case_file_free(&f);
    free(text);
    /* no variants: one named main; a case-level expect_error reaches every variant */
    text = case_text("      - autocast: {recipe: mxfp8, body: [{linear: {name: lin1, w: w1}}, "
                     "{gdn: {name: gdn, g: g, beta: beta}}]}\n",
                     "", "      error: {compare: bitwise, digest: pending}\n");
    char *with_err = malloc(strlen(text) + 64);
    const char *at = strstr(text, "    program:");
    snprintf(with_err, strlen(text) + 64, "%.*s    expect_error: QS_ERR_STATE\n%s",
             (int)(at - text), text, at);
    ck_assert_msg(load(ctx, with_err, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    p = f.cases[0].program;
    ck_assert_uint_eq(p->nvariants, 1);
    ck_assert_str_eq(p->variants[0].name, "main");
    ck_assert_int_eq(p->variants[0].error.set, 1);
    ck_assert_int_eq(p->variants[0].error.code, QS_ERR_STATE);
    qsk_case_file_free(&f);
    free(with_err);
    free(text);
    qs_ctx_free(ctx);
}
END_TEST

typedef struct bad_case {
    const char *program, *variants, *outputs;
    const char *needle; /* where the error must point */
    const char *what;   /* what the message must say */
} bad_case;

/* [CASE-PROG] [CASE-PROG-REGION] [CASE-PROG-OP] [CASE-PROG-VARIANT] [CASE-PROG-OUTPUT]
 * [CASE-PROG-COMPARE] [CASE-PROG-TRACE] [CASE-PROG-STATE] [CASE-PROG-INJECT]
 * [CASE-PROG-ERROR] [CASE-SCHEMA-ERRORS] every rejection path names the offending node. */
START_TEST(test_loader_rejects_bad_programs_with_file_line_col)
{
    const char *lin = "      - linear: {name: lin1, w: w1}\n";
    const bad_case bad[] = {
        {"      - frobnicate: {name: f}\n", "", y_output, "frobnicate",
         "unknown program statement 'frobnicate'"},
        {"      - {linear: {name: a, w: w1}, gdn: {name: b, g: g, beta: beta}}\n", "", y_output,
         "{linear", "a mapping with one key"},
        {"      - backward: {dy: dy}\n      - linear: {name: lin1, w: w1}\n", "", y_output,
         "backward", "'backward' must be the last statement"},
        {"      - mla: {name: attn}\n", "", y_output, "{name: attn}", "op 'mla' needs a 'layout'"},
        {"      - mla: {layout: sbhd, b: 2, " MLA_DIMS ", " MLA_WEIGHTS "}}\n", "", y_output,
         "{layout", "op 'mla' needs a 'name'"},
        {"      - mla: {name: abcdefghijklmnopqrstuvw, layout: sbhd, b: 2, " MLA_DIMS
         ", " MLA_WEIGHTS "}}\n",
         "", y_output, "abcdefghijklmnopqrstuvw", "an mla op's name has at most 22 characters"},
        {MLA_OP("layout: shbd, b: 2, ", ""), "", y_output, "shbd", "'shbd' is not a valid layout"},
        {MLA_OP("layout: sbhd, ", ""), "", y_output, "sbhd", "an sbhd mla op needs 'b'"},
        {MLA_OP("layout: thd, b: 2, ", ""), "", y_output, "2, dims",
         "a thd mla op takes 'seqlens', not 'b' or 's'"},
        {MLA_OP("layout: thd, seqlens: \"3,x\", ", ""), "", y_output, "\"3,x\"",
         "'seqlens' is a comma-separated list of sequence lengths"},
        {MLA_OP("layout: thd, seqlens: \"3,5\", ", ""), "", y_output,
         "mla:", "impossible shape: mla 'm' gets 32 rows, but its tokens are the seqlens sum, 8"},
        {MLA_OP("layout: sbhd, b: 3, ", ""), "", y_output,
         "mla:", "its tokens are a multiple of b = 3"},
        {MLA_OP("layout: sbhd, b: 2, mask: sideways, ", ""), "", y_output, "sideways",
         "'sideways' is not a valid mask"},
        {MLA_OP("layout: sbhd, b: 2, up_proj_checkpoint: {unless: rc}, ", ""), "", y_output,
         "unless: rc", "unknown key 'unless' in 'up_proj_checkpoint'"},
        {"      - mla: {name: m, layout: sbhd, b: 2, dims: {heads: 2, kv_lora_rank: 16, dn: 8, "
         "dr: 7, dv: 8}, " MLA_WEIGHTS "}}\n",
         "", y_output, "7, dv", "'dr' (the RoPE dim) must be even"},
        {"      - mla: {name: m, layout: sbhd, b: 2, dims: {kv_lora_rank: 16, dn: 8, dr: 8, dv: "
         "8}, " MLA_WEIGHTS "}}\n",
         "", y_output, "{kv_lora_rank", "'dims' needs 'heads'"},
        {MLA_OP("layout: sbhd, b: 2, ", ", w_zz: w1"), "", y_output, "w_zz",
         "mla 'm': 'w_zz' is not an MLA parameter"},
        {MLA_OP("layout: sbhd, b: 2, ", ", w_q: w1"), "", y_output, "w1}}",
         "mla 'm': this configuration (q LoRA, combined K/V) does not use 'w_q'"},
        {MLA_OP("layout: sbhd, b: 2, ", ", w_uk: w1"), "", y_output, "w1}}",
         "K/V weights are either combined (w_ukv) or split (w_uk and w_uv), not both"},
        {"      - mla: {name: m, layout: sbhd, b: 2, " MLA_DIMS
         ", weights: {w_dq: w_dq, q_norm: q_norm, w_uq: w_uq, w_dkv: w_dkv, kv_norm: kv_norm, "
         "w_ukv: w_ukv}}\n",
         "", y_output, "{w_dq", "mla 'm': 'weights' needs 'w_o'"},
        {"      - mla: {name: m, layout: sbhd, b: 2, " MLA_DIMS
         ", weights: {w_dq: w_dq, q_norm: q_norm, w_uq: w1, w_dkv: w_dkv, kv_norm: kv_norm, "
         "w_ukv: w_ukv, w_o: w_o}}\n",
         "", y_output, "w1,", "impossible shape: mla 'm': the weight 'w_uq' (w1) must be [32, 16]"},
        {"      - mla: {name: m, layout: sbhd, b: 2, " MLA_DIMS
         ", weights: {w_dq: w_dq, q_norm: short, w_uq: w_uq, w_dkv: w_dkv, kv_norm: kv_norm, "
         "w_ukv: w_ukv, w_o: w_o}}\n",
         "", y_output, "short,", "the weight 'q_norm' (short) must be [16]"},
        {"      - mla: {name: m, layout: sbhd, b: 2, " MLA_DIMS
         ", weights: {w_dq: w_dq, q_norm: w_dq, w_uq: w_uq, w_dkv: w_dkv, kv_norm: kv_norm, "
         "w_ukv: w_ukv, w_o: w_o}}\n",
         "", y_output, "w_dq, w_uq", "the weight 'q_norm' (w_dq) must be fp32, not bf16"},
        {"      - mla: {name: m, layout: sbhd, b: 2, " MLA_DIMS
         ", weights: {w_dq: w_dq, q_norm: q_norm, w_uq: w_uq, w_dkv: w_dkv, kv_norm: kv_norm, "
         "w_ukv: w_ukv, w_o: w9}}\n",
         "", y_output, "w9", "mla 'm': the case has no input 'w9'"},
        {MLA_OP("layout: sbhd, b: 2, ", ""),
         "      - {name: v, trace: [{phase: forward, op: m, precision: high}]}\n", y_output,
         "{phase", "trace: mla op 'm' is traced as its parts"},
        {MLA_OP("layout: sbhd, b: 2, absorbed: true, ", ""),
         "      - {name: v, trace: [{phase: forward, op: m/kv_up, precision: high}]}\n", y_output,
         "{phase", "trace: mla op 'm' has no part 'kv_up'"},
        {MLA_OP("layout: sbhd, b: 2, ", ""),
         "      - {name: v, trace: [{phase: forward, op: m/q_up, kind: einsum, precision: "
         "high}]}\n",
         y_output, "{phase", "trace: op 'm/q_up' is a linear, not a einsum"},
        {lin, "      - {name: v, trace: [{phase: forward, op: lin1/q_up, precision: high}]}\n",
         y_output, "{phase", "trace: op 'lin1' is not an mla op"},
        {lin, "      - {name: v, trace: [{phase: forward, op: a/b/c, precision: high}]}\n",
         y_output, "a/b/c", "an op name is NAME or NAME/PART"},
        {MLA_OP("layout: sbhd, b: 2, ", ""), "      - {name: v, state: [{op: m, role: x}]}\n",
         y_output, "{op: m", "state: mla op 'm' needs 'linear'"},
        {MLA_OP("layout: sbhd, b: 2, ", ""),
         "      - {name: v, state: [{op: m, linear: k_up, role: x}]}\n", y_output, "{op: m",
         "state: mla op 'm' needs 'linear', one of the linears it runs"},
        {lin, "      - {name: v, state: [{op: lin1, linear: q_up, role: x}]}\n", y_output,
         "{op: lin1", "'linear' names a linear of an mla op"},
        {lin, "      - {name: v, state: [{op: lin1, linear: up, role: x}]}\n", y_output, "up,",
         "'up' is not a valid MLA linear"},
        {lin, "      - {name: v, replays: 0}\n", y_output, "{name: v",
         "'replays' counts the replays of a run with a backward"},
        {"      - linear: {name: lin1, w: w1}\n      - backward: {dy: dy}\n",
         "      - {name: v, replays: 17}\n", y_output, "17}", "'replays' must be an integer"},
        {MLA_OP("layout: sbhd, b: 2, ", "") "      - backward: {dy: dy}\n", "",
         "      grad.m.w_q: {compare: bitwise, digest: pending}\n", "grad.m.w_q",
         "names no op of the variant (or parameter of its mla op)"},
        {"      - sdpa: {name: attn}\n", "", y_output, "sdpa", "op 'sdpa' is not available"},
        {"      - linear: {w: w1}\n", "", y_output, "{w: w1}", "op 'linear' needs a 'name'"},
        {"      - linear: {name: lin1}\n", "", y_output, "{name: lin1}", "needs 'w'"},
        {"      - linear: {name: lin1, w: w9}\n", "", y_output, "w9", "the case has no input 'w9'"},
        {"      - linear: {name: lin1, w: w1, bias: b}\n", "", y_output, "bias",
         "unknown key 'bias' in linear"},
        {"      - linear: {name: \"lin 1\", w: w1}\n", "", y_output, "\"lin 1\"",
         "may hold only letters"},
        {"      - linear: {name: lin1, w: w1}\n      - checkpoint: [{linear: {name: lin1, w: "
         "w2}}]\n",
         "", y_output, "linear: {name: lin1, w: w2", "op name 'lin1' is used twice"},
        {"      - linear: {name: lin1, w: g}\n", "", y_output, "g}",
         "the weight 'g' must be a 2-D bf16 input"},
        {"      - linear: {name: lin1, w: wide}\n", "", y_output, "wide",
         "impossible shape: linear 'lin1' takes [32, 32] activations"},
        {"      - island: [{gdn: {name: gdn, g: g, beta: short}}]\n", "", y_output, "short",
         "'short' must be a 1-D fp32 input of 32 values"},
        {"      - autocast: {body: []}\n", "", y_output, "{body",
         "an enabled or calibrating autocast needs a 'recipe'"},
        {"      - autocast: {recipe: mxfp8}\n", "", y_output, "{recipe",
         "missing required field 'body'"},
        {"      - autocast: {recipe: fp8, body: []}\n", "", y_output, "fp8",
         "'fp8' is not a valid recipe"},
        {"      - autocast: {recipe: mxfp8, options: {history: 8}, body: []}\n", "", y_output, "8}",
         "history"},
        {"      - autocast: {recipe: delayed, x: {role: weight}, body: []}\n", "", y_output, "role",
         "a region sets the roles itself"},
        {"      - autocast: {enabled: maybe, recipe: mxfp8, body: []}\n", "", y_output, "maybe",
         "'enabled' must be true or false"},
        {"      - autocast: {enabled: false, options: {margin: 1}, body: []}\n", "", y_output,
         "{enabled", "recipe options need a 'recipe'"},
        {"      - island: {body: [], when: \"a b\"}\n", "", y_output, "\"a b\"",
         "'when' 'a b' may hold only"},
        {"      - island: []\n", "", y_output, "- island", "'program' holds no op"},
        {lin, "      - {name: v, colour: red}\n", y_output, "colour",
         "unknown key 'colour' in a variant"},
        {lin, "      - {name: v}\n      - {name: v, steps: 1}\n", y_output, "{name: v, steps: 1}",
         "duplicate variant name 'v'"},
        {lin, "      - {name: v, steps: 0}\n", y_output, "0}", "'steps' must be an integer from 1"},
        {lin, "      - {name: v, replay: sometimes}\n", y_output, "sometimes",
         "'sometimes' is not a valid replay"},
        {lin, "      - {name: v, x: dy16}\n", y_output, "dy16", "the case has no input 'dy16'"},
        {lin, "      - {name: v, x: g}\n", y_output, "^g: {dtype",
         "the program input 'g' must be a 2-D bf16 or fp16 input"},
        {lin, "      - {name: v, same_as: w}\n", y_output, "w}", "no variant named 'w'"},
        {lin, "      - {name: v, same_as: v}\n", y_output, "v}",
         "a variant is compared with another variant"},
        {lin, "      - {name: v}\n      - {name: u, close_to: {variant: v}}\n", y_output,
         "{variant: v}", "close_to needs a tolerance"},
        {lin,
         "      - {name: v}\n      - {name: u, close_to: {variant: v, outputs: [state], "
         "cosine: 0.9}}\n",
         y_output, "{variant: v, outputs", "close_to compares tensors"},
        {lin, "      - {name: v}\n      - {name: u, same_as: {variant: v, outputs: [dx]}}\n",
         y_output, "{variant: v, outputs", "runs no backward: it has no 'dx'"},
        {lin, "      - {name: v, trace: [{phase: forward, op: lin9, precision: high}]}\n", y_output,
         "{phase", "trace: variant 'v' has no op 'lin9'"},
        {lin,
         "      - {name: v, trace: [{phase: forward, op: lin1, kind: gdn, precision: high}]}\n",
         y_output, "{phase", "trace: op 'lin1' is a linear, not a gdn"},
        {lin, "      - {name: v, trace: [{phase: sideways, op: lin1, precision: high}]}\n",
         y_output, "sideways", "'sideways' is not a valid phase"},
        {lin, "      - {name: v, trace: [{phase: forward, op: lin1}]}\n", y_output,
         "{phase: forward, op: lin1}", "needs 'phase', 'op' and 'precision'"},
        {lin,
         "      - {name: v, trace: [{phase: forward, op: lin1, precision: high, scale_bits: "
         "[1.0]}]}\n",
         y_output, "1.0]", "a scale is 'prev' or 0x and 8 hex digits"},
        {lin, "      - {name: v, state: [{op: lin1, role: z}]}\n", y_output, "z}",
         "'z' is not a valid role"},
        {lin, "      - {name: v, state: [{op: lin1, role: x, recipe: mxfp8, filled: 1}]}\n",
         y_output, "{op: lin1", "only delayed scaling has a history"},
        {"      - island: [{gdn: {name: gdn, g: g, beta: beta}}]\n",
         "      - {name: v, state: [{op: gdn, role: x}]}\n", y_output, "{op: gdn",
         "state: variant 'v' has no linear 'gdn'"},
        {lin, "      - {name: v, state: [{op: lin1, role: x, holds_amax: w7}]}\n", y_output, "w7",
         "'holds_amax': the case has no input 'w7'"},
        {lin, "      - {name: v, inject_error: {at: autocast_exit}}\n", y_output, "autocast_exit",
         "a region's exit in a program cannot fail"},
        {lin, "      - {name: v, inject_error: {at: linear_sideways}}\n", y_output,
         "linear_sideways", "is not an injection point"},
        {lin, "      - {name: v, inject_error: {at: every, nth: 2}}\n", y_output, "2}",
         "'nth' applies to a named injection point"},
        {lin, "      - {name: v, inject_error: {at: linear_forward, step: 3}}\n", y_output,
         "{at: linear_forward", "inject_error: step 3, but the variant runs 1 step(s)"},
        {lin, "      - {name: v, expect_error: QS_ERR_OOPS}\n", y_output, "QS_ERR_OOPS",
         "'QS_ERR_OOPS' is not an error code"},
        {lin, "      - {name: v, expect_error: QS_ERR_INJECTED}\n", y_output, "QS_ERR_INJECTED",
         "QS_ERR_INJECTED is what inject_error causes"},
        {lin, "      - {name: v, inject_error: {at: linear_forward}, expect_error: QS_ERR_STATE}\n",
         y_output, "QS_ERR_STATE", "either injects an error or expects one"},
        {lin, "      - {name: v, expect_error: QS_ERR_STATE}\n", y_output, "y: {compare",
         "output 'y' is not produced: the variant expects an error"},
        {lin, "", "      v/y: {compare: bitwise, digest: pending}\n", "v/y",
         "output 'v/y' names no variant"},
        {lin, "", "      error: {compare: bitwise, digest: pending}\n",
         "error:", "the variant expects no error"},
        {lin, "", "      grad.lin1: {compare: bitwise, digest: pending}\n", "grad.lin1",
         "the variant runs no backward"},
        {lin, "", "      grad.lin7: {compare: bitwise, digest: pending}\n", "grad.lin7",
         "names no op of the variant"},
        {lin, "", "      o: {compare: bitwise, digest: pending}\n", "o: {compare",
         "is not a program output"},
        /* [RCP-GELU-OP] a gelu op takes a name only and has no parameter gradient */
        {"      - gelu: {name: act, w: w1}\n", "", y_output, "w: w1", "unknown key 'w' in gelu"},
        {"      - gelu: {when: q}\n", "", y_output, "{when: q}", "op 'gelu' needs a 'name'"},
        {"      - gelu: {name: act}\n      - backward: {dy: dy}\n", "",
         "      grad.act: {compare: bitwise, digest: pending}\n", "grad.act",
         "output 'grad.act' names no op of the variant"},
        {"      - gelu: {name: lin1}\n"
         "      - linear: {name: lin1, w: w1}\n",
         "", y_output, "linear: {name: lin1", "op name 'lin1' is used twice"},
        {"      - linear: {name: lin1, w: w1}\n      - backward: {dy: g}\n", "", y_output,
         "^g: {dtype", "the output gradient 'g' must be a 2-D bf16, fp16 or fp32 input"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *text = case_text(bad[i].program, bad[i].variants, bad[i].outputs);
        /* a needle is searched after the inputs, where the program is, unless it starts
         * with '^' (an input the message names) */
        int top = bad[i].needle[0] == '^';
        char want[64];
        position_after(text, top ? NULL : strstr(text, "    program:"), bad[i].needle + top, want,
                       sizeof want);
        qs_ctx *ctx = qs_ctx_new();
        qsk_case_file f;
        qs_status st = load(ctx, text, &f);
        const char *msg = qs_ctx_errmsg(ctx);
        ck_assert_msg(st == QS_ERR_FORMAT, "case %zu: expected '%s%s', got %s: %s", i, want,
                      bad[i].what, qs_status_name(st), msg);
        ck_assert_msg(strncmp(msg, want, strlen(want)) == 0 && strstr(msg, bad[i].what),
                      "case %zu: expected '%s%s', got '%s'", i, want, bad[i].what, msg);
        qsk_case_file_free(&f);
        qs_ctx_free(ctx);
        free(text);
    }
}
END_TEST

/* [CASE-PROG] program keys belong to op: program; op: program takes no params. */
START_TEST(test_program_keys_belong_to_program_cases)
{
    const char *cast = "qspec: 1\ncases:\n  - id: c\n    rules: [FMT-E4M3-OVF]\n    op: cast\n"
                       "    params: {to: e4m3}\n"
                       "    inputs: {x: {dtype: fp32, shape: [1], values: [1]}}\n"
                       "    outputs: {y: {compare: bitwise, digest: pending}}\n"
                       "    variants: []\n";
    expect_load_error(cast, "id: c", "'variants' belongs to op: program, not op: cast");
    char *text = case_text("      - linear: {name: lin1, w: w1}\n", "", y_output);
    char *with = malloc(strlen(text) + 64);
    const char *at = strstr(text, "    program:");
    snprintf(with, strlen(text) + 64, "%.*s    params: {seed: 77}\n%s", (int)(at - text), text, at);
    expect_load_error(with, "77}", "op 'program' takes no params");
    free(with);
    /* a case without the program */
    char *none = malloc(strlen(text) + 1);
    snprintf(none, strlen(text) + 1, "%.*s    outputs:\n%s", (int)(at - text), text, y_output);
    expect_load_error(none, "id: p", "missing required field 'program'");
    free(none);
    free(text);
}
END_TEST

/* [CASE-PROG-ISLAND-CHECK] [SCOPE-ISLAND-REJECT] [CASE-PROG-ERROR] [SCOPE-FAIL-ATOMIC] a GDN
 * without an island in a quantizing region is a load error at the gdn naming the remedy,
 * unless the variant expects the engine's rejection, which the run then checks; the same
 * for a calibrating region and for an island whose dtype the GDN does not get. */
START_TEST(test_island_policy_is_checked_at_load_and_at_run)
{
    const char *prog = "      - autocast:\n"
                       "          recipe: mxfp8\n"
                       "          body:\n"
                       "            - linear: {name: lin1, w: w1}\n"
                       "            - gdn: {name: gdn, g: g, beta: beta}\n"
                       "      - backward: {dy: dy}\n";
    char *text = case_text(prog, "", y_output);
    expect_load_error(text, "gdn: {name: gdn",
                      "gdn 'gdn' sits in an enabled region (recipe mxfp8) without an island");
    expect_load_error(text, "gdn: {name: gdn", "wrap it in an 'island' region");
    free(text);
    /* the wrong code does not excuse it */
    text = case_text(prog, "      - {name: r, expect_error: QS_ERR_DTYPE}\n",
                     "      error: {compare: bitwise, digest: pending}\n");
    expect_load_error(text, "gdn: {name: gdn", "in variant 'r'");
    free(text);
    /* expected: the engine's own rejection is checked at run time */
    text = case_text(prog,
                     "      - {name: r, expect_error: {code: QS_ERR_STATE, message: \"cannot run "
                     "quantized\"}}\n",
                     "      error: {compare: bitwise, digest: pending}\n"
                     "      state: {compare: bitwise, digest: pending}\n");
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    qsk_results out;
    ck_assert_msg(run_case(ctx, &f.cases[0], &out) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qs_tensor *err = qsk_results_get(&out, "error"), *st = qsk_results_get(&out, "state");
    ck_assert_ptr_nonnull(err);
    char msg[512];
    snprintf(msg, sizeof msg, "%.*s", (int)err->nbytes, (const char *)err->data);
    ck_assert_ptr_nonnull(strstr(msg, "module 'gdn' cannot run quantized"));
    ck_assert_ptr_nonnull(strstr(msg, "recipe mxfp8"));
    /* the failed cold run left no quantizer: the state is the RNG state alone */
    ck_assert_uint_eq(st->nbytes, 16);
    qsk_results_free(&out);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
    text = case_text("      - calibrate:\n"
                     "          recipe: delayed\n"
                     "          body: [{gdn: {name: gdn, g: g, beta: beta}}]\n",
                     "", y_output);
    expect_load_error(text, "gdn: {name", "a calibrating region (recipe delayed)");
    free(text);
    text = case_text("      - island: [{linear: {name: lin1, w: w1}}, {gdn: {name: gdn, g: g, "
                     "beta: beta}}]\n",
                     "      - {name: v, x: x16}\n", y_output);
    expect_load_error(text, "gdn: {name", "gets bf16 activations in an island that runs in fp16");
    free(text);
    /* a checkpoint is no island: the GDN in it still needs one */
    text = case_text("      - autocast: {recipe: block, body: [{checkpoint: [{gdn: {name: gdn, g: "
                     "g, beta: beta}}]}]}\n",
                     "", y_output);
    expect_load_error(text, "gdn: {name", "without an island");
    free(text);
    /* a disabled inner region needs no island, and a tag can remove the quantizing region */
    text = case_text("      - autocast: {when: q, recipe: block, body: [{autocast: {enabled: "
                     "false, body: [{gdn: {name: gdn, g: g, beta: beta}}]}}]}\n",
                     "      - {name: v, tags: [q]}\n", y_output);
    ck_assert_int_eq(load_and_run(text, msg, sizeof msg), QS_OK);
    free(text);
}
END_TEST

/* ---------------------------------------------------------------- the runner */

/* The program of chain_program built through the engine API directly. */
static qs_program *chain_by_hand(qs_ctx *ctx, const qs_tensor *w1, const qs_tensor *w2)
{
    qs_program *p;
    qs_scope_recipe r;
    int top, ck, id;
    ck_assert_int_eq(qs_program_new(ctx, &p), QS_OK);
    ck_assert_int_eq(qs_scope_recipe_default(ctx, &r, QS_RECIPE_DELAYED), QS_OK);
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
        r.cfg[i].history_len = 8;
    qs_autocast_params a = {1, 0, &r, 0};
    ck_assert_int_eq(qs_program_autocast(ctx, p, QS_PROGRAM_ROOT, &a, &top), QS_OK);
    ck_assert_int_eq(qs_program_linear(ctx, p, top, "lin1", w1, &id), QS_OK);
    ck_assert_int_eq(qs_program_checkpoint(ctx, p, top, &ck), QS_OK);
    ck_assert_int_eq(qs_program_linear(ctx, p, ck, "lin2", w2, &id), QS_OK);
    return p;
}

static uint32_t le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void expect_same(const char *what, const qs_tensor *a, const qs_tensor *b)
{
    ck_assert_msg(qs_tensor_same_layout(a, b) && a->nbytes == b->nbytes &&
                      memcmp(a->data, b->data, a->nbytes) == 0,
                  "%s differs from the engine's own run", what);
}

/* [CASE-PROG-OUTPUT] [CASE-PROG-RUN] [CASE-PROG-VARIANT] the outputs of a two-step variant
 * are those of the same program built by hand and run twice on the engine: y, dx, each
 * gradient, the trace as JSON lines, and the state bytes laid out as specified. */
START_TEST(test_runner_outputs_match_a_program_built_by_hand)
{
    char *text = case_text(chain_program, "      - {name: main, tags: [q, ckpt], steps: 2}\n",
                           "      y: {compare: bitwise, digest: pending}\n"
                           "      dx: {compare: bitwise, digest: pending}\n"
                           "      grad.lin1: {compare: bitwise, digest: pending}\n"
                           "      grad.lin2: {compare: bitwise, digest: pending}\n"
                           "      trace: {compare: bitwise, digest: pending}\n"
                           "      state: {compare: bitwise, digest: pending}\n");
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qsk_results out;
    ck_assert_msg(run_case(ctx, c, &out) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    qs_tensor x, dy, w1, w2;
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "x"), &x), QS_OK);
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "dy"), &dy), QS_OK);
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "w1"), &w1), QS_OK);
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "w2"), &w2), QS_OK);
    qs_ctx *ectx = qs_ctx_new();
    qs_program *p = chain_by_hand(ectx, &w1, &w2);
    qs_program_result res;
    for (int step = 0; step < 2; step++) {
        if (step)
            qs_program_result_free(&res);
        ck_assert_int_eq(qs_program_run(ectx, p, &x, &dy, &res), QS_OK);
    }
    expect_same("y", qsk_results_get(&out, "y"), &res.y);
    expect_same("dx", qsk_results_get(&out, "dx"), &res.dx);
    expect_same("grad.lin1", qsk_results_get(&out, "grad.lin1"), &res.grads[0]);
    expect_same("grad.lin2", qsk_results_get(&out, "grad.lin2"), &res.grads[1]);
    char *jsonl;
    size_t len;
    ck_assert_int_eq(qs_trace_to_jsonl(ectx, &res.trace, &jsonl, &len), QS_OK);
    const qs_tensor *tr = qsk_results_get(&out, "trace");
    ck_assert_int_eq(tr->dtype, QS_U8);
    ck_assert_uint_eq(tr->nbytes, len);
    ck_assert_int_eq(memcmp(tr->data, jsonl, len), 0);
    free(jsonl);
    /* state: (op, recipe, role, scale, scale_inv, len, history...) per quantizer, then RNG */
    const qs_tensor *st = qsk_results_get(&out, "state");
    const unsigned char *b = st->data;
    size_t at = 0;
    for (int op = 0; op < 2; op++)
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
            const qs_quantizer *q = qs_program_quantizer(p, op, QS_RECIPE_DELAYED, role);
            ck_assert_ptr_nonnull(q);
            ck_assert_uint_eq(le32(b + at), (uint32_t)op);
            ck_assert_uint_eq(le32(b + at + 4), QS_RECIPE_DELAYED);
            ck_assert_uint_eq(le32(b + at + 8), (uint32_t)role);
            ck_assert_uint_eq(le32(b + at + 12), qs_f32_bits(q->ds.scale));
            ck_assert_uint_eq(le32(b + at + 16), qs_f32_bits(q->ds.scale_inv));
            ck_assert_uint_eq(le32(b + at + 20), 8);
            at += 24;
            for (int j = 0; j < 8; j++, at += 4)
                ck_assert_uint_eq(le32(b + at), qs_f32_bits(q->ds.history[j]));
            ck_assert(q->ds.scale != 1.0f); /* two steps: updated */
        }
    ck_assert_uint_eq(st->nbytes, at + 16);
    for (size_t i = at; i < at + 16; i++)
        ck_assert_uint_eq(b[i], 0); /* RNG seed 0, offset 0 */
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ectx);
    qs_tensor_free(&x);
    qs_tensor_free(&dy);
    qs_tensor_free(&w1);
    qs_tensor_free(&w2);
    qsk_results_free(&out);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

/* [CASE-PROG-OP] [CASE-PROG-OUTPUT] [CASE-PROG-REPLAYS] [RCP-MLA-OP] [RCP-MLA-UP-PROJ] an
 * mla op's outputs are those of the same program built by hand on the engine with
 * qs_program_mla: y, dx, its whole gradient and each parameter's, the trace, the replay, and
 * the state bytes with each of its linears' quantizers after the op index. */
START_TEST(test_runner_mla_matches_a_program_built_by_hand)
{
    const char *prog = "      - autocast:\n"
                       "          recipe: delayed\n"
                       "          options: {history: 8}\n"
                       "          body:\n"
                       "      " MLA_OP("layout: sbhd, b: 2, mask: causal, up_proj_checkpoint: "
                                       "true, rope: {yarn_factor: 4, original_max_pos: 8}, ",
                                       "") "      - backward: {dy: dy}\n";
    static const char *const pnames[] = {"w_dq",    "q_norm", "w_uq", "w_dkv",
                                         "kv_norm", "w_ukv",  "w_o"};
    static const qs_mla_param pids[] = {QS_MLA_W_DQ,    QS_MLA_Q_NORM, QS_MLA_W_UQ, QS_MLA_W_DKV,
                                        QS_MLA_KV_NORM, QS_MLA_W_UKV,  QS_MLA_W_O};
    char outs[2048] = "      y: {compare: bitwise, digest: pending}\n"
                      "      dx: {compare: bitwise, digest: pending}\n"
                      "      grad.m: {compare: bitwise, digest: pending}\n"
                      "      trace: {compare: bitwise, digest: pending}\n"
                      "      state: {compare: bitwise, digest: pending}\n";
    for (int i = 0; i < 7; i++) {
        char line[96];
        snprintf(line, sizeof line, "      grad.m.%s: {compare: bitwise, digest: pending}\n",
                 pnames[i]);
        strncat(outs, line, sizeof outs - strlen(outs) - 1);
    }
    char *text = case_text(prog, "      - {name: main, steps: 2, replays: 1}\n", outs);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qsk_results out;
    ck_assert_msg(run_case(ctx, c, &out) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    qs_tensor x, dy, w[7];
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "x"), &x), QS_OK);
    ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, "dy"), &dy), QS_OK);
    qs_program_mla_params mp;
    memset(&mp, 0, sizeof mp);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(qsk_input_generate(ctx, qsk_case_input(c, pnames[i]), &w[i]), QS_OK);
        mp.w[pids[i]] = &w[i];
    }
    mp.cfg.hidden = 32;
    mp.cfg.heads = 2;
    mp.cfg.q_lora_rank = 16;
    mp.cfg.kv_lora_rank = 16;
    mp.cfg.dn = mp.cfg.dr = mp.cfg.dv = 8;
    mp.cfg.norm_eps = 1e-6f;
    mp.cfg.rope_base = 10000.0f;
    mp.cfg.yarn_factor = 4.0f;
    mp.cfg.yarn_mscale = mp.cfg.yarn_mscale_all_dim = 1.0f;
    mp.cfg.yarn_beta_fast = 32.0f;
    mp.cfg.yarn_beta_slow = 1.0f;
    mp.cfg.yarn_original_max_pos = 8;
    mp.layout = QS_ATTN_SBHD;
    mp.mask = QS_ATTN_MASK_CAUSAL;
    mp.b = 2;
    mp.s = 16;
    mp.recompute_up_proj = 1;
    qs_ctx *ectx = qs_ctx_new();
    qs_program *p;
    int top, id;
    ck_assert_int_eq(qs_program_new(ectx, &p), QS_OK);
    qs_scope_recipe r;
    ck_assert_int_eq(qs_scope_recipe_default(NULL, &r, QS_RECIPE_DELAYED), QS_OK);
    for (int i = 0; i < QS_SCOPE_ROLE_COUNT; i++)
        r.cfg[i].history_len = 8;
    qs_autocast_params a = {1, 0, &r, 0};
    ck_assert_int_eq(qs_program_autocast(ectx, p, QS_PROGRAM_ROOT, &a, &top), QS_OK);
    ck_assert_int_eq(qs_program_mla(ectx, p, top, "m", &mp, &id), QS_OK);
    qs_program_result res;
    for (int step = 0; step < 2; step++) {
        if (step)
            qs_program_result_free(&res);
        ck_assert_int_eq(qs_program_run(ectx, p, &x, &dy, &res), QS_OK);
    }
    ck_assert_int_eq(res.nreplays, 1);
    expect_same("y", qsk_results_get(&out, "y"), &res.y);
    expect_same("dx", qsk_results_get(&out, "dx"), &res.dx);
    expect_same("grad.m", qsk_results_get(&out, "grad.m"), &res.grads[0]);
    for (int i = 0; i < 7; i++) {
        char name[32];
        snprintf(name, sizeof name, "grad.m.%s", pnames[i]);
        const qs_tensor *g = qs_program_result_mla_grad(&res, 0, pids[i]);
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(g->dtype, QS_FP32);
        ck_assert_int_eq(g->ndim, w[i].ndim);
        expect_same(name, qsk_results_get(&out, name), g);
    }
    char *jsonl;
    size_t len;
    ck_assert_int_eq(qs_trace_to_jsonl(ectx, &res.trace, &jsonl, &len), QS_OK);
    const qs_tensor *tr = qsk_results_get(&out, "trace");
    ck_assert_uint_eq(tr->nbytes, len);
    ck_assert_int_eq(memcmp(tr->data, jsonl, len), 0);
    ck_assert_ptr_nonnull(strstr(jsonl, "\"phase\":\"recompute\",\"op\":\"m/q_up\""));
    free(jsonl);
    /* state: (op, linear, recipe, role, scale, scale_inv, len, history...) per quantizer of
     * each linear the op runs, in qs_mla_linear order, then RNG */
    const qs_tensor *st = qsk_results_get(&out, "state");
    const unsigned char *b = st->data;
    size_t at = 0;
    int nlin = 0;
    for (int l = 0; l < QS_MLA_LINEAR_COUNT; l++) {
        if (!qs_mla_linear_used(&mp.cfg, 0, (qs_mla_linear)l))
            continue;
        nlin++;
        for (int role = 0; role < QS_SCOPE_ROLE_COUNT; role++) {
            const qs_quantizer *q =
                qs_program_mla_quantizer(p, 0, (qs_mla_linear)l, QS_RECIPE_DELAYED, role);
            ck_assert_ptr_nonnull(q);
            ck_assert_uint_eq(le32(b + at), 0);
            ck_assert_uint_eq(le32(b + at + 4), (uint32_t)l);
            ck_assert_uint_eq(le32(b + at + 8), QS_RECIPE_DELAYED);
            ck_assert_uint_eq(le32(b + at + 12), (uint32_t)role);
            ck_assert_uint_eq(le32(b + at + 16), qs_f32_bits(q->ds.scale));
            ck_assert_uint_eq(le32(b + at + 20), qs_f32_bits(q->ds.scale_inv));
            ck_assert_uint_eq(le32(b + at + 24), 8);
            at += 28;
            for (int j = 0; j < 8; j++, at += 4)
                ck_assert_uint_eq(le32(b + at), qs_f32_bits(q->ds.history[j]));
            ck_assert(q->ds.scale != 1.0f); /* two steps: updated */
        }
    }
    ck_assert_int_eq(nlin, 5); /* q_down, q_up, kv_down, kv_up, out_proj */
    ck_assert_uint_eq(st->nbytes, at + 16);
    qs_program_result_free(&res);
    qs_program_free(p);
    qs_ctx_free(ectx);
    qs_tensor_free(&x);
    qs_tensor_free(&dy);
    for (int i = 0; i < 7; i++)
        qs_tensor_free(&w[i]);
    qsk_results_free(&out);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

typedef struct claim {
    const char *variants;
    const char *what; /* in the failure message; NULL: the claim holds */
} claim;

/* [CASE-PROG-COMPARE] [CASE-PROG-TRACE] [CASE-PROG-STATE] [CASE-PROG-ERROR]
 * [CASE-PROG-INJECT] [RCP-NONVACUOUS] each kind of claim passes when it is true and fails,
 * naming the variant and what differed, when it is false. */
START_TEST(test_false_claims_fail_and_true_ones_pass)
{
    const claim claims[] = {
        {"      - {name: q, tags: [q, ckpt], same_as: e}\n      - {name: e, tags: [q]}\n", NULL},
        {"      - {name: q, tags: [q], same_as: hp}\n      - {name: hp}\n",
         "variant 'q' same_as 'hp': output=y differs: index="},
        {"      - {name: q, tags: [q], differs_from: hp, close_to: {variant: hp, cosine: "
         "0.99}}\n      - {name: hp}\n",
         NULL},
        {"      - {name: q, tags: [q, ckpt], differs_from: e}\n      - {name: e, tags: [q]}\n",
         "variant 'q' differs_from 'e': output=y is bitwise identical"},
        {"      - {name: q, tags: [q], close_to: {variant: hp, rms_ratio: 0}}\n      - {name: "
         "hp}\n",
         "variant 'q' close_to 'hp': output=y: metric"},
        {"      - {name: q, tags: [q, ckpt], same_as: {variant: e, outputs: [trace]}}\n"
         "      - {name: e, tags: [q]}\n",
         "output=trace differs"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: delayed, "
         "first_module: true, scale_bits: [0x3f800000, prev]}\n"
         "          - {phase: forward, op: lin2, precision: quantized, recipe: delayed, "
         "scales: fresh, dtype: bf16}\n"
         "          - {phase: backward, op: lin2, precision: quantized, recipe: delayed, "
         "scale_bits: [prev]}\n"
         "          - {phase: backward, op: lin1, precision: quantized, recipe: delayed}\n",
         NULL},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: high}\n",
         "trace record 0 (case line @): precision: expected high, got quantized"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: delayed}\n",
         "first_module: expected false, got true"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: current, "
         "first_module: true}\n",
         "recipe: expected current, got delayed"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: delayed, "
         "first_module: true, scale_bits: [0x40000000, prev]}\n",
         "scale_bits[0]: expected 0x40000000, got 0x3f800000"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: delayed, "
         "first_module: true, scales: recorded}\n",
         "scales: expected recorded, got fresh"},
        {"      - name: q\n        tags: [q]\n        trace:\n"
         "          - {phase: forward, op: lin1, precision: quantized, recipe: delayed, "
         "first_module: true}\n",
         "trace: expected 1 records, the run has 4"},
        {"      - name: q\n        tags: [q]\n        steps: 2\n        state:\n"
         "          - {op: lin1, role: x, filled: 2, holds_amax: x, scale: from_history}\n"
         "          - {op: lin2, role: dy, step: 1, filled: 1, holds_amax: dy, scale: "
         "from_history}\n"
         "          - {op: lin2, role: w, filled: 2, holds_amax: {input: w2, slot: 7}}\n"
         "          - {op: lin1, role: x, recipe: mxfp8, exists: false}\n",
         NULL},
        {"      - name: q\n        tags: [q]\n        steps: 2\n        state:\n"
         "          - {op: lin1, role: x, filled: 1}\n",
         "lin1.x has 2 filled history slots, expected 1"},
        {"      - name: q\n        tags: [q]\n        state:\n"
         "          - {op: lin1, role: x, holds_amax: w1}\n",
         "lin1.x history holds no amax(w1)"},
        {"      - name: q\n        tags: [q]\n        state:\n"
         "          - {op: lin2, role: w, holds_amax: {input: w2, slot: 0}}\n",
         "lin2.w history holds no amax(w2)"},
        {"      - name: q\n        tags: [q]\n        state:\n"
         "          - {op: lin1, role: x, scale: initial}\n",
         "lin1.x scale 0x"},
        {"      - name: q\n        tags: [q]\n        state:\n"
         "          - {op: lin1, role: x, scale: prev}\n",
         "(the scale before the step)"},
        {"      - name: q\n        state:\n          - {op: lin1, role: x}\n",
         "the delayed x quantizer of 'lin1' does not exist"},
        {"      - {name: q, tags: [q], expect_error: QS_ERR_STATE}\n",
         "expected QS_ERR_STATE, the run gave QS_OK"},
        {"      - {name: q, tags: [q, ckpt], replay: outside_autocast, expect_error: "
         "{code: QS_ERR_STATE, message: \"replay audit\"}}\n",
         NULL},
        {"      - {name: q, tags: [q, ckpt], replay: outside_autocast, expect_error: "
         "{code: QS_ERR_STATE, message: \"no such words\"}}\n",
         "message does not contain 'no such words'"},
        {"      - {name: q, tags: [q, ckpt], replay: outside_autocast}\n",
         "variant 'q' step 1: the engine failed: QS_ERR_STATE: replay audit [RCP-AUDIT]"},
        {"      - {name: q, tags: [q, ckpt], steps: 2, inject_error: {at: linear_backward, "
         "nth: 2}, same_as: e}\n      - {name: e, tags: [q, ckpt], steps: 2}\n",
         NULL},
        {"      - {name: q, tags: [q, ckpt], inject_error: {at: linear_forward, nth: 9}}\n",
         "the run has 3 'linear forward' step(s), not 9"},
        {"      - {name: q, tags: [q], inject_error: {at: 100000}}\n",
         "the run has fewer than 100000 steps"},
        {"      - {name: q, tags: [q, ckpt], inject_error: {at: every}, same_as: e}\n"
         "      - {name: e, tags: [q, ckpt]}\n",
         NULL},
        {"      - {name: q, tags: [q, ckpt], steps: 2, inject_error: {at: every}, same_as: "
         "e}\n      - {name: e, tags: [q, ckpt]}\n",
         "variant 'q' same_as 'e': output=y differs"},
    };
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        char *text = case_text(chain_program, claims[i].variants,
                               "      state: {compare: bitwise, digest: pending}\n");
        char msg[600], want[300];
        snprintf(want, sizeof want, "%s", claims[i].what ? claims[i].what : "");
        char *at = strchr(want, '@');
        if (at) { /* the line of the first expected trace record, from the text */
            char rest[200];
            snprintf(rest, sizeof rest, "%s", at + 1);
            snprintf(at, sizeof want - (size_t)(at - want), "%d%s",
                     line_of(text, "          - {phase"), rest);
        }
        qs_status st = load_and_run(text, msg, sizeof msg);
        if (!claims[i].what)
            ck_assert_msg(st == QS_OK, "claim %zu should hold: %s", i, msg);
        else
            ck_assert_msg(st == QS_ERR_STATE && strstr(msg, want),
                          "claim %zu: expected a failure with '%s', got %s: %s", i, want,
                          qs_status_name(st), msg);
        free(text);
    }
}
END_TEST

static qs_status fake_quantize(void *state, const qs_quantize_args *args)
{
    (void)state;
    (void)args;
    return QS_OK;
}

/* [CASE-PROG-BACKEND] [CASE-BACKEND-UNSUPPORTED] a program case is not supported on a
 * plugin that lacks a slot it needs: a quantizer for the region's recipe, the gdn slots for
 * a gdn op, the gemm slot for a linear (this table has a quantizer only, so even with every
 * capability bit set); the reason names the slot, and nothing is computed in the plugin's
 * place. */
START_TEST(test_program_cases_are_not_supported_on_a_plugin_without_a_slot)
{
    qs_backend table;
    memset(&table, 0, sizeof table);
    table.abi_version = QS_BACKEND_ABI_VERSION;
    table.name = "fake";
    table.quantize = fake_quantize;
    qsk_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.table = &table;
    pl.usable = 1;
    const struct {
        const char *program;
        uint64_t caps;
        const char *why;
    } cases[] = {
        {chain_program, QS_CAP_QUANT_MXFP8,
         "has no quantize slot for recipe delayed (QS_CAP_QUANT_DELAYED)"},
        {"      - island: [{gdn: {name: gdn, g: g, beta: beta}}]\n", ~UINT64_C(0),
         "has no gdn_fwd and gdn_bwd slots (QS_CAP_GDN) for gdn 'gdn'"},
        {chain_program, ~UINT64_C(0), "has no gemm slot for unscaled operands"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = case_text(cases[i].program, "", y_output);
        qs_ctx *ctx = qs_ctx_new();
        qsk_case_file f;
        ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
        qsk_results out;
        memset(&out, 0, sizeof out);
        table.caps = cases[i].caps;
        qs_status st = qsk_op_find("program")->run_backend(ctx, &pl, &f.cases[0], NULL, NULL, &out);
        ck_assert_int_eq(st, QS_ERR_UNSUPPORTED);
        ck_assert_uint_eq(out.n, 0);
        ck_assert_msg(strstr(qs_ctx_errmsg(ctx), cases[i].why) &&
                          strstr(qs_ctx_errmsg(ctx), "program case p is not supported"),
                      "case %zu: %s", i, qs_ctx_errmsg(ctx));
        qsk_case_file_free(&f);
        qs_ctx_free(ctx);
        free(text);
    }
}
END_TEST

/* A plugin made of the reference's slots (their state: a context of its own) whose gemm,
 * with drift set, adds the call count to the code of its first output element from the
 * second call on: a backend whose recompute does not reproduce its own forward. */
typedef struct drift_plugin {
    qs_ctx *ref;
    int drift, calls;
} drift_plugin;

static qs_status drift_gemm(void *state, qs_gemm_args *a)
{
    drift_plugin *d = state;
    qs_status s = qs_ctx_backend(NULL)->gemm(d->ref, a);
    if (s == QS_OK && d->drift && d->calls > 0 && a->y->dtype == QS_BF16)
        ((uint16_t *)a->y->data)[0] = (uint16_t)(((uint16_t *)a->y->data)[0] + d->calls);
    d->calls++;
    return s;
}

static qs_status drift_slot_quantize(void *state, const qs_quantize_args *a)
{
    return qs_ctx_backend(NULL)->quantize(((drift_plugin *)state)->ref, a);
}

/* [CASE-PLUGIN-SELF] [CASE-PLUGIN-REF] a program runs on a plugin's slots: with slots that
 * reproduce the reference (claiming the model) it passes every check and hands y over for
 * the comparison with the reference, bit for bit equal to the reference's y; with a gemm
 * that drifts, the kit's own check that the replay reproduces the discarded forward fails
 * the case, with no reference involved. */
START_TEST(test_program_runs_on_a_plugins_slots_and_self_consistency_catches_drift)
{
    const char *prog = "      - linear: {name: lin1, w: w1}\n"
                       "      - checkpoint: [{linear: {name: lin2, w: w2}}]\n"
                       "      - backward: {dy: dy}\n";
    char *text = case_text(prog, "      - {name: main, replays: 1}\n", y_output);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qs_tensor in[16];
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_int_eq(qsk_input_generate(ctx, &c->inputs[i], &in[i]), QS_OK);
    qsk_results ref, got;
    memset(&ref, 0, sizeof ref);
    ck_assert_int_eq(qsk_op_find("program")->run_ref(ctx, c, in, &ref), QS_OK);
    drift_plugin d = {qs_ctx_new(), 0, 0};
    qs_backend table = *qs_ctx_backend(NULL);
    table.name = "drift";
    table.gemm = drift_gemm;
    table.quantize = drift_slot_quantize;
    qsk_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.table = &table;
    pl.state = &d;
    pl.usable = 1;
    for (int drift = 0; drift < 2; drift++) {
        d.drift = drift;
        d.calls = 0;
        memset(&got, 0, sizeof got);
        qs_status st = qsk_op_find("program")->run_backend(ctx, &pl, c, in, &ref, &got);
        if (!drift) {
            ck_assert_msg(st == QS_OK, "%s", qs_ctx_errmsg(ctx));
            ck_assert_int_eq(d.calls, 7); /* 2 fprop, 1 replay, 2 x (dgrad, wgrad) */
            ck_assert_uint_eq(got.n, 1);
            ck_assert_uint_eq(got.t[0].nbytes, ref.t[0].nbytes);
            ck_assert_int_eq(memcmp(got.t[0].data, ref.t[0].data, ref.t[0].nbytes), 0);
        } else {
            ck_assert_int_eq(st, QS_ERR_STATE);
            ck_assert_uint_eq(got.n, 0);
            ck_assert_msg(strstr(qs_ctx_errmsg(ctx), "[RCP-REPLAY-BITWISE]"), "%s",
                          qs_ctx_errmsg(ctx));
        }
        qsk_results_free(&got);
    }
    qsk_results_free(&ref);
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    qs_ctx_free(d.ref);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

/* A plugin of the reference's slots whose gemm claims FP32 accumulation and perturbs its
 * outputs: rel 0 moves one BF16 output in 16 by one ulp (another summation order's flips);
 * otherwise every FP32 or BF16 element is scaled by (1 + rel) (rel 1%: a wrong result). */
typedef struct tol_plugin {
    qs_ctx *ref;
    float rel;
    int calls; /* gemm calls */
} tol_plugin;

static qs_status tol_gemm(void *state, qs_gemm_args *a)
{
    tol_plugin *t = state;
    qs_status s = qs_ctx_backend(NULL)->gemm(t->ref, a);
    t->calls++;
    for (size_t i = 0; s == QS_OK && i < a->y->numel; i++) {
        if (a->y->dtype == QS_FP32) {
            float *y = a->y->data;
            y[i] *= 1.0f + t->rel;
        } else if (a->y->dtype == QS_BF16) {
            uint16_t *y = a->y->data;
            y[i] = t->rel == 0.0f ? (uint16_t)(y[i] + (i % 16 == 0)) /* one step, 1 in 16 */
                                  : qs_f32_to_bf16(qs_bf16_to_f32(y[i]) * (1.0f + t->rel));
        }
    }
    a->claim = QS_GEMM_CLAIM_FP32;
    return s;
}

static qs_status tol_slot_quantize(void *state, const qs_quantize_args *a)
{
    return qs_ctx_backend(NULL)->quantize(((tol_plugin *)state)->ref, a);
}

/* [CASE-PLUGIN-TOL] [CASE-PLUGIN-REF] on a plugin whose GEMMs claim only FP32
 * accumulation, the program's y is compared with the reference's within 2^-7 normwise:
 * outputs with a few codes one ulp off pass (and are marked compared), outputs 1% off fail, naming
 * the output and the rule. */
/* [CASE-PLUGIN-TOL] The normwise error skips a NaN or infinity the reference has in the same
 * place, and cannot be taken where only one side has one. */
START_TEST(test_normwise_error_matches_non_finite_elements)
{
    qs_ctx *ctx = qs_ctx_new();
    const int64_t shape[1] = {4};
    qs_tensor e, x;
    ck_assert_int_eq(qs_tensor_alloc(ctx, &e, QS_FP32, 1, shape), QS_OK);
    ck_assert_int_eq(qs_tensor_alloc(ctx, &x, QS_FP32, 1, shape), QS_OK);
    float *a = e.data, *b = x.data;
    const float ref[4] = {3.0f, NAN, 4.0f, INFINITY};
    const float got[4] = {3.0f, NAN, 4.5f, INFINITY};
    memcpy(a, ref, sizeof ref);
    memcpy(b, got, sizeof got);
    /* over the finite elements: sqrt(0.25 / 25) = 0.1 */
    ck_assert_double_eq_tol(qsk_normwise_error(&e, &x), 0.1, 1e-12);
    b[1] = 1.0f; /* a number where the reference has NaN */
    ck_assert_double_lt(qsk_normwise_error(&e, &x), 0.0);
    b[1] = NAN;
    b[0] = NAN; /* NaN where the reference has a number */
    ck_assert_double_lt(qsk_normwise_error(&e, &x), 0.0);
    b[0] = 3.0f;
    b[3] = -INFINITY; /* the other infinity */
    ck_assert_double_lt(qsk_normwise_error(&e, &x), 0.0);
    b[3] = 1e30f; /* finite where the reference is infinite */
    ck_assert_double_lt(qsk_normwise_error(&e, &x), 0.0);
    a[3] = 1e30f;
    b[3] = INFINITY; /* infinite where the reference is finite */
    ck_assert_double_lt(qsk_normwise_error(&e, &x), 0.0);
    qs_tensor_free(&e);
    qs_tensor_free(&x);
    qs_ctx_free(ctx);
}
END_TEST

START_TEST(test_program_outputs_on_an_fp32_claim_meet_the_default_tolerance)
{
    const char *prog = "      - autocast:\n"
                       "          recipe: current\n"
                       "          body:\n"
                       "            - linear: {name: lin1, w: w1}\n"
                       "            - linear: {name: lin2, w: w2}\n"
                       "      - backward: {dy: dy}\n";
    char *text = case_text(prog, "", y_output);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qs_tensor in[16];
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_int_eq(qsk_input_generate(ctx, &c->inputs[i], &in[i]), QS_OK);
    qsk_results ref;
    memset(&ref, 0, sizeof ref);
    ck_assert_int_eq(qsk_op_find("program")->run_ref(ctx, c, in, &ref), QS_OK);
    tol_plugin t = {qs_ctx_new(), 0.0f, 0};
    qs_backend table = *qs_ctx_backend(NULL);
    table.name = "tol";
    table.gemm = tol_gemm;
    table.quantize = tol_slot_quantize;
    qsk_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.table = &table;
    pl.state = &t;
    pl.usable = 1;
    const float rels[2] = {0.0f, 0.01f};
    for (int k = 0; k < 2; k++) {
        t.rel = rels[k];
        qsk_results got;
        memset(&got, 0, sizeof got);
        qs_status st = qsk_op_find("program")->run_backend(ctx, &pl, c, in, &ref, &got);
        if (k == 0) {
            ck_assert_msg(st == QS_OK, "%s", qs_ctx_errmsg(ctx));
            ck_assert_uint_eq(got.n, 1);
            ck_assert_str_eq(got.names[0], "y");
            ck_assert_int_eq(got.checked[0], 1);
            ck_assert_uint_eq(got.t[0].nbytes, ref.t[0].nbytes); /* the perturbation shows */
            ck_assert_int_ne(memcmp(got.t[0].data, ref.t[0].data, ref.t[0].nbytes), 0);
        } else {
            ck_assert_int_eq(st, QS_ERR_STATE);
            ck_assert_uint_eq(got.n, 0);
            ck_assert_msg(strstr(qs_ctx_errmsg(ctx), "output=y: normwise relative error") &&
                              strstr(qs_ctx_errmsg(ctx), "[CASE-PLUGIN-TOL]"),
                          "%s", qs_ctx_errmsg(ctx));
        }
        qsk_results_free(&got);
    }
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    qsk_results_free(&ref);
    qs_ctx_free(t.ref);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

/* [CASE-PLUGIN-TOL] a program case on a plugin that claims less than the reference runs
 * the reference once, in the run: the op holds the plugin's outputs to the reference
 * outputs the run hands it. Given the true ones it passes, with the plugin's gemm called
 * for one run of the program and no more; given y doubled it fails, which a second run of
 * the reference inside the op would have hidden; given none it refuses to compare. */
START_TEST(test_program_on_a_plugin_is_held_to_the_runs_one_reference_run)
{
    const char *prog = "      - autocast:\n"
                       "          recipe: current\n"
                       "          body:\n"
                       "            - linear: {name: lin1, w: w1}\n"
                       "            - linear: {name: lin2, w: w2}\n"
                       "      - backward: {dy: dy}\n";
    char *text = case_text(prog, "", y_output);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qs_tensor in[16];
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_int_eq(qsk_input_generate(ctx, &c->inputs[i], &in[i]), QS_OK);
    qsk_results ref, doubled;
    memset(&ref, 0, sizeof ref);
    memset(&doubled, 0, sizeof doubled);
    ck_assert_int_eq(qsk_op_find("program")->run_ref(ctx, c, in, &ref), QS_OK);
    ck_assert_int_eq(qsk_op_find("program")->run_ref(ctx, c, in, &doubled), QS_OK);
    ck_assert_str_eq(doubled.names[0], "y");
    ck_assert_int_eq(doubled.t[0].dtype, QS_BF16);
    for (size_t i = 0; i < doubled.t[0].numel; i++) {
        uint16_t *y = doubled.t[0].data;
        y[i] = qs_f32_to_bf16(2.0f * qs_bf16_to_f32(y[i]));
    }
    tol_plugin t = {qs_ctx_new(), 0.0f, 0};
    qs_backend table = *qs_ctx_backend(NULL);
    table.name = "tol";
    table.gemm = tol_gemm;
    table.quantize = tol_slot_quantize;
    qsk_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.table = &table;
    pl.state = &t;
    pl.usable = 1;
    const qsk_results *refs[3] = {&ref, &doubled, NULL};
    const qs_status want[3] = {QS_OK, QS_ERR_STATE, QS_ERR_INVALID_ARG};
    for (int k = 0; k < 3; k++) {
        qsk_results got;
        memset(&got, 0, sizeof got);
        t.calls = 0;
        qs_ctx_clear_error(ctx);
        qs_status st = qsk_op_find("program")->run_backend(ctx, &pl, c, in, refs[k], &got);
        ck_assert_msg(st == want[k], "ref %d: %s: %s", k, qs_status_name(st), qs_ctx_errmsg(ctx));
        ck_assert_int_eq(t.calls, 6); /* one run: 2 fprop, 2 x (dgrad, wgrad) */
        if (k == 0) {
            ck_assert_uint_eq(got.n, 1);
            ck_assert_int_eq(got.checked[0], 1);
        } else if (k == 1) {
            ck_assert_msg(strstr(qs_ctx_errmsg(ctx), "output=y: normwise relative error") &&
                              strstr(qs_ctx_errmsg(ctx), "[CASE-PLUGIN-TOL]"),
                          "%s", qs_ctx_errmsg(ctx));
        } else {
            ck_assert_msg(strstr(qs_ctx_errmsg(ctx), "no reference outputs"), "%s",
                          qs_ctx_errmsg(ctx));
        }
        qsk_results_free(&got);
    }
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    qsk_results_free(&ref);
    qsk_results_free(&doubled);
    qs_ctx_free(t.ref);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

/* The reference's sdpa slots, claiming what claim says. */
static struct {
    qs_ctx *ref;
    qs_attn_claim claim;
    int calls;
} attn_pl;

static qs_status claim_sdpa_fwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    qs_status s = qs_ctx_backend(NULL)->sdpa_fwd(attn_pl.ref, a);
    a->claim = attn_pl.claim;
    attn_pl.calls++;
    return s;
}

static qs_status claim_sdpa_bwd(void *state, qs_sdpa_args *a)
{
    (void)state;
    qs_status s = qs_ctx_backend(NULL)->sdpa_bwd(attn_pl.ref, a);
    a->claim = attn_pl.claim;
    attn_pl.calls++;
    return s;
}

static qs_status ref_slot_gemm(void *state, qs_gemm_args *a)
{
    (void)state;
    return qs_ctx_backend(NULL)->gemm(attn_pl.ref, a);
}

/* [CASE-PLUGIN-REF] [CASE-PLUGIN-TOL] the sdpa slots' claim decides how an MLA program's
 * outputs are compared: claiming the reference's order hands y to the case's bitwise
 * comparison (unmarked), claiming a tolerance has the kit compare it within 2^-7 (marked). */
START_TEST(test_attention_claims_decide_how_program_outputs_are_compared)
{
    const char *prog = MLA_OP("layout: sbhd, b: 2, ", "") "      - backward: {dy: dy}\n";
    char *text = case_text(prog, "", y_output);
    qs_ctx *ctx = qs_ctx_new();
    qsk_case_file f;
    ck_assert_msg(load(ctx, text, &f) == QS_OK, "%s", qs_ctx_errmsg(ctx));
    const qsk_case *c = &f.cases[0];
    qs_tensor in[16];
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < c->ninputs; i++)
        ck_assert_int_eq(qsk_input_generate(ctx, &c->inputs[i], &in[i]), QS_OK);
    attn_pl.ref = qs_ctx_new();
    qs_backend table = *qs_ctx_backend(NULL);
    table.name = "claims";
    table.gemm = ref_slot_gemm;
    table.sdpa_fwd = claim_sdpa_fwd;
    table.sdpa_bwd = claim_sdpa_bwd;
    qsk_plugin pl;
    memset(&pl, 0, sizeof pl);
    pl.table = &table;
    pl.state = attn_pl.ref;
    pl.usable = 1;
    qsk_results ref;
    memset(&ref, 0, sizeof ref);
    ck_assert_int_eq(qsk_op_find("program")->run_ref(ctx, c, in, &ref), QS_OK);
    for (int k = 0; k < 2; k++) {
        attn_pl.claim = k ? QS_ATTN_CLAIM_TOLERANCE : QS_ATTN_CLAIM_REFERENCE;
        attn_pl.calls = 0;
        qsk_results got;
        memset(&got, 0, sizeof got);
        qs_status st = qsk_op_find("program")->run_backend(ctx, &pl, c, in, &ref, &got);
        ck_assert_msg(st == QS_OK, "%s", qs_ctx_errmsg(ctx));
        ck_assert_int_gt(attn_pl.calls, 1); /* forward and backward ran on the slots */
        ck_assert_uint_eq(got.n, 1);
        ck_assert_int_eq(got.checked[0], k);
        qsk_results_free(&got);
    }
    qsk_results_free(&ref);
    for (size_t i = 0; i < c->ninputs; i++)
        qs_tensor_free(&in[i]);
    qs_ctx_free(attn_pl.ref);
    qsk_case_file_free(&f);
    qs_ctx_free(ctx);
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("program");
    TCase *tc = tcase_create("program");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_loader_builds_the_statement_tree);
    tcase_add_test(tc, test_loader_rejects_bad_programs_with_file_line_col);
    tcase_add_test(tc, test_program_keys_belong_to_program_cases);
    tcase_add_test(tc, test_island_policy_is_checked_at_load_and_at_run);
    tcase_add_test(tc, test_runner_outputs_match_a_program_built_by_hand);
    tcase_add_test(tc, test_runner_mla_matches_a_program_built_by_hand);
    tcase_add_test(tc, test_false_claims_fail_and_true_ones_pass);
    tcase_add_test(tc, test_program_cases_are_not_supported_on_a_plugin_without_a_slot);
    tcase_add_test(tc, test_program_runs_on_a_plugins_slots_and_self_consistency_catches_drift);
    tcase_add_test(tc, test_normwise_error_matches_non_finite_elements);
    tcase_add_test(tc, test_program_outputs_on_an_fp32_claim_meet_the_default_tolerance);
    tcase_add_test(tc, test_program_on_a_plugin_is_held_to_the_runs_one_reference_run);
    tcase_add_test(tc, test_attention_claims_decide_how_program_outputs_are_compared);
    suite_add_tcase(s, tc);
    return qst_run(s);
}
