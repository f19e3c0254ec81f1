#!/bin/sh
# hostile_cli.sh: hostile but fair input to the kit — mis-shaped attention inputs, broken
# trace records, deep nesting, huge mappings, numbers out of range, special files, write
# errors, runs that select nothing, bad output paths, argument orders. Each is a clear
# one-line error and exit 2 (or the right answer), never a crash, a hang or a quiet pass.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
SUITE="$QS_SRCDIR/conformance/cases"
FIX="$QS_SRCDIR/tests/fixtures/cases"
T=$QST_TMP

# the header and one gdn case; $1..$7 are the shapes of q k v g beta h0 dout
gdn_case() {
    cat <<EOF
qspec: 1
cases:
  - id: hostile.gdn
    rules: [GDN-RECURRENCE]
    op: gdn
    params: {l2norm: 0, chunk: $8}
    inputs:
      q: {dtype: fp32, shape: $1, normal: {mean: 0, std: 1}, seed: 1}
      k: {dtype: fp32, shape: $2, normal: {mean: 0, std: 1}, seed: 2}
      v: {dtype: fp32, shape: $3, normal: {mean: 0, std: 1}, seed: 3}
      g: {dtype: fp32, shape: $4, uniform: {lo: -2, hi: 0}, seed: 4}
      beta: {dtype: fp32, shape: $5, uniform: {lo: 0, hi: 1}, seed: 5}
      h0: {dtype: fp32, shape: $6, normal: {mean: 0, std: 0.5}, seed: 6}
EOF
    [ "$7" = none ] || echo "      dout: {dtype: fp32, shape: $7, normal: {mean: 0, std: 1}, seed: 7}"
    cat <<EOF
    outputs:
      o: {compare: {allclose: {atol: 0.00001, rtol: 0.001}}, digest: pending}
EOF
}
Q='[1, 5, 2, 4]' V='[1, 5, 2, 3]' G='[1, 5, 2]' H='[1, 2, 4, 3]'

# [CASE-OP-GDN] a well-shaped case loads (the base of the mutations below)
gdn_case "$Q" "$Q" "$V" "$G" "$G" "$H" "$V" 0 >"$T/gdn-ok.yaml"
expect_status "a well-shaped gdn case loads" 0 "$QSPEC" list "$T/gdn-ok.yaml"
# each input differing from q's geometry in one extent is a load error at that input
n=0
for bad in "k [1, 5, 2, 5]" "v [1, 4, 2, 3]" "g [1, 5, 3]" "g [1, 0, 2]" "beta [1, 5, 1]" \
    "h0 [1, 2, 4, 4]" "dout [1, 5, 2, 4]"; do
    name=${bad%% *} shape=${bad#* }
    n=$((n + 1))
    set -- "$Q" "$Q" "$V" "$G" "$G" "$H" "$V"
    case $name in
    k) set -- "$Q" "$shape" "$V" "$G" "$G" "$H" "$V" ;;
    v) set -- "$Q" "$Q" "$shape" "$G" "$G" "$H" "$V" ;;
    g) set -- "$Q" "$Q" "$V" "$shape" "$G" "$H" "$V" ;;
    beta) set -- "$Q" "$Q" "$V" "$G" "$shape" "$H" "$V" ;;
    h0) set -- "$Q" "$Q" "$V" "$G" "$G" "$shape" "$V" ;;
    dout) set -- "$Q" "$Q" "$V" "$G" "$G" "$H" "$shape" ;;
    esac
    for chunk in 0 2; do
        [ "$name" = dout ] && [ $chunk = 2 ] && continue
        gdn_case "$@" $chunk >"$T/gdn-bad$n-$chunk.yaml"
        [ $chunk = 2 ] && sed -i '/dout:/d' "$T/gdn-bad$n-$chunk.yaml"
        line=$(grep -n "^      $name:" "$T/gdn-bad$n-$chunk.yaml" | cut -d: -f1)
        expect_usage "gdn: a mis-shaped $name $shape (chunk $chunk) is a load error" "$QSPEC" list "$T/gdn-bad$n-$chunk.yaml"
        expect_err "gdn: it names $name, its shape and the one expected" "^$T/gdn-bad$n-$chunk.yaml:$line:7: impossible shape: '$name' is \\$(echo "$shape" | sed 's/\]/\\]/')"
        expect_usage "gdn: run rejects it too, before any reference call" "$QSPEC" run --quiet "$T/gdn-bad$n-$chunk.yaml"
    done
done

