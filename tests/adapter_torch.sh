#!/bin/sh
# adapter_torch.sh: the unit tests of the PyTorch adapter (conformance/adapters/torch),
# run where a python3 with torch and numpy is found (QS_TORCH_PYTHON, else python3) and
# skipped with a message (exit 77) elsewhere: CI has no torch. The framework suite through
# the adapter is `make check-torch` (tests/framework_torch.sh).
PY=${QS_TORCH_PYTHON:-python3}
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "SKIP: no python3 with torch and numpy (set QS_TORCH_PYTHON)"
    exit 77
fi
cd "${QS_SRCDIR:-.}/conformance/adapters/torch" || exit 1
PYTHONDONTWRITEBYTECODE=1 exec "$PY" -m unittest discover -s tests 2>&1
