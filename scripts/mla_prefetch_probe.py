"""Issue 14 step 38's probe: the sparse absorbed MLA decode kernel with the next block's selection entries
loaded a block ahead (ours since step 38) against the kernel before it (prefetch=False) in the same run, at the
bench's decode shapes (H = 64, r_kv = 512, 2051 selected rows of a 32K cache, gate.bench_mla).

Each variant is first compared bit for bit with ours on the same inputs (the kernel's float32 output), then
timed (CUDA-graph replays of impl.mla.sparse_absorbed alone) in `--repeats` alternating rounds, each the median of
a do_bench loop; prints median [min-max], the percentage of copy speed (the selected rows' bytes at the copy
ceiling measured in the same run) and the ratio to ours.

    PYTHONPATH=. python3 scripts/mla_prefetch_probe.py [--batches 1,32,128] [--repeats 5] [--json F] [--configs JSON]
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

# ours (since step 38: the next block's entries a block ahead) and ours before it; stop 44f's first probe also
# timed the rows a block ahead (5-9 % slower, not kept) and each with num_stages 1 (slower)
VARIANTS = (("ours", {}), ("no_prefetch", dict(prefetch=False)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", default="1,32,128")
    p.add_argument("--cache", type=int, default=32768)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--configs", default=None,
                   help='more variants, a JSON object {name: config}, e.g. \'{"bh64": {"bh": 64, "bw": 16, '
                        '"num_warps": 8, "num_stages": 3}}\' (impl.mla.sparse_absorbed\'s config keys)')
    args = p.parse_args(argv)
    variants = VARIANTS + (tuple(json.loads(args.configs).items()) if args.configs else ())
    from gate.bench_mla import DN, R, W, decode_inputs
    from gate.benchlib import alternating, copy_ceiling, graph, write_json
    from impl import mla as im
    copy_bw = copy_ceiling()
    print(f"copy ceiling {copy_bw / 1e12:.2f} TB/s")
    out = {}
    T = args.cache
    for B in (int(x) for x in args.batches.split(",")):
        _, latent, q, idx, lengths, q_abs = decode_inputs(B, T)
        ref = im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)
        fns, differ = {}, []
        for name, cfg in variants:
            try:
                o = im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5, None, cfg)
            except Exception as e:  # a tile that does not fit is a result, not a failure
                print(f"B={B} {name}: {type(e).__name__}: {str(e)[:160]}")
                continue
            if not torch.equal(o, ref):
                differ.append(name)
                print(f"B={B} {name}: NOT ours' bits (max |difference| {float((o - ref).abs().max()):.2e})")
            fns[name] = graph(lambda cfg=cfg: im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5, None, cfg))
        floor_us = 1e6 * B * W * R * 2 / copy_bw
        res = alternating(fns, args.repeats)
        for n, r in res.items():
            print(f"  B={B} {n:14s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"{100 * floor_us / r['median_us']:5.1f} % of copy  ours/this {res['ours']['median_us'] / r['median_us']:.3f}x")
        out[B] = {"results": res, "floor_us": floor_us, "not_ours_bits": differ}
        del latent, q, q_abs, idx, ref
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