# [CASE-OP-SDPA] a dout of another shape than o, a v of another token count (thd)
sed -n '1,/^  - id: attn.fp32.sbhd.none.h2/p' "$SUITE/attention.yaml" | head -n -1 >"$T/sdpa-head.yaml"
awk '/^  - id: /{n++} n==1' "$SUITE/attention.yaml" >"$T/sdpa-one.txt"
dshape=$(grep -o 'dout: {dtype: [a-z0-9]*, shape: \[[0-9, ]*\]' "$T/sdpa-one.txt" | head -n 1 | sed 's/.*shape: //')
if [ -n "$dshape" ]; then
    wrong=$(echo "$dshape" | sed 's/\([0-9]*\)\]$/9]/')
    { sed -n '1,/^cases:/p' "$SUITE/attention.yaml"; sed "s/\(dout: {dtype: [a-z0-9]*, shape: \)\[[0-9, ]*\]/\1$wrong/" "$T/sdpa-one.txt"; } >"$T/sdpa-dout.yaml"
    expect_usage "sdpa: a dout not of o's shape is a load error" "$QSPEC" list "$T/sdpa-dout.yaml"
    expect_err "sdpa: it shows both shapes" "impossible shape: 'dout' is \[.*9\], expected \[.*\] \(the shape of o\)$"
else
    qst_fail "the suite's first attention case has a dout" "no dout in $SUITE/attention.yaml"
fi

# [CASE-PROG-TRACE] a trace record's recipe that is a sequence or a mapping: a load error,
# and the good files of the run keep their reports
cp "$SUITE/scenarios-island.yaml" "$T/island.yaml"
line=$(grep -n 'recipe: [a-z]*' "$T/island.yaml" | grep -m1 'phase:' | cut -d: -f1)
if [ -n "$line" ]; then
    for bad in '[delayed]' '{}'; do
        sed "${line}s/recipe: [a-z]*/recipe: $bad/" "$T/island.yaml" >"$T/trace-bad.yaml"
        expect_usage "a trace record with recipe: $bad is a load error" "$QSPEC" list "$T/trace-bad.yaml"
        expect_err "it names the record's recipe" "^$T/trace-bad.yaml:$line:[0-9]+: recipe must be a scalar"
    done
    mkdir "$T/mixed"
    cp "$T/trace-bad.yaml" "$T/mixed/a-bad.yaml"
    cp "$FIX/good.yaml" "$T/mixed/b-good.yaml"
    "$QSPEC" run --quiet --update-digests "$T/mixed/b-good.yaml" >/dev/null
    expect_status "a run over a bad and a good file exits 2" 2 "$QSPEC" run --quiet --report-json "$T/mixed.json" "$T/mixed"
    expect_out "the good file's cases still ran" "^2 passed, 0 failed, 0 skipped$"
    expect_true "and their report was written" grep -q kit-test.e4m3-boundaries "$T/mixed.json"
else
    qst_fail "scenarios-island.yaml has a trace record with a recipe" "no line found"
fi

# [CASE-SCHEMA-ERRORS] deep nesting is a load error, not a stack overflow; for JSON too
awk 'BEGIN { printf "qspec: 1\ncases: "; for (i = 0; i < 40000; i++) printf "["; for (i = 0; i < 40000; i++) printf "]"; print "" }' >"$T/deep.yaml"
expect_usage "40,000 nested sequences are a load error" "$QSPEC" list "$T/deep.yaml"
expect_err "it names the depth limit" "^$T/deep.yaml:2:[0-9]+: nesting deeper than 256 sequences and mappings"
awk 'BEGIN { printf "qspec: 1\ncases:\n"; for (i = 0; i < 15000; i++) printf "%*s{a:\n", i, ""; print "1" }' >"$T/deepmap.yaml"
expect_usage "15,000 nested mappings are a load error" "$QSPEC" list "$T/deepmap.yaml"
# 200,000 keys with a duplicate at the end: found in linear time (the test's timeout
# catches a quadratic check, which took minutes)
awk 'BEGIN { print "qspec: 1\ncases:\n  - id: a\n    params:"; for (i = 0; i < 200000; i++) printf "      k%d: 1\n", i; print "      k7: 2" }' >"$T/keys.yaml"
start=$(date +%s)
expect_usage "a duplicate among 200,000 keys is found" "$QSPEC" list "$T/keys.yaml"
expect_err "it names the duplicate key and its place" "^$T/keys.yaml:200005:7: duplicate key 'k7'$"
expect_true "in well under 10 s" test $(($(date +%s) - start)) -lt 10

