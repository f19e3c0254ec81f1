#!/bin/sh
# framework_torch.sh (make check-torch, outside make check): the framework suite
# conformance/framework/*.yaml (each file this qspec loads) answered by the PyTorch adapter through qspec gen and
# qspec verify ([CASE-GEN-PROG] [CASE-VERIFY-PROG]), eager and under torch.compile, on the
# GPU when torch sees one, else on the CPU. QS_TORCH_SUITES names another folder of case
# files: make check-torch-large gives conformance/framework/large, the production-size cases
# with no reference run ([CASE-VERIFY-SELF]), which need a GPU. Needs a python3 with torch,
# torchao and numpy (QS_TORCH_PYTHON, else python3); skipped (exit 77) without one. The
# summary is in QS_TORCH_OUT (default ./check-torch)/summary.txt; exit 1 when a case failed.
PY=${QS_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, torchao, numpy' >/dev/null 2>&1; then
    echo "SKIP: no python3 with torch, torchao and numpy (set QS_TORCH_PYTHON)"
    exit 77
fi
SUITES=${QS_TORCH_SUITES:-$QS_SRCDIR/conformance/framework}
OUT=${QS_TORCH_OUT:-check-torch}
rm -rf "$OUT"
status=0
for SUITE in "$SUITES"/*.yaml; do
    if ! "$QSPEC" list --tier all "$SUITE" >/dev/null 2>&1; then
        echo "skipping $SUITE: this qspec does not load it ($("$QSPEC" list --tier all "$SUITE" 2>&1 | head -1))"
        continue
    fi
    for mode in eager compiled; do
        PYTHON="$PY" sh "$QS_SRCDIR/conformance/adapters/torch/run-suite.sh" "$QSPEC" "$SUITE" \
            "$OUT" $mode || status=1
    done
done
echo "$(grep -c '^PASS' "$OUT/summary.txt") passed, $(grep -c '^FAIL\|^ERROR' "$OUT/summary.txt") failed, $(grep -c '^NOT SUPPORTED' "$OUT/summary.txt") not supported ($OUT/summary.txt)"
exit $status
