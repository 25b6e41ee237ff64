"""Kernel launches of one decoder layer's decode step per layer kind, counted on the CPU (issue 14 step 2).

The tiny geometry's layers (gate.bench_layer.random_layer, NVFP4 experts), a random 17-token cache,
one decode token per row, the capture path (impl.graph.simulated_capture): impl.host_sync.count_launches
counts the Triton launches and the torch ops that launch a device kernel. The count follows the layer's
structure, not its sizes (the full geometry launches the same kernels, except flash-decoding's split
count, chosen from the SM count: the combine kernel runs on both). Also prints the host syncs (none
expected).

    PYTHONPATH=. python3 scripts/launch_count.py [--batch 1] [--ops] [--impl impl.candidates.norms_torch:Candidate]

(--impl impl.candidates.norms_torch:Candidate counts the torch norms ours had before issue 14 step 14.)
"""
import argparse
import sys

import torch

sys.path.insert(0, "tests")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--ops", action="store_true", help="print the torch ops of each kind")
    p.add_argument("--impl", default="triton", help="the implementation (a candidate: pkg.mod:obj)")
    args = p.parse_args()
    import test_host_sync as t
    from impl.graph import simulated_capture
    from impl.host_sync import count_launches, record_host_syncs
    from impl import registry
    from impl.model import decoder_layer
    be = registry.get(args.impl)
    for kind in ("kda+dense", "kda+sparse", "dsa-full+sparse", "dsa-shared+sparse"):
        lw, full = t._layers(kind, True)
        x1, m1, cache, prev = t._context(lw, full, args.batch, seed=1)
        decoder_layer(lw, t.G, x1, m1, cache, prev, be)   # the eager warm-up (NVFP4 scale scans, once per tensor)
        with simulated_capture(), record_host_syncs() as syncs, count_launches() as n:
            decoder_layer(lw, t.G, x1, m1, cache, prev, be)
        print(f"{kind:18s} B={args.batch}: {n['triton'] + n['torch']:4d} launches "
              f"(triton {n['triton']}, torch {n['torch']}); host syncs {len(syncs)}")
        print(f"    triton: {dict(sorted(n['triton_kernels'].items()))}")
        if args.ops:
            print(f"    torch: {dict(sorted(n['torch_ops'].items(), key=lambda kv: -kv[1]))}")


if __name__ == "__main__":
    main()
