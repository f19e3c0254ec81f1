"""peer.py: the peers of cuda/bench/bench.cu and of gemm_bench's block-scaled GEMMs on the GPU.

Quantizers (python3 peer.py [--check DIR] [M K]): each quantization of an 8192x16384 BF16
tensor written the way a strong PyTorch user would (timed eager and under torch.compile)
and, where they run on Hopper, torchao 0.18's Triton kernels
(torchao.prototype.blockwise_fp8_training.kernels). Before a peer is timed, its output on
the input that `bench --dump DIR` wrote is compared byte for byte with qspec's outputs in
DIR: "same" means every code and scale byte is equal; otherwise the count of differing
bytes is printed and the peer is labelled as computing something else. CUDA events,
warm-up, median, four rotated inputs larger than L2.

GEMMs (python3 peer.py --gemm): torchao's Triton blockwise GEMM (1x128 activations x 128x128
weights, BF16 out) at 8192^3 and the DeepSeek-V3 shapes of gemm_bench --block, its output
first compared with an FP32 matmul of the dequantized operands, and torch's own
blockwise _scaled_mm (cuBLASLt) on the same operands where this torch has it."""
import os
import statistics
import sys
import time

import torch

F8 = torch.float8_e4m3fn
FMAX = 448.0
ROT, WARM, RUNS = 4, 3, 20
INV448 = None  # fl(1/448) as an FP32 tensor (set on the device in main)


# ---------------------------------------------------------------- formulations
def _mx_blocks(xb, dim):
    """MXFP8, TE's rule on finite input: E8M0 = the exponent bits of fl(amax * fl(1/448)),
    plus one when its fraction is nonzero (not at 0xFE, not for the smallest subnormals),
    multiplier = the FP32 with bits (254 - e) << 23 (1 for e = 0), multiply, cast."""
    amax = xb.abs().amax(dim, keepdim=True)
    v = amax * INV448
    bits = v.view(torch.int32)
    ex = (bits >> 23) & 0xFF
    fr = bits & 0x7FFFFF
    up = (fr > 0) & (ex != 0xFE) & ~((ex == 0) & (fr <= 0x400000))
    e = ex + up.to(torch.int32)
    mult = torch.where(e == 0, 1.0, ((254 - e) << 23).view(torch.float32))
    q = (xb * mult).clamp(-FMAX, FMAX).to(F8)
    return q, e.to(torch.uint8)