# [SCOPE-ENTER] more than 32 nested regions is a load error in a variant that does not
# check the engine's rejection (the suite's nest.depth.limit checks it)
{
    sed -n '1,/^cases:/p' "$SUITE/scenarios-nesting.yaml"
    awk '/^  - id: nest.depth.limit$/ {p = 1} /^  - id: / && !/nest.depth.limit$/ {p = 0} p' "$SUITE/scenarios-nesting.yaml" |
        sed '/expect_error: {code: QS_ERR_STATE, message: "more than 32 nested regions"}/d'
} >"$T/regions.yaml"
expect_usage "33 nested regions without expect_error are a load error" "$QSPEC" list "$T/regions.yaml"
expect_err "it names the limit of 32 and the variant" "more than 32 nested regions in variant "

# [CASE-NUMBERS] integers: one decimal reading, no clamp beyond 2^64
sed 's/seed: 3,/seed: 18446744073709551616,/' "$FIX/good.yaml" >"$T/seed.yaml"
expect_usage "a seed of 2^64 is rejected" "$QSPEC" list "$T/seed.yaml"
expect_err "it says out of range" "'seed': '18446744073709551616' is out of range"
sed 's/seed: 3,/seed: 18446744073709551615,/' "$FIX/good.yaml" >"$T/seedmax.yaml"
expect_status "a seed of 2^64 - 1 loads" 0 "$QSPEC" list "$T/seedmax.yaml"
sed 's/seed: 3,/seed: 010,/' "$FIX/good.yaml" >"$T/seed010.yaml"
sed 's/seed: 3,/seed: 10,/' "$FIX/good.yaml" >"$T/seed10.yaml"
"$QSPEC" run --quiet --update-digests "$T/seed010.yaml" >/dev/null
"$QSPEC" run --quiet --update-digests "$T/seed10.yaml" >/dev/null
expect_true "seed 010 is seed 10 (decimal, not octal)" sh -c "sed 's/seed: 010,/seed: 10,/' '$T/seed010.yaml' | cmp -s - '$T/seed10.yaml'"
sed 's/shape: \[6\]/shape: [06]/' "$FIX/good.yaml" >"$T/shape06.yaml"
expect_status "a shape extent 06 is six" 0 "$QSPEC" list "$T/shape06.yaml"
sed 's/shape: \[6\]/shape: [010]/' "$FIX/good.yaml" >"$T/shape010.yaml"
expect_usage "a shape extent 010 is ten (six values do not fill it)" "$QSPEC" list "$T/shape010.yaml"
expect_err "the message is about the fill" "the values do not fill the shape"
# tolerances
tol() { sed 's/nan: any, //' "$FIX/good.yaml" | sed "s/y: {compare: bitwise, digest: pending}/y: {compare: $1, digest: pending}/" >"$T/tol.yaml"; }
for bad in '{ulp: 1.5}' '{cosine: 1.5}' '{ulp: nan}' '{rms_ratio: inf}' '{cosine: -0.1}' \
    '{allclose: {atol: -1, rtol: 0}}' '{allclose: {atol: 0, rtol: nan}}' '{allclose: {atol: inf, rtol: 0}}'; do
    tol "$bad"
    expect_usage "tolerance $bad is rejected" "$QSPEC" list "$T/tol.yaml"
    expect_err "the message names the tolerance" "tol.yaml:12:[0-9]+: '?(ulp|cosine|rms_ratio|atol|rtol)'?"
done
tol '{cosine: 1}'
expect_status "cosine 1 is accepted" 0 "$QSPEC" list "$T/tol.yaml"
sed 's/values: \[448, 464, 465, -inf, nan, 0\]/values: [448, 464, 465, -inf, nan, 1e999]/' "$FIX/good.yaml" >"$T/big.yaml"
expect_usage "a value 1e999 beyond FP64 is rejected" "$QSPEC" list "$T/big.yaml"
# cast: strtod's overflow and underflow are reported
expect_usage "cast 1e999 is an overflow" "$QSPEC" cast --to e4m3 1e999
expect_err "it says so" "value '1e999' overflows FP64"
expect_usage "cast 1e-400 is an underflow" "$QSPEC" cast --to e4m3 1e-400
expect_err "it says so" "value '1e-400' underflows FP64 to zero"
expect_status "cast 5e-324 (the smallest subnormal) is a value" 0 "$QSPEC" cast --to e4m3 5e-324
expect_out "it rounds to zero, inexact" "^5e-324 0x00 0 inexact$"

