#!/usr/bin/env python3
"""gen-recipe-cases.py: writes the recipe suites (conformance/cases/recipes-*.yaml).

For every recipe: its variants and options, input dtypes, shapes that are and are not
multiples of the block size, and the special blocks the spec names (all-zero, one Inf,
one NaN, amax significands above 1.75). Digests are left pending; fill them with
`qspec run --update-digests`. The committed YAML is the source of truth; this script
records how it was made and is not needed to build or run qspec."""
import sys

OUT = sys.argv[1]
TW = ["row_data", "row_scale", "col_data", "col_scale", "amax", "scale_inv"]
BLK = ["row_data", "row_scale", "col_data", "col_scale"]
NV = BLK + ["amax", "global_scale"]
seed = [1000]


def next_seed():
    seed[0] += 1
    return seed[0]


def inp(dtype, shape, gen=None, values=None, inject=()):
    shp = ", ".join(str(s) for s in shape)
    if values is not None:
        body = "values: [%s]" % ", ".join(values)
    else:
        body = "%s, seed: %d" % (gen or "normal: {mean: 0, std: 4}", next_seed())
    if inject:
        body += ", inject: [%s]" % ", ".join("{at: %s, value: %s}" % i for i in inject)
    return "{dtype: %s, shape: [%s], %s}" % (dtype, shp, body)


def case(f, cid, rules, params, x, outputs, desc=None):
    f.write("  - id: %s\n" % cid)
    if desc:
        f.write("    description: \"%s\"\n" % desc)
    f.write("    rules: [%s]\n" % ", ".join(rules))
    f.write("    op: quantize\n")
    f.write("    params: {%s}\n" % ", ".join("%s: %s" % kv for kv in params))
    f.write("    inputs:\n      x: %s\n" % x)
    f.write("    outputs:\n")
    for o in outputs:
        f.write("      %s: {compare: bitwise, digest: pending}\n" % o)


def header(f, what):
    f.write("# The %s suite of spec/recipes.md.\n" % what)
    f.write("# Written by conformance/tools/gen-recipe-cases.py.\nqspec: 1\ncases:\n")


SPECIALS = [
    ("zero", None, ["0"]),
    ("inf", [("random", "inf")], None),
    ("nan", [("random", "nan"), ("3", "-nan")], None),
    ("neginf", [("5", "-inf")], None),
]

with open(OUT + "/recipes-current.yaml", "w") as f:
    header(f, "current-scaling")
    for dt in ["fp32", "bf16", "fp16"]:
        for shape in [(32, 64), (33, 70)]:
            for pow2 in ["0", "1"]:
                for role in ["input", "grad_output"]:
                    rules = ["REC-CS-AMAX", "REC-CS-SCALE", "REC-TW-ELEM", "REC-TW-LAYOUT", "REC-AMAX",
                             "REC-DS-HYBRID", "REC-ROLE", "REC-INPUT"]
                    if pow2 == "1":
                        rules.append("REC-CS-POW2")
                    case(f, "rec.current.%s.%dx%d.pow2-%s.%s" % (dt, shape[0], shape[1], pow2, role), rules,
                         [("recipe", "current"), ("role", role), ("pow2", pow2)],
                         inp(dt, shape, "normal: {mean: 1, std: 300}", inject=[("random", "464"), ("random", "-0")]), TW)
    for name, inj, vals in SPECIALS:
        case(f, "rec.current.special-%s" % name, ["REC-CS-AMAX", "REC-CS-SCALE", "REC-AMAX", "REC-TW-ELEM"],
             [("recipe", "current")],
             inp("fp32", (16, 32), values=vals, inject=inj or ()), TW,
             "amax with %s values: NaN ignored, Inf kept, zero gives scale 1" % name)
    case(f, "rec.current.eps", ["REC-CS-AMAX", "REC-OPTIONS"], [("recipe", "current"), ("eps", "0.5")],
         inp("fp32", (8, 16), "normal: {mean: 0, std: 0.01}"), TW, "an amax below eps is raised to eps")
    case(f, "rec.current.huge-scale", ["REC-CS-SCALE"], [("recipe", "current")],
         inp("fp32", (4, 8), values=["0x1p-140", "0", "-0x1p-145", "0x1p-149"]), TW,
         "a tiny amax makes fp8_max/amax overflow to Inf, replaced by FLT_MAX")