def mx_row(x):
    m, k = x.shape
    q, e = _mx_blocks(x.float().view(m, k // 32, 32), 2)
    return q.view(m, k), e.view(m, k // 32)


def mx_col(x):
    m, k = x.shape
    q, e = _mx_blocks(x.float().view(m // 32, 32, k), 1)
    return q.view(m, k), e.view(m // 32, k)


def mx_both(x):
    r, rs = mx_row(x)
    c, cs = mx_col(x)
    return r, rs, c, cs


def _scale(amax, pow2, eps=0.0):
    """[REC-CS-SCALE] on finite amaxes: 448 / max(amax, eps), 1 for a zero amax, the power of
    two at or below it by clearing the fraction bits."""
    a = amax.clamp(min=eps) if eps > 0 else amax
    s = torch.where(a > 0, FMAX / a, torch.ones_like(a))
    if pow2:
        s = (s.view(torch.int32) & -8388608).view(torch.float32)
    return s


def current_row(x):
    amax = x.abs().amax().float()
    s = _scale(amax, 0)
    return (x.float() * s).clamp(-FMAX, FMAX).to(F8), amax


def current_both(x):
    amax = x.abs().amax().float()
    s = _scale(amax, 0)
    q = (x.float() * s).clamp(-FMAX, FMAX).to(F8)
    return q, q.t().contiguous(), amax


def delayed_row(x):
    return (x.float() * 0.5).clamp(-FMAX, FMAX).to(F8), x.abs().amax().float()


def _blk_rows(x, pow2, eps):
    m, k = x.shape
    xb = x.float().view(m, k // 128, 128)
    s = _scale(xb.abs().amax(2, keepdim=True), pow2, eps)
    return (xb * s).clamp(-FMAX, FMAX).to(F8).view(m, k), (1.0 / s).view(m, k // 128)


def blk_rows_pow2(x):
    return _blk_rows(x, 1, 0.0)


def blk_col_pow2(x):
    return _blk_rows(x.t(), 1, 0.0)


def blk_both_pow2(x):
    r, rs = _blk_rows(x, 1, 0.0)
    c, cs = _blk_rows(x.t(), 1, 0.0)
    return r, rs, c, cs


def blk_rows_plain(x):
    return _blk_rows(x, 0, 1e-12)


def blk_2d_plain(x):
    m, k = x.shape
    xb = x.float().view(m // 128, 128, k // 128, 128)
    s = _scale(xb.abs().amax((1, 3), keepdim=True), 0, 1e-12)
    q = (xb * s).clamp(-FMAX, FMAX).to(F8).view(m, k)
    return q, (1.0 / s).view(m // 128, k // 128), q.t().contiguous()


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


# ---------------------------------------------------------------- torchao's kernels
def torchao_kernels():
    try:
        from torchao.prototype.blockwise_fp8_training import kernels as tk
    except Exception as e:  # noqa: BLE001 - report any import failure
        print(f"torchao blockwise kernels: cannot import ({type(e).__name__}: {e})")
        return None
    return tk


def limit_autotune(fn, keep):
    """Restricts a Triton autotuner's configs to those whose kwargs match keep (a list of
    dicts, with num_warps/num_stages), so that a short run compiles few of them."""
    at = getattr(fn, "configs", None)
    if at is None or not keep:
        return
    sel = []
    for c in at:
        for k in keep:
            if all(c.kwargs.get(n, getattr(c, n, None)) == v for n, v in k.items()):
                sel.append(c)
                break
    if sel:
        fn.configs = sel


# ---------------------------------------------------------------- timing and checking
def median_us(fn, xs):
    for i in range(WARM):
        fn(xs[i % ROT])
    torch.cuda.synchronize()
    t = []
    for i in range(RUNS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(xs[i % ROT])
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(t)


def load(d, name, dtype, shape):
    t = torch.frombuffer(bytearray(open(os.path.join(d, name), "rb").read()), dtype=torch.uint8)
    return t.view(dtype).reshape(shape).cuda()


def diff_bytes(got, want):
    """Bytes of want that differ from the same-index region of got (got may be larger: the
    peer ran on the check input tiled to the timing shape)."""
    if want.dim() == 0:
        got = got.reshape(())
    else:
        got = got[tuple(slice(0, e) for e in want.shape)]
    g = got.contiguous().reshape(-1).view(torch.uint8)
    w = want.contiguous().reshape(-1).view(torch.uint8)
    if g.numel() != w.numel():
        return -1
    return int((g != w).sum().item())


def check(outs, refs):
    """outs: the peer's tensors; refs: qspec's (same logical shapes). Returns the number
    of differing bytes over all of them and the byte count."""
    bad = tot = 0
    for o, r in zip(outs, refs):
        if r is None:
            continue
        d = diff_bytes(o, r)
        if d < 0:
            return -1, 0
        bad += d
        tot += r.numel() * r.element_size()
    return bad, tot


def quantizers(argv):
    global INV448
    d = None
    if "--check" in argv:
        i = argv.index("--check")
        d = argv[i + 1]
        del argv[i : i + 2]
    quick = "--quick" in argv
    if quick:
        argv.remove("--quick")
    m, k = (int(argv[0]), int(argv[1])) if len(argv) > 1 else (8192, 16384)
    INV448 = torch.tensor(1.0 / 448.0, dtype=torch.float32, device="cuda")
    refs = {}
    cm, ck = 1024, 4096
    if d:
        xc = load(d, "x.bf16", torch.bfloat16, (cm, ck))
        u8 = torch.uint8
        refs = {
            "mx_row": [load(d, "mx_row.u8", F8, (cm, ck)), load(d, "mx_row_s.u8", u8, (cm, ck // 32))],
            "mx_col": [load(d, "mx_col.u8", F8, (cm, ck)), load(d, "mx_col_s.u8", u8, (cm // 32, ck))],
            "cur_row": [load(d, "cur_row.u8", F8, (cm, ck)), load(d, "amax.u32", torch.float32, ())],
            "cur_col": [load(d, "cur_col.u8", F8, (ck, cm))],
            "del_row": [load(d, "del_row.u8", F8, (cm, ck))],
        }
        for p in ("b1p", "b1"):
            refs[p + "_row"] = [load(d, p + "_row.u8", F8, (cm, ck)),
                                load(d, p + "_row_s.f32", torch.float32, (cm, ck // 128))]
            refs[p + "_col"] = [load(d, p + "_col.u8", F8, (ck, cm)),
                                load(d, p + "_col_s.f32", torch.float32, (ck, cm // 128))]
        refs["b2_row"] = [load(d, "b2_row.u8", F8, (cm, ck)),
                          load(d, "b2_row_s.f32", torch.float32, (cm // 128, ck // 128))]
        refs["b2_col"] = [load(d, "b2_col.u8", F8, (ck, cm))]
    R = refs.get
    # (name, fn, bytes per element moved, compile it?, qspec outputs to compare (in order))
    rows = [
        ("mxfp8 rowwise", mx_row, 3.0 + 1 / 32, True, lambda: R("mx_row")),
        ("mxfp8 colwise", mx_col, 3.0 + 1 / 32, True, lambda: R("mx_col")),
        ("mxfp8 row+col (one function)", mx_both, 4.0 + 2 / 32, True,
         lambda: R("mx_row") and R("mx_row") + R("mx_col")),
        ("block 1x128 rowwise, pow2", blk_rows_pow2, 3.0 + 4 / 128, True, lambda: R("b1p_row")),
        ("block 1x128 col(T), pow2", blk_col_pow2, 3.0 + 4 / 128, True, lambda: R("b1p_col")),
        ("block 1x128 row+col(T), pow2", blk_both_pow2, 4.0 + 8 / 128, True,
         lambda: R("b1p_row") and R("b1p_row") + R("b1p_col")),
        ("block 1x128 rowwise, plain", blk_rows_plain, 3.0 + 4 / 128, True, lambda: R("b1_row")),
        ("block 128x128 row+col(T), plain", blk_2d_plain, 4.0, True,
         lambda: R("b2_row") and R("b2_row") + R("b2_col")),
        ("current rowwise", current_row, 5.0, True, lambda: R("cur_row")),
        ("current row+col(T)", current_both, 6.0, True,
         lambda: R("cur_row") and [R("cur_row")[0], R("cur_col")[0], R("cur_row")[1]]),
        ("delayed rowwise (amax+cast)", delayed_row, 3.0, True, lambda: R("del_row") and R("del_row") + [None]),
        ("nvfp4 1x16 rowwise (other rounding)", nvfp4_row, 4.5 + 1 / 16, True, lambda: None),
    ]
    tk = torchao_kernels()
    if tk is not None:
        if quick:  # a short run: a few of the autotuner's configs
            keep = [{"NUM_GROUPS": g, "num_warps": w, "num_stages": s}
                    for g in (16, 64, 128) for w in (4, 8) for s in (2,)]
            for f in (tk.triton_fp8_blockwise_act_quant_lhs_kernel,
                      tk.triton_fp8_blockwise_act_quant_transposed_lhs_kernel):
                limit_autotune(f, keep)
        lhs = tk.triton_fp8_blockwise_act_quant_lhs
        tlhs = tk.triton_fp8_blockwise_act_quant_transposed_lhs
        wq = tk.triton_fp8_blockwise_weight_quant_rhs
        twq = tk.triton_fp8_blockwise_weight_quant_transposed_rhs
        rows += [
            ("torchao act_quant_lhs (1x128)", lambda x: lhs(x), 3.0 + 4 / 128, False, lambda: R("b1_row")),
            ("torchao act_quant_transposed_lhs", lambda x: tlhs(x), 3.0 + 4 / 128, False, lambda: R("b1_col")),
            ("torchao lhs + transposed_lhs", lambda x: (lhs(x), tlhs(x)), 4.0 + 8 / 128, False,
             lambda: R("b1_row") and R("b1_row") + R("b1_col")),
            ("torchao weight_quant_rhs (128x128)", lambda x: wq(x), 3.0, False,
             lambda: R("b2_row")),
            ("torchao weight rhs + transposed_rhs", lambda x: (wq(x)[0], twq(x)[0]), 4.0, False,
             lambda: R("b2_row") and [R("b2_row")[0], R("b2_col")[0]]),
        ]
    first = ["mxfp8 rowwise", "torchao act_quant_lhs (1x128)", "block 1x128 rowwise, pow2",
             "torchao act_quant_transposed_lhs", "mxfp8 row+col (one function)",
             "torchao lhs + transposed_lhs", "block 1x128 row+col(T), pow2", "current rowwise"]
    rows.sort(key=lambda r: first.index(r[0]) if r[0] in first else len(first))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; check {cm}x{ck} "
          f"against {d}; time {m}x{k}", flush=True)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(ROT)]
    if d:  # the check input, tiled to the timing shape: every block and the amax the same
        assert m % cm == 0 and k % ck == 0
        xs[0] = xc.repeat(m // cm, k // ck).contiguous()
    n = m * k
    print(f"| {'peer':38s} | {'eager us':>9s} | {'compile us':>10s} | {'GB/s':>7s} | output against qspec |")
    print(f"|{'-' * 40}|{'-' * 11}|{'-' * 12}|{'-' * 9}|----------------------|", flush=True)
    for name, fn, bpe, comp, ref in rows:
        t0 = time.time()
        try:
            f = torch.compile(fn, dynamic=False) if comp else fn
            verdict = "not checked"
            r = ref() if d else None
            if r is not None:
                out = f(xs[0])
                out = list(out) if isinstance(out, (tuple, list)) else [out]
                flat = []
                for o in out:
                    flat += list(o) if isinstance(o, (tuple, list)) else [o]
                bad, tot = check(flat, r)
                verdict = ("same bytes" if bad == 0 else
                           f"DIFFERS: {bad} of {tot} bytes" if bad > 0 else "shape differs")
            eager = median_us(fn, xs) if comp else float("nan")
            t = median_us(f, xs)
            print(f"| {name:38s} | {eager:9.1f} | {t:10.1f} | {bpe * n / t / 1e3:7.1f} | {verdict} "
                  f"({time.time() - t0:.0f} s) |", flush=True)
        except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
            print(f"| {name:38s} | failed: {type(e).__name__}: {str(e)[:160]} |", flush=True)
        torch.cuda.synchronize()


SHAPES = [(8192, 8192, 8192), (4096, 24576, 1536), (8192, 24576, 1536), (4096, 18432, 7168),
          (8192, 18432, 7168), (4096, 7168, 18432), (8192, 7168, 18432), (4096, 2048, 7168),
          (8192, 2048, 7168), (4096, 7168, 2048), (8192, 7168, 2048)]


def gemm_operands(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, device="cuda", generator=g) * 4).clamp(-448, 448).to(F8)
    b = (torch.randn(n, k, device="cuda", generator=g) * 4).clamp(-448, 448).to(F8)
    a_s = (torch.rand(k // 128, m, device="cuda", generator=g) + 0.5).t()  # (M, K/128) col-major
    b_s = (torch.rand(n // 128, k // 128, device="cuda", generator=g) + 0.5).t()  # (K/128, N/128)
    return a, b, a_s, b_s


def gemm(argv):
    tk = torchao_kernels()
    if tk is None:
        return
    quick = "--quick" in argv
    kern = tk.triton_fp8_gemm_1x128_128x128_kernel
    all_cfgs = list(kern.configs)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| M    | N     | K     | torchao Triton ms | TFLOP/s | config | torch blockwise _scaled_mm ms | TFLOP/s |")
    print("|------|-------|-------|-------------------|---------|--------|-------------------------------|---------|",
          flush=True)
    best = None
    for idx, (m, n, k) in enumerate(SHAPES):
        a, b, a_s, b_s = gemm_operands(m, n, k)
        bt = b.t()  # (K, N) column-major
        if quick and best is not None:
            kern.configs = [best]
        else:
            kern.configs = all_cfgs
        f = lambda: tk.triton_fp8_gemm_1x128_128x128(a, bt, a_s, b_s, 128, torch.bfloat16)  # noqa: E731
        t0 = time.time()
        y = f()
        torch.cuda.synchronize()
        if best is None:
            best = getattr(kern, "best_config", None) or kern.configs[0]
        if idx == 0:  # the output check, at the first shape
            sa = a_s.repeat_interleave(128, 1)
            sb = b_s.t().repeat_interleave(128, 0).repeat_interleave(128, 1)  # (N, K)
            torch.backends.cuda.matmul.allow_tf32 = False
            ref = (a.float() * sa) @ (b.float() * sb).t()
            err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            print(f"torchao Triton GEMM vs FP32 matmul of the dequantized operands: max |diff| / "
                  f"max |ref| = {err:.3g} (BF16 out: 2^-9 = {2**-9:.3g})", flush=True)
            del ref, sa, sb
        xs = [None] * ROT
        t = median_us(lambda _x: f(), xs)
        flop = 2.0 * m * n * k
        cfg = getattr(kern, "best_config", None)
        cs = (f"{cfg.kwargs.get('BLOCK_SIZE_M')}x{cfg.kwargs.get('BLOCK_SIZE_N')} w{cfg.num_warps}"
              if cfg is not None else "?")
        sm = "n/a"
        smt = ""
        try:
            g = lambda: tk.blockwise_scaled_mm(a, bt, a_s, tk.BLOCKWISE_1X128_SCALING_TYPE, b_s,  # noqa: E731
                                               tk.BLOCKWISE_128X128_SCALING_TYPE, torch.bfloat16)
            y2 = g()
            if idx == 0:
                e2 = ((y2.float() - y.float()).abs().max() / y.float().abs().max()).item()
                print(f"torch blockwise _scaled_mm vs torchao Triton: max |diff| / max = {e2:.3g}")
            ts = median_us(lambda _x: g(), xs)
            sm, smt = f"{ts / 1000:.3f}", f"{flop / (ts * 1e-6) / 1e12:.1f}"
        except Exception as e:  # noqa: BLE001
            sm = f"failed: {type(e).__name__}: {str(e)[:80]}"
        print(f"| {m:4d} | {n:5d} | {k:5d} | {t / 1000:17.3f} | {flop / (t * 1e-6) / 1e12:7.1f} | {cs} "
              f"| {sm} | {smt} | ({time.time() - t0:.0f} s)", flush=True)
        del a, b, a_s, b_s, bt, y


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--gemm" in args:
        args.remove("--gemm")
        gemm(args)
    else:
        quantizers(args)
