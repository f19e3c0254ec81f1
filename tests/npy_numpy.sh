#!/bin/sh
# npy_numpy.sh: files that qspec writes load in numpy with the right dtype, shape and
# values ([CASE-NPY-WRITE], [CASE-NPY-DESCR], [CASE-NPY-E2M1]). Skipped (exit 77) when
# python3 with numpy is not installed; the float values of the ml_dtypes formats are
# checked too when ml_dtypes is installed.
set -e
. "${QS_SRCDIR:-.}/tests/lib.sh"

# the first python3 that has numpy: the one on PATH, else the system's (Debian's python3-numpy)
PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: python3 with numpy is not available"
    exit 77
fi
SAMPLE="${QS_BUILDDIR:-.}/tests/npy_write_sample"
expect_status "the sample writer writes every dtype" 0 "$SAMPLE" "$QST_TMP"

for f in fp32 fp64 fp16 bf16 u8 i32 i64 e4m3 e5m2 e8m0 e2m1 e2m3 e3m2 scalar eight_d empty; do
    QST_N=$((QST_N + 1))
    qst_run "$PY" - "$QST_TMP/$f.npy" "$f" <<'EOF'
import sys
import numpy as np

path, name = sys.argv[1], sys.argv[2]
# expected: (numpy dtype or ml_dtypes field, shape, stored values or codes, float values)
inf, nan = float("inf"), float("nan")
want = {
    "fp32": ("<f4", (2, 3), [0, 1, -2, 0.5, 3.25, inf], None),
    "fp64": ("<f8", (2, 3), [1.5, -0.25, 1e300, 0, -0.0, 2], None),
    "fp16": ("<f2", (2, 3), [1, -2, 65504, 2.0**-24, 0, -0.0], None),
    "u8": ("|u1", (2, 3), [0, 1, 2, 253, 254, 255], None),
    "i32": ("<i4", (2, 3), [-1, 2**31 - 1, -(2**31), 0, 7, -7], None),
    "i64": ("<i8", (2, 3), [-(2**63), 1234567890123, -1, 0, 1, 2**63 - 1], None),
    "bf16": ("bfloat16", (2, 3), [0x3F80, 0xC040, 0x7F80, 0, 0x8000, 0x4000],
             [1, -3, inf, 0, -0.0, 2]),
    "e4m3": ("float8_e4m3fn", (2, 3), [0x00, 0x38, 0xFE, 0x7F, 0x01, 0x40],
             [0, 1, -448, nan, 2.0**-9, 2]),
    "e5m2": ("float8_e5m2", (2, 3), [0x3C, 0xFB, 0x7C, 0x01, 0x00, 0x40],
             [1, -57344, inf, 2.0**-16, 0, 2]),
    "e8m0": ("float8_e8m0fnu", (2, 3), [0x7F, 0x00, 0xFE, 0xFF, 0x80, 0x7E],
             [1, 2.0**-127, 2.0**127, nan, 2, 0.5]),
    "e2m1": ("float4_e2m1fn", (5,), [0x0, 0x1, 0x2, 0x7, 0xB], [0, 0.5, 1, 6, -1.5]),
    "e2m3": ("float6_e2m3fn", (2, 3), [0x08, 0x3F, 0x01, 0x00, 0x1F, 0x10],
             [1, -7.5, 0.125, 0, 7.5, 2]),
    "e3m2": ("float6_e3m2fn", (2, 3), [0x0C, 0x3F, 0x01, 0x00, 0x1F, 0x10],
             [1, -28, 0.0625, 0, 28, 2]),
    "scalar": ("<f4", (), [42], None),
    "eight_d": ("|u1", (1, 2, 1, 1, 1, 1, 1, 2), [0, 1, 2, 3], None),
    "empty": ("<i8", (0, 2), [], None),
}[name]
descr, shape, stored, floats = want

with open(path, "rb") as f:
    head = f.read(10)
    assert head[:8] == b"\x93NUMPY\x01\x00", head
    assert (10 + int.from_bytes(head[8:10], "little")) % 64 == 0, "data not 64-aligned"
a = np.load(path, allow_pickle=False)
assert a.shape == shape, (a.shape, shape)
if floats is None:
    assert a.dtype == np.dtype(descr), a.dtype
    got, exp = a.reshape(-1), np.array(stored, dtype=descr)
    assert np.array_equal(got, exp), (got, exp)
    assert np.array_equal(np.signbit(got), np.signbit(exp)) if got.dtype.kind == "f" else True
else:
    assert a.dtype.names == (descr,), a.dtype
    codes = a[descr].reshape(-1)
    assert codes.tolist() == stored, (codes.tolist(), stored)
    try:
        import ml_dtypes
    except ImportError:
        sys.exit(0)
    v = codes.view(getattr(ml_dtypes, descr)).astype(np.float64)
    exp = np.array(floats, dtype=np.float64)
    assert np.array_equal(v, exp, equal_nan=True), (v, exp)
    assert np.array_equal(np.signbit(v), np.signbit(exp)), (v, exp)
EOF
    if [ "$QST_RC" -eq 0 ]; then
        echo "ok $QST_N - numpy loads $f.npy with its dtype, shape and values"
    else
        qst_fail "numpy loads $f.npy with its dtype, shape and values" "$(cat "$QST_TMP/err")"
    fi
done
qst_done
