#!/bin/sh
# tier_cli.sh: the case tiers through the qspec CLI — a default run and list leave the large
# tier out, --tier large and --tier all select it, list and show name the tier, the shipped
# large suites load and validate (without running: they take a GPU), a bad tier or reference
# value is one file:line:col line and exit 2, and a self-consistency case is not run on the
# reference when a plugin runs it.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
LARGE="$SUITE/large"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"

# [CASE-TIER] the shipped large suites load and validate; list names their tier
for f in large-mla.yaml large-island.yaml; do
    n=$(grep -c '^  - id: ' "$LARGE/$f")
    expect_status "$f loads and validates" 0 "$QSPEC" list --tier large "$LARGE/$f"
    expect_true "$f: list --tier large gives its $n cases" test "$(wc -l <"$QST_TMP/out")" -eq "$n"
    expect_true "$f: every line names the tier" test "$(grep -c ' (tier large)$' "$QST_TMP/out")" -eq "$n"
    expect_status "$f: a default list" 0 "$QSPEC" list "$LARGE/$f"
    expect_true "$f: a default list shows none of its cases" test ! -s "$QST_TMP/out"
done
# [RCP-MLA-UP-PROJ] every recipe x layout x K/V form has its production-size case
expect_true "each large MLA recompute combination has its case" sh -c "for r in current delayed mxfp8 block nvfp4; do for l in sbhd thd; do for k in combined split; do grep -q \"^  - id: large.mla.v2lite.\$r.\$l.\$k\$\" '$LARGE/large-mla.yaml' || exit 1; done; done; done"
expect_true "the DeepSeek-V3-shaped layer has its case" grep -q '^  - id: large.mla.v3.block.sbhd.combined$' "$LARGE/large-mla.yaml"
expect_true "the large cases are sized as the models: hidden 2048, sequence 4096 x 2" grep -q 'x: {dtype: bf16, shape: \[8192, 2048\]' "$LARGE/large-mla.yaml"
expect_true "the V3 layer: hidden 7168, 128 heads" grep -q 'dims: {heads: 128, q_lora_rank: 1536, kv_lora_rank: 512' "$LARGE/large-mla.yaml"
expect_true "the GDN island: sequence 4096, hidden 2048, 16 heads" grep -q 'heads: 16}' "$LARGE/large-island.yaml"
# the whole suite: a default list has no large case, --tier all has both tiers
expect_status "the suite lists" 0 "$QSPEC" list "$SUITE"
ndef=$(wc -l <"$QST_TMP/out")
expect_true "a default list of the suite shows no large case" sh -c "! grep -q 'large' '$QST_TMP/out'"
expect_status "the suite lists with --tier all" 0 "$QSPEC" list --tier all "$SUITE"
nlarge=$(grep -c '^  - id: ' "$LARGE"/*.yaml | awk -F: '{s += $2} END {print s}')
expect_true "--tier all lists both tiers" test "$(wc -l <"$QST_TMP/out")" -eq $((ndef + nlarge))

# [CASE-TIER] [CASE-TIER-SELF] selection on a small file: a default case, and a large case
# whose false claim fails it, so that running it shows
cat >"$QST_TMP/tiers.yaml" <<'YAML'
qspec: 1
cases:
  - id: t.small
    rules: [CASE-TIER]
    op: program
    inputs:
      x: {dtype: bf16, shape: [8, 16], uniform: {lo: -1, hi: 1}, seed: 1}
      dy: {dtype: bf16, shape: [8, 16], uniform: {lo: -1, hi: 1}, seed: 2}
      w1: {dtype: bf16, shape: [16, 16], uniform: {lo: -0.4, hi: 0.4}, seed: 3}
    program:
      - autocast: {when: q, recipe: current, body: [{linear: {name: lin1, w: w1}}]}
      - backward: {dy: dy}
    variants:
      - {name: eager, tags: [q], differs_from: hp}
      - {name: hp}
    outputs:
      y: {compare: bitwise, digest: pending}
  - id: t.large
    tier: large
    reference: none
    rules: [CASE-TIER, CASE-TIER-SELF]
    op: program
    inputs:
      x: {dtype: bf16, shape: [8, 16], uniform: {lo: -1, hi: 1}, seed: 1}
      dy: {dtype: bf16, shape: [8, 16], uniform: {lo: -1, hi: 1}, seed: 2}
      w1: {dtype: bf16, shape: [16, 16], uniform: {lo: -0.4, hi: 0.4}, seed: 3}
    program:
      - autocast:
          when: q
          recipe: current
          body: [{checkpoint: {when: ckpt, body: [{linear: {name: lin1, w: w1}}]}}]
      - backward: {dy: dy}
    variants:
      - {name: eager, tags: [q], differs_from: hp}
      - {name: ckpt, tags: [q, ckpt], differs_from: eager}
      - {name: hp, same_as: eager}
YAML
expect_status "pending digests are filled in" 0 "$QSPEC" run --quiet --update-digests "$QST_TMP/tiers.yaml"
expect_status "a default run passes: the failing large case is not run" 0 "$QSPEC" run --quiet "$QST_TMP/tiers.yaml"
expect_out "a default run counts the default case only" "^1 passed, 0 failed, 0 skipped$"
expect_true "a default run does not name the large case" sh -c "! grep -q 't.large' '$QST_TMP/out'"
expect_status "--tier large runs the large case, and its false claims fail it" 1 "$QSPEC" run --quiet --tier large "$QST_TMP/tiers.yaml"
expect_out "--tier large counts the large case only" "^0 passed, 1 failed, 0 skipped$"
expect_out "the large case's failure names it" "t.large"
expect_status "--tier all runs both" 1 "$QSPEC" run --quiet --tier all "$QST_TMP/tiers.yaml"
expect_out "--tier all counts both" "^1 passed, 1 failed, 0 skipped$"
expect_status "--tier default is the default" 0 "$QSPEC" run --quiet --tier default "$QST_TMP/tiers.yaml"
expect_status "--filter and --tier combine" 0 "$QSPEC" run --quiet --tier all --filter 't.small' "$QST_TMP/tiers.yaml"
expect_out "--filter picks within the tiers" "^1 passed, 0 failed, 0 skipped$"
expect_status "list --tier all" 0 "$QSPEC" list --tier all "$QST_TMP/tiers.yaml"
expect_out "list shows the default case as its id" "^t.small$"
expect_out "list shows the large case with its tier" "^t.large \(tier large\)$"
expect_status "show names the tier" 0 "$QSPEC" show t.large "$QST_TMP/tiers.yaml"
expect_out "show: tier large" "^tier: large$"
expect_out "show: no reference" "^reference: none"
# on the reference, the self-consistency checks run on the reference's own run
expect_status "on the reference the large case runs its variant checks" 1 "$QSPEC" run --quiet --tier large "$QST_TMP/tiers.yaml"
expect_out "the reference's run fails the false claim" "FAIL t.large.*the reference failed"
# on a plugin the reference does not run a 'reference: none' case
if [ -f "$EXAMPLE" ]; then
    expect_status "on a plugin the large case runs" 0 sh -c "'$QSPEC' run --quiet --tier large --backend '$EXAMPLE' '$QST_TMP/tiers.yaml' >'$QST_TMP/plug' 2>&1; test \$? -ne 2"
    expect_true "on a plugin the reference does not run it" sh -c "! grep -q 'the reference failed' '$QST_TMP/plug'"
    expect_true "on a plugin the large case is judged" grep -q '^0 passed, 1 failed, 0 skipped$\|^0 passed, 0 failed, 1 skipped$' "$QST_TMP/plug"
fi

# usage errors: a bad --tier is one line, exit 2
expect_usage "run --tier with an unknown tier" "$QSPEC" run --tier huge "$QST_TMP/tiers.yaml"
expect_err "the message names the tiers" "^qspec run: --tier 'huge' is not default, large or all"
expect_usage "run --tier without a value" "$QSPEC" run --tier
expect_usage "list --tier with an unknown tier" "$QSPEC" list --tier Large "$QST_TMP/tiers.yaml"
expect_usage "--certify with --tier" "$QSPEC" run --certify "$QST_TMP/pkg" --tier large "$SUITE"
expect_true "the refused certification wrote no package" test ! -e "$QST_TMP/pkg"
expect_status "help run documents --tier" 0 "$QSPEC" help run
expect_out "help run: --tier" "--tier T +the tier of cases to run: default"

# [CASE-SCHEMA-ERRORS] bad tier and reference values are load errors at their node
bad() { # bad WHAT SED-EXPR PATTERN: the edited file fails to load with one located line
    sed "$2" "$QST_TMP/tiers.yaml" >"$QST_TMP/bad.yaml"
    expect_usage "$1" "$QSPEC" list --tier all "$QST_TMP/bad.yaml"
    expect_err "$1: file:line:col and the message" "^$QST_TMP/bad.yaml:[0-9]+:[0-9]+: $3"
}
bad "an unknown tier" 's/^    tier: large$/    tier: huge/' "unknown tier 'huge' \(default or large\)$"
bad "a tier that is not a scalar" 's/^    tier: large$/    tier: [large]/' "'tier' must be a scalar, not a sequence$"
bad "an unknown reference" 's/^    reference: none$/    reference: maybe/' "'reference' is 'compare' or 'none', not 'maybe'$"
bad "reference: none in the default tier" 's/^    tier: large$/    tier: default/' "'reference: none' belongs to a case of tier large"
bad "reference: none with outputs" 's/^      - {name: hp, same_as: eager}$/&\n    outputs:\n      y: {compare: bitwise, digest: pending}/' "a case with 'reference: none' is compared with no reference: it has no 'outputs'$"
bad "reference: none without a same_as" 's/^      - {name: hp, same_as: eager}$/      - {name: hp}/' "a case with 'reference: none' checks only its variants against each other: it needs a same_as and a differs_from$"
tline=$(grep -n '^    tier: large$' "$QST_TMP/tiers.yaml" | cut -d: -f1)
sed 's/^    tier: large$/    tier: huge/' "$QST_TMP/tiers.yaml" >"$QST_TMP/bad.yaml"
expect_status "a run of a file with a bad tier exits 2" 2 "$QSPEC" run --quiet "$QST_TMP/bad.yaml"
expect_err "the line and column are the tier's value" "^$QST_TMP/bad.yaml:$tline:11: unknown tier 'huge'"
# [CASE-TIER] a large case may hold up to 2^28 elements an input, the default tier 2^26
sed 's/x: {dtype: bf16, shape: \[8, 16\]/x: {dtype: bf16, shape: [8192, 16384]/' "$QST_TMP/tiers.yaml" >"$QST_TMP/big.yaml"
expect_usage "2^27 elements in a default-tier case" "$QSPEC" list --tier all "$QST_TMP/big.yaml"
expect_err "the default tier's limit" "impossible shape: more than 2\^26 elements$"
awk '/^  - id: t.large$/ {big = 1} {print} big && /^    inputs:$/ {print "      big: {dtype: fp32, shape: [8192, 16384], uniform: {lo: 0, hi: 1}, seed: 4}"; big = 0}' "$QST_TMP/tiers.yaml" >"$QST_TMP/big.yaml"
expect_status "2^27 elements load in a large case" 0 "$QSPEC" list --tier all "$QST_TMP/big.yaml"
sed 's/shape: \[8192, 16384\]/shape: [32768, 16384]/' "$QST_TMP/big.yaml" >"$QST_TMP/big2.yaml"
mv "$QST_TMP/big2.yaml" "$QST_TMP/big.yaml"
expect_usage "2^29 elements in a large case" "$QSPEC" list --tier all "$QST_TMP/big.yaml"
expect_err "the large tier's limit" "impossible shape: more than 2\^28 elements \(tier large\)$"

qst_done