# [CASE-RUN] a run that ran nothing says so and exits 2
mkdir "$T/empty" "$T/ymls"
cp "$FIX/good.yaml" "$T/ymls/good.yml"
expect_usage "run on an empty folder" "$QSPEC" run "$T/empty"
expect_err "it says nothing ran" "nothing to run: no case file found"
expect_usage "run on a folder of .yml files" "$QSPEC" run "$T/ymls"
expect_err "it names the .yaml suffix" "case files end in .yaml"
expect_usage "run with a --filter matching nothing" "$QSPEC" run --filter 'nosuch.*' "$FIX/good.yaml"
expect_err "it names the filter" "nothing to run: --filter matches no case"

# [CASE-RUN] output: write errors, bad output paths before the run, special files
if [ -w /dev/full ]; then
    expect_status "list > /dev/full exits 2" 2 sh -c "'$QSPEC' list '$FIX/good.yaml' >/dev/full"
    expect_err "with the reason" "cannot write the standard output: No space left on device"
    expect_status "cast > /dev/full exits 2" 2 sh -c "'$QSPEC' cast --to e4m3 1 >/dev/full"
fi
expect_usage "--html '' is rejected before the run" "$QSPEC" run --html '' "$FIX/good.yaml"
expect_err "it says the path is empty" "^qspec run: --html: an empty path"
expect_usage "--report-json into a missing folder is rejected before the run" "$QSPEC" run --report-json /nonexistent-dir/r.json "$FIX/good.yaml"
expect_err "it names the folder" "cannot write into /nonexistent-dir: No such file or directory"
expect_usage "--junit naming a folder" "$QSPEC" run --junit "$T" "$FIX/good.yaml"
expect_usage "a case file that is /dev/zero" "$QSPEC" list /dev/zero
expect_err "it is not a regular file" "^/dev/zero: not a regular file \(a character device\)$"
mkfifo "$T/fifo"
expect_usage "a case file that is a FIFO (no hang)" "$QSPEC" list "$T/fifo"
expect_err "it is not a regular file" "not a regular file \(a FIFO\)"
printf 'qspec: 1\ncases: []\n' | iconv -f UTF-8 -t UTF-16 >"$T/utf16.yaml" 2>/dev/null || printf '\377\376q\000' >"$T/utf16.yaml"
expect_usage "a UTF-16 case file" "$QSPEC" list "$T/utf16.yaml"
expect_err "it says UTF-16" "^$T/utf16.yaml:1:1: the file is UTF-16"

# [CASE-DIGEST] --update-digests writes through a symlink and keeps the mode
mkdir "$T/link"
sed 's/digest: pending/digest: pending/' "$FIX/good.yaml" >"$T/link/target.yaml"
chmod 640 "$T/link/target.yaml"
ln -s target.yaml "$T/link/case.yaml"
expect_status "--update-digests through a symlink" 0 "$QSPEC" run --quiet --update-digests "$T/link/case.yaml"
expect_true "the link is still a link" test -L "$T/link/case.yaml"
expect_true "its target holds the digests" grep -q 'digest: sha256:' "$T/link/target.yaml"
expect_true "the target keeps mode 640" test "$(stat -c %a "$T/link/target.yaml")" = 640
expect_true "no temporary file is left" test "$(ls "$T/link" | wc -l)" -eq 2

# [CASE-GEN] [CASE-VERIFY] gen, verify and show take the case file and the id in either order
expect_status "show CASE-ID CASE-FILE" 0 "$QSPEC" show kit-test.e4m3-boundaries "$T/seed10.yaml"
expect_status "show CASE-FILE CASE-ID" 0 "$QSPEC" show "$T/seed10.yaml" kit-test.e4m3-boundaries
expect_out "it shows the case" "kit-test.e4m3-boundaries"
expect_status "gen CASE-ID CASE-FILE" 0 "$QSPEC" gen kit-test.e4m3-boundaries "$T/seed10.yaml" --out "$T/g1" --expected
expect_status "gen CASE-FILE CASE-ID" 0 "$QSPEC" gen "$T/seed10.yaml" kit-test.e4m3-boundaries --out "$T/g2"
expect_usage "gen into an existing file" "$QSPEC" gen "$T/seed10.yaml" --id kit-test.e4m3-boundaries --out "$T/seed10.yaml"
expect_err "it says it is a regular file" "already exists, as a regular file"
expect_usage "gen --out ''" "$QSPEC" gen "$T/seed10.yaml" --id kit-test.e4m3-boundaries --out ''
# [CASE-VERIFY] verify rejects junk in expected/
cp "$T/g1/expected/y.npy" "$T/g1/y.npy"
expect_status "verify of the reference's own outputs passes" 0 "$QSPEC" verify "$T/seed10.yaml" kit-test.e4m3-boundaries --results "$T/g1"
echo junk >"$T/g1/expected/junk.txt"
expect_usage "verify rejects a junk entry in expected/" "$QSPEC" verify "$T/seed10.yaml" --id kit-test.e4m3-boundaries --results "$T/g1"
expect_err "it names the entry" "expected/junk.txt: not an output of case kit-test.e4m3-boundaries"

