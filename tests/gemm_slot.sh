#!/bin/sh
# gemm_slot.sh: the gemm slot of the plugin ABI, without a GPU [CASE-OP-GEMM]
# [CASE-BACKEND-UNSUPPORTED] [CASE-GEMM-CLAIM]. The example plugin runs the gemm cases of the
# exact and fp32_seq models on tensor-scaled operands through its slot and passes them,
# reports the others (hopper_fp8_tc; block, MX and NVFP4 operands) as not supported, and
# its copy with a planted GEMM error (the last k left out) fails exactly the cases it ran.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-gemm-planted.so"
CASES="$QS_SRCDIR/conformance/cases"

ids() { # ids STATUS JSON: the ids of the cases with that status, sorted
    grep "\"status\": \"$1\"" "$2" | sed 's/.*"id": "\([^"]*\)".*/\1/' | sort
}

if [ -f "$EXAMPLE" ] && [ -f "$PLANTED" ]; then
    expect_status "the example runs the gemm cases" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" \
        --report-json "$QST_TMP/ex.json" "$CASES/gemm.yaml" "$CASES/gemm_backend.yaml"
    ids pass "$QST_TMP/ex.json" >"$QST_TMP/passed"
    ids not_supported "$QST_TMP/ex.json" >"$QST_TMP/skipped"
    expect_true "it passes the exact and fp32_seq cases" grep -qx 'gemm.e4m3.k256.exact' "$QST_TMP/passed"
    expect_true "... through the slot, fp32_seq included" grep -qx 'gemm.bound.current.fp32_seq' "$QST_TMP/passed"
    expect_true "it passes at least 20 gemm cases" test "$(wc -l <"$QST_TMP/passed")" -ge 20
    expect_true "hopper_fp8_tc is not supported" grep -qx 'gemm.e4m3.k32.hopper_fp8_tc' "$QST_TMP/skipped"
    expect_true "MXFP8 operands are not supported" grep -qx 'gemm.bound.mxfp8' "$QST_TMP/skipped"
    expect_true "no case fails" test -z "$(ids fail "$QST_TMP/ex.json")"
    expect_status "the planted copy fails" 1 "$QSPEC" run --quiet --backend "$PLANTED" \
        --report-json "$QST_TMP/pl.json" "$CASES/gemm.yaml" "$CASES/gemm_backend.yaml"
    ids fail "$QST_TMP/pl.json" >"$QST_TMP/failed"
    expect_true "it fails exactly the gemm cases the example ran" cmp -s "$QST_TMP/passed" "$QST_TMP/failed"
    "$QSPEC" run --quiet --backend "$PLANTED" --filter 'gemm.e4m3.k32.exact' "$CASES/gemm.yaml" >"$QST_TMP/out" || true
    expect_out "a failure line names the output and the first mismatch" \
        "^FAIL gemm\.e4m3\.k32\.exact seed=100 output=y index=0 expected=0x[0-9a-f]+ \([^)]*\) observed=0x[0-9a-f]+ \([^)]*\) mismatches=[0-9]+/48"
    "$QSPEC" run --quiet --backend "$PLANTED" --filter 'gemm.bound.bf16.exact' "$CASES/gemm_backend.yaml" >"$QST_TMP/out" || true
    expect_out "the gemm_bound case fails on the planted copy" "^FAIL gemm\.bound\.bf16\.exact .*output=y"
fi
qst_done
