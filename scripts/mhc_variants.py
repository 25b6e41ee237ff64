"""Launch variants of the mHC kernels, timed side by side on the GPU (issue 14 steps 3, 5 and 6).

Each variant sets impl.mhc's launch constants (_BR_PARTIAL / _BR_FINISH / _BR_WRITE: token rows per
program of each kernel; _PARTIAL_WARPS / _FINISH_WARPS / _WRITE_WARPS; _BKS_MAX: the chunk's sub-block;
_PARTIAL_DOT / _DOT_PRECISION: the partial projection as a tl.dot), then times fused_coefficients_collapse
and write_back at the full geometry, each replayed from a CUDA graph, --repeats times, beside the
one-program kernel (impl.candidates.mhc_one_program), and splits the coefficient call into its kernels with
torch.profiler (device us per call). Outputs are compared with the landed default's ("d" = largest
difference), and three tokens' bits alone with their bits inside the call (mhc.batch's claim; a variant
that breaks it is marked). A measurement, not a gate: a variant that wins is landed only after the gate
passes on it (docs/optimization_log.md).

    PYTHONPATH=. python3 scripts/mhc_variants.py [--tokens 1,32,4096] [--repeats 3] [--only a,b] [--json F]
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

TF3 = {"_PARTIAL_DOT": True, "_DOT_PRECISION": "tf32x3"}
VARIANTS = {
    "default": {},
    "f4w": {"_FINISH_WARPS": 4},                              # step 3's finish
    "ieee32_64": {"_PARTIAL_DOT": True, "_BR_PARTIAL": 32, "_BKS_MAX": 64},
    "tf3_16_64": {**TF3, "_BR_PARTIAL": 16, "_BKS_MAX": 64},
    "tf3_16_256": {**TF3, "_BR_PARTIAL": 16, "_BKS_MAX": 256},
    "tf3_16_64_2w": {**TF3, "_BR_PARTIAL": 16, "_BKS_MAX": 64, "_PARTIAL_WARPS": 2},
    "tf3_32_64": {**TF3, "_BR_PARTIAL": 32, "_BKS_MAX": 64},
    "tf3_32_128": {**TF3, "_BR_PARTIAL": 32, "_BKS_MAX": 128},
    "tf3_64_64": {**TF3, "_BR_PARTIAL": 64, "_BKS_MAX": 64},
    "tf3_64_64_8w": {**TF3, "_BR_PARTIAL": 64, "_BKS_MAX": 64, "_PARTIAL_WARPS": 8},
    "tf3_128_32_8w": {**TF3, "_BR_PARTIAL": 128, "_BKS_MAX": 32, "_PARTIAL_WARPS": 8},
}
# earlier tables (bench_results/issue14_h200_2026-12-03/step5_variants/ and step6_dot_ieee/, variants.json)
# timed each broadcast-and-sum kernel's rows and warps, then the IEEE (FMA) tl.dot partial; this one the
# tensor-core tf32x3 partial
KNOBS = ("_BR_PARTIAL", "_BR_FINISH", "_BR_WRITE", "_PARTIAL_WARPS", "_FINISH_WARPS", "_WRITE_WARPS", "_BKS_MAX",
         "_PARTIAL_DOT", "_DOT_PRECISION")


def per_kernel(fn, calls: int = 10) -> dict:
    """{kernel name: device us per call} of fn (a graph replay) under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    from gate.benchlib import kernel_table
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {name: us for name, _, us in kernel_table(prof, calls)}


def _timed(fn, repeats: int) -> list:
    from gate.benchlib import do_bench
    return [do_bench(fn) * 1e3 for _ in range(repeats)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="1,32,4096")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default=None, help="comma-separated variant names (default: all)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mhc import _weights
    from gate.benchlib import graph, write_json
    from impl import mhc
    from impl.candidates.mhc_one_program import MHC as peer
    from oracle.config import Geometry
    g = Geometry.preset("full")
    w = _weights(g, "cuda")
    saved = {k: getattr(mhc, k) for k in KNOBS}
    chosen = {n: v for n, v in VARIANTS.items() if not args.only or n in args.only.split(",")}
    out = {"landed": saved, "variants": chosen, "rows": []}
    for t in (int(v) for v in args.tokens.split(",")):
        X = torch.randn(1, t, g.hc_mult, g.hidden_size, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(1, t, g.hidden_size, device="cuda", dtype=torch.bfloat16)
        ref = mhc.fused_coefficients_collapse(w, X)
        ref_back = mhc.write_back(ref[1], ref[2], X, y)
        ts = _timed(graph(lambda: peer.fused_coefficients_collapse(w, X)), args.repeats)
        print(f"\n=== {t} tokens (us per call, graph replay, median [min-max] of {args.repeats}); one-program "
              f"peer {statistics.median(ts):.1f} [{min(ts):.1f}-{max(ts):.1f}]", flush=True)
        out["rows"].append({"tokens": t, "variant": "one_program_peer", "coeff_us": ts})
        for name, consts in chosen.items():
            for k, v in saved.items():
                setattr(mhc, k, consts.get(k, v))
            got = mhc.fused_coefficients_collapse(w, X)
            back = mhc.write_back(ref[1], ref[2], X, y)
            diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip((*got, back), (*ref, ref_back)))
            # batch invariance (mhc.batch): a token's bits alone are its bits inside this call
            alone = [mhc.fused_coefficients_collapse(w, X[:, j:j + 1]) for j in sorted({0, t // 2, t - 1})]
            inv = all(torch.equal(a, b[:, j:j + 1]) for j, one in zip(sorted({0, t // 2, t - 1}), alone)
                      for a, b in zip(one, got))
            r = graph(lambda: mhc.fused_coefficients_collapse(w, X))
            tc = _timed(r, args.repeats)
            tw = _timed(graph(lambda: mhc.write_back(ref[1], ref[2], X, y)), args.repeats)
            ks = per_kernel(r)
            split = ", ".join(f"{n.replace('mhc_coeff_', '').replace('_fwd_kernel', '')} {us:.1f}"
                              for n, us in sorted(ks.items(), key=lambda kv: -kv[1]))
            print(f"  {name:>20s}  coeff {statistics.median(tc):8.1f} [{min(tc):.1f}-{max(tc):.1f}]  "
                  f"write_back {statistics.median(tw):7.1f}  ({split})" + ("" if inv else "  NOT BATCH-INVARIANT")
                  + ("" if diff == 0 else f"  d {diff:.1e}"),
                  flush=True)
            out["rows"].append({"tokens": t, "variant": name, "coeff_us": tc, "write_back_us": tw,
                                "kernels_us": ks, "max_diff_vs_landed": diff, "batch_invariant": inv})
        for k, v in saved.items():
            setattr(mhc, k, v)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
