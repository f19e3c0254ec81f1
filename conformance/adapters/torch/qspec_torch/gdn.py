"""The Gated DeltaNet op of a qspec program in torch (spec/attention.md, the token
recurrence; spec/recompute.md's gdn op): q = k = v = the activation [rows, heads * d],
q and k l2-normalised (x / sqrt(sum x^2 + 1e-6)) and rounded to the activation dtype, the
backward treating that rounding as the identity [GDN-L2NORM]; state h [K, V] per head in
FP32 from zero; per token h *= exp(g), u = beta (v - h^T k), h += k u^T, o = h^T (scale q)
with scale d^-1/2; o rounded to the activation dtype once. Autograd gives dx, dg, dbeta."""

import torch


def _round_through(a, dtype):
    """a rounded to dtype in the forward, the identity in the backward."""
    return a + (a.to(dtype).to(torch.float32) - a).detach()


def gdn(x, g, beta, heads):
    rows, dim = x.shape
    d = dim // heads
    xf = x.to(torch.float32).reshape(rows, heads, d)
    gg = g.reshape(rows, heads)
    bb = beta.reshape(rows, heads)
    qk = xf / torch.sqrt((xf * xf).sum(-1, keepdim=True) + 1e-6)
    qk = _round_through(qk, x.dtype)
    scale = d**-0.5
    h = torch.zeros(heads, d, d, dtype=torch.float32, device=x.device)
    outs = []
    for t in range(rows):
        h = h * torch.exp(gg[t]).reshape(heads, 1, 1)
        k = qk[t]
        u = bb[t].reshape(heads, 1) * (xf[t] - torch.einsum("hkv,hk->hv", h, k))
        h = h + k.unsqueeze(-1) * u.unsqueeze(-2)
        outs.append(torch.einsum("hkv,hk->hv", h, scale * qk[t]))
    return torch.stack(outs).reshape(rows, dim).to(x.dtype)
