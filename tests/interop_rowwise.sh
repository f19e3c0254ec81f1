#!/bin/sh
# interop_rowwise.sh: qspec's axiswise quantizers (recipes rowwise and rowwise_with_gw_hp)
# against torchao's own casts, bit for bit: tests/interop_rowwise.py runs a torchao
# Float8Linear forward and backward on the CPU, records every cast it makes, and compares
# each with the `qspec quantize` copy spec/recipes.md says it is ([REC-AX-ROW] [REC-AX-COL]
# [REC-AX-GWHP] [REC-AX-SCALE] [REC-AX-POW2] [REC-AX-ELEM]). Needs a python3 with torch,
# torchao and numpy (QS_TORCH_PYTHON, else python3); skipped (exit 77) without one.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
PY=""
for p in "${QS_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] || continue
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy, torch, torchao.float8' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no python3 with torch, torchao and numpy (set QS_TORCH_PYTHON)"
    exit 77
fi
SRC=$(cd "${QS_SRCDIR:-.}" && pwd)
mkdir -p "$QST_TMP/ax"
set +e
(cd "$QST_TMP" && "$PY" "$SRC/tests/interop_rowwise.py" "$QSPEC" "$QST_TMP/ax" "$QST_N" \
    >"$QST_TMP/py.out" 2>"$QST_TMP/py.err")
rc=$?
set -e
cat "$QST_TMP/py.out"
QST_N=$((QST_N + $(grep -c -E '^(ok|FAIL) ' "$QST_TMP/py.out" || true)))
[ "$rc" -eq 0 ] || { QST_FAILED=$((QST_FAILED + 1)); tail -20 "$QST_TMP/py.err"; }
qst_done
