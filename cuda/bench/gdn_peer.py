#!/usr/bin/env python3
"""gdn_peer.py: the peer of cuda/bench/gdn_bench.cu -- FLA's chunked Gated DeltaNet forward
(flash-linear-attention / fla-core 0.6.0, `chunk_gated_delta_rule`, its own Triton kernels:
the FlashQLA dispatch is switched off with FLA_FLASH_QLA=0) on the same shapes and input
distributions: bf16 q, k (l2-normalized when generated), v ~ N(0,1); g = logsigmoid(N(0,1))/16
and beta = sigmoid(N(0,1)) in FP32; d_k = d_v = 128, 16 q/k heads, no initial state.

For each shape the output o and the final state are first checked against an FP32
token-by-token recurrence in torch (relative RMS ||x - x_ref|| / ||x_ref||), then the forward
is timed with CUDA events: 3 warm-up calls, the median of 15. Usage: gdn_peer.py
"""
import os
import sys

os.environ.setdefault("FLA_FLASH_QLA", "0")

import torch  # noqa: E402

SHAPES = [(8, 1024, 32), (4, 8192, 64), (1, 32768, 64)]  # sequences, tokens each, value heads
H, D = 16, 128


def inputs(n, t, hv, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32)

    q = torch.nn.functional.normalize(randn(n, t, H, D), dim=-1, eps=1e-6).bfloat16()
    k = torch.nn.functional.normalize(randn(n, t, H, D), dim=-1, eps=1e-6).bfloat16()
    v = randn(n, t, hv, D).bfloat16()
    g = torch.nn.functional.logsigmoid(randn(n, t, hv)) / 16
    beta = torch.sigmoid(randn(n, t, hv))
    return q, k, v, g, beta


@torch.no_grad()
def recurrence(q, k, v, g, beta, scale):
    """o_t and the final state of [GDN-RECURRENCE], FP32, state [N, HV, K, V]."""
    n, t, h, d = q.shape
    hv, dv = v.shape[2], v.shape[3]
    grp = hv // h
    qv = q.float().repeat_interleave(grp, dim=2) * scale
    kv = k.float().repeat_interleave(grp, dim=2)
    vf = v.float()
    s = torch.zeros(n, hv, d, dv, device=q.device, dtype=torch.float32)
    o = torch.empty(n, t, hv, dv, device=q.device, dtype=torch.float32)
    a = torch.exp(g)
    for i in range(t):
        s.mul_(a[:, i, :, None, None])
        kt = kv[:, i]
        pred = torch.einsum("nhk,nhkv->nhv", kt, s)
        u = beta[:, i, :, None] * (vf[:, i] - pred)
        s.add_(kt[..., :, None] * u[..., None, :])
        o[:, i] = torch.einsum("nhk,nhkv->nhv", qv[:, i], s)
    return o, s


def rrms(x, ref):
    x, ref = x.double(), ref.double()
    return (torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref)).item()


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    print(f"gdn_peer on {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    scale = D**-0.5
    for n, t, hv in SHAPES:
        q, k, v, g, beta = inputs(n, t, hv, 1234 + hv + t)

        def run():
            return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, output_final_state=True)

        o, ht = run()
        o_ref, ht_ref = recurrence(q, k, v, g, beta, scale)
        eo, eh = rrms(o.float(), o_ref), rrms(ht.float(), ht_ref)
        del o_ref, ht_ref
        times = []
        for it in range(18):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            run()
            e1.record()
            e1.synchronize()
            if it >= 3:
                times.append(e0.elapsed_time(e1))
        times.sort()
        print(
            f"peer fla chunk_gated_delta_rule hv{hv} {n} x {t}  {times[len(times) // 2]:.3f} ms"
            f"  o rrms {eo:.5f}  ht rrms {eh:.5f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
