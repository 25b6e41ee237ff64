"""Issue 14 step 45's B = 1 probe: the sparse absorbed MLA decode (impl.mla.attend) of ours against step 45's final
candidate (impl.candidates.mla_splits_b1: 33 one-block splits at one query row, merged in one load of 64 splits,
the rank in chunks of a 8192-element tile) and that candidate with merge tiles of 4096 (BJ 64 x 64 ranks: 512
programs at rank 512) and 16384 (BJ 64 x 256 ranks; 4 warps as ours: 128 float32 a thread), at B = 1 (128K and 32K) and B = 2 (a control: ours'
launch in every form). Each form held to the float64 oracle first (gate.bench_mla._check_decode), then timed as
CUDA-graph replays in --repeats alternating rounds (the bench's zeroing L2 flush), then the profiler's kernel times.

    PYTHONPATH=. python3 scripts/mla_b1_merge_probe.py [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch
import triton

SHAPES = ((1, 131072), (1, 32768), (2, 32768))


def _tile_plan(tile: int):
    def plan(NS: int, BR: int) -> tuple:
        BJ = min(64, triton.next_power_of_2(NS))
        return BJ, min(BR, max(8, tile // BJ))
    return plan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mla import _check_decode, decode_inputs
    from gate.benchlib import alternating, graph, kernel_times, write_json
    from impl import mla as im
    from impl.candidates import mla_splits_b1
    from impl.candidates.mla_heads64 import module_copy
    forms = {"ours": im, "b1": mla_splits_b1.mla}
    for tile in (4096, 16384):
        m = module_copy(f"probe_b1_t{tile}")
        m._splits, m._merge_plan = mla_splits_b1._splits, _tile_plan(tile)
        forms[f"b1_t{tile}"] = m
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        fns = {}
        for name, ns in forms.items():
            e = _check_decode(w, q, latent, idx, lengths, sorted({0, B - 1}), ns)
            print(f"B={B} T={T} {name}: rel-L2 {e:.2e} (oracle)", flush=True)
            if e <= 2e-2:
                fns[name] = graph(lambda ns=ns: ns.attend(w, q, latent, idx, lengths))
        res = alternating(fns, args.repeats)
        for n, r in res.items():
            print(f"  B={B} T={T} {n:10s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
        out[f"B{B}_T{T}"] = dict(times=res)
        if (B, T) == SHAPES[0]:
            for name, ns in forms.items():
                ks = kernel_times(lambda ns=ns: ns.attend(w, q, latent, idx, lengths), calls=20, width=60)
                print(f"  kernels of {name}: " + "; ".join(f"{k} {us:.2f}" for k, us in ks.items()), flush=True)
                out[f"B{B}_T{T}"][f"kernels_{name}"] = ks
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
