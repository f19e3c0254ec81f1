"""interop_fla.py WORKDIR: computes the GDN case that `qspec gen` wrote into WORKDIR with
FLA's naive recurrent reference (fla.ops.gated_delta_rule.naive, PyTorch on the CPU) and
autograd, and writes its outputs beside the inputs for `qspec verify`.

The naive function takes q, k, v, beta, g of one head count, in float32, and no l2norm, so
this script adds what FLA's fused kernels add around it, written from their definitions:
FLA's l2norm (fla/modules/norm/l2norm.py, a Triton kernel: y = x / sqrt(sum x^2 + 1e-6),
stored in the input's dtype), grouped value heads (q/k head i // (hv / h); autograd sums
the gradients of a repeated head) and packed sequences (each sequence alone from its h0).
o, dq, dk, dv are rounded to the dtype the manifest's `rounding` names; ht, dg, dbeta, dh0
stay float32."""
import json
import sys

import numpy as np
import torch
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

FLOAT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load(work, spec):
    a = np.load(f"{work}/{spec['file']}")
    if spec["dtype"] == "bf16":
        return torch.from_numpy(a.view("<i2").reshape(a.shape).copy()).view(torch.bfloat16)
    return torch.from_numpy(a)


def save(work, spec, t):
    dt = spec["dtype"]
    if dt == "bf16":
        a = t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy()
        a = a.view("<u2").view(np.dtype([("bfloat16", "<u2")]))
    else:
        a = t.detach().to(FLOAT[dt]).contiguous().numpy()
    assert list(a.shape) == spec["shape"], (spec["name"], a.shape, spec["shape"])
    np.save(f"{work}/{spec['file']}", a)


class RoundTo(torch.autograd.Function):
    """Rounds to a dtype and back; the backward is the identity (spec/attention.md
    [GDN-L2NORM] treats the rounding of q^ and k^ so, as FLA's kernels do)."""

    @staticmethod
    def forward(ctx, x, dtype):
        return x.to(dtype).to(torch.float32)

    @staticmethod
    def backward(ctx, g):
        return g, None


def l2norm(x, dtype):
    y = x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    return RoundTo.apply(y, dtype)


def gdn(m, x):
    p = m["params"]
    dt = FLOAT[m["inputs"][0]["dtype"]]
    q, k, v = (x[n].float().requires_grad_(True) for n in "qkv")
    g, beta = x["g"].float().requires_grad_(True), x["beta"].float().requires_grad_(True)
    varlen = p.get("seqlens") is not None
    if varlen:  # [t, h, d] -> [1, t, h, d]
        qq, kk, vv, gg, bb = (a.unsqueeze(0) for a in (q, k, v, g, beta))
        lens = p["seqlens"]
    else:
        qq, kk, vv, gg, bb = q, k, v, g, beta
        lens = None
    b = len(lens) if varlen else q.shape[0]
    h, hv, dk, dv = q.shape[-2], v.shape[-2], q.shape[-1], v.shape[-1]
    h0 = x["h0"].float() if "h0" in x else torch.zeros(b, hv, dk, dv)
    h0 = h0.clone().requires_grad_(True)
    if p["l2norm"]:
        qq, kk = l2norm(qq, dt), l2norm(kk, dt)
    rep = hv // h
    qq, kk = qq.repeat_interleave(rep, dim=-2), kk.repeat_interleave(rep, dim=-2)
    scale = float(p["scale"])
    if varlen:
        outs, hts, start = [], [], 0
        for n, ln in enumerate(lens):
            sl = slice(start, start + ln)
            o_n, ht_n = naive_recurrent_gated_delta_rule(
                qq[:, sl], kk[:, sl], vv[:, sl], bb[:, sl], gg[:, sl], scale=scale,
                initial_state=h0[n:n + 1], output_final_state=True)
            outs.append(o_n)
            hts.append(ht_n)
            start += ln
        o, ht = torch.cat(outs, dim=1)[0], torch.cat(hts, dim=0)
    else:
        o, ht = naive_recurrent_gated_delta_rule(qq, kk, vv, bb, gg, scale=scale,
                                                 initial_state=h0, output_final_state=True)
    out = {"o": o.to(dt), "ht": ht}
    if "dout" in x:
        do = x["dout"].float()
        dht = x["dht"].float() if "dht" in x else torch.zeros_like(ht)
        # the gradient of sum(o * do) + sum(ht * dht), o taken before its rounding
        torch.autograd.backward([o, ht], [do, dht])
        out.update({"dq": q.grad.to(dt), "dk": k.grad.to(dt), "dv": v.grad.to(dt),
                    "dg": g.grad, "dbeta": beta.grad, "dh0": h0.grad})
    return out


def stats(work):
    """One line: per output, the largest |y - ref| / (atol + rtol |ref|) under the case's
    tolerance (<= 1 agrees), and the elements the finer atol 1e-5, rtol 1e-3 would reject;
    the reference's outputs are those of `qspec gen --expected`."""
    with open(f"{work}/manifest.json") as f:
        m = json.load(f)
    parts = []
    for spec in m["outputs"]:
        tol = spec["compare"]["allclose"]
        y = load(work, spec).double()
        ref = load(f"{work}/expected", spec).double()
        err = (y - ref).abs()
        worst = (err / (tol["atol"] + tol["rtol"] * ref.abs())).max().item()
        old = int((err > 1e-5 + 1e-3 * ref.abs()).sum())
        parts.append(f"{spec['name']} {worst:.3f}" + (f" ({old} over 1e-5/1e-3)" if old else ""))
    print(f"{m['case']}: " + ", ".join(parts))


def main(work):
    with open(f"{work}/manifest.json") as f:
        m = json.load(f)
    if m["op"] != "gdn":
        raise NotImplementedError(m["op"])
    x = {spec["name"]: load(work, spec) for spec in m["inputs"]}
    outs = gdn(m, x)
    for spec in m["outputs"]:
        save(work, spec, outs[spec["name"]])


if __name__ == "__main__":
    if sys.argv[1] == "--stats":
        stats(sys.argv[2])
    else:
        main(sys.argv[1])
