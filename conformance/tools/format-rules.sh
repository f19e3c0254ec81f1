# format-rules.sh: the rule IDs of spec/formats.md that each generated format case cites
# (sourced by gen-format-cases.sh).
fmt_rules() {
    base="FMT-LAYOUT, FMT-ENCODE, FMT-NAN, FMT-ZERO, FMT-UNDERFLOW"
    case $1 in
    e4m3) echo "$base, FMT-E4M3-OVF, FMT-OVF" ;;
    e5m2) echo "$base, FMT-E5M2-OVF, FMT-INF, FMT-OVF" ;;
    e2m1) echo "$base, FMT-E2M1-OVF, FMT-E2M1-TIES, FMT-E2M1-NAN" ;;
    e8m0) echo "FMT-LAYOUT, FMT-ENCODE, FMT-NAN, FMT-E8M0-OVF, FMT-E8M0-RNE, FMT-E8M0-SIGN, FMT-E8M0-UNDERFLOW" ;;
    bf16) echo "$base, FMT-BF16-ENC, FMT-INF, FMT-OVF" ;;
    fp16) echo "$base, FMT-FP16-ENC, FMT-INF, FMT-OVF" ;;
    *) echo "$base, FMT-OVF" ;;
    esac
}
round_rule() {
    case $1 in
    rne) echo "FMT-ROUND-RNE" ;;
    rz) echo "FMT-ROUND-RZ, FMT-OVF-DIRECTED" ;;
    ru) echo "FMT-ROUND-RU, FMT-OVF-DIRECTED" ;;
    rd) echo "FMT-ROUND-RD, FMT-OVF-DIRECTED" ;;
    away) echo "FMT-ROUND-AWAY" ;;
    sr) echo "FMT-ROUND-SR, RNG-SR-BITS" ;;
    esac
}
ovf_rule() {
    case $1 in
    satfinite) echo "FMT-OVF-SATFINITE" ;;
    nosat) echo "FMT-OVF-NOSAT" ;;
    mldtypes) echo "FMT-OVF-MLDTYPES" ;;
    esac
}
