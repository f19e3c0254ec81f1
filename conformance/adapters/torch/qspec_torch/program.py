"""A variant's program (spec/cases.md [CASE-GEN-PROG]) as torch modules, run forward and
backward. The innermost region decides each linear: an enabled autocast makes it torchao's
Float8Linear under the region's recipe, an island or a disabled (or no) region a bf16
nn.Linear; a checkpoint is torch.utils.checkpoint with use_reentrant=False; a gelu op is
torch.nn.functional.gelu(x, approximate="tanh") in the activation's dtype (never quantized:
precision "island" in an island, else "high", as spec/recompute.md [RCP-GELU-OP] traces it);
a gdn op is gdn.gdn. The trace holds what the adapter observes in eager mode: each op's
forward (a forward during the backward is a recompute) and backward (when the gradient of
its input is ready), with the precision and recipe its region gave it."""

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .gdn import gdn
from .manifest import NotSupported, statement
from .recipes import torchao_recipe


class Tracer:
    """The observable trace: records {phase, op, precision, recipe}; off under compile."""

    def __init__(self, on):
        self.on = on
        self.backward = False
        self.records = []

    def forward(self, op, precision, recipe):
        if self.on:
            phase = "recompute" if self.backward else "forward"
            self.records.append(
                {"phase": phase, "op": op, "precision": precision, "recipe": recipe}
            )

    def on_grad(self, x, op, precision, recipe):
        """Records op's backward when the gradient of its input x is ready."""
        if self.on and x.requires_grad and not self.backward:  # a recompute's input is
            # not on the backward's path, but torch calls hooks on it too

            def hook(grad):
                self.records.append(
                    {"phase": "backward", "op": op, "precision": precision, "recipe": recipe}
                )

            x.register_hook(hook)


class LinearOp(nn.Module):
    def __init__(self, name, w, region, tracer, device):
        super().__init__()
        self.name, self.tracer = name, tracer
        self.precision, self.recipe = region[0], None
        self.lin = nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype, device=device)
        with torch.no_grad():
            self.lin.weight.copy_(w.to(device))
        if region[0] == "quantized":
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            self.recipe = region[1]["name"]
            name = torchao_recipe(region[1])
            if name != "tensorwise" and torch.device(device).type == "cpu":
                raise NotSupported(
                    f"torch {torch.__version__}'s CPU _scaled_mm has per-tensor scales only; "
                    f"torchao's {name} recipe needs a GPU"
                )
            config = Float8LinearConfig.from_recipe_name(name)
            convert_to_float8_training(self, config=config)

    def forward(self, x):
        self.tracer.forward(self.name, self.precision, self.recipe)
        self.tracer.on_grad(x, self.name, self.precision, self.recipe)
        return self.lin(x)

    def grad(self):
        return self.lin.weight.grad


class GdnOp(nn.Module):
    def __init__(self, name, g, beta, heads, region, tracer, device):
        super().__init__()
        self.name, self.tracer, self.heads = name, tracer, heads
        self.precision = "island" if region[0] == "island" else "high"
        self.g = nn.Parameter(g.to(device=device, dtype=torch.float32).clone())
        self.beta = nn.Parameter(beta.to(device=device, dtype=torch.float32).clone())

    def forward(self, x):
        self.tracer.forward(self.name, self.precision, None)
        self.tracer.on_grad(x, self.name, self.precision, None)
        return gdn(x, self.g, self.beta, self.heads)

    def grad(self):
        return torch.stack([self.g.grad.reshape(-1), self.beta.grad.reshape(-1)])


class GeluOp(nn.Module):
    """The tanh-form GELU, elementwise, no parameters; torch computes it in FP32 from the
    bf16 value and rounds the result to bf16, as the spec does, with its own tanh."""

    def __init__(self, name, region, tracer):
        super().__init__()
        self.name, self.tracer = name, tracer
        self.precision = "island" if region[0] == "island" else "high"

    def forward(self, x):
        self.tracer.forward(self.name, self.precision, None)
        self.tracer.on_grad(x, self.name, self.precision, None)
        return F.gelu(x, approximate="tanh")


