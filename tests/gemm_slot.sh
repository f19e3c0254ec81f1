#!/bin/sh
# gemm_slot.sh: the gemm slot of the plugin ABI, without a GPU [CASE-OP-GEMM]
# [CASE-BACKEND-UNSUPPORTED] [CASE-GEMM-CLAIM]. The example plugin runs the gemm cases of the
# exact, fp32_seq and hopper_fp8_tc models on tensor-scaled operands through its slot and
# passes them bit for bit, reports the others (block, MX and NVFP4 operands) as not
# supported, and its copy with a planted GEMM error (the last k left out) fails every
# exact and fp32_seq case it ran.
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
    expect_true "it passes the hopper_fp8_tc cases, bit for bit" grep -qx 'gemm.e4m3.k32.hopper_fp8_tc' "$QST_TMP/passed"
    expect_true "MXFP8 operands are not supported" grep -qx 'gemm.bound.mxfp8' "$QST_TMP/skipped"
    expect_true "no case fails" test -z "$(ids fail "$QST_TMP/ex.json")"
    expect_status "the planted copy fails" 1 "$QSPEC" run --quiet --backend "$PLANTED" \
        --report-json "$QST_TMP/pl.json" "$CASES/gemm.yaml" "$CASES/gemm_backend.yaml"
    ids fail "$QST_TMP/pl.json" >"$QST_TMP/failed"
    expect_true "it fails only gemm cases the example ran" test -z "$(comm -13 "$QST_TMP/passed" "$QST_TMP/failed")"
    # a hopper_fp8_tc case whose last product is swamped, or held to gemm_bound, may not see it
    expect_true "... every exact and fp32_seq one" \
        test -z "$(comm -23 "$QST_TMP/passed" "$QST_TMP/failed" | grep -Ev 'hopper_fp8_tc|\.fast$|\.split$')"
    "$QSPEC" run --quiet --backend "$PLANTED" --filter 'gemm.e4m3.k32.exact' "$CASES/gemm.yaml" >"$QST_TMP/out" || true
    expect_out "a failure line names the output and the first mismatch" \
        "^FAIL gemm\.e4m3\.k32\.exact seed=100 output=y index=0 expected=0x[0-9a-f]+ \([^)]*\) observed=0x[0-9a-f]+ \([^)]*\) mismatches=[0-9]+/48"
    "$QSPEC" run --quiet --backend "$PLANTED" --filter 'gemm.bound.bf16.exact' "$CASES/gemm_backend.yaml" >"$QST_TMP/out" || true
    expect_out "the gemm_bound case fails on the planted copy" "^FAIL gemm\.bound\.bf16\.exact .*output=y"
    # --skips: one SKIP line a case not supported, with the reason and file:line
    expect_status "--skips runs" 0 "$QSPEC" run --quiet --skips --backend "$EXAMPLE" \
        --filter 'gemm.bound.*' "$CASES/gemm_backend.yaml"
    expect_out "a SKIP line names the capability the example lacks" \
        "^SKIP gemm\.bound\.mxfp8 not supported by backend example: no gemm of these operands' scaling \(QS_CAP_GEMM_MX\) \[.*gemm_backend\.yaml:[0-9]+\]$"
    expect_true "one SKIP line for each case not supported" \
        test "$(grep -c '^SKIP ' "$QST_TMP/out")" -eq "$(sed -n 's/.* \([0-9]*\) skipped$/\1/p' "$QST_TMP/out")"
    expect_status "without --skips" 0 "$QSPEC" run --quiet --backend "$EXAMPLE" \
        --filter 'gemm.bound.*' "$CASES/gemm_backend.yaml"
    expect_true "... no SKIP line" test "$(grep -c '^SKIP ' "$QST_TMP/out")" -eq 0
fi
qst_done
