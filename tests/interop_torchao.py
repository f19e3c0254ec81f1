"""interop_torchao.py DIR QSPEC N: torchao's quantizers against `qspec quantize`, run on the
CPU. Each comparison pairs one torchao function with the qspec recipe and options closest to
it, quantizes the same tensors with both (dense random data, then adversarial data: ties,
subnormal and tiny amaxes, zero blocks, NaN and Inf, amaxes at binade edges) and compares
the rowwise codes and the scales bit for bit. Every block where they differ is put in the
first class whose test, on the block's input alone, holds; each class is a documented
difference (docs/interop.md). Prints "ok K - ..." or "FAIL K - ..." per comparison, from
N+1, with a table of the classes and one hex example each; a comparison fails when a dense
random tensor differs or a differing block falls in no class it expects. Writes the number
of comparisons to DIR/count."""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torchao
from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated
from torchao.prototype.blockwise_fp8_training.kernels import (
    torch_blockwise_scale_act_quant_lhs,
    torch_blockwise_scale_weight_quant,
)
from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, to_mx
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

DIR, QSPEC, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
EXPLORE = os.environ.get("QS_INTEROP_EXPLORE") == "1"
M, K = 128, 256
F8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def f32(b):
    return np.array(b, dtype=np.uint32).view(np.float32)


def hexs(a):
    a = np.asarray(a)
    if a.dtype == np.float32:
        return " ".join(f"0x{int(v):08X}" for v in a.view(np.uint32).ravel())
    return " ".join(f"0x{int(v):02X}" for v in a.ravel())


# ------------------------------------------------------------------ data


def rng(seed):
    return np.random.default_rng(seed)


def midpoints(fmt_max_codes):
    """The binary32 values half-way between consecutive non-negative codes of a format."""
    v = np.asarray(fmt_max_codes, dtype=np.float64)
    return ((v[:-1] + v[1:]) / 2).astype(np.float32)


E4M3_VALUES = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
E5M2_VALUES = torch.arange(0, 0x7C, dtype=torch.uint8).view(torch.float8_e5m2).float().numpy()
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)


def ties(seed, values, fmax, block, rows=M, cols=K, tile_rows=1):
    """Each block (1 x block, or tile_rows x block) holds fmax * 2^j once (j random per block)
    and otherwise midpoints of the element format times 2^j, random signs: with a
    power-of-two scale every element is a tie."""
    r = rng(seed)
    mids = midpoints(values)
    x = r.choice(mids, size=(rows, cols)) * r.choice([-1.0, 1.0], size=(rows, cols))
    x = x.astype(np.float32)
    for i in range(0, rows, tile_rows):
        for j in range(0, cols, block):
            e = float(2.0 ** int(r.integers(-20, 21)))
            x[i:i + tile_rows, j:j + block] *= np.float32(e)
            x[i, j + int(r.integers(0, block))] = np.float32(fmax * e)
    return x


def specials(seed, block, rows=M, cols=K, tile_rows=1):
    """Blocks in turn: all zero; one NaN; one +Inf; one -Inf; NaN and Inf; subnormal
    (amax below 2^-126); tiny normal (amax near 2^-118 .. 2^-100); an amax just above or at
    a power of two (1 + k 2^-23) times 2^e or 448 * 2^e; and the rest N(0, 1)."""
    r = rng(seed)
    x = r.standard_normal((rows, cols)).astype(np.float32)
    n = 0
    for i in range(0, rows, tile_rows):
        for j in range(0, cols, block):
            b = x[i:i + tile_rows, j:j + block]
            kind = n % 10
            n += 1
            at = (int(r.integers(0, b.shape[0])), int(r.integers(0, b.shape[1])))
            if kind == 0:
                b[...] = 0
            elif kind == 1:
                b[at] = np.nan
            elif kind == 2:
                b[at] = np.inf
                b[((at[0] + 1) % b.shape[0], (at[1] + 1) % b.shape[1])] = np.float32(3e38)
            elif kind == 3:
                b[at] = -np.inf
            elif kind == 4:
                b[at] = np.nan
                b[(at[0], (at[1] + 1) % b.shape[1])] = np.inf
            elif kind == 5:
                b[...] = (r.integers(0, 1 << 22, size=b.shape).astype(np.uint32)).view(np.float32)
                b[...] *= r.choice([-1.0, 1.0], size=b.shape).astype(np.float32)
            elif kind == 6:
                b[...] *= np.float32(2.0 ** int(r.integers(-127, -100)))
            elif kind in (7, 8):
                base = 1.0 if kind == 7 else 448.0
                e = int(r.integers(-30, 30))
                a = f32(np.float32(base * 2.0 ** e).view(np.uint32) + np.uint32(r.integers(0, 4)))
                b[...] = np.clip(b, -0.9, 0.9) * a
                b[at] = a
    return x


