#!/bin/sh
# run-suite.sh QSPEC SUITE OUTDIR [MODE] [ID...]: answers every case of SUITE (or the IDs
# given) with the PyTorch adapter through `qspec gen` and `qspec verify`, in MODE `eager`
# (default) or `compiled` (torch.compile): gen for each case, one adapter process for all
# of them, verify for each. Writes OUTDIR/ID.MODE.log (gen and verify),
# OUTDIR/adapter.MODE.log, and appends one line per case to OUTDIR/summary.txt: PASS, FAIL,
# NOT SUPPORTED or ERROR, the case, the mode and verify's last line. Exit 1 when a case
# failed. PYTHON (default python3) runs the adapter, found beside this script.
set -u
QSPEC=$1 SUITE=$2 OUT=$3
MODE=${4:-eager}
[ $# -ge 4 ] && shift 4 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
flag=
[ "$MODE" = compiled ] && flag=--compile
mkdir -p "$OUT/answers"
ids="$*"
[ -n "$ids" ] || ids=$(sed -n 's/^  - id: \([^ ]*\)$/\1/p' "$SUITE")
works=
for id in $ids; do
    work="$OUT/answers/$id.$MODE"
    rm -rf "$work"
    "$QSPEC" gen "$SUITE" --id "$id" --out "$work" >"$OUT/$id.$MODE.log" 2>&1 &&
        works="$works $work"
done
start=$(date +%s)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m qspec_torch $works $flag \
    >>"$OUT/adapter.$MODE.log" 2>&1
echo "adapter ($MODE, $(echo $ids | wc -w) cases): exit $?, $(($(date +%s) - start)) s" >>"$OUT/adapter.$MODE.log"
status=0
for id in $ids; do
    log="$OUT/$id.$MODE.log"
    "$QSPEC" verify "$SUITE" --id "$id" --results "$OUT/answers/$id.$MODE" >>"$log" 2>&1
    rc=$?
    case $rc in
    0) word=PASS ;;
    1) word=FAIL status=1 ;;
    3) word="NOT SUPPORTED" ;;
    *) word=ERROR status=1 ;;
    esac
    last=$(grep -E '^(PASS|FAIL|NOT SUPPORTED) ' "$log" | tail -1)
    [ -n "$last" ] || last=$(tail -1 "$log")
    echo "$word $id $MODE: $last" | tee -a "$OUT/summary.txt"
done
exit $status