with open(OUT + "/recipes-delayed.yaml", "w") as f:
    header(f, "delayed-scaling")
    variants = [
        ("max", "0", "fused", "1024"), ("most_recent", "0", "fused", "1024"), ("max", "1", "fused", "1024"),
        ("max", "0", "unfused", "4"), ("max", "0", "fused", "4"), ("most_recent", "2", "unfused", "16"),
    ]
    for algo, margin, roll, hist in variants:
        for role in ["input", "grad_output"]:
            for dt in ["fp32", "bf16"]:
                rules = ["REC-DS-STATE", "REC-DS-QUANT", "REC-DS-RECORD", "REC-DS-SCALE", "REC-DS-HYBRID",
                         "REC-DS-ROLL-UNFUSED" if roll == "unfused" else "REC-DS-ROLL-FUSED", "REC-VARIANTS"]
                case(f, "rec.delayed.%s.m%s.%s.h%s.%s.%s" % (algo, margin, roll, hist, role, dt), rules,
                     [("recipe", "delayed"), ("role", role), ("algo", algo), ("margin", margin), ("roll", roll),
                      ("history", hist)],
                     inp(dt, (6, 8, 16), "normal: {mean: 0, std: 50}", inject=[("random", "1000")]),
                     TW + ["scales", "history"])
    # steps whose amax is zero: the fused update skips the roll, the unfused one does not
    zstep = ["0"] * 8 + ["3", "-7", "0.5", "100", "-0.25", "9", "1", "2"]
    for roll in ["fused", "unfused"]:
        case(f, "rec.delayed.zero-steps.%s" % roll,
             ["REC-DS-ROLL-FUSED" if roll == "fused" else "REC-DS-ROLL-UNFUSED", "REC-DS-SCALE"],
             [("recipe", "delayed"), ("roll", roll), ("history", "4")],
             inp("fp32", (6, 2, 4), values=zstep), TW + ["scales", "history"],
             "every other step is all zeros")
    for name, inj, vals in SPECIALS:
        case(f, "rec.delayed.special-%s" % name, ["REC-DS-SCALE", "REC-DS-RECORD", "REC-AMAX"],
             [("recipe", "delayed"), ("history", "3")],
             inp("fp32", (4, 8, 8), values=vals, inject=inj or ()), TW + ["scales", "history"],
             "a %s amax in the history: the scale keeps its previous value" % name)

with open(OUT + "/recipes-mxfp8.yaml", "w") as f:
    header(f, "MXFP8")
    for dt in ["fp32", "bf16"]:
        for shape in [(32, 64), (33, 70), (64, 128)]:
            for rule in ["te", "ocp"]:
                for elem in ["e4m3", "e5m2"]:
                    rules = ["REC-MX-SCALE-OCP" if rule == "ocp" else "REC-MX-SCALE", "REC-MX-E8M0-UP",
                             "REC-MX-MULT", "REC-MX-LAYOUT",
                             "REC-MX-ELEM-OCP" if rule == "ocp" else "REC-MX-ELEM", "REC-LAYOUT"]
                    if shape[0] % 32 or shape[1] % 32:
                        rules.append("REC-MX-PARTIAL")
                    case(f, "rec.mxfp8.%s.%dx%d.%s.%s" % (dt, shape[0], shape[1], rule, elem), rules,
                         [("recipe", "mxfp8"), ("rule", rule), ("elem", elem)],
                         inp(dt, shape, "normal: {mean: 0, std: 100}", inject=[("random", "921.6"), ("random", "-0")]), BLK)
    # amax significands above 1.75, where te and ocp differ
    sig = ["921.6", "-1.8", "3.5", "0.25", "1.76", "-0.875", "7.5", "1"]
    for rule in ["te", "ocp"]:
        case(f, "rec.mxfp8.amax-significand.%s" % rule,
             ["REC-MX-SCALE-OCP" if rule == "ocp" else "REC-MX-SCALE", "REC-MX-ELEM-OCP" if rule == "ocp" else "REC-MX-ELEM"],
             [("recipe", "mxfp8"), ("rule", rule)], inp("fp32", (32, 32), values=sig), BLK,
             "block amax 921.6 = 1.8 * 2^9: te rounds the scale up, ocp floors it and clamps")
    for name, inj, vals in SPECIALS:
        for rule in ["te", "ocp"]:
            case(f, "rec.mxfp8.special-%s.%s" % (name, rule), ["REC-MX-SCALE", "REC-MX-E8M0-UP", "REC-MX-ELEM"],
                 [("recipe", "mxfp8"), ("rule", rule)],
                 inp("bf16", (32, 64), values=vals, inject=inj or ()) if vals else
                 inp("bf16", (32, 64), "normal: {mean: 0, std: 10}", inject=inj), BLK)