def dense(seed, wide=False, rows=M, cols=K):
    r = rng(seed)
    x = r.standard_normal((rows, cols))
    if wide:  # each run of 32 along a row its own binade, 2^-40 .. 2^40
        x = x * 2.0 ** r.integers(-40, 41, size=(rows, cols // 32)).repeat(32, axis=1)
    return x.astype(np.float32)


def bf16(a):
    return torch.from_numpy(a).to(torch.bfloat16)


# ------------------------------------------------------------------ the two sides


def save_input(path, x):
    if x.dtype == torch.bfloat16:
        a = x.view(torch.int16).numpy().view("<u2").view(np.dtype([("bfloat16", "<u2")]))
    else:
        a = x.numpy()
    np.save(path, a)


SEQ = [0]


def qspec(x, recipe, opts):
    SEQ[0] += 1
    d = f"{DIR}/q{SEQ[0]}"
    save_input(d + ".npy", x)
    r = subprocess.run([QSPEC, "quantize", "--recipe", recipe, *opts, "--columnwise", "0",
                        "--in", d + ".npy", "--out", d], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"qspec quantize {recipe} {' '.join(opts)}: {r.stderr.strip()}")

    def load(name):
        a = np.load(f"{d}/{name}.npy")
        return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(np.float32)

    out = {"codes": load("row_data"), "scale": load("row_scale")}
    if recipe == "current":
        out["scale"] = load("scale_inv").reshape(1, 1)
    return out


def t_codes(t):
    return t.contiguous().view(torch.uint8).numpy()


def ao_mx(mode, elem):
    def run(x):
        s, d = to_mx(x, F8[elem][0], 32, mode)
        return {"codes": t_codes(d), "scale": t_codes(s)}
    return run


def ao_nvfp4(x):
    pts = per_tensor_amax_to_scale(torch.max(torch.abs(x.float())))
    s, d = nvfp4_quantize(x, 16, pts)
    p = d.view(torch.uint8).numpy()
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1)
    return {"codes": codes, "scale": t_codes(s)}


def ao_tensorwise(elem, pow2):
    def run(x):
        s = tensor_to_scale(x, F8[elem][0], round_scales_to_power_of_2=pow2)
        d = to_fp8_saturated(x.to(torch.float32) * s, F8[elem][0])
        return {"codes": t_codes(d), "scale": (1.0 / s).reshape(1, 1).numpy()}
    return run


def ao_block(tile):
    def run(x):
        if tile == "1d":
            d, si = torch_blockwise_scale_act_quant_lhs(x, 128)
        else:
            d, si = torch_blockwise_scale_weight_quant(x, 128)
        return {"codes": t_codes(d), "scale": si.contiguous().numpy()}
    return run


# ------------------------------------------------------------------ classes of difference
# Each test sees the block's values as binary32 (b) and the tensor (t); all hold on the
# input alone.


def amax_nan(v):
    return float(np.max(np.where(np.isnan(v), 0, np.abs(v)))) if v.size else 0.0


def has_nan(b, t):
    return bool(np.isnan(b).any())


def has_inf(b, t):
    return bool(np.isinf(b).any())


def t_has_nan(b, t):
    return bool(np.isnan(t).any())


def t_has_inf(b, t):
    return bool(np.isinf(t).any())


def all_zero(b, t):
    return bool((b == 0).all())


def t_all_zero(b, t):
    return bool((t == 0).all())


def below(limit):
    return lambda b, t: amax_nan(b) < limit


def t_below(limit):
    return lambda b, t: amax_nan(t) < limit


def rceil_log2_edge(fmax):
    """amax / fmax lies just above a power of two, within a few float32 ulps: a float32
    log2 rounds to the integer and ceil stays there (torchao's CPU RCEIL fallback)."""
    def test(b, t):
        a = amax_nan(b)
        if not (a > 0 and math.isfinite(a)):
            return False
        q = float(np.float32(a) / np.float32(fmax))
        m, _ = math.frexp(q)  # q = m 2^e, 0.5 <= m < 1
        return 0.5 < m <= 0.5 * (1 + 2.0 ** -19)
    return test


def pow2_round_up(fmax):
    """448 / amax lies just below a power of two: float32 log2 rounds up to the integer."""
    def test(b, t):
        a = amax_nan(t)
        if not (a > 0 and math.isfinite(a)):
            return False
        s = float(np.float32(np.float64(fmax) / max(np.float64(a), 1e-12)))
        m, _ = math.frexp(s)
        return m >= 1 - 2.0 ** -19
    return test


def any_block(b, t):
    return True


CLASSES = {
    "nan": ("a NaN in the block: torch.amax propagates it, the scale is NaN "
            "(RCEIL: every element NaN; FLOOR: scale 0xFF read as 2^128, finite elements "
            "+-0; block FP8: every element NaN)", has_nan),
    "t-nan": ("a NaN in the tensor: torch.max propagates it, the tensor scale is NaN and "
              "every code follows it", t_has_nan),
    "inf-mx": ("an Inf in the block: scale 0xFE on both sides, but torchao's multiplier "
               "for 0xFE is 2^-127 (TE's exp2f_rcp: 0): Inf clamps to max where te gives "
               "NaN, large finite elements keep a code where te gives 0", has_inf),
    "inf-floor": ("an Inf in the block: FLOOR takes the scale from the Inf's exponent field "
                  "(E4M3 0xF7, E5M2 0xF0) and clamps the Inf to max; rule ocp gives "
                  "scale 0xFF and every element NaN", has_inf),
    "inf-scale0": ("an Inf in the block: scale fl(448/Inf) = 0, so finite elements give "
                   "+-0 and the Inf 0 * Inf = NaN; the stored 1/s is Inf", has_inf),
    "t-inf-scale0": ("an Inf in the tensor: scale fl(448/Inf) = 0, so finite elements give "
                     "+-0 and the Inf NaN; the stored 1/s is Inf", t_has_inf),
    "floor-2^-126": ("FLOOR, scale 0x00 (amax < 2^-118): torchao divides by its floor "
                     "2^-126, rule ocp multiplies by 2^127: the elements lose a binade",
                     below(2.0 ** -118)),
    "floor-2^-126-e5m2": ("FLOOR, scale 0x00 (amax < 2^-111): torchao divides by its floor "
                          "2^-126, rule ocp multiplies by 2^127: the elements lose a binade",
                          below(2.0 ** -111)),
    "rceil-edge": ("RCEIL on the CPU: fl(amax / 448) just above a power of two; float32 "
                   "log2 rounds to the integer, so ceil stays there and the scale is a "
                   "binade below TE's", rceil_log2_edge(448.0)),
    "rceil-edge-e5m2": ("RCEIL on the CPU: fl(amax / 57344) just above a power of two; "
                        "float32 log2 rounds to the integer, so the scale is a binade "
                        "below TE's", rceil_log2_edge(57344.0)),
    "pow2-up": ("pow2: fl(448 / amax) just below a power of two: exp2(floor(log2 s)) in "
                "float32 rounds s up to that power (qspec clears the mantissa: down)",
                pow2_round_up(448.0)),
    "t-zero-nv": ("an all-zero tensor: pts = 0, block scale 0 / 0 = NaN (0xFF), codes from "
                  "NaN bits; qspec defines 0x08 and codes 0 [REC-NV-TORCHAO-ZERO]",
                  t_all_zero),
    "t-tiny-nv": ("tensor amax below 2688 * 2^-126: pts is subnormal, 1/pts = Inf, and a "
                  "zero element gives 0 * Inf = NaN; torchao's f32_to_f4_unpacked has no "
                  "NaN (0xFFC00000 gives 0xB), qspec's E2M1 NaN is +6 (0x7)",
                  t_below(2688 * 2.0 ** -126)),
    "t-inf-nv": ("an Inf in the tensor: pts = Inf, the Inf's block scale (Inf/6)/Inf is NaN "
                 "with the sign bit the CPU gives it (torchao 0xFF, qspec 0x7F) and its "
                 "elements NaN (torchao 0xC, qspec 0x7)", t_has_inf),
    "any": ("unclassified", any_block),
}


# ------------------------------------------------------------------ comparisons


def sets_for(block, tile_rows, fmt_values, fmax, tensorwise=False, rows=M, cols=K):
    """(name, tensor, dense) for one comparison, each [rows, cols]."""
    sh = {"rows": rows, "cols": cols}
    out = [("normal", torch.from_numpy(dense(11, **sh)), True),
           ("wide binades", torch.from_numpy(dense(12, wide=not tensorwise, **sh)), True),
           ("bf16 normal", bf16(dense(13, **sh)), True),
           ("ties", torch.from_numpy(ties(14, fmt_values, fmax, block, tile_rows=tile_rows,
                                          **sh)), False)]
    if tensorwise:
        z = np.zeros((M, K), np.float32)
        x = dense(15)
        out += [("zero tensor", torch.from_numpy(z), False),
                ("tiny tensor 1e-13", torch.from_numpy(x * np.float32(1e-13)), False),
                ("subnormal tensor", torch.from_numpy(x * np.float32(2.0 ** -140)), False)]
        for name, v in (("one NaN", np.nan), ("one Inf", np.inf)):
            y = x.copy()
            y[3, 5] = v
            out.append((name, torch.from_numpy(y), False))
        for k in range(6):  # 448 / amax just below 2^k
            y = dense(20 + k)
            a = f32(np.float32(448.0 * 2.0 ** -k).view(np.uint32) + np.uint32(1 + k % 3))
            y = np.clip(y, -0.5, 0.5) * a
            y[0, 0] = a
            out.append((f"amax 448 2^-{k} + ulps", torch.from_numpy(y.astype(np.float32)), False))
    else:
        out += [("specials", torch.from_numpy(specials(16, block, tile_rows=tile_rows, **sh)),
                 False),
                ("specials bf16", bf16(specials(17, block, tile_rows=tile_rows, **sh)), False)]
    return out


def nv_ties(seed):
    """One element 2688 * 2^k makes pts = 2^k exact; every other block holds 6 d 2^k with d
    a power of two in [2^-6, 2^8] (its scale d exactly) and E2M1 midpoints times d 2^k:
    with 0.18.0's r = (1/pts)/d a power of two, those are ties."""
    r = rng(seed)
    k = int(r.integers(-10, 10))
    x = (r.choice(midpoints(E2M1_VALUES), size=(M, K))
         * r.choice([-1.0, 1.0], size=(M, K))).astype(np.float32)
    for i in range(M):
        for j in range(0, K, 16):
            d = 2.0 ** int(r.integers(-6, 9))
            x[i, j:j + 16] *= np.float32(d * 2.0 ** k)
            x[i, j + int(r.integers(0, 16))] = np.float32(6 * d * 2.0 ** k)
    x[0, :16] = 0
    x[0, 0] = np.float32(2688 * 2.0 ** k)
    return x


def nv_sets():
    base = sets_for(16, 1, E2M1_VALUES, 6.0)
    base.insert(4, ("ties, pts a power of two", torch.from_numpy(nv_ties(18)), False))
    z = np.zeros((M, K), np.float32)
    x = dense(30)
    base += [("zero tensor", torch.from_numpy(z), False),
             ("tensor amax 2^-120", torch.from_numpy((x / np.abs(x).max() * 2.0 ** -120)
                                                      .astype(np.float32)), False),
             ("tensor amax 2^-135", torch.from_numpy((x / np.abs(x).max() * 2.0 ** -135)
                                                      .astype(np.float32)), False)]
    y = x.copy()
    y[3, 5] = np.inf
    base.append(("one Inf", torch.from_numpy(y), False))
    return base


# name, torchao function, qspec recipe and options, block shape (rows, cols) of the scale,
# data sets, expected classes in order of test
COMPARISONS = [
    ("MX e4m3 RCEIL (to_mx) vs mxfp8 rule te", ao_mx(ScaleCalculationMode.RCEIL, "e4m3"),
     "mxfp8", ["--rule", "te", "--elem", "e4m3"], (1, 32),
     sets_for(32, 1, E4M3_VALUES, 448.0), ["nan", "inf-mx", "rceil-edge"]),
    ("MX e5m2 RCEIL (to_mx) vs mxfp8 rule te", ao_mx(ScaleCalculationMode.RCEIL, "e5m2"),
     "mxfp8", ["--rule", "te", "--elem", "e5m2"], (1, 32),
     sets_for(32, 1, E5M2_VALUES, 57344.0), ["nan", "inf-mx", "rceil-edge-e5m2"]),
    ("MX e4m3 FLOOR (to_mx) vs mxfp8 rule ocp", ao_mx(ScaleCalculationMode.FLOOR, "e4m3"),
     "mxfp8", ["--rule", "ocp", "--elem", "e4m3"], (1, 32),
     sets_for(32, 1, E4M3_VALUES, 448.0), ["nan", "inf-floor", "floor-2^-126"]),
    ("MX e5m2 FLOOR (to_mx) vs mxfp8 rule ocp", ao_mx(ScaleCalculationMode.FLOOR, "e5m2"),
     "mxfp8", ["--rule", "ocp", "--elem", "e5m2"], (1, 32),
     sets_for(32, 1, E5M2_VALUES, 57344.0), ["nan", "inf-floor", "floor-2^-126-e5m2"]),
    ("float8 tensorwise e4m3 (tensor_to_scale) vs current --eps 1e-12",
     ao_tensorwise("e4m3", False), "current", ["--format", "e4m3", "--eps", "1e-12"], None,
     sets_for(K, M, E4M3_VALUES, 448.0, tensorwise=True),
     ["t-nan", "t-inf-scale0"]),
    ("float8 tensorwise e5m2 (tensor_to_scale) vs current --eps 1e-12",
     ao_tensorwise("e5m2", False), "current", ["--format", "e5m2", "--eps", "1e-12"], None,
     sets_for(K, M, E5M2_VALUES, 57344.0, tensorwise=True),
     ["t-nan", "t-inf-scale0"]),
    ("float8 tensorwise e4m3 pow2 vs current --pow2 1 --eps 1e-12",
     ao_tensorwise("e4m3", True), "current", ["--format", "e4m3", "--eps", "1e-12",
                                              "--pow2", "1"], None,
     sets_for(K, M, E4M3_VALUES, 448.0, tensorwise=True),
     ["t-nan", "t-inf-scale0", "pow2-up"]),
    ("blockwise FP8 1x128 (torch_blockwise_scale_act_quant_lhs) vs block --tile 1d --pow2 0 "
     "--eps 1e-12", ao_block("1d"), "block", ["--tile", "1d", "--pow2", "0", "--eps", "1e-12"],
     (1, 128), sets_for(128, 1, E4M3_VALUES, 448.0), ["nan", "inf-scale0"]),
    ("blockwise FP8 128x128 (torch_blockwise_scale_weight_quant) vs block --tile 2d --pow2 0 "
     "--eps 1e-12", ao_block("2d"), "block", ["--tile", "2d", "--pow2", "0", "--eps", "1e-12"],
     (128, 128), sets_for(128, 128, E4M3_VALUES, 448.0, rows=256, cols=640), ["nan", "inf-scale0"]),
    ("NVFP4 (nvfp4_quantize, per-tensor scale) vs nvfp4 variant torchao",
     ao_nvfp4, "nvfp4", ["--variant", "torchao", "--tile", "1d", "--rht", "0", "--sr", "0"],
     (1, 16), nv_sets(), ["t-nan", "t-zero-nv", "t-tiny-nv", "t-inf-nv"]),
]


def compare(name, ao, recipe, opts, bshape, sets, expected):
    """Returns (ok, lines)."""
    lines = []
    counts = {}  # class -> [blocks, codes, example]
    tot_codes = tot_same = tot_scales = tot_scales_same = 0
    dense_bad = []
    for sname, x, is_dense in sets:
        a = ao(x)
        q = qspec(x, recipe, opts)
        xf = x.float().numpy()
        codes_eq = a["codes"] == q["codes"]
        sa = np.asarray(a["scale"])
        sq = np.asarray(q["scale"])
        sa_b = sa.view(np.uint32) if sa.dtype == np.float32 else sa
        sq_b = sq.view(np.uint32) if sq.dtype == np.float32 else sq
        scale_eq = sa_b == sq_b
        tot_codes += codes_eq.size
        tot_same += int(codes_eq.sum())
        tot_scales += scale_eq.size
        tot_scales_same += int(scale_eq.sum())
        if codes_eq.all() and scale_eq.all():
            continue
        if is_dense:
            dense_bad.append(sname)
        br, bc = bshape if bshape else xf.shape
        for i in range(scale_eq.shape[0]):
            for j in range(scale_eq.shape[1]):
                blk = (slice(i * br, (i + 1) * br), slice(j * bc, (j + 1) * bc))
                ce = codes_eq[blk]
                if scale_eq[i, j] and ce.all():
                    continue
                b = xf[blk]
                cls = next(c for c in expected + ["any"] if CLASSES[c][1](b, xf))
                ent = counts.setdefault(cls, [0, 0, None])
                ent[0] += 1
                ent[1] += int((~ce).sum())
                if ent[2] is None or EXPLORE:
                    bad = np.argwhere(~ce)
                    r, c = (bad[0] if len(bad) else (0, 0))
                    ex = (f"{sname}: block amax {hexs(np.float32(amax_nan(b)))}, scale "
                          f"torchao {hexs(sa[i:i + 1, j])} qspec {hexs(sq[i:i + 1, j])}")
                    if len(bad):
                        ex += (f"; x {hexs(b[r, c])} -> torchao 0x{int(a['codes'][blk][r, c]):02X} "
                               f"qspec 0x{int(q['codes'][blk][r, c]):02X}")
                    if ent[2] is None:
                        ent[2] = ex
                    if EXPLORE:
                        lines.append(f"    [{cls}] {ex}")
    ok = not dense_bad and "any" not in counts
    head = (f"{name} (torchao {torchao.__version__}, torch {torch.__version__}): codes "
            f"{tot_same}/{tot_codes} equal, scales {tot_scales_same}/{tot_scales} equal")
    if dense_bad:
        head += f"; dense data differ: {', '.join(dense_bad)}"
    for cls, (nb, nc, ex) in counts.items():
        lines.append(f"    {cls}: {CLASSES[cls][0]}: {nb} blocks, {nc} codes; e.g. {ex}")
    return ok, head, lines


failed = 0
k = N
with np.errstate(all="ignore"):
    for comp in COMPARISONS:
        k += 1
        ok, head, lines = compare(*comp)
        print(f"{'ok' if ok else 'FAIL'} {k} - {head}")
        for line in lines:
            print(line)
        failed += 0 if ok else 1
with open(f"{DIR}/count", "w") as f:
    f.write(f"{len(COMPARISONS)} {failed}\n")
sys.exit(1 if failed else 0)
