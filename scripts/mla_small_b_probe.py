"""Issue 14 after step 40: the sparse absorbed MLA decode below 16 query rows (ours: 16 heads a program, entry
blocks of 64, enough splits for four waves of the SMs) against 64- and 32-head programs at several split counts,
at the bench's decode shape (H = 64, r_kv = 512, 2051 selected rows: gate.bench_mla.decode_inputs), B = 1 also at
a 128K cache (the bench's row against dense SDPA); from B = 2 also step 41's candidate
(impl.candidates.mla_heads64_small: 64 heads, its own split count).

Each variant's kernel output is first held to ours' (rel-L2 printed; above 1e-2 it is not timed), then every
variant is timed as CUDA-graph replays of impl.mla.sparse_absorbed in --repeats alternating rounds.

    PYTHONPATH=. python3 scripts/mla_small_b_probe.py [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

H64 = dict(bh=64, bw=32, num_warps=8, num_stages=3)
H64_16 = dict(bh=64, bw=16, num_warps=8, num_stages=3)
H32 = dict(bh=32, bw=32, num_warps=8, num_stages=3)
# (B, T): [(name, config, splits)]
RUNS = {(1, 32768): [("h64_ns32", H64, 32), ("h64_ns64", H64, 64), ("h64bw16_ns64", H64_16, 64),
                     ("h64bw16_ns128", H64_16, 128), ("h32_ns32", H32, 32), ("h32_ns64", H32, 64)],
        (1, 131072): [("h64_ns64", H64, 64), ("h64bw16_ns128", H64_16, 128), ("h32_ns64", H32, 64)],
        (2, 32768): [("h64_ns32", H64, 32), ("h64_ns64", H64, 64), ("h32_ns32", H32, 32)],
        (4, 32768): [("h64_ns16", H64, 16), ("h64_ns32", H64, 32), ("h32_ns16", H32, 16)],
        (8, 32768): [("h64_ns8", H64, 8), ("h64_ns16", H64, 16), ("h64_ns32", H64, 32)],
        (12, 32768): [("h64_ns8", H64, 8), ("h64_ns11", H64, 11), ("h64_ns16", H64, 16)]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mla import DN, R, W, decode_inputs
    from gate.benchlib import alternating, copy_ceiling, graph, rel_l2, to_np, write_json
    from impl import mla as im
    from impl.candidates.mla_heads64_small import mla as sm
    copy_bw = copy_ceiling()
    print(f"copy ceiling {copy_bw / 1e12:.2f} TB/s", flush=True)
    out, sc = {"copy_TBps": copy_bw / 1e12}, DN ** -0.5
    for (B, T), runs in RUNS.items():
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, T)
        ref = im.sparse_absorbed(q_abs, latent, idx, lengths, sc)
        fns = {"ours": graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, sc))}
        if B >= 2:
            # step 41's candidate (64 heads from 2 rows on, its own split count): its exact launch
            e = rel_l2(to_np(sm.sparse_absorbed(q_abs, latent, idx, lengths, sc)), to_np(ref))
            print(f"B={B} T={T} step41: rel-L2 to ours {e:.2e}", flush=True)
            if e <= 1e-2:
                fns["step41"] = graph(lambda: sm.sparse_absorbed(q_abs, latent, idx, lengths, sc))
        for name, cfg, ns in runs:
            e = rel_l2(to_np(im.sparse_absorbed(q_abs, latent, idx, lengths, sc, ns, cfg)), to_np(ref))
            print(f"B={B} T={T} {name}: rel-L2 to ours {e:.2e}", flush=True)
            if e <= 1e-2:
                fns[name] = graph(lambda cfg=cfg, ns=ns: im.sparse_absorbed(q_abs, latent, idx, lengths, sc, ns, cfg))
        res = alternating(fns, args.repeats)
        floor_us = 1e6 * B * W * R * 2 / copy_bw
        for n, r in res.items():
            print(f"  B={B} T={T} {n:14s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}] "
                  f"{100 * floor_us / r['median_us']:5.1f} % of copy  ours/this {res['ours']['median_us'] / r['median_us']:.3f}x",
                  flush=True)
        out[f"B{B}_T{T}"] = res
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
