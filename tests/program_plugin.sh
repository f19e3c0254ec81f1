#!/bin/sh
# program_plugin.sh: program cases on a plugin, without a GPU [CASE-KERNEL-TABLE]
# [CASE-PROG-BACKEND] [CASE-PLUGIN-TRACE] [CASE-PLUGIN-REF] [CASE-PROG-RANKS]. The engine
# runs each program of the scenario suites with the example plugin's slots as its kernels.
# The example has the current and delayed quantizers, exact, fp32_seq and hopper_fp8_tc
# GEMMs on tensor-scaled operands, naive FP32 sdpa slots and token-recurrence gdn slots,
# so it runs every program whose regions quantize under current or delayed scaling, the
# distributed ones on simulated ranks included, and passes them, traces included; every
# other program is not supported with the slot it lacks as the reason. The copy with a
# planted GEMM error fails every one of them whose outputs a GEMM reaches; the copy with a
# planted one-ulp current-scaling scale_inv fails only the two MLP blocks under current
# scaling, whose 256-wide GEMMs resolve the ulp in a few BF16 outputs (elsewhere it is below
# what the BF16 outputs resolve; the quantize cases catch it).
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
    for suite in delayed distributed island mla mlp nesting; do
        expect_true "it passes programs of scenarios-$suite.yaml" \
            test "$(grep -c "\"file\": \"[^\"]*scenarios-$suite.yaml\".*\"status\": \"pass\"" "$QST_TMP/ex.json")" -gt 0
    done
    expect_true "it passes all 9 delayed-scaling programs" test "$(grep -c '^ds\.' "$QST_TMP/passed")" = 9
    expect_true "it passes the current and delayed mla programs (16)" \
        test "$(grep -Ec '^mla\.[a-z]*\.(current|delayed)\.' "$QST_TMP/passed")" = 16
    expect_true "it passes BF16 GDN islands between current and delayed linears" \
        sh -c "grep -qx island.current.bf16 '$QST_TMP/passed' && grep -qx island.delayed.fp16 '$QST_TMP/passed'"
    expect_true "it passes MLP blocks (linear, gelu, linear) under current and delayed scaling [RCP-GELU-OP]" \
        sh -c "grep -qx mlp.current.ckpt '$QST_TMP/passed' && grep -qx mlp.delayed.ckpt '$QST_TMP/passed' && grep -qx mlp.island.current '$QST_TMP/passed' && grep -qx mlp.inject.current '$QST_TMP/passed'"
    expect_true "it passes sequence- and tensor-parallel programs on simulated ranks" \
        sh -c "grep -qx dist.sp.current '$QST_TMP/passed' && grep -qx dist.tp.current '$QST_TMP/passed'"
    expect_true "no program lacks the sdpa slots, which the example has" test -z "$(grep 'no sdpa_fwd and sdpa_bwd slots' "$QST_TMP/ex.json")"
    expect_true "a program names the quantizer it lacks" grep -q 'no quantize slot for recipe mxfp8 (QS_CAP_QUANT_MXFP8)' "$QST_TMP/ex.json"
    expect_true "a refused gemm request is not supported, with the slot's reason" grep -q 'gemm not supported: the example takes finite operands only' "$QST_TMP/ex.json"
    expect_status "the GEMM-planted copy fails" 1 "$QSPEC" run --quiet --backend "$GEMM_PLANTED" \
        --report-json "$QST_TMP/gp.json" "$CASES"/scenarios-*.yaml
    ids fail "$QST_TMP/gp.json" >"$QST_TMP/failed"
    expect_true "it fails the distributed programs: their simulated ranks ran its kernels" \
        sh -c "grep -qx dist.sp.current '$QST_TMP/failed' && grep -qx dist.tp.current '$QST_TMP/failed'"
    expect_true "it fails only programs the example passed" test -z "$(comm -13 "$QST_TMP/passed" "$QST_TMP/failed")"
    expect_true "... all of them but the one whose outputs are an error and a quantizer state, and the gelu alone, which the engine computes without a slot" \
        test "$(comm -23 "$QST_TMP/passed" "$QST_TMP/failed" | tr '\n' ' ')" = "ds.replay.outside-autocast mlp.gelu.specials "
    # [CASE-PROG-RANKS] a case of one variant on two simulated ranks: its outputs come from
    # the ranks alone, so the planted GEMM error reaches them only if the ranks run the plugin
    sed -n '/^  - id: dist.sp.current$/,/^    variants:$/p' "$CASES/scenarios-distributed.yaml" \
        | sed 's/id: dist.sp.current/id: dist.sp.current.r2only/' >"$QST_TMP/r2.yaml.body"
    {
        echo 'qspec: 1'
        echo 'cases:'
        cat "$QST_TMP/r2.yaml.body"
        echo '      - {name: r2, ranks: 2, reductions: {1: 6}}'
        echo '    outputs:'
        grep -m1 '^      r8/y: ' "$CASES/scenarios-distributed.yaml" | sed 's/r8\/y/r2\/y/'
    } >"$QST_TMP/r2.yaml"
    expect_status "a two-rank-only program passes on the example" 0 "$QSPEC" run --quiet \
        --backend "$EXAMPLE" "$QST_TMP/r2.yaml"
    expect_status "... and fails on the GEMM-planted copy: the ranks ran its kernels" 1 \
        "$QSPEC" run --quiet --backend "$GEMM_PLANTED" "$QST_TMP/r2.yaml"
    expect_status "the current-scaling-planted copy fails" 1 "$QSPEC" run --quiet \
        --backend "$PLANTED" --report-json "$QST_TMP/pl.json" "$CASES"/scenarios-*.yaml
    expect_true "... only the MLP blocks under current scaling" \
        test "$(ids fail "$QST_TMP/pl.json" | tr '\n' ' ')" = "mlp.current.ckpt mlp.inject.current "
    ids pass "$QST_TMP/pl.json" >"$QST_TMP/pl_passed"
    grep -vx 'mlp.current.ckpt\|mlp.inject.current' "$QST_TMP/passed" >"$QST_TMP/passed_less"
    expect_true "... and passes every other program the example passes" cmp -s "$QST_TMP/passed_less" "$QST_TMP/pl_passed"
    # [CASE-OP-SDPA] [CASE-OP-GDN] single-op attention cases through the slots
    expect_status "the example runs the attention cases" 0 "$QSPEC" run --quiet \
        --backend "$EXAMPLE" --report-json "$QST_TMP/at.json" "$CASES"/attention.yaml
    expect_true "it passes all 39 sdpa cases" test "$(ids pass "$QST_TMP/at.json" | grep -c '^attn\.sdpa\.')" = 39
    ngdn=$(grep -c '^  - id: gdn\.' "$CASES"/attention.yaml)
    expect_true "it passes all $ngdn gdn cases (17 or more)" test "$ngdn" -ge 17 -a \
        "$(ids pass "$QST_TMP/at.json" | grep -c '^gdn\.')" = "$ngdn"
fi
qst_done
