#!/bin/sh
# run-suite.sh QSPEC SUITE OUTDIR [MODE] [ID...]: answers every case of SUITE (or the IDs
# given) with the PyTorch adapter through `qspec gen` and `qspec verify`, in MODE `eager`
# (default) or `compiled` (torch.compile). Writes OUTDIR/ID.MODE.log (gen, adapter and
# verify output) and appends one line per case to OUTDIR/summary.txt: PASS, FAIL, NOT
# SUPPORTED or ERROR, the case, the mode and verify's last line. Exit 1 when a case failed.
# PYTHON (default python3) runs the adapter; the package is found beside this script.
set -u
QSPEC=$1 SUITE=$2 OUT=$3
MODE=${4:-eager}
[ $# -ge 4 ] && shift 4 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
flag=
[ "$MODE" = compiled ] && flag=--compile
mkdir -p "$OUT"
ids="$*"
[ -n "$ids" ] || ids=$(sed -n 's/^  - id: \([^ ]*\)$/\1/p' "$SUITE")
status=0
for id in $ids; do
    work="$OUT/work/$id.$MODE"
    log="$OUT/$id.$MODE.log"
    rm -rf "$work"
    mkdir -p "$OUT/work"
    start=$(date +%s)
    {
        "$QSPEC" gen "$SUITE" --id "$id" --out "$work" &&
            PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m qspec_torch "$work" $flag
        echo "adapter exit $?"
        "$QSPEC" verify "$SUITE" --id "$id" --results "$work"
        echo "verify exit $?"
    } >"$log" 2>&1
    rc=$(sed -n 's/^verify exit //p' "$log")
    case $rc in
    0) word=PASS ;;
    1) word=FAIL status=1 ;;
    3) word="NOT SUPPORTED" ;;
    *) word=ERROR status=1 ;;
    esac
    last=$(grep -E '^(PASS|FAIL|NOT SUPPORTED) ' "$log" | tail -1)
    [ -n "$last" ] || last=$(grep -v '^verify exit\|^adapter exit' "$log" | tail -1)
    line="$word $id $MODE $(($(date +%s) - start))s: $last"
    echo "$line" | tee -a "$OUT/summary.txt"
done
exit $status
