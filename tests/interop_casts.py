"""interop_casts.py DIR N: compares qspec's codes in DIR (from tests/interop_casts) with
ml_dtypes' and numpy's casts of the same binary32 patterns. Prints "ok K - ..." or
"FAIL K - ..." per format, numbered from N+1, with the first mismatches in hex; exits 1 on
any failure. Where qspec and the peer differ by design (numpy's float16 keeps NaN payloads,
[FMT-NAN]), both sides are checked against the rule each follows."""
import sys

import ml_dtypes
import numpy as np

DIR, N = sys.argv[1], int(sys.argv[2])


def load(name):
    return np.fromfile(f"{DIR}/{name}.u32", dtype="<u4")


x_bits = load("x")
x = x_bits.view(np.float32)
is_nan = np.isnan(x)

# format name in qspec, peer dtype, storage view, code mask
PEERS = [
    ("e4m3", ml_dtypes.float8_e4m3fn, np.uint8, 0xFF),
    ("e5m2", ml_dtypes.float8_e5m2, np.uint8, 0xFF),
    ("e8m0", ml_dtypes.float8_e8m0fnu, np.uint8, 0xFF),
    ("e2m1", ml_dtypes.float4_e2m1fn, np.uint8, 0x0F),
    ("e2m3", ml_dtypes.float6_e2m3fn, np.uint8, 0x3F),
    ("e3m2", ml_dtypes.float6_e3m2fn, np.uint8, 0x3F),
    ("bf16", ml_dtypes.bfloat16, np.uint16, 0xFFFF),
    ("fp16", np.float16, np.uint16, 0xFFFF),
]


def numpy_f16_nan(bits):
    """numpy's float16 of a binary32 NaN: the sign, 0x7C00 and the top 10 payload bits,
    made 0x7C01 when those are 0 (written from what numpy 2.4.6 and 1.24 return)."""
    frac = (bits & 0x7FFFFF) >> 13
    frac = np.where(frac == 0, 1, frac)
    return ((bits >> 16) & 0x8000) | 0x7C00 | frac


def report(k, what, ok, bad_idx, ours, theirs):
    if ok:
        print(f"ok {k} - {what}")
        return 0
    print(f"FAIL {k} - {what}: {len(bad_idx)} of {len(x_bits)} differ")
    for i in bad_idx[:5]:
        print(f"    x=0x{int(x_bits[i]):08X} qspec=0x{int(ours[i]):X} peer=0x{int(theirs[i]):X}")
    return 1


failed = 0
k = N
with np.errstate(all="ignore"):
    for name, dtype, view, mask in PEERS:
        k += 1
        ours = load(name).astype(np.uint32)
        theirs = (x.astype(dtype).view(view).astype(np.uint32)) & mask
        peer = "numpy float16" if dtype is np.float16 else f"ml_dtypes {dtype.__name__}"
        what = (f"{name} mldtypes vs {peer} (ml_dtypes {ml_dtypes.__version__}, "
                f"numpy {np.__version__}), {len(x_bits)} patterns")
        if dtype is np.float16:
            # qspec: sign-kept quiet NaN 0x7E00/0xFE00; numpy: payload kept [FMT-NAN]
            want_ours = np.where(is_nan, ((x_bits >> 16) & 0x8000) | 0x7E00, theirs)
            want_theirs = np.where(is_nan, numpy_f16_nan(x_bits), theirs)
            bad = np.nonzero((ours != want_ours) | (theirs != want_theirs))[0]
            what += f"; NaN payloads kept by numpy on {int(is_nan.sum())} NaN inputs"
        else:
            bad = np.nonzero(ours != theirs)[0]
        failed += report(k, what, len(bad) == 0, bad, ours, theirs)
sys.exit(1 if failed else 0)
