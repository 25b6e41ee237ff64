"""Launch variants of the split mHC coefficient kernels, timed side by side on the GPU (issue 14 step 3).

Each variant sets impl.mhc's launch constants (_BR_PARTIAL: token rows per partial program, _BKS_MAX: the
chunk's sub-block, _FINISH_WARPS), then times fused_coefficients_collapse at the full geometry replayed
from a CUDA graph, --repeats times, beside the one-program kernel (impl.candidates.mhc_one_program);
outputs are compared with the landed default's. A measurement, not a gate: a variant that wins is landed
only after `bash scripts/gpu_issue14_mhc.sh` passes on it.

    PYTHONPATH=. python3 scripts/mhc_variants.py [--tokens 1,32,4096] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

VARIANTS = {"default": {}, "finish_1warp": {"_FINISH_WARPS": 1}, "finish_2warps": {"_FINISH_WARPS": 2},
            "partial_8rows": {"_BR_PARTIAL": 8}, "bks_64": {"_BKS_MAX": 64},
            "partial_8rows_finish_1warp": {"_BR_PARTIAL": 8, "_FINISH_WARPS": 1}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="1,32,4096")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    from gate.bench_mhc import _weights
    from gate.benchlib import do_bench, graph
    from impl import mhc
    from impl.candidates.mhc_one_program import MHC as peer
    from oracle.config import Geometry
    g = Geometry.preset("full")
    w = _weights(g, "cuda")
    saved = {k: getattr(mhc, k) for v in VARIANTS.values() for k in v}
    print("tokens  " + "  ".join(f"{n:>26s}" for n in ["one_program", *VARIANTS]) + "   (us, graph replay, median [min-max])")
    for t in (int(v) for v in args.tokens.split(",")):
        X = torch.randn(1, t, g.hc_mult, g.hidden_size, device="cuda", dtype=torch.bfloat16)
        ref = mhc.fused_coefficients_collapse(w, X)
        cells = [f"{statistics.median(ts):8.1f} [{min(ts):.1f}-{max(ts):.1f}]" for ts in
                 [[do_bench(graph(lambda: peer.fused_coefficients_collapse(w, X))) * 1e3 for _ in range(args.repeats)]]]
        for name, consts in VARIANTS.items():
            for k, v in saved.items():
                setattr(mhc, k, consts.get(k, v))
            out = mhc.fused_coefficients_collapse(w, X)
            diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(out, ref))
            r = graph(lambda: mhc.fused_coefficients_collapse(w, X))
            ts = [do_bench(r) * 1e3 for _ in range(args.repeats)]
            cells.append(f"{statistics.median(ts):8.1f} [{min(ts):.1f}-{max(ts):.1f}]" + ("" if diff == 0 else f" d{diff:.0e}"))
        for k, v in saved.items():
            setattr(mhc, k, v)
        print(f"{t:6d}  " + "  ".join(f"{c:>26s}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
