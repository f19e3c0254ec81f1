"""interop_rowwise.py QSPEC DIR N: compares qspec's axiswise quantizers (recipes rowwise and
rowwise_with_gw_hp, spec/recipes.md section 8) with torchao's own casts, bit for bit.

torchao side: a real torchao Float8Linear (Float8LinearConfig.from_recipe_name, emulated
GEMMs so that it runs on the CPU) runs forward and backward on BF16 x, w and dy; every cast
it makes (torchao.float8.float8_linear.hp_tensor_to_float8_dynamic) is recorded with the
role and axis torchao gives it. qspec side: `qspec quantize --recipe R --role ROLE` of the
same tensor. Each torchao cast is matched with the qspec copy the spec says it is
([REC-AX-ROW], [REC-AX-COL], [REC-AX-GWHP]) and the FP8 codes and the decode scales
(torchao: reciprocal() of its scale) must be equal bit for bit. Then casts of special rows
(zeros, values below eps, Inf, NaN, E5M2) and an FP32 power-of-two edge [REC-AX-POW2] go
through torchao's hp_tensor_to_float8_dynamic directly. Prints "ok K - ..." / "FAIL K - ...",
numbered from N+1; exits 1 on any failure."""
import dataclasses
import os
import subprocess
import sys

import numpy as np
import torch
import torchao
from torchao.float8 import float8_linear
from torchao.float8.config import Float8LinearConfig, ScalingGranularity
from torchao.float8.float8_linear import Float8Linear
from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
from torchao.float8.float8_training_tensor import LinearMMConfig

QSPEC, DIR, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
K = N
FAILED = 0
BF16_DESCR = np.dtype([("bfloat16", "<u2")])


def report(what, bad, detail=""):
    global K, FAILED
    K += 1
    if bad == 0:
        print(f"ok {K} - {what}")
    else:
        FAILED += 1
        print(f"FAIL {K} - {what}: {bad} differ {detail}")


def save(name, t):
    """A torch tensor as .npy in the dtype qspec reads (bf16 as ml_dtypes' descr)."""
    path = os.path.join(DIR, name + ".npy")
    if t.dtype == torch.bfloat16:
        np.save(path, t.contiguous().view(torch.int16).numpy().view(np.uint16).view(BF16_DESCR))
    else:
        np.save(path, t.contiguous().numpy())
    return path


def u8(a):
    return np.ascontiguousarray(a).view(np.uint8).reshape(a.shape)


