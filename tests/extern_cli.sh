#!/bin/sh
# extern_cli.sh: certifying an external framework with `qspec gen` and `qspec verify`
# [CASE-GEN] [CASE-VERIFY]: gen writes a case's inputs and manifest, verify compares the
# outputs a framework wrote with the reference's, for every op (cast, quantize, gemm, sdpa,
# gdn); every bad results folder and every usage error is one line and exit 2.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
E4M3="$SUITE/formats-e4m3.yaml"
CAST=fmt.e4m3.rne.satfinite.random

# data_offset FILE: where the data of a .npy file start (10 + the v1.0 header length)
data_offset() {
    echo $((10 + $(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')))
}
# flip FILE OFFSET MASK: XORs the byte at OFFSET with MASK, in place
flip() {
    b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((b ^ $3)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
# framework_copy GEN RES: a "framework" that answers with the reference's own outputs
framework_copy() {
    rm -rf "$2"
    mkdir "$2"
    cp "$1"/expected/*.npy "$2"/
}

# [CASE-GEN] gen: the inputs and the manifest
expect_status "gen writes a case" 0 "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/g"
expect_out "gen says what it wrote and what to produce" "^wrote the 1 input of case $CAST and manifest.json to .*/g; outputs to produce: y.npy$"
expect_true "gen writes the input as .npy" test -s "$QST_TMP/g/x.npy"
expect_true "gen writes nothing but the inputs and the manifest" test "$(ls "$QST_TMP/g" | wc -l)" -eq 2
m="$QST_TMP/g/manifest.json"
expect_true "the manifest names the case" grep -q "^  \"case\": \"$CAST\",$" "$m"
expect_true "the manifest names the op and its params" grep -q '^  "params": {"to": "e4m3", "round": "rne", "overflow": "satfinite"},$' "$m"
expect_true "the manifest lists the input with dtype and shape" grep -q '{"name": "x", "file": "x.npy", "dtype": "fp32", "npy_descr": "<f4", "shape": \[32, 32\]}' "$m"
expect_true "the manifest lists the output with dtype, shape and comparison" grep -q "{\"name\": \"y\", \"file\": \"y.npy\", \"dtype\": \"e4m3\", \"npy_descr\": \"\[('float8_e4m3fn', '|u1')\]\", \"shape\": \[32, 32\], \"compare\": {\"bitwise\": {\"nan\": \"canonical\"}}}" "$m"
# [CASE-GEN-ATTN] attention manifests: typed params with defaults, and the roundings
ATT="$SUITE/attention.yaml"
expect_status "gen writes a thd sdpa case" 0 "$QSPEC" gen "$ATT" --id attn.sdpa.thd.causal --out "$QST_TMP/ga"
ma="$QST_TMP/ga/manifest.json"
expect_true "sdpa params are typed, seqlens a list, the default scale 1/sqrt(16) filled in" grep -qF '"params": {"layout": "thd", "mask": "causal", "scale": 0.25, "scale_bits": "0x3E800000", "seqlens": [3, 1, 6]},' "$ma"
expect_true "the sdpa manifest says o, dq, dk, dv are rounded to bf16 and lse is FP32" grep -qF '"rounding": {"dtype": "bf16", "rounded_outputs": ["o", "dq", "dk", "dv"], "fp32_outputs": ["lse"],' "$ma"
expect_true "the sdpa manifest says D comes from the rounded o" grep -qF 'D_i = dout_i . o_i uses o as rounded to the dtype [ATTN-BWD]' "$ma"
expect_status "gen writes a gdn case" 0 "$QSPEC" gen "$ATT" --id gdn.bf16.h2hv2.l2norm-1 --out "$QST_TMP/gg"
mg="$QST_TMP/gg/manifest.json"
expect_true "gdn params are typed with the default scale 1/sqrt(8)" grep -qF '"params": {"l2norm": true, "chunk": 0, "scale": 0.353553385, "scale_bits": "0x3EB504F3", "seqlens": null},' "$mg"
expect_true "the gdn manifest says q^ and k^ are rounded after l2norm" grep -qF 'q^ and k^ rounded to the dtype after l2norm' "$mg"
if command -v sha256sum >/dev/null 2>&1; then
    expect_true "the manifest holds the case file's SHA-256" grep -q "\"case_file_sha256\": \"$(sha256sum "$E4M3" | cut -d' ' -f1)\"" "$m"
fi
expect_true "the input is an fp32 .npy of 32x32" sh -c "head -c 128 '$QST_TMP/g/x.npy' | grep -aq \"'descr': '<f4', 'fortran_order': False, 'shape': (32, 32), \""
expect_status "gen is deterministic" 0 "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/g2"
expect_true "a second gen writes the same input" cmp -s "$QST_TMP/g/x.npy" "$QST_TMP/g2/x.npy"
expect_status "gen --expected writes the reference's outputs too" 0 "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/ge" --expected
expect_true "the expected output is in expected/" test -s "$QST_TMP/ge/expected/y.npy"
expect_true "the expected output is e4m3 in ml_dtypes' structured form" sh -c "head -c 128 '$QST_TMP/ge/expected/y.npy' | grep -aq \"'descr': \[('float8_e4m3fn', '|u1')\]\""

# [CASE-VERIFY] every op, with the reference's outputs as the framework's answer
check_op() {
    op=$1 file=$2 id=$3
    rm -rf "$QST_TMP/op"
    expect_status "$op: gen $id" 0 "$QSPEC" gen "$SUITE/$file" --id "$id" --out "$QST_TMP/op" --expected
    framework_copy "$QST_TMP/op" "$QST_TMP/op-res"
    n=$(ls "$QST_TMP/op-res" | wc -l)
    expect_status "$op: verify accepts the reference's outputs" 0 "$QSPEC" verify "$SUITE/$file" --id "$id" --results "$QST_TMP/op-res"
    if [ "$n" -eq 1 ]; then agree="1 output agrees"; else agree="$n outputs agree"; fi
    expect_out "$op: verify says every output agrees" "^PASS $id: $agree with the reference$"
}
check_op cast formats-e4m3.yaml $CAST
check_op "cast to e2m1" formats-e2m1.yaml fmt.e2m1.rne.satfinite.random
check_op quantize recipes-current.yaml rec.current.fp32.32x64.pow2-0.input
check_op "quantize nvfp4" recipes-nvfp4.yaml rec.nvfp4.fp32.32x64.1d.te
check_op "quantize delayed (a sequence)" recipes-delayed.yaml rec.delayed.max.m0.fused.h1024.input.fp32
check_op gemm gemm.yaml gemm.e4m3.k32.exact
check_op sdpa attention.yaml attn.sdpa.fp32.sbhd.none.h4kv4
check_op "sdpa bf16" attention.yaml attn.sdpa.bf16.sbhd.none.h4kv4
check_op gdn attention.yaml gdn.fp32.h2hv2.l2norm-0
# the results may sit beside gen's files
expect_usage "gen's folder without the outputs is missing them" "$QSPEC" verify "$SUITE/attention.yaml" --id gdn.fp32.h2hv2.l2norm-0 --results "$QST_TMP/op"
cp "$QST_TMP/op"/expected/*.npy "$QST_TMP/op"/
expect_status "verify accepts the outputs in gen's own folder" 0 "$QSPEC" verify "$SUITE/attention.yaml" --id gdn.fp32.h2hv2.l2norm-0 --results "$QST_TMP/op"

# an independent framework: qspec quantize computes the outputs from gen's input
rm -rf "$QST_TMP/q" "$QST_TMP/qres"
"$QSPEC" gen "$SUITE/recipes-current.yaml" --id rec.current.fp32.32x64.pow2-0.input --out "$QST_TMP/q" >/dev/null
"$QSPEC" quantize --recipe current --role input --pow2 0 --in "$QST_TMP/q/x.npy" --out "$QST_TMP/qres" >/dev/null
rm -f "$QST_TMP/qres/meta.txt"
expect_status "outputs computed from gen's input by qspec quantize verify" 0 "$QSPEC" verify "$SUITE/recipes-current.yaml" --id rec.current.fp32.32x64.pow2-0.input --results "$QST_TMP/qres"
expect_out "all six outputs agree" "^PASS rec.current.fp32.32x64.pow2-0.input: 6 outputs agree with the reference$"

# mismatches: exit 1 with run's failure lines
framework_copy "$QST_TMP/ge" "$QST_TMP/bad"
off=$(data_offset "$QST_TMP/bad/y.npy")
flip "$QST_TMP/bad/y.npy" $((off + 5)) 1
expect_status "a wrong code fails" 1 "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/bad"
expect_out "the failure line is run's, naming the index" "^FAIL $CAST seed=1 output=y index=5 expected=0x[0-9a-f]{2} \([^)]*\) observed=0x[0-9a-f]{2} \([^)]*\) mismatches=1/1024 \[.*formats-e4m3.yaml:[0-9]+\]$"
expect_out "the summary counts the failed output" "^FAIL $CAST: 1 of 1 output disagrees with the reference$"
SDPA=attn.sdpa.fp32.sbhd.none.h4kv4
rm -rf "$QST_TMP/sd"
"$QSPEC" gen "$SUITE/attention.yaml" --id $SDPA --out "$QST_TMP/sd" --expected >/dev/null
framework_copy "$QST_TMP/sd" "$QST_TMP/sdres"
off=$(data_offset "$QST_TMP/sdres/o.npy")
flip "$QST_TMP/sdres/o.npy" "$off" 1
expect_status "a one-ulp difference is within the allclose tolerance" 0 "$QSPEC" verify "$SUITE/attention.yaml" --id $SDPA --results "$QST_TMP/sdres"
flip "$QST_TMP/sdres/o.npy" $((off + 3)) 64
expect_status "an exponent flip is beyond it" 1 "$QSPEC" verify "$SUITE/attention.yaml" --id $SDPA --results "$QST_TMP/sdres"
expect_out "the failure names output o at index 0" "^FAIL $SDPA seed=2001 output=o index=0 expected=0x[0-9a-f]{8} .* mismatches=1/"
expect_out "the summary counts one of five outputs" "^FAIL $SDPA: 1 of 5 outputs disagrees with the reference$"

# bad results folders: one line naming the file, exit 2, nothing on stdout
framework_copy "$QST_TMP/ge" "$QST_TMP/r"
rm "$QST_TMP/r/y.npy"
expect_usage "a missing output" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the message names the file and the output" "^qspec verify: .*/r/y.npy: missing: case $CAST has the output y$"
framework_copy "$QST_TMP/ge" "$QST_TMP/r"
echo extra >"$QST_TMP/r/z.npy"
expect_usage "an extra file" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the message names the extra file" "^qspec verify: .*/r/z.npy: not an output of case $CAST \(its outputs: y\)$"
framework_copy "$QST_TMP/ge" "$QST_TMP/r"
cp "$QST_TMP/g/x.npy" "$QST_TMP/r/y.npy"
expect_usage "a mis-typed output" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the message names both dtypes" "^qspec verify: .*/r/y.npy: dtype fp32 \(npy descr <f4\), but output y of case $CAST is e4m3 \(npy descr \[\('float8_e4m3fn', '\|u1'\)\]\)$"
framework_copy "$QST_TMP/ge" "$QST_TMP/r"
rm -rf "$QST_TMP/cur"
"$QSPEC" gen "$SUITE/recipes-current.yaml" --id rec.current.fp32.32x64.pow2-0.input --out "$QST_TMP/cur" --expected >/dev/null
cp "$QST_TMP/cur/expected/row_data.npy" "$QST_TMP/r/y.npy"
expect_usage "a mis-shaped output" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the message names both shapes" "^qspec verify: .*/r/y.npy: shape \(32, 64\), but output y of case $CAST has shape \(32, 32\)$"
printf 'not an npy file' >"$QST_TMP/r/y.npy"
expect_usage "an unreadable output" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the npy reader names the file" "^qspec verify: .*/r/y.npy: "
rm "$QST_TMP/r/y.npy"
mkdir "$QST_TMP/r/y.npy"
expect_usage "an output that is a folder" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r"
expect_err "the message says so" "y.npy: not a regular file$"

# usage errors
expect_usage "gen needs a case file" "$QSPEC" gen
expect_usage "gen needs --id" "$QSPEC" gen "$E4M3" --out "$QST_TMP/u"
expect_err "the message names --id" "needs --id ID"
expect_usage "gen needs --out" "$QSPEC" gen "$E4M3" --id $CAST
expect_usage "gen --id needs a value" "$QSPEC" gen "$E4M3" --id
expect_usage "gen with an unknown option" "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/u" --frob
expect_usage "gen takes one case file" "$QSPEC" gen "$E4M3" "$E4M3" --id $CAST --out "$QST_TMP/u"
expect_usage "gen of an unknown id" "$QSPEC" gen "$E4M3" --id nosuch --out "$QST_TMP/u"
expect_err "the message names the id" "no case with id 'nosuch' in .*formats-e4m3.yaml$"
expect_usage "gen of a missing case file" "$QSPEC" gen "$QST_TMP/nosuch.yaml" --id $CAST --out "$QST_TMP/u"
expect_usage "gen of a broken case file" "$QSPEC" gen "$QS_SRCDIR/tests/fixtures/cases/bad/unknown-key.yaml" --id x --out "$QST_TMP/u"
expect_err "the message is file:line:col" "unknown-key.yaml:8:52: unknown key 'colour'"
expect_usage "gen into an existing directory" "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/g"
expect_err "the message names the directory" "/g: already exists"
expect_true "the existing directory is untouched" test "$(ls "$QST_TMP/g" | wc -l)" -eq 2
expect_usage "gen into a missing parent" "$QSPEC" gen "$E4M3" --id $CAST --out "$QST_TMP/nodir/g"
expect_true "gen leaves nothing after an error" test ! -e "$QST_TMP/u" -a ! -e "$QST_TMP/nodir"
expect_usage "verify needs --results" "$QSPEC" verify "$E4M3" --id $CAST
expect_usage "verify needs --id" "$QSPEC" verify "$E4M3" --results "$QST_TMP/r"
expect_usage "verify of a results folder that does not exist" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/nosuch"
expect_err "the message names the folder" "nosuch: not a folder"
expect_usage "verify takes no --expected" "$QSPEC" verify "$E4M3" --id $CAST --results "$QST_TMP/r" --expected
expect_usage "verify of an unknown id" "$QSPEC" verify "$E4M3" --id nosuch --results "$QST_TMP/r"
qst_done
