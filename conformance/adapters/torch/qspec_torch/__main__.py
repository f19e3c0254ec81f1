"""python -m qspec_torch WORKDIR... [--results DIR] [--compile] [--device DEV]

Answers the program case `qspec gen` wrote into each WORKDIR (one process for all, so torch
is imported once): writes each variant's outputs
(V/y.npy, V/dx.npy, V/grad.OP.npy), its trace (V/trace.jsonl, eager only) and
framework.json into DIR (default WORKDIR; --results takes one WORKDIR); or, when it cannot express the
case, not_supported.txt with the reason. Exit status of one WORKDIR: 0 written, 3 not
supported, 2 bad input or a framework error; of several: the largest."""

import argparse
import json
import os
import sys

import torch

from . import npyio
from .manifest import NotSupported, load_manifest
from .program import run_variant

EXIT_UNSUPPORTED = 3


def versions():
    try:
        import torchao

        ao = torchao.__version__
    except ImportError:
        ao = "absent"
    return f"torch {torch.__version__}, torchao {ao}"


def answer(workdir, results, compile_mode, device):
    m = load_manifest(workdir)
    inputs = {s["name"]: npyio.load(os.path.join(workdir, s["file"]), s["dtype"]) for s in m["inputs"]}
    outputs, traces = {}, {}
    for v in m["variants"]:
        if not v["framework"]:
            continue  # the kit says no framework can express it, and checks it not
        try:
            res, trace = run_variant(v, inputs, device, compile_mode)
        except NotSupported as e:
            raise NotSupported(f"variant {v['name']}: {e}") from None
        for spec in v["outputs"]:
            if spec["name"] not in res:
                raise NotSupported(f"variant {v['name']}: no {spec['name']} to write")
            outputs[spec["name"]] = (res[spec["name"]], spec)
        traces[v["name"]] = trace
    for name, (t, spec) in outputs.items():
        npyio.save(os.path.join(results, spec["file"]), t, spec["dtype"], spec["shape"])
    for v, trace in traces.items():
        if trace is not None:
            with open(os.path.join(results, v, "trace.jsonl"), "w") as f:
                for rec in trace:
                    f.write(json.dumps(rec) + "\n")
    mode = "compiled" if compile_mode else "eager"
    with open(os.path.join(results, "framework.json"), "w") as f:
        json.dump({"name": f"{versions()}, {mode}, {device}", "claim": "tolerance"}, f)
        f.write("\n")


def answer_one(workdir, results, compile_mode, device):
    os.makedirs(results, exist_ok=True)
    try:
        answer(workdir, results, compile_mode, device)
    except NotSupported as e:
        with open(os.path.join(results, "not_supported.txt"), "w") as f:
            f.write(f"{e}\n")
        print(f"{workdir}: not supported: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print(f"qspec_torch: {workdir}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(f"{workdir}: written", file=sys.stderr)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qspec_torch", description=__doc__.split("\n")[0])
    ap.add_argument("workdir", nargs="+")
    ap.add_argument("--results", help="the folder to write into (default WORKDIR)")
    ap.add_argument("--compile", action="store_true", help="run each variant under torch.compile")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    if a.results and len(a.workdir) > 1:
        ap.error("--results takes one WORKDIR")
    rc = 0
    for w in a.workdir:
        rc = max(rc, answer_one(w, a.results or w, a.compile, a.device))
    return rc


if __name__ == "__main__":
    sys.exit(main())
