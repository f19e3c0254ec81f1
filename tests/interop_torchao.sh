#!/bin/sh
# interop_torchao.sh (make check-interop, not part of make check): torchao's quantizers,
# run on the CPU (MX to_mx in its FLOOR and RCEIL modes, float8 tensorwise scaling with and
# without power-of-two scales, the torch reference functions of blockwise FP8 1x128 and
# 128x128, NVFP4 with a per-tensor scale), against `qspec quantize` under the recipe and
# options closest to each, bit for bit over dense and adversarial tensors; every
# difference is put in a documented class (tests/interop_torchao.py, docs/interop.md).
# Needs a python3 with torch, numpy and torchao (QS_TORCH_PYTHON, else python3); skipped
# (exit 77) without one.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
PY=${QS_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, numpy, torchao.prototype.mx_formats.mx_tensor' >/dev/null 2>&1; then
    echo "SKIP: no python3 with torch, numpy and torchao (set QS_TORCH_PYTHON)"
    exit 77
fi
set +e
"$PY" "$QS_SRCDIR/tests/interop_torchao.py" "$QST_TMP" "$QSPEC" "$QST_N"
rc=$?
set -e
# count: the number of comparisons and of those that failed
read -r n f <"$QST_TMP/count" 2>/dev/null || { n=1 f=1; }
QST_N=$((QST_N + n))
QST_FAILED=$((QST_FAILED + f))
[ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || QST_FAILED=$((QST_FAILED + 1))
qst_done
