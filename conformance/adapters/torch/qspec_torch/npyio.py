"""Reading and writing qspec's .npy files (spec/cases.md [CASE-NPY-DESCR]): fp32 as '<f4',
fp16 as '<f2', bf16 as the structured one-field array [('bfloat16', '<u2')]."""

import os

import numpy as np
import torch

BF16_DESCR = np.dtype([("bfloat16", "<u2")])


def load(path, dtype):
    """The tensor of a .npy file gen wrote, as a CPU torch tensor of qspec dtype `dtype`."""
    a = np.load(path)
    if dtype == "bf16":
        bits = np.ascontiguousarray(a["bfloat16"]).view("<i2")
        return torch.from_numpy(bits.copy()).view(torch.bfloat16)
    if dtype == "fp32":
        return torch.from_numpy(np.ascontiguousarray(a, dtype="<f4").copy())
    if dtype == "fp16":
        return torch.from_numpy(np.ascontiguousarray(a, dtype="<f2").copy())
    raise ValueError(f"{path}: dtype {dtype} is not an input the adapter reads")


def to_numpy(t, dtype):
    """t as the numpy array qspec reads for dtype (bf16 structured)."""
    t = t.detach().cpu().contiguous()
    if dtype == "bf16":
        bits = t.to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
        return bits.view(BF16_DESCR)
    if dtype == "fp32":
        return t.to(torch.float32).numpy().astype("<f4", copy=False)
    if dtype == "fp16":
        return t.to(torch.float16).numpy().astype("<f2", copy=False)
    raise ValueError(f"dtype {dtype} is not an output the adapter writes")


def save(path, t, dtype, shape):
    """Writes t as dtype; the shape must be the manifest's."""
    a = to_numpy(t, dtype)
    if list(a.shape) != list(shape):
        raise ValueError(f"{path}: shape {list(a.shape)}, the manifest says {list(shape)}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp.npy"
    np.save(tmp, a)
    os.replace(tmp, path)
