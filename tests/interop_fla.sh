#!/bin/sh
# interop_fla.sh (make check-interop, not part of make check): FLA's naive recurrent Gated
# DeltaNet (fla.ops.gated_delta_rule.naive, run in PyTorch on the CPU, its gradients by
# autograd) computes every GDN case of conformance/cases/attention.yaml through
# tests/interop_fla.py, and `qspec verify` compares its outputs with the reference's under
# each case's tolerance ([ATTN-TOL]); a line per case gives the largest error relative to
# that tolerance. Needs a python3 with torch, numpy and FLA (QS_TORCH_PYTHON, else python3;
# FLA is flash-linear-attention with fla-core, and einops); skipped (exit 77) without one.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"
PY=${QS_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, numpy; from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule' >/dev/null 2>&1; then
    echo "SKIP: no python3 with torch, numpy and FLA (set QS_TORCH_PYTHON)"
    exit 77
fi
CASES="$QS_SRCDIR/conformance/cases/attention.yaml"
"$PY" -c 'import fla, torch; print(f"FLA {fla.__version__}, torch {torch.__version__}")' 2>/dev/null
for id in $(sed -n 's/^  - id: \(gdn\.[a-z0-9.-]*\)$/\1/p' "$CASES"); do
    "$QSPEC" gen "$CASES" --id "$id" --out "$QST_TMP/$id" --expected >/dev/null
    expect_status "FLA's naive recurrent GDN computes $id" 0 \
        "$PY" "$QS_SRCDIR/tests/interop_fla.py" "$QST_TMP/$id"
    expect_status "its outputs agree with the reference: $id" 0 \
        "$QSPEC" verify "$CASES" --id "$id" --results "$QST_TMP/$id"
    "$PY" "$QS_SRCDIR/tests/interop_fla.py" --stats "$QST_TMP/$id" 2>/dev/null || true
done
qst_done
