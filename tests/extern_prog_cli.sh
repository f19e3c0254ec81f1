#!/bin/sh
# extern_prog_cli.sh: program cases for an external framework [CASE-GEN-PROG]
# [CASE-VERIFY-PROG]: the framework suite runs on the reference; gen describes each variant
# (its statements with the tags applied, the recipe of each region, the outputs to write,
# the optional trace, the checks); verify holds what a "framework" wrote to the checks
# between its own variants, to the reference's run of each variant, and to the trace, and
# answers a refusal with exit 3. The "framework" here copies the reference's outputs from
# gen --expected and then breaks them one way at a time.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
FW="$QS_SRCDIR/conformance/framework/torch.yaml"
LCL=fw.lcl.bf16
TW=fw.lcl.tensorwise

# data_offset FILE: where the data of a .npy file start (10 + the v1.0 header length)
data_offset() {
    echo $((10 + $(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')))
}
# flip FILE OFFSET MASK: XORs the byte at OFFSET with MASK, in place
flip() {
    b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((b ^ $3)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
# answer GEN RES: a "framework" that answers with the reference's own variant outputs
answer() {
    rm -rf "$2"
    cp -r "$1/expected" "$2"
}

expect_status "the framework suite runs on the reference" 0 "$QSPEC" run "$FW"
expect_out "every case of the framework suite passes on the reference" "^6 passed, 0 failed, 0 skipped$"

# [CASE-GEN-PROG] the manifest of a program case
expect_status "gen writes a program case" 0 "$QSPEC" gen "$FW" --id $TW --out "$QST_TMP/t" --expected
expect_out "gen lists every variant's outputs, the trace optional" "outputs to produce: eager/y.npy eager/dx.npy \[eager/trace.jsonl\] eager/grad.lin1.npy eager/grad.lin2.npy eager/grad.lin3.npy ckpt/y.npy"
m="$QST_TMP/t/manifest.json"
expect_true "the manifest has no case-level outputs (a program's are per variant)" sh -c "! grep -q '^  \"outputs\"' '$m'"
expect_true "the eager variant's program is the autocast without the checkpoint" grep -qF '"program": [{"autocast": {"enabled": true, "calibrating": false, "group": 0, "recipe": {"name": "current", "x": {"format": "e4m3", "eps": 9.99999996e-13, "pow2": false}, "w": {"format": "e4m3", "eps": 9.99999996e-13, "pow2": false}, "dy": {"format": "e5m2", "eps": 9.99999996e-13, "pow2": false}}, "body": [{"linear": {"name": "lin1", "w": "w1"}}, {"linear": {"name": "lin2", "w": "w2"}}, {"linear": {"name": "lin3", "w": "w3"}}]}}, {"backward": {"dy": "dy"}}],' "$m"
expect_true "the ckpt variant's program checkpoints the middle linear" grep -qF '{"linear": {"name": "lin1", "w": "w1"}}, {"checkpoint": {"body": [{"linear": {"name": "lin2", "w": "w2"}}]}}, {"linear": {"name": "lin3", "w": "w3"}}' "$m"
expect_true "the hp variant's program has no autocast (a region left out is spliced in)" grep -qF '"program": [{"linear": {"name": "lin1", "w": "w1"}}, {"linear": {"name": "lin2", "w": "w2"}}, {"linear": {"name": "lin3", "w": "w3"}}, {"backward": {"dy": "dy"}}],' "$m"
expect_true "an output names its file, dtype and shape" grep -qF '{"name": "ckpt/grad.lin2", "file": "ckpt/grad.lin2.npy", "dtype": "bf16", "npy_descr": "[('"'"'bfloat16'"'"', '"'"'<u2'"'"')]", "shape": [64, 64]}' "$m"
expect_true "the ckpt variant states its checks and replays" grep -qF '"checks": [{"same_as": "eager", "outputs": ["y", "dx", "grads"]}], "replays": 1}' "$m"
expect_true "the eager variant states non-vacuity" grep -qF '"checks": [{"differs_from": "hp", "outputs": ["y", "dx"]}, {"close_to": "hp", "outputs": ["y", "dx", "grads"], "compare": {"cosine":' "$m"
expect_true "the trace is optional, with the fields compared" grep -qF '"trace": {"file": "ckpt/trace.jsonl", "required": false, "fields": ["phase", "op", "precision", "recipe"]}' "$m"
expect_true "gen --expected writes each variant's outputs" test -s "$QST_TMP/t/expected/hp/grad.lin3.npy"
expect_status "gen writes a case with a variant no framework can express" 0 "$QSPEC" gen "$QS_SRCDIR/conformance/cases/scenarios-island.yaml" --id island.inject.mxfp8 --out "$QST_TMP/inj"
expect_true "such a variant is marked, with the reason" grep -qF '"framework": false, "why": "it injects an engine fault (inject_error)"}' "$QST_TMP/inj/manifest.json"

# [CASE-VERIFY-PROG] a framework that answers with the reference's outputs passes
answer "$QST_TMP/t" "$QST_TMP/r"
expect_status "verify passes the reference's own outputs" 0 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "verify counts its checks and the unobservable ones" "^PASS $TW: 27 checks hold \(15 outputs against the reference, as the case states, else normwise 2\^-7\), 0 not observable$"
expect_status "verify accepts gen's own folder holding the outputs" 0 sh -c "cp -r '$QST_TMP/r/'* '$QST_TMP/t/' && '$QSPEC' verify '$FW' --id $TW --results '$QST_TMP/t'"

# the replay contract: a checkpointed run that differs from the eager one fails
answer "$QST_TMP/t" "$QST_TMP/r"
f="$QST_TMP/r/ckpt/y.npy"
flip "$f" "$(data_offset "$f")" 1
expect_status "a checkpointed y one bit off fails" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the failure names the variants, the output and the rule" "^FAIL $TW seed=9720 variant=ckpt same_as=eager output=y differs: index=0 .* mismatches=1/2048 \[RCP-REPLAY-BITWISE\]"
# non-vacuity: a quantized run equal to the bf16 run fails
answer "$QST_TMP/t" "$QST_TMP/r"
cp "$QST_TMP/r/hp/y.npy" "$QST_TMP/r/eager/y.npy"
expect_status "a quantized run equal to the high-precision one fails" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the failure says the claim is vacuous" "variant=eager differs_from=hp output=y is bitwise identical, so the claim is vacuous \[RCP-NONVACUOUS\]"
# against the reference: the right gradient in the wrong place, consistently
answer "$QST_TMP/t" "$QST_TMP/r"
cp "$QST_TMP/r/eager/grad.lin2.npy" "$QST_TMP/r/eager/grad.lin1.npy"
cp "$QST_TMP/r/eager/grad.lin2.npy" "$QST_TMP/r/ckpt/grad.lin1.npy"
expect_status "a self-consistent but wrong gradient fails against the reference" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the failure gives the case's comparison" "output=eager/grad.lin1 against the reference: metric [0-9.e+-]* outside the case's bound 0.03125"
cp "$QST_TMP/r/hp/grad.lin2.npy" "$QST_TMP/r/hp/grad.lin1.npy"
expect_status "an output the case states no comparison for is held to 2^-7" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "that failure gives the normwise error" "output=hp/grad.lin1 normwise error [0-9.e+-]* against the reference, above 2\^-7 \[CASE-PLUGIN-TOL\]"
# a framework claiming the reference's arithmetic is held bitwise
answer "$QST_TMP/t" "$QST_TMP/r"
echo '{"name": "test", "claim": "reference"}' >"$QST_TMP/r/framework.json"
expect_status "a claim of the reference's arithmetic passes its own bits" 0 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the PASS line names the framework and the bitwise comparison" "^PASS $TW \(test\): 27 checks hold \(15 outputs against the reference, bitwise\)"
f="$QST_TMP/r/hp/dx.npy"
flip "$f" "$(data_offset "$f")" 1
expect_status "with that claim one bit off fails" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "naming the element" "output=hp/dx differs from the reference: index=0 .* mismatches=1/2048"

# the trace a framework observes: phase, op, precision, recipe per record
answer "$QST_TMP/t" "$QST_TMP/r"
{
    for op in lin1 lin2 lin3; do echo "{\"phase\": \"forward\", \"op\": \"$op\", \"precision\": \"quantized\", \"recipe\": \"current\"}"; done
    echo '{"phase": "backward", "op": "lin3", "precision": "quantized", "recipe": "current"}'
    echo '{"phase": "recompute", "op": "lin2", "precision": "quantized", "recipe": "current"}'
    for op in lin2 lin1; do echo "{\"phase\": \"backward\", \"op\": \"$op\", \"precision\": \"quantized\", \"recipe\": \"current\"}"; done
} >"$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace that agrees with the reference's passes" 0 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the trace is one more check" "^PASS $TW: 28 checks hold"
sed -i '5s/recompute/backward/' "$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace without the recompute fails" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "the failure names the record and the field" "variant=ckpt output=trace differs from the reference's: record 5 \(op lin2\): phase is backward, expected recompute"
echo '{"phase": "forward"' >"$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace that is not JSON lines fails" 1 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"

# a refusal, and a bad folder
answer "$QST_TMP/t" "$QST_TMP/r"
echo "torch: delayed scaling is not in torchao 0.18.0" >"$QST_TMP/r/not_supported.txt"
expect_status "a framework's refusal exits 3" 3 "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
expect_out "and says why" "^NOT SUPPORTED $TW: torch: delayed scaling is not in torchao 0.18.0$"
answer "$QST_TMP/t" "$QST_TMP/r"
rm "$QST_TMP/r/hp/grad.lin3.npy"
expect_usage "a missing output of a variant" "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
answer "$QST_TMP/t" "$QST_TMP/r"
touch "$QST_TMP/r/eager/grad.lin9.npy"
expect_usage "a file in a variant's folder that is no output" "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
answer "$QST_TMP/t" "$QST_TMP/r"
mkdir "$QST_TMP/r/nosuch"
expect_usage "a folder of no variant" "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"
answer "$QST_TMP/t" "$QST_TMP/r"
cp "$QST_TMP/r/eager/grad.lin1.npy" "$QST_TMP/r/eager/y.npy"
expect_usage "an output of the wrong shape" "$QSPEC" verify "$FW" --id $TW --results "$QST_TMP/r"

# the bf16 case: non-vacuity from another input
expect_status "gen writes the bf16 case" 0 "$QSPEC" gen "$FW" --id $LCL --out "$QST_TMP/b" --expected
answer "$QST_TMP/b" "$QST_TMP/rb"
expect_status "verify passes the bf16 case" 0 "$QSPEC" verify "$FW" --id $LCL --results "$QST_TMP/rb"
cp "$QST_TMP/rb/eager/y.npy" "$QST_TMP/rb/other/y.npy"
expect_status "another input giving the same y fails" 1 "$QSPEC" verify "$FW" --id $LCL --results "$QST_TMP/rb"
qst_done
