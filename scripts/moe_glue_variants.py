"""Issue 14 step 13: the MoE decode glue's kernels timed alone at the full geometry (E = 288, top-8, D = 4096,
n_group 1), each variant from a CUDA graph (triton.testing.do_bench_cudagraph: GPU time, no host launch
cost), `--repeats` times (median, min, max). Every variant's outputs are checked bitwise equal to the
default's first (a variant that differs is not timed).

  route  impl.moe.route_with at N tokens: ours (impl.moe._router_tile), step 12's 16-token tile
         (impl.candidates.moe_decode_step12.router_tile), and one token a program at 1, 2, 4 and 8 warps
  align  impl.moe.align at P pairs: the pad slots written first (ours) or found by a last pass (step 12)

    PYTHONPATH=. python3 scripts/moe_glue_variants.py [--json FILE] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton.testing

from impl import moe as imoe
from impl.candidates import moe_decode_step12
from oracle.types import MoEWeights

E, K_TOP, D = 288, 8, 4096


def _timed(fn, repeats):
    ts = [triton.testing.do_bench_cudagraph(fn, rep=50) * 1e3 for _ in range(repeats)]
    return dict(us_median=statistics.median(ts), us_min=min(ts), us_max=max(ts))


def _report(rows, head, name, same, t):
    rows.append(dict(head, variant=name, same=same, **(t or {})))
    print(f"{' '.join(f'{k}={v}' for k, v in head.items()):24s} {name:22s} same={same} "
          + (f"{t['us_median']:8.2f} us [{t['us_min']:.2f}-{t['us_max']:.2f}]" if t else "NOT TIMED"), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    router = (torch.randn(E, D, device="cuda", generator=g) * D ** -0.5).bfloat16()
    bias = torch.randn(E, device="cuda", generator=g) * 0.01
    # expert weights the router never reads: zero-stride views of the right shapes (expert width 1)
    zero = torch.zeros((), device="cuda", dtype=torch.bfloat16)
    w = MoEWeights(router, bias, zero.expand(E, 2, D), zero.expand(E, D, 1), None, None, None, top_k=K_TOP,
                   n_group=1, topk_group=1)
    rows = []
    for N in (1, 8, 32, 128, 4096):
        x = torch.randn(N, D, device="cuda", generator=g).bfloat16()
        ref = imoe.route(w, x)
        variants = {"ours": None, "step12 (16 tokens)": moe_decode_step12.router_tile}
        for nw in (1, 2, 4, 8):
            variants[f"1 token, {nw} warps"] = lambda n, be, nw=nw: (1, nw)
        for name, tile in variants.items():
            fn = lambda tile=tile: imoe.route_with(w, x, tile=tile)
            got = fn()
            same = all(torch.equal(a, b) for a, b in zip(got, ref))
            _report(rows, dict(kernel="route", N=N), name, same, _timed(fn, args.repeats) if same else None)
    for N, k, e in ((1, 8, E), (8, 8, E), (1, 1, 1), (8, 1, 1)):
        ids = torch.rand(N, e, device="cuda", generator=g).argsort(-1)[:, :k].contiguous()
        ref = imoe.align(ids, e, 16)
        for name, fill in (("ours (fill first)", True), ("step12 (pad pass)", False)):
            fn = lambda fill=fill: imoe.align(ids, e, 16, fill)
            same = all(torch.equal(a, b) for a, b in zip(fn(), ref))
            _report(rows, dict(kernel="align", P=N * k, E=e), name, same, _timed(fn, args.repeats) if same else None)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
