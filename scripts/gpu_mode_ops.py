"""The torch ops a decode step launches on the GPU's code path, listed on a CPU without a GPU.

impl/ takes other branches on a GPU than under the Triton interpreter (bf16 operands, tile sizes, the
router's and the alignment's forms: every `impl.interpreted()` test), so counting launches on the CPU
(scripts/launch_count.py) shows the interpreter's path. Here `impl.interpreted()` answers False while
the kernels still run on the interpreter, every tensor a bench_layer helper puts on "cuda" is made on
the CPU, and the step runs in bf16: the host code is the GPU's, the Triton kernels' numbers are not
(the interpreter's bf16 dot is wrong; nothing here is checked). Listed per repo call site: the ops that
launch a copy on the GPU (copy_, clone, _to_copy: dtype conversions and layout copies) and cat / stack,
with their inputs' shapes, dtypes and contiguity, and the step's launch count (impl.host_sync.count_launches:
Triton kernels and the torch ops that launch a device kernel). Tiny geometry (the call sites and counts do
not depend on sizes).

    PYTHONPATH=. python3 scripts/gpu_mode_ops.py [--kinds kda+sparse,dsa-full+sparse] [--impl pkg.mod:obj]
"""
from __future__ import annotations

import argparse
import collections
import os
import traceback

os.environ["TRITON_INTERPRET"] = "1"      # the kernels still need the interpreter: there is no GPU

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import impl  # noqa: E402

impl.interpreted = lambda: False          # before any impl module reads it (module-level tile choices)
import impl.kda  # noqa: E402

impl.kda.interpreted = lambda: False      # imported by name there

COPIES = ("copy_", "clone", "_to_copy", "cat", "stack")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class OnCPU(TorchFunctionMode):
    """device="cuda" (and .to("cuda")) made on the CPU: the bench helpers build their tensors on "cuda"."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        args = tuple("cpu" if isinstance(a, str) and a.startswith("cuda") else a for a in args)
        return func(*args, **kwargs)


class CopySites(TorchDispatchMode):
    """Counts COPIES ops by (op, inputs, the last three repo frames), the interpreter's own copies left out."""

    def __init__(self):
        super().__init__()
        self.sites = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in COPIES:
            frames = [f for f in traceback.extract_stack() if f.filename.startswith(ROOT)
                      and "scripts" + os.sep not in f.filename]
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            # the interpreter moves kernel arguments as raw bytes (uint8): not the host code's copies
            if frames and not any(t.dtype == torch.uint8 for t in tensors):
                where = " <- ".join(f"{f.filename[len(ROOT):]}:{f.lineno} {f.name}" for f in reversed(frames[-3:]))
                inputs = ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}{'' if t.is_contiguous() else ' strided'}"
                                   for t in tensors)
                self.sites[(name, inputs, where)] += 1
        return func(*args, **(kwargs or {}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kinds", default="kda+dense,kda+sparse,dsa-full+sparse,dsa-shared+sparse")
    p.add_argument("--impl", default="triton", help="the implementation (a candidate: pkg.mod:obj)")
    args = p.parse_args(argv)
    from gate.bench_layer import _context, _streams, handoff, random_layer
    from gate.cost_layers import layer_predictions
    from gate.cost_measure import nvfp4_only
    from impl import registry
    from impl.graph import simulated_capture
    from impl.model import decoder_layer
    from oracle.config import Geometry
    g, dtype = Geometry.preset("tiny"), torch.bfloat16
    gen = torch.Generator().manual_seed(7)
    from impl.host_sync import count_launches
    ours = registry.get(args.impl)
    with OnCPU():
        for kind, pr in layer_predictions(g, 1, batch=1, context=64, hbm_bw=4.27e12).items():
            if kind not in args.kinds.split(","):
                continue
            lw = nvfp4_only(random_layer(g, pr["layer"], "cpu", dtype))
            cache, _ = _context(lw, None, g, 1, 64, gen, dtype)
            x1 = _streams(1, 1, g, gen, dtype)
            m1 = torch.ones(1, 1, dtype=torch.bool)
            prev, _ = handoff(None, g, x1, m1, None)
            decoder_layer(lw, g, x1, m1, cache, prev, ours)             # the eager warm-up, as a capture has
            mode = CopySites()
            with simulated_capture(), count_launches() as n, mode:
                decoder_layer(lw, g, x1, m1, cache, prev, ours)
            print(f"=== {kind} ({args.impl}): {n['triton'] + n['torch']} launches (triton {n['triton']}, torch "
                  f"{n['torch']}), {sum(mode.sites.values())} of them copy / cat ops, in one decode step (the GPU's "
                  f"host path)")
            for (name, inputs, where), n in mode.sites.items():
                print(f"  {n} x {name}({inputs})\n      {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
