#!/bin/sh
# interop_torch.sh (make check-interop, not part of make check): the PyTorch example of
# docs/vendor.md, taken from the document itself, computes every SDPA case in the sbhd and
# bshd layouts (FP32, BF16, FP16) in float64, and `qspec verify` compares its outputs with
# the reference's under each case's tolerance ([ATTN-TOL]). Needs a python3 with torch and
# numpy (QS_TORCH_PYTHON, else python3); skipped (exit 77) without one.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
PY=${QS_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "SKIP: no python3 with torch and numpy (set QS_TORCH_PYTHON)"
    exit 77
fi
CASES="$QS_SRCDIR/conformance/cases/attention.yaml"
awk '/^### A worked example with PyTorch/{f=1} f&&/^```python/{g=1;next} g&&/^```/{exit} g' \
    "$QS_SRCDIR/docs/vendor.md" >"$QST_TMP/qspec_torch.py"
for id in $(sed -n 's/^  - id: \(attn\.sdpa\.[a-z0-9]*\.\(sbhd\|bshd\)\..*\)$/\1/p' "$CASES"); do
    "$QSPEC" gen "$CASES" --id "$id" --out "$QST_TMP/$id" >/dev/null
    expect_status "the vendor guide's PyTorch example computes $id" 0 \
        "$PY" "$QST_TMP/qspec_torch.py" "$QST_TMP/$id"
    expect_status "its outputs agree with the reference: $id" 0 \
        "$QSPEC" verify "$CASES" --id "$id" --results "$QST_TMP/$id"
done
qst_done