def u32(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def qspec_quantize(name, t, recipe, role, opts=()):
    out = os.path.join(DIR, ".".join([name, recipe, role, *opts]).replace("-", ""))
    cmd = [QSPEC, "quantize", "--recipe", recipe, "--role", role, *opts,
           "--in", save(name, t), "--out", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    got = {}
    for f in ("row_data", "row_scale", "col_data", "col_scale"):
        a = np.load(os.path.join(out, f + ".npy"))
        got[f] = u8(a.view(np.uint8)) if a.dtype.itemsize == 1 else a  # FP8 codes as bytes
    return got


def torch_codes(fp8):
    return u8(fp8._data.view(torch.uint8).numpy())


def torch_scale_inv(fp8):
    return u32(fp8._scale.reciprocal().numpy())


def compare(what, codes_q, codes_t, sinv_q, sinv_t):
    bad = int((codes_q != codes_t).sum())
    bad_s = int((u32(sinv_q).ravel() != sinv_t.ravel()).sum())
    detail = ""
    if bad:
        i = np.argwhere(codes_q != codes_t)[0]
        detail = f"(first at {tuple(i)}: qspec 0x{codes_q[tuple(i)]:02X} torchao 0x{codes_t[tuple(i)]:02X})"
    report(f"{what}: codes ({codes_q.size}) and decode scales ({sinv_t.size})", bad + bad_s,
           detail or f"({bad_s} scales)")


def gen(shape, seed, lo=-2.0, hi=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * (hi - lo) + lo).to(torch.bfloat16)


# ---------------------------------------------------------------- the linear's own casts

M, KK, NN = 48, 64, 40
x = gen((M, KK), 1)
x[0] = 0.0                        # an all-zero row: amax below eps
x[1] = gen((KK,), 2) * 1e-20      # values below torchao's eps 1e-12
x[2, 5] = 3.0e38                  # a row whose scale is tiny
x[:, 7] *= 1000.0                 # a large column: the columnwise copy differs
w = gen((NN, KK), 3, -0.3, 0.3)
w[4] = 0.0
dy = gen((M, NN), 4, -1.0, 1.0)

for recipe in ("rowwise", "rowwise_with_gw_hp"):
    cfg = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=True)
    seen = []
    real = float8_linear.hp_tensor_to_float8_dynamic

    def record(hp, dtype, mmc, **kw):
        out = real(hp, dtype, mmc, **kw)
        seen.append((kw["gemm_input_role"].value, kw.get("axiswise_dim"), hp.shape, dtype, out))
        return out

    float8_linear.hp_tensor_to_float8_dynamic = record
    lin = Float8Linear.from_float(torch.nn.Linear(KK, NN, bias=False), config=cfg)
    lin.weight = torch.nn.Parameter(w.clone())
    xi = x.clone().requires_grad_(True)
    lin(xi).backward(dy)
    float8_linear.hp_tensor_to_float8_dynamic = real

    q = {r: qspec_quantize(n, t, recipe, r)
         for r, n, t in (("input", "x", x), ("weight", "w", w), ("grad_output", "dy", dy))}
    want = 6 if recipe == "rowwise" else 4
    report(f"{recipe}: torchao {torchao.__version__} (torch {torch.__version__}) casts "
           f"{len(seen)} tensors in one forward and backward", abs(len(seen) - want))
    for role, dim, shape, dtype, fp8 in seen:
        report(f"{recipe}: torchao casts {role} (axis {dim}) to e4m3",
               int(dtype != torch.float8_e4m3fn))
        codes, sinv = torch_codes(fp8), torch_scale_inv(fp8)
        r = q[role]
        if role == "weight":
            # torchao casts w^T [K, N]: axis 0 (along K) is qspec's rowwise copy of w,
            # axis -1 (along N) or tensorwise (gw_hp) its columnwise copy [K, N]
            if dim == 0:
                compare(f"{recipe}: w rowwise [REC-AX-ROW]", r["row_data"], codes.T,
                        r["row_scale"], sinv.T)
            else:
                compare(f"{recipe}: w columnwise [REC-AX-COL] [REC-AX-GWHP]", r["col_data"],
                        codes, r["col_scale"], sinv)
        elif dim == -1:
            compare(f"{recipe}: {role} rowwise [REC-AX-ROW]", r["row_data"], codes,
                    r["row_scale"], sinv)
        else:
            compare(f"{recipe}: {role} columnwise [REC-AX-COL]", r["col_data"], codes.T,
                    r["col_scale"], sinv.T)
    if recipe == "rowwise_with_gw_hp":
        # [REC-AX-GWHP]: the columnwise copies of x and dy are x^T and dy^T themselves
        for name, t, role in (("x", x, "input"), ("dy", dy, "grad_output")):
            col = q[role]["col_data"]
            bad = int((u32(col) != u32(t.float().T.numpy())).sum())
            report(f"{recipe}: {name} columnwise is {name}^T in high precision, scale 1",
                   bad + int(u32(q[role]["col_scale"])[0] != 0x3F800000))

# ---------------------------------------------------------------- special rows, one cast each

lmc = LinearMMConfig()
AX = ScalingGranularity.AXISWISE
inf, nan = float("inf"), float("nan")
special = torch.tensor([[1.0, -2.0, inf, 0.5],       # Inf: scale 0, Inf*0 = NaN
                        [0.0, 0.0, -0.0, 0.0],       # zeros: scale 2^48
                        [1e-30, -3e-25, 0.0, 1e-35],  # below eps
                        [nan, 1.0, 2.0, 3.0],         # NaN: the row is NaN
                        [448.0, 449.0, -500.0, 1.0]]).to(torch.bfloat16)
for fmt, dtype in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
    fp8 = hp_tensor_to_float8_dynamic(special, dtype, lmc, scaling_granularity=AX, axiswise_dim=-1,
                                      round_scales_to_power_of_2=True)
    r = qspec_quantize("special", special, "rowwise", "input", ("--format", fmt))
    codes_t, codes_q = torch_codes(fp8), r["row_data"]
    nan_code = 0x7F if fmt == "e4m3" else None
    # a NaN code's sign is not specified [REC-AX-ELEM]: compare NaN codes without it
    if nan_code:
        codes_t = np.where((codes_t & 0x7F) == 0x7F, 0x7F, codes_t)
    else:
        codes_t = np.where((codes_t & 0x7C) == 0x7C, codes_t & 0x7F, codes_t)
        codes_q = np.where((codes_q & 0x7C) == 0x7C, codes_q & 0x7F, codes_q)
    sinv_t = torch_scale_inv(fp8)
    sinv_t = np.where(np.isnan(fp8._scale.reciprocal().numpy()).ravel(), 0x7FC00000, sinv_t.ravel())
    compare(f"rowwise {fmt}: rows with Inf, zeros, values below eps, NaN, saturation",
            codes_q, codes_t, r["row_scale"], sinv_t)

# [REC-AX-POW2]: FP32 amaxes whose scale lies a few ulps below a power of two. torch's float32
# log2 rounds up to the next integer there, qspec's rule takes the exact floor: the codes of
# those rows differ by design and every other row agrees.
edge = np.float32(448.0 * 2.0 ** 12) * (1 + np.arange(1, 9, dtype=np.float32) * np.float32(2 ** -23))
rows = torch.tensor(np.stack([np.full(4, v, dtype=np.float32) * np.float32([1, 0.5, -0.25, 0.125])
                              for v in edge]))
rows = torch.cat([rows, gen((8, 4), 9).float()])
fp8 = hp_tensor_to_float8_dynamic(rows, torch.float8_e4m3fn, lmc, scaling_granularity=AX,
                                  axiswise_dim=-1, round_scales_to_power_of_2=True)
r = qspec_quantize("edge", rows, "rowwise", "input")
s_exact = torch.tensor(448.0, dtype=torch.float64) / rows.abs().amax(dim=1).double()
s_exact = s_exact.float().numpy()
floor2 = (s_exact.view(np.uint32) & 0xFF800000).view(np.float32)
rounded_up = fp8._scale.numpy().ravel() != floor2
ours_floor = u32(1.0 / r["row_scale"].ravel()) == floor2.view(np.uint32)
same = (torch_codes(fp8) == r["row_data"]).all(axis=1)
report(f"rowwise fp32: qspec's scale is the exact power of two at or below ({len(rows)} rows)",
       int((~ours_floor).sum()))
report(f"rowwise fp32: rows agree with torchao except the {int(rounded_up.sum())} whose torch "
       f"log2 rounded up", int((same == rounded_up).sum()) if rounded_up.any() else 0)

# ---------------------------------------------------------------- the cases, through gen/verify

E4M3_DESCR = np.dtype([("float8_e4m3fn", "u1")])
E5M2_DESCR = np.dtype([("float8_e5m2", "u1")])


def load_input(path):
    a = np.load(path)
    if a.dtype.names == ("bfloat16",):
        return torch.from_numpy(a.view(np.uint16).astype(np.int32).astype(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def torchao_copies(x, recipe, role, pow2, fp8):
    """The copies of spec/recipes.md section 8 made with torchao's casts, as Float8Linear
    makes them for the tensor's role (the weight as w^T [K, N], as torchao holds it)."""
    cfg = Float8LinearConfig.from_recipe_name(recipe)
    cc = {"input": (cfg.cast_config_input, cfg.cast_config_input_for_grad_weight),
          "grad_output": (cfg.cast_config_grad_output, cfg.cast_config_grad_output_for_grad_weight),
          "weight": (cfg.cast_config_weight, cfg.cast_config_weight_for_grad_input)}[role]

    def cast(t, c, dim):
        g = c.scaling_granularity
        return hp_tensor_to_float8_dynamic(t, fp8, lmc, scaling_granularity=g,
                                           axiswise_dim=dim if g is AX else None,
                                           round_scales_to_power_of_2=pow2)

    out = {}
    if role == "weight":
        wt = x.t()
        row, col = cast(wt, cc[0], 0), cast(wt, cc[1], -1)
        out["row_data"], out["row_scale"] = torch_codes(row).T, torch_scale_inv(row).reshape(-1, 1)
        out["col_data"] = torch_codes(col)
        out["col_scale"] = torch_scale_inv(col).reshape(-1, 1 if col._scale.numel() > 1 else 1)
        if col._scale.numel() == 1:
            out["col_scale"] = out["col_scale"].reshape(1)
    else:
        row = cast(x, cc[0], -1)
        out["row_data"], out["row_scale"] = torch_codes(row), torch_scale_inv(row)
        if cc[1].scaling_type.value == "disabled":  # the high-precision copy x^T, scale 1
            out["col_data"] = x.float().T.contiguous().numpy()
            out["col_scale"] = np.ones(1, np.float32)
        else:
            col = cast(x, cc[1], 0)
            out["col_data"], out["col_scale"] = torch_codes(col).T, torch_scale_inv(col).T
    return out


CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance", "cases",
                     "recipes-rowwise.yaml")
ids = [l.split("id:")[1].strip() for l in open(CASES) if l.strip().startswith("- id:")]
for cid in ids:
    d = os.path.join(DIR, "case-" + cid)
    subprocess.run([QSPEC, "gen", CASES, "--id", cid, "--out", d], check=True,
                   stdout=subprocess.DEVNULL)
    import json
    man = json.load(open(os.path.join(d, "manifest.json")))
    prm = man["params"]
    fmt = prm.get("format", "e4m3")
    fp8 = torch.float8_e5m2 if fmt == "e5m2" else torch.float8_e4m3fn
    pow2 = str(prm.get("pow2", "1")) in ("1", "on", "true", "yes")
    x_in = load_input(os.path.join(d, "x.npy"))
    got = torchao_copies(x_in, prm["recipe"], prm["role"], pow2, fp8)
    for o in man["outputs"]:
        a = got[o["name"]]
        if o["dtype"] in ("e4m3", "e5m2"):
            a = np.ascontiguousarray(a, np.uint8).view(E5M2_DESCR if o["dtype"] == "e5m2" else E4M3_DESCR)
        else:
            a = np.ascontiguousarray(a).view(np.float32).reshape(o["shape"])
        np.save(os.path.join(d, o["file"]), a)
    r = subprocess.run([QSPEC, "verify", CASES, "--id", cid, "--results", d],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    report(f"case {cid}: torchao's casts pass qspec verify", r.returncode,
           r.stdout.strip().splitlines()[-1] if r.returncode else "")
sys.exit(1 if FAILED else 0)
