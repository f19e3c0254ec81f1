#!/bin/sh
# quantize_cli.sh: `qspec quantize` and `qspec dequantize` — the files of [REC-CLI-FILES]
# with the codes of the worked examples, a delayed-scaling run driven through the state
# file [REC-CLI-STATE], and every bad input (one stderr line, exit 2, nothing written).
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
T=$QST_TMP

# le32 HEX: the four little-endian bytes of a 32-bit word, as printf octal escapes
le32() {
    v=$((0x$1))
    printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $(((v >> 8) & 255)) $(((v >> 16) & 255)) \
        $(((v >> 24) & 255))
}
# npy FILE DESCR SHAPE WORDS...: a version 1.0 .npy file of 32-bit words (hex)
npy() {
    file=$1 descr=$2 shape=$3
    shift 3
    h="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
    while [ $(((10 + ${#h} + 1) % 64)) -ne 0 ]; do h="$h "; done
    hl=$((${#h} + 1))
    { printf '\223NUMPY\001\000'; printf "$(printf '\\%03o\\%03o' $((hl & 255)) $((hl >> 8)))"
      printf '%s\n' "$h"; for w in "$@"; do printf "$(le32 "$w")"; done; } >"$file"
}
# zeros N: N words 00000000
zeros() { i=0; while [ $i -lt "$1" ]; do printf '00000000 '; i=$((i + 1)); done; }
# tailhex FILE N: the last N bytes of FILE as space-separated hex
tailhex() { tail -c "$2" "$1" | od -An -v -tx1 | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
# expect_bytes WHAT FILE N "HEX ...": the last N bytes of FILE are these
expect_bytes() {
    QST_N=$((QST_N + 1))
    got=$(tailhex "$2" "$3" 2>/dev/null || true)
    if [ "$got" = "$4" ]; then echo "ok $QST_N - $1"; else qst_fail "$1" "got '$got', want '$4'"; fi
}
# expect_absent WHAT PATH: nothing was written (also no temporary directory)
expect_absent() {
    QST_N=$((QST_N + 1))
    if [ ! -e "$2" ] && ! ls "$(dirname "$2")" | grep -q '\.tmp-'; then echo "ok $QST_N - $1"
    else qst_fail "$1" "$2 or a temporary directory exists"; fi
}

# The 921.6 block of docs/recipes-examples.md MX-1: 921.6, -1, 0.5, 100, then 28 zeros.
npy "$T/mx.npy" '<f4' '(1, 32)' 44666666 BF800000 3F000000 42C80000 $(zeros 28)

# [REC-MX-SCALE] [REC-MX-ELEM] [REC-CLI-FILES]: default rule te gives 0x81
expect_status "quantize mxfp8 succeeds" 0 "$QSPEC" quantize --recipe mxfp8 --in "$T/mx.npy" --out "$T/mx_te"
expect_out "prints a one-line summary" "^mxfp8: \[1,32\] -> e4m3, row \[1,32\] scale e8m0 \[1,1\], col \[1,32\] scale e8m0 \[1,32\] -> "
expect_bytes "te: E8M0 scale 0x81" "$T/mx_te/row_scale.npy" 1 "81"
expect_bytes "te: data codes 0x76 0xa8 0x20 0x5c" "$T/mx_te/row_data.npy" 32 \
    "76 a8 20 5c 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
expect_true "writes the columnwise files and meta.txt" test -f "$T/mx_te/col_data.npy" -a -f "$T/mx_te/col_scale.npy" -a -f "$T/mx_te/meta.txt"
# [REC-MX-SCALE-OCP] [REC-MX-ELEM-OCP]
expect_status "quantize mxfp8 --rule ocp succeeds" 0 "$QSPEC" quantize --recipe mxfp8 --rule ocp --in "$T/mx.npy" --out "$T/mx_ocp"
expect_bytes "ocp: E8M0 scale 0x80" "$T/mx_ocp/row_scale.npy" 1 "80"
expect_bytes "ocp: data codes 0x7e 0xb0 0x28 0x64" "$T/mx_ocp/row_data.npy" 32 \
    "7e b0 28 64 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
# [REC-DEQ-MX] [REC-DEQ-SHAPE]: 896, -1, 0.5, 96
expect_status "dequantize succeeds" 0 "$QSPEC" dequantize --recipe mxfp8 --in "$T/mx_te" --out "$T/y.npy"
expect_out "dequantize prints a summary" "^mxfp8: row copy of .* \[1,32\] fp32$"
expect_bytes "dequantized values" "$T/y.npy" 128 "00 00 60 44 00 00 80 bf 00 00 00 3f 00 00 c0 42 $(printf '00 %.0s' $(seq 1 112) | sed 's/ $//')"

# [REC-TW-LAYOUT] [REC-CLI-FILES]: current scaling of CS-1 writes amax and scale_inv
npy "$T/cs.npy" '<f4' '(2, 2)' 3F800000 C0000000 40400000 3F000000
expect_status "quantize current succeeds" 0 "$QSPEC" quantize --recipe current --in "$T/cs.npy" --out "$T/cs"
expect_bytes "current: codes 0x71 0xf9 0x7e 0x69" "$T/cs/row_data.npy" 4 "71 f9 7e 69"
expect_bytes "current: columnwise is the transpose" "$T/cs/col_data.npy" 4 "71 7e f9 69"
expect_bytes "current: scale_inv = fl(1/fl(448/3))" "$T/cs/scale_inv.npy" 4 "b7 6d db 3b"
expect_bytes "current: amax 3" "$T/cs/amax.npy" 4 "00 00 40 40"
expect_status "quantize current --pow2 1 --columnwise 0" 0 "$QSPEC" quantize --recipe current --pow2 1 --columnwise 0 --in "$T/cs.npy" --out "$T/cs2"
expect_true "no columnwise files without the copy" test ! -e "$T/cs2/col_data.npy"
expect_status "dequantize current pow2" 0 "$QSPEC" dequantize --in "$T/cs2" --out "$T/cs2.npy"
expect_bytes "pow2 dequantization is exact" "$T/cs2.npy" 16 "00 00 80 3f 00 00 00 c0 00 00 40 40 00 00 00 3f"

# [REC-AX-ROW] [REC-AX-COL] [REC-AX-LAYOUT] [REC-AX-GWHP] [REC-CLI-FILES]: the same [[1,-2],[3,0.5]]
# under rowwise: rows amax 2 and 3, columns 3 and 2, every scale 128 (decode 2^-7)
expect_status "quantize rowwise succeeds" 0 "$QSPEC" quantize --recipe rowwise --in "$T/cs.npy" --out "$T/ax"
expect_out "rowwise: one scale per row of each copy" "^rowwise: \[2,2\] -> e4m3, row \[2,2\] scale fp32 \[2,1\], col \[2,2\] scale fp32 \[2,1\] -> "
expect_bytes "rowwise: codes 0x70 0xf8 0x7c 0x68" "$T/ax/row_data.npy" 4 "70 f8 7c 68"
expect_bytes "rowwise: columnwise codes of x^T" "$T/ax/col_data.npy" 4 "70 7c f8 68"
expect_bytes "rowwise: decode scales 2^-7" "$T/ax/row_scale.npy" 8 "00 00 00 3c 00 00 00 3c"
expect_true "rowwise: meta.txt records the format" grep -q '^format e4m3$' "$T/ax/meta.txt"
expect_status "dequantize rowwise, columnwise copy" 0 "$QSPEC" dequantize --in "$T/ax" --dir col --out "$T/ax.npy"
expect_bytes "rowwise dequantization is exact here" "$T/ax.npy" 16 "00 00 80 3f 00 00 00 c0 00 00 40 40 00 00 00 3f"
expect_status "quantize rowwise_with_gw_hp input" 0 "$QSPEC" quantize --recipe rowwise_with_gw_hp --in "$T/cs.npy" --out "$T/gw"
expect_bytes "gw_hp: the columnwise copy is x^T in FP32" "$T/gw/col_data.npy" 16 "00 00 80 3f 00 00 40 40 00 00 00 c0 00 00 00 3f"
expect_usage "rowwise takes no eps" "$QSPEC" quantize --recipe rowwise --eps 1e-6 --in "$T/cs.npy" --out "$T/bad"
expect_err "names the option and the recipe" "recipe option 'eps' does not apply to recipe rowwise"
# [REC-NV-GLOBAL] [REC-CLI-FILES]: nvfp4 writes global_scale (S_dec of each copy)
npy "$T/nv.npy" '<f4' '(1, 16)' 40C00000 C0400000 40200000 3FA00000 $(zeros 12)
expect_status "quantize nvfp4 succeeds" 0 "$QSPEC" quantize --recipe nvfp4 --rht 0 --in "$T/nv.npy" --out "$T/nv"
expect_bytes "nvfp4: codes 6 -3 2 1 (one per byte in the file)" "$T/nv/row_data.npy" 16 "07 0d 04 02 00 00 00 00 00 00 00 00 00 00 00 00"
expect_bytes "nvfp4: global_scale = fl(1/448) twice" "$T/nv/global_scale.npy" 8 "25 49 12 3b 25 49 12 3b"
expect_status "dequantize nvfp4 columnwise" 0 "$QSPEC" dequantize --in "$T/nv" --dir col --out "$T/nv.npy"
# x^T is 16x1: every element is its own block. 2.5 -> block scale E4M3(186.7) = 192,
# multiplier 448/192, 5.83 -> 6, back 6 * fl(192 * fl(1/448)) = 0x4024924A; 1.25 -> 96.
expect_bytes "nvfp4: columnwise dequantization in [M,K]" "$T/nv.npy" 64 "00 00 c0 40 00 00 40 c0 4a 92 24 40 4a 92 a4 3f $(printf '00 %.0s' $(seq 1 48) | sed 's/ $//')"
expect_status "quantize block weight succeeds" 0 "$QSPEC" quantize --recipe block --role weight --in "$T/cs.npy" --out "$T/blk"
expect_out "block weight: one 128x128 tile" "row \[2,2\] scale fp32 \[1,1\], col \[2,2\] scale fp32 \[1,1\]"

# [REC-CLI-STATE] [REC-DS-ROLL-FUSED] [REC-DS-ROLL-UNFUSED]: worked example DS-1, steps 1..3
npy "$T/a2.npy" '<f4' '(1, 1)' 40000000
npy "$T/a0.npy" '<f4' '(1, 1)' 00000000
npy "$T/a4.npy" '<f4' '(1, 1)' 40800000
for roll in fused unfused; do
    for step in 1:a2:43600000 2:a0:43600000 3:a4:42E00000; do
        n=${step%%:*} rest=${step#*:}
        in=${rest%%:*} want=${rest#*:}
        expect_status "delayed $roll step $n" 0 "$QSPEC" quantize --recipe delayed --history 4 --roll $roll \
            --state "$T/ds_$roll.txt" --init --update --in "$T/$in.npy" --out "$T/ds_${roll}_$n"
        expect_true "delayed $roll step $n: scale $want" grep -qx "scale $want" "$T/ds_$roll.txt"
    done
done
expect_true "fused history after step 3 is 0 0 2 4" sh -c "tail -n 4 '$T/ds_fused.txt' | tr '\n' ' ' | grep -qx '00000000 00000000 40000000 40800000 '"
expect_true "unfused history after step 3 is 0 2 0 4" sh -c "tail -n 4 '$T/ds_unfused.txt' | tr '\n' ' ' | grep -qx '00000000 40000000 00000000 40800000 '"
expect_bytes "step 3 quantized 4 with scale 224: 896 -> 448 (0x7e)" "$T/ds_fused_3/row_data.npy" 1 "7e"
expect_status "a step without --update keeps the scale" 0 "$QSPEC" quantize --recipe delayed --state "$T/ds_fused.txt" --in "$T/a2.npy" --out "$T/ds_x"
expect_true "the history length comes from the file" grep -qx "len 4" "$T/ds_fused.txt"
expect_true "and slot 0 records the amax" sh -c "sed -n 5p '$T/ds_fused.txt' | grep -qx 40000000"

# bad input: one line on stderr, exit 2, nothing written
expect_usage "unknown recipe" "$QSPEC" quantize --recipe mxfp9 --in "$T/mx.npy" --out "$T/bad"
expect_err "names the recipe" "unknown recipe 'mxfp9'"
expect_usage "missing --recipe" "$QSPEC" quantize --in "$T/mx.npy" --out "$T/bad"
expect_usage "unknown option" "$QSPEC" quantize --recipe mxfp8 --frob 1 --in "$T/mx.npy" --out "$T/bad"
expect_err "names the option" "unknown recipe option 'frob'"
expect_usage "option of another recipe" "$QSPEC" quantize --recipe mxfp8 --margin 1 --in "$T/mx.npy" --out "$T/bad"
expect_err "says it does not apply" "'margin' does not apply to recipe mxfp8"
expect_usage "bad option value" "$QSPEC" quantize --recipe mxfp8 --rule floor --in "$T/mx.npy" --out "$T/bad"
expect_usage "option without a value" "$QSPEC" quantize --recipe mxfp8 --in "$T/mx.npy" --out
expect_usage "missing --out" "$QSPEC" quantize --recipe mxfp8 --in "$T/mx.npy"
expect_usage "missing input file" "$QSPEC" quantize --recipe mxfp8 --in "$T/nosuch.npy" --out "$T/bad"
npy "$T/i32.npy" '<i4' '(1, 2)' 00000001 00000002
expect_usage "integer input" "$QSPEC" quantize --recipe current --in "$T/i32.npy" --out "$T/bad"
expect_err "names the dtype" "x has dtype i32"
npy "$T/v.npy" '<f4' '(2,)' 3F800000 3F800000
expect_usage "1-D input" "$QSPEC" quantize --recipe current --in "$T/v.npy" --out "$T/bad"
expect_err "says it must be 2-D" "must be 2-D"
expect_usage "rht on fp32 input" "$QSPEC" quantize --recipe nvfp4 --in "$T/nv.npy" --out "$T/bad"
expect_err "says rht needs bf16" "needs a bf16 x"
expect_usage "output directory exists" "$QSPEC" quantize --recipe mxfp8 --in "$T/mx.npy" --out "$T/mx_te"
expect_err "names the directory" "already exists"
expect_usage "--state on another recipe" "$QSPEC" quantize --recipe current --state "$T/s.txt" --init --in "$T/cs.npy" --out "$T/bad"
expect_usage "missing state file without --init" "$QSPEC" quantize --recipe delayed --state "$T/nosuch.txt" --in "$T/a2.npy" --out "$T/bad"
expect_err "names the state file" "state file .*nosuch.txt: cannot open"
printf 'qspec-ds-state 1\nscale 3F800000\nscale_inv zz\nlen 1\n00000000\n' >"$T/corrupt.txt"
cp "$T/corrupt.txt" "$T/corrupt.orig"
expect_usage "corrupt state file" "$QSPEC" quantize --recipe delayed --state "$T/corrupt.txt" --update --in "$T/a2.npy" --out "$T/bad"
expect_err "names the line" "corrupt.txt:3: expected 'scale_inv HEX8'"
expect_true "the corrupt state file is untouched" cmp -s "$T/corrupt.txt" "$T/corrupt.orig"
printf 'qspec-ds-state 1\nscale 3F800000\nscale_inv 3F800000\nlen 2\n00000000\n' >"$T/short.txt"
expect_usage "truncated state file" "$QSPEC" quantize --recipe delayed --state "$T/short.txt" --in "$T/a2.npy" --out "$T/bad"
expect_err "names the missing entry" "short.txt:6: expected history entry 1"
expect_usage "state length differs from --history" "$QSPEC" quantize --recipe delayed --history 8 --state "$T/ds_fused.txt" --in "$T/a2.npy" --out "$T/bad"
expect_usage "--update without --state" "$QSPEC" quantize --recipe delayed --update --in "$T/a2.npy" --out "$T/bad"
expect_absent "no output was written by any failure" "$T/bad"
expect_usage "dequantize of a missing directory" "$QSPEC" dequantize --in "$T/nosuch" --out "$T/bad.npy"
expect_usage "dequantize with the wrong recipe" "$QSPEC" dequantize --recipe nvfp4 --in "$T/mx_te" --out "$T/bad.npy"
expect_err "names both recipes" "holds recipe mxfp8, not nvfp4"
cp -r "$T/mx_te" "$T/mx_bad"
cp "$T/mx_te/col_scale.npy" "$T/mx_bad/row_scale.npy"
expect_usage "dequantize with a scale of the wrong shape" "$QSPEC" dequantize --in "$T/mx_bad" --out "$T/bad.npy"
expect_err "names the tensor and shape" "row_scale must have shape \[1, 1\]"
printf 'qspec-quantized 1\nrecipe mxfp8\nrows 1\ncols 32\nrule sideways\n' >"$T/mx_bad/meta.txt"
expect_usage "dequantize with a corrupt meta.txt" "$QSPEC" dequantize --in "$T/mx_bad" --out "$T/bad.npy"
expect_err "names the meta line" "meta.txt:5:"
expect_usage "dequantize --dir sideways" "$QSPEC" dequantize --in "$T/mx_te" --dir up --out "$T/bad.npy"
expect_usage "dequantize takes no recipe options" "$QSPEC" dequantize --in "$T/mx_te" --rule ocp --out "$T/bad.npy"
expect_absent "no dequantized output was written" "$T/bad.npy"
qst_done
