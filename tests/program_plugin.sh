#!/bin/sh
# program_plugin.sh: program cases on a plugin, without a GPU [CASE-KERNEL-TABLE]
# [CASE-PROG-BACKEND] [CASE-PLUGIN-TRACE] [CASE-PLUGIN-REF]. The engine runs each program of
# the scenario suites with the example plugin's slots as its kernels. The example has the
# current-scaling quantizer, exact/fp32_seq GEMMs on unscaled and tensor-scaled operands and
# naive FP32 sdpa slots, so it runs the programs whose linears are all high precision (nest.depth.limit, 34 nested
# regions) and passes them, traces included; every other program is not supported with the
# slot it lacks, or the request its gemm slot refused (hopper_fp8_tc), as the reason. The
# copy with a planted GEMM error fails exactly the cases the example ran (the comparison
# with the reference); the copy with a planted current-scaling error, which those programs
# never reach, fails none.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
EXAMPLE="$QS_BUILDDIR/tests/.libs/libqspec-example.so"
PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-planted.so"
GEMM_PLANTED="$QS_BUILDDIR/tests/.libs/libqspec-example-gemm-planted.so"
CASES="$QS_SRCDIR/conformance/cases"

ids() { # ids STATUS JSON: the ids of the cases with that status, sorted
    grep "\"status\": \"$1\"" "$2" | sed 's/.*"id": "\([^"]*\)".*/\1/' | sort
}

if [ -f "$EXAMPLE" ] && [ -f "$PLANTED" ] && [ -f "$GEMM_PLANTED" ]; then
    expect_status "the example runs the scenario suites" 0 "$QSPEC" run --quiet \
        --backend "$EXAMPLE" --report-json "$QST_TMP/ex.json" "$CASES"/scenarios-*.yaml
    ids pass "$QST_TMP/ex.json" >"$QST_TMP/passed"
    expect_true "it passes the high-precision nesting program" grep -qx 'nest.depth.limit' "$QST_TMP/passed"
    expect_true "no case fails" test -z "$(ids fail "$QST_TMP/ex.json")"
    expect_true "no program lacks the sdpa slots, which the example has" test -z "$(grep 'no sdpa_fwd and sdpa_bwd slots' "$QST_TMP/ex.json")"
    expect_true "the current-scaling mla programs reach their FP8 gemm (8 cases)" test "$(grep 'gemm not supported' "$QST_TMP/ex.json" | grep -c '"id": "mla\.[a-z]*\.current\.')" = 8
    expect_true "an island program names the gdn slots" grep -q 'no gdn_fwd and gdn_bwd slots (QS_CAP_GDN)' "$QST_TMP/ex.json"
    expect_true "a delayed program names the quantizer" grep -q 'no quantize slot for recipe delayed (QS_CAP_QUANT_DELAYED)' "$QST_TMP/ex.json"
    expect_true "a refused gemm request is not supported, with the slot's reason" grep -q 'gemm not supported: the example computes exact and fp32_seq' "$QST_TMP/ex.json"
    expect_true "simulated ranks are not supported" grep -q 'simulated ranks, which run on the reference only' "$QST_TMP/ex.json"
    expect_status "the GEMM-planted copy fails" 1 "$QSPEC" run --quiet --backend "$GEMM_PLANTED" \
        --report-json "$QST_TMP/gp.json" "$CASES"/scenarios-*.yaml
    ids fail "$QST_TMP/gp.json" >"$QST_TMP/failed"
    expect_true "it fails exactly the programs the example ran" cmp -s "$QST_TMP/passed" "$QST_TMP/failed"
    expect_status "the current-scaling-planted copy fails nothing here" 0 "$QSPEC" run --quiet \
        --backend "$PLANTED" --report-json "$QST_TMP/pl.json" "$CASES"/scenarios-*.yaml
    ids pass "$QST_TMP/pl.json" >"$QST_TMP/pl_passed"
    expect_true "... and passes the same programs" cmp -s "$QST_TMP/passed" "$QST_TMP/pl_passed"
    # [CASE-OP-SDPA] [CASE-OP-GDN] single-op attention cases through the slots
    expect_status "the example runs the attention cases" 0 "$QSPEC" run --quiet \
        --backend "$EXAMPLE" --report-json "$QST_TMP/at.json" "$CASES"/attention.yaml
    expect_true "it passes all 39 sdpa cases" test "$(ids pass "$QST_TMP/at.json" | grep -c '^attn\.sdpa\.')" = 39
    expect_true "the gdn cases name the missing slots" test "$(grep -c 'no gdn_fwd[a-z_ ]* slots* (QS_CAP_GDN)' "$QST_TMP/at.json")" = 15
fi
qst_done
