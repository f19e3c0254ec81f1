#!/usr/bin/env python3
"""attn_peer.py: the peers of cuda/bench/attn_bench on the same shapes -- torch's
scaled_dot_product_attention with the cuDNN and the flash back ends (sdpa_kernel context),
BF16, causal. Each back end's output and gradients are first checked against a float32
math-back-end result on the same inputs (relative RMS printed); a back end that refuses a
shape is labelled so. TFLOP/s count the causal half: forward 2 B H S^2 (d_qk + d_v) / 2,
backward 2.5 times that (as attn_bench). Needs a GPU and torch >= 2.5."""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, B, S, H, Hkv, d_qk, d_v
    ("b2 h16 s4096 d128 causal", 2, 4096, 16, 16, 128, 128),
    ("b2 h16 s4096 192/128 causal", 2, 4096, 16, 16, 192, 128),
    ("b1 h128 s4096 192/128 causal", 1, 4096, 128, 128, 192, 128),
    ("b1 h128/1 s4096 absorbed 576/512 causal", 1, 4096, 128, 1, 576, 512),
]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def rel_rms(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def sdpa(q, k, v, gqa):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


def timed(fn, reps=3):
    fn()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(reps):
        fn()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / reps


def run_shape(name, b, s, h, hkv, d, dv):
    g = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda hh, dd: torch.randn(b, hh, s, dd, device="cuda", generator=g).bfloat16()
    q, k, v, do = mk(h, d), mk(hkv, d), mk(hkv, dv), mk(h, dv)
    gqa = hkv != h
    flops = 2.0 * b * h * s * s / 2 * (d + dv)
    # the float32 math reference (GQA by repeating the kv heads)
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    rep = h // hkv
    with sdpa_kernel([SDPBackend.MATH]):
        of = F.scaled_dot_product_attention(qf, kf.repeat_interleave(rep, 1),
                                            vf.repeat_interleave(rep, 1), is_causal=True)
    of.backward(do.float())
    ref = (of.detach(), qf.grad, kf.grad, vf.grad)
    del of, qf, kf, vf
    for bname, be in BACKENDS:
        qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
        try:
            with sdpa_kernel([be]):
                o = sdpa(qb, kb, vb, gqa)
                o.backward(do)
        except Exception as e:  # a back end that refuses the shape
            msg = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
            print(f"peer     {name:40s} {bname:6s} refuses: {msg}", flush=True)
            continue
        errs = [rel_rms(x, r) for x, r in zip((o, qb.grad, kb.grad, vb.grad), ref)]
        ok = all(e < 2e-2 for e in errs)
        print(f"check    {name:40s} {bname:6s} rel. RMS vs fp32 math: o {errs[0]:.2e} "
              f"dq {errs[1]:.2e} dk {errs[2]:.2e} dv {errs[3]:.2e}  {'ok' if ok else 'FAIL'}",
              flush=True)
        with sdpa_kernel([be]):
            tf = timed(lambda: sdpa(qb, kb, vb, gqa))
            o = sdpa(qb, kb, vb, gqa)

            def bwd():
                qb.grad = kb.grad = vb.grad = None
                o.backward(do, retain_graph=True)

            tb = timed(bwd)
        print(f"time     {name:40s} {bname:6s} fwd {tf:8.3f} ms {flops / tf / 1e9:6.1f} TFLOP/s  "
              f"bwd {tb:8.3f} ms {2.5 * flops / tb / 1e9:6.1f} TFLOP/s", flush=True)
        del o, qb, kb, vb
    torch.cuda.empty_cache()


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    t0 = time.time()
    for sh in SHAPES:
        run_shape(*sh)
        print(f"         ({time.time() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
