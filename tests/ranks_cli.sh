#!/bin/sh
# ranks_cli.sh: distributed quantization cases (spec/cases.md [CASE-RANKS]) through the
# qspec CLI — the reference simulates every case; `qspec run --backend B --ranks N` runs a
# plugin as N processes joined through its distributed slots (the example plugin's ranks
# exchange amaxes through files), runs the cases of N ranks, reports the others as not
# supported, catches a planted error on two ranks, leaves no file behind, and rejects bad
# usage and bad cases.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
CASES="$QS_SRCDIR/conformance/cases/dist-quantize.yaml"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-planted.so"
n=$(grep -c '^  - id: ' "$CASES")

# [CASE-RANKS] [DIST-RANKS] the reference simulates the ranks of every case
expect_status "the distributed cases pass on the reference" 0 "$QSPEC" run --quiet "$CASES"
expect_out "all $n of them" "^$n passed, 0 failed, 0 skipped$"

# [DIST-BACKEND] a plugin runs the cases of as many ranks as the run has, as processes
mkdir "$QST_TMP/t"
for r in 1 2 4; do
    want=$(grep -c "^    params: {recipe: current, ranks: $r[,}]" "$CASES")
    expect_status "the example plugin on $r rank(s)" 0 env TMPDIR="$QST_TMP/t" "$QSPEC" run --quiet \
        --backend "$EXAMPLE" --ranks "$r" --report-json "$QST_TMP/r$r.json" "$CASES"
    expect_out "its current-scaling cases of $r rank(s) pass" "^$want passed, 0 failed, $((n - want)) skipped$"
done
expect_true "a case of other ranks says how to run it" \
    grep -q '"id": "dist.q.current.r4.nan", .*"status": "not_supported", "message": "not supported by backend example: the case runs on 4 ranks: run with --ranks 4"' "$QST_TMP/r2.json"
expect_true "the runs left no file behind" sh -c "test -z \"\$(ls -A '$QST_TMP/t')\""

# [CASE-REPORT] a planted one-ulp error fails the two-rank case, reported by rank 0
expect_status "the planted plugin on 2 ranks fails" 1 "$QSPEC" run --quiet --backend "$PLANTED" \
    --ranks 2 "$CASES"
expect_out "the failure line names the case and the output" "^FAIL dist\.q\.current\.r2 seed=9801 output=row_scale index=0 expected=0x[0-9a-f]+ .* observed=0x[0-9a-f]+"

# [CASE-RUN] a failure in a case only rank 0 runs (here a reference regression) is exit 1
mkdir "$QST_TMP/two"
cp "$CASES" "$QST_TMP/two/"
sed '0,/digest: sha256:[0-9a-f]*/s//digest: sha256:0000000000000000000000000000000000000000000000000000000000000000/' \
    "$QS_SRCDIR/conformance/cases/recipes-current.yaml" >"$QST_TMP/two/recipes-current.yaml"
expect_status "a regression on rank 0 alone fails the run, no more" 1 "$QSPEC" run --quiet \
    --backend "$EXAMPLE" --ranks 2 "$QST_TMP/two"
expect_out "rank 0 reports it" "^FAIL rec\.current\.[^ ]+ seed=[0-9]+ output=[a-z_]+: reference regression"

# [CASE-SCHEMA-ERRORS] bad usage and bad cases are exit 2 with one line
expect_usage "--ranks 0" "$QSPEC" run --backend "$EXAMPLE" --ranks 0 "$CASES"
expect_err "it names the option" "^qspec run: --ranks '0' is not a number from 1 to 64$"
expect_usage "--ranks with the reference" "$QSPEC" run --ranks 2 "$CASES"
expect_err "it says the reference simulates the ranks" "the reference simulates the ranks"
sed 's/params: {recipe: current, ranks: 2}/params: {recipe: current, ranks: 3}/' "$CASES" >"$QST_TMP/three.yaml"
line=$(grep -n 'ranks: 3' "$QST_TMP/three.yaml" | cut -d: -f1)
expect_usage "ranks that do not divide the rows" "$QSPEC" list "$QST_TMP/three.yaml"
expect_err "the message is file:line:col" "^$QST_TMP/three.yaml:$line:[0-9]+: parameter 'ranks' must divide the rows of x \[CASE-RANKS\]$"
sed 's/params: {recipe: current, ranks: 2}/params: {recipe: delayed, ranks: 2}/' "$CASES" >"$QST_TMP/ds.yaml"
expect_usage "delayed scaling with ranks" "$QSPEC" list "$QST_TMP/ds.yaml"
expect_err "it points to the program cases" "parameter 'ranks' is not for delayed scaling"
qst_done