# [CASE-CERTIFY-LIST] a NUL byte, a case file with no listed case
mkdir "$T/cl"
cp "$SUITE/formats-e4m3.yaml" "$SUITE/formats-e5m2.yaml" "$T/cl/"
printf 'fmt.e4m3.*\nfmt.e5m2.*\000\n' >"$T/cl/certify.list"
expect_usage "a must-pass list with a NUL byte" "$QSPEC" run --certify "$T/pkg1" "$T/cl"
expect_err "it names the line" "cl/certify.list:2: a NUL byte"
printf 'fmt.e4m3.*\n' >"$T/cl/certify.list"
expect_usage "a suite file with no case on the list" "$QSPEC" run --certify "$T/pkg2" "$T/cl"
expect_err "it names the file" "no case of .*formats-e5m2.yaml is on the list"
expect_true "no package and no temporary is left" test "$(ls "$T" | grep -c '^pkg')" -eq 0

# [CASE-CERTIFY-PACKAGE] SIGINT during --certify leaves no PKG.tmp-*
mkdir "$T/int"
"$QSPEC" run --quiet --certify "$T/int/pkg" "$SUITE" >"$T/int.out" 2>&1 &
pid=$!
i=0
while [ $i -lt 50 ] && ! ls "$T/int" | grep -q 'pkg.tmp-'; do sleep 0.1; i=$((i + 1)); done
expect_true "the run writes into a temporary package" sh -c "ls '$T/int' | grep -q '^pkg.tmp-'"
kill -INT $pid
wait $pid || true
expect_true "after SIGINT neither the package nor its temporary is left" test "$(ls "$T/int" | wc -l)" -eq 0

# [REC-CLI-STATE] a state file with a NaN scale; a folder as the state file
printf 'qspec-ds-state 1\nscale 7FC00000\nscale_inv 3F800000\nlen 1\n00000000\n' >"$T/nan.state"
"$QSPEC" gen "$T/seed10.yaml" --id kit-test.e4m3-boundaries --out "$T/g3" >/dev/null
printf '\223NUMPY\001\000v\000{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (2, 2), }' >"$T/x.npy"
python3 -c 'import sys' 2>/dev/null && python3 - "$T/x.npy" <<'EOF' || true
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 32), }"
h += " " * (118 - len(h)) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<64f", *range(64)))
EOF
if python3 -c 'import sys' 2>/dev/null; then
    expect_usage "quantize with a NaN scale in the state file" "$QSPEC" quantize --recipe delayed --in "$T/x.npy" --out "$T/qd" --state "$T/nan.state"
    expect_err "it names the scale" "scale 7FC00000 or scale_inv 3F800000 is not a finite positive number"
    expect_usage "quantize with a folder as the state file" "$QSPEC" quantize --recipe delayed --in "$T/x.npy" --out "$T/qd" --state "$T"
    expect_err "it says it is a folder" "is a directory, not a file"
    # [REC-CLI-FILES] dequantize reads scale_inv.npy: one that disagrees with the copy's scale
    expect_status "quantize current" 0 "$QSPEC" quantize --recipe current --in "$T/x.npy" --out "$T/qc"
    expect_status "dequantize of the untouched directory" 0 "$QSPEC" dequantize --in "$T/qc" --out "$T/y.npy"
    cp "$T/qc/amax.npy" "$T/qc/scale_inv.npy"
    expect_usage "dequantize with a changed scale_inv.npy" "$QSPEC" dequantize --in "$T/qc" --out "$T/y2.npy"
    expect_err "it names both files" "scale_inv.npy \([0-9A-F]{8}\) differs from row_scale.npy"
    expect_true "and writes nothing" test ! -e "$T/y2.npy"
fi

qst_done
