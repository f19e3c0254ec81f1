#!/bin/sh
# extern_self_cli.sh: program cases with `reference: none` through gen and verify
# [CASE-VERIFY-SELF] [CASE-TIER-SELF]: gen writes the inputs and a manifest that says
# "reference": "none", runs no reference and writes no reference outputs (--expected is an
# error at the case's reference key); verify judges a framework's answers by the variants'
# checks of each other ([CASE-PLUGIN-SELF]) and the traces the case states, says that no
# reference comparison was made, passes a self-consistent answer set and fails one whose
# checkpointed run differs from the eager one in one bit [RCP-REPLAY-BITWISE]. A small case
# is answered with the reference's own outputs (those of its twin with `reference: compare`,
# from gen --expected: torch is not needed); the production-size MLP cases of
# conformance/framework/large/ are answered with files of their shapes built from gen's
# inputs, which verify checks in seconds where the reference would take hours.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
LARGE="$QS_SRCDIR/conformance/framework/large/torch-mlp.yaml"
BIG=fw.large.mlp.rowwise_with_gw_hp

# data_offset FILE: where the data of a .npy file start (10 + the v1.0 header length)
data_offset() {
    echo $((10 + $(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')))
}
# flip FILE OFFSET MASK: XORs the byte at OFFSET with MASK, in place
flip() {
    b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((b ^ $3)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# A small MLP block with reference: none, and its twin that compares with the reference.
cat >"$QST_TMP/self.yaml" <<'YAML'
qspec: 1
cases:
  - id: s.mlp
    tier: large
    reference: none
    rules: [CASE-VERIFY-SELF]
    op: program
    inputs:
      x: {dtype: bf16, shape: [16, 32], uniform: {lo: -2, hi: 2}, seed: 1}
      dy: {dtype: bf16, shape: [16, 32], uniform: {lo: -1, hi: 1}, seed: 2}
      w_up: {dtype: bf16, shape: [64, 32], uniform: {lo: -0.3, hi: 0.3}, seed: 3}
      w_down: {dtype: bf16, shape: [32, 64], uniform: {lo: -0.2, hi: 0.2}, seed: 4}
    program:
      - autocast:
          when: q
          recipe: current
          options: {eps: 1e-12}
          body:
            - checkpoint:
                when: ckpt
                body:
                  - linear: {name: up, w: w_up}
                  - gelu: {name: act}
                  - linear: {name: down, w: w_down}
      - backward: {dy: dy}
    variants:
      - name: eager
        tags: [q]
        differs_from: hp
        close_to: {variant: hp, cosine: 0.99}
      - name: ckpt
        tags: [q, ckpt]
        same_as: {variant: eager, outputs: [y, dx, grads]}
        trace:
          - {phase: forward, op: up, precision: quantized, recipe: current, first_module: true}
          - {phase: forward, op: act, precision: high}
          - {phase: forward, op: down, precision: quantized, recipe: current}
          - {phase: recompute, op: up, precision: quantized, recipe: current}
          - {phase: recompute, op: act, precision: high}
          - {phase: recompute, op: down, precision: quantized, recipe: current}
          - {phase: backward, op: down, precision: quantized, recipe: current}
          - {phase: backward, op: act, precision: high}
          - {phase: backward, op: up, precision: quantized, recipe: current}
      - name: hp
YAML
sed -e 's/^  - id: s.mlp$/  - id: s.twin/' -e '/^    tier: large$/d' -e '/^    reference: none$/d' \
    "$QST_TMP/self.yaml" >"$QST_TMP/twin.yaml"
printf '    outputs:\n      y: {compare: bitwise, digest: pending}\n' >>"$QST_TMP/twin.yaml"
S="$QST_TMP/self.yaml"

# [CASE-VERIFY-SELF] gen: inputs and manifest, no reference run, no reference outputs
expect_status "gen writes a reference: none case" 0 "$QSPEC" gen "$S" --id s.mlp --out "$QST_TMP/g"
expect_out "gen lists every variant's outputs" "outputs to produce: eager/y.npy eager/dx.npy \[eager/trace.jsonl\] eager/grad.up.npy eager/grad.down.npy ckpt/y.npy"
expect_out "gen says no reference ran" "^no reference run: case s.mlp says 'reference: none' \($S:5\); verify will check its variants against each other only$"
m="$QST_TMP/g/manifest.json"
expect_true "the manifest says reference: none" grep -qF '  "reference": "none",' "$m"
expect_true "the framework object has no bound against a reference" grep -qF '"describe": "framework.json", "reference": null}' "$m"
expect_true "an output of the program has the shape the program gives it" grep -qF '{"name": "ckpt/grad.down", "file": "ckpt/grad.down.npy", "dtype": "bf16", "npy_descr": "[('"'"'bfloat16'"'"', '"'"'<u2'"'"')]", "shape": [32, 64]}' "$m"
expect_true "gen wrote the inputs and the manifest, and nothing of the reference's" \
    test "$(cd "$QST_TMP/g" && ls | tr '\n' ' ')" = "dy.npy manifest.json w_down.npy w_up.npy x.npy "
expect_usage "gen --expected of a reference: none case" "$QSPEC" gen "$S" --id s.mlp --out "$QST_TMP/ge" --expected
expect_err "the error is at the case's reference key" "^qspec gen: $S:5:16: case s.mlp says 'reference: none': there are no reference outputs for --expected to write$"
expect_true "the refused gen wrote nothing" test ! -e "$QST_TMP/ge"
expect_status "the twin's manifest says reference: compare" 0 "$QSPEC" gen "$QST_TMP/twin.yaml" --id s.twin --out "$QST_TMP/t" --expected
expect_true "the twin's manifest says compare" grep -qF '  "reference": "compare",' "$QST_TMP/t/manifest.json"
expect_true "both manifests list the same outputs" sh -c "grep -F '\"name\": \"' '$QST_TMP/t/manifest.json' | grep -v '\"tags\"' >'$QST_TMP/a' && grep -F '\"name\": \"' '$m' | grep -v '\"tags\"' >'$QST_TMP/b' && cmp -s '$QST_TMP/a' '$QST_TMP/b'"

# [CASE-VERIFY-SELF] verify: the reference's own outputs are a self-consistent answer set
answer() { # answer DIR: the twin's reference outputs as a framework's answers
    rm -rf "$1"
    cp -r "$QST_TMP/t/expected" "$1"
}
answer "$QST_TMP/r"
expect_status "verify passes a self-consistent answer set" 0 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "verify says no reference comparison was made" "^no reference comparison: case s.mlp says 'reference: none' \($S:5\); its 12 outputs were checked against each other and the case's traces only$"
expect_out "the summary counts the checks between variants; the stated trace was not written" "^PASS s.mlp: 10 checks hold \(self-consistency only, no reference\), 1 not observable$"
expect_true "verify compared nothing with a reference" sh -c "! grep -q 'against the reference' '$QST_TMP/out'"
cp -r "$QST_TMP/r/"* "$QST_TMP/g/"
expect_status "verify accepts gen's own folder holding the answers" 0 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/g"

# the replay contract: one bit of the checkpointed y off fails
answer "$QST_TMP/r"
f="$QST_TMP/r/ckpt/y.npy"
flip "$f" "$(data_offset "$f")" 1
expect_status "a checkpointed y one bit off the eager one fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the failure names the variants, the output and the rule" "^FAIL s.mlp seed=1 variant=ckpt same_as=eager output=y differs: index=0 .* mismatches=1/512 \[RCP-REPLAY-BITWISE\]"
expect_out "a failure still says no reference comparison was made" "^no reference comparison: case s.mlp"
expect_out "the summary counts the failure" "^FAIL s.mlp: 1 failure in 10 checks$"
answer "$QST_TMP/r"
f="$QST_TMP/r/ckpt/grad.up.npy"
flip "$f" $(($(data_offset "$f") + 101)) 128
expect_status "a checkpointed weight gradient one bit off fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "naming the gradient" "variant=ckpt same_as=eager output=grad.up differs: index=50 .* mismatches=1/2048 \[RCP-REPLAY-BITWISE\]"
# non-vacuity: a quantized run equal to the bf16 one fails; one far from it fails close_to
answer "$QST_TMP/r"
cp "$QST_TMP/r/hp/dx.npy" "$QST_TMP/r/eager/dx.npy"
cp "$QST_TMP/r/hp/dx.npy" "$QST_TMP/r/ckpt/dx.npy"
expect_status "a quantized dx equal to the bf16 one fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the claim is vacuous" "variant=eager differs_from=hp output=dx is bitwise identical, so the claim is vacuous \[RCP-NONVACUOUS\]"
answer "$QST_TMP/r"
cp "$QST_TMP/t/dy.npy" "$QST_TMP/r/hp/dx.npy"
expect_status "a bf16 dx far from the quantized one fails close_to" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the cosine is named" "variant=eager close_to=hp output=dx: metric .* outside 0.99"

# the trace the case states: the framework's is compared on phase, op, precision, recipe
answer "$QST_TMP/r"
{
    for rec in forward:up:quantized:current forward:act:high:null forward:down:quantized:current \
        recompute:up:quantized:current recompute:act:high:null recompute:down:quantized:current \
        backward:down:quantized:current backward:act:high:null backward:up:quantized:current; do
        IFS=: read -r ph op pr re <<EOF
$rec
EOF
        [ "$re" = null ] || re="\"$re\""
        echo "{\"phase\": \"$ph\", \"op\": \"$op\", \"precision\": \"$pr\", \"recipe\": $re}"
    done
} >"$QST_TMP/r/ckpt/trace.jsonl"
echo '{"phase": "forward", "op": "up", "precision": "quantized", "recipe": "current"}' >"$QST_TMP/r/eager/trace.jsonl"
expect_status "a trace that agrees with the case's passes" 0 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the stated trace is one more check; a trace the case states none for is none" "^PASS s.mlp: 11 checks hold \(self-consistency only, no reference\), 0 not observable$"
sed -i '4s/recompute/backward/' "$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace without the recompute of up fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the failure names the record and the field" "variant=ckpt output=trace differs from the case's: record 4 \(op up\): phase is backward, expected recompute"
sed -i '9d' "$QST_TMP/r/ckpt/trace.jsonl"
sed -i '4s/backward/recompute/' "$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace one record short fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "the failure counts the records" "output=trace differs from the case's: 8 records, expected 9"
echo '{"phase": "forward"' >"$QST_TMP/r/ckpt/trace.jsonl"
expect_status "a trace that is not JSON lines fails" 1 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"

# a refusal, and a bad folder: exit 3 and exit 2 as for any program case
answer "$QST_TMP/r"
echo "torch: no such recipe" >"$QST_TMP/r/not_supported.txt"
expect_status "a framework's refusal exits 3" 3 "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_out "and says why" "^NOT SUPPORTED s.mlp: torch: no such recipe$"
answer "$QST_TMP/r"
rm "$QST_TMP/r/hp/grad.down.npy"
expect_usage "a missing output" "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_err "the error names the file" "hp/grad.down.npy: missing: case s.mlp has the output hp/grad.down$"
answer "$QST_TMP/r"
touch "$QST_TMP/r/eager/grad.act.npy"
expect_usage "a gelu has no gradient output" "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_err "the error names the file" "eager/grad.act.npy: not an output of variant eager"
answer "$QST_TMP/r"
cp "$QST_TMP/r/eager/grad.up.npy" "$QST_TMP/r/eager/y.npy"
expect_usage "an output of the wrong shape" "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_err "the error names the file, the output and both layouts" "eager/y.npy: bf16 \[64, 32\], but output eager/y of case s.mlp is bf16 \[16, 32\]$"
answer "$QST_TMP/r"
rm -rf "$QST_TMP/r/ckpt/dx.npy"
mkdir "$QST_TMP/r/ckpt/dx.npy"
expect_usage "an output that is a folder" "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_usage "verify of an unknown id" "$QSPEC" verify "$S" --id s.none --results "$QST_TMP/r"
answer "$QST_TMP/r"
touch "$QST_TMP/r/y.npy"
expect_usage "an output outside the variants' folders" "$QSPEC" verify "$S" --id s.mlp --results "$QST_TMP/r"
expect_err "the error says what the folder holds" "r/y.npy: not an output of case s.mlp \(its outputs: a folder per variant, eager/ ckpt/ hp/, and framework.json or not_supported.txt\)$"
# a case file that does not load is file:line:col, exit 2, in gen and in verify
sed '/^        same_as: {variant: eager, outputs: \[y, dx, grads\]}$/d' "$S" >"$QST_TMP/bad.yaml"
expect_usage "gen of a reference: none case without a same_as" "$QSPEC" gen "$QST_TMP/bad.yaml" --id s.mlp --out "$QST_TMP/gb"
expect_err "at the reference key" "^qspec gen: $QST_TMP/bad.yaml:5:16: a case with 'reference: none' checks only its variants against each other: it needs a same_as and a differs_from$"
expect_usage "verify of that case file" "$QSPEC" verify "$QST_TMP/bad.yaml" --id s.mlp --results "$QST_TMP/r"
expect_err "at the same place" "^qspec verify: $QST_TMP/bad.yaml:5:16: "
sed 's/^    tier: large$/    tier: default/' "$S" >"$QST_TMP/bad.yaml"
expect_usage "gen of a default-tier case with reference: none" "$QSPEC" gen "$QST_TMP/bad.yaml" --id s.mlp --out "$QST_TMP/gb"
expect_err "at the reference key" "^qspec gen: $QST_TMP/bad.yaml:5:16: 'reference: none' belongs to a case of tier large"
expect_true "no folder was written" test ! -e "$QST_TMP/gb"

# [CASE-TIER] [CASE-VERIFY-SELF] the production-size framework cases: they load as the large
# tier only, gen writes their inputs without a reference run, and verify judges answers of
# their sizes without one
expect_status "the large framework suite loads" 0 "$QSPEC" list --tier large "$LARGE"
expect_true "it holds an MLP case per torchao recipe" test "$(tr '\n' ' ' <"$QST_TMP/out")" = "fw.large.mlp.tensorwise (tier large) fw.large.mlp.rowwise (tier large) fw.large.mlp.rowwise_with_gw_hp (tier large) "
expect_status "a default list of it" 0 "$QSPEC" list "$LARGE"
expect_true "a default list shows none of them" test ! -s "$QST_TMP/out"
expect_usage "a default run of it selects nothing" "$QSPEC" run --quiet "$LARGE"
expect_err "and says so" "nothing to run: no case was selected"
expect_status "gen writes the production-size case" 0 "$QSPEC" gen "$LARGE" --id $BIG --out "$QST_TMP/L"
expect_out "gen says no reference ran" "^no reference run: case $BIG says 'reference: none'"
M="$QST_TMP/L/manifest.json"
expect_true "4096 tokens of hidden 2048" grep -qF '{"name": "x", "file": "x.npy", "dtype": "bf16", "npy_descr": "[('"'"'bfloat16'"'"', '"'"'<u2'"'"')]", "shape": [4096, 2048]}' "$M"
expect_true "the checkpointed y is [4096, 2048]" grep -qF '{"name": "ckpt/y", "file": "ckpt/y.npy", "dtype": "bf16", "npy_descr": "[('"'"'bfloat16'"'"', '"'"'<u2'"'"')]", "shape": [4096, 2048]}' "$M"
expect_true "up is 2048 -> 8192" grep -qF '"name": "eager/grad.up", "file": "eager/grad.up.npy", "dtype": "bf16", "npy_descr": "[('"'"'bfloat16'"'"', '"'"'<u2'"'"')]", "shape": [8192, 2048]}' "$M"
expect_true "the checkpoint holds both linears and the gelu" grep -qF '"body": [{"checkpoint": {"body": [{"linear": {"name": "up", "w": "w_up"}}, {"gelu": {"name": "act"}}, {"linear": {"name": "down", "w": "w_down"}}]}}]' "$M"
expect_true "under torchao's rowwise_with_gw_hp" grep -qF '"recipe": {"name": "rowwise_with_gw_hp", "x": {"format": "e4m3", "eps": 0, "pow2": true}' "$M"
expect_true "the manifest says reference: none" grep -qF '  "reference": "none",' "$M"
expect_true "gen wrote no expected folder" test ! -e "$QST_TMP/L/expected"
# answers of the production sizes, from gen's own inputs (hard links: nothing is copied):
# eager and ckpt the same files; hp one bit off eager in y and dx (close, different)
for v in eager ckpt hp; do
    mkdir "$QST_TMP/L/$v"
    ln "$QST_TMP/L/x.npy" "$QST_TMP/L/$v/y.npy"
    ln "$QST_TMP/L/dy.npy" "$QST_TMP/L/$v/dx.npy"
    ln "$QST_TMP/L/w_up.npy" "$QST_TMP/L/$v/grad.up.npy"
    ln "$QST_TMP/L/w_down.npy" "$QST_TMP/L/$v/grad.down.npy"
done
for o in y dx; do
    f="$QST_TMP/L/hp/$o.npy"
    cp "$f" "$f.new" && mv "$f.new" "$f"
    flip "$f" $(($(data_offset "$f") + 4097)) 1
done
expect_status "verify judges production-size answers with no reference run" 0 "$QSPEC" verify "$LARGE" --id $BIG --results "$QST_TMP/L"
expect_out "it says so" "^no reference comparison: case $BIG says 'reference: none' \(.*torch-mlp.yaml:[0-9]+\); its 12 outputs were checked against each other and the case's traces only$"
expect_out "every check between variants holds" "^PASS $BIG: 10 checks hold \(self-consistency only, no reference\), 1 not observable$"
f="$QST_TMP/L/ckpt/y.npy"
cp "$f" "$f.new" && mv "$f.new" "$f"
flip "$f" $(($(data_offset "$f") + 2 * 8388607)) 128
expect_status "the checkpointed y one bit off the eager one fails" 1 "$QSPEC" verify "$LARGE" --id $BIG --results "$QST_TMP/L"
expect_out "the failure names the last element" "^FAIL $BIG seed=31020 variant=ckpt same_as=eager output=y differs: index=8388607 .* mismatches=1/8388608 \[RCP-REPLAY-BITWISE\]"
qst_done
