"""Issue 14 step 54's probe: where the sparse MLA decode's fixed cost goes at B = 16-128 (32K cache, one query a row),
ours (the producer kernel since step 49, blocks of 64 from 16 rows, entries a block ahead since step 52).

The question (docs/optimization_log.md "Step 54"): ours' kernel time fits T = F + n·b over its blocks of 64 entries a
program (stop 55: b ~3.5 us a block; F ~25-27 us where the selection is split in 2-8 and the split merge runs,
~15 us at B = 128 where it is not). B = 32's 50 % of copy needs T <= 44.5 us against 58.5: a block fewer is 3.5 us,
the split's fixed cost is more. This probe measures, in one run:

  parts     per shape, the device time of each kernel of sparse_absorbed (the sparse kernel, the merge) and of the
            whole decode (attend: the W_UK fold, the kernel, the merge, W_UV), from the profiler, beside the
            CUDA-graph replay's time of each (what the profiler does not see is launch and gaps)
  blocks    the sparse kernel alone (profiler device time) and sparse_absorbed (graph replay) against the blocks a
            program runs: B = 32 in 4 splits and B = 128 unsplit, the selection cut to n blocks of 64 a program;
            a least-squares line through each: its intercept (F, the fixed cost) and slope (b, a block)
  splits    B = 32 and 16 at 1, 2, 4 and 8 splits (the wave: 4 x 32 programs on 132 SMs is one)

    PYTHONPATH=. python3 scripts/mla_fixed_probe.py [--json F]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def _fit(xs, ys):
    """Least squares y = F + b·x: (F, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def _kernel_us(fn, name: str) -> float:
    """Device time per call of the kernels whose name contains `name` (profiler)."""
    from gate.benchlib import kernel_times
    return sum(t for k, t in kernel_times(fn, calls=10, top=None, width=None).items() if name in k)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from gate.bench_mla import DN, decode_inputs
    from gate.benchlib import do_bench, graph, kernel_times
    from impl import mla as im
    scale = DN ** -0.5
    res = {"device": torch.cuda.get_device_name(), "parts": {}, "blocks": {}, "splits": {}}
    print(f"device {res['device']}", flush=True)

    for B in (16, 32, 64, 128):
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, 32768)
        kern = lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, scale)
        att = lambda: im.attend(w, q, latent, idx, lengths)
        row = {"kernel_graph_us": do_bench(graph(kern)) * 1e3, "attend_graph_us": do_bench(graph(att)) * 1e3,
               "kernel_parts": kernel_times(kern, calls=10, top=None, width=70),
               "attend_parts": kernel_times(att, calls=10, top=None, width=70),
               "splits": im._launch(q_abs.device, B, q_abs.shape[2], idx.shape[-1], latent.shape[-1])["splits"]}
        res["parts"][B] = row
        print(f"B={B} splits {row['splits']}: sparse_absorbed {row['kernel_graph_us']:.2f} us (graph), "
              f"device {sum(row['kernel_parts'].values()):.2f}: " +
              ", ".join(f"{k[:40]} {v}" for k, v in row["kernel_parts"].items()), flush=True)
        print(f"      attend {row['attend_graph_us']:.2f} us (graph), device {sum(row['attend_parts'].values()):.2f}: " +
              ", ".join(f"{k[:40]} {v}" for k, v in row["attend_parts"].items()), flush=True)

    for B, NS, ns_blocks in ((32, 4, (1, 2, 3, 5, 7, 9)), (128, 1, (1, 2, 3, 5, 9, 17, 33))):
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, 32768)
        pts = []
        for n in ns_blocks:
            Wn = min(idx.shape[-1], NS * 64 * n)
            sub = idx[..., :Wn].contiguous()
            fn = lambda: im.sparse_absorbed(q_abs, latent, sub, lengths, scale, NS)
            g = do_bench(graph(fn)) * 1e3
            dev = _kernel_us(fn, "mla_sparse_absorbed")
            pts.append({"blocks": n, "W": Wn, "graph_us": g, "kernel_us": dev})
            print(f"  B={B} splits {NS}: {n:2d} blocks of 64 a program (W {Wn}): sparse_absorbed {g:.2f} us (graph), "
                  f"sparse kernel {dev:.2f} us (device)", flush=True)
        fk, bk = _fit([p["blocks"] for p in pts], [p["kernel_us"] for p in pts])
        fg, bg = _fit([p["blocks"] for p in pts], [p["graph_us"] for p in pts])
        res["blocks"][f"B{B}_NS{NS}"] = {"points": pts, "kernel_fit": [fk, bk], "graph_fit": [fg, bg]}
        print(f"  B={B} splits {NS}: sparse kernel = {fk:.2f} + {bk:.3f}·blocks us; sparse_absorbed (graph) = "
              f"{fg:.2f} + {bg:.3f}·blocks us", flush=True)

    for B in (16, 32):
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, 32768)
        for NS in (1, 2, 4, 8):
            fn = lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, scale, NS)
            g = do_bench(graph(fn)) * 1e3
            parts = kernel_times(fn, calls=10, top=None, width=70)
            res["splits"][f"B{B}_NS{NS}"] = {"graph_us": g, "parts": parts}
            print(f"  B={B} {NS} splits: sparse_absorbed {g:.2f} us (graph); " +
                  ", ".join(f"{k[:40]} {v}" for k, v in parts.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