with open(OUT + "/recipes-block.yaml", "w") as f:
    header(f, "block-scaling (DeepSeek-style FP8)")
    for dt in ["fp32", "bf16"]:
        for shape in [(128, 256), (130, 300)]:
            for tile in ["1d", "2d"]:
                for pow2 in ["1", "0"]:
                    rules = ["REC-BLK-SCALE", "REC-BLK-2D" if tile == "2d" else "REC-BLK-1D",
                             "REC-BLK-2D-COL" if tile == "2d" else "REC-BLK-1D-COL", "REC-LAYOUT", "REC-ELEM"]
                    if shape[0] % 128 or shape[1] % 128:
                        rules.append("REC-BLK-PARTIAL")
                    case(f, "rec.block.%s.%dx%d.%s.pow2-%s" % (dt, shape[0], shape[1], tile, pow2), rules,
                         [("recipe", "block"), ("tile", tile), ("pow2", pow2)],
                         inp(dt, shape, "normal: {mean: 0, std: 30}", inject=[("random", "465")]), BLK)
    for name, inj, vals in SPECIALS:
        for tile in ["1d", "2d"]:
            case(f, "rec.block.special-%s.%s" % (name, tile), ["REC-BLK-SCALE", "REC-BLK-INF", "REC-AMAX"],
                 [("recipe", "block"), ("tile", tile)],
                 inp("bf16", (128, 128), values=vals, inject=inj or ()) if vals else
                 inp("bf16", (128, 128), "normal: {mean: 0, std: 3}", inject=inj), BLK)
    case(f, "rec.block.grad-e5m2", ["REC-BLK-SCALE", "REC-DS-HYBRID", "REC-ROLE"],
         [("recipe", "block"), ("role", "grad_output")], inp("fp32", (128, 128), "normal: {mean: 0, std: 30}"), BLK)

with open(OUT + "/recipes-nvfp4.yaml", "w") as f:
    header(f, "NVFP4")
    for dt in ["fp32", "bf16"]:
        for shape in [(32, 64), (33, 70)]:
            for tile in ["1d", "2d"]:
                for variant in ["te", "torchao"]:
                    rules = ["REC-NV-GLOBAL", "REC-NV-SCALE", "REC-NV-ELEM", "REC-NV-LAYOUT",
                             "REC-NV-2D" if tile == "2d" else "REC-NV-1D",
                             "REC-NV-2D-COL" if tile == "2d" else "REC-NV-1D-COL"]
                    if variant == "torchao":
                        rules.append("REC-NV-TORCHAO")
                    if shape[0] % 16 or shape[1] % 16:
                        rules.append("REC-NV-PARTIAL")
                    case(f, "rec.nvfp4.%s.%dx%d.%s.%s" % (dt, shape[0], shape[1], tile, variant), rules,
                         [("recipe", "nvfp4"), ("tile", tile), ("variant", variant), ("rht", "0"), ("sr", "0")],
                         inp(dt, shape, "normal: {mean: 0, std: 2}", inject=[("random", "6.5"), ("random", "-0")]), NV)
    for shape in [(32, 64), (48, 32)]:
        case(f, "rec.nvfp4.rht.%dx%d" % shape, ["REC-NV-RHT", "REC-NV-RHT-SIGNS", "REC-NV-1D-COL"],
             [("recipe", "nvfp4"), ("rht", "1"), ("sr", "0")], inp("bf16", shape, "normal: {mean: 0, std: 2}"), NV,
             "Hadamard transform of the columnwise copy, BF16 rounding of its output")
    for s in ["1", "2"]:
        case(f, "rec.nvfp4.sr.seed%s" % s, ["REC-NV-SR"],
             [("recipe", "nvfp4"), ("role", "grad_output"), ("sr", "1"), ("rht", "0"), ("seed", s), ("offset", "3")],
             inp("bf16", (32, 64), "uniform: {lo: -6, hi: 6}"), NV, "stochastic rounding with Philox bits")
    case(f, "rec.nvfp4.grad-default", ["REC-DEFAULTS", "REC-NV-SR", "REC-NV-RHT"],
         [("recipe", "nvfp4"), ("role", "grad_output")], inp("bf16", (32, 32), "normal: {mean: 0, std: 1}"), NV,
         "gradient defaults: Hadamard transform and stochastic rounding on")
    for name, inj, vals in SPECIALS:
        for variant in ["te", "torchao"]:
            rules = ["REC-NV-GLOBAL", "REC-NV-SCALE", "REC-AMAX"]
            if name == "zero" and variant == "torchao":
                rules.append("REC-NV-TORCHAO-ZERO")
            case(f, "rec.nvfp4.special-%s.%s" % (name, variant), rules,
                 [("recipe", "nvfp4"), ("variant", variant), ("rht", "0"), ("sr", "0")],
                 inp("fp32", (16, 32), values=vals, inject=inj or ()) if vals else
                 inp("fp32", (16, 32), "normal: {mean: 0, std: 1}", inject=inj), NV)