class Seq(nn.Module):
    def __init__(self, mods):
        super().__init__()
        self.body = nn.ModuleList(mods)

    def forward(self, x):
        for m in self.body:
            x = m(x)
        return x


class Checkpoint(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=False)


def _input(inputs, name):
    if name not in inputs:
        raise ValueError(f"the program names input {name}, which gen did not write")
    return inputs[name]


def _build(stmts, region, inputs, tracer, device, ops, out):
    mods = []
    for st in stmts:
        kind, f = statement(st)
        if kind == "autocast":
            if f["calibrating"]:
                raise NotSupported("torchao has no calibration region (amax recorded, no cast)")
            if f["group"]:
                raise NotSupported("the adapter runs one process: no amax reduction group")
            inner = ("quantized", f["recipe"]) if f["enabled"] else ("high", None)
            mods.append(Seq(_build(f["body"], inner, inputs, tracer, device, ops, out)))
        elif kind == "island":
            inner = ("island", None)
            mods.append(Seq(_build(f["body"], inner, inputs, tracer, device, ops, out)))
        elif kind == "checkpoint":
            body = Seq(_build(f["body"], region, inputs, tracer, device, ops, out))
            mods.append(Checkpoint(body))
        elif kind == "linear":
            op = LinearOp(f["name"], _input(inputs, f["w"]), region, tracer, device)
            ops[f["name"]] = op
            mods.append(op)
        elif kind == "gelu":
            mods.append(GeluOp(f["name"], region, tracer))  # no parameters: not in ops
        elif kind == "gdn":
            if region[0] == "quantized":
                raise NotSupported("a gdn op inside an enabled autocast is rejected by the spec")
            g, beta = _input(inputs, f["g"]), _input(inputs, f["beta"])
            op = GdnOp(f["name"], g, beta, f["heads"], region, tracer, device)
            ops[f["name"]] = op
            mods.append(op)
        elif kind == "backward":
            out["dy"] = f["dy"]
        elif kind == "calibrate":
            raise NotSupported("torchao has no calibration region (amax recorded, no cast)")
        elif kind == "mla":
            raise NotSupported("the adapter has no MLA block")
        else:
            raise NotSupported(f"the adapter has no {kind} statement")
    return mods


def build_program(stmts, inputs, tracer, device):
    """(module, ops by name, output-gradient input name or None) for a variant's program."""
    ops, out = {}, {"dy": None}
    model = Seq(_build(stmts, ("high", None), inputs, tracer, device, ops, out))
    return model, ops, out["dy"]


def run_variant(variant, inputs, device, compile_mode):
    """Runs one variant; returns ({output name: tensor}, trace records or None)."""
    tracer = Tracer(on=not compile_mode)
    model, ops, dy_name = build_program(variant["program"], inputs, tracer, device)
    x0 = _input(inputs, variant["x"])
    if x0.dtype != torch.bfloat16:
        raise NotSupported(f"the adapter runs bf16 activations; the program input is {x0.dtype}")
    fn = torch.compile(model) if compile_mode else model
    backward = variant["backward"] and dy_name is not None
    for _ in range(variant["steps"]):  # stateless recipes: every step is the same
        tracer.backward, tracer.records = False, []
        for p in model.parameters():
            p.grad = None
        x = x0.to(device).clone().requires_grad_(backward)
        y = fn(x)
        if backward:
            tracer.backward = True
            y.backward(_input(inputs, dy_name).to(device=device, dtype=y.dtype))
    name = variant["name"]
    res = {f"{name}/y": y}
    if backward:
        res[f"{name}/dx"] = x.grad
        for op_name, op in ops.items():
            res[f"{name}/grad.{op_name}"] = op.grad()
    return res, (tracer.records if tracer.on else None)
