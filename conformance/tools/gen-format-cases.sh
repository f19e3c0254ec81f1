#!/bin/sh
# gen-format-cases.sh: writes the format conversion suite, one file per format, to the
# folder given (conformance/cases). For every format, rounding mode and overflow policy:
# a case over the format's boundary values and a case over a random tensor with injected
# specials. Digests are left pending: fill them with `qspec run --update-digests`.
# The committed YAML is the source of truth; this script records how it was made.
set -e
out=${1:?usage: gen-format-cases.sh OUTDIR}

bounds() {
    case $1 in
    e4m3) echo "0, -0, 1, 1.0625, 1.1875, 1.5, -1.75, 448, -448, 464, -464, 465, 480, 1e9, 0x1p-6, 0x1.fffffep-7, 0x1p-9, 0x1p-10, 0x1.000002p-10, -0x1p-10, 0x1.8p-10, 0x1p-11, inf, -inf, nan, -nan" ;;
    e5m2) echo "0, -0, 1, 1.125, 1.375, 1.5, -1.75, 57344, -57344, 61439, 61440, -61440, 65536, 1e9, 0x1p-14, 0x1p-16, 0x1p-17, 0x1.000002p-17, -0x1p-17, 0x1.8p-16, inf, -inf, nan, -nan" ;;
    e2m1) echo "0, -0, 0.25, 0.2499, 0.75, 1, 1.25, 1.75, 2.5, 3.5, 5, 5.5, 6, 6.5, 7, -0.75, -5, 1e9, 0x1p-2, 0x1.000002p-2, inf, -inf, nan, -nan" ;;
    e2m3) echo "0, -0, 0.0625, 0.0626, 0.125, 0.1875, 1, 1.0625, 1.125, 7, 7.25, 7.5, 7.75, 7.7499, 8, -7.75, 1e9, inf, -inf, nan, -nan, 0x1p-4, 0x1p-5, 1.5" ;;
    e3m2) echo "0, -0, 0.03125, 0.0313, 0.0625, 0.09375, 0.25, 1, 1.125, 1.375, 24, 26, 28, 30, 29.99, 32, -30, 1e9, inf, -inf, nan, -nan, 0x1p-5, 0x1p-6" ;;
    e8m0) echo "1, 1.5, 1.4999999, 1.5000001, 3, 0.75, 0x1p-127, 0x1.8p-127, 0x1p-126, 0x1p127, 0x1.8p127, 0x1.fffffep127, 0x1p-149, 0, -0, -1, -0x1p-127, 2, 4, 6, 1e-30, 1e30, inf, -inf, nan, -nan" ;;
    bf16) echo "0, -0, 1, 1.00390625, 0x1.018p0, 0x1.008002p0, -1.00390625, 0x1.fep127, 0x1.fefffep127, 0x1.ff0000p127, 0x1.fffffep127, 0x1p-126, 0x1p-133, 0x1p-134, 0x1.000002p-134, 0x1p-149, 3.14159265, 65504, inf, -inf, nan, -nan, 1e-40, -1e-40" ;;
    fp16) echo "0, -0, 1, 0x1.002p0, 0x1.006p0, 0x1.002002p0, 65504, 65519, 65520, -65520, 1e9, 0x1p-14, 0x1p-24, 0x1p-25, 0x1.000002p-25, 0x1.8p-24, -0x1p-25, 3.14159265, 1e-8, 0.1, inf, -inf, nan, -nan" ;;
    esac
}

# the standard deviation of the random case: spreads over the format's range and beyond
stddev() {
    case $1 in
    e4m3) echo 200 ;;
    e5m2) echo 20000 ;;
    e2m1) echo 3 ;;
    e2m3) echo 4 ;;
    e3m2) echo 12 ;;
    e8m0) echo 1000 ;;
    bf16 | fp16) echo 30000 ;;
    esac
}

# rules a case cites: the format's layout and the mode's and policy's rules
rules() {
    fmt=$1 rnd=$2 ovf=$3
    printf '%s' "$(fmt_rules "$fmt" "$ovf"), $(round_rule "$rnd"), $(ovf_rule "$ovf")"
}
. "$(dirname "$0")/format-rules.sh"

for fmt in e4m3 e5m2 e2m1 e2m3 e3m2 e8m0 bf16 fp16; do
    f="$out/formats-$fmt.yaml"
    {
        echo "# The $fmt conversion suite: every rounding mode and overflow policy, on the"
        echo "# format's boundary values and on a random tensor with injected specials."
        echo "# Written by conformance/tools/gen-format-cases.sh."
        echo "qspec: 1"
        echo "cases:"
        seed=1
        for rnd in rne rz ru rd away sr; do
            for ovf in satfinite nosat mldtypes; do
                n=$(bounds $fmt | tr ',' '\n' | wc -l)
                srp=""
                [ "$rnd" = sr ] && srp=", sr_seed: 7, sr_offset: $seed"
                echo "  - id: fmt.$fmt.$rnd.$ovf.bounds"
                echo "    rules: [$(rules $fmt $rnd $ovf)]"
                echo "    op: cast"
                echo "    params: {to: $fmt, round: $rnd, overflow: $ovf$srp}"
                echo "    inputs:"
                echo "      x: {dtype: fp32, shape: [$n], values: [$(bounds $fmt)]}"
                echo "    outputs:"
                echo "      y: {compare: bitwise, digest: pending}"
                echo "  - id: fmt.$fmt.$rnd.$ovf.random"
                echo "    rules: [$(rules $fmt $rnd $ovf)]"
                echo "    op: cast"
                echo "    params: {to: $fmt, round: $rnd, overflow: $ovf$srp}"
                echo "    inputs:"
                echo "      x: {dtype: fp32, shape: [32, 32], normal: {mean: 0, std: $(stddev $fmt)}, seed: $seed,"
                echo "          inject: [{at: random, value: nan}, {at: random, value: inf}, {at: random, value: -inf}, {at: random, value: -0}]}"
                echo "    outputs:"
                echo "      y: {compare: bitwise, digest: pending}"
                seed=$((seed + 1))
            done
        done
    } >"$f"
done
