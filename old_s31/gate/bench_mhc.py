"""`glmgate bench --mechanism mhc`: the mHC coefficients and collapse at a sublayer's entry, on the GPU.

Ours (impl.mhc.fused_coefficients_collapse: the projection split along N·D, then the coefficients and
the collapse) against the one-program-per-token kernel it replaced (impl.candidates.mhc_one_program),
both timed in the same process, alternating, --repeats times (median and spread of the do_bench
medians), for token counts from a decode step to a prefill: each call replayed from a CUDA graph (device
time, as a captured decode step runs it) and eager (host launches included; two launches against one). Beside them the bytes floor: fn (float32)
read once plus X read twice (bf16) plus the coefficients and u written, at the copy ceiling measured in
the same run. Before any time is taken, ours is gated on each shape's first 64 tokens against the float64
oracle (oracle/mhc.py fed the bf16-rounded streams) under the bench_gate contracts of
invariants/contracts.d/mhc.toml: a shape above its bound is refused (printed, not timed, exit 1). Every
output of ours is also compared with the peer's.

    glmgate bench --mechanism mhc [-- --tokens 1,8,32,256,4096 --repeats 5 --json out.json]
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from gate.benchlib import copy_ceiling, do_bench, graph, header, rel_l2, to_np, write_json


def _weights(g, device):
    from oracle.types import MHCWeights
    n, d = g.hc_mult, g.hidden_size
    gen = torch.Generator(device=device).manual_seed(3)
    m = (2 + n) * n
    return MHCWeights(fn=0.02 * torch.randn(m, n * d, generator=gen, device=device),
                      base=0.5 * torch.randn(m, generator=gen, device=device),
                      scale=1.0 + 0.5 * torch.randn(3, generator=gen, device=device),
                      hc_mult=n, sinkhorn_iters=g.hc_sinkhorn_iters, hc_eps=g.hc_eps, rms_eps=g.rms_norm_eps)


def floor_bytes(g, tokens: int) -> int:
    """fn read once (float32), X read twice (bf16: the projection and the collapse), pre/post/comb (float32)
    and u (bf16) written."""
    n, d = g.hc_mult, g.hidden_size
    return (2 + n) * n * n * d * 4 + 2 * tokens * n * d * 2 + tokens * ((2 + n) * n * 4 + d * 2)


def oracle_gate(w, X, got) -> dict:
    """rel-L2 of (pre, post, comb, collapse) on the first 64 tokens against the float64 oracle."""
    from oracle import mhc as om
    n = min(int(X.shape[1]), 64)
    x64 = to_np(X[:, :n])
    pre, post, comb = om.coefficients(w.map(to_np), x64)
    want = dict(pre=pre, post=post, comb=comb, collapse=om.collapse(pre, x64))
    return {q: rel_l2(to_np(g[:, :n]), ref) for (q, ref), g in zip(want.items(), got)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="glmgate bench --mechanism mhc", description=__doc__.split("\n")[0])
    p.add_argument("--geometry", default="full")
    p.add_argument("--tokens", default="1,8,32,256,4096", help="token counts (B = 1, S = tokens)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench mhc: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    from impl import mhc as ours
    from invariants.contracts import bench_bound
    from impl.candidates.mhc_one_program import MHC as peer
    from oracle.config import Geometry
    g = Geometry.preset(args.geometry)
    w = _weights(g, "cuda")
    ceiling = copy_ceiling()
    out = header({"geometry": args.geometry, "N": g.hc_mult, "D": g.hidden_size, "copy_ceiling_Bps": ceiling,
                  "repeats": args.repeats, "rows": []})
    print(f"{out['device']}; copy ceiling {ceiling / 1e12:.2f} TB/s; N={g.hc_mult} D={g.hidden_size}; "
          f"ours = split along N·D, peer = one program per token; {args.repeats} runs alternating")
    print(f"{'tokens':>7} {'ours us (graph)':>18} {'peer us (graph)':>18} {'ours/peer speed':>15} {'floor us':>9} "
          f"{'% of copy':>9}  {'eager ours/peer us':>18}  max rel_l2 vs peer")
    refused = False
    for t in (int(v) for v in args.tokens.split(",")):
        X = torch.randn(1, t, g.hc_mult, g.hidden_size, device="cuda", dtype=torch.bfloat16)
        a, b = ours.fused_coefficients_collapse(w, X), peer.fused_coefficients_collapse(w, X)
        gate = oracle_gate(w, X, a)
        over = {q: e for q, e in gate.items() if not e <= bench_bound("mhc", "coefficients", q, "bfloat16")}
        if over:
            print(f"{t:7d} REFUSED: above the bench_gate bound vs the float64 oracle: {over}", flush=True)
            out["rows"].append({"tokens": t, "oracle_rel_l2": gate, "refused": True})
            refused = True
            continue
        err = max(rel_l2(to_np(x), to_np(y)) for x, y in zip(a, b))
        calls = {"ours": lambda: ours.fused_coefficients_collapse(w, X),
                 "peer": lambda: peer.fused_coefficients_collapse(w, X)}
        replays = {k: graph(f) for k, f in calls.items()}
        times = {k: [] for k in ("ours", "peer", "ours_eager", "peer_eager")}
        for _ in range(args.repeats):
            for k in ("ours", "peer"):
                times[k].append(do_bench(replays[k]) * 1e3)
                times[k + "_eager"].append(do_bench(calls[k]) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        floor_us = floor_bytes(g, t) / ceiling * 1e6
        row = {"tokens": t, "oracle_rel_l2": gate, "ours_us": times["ours"], "peer_us": times["peer"], "ours_median_us": med["ours"],
               "ours_eager_median_us": med["ours_eager"], "peer_eager_median_us": med["peer_eager"],
               "peer_median_us": med["peer"], "speed_ours_over_peer": med["peer"] / med["ours"],
               "floor_us": floor_us, "ours_pct_of_copy": 100 * floor_us / med["ours"], "max_rel_l2_vs_peer": err}
        out["rows"].append(row)

        def spread(v):
            return f"{statistics.median(v):7.1f} [{min(v):.1f}-{max(v):.1f}]"
        print(f"{t:7d} {spread(times['ours']):>18} {spread(times['peer']):>18} {row['speed_ours_over_peer']:14.2f}x "
              f"{floor_us:9.2f} {row['ours_pct_of_copy']:8.1f}%  {med['ours_eager']:8.1f} / {med['peer_eager']:7.1f}  "
              f"{err:.2e}", flush=True)
    write_json(args.json, out)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
