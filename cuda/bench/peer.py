"""peer.py: the PyTorch peer of cuda/bench/bench.cu — the same quantizations of an
8192x16384 BF16 tensor written as plain PyTorch, timed eager and under torch.compile with
CUDA events (warm-up, median, rotated inputs), printed as a table of the same rows so
that the two outputs give the ratio. Run it on the GPU beside bench: python3 peer.py."""
import statistics
import sys

import torch

F8 = torch.float8_e4m3fn
FMAX = 448.0
ROT, WARM, RUNS = 4, 3, 20


def current_row(x):
    amax = x.abs().amax().float()
    s = torch.where(amax > 0, FMAX / amax, torch.ones_like(amax))
    return (x.float() * s).clamp(-FMAX, FMAX).to(F8), 1.0 / s


def current_both(x):
    amax = x.abs().amax().float()
    s = torch.where(amax > 0, FMAX / amax, torch.ones_like(amax))
    q = (x.float() * s).clamp(-FMAX, FMAX).to(F8)
    return q, q.t().contiguous(), 1.0 / s


def mx_blocks(xb, dim):
    amax = xb.abs().amax(dim, keepdim=True).float() / FMAX
    e = torch.ceil(torch.log2(amax.clamp(min=2.0**-127)))
    q = (xb.float() * torch.exp2(-e)).clamp(-FMAX, FMAX).to(F8)
    return q, (e + 127).to(torch.uint8)


def mx_row(x):
    m, k = x.shape
    q, e = mx_blocks(x.view(m, k // 32, 32), 2)
    return q.view(m, k), e


def mx_col(x):
    m, k = x.shape
    q, e = mx_blocks(x.view(m // 32, 32, k), 1)
    return q.view(m, k), e


def blk_rows(x):
    m, k = x.shape
    xb = x.view(m, k // 128, 128).float()
    amax = xb.abs().amax(2, keepdim=True)
    s = torch.where(amax > 0, FMAX / amax, torch.ones_like(amax))
    s = torch.exp2(torch.floor(torch.log2(s)))
    return (xb * s).clamp(-FMAX, FMAX).to(F8).view(m, k), 1.0 / s


def blk_col(x):
    return blk_rows(x.t())


def blk_2d(x):
    m, k = x.shape
    xb = x.view(m // 128, 128, k // 128, 128).float()
    amax = xb.abs().amax((1, 3), keepdim=True)
    s = torch.where(amax > 0, FMAX / amax, torch.ones_like(amax))
    s = torch.exp2(torch.floor(torch.log2(s)))
    q = (xb * s).clamp(-FMAX, FMAX).to(F8).view(m, k)
    return q, q.t().contiguous(), 1.0 / s


def delayed_row(x):
    return (x.float() * 0.5).clamp(-FMAX, FMAX).to(F8), x.abs().amax().float()


E2M1_EDGES = None


def nvfp4_row(x):
    """NVFP4 1x16 rowwise in plain PyTorch (a speed peer: bucketized magnitudes, not the
    exact tie rule of spec/recipes.md), codes packed two per byte."""
    global E2M1_EDGES
    if E2M1_EDGES is None:
        E2M1_EDGES = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=x.device)
    m, k = x.shape
    xb = x.view(m, k // 16, 16).float()
    s_enc = 2688.0 / x.abs().amax().float()
    sb = (xb.abs().amax(2, keepdim=True) * (s_enc / 6.0)).clamp(max=FMAX).to(F8)
    v = xb * (s_enc / sb.float())
    c = torch.bucketize(v.abs(), E2M1_EDGES).to(torch.uint8) | ((v < 0).to(torch.uint8) << 3)
    c = c.view(m, k // 2, 2)
    return c[..., 0] | (c[..., 1] << 4), sb


def median_us(fn, xs):
    for i in range(WARM):
        fn(xs[i % ROT])
    t = []
    for i in range(RUNS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(xs[i % ROT])
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(t)


def main():
    m, k = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (8192, 16384)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROT)]
    n = m * k
    rows = [("mxfp8 rowwise", mx_row, 3.0 + 1 / 32), ("mxfp8 colwise", mx_col, 3.0 + 1 / 32),
            ("current rowwise", current_row, 5.0),
            ("block 1x128 rowwise", blk_rows, 3.0 + 4 / 128),
            ("block 1x128 col(T)", blk_col, 3.0 + 4 / 128),
            ("block 128x128 row+col(T)", blk_2d, 4.0),
            ("current row+col(T)", current_both, 6.0),
            ("delayed rowwise (amax+cast)", delayed_row, 3.0),
            ("nvfp4 1x16 rowwise", nvfp4_row, 4.5 + 1 / 16)]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'kernel':28s} {'eager us':>10s} {'compile us':>10s} {'compile GB/s':>12s}")
    for name, fn, bpe in rows:
        eager = median_us(fn, xs)
        comp = median_us(torch.compile(fn), xs)
        print(f"{name:28s} {eager:10.1f} {comp:10.1f} {bpe * n / comp / 1e3:12.1f}", flush=True)


if __name__ == "__main__":
    main()
