#!/bin/sh
# timing_cli.sh: the times a run reports per case ([CASE-TIMING]): its wall time, the
# reference's part, and on a plugin the calls and time of each kernel slot, in the JSON
# report always and as a TIME line under --timing. A plugin whose cast slot sleeps 700 ms
# once (tests/hostile.c, QSTEST_HOSTILE=slow) shows that time in that slot of that case.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
HOSTILE="$QS_BUILDDIR/tests/.libs/libqspec-hostile.so"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
CASES="$QS_SRCDIR/conformance/cases/formats-e4m3.yaml"
ATTN="$QS_SRCDIR/conformance/cases/attention.yaml"
n=$(grep -c '^  - id: ' "$CASES")
first=fmt.e4m3.rne.satfinite.bounds # the first case that reaches the cast slot, once
QSPEC_CASES="$QS_SRCDIR/conformance/cases"
export QSPEC_CASES
num='[0-9]+\.[0-9]{3}'

expect_status "the example plugin runs the e4m3 cases" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" "$CASES"
expect_true "no TIME line without --timing" sh -c "! grep -q '^TIME ' '$QST_TMP/out'"

expect_status "--timing: the same run" 0 "$QSPEC" run --quiet --timing --backend "$EXAMPLE" \
    --report-json "$QST_TMP/r.json" "$CASES"
expect_true "a TIME line per case" test "$(grep -c '^TIME ' "$QST_TMP/out")" -eq "$n"
# the kit asks cast16 first, which the example has for BF16 and FP16 only, then cast
expect_out "each slot called once for the first case" \
    "^TIME $first: $num s; reference $num s; backend $num s in 2 slot calls: (cast 1 x $num s, cast16 1 x $num s|cast16 1 x $num s, cast 1 x $num s)\$"
expect_out "the summary is still the last line" "^2 passed, 0 failed, $((n - 2)) skipped\$"
expect_true "the JSON report: the slot's calls for that case" grep -Eq \
    "\"id\": \"$first\", .*\"reference_seconds\": $num[0-9]*, \"backend_seconds\": $num[0-9]*, \"slots\": \\{\"cast\": \\{\"calls\": 1, \"seconds\": $num[0-9]*\\}, \"cast16\": \\{\"calls\": 1, \"seconds\": $num[0-9]*\\}\\}" \
    "$QST_TMP/r.json"

# a slot that takes 700 ms: the kit puts the time in that slot, of that case
expect_status "--timing: a plugin whose first cast call sleeps 700 ms" 0 env QSTEST_HOSTILE=slow \
    QSTEST_HOSTILE_MARK="$QST_TMP/mark" "$QSPEC" run --quiet --timing --backend "$HOSTILE" \
    --report-json "$QST_TMP/s.json" "$CASES"
expect_out "the slow call is in the cast slot of the case it served" \
    "^TIME $first: (0\\.[7-9]|[1-9])[0-9.]* s; reference $num s; backend (0\\.[7-9]|[1-9])[0-9.]* s in 2 slot calls: cast 1 x (0\\.[7-9]|[1-9])[0-9.]* s, cast16 1 x $num s\$"
slow_json=$(grep "\"id\": \"$first\"" "$QST_TMP/s.json")
expect_true "the JSON report: the case's time covers its backend time, which covers the sleep" \
    awk -v line="$slow_json" 'BEGIN {
        match(line, /"seconds": [0-9.]+, "reference/); s = substr(line, RSTART + 11, RLENGTH - 22) + 0
        match(line, /"backend_seconds": [0-9.]+/); b = substr(line, RSTART + 19, RLENGTH - 19) + 0
        exit !(b >= 0.7 && s >= b) }'

# a single-op GDN case: the op runs its forward and its backward once each
expect_status "--timing: a GDN case on the example plugin" 0 "$QSPEC" run --quiet --timing \
    --backend "$EXAMPLE" --filter gdn.fp32.h2hv2.l2norm-0 "$ATTN"
expect_out "one gdn_fwd and one gdn_bwd call" \
    "^TIME gdn\\.fp32\\.h2hv2\\.l2norm-0: $num s; reference $num s; backend $num s in 2 slot calls: gdn_(fwd|bwd) 1 x $num s, gdn_(fwd|bwd) 1 x $num s\$"

# a program with 'reference: none' ([CASE-TIER-SELF]): no reference time; its slots are
# counted over its variants: two quantized runs of one linear, each quantizing x, w and dy
# and running the forward, data-gradient and weight-gradient GEMMs, and the BF16 run's three
cat >"$QST_TMP/self.yaml" <<'YAML'
qspec: 1
cases:
  - id: timing.self
    tier: large
    reference: none
    rules: [CASE-TIMING]
    op: program
    inputs:
      x: {dtype: bf16, shape: [32, 32], uniform: {lo: -2, hi: 2}, seed: 1}
      dy: {dtype: bf16, shape: [32, 32], uniform: {lo: -1, hi: 1}, seed: 2}
      w1: {dtype: bf16, shape: [32, 32], uniform: {lo: -0.35, hi: 0.35}, seed: 3}
    program:
      - autocast:
          when: q
          recipe: current
          body: [{linear: {name: lin1, w: w1}}]
      - backward: {dy: dy}
    variants:
      - name: q
        tags: [q]
        differs_from: {variant: hp, outputs: [y]}
      - name: again
        tags: [q]
        same_as: {variant: q, outputs: [y, dx]}
      - name: hp
YAML
expect_status "--timing: a case with 'reference: none' on the example plugin" 0 "$QSPEC" run \
    --quiet --timing --tier large --backend "$EXAMPLE" --report-json "$QST_TMP/n.json" "$QST_TMP/self.yaml"
expect_out "no reference time; 9 GEMMs and 6 quantizations" \
    "^TIME timing\\.self: $num s; reference not run; backend $num s in 15 slot calls: (gemm 9 x $num s, quantize 6 x $num s|quantize 6 x $num s, gemm 9 x $num s)\$"
expect_true "the JSON report: reference_seconds is null" grep -q '"reference_seconds": null, "backend_seconds": ' "$QST_TMP/n.json"

# the reference backend: no backend part, in one process and under --jobs alike
expect_status "--timing on the reference" 0 "$QSPEC" run --quiet --timing --tier large "$QST_TMP/self.yaml"
expect_out "the reference's time, no backend part" "^TIME timing\\.self: $num s; reference $num s\$"
expect_status "--timing on the reference under --jobs 2" 0 "$QSPEC" run --quiet --timing --jobs 2 \
    --report-json "$QST_TMP/j.json" "$CASES"
expect_true "a TIME line per case under --jobs" test "$(grep -c '^TIME [^ ]*: [0-9.]* s; reference [0-9.]* s$' "$QST_TMP/out")" -eq "$n"
expect_true "the JSON report under --jobs: reference times, no slots" sh -c \
    "grep -q '\"reference_seconds\": [0-9]' '$QST_TMP/j.json' && ! grep -q '\"slots\"' '$QST_TMP/j.json'"
qst_done