# Dequantization of every recipe, variant and direction [REC-DEQ-*]: the quantize outputs
# plus row_dequant and col_dequant (a plugin's through its dequantize slot).
DEQ = ["row_dequant", "col_dequant"]
with open(OUT + "/recipes-dequant.yaml", "w") as f:
    header(f, "dequantization")
    spec_inj = [("random", "nan"), ("random", "inf"), ("random", "-inf"), ("random", "-0"), ("random", "1e30")]
    for role in ["input", "grad_output"]:
        case(f, "rec.dequant.current.%s" % role, ["REC-DEQ-TW", "REC-DEQ-SHAPE", "REC-TW-LAYOUT"],
             [("recipe", "current"), ("role", role)],
             inp("fp32", (33, 70), "normal: {mean: 0, std: 300}", inject=spec_inj), TW + DEQ)
    case(f, "rec.dequant.delayed.sequence", ["REC-DEQ-TW", "REC-DEQ-SHAPE", "REC-DS-QUANT"],
         [("recipe", "delayed"), ("history", "4")],
         inp("bf16", (3, 33, 70), "normal: {mean: 0, std: 50}", inject=[("random", "1000")]),
         TW + ["scales", "history"] + DEQ, "the dequantization of the last step")
    for rule in ["te", "ocp"]:
        for elem in ["e4m3", "e5m2"]:
            case(f, "rec.dequant.mxfp8.%s.%s" % (rule, elem), ["REC-DEQ-MX", "REC-DEQ-SHAPE", "REC-MX-LAYOUT"],
                 [("recipe", "mxfp8"), ("rule", rule), ("elem", elem)],
                 inp("bf16", (33, 70), "normal: {mean: 0, std: 100}", inject=spec_inj), BLK + DEQ,
                 "a block with an Inf: te scale 0xFE, ocp scale 0xFF (NaN)")
    for tile in ["1d", "2d"]:
        case(f, "rec.dequant.block.%s" % tile, ["REC-DEQ-BLK", "REC-DEQ-SHAPE",
                                               "REC-BLK-2D-COL" if tile == "2d" else "REC-BLK-1D-COL"],
             [("recipe", "block"), ("tile", tile)],
             inp("fp32", (130, 300), "normal: {mean: 0, std: 30}", inject=spec_inj), BLK + DEQ)
    for tile in ["1d", "2d"]:
        for variant in ["te", "torchao"]:
            case(f, "rec.dequant.nvfp4.%s.%s" % (tile, variant),
                 ["REC-DEQ-NV-TORCHAO" if variant == "torchao" else "REC-DEQ-NV", "REC-DEQ-SHAPE",
                  "REC-NV-2D-COL" if tile == "2d" else "REC-NV-1D-COL"],
                 [("recipe", "nvfp4"), ("tile", tile), ("variant", variant), ("rht", "0"), ("sr", "0")],
                 inp("fp32", (33, 70), "normal: {mean: 0, std: 2}", inject=[("random", "6.5"), ("random", "-0"), ("random", "nan")]),
                 NV + DEQ)
    case(f, "rec.dequant.nvfp4.rht", ["REC-DEQ-SHAPE", "REC-DEQ-NV", "REC-NV-RHT"],
         [("recipe", "nvfp4"), ("rht", "1"), ("sr", "0")], inp("bf16", (48, 64), "normal: {mean: 0, std: 2}"),
         NV + DEQ, "an RHT columnwise copy dequantizes to the transformed values")
    case(f, "rec.dequant.nvfp4.grad-default", ["REC-DEQ-NV", "REC-NV-SR"],
         [("recipe", "nvfp4"), ("role", "grad_output")], inp("bf16", (32, 64), "normal: {mean: 0, std: 1}"),
         NV + DEQ, "gradient defaults: Hadamard transform and stochastic rounding on")
    case(f, "rec.dequant.nvfp4.zero.torchao", ["REC-DEQ-NV-TORCHAO", "REC-NV-TORCHAO-ZERO"],
         [("recipe", "nvfp4"), ("variant", "torchao"), ("rht", "0"), ("sr", "0")],
         inp("fp32", (16, 32), values=["0"]), NV + DEQ, "pts = 0: block scales 2^-6, codes 0")
    # torchao's axiswise recipes [REC-DEQ-AX]: per-row scales both ways (rowwise); the
    # weight's tensorwise columnwise copy and the input's high-precision one
    # (rowwise_with_gw_hp)
    AX = ["row_data", "row_scale", "col_data", "col_scale"]
    for recipe, role in [("rowwise", "input"), ("rowwise_with_gw_hp", "weight"),
                         ("rowwise_with_gw_hp", "input")]:
        case(f, "rec.dequant.%s.%s" % (recipe, role),
             ["REC-DEQ-AX", "REC-DEQ-SHAPE", "REC-AX-LAYOUT"] +
             (["REC-AX-GWHP"] if recipe != "rowwise" else []),
             [("recipe", recipe), ("role", role)],
             inp("bf16", (33, 70), "normal: {mean: 0, std: 30}",
                 inject=[("random", "nan"), ("random", "inf"), ("random", "-0"), ("random", "1e30")]),
             AX + DEQ)
