#!/bin/sh
# interop_casts.sh: qspec's casts against independent implementations, over the dense
# sample of binary32 patterns that tests/interop_casts writes: policy mldtypes against
# ml_dtypes (e4m3, e5m2, e8m0, e2m1, e2m3, e3m2, bf16) and numpy's float16
# ([FMT-OVF-MLDTYPES], [FMT-E2M1-NAN], [FMT-NAN], [FMT-FP16-ENC]). One "ok N" or "FAIL N"
# line per format. Skipped (exit 77) when no python3 with numpy and ml_dtypes is found:
# QS_INTEROP_PYTHON, the virtual environment `./autogen.sh --install-deps` makes
# (interop-venv/ in the build or source tree), then python3 and /usr/bin/python3.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"

PY=""
for p in "${QS_INTEROP_PYTHON:-}" "${QS_BUILDDIR:-.}/interop-venv/bin/python" \
    "${QS_SRCDIR:-.}/interop-venv/bin/python" python3 /usr/bin/python3; do
    [ -n "$p" ] || continue
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy, ml_dtypes' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no python3 with numpy and ml_dtypes (./autogen.sh --install-deps makes interop-venv/)"
    exit 77
fi
expect_status "interop_casts writes the sample and qspec's codes" 0 \
    "${QS_BUILDDIR:-.}/tests/interop_casts" "$QST_TMP"
cat "$QST_TMP/out"
set +e
"$PY" "${QS_SRCDIR:-.}/tests/interop_casts.py" "$QST_TMP" "$QST_N"
rc=$?
set -e
QST_N=$((QST_N + 8)) # the formats interop_casts.py compares
[ "$rc" -eq 0 ] || QST_FAILED=$((QST_FAILED + 1))
qst_done
