#!/bin/sh
# cast_cli.sh: `qspec cast` — the acceptance values of spec/formats.md through the CLI, the
# table output, and every usage error (one stderr line, exit 2, nothing on stdout).
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"

# codes: prints the second field of each output line, space-separated
codes() { awk '{ printf "%s%s", sep, $2; sep = " " } END { printf "\n" }' "$QST_TMP/out"; }
# expect_codes WHAT "CODES" ARGS...: cast succeeds and prints exactly these codes
expect_codes() {
    what=$1 want=$2
    shift 2
    QST_N=$((QST_N + 1))
    qst_run "$QSPEC" cast "$@"
    got=$(codes)
    if [ "$QST_RC" -ne 0 ] || [ "$got" != "$want" ]; then
        qst_fail "$what" "qspec cast $*: exit $QST_RC, codes '$got', want '$want'" \
            "stderr: $(head -c 600 "$QST_TMP/err")"
        return 0
    fi
    echo "ok $QST_N - $what"
}

# [FMT-E4M3-OVF] [FMT-OVF-SATFINITE] [FMT-NAN] [FMT-INF]
expect_codes "e4m3 satfinite: 448 464 465 -inf nan" "0x7e 0x7e 0x7e 0xfe 0x7f" \
    --to e4m3 448 464 465 -inf nan
# [FMT-OVF-NOSAT]
expect_codes "e4m3 nosat: 465 is NaN" "0x7f 0xff" --to e4m3 --overflow nosat 465 -465
# [FMT-OVF-MLDTYPES]
expect_codes "e4m3 mldtypes: -inf is -NaN" "0xff 0x7f" --to e4m3 --overflow mldtypes -inf 465
# [FMT-E5M2-OVF]
expect_codes "e5m2 satfinite: 57344 61440" "0x7b 0x7b" --to e5m2 57344 61440
expect_codes "e5m2 nosat: 61440 overflows" "0x7b 0x7c" --to e5m2 --overflow nosat 57344 61440
# [FMT-E2M1-TIES]
expect_codes "e2m1 ties" "0x0 0x2 0x2 0x4 0x6 0x6 0x7 0xa" \
    --to e2m1 0.25 0.75 1.25 2.5 3.5 5 7 -0.75
# [FMT-ROUND-AWAY] [FMT-ROUND-SR] [FMT-ROUND-RZ]
expect_codes "e2m1 away" "0x1 0x3 0x5 0x7" --to e2m1 --round away 0.25 1.25 2.5 5
expect_codes "sr rounds up at r + u/2^32 >= 1" "0x39" --to e4m3 --round sr --sr-bits 0x80000000 1.0625
expect_codes "sr stays below" "0x38" --to e4m3 --round sr --sr-bits 2147483647 1.0625
expect_codes "options after the values" "0x7f" --to e4m3 465 --overflow=nosat
expect_codes "hex floats and -- before negative values" "0x01 0x80" --to e4m3 -- 0x1p-9 -0x1p-11
# [FMT-ENCODE-F64] 1e-50 is read as FP64, not flushed through FP32
expect_codes "inputs are read as FP64" "0x01" --to e4m3 --round ru 1e-50
expect_codes "bf16 and fp16 codes are 4 hex digits" "0x3f80 0x7fff" --to bf16 1 nan
expect_codes "e8m0" "0x7f 0x80 0x00 0xfe" --to e8m0 1 1.5 0 inf

expect_status "cast prints the decoded value and flags" 0 "$QSPEC" cast --to e4m3 465 448
expect_out "an overflow is flagged" "^465 0x7e 448 overflow,inexact$"
expect_out "an exact value is flagged exact" "^448 0x7e 448 exact$"
expect_status "NaN is flagged" 0 "$QSPEC" cast --to e4m3 --overflow mldtypes -nan
expect_out "a negative NaN decodes as -nan" "^-nan 0xff -nan nan$"

# --table [FMT-DECODE]
expect_status "--table e2m1 succeeds" 0 "$QSPEC" cast --table e2m1
expect_true "--table e2m1 has 16 lines" test "$(wc -l <"$QST_TMP/out")" -eq 16
expect_out "--table e2m1 ends with -6" "^0xf -6$"
expect_status "--table e4m3 succeeds" 0 "$QSPEC" cast --table e4m3
expect_out "--table e4m3 has 448" "^0x7e 448$"
expect_out "--table e4m3 has NaN" "^0x7f nan$"

# usage errors
expect_usage "missing --to" "$QSPEC" cast 1.0
expect_err "names --to" "missing --to"
expect_usage "no values" "$QSPEC" cast --to e4m3
expect_usage "unknown format" "$QSPEC" cast --to e9m9 1
expect_err "names the format" "e9m9"
expect_usage "fp64 is not a target" "$QSPEC" cast --to fp64 1
expect_usage "unknown rounding mode" "$QSPEC" cast --to e4m3 --round nearest 1
expect_err "names the mode" "nearest"
expect_usage "unknown overflow policy" "$QSPEC" cast --to e4m3 --overflow clamp 1
expect_err "names the policy" "clamp"
expect_usage "bad --sr-bits" "$QSPEC" cast --to e4m3 --round sr --sr-bits 0x100000000 1
expect_usage "negative --sr-bits" "$QSPEC" cast --to e4m3 --round sr --sr-bits -1 1
expect_usage "bad value" "$QSPEC" cast --to e4m3 1.5x
expect_err "names the value" "1.5x"
expect_usage "empty value" "$QSPEC" cast --to e4m3 ""
expect_usage "a bad value after good ones prints nothing" "$QSPEC" cast --to e4m3 1 2 abc
expect_usage "unknown option" "$QSPEC" cast --to e4m3 --frob 1
expect_usage "option without its value" "$QSPEC" cast --to
expect_usage "--table of a 16-bit format" "$QSPEC" cast --table bf16
expect_usage "--table with values" "$QSPEC" cast --table e4m3 1
expect_usage "--table with --to" "$QSPEC" cast --table e4m3 --to e4m3
expect_status "help cast" 0 "$QSPEC" help cast
expect_out "help cast prints the usage" "^usage: qspec cast"
qst_done
